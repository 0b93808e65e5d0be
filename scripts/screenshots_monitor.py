"""Render the monitor dashboard from recorded metrics to SVG under screenshots/ (the real app, 100x32).

    python scripts/screenshots_monitor.py                       # every recording in tests/fixtures/metrics/
    python scripts/screenshots_monitor.py --run /tmp/rec-gpu    # a run directory (metrics.jsonl + logs/combined.log)
    python scripts/screenshots_monitor.py --run /tmp/rec-gpu --upto 40 --name monitor-h200

Each recording is drawn mid-run (``--upto``, default: two thirds of its samples) so the charts have history and
the job is still running, and again at its end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SIZE = (100, 32)


def count_lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for line in fh if line.strip())


async def render(metrics: Path, log_lines: list[str], upto: int | None, out: Path) -> None:
    from runner.monitor.factory import build_replay_app

    app = build_replay_app(metrics, log_lines=log_lines, upto=upto)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        out.write_text(app.export_screenshot(title="dswiz monitor"), encoding="utf-8")


def read_lines(path: Path) -> list[str]:
    if not path.exists():
        return []
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--run", type=Path, action="append", help="a run directory with metrics.jsonl (repeatable)"
    )
    p.add_argument("--upto", type=int, default=None, help="samples to show for the mid-run picture")
    p.add_argument("--name", default=None, help="file name stem (default: monitor-<recording>)")
    p.add_argument("--out", type=Path, default=ROOT / "screenshots")
    args = p.parse_args()
    os.environ.setdefault("TZ", "UTC")
    time.tzset()
    recordings: list[tuple[str, Path, list[str]]] = []
    if args.run:
        for run in args.run:
            log = read_lines(run / "logs" / "combined.log")
            recordings.append((args.name or f"monitor-{run.name}", run / "metrics.jsonl", log))
    else:
        for d in sorted((ROOT / "tests" / "fixtures" / "metrics").iterdir()):
            if (d / "metrics.jsonl").exists():
                recordings.append((f"monitor-{d.name}", d / "metrics.jsonl", read_lines(d / "combined.log")))
    args.out.mkdir(parents=True, exist_ok=True)
    for name, metrics, log in recordings:
        if not metrics.exists():
            print(f"skip {name}: no {metrics}", file=sys.stderr)
            continue
        total = count_lines(metrics)
        upto = args.upto or max(1, total * 2 // 3)
        for suffix, limit in (("", upto), ("-end", None)):
            out = args.out / f"{name}{suffix}.svg"
            asyncio.run(render(metrics, log, limit, out))
            print(out.relative_to(ROOT) if out.is_relative_to(ROOT) else out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
