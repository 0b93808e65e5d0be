"""Planning for PyTorch's allocator with expandable segments: the environment it is read from, what the planner
counts under memory pressure (held to the H200 readings that ran with it), and the loop a user runs -- `dswiz plan`,
`dswiz config` writing the variable into launch.sh and dswiz-plan.json, `dswiz launch` setting it for the job."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from runner.job.session import environ_with
from runner.run_history import entry_at_start, record
from wizard.alloc_conf import expandable_segments, with_expandable_segments
from wizard.config.sidecar import config_command, read_sidecar
from wizard.hardware import get_hardware
from wizard.hardware.report import HardwareReport
from wizard.history.record import Figures, Measurement, hardware_fingerprint
from wizard.history.store import HistoryStore
from wizard.model import load_model_spec
from wizard.planner import PlanRequest, evaluate, plan
from wizard.planner import calibration as cal
from wizard.planner.memory import estimate_memory, phases_for
from wizard.planner.search import max_micro_batch
from wizard.planner.throughput import ALLOCATOR_REMAP_PART
from wizard.service.history import predicted_again
from wizard.strategy import Strategy

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "runner" / "examples" / "train_tiny.py"
ALLOC_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, True),
        ({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512, expandable_segments:True"}, True),
        # PyTorch takes only True / False: "true" stops the job at its first allocation
        ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:true"}, False),
        ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}, False),
        ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,expandable_segments:False"}, False),
        # which of the two a PyTorch reads first differs between versions: on only when both say so
        (
            {
                "PYTORCH_ALLOC_CONF": "max_split_size_mb:512",
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            },
            False,
        ),
        (
            {
                "PYTORCH_ALLOC_CONF": "expandable_segments:True",
                "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512",
            },
            False,
        ),
        (
            {
                "PYTORCH_ALLOC_CONF": "expandable_segments:True",
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            },
            True,
        ),
        ({"PYTORCH_ALLOC_CONF": "expandable_segments:True"}, True),
        # set to nothing is set: a PyTorch that reads PYTORCH_ALLOC_CONF first takes no setting from it
        ({"PYTORCH_ALLOC_CONF": "", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, False),
        ({"PYTORCH_CUDA_ALLOC_CONF": "garbage"}, False),
        ({"PYTORCH_CUDA_ALLOC_CONF": ",,:,expandable_segments"}, False),
    ],
)
def test_the_environment_says_whether_segments_expand(environ: dict[str, str], on: bool) -> None:
    assert expandable_segments(environ) is on
    assert expandable_segments(
        {**environ, **with_expandable_segments(environ)}
    )  # what the launch sets turns them on


def test_turning_them_on_keeps_the_users_other_settings() -> None:
    env = {"PYTORCH_ALLOC_CONF": "max_split_size_mb:512,expandable_segments:False"}
    assert with_expandable_segments(env) == {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "PYTORCH_ALLOC_CONF": "max_split_size_mb:512,expandable_segments:True",
    }
    assert with_expandable_segments({}) == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


# ------------------------------------------------------------------------------------------------ the planner


@pytest.mark.parametrize("model", ["gpt2-xl", "llama-7b", "qwen2-7b"])
@pytest.mark.parametrize(
    "strategy",
    [
        Strategy(zero_stage=1, activation_checkpointing=True),
        Strategy(zero_stage=2, offload_optimizer="cpu", activation_checkpointing=True),
        Strategy(zero_stage=3, offload_optimizer="cpu", offload_param="cpu", activation_checkpointing=True),
        Strategy(zero_stage=0),
    ],
)
def test_under_pressure_only_a_fixed_remainder_of_cache_counts(model: str, strategy: Strategy) -> None:
    """With expandable segments a card must hold the step's peak allocation, the fixed remainder and what sits
    outside the allocator; never more than with the default allocator, so every micro-batch that fitted still
    fits. What a card with room shows does not change."""
    m, hw = load_model_spec(model), get_hardware("1xH200")
    for b in (1, 4, 16):
        s = strategy.with_(micro_batch_size=b)
        default, expandable = (
            estimate_memory(m, s, 2048),
            estimate_memory(m, s, 2048, expandable_segments=True),
        )
        peak = max(p.at(b) for p in phases_for(m, s, 2048))
        outside = expandable.cuda_context + expandable.nccl
        assert expandable.needed == peak + cal.EXPANDABLE_UNRECLAIMABLE_BYTES + outside
        assert expandable.needed <= default.needed
        assert (expandable.device, expandable.allocated) == (default.device, default.allocated)
    for card in (24, 40, 80):
        kw = {"gpu_memory_bytes": card << 30}
        assert max_micro_batch(hw, m, strategy, 2048, expandable_segments=True, **kw) >= max_micro_batch(
            hw, m, strategy, 2048, **kw
        )


def test_a_plan_for_them_says_so_and_fits_more() -> None:
    hw, m = get_hardware("1xH200"), load_model_spec("gpt2-xl")
    request = PlanRequest(seq_len=1024, gpu_memory_bytes=24 << 30)
    default, expandable = (
        plan(hw, m, request),
        plan(hw, m, PlanRequest(**{**request.__dict__, "expandable_segments": True})),
    )
    assert default.best is not None and expandable.best is not None
    assert expandable.best.strategy.micro_batch_size > default.best.strategy.micro_batch_size
    assert any("expandable segments" in n for n in expandable.notes)
    assert not any("expandable segments" in n for n in default.notes)


# ------------------------------------------------------------------------------------------------ as a user


def dswiz(
    *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ALLOC_VARS}
    return subprocess.run(
        [sys.executable, "-m", "wizard", *args],
        cwd=cwd,
        env={**base, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _config(
    out: Path, *flags: str, env: dict[str, str] | None = None, hardware: str = "1xH200"
) -> dict[str, object]:
    card = ("--gpu-memory", "24GiB") if hardware == "1xH200" else ()
    proc = dswiz(
        "config", "--yes", "--model", "gpt2-xl", "--hardware", hardware, *card,
        "--seq-len", "1024", "--no-history", *flags, "--out", str(out), env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "ds_config.json").read_text())


def test_config_writes_the_variable_the_plan_counted_on(tmp_path: Path) -> None:
    plain = _config(tmp_path / "plain")
    grown = _config(tmp_path / "grown", "--expandable-segments")
    assert grown["train_micro_batch_size_per_gpu"] > plain["train_micro_batch_size_per_gpu"]  # type: ignore[operator]
    assert _launch_sh_env(tmp_path / "grown", {})["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "ALLOC_CONF" not in (tmp_path / "plain/launch.sh").read_text()
    sidecar = json.loads((tmp_path / "grown/dswiz-plan.json").read_text())
    assert sidecar["request"]["expandable_segments"] is True
    assert (
        "expandable_segments" not in json.loads((tmp_path / "plain/dswiz-plan.json").read_text())["request"]
    )
    # the shell's allocator settings are the default; the flag overrides them either way
    from_env = _config(tmp_path / "env", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert from_env["train_micro_batch_size_per_gpu"] == grown["train_micro_batch_size_per_gpu"]
    off = _config(
        tmp_path / "off", "--no-expandable-segments", env={"PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    )
    assert off["train_micro_batch_size_per_gpu"] == plain["train_micro_batch_size_per_gpu"]


def _launch_sh_env(directory: Path, shell: dict[str, str]) -> dict[str, str]:
    """The allocator variables launch.sh gives the job when run by bash from ``shell`` (its PYTHON a script that
    prints them instead of starting DeepSpeed)."""
    stub = directory.parent / "print_alloc_conf"
    stub.write_text("#!/bin/sh\n" + "".join(f'echo "{k}=${{{k}-<unset>}}"\n' for k in ALLOC_VARS))
    stub.chmod(0o755)
    base = {k: v for k, v in os.environ.items() if k not in ALLOC_VARS}
    proc = subprocess.run(
        ["bash", str(directory / "launch.sh"), "train.py"],
        env={**base, **shell, "PYTHON": str(stub)}, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pairs = (line.split("=", 1) for line in proc.stdout.splitlines())
    return {k: v for k, v in pairs if v != "<unset>"}


@pytest.mark.parametrize(
    "shell",
    [
        {},
        {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"},
        {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False,max_split_size_mb:512"},
        {"PYTORCH_CUDA_ALLOC_CONF": ",expandable_segments : True,"},
        {"PYTORCH_ALLOC_CONF": "garbage_collection_threshold:0.6"},
        {
            "PYTORCH_ALLOC_CONF": "expandable_segments:False",
            "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64",
        },
        {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments,max_split_size_mb:512"},
        {"PYTORCH_CUDA_ALLOC_CONF": "\texpandable_segments:False, max_split_size_mb : 512 ,:x"},
        {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512\n,garbage_collection_threshold:0.6"},
        {"PYTORCH_CUDA_ALLOC_CONF": "roundup_power2_divisions:[256:1,512:2,>:8],*,a b:1,'q'"},
        {"PYTORCH_ALLOC_CONF": ""},
        {"PYTORCH_CUDA_ALLOC_CONF": ""},
    ],
)
def test_launch_sh_keeps_the_shells_other_settings_as_dswiz_launch_does(
    shell: dict[str, str], tmp_path: Path
) -> None:
    """launch.sh turns expandable segments on for the job the way `dswiz launch` does: the user's other allocator
    settings in the shell that runs it are kept, an earlier expandable_segments setting is replaced."""
    cfg = tmp_path / "cfg"
    _config(cfg, "--expandable-segments")
    job = _launch_sh_env(cfg, shell)
    assert expandable_segments(job)
    assert job == {**shell, **with_expandable_segments(shell)}


def test_launch_sets_them_for_the_job_unless_the_shell_has(tmp_path: Path) -> None:
    _config(tmp_path / "cfg", "--expandable-segments")

    def dry(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        state = {"XDG_STATE_HOME": str(tmp_path / "state")}
        proc = dswiz(
            "launch", "--dry-run", "--nproc", "1", "--config", str(tmp_path / "cfg"), str(TRAIN),
            env={**state, **(env or {})}, cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return proc

    def job_env(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
        [line] = [ln for ln in proc.stdout.splitlines() if ln and not ln.startswith("#")]
        return dict(w.split("=", 1) for w in shlex.split(line) if "=" in w and not w.startswith("-"))

    proc = dry()
    assert job_env(proc).get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True"
    assert "# environment: the plan counted on PyTorch's expandable segments" in proc.stdout
    kept = job_env(dry({"PYTORCH_ALLOC_CONF": "max_split_size_mb:512"}))
    assert kept.get("PYTORCH_ALLOC_CONF") == "max_split_size_mb:512,expandable_segments:True"
    already = dry({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert not set(job_env(already)) & set(ALLOC_VARS) and "expandable segments" not in already.stdout


# ------------------------------------------------------------------------------------------------ the readings


def test_the_h200_readings_run_exactly_where_the_card_holds_the_prediction(
    bench_script: Callable[[str], ModuleType],
) -> None:
    """28 configs on one H200 run with expandable segments, one per process, under 24/40 GiB caps and on the whole
    card: every one that ran is predicted to need at most its card, both that ran out of memory more -- without
    the margin, so the remainder is not hidden by it. Eleven of those that ran are predicted not to fit with the
    default allocator's cache (five of them ran out of memory with it)."""
    pa = bench_script("plan_accuracy")
    docs = [
        json.loads(p.read_text())
        for p in sorted(
            (ROOT / "bench/results").glob("plan_accuracy-2026-12-03-1gpu-allocator-expandable-*.json")
        )
        if not p.name.endswith("-summary.json")
    ]
    [(head, rows)] = pa._merge_runs(docs)
    assert pa.run_expandable(head) and len(rows) == 31 and len({pa._reading_key(r) for r in rows}) == 28
    hw = HardwareReport.from_dict(head["hardware"])
    beyond_default = set()
    for r in rows:
        cfg = pa._cfg(r)
        s, model = cfg.strategy(1), pa.bench_spec(cfg.model)
        card = pa.card_for_cap(hw.min_gpu_memory_bytes, cfg.cap_gib, 1, s)
        needed = estimate_memory(model, s, r["seq_len"], expandable_segments=True).needed
        assert (needed <= card) is (r["status"] == "ok"), (pa._label(r), needed / card)
        if r["status"] == "ok" and estimate_memory(model, s, r["seq_len"]).needed > card:
            beyond_default.add(pa._reading_key(r))
    assert len(beyond_default) == 11
    checks = pa._fit_checks(rows, hw, 1, expandable=True)
    assert checks["unsafe"] == [] and checks["unsafe_without_margin"] == []


