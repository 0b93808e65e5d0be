"""`dswiz config`: write a complete config set (ds_config.json, accelerate.yaml, hostfile + .deepspeed_env for
several nodes, launch.sh, and dswiz-plan.json when a model was planned), lint it, show the script change the
consumer needs, and say what to run next.

With --yes nothing is asked: defaults come from the planner's top recommendation when --model is given, and every
explicit flag overrides it; without --model the flags alone describe the strategy. Without --yes the wizard's
questions are asked as line prompts (``wizard.prompts``), which needs a terminal.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from wizard.cli_options import (
    F,
    FiniteFloat,
    choice_option,
    finetune_from_flags,
    flag_option,
    given_options,
    no_gpu_error,
    no_local_rank_option,
    planned_expandable_segments,
    planning_model,
    planning_options,
    planning_request,
    strategy_choice,
    strategy_options,
)
from wizard.errors import DswizError
from wizard.fsio import KEEP_BACKUPS
from wizard.launch_command import PORTS

if TYPE_CHECKING:
    from wizard.config.build import WriteOptions
    from wizard.config.schema import ConfigSet
    from wizard.findings import Finding
    from wizard.hardware.report import HardwareReport
    from wizard.model import ModelSpec
    from wizard.planner import Plan, PlanRequest
    from wizard.planner.types import StrategyChoice
    from wizard.prompts import Prompter
    from wizard.strategy import Strategy


# ------------------------------------------------------------------------ cluster: launcher and job.sbatch
def cluster_options(command: F) -> F:
    """--launcher-mode and the Slurm batch-script flags (wizard/config/launchers.py, wizard/config/sbatch.py)."""
    from wizard.config.launchers import DEFAULT_LAUNCHER, MULTINODE_LAUNCHERS

    for option in reversed(
        (
            click.option(
                "--launcher-mode",
                "--multinode-launcher",
                "launcher",
                type=click.Choice(MULTINODE_LAUNCHERS),
                help=f"How a multi-node job starts its nodes (default {DEFAULT_LAUNCHER}: ssh from the first "
                "host); openmpi/mpich/impi/mvapich: mpirun; slurm: srun inside the allocation; nossh and "
                "standard (torchrun): once per node, no ssh (job.sbatch starts them with srun).",
            ),
            flag_option(
                "--sbatch", help="Write job.sbatch for one node too (multi-node plans always get one)."
            ),
            click.option(
                "--slurm-time", metavar="TIME", help="job.sbatch --time: minutes, H:MM:SS or D-HH:MM:SS."
            ),
            click.option("--slurm-partition", metavar="NAME", help="job.sbatch --partition."),
            click.option(
                "--slurm-cpus-per-task",
                type=click.IntRange(min=1),
                help="job.sbatch --cpus-per-task. Default: one CPU per rank the task starts; with the optimizer "
                "offloaded, each rank's share of the node's cores (CPU Adam runs on them), or the whole node "
                "(--exclusive) where its cores are not known.",
            ),
            click.option(
                "--slurm-gpus/--no-slurm-gpus",
                default=True,
                show_default=True,
                help="job.sbatch asks for --gpus-per-node (no: CPU ranks, or a cluster without GPU GRES).",
            ),
        )
    ):
        command = option(command)
    return command


def cluster_answers(flags: dict[str, Any]) -> dict[str, Any]:
    """The cluster flags as write options: the launcher and the checked SlurmJob (DswizError names a bad one)."""
    from wizard.config.launchers import DEFAULT_LAUNCHER
    from wizard.config.sbatch import slurm_job

    slurm = slurm_job(
        wanted=flags["sbatch"],
        time=flags["slurm_time"],
        partition=flags["slurm_partition"],
        cpus_per_task=flags["slurm_cpus_per_task"],
        gpus=flags["slurm_gpus"],
    )
    return {"launcher": flags["launcher"] or DEFAULT_LAUNCHER, "slurm": slurm}


def cluster_config_args(flags: dict[str, Any]) -> list[str]:
    """The cluster flags not at their default, to write the same files again."""
    args = ["--launcher-mode", flags["launcher"]] if flags["launcher"] else []
    args += ["--sbatch"] if flags["sbatch"] else []
    for name in ("slurm_time", "slurm_partition", "slurm_cpus_per_task"):
        if flags[name] is not None:
            args += ["--" + name.replace("_", "-"), str(flags[name])]
    return args + ([] if flags["slurm_gpus"] else ["--no-slurm-gpus"])


# ------------------------------------------------------------------------------------------------ the command


# Flags the line prompts do not take as their defaults (used with --yes only).
_NOT_PREFILLED = (
    "zeropp",
    "save_16bit",
    "hostfile_hosts",
    "slurm_time",
    "slurm_partition",
    "slurm_cpus_per_task",
)


@click.command()
@click.option("--yes", "-y", is_flag=True, help="Write without asking (the flags and the plan decide).")
@planning_options(model_required=False)
@click.option("--stage", type=click.IntRange(0, 3), help="ZeRO stage 0-3.")
@strategy_options
@click.option(
    "--save-16bit/--no-save-16bit",
    "save_16bit",
    default=None,
    help="Stage 3 training: gather the 16-bit weights into one file on save (default: yes).",
)
@click.option(
    "--zeropp/--no-zeropp",
    default=None,
    help="ZeRO++ at stage 3 (quantized weights and gradients, hpZ within each node). Default: the plan's choice.",
)
@choice_option(
    "--for",
    "consumer",
    choices=("deepspeed", "accelerate", "trainer"),
    default="deepspeed",
    help="Who reads the config: plain DeepSpeed, accelerate launch, or the HF Trainer.",
)
@choice_option(
    "--accelerate-mode",
    choices=("config-file", "plugin"),
    default="config-file",
    help="accelerate YAML pointing at ds_config.json, or carrying the settings itself.",
)
@click.option("--nodes", type=click.IntRange(min=1), help="Number of nodes.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), help="GPUs per node.")
@click.option("--hostfile-hosts", metavar="H1,H2,...", help="Host names of the nodes, node 0 first.")
@click.option("--master-addr", metavar="ADDR", help="Address of node 0 (multi-node).")
@click.option(
    "--master-port",
    type=click.IntRange(*PORTS),
    default=29500,
    show_default=True,
    metavar="PORT",
    help="Rendezvous port on node 0, written into launch.sh (a user's process cannot listen below 1024).",
)
@click.option("--nvme-path", metavar="DIR", help="Directory on a local NVMe drive for NVMe offload.")
@cluster_options
@choice_option(
    "--optimizer",
    choices=("auto", "deepspeed", "script"),
    default="auto",
    help="Who builds the optimizer: DeepSpeed (config) or the script; auto = DeepSpeed's when offloading. "
    "DeepSpeed's FusedAdam makes a 16-bit ZeRO-0 step hold 4 bytes a parameter more (planned for).",
)
@click.option(
    "--lr",
    type=FiniteFloat(min=0, min_open=True),
    default=1e-4,
    show_default=True,
    help="Learning rate of DeepSpeed's optimizer.",
)
@click.option("--torch-adam", is_flag=True, help="DeepSpeed's optimizer as torch AdamW (no JIT build).")
@no_local_rank_option()
@click.option(
    "--steps-per-print",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    metavar="N",
    help="DeepSpeed prints its step, loss-scale and throughput lines every N steps (the live dashboard reads them).",
)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Directory to write the files to.")
@click.option(
    "--force",
    is_flag=True,
    help=f"Replace files that exist: each old one is kept as NAME.bak-<time>, and only the last {KEEP_BACKUPS} "
    "backups of each file are kept (older ones are deleted). Your other files in the folder are not touched.",
)
@flag_option(
    "--force-errors",
    help="Write even when the check finds errors (DeepSpeed or accelerate would refuse the files) or the planner "
    "predicts the strategy the flags fix will not fit; without it nothing is written and the exit code is 1.",
)
@click.option(
    "--from",
    "from_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Start from an existing DeepSpeed JSON or accelerate YAML: without --yes the questions start from it; "
    "with --yes it is written again changed only by the strategy flags given (its train_batch_size kept: one of "
    "--micro-batch / --grad-accum derives the other), and with --model checked against the plan as --yes --model "
    "checks a strategy (not written when predicted not to fit).",
)
@click.pass_context
def config(
    ctx: click.Context,
    yes: bool,
    out_dir: Path | None,
    force: bool,
    force_errors: bool,
    from_file: Path | None,
    **flags: Any,
) -> int:
    """Write DeepSpeed JSON, accelerate YAML, hostfile and launch.sh for a strategy (with --yes, no questions).

    Files the check finds errors in, or a strategy the planner predicts will not fit, are not written (exit code
    1) unless --force-errors."""

    parent = ctx.parent.params if ctx.parent is not None else {}
    if flags["hardware"] is None:
        flags["hardware"] = parent.get("hardware")
    flags["no_history"] = flags["no_history"] or bool(parent.get("no_history"))  # `dswiz --no-history config`
    if not yes:
        ignored = [f"--{k.replace('_', '-')}" for k in _NOT_PREFILLED if flags.get(k) is not None]
        if ignored:
            click.echo(f"note: {', '.join(ignored)}: used with --yes only; the questions below ask", err=True)
        from_parent = parent.get("from_file")
        return run_interactive(
            hardware=flags["hardware"],
            out_dir=out_dir,
            from_file=from_file or (Path(from_parent) if from_parent else None),
            prefill=prefill_from_flags(flags),
            use_history=not flags["no_history"],
            expandable_segments=flags.get("expandable_segments"),
        )
    if out_dir is None:
        raise DswizError("no output directory given", "pass --out DIR (it is created if needed)")
    flags["mode"] = flags["mode"] or "train"
    if from_file is not None:
        return write_from_file(ctx, from_file, flags, out_dir, force=force, force_errors=force_errors)
    hardware = _hardware(flags)
    unplanned = _planning_only_given(ctx, flags) if flags["model_text"] is None else []
    if unplanned:
        click.echo(
            f"note: {', '.join(unplanned)}: used to plan, which needs --model; ignored here (the strategy comes "
            "from the strategy flags and the defaults)",
            err=True,
        )
    planned = plan_for_flags(flags, hardware, force_errors=force_errors)
    strategy = resolve_strategy(flags, hardware, planned)
    if planned is None:
        click.echo(
            "note: no --model, so nothing was planned: this is a starting point (the strategy flags on the defaults), "
            "not checked against any model's memory; `--model NAME` (a preset, hub id, folder or config.json) plans "
            "the stage, offload and micro-batch that fit",
            err=True,
        )
    else:
        from wizard.history.calibrate import HISTORY_NOTE_PREFIXES

        for note in planned.plan.notes:  # what changed the plan beyond the flags: the run history
            if note.startswith(HISTORY_NOTE_PREFIXES):
                click.echo(f"note: {note}", err=True)
        _say_if_it_does_not_fit(planned, strategy, force_errors=force_errors)
    options = write_options(flags, out_dir, hardware, planned.model if planned else None)
    from wizard.config.build import config_set_from_strategy

    config_set = config_set_from_strategy(strategy, options)
    extra = dict([_sidecar(planned, flags, strategy)]) if planned is not None else {}
    files = rendered_files(config_set, extra)
    findings = _check_before_writing(
        files, config_set, strategy, out_dir, hardware, force_errors=force_errors
    )
    written = write_config_set(files, out_dir, force=force)
    _report(config_set, strategy, written, out_dir, findings)
    return 0


# Planning flags that only the planner reads (the rest of `planning_options` also shape the written strategy).
_PLANNING_ONLY = (
    "seq_len",
    "margin",
    "gpu_memory",
    "nvme",
    "no_offload",
    "no_checkpointing",
    "finetune",
    "lora_rank",
    "lora_alpha",
    "lora_targets",
    "no_history",
)


def _planning_only_given(ctx: click.Context, flags: dict[str, Any]) -> list[str]:
    """The planner-only flags given on the command line, as the user spelled them."""
    return [max(o.opts, key=len) for o, _ in given_options(ctx, flags) if o.name in _PLANNING_ONLY]


def _check_before_writing(
    files: dict[str, str],
    config_set: ConfigSet,
    strategy: Strategy,
    out_dir: Path,
    hardware: HardwareReport | None,
    *,
    force_errors: bool,
) -> list[Finding]:
    """The check `dswiz check OUT` would run, on the files before they are written; errors stop the write."""
    from wizard.commands.check import print_findings
    from wizard.findings import Severity
    from wizard.service.files import lint_files

    findings = lint_files(
        files,
        strategy.world_size,
        hardware=hardware,
        out_dir=out_dir,
        consumer=config_set.consumer,
    )
    errors = sum(f.severity is Severity.ERROR for f in findings)
    if errors and not force_errors:
        print_findings(
            [f for f in findings if f.severity is not Severity.INFO], f"check of the files for {out_dir}"
        )
        raise DswizError(
            f"the check found {errors} error{'s' if errors != 1 else ''} in the files: nothing was written",
            "change the flags as each fix says, or pass --force-errors to write them anyway",
            exit_code=1,  # as `dswiz check` when it finds an error
        )
    return findings


# ------------------------------------------------------------------------------------------- --yes --from FILE


def write_from_file(
    ctx: click.Context,
    from_file: Path,
    flags: dict[str, Any],
    out_dir: Path,
    *,
    force: bool,
    force_errors: bool,
) -> int:
    """--yes --from FILE: the file's decisions on the topology asked for (--nodes/--gpus-per-node, else
    --hardware, else the file's own), its train_batch_size kept, the strategy flags given on top; written back
    changed only where those changed it (wizard.config.reimport). A train_batch_size that cannot be kept is
    refused unless a batch flag says what to write instead."""
    from wizard.errors import DswizError
    from wizard.service.wizard_service import WizardService, initial_choices

    service = WizardService(expandable_segments=flags.get("expandable_segments"))
    hardware = _hardware(flags)
    planned = plan_for_flags(flags, hardware, force_errors=force_errors)
    choices = initial_choices(service, hardware=hardware, from_file=from_file, out_dir=out_dir)
    assert choices.strategy is not None  # an import always has one
    own = choices.strategy
    nodes = flags["nodes"] or (hardware.nodes if hardware is not None else own.nodes)
    gpus = flags["gpus_per_node"] or (
        max(1, hardware.gpus_per_node) if hardware is not None else own.gpus_per_node
    )
    placed, batch = service.imported_on_topology(choices, nodes, gpus)
    given = {k: v for k, v in flags.items() if k not in ("nodes", "gpus_per_node")}
    strategy = _with_global_batch(_with_flags(placed, {**given, "nodes": None, "gpus_per_node": None}), flags)
    batch_flags = any(flags[k] is not None for k in ("micro_batch", "grad_accum", "global_batch"))
    if batch is not None and not batch.kept and not batch_flags:
        raise DswizError(
            batch.text,
            f"pass --global-batch {batch.global_batch} to accept it, or --micro-batch / --grad-accum",
        )
    if batch is not None:
        strategy = _keep_file_batch(strategy, flags, batch.file_global)
    problems = strategy.problems()
    if problems:
        raise DswizError("these choices do not work together: " + "; ".join(problems), _fix_for(problems))
    if planned is not None:
        _say_if_it_does_not_fit(planned, strategy, force_errors=force_errors)
    if ctx.get_parameter_source("consumer") is not click.core.ParameterSource.DEFAULT:
        choices.consumer = flags["consumer"]
    if flags["no_local_rank"] is not None:  # over what the file's folder's launch.sh says
        choices.no_local_rank = "asked" if flags["no_local_rank"] else None
    choices.strategy = strategy
    extra = dict([_sidecar(planned, flags, strategy)]) if planned is not None else {}
    files = {**service.render_files(choices, None), **extra}
    config_set = service.config_set(choices, None)
    findings = _check_before_writing(
        files, config_set, strategy, out_dir, hardware, force_errors=force_errors
    )
    written = write_config_set(files, out_dir, force=force)
    if batch is not None:
        numbers = (
            f"micro-batch {strategy.micro_batch_size} x accumulation {strategy.gradient_accumulation_steps}"
        )
        if strategy.global_batch_size == batch.file_global:
            click.echo(
                f"note: train_batch_size {batch.file_global} kept on {strategy.world_size} GPU(s): {numbers}"
            )
        else:
            click.echo(
                f"note: train_batch_size {batch.file_global} becomes {strategy.global_batch_size} on "
                f"{strategy.world_size} GPU(s): {numbers}, as the batch flags say"
            )
    _report(config_set, strategy, written, out_dir, findings)
    return 0


def _keep_file_batch(strategy: Strategy, flags: dict[str, Any], file_global: int) -> Strategy:
    """--from's train_batch_size kept where one batch flag changes the micro-batch or the accumulation: the other
    one is derived (as DeepSpeed derives it from train_batch_size); refused where it cannot be derived. Both given,
    or --global-batch, say the global batch themselves."""
    from wizard.strategy import batch_for_global

    if flags["global_batch"] is not None:
        return strategy
    split = batch_for_global(
        file_global, strategy.world_size, flags["micro_batch"], flags["grad_accum"],
        target_said=f"the file's train_batch_size {file_global}",
        also="--micro-batch and --grad-accum both (the global batch becomes their product), or --global-batch N",
    )  # fmt: skip
    if split is None:
        return strategy
    return strategy.with_(micro_batch_size=split[0], gradient_accumulation_steps=split[1])


# ------------------------------------------------------------------------------------------- without --yes


def is_interactive() -> bool:
    """Whether a person can answer prompts here (the one seam tests replace)."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def prefill_from_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """The answers the flags give, as the line prompts' defaults (``Choices`` fields): the model, how it is
    fine-tuned and what the planner is asked, who reads the config, the NVMe and master settings, and a strategy
    when one is asked for."""
    from wizard.service.wizard_service import unplanned_strategy

    prefill: dict[str, Any] = {
        "model_text": flags["model_text"] or "",
        "seq_len": flags["seq_len"],
        "global_batch": flags["global_batch"],
        "mode": flags["mode"],
        "finetune": finetune_from_flags(flags),
        "consumer": flags["consumer"],
        "master_port": flags["master_port"],
        "gpu_memory_bytes": flags["gpu_memory"],
        "safety_margin": flags["margin"] / 100,
    }
    for name in ("nvme_path", "master_addr"):
        if flags[name]:
            prefill[name] = flags[name]
    if flags["no_local_rank"] is not None:  # over what an imported folder's launch.sh says
        prefill["no_local_rank"] = "asked" if flags["no_local_rank"] else None
    asked = [flag for flag, _ in _STRATEGY_FIELDS if flags[flag] not in (None, "auto")]
    if asked:
        prefill["strategy"] = _with_flags(unplanned_strategy(None, flags["mode"]), flags)
    return prefill


def run_interactive(
    *,
    hardware: str | None,
    out_dir: Path | None,
    from_file: Path | None,
    prompter: Prompter | None = None,
    prefill: dict[str, Any] | None = None,
    use_history: bool = True,
    expandable_segments: bool | None = None,
) -> int:
    """The wizard's questions as line prompts (``wizard.prompts.run_prompts``); refused without a terminal."""

    if prompter is None and not is_interactive():
        raise DswizError(
            "`dswiz config` without --yes asks questions, but there is no terminal to ask them in",
            "pass --yes with your choices as flags (e.g. dswiz config --yes --model gpt2-medium --out DIR), "
            "or run it in an interactive terminal",
        )
    from wizard.prompts import run_prompts
    from wizard.service import WizardService

    return run_prompts(
        service=WizardService(use_history=use_history, expandable_segments=expandable_segments),
        prompter=prompter,
        hardware_spec=hardware,
        from_file=from_file,
        out_dir=out_dir,
        say=click.echo,
        prefill=prefill,
    )


