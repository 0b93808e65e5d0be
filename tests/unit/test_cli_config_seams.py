"""What `dswiz config` adds around the config files: the plan sidecar, the script change it needs, the line
prompts without --yes, and a launch.sh that is exactly `dswiz launch`'s command."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from wizard.cli import cli
from wizard.commands import config as config_cmd
from wizard.config.build import WriteOptions, config_set_from_strategy
from wizard.config.render import render_all
from wizard.config.sidecar import SIDECAR_NAME, read_sidecar
from wizard.hints import code_hints
from wizard.strategy import Strategy

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "tui"))
from test_prompts import ScriptedPrompter  # noqa: E402  (the wizard's own scripted prompter)


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def test_a_planned_config_writes_its_plan_next_to_it(tmp_path: Path) -> None:
    out = tmp_path / "run1"
    result = invoke(
        "config", "--yes", "--model", "gpt2-medium", "--hardware", "1xA100-80GB", "--seq-len", "1024",
        "--micro-batch", "8", "--for", "accelerate", "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    sidecar = read_sidecar(out)
    assert sidecar is not None
    ds = json.loads((out / "ds_config.json").read_text())
    s = sidecar.strategy
    assert (ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == (
        s.micro_batch_size,
        s.gradient_accumulation_steps,
    )
    assert ds["zero_optimization"]["stage"] == s.zero_stage and s.micro_batch_size == 8
    assert sidecar.model_arg == "gpt2-medium" and sidecar.hardware_arg == "1xA100-80GB"
    assert sidecar.seq_len == 1024 and sidecar.config_args == ("--for", "accelerate")
    assert (
        sidecar.predicted is not None
    )  # the planner's prediction for the strategy as written (micro-batch 8)
    assert f"wrote {out / SIDECAR_NAME}" in result.output
    # `dswiz check` of the folder ignores the sidecar (it is no DeepSpeed config)
    check = invoke("check", str(out), "--no-consumer-check")
    assert check.exit_code == 0, check.output


def test_without_a_model_there_is_no_plan_to_record(tmp_path: Path) -> None:
    out = tmp_path / "run1"
    assert invoke("config", "--yes", "--stage", "2", "--out", str(out)).exit_code == 0
    assert not (out / SIDECAR_NAME).exists()


def test_the_script_change_is_shown_after_writing(tmp_path: Path) -> None:
    out = tmp_path / "run1"
    result = invoke(
        "config",
        "--yes",
        "--stage",
        "2",
        "--offload-optimizer",
        "cpu",
        "--for",
        "accelerate",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    hints = code_hints("accelerate", "config", "none")  # the optimizer is DeepSpeed's (offload), no scheduler
    assert f"script (accelerate): {hints.explanation}" in result.output
    for line in hints.diff.splitlines():
        assert line in result.output
    [trap] = code_hints("accelerate", "config", "script").findings
    assert f"if your script builds its own LR scheduler: {trap.fix}" in result.output


def test_zeropp_can_be_asked_for_and_refused(tmp_path: Path) -> None:
    out = tmp_path / "run1"
    args = ["config", "--yes", "--stage", "3", "--nodes", "2", "--gpus-per-node", "4", "--out", str(out)]
    assert invoke(*args, "--zeropp").exit_code == 0
    zero = json.loads((out / "ds_config.json").read_text())["zero_optimization"]
    assert zero["zero_quantized_weights"] is True and zero["zero_hpz_partition_size"] == 4
    assert invoke(*args, "--no-zeropp", "--force").exit_code == 0
    zero = json.loads((out / "ds_config.json").read_text())["zero_optimization"]
    assert not zero.get("zero_quantized_weights") and zero.get("zero_hpz_partition_size", 1) == 1


# ------------------------------------------------------------------------------------------- without --yes


def test_without_yes_and_without_a_terminal_it_says_to_use_yes(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "wizard", "config", "--out", str(tmp_path / "x")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "there is no terminal to ask them in" in proc.stderr and "--yes" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "x").exists()


def test_without_yes_the_line_prompts_ask_and_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "answers"
    prompter = ScriptedPrompter({"model-preset": "gpt2-medium", "micro": "2", "gas": "3"})
    monkeypatch.setattr(config_cmd, "is_interactive", lambda: True)  # the terminal is the one thing not here
    monkeypatch.setattr("wizard.prompts.QuestionaryPrompter", lambda: prompter)
    result = invoke("config", "--hardware", "2xA100-80GB", "--stage", "3", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "hardware" not in prompter.asked  # --hardware reached the prompts
    assert "used with --yes only" not in result.output and "keep-imported" in prompter.asked
    ds = json.loads((out / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage"] == 3  # --stage 3 is the strategy question's default
    assert ds["train_micro_batch_size_per_gpu"] == 2 and ds["train_batch_size"] == 2 * 3 * 2
    sidecar = read_sidecar(out)  # the wizard records its plan too
    assert (
        sidecar is not None and sidecar.model_arg == "gpt2-medium" and sidecar.hardware_arg == "2xA100-80GB"
    )
    assert sidecar.strategy.micro_batch_size == 2 and sidecar.strategy.gradient_accumulation_steps == 3
    assert "script (deepspeed): " in result.output and f"Next: dswiz launch --config {out}" in result.output


def test_without_yes_from_a_file_starts_from_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    existing = tmp_path / "old.json"
    existing.write_text(json.dumps({"train_micro_batch_size_per_gpu": 3, "zero_optimization": {"stage": 3}}))
    prompter = ScriptedPrompter({"model-preset": "gpt2-medium"})
    monkeypatch.setattr(config_cmd, "is_interactive", lambda: True)
    monkeypatch.setattr("wizard.prompts.QuestionaryPrompter", lambda: prompter)
    out = tmp_path / "new"
    result = invoke("config", "--hardware", "1xA100-80GB", "--from", str(existing), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "keep-imported" in prompter.asked
    ds = json.loads((out / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage"] == 3 and ds["train_micro_batch_size_per_gpu"] == 3


def test_from_a_folder_keeps_its_no_local_rank_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder written with --no-local-rank, written again from its JSON: launch.sh keeps --no_local_rank (as
    `dswiz launch --config` reads it); --local-rank drops it; the questions keep it, and drop it without a word when
    the answers pick a launcher that never passes --local_rank."""
    first = tmp_path / "first"
    made = invoke(
        "config", "--yes", "--hardware", "1xA100-80GB", "--stage", "2", "--no-local-rank", "--out", str(first)
    )
    assert made.exit_code == 0, made.output
    assert "--no_local_rank" in (first / "launch.sh").read_text()

    again = tmp_path / "again"
    kept = invoke(
        "config", "--yes", "--from", str(first / "ds_config.json"), "--stage", "1", "--out", str(again)
    )
    assert kept.exit_code == 0, kept.output
    assert "--no_local_rank" in (again / "launch.sh").read_text()
    assert json.loads((again / "ds_config.json").read_text())["zero_optimization"]["stage"] == 1

    undone = tmp_path / "undone"
    told = invoke(
        "config", "--yes", "--from", str(first / "ds_config.json"), "--local-rank", "--out", str(undone)
    )
    assert told.exit_code == 0, told.output
    assert "--no_local_rank" not in (undone / "launch.sh").read_text()

    monkeypatch.setattr(config_cmd, "is_interactive", lambda: True)
    for consumer, passed in (("deepspeed", False), ("accelerate", True)):
        prompter = ScriptedPrompter({"model-preset": "gpt2-medium", "consumer": consumer})
        monkeypatch.setattr("wizard.prompts.QuestionaryPrompter", lambda p=prompter: p)
        out = tmp_path / f"asked-{consumer}"
        result = invoke(
            "config", "--hardware", "1xA100-80GB", "--from", str(first / "ds_config.json"), "--out", str(out)
        )
        assert result.exit_code == 0, result.output
        assert ("--no_local_rank" not in (out / "launch.sh").read_text()) is passed, consumer
        assert "consumer" in prompter.asked and "--no-local-rank would change nothing" not in result.output


