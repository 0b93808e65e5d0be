"""The config linter: every rule of docs/deepspeed-rules.md over a DeepSpeed JSON, an accelerate YAML (and the
JSON it points at), a hostfile, a ``.deepspeed_env`` or a whole config directory. Pure: it reads files, never runs DeepSpeed
(``wizard.consumer`` runs the consumers' own validation in a subprocess).

Each finding has a stable code. Rule families, one module each in ``wizard/config/lint/``:
  parsing        not-json, not-yaml, duplicate-key, not-an-object, unreadable, template-placeholders,
                 json-comments (lint/text.py: templates and hjson)
  keys           unknown-key, unknown-key-typo, removed-key, unknown-section-key, deprecated-key,
                 section-not-object, shadowed-key
  types          string-number, string-bool, wrong-type, out-of-range
  batch          batch-missing, batch-arithmetic, batch-completed, batch-world-size
  precision      fp16-and-bf16, master-weights-stage, fp16-loss-scale, precision-unsupported,
                 precision-fp16-on-bf16-gpu
  zero           offload-param-ignored, nvme-becomes-cpu, offload-stage0, zeropp-ignored, hpz-size,
                 nvme-path-missing, nvme-path-not-writable, nvme-not-on-nvme, no-libaio, libaio-unknown,
                 offload-client-optimizer, offload-optimizer-replaced
  moe            autoep-stage3-qgz, autoep-stage3-hpz, autoep-stage3-sequence-parallel, autoep-stage3-16bit-save
  auto           auto-unfilled, auto-default, auto-hidden-size, auto-dummy, auto-needs-consumer
  runtime        max-grad-norm-in-optimizer, accelerate-dummy-objects, activation-checkpointing-section,
                 accelerate-steps-per-print, no-steps-per-print, no-log-level
  accelerate     accelerate-not-deepspeed, accelerate-unknown-key, accelerate-unknown-ds-key,
                 accelerate-num-processes, accelerate-value-out-of-range, accelerate-config-file-conflict,
                 accelerate-config-file-missing,
                 accelerate-config-file-relative, accelerate-default-stage, accelerate-zero3-init,
                 accelerate-plugin-on-cpu (+ offload/nvme/precision codes above for plugin fields)
  launcher       launcher-unknown, launcher-version, launcher-no-hostfile, launcher-no-master, launcher-filter
  sbatch         sbatch-directive-ignored, sbatch-time, sbatch-no-nodes, sbatch-node-count, sbatch-gpu-count,
                 sbatch-world-size, sbatch-tasks-per-node, sbatch-ssh-launcher, sbatch-no-master-addr,
                 sbatch-no-master-port
  hostfile       hostfile-syntax, hostfile-trailing-text, hostfile-duplicate, hostfile-zero-slots,
                 hostfile-empty, hostfile-world-size, hostfile-unequal-slots, env-syntax
                 (the wizard, for a hostfile that is the plan: hostfile-node-count, hostfile-slots)
The NVMe-path rules behind the zero family's nvme codes live in ``wizard.config.nvme``; ``at_launch`` quiets the
rules `dswiz launch` takes care of itself (``LintContext.at_launch``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wizard.config.hostfile import parse_hostfile
from wizard.config.lint.accelerate import lint_accelerate_dict
from wizard.config.lint.auto import (
    ACCELERATE_DEFAULTS,
    ACCELERATE_FILLS,
    TRAINER_FILLS,
    auto_paths,
    check_auto,
)
from wizard.config.lint.base import ERROR, LintContext, finding
from wizard.config.lint.batch import check_batch
from wizard.config.lint.hostfile import lint_deepspeed_env_text, lint_hostfile_text
from wizard.config.lint.keys import check_keys
from wizard.config.lint.launcher import yaml_launcher
from wizard.config.lint.moe import check_moe
from wizard.config.lint.precision import check_precision
from wizard.config.lint.runtime import check_runtime
from wizard.config.lint.sbatch import lint_sbatch_text, looks_like_sbatch, plan_beside
from wizard.config.lint.text import (
    bom_finding,
    hjson_finding,
    parse_hjson,
    strict_but_for_bom,
    template_finding,
    template_placeholders,
)
from wizard.config.lint.types import check_types
from wizard.config.lint.zero import check_zero
from wizard.config.parse import ParseProblem, parse_json, parse_yaml, yaml_key_lines
from wizard.config.schema import (
    ACCELERATE_YAML_NAME,
    DEEPSPEED_ENV_NAME,
    DS_CONFIG_NAME,
    HOSTFILE_NAME,
    SBATCH_NAME,
    Consumer,
)
from wizard.errors import DswizError, read_user_text
from wizard.findings import Finding, sort_findings
from wizard.hardware.report import HardwareReport
from wizard.typed_json import json_kind

RULES = (
    check_keys,
    check_types,
    check_batch,
    check_precision,
    check_zero,
    check_moe,
    check_auto,
    check_runtime,
)
FileKind = str  # "deepspeed" | "accelerate" | "hostfile" | "deepspeed_env" | "sbatch"


def lint_config(
    cfg: Any,
    *,
    consumer: Consumer | None = None,
    world_size: int | None = None,
    hardware: HardwareReport | None = None,
    gpus_per_node: int | None = None,
    check_local_paths: bool | None = None,
    at_launch: bool = False,
) -> list[Finding]:
    """Lint a DeepSpeed config dict. Locations are key paths. ``at_launch``: for `dswiz launch` (LintContext)."""
    if not isinstance(cfg, dict):
        return [
            finding(
                ERROR,
                "not-an-object",
                f"a DeepSpeed config is a JSON object, not {json_kind(cfg)}",
                "DeepSpeed reads its settings as key/value pairs",
                'write it as { "train_micro_batch_size_per_gpu": 1, ... }',
            )
        ]
    ctx = _context(consumer, world_size, hardware, gpus_per_node, check_local_paths, at_launch)
    out: list[Finding] = []
    for rule in RULES:
        out += rule(cfg, ctx)
    return sort_findings(_unique(out))


def lint_path(
    path: Path | str,
    *,
    consumer: Consumer | None = None,
    world_size: int | None = None,
    hardware: HardwareReport | None = None,
    launcher: str | None = None,
    at_launch: bool = False,
) -> list[Finding]:
    """Lint a DeepSpeed JSON, an accelerate YAML (+ its JSON), a hostfile, a .deepspeed_env, or a directory
    holding them (what `dswiz config` writes). Never raises for a bad file: that is a finding. ``at_launch``: for
    `dswiz launch`, which takes care of some rules itself (LintContext.at_launch)."""
    path = Path(path)
    if path.is_dir():
        return _lint_dir(
            path,
            consumer=consumer,
            world_size=world_size,
            hardware=hardware,
            launcher=launcher,
            at_launch=at_launch,
        )
    text, problem = _read(path)
    if problem is not None:
        return [problem]
    kind = detect_kind(path, text)
    if kind == "sbatch":
        return sort_findings(lint_sbatch_text(text, name=path.name, plan=plan_beside(path.parent)))
    if kind == "hostfile":
        return sort_findings(
            lint_hostfile_text(text, name=path.name, world_size=world_size, launcher=launcher)
        )
    if kind == "deepspeed_env":
        return sort_findings(lint_deepspeed_env_text(text, name=path.name))
    if kind == "accelerate":
        return _lint_yaml(
            path, text, consumer=consumer, world_size=world_size, hardware=hardware, at_launch=at_launch
        )
    return _lint_json(
        path,
        text,
        prefix="",
        consumer=consumer,
        world_size=world_size,
        hardware=hardware,
        at_launch=at_launch,
    )


def detect_kind(path: Path, text: str) -> FileKind:
    name = path.name.lower()
    if looks_like_sbatch(name, text):
        return "sbatch"
    if name.endswith(".json"):
        return "deepspeed"
    if name.endswith((".yaml", ".yml")):
        return "accelerate"
    if name == DEEPSPEED_ENV_NAME or name.endswith(".env"):
        return "deepspeed_env"
    if name.startswith("hostfile") or "slots=" in text:
        return "hostfile"
    return "deepspeed" if text.lstrip().startswith("{") else "accelerate"


def _context(
    consumer: Consumer | None,
    world_size: int | None,
    hardware: HardwareReport | None,
    gpus_per_node: int | None,
    check_local_paths: bool | None,
    at_launch: bool = False,
) -> LintContext:
    if check_local_paths is None:
        # A config planned for described hardware is for another machine: its paths mean nothing here.
        check_local_paths = hardware is None or hardware.source == "detected"
    return LintContext(
        consumer=consumer,
        world_size=world_size,
        hardware=hardware,
        gpus_per_node=gpus_per_node,
        check_local_paths=check_local_paths,
        at_launch=at_launch,
    )


def _read(path: Path) -> tuple[str, Finding | None]:
    what = "a DeepSpeed JSON, accelerate YAML or hostfile"
    try:
        text = read_user_text(path, what, f"pass {what}")
    except DswizError as e:
        return "", finding(
            ERROR, "unreadable", e.problem, "there is nothing to check", e.fix or "", str(path)
        )
    if not text.strip() and detect_kind(path, text) not in ("hostfile", "deepspeed_env"):
        # (an empty JSON once read as hjson and checked as a config without a batch; hostfiles and .deepspeed_env
        # have rules of their own for an empty file)
        return "", finding(
            ERROR, "unreadable", f"{path} is empty", "there is nothing to check", f"pass {what}", str(path)
        )
    return text, None


def _parse_finding(problem: ParseProblem, name: str, code_default: str) -> Finding:
    code = "duplicate-key" if problem.what.startswith("duplicate key") else code_default
    return finding(
        ERROR,
        code,
        problem.what,
        "the consumer refuses to read the file",
        problem.fix,
        f"{name}:{problem.line}" if problem.line else name,
    )


def _lint_json(
    path: Path,
    text: str,
    *,
    prefix: str,
    consumer: Consumer | None,
    world_size: int | None,
    hardware: HardwareReport | None,
    at_launch: bool = False,
) -> list[Finding]:
    cfg, problem = parse_json(text)
    read_as: list[Finding] = []
    if problem is not None:
        cfg, read_as = _relaxed_json(text, problem, path.name, consumer)
        if cfg is None:
            return read_as
    found = read_as + lint_config(
        cfg, consumer=consumer, world_size=world_size, hardware=hardware, at_launch=at_launch
    )
    if prefix:
        found = [replace(f, location=f"{prefix}: {f.location}" if f.location else prefix) for f in found]
    return [f if f.location else replace(f, location=path.name) for f in found]


def _relaxed_json(
    text: str, problem: ParseProblem, name: str, consumer: Consumer | None
) -> tuple[Any, list[Finding]]:
    """Strict JSON refused the text: a template is reported as one (nothing else can be checked), hjson is read as
    DeepSpeed reads a path (and is an error only for the consumers that read it with json.load)."""
    placeholders = template_placeholders(text)
    if placeholders is not None:
        return None, [template_finding(placeholders, name)]
    if problem.what.startswith("duplicate key"):
        return None, [_parse_finding(problem, name, "not-json")]
    relaxed = parse_hjson(text)
    if not isinstance(relaxed, dict):
        return None, [_parse_finding(problem, name, "not-json")]
    if strict_but_for_bom(text):  # strict JSON but for the mark
        return relaxed, [bom_finding(consumer, name)]
    return relaxed, [hjson_finding(consumer, name)]


@dataclass(frozen=True)
class ConsumerGuess:
    """Who reads a file when `dswiz check` is not told (--for), and why that reader."""

    consumer: Consumer | None
    reason: str


def guess_consumer(path: Path) -> ConsumerGuess:
    """The consumer a file is written for, read from the file: an accelerate YAML is accelerate's; a JSON whose
    "auto" values only the HF Trainer (or accelerate) fills is theirs; a JSON without "auto" is plain DeepSpeed's.
    None (no guess) when the file says nothing or names "auto" keys neither fills (another program reads it). A
    folder (`dswiz config`'s) is guessed by its DeepSpeed JSON."""
    if path.is_dir() and (path / DS_CONFIG_NAME).is_file():
        inner = guess_consumer(path / DS_CONFIG_NAME)
        return ConsumerGuess(inner.consumer, f"its {DS_CONFIG_NAME}: {inner.reason}")
    text, unreadable = _read(path) if path.is_file() else ("", None)
    kind = detect_kind(path, text) if unreadable is None and path.is_file() else None
    if kind == "accelerate":
        return ConsumerGuess("accelerate", "it is an accelerate YAML")
    if kind != "deepspeed":
        return ConsumerGuess(None, "not a DeepSpeed JSON or accelerate YAML")
    cfg, problem = parse_json(text)
    if problem is not None:
        if template_placeholders(text) is not None:
            return ConsumerGuess(None, "it is a template: its placeholders name no reader")
        if strict_but_for_bom(text):
            return ConsumerGuess(
                "deepspeed", "it starts with a byte-order mark, which only plain DeepSpeed reads"
            )
        if isinstance(parse_hjson(text), dict):
            return ConsumerGuess("deepspeed", "it has comments (hjson), which only plain DeepSpeed reads")
        return ConsumerGuess(None, "it is not readable JSON")
    paths = auto_paths(cfg) if isinstance(cfg, dict) else []
    if not paths:
        return ConsumerGuess("deepspeed", 'no value is "auto", so it reads as a plain DeepSpeed config')
    shown = f'{len(paths)} value(s) are "auto"'
    if all(p in TRAINER_FILLS for p in paths):
        return ConsumerGuess("trainer", f"{shown}, all of which the HF Trainer fills")
    if all(p in ACCELERATE_FILLS or p in ACCELERATE_DEFAULTS for p in paths):
        return ConsumerGuess("accelerate", f"{shown}, all of which accelerate fills")
    others = [p for p in paths if p not in TRAINER_FILLS and p not in ACCELERATE_FILLS]
    return ConsumerGuess(
        None,
        f"{shown}, and {others[0]} is one neither the HF Trainer nor accelerate fills (another program reads it)",
    )


def _lint_yaml(
    path: Path,
    text: str,
    *,
    consumer: Consumer | None,
    world_size: int | None,
    hardware: HardwareReport | None,
    already_linted: Path | None = None,
    at_launch: bool = False,
) -> list[Finding]:
    raw, problem = parse_yaml(text)
    if problem is not None:
        return [_parse_finding(problem, path.name, "not-yaml")]
    ctx = _context(consumer or "accelerate", world_size, hardware, None, None, at_launch)
    result = lint_accelerate_dict(
        raw, name=path.name, lines=yaml_key_lines(text), base_dir=path.parent, ctx=ctx
    )
    out = list(result.findings)
    same = (
        already_linted is not None
        and result.ds_config_file is not None
        and _same_file(result.ds_config_file, already_linted)
    )
    if result.ds_config_file is not None and not same:
        json_text, unreadable = _read(result.ds_config_file)
        if unreadable is not None:
            out.append(unreadable)
        else:
            out += _lint_json(
                result.ds_config_file,
                json_text,
                prefix=result.ds_config_file.name,
                consumer=consumer or "accelerate",
                world_size=world_size if world_size is not None else result.world_size,
                hardware=hardware,
                at_launch=at_launch,
            )
    return sort_findings(_unique(out))


def _lint_dir(
    directory: Path,
    *,
    consumer: Consumer | None,
    world_size: int | None,
    hardware: HardwareReport | None,
    launcher: str | None,
    at_launch: bool = False,
) -> list[Finding]:
    files = {
        n: directory / n
        for n in (DS_CONFIG_NAME, ACCELERATE_YAML_NAME, HOSTFILE_NAME, DEEPSPEED_ENV_NAME, SBATCH_NAME)
    }
    present = {n: p for n, p in files.items() if p.is_file()}
    if not present:
        return [
            finding(
                ERROR,
                "unreadable",
                f"{directory} holds no config files ({', '.join(files)})",
                "there is nothing to check",
                "pass the directory `dswiz config --out` wrote, or a config file",
                str(directory),
            )
        ]
    out: list[Finding] = []
    if HOSTFILE_NAME in present and launcher is None and ACCELERATE_YAML_NAME in present:
        launcher = _yaml_launcher(present[ACCELERATE_YAML_NAME])  # the hostfile's rules depend on it
    if HOSTFILE_NAME in present and world_size is None:
        slots = parse_hostfile(_read(present[HOSTFILE_NAME])[0]).total_slots
        world_size = slots or None
    for name, path in present.items():
        text, unreadable = _read(path)
        if unreadable is not None:
            out.append(unreadable)
        elif name == DS_CONFIG_NAME:
            out += _lint_json(
                path,
                text,
                prefix=name,
                consumer=consumer,
                world_size=world_size,
                hardware=hardware,
                at_launch=at_launch,
            )
        elif name == ACCELERATE_YAML_NAME:
            out += _lint_yaml(
                path,
                text,
                consumer=consumer,
                world_size=world_size,
                hardware=hardware,
                already_linted=present.get(DS_CONFIG_NAME),  # its JSON is usually the one beside it
                at_launch=at_launch,
            )
        elif name == HOSTFILE_NAME:
            out += lint_hostfile_text(text, name=name, world_size=world_size, launcher=launcher)
        elif name == SBATCH_NAME:
            out += lint_sbatch_text(text, name=name, plan=plan_beside(directory))
        else:
            out += lint_deepspeed_env_text(text, name=name)
    return sort_findings(_unique(out))


def _yaml_launcher(path: Path) -> str | None:
    text, problem = _read(path)
    if problem is not None:
        return None
    raw, _ = parse_yaml(text)
    return yaml_launcher(raw)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _unique(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str | None, str]] = set()
    out = []
    for f in findings:
        key = (f.code, f.location, f.what)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out