def _hardware(flags: dict[str, Any]) -> HardwareReport | None:
    """Described hardware when asked; this machine only when the planner needs one (--model)."""
    if flags["hardware"] is None and flags["model_text"] is None:
        return None
    from wizard.hardware import get_hardware

    return get_hardware(flags["hardware"])


@dataclass(frozen=True)
class Planned:
    """The plan behind --model: what was planned, for what, and its answer."""

    model_arg: str
    model: ModelSpec
    request: PlanRequest
    plan: Plan


def plan_for_flags(
    flags: dict[str, Any], hardware: HardwareReport | None, *, force_errors: bool = False
) -> Planned | None:
    """The planner's answer for --model on this hardware (None without --model), asked as `dswiz plan` asks it
    (the same planning flags): the one place `dswiz config` talks to the planner. With --force-errors a
    precision the GPUs lack is not refused here: the plan is made without it, the flag then wins and the check
    reports it."""
    if flags["model_text"] is None:
        return None
    assert hardware is not None
    from wizard import planner
    from wizard.commands.plan import check_request
    from wizard.config.build import writes_fused_adam

    spec = planning_model(flags)
    request = planning_request(flags, hardware=hardware)
    if flags["mode"] == "train" and writes_fused_adam(flags["optimizer"], torch_adam=flags["torch_adam"]):
        # stage 0 steps the FusedAdam these files make DeepSpeed build; the sidecar keeps it for every re-plan
        request = dataclasses.replace(
            request, buffers=dataclasses.replace(request.buffers, fused_optimizer=True)
        )
    if not hardware.gpus:
        request = dataclasses.replace(request, precisions=())
    elif force_errors:
        try:
            check_request(hardware, spec, request)
        except DswizError:
            request = dataclasses.replace(request, precisions=())
    else:
        check_request(hardware, spec, request)
    return Planned(flags["model_text"], spec, request, planner.plan(hardware, spec, request))


