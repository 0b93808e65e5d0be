"""``dswiz-plan.json``: what the plan behind a config folder was, so ``dswiz launch`` can compare the run with it.

``dswiz config`` (and the wizard) write it next to the configs whenever a model was planned. ``dswiz launch --config
DIR`` reads it to (a) give the monitor the predicted peak, tokens/s, FLOPs per token and peak TFLOP/s (run.json's
``plan`` section), (b) check host RAM and NVMe space against the predicted need before starting, and (c) re-plan the
same model and hardware after a CUDA out-of-memory error (``wizard.replan``). Pure: text in, data out.

Format, version 1 (a JSON object; readers ignore keys they do not know, so later versions may add keys; a reader
refuses a higher ``version``)::

    {
      "format": "dswiz-plan",
      "version": 1,
      "model": {"arg": "gpt2-medium",               # what --model was given (a preset, a path, numbers)
                "name": ..., "params": ..., "layers": ..., "hidden": ..., "seq_len": ..., "flops_per_token": ...,
                "spec": {...}},                     # the full ModelSpec, for re-planning
      "hardware": {"arg": "8xA100-80GB" | null,     # --hardware, or null for the machine it was detected on
                   "summary": "...", "nodes": ..., "gpus_per_node": ..., "gpu_name": ..., "gpu_memory_bytes": ...,
                   "host_ram_bytes": ...,
                   "report": {...}},                # the full HardwareReport, for re-planning
      "request": {"seq_len": ..., "global_batch": ... | null,    # what the planner was asked
                  "expandable_segments": true,              # only when planned for them (absent: false)
                  "fused_optimizer": true,                  # only when the config's optimizer section makes
                                                            # DeepSpeed build its FusedAdam where the optimizer
                                                            # stays on the GPU (stage 0's step; absent: false)
                  "gpu_memory_bytes": ...,                  # only when planned for less than the card (--gpu-memory)
                  "safety_margin": ...},                    # only when not the default (--margin / 100)
      "strategy": {...},                            # wizard.strategy.Strategy.to_dict(): what the configs say
      "predicted": {"peak_gpu_bytes": ..., "needed_gpu_bytes": ..., "host_bytes": ..., "nvme_bytes": ..., "tokens_per_sec": ..., "mfu": ...}
                   | null,                          # per GPU / per node / whole job; null when not predicted
      "peak_tflops_per_gpu": ... | null,            # dense peak of one GPU at the strategy's precision
      "config_args": ["--for", "deepspeed", ...]    # `dswiz config` flags beyond the strategy (to write it again)
    }
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wizard.errors import DswizError
from wizard.hardware.report import HardwareReport
from wizard.model import ModelSpec
from wizard.strategy import Strategy
from wizard.units import MAX_SAFETY_MARGIN, fmt_bytes

SIDECAR_NAME = "dswiz-plan.json"
SIDECAR_FORMAT = "dswiz-plan"
SIDECAR_VERSION = 1


@dataclass(frozen=True)
class PredictedNumbers:
    """The planner's prediction for the strategy the configs hold."""

    peak_gpu_bytes: int  # per GPU, at the device level (what an OOM is judged against)
    host_bytes: int  # host RAM per node (CPU offload, pinned buffers)
    nvme_bytes: int  # NVMe per node (NVMe offload)
    tokens_per_sec: float  # the whole job
    mfu: float
    # The run history's factors inside tokens_per_sec / peak_gpu_bytes (1.0: the physics alone); written only when
    # not 1, so that the run's own history record can compare the physics with what it measures.
    tokens_factor: float = 1.0
    memory_factor: float = 1.0
    # What the card must hold (what "fits" was judged on): peak_gpu_bytes less the cache the allocator gives back
    # under pressure. 0: not recorded (sidecars before 2026-12-03).
    needed_gpu_bytes: int = 0


