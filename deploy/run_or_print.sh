# Sourced by deploy/*/launch.sh: the last step they share.
# run_or_print DRY_RUN COMMAND...: with DRY_RUN=1, print COMMAND shell-quoted on one line (what the tests parse)
# and exit 0; otherwise echo it to stderr and replace this shell with it (signals then reach it directly).
run_or_print() {
  local dry_run=$1
  shift
  if [[ $dry_run == 1 ]]; then
    printf '%q ' "$@"
    echo
    exit 0
  fi
  printf '+ %s\n' "$*" >&2
  exec "$@"
}
