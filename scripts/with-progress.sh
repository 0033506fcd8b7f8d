#!/usr/bin/env bash
# Runs a long set-up step and says that it is still going: prints the step's name and its usual
# first-run duration, then the elapsed time every 15 s, so nobody waits minutes in silence.
# Its output goes to LOG and is shown only if it fails.
#
# Usage: scripts/with-progress.sh "WHAT" EXPECTED_SECONDS LOG -- COMMAND [ARG ...]
set -euo pipefail
what=$1 expected=$2 log=$3
shift 3
[ "$1" = "--" ] && shift
echo ">> $what (a first run takes about ${expected}s on 2 cores)" >&2
started=$SECONDS
"$@" >"$log" 2>&1 &
job=$!
while kill -0 "$job" 2>/dev/null; do
  for _ in $(seq 150); do
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$job" 2>/dev/null && echo ">>   still working on it: $((SECONDS - started))s" >&2
done
if ! wait "$job"; then
  cat "$log" >&2
  echo "error: $what failed (log: $log)" >&2
  exit 1
fi
echo ">> $what: done in $((SECONDS - started))s" >&2
