"""The LoRA / QLoRA script change dswiz writes runs against the installed peft and transformers (tiny models, CPU;
bitsandbytes itself is not needed to build its config)."""

from __future__ import annotations

import inspect

import pytest

from wizard.config.build import WriteOptions, config_set_from_strategy
from wizard.hints import bnb_config_code, finetune_script_notes, lora_config_code
from wizard.model import load_model_spec
from wizard.planner import finetune as ft
from wizard.strategy import Strategy
from wizard.tuning import make_finetune

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")


def test_the_lora_call_builds_the_adapters_dswiz_counts() -> None:
    spec = ft.with_finetune(load_model_spec("tiny"), make_finetune("lora", rank=4, alpha=16))
    config = eval(lora_config_code(spec.finetune), {"LoraConfig": peft.LoraConfig})  # the hint's own text
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=4096, n_positions=256)
    )
    wrapped = peft.get_peft_model(model, config)
    assert wrapped.get_nb_trainable_parameters()[0] == ft.trainable_params(spec)
    assert (config.r, config.lora_alpha, sorted(config.target_modules)) == (4, 16, ["c_attn"])


def test_all_linear_is_passed_as_peft_spells_it() -> None:
    code = lora_config_code(make_finetune("lora", targets="all-linear"))
    assert eval(code, {"LoraConfig": peft.LoraConfig}).target_modules == "all-linear"


@pytest.mark.parametrize(("stage", "storage"), [(2, None), (3, torch.bfloat16)])
def test_the_bitsandbytes_config_is_what_transformers_accepts(stage: int, storage: object) -> None:
    code = bnb_config_code(make_finetune("qlora"), "bf16", stage)
    config = eval(code, {"BitsAndBytesConfig": transformers.BitsAndBytesConfig, "torch": torch})
    assert config.load_in_4bit and config.bnb_4bit_quant_type == "nf4" and config.bnb_4bit_use_double_quant
    assert config.bnb_4bit_compute_dtype == torch.bfloat16
    assert config.bnb_4bit_quant_storage == (storage or torch.uint8)  # transformers' default storage: uint8
    assert next(iter(inspect.signature(peft.prepare_model_for_kbit_training).parameters)) == "model"


def test_the_config_set_carries_the_notes_for_every_consumer() -> None:
    qlora = make_finetune("qlora", targets="q_proj,v_proj")
    for consumer in ("deepspeed", "accelerate", "trainer"):
        s = Strategy(zero_stage=3, precision="bf16", activation_checkpointing=True)
        notes = config_set_from_strategy(s, WriteOptions(consumer=consumer, finetune=qlora)).script_notes  # type: ignore[arg-type]
        assert sum("BitsAndBytesConfig(" in n or "get_peft_model(" in n for n in notes) == 2
        assert any("bnb_4bit_quant_storage must equal the compute dtype" in n for n in notes)
        assert all("\n" not in n for n in notes)  # launch.sh writes each note as one comment line
    assert (
        finetune_script_notes(make_finetune("full"), precision="bf16", zero_stage=2, consumer="deepspeed")
        == ()
    )
