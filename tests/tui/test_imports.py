"""The wizard must start fast on a laptop: building it imports no torch / DeepSpeed (checked in a fresh process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wizard_app_and_prompts_import_no_torch() -> None:
    code = (
        "import sys, json\n"
        "import wizard.tui.app, wizard.prompts, wizard.commands.wizard\n"
        "from wizard.tui.factory import build_app\n"
        "build_app(hardware_spec=None)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert not {"torch", "deepspeed", "transformers", "accelerate"} & loaded


def test_service_and_prompts_keep_textual_out() -> None:
    # The line-prompt mode shares the service and the choices; neither may pull in the full-screen toolkit.
    code = "import sys; import wizard.prompts; print('textual' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"
