#!/usr/bin/env bash
# Create .venv (if missing) and install dswiz with DeepSpeed, torch (CPU wheel here) and the test tools,
# pinned by constraints/test.txt. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.dswiz-installed
want="$(cat pyproject.toml constraints/test.txt | cksum)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints/test.txt -e '.[deepspeed,test]'
  echo "$want" > "$stamp"
fi
# DeepSpeed's CPU jobs load one compiled op; build it here, once, not inside the first job: a job stopped during
# that build leaves a lock file every later job waits on (scripts/build_cpu_ops.py says more).
.venv/bin/python scripts/build_cpu_ops.py || echo "!! DeepSpeed's CPU op was not built (above: why); the first DeepSpeed job will try again" >&2
