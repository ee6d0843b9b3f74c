/* positional.cl: the sinusoid table, out[r][c] = sinusoid(first + r, column c)
 * (cl/lib/angle.cl; first + rows <= 2^32, checked on the host), one kernel per
 * shape. Build options: OUT_DT, VEC. freq: the columns' angle pieces and
 * phases, 9 planes of cols floats.
 *   ce_positional       work-item (c, r) writes one element;
 *   ce_positional_rows  work-item r writes row r, VEC columns at a time with
 *                       the vector sinusoid (the same bits as one at a time). */

#define OUT_T CE_XCAT(CE_STORE_, OUT_DT)
#define store_out CE_XCAT(ce_store_, OUT_DT)
#define store_outv CE_XCAT(ce_storev_, OUT_DT)
/* out may be a split matrix (cl/lib/pieces.cl): a launch writes its window's rows */

__kernel void ce_positional(__global OUT_T *out, ulong o_off CE_PIECE_PARAMS(OUT_T, out), ulong o_ld, ulong rows,
                            ulong cols, ulong first, __global const float *freq) {
  ulong c = get_global_id(0), r = get_global_id(1);
  if (c >= cols || r >= rows) return;
  if (!CE_OWNS(out, r)) return; /* another window's row */
  store_out(CE_AT(out, r), CE_OFF(out, o_off, o_ld, r) + c, ce_sinusoid(first + r, freq, cols, c));
}

__kernel void ce_positional_rows(__global OUT_T *out, ulong o_off CE_PIECE_PARAMS(OUT_T, out), ulong o_ld,
                                 ulong rows, ulong cols, ulong first, __global const float *freq) {
  ulong r = get_global_id(0);
  if (r >= rows) return;
  if (!CE_OWNS(out, r)) return; /* another window's row */
  __global OUT_T *o = CE_AT(out, r) + CE_OFF(out, o_off, o_ld, r);
  ulong c = 0;
  for (; c + VEC <= cols; c += VEC) store_outv(o, c, ce_sinusoidv(first + r, freq, cols, c));
  for (; c < cols; c++) store_out(o, c, ce_sinusoid(first + r, freq, cols, c));
}
