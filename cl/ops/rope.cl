/* rope.cl: rotary position embeddings on exact angles (cl/lib/angle.cl), one
 * kernel per shape. The frequencies come as 8 planes of `nh` = R/2 floats (the
 * angle pieces of w_k: plane j holds piece j of every k). Build options:
 * OUT_DT, and for the apply kernels X_DT, POS (0: positions from
 * offset + i % seq_len, checked on the host; 1: from a positions buffer,
 * checked here) and VEC (16).
 *   ce_rope_cache       work-item (k, r): column k and R/2 + k of row r;
 *   ce_rope_apply       work-item (k, i): pair k of every head of row i (the
 *                       angle once for all heads), or for nh <= k, a column
 *                       past R of every head, copied;
 *   ce_rope_apply_rows  work-item i: row i, VEC pairs at a time with the
 *                       vector angle and vector loads over every head.
 * Both apply shapes do the same float operations, so the results are
 * identical bit for bit; each element is read and written by one work-item,
 * so out may be x. */

#define OUT_T CE_XCAT(CE_STORE_, OUT_DT)
#define store_out CE_XCAT(ce_store_, OUT_DT)
/* out (and x) may be split matrices (cl/lib/pieces.cl): a launch takes the rows in its windows */

inline float2 ce_rope_cos_sin(uint p, __global const float *f, ulong nh, ulong k) {
  float4 a = (float4)(f[k], f[nh + k], f[2 * nh + k], f[3 * nh + k]);
  float4 b = (float4)(f[4 * nh + k], f[5 * nh + k], f[6 * nh + k], f[7 * nh + k]);
  return ce_angle_cos_sin(p, a, b);
}

/* out[r][k] = a*cos(p*w_k), out[r][nh + k] = a*sin(p*w_k), p = first + r
 * (first + rows <= 2^32, checked on the host). */
__kernel void ce_rope_cache(__global OUT_T *out, ulong o_off CE_PIECE_PARAMS(OUT_T, out), ulong o_ld, ulong rows,
                            ulong nh, ulong first, __global const float *freq, float attention) {
  ulong k = get_global_id(0), r = get_global_id(1);
  if (k >= nh || r >= rows) return;
  if (!CE_OWNS(out, r)) return; /* another window's row */
  float2 cs = ce_rope_cos_sin((uint)(first + r), freq, nh, k);
  __global OUT_T *orow = CE_AT(out, r);
  ulong o = CE_OFF(out, o_off, o_ld, r);
  store_out(orow, o + k, attention * cs.x);
  store_out(orow, o + nh + k, attention * cs.y);
}

#ifdef X_DT
#define X_T CE_XCAT(CE_STORE_, X_DT)
#define load_x CE_XCAT(ce_load_, X_DT)
#define load_xv CE_XCAT(ce_loadv_, X_DT)
#define store_outv CE_XCAT(ce_storev_, OUT_DT)

/* The arguments of both apply shapes (src/ops/rope.c sets them once for both). */
#define CE_ROPE_ARGS                                                                                         \
  __global const X_T *x, ulong x_off CE_PIECE_PARAMS(const X_T, x), ulong x_ld, __global OUT_T *out,         \
      ulong o_off CE_PIECE_PARAMS(OUT_T, out), ulong o_ld, ulong rows, ulong heads, ulong head_dim, ulong nh, \
      int gptj, int copy_rest, __global const float *freq, float attention, float sign,                       \
      __global const int *pos32, __global const long *pos64, ulong pos_off, int pos64f, ulong seq_len,        \
      ulong pos_offset, __global uint *err, uint slot
/* row i of x and of out, and whether this launch takes it */
#define X_ROW(i) CE_ROWP(const X_T, x, x_off, x_ld, (ulong)(i))
#define OUT_ROW(i) CE_ROWP(OUT_T, out, o_off, o_ld, (ulong)(i))
#define ROW_OWNED(i) (CE_OWNS(x, (i)) && CE_OWNS(out, (i)))

