"""``dswiz --plain``: the same decisions as line prompts, answered by a script (questionary is not under test)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from wizard.errors import DswizError
from wizard.prompts import Option, run_prompts


class ScriptedPrompter:
    """Answers each question by its key; a list answers the same question several times, in order.
    Records what was asked (and which options were disabled, with the reason) for the assertions."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = {k: list(v) if isinstance(v, list) else [v] for k, v in answers.items()}
        self.asked: list[str] = []
        self.disabled: dict[str, dict[Any, str]] = {}
        self.titles: dict[str, dict[Any, str]] = {}

    def _answer(self, key: str, default: Any) -> Any:
        self.asked.append(key)
        queue = self.answers.get(key)
        if not queue:
            return default
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def text(self, key: str, message: str, default: str = "") -> str:
        return str(self._answer(key, default))

    def select(self, key: str, message: str, options: Sequence[Option], default: Any = None) -> Any:
        self.disabled[key] = {value: why for _, value, why in options if why}
        self.titles[key] = {value: title for title, value, _ in options}
        answer = self._answer(key, default if default is not None else options[0][1])
        assert answer not in self.disabled[key], f"{key}: picked a disabled option {answer!r}"
        return answer

    def confirm(self, key: str, message: str, default: bool = True) -> bool:
        return bool(self._answer(key, default))


def test_plain_single_node_writes_config(service: Any, tmp_path: Path) -> None:
    said: list[str] = []
    p = ScriptedPrompter({"model-preset": "llama-7b", "candidate": 1, "micro": "2", "gas": "3"})
    rc = run_prompts(prompter=p, hardware_spec="8xA100-80GB", service=service, say=said.append)
    assert rc == 0
    ds = json.loads((tmp_path / "dswiz-config" / "ds_config.json").read_text())
    assert f"ZeRO-{ds['zero_optimization']['stage']}," in p.titles["candidate"][1]  # the second candidate
    assert ds["train_batch_size"] == 2 * 3 * 8
    assert "Next: dswiz launch --config dswiz-config train.py" in said
    assert "multi-node" in p.asked and "hostfile" not in p.asked


def test_plain_no_gpu_asks_for_described_hardware(service: Any, tmp_path: Path) -> None:
    said: list[str] = []
    p = ScriptedPrompter({"hardware": ["nonsense", "1xA100-80GB"], "model-preset": "gpt2-medium"})
    assert run_prompts(prompter=p, service=service, say=said.append) == 0
    assert any("No GPU here" in s for s in said)
    assert any("unknown GPU model 'nonsense'" in s for s in said)  # the hardware module's own message
    assert p.asked.count("hardware") == 2


