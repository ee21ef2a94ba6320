import json
from pathlib import Path

import pytest

from wasmexec._exceptions import ConfigError
from wasmexec._tools.policy import Policy, RateLimiter, load_policy, parse_policy


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


def test_listed_tools_need_approval_and_pre_approved_ones_do_not() -> None:
    policy = Policy(require_approval=("gh.create_*",), pre_approved=("fs.write_file",))
    assert policy.decide("gh", "create_issue", None) == "approve"
    assert policy.decide("fs", "write_file", {"destructiveHint": True}) == "allow"
    assert Policy(approve_destructive=False).decide("fs", "write_file", {"destructiveHint": True}) == "allow"


def test_a_toml_and_a_json_policy_are_read(tmp_path: Path) -> None:
    toml = tmp_path / "policy.toml"
    toml.write_text('allow = ["a.*"]\ndeny = ["a.b"]\nmax_tool_calls = 5\n[rate_limits]\na = 2\n')
    policy = load_policy(toml)
    assert policy.allow == ("a.*",) and policy.deny == ("a.b",) and policy.max_tool_calls == 5
    assert policy.rate_limits == {"a": 2.0}
    (tmp_path / "policy.json").write_text(json.dumps({"require_approval": ["x.*"], "approve_destructive": False}))
    assert load_policy(tmp_path / "policy.json").require_approval == ("x.*",)


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
