"""The launch command as data: ``build_command(spec) -> (argv, env_changes)``. Pure: no files read, nothing run.

Part of the wizard core because two layers build the same command: ``dswiz config`` writes it into launch.sh
(``wizard.config.render``) and ``dswiz launch`` runs it (``runner.job``), so the two cannot disagree.

Like accelerate's ``prepare_deepspeed_cmd_env``, the command is built first and executed elsewhere
(``runner.job``), so it can be printed (``dswiz launch --dry-run``), tested, and recorded in run.json.

The DeepSpeed launcher is run as ``<python> -u -m deepspeed.launcher.runner`` with the *training environment's*
python: dswiz and DeepSpeed need not share an environment. The runner starts ``launch.py`` and the ranks with
that same interpreter (DeepSpeed 0.19.8: ``deepspeed/launcher/runner.py`` ``main`` builds
``[sys.executable, "-u", "-m", "deepspeed.launcher.launch", ...]``, and ``launcher/launch.py`` ``main`` starts
each rank with ``sys.executable``).

The configs the job sees are copies in the run directory (``config_copy_path``), made observable by
``observable_ds_config`` (steps_per_print, log_level, a csv monitor into the run dir); the originals are never
modified.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from pathlib import PurePath
from typing import Any, NamedTuple

import yaml

from wizard.errors import DswizError

# The run directory's layout as far as the launched command sees it (the rest of the layout: runner.rundir).
CONFIG_DIR = "config"
RANK_LOGS_DIR = "logs/ranks"
CSV_DIR = "csv"
CSV_JOB_NAME = "dswiz"

LAUNCHERS = ("deepspeed", "accelerate", "torchrun")
# DeepSpeed's --launcher backends (deepspeed/launcher/constants.py) plus "nossh": one launcher per node, no ssh.
MULTINODE_LAUNCHERS = ("pdsh", "openmpi", "mpich", "impi", "mvapich", "slurm", "nossh")
# Reject --include/--exclude: DeepSpeed 0.19.8 deepspeed/launcher/multinode_runner.py, the get_cmd of
# OpenMPIRunner, MPICHRunner, IMPIRunner and MVAPICHRunner ("backend does not support worker include/exclusion").
MPI_LAUNCHERS = ("openmpi", "mpich", "impi", "mvapich")
DEFAULT_MASTER_PORT = 29500  # deepspeed.constants.TORCH_DISTRIBUTED_DEFAULT_PORT
DEFAULT_STEPS_PER_PRINT = 10
# A rendezvous port, on every command that takes one (below 1024 only root may listen).
PORTS = (1024, 65535)
PORT_FIX = f"choose a port between {PORTS[0]} and {PORTS[1]}"
_CONFIG_ARG_RE = re.compile(r"^[A-Za-z][\w-]*$")
# NODE_SPEC[@NODE_SPEC...], NODE_SPEC = NAME[:SLOT[,SLOT...]] (deepspeed/launcher/runner.py parse_resource_filter)
_FILTER_RE = re.compile(r"^[^@:\s]+(:\d+(,\d+)*)?(@[^@:\s]+(:\d+(,\d+)*)?)*$")


@dataclass(frozen=True)
class LaunchSpec:
    """Everything that decides the launch command. Paths are as the user gave them (absolute is safest)."""

    script: str
    run_dir: str
    script_args: tuple[str, ...] = ()
    launcher: str = "deepspeed"  # deepspeed | accelerate | torchrun
    python: str = "python3"  # the training environment's interpreter
    ds_config: str | None = None  # the user's DeepSpeed JSON (launched as a copy in the run dir)
    accelerate_config: str | None = None  # the user's accelerate YAML (launched as a copy)
    # How the script takes its DeepSpeed config: "deepspeed_config" (--deepspeed_config FILE, DeepSpeed's own
    # add_config_arguments), "deepspeed" (HF Trainer scripts), any other NAME (--NAME FILE), "" (not passed).
    # None: the launcher's default ("" for accelerate, which hands the config over through its YAML).
    config_arg: str | None = None
    # False: DeepSpeed's --no_local_rank, the script gets no --local_rank=N (LOCAL_RANK is in its environment either
    # way: deepspeed/launcher/launch.py, main, 0.19.8). Only where passes_local_rank: refused elsewhere.
    local_rank_arg: bool = True
    nproc: int | None = None  # processes (GPUs) per node
    include: str | None = None  # DeepSpeed resource filter, e.g. "localhost:0,2"
    exclude: str | None = None
    hostfile: str | None = None  # multi-node: "<host> slots=<n>" per line
    num_nodes: int | None = None  # hosts to use from the hostfile (torchrun: required with a hostfile)
    multinode_launcher: str = "pdsh"  # one of MULTINODE_LAUNCHERS
    launcher_args: str | None = None  # passed to the multi-node backend as one string (--launcher_args)
    node_rank: int | None = None  # nossh / torchrun / accelerate: which node this launcher is
    master_addr: str | None = None
    master_port: int | None = None
    each_rank_log: bool = True  # DeepSpeed --enable_each_rank_log into <run>/logs/ranks
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES of the calling environment, when set
    env: tuple[tuple[str, str | None], ...] = ()  # extra environment changes (preflight fixes); None unsets
    # False: the job reads the configs where they are, with no run directory (launch.sh, written by dswiz config).
    copy_configs: bool = True
    # A shell variable holding this node's rank, instead of node_rank (launch.sh runs on every node: "$NODE_RANK").
    node_rank_var: str | None = None
    # A shell variable holding the rendezvous port, instead of master_port (job.sbatch picks one when it starts).
    master_port_var: str | None = None
    # The .deepspeed_env other nodes get (DS_ENV_FILE) when it is used as it is; None: the run directory's copy.
    deepspeed_env_file: str | None = None

    @property
    def multinode(self) -> bool:
        return self.hostfile is not None

    @property
    def ssh_multinode(self) -> bool:
        """A launcher that reaches the other nodes itself (pdsh/ssh, MPI, slurm), as opposed to one per node."""
        return self.multinode and self.launcher == "deepspeed" and self.multinode_launcher != "nossh"


class LaunchCommand(NamedTuple):
    """``argv`` to execute and the environment changes to apply on top of the caller's (``None`` = unset)."""

    argv: tuple[str, ...]
    env: dict[str, str | None]

    def shell(self) -> str:
        """One copy-pasteable line: ``VAR=value … argv`` (unset variables as ``env -u``)."""
        unset = [f"-u {shlex.quote(k)}" for k, v in sorted(self.env.items()) if v is None]
        sets = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()) if v is not None]
        prefix = (["env", *unset] if unset else []) + sets
        return " ".join([*prefix, *(shlex.quote(a) for a in self.argv)])