def test_past_the_cache_a_roomy_card_keeps_the_remapping_is_charged_and_weighed() -> None:
    """Where the cache the allocator would keep with room does not fit the budget, expandable segments remap pages
    every micro-step (GPT-2 at micro-batch 30-33 under a 40 GiB cap: 13-29 % slower than the same step with
    room): that time is a part of the step, and the plan takes the largest micro-batch that stays short of it when
    that is faster. gpt2-xl with checkpointing gains more from the larger micro-batch than the remapping costs."""
    hw = get_hardware("1xH200")
    card = PlanRequest(seq_len=1024, gpu_memory_bytes=40 << 30, allow_offload=False, expandable_segments=True)
    gpt2 = plan(hw, load_model_spec("gpt2"), card).best
    assert gpt2 is not None
    parts = dict(gpt2.predicted.time_parts)
    assert ALLOCATOR_REMAP_PART not in parts and gpt2.strategy.micro_batch_size < gpt2.max_micro_batch
    at_most = evaluate(
        hw, load_model_spec("gpt2"), gpt2.strategy.with_(micro_batch_size=gpt2.max_micro_batch), card
    )
    remap = dict(at_most.predicted.time_parts)[ALLOCATOR_REMAP_PART]
    assert remap == pytest.approx(cal.EXPANDABLE_REMAP_SECONDS)
    assert at_most.predicted.tokens_per_sec < gpt2.predicted.tokens_per_sec
    xl = plan(hw, load_model_spec("gpt2-xl"), card).best
    assert xl is not None and xl.strategy.micro_batch_size == xl.max_micro_batch
    assert ALLOCATOR_REMAP_PART in dict(xl.predicted.time_parts)
    without = plan(hw, load_model_spec("gpt2-xl"), replace(card, expandable_segments=False)).best
    assert without is not None and xl.predicted.tokens_per_sec > without.predicted.tokens_per_sec
    # the default allocator never pays it
    default = plan(hw, load_model_spec("gpt2"), replace(card, expandable_segments=False))
    assert all(ALLOCATOR_REMAP_PART not in dict(c.predicted.time_parts) for c in default.candidates)


