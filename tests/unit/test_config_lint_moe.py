"""MoE rules of the linter, following what the installed DeepSpeed refuses: only its own MoE (AutoEP, the config's
expert_parallel section) with stage-3 features it does not support; a Hugging Face MoE model at stage 3 is fine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from wizard.config.build import WriteOptions, config_set_from_strategy
from wizard.config.check import lint_config
from wizard.config.render import ds_config_dict
from wizard.findings import Severity
from wizard.strategy import Strategy

BASE: dict[str, Any] = {"train_micro_batch_size_per_gpu": 2, "steps_per_print": 10, "log_level": "info"}
AUTOEP = {"expert_parallel": {"enabled": True, "autoep_size": 2}}


def _moe_codes(cfg: dict[str, Any]) -> dict[str, Severity]:
    return {
        f.code: f.severity for f in lint_config(cfg, consumer="deepspeed", world_size=2) if "autoep" in f.code
    }


def _zero(stage: int, **keys: Any) -> dict[str, Any]:
    return {"zero_optimization": {"stage": stage, **keys}}


def test_a_hugging_face_moe_plan_at_stage_3_lints_clean() -> None:
    options = WriteOptions(moe_leaf_modules=("MixtralSparseMoeBlock",), deepspeed_version="0.19.8")
    for mode in ("train", "inference"):
        s = Strategy(zero_stage=3, micro_batch_size=2, gpus_per_node=2, mode=mode)  # type: ignore[arg-type]
        cfg = ds_config_dict(config_set_from_strategy(s, options).deepspeed)
        findings = lint_config(cfg, consumer="deepspeed", world_size=2)
        assert [f for f in findings if f.severity is not Severity.INFO] == []


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        (_zero(3, zero_quantized_gradients=True), "autoep-stage3-qgz"),
        (_zero(3, zero_hpz_partition_size=2), "autoep-stage3-hpz"),
        ({**_zero(3), "sequence_parallel_size": 2}, "autoep-stage3-sequence-parallel"),
    ],
)
def test_autoep_at_stage_3_with_what_deepspeed_refuses(extra: dict[str, Any], code: str) -> None:
    assert _moe_codes({**BASE, **AUTOEP, **extra}) == {code: Severity.ERROR}


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_autoep_below_stage_3_is_not_flagged(stage: int) -> None:
    cfg = {**BASE, **AUTOEP, **_zero(stage, zero_quantized_gradients=True, zero_hpz_partition_size=2)}
    assert _moe_codes(cfg) == {}


def test_autoep_disabled_is_not_flagged() -> None:
    cfg = {**BASE, "expert_parallel": {"enabled": False}, **_zero(3, zero_quantized_gradients=True)}
    assert _moe_codes(cfg) == {}


def test_autoep_16bit_save_at_stage_3_warns() -> None:
    cfg = {**BASE, **AUTOEP, **_zero(3, stage3_gather_16bit_weights_on_model_save=True)}
    assert _moe_codes(cfg) == {"autoep-stage3-16bit-save": Severity.WARNING}


def test_the_quoted_refusals_are_the_installed_deepspeeds() -> None:
    """The findings quote DeepSpeed's own messages: they must exist in the installed engine."""
    deepspeed = pytest.importorskip("deepspeed")
    engine = (Path(deepspeed.__file__).parent / "runtime" / "engine.py").read_text(encoding="utf-8")
    for text in (
        "AutoEP with ZeRO Stage 3 does not support zero_quantized_gradients yet",
        "AutoEP with ZeRO Stage 3 does not support hpZeRO secondary tensor groups yet",
        "AutoEP with ZeRO Stage 3 does not support sequence parallelism yet",
        "Native DeepSpeed MoE is not supported with ZeRO Stage 3",
        "is not supported for AutoEP with ZeRO Stage 3 checkpoint",
    ):
        assert text in engine
