"""Every file a command reads, given bytes that are not text (a binary, a file in another encoding): one message
that names the file and what it should be, a non-zero exit, nothing written -- never a UnicodeDecodeError traceback
(hardware profiles, `launch --config` and `plan --model` once raised one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner import rundir

from .test_fuzz_cli import run_cli

BINARY = b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x00garbage\xc3\x28"


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (("detect", "--hardware", "{f}"), "a hardware profile"),
        (("plan", "--model", "gpt2", "--hardware", "{f}", "--json"), "a hardware profile"),
        (("plan", "--model", "{f}"), "a model's config.json"),
        (("config", "--yes", "--from", "{f}", "--out", "{out}"), "a DeepSpeed JSON or accelerate YAML"),
        (("launch", "--dry-run", "--config", "{f}", "train.py"), "a DeepSpeed JSON"),
        (("check", "{f}"), "a DeepSpeed JSON, accelerate YAML or hostfile"),
    ],
    ids=["detect", "plan-hardware", "plan-model", "config-from", "launch-config", "check"],
)
def test_a_binary_file_is_named_and_refused(tmp_path: Path, argv: tuple[str, ...], kind: str) -> None:
    f = tmp_path / "input.json"
    f.write_bytes(BINARY)
    out = tmp_path / "out"
    (tmp_path / "train.py").write_text("print('hello')\n")
    code, output = run_cli(*(a.format(f=f, out=out) for a in argv))
    assert code in (1, 2), output
    assert "Traceback" not in output and "UnicodeDecodeError" not in output, output
    assert f"{f} is not a UTF-8 text file" in output and f"so not {kind}" in output, output
    assert not out.exists()  # nothing half-written


def test_monitor_refuses_a_binary_run_json_and_writes_nothing(tmp_path: Path) -> None:
    run = rundir.make_run_dir(tmp_path / "run")
    (run / rundir.RUN_JSON).write_bytes(BINARY)
    before = sorted(p.name for p in run.iterdir())
    code, output = run_cli("monitor", "--json", str(run))
    assert code == 2 and "Traceback" not in output, output
    assert f"{run / rundir.RUN_JSON} cannot be read" in output and "fix:" in output, output
    assert sorted(p.name for p in run.iterdir()) == before  # no metrics.jsonl, no lock
