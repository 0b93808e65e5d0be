"""``dswiz launch`` inside a Slurm allocation (``sbatch``, ``salloc``, ``srun``): the nodes, this node's rank and
the rendezvous come from ``SLURM_*``, so no hostfile with real host names is needed.

Slurm sets (sbatch(1), srun(1) "OUTPUT ENVIRONMENT VARIABLES", Slurm 22.05): ``SLURM_JOB_ID``,
``SLURM_JOB_NODELIST`` (a hostlist such as ``gpu[01-04,07]``), ``SLURM_JOB_NUM_NODES`` / ``SLURM_NNODES``,
``SLURM_NODEID`` (this node's index in the allocation, 0 in the batch step), ``SLURM_GPUS_ON_NODE`` and
``SLURM_NTASKS_PER_NODE`` when GPUs / tasks per node were asked for.

What a launch takes from them (flags given on the command line always win):

- several nodes: a hostfile of the allocation's hosts (``<run directory>.hostfile``, beside it),
  with the slots of the config folder's hostfile (else ``--nproc``, else the GPUs Slurm gave the node, else 1);
- a launcher that runs on every node (nossh, torchrun, accelerate): ``--node-rank`` = ``SLURM_NODEID``;
- ``--master-addr``: ``MASTER_ADDR`` when the job sets it (job.sbatch does), else the allocation's first host;
- the run directory: ``<time>-slurm<job>`` (``-node<K>`` per node): still in time order for ``dswiz monitor``'s
  "latest run", and found by the job's id (``dswiz monitor`` takes the run id).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner import rundir
from wizard.config.hostfile import hostfile_lines, parse_hostfile
from wizard.errors import DswizError
from wizard.fsio import write_file_set
from wizard.launch_command import runs_per_node

_BRACKET_RE = re.compile(r"\[([^\]]*)\]")
_RANGE_RE = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(frozen=True)
class SlurmAllocation:
    """The allocation this process runs in, as ``SLURM_*`` describe it."""

    job_id: str
    hosts: tuple[str, ...]  # in Slurm's order: the first is node 0, where the batch step runs
    node_rank: int | None  # SLURM_NODEID
    gpus_on_node: int | None  # SLURM_GPUS_ON_NODE
    tasks_per_node: int | None  # SLURM_NTASKS_PER_NODE (its first number)

    @property
    def nodes(self) -> int:
        return len(self.hosts)


def _split_top_level(text: str) -> list[str]:
    """Split a hostlist on the commas outside brackets: ``a[1-2,4],b`` -> ``a[1-2,4]``, ``b``."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth < 0 or depth > 1:
            raise ValueError("unbalanced brackets")
        current += ch
    if depth:
        raise ValueError("unbalanced brackets")
    return [*parts, current]


