"""How fast DeepSpeed's async_io op moves data between pinned host memory and a directory's drive: what NVMe offload's
swaps run at there (the planner prices them with calibration.NVME_READ/WRITE_BYTES_PER_SECOND, or a described
drive's nvme_read / nvme_write).

    python3 bench/nvme_rate.py --dir /local_nvme/dswiz --gib 4 --out bench/results

The op needs libaio (bench/libaio_bundle.sh, then `source bench/libaio_env.sh` where the machine lacks it). Each
setting writes then reads a file of --gib GiB from one page-locked buffer, --repeats times, with O_DIRECT (DeepSpeed's
swappers open their files that way, so the page cache does not serve the reads): DeepSpeed's default aio settings (the
"aio" section a config without one gets: block 1 MiB, queue depth 8, one thread; runtime/swap_tensor/constants.py,
DeepSpeed 0.19.8) and deeper queues / more threads. Prints one line a setting and writes nvme_rate-<date>[-label].json
and .md under --out.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import md_heading, md_table, write_result  # noqa: E402

from wizard.config.nvme import disk_for  # noqa: E402
from wizard.hardware.host import disks  # noqa: E402
from wizard.hardware.report import DiskInfo  # noqa: E402

GiB = 1 << 30
# (name, block size, queue depth, intra-op threads): DeepSpeed's defaults first
SETTINGS = (
    ("deepspeed default", 1 << 20, 8, 1),
    ("queue 32", 1 << 20, 32, 1),
    ("queue 32, 4 threads", 1 << 20, 32, 4),
    ("8 MiB blocks, queue 32, 4 threads", 8 << 20, 32, 4),
)


def drive_of(path: Path) -> DiskInfo | None:
    """The mounted filesystem that holds ``path``, as `dswiz detect` reads the mounts (wizard.hardware.host.disks,
    wizard.config.nvme.disk_for)."""
    return disk_for(str(path.resolve()), disks())


def filesystem_of(path: Path) -> dict[str, str]:
    """The mount that holds ``path``, for the result's header."""
    d = drive_of(path)
    return (
        {"mount": d.mountpoint, "type": d.fstype, "device": d.device}
        if d
        else dict.fromkeys(("mount", "type", "device"), "?")
    )


def o_direct_ok(directory: Path) -> str | None:
    """None where a file in ``directory`` opens with O_DIRECT; else why not."""
    probe = directory / ".dswiz-odirect-probe"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
        os.close(fd)
        return None
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    finally:
        probe.unlink(missing_ok=True)


def measure(
    aio: Any, buf: Any, path: Path, setting: tuple[str, int, int, int], repeats: int
) -> dict[str, Any]:
    name, block, depth, threads = setting
    handle = aio.aio_handle(block, depth, False, True, threads)
    nbytes = buf.numel() * buf.element_size()
    writes, reads = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        handle.sync_pwrite(buf, str(path))
        writes.append(nbytes / (time.perf_counter() - t))
        t = time.perf_counter()
        handle.sync_pread(buf, str(path))
        reads.append(nbytes / (time.perf_counter() - t))
    return {
        "setting": name,
        "block_bytes": block,
        "queue_depth": depth,
        "threads": threads,
        "write_bytes_per_s": writes,
        "read_bytes_per_s": reads,
        "write_median": statistics.median(writes),
        "read_median": statistics.median(reads),
    }


def default_rates(doc: dict[str, Any]) -> tuple[float, float]:
    """(read, write) bytes/s of a result at DeepSpeed's default aio settings (what a config without an "aio"
    section runs at)."""
    row = next(r for r in doc["rows"] if r["setting"] == SETTINGS[0][0])
    return row["read_median"], row["write_median"]


def as_swap_drive(doc: dict[str, Any], path: str | Path) -> DiskInfo:
    """The drive a result measured as the planner's NVMe swap drive at ``path`` (HostInfo.swap_drive): its room
    from the filesystem, its rates at DeepSpeed's default aio settings."""
    read, write = default_rates(doc)
    Path(path).mkdir(parents=True, exist_ok=True)  # the swaps' folder may not be there yet
    drive = drive_of(Path(path))
    if drive is None:  # mounts unreadable: the folder's own filesystem, by its room
        usage = shutil.disk_usage(path)
        drive = DiskInfo(str(path), "?", "?", usage.total, usage.free, nvme=True)
    return replace(drive, nvme=True, read_bytes_per_s=read, write_bytes_per_s=write)


def markdown(doc: dict[str, Any]) -> list[str]:
    fs = doc["filesystem"]
    out = [
        *md_heading(f"DeepSpeed async_io rate, {doc['dir']} ({fs['type']} on {fs['device']}), {doc['date']}"),
        f"{doc['gib']} GiB a transfer, {doc['repeats']} each way per setting, O_DIRECT, one page-locked buffer; "
        f"host {doc['host']}, {doc['cpus']} CPUs{', beside an ' + doc['gpu'] if doc.get('gpu') else ''}. `{doc['command']}`",
        "",
        *md_table(
            ("setting", "block", "queue", "threads", "write GB/s (median)", "read GB/s (median)"),
            [
                (
                    r["setting"],
                    f"{r['block_bytes'] >> 20} MiB",
                    r["queue_depth"],
                    r["threads"],
                    f"{r['write_median'] / 1e9:.2f}",
                    f"{r['read_median'] / 1e9:.2f}",
                )
                for r in doc["rows"]
            ],
        ),
    ]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--dir", type=Path, required=True, help="a directory on the drive to measure (a file is written)"
    )
    ap.add_argument("--gib", type=float, default=4.0, help="size of each transfer in GiB (default 4)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--label", default="")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    why = o_direct_ok(args.dir)
    if why:
        print(
            f"error: {args.dir} does not take O_DIRECT files ({why}): DeepSpeed's swaps need a real drive's "
            "filesystem (not tmpfs); pass --dir on one",
            file=sys.stderr,
        )
        return 2
    import torch
    from deepspeed.ops.op_builder import AsyncIOBuilder

    builder = AsyncIOBuilder()
    if not builder.is_compatible(verbose=True):
        print(
            "error: DeepSpeed's async_io op cannot build here (libaio missing): run bench/libaio_bundle.sh and "
            "`source bench/libaio_env.sh`",
            file=sys.stderr,
        )
        return 2
    aio = builder.load(verbose=False)
    n = int(args.gib * GiB) // 2
    handle = aio.aio_handle()
    buf = handle.new_cpu_locked_tensor(n, torch.empty(0, dtype=torch.bfloat16))
    buf.fill_(1.0)
    path = args.dir / "dswiz-nvme-rate.bin"
    rows = []
    try:
        for setting in SETTINGS:
            r = measure(aio, buf, path, setting, args.repeats)
            rows.append(r)
            print(
                f"{r['setting']}: write {r['write_median'] / 1e9:.2f} GB/s, read {r['read_median'] / 1e9:.2f} GB/s",
                flush=True,
            )
    finally:
        path.unlink(missing_ok=True)
        handle.free_cpu_locked_tensor(buf)
    date = time.strftime("%Y-%m-%d")
    doc = {
        "date": date,
        "dir": str(args.dir),
        "filesystem": filesystem_of(args.dir),
        "gib": args.gib,
        "repeats": args.repeats,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "command": "python3 bench/nvme_rate.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "rows": rows,
    }
    stem = f"nvme_rate-{date}{'-' + args.label if args.label else ''}"
    write_result(args.out, stem, doc, "\n".join(markdown(doc)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
