"""`dswiz detect` end to end, in a fresh process like a user runs it (this machine has no NVIDIA driver)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from wizard.hardware import get_hardware
from wizard.hardware.report import HardwareReport

ROOT = Path(__file__).resolve().parents[2]


def dswiz(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    full_env = {**os.environ, "COLUMNS": "100", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "wizard", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=full_env,
    )


def test_detect_table() -> None:
    proc = dswiz("detect")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Host" in out and "Disks" in out and "Software" in out and "Hazards" in out
    report = get_hardware()
    if not report.gpus:
        assert f"no NVIDIA GPU found: {report.no_gpu_reason}" in " ".join(out.split())
    assert "deepspeed" in out and "/dev/shm" in out and "libaio" in out
    assert "Traceback" not in proc.stderr


def test_detect_json_round_trips_and_has_stable_keys() -> None:
    proc = dswiz("detect", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert list(data) == sorted(data)
    assert {"source", "gpus", "host", "software", "hazards", "no_gpu_reason", "total_gpus"} <= set(data)
    report = HardwareReport.from_dict(data)
    assert report.source == "detected"
    assert HardwareReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
    assert any(d["mountpoint"] == "/" for d in data["host"]["disks"])


def test_detect_json_imports_neither_rich_nor_torch() -> None:
    code = (
        "import sys, json, io, contextlib\n"
        "from wizard.cli import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    cli.main(['detect', '--json'], standalone_mode=False)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = {m.split(".")[0] for m in json.loads(proc.stdout.strip().splitlines()[-1])}
    assert not {"rich", "torch", "deepspeed", "textual", "yaml"} & loaded


def test_detect_described_json_matches_the_fixture() -> None:
    proc = dswiz("detect", "--hardware", "8xA100-80GB", "--json")
    assert proc.returncode == 0, proc.stderr
    fixture = ROOT / "tests" / "fixtures" / "hardware" / "described-8xA100-80GB.json"
    assert json.loads(proc.stdout) == json.loads(fixture.read_text())


def test_detect_described_table() -> None:
    proc = dswiz("detect", "--hardware", "2x8xH100,ram=1TiB")
    assert proc.returncode == 0, proc.stderr
    assert "Described hardware: 2x8xH100,ram=1TiB" in proc.stdout
    assert "2 node(s) x 8 GPU(s) = 16 GPU(s)" in proc.stdout
    assert "H100 80GB HBM3" in proc.stdout and "989.4" in proc.stdout and "0-7" in proc.stdout


def test_global_hardware_option_applies_to_detect() -> None:
    proc = dswiz("--hardware", "4xL4", "detect", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["total_gpus"] == 4


def test_bad_spec_is_a_message_not_a_traceback() -> None:
    proc = dswiz("detect", "--hardware", "8xA100")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: 'A100' is ambiguous")
    assert "fix: name the memory size" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_bad_arch_list_shows_up_with_its_fix() -> None:
    proc = dswiz("detect", "--json", env={"TORCH_CUDA_ARCH_LIST": "9.0a"})
    (hazard,) = [h for h in json.loads(proc.stdout)["hazards"] if h["code"] == "arch-list-unparsable"]
    assert hazard["fix"].startswith("export TORCH_CUDA_ARCH_LIST='9.0'")
