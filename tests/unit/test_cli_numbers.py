"""Number flags refuse nan and inf as well as values outside their range (click's FloatRange lets nan through every
bound: `--margin nan` reached the planner as a traceback, `--lr nan` wrote `"lr": NaN`, which is not JSON)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_cli_plan import dswiz

A100 = ("--hardware", "1xA100-80GB")


@pytest.mark.parametrize(
    ("args", "flag", "said"),
    [
        (("plan", "--model", "gpt2", *A100, "--margin", "nan"), "--margin", "'nan' is not a finite number"),
        (("plan", "--model", "gpt2", *A100, "--gpu-memory", "0"), "--gpu-memory", "is no memory"),
        # a number without a unit is bytes: refused where it cannot mean a card (24 once planned a 24-byte GPU)
        (("plan", "--model", "gpt2", *A100, "--gpu-memory", "24"), "--gpu-memory", "24 has no unit"),
        (
            ("check", "x.json", "--model", "gpt2", *A100, "--gpu-memory", "24.5"),
            "--gpu-memory",
            "give one, e.g. 24.5GiB",
        ),
        (("plan", "--model", "gpt2", *A100, "--nvme", "2"), "--nvme", "2 has no unit"),
        (
            ("config", "--yes", "--model", "gpt2", *A100, "--lr", "nan"),
            "--lr",
            "'nan' is not a finite number",
        ),
        (
            ("config", "--yes", "--model", "gpt2", *A100, "--lr", "inf"),
            "--lr",
            "'inf' is not a finite number",
        ),
        (("config", "--yes", "--model", "gpt2", *A100, "--lr", "-5"), "--lr", "is not in the range x>0"),
        (("launch", "--dry-run", "--grace", "-1", "train.py"), "--grace", "is not in the range x>=0"),
        (
            ("launch", "--dry-run", "--stall-timeout", "nan", "train.py"),
            "--stall-timeout",
            "not a finite number",
        ),
        (("monitor", "--interval", "nan"), "--interval", "nan is out of range"),
        (("probe", "--model", "gpt2", "--timeout", "nan", "train.py"), "--timeout", "not a finite"),
    ],
    ids=[
        "margin-nan",
        "gpu-memory-0",
        "gpu-memory-no-unit",
        "check-gpu-memory-no-unit",
        "nvme-no-unit",
        "lr-nan",
        "lr-inf",
        "lr-negative",
        "grace",
        "stall-timeout",
        "interval",
        "probe",
    ],
)
def test_a_number_flag_refuses_nan_inf_and_out_of_range(
    tmp_path: Path, args: tuple[str, ...], flag: str, said: str
) -> None:
    out = tmp_path / "out"
    proc = dswiz(*args, *(("--out", str(out)) if args[0] == "config" else ()))
    assert proc.returncode == 2, proc.stderr
    assert f"Invalid value for '{flag}'" in proc.stderr or f"error: {flag} " in proc.stderr, proc.stderr
    assert said in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


@pytest.mark.parametrize("port", ["80", "70000"])
@pytest.mark.parametrize("command", ["config", "launch"])
def test_every_command_takes_the_same_rendezvous_ports(tmp_path: Path, command: str, port: str) -> None:
    """--master-port is 1024-65535 on config and launch alike (launch took 80 and refused 99999 with that range)."""
    out = tmp_path / "out"
    args = (
        ("config", "--yes", *A100, "--master-port", port, "--out", str(out))
        if command == "config"
        else ("launch", "--dry-run", "--master-port", port, "train.py")
    )
    proc = dswiz(*args)
    assert proc.returncode == 2 and "is not in the range 1024<=x<=65535" in proc.stderr, proc.stderr
    assert not out.exists()
