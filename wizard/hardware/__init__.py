"""Hardware: detected (the one place that talks to NVML, /proc and /sys) or described for planning elsewhere."""

from wizard.hardware.report import DiskInfo, GPUInfo, HardwareReport, HostInfo, SoftwareInfo

__all__ = ["DiskInfo", "GPUInfo", "HardwareReport", "HostInfo", "SoftwareInfo"]
