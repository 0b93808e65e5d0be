"""Code-change hints, checked against the installed libraries: every snippet compiles, every call it makes to
accelerate / DeepSpeed / transformers names parameters those functions really have (inspect.signature; a name
swallowed by **kwargs does not count), and the error the finding quotes is the one accelerate raises.
tests/integration/test_hints_run.py runs the snippets for real."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from wizard.errors import DswizError
from wizard.findings import Severity
from wizard.hints import CONSUMERS, OPTIMIZER_SOURCES, SCHEDULER_SOURCES, code_hints

ALL = list(itertools.product(CONSUMERS, OPTIMIZER_SOURCES, SCHEDULER_SOURCES))


def calls(source: str, name: str) -> list[ast.Call]:
    """Calls to ``name`` or ``x.name`` in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Name) and f.id == name) or (
                isinstance(f, ast.Attribute) and f.attr == name
            ):
                found.append(node)
    return found


def assert_binds(call: ast.Call, target: Callable[..., Any]) -> None:
    """The call's positional and keyword arguments bind to ``target``'s real, named parameters."""
    sig = inspect.signature(target)
    named = {n for n, p in sig.parameters.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    keywords = [k.arg for k in call.keywords]
    assert None not in keywords, "no **kwargs in snippets"
    assert set(keywords) <= named, f"{ast.unparse(call)}: {set(keywords) - named} not parameters of {target}"
    sig.bind(*range(len(call.args)), **dict.fromkeys(keywords))


@pytest.mark.parametrize(("consumer", "opt", "sched"), ALL)
def test_snippets_compile(consumer: str, opt: str, sched: str) -> None:
    hints = code_hints(consumer, opt, sched)
    compile(hints.before, "before.py", "exec")
    compile(hints.after, "after.py", "exec")
    assert hints.explanation and "\n" not in hints.explanation
    assert hints.launch.split()[0] in ("deepspeed", "accelerate")


def test_the_diff_is_the_change() -> None:
    for consumer, opt, sched in ALL:
        hints = code_hints(consumer, opt, sched)
        assert bool(hints.diff) == hints.changed
        if hints.changed:
            added = [
                ln[1:] for ln in hints.diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")
            ]
            removed = [
                ln[1:] for ln in hints.diff.splitlines() if ln.startswith("-") and not ln.startswith("---")
            ]
            assert added and all(ln in hints.after.splitlines() for ln in added)
            assert all(ln in hints.before.splitlines() for ln in removed)
    # accelerate passes a script's own optimizer and scheduler through untouched.
    assert not code_hints("accelerate", "script", "script").changed
    assert not code_hints("accelerate", "script", "none").changed


def test_accelerate_placeholders_exist_with_these_signatures() -> None:
    from accelerate import Accelerator
    from accelerate.utils import DummyOptim, DummyScheduler

    seen = set()
    for opt, sched in itertools.product(OPTIMIZER_SOURCES, SCHEDULER_SOURCES):
        after = code_hints("accelerate", opt, sched).after
        for call in calls(after, "DummyOptim"):
            assert_binds(call, DummyOptim)
            seen.add("DummyOptim")
        for call in calls(after, "DummyScheduler"):
            assert_binds(call, DummyScheduler)
            seen.add("DummyScheduler")
        for call in calls(after, "prepare"):
            assert_binds(call, Accelerator.prepare)
        # What the hint promises: a placeholder exactly where the config owns the object.
        assert bool(calls(after, "DummyOptim")) == (opt == "config")
        assert bool(calls(after, "DummyScheduler")) == (
            sched == "config" or (opt == "config" and sched == "script")
        )
    assert seen == {"DummyOptim", "DummyScheduler"}
    callable_kw = [
        k.arg
        for c in calls(code_hints("accelerate", "config", "script").after, "DummyScheduler")
        for k in c.keywords
    ]
    assert "lr_scheduler_callable" in callable_kw


def test_deepspeed_initialize_calls_match_the_installed_signature() -> None:
    import deepspeed

    for opt, sched in itertools.product(OPTIMIZER_SOURCES, SCHEDULER_SOURCES):
        after = code_hints("deepspeed", opt, sched).after
        (call,) = calls(after, "initialize")
        assert_binds(call, deepspeed.initialize)
        keywords = {k.arg for k in call.keywords}
        assert ("optimizer" in keywords) == (opt == "script")
        assert ("model_parameters" in keywords) == (opt == "config")
        assert ("lr_scheduler" in keywords) == (sched == "script")
        (add_args,) = calls(after, "add_config_arguments")
        assert_binds(add_args, deepspeed.add_config_arguments)


def test_trainer_argument_exists() -> None:
    from transformers import TrainingArguments

    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    for opt, sched in itertools.product(OPTIMIZER_SOURCES, SCHEDULER_SOURCES):
        hints = code_hints("trainer", opt, sched, config_file="run1/ds_config.json")
        (call,) = calls(hints.after, "TrainingArguments")
        assert {k.arg for k in call.keywords} <= fields
        deepspeed_kw = next(k for k in call.keywords if k.arg == "deepspeed")
        assert ast.literal_eval(deepspeed_kw.value) == "run1/ds_config.json"
        assert hints.launch == "deepspeed train.py --deepspeed run1/ds_config.json"


def test_finding_only_for_a_ds_optimizer_with_a_script_scheduler() -> None:
    from accelerate import Accelerator

    for consumer, opt, sched in ALL:
        findings = code_hints(consumer, opt, sched).findings
        expected = consumer != "trainer" and opt == "config" and sched == "script"
        assert bool(findings) == expected, (consumer, opt, sched)
    (finding,) = code_hints("accelerate", "config", "script").findings
    assert finding.severity is Severity.WARNING and finding.code == "ds-optimizer-script-scheduler"
    assert "lr_scheduler_callable" in finding.fix
    # The message the finding quotes is accelerate's own.
    quoted = finding.why.split('ValueError("', 1)[1].split(" ...", 1)[0]
    assert quoted in inspect.getsource(Accelerator._prepare_deepspeed)
    (ds_finding,) = code_hints("deepspeed", "config", "script").findings
    assert "lr_scheduler=lambda opt" in ds_finding.fix


def test_unknown_choices_are_refused() -> None:
    with pytest.raises(DswizError, match="unknown consumer 'torchrun'"):
        code_hints("torchrun", "config", "config")
    with pytest.raises(DswizError, match="unknown scheduler source"):
        code_hints("accelerate", "config", "json")


def test_to_dict_is_json_ready() -> None:
    import json

    d = code_hints("accelerate", "config", "script").to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["findings"][0]["severity"] == "warning"


def test_a_scripts_own_adamw_becomes_the_fused_step_the_planner_assumes() -> None:
    """Where the hint rewrites the script, the script's optimizer is torch's AdamW with fused=True (a real parameter
    of the installed torch): the step dswiz's planner figures were measured with, not torch's default foreach step.
    (A script accelerate runs unchanged keeps its own optimizer.)"""
    import torch

    for consumer, opt, sched in ALL:
        hints = code_hints(consumer, opt, sched)
        for call in calls(hints.after, "AdamW") if hints.changed else []:
            assert_binds(call, torch.optim.AdamW)
            assert any(k.arg == "fused" and ast.literal_eval(k.value) is True for k in call.keywords), (
                consumer,
                opt,
                sched,
            )
    assert "fused=True" in code_hints("deepspeed", "script", "none").diff


def test_the_plan_says_which_optimizer_step_its_figures_assume() -> None:
    """The optimizer on the GPU: the reasons name the fused AdamW step the hint writes (torch's default foreach step
    holds one more fp32 block). Offloaded: DeepSpeed's CPU Adam runs the step, and the reason says that instead."""
    from wizard.hardware import get_hardware
    from wizard.model import load_model_spec
    from wizard.planner import PlanRequest, plan

    p = plan(get_hardware("1xA100-80GB,ram=256GiB"), load_model_spec("gpt2-xl"), PlanRequest(seq_len=1024))
    on_gpu = [c for c in p.candidates if c.fits and c.strategy.offload_optimizer == "none"]
    on_cpu = [c for c in p.candidates if c.fits and c.strategy.offload_optimizer == "cpu"]
    assert on_gpu and on_cpu
    fused = "planned for a fused AdamW step, as the hints write it"
    assert all(any(fused in r for r in c.reasons) for c in on_gpu if c.strategy.zero_stage > 0)
    assert not any(fused in r for c in on_cpu for r in c.reasons)
    assert any("CPU Adam each step" in r for c in on_cpu for r in c.reasons)
    assert "fused=True" in code_hints("deepspeed", "script", "none").after
    # where the hint leaves the script as it is, it says which step the figures assume
    assert "fused=True" in code_hints("accelerate", "script", "none").explanation
