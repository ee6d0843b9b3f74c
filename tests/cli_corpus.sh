#!/usr/bin/env bash
# The nasty .npy corpus through the command-line tool.
#   tests/cli_corpus.sh CLEMBED_BINARY NPY_CORPUS_DIR CLI_CORPUS_DIR
#
# Every file the tool must refuse, in every role it can be given in, must end
# in exit status 1 with a message that names the file, no sanitizer report, no
# output file (nor a leftover temporary) and an existing output file untouched:
# - every tests/npy_corpus/bad_* file (which no .npy reader may accept) as
#   `embed --table`, `embed --ids`, `backward --ids`, `backward --grad` and
#   `sgd --table` (sgd's --ids and --grad go through the same loaders; the
#   wrong-kind files below take those roles);
# - well-formed files of the wrong kind for a role: the npy_corpus good_* files
#   that are not a table (<f4/<f2, 2-D) as --table, not ids (<i4/<i8, 1-D or
#   2-D) as --ids, and tests/cli_corpus/bad_{table,ids,grad}_* in their role;
# - ids outside the table (tests/cli_corpus/range_ids_*: INT64_MAX, INT64_MIN,
#   INT32_MIN, rows, -rows-1 with --on-bad-id wrap), found on the device, for
#   embed, backward and sgd: exit 1 naming the --ids file and the bad value.
# And, as the control, the valid files give exit 0 and an output.
# Device runs are skipped (the rest still runs) only with CLEMBED_ALLOW_NO_DEVICE=1
# when there is no device.
set -u
if [ $# -ne 3 ]; then
  echo "usage: $0 CLEMBED_BINARY NPY_CORPUS_DIR CLI_CORPUS_DIR" >&2
  exit 2
fi
cli=$1
npy=$(cd "$2" && pwd)
own=$(cd "$3" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
table=$own/good_table.npy
ids=$own/good_ids.npy
grad=$own/good_grad.npy
runs=0
failures=0

fail() {
  failures=$((failures + 1))
  echo "FAILED: $*" >&2
}

# reject KEEP FILE ARGS...: runs `clembed ARGS -o OUT` and checks that it
# refuses FILE. KEEP=1 puts an existing output file in place first.
reject() {
  local keep=$1 file=$2
  shift 2
  local dir=$tmp/out
  local out=$dir/result.npy
  rm -rf "$dir"
  mkdir -p "$dir"
  if [ "$keep" = 1 ]; then printf 'existing output' >"$out"; fi
  runs=$((runs + 1))
  "$cli" "$@" -o "$out" >"$tmp/stdout" 2>"$tmp/stderr"
  local rc=$? what="clembed $*"
  local err
  err=$(cat "$tmp/stderr")
  if [ "$rc" -ne 1 ]; then fail "$what: exit status $rc, expected 1 (stderr: $err)"; fi
  if ! grep -qF -- "$file" "$tmp/stderr"; then fail "$what: the message does not name $file: $err"; fi
  if grep -qE 'AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:|Segmentation fault' \
    "$tmp/stderr"; then
    fail "$what: sanitizer or crash report: $err"
  fi
  if [ "$keep" = 1 ]; then
    if [ "$(cat "$out" 2>/dev/null)" != "existing output" ]; then fail "$what: the existing output was changed"; fi
    if [ "$(ls -A "$dir")" != "result.npy" ]; then fail "$what: left files behind: $(ls -A "$dir")"; fi
  elif [ -n "$(ls -A "$dir")" ]; then
    fail "$what: created $(ls -A "$dir")"
  fi
}

# accept ARGS...: the control; exit 0 and an output file.
accept() {
  local out=$tmp/ok.npy
  rm -f "$out"
  runs=$((runs + 1))
  if ! "$cli" "$@" -o "$out" >"$tmp/stdout" 2>"$tmp/stderr"; then
    fail "clembed $*: exit status $?, expected 0: $(cat "$tmp/stderr")"
  elif [ ! -s "$out" ]; then
    fail "clembed $*: no output"
  fi
}

shopt -s nullglob

# 1. files no reader may accept, in every role
bad=("$npy"/bad_*.npy)
if [ "${#bad[@]}" -lt 30 ]; then fail "only ${#bad[@]} bad_* files in $npy"; fi
for f in "${bad[@]}"; do
  reject 1 "$f" embed --table "$f" --ids "$ids"
  reject 0 "$f" embed --table "$table" --ids "$f"
  reject 0 "$f" backward --ids "$f" --grad "$grad" --vocab 4
  reject 1 "$f" backward --ids "$ids" --grad "$f" --vocab 4
  reject 0 "$f" sgd --table "$f" --ids "$ids" --grad "$grad" --lr 0.1
done

# 2. well-formed files of the wrong kind
not_tables=(good_f4_1d good_i4_1d good_i8_2d good_v2 good_v3 good_empty good_whitespace good_unpadded
  good_py2_long good_3d good_scalar_0d)
not_ids=(good_f4_1d good_f2_2d good_v2 good_empty good_empty_2d good_keys_reordered good_3d good_scalar_0d)
for name in "${not_tables[@]}"; do
  f=$npy/$name.npy
  [ -f "$f" ] || { fail "missing $f"; continue; }
  reject 1 "$f" embed --table "$f" --ids "$ids"
  reject 0 "$f" sgd --table "$f" --ids "$ids" --grad "$grad" --lr 0.1
done
for name in "${not_ids[@]}"; do
  f=$npy/$name.npy
  [ -f "$f" ] || { fail "missing $f"; continue; }
  reject 1 "$f" embed --table "$table" --ids "$f"
  reject 0 "$f" backward --ids "$f" --grad "$grad" --vocab 4
  reject 0 "$f" sgd --table "$table" --ids "$f" --grad "$grad" --lr 0.1
done
for f in "$own"/bad_table_*.npy; do
  reject 1 "$f" embed --table "$f" --ids "$ids"
  reject 0 "$f" sgd --table "$f" --ids "$ids" --grad "$grad" --lr 0.1
done
for f in "$own"/bad_ids_*.npy; do
  reject 1 "$f" embed --table "$table" --ids "$f"
  reject 0 "$f" backward --ids "$f" --grad "$grad" --vocab 4
  reject 0 "$f" sgd --table "$table" --ids "$f" --grad "$grad" --lr 0.1
done
for f in "$own"/bad_grad_*.npy; do
  if [ "$(basename "$f")" != bad_grad_cols.npy ]; then # backward takes D from the gradient
    reject 1 "$f" backward --ids "$ids" --grad "$f" --vocab 4
  fi
  reject 1 "$f" sgd --table "$table" --ids "$ids" --grad "$f" --lr 0.1
done

# 3. ids outside the table, found on the device
if "$cli" devices >/dev/null 2>&1; then
  device=1
elif [ "${CLEMBED_ALLOW_NO_DEVICE:-}" = 1 ]; then
  device=0
  echo "no OpenCL device: the device runs are skipped (CLEMBED_ALLOW_NO_DEVICE=1)"
else
  device=1 # and the runs below fail, naming the reason
fi
if [ "$device" = 1 ]; then
  accept embed --table "$table" --ids "$ids"
  accept backward --ids "$ids" --grad "$grad" --vocab 4
  accept sgd --table "$table" --ids "$ids" --grad "$grad" --lr 0.1
  # a table of 3 dimensions is (rows, the product of the rest), as clembed_matrix_load reads it
  accept embed --table "$own/good_table_3d.npy" --ids "$ids"
  accept sgd --table "$own/good_table_3d.npy" --ids "$ids" --grad "$grad" --lr 0.1
  # the first bad value under check (default) and under wrap (-1 is the last row there)
  declare -A value=([range_ids_i8_max]=9223372036854775807 [range_ids_i8_min]=-9223372036854775808
    [range_ids_i4_min]=-2147483648 [range_ids_rows]=4 [range_ids_wrap]=-1)
  declare -A wrapped=([range_ids_wrap]=-5)
  for f in "$own"/range_ids_*.npy; do
    name=$(basename "$f" .npy)
    for policy in check wrap; do
      v=${value[$name]}
      if [ "$policy" = wrap ]; then v=${wrapped[$name]:-$v}; fi
      for sub in embed backward sgd; do
        case $sub in
          embed) reject 1 "$f" embed --table "$table" --ids "$f" --on-bad-id "$policy" ;;
          backward) reject 1 "$f" backward --ids "$f" --grad "$grad" --vocab 4 --on-bad-id "$policy" ;;
          sgd) reject 1 "$f" sgd --table "$table" --ids "$f" --grad "$grad" --lr 0.1 --on-bad-id "$policy" ;;
        esac
        range="[0, 4)"
        if [ "$policy" = wrap ]; then range="[-4, 4)"; fi
        if ! grep -qF -- "= $v is outside $range" "$tmp/stderr"; then
          fail "clembed $sub --ids $f --on-bad-id $policy: the message does not name the value $v: $(cat "$tmp/stderr")"
        fi
      done
    done
  done
fi

echo "cli_corpus: $runs runs, $failures failed"
[ "$failures" -eq 0 ]
