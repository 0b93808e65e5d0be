"""The one place MonitorApps are built: the CLI (live), `dswiz launch` (live, with stop_job), the tests and the
screenshot script (replay of a recorded metrics.jsonl)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from runner.metrics.collector import Collector
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
) -> MonitorApp:
    """A dashboard on a live job (the collector polls in its thread from mount to unmount)."""
    return create_monitor_app(
        CollectorSource(Collector(target=target, interval=interval, gpu_sampler=gpu_sampler)),
        stop_job=stop_job,
    )


def build_app_for_collector(
    collector: Collector, *, stop_job: Callable[[], None] | None = None
) -> MonitorApp:
    """For `dswiz launch`, which already runs a Collector for its job: the app shows it (and stops it on exit)."""
    return create_monitor_app(CollectorSource(collector), stop_job=stop_job)


def build_replay_app(
    metrics_jsonl: Path, *, log_tail: Sequence[str] = (), upto: int | None = None
) -> MonitorApp:
    """A dashboard showing a recorded metrics.jsonl as it ended (or after its first ``upto`` snapshots)."""
    return create_monitor_app(ReplaySource(metrics_jsonl, log_tail=log_tail, upto=upto))
