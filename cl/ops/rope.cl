/* rope.cl: rotary position embeddings on exact angles (angle.cl).
 * The frequencies come as 8 planes of `nh` = R/2 floats (the angle pieces of
 * w_k: plane j holds piece j of every k). Build options: OUT_DT, and for
 * ce_rope_apply X_DT, POS (0: positions from offset + i % seq_len, 1: from a
 * positions buffer) and the shape: ROWWISE 1 (CPU shapes, with VEC 16): a
 * work-item takes a whole row, VEC pairs at a time with the vector angle;
 * ROWWISE 0: work-item (k, i) takes pair k of every head of row i. Both do the
 * same float operations, so the results are identical bit for bit. */

#define OUT_T CE_XCAT(CE_STORE_, OUT_DT)
#define store_out CE_XCAT(ce_store_, OUT_DT)

inline float2 ce_rope_cos_sin(uint p, __global const float *f, ulong nh, ulong k) {
  float4 a = (float4)(f[k], f[nh + k], f[2 * nh + k], f[3 * nh + k]);
  float4 b = (float4)(f[4 * nh + k], f[5 * nh + k], f[6 * nh + k], f[7 * nh + k]);
  return ce_angle_cos_sin(p, a, b);
}

/* Work-item (k, r): out[r][k] = a*cos(p*w_k), out[r][nh + k] = a*sin(p*w_k),
 * p = first + r (first + rows <= 2^32, checked on the host). */
__kernel void ce_rope_cache(__global OUT_T *out, ulong o_off, ulong o_ld, ulong rows, ulong nh, ulong first,
                            __global const float *freq, float attention) {
  ulong k = get_global_id(0), r = get_global_id(1);
  if (k >= nh || r >= rows) return;
  float2 cs = ce_rope_cos_sin((uint)(first + r), freq, nh, k);
  ulong o = o_off + r * o_ld;
  store_out(out, o + k, attention * cs.x);
  store_out(out, o + nh + k, attention * cs.y);
}

#ifdef X_DT
#define X_T CE_XCAT(CE_STORE_, X_DT)
#define load_x CE_XCAT(ce_load_, X_DT)
#define load_xv CE_XCAT(ce_loadv_, X_DT)
#define store_outv CE_XCAT(ce_storev_, OUT_DT)

/* Work-item (j, i), row i: for j < nh, pair j of every head, rotated with
 * the angle of row i's position (computed once for all heads); for
 * nh <= j < nh + head_dim - R (and only when out is not x), column
 * R + j - nh of every head, copied. Each element is read and written by one
 * work-item, so out may be x. A row whose position (POS 1) is negative or
 * >= 2^32 is copied and reported (kind 0: row i, its position). */
__kernel void ce_rope_apply(__global const X_T *x, ulong x_off, ulong x_ld, __global OUT_T *out, ulong o_off,
                            ulong o_ld, ulong rows, ulong heads, ulong head_dim, ulong nh, int gptj,
                            int copy_rest, __global const float *freq, float attention, float sign,
                            __global const int *pos32, __global const long *pos64, ulong pos_off, int pos64f,
                            ulong seq_len, ulong pos_offset, __global uint *err, uint slot) {
#if ROWWISE
  ulong i = get_global_id(0), j = 0;
  if (i >= rows) return;
#else
  ulong j = get_global_id(0), i = get_global_id(1);
  if (i >= rows || j >= head_dim - nh) return; /* nh pairs, then head_dim - 2*nh columns to copy */
#endif
  __global const X_T *xr = x + x_off + i * x_ld;
  __global OUT_T *orow = out + o_off + i * o_ld;
#if POS
  long pl = ce_load_id(pos32, pos64, pos64f, pos_off + i);
  int ok = pl >= 0 && (ulong)pl < CE_POSITION_END;
  if (!ok && j == 0) ce_report(err, slot, 0, i, pl);
  uint p = (uint)(ok ? pl : 0);
#else
  ulong b = seq_len ? i / seq_len : 0;
  uint p = (uint)(pos_offset + (i - b * seq_len));
  const int ok = 1;
#endif
#if ROWWISE
  if (!ok) { /* a bad position: the row is copied */
    if (copy_rest)
      for (ulong c = 0; c < heads * head_dim; c++) store_out(orow, c, load_x(xr, c));
    return;
  }
  ulong k = 0;
  for (; k + VEC <= nh; k += VEC) {
    FV cv, sv;
    ce_angle_cos_sinv(p, freq, nh, k, &cv, &sv);
    cv = (FV)(attention) * cv;
    sv = (FV)(sign) * ((FV)(attention) * sv);
    for (ulong h = 0; h < heads; h++) {
      ulong base = h * head_dim;
      FV xa, xb;
      if (gptj) {
        FV lo = load_xv(xr, base + 2 * k), hi = load_xv(xr, base + 2 * k + VEC);
        xa = (FV)(lo.even, hi.even);
        xb = (FV)(lo.odd, hi.odd);
      } else {
        xa = load_xv(xr, base + k);
        xb = load_xv(xr, base + k + nh);
      }
      FV ya = xa * cv - xb * sv, yb = xb * cv + xa * sv;
      if (gptj) {
        store_outv(orow, base + 2 * k, shuffle2(ya, yb, (UV)(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23)));
        store_outv(orow, base + 2 * k + VEC,
                   shuffle2(ya, yb, (UV)(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)));
      } else {
        store_outv(orow, base + k, ya);
        store_outv(orow, base + k + nh, yb);
      }
    }
  }
  for (; k < nh; k++) {
    float2 cs = ce_rope_cos_sin(p, freq, nh, k);
    float c = attention * cs.x, s = sign * (attention * cs.y);
    ulong ca = gptj ? 2 * k : k, cb = gptj ? 2 * k + 1 : k + nh;
    for (ulong h = 0; h < heads; h++) {
      float xa = load_x(xr, h * head_dim + ca), xb = load_x(xr, h * head_dim + cb);
      store_out(orow, h * head_dim + ca, xa * c - xb * s);
      store_out(orow, h * head_dim + cb, xb * c + xa * s);
    }
  }
  if (copy_rest)
    for (ulong h = 0; h < heads; h++)
      for (ulong c = 2 * nh; c < head_dim; c++) store_out(orow, h * head_dim + c, load_x(xr, h * head_dim + c));
#else
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
  for (ulong h = 0; h < heads; h++) {
    float xa = load_x(xr, h * head_dim + ca), xb = load_x(xr, h * head_dim + cb);
    store_out(orow, h * head_dim + ca, xa * c - xb * s);
    store_out(orow, h * head_dim + cb, xb * c + xa * s);
  }
#endif
}
#endif
