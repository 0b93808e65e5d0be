"""The configs dswiz writes, accepted by the real consumers on CPU (docs/cpu-testing.md): DeepSpeed trains the tiny model under
every stage through the real `deepspeed` launcher with 2 ranks (one launch for all configs), `accelerate launch`
runs a config-file-mode YAML, accelerate's own loader accepts every YAML mode, and DeepSpeed's/accelerate's own
validation agrees with dswiz's linter."""

from __future__ import annotations

import json
import os
import runpy
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.integration.launch_support import free_port, run_deepspeed
from wizard.config.build import WriteOptions, config_set_from_strategy
from wizard.config.check import lint_path
from wizard.config.lint.batch import complete_batch
from wizard.config.render import render_all, render_ds_json
from wizard.consumer.check import ProbeTarget, consumer_findings_many
from wizard.findings import Severity
from wizard.strategy import Strategy

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DRIVER = ROOT / "tests" / "integration" / "ds_multi_config_driver.py"
TRAIN_TINY = ROOT / "runner" / "examples" / "train_tiny.py"
TINY_ARGS = ["--vocab", "128", "--hidden", "32", "--layers", "1", "--heads", "2", "--seq-len", "16"]


def env() -> dict[str, str]:
    # The launchers are console scripts of this interpreter's environment.
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(ROOT)}


# name -> strategy written for 2 ranks. The offload config uses torch's AdamW as DeepSpeed's optimizer
# (torch_adam): DeepSpeedCPUAdam would need a JIT build first (~1 min on a 2-core machine).
TRAINING = {
    "stage0_fp32": Strategy(zero_stage=0, precision="fp32", micro_batch_size=2, gpus_per_node=2),
    "stage1_bf16": Strategy(zero_stage=1, micro_batch_size=2, gradient_accumulation_steps=2, gpus_per_node=2),
    "stage2_bf16": Strategy(zero_stage=2, micro_batch_size=2, gpus_per_node=2),
    "stage3_bf16": Strategy(zero_stage=3, micro_batch_size=2, gpus_per_node=2),
    "stage3_offload_bf16": Strategy(
        zero_stage=3, offload_optimizer="cpu", micro_batch_size=2, gpus_per_node=2
    ),
    "stage2_fp16": Strategy(zero_stage=2, precision="fp16", micro_batch_size=2, gpus_per_node=2),
}


