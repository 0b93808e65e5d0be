"""`dswiz consolidate CHECKPOINT_DIR OUT`: full fp32 weights from ZeRO shards, through DeepSpeed's own
zero_to_fp32, run in the training environment's python; checked first (a complete checkpoint, enough RAM),
shown as it goes (phases, per-shard progress, elapsed time), written atomically.

What the command uses is imported inside it, so building ``dswiz --help`` stays fast."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from wizard.cli_options import python_option

if TYPE_CHECKING:
    from runner.consolidate_run import WorkerResult
    from wizard.checkpoints import ZeroCheckpoint


@click.command()
@click.argument("checkpoint_dir", type=click.Path(path_type=Path))
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--tag", help="Which checkpoint (tag folder) to convert. Default: the one named in `latest`.")
@click.option(
    "--force", is_flag=True, help="Replace an existing OUT (the old one is kept as OUT.bak-<time>)."
)
@python_option(
    "The training environment's python (with torch and DeepSpeed). Default: this one if it has them, "
    "else the one the `deepspeed` launcher uses."
)
@click.option(
    "--safe-serialization/--no-safe-serialization",
    default=False,
    show_default=True,
    help="Write model.safetensors instead of pytorch_model.bin (not for models with tied weights).",
)
@click.option(
    "--max-shard-size",
    default="5GB",
    show_default=True,
    help="Split the output into files of at most this size, e.g. 5GB or 2GiB (needs huggingface_hub).",
)
@click.option(
    "--exclude-frozen-parameters", is_flag=True, help="Leave frozen (requires_grad=False) weights out."
)
@click.option(
    "--skip-memory-check", is_flag=True, help="Run even if free RAM is below about twice the checkpoint size."
)
def consolidate(
    checkpoint_dir: Path,
    out: Path,
    tag: str | None,
    force: bool,
    python: str | None,
    safe_serialization: bool,
    max_shard_size: str,
    exclude_frozen_parameters: bool,
    skip_memory_check: bool,
) -> int:
    """Turn a ZeRO checkpoint into full fp32 weights (a folder OUT with pytorch_model.bin or model.safetensors).

    \b
    CHECKPOINT_DIR is the folder given to save_checkpoint() / save_state() (it holds `latest`), the Trainer's
    checkpoint-<step> folder, or one tag folder inside them.
    """
    from rich.console import Console
    from rich.markup import escape

    from runner.consolidate_run import (
        ConsolidateOptions,
        check_output_path,
        commit_output,
        error_for,
        find_training_python,
        make_temp_output,
        run_worker,
    )
    from wizard.checkpoints import check_memory, inspect_checkpoint
    from wizard.errors import DswizError
    from wizard.hardware.host import filesystem_size, memory
    from wizard.units import fmt_bytes, parse_size

    try:
        shard_bytes = parse_size(max_shard_size)
    except ValueError as e:
        raise DswizError(f"--max-shard-size: {e}", "write it like 5GB, 2GiB or 500MB") from e

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    ckpt = inspect_checkpoint(checkpoint_dir, tag)
    check_output_path(out, ckpt, force)
    console.print(
        f"checkpoint {ckpt.tag_dir}: {ckpt.stage_text}, {ckpt.world_size} rank(s), "
        f"{len(ckpt.files)} files, {fmt_bytes(ckpt.size_bytes)}",
        markup=False,
    )
    if not skip_memory_check:
        warning = check_memory(ckpt, memory()[1])
        if warning:
            console.print(f"[yellow]warning:[/] {escape(warning)}")
    training_python = find_training_python(python)
    options = ConsolidateOptions(
        safe_serialization=safe_serialization,
        max_shard_size=shard_bytes,
        exclude_frozen_parameters=exclude_frozen_parameters,
    )
    tmp = make_temp_output(out)
    disk = filesystem_size(str(tmp))
    if disk is not None and disk[1] < ckpt.weights_estimate_bytes:
        console.print(
            f"[yellow]warning:[/] {fmt_bytes(disk[1])} free next to {escape(str(out))}; the weights need about "
            f"{fmt_bytes(ckpt.weights_estimate_bytes)} (fp32, if the optimizer was Adam)"
        )
    try:
        display = ProgressDisplay(console)
        with display:
            result = run_worker(training_python, ckpt, tmp, options, display.on_event)
        if result.returncode != 0 or result.done is None:
            _print_tail(console, result)
            raise error_for(result, training_python, ckpt)
        try:
            backup = commit_output(tmp, out)
        except OSError as e:
            raise DswizError(
                f"cannot move the result into {out}: {e.strerror}", "check the permissions of its folder"
            ) from e
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    _print_summary(out, result.done, backup, display.elapsed(), ckpt)
    return 0


class ProgressDisplay:
    """Phases with elapsed time, and counts where the phase has them (shards read, tensors gathered, files
    written). On a terminal a live rich Progress; otherwise one line when a phase starts and one when it ends
    (logs, CI)."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.start = time.monotonic()
        self._progress: Any = None
        self._task: Any = None
        self._current: str | None = None
        self._phase_start = self.start
        self._count: tuple[int, int | None] | None = None
        self._failed = False
        if console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            )

    def __enter__(self) -> ProgressDisplay:
        if self._progress is not None:
            self._progress.start()
        self._phase("starting python (importing torch and DeepSpeed)", total=None)
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:  # interrupted or failed: the phase did not finish
            self._failed = True
        self._finish_current()
        if self._progress is not None:
            self._progress.stop()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def _stamp(self) -> str:
        return f"[{self.elapsed():6.1f}s]"

    def _finish_current(self) -> None:
        if self._current is None:
            return
        if self._progress is not None:
            if not self._failed:
                total = self._progress.tasks[self._task].total or 1
                self._progress.update(self._task, total=total, completed=total)
            self._progress.stop_task(self._task)
        else:
            count = f"{self._count[0]}/{self._count[1]}, " if self._count and self._count[1] else ""
            took = time.monotonic() - self._phase_start
            outcome = "failed" if self._failed else "done"
            self.console.print(
                f"{self._stamp()} {self._current}: {outcome} ({count}{took:.1f} s)", markup=False
            )
        self._current = None

    def _phase(self, name: str, total: int | None) -> None:
        self._finish_current()
        self._current, self._phase_start, self._count = name, time.monotonic(), None
        if self._progress is not None:
            self._task = self._progress.add_task(name, total=total)
        else:
            self.console.print(f"{self._stamp()} {name} ...", markup=False)

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "versions":
            self._note(
                f"torch {event.get('torch')}, deepspeed {event.get('deepspeed')} ({event.get('python')})"
            )
        elif kind == "phase":
            self._phase(str(event.get("name") or "working"), total=None)
        elif kind == "log":
            self._note(str(event.get("message", "")))
        elif kind == "progress":
            desc = str(event.get("desc") or "working")
            raw_total, raw_done = event.get("total"), event.get("done")
            total = raw_total if isinstance(raw_total, int) else None
            done = raw_done if isinstance(raw_done, int) else 0
            if desc != self._current:
                self._phase(desc, total)
            self._count = (done, total)
            if self._progress is not None:
                self._progress.update(self._task, completed=done, total=total)
        elif kind == "done":
            self._phase("finishing", total=None)
        elif kind == "error":
            self._failed = True

    def _note(self, text: str) -> None:
        self.console.print(f"{self._stamp()}   {text}", style="dim", markup=False)


