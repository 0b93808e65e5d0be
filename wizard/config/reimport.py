"""Editing an existing config (``dswiz --from FILE``): read its decisions back as a ``Strategy`` and write it back
changed only where the user changed something.

Writing an imported config is a three-way merge, key by key, of
  - the imported file (``imported``): what is on disk, with every key dswiz does not manage,
  - what dswiz would write for the imported decisions (``base``),
  - what dswiz writes for the decisions now (``new``).
Where ``base`` and ``new`` agree the user changed nothing, and the file's own value (or absence) stays; where
they differ the new value is written (or the key removed). So an unchanged import is written back unchanged, an
unknown section survives, and the Review diff shows exactly what the choices changed. Two exceptions keep the
result runnable: batch numbers the file spells out follow the new batch (DeepSpeed asserts train_batch_size =
micro x accumulation x world), and the accelerate YAML points at the files dswiz writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wizard.config.build import WriteOptions, config_set_from_strategy
from wizard.config.launchers import MULTINODE_LAUNCHERS
from wizard.config.lint.batch import complete_batch, data_parallel_world
from wizard.config.load import settings_from_dict
from wizard.config.parse import parse_json
from wizard.config.render import ds_config_dict, dumps_spelled, read_json_spelled, render_ds_json
from wizard.config.schema import ConfigSet, DeepSpeedSettings
from wizard.errors import DswizError
from wizard.strategy import Mode, Strategy

_MISSING: Any = object()
# Spelled-out batch numbers must agree with the new batch, changed by the user or not (DeepSpeedConfig._batch_assertion).
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
# accelerate YAML keys naming the files dswiz writes: always the new paths.
WRITTEN_FILE_KEYS = ("deepspeed_config_file", "deepspeed_hostfile")
# Keys whose presence is a strategy decision. Without a base (the file's decisions are not a valid strategy)
# those the new strategy does not write are removed: they are what made the file invalid.
DECIDED_KEYS = ("bf16", "fp16", "activation_checkpointing")
DECIDED_ZERO_KEYS = (
    "offload_optimizer",
    "offload_param",
    "zero_quantized_weights",
    "zero_quantized_gradients",
    "zero_hpz_partition_size",
)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def strategy_from_config(config: ConfigSet, *, mode: Mode = "train") -> Strategy:
    """The decisions in a loaded config. Values the file leaves to a consumer ("auto") or to DeepSpeed's
    defaults become dswiz's defaults: micro-batch 1, bf16; a batch the file gives in part is completed for its
    topology as DeepSpeed completes it (deepspeed/runtime/config.py _set_batch_related_parameters)."""
    ds = config.deepspeed
    zero = ds.zero_optimization
    topo = config.topology

    def device(section: Any) -> Any:
        return section.device if section is not None and section.device is not None else "none"

    total, given_micro, given_accumulation = file_batch(config)
    completed = _complete(config, total, given_micro, given_accumulation, topo.world_size)
    micro, accumulation = (given_micro or 1), given_accumulation
    if completed is not None:  # as DeepSpeed completes it: a missing micro-batch is train_batch_size / world
        micro, accumulation = completed[1], completed[2]
    precision = ds.precision
    if precision == "auto":  # left to the Trainer / accelerate: the section that says "auto" is the intent
        precision = "fp16" if ds.fp16 is not None and ds.fp16.enabled == "auto" else "bf16"
    return Strategy(
        zero_stage=ds.stage,
        offload_optimizer=device(zero.offload_optimizer if zero else None),
        offload_param=device(zero.offload_param if zero else None),
        precision=precision,
        micro_batch_size=micro,
        gradient_accumulation_steps=accumulation or 1,
        activation_checkpointing=ds.activation_checkpointing is not None,
        zero_quantized_weights=bool(zero and zero.zero_quantized_weights),
        zero_quantized_gradients=bool(zero and zero.zero_quantized_gradients),
        zero_hpz_partition_size=(zero.zero_hpz_partition_size or 1) if zero else 1,
        nodes=topo.nodes,
        gpus_per_node=topo.gpus_per_node,
        mode=mode,
    )


def file_batch(config: ConfigSet) -> tuple[int | None, int | None, int | None]:
    """train_batch_size, micro-batch and accumulation as the file spells them (None: absent or "auto")."""
    ds = config.deepspeed
    return (
        _count(ds.train_batch_size),
        _count(ds.train_micro_batch_size_per_gpu),
        _count(ds.gradient_accumulation_steps),
    )


def _complete(
    config: ConfigSet, total: int | None, micro: int | None, accumulation: int | None, ranks: int
) -> tuple[int, int, int] | None:
    if total is None and micro is None:
        return None
    world, _ = data_parallel_world(ds_config_dict(config.deepspeed), ranks)
    result = complete_batch(total, micro, accumulation, world) if world is not None else "no world"
    return result if isinstance(result, tuple) else None


@dataclass(frozen=True)
class BatchOnTopology:
    """What moving an imported config to another topology does to the global batch it names."""

    kept: bool  # train_batch_size stays as the file says
    file_global: int
    global_batch: int  # what is written
    text: str  # one line for the user


def on_topology(
    config: ConfigSet, strategy: Strategy, *, nodes: int, gpus_per_node: int
) -> tuple[Strategy, BatchOnTopology | None]:
    """The imported strategy on ``nodes`` x ``gpus_per_node`` GPUs, keeping the file's train_batch_size: the
    accumulation (or a micro-batch the file leaves out) is derived for the new world size, as DeepSpeed would.
    When the numbers cannot be kept, the strategy keeps its micro-batch and accumulation and the result says
    that train_batch_size changes (the caller shows it and asks). None: the file names no global batch, or the
    user already chose other batch numbers."""
    moved = strategy.with_(nodes=nodes, gpus_per_node=gpus_per_node)
    total, micro, accumulation = file_batch(config)
    own = strategy_from_config(config, mode=strategy.mode)
    mine = (strategy.micro_batch_size, strategy.gradient_accumulation_steps)
    if (
        total is None
        or strategy.mode != "train"
        or mine != (own.micro_batch_size, own.gradient_accumulation_steps)
    ):
        return moved, None
    tries = [(micro, accumulation), (micro, None)] + (
        [(None, accumulation), (None, None)] if micro is None else []
    )
    for m, g in tries:
        done = _complete(config, total, m, g, moved.world_size)
        if done is not None:
            kept = moved.with_(micro_batch_size=done[1], gradient_accumulation_steps=done[2])
            text = (
                f"train_batch_size {total} kept on {kept.world_size} GPU(s): micro-batch {done[1]} x "
                f"accumulation {done[2]}"
            )
            return kept, BatchOnTopology(True, total, total, text)
    new = moved.global_batch_size
    text = (
        f"train_batch_size {total} cannot be kept on {moved.world_size} GPU(s) with micro-batch "
        f"{moved.micro_batch_size}: it becomes {new} (= {moved.micro_batch_size} x "
        f"{moved.gradient_accumulation_steps} x {moved.world_size})"
    )
    return moved, BatchOnTopology(False, total, new, text)


def nvme_path_of(settings: DeepSpeedSettings) -> str | None:
    zero = settings.zero_optimization
    for section in (zero.offload_optimizer, zero.offload_param) if zero else ():
        if section is not None and section.nvme_path:
            return section.nvme_path
    return None


def options_from_config(config: ConfigSet, **changes: Any) -> WriteOptions:
    """The write options a loaded config implies (consumer, optimizer ownership, clipping, NVMe path, launcher,
    hosts...), with ``changes`` on top."""
    ds = config.deepspeed
    zero = ds.zero_optimization
    launcher = config.accelerate_ds_fields.get("deepspeed_multinode_launcher")
    clipping = ds.gradient_clipping
    save16 = zero.stage3_gather_16bit_weights_on_model_save if zero else None
    implied: dict[str, Any] = {
        "consumer": config.consumer,
        # The file's own optimizer stays DeepSpeed's whatever the offload; without one, dswiz's rule applies.
        "optimizer": "deepspeed" if ds.optimizer is not None else "auto",
        "scheduler": "deepspeed" if ds.scheduler is not None else "none",
        "nvme_path": nvme_path_of(ds),
        "launcher": launcher if launcher in MULTINODE_LAUNCHERS else WriteOptions.launcher,
        "hosts": config.topology.hosts,
        "master_addr": config.topology.master_addr,
        "master_port": config.topology.master_port,
        "accelerate_mode": config.accelerate_mode,
        "zero3_init": config.zero3_init,
    }
    leaf = zero.leaf_module.classes if zero and zero.leaf_module and zero.leaf_module.classes else None
    named = config.accelerate_ds_fields.get("deepspeed_moe_layer_cls_names")
    if leaf:
        implied["moe_leaf_modules"] = tuple(leaf)
    elif isinstance(named, str) and named.strip():
        implied["moe_leaf_modules"] = tuple(n.strip() for n in named.split(",") if n.strip())
    if isinstance(clipping, (int, float)):
        implied["gradient_clipping"] = float(clipping)
    if isinstance(save16, bool):
        implied["save_16bit_model"] = save16
    return WriteOptions(**{**implied, **changes})


def merge3(imported: dict[str, Any], base: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """``imported`` changed where ``new`` differs from ``base`` (None: no base, every value of ``new`` counts as
    changed), in ``imported``'s key order (new keys at the end). Sections merge key by key, so a section's keys
    that dswiz does not write stay."""
    out = dict(imported)
    for key in [*new, *(k for k in (base or {}) if k not in new)]:
        b = base.get(key, _MISSING) if base is not None else _MISSING
        n, i = new.get(key, _MISSING), imported.get(key, _MISSING)
        if base is not None and b == n:
            continue  # the choices did not change this: the file's value (or its absence) stays
        if n is _MISSING:
            out.pop(key, None)  # dswiz no longer writes it (e.g. an offload switched off)
        elif isinstance(n, dict) and isinstance(i, dict):
            out[key] = merge3(i, None if base is None else (b if isinstance(b, dict) else {}), n)
        else:
            out[key] = n
    return out


def merge_settings(
    imported: DeepSpeedSettings, base: DeepSpeedSettings | None, new: DeepSpeedSettings
) -> DeepSpeedSettings:
    file = ds_config_dict(imported)
    fresh = ds_config_dict(new)
    merged = merge3(file, ds_config_dict(base) if base is not None else None, fresh)
    for key in BATCH_KEYS:
        if _count(file.get(key)) is not None and key in fresh:
            merged[key] = fresh[key]
    if base is not None:
        _keep_tuning(file, merged, stage=new.stage)
    if base is None:
        for key in DECIDED_KEYS:
            if key not in fresh:
                merged.pop(key, None)
        zero, fresh_zero = merged.get("zero_optimization"), fresh.get("zero_optimization", {})
        if isinstance(zero, dict):
            for key in DECIDED_ZERO_KEYS:
                if key not in fresh_zero:
                    zero.pop(key, None)
    return settings_from_dict(merged, source="the edited config")


# The 16-bit save is a decision at stage 3 (--save-16bit, the wizard's question); below it, one of the stage3_* keys.
SAVE_16BIT_KEYS = ("stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save")


def _keep_tuning(file: dict[str, Any], merged: dict[str, Any], *, stage: int) -> None:
    """zero_optimization keys the file sets that are not decisions (overlap_comm, bucket sizes, stage3_*...) keep
    the file's value when another choice changed what dswiz would write for them: changing the stage must not
    flip overlap_comm. The stage3_* keys stay as a group below stage 3 (DeepSpeed ignores them there)."""
    zero, written = file.get("zero_optimization"), merged.get("zero_optimization")
    if not isinstance(zero, dict) or not isinstance(written, dict):
        return
    decided = {"stage", *DECIDED_ZERO_KEYS, *(SAVE_16BIT_KEYS if stage == 3 else ())}
    for key, value in zero.items():
        if key not in decided:
            written[key] = value


def config_set_from_import(imported: ConfigSet, strategy: Strategy, options: WriteOptions) -> ConfigSet:
    """What to write for ``strategy`` / ``options`` when editing ``imported``: the three-way merge above."""
    new = config_set_from_strategy(strategy, options)
    base = _base(imported, strategy, options)
    settings = merge_settings(imported.deepspeed, base.deepspeed if base else None, new.deepspeed)
    if imported.consumer != "accelerate":  # there was no YAML: write dswiz's
        return new.model_copy(update={"deepspeed": settings})
    fields = merge3(
        imported.accelerate_fields, base.accelerate_fields if base else None, new.accelerate_fields
    )
    ds_fields = merge3(
        imported.accelerate_ds_fields, base.accelerate_ds_fields if base else None, new.accelerate_ds_fields
    )
    for key in WRITTEN_FILE_KEYS:
        if key in new.accelerate_ds_fields:
            ds_fields[key] = new.accelerate_ds_fields[key]
    zero3_init = (
        imported.zero3_init if base is not None and base.zero3_init == new.zero3_init else new.zero3_init
    )
    return new.model_copy(
        update={
            "deepspeed": settings,
            "accelerate_fields": fields,
            "accelerate_ds_fields": ds_fields,
            "zero3_init": zero3_init,
        }
    )


def _base(imported: ConfigSet, strategy: Strategy, options: WriteOptions) -> ConfigSet | None:
    """What dswiz would write for the file's own decisions (None when they are not a valid strategy even on the
    new topology: then every new value counts as a change). A DeepSpeed JSON says nothing about the topology, so
    its base is on the new one; an accelerate YAML names its machines and processes."""
    own = strategy_from_config(imported, mode=strategy.mode)
    # The file's decisions on the new topology, its train_batch_size kept as placing it there keeps it.
    on_new, _ = on_topology(imported, own, nodes=strategy.nodes, gpus_per_node=strategy.gpus_per_node)
    options = options_from_config(
        imported,
        consumer=options.consumer,
        config_dir=options.config_dir,
        deepspeed_version=options.deepspeed_version,
    )
    for candidate in (own, on_new) if imported.consumer == "accelerate" else (on_new,):
        try:
            return config_set_from_strategy(candidate, options)
        except DswizError:
            continue
    return None


def ds_json_like(settings: DeepSpeedSettings, original_text: str) -> str:
    """The DeepSpeed JSON for ``settings`` written the way ``original_text`` is: byte for byte when nothing
    changed, else in the original's key order and indentation (new keys last)."""
    original, problem = parse_json(original_text)
    data = ds_config_dict(settings)
    if problem is not None or not isinstance(original, dict):
        return render_ds_json(settings)
    if data == original:
        return original_text
    spelled = read_json_spelled(original_text)  # parse_json accepted it: the same text, floats as spelled
    text = dumps_spelled(_order_like(data, spelled), indent=_indent(original_text)) + "\n"
    return _blank_lines_like(text, original_text)


