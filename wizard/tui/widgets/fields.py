"""The form pieces every step composes: a labelled field in a row, and a radio set with one button per value."""

from __future__ import annotations

from collections.abc import Iterable

from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Label, RadioButton, RadioSet


def labelled(label: str, *widgets: Widget) -> Vertical:
    """A column of a ``.row``: the label above its widget(s)."""
    return Vertical(Label(label, classes="field-label"), *widgets, classes="field")


def radio_set(set_id: str, prefix: str, values: Iterable[object]) -> RadioSet:
    """One button per value, each with the id ``<prefix>-<value>`` the step reads back."""
    return RadioSet(*(RadioButton(str(v), id=f"{prefix}-{v}") for v in values), id=set_id)
