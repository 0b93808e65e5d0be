"""Every call the wizard makes into the dswiz core, in one place.

The wizard (full screen and line prompts) decides nothing itself: hardware comes from ``wizard.hardware``, model
specs from ``wizard.model``, candidates and predictions from ``wizard.planner``, files and findings from
``wizard.config``. This module converts their results into the small views the screens show, so a change in a core
signature is fixed here and nowhere else. It imports no terminal library.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wizard.config.launchers import LAUNCHER_NOTES as _LAUNCHER_NOTES
from wizard.errors import DswizError
from wizard.findings import Finding
from wizard.hardware.report import HardwareReport
from wizard.strategy import Strategy
from wizard.tui.choices import Choices


class CoreUnavailable(DswizError):
    """A part of the core this wizard needs is not installed on this branch yet."""


def _core(module: str, attr: str) -> Any:
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise CoreUnavailable(
            f"{module}.{attr} is not available in this dswiz build",
            "update dswiz; meanwhile `dswiz config --yes` or `dswiz plan` may work",
        ) from e


@dataclass(frozen=True)
class CandidateView:
    """One row of the strategy table: a strategy and what the planner predicts for it."""

    strategy: Strategy
    fits: bool
    gpu_bytes: int | None
    cpu_bytes: int | None
    nvme_bytes: int | None
    tokens_per_sec: float | None
    mfu: float | None
    reasons: tuple[str, ...] = ()
    max_micro_batch: int | None = None  # the largest micro-batch of this strategy that fits (0: not even 1)


@dataclass(frozen=True)
class MaxBatchLine:
    """One line of the max-batch table: a strategy's largest micro-batch that fits and its tokens/s there."""

    strategy: Strategy
    max_micro_batch: int  # 0: not even 1 fits
    capped: bool  # the planner's cap was reached: more would fit
    tokens_per_sec: float | None
    fits: bool
    limits: tuple[str, ...] = ()


@dataclass(frozen=True)
class Capacity:
    """What each memory tier holds, as the planner judged "fits" against it (None: unknown)."""

    gpu: int | None  # per GPU
    cpu: int | None  # host RAM per node
    nvme: int | None  # usable NVMe per node


@dataclass(frozen=True)
class PlanView:
    candidates: tuple[CandidateView, ...]
    advice: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what the planner did not offer, and why
    capacity: Capacity | None = None
    raw: Any = field(default=None, compare=False, repr=False)

    @property
    def best(self) -> CandidateView | None:
        return next((c for c in self.candidates if c.fits), None)


def capacity(hw: HardwareReport | None, plan: PlanView | None = None) -> Capacity:
    """The planner's capacities when there is a plan; before that, the report's raw figures."""
    if plan is not None and plan.capacity is not None:
        return plan.capacity
    if hw is None:
        return Capacity(None, None, None)
    nvme = [d.free_bytes for d in hw.host.disks if d.nvme]
    return Capacity(hw.min_gpu_memory_bytes, hw.host.ram_total_bytes, max(nvme) if nvme else None)


def precisions_supported(hw: HardwareReport | None) -> dict[str, str | None]:
    """precision -> None when the GPUs support it, else the reason (FACTS §3 rule 6: from compute capability)."""
    out: dict[str, str | None] = {"bf16": None, "fp16": None, "fp32": None}
    gpus = hw.gpus if hw else ()
    if any(g.supports_bf16 is False for g in gpus):
        out["bf16"] = "bf16 needs compute capability 8.0 or newer (Ampere, Hopper)"
    if any(g.supports_fp16 is False for g in gpus):
        out["fp16"] = "fp16 needs compute capability 7.0 or newer"
    return out


# ---------------------------------------------------------------- hardware and model


def get_hardware(spec: str | None) -> HardwareReport:
    """Detect this machine (``None``) or describe one ("8xA100-80GB", "2x8xH100", a YAML profile)."""
    report: HardwareReport = _core("wizard.hardware", "get_hardware")(spec)
    return report


def model_presets() -> list[str]:
    mod = importlib.import_module("wizard.model") if _has("wizard.model") else None
    for name in ("preset_names", "PRESETS"):
        value = getattr(mod, name, None)
        if callable(value):
            return sorted(value())
        if value is not None:
            return sorted(value)
    return []


def load_model(text: str) -> Any:
    if not text.strip():
        raise DswizError("no model given", "type a preset name, a path to a config.json, or numbers")
    return _core("wizard.model", "load_model_spec")(text.strip())


