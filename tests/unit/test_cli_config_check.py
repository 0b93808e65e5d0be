"""`dswiz config --yes` and `dswiz check` as a user runs them (subprocess, no consumer check: that needs
DeepSpeed and is covered by the integration tests)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from wizard.config.load import load_path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "configs"


def dswiz(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "wizard", *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env
    )


def test_config_yes_writes_a_complete_lint_clean_set(tmp_path: Path) -> None:
    out = tmp_path / "run1"
    proc = dswiz(
        "config",
        "--yes",
        "--stage",
        "3",
        "--offload-optimizer",
        "cpu",
        "--gpus-per-node",
        "2",
        "--micro-batch",
        "4",
        "--global-batch",
        "16",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["accelerate.yaml", "ds_config.json", "launch.sh"]
    assert "dswiz launch --config" in proc.stdout and "ZeRO-3" in proc.stdout
    cfg = json.loads((out / "ds_config.json").read_text())
    assert (
        cfg["train_micro_batch_size_per_gpu"],
        cfg["gradient_accumulation_steps"],
        cfg["train_batch_size"],
    ) == (4, 2, 16)
    assert cfg["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert cfg["optimizer"]["type"] == "AdamW"  # offload: DeepSpeed's optimizer, so DeepSpeedCPUAdam is used
    assert os.stat(out / "launch.sh").st_mode & stat.S_IXUSR
    check = dswiz("check", str(out), "--for", "deepspeed", "--no-consumer-check")
    assert check.returncode == 0, check.stdout


def test_config_yes_multi_node_writes_hostfile_and_node_env(tmp_path: Path) -> None:
    out = tmp_path / "cluster"
    proc = dswiz(
        "config",
        "--yes",
        "--hardware",
        "2x8xH100",
        "--hostfile-hosts",
        "n1,n2",
        "--for",
        "accelerate",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    assert (out / "hostfile").read_text().splitlines()[-2:] == ["n1 slots=8", "n2 slots=8"]
    assert (out / ".deepspeed_env").read_text() == "CUDA_DEVICE_ORDER=PCI_BUS_ID\n"
    loaded = load_path(out / "accelerate.yaml").config
    assert loaded.topology.world_size == 16 and loaded.accelerate_mode == "config_file"
    assert loaded.accelerate_ds_fields["deepspeed_config_file"] == str((out / "ds_config.json").resolve())


def test_existing_files_are_refused_without_force_and_backed_up_with_it(tmp_path: Path) -> None:
    out = tmp_path / "o"
    assert dswiz("config", "--yes", "--out", str(out)).returncode == 0
    before = (out / "ds_config.json").read_text()
    again = dswiz("config", "--yes", "--out", str(out))  # same content: nothing to refuse
    assert again.returncode == 0
    refused = dswiz("config", "--yes", "--micro-batch", "8", "--out", str(out))
    assert refused.returncode == 2
    assert "already has ds_config.json" in refused.stderr and "--force" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert (out / "ds_config.json").read_text() == before  # nothing half-written
    forced = dswiz("config", "--yes", "--micro-batch", "8", "--out", str(out), "--force")
    assert forced.returncode == 0
    backups = list(out.glob("ds_config.json.bak-*"))
    assert len(backups) == 1 and backups[0].read_text() == before
    assert json.loads((out / "ds_config.json").read_text())["train_micro_batch_size_per_gpu"] == 8


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "without --yes"),
        (("--yes",), "no output directory"),
        (
            ("--yes", "--stage", "2", "--offload-param", "cpu", "--out", "x"),
            "parameter offload only works at ZeRO stage 3",
        ),
        (("--yes", "--stage", "3", "--offload-optimizer", "nvme", "--out", "x"), "--nvme-path"),
        (
            ("--yes", "--gpus-per-node", "2", "--micro-batch", "4", "--global-batch", "12", "--out", "x"),
            "not a multiple",
        ),
        (("--yes", "--nodes", "2", "--hostfile-hosts", "a,b,c", "--out", "x"), "3 host names"),
        (("--yes", "--hardware", "8xP100", "--out", "x"), "unknown GPU model"),
        (
            ("--yes", "--for", "accelerate", "--no-local-rank", "--out", "x"),
            "--no-local-rank would change nothing: accelerate never passes --local_rank",
        ),
    ],
)
def test_config_bad_choices_are_clear_errors(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    proc = dswiz("config", *args, cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr and "fix:" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x").exists()


def test_config_with_model_uses_the_planner(tmp_path: Path) -> None:
    proc = dswiz(
        "config", "--yes", "--model", "gpt2", "--hardware", "8xA100-80GB", "--out", str(tmp_path / "m")
    )
    assert proc.returncode == 0, proc.stderr
    assert "strategy: ZeRO-" in proc.stdout


def test_check_exit_codes_and_grouping() -> None:
    bad = dswiz(
        "check", str(CORPUS / "broken" / "batch_arithmetic.json"), "--world-size", "4", "--no-consumer-check"
    )
    assert bad.returncode == 1
    assert "ERRORS" in bad.stdout and "[batch-arithmetic]" in bad.stdout and "fix:" in bad.stdout
    warn = dswiz("check", str(CORPUS / "broken" / "offload_param_stage2.json"), "--no-consumer-check")
    assert warn.returncode == 0 and "WARNINGS" in warn.stdout
    ok = dswiz(
        "check", str(CORPUS / "valid" / "plain_stage1.json"), "--world-size", "8", "--no-consumer-check"
    )
    assert ok.returncode == 0 and "no problems found" in ok.stdout


def test_check_json_output() -> None:
    proc = dswiz("check", str(CORPUS / "broken" / "fp16_and_bf16.json"), "--json", "--no-consumer-check")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and doc["counts"]["error"] >= 1
    assert {"severity", "code", "what", "why", "fix", "location"} <= set(doc["findings"][0])
    assert doc["findings"][0]["code"] == "fp16-and-bf16"


def test_check_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    proc = dswiz("check", str(tmp_path / "nope.json"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr and "Traceback" not in proc.stderr


def test_check_an_empty_file_is_said_to_be_empty(tmp_path: Path) -> None:
    """An empty ds_config.json was read as hjson and checked as a config without a batch."""
    (tmp_path / "empty.json").write_text("")
    proc = dswiz("check", "empty.json", "--no-consumer-check", "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    (f,) = json.loads(proc.stdout)["findings"]
    assert (f["code"], f["what"], f["severity"]) == ("unreadable", "empty.json is empty", "error")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_check_an_endless_file_is_refused_after_a_bounded_read() -> None:
    """/dev/zero is valid UTF-8 that never ends: check read it until the machine ran out of memory."""
    proc = dswiz("check", "/dev/zero", "--no-consumer-check", "--json")
    assert proc.returncode == 1, proc.stderr
    (f,) = json.loads(proc.stdout)["findings"]
    assert f["code"] == "unreadable" and "larger than 16 MiB (or does not end)" in f["what"]


@pytest.mark.parametrize(
    ("text", "kind"), [("[1, 2, 3]", "an array"), ("null", "null"), ('"hello"', "a string")]
)
def test_check_json_that_is_not_an_object_is_one_clear_error(tmp_path: Path, text: str, kind: str) -> None:
    """Only dswiz's own finding: DeepSpeed's check is not run on it (it stopped on a raw AttributeError, reported with
    the fix 'check that this Python has torch and DeepSpeed installed')."""
    path = tmp_path / "ds.json"
    path.write_text(text)
    proc = dswiz("check", str(path))
    assert proc.returncode == 1
    assert f"a DeepSpeed config is a JSON object, not {kind}" in proc.stdout
    assert "consumer-check-failed" not in proc.stdout and "AttributeError" not in proc.stdout + proc.stderr


def test_check_for_deepspeed_refuses_an_accelerate_yaml(tmp_path: Path) -> None:
    """DeepSpeed does not read an accelerate YAML: its own validation of the mapping stopped on a raw TypeError."""
    (tmp_path / "acc.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 2\n")
    proc = dswiz("check", "acc.yaml", "--for", "deepspeed", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "TypeError" not in proc.stdout
    assert "error: acc.yaml is an accelerate YAML: accelerate reads it, not plain DeepSpeed" in proc.stderr


def test_check_model_is_loaded_even_without_a_gpu_to_predict_for(tmp_path: Path) -> None:
    """`--model nosuch` on a machine without a GPU (CUDA_VISIBLE_DEVICES="" hides any) once passed, exit 0, with a
    note whose why and fix were empty."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}

    def check(model: str) -> subprocess.CompletedProcess[str]:
        argv = [
            sys.executable,
            "-m",
            "wizard",
            "check",
            str(cfg),
            "--model",
            model,
            "--no-consumer-check",
            "--json",
        ]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)

    bad = check("nosuch")
    assert bad.returncode == 2 and "error: unknown model 'nosuch'" in bad.stderr, bad.stderr
    note = next(f for f in json.loads(check("gpt2").stdout)["findings"] if f["code"] == "plan-not-predicted")
    assert note["what"] == "no NVIDIA GPU here to predict for" and note["why"] and "--hardware" in note["fix"]


