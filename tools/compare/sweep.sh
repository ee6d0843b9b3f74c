#!/usr/bin/env bash
# The CLI output sweep: runs a fixed set of forward, positional, backward, sgd
# and init runs of a clembed binary on generated inputs, each with the CPU and
# the GPU kernel shapes (CLEMBED_TUNING=cpu, =gpu), and writes the sha256 of
# every output to OUTDIR/sha256.txt. Two builds give the same outputs when
# their sha256.txt files are identical:
#   tools/compare/sweep.sh build/clembed /tmp/new && tools/compare/sweep.sh /tmp/old/clembed /tmp/old-out
#   diff /tmp/new/sha256.txt /tmp/old-out/sha256.txt
# Inputs are made by python3 with numpy from fixed seeds (OUTDIR/in/). The
# atomic backward runs only on ids without repeats, where its result does not
# depend on the order of its additions. Any run that fails stops the sweep.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 CLEMBED_BINARY OUTDIR" >&2
  exit 1
fi
BIN=$(realpath "$1")
OUT=$2
mkdir -p "$OUT/in" "$OUT/out"
IN=$OUT/in

# a Python with numpy ($PYTHON, else python3, else Debian's)
PY=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$p" > /dev/null && "$p" -c 'import numpy' 2> /dev/null; then
    PY=$p
    break
  fi
done
if [ -z "$PY" ]; then
  echo "$0: needs python3 with numpy (set PYTHON)" >&2
  exit 1
fi

"$PY" - "$IN" <<'EOF'
import sys
import numpy as np
d = sys.argv[1]
r = np.random.default_rng(20251123)
def save(name, a):
    np.save(f"{d}/{name}.npy", a)
V = 1000
save("w64", r.standard_normal((V, 64)).astype("<f4"))
save("w37", r.standard_normal((V, 37)).astype("<f4"))
save("w64h", r.standard_normal((V, 64)).astype("<f2"))
save("ids", r.integers(0, V, 4096).astype("<i4"))
save("ids64", r.integers(0, V, 4096).astype("<i8"))
save("ids2d", r.integers(0, V, (8, 512)).astype("<i4"))
save("rep", np.concatenate([np.full(3000, 7), r.integers(0, 20, 1096)]).astype("<i4"))
save("uniq", r.permutation(V)[:512].astype("<i4"))
bad = r.integers(0, V, 600)
bad[[5, 77, 300]] = [V + 3, -1, -V]
save("bad", bad.astype("<i8"))
save("pos", r.standard_normal((600, 64)).astype("<f4"))
save("g4096_64", r.standard_normal((4096, 64)).astype("<f4"))
save("g4096_37", r.standard_normal((4096, 37)).astype("<f4"))
save("g8x512_64", r.standard_normal((8, 512, 64)).astype("<f4"))
save("g512_64", r.standard_normal((512, 64)).astype("<f4"))
save("g600_64", r.standard_normal((600, 64)).astype("<f4"))
EOF

run() { # run NAME ARGS...: both kernel shapes, OUT/out/NAME.{cpu,gpu}.npy
  local name=$1
  shift
  for shape in cpu gpu; do
    CLEMBED_TUNING=$shape "$BIN" "$@" -o "$OUT/out/$name.$shape.npy"
  done
}

# forward
run embed_plain embed --table "$IN/w64.npy" --ids "$IN/ids.npy"
run embed_i64_sqrt embed --table "$IN/w64.npy" --ids "$IN/ids64.npy" --scale sqrt
run embed_d37 embed --table "$IN/w37.npy" --ids "$IN/ids.npy" --scale 0.5
run embed_f16_table embed --table "$IN/w64h.npy" --ids "$IN/ids.npy"
run embed_dtype_bf16 embed --table "$IN/w64.npy" --ids "$IN/ids.npy" --dtype bf16
run embed_dtype_f16 embed --table "$IN/w37.npy" --ids "$IN/ids.npy" --dtype f16
run embed_sinusoid embed --table "$IN/w64.npy" --ids "$IN/ids.npy" --positions sinusoid
run embed_sinusoid_2d embed --table "$IN/w64.npy" --ids "$IN/ids2d.npy" --positions sinusoid --scale sqrt
run embed_sinusoid_far embed --table "$IN/w37.npy" --ids "$IN/ids.npy" --positions sinusoid --offset 3000000
run embed_sinusoid_halves embed --table "$IN/w64.npy" --ids "$IN/ids2d.npy" --positions sinusoid --layout halves \
  --base 500 --offset 17
