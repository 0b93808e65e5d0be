"""MonitorApp: one screen (fits 100x32) that renders the latest Snapshot of its source, nothing else.

Collaborators come in through the constructor (``source``; ``stop_job`` when embedded in `dswiz launch`), built by
runner.monitor.factory for the CLI, the tests and the screenshot script. `q` leaves the monitor; the job keeps
running unless the user, asked because ``stop_job`` was given, chooses to stop it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Footer

from runner.metrics.snapshot import Snapshot
from runner.monitor.sources import SnapshotSource
from runner.monitor.widgets.alerts import AlertsPanel
from runner.monitor.widgets.base import SnapshotPanel
from runner.monitor.widgets.charts import LossPanel, LrPanel, StepPanel, ThroughputPanel, titled
from runner.monitor.widgets.gpus import GpuPanel
from runner.monitor.widgets.host import HostPanel
from runner.monitor.widgets.logtail import LogTailPanel
from runner.monitor.widgets.quit_dialog import QuitDialog
from runner.monitor.widgets.status import StatusLine

UI_REFRESH_S = 0.5


class MonitorApp(App[str]):
    """Returns "left" (job left running), "stopped" (the user had it stopped) from ``run()``."""

    CSS_PATH = "app.tcss"
    TITLE = "dswiz monitor"
    # Ctrl-C is a key while the dashboard owns the terminal, not SIGINT: it does what Ctrl-C does to a launch
    # without the dashboard (stop the job cleanly), or, attached to a job dswiz did not start, leaves. Ctrl-Q asks as
    # q does (Textual's own Ctrl-Q would leave a launched job running without a word).
    BINDINGS: ClassVar[list[BindingType]] = [
        ("q", "quit_monitor", "Quit the monitor"),
        Binding("ctrl+c", "interrupt", "Stop", show=False, priority=True),
        Binding("ctrl+q", "quit_monitor", "Quit the monitor", show=False, priority=True),
    ]

    def __init__(self, source: SnapshotSource, *, stop_job: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.source = source
        self.stop_job = stop_job
        self.snapshot: Snapshot | None = None

    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")
        with Horizontal(id="row-top"):
            yield GpuPanel(id="gpus")
            yield ThroughputPanel(id="throughput")
        with Horizontal(id="row-mid"):
            yield LossPanel(id="loss")
            yield LrPanel(id="lr")
            yield StepPanel(id="steps")
        with Horizontal(id="row-low"):
            yield HostPanel(id="host")
            yield AlertsPanel(id="alerts")
        yield LogTailPanel(id="log")
        yield Footer()

    def on_mount(self) -> None:
        titles = {
            "gpus": "GPUs · memory (│ plan peak) · util",
            "throughput": "Throughput",
            "loss": "Loss",
            "lr": "Learning rate",
            "steps": "Progress",
            "host": "Host",
            "alerts": "Alerts",
            "log": "Last log lines",
        }
        for wid, title in titles.items():
            self.query_one(f"#{wid}").border_title = title
        self.source.start()
        self.refresh_from_source()
        self.set_interval(min(UI_REFRESH_S, self.source.interval), self.refresh_from_source)

    def refresh_from_source(self) -> None:
        snap = self.source.latest()
        if snap is None or snap is self.snapshot:
            return
        self.snapshot = snap
        for panel in self.query(SnapshotPanel):
            panel.snapshot = snap
        loss = f"Loss {snap.loss:.4g}" if snap.loss is not None else "Loss"
        self.query_one("#loss").border_title = titled(loss, snap, "loss")
        self.query_one("#throughput").border_title = titled("Throughput", snap, "samples_per_sec")
        self.query_one("#lr").border_title = (
            f"Learning rate {snap.lr:.3g}" if snap.lr is not None else "Learning rate"
        )

    def action_quit_monitor(self) -> None:
        if self.stop_job is None:
            self.exit("left")
            return

        def decided(choice: str | None) -> None:
            if choice == "stop" and self.stop_job is not None:
                self.stop_job()
                self.exit("stopped")
            elif choice == "leave":
                self.exit("left")

        self.push_screen(QuitDialog(), decided)

    def action_interrupt(self) -> None:
        if self.stop_job is None:
            self.exit("left")
            return
        self.stop_job()
        self.exit("stopped")

    def on_unmount(self) -> None:
        self.source.stop()
