/* positional.cl: the sinusoid table, out[r][c] = sinusoid(first + r, column c)
 * (cl/lib/angle.cl), one kernel per shape. Build options: OUT_DT, VEC.
 *   ce_positional       work-item (c, r) writes one element;
 *   ce_positional_rows  work-item r writes row r, VEC columns at a time with
 *                       the vector sinusoid (the same bits as one at a time). */

#define OUT_T CE_XCAT(CE_STORE_, OUT_DT)
#define store_out CE_XCAT(ce_store_, OUT_DT)
#define store_outv CE_XCAT(ce_storev_, OUT_DT)

__kernel void ce_positional(__global OUT_T *out, ulong o_off, ulong o_ld, ulong rows, ulong cols, ulong first,
                            __global const float2 *freq) {
  ulong c = get_global_id(0), r = get_global_id(1);
  if (c >= cols || r >= rows) return;
  store_out(out, o_off + r * o_ld + c, ce_sinusoid(first + r, freq[c]));
}

__kernel void ce_positional_rows(__global OUT_T *out, ulong o_off, ulong o_ld, ulong rows, ulong cols, ulong first,
                                 __global const float2 *freq) {
  ulong r = get_global_id(0);
  if (r >= rows) return;
  ulong c = 0, o = o_off + r * o_ld;
  for (; c + VEC <= cols; c += VEC) {
    /* VEC (w_hi, w_lo) pairs, split into the w_hi and the w_lo lanes */
    __global const float *f = (__global const float *)(freq + c);
    FV a = vloadV(0, f), b = vloadV(0, f + VEC);
    store_outv(out, o + c, ce_sinusoidv(first + r, (FV)(a.even, b.even), (FV)(a.odd, b.odd)));
  }
  for (; c < cols; c++) store_out(out, o + c, ce_sinusoid(first + r, freq[c]));
}
