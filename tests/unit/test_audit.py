import json
import threading
from pathlib import Path

from wasmexec import Limits
from wasmexec._audit import AuditLog, digest, write_run_line
from wasmexec._runctx.runstate import RunState
from wasmexec._runctx.toolhost import NoTools
from wasmexec._sandbox.result import host_error_result


def test_each_line_is_one_json_object_with_time_and_kind(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    log.write("run", run_id="r1", code_digest=digest("print(1)"))
    (line,) = (tmp_path / "audit.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["kind"] == "run" and record["run_id"] == "r1" and record["time"] > 0
    assert record["code_digest"].startswith("sha256:") and "print" not in line


def test_the_digest_is_canonical() -> None:
    assert digest({"a": 1, "b": 2}) == digest({"b": 2, "a": 1})
    assert digest({"a": 1}) != digest({"a": 2})


def test_concurrent_writers_never_interleave_lines(tmp_path: Path) -> None:
    logs = [AuditLog(tmp_path / "audit.jsonl") for _ in range(4)]  # like separate processes
    padding = "x" * 3000

    def write(log: AuditLog, worker: int) -> None:
        for index in range(100):
            log.write("tool_call", worker=worker, index=index, padding=padding)

    threads = [threading.Thread(target=write, args=(log, n)) for n, log in enumerate(logs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert len(lines) == 400
    assert {(r["worker"], r["index"]) for r in map(json.loads, lines)} == {(w, i) for w in range(4) for i in range(100)}


def test_the_file_rotates_by_size_and_keeps_the_backups(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", max_bytes=1000, backups=2)
    for index in range(60):
        log.write("run", index=index, padding="y" * 50)
    names = sorted(path.name for path in tmp_path.iterdir() if not path.name.endswith(".lock"))
    assert names == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    assert all(path.stat().st_size <= 1000 for path in tmp_path.glob("audit.jsonl*") if path.suffix != ".lock")
    newest = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[-1])
    assert newest["index"] == 59


def test_a_run_that_could_not_finish_still_gets_its_run_line(tmp_path: Path) -> None:
    state = RunState(limits=Limits(), tools=NoTools(), run_id="r1")
    state.code_digest = digest("1")
    write_run_line(AuditLog(tmp_path / "audit.jsonl"), host_error_result(state, KeyboardInterrupt()), 0)
    (line,) = (tmp_path / "audit.jsonl").read_bytes().decode("utf-8").splitlines()
    record = json.loads(line)
    assert record["kind"] == "run" and record["run_id"] == "r1" and record["outcome"] == "SandboxError"
    assert record["code_digest"] == digest("1")


def test_a_log_opened_with_a_replica_id_puts_it_on_every_line(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", replica="web-1-42")
    log.write("run", run_id="a")
    log.write("tool_call", run_id="a")
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(line["kind"], line["replica"]) for line in lines] == [("run", "web-1-42"), ("tool_call", "web-1-42")]
    AuditLog(tmp_path / "other.jsonl").write("run", run_id="b")
    assert "replica" not in json.loads((tmp_path / "other.jsonl").read_text())
