"""The "standard" multi-node launcher (torchrun on every node, wizard/config/launchers.py) runs a real DeepSpeed
job: the config writers' launch.sh started twice on this machine, NODE_RANK 0 and 1, meeting over loopback
(DeepSpeed 0.19.8 on CPU, gloo, one rank per node)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from wizard.config.build import WriteOptions, config_set_from_strategy
from wizard.config.render import render_all
from wizard.strategy import Strategy

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "runner" / "examples" / "train_tiny.py"


def test_two_nodes_with_the_standard_launcher_over_loopback(tmp_path: Path) -> None:
    strategy = Strategy(zero_stage=2, precision="fp32", micro_batch_size=2, nodes=2, gpus_per_node=1)
    options = WriteOptions(
        launcher="standard",
        hosts=("node-a", "node-b"),
        master_addr="127.0.0.1",
        master_port=29000 + os.getpid() % 1000,
        optimizer="deepspeed",
        torch_adam=True,  # no JIT build of DeepSpeed's CPU Adam
        config_dir=str(tmp_path),
    )
    for name, text in render_all(config_set_from_strategy(strategy, options)).items():
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    nodes = [
        subprocess.Popen(
            ["bash", str(tmp_path / "launch.sh"), str(TRAIN), "--steps", "6"],
            env={**env, "NODE_RANK": str(rank)},
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # launch.sh, torchrun and its rank: one group to stop
        )
        for rank in (0, 1)
    ]
    try:
        outputs = [p.communicate(timeout=240)[0] for p in nodes]
    finally:
        for p in nodes:  # a failed node's torchrun and rank outlive bash: stop the whole group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert [p.returncode for p in nodes] == [0, 0], outputs
    assert "done: 6 steps" in outputs[0]
    assert "world=2 " in outputs[0]  # one job of two ranks, not two one-rank jobs
