"""Step 2 — Model: a preset, a hub id, a checkpoint folder, a local config.json or numbers; sequence length; target
global batch; training or inference; full fine-tuning, LoRA or QLoRA (with the rank). Next loads the model spec and
asks the planner for candidates."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Input, Label, RadioButton, RadioSet, Select, Static

from wizard.errors import DswizError
from wizard.service import parse_positive
from wizard.strategy import Mode
from wizard.tui.screens.base import StepScreen
from wizard.tui.widgets.fields import labelled
from wizard.tuning import FineTune, make_finetune

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
        "folder, a `config.json`, or numbers (`params=7e9 layers=32 hidden=4096 ...`). **Fine-tuning**: every "
        "weight, or LoRA adapters (PEFT) on a frozen base -- 16-bit, or 4-bit NF4 with QLoRA. "
        "**Sequence length** and **global batch** (samples per optimizer step; empty lets the planner choose) "
        "drive activation memory and throughput."
    )

    def body(self) -> ComposeResult:
        presets = self.wizard.service.model_presets()
        yield Label(
            "Model: preset, hub id, checkpoint folder, config.json, or numbers", classes="field-label"
        )
        with Horizontal(classes="row"):
            yield Select([(p, p) for p in presets], prompt="preset…", id="model-preset", disabled=not presets)
            yield Input(
                placeholder="llama-7b  |  org/name  |  ./config.json  |  params=7e9 layers=32", id="model"
            )
        with Horizontal(classes="row"):
            yield labelled("Sequence length (tokens)", Input(id="seq-len", type="integer"))
            yield labelled(
                "Target global batch (samples/step; empty: planner picks)",
                Input(id="global-batch", type="integer"),
            )
        yield Label("Planning for", classes="field-label")
        with RadioSet(id="mode"):
            yield RadioButton("Training", id="mode-train", value=True)
            yield RadioButton("Inference (ZeRO-Inference, stage 3)", id="mode-inference")
        yield Label("Fine-tuning", classes="field-label")
        with RadioSet(id="finetune"):
            for mode, label in _FINETUNE_BUTTONS:
                yield RadioButton(label, id=f"finetune-{mode}", value=mode == "full")
        with Horizontal(classes="row"):
            yield labelled("LoRA rank (LoRA / QLoRA)", Input(id="lora-rank", type="integer", value="8"))
        yield Static("", id="model-summary")

    def refresh_from_state(self) -> None:
        c = self.wizard.choices
        self.query_one("#model", Input).value = c.model_text
        self.query_one("#seq-len", Input).value = str(c.seq_len)
        self.query_one("#global-batch", Input).value = "" if c.global_batch is None else str(c.global_batch)
        self.query_one("#mode-inference", RadioButton).value = c.mode == "inference"
        self.query_one("#mode-train", RadioButton).value = c.mode == "train"
        if self.wizard.model is not None:
            tuning = self.wizard.model.finetune
            for mode, _ in _FINETUNE_BUTTONS:
                self.query_one(f"#finetune-{mode}", RadioButton).value = tuning.mode == mode
            self.query_one("#lora-rank", Input).value = str(tuning.lora_rank)
            self._show_model()

    @on(Select.Changed, "#model-preset")
    def _preset(self, event: Select.Changed) -> None:
        if isinstance(event.value, str):
            self.query_one("#model", Input).value = event.value

    def _show_model(self) -> None:
        if self.wizard.model is None:
            return
        desc = self.wizard.service.describe_model(self.wizard.model)
        self.query_one("#model-summary", Static).update(Text(desc, style="green"))

    def save(self) -> None:
        c = self.wizard.choices
        text = self.query_one("#model", Input).value.strip()
        seq_len = parse_positive(self.query_one("#seq-len", Input).value, "sequence length")
        batch = parse_positive(self.query_one("#global-batch", Input).value, "global batch", allow_empty=True)
        mode: Mode = "inference" if self.query_one("#mode-inference", RadioButton).value else "train"
        tuning = self._finetune()
        model = self.wizard.service.load_model(text, tuning if mode == "train" else FineTune())
        before = self.wizard.model.finetune if self.wizard.model is not None else None
        changed = (text, seq_len, batch, mode) != (c.model_text, c.seq_len, c.global_batch, c.mode)
        changed = changed or before != model.finetune
        c.model_text, c.mode, c.global_batch = text, mode, batch
        c.seq_len = seq_len if seq_len is not None else c.seq_len
        self.wizard.model = model
        self._show_model()
        if changed or self.wizard.plan is None:
            self.wizard.plan = self.wizard.service.plan(c, model)
            plan = self.wizard.plan
            if not plan.candidates:
                raise DswizError("the planner found no candidate", "check the model numbers and the hardware")
            # An imported config keeps its own choices, on this hardware's topology; otherwise start from the
            # recommendation (or, when nothing fits, from the closest candidate so the Strategy step shows why).
            planned = (plan.best or plan.candidates[0]).strategy
            if c.strategy is None or c.imported_from is None:
                c.strategy = planned
            else:
                c.strategy = c.strategy.with_(nodes=planned.nodes, gpus_per_node=planned.gpus_per_node)
            c.global_batch = c.strategy.global_batch_size

    def _finetune(self) -> FineTune:
        mode = next(m for m, _ in _FINETUNE_BUTTONS if self.query_one(f"#finetune-{m}", RadioButton).value)
        rank = parse_positive(self.query_one("#lora-rank", Input).value, "LoRA rank", allow_empty=True)
        return make_finetune(mode, rank=rank)
