"""Fuzzed input never produces a traceback: the linter turns anything into findings, the importer into either a
config or a DswizError."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wizard.config.check import lint_config, lint_path
from wizard.config.load import load_path
from wizard.errors import DswizError
from wizard.findings import Finding

from .test_config_roundtrip import ACCELERATE_CONFIG_QUESTIONNAIRE, HAND_WRITTEN

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=10)
json_values = st.recursive(
    scalars | st.sampled_from(["auto", "8", "true", "nvme", "cpu", 3, 0, -1, 5e8]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
KEYS = [
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "fp16",
    "bf16",
    "zero_optimization",
    "optimizer",
    "scheduler",
    "steps_per_print",
    "log_level",
    "activation_checkpointing",
    "csv_monitor",
    "zero_force_ds_cpu_optimizer",
]
ZERO_KEYS = [
    "stage",
    "offload_optimizer",
    "offload_param",
    "zero_hpz_partition_size",
    "zero_quantized_weights",
]


@st.composite
def config_like(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly the right keys with anything as values: the inputs that reach the deepest rules."""
    cfg: dict[str, Any] = {k: draw(json_values) for k in draw(st.lists(st.sampled_from(KEYS), max_size=8))}
    if draw(st.booleans()):
        zero: dict[str, Any] = {
            k: draw(json_values) for k in draw(st.lists(st.sampled_from(ZERO_KEYS), max_size=5))
        }
        if draw(st.booleans()):
            zero["offload_optimizer"] = {"device": draw(json_values), "nvme_path": draw(json_values)}
        cfg["zero_optimization"] = zero
    return cfg


def _all_findings(items: list[Finding]) -> None:
    for f in items:
        assert isinstance(f, Finding) and f.code and f.what and f.fix


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    cfg=json_values | config_like(), consumer=st.sampled_from([None, "deepspeed", "accelerate", "trainer"])
)
def test_lint_config_never_raises(cfg: Any, consumer: Any) -> None:
    _all_findings(lint_config(cfg, consumer=consumer, world_size=2))


@settings(max_examples=300)
@given(
    train=st.none() | st.integers(-2, 70),
    micro=st.none() | st.integers(-2, 9),
    gas=st.none() | st.integers(-2, 9),
    world=st.none() | st.integers(0, 9),
)
def test_batch_rule_never_raises_and_agrees_with_deepspeed_arithmetic(
    train: int | None, micro: int | None, gas: int | None, world: int | None
) -> None:
    cfg = {
        k: v
        for k, v in (
            ("train_batch_size", train),
            ("train_micro_batch_size_per_gpu", micro),
            ("gradient_accumulation_steps", gas),
        )
        if v is not None
    }
    findings = lint_config(cfg, world_size=world)
    _all_findings(findings)
    codes = {f.code for f in findings}
    if (
        world
        and world >= 1
        and (train is not None or micro is not None)
        and all(v is None or v > 0 for v in (train, micro, gas))
    ):
        t = train if train is not None else (micro or 0) * (gas or 1) * world
        m = micro if micro is not None else t // world // (gas or 1)
        g = gas if gas is not None else (t // m // world if m else 0)
        consistent = m > 0 and g > 0 and t == m * g * world
        assert ("batch-arithmetic" in codes) == (not consistent)


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    """A real config with a few values replaced by arbitrary ones, at any depth."""
    cfg = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 4))):
        node: Any = cfg
        while isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node)))
            if not isinstance(node[key], dict) or draw(st.booleans()):
                node[key] = draw(json_values)
                break
            node = node[key]
    return cfg


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=mutated(HAND_WRITTEN))
def test_lint_and_load_of_mutated_configs_never_raise(cfg: dict[str, Any]) -> None:
    _all_findings(lint_config(cfg, consumer="trainer"))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "ds.json"
        path.write_text(json.dumps(cfg))
        try:
            load_path(path)
        except DswizError as e:
            assert e.problem and e.fix


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=mutated(ACCELERATE_CONFIG_QUESTIONNAIRE))
def test_mutated_accelerate_yaml_never_raises(cfg: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "acc.yaml"
        path.write_text(yaml.safe_dump(cfg))
        _all_findings(lint_path(path))
        try:
            load_path(path)
        except DswizError as e:
            assert e.problem and e.fix


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.text(max_size=200) | st.binary(max_size=100).map(lambda b: b.decode("latin-1")),
    name=st.sampled_from(["ds.json", "acc.yaml", "hostfile", ".deepspeed_env", "config"]),
)
def test_any_text_file_never_raises(text: str, name: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
        _all_findings(lint_path(path, world_size=4, launcher="mpich"))
        try:
            load_path(path)
        except DswizError as e:
            assert e.problem and e.fix


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.binary(max_size=64))
def test_binary_files_never_raise(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "x.json"
        path.write_bytes(raw)
        _all_findings(lint_path(path))
        try:
            load_path(path)
        except DswizError as e:
            assert e.problem and e.fix
