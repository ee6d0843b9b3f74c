#!/bin/bash
# clembed tune leaves out of its search the parameters that only shape
# prefetch hints on a device that takes none (prefetch = 0: rusticl on
# llvmpipe, run with its environment), and searches them on one that takes
# them (POCL's CPU devices, prefetch = 1): said once at the start and in
# --json's `not_searched`. The device's value is told by the built-in entry
# it starts from (`starting from:`); another device skips (77).
#   cli_tune_hints.sh CLEMBED
set -u
CLI=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAILED: $*"
  exit 1
}
# a budget of 10 ms: the groups are left at the built-in shapes (no row is run)
"$CLI" tune --only lookup,embed,bert,backward,bags,rope --budget 0.01 --reps 1 --dry-run --json >"$tmp/out" \
  2>"$tmp/err" || fail "tune: exit $?: $(cat "$tmp/err")"
if grep -q '^starting from: .*, device pocl-cpu' "$tmp/err"; then
  prefetch=1
elif grep -q '^starting from: .*, device llvmpipe' "$tmp/err"; then
  prefetch=0
else
  echo "skipped: the device is neither POCL's CPU device nor llvmpipe: $(grep '^starting from' "$tmp/err")"
  exit 77
fi
want="embed_next, embed_strided_prefetch_bytes, embed_strided_ahead, norm_next, fold_ahead, fold_ahead_bytes, step_ahead, bag_ahead"
line="not searched: $want (they shape prefetch hints, which this device does not take)"
if [ "$prefetch" = 0 ]; then
  [ "$(grep -cxF "$line" "$tmp/err")" = 1 ] || fail "prefetch 0: no line '$line': $(cat "$tmp/err")"
else
  ! grep -q 'not searched' "$tmp/err" || fail "prefetch 1: parameters left out: $(cat "$tmp/err")"
fi
# --json's not_searched: the list WANT (", "-separated) on a device without prefetch hints, else none
not_searched() { # not_searched WANT
  python3 - "$tmp/out" "$prefetch" "$1" <<'PY' || fail "--json's not_searched (wanted [$1] without prefetch hints, else []): $(cat "$tmp/out")"
import json, sys
run = json.load(open(sys.argv[1]))
want = sys.argv[3].split(", ") if sys.argv[2] == "0" else []
assert run["not_searched"] == want, (run["not_searched"], want)
PY
}
not_searched "$want"
# only the groups asked for: rope has none, embed two
"$CLI" tune --only rope,embed --budget 0.01 --reps 1 --dry-run --json >"$tmp/out" 2>"$tmp/err" ||
  fail "tune --only rope,embed: exit $?: $(cat "$tmp/err")"
not_searched "embed_strided_prefetch_bytes, embed_strided_ahead"
echo "ok: prefetch $prefetch"
