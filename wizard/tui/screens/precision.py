"""Step 4 — Precision & batch: bf16/fp16/fp32 as the GPUs support them; micro-batch, accumulation, clipping,
activation checkpointing and ZeRO++. The batch arithmetic (global = micro × accumulation × world) is shown and
kept consistent as you type, and the planner's memory prediction follows."""

from __future__ import annotations

import contextlib

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Input, Label, RadioButton, RadioSet, Static, Switch

from wizard.errors import DswizError
from wizard.service import parse_positive
from wizard.strategy import PRECISIONS, Strategy
from wizard.tui.screens.base import StepScreen
from wizard.tui.widgets.fields import ChoiceSet, FormSwitch, labelled, radio_set
from wizard.tui.widgets.memory_bar import MemoryBar
from wizard.units import fmt_bytes, fmt_percent

# Each label fits one line at 80 columns beside its switch (F1's help says more).
SWITCHES = (
    ("ckpt", "Activation checkpointing (less memory, ~33% more compute)"),
    ("qwz", "ZeRO++ quantized weights (qwZ, stage 3)"),
    ("qgz", "ZeRO++ quantized gradients (qgZ, stage 3)"),
    ("hpz", "ZeRO++ hpZ: a weight copy per node (stage 3, multi-node)"),
    ("save16", "Gather the 16-bit weights into one file on save (stage 3)"),
)


def batch_text(s: Strategy) -> Text:
    text = Text("global batch ", style="bold")
    text.append(f"{s.global_batch_size}", style="bold green")
    text.append(
        f" = micro-batch {s.micro_batch_size} × accumulation {s.gradient_accumulation_steps}"
        f" × world {s.world_size} ({s.nodes} node{'s' if s.nodes != 1 else ''}"
        f" × {s.gpus_per_node} GPU{'s' if s.gpus_per_node != 1 else ''})"
    )
    return text