/* Row i's position; *ok is 0 for a position from the buffer that is negative
 * or >= 2^32, reported (kind 0: row i, its value) when `report`. */
inline uint ce_rope_position(ulong i, __global const int *pos32, __global const long *pos64, ulong pos_off,
                             int pos64f, ulong seq_len, ulong pos_offset, __global uint *err, uint slot, int report,
                             int *ok) {
#if POS
  long pl = ce_load_id(pos32, pos64, pos64f, pos_off + i);
  *ok = pl >= 0 && (ulong)pl < CE_POSITION_END;
  if (!*ok && report) ce_report(err, slot, 0, i, pl);
  return (uint)(*ok ? pl : 0);
#else
  ulong b = seq_len ? i / seq_len : 0;
  *ok = 1;
  return (uint)(pos_offset + (i - b * seq_len));
#endif
}

/* Pair (ca, cb) of every head rotated by (c, s). */
inline void ce_rope_pair(__global const X_T *xr, __global OUT_T *orow, ulong heads, ulong head_dim, ulong ca, ulong cb,
                         float c, float s) {
  for (ulong h = 0; h < heads; h++) {
    float xa = load_x(xr, h * head_dim + ca), xb = load_x(xr, h * head_dim + cb);
    store_out(orow, h * head_dim + ca, xa * c - xb * s);
    store_out(orow, h * head_dim + cb, xb * c + xa * s);
  }
}

__kernel void ce_rope_apply(CE_ROPE_ARGS) {
  ulong j = get_global_id(0), i = get_global_id(1);
  if (i >= rows || j >= head_dim - nh) return; /* nh pairs, then head_dim - 2*nh columns to copy */
  int ok;
  uint p = ce_rope_position(i, pos32, pos64, pos_off, pos64f, seq_len, pos_offset, err, slot, j == 0, &ok);
  if (!ROW_OWNED(i)) return;
  __global const X_T *xr = X_ROW(i);
  __global OUT_T *orow = OUT_ROW(i);
  if (j >= nh) { /* a column past R */
    if (!copy_rest) return;
    ulong c = 2 * nh + (j - nh);
    for (ulong h = 0; h < heads; h++) store_out(orow, h * head_dim + c, load_x(xr, h * head_dim + c));
    return;
  }
  ulong ca = gptj ? 2 * j : j, cb = gptj ? 2 * j + 1 : j + nh;
  if (!ok) { /* a bad position: the row is copied */
    if (copy_rest)
      for (ulong h = 0; h < heads; h++) {
        store_out(orow, h * head_dim + ca, load_x(xr, h * head_dim + ca));
        store_out(orow, h * head_dim + cb, load_x(xr, h * head_dim + cb));
      }
    return;
  }
  float2 cs = ce_rope_cos_sin(p, freq, nh, j);
  float c = attention * cs.x, s = sign * (attention * cs.y);
  ce_rope_pair(xr, orow, heads, head_dim, ca, cb, c, s);
}

/* ROPE_PAIRS: vectors of pairs whose cos and sin a row keeps at once (the host's
 * choice, even); STREAM: an output larger than the device's cache is written
 * with streaming stores, two vectors (a whole line of a 16-bit output) at a
 * time, where every such pair starts on a line */
#ifndef ROPE_PAIRS
#define ROPE_PAIRS 4
#endif
#ifndef STREAM
#define STREAM 0
#endif
#define stream2_outv CE_XCAT(ce_stream2v_, OUT_DT)
/* whether the rows may go out in streaming stores: a pair of vectors at a time */
#define ROPE_STREAMS (STREAM && CE_STREAMING && ROPE_PAIRS % 2 == 0)
#define CE_ROPE_STORE2(o, a, b)        \
  do {                                 \
    if (nt) {                          \
      stream2_outv(orow, (o), (a), (b)); \
    } else {                           \
      store_outv(orow, (o), (a));      \
      store_outv(orow, (o) + VEC, (b)); \
    }                                  \
  } while (0)

