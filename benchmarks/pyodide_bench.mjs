// Pyodide baseline for bench_core.py: interpreter load time and the same Python workloads.
//
// Reads one JSON object on stdin:
//   {"loads": 3, "repeats": 5, "workloads": {"name": "python code setting `result`", ...}}
// and prints one JSON object on stdout:
//   {"pyodide_version", "python_version", "load_ms": [...],
//    "workloads": {"name": {"inside_s": [...], "wall_s": [...], "check": ...}}}
//
// Pyodide is loaded from node_modules only (its stdlib zip ships in the npm package);
// the workloads need nothing else, so no network access happens.
// Each workload repeat runs in a fresh globals dict of one interpreter: loading a
// fresh interpreter per repeat would cost seconds each (see load_ms).

import { readFileSync } from "node:fs";
import { loadPyodide, version } from "pyodide";

/** Reads the whole of stdin as JSON. */
function readConfig() {
  return JSON.parse(readFileSync(0, "utf8"));
}

/** Loads `count` fresh interpreters; returns the load times (ms) and the last interpreter. */
async function timeLoads(count) {
  const loadMs = [];
  let pyodide = null;
  for (let i = 0; i < Math.max(count, 1); i++) {
    const started = performance.now();
    pyodide = await loadPyodide();
    loadMs.push(performance.now() - started);
  }
  return { loadMs, pyodide };
}

/** Runs `code` in a fresh namespace; returns the host wall time (s) and its `result` value. */
function runOnce(pyodide, code) {
  const namespace = pyodide.globals.get("dict")();
  try {
    const started = performance.now();
    pyodide.runPython(code, { globals: namespace });
    const wallS = (performance.now() - started) / 1000;
    const resultJson = pyodide.runPython("__import__('json').dumps(result)", { globals: namespace });
    return { wallS, result: JSON.parse(resultJson) };
  } finally {
    namespace.destroy();
  }
}

async function main() {
  const config = readConfig();
  const { loadMs, pyodide } = await timeLoads(config.loads ?? 1);
  const output = {
    pyodide_version: version,
    python_version: pyodide.runPython("import sys; sys.version"),
    load_ms: loadMs,
    workloads: {},
  };
  for (let repeat = 0; repeat < (config.repeats ?? 0); repeat++) {
    for (const [name, code] of Object.entries(config.workloads ?? {})) {
      const entry = (output.workloads[name] ??= { inside_s: [], wall_s: [], check: null });
      const { wallS, result } = runOnce(pyodide, code);
      entry.inside_s.push(result.seconds);
      entry.wall_s.push(wallS);
      entry.check = result.check;
    }
  }
  process.stdout.write(JSON.stringify(output) + "\n");
}

await main();
