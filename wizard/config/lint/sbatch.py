"""A Slurm batch script (``job.sbatch``) checked against the plan beside it: the hostfile (nodes, slots) and the
DeepSpeed JSON (the world size its batch sizes imply), the launcher's limits, and the rendezvous.

sbatch(1) (Slurm 22.05) reads ``#SBATCH`` options only before the first command of the script; a directive
after it is a comment. Codes:
  sbatch-directive-ignored  an #SBATCH line after the first command (sbatch ignores it)
  sbatch-time               --time is not in a format Slurm takes (wizard.config.sbatch.check_time)
  sbatch-no-nodes           a multi-node plan, but no --nodes (Slurm allocates one node)
  sbatch-node-count         --nodes differs from the hostfile's hosts
  sbatch-gpu-count          --gpus-per-node differs from the hostfile's slots
  sbatch-world-size         nodes x ranks per node differs from the world size the DeepSpeed JSON's batch implies
  sbatch-tasks-per-node     DeepSpeed's slurm launcher (srun -n ranks) with fewer task slots than ranks per node
  sbatch-ssh-launcher       DeepSpeed's pdsh launcher inside the job: needs passwordless ssh between the nodes
  sbatch-no-master-addr     several nodes, and nothing sets MASTER_ADDR (or --master-addr / --master_addr)
  sbatch-no-master-port     several nodes, and nothing sets MASTER_PORT (every job then meets on 29500)
  sbatch-offload-cpus       ds_config.json steps the optimizer on the host, and the job gives each rank fewer than
                            MIN_OFFLOAD_CPUS_PER_RANK CPUs (Slurm confines a task to what it asked for; CPU Adam runs
                            there)
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wizard.config.hostfile import parse_hostfile
from wizard.config.lint.base import ERROR, WARNING, as_int, finding, section
from wizard.config.lint.launcher import yaml_launcher
from wizard.config.parse import parse_json, parse_yaml
from wizard.config.sbatch import check_time
from wizard.errors import DswizError
from wizard.findings import Finding

# Below this many CPUs a rank, an offloaded optimizer step is several times what the node could give it: on one H200
# machine the step of two offloaded configs took 3.6x on 2 cores and 2x on 4 what it took on 16 (docs/measurements.md,
# "The offloaded step against the cores a rank gets").
MIN_OFFLOAD_CPUS_PER_RANK = 4
_DIRECTIVE_RE = re.compile(r"^#SBATCH\s+(.*)$")
_SHORT = {"-N": "nodes", "-n": "ntasks", "-c": "cpus-per-task", "-G": "gpus", "-t": "time", "-p": "partition"}


def looks_like_sbatch(name: str, text: str) -> bool:
    """A batch script by name (``*.sbatch``) or by content: a shebang and at least one ``#SBATCH`` line."""
    if name.lower().endswith(".sbatch"):
        return True
    lines = text.splitlines()
    return bool(lines) and lines[0].startswith("#!") and any(_DIRECTIVE_RE.match(ln) for ln in lines)


@dataclass(frozen=True)
class BatchScript:
    """The ``#SBATCH`` options sbatch reads (long names, first value wins as in sbatch), the line of each, the
    directives it ignores, and the script's commands."""

    options: dict[str, str]
    lines: dict[str, int]
    ignored: tuple[int, ...]
    body: str

    def count(self, name: str) -> int | None:
        """A count option as a number: ``2``, ``2-4`` (the minimum), ``a100:4`` (the count after the type)."""
        value = self.options.get(name)
        if value is None:
            return None
        m = re.match(r"^(\d+)", value.rsplit(":", 1)[-1])  # a100:4 -> 4; 2-4 (min-max) -> 2
        return int(m.group(1)) if m else None


