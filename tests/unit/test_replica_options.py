"""`serve --replica-id` and `--drain-timeout`: their defaults and what they accept."""

from __future__ import annotations

import argparse
import os
import socket

import pytest

from wasmexec._cli import serve
from wasmexec._server import shutdown


def test_the_default_replica_id_is_the_host_name_and_the_pid() -> None:
    assert serve.default_replica_id() == f"{socket.gethostname()}-{os.getpid()}"


def test_the_cli_default_drain_timeout_mirrors_the_servers() -> None:
    assert serve.DEFAULT_DRAIN_TIMEOUT_S == shutdown.DEFAULT_DRAIN_TIMEOUT_S


@pytest.mark.parametrize("text", ["web-1", "wasmexec-7d9f8-abcde", "host.example:4242", "a" * 128])
def test_a_replica_id_of_name_characters_is_accepted(text: str) -> None:
    assert serve._replica_id(text) == text


@pytest.mark.parametrize("text", ["", "-x", "a b", "a\nb", 'a"b', "a" * 129, "é"])
def test_a_replica_id_that_would_garble_a_log_line_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        serve._replica_id(text)