def recommended_strategy(planned: Planned, flags: Mapping[str, Any] | None = None) -> Strategy:
    """The planner's strategy for the parts the flags fix (--stage, --offload-*, --[no-]activation-checkpointing,
    --micro-batch, --grad-accum), sized by the planner as `dswiz plan` with the same flags sizes it
    (``planner.choose``); with none fixed, its top recommendation. DswizError when nothing fits and nothing is
    fixed."""
    from wizard import planner

    choice = _fixed_parts(flags or {})
    if choice is not None:
        return planner.choose(planned.plan, choice).strategy
    best = planned.plan.best
    if best is None and not planned.plan.hardware.gpus:
        raise no_gpu_error(planned.plan.hardware, planned.model_arg, "config --yes")
    if best is None:
        raise DswizError(
            f"no strategy fits {planned.model_arg} on this hardware",
            "see `dswiz plan --model ...` for what is short, then choose more GPUs or a smaller model",
        )
    strategy: Strategy = best.strategy
    return strategy


def _say_if_it_does_not_fit(planned: Planned, strategy: Strategy, *, force_errors: bool) -> None:
    """A strategy the flags fixed that the planner predicts will not fit: what `dswiz check --model` calls an error
    (plan-does-not-fit), so nothing is written (exit code 1) unless --force-errors; then it is written as asked, with
    the warning. Either way with what would fit."""
    from wizard.service.prediction import does_not_fit, fused_adam_advice

    finding = does_not_fit(planned.plan, strategy)
    if finding is None:
        return
    torch_step = fused_adam_advice(
        planned.plan, strategy, "DeepSpeed's FusedAdam (--optimizer deepspeed)", "--torch-adam"
    )
    advice = [*([torch_step] if torch_step else []), finding.fix]
    if not force_errors:
        raise DswizError(
            f"{finding.what}; nothing was written",
            "; ".join([*advice, "or pass --force-errors to write it anyway"]),
            exit_code=1,  # as `dswiz check --model` when it predicts this
        )
    click.echo(f"warning: {finding.what}", err=True)
    for line in advice:
        click.echo(f"  fix: {line}", err=True)


