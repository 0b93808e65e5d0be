"""A stand-in for the parts of the core not merged yet (planner, model, config renderers).

Only the missing calls are replaced; everything the core already provides (Strategy.problems, capacity, writing
with fsio) is the real thing. Fixed numbers, so screens can be walked and snapshotted deterministically.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from wizard.errors import DswizError
from wizard.findings import Finding, Severity
from wizard.hardware.report import GPUInfo, HardwareReport, HostInfo
from wizard.strategy import Strategy
from wizard.tui import core_bridge
from wizard.tui.choices import Choices
from wizard.tui.core_bridge import CandidateView, PlanView
from wizard.units import GiB


def described(
    n_gpus: int, nodes: int = 1, mem_gib: int = 80, name: str = "NVIDIA A100-SXM4-80GB"
) -> HardwareReport:
    gpus = tuple(
        GPUInfo(index=i, name=name, memory_total_bytes=mem_gib * GiB, compute_capability=(8, 0))
        for i in range(n_gpus)
    )
    host = HostInfo(
        hostname="node1",
        cpu_model="AMD EPYC 7763",
        physical_cores=64,
        ram_total_bytes=1024 * GiB,
        ram_available_bytes=1000 * GiB,
        shm_bytes=512 * GiB,
        libaio=False,
    )
    return HardwareReport(
        source="described",
        gpus=gpus,
        host=host,
        nodes=nodes,
        description=f"{nodes}x{n_gpus}x{name}" if nodes > 1 else f"{n_gpus}x{name}",
    )


class FakeCore:
    def __getattr__(self, name: str) -> Any:
        return getattr(core_bridge, name)

    def get_hardware(self, spec: str | None) -> HardwareReport:
        # Described hardware is the real thing; "this machine" is a fixed machine without a GPU (NVML cannot be
        # made to exist here, and the tests must not depend on the machine that runs them).
        if spec is None:
            return HardwareReport(source="detected", no_gpu_reason="NVML: driver library not found")
        return core_bridge.get_hardware(spec)

    def model_presets(self) -> list[str]:
        return ["gpt2-medium", "llama-7b"]

    def load_model(self, text: str) -> Any:
        if text not in ("gpt2-medium", "llama-7b"):
            raise DswizError(f"unknown model {text!r}", "use a preset")
        return SimpleNamespace(name=text)

    def describe_model(self, model: Any) -> str:
        return f"{model.name}: fake spec"

    def _cand(self, choices: Choices, s: Strategy) -> CandidateView:
        hw = choices.hardware
        assert hw is not None
        gpu = (
            40 - 8 * s.zero_stage - (10 if s.offload_optimizer != "none" else 0)
        ) * GiB + s.micro_batch_size * GiB
        cpu = (100 * GiB) if s.offload_optimizer == "cpu" else 20 * GiB
        tps = 50000.0 / (1 + s.zero_stage) / (3 if s.offload_optimizer != "none" else 1)
        fits = gpu <= (hw.min_gpu_memory_bytes or 0)
        return CandidateView(s, fits, gpu, cpu, None, tps, 0.4, (f"fake reason for stage {s.zero_stage}",))

    def plan(self, choices: Choices, model: Any) -> PlanView:
        hw = choices.hardware
        assert hw is not None
        base = Strategy(
            nodes=hw.nodes, gpus_per_node=hw.gpus_per_node, micro_batch_size=4, gradient_accumulation_steps=2
        )
        cands = [self._cand(choices, base.with_(zero_stage=st)) for st in (1, 2, 3)]
        cands.append(self._cand(choices, base.with_(zero_stage=2, offload_optimizer="cpu")))
        return PlanView(tuple(cands), ("fake advice.",))

    def evaluate(self, choices: Choices, model: Any, strategy: Strategy, plan: Any = None) -> CandidateView:
        return self._cand(choices, strategy)

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

    def lint_files(self, files: dict[str, str], world_size: int) -> list[Finding]:
        return [Finding(Severity.INFO, "fake", "fake finding", "because", "nothing to do")]

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


@dataclass
class _Unused:
    pass
