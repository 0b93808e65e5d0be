"""Linter rules that depend on context (consumer, world size, hardware, the filesystem) -- each checked on the
smallest config that shows it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from wizard.config.check import lint_config, lint_path
from wizard.config.lint.batch import complete_batch
from wizard.findings import Finding, Severity
from wizard.hardware import get_hardware
from wizard.hardware.report import DiskInfo, HardwareReport, HostInfo

BASE: dict[str, Any] = {"train_micro_batch_size_per_gpu": 2, "steps_per_print": 10, "log_level": "info"}


def codes(findings: list[Finding], severity: Severity | None = None) -> set[str]:
    return {f.code for f in findings if severity is None or f.severity is severity}


@pytest.mark.parametrize(
    ("train", "micro", "gas", "world", "expected"),
    [
        (32, 4, 2, 4, (32, 4, 2)),
        (32, 4, None, 4, (32, 4, 2)),  # accumulation derived: 32 // 4 // 4
        (32, None, 2, 4, (32, 4, 2)),  # micro derived: 32 // 4 // 2
        (None, 4, 2, 4, (32, 4, 2)),
        (16, None, None, 4, (16, 4, 1)),
        (None, 4, None, 4, (16, 4, 1)),
        (30, 4, None, 4, "30 != 4 * 1 * 4"),  # floor division: 30 // 4 // 4 = 1
        (2, 4, None, 4, "gradient_accumulation_steps works out to 0"),
        (None, None, 2, 4, "Either train_batch_size or train_micro_batch_size_per_gpu"),
    ],
)
def test_batch_completion_follows_deepspeed(
    train: int | None, micro: int | None, gas: int | None, world: int, expected: Any
) -> None:
    result = complete_batch(train, micro, gas, world)
    if isinstance(expected, tuple):
        assert result == expected
    else:
        assert isinstance(result, str) and expected in result


def test_batch_fix_gives_the_numbers() -> None:
    cfg = {**BASE, "train_batch_size": 10, "gradient_accumulation_steps": 2}
    (f,) = [f for f in lint_config(cfg, world_size=4) if f.code == "batch-arithmetic"]
    assert "set train_batch_size to 16 (2 x 2 x 4)" in f.fix


def test_train_batch_size_without_world_size_says_which_world_it_fits() -> None:
    cfg = {**BASE, "train_batch_size": 32, "gradient_accumulation_steps": 2}
    (f,) = [f for f in lint_config(cfg) if f.code == "batch-world-size"]
    assert "8 GPU(s)" in f.what and f.severity is Severity.INFO


@pytest.mark.parametrize("consumer", ["accelerate", "trainer"])
def test_a_batch_with_auto_parts_is_still_checked_against_the_numbers_given(consumer: str) -> None:
    """micro-batch "auto": whatever the consumer fills in, 32 cannot be micro x 2 x 3; on 4 GPUs it can (micro 4)."""
    cfg = {
        **BASE,
        "train_batch_size": 32,
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": 2,
    }
    (f,) = [f for f in lint_config(cfg, consumer=consumer, world_size=3) if f.code == "batch-arithmetic"]
    assert f.severity is Severity.ERROR and "= 6" in f.what and "multiple of 6 (30)" in f.fix
    assert "batch-arithmetic" not in codes(lint_config(cfg, consumer=consumer, world_size=4))
    both_auto = {
        **cfg,
        "gradient_accumulation_steps": "auto",
    }  # only the world size is known: 33 on 2 GPUs fails
    assert "batch-arithmetic" in codes(
        lint_config({**both_auto, "train_batch_size": 33}, consumer=consumer, world_size=2)
    )
    assert "batch-arithmetic" not in codes(lint_config(both_auto, consumer=consumer, world_size=2))


def test_world_size_comes_from_the_hardware() -> None:
    cfg = {**BASE, "train_batch_size": 16, "gradient_accumulation_steps": 1}
    assert "batch-arithmetic" in codes(lint_config(cfg, hardware=get_hardware("4xA100-80GB")))
    assert "batch-arithmetic" not in codes(lint_config(cfg, hardware=get_hardware("8xA100-80GB")))


@pytest.mark.parametrize(
    ("spec", "precision", "code"),
    [
        ("8xV100-32GB", "bf16", "precision-unsupported"),
        ("2xT4", "bf16", "precision-unsupported"),
        ("8xA100-80GB", "fp16", "precision-fp16-on-bf16-gpu"),
    ],
)
def test_precision_against_compute_capability(spec: str, precision: str, code: str) -> None:
    cfg = {**BASE, precision: {"enabled": True}}
    assert code in codes(lint_config(cfg, hardware=get_hardware(spec)))


def test_precision_fine_where_supported() -> None:
    for spec, precision in (("8xA100-80GB", "bf16"), ("8xV100-32GB", "fp16"), ("2xT4", "fp16")):
        found = lint_config({**BASE, precision: {"enabled": True}}, hardware=get_hardware(spec))
        assert not codes(found) & {"precision-unsupported", "precision-fp16-on-bf16-gpu"}


def _nvme_cfg(path: str, device: str = "nvme") -> dict[str, Any]:
    return {
        **BASE,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": device, "nvme_path": path}},
    }


def _hardware_with_disk(mount: str, *, nvme: bool, libaio: bool | None) -> HardwareReport:
    disk = DiskInfo(
        mountpoint=mount, device="/dev/x", fstype="ext4", total_bytes=10**12, free_bytes=10**12, nvme=nvme
    )
    return HardwareReport(source="detected", host=HostInfo(disks=(disk,), libaio=libaio))


def test_nvme_path_in_a_writable_directory_is_fine(tmp_path: Path) -> None:
    found = lint_config(
        _nvme_cfg(str(tmp_path / "swap")), hardware=_hardware_with_disk("/", nvme=True, libaio=True)
    )
    assert not codes(found) & {"nvme-path-not-writable", "nvme-not-on-nvme", "no-libaio", "libaio-unknown"}


def test_nvme_path_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    found = lint_config(_nvme_cfg(str(tmp_path / "file" / "swap")))
    assert "nvme-path-not-writable" in codes(found, Severity.ERROR)


def test_described_hardware_skips_local_path_checks(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    found = lint_config(
        _nvme_cfg(str(tmp_path / "file" / "swap")), hardware=get_hardware("8xH100,libaio=true")
    )
    assert "nvme-path-not-writable" not in codes(found)


def test_nvme_on_a_non_nvme_disk_and_without_libaio(tmp_path: Path) -> None:
    found = lint_config(_nvme_cfg(str(tmp_path)), hardware=_hardware_with_disk("/", nvme=False, libaio=False))
    assert {"nvme-not-on-nvme", "no-libaio"} <= codes(found)
    assert "no-libaio" in codes(found, Severity.ERROR)


def test_libaio_unknown_without_hardware(tmp_path: Path) -> None:
    assert "libaio-unknown" in codes(lint_config(_nvme_cfg(str(tmp_path))), Severity.INFO)


def test_offload_with_the_scripts_optimizer_depends_on_the_consumer() -> None:
    cfg = {**BASE, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    assert "offload-client-optimizer" in codes(lint_config(cfg, consumer="deepspeed"), Severity.WARNING)
    for consumer in ("accelerate", "trainer"):
        found = lint_config(cfg, consumer=consumer)  # type: ignore[arg-type]
        assert "offload-optimizer-replaced" in codes(found, Severity.INFO)
    forced = {**cfg, "zero_force_ds_cpu_optimizer": False}
    assert not codes(lint_config(forced, consumer="deepspeed")) & {"offload-client-optimizer"}


def test_auto_sets_differ_between_trainer_and_accelerate() -> None:
    cfg = {**BASE, "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto"}}}
    assert "auto-unfilled" not in codes(lint_config(cfg, consumer="trainer"))
    accelerate = [f for f in lint_config(cfg, consumer="accelerate") if f.code == "auto-unfilled"]
    assert sorted(str(f.location) for f in accelerate) == ["optimizer.params.betas", "optimizer.params.eps"]
    plain = [f for f in lint_config(cfg, consumer="deepspeed") if f.code == "auto-unfilled"]
    assert len(plain) == 3


def test_grad_accum_dtype_auto_says_deepspeed_fails_on_it() -> None:
    """DeepSpeed keeps data_types.grad_accum_dtype as the string and looks it up in DtypeEnum when it builds the
    optimizer: "auto" is a ValueError there, not a default taken silently."""
    cfg = {**BASE, "data_types": {"grad_accum_dtype": "auto"}}
    (found,) = [f for f in lint_config(cfg, consumer="deepspeed") if f.code == "auto-unfilled"]
    assert found.severity is Severity.ERROR and found.location == "data_types.grad_accum_dtype"
    assert "ValueError" in found.why and "silently" not in found.why
    assert '"fp32"' in found.fix and "--for" not in found.fix  # no consumer fills it: --for would not help
    assert "grad-accum-dtype" not in codes(lint_config(cfg, consumer="deepspeed"))  # one finding, not two


def test_accelerate_fills_stage_auto_with_its_default() -> None:
    cfg = {**BASE, "zero_optimization": {"stage": "auto"}}
    assert "auto-default" in codes(lint_config(cfg, consumer="accelerate"), Severity.WARNING)
    assert "auto-unfilled" in codes(lint_config(cfg, consumer="trainer"), Severity.ERROR)


def test_unknown_key_without_a_close_match_is_a_warning() -> None:
    found = lint_config({**BASE, "my_script_setting": 3})
    assert "unknown-key" in codes(found, Severity.WARNING)


def test_removed_zero_key_and_deprecated_key() -> None:
    found = lint_config(
        {**BASE, "zero_optimization": {"stage": 3, "mics_shard_size": 8, "cpu_offload": True}}
    )
    assert "removed-key" in codes(found, Severity.ERROR)
    assert "deprecated-key" in codes(found, Severity.WARNING)


def test_hpz_matches_gpus_per_node() -> None:
    cfg = {**BASE, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}}
    assert "hpz-size" not in codes(lint_config(cfg, hardware=get_hardware("2x8xH100")))
    assert "hpz-size" in codes(lint_config(cfg, gpus_per_node=4))


def test_observability_notes_depend_on_the_consumer() -> None:
    quiet = {"train_micro_batch_size_per_gpu": 2}
    assert {"no-steps-per-print", "no-log-level"} <= codes(lint_config(quiet, consumer="deepspeed"))
    assert "accelerate-steps-per-print" in codes(lint_config(quiet, consumer="accelerate"))


def test_hostfile_world_size_and_trailing_text(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_text("a slots=4 extra\nb slots=4\n")
    found = lint_path(path, world_size=16)
    assert {"hostfile-trailing-text", "hostfile-world-size"} <= codes(found, Severity.WARNING)
    assert not codes(found, Severity.ERROR)


def test_directory_lint_uses_the_hostfile_as_world_size(tmp_path: Path) -> None:
    (tmp_path / "ds_config.json").write_text('{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4}')
    (tmp_path / "hostfile").write_text("a slots=2\nb slots=2\n")
    assert "batch-arithmetic" not in codes(lint_path(tmp_path))
    (tmp_path / "hostfile").write_text("a slots=2\nb slots=4\n")
    assert "batch-arithmetic" in codes(lint_path(tmp_path))


def test_empty_directory_is_a_finding(tmp_path: Path) -> None:
    assert codes(lint_path(tmp_path)) == {"unreadable"}


def test_the_pure_linter_never_loads_the_subprocess_edge() -> None:
    import json as _json
    import subprocess
    import sys

    code = "import sys, json; import wizard.config.check, wizard.config.load; print(json.dumps(sorted(sys.modules)))"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    loaded = set(_json.loads(proc.stdout.strip().splitlines()[-1]))
    assert not {m for m in loaded if m.startswith("wizard.consumer") or m in ("torch", "deepspeed")}
