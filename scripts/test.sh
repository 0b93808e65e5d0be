#!/usr/bin/env bash
# Set everything up, then run the whole test suite (lint, types, unit, TUI and real-DeepSpeed integration tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
echo "== ruff"; ruff format --check .; ruff check .  # two commands: under set -e the first of an && list never stops the script
echo "== mypy"; mypy
echo "== import contracts"; lint-imports --no-cache
echo "== slurm (for tests/integration/test_slurm_jobs.py; stopped when the tests end)"
trap 'bash scripts/slurm-down.sh' EXIT
if ! bash scripts/slurm-up.sh > /dev/null; then
  echo "!! Slurm could not be started here: its tests will be skipped, with the reason in the summary" >&2
fi
export SLURM_CONF=${DSWIZ_SLURM_DIR:-/tmp/dswiz-slurm}/slurm.conf
echo "== pytest"; pytest "$@"
