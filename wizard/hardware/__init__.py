"""Hardware: detected (the one place that talks to NVML, /proc and /sys) or described for planning elsewhere.

``get_hardware(spec)`` is the entry point every command uses.
"""

from __future__ import annotations

import re
from pathlib import Path

from wizard.hardware.report import DiskInfo, GPUInfo, HardwareReport, HostInfo, SoftwareInfo

__all__ = ["DiskInfo", "GPUInfo", "HardwareReport", "HostInfo", "SoftwareInfo", "get_hardware"]


def get_hardware(spec: str | None = None) -> HardwareReport:
    """This machine (``spec`` None), or described hardware: a spec like ``8xA100-80GB`` / ``2x8xH100``, a YAML
    profile path, or a ``dswiz detect --json`` file saved on the target machine.

    Raises ``DswizError`` (problem + fix) for a spec or file it cannot read; never for missing GPUs or drivers.
    """
    if spec is None:
        from wizard.hardware.detect import detect

        return detect()
    from wizard.hardware import described

    text = spec.strip()
    if described.looks_like_profile_path(text):
        path = Path(text).expanduser()
        if path.suffix.lower() == ".json":
            return _load_report_json(path)
        return described.describe_profile(path)
    return described.describe(text)


def _load_report_json(path: Path) -> HardwareReport:
    import json

    from wizard.errors import DswizError, read_user_text

    fix = "give a file written by `dswiz detect --json > FILE.json` (or a YAML profile, or a spec like 8xA100-80GB)"
    if not path.exists():
        raise DswizError(f"hardware file {str(path)!r} not found", fix)
    text = read_user_text(path, "a hardware profile", fix)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise DswizError(f"cannot read hardware file {str(path)!r}: {e}", fix) from None
    if not isinstance(data, dict):
        from wizard.typed_json import json_kind

        raise DswizError(
            f"hardware file {str(path)!r} is not a dswiz hardware report (a JSON object), but {json_kind(data)}",
            fix,
        )
    try:
        report = HardwareReport.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        missing = re.findall(r"'(\w+)'", str(e)) if "missing" in str(e) and "required" in str(e) else []
        why = f"it has no {', '.join(repr(k) for k in missing)}" if missing else str(e)
        raise DswizError(f"hardware file {str(path)!r} is not a dswiz hardware report ({why})", fix) from None
    return report
