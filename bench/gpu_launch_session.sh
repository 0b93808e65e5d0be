#!/usr/bin/env bash
# The product path on a real GPU, recorded for fixtures, screenshots and the README (run on the GPU machine from the
# repository root; writes into $1, default ./gpu-out):
#   1. `dswiz detect --json` wall time (bench/detect_time.py);
#   2. `dswiz config --yes` plans a ~185M GPT-style model (train_tiny.py at hidden 1024, 12 layers, seq 1024, vocab
#      32000) for this GPU and writes the configs; `dswiz launch --no-tui` trains it (run dir kept: logs, csv,
#      metrics.jsonl -> the monitor's real-GPU fixture and screenshot);
#   3. the same model with a micro-batch far too large: the verdict must name the CUDA out-of-memory and advise
#      (from the plan: the config that fits and the command that writes it).
set -uo pipefail
out=${1:-gpu-out}
mkdir -p "$out"
MODEL=(--hidden 1024 --layers 12 --heads 16 --seq-len 1024 --vocab 32000)
python3 bench/detect_time.py --out "$out" > "$out/detect_time.log" 2>&1
python3 -m wizard config --yes --model "layers=12,hidden=1024,heads=16,vocab=32000" --seq-len 1024 \
  --global-batch 32 --torch-adam --out /tmp/cfg-gpu > "$out/config.log" 2>&1
cat "$out/config.log"
python3 -m wizard launch --config /tmp/cfg-gpu --no-tui --run-dir /tmp/run-gpu runner/examples/train_tiny.py \
  "${MODEL[@]}" --steps ${STEPS:-300} --log-every 10 > "$out/launch.log" 2>&1
echo "launch exit $?"; grep '\[dswiz\]' "$out/launch.log" | tail -5
# planned for the model (--model), so the folder has dswiz-plan.json and the verdict re-plans: the advice names the
# micro-batch that fits and the `dswiz config` command that writes it
python3 -m wizard config --yes --model "layers=12,hidden=1024,heads=16,vocab=32000" --seq-len 1024 --stage 2 \
  --precision bf16 --micro-batch 2048 --grad-accum 1 --torch-adam --out /tmp/cfg-oom > /dev/null 2>&1
python3 -m wizard launch --config /tmp/cfg-oom --no-tui --run-dir /tmp/run-oom runner/examples/train_tiny.py \
  "${MODEL[@]}" --steps 5 > "$out/oom.log" 2>&1
echo "oom launch exit $?"; grep '\[dswiz\]' "$out/oom.log" | tail -5
tar czf "$out/runs.tgz" -C /tmp cfg-gpu run-gpu cfg-oom run-oom
