"""The faults table of docs/reliability.md: each fault tried once on `dswiz launch --no-tui` with real DeepSpeed on
CPU (2 ranks, runner/examples/train_tiny.py, through tests/integration/faulty_train.py where a fault is needed).

    python3 bench/faults.py                  # every fault (~15 min on a busy 2-core machine)
    python3 bench/faults.py --only sigkill_dswiz,concurrent
    python3 bench/faults.py --out DIR        # results as JSON + markdown (default bench/results/)

Per fault: the job's processes left 10 s after the fault (found by the session ids and the job token in run.json,
as dswiz finds them), dswiz's exit code, the verdict line, and the seconds from the fault until no process of the
job was left. The fault's moment: the signal sent; for a rank that raises, its process seen gone; for a hung rank,
its "hangs at step" line; for a deleted run directory, the rmtree.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # _common, also when this file is loaded by a test

from _common import repo_env  # noqa: E402

from runner import reaper, rundir  # noqa: E402

TRAIN = ROOT / "runner" / "examples" / "train_tiny.py"
FAULTY = ROOT / "tests" / "integration" / "faulty_train.py"
CONFIG = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {"stage": 2},
}
LONG = ["--steps", "100000", "--sleep-per-step", "0.05"]


@dataclass
class Result:
    fault: str
    left_after_10s: int | None
    exit_code: int | None
    verdict: str
    seconds_to_stop: float | None
    note: str = ""


class Launch:
    def __init__(self, work: Path, name: str, *args: str) -> None:
        self.run_dir = work / name
        self.out_path = work / f"{name}.out"
        env = repo_env(XDG_STATE_HOME=str(work / "state"))
        argv = [sys.executable, "-m", "wizard", "launch", "--no-tui", "--status-every", "5", "--nproc", "2"]
        argv += ["--config", "ds_config.json", "--run-dir", str(self.run_dir), *args]
        with self.out_path.open("w") as out:
            self.proc = subprocess.Popen(argv, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.record: rundir.RunRecord | None = None

    def wait_for_training(self, timeout: float = 300) -> rundir.RunRecord:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            logs = sorted((self.run_dir / rundir.RANK_LOGS_DIR).glob("*_rank0.log"))
            if logs and "{'loss'" in logs[0].read_text(errors="replace"):
                record = rundir.read_run_record(self.run_dir)
                if len(record.rank_pids) == 2:
                    self.record = record
                    return record
            time.sleep(0.25)
        raise RuntimeError(f"{self.run_dir}: no training after {timeout} s")

    def left(self) -> list[int]:
        record = self.record or rundir.read_run_record(self.run_dir)
        self.record = record
        return reaper.job_processes({p.pgid for p in record.launchers}, record.job_token)

    def until_gone(self, t_fault: float, limit: float = 120) -> tuple[int, float | None]:
        """(processes left 10 s after the fault, seconds until none was left)."""
        gone_at, at_10 = None, None
        while time.monotonic() - t_fault < limit:
            n = len(self.left())
            if n == 0 and gone_at is None:
                gone_at = time.monotonic() - t_fault
            if time.monotonic() - t_fault >= 10 and at_10 is None:
                at_10 = n
            if gone_at is not None and at_10 is not None:
                break
            time.sleep(0.1)
        return (at_10 if at_10 is not None else len(self.left())), gone_at

    def finish(self, timeout: float = 300) -> tuple[int | None, str]:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = None
        lines = [x for x in self.out_path.read_text(errors="replace").splitlines() if "[dswiz] verdict:" in x]
        verdict = lines[-1].split("verdict: ", 1)[1] if lines else ""
        if not verdict:
            try:
                record = rundir.read_run_record(self.run_dir)
                verdict = record.verdict.summary if record.verdict else record.status
            except Exception as e:  # the bench reports what it finds
                verdict = f"(no verdict: {e})"
        return code, verdict


def wait_text(path_glob: Callable[[], list[Path]], text: str, timeout: float = 300) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(text in p.read_text(errors="replace") for p in path_glob()):
            return time.monotonic()
        time.sleep(0.1)
    raise RuntimeError(f"{text!r} never appeared")


def signal_dswiz(work: Path, name: str, sig: signal.Signals) -> Result:
    launch = Launch(work, name, str(TRAIN), *LONG)
    launch.wait_for_training()
    launch.proc.send_signal(sig)
    t = time.monotonic()
    left, took = launch.until_gone(t)
    code, verdict = launch.finish()
    if sig is signal.SIGKILL:
        verdict = rundir.read_run_record(launch.run_dir).verdict.summary  # type: ignore[union-attr]
    return Result(f"{sig.name} to dswiz", left, code, verdict, took)


def sigkill_rank(work: Path) -> Result:
    launch = Launch(work, "sigkill_rank", str(TRAIN), *LONG)
    record = launch.wait_for_training()
    os.kill(record.rank_pids[1], signal.SIGKILL)
    left, took = launch.until_gone(time.monotonic())
    code, verdict = launch.finish()
    return Result("SIGKILL to rank 1", left, code, verdict, took)


def raising(work: Path) -> Result:
    launch = Launch(work, "raising", str(TRAIN), *LONG, "--fail-at-step", "40", "--fail-rank", "1")
    record = launch.wait_for_training()
    pid = record.rank_pids[1]
    while _alive(pid):
        time.sleep(0.05)
    left, took = launch.until_gone(time.monotonic())
    code, verdict = launch.finish()
    return Result("rank 1 raises at step 40", left, code, verdict, took)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def hung(work: Path, timeout: bool) -> Result:
    name = "hung_timeout" if timeout else "hung"
    extra = ["--stall-timeout", "5"] if timeout else []
    args = [*extra, str(FAULTY), "--hang-at-step", "20", "--steps", "100000", "--log-every", "1"]
    launch = Launch(work, name, "--grace", "2", *args)
    launch.wait_for_training()
    t = wait_text(
        lambda: sorted((launch.run_dir / rundir.RANK_LOGS_DIR).glob("*_rank1.log")), "hangs at step"
    )
    if timeout:
        left, took = launch.until_gone(t)
        code, verdict = launch.finish()
        return Result("rank 1 hangs, --stall-timeout 5", left, code, verdict, took)
    said = wait_text(lambda: [launch.out_path], "[dswiz] no step for 60 s", timeout=120) - t
    left_running = len(launch.left())
    launch.proc.send_signal(signal.SIGINT)
    t_int = time.monotonic()
    left, took = launch.until_gone(t_int)
    code, verdict = launch.finish()
    note = (
        f"kept running (no timeout asked): {left_running} processes; 'no step for 60 s (last step 19)' said "
        f"{said:.0f} s after the hang; then SIGINT: the left/time columns are after the SIGINT"
    )
    return Result("rank 1 hangs, no --stall-timeout", left, code, verdict, took, note)


def digits(work: Path) -> Result:
    launch = Launch(work, "digits", str(FAULTY), "--print-digits", "--steps", "10")
    code, verdict = launch.finish()
    return Result("rank 0 prints a 5,000-digit rank number", len(launch.left()), code, verdict, None)


def rundir_deleted(work: Path) -> Result:
    launch = Launch(work, "deleted", str(TRAIN), "--steps", "300", "--sleep-per-step", "0.05")
    launch.wait_for_training()
    shutil.rmtree(launch.run_dir)
    t = time.monotonic()
    code, verdict = launch.finish()
    took = time.monotonic() - t
    left = len(launch.left())
    note = "time = from the rmtree to dswiz's exit"
    return Result("run directory deleted mid-run", left, code, verdict, took, note)


def concurrent(work: Path) -> Result:
    first = Launch(work, "first", str(TRAIN), "--steps", "6")
    time.sleep(1.0)
    second = Launch(work, "second", str(TRAIN), "--steps", "6")
    a, b = first.finish(), second.finish()
    ports = [rundir.read_run_record(x.run_dir).command for x in (first, second)]
    used = [c[c.index("--master_port") + 1] for c in ports]
    left = len(first.left()) + len(second.left())
    verdict = f"{a[1]} / {b[1]}"
    return Result("two launches 1 s apart", left, a[0] if a[0] != 0 else b[0], verdict, None, f"ports {used}")


FAULTS: dict[str, Callable[[Path], Result]] = {
    "sigint": lambda w: signal_dswiz(w, "sigint", signal.SIGINT),
    "sigterm": lambda w: signal_dswiz(w, "sigterm", signal.SIGTERM),
    "sigkill_dswiz": lambda w: signal_dswiz(w, "sigkill_dswiz", signal.SIGKILL),
    "sigkill_rank": sigkill_rank,
    "raising": raising,
    "hung_timeout": lambda w: hung(w, True),
    "hung": lambda w: hung(w, False),
    "digits": digits,
    "rundir_deleted": rundir_deleted,
    "concurrent": concurrent,
}


def markdown(results: list[Result]) -> str:
    rows = [
        "| fault | processes left after 10 s | dswiz exit code | verdict | time to stop |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        took = f"{r.seconds_to_stop:.1f} s" if r.seconds_to_stop is not None else "—"
        note = f" ({r.note})" if r.note else ""
        rows.append(f"| {r.fault} | {r.left_after_10s} | {r.exit_code} | {r.verdict}{note} | {took} |")
    return "\n".join(rows) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(FAULTS), help="comma-separated faults: " + ", ".join(FAULTS))
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = p.parse_args()
    results = []
    stamp = dt.date.today().isoformat()
    out = Path(args.out)
    for name in args.only.split(","):
        with tempfile.TemporaryDirectory(prefix=f"dswiz-fault-{name}-") as tmp:
            work = Path(tmp)
            (work / "ds_config.json").write_text(json.dumps(CONFIG))
            t0 = time.monotonic()
            try:
                result = FAULTS[name](work)
            except Exception as e:  # a fault that could not be tried is a row too
                result = Result(name, None, None, f"(not measured: {type(e).__name__}: {e})", None)
            print(f"{name}: {asdict(result)} ({time.monotonic() - t0:.0f} s)", flush=True)
            results.append(result)
            out.mkdir(parents=True, exist_ok=True)
            (out / f"faults-{stamp}.json").write_text(
                json.dumps([asdict(r) for r in results], indent=2) + "\n"
            )
            (out / f"faults-{stamp}.md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
