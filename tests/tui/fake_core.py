"""The core the wizard's tests drive: the real ``wizard.tui.core_bridge``, with stand-ins only for what cannot
exist here or is not merged on this branch yet.

- "This machine" is a fixed report without a GPU (NVML cannot be made to exist here, and a test must not depend
  on the machine that runs it). Described hardware is the real ``wizard.hardware``.
- The planner and the config writers are the real ones as soon as they are importable; until they land, fixed
  stand-ins with the same shapes let the screens be walked (each stand-in class is dropped automatically then).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from wizard.findings import Finding, Severity
from wizard.hardware.report import HardwareReport
from wizard.strategy import Strategy
from wizard.tui import core_bridge
from wizard.tui.choices import Choices
from wizard.tui.core_bridge import CandidateView, MaxBatchLine, PlanView
from wizard.units import GiB


def _available(module: str, attr: str) -> bool:
    try:
        return hasattr(importlib.import_module(module), attr)
    except ImportError:
        return False


HAVE_PLANNER = _available("wizard.planner", "plan") and _available("wizard.model", "load_model_spec")
HAVE_CONFIG = _available("wizard.config.render", "render_all") and _available(
    "wizard.config.check", "lint_path"
)


class _Machine:
    def get_hardware(self, spec: str | None) -> HardwareReport:
        if spec is None:
            return HardwareReport(source="detected", no_gpu_reason="NVML: driver library not found")
        return core_bridge.get_hardware(spec)


class _PlannerStandIn:
    def model_presets(self) -> list[str]:
        return ["gpt2-medium", "llama-7b"]

    def load_model(self, text: str) -> Any:
        if text not in ("gpt2-medium", "llama-7b"):
            raise core_bridge.DswizError(f"unknown model {text!r}", "use a preset")
        return SimpleNamespace(name=text)

    def describe_model(self, model: Any) -> str:
        return f"{model.name}: stand-in spec"

    def _cand(self, choices: Choices, s: Strategy) -> CandidateView:
        hw = choices.hardware
        assert hw is not None
        gpu = (
            40 - 8 * s.zero_stage - (10 if s.offload_optimizer != "none" else 0)
        ) * GiB + s.micro_batch_size * GiB
        cpu = (100 * GiB) if s.offload_optimizer == "cpu" else 20 * GiB
        tps = 50000.0 / (1 + s.zero_stage) / (3 if s.offload_optimizer != "none" else 1)
        fits = gpu <= (hw.min_gpu_memory_bytes or 0)
        return CandidateView(s, fits, gpu, cpu, 0, tps, 0.4, (f"stand-in reason for stage {s.zero_stage}",))

    def plan(self, choices: Choices, model: Any) -> PlanView:
        hw = choices.hardware
        assert hw is not None
        base = Strategy(
            nodes=hw.nodes, gpus_per_node=hw.gpus_per_node, micro_batch_size=4, gradient_accumulation_steps=2
        )
        cands = [self._cand(choices, base.with_(zero_stage=st)) for st in (1, 2, 3)]
        cands.append(self._cand(choices, base.with_(zero_stage=2, offload_optimizer="cpu")))
        return PlanView(tuple(cands), ("stand-in advice.",))

    def evaluate(self, choices: Choices, model: Any, strategy: Strategy) -> CandidateView:
        return self._cand(choices, strategy)

    def max_batch_table(self, choices: Choices, model: Any) -> tuple[MaxBatchLine, ...]:
        hw = choices.hardware
        assert hw is not None
        base = Strategy(nodes=hw.nodes, gpus_per_node=hw.gpus_per_node)
        out = []
        for stage, opt in ((0, "none"), (1, "none"), (2, "none"), (2, "cpu"), (3, "none"), (3, "cpu")):
            for ckpt in (False, True):
                mbs = (2 + 4 * stage + (6 if opt != "none" else 0)) * (3 if ckpt else 1)
                tps = 40000.0 * (1 + stage / 4) / (2 if opt != "none" else 1) * (0.8 if ckpt else 1)
                s = base.with_(zero_stage=stage, offload_optimizer=opt, activation_checkpointing=ckpt)
                out.append(MaxBatchLine(s.with_(micro_batch_size=mbs), mbs, False, tps, True))
        return tuple(out)


class _ConfigStandIn:
    def render_files(self, choices: Choices) -> dict[str, str]:
        s = choices.strategy
        assert s is not None
        ds = {
            "train_batch_size": s.global_batch_size,
            "train_micro_batch_size_per_gpu": s.micro_batch_size,
            "gradient_accumulation_steps": s.gradient_accumulation_steps,
            "zero_optimization": {"stage": s.zero_stage},
            "gradient_clipping": choices.gradient_clipping,
        }
        files = {"ds_config.json": json.dumps(ds, indent=2, sort_keys=True) + "\n"}
        if s.nodes > 1:
            files["hostfile"] = choices.hostfile_text
        return files

    def lint_files(self, files: dict[str, str], world_size: int, **context: Any) -> list[Finding]:
        return [Finding(Severity.INFO, "stand-in", "stand-in finding", "because", "nothing to do")]

    def check_hostfile(self, text: str, *, nodes: int, gpus_per_node: int, launcher: str) -> list[Finding]:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if len(lines) != nodes:
            return [
                Finding(Severity.ERROR, "hostfile-count", f"{len(lines)} hosts for {nodes} nodes", "w", "f")
            ]
        return []

    def import_config(self, path: Path) -> Any:
        if not path.is_file():
            return core_bridge.import_config(path)  # the real "does not exist" error
        d = json.loads(path.read_text())
        return Strategy(
            zero_stage=d["zero_optimization"]["stage"], micro_batch_size=d["train_micro_batch_size_per_gpu"]
        )


_BASES: tuple[type, ...] = (_Machine,)
if not HAVE_PLANNER:
    _BASES += (_PlannerStandIn,)
if not HAVE_CONFIG:
    _BASES += (_ConfigStandIn,)


class FakeCore(*_BASES):  # type: ignore[misc]
    def __getattr__(self, name: str) -> Any:
        return getattr(core_bridge, name)


class StandInCore(_Machine, _PlannerStandIn, _ConfigStandIn):
    """Always the stand-ins: for the SVG snapshots, which test the screens' layout and must not change each time
    the planner's calibration or the config writers' output does (those have their own golden tests)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(core_bridge, name)