# ---------------------------------------------------------------------------------------------- run-dir paths


def config_copy_path(spec: LaunchSpec, original: str) -> str:
    """Where the launched copy of ``original`` lives: ``<run>/config/<basename>`` (the original itself when the
    spec copies no configs)."""
    if not spec.copy_configs:
        return original
    return str(PurePath(spec.run_dir, CONFIG_DIR, PurePath(original).name))


def rank_logs_dir(spec: LaunchSpec) -> str:
    return str(PurePath(spec.run_dir, RANK_LOGS_DIR))


def csv_dir(spec: LaunchSpec) -> str:
    return str(PurePath(spec.run_dir, CSV_DIR))


def deepspeed_env_path(spec: LaunchSpec) -> str:
    if spec.deepspeed_env_file is not None:
        return spec.deepspeed_env_file
    return str(PurePath(spec.run_dir, CONFIG_DIR, "deepspeed_env"))


def runs_per_node(launcher: str, multinode_launcher: str | None) -> bool:
    """Whether a multi-node launch runs once on every node, each told its rank (torchrun, accelerate's
    --machine_rank, DeepSpeed's runner with --no_ssh), rather than once on the first host."""
    return launcher in ("torchrun", "accelerate") or (
        launcher == "deepspeed" and multinode_launcher == "nossh"
    )


def node_rank_word(spec: LaunchSpec) -> str:
    """This node's rank as a command word: the number, or the shell variable that holds it."""
    if spec.node_rank is not None:
        return str(spec.node_rank)
    return f"${spec.node_rank_var}"


def master_port_words(spec: LaunchSpec, flag: str) -> list[str]:
    """``[flag, PORT]`` (the number, or the shell variable that holds it), or nothing when no port is set."""
    if spec.master_port is not None:
        return [flag, str(spec.master_port)]
    if spec.master_port_var is not None:
        return [flag, f"${spec.master_port_var}"]
    return []


