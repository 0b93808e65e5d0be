"""Stage 0's step by the optimizer a config makes DeepSpeed build, one rule from `dswiz config` to the run history:
a config whose AdamW section makes DeepSpeed build its FusedAdam steps stage 0 through FP16_Optimizer (4 bytes a
parameter more at the step than the script's own torch optimizer); `dswiz config --optimizer deepspeed` plans that,
its sidecar keeps it, and `dswiz check`, the OOM advice, the probe and the run history plan the same."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from runner.run_history import entry_at_start, record
from tests.unit.test_cli_plan import dswiz
from wizard.config.build import writes_fused_adam
from wizard.config.sidecar import read_sidecar
from wizard.history.record import Figures, hardware_fingerprint
from wizard.history.store import HistoryStore
from wizard.planner import PlanRequest, evaluate
from wizard.planner.buffers import ZeroBuffers
from wizard.replan import oom_advice, planned_request
from wizard.service.history import predicted_again
from wizard.service.probe import plan_for
from wizard.units import fmt_bytes

LLAMA_1B = "type=llama,name=llama-1b,layers=22,hidden=2048,heads=32,kv_heads=4,ffn=5632,vocab=32000,seq=2048"
CARD = ("--hardware", "1xH200", "--gpu-memory", "24GiB", "--seq-len", "1024", "--no-history")
STAGE0 = ("--stage", "0", "--activation-checkpointing")


def _config(out: Path, *flags: str) -> None:
    proc = dswiz("config", "--yes", "--model", LLAMA_1B, *CARD, *flags, "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _check(folder: Path) -> tuple[int, dict]:  # type: ignore[type-arg]
    proc = dswiz(
        "check", str(folder), "--model", LLAMA_1B, *CARD[:4], "--no-history", "--no-consumer-check", "--json"
    )
    return proc.returncode, json.loads(proc.stdout)


def test_the_flags_that_make_deepspeed_build_its_fused_adam() -> None:
    assert writes_fused_adam("deepspeed", torch_adam=False)
    assert not writes_fused_adam("deepspeed", torch_adam=True)  # torch's AdamW
    assert not writes_fused_adam(
        "auto", torch_adam=False
    )  # the script's own where the optimizer stays on the GPU
    assert not writes_fused_adam("script", torch_adam=False)


def test_config_sizes_stage_0_for_the_optimizer_its_files_build_and_check_agrees(tmp_path: Path) -> None:
    """Before, `config --optimizer deepspeed --stage 0` sized the micro-batch for the script's optimizer (3 on a 24 GiB
    card) and wrote a config its own check then said needs 27.3 GiB: now config refuses it, naming what fits; with
    torch's AdamW (--torch-adam) it writes micro-batch 3, and check predicts what config planned."""
    proc = dswiz("config", "--yes", "--model", LLAMA_1B, *CARD, *STAGE0, "--optimizer", "deepspeed",
                 "--out", str(tmp_path / "fused"))  # fmt: skip
    assert proc.returncode == 1 and not (tmp_path / "fused").exists()
    assert "ZeRO-0 ckpt at micro-batch 1: does not fit" in proc.stderr and "use ZeRO-1" in proc.stderr
    # not "card": 24 GiB of an H200
    assert "more than the 24.0 GiB planned for (--gpu-memory) allows" in proc.stderr
    # the refusal names the cause and the flag that fits stage 0
    assert "holds 4 bytes a parameter more at ZeRO-0's step: with --torch-adam" in proc.stderr
    assert "micro-batch 3 fits" in proc.stderr
    # the same flags with torch's AdamW, and with the script's optimizer: micro-batch 3, as check predicts it
    for name, flags in (("torch", ("--optimizer", "deepspeed", "--torch-adam")), ("script", ())):
        _config(tmp_path / name, *STAGE0, *flags)
        sidecar = json.loads((tmp_path / name / "dswiz-plan.json").read_text())
        assert "fused_optimizer" not in sidecar["request"] and sidecar["strategy"]["micro_batch_size"] == 3
        rc, doc = _check(tmp_path / name)
        assert rc == 0 and doc["prediction"]["fits"]
        assert doc["prediction"]["predicted"]["gpu_needed_bytes"] == sidecar["predicted"]["needed_gpu_bytes"]
    # forced: the sidecar keeps the optimizer, and check predicts the config as config planned it
    _config(tmp_path / "forced", *STAGE0, "--micro-batch", "1", "--optimizer", "deepspeed", "--force-errors")
    sidecar = json.loads((tmp_path / "forced" / "dswiz-plan.json").read_text())
    assert sidecar["request"]["fused_optimizer"] is True
    rc, doc = _check(tmp_path / "forced")
    assert rc == 1 and not doc["prediction"]["fits"]
    (refused,) = [f for f in doc["findings"] if f["code"] == "plan-does-not-fit"]
    assert '"torch_adam": true and "fused": true' in refused["fix"] and "micro-batch 3 fits" in refused["fix"]
    assert doc["prediction"]["predicted"]["gpu_needed_bytes"] == sidecar["predicted"]["needed_gpu_bytes"]