@dataclass(frozen=True)
class PlanSidecar:
    model_arg: str
    model: ModelSpec
    hardware_arg: str | None  # None: the machine the plan was made on (detected)
    hardware: HardwareReport
    seq_len: int
    global_batch: int | None  # the planner's target (None: it chose)
    strategy: Strategy
    flops_per_token: (
        float  # model FLOPs per trained token (no recomputation), as the monitor's MFU counts them
    )
    predicted: PredictedNumbers | None = None
    peak_tflops_per_gpu: float | None = None
    config_args: tuple[str, ...] = ()
    # Planned for PyTorch's allocator with expandable segments: ``dswiz launch`` turns them on for the job.
    expandable_segments: bool = False
    # Planned for DeepSpeed's FusedAdam, which the config's optimizer section makes it build where the optimizer stays
    # on the GPU (wizard.config.optimizer_op; offloaded, it builds its CPU Adam): stage 0 in 16 bits steps through
    # FP16_Optimizer (wizard.planner.buffers.ZeroBuffers.fused_optimizer). Every re-plan of this config plans with it
    # (wizard.replan.planned_request).
    fused_optimizer: bool = False
    # What of each card the plan could use (--gpu-memory; None: the card's total) and kept free (--margin / 100; None:
    # the planner's default): every re-plan of this folder plans against the same memory.
    gpu_memory_bytes: int | None = None
    safety_margin: float | None = None

    @property
    def hardware_summary(self) -> str:
        return hardware_summary(self.hardware)


def hardware_summary(hw: HardwareReport) -> str:
    """``2 nodes x 8 x NVIDIA A100-SXM4-80GB (80.0 GiB)``, or the reason there is no GPU."""
    if not hw.gpus:
        return f"no GPU ({hw.no_gpu_reason})" if hw.no_gpu_reason else "no GPU"
    gpu = hw.gpus[0]
    mem = f" ({fmt_bytes(gpu.memory_total_bytes)})" if gpu.memory_total_bytes else ""
    nodes = f"{hw.nodes} nodes x " if hw.nodes > 1 else ""
    return f"{nodes}{hw.gpus_per_node} x {gpu.name}{mem}"


# --------------------------------------------------------------------------------------------- to / from text


def sidecar_to_dict(s: PlanSidecar) -> dict[str, Any]:
    m, hw = s.model, s.hardware
    gpu = hw.gpus[0] if hw.gpus else None
    p = s.predicted
    return {
        "format": SIDECAR_FORMAT,
        "version": SIDECAR_VERSION,
        "model": {
            "arg": s.model_arg,
            "name": m.name,
            "params": m.total_params,
            "layers": m.layers,
            "hidden": m.hidden,
            "seq_len": s.seq_len,
            "flops_per_token": s.flops_per_token,
            "spec": m.to_dict(),
        },
        "hardware": {
            "arg": s.hardware_arg,
            "summary": hardware_summary(hw),
            "nodes": hw.nodes,
            "gpus_per_node": hw.gpus_per_node,
            "gpu_name": gpu.name if gpu else None,
            "gpu_memory_bytes": hw.min_gpu_memory_bytes,
            "host_ram_bytes": hw.host.ram_total_bytes,
            "report": hw.to_dict(),
        },
        "request": {
            "seq_len": s.seq_len,
            "global_batch": s.global_batch,
            **({"expandable_segments": True} if s.expandable_segments else {}),
            **({"fused_optimizer": True} if s.fused_optimizer else {}),
            **({"gpu_memory_bytes": s.gpu_memory_bytes} if s.gpu_memory_bytes else {}),
            **({"safety_margin": s.safety_margin} if s.safety_margin is not None else {}),
        },
        "strategy": s.strategy.to_dict(),
        "predicted": None
        if p is None
        else {
            "peak_gpu_bytes": int(p.peak_gpu_bytes),
            "needed_gpu_bytes": int(p.needed_gpu_bytes),
            "host_bytes": int(p.host_bytes),
            "nvme_bytes": int(p.nvme_bytes),
            "tokens_per_sec": round(float(p.tokens_per_sec), 1),
            "mfu": round(float(p.mfu), 4),
            **{
                k: round(v, 4)
                for k, v in (("tokens_factor", p.tokens_factor), ("memory_factor", p.memory_factor))
                if v != 1.0
            },
        },
        "peak_tflops_per_gpu": s.peak_tflops_per_gpu,
        "config_args": list(s.config_args),
    }


