"""LoRA and QLoRA accounting: trainable parameters equal PEFT's own count on small models built from config (CPU),
the 4-bit storage follows bitsandbytes' layout, and the planner answers the QLoRA paper's question."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wizard.errors import DswizError
from wizard.model import ModelSpec, load_model_spec, spec_from_config
from wizard.planner import finetune as ft
from wizard.planner.memory import estimate_memory
from wizard.planner.throughput import flops_per_token
from wizard.strategy import Strategy
from wizard.tuning import FineTune, make_finetune

ROOT = Path(__file__).resolve().parents[2]
TINY: dict[str, dict[str, Any]] = {
    "gpt2": {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 300, "n_positions": 64},
    "llama": {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 176, "vocab_size": 300},
    "mistral": {"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                "num_key_value_heads": 1, "intermediate_size": 96, "vocab_size": 300},
    "qwen2": {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 300, "tie_word_embeddings": True},
    "gpt_neox": {"model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                 "intermediate_size": 256, "vocab_size": 300},
}  # fmt: skip
TINY["gpt_neox_serial"] = {**TINY["gpt_neox"], "use_parallel_residual": False}
CASES = [
    ("gpt2", 8, ()),
    ("gpt2", 4, ("c_proj",)),  # matches attn.c_proj and mlp.c_proj, as PEFT's suffix match does
    ("gpt2", 16, ("all-linear",)),
    ("llama", 8, ()),
    ("llama", 16, ("all-linear",)),
    ("llama", 4, ("k_proj", "o_proj", "down_proj")),
    ("mistral", 8, ()),
    ("mistral", 32, ("all-linear",)),
    ("qwen2", 8, ()),
    ("qwen2", 8, ("all-linear",)),
    ("gpt_neox", 8, ()),
    ("gpt_neox", 2, ("all-linear",)),
]


def _peft_trainable(cfg: dict[str, Any], rank: int, targets: tuple[str, ...]) -> int:
    pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from transformers import AutoConfig, AutoModelForCausalLM

    kw = {k: v for k, v in cfg.items() if k != "model_type"}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(cfg["model_type"], **kw))
    if targets == ("all-linear",):
        target_modules: Any = "all-linear"
    else:
        target_modules = list(targets) or None  # None: PEFT's own per-architecture default
    lora = peft.get_peft_model(model, peft.LoraConfig(r=rank, target_modules=target_modules))
    trainable, _ = lora.get_nb_trainable_parameters()
    return int(trainable)


@pytest.mark.parametrize(("arch", "rank", "targets"), CASES)
def test_lora_trainable_parameters_equal_peft(arch: str, rank: int, targets: tuple[str, ...]) -> None:
    spec = ft.with_finetune(
        spec_from_config(TINY[arch], name=arch, source="test"),
        make_finetune("lora", rank=rank, targets=targets),
    )
    assert ft.trainable_params(spec) == _peft_trainable(TINY[arch], rank, targets)


def test_defaults_are_peft_defaults() -> None:
    peft = pytest.importorskip("peft")
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as mapping

    for model_type, targets in ft.PEFT_DEFAULT_TARGETS.items():
        assert list(targets) == mapping[model_type], model_type
    config = peft.LoraConfig()
    assert (config.r, config.lora_alpha) == (FineTune().lora_rank, FineTune().lora_alpha)


def test_unknown_targets_and_unmapped_architectures_name_the_fix() -> None:
    llama = load_model_spec("llama-7b")
    with pytest.raises(DswizError) as e:
        ft.with_finetune(llama, make_finetune("lora", targets="q_proj,c_attn"))
    assert "c_attn not found" in e.value.problem and e.value.fix and "q_proj" in e.value.fix
    with pytest.raises(DswizError) as e:
        ft.with_finetune(load_model_spec("qwen1.5-moe-a2.7b"), make_finetune("lora"))
    assert "no default LoRA target" in e.value.problem
    with pytest.raises(DswizError, match="--lora-rank"):
        make_finetune("lora", rank=0)
    with pytest.raises(DswizError, match="unknown fine-tuning mode"):
        make_finetune("prefix")


def test_nf4_storage_matches_the_qlora_paper() -> None:
    """arXiv:2305.14314 section 3: constants cost 32/64 = 0.5 bits per weight, 8/64 + 32/(64*256) ~ 0.127 bits
    with double quantization; the weights themselves 4 bits."""
    n = 64 * 256 * 1000
    assert ft.nf4_bytes(n, double_quant=False) * 8 / n == pytest.approx(4.5)
    assert ft.nf4_bytes(n, double_quant=True) * 8 / n == pytest.approx(4.127, abs=1e-3)


@pytest.mark.parametrize(
    ("shape", "double_quant"), [((64, 64), True), ((96, 200), True), ((128, 176), False)]
)
def test_nf4_storage_is_what_bitsandbytes_stores(shape: tuple[int, int], double_quant: bool) -> None:
    """The packed weights and the quantization constants a real bitsandbytes Params4bit holds (its CPU backend):
    absmax per block of 64 (8-bit with double quantization, plus the fp32 absmax per 256 of those and one offset).
    The 16-entry NF4 code table each tensor also carries (64 bytes) is left out of the planner's count."""
    torch = pytest.importorskip("torch")
    bnb = pytest.importorskip("bitsandbytes")
    w = bnb.nn.Params4bit(torch.randn(*shape, dtype=torch.bfloat16), requires_grad=False, quant_type="nf4",
                          compress_statistics=double_quant).to("cpu")  # fmt: skip
    qs = w.quant_state
    constants = [qs.absmax, *((qs.state2.absmax, qs.offset) if double_quant else ())]
    stored = w.numel() * w.element_size() + sum(t.numel() * t.element_size() for t in constants)
    assert ft.nf4_bytes(shape[0] * shape[1], double_quant) == stored


