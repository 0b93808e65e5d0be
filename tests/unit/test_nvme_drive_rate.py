"""NVMe offload's swaps priced at the drive's own rates: the hardware spec's nvme_read / nvme_write, the planner's
read and write volumes (16 bytes a parameter each way, the 16-bit weights written back with the parameters there),
and the H100 machine's reading of GPT-2-medium with the optimizer on its disk, predicted from that disk's measured
rates (bench/nvme_rate.py, bench/plan_accuracy.py --nvme-rate)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from wizard.errors import DswizError
from wizard.hardware.described import describe, looks_like_profile_path
from wizard.hardware.report import DiskInfo, HardwareReport
from wizard.model import load_model_spec
from wizard.planner import calibration as cal
from wizard.planner.finetune import stored_elements, trainable_params, with_finetune
from wizard.planner.throughput import (
    NVME_PARAM_WRITE_PART,
    NVME_SWAP_PART,
    estimate_throughput,
    nvme_rates,
)
from wizard.planner.zero3 import nvme_parameters
from wizard.strategy import Strategy
from wizard.tuning import make_finetune

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
NVME_ROW = RESULTS / "plan_accuracy-2026-12-07-1gpu-phases-nvme-a.json"
ZERO_INFINITY = Strategy(
    zero_stage=3, offload_optimizer="nvme", micro_batch_size=8, activation_checkpointing=True, gpus_per_node=1
)


def _parts(hw: HardwareReport, s: Strategy = ZERO_INFINITY, model: str = "gpt2-medium") -> dict[str, float]:
    return dict(estimate_throughput(hw, load_model_spec(model), s, 1024).parts)


def test_the_spec_gives_the_drive_its_rates() -> None:
    hw = describe("8xH100,nvme=3.5TB,nvme_read=6.5,nvme_write=4GB/s")
    drive = hw.host.swap_drive
    assert drive is not None and drive.read_bytes_per_s == 6.5e9 and drive.write_bytes_per_s == 4e9
    assert nvme_rates(hw) == (6.5e9, 4e9)
    assert describe("1xH100,nvme=2TB,nvme_read=1600MB/s").host.disks[0].read_bytes_per_s == 1.6e9
    # unknown: the calibration's assumption, each way
    assumed = (cal.NVME_READ_BYTES_PER_SECOND, cal.NVME_WRITE_BYTES_PER_SECOND)
    assert nvme_rates(describe("1xH100,nvme=2TB")) == assumed and nvme_rates(describe("1xH100")) == assumed


@pytest.mark.parametrize(
    ("spec", "problem_has", "fix_has"),
    [
        ("1xH100,nvme_read=6", "does not describe", "nvme=3.5TB,nvme_read=6.5"),
        ("1xH100,nvme=2TB,nvme_write=fast", "rate in GB/s", "nvme_write=4"),
        ("1xH100,nvme=2TB,nvme_read=0", "rate in GB/s", "nvme_read=6.5"),
        ("1xH100,nvme=2TB,nvme_read=5000", "rate in GB/s", "nvme_read=6.5"),
        ("1xH100,nvme=2TB,nvme_read=6Gbps", "rate in GB/s", "nvme_read=6.5"),
    ],
)
def test_a_bad_rate_names_the_key_and_the_fix(spec: str, problem_has: str, fix_has: str) -> None:
    with pytest.raises(DswizError) as e:
        describe(spec)
    assert problem_has in e.value.problem and fix_has in (e.value.fix or "")


def test_a_path_in_a_specs_options_is_no_profile_path() -> None:
    # before, any "/" made the whole spec a file name: "profile '8xH100,...,nvme_path=/mnt/nvme' not found"
    assert not looks_like_profile_path("8xH100,nvme=3.5TB,nvme_path=/mnt/nvme,nvme_read=6GB/s")
    assert describe("8xH100,nvme=3.5TB,nvme_path=/mnt/nvme").host.disks[0].mountpoint == "/mnt/nvme"
    assert looks_like_profile_path("profiles/cluster.yaml") and looks_like_profile_path("./a,b=c")


def test_the_swaps_move_16_bytes_a_parameter_each_way_at_the_drives_rates() -> None:
    hw = describe("1xH100,nvme=2TB,nvme_read=2,nvme_write=1")
    P = trainable_params(load_model_spec("gpt2-medium"))
    assert _parts(hw)[NVME_SWAP_PART] == pytest.approx(16 * P / 2e9 + 16 * P / 1e9)
    # slower each way, slower the step; the node's ranks share the drive
    slower_read = describe("1xH100,nvme=2TB,nvme_read=1,nvme_write=1")
    assert _parts(slower_read)[NVME_SWAP_PART] > _parts(hw)[NVME_SWAP_PART]
    eight = describe("8xH100,nvme=2TB,nvme_read=2,nvme_write=1")
    assert _parts(eight, replace(ZERO_INFINITY, gpus_per_node=8))[NVME_SWAP_PART] == pytest.approx(
        _parts(hw)[NVME_SWAP_PART]
    )  # 8 ranks, an eighth of the states each, one drive


def test_parameters_on_nvme_follow_deepspeeds_host_buffer_and_sub_groups() -> None:
    """DeepSpeed keeps in its pinned host buffer (max_in_cpu, 1e9 elements) the optimizer's sub-groups that fit whole,
    and a sub-group closes once it reaches sub_group_size (also 1e9): GPT-2-medium's 355M trained elements are all
    kept (nothing moves through the drive), llama-7b's 6.7e9 on one rank none -- every one fetched from NVMe and
    written back every step, the 2 GB buffer allocated all the same."""
    hw = describe("1xH100,nvme=2TB,nvme_read=2,nvme_write=1")
    both = replace(ZERO_INFINITY, offload_param="nvme")
    small = _parts(hw, both)
    assert NVME_PARAM_WRITE_PART not in small and "parameter fetch (NVMe)" not in small
    assert NVME_PARAM_WRITE_PART not in _parts(hw)
    spec = load_model_spec("llama-7b")
    everything = stored_elements(spec, 2)
    nv = nvme_parameters(spec, both)
    assert (nv.kept, nv.fetched, nv.written) == (0, everything, everything)
    assert nv.host_buffer == cal.NVME_PARAM_MAX_IN_CPU
    assert _parts(hw, both, "llama-7b")[NVME_PARAM_WRITE_PART] == pytest.approx(2 * everything / 1e9)
    # the write-back buffer holds the largest sub-group's full parameters: about the ranks times the sub-group
    eight = nvme_parameters(spec, replace(both, gpus_per_node=8))
    assert eight.kept == everything // 8  # 0.84e9 a rank: all kept
    seventy = load_model_spec("llama-70b")
    one, many = (
        nvme_parameters(seventy, replace(both, gpus_per_node=2)),
        nvme_parameters(seventy, replace(both, gpus_per_node=8)),
    )
    assert many.write_buffer == 4 * one.write_buffer == 8 * cal.STAGE3_SUB_GROUP_ELEMENTS
    # inference (no optimizer, DeepSpeedZeRoOffload) swaps every parameter
    inference = nvme_parameters(spec, replace(both, offload_optimizer="none", mode="inference"))
    assert (inference.kept, inference.fetched, inference.written) == (0, everything, 0)


def test_lora_on_nvme_never_writes_back_the_frozen_base() -> None:
    """Only the optimizer's (trained) parameters enter the host buffer and the write-back (stage3.py
    trainable_param_groups): LoRA's frozen base stays on NVMe, read every fetch and never written."""
    spec = load_model_spec("llama-7b")
    lora = with_finetune(spec, make_finetune("lora"))
    nv = nvme_parameters(lora, replace(ZERO_INFINITY, offload_param="nvme"))
    assert nv.written == 0 and nv.kept == trainable_params(lora) > 0
    assert nv.fetched == stored_elements(lora, 2) - nv.kept


