"""What the user's training script must change for the chosen consumer and config: a short before/after (shown
as a unified diff), one line saying why, the launch command, and a finding where a combination has a trap.

Checked against the installed libraries (tests/unit/test_hints.py, tests/integration/test_hints_run.py):
- accelerate 1.15 ``Accelerator._prepare_deepspeed``: an optimizer in the DeepSpeed config needs
  ``accelerate.utils.DummyOptim`` in the script ("You cannot specify an optimizer in the config file and in the code
  at the same time"), a scheduler in the config needs ``DummyScheduler`` ("You cannot specify a scheduler in the
  config file and in the code at the same time"); with ``DummyOptim`` only ``DummyScheduler`` is accepted ("You can
  only specify `accelerate.utils.DummyScheduler` in the code when using `accelerate.utils.DummyOptim`."), so a
  scheduler of the script's own goes in through ``DummyScheduler(optimizer, lr_scheduler_callable=...)``.
- DeepSpeed ``initialize(optimizer=..., lr_scheduler=...)``: a client scheduler may be a callable taking the
  optimizer DeepSpeed built (engine._configure_lr_scheduler).
- transformers ``deepspeed_optim_sched``: the Trainer handles every optimizer/scheduler mix itself.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from wizard.errors import DswizError
from wizard.findings import Finding, Severity
from wizard.tuning import ALL_LINEAR, FineTune

Consumer = Literal["deepspeed", "accelerate", "trainer"]
OptimizerSource = Literal["config", "script"]
SchedulerSource = Literal["config", "script", "none"]

CONSUMERS: tuple[str, ...] = ("deepspeed", "accelerate", "trainer")
OPTIMIZER_SOURCES: tuple[str, ...] = ("config", "script")
SCHEDULER_SOURCES: tuple[str, ...] = ("config", "script", "none")


@dataclass(frozen=True)
class CodeHints:
    """The code change for one (consumer, optimizer source, scheduler source)."""

    consumer: str
    optimizer_source: str
    scheduler_source: str
    explanation: str  # one line: what changes and why
    before: (
        str  # typical code today (Python, runnable with model / train_loader / num_training_steps defined)
    )
    after: str  # the same code, changed
    launch: str  # how to start it
    findings: tuple[Finding, ...] = field(default=())

    @property
    def changed(self) -> bool:
        return self.before != self.after

    @property
    def diff(self) -> str:
        """``before`` -> ``after`` as a unified diff (empty when nothing changes)."""
        lines = difflib.unified_diff(
            self.before.splitlines(keepends=True),
            self.after.splitlines(keepends=True),
            fromfile="train.py (before)",
            tofile="train.py (after)",
            n=1,
        )
        return "".join(lines)

    def to_dict(self) -> dict[str, object]:
        return {
            "consumer": self.consumer,
            "optimizer_source": self.optimizer_source,
            "scheduler_source": self.scheduler_source,
            "explanation": self.explanation,
            "diff": self.diff,
            "after": self.after,
            "launch": self.launch,
            "findings": [f.to_dict() for f in self.findings],
        }


# -- the pieces -----------------------------------------------------------------------------------------------
# The scheduler a script typically has: linear decay. Any torch scheduler works the same way.
_SCRIPT_SCHEDULER = "torch.optim.lr_scheduler.LambdaLR({opt}, lambda step: 1 - step / num_training_steps)"
_TORCH_OPTIMIZER = "torch.optim.AdamW(model.parameters(), lr=1e-4)"
# The step the planner's figures were measured with (and the HF Trainer's default, adamw_torch_fused): torch's default
# foreach AdamW ran 2-3 % slower on the H200 and moved the allocator's cache by -10 ... +4 GiB (docs/measurements.md).
_FUSED_OPTIMIZER = "torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # the step dswiz plans for"
_AFTER_OPT = f"optimizer = {_FUSED_OPTIMIZER}\n"  # where a hint rewrites the script's optimizer line

_ACCELERATE_BEFORE_OPT = f"optimizer = {_TORCH_OPTIMIZER}\n"
_ACCELERATE_BEFORE_SCHED = f"scheduler = {_SCRIPT_SCHEDULER.format(opt='optimizer')}\n"
_ACCELERATE_HEAD = "accelerator = Accelerator()\n"


def _accelerate(opt: str, sched: str) -> tuple[str, str, str]:
    """(before, after, explanation) for accelerate."""
    with_sched = sched != "none"
    prepared = "model, optimizer, train_loader" + (", scheduler" if with_sched else "")
    prepare = f"{prepared} = accelerator.prepare({prepared})\n"
    before = (
        "import torch\nfrom accelerate import Accelerator\n\n"
        + _ACCELERATE_HEAD
        + _ACCELERATE_BEFORE_OPT
        + (_ACCELERATE_BEFORE_SCHED if with_sched else "")
        + prepare
    )
    dummies = [
        n for n, used in (("DummyOptim", opt == "config"), ("DummyScheduler", sched != "none")) if used
    ]
    if opt == "script" and sched != "config":
        return (
            before,
            before,
            "no change: accelerator.prepare() hands your optimizer and scheduler to DeepSpeed (dswiz planned "
            "for a fused AdamW step: torch.optim.AdamW(..., fused=True))",
        )
    if opt == "config" and sched == "script":
        dummies = ["DummyOptim", "DummyScheduler"]
    after = (
        "import torch\nfrom accelerate import Accelerator\n"
        + f"from accelerate.utils import {', '.join(dummies)}\n\n"
    )
    after += _ACCELERATE_HEAD
    if opt == "config":
        after += (
            "optimizer = DummyOptim(model.parameters(), lr=1e-4)  # DeepSpeed builds it from the config\n"
        )
    else:
        after += _AFTER_OPT
    if sched == "config":
        after += "scheduler = DummyScheduler(optimizer, total_num_steps=num_training_steps, warmup_num_steps=100)\n"
    elif sched == "script":
        after += (
            "# DeepSpeed builds the optimizer, so pass a function that builds your scheduler on it:\n"
            "scheduler = DummyScheduler(\n"
            "    optimizer,\n"
            f"    lr_scheduler_callable=lambda opt: {_SCRIPT_SCHEDULER.format(opt='opt')},\n"
            ")\n"
        )
    after += prepare
    what = {
        ("config", "config"): "optimizer and scheduler come from the DeepSpeed config: the script passes "
        'DummyOptim / DummyScheduler placeholders (accelerate fills the config\'s "auto" values from them)',
        ("config", "none"): "the optimizer comes from the DeepSpeed config: the script passes a DummyOptim "
        'placeholder (accelerate fills lr / weight_decay "auto" from it)',
        (
            "script",
            "config",
        ): "the scheduler comes from the DeepSpeed config: the script passes a DummyScheduler "
        "placeholder next to its own optimizer",
        (
            "config",
            "script",
        ): "the optimizer comes from the DeepSpeed config, so the script's scheduler must be "
        "built on it later: DummyOptim, and DummyScheduler(lr_scheduler_callable=...)",
    }[(opt, sched)]
    return before, after, what


_DS_LOOP_BEFORE = (
    "for batch in train_loader:\n"
    "    loss = model(batch)\n"
    "    loss.backward()\n"
    "    optimizer.step()\n"
    "{sched_step}"
    "    optimizer.zero_grad()\n"
)
_DS_LOOP_AFTER = (
    "for batch in train_loader:\n"
    "    loss = engine(batch)\n"
    "    engine.backward(loss)\n"
    "    engine.step()  # optimizer step, scheduler step, zero_grad (and gradient accumulation)\n"
)
_DS_ARGS = (
    "parser = argparse.ArgumentParser()  # or your own parser\n"
    'parser.add_argument("--local_rank", type=int, default=-1)  # the deepspeed launcher passes it\n'
    "args = deepspeed.add_config_arguments(parser).parse_args()  # adds --deepspeed_config FILE\n"
)


def _deepspeed(opt: str, sched: str) -> tuple[str, str, str]:
    with_sched = sched != "none"
    before = (
        "import torch\n\n"
        f"optimizer = {_TORCH_OPTIMIZER}\n"
        + (_ACCELERATE_BEFORE_SCHED if with_sched else "")
        + _DS_LOOP_BEFORE.format(sched_step="    scheduler.step()\n" if with_sched else "")
    )
    after = "import argparse\n\nimport deepspeed\nimport torch\n\n" + _DS_ARGS
    kwargs = ["args=args", "model=model"]
    if opt == "config":
        kwargs.append("model_parameters=model.parameters()")
    else:
        after += _AFTER_OPT
        kwargs.append("optimizer=optimizer")
    if sched == "script":
        if opt == "config":
            after += (
                "# DeepSpeed builds the optimizer, so pass a function that builds your scheduler on it:\n"
                f"make_scheduler = lambda opt: {_SCRIPT_SCHEDULER.format(opt='opt')}  # noqa: E731\n"
            )
            kwargs.append("lr_scheduler=make_scheduler")
        else:
            after += _ACCELERATE_BEFORE_SCHED
            kwargs.append("lr_scheduler=scheduler")
    after += f"engine, optimizer, _, scheduler = deepspeed.initialize({', '.join(kwargs)})\n" + _DS_LOOP_AFTER
    parts = {
        "config": "the optimizer from the config",
        "script": "your optimizer",
    }
    sched_part = {
        "config": ", the scheduler from the config",
        "script": ", your scheduler"
        + (" (built by a function, on DeepSpeed's optimizer)" if opt == "config" else ""),
        "none": "",
    }
    what = (
        "deepspeed.initialize() wraps the model in an engine that owns backward/step, with "
        f"{parts[opt]}{sched_part[sched]}; the config arrives as --deepspeed_config"
    )
    return before, after, what


_TRAINER_BEFORE = (
    "from transformers import Trainer, TrainingArguments\n\n"
    'args = TrainingArguments(output_dir="out", per_device_train_batch_size=8)\n'
    "trainer = Trainer(model=model, args=args, train_dataset=train_dataset)\n"
    "trainer.train()\n"
)


def _trainer(opt: str, sched: str, config_file: str) -> tuple[str, str, str]:
    after = _TRAINER_BEFORE.replace(
        "per_device_train_batch_size=8)",
        f"per_device_train_batch_size=8, deepspeed={json.dumps(config_file)})",
    )
    source = {
        ("config", "config"): "optimizer and scheduler from the config",
        ("config", "script"): "the config's optimizer with the Trainer's scheduler (--lr_scheduler_type)",
        ("config", "none"): "the config's optimizer",
        ("script", "config"): "the Trainer's optimizer (--optim) with the config's scheduler",
        ("script", "script"): "the Trainer's own optimizer and scheduler",
        ("script", "none"): "the Trainer's own optimizer",
    }[(opt, sched)]
    what = (
        f"the Trainer takes the DeepSpeed config as TrainingArguments(deepspeed=FILE) or --deepspeed FILE and "
        f'builds {source} itself; numbers set to "auto" come from TrainingArguments'
    )
    return _TRAINER_BEFORE, after, what


def _script_scheduler_on_ds_optimizer(consumer: str) -> Finding:
    if consumer == "accelerate":
        why = (
            "the script's usual code fails: with its own torch optimizer accelerate raises ValueError(\"You cannot "
            'specify an optimizer in the config file and in the code at the same time. ..."); a torch scheduler '
            "cannot be built on DummyOptim (it has no param_groups); and next to DummyOptim "
            "accelerate accepts only a DummyScheduler"
        )
        fix = (
            "build it inside DummyScheduler(optimizer, lr_scheduler_callable=lambda opt: YourScheduler(opt, ...)), "
            "or move the scheduler into the DeepSpeed config"
        )
    else:
        why = (
            "the optimizer only exists once deepspeed.initialize() has built it, so a scheduler object cannot be "
            "created on it beforehand"
        )
        fix = (
            "pass deepspeed.initialize(..., lr_scheduler=lambda opt: YourScheduler(opt, ...)), or move the "
            "scheduler into the DeepSpeed config"
        )
    return Finding(
        severity=Severity.WARNING,
        code="ds-optimizer-script-scheduler",
        what="the optimizer comes from the DeepSpeed config but the LR scheduler from the script",
        why=why,
        fix=fix,
        location="scheduler",
    )


def code_hints(
    consumer: str,
    optimizer_source: str,
    scheduler_source: str,
    *,
    config_file: str = "ds_config.json",
    accelerate_config: str = "accelerate.yaml",
    script: str = "train.py",
) -> CodeHints:
    """The script change for ``consumer`` (deepspeed | accelerate | trainer) when the optimizer comes from the
    DeepSpeed ``config`` or the ``script``, and the scheduler from the ``config``, the ``script`` or ``none``."""
    for value, allowed, flag in (
        (consumer, CONSUMERS, "consumer"),
        (optimizer_source, OPTIMIZER_SOURCES, "optimizer source"),
        (scheduler_source, SCHEDULER_SOURCES, "scheduler source"),
    ):
        if value not in allowed:
            raise DswizError(f"unknown {flag} {value!r}", f"use one of: {', '.join(allowed)}")
    findings: tuple[Finding, ...] = ()
    if consumer == "accelerate":
        before, after, what = _accelerate(optimizer_source, scheduler_source)
        launch = f"accelerate launch --config_file {accelerate_config} {script}"
    elif consumer == "deepspeed":
        before, after, what = _deepspeed(optimizer_source, scheduler_source)
        launch = f"deepspeed {script} --deepspeed_config {config_file}"
    else:
        before, after, what = _trainer(optimizer_source, scheduler_source, config_file)
        launch = f"deepspeed {script} --deepspeed {config_file}"
    if consumer != "trainer" and optimizer_source == "config" and scheduler_source == "script":
        findings = (_script_scheduler_on_ds_optimizer(consumer),)
    return CodeHints(
        consumer=consumer,
        optimizer_source=optimizer_source,
        scheduler_source=scheduler_source,
        explanation=what,
        before=before,
        after=after,
        launch=launch,
        findings=findings,
    )


# -- from a written config ------------------------------------------------------------------------------------


def sources_of_config(ds_config: Mapping[str, Any] | None) -> tuple[str, str]:
    """(optimizer source, scheduler source) a DeepSpeed config implies: "config" where it has the section, else
    the script's optimizer and no scheduler (whether the script builds one cannot be seen from the config)."""
    cfg = ds_config if isinstance(ds_config, Mapping) else {}
    optimizer = "config" if isinstance(cfg.get("optimizer"), Mapping) else "script"
    scheduler = "config" if isinstance(cfg.get("scheduler"), Mapping) else "none"
    return optimizer, scheduler


