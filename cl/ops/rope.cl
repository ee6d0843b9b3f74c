/* rope.cl: rotary position embeddings on exact angles (angle.cl).
 * The frequencies come as 8 planes of `nh` = R/2 floats (the angle pieces of
 * w_k: plane j holds piece j of every k). Build options: OUT_DT, and for
 * ce_rope_apply X_DT and POS (0: positions from offset + i % seq_len,
 * 1: from a positions buffer). */

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
  ulong j = get_global_id(0), i = get_global_id(1);
  ulong rest = head_dim - 2 * nh;
  if (i >= rows || j >= nh + rest) return;
  __global const X_T *xr = x + x_off + i * x_ld;
  ulong orow = o_off + i * o_ld;
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
  if (j >= nh) { /* a column past R */
    if (!copy_rest) return;
    ulong c = 2 * nh + (j - nh);
    for (ulong h = 0; h < heads; h++) store_out(out, orow + h * head_dim + c, load_x(xr, h * head_dim + c));
    return;
  }
  ulong ca = gptj ? 2 * j : j, cb = gptj ? 2 * j + 1 : j + nh;
  if (!ok) {
    for (ulong h = 0; h < heads; h++) {
      float xa = load_x(xr, h * head_dim + ca), xb = load_x(xr, h * head_dim + cb);
      store_out(out, orow + h * head_dim + ca, xa);
      store_out(out, orow + h * head_dim + cb, xb);
    }
    return;
  }
  float2 cs = ce_rope_cos_sin(p, freq, nh, j);
  float c = attention * cs.x, s = sign * (attention * cs.y);
  for (ulong h = 0; h < heads; h++) {
    float xa = load_x(xr, h * head_dim + ca), xb = load_x(xr, h * head_dim + cb);
    float ya = xa * c - xb * s, yb = xb * c + xa * s;
    store_out(out, orow + h * head_dim + ca, ya);
    store_out(out, orow + h * head_dim + cb, yb);
  }
}
#endif
