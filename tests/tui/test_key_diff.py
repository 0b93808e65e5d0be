"""The Review step's key-level diff against an imported file (wizard.service.key_diff): pure dicts in, rows out."""

from __future__ import annotations

from wizard.service.key_diff import key_diff, summary


def test_a_stage_change_is_one_changed_key_and_the_rest_kept() -> None:
    imported = {
        "train_micro_batch_size_per_gpu": 2,
        "zero_optimization": {"stage": 3, "stage3_max_live_parameters": 1e9, "overlap_comm": True},
        "comms_logger": {"enabled": True},
    }
    written = {
        "train_micro_batch_size_per_gpu": 2,
        "zero_optimization": {"stage": 2, "stage3_max_live_parameters": 1000000000, "overlap_comm": True},
        "comms_logger": {"enabled": True},
        "steps_per_print": 10,
    }
    rows = {r.key: r for r in key_diff(imported, written)}
    assert rows["zero_optimization.stage"].state == "changed"
    assert (rows["zero_optimization.stage"].old, rows["zero_optimization.stage"].new) == (3, 2)
    assert rows["zero_optimization.stage3_max_live_parameters"].state == "kept"  # 1e9 is 1000000000
    assert rows["comms_logger.enabled"].state == "kept" and rows["steps_per_print"].state == "added"
    assert summary(list(rows.values())) == "4 keys kept, 1 changed, 1 added"


def test_removed_keys_and_booleans_are_not_numbers() -> None:
    rows = key_diff({"a": {"b": True, "c": 1}}, {"a": {"b": 1}})
    assert [(r.key, r.state) for r in rows] == [("a.b", "changed"), ("a.c", "removed")]
