"""The CLI on mutated files, in-process through ``wizard.cli.main`` (the console script's own code: every command,
its error printing, rich's rendering): 200 files per command, each run ends with an exit code and, when it fails,
a message naming the problem and a fix; nothing escapes as an exception, no "Traceback" is printed."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from runner import rundir
from wizard.cli import main
from wizard.model_presets import PRESETS

from . import fuzz_support as fz
from .test_config_fuzz import KEYS
from .test_config_roundtrip import HAND_WRITTEN
from .test_fuzz_hardware import CUSTOM, GOOD, PROFILE_VALUES, _profile_text
from .test_fuzz_hostfile import hostfiles
from .test_fuzz_logs import log_lines
from .test_fuzz_metrics import BASE as SNAPSHOT
from .test_fuzz_metrics import SNAPSHOT_KEYS
from .test_fuzz_model import MODEL_KEYS, config_texts, model_values
from .test_fuzz_runjson import BASE as RUN_JSON
from .test_fuzz_runjson import RUN_KEYS

CLI_CASES = 200


def run_cli(*argv: str) -> tuple[int, str]:
    """``dswiz ARGV`` in this process: (exit code, stdout + stderr). An exception other than SystemExit fails."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        else:  # pragma: no cover - main always exits
            code = 0
    return code, out.getvalue() + err.getvalue()


def assert_clean(code: int, output: str, *, ok: tuple[int, ...] = (0,)) -> None:
    assert "Traceback" not in output, output[-2000:]
    if code not in ok:
        assert code in (1, 2), (code, output[-2000:])
        named = "fix" in output and "error" in output  # a finding, or "error: ... / fix: ..."
        assert named or "Nothing fits" in output, output[-2000:]  # plan: what would fit instead


def _json(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


model_files = (
    st.sampled_from(sorted(PRESETS))
    .flatmap(lambda n: fz.mutated(PRESETS[n], MODEL_KEYS, model_values))
    .map(_json)
    | config_texts()
)


@fz.fuzz_settings(CLI_CASES)
@given(text=model_files)
def test_plan_model_config_json(tmp_path_factory: Any, text: str) -> None:
    path = tmp_path_factory.mktemp("m") / "config.json"
    path.write_text(text, encoding="utf-8")
    assert_clean(*run_cli("plan", "--model", str(path), "--hardware", "8xA100-80GB"))


@fz.fuzz_settings(CLI_CASES)
@given(
    profile=st.sampled_from([GOOD, CUSTOM]).flatmap(
        lambda b: fz.mutated(b, ["gpu", "name", "nvme_path"], PROFILE_VALUES)
    )
)
def test_plan_hardware_profile(tmp_path_factory: Any, profile: Any) -> None:
    path = tmp_path_factory.mktemp("h") / "[x] [bold]" / "profile.yaml"
    path.parent.mkdir()
    path.write_text(_profile_text(profile), encoding="utf-8")
    assert_clean(*run_cli("plan", "--model", "gpt2", "--hardware", str(path)))


@fz.fuzz_settings(CLI_CASES)
@given(cfg=fz.mutated(HAND_WRITTEN, KEYS), raw=st.sampled_from(["", fz.HUGE_DIGITS, "[" * 3000]))
def test_check_deepspeed_json(tmp_path_factory: Any, cfg: Any, raw: str) -> None:
    path = tmp_path_factory.mktemp("c") / "ds_config.json"
    text = _json(cfg)
    path.write_text(text[:-1] + raw + text[-1:] if raw and text.endswith("}") else text, encoding="utf-8")
    assert_clean(*run_cli("check", str(path), "--no-consumer-check"), ok=(0, 1))


@fz.fuzz_settings(CLI_CASES)
@given(text=hostfiles)
def test_check_hostfile(tmp_path_factory: Any, text: str) -> None:
    path = tmp_path_factory.mktemp("f") / "hostfile"
    path.write_text(text, encoding="utf-8")
    assert_clean(*run_cli("check", str(path), "--no-consumer-check", "--world-size", "8"), ok=(0, 1))


@fz.fuzz_settings(CLI_CASES)
@given(
    run=fz.mutated(RUN_JSON, RUN_KEYS),
    snapshots=st.lists(fz.mutated(SNAPSHOT, SNAPSHOT_KEYS), max_size=3),
    csv_rows=st.lists(
        st.sampled_from(["step,lr", "inf,0.001", "8,nan", "16,1e-3", fz.HUGE_DIGITS + ",1"]), max_size=4
    ),
    log=st.lists(log_lines(), max_size=6),
)
def test_monitor_json_on_a_run_dir(
    tmp_path_factory: Any, run: Any, snapshots: list[Any], csv_rows: list[str], log: list[str]
) -> None:
    run_dir = rundir.make_run_dir(tmp_path_factory.mktemp("r") / "run")
    if isinstance(run, dict):
        run["status"] = "finished"  # an ended run: the stream prints its snapshot and the summary, then exits
    (run_dir / rundir.RUN_JSON).write_text(_json(run), encoding="utf-8")
    (run_dir / rundir.METRICS_JSONL).write_text("".join(_json(s) + "\n" for s in snapshots), encoding="utf-8")
    csv_dir = run_dir / rundir.CSV_DIR / rundir.CSV_JOB_NAME
    csv_dir.mkdir(parents=True)
    (csv_dir / "Train_Samples_lr.csv").write_text("\n".join(csv_rows) + "\n", encoding="utf-8")
    (run_dir / rundir.COMBINED_LOG).write_text("\n".join(log) + "\n", encoding="utf-8")
    code, output = run_cli("monitor", "--json", "--interval", "0.05", str(run_dir))
    assert_clean(code, output)
    if isinstance(run, dict):
        assert code == 0 and '"event": "summary"' in output, output[-2000:]
