"""The DeepSpeed settings dswiz manages, as one typed model, and the set of files it writes around them.

``DeepSpeedSettings`` mirrors the keys of a DeepSpeed JSON that dswiz decides (batch, precision, clipping, ZeRO and
its offloads, ZeRO++, activation checkpointing, optimizer/scheduler, observability). Every managed key is optional:
``None`` means "not in the file", so an imported config is written back without keys it never had. Whatever dswiz
does not manage -- unknown top-level sections, or keys DeepSpeed knows that dswiz does not model -- sits in the
``unmanaged`` dict of its section, in the file's order, and is written back unchanged.

Types are strict where a wrong type is a real bug (the string "8" is not a batch size, ``true`` is not a stage),
and accept what DeepSpeed accepts otherwise (``5e8`` for a bucket size). ``"auto"`` is accepted only on the keys an
HF Trainer or accelerate can fill (``wizard.config.lint.auto`` lists them from the sources); whether the chosen consumer fills it is the linter's job.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictStr

from wizard.config.launchers import DEFAULT_LAUNCHER, MultinodeLauncher

Consumer = Literal["deepspeed", "accelerate", "trainer"]
CONSUMERS: tuple[Consumer, ...] = ("deepspeed", "accelerate", "trainer")
AccelerateMode = Literal["config_file", "plugin"]
OffloadDeviceName = Literal["none", "cpu", "nvme"]
LogLevel = Literal["debug", "info", "warning", "error", "critical"]

AUTO: Final = "auto"
Auto = Literal["auto"]

# The files of a config directory (what `dswiz config` writes and `dswiz launch --config DIR` reads).
DS_CONFIG_NAME = "ds_config.json"
ACCELERATE_YAML_NAME = "accelerate.yaml"
HOSTFILE_NAME = "hostfile"
DEEPSPEED_ENV_NAME = ".deepspeed_env"
LAUNCH_SH_NAME = "launch.sh"
SBATCH_NAME = "job.sbatch"


def _number(value: Any) -> Any:
    # JSON has one number type: 5e8 parses as a float, and DeepSpeed accepts it where it wants an int.
    # A string ("8") or a boolean is never a number here: DeepSpeed compares it as read (get_scalar_param) and fails.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be a number, not {type(value).__name__} {value!r}")
    return value


def _whole(value: Any) -> Any:
    value = _number(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"must be a whole number, not {value!r}")
        return int(value)
    return value


def _positive(value: int) -> int:
    if value < 1:
        raise ValueError(f"must be at least 1, not {value}")
    return value


def _non_negative(value: float) -> float:
    if value < 0:
        raise ValueError(f"must not be negative, not {value}")
    return value


Count = Annotated[int, BeforeValidator(_whole), AfterValidator(_non_negative)]
PositiveInt = Annotated[int, BeforeValidator(_whole), AfterValidator(_positive)]
# int | float keeps what was written (0 stays 0, 1.0 stays 1.0): a round trip changes no text.
NonNegNumber = Annotated[int | float, BeforeValidator(_number), AfterValidator(_non_negative)]
Stage = Annotated[Literal[0, 1, 2, 3], BeforeValidator(_whole)]


class _Section(BaseModel):
    """A JSON object of the config: managed keys as fields, everything else kept verbatim in ``unmanaged``."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    unmanaged: dict[str, Any] = Field(default_factory=dict)


class OffloadOptimizer(_Section):
    device: OffloadDeviceName | None = None  # DeepSpeed's default is "none"
    nvme_path: StrictStr | None = None
    pin_memory: StrictBool | None = None
    buffer_count: Count | None = None


class OffloadParam(_Section):
    device: OffloadDeviceName | None = None
    nvme_path: StrictStr | None = None
    pin_memory: StrictBool | None = None
    buffer_count: Count | None = None
    buffer_size: Count | None = None
    max_in_cpu: Count | None = None