# ------------------------------------------------------------------------- launch.sh == dswiz launch's command

CASES = {
    "deepspeed": (Strategy(zero_stage=2, micro_batch_size=4, gpus_per_node=8), WriteOptions()),
    "trainer": (Strategy(zero_stage=3, gpus_per_node=4), WriteOptions(consumer="trainer")),
    # `dswiz config --no-local-rank`: launch.sh passes --no_local_rank, and `dswiz launch --config` reads it back
    "no_local_rank": (Strategy(zero_stage=2, gpus_per_node=2), WriteOptions(local_rank_arg=False)),
    "pdsh": (Strategy(zero_stage=1, nodes=2, gpus_per_node=4), WriteOptions(master_port=29600)),
    "nossh": (Strategy(zero_stage=1, nodes=2, gpus_per_node=4), WriteOptions(hosts=("a", "b"))),
    "accelerate": (Strategy(zero_stage=2, gpus_per_node=2), WriteOptions(consumer="accelerate")),
    "accelerate_2_nodes": (
        Strategy(zero_stage=3, nodes=2, gpus_per_node=2),
        WriteOptions(consumer="accelerate", hosts=("a", "b")),
    ),
}


def launch_sh(
    directory: Path, script: str, args: list[str], node_rank: str
) -> tuple[list[str], dict[str, str]]:
    """The command and environment launch.sh gives the job, its variables expanded as bash would."""
    values = {"DIR": str(directory), "SCRIPT": script, "PYTHON": "python3", "NODE_RANK": node_rank}
    env: dict[str, str] = {}
    argv: list[str] = []
    for line in (directory / "launch.sh").read_text().splitlines():
        for var, value in values.items():
            line = line.replace(f'"${var}', f'"{value}')
        if line.startswith("export "):
            key, value = line[len("export ") :].split("=", 1)
            env[key] = shlex.split(value)[0]
        elif line.startswith("exec "):
            words = shlex.split(line[len("exec ") :])
            argv = [w for w in words if w != "$@"] + args
    return argv, env


