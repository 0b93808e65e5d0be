"""`dswiz` itself: without a terminal the full-screen wizard says what to do instead of crashing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def dswiz(*args: str) -> subprocess.CompletedProcess[str]:
    """`dswiz ARGS` as a user runs it, with no terminal on standard input."""
    return subprocess.run(
        [sys.executable, "-m", "wizard", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


def test_bare_dswiz_without_a_terminal_explains_the_alternatives() -> None:
    proc = dswiz()
    assert proc.returncode == 2
    assert "error: the full-screen wizard needs an interactive terminal" in proc.stderr
    assert "dswiz --plain" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_plain_without_a_terminal_says_so_instead_of_aborting() -> None:
    """`dswiz --plain </dev/null` once warned "Input is not a terminal" and ended as if Ctrl-C'd (exit 130)."""
    proc = dswiz("--plain")
    assert proc.returncode == 2, proc.stderr
    assert "error: `dswiz --plain` asks questions, but there is no terminal to ask them in" in proc.stderr
    assert (
        "dswiz config --yes" in proc.stderr
        and "Traceback" not in proc.stderr
        and "aborted" not in proc.stderr
    )


def test_the_wizards_memory_flags_before_a_command_are_refused_not_dropped() -> None:
    """`dswiz --gpu-memory 24GiB config ...` once wrote a plan for the whole card, the flag silently unused."""
    proc = dswiz("--gpu-memory", "24GiB", "--margin", "8", "plan", "--model", "gpt2")
    assert proc.returncode == 2, proc.stderr
    assert (
        "--gpu-memory and --margin before `plan` are the wizard's: give them after the command, e.g. dswiz plan "
        "--gpu-memory ..." in proc.stderr
    )


def test_the_wizards_flags_before_a_command_that_takes_none_say_to_drop_them() -> None:
    proc = dswiz("-m", "gpt2", "--margin", "3", "history")
    assert proc.returncode == 2, proc.stderr
    assert (
        "--model and --margin before `history` are the wizard's, and `dswiz history` takes no --model or --margin: "
        "drop them" in proc.stderr
    )
