"""Step 2 — Model: a preset, a hub id, a checkpoint folder, a local config.json or numbers; sequence length; target
global batch; training or inference; full fine-tuning, LoRA or QLoRA (with the rank). Next loads the model spec and
asks the planner for candidates."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Input, Label, RadioButton, Select, Static

from wizard.service import parse_positive
from wizard.strategy import Mode
from wizard.tui.screens.base import StepScreen
from wizard.tui.widgets.fields import Choice, ChoiceSet, labelled
from wizard.tuning import FineTune, make_finetune

# Distinct first letters: in a ChoiceSet the letter picks the option (F, L, Q).
_FINETUNE_BUTTONS = (
    ("full", "Full fine-tuning"),
    ("lora", "LoRA (frozen 16-bit base)"),
    ("qlora", "QLoRA (4-bit base)"),
)


class ModelStep(StepScreen):
    STEP = 1
    AUTO_FOCUS = "#model"
    HELP = (
        "Which model to plan for. A **preset** name (e.g. `llama-7b`), a Hugging Face **hub id** "
        "(`meta-llama/Llama-3.1-8B`: the local cache first, else only its `config.json` is fetched), a checkpoint "
        "folder, a `config.json`, or numbers (`params=7e9 layers=32 hidden=4096 ...`). Left empty, nothing is "
        "predicted: you choose the strategy by hand, as `dswiz config --yes` without --model. **Fine-tuning**: "
        "every weight, or LoRA adapters (PEFT) on a frozen base -- 16-bit, or 4-bit NF4 with QLoRA. "
        "**Sequence length** and **global batch** (samples per optimizer step; empty lets the planner choose) "
        "drive activation memory and throughput."
    )

    def body(self) -> ComposeResult:
        presets = self.wizard.service.model_presets()
        yield Label(
            "Model: preset, hub id, folder, config.json or numbers (empty: strategy by hand)",
            classes="field-label",
        )
        with Horizontal(classes="row"):
            yield Select([(p, p) for p in presets], prompt="preset…", id="model-preset", disabled=not presets)
            yield Input(placeholder="llama-7b | org/name | ./config.json | params=7e9", id="model")
        with Horizontal(classes="row"):
            yield labelled(
                "Sequence length (tokens)",
                Input(id="seq-len", type="integer", placeholder="empty: from the model"),
            )
            yield labelled(
                "Global batch (empty: planner picks)",
                Input(id="global-batch", type="integer"),
            )
        yield Label("Planning for", classes="field-label")
        yield ChoiceSet(
            Choice("Training", id="mode-train", value=True),
            Choice("Inference (ZeRO-Inference, stage 3)", id="mode-inference"),
            id="mode",
        )
        yield Label("Fine-tuning (training)", classes="field-label")
        yield ChoiceSet(
            *(
                Choice(label, id=f"finetune-{mode}", value=mode == "full")
                for mode, label in _FINETUNE_BUTTONS
            ),
            id="finetune",
        )
        with Horizontal(classes="row"):
            yield labelled("LoRA rank (LoRA / QLoRA)", Input(id="lora-rank", type="integer", value="8"))
        yield Static("", id="model-summary")

    # Back keeps what is typed here as typed, on the screen only: the answers are the model loaded and planned, which
    # only Next does (loading may fetch from the hub), so they are not stored until then.
    _typed_kept = False

    def keep(self) -> None:
        self._typed_kept = True

    def refresh_from_state(self) -> None:
        if self._typed_kept:  # back again after Back: the fields as they were left
            self._typed_kept = False
            return
        c = self.wizard.choices
        self.query_one("#model", Input).value = c.model_text
        self.query_one("#seq-len", Input).value = "" if c.seq_len is None else str(c.seq_len)
        self.query_one("#global-batch", Input).value = "" if c.global_batch is None else str(c.global_batch)
        self.query_one("#mode", ChoiceSet).choose(self.query_one(f"#mode-{c.mode}", RadioButton))
        self.query_one("#finetune", ChoiceSet).choose(
            self.query_one(f"#finetune-{c.finetune.mode}", RadioButton)
        )
        self.query_one("#lora-rank", Input).value = str(c.finetune.lora_rank)
        if self.wizard.model is not None:
            self._show_model()

    @on(Select.Changed, "#model-preset")
    def _preset(self, event: Select.Changed) -> None:
        if isinstance(event.value, str):
            self.query_one("#model", Input).value = event.value

    def _show_model(self) -> None:
        w = self.wizard
        model = w.model
        summary = self.query_one("#model-summary", Static)
        if model is None:
            summary.update(
                Text("No model: you choose the strategy by hand; nothing is predicted.", style="dim")
            )
            return
        desc = w.service.describe_model(model)
        seq = w.service.seq_len_for(w.choices, model)
        desc += f"\nplanned at sequence length {seq}" + (
            "" if w.choices.seq_len else " (the model's context, ≤ 2048)"
        )
        summary.update(Text(desc, style="green"))

    def save(self) -> None:
        text = self.query_one("#model", Input).value.strip()
        seq_len = parse_positive(
            self.query_one("#seq-len", Input).value, "sequence length", allow_empty=True, example=2048
        )
        batch = parse_positive(
            self.query_one("#global-batch", Input).value, "global batch", allow_empty=True, example=256
        )
        mode: Mode = "inference" if self.query_one("#mode-inference", RadioButton).value else "train"
        self.wizard.load_and_plan(
            text, seq_len=seq_len, global_batch=batch, mode=mode, finetune=self._finetune()
        )
        self._show_model()

    def _finetune(self) -> FineTune:
        """The Full/LoRA/QLoRA choice with the rank; alpha and targets as asked before (kept, not shown)."""
        asked = self.wizard.choices.finetune
        mode = next(m for m, _ in _FINETUNE_BUTTONS if self.query_one(f"#finetune-{m}", RadioButton).value)
        rank = parse_positive(self.query_one("#lora-rank", Input).value, "LoRA rank", allow_empty=True)
        return make_finetune(mode, rank=rank, alpha=asked.lora_alpha, targets=asked.lora_targets)