def _expand_bracket(body: str) -> list[str]:
    """``01-03,07`` -> ``01 02 03 07`` (zero padding kept, as ``scontrol show hostnames`` does)."""
    out: list[str] = []
    for piece in body.split(","):
        m = _RANGE_RE.match(piece.strip())
        if not m:
            raise ValueError(f"bad range {piece!r}")
        first, last = m.group(1), m.group(2) or m.group(1)
        if int(last) < int(first):
            raise ValueError(f"descending range {piece!r}")
        width = len(first) if first.startswith("0") else 0
        out += [str(n).zfill(width) for n in range(int(first), int(last) + 1)]
    return out


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Slurm's hostlist syntax expanded, in order (what ``scontrol show hostnames`` prints), e.g.
    ``gpu[01-02],cpu7`` -> ``gpu01 gpu02 cpu7``; ``rack[1-2]-n[1-2]`` expands every bracket. DswizError when the
    text is not a hostlist."""
    hosts: list[str] = []
    try:
        for item in _split_top_level(text.strip()):
            if not item:
                raise ValueError("empty host name")
            literals = _BRACKET_RE.split(item)  # literal, bracket body, literal, ...
            choices = [[lit] if i % 2 == 0 else _expand_bracket(lit) for i, lit in enumerate(literals)]
            hosts += ["".join(combo) for combo in itertools.product(*choices)]
    except ValueError as e:
        raise DswizError(
            f"SLURM_JOB_NODELIST {text!r} is not a Slurm host list ({e})",
            "run inside an allocation made by sbatch/salloc, or unset SLURM_JOB_NODELIST",
        ) from e
    return tuple(hosts)


def _int(environ: Mapping[str, str], name: str) -> int | None:
    """The first number of a Slurm count (``SLURM_NTASKS_PER_NODE`` can read ``2(x3)``), None when absent."""
    m = re.match(r"\s*(\d+)", environ.get(name, ""))
    return int(m.group(1)) if m else None


def allocation_from_env(environ: Mapping[str, str]) -> SlurmAllocation | None:
    """The allocation ``environ`` describes, or None outside Slurm (no SLURM_JOB_ID / SLURM_JOB_NODELIST)."""
    job_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not job_id or not nodelist:
        return None
    return SlurmAllocation(
        job_id=job_id,
        hosts=expand_hostlist(nodelist),
        node_rank=_int(environ, "SLURM_NODEID"),
        gpus_on_node=_int(environ, "SLURM_GPUS_ON_NODE"),
        tasks_per_node=_int(environ, "SLURM_NTASKS_PER_NODE"),
    )


@dataclass(frozen=True)
class LaunchDefaults:
    """What a launch inside the allocation uses where no flag said otherwise (None: nothing from Slurm)."""

    hostfile: str | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    run_dir: str | None = None
    note: str = ""  # the allocation in words, for the launch's output


def _slots(config_hostfile: Path | None, nproc: int | None, allocation: SlurmAllocation) -> int:
    if config_hostfile is not None and config_hostfile.is_file():
        parsed = parse_hostfile(config_hostfile.read_text(encoding="utf-8"))
        if parsed.hosts:
            return parsed.hosts[0][1]
    return nproc or allocation.gpus_on_node or 1


def _free_run_dir(suffix: str) -> str:
    root = rundir.runs_root()
    name = f"{rundir.new_run_id(root)}-{suffix}"  # the time first: run ids sort by time
    candidate, n = name, 1
    while (root / candidate).exists():  # a second launch in the same allocation (salloc), or a requeue
        candidate = f"{name}-{n}"
        n += 1
    return str(root / candidate)


def launch_defaults(
    environ: Mapping[str, str],
    *,
    launcher: str,
    mode: str | None,
    given: Mapping[str, object],
    config_hostfile: Path | None,
    nproc: int | None,
    write: bool = True,
) -> LaunchDefaults:
    """The defaults a launch takes from the allocation ``environ`` describes (see the module docstring).
    ``given``: the launch flags by name (hostfile, node_rank, master_addr, run_dir); those set are kept.
    ``write``: False (a dry run) names the allocation's hostfile without writing it."""
    allocation = allocation_from_env(environ)
    if allocation is None:
        return LaunchDefaults()
    multi = allocation.nodes > 1
    per_node = runs_per_node(launcher, mode)
    rank = allocation.node_rank if multi and per_node else None
    run_dir = None
    if given.get("run_dir") is None:
        suffix = f"-node{allocation.node_rank}" if rank is not None else ""
        run_dir = _free_run_dir(f"slurm{allocation.job_id}{suffix}")
    hostfile = master = None
    if multi and given.get("hostfile") is None:
        # beside the run directory: one per launch, so a second launch in the allocation never clashes
        path = Path(f"{run_dir or given['run_dir']}.hostfile")
        slots = _slots(config_hostfile, nproc, allocation)
        text = f"# the hosts of Slurm job {allocation.job_id} (SLURM_JOB_NODELIST), written by dswiz launch\n"
        if write:
            body = text + "\n".join(hostfile_lines(allocation.hosts, slots)) + "\n"
            write_file_set(path.parent, {path.name: body}, force=True, keep_backups=0)
        hostfile = str(path)
    if multi and given.get("master_addr") is None:
        master = environ.get("MASTER_ADDR") or allocation.hosts[0]
    rank_words = (
        f"node rank {rank} of {allocation.nodes}" if rank is not None else f"{allocation.nodes} node(s)"
    )
    return LaunchDefaults(
        note=f"Slurm job {allocation.job_id}: {rank_words} ({', '.join(allocation.hosts)})",
        hostfile=hostfile,
        node_rank=rank if given.get("node_rank") is None else None,
        master_addr=master,
        run_dir=run_dir,
    )