def test_check_predicts_a_written_config_with_the_allocator_it_was_planned_for(tmp_path: Path) -> None:
    """`dswiz check DIR --model M` reads the plan's choice from dswiz-plan.json: the config `dswiz config
    --expandable-segments` wrote is predicted to fit as planned, not judged with the default allocator's cache."""
    cfg = tmp_path / "cfg"
    _config(cfg, "--expandable-segments", hardware="1xA10-24GB")
    args = ("check", str(cfg), "--model", "gpt2-xl", "--hardware", "1xA10-24GB", "--no-history", "--json")
    proc = dswiz(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fits gpt2-xl" in proc.stdout and "expandable segments" in proc.stdout
    (cfg / "dswiz-plan.json").unlink()  # without the plan: this shell's settings decide
    assert dswiz(*args).returncode == 1
    assert dswiz(*args, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}).returncode == 0


def test_the_max_batch_table_and_json_say_what_was_planned() -> None:
    """The table's row is the largest micro-batch with its own figures (remapping included), even where the plan
    keeps a smaller one; `dswiz plan --json` carries the choice in its request."""
    proc = dswiz(
        "plan", "--model", "gpt2", "--hardware", "1xH200", "--gpu-memory", "40GiB", "--seq-len", "1024",
        "--no-offload", "--no-history", "--expandable-segments", "--max-batch", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["request"]["expandable_segments"] is True
    best = doc["candidates"][0]
    row = next(r for r in doc["max_batch_table"] if r["zero_stage"] == best["strategy"]["zero_stage"])
    assert row["max_micro_batch"] > best["strategy"]["micro_batch_size"]
    assert row["tokens_per_sec"] < best["predicted"]["tokens_per_sec"]


def test_every_node_and_the_oom_advice_keep_the_choice(tmp_path: Path) -> None:
    """Several nodes: .deepspeed_env carries the variable to the other nodes (DeepSpeed exports only a few prefixes
    itself); the command the OOM advice gives writes the config again with the same choice."""
    out = tmp_path / "two"
    proc = dswiz(
        "config", "--yes", "--model", "llama-7b", "--hardware", "2x8xH100", "--no-history",
        "--expandable-segments", "--slurm-time", "1:00:00", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        in (out / ".deepspeed_env").read_text().splitlines()
    )
    # job.sbatch's environment, run by bash up to its rendezvous: the submitting shell's other settings kept
    sbatch = (out / "job.sbatch").read_text()
    head = sbatch[: sbatch.index("# The rendezvous")] + 'echo "$PYTORCH_CUDA_ALLOC_CONF"\n'
    shell = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512,expandable_segments:False"}
    ran = subprocess.run(
        ["bash", "-c", head, "job.sbatch", "train.py"], env={**os.environ, **shell},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == with_expandable_segments(shell)["PYTORCH_CUDA_ALLOC_CONF"]
    sidecar = read_sidecar(out)
    assert sidecar is not None and sidecar.expandable_segments
    again = config_command(sidecar, sidecar.strategy, str(tmp_path / "again"))
    assert "--expandable-segments" in again and "--no-expandable-segments" not in again
    plain = replace(sidecar, expandable_segments=False)
    assert "--no-expandable-segments" in config_command(plain, plain.strategy, str(tmp_path / "again"))


def test_the_run_history_keeps_the_allocator_the_job_ran_with(tmp_path: Path) -> None:
    """A launch records whether its job ran with expandable segments; its prediction, then and when a newer physics
    predicts the run again, is for that allocator -- not the default allocator's cache, nor the plan's choice where
    the job's shell said otherwise."""
    cfg = tmp_path / "cfg"
    _config(cfg, "--expandable-segments", hardware="1xA10-24GB")
    sidecar = read_sidecar(cfg)
    assert sidecar is not None and sidecar.expandable_segments
    hw = hardware_fingerprint(sidecar.hardware)

    def start(expandable: bool) -> Measurement:
        return entry_at_start(
            run_id=f"r{expandable}", run_dir=tmp_path, hardware=hw, sidecar=sidecar, applies=True,
            expandable_segments=expandable,
        )  # fmt: skip

    on, off = start(True), start(False)
    request = PlanRequest(seq_len=sidecar.seq_len, expandable_segments=True)
    expected = evaluate(sidecar.hardware, sidecar.model, sidecar.strategy, request).predicted
    assert ALLOCATOR_REMAP_PART in dict(expected.time_parts)  # its micro-batch fits the card by remapping
    assert on.predicted.peak_gpu_bytes == expected.gpu_bytes
    assert on.predicted.tokens_per_sec == pytest.approx(expected.tokens_per_sec)
    assert off.predicted.tokens_per_sec > on.predicted.tokens_per_sec  # type: ignore[operator]
    db = tmp_path / "h.sqlite3"
    assert record(on, db) is None and record(off, db) is None
    kept = HistoryStore(db).get(on.id)
    assert kept is not None and kept.expandable_segments and "expandable_segments" in kept.to_json()
    plain = HistoryStore(db).get(off.id)
    assert (
        plain is not None and not plain.expandable_segments and "expandable_segments" not in plain.to_json()
    )
    # predicted by an older physics: made again with the allocator the job ran with
    stale = replace(kept, physics="older", predicted=Figures(tokens_per_sec=1.0, peak_gpu_bytes=1))
    again = predicted_again(stale, sidecar.hardware)
    assert again is not None and again.predicted.peak_gpu_bytes == expected.gpu_bytes
    assert again.predicted.tokens_per_sec == pytest.approx(expected.tokens_per_sec)


def test_the_job_environment_is_the_shell_with_the_launch_changes() -> None:
    shell = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "HOME": "/h"}
    assert not expandable_segments(environ_with({"PYTORCH_CUDA_ALLOC_CONF": None}, shell))
    assert expandable_segments(environ_with({}, shell)) and environ_with({}, shell) == shell
    assert environ_with({"A": "1"}, shell) == {**shell, "A": "1"}
