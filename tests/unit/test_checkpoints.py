"""Recognising DeepSpeed checkpoints by their layout (the file names engine.save_checkpoint writes), every way
one can be wrong, and the hint the verdict shows. Shard files here are empty or sparse: only names and sizes
matter to this layer; tests/integration/test_consolidate.py uses a real checkpoint."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from wizard.checkpoints import (
    MEMORY_FACTOR,
    check_memory,
    checkpoint_hint,
    checkpoint_paths_from_log,
    consolidate_command,
    find_checkpoint_roots,
    inspect_checkpoint,
    list_tags,
)
from wizard.errors import DswizError

ZERO3 = ["zero_pp_rank_{r}_mp_rank_00_model_states.pt", "zero_pp_rank_{r}_mp_rank_00_optim_states.pt"]
ZERO2_BF16 = ["bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt"]


def make_checkpoint(
    root: Path,
    tag: str = "global_step10",
    *,
    ranks: int = 2,
    layout: list[str] = ZERO3,
    latest: bool = True,
    sizes: int = 0,
    extra: tuple[str, ...] = (),
) -> Path:
    tag_dir = root / tag
    tag_dir.mkdir(parents=True, exist_ok=True)
    names = [pattern.format(r=r) for r in range(ranks) for pattern in layout]
    if layout is ZERO2_BF16:
        names.append("mp_rank_00_model_states.pt")
    for name in [*names, *extra]:
        with open(tag_dir / name, "wb") as fh:
            fh.truncate(sizes)  # sparse: a "large" checkpoint costs no disk
    if latest:
        (root / "latest").write_text(tag)
    return root


def problem(excinfo: pytest.ExceptionInfo[DswizError]) -> str:
    return excinfo.value.problem


def test_zero3_checkpoint_from_latest(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt", sizes=1000)
    ckpt = inspect_checkpoint(root)
    assert ckpt.root == root and ckpt.tag == "global_step10" and ckpt.tag_dir == root / "global_step10"
    assert ckpt.zero_stage == 3 and ckpt.stage_text == "ZeRO-3" and ckpt.world_size == 2
    assert [f.name for f in ckpt.files] == [
        "zero_pp_rank_0_mp_rank_00_model_states.pt",
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "zero_pp_rank_1_mp_rank_00_model_states.pt",
        "zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ]
    assert ckpt.size_bytes == 4000 and ckpt.optimizer_bytes == 2000
    assert ckpt.weights_estimate_bytes == 2000 // 3  # Adam: fp32 weights + two states of the same size
    assert ckpt.memory_needed_bytes == int(4000 * MEMORY_FACTOR)


def test_zero2_bf16_checkpoint_and_tag_dir_given_directly(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt", layout=ZERO2_BF16, ranks=3, sizes=10)
    ckpt = inspect_checkpoint(root / "global_step10")  # the tag folder itself
    assert ckpt.root == root and ckpt.tag == "global_step10"
    assert ckpt.zero_stage is None and ckpt.stage_text == "ZeRO-1/2" and ckpt.world_size == 3
    assert ckpt.size_bytes == 40  # 3 optimizer shards + mp_rank_00_model_states.pt


def test_explicit_tag_wins_over_latest(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt", tag="global_step5")
    make_checkpoint(root, tag="global_step10")
    assert (root / "latest").read_text() == "global_step10"
    assert inspect_checkpoint(root, "global_step5").tag == "global_step5"
    assert list_tags(root) == ["global_step5", "global_step10"]  # natural order, not 10 < 5


def test_missing_path_and_file_instead_of_dir(tmp_path: Path) -> None:
    with pytest.raises(DswizError) as e:
        inspect_checkpoint(tmp_path / "nope")
    assert "does not exist" in problem(e)
    root = make_checkpoint(tmp_path / "ckpt")
    with pytest.raises(DswizError) as e:
        inspect_checkpoint(root / "latest")
    assert "is a file" in problem(e) and str(root) in (e.value.fix or "")


def test_not_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("hi")
    with pytest.raises(DswizError) as e:
        inspect_checkpoint(tmp_path / "data")
    assert "not a DeepSpeed checkpoint directory" in problem(e)
    assert "save_checkpoint" in (e.value.fix or "")


def test_no_latest_and_no_tag_lists_the_tags(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt", tag="step2", latest=False)
    make_checkpoint(root, tag="step10", latest=False)
    with pytest.raises(DswizError) as e:
        inspect_checkpoint(root)
    assert "no `latest` file" in problem(e)
    assert e.value.fix == "pass --tag with one of: step2, step10"


def test_trainer_output_dir_points_to_its_checkpoint_folders(tmp_path: Path) -> None:
    out = tmp_path / "output"
    make_checkpoint(out / "checkpoint-500", tag="global_step500")
    make_checkpoint(out / "checkpoint-1000", tag="global_step1000")
    with pytest.raises(DswizError) as e:
        inspect_checkpoint(out)
    assert "directories below it do" in problem(e)
    assert str(out / "checkpoint-1000") in (e.value.fix or "")  # the newest, in natural order


def test_tag_not_found(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt")
    with pytest.raises(DswizError) as e:
        inspect_checkpoint(root, "global_step99")
    assert "tag 'global_step99' not found" in problem(e) and "global_step10" in problem(e)


def test_latest_names_a_missing_tag(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt")
    (root / "latest").write_text("global_step20")
    with pytest.raises(DswizError) as e:
        inspect_checkpoint(root)
    assert "latest names tag 'global_step20'" in problem(e) and "available: global_step10" in problem(e)


def test_tag_given_with_a_tag_dir_that_disagrees(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt")
    with pytest.raises(DswizError) as e:
        inspect_checkpoint(root / "global_step10", "other")
    assert "already the checkpoint of tag 'global_step10'" in problem(e)


def test_stage0_checkpoint_has_nothing_to_consolidate(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt", layout=[], ranks=0, extra=("mp_rank_00_model_states.pt",))
    with pytest.raises(DswizError) as e:
        inspect_checkpoint(root)
    assert "no optimizer shards" in problem(e) and "stage 0" in problem(e)
    assert "mp_rank_00_model_states.pt" in (e.value.fix or "") and "['module']" in (e.value.fix or "")


def test_zero3_without_optimizer_shards(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt", layout=[ZERO3[0]])
    with pytest.raises(DswizError) as e:
        inspect_checkpoint(root)
    assert "ZeRO-3 model files but no optimizer shards" in problem(e)


def test_missing_shard_of_a_middle_rank(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt", ranks=3)
    os.unlink(root / "global_step10" / "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    os.unlink(root / "global_step10" / "zero_pp_rank_1_mp_rank_00_model_states.pt")
    with pytest.raises(DswizError) as e:
        inspect_checkpoint(root)
    assert "rank(s) 1 are missing" in problem(e) and "found ranks 0, 2" in problem(e)


def test_zero3_model_file_missing_for_one_rank(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt", ranks=2)
    os.unlink(root / "global_step10" / "zero_pp_rank_1_mp_rank_00_model_states.pt")
    with pytest.raises(DswizError) as e:
        inspect_checkpoint(root)
    assert "1 ZeRO-3 model file(s) but 2 optimizer shard(s)" in problem(e)


def test_two_saves_mixed_in_one_folder(tmp_path: Path) -> None:
    root = make_checkpoint(
        tmp_path / "ckpt", layout=ZERO2_BF16, ranks=2, extra=("zero_pp_rank_0_mp_rank_00_optim_states.pt",)
    )
    with pytest.raises(DswizError) as e:
        inspect_checkpoint(root)
    assert "two optimizer shards for rank 0" in problem(e)


def test_model_parallel_and_moe_are_refused(tmp_path: Path) -> None:
    mp = make_checkpoint(tmp_path / "mp", extra=("zero_pp_rank_0_mp_rank_01_optim_states.pt",))
    with pytest.raises(DswizError) as e:
        inspect_checkpoint(mp)
    assert "model-parallel" in problem(e) and "ds_to_universal" in (e.value.fix or "")
    moe = make_checkpoint(tmp_path / "moe", extra=("layer_0_expert_0_mp_rank_00_model_states.pt",))
    with pytest.raises(DswizError) as e:
        inspect_checkpoint(moe)
    assert "mixture-of-experts" in problem(e)


def test_memory_check(tmp_path: Path) -> None:
    ckpt = inspect_checkpoint(make_checkpoint(tmp_path / "ckpt", sizes=1024**3))  # 4 GiB of shards
    assert check_memory(ckpt, 9 * 1024**3) is None
    with pytest.raises(DswizError) as e:
        check_memory(ckpt, 7 * 1024**3)
    assert "needs about 8.0 GiB of free RAM" in problem(e) and "7.0 GiB is available" in problem(e)
    assert "--skip-memory-check" in (e.value.fix or "")
    warning = check_memory(ckpt, None)
    assert warning is not None and "8.0 GiB" in warning


def test_find_checkpoint_roots(tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "run" / "ckpt")
    make_checkpoint(tmp_path / "run" / "output" / "checkpoint-10", tag="global_step10")
    make_checkpoint(tmp_path / "run" / ".hidden" / "ckpt")
    make_checkpoint(tmp_path / "run" / "a" / "b" / "c" / "d" / "ckpt")  # deeper than max_depth
    roots = find_checkpoint_roots([tmp_path / "run"], max_depth=3)
    assert roots == [
        (tmp_path / "run" / "ckpt").resolve(),
        (tmp_path / "run" / "output" / "checkpoint-10").resolve(),
    ]
    # A tag folder given directly counts for its parent.
    assert find_checkpoint_roots([tmp_path / "run" / "ckpt" / "global_step10"]) == [
        (tmp_path / "run" / "ckpt").resolve()
    ]


def test_checkpoint_paths_from_log(tmp_path: Path) -> None:
    log = (
        "[2026-11-30 01:53:17,000] [INFO] [engine.py:5401:_save_checkpoint] [Rank 0] Saving model checkpoint: "
        "ckpt/global_step10/zero_pp_rank_0_mp_rank_00_model_states.pt\n"
        "Saving model checkpoint to /abs/output/checkpoint-500\n"
        "checkpoint saved to runs/x/final\n"
    )
    assert checkpoint_paths_from_log(log, cwd=tmp_path) == [
        tmp_path / "ckpt" / "global_step10",
        Path("/abs/output/checkpoint-500"),
        tmp_path / "runs" / "x" / "final",
    ]


def test_consolidate_command_quotes_paths() -> None:
    cmd = consolidate_command(Path("/data/my ckpt"), tag="global_step5")
    assert shlex.split(cmd) == [
        "dswiz",
        "consolidate",
        "/data/my ckpt",
        "/data/my ckpt-fp32",
        "--tag",
        "global_step5",
    ]


def test_checkpoint_hint_from_a_log_and_from_dirs(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt", tag="final", sizes=2048)
    make_checkpoint(root, tag="global_step5", latest=False)
    log = "checkpoint saved to ckpt/final\n"
    from_log = checkpoint_hint(log_text=log, cwd=tmp_path)
    from_dirs = checkpoint_hint([tmp_path])
    assert from_log == from_dirs
    lines = from_log.splitlines()
    assert lines[0] == (
        f"checkpoint {root.resolve() / 'final'} (ZeRO-3, 2 shard(s), 8.0 KiB; also global_step5)"
    )
    command = lines[1].split("full fp32 weights: ", 1)[1]
    assert shlex.split(command) == ["dswiz", "consolidate", str(root.resolve()), f"{root.resolve()}-fp32"]


def test_checkpoint_hint_reports_a_broken_checkpoint_and_nothing_when_none(tmp_path: Path) -> None:
    assert checkpoint_hint([tmp_path]) == ""
    assert checkpoint_hint([tmp_path / "missing"], log_text="checkpoint saved to nowhere/x") == ""
    root = make_checkpoint(tmp_path / "ckpt")
    os.unlink(root / "global_step10" / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    hint = checkpoint_hint([tmp_path])
    assert hint.startswith(f"checkpoint {root.resolve() / 'global_step10'}: ")
    assert "missing" in hint and "dswiz consolidate" not in hint
