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
        ({"type": "websocket", "url": "http://x"}, 'unknown "type"'),
        ({"command": "x", "autoApprove": "read"}, '"autoApprove" must be a list of strings'),
        ({"url": "http://x", "oauth": "yes"}, '"oauth" must be true, false or an object'),
        ({"command": "${NOT_SET_ANYWHERE}"}, "${NOT_SET_ANYWHERE} is not set"),
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
    broken.write_text(json.dumps({"tools": {}}))
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


def test_keys_meant_for_other_clients_are_ignored_with_a_note_not_dropped() -> None:
    config = parse_config({"mcpServers": {
        "cline": {"command": "x", "autoApprove": ["read_file"], "timeout": 30, "watchPaths": ["/tmp"], "dev": {}},
        "roo": {"type": "streamable-http", "url": "http://h/mcp", "alwaysAllow": ["get"], "disabledTools": ["rm"]},
        "legacy": {"type": "sse", "url": "http://h/sse"},
        "windsurf": {"serverUrl": "https://h/mcp"},
        "old-cline": {"transportType": "stdio", "command": "y"},
        "off": {"command": "z", "disabled": True},
    }}, source="c.json")  # fmt: skip
    assert sorted(config.servers) == ["cline", "legacy", "old-cline", "roo", "windsurf"]
    assert config.servers["legacy"].transport == "sse"
    assert config.problems == ()
    notes = {note.server_id: note.message for note in config.notes}
    assert "ignored keys ['dev', 'watchPaths']" in notes["cline"] and "c.json" in notes["cline"]
    assert "disabled" in notes["off"]
    assert config.servers["cline"].timeout == 30.0  # Cline writes seconds, as wasmexec reads them
    assert config.servers["windsurf"].url == "https://h/mcp" and config.servers["roo"].transport == "http"
    assert config.servers["cline"].policy_globs() == (("cline.read_file",), ())
    assert config.servers["roo"].policy_globs() == (("roo.get",), ("roo.rm",))


def test_vs_code_servers_key_inputs_and_env_file_are_read(tmp_path: Path) -> None:
    (tmp_path / ".vscode").mkdir()
    (tmp_path / "dev.env").write_text("# comment\nexport REGION='eu'\nDB_PASSWORD=hunter2-xyz\n")
    path = tmp_path / ".vscode" / "mcp.json"
    path.write_text("""{
      // VS Code allows comments and trailing commas
      "inputs": [{"type": "promptString", "id": "gh-pat", "description": "GitHub PAT", "password": true}],
      "servers": {
        "gh": {"type": "stdio", "command": "${workspaceFolder}/bin/gh-mcp", "envFile": "dev.env",
               "env": {"PAT": "${input:gh-pat}", "REGION": "us"}},
      },
    }""")
    config = load_config(path, environ={"GH_PAT": "pat-value-123"})
    server = config.servers["gh"]
    assert server.command == f"{tmp_path}/bin/gh-mcp"
    assert server.env == {"REGION": "us", "DB_PASSWORD": "hunter2-xyz", "PAT": "pat-value-123"}
    assert sorted(server.secrets()) == ["hunter2-xyz", "pat-value-123"]


def test_variables_expand_in_command_args_env_url_and_headers_and_secrets_stay_redacted() -> None:
    environ = {"API_TOKEN": "tok-abcdef-123", "BIN": "/opt/bin", "REGION": "eu-west-1"}
    config = parse_config({"mcpServers": {
        "s": {"command": "${BIN}/server", "args": ["--token=${API_TOKEN}", "--region", "${REGION}", "$REGION"],
              "env": {"LEVEL": "${LOG_LEVEL:-info}", "HOME_DIR": "${env:BIN}"}},
        "h": {"url": "https://${HOST:-api.example.com}/mcp", "headers": {"Authorization": "Bearer ${API_TOKEN}"}},
    }}, environ=environ)  # fmt: skip
    stdio, http = config.servers["s"], config.servers["h"]
    assert stdio.command == "/opt/bin/server"
    assert stdio.args == ("--token=tok-abcdef-123", "--region", "eu-west-1", "$REGION")  # bare $VAR: left alone
    assert stdio.env == {"LEVEL": "info", "HOME_DIR": "/opt/bin"}
    assert http.url == "https://api.example.com/mcp" and http.headers == {"Authorization": "Bearer tok-abcdef-123"}
    assert stdio.secrets() == ["tok-abcdef-123"]  # it went into an argument, and still gets redacted
    assert "eu-west-1" not in stdio.secrets()


def test_a_missing_variable_skips_only_its_server_naming_both() -> None:
    config = parse_config({"mcpServers": {"needs": {"url": "https://h/mcp", "headers": {"X-Key": "${MY_KEY}"}},
                                          "fine": {"command": "ok"}}}, source="cfg", environ={})  # fmt: skip
    assert list(config.servers) == ["fine"]
    (problem,) = config.problems
    assert problem.server_id == "needs" and "'needs'" in problem.message and "MY_KEY" in problem.message


def test_server_entries_pre_approve_and_deny_through_the_policy() -> None:
    from wasmexec._tools.config import with_server_policy
    from wasmexec._tools.policy import Policy

    config = parse_config({"mcpServers": {"fs": {"command": "x", "autoApprove": ["write_file"],
                                                 "disabledTools": ["delete_file"]}}})  # fmt: skip
    policy = with_server_policy(Policy(), config)
    destructive = {"destructiveHint": True}
    assert policy.decide("fs", "write_file", destructive) == "pre_approved"
    assert policy.decide("fs", "move_file", destructive) == "approve"
    assert policy.decide("fs", "delete_file") == "deny"
    assert policy.decide("other", "write_file", destructive) == "approve"
