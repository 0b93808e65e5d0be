"""runner/examples/train_tiny.py with faults for the supervisor's tests (it takes all of train_tiny's options):

--print-digits              rank 0 first prints "[Rank 999…9] hello" (5,000 digits): a line parsers choke on
--hang-at-step N            rank --hang-rank (default 1) sleeps for an hour at step N: the others wait for it
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

TRAIN_TINY = Path(__file__).resolve().parents[2] / "runner" / "examples" / "train_tiny.py"


def main() -> None:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--print-digits", action="store_true")
    p.add_argument("--hang-at-step", type=int, default=None)
    p.add_argument("--hang-rank", type=int, default=1)
    faults, rest = p.parse_known_args()
    spec = importlib.util.spec_from_file_location("train_tiny", TRAIN_TINY)
    assert spec is not None and spec.loader is not None
    tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    rank = int(os.environ.get("RANK", "0"))
    if faults.print_digits and rank == 0:
        print("[Rank " + "9" * 5000 + "] hello", flush=True)
    if faults.hang_at_step is not None:
        original = tiny.maybe_fail

        def hang_or_fail(args: argparse.Namespace, step: int) -> None:
            if step == faults.hang_at_step and rank == faults.hang_rank:
                print(f"rank {rank} hangs at step {step}", flush=True)
                time.sleep(3600)
            original(args, step)

        tiny.maybe_fail = hang_or_fail
    tiny.main(rest)


if __name__ == "__main__":
    sys.exit(main())