def test_check_with_a_python_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    """--python names the interpreter the consumers' checks run in; a missing one was a warning and exit 0."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}}))
    proc = dswiz("check", str(cfg), "--python", str(tmp_path / "no-python"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"error: --python {tmp_path / 'no-python'}: no such executable here" in proc.stderr
    assert proc.stdout == ""  # refused before anything is checked


def test_plan_and_config_say_the_same_without_a_gpu(tmp_path: Path) -> None:
    """No GPU here: `dswiz plan` said "nothing to fit on", `dswiz config --yes` "no strategy fits": one story now,
    with each command's own line to run instead."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    for command in (("plan",), ("config", "--yes", "--out", str(tmp_path / "out"))):
        argv = [sys.executable, "-m", "wizard", *command, "--model", "tiny"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
        assert proc.returncode == 2 and "so there is nothing to fit on" in proc.stderr, proc.stderr
        assert (
            f"dswiz {' '.join(command[:2]) if command[0] == 'config' else 'plan'} --model tiny --hardware"
            in proc.stderr
        )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["plan", "config"])
def test_gpu_memory_above_the_card_is_refused(tmp_path: Path, command: str) -> None:
    """--gpu-memory 1TiB on an H200 planned for a card no H200 is, and said it fit."""
    extra = ("--yes", "--out", str(tmp_path / "cfg")) if command == "config" else ()
    proc = dswiz(command, "--model", "gpt2", "--hardware", "1xH200", "--gpu-memory", "1TiB", *extra)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--gpu-memory 1.0 TiB is more than the NVIDIA H200 holds (140.4 GiB per GPU)" in proc.stderr
    assert "give at most 140.4 GiB" in proc.stderr and not (tmp_path / "cfg").exists()
    ok = dswiz(command, "--model", "gpt2", "--hardware", "1xH200", "--gpu-memory", "24GiB", *extra)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize(
    ("flag", "value", "spec"), [("--nodes", "2", "2x8x"), ("--gpus-per-node", "16", "1x16x")]
)
def test_more_gpus_than_the_hardware_has_says_how_to_describe_them(
    tmp_path: Path, flag: str, value: str, spec: str
) -> None:
    """The fix was only "or pass --force-errors to write it anyway"."""
    out = tmp_path / "cfg"
    proc = dswiz(
        "config", "--yes", "--model", "gpt2", "--hardware", "8xA100-80GB", flag, value, "--out", str(out)
    )
    assert proc.returncode == 1 and not out.exists(), proc.stderr
    fix = proc.stderr.split("fix: ", 1)[1]
    assert fix.startswith(
        "ask for at most 1 node(s) of 8 GPU(s), as the hardware is, or plan for the machines"
    )
    suggested = fix.split("--hardware ", 1)[1].split(";")[0]
    assert suggested.startswith(spec)
    again = dswiz(
        "config", "--yes", "--model", "gpt2", "--hardware", suggested, flag, value, "--out", str(out)
    )
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize(
    ("args", "problem", "fix"),
    [
        (
            ("plan", "--model", "nope-model", "--hardware", "1xH200"),
            "unknown model 'nope-model'",
            "use a preset",
        ),
        (("check", "/nonexistent/ds.json"), "/nonexistent/ds.json does not exist", "check the path"),
        (("plan", "--model", "gpt2", "--bogus"), "No such option '--bogus'.", "see dswiz plan --help"),
    ],
)
def test_errors_under_json_are_a_json_object_on_stdout(args: tuple[str, ...], problem: str, fix: str) -> None:
    """`dswiz plan --json | jq` got empty input on an error: now an object with the same words as stderr."""
    proc = dswiz(*args, "--json")
    assert proc.returncode == 2 and f"rror: {problem}" in proc.stderr  # click says "Error:"
    got = json.loads(proc.stdout)
    assert got["error"] == problem and got["fix"].startswith(fix) and got["exit_code"] == 2
    assert dswiz(*args).stdout == ""  # without --json, stdout stays empty


