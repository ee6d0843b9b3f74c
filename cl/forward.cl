/* forward.cl: the fused embedding forward, one work-item per output element.
 *   out[i][c] = dropout(scale * table[row(ids[i])][c] + P[p(i)][c])
 * Build options: TABLE_DT, OUT_DT (dtype codes), POSITIONS (0 none, 1 sinusoid,
 * 2 table), POS_DT (for POSITIONS 2), DROPOUT (0/1), VW (1: one element per
 * work-item; 4: four consecutive columns per work-item, when cols % 4 == 0). */

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
#define load4_table CE_XCAT(ce_load4_, TABLE_DT)
#define store4_out CE_XCAT(ce_store4_, OUT_DT)
#define load4_pos CE_XCAT(ce_load4_, POS_DT)

__kernel void ce_embed(__global const TABLE_T *table, ulong t_off, ulong t_ld, ulong t_rows,
                       __global const int *ids32, __global const long *ids64, ulong id_off, int id64, ulong n,
                       __global OUT_T *out, ulong o_off, ulong o_ld, ulong cols, float scale, int policy,
                       long padding, __global const float2 *freq, __global const POS_T *ptab, ulong p_off,
                       ulong p_ld, ulong p_rows, ulong seq_len, ulong pos_offset, __global const int *so32,
                       __global const long *so64, ulong so_off, int so64f, int has_so, float dropout,
                       uint seed_lo, uint seed_hi, float keep_scale, __global uint *err, uint slot) {
#if VW == 4
  /* work-item (x, i): token i, float4 chunks 4x .. 4x + 3 of its row; the
   * token's row and position are resolved once */
  ulong i = get_global_id(1), j0 = get_global_id(0) * 4;
  if (4 * j0 >= cols || i >= n) return;
  int bad;
  long id = ce_load_id(ids32, ids64, id64, id_off + i);
  long row = ce_resolve(id, t_rows, policy, padding, &bad);
  if (bad && j0 == 0) ce_report(err, slot, 0, i, id);
  __global const TABLE_T *trow = table + t_off + (ulong)(row >= 0 ? row : 0) * t_ld;
  __global OUT_T *orow = out + o_off + i * o_ld;
#if POSITIONS != 0
  ulong b = seq_len ? i / seq_len : 0, jj = i - b * seq_len; /* not i % seq_len beside i / seq_len: Oclgrind cannot check the freeze LLVM emits for the pair */
  long first = has_so ? ce_load_id(so32, so64, so64f, so_off + b) : (long)pos_offset;
  ulong p = (ulong)first + jj;
#if POSITIONS == 1
  int pos_ok = first >= 0;
#else
  int pos_ok = first >= 0 && p < p_rows;
  __global const POS_T *prow = ptab + p_off + (pos_ok ? p : 0) * p_ld;
#endif
  if (!pos_ok && j0 == 0) ce_report(err, slot, 1, i, first);
#endif
  ulong jend = min(j0 + 4, cols / 4);
  for (ulong j = j0; j < jend; j++) {
    ulong c = 4 * j;
    float4 v = row >= 0 ? scale * load4_table(trow, 0, j) : (float4)(0.0f);
#if POSITIONS == 1
    if (pos_ok)
      v += (float4)(ce_sinusoid(p, freq[c]), ce_sinusoid(p, freq[c + 1]), ce_sinusoid(p, freq[c + 2]),
                    ce_sinusoid(p, freq[c + 3]));
#elif POSITIONS == 2
    if (pos_ok) v += load4_pos(prow, 0, j);
#endif
#if DROPOUT
    ulong e = i * cols + c;
    v.x = ce_unit(ce_philox_element(seed_lo, seed_hi, e).x) >= dropout ? v.x * keep_scale : 0.0f;
    v.y = ce_unit(ce_philox_element(seed_lo, seed_hi, e + 1).x) >= dropout ? v.y * keep_scale : 0.0f;
    v.z = ce_unit(ce_philox_element(seed_lo, seed_hi, e + 2).x) >= dropout ? v.z * keep_scale : 0.0f;
    v.w = ce_unit(ce_philox_element(seed_lo, seed_hi, e + 3).x) >= dropout ? v.w * keep_scale : 0.0f;
#endif
    store4_out(orow, 0, j, v);
  }
#else
  ulong c = get_global_id(0), i = get_global_id(1);
  if (c >= cols || i >= n) return;
  int bad;
  long id = ce_load_id(ids32, ids64, id64, id_off + i);
  long row = ce_resolve(id, t_rows, policy, padding, &bad);
  float v = row >= 0 ? scale * load_table(table, t_off + (ulong)row * t_ld + c) : 0.0f;
  if (bad && c == 0) ce_report(err, slot, 0, i, id);
#if POSITIONS != 0
  ulong b = seq_len ? i / seq_len : 0, j = i - b * seq_len;
  long first = has_so ? ce_load_id(so32, so64, so64f, so_off + b) : (long)pos_offset;
  ulong p = (ulong)first + j;
#if POSITIONS == 1
  if (first >= 0)
    v += ce_sinusoid(p, freq[c]);
  else if (c == 0)
    ce_report(err, slot, 1, i, first);
#else
  if (first >= 0 && p < p_rows)
    v += load_pos(ptab, p_off + p * p_ld + c);
  else if (c == 0)
    ce_report(err, slot, 1, i, first);
#endif
#endif
#if DROPOUT
  uint x = ce_philox_element(seed_lo, seed_hi, i * cols + c).x;
  v = ce_unit(x) >= dropout ? v * keep_scale : 0.0f;
#endif
  store_out(out, o_off + i * o_ld + c, v);
#endif
}