def _frozen_elements_no_backward_uses(
    cfg: dict[str, Any], mode: str, checkpointing: bool, targets: tuple[str, ...] = ()
) -> int:
    """Elements of the parameters of every module whose output requires no gradient in a LoRA model's training
    forward (PEFT's default targets): autograd never runs their backward, and ZeRO-3 hangs its backward gathers on
    exactly those outputs. 4-bit linear weights count as the bf16 elements they are packed into."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from transformers import AutoConfig, AutoModelForCausalLM

    kw = {k: v for k, v in cfg.items() if k != "model_type"}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(cfg["model_type"], **kw)).to(torch.bfloat16)
    if mode == "qlora":
        pytest.importorskip("bitsandbytes")
        sys.path.insert(0, str(ROOT / "bench"))
        from _common import quantize_linears_

        quantize_linears_(model, torch.bfloat16, True, torch.bfloat16)
    lora = peft.LoraConfig(r=4, target_modules=list(targets) or None)  # None: PEFT's default targets
    model = peft.get_peft_model(model, lora, autocast_adapter_dtype=False)
    if checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    free: dict[int, int] = {}
    used: set[int] = set()  # a tied embedding's lookup runs no backward, but the head's does

    def record(module: Any, _inputs: Any, out: Any) -> None:
        t = out[0] if isinstance(out, tuple) else getattr(out, "logits", out)
        if isinstance(t, torch.Tensor):
            for p in module.parameters(recurse=False):
                if t.requires_grad:
                    used.add(id(p))
                else:
                    free[id(p)] = p.numel()

    hooks = [m.register_forward_hook(record) for m in model.modules()]
    ids = torch.randint(0, cfg["vocab_size"], (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    for h in hooks:
        h.remove()
    return sum(n for key, n in free.items() if key not in used)


@pytest.mark.parametrize(
    ("arch", "mode", "checkpointing", "targets"),
    [("llama", "lora", False, ()), ("llama", "qlora", False, ()), ("llama", "lora", True, ()),
     ("gpt2", "lora", False, ()), ("qwen2", "lora", False, ()), ("mistral", "qlora", True, ()),
     ("gpt_neox", "lora", False, ()), ("gpt_neox_serial", "lora", False, ()),
     ("gpt_neox", "lora", False, ("dense_h_to_4h",)), ("gpt_neox", "lora", False, ("dense_4h_to_h",)),
     ("gpt_neox_serial", "lora", False, ("dense_h_to_4h",)), ("llama", "lora", False, ("o_proj", "up_proj"))],
)  # fmt: skip
def test_what_no_lora_backward_uses_is_what_pytorch_leaves_out(
    arch: str, mode: str, checkpointing: bool, targets: tuple[str, ...]
) -> None:
    """Without checkpointing the frozen embeddings (not a tied one) and the first block's projections up to the
    first adapter run no backward; with it, transformers makes the embeddings' output require a gradient and every
    module runs one; with GPT-NeoX's parallel residual the first block's attention and MLP both read the block's
    input, and whichever has no adapter runs none either. The planner leaves the first block's norms and biases out: at most six hidden widths
    and one layer's bias outputs."""
    cfg = TINY[arch]
    tune = make_finetune(mode, rank=4, targets=",".join(targets))
    spec = ft.with_finetune(spec_from_config(cfg, name=arch, source="test"), tune)
    measured = _frozen_elements_no_backward_uses(cfg, mode, checkpointing, targets)
    planned = ft.backward_free_bytes(spec, 2, checkpointing) // 2
    if checkpointing:
        assert measured == planned == 0
    else:
        slack = 6 * spec.hidden + spec.linear_bias_outputs
        assert planned > 0 and 0 <= measured - planned <= slack, (measured, planned)


