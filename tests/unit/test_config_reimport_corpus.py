"""`--from FILE` on the real configs of tests/fixtures/corpus: importing and writing back unchanged gives the file
byte for byte, its train_batch_size survives a different planned world size (the accumulation derived for it) or
the change is said, and `dswiz config --yes --from` honours the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from wizard.cli import cli
from wizard.config.reimport import file_batch
from wizard.config.schema import DS_CONFIG_NAME
from wizard.errors import DswizError
from wizard.service.wizard_service import WizardService, initial_choices

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
FILES: list[dict[str, Any]] = json.loads((CORPUS / "MANIFEST.json").read_text())["files"]
JSONS = sorted(e["file"] for e in FILES if e["file"].endswith(".json"))
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def _import(name: str, out: Path) -> Any:
    service = WizardService()
    try:
        choices = initial_choices(service, from_file=CORPUS / name, out_dir=out)
    except DswizError:
        pytest.skip("not importable (a template, hjson, a wrong type): dswiz says why, tested elsewhere")
    return service, choices


def _written_json(service: WizardService, choices: Any) -> str:
    return str(service.render_files(choices, None)[DS_CONFIG_NAME])


def test_most_of_the_corpus_is_importable(tmp_path: Path) -> None:
    service = WizardService()
    imported = 0
    for name in JSONS:
        try:
            initial_choices(service, from_file=CORPUS / name, out_dir=tmp_path)
            imported += 1
        except DswizError as e:
            assert e.fix, name  # a refusal names the fix, never a traceback
    assert imported >= 45


@pytest.mark.parametrize("name", JSONS)
def test_unchanged_import_is_written_back_byte_for_byte(name: str, tmp_path: Path) -> None:
    service, choices = _import(name, tmp_path)
    assert _written_json(service, choices) == (CORPUS / name).read_text()


@pytest.mark.parametrize("name", JSONS)
def test_train_batch_size_survives_another_world_size(name: str, tmp_path: Path) -> None:
    service, choices = _import(name, tmp_path)
    total, _micro, _gas = file_batch(choices.imported.config)
    choices.strategy, change = service.imported_on_topology(choices, 1, 8)
    text = _written_json(service, choices)
    original = json.loads((CORPUS / name).read_text())
    if total is None or (change is not None and change.kept):
        assert text == (CORPUS / name).read_text(), "nothing the user changed may change"
        return
    assert change is not None and change.global_batch != total, "a changed train_batch_size is said"
    written = json.loads(text)
    assert written["train_batch_size"] == change.global_batch
    for key in set(original) | set(written):
        if key not in BATCH_KEYS:
            assert written.get(key) == original.get(key), key


def test_bert_squad_batch_24_stays_24_on_8_gpus(tmp_path: Path) -> None:
    name = "deepspeedexamples/training/BingBertSquad/deepspeed_bsz24_config.json"
    service, choices = _import(name, tmp_path)
    strategy, change = service.imported_on_topology(choices, 1, 8)
    assert change is not None and change.kept
    assert (strategy.micro_batch_size, strategy.gradient_accumulation_steps, strategy.global_batch_size) == (
        3,
        1,
        24,
    )


def test_a_missing_micro_batch_is_derived_not_defaulted_to_1(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text('{"train_batch_size": 256, "zero_optimization": {"stage": 2}}\n')
    service = WizardService()
    choices = initial_choices(service, from_file=path, out_dir=tmp_path / "out")
    strategy, change = service.imported_on_topology(choices, 1, 8)
    assert (strategy.micro_batch_size, strategy.global_batch_size) == (32, 256) and change is not None
    choices.strategy = strategy
    assert _written_json(service, choices) == path.read_text()


def test_stage_3_to_2_is_a_minimal_edit(tmp_path: Path) -> None:
    """Only the stage and what it rules out (parameter offload) change: overlap_comm, the stage3_* group and the
    spelling of every number (1e9, 1e14) stay."""
    name = "transformers/tests/deepspeed/ds_config_zero3.json"
    service, choices = _import(name, tmp_path)
    choices.consumer = "trainer"
    choices.strategy = choices.strategy.with_(zero_stage=2, offload_param="none")
    text = _written_json(service, choices)
    original = (CORPUS / name).read_text()
    removed = [line for line in original.splitlines() if line not in text.splitlines()]
    added = [line for line in text.splitlines() if line not in original.splitlines()]
    assert added == ['        "stage": 2,']
    assert removed == ['        "stage": 3,', '        "offload_param": {']  # its two lines match others
    assert len(original.splitlines()) - len(text.splitlines()) == 4  # the offload_param block, nothing else
    assert '"stage3_max_live_parameters": 1e9' in text and '"sub_group_size": 1e14' in text
    assert '"overlap_comm": true' in text and '"stage3_gather_fp16_weights_on_model_save": true' in text


def test_yes_from_writes_the_file_back_and_keeps_its_batch(tmp_path: Path) -> None:
    name = "deepspeedexamples/training/BingBertSquad/deepspeed_bsz24_config.json"
    out = tmp_path / "out"
    args = ["config", "--yes", "--from", str(CORPUS / name), "--gpus-per-node", "8", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert (out / DS_CONFIG_NAME).read_text() == (CORPUS / name).read_text()
    assert "train_batch_size 24 kept on 8 GPU(s)" in result.output


def test_yes_from_refuses_a_batch_it_cannot_keep_without_a_batch_flag(tmp_path: Path) -> None:
    name = "deepspeedexamples/training/BingBertSquad/deepspeed_bsz24_config.json"
    out = tmp_path / "out"
    base = ["config", "--yes", "--from", str(CORPUS / name), "--gpus-per-node", "16", "--out", str(out)]
    refused = CliRunner().invoke(cli, base)
    assert isinstance(refused.exception, DswizError)  # the CLI's entry point prints it with its fix
    assert "train_batch_size 24 cannot be kept on 16 GPU(s)" in str(refused.exception)
    assert not out.exists()
    accepted = CliRunner().invoke(cli, [*base, "--global-batch", "48"])
    assert accepted.exit_code == 0, accepted.output
    assert json.loads((out / DS_CONFIG_NAME).read_text())["train_batch_size"] == 48


def test_who_reads_an_imported_json_is_guessed_from_its_auto_values(tmp_path: Path) -> None:
    service = WizardService()
    trainer = initial_choices(
        service, from_file=CORPUS / "llama-factory/examples/deepspeed/ds_z3_config.json", out_dir=tmp_path
    )
    plain = initial_choices(
        service,
        from_file=CORPUS / "deepspeedexamples/training/BingBertSquad/deepspeed_bsz24_config.json",
        out_dir=tmp_path,
    )
    assert (trainer.consumer, plain.consumer) == ("trainer", "deepspeed")
