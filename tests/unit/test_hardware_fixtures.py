"""Every saved hardware report (tests/fixtures/hardware/*.json: real machines and described ones) loads with
HardwareReport.from_dict and round-trips exactly, so reports written by older dswiz versions keep loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wizard.hardware import get_hardware
from wizard.hardware.report import HardwareReport

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hardware"
FILES = sorted(FIXTURES.glob("*.json"))


def test_there_are_fixtures() -> None:
    assert any(p.name == "described-8xA100-80GB.json" for p in FILES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_fixture_round_trips(path: Path) -> None:
    data = json.loads(path.read_text())
    report = HardwareReport.from_dict(data)
    assert report.source in ("detected", "described")
    again = HardwareReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again == report
    # Derived keys in the file agree with the loaded report.
    assert data["total_gpus"] == report.total_gpus
    for g, gd in zip(report.gpus, data["gpus"], strict=True):
        assert gd["supports_bf16"] == g.supports_bf16


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_fixture_loads_as_hardware_spec(path: Path) -> None:
    # `--hardware saved.json` plans for the machine the report was taken on.
    assert get_hardware(str(path)) == HardwareReport.from_dict(json.loads(path.read_text()))


def test_described_fixture_matches_what_dswiz_describes_today() -> None:
    saved = HardwareReport.from_dict(json.loads((FIXTURES / "described-8xA100-80GB.json").read_text()))
    assert saved == get_hardware("8xA100-80GB")


def test_a_json_that_is_not_a_report_names_the_missing_key(tmp_path: Path) -> None:
    """It said "HardwareReport.__init__() missing 1 required positional argument: 'source'"."""
    from wizard.errors import DswizError
    from wizard.hardware import get_hardware

    path = tmp_path / "some.json"
    path.write_text('{"a": 1}')
    with pytest.raises(DswizError) as info:
        get_hardware(str(path))
    assert (
        info.value.problem
        == f"hardware file {str(path)!r} is not a dswiz hardware report (it has no 'source')"
    )
    assert "dswiz detect --json" in (info.value.fix or "")
