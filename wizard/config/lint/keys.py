"""Keys DeepSpeed ignores, rejects or renamed: unknown top-level keys are silently ignored, so a typo goes
unnoticed (DeepSpeed 0.19.8 ``deepspeed/runtime/config.py`` reads only the keys it knows); keys starting with "_" are comments (see ``is_comment_key``); unknown keys inside
pydantic-modelled sections are rejected (``deepspeed/runtime/config_utils.py`` ``DeepSpeedConfigModel``,
extra="forbid"); removed features raise."""

from __future__ import annotations

from typing import Any

from wizard.config import ds_keys
from wizard.config.lint.base import ERROR, WARNING, LintContext, did_you_mean, finding
from wizard.findings import Finding


def check_keys(cfg: dict[str, Any], ctx: LintContext) -> list[Finding]:
    out: list[Finding] = []
    for key in cfg:
        if key in ds_keys.TOP_LEVEL_KEYS or is_comment_key(key):
            continue
        if key in ds_keys.REMOVED_TOP_LEVEL_KEYS:
            out.append(
                finding(
                    ERROR,
                    "removed-key",
                    f'"{key}" is a removed DeepSpeed feature',
                    f"DeepSpeed {ds_keys.FROZEN_FROM_DEEPSPEED} refuses the config: "
                    + ds_keys.REMOVED_TOP_LEVEL_KEYS[key],
                    f'delete the "{key}" section',
                    key,
                )
            )
            continue
        guess = did_you_mean(key, ds_keys.TOP_LEVEL_KEYS)
        if guess:
            out.append(
                finding(
                    ERROR,
                    "unknown-key-typo",
                    f'unknown top-level key "{key}": did you mean "{guess}"?',
                    "DeepSpeed silently ignores unknown top-level keys, so this setting has no effect",
                    f'rename "{key}" to "{guess}"',
                    key,
                )
            )
        else:
            out.append(
                finding(
                    WARNING,
                    "unknown-key",
                    f'unknown top-level key "{key}"',
                    "DeepSpeed silently ignores it (fine only if your own script reads it)",
                    f'delete "{key}" unless your script uses it',
                    key,
                )
            )
    if "bf16" in cfg and "bfloat16" in cfg:
        out.append(
            finding(
                WARNING,
                "shadowed-key",
                '"bfloat16" is ignored because "bf16" is present',
                'DeepSpeed reads "bf16" and only falls back to the old name "bfloat16" when "bf16" is absent',
                'delete "bfloat16" (keep the settings you want in "bf16")',
                "bfloat16",
            )
        )
    for path, allowed in ds_keys.SECTION_KEYS.items():
        out.extend(_check_section(cfg, path, allowed))
    return out


def _check_section(cfg: dict[str, Any], path: str, allowed: frozenset[str]) -> list[Finding]:
    node: Any = cfg
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return []
        node = node[part]
    if node is None:
        return []
    if not isinstance(node, dict):
        if path == "zero_optimization" and isinstance(node, bool):
            return [
                finding(
                    WARNING,
                    "deprecated-key",
                    '"zero_optimization" is a boolean (the old format)',
                    "DeepSpeed reads true as stage 1 with a deprecation warning",
                    'write "zero_optimization": {"stage": 1} (or the stage you want)',
                    path,
                )
            ]
        return [
            finding(
                ERROR,
                "section-not-object",
                f'"{path}" must be an object, not {type(node).__name__} {node!r}',
                "DeepSpeed expects its keys inside it and fails to read the config",
                f'write "{path.split(".")[-1]}": {{ ... }} with its settings',
                path,
            )
        ]
    out: list[Finding] = []
    deprecated = ds_keys.DEPRECATED_SECTION_KEYS.get(path, frozenset())
    for key in node:
        where = f"{path}.{key}"
        if path == "zero_optimization" and key in ds_keys.REMOVED_ZERO_KEYS:
            out.append(
                finding(
                    ERROR,
                    "removed-key",
                    f'"{where}" is a removed DeepSpeed feature',
                    f"DeepSpeed {ds_keys.FROZEN_FROM_DEEPSPEED} refuses the config: "
                    + ds_keys.REMOVED_ZERO_KEYS[key],
                    f'delete "{key}"',
                    where,
                )
            )
        elif key in deprecated:
            out.append(
                finding(
                    WARNING,
                    "deprecated-key",
                    f'"{where}" is deprecated',
                    "DeepSpeed still maps it to the new setting but logs a warning, and may drop it",
                    _deprecated_fix(key),
                    where,
                )
            )
        elif key not in allowed:
            guess = None if is_comment_key(key) else did_you_mean(key, allowed - deprecated)
            out.append(
                finding(
                    ERROR,
                    "unknown-section-key",
                    f'unknown key "{key}" in "{path}"' + (f': did you mean "{guess}"?' if guess else ""),
                    f'DeepSpeed validates "{path}" strictly (extra keys forbidden) and refuses the whole config',
                    f'rename "{key}" to "{guess}"' if guess else f'delete "{key}"',
                    where,
                )
            )
    return out


def is_comment_key(key: str) -> bool:
    """A top-level key starting with "_" ("_comment", "_read_the_docs") is a note to readers: DeepSpeed ignores
    unknown top-level keys, and renaming it to a real key would change the config. Inside a section DeepSpeed's
    models still refuse it (extra="forbid"), so there it is reported, without a rename."""
    return str(key).startswith("_")


def _deprecated_fix(key: str) -> str:
    return {
        "cpu_offload": 'replace it with "offload_optimizer": {"device": "cpu"}',
        "cpu_offload_param": 'replace it with "offload_param": {"device": "cpu"}',
        "cpu_offload_use_pin_memory": 'set "pin_memory" inside offload_optimizer / offload_param instead',
        "stage3_gather_fp16_weights_on_model_save": 'rename it to "stage3_gather_16bit_weights_on_model_save"',
    }.get(key, "use the replacement DeepSpeed names in its warning")
