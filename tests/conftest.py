"""Suite-wide: no test writes the user's own run history (every `dswiz launch` records one entry)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def private_run_history(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point DSWIZ_HISTORY (inherited by the dswiz processes tests start) at a file of this test's own."""
    path = tmp_path_factory.mktemp("history") / "history.sqlite3"
    monkeypatch.setenv("DSWIZ_HISTORY", str(path))
    return path