def dump_sidecar(s: PlanSidecar) -> str:
    """The file's text: deterministic (fixed key order, no timestamps)."""
    return json.dumps(sidecar_to_dict(s), indent=2, ensure_ascii=False) + "\n"


def _fix(source: str) -> str:
    return (
        f"write it again with `dswiz config ... --force`, or delete {source} (the launch then gives generic "
        "advice and shows no predictions)"
    )


def load_sidecar(text: str, *, source: str = SIDECAR_NAME) -> PlanSidecar:
    """Parse the file's text. DswizError naming what is wrong for anything that is not a version-1 sidecar."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DswizError(f"{source}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})", _fix(source)) from e
    if not isinstance(data, dict) or data.get("format") != SIDECAR_FORMAT:
        raise DswizError(f'{source} is not a dswiz plan file (no "format": "dswiz-plan")', _fix(source))
    version = data.get("version")
    if not isinstance(version, int) or version < 1:
        raise DswizError(f"{source} has no valid version number", _fix(source))
    if version > SIDECAR_VERSION:
        raise DswizError(
            f"{source} is version {version}; this dswiz reads version {SIDECAR_VERSION}",
            "update dswiz, or write the folder again with this one (dswiz config ... --force)",
        )
    try:
        model, hw = data["model"], data["hardware"]
        request, predicted = data["request"], data.get("predicted")
        return PlanSidecar(
            model_arg=str(model["arg"]),
            model=ModelSpec.from_dict(model["spec"]),
            hardware_arg=hw.get("arg"),
            hardware=HardwareReport.from_dict(hw["report"]),
            seq_len=int(request["seq_len"]),
            global_batch=_opt_int(request.get("global_batch")),
            strategy=Strategy.from_dict(data["strategy"]),
            flops_per_token=float(model["flops_per_token"]),
            predicted=None
            if predicted is None
            else PredictedNumbers(
                peak_gpu_bytes=int(predicted["peak_gpu_bytes"]),
                host_bytes=int(predicted["host_bytes"]),
                nvme_bytes=int(predicted["nvme_bytes"]),
                tokens_per_sec=float(predicted["tokens_per_sec"]),
                mfu=float(predicted["mfu"]),
                tokens_factor=_factor(predicted.get("tokens_factor")),
                memory_factor=_factor(predicted.get("memory_factor")),
                needed_gpu_bytes=int(predicted.get("needed_gpu_bytes") or 0),
            ),
            peak_tflops_per_gpu=_opt_float(data.get("peak_tflops_per_gpu")),
            config_args=tuple(str(a) for a in data.get("config_args") or ()),
            expandable_segments=request.get("expandable_segments") is True,
            fused_optimizer=_fused_optimizer(request, data.get("config_args") or ()),
            gpu_memory_bytes=_opt_positive_int(request.get("gpu_memory_bytes")),
            safety_margin=_opt_margin(request.get("safety_margin")),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise DswizError(f"{source} is incomplete or damaged ({type(e).__name__}: {e})", _fix(source)) from e


def read_sidecar(directory: Path | str) -> PlanSidecar | None:
    """The sidecar in a config folder, or None when there is none. DswizError when it is there but unreadable."""
    path = Path(directory) / SIDECAR_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise DswizError(f"cannot read {path} ({e})", _fix(str(path))) from e
    return load_sidecar(text, source=str(path))


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _fused_optimizer(request: Mapping[str, Any], config_args: Sequence[Any]) -> bool:
    """The file's ``request.fused_optimizer``; a file from before it was written (no key) says it by the flags it
    was written with (``dswiz config --optimizer deepspeed`` without --torch-adam)."""
    if "fused_optimizer" in request:
        return request["fused_optimizer"] is True
    from wizard.config.build import writes_fused_adam

    args = [str(a) for a in config_args]
    choice = args[args.index("--optimizer") + 1] if "--optimizer" in args[:-1] else "auto"
    if choice not in ("auto", "deepspeed", "script"):
        return False
    return writes_fused_adam(choice, torch_adam="--torch-adam" in args)  # type: ignore[arg-type]


def _opt_positive_int(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"{v!r} is not a positive whole number of bytes")
    return v


def _opt_margin(v: Any) -> float | None:
    """A safety margin as written: a share of the card from 0 to MAX_SAFETY_MARGIN (--margin 0-50 %)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_SAFETY_MARGIN:
        raise ValueError(f"safety_margin {v!r} is not a share of the card from 0 to {MAX_SAFETY_MARGIN:g}")
    return float(v)


