"""`dswiz plan`: which ZeRO stage / offload / precision / micro-batch fits and is fastest, and why.

The arithmetic lives in the pure core (wizard.planner); this module parses flags, loads the model and the hardware,
and prints a rich table (or the stable JSON document).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from wizard.cli_options import (
    no_gpu_error,
    planning_model,
    planning_options,
    planning_request,
    strategy_choice,
    strategy_options,
)
from wizard.errors import DswizError
from wizard.strategy import offload_cell

if TYPE_CHECKING:
    from wizard.hardware.report import HardwareReport
    from wizard.model import ModelSpec
    from wizard.planner import Candidate, Plan, StrategyChoice

DEFAULT_TOP = 8


@click.command()
@planning_options(model_required=True)
@click.option(
    "--stage",
    "stages",
    type=click.IntRange(0, 3),
    multiple=True,
    help="Only these ZeRO stages (repeat the flag); default all.",
)
@click.option(
    "--top", type=click.IntRange(1, 1000), default=None, help=f"Rows to show (default {DEFAULT_TOP})."
)
@click.option("--all", "show_all", is_flag=True, help="Show every candidate, also those that do not fit.")
@click.option(
    "--max-batch",
    is_flag=True,
    help="Also list, for every strategy (stage 0 = plain data parallelism, ZeRO-1/2/3, each offload, with and "
    'without checkpointing), the largest micro-batch that fits and its tokens/s (JSON: "max_batch_table").',
)
@strategy_options
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (the stable contract).")
@click.pass_context
def plan(
    ctx: click.Context,
    model_text: str,
    finetune: str,
    lora_rank: int,
    lora_alpha: int,
    lora_targets: str | None,
    hardware: str | None,
    seq_len: int | None,
    global_batch: int | None,
    precision: str,
    mode: str,
    stages: tuple[int, ...],
    no_offload: bool,
    no_checkpointing: bool,
    margin: float,
    gpu_memory: int | None,
    nvme: int | None,
    expandable_segments: bool | None,  # read from ctx.params by planning_request
    no_history: bool,  # read from ctx.params by planning_request
    top: int | None,
    show_all: bool,
    max_batch: bool,
    offload_optimizer: str | None,
    offload_param: str | None,
    micro_batch: int | None,
    grad_accum: int | None,
    activation_checkpointing: bool | None,
    as_json: bool,
) -> int:
    """Rank the ZeRO strategies that fit, with predicted GPU/CPU memory, tokens/s and the reasons.

    \b
    Examples:
      dswiz plan --model llama-7b --hardware 8xA100-80GB
      dswiz plan --model ./my-model/config.json --seq-len 4096 --global-batch 512
      dswiz plan --model params=13e9 --hardware 2x8xH100,net=400 --json
      dswiz plan --model gpt2-xl --hardware 2xRTX3090 --max-batch
      dswiz plan --model meta-llama/Llama-3.1-8B --finetune lora --lora-rank 16 --hardware 1xRTX4090
      dswiz plan --model llama-70b --finetune qlora --hardware 1xL40S
      dswiz plan --model llama-7b --hardware 1xA100-80GB --stage 2 --offload-optimizer cpu --micro-batch 8
    With one --stage and any of --offload-optimizer, --offload-param, --micro-batch, --grad-accum,
    --[no-]activation-checkpointing: that one strategy (the planner's choice for the parts not given).
    Exit code 0 when something fits (that strategy, if one was given), 1 when nothing does (the advice says what
    would).
    """
    from wizard.hardware import get_hardware
    from wizard.planner import plan as make_plan
    from wizard.planner.types import ZERO_STAGES

    if hardware is None and ctx.parent is not None:
        hardware = ctx.parent.params.get("hardware")  # `dswiz --hardware 8xH100 plan ...` means the same
    if ctx.parent is not None and ctx.parent.params.get("no_history"):
        ctx.params["no_history"] = True
    model = planning_model(ctx.params)
    report = get_hardware(hardware)
    if not report.gpus:
        raise no_gpu_error(report, model_text, "plan")
    choice = _choice(stages, ctx.params)
    request = planning_request(ctx.params, stages=stages, hardware=report)
    check_request(report, model, request)  # the stages asked for (ZeRO inference is stage 3 only, ...)
    if choice is not None:
        # An exact strategy fixes its own stage; it is judged against the planner's pick over every stage, so that a
        # stage that fits at no micro-batch is told which one does ("use ZeRO-1 ..."), not what its stage would need.
        request = replace(request, stages=ZERO_STAGES)
    result = make_plan(report, model, request)
    if choice is not None:
        return _show_choice(result, choice, as_json)
    shown = _select(result, top, show_all, as_json)
    table = None
    if max_batch:
        from wizard.planner import max_batch_table

        table = max_batch_table(report, model, request)
    if as_json:
        import json

        from wizard.planner import max_batch_to_json, plan_to_json

        doc = plan_to_json(result, shown)
        if table is not None:
            doc["max_batch_table"] = max_batch_to_json(table)
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        _print_plan(result, shown, hidden=len(result.candidates) - len(shown))
        if table is not None:
            _print_max_batch(table, result)
    return 0 if result.best is not None else 1


def _choice(stages: tuple[int, ...], params: Mapping[str, Any]) -> StrategyChoice | None:
    """The exact strategy asked for, or None (rank them all) when no part beyond --stage is fixed."""
    choice = strategy_choice(params, stage=stages[0] if stages else None)
    if choice == strategy_choice({}, stage=choice.zero_stage):
        return None
    if len(set(stages)) > 1:
        raise DswizError(
            f"--stage given {len(set(stages))} times with an exact strategy (--offload-*, --micro-batch, ...)",
            "give one --stage to evaluate that strategy, or drop the other flags to rank several stages",
        )
    return choice


def _show_choice(result: Plan, choice: StrategyChoice, as_json: bool) -> int:
    """One strategy: fits or not, memory by part, tokens/s, the reasons and what to change (JSON: the plan
    document with that one candidate, "exact_strategy": true, and "advice")."""
    from wizard.planner import choice_advice, choose

    chosen = choose(result, choice)
    lines = choice_advice(chosen, result)
    if as_json:
        import json

        from wizard.planner import plan_to_json

        doc = plan_to_json(result, (chosen,))
        doc.update(exact_strategy=True, advice=lines)
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        _print_choice(result, chosen, lines)
    return 0 if chosen.fits else 1


def _print_choice(result: Plan, c: Candidate, lines: list[str]) -> None:
    from rich.markup import escape

    console = _console()
    s, p = c.strategy, c.predicted
    console.print(
        f"[bold]{escape(_model_line(result.model))}[/] on {escape(_hardware_line(result.hardware))}"
    )
    batch = f"micro-batch {s.micro_batch_size} x {s.gradient_accumulation_steps} accumulation"
    verdict = "[green]fits[/]" if c.fits else f"[red]does not fit ({', '.join(c.limits)})[/]"
    console.print(f"{c.label}, {s.precision}, {batch}, sequence length {result.seq_len}: {verdict}")
    g = functools.partial(_g, exact=True)
    console.print(
        f"  GPU needs {g(p.gpu_needed_bytes)} of {g(result.gpu_capacity_bytes)} GiB per GPU (allocated "
        f"{g(p.gpu_allocated_bytes)}, peak in {p.peak_phase}; a card with room shows reserved "
        f"{g(p.gpu_reserved_bytes)}, device {g(p.gpu_bytes)}); host "
        f"{g(p.cpu_bytes)} GiB" + (f"; NVMe {g(p.nvme_bytes)} GiB" if p.nvme_bytes else "")
    )
    parts = ", ".join(f"{_PART_NAMES.get(k, k.replace('_', ' '))} {g(v)}" for k, v in p.breakdown if v)
    # the parts add up to the device figure a card with room shows, not to what must fit (that less the cache
    # the allocator gives back under pressure)
    console.print(f"  GPU GiB by part, {g(sum(v for _, v in p.breakdown))} on a card with room: {parts}")
    console.print(
        f"  ~{p.tokens_per_sec:,.0f} tokens/s, MFU {p.mfu * 100:.0f} %, {p.step_seconds:.3g} s per step"
    )
    for r in c.reasons:
        console.print(f"  - {escape(r)}")
    for a in lines:
        console.print(f"[bold]{'What to change' if not c.fits else 'Note'}:[/] {escape(a)}")


def check_request(report: HardwareReport, model: ModelSpec, request: Any) -> None:
    model.check_seq_len(request.resolved_seq_len(model))
    gpu = report.gpus[0]
    for p in request.precisions:
        supported = gpu.supports_bf16 if p == "bf16" else gpu.supports_fp16 if p == "fp16" else True
        if supported is False:
            cc = ".".join(map(str, gpu.compute_capability or ()))
            need = "8.0" if p == "bf16" else "7.0"
            alt = "fp16" if p == "bf16" and gpu.supports_fp16 else "fp32"
            raise DswizError(
                f"{gpu.name} (compute capability {cc}) cannot run {p}: it needs {need} or newer",
                f"use --precision {alt} (or auto)",
            )
    if request.mode == "inference" and 3 not in request.stages:
        raise DswizError("ZeRO inference only uses stage 3", "drop --stage, or pass --stage 3")


def _select(result: Plan, top: int | None, show_all: bool, as_json: bool) -> tuple[Candidate, ...]:
    cands = result.candidates
    if show_all or (as_json and top is None):
        return cands
    n = top or DEFAULT_TOP
    fitting = tuple(c for c in cands if c.fits)
    return (fitting or cands)[:n]


# ---------------------------------------------------------------------------------------------- rendering


def _hardware_line(report: HardwareReport) -> str:
    from wizard.units import fmt_bytes

    gpu = report.gpus[0]
    name = gpu.name.removeprefix("NVIDIA ")
    where = (
        f"{report.nodes} nodes x {report.gpus_per_node}" if report.nodes > 1 else f"{report.gpus_per_node}"
    )
    label = report.description or ("this machine" if report.source == "detected" else "described")
    return f"{where} x {name} ({fmt_bytes(gpu.memory_total_bytes)}) [{label}]"


def _model_line(model: ModelSpec) -> str:
    from wizard.model import _short_count

    parts = [f"{_short_count(model.total_params)} params"]
    if model.is_moe:
        parts.append(
            f"{_short_count(model.active_params)} active ({model.experts_per_token} of {model.num_experts} experts)"
        )
    parts.append(f"{model.layers} layers, hidden {model.hidden}")
    if model.finetune.uses_lora:
        from wizard.planner.finetune import trainable_params

        parts.append(f"{model.finetune.label()}: {_short_count(trainable_params(model))} trainable")
    return f"{model.name} ({', '.join(parts)})"


# the JSON's breakdown keys that are not words (the text says them as words)
_PART_NAMES = {"cuda_context": "CUDA context", "nccl": "NCCL", "history_correction": "run-history correction"}


def _g(n: int | None, *, exact: bool = False) -> str:
    """GiB for the table: one decimal below 100, whole above (the columns stay narrow); ``exact``: one decimal
    always, for the lines of one strategy, which sit beside its reasons' 127.8 (never 128 there)."""
    if n is None:
        return "?"
    v = n / 2**30
    return f"{v:,.1f}" if v < 100 or exact else f"{v:,.0f}"


def _console() -> Any:
    """Rich's console; piped, it does not wrap lines at 80 columns (a wrapped table or line breaks words apart
    for whatever reads it): lines stay whole."""
    import sys

    from rich.console import Console

    piped = not sys.stdout.isatty()
    return Console(highlight=False, soft_wrap=piped, width=1000 if piped else None)


def _mark(text: str, bad: bool) -> str:
    return f"[red]{text}[/]" if bad else text


def _print_plan(result: Plan, shown: tuple[Candidate, ...], hidden: int) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    console = _console()
    req = result.request
    batch = f", global batch {req.global_batch}" if req.global_batch else ""
    console.print(
        f"[bold]{escape(_model_line(result.model))}[/] on {escape(_hardware_line(result.hardware))}"
    )
    precs = sorted({c.strategy.precision for c in shown})
    console.print(
        f"{req.mode}, {'/'.join(precs)}, sequence length {result.seq_len}{batch}; per GPU "
        f"{_g(result.gpu_capacity_bytes)} GiB, {req.safety_margin * 100:g} % kept free"
    )
    for note in result.model.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")

    table = Table(box=box.SIMPLE_HEAVY, show_edge=False, pad_edge=False, collapse_padding=True)
    precisions = {c.strategy.precision for c in shown}
    any_nvme = any(c.predicted.nvme_bytes for c in shown)
    table.add_column("#", justify="right")
    table.add_column("ZeRO", justify="right")
    table.add_column("offload", no_wrap=True)
    training = req.mode == "train"
    if training:
        table.add_column("ckpt")
    if len(precisions) > 1:
        table.add_column("prec")
    table.add_column("batch", justify="right")
    table.add_column("GPU GiB", justify="right")
    table.add_column("RAM GiB", justify="right")
    if any_nvme:
        table.add_column("NVMe GiB", justify="right")
    table.add_column("tok/s", justify="right")
    table.add_column("MFU", justify="right")
    table.add_column("fits", justify="center")
    for i, c in enumerate(shown, 1):
        s, p = c.strategy, c.predicted
        row = [
            str(i),
            f"{s.zero_stage}{'++' if s.uses_zeropp else ''}",
            offload_cell(s),
        ]
        if training:
            row.append("yes" if s.activation_checkpointing else "-")
        if len(precisions) > 1:
            row.append(s.precision)
        row += [
            f"{s.micro_batch_size}x{s.gradient_accumulation_steps}" if training else str(s.micro_batch_size),
            _mark(_g(p.gpu_needed_bytes), "gpu" in c.limits),
            _mark(_g(p.cpu_bytes), "cpu" in c.limits),
        ]
        if any_nvme:
            row.append(_mark(_g(p.nvme_bytes), "nvme" in c.limits) if p.nvme_bytes else "-")
        row += [
            f"{p.tokens_per_sec:,.0f}",
            f"{p.mfu * 100:.0f}%",
            "[green]yes[/]" if c.fits else "[red]no[/]",
        ]
        table.add_row(*row)
    console.print(table)
    if hidden:
        console.print(f"[dim]{hidden} more candidate(s): --all shows them, --json lists them[/]")
    best = result.best
    if best is not None:
        s = best.strategy
        batch = (
            f"micro-batch {s.micro_batch_size}, gradient accumulation {s.gradient_accumulation_steps}"
            if training
            else f"micro-batch {s.micro_batch_size} per forward (inference: no optimizer, no gradients)"
        )
        console.print(f"[bold green]Recommended:[/] {escape(best.label)}, {s.precision}, {batch}")
        for r in best.reasons:
            console.print(f"  - {escape(r)}")
    else:
        console.print("[bold red]Nothing fits.[/] What would:")
        for a in result.advice:
            console.print(f"  - {escape(a)}")
    for note in result.notes:
        console.print(f"[dim]note: {escape(note)}[/]")


def _print_max_batch(rows: list[Any], result: Plan) -> None:
    """The max-batch table: one line per stage and offload choice, without and with checkpointing side by side."""
    from rich import box
    from rich.table import Table

    from wizard.service.tables import max_batch_pairs

    console = _console()
    with_ckpt = any(r.strategy.activation_checkpointing for r in rows)
    table = Table(
        title="Largest micro-batch per strategy (accumulation 1)",
        title_justify="left",
        box=box.SIMPLE_HEAVY,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("ZeRO", justify="right")
    table.add_column("offload", no_wrap=True)
    table.add_column("batch", justify="right")
    table.add_column("tok/s", justify="right")
    if with_ckpt:
        table.add_column("batch ckpt", justify="right")
        table.add_column("tok/s ckpt", justify="right")
    for pair in max_batch_pairs(rows):
        cells = [pair.stage, pair.offload]
        for r in pair.rows(with_ckpt):
            cells += _max_batch_cells(r)
        table.add_row(*cells)
    console.print(table)
    console.print(
        f"[dim]per GPU {_g(result.gpu_capacity_bytes)} GiB, {result.request.safety_margin * 100:g} % kept free, "
        f"sequence length {result.seq_len}; '+': the planner's cap of {result.request.max_micro_batch}, more "
        "would fit[/]"
    )


def _max_batch_cells(r: Any) -> list[str]:
    if r is None:
        return ["", ""]
    if r.max_micro_batch == 0:
        return ["[red]none[/]", "-"]
    batch = f"{r.max_micro_batch}{'+' if r.capped else ''}"
    if r.limits:
        batch = f"[red]{batch} ({'/'.join(r.limits)} short)[/]"
    return [batch, f"{r.tokens_per_sec:,.0f}"]
