"""User text shown through rich stays text: a path, a GPU name or a mount point with [brackets] is printed as
written, never read as rich markup (which raised MarkupError for ``[/x]`` and silently restyled ``[bold]``)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from wizard.hardware.described import describe_profile
from wizard.tui.screens.hardware import gpu_table

from .test_fuzz_cli import run_cli

PROFILE = "gpu: '[bold]MyGPU[/x]'\ngpu_memory: 48GiB\ncompute_capability: '8.9'\nnvme: 1TB\nnvme_path: /mnt/[red]nvme\n"


def _profile(tmp_path: Path) -> Path:
    path = tmp_path / "[x]" / "[bold] profile.yaml"
    path.parent.mkdir()
    path.write_text(PROFILE, encoding="utf-8")
    return path


def test_plan_text_mode_prints_a_bracketed_profile_path_as_written(tmp_path: Path) -> None:
    path = _profile(tmp_path)
    code, out = run_cli("plan", "--model", "gpt2", "--hardware", str(path))
    assert code == 0, out
    assert "[bold]MyGPU[/x]" in out and "[x]/[bold] profile.yaml" in out.replace("\n", "")


def test_detect_prints_bracketed_gpu_names_and_mount_points_as_written(tmp_path: Path) -> None:
    code, out = run_cli("detect", "--hardware", str(_profile(tmp_path)))
    assert code == 0, out
    assert "[bold]MyGPU[/x]" in out and "/mnt/[red]nvme" in out


def test_wizard_hardware_screen_gpu_table_shows_the_name_as_written(tmp_path: Path) -> None:
    console = Console(width=120, record=True)
    console.print(gpu_table(describe_profile(_profile(tmp_path))))
    assert "[bold]MyGPU[/x]" in console.export_text()
