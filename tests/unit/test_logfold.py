"""DeepSpeed's config dump folded on the terminal (runner.logfold), on recorded output of real runs
(tests/fixtures/runs/success: `dswiz launch --nproc 2 train_tiny.py`, DeepSpeed 0.19.8 on CPU)."""

from __future__ import annotations

import io
from pathlib import Path

from runner.job.terminal import TerminalSink
from runner.logfold import ConfigDumpFolder, Folded, FoldedInterrupt, InterruptTracebackFolder, Output, Shown

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


# ------------------------------------------------------------------ KeyboardInterrupt tracebacks after a stop

STOPPED = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "interrupted"
RAISED = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "rank_raises"


def fold_interrupts(lines: list[str]) -> list[Shown | FoldedInterrupt]:
    folder = InterruptTracebackFolder()
    out: list[Shown | FoldedInterrupt] = []
    for line in lines:
        out += folder.feed(line)
    return out + folder.flush()


def test_the_keyboardinterrupt_tracebacks_of_a_stopped_run_fold_and_nothing_else_changes() -> None:
    # A recorded `dswiz launch` stopped with Ctrl-C: both ranks and DeepSpeed's runner print a KeyboardInterrupt
    # traceback (7, 7 and 17 lines); they are the stop's echo, not a failure.
    lines = (STOPPED / "stream.log").read_text().splitlines()
    out = fold_interrupts(lines)
    assert [o for o in out if isinstance(o, FoldedInterrupt)] == [
        FoldedInterrupt(8, None),
        FoldedInterrupt(8, None),
        FoldedInterrupt(17, None),
    ]
    shown = [o.text for o in out if isinstance(o, Shown)]
    assert shown == [ln for ln in lines if not _in_interrupt_traceback(lines, ln)]
    assert not any("Traceback" in s or s.startswith("KeyboardInterrupt") for s in shown)


def _in_interrupt_traceback(lines: list[str], line: str) -> bool:
    spans, start = [], None
    for i, ln in enumerate(lines):
        body = ln.split("]: ", 1)[1] if ln.startswith("[rank") else ln
        if body.startswith("Traceback (most recent call last):"):
            start = i
        elif start is not None and body.startswith("KeyboardInterrupt"):
            spans.append((start, i))
            start = None
    return any(line in lines[a : b + 1] for a, b in spans)


def test_a_real_failure_traceback_is_shown_whole() -> None:
    lines = (RAISED / "stream.log").read_text().splitlines()
    out = fold_interrupts(lines)
    assert all(isinstance(o, Shown) for o in out)
    assert [o.text for o in out if isinstance(o, Shown)] == lines


def test_interleaved_rank_tracebacks_are_told_apart() -> None:
    a = ["[rank0]: Traceback (most recent call last):", '[rank0]:   File "x.py", line 1, in <module>']
    b = ["[rank1]: Traceback (most recent call last):", '[rank1]:   File "y.py", line 2, in <module>']
    lines = [a[0], b[0], a[1], b[1], "[rank0]: KeyboardInterrupt", "[rank1]: RuntimeError: boom"]
    out = fold_interrupts(lines)
    assert out == [FoldedInterrupt(3, None), *[Shown(t) for t in [*b, "[rank1]: RuntimeError: boom"]]]


def test_the_terminal_names_the_log_instead_of_the_traceback(tmp_path: Path) -> None:
    stream = io.StringIO()
    sink = TerminalSink(stream, run_dir=tmp_path)
    for line in (STOPPED / "stream.log").read_text().splitlines():
        sink.on_line(line, None)
    printed = stream.getvalue()
    assert "Traceback" not in printed
    assert printed.count("[dswiz] a process printed its KeyboardInterrupt traceback") == 3
    assert str(tmp_path / "logs" / "combined.log") in printed
