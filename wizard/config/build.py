"""From a decision (``wizard.strategy.Strategy``) to the settings dswiz writes, for one consumer.

What the plan decides (stage, offloads, precision, micro-batch, accumulation, ZeRO++) is written as numbers for
every consumer, so a Trainer or accelerate run that disagrees fails loudly ("mismatch") instead of silently
training with another batch. What the consumer owns (the Trainer's learning rate, accelerate's DummyOptim
values) is "auto" exactly where that consumer fills it (``wizard.config.lint.auto``); plain DeepSpeed fills nothing, so it
gets numbers everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from wizard.alloc_conf import with_expandable_segments
from wizard.config.hostfile import placeholder_hosts
from wizard.config.launchers import DEFAULT_LAUNCHER, MultinodeLauncher, launcher_problems, parse_version
from wizard.config.optimizer_op import builds_fused_adam
from wizard.config.schema import (
    AUTO,
    BF16,
    DS_CONFIG_NAME,
    FP16,
    HOSTFILE_NAME,
    AccelerateMode,
    ActivationCheckpointing,
    ConfigSet,
    Consumer,
    CsvMonitor,
    DeepSpeedSettings,
    LeafModule,
    LogLevel,
    OffloadOptimizer,
    OffloadParam,
    Optimizer,
    Scheduler,
    SlurmJob,
    Topology,
    ZeroOptimization,
)
from wizard.errors import DswizError
from wizard.hardware.report import cores_per_rank
from wizard.hints import finetune_script_notes
from wizard.strategy import Strategy
from wizard.tuning import FULL, FineTune

# DeepSpeed reads "log_level" from the config since 0.19.3 (0.19.8: deepspeed/runtime/config.py get_log_level;
# docs/deepspeed-rules.md); older versions ignore the key.
LOG_LEVEL_MIN_DEEPSPEED = (0, 19, 3)
# zero_optimization.leaf_module exists since DeepSpeed 0.18.0 (PR #7604); older versions reject the unknown key.
LEAF_MODULE_MIN_DEEPSPEED = (0, 18, 0)
# runner/rundir.py: the csv monitor's job name the monitor looks for.
CSV_JOB_NAME = "dswiz"


@dataclass(frozen=True)
class WriteOptions:
    """Choices beyond the strategy. Defaults are what ``dswiz config --yes`` writes."""

    consumer: Consumer = "deepspeed"
    nvme_path: str | None = None  # required when anything is offloaded to NVMe
    hosts: tuple[str, ...] = ()  # multi-node: one host per node (placeholders worker-0.. when empty)
    master_addr: str | None = None
    master_port: int = 29500
    launcher: MultinodeLauncher = DEFAULT_LAUNCHER  # how a multi-node job is started (config/launchers.py)
    # "deepspeed": DeepSpeed builds the optimizer (needed for fast CPU offload: DeepSpeedCPUAdam); "script": the
    # training script brings its own; "auto": DeepSpeed's when the optimizer is offloaded, else the script's.
    optimizer: Literal["auto", "deepspeed", "script"] = "auto"
    lr: float = 1e-4
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    torch_adam: bool = False  # torch's AdamW instead of DeepSpeed's fused/CPU Adam (no JIT build)
    # False: launch.sh passes DeepSpeed's --no_local_rank (LaunchSpec.local_rank_arg)
    local_rank_arg: bool = True
    scheduler: Literal["none", "deepspeed"] = "none"  # "deepspeed": WarmupLR
    warmup_steps: int = 100
    gradient_clipping: float = 1.0
    steps_per_print: int = 10
    log_level: LogLevel = "info"
    deepspeed_version: str | None = None  # the target's DeepSpeed; None: assume current (>= 0.19.3)
    wall_clock_breakdown: bool = False
    csv_monitor: bool = True
    csv_output_path: str = "csv"
    pin_memory: bool = True
    save_16bit_model: bool = True  # stage 3 training: gather the weights on save_16bit_model()
    # Mixture-of-experts blocks ZeRO-3 must fetch whole (ModelSpec.moe_layer_cls_name, e.g. MixtralSparseMoeBlock).
    moe_leaf_modules: tuple[str, ...] = ()
    finetune: FineTune = FULL  # LoRA / QLoRA: the script change (wizard.hints.finetune_script_notes)
    zero3_init: bool | None = None  # None: at stage 3 for accelerate (the Trainer does it by itself)
    accelerate_mode: AccelerateMode = "config_file"
    # Where the files will live: the accelerate YAML names the JSON and the hostfile by this path, because
    # accelerate opens them relative to where it is launched (`dswiz config` passes the absolute --out).
    config_dir: str = "."
    node_env: dict[str, str] = field(default_factory=dict)
    # The plan counted on PyTorch's allocator with expandable segments: the job's environment turns them on
    # (launch.sh exports it, .deepspeed_env carries it to the other nodes).
    expandable_segments: bool = False
    slurm: SlurmJob = field(default_factory=SlurmJob)  # job.sbatch (wizard/config/sbatch.py)
    # the node's cores (HostInfo.cores; None: unknown) and Slurm CPUs a core (HostInfo.threads_per_core): job.sbatch
    # asks for each rank's share of them where the optimizer steps on the host
    host_cores: int | None = None
    threads_per_core: int = 1


def supports_log_level(deepspeed_version: str | None) -> bool:
    return _at_least(deepspeed_version, LOG_LEVEL_MIN_DEEPSPEED)


def supports_leaf_module(deepspeed_version: str | None) -> bool:
    return _at_least(deepspeed_version, LEAF_MODULE_MIN_DEEPSPEED)


def _at_least(deepspeed_version: str | None, minimum: tuple[int, int, int]) -> bool:
    """Whether the target DeepSpeed is at least ``minimum`` (unknown: assume a current one)."""
    if deepspeed_version is None:
        return True
    return (parse_version(deepspeed_version) or (0, 0, 0)) >= minimum


def settings_from_strategy(strategy: Strategy, options: WriteOptions | None = None) -> DeepSpeedSettings:
    """The DeepSpeed JSON for ``strategy``, shaped for ``options.consumer``."""
    options = options or WriteOptions()
    problems = strategy.problems()
    if problems:
        raise DswizError(
            "this strategy is not valid: " + "; ".join(problems),
            "change the stage / offload / batch choices (dswiz plan lists valid ones)",
        )
    if "nvme" in (strategy.offload_optimizer, strategy.offload_param) and not options.nvme_path:
        raise DswizError(
            "NVMe offload needs a directory on a local NVMe drive (DeepSpeed: nvme_path cannot be None)",
            "pass --nvme-path /local_nvme/dswiz (a writable directory on a local NVMe filesystem)",
        )
    consumer = options.consumer
    training = strategy.mode == "train"
    optimizer_by_deepspeed = training and deepspeed_builds_optimizer(
        options.optimizer, offloaded=strategy.offload_optimizer != "none"
    )
    clipping: float | Literal["auto"] = AUTO if consumer == "trainer" else options.gradient_clipping
    return DeepSpeedSettings(
        # accelerate computes train_batch_size with its own process count, which is wrong on CPU (docs/cpu-testing.md):
        # leave it out there and DeepSpeed derives it from micro x accumulation x its world size. Inference needs
        # only the micro-batch (DeepSpeed asserts one of the two batch keys; accumulation defaults to 1).
        train_batch_size=strategy.global_batch_size if consumer != "accelerate" and training else None,
        train_micro_batch_size_per_gpu=strategy.micro_batch_size,
        gradient_accumulation_steps=strategy.gradient_accumulation_steps if training else None,
        gradient_clipping=clipping if training else None,
        bf16=BF16(enabled=True) if strategy.precision == "bf16" else None,
        fp16=_fp16() if strategy.precision == "fp16" else None,
        zero_optimization=_zero(strategy, options),
        activation_checkpointing=_activation_checkpointing() if strategy.activation_checkpointing else None,
        optimizer=_optimizer(options, offloaded=strategy.offload_optimizer != "none")
        if optimizer_by_deepspeed
        else None,
        scheduler=_scheduler(options) if training and options.scheduler == "deepspeed" else None,
        steps_per_print=options.steps_per_print,
        log_level=options.log_level if supports_log_level(options.deepspeed_version) else None,
        wall_clock_breakdown=options.wall_clock_breakdown,
        csv_monitor=(
            CsvMonitor(enabled=True, output_path=options.csv_output_path, job_name=CSV_JOB_NAME)
            if options.csv_monitor
            else None
        ),
    )


def config_set_from_strategy(strategy: Strategy, options: WriteOptions | None = None) -> ConfigSet:
    """Everything ``dswiz config`` writes for ``strategy``: settings, topology, consumer-side choices."""
    options = options or WriteOptions()
    settings = settings_from_strategy(strategy, options)
    hosts = options.hosts
    # The words name no flag or screen: `dswiz config`, the wizard and the line prompts all end up here.
    if strategy.nodes > 1:
        if hosts and len(hosts) != strategy.nodes:
            raise DswizError(
                f"{strategy.nodes} nodes planned but {len(hosts)} host names given",
                f"name exactly {strategy.nodes} hosts, one per node, node 0 first"
                f" (or plan for {len(hosts)} node{'s' if len(hosts) != 1 else ''})",
            )
        if len(set(hosts)) != len(hosts):
            twice = sorted({h for h in hosts if hosts.count(h) > 1})
            raise DswizError(
                f"the same host is named twice: {', '.join(twice)}",
                "name each node once (DeepSpeed refuses duplicate hostfile entries)",
            )
        hosts = hosts or placeholder_hosts(strategy.nodes)
    elif hosts and len(hosts) > 1:
        raise DswizError(
            f"{len(hosts)} hosts given for a one-node plan",
            f"plan for {len(hosts)} nodes, or name one host",
        )
    # The DeepSpeed version matters only where the launcher is used: on more than one node.
    version = options.deepspeed_version if strategy.nodes > 1 else None
    problems = launcher_problems(options.launcher, deepspeed_version=version)
    if problems:
        raise DswizError(problems[0], "choose another multi-node launcher (pdsh is the default)")
    stage3 = strategy.zero_stage == 3
    zero3_init = (
        options.zero3_init if options.zero3_init is not None else stage3 and options.consumer == "accelerate"
    )
    node_env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", **options.node_env} if strategy.nodes > 1 else {}
    if options.expandable_segments:
        node_env.update(with_expandable_segments({}))
    topology = Topology(
        nodes=strategy.nodes,
        gpus_per_node=strategy.gpus_per_node,
        hosts=hosts if strategy.nodes > 1 else (),
        master_addr=options.master_addr or (hosts[0] if strategy.nodes > 1 else None),
        master_port=options.master_port,
        launcher=options.launcher,
        slurm=options.slurm.model_copy(
            update={"config_dir": options.config_dir, **host_cpus(strategy, options)}
        ),
    )
    return ConfigSet(
        deepspeed=settings,
        consumer=options.consumer,
        topology=topology,
        zero3_init=zero3_init and stage3,
        accelerate_mode=options.accelerate_mode,
        accelerate_fields=accelerate_fields_for(topology),
        accelerate_ds_fields=accelerate_ds_fields_for(topology, options, stage3=stage3),
        node_env=node_env,
        script_notes=_script_notes(strategy, settings, options),
        local_rank_arg=options.local_rank_arg,
    )


def host_cpus(strategy: Strategy, options: WriteOptions) -> dict[str, Any]:
    """The CPUs job.sbatch asks for (SlurmJob fields): where the optimizer steps on the host (CPU Adam), each rank's
    share of the node's cores in Slurm CPUs (a core's hyperthreads each count) -- or, the node's cores unknown, the
    whole node; else one a rank."""
    if not strategy.steps_on_host:
        return {}
    if options.host_cores is None:
        return {"exclusive": options.slurm.cpus_per_task is None}
    cores = int(cores_per_rank(options.host_cores, strategy.gpus_per_node))
    return {"cpus_per_rank": cores * max(1, options.threads_per_core)}


def accelerate_fields_for(topology: Topology) -> dict[str, Any]:
    """accelerate's top-level YAML fields for a DeepSpeed job on ``topology`` (what `accelerate config` asks)."""
    fields: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": "DEEPSPEED",
        "downcast_bf16": "no",
        "enable_cpu_affinity": False,
        "machine_rank": 0,
        "main_process_port": topology.master_port,
        "main_training_function": "main",
        "num_machines": topology.nodes,
        "num_processes": topology.world_size,  # all processes of all machines
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
    }
    if topology.multi_node and topology.master_addr:
        fields["main_process_ip"] = topology.master_addr
    return dict(sorted(fields.items()))


