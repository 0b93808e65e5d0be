"""Self-calibration from the run history: measurements pull predictions toward them, never past the bounds."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from wizard.hardware.report import HardwareReport, HostInfo
from wizard.history.calibrate import MEMORY_BOUNDS, PRIOR_RUNS, TOKENS_BOUNDS, corrections
from wizard.history.record import Figures, Hardware, Measurement, family_group, hardware_fingerprint

HW = Hardware(gpu_name="NVIDIA H200", gpu_memory_bytes=141 * 1024**3, gpus_per_node=1)
Z2 = {"stage": 2, "offload_optimizer": "none", "offload_param": "none"}
Z3_CPU = {"stage": 3, "offload_optimizer": "cpu", "offload_param": "none"}


def _run(
    pred_tps: float,
    meas_tps: float,
    *,
    strategy: dict = Z2,
    outcome: str = "success",
    pred_mem: int = 10 << 30,
    meas_mem: int = 10 << 30,
    hw: Hardware = HW,
) -> Measurement:
    return Measurement(
        hardware=hw,
        model={"name": "m"},
        strategy=strategy,
        outcome=outcome,
        predicted=Figures(tokens_per_sec=pred_tps, peak_gpu_bytes=pred_mem),
        measured=Figures(tokens_per_sec=meas_tps, peak_gpu_bytes=meas_mem),
    )


def test_no_runs_means_no_correction() -> None:
    c = corrections([], HW.key)
    assert c.runs == 0 and c.summary() is None
    assert c.for_family("z2-opt:none-param:none").tokens_per_sec.value == 1.0


def test_one_run_moves_part_of_the_way_more_runs_move_further() -> None:
    # every run measured 20 % slower than predicted
    one = corrections([_run(1000, 800)], HW.key).for_family("z2-opt:none-param:none").tokens_per_sec
    four = corrections([_run(1000, 800)] * 4, HW.key).for_family("z2-opt:none-param:none").tokens_per_sec
    assert 0.8 < four.value < one.value < 1.0
    assert math.isclose(one.value, math.exp(math.log(0.8) * 1 / (1 + PRIOR_RUNS)))
    assert four.error_before is not None and four.error_after is not None
    assert four.error_after < four.error_before  # leave-one-out: a new run is predicted better


def test_only_successful_runs_of_the_same_hardware_count() -> None:
    other = Hardware(gpu_name="T4", gpu_memory_bytes=16 << 30, gpus_per_node=1)
    runs = [_run(1000, 500, outcome="oom"), _run(1000, 500, hw=other), _run(1000, 500, outcome="running")]
    assert corrections(runs, HW.key).runs == 0


def test_families_are_corrected_separately_and_others_take_their_class_correction() -> None:
    """An unmeasured family borrows from the runs of its class: a GPU-bound one (stages 0-2 without offload) never
    takes a host-bound run's speed (ZeRO-3, offload: the host's Python and cores set it), and the other way round."""
    runs = [_run(1000, 700, strategy=Z3_CPU)] * 3 + [_run(1000, 1000)] * 3
    c = corrections(runs, HW.key)
    z3 = c.for_family("z3-opt:cpu-param:none").tokens_per_sec.value
    z2 = c.for_family("z2-opt:none-param:none").tokens_per_sec.value
    unseen = c.for_family("z1-opt:none-param:none").tokens_per_sec.value
    unseen_host_bound = c.for_family("z3-opt:none-param:none").tokens_per_sec.value
    assert z3 < 0.9 and math.isclose(z2, 1.0)
    assert math.isclose(unseen, z2) and z3 < c.overall.tokens_per_sec.value < 1.0
    assert math.isclose(unseen_host_bound, z3)
    assert c.summary() is not None and c.summary().startswith("calibrated by 6 runs on this hardware")  # type: ignore[union-attr]


def test_runs_of_one_family_teach_the_machine_so_no_unmeasured_family_gains_on_it() -> None:
    c = corrections([_run(1000, 700)] * 3, HW.key)
    measured = c.for_family("z2-opt:none-param:none").tokens_per_sec.value
    assert measured < 1.0 and math.isclose(
        c.for_family("z1-opt:none-param:none").tokens_per_sec.value, measured
    )


def test_implausible_runs_are_left_out_not_clamped_and_said() -> None:
    wild = [_run(1000, 1_000_000)] * 3 + [_run(1000, 1000, meas_mem=500 << 30)] * 2  # x1000; 500 GiB on 141
    c = corrections([*wild, _run(1000, 900)], HW.key)
    assert c.runs == 1 and c.left_out == 5
    assert "5 implausible runs left out" in (c.summary() or "")
    assert corrections(wild, HW.key).runs == 0


def test_an_oom_teaches_that_the_card_was_not_enough() -> None:
    """A run that ran out of memory at a strategy predicted to need 100 GiB needed at least the 141 GiB card."""
    oom = [_run(1000, 0, outcome="oom", pred_mem=100 << 30, meas_mem=0)] * 3
    mem = corrections(oom, HW.key).for_family("z2-opt:none-param:none").peak_gpu_bytes
    assert mem.runs == 3 and mem.value > 1.0
    assert corrections(oom, HW.key).for_family("z2-opt:none-param:none").tokens_per_sec.runs == 0


@settings(max_examples=300, derandomize=True, deadline=None)
@given(
    ratios=st.lists(st.floats(min_value=0.34, max_value=2.9), min_size=1, max_size=12),
    mem_ratios=st.lists(st.floats(min_value=0.34, max_value=2.9), min_size=1, max_size=12),
)
def test_corrections_never_leave_their_bounds_and_point_toward_the_measurements(
    ratios: list[float], mem_ratios: list[float]
) -> None:
    runs = [
        _run(1000.0, 1000.0 * r, meas_mem=int((10 << 30) * m))
        for r, m in zip(ratios, mem_ratios * 12, strict=False)
    ]
    fc = corrections(runs, HW.key).for_family("z2-opt:none-param:none")
    t, m = fc.tokens_per_sec.value, fc.peak_gpu_bytes.value
    assert TOKENS_BOUNDS[0] <= t <= TOKENS_BOUNDS[1]
    assert MEMORY_BOUNDS[0] <= m <= MEMORY_BOUNDS[1]
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    # the correction lies between the prior (1.0) and the measurements' geometric mean (or at a bound)
    assert min(1.0, geo) - 1e-9 <= t or t == TOKENS_BOUNDS[0]
    assert t <= max(1.0, geo) + 1e-9 or t == TOKENS_BOUNDS[1]


def test_on_one_gpu_stages_0_to_2_teach_each_other_before_the_machine_wide_figure() -> None:
    """ZeRO-1 measured 10 % slow and ZeRO-3 40 % slow on one GPU: ZeRO-2 (the same work there) takes ZeRO-1's
    correction, not the mix with ZeRO-3; with two GPUs, ZeRO-2 communicates differently: a group of its own, it
    borrows from the GPU-bound runs (ZeRO-1 again here), never from ZeRO-3's host-bound speed."""
    z1 = {"stage": 1, "offload_optimizer": "none", "offload_param": "none", "world_size": 1}
    z3 = {"stage": 3, "offload_optimizer": "none", "offload_param": "none", "world_size": 1}
    runs = [_run(1000, 900, strategy=z1), _run(1000, 600, strategy=z3)]
    c = corrections(runs, HW.key)
    z1_own = c.for_family("z1-opt:none-param:none").tokens_per_sec.value
    z2_one_gpu = c.for_family("z2-opt:none-param:none", family_group("z2-opt:none-param:none", 1))
    z2_two_gpus = c.for_family("z2-opt:none-param:none", family_group("z2-opt:none-param:none", 2))
    assert z2_one_gpu.tokens_per_sec.value == z1_own
    assert z2_two_gpus.tokens_per_sec.value == z1_own
    assert c.overall.tokens_per_sec.value < z1_own
    # checkpointing and offload are other work: a group of their own, not ZeRO-1's
    assert family_group("z2-opt:none-param:none-ckpt", 1) != family_group("z1-opt:none-param:none", 1)
    assert family_group("z2-opt:cpu-param:none", 1) == "z2-opt:cpu-param:none"
    assert family_group("z3-opt:none-param:none", 1) == "z3-opt:none-param:none"