def describe_model(model: Any) -> str:
    """One line about the ModelSpec the planner will use (its own words, where it has any)."""
    total = getattr(model, "total_params", None)
    if total is None:
        return str(getattr(model, "name", model))
    parts = [
        f"{model.name}: {total / 1e9:.2f} B parameters"
        if total >= 1e8
        else f"{model.name}: {total / 1e6:.1f} M parameters"
    ]
    parts.append(f"{model.layers} layers, hidden {model.hidden}, {model.heads} heads, vocab {model.vocab}")
    if getattr(model, "num_experts", 0):
        parts.append(f"{model.num_experts} experts ({model.experts_per_token} per token)")
    if not getattr(model, "exact", True):
        parts.append("shape guessed from the parameter count")
    text = "; ".join(parts)
    notes = tuple(getattr(model, "notes", ()) or ())
    return text + "".join(f"\n  {n}" for n in notes)


# ---------------------------------------------------------------- planning


def _request(choices: Choices) -> Any:
    request_cls = _core("wizard.planner", "PlanRequest")
    kwargs: dict[str, Any] = {"seq_len": choices.seq_len, "global_batch": choices.global_batch}
    fields = getattr(request_cls, "__dataclass_fields__", {}) or getattr(request_cls, "model_fields", {})
    if "mode" in fields:
        kwargs["mode"] = choices.mode
    return request_cls(**{k: v for k, v in kwargs.items() if not fields or k in fields})


def _view(candidate: Any) -> CandidateView:
    p = candidate.predicted
    return CandidateView(
        strategy=candidate.strategy,
        fits=bool(candidate.fits),
        gpu_bytes=getattr(p, "gpu_bytes", None),
        cpu_bytes=getattr(p, "cpu_bytes", None),
        nvme_bytes=getattr(p, "nvme_bytes", None),
        tokens_per_sec=getattr(p, "tokens_per_sec", None),
        mfu=getattr(p, "mfu", None),
        reasons=tuple(str(r) for r in (candidate.reasons or ())),
        max_micro_batch=getattr(candidate, "max_micro_batch", None),
    )


def plan(choices: Choices, model: Any) -> PlanView:
    if choices.hardware is None:
        raise DswizError("no hardware yet", "go back to the Hardware step")
    result = _core("wizard.planner", "plan")(choices.hardware, model, _request(choices))
    cap = Capacity(
        getattr(result, "gpu_capacity_bytes", None),
        getattr(result, "cpu_capacity_bytes", None),
        getattr(result, "nvme_capacity_bytes", None),
    )
    return PlanView(
        tuple(_view(c) for c in result.candidates),
        advice=tuple(str(a) for a in (getattr(result, "advice", ()) or ())),
        notes=tuple(str(n) for n in (getattr(result, "notes", ()) or ())),
        capacity=cap,
        raw=result,
    )


def evaluate(choices: Choices, model: Any, strategy: Strategy) -> CandidateView:
    """The planner's prediction for a strategy the user edited by hand (``wizard.planner.evaluate``): any stage,
    offloads, micro-batch, accumulation or checkpointing, judged like a planned candidate."""
    if choices.hardware is None:
        raise DswizError("no hardware yet", "go back to the Hardware step")
    fn = _core("wizard.planner", "evaluate")
    return _view(fn(choices.hardware, model, strategy, _request(choices)))


def max_batch_table(choices: Choices, model: Any) -> tuple[MaxBatchLine, ...]:
    """For each stage / offload / checkpointing choice, the largest micro-batch that fits and its tokens/s
    (``wizard.planner.max_batch_table``)."""
    if choices.hardware is None:
        return ()
    rows = _core("wizard.planner", "max_batch_table")(choices.hardware, model, _request(choices))
    return tuple(
        MaxBatchLine(r.strategy, r.max_micro_batch, r.capped, r.tokens_per_sec, r.fits, tuple(r.limits))
        for r in rows
    )


def best_candidate_like(plan_view: PlanView | None, strategy: Strategy) -> CandidateView | None:
    """The planner's highest-ranked candidate with the same stage, offloads and precision as ``strategy`` (its
    micro-batch and accumulation are the planner's for that combination); None when the plan has none."""

    def key(s: Strategy) -> tuple[object, ...]:
        return (s.zero_stage, s.offload_optimizer, s.offload_param, s.precision)

    return next(
        (c for c in (plan_view.candidates if plan_view else ()) if key(c.strategy) == key(strategy)), None
    )


