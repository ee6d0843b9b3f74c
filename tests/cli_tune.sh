#!/bin/bash
# clembed tune (tools/bench/tune.c) as a user runs it: bad flags refused
# (exit 1, naming the flag), a short run that writes the device's entry into
# the JSON tuning file at its default path, holding another entry (kept), a
# second run that replaces the device's entry rather than adding one, the
# file read back by every context (`clembed devices` shows it), a file in the
# built-in file's format written in that format (--out and --output), a
# damaged file left out by every context (a warning) and not written over,
# --json's object (a timed candidate's lower quartile at most its speed), a
# candidate past the build limit stopped and the search going on in a new
# process, and --dry-run writing nothing.
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

# the JSON tuning file at the default path (XDG_CACHE_HOME), holding another device's entry
json="$tmp/cache/clembed/tuning.json"
mkdir -p "$(dirname "$json")"
printf '{"clembed_tuning": 1, "entries": [\n  {"device": "other", "comment": "an entry of another device",\n   "match": {"device": "no device is called this"}, "parameters": {"bag_tile": 2}}]}\n' >"$json"
entries() { # entries FILE: "N other ours-tuned" from the JSON file, or a failure
  python3 - "$1" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["clembed_tuning"] == 1, doc
es = doc["entries"]
other = [e for e in es if e["device"] == "other"]
ours = [e for e in es if e["device"] != "other"]
assert len(other) == 1 and other[0]["parameters"] == {"bag_tile": 2} and other[0]["comment"] == "an entry of another device", other
assert len(ours) == 1 and ours[0]["tuned"] == 1 and ours[0]["comment"].startswith("clembed tune, "), ours
assert set(ours[0]["match"]) == {"platform", "device"} and ours[0]["match"]["device"] == ours[0]["device"], ours
assert all(isinstance(v, int) for v in ours[0]["parameters"].values()), ours
print(len(es))
PY
}
for run in 1 2; do
  # the first run searches (candidates checked bit for bit and timed); the second's budget ends before it
  budget=1
  [ "$run" = 1 ] && budget=45
  XDG_CACHE_HOME="$tmp/cache" "$CLI" tune --only positional --budget "$budget" --reps 1 >"$tmp/out" 2>"$tmp/err" ||
    fail "tune run $run: exit $?: $(cat "$tmp/err")"
  grep -q '^summary positional ' "$tmp/out" || fail "tune run $run printed no summary: $(cat "$tmp/out")"
  if [ "$run" = 1 ]; then
    grep -Eq '^\[ *[0-9]+s\] positional: positional_[a-z]+=[0-9]+ \.\.\. (same bits, [0-9.]+x|rejected: )' "$tmp/out" ||
      fail "tune run 1 tried no candidate: $(cat "$tmp/out")"
  else
    grep -Eq '^summary positional +not tuned: the budget was spent' "$tmp/out" || fail "tune run 2: $(cat "$tmp/out")"
  fi
  grep -q "^written to $json" "$tmp/out" || fail "tune run $run: $(cat "$tmp/out")"
  n=$(entries "$json") || fail "after run $run the JSON file: $(cat "$json")"
  [ "$n" = 2 ] || fail "after run $run the file has $n entries: $(cat "$json")"
done
ls "$tmp/cache/clembed" | grep -q tmp && fail "a temporary file was left: $(ls "$tmp/cache/clembed")"
# a first tuning.json beside an earlier release's tuning.conf: the tuner says the old file is no longer read
mkdir -p "$tmp/legacy/clembed"
printf '[device other]\nmatch.device = no device is called this\nbag_tile = 2\n' >"$tmp/legacy/clembed/tuning.conf"
XDG_CACHE_HOME="$tmp/legacy" "$CLI" tune --only positional --budget 1 --reps 1 >"$tmp/out" 2>"$tmp/err" ||
  fail "tune beside a tuning.conf: exit $?: $(cat "$tmp/err")"
grep -q "^written to $tmp/legacy/clembed/tuning.json" "$tmp/out" &&
  grep -q "^note: $tmp/legacy/clembed/tuning.conf, an earlier release's tuning file beside it, is no longer read" "$tmp/out" ||
  fail "tune beside a tuning.conf: $(cat "$tmp/out")"
