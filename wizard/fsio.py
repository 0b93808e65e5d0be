"""Writing a set of files the safe way: all new or all old after a kill at any point, never over an existing
file without ``force`` (and then only after keeping a backup, the last ``KEEP_BACKUPS`` of each kept), no temp
file left behind.

How a set is written (``write_file_set``), under an exclusive ``flock`` on the folder itself:

1. the changed files are written into a fresh hidden staging folder inside the target folder
   (``.dswiz-staging-XXXX/``, same filesystem, so the later moves are renames), each fsynced, with a manifest;
2. the staging folder is renamed to ``.dswiz-commit-XXXX/`` -- the one atomic step that decides old or new;
3. each file is moved into place (the old one first hard-linked to its backup name recorded in the manifest);
4. the commit folder is removed, and old backups beyond the last ``KEEP_BACKUPS`` are deleted.

A kill before step 2 leaves the old set and a staging folder that the next write or read deletes (roll back); a
kill after it leaves a commit folder that the next write or read finishes moving in (roll forward; every move is
idempotent). Readers in dswiz call ``settle_file_set`` first (``dswiz launch --config``, the wizard's diff), so
they see the old set or the new one, never a mix.

Why not swap the whole folder with ``renameat2(RENAME_EXCHANGE)``: the folder is the user's (``--out .`` is common)
and may hold their own files and subfolders, shells and editors sitting in it, its own owner, mode and ACLs; a
swap would move all of that to a new inode (a shell whose working directory it is would be left in a deleted
folder). Why not files as symlinks into a swappable subfolder: ``git add``, ``scp -r`` and tar of the folder would
carry links into a hidden folder instead of the configs. So the files stay plain files in place, and the one
atomic decision is the rename of the staging folder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from wizard.errors import DswizError

KEEP_BACKUPS = 3  # backups kept per file name (``NAME.bak-<time>``); older ones are deleted by the next write
STAGING_PREFIX = ".dswiz-staging-"  # being written: nothing decided yet (a leftover is deleted)
COMMIT_PREFIX = ".dswiz-commit-"  # complete and decided: a leftover is moved in by the next write or read
MANIFEST_NAME = (
    ".dswiz-manifest.json"  # inside a staging/commit folder: {"files": {name: backup name or null}}
)
_OURS = (STAGING_PREFIX, COMMIT_PREFIX, MANIFEST_NAME)
LOCK_WAIT_S = 10.0  # a write takes milliseconds; longer means another dswiz is stuck holding the folder
_COPY_SUFFIX = ".copy"  # a backup being copied, inside the commit folder
_BACKUP = re.compile(r"\.bak-(\d{8})-(\d{6})(?:-(\d+))?")
# what older dswiz versions' per-file writes (tempfile.mkstemp(prefix=".NAME.", suffix=".tmp")) left when killed
_OLD_TEMP = re.compile(r"\.(?P<name>.+)\.[A-Za-z0-9_]{8}\.tmp")


@dataclass(frozen=True)
class WriteResult:
    path: Path
    backup: Path | None  # where the previous content went, if there was any
    unchanged: bool = False  # the file already had exactly this content: nothing was written


def backup_path(path: Path) -> Path:
    """``ds_config.json`` -> ``ds_config.json.bak-20261130-013500`` (``-1``, ``-2``, ... within one second), a new
    name each time, never clobbered, and sorting after every backup already there (a pruned name is not reused:
    ``prune_backups`` keeps the newest by name)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    taken = [n for n in (_backup_key(path.name, e) for e in _listdir(path.parent)) if n is not None]
    later = [key[2] for key in taken if key[:2] >= tuple(stamp.split("-"))]
    if not later and not path.with_name(f"{path.name}.bak-{stamp}").exists():
        return path.with_name(f"{path.name}.bak-{stamp}")
    return path.with_name(f"{path.name}.bak-{stamp}-{max(later, default=0) + 1}")


def _backup_key(name: str, entry: str) -> tuple[str, str, int] | None:
    """The sort key of ``NAME.bak-<date>-<time>[-n]`` (None for anything else)."""
    m = _BACKUP.fullmatch(entry[len(name) :]) if entry.startswith(name) else None
    return (m.group(1), m.group(2), int(m.group(3) or 0)) if m else None