def accelerate_ds_fields_for(
    topology: Topology, options: WriteOptions, *, stage3: bool = False
) -> dict[str, Any]:
    """deepspeed_config fields beyond the DeepSpeed settings: where the JSON and the hostfile are, and the MoE
    blocks ZeRO-3 must treat as leaves when the JSON cannot say it (plugin mode, or a DeepSpeed before 0.18)."""
    fields: dict[str, Any] = {}
    if stage3 and options.moe_leaf_modules and not leaf_modules_in_json(options):
        fields["deepspeed_moe_layer_cls_names"] = ",".join(options.moe_leaf_modules)
    if options.accelerate_mode == "config_file":
        fields["deepspeed_config_file"] = f"{options.config_dir}/{DS_CONFIG_NAME}"
    if topology.multi_node:
        fields["deepspeed_hostfile"] = f"{options.config_dir}/{HOSTFILE_NAME}"
        # accelerate hands every value but "standard" (torchrun on each node) to DeepSpeed's runner as
        # --launcher NAME / --no_ssh, so DeepSpeed's own names (impi too) work as they are.
        fields["deepspeed_multinode_launcher"] = topology.launcher
    return fields


def _fp16() -> FP16:
    # Dynamic loss scaling with DeepSpeed's defaults, written out so they can be tuned (deepspeed/runtime/fp16/loss_scaler.py logs
    # its "OVERFLOW! Skipping step" lines; docs/log-formats.md).
    return FP16(
        enabled=True,
        loss_scale=0,
        initial_scale_power=16,
        loss_scale_window=1000,
        hysteresis=2,
        min_loss_scale=1,
    )