# every context on the device reads it (the default XDG path)
XDG_CACHE_HOME="$tmp/cache" "$CLI" devices >"$tmp/out" 2>"$tmp/err" || fail "devices: $(cat "$tmp/err")"
grep -qF "($json)" "$tmp/out" || fail "clembed devices does not show the tuned entry: $(cat "$tmp/out")"
# a file in the built-in file's format (--out, --output the same) gets its entry in that format, the other kept
conf="$tmp/other/tuning.conf"
mkdir -p "$(dirname "$conf")"
printf '# an entry of another device\n[device other]\nmatch.device = no device is called this\nbag_tile = 2\n' >"$conf"
for flag in --out --output; do
  "$CLI" tune --only positional --budget 1 --reps 1 "$flag" "$conf" >"$tmp/out" 2>"$tmp/err" ||
    fail "tune $flag: exit $?: $(cat "$tmp/err")"
  [ "$(grep -c '^\[device ' "$conf")" = 2 ] && [ "$(grep -c '^# clembed tune, ' "$conf")" = 1 ] &&
    [ "$(grep -c '^tuned = 1$' "$conf")" = 1 ] && grep -q '^match.platform = ' "$conf" ||
    fail "tune $flag into a .conf file: $(cat "$conf")"
  grep -q '^\[device other\]' "$conf" && grep -q '^# an entry of another device' "$conf" ||
    fail "tune $flag lost the other entry: $(cat "$conf")"
done
# a damaged tuning file: every context is made without it (a warning says why)
bad="$tmp/bad.json"
printf '{"entries": [{"device": "x", "parameters": {"bag_tiles": 4}}]}\n' >"$bad"
CLEMBED_TUNING_FILE="$bad" "$CLI" devices >"$tmp/out" 2>"$tmp/err" || fail "devices with a damaged file: $(cat "$tmp/err")"
grep -q "warning: the tuning file is not read: $bad:1: entry 1 (device \"x\"): 'bag_tiles' is not a tuning parameter" \
  "$tmp/out" && grep -qF "; not read: $bad" "$tmp/out" || fail "devices with a damaged file: $(cat "$tmp/out")"
# --json: the run as one JSON object on stdout, the progress on stderr
"$CLI" tune --only positional --budget 30 --reps 3 --json --dry-run >"$tmp/out" 2>"$tmp/err" ||
  fail "--json: exit $?: $(cat "$tmp/err")"
grep -q '^summary positional ' "$tmp/err" || fail "--json: no progress on stderr: $(cat "$tmp/err")"
python3 - "$tmp/out" <<'PY' || fail "--json: $(cat "$tmp/out")"
import json, sys
run = json.load(open(sys.argv[1]))
for k in ("platform", "device", "driver", "starting_from", "budget_s", "reps", "build_limit_s", "restarts",
          "candidates", "summary", "settings", "entry", "written", "not_searched"):
    assert k in run, k
assert run["written"] is None and run["budget_s"] == 30 and run["reps"] == 3 and run["exit_status"] == 0, run
assert run["candidates"] and all(c["group"] == "positional" and c["outcome"] in ("kept", "not kept", "rejected")
                                 for c in run["candidates"]), run["candidates"]
# a timed candidate's lower quartile of per-round speeds is at most their median; a kept one's is above 1
# (at least 1.0000 as the JSON's four decimals give it)
for c in run["candidates"]:
    if c["outcome"] != "rejected":
        assert c["lower_quartile"] <= c["speedup"], c
        assert c["outcome"] != "kept" or (c["speedup"] >= 1.03 and c["lower_quartile"] >= 1), c