def effective_config_arg(spec: LaunchSpec) -> str:
    if spec.config_arg is not None:
        return spec.config_arg
    return "" if spec.launcher == "accelerate" else "deepspeed_config"


def launched_ds_config(spec: LaunchSpec) -> str | None:
    """The DeepSpeed JSON the job reads (the run-dir copy), or None when there is none."""
    return config_copy_path(spec, spec.ds_config) if spec.ds_config else None


# ------------------------------------------------------------------------------------------- config copies


def observable_ds_config(
    config: dict[str, Any], *, csv_output_path: str, steps_per_print: int = DEFAULT_STEPS_PER_PRINT
) -> tuple[dict[str, Any], list[str]]:
    """A copy of ``config`` whose job can be watched, and the list of changes in words.

    DeepSpeed's ranks log at WARNING and ``steps_per_print`` defaults to None (0.19.8 ``deepspeed/runtime/
    constants.py``: ``STEPS_PER_PRINT_DEFAULT = None``, ``LOG_LEVEL_DEFAULT = None``), so nothing shows unless
    both are set. A value the user chose is kept. The csv monitor always points into the run dir
    (the monitor reads it there). The input dict is not modified.
    """
    out = dict(config)
    changes: list[str] = []
    if out.get("steps_per_print") in (None, 0):
        out["steps_per_print"] = steps_per_print
        changes.append(f"steps_per_print: {steps_per_print} (progress lines every {steps_per_print} steps)")
    if "log_level" not in out:
        out["log_level"] = "info"  # read since DeepSpeed 0.19.3; older versions ignore unknown top-level keys
        changes.append('log_level: "info" (DeepSpeed logs throughput only at info)')
    wanted = {"enabled": True, "output_path": csv_output_path, "job_name": CSV_JOB_NAME}
    current = out.get("csv_monitor")
    if not isinstance(current, dict) or any(current.get(k) != v for k, v in wanted.items()):
        merged = {**(current if isinstance(current, dict) else {}), **wanted}
        out["csv_monitor"] = merged
        changes.append(f"csv_monitor: into {csv_output_path}/{CSV_JOB_NAME}")
    return out, changes


def launched_accelerate_yaml(yaml_text: str, *, ds_config_copy: str | None) -> tuple[str, list[str]]:
    """The accelerate YAML to launch with: ``deepspeed_config_file`` pointed at the observable DeepSpeed copy.

    Raises DswizError when the text is not a YAML mapping. A YAML in plugin mode (no deepspeed_config_file) is
    launched unchanged: accelerate builds that DeepSpeed config itself, so dswiz cannot add its monitor to it.
    """
    try:
        data = yaml.safe_load(yaml_text)
    except yaml.YAMLError as e:
        raise DswizError(
            f"the accelerate config is not valid YAML ({e})", "fix the file, or regenerate it: dswiz config"
        ) from e
    if not isinstance(data, dict):
        raise DswizError(
            "the accelerate config is not a YAML mapping",
            "regenerate it with `dswiz config` or `accelerate config`",
        )
    changes: list[str] = []
    ds = data.get("deepspeed_config")
    if isinstance(ds, dict) and ds.get("deepspeed_config_file") and ds_config_copy:
        if ds["deepspeed_config_file"] != ds_config_copy:
            data = {**data, "deepspeed_config": {**ds, "deepspeed_config_file": ds_config_copy}}
            changes.append(f"deepspeed_config_file: {ds_config_copy} (the observable copy)")
    elif isinstance(ds, dict):
        changes.append(
            "no deepspeed_config_file: accelerate builds the DeepSpeed config itself, so no progress lines or "
            "csv monitor can be added (write one with `dswiz config` to get them)"
        )
    return yaml.safe_dump(data, sort_keys=True), changes


def accelerate_ds_config_file(yaml_text: str) -> str | None:
    """The ``deepspeed_config.deepspeed_config_file`` an accelerate YAML names, or None."""
    try:
        data = yaml.safe_load(yaml_text)
    except yaml.YAMLError:
        return None
    ds = data.get("deepspeed_config") if isinstance(data, dict) else None
    value = ds.get("deepspeed_config_file") if isinstance(ds, dict) else None
    return str(value) if value else None