def test_plain_by_hand_offers_only_valid_offloads(service: Any, tmp_path: Path) -> None:
    p = ScriptedPrompter(
        {
            "model-preset": "llama-7b",
            "by-hand": True,
            "stage": 2,
            "offload-optimizer": "cpu",
            "offload-param": "none",
        }
    )
    assert run_prompts(prompter=p, hardware_spec="8xA100-80GB", service=service, say=lambda s: None) == 0
    assert "parameter offload only works at ZeRO stage 3" in p.disabled["offload-param"]["cpu"]
    assert "NVMe optimizer offload only works at stage 3" in p.disabled["offload-optimizer"]["nvme"]
    ds = json.loads((tmp_path / "dswiz-config" / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage"] == 2


def test_plain_multi_node_validates_the_hostfile(service: Any, tmp_path: Path) -> None:
    said: list[str] = []
    p = ScriptedPrompter(
        {
            "model-preset": "llama-7b",
            "hostfile": ["gpu-a slots=8", "gpu-a slots=8; gpu-b slots=8"],
            "launcher": "openmpi",
        }
    )
    assert run_prompts(prompter=p, hardware_spec="2x8xA100-80GB", service=service, say=said.append) == 0
    assert p.asked.count("hostfile") == 2  # the first answer had one host for two nodes
    lines = (tmp_path / "dswiz-config" / "hostfile").read_text().splitlines()
    assert [ln for ln in lines if ln and not ln.startswith("#")] == ["gpu-a slots=8", "gpu-b slots=8"]


def test_plain_refuses_to_overwrite_without_consent(service: Any, tmp_path: Path) -> None:
    out = tmp_path / "dswiz-config"
    out.mkdir()
    (out / "ds_config.json").write_text("{}\n")
    p = ScriptedPrompter({"model-preset": "llama-7b", "overwrite": False})
    assert run_prompts(prompter=p, hardware_spec="8xA100-80GB", service=service, say=lambda s: None) == 1
    assert (out / "ds_config.json").read_text() == "{}\n"
    p = ScriptedPrompter({"model-preset": "llama-7b", "overwrite": True})
    assert run_prompts(prompter=p, hardware_spec="8xA100-80GB", service=service, say=lambda s: None) == 0
    assert [b.read_text() for b in out.glob("ds_config.json.bak-*")] == ["{}\n"]


def test_plain_bad_number_is_asked_again(service: Any, tmp_path: Path) -> None:
    said: list[str] = []
    p = ScriptedPrompter({"model-preset": "llama-7b", "seq-len": ["long", "0", "4096"]})
    assert run_prompts(prompter=p, hardware_spec="8xA100-80GB", service=service, say=said.append) == 0
    assert p.asked.count("seq-len") == 3
    assert any("must be a whole number" in s for s in said) and any("at least 1" in s for s in said)


def test_plain_from_missing_file_is_a_clear_error(service: Any, tmp_path: Path) -> None:
    with pytest.raises(DswizError, match="does not exist"):
        run_prompts(prompter=ScriptedPrompter({}), from_file=tmp_path / "nope.json", service=service)


def test_plain_from_file_keeps_the_imported_strategy(service: Any, tmp_path: Path) -> None:
    existing = tmp_path / "old.json"
    existing.write_text(
        json.dumps({"train_micro_batch_size_per_gpu": 3, "zero_optimization": {"stage": 3}}) + "\n"
    )
    p = ScriptedPrompter({"model-preset": "llama-7b"})
    assert (
        run_prompts(
            prompter=p, hardware_spec="8xA100-80GB", from_file=existing, service=service, say=lambda s: None
        )
        == 0
    )
    assert "keep-imported" in p.asked and "candidate" not in p.asked
    # next to the imported file by default; nothing was changed, so nothing is added: DeepSpeed derives the
    # batch from micro-batch x world as before
    assert (tmp_path / "ds_config.json").read_text() == existing.read_text()


def test_plain_by_hand_without_a_planned_row_asks_the_planner_for_that_strategy(service: Any) -> None:
    """No plan row to copy (e.g. the plan was made for other settings): the line prompts show the planner's own
    evaluation of exactly the hand-picked strategy."""
    from wizard.prompts import _strategy_by_hand
    from wizard.service import Choices
    from wizard.strategy import Strategy

    choices = Choices(hardware=service.get_hardware("2xA100-80GB,ram=256GiB"), seq_len=1024)
    model = service.load_model("gpt2-medium")
    p = ScriptedPrompter({"stage": 3, "offload-optimizer": "cpu", "offload-param": "cpu"})
    said: list[str] = []
    base = Strategy(gpus_per_node=2, micro_batch_size=4)
    s = _strategy_by_hand(p, service, choices, model, base, said.append, None)
    assert (s.zero_stage, s.offload_optimizer, s.offload_param) == (3, "cpu", "cpu")
    expected = service.evaluate(choices, model, s)
    assert expected.fits and f"{expected.predicted.tokens_per_sec:,.0f}" in said[-1]


def test_plain_nvme_offload_asks_for_a_checked_directory(service: Any, tmp_path: Path) -> None:
    said: list[str] = []
    answers = {
        "model-preset": "llama-70b",
        "by-hand": True,
        "stage": 3,
        "offload-optimizer": "nvme",
        "offload-param": "none",
    }
    spec = "8xA100-80GB,nvme=3.5TB,libaio=true,ram=4TiB"
    p = ScriptedPrompter({**answers, "nvme-path": ["offload", "/local_nvme/run7"]})
    assert run_prompts(prompter=p, hardware_spec=spec, service=service, say=said.append) == 0
    assert p.asked.count("nvme-path") == 2 and any("nvme_path offload is relative" in s for s in said)
    zero = json.loads((tmp_path / "dswiz-config" / "ds_config.json").read_text())["zero_optimization"]
    assert zero["offload_optimizer"] == {
        **zero["offload_optimizer"],
        "device": "nvme",
        "nvme_path": "/local_nvme/run7",
    }
    # no answer: the default, on the described NVMe drive
    p = ScriptedPrompter({**answers, "overwrite": True})
    assert run_prompts(prompter=p, hardware_spec=spec, service=service, say=lambda s: None) == 0
    zero = json.loads((tmp_path / "dswiz-config" / "ds_config.json").read_text())["zero_optimization"]
    assert zero["offload_optimizer"]["nvme_path"] == "/local_nvme/dswiz-offload"


def test_plain_multi_node_launcher_choice_reaches_launch_sh(service: Any, tmp_path: Path) -> None:
    p = ScriptedPrompter(
        {"model-preset": "llama-7b", "hostfile": "gpu-a slots=8; gpu-b slots=8", "launcher": "standard"}
    )
    assert run_prompts(prompter=p, hardware_spec="2x8xA100-80GB", service=service, say=lambda s: None) == 0
    assert set(p.titles["launcher"]) == {
        "pdsh",
        "openmpi",
        "mvapich",
        "mpich",
        "impi",
        "slurm",
        "nossh",
        "standard",
    }
    assert p.disabled["launcher"] == {}  # a described cluster: no DeepSpeed version to hold nossh back
    launch_sh = (tmp_path / "dswiz-config" / "launch.sh").read_text()
    assert "torch.distributed.run --nproc_per_node 8 --nnodes 2" in launch_sh and "NODE_RANK" in launch_sh


def test_plain_candidates_show_what_the_card_must_hold(service: Any, tmp_path: Path) -> None:
    """The GPU figure of each candidate line is the one the fit is judged on and the wizard shows (what the card
    must hold), so a fitting row never shows more than the card: it showed the cache a roomy card keeps (llama-7b on
    one H200: "GPU 144.6 GiB" for a row that fits the 140.4 GiB card)."""
    from wizard.units import parse_size

    p = ScriptedPrompter({"model-preset": "llama-7b", "candidate": 0})
    assert run_prompts(prompter=p, hardware_spec="1xH200", service=service, say=lambda _: None) == 0
    card = service.get_hardware("1xH200").min_gpu_memory_bytes
    shown = {k: parse_size(t.split("GPU ", 1)[1].split(",", 1)[0]) for k, t in p.titles["candidate"].items()}
    fitting = [b for k, b in shown.items() if k not in p.disabled["candidate"]]
    assert len(fitting) >= 3 and all(0 < b <= card for b in fitting), (shown, card)
    assert all(
        shown[k] > card * 0.95 for k in p.disabled["candidate"]
    )  # the rows offered but refused: over the margin


def test_plain_nothing_fits_points_at_the_advice_it_printed(service: Any, tmp_path: Path) -> None:
    """Mixtral on 8 x A100-80GB: the advice said a shorter sequence alone would not help, and the error's fix said
    "lower the sequence length or batch"; the fix now points at the advice printed above it."""
    said: list[str] = []
    p = ScriptedPrompter({"model-preset": "mixtral-8x7b"})
    with pytest.raises(DswizError) as info:
        run_prompts(prompter=p, hardware_spec="8xA100-80GB,ram=1TiB", service=service, say=said.append)
    assert info.value.problem == "nothing fits on this hardware"
    assert info.value.fix == "make one of the changes listed above (each would fit), then answer again"
    assert any("a shorter sequence alone would not help" in line for line in said)
    assert not (tmp_path / "dswiz-config").exists()


def test_plain_plans_for_the_memory_per_gpu_the_command_line_gave(service: Any, tmp_path: Path) -> None:
    """`dswiz --plain --gpu-memory 24GiB --margin 8` and `dswiz config --gpu-memory 24GiB` without --yes: the line
    prompts plan for that memory and the folder keeps it (dswiz-plan.json); before, the prompts dropped both."""
    from wizard.commands.config import config, prefill_from_flags

    flags = config.make_context("config", ["--gpu-memory", "24GiB", "--margin", "8"]).params
    prefill = prefill_from_flags(flags)
    assert (prefill["gpu_memory_bytes"], prefill["safety_margin"]) == (24 * 2**30, 0.08)
    said: list[str] = []
    p = ScriptedPrompter({"model-preset": "llama-7b"})
    rc = run_prompts(
        prompter=p, hardware_spec="1xA100-80GB", service=service, say=said.append, prefill=prefill
    )
    assert rc == 0
    sidecar = json.loads((tmp_path / "dswiz-config" / "dswiz-plan.json").read_text())
    assert (
        sidecar["request"]["gpu_memory_bytes"] == 24 * 2**30 and sidecar["request"]["safety_margin"] == 0.08
    )
    assert sidecar["predicted"]["needed_gpu_bytes"] <= 0.92 * 24 * 2**30


def test_plain_refuses_a_memory_per_gpu_above_the_card_before_the_model_question(service: Any) -> None:
    p = ScriptedPrompter({"model-preset": "llama-7b"})
    with pytest.raises(
        DswizError, match=r"--gpu-memory 200.0 GiB is more than the NVIDIA A100-SXM4-80GB holds"
    ):
        run_prompts(
            prompter=p,
            hardware_spec="1xA100-80GB",
            service=service,
            prefill={"gpu_memory_bytes": 200 * 2**30},
        )
    assert "model-preset" not in p.asked
