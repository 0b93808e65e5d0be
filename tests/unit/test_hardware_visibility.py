"""CUDA_VISIBLE_DEVICES: which GPUs a job sees, decided like CUDA (torch's model of it), and the hazards."""

from __future__ import annotations

import pytest

from tests.fakes.fake_nvml import FakeGPU, FakeNvml, hgx_h200
from wizard.hardware.detect import detect
from wizard.hardware.report import GPUInfo
from wizard.hardware.visibility import apply_visible_devices

GPUS = tuple(GPUInfo(index=i, name="NVIDIA H200", uuid=f"GPU-{i}abc-{i}") for i in range(4))


@pytest.mark.parametrize(
    ("value", "visible", "n_problems"),
    [
        (None, [0, 1, 2, 3], 0),
        ("0,1", [0, 1], 0),
        ("3,1", [3, 1], 0),  # CUDA's order is the listed order
        (" 2 , 0 ", [2, 0], 0),
        ("1gpu,2", [1, 2], 0),  # strtoul: leading digits count
        ("0,7,1", [0], 1),  # GPU 7 does not exist: it and what follows are ignored
        ("0,-1,1", [0], 1),  # negative ends the list
        ("0,x,1", [0], 1),
        ("0,0", [], 1),  # a repeat hides all
        ("", [], 1),
        ("GPU-2abc", [2], 0),  # a unique UUID prefix
        ("GPU-1abc-1,GPU-3abc-3", [1, 3], 0),
        ("GPU-nope", [], 1),
        ("GPU-", [], 1),  # prefix of every UUID: ambiguous
    ],
)
def test_visible_devices(value: str | None, visible: list[int], n_problems: int) -> None:
    v = apply_visible_devices(value, GPUS)
    assert [g.index for g in v.visible] == visible
    assert sorted(g.index for g in v.hidden) == sorted(set(range(4)) - set(visible))
    assert len(v.problems) == n_problems


def test_problem_text_names_the_entry_and_what_cuda_ignores() -> None:
    (problem,) = apply_visible_devices("0,7,1", GPUS).problems
    assert "'7' names GPU 7, but the GPUs here are 0-3" in problem and "'1'" in problem


def test_mig_instances() -> None:
    gpus = (GPUInfo(index=0, name="A", mig_mode=True), GPUInfo(index=1, name="A", mig_mode=False))
    v = apply_visible_devices("MIG-1234abcd", gpus)
    assert [g.index for g in v.visible] == [0] and not v.problems


def test_detect_reports_only_visible_gpus_and_warns_about_hidden_ones() -> None:
    r = detect(nvml=FakeNvml(hgx_h200(8)), env={"CUDA_VISIBLE_DEVICES": "4,5"})
    assert [g.index for g in r.gpus] == [4, 5] and r.physical_gpu_count == 8
    assert r.visible_devices == "4,5"
    (hidden,) = [h for h in r.hazards if h.code == "visible-devices-hide-gpus"]
    assert "hides 6 of 8 GPUs" in hidden.what and "0,1,2,3,6,7" in hidden.what
    assert "unset CUDA_VISIBLE_DEVICES" in hidden.fix


def test_detect_flags_indices_that_do_not_exist() -> None:
    r = detect(nvml=FakeNvml(hgx_h200(2)), env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert [g.index for g in r.gpus] == [0, 1]
    (bad,) = [h for h in r.hazards if h.code == "visible-devices-invalid"]
    assert bad.severity.value == "error" and "'2' names GPU 2" in bad.what
    assert "CUDA_VISIBLE_DEVICES=0,1" in bad.fix


def test_hiding_every_gpu_is_the_no_gpu_reason() -> None:
    r = detect(nvml=FakeNvml(hgx_h200(2)), env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.gpus == () and r.no_gpu_reason == "CUDA_VISIBLE_DEVICES='' hides all 2 GPUs"
    assert {"no-gpu", "visible-devices-hide-gpus", "visible-devices-invalid"} <= {h.code for h in r.hazards}


def test_device_order_matters_only_for_indices_over_different_gpus() -> None:
    mixed = [
        FakeGPU(name="NVIDIA L4", uuid="GPU-a", mig=None),
        FakeGPU(name="NVIDIA A10G", uuid="GPU-b", mig=None),
    ]
    r = detect(nvml=FakeNvml(mixed), env={"CUDA_VISIBLE_DEVICES": "1"})
    assert "device-order" in {h.code for h in r.hazards}
    r = detect(nvml=FakeNvml(mixed), env={"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert "device-order" not in {h.code for h in r.hazards}
    r = detect(nvml=FakeNvml(hgx_h200(2)), env={"CUDA_VISIBLE_DEVICES": "1"})
    assert "device-order" not in {h.code for h in r.hazards}
