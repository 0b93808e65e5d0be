"""Asked on `q` when the dashboard runs inside `dswiz launch`: leave the job running, or stop it."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class QuitDialog(ModalScreen[str]):
    """Dismisses with "stop" (stop the job, then quit), "leave" (quit, the job keeps running) or "cancel"."""

    BINDINGS: ClassVar[list[BindingType]] = [
        ("escape", "dismiss('cancel')", "Cancel"),
        ("s", "dismiss('stop')", "Stop"),
        ("l", "dismiss('leave')", "Leave"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-dialog"):
            yield Label("Quit the monitor. Stop the training job too?")
            with Horizontal():
                yield Button("Stop the job [s]", id="stop", variant="error")
                yield Button("Leave it running [l]", id="leave", variant="primary")
                yield Button("Cancel [esc]", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "cancel")
