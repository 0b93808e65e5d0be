"""``job.sbatch``: the Slurm batch script for a config set, so a cluster user can ``sbatch`` the plan.

The script asks Slurm for the plan's nodes (``#SBATCH --nodes``, tasks, GPUs and cores per node, ``--time`` and
``--partition`` when given), sets the rendezvous every rank needs (MASTER_ADDR = the allocation's first host,
where the batch step runs; MASTER_PORT = a port free there when the job starts), and starts the job with
``dswiz launch`` -- which reads ``SLURM_*`` inside the allocation (``runner.slurm_env``), so no hostfile with real
host names is needed, and which builds its command with ``wizard.launch_command.build_command``, the builder of
``launch.sh``. The command each node ends up running is written into the script as a comment.

How the launch fits each multi-node launcher (wizard/config/launchers.py):

- nossh, standard: ``srun`` starts one task per node, each running ``dswiz launch --node-rank $SLURM_NODEID``
  (DeepSpeed's runner with ``--no_ssh``, or torchrun, on every node).
- slurm: ``dswiz launch`` in the batch step runs DeepSpeed's runner with ``--launcher slurm``, which runs
  ``srun -n <ranks> python -u script`` inside the allocation (DeepSpeed 0.19.8 ``deepspeed/launcher/
  multinode_runner.py`` ``SlurmRunner.get_cmd``). Those ranks get no RANK/LOCAL_RANK from it:
  ``deepspeed.init_distributed`` then finds them through mpi4py (``deepspeed/comm/comm.py`` ``mpi_discovery``), so
  the training environment needs mpi4py and Slurm's MPI support (e.g. ``--launcher_args --mpi=pmix``).
- pdsh and the MPI launchers: ``dswiz launch`` in the batch step, on a hostfile of the allocation's hosts; they
  reach the other nodes over ssh / mpirun as outside Slurm.

One node: the batch step runs ``dswiz launch`` alone (``deepspeed --num_gpus G`` on the allocated node).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace

from wizard.config.job_env import env_lines
from wizard.config.launchers import PER_NODE_LAUNCHERS
from wizard.config.schema import SBATCH_NAME, ConfigSet, SlurmJob, Topology
from wizard.errors import DswizError
from wizard.launch_command import LaunchSpec, build_command

# sbatch --time: "minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours", "days-hours:minutes",
# "days-hours:minutes:seconds" (sbatch(1)), or no limit.
_TIME_RE = re.compile(
    r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2})$"
)
_NO_LIMIT = ("UNLIMITED", "INFINITE")
# A partition name as it can stand in `#SBATCH --partition=NAME` (a comma separates alternatives).
_PARTITION_RE = re.compile(r"^[A-Za-z0-9_.\-]+(,[A-Za-z0-9_.\-]+)*$")
# Environment every node's ranks get: NCCL's async error handling in TearDown mode (1), what torchrun gives its
# workers (torch/distributed/elastic/agent/server/local_elastic_agent.py), so a dead rank ends the job the same
# way under DeepSpeed's runner (torch's default, 3, skips the clean-up: ProcessGroupNCCL.hpp).
JOB_ENV = (("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),)
MASTER_ADDR_LINE = 'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"'
MASTER_PORT_LINE = (
    'export MASTER_PORT="${MASTER_PORT:-$("$PYTHON_FOR_PORT" -c '
    '\'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])\')}"'
)


def check_time(text: str) -> str:
    """``text`` when Slurm's --time takes it; DswizError naming the formats otherwise."""
    value = text.strip()
    if value.upper() in _NO_LIMIT or _TIME_RE.match(value):
        return value
    raise DswizError(
        f"{text!r} is not a Slurm time limit",
        "write minutes (90), H:MM:SS (1:30:00) or D-HH:MM:SS (2-00:00:00)",
    )


def check_partition(text: str) -> str:
    value = text.strip()
    if _PARTITION_RE.match(value):
        return value
    raise DswizError(
        f"{text!r} is not a Slurm partition name", "write the name as `sinfo -s` lists it, e.g. gpu"
    )


def wants_sbatch(config: ConfigSet) -> bool:
    """A multi-node plan always gets a job.sbatch; one node when asked, or when the launcher is slurm."""
    topo = config.topology
    return topo.multi_node or topo.slurm.wanted or topo.launcher == "slurm"


@dataclass(frozen=True)
class JobLayout:
    """What the allocation must hold for a topology: the ``#SBATCH`` numbers, and where the launch starts."""

    nodes: int
    ntasks_per_node: int
    cpus_per_task: int
    gpus_per_node: int | None  # None: no GPUs asked for
    per_node_srun: bool  # srun starts one dswiz launch per node (else: one, in the batch step)


