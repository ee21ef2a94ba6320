import json
from pathlib import Path

import pytest

from wasmexec._exceptions import ConfigError
from wasmexec._tools.policy import Policy, RateLimiter, load_policy, parse_policy, tool_names


def test_everything_is_allowed_but_destructive_tools_need_approval_by_default() -> None:
    policy = Policy()
    assert policy.decide("gh", "list_issues", {"readOnlyHint": True}) == "allow"
    assert policy.decide("fs", "write_file", {"destructiveHint": True}) == "approve"
    assert policy.decide("fs", "write_file", None) == "allow"


def test_deny_wins_over_allow_and_unlisted_tools_are_denied() -> None:
    policy = Policy(allow=("gh.*",), deny=("gh.delete_*",))
    assert policy.decide("gh", "list_issues", None) == "allow"
    assert policy.decide("gh", "delete_repo", None) == "deny"
    assert policy.decide("fs", "read_file", None) == "deny"


def test_listed_tools_need_approval_and_pre_approved_ones_are_told_apart() -> None:
    policy = Policy(require_approval=("gh.create_*",), pre_approved=("fs.write_file", "gh.list_*"))
    assert policy.decide("gh", "create_issue", None) == "approve"
    assert policy.decide("fs", "write_file", {"destructiveHint": True}) == "pre_approved"
    assert policy.decide("gh", "list_issues", None) == "allow"  # needs no approval: nothing to pre-approve
    assert Policy(approve_destructive=False).decide("fs", "write_file", {"destructiveHint": True}) == "allow"


# `tools list` shows `everything.get_sum` for the protocol name `get-sum` of server `everything`.
NAMES = {"export_name": "get_sum", "module": "everything"}


@pytest.mark.parametrize("glob", ["everything.get-sum", "everything.get_sum", "everything.get_*", "*.get_sum"])
def test_deny_matches_protocol_and_python_names(glob: str) -> None:
    assert Policy(deny=(glob,)).decide("everything", "get-sum", None, **NAMES) == "deny"
    assert Policy(allow=(glob,)).decide("everything", "get-sum", None, **NAMES) == "allow"
    assert Policy(require_approval=(glob,)).decide("everything", "get-sum", None, **NAMES) == "approve"


@pytest.mark.parametrize("glob", ["google_drive.list_files", "google-drive.list_files", "google_drive.list-files",
                                  "google-drive.list-files", "google_drive.*"])  # fmt: skip
def test_globs_match_the_server_id_and_the_module_name_in_either_form(glob: str) -> None:
    names = {"export_name": "list_files", "module": "google_drive"}
    assert Policy(deny=(glob,)).decide("google-drive", "list-files", None, **names) == "deny"
    policy = Policy(require_approval=("google-drive.*",), pre_approved=(glob,))
    assert policy.decide("google-drive", "list-files", None, **names) == "pre_approved"


def test_a_python_name_never_widens_a_deny_to_other_tools() -> None:
    policy = Policy(deny=("everything.get_sum",))
    assert policy.decide("everything", "get-total", None, export_name="get_total", module="everything") == "allow"


def test_tool_names_lists_every_form_a_glob_may_use() -> None:
    assert tool_names("google-drive", "list-files", "list_files", "google_drive") == {
        "google-drive.list-files", "google-drive.list_files", "google_drive.list-files", "google_drive.list_files"
    }  # fmt: skip
    assert tool_names("s", "t") == {"s.t"}


def test_globs_that_match_no_configured_tool_are_reported() -> None:
    policy = Policy(allow=("everything.*", "time.*"), deny=("everything.get_sum", "githb.*", "everything.nope"),
                    require_approval=("get_sum",), pre_approved=("everything.get_*",))  # fmt: skip
    names = tool_names("everything", "get-sum", "get_sum", "everything") | tool_names("time", "now", "now", "time")
    warnings = policy.unmatched_globs(names)
    assert len(warnings) == 3
    assert any("'githb.*'" in w and "deny" in w for w in warnings)
    assert any("'everything.nope'" in w for w in warnings)
    assert any("'get_sum'" in w and "require_approval" in w for w in warnings)
    assert Policy().unmatched_globs(set()) == []  # the default allow-all is never a mistake


def test_before_every_listing_is_known_only_globs_naming_no_configured_server_are_reported() -> None:
    policy = Policy(deny=("githb.*", "github.nope", "git*.x", "google_drive.x", "a.b*"))
    warnings = policy.unmatched_globs(set(), prefixes={"github", "google-drive", "google_drive", "a.bc"},
                                      complete=False)  # fmt: skip
    assert len(warnings) == 1 and "'githb.*'" in warnings[0]


def test_a_toml_and_a_json_policy_are_read(tmp_path: Path) -> None:
    toml = tmp_path / "policy.toml"
    toml.write_text('allow = ["a.*"]\ndeny = ["a.b"]\nmax_tool_calls = 5\n[rate_limits]\na = 2\n')
    policy = load_policy(toml)
    assert policy.allow == ("a.*",) and policy.deny == ("a.b",) and policy.max_tool_calls == 5
    assert policy.rate_limits == {"a": 2.0}
    (tmp_path / "policy.json").write_text(json.dumps({"require_approval": ["x.*"], "approve_destructive": False,
                                                      "pre_approved": ["x.y"]}))  # fmt: skip
    assert load_policy(tmp_path / "policy.json").require_approval == ("x.*",)
    assert load_policy(tmp_path / "policy.json").pre_approved == ("x.y",)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"allow": "x.*"}, "list of 'server.tool' globs"),
        ({"bogus": 1}, "unknown policy settings"),
        ({"rate_limits": {"a": -1}}, "positive calls per second"),
        ({"max_tool_calls": -2}, "non-negative integer"),
        ({"approve_destructive": "yes"}, "true or false"),
        ([], "object"),
    ],
)
def test_a_bad_policy_is_a_config_error_naming_the_setting(document: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_policy(document, "p.json")


def test_an_unreadable_policy_file_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "p.toml"
    bad.write_text("allow = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_policy(bad)


def test_the_rate_limiter_allows_a_burst_then_spaces_calls() -> None:
    now = [0.0]
    limiter = RateLimiter({"s": 2.0}, clock=lambda: now[0])
    assert [limiter.delay("s") for _ in range(2)] == [0.0, 0.0]  # a burst of one second's worth
    assert limiter.delay("s") == pytest.approx(0.5)
    now[0] = 10.0
    assert limiter.delay("s") == 0.0  # refilled
    assert limiter.delay("other") == 0.0  # no limit configured