class LeafModule(_Section):
    """ZeRO-3 leaf modules (DeepSpeed >= 0.18.0, zero/leaf_module_config.py): modules fetched whole, without hooks on
    their children -- what a mixture-of-experts block needs, since the experts a token uses change every forward.
    Matched by class name (with or without its module path), module name, or name suffix."""

    classes: list[StrictStr] | None = None
    names: list[StrictStr] | None = None
    name_suffixes: list[StrictStr] | None = None


class ZeroOptimization(_Section):
    stage: Stage | None = None  # DeepSpeed's default is 0
    overlap_comm: StrictBool | None = None
    contiguous_gradients: StrictBool | None = None
    reduce_scatter: StrictBool | None = None
    use_multi_rank_bucket_allreduce: StrictBool | None = None  # DeepSpeed's default is on
    allgather_partitions: StrictBool | None = None
    reduce_bucket_size: PositiveInt | Auto | None = None  # DeepSpeed: gt=0 (the others: ge=0)
    allgather_bucket_size: Count | None = None
    round_robin_gradients: StrictBool | None = None
    offload_optimizer: OffloadOptimizer | None = None
    offload_param: OffloadParam | None = None
    sub_group_size: Count | None = None
    stage3_prefetch_bucket_size: Count | Auto | None = None
    stage3_param_persistence_threshold: Count | Auto | None = None
    stage3_max_live_parameters: Count | None = None
    stage3_max_reuse_distance: Count | None = None
    stage3_gather_16bit_weights_on_model_save: StrictBool | Auto | None = None
    zero_quantized_weights: StrictBool | None = None
    zero_quantized_gradients: StrictBool | None = None
    zero_hpz_partition_size: PositiveInt | None = None
    leaf_module: LeafModule | None = None


class FP16(_Section):
    """fp16 mixed precision with loss scaling; loss_scale 0 means dynamic scaling starting at 2**initial_scale_power."""

    enabled: StrictBool | Auto | None = None  # DeepSpeed's default is off
    loss_scale: NonNegNumber | None = None
    initial_scale_power: Count | None = None
    loss_scale_window: PositiveInt | None = None
    hysteresis: PositiveInt | None = None
    min_loss_scale: PositiveInt | None = None


class BF16(_Section):
    enabled: StrictBool | Auto | None = None


class ActivationCheckpointing(_Section):
    """DeepSpeed's activation-checkpointing section. It configures ``deepspeed.checkpointing`` only: it does not
    turn checkpointing on in a model (HF: ``model.gradient_checkpointing_enable()``)."""

    partition_activations: StrictBool | None = None
    cpu_checkpointing: StrictBool | None = None
    contiguous_memory_optimization: StrictBool | None = None
    number_checkpoints: PositiveInt | None = None
    synchronize_checkpoint_boundary: StrictBool | None = None
    profile: StrictBool | None = None


class Optimizer(_Section):
    """DeepSpeed builds this optimizer (then the script passes none, or accelerate's DummyOptim)."""

    type: StrictStr | None = None  # without a type DeepSpeed builds no optimizer
    params: dict[str, Any] | None = None


class Scheduler(_Section):
    type: StrictStr | None = None
    params: dict[str, Any] | None = None


class CsvMonitor(_Section):
    enabled: StrictBool | None = None
    output_path: StrictStr | None = None
    job_name: StrictStr | None = None


class DeepSpeedSettings(_Section):
    """One DeepSpeed JSON config. Field order is the order keys are written in."""

    train_batch_size: PositiveInt | Auto | None = None
    train_micro_batch_size_per_gpu: PositiveInt | Auto | None = None
    gradient_accumulation_steps: PositiveInt | Auto | None = None
    gradient_clipping: NonNegNumber | Auto | None = None
    bf16: BF16 | None = None
    fp16: FP16 | None = None
    zero_optimization: ZeroOptimization | None = None
    activation_checkpointing: ActivationCheckpointing | None = None
    optimizer: Optimizer | None = None
    scheduler: Scheduler | None = None
    zero_force_ds_cpu_optimizer: StrictBool | None = None
    zero_allow_untested_optimizer: StrictBool | None = None
    steps_per_print: PositiveInt | None = None
    log_level: LogLevel | None = None
    wall_clock_breakdown: StrictBool | None = None
    csv_monitor: CsvMonitor | None = None

    @property
    def stage(self) -> int:
        zero = self.zero_optimization
        return zero.stage if zero is not None and zero.stage is not None else 0

    @property
    def precision(self) -> Literal["bf16", "fp16", "fp32", "auto"]:
        if self.bf16 is not None and self.bf16.enabled is True:
            return "bf16"
        if self.fp16 is not None and self.fp16.enabled is True:
            return "fp16"
        if any(s is not None and s.enabled == AUTO for s in (self.bf16, self.fp16)):
            return "auto"
        return "fp32"


