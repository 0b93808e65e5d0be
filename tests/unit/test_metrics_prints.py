"""The loss from the progress lines scripts print (runner/metrics/prints.py), on lines in the shapes real scripts and
libraries print, and on recorded runs (tests/fixtures/logs, tests/fixtures/runs): a plain DeepSpeed script's
``step 5 loss 4.85`` reaches the dashboard, the verdict, and the source it came from is named."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.metrics.aggregate import SOURCE_CSV, SOURCE_DICTS, SOURCE_PRINTS, Aggregator
from runner.metrics.csvmon import read_csv_monitor_dir
from runner.metrics.parse import parse_line
from runner.metrics.prints import parse_progress_print
from runner.verdict import JobObserver, decide

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PLAIN = FIXTURES / "logs" / "cpu_plain_prints"

# (line, loss, step): lines as scripts, nanoGPT, Megatron-style loops, Lightning/tqdm bars and Keras print them.
TRAINING_LOSS = [
    ("step 5 loss 10.78", 10.78, 5),
    ("loss=10.78", 10.78, None),
    ("loss: 10.78", 10.78, None),
    ("Loss 10.78", 10.78, None),
    ("LOSS = 10.78", 10.78, None),
    ("Epoch 1 | Step 100/500 | Loss: 2.345 | LR 1e-4", 2.345, 100),
    ("iter 20: loss 4.1234, time 35.21ms, mfu 12.30%", 4.1234, 20),
    ("step=7, loss=1.2e-1, lr=3e-4", 0.12, 7),
    ("[step 12/100] train_loss=3.50 val_loss=3.90", 3.5, 12),
    ("global_step=40 training loss: 2.9", 2.9, 40),
    ("Step 10: train/loss 1.5 eval/loss 1.7", 1.5, 10),
    ("avg loss 0.75 (step 300)", 0.75, 300),
    ("epoch 3 loss 0.5 - val_loss: 0.7", 0.5, None),
    ("2026-12-01 10:00:00 - INFO - step 8 - loss 6.01", 6.01, 8),
    ("Training:  12%|#2        | 12/100 [00:05<00:40,  2.31it/s, loss=2.31, lr=1e-4]", 2.31, 12),
    ("Epoch 0:  40%|████      | 40/100 [00:10<00:15, 3.9it/s, v_num=0, train_loss=1.83]", 1.83, 40),
]
NOT_TRAINING_LOSS = [
    "[2026-11-30 02:54:37,594] [INFO] [config.py:678:print]   float16_config ... loss_scale=0.0 min_loss_scale=1",
    "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768",
    "loss_scale=1024",
    "dynamic loss scale 65536",
    "packet loss 0.1% on eth0",
    "lossless compression ratio 3.2",
    "the loss 3.2 is what we expect",
    "done: 10 steps, final loss 4.6944",
    "  5%|5         | 5/100 [00:01<00:19,  4.92it/s]",
    "step 5 lr 1e-4 grad_norm 0.9",
    "Map: 100%|██████████| 1000/1000 [00:00<00:00, 5000.12 examples/s]",
    "using loss function CrossEntropyLoss with label_smoothing 0.1",
    "RuntimeError: loss 3.0 diverged",
    "losses: 3",
]


@pytest.mark.parametrize(("line", "loss", "step"), TRAINING_LOSS)
def test_training_loss_prints(line: str, loss: float, step: int | None) -> None:
    e = parse_line(line)
    assert e is not None and e.kind == "loss", line
    assert e.values["loss"] == pytest.approx(loss)
    assert e.values.get("step") == step


@pytest.mark.parametrize("line", NOT_TRAINING_LOSS)
def test_lines_that_are_not_a_training_loss(line: str) -> None:
    e = parse_line(line)
    assert e is None or e.kind != "loss" or "loss" not in e.values, (line, e)


def test_an_eval_only_line_is_an_eval_loss_and_a_learning_rate_is_read() -> None:
    assert parse_progress_print("val_loss: 0.7") == {"eval_loss": 0.7, "form": "print"}
    assert parse_progress_print("Eval loss 1.25 at step 40") == {
        "eval_loss": 1.25,
        "form": "print",
        "step": 40,
    }
    assert parse_progress_print("step 3 loss 2.0 lr 3e-4") == {
        "loss": 2.0,
        "form": "print",
        "step": 3,
        "learning_rate": 3e-4,
    }


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_gives_a_result_or_none_never_an_exception(text: str) -> None:
    values = parse_progress_print(text)
    assert values is None or ("loss" in values) != ("eval_loss" in values)


def test_eval_prints_never_replace_the_training_loss_and_other_ranks_wait_for_rank_0() -> None:
    agg = Aggregator()
    feed = ["step 1 loss 5.0", "val_loss: 9.0", "[rank1]: step 1 loss 7.0", "step 2 loss 4.5"]
    agg.add_events([e for e in map(parse_line, feed) if e is not None], received_at=0.0)
    snap = agg.snapshot(1.0)
    assert snap.loss == 4.5 and snap.sources["loss"] == SOURCE_PRINTS
    # Only rank 1 prints: its loss is shown (a job whose rank 0 is quiet still gets one).
    other = Aggregator()
    other.add_events([parse_line("[rank1]: step 1 loss 7.0")], received_at=0.0)  # type: ignore[list-item]
    assert other.snapshot(1.0).loss == 7.0
    # Only an eval loss was ever printed (an evaluation job): it is the loss shown, and says so.
    evaluating = Aggregator()
    evaluating.add_events([parse_line("Eval loss 1.25 at step 40")], received_at=0.0)  # type: ignore[list-item]
    snap = evaluating.snapshot(1.0)
    assert snap.loss == 1.25 and snap.sources["loss"] == f"{SOURCE_PRINTS}, eval loss"


def _plain_recording() -> Aggregator:
    agg = Aggregator()
    for name in ("combined.log", *sorted(p.name for p in PLAIN.glob("*_rank*.log"))):
        rank = int(name.split("_rank")[1].split(".")[0]) if "_rank" in name else None
        lines = (PLAIN / name).read_text(encoding="utf-8").splitlines()
        agg.add_events([e for e in (parse_line(x, default_rank=rank) for x in lines) if e is not None], 100.0)
    return agg


def test_a_plain_deepspeed_scripts_recorded_prints_give_the_loss() -> None:
    agg = _plain_recording()
    (rank0,) = PLAIN.glob("*_rank0.log")
    last = [x for x in rank0.read_text().splitlines() if x.startswith("step ")][-1]  # "step 10 loss 4.6944"
    snap = agg.snapshot(200.0)
    assert snap.step == 10 and snap.loss == float(last.split()[-1])
    assert snap.sources["loss"] == SOURCE_PRINTS
    # Its csv monitor holds the learning rate only: the loss cannot have come from there.
    assert set(read_csv_monitor_dir(PLAIN / "csv" / "dswiz")) == {"lr"}


def test_the_recorded_plain_run_verdict_names_its_final_loss() -> None:
    obs = JobObserver(started=0.0)
    for i, line in enumerate((PLAIN / "combined.log").read_text().splitlines()):
        obs.feed(line, float(i), stream="launcher")
    (rank0,) = PLAIN.glob("*_rank0.log")
    for i, line in enumerate(rank0.read_text().splitlines()):
        obs.feed(line, float(i), rank=0, stream="rank0")
    verdict = decide(obs, launcher_returncodes=[0], elapsed=112.0)
    assert verdict.kind == "success"
    assert verdict.summary.startswith("success: 10 steps in 1:52, ") and verdict.summary.endswith(
        "final loss 4.694"
    )
    assert obs.phases.training


def test_recorded_trainer_style_dicts_are_named_as_log_dicts() -> None:
    (rank0,) = (FIXTURES / "logs" / "gpu_h200_zero1_ok").glob("*_rank0.log")
    agg = Aggregator()
    lines = rank0.read_text(encoding="utf-8").splitlines()
    agg.add_events([e for e in (parse_line(x, default_rank=0) for x in lines) if e is not None], 0.0)
    snap = agg.snapshot(0.0)
    assert snap.loss is not None and snap.sources["loss"] == SOURCE_DICTS


def test_samples_per_second_from_the_csv_monitor_counter_as_rows_arrive() -> None:
    """accelerate's and the Trainer's jobs print no DeepSpeed progress: the csv rows' sample counter over the time
    they arrived is the speed (the recorded csv of the plain run: 8 samples per step)."""
    points = read_csv_monitor_dir(PLAIN / "csv" / "dswiz")["lr"]
    agg = Aggregator()
    agg.add_csv(points[:1], received_at=10.0)
    assert agg.snapshot(10.0).samples_per_sec is None  # one observation: no rate yet
    agg.add_csv(points[1:3], received_at=11.0)  # two rows in one poll: the later counts
    snap = agg.snapshot(11.0)
    assert snap.samples_per_sec == pytest.approx(points[2].samples - points[0].samples)
    assert snap.sources["samples_per_sec"] == SOURCE_CSV


def test_an_hf_trainer_job_without_steps_gets_steps_and_speed_from_its_final_log(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The Trainer's dicts carry no step and accelerate silences DeepSpeed: the verdict takes steps and speed from
    the Trainer's last log (its own speed_metrics), printed by its own PrinterCallback (transformers 5.24)."""
    import time

    from transformers.trainer_callback import PrinterCallback, TrainerControl, TrainerState
    from transformers.trainer_utils import speed_metrics

    printer, state, control = PrinterCallback(), TrainerState(), TrainerControl()
    for loss in (4.81, 4.52, 4.3333, 4.1):  # logging_steps 10: no step in the dicts
        printer.on_log(None, state, control, logs={"loss": loss, "grad_norm": 0.9, "learning_rate": 1e-3})
    final = speed_metrics("train", time.time() - 20.0, num_samples=160, num_steps=40)
    printer.on_log(None, state, control, logs={**final, "total_flos": 1e12, "train_loss": 4.44, "epoch": 1.0})
    obs = JobObserver(started=0.0)
    agg = Aggregator()
    for i, line in enumerate(capsys.readouterr().out.splitlines()):
        event = obs.feed(line, float(i), rank=0)
        agg.add_events([event] if event is not None else [], float(i))
    verdict = decide(obs, launcher_returncodes=[0], elapsed=25.0)
    assert verdict.summary == "success: 40 steps in 0:25, 8.0 samples/s (Trainer), final loss 4.1"
    assert agg.snapshot(5.0).loss == 4.1  # the last step's loss, not the run's mean ("train_loss")


def test_the_status_line_has_a_speed_from_printed_steps_before_any_deepspeed_throughput_line() -> None:
    (rank0,) = PLAIN.glob("*_rank0.log")
    lines = rank0.read_text().splitlines()
    upto = lines.index(next(x for x in lines if x.startswith("step 9 ")))
    obs = JobObserver(started=0.0)
    for i, line in enumerate(lines[: upto + 1]):
        obs.feed(line, float(i), rank=0)
    first = lines.index(next(x for x in lines if x.startswith("step 1 ")))
    assert obs.samples_per_sec is None  # steps_per_print 10: DeepSpeed has not spoken yet
    assert obs.train_batch_size == 8
    expected = (9 - 1) / (upto - first) * 8
    assert f"step 9 · {expected:,.1f} samples/s · loss " in obs.status(float(upto)).line()