def _factor(v: Any) -> float:
    """A history factor as written (a positive finite number), else 1.0: a damaged factor is no correction."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 100:
        return 1.0
    return float(v)


# ----------------------------------------------------------------------------------------- what launch uses


def plan_applies(s: PlanSidecar, *, gpu_name: str | None, world_size: int | None) -> str | None:
    """Why the plan's memory and speed predictions do not describe this launch (None when they do): another GPU
    model, or another number of GPUs."""
    planned_gpu = s.hardware.gpus[0].name if s.hardware.gpus else None
    if gpu_name is None:
        return f"the plan was made for {hardware_summary(s.hardware)}; this machine has no GPU"
    if planned_gpu != gpu_name:
        return f"the plan was made for {hardware_summary(s.hardware)}; this machine has {gpu_name}"
    if world_size is not None and world_size != s.strategy.world_size:
        return f"the plan was made for {s.strategy.world_size} GPU(s); this launch starts {world_size}"
    return None


def run_plan_section(
    s: PlanSidecar, *, applies: bool, peak_tflops_here: float | None = None
) -> dict[str, Any]:
    """run.json's ``plan`` section (runner.metrics.plan.PlanInfo reads it). The model's FLOPs per token and sequence
    length always hold; the predictions (peak memory, tokens/s, the batch and GPUs they were made for) only when
    ``applies`` (same GPU model and count). ``peak_tflops_here``: this machine's GPU peak, for MFU otherwise."""
    out: dict[str, Any] = {"flops_per_token": s.flops_per_token, "seq_len": s.seq_len}
    if applies:
        out["global_batch_size"] = s.strategy.global_batch_size
        out["num_gpus"] = s.strategy.world_size
        if s.peak_tflops_per_gpu:
            out["peak_tflops_per_gpu"] = s.peak_tflops_per_gpu
        p = s.predicted
        if p is not None:
            out["predicted_peak_gpu_bytes"] = p.peak_gpu_bytes
            out["predicted_tokens_per_sec"] = p.tokens_per_sec
            if "cpu" in (s.strategy.offload_optimizer, s.strategy.offload_param) and p.host_bytes:
                out["pinned_host_bytes"] = p.host_bytes
    elif peak_tflops_here:
        out["peak_tflops_per_gpu"] = peak_tflops_here
    return out


def offload_needs(s: PlanSidecar) -> tuple[int | None, int | None]:
    """(host RAM, NVMe) bytes per node the offload needs, for the launch's preflight; None where not predicted or
    nothing is offloaded there."""
    p = s.predicted
    if p is None:
        return None, None
    offloads = (s.strategy.offload_optimizer, s.strategy.offload_param)
    host = p.host_bytes if any(d != "none" for d in offloads) and p.host_bytes else None
    nvme = p.nvme_bytes if "nvme" in offloads and p.nvme_bytes else None
    return host, nvme


