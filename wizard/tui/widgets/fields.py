"""The form pieces every step composes: a labelled field in a row, a radio set that answers like a form field, and
a switch that leaves Enter to the form.

Form keys, the same in every step: Enter submits the focused field (a radio set takes its highlighted option) and
moves on when the step is complete; Space toggles; in a radio set the arrows move between the options that are
offered (never onto a disabled one, never wrapping round past one), and typing an option's first letter or digit
picks it and moves to the next field.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from textual import events
from textual._widget_navigation import find_next_enabled_no_wrap
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.widget import Widget
from textual.widgets import DataTable, Label, RadioButton, RadioSet, Switch


class FieldSubmitted(Message):
    """Enter on a field that has no Enter of its own: the step moves on when it is complete."""


def labelled(label: str, *widgets: Widget) -> Vertical:
    """A column of a ``.row``: the label above its widget(s)."""
    return Vertical(Label(label, classes="field-label"), *widgets, classes="field")


class ChoiceSet(RadioSet):
    """A RadioSet whose cursor only visits offered options and always starts on the chosen one."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("down,right", "next_button", "Next option", show=False),
        Binding("up,left", "previous_button", "Previous option", show=False),
        Binding("space", "toggle_button", "Choose", show=False),
        Binding("enter", "submit", "Choose and go on", show=False),
    ]

    def _move(self, direction: int) -> None:
        found = find_next_enabled_no_wrap(self.children, anchor=self._selected, direction=direction)  # type: ignore[arg-type]
        if found is not None:
            self._selected = found

    def action_previous_button(self) -> None:
        self._move(-1)

    def action_next_button(self) -> None:
        self._move(1)

    def action_submit(self) -> None:
        button = self._highlighted()
        if button is not None and not button.disabled and not button.value:
            button.value = True
        self.post_message(FieldSubmitted())

    def _highlighted(self) -> RadioButton | None:
        if self._selected is None:
            return None
        node = self._nodes[self._selected]
        return node if isinstance(node, RadioButton) else None

    def choose(self, button: RadioButton) -> None:
        """Make ``button`` the chosen option and switch the others off here: RadioSet switches the previous one off
        only when the button's Changed message reaches it, and a handler of a RadioSet.Changed (the user's click
        on another set) runs with that message prevented, which left two options of this set chosen."""
        with self.prevent(RadioButton.Changed):  # switched off directly, RadioSet would switch them back on
            for other in self.query(RadioButton):
                if other is not button and other.value:
                    other.value = False
        if not button.value:
            button.value = True
        self._pressed_button = button  # RadioSet's own record of the chosen option, for the next click
        self._selected = list(self.query(RadioButton)).index(button)

    def sync_cursor(self) -> None:
        """Put the cursor on the chosen option (a disabled option never keeps the highlight)."""
        buttons = list(self.query(RadioButton))
        chosen = next((i for i, b in enumerate(buttons) if b.value), None)
        if chosen is None:
            chosen = next((i for i, b in enumerate(buttons) if not b.disabled), None)
        self._selected = chosen

    def on_key(self, event: events.Key) -> None:
        """A letter or digit picks the first offered option whose label starts with it, then focus moves on."""
        char = event.character
        if not char or not char.isalnum() or len(char) != 1:
            return
        for i, button in enumerate(self.query(RadioButton)):
            if not button.disabled and str(button.label).lower().startswith(char.lower()):
                event.stop()
                event.prevent_default()
                self._selected = i
                if not button.value:
                    button.value = True
                self.screen.focus_next()
                return


class FormSwitch(Switch):
    """Space toggles; Enter goes on with the form."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "toggle_switch", "Toggle", show=False),
        Binding("enter", "submit", "Go on", show=False),
    ]

    def action_submit(self) -> None:
        self.post_message(FieldSubmitted())


class ChoiceTable(DataTable[object]):
    """A table of choices: Enter chooses the row under the cursor and goes on (a click only chooses)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "choose_and_go_on", "Choose", show=False)]

    def action_choose_and_go_on(self) -> None:
        self.action_select_cursor()
        self.post_message(FieldSubmitted())


class Choice(RadioButton):
    """A radio button whose mark tells chosen from not by its shape, ● and ○, not by colour alone (Textual's draws
    ● for both): under NO_COLOR, on a monochrome terminal and in a copy of the screen's text they read apart."""

    CHOSEN, NOT_CHOSEN = "\u25cf", "\u25cb"

    def render(self) -> Content:  # ToggleButton.render draws BUTTON_INNER between the button's sides
        self.BUTTON_INNER = self.CHOSEN if self.value else self.NOT_CHOSEN
        return super().render()


def radio_set(set_id: str, prefix: str, values: Iterable[object]) -> ChoiceSet:
    """One button per value, each with the id ``<prefix>-<value>`` the step reads back."""
    return ChoiceSet(*(Choice(str(v), id=f"{prefix}-{v}") for v in values), id=set_id)