def write_file_set(
    folder: Path | str,
    files: Mapping[str, str],
    *,
    force: bool = False,
    modes: Mapping[str, int] | None = None,
    keep_backups: int = KEEP_BACKUPS,
) -> list[WriteResult]:
    """Write ``files`` (name -> text) into ``folder`` as one set: after a kill at any point the folder holds the
    old set or the new one once ``settle_file_set`` (or the next write) has run.

    A file that already has exactly this content is left alone. One with other content is refused up front, with
    nothing written (DswizError naming ``--force``), unless ``force``: then it is kept as ``NAME.bak-<time>`` and
    only the newest ``keep_backups`` backups of each name stay. ``modes``: permission bits per name (default:
    an existing file's, else 0666 less the umask). Other files in the folder are never touched."""
    folder = Path(folder)
    for name in files:
        if not name or "/" in name or name.startswith(_OURS) or name in (".", ".."):
            raise ValueError(f"not a plain file name: {name!r}")
    _make_folder(folder)
    with _locked(folder):
        try:
            _settle_locked(folder)
        except OSError as e:
            raise _cannot_settle(folder, e) from e
        _remove_old_temps(folder, files)
        unchanged = {name for name, text in files.items() if _holds(folder / name, text)}
        clashes = [n for n in files if n not in unchanged and (folder / n).exists()]
        if clashes and not force:
            raise DswizError(
                f"{folder} already has {', '.join(clashes)} with other content",
                "pass --force to replace them (each old file is kept as a .bak-<time> backup, "
                f"the last {keep_backups} kept), or choose another --out",
            )
        for name in clashes:
            if (folder / name).is_dir():
                raise DswizError(f"{folder / name} is a directory, not a file", "choose another output path")
        changed = {n: t for n, t in files.items() if n not in unchanged}
        backups = {n: backup_path(folder / n) for n in clashes}
        if changed:
            commit = _stage(folder, changed, backups, modes or {})
            try:
                _roll_forward(folder, commit)
            except OSError as e:
                raise DswizError(
                    f"moving the new files into {folder} failed: {e.strerror}",
                    "fix the cause, then run the command again (or `dswiz launch --config` on the folder): "
                    "it finishes the move",
                ) from e
        for name in clashes:
            prune_backups(folder, name, keep_backups)
    return [WriteResult(path=folder / n, backup=backups.get(n), unchanged=n in unchanged) for n in files]


def settle_file_set(folder: Path | str) -> None:
    """Finish or undo what a killed write left in ``folder`` (see the module doc), so a reader sees one whole set.
    Cheap when there is nothing to do (one directory listing, no lock). DswizError when it cannot be done."""
    folder = Path(folder)
    if not interrupted_write(folder):
        return
    try:
        with _locked(folder):
            _settle_locked(folder)
    except OSError as e:
        raise _cannot_settle(folder, e) from e


def _cannot_settle(folder: Path, e: OSError) -> DswizError:
    return DswizError(
        f"{folder} holds a config write that was interrupted, and it cannot be finished: {e.strerror}",
        f"make {folder} writable and run the command again, or delete the {STAGING_PREFIX}* / {COMMIT_PREFIX}* "
        "folder in it and write the set anew with `dswiz config`",
    )


