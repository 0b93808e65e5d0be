"""The log-line parser on output recorded from real DeepSpeed runs (tests/fixtures/logs/README.md), plus the
formats that cannot be provoked on CPU (fp16 overflow, CUDA OOM, NCCL timeout) written exactly as the installed
DeepSpeed / PyTorch print them, and fuzzing: no line may make it raise."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.metrics.parse import EVENT_KEYS, KINDS, LogEvent, parse_line

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def events(path: Path, default_rank: int | None = None) -> list[LogEvent]:
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            event = parse_line(line, default_rank=default_rank)
            if event is not None:
                out.append(event)
    return out


def of_kind(evs: list[LogEvent], kind: str) -> list[LogEvent]:
    return [e for e in evs if e.kind == kind]


def test_successful_run_yields_steps_throughput_loss_and_clean_exits() -> None:
    evs = events(LOGS / "cpu_zero2_ok" / "combined.log")
    steps = of_kind(evs, "step")
    # _report_progress(0) at init, then every steps_per_print=5 up to --steps 20.
    assert [e.values["step"] for e in steps] == [0, 5, 10, 15, 20]
    assert all(e.rank == 0 and e.values["lr"] == (0.001,) and e.values["skipped"] == 0 for e in steps)
    assert steps[1].values["mom"] == (0.9, 0.999)

    tp = of_kind(evs, "throughput")
    assert [e.values["global_step"] for e in tp] == [5, 10, 15, 20]
    first = tp[0].values
    assert first["micro_step"] == 5 and first["epoch"] == 0
    assert first["running_avg_samples_per_sec"] == pytest.approx(135.5964729368216)
    assert first["curr_samples_per_sec"] == pytest.approx(119.13597416421801)
    assert first["mem_allocated_bytes"] == int(0.4 * 1024**3)  # DeepSpeed's "GB" divides by 1024**3
    assert tp[0].timestamp == datetime(2026, 11, 30, 1, 42, 31, 990000).timestamp()
    assert tp[0].level == "INFO"

    losses = of_kind(evs, "loss")
    assert [(e.values["step"], e.values["loss"]) for e in losses] == [
        (5, 6.1255),
        (10, 5.8153),
        (15, 5.5801),
        (20, 5.3095),
    ]
    assert losses[0].values["learning_rate"] == 0.001 and losses[-1].values["epoch"] == 1.0

    spawns = of_kind(evs, "spawn")
    assert [(e.values["pid"], e.values["local_rank"]) for e in spawns] == [(6010, 0), (6011, 1)]
    assert (
        spawns[0].values["argv"][2].endswith("train_tiny.py") and "--local_rank=0" in spawns[0].values["argv"]
    )
    assert [(e.values["pid"], e.values["return_code"]) for e in of_kind(evs, "exit")] == [
        (6010, 0),
        (6011, 0),
    ]
    assert [e.values["world_size"] for e in of_kind(evs, "world")] == [2]


def test_timer_breakdown_lines() -> None:
    evs = of_kind(events(LOGS / "cpu_zero2_ok" / "combined.log"), "timers")
    assert evs, "wall_clock_breakdown was on in this recording"
    micro = [e for e in evs if "fwd_microstep" in e.values["timers_ms"]]
    assert micro[0].rank == 0
    assert micro[0].values["timers_ms"] == {
        "fwd_microstep": 437.54,
        "bwd_microstep": 1183.64,
        "bwd_inner_microstep": 1078.93,
        "bwd_allreduce_microstep": 104.64,
        "step_microstep": 270.26,
    }
    assert any(
        set(e.values["timers_ms"]) == {"optimizer_allgather", "optimizer_gradients", "optimizer_step"}
        for e in evs
    )


def test_engine_config_dump_gives_batch_and_world() -> None:
    cfg = {
        e.values["key"]: e.values["value"]
        for e in of_kind(events(LOGS / "cpu_zero2_ok" / "combined.log"), "ds_config")
    }
    assert cfg["train_batch_size"] == "8"
    assert cfg["train_micro_batch_size_per_gpu"] == "4"
    assert cfg["world_size"] == "2"
    assert cfg["steps_per_print"] == "5"


SPAWN = (
    "[2026-12-01 01:00:00,000] [INFO] [launch.py:245:main] process 4675 spawned with command: "
    "['python', '-u', 'x.py', '--local_rank=1']"
)
EXIT = (
    "[2026-12-01 01:00:09,000] [ERROR] [launch.py:325:sigkill_handler] ['python'] exits with return code = -9"
)
LOSS = "{'loss': 1.0, 'learning_rate': 0.001, 'epoch': 0.1, 'step': 1}"
TIMERS = "[Rank 0] time (ms) | fwd: 10.00 | bwd: 20.00 | bwd_inner: 1.00 | bwd_allreduce: 1.00 | step: 3.00"


@pytest.mark.parametrize(
    "line",
    [SPAWN + LOSS, LOSS + SPAWN, TIMERS + SPAWN, "[rank0]:" + SPAWN],
    ids=["dict after", "dict before", "timers before", "torch rank prefix"],
)
def test_a_spawn_line_glued_to_a_rank_print_still_names_the_rank(line: str) -> None:
    # Ranks run under python -u write a print's text and its newline separately; the launcher's line can land
    # between them. Whichever comes first, the launcher's record is read, with its own timestamp.
    event = parse_line(line)
    assert (
        event is not None and event.kind == "spawn" and event.level == "INFO" and event.timestamp is not None
    )
    assert (event.values["pid"], event.values["local_rank"]) == (4675, 1)


@pytest.mark.parametrize(
    "line", [LOSS + EXIT, EXIT + LOSS, TIMERS + EXIT], ids=["dict before", "dict after", "timers"]
)
def test_an_exit_line_glued_to_a_rank_print_is_still_the_exit(line: str) -> None:
    event = parse_line(line)
    assert event is not None and event.kind == "exit" and event.values["return_code"] == -9


def test_a_torch_rank_prefix_stays_with_its_record() -> None:
    event = parse_line("[rank3]:" + EXIT)
    assert event is not None and event.kind == "exit" and event.rank == 3


def test_killed_rank_reports_minus_9_without_a_pid() -> None:
    evs = events(LOGS / "cpu_killed_rank1" / "combined.log")
    exits = of_kind(evs, "exit")
    # launch.py prints the last-spawned command, not the killed one: the event must not pretend to know the pid.
    assert [(e.values["pid"], e.values["return_code"]) for e in exits] == [(None, -9)]
    assert exits[0].level == "ERROR"


def test_per_rank_log_keeps_the_file_rank_and_reads_torch_rank_prefixes() -> None:
    rank0 = next((LOGS / "cpu_killed_rank1" / "ranks").glob("*_rank0.log"))
    evs = events(rank0, default_rank=0)
    assert [e.values["global_step"] for e in of_kind(evs, "throughput")] == [5, 10]
    assert all(e.rank == 0 for e in evs)
    exc = of_kind(evs, "exception")
    assert len(exc) == 1 and exc[0].values["type"] == "RuntimeError"
    assert "Connection closed by peer" in exc[0].values["message"]


def test_injected_failure_names_the_rank_and_the_exit_code() -> None:
    evs = events(LOGS / "cpu_fail_rank1" / "combined.log")
    exc = [e for e in of_kind(evs, "exception") if "injected failure" in e.values["message"]]
    assert len(exc) == 1 and exc[0].rank == 1 and exc[0].values["type"] == "RuntimeError"
    assert [e.values["return_code"] for e in of_kind(evs, "exit")] == [1]
    assert not of_kind(evs, "timers")  # wall_clock_breakdown off: no breakdown lines


def test_port_in_use_is_an_exception_before_any_step() -> None:
    evs = events(LOGS / "cpu_port_in_use" / "combined.log")
    assert not of_kind(evs, "step")
    exc = of_kind(evs, "exception")
    assert exc[0].values["type"] == "torch.distributed.DistNetworkError"
    assert "EADDRINUSE" in exc[0].values["message"]


# Formats that a CPU run cannot produce, spelled as the installed sources format them.
def test_fp16_overflow_lines_from_loss_scaler() -> None:
    # deepspeed/runtime/fp16/loss_scaler.py: DynamicLossScaler.update_scale, via logger.info
    e = parse_line(
        "[2026-11-30 01:42:31,989] [INFO] [loss_scaler.py:266:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping "
        "step. Attempted loss scale: 65536, reducing to 32768"
    )
    assert e is not None and e.kind == "overflow" and e.rank == 0
    assert (e.values["attempted_scale"], e.values["new_scale"]) == (65536, 32768)
    h = parse_line(
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4096, but hysteresis is 2. Reducing "
        "hysteresis to 1"
    )
    assert (
        h is not None
        and h.kind == "overflow"
        and h.values["hysteresis"] == 2
        and h.values["new_scale"] is None
    )
    # LossScalerBase (static scale / bf16 check) through log_dist: rank from the "[Rank 0]" prefix.
    b = parse_line(
        "[2026-11-30 01:42:31,989] [WARNING] [logging.py:128:log_dist] [Rank 0] [deepspeed] OVERFLOW! Skipping step. "
        "Gradients are non-finite, weights were not updated."
    )
    assert b is not None and b.kind == "overflow" and b.rank == 0 and b.values["attempted_scale"] is None


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB. GPU 1 has a total "
            "capacity of 139.81 GiB of which 96.25 MiB is free. Including non-PyTorch memory, this process has "
            "139.70 GiB memory in use.",
            {"device": "cuda", "tried_bytes": 128 * 1024**2, "gpu": 1, "free_bytes": int(96.25 * 1024**2)},
        ),
        (
            "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 7.93 GiB total capacity; "
            "130.35 MiB already allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch)",
            {"device": "cuda", "tried_bytes": 2 * 1024**3, "gpu": 0, "total_bytes": int(7.93 * 1024**3)},
        ),
        (
            "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 34359738368 bytes. Error code 12 (Cannot allocate memory)",
            {"device": "cpu", "tried_bytes": 34359738368},
        ),
    ],
)
def test_oom_texts(line: str, expected: dict[str, object]) -> None:
    e = parse_line(line)
    assert e is not None and e.kind == "oom"
    for key, value in expected.items():
        assert e.values[key] == value


def test_oom_rank_from_torch_prefix() -> None:
    e = parse_line("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.")
    assert e is not None and e.rank == 3 and e.values["tried_bytes"] == 20 * 1024**2


def test_nccl_watchdog_timeout() -> None:
    line = (
        "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) "
        "ran for 600060 milliseconds before timing out."
    )
    e = parse_line(line)
    assert e is not None and e.kind == "nccl_timeout" and e.rank == 0
    assert e.values == {"op": "ALLREDUCE", "timeout_ms": 600000, "ran_ms": 600060, "seq": 1580}
    bare = parse_line(
        "[E ProcessGroupNCCL.cpp:458] [Rank 7] Watchdog caught collective operation timeout: WorkNCCL("
    )
    assert bare is not None and bare.kind == "nccl_timeout" and bare.rank == 7 and bare.values["op"] is None


def test_hf_trainer_dicts_transformers5_strings_and_progress_bar() -> None:
    # transformers 5 ProgressCallback.on_log formats floats as f"{v:.4g}" strings and writes via tqdm.
    line = "\r  5%|▌         | 10/200 [00:03<01:01,  3.1it/s]\r{'loss': '2.123', 'grad_norm': '1.5', 'learning_rate': '4.9e-05', 'epoch': '0.05'}\n"
    e = parse_line(line)
    assert e is not None and e.kind == "loss"
    assert e.values == {"loss": 2.123, "grad_norm": 1.5, "learning_rate": 4.9e-05, "epoch": 0.05}
    final = parse_line(
        "{'train_runtime': 12.5, 'train_samples_per_second': 80.1, 'train_loss': 2.5, 'epoch': 1.0}"
    )
    assert final is not None and final.values["train_loss"] == 2.5 and "loss" not in final.values
    ev = parse_line("{'eval_loss': 4.2, 'step': 10}")
    assert ev is not None and ev.values == {"eval_loss": 4.2, "step": 10}


@pytest.mark.parametrize(
    "line",
    [
        "",
        "\n",
        "model: 470,528 parameters",
        "{'accuracy': 0.5}",  # a dict without a loss is not a loss event
        "{'loss': float('nan')}",  # not a literal: refused, not evaluated
        "{'loss': 'nan'}",
        "step=abc, skipped=0, lr=[0.1]",
        "        ^^^^^^^^^^^^^",
    ],
)
def test_lines_that_carry_nothing(line: str) -> None:
    assert parse_line(line) is None


def test_logger_line_without_a_known_message_is_a_log_event() -> None:
    e = parse_line(
        "[2026-11-30 01:41:44,301] [WARNING] [runner.py:214:fetch_hostfile] Unable to find hostfile, will proceed"
    )
    assert e is not None and e.kind == "log" and e.level == "WARNING"
    assert e.values == {
        "level": "WARNING",
        "source": "runner.py",
        "message": "Unable to find hostfile, will proceed",
    }


def test_ansi_colours_are_ignored() -> None:
    e = parse_line("\x1b[32m[Rank 0] step=5, skipped=1, lr=[0.0002, 0.0001], mom=[(0.9, 0.999)]\x1b[0m")
    assert (
        e is not None and e.kind == "step" and e.values["lr"] == (0.0002, 0.0001) and e.values["skipped"] == 1
    )


def test_every_kind_documents_its_keys() -> None:
    seen: set[str] = set()
    for path in sorted(LOGS.rglob("*.log")):
        for e in events(path):
            seen.add(e.kind)
            assert e.kind in KINDS
            assert set(e.values) <= set(EVENT_KEYS[e.kind]), (e.kind, e.values)
    assert {"step", "throughput", "loss", "spawn", "exit", "timers", "exception", "log"} <= seen


REAL_LINES = [
    line
    for path in sorted(LOGS.rglob("*.log"))
    for line in path.read_text(encoding="utf-8").splitlines()
    if line.strip()
][:400]


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=400))
def test_fuzz_arbitrary_text_never_raises(text: str) -> None:
    event = parse_line(text)
    assert event is None or event.kind in KINDS


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(REAL_LINES),
    st.integers(min_value=0, max_value=300),
    st.text(max_size=12),
    st.integers(0, 40),
)
def test_fuzz_mutated_real_lines_never_raise(line: str, at: int, insert: str, cut: int) -> None:
    at = min(at, len(line))
    mutated = line[:at] + insert + line[at + cut :]
    event = parse_line(mutated)
    assert event is None or event.kind in KINDS


def test_huge_line_is_cut_not_parsed_forever() -> None:
    e = parse_line("{'loss': 1.0, 'x': '" + "a" * 1_000_000 + "'}")
    assert e is None  # cut at MAX_LINE: the dict is incomplete
