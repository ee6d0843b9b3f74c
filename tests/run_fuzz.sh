#!/usr/bin/env bash
# Runs every libFuzzer target of a build for a bounded time.
#   tests/run_fuzz.sh BUILD_DIR [SECONDS]   (default 60, shared between the targets)
#
# The targets are built by configuring with clang and -DCLEMBED_FUZZ=ON (as
# ./tools/check.sh --fuzz does in build-fuzz/): the library's readers
# fuzz_npy_lib, fuzz_safetensors and fuzz_gguf, fuzz_npy (the readers, then
# the tool's .npy writer and back) and fuzz_json (the tuning file's JSON reader
# and writer), the seconds split between them. Each one starts from a copy of the
# corpus files of its format (tests/npy_corpus, tests/cli_corpus,
# tests/io_corpus, tests/json_corpus; kept in BUILD_DIR/fuzz/corpus-NAME, so what one run finds
# seeds the next) with a dictionary of its format's tokens. Exits
# non-zero when a target finds a crash, a leak, undefined behaviour, a broken
# contract (the targets abort on one), a timeout or an allocation over the
# limit; the input is left in BUILD_DIR/fuzz/artifacts-NAME/ and the message
# says how to replay it.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 BUILD_DIR [SECONDS]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
seconds=${2:-60}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

targets=()
while IFS= read -r t; do targets+=("$t"); done < <(
  find "$build" -maxdepth 3 -type f -name 'fuzz_*' ! -name '*_replay' ! -name '*.*' -perm -u+x | sort)
if [ "${#targets[@]}" -eq 0 ]; then
  echo "run_fuzz: no fuzz targets in $build (configure with -DCMAKE_C_COMPILER=clang -DCLEMBED_FUZZ=ON)" >&2
  exit 1
fi
per=$((seconds / ${#targets[@]}))
if [ "$per" -lt 1 ]; then per=1; fi

work=$build/fuzz
mkdir -p "$work"
dict=$work/npy.dict
cat >"$dict" <<'EOF'
magic="\x93NUMPY"
v1="\x01\x00"
v2="\x02\x00"
v3="\x03\x00"
descr="'descr'"
fortran="'fortran_order'"
shape="'shape'"
f4="'<f4'"
f2="'<f2'"
i4="'<i4'"
i8="'<i8'"
true="True"
false="False"
open="{"
close="}"
tuple_open="("
tuple_close=",)"
colon=": "
comma=", "
long="L"
big="99999999999999999999"
EOF

json_dict=$work/safetensors.dict
cat >"$json_dict" <<'EOF'
open="{"
close="}"
list_open="["
list_close="]"
colon=":"
comma=","
dtype="\"dtype\""
shape="\"shape\""
offsets="\"data_offsets\""
meta="\"__metadata__\""
f32="\"F32\""
f16="\"F16\""
bf16="\"BF16\""
i64="\"I64\""
escape="\\u00e9"
surrogate="\\ud83d\\ude00"
nul="\\u0000"
big="18446744073709551616"
zero="0"
EOF
gguf_dict=$work/gguf.dict
cat >"$gguf_dict" <<'EOF'
magic="GGUF"
v3="\x03\x00\x00\x00"
v2="\x02\x00\x00\x00"
one64="\x01\x00\x00\x00\x00\x00\x00\x00"
huge64="\xff\xff\xff\xff\xff\xff\xff\x7f"
alignment="general.alignment"
embd="token_embd.weight"
t_u32="\x04\x00\x00\x00"
t_string="\x08\x00\x00\x00"
t_array="\x09\x00\x00\x00"
t_q4_k="\x0c\x00\x00\x00"
t_bf16="\x1e\x00\x00\x00"
align64="\x40\x00\x00\x00"
EOF

status=0
for t in "${targets[@]}"; do
  name=$(basename "$t")
  corpus=$work/corpus-$name
  artifacts=$work/artifacts-$name
  log=$work/$name.log
  mkdir -p "$corpus"
  rm -rf "$artifacts"
  mkdir -p "$artifacts"
  # seeds and tokens of the target's format
  case "$name" in
    fuzz_safetensors) cp "$root"/tests/io_corpus/*.safetensors "$corpus"/; tdict=$json_dict ;;
    fuzz_json) cp "$root"/tests/json_corpus/*.json "$corpus"/; tdict=$json_dict ;;
    fuzz_gguf) cp "$root"/tests/io_corpus/*.gguf "$corpus"/; tdict=$gguf_dict ;;
    fuzz_npy_lib) cp "$root"/tests/npy_corpus/*.npy "$root"/tests/io_corpus/*.npy "$corpus"/; tdict=$dict ;;
    *) cp "$root"/tests/npy_corpus/*.npy "$root"/tests/cli_corpus/*.npy "$corpus"/; tdict=$dict ;;
  esac
  echo "run_fuzz: $name for ${per} s, corpus $corpus ($(find "$corpus" -type f | wc -l) files)"
  rc=0
  # LeakSanitizer runs inside libFuzzer (-detect_leaks=1 is its default)
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    "$t" -max_total_time="$per" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 -max_len=4096 \
    -dict="$tdict" -artifact_prefix="$artifacts/" -print_final_stats=1 "$corpus" >"$log" 2>&1 || rc=$?
  grep -E '^(stat::number_of_executed_units|stat::new_units_added|stat::peak_rss_mb)|^Done [0-9]+ runs' "$log" |
    sed "s/^/run_fuzz: $name: /" || true
  found=$(find "$artifacts" -type f | head -5)
  if [ "$rc" -ne 0 ] || [ -n "$found" ]; then
    status=1
    echo "run_fuzz: $name FAILED (exit status $rc); the end of $log:" >&2
    tail -40 "$log" >&2
    for f in $found; do
      echo "run_fuzz: replay with: $t $f   (or: ${name}_replay $f in a normal build)" >&2
    done
  fi
done
exit "$status"