def option_problems(
    strategy: Strategy, hw: HardwareReport | None, *, model: Any = None, choices: Choices | None = None
) -> list[str]:
    """Why ``strategy`` cannot be offered: the combination rules (``Strategy.problems``) plus the machine's
    (``wizard.planner.hardware_problems``: NVMe offload without a disk or libaio, a precision the GPUs lack, more
    nodes than described, and with a model, host RAM too small for the offload)."""
    out = list(strategy.problems())
    if hw is not None:
        from wizard.model import ModelSpec

        fn = _core("wizard.planner", "hardware_problems")
        request = _request(choices) if choices is not None else None
        spec = model if isinstance(model, ModelSpec) else None
        out.extend(str(p) for p in fn(hw, strategy, request, model=spec))
    return out


# ---------------------------------------------------------------- files


def _write_options(choices: Choices) -> Any:
    """The config writers' options for the choices; for an imported file, the options it implies with the
    choices on top (wizard.config.reimport)."""
    from wizard.config.build import WriteOptions
    from wizard.config.hostfile import parse_hostfile
    from wizard.config.reimport import options_from_config

    s = choices.strategy
    assert s is not None
    hosts: tuple[str, ...] = ()
    if s.nodes > 1 and choices.hostfile_text.strip():
        hosts = parse_hostfile(choices.hostfile_text).host_names
    wanted: dict[str, Any] = {
        "hosts": hosts,
        "master_addr": choices.master_addr or None,
        "master_port": choices.master_port,
        "gradient_clipping": choices.gradient_clipping,
        "launcher": choices.launcher,
        "nvme_path": choices.nvme_path.strip() or None,
        "deepspeed_version": choices.hardware.software.deepspeed if choices.hardware else None,
        "consumer": choices.consumer,
        "save_16bit_model": choices.save_16bit,
        "moe_leaf_modules": moe_leaf_modules(choices),
        # accelerate opens the JSON and hostfile by this path, relative to where it is launched: make it absolute
        "config_dir": str(choices.out_dir.resolve()),
    }
    if choices.imported is not None:
        return options_from_config(choices.imported.config, **wanted)
    return WriteOptions(**wanted)


def moe_leaf_modules(choices: Choices) -> tuple[str, ...]:
    """The MoE block ZeRO-3 must fetch whole, from the chosen model's type; () for dense or unreadable models."""
    if not choices.model_text.strip():
        return ()
    try:
        model = load_model(choices.model_text)
    except DswizError:
        return ()
    name = getattr(model, "moe_layer_cls_name", None)
    return (name,) if isinstance(name, str) and name else ()


def save_16bit_cost(model: Any) -> str:
    """What gathering the 16-bit weights on save costs, in words and bytes from the model spec (DeepSpeed 0.19.8
    engine._zero3_consolidated_16bit_state_dict: one module at a time is gathered on the GPU and copied to rank 0's
    host RAM, which ends up holding the whole 16-bit model; save_16bit_model then writes it as one file)."""
    from wizard.units import fmt_bytes

    total = getattr(model, "total_params", None)
    largest = getattr(model, "largest_layer_params", None)
    if not isinstance(total, int):
        return "rank 0 collects the whole 16-bit model in host RAM and writes it to disk as one file"
    gpu = (
        f"; the GPU holds one module at a time ({fmt_bytes(2 * largest)})" if isinstance(largest, int) else ""
    )
    return (
        f"at each save rank 0 collects all {fmt_bytes(2 * total)} of 16-bit weights in host RAM and writes them "
        f"to disk as one file{gpu}; without it, dswiz consolidate rebuilds the weights from the ZeRO shards"
    )


def code_hint_lines(choices: Choices, files: dict[str, str]) -> list[str]:
    """What the user's script must change for the chosen consumer and these files: the explanation, a short diff
    (wizard.hints), and the trap of a scheduler of its own; for inference, how the script runs it."""
    s = choices.strategy
    if s is not None and s.mode == "inference":
        note = _core("wizard.config.build", "inference_note")
        return [f"script ({choices.consumer}): {note(choices.consumer, s.micro_batch_size)}"]
    return script_hint_lines(files, choices.out_dir, choices.consumer)