def test_host_bound_runs_of_another_host_cpu_teach_nothing() -> None:
    """Stage 3's hooks and CPU offload run on the host: runs on another CPU model of the same GPU teach those
    families nothing (a GPU-bound family still learns from them), and runs that do not know their CPU count."""
    here, there = replace(HW, host_cpu="AMD EPYC 9654"), replace(HW, host_cpu="Intel Xeon 8480+")
    runs = [
        _run(1000, 500, strategy=Z3_CPU, hw=there),
        _run(1000, 800, hw=there),
        _run(1000, 900, strategy=Z3_CPU, hw=replace(HW, host_cpu="")),
    ]
    c = corrections(runs, HW.key, host_cpu=here.host_cpu)
    assert c.for_family("z3-opt:cpu-param:none").tokens_per_sec.runs == 1  # the run of unknown CPU only
    assert c.for_family("z2-opt:none-param:none").tokens_per_sec.runs == 1  # GPU-bound: any host
    assert corrections(runs, HW.key).for_family("z3-opt:cpu-param:none").tokens_per_sec.runs == 2


def test_a_run_the_planner_put_on_the_host_teaches_only_its_own_host_cpu() -> None:
    """A GPU-bound family's run at micro-batch 1 of a ~1B model waits on the host for a third of its step (Pythia-1B
    ZeRO-0 at micro-batch 1 read 14.7k-26.1k tokens/s on H200 machines): recorded with its prediction's host_bound,
    it is left out on another host CPU, where the same family's GPU-bound runs still teach."""
    here, there = replace(HW, host_cpu="AMD EPYC 9654"), replace(HW, host_cpu="Intel Xeon 8480+")
    small = replace(
        _run(1000, 600, hw=there),
        predicted=Figures(tokens_per_sec=1000, peak_gpu_bytes=10 << 30, host_bound=True),
    )
    large = _run(1000, 900, hw=there)
    assert small.host_bound and not large.host_bound and small.family == large.family
    c = corrections([small, large], HW.key, host_cpu=here.host_cpu)
    assert c.for_family(large.family).tokens_per_sec.runs == 1
    # a host-bound candidate without host-bound runs of its own takes its family's runs as a whole
    assert c.for_family(large.family, host_bound=True).tokens_per_sec.runs == 1
    theirs = corrections([small, large], HW.key, host_cpu=there.host_cpu)
    assert theirs.for_family(large.family).tokens_per_sec.runs == 1  # the GPU-bound run
    assert theirs.for_family(large.family, host_bound=True).tokens_per_sec.runs == 1  # the host-bound one
    assert theirs.for_family(large.family).peak_gpu_bytes.runs == 2  # memory: both
    # on its own CPU it teaches its family's and group's host-bound candidates, not the GPU-bound class
    mine = corrections([replace(small, hardware=here)], HW.key, host_cpu=here.host_cpu)
    assert mine.for_family(large.family, host_bound=True).tokens_per_sec.runs == 1
    z1 = "z1-opt:none-param:none"
    assert mine.for_family(z1, family_group(z1, 1), host_bound=True).tokens_per_sec.runs == 1  # its group
    assert mine.for_family(large.family).tokens_per_sec.runs == 0  # a GPU-bound candidate: borrowed at most
    assert (mine.classes or {}).keys() == {"host-bound"}  # no GPU-bound class to borrow from
    # the flag survives the store's JSON; a record without it (older dswiz) is as it was, a bad value is no flag
    assert Figures.from_json(small.predicted.to_json()).host_bound is True
    assert Figures.from_json({"tokens_per_sec": 5.0}).host_bound is None
    assert Figures.from_json({"host_bound": "yes"}).host_bound is None


