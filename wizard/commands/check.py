"""`dswiz check FILE`: lint a DeepSpeed JSON, an accelerate YAML, a hostfile, a .deepspeed_env or a config
directory; every problem with why it matters and the exact fix. Exit 1 when there is an error.

dswiz's own rules run first (pure, no torch); then, unless --no-consumer-check, DeepSpeed's and accelerate's own
validation in a subprocess of --python (default: this interpreter), reported as findings too.

The linter, the hardware and the consumer checks are imported inside the command: the CLI imports every
command's module to build ``--help``, which must not pay for them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from wizard.cli_options import (
    card_memory_options,
    finetune_options,
    no_history_option,
    python_option,
    seq_len_option,
    together,
)
from wizard.config.launchers import MULTINODE_LAUNCHERS

if TYPE_CHECKING:
    from wizard.config.schema import Consumer
    from wizard.findings import Finding

CONSUMER_CHOICES = ("deepspeed", "accelerate", "trainer")


@click.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--for",
    "consumer",
    type=click.Choice(CONSUMER_CHOICES),
    help='Who reads the config: "auto" values and some rules depend on it. Default: guessed from the file '
    '(an accelerate YAML: accelerate; "auto" values only the Trainer fills: trainer; no "auto": deepspeed).',
)
@click.option(
    "--world-size", type=click.IntRange(min=1), help="Data-parallel ranks (total GPUs) to check against."
)
@click.option(
    "--hardware", metavar="SPEC|FILE", help="Check against described hardware (8xA100-80GB, a profile)."
)
@click.option(
    "--launcher-mode",
    "--multinode-launcher",
    "launcher",
    type=click.Choice(MULTINODE_LAUNCHERS),
    help="The multi-node backend the hostfile is for (its limits differ), named as `dswiz launch --launcher-mode` "
    "and `dswiz config` name it.",
)
@python_option("Interpreter of the training environment for the consumers' own checks (default: this one).")
@click.option("--no-consumer-check", is_flag=True, help="Skip DeepSpeed's/accelerate's own validation.")
@click.option(
    "--model",
    "-m",
    "model_text",
    metavar="NAME|HUB-ID|PATH|NUMBERS",
    help="Also predict this config for that model (as `dswiz plan --model`): fits, GPU/host memory, tokens/s, "
    "what to change. On --hardware, else this machine. The flags below shape that prediction.",
)
@seq_len_option(
    "Tokens per sample for --model's prediction. Default: the folder's dswiz-plan.json (for the same model), "
    "else the model's context, at most 2048."
)
@together(*finetune_options(from_plan=True), *card_memory_options(from_plan=True))
@no_history_option()
@click.option("--json", "as_json", is_flag=True, help="Print findings as JSON.")
@click.pass_context
def check(
    ctx: click.Context,
    file: Path,
    consumer: Consumer | None,
    world_size: int | None,
    hardware: str | None,
    launcher: str | None,
    python: str | None,
    no_consumer_check: bool,
    model_text: str | None,
    seq_len: int | None,
    finetune: str | None,
    lora_rank: int | None,
    lora_alpha: int | None,
    lora_targets: str | None,
    margin: float,
    gpu_memory: int | None,
    no_history: bool,
    as_json: bool,
) -> int:
    """Lint FILE (DeepSpeed JSON, accelerate YAML, hostfile, .deepspeed_env, or a config directory)."""
    from wizard.config.check import lint_path
    from wizard.errors import DswizError
    from wizard.findings import has_errors, sort_findings

    if not file.exists():
        raise DswizError(f"{file} does not exist", "check the path (dswiz check ds_config.json)")
    if model_text is None:  # the prediction's flags without the prediction: say so rather than ignore them
        given = [
            name
            for name, on in (
                ("--seq-len", seq_len is not None),
                ("--finetune", finetune is not None),
                ("--lora-rank", lora_rank is not None),
                ("--lora-alpha", lora_alpha is not None),
                ("--lora-targets", lora_targets is not None),
                ("--gpu-memory", gpu_memory is not None),
                ("--margin", _given(ctx, "margin")),
            )
            if on
        ]
        if given:
            raise DswizError(
                f"{', '.join(given)} shape{'s' if len(given) == 1 else ''} the prediction, and no --model asks for one",
                f"add --model NAME (dswiz check {file} --model llama-7b {' '.join(given)} ...), or drop "
                + ("it" if len(given) == 1 else "them"),
            )
    from wizard.fsio import interrupted_write, settle_file_set

    folder = file if file.is_dir() else file.parent
    if interrupted_write(folder):  # a killed `dswiz config` write: finish it first, and say so
        settle_file_set(folder)
        click.echo(
            f"note: {folder} held an interrupted config write; it is finished (or undone) now", err=True
        )
    if hardware is None and ctx.parent is not None:
        hardware = ctx.parent.params.get("hardware")
    report = None
    if hardware is not None:
        from wizard.hardware import get_hardware

        report = get_hardware(hardware)
    if consumer == "deepspeed" and file.suffix.lower() in (".yaml", ".yml"):
        # (DeepSpeed's own validation of a YAML's mapping once stopped on a raw TypeError)
        raise DswizError(
            f"{file} is an accelerate YAML: accelerate reads it, not plain DeepSpeed",
            "drop --for deepspeed (or pass --for accelerate, or --for trainer for a Trainer script); to check the "
            "DeepSpeed JSON it names as plain DeepSpeed reads it, pass that file",
        )
    guess = None
    if consumer is None:
        from wizard.config.check import guess_consumer

        guess = guess_consumer(file)
        consumer = guess.consumer
    findings = lint_path(file, consumer=consumer, world_size=world_size, hardware=report, launcher=launcher)
    # a file dswiz cannot read as text is nothing to hand DeepSpeed or accelerate either (their error would be a
    # raw UnicodeDecodeError next to dswiz's own finding)
    # (nor is JSON that is not an object: DeepSpeed's check would stop on a raw AttributeError)
    if not no_consumer_check and not any(f.code in ("unreadable", "not-an-object") for f in findings):
        from wizard.consumer.check import merge_with_own

        found = _consumer_findings(file, consumer=consumer, world_size=world_size, python=python)
        findings = merge_with_own(findings, found)
    prediction = None
    if model_text is not None:
        from wizard.hardware import get_hardware
        from wizard.service.choices import gpu_memory_for
        from wizard.service.prediction import (
            FINETUNE_FLAGS,
            PredictionAsk,
            config_prediction,
            planned_hardware,
        )

        use_history = not (no_history or (ctx.parent is not None and ctx.parent.params.get("no_history")))
        target = report or get_hardware(None)
        planned = planned_hardware(file) if report is None and not target.gpus else None
        if planned is not None:  # no GPU here and no --hardware: the GPUs the folder was planned for
            from wizard.config.sidecar import hardware_summary
            from wizard.findings import Finding, Severity

            target = planned
            findings.append(
                Finding(
                    Severity.INFO,
                    "plan-hardware",
                    f"predicted for {hardware_summary(planned)}, the hardware dswiz-plan.json was planned for",
                    "this machine has no GPU, and --hardware did not name one",
                    "pass --hardware to predict for other GPUs",
                )
            )
        ask = PredictionAsk(
            seq_len=seq_len,
            finetune_flags={name: ctx.params[name] for name in FINETUNE_FLAGS},
            safety_margin=margin / 100 if _given(ctx, "margin") else None,  # None: as the folder planned
            gpu_memory_bytes=gpu_memory_for(gpu_memory, target),
            use_history=use_history,
        )
        prediction = config_prediction(file, model_text, target, ask)
        findings += [prediction.finding, *prediction.notes]
    findings = sort_findings(findings)
    reader = _reader_line(consumer, guess.reason if guess is not None else None)
    if as_json:
        import json

        counts = {s: sum(1 for f in findings if f.severity.value == s) for s in ("error", "warning", "info")}
        payload = {
            "file": str(file),
            "consumer": consumer,
            "consumer_guessed": guess.reason if guess is not None else None,
            "ok": not has_errors(findings),
            "counts": counts,
            "findings": [f.to_dict() for f in findings],
        }
        if prediction is not None:
            payload["prediction"] = prediction.candidate
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(reader)
        print_findings(findings, str(file))
    return 1 if has_errors(findings) else 0


def _given(ctx: click.Context, *names: str) -> bool:
    """Whether any of these options was given on the command line (not left at its default)."""
    return any(ctx.get_parameter_source(n) not in (None, click.core.ParameterSource.DEFAULT) for n in names)


def _reader_line(consumer: Consumer | None, guessed: str | None) -> str:
    """Whom the findings are for: the --for given, or what was guessed from the file and why."""
    if guessed is None:
        return f"checked for: {consumer}"
    if consumer is None:
        return f"checked for: no particular consumer ({guessed}); pass --for deepspeed|accelerate|trainer"
    return f"checked for: {consumer}, guessed because {guessed} (pass --for to choose)"


def _consumer_findings(
    file: Path, *, consumer: Consumer | None, world_size: int | None, python: str | None
) -> list[Finding]:
    from dataclasses import replace

    from wizard.config.check import detect_kind
    from wizard.config.schema import ACCELERATE_YAML_NAME, DS_CONFIG_NAME
    from wizard.consumer.check import consumer_findings
    from wizard.errors import DswizError, read_user_text

    targets: list[tuple[Path, str]] = []
    if file.is_dir():
        if (file / ACCELERATE_YAML_NAME).is_file() and consumer == "accelerate":
            targets.append((file / ACCELERATE_YAML_NAME, "accelerate"))
        elif (file / DS_CONFIG_NAME).is_file():
            targets.append((file / DS_CONFIG_NAME, "deepspeed"))
    elif file.is_file():  # a pipe or device is read once, by the check itself
        try:
            kind = detect_kind(file, read_user_text(file, "a config", ""))
        except DswizError:  # the check's own reading of the file says why
            return []
        if kind in ("deepspeed", "accelerate"):
            targets.append((file, kind))
    out: list[Finding] = []
    for path, kind in targets:
        found = consumer_findings(path, kind=kind, python=python, consumer=consumer, world_size=world_size)
        if python is None:
            # Not installed next to dswiz is normal (a laptop, a login node): say so quietly.
            from wizard.findings import Severity

            found = [
                replace(f, severity=Severity.INFO) if f.code == "consumer-not-installed" else f for f in found
            ]
        out += found
    return out


_TITLES = {"error": "errors", "warning": "warnings", "info": "notes"}
_COLORS = {"error": "red", "warning": "yellow", "info": "cyan"}


def print_findings(findings: list[Finding], name: str) -> None:
    counts = {s: sum(1 for f in findings if f.severity.value == s) for s in _TITLES}
    if not findings:
        click.echo(f"{name}: no problems found")
        return
    summary = ", ".join(f"{n} {_TITLES[s] if n != 1 else _TITLES[s][:-1]}" for s, n in counts.items() if n)
    click.echo(f"{name}: {summary}")
    for severity, title in _TITLES.items():
        group = [f for f in findings if f.severity.value == severity]
        if not group:
            continue
        click.echo("")
        click.secho(f"{title.upper()}", fg=_COLORS[severity], bold=True)
        for f in group:
            where = f" ({f.location})" if f.location else ""
            click.secho(f"  [{f.code}]{where}", fg=_COLORS[severity])
            click.echo(f"    {f.what}")
            click.echo(f"    why: {f.why}")
            click.echo(f"    fix: {f.fix}")
