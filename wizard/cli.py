"""``dswiz`` entry point.

Bare ``dswiz`` opens the full-screen wizard; subcommands sit beside it. Each subcommand lives in its own module and
is imported only when used (``--help`` stays fast and a laptop without torch never imports it). Every user-facing
problem is a ``DswizError``: printed as "error: ... / fix: ...", exit code non-zero, never a traceback.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from wizard import __version__
from wizard.cli_options import card_memory_options, no_history_option, together
from wizard.errors import DswizError

# name -> "module:attribute" of a click.Command; kept in the order `dswiz --help` lists them.
COMMANDS: dict[str, str] = {
    "detect": "wizard.commands.detect:detect",
    "plan": "wizard.commands.plan:plan",
    "config": "wizard.commands.config:config",
    "check": "wizard.commands.check:check",
    "launch": "runner.cli_launch:launch",
    "monitor": "runner.cli_monitor:monitor",
    "consolidate": "wizard.commands.consolidate:consolidate",
    "probe": "wizard.commands.probe:probe",
    "history": "wizard.commands.history:history",
    "demo": "wizard.commands.demo:demo",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self._lazy) + [c for c in sorted(self.commands) if c not in self._lazy]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            module_name, attr = self._lazy[cmd_name].split(":")
            command = getattr(importlib.import_module(module_name), attr)
            if not isinstance(command, click.Command):  # pragma: no cover - programming error
                raise TypeError(f"{self._lazy[cmd_name]} is not a click command")
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help without importing every command module's heavy parts (modules import lazily inside).
        super().format_commands(ctx, formatter)


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
)
@click.version_option(__version__, "-V", "--version", prog_name="dswiz")
@click.option(
    "--plain", is_flag=True, help="Ask the wizard's questions as line prompts instead of full screen."
)
@click.option(
    "--hardware",
    metavar="SPEC|FILE",
    help="Plan for described hardware instead of this machine: 8xA100-80GB, 2x8xH100, or a YAML profile.",
)
@click.option(
    "--model",
    "-m",
    "model_text",
    metavar="NAME|PATH|NUMBERS",
    help="Plan for this model (preset, config.json, params=7e9): the wizard opens on its Strategy step.",
)
@click.option(
    "--from",
    "from_file",
    type=click.Path(dir_okay=False),
    help="Start from an existing DeepSpeed JSON or accelerate YAML.",
)
@no_history_option()
@together(*card_memory_options())
@click.pass_context
def cli(
    ctx: click.Context,
    plain: bool,
    hardware: str | None,
    model_text: str | None,
    from_file: str | None,
    no_history: bool,
    margin: float,
    gpu_memory: int | None,
) -> None:
    """dswiz: DeepSpeed ZeRO made easy to get right.

    \b
    Run without a command to open the full-screen wizard:
      Hardware -> Model -> Strategy -> Precision & batch -> Multi-node -> Review & write.
    --hardware (and --model) answer their steps: it opens on the first one left to answer.

    \b
    Typical session:
      dswiz detect                          what this machine has
      dswiz plan --model llama-7b           what fits and what is fastest, and why
      dswiz config --yes --model llama-7b --out run1/
      dswiz launch --config run1/ train.py  start it with a live dashboard
      dswiz monitor                         attach to the latest run
    """
    margin_given = ctx.get_parameter_source("margin") is not click.core.ParameterSource.DEFAULT
    if ctx.invoked_subcommand is not None:
        _refuse_wizard_flags(
            ctx, ctx.invoked_subcommand, model=model_text, gpu_memory=gpu_memory, margin=margin_given
        )
        return
    from wizard.commands.wizard import run_wizard

    run_wizard(
        plain=plain,
        hardware=hardware,
        from_file=from_file,
        model_text=model_text or "",
        use_history=not no_history,
        gpu_memory_bytes=gpu_memory,
        safety_margin=margin / 100 if margin_given else None,
    )


def _refuse_wizard_flags(
    ctx: click.Context, command: str, *, model: str | None, gpu_memory: int | None, margin: bool
) -> None:
    """--model, --gpu-memory and --margin before a command are the wizard's (--hardware, --no-history and --from
    before a command are read by the commands that take them): refused, not dropped, saying where they go."""
    given = [
        flag
        for flag, on in (("--model", model), ("--gpu-memory", gpu_memory is not None), ("--margin", margin))
        if on
    ]
    if not given:
        return
    sub = cli.get_command(ctx, command)
    takes = {opt for p in (sub.params if sub is not None else ()) for opt in getattr(p, "opts", ())}
    these = f"{' and '.join(given)} before `{command}` {'are' if len(given) > 1 else 'is'} the wizard's"
    if all(flag in takes for flag in given):
        raise click.UsageError(
            f"{these}: give {'them' if len(given) > 1 else 'it'} after the command, e.g. dswiz {command} {given[0]} ..."
        )
    missing = [flag for flag in given if flag not in takes]
    raise click.UsageError(
        f"{these}, and `dswiz {command}` takes no {' or '.join(missing)}: drop {'them' if len(missing) > 1 else 'it'}"
    )


# The commands that take --json (`dswiz launch` passes its script's arguments on, --json among them).
JSON_COMMANDS = frozenset({"plan", "check", "detect", "probe", "history", "monitor"})


def _json_error(argv: list[str] | None, problem: str, fix: str | None, exit_code: int) -> None:
    """Under --json, the error as JSON on stdout too, so that `dswiz plan --json | jq` reads an object, not
    nothing: {"error": ..., "fix": ..., "exit_code": ...} (the commands that take --json: plan, check, detect,
    probe, history, monitor). A script's own --json after `--` is not dswiz's."""
    import json

    args = list(sys.argv[1:] if argv is None else argv)
    args = args[: args.index("--")] if "--" in args else args
    command = next((a for a in args if a in cli.list_commands(click.Context(cli))), None)
    if command in JSON_COMMANDS and "--json" in args[args.index(command) + 1 :]:
        click.echo(json.dumps({"error": problem, "fix": fix, "exit_code": exit_code}, indent=2))


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: turns DswizError into a clear message and a non-zero exit."""
    try:
        rv = cli.main(args=argv, prog_name="dswiz", standalone_mode=False)
    except DswizError as e:
        click.echo(f"error: {e.problem}", err=True)
        if e.fix:
            click.echo(f"  fix: {e.fix}", err=True)
        _json_error(argv, e.problem, e.fix, e.exit_code)
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        fix = f"see {e.ctx.command_path} --help" if isinstance(e, click.UsageError) and e.ctx else None
        _json_error(argv, e.format_message(), fix, e.exit_code)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    # Commands return their exit code (e.g. `dswiz check` returns 1 when it found an error).
    sys.exit(rv if isinstance(rv, int) else 0)
