#!/bin/bash
# clembed tune (tools/bench/tune.c) as a user runs it: bad flags refused
# (exit 1, naming the flag), a short run that writes the device's entry into
# a tuning file holding another entry (kept), a second run that replaces the
# device's entry rather than adding one, the file read back by every context
# (`clembed devices` shows it), and --dry-run writing nothing.
#   cli_tune.sh CLEMBED
set -u
CLI=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAILED: $*"
  exit 1
}
refused() { # refused WANT ARGS...: exit 1 with WANT in the message
  local want=$1
  shift
  "$CLI" tune "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" = 1 ] || fail "clembed tune $*: exit $rc, expected 1"
  grep -qF -- "$want" "$tmp/err" || fail "clembed tune $*: the message does not say '$want': $(cat "$tmp/err")"
}
refused "--budget: '0' is not a number of seconds" --budget 0
refused "--reps: 'x' is not a count" --reps x
refused "'nosuch' is not a group" --only positional,nosuch
refused "unknown or incomplete option '--bogus'" --bogus
refused "unknown or incomplete option '--output'" --output
CLEMBED_TUNE=bag_tile=2 refused "CLEMBED_TUNE is set" --dry-run

"$CLI" tune --list >"$tmp/out" || fail "tune --list"
grep -q '^bags$' "$tmp/out" && grep -q 'parameters: .*bag_tile' "$tmp/out" || fail "tune --list: $(cat "$tmp/out")"
grep -q '^  shape: embed_rows=1,embed_vec=4,embed_local=8' "$tmp/out" || fail "tune --list shows no whole shape: $(cat "$tmp/out")"

conf="$tmp/cache/clembed/tuning.conf"
mkdir -p "$(dirname "$conf")"
printf '# an entry of another device\n[device other]\nmatch.device = no device is called this\nbag_tile = 2\n' >"$conf"
for run in 1 2; do
  # the first run searches (candidates checked bit for bit and timed); the second's budget ends before it
  budget=1
  [ "$run" = 1 ] && budget=45
  "$CLI" tune --only positional --budget "$budget" --reps 1 --output "$conf" >"$tmp/out" 2>"$tmp/err" ||
    fail "tune run $run: exit $?: $(cat "$tmp/err")"
  grep -q '^summary positional ' "$tmp/out" || fail "tune run $run printed no summary: $(cat "$tmp/out")"
  if [ "$run" = 1 ]; then
    grep -Eq '^\[ *[0-9]+s\] positional: positional_[a-z]+=[0-9]+ \.\.\. (same bits, [0-9.]+x|rejected: )' "$tmp/out" ||
      fail "tune run 1 tried no candidate: $(cat "$tmp/out")"
  else
    grep -Eq '^summary positional +not tuned: the budget was spent' "$tmp/out" || fail "tune run 2: $(cat "$tmp/out")"
  fi
  grep -q "^written to $conf" "$tmp/out" || fail "tune run $run: $(cat "$tmp/out")"
  [ "$(grep -c '^\[device ' "$conf")" = 2 ] || fail "after run $run the file has $(grep -c '^\[device ' "$conf") entries: $(cat "$conf")"
  [ "$(grep -c '^# clembed tune, ' "$conf")" = 1 ] || fail "after run $run: $(cat "$conf")"
  grep -q '^\[device other\]' "$conf" && grep -q '^# an entry of another device' "$conf" ||
    fail "run $run lost the other entry: $(cat "$conf")"
  grep -q '^match.platform = ' "$conf" && grep -q '^match.device = ' "$conf" || fail "no match lines: $(cat "$conf")"
  [ "$(grep -c '^tuned = 1$' "$conf")" = 1 ] || fail "the entry is not marked tuned = 1: $(cat "$conf")"
done
ls "$tmp/cache/clembed" | grep -q tmp && fail "a temporary file was left: $(ls "$tmp/cache/clembed")"
# every context on the device reads it (the default XDG path)
XDG_CACHE_HOME="$tmp/cache" "$CLI" devices >"$tmp/out" 2>"$tmp/err" || fail "devices: $(cat "$tmp/err")"
grep -qF "($conf)" "$tmp/out" || fail "clembed devices does not show the tuned entry: $(cat "$tmp/out")"
# --dry-run writes nothing
cp "$conf" "$tmp/before"
"$CLI" tune --only positional --budget 1 --reps 1 --dry-run --output "$conf" >"$tmp/out" 2>&1 || fail "--dry-run: $(cat "$tmp/out")"
grep -q '^the entry (--dry-run, not written):' "$tmp/out" || fail "--dry-run: $(cat "$tmp/out")"
cmp -s "$conf" "$tmp/before" || fail "--dry-run changed the file"
echo "cli_tune: passed"
