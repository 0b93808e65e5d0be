"""Preflight checks: each bad situation gives an error (or warning) that names it and says the fix.

A second host cannot exist here, so `ssh` is a fake script on PATH that answers for made-up host names; the
training python is the real one (this venv) or a fake script printing what a python without DeepSpeed would.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
from pathlib import Path

import pytest

from runner import preflight as pf
from wizard.config.nvme import launch_nvme_findings
from wizard.findings import Severity
from wizard.hardware.report import GPUInfo, HardwareReport, HostInfo
from wizard.launch_command import LaunchSpec

GiB = 1024**3


def h200s(n: int, **host: object) -> HardwareReport:
    gpus = tuple(GPUInfo(index=i, name="NVIDIA H200", compute_capability=(9, 0)) for i in range(n))
    return HardwareReport(source="detected", gpus=gpus, host=HostInfo(**host))  # type: ignore[arg-type]


def codes(findings: list) -> list[str]:  # type: ignore[type-arg]
    return [f.code for f in findings]


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_script_checks(tmp_path: Path) -> None:
    assert codes(pf.check_script(str(tmp_path / "nope.py"))) == ["script-missing"]
    assert codes(pf.check_script(str(tmp_path))) == ["script-not-a-file"]
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    assert pf.check_script(str(script)) == []


def test_training_python_is_probed_not_assumed(tmp_path: Path) -> None:
    findings, env = pf.check_training_python(sys.executable, "deepspeed")
    assert findings == [] and env is not None
    assert env.deepspeed and env.torch and env.python == sys.version.split()[0]

    findings, env = pf.check_training_python(str(tmp_path / "no-python"), "deepspeed")
    assert codes(findings) == ["python-unusable"] and env is None
    assert "--python" in findings[0].fix

    bare = executable(
        tmp_path / "python",
        "#!/bin/sh\necho '"
        + json.dumps({"executable": "/bare/python", "python": "3.12.1", "deepspeed": None, "torch": "2.5"})
        + "'\n",
    )
    findings, env = pf.check_training_python(str(bare), "deepspeed")
    assert codes(findings) == ["python-missing-packages"]
    assert "deepspeed" in findings[0].what and findings[0].severity is Severity.ERROR


def test_gpu_count() -> None:
    assert codes(pf.check_gpu_count(h200s(2), requested=2)) == []
    assert codes(pf.check_gpu_count(h200s(2), requested=None)) == []
    err = pf.check_gpu_count(h200s(2), requested=4)
    assert codes(err) == ["gpu-count"] and "--nproc 2" in err[0].fix
    # CUDA_VISIBLE_DEVICES hides GPUs from the job even though NVML lists them all
    err = pf.check_gpu_count(h200s(8), requested=2, visible_devices="3")
    assert codes(err) == ["gpu-count"] and "CUDA_VISIBLE_DEVICES" in err[0].what
    assert codes(pf.check_gpu_count(h200s(8), requested=2)) == ["gpu-count-partial"]
    none = pf.check_gpu_count(
        HardwareReport(source="detected", no_gpu_reason="NVML library not found"), requested=2
    )
    assert codes(none) == ["no-gpu"] and none[0].severity is Severity.WARNING
    assert "NVML library not found" in none[0].what


def test_port_in_use_is_an_error_with_a_free_port_as_fix() -> None:
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        port = s.getsockname()[1]
        err = pf.check_port(port)
        assert codes(err) == ["port-in-use"]
        suggested = int(err[0].fix.split("--master-port ")[1].split()[0])
        assert suggested != port and pf.port_is_free(suggested)
        assert pf.reserve_port(port).port != port
    assert pf.check_port(pf.free_port()) == []


def nvme_config(path: object, where: str = "offload_optimizer") -> dict:  # type: ignore[type-arg]
    section = {"device": "nvme"} if path is None else {"device": "nvme", "nvme_path": str(path)}
    return {"zero_optimization": {"stage": 3, where: section}}


def test_nvme_offload_checks(tmp_path: Path) -> None:
    hw = h200s(1, libaio=True)
    assert launch_nvme_findings(nvme_config(tmp_path), hw) == []
    assert codes(launch_nvme_findings(nvme_config(None), hw)) == ["nvme-path-missing"]
    absent = launch_nvme_findings(nvme_config(tmp_path / "absent", "offload_param"), hw)
    assert codes(absent) == ["nvme-path-absent"] and "mkdir -p" in absent[0].fix
    assert absent[0].location == "zero_optimization.offload_param.nvme_path"
    assert codes(launch_nvme_findings(nvme_config("/proc"), hw)) == [
        "nvme-path-readonly"
    ]  # even root cannot write
    room = launch_nvme_findings(nvme_config(tmp_path), hw, need_bytes=10**18)
    assert codes(room) == ["nvme-no-room"]
    no_aio = launch_nvme_findings(nvme_config(tmp_path), h200s(1, libaio=False))
    assert codes(no_aio) == ["libaio-missing"] and "libaio-dev" in no_aio[0].fix
    assert (
        launch_nvme_findings(
            {"zero_optimization": {"offload_optimizer": {"device": "cpu"}}}, h200s(1, libaio=False)
        )
        == []
    )


def test_host_ram_against_the_predicted_offload_need() -> None:
    cfg = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    hw = h200s(1, ram_total_bytes=64 * GiB, ram_available_bytes=60 * GiB)
    assert codes(pf.check_host_ram(cfg, hw, need_bytes=80 * GiB)) == ["host-ram"]
    assert codes(pf.check_host_ram(cfg, hw, need_bytes=55 * GiB)) == ["host-ram-tight"]
    assert pf.check_host_ram(cfg, hw, need_bytes=10 * GiB) == []
    assert pf.check_host_ram(cfg, hw, need_bytes=None) == []  # no prediction, no claim
    assert pf.check_host_ram({"zero_optimization": {"stage": 2}}, hw, need_bytes=80 * GiB) == []


@pytest.mark.parametrize(
    ("value", "fixed"),
    [
        ("9.0a", "9.0"),
        ("8.0;9.0a+PTX", "8.0;9.0+PTX"),
        ("8.0 9.0a 9.0", "8.0;9.0"),
        ("Hopper", "9.0+PTX"),
        ("native", None),  # nothing parseable left: unset, DeepSpeed builds for the GPUs it sees
    ],
)
def test_unparsable_arch_list_is_fixed_for_the_job(value: str, fixed: str | None) -> None:
    findings, env = pf.check_arch_list({"TORCH_CUDA_ARCH_LIST": value})
    assert codes(findings) == ["arch-list-unparsable"] and env == {"TORCH_CUDA_ARCH_LIST": fixed}
    assert findings[0].severity is Severity.WARNING  # fixed, so it does not stop the launch


@pytest.mark.parametrize("value", ["9.0", "8.0;8.6;9.0+PTX", "7.5 8.0"])
def test_parsable_arch_list_is_left_alone(value: str) -> None:
    assert pf.check_arch_list({"TORCH_CUDA_ARCH_LIST": value}) == ([], {})
    assert pf.check_arch_list({}) == ([], {})


@pytest.mark.parametrize("value", ["true", "1", "yes", ""])
def test_an_allocator_value_pytorch_refuses_stops_the_launch(value: str) -> None:
    env = {"PYTORCH_CUDA_ALLOC_CONF": f"max_split_size_mb:512,expandable_segments:{value}"}
    [finding] = pf.check_alloc_conf(env)
    assert finding.severity is Severity.ERROR and finding.code == "alloc-conf-unparsable"
    assert "PYTORCH_CUDA_ALLOC_CONF" in finding.what and "expandable_segments:True" in finding.fix
    assert pf.check_alloc_conf({"PYTORCH_ALLOC_CONF": "expandable_segments:True"}) == []
    assert pf.check_alloc_conf({}) == []


def test_hostfile_findings(tmp_path: Path) -> None:
    good = tmp_path / "hostfile"
    good.write_text("nodeA slots=1\nnodeB slots=1\n")
    assert pf.check_hostfile(str(good)) == ([], [("nodeA", 1), ("nodeB", 1)])
    bad = tmp_path / "bad"
    bad.write_text("nodeA slots=1\nnodeB 4\n")
    findings, hosts = pf.check_hostfile(str(bad))
    assert codes(findings) == ["hostfile-invalid"] and hosts == []
    assert f"{bad}:2" in findings[0].what and "slots=" in findings[0].fix
    assert codes(pf.check_hostfile(str(tmp_path / "missing"))[0]) == ["hostfile-unreadable"]


FAKE_SSH = """#!/bin/sh
# Fake ssh: the options, then the host, then the remote command (one string). Records each call.
echo "$@" >> "$FAKE_SSH_LOG"
while [ "$1" = "-o" ]; do shift 2; done
host="$1"; shift
case "$host" in
  down) echo "ssh: connect to host down port 22: Connection timed out" >&2; exit 255 ;;
  nopy) echo "sh: 1: /envs/x/bin/python: not found" >&2; exit 127 ;;
  oldds) echo '{"executable": "/x", "python": "3.11.9", "deepspeed": "0.14.0", "torch": "2.4"}' ;;
  *) sh -c "$1" ;;
