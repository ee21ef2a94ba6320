"""The per-run context: what the host keeps about one run while its guest executes.

Shared by the sandbox (`wasmexec._sandbox`), the tool host (`wasmexec._tools`) and the server
(`wasmexec._server`), which never import each other for it. The modules import one way, each
only those listed before it (checked by ``tests/unit/test_import_cycles.py``):

- `toolhost`: the tool-host protocol (`ToolHost`, generic in the run it is handed), `HostCallError`
  (kind = WIT ``error-kind``), payload bounds, `NoTools`.
- `calllog`: `CallLog`, the ``tool_trace`` with one locked writer.
- `journal`: `Journal`, a run's calls and ``llm.ask`` answers, logged for a pause by replay, and replayed.
- `llm_ask`: ``codemode.llm.ask`` on the host (`Sampling`): caps, the sampler, checks, audit.
- `runstate`: `RunState`, what the host knows about one running guest, and its thread map.

Nothing is re-exported here: importing the package imports none of them.
"""
