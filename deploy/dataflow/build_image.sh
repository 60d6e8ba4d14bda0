#!/usr/bin/env bash
# Build and push the Dataflow worker image (deploy/dataflow/Dockerfile), matched to the submitting Python.
#
#   deploy/dataflow/build_image.sh [--dry-run] IMAGE_URI
#       IMAGE_URI   e.g. us-central1-docker.pkg.dev/my-project/clozeforge/prep:0.1.0
#
# Environment: PYTHON (default python3), the interpreter that will submit jobs; the image gets its
# Python minor version and its apache-beam version, because Dataflow needs the SDK in the container to
# be the one that built the job. DOCKER (default docker). DRY_RUN=1 is the same as --dry-run: print the
# commands, run nothing.
set -euo pipefail

dry_run=${DRY_RUN:-0}
if [[ ${1:-} == --dry-run ]]; then
  dry_run=1
  shift
fi
if [[ $# -ne 1 || $1 == -* ]]; then
  echo "usage: $0 [--dry-run] IMAGE_URI" >&2
  exit 2
fi
image=$1
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${PYTHON:-python3}
docker=${DOCKER:-docker}

versions=$("$python" -c 'import sys, apache_beam; print(f"{sys.version_info.major}.{sys.version_info.minor}", apache_beam.__version__)') || {
  echo "$0: $python cannot import apache_beam; install the submitting environment first: pip install -c constraints.txt -e '.[dataflow]'" >&2
  exit 2
}
read -r python_version beam_version <<<"$versions"
# The image installs through the lock, so its Beam is the lock's: the submitting Python must have the same one.
locked_beam=$(sed -n 's/^apache-beam==\([^ ;]*\).*/\1/p' "$repo_root/constraints.txt")
if [[ $beam_version != "$locked_beam" ]]; then
  echo "$0: $python has apache-beam $beam_version, the lock (constraints.txt) $locked_beam: install the submitting environment through the lock: pip install -c constraints.txt -e '.[dataflow]'" >&2
  exit 2
fi

# BuildKit is what honours deploy/dataflow/Dockerfile.dockerignore.
export DOCKER_BUILDKIT=1

run() {
  if [[ $dry_run == 1 ]]; then
    printf '%q ' "$@"
    echo
  else
    "$@"
  fi
}

run "$docker" build \
  --file "$repo_root/deploy/dataflow/Dockerfile" \
  --build-arg "PYTHON_VERSION=$python_version" \
  --build-arg "BEAM_VERSION=$beam_version" \
  --tag "$image" \
  "$repo_root"
run "$docker" push "$image"