def config_hint_lines(
    consumer: str,
    ds_config: Mapping[str, Any] | None,
    *,
    config_file: str = "ds_config.json",
    accelerate_config: str = "accelerate.yaml",
) -> list[str]:
    """What ``dswiz config`` prints after writing: one line saying what the script must change for ``consumer``
    and this config, the short diff, and -- when the optimizer comes from the config -- the trap of a scheduler
    built by the script."""
    optimizer, scheduler = sources_of_config(ds_config)
    hints = code_hints(
        consumer, optimizer, scheduler, config_file=config_file, accelerate_config=accelerate_config
    )
    lines = [f"script ({consumer}): {hints.explanation}"]
    if hints.changed:
        lines += hints.diff.rstrip("\n").splitlines()
    if consumer != "trainer" and optimizer == "config" and scheduler == "none":
        trap = code_hints(consumer, "config", "script").findings
        lines += [f"if your script builds its own LR scheduler: {f.fix}" for f in trap]
    return lines


# A torch / transformers LR scheduler being built, and the two ways of building one on DeepSpeed's optimizer.
_SCRIPT_SCHEDULER_RE = re.compile(
    r"lr_scheduler\.\w+\(|\b(?:LambdaLR|StepLR|MultiStepLR|ExponentialLR|CosineAnnealingLR|"
    r"CosineAnnealingWarmRestarts|OneCycleLR|LinearLR|PolynomialLR|ReduceLROnPlateau|SequentialLR)\(|"
    r"\bget_(?:linear|cosine|constant|polynomial_decay|cosine_with_hard_restarts)_schedule\w*\(|\bget_scheduler\("
)
_SCHEDULER_CALLABLE_RE = re.compile(r"\blr_scheduler_callable\s*=|\blr_scheduler\s*=\s*lambda\b")
_SCHEDULER_NAME_RE = re.compile(r"\blr_scheduler\s*=\s*([A-Za-z_]\w*)\s*[,)]")


