"""`dswiz launch`: preflight, start the job through the DeepSpeed launcher (or accelerate / torchrun), stream it,
stop it cleanly, and say in words how it ended.

The command is built as data (``wizard.launch_command``), checked (``runner.preflight``), then run and supervised
(``runner.job``). Everything the run produced lands in its run directory (``runner.rundir``).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from runner.configdir import ConfigChoice
from wizard.cli_options import (
    FiniteFloat,
    defaulted_option,
    flag_option,
    no_history_option,
    no_local_rank_option,
    python_option,
)
from wizard.errors import DswizError, read_user_text
from wizard.findings import Finding, Severity
from wizard.hardware.report import HardwareReport
from wizard.launch_command import (
    DEFAULT_STEPS_PER_PRINT,
    LAUNCHERS,
    MULTINODE_LAUNCHERS,
    PORTS,
    LaunchSpec,
    passes_local_rank,
)

# The steps below import what they need inside (psutil, the job, preflight, the planner): `dswiz launch --help`
# and a bad flag answer without loading them.
if TYPE_CHECKING:
    from runner.job.sink import RunOutcome
    from runner.job.supervisor import Job
    from runner.job.terminal import TerminalSink
    from runner.preflight import PortReservation
    from runner.verdict import OomAdvisor
    from wizard.config.sidecar import PlanSidecar
    from wizard.history.record import Measurement

EPILOG = """\b
Examples:
  dswiz launch --config run1/ train.py --epochs 3
  dswiz launch --nproc 2 train.py --deepspeed_config ds.json
  dswiz launch --config run1/ --config-arg deepspeed hf_train.py --output_dir out   (HF Trainer scripts)
  dswiz launch --config run1/ --hostfile hosts --launcher-mode nossh --node-rank 0 --master-addr 10.0.0.1 train.py
  dswiz launch --dry-run --config run1/ train.py                                    (print the command only)

Everything after the script goes to the script, untouched. The run directory (run.json, logs/, config/, csv/)
is printed at the start and the end; `dswiz monitor` attaches to it.

