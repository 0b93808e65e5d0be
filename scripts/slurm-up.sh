#!/usr/bin/env bash
# A real Slurm on this machine for the integration tests (tests/integration/test_slurm_*.py): Debian's slurm-wlm
# and munge, one slurmctld and two slurmd ("n1", "n2", both this host, each on its own port), no accounting,
# CPU-only. Idempotent: installs only what is missing, and leaves daemons that already answer running.
# Everything lives in $DSWIZ_SLURM_DIR (default /tmp/dswiz-slurm): slurm.conf, the munge key and socket, logs,
# spool, pid files. Stop it all with scripts/slurm-down.sh.
#
# Prints `export SLURM_CONF=...` last; exits non-zero with the reason on stderr when Slurm cannot run here
# (the tests then skip, saying why).
set -euo pipefail
dir=${DSWIZ_SLURM_DIR:-/tmp/dswiz-slurm}
say() { echo "slurm-up: $*" >&2; }
fail() {
  say "$*"
  exit 1
}
start=$(date +%s)

need_install=0
for bin in slurmctld slurmd munged sinfo sbatch; do
  command -v "$bin" > /dev/null || need_install=1
done
if [ "$need_install" = 1 ]; then
  [ "$(id -u)" = 0 ] || fail "slurm-wlm/munge are not installed and installing them needs root"
  command -v apt-get > /dev/null || fail "slurm-wlm/munge are not installed and there is no apt-get"
  say "installing slurm-wlm and munge (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq --no-install-recommends slurm-wlm munge > "$dir.apt.log" 2>&1; then
    apt-get update -qq >> "$dir.apt.log" 2>&1 || true
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >> "$dir.apt.log" 2>&1 \
      || fail "apt-get install slurm-wlm munge failed (log: $dir.apt.log)"
  fi
fi
installed=$(date +%s)

mkdir -p "$dir"/{spool/ctld,spool/n1,spool/n2,log,munge}
cpus=$(nproc)
mem_mb=$(($(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 / 2))
conf="$dir/slurm.conf"
cat > "$conf.new" << EOF
# Written by dswiz scripts/slurm-up.sh: a test cluster on one host, no accounting, CPU-only.
ClusterName=dswiz-test
SlurmctldHost=localhost
SlurmctldPort=${DSWIZ_SLURMCTLD_PORT:-16817}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/spool/ctld
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# Two node names on one host share its cores: let the configured CPUs stand.
SlurmdParameters=config_overrides
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=60
# scancel: SIGTERM, then SIGKILL after KillWait s; 30 is Slurm's default, time for dswiz launch to stop the
# ranks and write its verdict.
KillWait=30
Waittime=0
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=${DSWIZ_SLURMD_PORT1:-16818} CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=${DSWIZ_SLURMD_PORT2:-16819} CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:2
EOF
mv "$conf.new" "$conf"
export SLURM_CONF=$conf

# Jobs name their first host as MASTER_ADDR (scontrol show hostnames): n1 and n2 must resolve, to this host.
if ! getent hosts n1 > /dev/null || ! getent hosts n2 > /dev/null; then
  [ -w /etc/hosts ] || fail "n1/n2 do not resolve and /etc/hosts is not writable"
  echo "127.0.0.1 n1 n2 # dswiz slurm-up.sh" >> /etc/hosts
fi

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2> /dev/null; }

key="$dir/munge/munge.key"
if [ ! -f "$key" ]; then
  if command -v mungekey > /dev/null; then
    mungekey --create --keyfile="$key" 2> /dev/null || dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
  else
    dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
  fi
  chmod 0400 "$key"
fi
chmod 0700 "$dir/munge"
if ! alive "$dir/munge/munged.pid"; then
  munged --force --key-file="$key" --socket="$dir/munge/munge.socket" --pid-file="$dir/munge/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" \
    || fail "munged did not start (log: $dir/log/munged.log)"
fi
if ! alive "$dir/slurmctld.pid"; then
  slurmctld -f "$conf" || fail "slurmctld did not start (log: $dir/log/slurmctld.log)"
fi
for node in n1 n2; do
  if ! alive "$dir/slurmd-$node.pid"; then
    slurmd -f "$conf" -N "$node" || fail "slurmd -N $node did not start (log: $dir/log/slurmd-$node.log)"
  fi
done

for _ in $(seq 1 60); do
  states=$(sinfo -h -N -o '%N %t' 2> /dev/null | sort -u || true)
  if [ "$(echo "$states" | grep -c -E ' (idle|mix|alloc)$' || true)" = 2 ]; then
    ready=$(date +%s)
    say "ready in $((ready - start)) s (install $((installed - start)) s, start $((ready - installed)) s)"
    echo "export SLURM_CONF=$conf"
    exit 0
  fi
  sleep 1
done
say "nodes not idle after 60 s: $(echo "$states" | tr '\n' ' ')"
fail "see $dir/log/slurmctld.log and $dir/log/slurmd-n1.log"