def _passes_scheduler_function(text: str) -> bool:
    """The script hands DeepSpeed / accelerate a function that builds the scheduler (the hints' fix)."""
    if _SCHEDULER_CALLABLE_RE.search(text):
        return True
    for name in _SCHEDULER_NAME_RE.findall(text):
        if re.search(rf"^\s*def {name}\(|\b{name}\s*=\s*lambda\b", text, re.MULTILINE):
            return True
    return False


def script_findings(consumer: str, ds_config: Mapping[str, Any] | None, script_text: str) -> list[Finding]:
    """The hints' findings for a script about to be launched with this config: e.g. the optimizer from the
    config while the script builds its own torch LR scheduler (accelerate refuses that; DeepSpeed cannot build it
    beforehand). Read from the script's text, so a script that already passes a scheduler *function*
    (``lr_scheduler_callable=`` / ``lr_scheduler=make_scheduler``) is left alone."""
    if consumer not in CONSUMERS:
        return []
    optimizer, scheduler = sources_of_config(ds_config)
    if scheduler == "none" and _SCRIPT_SCHEDULER_RE.search(script_text):
        if _passes_scheduler_function(script_text):
            return []
        scheduler = "script"
    found = code_hints(consumer, optimizer, scheduler).findings
    return [f for f in found if f.severity in (Severity.ERROR, Severity.WARNING)]