def render_files(choices: Choices) -> dict[str, str]:
    """file name -> content, in the order the review screen shows them (the config writers' order), then the plan
    sidecar (dswiz-plan.json) when a model was planned: ``dswiz launch`` compares the run with it.

    An imported file (``--from``) is written back changed only where the choices changed it: its unknown sections,
    unmanaged keys, key order and indentation stay (wizard.config.reimport)."""
    from wizard.config.build import config_set_from_strategy
    from wizard.config.reimport import config_set_from_import, ds_json_like
    from wizard.config.render import render_all
    from wizard.config.schema import DS_CONFIG_NAME

    if choices.strategy is None:
        raise DswizError("no strategy chosen yet", "go back to the Strategy step")
    options = _write_options(choices)
    if choices.imported is None:
        files: dict[str, str] = render_all(config_set_from_strategy(choices.strategy, options))
    else:
        config = config_set_from_import(choices.imported.config, choices.strategy, options)
        files = render_all(config)
        if choices.imported_ds_text is not None:
            files[DS_CONFIG_NAME] = ds_json_like(config.deepspeed, choices.imported_ds_text)
    sidecar = plan_sidecar_text(choices)
    if sidecar is not None:
        files[_core("wizard.config.sidecar", "SIDECAR_NAME")] = sidecar
    return files


def plan_sidecar_text(choices: Choices) -> str | None:
    """dswiz-plan.json for the chosen strategy (the model, hardware, request and the planner's prediction), or None
    when no model was planned."""
    if choices.strategy is None or choices.hardware is None or not choices.model_text.strip():
        return None
    if not _has("wizard.replan"):
        return None
    make_sidecar = _core("wizard.replan", "make_sidecar")
    dump = _core("wizard.config.sidecar", "dump_sidecar")
    model = load_model(choices.model_text)
    sidecar = make_sidecar(
        model_arg=choices.model_text.strip(),
        model=model,
        hardware_arg=choices.hardware_spec,
        hardware=choices.hardware,
        request=_request(choices),
        strategy=choices.strategy,
    )
    text: str = dump(sidecar)
    return text


def script_hint_lines(files: dict[str, str], out_dir: Path, consumer: str = "deepspeed") -> list[str]:
    """The code change the training script needs for the written DeepSpeed config (wizard.hints)."""
    import json

    from wizard.config.schema import ACCELERATE_YAML_NAME, DS_CONFIG_NAME

    hint_lines = _core("wizard.hints", "config_hint_lines")
    try:
        ds_config = json.loads(files.get(DS_CONFIG_NAME, "{}"))
    except ValueError:
        return []
    lines: list[str] = hint_lines(
        consumer,
        ds_config,
        config_file=str(out_dir / DS_CONFIG_NAME),
        accelerate_config=str(out_dir / ACCELERATE_YAML_NAME),
    )
    return lines


def lint_files(
    files: dict[str, str],
    world_size: int,
    *,
    hardware: HardwareReport | None = None,
    launcher: str | None = None,
    out_dir: Path | None = None,
) -> list[Finding]:
    """The linter's findings for the files about to be written: exactly what ``dswiz check DIR`` would say once
    they are written to ``out_dir`` (the same ``wizard.config.check.lint_path``, run on a scratch copy in which
    the files' absolute paths to ``out_dir`` -- accelerate's deepspeed_config_file -- point at the copy)."""
    import dataclasses
    import tempfile

    from wizard.config.check import lint_path

    target = str(out_dir.resolve()) if out_dir is not None else None
    with tempfile.TemporaryDirectory(prefix="dswiz-review-") as scratch:
        for name, text in files.items():
            if target is not None:
                text = text.replace(target + "/", scratch + "/")
            (Path(scratch) / name).write_text(text, encoding="utf-8")
        found = lint_path(Path(scratch), world_size=world_size, hardware=hardware, launcher=launcher)

        def back(text: str | None) -> str | None:
            return text.replace(scratch, target) if text is not None and target is not None else text

        return [
            dataclasses.replace(
                f,
                what=back(f.what) or "",
                why=back(f.why) or "",
                fix=back(f.fix) or "",
                location=back(f.location),
            )
            for f in found
        ]


def import_config(path: Path) -> Any:
    """Read an existing DeepSpeed JSON / accelerate YAML (``dswiz --from FILE``)."""
    if not path.is_file():
        raise DswizError(
            f"{path} does not exist", "give the path of a DeepSpeed JSON or accelerate YAML file"
        )
    return _core("wizard.config.load", "load_path")(path)


def write_files(out_dir: Path, files: dict[str, str], *, force: bool) -> list[Any]:
    from wizard.fsio import atomic_write_text

    results = []
    for name, text in files.items():
        mode = 0o755 if name.endswith(".sh") else None
        results.append(atomic_write_text(out_dir / name, text, force=force, mode=mode))
    return results


