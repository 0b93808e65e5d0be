"""`dswiz history`: the runs dswiz launched or watched, what the planner predicted and what was measured.

``--export FILE`` / ``--import FILE`` carry the history between machines (a team or a cluster sharing what its
runs measured); importing merges by run id and never drops a record we have.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import click

from wizard.errors import DswizError
from wizard.history.record import Measurement
from wizard.history.store import ENV_PATH, HistoryStore, default_path
from wizard.units import fmt_bytes


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON (one object with a list).")
@click.option(
    "--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Show the newest N runs."
)
@click.option(
    "--export",
    "export_to",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write every run to FILE (JSON lines) to share with another machine.",
)
@click.option(
    "--import",
    "import_from",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Merge runs from a file written by --export (by run id; nothing we have is dropped).",
)
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"The history file (default: ${ENV_PATH}, else the user data dir).",
)
@click.option("--force", is_flag=True, help="With --export: replace FILE if it exists.")
def history(
    as_json: bool,
    limit: int,
    export_to: Path | None,
    import_from: Path | None,
    db: Path | None,
    force: bool,
) -> int:
    """List the runs dswiz launched or watched, with predicted vs measured tokens/s and GPU memory."""
    path = db or default_path()
    if path is None:
        raise DswizError(f"the run history is turned off ({ENV_PATH}=off)", f"unset {ENV_PATH} to use it")
    if db is not None and not db.exists() and import_from is None:
        # (listing or exporting once created the folders and an empty database there)
        raise DswizError(
            f"{db} does not exist: no run history there",
            "pass the history file dswiz keeps (leave --db out for the default), or --import FILE to start one",
        )
    if export_to is not None and export_to.exists() and not force:
        raise DswizError(f"{export_to} already exists", "pass --force to replace it, or choose another file")
    store = HistoryStore(path)
    if import_from is not None:
        try:
            lines = import_from.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as e:
            raise DswizError(f"cannot read {import_from}: {e.strerror or e}", "check the path") from None
        res = store.import_lines(lines, name=str(import_from))
        click.echo(f"imported {import_from}: {res.summary()}")
        if res.unreadable:
            shown = ", ".join(map(str, res.unreadable[:10])) + (", ..." if len(res.unreadable) > 10 else "")
            n = len(res.unreadable)
            click.echo(
                f"warning: {n} line{'s' * (n != 1)} of {import_from} {'are' if n != 1 else 'is'} not a run record "
                f"and {'were' if n != 1 else 'was'} left out (line {shown}); export the runs again with "
                "`dswiz history --export FILE` where they were recorded",
                err=True,
            )
        return 0
    if export_to is not None:
        n = store.export(export_to)
        click.echo(f"exported {n} run{'s' * (n != 1)} to {export_to}")
        return 0
    from runner.run_history import reconcile  # runs whose dswiz was killed get their end from run.json

    reconcile(store)
    runs = store.runs(limit=limit)
    if as_json:
        click.echo(json.dumps({"history": str(path), "runs": [r.to_json() for r in runs]}, indent=2))
        return 0
    if not runs:
        click.echo(f"no runs recorded yet in {path} (dswiz launch records every run)")
        return 0
    click.echo(f"{len(runs)} newest run{'s' * (len(runs) != 1)} in {path}:")
    for r in runs:
        click.echo(_line(r))
    return 0


def _line(r: Measurement) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at))
    if r.strategy:
        what = f"{r.model.get('name') or 'model'} on {r.hardware.key}  {r.family}"
    else:  # no plan behind it: a job `dswiz monitor` watched, or one launched without a dswiz config folder
        kind = (
            "a job dswiz monitor watched"
            if r.source == "monitor"
            else f"a job without a plan (dswiz {r.source})"
        )
        what = f"{kind} on {r.hardware.key}"
    lines = [f"  {when}  {r.id}  {r.outcome:<11} {what}"]  # the whole id: `dswiz monitor ID` takes it
    if r.predicted.tokens_per_sec is None and r.predicted.peak_gpu_bytes is None:
        measured = [
            f"{label} {text}"
            for label, text in (
                ("steps", None if r.measured.steps is None else f"{r.measured.steps:,}"),
                (
                    "tokens/s",
                    None if r.measured.tokens_per_sec is None else f"{r.measured.tokens_per_sec:,.0f}",
                ),
                ("step", None if r.measured.step_time_s is None else f"{r.measured.step_time_s:.3g} s"),
                (
                    "peak GPU memory",
                    None if r.measured.peak_gpu_bytes is None else fmt_bytes(r.measured.peak_gpu_bytes),
                ),
            )
            if text is not None
        ]
        lines.append(
            "      measured: " + (", ".join(measured) or "nothing (no step seen)") + "; no prediction"
        )
    else:
        tps = _versus(r.predicted.tokens_per_sec, r.measured.tokens_per_sec, lambda v: f"{v:,.0f}")
        mem = _versus(r.predicted.peak_gpu_bytes, r.measured.peak_gpu_bytes, lambda v: fmt_bytes(int(v)))
        lines.append(f"      tokens/s {tps}   peak GPU memory {mem}")
    return "\n".join(lines)


def _versus(predicted: float | None, measured: float | None, fmt: Callable[[float], str]) -> str:
    p = fmt(predicted) if predicted is not None else "?"
    m = fmt(measured) if measured is not None else "?"
    text = f"predicted {p}, measured {m}"
    if predicted and measured:
        text += f" (prediction {(predicted - measured) / measured:+.0%} off)"
    return text
