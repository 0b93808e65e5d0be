"""What a launch carries from the plan and leaves for the user: run.json's plan section (read by the monitor),
the checkpoints named in the verdict, the code-hint findings and offload needs in preflight, the plan's use
decided from the config folder. The job is a small real process standing in for the launcher (no DeepSpeed)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from runner import configdir, rundir
from runner.cli_launch import load_plan_sidecar, plan_use
from runner.job.prepare import PreparedRun
from runner.job.supervisor import Job
from runner.metrics.plan import PlanInfo
from runner.metrics.target import target_from_run_dir
from runner.preflight import check_script_code
from tests.unit.test_checkpoints import ZERO3, make_checkpoint
from tests.unit.test_process_control import RecordingSink
from wizard import planner
from wizard.checkpoints import consolidate_command, output_dirs_from_args
from wizard.config.sidecar import SIDECAR_NAME, dump_sidecar
from wizard.hardware import get_hardware
from wizard.hardware.report import HardwareReport
from wizard.hints import code_hints
from wizard.launch_command import LaunchCommand, LaunchSpec
from wizard.model import load_model_spec
from wizard.replan import make_sidecar

SAYS_IT_SAVED = textwrap.dedent(
    """
    print("[2026-11-30 01:00:00,000] [INFO] [launch.py:245:main] starting", flush=True)
    print("checkpoint saved to ckpt/final", flush=True)  # what train_tiny.py prints (relative to the cwd)
    print("[2026-11-30 01:00:01,000] [INFO] [launch.py:285:main] Process 1 exits successfully.", flush=True)
    """
)


def finished_job(
    tmp_path: Path, *, script_args: tuple[str, ...] = (), plan: dict[str, object] | None = None
) -> Job:
    fake = tmp_path / "launcher.py"
    fake.write_text(SAYS_IT_SAVED)
    run = rundir.make_run_dir(tmp_path / "run")
    spec = LaunchSpec(script="train.py", run_dir=str(run), script_args=script_args, config_arg="")
    prepared = PreparedRun(
        run_id=run.name,
        run_dir=run,
        specs=(spec,),
        commands=(LaunchCommand((sys.executable, "-u", str(fake)), {}),),
        configs={},
        config_changes=(),
        ds_config=None,
        cwd=str(tmp_path),
        plan=plan,
    )
    job = Job(prepared, RecordingSink(), grace_s=0.5, term_grace_s=0.5, status_every_s=60)
    job.run()
    return job


def test_the_verdict_says_where_the_checkpoints_are_and_how_to_consolidate_them(tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "ckpt", "final", layout=ZERO3)  # named in the job's output
    make_checkpoint(tmp_path / "out" / "checkpoint-5", "global_step5", layout=ZERO3)  # under --output_dir
    make_checkpoint(tmp_path / "unrelated", "global_step1", layout=ZERO3)  # neither: not mentioned
    job = finished_job(tmp_path, script_args=("--output_dir", "out", "--steps", "5"))
    record = rundir.read_run_record(job.prepared.run_dir)
    assert record.verdict is not None and record.verdict.kind == "success"
    advice = "\n".join(record.verdict.advice)
    assert f"checkpoint {tmp_path / 'ckpt' / 'final'} (ZeRO-3, 2 shard(s)" in advice
    assert f"full fp32 weights: {consolidate_command(tmp_path / 'ckpt')}" in advice
    assert f"checkpoint {tmp_path / 'out' / 'checkpoint-5' / 'global_step5'} (ZeRO-3" in advice
    assert "unrelated" not in advice


def test_a_run_without_checkpoints_says_nothing_about_them(tmp_path: Path) -> None:
    job = finished_job(tmp_path)
    record = rundir.read_run_record(job.prepared.run_dir)
    assert record.verdict is not None and not any("checkpoint" in a for a in record.verdict.advice)


def test_output_dirs_from_the_script_arguments(tmp_path: Path) -> None:
    args = ["--output_dir", "a", "--save-dir=/abs/b", "--lr", "1", "--ckpt_dir", "c", "--save", "--x"]
    assert output_dirs_from_args(args, tmp_path) == [tmp_path / "a", Path("/abs/b"), tmp_path / "c"]


def test_run_json_carries_the_plan_to_the_monitor(tmp_path: Path) -> None:
    plan = {"predicted_peak_gpu_bytes": 40 * 2**30, "flops_per_token": 2.4e9, "seq_len": 1024, "num_gpus": 1}
    job = finished_job(tmp_path, plan=plan)
    run_json = json.loads((job.prepared.run_dir / rundir.RUN_JSON).read_text())
    assert run_json["plan"] == plan
    info = target_from_run_dir(job.prepared.run_dir).plan
    assert info == PlanInfo.from_mapping(plan) and info.predicted_peak_gpu_bytes == 40 * 2**30


# ------------------------------------------------------------------------------------ from the config folder


def write_planned_folder(tmp_path: Path, hardware: str, **strategy_changes: object) -> Path:
    hw, spec = get_hardware(hardware), load_model_spec("gpt2-medium")
    request = planner.PlanRequest(seq_len=1024)
    plan = planner.plan(hw, spec, request)
    pick = next(
        c for c in plan.candidates if all(getattr(c.strategy, k) == v for k, v in strategy_changes.items())
    )
    sidecar = make_sidecar(
        model_arg="gpt2-medium",
        model=spec,
        hardware_arg=hardware,
        hardware=hw,
        request=request,
        candidate=pick,
    )
    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / "ds_config.json").write_text("{}\n")
    (folder / SIDECAR_NAME).write_text(dump_sidecar(sidecar))
    return folder


def test_the_plan_is_used_where_it_describes_the_launch(tmp_path: Path) -> None:
    folder = write_planned_folder(tmp_path, "1xA100-80GB", offload_optimizer="cpu")
    sidecar = load_plan_sidecar(configdir.find_configs(folder))
    assert sidecar is not None and sidecar.predicted is not None
    same = plan_use(sidecar, sidecar.hardware, world_size=1)
    assert same.run_plan is not None
    assert same.run_plan["predicted_peak_gpu_bytes"] == sidecar.predicted.peak_gpu_bytes
    assert same.host_need_bytes == sidecar.predicted.host_bytes > 0  # preflight checks host RAM against it
    here = HardwareReport(source="detected", no_gpu_reason="no driver")
    other = plan_use(sidecar, here, world_size=None)
    assert other.run_plan == {"flops_per_token": sidecar.flops_per_token, "seq_len": 1024}
    assert any("this machine has no GPU" in n for n in other.notes)


def test_a_damaged_plan_file_is_a_warning_not_a_refusal(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / "ds_config.json").write_text("{}\n")
    (folder / SIDECAR_NAME).write_text("{broken")
    assert load_plan_sidecar(configdir.find_configs(folder)) is None
    err = capsys.readouterr().err
    assert "warning:" in err and "not valid JSON" in err and "fix:" in err


ACCELERATE_SCRIPT = """\
import torch
from accelerate import Accelerator
accelerator = Accelerator()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
"""


def test_preflight_warns_of_a_script_scheduler_next_to_the_configs_optimizer(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(ACCELERATE_SCRIPT)
    spec = LaunchSpec(script=str(script), run_dir=str(tmp_path / "run"), launcher="accelerate")
    ds_optimizer = {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    [finding] = check_script_code(spec, ds_optimizer)
    [expected] = code_hints("accelerate", "config", "script").findings
    assert (finding.code, finding.what, finding.fix) == (expected.code, expected.what, expected.fix)
    assert finding.location is not None and str(script) in finding.location
    # the script's own optimizer, or a scheduler handed over as a function: nothing to say
    assert check_script_code(spec, {}) == []
    script.write_text(
        ACCELERATE_SCRIPT.replace(
            "scheduler = torch", "scheduler = DummyScheduler(optimizer, lr_scheduler_callable=lambda o: torch"
        )
    )
    assert check_script_code(spec, ds_optimizer) == []
    # plain DeepSpeed: the same trap (the optimizer exists only after deepspeed.initialize)
    script.write_text(ACCELERATE_SCRIPT)
    ds_spec = LaunchSpec(script=str(script), run_dir=str(tmp_path / "run"))
    assert [f.code for f in check_script_code(ds_spec, ds_optimizer)] == ["ds-optimizer-script-scheduler"]