esac
"""


@pytest.fixture
def fake_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    executable(bindir / "ssh", FAKE_SSH)
    log = tmp_path / "ssh.log"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_LOG", str(log))
    return log


def test_every_host_is_probed_by_ssh_in_batch_mode(fake_ssh: Path) -> None:
    _, local = pf.check_training_python(sys.executable, "deepspeed")
    findings = pf.check_hosts(["good1", "down", "nopy", "oldds", "good2"], sys.executable, local, timeout_s=3)
    by_host = {f.location: f.code for f in findings}
    assert by_host == {
        "down": "host-unreachable",
        "nopy": "host-python-missing",
        "oldds": "host-deepspeed-version",
    }
    calls = fake_ssh.read_text().splitlines()
    assert len(calls) == 5
    assert all("BatchMode=yes" in c and "ConnectTimeout=3" in c for c in calls)
    down = next(f for f in findings if f.location == "down")
    assert "Connection timed out" in down.what and "nossh" in down.fix


def test_preflight_end_to_end(tmp_path: Path, fake_ssh: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("good slots=2\ndown slots=2\n")
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        spec = LaunchSpec(
            script=str(script),
            run_dir=str(tmp_path / "run"),
            python=sys.executable,
            ds_config="x.json",
            hostfile=str(hostfile),
            multinode_launcher="pdsh",
            nproc=2,
            master_port=busy.getsockname()[1],
        )
        result = pf.preflight(
            spec,
            hardware=h200s(1),
            ds_config={"zero_optimization": {"stage": 2}},
            environ={"TORCH_CUDA_ARCH_LIST": "9.0a"},
            ssh_timeout_s=3,
        )
    assert not result.ok
    assert set(codes(list(result.findings))) == {
        "host-unreachable",
        "gpu-count",
        "port-in-use",
        "arch-list-unparsable",
    }
    assert [f.severity for f in result.findings] == sorted(
        (f.severity for f in result.findings), key=lambda s: s.rank
    )
    assert result.env_fixes == (("TORCH_CUDA_ARCH_LIST", "9.0"),)
    assert result.hosts == (("good", 2), ("down", 2))


def test_nossh_needs_no_ssh_and_checks_the_node_rank(tmp_path: Path, fake_ssh: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("nodeA slots=1\nnodeB slots=1\n")
    spec = LaunchSpec(
        script=str(script),
        run_dir=str(tmp_path / "run"),
        python=sys.executable,
        ds_config="x.json",
        hostfile=str(hostfile),
        multinode_launcher="nossh",
        node_rank=2,
        master_addr="127.0.0.1",
    )
    result = pf.preflight(spec, hardware=h200s(1), ds_config=None, environ={})
    assert codes(list(result.findings)) == ["node-rank-range"]
    assert not fake_ssh.exists()  # no host was contacted
