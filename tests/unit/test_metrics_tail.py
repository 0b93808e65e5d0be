"""FileTail: follows a growing file; truncation, rotation, torn and overlong lines; attach reads only the end."""

from __future__ import annotations

import os
from pathlib import Path

from runner.metrics.tail import FileTail, RankLogTail, rank_of_log_file


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text)


def test_missing_then_growing_file_and_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "log"
    tail = FileTail(path)
    assert tail.poll() == []
    append(path, "one\ntw")
    assert tail.poll() == ["one"]
    append(path, "o\nthree\n")
    assert tail.poll() == ["two", "three"]
    assert tail.poll() == []
    assert tail.bytes_read == len("one\ntwo\nthree\n")


def test_truncation_starts_over(tmp_path: Path) -> None:
    path = tmp_path / "log"
    append(path, "a long first line\nsecond\n")
    tail = FileTail(path)
    assert tail.poll() == ["a long first line", "second"]
    path.write_text("new\n")  # truncated in place and rewritten shorter
    assert tail.poll() == ["new"] and tail.truncations == 1


def test_rotation_finishes_the_old_file_then_reads_the_new(tmp_path: Path) -> None:
    path = tmp_path / "log"
    append(path, "old 1\n")
    tail = FileTail(path)
    assert tail.poll() == ["old 1"]
    append(path, "old 2\n")
    os.rename(path, tmp_path / "log.1")
    append(path, "new 1\n")
    assert tail.poll() == ["old 2", "new 1"] and tail.rotations == 1


def test_overlong_line_is_cut_and_memory_stays_bounded(tmp_path: Path) -> None:
    path = tmp_path / "log"
    append(path, "x" * 10_000 + "\nshort\n")
    tail = FileTail(path, max_line_bytes=100, max_read_bytes=1000)
    lines: list[str] = []
    for _ in range(20):
        lines += tail.poll()
    assert lines == ["x" * 100, "short"]


def test_attach_reads_only_the_backfill_from_a_line_boundary(tmp_path: Path) -> None:
    path = tmp_path / "log"
    append(path, "".join(f"line {i:05d}\n" for i in range(10_000)))  # 11 bytes per line
    tail = FileTail(path, start_at_end=True, backfill_bytes=50)
    got = tail.poll()
    assert got == [f"line {i:05d}" for i in range(9996, 10_000)]  # the torn first line is dropped
    assert tail.bytes_read == 50
    append(path, "line 10000\n")
    assert tail.poll() == ["line 10000"]


def test_reads_are_capped_per_poll(tmp_path: Path) -> None:
    path = tmp_path / "log"
    append(path, "abcdefghi\n" * 100)
    tail = FileTail(path, max_read_bytes=100)
    assert len(tail.poll()) == 10
    assert len(tail.poll()) == 10


def test_rank_logs_follow_files_as_they_appear_and_the_last_poll_keeps_a_torn_line(tmp_path: Path) -> None:
    """The launch's rank-log reader: every *.log of the folder, the rank from the name, whole lines only until
    the job is over (then the unterminated last line too)."""
    tail = RankLogTail(tmp_path)
    assert tail.poll() == []
    append(tmp_path / "20261130-010000_rank1.log", "r1 a\nr1 b")
    assert tail.poll() == [(1, "r1 a")]
    append(tmp_path / "20261130-010000_rank0.log", "r0 a\n")
    append(tmp_path / "other.log", "no rank\n")
    assert tail.poll() == [(0, "r0 a"), (None, "no rank")]  # files in name order
    append(tmp_path / "20261130-010000_rank1.log", " more")
    assert tail.poll(final=True) == [(1, "r1 b more")]
    assert tail.poll(final=True) == []


def test_the_rank_of_a_log_file_is_in_its_name_only() -> None:
    assert rank_of_log_file("/run/logs/ranks/20261130-010000_rank12.log") == 12
    assert rank_of_log_file(Path("combined.log")) is None
    assert rank_of_log_file("x_rank3.log.1") is None


def test_rank_logs_attach_reads_each_files_end_backfill_reads_from_the_start(tmp_path: Path) -> None:
    """The monitor's rank-log reader: attaching reads only each file's last bytes; the launch's reads it all."""
    append(tmp_path / "20261130-010000_rank0.log", "".join(f"line {i:05d}\n" for i in range(1000)))
    attached = RankLogTail(tmp_path, start_at_end=True, backfill_bytes=25)
    assert attached.poll() == [(0, "line 00998"), (0, "line 00999")]
    assert attached.bytes_read == 25  # the torn first line is dropped
    backfilled = RankLogTail(tmp_path)
    assert len(backfilled.poll()) == 1000 and backfilled.bytes_read == 11_000


def test_rank_logs_rescan_the_folder_at_most_every_interval_and_skip_the_callers_files(
    tmp_path: Path,
) -> None:
    now = [0.0]
    known = tmp_path / "pid_rank9.log"
    append(known, "followed by the caller\n")
    tail = RankLogTail(tmp_path, rescan_seconds=2.0, skip={known}, clock=lambda: now[0])
    assert (
        tail.scan() == [] and tail.paths == []
    )  # the first scan happens at once: nothing but the skipped file
    append(tmp_path / "20261130-010000_rank1.log", "r1 a\n")
    now[0] = 1.9
    assert tail.poll() == []  # not rescanned yet
    now[0] = 2.0
    assert tail.poll() == [(1, "r1 a")]
    assert [f.path.name for f in tail.read()] == ["20261130-010000_rank1.log"] and tail.read()[0].lines == ()
