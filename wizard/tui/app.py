"""``dswiz``: the full-screen wizard. Thin: it holds the choices, moves between the six steps, asks before
quitting with unsaved choices, and detects the hardware in a worker so the first frame is not kept waiting."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import App
from textual.binding import Binding, BindingType

from wizard.errors import DswizError
from wizard.hardware.report import HardwareReport
from wizard.model import ModelSpec
from wizard.planner import Plan
from wizard.service import Choices, WizardService
from wizard.strategy import Mode
from wizard.tui.screens.base import StepScreen
from wizard.tui.screens.dialogs import ConfirmScreen, HelpScreen
from wizard.tui.screens.hardware import HardwareStep
from wizard.tui.screens.model import ModelStep
from wizard.tui.screens.multinode import MultiNodeStep
from wizard.tui.screens.precision import PrecisionStep
from wizard.tui.screens.review import ReviewStep
from wizard.tui.screens.strategy import StrategyStep
from wizard.tui.widgets.step_bar import STEP_TITLES
from wizard.tuning import FULL, FineTune

STEPS: tuple[type[StepScreen], ...] = (
    HardwareStep,
    ModelStep,
    StrategyStep,
    PrecisionStep,
    MultiNodeStep,
    ReviewStep,
)


class WizardApp(App[list[Path]]):
    """Returns the paths written (empty when the user quit without writing)."""

    CSS_PATH = "app.tcss"
    TITLE = "dswiz"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        # ctrl+ keys work from inside a text field too; the plain letters only where no field has focus.
        Binding("ctrl+n", "move(1)", "Next", key_display="^n"),
        Binding("ctrl+p", "move(-1)", "Back", key_display="^p"),
        Binding("f1", "help", "Help"),
        Binding("ctrl+q", "quit", "Quit", key_display="^q", priority=True),
        # Ctrl+C leaves as it does everywhere else (Textual's default only says "press ^q"), asking first when
        # there are choices to lose; from a text field too (no copy: the terminal's own selection copies).
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("n", "move(1)", "Next", show=False),
        Binding("b", "move(-1)", "Back", show=False),
        Binding("question_mark", "help", "Help", show=False),
        Binding("q", "quit", "Quit", show=False),
        Binding("escape", "leave_field", "Leave field", show=False),
    ]

    def __init__(
        self,
        *,
        choices: Choices,
        service: WizardService,
        detect: bool = True,
        model: ModelSpec | None = None,
        skip_answered: bool = False,
    ) -> None:
        super().__init__()
        self.skip_answered = skip_answered
        self.choices = choices
        self.service = service
        self.detect = detect and choices.hardware is None
        self.model = model  # the planner's ModelSpec, once the Model step loaded it
        self.plan: Plan | None = None
        self.detecting = False
        self.step = 0
        self.furthest_step = 0  # choices were made past the first step (then going Back keeps them)

    # ------------------------------------------------------------------ lifecycle

    def on_mount(self) -> None:
        for step in STEPS:
            self.install_screen(step(), name=step.__name__)
        self.push_screen(STEPS[0].__name__)
        if self.detect:
            self.detecting = True
            self.detect_hardware(self.choices.hardware_spec, skip=self.skip_answered)
        elif self.skip_answered:
            self.call_after_refresh(self.skip_answered_steps)

    @work(thread=True, exclusive=True, group="hardware")
    def detect_hardware(self, spec: str | None, skip: bool = False) -> None:
        """Read the hardware; ``skip``: then open on the first step not answered on the command line."""
        try:
            report: HardwareReport | DswizError = self.service.get_hardware(spec)
        except DswizError as e:
            report = e
        self.call_from_thread(self._hardware_ready, spec, report)
        if skip:
            self.call_from_thread(self.skip_answered_steps)

    def _hardware_ready(self, spec: str | None, report: HardwareReport | DswizError) -> None:
        self.detecting = False
        step = self.get_screen(HardwareStep.__name__)
        assert isinstance(step, HardwareStep)
        step.show_hardware(spec, report)
        advance, step.advance_when_ready = step.advance_when_ready, False
        if advance and self.step == 0 and isinstance(report, HardwareReport) and report.gpus:
            self.action_move(1)

    def skip_answered_steps(self) -> None:
        """``dswiz --hardware H``: the Hardware step is answered, open on Model; ``--model M`` (on H or on this
        machine's GPUs): plan and open on Strategy with the recommendation selected. A problem (no GPU, a model that does not load) stays on the
        step that asks about it, with the problem shown there."""
        hw = self.choices.hardware
        if self.step != 0 or hw is None or not hw.gpus:
            return
        if self.choices.hardware_spec is None and not self.choices.model_text:
            return  # this machine, detected: the Hardware step shows what was found
        step = self.get_screen(HardwareStep.__name__)
        assert isinstance(step, HardwareStep)
        if not step.card_memory_ok(hw):
            return  # --gpu-memory more than the card: the Hardware step says so, its field shows it
        if not self.choices.model_text:
            self.goto(1)
            return
        c = self.choices
        try:
            self.load_and_plan(c.model_text, seq_len=c.seq_len, global_batch=c.global_batch, mode=c.mode)
        except DswizError as e:
            self.goto(1)
            self.screen_status(e)
            return
        self.goto(2)

    def screen_status(self, e: DswizError) -> None:
        screen = self.get_screen(STEPS[self.step].__name__)
        if isinstance(screen, StepScreen):
            screen.show_error(e)

    def load_and_plan(
        self,
        text: str,
        *,
        seq_len: int | None,
        global_batch: int | None,
        mode: Mode,
        finetune: FineTune = FULL,
    ) -> None:
        """The Model step's answers: load the model, trained as ``finetune`` says (inference trains nothing), and
        plan for it (or, with no model, start the strategy to be chosen by hand); unchanged answers keep the plan
        and the strategy chosen since."""
        c = self.choices
        finetune = finetune if mode == "train" else FULL
        model = self.service.load_model(text, finetune) if text.strip() else None
        answers = (text, seq_len, global_batch, mode, finetune)
        changed = answers != (c.model_text, c.seq_len, c.global_batch, c.mode, c.finetune)
        c.model_text, c.seq_len, c.global_batch, c.mode, c.finetune = answers
        self.model = model
        if model is None:
            self.plan = None
            if changed or c.strategy is None:
                self.service.start_unplanned(c)
        elif changed or self.plan is None or c.strategy is None:
            self.plan = self.service.start_plan(c, model)

    # ------------------------------------------------------------------ navigation

    @property
    def dirty(self) -> bool:
        """Choices were made (or imported) that are not written to disk yet."""
        return self.furthest_step > 0 and not self.choices.written

    def on_step_screen_move(self, message: StepScreen.Move) -> None:
        self.action_move(message.delta)

    def action_move(self, delta: int) -> None:
        screen = self.screen
        if not isinstance(screen, StepScreen):
            return
        if delta > 0 and not screen.try_save():
            return
        if delta < 0:
            screen.keep()
        target = self.step + delta
        if target >= len(STEPS):
            self.exit(list(self.choices.written))
            return
        if target < 0:
            return
        self.goto(target)

    def goto(self, step: int) -> None:
        self.step = step
        self.furthest_step = max(self.furthest_step, step)
        self.switch_screen(STEPS[step].__name__)

    def action_leave_field(self) -> None:
        """Esc: no field has focus, so the one-letter keys (n, b, q, ?) act."""
        if isinstance(self.screen, StepScreen):
            self.screen.set_focus(None)

    def action_help(self) -> None:
        screen = self.screen
        if isinstance(screen, StepScreen):
            self.push_screen(HelpScreen(STEP_TITLES[screen.STEP], screen.HELP))

    async def action_quit(self) -> None:
        # Ctrl+C again at a dialog (the quit one): leave, as asked twice
        if isinstance(self.screen, ConfirmScreen):
            self.exit([] if self.dirty else list(self.choices.written))
            return
        if not self.dirty:
            self.exit(list(self.choices.written))
            return

        def answered(discard: bool | None) -> None:
            if discard:
                self.exit([])

        self.push_screen(
            ConfirmScreen(
                "Quit without writing? The choices you made are not saved anywhere yet.",
                yes="Quit, discard",
                no="Stay",
            ),
            answered,
        )
