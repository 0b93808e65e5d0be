"""`dswiz probe SCRIPT [ARGS]`: measure the planner's top strategies on this machine and write the fastest.

DeepSpeed's autotuner tries 9-34 configs for 11-40 minutes and never offload; the planner already knows which few
are worth trying, so the probe runs only its top K distinct strategies for a few timed steps each. Every run is
recorded in the run history (`dswiz history`), so the next `dswiz plan` on this hardware is calibrated by it.
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import click

from wizard.cli_options import (
    FiniteFloat,
    given_options,
    no_local_rank_option,
    planning_options,
    planning_request,
    python_option,
)


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@planning_options(model_required=False)
@click.option(
    "--for",
    "consumer",
    type=click.Choice(("deepspeed", "accelerate", "trainer")),
    help="Who reads the config.",
)
@click.option(
    "--config",
    "config_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Probe around the plan of a folder written by `dswiz config` (its dswiz-plan.json) instead of --model.",
)
@click.option(
    "--top", type=click.IntRange(1, 10), default=3, show_default=True, help="Strategies to measure."
)
@click.option(
    "--steps", type=click.IntRange(1, 1000), default=5, show_default=True, help="Timed steps per strategy."
)
@click.option(
    "--warmup-steps", type=click.IntRange(0, 1000), default=2, show_default=True, help="Steps not timed."
)
@click.option(
    "--timeout",
    type=FiniteFloat(min=10),
    default=900.0,
    show_default=True,
    help="Seconds one strategy may take to reach its timed steps.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("dswiz-config"),
    show_default=True,
    help="Where the fastest strategy's config set is written.",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the candidates' configs and runs go (default: a new temporary folder, kept).",
)
@python_option("The training environment's python, for dswiz launch.")
@click.option("--nproc", type=click.IntRange(min=1), help="Processes per node, for dswiz launch.")
@click.option("--config-arg", metavar="NAME", help="How the script takes the config (as dswiz launch).")
@no_local_rank_option()
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def probe(ctx: click.Context, **opts: Any) -> int:
    """Run the planner's top strategies for a few steps each here; keep and write the fastest measured."""
    from runner.preflight import check_script
    from wizard.errors import DswizError

    # before any candidate: each would fail on it (launch's own check)
    for problem in check_script(opts["script"]):
        raise DswizError(problem.what, problem.fix)
    _refuse_no_local_rank_for_accelerate(opts["no_local_rank"], opts["consumer"] == "accelerate")
    parent = ctx.parent.params if ctx.parent is not None else {}
    opts["no_history"] = opts["no_history"] or bool(parent.get("no_history"))  # `dswiz --no-history probe`
    if opts["hardware"] is None:
        opts["hardware"] = parent.get("hardware")
    made_here = opts["work_dir"] is None
    work = opts["work_dir"] or Path(tempfile.mkdtemp(prefix="dswiz-probe-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return _probe(ctx, opts, work)
    except DswizError:
        if made_here and not any(
            work.glob("run-*")
        ):  # nothing ran: no logs to keep (empty folders were left)
            shutil.rmtree(work, ignore_errors=True)
        raise


def _refuse_no_local_rank_for_accelerate(no_local_rank: bool | None, for_accelerate: bool) -> None:
    from wizard.errors import DswizError

    if no_local_rank and for_accelerate:
        raise DswizError(
            "--no-local-rank would change nothing: a probe for accelerate launches through accelerate, which never "
            "passes --local_rank (the ranks find theirs in LOCAL_RANK)",
            "drop --no-local-rank",
        )


def _probe(ctx: click.Context, opts: dict[str, Any], work: Path) -> int:
    """The probe itself, in ``work``."""
    from wizard.config.sidecar import read_sidecar
    from wizard.errors import DswizError
    from wizard.service.probe import ProbeSetup, write_base_config
    from wizard.service.probe import probe as run_probe

    say = (lambda text: click.echo(text, err=True)) if opts["as_json"] else click.echo
    if opts["config_dir"] is not None:
        sidecar = read_sidecar(opts["config_dir"])
        if sidecar is None:
            raise DswizError(
                f"{opts['config_dir']} has no dswiz-plan.json to probe around",
                "write the folder with `dswiz config --model ...`, or pass --model instead of --config",
            )
        # a folder written for accelerate launches through it: said before any candidate, as for --for accelerate
        args = sidecar.config_args
        for_accelerate = any(a == "--for" and b == "accelerate" for a, b in itertools.pairwise(args))
        _refuse_no_local_rank_for_accelerate(opts["no_local_rank"], for_accelerate)
    elif opts["model_text"]:
        sidecar = write_base_config(_planning_flags(ctx, opts), work / "plan")
    else:
        raise DswizError("dswiz probe needs a model to plan for", "pass --model NAME (or --config DIR)")
    launch_args: list[str] = []
    for flag, key in (("--python", "python"), ("--nproc", "nproc"), ("--config-arg", "config_arg")):
        if opts[key] is not None:
            launch_args += [flag, str(opts[key])]
    if opts["no_local_rank"] is not None:
        launch_args.append("--no-local-rank" if opts["no_local_rank"] else "--local-rank")
    setup = ProbeSetup(
        script=opts["script"],
        script_args=tuple(opts["script_args"]),
        work_dir=work,
        out_dir=opts["out"],
        top=opts["top"],
        steps=opts["steps"],
        warmup_steps=opts["warmup_steps"],
        timeout_s=opts["timeout"],
        launch_args=tuple(launch_args),
        request=planning_request(opts) if opts["config_dir"] is None else None,
        use_history=not opts["no_history"],
    )
    if opts["hardware"] is not None:  # the candidates are planned for it, but run and measured here
        click.echo(
            f"warning: --hardware {opts['hardware']} plans the candidates for that machine, but the probe runs and "
            "measures them on this one (and records them as this machine's runs); probe on the machine you will "
            "train on, without --hardware",
            err=True,
        )
    say(f"probing the planner's top {setup.top} strategies ({setup.steps} timed steps each; runs in {work})")
    results, chosen = run_probe(setup, sidecar, say=say)
    if opts["as_json"]:
        click.echo(json.dumps({"candidates": [r.to_json() for r in results], "chosen": chosen}, indent=2))
    if chosen is None:
        if not opts["as_json"]:
            click.echo("no strategy ran to its timed steps: nothing written (see the runs above)")
        return 1
    if not opts["as_json"]:
        best = results[chosen]
        click.echo(
            f"fastest measured: {best.candidate.label} at {best.measured.tokens_per_sec:,.0f} tokens/s; "
            f"written to {setup.out_dir}"
        )
    return 0


def _planning_flags(ctx: click.Context, opts: dict[str, Any]) -> list[str]:
    """The planning flags given (not at their defaults), as `dswiz config` takes them, plus --for."""
    flags: list[str] = []
    for option, value in given_options(ctx, opts):
        if option.name in _PROBE_ONLY:
            continue
        name = max(option.opts, key=len)  # the long spelling
        if isinstance(value, bool):  # a switch, or the off side of an on/off pair (--no-expandable-segments)
            flags.append(name if value else max(option.secondary_opts, key=len))
        else:
            flags += [name, str(value)]
    return flags


# Flags of the probe itself (the rest are the planning flags `dswiz config` takes too).
_PROBE_ONLY = frozenset(
    {
        "config_dir",
        "top",
        "steps",
        "warmup_steps",
        "timeout",
        "out",
        "work_dir",
        "python",
        "nproc",
        "config_arg",
        "as_json",
    }
)
