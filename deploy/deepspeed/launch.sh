#!/usr/bin/env bash
# Start `trainer.pretrain` on one node or many through the DeepSpeed launcher.
#
#   deploy/deepspeed/launch.sh [launcher options] [--] TRAINER_FLAGS...
#
#   # one node, every visible GPU:
#   deploy/deepspeed/launch.sh --data gs://b/prep/pairs --output /shared/runs/base \
#       --model base --deepspeed-config deploy/deepspeed/configs/zero2-bf16.json --precision bf16
#   # several nodes listed in a hostfile (see hostfile.example), reached over passwordless ssh:
#   deploy/deepspeed/launch.sh --hostfile deploy/deepspeed/hostfile --master-addr node1 -- --data ... --output ...
#   # a CPU box, two ranks (what the tests run):
#   deploy/deepspeed/launch.sh --num-gpus 2 -- --data pairs --output run --deepspeed-config deploy/deepspeed/configs/cpu-fp32.json
#
# Launcher options (the environment variable in brackets is read when the option is absent):
#   --hostfile FILE     [HOSTFILE]     "host slots=N" per line; given, the launcher runs ranks on every
#                                      listed host (pdsh + ssh by default); absent, it runs on this host
#   --num-gpus N        [NUM_GPUS]     ranks per node (default: every visible GPU; required on a CPU box)
#   --num-nodes N       [NUM_NODES]    use only the first N hosts of the hostfile
#   --master-addr HOST  [MASTER_ADDR]  rendezvous host (default: the first host of the hostfile)
#   --master-port PORT  [MASTER_PORT]  rendezvous port (default 29500)
#   --launcher NAME     [LAUNCHER]     multi-node backend: pdsh (default), openmpi, mvapich, slurm, mpich
#   --dry-run           [DRY_RUN=1]    print the exact command and exit
# DEEPSPEED names the launcher executable (default: deepspeed on PATH).
# The first argument that is not a launcher option, or everything after `--`, goes to trainer.pretrain.
#
# Signals: the launcher is exec'ed, so a SIGTERM/SIGINT to this script reaches DeepSpeed's runner. On one
# node the runner dies of it and the ranks, which watch their launchers, agree on one step, checkpoint and
# exit 0 (no time limit). With a hostfile the runner stops the per-node launchers, which pass SIGTERM to
# their ranks and kill them 30 s later (DeepSpeed's fixed grace period): keep checkpoint writes shorter.
#
# Every node must run the same code and environment (install the `train` extra, or use the image of
# deploy/deepspeed/Dockerfile), reach --data (gs://, s3:// or a shared path) and write --output on a
# filesystem that all nodes share: DeepSpeed writes each rank's ZeRO partition into the checkpoint.
set -euo pipefail
# shellcheck source=../run_or_print.sh
source "$(dirname "${BASH_SOURCE[0]}")/../run_or_print.sh"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

hostfile=${HOSTFILE:-}
num_gpus=${NUM_GPUS:-}
num_nodes=${NUM_NODES:-}
master_addr=${MASTER_ADDR:-}
master_port=${MASTER_PORT:-29500}
launcher=${LAUNCHER:-}
dry_run=${DRY_RUN:-0}

need_value() { [[ $# -ge 2 && -n $2 ]] || { echo "$0: $1 needs a value" >&2; exit 2; }; }
while (($#)); do
  case $1 in
    --hostfile) need_value "$@"; hostfile=$2; shift 2 ;;
    --num-gpus) need_value "$@"; num_gpus=$2; shift 2 ;;
    --num-nodes) need_value "$@"; num_nodes=$2; shift 2 ;;
    --master-addr) need_value "$@"; master_addr=$2; shift 2 ;;
    --master-port) need_value "$@"; master_port=$2; shift 2 ;;
    --launcher) need_value "$@"; launcher=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h | --help) usage ;;
    --) shift; break ;;
    *) break ;;
  esac
done
if ((!$#)); then
  echo "$0: no trainer flags; pass at least --data PAIRS_DIR --output RUN_DIR (see --help)" >&2
  exit 2
fi
for value in "$num_gpus" "$num_nodes" "$master_port"; do
  if [[ -n $value && ! $value =~ ^[1-9][0-9]*$ ]]; then
    echo "$0: --num-gpus, --num-nodes and --master-port take positive integers, got '$value'" >&2
    exit 2
  fi
done

cmd=("${DEEPSPEED:-deepspeed}")
if [[ -n $hostfile ]]; then
  if [[ ! -f $hostfile ]]; then
    echo "$0: hostfile '$hostfile' not found (see deploy/deepspeed/hostfile.example)" >&2
    exit 2
  fi
  # NOTE: without --master_addr DeepSpeed asks the first host for its address over ssh (`hostname -I`),
  # which picks an arbitrary interface; name the one the ranks should use when hosts have several.
  cmd+=(--hostfile "$hostfile")
  [[ -n $num_nodes ]] && cmd+=(--num_nodes "$num_nodes")
  [[ -n $launcher ]] && cmd+=(--launcher "$launcher")
elif [[ -n $num_nodes && $num_nodes != 1 ]]; then
  echo "$0: --num-nodes $num_nodes needs --hostfile" >&2
  exit 2
fi
[[ -n $num_gpus ]] && cmd+=(--num_gpus "$num_gpus")
[[ -n $master_addr ]] && cmd+=(--master_addr "$master_addr")
cmd+=(--master_port "$master_port" --module trainer.pretrain "$@")

run_or_print "$dry_run" "${cmd[@]}"
