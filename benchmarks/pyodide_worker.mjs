// Pyodide comparator for bench_targets.py: fresh interpreters from a memory snapshot.
//
//   node pyodide_worker.mjs serve SNAPSHOT   # long-lived: JSON requests on stdin, one answer per line
//   node pyodide_worker.mjs once SNAPSHOT CODE   # one fresh interpreter, run CODE, exit (a whole process)
//
// `serve` makes the snapshot once (`loadPyodide({_makeSnapshot: true})` + `makeMemorySnapshot()`,
// the same calls as Pyodide's own src/templates/makesnap.mjs), writes it to SNAPSHOT for `once`,
// prints {"ready": ..., "pyodide_version", "python_version", "snapshot_bytes"}, then answers:
//   {"op": "fresh", "code": C}  -> a fresh interpreter from the snapshot runs C:
//                                  {"load_ms", "run_ms", "total_ms", "result": <`result` as JSON>}
//   {"op": "memory", "count": K} -> RSS growth per live interpreter, K of them held at once:
//                                  {"mib_per_interpreter", "count"}
// Errors answer {"error": message}. Pyodide loads from node_modules only: no network access.

import { readFileSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { loadPyodide, version } from "pyodide";

/** A fresh interpreter from `snapshot`: the Pyodide runtime instantiated and its memory restored. */
function fresh(snapshot) {
  return loadPyodide({ _loadSnapshot: snapshot });
}

/** Runs `code` in `pyodide`; returns its run time (ms) and its `result` value. */
function runCode(pyodide, code) {
  const started = performance.now();
  pyodide.runPython(code);
  const runMs = performance.now() - started;
  const resultJson = pyodide.runPython("__import__('json').dumps(globals().get('result'))");
  return { runMs, result: JSON.parse(resultJson) };
}

async function answerFresh(snapshot, code) {
  const started = performance.now();
  const pyodide = await fresh(snapshot);
  const loadMs = performance.now() - started;
  const { runMs, result } = runCode(pyodide, code);
  return { load_ms: loadMs, run_ms: runMs, total_ms: performance.now() - started, result };
}

async function answerMemory(snapshot, count) {
  globalThis.gc?.();
  const before = process.memoryUsage().rss;
  const live = [];
  for (let i = 0; i < count; i++) {
    const pyodide = await fresh(snapshot);
    runCode(pyodide, "result = 1 + 1");
    live.push(pyodide);
  }
  const after = process.memoryUsage().rss;
  return { mib_per_interpreter: (after - before) / count / 2 ** 20, count: live.length };
}

async function serve(snapshotPath) {
  const maker = await loadPyodide({ _makeSnapshot: true });
  const snapshot = maker.makeMemorySnapshot();
  writeFileSync(snapshotPath, snapshot);
  const probe = await fresh(snapshot);
  const ready = {
    ready: true,
    pyodide_version: version,
    python_version: probe.runPython("import sys; sys.version").split(" ")[0],
    snapshot_bytes: snapshot.length,
  };
  process.stdout.write(JSON.stringify(ready) + "\n");
  for await (const line of createInterface({ input: process.stdin })) {
    let answer;
    try {
      const request = JSON.parse(line);
      if (request.op === "fresh") answer = await answerFresh(snapshot, request.code);
      else if (request.op === "memory") answer = await answerMemory(snapshot, request.count);
      else answer = { error: `unknown op ${request.op}` };
    } catch (error) {
      answer = { error: String(error).slice(0, 2000) };
    }
    process.stdout.write(JSON.stringify(answer) + "\n");
  }
}

async function once(snapshotPath, code) {
  const pyodide = await fresh(readFileSync(snapshotPath));
  const { result } = runCode(pyodide, code);
  process.stdout.write(JSON.stringify({ result }) + "\n");
}

const [command, snapshotPath, code] = process.argv.slice(2);
if (command === "serve") await serve(snapshotPath);
else if (command === "once") await once(snapshotPath, code);
else {
  process.stderr.write("usage: pyodide_worker.mjs serve SNAPSHOT | once SNAPSHOT CODE\n");
  process.exit(2);
}
