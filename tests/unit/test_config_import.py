import json
from pathlib import Path

import pytest

from wasmexec._tools.config_import import CLIENTS, Place, client_paths
from wasmexec._tools.expand import Expander, MissingVariable, input_variable, portable
from wasmexec._tools.jsonc import loads_jsonc

HOME, CWD = Path("/home/u"), Path("/work/p")


@pytest.mark.parametrize(
    ("platform", "environ", "desktop", "vscode_user"),
    [
        ("linux", {}, "/home/u/.config/Claude/claude_desktop_config.json", "/home/u/.config/Code/User/mcp.json"),
        ("linux", {"XDG_CONFIG_HOME": "/x"}, "/x/Claude/claude_desktop_config.json", "/x/Code/User/mcp.json"),
        ("darwin", {}, "/home/u/Library/Application Support/Claude/claude_desktop_config.json",
         "/home/u/Library/Application Support/Code/User/mcp.json"),
        ("win32", {"APPDATA": "/home/u/AppData/Roaming"}, "/home/u/AppData/Roaming/Claude/claude_desktop_config.json",
         "/home/u/AppData/Roaming/Code/User/mcp.json"),
    ],
)  # fmt: skip
def test_each_platform_has_its_clients_places(platform: str, environ: dict[str, str], desktop: str,
                                              vscode_user: str) -> None:  # fmt: skip
    place = Place(HOME, CWD, platform, environ)
    assert [str(p) for p in client_paths("claude-desktop", place)] == [desktop]
    assert [str(p) for p in client_paths("vscode", place)] == ["/work/p/.vscode/mcp.json", vscode_user]
    assert client_paths("claude-code", place) == [CWD / ".mcp.json", HOME / ".claude.json"]
    assert client_paths("windsurf", place) == [HOME / ".codeium" / "windsurf" / "mcp_config.json"]
    assert all(client_paths(client, place) for client in CLIENTS)


def test_references_expand_in_every_spelling_and_others_are_left_alone() -> None:
    expander = Expander({"A": "1", "GH_PAT": "secret-pat-value"}, home="/h", workspace="/w",
                        secret_inputs=frozenset({"gh-pat"}))  # fmt: skip
    assert expander.expand("${A}${env:A}${B:-two}${userHome}${workspaceFolder}") == "11two/h/w"
    assert expander.expand("$A ${command:x.y} ${} ${A") == "$A ${command:x.y} ${} ${A"
    assert expander.expand("${input:gh-pat}") == "secret-pat-value" and expander.secrets == ["secret-pat-value"]
    with pytest.raises(MissingVariable, match=r"\$\{MISSING\} is not set") as missing:
        expander.expand("x-${MISSING}")
    assert missing.value.name == "MISSING"
    assert input_variable("perplexity-key") == "PERPLEXITY_KEY"
    assert portable("${env:A} ${input:gh-pat} ${B:-x} ${userHome}") == "${A} ${GH_PAT} ${B:-x} ${userHome}"


def test_jsonc_comments_and_trailing_commas_are_read_but_strings_are_kept() -> None:
    text = '{"a": "http://x/*y*/", // c\n "b": [1, 2, /* z */], /* w */}'
    assert loads_jsonc(text) == {"a": "http://x/*y*/", "b": [1, 2]}
    with pytest.raises(ValueError):
        loads_jsonc('{"a": }')


def test_jsonc_reads_a_hostile_file_in_one_pass() -> None:
    with pytest.raises(ValueError):
        loads_jsonc("[1, " + "/*" * 200_000)  # an unterminated comment, many times over
    with pytest.raises(ValueError):
        loads_jsonc("[1, " + "/" * 400_001)
    assert loads_jsonc('["a\\"//b", 1, ] // end') == ['a"//b', 1]


@pytest.mark.parametrize(
    ("entry", "left_out"),
    [
        ({"command": "/usr/local/bin/wasmexec", "args": ["serve", "--config", "auto"]}, True),
        ({"command": "python3", "args": ["-m", "wasmexec", "serve"]}, True),
        ({"command": "uvx", "args": ["wasmexec[science]==0.2", "serve"]}, True),
        ({"command": "wasmexec", "args": ["run", "-c", "1"]}, False),  # not a server: nothing recurses
        ({"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]}, False),
    ],
)
def test_wasmexec_itself_is_left_out_of_imports(tmp_path: Path, entry: dict[str, object], left_out: bool) -> None:
    from wasmexec._tools.config_import import gather

    config = tmp_path / "claude_desktop_config.json"
    config.write_text(json.dumps({"mcpServers": {"sandbox": entry}}))
    merged = gather([str(config)], Place(tmp_path, tmp_path, "linux", {}))
    assert ("sandbox" not in merged.entries) is left_out
    assert any("wasmexec itself" in note for note in merged.notes) is left_out