def job_layout(topology: Topology) -> JobLayout:
    """The allocation a topology needs. DeepSpeed's slurm and MPI launchers start one task per rank inside it
    (srun -n / mpirun use the allocation's task slots); every other launch is one task per node that starts
    the node's ranks itself, so that task gets a core per rank (``SlurmJob.cpus_per_rank`` each where the ranks
    work on the host: Slurm confines a task to the CPUs it asked for)."""
    slurm = topology.slurm
    ranks = topology.gpus_per_node
    one_task_per_rank = topology.multi_node and topology.launcher not in (*PER_NODE_LAUNCHERS, "pdsh")
    tasks = ranks if one_task_per_rank else 1
    cpus = slurm.cpus_per_task or slurm.cpus_per_rank * (1 if one_task_per_rank else ranks)
    return JobLayout(
        nodes=topology.nodes,
        ntasks_per_node=tasks,
        cpus_per_task=cpus,
        gpus_per_node=ranks if slurm.gpus else None,
        per_node_srun=topology.multi_node and topology.launcher in PER_NODE_LAUNCHERS,
    )


def sbatch_directives(config: ConfigSet) -> list[tuple[str, str]]:
    """(option, value) of every ``#SBATCH`` line, in the written order."""
    topo = config.topology
    layout = job_layout(topo)
    out = [
        ("job-name", "dswiz"),
        ("nodes", str(layout.nodes)),
        ("ntasks-per-node", str(layout.ntasks_per_node)),
    ]
    if layout.gpus_per_node is not None:
        out.append(("gpus-per-node", str(layout.gpus_per_node)))
    out.append(("cpus-per-task", str(layout.cpus_per_task)))
    if topo.slurm.exclusive:
        out.append(("exclusive", ""))
    if topo.slurm.time:
        out.append(("time", topo.slurm.time))
    if topo.slurm.partition:
        out.append(("partition", topo.slurm.partition))
    out.append(("output", "dswiz-%j.out"))  # in the directory sbatch is run from
    return out


# How the comment names the hostfile dswiz launch writes from the allocation (runner.slurm_env).
ALLOCATION_HOSTFILE = "<hosts of $SLURM_JOB_NODELIST>"


def node_launch_spec(config: ConfigSet, launch_sh_spec: LaunchSpec) -> LaunchSpec:
    """What ``dswiz launch`` builds on each node inside the allocation: launch.sh's spec
    (``wizard.config.render.launch_spec``) with the hosts of the allocation, the rendezvous from the job's
    environment and this node's rank from Slurm."""
    if not config.topology.multi_node:
        return launch_sh_spec
    per_node = job_layout(config.topology).per_node_srun
    return replace(
        launch_sh_spec,
        hostfile=ALLOCATION_HOSTFILE,
        master_addr="$MASTER_ADDR",
        master_port=None,
        master_port_var="MASTER_PORT",
        node_rank_var="SLURM_NODEID" if per_node else None,
    )


def dswiz_launch_words(config: ConfigSet) -> list[str]:
    """The ``dswiz launch`` command the script runs (per node for nossh/standard), shell words, without the
    script and its arguments."""
    words = ['"$DSWIZ"', "launch", "--no-tui", "--config", '"$DIR"']
    if config.topology.multi_node:
        if job_layout(config.topology).per_node_srun:
            words += ["--node-rank", '"$SLURM_NODEID"']
        words += ["--master-addr", '"$MASTER_ADDR"', "--master-port", '"$MASTER_PORT"']
    return [*words, "${PYTHON:+--python", '"$PYTHON"}']


def _quoted(word: str) -> str:
    return f'"{word}"' if word.startswith("$") else shlex.quote(word)


