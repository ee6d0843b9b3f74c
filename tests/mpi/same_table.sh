#!/usr/bin/env bash
# examples/train_mpi.c with 1, 2 and 4 ranks: the loss falls and the table's
# hash is the same for every rank count (the sharded calls give one device's
# bits for the concatenated batch).
#   same_table.sh MPIEXEC NUMPROC_FLAG EXAMPLE STEPS
set -u
mpiexec=$1 np=$2 example=$3 steps=$4
want=""
status=0
for n in 1 2 4; do
  out=$("$mpiexec" "$np" "$n" "$example" "$steps" 2>&1)
  rc=$?
  echo "$out"
  hash=$(printf '%s\n' "$out" | sed -n 's/.*table hash \([0-9a-f]*\).*/\1/p' | tail -n 1)
  if [ "$rc" -ne 0 ] || [ -z "$hash" ]; then
    echo "FAILED: $n ranks: exit status $rc, hash '${hash}'"
    status=1
  elif [ -z "$want" ]; then
    want=$hash
  elif [ "$hash" != "$want" ]; then
    echo "FAILED: $n ranks give table hash $hash, 1 rank $want"
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "the same table with 1, 2 and 4 ranks: $want"
exit "$status"