Exit code: 0 when the job succeeded; else the failed rank's own code (128+N for a rank ended by signal N: 134 an
abort, 137 SIGKILL) where DeepSpeed's launcher or dswiz's death watch tells it, else the launcher's (torchrun,
accelerate, srun); 124 when --stall-timeout stopped it; 128+N when dswiz itself was stopped by signal N.
"""


@click.command(
    epilog=EPILOG,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--config",
    "config",
    metavar="DIR|FILE",
    help="Folder from `dswiz config`, a DeepSpeed JSON, or an accelerate YAML.",
)
@click.option("--nproc", type=int, metavar="N", help="Processes (GPUs) per node. Default: every visible GPU.")
@click.option("--include", metavar="FILTER", help="DeepSpeed resource filter, e.g. localhost:0,2.")
@click.option("--exclude", metavar="FILTER", help="DeepSpeed resource filter of GPUs not to use.")
@click.option("--launcher", type=click.Choice(LAUNCHERS), help="Default: deepspeed (accelerate for a YAML).")
@python_option(
    "The training environment's python. Default: this one if it has DeepSpeed, else python3 on PATH.",
    runs_here=False,
)
@click.option(
    "--config-arg",
    metavar="NAME",
    help="How the script takes the config: deepspeed_config (default), deepspeed (HF Trainer), any --NAME, or '' for none.",
)
@no_local_rank_option()
@click.option(
    "--hostfile", type=click.Path(dir_okay=False), help="Multi-node: '<host> slots=<gpus>' per line."
)
@click.option(
    "--launcher-mode",
    "--multinode-launcher",
    "launcher_mode",
    type=click.Choice((*MULTINODE_LAUNCHERS, "standard")),
    help="Multi-node backend: pdsh (ssh, default), openmpi, mpich, impi, mvapich, slurm, nossh (one launch per node), "
    "or standard (torchrun on every node: --launcher torchrun), as `dswiz config` and `dswiz check` name them.",
)
@click.option("--launcher-args", metavar="ARGS", help="Passed to the multi-node backend as one string.")
@click.option("--num-nodes", type=int, metavar="N", help="Use the first N hosts of the hostfile.")
@click.option(
    "--node-rank", type=int, metavar="K", help="nossh/torchrun: this node's rank (0 hosts the master)."
)
@click.option("--master-addr", metavar="ADDR", help="Address of node rank 0.")
@click.option(
    "--master-port",
    type=click.IntRange(*PORTS),
    metavar="PORT",
    help="Rendezvous port. Default: 29500, or a free one on a single node.",
)
@flag_option(
    "--simulate-nodes", help="nossh: start every node rank of the hostfile here, side by side (testing)."
)
@flag_option("--no-tui", help="Stream the log with a periodic status line instead of the dashboard.")
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False),
    help="Where this run's files go. Default: a new folder under ~/.local/state/dswiz/runs/.",
)
@defaulted_option(
    "--grace",
    FiniteFloat(min=0),
    5.0,
    "S",
    "Seconds between SIGINT and SIGTERM (and SIGTERM and SIGKILL) when stopping.",
)
@defaulted_option(
    "--status-every", FiniteFloat(min=0, min_open=True), 10.0, "S", "Seconds between status lines."
)
@click.option(
    "--stall-timeout",
    type=FiniteFloat(min=0, min_open=True),
    metavar="S",
    help="Stop the job when no new step comes for S seconds (counted from the last step seen: a job that never "
    "prints a step is never stopped); the verdict names the stall, exit code 124. Default: off (a stall is only "
    "reported, after 60 s).",
)
@flag_option(
    "--stop-leftovers",
    help="First stop the processes left running by earlier runs whose dswiz was killed (supervisor lost).",
)
@defaulted_option(
    "--steps-per-print",
    int,
    DEFAULT_STEPS_PER_PRINT,
    "N",
    "Progress-line interval set in the launched config when it sets none.",
)
@defaulted_option("--ssh-timeout", int, 10, "S", "Preflight ssh connect timeout per host.")
@flag_option(
    "--dry-run",
    help="Print the exact command and environment changes (the TORCH_CUDA_ARCH_LIST fix included); start nothing, "
    "write nothing. The preflight's checks of the GPUs, ports, hosts and config run at launch only.",
)
@no_history_option(
    "Leave the run history out: do not record this run (`dswiz history`; DSWIZ_HISTORY=off turns it off always)."
)
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def launch_cmd(**opts: Any) -> int:
    """Check, start and watch a DeepSpeed training job; stop it cleanly; give the verdict."""
    if "--dry-run" in opts["script_args"] and not opts.get("dry_run"):
        # everything after the script is the script's: a --dry-run there starts the job (new-user walk)
        click.echo(
            f"note: --dry-run comes after the script, so {opts['script']} gets it and the job starts; put it before "
            "the script to print the command without running it",
            err=True,
        )
    return run_launch(LaunchRequest(**_standard_mode(opts)))


def _standard_mode(opts: dict[str, Any]) -> dict[str, Any]:
    """--launcher-mode standard, the name `dswiz config` writes a folder for: no DeepSpeed runner, torchrun on
    every node, which is what --launcher torchrun runs (wizard/config/launchers.py)."""
    if opts.get("launcher_mode") != "standard":
        return opts
    if opts.get("launcher") not in (None, "torchrun"):
        raise DswizError(
            f"--launcher-mode standard runs torchrun on every node, and --launcher {opts['launcher']} asks for "
            f"{opts['launcher']}",
            f"drop --launcher {opts['launcher']} (or --launcher-mode standard, to use {opts['launcher']})",
        )
    return {**opts, "launcher": "torchrun", "launcher_mode": None}


launch = launch_cmd  # the name wizard.cli looks up ("runner.cli_launch:launch")


@dataclasses.dataclass(frozen=True)
class LaunchRequest:
    """`dswiz launch`'s flags as given (None: not given), named as click names them."""

    script: str
    script_args: tuple[str, ...] = ()
    config: str | None = None
    nproc: int | None = None
    include: str | None = None
    exclude: str | None = None
    launcher: str | None = None
    python: str | None = None
    config_arg: str | None = None
    no_local_rank: bool | None = None  # None: as the --config folder's launch.sh says, else pass --local_rank
    hostfile: str | None = None
    launcher_mode: str | None = None
    launcher_args: str | None = None
    num_nodes: int | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    simulate_nodes: bool = False
    no_tui: bool = False
    run_dir: str | None = None
    grace: float = 5.0
    status_every: float = 10.0
    stall_timeout: float | None = None
    stop_leftovers: bool = False
    steps_per_print: int = DEFAULT_STEPS_PER_PRINT
    ssh_timeout: int = 10
    dry_run: bool = False
    no_history: bool = False