def deepspeed_env_text(existing: list[str], env: dict[str, str]) -> str:
    """The ``.deepspeed_env`` the ssh/MPI launchers export on every node: the user's lines, then ours.

    DeepSpeed exports only variables with a few prefixes (0.19.8 ``deepspeed/launcher/runner.py``: ``EXPORT_ENVS``
    MLFLOW/PYTHON/MV2/UCX plus the accelerator's, NCCL on CUDA) and this file to other nodes, so a fix such as TORCH_CUDA_ARCH_LIST has to travel through it.
    """
    lines = [ln.rstrip("\n") for text in existing for ln in text.splitlines() if "=" in ln]
    lines += [f"{k}={v}" for k, v in sorted(env.items())]
    return "\n".join(lines) + "\n"


def split_config_arg(script_args: tuple[str, ...], config_arg: str) -> tuple[str | None, tuple[str, ...]]:
    """Find ``--<config_arg> FILE`` (or ``=FILE``) in the script's arguments: (FILE, the other arguments).

    Lets ``dswiz launch train.py --deepspeed_config ds.json`` work without --config: the named file becomes the
    config and the job gets the run-dir copy instead.
    """
    if not config_arg:
        return None, script_args
    flag = f"--{config_arg}"
    rest: list[str] = []
    found: str | None = None
    i = 0
    while i < len(script_args):
        arg = script_args[i]
        if arg == flag and i + 1 < len(script_args) and not script_args[i + 1].startswith("--"):
            found = script_args[i + 1]
            i += 2
            continue
        if arg.startswith(flag + "="):
            found = arg[len(flag) + 1 :]
            i += 1
            continue
        rest.append(arg)
        i += 1
    return found, tuple(rest)


# --------------------------------------------------------------------------------------------- the command


def passes_local_rank(spec: LaunchSpec) -> bool:
    """Can the launch put --local_rank=N on the script's command line? DeepSpeed's runner does whenever it starts
    the ranks through its own launcher: on one node (a one-host hostfile, --num_nodes 1 or a filter naming one host
    too, whatever the backend), and on every node with pdsh or nossh. Its MPI and slurm backends start the script
    directly and ignore --no_local_rank (deepspeed/launcher/runner.py main, launcher/multinode_runner.py, DeepSpeed
    0.19.8), so it is passed to the runner for all of them; accelerate and torchrun never pass --local_rank."""
    return spec.launcher == "deepspeed"


