"""Detect this machine: GPUs through NVML (narrowed by CUDA_VISIBLE_DEVICES), host, software, hazards."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from wizard.hardware.catalog import with_catalog_figures
from wizard.hardware.hazards import find_hazards
from wizard.hardware.host import read_host
from wizard.hardware.nvml import NvmlReading, read_gpus
from wizard.hardware.report import HardwareReport
from wizard.hardware.software import read_software
from wizard.hardware.visibility import apply_visible_devices


def detect(*, nvml: Any = None, env: Mapping[str, str] | None = None) -> HardwareReport:
    """A ``HardwareReport(source="detected")`` of this machine; never raises for missing hardware or drivers.

    ``nvml``: the pynvml module to use (default: import it) -- tests pass a fake. ``env``: the environment to
    judge (default: os.environ).
    """
    env = dict(os.environ) if env is None else env
    # NVML's init takes ~0.1 s on a GPU host (ctypes releases the GIL): read the host meanwhile.
    nvml_result: list[NvmlReading | BaseException] = []
    nvml_thread = threading.Thread(target=_read_gpus_into, args=(nvml, nvml_result), daemon=True)
    nvml_thread.start()
    host = read_host(env)
    nvml_thread.join()
    if isinstance(nvml_result[0], BaseException):
        raise nvml_result[0]
    reading = nvml_result[0]
    physical = tuple(with_catalog_figures(g) for g in reading.gpus)
    visible_value = env.get("CUDA_VISIBLE_DEVICES")
    visibility = apply_visible_devices(visible_value, physical)
    reason = reading.reason
    if reason is None and not visibility.visible:
        reason = f"CUDA_VISIBLE_DEVICES={visible_value!r} hides all {len(physical)} GPUs"
    report = HardwareReport(
        source="detected",
        gpus=visibility.visible,
        host=host,
        software=read_software(
            env, nvidia_driver=reading.driver_version, cuda_driver=reading.cuda_driver_version
        ),
        no_gpu_reason=reason,
        physical_gpu_count=len(physical),
        visible_devices=visible_value,
    )
    return replace(report, hazards=find_hazards(env, report, physical, visibility))


def _read_gpus_into(nvml: Any, out: list[NvmlReading | BaseException]) -> None:
    try:
        out.append(read_gpus(nvml))
    except BaseException as e:  # handed to the caller's thread; read_gpus itself never raises by design
        out.append(e)