run embed_sinusoid_index embed --table "$IN/w37.npy" --ids "$IN/ids.npy" --positions sinusoid --exponent index
run embed_learned embed --table "$IN/w64.npy" --ids "$IN/bad.npy" --positions "$IN/pos.npy" --on-bad-id zero
run embed_padding embed --table "$IN/w64.npy" --ids "$IN/ids.npy" --padding-idx 3
run embed_padding_neg embed --table "$IN/w64.npy" --ids "$IN/ids.npy" --padding-idx -1
run embed_clamp embed --table "$IN/w64.npy" --ids "$IN/bad.npy" --on-bad-id clamp
run embed_zero embed --table "$IN/w37.npy" --ids "$IN/bad.npy" --on-bad-id zero
run embed_dropout embed --table "$IN/w64.npy" --ids "$IN/ids2d.npy" --positions sinusoid --dropout 0.1 --seed 7
run embed_dropout_d37 embed --table "$IN/w37.npy" --ids "$IN/ids.npy" --dropout 0.3 --seed 99

# positional
run pos_plain positional --length 300 --dim 64
run pos_far positional --length 100 --dim 37 --first 1000000
run pos_halves positional --length 128 --dim 64 --layout halves --base 500
run pos_index positional --length 50 --dim 33 --exponent index

# backward
run bwd_plain backward --ids "$IN/ids.npy" --grad "$IN/g4096_64.npy" --vocab 1000
run bwd_d37 backward --ids "$IN/ids.npy" --grad "$IN/g4096_37.npy" --vocab 1000 --scale 0.5
run bwd_repeats backward --ids "$IN/rep.npy" --grad "$IN/g4096_64.npy" --vocab 1000 --scale-grad-by-freq
run bwd_padding backward --ids "$IN/ids.npy" --grad "$IN/g4096_64.npy" --vocab 1000 --padding-idx 3 --scale sqrt
run bwd_2d_dropout backward --ids "$IN/ids2d.npy" --grad "$IN/g8x512_64.npy" --vocab 1000 --dropout 0.1 --seed 7
run bwd_clamp backward --ids "$IN/bad.npy" --grad "$IN/g600_64.npy" --vocab 1000 --on-bad-id clamp
run bwd_atomic_unique backward --ids "$IN/uniq.npy" --grad "$IN/g512_64.npy" --vocab 1000 --atomic

# sgd
run sgd_plain sgd --table "$IN/w64.npy" --ids "$IN/ids.npy" --grad "$IN/g4096_64.npy" --lr 0.1
run sgd_f16 sgd --table "$IN/w64h.npy" --ids "$IN/rep.npy" --grad "$IN/g4096_64.npy" --lr 0.05 --scale-grad-by-freq
run sgd_d37_dropout sgd --table "$IN/w37.npy" --ids "$IN/ids.npy" --grad "$IN/g4096_37.npy" --lr 0.01 \
  --dropout 0.2 --seed 5

# init
run init_normal init --rows 500 --dim 64 --normal 0,1 --seed 3
run init_uniform init --rows 333 --dim 37 --uniform -1,1 --seed 12345678901
run init_normal_f16 init --rows 100 --dim 16 --normal 0.5,2 --dtype f16

(cd "$OUT/out" && sha256sum -- *.npy) > "$OUT/sha256.txt"
echo "$(wc -l < "$OUT/sha256.txt") outputs; sha256 in $OUT/sha256.txt"
