"""The limits of one run. Every limit but fuel is on by default (the wall clock is the CPU limit); each default
says why."""

from __future__ import annotations

from dataclasses import dataclass, replace

#: Long enough for real tool-using scripts, short enough that a stuck agent gets an answer.
DEFAULT_TIMEOUT_MS = 30_000
#: Fits data work on tens of MB; the pre-initialized interpreter itself takes about 30 MiB.
DEFAULT_MEMORY_MB = 256
#: Off: metering costs CPU-bound code 9-35% of its speed, and the wall clock (epochs) already stops
#: every loop fuel would (the old default budget, 4*10^12, never fired inside the default timeout).
#: Set a budget for deterministic, machine-independent cut-offs.
DEFAULT_FUEL: int | None = None
#: Enough for progress output; a print flood is cut, not buffered.
DEFAULT_MAX_STDOUT_BYTES = 64 * 1024
#: Tracebacks are long; give stderr more room than stdout.
DEFAULT_MAX_STDERR_BYTES = 256 * 1024
#: The result travels back to a model: a few MB of JSON is already far too much context.
DEFAULT_MAX_RESULT_BYTES = 4 * 1024 * 1024
#: A script that makes hundreds of calls is almost always looping by mistake.
DEFAULT_MAX_TOOL_CALLS = 200
#: Each `codemode.llm.ask` costs the user money and seconds of their model: a few per run, not a loop.
DEFAULT_MAX_LLM_CALLS = 10
#: Sixteen answers of `llm.ask`'s default size (512 tokens); more is a batch job, not a run.
DEFAULT_MAX_LLM_TOKENS = 8_192

#: Room for data work on a few CSVs, charts and a zip, small enough that many parallel runs fit on a laptop disk.
DEFAULT_WORKSPACE_MB = 64
#: Files, directories and symlinks in /workspace and /tmp together: a data run needs tens, a loop bug makes thousands.
DEFAULT_WORKSPACE_FILES = 1000

#: Upper bounds that keep one run from starving the host.
MAX_TIMEOUT_MS = 24 * 60 * 60 * 1000
MAX_MEMORY_MB = 4095
#: A run's files stay under the artifact store and the host's temp dir: a few GiB at most.
MAX_WORKSPACE_MB = 16 * 1024
#: Every check of the workspace walks at most this many entries plus one.
MAX_WORKSPACE_FILES = 1_000_000


@dataclass(frozen=True)
class Limits:
    """What one run may use. Immutable; derive variants with `Limits.replace`."""

    timeout_ms: int = DEFAULT_TIMEOUT_MS
    """Wall-clock limit of the whole run, tool calls and sleeps included."""
    memory_mb: int = DEFAULT_MEMORY_MB
    """Linear memory of the sandbox in MiB, the interpreter included."""
    fuel: int | None = DEFAULT_FUEL
    """Instruction budget (wasmtime fuel); None (the default) meters nothing, which is faster: the wall clock
    still stops the run."""
    max_stdout_bytes: int = DEFAULT_MAX_STDOUT_BYTES
    """Bytes of stdout kept as `log` entries; the rest is dropped with a warning."""
    max_stderr_bytes: int = DEFAULT_MAX_STDERR_BYTES
    """Bytes of stderr kept as `error` entries; the rest is dropped with a warning."""
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    """Size of the result value as JSON."""
    max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS
    """Tool calls per run."""
    workspace_mb: int = DEFAULT_WORKSPACE_MB
    """Bytes in /workspace and /tmp together, in MiB (inputs included; a file is charged its size or its
    disk blocks, whichever is larger)."""
    workspace_files: int = DEFAULT_WORKSPACE_FILES
    """Files, directories and symlinks in /workspace and /tmp together (inputs included)."""
    max_llm_calls: int = DEFAULT_MAX_LLM_CALLS
    """Sampling calls (`codemode.llm.ask`) per run."""
    max_llm_tokens: int = DEFAULT_MAX_LLM_TOKENS
    """Tokens of sampled answers per run (the client's count, else an estimate: `wasmexec._runctx.llm_ask`)."""

    def __post_init__(self) -> None:
        _check_range("timeout_ms", self.timeout_ms, 1, MAX_TIMEOUT_MS)
        _check_range("memory_mb", self.memory_mb, 1, MAX_MEMORY_MB)
        if self.fuel is not None:
            _check_range("fuel", self.fuel, 1, 2**63 - 1)
        for name in (
            "max_stdout_bytes",
            "max_stderr_bytes",
            "max_result_bytes",
            "max_tool_calls",
            "max_llm_calls",
            "max_llm_tokens",
        ):
            _check_range(name, getattr(self, name), 0, 2**40)
        _check_range("workspace_mb", self.workspace_mb, 0, MAX_WORKSPACE_MB)
        _check_range("workspace_files", self.workspace_files, 0, MAX_WORKSPACE_FILES)

    @property
    def memory_bytes(self) -> int:
        """`memory_mb` in bytes."""
        return self.memory_mb * 1024 * 1024

    @property
    def workspace_bytes(self) -> int:
        """`workspace_mb` in bytes."""
        return self.workspace_mb * 1024 * 1024

    def replace(self, **changes: int | None) -> Limits:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)  # type: ignore[arg-type]


def _check_range(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"Limits.{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"Limits.{name} must be between {low} and {high}, got {value}")