def test_an_old_report_without_rates_loads_with_none() -> None:
    d = describe("1xH100,nvme=2TB").to_dict()
    for disk in d["host"]["disks"]:
        disk.pop("read_bytes_per_s"), disk.pop("write_bytes_per_s")
    drive = HardwareReport.from_dict(d).host.swap_drive
    assert isinstance(drive, DiskInfo) and drive.read_bytes_per_s is None


def test_the_h100_reading_is_predicted_from_its_drives_measured_rates(
    bench_script: Callable[[str], ModuleType],
) -> None:
    pa = bench_script("plan_accuracy")
    doc = json.loads(NVME_ROW.read_text())
    rate = json.loads((RESULTS / "nvme_rate-2026-12-07-h100.json").read_text())
    hw = HardwareReport.from_dict(doc["hardware"])
    (row,) = doc["rows"]
    assert row["status"] == "ok" and row["config"]["offload_optimizer"] == "nvme"
    drive = hw.host.swap_drive
    assert drive is not None
    assert (drive.read_bytes_per_s, drive.write_bytes_per_s) == bench_script("nvme_rate").default_rates(rate)
    # with the drive's rates: within 2 %; with the assumed 3 GB/s each way the step was a third too short
    assert pa.row_throughput(hw, row).tokens_per_sec / row["tokens_per_sec"] == pytest.approx(1.0, abs=0.02)
    bare = replace(hw, host=replace(hw.host, disks=tuple(d for d in hw.host.disks if not d.nvme)))
    assert pa.row_throughput(bare, row).tokens_per_sec / row["tokens_per_sec"] > 1.3


def test_host_ram_of_the_optimizer_on_nvme_is_the_swappers_buffers_of_a_sub_group() -> None:
    """The reading's process peaked at 11.7 GiB of RSS: the swapper's four page-locked fp32 buffers of GPT-2-medium's
    one sub-group (355M elements, 5.3 GiB) and two more at set-up, over the process itself; the fixed 1.6 GB the
    planner counted before said 4.5 GiB."""
    from wizard.planner.host_memory import host_bytes

    (row,) = json.loads(NVME_ROW.read_text())["rows"]
    need, _ = host_bytes(load_model_spec("gpt2-medium"), ZERO_INFINITY)
    assert need / row["host_rss_peak"] == pytest.approx(1.0, abs=0.10)
