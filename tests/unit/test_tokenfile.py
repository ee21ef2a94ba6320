"""The token file of `serve --http --auth-token-file` (`wasmexec._server.tokenfile`)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.authserver import new_token, write_token_file
from wasmexec._exceptions import ConfigError
from wasmexec._server.tokenfile import TokenFileVerifier

ONE, TWO, THREE = new_token(), new_token(), new_token()


def test_each_token_names_its_principal_and_a_principal_may_have_two(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# ops\nalice {ONE}\n\n  bob   {TWO}  \nalice {THREE}\n")
    path.chmod(0o600)
    verifier = TokenFileVerifier.load(path)
    assert verifier.principals == ["alice", "bob"]
    assert [verifier.principal_of(token) for token in (ONE, TWO, THREE)] == ["alice", "bob", "alice"]
    assert verifier.principal_of(ONE[:-1]) is None and verifier.principal_of("") is None


def test_the_access_token_carries_the_principal_as_subject_and_no_issuer(tmp_path: Path) -> None:
    verifier = TokenFileVerifier.load(write_token_file(tmp_path / "tokens", {"alice": ONE}))
    token = anyio.run(verifier.verify_token, ONE)
    assert token is not None and token.subject == "alice" and token.claims is None
    assert anyio.run(verifier.verify_token, TWO) is None


def test_a_directory_or_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    for path in (tmp_path, tmp_path / "missing"):
        with pytest.raises(ConfigError):
            TokenFileVerifier.load(path)


def test_a_file_that_is_not_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_bytes(b"alice \xff" + ONE.encode())
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="UTF-8"):
        TokenFileVerifier.load(path)