def test_a_familys_host_bound_runs_never_correct_its_gpu_bound_candidates() -> None:
    """ZeRO-1 read 40 % below its prediction at micro-batch 1 (host-bound, noisy from one process to the next) and as
    predicted at 16: the family's micro-batch-16 candidates keep the physics, its micro-batch-1 candidates take the
    slow runs; on one GPU ZeRO-2 (its group) does the same; memory learns from both."""
    z1 = {"stage": 1, "offload_optimizer": "none", "offload_param": "none", "world_size": 1}
    slow = replace(
        _run(1000, 600, strategy=z1, pred_mem=10 << 30, meas_mem=11 << 30),
        predicted=Figures(tokens_per_sec=1000, peak_gpu_bytes=10 << 30, host_bound=True),
    )
    runs = [slow] * 3 + [_run(1000, 1000, strategy=z1, pred_mem=10 << 30, meas_mem=11 << 30)] * 3
    c = corrections(runs, HW.key)
    family = runs[0].family
    assert math.isclose(c.for_family(family).tokens_per_sec.value, 1.0)
    assert c.for_family(family, host_bound=True).tokens_per_sec.value < 0.8
    z2 = "z2-opt:none-param:none"
    assert math.isclose(c.for_family(z2, family_group(z2, 1)).tokens_per_sec.value, 1.0)
    assert c.for_family(z2, family_group(z2, 1), host_bound=True).tokens_per_sec.value < 0.8
    memory = c.for_family(family).peak_gpu_bytes
    assert memory.runs == 6 and memory.value > 1.0
    assert c.for_family(family, host_bound=True).peak_gpu_bytes == memory