def _print_tail(console: Any, result: WorkerResult) -> None:
    if result.stderr_tail:
        console.print("[dim]last lines of the worker's output:[/]")
        for line in result.stderr_tail:
            console.print("  " + line, markup=False, style="dim")


def _print_summary(
    out: Path, done: dict[str, Any] | None, backup: Path | None, elapsed: float, ckpt: ZeroCheckpoint
) -> None:
    from wizard.units import fmt_bytes

    files = (done or {}).get("files") or []
    total = sum(int(f.get("bytes", 0)) for f in files)
    click.echo(f"wrote full fp32 weights of {ckpt.tag_dir} to {out} ({fmt_bytes(total)}) in {elapsed:.1f} s:")
    for f in files:
        click.echo(f"  {out / str(f.get('name'))}  {fmt_bytes(int(f.get('bytes', 0)))}")
    if backup is not None:
        click.echo(f"the previous {out} is kept as {backup}")
    names = {str(f.get("name")) for f in files}
    if "model.safetensors" in names:
        load = f"safetensors.torch.load_file({str(out / 'model.safetensors')!r})"
    elif "pytorch_model.bin" in names:
        load = f"torch.load({str(out / 'pytorch_model.bin')!r})"
    else:
        load = None  # sharded: an .index.json and several files
    if load is None:
        click.echo(f"load: accelerate.utils.load_checkpoint_in_model(model, {str(out)!r}, strict=True)")
    else:
        click.echo(f"load: model.load_state_dict({load})")
