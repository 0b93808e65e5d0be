"""ZeRO++ is stage 3's: quantized gradients (qgZ) as much as quantized weights and hpZ. In DeepSpeed 0.19.8 the
all-to-all group runtime/engine.py sets up for zero_quantized_gradients is used only by stage 3's gradient reduce
(runtime/zero/stage3.py, all2all_process_group); dswiz writes the key only at stage 3 (wizard/config/build.py)."""

from __future__ import annotations

from wizard.strategy import Strategy
from wizard.tui.strategy_text import with_stage


def test_quantized_gradients_below_stage_3_are_named_and_dropped_with_the_stage() -> None:
    qgz = Strategy(zero_stage=3, zero_quantized_gradients=True)
    assert qgz.uses_zeropp and qgz.problems() == []
    assert any("only acts at stage 3" in p for p in qgz.with_(zero_stage=2).problems())
    lowered = with_stage(qgz, 2)  # the wizard's stage radio
    assert lowered.zero_stage == 2 and not lowered.zero_quantized_gradients and lowered.problems() == []
