"""Importing an existing DeepSpeed JSON or accelerate YAML into the config model.

Loading and writing back preserves the file: every key dswiz does not manage is kept verbatim (see schema.py),
managed keys keep their values. A file that cannot be read as a config (not JSON/YAML, duplicate keys, a managed
key of the wrong type) raises ``DswizError`` naming the problem and the fix -- ``dswiz check FILE`` then lists
every problem with its own fix.
"""

from __future__ import annotations

import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from wizard.config.parse import parse_json, parse_yaml
from wizard.config.schema import ConfigSet, DeepSpeedSettings, Topology, _Section
from wizard.errors import DswizError, quoted, read_user_text
from wizard.typed_json import json_kind

FileKind = Literal["deepspeed", "accelerate"]

# accelerate plugin-mode fields (deepspeed_config.*) -> what they set in DeepSpeed's config.
PLUGIN_FIELDS = (
    "gradient_accumulation_steps",
    "gradient_clipping",
    "zero_stage",
    "offload_optimizer_device",
    "offload_param_device",
    "offload_optimizer_nvme_path",
    "offload_param_nvme_path",
    "zero3_save_16bit_model",
)


@dataclass(frozen=True)
class LoadedConfig:
    """What was imported: the model, the kind of file, and the DeepSpeed JSON it used (for a YAML that points
    at one)."""

    config: ConfigSet
    kind: FileKind
    path: Path
    ds_config_path: Path | None = None  # the JSON that was read (the file itself, or the YAML's config file)


def file_kind(path: Path, text: str) -> FileKind:
    suffix = path.suffix.lower()
    if suffix == ".json":
        return "deepspeed"
    if suffix in (".yaml", ".yml"):
        return "accelerate"
    return "deepspeed" if text.lstrip().startswith("{") else "accelerate"


def read_text(path: Path) -> str:
    return read_user_text(
        path,
        "a DeepSpeed JSON or accelerate YAML",
        "check the path, and pass the config file itself (ds_config.json)",
    )


def load_path(path: Path | str) -> LoadedConfig:
    """Import a DeepSpeed JSON or an accelerate YAML (either mode; a YAML's JSON is read too)."""
    path = Path(path)
    text = read_text(path)
    if file_kind(path, text) == "deepspeed":
        settings = settings_from_json_text(text, source=str(path))
        return LoadedConfig(
            config=ConfigSet(deepspeed=settings), kind="deepspeed", path=path, ds_config_path=path
        )
    raw, problem = parse_yaml(text)
    if problem is not None:
        raise DswizError(f"{path}: {problem.what}", problem.fix)
    config, json_path = config_set_from_accelerate(raw, source=str(path), base_dir=path.parent)
    return LoadedConfig(config=config, kind="accelerate", path=path, ds_config_path=json_path)


def settings_from_json_text(text: str, *, source: str) -> DeepSpeedSettings:
    raw, problem = parse_json(text)
    if problem is not None:
        raise DswizError(f"{source}: {problem.what}", problem.fix)
    return settings_from_dict(raw, source=source)


def settings_from_dict(raw: Any, *, source: str) -> DeepSpeedSettings:
    """A DeepSpeed config dict -> the model; unknown and unmanaged keys are kept in ``unmanaged``."""
    if not isinstance(raw, dict):
        raise DswizError(
            f"{source}: a DeepSpeed config is a JSON object, not {json_kind(raw)}",
            'write it as { "train_micro_batch_size_per_gpu": 1, ... }',
        )
    return _validate(DeepSpeedSettings, raw, source=source, prefix="")


def resolve_config_file(value: str, base_dir: Path) -> Path:
    """Where accelerate finds ``deepspeed_config_file``: relative to the launch directory. When it is not there,
    fall back to the YAML's directory (the linter warns about that case)."""
    path = Path(os.path.expanduser(value))
    if path.is_absolute() or path.exists():
        return path
    beside = base_dir / path
    return beside if beside.exists() else path


def config_set_from_accelerate(raw: Any, *, source: str, base_dir: Path) -> tuple[ConfigSet, Path | None]:
    """An accelerate YAML dict -> ConfigSet (consumer "accelerate"); reads the DeepSpeed JSON it points at."""
    if not isinstance(raw, dict):
        raise DswizError(
            f"{source}: an accelerate config is a YAML mapping, not {type(raw).__name__}",
            "start from `accelerate config` output or let `dswiz config` write one",
        )
    if raw.get("distributed_type") != "DEEPSPEED":
        raise DswizError(
            f"{source}: not a DeepSpeed accelerate config (distributed_type: {raw.get('distributed_type')!r})",
            "set distributed_type: DEEPSPEED, or pass the DeepSpeed JSON itself",
        )
    ds_raw = raw.get("deepspeed_config") or {}
    if not isinstance(ds_raw, dict):
        raise DswizError(
            f"{source}: deepspeed_config must be a mapping, not {type(ds_raw).__name__}",
            "indent its keys under deepspeed_config:",
        )
    fields = {k: v for k, v in raw.items() if k != "deepspeed_config"}
    ds_fields = dict(ds_raw)
    zero3_init = ds_fields.pop("zero3_init_flag", None)
    if zero3_init is not None and not isinstance(zero3_init, bool):
        ds_fields["zero3_init_flag"] = zero3_init  # kept as written; the linter reports it
        zero3_init = None
    json_path: Path | None = None
    if "deepspeed_config_file" in ds_fields:
        mode: Literal["config_file", "plugin"] = "config_file"
        value = ds_fields["deepspeed_config_file"]
        if not isinstance(value, str):
            raise DswizError(
                f"{source}: deepspeed_config_file must be a path, not {value!r}", "write the JSON file's path"
            )
        json_path = resolve_config_file(value, base_dir)
        settings = settings_from_json_text(read_text(json_path), source=str(json_path))
    else:
        mode = "plugin"
        plugin = {k: ds_fields.pop(k) for k in PLUGIN_FIELDS if k in ds_fields}
        mixed = fields.get("mixed_precision")
        if mixed in ("bf16", "fp16"):
            fields.pop("mixed_precision")  # derived from the settings when written back
        settings = _settings_from_plugin(plugin, mixed, source=source)
    config = ConfigSet(
        deepspeed=settings,
        consumer="accelerate",
        topology=_topology_view(fields),
        zero3_init=zero3_init,
        accelerate_mode=mode,
        accelerate_fields=fields,
        accelerate_ds_fields=ds_fields,
    )
    return config, json_path


