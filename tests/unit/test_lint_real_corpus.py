"""`dswiz check` on configs real projects ship (tests/fixtures/corpus/MANIFEST.json: each file's source repository,
path, commit, the consumer it is written for and its verdict for that consumer under DeepSpeed 0.19.8 /
accelerate 1.15.0 / transformers 5.24.0).

Every ERROR must be something the consumer refuses (no false alarm on a config it accepts), every config it refuses
must get an ERROR, and no file may crash the check. The unit tests run dswiz's own rules through the CLI command
in-process; the integration test adds the consumers' own validation (one probe subprocess for the corpus), as
`dswiz check` runs it by default, and checks that a cause is reported once."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from wizard.commands.check import check
from wizard.config.check import guess_consumer, lint_path
from wizard.consumer.check import ProbeTarget, consumer_findings_many, merge_with_own
from wizard.findings import Finding, Severity

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
MANIFEST: dict[str, Any] = json.loads((CORPUS / "MANIFEST.json").read_text())
FILES: list[dict[str, Any]] = MANIFEST["files"]
BY_NAME = {entry["file"]: entry for entry in FILES}


def _consumer(entry: dict[str, Any]) -> str | None:
    return None if entry["consumer"] == "other" else str(entry["consumer"])


def _launch_dir(entry: dict[str, Any]) -> Path:
    """Where the file is launched from: accelerate resolves a relative deepspeed_config_file there."""
    path = CORPUS / entry["file"]
    return CORPUS / entry["file"].split("/")[0] / entry["cwd"] if "cwd" in entry else path.parent


@contextmanager
def _cwd(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def _run_check(entry: dict[str, Any], *extra: str) -> tuple[int, dict[str, Any]]:
    args = [str(CORPUS / entry["file"]), "--no-consumer-check", "--json", *extra]
    with _cwd(_launch_dir(entry)):
        result = CliRunner().invoke(check, args, standalone_mode=False, catch_exceptions=True)
    assert result.exception is None, f"{entry['file']}: {result.exception!r}"
    return int(result.return_value), json.loads(result.output)


def _errors(findings: list[dict[str, Any]] | list[Finding]) -> list[str]:
    out = []
    for f in findings:
        severity, code = (f["severity"], f["code"]) if isinstance(f, dict) else (f.severity.value, f.code)
        if severity == "error":
            out.append(code)
    return out


def test_the_corpus_is_real_and_large_enough() -> None:
    projects = {entry["repository"] for entry in FILES}
    assert len(FILES) >= 60 and len(projects) >= 6
    for entry in FILES:
        assert (CORPUS / entry["file"]).is_file(), entry["file"]
        assert len(entry["commit"]) == 40 and entry["path"] and entry["license"]
        assert entry["verdict"] in ("accepts", "refuses", "silently-wrong") and entry["reason"]
        assert entry["consumer"] in ("deepspeed", "accelerate", "trainer", "other")
    assert {e["verdict"] for e in FILES} >= {"accepts", "refuses"}


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_check_for_its_consumer_matches_the_verdict(name: str) -> None:
    entry = BY_NAME[name]
    consumer = _consumer(entry)
    code, payload = _run_check(entry, *(["--for", consumer] if consumer else []))
    errors = _errors(payload["findings"])
    if entry["verdict"] == "accepts":
        assert errors == [], f"false alarm on a config {entry['consumer']} accepts ({entry['reason']})"
        assert code == 0
    else:
        assert errors, f"{entry['consumer']} {entry['verdict']} it ({entry['reason']}) but dswiz passed it"
        assert code == 1
    for f in payload["findings"]:
        assert f["what"] and f["why"] and f["fix"], f


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_without_for_the_consumer_is_guessed_and_said(name: str) -> None:
    entry = BY_NAME[name]
    _code, payload = _run_check(entry)
    guess = guess_consumer(CORPUS / entry["file"])
    assert payload["consumer"] == guess.consumer and payload["consumer_guessed"] == guess.reason
    if entry["file"].endswith((".yaml", ".yml")):
        assert guess.consumer == "accelerate"
    elif entry["consumer"] in ("trainer", "deepspeed") and entry["verdict"] == "accepts":
        assert guess.consumer == entry["consumer"], guess.reason
    if entry["verdict"] == "accepts":
        assert _errors(payload["findings"]) == [], "no false alarm under the guessed consumer either"


def test_the_text_output_says_what_was_guessed_and_why() -> None:
    entry = BY_NAME["llama-factory/examples/deepspeed/ds_z3_config.json"]
    with _cwd(_launch_dir(entry)):
        result = CliRunner().invoke(check, [str(CORPUS / entry["file"]), "--no-consumer-check"])
    first = result.output.splitlines()[0]
    assert first.startswith("checked for: trainer, guessed because") and '"auto"' in first


@pytest.mark.integration
def test_with_the_consumers_own_checks_one_finding_per_cause() -> None:
    """The default `dswiz check` (dswiz's rules + DeepSpeed's/accelerate's own validation), batched: no false
    alarm, nothing refused passed, no crash of the consumer check, and no cause reported twice."""
    groups: dict[Path, list[dict[str, Any]]] = {}
    for entry in FILES:  # one probe per launch directory that matters (paths are absolute otherwise)
        groups.setdefault(_launch_dir(entry) if "cwd" in entry else CORPUS, []).append(entry)
    failures = []
    for cwd, entries in groups.items():
        with _cwd(cwd):
            own = [lint_path(CORPUS / e["file"], consumer=_consumer(e)) for e in entries]  # type: ignore[arg-type]
            targets = [
                ProbeTarget(
                    CORPUS / e["file"],
                    "accelerate" if e["file"].endswith((".yaml", ".yml")) else "deepspeed",
                    _consumer(e),  # type: ignore[arg-type]
                )
                for e in entries
            ]
            from_consumer = consumer_findings_many(targets, cwd=cwd)
        for entry, mine, theirs in zip(entries, own, from_consumer, strict=True):
            merged = merge_with_own(mine, theirs)
            errors = _errors(merged)
            codes = [f.code for f in merged]
            if "consumer-check-failed" in codes or "consumer-check-timeout" in codes:
                failures.append(f"{entry['file']}: the consumer check did not run: {codes}")
            if entry["verdict"] == "accepts" and errors:
                failures.append(f"{entry['file']}: false alarm {errors}")
            if entry["verdict"] != "accepts" and not errors:
                failures.append(f"{entry['file']}: refused but passed")
            if any(c.endswith("-rejects") for c in errors) and len(set(errors)) > 1:
                failures.append(f"{entry['file']}: one cause reported twice? {errors}")
            if any(f.severity is Severity.ERROR and "not-installed" in f.code for f in merged):
                failures.append(f"{entry['file']}: consumer not installed")
    assert failures == []
