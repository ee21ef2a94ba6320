from dataclasses import dataclass

import pytest

from wasmexec._tools.catalog import did_you_mean
from wasmexec._tools.search import MAX_FUZZY_WORDS, MAX_QUERY_WORDS, SearchIndex, tokens


@dataclass(frozen=True)
class Tool:
    tool_name: str
    export_name: str
    description: str


TOOLS = [
    Tool("create_issue", "create_issue", "Create a new issue in a repository."),
    Tool("list_issues", "list_issues", "List issues of a repository, filtered by label."),
    Tool("send-email", "send_email", "Send an email message to a recipient."),
    Tool("getUser", "get_user", "Fetch one user profile."),
    Tool("echo", "echo", "Echo back the message."),
]


def names(query: str, limit: int = 5) -> list[str]:
    return [tool.tool_name for _, tool in SearchIndex(TOOLS).search(query, limit)]


def test_tokens_split_words_and_camel_case() -> None:
    assert tokens("getUserHTTP-id 42") == ["get", "user", "http", "id", "42"]


def test_an_exact_name_ranks_first_by_protocol_or_python_name() -> None:
    assert names("echo")[0] == "echo"
    assert names("send_email")[0] == "send-email"


def test_name_words_outrank_description_words() -> None:
    assert names("issue")[:2] == ["create_issue", "list_issues"] or names("issue")[0] == "create_issue"
    assert names("message")[0] in ("send-email", "echo")
    assert names("user")[0] == "getUser"


def test_multi_word_queries_add_up() -> None:
    assert names("create issue")[0] == "create_issue"
    assert names("email recipient")[0] == "send-email"


def test_typos_are_found_fuzzily_and_nonsense_finds_nothing() -> None:
    assert names("isue")[0] in ("create_issue", "list_issues")
    assert names("zzzz qqqq") == []
    assert names("") == []


def test_the_limit_is_respected() -> None:
    assert len(names("a", limit=2)) <= 2


def test_only_the_first_words_of_a_huge_query_count() -> None:
    index = SearchIndex(TOOLS)
    flood = " ".join(f"zz{n}" for n in range(MAX_QUERY_WORDS)) + " echo"
    assert index.search(flood, 5) == []
    assert next(tool.tool_name for _, tool in index.search("echo " + flood, 5)) == "echo"


def test_fuzzy_matching_asks_before_each_word_and_can_be_stopped() -> None:
    asked: list[int] = []

    def check() -> None:
        asked.append(1)
        if len(asked) > 1:
            raise TimeoutError

    with pytest.raises(TimeoutError):
        SearchIndex(TOOLS).search("isue emial usr", 5, check=check)
    assert len(asked) == 2


def test_at_most_a_few_unknown_words_are_matched_fuzzily() -> None:
    asked: list[int] = []
    SearchIndex(TOOLS).search(" ".join(f"qq{n}" for n in range(20)), 5, check=lambda: asked.append(1))
    assert len(asked) == MAX_FUZZY_WORDS


def test_a_typo_of_a_known_name_is_suggested_and_an_overlong_name_gets_no_suggestion() -> None:
    names = [tool.tool_name for tool in TOOLS]
    assert did_you_mean("create_isue", names)[0] == "create_issue"
    assert did_you_mean("create_issue" * 100, names) == []
    assert did_you_mean("", names) == []
