"""DeepSpeed JSON and accelerate YAML, fuzzed at scale (test_config_fuzz.py has the targeted cases): the linter on
configs with the managed keys holding any value, the importer on texts with 5,000-digit integers, NaN/Infinity
literals, 1e400 and deep nesting. Each gives findings, a config, or a DswizError naming the problem and the fix."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from runner.configdir import load_ds_config
from wizard.config.check import lint_config, lint_path
from wizard.config.load import settings_from_json_text
from wizard.config.parse import parse_json, parse_yaml

from . import fuzz_support as fz
from .test_config_fuzz import KEYS, config_like
from .test_config_roundtrip import ACCELERATE_CONFIG_QUESTIONNAIRE, HAND_WRITTEN


def check_findings(findings: list[Any]) -> None:
    for f in findings:
        fz.holds(bool(f.code and f.what and f.fix), f"finding {f!r} names the problem and the fix")


@fz.fuzz_settings(625)
@given(
    cfgs=fz.batch(config_like() | fz.mutated(HAND_WRITTEN, KEYS)),
    consumer=st.sampled_from([None, "deepspeed", "accelerate", "trainer"]),
    world=st.none() | st.integers(1, 64),
)
def test_linter_gives_findings_for_any_config(cfgs: list[Any], consumer: Any, world: int | None) -> None:
    for cfg in fz.cases(cfgs):
        check_findings(lint_config(cfg, consumer=consumer, world_size=world))


RAW = [
    fz.HUGE_DIGITS,
    "-" + fz.HUGE_DIGITS,
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "1e308",
    '"8"',
    "true",
    "null",
]


@st.composite
def json_texts(draw: st.DrawFn) -> str:
    text = json.dumps(draw(fz.mutated(HAND_WRITTEN, KEYS, fz.scalars)), default=str)
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return fz.with_a_number_replaced(draw, text, RAW)
    if choice == 1:
        depth = draw(st.sampled_from([50, 999, 3000, 100_000]))
        return text[:-1] + ', "x": ' + '{"a":' * depth + "1" + "}" * depth + "}"
    if choice == 2:
        return text[: draw(st.integers(0, len(text)))]
    return text


@fz.fuzz_settings(375)
@given(texts=fz.batch(json_texts()))
def test_any_json_text_is_a_config_or_a_finding(texts: list[str]) -> None:
    for text in fz.cases(texts):
        check_json_text(text)


def check_json_text(text: str) -> None:
    parse_json(text)
    fz.total(settings_from_json_text, text, source="ds.json")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "ds_config.json"
        path.write_text(text, encoding="utf-8")
        check_findings(lint_path(path))
        fz.total(load_ds_config, path)


@st.composite
def yaml_texts(draw: st.DrawFn) -> str:
    base = draw(
        fz.mutated(ACCELERATE_CONFIG_QUESTIONNAIRE, ["num_processes", "main_process_port"], fz.scalars)
    )
    text = json.dumps(base, default=str)  # JSON is YAML
    choice = draw(st.integers(0, 2))
    if choice == 0:
        return text.replace("1", fz.HUGE_DIGITS, 1)
    if choice == 1:
        depth = draw(st.sampled_from([50, 3000]))
        return "a: " + "[" * depth + "]" * depth
    return text


@fz.fuzz_settings(250)
@given(texts=fz.batch(yaml_texts()))
def test_any_yaml_text_is_a_config_or_a_finding(texts: list[str]) -> None:
    for text in fz.cases(texts):
        check_yaml_text(text)


def check_yaml_text(text: str) -> None:
    parse_yaml(text)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "accelerate.yaml"
        path.write_text(text, encoding="utf-8")
        check_findings(lint_path(path))
