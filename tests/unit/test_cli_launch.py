"""`dswiz launch` from the command line, without starting a job: --dry-run, config discovery, and every bad input
answered with "error: … / fix: …" and exit 2, never a traceback and never a half-made run directory."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runner import configdir, rundir
from runner.rundir import LauncherProcess, RunRecord, RunVerdict
from wizard.errors import DswizError

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "runner" / "examples" / "train_tiny.py"


def dswiz(tmp: Path, *args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp / "state"), **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "wizard", "launch", *args],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def config_dir(tmp: Path, *, trainer: bool = False) -> Path:
    d = tmp / "run1"
    d.mkdir()
    (d / "ds_config.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 4}))
    flag = "--deepspeed" if trainer else "--deepspeed_config"
    (d / "launch.sh").write_text(
        f'#!/usr/bin/env bash\nexec deepspeed --num_gpus 3 "$SCRIPT" {flag} "$DIR/ds_config.json" "$@"\n'
    )
    return d


def command_lines(out: str) -> list[list[str]]:
    return [shlex.split(line) for line in out.splitlines() if line and not line.startswith("#")]


def test_dry_run_prints_the_command_and_writes_nothing(tmp_path: Path) -> None:
    cfg = config_dir(tmp_path, trainer=True)
    proc = dswiz(
        tmp_path,
        "--dry-run",
        "--config",
        str(cfg),
        "--master-port",
        "29999",
        str(TRAIN),
        "--steps",
        "3",
        "--help",
    )
    assert proc.returncode == 0, proc.stderr
    assert "# env: PYTHONUNBUFFERED=1" in proc.stdout
    [argv] = command_lines(proc.stdout)
    assert argv[0] == "PYTHONUNBUFFERED=1" and argv[2:5] == ["-u", "-m", "deepspeed.launcher.runner"]
    i = argv.index(str(TRAIN))
    run_dir = Path(argv[argv.index("--enable_each_rank_log") + 1]).parent.parent
    # launch.sh said the script is an HF Trainer script (--deepspeed); the script's own args follow, untouched
    assert argv[i + 1 :] == [
        "--deepspeed",
        str(run_dir / "config" / "ds_config.json"),
        "--steps",
        "3",
        "--help",
    ]
    assert "--master_port" in argv and argv[argv.index("--master_port") + 1] == "29999"
    assert argv[argv.index("--num_gpus") + 1] == "3"  # the GPU count launch.sh was written for
    [argv] = command_lines(
        dswiz(tmp_path, "--dry-run", "--nproc", "1", "--config", str(cfg), str(TRAIN)).stdout
    )
    assert argv[argv.index("--num_gpus") + 1] == "1"  # unless told otherwise
    assert "# launched config: steps_per_print: 10" in proc.stdout
    assert not (tmp_path / "state").exists() and not run_dir.exists()


def test_dry_run_prints_the_environment_fix_the_launch_makes(tmp_path: Path) -> None:
    """A TORCH_CUDA_ARCH_LIST DeepSpeed's op builder cannot parse is fixed for the job at launch; the dry run's
    command is the one that would run, fix included, and says why."""
    cfg = config_dir(tmp_path)
    proc = dswiz(
        tmp_path,
        "--dry-run",
        "--config",
        str(cfg),
        str(TRAIN),
        env_extra={"TORCH_CUDA_ARCH_LIST": "8.0;9.0a"},
    )
    assert proc.returncode == 0, proc.stderr
    [argv] = command_lines(proc.stdout)
    assert "TORCH_CUDA_ARCH_LIST=8.0;9.0" in argv and "# env: TORCH_CUDA_ARCH_LIST=8.0;9.0" in proc.stdout
    assert (
        "# environment: TORCH_CUDA_ARCH_LIST='8.0;9.0a' has entries DeepSpeed cannot parse (9.0a)"
        in proc.stdout
    )
    plain = dswiz(
        tmp_path, "--dry-run", "--config", str(cfg), str(TRAIN), env_extra={"TORCH_CUDA_ARCH_LIST": "9.0"}
    )
    assert "TORCH_CUDA_ARCH_LIST" not in plain.stdout  # a list DeepSpeed parses is left alone


def test_the_config_named_in_the_script_arguments_is_used(tmp_path: Path) -> None:
    (tmp_path / "ds.json").write_text("{}")
    proc = dswiz(
        tmp_path,
        "--dry-run",
        "--run-dir",
        str(tmp_path / "r"),
        str(TRAIN),
        "--deepspeed_config",
        "ds.json",
        "--steps",
        "2",
    )
    assert proc.returncode == 0, proc.stderr
    [argv] = command_lines(proc.stdout)
    assert argv[-4:] == ["--deepspeed_config", str(tmp_path / "r" / "config" / "ds.json"), "--steps", "2"]


def test_dry_run_of_every_node_on_this_machine(tmp_path: Path) -> None:
    (tmp_path / "ds.json").write_text("{}")
    (tmp_path / "hostfile").write_text("nodeA slots=1\nnodeB slots=1\n")
    proc = dswiz(
        tmp_path, "--dry-run", "--config", "ds.json", "--hostfile", "hostfile", "--simulate-nodes", str(TRAIN)
    )
    assert proc.returncode == 0, proc.stderr
    commands = command_lines(proc.stdout)
    assert "# node rank 0" in proc.stdout and "# node rank 1" in proc.stdout
    for k, argv in enumerate(commands):
        assert argv[argv.index("--node_rank") + 1] == str(k) and "--no_ssh" in argv
        assert argv[argv.index("--master_addr") + 1] == "127.0.0.1"


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--config", "nowhere"], "--config nowhere: no such file or folder"),
        (["--config", "bad.json"], "bad.json:1:9: not valid JSON"),
        (
            ["--config", "ds.json", "--nproc", "2", "--include", "localhost:0"],
            "cannot be combined with --nproc",
        ),
        (["--config", "ds.json", "--simulate-nodes"], "--simulate-nodes needs a hostfile"),
        (["--config", "ds.json", "--hostfile", "badhosts"], "badhosts:1: 'nodeA' is not a hostfile line"),
        (["--launcher", "accelerate"], "needs an accelerate YAML"),
        ([], "no config was given"),
    ],
)
def test_bad_input_is_an_error_with_a_fix_and_no_traceback(
    tmp_path: Path, args: list[str], problem: str
) -> None:
    (tmp_path / "ds.json").write_text("{}")
    (tmp_path / "bad.json").write_text('{"a": 1,, }')
    (tmp_path / "badhosts").write_text("nodeA\n")
    proc = dswiz(tmp_path, "--dry-run", *args, str(TRAIN))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert problem in proc.stderr and "\n  fix: " in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_config_given_twice_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ds.json").write_text("{}")
    proc = dswiz(tmp_path, "--dry-run", "--config", "ds.json", str(TRAIN), "--deepspeed_config", "ds.json")
    assert proc.returncode == 2 and "the config is given twice" in proc.stderr


def test_preflight_errors_stop_the_launch_before_anything_exists(tmp_path: Path) -> None:
    (tmp_path / "ds.json").write_text("{}")  # no batch size at all: the config linter's error
    run_dir = tmp_path / "run"
    proc = dswiz(tmp_path, "--config", "ds.json", "--run-dir", str(run_dir), "missing_train.py")
    assert proc.returncode == 2
    assert "error: the training script missing_train.py does not exist" in proc.stderr
    assert "error: neither train_batch_size nor train_micro_batch_size_per_gpu is set" in proc.stderr
    assert "preflight found 2 error(s); nothing was started" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not run_dir.exists()


def test_config_folder_discovery(tmp_path: Path) -> None:
    d = tmp_path / "cfg"
    d.mkdir()
    (d / "ds_config.json").write_text("{}")
    (d / "accelerate.yaml").write_text(
        yaml.safe_dump({"deepspeed_config": {"deepspeed_config_file": "ds_config.json"}})
    )
    (d / "hostfile").write_text("a slots=1\n")
    (d / ".deepspeed_env").write_text("NCCL_IB_DISABLE=1\n")
    (d / "launch.sh").write_text(
        'exec deepspeed --hostfile "$DIR/hostfile" --master_port 29511 --no_ssh --node_rank "$NODE_RANK" "$SCRIPT" --deepspeed_config "$DIR/ds_config.json" "$@"\n'
    )
    c = configdir.find_configs(d)
    assert (c.ds_config, c.accelerate_yaml, c.hostfile) == (
        d / "ds_config.json",
        d / "accelerate.yaml",
        d / "hostfile",
    )
    assert (c.launcher, c.config_arg, c.multinode_launcher, c.master_port) == (
        "deepspeed",
        "deepspeed_config",
        "nossh",
        29511,
    )
    assert configdir.read_env_file(c.deepspeed_env) == {"NCCL_IB_DISABLE": "1"}  # type: ignore[arg-type]
    # a YAML on its own: accelerate, and the JSON it names (next to it, as dswiz config writes it)
    y = configdir.find_configs(d / "accelerate.yaml")
    assert (y.launcher, y.ds_config) == ("accelerate", d / "ds_config.json")
    (d / "ds_config.json").unlink()
    with pytest.raises(
        DswizError, match=r"names deepspeed_config_file ds_config\.json, which does not exist"
    ):
        configdir.find_configs(d)
    (d / "accelerate.yaml").unlink()
    (d / "other.json").write_text("{}")
    (d / "third.json").write_text("{}")
    with pytest.raises(DswizError, match="several"):
        configdir.find_configs(d)


def test_run_record_round_trip_and_run_directory_rules(tmp_path: Path) -> None:
    record = RunRecord(
        run_id="r",
        run_dir=str(tmp_path / "r"),
        status=rundir.STATUS_FINISHED,
        started_at=1.0,
        command=("python", "-m", "x"),
        command_line="python -m x",
        env_changes={"A": "1", "B": None},
        launchers=(LauncherProcess(argv=("python",), pid=10, pgid=10, node_rank=0),),
        rank_pids={0: 11, 1: 12},
        exit_code=1,
        launcher_exit_codes=(1,),
        verdict=RunVerdict(
            kind="rank_failed", summary="rank 1 failed", rank=1, advice=("a",), evidence=("e",)
        ),
    )
    run = rundir.make_run_dir(tmp_path / "r")
    assert oct(run.stat().st_mode & 0o777) == "0o700"
    rundir.write_run_record(run, record)
    assert rundir.read_run_record(run) == record
    data = json.loads((run / "run.json").read_text())
    assert data["rank_pids"] == {"0": 11, "1": 12} and data["verdict"]["kind"] == "rank_failed"
    data["a_newer_key"] = 1  # readers accept what newer writers add
    (run / "run.json").write_text(json.dumps(data))
    assert rundir.read_run_record(run) == record
    with pytest.raises(DswizError, match="already exists and is not empty"):
        rundir.make_run_dir(run)
    (run / "run.json").write_text("{half")
    with pytest.raises(DswizError, match="cannot be read"):
        rundir.read_run_record(run)
    with pytest.raises(DswizError, match="does not exist"):
        rundir.read_run_record(tmp_path / "nothing")


def test_launcher_mode_standard_is_torchrun_on_every_node_as_config_names_it(tmp_path: Path) -> None:
    """`dswiz config --launcher-mode standard` writes a folder for torchrun on every node; `dswiz launch` takes the
    same name for the same thing (it was an invalid choice there)."""
    hosts = tmp_path / "hostfile"
    hosts.write_text("node-a slots=2\nnode-b slots=2\n")
    common = ("--dry-run", "--hostfile", str(hosts), "--node-rank", "1", "--master-addr", "10.0.0.1")
    common += ("--master-port", "29555", "--run-dir", str(tmp_path / "run"), "--config-arg", "", str(TRAIN))
    standard = dswiz(tmp_path, "--launcher-mode", "standard", *common)
    torchrun = dswiz(tmp_path, "--launcher", "torchrun", *common)
    assert standard.returncode == 0, standard.stderr
    assert standard.stdout == torchrun.stdout
    (cmd,) = command_lines(standard.stdout)
    assert cmd[cmd.index("-m") + 1] == "torch.distributed.run"
    assert cmd[cmd.index("--nnodes") + 1] == "2" and cmd[cmd.index("--node_rank") + 1] == "1"
    clash = dswiz(tmp_path, "--launcher-mode", "standard", "--launcher", "deepspeed", *common)
    assert clash.returncode == 2 and "Traceback" not in clash.stderr
    assert "--launcher-mode standard runs torchrun on every node" in clash.stderr
    assert "fix: drop --launcher deepspeed" in clash.stderr


def test_a_dry_run_flag_after_the_script_is_said_to_go_to_the_script(tmp_path: Path) -> None:
    """Everything after the script is the script's: `--dry-run` there starts the job, so launch says so first (here
    the missing folder then stops it before anything runs); before the script it is launch's own, unsaid."""
    proc = dswiz(tmp_path, "--config", str(tmp_path / "missing"), str(TRAIN), "--dry-run")
    assert proc.returncode == 2 and "--config" in proc.stderr
    assert f"note: --dry-run comes after the script, so {TRAIN} gets it and the job starts" in proc.stderr
    proc = dswiz(tmp_path, "--config", str(tmp_path / "missing"), "--dry-run", str(TRAIN))
    assert proc.returncode == 2 and "comes after the script" not in proc.stderr