def test_written_configs_train_under_the_deepspeed_launcher(tmp_path: Path) -> None:
    paths = []
    for name, strategy in TRAINING.items():
        options = WriteOptions(torch_adam=True, steps_per_print=1, csv_output_path=str(tmp_path / "csv"))
        path = tmp_path / f"{name}.json"
        path.write_text(render_ds_json(config_set_from_strategy(strategy, options).deepspeed))
        paths.append(str(path))
    results_file = tmp_path / "results.jsonl"
    port = free_port()
    proc = run_deepspeed(
        [
            str(BIN / "deepspeed"),
            "--num_gpus",
            "2",
            "--master_port",
            str(port),
            str(DRIVER),
            "--out",
            str(results_file),
            "--steps",
            "3",
            *paths,
        ],
        master_port=port,
        cwd=tmp_path,
        env=env(),
        timeout=400,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    results = {r["config"]: r for r in map(json.loads, results_file.read_text().splitlines())}
    assert sorted(results) == sorted(f"{n}.json" for n in TRAINING)
    for name, strategy in TRAINING.items():
        r = results[f"{name}.json"]
        if strategy.precision == "fp16" and not r["ok"]:
            # DeepSpeed's CPU accelerator offers fp16 only where oneDNN has fp16 kernels: it says so itself.
            assert "fp16 is not supported on your device" in r["error"]
            continue
        assert r["ok"], r
        assert r["zero_stage"] == strategy.zero_stage and r["world_size"] == 2
        assert r["micro_batch"] == strategy.micro_batch_size
        assert r["grad_accum"] == strategy.gradient_accumulation_steps
        assert r["train_batch"] == strategy.global_batch_size
        assert (
            r["dtype"]
            == {"fp32": "torch.float32", "bf16": "torch.bfloat16", "fp16": "torch.float16"}[
                strategy.precision
            ]
        )
        assert r["offload_optimizer"] == strategy.offload_optimizer
        assert len(r["losses"]) == 3
    # The observability settings dswiz writes work: throughput lines at INFO, the csv monitor's file.
    assert "RunningAvgSamplesPerSec=" in log
    assert (tmp_path / "csv" / "dswiz" / "Train_Samples_lr.csv").exists()


def test_accelerate_launch_runs_the_written_config_file_yaml(tmp_path: Path) -> None:
    out = tmp_path / "acc"
    write = subprocess.run(
        [
            sys.executable,
            "-m",
            "wizard",
            "config",
            "--yes",
            "--for",
            "accelerate",
            "--stage",
            "2",
            "--gpus-per-node",
            "2",
            "--micro-batch",
            "2",
            "--master-port",
            str(free_port()),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert write.returncode == 0, write.stderr
    proc = subprocess.run(
        ["bash", str(out / "launch.sh"), str(TRAIN_TINY), "--steps", "3", "--log-every", "1", *TINY_ARGS],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "done: 3 steps" in log
    assert "dp_world_size=2" in log  # a real 2-rank DeepSpeed job under accelerate


def _yaml_sets(tmp_path: Path) -> dict[str, Path]:
    sets = {
        "config_file": (
            Strategy(zero_stage=3, offload_optimizer="cpu", gpus_per_node=2),
            WriteOptions(consumer="accelerate"),
        ),
        "plugin": (
            Strategy(zero_stage=2, gpus_per_node=2),
            WriteOptions(consumer="accelerate", accelerate_mode="plugin"),
        ),
        "multi_node": (
            Strategy(zero_stage=3, nodes=2, gpus_per_node=2),
            WriteOptions(consumer="accelerate", hosts=("node-a", "node-b"), master_addr="127.0.0.1"),
        ),
        # A Mixtral plan in plugin mode (deepspeed_moe_layer_cls_names) and ZeRO-3 inference (no optimizer).
        "plugin_moe_stage3": (
            Strategy(zero_stage=3, gpus_per_node=2),
            WriteOptions(
                consumer="accelerate", accelerate_mode="plugin", moe_leaf_modules=("MixtralSparseMoeBlock",)
            ),
        ),
        "inference": (
            Strategy(zero_stage=3, offload_param="cpu", gpus_per_node=2, mode="inference"),
            WriteOptions(consumer="accelerate"),
        ),
    }
    out = {}
    for name, (strategy, options) in sets.items():
        directory = tmp_path / name
        directory.mkdir()
        options = replace(options, config_dir=str(directory), master_port=free_port())
        for file_name, text in render_all(config_set_from_strategy(strategy, options)).items():
            (directory / file_name).write_text(text)
        out[name] = directory / "accelerate.yaml"
    return out


def test_accelerates_own_loader_accepts_every_written_yaml(tmp_path: Path) -> None:
    yamls = _yaml_sets(tmp_path)
    targets = [ProbeTarget(path, "accelerate", consumer="accelerate") for path in yamls.values()]
    for name, findings in zip(yamls, consumer_findings_many(targets, cwd=tmp_path), strict=True):
        assert [f for f in findings if f.severity is Severity.ERROR] == [], (name, findings)
        assert not [f for f in findings if f.code.startswith("consumer-")], (name, findings)


def test_consumers_own_validation_reports_what_dswiz_reports(tmp_path: Path) -> None:
    broken = ROOT / "tests" / "fixtures" / "configs" / "broken"
    shutil.copy(broken / "support_ds.json", tmp_path / "support_ds.json")
    shutil.copy(broken / "acc_config_file_with_zero_stage.yaml", tmp_path / "acc.yaml")
    zero, batch, acc = consumer_findings_many(
        [
            ProbeTarget(broken / "unknown_zero_key.json", "deepspeed", world_size=2),
            ProbeTarget(broken / "batch_arithmetic.json", "deepspeed", world_size=4),
            ProbeTarget(tmp_path / "acc.yaml", "accelerate"),
        ],
        cwd=tmp_path,
    )
    assert any(f.code == "deepspeed-rejects" and "overlap_com" in f.what for f in zero)
    assert any(f.code == "deepspeed-rejects" and "30 != 4 * 2 * 4" in f.what for f in batch)
    assert any(f.code == "accelerate-rejects" and "will be ignored" in f.what for f in acc)


def test_dswiz_check_runs_the_consumer_check_on_a_written_directory(tmp_path: Path) -> None:
    out = tmp_path / "run"
    subprocess.run(
        [sys.executable, "-m", "wizard", "config", "--yes", "--gpus-per-node", "2", "--out", str(out)],
        cwd=ROOT,
        env=env(),
        check=True,
        capture_output=True,
        timeout=120,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "wizard", "check", str(out), "--for", "deepspeed", "--json"],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["ok"], doc
    assert not [f for f in doc["findings"] if f["code"].startswith("consumer-")]


BATCH_GRID = [
    (t, m, g, w)
    for t in (None, 8, 12, 16, 30)
    for m in (None, 2, 4)
    for g in (None, 1, 2)
    for w in (1, 2, 4)
    if t is not None or m is not None
]

DS_BATCH_SCRIPT = """
import json, sys
import deepspeed.comm as dist
from deepspeed.runtime.config import DeepSpeedConfig
out = []
for t, m, g, w in json.loads(sys.stdin.read()):
    dist.get_rank = lambda *a, **k: 0
    dist.get_world_size = lambda *a, _w=w, **k: _w
    cfg = {k: v for k, v in (("train_batch_size", t), ("train_micro_batch_size_per_gpu", m),
                             ("gradient_accumulation_steps", g)) if v is not None}
    try:
        c = DeepSpeedConfig(cfg)
        out.append([c.train_batch_size, c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps])
    except Exception as e:
        out.append(None)
print("RESULT " + json.dumps(out))
"""


def test_batch_completion_agrees_with_deepspeedconfig() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", DS_BATCH_SCRIPT],
        input=json.dumps(BATCH_GRID),
        capture_output=True,
        text=True,
        timeout=180,
        env=env(),
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    theirs = json.loads(line[len("RESULT ") :])
    for (t, m, g, w), ds in zip(BATCH_GRID, theirs, strict=True):
        ours: Any = complete_batch(t, m, g, w)
        assert (list(ours) if isinstance(ours, tuple) else None) == ds, (t, m, g, w, ours, ds)


def test_frozen_key_lists_match_the_installed_consumers(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "freeze_config_keys.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env(),
    )
    assert proc.returncode == 0, proc.stderr
    for name in ("ds_keys", "accelerate_keys"):
        fresh = runpy.run_path(str(tmp_path / f"{name}.py"))
        frozen = runpy.run_path(str(ROOT / "wizard" / "config" / f"{name}.py"))
        for key, value in fresh.items():
            if key.isupper():
                assert frozen[key] == value, f"{name}.{key} changed: rerun scripts/freeze_config_keys.py"


# DeepSpeed refuses these only when initialize builds the engine's optimizer (no config parser sees them): each
# corpus file against deepspeed.initialize itself, one rank on CPU, with the script's own AdamW as the Trainer
# passes one.
ENGINE_REFUSALS: dict[str, tuple[str, str] | None] = {  # file: (what initialize raises, the linter's ERROR)
    "broken/grad_accum_fp32_without_zero.json": ("NotImplementedError", "grad-accum-dtype"),
    "broken/grad_accum_dtype_unknown.json": ("ValueError", "grad-accum-dtype"),
    "broken/grad_accum_fp32_stage1_no_grad_norm.json": ("ValueError", "grad-accum-dtype"),
    "broken/grad_accum_dtype_auto.json": ("ValueError", "auto-unfilled"),
    "valid/grad_accum_fp32_stage1_bf16.json": None,
}
INITIALIZE_EACH = """
import json, os, sys, torch
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
import deepspeed
out = {}
for path in sys.argv[2:]:
    model = torch.nn.Linear(8, 8)
    try:
        deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters()), config=path)
        out[path] = None
    except Exception as e:
        out[path] = type(e).__name__
print("RESULT " + json.dumps(out))
"""


def test_engine_time_refusals_agree_with_deepspeed_initialize() -> None:
    """data_types.grad_accum_dtype (a name, "auto" included): dswiz's linter gives an ERROR exactly where
    deepspeed.initialize raises."""
    corpus = ROOT / "tests" / "fixtures" / "configs"
    paths = [str(corpus / name) for name in ENGINE_REFUSALS]
    done = subprocess.run(
        [sys.executable, "-c", INITIALIZE_EACH, str(free_port()), *paths],
        env={**env(), "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, done.stdout[-2000:] + done.stderr[-2000:]
    raised = json.loads(line.removeprefix("RESULT "))
    for name, expected in ENGINE_REFUSALS.items():
        path = str(corpus / name)
        assert raised[path] == (expected[0] if expected else None), name
        # plain deepspeed.initialize reads the file as it is
        found = lint_path(Path(path), consumer="deepspeed")
        errors = [f.code for f in found if f.severity is Severity.ERROR]
        assert errors == ([expected[1]] if expected else []), name