def test_every_re_plan_of_the_folder_keeps_the_optimizer(tmp_path: Path) -> None:
    """The OOM advice and the probe plan a folder with the optimizer its config builds (stage 0's step 4 bytes a
    parameter larger), and the run history predicts its runs with it, at launch and again under newer physics."""
    _config(
        tmp_path / "fused", "--optimizer", "deepspeed", "--stage", "0", "--micro-batch", "1", "--force-errors"
    )
    _config(tmp_path / "plain", "--stage", "0", "--micro-batch", "1")
    fused, plain = read_sidecar(tmp_path / "fused"), read_sidecar(tmp_path / "plain")
    assert fused is not None and plain is not None
    assert fused.fused_optimizer and not plain.fused_optimizer
    assert planned_request(fused).buffers == ZeroBuffers(fused_optimizer=True)
    assert planned_request(plain).buffers == ZeroBuffers()
    # a request of the user's (probe's planning flags) keeps its own allocator, and gets the folder's optimizer
    assert planned_request(fused, PlanRequest(expandable_segments=True)).buffers.fused_optimizer

    # the probe's plan: stage 0's step 4 bytes a parameter larger with the folder's FusedAdam
    def stage0_peak(sidecar) -> int:  # type: ignore[no-untyped-def]
        planned = plan_for(sidecar, use_history=False)
        return evaluate(
            planned.hardware, sidecar.model, sidecar.strategy, planned.request
        ).predicted.gpu_allocated_bytes

    params = 1_100_048_384
    assert fused.strategy == plain.strategy
    assert stage0_peak(fused) - stage0_peak(plain) == pytest.approx(4 * params, rel=0.01)
    # the OOM advice predicts the config that ran out of memory as config planned it (26.9 GiB, not 22.7)
    ds = {name: json.loads((tmp_path / name / "ds_config.json").read_text()) for name in ("fused", "plain")}
    for sidecar, name in ((fused, "fused"), (plain, "plain")):
        assert sidecar.predicted is not None
        said = f" {fmt_bytes(sidecar.predicted.needed_gpu_bytes)} per GPU"
        assert said in oom_advice(sidecar, ds[name], config_dir="x")[-1], name
    # the run history: the launch predicts what runs with the optimizer its config builds, and so does a re-prediction
    hw = hardware_fingerprint(fused.hardware)
    entry = entry_at_start(
        run_id="fused", run_dir=tmp_path, hardware=hw, sidecar=fused, applies=True, ds_config=ds["fused"]
    )
    request = PlanRequest(seq_len=fused.seq_len, buffers=ZeroBuffers(fused_optimizer=True))
    expected = evaluate(fused.hardware, fused.model, fused.strategy, request).predicted
    assert entry.fused_optimizer and entry.predicted.peak_gpu_bytes == expected.gpu_bytes
    db = tmp_path / "h.sqlite3"
    assert record(entry, db) is None
    kept = HistoryStore(db).get("fused")
    assert kept is not None and kept.fused_optimizer and kept.to_json()["fused_optimizer"] is True
    again = predicted_again(
        replace(kept, physics="older", predicted=Figures(peak_gpu_bytes=1)), fused.hardware
    )
    assert again is not None and again.predicted.peak_gpu_bytes == expected.gpu_bytes
    # the same sidecar launched with the script's optimizer (its config edited): predicted as it runs
    other = entry_at_start(
        run_id="plain", run_dir=tmp_path, hardware=hw, sidecar=fused, applies=True, ds_config=ds["plain"]
    )
    assert not other.fused_optimizer and "fused_optimizer" not in other.to_json()
    assert other.predicted.peak_gpu_bytes < expected.gpu_bytes  # type: ignore[operator]


