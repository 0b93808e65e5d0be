"""The one place MonitorApps are built: the CLI (live), `dswiz launch` (live, with stop_job), the tests and the
screenshot script (replay of a recorded metrics.jsonl)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from runner.metrics.collector import Collector
from runner.metrics.snapshot import Snapshot
from runner.metrics.target import JobTarget
from runner.monitor.app import MonitorApp
from runner.monitor.sources import CollectorSource, ReplaySource, SnapshotSource


def create_monitor_app(source: SnapshotSource, *, stop_job: Callable[[], None] | None = None) -> MonitorApp:
    return MonitorApp(source=source, stop_job=stop_job)


def build_live_app(
    target: JobTarget,
    *,
    interval: float = 1.0,
    stop_job: Callable[[], None] | None = None,
    gpu_sampler: object = None,
    observer: Callable[[Snapshot], None] | None = None,
) -> MonitorApp:
    """A dashboard on a live job (the collector polls in its thread from mount to unmount); ``observer`` sees
    every snapshot."""
    collector = Collector(target=target, interval=interval, gpu_sampler=gpu_sampler, observer=observer)
    return create_monitor_app(CollectorSource(collector), stop_job=stop_job)


def build_app_for_collector(
    collector: Collector, *, stop_job: Callable[[], None] | None = None
) -> MonitorApp:
    """For `dswiz launch`: show the Collector it already runs for its job. The launcher owns the collector (starts
    it before and stops it after the dashboard); ``stop_job`` is called when the user chooses to stop the job."""
    return create_monitor_app(CollectorSource(collector, owned=False), stop_job=stop_job)


def build_replay_app(
    metrics_jsonl: Path, *, log_lines: Sequence[str] = (), upto: int | None = None
) -> MonitorApp:
    """A dashboard showing a recorded metrics.jsonl as it ended (or after its first ``upto`` snapshots), with
    ``log_lines`` (the job's log) cut to where the shown snapshot was."""
    return create_monitor_app(ReplaySource(metrics_jsonl, log_lines=log_lines, upto=upto))
