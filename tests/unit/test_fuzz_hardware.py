"""Hardware profiles and spec strings, fuzzed: every profile key with numbers where units belong, units where
numbers belong, 5,000-digit counts, NaN, markup, nested containers; spec strings with huge counts and odd options.
Each gives a described HardwareReport or a DswizError naming the key and the fix."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from wizard.hardware.described import PROFILE_KEYS, describe, describe_profile
from wizard.hardware.report import HardwareReport

from . import fuzz_support as fz

GOOD = {
    "gpu": "A100-80GB",
    "gpus_per_node": 8,
    "nodes": 2,
    "ram": "1TiB",
    "cpu_cores": 64,
    "shm": "64GiB",
    "nvme": "3.5TB",
    "nvme_path": "/local_nvme",
    "libaio": True,
    "inter_node_gbps": 400,
    "name": "cluster",
}
CUSTOM = {"gpu": "MyGPU", "gpu_memory": "48GiB", "compute_capability": "8.9", "tflops_bf16": 300}
PROFILE_VALUES = fz.json_like | st.sampled_from(
    [
        "80GiB",
        "0GiB",
        "1e400GiB",
        fz.HUGE_DIGITS,
        f"{fz.HUGE_DIGITS}GiB",
        "8.9",
        "99.99",
        "400GB/s",
        "H100",
        "x",
    ]
)


def check_report(report: HardwareReport | None) -> None:
    if report is None:
        return
    fz.holds(1 <= len(report.gpus) <= 64 and report.nodes >= 1, "GPU and node counts bounded")
    for g in report.gpus:
        fz.holds(g.memory_total_bytes is None or g.memory_total_bytes > 0, "GPU memory positive")
    fz.holds(
        report.inter_node_gbps is None or 0 <= report.inter_node_gbps < float("inf"), "bandwidth is finite"
    )


def _profile_text(profile: Any) -> str:
    try:
        return yaml.safe_dump(profile)
    except (yaml.YAMLError, ValueError):  # a value PyYAML cannot write: write its repr instead
        return repr(profile)


profiles = st.sampled_from([GOOD, CUSTOM]).flatmap(
    lambda b: fz.mutated(b, sorted(PROFILE_KEYS), PROFILE_VALUES)
)


@fz.fuzz_settings(250)
@given(batch=fz.batch(profiles))
def test_profile_gives_a_report_or_a_finding(batch: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "[x] profile.yaml"
        for profile in fz.cases(batch):
            path.write_text(_profile_text(profile), encoding="utf-8")
            check_report(fz.total(describe_profile, path))


spec_head = st.sampled_from(["8xA100-80GB", "A100-80GB", "2x8xH100", "H200", "x", "", "0xH100"]) | st.builds(
    lambda n, g: f"{n}x{g}", st.sampled_from(["0", "65", fz.HUGE_DIGITS, "999999999999"]), st.just("H100")
)
spec_option = st.sampled_from(
    [
        "ram=1TiB",
        "nvme=3.5TB",
        "net=400",
        "net=1e400",
        f"cores={fz.HUGE_DIGITS}",
        "mem=0",
        "libaio=maybe",
        "x",
    ]
) | st.builds(
    lambda k, v: f"{k}={v}", st.sampled_from(["ram", "mem", "net", "cores", "shm"]), st.text(max_size=6)
)


specs = st.builds(
    lambda head, options: ",".join([head, *options]), spec_head, st.lists(spec_option, max_size=3)
)


@fz.fuzz_settings(1000)
@given(batch=fz.batch(specs))
def test_spec_string_gives_a_report_or_a_finding(batch: list[str]) -> None:
    for spec in fz.cases(batch):
        check_report(fz.total(describe, spec))
