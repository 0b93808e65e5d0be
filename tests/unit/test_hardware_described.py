"""Described hardware: spec strings, YAML profiles and saved reports, and the messages for bad ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wizard.errors import DswizError
from wizard.hardware import get_hardware
from wizard.hardware.catalog import find_model
from wizard.hardware.described import describe
from wizard.units import GiB, TiB


def test_eight_a100_80() -> None:
    r = get_hardware("8xA100-80GB")
    assert r.source == "described" and r.description == "8xA100-80GB"
    assert r.nodes == 1 and r.gpus_per_node == 8 and r.total_gpus == 8
    assert [g.index for g in r.gpus] == list(range(8))
    assert {g.catalog_key for g in r.gpus} == {"A100-80GB"}
    assert r.min_gpu_memory_bytes == find_model("A100-80GB").memory_bytes
    assert all(g.peak_tflops_bf16 == 312.0 and g.supports_bf16 for g in r.gpus)


def test_one_gpu_without_count() -> None:
    r = get_hardware("A100-80GB")
    assert r.total_gpus == 1 and r.gpus[0].catalog_key == "A100-80GB"


def test_nodes_times_gpus() -> None:
    r = get_hardware("2x8xH100")
    assert (r.nodes, r.gpus_per_node, r.total_gpus) == (2, 8, 16)
    assert r.gpus[0].name == "NVIDIA H100 80GB HBM3"


def test_options() -> None:
    r = describe("8xH100,ram=1TiB,nvme=3.5TB,net=400,cores=96,shm=64GiB,libaio=no")
    assert r.host.ram_total_bytes == TiB
    assert r.host.logical_cores == 96 and r.host.shm_bytes == 64 * GiB and r.host.libaio is False
    (disk,) = r.host.disks
    assert disk.nvme and disk.total_bytes == 3_500_000_000_000 and disk.mountpoint == "/local_nvme"
    assert r.inter_node_gbps == 400.0


def test_network_in_bytes_per_second_is_converted_to_bits() -> None:
    assert describe("2x8xH100,net=50GB/s").inter_node_gbps == 400.0
    assert describe("2x8xH100,net=400Gbps").inter_node_gbps == 400.0


def test_memory_option_overrides_and_disambiguates() -> None:
    r = describe("4xA100,mem=40GiB")
    assert r.gpus[0].catalog_key == "A100-40GB" and r.gpus[0].memory_total_bytes == 40 * GiB


def test_spaces_and_case_are_forgiven() -> None:
    assert describe(" 8 x a100-80gb ").gpus[0].catalog_key == "A100-80GB"


@pytest.mark.parametrize(
    ("spec", "problem_has", "fix_has"),
    [
        ("8xB300", "unknown GPU model 'B300'", "H200"),
        ("8xA100", "ambiguous", "A100-80GB"),
        ("0xA100-80GB", "between 1", "8xH100 (GPUs per node"),  # spec syntax: gpus_per_node=8 is no spec
        ("0x8xA100-80GB", "between 1", "2x8xH100 (nodes x GPUs per node)"),
        ("8xH100,net=0", "above 0", "net=400"),  # 0 once read as "bandwidth unknown"
        ("8xH100,ram=1TiB,ram=2TiB", "ram is given twice", "once"),
        ("8xH100,rma=1TiB", "did you mean 'ram'", "nvme"),
        ("8xH100,ram", "not key=value", "ram=1TiB"),
        ("8xH100,ram=lots", "ram", "80GiB"),
        ("8xH100,net=fast", "must be a number", "net=400"),
        ("", "cannot read the hardware spec", "8xA100-80GB"),
        ("8x", "unknown GPU model '8x' in hardware spec '8x'", "A100-80GB"),
    ],
)
def test_bad_specs_name_the_problem_and_the_fix(spec: str, problem_has: str, fix_has: str) -> None:
    with pytest.raises(DswizError) as err:
        describe(spec)
    assert problem_has in err.value.problem
    assert err.value.fix and fix_has in err.value.fix


def write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_yaml_profile(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "name: lab cluster\ngpu: H100\ngpus_per_node: 8\nnodes: 4\nram: 2TiB\nnvme: 7TB\n"
        "nvme_path: /scratch\ninter_node_gbps: 3200\nlibaio: true\n",
    )
    r = get_hardware(str(p))
    assert r.source == "described" and r.description == "lab cluster"
    assert (r.nodes, r.gpus_per_node) == (4, 8)
    assert r.host.ram_total_bytes == 2 * TiB and r.host.libaio is True
    assert r.host.disks[0].mountpoint == "/scratch" and r.inter_node_gbps == 3200.0


def test_yaml_profile_with_a_gpu_the_catalog_lacks(tmp_path: Path) -> None:
    p = write(tmp_path, "gpu: RTX A5000\ngpu_memory: 24GiB\ncompute_capability: '8.6'\ntflops_bf16: 111.1\n")
    (g,) = get_hardware(str(p)).gpus
    assert g.name == "RTX A5000" and g.memory_total_bytes == 24 * GiB
    assert g.compute_capability == (8, 6) and g.peak_tflops_bf16 == 111.1 and g.catalog_key is None


def test_yaml_memory_override_of_a_known_gpu(tmp_path: Path) -> None:
    (g,) = get_hardware(str(write(tmp_path, "gpu: L4\ngpu_memory: 20GiB\n"))).gpus
    assert g.catalog_key == "L4" and g.memory_total_bytes == 20 * GiB


@pytest.mark.parametrize(
    ("text", "problem_has", "fix_has"),
    [
        ("gpu: A100-80GB\ngpus_per_nod: 8\n", "did you mean 'gpus_per_node'", "gpus_per_node"),
        ("gpus_per_node: 8\n", "does not say which GPU", "gpu: A100-80GB"),
        ("gpu: A100-80GB\nram: 512\n", "has no unit", "512GiB"),
        ("gpu: A100-80GB\nnodes: two\n", "whole number", "nodes: 8"),
        ("gpu: [A100\n", "not valid YAML at line", "YAML"),
        ("- gpu: A100-80GB\n", "must be a mapping", "gpu: A100-80GB"),
        ("gpu: Z9000\n", "unknown GPU model", "A100-80GB"),
        ("gpu: X1\ngpu_memory: 48GiB\ncompute_capability: eight\n", "must look like 8.0", "8.9"),
    ],
)
def test_bad_profiles(tmp_path: Path, text: str, problem_has: str, fix_has: str) -> None:
    with pytest.raises(DswizError) as err:
        get_hardware(str(write(tmp_path, text)))
    assert problem_has in err.value.problem
    assert err.value.fix and fix_has in err.value.fix


@pytest.mark.parametrize(
    ("spec", "problem_has"),
    [
        ("1xH100-80GB,ram=64", "64 has no unit, so it is 64 bytes"),  # once planned as 64 B of RAM
        ("1xH100-80GB,nvme=2", "2 has no unit"),
        ("1xH100-80GB,ram=0GiB", "is no memory"),
        ("1xH100-80GB,ram=2EiB", "above 1 EiB"),
        ("1xH100-80GB,ram=lots", "is not a size"),
    ],
)
def test_bad_sizes_in_a_spec_name_the_key_and_the_unit(spec: str, problem_has: str) -> None:
    with pytest.raises(DswizError) as err:
        get_hardware(spec)
    assert problem_has in err.value.problem and err.value.fix and "=80GiB" in err.value.fix


def test_sizes_up_to_an_exbibyte_read_in_every_unit() -> None:
    assert get_hardware("1xH100-80GB,ram=1PiB").host.ram_total_bytes == 1024 * TiB
    assert get_hardware("1xH100-80GB,ram=1EiB").host.ram_total_bytes == 2**60
    assert get_hardware("1xH100-80GB,ram=2PB").host.ram_total_bytes == 2 * 1000**5


def test_missing_profile(tmp_path: Path) -> None:
    with pytest.raises(DswizError) as err:
        get_hardware(str(tmp_path / "nope.yaml"))
    assert "not found" in err.value.problem


def test_saved_report_json_round_trips(tmp_path: Path) -> None:
    original = get_hardware("2x8xA100-80GB,ram=1TiB")
    p = tmp_path / "target.json"
    p.write_text(json.dumps(original.to_dict()))
    assert get_hardware(str(p)) == original


@pytest.mark.parametrize(
    ("content", "problem_has"), [("{not json", "cannot read"), ('{"gpus": 3}', "not a dswiz")]
)
def test_bad_report_json(tmp_path: Path, content: str, problem_has: str) -> None:
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(DswizError) as err:
        get_hardware(str(p))
    assert problem_has in err.value.problem and "dswiz detect --json" in (err.value.fix or "")