def run_launch(request: LaunchRequest) -> int:
    """Resolve the config and the nodes, preflight, start, watch; the exit code says how the job ended."""
    if request.stall_timeout is not None and not request.stall_timeout > 0:
        raise DswizError(
            f"--stall-timeout {request.stall_timeout} is not a number of seconds",
            "pass seconds greater than 0, e.g. --stall-timeout 600",
        )
    resolved = resolve_launch(request)
    if request.dry_run:
        from runner.preflight import check_arch_list

        # The environment changes the launch makes on its own (pure functions of the environment and the plan), so
        # that the printed command is the one that would run.
        findings, fixes = check_arch_list(os.environ)
        allocator = plan_env(load_plan_sidecar(resolved.choice), os.environ)
        specs = _with_env_fixes(resolved.specs, {**fixes, **allocator})
        notes = [f"{f.what}; {f.why}" for f in findings] + allocator_notes(allocator)
        _print_dry_run(list(specs), resolved.ds_config, request.steps_per_print, notes)
        if request.no_local_rank is None and not resolved.spec.local_rank_arg:
            click.echo(
                f"# --no_local_rank: as {resolved.choice.folder}/launch.sh has it (dswiz config --no-local-rank); "
                "--local-rank passes --local_rank again"
            )
        return 0
    check_lost_runs(Path(resolved.spec.run_dir).parent, stop=request.stop_leftovers, grace_s=request.grace)
    checked = run_preflight(resolved)
    job, sink = start_job(checked)
    entry = None if request.no_history else history_entry(checked, job)
    dashboard = not request.no_tui and sys.stdin.isatty() and sys.stdout.isatty()
    outcome = watch_job(job, sink, dashboard=dashboard)
    if entry is not None:
        from runner.run_history import entry_at_end, record

        warning = record(entry_at_end(entry, outcome.record))
        if warning:
            click.echo(warning, err=True)
    return outcome.exit_code


def history_entry(checked: CheckedLaunch, job: Job) -> Measurement | None:
    """The run history's entry for this launch, written now (outcome "running") so a killed launch keeps it;
    None when the history is off or could not be written (a warning says why; the launch goes on)."""
    from runner.job.session import environ_with
    from runner.run_history import entry_at_start, record
    from wizard import alloc_conf
    from wizard.history.record import hardware_fingerprint

    prepared = job.prepared
    # the environment start_in_new_session gives the job
    job_environ = environ_with(prepared.commands[0].env, os.environ)
    entry = entry_at_start(
        run_id=prepared.run_id,
        run_dir=prepared.run_dir,
        hardware=hardware_fingerprint(checked.hardware),
        sidecar=checked.sidecar,
        applies=checked.use.applies,
        script=prepared.specs[0].script,
        ds_config=checked.resolved.ds_config,
        expandable_segments=alloc_conf.expandable_segments(job_environ),
    )
    warning = record(entry)
    if warning:
        click.echo(warning, err=True)
        return None
    return entry


# ----------------------------------------------------------------------------------- step 1: what to launch


@dataclasses.dataclass(frozen=True)
class ConfigUse:
    """What the launch takes from --config and the script's own arguments."""

    launcher: str
    nproc: int | None
    config_arg: str | None
    ds_path: Path | None
    ds_config: dict[str, Any] | None
    script_args: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class NodeLayout:
    """Where the job runs: the hostfile and its hosts, the multi-node backend, the rendezvous."""

    hostfile: str | None
    mode: str
    hosts: tuple[tuple[str, int], ...]
    num_nodes: int | None
    master_addr: str | None
    master_port: int
    # held while this object lives (the whole launch): other dswiz launches here pick another port
    reservation: PortReservation | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def multinode(self) -> bool:
        return self.hostfile is not None