@pytest.mark.parametrize("flag", ["--micro-batch", "--grad-accum"])
def test_batch_flags_are_bounded(flag: str) -> None:
    """--micro-batch 99999999999999999999 planned "148,681,640,624,999,989,248 bytes of 140 GiB"."""
    proc = dswiz("plan", "--model", "gpt2", "--hardware", "1xH200", flag, "99999999999999999999")
    assert proc.returncode == 2 and "is not in the range 1<=x<=1000000" in proc.stderr


def test_json_errors_come_only_from_commands_that_take_json() -> None:
    """`dswiz launch ... train.py --json` passes --json to the script: its error stays text; and the list of
    commands that answer errors in JSON is the list of commands with a --json option."""
    import click

    from wizard.cli import JSON_COMMANDS, cli

    with_json = {
        name
        for name in cli.list_commands(click.Context(cli))
        if any("--json" in p.opts for p in cli.get_command(click.Context(cli), name).params)  # type: ignore[union-attr]
    }
    assert with_json == JSON_COMMANDS
    proc = dswiz("launch", "--config", "/nonexistent-dir", "train.py", "--json")
    assert proc.returncode == 2 and proc.stdout == "" and "error:" in proc.stderr
    assert dswiz("config", "--json").stdout == ""


def test_a_card_sold_rounded_takes_its_nominal_size_and_a_pasteable_hardware_spec() -> None:
    """A "24 GB" RTX 4090 holds 23.99 GiB: --gpu-memory 24GiB was refused as more than the card; and the topology
    fix printed "--hardware 2x1xGeForce RTX 4090", which a shell splits."""
    ok = dswiz("plan", "--model", "gpt2", "--hardware", "1xRTX4090", "--gpu-memory", "24GiB")
    assert ok.returncode == 0, ok.stderr
    proc = dswiz(
        "config",
        "--yes",
        "--model",
        "gpt2",
        "--hardware",
        "1xRTX4090",
        "--nodes",
        "2",
        "--out",
        "/nonexistent/x",
    )
    assert proc.returncode == 1 and "--hardware 2x1xRTX4090;" in proc.stderr, proc.stderr


