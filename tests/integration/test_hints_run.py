"""The code hints' "after" snippets run for real: accelerate, plain DeepSpeed and the HF Trainer, one CPU rank,
ZeRO-2, a DeepSpeed config holding the optimizer / scheduler each case says (run_hint_snippets.py, one process
for all 18 cases, ~10 s). Each must train (weights change) with the optimizer and scheduler the hint promises;
the usual code fails the way the finding says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.launch_support import free_port
from wizard.hints import CONSUMERS, OPTIMIZER_SOURCES, SCHEDULER_SOURCES, code_hints

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict]:
    work = tmp_path_factory.mktemp("hints")
    env = {
        **os.environ,
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    proc = subprocess.run(
        [sys.executable, str(HERE / "run_hint_snippets.py"), str(work)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out: dict[tuple[str, str], dict] = {}
    for line in proc.stdout.splitlines():
        if line.startswith('{"case"'):
            r = json.loads(line)
            out[(r["case"], r["snippet"])] = r
    return out


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_after_snippets_train(results: dict, consumer: str) -> None:
    for opt in OPTIMIZER_SOURCES:
        for sched in SCHEDULER_SOURCES:
            r = results[(f"{consumer}-{opt}-{sched}", "after")]
            assert r["ok"], f"{r['case']}: {r.get('error')}: {r.get('message')}\n{r.get('tb')}"
            assert r["engine"] == "DeepSpeedEngine" and r["weights_changed"], r
            assert r["optimizer"] == "AdamW", r
            if consumer == "trainer":
                continue  # the Trainer always builds a scheduler of its own when the config has none
            # DeepSpeed's config scheduler, the script's LambdaLR, or none: what the hint said.
            expected = {"config": "WarmupDecayLR", "script": "LambdaLR", "none": None}[sched]
            assert r["scheduler"] == expected, r


def test_usual_code_fails_as_the_finding_says(results: dict) -> None:
    r = results[("accelerate-config-script", "before")]
    assert not r["ok"] and r["error"] == "ValueError"
    (finding,) = code_hints("accelerate", "config", "script").findings
    quoted = finding.why.split('ValueError("', 1)[1].split(" ...", 1)[0]
    assert r["message"].startswith(quoted)
