"""What every step shares: the breadcrumb, a scrollable body, Back / Next, the footer.

A step reads the App's ``choices`` when it is shown (``refresh_from_state``) and saves into them when the user
moves on (``save``); it posts ``StepScreen.Move`` and the App decides where to go ("attributes down, messages up").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, cast

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, Static

from wizard.errors import DswizError
from wizard.strategy import Strategy
from wizard.tui.widgets.fields import FieldSubmitted
from wizard.tui.widgets.step_bar import STEP_TITLES, StepBar

if TYPE_CHECKING:
    from wizard.tui.app import WizardApp


class StepScreen(Screen[None]):
    STEP: ClassVar[int] = 0
    HELP: ClassVar[str] = ""

    @dataclass
    class Move(Message):
        """The user asked to go ``delta`` steps (after this step saved its choices, when moving forward)."""

        delta: int

    @property
    def wizard(self) -> WizardApp:
        return cast("WizardApp", self.app)

    def compose(self) -> ComposeResult:
        yield StepBar(self.STEP)
        with VerticalScroll(id="body"):
            yield from self.body()
        with Horizontal(id="nav"):
            # compact (one line, no border): on 24 rows the step's own fields get the room
            back = Button("← Back", id="back", disabled=self.STEP == 0, compact=True)
            back.can_focus = False  # Tab from the last field lands on Next; Back is ctrl+p (or b, or a click)
            yield back
            yield Static("", id="status")
            last = len(STEP_TITLES) - 1 == self.STEP
            yield Button("Done" if last else "Next →", id="next", variant="primary", compact=True)
        yield Footer()

    def body(self) -> ComposeResult:  # pragma: no cover - every step overrides it
        yield from ()

    _pending_status: Text | None = None

    def on_mount(self) -> None:
        self.refresh_from_state()
        self._show_pending_status()

    def on_screen_resume(self) -> None:
        self.refresh_from_state()
        self._show_pending_status()

    def refresh_from_state(self) -> None:
        """Show the current choices (called each time the step is shown)."""

    def save(self) -> None:
        """Store what is on screen into the choices; raise DswizError to stay on this step."""

    def keep(self) -> None:
        """Going Back: store what is typed on screen as far as it is valid, asking and checking nothing else, so
        that coming back shows it again (Next checks it all, as ``save`` does). Steps whose fields the choices
        hold another way store nothing."""

    def option_problems(self, s: Strategy) -> list[str]:
        """Why ``s`` cannot be offered on this hardware with this model (empty: it can)."""
        w = self.wizard
        return w.service.option_problems(s, w.choices, w.model)

    def set_status(self, message: str, *, error: bool = False) -> None:
        """The line between Back and Next. Said before the step is on screen (a problem found while the wizard
        opens on it), it is shown when the step is."""
        text = Text(message, style="bold red" if error else "dim")
        try:
            self.query_one("#status", Static).update(text)
        except NoMatches:
            self._pending_status = text

    def show_error(self, e: DswizError) -> None:
        """A problem and its fix, in the status line."""
        self.set_status(f"{e.problem}" + (f" — {e.fix}" if e.fix else ""), error=True)

    def _show_pending_status(self) -> None:
        if self._pending_status is not None:
            text, self._pending_status = self._pending_status, None
            self.query_one("#status", Static).update(text)

    def try_save(self) -> bool:
        try:
            self.save()
        except DswizError as e:
            self.show_error(e)
            return False
        return True

    # Enter: the focused field is submitted, and the step moves on when it is complete (try_save says whether).

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if not self.submitted(event.input):
            self.go_on()

    def submitted(self, field: Input) -> bool:
        """Enter in ``field``: True when the step handled it itself (e.g. reading the hardware spec)."""
        return False

    def go_on(self) -> None:
        """Enter on a field: the next step, when this one saves."""
        self.post_message(self.Move(+1))

    @on(FieldSubmitted)
    def _field_submitted(self, event: FieldSubmitted) -> None:
        event.stop()
        self.go_on()

    @on(Button.Pressed, "#next")
    def _next(self) -> None:
        self.go_on()

    @on(Button.Pressed, "#back")
    def _back(self) -> None:
        self.post_message(self.Move(-1))