def _blank_lines_like(text: str, original_text: str) -> str:
    """The original's blank lines before a key line put back before the same line (files group their sections
    with them)."""
    lines = original_text.splitlines()
    after_blank = {
        lines[i].strip()
        for i in range(1, len(lines))
        if not lines[i - 1].strip() and lines[i].lstrip().startswith('"')
    }
    out: list[str] = []
    for line in text.splitlines():
        if line.strip() in after_blank and out and out[-1].strip():
            out.append("")
        out.append(line)
    return "\n".join(out) + "\n"


def _order_like(data: Any, template: Any) -> Any:
    if _same_number(data, template):
        return template  # 1e9 read as 1000000000 is written back as the file spelled it
    if not isinstance(data, dict) or not isinstance(template, dict):
        return data
    keys = [k for k in template if k in data] + [k for k in data if k not in template]
    return {k: _order_like(data[k], template.get(k)) for k in keys}


def _same_number(a: Any, b: Any) -> bool:
    def number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    # 1e9 read as 1000000000 (an int in dswiz's model) is the file's 1e9: the template keeps its spelling.
    return number(a) and number(b) and a == b


def _indent(text: str) -> int | str:
    """The indentation of the first indented key (2 when the file is on one line)."""
    for line in text.splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped.startswith('"'):
            lead = line[: len(line) - len(stripped)]
            return "\t" if lead.startswith("\t") else max(1, len(lead))
    return 2
