"""Writing files the safe way: atomic (temp file + rename), never over an existing file without ``force``,
and then only after keeping a backup. Nothing is ever half-written or silently lost."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from wizard.errors import DswizError


@dataclass(frozen=True)
class WriteResult:
    path: Path
    backup: Path | None  # where the previous content went, if there was any
    unchanged: bool = False  # the file already had exactly this content: nothing was written


def backup_path(path: Path) -> Path:
    """``ds_config.json`` -> ``ds_config.json.bak-20261130-013500`` (a new name each time, never clobbered)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.bak-{stamp}-{n}")
        n += 1
    return candidate


def atomic_write_text(
    path: Path | str, text: str, *, force: bool = False, mode: int | None = None
) -> WriteResult:
    """Write ``text`` to ``path`` atomically.

    An existing file with the same content is left alone. An existing file with other content is refused
    (DswizError naming ``--force``) unless ``force``; with ``force`` it is first renamed to a backup.
    """
    path = Path(path)
    if path.exists() and path.is_dir():
        raise DswizError(f"{path} is a directory, not a file", "choose another output path")
    if path.exists():
        try:
            if path.read_text() == text:
                return WriteResult(path=path, backup=None, unchanged=True)
        except (OSError, UnicodeDecodeError):
            pass
        if not force:
            raise DswizError(
                f"{path} already exists and differs from what dswiz would write",
                "pass --force to replace it (the old file is kept as a .bak-<time> backup), or choose another --out",
            )
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DswizError(
            f"cannot create directory {parent}: {e.strerror}", "choose a writable output directory"
        ) from e
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as e:
        raise DswizError(
            f"cannot write in {parent}: {e.strerror}", "choose a writable output directory"
        ) from e
    backup: Path | None = None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        elif path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        if path.exists():
            backup = backup_path(path)
            # A hard link keeps the old file in place until the atomic replace: no moment without it.
            try:
                os.link(path, backup)
            except OSError:
                shutil.copy2(path, backup)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return WriteResult(path=path, backup=backup)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
