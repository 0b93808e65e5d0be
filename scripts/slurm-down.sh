#!/usr/bin/env bash
# Stop what scripts/slurm-up.sh started: the jobs, both slurmd, slurmctld, munged (by their pid files), and
# check that none is left. Safe to run when nothing is running.
set -uo pipefail
dir=${DSWIZ_SLURM_DIR:-/tmp/dswiz-slurm}
export SLURM_CONF=$dir/slurm.conf
if [ -f "$SLURM_CONF" ] && command -v scancel > /dev/null; then
  scancel --full --quiet --user=root 2> /dev/null || true
fi
pids=()
for f in "$dir"/slurmd-n1.pid "$dir"/slurmd-n2.pid "$dir"/slurmctld.pid "$dir"/munge/munged.pid; do
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  if kill -0 "$pid" 2> /dev/null; then
    kill -TERM "$pid" 2> /dev/null && pids+=("$pid")
  fi
done
for _ in $(seq 1 40); do
  left=()
  for pid in "${pids[@]}"; do kill -0 "$pid" 2> /dev/null && left+=("$pid"); done
  [ "${#left[@]}" = 0 ] && break
  sleep 0.25
done
for pid in "${left[@]}"; do kill -KILL "$pid" 2> /dev/null || true; done
rm -f "$dir"/slurmd-n1.pid "$dir"/slurmd-n2.pid "$dir"/slurmctld.pid "$dir"/munge/munged.pid
# slurmstepd of a job outlives slurmd by design; those started under this config go too.
for pid in $(pgrep -x slurmstepd 2> /dev/null); do
  grep -qs "$dir" "/proc/$pid/environ" "/proc/$pid/cmdline" && kill -KILL "$pid" 2> /dev/null
done
if grep -q "# dswiz slurm-up.sh" /etc/hosts 2> /dev/null; then
  # /etc/hosts may be a bind mount (containers): rewrite it in place rather than replacing the file
  kept=$(grep -v "# dswiz slurm-up.sh" /etc/hosts)
  printf '%s\n' "$kept" > /etc/hosts
fi
echo "slurm-down: stopped ${#pids[@]} daemon(s)" >&2