class PrecisionStep(StepScreen):
    STEP = 3
    _accepted_over: Strategy | None = None  # a strategy predicted not to fit that the user chose to keep
    AUTO_FOCUS = "#precision"
    HELP = (
        "**bf16** needs an Ampere or newer GPU (compute capability 8.0); **fp16** needs 7.0 and uses loss "
        "scaling; **fp32** is slow. DeepSpeed requires train_batch_size = micro-batch × accumulation × world "
        "size: dswiz keeps the three consistent. **Clipping** is the gradient-norm limit (0 disables it). "
        "**ZeRO++** options (quantized weights qwZ and gradients qgZ; hpZ, hierarchical partitioning: a weight copy "
        "within each node) only act at stage 3. **16-bit save** (stage 3): `save_16bit_model()` / the Trainer's "
        "save write the whole model as one file, which rank 0 assembles in host RAM; without it only ZeRO shards "
        "are saved (`dswiz consolidate` rebuilds the weights). Inference has no accumulation, clipping or "
        "checkpointing."
    )

    def body(self) -> ComposeResult:
        yield Label("Precision", classes="field-label")
        yield radio_set("precision", "prec", PRECISIONS)
        yield Static("", id="prec-why")
        with Horizontal(classes="row"):
            for key, label in (
                ("micro", "Micro-batch per GPU"),
                ("gas", "Accumulation steps"),
                ("clip", "Clipping"),
            ):
                yield labelled(label, Input(id=key, type="number" if key == "clip" else "integer"))
        yield Static("", id="batch")
        # beside the batch fields they follow (below the switches they were out of sight on 24 rows)
        yield MemoryBar("GPU", id="bar-gpu")
        yield MemoryBar("RAM", id="bar-cpu")
        for key, label in SWITCHES:
            with Horizontal(classes="switch-row"):
                yield FormSwitch(id=key)
                yield Label(label)
        yield Static("", id="zeropp-why")
        yield Static("", id="save16-cost")

    def refresh_from_state(self) -> None:
        c = self.wizard.choices
        s = c.strategy
        if s is None:
            return
        supported = self.wizard.service.precisions_supported(c.hardware)
        choice = self.query_one("#precision", ChoiceSet)
        for p in PRECISIONS:
            button = self.query_one(f"#prec-{p}", RadioButton)
            button.disabled = supported[p] is not None and p != s.precision
            button.tooltip = supported[p]
            if p == s.precision:
                choice.choose(button)
        choice.sync_cursor()
        why = [f"{p}: {reason}" for p, reason in supported.items() if reason]
        self.query_one("#prec-why", Static).update(Text("\n".join(why), style="dim"))
        with self.prevent(Input.Changed, Switch.Changed):
            self.query_one("#micro", Input).value = str(s.micro_batch_size)
            self.query_one("#gas", Input).value = str(s.gradient_accumulation_steps)
            self.query_one("#clip", Input).value = f"{c.gradient_clipping:g}"
            self.query_one("#ckpt", Switch).value = s.activation_checkpointing
            self.query_one("#qwz", Switch).value = s.zero_quantized_weights
            self.query_one("#qgz", Switch).value = s.zero_quantized_gradients
            self.query_one("#hpz", Switch).value = s.zero_hpz_partition_size > 1
            self.query_one("#save16", Switch).value = c.save_16bit and s.zero_stage == 3 and s.mode == "train"
        training = s.mode == "train"
        for key in ("gas", "clip"):  # inference: no gradients to accumulate or clip
            self.query_one(f"#{key}", Input).disabled = not training
        self._update(s)

    def _strategy_on_screen(self, *, lenient: bool = False) -> Strategy:
        """The strategy the step shows. ``lenient`` (going Back): a number that does not parse, or none, keeps the
        stored one instead of raising (or becoming 1), and the rest is taken as shown."""
        s = self.wizard.choices.strategy
        assert s is not None

        def number(key: str, what: str, stored: int, example: int = 8) -> int:
            try:
                return parse_positive(self.query_one(f"#{key}", Input).value, what, example=example) or stored
            except DswizError:
                if not lenient:
                    raise
                return stored

        prec = next((p for p in PRECISIONS if self.query_one(f"#prec-{p}", RadioButton).value), s.precision)
        micro = number("micro", "micro-batch per GPU", s.micro_batch_size)
        gas = number("gas", "accumulation steps", s.gradient_accumulation_steps, example=4)
        return s.with_(
            precision=prec,
            micro_batch_size=micro,
            gradient_accumulation_steps=gas,
            activation_checkpointing=self.query_one("#ckpt", Switch).value,
            zero_quantized_weights=self.query_one("#qwz", Switch).value,
            zero_quantized_gradients=self.query_one("#qgz", Switch).value,
            zero_hpz_partition_size=s.gpus_per_node if self.query_one("#hpz", Switch).value else 1,
        )

    def _update(self, s: Strategy) -> None:
        self.query_one("#batch", Static).update(batch_text(s))
        notes = []
        for key, change in (
            ("ckpt", {"activation_checkpointing": True}),
            ("qwz", {"zero_quantized_weights": True}),
            ("qgz", {"zero_quantized_gradients": True}),
            ("hpz", {"zero_hpz_partition_size": s.gpus_per_node if s.gpus_per_node > 1 else 2}),
        ):
            switch = self.query_one(f"#{key}", Switch)
            # Checkpointing is refused only where it cannot act (inference); the machine's limits do not change.
            changed = s.with_(**change)
            check = changed.problems() if key == "ckpt" else self.option_problems(changed)
            problems = [] if switch.value else check
            switch.disabled = bool(problems)
            switch.tooltip = problems[0] if problems else None
            if problems:
                notes.append(f"{key}: {problems[0]}")
        if not s.uses_zeropp:  # why ZeRO++ cannot be switched on is in each switch's tooltip
            notes = [n for n in notes if n.startswith("ckpt")]
        self.query_one("#zeropp-why", Static).update(Text("\n".join(notes), style="dim"))
        save16 = self.query_one("#save16", Switch)
        applies = s.zero_stage == 3 and s.mode == "train"
        with self.prevent(Switch.Changed):  # off where it cannot act; the choice again once it can
            if not applies:
                save16.value = False
            elif save16.disabled:
                save16.value = self.wizard.choices.save_16bit
        save16.disabled = not applies
        cost = self.wizard.service.save_16bit_cost(self.wizard.model) if applies else ""
        self.query_one("#save16-cost", Static).update(Text(cost, style="dim"))
        cand = None
        if self.wizard.model is not None:
            try:
                cand = self.wizard.service.evaluate(self.wizard.choices, self.wizard.model, s)
            except DswizError as e:
                self.set_status(e.problem, error=True)
        cap = self.wizard.service.capacity(self.wizard.choices)
        gpu, cpu = self.query_one("#bar-gpu", MemoryBar), self.query_one("#bar-cpu", MemoryBar)
        gpu.show(cand.predicted.gpu_needed_bytes if cand else None, cap.gpu, cap.gpu_budget)
        cpu.show(cand.predicted.cpu_bytes if cand else None, cap.cpu, cap.cpu_budget)

    def _confirm_if_over(self, s: Strategy) -> None:
        """The planner predicts ``s`` does not fit: say so once; Next again keeps it (the user may know better)."""
        w = self.wizard
        if w.model is None or self._accepted_over == s:
            return
        cand = w.service.evaluate(w.choices, w.model, s)
        if cand.fits:
            return
        cap = w.service.capacity(w.choices)
        over = [  # judged as the planner and the bars judge: against the capacity less the share kept free
            f"{tier} {fmt_bytes(used)} of {fmt_bytes(capacity)}"
            + (
                f", {fmt_bytes(limit)} with {fmt_percent(1 - limit / capacity)} kept free"
                if limit < capacity
                else ""
            )
            for tier, used, capacity, limit in (
                ("GPU", cand.predicted.gpu_needed_bytes, cap.gpu, cap.gpu_budget),
                ("host RAM", cand.predicted.cpu_bytes, cap.cpu, cap.cpu_budget),
            )
            if used is not None and capacity is not None and limit is not None and used > limit
        ]
        self._accepted_over = s
        raise DswizError(
            "predicted not to fit" + (f" ({', '.join(over)})" if over else ""),
            # more micro-steps can hold more (accumulated gradients, a reduce bucket kept across them)
            "lower the micro-batch"
            + (" or the accumulation steps" if s.gradient_accumulation_steps > 1 else "")
            + (", or switch on activation checkpointing" if not s.activation_checkpointing else "")
            + "; Next again keeps it as it is",
        )

    @on(Input.Changed)
    @on(Switch.Changed)
    @on(RadioSet.Changed)
    def _changed(self) -> None:
        try:
            s = self._strategy_on_screen()
        except DswizError as e:
            self.set_status(e.problem, error=True)
            return
        self.set_status("")
        self._update(s)

    def _clip_on_screen(self) -> float:
        clip_text = self.query_one("#clip", Input).value.strip() or "0"
        try:
            clip = float(clip_text)
        except ValueError:
            raise DswizError(
                f"clipping must be a number, not {clip_text!r}", "type e.g. 1.0, or 0 for none"
            ) from None
        if clip < 0:
            raise DswizError("clipping cannot be negative", "type e.g. 1.0, or 0 for none")
        return clip

    def keep(self) -> None:
        c = self.wizard.choices
        c.strategy = self._strategy_on_screen(lenient=True)  # what does not parse stays as it was
        with contextlib.suppress(DswizError):
            c.gradient_clipping = self._clip_on_screen()
        self._store_save16()

    def _store_save16(self) -> None:
        save16 = self.query_one("#save16", Switch)
        if not save16.disabled:  # only where it acts (stage 3 training): the choice stays for when it does
            self.wizard.choices.save_16bit = save16.value

    def save(self) -> None:
        s = self._strategy_on_screen()
        clip = self._clip_on_screen()
        problems = self.option_problems(s)
        if problems:
            raise DswizError(problems[0], "change the highlighted option")
        self._confirm_if_over(s)
        self.wizard.choices.strategy = s
        self.wizard.choices.gradient_clipping = clip
        self._store_save16()
