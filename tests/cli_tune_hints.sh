#!/bin/bash
# clembed tune's search leaves out the parameters that only shape prefetch
# hints on a device that takes none (prefetch = 0: rusticl on llvmpipe, run
# with its environment), and searches them where the device takes them
# (POCL's CPU device, prefetch = 1): each says so at its group's start.
#   cli_tune_hints.sh CLEMBED 0|1    (the device's prefetch value)
set -u
CLI=$1
prefetch=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAILED: $*"
  exit 1
}
# a budget of a second: the groups are left at the built-in shapes, each group's start said
"$CLI" tune --only lookup,embed,bert,backward,bags --budget 1 --reps 1 --dry-run >"$tmp/out" 2>"$tmp/err" ||
  fail "tune: exit $?: $(cat "$tmp/err")"
hints="lookup:embed_next embed:embed_strided_prefetch_bytes embed:embed_strided_ahead bert:norm_next
backward:fold_ahead backward:fold_ahead_bytes backward:step_ahead bags:bag_ahead"
for h in $hints; do
  line="\] ${h%%:*}: ${h#*:} not searched: it shapes prefetch hints, which this device does not take$"
  if [ "$prefetch" = 0 ]; then
    grep -Eq "$line" "$tmp/out" || fail "prefetch 0: no line says ${h#*:} is not searched: $(cat "$tmp/out")"
  else
    ! grep -Eq "$line" "$tmp/out" || fail "prefetch 1: ${h#*:} left out: $(cat "$tmp/out")"
  fi
done
# and no other parameter is left out
n=$(grep -c 'not searched: it shapes prefetch hints' "$tmp/out")
[ "$n" = "$([ "$prefetch" = 0 ] && echo 8 || echo 0)" ] || fail "$n parameters left out: $(cat "$tmp/out")"
grep -q '^summary lookup ' "$tmp/out" || fail "no summary: $(cat "$tmp/out")"
echo "ok: prefetch $prefetch"
