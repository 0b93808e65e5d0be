"""Modal dialogs: help, and yes/no confirmations (quit with unsaved choices, overwrite files)."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Markdown, Static

KEYS_HELP = """\
| key | does |
|---|---|
| `enter` | submit the field (a table row, a radio option) and go on when the step is complete |
| `ctrl+n` (or `n` outside a text field) | next step (saves this one) |
| `ctrl+p` (or `b`) | previous step |
| `tab` / `shift+tab` | move between fields |
| `space` | switch a switch, pick a radio option |
| `↑` `↓` | move in a table or between the options offered |
| a letter or digit | in a radio set: pick the option it starts (`3`, `c` for cpu, `f` for fp16), then the next field |
| `m` | Strategy step: the largest micro-batch of every strategy |
| `pagedown` / `pageup` | scroll the step |
| `esc` | leave the text field (then `n`, `b`, `q` work); closes a dialog |
| `f1` (or `?`) | this help |
| `ctrl+q` (or `q`) | quit (asks first when choices are not written yet) |
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def __init__(self, step_title: str, step_help: str) -> None:
        super().__init__()
        self.step_title = step_title
        self.step_help = step_help

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog", classes="help"):  # scrolls on a small terminal (pagedown, the wheel)
            yield Markdown(f"## {self.step_title}\n\n{self.step_help}\n\n## Keys\n\n{KEYS_HELP}")
            yield Button("Close", id="close", variant="primary")

    @on(Button.Pressed, "#close")
    def _close(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """A question with two answers; dismisses with True for the first (the action), False to cancel."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,n", "answer(False)", "No"),
        Binding("y", "answer(True)", "Yes"),
    ]

    AUTO_FOCUS = "#no"  # Enter takes the safe answer; the action needs y or a click

    def __init__(self, question: str, yes: str, no: str = "Cancel") -> None:
        super().__init__()
        self.question = question
        self.yes_label = yes
        self.no_label = no

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.question, id="question")
            with Horizontal(id="answers"):
                yield Button(self.yes_label, id="yes", variant="error")
                yield Button(self.no_label, id="no", variant="primary")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)

    @on(Button.Pressed, "#yes")
    def _yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#no")
    def _no(self) -> None:
        self.dismiss(False)
