"""The secret rule: which configured env and header values the redactor hides."""

from __future__ import annotations

import base64

import pytest

from wasmexec._redact import is_secret

RANDOM_BASE64 = base64.b64encode(bytes.fromhex("8f3a9c2be71d4f6088a1c5d3e9b72f41a6d08c3e5b19f7a2")).decode()  # 32 chars
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5" * 3 + "F6g7H8"


@pytest.mark.parametrize(
    "name",
    [
        "GITHUB_TOKEN", "API_KEY", "X-Api-Key", "DB_PASSWORD", "PASSWD", "PRIVATE_KEY_PEM", "SESSION",
        "CLIENT_SECRET", "AWS_SECRET_ACCESS_KEY", "SLACK_AUTH", "GOOGLE_CREDENTIALS", "Cookie", "Authorization",
        "Proxy-Authorization", "apiKey", "accessToken", "X-Auth-Token", "PGPASSWORD", "OPENAI_APIKEY",
    ],
)  # fmt: skip
def test_a_name_that_says_secret_makes_any_value_a_secret(name: str) -> None:
    assert is_secret(name, "production")


@pytest.mark.parametrize(
    "value",
    ["Europe/Berlin", "/usr/local/bin", "https://example.com/api", "production", "en_US.UTF-8",
     "/home/user/Projects/MyApp2024", "org.example.MyApplication", "postgres://localhost:5432/mydb",
     "--local-timezone=UTC", "123e4567-e89b-12d3-a456-426614174000", "12345678901234567890123",
     "node_modules/.bin/mcp-server-filesystem", "The Quick Brown Fox Jumps Over 13 Lazy Dogs",
     "C:\\Users\\JohnDoe2\\AppData\\Roaming", "/opt/homebrew/Cellar/python@3.12/3.12.1/bin/python3",
     "registry.example.com/MyTeam/image:v1.2.3", "Microsoft.VisualStudio2022.Community",
     "https://api.github.com/repos/Owner1/Repo", "v1.2.3-rc.4+build.5678.abcdef"],
)  # fmt: skip
def test_ordinary_values_under_ordinary_names_are_not_secrets(value: str) -> None:
    for name in ("TZ", "PATH", "BASE_URL", "APP_ENV", "LANG", "HOME", "MONKEY", "KEYBOARD_LAYOUT", "AUTHOR"):
        assert not is_secret(name, value), (name, value)


@pytest.mark.parametrize("value", [GITHUB_TOKEN, RANDOM_BASE64, JWT, "sk-" + "Z9y8X7w6V5" * 4, "AKIAABCDEFGHABCDEFGH"])
def test_a_value_that_looks_like_a_credential_is_a_secret_under_any_name(value: str) -> None:
    assert is_secret("SOMETHING", value)


def test_names_marked_in_the_config_are_secrets_whatever_they_are_called_or_hold() -> None:
    assert is_secret("DB_NAME", "customers", marked=["db_name"])
    assert not is_secret("DB_NAME", "customers", marked=["OTHER"])
