"""The entry point: --help, --version, clean errors (no tracebacks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def dswiz(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wizard", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_version() -> None:
    from wizard import __version__

    proc = dswiz("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"dswiz, version {__version__}"


def test_help_lists_every_command() -> None:
    from wizard.cli import COMMANDS

    proc = dswiz("--help")
    assert proc.returncode == 0, proc.stderr
    for name in COMMANDS:
        assert name in proc.stdout
    assert "wizard" in proc.stdout.lower()


def test_unknown_command_is_a_usage_error_not_a_traceback() -> None:
    proc = dswiz("frobnicate")
    assert proc.returncode == 2
    assert "No such command 'frobnicate'" in proc.stderr
    assert "Traceback" not in proc.stderr
