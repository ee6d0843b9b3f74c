/* init.cl: clembed_matrix_init_uniform and clembed_matrix_init_normal.
 * cl/lib/philox.cl and cl/lib/exactmath.cl. Build options: OUT_DT, VEC=16.
 *
 * Element e = first + r*cols + c of the matrix (first: the Philox index of its
 * element 0, (first row) * cols for clembed_matrix_init_*_at) is word j = e mod 4 of
 * Philox4x32-10(key (seed lo, seed hi), counter (q lo, q hi, 0, 0)), q = e div 4
 * (one counter serves four consecutive elements), with u(x) = (x >> 8) 2^-24:
 *   uniform: 2 * (low/2 + (high/2 - low/2) * u(x_j))  (halved so high - low
 *            cannot overflow; doubling is exact);
 *   normal:  (z0, z1) = ce_xm_box_muller(x0, x1), (z2, z3) = ce_xm_box_muller(x2, x3)
 *            (exactmath.cl: cosine and sine of one pair), value mean + std * z_j.
 * Every operation is correctly rounded and nothing is contracted, so every
 * device and both kernel shapes give the same bits.
 *
 * Two shapes: ce_init_* takes one counter (4 elements, any ld) per work-item
 * (GPUs, and strided matrices); ce_init_*16 takes 16 counters (64 consecutive
 * elements) per work-item in 16-lane vectors, for a dense matrix (ld == cols)
 * on a CPU, whose compiler does not vectorise Philox across work-items. */

#define OUT_T CE_XCAT(CE_STORE_, OUT_DT)
#define store_out CE_XCAT(ce_store_, OUT_DT)
#define store_outv CE_XCAT(ce_storev_, OUT_DT)
#define stream_outv CE_XCAT(ce_streamv_, OUT_DT)
#ifndef STREAM
#define STREAM 0
#endif
/* out may be a split matrix (cl/lib/pieces.cl): a launch writes its window's
 * rows; the 64 elements of the wide shape go out as vectors where they lie in
 * one piece (a dense matrix: ld == cols), else one at a time */
#define OUT_PARAMS __global OUT_T *out, ulong o_off CE_PIECE_PARAMS(OUT_T, out)
#define OUT_PASS out, o_off CE_PIECE_PASS(out)
/* Whether local elements [l, l + n) miss this launch's window of rows (a
 * boolean constant where there is no window). */
#if CE_PIECES_out > 8
#define OFF_WINDOW(l, n) ((l) / cols >= CE_HI(out) || ((l) + (n) - 1) / cols < CE_LO(out))
#else
#define OFF_WINDOW(l, n) false
#endif

/* The four elements of counter q (Philox indices 4q .. 4q + 3), those at
 * local indices l = 4q + j - first in [0, total), at (r, c) = (l div cols,
 * l mod cols) and on, row by row. */
inline void ce_init_store4(OUT_PARAMS, ulong o_ld, ulong cols, ulong q, ulong first, ulong total, float4 v) {
  float w[4] = {v.x, v.y, v.z, v.w};
  int j = 4 * q < first ? (int)(first - 4 * q) : 0; /* only the first counter starts inside */
  ulong l = 4 * q + (ulong)j - first, r = l / cols, c = l - r * cols;
  for (; j < 4 && l < total; j++, l++) {
    if (CE_OWNS(out, r)) store_out(CE_AT(out, r), CE_OFF(out, o_off, o_ld, r) + c, w[j]);
    if (++c == cols) {
      c = 0;
      r++;
    }
  }
}

inline float4 ce_init_uniform_values(uint4 x, float low, float high) {
  float hl = 0.5f * low, span = 0.5f * high - hl;
  return (float4)(2.0f * (hl + span * ce_xm_unit(x.x)), 2.0f * (hl + span * ce_xm_unit(x.y)),
                  2.0f * (hl + span * ce_xm_unit(x.z)), 2.0f * (hl + span * ce_xm_unit(x.w)));
}

inline float4 ce_init_normal_values(uint4 x, float mean, float stddev) {
  float z0, z1, z2, z3;
  ce_xm_box_muller(x.x, x.y, &z0, &z1);
  ce_xm_box_muller(x.z, x.w, &z2, &z3);
  return (float4)(mean + stddev * z0, mean + stddev * z1, mean + stddev * z2, mean + stddev * z3);
}

/* counter q's local elements start at 4q - first (the first counter's, which
 * may start before `first`, at 0; an equality, not a clamp: Oclgrind 21.10
 * cannot run the saturating subtraction LLVM makes of a clamp) */
#define CE_Q_LOCAL(q) ((q) == first / 4 ? 0 : 4 * (q) - first)

__kernel void ce_init_uniform(OUT_PARAMS, ulong o_ld, ulong rows, ulong cols, ulong first, float low, float high,
                              uint seed_lo, uint seed_hi) {
  ulong total = rows * cols, q = first / 4 + get_global_id(0);
  if (4 * q >= first + total || OFF_WINDOW(CE_Q_LOCAL(q), 4)) return;
  uint4 x = ce_philox((uint2)(seed_lo, seed_hi), (uint4)((uint)q, (uint)(q >> 32), 0u, 0u));
  ce_init_store4(OUT_PASS, o_ld, cols, q, first, total, ce_init_uniform_values(x, low, high));
}

