"""One run's files: the directories the guest sees, inputs copied in, limits watched, artifacts found.

The life of a workspace, all on the run's thread except the removal::

    prepare()   a run directory from the pool (or the caller's own directory, used in place),
                inputs copied in, a snapshot taken, the quota started
    preopen()   /workspace and /tmp (read-write) and /skills (read-only) into the WASI config
    check()     on every epoch tick while the guest runs (the quota)
    collect()   after the guest stopped: the limits checked once more, the artifacts listed
    release()   the run directory removed on the pool's reaper thread (never used by another run)
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Union

from wasmexec._envelope import Artifact, StopReason
from wasmexec._limits import Limits
from wasmexec._workspace import artifacts as _artifacts
from wasmexec._workspace import safefs
from wasmexec._workspace.quota import Quota
from wasmexec._workspace.rundir_pool import RunDir, RunDirPool

if TYPE_CHECKING:
    from wasmtime import WasiConfig

InputValue = Union[bytes, str, "os.PathLike[str]"]
"""An input file's content: bytes, text (written as UTF-8), or a host file to copy."""

GUEST_WORKSPACE = "/workspace"
GUEST_TMP = "/tmp"
GUEST_SKILLS = "/skills"


def preopen(wasi: WasiConfig, workspace: Path, tmp: Path, skills: Path | None) -> None:
    """/workspace and /tmp (read-write) and /skills (read-only) if there is one, into a WASI config."""
    wasi.preopen_dir(str(workspace), GUEST_WORKSPACE, True)
    wasi.preopen_dir(str(tmp), GUEST_TMP, True)
    if skills is not None:
        wasi.preopen_dir(str(skills), GUEST_SKILLS, False)


class InputError(ValueError):
    """An input file could not be written into the workspace (something the guest left is in the way)."""


@dataclass(frozen=True)
class Inputs:
    """Input files, checked: relative paths split into parts, and their total size."""

    files: tuple[tuple[tuple[str, ...], bytes | Path], ...]
    total_bytes: int


def check_inputs(files: Mapping[str, InputValue] | None) -> Inputs:
    """Checks the input files a caller passed (paths relative to /workspace).

    Raises:
        TypeError: `files` is not a mapping of str to bytes, str or a path.
        ValueError: a path is absolute, has ``..``, ``.`` or empty parts, or is given twice;
            a host file to copy is missing or not a regular file.
    """
    if files is None:
        return Inputs((), 0)
    if not isinstance(files, Mapping):
        raise TypeError(f"files must be a mapping of workspace paths to contents, not {type(files).__name__}")
    checked: list[tuple[tuple[str, ...], bytes | Path]] = []
    total = 0
    seen: set[tuple[str, ...]] = set()
    for name, value in files.items():
        parts = safefs.split_relative(name)
        if parts in seen:
            raise ValueError(f"files: {name!r} is given twice")
        seen.add(parts)
        content: bytes | Path
        if isinstance(value, bytes):
            content = value
        elif isinstance(value, str):
            content = value.encode("utf-8", "surrogatepass")
        elif isinstance(value, os.PathLike):
            content = Path(value)
            try:
                info = os.stat(content)
            except OSError as exc:
                raise ValueError(f"files: {name!r}: cannot read {content}: {exc.strerror or exc}") from None
            if not stat.S_ISREG(info.st_mode):
                raise ValueError(f"files: {name!r}: {content} is not a regular file")
            total += info.st_size
            checked.append((parts, content))
            continue
        else:
            raise TypeError(f"files: {name!r} must be bytes, str or a path, not {type(value).__name__}")
        total += len(content)
        checked.append((parts, content))
    return Inputs(tuple(checked), total)