def _offload_common(device: str, options: WriteOptions) -> dict[str, Any]:
    """The keys both offload sections take: the device, the swap directory (NVMe only), pinned buffers."""
    return {
        "device": device,
        "nvme_path": options.nvme_path if device == "nvme" else None,
        "pin_memory": options.pin_memory,
    }


def _zero(strategy: Strategy, options: WriteOptions) -> ZeroOptimization:
    stage = strategy.zero_stage
    training = strategy.mode == "train"
    values: dict[str, Any] = {"stage": stage}
    if stage >= 1:
        if training:
            values["contiguous_gradients"] = True
        # DeepSpeed's default; at 1/2 it costs 4.5x bucket memory. At stage 3 it also runs the parameter prefetch on
        # its own stream, which inference needs as much as training.
        values["overlap_comm"] = stage == 3
    if strategy.offload_optimizer != "none":
        nvme = strategy.offload_optimizer == "nvme"
        values["offload_optimizer"] = OffloadOptimizer(
            **_offload_common(strategy.offload_optimizer, options), buffer_count=4 if nvme else None
        )
    if strategy.offload_param != "none":
        nvme = strategy.offload_param == "nvme"
        values["offload_param"] = OffloadParam(
            **_offload_common(strategy.offload_param, options),
            buffer_count=5 if nvme else None,
            buffer_size=100_000_000 if nvme else None,
            max_in_cpu=1_000_000_000 if nvme else None,
        )
    if stage == 3:
        if training:  # inference saves no model
            values["stage3_gather_16bit_weights_on_model_save"] = options.save_16bit_model
        if strategy.zero_quantized_weights:
            values["zero_quantized_weights"] = True
        if strategy.zero_quantized_gradients:
            values["zero_quantized_gradients"] = True
        if strategy.zero_hpz_partition_size > 1:
            values["zero_hpz_partition_size"] = strategy.zero_hpz_partition_size
        if leaf_modules_in_json(options):
            values["leaf_module"] = LeafModule(classes=list(options.moe_leaf_modules))
    return ZeroOptimization(**values)


