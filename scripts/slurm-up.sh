#!/usr/bin/env bash
# Starts a one-node Slurm cluster on this host (munge, slurmctld, slurmd,
# all as root), for the launcher tests' `srun` runs, and prints the
# SLURM_CONF to export:
#
#     export SLURM_CONF=$(scripts/slurm-up.sh)
#
# Installs Debian's slurmd, slurmctld, slurm-client and munge when missing.
# The node claims 16 CPUs whatever the host has, and the partition
# oversubscribes, so that jobs of more ranks than cores start (as the tests'
# Open MPI runs do). Everything lives under one directory
# ($MPX_SLURM_DIR, default /tmp/mpx-slurm), made private to root (mode
# 0700); a second call restarts it. The daemons run as root with the
# configuration found there, and the script kills the processes its pid
# files name: a directory that exists already must be root's own (the
# running user's), not a symbolic link, and writable by no one else, or
# the script refuses it.
set -euo pipefail
dir=${MPX_SLURM_DIR:-/tmp/mpx-slurm}

me=$(id -u)
if [ -L "$dir" ]; then
    echo "slurm-up.sh: $dir is a symbolic link: refused (remove it, or set MPX_SLURM_DIR to another folder)" >&2
    exit 1
elif [ -e "$dir" ]; then
    owner_mode=$(stat -c '%u %a' "$dir")
    owner=${owner_mode% *}
    mode=${owner_mode#* }
    if [ ! -d "$dir" ] || [ "$owner" != "$me" ] || (( 8#$mode & 8#022 )); then
        echo "slurm-up.sh: $dir (owner $owner, mode $mode) must be a directory of user $me that no one else may write to: refused (remove it, or set MPX_SLURM_DIR to another folder)" >&2
        exit 1
    fi
    chmod 0700 "$dir"
else
    mkdir -p "$(dirname "$dir")"
    # Fails if another process made it meanwhile: never one of someone else's.
    mkdir -m 0700 "$dir"
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v srun >/dev/null || ! command -v munged >/dev/null; then
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurmd slurmctld slurm-client munge >&2
fi

# A previous cluster of ours: stop it.
for pid in "$dir"/slurmctld.pid "$dir"/slurmd.pid; do
    [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true
done
sleep 1
mkdir -p "$dir/state" "$dir/spool"

# munge: the key the package made, a daemon if none runs.
if ! munge -n </dev/null >/dev/null 2>&1; then
    [ -f /etc/munge/munge.key ] || mungekey --create >&2 2>/dev/null || /usr/sbin/create-munge-key -f >&2
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
    chmod 0700 /etc/munge /var/log/munge /var/lib/munge
    chmod 0755 /run/munge
    runuser -u munge -- munged >&2 || munged --force >&2
fi

host=$(hostname -s)
cat >"$dir/slurm.conf" <<EOF
ClusterName=mpx
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
NodeName=$host CPUs=16 State=UNKNOWN
PartitionName=main Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF" >&2
slurmd -f "$SLURM_CONF" >&2

# Up when the node is idle.
for _ in $(seq 1 60); do
    state=$(sinfo -h -o %t 2>/dev/null || true)
    if [ "$state" = idle ]; then
        echo "$SLURM_CONF"
        exit 0
    fi
    sleep 0.5
done
echo "Slurm did not come up (node state: ${state:-none}); logs in $dir" >&2
tail -n 20 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
exit 1
