"""The planner's data: what is asked (``PlanRequest``), what each strategy is predicted to need (``Prediction``,
``Candidate``, ``MaxBatchRow``), the ranked answer (``Plan``), what each memory tier holds (``Capacities``), and the
numbers the reasons and advice are worded from (``GenerationCost``, ``WhatIfs``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from wizard.hardware.report import HardwareReport
from wizard.history.calibrate import Corrections
from wizard.model import ModelSpec
from wizard.planner import calibration as cal
from wizard.planner.buffers import DEFAULT_BUFFERS, ZeroBuffers
from wizard.strategy import Mode, OffloadDevice, Precision, Strategy, strategy_label

DEFAULT_SEQ_LEN = 2048


ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class PlanRequest:
    """What the user wants planned. Every field has a sensible default."""

    seq_len: int | None = None  # None: the model's context, at most DEFAULT_SEQ_LEN
    global_batch: int | None = (
        None  # a target train_batch_size; None: the largest micro-batch, no accumulation
    )
    mode: Mode = "train"
    precisions: tuple[Precision, ...] = ()  # empty: the best the GPUs support (bf16, else fp16, else fp32)
    stages: tuple[int, ...] = ZERO_STAGES
    allow_offload: bool = True  # CPU offload of optimizer / parameters
    allow_nvme: bool = True  # NVMe offload, where an NVMe disk and libaio exist
    allow_activation_checkpointing: bool = True
    allow_zeropp: bool = True  # ZeRO++ (hpZ + quantized weights/gradients) on multi-node stage 3
    safety_margin: float = cal.DEFAULT_SAFETY_MARGIN  # share of each GPU's memory left free
    max_micro_batch: int = 1024
    gpu_memory_bytes: int | None = None  # plan for this much per GPU instead of the card's total
    nvme_bytes: int | None = None  # a described NVMe size (overrides the detected disks)
    buffers: ZeroBuffers = DEFAULT_BUFFERS
    # The job runs PyTorch's allocator with expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True):
    # under memory pressure it keeps almost no cache, so a card fits more (memory.fragmentation).
    expandable_segments: bool = False
    # What this hardware's run history corrects (``dswiz history``); None: the physics alone (--no-history).
    calibration: Corrections | None = None

    def resolved_seq_len(self, model: ModelSpec) -> int:
        if self.seq_len is not None:
            return self.seq_len
        return min(model.max_positions or DEFAULT_SEQ_LEN, DEFAULT_SEQ_LEN)

    @property
    def some_stages_only(self) -> bool:
        """Training asked for some ZeRO stages only (inference plans stage 3 whatever it asks)."""
        return self.mode == "train" and set(self.stages) < set(ZERO_STAGES)


@dataclass(frozen=True)
class StrategyChoice:
    """The parts of a strategy a user fixed (``dswiz plan --stage 2 --offload-optimizer cpu --micro-batch 4``, or an
    existing config); None leaves that part to the planner."""

    zero_stage: int | None = None
    offload_optimizer: OffloadDevice | None = None
    offload_param: OffloadDevice | None = None
    activation_checkpointing: bool | None = None
    micro_batch_size: int | None = None
    gradient_accumulation_steps: int | None = None

    def matches(self, s: Strategy) -> bool:
        """Whether ``s`` agrees with every fixed part except the batch numbers."""
        fixed = (
            (self.zero_stage, s.zero_stage),
            (self.offload_optimizer, s.offload_optimizer),
            (self.offload_param, s.offload_param),
            (self.activation_checkpointing, s.activation_checkpointing),
        )
        return all(want is None or want == got for want, got in fixed)

    @property
    def fixes_batch(self) -> bool:
        return self.micro_batch_size is not None or self.gradient_accumulation_steps is not None


@dataclass(frozen=True)
class Prediction:
    gpu_bytes: int  # per GPU, device level (reserved + CUDA context + NCCL), as a card with room shows it
    # What the card must hold (what fits are judged on): the allocator gives back the cache it can when a request
    # fails, so this can be below gpu_bytes (memory.MemoryEstimate.needed).
    gpu_needed_bytes: int
    cpu_bytes: int  # host RAM per node
    nvme_bytes: int  # per node
    tokens_per_sec: float  # whole job
    mfu: float
    step_seconds: float = 0.0
    gpu_allocated_bytes: int = 0  # torch.cuda.max_memory_allocated
    gpu_reserved_bytes: int = 0  # torch.cuda.max_memory_reserved
    peak_phase: str = ""
    breakdown: tuple[tuple[str, int], ...] = ()  # GPU bytes by part at the peak
    cpu_breakdown: tuple[tuple[str, int], ...] = ()
    time_parts: tuple[tuple[str, float], ...] = ()  # seconds per step by cause
    # The run history's factors already in tokens_per_sec and gpu_bytes (measured / physics); a new run's record
    # divides them out, so the history always compares the physics with the truth and corrections never compound.
    tokens_factor: float = 1.0
    memory_factor: float = 1.0
    # The step waits on the host for calibration.HOST_BOUND_SHARE of it or more (throughput.host_bound)
    host_bound: bool = False


@dataclass(frozen=True)
class Candidate:
    strategy: Strategy
    fits: bool
    predicted: Prediction
    reasons: tuple[str, ...]
    headroom_bytes: int  # GPU capacity minus predicted device bytes (negative: short by that much)
    max_micro_batch: int  # the largest micro-batch of this strategy that fits (0: not even 1)
    limits: tuple[str, ...] = ()  # what does not fit: "gpu", "cpu", "nvme"
    deepspeed_estimate: tuple[int, int] | None = None  # (cpu, gpu) bytes from DeepSpeed's own estimator

    @property
    def label(self) -> str:
        return strategy_label(self.strategy)


@dataclass(frozen=True)
class Plan:
    hardware: HardwareReport
    model: ModelSpec
    request: PlanRequest
    seq_len: int
    candidates: tuple[Candidate, ...]  # best first
    gpu_capacity_bytes: int | None
    cpu_capacity_bytes: int | None
    nvme_capacity_bytes: int | None
    advice: tuple[str, ...] = ()  # what would make it fit, when nothing does
    notes: tuple[str, ...] = field(default=())  # what was not offered and why

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates and self.candidates[0].fits else None


@dataclass(frozen=True)
class MaxBatchRow:
    """One line of the max-batch table: a strategy at the largest micro-batch that fits (accumulation 1)."""

    strategy: Strategy  # micro_batch_size = max_micro_batch (1 when not even that fits)
    max_micro_batch: int  # 0: not even 1 fits the GPU
    capped: bool  # reached the request's max_micro_batch: more would fit
    tokens_per_sec: float | None  # predicted at max_micro_batch; None when it is 0
    gpu_bytes: int  # predicted device bytes per GPU at that micro-batch
    fits: bool  # max_micro_batch >= 1 and host RAM / NVMe suffice
    limits: tuple[str, ...]  # what does not fit: "gpu", "cpu", "nvme"

    @property
    def label(self) -> str:
        return strategy_label(self.strategy)


@dataclass(frozen=True)
class Capacities:
    """What each memory tier holds, as the planner judges "fits" against it (None: unknown)."""

    gpu: int | None  # per GPU: the request's cap, else the smallest card
    cpu: int | None  # host RAM per node: available RAM on a detected machine, else the total
    nvme: int | None  # usable NVMe per node: the described size, else the largest free NVMe disk
    gpu_margin: float  # the share of each GPU kept free (the request's safety margin)
    notes: tuple[str, ...] = ()

    @property
    def gpu_budget(self) -> int | None:
        """What a plan may use of each GPU: the capacity less the share kept free."""
        return budget(self.gpu, self.gpu_margin)

    @property
    def cpu_budget(self) -> int | None:
        return budget(self.cpu, cal.HOST_SAFETY_MARGIN)


def budget(capacity: int | None, margin: float) -> int | None:
    """What a memory tier may hold: its capacity less the share kept free (None: capacity unknown)."""
    return None if capacity is None else int(capacity * (1 - margin))


@dataclass(frozen=True)
class PlanContext:
    """One planning question with its capacities resolved: what search, reasons and advice all read."""

    hardware: HardwareReport
    model: ModelSpec
    request: PlanRequest
    seq_len: int
    gpu_cap: int | None
    cpu_cap: int | None
    nvme_cap: int | None

    @property
    def gpu_budget(self) -> int:
        return budget(self.gpu_cap, self.request.safety_margin) or 0

    @property
    def cpu_budget(self) -> int | None:
        return budget(self.cpu_cap, cal.HOST_SAFETY_MARGIN)


@dataclass(frozen=True)
class GenerationCost:
    """What generating text would add to an inference prediction, which counts one scoring forward."""

    kv_cache_bytes_per_sample: int  # the KV cache of one sample at the planned sequence length
    seconds_per_new_token: float  # one decoding forward of the micro-batch


@dataclass(frozen=True)
class WhatIfs:
    """What would make a plan fit when nothing does: the search asked again with one thing changed, and the
    candidates closest to fitting. None: that change does not help (or was not tried)."""

    more_gpus: tuple[HardwareReport, Candidate] | None = (
        None  # the first node count doubled that fits, its best
    )
    larger_gpu: tuple[float, Candidate] | None = (
        None  # bytes per card that fit the most frugal GPU-short candidate
    )
    more_host_ram: tuple[float, Candidate] | None = (
        None  # host RAM per node that fits the most frugal RAM-short one
    )
    with_nvme: Candidate | None = None  # the best candidate that fits once an NVMe disk holds its offload
    shorter_seq: tuple[int, Candidate] | None = None  # the longest halved sequence length that fits, its best
    # asked for some ZeRO stages only: the best of every stage, where it fits
    other_stages: Candidate | None = None