def dry_run(directory: Path, script: str, args: list[str], *extra: str) -> tuple[list[str], dict[str, str]]:
    result = invoke(
        "launch", "--dry-run", "--config", str(directory), "--python", "python3", *extra, script, *args
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    [command] = [shlex.split(ln) for ln in lines if ln and not ln.startswith("#")]
    env = dict(ln[len("# env: ") :].split("=", 1) for ln in lines if ln.startswith("# env: "))
    return command[command.index("python3") :], env


@pytest.mark.parametrize("name", sorted(CASES))
def test_launch_sh_runs_what_dswiz_launch_runs(name: str, tmp_path: Path) -> None:
    strategy, options = CASES[name]
    if name == "nossh":
        options = replace(options, master_addr="10.0.0.1")
    directory = tmp_path / name
    directory.mkdir()
    config = config_set_from_strategy(strategy, replace(options, config_dir=str(directory)))
    if name == "nossh":
        config = config.model_copy(
            update={"topology": config.topology.model_copy(update={"launcher": "nossh"})}
        )
    for file_name, text in render_all(config).items():
        (directory / file_name).write_text(text)
    port = str(config.topology.master_port)
    node = ["--node-rank", "1"] if name == "nossh" else []
    sh_argv, sh_env = launch_sh(directory, "train.py", ["--steps", "3"], node_rank="1")
    argv, env = dry_run(directory, "train.py", ["--steps", "3"], "--master-port", port, *node)

    # What differs is dswiz launch's run directory: the rank logs, the launched copies of the configs (made
    # observable), the .deepspeed_env it writes there; and accelerate is told the port its YAML already holds.
    if "--enable_each_rank_log" in argv:
        i = argv.index("--enable_each_rank_log")
        run_dir = Path(argv[i + 1]).parent.parent
        del argv[i : i + 2]
        argv = [w.replace(f"{run_dir}/config/", f"{directory}/") for w in argv]
        env = {
            k: v.replace(f"{run_dir}/config/deepspeed_env", f"{directory}/.deepspeed_env")
            for k, v in env.items()
        }
    if "--main_process_port" in argv:
        i = argv.index("--main_process_port")
        assert argv[i + 1] == port  # what accelerate.yaml says
        del argv[i : i + 2]
        j = argv.index("--config_file")
        assert Path(argv[j + 1]).name == "accelerate.yaml"
        argv[j + 1] = str(directory / "accelerate.yaml")
    assert argv == sh_argv
    assert env == sh_env
    assert ("--no_local_rank" in argv) == (name == "no_local_rank")
    if strategy.nodes > 1 and config.consumer != "accelerate":
        assert argv[argv.index("--master_addr") + 1] == config.topology.master_addr  # the plan's first host


def test_a_folder_written_with_no_local_rank_is_followed_said_and_can_be_overridden(tmp_path: Path) -> None:
    strategy, options = CASES["no_local_rank"]
    config = config_set_from_strategy(strategy, replace(options, config_dir=str(tmp_path)))
    for file_name, text in render_all(config).items():
        (tmp_path / file_name).write_text(text)
    followed = invoke("launch", "--dry-run", "--config", str(tmp_path), "--python", "python3", "train.py")
    assert followed.exit_code == 0, followed.output
    assert "--no_local_rank " in followed.output
    assert f"# --no_local_rank: as {tmp_path}/launch.sh has it" in followed.output  # where it came from
    argv, _ = dry_run(tmp_path, "train.py", [], "--local-rank")  # the folder's choice undone
    assert "--no_local_rank" not in argv
    argv, _ = dry_run(tmp_path, "train.py", [], "--launcher", "torchrun")  # means nothing there: not refused
    assert "--no_local_rank" not in argv and argv[:3] == ["python3", "-m", "torch.distributed.run"]
