"""How a multi-node job is started, and what each way requires (DeepSpeed 0.19.8 ``deepspeed/launcher/
multinode_runner.py``: one ``*Runner`` class and its ``get_cmd`` per backend; docs/deepspeed-rules.md).

The names are accelerate's ``deepspeed_multinode_launcher`` values (``accelerate/utils/constants.py``
DEEPSPEED_MULTINODE_LAUNCHERS) plus Intel MPI, which DeepSpeed 0.19.8's runner also accepts:

- pdsh, openmpi, mpich, impi, mvapich, slurm: DeepSpeed's runner ``--launcher NAME``
  (``deepspeed/launcher/constants.py``); run once, on the first host, it starts every node.
- nossh: DeepSpeed's runner ``--no_ssh --node_rank K`` (DeepSpeed >= 0.14.5), run on every node.
- standard: no DeepSpeed runner at all: one ``torchrun --nnodes N --node_rank K`` per node (what accelerate's
  "standard" does, ``accelerate/utils/launch.py``); plain DeepSpeed and HF Trainer scripts run under torchrun too
  (``deepspeed.init_distributed`` reads RANK / LOCAL_RANK / WORLD_SIZE from the environment).

The launcher matters only for more than one node: a single node is always started locally
(``deepspeed --num_gpus G``, or ``accelerate launch`` with one machine), whatever is chosen.
"""

from __future__ import annotations

from typing import Literal, get_args

from wizard.launch_command import MPI_LAUNCHERS as MPI_LAUNCHERS  # the one list of mpirun backends

MultinodeLauncher = Literal["pdsh", "openmpi", "mvapich", "mpich", "impi", "slurm", "nossh", "standard"]
MULTINODE_LAUNCHERS: tuple[MultinodeLauncher, ...] = get_args(MultinodeLauncher)
DEFAULT_LAUNCHER: MultinodeLauncher = "pdsh"

# DeepSpeed's runner backends (--launcher NAME).
DEEPSPEED_RUNNER_BACKENDS = ("pdsh", "openmpi", "mpich", "impi", "mvapich", "slurm")
# The same number of processes on every node: mpich/impi/mvapich ("requires same number of devices per node"),
# slurm ("needs the same slot count on every host"), standard (one --nproc_per_node for all nodes).
EQUAL_SLOTS_LAUNCHERS = ("mpich", "impi", "mvapich", "slurm", "standard")
# Started once per node by the user, each with its node rank (no ssh from the first host).
PER_NODE_LAUNCHERS = ("nossh", "standard")
NOSSH_MIN_DEEPSPEED = (0, 14, 5)

LAUNCHER_NOTES: dict[str, str] = {
    "pdsh": "the default: ssh from the first host to every node (passwordless), same path and python there",
    "openmpi": "Open MPI's mpirun starts every node; no --include/--exclude, no per-node GPU limits",
    "mvapich": "MVAPICH2's mpirun; the same GPU count on every node; no --include/--exclude",
    "mpich": "MPICH's mpirun; the same GPU count on every node; no --include/--exclude",
    "impi": "Intel MPI's mpirun; the same GPU count on every node; no --include/--exclude",
    "slurm": "srun inside a Slurm allocation (sbatch job.sbatch); the same GPU count on every node; "
    "the ranks need mpi4py",
    "nossh": "no ssh: run launch.sh on every node with NODE_RANK set (job.sbatch does it with srun); "
    "needs DeepSpeed ≥ 0.14.5",
    "standard": "torchrun on every node (you start each, NODE_RANK set); no ssh, no DeepSpeed runner; "
    "the same GPU count on every node",
}


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """ "0.19.8+abc" -> (0, 19, 8); None when there is no version to read."""
    if not text:
        return None
    parts: list[int] = []
    for piece in text.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    while len(parts) < 3:
        parts.append(0)
    return (parts[0], parts[1], parts[2])


def launcher_problems(launcher: str, *, deepspeed_version: str | None = None) -> list[str]:
    """Why ``launcher`` cannot start a multi-node job here, in words (empty when it can)."""
    if launcher not in MULTINODE_LAUNCHERS:
        return [f"unknown multi-node launcher {launcher!r} (one of {', '.join(MULTINODE_LAUNCHERS)})"]
    version = parse_version(deepspeed_version)
    if launcher == "nossh" and version is not None and version < NOSSH_MIN_DEEPSPEED:
        return [f"the nossh launcher needs DeepSpeed 0.14.5 or newer (found {deepspeed_version})"]
    return []
