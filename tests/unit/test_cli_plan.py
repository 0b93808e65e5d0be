"""`dswiz plan` from the outside: the table, the --json contract, and clear errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def dswiz(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wizard", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "COLUMNS": "100"},
    )


def test_table_with_recommendation_and_reasons() -> None:
    proc = dswiz("plan", "--model", "llama-7b", "--hardware", "8xA100-80GB,ram=1TiB", "--global-batch", "256")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "llama-7b (6.74B params" in out and "A100-SXM4-80GB" in out
    assert "tok/s" in out and "GPU GiB" in out and "RAM GiB" in out
    assert "Recommended: ZeRO-" in out
    assert "global batch 256" in out
    assert "fits:" in out and "throughput" in out
    assert "Traceback" not in proc.stderr


def test_json_is_the_stable_contract_and_matches_the_table() -> None:
    args = ("plan", "--model", "gpt2-medium", "--hardware", "H200", "--seq-len", "1024")
    proc = dswiz(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {"hardware", "model", "candidates"} <= set(doc)
    first = doc["candidates"][0]
    for key in (
        "zero_stage",
        "offload_optimizer",
        "offload_param",
        "precision",
        "micro_batch_size",
        "gradient_accumulation_steps",
        "activation_checkpointing",
        "fits",
        "predicted",
        "reasons",
    ):
        assert key in first
    assert {"gpu_bytes", "cpu_bytes", "nvme_bytes", "tokens_per_sec"} <= set(first["predicted"])
    assert first["fits"] is True
    table = dswiz(*args)
    assert f"micro-batch {first['micro_batch_size']}," in table.stdout


def test_nothing_fits_exits_1_with_advice() -> None:
    proc = dswiz("plan", "--model", "llama-70b", "--hardware", "RTX4090,ram=64GiB", "--no-offload")
    assert proc.returncode == 1, proc.stderr
    assert "Nothing fits" in proc.stdout
    assert "would fit" in proc.stdout


def test_top_and_all() -> None:
    base = ("plan", "--model", "gpt2", "--hardware", "2xA100-80GB", "--seq-len", "512")
    top2 = dswiz(*base, "--top", "2", "--json")
    assert len(json.loads(top2.stdout)["candidates"]) == 2
    everything = json.loads(dswiz(*base, "--json").stdout)["candidates"]
    assert len(everything) > 2


def test_no_gpu_here_says_so_and_suggests_hardware() -> None:
    proc = dswiz("plan", "--model", "gpt2")
    # This machine has no NVIDIA GPU (and the test is skipped where one exists).
    if "no NVIDIA GPU" not in proc.stderr:
        pytest.skip("this machine has a GPU")
    assert proc.returncode == 2
    assert "fix: plan for the machine you will train on" in proc.stderr and "--hardware" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--model", "lama-7b", "--hardware", "H100"), "did you mean llama-7b"),
        (("--model", "gpt2", "--hardware", "9xZ999"), "error:"),
        (("--model", "gpt2", "--hardware", "H100", "--seq-len", "4096"), "longer than gpt2's 1024"),
        (("--model", "gpt2", "--hardware", "8xH100", "--global-batch", "100"), "use 96 or 104"),
        (("--model", "gpt2", "--hardware", "V100-32GB", "--precision", "bf16"), "use --precision fp16"),
        (
            ("--model", "gpt2", "--hardware", "H100", "--gpu-memory", "lots"),
            "is not a size; write e.g. 24GiB",
        ),
        (("--model", "gpt2", "--hardware", "H100", "--gpu-memory", "1B"), "1B is less than 1 MiB"),
        (("--model", "gpt2", "--hardware", "H100", "--precision", "fp8"), "Invalid value for '--precision'"),
        (
            ("--model", "gpt2", "--hardware", "H100", "--mode", "inference", "--stage", "2"),
            "only uses stage 3",
        ),
    ],
)
def test_bad_input_is_a_message_not_a_traceback(args: tuple[str, ...], message: str) -> None:
    proc = dswiz("plan", *args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_max_batch_table_in_text_and_json() -> None:
    args = (
        "plan",
        "--model",
        "gpt2-xl",
        "--hardware",
        "2xRTX3090,ram=64GiB",
        "--seq-len",
        "1024",
        "--max-batch",
    )
    proc = dswiz(*args)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Largest micro-batch per strategy" in out and "0 (DDP)" in out and "batch ckpt" in out
    doc = json.loads(dswiz(*args, "--json").stdout)
    table = doc["max_batch_table"]
    assert {r["zero_stage"] for r in table} == {0, 1, 2, 3}
    z2 = next(r for r in table if r["label"] == "ZeRO-2 optimizer->cpu ckpt")
    # The same number the text table shows for that strategy, and the planner's own limit for its candidate.
    assert f"{z2['tokens_per_sec']:,.0f}" in out
    cand = next(
        c
        for c in doc["candidates"]
        if c["label"] == "ZeRO-2 optimizer->cpu ckpt" and c["gradient_accumulation_steps"] == 1
    )
    assert cand["max_micro_batch"] == z2["max_micro_batch"] >= 1
    assert "max_batch_table" not in json.loads(dswiz(*args[:-1], "--json").stdout)  # only when asked
