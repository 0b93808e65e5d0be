"""Verdicts from recorded job output.

tests/fixtures/runs/* are real runs (`dswiz launch --nproc 2 train_tiny.py`, DeepSpeed 0.19.8 on CPU): stream.log is
every line dswiz read (launcher and ranks) in arrival order, ranks/ the per-rank logs as DeepSpeed wrote them, and
facts.json the launcher's exit code. CUDA OOM, NCCL timeout and fp16 overflow cannot
happen on this machine: those logs are built from the formats in docs/log-formats.md and the PyTorch/DeepSpeed sources.
Process facts the watcher would report (which rank vanished first, host memory then) are given as RankDeath.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.tracebacks import TracebackCollector, root_cause
from runner.verdict import JobObserver, RankDeath, decide, default_oom_advice, exit_code

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
GiB = 1024**3


def replay_stream(name: str) -> tuple[JobObserver, list[int | None]]:
    obs = JobObserver(started=0.0)
    for i, line in enumerate((RUNS / name / "stream.log").read_text().splitlines()):
        obs.feed(line, float(i))
    return obs, json.loads((RUNS / name / "facts.json").read_text())["launcher_exit_codes"]


def replay_rank_logs(name: str, *, with_launcher_lines: bool = False) -> JobObserver:
    """Each rank's log with its rank (as dswiz reads them); optionally the launcher's lines too (the stream's
    lines that are in no rank log)."""
    obs = JobObserver(started=0.0)
    paths = sorted((RUNS / name / "ranks").glob("*.log"))
    if with_launcher_lines:
        rank_lines = {line for p in paths for line in p.read_text().splitlines()}
        for i, line in enumerate((RUNS / name / "stream.log").read_text().splitlines()):
            if line not in rank_lines:
                obs.feed(line, float(i), stream="launcher")
    for path in paths:
        rank = int(path.stem.rsplit("rank", 1)[1])
        for i, line in enumerate(path.read_text().splitlines()):
            obs.feed(line, float(i), rank=rank, stream=path.name)
    return obs


def test_success() -> None:
    obs, codes = replay_stream("success")
    v = decide(obs, launcher_returncodes=codes, elapsed=17.2)
    assert v.kind == "success"
    # DeepSpeed's running average (156.2), not its last step (160.1): the run's figure
    assert v.summary == "success: 10 steps in 0:17, 156.2 samples/s (average), final loss 5.815"
    assert exit_code(v, codes, None) == 0
    assert obs.samples_per_sec is not None and obs.samples_per_sec > 0
    assert obs.phases.training


def test_a_rank_that_raises_is_named_with_its_exception() -> None:
    obs, codes = replay_stream("rank_raises")
    v = decide(obs, launcher_returncodes=codes)
    assert v.kind == "rank_failed" and v.rank == 1
    assert v.exception == "RuntimeError: injected failure at step 6 on rank 1 (--fail-at-step)"
    assert v.summary.startswith("rank 1 failed at step 5: RuntimeError: injected failure")
    assert any("train_tiny.py:108 in maybe_fail" in a for a in v.advice)
    # rank 0 died of the consequence (gloo: connection closed by peer): named, not blamed
    assert any("then rank 0 stopped too" in a for a in v.advice)
    assert v.evidence[-1].startswith("RuntimeError: injected failure")
    assert exit_code(v, codes, None) == 1
    # the raising rank aborts at interpreter exit after its traceback (DeepSpeed on CPU, about 1 run in 10) and
    # launch.py's poll finds rank 0's gloo exit first: the verdict is still the exception, and dswiz's code is
    # rank 1's own, SIGABRT's 134, as CI once read it
    deaths = [
        RankDeath(rank=1, pid=7001, at=9.1, returncode=-6),
        RankDeath(rank=0, pid=7000, at=9.3, returncode=1),
    ]
    v = decide(obs, launcher_returncodes=codes, deaths=deaths)
    assert (v.kind, v.rank) == ("rank_failed", 1)
    assert exit_code(v, codes, None, obs.exit_codes, deaths) == 134


def test_the_same_verdict_from_the_per_rank_logs() -> None:
    obs = replay_rank_logs("rank_raises")
    v = decide(obs, launcher_returncodes=[1])
    assert (v.kind, v.rank) == ("rank_failed", 1)
    assert v.exception and "injected failure at step 6 on rank 1" in v.exception


def test_sigkilled_rank_with_host_memory_left_is_not_blamed_on_the_oom_killer() -> None:
    obs, codes = replay_stream("rank_sigkilled")
    assert -9 in obs.exit_codes  # launch.py: "... exits with return code = -9"
    deaths = [
        RankDeath(rank=1, pid=18091, at=9.1, host_available_bytes=21 * GiB, host_total_bytes=23 * GiB),
        RankDeath(rank=0, pid=18090, at=9.6, host_available_bytes=21 * GiB, host_total_bytes=23 * GiB),
    ]
    v = decide(obs, launcher_returncodes=codes, deaths=deaths)
    assert v.kind == "killed" and v.rank == 1
    assert "rank 1 (pid 18091) was killed with SIGKILL (exit -9)" in v.summary
    assert "21.0 GiB" in v.summary and "not by the out-of-memory killer" in v.summary
    assert exit_code(v, codes, None) == 137


def test_the_killed_rank_is_the_silent_one_when_its_peer_dies_in_the_same_tick() -> None:
    """On a busy machine the death watch can see both ranks gone in one tick: the SIGKILLed rank 1 and rank 0, whose
    gloo all-reduce failed at once ("Connection closed by peer", its real traceback from a run) -- the rank that
    printed a traceback reacted, the silent one was killed (CI once blamed rank 0 on such a tie)."""
    obs, codes = replay_stream("rank_sigkilled")
    log = next((RUNS / "rank_raises" / "ranks").glob("*_rank0.log")).read_text().splitlines()
    start = next(i for i, line in enumerate(log) if "Traceback" in line)
    for i, line in enumerate(log[start:]):
        obs.feed(line, 100.0 + i, rank=0, stream="rank0")
    assert {e.rank for e in obs.tracebacks.exceptions} == {0}
    tie = [
        RankDeath(rank=0, pid=18090, at=9.1, host_available_bytes=21 * GiB, host_total_bytes=23 * GiB),
        RankDeath(rank=1, pid=18091, at=9.1, host_available_bytes=21 * GiB, host_total_bytes=23 * GiB),
    ]
    v = decide(obs, launcher_returncodes=codes, deaths=tie)
    assert v.kind == "killed" and v.rank == 1 and "rank 1 (pid 18091)" in v.summary


def test_a_tie_of_two_silent_deaths_is_told_by_how_each_ended() -> None:
    """CI, once, named rank 0 for a SIGKILL sent to rank 1: read as rank 0 gone in the same pass of the death watch
    without a traceback (the launcher's SIGTERM, or an abort in native code), the pass checking rank 0 first. The
    exit status the watcher reads from each zombie tells such a tie apart."""
    lines = (RUNS / "rank_sigkilled" / "stream.log").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("[rank0]: Traceback"))
    end = next(i for i, line in enumerate(lines) if line.startswith("[rank0]: RuntimeError"))
    silent_rank0 = lines[:start] + lines[end + 1 :]  # the same run, rank 0 gone without a word

    def observed(*, launcher_line: bool) -> JobObserver:
        obs = JobObserver(started=0.0)
        for i, line in enumerate(
            ln for ln in silent_rank0 if launcher_line or "exits with return code" not in ln
        ):
            obs.feed(line, float(i))
        assert not obs.tracebacks.exceptions and (-9 in obs.exit_codes) == launcher_line
        return obs

    def death(rank: int, returncode: int | None) -> RankDeath:
        return RankDeath(
            rank=rank, pid=18090 + rank, at=9.1, host_available_bytes=21 * GiB, host_total_bytes=23 * GiB,
            returncode=returncode,
        )  # fmt: skip

    for rank0 in (-6, -15, 1, None):
        v = decide(
            observed(launcher_line=True), launcher_returncodes=[-9], deaths=[death(0, rank0), death(1, -9)]
        )
        assert (v.kind, v.rank) == ("killed", 1), rank0
        assert "rank 1 (pid 18091) was killed with SIGKILL (exit -9)" in v.summary
    # the killed rank already reaped (its end not read), its peer's SIGTERM read: the peer is still not blamed
    v = decide(
        observed(launcher_line=True), launcher_returncodes=[-9], deaths=[death(0, -15), death(1, None)]
    )
    assert (v.kind, v.rank) == ("killed", 1)
    # a SIGKILL read from the zombie is a kill even when the launcher reported the peer's exit code 1
    v = decide(observed(launcher_line=False), launcher_returncodes=[1], deaths=[death(0, 1), death(1, -9)])
    assert (v.kind, v.rank) == ("killed", 1) and "was killed with SIGKILL (exit -9)" in v.summary
    # both gone by the same pass and neither end read (a stalled machine: the launcher reaped both first): which
    # was killed is not known, and the verdict says so rather than name the rank checked first
    v = decide(
        observed(launcher_line=True), launcher_returncodes=[-9], deaths=[death(0, None), death(1, None)]
    )
    assert v.kind == "killed" and v.rank is None
    assert v.summary.startswith(
        "rank 0 (pid 18090) or rank 1 (pid 18091) (found gone at the same moment; which"
    )
    # both read as SIGKILL (a kill -9 to the whole job): both named
    v = decide(observed(launcher_line=True), launcher_returncodes=[-9], deaths=[death(0, -9), death(1, -9)])
    assert v.rank is None and v.summary.startswith(
        "each of rank 0 (pid 18090) and rank 1 (pid 18091) was killed"
    )
    # ranks dswiz itself SIGKILLed after a launcher that exited 0 (they outlived it): the job did not fail
    ok, ok_codes = replay_stream("success")
    assert ok_codes == [0]
    v = decide(ok, launcher_returncodes=ok_codes, deaths=[death(0, -9), death(1, -9)], leftover_killed=2)
    assert v.kind == "success", v.summary
    # a rank that died of SIGTERM alone is not called SIGKILLed
    v = decide(observed(launcher_line=False), launcher_returncodes=[-15], deaths=[death(0, -15)])
    assert v.kind == "failed" and "SIGTERM" in v.summary, v.summary


def test_a_crash_read_from_its_zombie_is_not_blamed_on_the_peer_the_launcher_stopped() -> None:
    """Rank 0 crashes without a traceback (its SIGSEGV read from its zombie); at its next poll the launcher sends
    rank 1 SIGTERM and reaps it at once, before the watch can read how it ended. Rank 1 is the only silent death
    whose end is unknown, but it came after the crash: the verdict is the crash, not "rank 1 was killed"."""
    lines = (RUNS / "rank_sigkilled" / "stream.log").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("[rank0]: Traceback"))
    end = next(i for i, line in enumerate(lines) if line.startswith("[rank0]: RuntimeError"))

    def observed(exit_line: bool) -> JobObserver:
        obs = JobObserver(started=0.0)
        for i, line in enumerate(lines[:start] + lines[end + 1 :]):
            if exit_line or "exits with return code" not in line:
                obs.feed(line, float(i))
        return obs

    def death(rank: int, returncode: int | None, at: float) -> RankDeath:
        return RankDeath(
            rank=rank, pid=18090 + rank, at=at, host_available_bytes=21 * GiB, host_total_bytes=23 * GiB,
            returncode=returncode,
        )  # fmt: skip

    v = decide(observed(False), launcher_returncodes=[-11], deaths=[death(0, -11, 9.1), death(1, None, 9.35)])
    assert v.kind == "failed" and v.rank == 0 and "SIGSEGV" in v.summary, v.summary
    assert v.summary == "rank 0 (pid 18090) died at step 5 with exit code -11 (SIGSEGV) and no traceback"
    # the same pass: which came first is not known, and the crash is the fact that was read
    v = decide(observed(False), launcher_returncodes=[-11], deaths=[death(0, -11, 9.1), death(1, None, 9.1)])
    assert v.kind == "failed" and v.rank == 0 and "SIGSEGV" in v.summary, v.summary
    # two crashes read in one pass: which came first is not known, and no rank is named
    v = decide(observed(False), launcher_returncodes=[-11], deaths=[death(0, -11, 9.1), death(1, -6, 9.1)])
    assert v.kind == "failed" and v.rank is None and v.summary.startswith("the job failed"), v.summary
    assert exit_code(v, [-11], None, (), [death(0, -11, 9.1), death(1, -6, 9.1)]) == 139
    # launch.py reaped the rank that failed first (-11) before the watch read it; the crash it read is another's
    obs = observed(False)
    obs.exit_codes.append(-11)
    deaths = [death(0, None, 9.1), death(1, -6, 9.1)]
    v = decide(obs, launcher_returncodes=[245], deaths=deaths)
    assert v.kind == "failed" and v.rank is None and "-11 (SIGSEGV)" in v.summary, v.summary
    assert exit_code(v, [245], None, obs.exit_codes, deaths) == 139
    # rank 1 aborted; rank 0, its peer gone, exited 1 a pass later, and launch.py's poll found rank 0 first: the
    # watch's order stands, for the verdict and the exit code alike
    obs = observed(False)
    obs.exit_codes.append(1)
    deaths = [death(1, -6, 9.1), death(0, 1, 9.3)]
    v = decide(obs, launcher_returncodes=[1], deaths=deaths)
    assert v.rank == 1 and "died at step 5 with exit code -6 (SIGABRT)" in v.summary, v.summary
    assert exit_code(v, [1], None, obs.exit_codes, deaths) == 134
    assert exit_code(v, [1], None, obs.exit_codes) == 1  # without the watch: launch.py's
    # rank 0 exits 1 without a traceback; rank 1 ignored the launcher's SIGTERM and got its SIGKILL 30 s later
    v = decide(observed(False), launcher_returncodes=[1], deaths=[death(0, 1, 9.1), death(1, -9, 39.1)])
    assert v.kind == "failed" and "exit code 1" in v.summary, v.summary
    # the launcher reported -9 and the one death read is a SIGTERM: no rank is named as the one killed
    v = decide(observed(True), launcher_returncodes=[-9], deaths=[death(0, -15, 9.1)])
    assert v.rank is None and v.summary.startswith("a rank was killed with SIGKILL"), v.summary


def test_a_silent_death_first_is_the_kill_even_when_the_launcher_reports_its_peers_exit_code() -> None:
    """DeepSpeed's launcher reports the first failed rank its once-a-second poll finds: when rank 0's gloo error
    (exit 1) is found before the SIGKILLed rank 1, the job's code is 1 and no -9 is printed. The death watch saw
    rank 1 die silently first: that is the kill. A rank that dies silently after another raised (the launcher's
    SIGTERM) is not."""
    lines = (RUNS / "rank_sigkilled" / "stream.log").read_text().splitlines()
    log = next((RUNS / "rank_raises" / "ranks").glob("*_rank0.log")).read_text().splitlines()
    gloo = log[next(i for i, line in enumerate(log) if "Traceback" in line) :]

    def observed() -> JobObserver:
        obs = JobObserver(started=0.0)
        for i, line in enumerate(ln for ln in lines if "exits with return code" not in ln):
            obs.feed(line, float(i))
        for i, line in enumerate(gloo):
            obs.feed(line, 1000.0 + i, rank=0, stream="rank0")
        assert not obs.exit_codes
        return obs

    def death(rank: int, at: float) -> RankDeath:
        return RankDeath(
            rank=rank, pid=18090 + rank, at=at, host_available_bytes=21 * GiB, host_total_bytes=23 * GiB
        )

    v = decide(observed(), launcher_returncodes=[1], deaths=[death(0, 9.1), death(1, 9.1)])
    assert (v.kind, v.rank) == ("killed", 1) and "died without a traceback" in v.summary
    assert exit_code(v, [1], None) == 137
    later = decide(observed(), launcher_returncodes=[1], deaths=[death(0, 9.1), death(1, 10.0)])
    assert (later.kind, later.rank) == ("rank_failed", 0) and any("consequence" in a for a in later.advice)


def test_sigkill_with_host_memory_exhausted_is_the_oom_killer() -> None:
    obs, codes = replay_stream("rank_sigkilled")
    starved = [
        RankDeath(rank=1, pid=18091, at=9.1, host_available_bytes=300 * 1024**2, host_total_bytes=23 * GiB)
    ]
    v = decide(obs, launcher_returncodes=codes, deaths=starved)
    assert v.kind == "host_oom" and v.rank == 1
    assert "out-of-memory killer" in v.summary and "dmesg" in v.advice[0]
    # without the watcher's facts, exit -9 alone still reads as the OOM killer, without a rank
    v = decide(obs, launcher_returncodes=codes)
    assert v.kind == "host_oom" and v.rank is None and v.summary.startswith("a rank was killed")


def test_interrupted() -> None:
    obs, codes = replay_stream("interrupted")
    v = decide(obs, launcher_returncodes=codes, interrupted_by="SIGINT", elapsed=9.4)
    assert v.kind == "interrupted"
    assert v.summary == "stopped by SIGINT at step 5 after 0:09; no process of the job is left"
    assert exit_code(v, codes, 2) == 130
    assert exit_code(v, codes, 15) == 143


CUDA_OOM = """\
[2026-11-30 02:00:01,000] [INFO] [logging.py:123:log_dist] [Rank 0] step=10, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]
[rank1]: Traceback (most recent call last):
[rank1]:   File "/work/train.py", line 40, in <module>
[rank1]:     loss = model(batch)
[rank1]:   File "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", line 1751, in _call_impl
[rank1]:     return forward_call(*args, **kwargs)
[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 139.72 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 138.64 GiB memory in use.
[rank0]: Traceback (most recent call last):
[rank0]:   File "/work/train.py", line 41, in <module>
[rank0]:     engine.backward(loss)
[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error
[2026-11-30 02:00:05,000] [ERROR] [launch.py:259:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=1'] exits with return code = 1
"""

NCCL_TIMEOUT = """\
[2026-11-30 02:10:00,000] [INFO] [logging.py:123:log_dist] [Rank 0] step=200, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]
[rank1]:[E1130 02:20:00.123456 4242 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4100, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600023 milliseconds before timing out.
[2026-11-30 02:20:01,000] [ERROR] [launch.py:259:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=1'] exits with return code = -6
"""


def overflow_log(overflows: int, steps: int, *, floor: bool = False) -> str:
    lines = []
    scale = 65536
    for _ in range(overflows):
        lines.append(
            "[2026-11-30 02:30:00,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
            f"Skipping step. Attempted loss scale: {scale}, reducing to {scale // 2}"
        )
        scale //= 2
    lines.append(
        f"[2026-11-30 02:30:01,000] [INFO] [logging.py:123:log_dist] [Rank 0] step={steps}, skipped={overflows}, "
        "lr=[0.0001], mom=[(0.9, 0.999)]"
    )
    if floor:
        lines += [
            "[rank0]: Traceback (most recent call last):",
            '[rank0]:   File "/venv/lib/python3.12/site-packages/deepspeed/runtime/fp16/loss_scaler.py", line 180, in update_scale',
            "[rank0]:     raise Exception(",
            "[rank0]: Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
        ]
    return "\n".join(lines) + "\n"


def feed(text: str) -> JobObserver:
    obs = JobObserver(started=0.0)
    for i, line in enumerate(text.splitlines()):
        obs.feed(line, float(i))
    return obs


def test_cuda_oom_names_the_rank_the_size_and_gives_advice() -> None:
    config = {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 2},
    }
    v = decide(feed(CUDA_OOM), launcher_returncodes=[1], ds_config=config)
    assert v.kind == "cuda_oom" and v.rank == 1
    assert (
        v.summary
        == "rank 1 ran out of GPU memory at step 10 (tried to allocate 2.0 GiB; 1.1 GiB free of 139.7 GiB)"
    )
    assert v.advice[0].startswith("halve train_micro_batch_size_per_gpu (8 -> 4)")
    assert "gradient_accumulation_steps to 2" in v.advice[0]
    assert "ZeRO stage (2 -> 3)" in v.advice[1]
    # the planner's advisor replaces the generic advice
    v = decide(
        feed(CUDA_OOM), launcher_returncodes=[1], oom_advisor=lambda cfg: ["micro-batch 2 fits (plan)"]
    )
    assert v.advice == ("micro-batch 2 fits (plan)",)


def test_generic_oom_advice_at_stage_3() -> None:
    advice = default_oom_advice({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}})
    assert "offload" in advice[1]


def test_nccl_timeout() -> None:
    v = decide(feed(NCCL_TIMEOUT), launcher_returncodes=[1])
    assert v.kind == "nccl_timeout" and v.rank == 1
    assert "(ALLREDUCE ran 600 s, limit 600 s)" in v.summary
    assert any("NCCL_DEBUG=INFO" in a for a in v.advice)


def test_overflow_storm_on_a_finished_run_and_at_the_loss_scale_floor() -> None:
    v = decide(feed(overflow_log(8, 10)), launcher_returncodes=[0])
    assert v.kind == "overflow_storm" and "8 steps were skipped" in v.summary
    assert exit_code(v, [0], None) == 0  # the job itself succeeded
    assert decide(feed(overflow_log(2, 100)), launcher_returncodes=[0]).kind == "success"
    v = decide(feed(overflow_log(16, 16, floor=True)), launcher_returncodes=[1])
    assert v.kind == "overflow_storm" and "Current loss scale already at minimum" in (v.exception or "")


def test_failure_without_any_traceback_says_the_exit_code() -> None:
    v = decide(JobObserver(started=0.0), launcher_returncodes=[-11])
    assert v.kind == "failed" and "exit code -11 (SIGSEGV)" in v.summary
    assert exit_code(v, [-11], None) == 139


USAGE_ERROR = """usage: train.py [-h] [--steps STEPS] [--lr LR]
                [--local_rank LOCAL_RANK]
train.py: error: unrecognized arguments: --deepspeed_config /runs/1/config/ds_config.json
usage: train.py [-h] [--steps STEPS] [--lr LR]
                [--local_rank LOCAL_RANK]
train.py: error: unrecognized arguments: --deepspeed_config /runs/1/config/ds_config.json
[2026-12-05 04:05:05,595] [ERROR] [launch.py:259:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=1'] exits with return code = 2
"""


def test_a_script_that_refuses_its_arguments_is_named_with_its_own_message() -> None:
    """argparse's "PROG: error: ..." after its usage, exit status 2: the verdict quotes it once (every rank parses
    the same arguments) and, where it names an argument every rank is given, says how a script takes those."""
    v = decide(feed(USAGE_ERROR), launcher_returncodes=[2])
    assert v.kind == "failed"
    assert v.summary == (
        "the training script refused its arguments before any step: train.py: error: unrecognized arguments: "
        "--deepspeed_config /runs/1/config/ds_config.json"
    )
    # an argument dswiz and the launcher add: how a script takes them, not "fix or drop" what the user never typed
    (advice,) = v.advice  # --deepspeed_config refused, not --local_rank: no --no-local-rank
    assert "--config-arg NAME" in advice and "deepspeed.add_config_arguments(parser)" in advice
    assert "before the script's own arguments and any subcommand" in advice
    assert v.evidence == ()  # the one error line is the summary's
    assert exit_code(v, [2], None) == 2
    # the watcher saw the ranks gone without their exit status (the launcher reaped them first): still the usage
    # error, not a silent death blamed on the OOM killer
    deaths = [
        RankDeath(r, 100 + r, 1.0, host_available_bytes=50 * 2**30, host_total_bytes=64 * 2**30)
        for r in (0, 1)
    ]
    assert decide(feed(USAGE_ERROR), launcher_returncodes=[2], deaths=deaths).summary == v.summary
    # a flag of the script's own: fix or drop it, with the script's --help
    own = USAGE_ERROR.replace("--deepspeed_config /runs/1/config/ds_config.json", "--bogus 3")
    (advice,) = decide(feed(own), launcher_returncodes=[2]).advice
    assert "fix or drop the one it names (`python train.py --help`" in advice


def test_a_script_that_requires_local_rank_is_told_how_to_get_it() -> None:
    """The opposite of a refused --local_rank: launched without it (--no-local-rank, a folder written with it,
    torchrun, accelerate), a parser that requires it -- argparse's and click's words."""
    text = (
        "usage: train.py [-h] --local_rank LOCAL_RANK\n"
        "train.py: error: the following arguments are required: --local_rank\n"
    )
    click_missing = "Usage: train.py [OPTIONS]\nTry 'train.py --help' for help.\n\nError: Missing option '--local-rank'.\n"
    for said in (text, click_missing):
        (advice,) = decide(feed(said), launcher_returncodes=[2]).advice
        assert advice.startswith("the script requires --local_rank") and "launch with --local-rank" in advice
    refused = text.replace(
        "the following arguments are required: --local_rank", "unrecognized arguments: --local-rank=0"
    )
    assert decide(feed(refused), launcher_returncodes=[2]).advice[0].startswith("pass --no-local-rank")


CLICK_USAGE_ERROR = """Usage: train.py [OPTIONS]
Try 'train.py --help' for help.

Error: No such option: --local_rank
"""


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (CLICK_USAGE_ERROR, "train.py: Error: No such option: --local_rank"),
        (  # a subcommand's parser
            "usage: train.py fit [-h] [--lr LR]\ntrain.py fit: error: unrecognized arguments: --bogus\n",
            "train.py fit: error: unrecognized arguments: --bogus",
        ),
        (  # the ranks' lines interleaved, each rank's usage then its error
            "[rank0]: usage: t.py [-h]\n[rank1]: usage: t.py [-h]\n[rank1]: t.py: error: x\n[rank0]: t.py: error: x\n",
            "t.py: error: x",
        ),
    ],
)
def test_the_usage_errors_of_click_subcommands_and_interleaved_ranks(text: str, said: str) -> None:
    v = decide(feed(text), launcher_returncodes=[2])
    assert v.summary == f"the training script refused its arguments before any step: {said}"
    # --local_rank refused: the launcher can leave it out, said first; the config argument's advice stays
    assert v.advice[0].startswith("pass --no-local-rank to `dswiz launch`") == ("--local_rank" in said)
    if "--bogus" in said:  # a subcommand's parser: its own --help
        assert "`python train.py fit --help`" in v.advice[0]


@pytest.mark.parametrize(
    ("text", "codes"),
    [
        ("\n".join(USAGE_ERROR.splitlines()[:3]), [1]),  # not argparse's exit status: something else failed
        ("\n".join(USAGE_ERROR.splitlines()[2:3]), [2]),  # "x: error: y" without a usage line before it
        ("main.py: error: the dataset is empty\n", [2]),
        # the launcher refused its own arguments: not the script's
        (
            "usage: deepspeed [-h] [-H HOSTFILE]\ndeepspeed: error: argument --num_gpus: invalid int value\n",
            [2],
        ),
        # a script's own "usage:" line arms nothing past the next line
        ("usage: 12 GiB of 80\nloading data\nhelper.sh: error: no such file\n", [2]),
        # after training steps, a parser's error is not the script refusing its arguments
        ("[Rank 0] step=5, skipped=0, lr=[0.01], mom=[]\nusage: t.py [-h]\nt.py: error: x\n", [2]),
    ],
)
def test_an_error_line_that_is_not_a_usage_error_keeps_the_plain_verdict(text: str, codes: list[int]) -> None:
    assert "refused its arguments" not in decide(feed(text), launcher_returncodes=codes).summary


def test_tracebacks_chained_interleaved_and_false_starts() -> None:
    tc = TracebackCollector()
    lines = [
        "[rank0]: Traceback (most recent call last):",
        "[rank1]: Traceback (most recent call last):",
        '[rank0]:   File "a.py", line 1, in f',
        '[rank1]:   File "b.py", line 2, in g',
        "[rank0]: KeyError: 'x'",
        "",
        "[rank0]: During handling of the above exception, another exception occurred:",
        "",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "a.py", line 3, in h',
        "[rank0]: ValueError: bad value",
        "[rank1]:     g()",
        "[rank1]: RuntimeError: Connection closed by peer [127.0.0.1]:1234",
        "Traceback (most recent call last):",
        "this is not an exception line",
    ]
    for line in lines:
        tc.feed(line)
    assert [(e.rank, e.text) for e in tc.exceptions] == [
        (0, "ValueError: bad value"),
        (1, "RuntimeError: Connection closed by peer [127.0.0.1]:1234"),
    ]
    first = tc.exceptions[0]
    assert first.chained_from == "KeyError: 'x'" and first.location == "a.py:3 in h"
    assert tc.exceptions[1].secondary and not first.secondary
    assert root_cause(tc.exceptions) is first
    assert root_cause([]) is None


def test_root_cause_prefers_the_first_primary_exception() -> None:
    tc = TracebackCollector()
    for line in [
        "[rank0]: Traceback (most recent call last):",
        "[rank0]: RuntimeError: Connection reset by peer",
        "[rank3]: Traceback (most recent call last):",
        "[rank3]: AssertionError: shapes differ",
        "[rank2]: Traceback (most recent call last):",
        "[rank2]: IndexError: list index out of range",
    ]:
        tc.feed(line)
    cause = root_cause(tc.exceptions)
    assert cause is not None and (cause.rank, cause.type) == (3, "AssertionError")


def test_a_native_abort_at_shutdown_is_named_with_the_likely_fix() -> None:
    """Recorded: two simulated nodes; node B's rank finished training, then died in C++ at interpreter exit."""
    obs = replay_rank_logs("native_abort_at_shutdown", with_launcher_lines=True)
    codes = json.loads((RUNS / "native_abort_at_shutdown" / "facts.json").read_text())["launcher_exit_codes"]
    v = decide(obs, launcher_returncodes=codes)
    assert v.kind == "failed" and v.rank == 1
    assert v.summary == (
        "rank 1 aborted in native code at step 6 (exit code -6 (SIGABRT)): terminate called without an active exception"
    )
    assert "destroy_process_group()" in v.advice[0]
    # the shell's code for the rank's SIGABRT, not launch.py's 8-bit cut of -6 (250)
    assert codes == [0, 250] and obs.exit_codes == [-6]
    assert exit_code(v, codes, None, obs.exit_codes) == 134
    assert exit_code(v, codes, None) == 250  # no rank's code known: the launcher's


def test_a_known_clash_gets_its_fix() -> None:
    """A real run (tests/fixtures/runs/zero_init_dynamo: a transformers model class first touched inside
    deepspeed.zero.Init, torch 2.13 + DeepSpeed 0.19.8): the exception is TorchDynamo's, the fix is an import."""
    obs, codes = replay_stream("zero_init_dynamo")
    v = decide(obs, launcher_returncodes=codes)
    assert (v.kind, v.rank) == ("rank_failed", 0)
    assert v.exception and v.exception.startswith("TypeError: Signature mismatch between")
    assert any("`import torch._dynamo`" in a and "deepspeed.zero.Init" in a for a in v.advice)
    # an unrelated exception gets no such advice
    other, codes = replay_stream("rank_raises")
    assert not any("torch._dynamo" in a for a in decide(other, launcher_returncodes=codes).advice)


def test_a_port_taken_while_the_ranks_start_says_to_run_again() -> None:
    """A real run (tests/fixtures/runs/port_taken: the demo while another job bound port 29500 between dswiz
    choosing it and rank 0 binding it): the verdict names the exception and says what to do."""
    obs = replay_rank_logs("port_taken", with_launcher_lines=True)
    v = decide(obs, launcher_returncodes=[1])
    assert (v.kind, v.rank) == ("rank_failed", 0)
    assert v.exception and "EADDRINUSE" in v.exception
    assert any("took the rendezvous port" in a and "--master-port" in a for a in v.advice)
