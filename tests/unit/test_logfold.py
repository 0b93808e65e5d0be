"""DeepSpeed's config dump folded on the terminal (runner.logfold), on recorded output of real runs
(tests/fixtures/runs/success: `dswiz launch --nproc 2 train_tiny.py`, DeepSpeed 0.19.8 on CPU)."""

from __future__ import annotations

import io
from pathlib import Path

from runner.logfold import ConfigDumpFolder, Folded, Output, Shown
from runner.process import TerminalSink

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "success"


def dump_span(lines: list[str]) -> tuple[int, int]:
    """[first, last] line of the dump, found independently of the folder: from the "DeepSpeedEngine
    configuration:" line to the closing brace of the print_user_config JSON."""
    first = next(i for i, ln in enumerate(lines) if ln.endswith("DeepSpeedEngine configuration:"))
    json_start = next(i for i, ln in enumerate(lines) if "[config.py:" in ln and ":print_user_config]" in ln)
    last = next(i for i in range(json_start, len(lines)) if lines[i] == "}")
    return first, last


def run(folder: ConfigDumpFolder, lines: list[str], rank: int | None = None) -> list[Output]:
    out: list[Output] = []
    for line in lines:
        out += folder.feed(line, rank)
    return out + folder.flush()


def test_the_recorded_dump_becomes_one_notice_and_nothing_else_is_touched() -> None:
    lines = (RUN / "stream.log").read_text().splitlines()
    first, last = dump_span(lines)
    assert last - first > 90  # the ~100 lines this is about
    out = run(ConfigDumpFolder(), lines)
    folded = [o for o in out if isinstance(o, Folded)]
    assert folded == [Folded(lines=last - first + 1, rank=None)]
    shown = [o.text for o in out if isinstance(o, Shown)]
    assert shown == lines[:first] + lines[last + 1 :]
    assert out.index(folded[0]) == first  # in place: before the line that followed the dump


def test_lines_of_another_rank_in_the_middle_stay_and_the_dump_still_folds() -> None:
    [rank0] = RUN.glob("ranks/*_rank0.log")
    lines = rank0.read_text().splitlines()
    first, last = dump_span(lines)
    folder = ConfigDumpFolder()
    out: list[Output] = []
    middle = (first + last) // 2
    for i, line in enumerate(lines):
        out += folder.feed(line, 0)
        if i == middle:
            out += folder.feed("[rank 1 says something]", 1)
    out += folder.flush()
    assert [o for o in out if isinstance(o, Folded)] == [Folded(last - first + 1, 0)]
    assert Shown("[rank 1 says something]") in out


def test_a_dump_cut_off_by_the_end_of_the_output_is_still_reported() -> None:
    lines = (RUN / "stream.log").read_text().splitlines()
    first, _ = dump_span(lines)
    out = run(ConfigDumpFolder(), lines[: first + 10])
    assert out[-1] == Folded(10, None)


def test_the_terminal_shows_one_line_naming_the_log_that_keeps_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "logs" / "ranks").mkdir(parents=True)
    rank_log = run_dir / "logs" / "ranks" / "20261130015251_rank0.log"
    rank_log.write_text("")
    [rank0] = RUN.glob("ranks/*_rank0.log")
    lines = rank0.read_text().splitlines()
    first, last = dump_span(lines)
    stream = io.StringIO()
    sink = TerminalSink(stream, run_dir=run_dir)
    for line in lines:
        sink.on_line(line, 0)
    printed = stream.getvalue().splitlines()
    notice = f"[dswiz] DeepSpeed printed its config ({last - first + 1} lines): {rank_log}"
    assert printed == [*lines[:first], notice, *lines[last + 1 :]]
    assert not any("[config.py:" in p for p in printed)
