"""Record a real DeepSpeed job for the monitor's fixtures and screenshots (CPU here, GPUs on the GPU machine).

Runs runner/examples/train_tiny.py under the plain `deepspeed` launcher with its output in a dswiz run directory
(logs/combined.log, csv/, run.json with a `plan` section), while a Collector samples it into metrics.jsonl. Then
renders the dashboard from that recording to SVG (scripts/screenshots_monitor.py does the rendering).

    python scripts/record_monitor_run.py --out /tmp/rec-cpu                      # CPU, 2 ranks (gloo)
    python scripts/record_monitor_run.py --out /tmp/rec-gpu --gpus 2 --size medium --steps 400  # on the H200s

Prints the run directory; copy logs/combined.log and metrics.jsonl into tests/fixtures/ to keep them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = {  # (hidden, layers, heads, seq_len, micro_batch, vocab)
    "tiny": (128, 2, 4, 64, 4, 512),
    "medium": (1024, 12, 16, 1024, 8, 32000),
}


def main() -> int:
    args = _parse_args()
    from runner import rundir

    run = args.out
    if run.exists():
        sys.exit(f"{run} exists; pass a new directory")
    (run / rundir.LOGS_DIR).mkdir(parents=True)
    (run / rundir.CONFIG_DIR).mkdir()
    hidden, layers, heads, seq, micro, vocab = SIZES[args.size]
    micro = args.micro_batch or micro
    config_path = _write_ds_config(run, micro, gpu=_has_gpu())
    script_args = [
        "--deepspeed_config", str(config_path), "--steps", str(args.steps), "--hidden", str(hidden),
        "--layers", str(layers), "--heads", str(heads), "--seq-len", str(seq), "--vocab", str(vocab),
        "--sleep-per-step", str(args.sleep_per_step), "--log-every", "5",
    ]  # fmt: skip
    argv = [
        sys.executable, "-m", "deepspeed.launcher.runner",
        *(["--include", f"localhost:{args.include}"] if args.include else ["--num_gpus", str(args.gpus)]),
        "--master_port", str(args.master_port), str(ROOT / "runner/examples/train_tiny.py"), *script_args,
    ]  # fmt: skip
    return _record(run, args, argv, script_args, _plan_section(args, micro))


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="run directory to create (must not exist)")
    p.add_argument("--gpus", type=int, default=2, help="ranks (GPUs, or CPU processes without a GPU)")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--size", choices=sorted(SIZES), default="tiny")
    p.add_argument(
        "--sleep-per-step", type=float, default=0.2, help="slow a CPU run so it spans several samples"
    )
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument(
        "--include", default=None, metavar="IDS", help="GPU ids to use instead of the first --gpus"
    )
    p.add_argument("--master-port", type=int, default=29613)
    p.add_argument("--peak-tflops", type=float, default=None, help="per-GPU peak for MFU (H200 bf16: 989.4)")
    p.add_argument(
        "--micro-batch", type=int, default=None, help="override the size's micro-batch (e.g. to OOM)"
    )
    p.add_argument(
        "--predicted-peak-gib",
        type=float,
        default=None,
        help="the plan's predicted peak GPU memory (marked on bars)",
    )
    p.add_argument(
        "--simulate-gpus",
        type=int,
        default=0,
        help="CPU only, for dashboard tests: N fake H200s (tests/fakes/fake_nvml.py) whose memory and utilisation "
        "follow the ranks' real RSS and CPU; the recording's gpu names say 'simulated'",
    )
    return p.parse_args()


def _write_ds_config(run: Path, micro: int, *, gpu: bool) -> Path:
    """The job's DeepSpeed config, with the csv monitor writing into the run directory."""
    from runner import rundir

    config = {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 5,
        "log_level": "info",
        "wall_clock_breakdown": False,
        "zero_optimization": {"stage": 2},
        "bf16": {"enabled": gpu},
        "csv_monitor": {
            "enabled": True,
            "output_path": str(run / rundir.CSV_DIR),
            "job_name": rundir.CSV_JOB_NAME,
        },
    }
    config_path = run / rundir.CONFIG_DIR / "ds_config.json"
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return config_path


