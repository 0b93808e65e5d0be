"""Shared fixtures for the wizard's tests: the service the app drives, and helpers to walk the steps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_core import service_on_fixed_machine

from wizard.service import WizardService

SIZE = (120, 40)


@pytest.fixture
def service() -> WizardService:
    return service_on_fixed_machine()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The default output directory is relative: keep every test's files in its own folder.
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def anyio_backend() -> str:
    # Async tests run through anyio's pytest plugin (installed with textual), on asyncio like Textual itself.
    return "asyncio"
