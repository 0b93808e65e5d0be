"""Batch arithmetic, done the way DeepSpeed 0.19.8's DeepSpeedConfig does it (deepspeed/runtime/config.py
_set_batch_related_parameters + _batch_assertion): missing values are completed by floor division, then
train_batch_size must equal micro x accumulation x world size -- the data-parallel world: DeepSpeedConfig divides
the ranks by ``sequence_parallel_size`` (``DeepSpeedConfig.__init__``, the no-mpu path that deepspeed.initialize, the
HF Trainer and accelerate take), and with ``data_parallel_size`` beside it deepspeed.initialize builds a mesh whose
data-parallel group is that size. Tensor parallelism (``tensor_parallel.autotp_size``) does not change that world
in 0.19.8's DeepSpeedConfig."""

from __future__ import annotations

from typing import Any

from wizard.config.lint.base import ERROR, INFO, LintContext, as_int, finding, is_auto
from wizard.findings import Finding

TRAIN, MICRO, GAS = "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"


def complete_batch(
    train: int | None, micro: int | None, gas: int | None, world: int
) -> tuple[int, int, int] | str:
    """DeepSpeed's completion of a partial batch specification, or its error message."""
    for name, given in ((TRAIN, train), (MICRO, micro), (GAS, gas)):
        if given is not None and given <= 0:
            return f"{name} is {given}; it has to be greater than 0"
    if train is not None and micro is not None and gas is not None:
        pass
    elif train is not None and micro is not None:
        gas = train // micro // world
    elif train is not None and gas is not None:
        micro = train // world // gas
    elif micro is not None and gas is not None:
        train = micro * gas * world
    elif train is not None:
        gas, micro = 1, train // world
    elif micro is not None:
        train, gas = micro * world, 1
    else:
        return "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"
    assert train is not None and micro is not None and gas is not None
    for name, value in ((TRAIN, train), (MICRO, micro), (GAS, gas)):
        if value <= 0:
            return f"{name} works out to {value}; it has to be greater than 0"
    if train != micro * gas * world:
        return (
            "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size "
            f"{train} != {micro} * {gas} * {world}"
        )
    return train, micro, gas


def check_batch(cfg: dict[str, Any], ctx: LintContext) -> list[Finding]:
    raw = {k: cfg.get(k) for k in (TRAIN, MICRO, GAS)}
    if any(is_auto(v) for v in raw.values()):
        # The consumer fills them (or cannot: the "auto" rules say which); what the numbers given already rule out
        # is checked.
        return _check_with_auto(cfg, raw, ctx)
    values = {k: as_int(v) for k, v in raw.items()}
    if any(raw[k] is not None and values[k] is None for k in raw):
        return []  # not numbers: the type rules report them
    train, micro, gas = values[TRAIN], values[MICRO], values[GAS]
    if train is None and micro is None:
        return [
            finding(
                ERROR,
                "batch-missing",
                "neither train_batch_size nor train_micro_batch_size_per_gpu is set",
                'DeepSpeed stops: "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"',
                "set train_micro_batch_size_per_gpu (the per-GPU batch) and gradient_accumulation_steps",
                MICRO,
            )
        ]
    for name, value in ((TRAIN, train), (MICRO, micro), (GAS, gas)):
        if value is not None and value <= 0:
            return [
                finding(
                    ERROR,
                    "batch-arithmetic",
                    f"{name} is {value}",
                    "DeepSpeed asserts it has to be greater than 0",
                    f"set {name} to a positive number (or remove it and let DeepSpeed derive it)",
                    name,
                )
            ]
    sp = _sequence_parallel(cfg)
    ranks = ctx.effective_world_size
    if ranks is None:
        return _check_without_world_size(train, micro, gas, sp)
    world, why_not = data_parallel_world(cfg, ranks)
    if world is None:
        return [
            finding(
                ERROR,
                "batch-arithmetic",
                why_not,
                "DeepSpeed splits the ranks into sequence-parallel groups of that size; a remainder cannot run",
                f"use a multiple of {sp} GPUs, or change sequence_parallel_size",
                "sequence_parallel_size",
            )
        ]
    result = complete_batch(train, micro, gas, world)
    if isinstance(result, str):
        return [
            finding(
                ERROR,
                "batch-arithmetic",
                f"batch sizes do not add up for {_ranks_text(ranks, world)}: {result}",
                "DeepSpeed asserts train_batch_size == micro x accumulation x world size; missing values are "
                "completed by floor division first, which can round to a size that breaks it",
                _batch_fix(train, micro, gas, world),
                TRAIN if train is not None else MICRO,
            )
        ]
    filled = [name for name, value in ((TRAIN, train), (MICRO, micro), (GAS, gas)) if value is None]
    if filled:
        t, m, g = result
        return [
            finding(
                INFO,
                "batch-completed",
                f"DeepSpeed will set {', '.join(filled)} itself: {t} = {m} x {g} x {_ranks_text(ranks, world)}",
                "values left out are derived from the others and the world size",
                "nothing to do, unless you meant other numbers",
                filled[0],
            )
        ]
    return []