rows = [r for r in run["summary"] if r["group"] == "positional" and r["row"]]
assert len(rows) == 1 and rows[0]["default_ms"] > 0 and rows[0]["rounds"] >= 1, run["summary"]
assert json.loads(run["entry"])["tuned"] == 1, run["entry"]
PY
# a candidate whose first run (mostly its kernels' build) goes on past --build-limit is stopped and rejected,
# and the search goes on in a new process from the decisions made: no candidate tried twice, each group's
# summary once, the restarts in --json's object (POCL builds into a fresh cache here: a new build takes
# longer than 0.05 s)
refused "--build-limit: '0' is not a number of seconds" --build-limit 0
mkdir -p "$tmp/pocl"
POCL_CACHE_DIR="$tmp/pocl" "$CLI" tune --only positional,init --build-limit 0.05 --budget 120 --reps 1 --dry-run \
  --json >"$tmp/out" 2>"$tmp/err" || fail "tune --build-limit: exit $?: $(cat "$tmp/err") $(cat "$tmp/out")"
grep -Eq '^\[ *[0-9]+s\] (positional|init): [a-z_]+=[0-9]+ \.\.\. rejected: its first run \(mostly its kernels. build\) went on past 0.05 s: stopped$' "$tmp/err" ||
  fail "tune --build-limit 0.05 stopped no candidate: $(cat "$tmp/err")"
stops=$(grep -c 'went on past 0.05 s: stopped$' "$tmp/err")
[ "$(grep -c '^\[ *[0-9]*s\] the search goes on in a new process' "$tmp/err")" = "$stops" ] ||
  fail "$stops candidates stopped, not as many new processes: $(cat "$tmp/err")"
tried=$(grep -Eo '^\[ *[0-9]+s\] [a-z]+: [^ ]+ \.\.\.' "$tmp/err" | sed 's/^\[ *[0-9]*s\] //' | sort)
[ -n "$tried" ] && [ "$(printf '%s\n' "$tried" | uniq -d)" = "" ] || fail "a candidate was tried twice (or none): $(cat "$tmp/err")"
[ "$(grep -c '^summary positional ' "$tmp/err")" = 1 ] && [ "$(grep -c '^summary init ' "$tmp/err")" = 2 ] ||
  fail "the summaries after new processes: $(cat "$tmp/err")"
python3 - "$tmp/out" "$stops" <<'PY' || fail "--json after new processes: $(cat "$tmp/out")"
import json, sys
run, stops = json.load(open(sys.argv[1])), int(sys.argv[2])
assert run["exit_status"] == 0 and run["restarts"] == stops, (run["restarts"], stops)
stopped = [c for c in run["candidates"] if c["outcome"] == "rejected" and c["reason"].endswith("went on past 0.05 s: stopped")]
assert len(stopped) == stops, run["candidates"]
names = [(c["group"], c["candidate"]) for c in run["candidates"]]
assert len(names) == len(set(names)), names
assert sorted(r["group"] for r in run["summary"]) == ["init", "init", "positional"], run["summary"]
PY
# a file that the library does not read as a tuning file is not written over, said before the search: not
# JSON, one with a parameter that does not exist, one that is not a tuning file at all
for text in '{"entries": [' '{"entries": [{"device": "x", "parameters": {"bag_tiles": 4}}]}' 'PK\x03\x04 an archive'; do
  printf "$text" >"$tmp/bad.file"
  cp "$tmp/bad.file" "$tmp/bad.before"
  "$CLI" tune --only positional --budget 1 --reps 1 --out "$tmp/bad.file" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ "$rc" = 1 ] && grep -q "$tmp/bad.file is not a tuning file that clembed reads (.*): mend or remove it, or --out another file; nothing was searched" "$tmp/err" ||
    fail "tune into '$text': exit $rc: $(cat "$tmp/err")"
  cmp -s "$tmp/bad.file" "$tmp/bad.before" || fail "tune changed '$text'"
done
# --dry-run writes nothing
cp "$conf" "$tmp/before"
"$CLI" tune --only positional --budget 1 --reps 1 --dry-run --output "$conf" >"$tmp/out" 2>&1 || fail "--dry-run: $(cat "$tmp/out")"
grep -q '^the entry (--dry-run, not written):' "$tmp/out" || fail "--dry-run: $(cat "$tmp/out")"
cmp -s "$conf" "$tmp/before" || fail "--dry-run changed the file"
echo "cli_tune: passed"
