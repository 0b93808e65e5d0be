"""Software versions, found without importing torch."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from wizard.hardware.software import nvcc_version, read_software, torch_cuda_version

ROOT = Path(__file__).resolve().parents[2]


def test_versions_match_installed_metadata() -> None:
    s = read_software({})
    for name in ("torch", "deepspeed", "accelerate", "transformers"):
        try:
            expected = metadata.version(name)
        except metadata.PackageNotFoundError:
            expected = None
        assert getattr(s, name) == expected
    assert s.python == ".".join(map(str, sys.version_info[:3]))


def test_torch_cuda_version_equals_torch_version_cuda_without_importing_torch() -> None:
    code = (
        "import sys, json\n"
        "from wizard.hardware.software import torch_cuda_version\n"
        "v = torch_cuda_version()\n"
        "loaded = 'torch' in sys.modules\n"
        "import torch\n"
        "print(json.dumps([v, torch.version.cuda, loaded]))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    ours, torchs, torch_was_imported = json.loads(out.stdout.strip().splitlines()[-1])
    assert ours == torchs and torch_was_imported is False


def test_torch_cuda_version_of_a_cuda_build(tmp_path: Path, monkeypatch) -> None:
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    (pkg / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\nhip = None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert torch_cuda_version() == "13.0"


def test_nvcc_version_from_the_toolkit_beside_it(tmp_path: Path) -> None:
    root = tmp_path / "cuda-12.8"
    (root / "bin").mkdir(parents=True)
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\nexit 1\n")  # never run: the version comes from version.json
    nvcc.chmod(0o755)
    (root / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": "12.8.1"}}))
    assert nvcc_version({"PATH": str(root / "bin")}) == "12.8.1"
    assert nvcc_version({"CUDA_HOME": str(root), "PATH": ""}) == "12.8.1"
    assert nvcc_version({"PATH": str(tmp_path / "nothing")}) is None
