"""The multi-node launcher chosen in the wizard / `dswiz config` reaches the files (accelerate YAML, launch.sh),
`dswiz launch` reads it back from launch.sh, and the linter checks what each launcher requires."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from runner import configdir
from wizard.config.build import WriteOptions, config_set_from_strategy
from wizard.config.check import lint_path
from wizard.config.launchers import DEEPSPEED_RUNNER_BACKENDS, MULTINODE_LAUNCHERS
from wizard.config.lint.hostfile import lint_hostfile_for_topology
from wizard.config.render import render_all
from wizard.errors import DswizError
from wizard.hardware import get_hardware
from wizard.strategy import Strategy

TWO_NODES = Strategy(zero_stage=2, nodes=2, gpus_per_node=4, micro_batch_size=2)


def files_for(launcher: str, consumer: str = "deepspeed") -> dict[str, str]:
    options = WriteOptions(
        consumer=consumer,  # type: ignore[arg-type]
        launcher=launcher,  # type: ignore[arg-type]
        hosts=("gpu-a", "gpu-b"),
        config_dir="/cfg",
    )
    return render_all(config_set_from_strategy(TWO_NODES, options))


def exec_line(files: dict[str, str]) -> str:
    return next(ln for ln in files["launch.sh"].splitlines() if ln.startswith("exec "))


@pytest.mark.parametrize("launcher", MULTINODE_LAUNCHERS)
def test_every_launcher_reaches_the_accelerate_yaml(launcher: str) -> None:
    ds = yaml.safe_load(files_for(launcher, "accelerate")["accelerate.yaml"])["deepspeed_config"]
    assert ds["deepspeed_multinode_launcher"] == launcher
    assert ds["deepspeed_hostfile"] == "/cfg/hostfile"


@pytest.mark.parametrize("launcher", DEEPSPEED_RUNNER_BACKENDS)
def test_deepspeed_runner_backends_are_passed_to_the_runner(launcher: str, tmp_path: Path) -> None:
    files = files_for(launcher)
    line = exec_line(files)
    assert "deepspeed.launcher.runner" in line and f"--launcher {launcher}" in line
    assert "NODE_RANK" not in files["launch.sh"]  # started once, on the first host
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    hints = configdir.find_configs(tmp_path)
    assert (hints.launcher, hints.multinode_launcher) == ("deepspeed", launcher)


def test_nossh_runs_on_every_node() -> None:
    files = files_for("nossh")
    assert "--no_ssh --node_rank" in exec_line(files)
    assert "set NODE_RANK" in files["launch.sh"]


def test_standard_is_torchrun_on_every_node(tmp_path: Path) -> None:
    files = files_for("standard")
    line = exec_line(files)
    assert line.startswith('exec "$PYTHON" -m torch.distributed.run --nproc_per_node 4 --nnodes 2')
    assert '--node_rank "$NODE_RANK"' in line and "--master_addr gpu-a" in line
    assert "--deepspeed_config" in line
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    hints = configdir.find_configs(tmp_path)
    assert (hints.launcher, hints.config_arg, hints.nproc) == ("torchrun", "deepspeed_config", 4)
    # accelerate's standard: `accelerate launch --machine_rank` on each node
    acc = files_for("standard", "accelerate")
    assert "--machine_rank" in acc["launch.sh"] or "NODE_RANK" in acc["launch.sh"]


def test_one_node_ignores_the_launcher() -> None:
    one = Strategy(zero_stage=2, gpus_per_node=4)
    files = render_all(config_set_from_strategy(one, WriteOptions(launcher="slurm", consumer="accelerate")))
    assert "deepspeed_multinode_launcher" not in files["accelerate.yaml"]
    for launcher in ("slurm", "standard", "nossh"):
        line = exec_line(render_all(config_set_from_strategy(one, WriteOptions(launcher=launcher))))
        assert "deepspeed.launcher.runner --num_gpus 4" in line
        assert "--launcher" not in line and "ssh" not in line


def test_unknown_launcher_and_old_deepspeed_for_nossh_are_errors() -> None:
    with pytest.raises(DswizError, match="unknown multi-node launcher 'ssh'"):
        config_set_from_strategy(TWO_NODES, WriteOptions(launcher="ssh"))  # type: ignore[arg-type]
    with pytest.raises(DswizError, match=r"nossh launcher needs DeepSpeed 0\.14\.5"):
        config_set_from_strategy(TWO_NODES, WriteOptions(launcher="nossh", deepspeed_version="0.14.2"))
    config_set_from_strategy(TWO_NODES, WriteOptions(launcher="nossh", deepspeed_version="0.14.5"))


def test_host_errors_name_no_command_line_flag() -> None:
    for options in (WriteOptions(hosts=("a",)), WriteOptions(hosts=("a", "a"))):
        with pytest.raises(DswizError) as e:
            config_set_from_strategy(TWO_NODES, options)
        assert "--" not in e.value.fix and "--" not in e.value.problem
    with pytest.raises(DswizError) as e:
        config_set_from_strategy(Strategy(gpus_per_node=4), WriteOptions(hosts=("a", "b")))
    assert "--" not in e.value.fix


def codes(findings: list) -> set[str]:
    return {f.code for f in findings}


def write_dir(tmp: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp / name).write_text(text)
    return tmp


def test_written_multi_node_folders_lint_clean_for_every_launcher(tmp_path: Path) -> None:
    for launcher in MULTINODE_LAUNCHERS:
        folder = tmp_path / launcher
        folder.mkdir()
        found = lint_path(write_dir(folder, files_for(launcher, "accelerate")))
        assert not [c for c in codes(found) if c.startswith("launcher-")], launcher


def yaml_with(tmp: Path, **ds: object) -> Path:
    raw = {
        "distributed_type": "DEEPSPEED",
        "num_machines": 2,
        "num_processes": 8,
        "main_process_port": 29500,
        "deepspeed_config": {"deepspeed_config_file": "ds.json", **ds},
    }
    (tmp / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 1}))
    path = tmp / "acc.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_linter_checks_each_launchers_limits(tmp_path: Path) -> None:
    hostfile = str(tmp_path / "hostfile")
    typo = lint_path(yaml_with(tmp_path, deepspeed_multinode_launcher="pdhs", deepspeed_hostfile=hostfile))
    assert "launcher-unknown" in codes(typo)
    assert any('did you mean "pdsh"' in f.what for f in typo)
    impi = lint_path(yaml_with(tmp_path, deepspeed_multinode_launcher="impi", deepspeed_hostfile=hostfile))
    assert not {c for c in codes(impi) if c.startswith("launcher-")}
    no_hostfile = lint_path(yaml_with(tmp_path, deepspeed_multinode_launcher="openmpi"))
    assert "launcher-no-hostfile" in codes(no_hostfile)
    standard = lint_path(yaml_with(tmp_path, deepspeed_multinode_launcher="standard"))
    assert "launcher-no-master" in codes(standard) and "launcher-no-hostfile" not in codes(standard)
    mpi_filter = lint_path(
        yaml_with(
            tmp_path,
            deepspeed_multinode_launcher="mpich",
            deepspeed_hostfile=hostfile,
            deepspeed_inclusion_filter="a",
        )
    )
    assert "launcher-filter" in codes(mpi_filter)
    old = get_hardware("8xA100-80GB")
    from dataclasses import replace

    old = replace(old, software=replace(old.software, deepspeed="0.14.0"))
    nossh = lint_path(
        yaml_with(tmp_path, deepspeed_multinode_launcher="nossh", deepspeed_hostfile=hostfile), hardware=old
    )
    assert "launcher-version" in codes(nossh)


def test_config_folder_unequal_slots_follow_the_yaml_launcher(tmp_path: Path) -> None:
    for launcher, severity in (("pdsh", "info"), ("mpich", "error"), ("standard", "error")):
        folder = tmp_path / launcher
        folder.mkdir()
        write_dir(folder, files_for(launcher, "accelerate"))
        (folder / "hostfile").write_text("gpu-a slots=4\ngpu-b slots=2\n")
        found = [f for f in lint_path(folder) if f.code == "hostfile-unequal-slots"]
        assert [f.severity.value for f in found] == [severity], launcher


def test_hostfile_as_the_plan_needs_one_line_per_node_with_its_gpus() -> None:
    ok = lint_hostfile_for_topology("a slots=4\nb slots=4\n", nodes=2, gpus_per_node=4)
    assert ok == []
    one = lint_hostfile_for_topology("a slots=4\n", nodes=2, gpus_per_node=4)
    assert codes(one) == {"hostfile-node-count"} and "1 host for 2 nodes" in one[0].what
    slots = lint_hostfile_for_topology("a slots=4\nb slots=2\n", nodes=2, gpus_per_node=4)
    assert codes(slots) == {"hostfile-slots"} and "b slots=2" in slots[0].what
    assert "--" not in one[0].fix + slots[0].fix


@pytest.mark.parametrize("consumer", ["deepspeed", "accelerate", "trainer"])
def test_every_launch_sh_is_valid_bash_and_asks_for_its_node_rank(consumer: str, tmp_path: Path) -> None:
    import subprocess

    for launcher in MULTINODE_LAUNCHERS:
        script = tmp_path / f"{consumer}-{launcher}.sh"
        script.write_text(files_for(launcher, consumer)["launch.sh"])
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0, launcher
        if launcher in ("nossh", "standard"):
            env = {"PATH": "/usr/bin:/bin"}
            run = subprocess.run(["bash", str(script), "train.py"], capture_output=True, text=True, env=env)
            assert run.returncode != 0 and "set NODE_RANK" in run.stderr, (launcher, run.stderr)


def test_an_empty_hostfile_for_the_plan_says_what_to_write() -> None:
    empty = lint_hostfile_for_topology("\n", nodes=2, gpus_per_node=8)
    assert codes(empty) == {"hostfile-empty"}
    assert empty[0].fix == "write 2 lines, one per node (node 0 first): `hostname slots=8`"


@pytest.mark.parametrize("launcher", DEEPSPEED_RUNNER_BACKENDS)
def test_a_launch_sh_split_over_lines_keeps_its_hints(launcher: str, tmp_path: Path) -> None:
    """A user who breaks launch.sh's exec line with trailing backslashes (and indents it) runs the same command in
    the shell; `dswiz launch --config DIR` and `dswiz config --from` read the same hints from it."""
    options = WriteOptions(
        launcher=launcher, hosts=("gpu-a", "gpu-b"), config_dir="/cfg", local_rank_arg=False
    )  # type: ignore[arg-type]
    files = render_all(config_set_from_strategy(TWO_NODES, options))
    one_line = tmp_path / "one"
    split = tmp_path / "split"
    for folder in (one_line, split):
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text)
    line = exec_line(files)
    broken = "  " + line.replace(" --", " \\\n      --")
    assert broken.count("\\\n") >= 3
    (split / "launch.sh").write_text(files["launch.sh"].replace(line, broken))
    assert "--no_local_rank" in line
    hints = {k: v for k, v in vars(configdir.find_configs(split)).items() if k not in ("folder", "ds_config")}
    hints_one = {
        k: v for k, v in vars(configdir.find_configs(one_line)).items() if k not in ("folder", "ds_config")
    }
    assert hints["multinode_launcher"] == launcher and hints["local_rank_arg"] is False
    assert {k: v for k, v in hints.items() if not isinstance(v, Path)} == {
        k: v for k, v in hints_one.items() if not isinstance(v, Path)
    }
    assert configdir.launch_sh_local_rank_arg(split) is False
