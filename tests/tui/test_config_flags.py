"""`dswiz config --yes` and `dswiz plan`: the planning flags they share, errors that stop a write unless
--force-errors, host lists with an empty name, piped output that keeps its lines whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wizard.cli import cli
from wizard.cli_options import planning_options
from wizard.commands.config import config
from wizard.commands.plan import plan
from wizard.errors import DswizError


def run(*args: str) -> int:
    rc = cli.main(args=list(args), prog_name="dswiz", standalone_mode=False)
    return rc if isinstance(rc, int) else 0


def test_plan_and_config_take_the_same_planning_flags() -> None:
    @planning_options(model_required=False)
    def probe(**_: object) -> None: ...

    shared = {p.name for p in probe.__click_params__}  # type: ignore[attr-defined]
    for command in (plan, config):
        names = {p.name: p for p in command.params}
        assert shared <= set(names), shared - set(names)
        assert "auto" in names["precision"].type.choices  # type: ignore[attr-defined]


def test_config_plans_with_the_margin_it_is_given(tmp_path: Path) -> None:
    peak: dict[str, int] = {}
    for margin in ("5", "40"):
        out = tmp_path / margin
        assert (
            run(
                "config",
                "--yes",
                "-m",
                "llama-7b",
                "--hardware",
                "8xA100-80GB",
                "--margin",
                margin,
                "--out",
                str(out),
            )
            == 0
        )
        # What is planned must fit the card less the margin; which strategy wins may change with the margin (a
        # smaller micro-batch can make checkpointing or another stage faster), so the micro-batch alone says little.
        peak[margin] = json.loads((out / "dswiz-plan.json").read_text())["predicted"]["needed_gpu_bytes"]
        assert peak[margin] <= (1 - int(margin) / 100) * 80 * 1024**3
    assert peak["40"] < peak["5"]  # 40 % of the GPU kept free leaves room for less


def test_errors_stop_the_write_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x"
    args = ("config", "--yes", "--hardware", "2xV100-32GB", "--precision", "bf16", "--out", str(out))
    with pytest.raises(DswizError, match="1 error in the files: nothing was written") as refused:
        run(*args)
    assert refused.value.exit_code == 1
    assert "precision-unsupported" in capsys.readouterr().out and not out.exists()
    assert run(*args, "--force-errors") == 0
    assert json.loads((out / "ds_config.json").read_text())["bf16"]["enabled"] is True


def test_a_precision_the_gpus_lack_is_refused_before_planning(tmp_path: Path) -> None:
    out = tmp_path / "x"
    with pytest.raises(DswizError, match="cannot run bf16"):
        run(
            "config",
            "--yes",
            "-m",
            "gpt2-xl",
            "--hardware",
            "2xV100-32GB",
            "--precision",
            "bf16",
            "--out",
            str(out),
        )
    assert not out.exists()


def test_an_empty_host_name_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DswizError, match="empty host name"):
        run(
            "config",
            "--yes",
            "--hardware",
            "2x8xA100-80GB",
            "--hostfile-hosts",
            ",worker1",
            "--out",
            str(tmp_path / "x"),
        )


def test_piped_plan_keeps_lines_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "models" / "llama.json"
    model.parent.mkdir()
    model.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "intermediate_size": 11008,
                "vocab_size": 32000,
            }
        )
    )
    assert run("plan", "-m", str(model), "--hardware", "8xA100-80GB") == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("llama (") and first.endswith("[8xA100-80GB]")  # named by the file, one line
