import json
from pathlib import Path

import pytest

from wasmexec._exceptions import ConfigError
from wasmexec._tools.config import load_config, parse_config


def test_stdio_and_http_servers_are_read() -> None:
    config = parse_config({"mcpServers": {
        "gh": {"command": "npx", "args": ["-y", "x"], "env": {"TOKEN": "secret-value"}, "cwd": "/tmp"},
        "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer abc"}},
        "typed": {"type": "http", "url": "http://127.0.0.1:1/mcp"},
        "off": {"command": "x", "disabled": True},
    }})  # fmt: skip
    assert set(config.servers) == {"gh", "remote", "typed"}
    assert config.servers["gh"].transport == "stdio" and config.servers["gh"].args == ("-y", "x")
    assert config.servers["remote"].transport == "http"
    assert sorted(config.servers["gh"].secrets() + config.servers["remote"].secrets()) == ["Bearer abc", "secret-value"]
    assert config.problems == ()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({}, 'needs "command"'),
        ({"command": ""}, '"command" must be a non-empty string'),
        ({"command": "x", "args": "not a list"}, '"args" must be a list of strings'),
        ({"command": "x", "env": {"A": 1}}, '"env" must be an object of strings'),
        ({"url": "ftp://x"}, "http:// or https://"),
        ({"command": "x", "url": "http://x"}, "choose one transport"),
        ({"type": "sse", "url": "http://x"}, "SSE transport is not supported"),
        ({"command": "x", "bogus": 1}, "unknown keys ['bogus']"),
        ("a string", "expected an object"),
        ({"command": "x", "timeout": 0}, '"timeout" must be a positive number of seconds'),
        ({"command": "x", "timeout": "60"}, '"timeout" must be a positive number of seconds'),
        ({"url": "http://x", "timeout": True}, '"timeout" must be a positive number of seconds'),
        ({"command": "x", "secrets": "TOKEN"}, '"secrets" must be a list of strings'),
    ],
)
def test_a_bad_entry_is_skipped_with_a_problem_naming_it(entry: object, message: str) -> None:
    config = parse_config({"mcpServers": {"bad": entry, "good": {"command": "ok"}}}, source="my.json")
    assert list(config.servers) == ["good"]
    (problem,) = config.problems
    assert problem.server_id == "bad" and message in problem.message and "my.json" in problem.message


def test_an_unusable_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match=r"broken\.json: not valid JSON"):
        load_config(broken)
    broken.write_text(json.dumps({"servers": {}}))
    with pytest.raises(ConfigError, match='"mcpServers"'):
        load_config(broken)


def test_the_fingerprint_ignores_secret_values_but_not_identity() -> None:
    def fingerprint(entry: dict[str, object]) -> str:
        return parse_config({"mcpServers": {"s": entry}}).servers["s"].fingerprint

    base: dict[str, object] = {"command": "x", "env": {"TOKEN": "one"}}
    assert fingerprint(base) == fingerprint({"command": "x", "env": {"TOKEN": "two"}})
    assert fingerprint(base) != fingerprint({"command": "y", "env": {"TOKEN": "one"}})
    assert fingerprint(base) != fingerprint({"command": "x", "env": {"OTHER": "one"}})


def test_a_servers_own_timeout_is_read_in_seconds_and_defaults_to_none() -> None:
    config = parse_config({"mcpServers": {"a": {"command": "x", "timeout": 12.5}, "b": {"url": "http://h/mcp"},
                                          "c": {"url": "http://h/mcp", "timeout": 60}}})  # fmt: skip
    assert config.servers["a"].timeout == 12.5 and config.servers["c"].timeout == 60.0
    assert config.servers["b"].timeout is None


def test_only_env_and_header_values_that_are_secrets_go_to_the_redactor() -> None:
    config = parse_config({"mcpServers": {
        "stdio": {"command": "x", "env": {"TZ": "Europe/Berlin", "LANG": "en_US.UTF-8", "GITHUB_TOKEN": "tok-value-1",
                                          "DB_NAME": "customers", "DB_HOST": "db.internal"}, "secrets": ["DB_NAME"]},
        "http": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer abc", "Accept": "text/plain",
                                                               "X-Tenant": "acme-corp", "X-Api-Key": "k-123456"}},
    }})  # fmt: skip
    assert sorted(config.servers["stdio"].secrets()) == ["customers", "tok-value-1"]
    assert sorted(config.servers["http"].secrets()) == ["Bearer abc", "k-123456"]
    assert config.servers["stdio"].secret_names == ("DB_NAME",)