def prune_backups(folder: Path, name: str, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` ``NAME.bak-<time>[-n]`` files in ``folder``; returns those deleted."""
    found = sorted((key, e) for e in _listdir(folder) if (key := _backup_key(name, e)) is not None)
    doomed = [folder / entry for _, entry in found[: max(0, len(found) - keep)]]
    for path in doomed:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return doomed


# ------------------------------------------------------------------------------------------------ the steps


def _stage(
    folder: Path, files: Mapping[str, str], backups: Mapping[str, Path], modes: Mapping[str, int]
) -> Path:
    """Steps 1 and 2: the files in a staging folder, fsynced, then the rename that commits them."""
    try:
        staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=folder))
    except OSError as e:
        raise DswizError(
            f"cannot write in {folder}: {e.strerror}", "choose a writable output directory"
        ) from e
    try:
        umask = _umask()
        for name, text in files.items():
            target = folder / name
            if name in modes:
                mode = modes[name]
            elif target.exists():
                mode = target.stat().st_mode & 0o7777
            else:
                mode = 0o666 & ~umask
            _write_synced(staging / name, text, mode)
        manifest = {"files": {n: (backups[n].name if n in backups else None) for n in files}}
        _write_synced(staging / MANIFEST_NAME, json.dumps(manifest, sort_keys=True) + "\n", 0o600)
        _fsync_dir(staging)
        commit = folder / (COMMIT_PREFIX + staging.name[len(STAGING_PREFIX) :])
        os.rename(staging, commit)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise DswizError(
            f"cannot write the files in {folder}: {e.strerror}; nothing was changed",
            "free some space or fix the folder's permissions, then run the command again",
        ) from e
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _fsync_dir(folder)
    return commit


def _roll_forward(folder: Path, commit: Path) -> None:
    """Steps 3 and 4: move each committed file into place (idempotent: a file already moved is gone from
    ``commit``; a backup link already made is kept), then remove the commit folder, its manifest last."""
    manifest_path = commit / MANIFEST_NAME
    entries = _manifest_entries(manifest_path)
    if entries is None:
        if not manifest_path.exists() and all(e.endswith(_COPY_SUFFIX) for e in _listdir(commit)):
            _remove_commit(commit)  # killed while removing it: every file was already in place
            _fsync_dir(folder)
            return
        # The manifest is fsynced before the commit rename and deleted last, so this is not dswiz's doing.
        raise DswizError(
            f"{commit} is not a config write dswiz can finish (its {MANIFEST_NAME} is missing or damaged)",
            f"look at the files in it, then delete it: rm -r {commit}",
        )
    for name, backup in entries.items():
        source, target = commit / name, folder / name
        if "/" in name or name == MANIFEST_NAME or not source.is_file():
            continue  # already moved in
        if target.exists() or target.is_symlink():
            _keep_backup(target, folder / backup if isinstance(backup, str) else backup_path(target), commit)
        os.replace(source, target)
    _fsync_dir(folder)
    _remove_commit(commit)
    _fsync_dir(folder)


def _manifest_entries(path: Path) -> dict[str, object] | None:
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return entries if isinstance(entries, dict) else None


def _remove_commit(commit: Path) -> None:
    for leftover in _listdir(commit):
        if leftover != MANIFEST_NAME:
            os.unlink(commit / leftover)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(commit / MANIFEST_NAME)
    os.rmdir(commit)


def _keep_backup(target: Path, backup: Path, scratch: Path) -> None:
    """A hard link keeps the old file in place until it is replaced: there is no moment without it. Where links
    are not possible, a copy made in ``scratch`` and renamed (a kill never leaves half a backup)."""
    if backup.exists():
        return  # made before a kill
    try:
        os.link(target, backup, follow_symlinks=False)
    except FileExistsError:
        return
    except OSError:
        copy = scratch / (backup.name + _COPY_SUFFIX)
        shutil.copy2(target, copy, follow_symlinks=False)
        os.rename(copy, backup)


def _settle_locked(folder: Path) -> None:
    """Roll back every staging folder, roll forward every commit folder (oldest first). The caller holds the lock,
    so none of them belongs to a write still running."""
    for entry in sorted(_listdir(folder)):
        path = folder / entry
        if entry.startswith(STAGING_PREFIX) and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
    commits = [folder / e for e in _listdir(folder) if e.startswith(COMMIT_PREFIX)]
    commits = [p for p in commits if p.is_dir() and not p.is_symlink()]
    for commit in sorted(commits, key=lambda p: p.stat().st_mtime_ns):
        _roll_forward(folder, commit)


def _remove_old_temps(folder: Path, names: Mapping[str, str]) -> None:
    for entry in _listdir(folder):
        m = _OLD_TEMP.fullmatch(entry)
        if m and m.group("name") in names and (folder / entry).is_file():
            with contextlib.suppress(OSError):
                os.unlink(folder / entry)


def interrupted_write(folder: Path | str) -> bool:
    """Whether ``folder`` holds what a killed write left (``settle_file_set`` finishes or undoes it)."""
    return any(e.startswith((STAGING_PREFIX, COMMIT_PREFIX)) for e in _listdir(Path(folder)))


# ------------------------------------------------------------------------------------------------ primitives


def _make_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise DswizError(f"{folder} is a file, not a directory", "choose another --out")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DswizError(
            f"cannot create directory {folder}: {e.strerror}", "choose a writable output directory"
        ) from e


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive flock on the folder itself (no lock file to leave behind; the kernel drops it when the
    holder dies, so a killed writer never blocks the next one)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise DswizError(
            f"cannot open {folder}: {e.strerror}", "choose a folder you can read and write"
        ) from e
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or time.monotonic() > deadline:
                    raise DswizError(
                        f"another dswiz has been writing to {folder} for over {LOCK_WAIT_S:.0f} s",
                        "wait for it to finish (or stop it), then run the command again",
                    ) from e
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _write_synced(path: Path, text: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        data = text.encode("utf-8")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _holds(path: Path, text: str) -> bool:
    try:
        return path.is_file() and path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return False


def _listdir(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
