#!/usr/bin/env bash
# run_and_match.sh PATTERN COMMAND...: runs COMMAND, prints its output, and
# passes when it exits 0 and its output has a line matching PATTERN (grep -E).
pattern=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
  echo "run_and_match: exit status $rc" >&2
  exit "$rc"
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$pattern"; then
  echo "run_and_match: no line matches '$pattern'" >&2
  exit 1
fi
