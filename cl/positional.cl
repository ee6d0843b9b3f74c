/* positional.cl: the sinusoid table, out[r][c] = sinusoid(first + r, column c)
 * (first + rows <= 2^32, checked on the host).
 * Build options: OUT_DT, and ROWWISE (CPU shapes, with VEC): a work-item
 * writes a whole row, VEC columns at a time with the vector sinusoid (the same
 * bits as one column at a time); otherwise work-item (c, r) writes one element. */

#define OUT_T CE_XCAT(CE_STORE_, OUT_DT)
#define store_out CE_XCAT(ce_store_, OUT_DT)
#define store_outv CE_XCAT(ce_storev_, OUT_DT)

__kernel void ce_positional(__global OUT_T *out, ulong o_off, ulong o_ld, ulong rows, ulong cols, ulong first,
                            __global const float *freq) {
#if ROWWISE
  ulong r = get_global_id(0);
  if (r >= rows) return;
  ulong c = 0, o = o_off + r * o_ld;
  for (; c + VEC <= cols; c += VEC) {
    store_outv(out, o + c, ce_sinusoidv(first + r, freq, cols, c));
  }
  for (; c < cols; c++) store_out(out, o + c, ce_sinusoid(first + r, freq, cols, c));
#else
  ulong c = get_global_id(0), r = get_global_id(1);
  if (c >= cols || r >= rows) return;
  store_out(out, o_off + r * o_ld + c, ce_sinusoid(first + r, freq, cols, c));
#endif
}
