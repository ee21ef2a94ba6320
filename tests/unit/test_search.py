from dataclasses import dataclass

from wasmexec._tools.search import SearchIndex, tokens


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
