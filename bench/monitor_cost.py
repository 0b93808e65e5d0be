"""What the monitor costs: CPU at 1 Hz (target <= 2 % of one core), and memory that stays flat with a 1 GB log and
10^6 points of history (the log is tailed, never re-read; the history is downsampled).

    python3 bench/monitor_cost.py                 # 60 s at 1 Hz, a 1 GB log, 10^6 history points (~3-5 min here)
    python3 bench/monitor_cost.py --smoke         # 5 s, a 20 MB log, 10^4 points: checks the script (~20 s)
    python3 bench/monitor_cost.py --out DIR       # results as JSON + markdown (default bench/results/)

Each measurement runs in a fresh child process (its own RSS and CPU counters). The "job" is a separate writer
process that appends recorded DeepSpeed output (tests/fixtures/logs/cpu_zero2_ok) and csv rows in real time, so
its own CPU is not counted. On a GPU machine the Collector's NVML sampling is real (all GPUs, every second).
Results are saved after each measurement, so a cut-off run still leaves its figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, md_table, run_repo_python

FIXTURE = ROOT / "tests" / "fixtures" / "logs" / "cpu_zero2_ok" / "combined.log"
METRICS_FIXTURE = ROOT / "tests" / "fixtures" / "metrics" / "cpu_2rank" / "metrics.jsonl"
CPU_TARGET_PERCENT = 2.0

WRITER = r"""
import sys, time
log, csv, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
lines = open(sys.argv[4], encoding="utf-8").read().splitlines()
step = 0
with open(log, "a", encoding="utf-8") as out, open(csv, "a", encoding="utf-8") as c:
    c.write("step,lr\n"); c.flush()
    i = 0
    while True:
        out.write(lines[i % len(lines)] + "\n"); out.flush()
        i += 1
        if i % 10 == 0:
            step += 1
            c.write(f"{step * 8},0.001\n"); c.flush()
        time.sleep(1.0 / rate)
