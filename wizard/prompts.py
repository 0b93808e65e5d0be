"""``dswiz --plain`` / ``dswiz config`` without ``--yes``: the wizard's decisions as line prompts.

Same steps, same core calls (``wizard.tui.core_bridge``) and same writers as the full-screen wizard; only the way
of asking differs. The questions go through a ``Prompter`` so tests can script the answers (questionary itself is
not what is under test).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from wizard.errors import DswizError
from wizard.findings import has_errors
from wizard.strategy import OFFLOAD_DEVICES, PRECISIONS, Strategy
from wizard.tui import core_bridge
from wizard.tui.choices import LAUNCHERS, Choices, parse_positive
from wizard.units import fmt_bytes

# (title, value, reason it is not offered or None)
Option = tuple[str, Any, "str | None"]


class Prompter(Protocol):
    def text(self, key: str, message: str, default: str = "") -> str: ...
    def select(self, key: str, message: str, options: Sequence[Option], default: Any = None) -> Any: ...
    def confirm(self, key: str, message: str, default: bool = True) -> bool: ...


class QuestionaryPrompter:
    """The real terminal prompts. ``key`` names the question for scripted tests; questionary ignores it."""

    def __init__(self) -> None:
        import questionary

        self.q = questionary

    def _ask(self, question: Any) -> Any:
        answer = question.ask()
        if answer is None:  # ctrl-c / ctrl-d
            raise KeyboardInterrupt
        return answer

    def text(self, key: str, message: str, default: str = "") -> str:
        return str(self._ask(self.q.text(message, default=default)))

    def select(self, key: str, message: str, options: Sequence[Option], default: Any = None) -> Any:
        choices = [self.q.Choice(title, value=value, disabled=why) for title, value, why in options]
        start = next((c for c in choices if c.value == default and not c.disabled), None)
        return self._ask(self.q.select(message, choices=choices, default=start))

    def confirm(self, key: str, message: str, default: bool = True) -> bool:
        return bool(self._ask(self.q.confirm(message, default=default)))


def _ask_int(
    p: Prompter, key: str, message: str, default: int | None, say: Callable[[str], None]
) -> int | None:
    while True:
        answer = p.text(key, message, "" if default is None else str(default))
        try:
            return parse_positive(answer, message.lower(), allow_empty=default is None)
        except DswizError as e:
            say(f"  {e}")


def _candidate_line(c: core_bridge.CandidateView) -> str:
    s = c.strategy
    off = "".join(
        f", {what}→{dev}"
        for what, dev in (("opt", s.offload_optimizer), ("param", s.offload_param))
        if dev != "none"
    )
    tps = "?" if c.tokens_per_sec is None else f"{c.tokens_per_sec:,.0f}"
    return (
        f"ZeRO-{s.zero_stage}{off}, {s.precision}, micro {s.micro_batch_size}×{s.gradient_accumulation_steps}"
        f"{', checkpointing' if s.activation_checkpointing else ''}: "
        f"GPU {fmt_bytes(c.gpu_bytes)}, CPU {fmt_bytes(c.cpu_bytes)}, {tps} tokens/s"
    )


def run_prompts(
    *,
    prompter: Prompter | None = None,
    hardware_spec: str | None = None,
    from_file: Path | None = None,
    out_dir: Path | None = None,
    core: ModuleType | Any = core_bridge,
    say: Callable[[str], None] = print,
) -> int:
    """Ask, plan, write. Returns 0 when files were written, 1 when the user stopped before writing."""
    from wizard.tui.factory import initial_choices

    p = prompter or QuestionaryPrompter()
    c = initial_choices(hardware_spec=hardware_spec, from_file=from_file, out_dir=out_dir, core=core)

    # 1. Hardware
    spec = hardware_spec
    while True:
        try:
            hw = core.get_hardware(spec)
        except DswizError as e:
            say(f"  {e}")
            hw = None
        if hw is not None and hw.gpus:
            break
        if hw is not None:
            say(f"No GPU here ({hw.no_gpu_reason or 'none found'}): describe the hardware to plan for.")
        spec = (
            p.text("hardware", "Hardware to plan for (e.g. 8xA100-80GB, 2x8xH100, profile.yaml)").strip()
            or None
        )
    c.hardware, c.hardware_spec = hw, spec
    say(f"Hardware: {hw.nodes} node(s) × {hw.gpus_per_node} × {hw.gpus[0].name}")
    for h in hw.hazards:
        say(f"  {h.severity.value}: {h.what}\n    fix: {h.fix}")

    # 2. Model
    presets = core.model_presets()
    while True:
        if presets:
            pick = p.select(
                "model-preset",
                "Model",
                [(n, n, None) for n in presets] + [("other (path or numbers)", "", None)],
            )
        else:
            pick = ""
        text = pick or p.text("model", "Model: preset, path to config.json, or numbers")
        try:
            model = core.load_model(text)
            break
        except DswizError as e:
            say(f"  {e}")
    c.model_text = text
    c.mode = p.select(
        "mode",
        "Training or inference?",
        [
            ("training", "train", None),
            (
                "inference (ZeRO-3: no optimizer; parameter offload runs models larger than the GPUs)",
                "inference",
                None,
            ),
        ],
        default=c.mode,
    )
    c.seq_len = _ask_int(p, "seq-len", "Sequence length", c.seq_len, say) or c.seq_len
    batch_question = (
        "Global batch (empty: planner picks)"
        if c.mode == "train"
        else "Samples per forward, all GPUs (empty: planner picks)"
    )
    c.global_batch = _ask_int(p, "global-batch", batch_question, None, say)
    say(core.describe_model(model))

    # 3. Strategy
    plan = core.plan(c, model)
    options: list[Option] = [
        (
            ("★ " if cand is plan.best else "  ") + _candidate_line(cand),
            i,
            None if cand.fits else "does not fit",
        )
        for i, cand in enumerate(plan.candidates)
    ]
    for line in plan.advice:
        say(line)
    if all(why for _, _, why in options):
        raise DswizError(
            "nothing fits on this hardware", "lower the sequence length or batch, or plan for more GPUs"
        )
    planned = (plan.best or plan.candidates[0]).strategy
    imported = c.strategy
    if imported is not None and p.confirm(
        "keep-imported",
        f"Keep the imported strategy (ZeRO-{imported.zero_stage}, {imported.precision})?",
        default=True,
    ):
        s = imported.with_(nodes=planned.nodes, gpus_per_node=planned.gpus_per_node)
    else:
        chosen = plan.candidates[p.select("candidate", "Strategy (best first)", options, default=0)]
        s = chosen.strategy
        for reason in chosen.reasons:
            say(f"  • {reason}")
    if p.confirm("by-hand", "Change ZeRO stage / offload by hand?", default=False):
        s = _strategy_by_hand(p, core, c, model, s, say, plan)
    if "nvme" in (s.offload_optimizer, s.offload_param):
        c.strategy = s
        _ask_nvme_path(p, core, c, model, say)

    # 4. Precision & batch
    supported = core.precisions_supported(c.hardware)
    precision = p.select(
        "precision", "Precision", [(x, x, supported[x]) for x in PRECISIONS], default=s.precision
    )
    micro = _ask_int(p, "micro", "Micro-batch per GPU", s.micro_batch_size, say) or 1
    s = s.with_(precision=precision, micro_batch_size=micro)
    if s.mode == "train":  # inference has no gradients to accumulate, clip or checkpoint for
        gas = _ask_int(p, "gas", "Gradient accumulation steps", s.gradient_accumulation_steps, say) or 1
        c.gradient_clipping = float(
            p.text("clip", "Gradient clipping (0: none)", f"{c.gradient_clipping:g}") or 0
        )
        ckpt = p.confirm("ckpt", "Activation checkpointing?", default=s.activation_checkpointing)
        s = s.with_(gradient_accumulation_steps=gas, activation_checkpointing=ckpt)
    if s.zero_stage == 3 and p.confirm(
        "zeropp", "Use ZeRO++ (quantized weights and gradients)?", default=False
    ):
        s = s.with_(zero_quantized_weights=True, zero_quantized_gradients=s.mode == "train")
    if s.zero_stage == 3 and s.mode == "train":
        c.save_16bit = p.confirm(
            "save-16bit",
            f"Gather the 16-bit weights into one file on save? ({core.save_16bit_cost(model)})",
            default=c.save_16bit,
        )

    # 5. Multi-node
    if s.nodes > 1 or p.confirm("multi-node", "Train on more than one node?", default=False):
        nodes = _ask_int(p, "nodes", "Nodes", max(2, s.nodes), say) or 2
        gpus = _ask_int(p, "gpus-per-node", "GPUs per node", s.gpus_per_node, say) or 1
        s = s.with_(nodes=nodes, gpus_per_node=gpus)
        c.launcher = p.select(
            "launcher",
            "Launcher",
            [
                (f"{n}: {core.LAUNCHER_NOTES[n]}", n, _first(core.launcher_problems(n, c.hardware)))
                for n in LAUNCHERS
            ],
            default=c.launcher,
        )
        default_hosts = "; ".join(ln.strip() for ln in core.default_hostfile(nodes, gpus).splitlines())
        while True:
            hosts = p.text(
                "hostfile",
                "Hostfile lines, separated by ';' (host slots=N)",
                default_hosts,
            )
            c.hostfile_text = "".join(f"{h.strip()}\n" for h in hosts.split(";") if h.strip())
            findings = core.check_hostfile(
                c.hostfile_text, nodes=nodes, gpus_per_node=gpus, launcher=c.launcher
            )
            for f in findings:
                say(f"  {f.severity.value}: {f.what}\n    fix: {f.fix}")
            if has_errors(findings):
                continue
            c.strategy = s
            try:
                core.render_files(c)  # the config writers' own checks (one host per node, no duplicates)
            except DswizError as e:
                say(f"  {e.problem}")
                continue
            break
        c.master_addr = p.text("master-addr", "Master address (empty: first host)", c.master_addr).strip()
        c.master_port = _ask_int(p, "master-port", "Master port", c.master_port, say) or c.master_port
    c.strategy = s
    c.global_batch = s.global_batch_size
    say(
        f"global batch {s.global_batch_size} = micro {s.micro_batch_size} × accumulation "
        f"{s.gradient_accumulation_steps} × world {s.world_size}"
    )

    # 6. Review & write
    c.consumer = p.select(
        "consumer",
        "Who reads the config?",
        [
            ("deepspeed (deepspeed.initialize, --deepspeed_config)", "deepspeed", None),
            ("accelerate (accelerate launch --config_file)", "accelerate", None),
            ("trainer (HF Trainer, --deepspeed)", "trainer", None),
        ],
        default=c.consumer,
    )
    c.out_dir = Path(p.text("out-dir", "Write to directory", str(c.out_dir)).strip() or str(c.out_dir))
    files = core.render_files(c)  # the accelerate YAML names the files by their absolute path there
    for f in core.lint_files(
        files, c.world_size, hardware=c.hardware, launcher=c.launcher, out_dir=c.out_dir
    ):
        say(f"  {f.severity.value}: {f.what}\n    fix: {f.fix}")
    on_disk = core.existing_files(c.out_dir, files)
    changed = [n for n, old in on_disk.items() if old != files[n]]
    force = False
    if changed:
        force = p.confirm(
            "overwrite",
            f"{', '.join(changed)} exist in {c.out_dir} with other content. Overwrite (backups kept)?",
            default=False,
        )
        if not force:
            say("Nothing written.")
            return 1
    results = core.write_files(c.out_dir, files, force=force)
    for r in results:
        say(f"wrote {r.path}" + (f" (old one kept as {r.backup.name})" if r.backup else ""))
    for line in core.code_hint_lines(c, files):
        say(line)
    say(f"Next: {core.launch_command(c.out_dir, choices=c)}")
    return 0


def _strategy_by_hand(
    p: Prompter, core: Any, c: Choices, model: Any, s: Strategy, say: Callable[[str], None], plan_view: Any
) -> Strategy:
    hw = c.hardware
    stage = p.select(
        "stage",
        "ZeRO stage",
        [
            (
                str(st),
                st,
                _first(
                    core.option_problems(
                        s.with_(zero_stage=st, offload_param="none", offload_optimizer="none"),
                        hw,
                        model=model,
                        choices=c,
                    )
                ),
            )
            for st in (0, 1, 2, 3)
        ],
        default=s.zero_stage,
    )
    s = s.with_(zero_stage=stage, offload_param="none", offload_optimizer="none")
    opt = p.select(
        "offload-optimizer",
        "Optimizer offload",
        [
            (d, d, _first(core.option_problems(s.with_(offload_optimizer=d), hw, model=model, choices=c)))
            for d in OFFLOAD_DEVICES
        ],
        default="none",
    )
    s = s.with_(offload_optimizer=opt)
    par = p.select(
        "offload-param",
        "Parameter offload",
        [
            (d, d, _first(core.option_problems(s.with_(offload_param=d), hw, model=model, choices=c)))
            for d in OFFLOAD_DEVICES
        ],
        default="none",
    )
    s = s.with_(offload_param=par)
    like = core.best_candidate_like(plan_view, s)
    if like is not None:  # the planner's micro-batch / accumulation for this combination
        say("  " + _candidate_line(like))
        chosen: Strategy = like.strategy
        return chosen
    try:
        say("  " + _candidate_line(core.evaluate(c, model, s)))
    except DswizError as e:
        say(f"  {e.problem}")
    return s


def _ask_nvme_path(p: Prompter, core: Any, c: Choices, model: Any, say: Callable[[str], None]) -> None:
    """NVMe offload: where the swap files go, asked until the checks find no error (warnings are shown)."""
    assert c.strategy is not None
    try:
        need = core.evaluate(c, model, c.strategy).nvme_bytes
    except DswizError:
        need = None
    default = c.nvme_path or core.suggest_nvme_path(c.hardware) or ""
    while True:
        c.nvme_path = p.text(
            "nvme-path", "NVMe offload directory (a local NVMe drive, same path on every node)", default
        )
        findings = core.check_nvme_path(c, need)
        for f in findings:
            say(f"  {f.severity.value}: {f.what}\n    fix: {f.fix}")
        if not has_errors(findings):
            return
        default = c.nvme_path


def _first(problems: list[str]) -> str | None:
    return problems[0] if problems else None
