"""The memory bar of the Precision and Strategy steps judges a prediction as the planner does: against the capacity
less the share kept free, so a config the planner says does not fit never shows a calm bar."""

from __future__ import annotations

from wizard.planner.types import Capacities
from wizard.tui.widgets.memory_bar import BAR_CELLS, bar_text

GiB = 2**30


def styles(text: object) -> set[str]:
    return {str(span.style) for span in text.spans}  # type: ignore[attr-defined]


def test_a_prediction_inside_the_share_kept_free_is_red_and_says_so() -> None:
    cap = Capacities(24 * GiB, None, None, 0.05)
    assert cap.gpu_budget == int(24 * GiB * 0.95)
    text = bar_text("GPU", int(23.3 * GiB), cap.gpu, budget=cap.gpu_budget)
    assert text.plain.endswith("23.3 GiB / 24.0 GiB  in the 5 % kept free")
    assert "bold red" in styles(text)
    # The same prediction judged against the whole card alone (no budget) reads as near, not over.
    plain = bar_text("GPU", int(23.3 * GiB), cap.gpu)
    assert "kept free" not in plain.plain and "bold red" not in styles(plain) and "yellow" in styles(plain)


def test_below_the_budget_is_calm_and_over_the_card_says_over() -> None:
    ok = bar_text("GPU", 10 * GiB, 24 * GiB, budget=int(22.8 * GiB))
    assert (
        ok.plain.endswith("10.0 GiB / 24.0 GiB") and styles(ok) >= {"green"} and "bold red" not in styles(ok)
    )
    over = bar_text("GPU", 30 * GiB, 24 * GiB, budget=int(22.8 * GiB))
    assert over.plain.endswith("  over") and "kept free" not in over.plain
    assert over.plain.count("█") == BAR_CELLS  # full, not past the end


def test_unknown_capacity_keeps_its_budget_unknown() -> None:
    cap = Capacities(None, None, None, 0.05)
    assert cap.gpu_budget is None and cap.cpu_budget is None
    assert "capacity unknown" in bar_text("CPU", GiB, cap.cpu, budget=cap.cpu_budget).plain