@dataclasses.dataclass(frozen=True)
class ResolvedLaunch:
    """A launch whose flags, config folder and hostfile are reconciled: the spec of this node, and every spec
    started here (several with --simulate-nodes)."""

    request: LaunchRequest
    choice: ConfigChoice
    nodes: NodeLayout
    spec: LaunchSpec
    specs: tuple[LaunchSpec, ...]
    ds_config: dict[str, Any] | None


def resolve_launch(request: LaunchRequest) -> ResolvedLaunch:
    """Flags + the config folder -> the launch specs. A bad combination is a DswizError before anything happens."""
    from runner import configdir
    from wizard import launch_command as L

    choice = configdir.find_configs(request.config) if request.config else configdir.ConfigChoice()
    cfg = resolve_config(request, choice)
    request = _in_slurm_allocation(request, choice, cfg)
    nodes = resolve_nodes(request, choice, cfg.launcher)
    env_changes: dict[str, str | None] = {}
    if choice.deepspeed_env is not None:
        env_changes.update(configdir.read_env_file(choice.deepspeed_env))
    spec = _this_node_spec(request, choice, cfg, nodes, env_changes)
    specs = L.node_specs(spec, len(nodes.hosts)) if request.simulate_nodes else [spec]
    if request.simulate_nodes and not nodes.hosts:
        raise DswizError(f"{nodes.hostfile} lists no hosts", "write one '<host> slots=<n>' line per node")
    for s in specs:
        L.build_command(s)  # a bad combination of flags is reported before anything else happens
    return ResolvedLaunch(request, choice, nodes, spec, tuple(specs), cfg.ds_config)


def _in_slurm_allocation(request: LaunchRequest, choice: ConfigChoice, cfg: ConfigUse) -> LaunchRequest:
    """Inside sbatch/salloc: hosts, node rank, master and run directory from SLURM_* (runner.slurm_env)."""
    from runner import slurm_env

    mode = request.launcher_mode or choice.multinode_launcher
    defaults = slurm_env.launch_defaults(
        os.environ,
        launcher=cfg.launcher,
        mode=mode,
        given=dataclasses.asdict(request),
        config_hostfile=choice.hostfile,
        nproc=cfg.nproc,
        write=not request.dry_run,
    )
    if defaults.note:
        click.echo(f"[dswiz] {defaults.note}")
    return dataclasses.replace(
        request,
        hostfile=defaults.hostfile or request.hostfile,
        node_rank=request.node_rank if defaults.node_rank is None else defaults.node_rank,
        master_addr=defaults.master_addr or request.master_addr,
        run_dir=defaults.run_dir or request.run_dir,
    )


def resolve_config(request: LaunchRequest, choice: ConfigChoice) -> ConfigUse:
    """The launcher, GPUs per node and config argument (flags win over the config folder's launch.sh), and the
    DeepSpeed config: from --config, or named in the script's arguments."""
    from runner import configdir
    from wizard import launch_command as L

    launcher = request.launcher or choice.launcher or "deepspeed"
    nproc = request.nproc
    if nproc is None and request.include is None and request.exclude is None:
        # the GPUs per node the config was planned for (launch.sh), unless told otherwise
        nproc = choice.nproc
    config_arg = request.config_arg
    if config_arg is None and choice.config_arg is not None and launcher in ("deepspeed", "torchrun"):
        config_arg = choice.config_arg
    effective_arg = (
        config_arg if config_arg is not None else ("" if launcher == "accelerate" else "deepspeed_config")
    )
    ds_path = choice.ds_config
    script_args = tuple(request.script_args)
    # `dswiz launch train.py --deepspeed_config ds.json` without --config: that file is the config.
    named, rest = L.split_config_arg(script_args, effective_arg)
    if named is not None:
        if ds_path is not None:
            raise DswizError(
                f"the config is given twice: --config {request.config} and --{effective_arg} {named}",
                f"keep one: dswiz passes the config to the script as --{effective_arg} itself",
            )
        ds_path, script_args = Path(named), rest
    ds_config = configdir.load_ds_config(ds_path) if ds_path is not None else None
    return ConfigUse(launcher, nproc, config_arg, ds_path, ds_config, script_args)


