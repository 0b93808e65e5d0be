"""Values of the wrong type on keys dswiz manages (DeepSpeed 0.19.8 reads top-level values as they are,
``deepspeed/runtime/config_utils.py`` ``get_scalar_param``): numbers written as strings ("8") make the
HF Trainer report a "mismatch" and plain DeepSpeed fail ('>' between str and int); booleans written as strings
("false") are truthy; anything else that is not what DeepSpeed reads."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from wizard.config import ds_keys
from wizard.config.lint.base import ERROR, LintContext, finding, is_auto, section
from wizard.config.load import is_union_tag, split_managed
from wizard.config.schema import DeepSpeedSettings
from wizard.findings import Finding

_NUMBER = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")
_BOOL = ("true", "false", "True", "False", "yes", "no")


def check_types(cfg: dict[str, Any], ctx: LintContext) -> list[Finding]:
    out: list[Finding] = []
    try:
        DeepSpeedSettings.model_validate(split_managed(DeepSpeedSettings, cfg))
    except ValidationError as e:
        seen: set[str] = set()
        for item in e.errors():
            parts = [str(p) for p in item["loc"] if p != "unmanaged" and not is_union_tag(p)]
            path = ".".join(parts)
            if path in seen:
                continue
            seen.add(path)
            value = _lookup(cfg, parts)
            if is_auto(value):
                continue  # the "auto" rules judge it against the consumer
            if path in ds_keys.SECTION_KEYS and not isinstance(value, dict):
                continue  # reported by the key rules (section-not-object)
            out.append(_type_finding(path, value, str(item["msg"]).removeprefix("Value error, ")))
    # The optimizer's and scheduler's params are free-form, but a quoted number there is the same bug.
    for name in ("optimizer", "scheduler"):
        params = section(cfg, name, "params")
        for key, value in params.items():
            if isinstance(value, str) and _NUMBER.match(value):
                out.append(_type_finding(f"{name}.params.{key}", value, "a number written as a string"))
    return out


def _lookup(cfg: dict[str, Any], parts: list[str]) -> Any:
    node: Any = cfg
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


_RANGE_MESSAGES = ("must not be negative", "must be at least 1")


def _type_finding(path: str, value: Any, msg: str) -> Finding:
    if isinstance(value, str) and _NUMBER.match(value):
        number = value.strip()
        return finding(
            ERROR,
            "string-number",
            f'{path} is the string "{value}", not a number',
            "plain DeepSpeed fails comparing a string with a number, and the HF Trainer reports a mismatch",
            f"write {path.split('.')[-1]}: {number} without quotes",
            path,
        )
    if isinstance(value, str) and value in _BOOL:
        literal = "true" if value.lower() in ("true", "yes") else "false"
        return finding(
            ERROR,
            "string-bool",
            f'{path} is the string "{value}", not a boolean',
            'any non-empty string counts as true: "false" switches the setting ON',
            f"write {path.split('.')[-1]}: {literal} without quotes",
            path,
        )
    shown = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    key = path.split(".")[-1]
    if msg.startswith(_RANGE_MESSAGES):
        least = "at least 1" if msg.startswith("must be at least 1") else "0 or more"
        return finding(
            ERROR,
            "out-of-range",
            f"{path} = {shown}: {msg}",
            "DeepSpeed's config validation rejects it (a pydantic bound on the field: "
            "deepspeed/runtime/zero/config.py for the ZeRO keys), so the job stops at deepspeed.initialize",
            f"set {key} to a whole number, {least}, or remove it to take DeepSpeed's default",
            path,
        )
    return finding(
        ERROR,
        "wrong-type",
        f"{path} = {shown}: {msg}",
        "DeepSpeed reads this key as a different type and will fail or misread it",
        f"give {path.split('.')[-1]} a value of the right type ({msg})",
        path,
    )
