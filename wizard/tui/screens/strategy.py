"""Step 3 — Strategy: the planner's candidates with predicted GPU / host RAM / NVMe memory against capacity and
tokens/s; the recommendation selected and explained. Stage and offload can be chosen by hand: the planner
re-evaluates and the bars update live; combinations that cannot work are disabled, with the reason shown."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Collapsible, DataTable, Input, Label, RadioButton, RadioSet, Static

from wizard.errors import DswizError
from wizard.findings import Finding, Severity
from wizard.planner import Candidate, Plan
from wizard.strategy import OFFLOAD_DEVICES, Strategy, strategy_description
from wizard.tui.screens.base import StepScreen
from wizard.tui.strategy_text import advice_text, candidate_cells, fmt_rate, group_label, with_stage
from wizard.tui.widgets.fields import ChoiceSet, ChoiceTable, labelled, radio_set
from wizard.tui.widgets.max_batch_view import MaxBatchView
from wizard.tui.widgets.memory_bar import MemoryBar
from wizard.tui.widgets.nvme_path_field import NvmePathField

STAGES = (0, 1, 2, 3)


class StrategyStep(StepScreen):
    STEP = 2
    AUTO_FOCUS = "#candidates"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("m", "toggle_max_batch", "Max batch")]
    HELP = (
        "The planner's candidates, best first: predicted peak memory per GPU, host RAM and NVMe against what "
        "the machine has, and predicted tokens/s. **Enter** on a row chooses it and goes on. Or pick the ZeRO stage "
        "and offloads by hand below: the prediction updates at once. Options that cannot work are greyed out and "
        "the reason is listed under them. Press **m** for the largest micro-batch of every strategy."
    )

    def __init__(self) -> None:
        super().__init__()
        self.current: Candidate | None = None

    def body(self) -> ComposeResult:
        yield Static("", id="advice")
        yield ChoiceTable(id="candidates", cursor_type="row", zebra_stripes=True)
        with Collapsible(title="Largest micro-batch per strategy (m)", collapsed=True, id="max-batch-box"):
            yield MaxBatchView(id="max-batch")
        yield Label("Chosen", classes="section-title")
        yield Static("", id="chosen")
        yield MemoryBar("GPU", id="bar-gpu")
        yield MemoryBar("RAM", id="bar-cpu")
        yield MemoryBar("NVMe", id="bar-nvme")
        with Horizontal(classes="row", id="manual"):
            yield labelled("ZeRO stage", radio_set("stage", "stage", STAGES))
            yield labelled("Optimizer offload", radio_set("opt", "opt", OFFLOAD_DEVICES))
            yield labelled("Parameter offload", radio_set("param", "param", OFFLOAD_DEVICES))
        yield Static("", id="not-offered")
        yield NvmePathField(id="nvme")
        yield Label("Why", classes="section-title")
        yield Static("", id="reasons")

    def _columns(self, plan: Plan) -> list[str]:
        """The table's columns, narrow enough for 80 terminal columns: precision only when the candidates differ
        in it, NVMe only when one uses it."""
        cols = ["", "ZeRO", "offload", "ckpt", "batch", "GPU GiB", "RAM GiB"]
        if any(c.predicted.nvme_bytes for c in plan.candidates):
            cols.append("NVMe GiB")
        if len({c.strategy.precision for c in plan.candidates}) > 1:
            cols.insert(4, "prec")
        return [*cols, "tok/s", "fits"]

    def refresh_from_state(self) -> None:
        plan = self.wizard.plan
        table = self.query_one("#candidates", DataTable)
        chosen = self.wizard.choices.strategy
        table.display = plan is not None
        if plan is None:
            self.query_one("#advice", Static).update(
                Text(
                    "No model, so nothing is predicted: choose the ZeRO stage and offloads below "
                    "(or name a model in the Model step for the planner's ranking).",
                    style="yellow",
                )
            )
            self.show(None, strategy=chosen)
            self.query_one("#stage", RadioSet).focus()
            return
        self._fill_table(table, plan)
        self.query_one("#advice", Static).update(advice_text(plan))
        match = next((c for c in plan.candidates if c.strategy == chosen), None)
        if match is not None:
            table.move_cursor(row=plan.candidates.index(match))
        # the notes above the table stay in view (focusing the table would scroll them off)
        self.call_after_refresh(self.query_one("#body").scroll_home, animate=False)
        self.show(match or self._evaluate(chosen), strategy=chosen)
        try:
            max_batch = self.wizard.service.max_batch_table(self.wizard.choices, self.wizard.model)
        except DswizError as e:
            self.set_status(e.problem, error=True)
            max_batch = ()
        self.query_one("#max-batch", MaxBatchView).show_lines(max_batch)

    def _fill_table(self, table: DataTable[object], plan: Plan) -> None:
        """One row per candidate; each column as wide as its widest cell, so every cell shows whole."""
        table.clear(columns=True)
        columns = self._columns(plan)
        rows = [
            {
                col: Text(v) if isinstance(v, str) else v
                for col, v in candidate_cells(c, best=c is plan.best).items()
            }
            for c in plan.candidates
        ]
        for col in columns:
            width = max([len(col), *(r[col].cell_len for r in rows)])
            table.add_column(col, key=col or "mark", width=width)
        for i, cells in enumerate(rows):
            table.add_row(*(cells[col] for col in columns), key=str(i))

    def action_toggle_max_batch(self) -> None:
        box = self.query_one("#max-batch-box", Collapsible)
        box.collapsed = not box.collapsed

    def _evaluate(self, strategy: Strategy | None) -> Candidate | None:
        if strategy is None or self.wizard.model is None:
            return None
        try:
            return self.wizard.service.evaluate(self.wizard.choices, self.wizard.model, strategy)
        except DswizError as e:
            self.set_status(e.problem, error=True)
        return None

    def show(self, cand: Candidate | None, strategy: Strategy | None = None) -> None:
        """Display ``strategy`` (default: the candidate's) as the chosen one, with the planner's prediction
        ``cand`` when it has one: summary, bars, reasons, and the manual controls."""
        self.current = cand
        strategy = strategy or (cand.strategy if cand else self.wizard.choices.strategy)
        if strategy is None:
            return
        self.wizard.choices.strategy = strategy
        cap = self.wizard.service.capacity(self.wizard.choices)
        summary = Text(strategy_description(strategy), style="bold")
        if cand is not None:
            summary.append(f"   {fmt_rate(cand.predicted.tokens_per_sec)} tokens/s")
            summary.append(f"   MFU {cand.predicted.mfu:.0%}")
            if not cand.fits:
                summary.append("   does not fit", style="bold red")
        self.query_one("#chosen", Static).update(summary)
        for tier, used, capacity, budget in (
            ("gpu", cand.predicted.gpu_needed_bytes if cand else None, cap.gpu, cap.gpu_budget),
            ("cpu", cand.predicted.cpu_bytes if cand else None, cap.cpu, cap.cpu_budget),
            ("nvme", cand.predicted.nvme_bytes if cand else None, cap.nvme, None),
        ):
            self.query_one(f"#bar-{tier}", MemoryBar).show(used, capacity, budget)
        reasons = Text("\n".join(f"• {r}" for r in cand.reasons) if cand else "", style="italic")
        self.query_one("#reasons", Static).update(reasons)
        self._sync_controls(strategy)
        self._sync_nvme(strategy)

    def _sync_controls(self, s: Strategy) -> None:
        not_offered: list[str] = []
        groups = (
            ("stage", STAGES, lambda v: with_stage(s, v), s.zero_stage),
            ("opt", OFFLOAD_DEVICES, lambda v: s.with_(offload_optimizer=v), s.offload_optimizer),
            ("param", OFFLOAD_DEVICES, lambda v: s.with_(offload_param=v), s.offload_param),
        )
        for group, values, change, current in groups:
            for value in values:
                button = self.query_one(f"#{group}-{value}", RadioButton)
                problems = [] if value == current else self.option_problems(change(value))
                button.disabled = bool(problems)
                button.tooltip = "; ".join(problems) or None
                if value == current:
                    self.query_one(f"#{group}", ChoiceSet).choose(button)
                if problems:
                    not_offered.append(f"{group_label(group)} {value}: {problems[0]}")
        for group, *_ in groups:
            self.query_one(f"#{group}", ChoiceSet).sync_cursor()
        text = Text("Not offered:\n", style="bold dim") if not_offered else Text()
        text.append("\n".join(f"  {line}" for line in not_offered), style="dim")
        self.query_one("#not-offered", Static).update(text)

    def _sync_nvme(self, s: Strategy) -> None:
        """The NVMe directory field, shown while anything is offloaded to NVMe (default: on the NVMe drive with
        the most room), checked against the planner's predicted NVMe bytes."""
        field = self.query_one("#nvme", NvmePathField)
        field.display = s.offloads_to_nvme
        if not field.display:
            return
        c = self.wizard.choices
        if not c.nvme_path:
            c.nvme_path = self.wizard.service.suggest_nvme_path(c.hardware) or ""
        if field.value != c.nvme_path:
            field.set_value(c.nvme_path)
        self._check_nvme()

    def _check_nvme(self) -> list[Finding]:
        need = self.current.predicted.nvme_bytes if self.current is not None else None
        findings = self.wizard.service.check_nvme_path(self.wizard.choices, need)
        self.query_one("#nvme", NvmePathField).show_findings(findings)
        return findings

    @on(Input.Changed, "#nvme-path")
    def _nvme_typed(self, event: Input.Changed) -> None:
        self.wizard.choices.nvme_path = event.value.strip()
        self._check_nvme()

    @on(DataTable.RowSelected, "#candidates")
    def _row_chosen(self, event: DataTable.RowSelected) -> None:
        plan = self.wizard.plan
        if plan is not None and event.row_key.value is not None:
            self.show(plan.candidates[int(event.row_key.value)])

    @on(RadioSet.Changed)
    def _manual(self, event: RadioSet.Changed) -> None:
        s = self.wizard.choices.strategy
        if s is None or event.pressed.id is None:
            return
        group, value = event.pressed.id.split("-", 1)
        if group == "stage":
            new = with_stage(s, int(value))
        elif group == "opt":
            new = s.with_(offload_optimizer=value)
        else:
            new = s.with_(offload_param=value)
        if new == s:
            return
        self.set_status("")
        # The planner's best candidate for this stage/offload combination, when it ranked one; else its
        # prediction for exactly this strategy. Without either the hand-made choice still counts.
        like = self.wizard.service.best_candidate_like(self.wizard.plan, new)
        if like is not None:
            self.show(like)
        else:
            self.show(self._evaluate(new), strategy=new)

    def save(self) -> None:
        s = self.wizard.choices.strategy
        if s is None:
            raise DswizError("no strategy chosen", "press Enter on a row of the table")
        problems = s.problems()
        if problems:
            raise DswizError(problems[0], "choose another stage or offload")
        if s.offloads_to_nvme:
            error = next((f for f in self._check_nvme() if f.severity is Severity.ERROR), None)
            if error is not None:
                raise DswizError(f"NVMe directory: {error.what}", error.fix)