def test_frozen_base_carries_no_gradients_or_optimizer_states() -> None:
    base = load_model_spec("llama-7b")
    s = Strategy(zero_stage=2, micro_batch_size=1)
    full = dict(estimate_memory(base, s, 2048).gpu_items)
    lora = ft.with_finetune(base, make_finetune("lora", rank=16))
    qlora = ft.with_finetune(base, make_finetune("qlora", rank=16))
    m_lora, m_q = (
        dict(estimate_memory(lora, s, 2048).gpu_items),
        dict(estimate_memory(qlora, s, 2048).gpu_items),
    )
    t = ft.trainable_params(lora)
    assert m_lora["optimizer states"] == 12 * t and full["optimizer states"] == 12 * base.total_params
    assert m_lora["parameters"] == 2 * (base.total_params + t)
    # 4-bit base: a little over a quarter of the 16-bit one (embeddings and head stay 16-bit)
    assert 0.25 < m_q["parameters"] / m_lora["parameters"] < 0.33
    assert m_q["4-bit dequantization buffer"] == 2 * 4096 * 11008
    # no weight gradients: a frozen base costs 4N per token instead of 6N (+ attention and the adapters)
    assert flops_per_token(lora, 2048) < flops_per_token(base, 2048) * 0.72


def test_optimizer_offload_is_not_offered_for_adapters() -> None:
    lora = ft.with_finetune(load_model_spec("llama-7b"), make_finetune("lora"))
    problems = ft.strategy_problems(lora, Strategy(zero_stage=2, offload_optimizer="cpu"))
    assert problems and "moot" in problems[0]
    qlora = ft.with_finetune(lora, make_finetune("qlora"))
    assert any("4-bit" in p for p in ft.strategy_problems(qlora, Strategy(zero_stage=3, offload_param="cpu")))


def test_finetune_survives_the_plan_sidecar_round_trip() -> None:
    spec = ft.with_finetune(
        load_model_spec("llama-7b"), make_finetune("qlora", rank=64, targets="all-linear")
    )
    back = ModelSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back == spec
    old = spec.to_dict()
    del old["finetune"]  # a sidecar written before fine-tuning modes
    assert ModelSpec.from_dict(old).finetune == FineTune()