__kernel void ce_rope_apply_rows(CE_ROPE_ARGS) {
  ulong i = get_global_id(0);
  if (i >= rows) return;
  int ok;
  uint p = ce_rope_position(i, pos32, pos64, pos_off, pos64f, seq_len, pos_offset, err, slot, 1, &ok);
  if (!ROW_OWNED(i)) return;
  __global const X_T *xr = X_ROW(i);
  __global OUT_T *orow = OUT_ROW(i);
  const ulong line = 2 * VEC * sizeof(OUT_T) < 64 ? 2 * VEC * sizeof(OUT_T) : 64; /* a pair's alignment */
  const int nt = ROPE_STREAMS && ((ulong)orow & (line - 1)) == 0 && (head_dim * sizeof(OUT_T)) % line == 0 &&
                 (nh * sizeof(OUT_T)) % line == 0;
  if (!ok) { /* a bad position: the row is copied */
    if (copy_rest)
      for (ulong c = 0; c < heads * head_dim; c++) store_out(orow, c, load_x(xr, c));
    return;
  }
  /* ROPE_PAIRS pairs at a time: their cos and sin computed once, then every head's
   * pairs of them, the heads in order (each head's columns read in order) */
  ulong k = 0;
  for (; k + VEC <= nh; k += ROPE_PAIRS * VEC) {
    FV cv[ROPE_PAIRS], sv[ROPE_PAIRS];
    const int nb = (int)min((ulong)ROPE_PAIRS, (nh - k) / VEC);
    for (int q = 0; q < nb; q++) {
      ce_angle_cos_sinv(p, freq, nh, k + (ulong)q * VEC, &cv[q], &sv[q]);
      cv[q] = (FV)(attention) * cv[q];
      sv[q] = (FV)(sign) * ((FV)(attention) * sv[q]);
    }
    for (ulong h = 0; h < heads; h++)
      for (int q = 0; q < nb; q += 2) { /* two vectors of pairs: whole lines of a 16-bit output */
        const ulong base = h * head_dim, k0 = k + (ulong)q * VEC;
        const int two = q + 1 < nb;
        FV ya[2], yb[2];
        for (int u = 0; u <= two; u++) {
          const ulong kq = k0 + (ulong)u * VEC;
          FV xa, xb;
          if (gptj) { /* pairs (2k, 2k + 1): de-interleaved, and interleaved back */
            FV lo = load_xv(xr, base + 2 * kq), hi = load_xv(xr, base + 2 * kq + VEC);
            xa = (FV)(lo.even, hi.even);
            xb = (FV)(lo.odd, hi.odd);
          } else {
            xa = load_xv(xr, base + kq);
            xb = load_xv(xr, base + kq + nh);
          }
          ya[u] = xa * cv[q + u] - xb * sv[q + u];
          yb[u] = xb * cv[q + u] + xa * sv[q + u];
        }
        if (gptj) {
          for (int u = 0; u <= two; u++)
            CE_ROPE_STORE2(base + 2 * (k0 + (ulong)u * VEC),
                           shuffle2(ya[u], yb[u], (UV)(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23)),
                           shuffle2(ya[u], yb[u], (UV)(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)));
        } else if (two) {
          CE_ROPE_STORE2(base + k0, ya[0], ya[1]);
          CE_ROPE_STORE2(base + k0 + nh, yb[0], yb[1]);
        } else {
          store_outv(orow, base + k0, ya[0]);
          store_outv(orow, base + k0 + nh, yb[0]);
        }
      }
  }
  k = nh / VEC * VEC;
  for (; k < nh; k++) {
    float2 cs = ce_rope_cos_sin(p, freq, nh, k);
    float c = attention * cs.x, s = sign * (attention * cs.y);
    ce_rope_pair(xr, orow, heads, head_dim, gptj ? 2 * k : k, gptj ? 2 * k + 1 : k + nh, c, s);
  }
  if (copy_rest)
    for (ulong h = 0; h < heads; h++)
      for (ulong c = 2 * nh; c < head_dim; c++) store_out(orow, h * head_dim + c, load_x(xr, h * head_dim + c));
}
#endif