def _options_of(words: list[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            key, eq, value = word[2:].partition("=")
            if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
                value, i = words[i + 1], i + 1
            out.append((key, value))
        elif word[:2] in _SHORT:
            value = word[2:]
            if not value and i + 1 < len(words):
                value, i = words[i + 1], i + 1
            out.append((_SHORT[word[:2]], value.lstrip("=")))
        i += 1
    return out


def parse_batch_script(text: str) -> BatchScript:
    options: dict[str, str] = {}
    lines: dict[str, int] = {}
    ignored: list[int] = []
    body: list[str] = []
    started = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        m = _DIRECTIVE_RE.match(line)
        if m and started:
            ignored.append(number)
        elif m:
            try:
                words = shlex.split(m.group(1), comments=True)
            except ValueError:
                words = m.group(1).split()
            for key, value in _options_of(words):
                options.setdefault(key, value)
                lines.setdefault(key, number)
        elif line and not line.startswith("#"):
            started = True
            body.append(raw)
    return BatchScript(options, lines, tuple(ignored), "\n".join(body))


@dataclass(frozen=True)
class PlanBeside:
    """What the files beside the script say the job is (None: not known from them)."""

    nodes: int | None = None
    slots: int | None = None  # the hostfile's slots on its first host
    world_size: int | None = None  # from the DeepSpeed JSON's train_batch_size / (micro x accumulation)
    launcher: str | None = (
        None  # the multi-node launcher accelerate.yaml names (dswiz launch starts that one)
    )
    offloaded: str | None = None  # what ds_config.json puts on the host, in words ("the optimizer")


def plan_beside(directory: Path) -> PlanBeside:
    nodes = slots = world = launcher = offloaded = None
    hostfile = directory / "hostfile"
    if hostfile.is_file():
        parsed = parse_hostfile(hostfile.read_text(encoding="utf-8", errors="replace"))
        if parsed.hosts:
            nodes, slots = len(parsed.hosts), parsed.hosts[0][1]
    ds = directory / "ds_config.json"
    if ds.is_file():
        cfg, problem = parse_json(ds.read_text(encoding="utf-8", errors="replace"))
        if problem is None and isinstance(cfg, dict):
            world = _world_from_batch(cfg)
            offloaded = _offloaded(cfg)
    accelerate = directory / "accelerate.yaml"
    if accelerate.is_file():
        raw, problem = parse_yaml(accelerate.read_text(encoding="utf-8", errors="replace"))
        launcher = yaml_launcher(raw) if problem is None else None
    return PlanBeside(nodes, slots, world, launcher, offloaded)


def _offloaded(cfg: dict[str, Any]) -> str | None:
    """ "the optimizer" where a DeepSpeed config steps it on the host (offloaded to the CPU or NVMe: CPU Adam steps
    either), else None."""
    device = section(cfg, "zero_optimization", "offload_optimizer").get("device")
    return "the optimizer" if device in ("cpu", "nvme") else None


def _world_from_batch(cfg: dict[str, Any]) -> int | None:
    total = as_int(cfg.get("train_batch_size"))
    micro = as_int(cfg.get("train_micro_batch_size_per_gpu"))
    accumulation = as_int(cfg.get("gradient_accumulation_steps", 1))
    if not total or not micro or not accumulation or total % (micro * accumulation):
        return None
    return total // (micro * accumulation)


def lint_sbatch_text(text: str, *, name: str = "job.sbatch", plan: PlanBeside | None = None) -> list[Finding]:
    """Every rule of the module docstring; ``plan``: what the files beside the script say (None: nothing)."""
    script = parse_batch_script(text)
    plan = plan or PlanBeside()
    at = lambda key: f"{name}:{script.lines[key]}" if key in script.lines else name  # noqa: E731
    out = [
        finding(
            WARNING,
            "sbatch-directive-ignored",
            f"#SBATCH on line {number} comes after the first command",
            "sbatch reads #SBATCH options only before the first command: this one is a comment",
            "move every #SBATCH line up, directly below the #! line",
            f"{name}:{number}",
        )
        for number in script.ignored
    ]
    if "time" in script.options:
        try:
            check_time(script.options["time"])
        except DswizError as e:
            out.append(
                finding(ERROR, "sbatch-time", e.problem, "sbatch refuses the job", e.fix or "", at("time"))
            )
    out += _count_findings(script, plan, at)
    out += _launch_findings(script, plan, at)
    return out


def _count_findings(script: BatchScript, plan: PlanBeside, at: Any) -> list[Finding]:
    out: list[Finding] = []
    nodes = script.count("nodes")
    gpus = script.count("gpus-per-node")
    if nodes is None and (plan.nodes or 1) > 1:
        out.append(
            finding(
                ERROR,
                "sbatch-no-nodes",
                f"the plan has {plan.nodes} nodes but the script asks for no --nodes",
                "Slurm then allocates one node, and the other node ranks never start",
                f"add `#SBATCH --nodes={plan.nodes}`",
                at("nodes"),
            )
        )
    if nodes is not None and plan.nodes is not None and nodes != plan.nodes:
        out.append(
            finding(
                ERROR,
                "sbatch-node-count",
                f"--nodes={nodes} but the hostfile beside it lists {plan.nodes} hosts",
                "the launcher starts the plan's node ranks; the batch size was planned for that many nodes",
                f"set `#SBATCH --nodes={plan.nodes}`, or write the configs again for {nodes} nodes",
                at("nodes"),
            )
        )
    if gpus is not None and plan.slots is not None and gpus != plan.slots:
        out.append(
            finding(
                ERROR,
                "sbatch-gpu-count",
                f"--gpus-per-node={gpus} but the hostfile gives every node {plan.slots} slots",
                "the launcher starts one rank per slot: ranks without a GPU, or GPUs left idle",
                f"set `#SBATCH --gpus-per-node={plan.slots}`",
                at("gpus-per-node"),
            )
        )
    per_node = gpus if gpus is not None else plan.slots
    if per_node is not None and plan.world_size is not None:
        world = (nodes or 1) * per_node
        if world != plan.world_size:
            out.append(
                finding(
                    ERROR,
                    "sbatch-world-size",
                    f"the job starts {nodes or 1} x {per_node} = {world} ranks, but ds_config.json's batch "
                    f"sizes are for {plan.world_size}",
                    "DeepSpeed stops: train_batch_size is not equal to micro_batch_per_gpu * "
                    "gradient_acc_step * world_size",
                    f"ask for nodes x GPUs per node = {plan.world_size}, or write the configs again for {world}",
                    at("nodes"),
                )
            )
    return out


def _launch_findings(script: BatchScript, plan: PlanBeside, at: Any) -> list[Finding]:
    out: list[Finding] = []
    body = script.body
    nodes = script.count("nodes") or plan.nodes or 1
    ranks = script.count("gpus-per-node") or plan.slots
    tasks = script.count("ntasks-per-node")
    named = re.search(r"--launcher[ =](\w+)", body)  # DeepSpeed's runner in the script, else dswiz launch's
    launcher = named.group(1) if named else plan.launcher
    if launcher == "slurm" and ranks and (tasks or 1) < ranks:
        out.append(
            finding(
                ERROR,
                "sbatch-tasks-per-node",
                f"DeepSpeed's slurm launcher starts {ranks} ranks per node, but the job has "
                f"{tasks or 1} task slot(s) per node",
                "its srun -n <ranks> asks for more tasks than the allocation holds and fails",
                f"set `#SBATCH --ntasks-per-node={ranks}`",
                at("ntasks-per-node"),
            )
        )
    if nodes > 1 and launcher == "pdsh":
        out.append(
            finding(
                WARNING,
                "sbatch-ssh-launcher",
                "the job starts its nodes with DeepSpeed's pdsh launcher",
                "pdsh reaches the other nodes over ssh, which many clusters do not allow between compute nodes",
                "use the nossh or slurm launcher: dswiz config --launcher-mode nossh ... writes such a job.sbatch",
                at("nodes"),
            )
        )
    if nodes > 1:
        out += _master_findings(body, at)
    out += _offload_cpu_findings(script, plan, ranks, at)
    return out


def _offload_cpu_findings(script: BatchScript, plan: PlanBeside, ranks: int | None, at: Any) -> list[Finding]:
    """An offloading job whose ranks get fewer than MIN_OFFLOAD_CPUS_PER_RANK CPUs each: --cpus-per-gpu, else
    --cpus-per-task over the ranks each task starts (Slurm's default: one CPU a task). A bare --exclusive gives the
    node."""
    whole_node = script.options.get("exclusive") == ""  # --exclusive=user / mcs / topo share the node's CPUs
    if not plan.offloaded or not ranks or whole_node:
        return []
    nodes = script.count("nodes") or plan.nodes or 1
    total = script.count("ntasks")
    tasks = script.count("ntasks-per-node") or (-(-total // nodes) if total else 1)
    if "cpus-per-gpu" in script.options:
        per_rank, key = float(script.count("cpus-per-gpu") or 1), "cpus-per-gpu"
        fix = f"`#SBATCH --cpus-per-gpu={MIN_OFFLOAD_CPUS_PER_RANK}` or more"
    else:
        per_rank, key = (script.count("cpus-per-task") or 1) * tasks / ranks, "cpus-per-task"
        needed = MIN_OFFLOAD_CPUS_PER_RANK * max(1, ranks // tasks)
        fix = f"`#SBATCH --cpus-per-task={needed}` or more ({MIN_OFFLOAD_CPUS_PER_RANK} a rank"
        fix += f" for the {ranks // tasks} ranks each task starts)" if ranks > tasks else ")"
    if per_rank >= MIN_OFFLOAD_CPUS_PER_RANK:
        return []
    return [
        finding(
            WARNING,
            "sbatch-offload-cpus",
            f"ds_config.json puts {plan.offloaded} on the host, but the job gives each rank {per_rank:g} CPU(s)",
            "Slurm confines a task to the CPUs it asks for, and CPU Adam steps on them: an offloaded step took 3.6x "
            "on 2 cores what it took on 16",
            f"give each rank more of the node's cores, if it has them: {fix}",
            at(key) if key in script.lines else at("nodes"),
        )
    ]


def _master_findings(body: str, at: Any) -> list[Finding]:
    out: list[Finding] = []
    if not re.search(r"\bMASTER_ADDR=|--master[-_]addr\b|--main_process_ip\b", body):
        out.append(
            finding(
                ERROR,
                "sbatch-no-master-addr",
                "nothing in the script sets MASTER_ADDR",
                "every rank must reach node 0's address; without it they wait for a host that was never named",
                'add: export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"',
                at("nodes"),
            )
        )
    if not re.search(r"\bMASTER_PORT=|--master[-_]port\b|--main_process_port\b", body):
        out.append(
            finding(
                WARNING,
                "sbatch-no-master-port",
                "nothing in the script sets MASTER_PORT",
                "every job then meets on port 29500: two jobs sharing a node collide",
                "export MASTER_PORT to a port free on node 0 (dswiz config writes a job.sbatch that picks one)",
                at("nodes"),
            )
        )
    return out
