#!/usr/bin/env bash
# Set everything up, then run the whole test suite (lint, types, unit, TUI and real-DeepSpeed integration tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
echo "== ruff"; ruff format --check . && ruff check .
echo "== mypy"; mypy
echo "== import contracts"; lint-imports --no-cache
echo "== pytest"; pytest "$@"