"""


def rss_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ------------------------------------------------------------------------------------------------ children
def child_cpu(run_dir: Path, seconds: float, writer_pid: int) -> dict[str, object]:
    import resource

    from runner.metrics.collector import Collector

    collector = Collector(run_dir, pids_provider=lambda: [writer_pid], interval=1.0)
    collector.poll_once()  # imports, NVML init, first scans: not the steady state
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    polls = []
    while time.monotonic() - t0 < seconds:
        started = time.monotonic()
        collector.poll_once()
        polls.append(time.monotonic() - started)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - t0
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    snap = collector.stop()
    polls.sort()
    return {
        "seconds": round(wall, 2),
        "polls": len(polls),
        "cpu_seconds": round(cpu, 4),
        "cpu_percent_of_one_core": round(100 * cpu / wall, 3),
        "poll_ms_median": round(1000 * polls[len(polls) // 2], 3),
        "poll_ms_max": round(1000 * polls[-1], 3),
        "gpus_seen": len(snap.gpus) if snap else None,
        "gpu_note": snap.gpu_note if snap else None,
        "last_step": snap.step if snap else None,
    }


def child_log(run_dir: Path, polls: int) -> dict[str, object]:
    from runner.metrics.collector import Collector

    base = rss_bytes()
    collector = Collector(run_dir, interval=1.0, persist=False)
    log = run_dir / "logs" / "combined.log"
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    t0 = time.monotonic()
    first = collector.poll_once()
    first_poll_s = time.monotonic() - t0
    for i in range(polls):
        with log.open("a", encoding="utf-8") as fh:  # the job keeps writing while we watch
            fh.write("\n".join(lines[(i * 40) % len(lines) :][:40]) + "\n")
        collector.poll_once()
    read = collector.log_bytes_read
    collector.stop()
    return {
        "log_bytes": log.stat().st_size,
        "bytes_read": read,
        "first_poll_s": round(first_poll_s, 4),
        "first_step_seen": first.step,
        "rss_after_imports_bytes": base,
        "peak_rss_bytes": peak_rss_bytes(),
    }


def child_history(points: int, metrics_jsonl: Path | None) -> dict[str, object]:
    from runner.metrics.history import Downsampler, load_history
    from runner.metrics.snapshot import HistoryPoint

    base = rss_bytes()
    ds = Downsampler()
    t0 = time.monotonic()
    for i in range(points):
        ds.add(
            HistoryPoint(
                time=float(i),
                step=i,
                samples_per_sec=100.0 + i % 7,
                loss=1.0 / (1 + i),
                gpu_utils=(90.0, 91.0),
            )
        )
    feed_s = time.monotonic() - t0
    out: dict[str, object] = {
        "points": points,
        "kept_points": len(ds.points()),
        "feed_s": round(feed_s, 3),
        "us_per_point": round(1e6 * feed_s / max(1, points), 3),
        "rss_after_imports_bytes": base,
        "rss_after_feed_bytes": rss_bytes(),
    }
    if metrics_jsonl is not None:
        ds2 = Downsampler()
        t1 = time.monotonic()
        last = load_history(metrics_jsonl, ds2)
        out.update(
            metrics_jsonl_bytes=metrics_jsonl.stat().st_size,
            metrics_jsonl_lines=ds2.count,
            load_s=round(time.monotonic() - t1, 3),
            loaded_kept_points=len(ds2.points()),
            last_step=last.step if last else None,
        )
    out["peak_rss_bytes"] = peak_rss_bytes()
    return out


# ------------------------------------------------------------------------------------------------ parent
def run_child(kind: str, *args: str) -> dict[str, object]:
    proc = run_repo_python([__file__, "--child", kind, *args], timeout=1800)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def make_log(path: Path, size: int) -> float:
    path.parent.mkdir(parents=True, exist_ok=True)
    block = FIXTURE.read_bytes()
    t0 = time.monotonic()
    with path.open("wb") as fh:
        written = 0
        while written < size:
            fh.write(block)
            written += len(block)
    return time.monotonic() - t0


def make_metrics(path: Path, lines: int) -> None:
    sample = json.loads(METRICS_FIXTURE.read_text().splitlines()[-5])
    with path.open("w", encoding="utf-8") as fh:
        for i in range(lines):
            sample["step"], sample["time"] = i, 1.8e9 + i
            fh.write(json.dumps(sample, sort_keys=True, separators=(",", ":")) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the 1 Hz CPU measurement")
    ap.add_argument("--log-gb", type=float, default=1.0)
    ap.add_argument("--history-points", type=int, default=1_000_000)
    ap.add_argument(
        "--history-lines", type=int, default=1_000_000, help="metrics.jsonl lines to load on attach"
    )
    ap.add_argument("--lines-per-sec", type=float, default=50.0, help="the fake job's log output rate")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        sys.path.insert(0, str(ROOT))
        if a.child == "cpu":
            result = child_cpu(Path(a.args[0]), float(a.args[1]), int(a.args[2]))
        elif a.child == "log":
            result = child_log(Path(a.args[0]), int(a.args[1]))
        else:
            result = child_history(int(a.args[0]), Path(a.args[1]) if len(a.args) > 1 else None)
        print(json.dumps(result))
        return 0
    if a.smoke:
        a.seconds, a.log_gb, a.history_points, a.history_lines = 5.0, 0.02, 10_000, 10_000
    stamp = dt.date.today().isoformat()
    name = f"monitor_cost-{'smoke-' if a.smoke else ''}{stamp}"
    a.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, object] = {
        "bench": "monitor_cost",
        "date": stamp,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "smoke": a.smoke,
        "command": " ".join(["python3", "bench/monitor_cost.py", *sys.argv[1:]]),
    }

    def save() -> None:
        (a.out / f"{name}.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        (a.out / f"{name}.md").write_text(markdown(results))

    with tempfile.TemporaryDirectory(prefix="dswiz-bench-") as tmp:
        run = Path(tmp) / "run"
        (run / "logs").mkdir(parents=True)
        (run / "csv" / "dswiz").mkdir(parents=True)
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(run / "logs" / "combined.log"), str(run / "csv" / "dswiz" / "Train_Samples_lr.csv"),
             str(a.lines_per_sec), str(FIXTURE)]
        )  # fmt: skip
        try:
            print(
                f"CPU at 1 Hz for {a.seconds:.0f} s (job writes {a.lines_per_sec:.0f} lines/s)…", flush=True
            )
            results["cpu_1hz"] = run_child("cpu", str(run), str(a.seconds), str(writer.pid))
        finally:
            writer.kill()
            writer.wait()
        save()
        print(json.dumps(results["cpu_1hz"]), flush=True)

        for label, size in (("small_log", 1024 * 1024), ("big_log", int(a.log_gb * 1024**3))):
            big = Path(tmp) / label
            gen_s = make_log(big / "logs" / "combined.log", size)
            print(f"{label}: {size / 1024**2:.0f} MiB written in {gen_s:.1f} s; attaching…", flush=True)
            results[label] = run_child("log", str(big), "10")
            save()
            print(json.dumps(results[label]), flush=True)
            (big / "logs" / "combined.log").unlink()

        metrics = Path(tmp) / "metrics.jsonl"
        make_metrics(metrics, a.history_lines)
        print(
            f"history: {a.history_points} points in memory, {a.history_lines} metrics.jsonl lines…",
            flush=True,
        )
        results["history"] = run_child("history", str(a.history_points), str(metrics))
        save()
        print(json.dumps(results["history"]), flush=True)
    cpu = results["cpu_1hz"]
    if isinstance(cpu, dict) and "cpu_percent_of_one_core" in cpu:
        verdict = "meets" if float(cpu["cpu_percent_of_one_core"]) <= CPU_TARGET_PERCENT else "MISSES"
        results["verdict"] = (
            f"CPU {cpu['cpu_percent_of_one_core']} % of one core at 1 Hz: {verdict} the {CPU_TARGET_PERCENT} % target"
        )
    save()
    print(results.get("verdict", ""))
    print(f"wrote {a.out / (name + '.json')} and .md")
    return 0


def markdown(r: dict[str, object]) -> str:
    def mib(v: object) -> str:
        return f"{int(v) / 1024**2:.1f} MiB" if isinstance(v, int) else "–"

    lines = [
        f"# monitor_cost ({r['date']}, {r['host']}, {r['cpus']} CPUs{', smoke' if r['smoke'] else ''})",
        "",
        f"`{r['command']}`",
        "",
    ]
    cpu = r.get("cpu_1hz")
    if isinstance(cpu, dict) and "cpu_percent_of_one_core" in cpu:
        lines += md_table(
            ("1 Hz collector", "value"),
            [
                ("CPU, % of one core", f"{cpu['cpu_percent_of_one_core']} (target <= {CPU_TARGET_PERCENT})"),
                ("poll time median / max", f"{cpu['poll_ms_median']} / {cpu['poll_ms_max']} ms"),
                ("polls / seconds", f"{cpu['polls']} / {cpu['seconds']}"),
                ("GPUs sampled", f"{cpu['gpus_seen']} ({cpu['gpu_note'] or 'NVML'})"),
            ],
        )
        lines.append("")
    logs = [(k, r.get(k)) for k in ("small_log", "big_log")]
    if any(isinstance(v, dict) and "log_bytes" in v for _, v in logs):
        lines += md_table(
            ("attach to a log of", "bytes read", "first poll", "peak RSS"),
            [
                (
                    mib(v["log_bytes"]),
                    mib(v["bytes_read"]),
                    f"{v['first_poll_s']} s",
                    mib(v["peak_rss_bytes"]),
                )
                for _, v in logs
                if isinstance(v, dict) and "log_bytes" in v
            ],
        )
        lines.append("")
    h = r.get("history")
    if isinstance(h, dict) and "points" in h:
        rows = [
            ("points fed / kept", f"{h['points']} / {h['kept_points']} ({h['us_per_point']} µs per point)"),
            (
                "RSS after imports / after feeding",
                f"{mib(h['rss_after_imports_bytes'])} / {mib(h['rss_after_feed_bytes'])}",
            ),
        ]
        if "load_s" in h:
            rows.append(
                (
                    "metrics.jsonl loaded on attach",
                    f"{h['metrics_jsonl_lines']} lines, {mib(h['metrics_jsonl_bytes'])}, {h['load_s']} s",
                )
            )
        rows.append(("peak RSS", mib(h["peak_rss_bytes"])))
        lines += md_table(("history", "value"), rows)
        lines.append("")
    if r.get("verdict"):
        lines.append(str(r["verdict"]))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
