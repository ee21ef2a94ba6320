"""Secrets: strings that look like credentials come back as [REDACTED], wherever the run puts them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import data_of, error_of, log_text
from tests.integration.conftest import SECRET, SERVERS
from tests.security._support import run
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._tools.broker import Broker
from wasmexec._tools.config import parse_config

GITHUB_TOKEN_VALUE = "ghp_" + "a1B2c3D4e5" * 3 + "F6g7H8"
OPENAI_KEY_VALUE = "sk-" + "Z9y8X7w6V5" * 4
AWS_KEY_ID_VALUE = "AKIA" + "ABCDEFGH" * 2


def _in_pieces(value: str) -> str:
    """A guest expression building `value` from two halves, so the code (echoed in tracebacks) holds no key."""
    middle = len(value) // 2
    return f"({value[:middle]!r} + {value[middle:]!r})"


GITHUB_TOKEN = _in_pieces(GITHUB_TOKEN_VALUE)
OPENAI_KEY = _in_pieces(OPENAI_KEY_VALUE)
AWS_KEY_ID = _in_pieces(AWS_KEY_ID_VALUE)
VALUES = {GITHUB_TOKEN: GITHUB_TOKEN_VALUE, OPENAI_KEY: OPENAI_KEY_VALUE, AWS_KEY_ID: AWS_KEY_ID_VALUE}


def _value(expression: str) -> str:
    return VALUES[expression]


@pytest.mark.parametrize("key", [GITHUB_TOKEN, OPENAI_KEY, AWS_KEY_ID], ids=["github", "openai", "aws"])
def test_a_printed_key_comes_back_redacted(sandbox: Sandbox, key: str) -> None:
    result = sandbox.run_sync(f"print('token:', {key})")
    assert log_text(dict(result)) == "token: [REDACTED]"
    assert _value(key) not in json.dumps(result)


@pytest.mark.parametrize("key", [GITHUB_TOKEN, OPENAI_KEY], ids=["github", "openai"])
def test_a_returned_key_comes_back_redacted(sandbox: Sandbox, key: str) -> None:
    result = sandbox.run_sync(f"result = {{'token': {key}, 'nested': [{key}], {key}: 'as a key'}}")
    assert data_of(result) == {"token": "[REDACTED]", "nested": ["[REDACTED]"], "[REDACTED]": "as a key"}
    assert _value(key) not in json.dumps(result)


def test_a_key_in_an_error_message_or_on_stderr_comes_back_redacted(sandbox: Sandbox) -> None:
    result = sandbox.run_sync(f"import sys\nsys.stderr.write({OPENAI_KEY} + '\\n')\nraise ValueError({GITHUB_TOKEN})")
    assert error_of(result)["message"] == "[REDACTED]"
    text = json.dumps(result)
    assert _value(GITHUB_TOKEN) not in text
    assert _value(OPENAI_KEY) not in text


def test_a_key_written_in_small_pieces_on_one_line_comes_back_redacted(sandbox: Sandbox) -> None:
    code = f"import sys\nfor ch in {GITHUB_TOKEN}:\n    sys.stdout.write(ch)\nsys.stdout.write('\\n')"
    result = sandbox.run_sync(code)
    assert log_text(dict(result)) == "[REDACTED]"


def test_a_key_across_the_long_line_split_comes_back_redacted(runtime: Runtime) -> None:
    code = (
        "import sys\n"
        f"line = 'a' * (16 * 1024 - 10) + {GITHUB_TOKEN}\n"
        "for start in range(0, len(line), 4000):\n"  # pieces under the 8 KiB WASI write size
        "    sys.stdout.write(line[start:start + 4000])\n"
        "sys.stdout.write('\\n')\n"
    )
    result = run(runtime, code)
    token = _value(GITHUB_TOKEN)
    text = log_text(result).replace("\n", "")
    assert token[:10] not in text and token[-20:] not in text, [entry["message"][-40:] for entry in result["logs"]]


def test_configured_secrets_are_redacted_but_ordinary_env_values_survive_in_results(
    runtime: Runtime, tmp_path: Path
) -> None:
    """A real server gets TZ, a token and a name the config marks as secret; the run sees only what is not secret."""
    server = {
        "command": sys.executable, "args": [str(SERVERS / "secret_env.py")], "secrets": ["DB_NAME"],
        "env": {"TZ": "Europe/Berlin", "API_TOKEN": SECRET, "DB_NAME": "customers-db"},
    }  # fmt: skip
    code = (
        "import servers.secrets as s\n"
        "print('zone literal: Europe/Berlin')\n"
        "result = {name: await s.show_env(name=name) for name in ('TZ', 'API_TOKEN', 'DB_NAME')}\n"
    )
    with (tmp_path / "servers.log").open("w") as errlog, Broker(
        parse_config({"mcpServers": {"secrets": server}}), cache_path=tmp_path / "schemas.json", errlog=errlog,
        warn=lambda message: None,
    ) as broker:  # fmt: skip
        result = Sandbox(Limits(timeout_ms=20_000), runtime=runtime, tools=broker, redactor=broker.redactor).run_sync(
            code
        )
    shown = {name: value["result"] for name, value in data_of(result).items()}
    assert shown == {"TZ": "Europe/Berlin", "API_TOKEN": "[REDACTED]", "DB_NAME": "[REDACTED]"}
    assert log_text(dict(result)) == "zone literal: Europe/Berlin"
    assert SECRET not in json.dumps(result) and "customers-db" not in json.dumps(result)