def _topology_view(fields: dict[str, Any]) -> Topology:
    machines = fields.get("num_machines", 1)
    processes = fields.get("num_processes", machines)
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (machines, processes))
    if not ok or processes % machines:
        return Topology()
    port = fields.get("main_process_port")
    ip = fields.get("main_process_ip")
    return Topology(
        nodes=machines,
        gpus_per_node=processes // machines,
        master_addr=ip if isinstance(ip, str) else None,
        master_port=port if isinstance(port, int) and not isinstance(port, bool) else 29500,
    )


def _settings_from_plugin(plugin: dict[str, Any], mixed: Any, *, source: str) -> DeepSpeedSettings:
    """What accelerate's plugin fields set, as DeepSpeed settings (only what the fields say)."""
    zero: dict[str, Any] = {}
    if "zero_stage" in plugin:
        zero["stage"] = plugin["zero_stage"]
    for name in ("offload_optimizer", "offload_param"):
        device = plugin.get(f"{name}_device")
        path = plugin.get(f"{name}_nvme_path")
        if device is not None or path is not None:
            section: dict[str, Any] = {"device": device if device is not None else "none"}
            if path is not None and path != "none":
                section["nvme_path"] = path
            zero[name] = section
    if "zero3_save_16bit_model" in plugin:
        zero["stage3_gather_16bit_weights_on_model_save"] = plugin["zero3_save_16bit_model"]
    raw: dict[str, Any] = {}
    for key in ("gradient_accumulation_steps", "gradient_clipping"):
        if key in plugin:
            raw[key] = plugin[key]
    if mixed == "bf16":
        raw["bf16"] = {"enabled": True}
    elif mixed == "fp16":
        raw["fp16"] = {"enabled": True}
    if zero:
        raw["zero_optimization"] = zero
    return _validate(DeepSpeedSettings, raw, source=source, prefix="deepspeed_config (plugin fields) -> ")


_M = typing.TypeVar("_M", bound=_Section)


def _section_class(annotation: Any) -> type[_Section] | None:
    for arg in (*typing.get_args(annotation), annotation):
        if isinstance(arg, type) and issubclass(arg, _Section):
            return arg
    return None


def split_managed(model: type[_Section], raw: dict[str, Any]) -> dict[str, Any]:
    """Managed keys as fields (nested sections split too), the rest in ``unmanaged``, in the file's order.
    An explicit null stays verbatim: DeepSpeed treats it like the default, and writing it back keeps the file."""
    fields = {n: f for n, f in model.model_fields.items() if n != "unmanaged"}
    values: dict[str, Any] = {}
    unmanaged: dict[str, Any] = {}
    for key, value in raw.items():
        if key in fields and value is not None:
            section = _section_class(fields[key].annotation)
            values[key] = (
                split_managed(section, value) if section is not None and isinstance(value, dict) else value
            )
        else:
            unmanaged[key] = value
    values["unmanaged"] = unmanaged
    return values


def _validate(model: type[_M], raw: dict[str, Any], *, source: str, prefix: str) -> _M:
    try:
        return model.model_validate(split_managed(model, raw))
    except ValidationError as e:
        raise DswizError(f"{source}: " + _describe(e, prefix), _fix_for(e, source)) from None


def _describe(error: ValidationError, prefix: str) -> str:
    by_path: dict[str, list[dict[str, Any]]] = {}
    for item in error.errors():
        path = ".".join(str(p) for p in item["loc"] if p != "unmanaged" and not is_union_tag(p))
        by_path.setdefault(path, []).append(dict(item))
    parts = []
    for path, items in list(by_path.items())[:5]:
        # A union (number | "auto") fails once per member: the "should be 'auto'" half says nothing useful.
        useful = [i for i in items if i["type"] != "literal_error"] or items
        first = useful[0]
        msg = str(first["msg"]).removeprefix("Value error, ")
        value = first.get("input")
        shown = "" if isinstance(value, dict) or "not " in msg else f" (got {quoted(value)})"
        parts.append(f"{prefix}{path or '(top level)'}: {msg}{shown}")
    more = len(by_path) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def is_union_tag(part: Any) -> bool:
    # pydantic puts the union member tried into the location (e.g. "function-after[...]", "literal['auto']").
    return isinstance(part, str) and ("[" in part or part in ("int", "float", "bool", "str"))


def _fix_for(error: ValidationError, source: str) -> str:
    if any(isinstance(i.get("input"), str) and i["type"] != "literal_error" for i in error.errors()):
        return (
            f'write numbers and true/false without quotes ("8" -> 8); `dswiz check {source}` lists every fix'
        )
    return f"correct the value(s) named; `dswiz check {source}` lists every problem with its fix"
