"""A LoRA fine-tune under `dswiz launch` with the config `dswiz config --finetune lora` wrote: real DeepSpeed 0.19.8
on CPU (gloo), 2 ranks, real peft, runner/examples/train_hf.py. PEFT's trainable count equals the planner's
and the frozen base does not move."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner import rundir
from tests.integration.test_plan_to_verdict import dswiz
from wizard.config.sidecar import read_sidecar
from wizard.planner import trainable_params

pytestmark = pytest.mark.integration
pytest.importorskip("peft")

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "runner" / "examples" / "train_hf.py"
TINY_LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 64}  # fmt: skip


@pytest.mark.timeout(
    900
)  # importing transformers + peft + DeepSpeed in 2 ranks takes minutes on a busy 2-core box
def test_lora_fine_tune_under_dswiz_launch(tmp_path: Path) -> None:
    model_dir = tmp_path / "tiny"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(TINY_LLAMA))
    written = dswiz(
        tmp_path, "config", "--yes", "--model", str(model_dir), "--finetune", "lora", "--lora-rank", "4",
        "--lora-targets", "q_proj,v_proj,down_proj", "--hardware", "2xA100-80GB", "--seq-len", "32",
        "--stage", "2", "--offload-optimizer", "none", "--offload-param", "none", "--precision", "fp32",
        "--micro-batch", "2", "--grad-accum", "1", "--no-activation-checkpointing", "--no-zeropp",
        "--steps-per-print", "5", "--out", "cfg",
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    sidecar = read_sidecar(tmp_path / "cfg")
    assert sidecar is not None and sidecar.model.finetune.mode == "lora"
    assert "get_peft_model(model, LoraConfig(r=4" in (tmp_path / "cfg" / "launch.sh").read_text()

    # One launch: the script leaves with os._exit after a barrier (DeepSpeed's abort at exit on CPU cannot hit it).
    run_dir = tmp_path / "run"
    proc = dswiz(
        tmp_path, "launch", "--no-tui", "--nproc", "2", "--config", "cfg", "--run-dir", str(run_dir),
        str(TRAIN), "--model-config", str(model_dir / "config.json"), "--lora-rank", "4",
        "--lora-targets", "q_proj,v_proj,down_proj", "--steps", "10", timeout=780,
    )  # fmt: skip
    [rank0] = sorted((run_dir / rundir.RANK_LOGS_DIR).glob("*_rank0.log"))
    out = proc.stdout + proc.stderr + rank0.read_text(errors="replace")
    assert proc.returncode == 0, out[-4000:]
    facts = [json.loads(ln[ln.index("{") :]) for ln in out.splitlines() if '{"trainable_params"' in ln]
    assert facts and facts[0]["trainable_params"] == trainable_params(sidecar.model)
    [end] = {ln[ln.index("{") :] for ln in out.splitlines() if '{"frozen_base_unchanged"' in ln}
    assert json.loads(end)["frozen_base_unchanged"] is True
    assert "{'loss'" in out
    assert rundir.read_run_record(run_dir).verdict.kind == "success"  # type: ignore[union-attr]
