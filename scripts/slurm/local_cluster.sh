#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine, for the tests that submit to a scheduler
# (tests/cluster/test_slurm_cluster.py) and for trying the sbatch template and the submitit launchers by hand.
#
#   sudo bash scripts/slurm/local_cluster.sh          # install if needed, configure, start; wait for the node
#   sudo bash scripts/slurm/local_cluster.sh stop     # stop the daemons (the configuration stays)
#   bash scripts/slurm/local_cluster.sh status        # exit 0 when a node is ready to run jobs
#
# start: installs Debian's slurm-wlm and munge with apt-get when sbatch is missing (root only), writes
# /etc/slurm/slurm.conf for one node with this machine's cores and memory and no GPUs (partition "cpu",
# no accounting, no cgroups), starts munged, slurmctld and slurmd and waits until the node is idle. A cluster
# that already answers is left as it is. It does not touch a machine that runs a SLURM configuration of its
# own: an existing /etc/slurm/slurm.conf without this script's first line stops it.
set -euo pipefail
ACTION=${1:-start}
CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
MARK="# written by evolve-train scripts/slurm/local_cluster.sh"
LOG_DIR=/var/log/slurm

ready() { sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; }

if [ "$ACTION" = status ]; then
  if ready; then sinfo; exit 0; fi
  echo "local_cluster: no SLURM node is ready" >&2
  exit 1
fi
if [ "$ACTION" = stop ]; then
  pkill -x slurmd 2>/dev/null || true
  pkill -x slurmctld 2>/dev/null || true
  pkill -x munged 2>/dev/null || true
  for _ in $(seq 20); do  # gone before a start that follows
    # one name per pgrep: procps refuses a pattern over 15 characters (a process name's length) and matches nothing
    pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || pgrep -x munged >/dev/null || break
    sleep 0.5
  done
  echo "local_cluster: stopped"
  exit 0
fi
if [ "$ACTION" != start ]; then
  echo "usage: local_cluster.sh [start|stop|status]" >&2
  exit 2
fi

if command -v sinfo >/dev/null && ready; then
  echo "local_cluster: a SLURM node is already ready"
  sinfo
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "local_cluster: starting SLURM needs root (sudo bash $0)" >&2
  exit 1
fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  if ! command -v apt-get >/dev/null; then
    echo "local_cluster: slurmctld/munged are not installed and apt-get is not available" >&2
    exit 1
  fi
  echo "local_cluster: installing slurm-wlm and munge (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null && apt-get install -y -q slurm-wlm munge >/dev/null; }
fi
if [ -f "$CONF" ] && ! head -n 1 "$CONF" | grep -qF "$MARK"; then
  echo "local_cluster: $CONF exists and was not written by this script; leaving this machine's SLURM alone" >&2
  exit 1
fi

HOST=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
mkdir -p "$CONF_DIR" "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd /run/munge
cat >"$CONF" <<EOF
$MARK
ClusterName=evolve-local
SlurmctldHost=$HOST
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
KillWait=30
MinJobAge=600
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=cpu Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF

if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 60); do
  if ready; then
    echo "local_cluster: node $HOST ready ($CPUS CPUs, $MEM_MB MB, partition cpu)"
    sinfo
    exit 0
  fi
  scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true
  sleep 1
done
echo "local_cluster: the node did not become ready within 60 s; see $LOG_DIR/slurmctld.log and slurmd.log" >&2
exit 1
