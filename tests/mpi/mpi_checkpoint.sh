#!/usr/bin/env bash
# Sharded checkpoints (test_mpi_checkpoint.c): a run of 6 steps on 2 and on 3
# ranks gives the same file byte for byte; 3 steps saved on N ranks, loaded on
# M and continued to 6 give that file again, for every N, M in 1..4; the
# refusals on 3 ranks; the file loads whole in one process.
#   mpi_checkpoint.sh MPIEXEC NUMPROC_FLAG TEST
set -u
mpiexec=$1 np=$2 exe=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
status=0
run() {
  local n=$1
  shift
  if ! "$mpiexec" "$np" "$n" "$exe" "$@"; then
    echo "FAILED: $n ranks: $*"
    status=1
  fi
}
same() {
  if cmp -s "$1" "$2"; then
    pairs=$((pairs + 1))
  else
    echo "FAILED: $3: $(basename "$1") and $(basename "$2") differ"
    status=1
  fi
}
pairs=0
run 2 run "$dir/full2" 1 6
run 3 run "$dir/full3" 1 6
same "$dir/full2" "$dir/full3" "6 steps on 2 and on 3 ranks"
for n in 1 2 3 4; do
  run "$n" run "$dir/save$n" 1 3
  [ "$n" -gt 1 ] && same "$dir/save1" "$dir/save$n" "3 steps on 1 and on $n ranks"
done
if cmp -s "$dir/save1" "$dir/full2"; then
  echo "FAILED: 3 steps and 6 steps saved the same file"
  status=1
fi
for n in 1 2 3 4; do
  for m in 1 2 3 4; do
    run "$m" run "$dir/resumed$n$m" 4 6 "$dir/save$n"
    same "$dir/resumed$n$m" "$dir/full2" "saved on $n ranks, resumed on $m"
  done
done
run 3 refusals "$dir/save2"
run 1 single "$dir/full2"
left=$(ls -A "$dir" | grep -c clembed-tmp)
if [ "$left" -ne 0 ]; then
  echo "FAILED: $left temporary files left"
  status=1
fi
[ "$status" -eq 0 ] && echo "sharded checkpoints: $pairs of $pairs comparisons byte-identical (6 steps on 2 and 3 ranks; 3 steps on 1 and on 2-4; saved on 1-4 ranks, resumed on 1-4 and continued: the uninterrupted run's file)"
exit "$status"