class SlurmJob(BaseModel):
    """What ``job.sbatch`` asks Slurm for beyond the topology (wizard/config/sbatch.py writes it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    wanted: bool = False  # write job.sbatch for one node too (a multi-node plan always gets one)
    time: str | None = None  # --time, Slurm's format (minutes, H:MM:SS, D-HH...)
    partition: str | None = None
    cpus_per_task: PositiveInt | None = None  # None: cpus_per_rank for each rank the task starts
    # the default --cpus-per-task's CPUs per rank: 1, or where the optimizer steps on the host each rank's share of the
    # node's cores (config_set_from_strategy sets it)
    cpus_per_rank: PositiveInt = 1
    # the whole node (--exclusive): the ranks work on the host and how many cores it has is not known
    exclusive: bool = False
    gpus: bool = True  # --gpus-per-node (False: CPU ranks, a cluster without GPU GRES)
    config_dir: str = (
        "."  # where the batch job finds these files (absolute: sbatch runs a copy of the script)
    )


class Topology(BaseModel):
    """Where the job runs: nodes x GPUs per node, and the hosts of a multi-node job."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: PositiveInt = 1
    gpus_per_node: PositiveInt = 1
    hosts: tuple[str, ...] = ()  # one per node, in node-rank order; empty for one node
    master_addr: str | None = None  # multi-node: the address of the first host (None: the launcher asks ssh)
    master_port: int = 29500
    # How a multi-node job is started (wizard/config/launchers.py); ignored for one node.
    launcher: MultinodeLauncher = DEFAULT_LAUNCHER
    slurm: SlurmJob = Field(default_factory=SlurmJob)

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1


class ConfigSet(BaseModel):
    """Everything ``dswiz config`` writes: the DeepSpeed JSON plus what the consumer and the launcher need."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    deepspeed: DeepSpeedSettings
    consumer: Consumer = "deepspeed"
    topology: Topology = Field(default_factory=Topology)
    # deepspeed.zero.Init (build a stage-3 model already partitioned): accelerate's zero3_init_flag (None: not
    # written, accelerate then uses it at stage 3); the HF Trainer does it by itself at stage 3; plain DeepSpeed
    # scripts must open the context themselves.
    zero3_init: bool | None = None
    accelerate_mode: AccelerateMode = "config_file"
    # accelerate YAML keys written verbatim: the top level (except deepspeed_config, and mixed_precision in plugin
    # mode, which come from ``deepspeed``) and inside deepspeed_config (except the file path / plugin fields and
    # zero3_init_flag). Fresh configs get dswiz's defaults; imported ones keep the file's keys and order.
    accelerate_fields: dict[str, Any] = Field(default_factory=dict)
    accelerate_ds_fields: dict[str, Any] = Field(default_factory=dict)
    # Variables that must reach every node of a multi-node job (.deepspeed_env); NCCL*, PYTHON*, UCX*, MV2* and
    # MLFLOW* variables are forwarded by the launcher itself.
    node_env: dict[str, str] = Field(default_factory=dict)
    # What the script must do for these settings to take effect, in words (shown in launch.sh and by the CLI).
    script_notes: tuple[str, ...] = ()
    # False: launch.sh leaves DeepSpeed's --local_rank=N off the script's command line (--no_local_rank)
    local_rank_arg: bool = True