def config_command(
    s: PlanSidecar, strategy: Strategy, out_dir: str, *, program: Sequence[str] = ("dswiz",)
) -> list[str]:
    """The ``dswiz config`` words that write ``strategy`` for the same model, hardware and options into ``out_dir``
    (replacing the files there): every strategy field as an explicit flag, so the plan cannot pick otherwise."""
    hw = s.hardware
    words = [*program, "config", "--yes", "--model", s.model_arg, *s.model.finetune.flag_words()]
    if s.hardware_arg:
        words += ["--hardware", s.hardware_arg]
    words += ["--seq-len", str(s.seq_len)]
    if s.gpu_memory_bytes:
        words += ["--gpu-memory", f"{s.gpu_memory_bytes}B"]
    if s.safety_margin is not None:
        words += ["--margin", f"{s.safety_margin * 100:g}"]
    words.append("--expandable-segments" if s.expandable_segments else "--no-expandable-segments")
    if strategy.mode != "train":
        words += ["--mode", strategy.mode]
    words += ["--stage", str(strategy.zero_stage)]
    words += ["--offload-optimizer", strategy.offload_optimizer, "--offload-param", strategy.offload_param]
    words += ["--precision", strategy.precision]
    words += ["--micro-batch", str(strategy.micro_batch_size)]
    words += ["--grad-accum", str(strategy.gradient_accumulation_steps)]
    ckpt = strategy.activation_checkpointing
    words.append("--activation-checkpointing" if ckpt else "--no-activation-checkpointing")
    zeropp = strategy.uses_zeropp
    words.append("--zeropp" if zeropp else "--no-zeropp")
    if strategy.nodes != hw.nodes:
        words += ["--nodes", str(strategy.nodes)]
    if strategy.gpus_per_node != hw.gpus_per_node:
        words += ["--gpus-per-node", str(strategy.gpus_per_node)]
    # an imported file's optimizer section (the wizard records no config_args)
    if s.fused_optimizer and "--optimizer" not in s.config_args:
        words += ["--optimizer", "deepspeed"]
    return [*words, *s.config_args, "--out", out_dir, "--force"]


def strategy_of_config(s: PlanSidecar, ds_config: Mapping[str, Any] | None) -> Strategy:
    """The strategy a launched DeepSpeed config holds: the sidecar's, with the numbers the config states (the
    user may have edited micro-batch, accumulation, stage, offload or precision after writing it)."""
    return s.strategy.with_(**stated_strategy_fields(ds_config))


def stated_strategy_fields(ds_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The Strategy fields a DeepSpeed config states as plain values: micro-batch, accumulation, ZeRO stage, where
    the optimizer states and parameters live, and bf16/fp16 when enabled. "auto" (what accelerate or the Trainer
    fill in) and wrong-typed values state nothing."""
    if not isinstance(ds_config, Mapping):
        return {}
    out: dict[str, Any] = {}
    for key, field in (
        ("train_micro_batch_size_per_gpu", "micro_batch_size"),
        ("gradient_accumulation_steps", "gradient_accumulation_steps"),
    ):
        value = ds_config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            out[field] = value
    zero = ds_config.get("zero_optimization")
    if isinstance(zero, Mapping):
        stage = zero.get("stage")
        if isinstance(stage, int) and not isinstance(stage, bool) and stage in (0, 1, 2, 3):
            out["zero_stage"] = stage
        for section in ("offload_optimizer", "offload_param"):
            sec = zero.get(section)
            device = sec.get("device") if isinstance(sec, Mapping) else "none"
            if device in ("none", "cpu", "nvme"):
                out[section] = device
    for precision in ("bf16", "fp16"):
        sec = ds_config.get(precision)
        if isinstance(sec, Mapping) and sec.get("enabled") is True:
            out["precision"] = precision
    return out
