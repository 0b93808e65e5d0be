"""runner/slurm_env.py: what `dswiz launch` takes from SLURM_* inside an allocation. The hostlists are checked
against what `scontrol show hostnames` prints (Slurm 22.05) when scontrol is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from runner.slurm_env import LaunchDefaults, allocation_from_env, expand_hostlist, launch_defaults
from wizard.config.hostfile import parse_hostfile
from wizard.errors import DswizError

HOSTLISTS = {
    "n1": ("n1",),
    "n[1-2]": ("n1", "n2"),
    "gpu[01-03,07],cpu9": ("gpu01", "gpu02", "gpu03", "gpu07", "cpu9"),
    "rack[1-2]-n[8-9]": ("rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9"),
    "a[098-101]": ("a098", "a099", "a100", "a101"),
}


@pytest.mark.parametrize(("text", "hosts"), sorted(HOSTLISTS.items()))
def test_hostlists_expand_in_slurm_order(text: str, hosts: tuple[str, ...]) -> None:
    assert expand_hostlist(text) == hosts


def _scontrol_works() -> bool:
    """scontrol needs a slurm.conf even to expand a hostlist (SLURM_CONF, set by scripts/slurm-up.sh)."""
    if shutil.which("scontrol") is None:
        return False
    probe = subprocess.run(
        ["scontrol", "show", "hostnames", "n1"], capture_output=True, text=True, check=False
    )
    return probe.returncode == 0


@pytest.mark.skipif(
    not _scontrol_works(), reason="no working scontrol here (scripts/slurm-up.sh sets one up)"
)
@pytest.mark.parametrize("text", sorted(HOSTLISTS))
def test_hostlists_expand_as_scontrol_does(text: str) -> None:
    proc = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True, text=True, check=True)
    assert expand_hostlist(text) == tuple(proc.stdout.split())


@pytest.mark.parametrize("bad", ["n[1-2", "n[2-1]", "n[a-b]", "n1,,n2", "n[[1]]"])
def test_a_bad_hostlist_names_the_variable(bad: str) -> None:
    with pytest.raises(DswizError) as e:
        expand_hostlist(bad)
    assert "SLURM_JOB_NODELIST" in e.value.problem


def test_outside_slurm_there_is_no_allocation() -> None:
    assert allocation_from_env({"HOME": "/root"}) is None
    assert (
        launch_defaults({}, launcher="deepspeed", mode="nossh", given={}, config_hostfile=None, nproc=2)
        == LaunchDefaults()
    )


def test_the_allocation_is_read_from_slurm_variables() -> None:
    env = {
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "gpu[01-02]",
        "SLURM_NODEID": "1",
        "SLURM_GPUS_ON_NODE": "8",
        "SLURM_NTASKS_PER_NODE": "8(x2)",
    }
    a = allocation_from_env(env)
    assert a is not None
    assert (a.job_id, a.hosts, a.node_rank, a.gpus_on_node, a.tasks_per_node) == (
        "42",
        ("gpu01", "gpu02"),
        1,
        8,
        8,
    )


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    return tmp_path / "dswiz" / "runs"


def test_a_per_node_launch_gets_its_rank_hosts_master_and_run_dir(state: Path, tmp_path: Path) -> None:
    config_hostfile = tmp_path / "hostfile"
    config_hostfile.write_text("worker-0 slots=4\nworker-1 slots=4\n")
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NODEID": "1", "MASTER_ADDR": "n1"}
    got = launch_defaults(
        env, launcher="deepspeed", mode="nossh", given={}, config_hostfile=config_hostfile, nproc=None
    )
    assert got.node_rank == 1 and got.master_addr == "n1"
    assert got.note == "Slurm job 7: node rank 1 of 2 (n1, n2)"
    assert got.run_dir is not None and Path(got.run_dir).parent == state
    assert re.fullmatch(r"\d{8}-\d{6}-slurm7-node1", Path(got.run_dir).name)
    assert got.hostfile is not None
    written = parse_hostfile(Path(got.hostfile).read_text())
    assert written.hosts == (("n1", 4), ("n2", 4))  # the allocation's hosts, the plan's slots


def test_the_batch_step_of_an_ssh_or_slurm_launcher_gets_no_node_rank(state: Path) -> None:
    env = {
        "SLURM_JOB_ID": "8",
        "SLURM_JOB_NODELIST": "n[1-2]",
        "SLURM_NODEID": "0",
        "SLURM_GPUS_ON_NODE": "2",
    }
    got = launch_defaults(env, launcher="deepspeed", mode="slurm", given={}, config_hostfile=None, nproc=None)
    assert got.node_rank is None and got.master_addr == "n1"  # no MASTER_ADDR: the first host
    assert got.hostfile is not None
    assert parse_hostfile(Path(got.hostfile).read_text()).hosts == (("n1", 2), ("n2", 2))


def test_flags_given_win_and_a_second_launch_gets_its_own_run_dir(state: Path) -> None:
    env = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n1", "SLURM_NODEID": "0"}
    first = launch_defaults(env, launcher="deepspeed", mode=None, given={}, config_hostfile=None, nproc=2)
    assert first.hostfile is None and first.master_addr is None  # one node: a local launch
    assert first.run_dir is not None
    Path(first.run_dir).mkdir(parents=True)
    second = launch_defaults(env, launcher="deepspeed", mode=None, given={}, config_hostfile=None, nproc=2)
    assert second.run_dir == first.run_dir + "-1"
    given = {"run_dir": "/x", "node_rank": 3, "master_addr": "h", "hostfile": "/h"}
    multi = {**env, "SLURM_JOB_NODELIST": "n[1-2]"}
    got = launch_defaults(multi, launcher="torchrun", mode=None, given=given, config_hostfile=None, nproc=1)
    assert (got.hostfile, got.node_rank, got.master_addr, got.run_dir) == (None, None, None, None)
