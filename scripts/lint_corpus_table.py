"""Per-code table of ERROR findings of `dswiz check` on the real corpus (tests/fixtures/corpus/MANIFEST.json):
dswiz's rules plus the consumers' own validation (one probe per launch directory), with the false alarms (ERRORs on
a config its consumer accepts), refused configs passed, and crashes. Runs the dswiz found on PYTHONPATH, so the
same command measures another checkout (older ones lack the one-finding-per-cause merge and the consumer guess:
their findings are then simply concatenated, and "other" files are checked without a consumer).

    PYTHONPATH=. python scripts/lint_corpus_table.py
"""

from __future__ import annotations

import collections
import json
import os
import sys
from pathlib import Path
from typing import Any

from wizard.config.check import lint_path
from wizard.consumer.check import ProbeTarget, consumer_findings_many

ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "corpus"


def _merge(own: list[Any], theirs: list[Any]) -> list[Any]:
    try:
        from wizard.consumer.check import merge_with_own
    except ImportError:  # a checkout from before one finding per cause
        return own + theirs
    return merge_with_own(own, theirs)


def _consumer(entry: dict[str, Any]) -> str | None:
    if entry["consumer"] != "other":
        return str(entry["consumer"])
    try:
        from wizard.config.check import guess_consumer
    except ImportError:
        return None
    return guess_consumer(ROOT / entry["file"]).consumer


def _strict(path: Path) -> bool:
    if path.suffix != ".json":
        return True
    try:
        json.loads(path.read_text())
    except ValueError:
        return False
    return True


def main() -> None:
    files = json.loads((ROOT / "MANIFEST.json").read_text())["files"]
    groups: dict[tuple[Path, str], list[dict[str, Any]]] = {}
    for entry in files:
        cwd = ROOT / entry["file"].split("/")[0] / entry["cwd"] if "cwd" in entry else ROOT
        # Older probes stop the whole batch on a file json cannot read: such a file gets a probe of its own, as
        # `dswiz check FILE` gives it.
        groups.setdefault((cwd, "" if _strict(ROOT / entry["file"]) else entry["file"]), []).append(entry)
    per_code: collections.Counter[str] = collections.Counter()
    false: collections.Counter[str] = collections.Counter()
    passed, crashes = [], []
    for (cwd, _alone), entries in groups.items():
        os.chdir(cwd)
        own = []
        for e in entries:
            try:
                own.append(lint_path(ROOT / e["file"], consumer=_consumer(e)))  # type: ignore[arg-type]
            except Exception as ex:  # a crash of the linter is counted, not hidden
                own.append([])
                crashes.append(f"{e['file']}: {ex!r}")
        kinds = ["accelerate" if e["file"].endswith((".yaml", ".yml")) else "deepspeed" for e in entries]
        targets = [
            ProbeTarget(ROOT / e["file"], k, _consumer(e)) for e, k in zip(entries, kinds, strict=True)
        ]  # type: ignore[arg-type]
        for e, mine, theirs in zip(entries, own, consumer_findings_many(targets, cwd=cwd), strict=True):
            merged = _merge(mine, theirs)
            errors = [f.code for f in merged if f.severity.value == "error"]
            if any(f.code in ("consumer-check-failed", "consumer-check-timeout") for f in merged):
                crashes.append(f"{e['file']}: the consumer check did not run")
            per_code.update(errors)
            if e["verdict"] == "accepts":
                false.update(errors)
            elif not errors:
                passed.append(e["file"])
    print(f"{len(files)} files, {len({e['repository'] for e in files})} projects")
    print(f"{'code':36} ERRORs  false alarms")
    for code in sorted(per_code):
        print(f"{code:36} {per_code[code]:6}  {false[code]:6}")
    print(
        f"total {sum(per_code.values())} ERRORs, {sum(false.values())} false alarms, "
        f"{len(passed)} refused configs passed, {len(crashes)} crashes"
    )
    for line in passed + crashes:
        print("  ", line)
    sys.exit(0)


if __name__ == "__main__":
    main()
