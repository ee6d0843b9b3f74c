/* positional.cl: the sinusoid table, out[r][c] = sinusoid(first + r, column c).
 * Build option: OUT_DT. */

#define OUT_T CE_XCAT(CE_STORE_, OUT_DT)
#define store_out CE_XCAT(ce_store_, OUT_DT)

__kernel void ce_positional(__global OUT_T *out, ulong o_off, ulong o_ld, ulong rows, ulong cols, ulong first,
                            __global const float2 *freq) {
  ulong c = get_global_id(0), r = get_global_id(1);
  if (c >= cols || r >= rows) return;
  store_out(out, o_off + r * o_ld + c, ce_sinusoid(first + r, freq[c]));
}
