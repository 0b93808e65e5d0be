"""How `dswiz launch` shows its job: the launch-owned metrics collector (metrics.jsonl, the dashboard's snapshots)
and, with a terminal for it, the monitor's dashboard (runner/monitor/) while the job is supervised in a thread.

The dashboard's stop choice calls ``Job.request_stop``; when the job ends by itself the dashboard closes a moment
later and the verdict is printed. Leaving the dashboard ("leave it running") falls back to the streamed log.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.job.sink import RunOutcome
from runner.job.stopping import StopReason
from runner.job.supervisor import Job
from runner.job.terminal import TerminalSink


def start_collector(run_dir: Path, sink: TerminalSink, *, interval: float = 1.0) -> Any:
    """The Collector for this run (writes metrics.jsonl), started; None when it cannot run (the job still can)."""
    try:
        from runner.metrics.collector import Collector

        return Collector(run_dir, interval=interval).start()
    except Exception as e:  # monitoring must never stop a launch
        sink.on_notice(f"metrics are not recorded ({type(e).__name__}: {e}); the logs still are")
        return None


def stop_collector(collector: Any) -> None:
    if collector is not None:
        with contextlib.suppress(Exception):  # a failing last poll must not change the job's exit code
            collector.stop()


def run_with_dashboard(
    job: Job,
    collector: Any,
    sink: TerminalSink,
    *,
    run_app: Callable[[Any], object] | None = None,
    linger_s: float = 2.0,
) -> RunOutcome:
    """Supervise ``job`` in a thread while the dashboard runs here (the main thread keeps the signal handlers).

    ``run_app`` runs the Textual app (default ``app.run()``; tests pass a headless runner).
    """
    from runner.monitor.factory import build_app_for_collector

    app = build_app_for_collector(collector, stop_job=lambda: job.request_stop(StopReason.DASHBOARD))
    result: list[RunOutcome] = []
    errors: list[BaseException] = []
    app_done = threading.Event()

    def supervise() -> None:
        try:
            result.append(job.run())
        except BaseException as e:  # handed to the main thread
            errors.append(e)
        finally:
            deadline = time.monotonic() + linger_s
            while not app_done.is_set():  # let the last picture show, then close the dashboard
                if time.monotonic() >= deadline:
                    try:
                        app.call_from_thread(app.exit, "ended")
                        break
                    except RuntimeError:  # not running yet (or any more)
                        pass
                time.sleep(0.1)

    sink.mute()  # before the job's lines start flowing: the dashboard owns the terminal
    thread = threading.Thread(target=supervise, name="dswiz-job", daemon=True)
    thread.start()
    try:
        (run_app or (lambda a: a.run()))(app)
    finally:
        app_done.set()
        sink.unmute()
    while thread.is_alive():
        thread.join(0.2)  # short joins: signals to dswiz are still handled here
    if errors:
        raise errors[0]
    return result[0]