def test_a_host_bound_candidate_without_host_bound_runs_keeps_its_familys_correction() -> None:
    """ZeRO-1 read as predicted and ZeRO-3 + CPU offload at 0.55x: ZeRO-1's micro-batch-1 candidate (host-bound by its
    prediction) takes ZeRO-1's runs, not the ZeRO-3/offload class's speed (CPU Adam and fetch hooks are other
    work)."""
    z1 = {"stage": 1, "offload_optimizer": "none", "offload_param": "none", "world_size": 1}
    runs = [_run(1000, 1000, strategy=z1)] * 3 + [_run(1000, 550, strategy=Z3_CPU)] * 3
    c = corrections(runs, HW.key)
    family = runs[0].family
    assert math.isclose(c.for_family(family, host_bound=True).tokens_per_sec.value, 1.0)
    assert c.for_family("z3-opt:cpu-param:none").tokens_per_sec.value < 0.8


def test_runs_that_measured_no_speed_leave_the_next_figure_to_decide() -> None:
    """An OOM measures memory only: a class (or family) whose runs all ran out of memory gives no speed, so the
    next figure in line decides -- never the physics' 1.0 standing in for evidence."""
    z3 = {"stage": 3, "offload_optimizer": "none", "offload_param": "none"}
    runs = [_run(1000, 800)] * 3 + [_run(1000, 0, strategy=z3, outcome="oom", pred_mem=130 << 30, meas_mem=0)]
    c = corrections(runs, HW.key)
    machine = c.overall.tokens_per_sec.value
    assert machine < 0.9
    # ZeRO-3 + offload (host-bound, no runs): its class ran out of memory only, so the machine's figure, borrowed
    unseen = c.for_family("z3-opt:cpu-param:none").tokens_per_sec
    assert unseen.runs == 0 and unseen.value < 1.0
    # ZeRO-3 itself: its memory from its OOM, its speed from the machine (its own runs measured none)
    own = c.for_family("z3-opt:none-param:none")
    assert own.peak_gpu_bytes.runs == 1 and own.tokens_per_sec.value < 1.0


def test_the_fingerprint_keeps_the_host_cpu_and_reads_old_records_without_it() -> None:
    hw = HardwareReport(source="test", host=HostInfo(cpu_model="AMD EPYC 9654", physical_cores=96))
    fp = hardware_fingerprint(hw)
    assert fp.host_cpu == "AMD EPYC 9654" and Hardware.from_json(fp.to_json()) == fp
    assert "EPYC" not in fp.key  # the key matches runs across hosts; host-bound families filter by CPU
    assert Hardware.from_json({"gpu_name": "H200"}).host_cpu == ""