def _fixed_parts(flags: Mapping[str, Any]) -> StrategyChoice | None:
    """The strategy parts the flags fix (--stage with the strategy options), or None when they fix none."""
    from wizard.planner.types import StrategyChoice

    choice = strategy_choice(flags, stage=flags.get("stage"))
    return choice if choice != StrategyChoice() else None


def resolve_strategy(
    flags: dict[str, Any], hardware: HardwareReport | None, planned: Planned | None = None
) -> Strategy:
    """The plan's strategy (or the defaults), with every explicit flag applied; refused when invalid."""

    base = recommended_strategy(planned, flags) if planned is not None else _default_strategy(flags, hardware)
    strategy = _with_flags(base, flags)
    strategy = _with_global_batch(strategy, flags)
    problems = strategy.problems()
    if problems:
        raise DswizError("these choices do not work together: " + "; ".join(problems), _fix_for(problems))
    _check_save_16bit(strategy, flags)
    return strategy


def _default_strategy(flags: dict[str, Any], hardware: HardwareReport | None) -> Strategy:
    """Without --model: the wizard's strategy without a model (stage 2, 3 for inference, on the hardware)."""
    from wizard.service.wizard_service import unplanned_strategy

    return unplanned_strategy(hardware, flags["mode"])


_STRATEGY_FIELDS = (
    ("stage", "zero_stage"),
    ("offload_optimizer", "offload_optimizer"),
    ("offload_param", "offload_param"),
    ("precision", "precision"),
    ("micro_batch", "micro_batch_size"),
    ("grad_accum", "gradient_accumulation_steps"),
    ("activation_checkpointing", "activation_checkpointing"),
    ("nodes", "nodes"),
    ("gpus_per_node", "gpus_per_node"),
)