def _header(config: ConfigSet, launch_sh_spec: LaunchSpec) -> list[str]:
    topo = config.topology
    lines = ["#!/bin/bash"]
    lines += [f"#SBATCH --{key}" + (f"={value}" if value else "") for key, value in sbatch_directives(config)]
    lines += [
        "# Written by dswiz: the Slurm batch job for the configs in this directory. Submit it from your project",
        f"# directory:  sbatch {topo.slurm.config_dir}/{SBATCH_NAME} train.py [script args...]",
        "# (PYTHON=/path/to/python and DSWIZ=/path/to/dswiz choose the interpreter and dswiz; sbatch passes",
        "# the environment it is run in to the job.)",
    ]
    if topo.slurm.cpus_per_task is None and topo.slurm.cpus_per_rank > 1:
        lines.append(
            f"# --cpus-per-task: {topo.slurm.cpus_per_rank} CPUs for each rank's CPU Adam (the optimizer steps on the "
            "host: each rank's share of the node's cores, what the plan priced the step with)"
        )
    if topo.slurm.exclusive:
        lines.append(
            "# --exclusive: the whole node for CPU Adam (the optimizer steps on the host, and the plan did not know "
            "the node's cores; dswiz config --slurm-cpus-per-task N asks for N instead)"
        )
    if topo.multi_node:
        lines.append(
            f"# {topo.nodes} nodes x {topo.gpus_per_node} ranks, launcher {topo.launcher}: {_how(config)}"
        )
    command = build_command(node_launch_spec(config, launch_sh_spec))
    where = " on every node" if job_layout(topo).per_node_srun else " in the batch step"
    lines.append(f"# dswiz launch then runs{where} (with its run directory's copies of the configs):")
    lines.append("#   " + " ".join(_quoted(w) for w in command.argv))
    return lines


def _how(config: ConfigSet) -> str:
    launcher = config.topology.launcher
    if launcher in PER_NODE_LAUNCHERS:
        return "srun starts dswiz launch once per node, with the node rank Slurm gives it"
    if launcher == "slurm":
        return (
            "DeepSpeed's runner starts every rank with srun; the ranks find their rank through mpi4py "
            "(install it in the training environment)"
        )
    if launcher == "pdsh":
        return "DeepSpeed's runner reaches the other nodes over ssh (passwordless ssh between the nodes)"
    return f"DeepSpeed's runner starts every rank with {launcher}'s mpirun"


def render_sbatch(config: ConfigSet, launch_sh_spec: LaunchSpec) -> str:
    """The text of job.sbatch for ``config`` (see the module docstring); ``launch_sh_spec`` is launch.sh's launch
    of the files in ``config.topology.slurm.config_dir`` (``wizard.config.render.launch_spec``)."""
    topo = config.topology
    lines = _header(config, launch_sh_spec)
    lines += [
        "set -euo pipefail",
        f"DIR={shlex.quote(topo.slurm.config_dir)}",
        f'if [ "$#" -lt 1 ]; then echo "usage: sbatch $DIR/{SBATCH_NAME} train.py [script args...]" >&2; exit 2; fi',
        'SCRIPT="$1"; shift',
        'DSWIZ="${DSWIZ:-dswiz}"',
        "export DIR DSWIZ SCRIPT",
    ]
    lines += env_lines({**dict(JOB_ENV), **config.node_env}) if topo.multi_node else []
    if topo.multi_node:
        lines += [
            "# The rendezvous: the allocation's first host (this batch step runs there), a port free on it now.",
            'PYTHON_FOR_PORT="${PYTHON:-python3}"',
            MASTER_ADDR_LINE,
            MASTER_PORT_LINE,
        ]
    launch = " ".join(dswiz_launch_words(config))
    if topo.multi_node and topo.launcher == "slurm":
        ranks = topo.gpus_per_node
        per_rank = (  # --exclusive: each rank its share of the node's CPUs
            f'"$(( ${{SLURM_CPUS_ON_NODE:-{ranks}}} / {ranks} ))"'
            if topo.slurm.exclusive
            else '"${SLURM_CPUS_PER_TASK:-1}"'
        )
        lines += [
            "# srun (DeepSpeed's runner calls it) takes --cpus-per-task from the job only through this since Slurm 22.05.",
            f"export SRUN_CPUS_PER_TASK={per_rank}",
        ]
    if job_layout(topo).per_node_srun:
        lines += [
            "# One task per node with the CPUs the job holds there (srun takes --cpus-per-task from the job no more",
            "# since Slurm 22.05); a node that fails ends the others (--kill-on-bad-exit); lines start with the node rank.",
            'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_ON_NODE" \\',
            "  --kill-on-bad-exit=1 --label \\",
            f'  bash -c \'exec {launch} "$@"\' dswiz-node "$SCRIPT" "$@"',
        ]
        return "\n".join(lines) + "\n"
    lines.append(f'exec {launch} "$SCRIPT" "$@"')
    return "\n".join(lines) + "\n"


def slurm_job(
    *,
    wanted: bool = False,
    time: str | None = None,
    partition: str | None = None,
    cpus_per_task: int | None = None,
    gpus: bool = True,
) -> SlurmJob:
    """The front doors' Slurm answers as a ``SlurmJob``, each checked (DswizError names a bad one)."""
    return SlurmJob(
        wanted=wanted,
        time=check_time(time) if time else None,
        partition=check_partition(partition) if partition else None,
        cpus_per_task=cpus_per_task,
        gpus=gpus,
    )