def test_qlora_70b_on_one_48gb_l40s() -> None:
    """The QLoRA paper fine-tuned a 65B model on one 48 GB GPU: dswiz must find how for LLaMA-2-70B on an L40S."""
    args = [
        sys.executable,
        "-m",
        "wizard",
        "plan",
        "--model",
        "llama-70b",
        "--finetune",
        "qlora",
        "--hardware",
        "1xL40S",
    ]
    out = subprocess.run([*args, "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    best = doc["candidates"][0]
    assert best["fits"] and best["strategy"]["activation_checkpointing"]
    assert best["predicted"]["gpu_bytes"] < 48e9
    text = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT).stdout
    assert "Recommended:" in text and "QLoRA" in text and "4-bit" in text
    # LoRA keeps a 16-bit base (128 GiB): only ZeRO-3 with the base offloaded to host RAM fits the card
    lora = [*args[:7], "lora", "--hardware", "1xL40S,ram=256GiB", "--json"]
    best_lora = json.loads(subprocess.run(lora, capture_output=True, text=True, timeout=120, cwd=ROOT).stdout)
    assert best_lora["candidates"][0]["strategy"]["offload_param"] == "cpu"
    small_host = [*lora[:-2], "1xL40S,ram=64GiB"]
    assert subprocess.run(small_host, capture_output=True, text=True, timeout=120, cwd=ROOT).returncode == 1


def test_launchs_oom_replan_keeps_qlora_and_its_command_writes_it_again(tmp_path: Path) -> None:
    """The plan sidecar carries the fine-tuning mode: after a CUDA OOM, launch's re-plan (wizard.replan) plans QLoRA
    again, and the `dswiz config` command it advises writes QLoRA again."""
    import shlex

    from click.testing import CliRunner

    from wizard import planner
    from wizard.cli import cli
    from wizard.config.build import WriteOptions, config_set_from_strategy
    from wizard.config.render import ds_config_dict
    from wizard.config.sidecar import read_sidecar
    from wizard.hardware import get_hardware
    from wizard.replan import make_sidecar, oom_advice, predict

    hw = get_hardware("1xL40S")
    spec = ft.with_finetune(load_model_spec("llama-7b"), make_finetune("qlora", rank=16))
    req = planner.PlanRequest(seq_len=2048)
    best = planner.plan(hw, spec, req).best
    assert best is not None
    failed = best.strategy.with_(micro_batch_size=best.strategy.micro_batch_size + 8)
    sidecar = make_sidecar(
        model_arg="llama-7b", model=spec, hardware_arg="1xL40S", hardware=hw, request=req,
        candidate=predict(hw, spec, failed, req),
    )  # fmt: skip
    ds = ds_config_dict(config_set_from_strategy(failed, WriteOptions()).deepspeed)
    lines = oom_advice(sidecar, ds, config_dir=str(tmp_path / "cfg"))
    assert lines, "a smaller micro-batch of the same QLoRA job fits"
    line = next(ln for ln in lines if "dswiz config" in ln)
    command = shlex.split(line[line.index("dswiz config") :])
    assert command[command.index("--finetune") + 1] == "qlora" and "--lora-rank" in command
    result = CliRunner().invoke(cli, command[1:])
    assert result.exit_code == 0, result.output
    again = read_sidecar(tmp_path / "cfg")
    assert again is not None and again.model.finetune == spec.finetune


@pytest.mark.parametrize("mode", ["lora", "qlora"])
def test_a_checkpointed_moe_block_releases_only_its_attention_early(mode: str) -> None:
    """The sparse MLP block starts an MoE layer's recompute and holds the experts until their backward is done: only
    the attention (and the norms) is gathered twice, a few per cent of the block; in a dense LLaMA block most of it
    (all but the last projection at 16 bits, the attention at 4)."""
    dense = ft.with_finetune(load_model_spec("llama-7b"), make_finetune(mode))
    for name in ("mixtral-8x7b", "qwen1.5-moe-a2.7b"):
        moe = ft.with_finetune(load_model_spec(name), make_finetune(mode, targets="q_proj,v_proj"))
        released, whole = ft.recompute_released_bytes(moe, 2)
        attention = sum(
            lay.count * lay.weights for lay in ft.linear_layers(moe) if lay.reads in ft.BLOCK_ORDER[:2]
        )
        stored = attention / 2 if mode == "qlora" else 2 * attention
        assert stored / moe.layers < released < 1.02 * stored / moe.layers, name  # + the norms and biases
        assert released < 0.1 * whole, name
    released, whole = ft.recompute_released_bytes(dense, 2)
    assert released > (0.6 if mode == "lora" else 0.2) * whole


def test_an_moe_models_dense_layers_release_by_the_dense_rule() -> None:
    """Qwen2-MoE's dense layers (decoder_sparse_step, mlp_only_layers) are plain MLP modules, not ZeRO-3 leaves: a
    model whose every other layer is dense releases the mean of the all-MoE and the all-dense model's figures."""
    base = {"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 176, "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 176, "num_experts": 8, "num_experts_per_tok": 2,
            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 300}  # fmt: skip

    def released(mode: str, **cfg: Any) -> float:
        spec = spec_from_config({**base, **cfg}, name="qwen2-moe", source="test")
        return ft.recompute_released_bytes(
            ft.with_finetune(spec, make_finetune(mode, targets="q_proj,v_proj")), 2
        )[0]

    for mode in ("lora", "qlora"):
        moe, dense = released(mode), released(mode, mlp_only_layers=[0, 1, 2, 3])
        mixed = released(mode, decoder_sparse_step=2)
        assert mixed == pytest.approx((moe + dense) / 2, rel=0.01), mode  # biases apart
        assert (dense > moe) if mode == "lora" else (dense == pytest.approx(moe, rel=0.05)), mode


def test_a_neox_spec_saved_before_the_parallel_residual_was_read_keeps_it() -> None:
    spec = load_model_spec("gpt-neox-20b")
    assert spec.parallel_residual
    old = {k: v for k, v in spec.to_dict().items() if k != "parallel_residual"}
    assert ModelSpec.from_dict(old) == spec
    llama = {k: v for k, v in load_model_spec("llama-7b").to_dict().items() if k != "parallel_residual"}
    assert not ModelSpec.from_dict(llama).parallel_residual
