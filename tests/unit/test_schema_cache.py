import contextlib
import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from wasmexec._tools.schema_cache import (
    DEFAULT_MAX_ENTRIES,
    DEFAULT_TTL_S,
    FORMAT,
    Entry,
    SchemaCache,
    cache_key,
    config_fingerprint,
)

TOOLS = {"tools": [{"name": "search", "inputSchema": {"type": "object"}}]}


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Warnings(list[str]):
    """Collects the messages a cache warns with."""

    def __call__(self, message: str) -> None:
        self.append(message)


def make_cache(path: Path | None, clock: Clock | None = None, **options: Any) -> tuple[SchemaCache, Warnings]:
    warned = Warnings()
    return SchemaCache(path, clock=clock or Clock(), warn=warned, **options), warned


def file_entries(path: Path) -> dict[str, Any]:
    document = json.loads(path.read_text())
    assert document["format"] == FORMAT
    entries: dict[str, Any] = document["entries"]
    return entries


# Freshness


def test_the_defaults_keep_a_thousand_entries_for_a_day() -> None:
    assert DEFAULT_MAX_ENTRIES == 1000
    assert DEFAULT_TTL_S == 24 * 3600


def test_an_entry_is_fresh_until_its_ttl_and_then_only_served_stale() -> None:
    clock = Clock(1_000.0)
    cache, warned = make_cache(None, clock, ttl_s=60)
    stored = cache.put("k", TOOLS)
    assert stored == Entry(TOOLS, 1_000.0)

    clock.now = 1_059.0
    fresh = cache.get("k")
    assert fresh is not None and fresh.value == TOOLS and fresh.age(clock.now) == 59.0

    clock.now = 1_060.0
    assert cache.get("k") is None
    stale = cache.get_stale("k")
    assert stale is not None and stale.value == TOOLS and stale.age(clock.now) == 60.0
    assert "k" in cache and len(cache) == 1
    assert warned == []


def test_a_missing_key_is_neither_fresh_nor_stale() -> None:
    cache, _ = make_cache(None)
    assert cache.get("nope") is None
    assert cache.get_stale("nope") is None
    assert "nope" not in cache


def test_a_new_put_makes_an_expired_entry_fresh_again() -> None:
    clock = Clock()
    cache, _ = make_cache(None, clock, ttl_s=10)
    cache.put("k", {"v": 1})
    clock.now += 100
    cache.put("k", {"v": 2})
    entry = cache.get("k")
    assert entry is not None and entry.value == {"v": 2} and entry.fetched_at == clock.now


def test_a_value_that_is_not_json_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    cache, _ = make_cache(path)
    with pytest.raises(TypeError):
        cache.put("k", {"bad": object()})
    with pytest.raises(ValueError):
        cache.put("k", {"bad": float("nan")})
    assert "k" not in cache
    assert not path.exists()


@pytest.mark.parametrize("options", [{"max_entries": 0}, {"max_entries": True}, {"ttl_s": 0}, {"ttl_s": -1.0}])
def test_an_invalid_size_or_ttl_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(options))):
        SchemaCache(None, **options)


# LRU


def test_the_least_recently_used_entry_is_evicted_at_max_entries() -> None:
    clock = Clock()
    cache, _ = make_cache(None, clock, max_entries=3)
    for key in "abc":
        clock.now += 1
        cache.put(key, {"key": key})
    assert cache.get("a") is not None  # "b" is now the least recently used
    cache.put("d", {"key": "d"})
    assert len(cache) == 3
    assert "b" not in cache
    assert all(key in cache for key in "acd")


def test_an_expired_entry_serves_stale_until_the_lru_evicts_it() -> None:
    clock = Clock()
    cache, _ = make_cache(None, clock, max_entries=2, ttl_s=5)
    cache.put("old", {"v": 0})
    clock.now += 1_000
    assert cache.get_stale("old") is not None
    cache.put("x", {})
    cache.put("y", {})
    assert cache.get_stale("old") is None


