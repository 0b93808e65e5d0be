#!/usr/bin/env bash
# Set everything up, then run the demo: detect this machine, plan a small model, write the configs to a fresh
# folder and launch a short real DeepSpeed training under the live dashboard (2 CPU ranks when there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/dswiz demo "$@"