def validate(spec: LaunchSpec) -> None:
    """Raise DswizError (problem + fix) for a spec no launcher would accept. Called by build_command."""
    if spec.launcher not in LAUNCHERS:
        raise DswizError(f"unknown launcher {spec.launcher!r}", f"use one of: {', '.join(LAUNCHERS)}")
    if spec.multinode_launcher not in MULTINODE_LAUNCHERS:
        raise DswizError(
            f"unknown multi-node launcher {spec.multinode_launcher!r}",
            f"use one of: {', '.join(MULTINODE_LAUNCHERS)}",
        )
    if spec.nproc is not None and spec.nproc < 1:
        raise DswizError(f"--nproc must be at least 1 (got {spec.nproc})", "pass --nproc 1 or more")
    if spec.include and spec.exclude:
        raise DswizError(
            "--include and --exclude cannot be combined (DeepSpeed rejects it)", "keep only one of them"
        )
    for name, value in (("--include", spec.include), ("--exclude", spec.exclude)):
        if value is None:
            continue
        if spec.nproc is not None:
            raise DswizError(
                f"{name} cannot be combined with --nproc (DeepSpeed rejects it)",
                f"drop --nproc: {name} already says which GPUs",
            )
        if not _FILTER_RE.match(value):
            raise DswizError(
                f"{name} {value!r} is not a resource filter",
                f"write HOST[:SLOT,SLOT...][@HOST...], e.g. {name} localhost:0,1",
            )
        if spec.launcher != "deepspeed":
            raise DswizError(
                f"{name} works only with the DeepSpeed launcher", "use --nproc, or --launcher deepspeed"
            )
        if spec.ssh_multinode and spec.multinode_launcher in MPI_LAUNCHERS:
            raise DswizError(
                f"the {spec.multinode_launcher} launcher rejects {name} (DeepSpeed's MPI backends take no filter)",
                "drop the filter and list exactly the hosts and slots to use in the hostfile",
            )
    if spec.launcher_args and not spec.ssh_multinode:
        used_by = "DeepSpeed's runner reaching other nodes (pdsh, MPI, slurm), with a hostfile"
        if spec.launcher != "deepspeed":
            this = f"{spec.launcher} has no such backend"
        elif not spec.multinode:
            this = "this launch has no hostfile"
        else:
            this = "nossh starts one launcher per node"
        raise DswizError(
            f"--launcher-args goes to {used_by}; {this}, so it would be ignored", "drop --launcher-args"
        )
    if not spec.local_rank_arg and not passes_local_rank(spec):
        raise DswizError(
            f"--no-local-rank would change nothing: {spec.launcher} never passes --local_rank (the ranks find "
            "theirs in LOCAL_RANK)",
            "drop --no-local-rank",
        )
    if spec.config_arg and not _CONFIG_ARG_RE.match(spec.config_arg):
        raise DswizError(
            f"--config-arg {spec.config_arg!r} is not an argument name",
            "pass the name without dashes: deepspeed_config, deepspeed, or your script's own (e.g. ds_config)",
        )
    if spec.master_port is not None and not PORTS[0] <= spec.master_port <= PORTS[1]:
        raise DswizError(f"--master-port {spec.master_port} is not a port dswiz uses", PORT_FIX)
    if spec.node_rank is not None and spec.node_rank < 0:
        raise DswizError(f"--node-rank {spec.node_rank} is negative", "node ranks count from 0")
    # accelerate may take its --machine_rank from the YAML instead
    per_node = runs_per_node(spec.launcher, spec.multinode_launcher) and spec.launcher != "accelerate"
    needs_node_rank = spec.multinode and per_node
    if needs_node_rank:
        if spec.node_rank is None and spec.node_rank_var is None:
            raise DswizError(
                "a launch with one launcher per node needs this node's rank",
                "pass --node-rank K (0 on the node that hosts --master-addr), or --simulate-nodes to start "
                "every node here",
            )
        if not spec.master_addr:
            raise DswizError(
                "a launch with one launcher per node needs the address of node 0",
                "pass --master-addr ADDR (the IP of node rank 0; 127.0.0.1 when all nodes are this machine)",
            )
    if spec.node_rank is not None and not spec.multinode and spec.launcher != "accelerate":
        raise DswizError("--node-rank needs a multi-node launch", "pass --hostfile FILE, or drop --node-rank")
    if spec.launcher == "accelerate" and not spec.accelerate_config:
        raise DswizError(
            "the accelerate launcher needs an accelerate YAML config",
            "pass --config with a folder or file that holds it (dswiz config writes accelerate.yaml), or "
            "--launcher deepspeed",
        )
    if spec.launcher == "torchrun" and spec.multinode and not spec.num_nodes:
        raise DswizError(
            "torchrun needs the number of nodes", "pass a hostfile (one line per node) or --num-nodes N"
        )
    if effective_config_arg(spec) and not spec.ds_config:
        raise DswizError(
            f"the script takes its DeepSpeed config through --{effective_config_arg(spec)}, but no config was given",
            f"pass --config DIR|FILE, or --config-arg '' when {spec.script} finds its config itself",
        )


def build_command(spec: LaunchSpec) -> LaunchCommand:
    """The command that starts the job, and the environment changes it needs. Raises DswizError on a bad spec."""
    validate(spec)
    env: dict[str, str | None] = {"PYTHONUNBUFFERED": "1"}  # lines reach the log as they are printed
    if spec.launcher == "deepspeed":
        argv = _deepspeed_argv(spec)
        if spec.ssh_multinode and spec.env:
            # Only .deepspeed_env (and a few prefixes) reach the other nodes: the fixes travel through it.
            env["DS_ENV_FILE"] = deepspeed_env_path(spec)
    elif spec.launcher == "accelerate":
        argv = _accelerate_argv(spec)
    else:
        argv = _torchrun_argv(spec)
    env.update(dict(spec.env))
    return LaunchCommand(tuple(argv), env)