def test_the_file_keeps_the_most_recently_fetched_entries_up_to_max_entries(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    clock = Clock()
    cache, _ = make_cache(path, clock, max_entries=2)
    for key in "abc":
        clock.now += 1
        cache.put(key, {})
    assert sorted(file_entries(path)) == ["b", "c"]


# Persistence


def test_entries_survive_into_a_second_instance_with_their_fetch_time(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    clock = Clock(500.0)
    first, _ = make_cache(path, clock, ttl_s=100)
    first.put("k", TOOLS)

    second, warned = make_cache(path, clock, ttl_s=100)
    assert second.get("k") == Entry(TOOLS, 500.0)
    clock.now = 700.0
    assert second.get("k") is None
    assert second.get_stale("k") == Entry(TOOLS, 500.0)
    assert warned == []


def test_the_file_is_read_lazily_on_first_access(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    late, _ = make_cache(path)  # created before the file exists
    writer, _ = make_cache(path)
    writer.put("k", TOOLS)
    assert late.get("k") is not None


def test_the_file_is_written_in_the_documented_format(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "schemas.json"
    cache, _ = make_cache(path, Clock(42.5))
    cache.put("k", TOOLS)
    assert json.loads(path.read_text()) == {"format": 1, "entries": {"k": {"fetched_at": 42.5, "value": TOOLS}}}
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_a_memory_only_cache_touches_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cache, warned = make_cache(None)
    cache.put("k", TOOLS)
    cache.invalidate("k")
    cache.clear()
    assert list(tmp_path.iterdir()) == []
    assert warned == []


def test_invalidate_removes_the_entry_from_memory_and_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    cache, _ = make_cache(path)
    cache.put("gone", TOOLS)
    cache.put("kept", TOOLS)
    cache.invalidate("gone")
    assert "gone" not in cache and cache.get_stale("gone") is None
    assert sorted(file_entries(path)) == ["kept"]
    fresh, _ = make_cache(path)
    assert "gone" not in fresh and "kept" in fresh


def test_an_invalidated_key_is_not_written_back_by_another_instance_that_still_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    first, _ = make_cache(path)
    first.put("shared", TOOLS)
    other, _ = make_cache(path)
    assert "shared" in other  # loaded into its memory
    first.invalidate("shared")
    other.put("new", TOOLS)
    assert sorted(file_entries(path)) == ["new"]


def test_clear_empties_memory_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    cache, _ = make_cache(path)
    cache.put("a", TOOLS)
    cache.put("b", TOOLS)
    cache.clear()
    assert len(cache) == 0
    assert file_entries(path) == {}


def test_the_newer_fetch_wins_when_two_instances_write_the_same_key(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    ahead, _ = make_cache(path, Clock(200.0))
    behind, _ = make_cache(path, Clock(100.0))
    ahead.put("k", {"from": "ahead"})
    behind.put("k", {"from": "behind"})
    assert file_entries(path)["k"] == {"fetched_at": 200.0, "value": {"from": "ahead"}}
    assert behind.get_stale("k") == Entry({"from": "behind"}, 100.0)  # its own fetch stays in its memory


def test_other_instances_keys_are_kept_when_writing(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    first, _ = make_cache(path)
    second, _ = make_cache(path)
    assert len(second) == 0  # loaded while the file is empty
    first.put("a", TOOLS)
    second.put("b", TOOLS)
    assert sorted(file_entries(path)) == ["a", "b"]


# A broken file


GARBAGE = b"\xff\xfe\x00\x81 not json at all \x00"
TRUNCATED = json.dumps({"format": 1, "entries": {"k": {"fetched_at": 1.0, "value": TOOLS}}}).encode()[:-9]
WRONG_SHAPES = [
    b"[1, 2, 3]",
    b'"a string"',
    b'{"format": 1}',
    b'{"format": 1, "entries": []}',
    b'{"format": 2, "entries": {}}',
    b'{"format": true, "entries": {}}',
    b'{"format": 1, "entries": {"k": {"fetched_at": "yesterday", "value": {}}}}',
    b'{"format": 1, "entries": {"k": {"fetched_at": 1.0, "value": []}}}',
    b'{"format": 1, "entries": {"k": {"fetched_at": NaN, "value": {}}}}',
    b'{"format": 1, "entries": {"k": {"fetched_at": true, "value": {}}}}',
    b'{"format": 1, "entries": {"k": 3}}',
]


@pytest.mark.parametrize("content", [GARBAGE, TRUNCATED, b"", *WRONG_SHAPES])
def test_a_corrupt_file_is_discarded_with_one_warning_and_rebuilt_on_the_next_write(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "schemas.json"
    path.write_bytes(content)
    cache, warned = make_cache(path)

    assert cache.get("k") is None
    assert len(cache) == 0
    cache.put("a", TOOLS)
    cache.put("b", TOOLS)
    assert cache.get("a") is not None

    assert len(warned) == 1 and str(path) in warned[0]
    assert sorted(file_entries(path)) == ["a", "b"]
    reader, reader_warned = make_cache(path)
    assert "a" in reader and reader_warned == []


def test_an_unreadable_file_is_discarded_with_one_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "schemas.json"
    path.write_text(json.dumps({"format": 1, "entries": {"k": {"fetched_at": 1.0, "value": {}}}}))
    read_bytes = Path.read_bytes

    def refuse(self: Path) -> bytes:
        if self == path:
            raise PermissionError(13, "Permission denied")
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", refuse)
    cache, warned = make_cache(path)
    assert cache.get_stale("k") is None
    cache.put("a", TOOLS)
    assert len(warned) == 1 and "Permission denied" in warned[0]
    monkeypatch.undo()
    assert sorted(file_entries(path)) == ["a"]


def test_a_directory_in_place_of_the_file_leaves_the_cache_in_memory(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    path.mkdir()
    cache, warned = make_cache(path)
    cache.put("k", TOOLS)
    cache.put("k2", TOOLS)
    assert cache.get("k") is not None
    assert len(warned) == 2  # once for reading, once for writing
    assert "cannot be read" in warned[0] and "memory only" in warned[1]
    assert path.is_dir()


def test_a_location_that_cannot_be_written_leaves_the_cache_in_memory_with_one_warning(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    path = blocker / "schemas.json"
    cache, warned = make_cache(path)

    for key in ("a", "b", "c"):
        cache.put(key, TOOLS)
    cache.invalidate("a")
    cache.clear()
    cache.put("d", TOOLS)

    assert cache.get("d") is not None and len(cache) == 1
    assert len(warned) == 1 and "memory only" in warned[0]
    assert blocker.read_text() == "not a directory"


def test_without_a_warn_callback_problems_become_runtime_warnings(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    path.write_bytes(GARBAGE)
    cache = SchemaCache(path)
    with pytest.warns(RuntimeWarning, match="not valid JSON"):
        assert cache.get("k") is None


# Concurrency


def test_threads_writing_through_one_instance_and_through_several_keep_every_key(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    shared, shared_warned = make_cache(path)
    own = [make_cache(path) for _ in range(4)]
    per_thread = 15
    start = threading.Barrier(8)

    def write(cache: SchemaCache, prefix: str) -> None:
        start.wait()
        for index in range(per_thread):
            cache.put(f"{prefix}-{index}", {"n": index})
            cache.get(f"{prefix}-{index}")

    writers = [(shared, f"shared{n}") for n in range(4)] + [(cache, f"own{n}") for n, (cache, _) in enumerate(own)]
    threads = [threading.Thread(target=write, args=writer) for writer in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()

    expected = {f"{prefix}-{index}" for _, prefix in writers for index in range(per_thread)}
    assert set(file_entries(path)) == expected
    assert shared_warned == [] and all(warned == [] for _, warned in own)
    assert len(shared) == 4 * per_thread


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from wasmexec._tools.schema_cache import SchemaCache

    def fail(message):
        sys.exit(f"warned: {message}")

    path, prefix, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    sys.stdin.read()  # wait for the start signal, so the writers overlap
    cache = SchemaCache(path, warn=fail)
    for index in range(count):
        cache.put(f"{prefix}-{index}", {"prefix": prefix, "n": index})
    """
)


def test_processes_writing_distinct_keys_to_one_file_keep_every_key(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    per_process = 25
    prefixes = [f"proc{n}" for n in range(4)]
    with contextlib.ExitStack() as stack:
        processes = []
        for prefix in prefixes:
            command = [sys.executable, "-c", WRITER, str(path), prefix, str(per_process)]
            process = stack.enter_context(
                subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            )
            stack.callback(process.kill)  # runs first on the way out; a no-op once it has exited
            processes.append(process)
        for process in processes:
            assert process.stdin is not None
            process.stdin.close()
        for process in processes:
            assert process.stderr is not None
            assert process.wait(timeout=120) == 0, process.stderr.read()

    entries = file_entries(path)
    assert set(entries) == {f"{prefix}-{index}" for prefix in prefixes for index in range(per_process)}
    assert entries["proc3-7"]["value"] == {"prefix": "proc3", "n": 7}


# Keys and fingerprints


def fingerprint(**overrides: Any) -> str:
    config: dict[str, Any] = {
        "command": "npx",
        "args": ["-y", "@modelcontextprotocol/server-github"],
        "url": None,
        "env_names": ["GITHUB_TOKEN", "HOME"],
        "header_names": [],
    }
    config.update(overrides)
    return config_fingerprint(**config)


def test_a_fingerprint_is_a_sha256_hex_digest_and_is_stable() -> None:
    value = fingerprint()
    assert len(value) == 64 and int(value, 16) >= 0
    assert fingerprint() == value


def test_the_fingerprint_ignores_env_values_because_only_names_enter_it() -> None:
    one = {"GITHUB_TOKEN": "ghp_first-secret", "HOME": "/home/a"}
    other = {"GITHUB_TOKEN": "ghp_other-secret", "HOME": "/root"}
    assert fingerprint(env_names=list(one)) == fingerprint(env_names=list(other))
    assert fingerprint(env_names=one.keys()) == fingerprint()


def test_the_fingerprint_ignores_the_order_of_names_and_the_case_of_header_names() -> None:
    assert fingerprint(env_names=["HOME", "GITHUB_TOKEN"]) == fingerprint()
    assert fingerprint(header_names=["Authorization", "X-Api-Key"]) == fingerprint(
        header_names=["x-api-key", "authorization"]
    )


@pytest.mark.parametrize(
    "change",
    [
        {"command": "uvx"},
        {"command": None, "url": "https://example.com/mcp"},
        {"args": ["@modelcontextprotocol/server-github", "-y"]},
        {"args": ["-y", "@modelcontextprotocol/server-github", "--read-only"]},
        {"url": "https://example.com/mcp"},
        {"env_names": ["GITHUB_TOKEN"]},
        {"env_names": ["GITHUB_TOKEN", "HOME", "GITHUB_HOST"]},
        {"header_names": ["Authorization"]},
    ],
)
def test_the_fingerprint_changes_with_command_args_url_and_names(change: dict[str, Any]) -> None:
    assert fingerprint(**change) != fingerprint()


def test_a_cache_key_names_the_server_and_its_fingerprint() -> None:
    digest = fingerprint()
    key = cache_key("github", digest)
    assert key.startswith("github") and key.endswith(digest)
    assert cache_key("github", digest) != cache_key("gitlab", digest)
    assert cache_key("github", digest) != cache_key("github", fingerprint(command="uvx"))