def leaf_modules_in_json(options: WriteOptions) -> bool:
    """Where the MoE leaf modules go: the DeepSpeed JSON (zero_optimization.leaf_module) when the target DeepSpeed
    reads it and the JSON is what DeepSpeed gets -- not in accelerate's plugin mode, which builds its own config and
    takes them as deepspeed_moe_layer_cls_names instead (accelerate's set_moe_leaf_modules, in either mode)."""
    if not options.moe_leaf_modules:
        return False
    plugin = options.consumer == "accelerate" and options.accelerate_mode == "plugin"
    return not plugin and supports_leaf_module(options.deepspeed_version)


def _activation_checkpointing() -> ActivationCheckpointing:
    return ActivationCheckpointing(
        partition_activations=False,
        cpu_checkpointing=False,
        contiguous_memory_optimization=False,
        synchronize_checkpoint_boundary=False,
        profile=False,
    )


def deepspeed_builds_optimizer(choice: Literal["auto", "deepspeed", "script"], *, offloaded: bool) -> bool:
    """Whether the configs written with --optimizer ``choice`` carry an optimizer section (DeepSpeed builds the
    optimizer) for a training strategy: "auto" gives it to DeepSpeed where the optimizer is offloaded (its CPU Adam),
    else leaves it to the script."""
    return choice == "deepspeed" or (choice == "auto" and offloaded)