__kernel void ce_init_normal(OUT_PARAMS, ulong o_ld, ulong rows, ulong cols, ulong first, float mean, float stddev,
                             uint seed_lo, uint seed_hi) {
  ulong total = rows * cols, q = first / 4 + get_global_id(0);
  if (4 * q >= first + total || OFF_WINDOW(CE_Q_LOCAL(q), 4)) return;
  uint4 x = ce_philox((uint2)(seed_lo, seed_hi), (uint4)((uint)q, (uint)(q >> 32), 0u, 0u));
  ce_init_store4(OUT_PASS, o_ld, cols, q, first, total, ce_init_normal_values(x, mean, stddev));
}

/* ------------------------------------------------------- 16 counters */

/* The local elements l0 .. l0 + 63 (those in [0, total); l0 < 0 only for the
 * first counters of a matrix whose first Philox index is not a multiple of 4)
 * from the words' values v0..v3 (lane l of v_j is element l0 + 4l + j):
 * interleaved, then 16 at a time. */
inline void ce_init_store64(OUT_PARAMS, ulong cols, long l0, ulong total, float16 v0, float16 v1, float16 v2,
                            float16 v3) {
  uint16 m_lo = (uint16)(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), m_hi = m_lo + (uint16)(8u);
  uint16 p_lo = (uint16)(0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23), p_hi = p_lo + (uint16)(8u);
  float16 a0 = shuffle2(v0, v1, m_lo), a1 = shuffle2(v0, v1, m_hi); /* (v0, v1) pairs */
  float16 b0 = shuffle2(v2, v3, m_lo), b1 = shuffle2(v2, v3, m_hi); /* (v2, v3) pairs */
  float16 w0 = shuffle2(a0, b0, p_lo), w1 = shuffle2(a0, b0, p_hi);
  float16 w2 = shuffle2(a1, b1, p_lo), w3 = shuffle2(a1, b1, p_hi);
  ulong e0 = (ulong)l0;
  int whole = l0 >= 0 && e0 + 64 <= total;
#if CE_PIECES_out
  /* whole only with the run's first and last rows in this launch's window and in one piece */
  ulong r0 = l0 >= 0 ? e0 / cols : 0, r1 = (min((ulong)(l0 + 64), total) - 1) / cols;
  whole = whole && CE_OWNS(out, r0) && CE_OWNS(out, r1) && CE_AT(out, r0) == CE_AT(out, r1);
  __global OUT_T *dst = CE_AT(out, r0);
  ulong o = CE_OFF(out, o_off, cols, r0) + (e0 - r0 * cols);
#else
  __global OUT_T *dst = out;
  ulong o = o_off + e0;
#endif
  if (whole && STREAM && CE_STREAMING && ((ulong)(dst + o) & (16 * sizeof(OUT_T) - 1)) == 0) {
    stream_outv(dst, o, w0);
    stream_outv(dst, o + 16, w1);
    stream_outv(dst, o + 32, w2);
    stream_outv(dst, o + 48, w3);
  } else if (whole) {
    store_outv(dst, o, w0);
    store_outv(dst, o + 16, w1);
    store_outv(dst, o + 32, w2);
    store_outv(dst, o + 48, w3);
  } else {
    float t[64];
    vstore16(w0, 0, t);
    vstore16(w1, 1, t);
    vstore16(w2, 2, t);
    vstore16(w3, 3, t);
    for (long j = l0 < 0 ? -l0 : 0; j < 64 && l0 + j < (long)total; j++) {
#if CE_PIECES_out
      ulong l = (ulong)(l0 + j), r = l / cols;
      if (CE_OWNS(out, r)) store_out(CE_AT(out, r), CE_OFF(out, o_off, cols, r) + (l - r * cols), t[j]);
#else
      store_out(out, o_off + (ulong)(l0 + j), t[j]);
#endif
    }
  }
}

__kernel void ce_init_uniform16(OUT_PARAMS, ulong cols, ulong total, ulong first, float low, float high, uint seed_lo,
                                uint seed_hi) {
  ulong q0 = first / 4 + get_global_id(0) * 16;
  long l0 = (long)(4 * q0 - first);
  if (l0 >= (long)total || OFF_WINDOW(l0 > 0 ? (ulong)l0 : 0, 64)) return;
  uint16 x0, x1, x2, x3;
  ce_philox16(seed_lo, seed_hi, q0, &x0, &x1, &x2, &x3);
  float hl = 0.5f * low, span = 0.5f * high - hl;
  ce_init_store64(OUT_PASS, cols, l0, total, 2.0f * (hl + span * ce_xm_unit16(x0)),
                  2.0f * (hl + span * ce_xm_unit16(x1)), 2.0f * (hl + span * ce_xm_unit16(x2)),
                  2.0f * (hl + span * ce_xm_unit16(x3)));
}

__kernel void ce_init_normal16(OUT_PARAMS, ulong cols, ulong total, ulong first, float mean, float stddev,
                               uint seed_lo, uint seed_hi) {
  ulong q0 = first / 4 + get_global_id(0) * 16;
  long l0 = (long)(4 * q0 - first);
  if (l0 >= (long)total || OFF_WINDOW(l0 > 0 ? (ulong)l0 : 0, 64)) return;
  uint16 x0, x1, x2, x3;
  ce_philox16(seed_lo, seed_hi, q0, &x0, &x1, &x2, &x3);
  float16 z0, z1, z2, z3;
  ce_xm_box_muller16(x0, x1, &z0, &z1);
  ce_xm_box_muller16(x2, x3, &z2, &z3);
  ce_init_store64(OUT_PASS, cols, l0, total, mean + stddev * z0, mean + stddev * z1, mean + stddev * z2,
                  mean + stddev * z3);
}