def _check_with_auto(cfg: dict[str, Any], raw: dict[str, Any], ctx: LintContext) -> list[Finding]:
    """Some sizes "auto": whatever the consumer fills in, train_batch_size (a number) must be a multiple of the
    world size times the other numbers given, or DeepSpeed's assertion fails for every value it could fill."""
    train = as_int(raw[TRAIN])
    ranks = ctx.effective_world_size
    if train is None or train <= 0 or ranks is None:
        return []
    world, _ = data_parallel_world(cfg, ranks)
    known = {k: as_int(raw[k]) for k in (MICRO, GAS) if not is_auto(raw[k]) and raw[k] is not None}
    if world is None or any(v is None or v <= 0 for v in known.values()):
        return []  # the sequence-parallel split, and sizes that are not numbers, are reported elsewhere
    parts = [f"{world} (world size)", *(f"{v} ({k})" for k, v in known.items())]
    divisor = world
    for v in known.values():
        divisor *= v or 1
    if train % divisor == 0:
        return []
    auto = [k for k in (MICRO, GAS) if is_auto(raw[k])]
    return [
        finding(
            ERROR,
            "batch-arithmetic",
            f"train_batch_size {train} cannot be split over {_ranks_text(ranks, world)}: it is not a multiple "
            f"of {' x '.join(parts)} = {divisor}",
            f"whatever the consumer fills into {' and '.join(auto)}, DeepSpeed asserts train_batch_size == "
            "micro x accumulation x world size",
            f"make train_batch_size a multiple of {divisor} ({divisor * max(1, round(train / divisor))}), "
            'or set it to "auto"',
            TRAIN,
        )
    ]


def _sequence_parallel(cfg: dict[str, Any]) -> int:
    sp = as_int(cfg.get("sequence_parallel_size"))
    return sp if sp is not None and sp >= 1 else 1


def data_parallel_world(cfg: dict[str, Any], ranks: int) -> tuple[int | None, str]:
    """The world size DeepSpeed's batch assertion uses for ``ranks`` processes, or None and why it has none."""
    sp = _sequence_parallel(cfg)
    dp = as_int(cfg.get("data_parallel_size"))
    if sp > 1 and dp is not None and dp >= 1:
        if dp * sp != ranks:
            return None, f"data_parallel_size {dp} x sequence_parallel_size {sp} is not the {ranks} GPU(s)"
        return dp, ""
    if ranks % sp:
        return None, f"{ranks} GPU(s) do not divide into sequence_parallel_size {sp}"
    return ranks // sp, ""


def _ranks_text(ranks: int, world: int) -> str:
    if ranks == world:
        return f"{world} GPU(s)"
    return f"{world} data-parallel rank(s) ({ranks} GPUs / sequence parallel {ranks // world})"


def _check_without_world_size(
    train: int | None, micro: int | None, gas: int | None, sp: int = 1
) -> list[Finding]:
    if train is None or micro is None or min(train, micro, gas or 1) <= 0:
        return []  # zero or negative sizes: reported once the world size is known, and by DeepSpeed itself
    per_world = micro * (gas if gas is not None else 1)
    if gas is not None and (per_world <= 0 or train % per_world != 0):
        return [
            finding(
                ERROR,
                "batch-arithmetic",
                f"train_batch_size {train} is not a multiple of micro x accumulation = {micro} x {gas}",
                "no number of GPUs satisfies train_batch_size == micro x accumulation x world size",
                f"remove train_batch_size (DeepSpeed derives it), or make it {per_world} x (number of GPUs)",
                TRAIN,
            )
        ]
    if gas is not None:
        ranks = train // per_world
        gpus = f"{ranks * sp} GPU(s) ({ranks} data-parallel x sequence_parallel_size {sp})" if sp > 1 else ""
        return [
            finding(
                INFO,
                "batch-world-size",
                f"these batch sizes only fit {gpus or f'{ranks} GPU(s)'} ({train} = {micro} x {gas} x {ranks})",
                "train_batch_size pins the world size; DeepSpeed asserts on any other number of ranks",
                "remove train_batch_size to let it follow the GPU count, or pass --world-size to check yours",
                TRAIN,
            )
        ]
    return []


def _batch_fix(train: int | None, micro: int | None, gas: int | None, world: int) -> str:
    for name, value in ((TRAIN, train), (MICRO, micro), (GAS, gas)):
        if value is not None and value <= 0:
            return f"set {name} to a positive number (or remove it and let DeepSpeed derive it)"
    if micro is not None and gas is not None:
        return f"set train_batch_size to {micro * gas * world} ({micro} x {gas} x {world}) or remove it"
    if micro is not None and train is not None:
        if train % (micro * world) == 0:
            return f"set gradient_accumulation_steps to {train // (micro * world)}"
        return (
            f"make train_batch_size a multiple of {micro * world} (micro {micro} x {world} GPUs), "
            "or set gradient_accumulation_steps and remove train_batch_size"
        )
    if gas is not None and train is not None:
        return f"make train_batch_size a multiple of {gas * world} ({gas} steps x {world} GPUs)"
    return f"make train_batch_size a multiple of the GPU count ({world}), or set the micro-batch instead"