class RunWorkspace:
    """The files of one run (see the module)."""

    def __init__(
        self,
        limits: Limits,
        pool: RunDirPool,
        inputs: Inputs,
        *,
        directory: str | os.PathLike[str] | None = None,
        skills: str | os.PathLike[str] | None = None,
    ) -> None:
        self.limits = limits
        self.pool = pool
        self.inputs = inputs
        self.in_place = Path(directory) if directory is not None else None
        self.skills = Path(skills) if skills is not None else None
        self.run_dir: RunDir | None = None
        self._root_fd = -1
        self._tmp_fd = -1
        self._before: dict[tuple[str, ...], _artifacts.Signature] = {}
        self._quota: Quota | None = None

    @property
    def directory(self) -> Path:
        """The host directory the guest sees as /workspace."""
        if self.in_place is not None:
            return self.in_place
        assert self.run_dir is not None, "prepare() first"
        return self.run_dir.workspace

    @property
    def root_fd(self) -> int:
        """A descriptor of the workspace directory (valid until `release`)."""
        return self._root_fd

    def prepare(self, run_dir: RunDir | None = None) -> StopReason | None:
        """Makes the directories, copies the inputs in, starts the quota; a limit the inputs already pass.

        `run_dir`: a run directory from the pool that a spare instance already preopened
        (`wasmexec._sandbox.spares`); the workspace adopts it (and releases it) instead of taking one.

        Raises:
            InputError: an input could not be written (in an in-place workspace, a symlink or a file
                where a directory should be); nothing outside the workspace is ever touched.
            OSError: a directory could not be made (a full disk).
        """
        if run_dir is not None:
            self.run_dir = run_dir  # adopted now: `release` hands it back whatever happens next
        if self.inputs.total_bytes > self.limits.workspace_bytes:
            return "workspace_bytes"
        if len(self.inputs.files) > self.limits.workspace_files:
            return "workspace_files"
        if self.run_dir is None:
            self.run_dir = self.pool.take()
        self._root_fd = safefs.open_root(self.directory)
        self._tmp_fd = safefs.open_root(self.run_dir.tmp)
        for parts, content in self.inputs.files:
            try:
                if isinstance(content, Path):
                    safefs.copy_in(self._root_fd, parts, content)
                else:
                    safefs.write_bytes(self._root_fd, parts, content)
            except OSError as exc:
                name, why = "/".join(parts), exc.strerror or exc
                raise InputError(f"files: cannot write {name!r} into the workspace ({why}; a symlink "
                                 "or a file where a directory should be is never followed)") from None  # fmt: skip
        self._quota = Quota([self._root_fd, self._tmp_fd], self.limits.workspace_bytes, self.limits.workspace_files)
        reason = self._quota.start()
        if reason is None:
            usage = _artifacts.survey(self._root_fd, self.limits.workspace_files)
            self._before = usage.files
        return reason

    def preopen(self, wasi: WasiConfig) -> None:
        """Gives the guest /workspace and /tmp (read-write) and /skills (read-only) if there is one."""
        assert self.run_dir is not None, "prepare() first"
        preopen(wasi, self.directory, self.run_dir.tmp, self.skills)

    def guest_options(self) -> dict[str, object]:
        """What the guest needs to know: its working directory, and where skills are."""
        skills = [GUEST_SKILLS] if self.skills is not None else []  # the operator's first: it wins a clash
        return {"cwd": GUEST_WORKSPACE, "skills": [*skills, f"{GUEST_WORKSPACE}/skills"]}

    def check(self) -> StopReason | None:
        """A limit the run passed since the last check (from the epoch callback; never raises)."""
        return self._quota.check() if self._quota is not None else None

    def collect(self, list_artifacts: bool) -> tuple[StopReason | None, list[Artifact], int]:
        """After the guest stopped: a limit it passed, the artifacts (if `list_artifacts`), symlinks skipped.

        Nothing is listed when a limit is passed: a sparse terabyte must not be hashed.
        """
        usage = _artifacts.survey(self._root_fd, self.limits.workspace_files)
        tmp = _artifacts.survey(self._tmp_fd, self.limits.workspace_files)
        reason: StopReason | None = None
        if usage.over_cap or usage.entries + tmp.entries > self.limits.workspace_files:
            reason = "workspace_files"
        elif usage.bytes + tmp.bytes > self.limits.workspace_bytes:
            reason = "workspace_bytes"
        if reason is not None or not list_artifacts:
            return reason, [], usage.symlinks
        found = []
        for path in _artifacts.changed(self._before, usage):
            artifact = _artifacts.describe(self._root_fd, path, usage.files[path])
            if artifact is not None:
                found.append(artifact)
        return None, found, usage.symlinks

    def release(self) -> None:
        """Closes descriptors and hands the run directory (and the quota's watches) to the reaper. Idempotent.

        The directory is removed, never used again: even empty, its metadata would reach the next run.
        """
        quota, self._quota = self._quota, None
        for fd in (self._root_fd, self._tmp_fd):
            if fd >= 0:
                os.close(fd)
        self._root_fd = self._tmp_fd = -1
        run_dir, self.run_dir = self.run_dir, None
        if run_dir is not None:
            self.pool.release(run_dir, quota.close if quota is not None else None)
        elif quota is not None:
            quota.close()
