#!/usr/bin/env bash
# Submit `clozeforge prep` to Google Cloud Dataflow, running in the worker image of build_image.sh.
#
#   PROJECT=my-project REGION=us-central1 BUCKET=gs://my-bucket/dataflow \
#   IMAGE=us-central1-docker.pkg.dev/my-project/clozeforge/prep:0.1.0 \
#   deploy/dataflow/launch.sh [--dry-run] --input 'wiki=gs://my-bucket/raw/*.jsonl.zst' --output gs://my-bucket/prep [prep flags...]
#
# Every argument goes to `clozeforge prep`: its own flags, and any further Beam/Dataflow option
# (--service_account_email, --subnetwork, --no_use_public_ips, ...). They come last on the command line,
# so an option repeated there (say --machine_type) wins over the default set here.
#
# Required environment:
#   PROJECT        Google Cloud project that runs and pays for the job
#   REGION         Dataflow region (workers start there; keep it next to the bucket)
#   BUCKET         gs:// prefix for Dataflow's temp/ and staging/ files (not the data)
#   IMAGE          the worker image, built and pushed by deploy/dataflow/build_image.sh
# Optional environment (default):
#   JOB_NAME       (clozeforge-prep-<UTC time>) lowercase letters, digits and '-'
#   MACHINE_TYPE   (n2-highmem-4) LearnWordPiece holds every distinct word on one worker and WriteShards
#                  a whole shard, so memory matters more than cores
#   MAX_WORKERS    (32) autoscaling ceiling
#   DISK_SIZE_GB   (50) per worker; the shuffle of pairs goes through Dataflow Shuffle, not local disk
#   PYTHON         (python3) must have apache-beam[gcp] of the same version as the image
#   DRY_RUN=1      same as --dry-run: print the exact command and exit without submitting
set -euo pipefail
# shellcheck source=../run_or_print.sh
source "$(dirname "${BASH_SOURCE[0]}")/../run_or_print.sh"

dry_run=${DRY_RUN:-0}
if [[ ${1:-} == --dry-run ]]; then
  dry_run=1
  shift
fi

missing=()
for name in PROJECT REGION BUCKET IMAGE; do
  [[ -n ${!name:-} ]] || missing+=("$name")
done
if ((${#missing[@]})); then
  echo "$0: set ${missing[*]} (see the top of this script)" >&2
  exit 2
fi
# shellcheck disable=SC2153  # BUCKET comes from the environment, checked above
bucket=${BUCKET%/}
if [[ $bucket != gs://* ]]; then
  echo "$0: BUCKET must be a gs:// URL, got '$bucket'" >&2
  exit 2
fi

cmd=(
  "${PYTHON:-python3}" -m clozeforge prep
  --runner=DataflowRunner
  "--project=$PROJECT"
  "--region=$REGION"
  "--job_name=${JOB_NAME:-clozeforge-prep-$(date -u +%Y%m%d-%H%M%S)}"
  "--temp_location=$bucket/temp"
  "--staging_location=$bucket/staging"
  "--sdk_container_image=$IMAGE"
  --experiments=use_runner_v2
  "--machine_type=${MACHINE_TYPE:-n2-highmem-4}"
  "--max_num_workers=${MAX_WORKERS:-32}"
  --autoscaling_algorithm=THROUGHPUT_BASED
  "--disk_size_gb=${DISK_SIZE_GB:-50}"
  "$@"
)
# NOTE: `python -m clozeforge prep` imports pipelines.prep as a module, so its functions are pickled by
# reference and found in the image's installed package; `python -m pipelines.prep` works too, but then
# cloudpickle ships prep.py's functions by value from __main__.

run_or_print "$dry_run" "${cmd[@]}"
