"""Versions of the training stack, found without importing it (importing torch takes seconds).

Package versions come from installed metadata; the CUDA version torch was built with from ``torch/version.py``
read as text; nvcc's version from the ``version.json`` (or ``version.txt``) beside the CUDA toolkit it belongs to.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
from collections.abc import Mapping
from importlib import machinery, metadata
from pathlib import Path

from wizard.hardware.report import SoftwareInfo


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def torch_cuda_version() -> str | None:
    """``torch.version.cuda`` without importing torch: the line ``cuda: Optional[str] = '12.8'``."""
    try:  # PathFinder looks on disk only (never at an already imported torch) and imports nothing
        spec = machinery.PathFinder.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        try:
            text = (Path(location) / "version.py").read_text(encoding="utf-8")
        except OSError:
            continue
        m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, flags=re.MULTILINE)
        return m.group(1) if m else None
    return None


def nvcc_version(env: Mapping[str, str] | None = None) -> str | None:
    """The CUDA toolkit version of the nvcc DeepSpeed's JIT builds would use (CUDA_HOME first, then PATH)."""
    env = os.environ if env is None else env
    roots = [env[k] for k in ("CUDA_HOME", "CUDA_PATH") if env.get(k)]
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    if nvcc:
        roots.append(str(Path(os.path.realpath(nvcc)).parent.parent))
    for root in roots:
        version = _toolkit_version(Path(root))
        if version:
            return version
    return None


def _toolkit_version(root: Path) -> str | None:
    try:
        data = json.loads((root / "version.json").read_text(encoding="utf-8"))
        version = data.get("cuda", {}).get("version")
        if isinstance(version, str):
            return version
    except (OSError, ValueError, AttributeError):
        pass
    try:
        m = re.search(r"(\d+\.\d+(?:\.\d+)?)", (root / "version.txt").read_text(encoding="utf-8"))
        return m.group(1) if m else None
    except OSError:
        return None


def read_software(
    env: Mapping[str, str] | None = None,
    *,
    nvidia_driver: str | None = None,
    cuda_driver: str | None = None,
) -> SoftwareInfo:
    return SoftwareInfo(
        python=platform.python_version(),
        torch=package_version("torch"),
        torch_cuda=torch_cuda_version(),
        deepspeed=package_version("deepspeed"),
        accelerate=package_version("accelerate"),
        transformers=package_version("transformers"),
        cuda_driver=cuda_driver,
        nvidia_driver=nvidia_driver,
        nvcc=nvcc_version(env),
    )