# -- fine-tuning (LoRA / QLoRA) -------------------------------------------------------------------------------

_TORCH_DTYPES = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}
_WRAP_BEFORE = {
    "deepspeed": "deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters() if "
    "p.requires_grad], ...)",
    "accelerate": "accelerator.prepare(model, optimizer, ...) (build the optimizer on the trainable parameters)",
    "trainer": "Trainer(model=model, ...)",
}


def lora_config_code(ft: FineTune) -> str:
    """The ``peft.LoraConfig`` call for ``ft`` (peft 0.21.2: r, lora_alpha, target_modules, task_type)."""
    targets = ft.lora_targets[0] if ft.lora_targets == (ALL_LINEAR,) else list(ft.lora_targets)
    return f'LoraConfig(r={ft.lora_rank}, lora_alpha={ft.lora_alpha}, target_modules={targets!r}, task_type="CAUSAL_LM")'


def bnb_config_code(ft: FineTune, precision: str, zero_stage: int) -> str:
    """The ``transformers.BitsAndBytesConfig`` call of QLoRA: NF4, double quantization, the compute dtype; at
    ZeRO-3 the packed weights stored in the compute dtype so ZeRO-3 can flatten and partition them with the rest
    (transformers' docs, "DeepSpeed" / bitsandbytes: ``bnb_4bit_quant_storage``)."""
    dtype = _TORCH_DTYPES[precision]
    storage = f", bnb_4bit_quant_storage={dtype}" if zero_stage == 3 else ""
    return (
        f'BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", '
        f"bnb_4bit_use_double_quant={ft.double_quant}, bnb_4bit_compute_dtype={dtype}{storage})"
    )