def resolve_nodes(request: LaunchRequest, choice: ConfigChoice, launcher: str) -> NodeLayout:
    """The hostfile (flag, else the config folder's), the backend, and the rendezvous address and port."""
    from wizard import launch_command as L
    from wizard.config.hostfile import launch_hosts

    hostfile = request.hostfile or (str(choice.hostfile) if choice.hostfile else None)
    mode = (
        request.launcher_mode or choice.multinode_launcher or ("nossh" if request.simulate_nodes else "pdsh")
    )
    master_addr = request.master_addr
    if request.simulate_nodes:
        _check_simulated_nodes(hostfile, mode, request.node_rank)
        master_addr = master_addr or "127.0.0.1"
    if master_addr is None and hostfile:
        master_addr = choice.master_addr  # launch.sh's: the first host of the plan
    hosts = (
        launch_hosts(
            read_user_text(hostfile, "a hostfile", "pass a hostfile: one `host slots=N` line per node"),
            source=hostfile,
        )
        if hostfile and Path(hostfile).is_file()
        else []
    )
    num_nodes = request.num_nodes
    if launcher == "torchrun" and hosts and num_nodes is None:
        num_nodes = len(hosts)
    master_port, reservation = request.master_port, None
    if master_port is None:
        # Nodes must agree on the port, so multi-node keeps the planned (or DeepSpeed's default) one; a job on
        # this machine alone takes another free port when that one is busy or held by another dswiz launch, and
        # holds it for the whole launch (runner.preflight.reserve_port).
        from runner.preflight import reserve_port

        preferred = choice.master_port or L.DEFAULT_MASTER_PORT
        if hostfile is not None and not request.simulate_nodes:
            master_port = preferred
        else:
            reservation = reserve_port(preferred, hold=not request.dry_run)
            master_port = reservation.port
    return NodeLayout(hostfile, mode, tuple(hosts), num_nodes, master_addr, master_port, reservation)


def _check_simulated_nodes(hostfile: str | None, mode: str, node_rank: int | None) -> None:
    if not hostfile:
        raise DswizError("--simulate-nodes needs a hostfile", "pass --hostfile FILE (one line per node)")
    if mode != "nossh":
        raise DswizError(
            "--simulate-nodes works with --launcher-mode nossh only", "pass --launcher-mode nossh"
        )
    if node_rank is not None:
        raise DswizError("--simulate-nodes starts every node rank itself", "drop --node-rank")


def _this_node_spec(
    request: LaunchRequest,
    choice: ConfigChoice,
    cfg: ConfigUse,
    nodes: NodeLayout,
    env_changes: dict[str, str | None],
) -> LaunchSpec:
    from runner import rundir

    run_dir = (
        Path(request.run_dir)
        if request.run_dir
        else rundir.runs_root()
        / (rundir.new_run_id() + (f"-node{request.node_rank}" if request.node_rank is not None else ""))
    )
    accelerate_yaml = choice.accelerate_yaml if cfg.launcher == "accelerate" else None
    spec = LaunchSpec(
        script=request.script,
        run_dir=str(run_dir.absolute()),
        script_args=cfg.script_args,
        launcher=cfg.launcher,
        python=request.python or default_python(),
        ds_config=str(cfg.ds_path.absolute()) if cfg.ds_path is not None else None,
        accelerate_config=str(accelerate_yaml.absolute()) if accelerate_yaml else None,
        config_arg=cfg.config_arg,
        # the flag, else the folder's launch.sh (written by `dswiz config --no-local-rank`)
        local_rank_arg=choice.local_rank_arg if request.no_local_rank is None else not request.no_local_rank,
        nproc=cfg.nproc,
        include=request.include,
        exclude=request.exclude,
        hostfile=str(Path(nodes.hostfile).absolute()) if nodes.hostfile else None,
        num_nodes=nodes.num_nodes,
        multinode_launcher=nodes.mode,
        launcher_args=request.launcher_args,
        node_rank=request.node_rank,
        master_addr=nodes.master_addr,
        master_port=nodes.master_port,
        visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        env=tuple(sorted(env_changes.items())),
    )
    if request.no_local_rank is None and not passes_local_rank(spec):  # the folder's hint means nothing here
        spec = dataclasses.replace(spec, local_rank_arg=True)
    return spec


# ------------------------------------------------------------------------------------------ step 2: preflight


