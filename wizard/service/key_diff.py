"""What a write changes in an imported file, key by key (`dswiz --from FILE`, the Review step): every leaf key of
the file as imported against the file about to be written, as kept, changed, added or removed. Pure: dicts in,
rows out, so the Review step shows what was kept, not only a line diff of two texts."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

KeyState = Literal["kept", "changed", "added", "removed"]


@dataclass(frozen=True)
class KeyChange:
    key: str  # dotted path: "zero_optimization.stage"; list items by index: "optimizer.params.betas.0"
    state: KeyState
    old: Any = None  # the imported value (None when added)
    new: Any = None  # the value written (None when removed)


def leaves(value: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf of nested mappings, by dotted path, in the file's order; an empty section is a leaf."""
    for key, item in value.items():
        path = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            yield from leaves(item, path + ".")
        else:
            yield path, item


def key_diff(imported: Mapping[str, Any], written: Mapping[str, Any]) -> list[KeyChange]:
    """One row per leaf key of either file: the imported file's keys in its order, then the keys added. Values are
    compared as parsed (1e9 and 1000000000 are the same number; the text's spelling is the writer's concern)."""
    old = dict(leaves(imported))
    new = dict(leaves(written))
    rows = []
    for key, value in old.items():
        if key not in new:
            rows.append(KeyChange(key, "removed", old=value))
        elif _same(value, new[key]):
            rows.append(KeyChange(key, "kept", old=value, new=new[key]))
        else:
            rows.append(KeyChange(key, "changed", old=value, new=new[key]))
    rows += [KeyChange(key, "added", new=value) for key, value in new.items() if key not in old]
    return rows


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def summary(rows: list[KeyChange]) -> str:
    """ "40 keys kept, 1 changed, 2 added, 1 removed" (the states that occur)."""
    counts = {state: sum(r.state == state for r in rows) for state in ("kept", "changed", "added", "removed")}
    parts = [
        f"{n} {'key' if n == 1 else 'keys'} kept" if s == "kept" else f"{n} {s}"
        for s, n in counts.items()
        if n
    ]
    return ", ".join(parts) or "no keys"