@pytest.mark.parametrize(("flags", "reader"), [((), "deepspeed"), (("--for", "trainer"), "trainer")])
def test_a_folder_dswiz_wrote_is_checked_for_the_reader_its_json_names(
    flags: tuple[str, ...], reader: str, tmp_path: Path
) -> None:
    """`dswiz check DIR` read 'no particular consumer' for a folder `dswiz config` wrote: it guesses by the folder's
    ds_config.json, as for the file itself."""
    from click.testing import CliRunner

    from wizard.cli import cli as main

    runner = CliRunner()
    made = runner.invoke(main, ["config", "--yes", "--model", "gpt2", "--hardware", "1xH200", "--no-history",
                                *flags, "--out", str(tmp_path / "cfg")])  # fmt: skip
    assert made.exit_code == 0, made.output
    result = runner.invoke(main, ["check", str(tmp_path / "cfg"), "--no-consumer-check"])
    first = result.output.splitlines()[0]
    assert first.startswith(f"checked for: {reader}, guessed because its ds_config.json:"), first


def test_check_model_says_what_fp32_gradient_accumulation_adds(tmp_path: Path) -> None:
    """data_types.grad_accum_dtype fp32 under bf16 weights: the memory model counts bf16 gradients, so the prediction
    says so and by how much (at ZeRO-1 DeepSpeed's BF16 optimizer: fp32 gradients beside the bf16 ones, 4 bytes a
    parameter more); without it no
    such warning."""
    config = json.loads((CORPUS / "valid" / "grad_accum_fp32_stage1_bf16.json").read_text())
    with_fp32 = tmp_path / "fp32.json"
    with_fp32.write_text(json.dumps(config))
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({k: v for k, v in config.items() if k != "data_types"}))
    args = ("--model", "gpt2-xl", "--hardware", "1xH100-80GB", "--json", "--no-consumer-check")
    docs = {}
    for path in (with_fp32, plain):
        proc = dswiz("check", str(path), *args)
        assert proc.returncode == 0, proc.stderr
        docs[path.name] = json.loads(proc.stdout)
    notes = [f for f in docs["fp32.json"]["findings"] if f["code"] == "plan-not-counted"]
    assert len(notes) == 1 and notes[0]["severity"] == "warning"
    assert notes[0]["location"] == "data_types.grad_accum_dtype"
    assert "5.8 GiB" in notes[0]["why"]  # gpt2-xl's 1.56e9 parameters x 4 bytes (fp32 beside bf16)
    assert not [f for f in docs["plain.json"]["findings"] if f["code"] == "plan-not-counted"]
    # the prediction itself is the same candidate either way
    assert docs["fp32.json"]["prediction"] == docs["plain.json"]["prediction"]
