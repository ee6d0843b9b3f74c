/* forward.cl: the fused embedding forward, one work-item per output element.
 *   out[i][c] = dropout(scale * table[row(ids[i])][c] + P[p(i)][c])
 * Build options: TABLE_DT, OUT_DT (dtype codes), POSITIONS (0 none, 1 sinusoid,
 * 2 table), POS_DT (for POSITIONS 2), DROPOUT (0/1). */

#define TABLE_T CE_XCAT(CE_STORE_, TABLE_DT)
#define OUT_T CE_XCAT(CE_STORE_, OUT_DT)
#define load_table CE_XCAT(ce_load_, TABLE_DT)
#define store_out CE_XCAT(ce_store_, OUT_DT)
#if POSITIONS == 2
#define POS_T CE_XCAT(CE_STORE_, POS_DT)
#define load_pos CE_XCAT(ce_load_, POS_DT)
#else
#define POS_T float
#endif

__kernel void ce_embed(__global const TABLE_T *table, ulong t_off, ulong t_ld, ulong t_rows,
                       __global const int *ids32, __global const long *ids64, ulong id_off, int id64, ulong n,
                       __global OUT_T *out, ulong o_off, ulong o_ld, ulong cols, float scale, int policy,
                       long padding, __global const float2 *freq, __global const POS_T *ptab, ulong p_off,
                       ulong p_ld, ulong p_rows, ulong seq_len, ulong pos_offset, __global const int *so32,
                       __global const long *so64, ulong so_off, int so64f, int has_so, float dropout,
                       uint seed_lo, uint seed_hi, float keep_scale, __global uint *err, uint slot) {
  ulong c = get_global_id(0), i = get_global_id(1);
  if (c >= cols || i >= n) return;
  int bad;
  long row = ce_resolve(ce_load_id(ids32, ids64, id64, id_off + i), t_rows, policy, padding, &bad);
  float v = row >= 0 ? scale * load_table(table, t_off + (ulong)row * t_ld + c) : 0.0f;
  if (bad && c == 0) ce_report(err, slot, 0, i);
#if POSITIONS != 0
  ulong b = seq_len ? i / seq_len : 0, j = seq_len ? i % seq_len : i;
  long first = has_so ? ce_load_id(so32, so64, so64f, so_off + b) : (long)pos_offset;
  ulong p = (ulong)first + j;
#if POSITIONS == 1
  if (first >= 0)
    v += ce_sinusoid(p, freq[c]);
  else if (c == 0)
    ce_report(err, slot, 1, i);
#else
  if (first >= 0 && p < p_rows)
    v += load_pos(ptab, p_off + p * p_ld + c);
  else if (c == 0)
    ce_report(err, slot, 1, i);
#endif
#endif
#if DROPOUT
  uint x = ce_philox_element(seed_lo, seed_hi, i * cols + c).x;
  v = ce_unit(x) >= dropout ? v * keep_scale : 0.0f;
#endif
  store_out(out, o_off + i * o_ld + c, v);
}
