"""Artifacts written out to a directory the user chose (``wasmexec run --output-dir``).

Guest file names decide where files land, so every one is checked again
(`safefs.split_relative`), directories are made and entered without following
symlinks, and files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW``: nothing
outside the directory is written, and nothing already there is overwritten.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from wasmexec._envelope import Artifact
from wasmexec._workspace import safefs
from wasmexec._workspace.store import ArtifactStore


def export_artifacts(store: ArtifactStore, run_id: str, artifacts: Sequence[Artifact], directory: Path) -> list[str]:
    """Writes the kept artifacts of a run below `directory` (made if missing); returns one problem per file not written.

    Raises:
        OSError: `directory` cannot be made or opened.
    """
    directory.mkdir(parents=True, exist_ok=True)
    problems = []
    root_fd = safefs.open_root(directory)
    try:
        for artifact in artifacts:
            name = artifact["path"]
            try:
                parts = safefs.split_relative(name)
                safefs.copy_new(root_fd, parts, store.file_path(run_id, name))
            except FileExistsError:
                problems.append(f"{directory / name} exists: not overwritten")
            except KeyError:
                problems.append(f"{name}: not kept by the artifact store (larger than its retention allows)")
            except (OSError, ValueError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                problems.append(f"{name}: not written ({reason})")
    finally:
        os.close(root_fd)
    return problems