def _with_flags(base: Strategy, flags: dict[str, Any]) -> Strategy:
    """Every strategy flag given, on top of ``base``; the host list sets the nodes; --zeropp switches ZeRO++."""
    changes: dict[str, Any] = {
        field: flags[flag] for flag, field in _STRATEGY_FIELDS if flags[flag] not in (None, "auto")
    }
    hosts = _hosts(flags)
    if hosts and flags["nodes"] is None:
        changes["nodes"] = len(hosts)
    strategy = base.with_(**changes)
    if flags.get("zeropp") is not None:
        on = bool(flags["zeropp"])
        strategy = strategy.with_(
            zero_quantized_weights=on,
            zero_quantized_gradients=on and strategy.mode == "train",
            zero_hpz_partition_size=strategy.gpus_per_node if on else 1,
        )
    return strategy


def _with_global_batch(strategy: Strategy, flags: dict[str, Any]) -> Strategy:
    """--global-batch: the micro-batch for inference (samples per forward), the accumulation for training."""

    target = flags["global_batch"]
    if target is None:
        return strategy
    if strategy.mode == "inference":
        per_forward = strategy.world_size
        if target % per_forward:
            raise DswizError(
                f"--global-batch {target} is not a multiple of the {per_forward} GPU(s)",
                f"use a multiple of {per_forward} (inference: samples per forward across all GPUs)",
            )
        return strategy.with_(micro_batch_size=target // per_forward)
    per_step = strategy.micro_batch_size * strategy.world_size
    if target % per_step:
        raise DswizError(
            f"--global-batch {target} is not a multiple of micro-batch x GPUs "
            f"= {strategy.micro_batch_size} x {strategy.world_size}",
            f"use a multiple of {per_step}, or change --micro-batch",
        )
    accumulation = target // per_step
    if flags["grad_accum"] is not None and flags["grad_accum"] != accumulation:
        raise DswizError(
            f"--global-batch {target} needs {accumulation} accumulation steps, "
            f"but --grad-accum says {flags['grad_accum']}",
            "give --global-batch or --grad-accum, not both",
        )
    return strategy.with_(gradient_accumulation_steps=accumulation)


def _check_save_16bit(strategy: Strategy, flags: dict[str, Any]) -> None:
    """--save-16bit/--no-save-16bit only mean something for stage 3 training."""

    if flags.get("save_16bit") is None or (strategy.zero_stage == 3 and strategy.mode == "train"):
        return
    if strategy.mode == "inference":
        why, fix = "inference saves no model", "drop the flag for --mode inference"
    else:
        why = f"this is stage {strategy.zero_stage}"
        fix = "drop the flag: below stage 3 every rank holds the whole 16-bit model and saves it as it is"
    raise DswizError(f"--save-16bit/--no-save-16bit only apply to stage 3 training ({why})", fix)


def _fix_for(problems: list[str]) -> str:
    text = " ".join(problems)
    if "inference" in text:
        return "for --mode inference use --stage 3 (or leave it out), --offload-param none/cpu/nvme, no optimizer offload"
    if "stage 3" in text or "only works at" in text:
        return "use --stage 3 for parameter offload, NVMe offload and ZeRO++ (or drop those flags)"
    return "change the flags named above (dswiz config --help lists them)"


def _hosts(flags: dict[str, Any]) -> tuple[str, ...]:
    """--hostfile-hosts H1,H2: an empty name (",worker1", "a,,b") is a mistake, not a name to drop."""

    text = flags["hostfile_hosts"]
    if not text:
        return ()
    from wizard.config.hostfile import checked_hostname

    hosts = tuple(h.strip() for h in text.split(","))
    if not all(hosts):
        raise DswizError(
            f"--hostfile-hosts {text!r} has an empty host name (position {hosts.index('') + 1})",
            "give one name per node, separated by commas, e.g. --hostfile-hosts worker0,worker1",
        )
    return tuple(checked_hostname(h, source="--hostfile-hosts") for h in hosts)


def write_options(
    flags: dict[str, Any], out_dir: Path, hardware: HardwareReport | None, model: ModelSpec | None
) -> WriteOptions:
    """The flags as the config writers' options (wizard.service.files.write_options, as the wizard)."""
    from wizard.service import files

    return files.write_options(
        out_dir=out_dir,
        model=model,
        hardware=hardware,
        consumer=flags["consumer"],
        nvme_path=flags["nvme_path"],
        hosts=_hosts(flags),
        master_addr=flags["master_addr"],
        master_port=flags["master_port"],
        optimizer=flags["optimizer"],
        lr=flags["lr"],
        torch_adam=flags["torch_adam"],
        local_rank_arg=not flags["no_local_rank"],  # None (not given): pass it
        steps_per_print=flags["steps_per_print"],
        accelerate_mode="plugin" if flags["accelerate_mode"] == "plugin" else "config_file",
        save_16bit_model=flags.get("save_16bit") is not False,
        expandable_segments=planned_expandable_segments(flags.get("expandable_segments")),
        **cluster_answers(flags),
    )


def _config_args(flags: dict[str, Any]) -> list[str]:
    """The flags beyond the strategy that shaped the files (those not at their default), to write them again."""
    args: list[str] = []
    if flags["consumer"] != "deepspeed":
        args += ["--for", flags["consumer"]]
    if flags["accelerate_mode"] != "config-file":
        args += ["--accelerate-mode", flags["accelerate_mode"]]
    for flag, name in (
        ("hostfile_hosts", "--hostfile-hosts"),
        ("master_addr", "--master-addr"),
        ("nvme_path", "--nvme-path"),
    ):
        if flags[flag]:
            args += [name, str(flags[flag])]
    for flag, name, default in (
        ("master_port", "--master-port", 29500),
        ("optimizer", "--optimizer", "auto"),
        ("lr", "--lr", 1e-4),
        ("steps_per_print", "--steps-per-print", 10),
    ):
        if flags[flag] != default:
            args += [name, str(flags[flag])]
    if flags["torch_adam"]:
        args.append("--torch-adam")
    if flags["no_local_rank"]:
        args.append("--no-local-rank")
    if flags.get("save_16bit") is False:
        args.append("--no-save-16bit")
    return args + cluster_config_args(flags)


def _sidecar(planned: Planned, flags: dict[str, Any], strategy: Strategy) -> tuple[str, str]:
    """(name, text) of the plan sidecar for the strategy written, with the prediction the plan made for it."""
    from wizard import planner
    from wizard.service.files import sidecar_text

    return sidecar_text(
        model_arg=planned.model_arg,
        model=planned.model,
        hardware_arg=flags["hardware"],
        hardware=planned.plan.hardware,
        request=planned.request,
        candidate=planner.candidate_for(planned.plan, strategy),
        config_args=_config_args(flags),
    )


def rendered_files(config_set: ConfigSet, extra: dict[str, str] | None = None) -> dict[str, str]:
    """name -> text: the config set's files, then ``extra`` (the plan sidecar)."""
    from wizard.config.render import render_all

    return {**render_all(config_set), **(extra or {})}


def write_config_set(files: dict[str, str], out_dir: Path, *, force: bool) -> list[tuple[Path, Path | None]]:
    """Write every file atomically. Existing different files are refused up front (nothing is written) unless
    ``force``, which keeps a backup of each."""
    from wizard.service.files import write_files

    if out_dir.exists() and not out_dir.is_dir():
        raise DswizError(f"{out_dir} is a file, not a directory", "choose another --out")
    clashes = [name for name, text in files.items() if _differs(out_dir / name, text)]
    if clashes and not force:
        raise DswizError(
            f"{out_dir} already has {', '.join(clashes)} with other content",
            f"pass --force to replace them (each old file is kept as a .bak-<time> backup, the last {KEEP_BACKUPS} "
            "kept), or choose another --out",
        )
    return [(r.path, r.backup) for r in write_files(out_dir, files, force=force)]


def _differs(path: Path, text: str) -> bool:
    if not path.exists():
        return False
    try:
        return path.read_text(encoding="utf-8") != text
    except (OSError, UnicodeDecodeError):
        return True


def _report(
    config_set: ConfigSet,
    strategy: Strategy,
    written: list[tuple[Path, Path | None]],
    out_dir: Path,
    findings: list[Finding],
) -> None:
    from wizard.commands.check import print_findings
    from wizard.findings import Severity
    from wizard.strategy import strategy_label

    s = strategy
    batch = (
        f"micro-batch {s.micro_batch_size} x accumulation {s.gradient_accumulation_steps} x {s.world_size} GPU(s) "
        f"= global batch {s.global_batch_size}"
        if s.mode == "train"
        else f"inference, micro-batch {s.micro_batch_size} per forward x {s.world_size} GPU(s)"
    )
    click.echo(f"strategy: {strategy_label(s)}, {s.precision}, {batch}; for {config_set.consumer}")
    for path, backup in written:
        click.echo(f"  wrote {path}" + (f" (previous kept as {backup.name})" if backup else ""))
    serious = [f for f in findings if f.severity is not Severity.INFO]
    if serious:
        click.echo("")
        print_findings(serious, f"check of {out_dir}")
    for note in config_set.script_notes:
        click.echo(f"note: {note}")
    # (placeholder host names are the check's hostfile-placeholders warning, above)
    click.echo("")
    if s.mode == "train":  # inference: the note above says how the script runs it
        for line in script_hint_lines(config_set, out_dir):
            click.echo(line)
        click.echo("")
    click.echo("next:")
    click.echo(f"  dswiz launch --config {out_dir} train.py      (preflight, live dashboard, clean stop)")
    click.echo(f"  bash {out_dir / 'launch.sh'} train.py         (the same launch, by hand)")
    if (out_dir / "job.sbatch").is_file():
        click.echo(f"  sbatch {out_dir / 'job.sbatch'} train.py      (the same, as a Slurm batch job)")


def script_hint_lines(config_set: ConfigSet, out_dir: Path) -> list[str]:
    """The code change the training script needs for this consumer and config (wizard.service.files)."""
    from wizard.config.render import ds_config_dict
    from wizard.service.files import code_hint_lines

    return code_hint_lines(config_set.consumer, ds_config_dict(config_set.deepspeed), out_dir)
