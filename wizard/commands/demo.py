"""`dswiz demo`: the whole product in one minute, on any machine.

Detect this machine, plan a small model, write the configs to a fresh folder, and launch a short real DeepSpeed
training of ``runner/examples/train_tiny.py`` under the live dashboard (or the streamed log without a terminal),
ending with the verdict. With no GPU, DeepSpeed runs on the CPU with 2 gloo ranks.

Each step runs the same code path as the user-facing command it names (``dswiz detect``, ``dswiz plan``,
``dswiz config --yes``, ``dswiz launch``), so the demo shows exactly what a user would type next.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from wizard.errors import DswizError

# The model train_tiny.py builds by default, as the planner reads it (numbers form of --model).
DEMO_VOCAB, DEMO_HIDDEN, DEMO_LAYERS, DEMO_HEADS, DEMO_SEQ = 512, 128, 2, 4, 64
DEMO_MODEL = f"layers={DEMO_LAYERS},hidden={DEMO_HIDDEN},heads={DEMO_HEADS},vocab={DEMO_VOCAB}"
CPU_RANKS = 2
SAMPLES_PER_GPU = 32  # global batch per GPU the demo asks the planner for
EXAMPLE_PLAN = (
    "gpt2-xl",
    "1xA100-80GB",
)  # what the planner says for a real model, shown when there is no GPU


def example_script() -> Path:
    return Path(__file__).resolve().parents[2] / "runner" / "examples" / "train_tiny.py"


@click.command()
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the configs (default: ./dswiz-demo-<time>, always a new one).",
)
@click.option(
    "--steps", type=click.IntRange(1, 100_000), default=40, show_default=True, help="Training steps."
)
@click.option("--no-tui", is_flag=True, help="Stream the log with a status line instead of the dashboard.")
@click.option(
    "--run-dir", type=click.Path(file_okay=False), help="Run directory (default: under the state dir)."
)
@click.pass_context
def demo(ctx: click.Context, out: Path | None, steps: int, no_tui: bool, run_dir: str | None) -> int:
    """Detect, plan, write configs and train a tiny model for real, with the live dashboard.

    Works without a GPU: DeepSpeed then trains on the CPU with 2 ranks (gloo).
    """
    # Imported when the demo runs: wizard.cli is the group that lists this command, and detection is not needed
    # to build `dswiz --help`.
    from wizard.cli import cli
    from wizard.hardware import get_hardware

    script = example_script()
    if not script.is_file():
        raise DswizError(f"the example training script is missing: {script}", "reinstall dswiz")
    out = out or Path.cwd() / f"dswiz-demo-{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and any(out.iterdir()):
        raise DswizError(
            f"{out} already exists and is not empty", "pass another --out (the demo never overwrites)"
        )

    def run(args: list[str]) -> int:
        click.secho(f"\n$ dswiz {' '.join(args)}", bold=True)
        rv = cli.main(args=args, prog_name="dswiz", standalone_mode=False)
        return rv if isinstance(rv, int) else 0

    step("1/4", "what this machine has")
    run(["detect"])
    hardware = get_hardware(None)
    gpus = len(hardware.gpus)

    step("2/4", "what fits and what is fastest")
    if gpus:
        nproc = gpus
        config_args = [
            "--model",
            DEMO_MODEL,
            "--seq-len",
            str(DEMO_SEQ),
            "--global-batch",
            str(SAMPLES_PER_GPU * gpus),
        ]
        run(["plan", *config_args, "--top", "3"])
    else:
        nproc = CPU_RANKS
        model, spec = EXAMPLE_PLAN
        click.echo(
            "No NVIDIA GPU here, so the planner has no GPU to plan for. For example, for a real model on a\n"
            "described card it says:"
        )
        run(["plan", "--model", model, "--hardware", spec, "--top", "3"])
        click.echo(
            f"\nThe demo job itself runs on this CPU: DeepSpeed's CPU accelerator with the gloo backend, {CPU_RANKS} ranks,\n"
            "ZeRO stage 2, fp32 (what a CPU runs reliably)."
        )
        config_args = [
            "--stage",
            "2",
            "--precision",
            "fp32",
            "--micro-batch",
            "4",
            "--gpus-per-node",
            str(CPU_RANKS),
        ]

    step("3/4", "write the configs")
    run(["config", "--yes", *config_args, "--torch-adam", "--steps-per-print", "10", "--out", str(out)])

    step("4/4", "train for real under dswiz launch")
    launch = ["launch", "--config", str(out), "--nproc", str(nproc)]
    if no_tui:
        launch.append("--no-tui")
    if run_dir:
        launch += ["--run-dir", run_dir]
    launch += [str(script), "--steps", str(steps), "--seq-len", str(DEMO_SEQ), "--log-every", "5"]
    code = run(launch)
    click.echo(
        f"\nNext: `dswiz` opens the wizard; `dswiz plan --model llama3-8b --hardware 8xA100-80GB` plans a real model;\n"
        f"the configs of this demo are in {out}; `dswiz monitor` shows the last run again."
    )
    return code


def step(number: str, title: str) -> None:
    click.secho(f"\n== {number} {title}", fg="cyan", bold=True)