def check_lost_runs(run_folder: Path, *, stop: bool, grace_s: float) -> None:
    """Earlier runs (here and under the default runs folder) whose dswiz died: said, and their leftover processes
    stopped with --stop-leftovers, or when the user says so at the prompt; otherwise the command that stops them
    is printed (they may hold the GPUs this launch needs)."""
    from runner import rundir
    from runner.job.leftovers import find_lost_runs, stop_command, stop_leftovers

    for lost in find_lost_runs([run_folder, rundir.runs_root()]):
        if not lost.leftover_pids and lost.record.status != rundir.STATUS_RUNNING:
            continue  # said before: it has its verdict and nothing is left
        click.echo(f"warning: {lost.describe()}", err=True)
        if not lost.leftover_pids:
            stop_leftovers(lost, grace_s)  # nothing to stop: its run.json gets the verdict it lacks
            continue
        interactive = sys.stdin.isatty() and sys.stdout.isatty()
        if stop or (interactive and click.confirm("  stop them now?", default=False, err=True)):
            click.echo(f"  {stop_leftovers(lost, grace_s)}", err=True)
        else:
            click.echo(f"  fix: `{stop_command(lost)}` (or launch with --stop-leftovers)", err=True)


@dataclasses.dataclass(frozen=True)
class CheckedLaunch:
    """A launch that passed preflight: the specs with preflight's environment fixes, and what the plan adds."""

    resolved: ResolvedLaunch
    specs: tuple[LaunchSpec, ...]
    hardware: HardwareReport
    sidecar: PlanSidecar | None
    use: PlanUse


def run_preflight(resolved: ResolvedLaunch) -> CheckedLaunch:
    """Preflight against this machine (and the plan's offload needs); errors stop here, nothing started."""
    from runner import preflight as pf

    spec, nodes, request = resolved.spec, resolved.nodes, resolved.request
    hardware = detect_hardware()
    sidecar = load_plan_sidecar(resolved.choice)
    hosts = list(nodes.hosts)
    procs = pf.requested_procs_here(spec, hosts) or pf.visible_gpu_count(hardware, spec.visible_devices)
    world_size = procs * (nodes.num_nodes or len(hosts) or 1) if procs else None
    use = plan_use(sidecar, hardware, world_size)
    port_here = (
        not nodes.multinode
        or request.simulate_nodes
        or (nodes.mode == "nossh" and (request.node_rank or 0) == 0)
    )
    result = pf.preflight(
        spec,
        hardware=hardware,
        ds_config=resolved.ds_config,
        environ=os.environ,
        # the accelerate YAML when that launches (it is linted with the JSON it names), else the JSON
        config_path=spec.accelerate_config if spec.launcher == "accelerate" else spec.ds_config,
        cpu_offload_need_bytes=use.host_need_bytes,
        nvme_need_bytes=use.nvme_need_bytes,
        ssh_timeout_s=request.ssh_timeout,
        check_port_here=port_here,
    )
    _print_findings(result.findings)
    if not result.ok:
        errors = sum(1 for f in result.findings if f.severity is Severity.ERROR)
        raise DswizError(
            f"preflight found {errors} error(s); nothing was started",
            "fix what is listed above and launch again",
        )
    allocator = plan_env(sidecar, os.environ)
    for note in allocator_notes(allocator):
        click.echo(f"note: {note}", err=True)
    specs = _with_env_fixes(resolved.specs, {**dict(result.env_fixes), **allocator})
    return CheckedLaunch(resolved, specs, hardware, sidecar, use)


