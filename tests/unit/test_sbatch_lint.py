"""`dswiz check job.sbatch` (wizard/config/lint/sbatch.py): one test per rule, on scripts beside a real config
set written by dswiz; what dswiz writes itself is clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wizard.config.build import WriteOptions, config_set_from_strategy
from wizard.config.check import detect_kind, lint_path
from wizard.config.launchers import MultinodeLauncher
from wizard.config.render import render_all
from wizard.config.sbatch import slurm_job
from wizard.findings import Severity
from wizard.strategy import Strategy

ROOT = Path(__file__).resolve().parents[2]
HEAD = "#!/bin/bash\n"


def dswiz(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "wizard", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)


RENDEZVOUS = "export MASTER_ADDR=n1\nexport MASTER_PORT=12345\n"


def write_set(
    directory: Path,
    launcher: MultinodeLauncher = "nossh",
    nodes: int = 2,
    gpus: int = 4,
    offload: bool = False,
    host_cores: int | None = None,
) -> Path:
    """A config set for nodes x gpus (micro-batch 2, so train_batch_size = 2 x nodes x gpus)."""
    strategy = Strategy(
        zero_stage=2,
        micro_batch_size=2,
        nodes=nodes,
        gpus_per_node=gpus,
        offload_optimizer="cpu" if offload else "none",
    )
    options = WriteOptions(
        launcher=launcher, config_dir=str(directory), slurm=slurm_job(wanted=True), host_cores=host_cores
    )
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in render_all(config_set_from_strategy(strategy, options)).items():
        (directory / name).write_text(text)
    return directory / "job.sbatch"


def codes(path: Path) -> set[str]:
    return {f.code for f in lint_path(path) if f.code.startswith("sbatch-")}


def with_script(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("launcher", ["nossh", "standard", "slurm", "pdsh"])
def test_what_dswiz_writes_has_no_errors(tmp_path: Path, launcher: MultinodeLauncher) -> None:
    sbatch = write_set(tmp_path, launcher)
    found = [f for f in lint_path(sbatch) if f.severity is Severity.ERROR]
    assert found == []
    assert codes(sbatch) == ({"sbatch-ssh-launcher"} if launcher == "pdsh" else set())


def test_a_script_is_recognised_by_name_or_by_its_sbatch_lines(tmp_path: Path) -> None:
    assert detect_kind(Path("run.sbatch"), "echo hi\n") == "sbatch"
    assert detect_kind(Path("submit.sh"), HEAD + "#SBATCH --nodes=2\nsrun hostname\n") == "sbatch"
    assert detect_kind(Path("submit.sh"), "#SBATCH --nodes=2\n") != "sbatch"  # no shebang: not a script


def test_directive_after_the_first_command_is_ignored(tmp_path: Path) -> None:
    sbatch = write_set(tmp_path)
    text = sbatch.read_text() + "#SBATCH --time=10\n"
    assert "sbatch-directive-ignored" in codes(with_script(sbatch, text))


def test_bad_time(tmp_path: Path) -> None:
    sbatch = write_set(tmp_path)
    text = sbatch.read_text().replace("#SBATCH --nodes=2", "#SBATCH --nodes=2\n#SBATCH --time=2h")
    assert "sbatch-time" in codes(with_script(sbatch, text))


def test_multi_node_plan_without_nodes(tmp_path: Path) -> None:
    sbatch = write_set(tmp_path)
    assert "sbatch-no-nodes" in codes(
        with_script(sbatch, sbatch.read_text().replace("#SBATCH --nodes=2\n", ""))
    )


def test_node_count_differs_from_the_hostfile(tmp_path: Path) -> None:
    sbatch = write_set(tmp_path)
    text = sbatch.read_text().replace("--nodes=2", "-N 3")  # the short form is read too
    assert "sbatch-node-count" in codes(with_script(sbatch, text))


def test_gpu_count_differs_from_the_hostfile_slots(tmp_path: Path) -> None:
    sbatch = write_set(tmp_path)
    text = sbatch.read_text().replace("--gpus-per-node=4", "--gpus-per-node=a100:8")
    assert "sbatch-gpu-count" in codes(with_script(sbatch, text))


def test_world_size_differs_from_the_batch_sizes(tmp_path: Path) -> None:
    sbatch = write_set(tmp_path)
    ds = json.loads((tmp_path / "ds_config.json").read_text())
    ds["train_batch_size"] = 2 * 4  # micro 2 x accumulation 1 x 4 ranks, but the job starts 8
    (tmp_path / "ds_config.json").write_text(json.dumps(ds))
    assert "sbatch-world-size" in codes(sbatch)


def test_slurm_launcher_with_too_few_task_slots(tmp_path: Path) -> None:
    sbatch = write_set(tmp_path, "slurm")
    fewer = sbatch.read_text().replace("--ntasks-per-node=4", "--ntasks-per-node=1")
    assert "sbatch-tasks-per-node" in codes(with_script(sbatch, fewer))


def test_pdsh_launcher_needs_ssh(tmp_path: Path) -> None:
    sbatch = tmp_path / "hand.sbatch"
    text = HEAD + "#SBATCH --nodes=2\n" + RENDEZVOUS + "deepspeed --launcher pdsh --hostfile h train.py\n"
    assert codes(with_script(sbatch, text)) == {"sbatch-ssh-launcher"}


def test_missing_master_addr(tmp_path: Path) -> None:
    text = HEAD + "#SBATCH --nodes=2\nexport MASTER_PORT=1234\nsrun torchrun --nnodes 2 train.py\n"
    assert codes(with_script(tmp_path / "a.sbatch", text)) == {"sbatch-no-master-addr"}


def test_missing_master_port(tmp_path: Path) -> None:
    text = HEAD + "#SBATCH --nodes=2\nexport MASTER_ADDR=n1\nsrun torchrun --nnodes 2 train.py\n"
    assert codes(with_script(tmp_path / "a.sbatch", text)) == {"sbatch-no-master-port"}


def test_one_node_needs_no_rendezvous(tmp_path: Path) -> None:
    text = HEAD + "#SBATCH --nodes=1\ndeepspeed --num_gpus 8 train.py\n"
    assert codes(with_script(tmp_path / "a.sbatch", text)) == set()


def test_dswiz_check_reports_a_script_with_the_fix(tmp_path: Path) -> None:
    sbatch = write_set(tmp_path)
    with_script(sbatch, sbatch.read_text().replace("--nodes=2", "--nodes=3"))
    result = dswiz("check", str(sbatch))
    assert result.returncode != 0
    assert "--nodes=3 but the hostfile beside it lists 2 hosts" in result.stdout + result.stderr
    assert "#SBATCH --nodes=2" in result.stdout + result.stderr  # the fix


def test_dswiz_config_writes_what_the_flags_say(tmp_path: Path) -> None:
    out = tmp_path / "cfg"
    argv = ["config", "--yes", "--nodes", "2", "--gpus-per-node", "4", "--launcher-mode", "standard"]
    argv += ["--slurm-time", "1-00:00:00", "--slurm-partition", "gpu", "--slurm-cpus-per-task", "16"]
    result = dswiz(*argv, "--out", str(out))
    assert result.returncode == 0, result.stderr
    text = (out / "job.sbatch").read_text()
    for line in (
        "--nodes=2",
        "--gpus-per-node=4",
        "--cpus-per-task=16",
        "--time=1-00:00:00",
        "--partition=gpu",
    ):
        assert f"#SBATCH {line}\n" in text
    assert "torch.distributed.run" in text and f"sbatch {out / 'job.sbatch'} train.py" in result.stdout
    bad = dswiz(*argv[:-6], "--slurm-time", "2h", "--out", str(tmp_path / "x"))
    assert bad.returncode != 0 and "not a Slurm time limit" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert not (tmp_path / "x").exists()  # nothing half-written


@pytest.mark.parametrize("launcher", ["nossh", "slurm"])
@pytest.mark.parametrize("host_cores", [None, 8, 64])
def test_what_dswiz_writes_for_an_offloading_plan_gives_the_ranks_their_cpus(
    tmp_path: Path, launcher: MultinodeLauncher, host_cores: int | None
) -> None:
    # 8 cores over 4 GPUs is 2 a rank: dswiz writes what the plan counted, and check says it is few
    sbatch = write_set(tmp_path, launcher, offload=True, host_cores=host_cores)
    assert codes(sbatch) == ({"sbatch-offload-cpus"} if host_cores == 8 else set())


@pytest.mark.parametrize(
    "directives, flagged",
    [
        ("--ntasks-per-node=1 --cpus-per-task=4", True),  # one task starts the 4 ranks: 1 CPU each
        ("--ntasks-per-node=1 --cpus-per-task=16", False),
        ("--ntasks-per-node=4 --cpus-per-task=4", False),  # a task a rank
        ("--ntasks-per-node=4", True),  # Slurm's default: one CPU a task
        ("--ntasks=8 --cpus-per-task=8", False),  # 8 tasks over the 2 nodes: a task a rank, 8 CPUs each
        ("--ntasks=2 --cpus-per-task=8", True),  # a task a node: 2 CPUs a rank
        ("--cpus-per-gpu=2", True),
        ("--cpus-per-gpu=8", False),
        ("--exclusive", False),  # the whole node
        ("--exclusive=user --cpus-per-task=4", True),  # the user's jobs share the node: CPUs as asked
    ],
)
def test_an_offloading_job_with_few_cpus_a_rank_is_flagged(
    tmp_path: Path, directives: str, flagged: bool
) -> None:
    sbatch = write_set(tmp_path, "nossh", offload=True, host_cores=64)
    text = sbatch.read_text()
    head = "".join(f"#SBATCH {d}\n" for d in directives.split())
    text = "\n".join(
        ln for ln in text.splitlines() if not ln.startswith(("#SBATCH --cpus", "#SBATCH --ntasks"))
    )
    text = text.replace("#!/bin/bash\n", "#!/bin/bash\n" + head, 1) + "\n"
    found = [f for f in lint_path(with_script(sbatch, text)) if f.code == "sbatch-offload-cpus"]
    assert bool(found) == flagged
    if found:
        assert "the optimizer on the host" in found[0].what and "--cpus-" in found[0].fix
    plain = write_set(
        tmp_path / "plain", "nossh"
    )  # nothing offloaded: any CPU count is the script's business
    with_script(plain, text.replace(str(tmp_path), str(tmp_path / "plain")))
    assert "sbatch-offload-cpus" not in codes(plain)


def test_dswiz_config_gives_offloading_ranks_the_cores_the_plan_counted(tmp_path: Path) -> None:
    # 32 cores described, 2 GPUs: the plan prices CPU Adam at 16 cores a rank, and the batch job asks for them
    argv = ["config", "--yes", "--model", "gpt2", "--hardware", "2xA100-40GB,cpu_cores=32", "--sbatch"]
    argv += ["--stage", "2", "--offload-optimizer", "cpu", "--micro-batch", "2"]
    result = dswiz(*argv, "--out", str(tmp_path / "off"))
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "off" / "job.sbatch").read_text()
    assert (
        "#SBATCH --cpus-per-task=32\n" in text
        and "# --cpus-per-task: 16 CPUs for each rank's CPU Adam" in text
    )
    plain = dswiz(*argv[:-6], "--stage", "2", "--micro-batch", "2", "--out", str(tmp_path / "plain"))
    assert plain.returncode == 0, plain.stderr
    assert "#SBATCH --cpus-per-task=2\n" in (tmp_path / "plain" / "job.sbatch").read_text()