def writes_fused_adam(choice: Literal["auto", "deepspeed", "script"], *, torch_adam: bool) -> bool:
    """Whether DeepSpeed builds its FusedAdam from the configs written with --optimizer ``choice`` [--torch-adam]
    where the optimizer stays on the GPU -- so stage 0 in 16 bits steps through FP16_Optimizer
    (``wizard.planner.buffers.ZeroBuffers.fused_optimizer``): the section ``_optimizer`` writes, read by the rule
    DeepSpeed follows (``wizard.config.optimizer_op``)."""
    if not deepspeed_builds_optimizer(choice, offloaded=False):
        return False  # the script's own optimizer
    section = _optimizer(WriteOptions(optimizer=choice, torch_adam=torch_adam), offloaded=False)
    return builds_fused_adam({"optimizer": {"type": section.type, "params": section.params}})


def _optimizer(options: WriteOptions, *, offloaded: bool) -> Optimizer:
    """DeepSpeed's AdamW section. With --torch-adam DeepSpeed builds torch's AdamW from it and passes the other params
    through (engine.py get_optimizer_configuration, DeepSpeed 0.19.8, which leaves ``foreach`` at torch's default):
    where the optimizer stays on the GPU it is torch's fused AdamW, whose step allocates no temporaries -- the step
    the planner counts and the benches measured; torch's default foreach step would hold a square-root buffer the
    size of the fp32 states (4 bytes a parameter). Offloaded, the states live on the CPU, where torch runs fused
    AdamW only from 2.4: left at its default there."""
    consumer = options.consumer
    params: dict[str, Any] = {
        # The Trainer fills lr/betas/eps/weight_decay from TrainingArguments; accelerate's DummyOptim fills lr and
        # weight_decay only (accelerate 1.15.0 accelerator.py ``_prepare_deepspeed``).
        "lr": AUTO if consumer in ("trainer", "accelerate") else options.lr,
        "betas": AUTO if consumer == "trainer" else list(options.betas),
        "eps": AUTO if consumer == "trainer" else options.eps,
        "weight_decay": AUTO if consumer in ("trainer", "accelerate") else options.weight_decay,
    }
    if options.torch_adam:
        params["torch_adam"] = True
        if not offloaded:
            params["fused"] = True
    return Optimizer(type="AdamW", params=params)