def _plan_section(args: argparse.Namespace, micro: int) -> dict[str, int | float]:
    """run.json's plan section: the model's FLOPs per token and the batch, as the planner would write them."""
    hidden, layers, _heads, seq, _micro, vocab = SIZES[args.size]
    params = 12 * layers * hidden**2 + (vocab + seq) * hidden
    plan: dict[str, int | float] = {
        "flops_per_token": 6 * params + 12 * layers * hidden * seq,
        "seq_len": seq,
        "global_batch_size": micro * args.gpus,
        "total_steps": args.steps,
        "num_gpus": args.gpus,
    }
    if args.peak_tflops:
        plan["peak_tflops_per_gpu"] = args.peak_tflops
    if args.predicted_peak_gib:
        plan["predicted_peak_gpu_bytes"] = int(args.predicted_peak_gib * 1024**3)
    return plan


def _record(
    run: Path, args: argparse.Namespace, argv: list[str], script_args: list[str], plan: dict[str, int | float]
) -> int:
    """Run the job with its output in the run directory while a Collector samples it; run.json before and after."""
    from runner import rundir
    from runner.metrics.collector import Collector

    log = open(run / rundir.COMBINED_LOG, "wb")  # noqa: SIM115 - the job's stdout for its whole life
    job = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=run, start_new_session=True)
    record = {
        "run_id": run.name,
        "run_dir": str(run),
        "status": "running",
        "started_at": time.time(),
        "command": argv,
        "script": "train_tiny.py",
        "script_args": script_args,
        "launchers": [{"argv": argv, "pid": job.pid, "pgid": job.pid}],
        "world_size": args.gpus,
        "plan": plan,
    }
    (run / rundir.RUN_JSON).write_text(json.dumps(record, indent=2) + "\n")
    sampler = SimulatedGpus(args.simulate_gpus, job.pid) if args.simulate_gpus else None
    collector = Collector(
        run, pids_provider=lambda: [job.pid], interval=args.interval, gpu_sampler=sampler
    ).start()
    try:
        code = job.wait()
    except KeyboardInterrupt:
        os.killpg(job.pid, signal.SIGTERM)
        code = job.wait()
    record.update(status="finished", ended_at=time.time(), exit_code=code)
    (run / rundir.RUN_JSON).write_text(json.dumps(record, indent=2) + "\n")
    time.sleep(args.interval * 1.5)
    last = collector.stop()
    log.close()
    print(f"run directory: {run}")
    print(
        f"job exit code {code}; last snapshot: step {last.step if last else None}, state {last.job_state if last else None}"
    )
    return code


class SimulatedGpus:
    """Fake NVML GPUs driven by the job's real processes: GPU i's memory = 40 x rank i's RSS (+ a 0.5 GiB context),
    utilisation = rank i's CPU percent. Only for rendering the GPU panel from a CPU machine."""

    def __init__(self, count: int, root_pid: int) -> None:
        from tests.fakes.fake_nvml import FakeNvml, hgx_h200
        from wizard.hardware.gpu_sampler import GpuSampler

        self._gpus = hgx_h200(count)
        for g in self._gpus:
            g.name = "NVIDIA H200 (simulated)"
        self._sampler = GpuSampler(FakeNvml(self._gpus))
        self._root = root_pid
        self._procs: dict[int, object] = {}

    def sample(self) -> object:
        import psutil

        try:
            tree = psutil.Process(self._root).children(recursive=True)
        except psutil.Error:
            tree = []
        ranks = {}
        for p in tree:
            try:
                lr = next((a.split("=", 1)[1] for a in p.cmdline() if a.startswith("--local_rank=")), None)
                if lr is not None:
                    proc = self._procs.setdefault(p.pid, p)
                    ranks[int(lr)] = (p.pid, p.memory_info().rss, proc.cpu_percent(None))  # type: ignore[attr-defined]
            except (psutil.Error, ValueError):
                continue
        for i, g in enumerate(self._gpus):
            pid, rss, cpu = ranks.get(i, (0, 0, 0.0))
            used = min(g.memory_total, 40 * rss + (512 * 1024**2 if rss else 0))
            g.memory_used, g.utilization = used, int(min(100.0, cpu))
            g.power_mw = 90_000 + int(6_000 * min(100.0, cpu))
            g.temperature = 34 + int(min(100.0, cpu) // 4)
            g.processes = [(pid, used - 512 * 1024**2)] if pid else []
        return self._sampler.sample()


def _has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


if __name__ == "__main__":
    sys.exit(main())
