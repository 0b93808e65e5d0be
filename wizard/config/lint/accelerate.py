"""accelerate's YAML (accelerate 1.15.0: ``accelerate/commands/config/config_args.py`` ClusterConfig, and
``accelerate/utils/dataclasses.py`` ``DeepSpeedPlugin._deepspeed_config_checks``): keys accelerate refuses or ignores, the deepspeed_config_file mode's
conflicts ("the following accelerate config variables will be ignored"), and plugin-mode settings that do not
do what they say."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wizard.config import accelerate_keys
from wizard.config.lint.base import ERROR, INFO, WARNING, LintContext, as_int, did_you_mean, finding
from wizard.config.lint.launcher import lint_accelerate_launcher
from wizard.config.lint.precision import precision_vs_hardware
from wizard.findings import Finding

# accelerate refuses these in the YAML when deepspeed_config_file is set (utils/dataclasses.py
# _deepspeed_config_checks): "the following accelerate config variables will be ignored". So does any top-level
# mixed_precision (commands/launch.py appends it when the YAML has one).
ACCELERATE_KEYS_REFUSED_WITH_CONFIG_FILE = (
    "gradient_accumulation_steps",
    "gradient_clipping",
    "zero_stage",
    "offload_optimizer_device",
    "offload_param_device",
    "offload_param_nvme_path",
    "offload_optimizer_nvme_path",
    "zero3_save_16bit_model",
)


# accelerate's DistributedType values (accelerate/utils/dataclasses.py) a YAML names, in words.
_BACKENDS = {
    "NO": "one process",
    "MULTI_GPU": "DDP",
    "MULTI_CPU": "DDP on CPUs",
    "MULTI_XPU": "DDP on XPUs",
    "MULTI_NPU": "DDP on NPUs",
    "MULTI_MLU": "DDP on MLUs",
    "MULTI_HPU": "DDP on HPUs",
    "FSDP": "PyTorch FSDP",
    "MEGATRON_LM": "Megatron-LM",
    "XLA": "XLA / TPU",
}


@dataclass(frozen=True)
class AccelerateLint:
    findings: list[Finding]
    ds_config_file: Path | None  # the JSON to lint next (config-file mode, when found)
    world_size: int | None  # num_processes, when it is a number


def lint_accelerate_dict(
    raw: Any, *, name: str, lines: dict[str, int], base_dir: Path, ctx: LintContext
) -> AccelerateLint:
    def at(path: str) -> str:
        line = lines.get(path)
        return f"{name}:{line}" if line else f"{name}: {path}"

    if not isinstance(raw, dict):
        return AccelerateLint(
            [
                finding(
                    ERROR,
                    "not-an-object",
                    f"{name} is not a YAML mapping",
                    "accelerate reads its config as key: value pairs",
                    "start from the file `dswiz config` or `accelerate config` writes",
                    f"{name}:1",
                )
            ],
            None,
            None,
        )
    out: list[Finding] = _unknown_keys(raw, at, section=None)  # accelerate refuses these whatever the backend
    kind = raw.get("distributed_type")
    if kind != "DEEPSPEED":
        # DDP, FSDP, Megatron-LM, one process...: a valid accelerate config, only not one DeepSpeed reads.
        backend = _BACKENDS.get(str(kind), "a backend other than DeepSpeed")
        settings = raw.get("deepspeed_config")
        ignored = isinstance(settings, dict) and bool(
            settings
        )  # `accelerate config` writes {} for other backends
        out.append(
            finding(
                WARNING if ignored else INFO,
                "accelerate-not-deepspeed",
                f"distributed_type is {kind!r} ({backend}): not a DeepSpeed config"
                + (", yet it has DeepSpeed settings" if ignored else ""),
                "accelerate launches it without DeepSpeed"
                + (" and ignores the deepspeed_config section" if ignored else "")
                + "; dswiz's DeepSpeed rules do not apply to it",
                "set distributed_type: DEEPSPEED if DeepSpeed should run it, or delete deepspeed_config"
                if ignored
                else "nothing to do for this backend; for DeepSpeed, `dswiz config --for accelerate` writes a YAML",
                at("distributed_type"),
            )
        )
        return AccelerateLint(out, None, as_int(raw.get("num_processes")))
    ds = raw.get("deepspeed_config")
    if ds is None:
        ds = {}
    if not isinstance(ds, dict):
        out.append(
            finding(
                ERROR,
                "section-not-object",
                "deepspeed_config is not a mapping",
                "accelerate reads DeepSpeed's settings from the keys under it",
                "indent its keys under deepspeed_config:",
                at("deepspeed_config"),
            )
        )
        return AccelerateLint(out, None, None)
    out += _unknown_keys(ds, at, section="deepspeed_config")
    out += _num_processes(raw, at)
    out += _out_of_range(raw, ds, at)
    out += lint_accelerate_launcher(raw, ds, at, ctx)
    if "deepspeed_config_file" in ds:
        out += _config_file_mode(raw, ds, at)
        json_path, more = _resolve(ds.get("deepspeed_config_file"), base_dir, at)
        out += more
    else:
        out += _plugin_mode(raw, ds, at, ctx)
        json_path = None
    return AccelerateLint(out, json_path, as_int(raw.get("num_processes")))


def _unknown_keys(mapping: dict[str, Any], at: Any, *, section: str | None) -> list[Finding]:
    """Keys accelerate does not know: at the top level it refuses the file; under deepspeed_config it ignores them
    (a likely typo is an error there, anything else a warning)."""
    known = accelerate_keys.DEEPSPEED_CONFIG_KEYS if section else accelerate_keys.TOP_LEVEL_KEYS
    out = []
    for key in mapping:
        if key in known:
            continue
        guess = did_you_mean(str(key), known)
        suggestion = f': did you mean "{guess}"?' if guess else ""
        fix = f"rename it to {guess}" if guess else f"delete {key}"
        if section is None:
            out.append(
                finding(
                    ERROR,
                    "accelerate-unknown-key",
                    f"unknown accelerate config key {key!r}{suggestion}",
                    'accelerate launch stops: "The config file ... had unknown keys"',
                    fix,
                    at(str(key)),
                )
            )
        else:
            out.append(
                finding(
                    ERROR if guess else WARNING,
                    "accelerate-unknown-ds-key",
                    f"unknown key {key!r} in {section}{suggestion}",
                    "accelerate silently ignores it, so the setting has no effect",
                    fix,
                    at(f"{section}.{key}"),
                )
            )
    return out


_OFFLOAD_DEVICES = ("none", "cpu", "nvme")


def _out_of_range(raw: dict[str, Any], ds: dict[str, Any], at: Any) -> list[Finding]:
    """Values no run can start with (a wrong type is check_types' finding; "auto" is not a value here): accelerate
    hands them on and DeepSpeed's config validation stops the job at start (deepspeed/runtime/zero/config.py
    ZeroStageEnum, zero/offload_config.py OffloadDeviceEnum, runtime/config.py's gradient accumulation assertion,
    DeepSpeed 0.19.8), or accelerate has no process to start."""
    out = []

    def bad(path: str, what: str, why: str, fix: str) -> None:
        out.append(finding(ERROR, "accelerate-value-out-of-range", what, why, fix, at(path)))

    stage = as_int(ds.get("zero_stage"))
    if stage is not None and stage not in (0, 1, 2, 3):
        bad("deepspeed_config.zero_stage", f"zero_stage {stage} is not a ZeRO stage",
            "DeepSpeed stops at start: the stage must be 0, 1, 2 or 3", "write zero_stage: 0, 1, 2 or 3")  # fmt: skip
    for key in ("offload_optimizer_device", "offload_param_device"):
        device = ds.get(key)
        if isinstance(device, str) and device not in _OFFLOAD_DEVICES:
            bad(f"deepspeed_config.{key}", f"{key} {device!r} is not an offload device",
                "DeepSpeed stops at start: the device must be none, cpu or nvme",
                f"write {key}: none, cpu or nvme")  # fmt: skip
    numbers = [
        (f"deepspeed_config.{k}", ds.get(k))
        for k in ("gradient_accumulation_steps", "gradient_clipping", "zero_stage")
    ]
    numbers += [
        (k, raw.get(k)) for k in ("num_processes", "num_machines", "machine_rank", "main_process_port")
    ]
    for path, value in numbers:
        if (
            value is None
            or value == "auto"
            or (isinstance(value, (int, float)) and not isinstance(value, bool))
        ):
            continue
        key = path.split(".")[-1]
        out.append(
            finding(
                ERROR,
                "wrong-type",
                f"{path} is {value!r}, not a number",
                "DeepSpeed (or accelerate) stops at start comparing it with a number",
                f"write {key}: a number without quotes (e.g. {key}: {1 if key != 'gradient_clipping' else 1.0})",
                at(path),
            )
        )
    steps = as_int(ds.get("gradient_accumulation_steps"))
    if steps is not None and steps < 1:
        bad("deepspeed_config.gradient_accumulation_steps", f"gradient_accumulation_steps is {steps}",
            "DeepSpeed stops at start: it must be greater than 0",
            "write gradient_accumulation_steps: 1 (no accumulation) or more")  # fmt: skip
    for key in ("num_processes", "num_machines"):
        n = as_int(raw.get(key))
        if n is not None and n < 1:
            bad(key, f"{key} is {n}", "there is no process to train on: accelerate launch cannot start the job",
                f"write {key}: 1 or more ({'every GPU of every machine' if key == 'num_processes' else 'machines'})")  # fmt: skip
    rank, machines = as_int(raw.get("machine_rank")), as_int(raw.get("num_machines", 1))
    if rank is not None and machines is not None and machines >= 1 and not 0 <= rank < machines:
        bad("machine_rank", f"machine_rank {rank} is not one of the {machines} machine(s) (0 .. {machines - 1})",
            "accelerate launch hands it on as this machine's node rank: a rank past the last machine (or below 0) "
            "matches no slot of the job, which fails or waits for a machine that never comes",
            "write machine_rank: 0 (one machine)" if machines == 1 else "write machine_rank: 0 on the main machine, "
            + ("1 on the other" if machines == 2 else f"1 .. {machines - 1} on the others"))  # fmt: skip
    return out


def _num_processes(raw: dict[str, Any], at: Any) -> list[Finding]:
    machines = as_int(raw.get("num_machines", 1))
    processes = as_int(raw.get("num_processes"))
    if "num_processes" not in raw:
        return [
            finding(
                WARNING,
                "accelerate-num-processes",
                "num_processes is not set",
                'accelerate launch stops: "You need to manually pass in `--num_processes` using this config yaml"',
                "set num_processes to the total number of GPUs (all machines)",
                at("distributed_type"),
            )
        ]
    if processes is not None and machines and processes % machines:
        return [
            finding(
                WARNING,
                "accelerate-num-processes",
                f"num_processes {processes} is not a multiple of num_machines {machines}",
                "accelerate starts num_processes / num_machines processes on each machine",
                "num_processes is the total over all machines: machines x GPUs per machine",
                at("num_processes"),
            )
        ]
    return []


def _config_file_mode(raw: dict[str, Any], ds: dict[str, Any], at: Any) -> list[Finding]:
    out = []
    refused = [k for k in ACCELERATE_KEYS_REFUSED_WITH_CONFIG_FILE if k in ds]
    why = (
        'accelerate stops: "When using `deepspeed_config_file`, the following accelerate config variables will '
        'be ignored"'
    )
    for key in refused:
        out.append(
            finding(
                ERROR,
                "accelerate-config-file-conflict",
                f"deepspeed_config.{key} is set next to deepspeed_config_file",
                why,
                f"delete {key} here and set it in the DeepSpeed JSON instead",
                at(f"deepspeed_config.{key}"),
            )
        )
    if "mixed_precision" in raw:
        out.append(
            finding(
                ERROR,
                "accelerate-config-file-conflict",
                f"mixed_precision ({raw['mixed_precision']!r}) is set next to deepspeed_config_file",
                why + " -- any mixed_precision, even 'no'",
                'delete mixed_precision and set "bf16"/"fp16" in the DeepSpeed JSON',
                at("mixed_precision"),
            )
        )
    return out


def _resolve(value: Any, base_dir: Path, at: Any) -> tuple[Path | None, list[Finding]]:
    where = at("deepspeed_config.deepspeed_config_file")
    if not isinstance(value, str) or not value.strip():
        return None, [
            finding(
                ERROR,
                "accelerate-config-file-missing",
                f"deepspeed_config_file is {value!r}, not a path",
                "accelerate cannot read the DeepSpeed settings",
                "write the path of the DeepSpeed JSON",
                where,
            )
        ]
    path = Path(os.path.expanduser(value))
    if path.is_absolute() or path.exists():
        if path.exists():
            return path, []
        return None, [
            finding(
                ERROR,
                "accelerate-config-file-missing",
                f"deepspeed_config_file {value} does not exist",
                "accelerate fails to open it at launch",
                "fix the path (an absolute path is safest)",
                where,
            )
        ]
    beside = base_dir / path
    if beside.exists():
        return beside, [
            finding(
                WARNING,
                "accelerate-config-file-relative",
                f"deepspeed_config_file {value} is relative: found next to the YAML, not in the current directory",
                "accelerate opens it relative to the directory `accelerate launch` runs in, not the YAML's",
                f"write the absolute path: {beside.resolve()}",
                where,
            )
        ]
    return None, [
        finding(
            ERROR,
            "accelerate-config-file-missing",
            f"deepspeed_config_file {value} not found (neither here nor next to the YAML)",
            "accelerate fails to open it at launch",
            "fix the path (an absolute path is safest)",
            where,
        )
    ]


def _plugin_mode(raw: dict[str, Any], ds: dict[str, Any], at: Any, ctx: LintContext) -> list[Finding]:
    out = []
    stage = as_int(ds.get("zero_stage"))
    if "zero_stage" not in ds:
        out.append(
            finding(
                INFO,
                "accelerate-default-stage",
                "zero_stage is not set: accelerate uses ZeRO stage 2",
                "its default comes from ACCELERATE_DEEPSPEED_ZERO_STAGE, else 2",
                "write zero_stage: 0, 1, 2 or 3",
                at("deepspeed_config"),
            )
        )
        stage = 2
    param = ds.get("offload_param_device")
    opt = ds.get("offload_optimizer_device")
    if param in ("cpu", "nvme") and stage != 3:
        out.append(
            finding(
                WARNING,
                "offload-param-ignored",
                f"offload_param_device {param} at ZeRO stage {stage} does nothing",
                "only stage 3 offloads parameters (`accelerate config` offers it at stage 2 anyway)",
                "set zero_stage: 3 or offload_param_device: none",
                at("deepspeed_config.offload_param_device"),
            )
        )
    if opt == "nvme" and stage in (1, 2):
        out.append(
            finding(
                WARNING,
                "nvme-becomes-cpu",
                f"offload_optimizer_device nvme at ZeRO stage {stage} offloads to CPU memory instead",
                "stages 1 and 2 only know CPU offload",
                "use zero_stage: 3 for NVMe, or write offload_optimizer_device: cpu",
                at("deepspeed_config.offload_optimizer_device"),
            )
        )
    for name, device in (("offload_optimizer", opt), ("offload_param", param)):
        path = ds.get(f"{name}_nvme_path")
        missing = not isinstance(path, str) or path in ("", "none")
        if device == "nvme" and stage == 3 and missing and not ctx.at_launch:  # the launch reports it itself
            out.append(
                finding(
                    ERROR,
                    "nvme-path-missing",
                    f"{name}_device nvme without {name}_nvme_path",
                    "DeepSpeed stops: nvme_path cannot be None if remote device is nvme",
                    f"set {name}_nvme_path to a directory on a local NVMe drive",
                    at(f"deepspeed_config.{name}_device"),
                )
            )
    if ds.get("zero3_init_flag") is True and stage != 3:
        out.append(
            finding(
                INFO,
                "accelerate-zero3-init",
                f"zero3_init_flag at ZeRO stage {stage} is switched off by accelerate",
                "deepspeed.zero.Init only applies to stage 3 (`accelerate config` asks it at every stage)",
                "set zero3_init_flag: false",
                at("deepspeed_config.zero3_init_flag"),
            )
        )
    mixed = raw.get("mixed_precision")
    for f in precision_vs_hardware(ctx, fp16=mixed == "fp16", bf16=mixed == "bf16"):
        out.append(replace(f, location=at("mixed_precision")))
    hw = ctx.hardware
    if hw is not None and not hw.gpus:
        out.append(
            finding(
                WARNING,
                "accelerate-plugin-on-cpu",
                "plugin mode on a machine without GPUs",
                "on CPU accelerate counts one process per rank and DeepSpeed's batch assertion fails; "
                "config-file mode (deepspeed_config_file) with train_micro_batch_size_per_gpu runs",
                "use deepspeed_config_file mode (`dswiz config --for accelerate` writes it)",
                at("deepspeed_config"),
            )
        )
    return out