def plan_env(sidecar: PlanSidecar | None, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment the plan counted on that ``environ`` lacks: PyTorch's expandable segments, when the plan
    was made for them (its micro-batch may not fit without them)."""
    from wizard import alloc_conf

    if sidecar is None or not sidecar.expandable_segments or alloc_conf.expandable_segments(environ):
        return {}
    return alloc_conf.with_expandable_segments(environ)


def allocator_notes(allocator: Mapping[str, str]) -> list[str]:
    """What the launch says about the variables ``plan_env`` set."""
    return [
        f"the plan counted on PyTorch's expandable segments: {k}={v} for the job"
        for k, v in allocator.items()
    ]


def _with_env_fixes(specs: tuple[LaunchSpec, ...], fixes: Mapping[str, str | None]) -> tuple[LaunchSpec, ...]:
    """The specs with the environment changes the preflight makes for the job (None: unset)."""
    if not fixes:
        return specs
    return tuple(dataclasses.replace(s, env=tuple(sorted({**dict(s.env), **fixes}.items()))) for s in specs)


# ---------------------------------------------------------------------------------- step 3 and 4: start, watch


def start_job(checked: CheckedLaunch) -> tuple[Job, TerminalSink]:
    """Write the run directory and build the job (not started yet); its first notices printed."""
    from runner.job.prepare import prepare_run
    from runner.job.supervisor import Job
    from runner.job.terminal import TerminalSink
    from wizard.config.optimizer_op import optimizer_op

    resolved, request = checked.resolved, checked.resolved.request
    spec = resolved.spec
    yaml_text = (
        read_user_text(spec.accelerate_config, "an accelerate YAML", "pass the YAML `dswiz config` wrote")
        if spec.accelerate_config
        else None
    )
    env_texts = [
        read_user_text(p, "a .deepspeed_env file", "write KEY=VALUE lines, or remove the file")
        for p in _deepspeed_env_files(resolved.choice)
    ]
    prepared = prepare_run(
        checked.specs,
        ds_config=resolved.ds_config,
        accelerate_yaml=yaml_text,
        deepspeed_env_texts=env_texts,
        steps_per_print=request.steps_per_print,
        plan=checked.use.run_plan,
    )
    sink = TerminalSink(run_dir=prepared.run_dir)
    sink.on_notice(f"run directory: {prepared.run_dir}")
    for note in checked.use.notes:
        sink.on_notice(note)
    for cmd in prepared.commands:
        sink.on_notice(f"command: {cmd.shell()}")
    for change in prepared.config_changes:
        sink.on_notice(f"launched config: {change}")
    job = Job(
        prepared,
        sink,
        grace_s=request.grace,
        term_grace_s=request.grace,
        status_every_s=request.status_every,
        stall_timeout_s=request.stall_timeout,
        optimizer_op=optimizer_op(prepared.ds_config, gpu=bool(checked.hardware.gpus)),
        oom_advisor=oom_advisor(checked.sidecar, resolved.choice.folder),
    )
    return job, sink


def watch_job(job: Job, sink: TerminalSink, *, dashboard: bool) -> RunOutcome:
    """Start the job with dswiz's stop signals forwarded to it, show it (dashboard or streamed log) until no
    process of it is left; the verdict is printed by the sink."""
    from runner import launch_ui
    from runner.job.session import forwarded_signals

    with forwarded_signals(job):
        job.start()
        collector = launch_ui.start_collector(job.prepared.run_dir, sink)
        try:
            if dashboard and collector is not None:
                return launch_ui.run_with_dashboard(job, collector, sink)
            return job.run()
        finally:
            launch_ui.stop_collector(collector)


# ------------------------------------------------------------------------------- collaborators (wiring points)


def default_python() -> str:
    """This interpreter when it has DeepSpeed (found without importing it), else python3 on PATH."""
    import importlib.util

    if importlib.util.find_spec("deepspeed") is not None:
        return sys.executable
    return shutil.which("python3") or shutil.which("python") or sys.executable


def detect_hardware() -> HardwareReport:
    """The one call site of hardware detection (this machine; never raises for missing GPUs or drivers)."""
    from wizard.hardware import get_hardware

    return get_hardware(None)


def load_plan_sidecar(choice: ConfigChoice) -> PlanSidecar | None:
    """The config folder's dswiz-plan.json (wizard.config.sidecar.PlanSidecar), or None. A damaged one is a
    warning, not a reason to refuse the launch: the run just gets no predictions and generic advice."""
    if choice.plan_sidecar is None:
        return None
    from wizard.config.sidecar import load_sidecar

    path = choice.plan_sidecar
    try:
        return load_sidecar(path.read_text(encoding="utf-8"), source=str(path))
    except (OSError, UnicodeDecodeError) as e:
        click.echo(f"warning: cannot read {path} ({e}); launching without the plan's predictions", err=True)
    except DswizError as e:
        click.echo(f"warning: {e.problem}; launching without the plan's predictions", err=True)
        if e.fix:
            click.echo(f"  fix: {e.fix}", err=True)
    return None


@dataclasses.dataclass(frozen=True)
class PlanUse:
    """What the launch takes from the plan: run.json's plan section, the offload needs preflight checks, notices."""

    run_plan: dict[str, Any] | None = None
    host_need_bytes: int | None = None
    nvme_need_bytes: int | None = None
    notes: tuple[str, ...] = ()
    applies: bool = False  # the predictions describe this launch (same GPU model and count)


def plan_use(sidecar: PlanSidecar | None, hardware: HardwareReport, world_size: int | None) -> PlanUse:
    """The plan's predictions where they describe this launch (same GPU model and count); its model figures (FLOPs
    per token, sequence length) always. Host RAM and NVMe needs hold whatever the GPU model, if the GPU count is
    the planned one."""
    if sidecar is None:
        return PlanUse()
    from wizard.config.sidecar import offload_needs, plan_applies, run_plan_section
    from wizard.planner.throughput import peak_flops

    gpu = hardware.gpus[0] if hardware.gpus else None
    why_not = plan_applies(sidecar, gpu_name=gpu.name if gpu else None, world_size=world_size)
    peak_here = round(peak_flops(gpu, sidecar.strategy.precision)[0] / 1e12, 3) if gpu else None
    section = run_plan_section(sidecar, applies=why_not is None, peak_tflops_here=peak_here)
    host, nvme = offload_needs(sidecar)
    if world_size is not None and world_size != sidecar.strategy.world_size:
        host = nvme = None
    notes = [f"plan: {sidecar.model.name} on {sidecar.hardware_summary} (dswiz-plan.json)"]
    if why_not:
        notes.append(f"{why_not}: the dashboard shows no predicted peak or tokens/s")
    return PlanUse(section, host, nvme, tuple(notes), applies=why_not is None)


def oom_advisor(sidecar: PlanSidecar | None, folder: Path | None) -> OomAdvisor | None:
    """The verdict's advice after a CUDA OOM: with a plan, the planner's config that fits (and the command that
    writes it); without, None (the verdict's generic advice from the config)."""
    if sidecar is None or folder is None:
        return None
    from runner.verdict import default_oom_advice
    from wizard.replan import oom_advisor as planner_advisor

    return planner_advisor(sidecar, str(folder), fallback=default_oom_advice)


def _deepspeed_env_files(choice: ConfigChoice) -> list[Path]:
    """What DeepSpeed itself would read (~/.deepspeed_env, ./.deepspeed_env), then the config folder's."""
    files = [Path.home() / ".deepspeed_env", Path.cwd() / ".deepspeed_env"]
    found = [p for p in files if p.is_file()]
    if choice.deepspeed_env is not None and choice.deepspeed_env.resolve() not in {
        p.resolve() for p in found
    }:
        found.append(choice.deepspeed_env)
    return found


# -------------------------------------------------------------------------------------------------- output


def _print_findings(findings: tuple[Finding, ...]) -> None:
    for f in findings:
        where = f" ({f.location})" if f.location and f.location not in f.what else ""  # not said twice
        err = f.severity is Severity.ERROR
        click.echo(f"{f.severity.value}: {f.what}{where}", err=err)
        if f.severity is not Severity.INFO:  # info is one line; what needs acting on says why and how
            click.echo(f"  why: {f.why}", err=err)
            click.echo(f"  fix: {f.fix}", err=err)


def _print_dry_run(
    specs: list[LaunchSpec], ds_config: dict[str, Any] | None, steps_per_print: int, notes: list[str]
) -> None:
    from wizard import launch_command as L

    click.echo("# dry run: nothing was started or written; the preflight checks run at launch")
    click.echo(f"# run directory (not created): {specs[0].run_dir}")
    for note in notes:
        click.echo(f"# environment: {note}")
    for s in specs:
        argv, env = L.build_command(s)
        if len(specs) > 1:
            click.echo(f"# node rank {s.node_rank}")
        for key, value in sorted(env.items()):
            click.echo(f"# env: {key}={value}" if value is not None else f"# env: unset {key}")
        click.echo(L.LaunchCommand(argv, env).shell())
    if ds_config is not None:
        _, changes = L.observable_ds_config(
            ds_config, csv_output_path=L.csv_dir(specs[0]), steps_per_print=steps_per_print
        )
        for change in changes:
            click.echo(f"# launched config: {change}")
