"""Environment hazards, each with its fix; TORCH_CUDA_ARCH_LIST judged exactly as DeepSpeed's op builder parses it."""

from __future__ import annotations

import pytest

from wizard.findings import Severity
from wizard.hardware.hazards import (
    deepspeed_parses,
    find_hazards,
    fixed_arch_list,
    host_hazards,
    unparsable_arch_entries,
)
from wizard.hardware.report import HardwareReport, HostInfo
from wizard.units import GiB, MiB

ARCH_VALUES = [
    "9.0", "9.0a", "8.0+PTX", "8.6+PTX;9.0", "7.5 8.6 9.0", "9.0+ptx", "10.0;12.0", "9", "Hopper", "native",
    "8.0;9.0a", "9.0a+PTX", "8.0,9.0", "sm_90", "90", "10.0f", " 8.0 ; ; 9.0 ", "foo;9.0",
]  # fmt: skip


@pytest.fixture(scope="module")
def deepspeed_builder():
    op_builder = pytest.importorskip("deepspeed.ops.op_builder.fused_adam")
    return op_builder.FusedAdamBuilder()


def real_deepspeed_accepts(builder, value: str, monkeypatch: pytest.MonkeyPatch) -> bool:
    # compute_capability_args rewrites TORCH_CUDA_ARCH_LIST in os.environ: monkeypatch restores it afterwards.
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", value)
    builder.jit_mode = True
    builder._jit_arch_list = value.strip() or None
    try:
        builder.compute_capability_args()
    except (ValueError, IndexError):
        return False
    return True


@pytest.mark.parametrize("value", ARCH_VALUES)
def test_mirror_agrees_with_the_installed_deepspeed(deepspeed_builder, value: str, monkeypatch) -> None:
    assert (not unparsable_arch_entries(value)) == real_deepspeed_accepts(
        deepspeed_builder, value, monkeypatch
    )


@pytest.mark.parametrize("value", ARCH_VALUES)
def test_the_repair_is_accepted_by_the_installed_deepspeed(
    deepspeed_builder, value: str, monkeypatch
) -> None:
    fixed = fixed_arch_list(value)
    if fixed is None:
        assert not unparsable_arch_entries(value)  # None only when nothing needs repair
    elif fixed:
        assert real_deepspeed_accepts(deepspeed_builder, fixed, monkeypatch)


@pytest.mark.parametrize(
    ("value", "fixed"),
    [
        ("9.0a", "9.0"),
        ("8.0;9.0a+PTX", "8.0;9.0+PTX"),
        ("7.5 8.6 9.0a", "7.5;8.6;9.0"),
        ("Hopper", "9.0+PTX"),
        ("Ampere", "8.0;8.6+PTX"),
        ("sm_90a", "9.0"),
        ("86", "8.6"),
        ("100", "10.0"),
        ("9", "9.0"),
        ("8.0,9.0", "8.0;9.0"),
        ("9.0a;9.0", "9.0"),  # no duplicate after repair
        ("native", ""),  # "" = unset it: DeepSpeed then builds for the GPUs it sees
        ("9.0", None),
        ("8.0+PTX", None),
        (None, None),
    ],
)
def test_fixed_arch_list(value: str | None, fixed: str | None) -> None:
    assert fixed_arch_list(value) == fixed


def test_parses() -> None:
    assert deepspeed_parses("9.0") and deepspeed_parses("12.0+PTX")
    assert not deepspeed_parses("9.0a") and not deepspeed_parses("9")


def test_arch_list_finding_says_what_and_how() -> None:
    (f,) = find_hazards({"TORCH_CUDA_ARCH_LIST": "9.0a"}, HardwareReport(source="detected", gpus=()))[:1]
    assert f.code == "arch-list-unparsable" and f.severity is Severity.ERROR
    assert (
        "9.0a" in f.what
        and "export TORCH_CUDA_ARCH_LIST='9.0'" in f.fix
        and f.location == "TORCH_CUDA_ARCH_LIST"
    )


def test_a_good_arch_list_is_no_hazard() -> None:
    codes = {h.code for h in find_hazards({"TORCH_CUDA_ARCH_LIST": "9.0"}, HardwareReport(source="detected"))}
    assert "arch-list-unparsable" not in codes


def host_codes(**host) -> set[str]:
    return {h.code for h in host_hazards(HardwareReport(source="detected", host=HostInfo(**host)))}


def test_host_hazards() -> None:
    assert "no-libaio" in host_codes(libaio=False)
    assert "no-libaio" not in host_codes(libaio=True) | host_codes(libaio=None)  # unknown is not a hazard
    assert "small-shm" in host_codes(shm_bytes=64 * MiB)
    assert "small-shm" not in host_codes(shm_bytes=16 * GiB)
    assert "low-memlock" in host_codes(memlock_limit_bytes=8 * MiB)
    assert "low-memlock" not in host_codes(memlock_limit_bytes=-1)  # unlimited


def test_every_hazard_has_a_fix() -> None:
    report = HardwareReport(
        source="detected",
        host=HostInfo(
            libaio=False, libaio_detail="libaio.h not found", shm_bytes=64 * MiB, memlock_limit_bytes=65536
        ),
        no_gpu_reason="the NVIDIA driver library (libnvidia-ml.so.1) is not installed on this machine",
    )
    found = find_hazards({"TORCH_CUDA_ARCH_LIST": "Hopper"}, report)
    assert {h.code for h in found} == {
        "arch-list-unparsable",
        "no-gpu",
        "no-libaio",
        "small-shm",
        "low-memlock",
    }
    for h in found:
        assert h.what and h.why and h.fix
    (libaio,) = [h for h in found if h.code == "no-libaio"]
    assert "apt-get install libaio-dev" in libaio.fix and "libaio.h not found" in libaio.what