@pytest.mark.parametrize(
    ("section", "fused"),
    [
        ({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}, True),
        ({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}}}, False),
        ({}, False),
    ],
)
def test_the_wizard_plans_an_imported_file_with_the_optimizer_it_writes_back(
    section: dict, fused: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[type-arg]
    """`dswiz --from FILE` writes the file's optimizer section back: the wizard's plans step stage 0 with it."""
    from wizard.config.optimizer_op import builds_fused_adam
    from wizard.config.schema import DS_CONFIG_NAME
    from wizard.hardware import get_hardware
    from wizard.service.wizard_service import WizardService, initial_choices

    monkeypatch.setenv("DSWIZ_HISTORY", str(tmp_path / "none.sqlite3"))
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**section, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                "zero_optimization": {"stage": 0}}))  # fmt: skip
    service = WizardService(use_history=False)
    choices = initial_choices(
        service, from_file=path, out_dir=tmp_path / "out", hardware=get_hardware("1xH200")
    )
    assert service.request(choices).buffers.fused_optimizer is fused
    written = json.loads(str(service.render_files(choices, None)[DS_CONFIG_NAME]))
    assert builds_fused_adam(written) is fused


def test_torch_adam_is_written_as_torchs_fused_adamw_where_the_optimizer_stays_on_the_gpu(
    tmp_path: Path,
) -> None:
    """DeepSpeed builds torch's AdamW from "torch_adam" and passes the other params through, foreach left at torch's
    default (engine.py get_optimizer_configuration): "fused": true makes it the step the planner counts; offloaded,
    the states are on the CPU, where it is left at its default."""
    _config(tmp_path / "gpu", *STAGE0, "--optimizer", "deepspeed", "--torch-adam")
    params = json.loads((tmp_path / "gpu" / "ds_config.json").read_text())["optimizer"]["params"]
    assert params["torch_adam"] is True and params["fused"] is True
    _config(tmp_path / "cpu", "--stage", "2", "--offload-optimizer", "cpu", "--torch-adam")
    params = json.loads((tmp_path / "cpu" / "ds_config.json").read_text())["optimizer"]["params"]
    assert params["torch_adam"] is True and "fused" not in params


def test_a_folder_from_before_the_key_and_an_imported_one_keep_their_optimizer(tmp_path: Path) -> None:
    """A dswiz-plan.json written before request.fused_optimizer says its optimizer by the flags it was written with;
    a folder the wizard wrote from an imported file (no config_args) gets --optimizer deepspeed in the commands that
    write it again; the OOM advice predicts the config that ran, whatever the sidecar says; inference builds no
    optimizer."""
    from wizard.config.sidecar import config_command, dump_sidecar, load_sidecar

    _config(
        tmp_path / "fused", "--optimizer", "deepspeed", "--stage", "0", "--micro-batch", "1", "--force-errors"
    )
    _config(
        tmp_path / "torch", "--optimizer", "deepspeed", "--torch-adam", "--stage", "0", "--micro-batch", "1"
    )
    for name, fused in (("fused", True), ("torch", False)):
        data = json.loads((tmp_path / name / "dswiz-plan.json").read_text())
        data["request"].pop("fused_optimizer", None)
        assert load_sidecar(json.dumps(data)).fused_optimizer is fused, name
    sidecar = read_sidecar(tmp_path / "fused")
    assert sidecar is not None
    imported = replace(sidecar, config_args=())
    assert load_sidecar(dump_sidecar(imported)).fused_optimizer
    words = config_command(imported, imported.strategy, "out")
    assert words[words.index("--optimizer") + 1] == "deepspeed"
    assert config_command(sidecar, sidecar.strategy, "out").count("--optimizer") == 1
    # the config that ran out of memory stepped with torch's AdamW (edited since): predicted as it ran
    torch_config = json.loads((tmp_path / "torch" / "ds_config.json").read_text())
    torch_sidecar = read_sidecar(tmp_path / "torch")
    assert torch_sidecar is not None and torch_sidecar.predicted is not None
    said = f" {fmt_bytes(torch_sidecar.predicted.needed_gpu_bytes)} per GPU"
    assert said in oom_advice(sidecar, torch_config, config_dir="x")[-1]
    # inference: no optimizer section, nothing to step
    proc = dswiz("config", "--yes", "--model", LLAMA_1B, *CARD, "--mode", "inference", "--optimizer", "deepspeed",
                 "--out", str(tmp_path / "inference"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (
        "fused_optimizer"
        not in json.loads((tmp_path / "inference" / "dswiz-plan.json").read_text())["request"]
    )
