"""``dswiz --plain`` / ``dswiz config`` without ``--yes``: the wizard's decisions as line prompts.

Same steps, same service (``wizard.service``) and same writers as the full-screen wizard; only the way of asking
differs. The questions go through a ``Prompter`` so tests can script the answers (questionary itself is
not what is under test).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from wizard.errors import DswizError
from wizard.findings import Finding, Severity, has_errors
from wizard.hardware.report import HardwareReport
from wizard.model import ModelSpec
from wizard.planner import Candidate, Plan
from wizard.service import LAUNCHERS, Choices, WizardService, initial_choices, parse_positive
from wizard.service.choices import gpu_memory_for
from wizard.strategy import OFFLOAD_DEVICES, PRECISIONS, Strategy, strategy_label
from wizard.tuning import FULL, make_finetune
from wizard.units import fmt_bytes

# (title, value, reason it is not offered or None)
Option = tuple[str, Any, "str | None"]


class Prompter(Protocol):
    def text(self, key: str, message: str, default: str = "") -> str: ...
    def select(self, key: str, message: str, options: Sequence[Option], default: Any = None) -> Any: ...
    def confirm(self, key: str, message: str, default: bool = True) -> bool: ...


class QuestionaryPrompter:
    """The real terminal prompts. ``key`` names the question for scripted tests; questionary ignores it.
    ``terminal`` (prompt_toolkit's ``input`` / ``output``) is for tests that type into the real prompts."""

    def __init__(self, **terminal: Any) -> None:
        import questionary

        self.q = questionary
        self.terminal = terminal

    def _ask(self, question: Any) -> Any:
        answer = question.ask()
        if answer is None:  # ctrl-c / ctrl-d
            raise KeyboardInterrupt
        return answer

    def text(self, key: str, message: str, default: str = "") -> str:
        return str(self._ask(self.q.text(message, default=default, **self.terminal)))

    def select(self, key: str, message: str, options: Sequence[Option], default: Any = None) -> Any:
        # questionary answers a choice's title when its value is None ("none: choose the strategy by hand" came
        # back as that text, then was read as a model name): choices carry their index, the answer is the value.
        choices = [self.q.Choice(title, value=i, disabled=why) for i, (title, _, why) in enumerate(options)]
        start = next(
            (c for c, (_, v, why) in zip(choices, options, strict=True) if v == default and why is None), None
        )
        question = self.q.select(message, choices=choices, default=start, **self.terminal)
        _stop_at_the_ends(question, [why is not None for _, _, why in options])
        return options[self._ask(question)][1]

    def confirm(self, key: str, message: str, default: bool = True) -> bool:
        return bool(self._ask(self.q.confirm(message, default=default, **self.terminal)))


def next_offered(disabled: Sequence[bool], at: int, step: int) -> int:
    """Where Up (step -1) / Down (+1) moves from ``at``: the nearest option offered that way, else ``at`` (no
    wrapping round: from the first offered option, Up past a disabled one would land at the bottom unseen)."""
    i = at + step
    while 0 <= i < len(disabled):
        if not disabled[i]:
            return i
        i += step
    return at


def _stop_at_the_ends(question: Any, disabled: Sequence[bool]) -> None:
    """questionary's select wraps round and skips disabled options on its way (Up from fp16 with bf16 disabled
    lands on fp32): bind the moves again to ``next_offered`` (prompt_toolkit calls the last binding added)."""
    from prompt_toolkit.keys import Keys
    from questionary.prompts.common import InquirerControl

    controls = question.application.layout.find_all_controls()
    control = next((c for c in controls if isinstance(c, InquirerControl)), None)
    if control is None:  # pragma: no cover - another questionary layout: keep its own moves
        return

    def mover(step: int) -> Callable[[Any], None]:
        def move(event: Any) -> None:
            control.pointed_at = next_offered(disabled, control.pointed_at, step)

        return move

    bindings = question.application.key_bindings
    for keys, step in (((Keys.Up, Keys.ControlP, "k"), -1), ((Keys.Down, Keys.ControlN, "j"), 1)):
        for key in keys:
            bindings.add(key, eager=True)(mover(step))


def _ask_int(
    p: Prompter, key: str, message: str, default: int | None, say: Callable[[str], None]
) -> int | None:
    while True:
        answer = p.text(key, message, "" if default is None else str(default))
        try:
            what = message[:1].lower() + message[1:]  # "micro-batch per GPU": acronyms keep their case
            return parse_positive(answer, what, allow_empty=default is None, example=default or 8)
        except DswizError as e:
            say(f"  {e}")


def _candidate_line(c: Candidate) -> str:
    # Compact (the short label, "micro 4×2"): a prompt line is one terminal line, 80 columns included.
    s, p = c.strategy, c.predicted
    return (
        f"{strategy_label(s)}, {s.precision}, micro {s.micro_batch_size}×{s.gradient_accumulation_steps}: "
        f"GPU {fmt_bytes(p.gpu_needed_bytes)}, CPU {fmt_bytes(p.cpu_bytes)}, {p.tokens_per_sec:,.0f} tokens/s"
    )


@dataclass
class _Asking:
    """One run of the questions: who asks, the service that answers, the answers so far, where to say things."""

    p: Prompter
    service: WizardService
    c: Choices
    say: Callable[[str], None]

    def ask_int(self, key: str, message: str, default: int | None) -> int | None:
        return _ask_int(self.p, key, message, default, self.say)

    def show(self, findings: Sequence[Finding]) -> None:
        for f in findings:
            self.say(f"  {f.severity.value}: {f.what}\n    fix: {f.fix}")


def run_prompts(
    *,
    prompter: Prompter | None = None,
    hardware_spec: str | None = None,
    from_file: Path | None = None,
    out_dir: Path | None = None,
    service: WizardService | None = None,
    say: Callable[[str], None] = print,
    model_text: str = "",
    prefill: Mapping[str, Any] | None = None,
) -> int:
    """Ask, plan, write. Returns 0 when files were written, 1 when the user stopped before writing.
    ``model_text`` (``--model``) and ``prefill`` (``Choices`` fields: `dswiz config`'s flags) are the questions'
    defaults."""
    service = service or WizardService()
    c = initial_choices(
        service, hardware_spec=hardware_spec, from_file=from_file, out_dir=out_dir, model_text=model_text
    )
    for name, value in (prefill or {}).items():
        setattr(c, name, value)
    a = _Asking(prompter or QuestionaryPrompter(), service, c, say)
    _ask_hardware(a, hardware_spec)
    c.gpu_memory_bytes = gpu_memory_for(c.gpu_memory_bytes, c.hardware)  # --gpu-memory: at most the card
    model = _ask_model(a)
    plan: Plan | None = None
    if model is None:  # nothing to predict: the strategy by hand, as `dswiz config --yes` without --model
        service.start_unplanned(c)
        assert c.strategy is not None
        s = _strategy_by_hand(a.p, service, c, None, c.strategy, say, None)
    else:
        plan = service.plan(c, model)
        s = _ask_strategy(a, model, plan)
    s = _ask_precision_and_batch(a, model, s)
    s = _ask_multi_node(a, s)
    c.strategy = s
    say(
        f"global batch {s.global_batch_size} = micro {s.micro_batch_size} × accumulation "
        f"{s.gradient_accumulation_steps} × world {s.world_size}"
    )
    return _review_and_write(a, model, plan)


def _ask_hardware(a: _Asking, spec: str | None) -> HardwareReport:
    """Step 1: this machine or the one asked for; asked again until it has GPUs to plan for."""
    while True:
        try:
            hw: HardwareReport | None = a.service.get_hardware(spec)
        except DswizError as e:
            a.say(f"  {e}")
            hw = None
        if hw is not None and hw.gpus:
            break
        if hw is not None:
            a.say(f"No GPU here ({hw.no_gpu_reason or 'none found'}): describe the hardware to plan for.")
        answer = a.p.text("hardware", "Hardware to plan for (e.g. 8xA100-80GB, 2x8xH100, profile.yaml)")
        spec = answer.strip() or None
    a.c.hardware, a.c.hardware_spec = hw, spec
    a.say(f"Hardware: {hw.nodes} node(s) × {hw.gpus_per_node} × {hw.gpus[0].name}")
    for h in hw.hazards:
        a.say(f"  {h.severity.value}: {h.what}\n    fix: {h.fix}")
    return hw


def _ask_finetune(a: _Asking, text: str, model: ModelSpec) -> ModelSpec:
    """Full fine-tuning, LoRA or QLoRA (with the rank), asked again until the model takes it. The defaults are
    what was asked before (``dswiz config --finetune ...``); alpha and targets from the flags are kept."""
    modes: list[Option] = [
        ("full fine-tuning (every weight trains)", "full", None),
        ("LoRA (PEFT adapters on a frozen 16-bit base)", "lora", None),
        ("QLoRA (adapters on a frozen 4-bit NF4 base, bitsandbytes)", "qlora", None),
    ]
    asked = a.c.finetune
    while True:
        mode = a.p.select("finetune", "Fine-tuning", modes, default=asked.mode)
        if mode == "full":
            a.c.finetune = FULL
            return model  # loaded for full fine-tuning by _ask_model
        try:
            rank = a.ask_int("lora-rank", "LoRA rank", asked.lora_rank)
            wanted = make_finetune(mode, rank=rank, alpha=asked.lora_alpha, targets=asked.lora_targets)
            tuned = a.service.load_model(text, wanted)
        except DswizError as e:
            a.say(f"  {e}")
            if asked.lora_targets:  # the targets cannot be typed here: the next try uses PEFT's for the model
                a.say("  asking again with PEFT's default targets for this model")
                asked = replace(asked, lora_targets=())
            continue
        a.c.finetune = wanted
        return tuned


NO_MODEL = "none: choose the strategy by hand (nothing is predicted)"


def _ask_model(a: _Asking) -> ModelSpec | None:
    """Step 2: the model (asked again until it loads; none: the strategy is chosen by hand), training or
    inference, sequence length (default: the model's context, at most 2048), target global batch."""
    c = a.c
    presets = a.service.model_presets()
    while True:
        pick: str | None = ""
        typed = c.model_text
        if presets:
            options: list[Option] = [(NO_MODEL, None, None), *((n, n, None) for n in presets)]
            options.append(("other (path or numbers)", "", None))
            default = typed if typed in presets else (None if not typed else "")
            pick = a.p.select("model-preset", "Model", options, default=default)
        if pick is None:
            model = None
            break
        text = pick or a.p.text(
            "model", "Model: preset, hub id (org/name), checkpoint folder, config.json, or numbers", typed
        )
        try:
            model = a.service.load_model(text)
            break
        except DswizError as e:
            a.say(f"  {e}")
    c.model_text = text if model is not None else ""
    inference = "inference (ZeRO-3: no optimizer; parameter offload runs models larger than the GPUs)"
    modes: list[Option] = [("training", "train", None), (inference, "inference", None)]
    c.mode = a.p.select("mode", "Training or inference?", modes, default=c.mode)
    if model is None:  # sequence length, batch and fine-tuning only steer the planner
        return None
    if c.mode == "train":
        model = _ask_finetune(a, text, model)
    else:
        c.finetune = FULL  # inference trains nothing
    from_model = a.service.seq_len_for(c, model)
    seq_len = a.ask_int("seq-len", "Sequence length", from_model)
    c.seq_len = None if seq_len == from_model and c.seq_len is None else seq_len  # as `dswiz plan` words it
    batch_question = (
        "Global batch (empty: planner picks)"
        if c.mode == "train"
        else "Samples per forward, all GPUs (empty: planner picks)"
    )
    c.global_batch = a.ask_int("global-batch", batch_question, None)
    a.say(a.service.describe_model(model))
    return model


def _ask_strategy(a: _Asking, model: ModelSpec, plan: Plan) -> Strategy:
    """Step 3: a planned candidate (or the imported strategy), then stage and offload by hand if wanted."""
    c = a.c
    options: list[Option] = [
        (
            ("★ " if cand is plan.best else "  ") + _candidate_line(cand),
            i,
            None if cand.fits else "does not fit",
        )
        for i, cand in enumerate(plan.candidates)
    ]
    for line in plan.advice:
        a.say(line)
    if all(why for _, _, why in options):
        # the planner's own "what would fit" (printed above) is the fix; it says when a shorter sequence would not help
        raise DswizError(
            "nothing fits on this hardware",
            "make one of the changes listed above (each would fit), then answer again"
            if plan.advice
            else "plan for more or larger GPUs (--hardware), or a shorter sequence",
        )
    planned = (plan.best or plan.candidates[0]).strategy
    imported = c.strategy
    given = "imported" if c.imported_from is not None else "given"
    if imported is not None and a.p.confirm(
        "keep-imported",
        f"Keep the {given} strategy ({strategy_label(imported)}, {imported.precision})?",
        default=True,
    ):
        s, batch = a.service.imported_on_topology(c, planned.nodes, planned.gpus_per_node)
        if batch is not None:
            a.say(f"  {batch.text}")
            if not batch.kept and not a.p.confirm(
                "batch-change", f"Write train_batch_size {batch.global_batch} instead?", default=False
            ):
                a.say(f"  then set micro-batch and accumulation below so that they make {batch.file_global}")
    else:
        chosen = plan.candidates[a.p.select("candidate", "Strategy (best first)", options, default=0)]
        s = chosen.strategy
        for reason in chosen.reasons:
            a.say(f"  • {reason}")
    if a.p.confirm("by-hand", "Change ZeRO stage / offload by hand?", default=False):
        s = _strategy_by_hand(a.p, a.service, c, model, s, a.say, plan)
    if s.offloads_to_nvme:
        c.strategy = s
        _ask_nvme_path(a.p, a.service, c, model, a.say)
    return s


def _ask_precision_and_batch(a: _Asking, model: ModelSpec | None, s: Strategy) -> Strategy:
    """Step 4: precision, micro-batch; for training accumulation, clipping and checkpointing; ZeRO++ and the
    16-bit save at stage 3."""
    c = a.c
    supported = a.service.precisions_supported(c.hardware)
    precisions: list[Option] = [(x, x, supported[x]) for x in PRECISIONS]
    precision = a.p.select("precision", "Precision", precisions, default=s.precision)
    micro = a.ask_int("micro", "Micro-batch per GPU", s.micro_batch_size) or 1
    s = s.with_(precision=precision, micro_batch_size=micro)
    if s.mode == "train":  # inference has no gradients to accumulate, clip or checkpoint for
        gas = a.ask_int("gas", "Gradient accumulation steps", s.gradient_accumulation_steps) or 1
        c.gradient_clipping = float(
            a.p.text("clip", "Gradient clipping (0: none)", f"{c.gradient_clipping:g}") or 0
        )
        ckpt = a.p.confirm("ckpt", "Activation checkpointing?", default=s.activation_checkpointing)
        s = s.with_(gradient_accumulation_steps=gas, activation_checkpointing=ckpt)
    if s.zero_stage == 3 and a.p.confirm(
        "zeropp", "Use ZeRO++ (quantized weights and gradients)?", default=False
    ):
        s = s.with_(zero_quantized_weights=True, zero_quantized_gradients=s.mode == "train")
    if s.zero_stage == 3 and s.mode == "train":
        c.save_16bit = a.p.confirm(
            "save-16bit",
            f"Gather the 16-bit weights into one file on save? ({a.service.save_16bit_cost(model)})",
            default=c.save_16bit,
        )
    return s


def _ask_multi_node(a: _Asking, s: Strategy) -> Strategy:
    """Step 5: nodes, GPUs per node, launcher, the hostfile (asked again until valid), master address and port."""
    c = a.c
    if not (s.nodes > 1 or a.p.confirm("multi-node", "Train on more than one node?", default=False)):
        return s
    nodes = a.ask_int("nodes", "Nodes", max(2, s.nodes)) or 2
    gpus = a.ask_int("gpus-per-node", "GPUs per node", s.gpus_per_node) or 1
    s = s.with_(nodes=nodes, gpus_per_node=gpus)
    launchers: list[Option] = [
        (f"{n}: {a.service.LAUNCHER_NOTES[n]}", n, _first(a.service.launcher_problems(n, c.hardware)))
        for n in LAUNCHERS
    ]
    c.launcher = a.p.select("launcher", "Launcher", launchers, default=c.launcher)
    default_hosts = "; ".join(ln.strip() for ln in a.service.default_hostfile(nodes, gpus).splitlines())
    while True:
        hosts = a.p.text("hostfile", "Hostfile lines, separated by ';' (host slots=N)", default_hosts)
        c.hostfile_text = "".join(f"{h.strip()}\n" for h in hosts.split(";") if h.strip())
        findings = a.service.check_hostfile(
            c.hostfile_text, nodes=nodes, gpus_per_node=gpus, launcher=c.launcher
        )
        a.show(findings)
        if has_errors(findings):
            continue
        c.strategy = s
        try:
            a.service.config_set(c, None)  # the config writers' own checks (one host per node, no duplicates)
        except DswizError as e:
            a.say(f"  {e.problem}")
            continue
        break
    c.master_addr = a.p.text("master-addr", "Master address (empty: first host)", c.master_addr).strip()
    c.master_port = a.ask_int("master-port", "Master port", c.master_port) or c.master_port
    return s


def _review_and_write(a: _Asking, model: ModelSpec | None, plan: Plan | None) -> int:
    """Step 6: who reads the config, where it goes, the linter's findings, consent to overwrite, the write, and
    what to change in the script and run next."""
    c = a.c
    consumers: list[Option] = [
        ("deepspeed (deepspeed.initialize, --deepspeed_config)", "deepspeed", None),
        ("accelerate (accelerate launch --config_file)", "accelerate", None),
        ("trainer (HF Trainer, --deepspeed)", "trainer", None),
    ]
    c.consumer = a.p.select("consumer", "Who reads the config?", consumers, default=c.consumer)
    c.out_dir = Path(a.p.text("out-dir", "Write to directory", str(c.out_dir)).strip() or str(c.out_dir))
    refused = a.service.accelerate_keys_refused(c)
    if refused and a.p.confirm(
        "drop-refused",
        f"accelerate refuses {', '.join(refused)} next to deepspeed_config_file: write accelerate.yaml "
        "without them?",
        default=True,
    ):
        a.service.drop_accelerate_keys_refused(c)
    files = a.service.render_files(
        c, model, plan
    )  # the accelerate YAML names the files by their absolute path
    findings = a.service.lint_files(
        files, c.world_size, hardware=c.hardware, launcher=c.launcher, out_dir=c.out_dir, consumer=c.consumer
    )
    a.show(findings)
    errors = sum(f.severity is Severity.ERROR for f in findings)
    if errors and not a.p.confirm(
        "write-errors",
        f"The check found {errors} error(s) above: DeepSpeed or accelerate would refuse these files. "
        "Write them anyway?",
        default=False,
    ):
        a.say("Nothing written.")
        return 1
    on_disk = a.service.existing_files(c.out_dir, files)
    changed = [n for n, old in on_disk.items() if old != files[n]]
    force = False
    if changed:
        force = a.p.confirm(
            "overwrite",
            f"{', '.join(changed)} exist in {c.out_dir} with other content. Overwrite (backups kept)?",
            default=False,
        )
        if not force:
            a.say("Nothing written.")
            return 1
    for r in a.service.write_files(c.out_dir, files, force=force):
        a.say(f"wrote {r.path}" + (f" (old one kept as {r.backup.name})" if r.backup else ""))
    for line in a.service.code_hint_lines(c, files):
        a.say(line)
    a.say(f"Next: {a.service.launch_command(c)}")
    return 0


def _strategy_by_hand(
    p: Prompter,
    service: WizardService,
    c: Choices,
    model: ModelSpec | None,
    s: Strategy,
    say: Callable[[str], None],
    plan: Plan | None,
) -> Strategy:
    """Stage, then optimizer and parameter offload, each option disabled with the reason it cannot work; then the
    planner's row for that combination, or its evaluation of exactly this strategy."""

    def why_not(strategy: Strategy) -> str | None:
        return _first(service.option_problems(strategy, c, model))

    stage = p.select(
        "stage",
        "ZeRO stage",
        [
            (str(st), st, why_not(s.with_(zero_stage=st, offload_param="none", offload_optimizer="none")))
            for st in (0, 1, 2, 3)
        ],
        default=s.zero_stage,
    )
    s = s.with_(zero_stage=stage, offload_param="none", offload_optimizer="none")
    for key, message, field in (
        ("offload-optimizer", "Optimizer offload", "offload_optimizer"),
        ("offload-param", "Parameter offload", "offload_param"),
    ):
        options: list[Option] = [(d, d, why_not(s.with_(**{field: d}))) for d in OFFLOAD_DEVICES]
        s = s.with_(**{field: p.select(key, message, options, default="none")})
    like = service.best_candidate_like(plan, s)
    if like is not None:  # the planner's micro-batch / accumulation for this combination
        say("  " + _candidate_line(like))
        return like.strategy
    if model is None:
        return s
    try:
        say("  " + _candidate_line(service.evaluate(c, model, s)))
    except DswizError as e:
        say(f"  {e.problem}")
    return s


def _ask_nvme_path(
    p: Prompter, service: WizardService, c: Choices, model: ModelSpec, say: Callable[[str], None]
) -> None:
    """NVMe offload: where the swap files go, asked until the checks find no error (warnings are shown)."""
    assert c.strategy is not None
    try:
        need: int | None = service.evaluate(c, model, c.strategy).predicted.nvme_bytes
    except DswizError:
        need = None
    default = c.nvme_path or service.suggest_nvme_path(c.hardware) or ""
    while True:
        c.nvme_path = p.text(
            "nvme-path", "NVMe offload directory (a local NVMe drive, same path on every node)", default
        )
        findings = service.check_nvme_path(c, need)
        for f in findings:
            say(f"  {f.severity.value}: {f.what}\n    fix: {f.fix}")
        if not has_errors(findings):
            return
        default = c.nvme_path


def _first(problems: list[str]) -> str | None:
    return problems[0] if problems else None
