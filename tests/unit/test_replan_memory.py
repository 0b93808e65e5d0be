"""A folder written with --gpu-memory / --margin is planned against that memory by everything that plans it again:
dswiz-plan.json keeps both, and the OOM advice, the probe, `dswiz check` and the `dswiz config` command the advice
gives read them back."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.test_cli_plan import dswiz
from tests.unit.test_stage0_optimizer import LLAMA_1B, _config
from wizard.config.sidecar import read_sidecar
from wizard.replan import oom_advice, planned_request
from wizard.service.probe import plan_for


def test_every_re_plan_of_the_folder_plans_against_the_memory_it_was_planned_for(tmp_path: Path) -> None:
    """`dswiz config --gpu-memory 24GiB --margin 8` on an H200: the OOM advice, the probe and `dswiz check` plan the
    folder against 24 GiB with 8 % kept free, not the whole card, and the `dswiz config` command the advice gives
    writes the same plan again."""
    import shlex
    import subprocess
    import sys

    from wizard.config.sidecar import config_command

    _config(tmp_path / "tight", "--margin", "8")
    sidecar = read_sidecar(tmp_path / "tight")
    assert sidecar is not None and (sidecar.gpu_memory_bytes, sidecar.safety_margin) == (24 << 30, 0.08)
    request = planned_request(sidecar)
    assert (request.gpu_memory_bytes, request.safety_margin) == (24 << 30, 0.08)
    assert plan_for(sidecar, use_history=False).gpu_capacity_bytes == 24 << 30
    ds = json.loads((tmp_path / "tight" / "ds_config.json").read_text())
    advice = oom_advice(sidecar, ds, config_dir=str(tmp_path / "again"))
    assert any("of 24.0 GiB per GPU" in line for line in advice), advice
    # the command written for the same strategy plans it against the same memory: the same folder again
    words = config_command(
        sidecar, sidecar.strategy, str(tmp_path / "again"), program=(sys.executable, "-m", "wizard")
    )
    assert (
        words[words.index("--gpu-memory") + 1] == f"{24 << 30}B" and words[words.index("--margin") + 1] == "8"
    )
    ran = subprocess.run([*words, "--no-history"], capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, shlex.join(words) + ran.stderr
    again = read_sidecar(tmp_path / "again")
    assert again is not None and again.strategy == sidecar.strategy
    assert (again.gpu_memory_bytes, again.safety_margin) == (24 << 30, 0.08)
    # check: the folder's budget unless --gpu-memory says otherwise
    proc = dswiz("check", str(tmp_path / "tight"), "--model", LLAMA_1B, "--hardware", "1xH200", "--no-history",
                 "--no-consumer-check", "--json")  # fmt: skip
    rc, doc = proc.returncode, json.loads(proc.stdout)
    (fits,) = [f for f in doc["findings"] if f["code"] == "plan-fits"]
    said = (
        "of 24.0 GiB per GPU (as dswiz-plan.json planned, 8 % kept free; --gpu-memory / --margin to change)"
    )
    assert rc == 0 and said in fits["what"]
    # the flags given win: the whole card, the folder's margin still said
    proc = dswiz("check", str(tmp_path / "tight"), "--model", LLAMA_1B, "--hardware", "1xH200", "--no-history",
                 "--no-consumer-check", "--json", "--gpu-memory", "80GiB")  # fmt: skip
    (fits,) = [f for f in json.loads(proc.stdout)["findings"] if f["code"] == "plan-fits"]
    assert (
        "of 80.0 GiB per GPU (as dswiz-plan.json planned, 8 % kept free; --margin to change)" in fits["what"]
    )
    # no GPU here and no --hardware: predicted for the GPUs the folder was planned for, and said so
    proc = dswiz(
        "check", str(tmp_path / "tight"), "--model", LLAMA_1B, "--no-history", "--no-consumer-check", "--json"
    )
    codes = {f["code"]: f for f in json.loads(proc.stdout)["findings"]}
    assert proc.returncode == 0 and "NVIDIA H200" in codes["plan-hardware"]["what"]
    assert "of 24.0 GiB per GPU" in codes["plan-fits"]["what"]
