"""wizard.fsio.write_file_set: backups pruned to the last KEEP_BACKUPS, the user's files and stale temps, refusals
that write nothing, concurrent writers, a damaged leftover named with its fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wizard.errors import DswizError
from wizard.fsio import COMMIT_PREFIX, KEEP_BACKUPS, STAGING_PREFIX, settle_file_set, write_file_set


def entries(folder: Path) -> set[str]:
    return set(os.listdir(folder))


def test_fifty_forced_writes_keep_the_last_few_backups_only(tmp_path: Path) -> None:
    user_backup = tmp_path / "notes.txt.bak-20200101-000000"  # not a name of the set: never pruned
    user_backup.write_text("mine")
    for i in range(50):
        write_file_set(tmp_path, {"ds_config.json": f"{i}\n", "hostfile": "localhost slots=1\n"}, force=True)
    backups = sorted(tmp_path.glob("ds_config.json.bak-*"))
    assert len(backups) == KEEP_BACKUPS == 3
    # the newest ones: writes 46, 47 and 48 were replaced by 47, 48 and 49
    assert sorted(p.read_text() for p in backups) == ["46\n", "47\n", "48\n"]
    assert (tmp_path / "ds_config.json").read_text() == "49\n"
    assert not list(tmp_path.glob("hostfile.bak-*"))  # unchanged each time: never backed up
    assert user_backup.read_text() == "mine"
    assert entries(tmp_path) == {"ds_config.json", "hostfile", user_backup.name, *(p.name for p in backups)}


def test_unchanged_files_are_left_alone_and_reported(tmp_path: Path) -> None:
    first = write_file_set(tmp_path, {"a.json": "1", "b.yaml": "2"})
    assert [r.unchanged for r in first] == [False, False]
    mtime = (tmp_path / "a.json").stat().st_mtime_ns
    again = write_file_set(tmp_path, {"a.json": "1", "b.yaml": "3"}, force=True)
    assert [(r.unchanged, r.backup is None) for r in again] == [(True, True), (False, False)]
    assert (tmp_path / "a.json").stat().st_mtime_ns == mtime
    assert again[1].backup is not None and again[1].backup.read_text() == "2"


def test_a_refusal_writes_nothing_and_says_how_to_go_on(tmp_path: Path) -> None:
    write_file_set(tmp_path, {"a.json": "1", "b.yaml": "2"})
    with pytest.raises(DswizError) as e:
        write_file_set(tmp_path, {"a.json": "1", "b.yaml": "changed", "c.sh": "new"})
    assert "b.yaml" in e.value.problem and "a.json" not in e.value.problem
    assert e.value.fix is not None and "--force" in e.value.fix and f"last {KEEP_BACKUPS}" in e.value.fix
    assert entries(tmp_path) == {"a.json", "b.yaml"} and (tmp_path / "b.yaml").read_text() == "2"


def test_the_next_write_removes_what_older_versions_left_and_nothing_else(tmp_path: Path) -> None:
    stale = (
        tmp_path / ".ds_config.json.k3j_h5g6.tmp"
    )  # tempfile.mkstemp's name in dswiz before the set writer
    stale.write_text("{")
    users = tmp_path / ".mine.abcdefgh.tmp"  # looks alike, but not a name dswiz writes
    users.write_text("keep")
    (tmp_path / f"{STAGING_PREFIX}abc").mkdir()  # a write killed before its commit
    (tmp_path / f"{STAGING_PREFIX}abc" / "ds_config.json").write_text("{half")
    write_file_set(tmp_path, {"ds_config.json": "{}\n"})
    assert entries(tmp_path) == {"ds_config.json", users.name}


def test_modes_keep_an_existing_files_bits_or_take_the_given_ones(tmp_path: Path) -> None:
    write_file_set(tmp_path, {"launch.sh": "a", "hostfile": "h"}, modes={"launch.sh": 0o755})
    (tmp_path / "hostfile").chmod(0o600)
    write_file_set(tmp_path, {"launch.sh": "b", "hostfile": "i"}, force=True, modes={"launch.sh": 0o755})
    assert (tmp_path / "launch.sh").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "hostfile").stat().st_mode & 0o777 == 0o600


def test_concurrent_writers_leave_one_whole_set(tmp_path: Path) -> None:
    sets = [{name: f"{who} {name}\n" for name in ("ds_config.json", "launch.sh", "hostfile")} for who in "ab"]
    children = []
    for files in sets:
        pid = os.fork()
        if pid == 0:
            try:
                for _ in range(15):
                    write_file_set(tmp_path, files, force=True)
            finally:
                os._exit(0)
        children.append(pid)
    for pid in children:
        assert os.waitpid(pid, 0)[1] == 0
    on_disk = {n: (tmp_path / n).read_text() for n in sets[0]}
    assert on_disk in sets
    assert not [e for e in entries(tmp_path) if e.startswith((STAGING_PREFIX, COMMIT_PREFIX))]
    assert len(list(tmp_path.glob("launch.sh.bak-*"))) <= KEEP_BACKUPS


def test_a_damaged_leftover_is_named_with_its_fix_not_a_traceback(tmp_path: Path) -> None:
    damaged = tmp_path / f"{COMMIT_PREFIX}xyz"
    damaged.mkdir()
    (damaged / "ds_config.json").write_text("{}")  # files, but no manifest: not something dswiz left
    with pytest.raises(DswizError) as e:
        settle_file_set(tmp_path)
    assert str(damaged) in e.value.problem and e.value.fix is not None and "rm -r" in e.value.fix
    assert (damaged / "ds_config.json").exists()  # left for the user to look at


def test_bad_names_and_folders_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_file_set(tmp_path, {"../escape": "x"})
    (tmp_path / "file").write_text("x")
    with pytest.raises(DswizError, match="is a file, not a directory"):
        write_file_set(tmp_path / "file", {"a": "b"})
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").mkdir()
    with pytest.raises(DswizError, match="is a directory"):
        write_file_set(tmp_path / "d", {"a": "b"}, force=True)