def existing_files(out_dir: Path, names: Iterable[str]) -> dict[str, str]:
    """What is already on disk under those names, for the diff (unreadable files count as absent)."""
    out = {}
    for name in names:
        p = out_dir / name
        try:
            out[name] = p.read_text()
        except (OSError, UnicodeDecodeError):
            continue
    return out


def launch_command(out_dir: Path, script: str = "train.py", *, choices: Choices | None = None) -> str:
    """What to run next. A multi-node job whose launcher runs on every node (nossh, standard) is started on each
    node with that node's rank."""
    from wizard.config.launchers import PER_NODE_LAUNCHERS

    s = choices.strategy if choices is not None else None
    if choices is not None and s is not None and s.nodes > 1 and choices.launcher in PER_NODE_LAUNCHERS:
        return f"dswiz launch --config {out_dir} --node-rank K {script}   (on every node; K = 0 on the first host)"
    return f"dswiz launch --config {out_dir} {script}"


def _has(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------- multi-node

# What each launcher needs (FACTS §3 rules 8-9): wizard/config/launchers.py.
LAUNCHER_NOTES: dict[str, str] = dict(_LAUNCHER_NOTES)


def launcher_problems(launcher: str, hw: HardwareReport | None) -> list[str]:
    """Why ``launcher`` cannot start this job's nodes (the DeepSpeed version the hardware report found)."""
    from wizard.config.launchers import launcher_problems as problems

    return problems(launcher, deepspeed_version=hw.software.deepspeed if hw else None)


def check_hostfile(text: str, *, nodes: int, gpus_per_node: int, launcher: str) -> list[Finding]:
    """Findings for the hostfile being edited: DeepSpeed's rules (FACTS §3 rules 8-9) and, since this hostfile is
    the plan's topology, one line per node with slots = GPUs per node."""
    from wizard.config.lint.hostfile import lint_hostfile_for_topology

    return lint_hostfile_for_topology(text, nodes=nodes, gpus_per_node=gpus_per_node, launcher=launcher)


# ---------------------------------------------------------------- NVMe offload


def suggest_nvme_path(hw: HardwareReport | None) -> str | None:
    from wizard.config.nvme import suggest_nvme_path as suggest

    return suggest(hw)


def check_nvme_path(choices: Choices, need_bytes: int | None) -> list[Finding]:
    """Findings for the NVMe offload directory: absolute, local, on NVMe, room for ``need_bytes`` (the planner's
    prediction per node), and writable when the hardware is this machine."""
    from wizard.config.nvme import nvme_path_findings

    return nvme_path_findings(choices.nvme_path, choices.hardware, need_bytes=need_bytes)


def default_hostfile(nodes: int, gpus_per_node: int) -> str:
    """A starting point the user edits: placeholder host names, one line per node (the config writers' own
    placeholders, which the written hostfile then marks as such)."""
    return "".join(f"worker-{i} slots={gpus_per_node}\n" for i in range(nodes))


def apply_import(choices: Choices, imported: Any) -> None:
    """Put an imported config's decisions into the choices (``dswiz --from FILE``), and keep the import so that
    writing changes only what the user changes (render_files)."""
    from wizard.config.reimport import options_from_config, strategy_from_config

    config = imported.config
    options = options_from_config(config)
    choices.imported = imported
    choices.imported_ds_text = _read_text(imported.ds_config_path)
    choices.gradient_clipping = options.gradient_clipping
    choices.nvme_path = options.nvme_path or ""
    choices.launcher = options.launcher
    choices.consumer = options.consumer
    choices.save_16bit = options.save_16bit_model
    topo = config.topology
    if topo.nodes > 1:
        hostfile = config.accelerate_ds_fields.get("deepspeed_hostfile")
        text = _read_text(Path(hostfile)) if isinstance(hostfile, str) else None
        choices.hostfile_text = text or "".join(f"{h} slots={topo.gpus_per_node}\n" for h in topo.hosts)
        choices.master_addr = topo.master_addr or ""
        choices.master_port = topo.master_port
    # The file's stage, offloads, precision, micro-batch and accumulation are kept; its world size may be another
    # machine's, so the target global batch is left to the planner and the topology to the hardware step.
    choices.strategy = strategy_from_config(config, mode=choices.mode)


def _read_text(path: Path | None) -> str | None:
    try:
        return path.read_text(encoding="utf-8") if path is not None else None
    except (OSError, UnicodeDecodeError):
        return None