def finetune_script_notes(ft: FineTune, *, precision: str, zero_stage: int, consumer: str) -> tuple[str, ...]:
    """One line each: what the script must add for LoRA / QLoRA (nothing for full fine-tuning). Checked against
    the installed peft/transformers by tests/unit/test_finetune_hints.py (the calls are run on a tiny model)."""
    if not ft.uses_lora:
        return ()
    notes = []
    if ft.quantized:
        notes.append(
            "QLoRA (pip install bitsandbytes): load the base in 4 bit, model = AutoModelForCausalLM.from_pretrained("
            f"name, quantization_config={bnb_config_code(ft, precision, zero_stage)}, "
            f"dtype={_TORCH_DTYPES[precision]}), then model = peft.prepare_model_for_kbit_training(model) (freezes "
            "the base, switches on gradient checkpointing)"
        )
        if zero_stage == 3:
            notes.append(
                "QLoRA at ZeRO-3: bnb_4bit_quant_storage must equal the compute dtype, or ZeRO-3 cannot partition the "
                "4-bit weights; the quantization constants stay whole on every GPU"
            )
    notes.append(
        f"{'QLoRA' if ft.quantized else 'LoRA'}: from peft import LoraConfig, get_peft_model; model = "
        f"get_peft_model(model, {lora_config_code(ft)}) before {_WRAP_BEFORE.get(consumer, _WRAP_BEFORE['deepspeed'])}"
    )
    return tuple(notes)