def _scheduler(options: WriteOptions) -> Scheduler:
    if options.consumer in ("trainer", "accelerate"):
        params: dict[str, Any] = {"warmup_min_lr": AUTO, "warmup_max_lr": AUTO, "warmup_num_steps": AUTO}
    else:
        params = {
            "warmup_min_lr": 0,
            "warmup_max_lr": options.lr,
            "warmup_num_steps": max(1, options.warmup_steps),
        }
    return Scheduler(type="WarmupLR", params=params)


def _script_notes(strategy: Strategy, settings: DeepSpeedSettings, options: WriteOptions) -> tuple[str, ...]:
    consumer = options.consumer
    notes: list[str] = []
    micro, gas = strategy.micro_batch_size, strategy.gradient_accumulation_steps
    if consumer == "trainer":
        flags = f"--per_device_train_batch_size {micro} --gradient_accumulation_steps {gas}"
        if strategy.precision != "fp32":
            flags += f" --{strategy.precision}"
        notes.append(
            f"pass {flags} to your Trainer script: the config holds these numbers and the Trainer checks them"
        )
    plugin = consumer == "accelerate" and options.accelerate_mode == "plugin"
    if plugin:
        notes.append(
            f"accelerate plugin mode takes the micro-batch from the DataLoader: use batch_size={micro} per process"
        )
    if settings.optimizer is not None and not plugin:
        if consumer == "accelerate":
            notes.append("the optimizer is DeepSpeed's: create accelerate.utils.DummyOptim in the script")
        elif consumer == "deepspeed":
            notes.append("the optimizer is DeepSpeed's: pass no optimizer to deepspeed.initialize")
    if settings.scheduler is not None and consumer == "accelerate" and not plugin:
        notes.append("the scheduler is DeepSpeed's: create accelerate.utils.DummyScheduler in the script")
    if strategy.activation_checkpointing:
        notes.append(
            "activation checkpointing must be switched on in the model (HF: model.gradient_checkpointing_enable()"
            " or --gradient_checkpointing); the config section only tunes deepspeed.checkpointing"
        )
    if strategy.zero_stage == 3 and consumer == "deepspeed":
        notes.append(
            "build a large model inside `with deepspeed.zero.Init(config_dict_or_path=...)` so it is partitioned"
            " as it is created (accelerate and the HF Trainer do this for you)"
        )
    if strategy.mode == "inference":
        notes.append(inference_note(consumer, micro))
    else:
        ft = options.finetune
        notes += finetune_script_notes(
            ft, precision=strategy.precision, zero_stage=strategy.zero_stage, consumer=consumer
        )
    # accelerate applies deepspeed_moe_layer_cls_names itself; DeepSpeed before 0.18 needs the script to.
    needs_call = consumer != "accelerate" and not leaf_modules_in_json(options)
    if strategy.zero_stage == 3 and options.moe_leaf_modules and needs_call:
        classes = ", ".join(options.moe_leaf_modules)
        notes.append(
            f"this DeepSpeed cannot take leaf modules in its config: call "
            f"deepspeed.utils.set_z3_leaf_modules(model, [{classes}]) before deepspeed.initialize"
        )
    return tuple(notes)


def _samples(n: int) -> str:
    return f"{n} sample{'s' if n != 1 else ''}"


def inference_note(consumer: str, micro: int) -> str:
    """How a script runs the inference config: no optimizer, eval mode, forward passes only."""
    if consumer == "trainer":
        return (
            f"inference: call trainer.evaluate() / trainer.predict() (the Trainer runs ZeRO-3 inference without an "
            f"optimizer) with --per_device_eval_batch_size {micro}"
        )
    if consumer == "accelerate":
        return (
            f"inference: accelerator.prepare(model) with no optimizer, model.eval() and forward passes under "
            f"torch.no_grad(), {_samples(micro)} per forward per process"
        )
    return (
        "inference: deepspeed.initialize(model=model, config=...) with no optimizer, engine.eval() and forward "
        f"passes under torch.no_grad(), {_samples(micro)} per forward per GPU"
    )
