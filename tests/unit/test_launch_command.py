"""build_command: the launch command as data, for every launcher and multi-node mode.

Each argv is also fed to the real launcher's own argument parser (DeepSpeed's runner, torchrun, accelerate launch)
so that a flag the launcher does not know fails here, not on a cluster.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest
import yaml

from wizard import launch_command as launch
from wizard.config.hostfile import launch_hosts
from wizard.errors import DswizError
from wizard.launch_command import LaunchSpec, build_command

RUN = "/runs/r1"


def spec(**kw: object) -> LaunchSpec:
    base: dict[str, object] = {
        "script": "train.py",
        "run_dir": RUN,
        "python": "/envs/train/bin/python",
        "ds_config": "/cfg/ds_config.json",
        "script_args": ("--steps", "5"),
    }
    base.update(kw)
    return LaunchSpec(**base)  # type: ignore[arg-type]


def ds_args(argv: tuple[str, ...]):  # type: ignore[no-untyped-def]
    from deepspeed.launcher.runner import parse_args

    assert argv[1:4] == ("-u", "-m", "deepspeed.launcher.runner")
    return parse_args(list(argv[4:]))


def test_single_node_deepspeed_uses_the_training_python_and_the_run_dir_copy() -> None:
    argv, env = build_command(spec(nproc=2))
    assert argv[0] == "/envs/train/bin/python"
    args = ds_args(argv)
    assert args.num_gpus == 2
    assert args.enable_each_rank_log == f"{RUN}/logs/ranks"
    assert args.user_script == "train.py"
    # the copy in the run dir, never the original; the user's own arguments after it, untouched
    assert args.user_args == ["--deepspeed_config", f"{RUN}/config/ds_config.json", "--steps", "5"]
    assert env == {"PYTHONUNBUFFERED": "1"}


def test_script_arguments_pass_through_untouched_even_when_they_look_like_launcher_flags() -> None:
    weird = ("--num_gpus", "7", "--hostfile", "x y", "--", "-u")
    argv, _ = build_command(spec(nproc=1, script_args=weird))
    args = ds_args(argv)
    assert args.num_gpus == 1 and args.hostfile != "x y"
    assert tuple(args.user_args[2:]) == weird


@pytest.mark.parametrize(
    ("config_arg", "expected"),
    [
        ("deepspeed", ["--deepspeed", f"{RUN}/config/ds_config.json"]),
        ("ds_cfg", ["--ds_cfg", f"{RUN}/config/ds_config.json"]),
        ("", []),
    ],
)
def test_config_argument_spelling(config_arg: str, expected: list[str]) -> None:
    argv, _ = build_command(spec(config_arg=config_arg))
    assert ds_args(argv).user_args == [*expected, "--steps", "5"]


def test_no_local_rank_reaches_the_deepspeed_runner_on_one_node_and_over_ssh() -> None:
    assert not ds_args(build_command(spec(nproc=2)).argv).no_local_rank  # DeepSpeed's default: pass it
    args = ds_args(build_command(spec(nproc=2, local_rank_arg=False)).argv)
    assert args.no_local_rank and args.user_script == "train.py"
    args = ds_args(build_command(spec(hostfile="/cfg/hostfile", num_nodes=2, local_rank_arg=False)).argv)
    assert args.no_local_rank and args.launcher == "pdsh"
    nossh = spec(
        hostfile="/h", multinode_launcher="nossh", node_rank=0, master_addr="a", local_rank_arg=False
    )
    args = ds_args(build_command(nossh).argv)
    assert args.no_local_rank and args.no_ssh
    # the MPI and slurm backends ignore it past one node, but on one active host the runner's own launcher
    # starts the ranks and does pass --local_rank: it goes to the runner whatever the backend
    slurm = spec(hostfile="/h", multinode_launcher="slurm", num_nodes=1, local_rank_arg=False)
    assert ds_args(build_command(slurm).argv).no_local_rank


def test_include_filter_and_visible_devices() -> None:
    args = ds_args(build_command(spec(include="localhost:1,3")).argv)
    assert args.include == "localhost:1,3" and args.num_gpus == -1
    # DeepSpeed ignores CUDA_VISIBLE_DEVICES once --num_gpus is given: dswiz names the visible GPUs instead.
    args = ds_args(build_command(spec(nproc=2, visible_devices="4,5,6")).argv)
    assert args.include == "localhost:4,5" and args.num_gpus == -1


def test_master_address_and_port() -> None:
    args = ds_args(build_command(spec(nproc=2, master_port=29611, master_addr="10.0.0.1")).argv)
    assert (args.master_port, args.master_addr) == (29611, "10.0.0.1")


def test_nossh_node_rank() -> None:
    s = spec(hostfile="/cfg/hostfile", multinode_launcher="nossh", node_rank=1, master_addr="127.0.0.1")
    args = ds_args(build_command(s).argv)
    assert args.no_ssh and args.node_rank == 1 and args.hostfile == "/cfg/hostfile"
    assert args.master_addr == "127.0.0.1"
    specs = launch.node_specs(s, 2)
    assert [x.node_rank for x in specs] == [0, 1]
    assert ds_args(build_command(specs[0]).argv).node_rank == 0


@pytest.mark.parametrize("backend", ["pdsh", "openmpi", "mpich", "impi", "mvapich", "slurm"])
def test_ssh_and_mpi_backends(backend: str) -> None:
    s = spec(hostfile="/cfg/hostfile", multinode_launcher=backend, launcher_args="-x FOO", num_nodes=2)
    argv, env = build_command(s)
    args = ds_args(argv)
    assert args.launcher == backend and args.launcher_args == "-x FOO" and args.num_nodes == 2
    assert not args.no_ssh
    assert "DS_ENV_FILE" not in env  # nothing to carry to the other nodes


def test_fixes_reach_other_nodes_through_a_deepspeed_env_file() -> None:
    s = spec(hostfile="/cfg/hostfile", env=(("TORCH_CUDA_ARCH_LIST", "9.0"),))
    _, env = build_command(s)
    assert env["DS_ENV_FILE"] == f"{RUN}/config/deepspeed_env"
    assert env["TORCH_CUDA_ARCH_LIST"] == "9.0"
    text = launch.deepspeed_env_text(["NCCL_IB_DISABLE=1\n# comment\n"], {"TORCH_CUDA_ARCH_LIST": "9.0"})
    assert text == "NCCL_IB_DISABLE=1\nTORCH_CUDA_ARCH_LIST=9.0\n"
    # one launcher per node: the environment is passed directly, no env file
    _, env = build_command(replace(s, multinode_launcher="nossh", node_rank=0, master_addr="h0"))
    assert "DS_ENV_FILE" not in env and env["TORCH_CUDA_ARCH_LIST"] == "9.0"


def test_env_changes_can_unset() -> None:
    _, env = build_command(spec(env=(("CUDA_LAUNCH_BLOCKING", None),)))
    assert env["CUDA_LAUNCH_BLOCKING"] is None
    line = launch.LaunchCommand(("python", "a b.py"), {"X": "1 2", "Y": None}).shell()
    assert line == "env -u Y X='1 2' python 'a b.py'"
    assert shlex.split(line)[-1] == "a b.py"


def test_torchrun_single_and_multi_node() -> None:
    from torch.distributed.run import get_args_parser

    argv, _ = build_command(spec(launcher="torchrun", nproc=2, master_port=29555))
    assert argv[1:3] == ("-m", "torch.distributed.run")
    args = get_args_parser().parse_args(list(argv[3:]))
    assert args.nproc_per_node == "2" and args.master_port == 29555
    assert args.training_script == "train.py"
    assert args.training_script_args[:2] == ["--deepspeed_config", f"{RUN}/config/ds_config.json"]

    s = spec(launcher="torchrun", nproc=8, hostfile="/h", num_nodes=2, node_rank=1, master_addr="10.0.0.1")
    args = get_args_parser().parse_args(list(build_command(s).argv[3:]))
    assert (args.nnodes, args.node_rank, args.master_addr) == ("2", 1, "10.0.0.1")


def test_accelerate_passes_its_yaml_copy_and_no_config_argument_by_default() -> None:
    from accelerate.commands.launch import launch_command_parser

    s = spec(launcher="accelerate", accelerate_config="/cfg/accelerate.yaml", nproc=2, master_port=29600)
    argv, _ = build_command(s)
    assert argv[1:3] == ("-m", "accelerate.commands.launch")
    args = launch_command_parser().parse_args(list(argv[3:]))
    assert args.config_file == f"{RUN}/config/accelerate.yaml"
    assert args.num_processes == 2 and args.main_process_port == 29600
    assert args.training_script == "train.py" and args.training_script_args == ["--steps", "5"]
    # an HF Trainer script under accelerate can still be handed --deepspeed
    argv, _ = build_command(replace(s, config_arg="deepspeed"))
    assert launch_command_parser().parse_args(list(argv[3:])).training_script_args[0] == "--deepspeed"


@pytest.mark.parametrize(
    ("kw", "problem"),
    [
        ({"launcher": "mpirun"}, "unknown launcher"),
        ({"multinode_launcher": "ssh", "hostfile": "/h"}, "unknown multi-node launcher"),
        ({"nproc": 0}, "at least 1"),
        ({"include": "localhost:0", "exclude": "localhost:1"}, "cannot be combined"),
        ({"include": "localhost:0", "nproc": 2}, "cannot be combined with --nproc"),
        ({"include": "localhost:a"}, "not a resource filter"),
        ({"include": "localhost:0", "launcher": "torchrun"}, "only with the DeepSpeed launcher"),
        ({"include": "h1", "hostfile": "/h", "multinode_launcher": "openmpi"}, "rejects --include"),
        ({"launcher_args": "-x FOO"}, "this launch has no hostfile, so it would be ignored"),
        (
            {"launcher_args": "-x", "launcher": "torchrun", "hostfile": "/h", "num_nodes": 2},
            "torchrun has no such",
        ),
        (
            {"launcher_args": "-x", "hostfile": "/h", "multinode_launcher": "nossh", "node_rank": 0},
            "nossh starts one launcher per node",
        ),
        ({"config_arg": "--deepspeed"}, "not an argument name"),
        ({"master_port": 70000}, "not a port"),
        ({"hostfile": "/h", "multinode_launcher": "nossh", "master_addr": "x"}, "needs this node's rank"),
        ({"hostfile": "/h", "multinode_launcher": "nossh", "node_rank": 0}, "address of node 0"),
        ({"node_rank": 1}, "needs a multi-node launch"),
        ({"launcher": "accelerate"}, "needs an accelerate YAML"),
        ({"launcher": "torchrun", "hostfile": "/h", "node_rank": 0, "master_addr": "a"}, "number of nodes"),
        ({"ds_config": None}, "no config was given"),
        ({"local_rank_arg": False, "launcher": "torchrun"}, "torchrun never passes --local_rank"),
    ],
)
def test_bad_specs_are_named_with_a_fix(kw: dict[str, object], problem: str) -> None:
    with pytest.raises(DswizError) as err:
        build_command(spec(**kw))
    assert problem in err.value.problem
    assert err.value.fix


def test_observable_copy_adds_what_the_monitor_needs_and_keeps_user_choices() -> None:
    original = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}
    frozen = json.dumps(original, sort_keys=True)
    out, changes = launch.observable_ds_config(original, csv_output_path=f"{RUN}/csv", steps_per_print=5)
    assert json.dumps(original, sort_keys=True) == frozen  # the input is not modified
    assert out["steps_per_print"] == 5 and out["log_level"] == "info"
    assert out["csv_monitor"] == {"enabled": True, "output_path": f"{RUN}/csv", "job_name": "dswiz"}
    assert out["zero_optimization"] == {"stage": 2}
    assert len(changes) == 3

    mine = {
        "steps_per_print": 100,
        "log_level": "warning",
        "csv_monitor": {"enabled": False, "output_path": "x"},
    }
    out, changes = launch.observable_ds_config(mine, csv_output_path="/r/csv")
    assert out["steps_per_print"] == 100 and out["log_level"] == "warning"
    assert out["csv_monitor"]["enabled"] is True and out["csv_monitor"]["output_path"] == "/r/csv"
    assert len(changes) == 1
    # already observable: nothing to change
    out2, changes2 = launch.observable_ds_config(out, csv_output_path="/r/csv")
    assert out2 == out and changes2 == []


def test_accelerate_yaml_points_at_the_observable_copy() -> None:
    text = yaml.safe_dump(
        {"distributed_type": "DEEPSPEED", "deepspeed_config": {"deepspeed_config_file": "ds_config.json"}}
    )
    assert launch.accelerate_ds_config_file(text) == "ds_config.json"
    out, changes = launch.launched_accelerate_yaml(text, ds_config_copy=f"{RUN}/config/ds_config.json")
    data = yaml.safe_load(out)
    assert data["deepspeed_config"]["deepspeed_config_file"] == f"{RUN}/config/ds_config.json"
    assert data["distributed_type"] == "DEEPSPEED" and len(changes) == 1
    plugin = yaml.safe_dump({"deepspeed_config": {"zero_stage": 2}})
    out, changes = launch.launched_accelerate_yaml(plugin, ds_config_copy=None)
    assert yaml.safe_load(out) == {"deepspeed_config": {"zero_stage": 2}}
    assert "no progress lines" in changes[0]
    with pytest.raises(DswizError):
        launch.launched_accelerate_yaml("- a list\n", ds_config_copy=None)
    with pytest.raises(DswizError):
        launch.launched_accelerate_yaml("a: [unclosed\n", ds_config_copy=None)


def test_config_named_in_the_script_arguments_is_found() -> None:
    assert launch.split_config_arg(("--deepspeed_config", "ds.json", "--steps", "3"), "deepspeed_config") == (
        "ds.json",
        ("--steps", "3"),
    )
    assert launch.split_config_arg(("--deepspeed=ds.json",), "deepspeed") == ("ds.json", ())
    assert launch.split_config_arg(("--deepspeed", "--fp16"), "deepspeed") == (
        None,
        ("--deepspeed", "--fp16"),
    )
    assert launch.split_config_arg(("--x", "1"), "") == (None, ("--x", "1"))


def test_hostfile_parsing_by_deepspeeds_rule() -> None:
    assert launch_hosts("# cluster\nnodeA slots=1\n\nnodeB   slots=8  # big\n") == [
        ("nodeA", 1),
        ("nodeB", 8),
    ]
    for bad, problem in [
        ("nodeA\n", "hostfile:1"),
        ("nodeA slots=1\nnodeA slots=2\n", "listed twice"),
        ("# only a comment\n", "no hosts"),
        ("nodeA slots=0\n", "slots=0"),
    ]:
        with pytest.raises(DswizError) as err:
            launch_hosts(bad)
        assert problem in err.value.problem


def test_build_command_is_deterministic() -> None:
    s = spec(nproc=2, env=(("B", "2"), ("A", "1")))
    assert build_command(s) == build_command(s)


def test_a_command_for_launch_sh_reads_the_configs_in_place_and_takes_the_rank_from_a_variable() -> None:
    """What wizard/config/render.py builds launch.sh from: no run directory, "$NODE_RANK" instead of a number."""
    s = spec(
        ds_config="$DIR/ds_config.json",
        hostfile="$DIR/hostfile",
        multinode_launcher="nossh",
        node_rank_var="NODE_RANK",
        master_addr="10.0.0.1",
        each_rank_log=False,
        copy_configs=False,
        env=(("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),),
    )
    argv, env = build_command(s)
    assert argv[argv.index("--node_rank") + 1] == "$NODE_RANK"
    assert argv[argv.index("--deepspeed_config") + 1] == "$DIR/ds_config.json"  # the original, not a copy
    assert "--enable_each_rank_log" not in argv and "DS_ENV_FILE" not in env  # one launcher per node: no ssh
    with pytest.raises(DswizError, match="needs this node's rank"):
        build_command(replace(s, node_rank_var=None))
    # an ssh launcher exports the folder's .deepspeed_env as it is when the spec names it
    pdsh = replace(s, multinode_launcher="pdsh", node_rank_var=None, deepspeed_env_file="$DIR/.deepspeed_env")
    assert build_command(pdsh).env["DS_ENV_FILE"] == "$DIR/.deepspeed_env"
    acc = spec(
        launcher="accelerate",
        accelerate_config="$DIR/accelerate.yaml",
        node_rank_var="NODE_RANK",
        copy_configs=False,
    )
    argv, _ = build_command(acc)
    assert argv[argv.index("--config_file") + 1] == "$DIR/accelerate.yaml"
    assert argv[argv.index("--machine_rank") + 1] == "$NODE_RANK"
