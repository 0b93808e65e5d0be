"""What the fuzz suites (tests/unit/test_fuzz_*.py) share: deterministic settings, the values that broke readers
(numbers as strings, NaN, 1e308, "0x80", bools, huge integers, markup, ssh options), a mutator of real inputs, and
``total``: a reader call that may give a value or a finding (DswizError naming the problem and the fix), never
anything else.

A case is one input to a reader; each hypothesis example carries a batch of them (``batch``, iterated with
``cases``). The suites call ``total``, ``holds`` and ``cases`` through this module (``fz.total``), so a tally script
can swap them for counting versions and run a suite against older code without stopping at the first failure.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from wizard.errors import DswizError

T = TypeVar("T")


def fuzz_settings(examples: int) -> Any:
    """Deterministic (same cases every run, no example database), no deadline (the CPU is shared)."""
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


HUGE_DIGITS = "9" * 5000  # above Python's 4,300-digit int() limit, which raises ValueError

NASTY_SCALARS: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2,
    7,
    2**31,
    2**63,
    10**30,
    1e308,
    -1e308,
    float("nan"),
    float("inf"),
    -float("inf"),
    0.5,
    1.0,
    "4096",
    "0x80",
    "",
    "auto",
    "nan",
    "1e400",
    "[x]",
    "[bold]x[/]",
    "-oProxyCommand=x",
    "a b",
    "\x00",
    "é",
    [],
    {},
    [1, 2],
    {"a": 1},
]

nasty = st.sampled_from(NASTY_SCALARS).map(copy.deepcopy)  # a fresh container each time: readers may keep it
scalars = (
    nasty
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=8)
    | st.booleans()
)
json_like = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def mutated(
    draw: st.DrawFn, base: Any, extra_keys: Sequence[str] = (), values: st.SearchStrategy[Any] = json_like
) -> Any:
    """``base`` with 1-4 changes at any depth: a value replaced, a key deleted, a known key added."""
    out = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 4))):
        node = out
        while True:
            if isinstance(node, dict):
                keys = sorted(node, key=str)
                action = draw(st.integers(0, 9))
                if not keys or (action == 0 and extra_keys):
                    node[draw(st.sampled_from(list(extra_keys) or ["x"]))] = draw(values)
                    break
                key = draw(st.sampled_from(keys))
                if action == 1:
                    del node[key]
                    break
                if isinstance(node[key], (dict, list)) and node[key] and draw(st.booleans()):
                    node = node[key]
                    continue
                node[key] = draw(values)
                break
            if isinstance(node, list) and node:
                i = draw(st.integers(0, len(node) - 1))
                if isinstance(node[i], (dict, list)) and node[i] and draw(st.booleans()):
                    node = node[i]
                    continue
                node[i] = draw(values)
                break
            return draw(values)  # the whole thing replaced
    return out


def total(call: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """A reader's value, or None when it gave a finding (a DswizError that names the problem and the fix)."""
    try:
        return call(*args, **kwargs)
    except DswizError as e:
        assert e.problem.strip() and e.fix.strip(), f"a finding without a problem or a fix: {e!r}"
        return None


def holds(condition: bool, what: str) -> None:
    """An invariant of a reader's value (a count is a positive int, a rate is finite...)."""
    assert condition, what


def cases(items: Sequence[T]) -> Iterator[T]:
    """The inputs of one example, one by one: each example carries a batch of inputs, because hypothesis's cost
    is per example (a batch of 8 costs little more than one), so 10,000 inputs stay within seconds."""
    yield from items


def batch(strategy: st.SearchStrategy[T], size: int = 8) -> st.SearchStrategy[list[T]]:
    return st.lists(strategy, min_size=size, max_size=size)


def with_a_number_replaced(draw: st.DrawFn, text: str, spellings: Sequence[str]) -> str:
    """``text`` (JSON) with one of its numbers spelt another way: 5,000 digits, NaN, 1e400, in quotes..."""
    starts = [i for i, c in enumerate(text) if c.isdigit() and (i == 0 or not text[i - 1].isdigit())]
    if not starts:
        return text
    i = j = draw(st.sampled_from(starts))
    while j < len(text) and (text[j].isdigit() or text[j] in ".e-+"):
        j += 1
    return text[:i] + draw(st.sampled_from(list(spellings))) + text[j:]
