"""Startup phases named from the job's output, so a minute of op building is never a silent terminal."""

from __future__ import annotations

from runner.phases import PhaseTracker
from runner.verdict import JobObserver
from wizard.config.optimizer_op import builds_fused_adam, optimizer_op


def names(tracker: PhaseTracker) -> list[str]:
    return [p.name for p in tracker.history]


def test_a_gpu_start_with_a_fused_adam_build() -> None:
    t = PhaseTracker(0.0, optimizer_op="fused_adam")
    lines = [
        (
            1.0,
            "[2026-11-30 01:00:01,000] [INFO] [launch.py:245:main] process 11 spawned with command: ['python']",
        ),
        (
            9.0,
            "[2026-11-30 01:00:09,000] [INFO] [engine.py:2192:_configure_distributed_model] distributed groups summary",
        ),
        (
            9.5,
            "[2026-11-30 01:00:09,500] [INFO] [logging.py:123:log_dist] [Rank 0] Using DeepSpeed Optimizer param name adamw as basic optimizer",
        ),
        (31.0, "[1/3] /usr/local/cuda/bin/nvcc -DTORCH_EXTENSION_NAME=fused_adam -c multi_tensor_adam.cu"),
        (44.0, "Loading extension module fused_adam..."),
        (44.5, "Time to load fused_adam op: 35.02 seconds"),
        (
            45.0,
            "[2026-11-30 01:00:45,000] [INFO] [logging.py:123:log_dist] [Rank 0] Creating torch.bfloat16 ZeRO stage 2 optimizer",
        ),
    ]
    for now, line in lines:
        t.feed(line, now)
    assert names(t) == [
        "starting the launcher",
        "starting the ranks (importing torch and DeepSpeed, building the model)",
        "setting up the DeepSpeed engine",
        "building fused_adam (first run only; loads at once when cached)",
        "building fused_adam (first run only)",
        "loading fused_adam",
        "built fused_adam; setting up",
        "setting up ZeRO stage 2",
    ]
    assert (
        t.history[3].describe(21.5) == "building fused_adam (first run only; loads at once when cached)… 12 s"
    )
    assert not t.training
    assert t.feed("step=0, skipped=0, lr=[0.001]", 46.0, kind="step") is None  # engine start, not a step
    assert t.feed("step=10, skipped=0, lr=[0.001]", 50.0, kind="step") is not None and t.training
    # after the first step only builds and checkpoints are worth a phase
    assert t.feed("[Rank 0] Creating torch.bfloat16 ZeRO stage 2 optimizer", 51.0) is None
    assert t.feed("[Rank 0] Saving model checkpoint: out/global_step10/mp_rank_00_model_states.pt", 60.0)
    assert t.current.name == "saving a checkpoint"


def test_the_optimizer_deepspeed_builds_from_a_config() -> None:
    adamw = {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    assert optimizer_op(adamw, gpu=True) == "fused_adam"
    assert optimizer_op(adamw, gpu=False) is None
    offload = {**adamw, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    assert optimizer_op(offload, gpu=True) == "cpu_adam"
    assert optimizer_op({"optimizer": {"type": "Adam", "params": {"torch_adam": True}}}, gpu=True) is None
    assert optimizer_op({"optimizer": {"type": "Lamb"}}, gpu=True) == "fused_lamb"
    assert optimizer_op({}, gpu=True) is None
    assert optimizer_op(None, gpu=True) is None
    # stage 0 steps through FP16_Optimizer only with DeepSpeed's FusedAdam; any true torch_adam is torch's AdamW
    # the section builds FusedAdam where the optimizer stays on the GPU (offloaded: CPU Adam, but the same section)
    assert builds_fused_adam(adamw) and builds_fused_adam(offload) and not builds_fused_adam({})
    assert not builds_fused_adam({"optimizer": {"type": "AdamW", "params": {"torch_adam": 1}}})
    assert not builds_fused_adam({"optimizer": {"type": "Lamb"}}) and not builds_fused_adam(
        {"optimizer": "AdamW"}
    )


def test_status_line_before_and_during_training() -> None:
    obs = JobObserver(started=100.0)
    obs.feed(
        "[2026-11-30 01:00:01,000] [INFO] [launch.py:245:main] process 11 spawned with command: ['python']",
        101.0,
    )
    assert obs.status(113.4).line() == (
        "starting the ranks (importing torch and DeepSpeed, building the model)… 12 s (0:13 elapsed)"
    )
    obs.feed(
        "[2026-11-30 01:00:30,000] [INFO] [timer.py:264:stop] epoch=0/micro_step=20/global_step=20, "
        "RunningAvgSamplesPerSec=150.5, CurrSamplesPerSec=166.25, MemAllocated=0.4GB, MaxMemAllocated=0.4GB",
        130.0,
    )
    obs.feed("{'loss': 4.1234, 'learning_rate': 0.001, 'epoch': 0.5, 'step': 20}", 130.1)
    assert obs.status(3600.0 + 100.0).line() == "step 20 · 166.2 samples/s · loss 4.123 · 1:00:00 elapsed"
