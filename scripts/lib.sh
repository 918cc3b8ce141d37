# Sourced by scripts/run.sh and scripts/test.sh.

# quiet LOG CMD...: runs CMD with its output in LOG, shown (the tail) only if it fails.
quiet() {
  local log=$1; shift
  if ! "$@" >"$log" 2>&1; then
    echo "$(basename "$0"): '$*' failed; log follows" >&2
    tail -n 60 "$log" >&2
    exit 1
  fi
}
