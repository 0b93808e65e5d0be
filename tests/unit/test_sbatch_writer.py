"""job.sbatch (wizard/config/sbatch.py): golden files for the launchers that need no pdsh (nossh, standard, slurm)
and a single node, and the rules behind them. Regenerate after an intended change with
``DSWIZ_UPDATE_GOLDEN=1 pytest tests/unit/test_sbatch_writer.py`` and review the diff."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from wizard.config.build import WriteOptions, config_set_from_strategy
from wizard.config.render import render_all
from wizard.config.sbatch import check_partition, check_time, job_layout, slurm_job
from wizard.config.schema import SBATCH_NAME
from wizard.errors import DswizError
from wizard.strategy import Strategy

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden" / "sbatch"
UPDATE = os.environ.get("DSWIZ_UPDATE_GOLDEN") == "1"
TWO_BY_FOUR = Strategy(zero_stage=2, micro_batch_size=4, nodes=2, gpus_per_node=4)

CASES: dict[str, tuple[Strategy, WriteOptions]] = {
    "nossh_2x4": (
        TWO_BY_FOUR,
        WriteOptions(launcher="nossh", slurm=slurm_job(time="2:00:00", partition="gpu")),
    ),
    "standard_2x4_trainer": (
        TWO_BY_FOUR,
        WriteOptions(consumer="trainer", launcher="standard", slurm=slurm_job(cpus_per_task=32)),
    ),
    "slurm_2x4": (TWO_BY_FOUR, WriteOptions(launcher="slurm", slurm=slurm_job(time="30"))),
    "nossh_2x4_offload": (
        replace(TWO_BY_FOUR, offload_optimizer="cpu"),
        WriteOptions(launcher="nossh", host_cores=64),
    ),
    "single_node_cpu_ranks": (
        Strategy(zero_stage=2, precision="fp32", gpus_per_node=2),
        WriteOptions(slurm=slurm_job(wanted=True, gpus=False)),
    ),
}


def _sbatch(name: str) -> str:
    strategy, options = CASES[name]
    files = render_all(config_set_from_strategy(strategy, replace(options, config_dir=f"/path/to/{name}")))
    return files[SBATCH_NAME]


@pytest.mark.parametrize("name", sorted(CASES))
def test_sbatch_matches_golden_file(name: str) -> None:
    text = _sbatch(name)
    path = GOLDEN / name / SBATCH_NAME
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name}/job.sbatch differs from the golden file"


@pytest.mark.parametrize("name", sorted(CASES))
def test_sbatch_is_valid_bash(name: str) -> None:
    proc = subprocess.run(["bash", "-n"], input=_sbatch(name), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_one_node_gets_job_sbatch_only_when_asked_or_for_the_slurm_launcher() -> None:
    one = Strategy(zero_stage=2, gpus_per_node=8)
    assert SBATCH_NAME not in render_all(config_set_from_strategy(one, WriteOptions()))
    assert SBATCH_NAME in render_all(config_set_from_strategy(one, WriteOptions(launcher="slurm")))
    multi = config_set_from_strategy(TWO_BY_FOUR, WriteOptions())  # pdsh: still a batch script
    assert "ssh" in render_all(multi)[SBATCH_NAME]


def test_per_node_launchers_run_one_task_per_node_and_slurm_one_per_rank() -> None:
    per_node = config_set_from_strategy(TWO_BY_FOUR, WriteOptions(launcher="nossh")).topology
    by_rank = config_set_from_strategy(TWO_BY_FOUR, WriteOptions(launcher="slurm")).topology
    assert (job_layout(per_node).ntasks_per_node, job_layout(per_node).cpus_per_task) == (1, 4)
    assert job_layout(per_node).per_node_srun
    assert (job_layout(by_rank).ntasks_per_node, job_layout(by_rank).cpus_per_task) == (4, 1)
    assert not job_layout(by_rank).per_node_srun


def test_offloading_ranks_ask_for_the_cores_the_plan_counted() -> None:
    # CPU Adam runs on the cores Slurm confines the task to: 64 cores over 4 ranks a node is 16 a rank
    offload = replace(TWO_BY_FOUR, offload_optimizer="cpu")
    for launcher, tasks, cpus in (("nossh", 1, 64), ("slurm", 4, 16)):
        topo = config_set_from_strategy(offload, WriteOptions(launcher=launcher, host_cores=64)).topology
        assert (job_layout(topo).ntasks_per_node, job_layout(topo).cpus_per_task) == (tasks, cpus)
    # Slurm counts hyperthreads: 64 cores of 2 threads over 4 ranks is 32 CPUs a rank
    smt = WriteOptions(launcher="slurm", host_cores=64, threads_per_core=2)
    assert job_layout(config_set_from_strategy(offload, smt).topology).cpus_per_task == 32
    # parameters alone on the host: the optimizer steps on the GPU, no CPU Adam to feed
    params = replace(TWO_BY_FOUR, zero_stage=3, offload_param="cpu")
    topo = config_set_from_strategy(params, WriteOptions(launcher="slurm", host_cores=8)).topology
    assert job_layout(topo).cpus_per_task == 1 and not topo.slurm.exclusive
    assert not config_set_from_strategy(params, WriteOptions(launcher="slurm")).topology.slurm.exclusive
    # the node's cores unknown: the whole node, never a count the node may not have
    unknown = config_set_from_strategy(offload, WriteOptions(launcher="slurm"))
    assert job_layout(unknown.topology).cpus_per_task == 1 and unknown.topology.slurm.exclusive
    text = render_all(unknown)[SBATCH_NAME]
    assert "#SBATCH --exclusive\n" in text
    # the runner's srun gives each of the 4 ranks a quarter of the node's CPUs: the script's arithmetic, in bash
    line = next(ln for ln in text.splitlines() if ln.startswith("export SRUN_CPUS_PER_TASK="))
    shown = subprocess.run(
        ["bash", "-c", f'{line}; echo "$SRUN_CPUS_PER_TASK"'],
        env={"SLURM_CPUS_ON_NODE": "96", "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == "24"
    # nothing on the host: one core a rank, whatever the node has; an explicit --cpus-per-task always wins
    plain = config_set_from_strategy(TWO_BY_FOUR, WriteOptions(launcher="slurm", host_cores=64)).topology
    assert job_layout(plain).cpus_per_task == 1
    asked = WriteOptions(launcher="slurm", host_cores=64, slurm=slurm_job(cpus_per_task=3))
    assert job_layout(config_set_from_strategy(offload, asked).topology).cpus_per_task == 3


@pytest.mark.parametrize("good", ["90", "30:00", "1:30:00", "2-12", "2-12:30", "2-12:30:00", "UNLIMITED"])
def test_slurm_time_formats_are_accepted(good: str) -> None:
    assert check_time(good) == good


@pytest.mark.parametrize("bad", ["1h", "1:2:3:4", "-5", "", "1.5"])
def test_a_bad_slurm_time_names_the_formats(bad: str) -> None:
    with pytest.raises(DswizError) as e:
        check_time(bad)
    assert "H:MM:SS" in e.value.fix


@pytest.mark.parametrize("bad", ["gpu q", "a#b", "x;rm"])
def test_a_bad_partition_is_refused(bad: str) -> None:
    with pytest.raises(DswizError):
        check_partition(bad)


def test_the_wizards_multi_node_step_writes_job_sbatch_for_its_launcher(tmp_path: Path) -> None:
    """The wizard and the line prompts render through the service (WizardService.render_files): a multi-node
    plan gets a job.sbatch for the launcher chosen in the Multi-node step, naming the folder it is written to."""
    from wizard.service import Choices, WizardService

    choices = Choices(strategy=TWO_BY_FOUR, launcher="standard", out_dir=tmp_path / "run1")
    files = WizardService().render_files(choices, model=None)
    text = files[SBATCH_NAME]
    assert "#SBATCH --nodes=2\n" in text and "torch.distributed.run" in text
    assert f"DIR={tmp_path / 'run1'}\n" in text
    assert SBATCH_NAME not in WizardService().render_files(replace(choices, strategy=Strategy()), model=None)
