"""How big a run's metrics files get, and what attaching to them costs, over a long job: the real MetricsLog
(runner.metrics.history, rotating through runner.metrics.rotation) fed one snapshot per simulated second, the
snapshots being a recorded 2-rank CPU run's (tests/fixtures/metrics/cpu_2rank) with time and step advanced.

    python3 bench/metrics_disk.py                 # 2 simulated days at 1 Hz (~1-3 min here)
    python3 bench/metrics_disk.py --days 0.1      # a quick check of the script
    python3 bench/metrics_disk.py --out DIR       # results as JSON + markdown (default bench/results/)

Reported: bytes written in all (what one unrotated metrics.jsonl would hold), the most the run directory's
metrics files held at any time, the archive's stride at the end, and load_history's time and points (what
`dswiz monitor` does when it attaches) at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, md_heading, md_table

sys.path.insert(0, str(ROOT))  # the script runs from bench/: the repository first

from runner.metrics import rotation
from runner.metrics.history import Downsampler, MetricsLog, load_history
from runner.metrics.snapshot import Snapshot

FIXTURE = ROOT / "tests" / "fixtures" / "metrics" / "cpu_2rank" / "metrics.jsonl"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    recorded = [Snapshot.from_json(json.loads(line)) for line in FIXTURE.read_text().splitlines() if line]
    seconds = int(args.days * 86400)
    with tempfile.TemporaryDirectory(prefix="dswiz-metrics-disk-") as tmp:
        run = Path(tmp)
        live = run / "metrics.jsonl"
        log = MetricsLog(live)
        written = most = 0
        for i in range(seconds):
            snap = dataclasses.replace(recorded[i % len(recorded)], time=1.8e9 + i, step=i)
            log.append(snap)
            written += len(json.dumps(snap.to_json(), sort_keys=True, separators=(",", ":"))) + 1
            if i % 600 == 0:
                most = max(most, sum(p.stat().st_size for p in run.glob("metrics*")))
        log.close()
        started = time.perf_counter()
        history = Downsampler()
        last = load_history(live, history)
        attach_s = time.perf_counter() - started
        strides = [p.stride for p in rotation.parts(live)]
    figures = {
        "simulated_days": args.days,
        "snapshots": seconds,
        "bytes_unrotated": written,
        "most_bytes_on_disk": most,
        "bound_bytes": rotation.ARCHIVE_BYTES + 2 * rotation.ROTATE_BYTES,
        "archive_stride": max(strides, default=1),
        "load_history_s": round(attach_s, 3),
        "history_points": len(history.points()),
        "last_step": last.step if last else None,
        "first_point_step": history.points()[0].step if history.points() else None,
    }
    for key, value in figures.items():
        print(f"{key}: {value}")
    stamp = dt.date.today().isoformat()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"metrics_disk-{stamp}.json").write_text(json.dumps(figures, indent=2) + "\n")
    md = md_heading(
        "metrics.jsonl on disk over a long run", f"`python3 bench/metrics_disk.py --days {args.days}`"
    )
    md += md_table(("figure", "value"), figures.items())
    (args.out / f"metrics_disk-{stamp}.md").write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
