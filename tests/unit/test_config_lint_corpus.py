"""The linter against corpora: every broken config under tests/fixtures/configs/broken/ produces its specific
finding (cases.json names the code, severity and context), every valid one produces no error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wizard.config.check import lint_path
from wizard.findings import Finding, Severity
from wizard.hardware import get_hardware

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
BROKEN = json.loads((CORPUS / "broken" / "cases.json").read_text())
VALID = json.loads((CORPUS / "valid" / "cases.json").read_text())


def _lint(directory: Path, name: str, case: dict[str, Any]) -> list[Finding]:
    hardware = get_hardware(case["hardware"]) if "hardware" in case else None
    return lint_path(
        directory / name,
        consumer=case.get("consumer"),
        world_size=case.get("world_size"),
        hardware=hardware,
        launcher=case.get("launcher"),
    )


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_config_gives_its_finding(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    case = BROKEN[name]
    monkeypatch.chdir(
        CORPUS / "broken"
    )  # accelerate resolves deepspeed_config_file from the launch directory
    findings = _lint(CORPUS / "broken", name, case)
    matching = [f for f in findings if f.code == case["code"]]
    assert matching, f"expected {case['code']}, got {[f.code for f in findings]}"
    assert matching[0].severity is Severity(case["severity"])
    for f in matching:
        assert f.what and f.why and f.fix, "every finding says what, why and the fix"
        assert f.location, "every finding says where"


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_config_has_no_error(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CORPUS / "valid")
    findings = _lint(CORPUS / "valid", name, VALID[name])
    assert [f for f in findings if f.severity is Severity.ERROR] == []


def test_the_corpus_covers_every_rule_family() -> None:
    codes = {case["code"] for case in BROKEN.values()}
    families = {
        "batch-arithmetic",
        "batch-missing",
        "fp16-and-bf16",
        "unknown-key-typo",
        "unknown-section-key",
        "duplicate-key",
        "offload-param-ignored",
        "nvme-becomes-cpu",
        "nvme-path-missing",
        "nvme-path-not-writable",
        "no-libaio",
        "precision-unsupported",
        "offload-client-optimizer",
        "auto-unfilled",
        "string-number",
        "hostfile-syntax",
        "hostfile-unequal-slots",
        "accelerate-config-file-conflict",
    }
    assert families <= codes, families - codes


def test_typo_finding_names_the_intended_key() -> None:
    findings = lint_path(CORPUS / "broken" / "typo_top_level.json")
    typo = next(f for f in findings if f.code == "unknown-key-typo")
    assert '"gradient_accumulation_steps"' in typo.what and typo.location == "gradient_acumulation_steps"


def test_yaml_findings_point_at_their_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CORPUS / "broken")
    findings = lint_path(CORPUS / "broken" / "acc_config_file_with_zero_stage.yaml")
    conflict = next(f for f in findings if f.code == "accelerate-config-file-conflict")
    line = int(str(conflict.location).rsplit(":", 1)[1])
    text = (CORPUS / "broken" / "acc_config_file_with_zero_stage.yaml").read_text().splitlines()
    assert text[line - 1].strip().startswith("zero_stage:")


def test_hostfile_findings_point_at_their_line() -> None:
    findings = lint_path(CORPUS / "broken" / "hostfile_bad_line")
    assert [f.location for f in findings if f.code == "hostfile-syntax"] == ["hostfile_bad_line:2"]