def node_specs(spec: LaunchSpec, nodes: int) -> list[LaunchSpec]:
    """One spec per node rank, for starting every node of a one-launcher-per-node job on this machine."""
    return [replace(spec, node_rank=k) for k in range(nodes)]


def _script_part(spec: LaunchSpec) -> list[str]:
    arg = effective_config_arg(spec)
    copy = launched_ds_config(spec)
    config = [f"--{arg}", copy] if arg and copy else []
    return [spec.script, *config, *spec.script_args]


def _device_list(spec: LaunchSpec) -> list[str] | None:
    if spec.visible_devices is None:
        return None
    ids = [d.strip() for d in spec.visible_devices.split(",") if d.strip()]
    return ids or None


def _deepspeed_argv(spec: LaunchSpec) -> list[str]:
    argv = [spec.python, "-u", "-m", "deepspeed.launcher.runner"]
    if spec.hostfile:
        argv += ["--hostfile", spec.hostfile]
        if spec.num_nodes:
            argv += ["--num_nodes", str(spec.num_nodes)]
        if spec.multinode_launcher == "nossh":
            argv += ["--no_ssh", "--node_rank", node_rank_word(spec)]
        else:
            argv += ["--launcher", spec.multinode_launcher]
            if spec.launcher_args:
                argv += ["--launcher_args", spec.launcher_args]
        if spec.nproc is not None:
            argv += ["--num_gpus", str(spec.nproc)]
    else:
        devices = _device_list(spec)
        if spec.nproc is not None and devices is not None and spec.include is None:
            # DeepSpeed drops CUDA_VISIBLE_DEVICES when --num_gpus is given and would use GPUs 0..N-1 instead of
            # the visible ones: name the visible ones explicitly.
            argv += ["--include", "localhost:" + ",".join(devices[: spec.nproc])]
        elif spec.nproc is not None:
            argv += ["--num_gpus", str(spec.nproc)]
    if spec.include:
        argv += ["--include", spec.include]
    if spec.exclude:
        argv += ["--exclude", spec.exclude]
    argv += _master_args(spec)
    if not spec.local_rank_arg:
        argv.append("--no_local_rank")
    if spec.each_rank_log:
        argv += ["--enable_each_rank_log", rank_logs_dir(spec)]
    return argv + _script_part(spec)


LOOPBACK = "127.0.0.1"


def _master_args(spec: LaunchSpec) -> list[str]:
    """--master_addr/--master_port (the DeepSpeed runner's and torchrun's spelling). On one node the rendezvous
    address is loopback, said explicitly: DeepSpeed's runner sets 127.0.0.1 itself only when no hostfile is found
    (deepspeed/launcher/runner.py, main, 0.19.8: a stray /job/hostfile would send it to ssh `hostname -I`).
    Ranks then connect over loopback; torch's TCPStore still listens on every interface (docs/reliability.md)."""
    addr = spec.master_addr or (None if spec.multinode else LOOPBACK)
    argv = ["--master_addr", addr] if addr else []
    return argv + master_port_words(spec, "--master_port")


def _accelerate_argv(spec: LaunchSpec) -> list[str]:
    assert spec.accelerate_config is not None  # validate() guarantees it
    argv = [spec.python, "-m", "accelerate.commands.launch"]
    argv += ["--config_file", config_copy_path(spec, spec.accelerate_config)]
    if spec.nproc is not None:
        nodes = spec.num_nodes or 1
        argv += ["--num_processes", str(spec.nproc * nodes)]  # accelerate counts processes over all machines
    if spec.num_nodes:
        argv += ["--num_machines", str(spec.num_nodes)]
    if spec.node_rank is not None or spec.node_rank_var is not None:
        argv += ["--machine_rank", node_rank_word(spec)]
    if spec.master_addr:
        argv += ["--main_process_ip", spec.master_addr]
    argv += master_port_words(spec, "--main_process_port")
    return argv + _script_part(spec)


def _torchrun_argv(spec: LaunchSpec) -> list[str]:
    argv = [spec.python, "-m", "torch.distributed.run"]
    argv += ["--nproc_per_node", str(spec.nproc or 1)]
    if spec.multinode:
        argv += ["--nnodes", str(spec.num_nodes), "--node_rank", node_rank_word(spec)]
    return argv + _master_args(spec) + _script_part(spec)
