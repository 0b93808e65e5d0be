"""Reading a dataclass back from JSON that anyone may have edited: each field keeps a value only when it has the
field's declared type (``int | None``, ``float``, ``str``...), so a wrong-typed value becomes the field's default
instead of a crash later (``"notes": 1``, ``"host_ram_used_bytes": "5"``, NaN, a 5,000-digit number).

Used by the run directory's readers (run.json, metrics.jsonl); containers and nested dataclasses are the caller's.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping
from typing import Any

MAX_TEXT = 4096  # characters kept of one string
MAX_INT = 2**63  # an int field beyond this is not a count
_HINTS: dict[type, dict[str, tuple[type, ...]]] = {}


def _hint_types(cls: type) -> dict[str, tuple[type, ...]]:
    """Field name -> the plain types its annotation admits (``int | None`` -> (int, NoneType))."""
    if cls not in _HINTS:
        hints = typing.get_type_hints(cls)
        _HINTS[cls] = {
            name: tuple(typing.get_origin(a) or a for a in typing.get_args(h) or (h,))
            if typing.get_origin(h) in (typing.Union, types.UnionType)
            else (typing.get_origin(h) or h,)
            for name, h in hints.items()
        }
    return _HINTS[cls]


_WRONG = object()


def _typed(value: Any, allowed: tuple[type, ...]) -> Any:
    """``value`` when it has one of the ``allowed`` types (ints as floats too; floats finite, ints bounded)."""
    if value is None:
        return None if type(None) in allowed else _WRONG
    if isinstance(value, bool):
        return value if bool in allowed else _WRONG
    if isinstance(value, int) and (int in allowed or float in allowed):
        if abs(value) >= MAX_INT:
            return _WRONG
        return value if int in allowed else float(value)
    if isinstance(value, float) and float in allowed:
        return value if math.isfinite(value) else _WRONG
    if isinstance(value, str) and str in allowed:
        return value[:MAX_TEXT]
    return _WRONG


def typed_fields(cls: type, data: Mapping[str, Any], *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keys of ``data`` that are fields of the dataclass ``cls`` and hold a value of the field's type (tuples
    and nested types are left to the caller through ``skip``); a wrong-typed value is left out (its default)."""
    out: dict[str, Any] = {}
    for name, allowed in _hint_types(cls).items():
        if name in skip or name not in data:
            continue
        value = _typed(data[name], allowed)
        if value is not _WRONG:
            out[name] = value
    return out


def json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    kinds = {list: "an array", str: "a string", int: "a number", float: "a number"}
    return next((k for t, k in kinds.items() if isinstance(value, t)), type(value).__name__)
