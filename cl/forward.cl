/* forward.cl: the fused embedding forward.
 *   out[i][c] = dropout(scale * table[row(ids[i])][c] + P[p(i)][c])
 * Build options: TABLE_DT, OUT_DT (dtype codes), POSITIONS (0 none, 1 sinusoid,
 * 2 table), POS_DT (for POSITIONS 2), DROPOUT (0/1), and the shape:
 *   ROWS > 0 (CPU shapes, with VEC): a work-item writes the
 *            whole output rows of ROWS tokens, VEC columns at a time, the ROWS
 *            rows side by side: consecutive tokens, or with STRIDED the same
 *            position of ROWS consecutive sequences; STREAM (an output
 *            larger than the device's cache) writes it with streaming stores;
 *   ROWS 0   (GPU shapes): work-item (x, i) writes columns of token i, VW = 1:
 *            column x; VW = 4 (cols % 4 == 0): the float4 chunks 4x .. 4x + 3.
 * Every shape computes the same float operations in the same order, so the
 * results are identical bit for bit. */

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
#define load_tablev CE_XCAT(ce_loadv_, TABLE_DT)
#define store_outv CE_XCAT(ce_storev_, OUT_DT)
#define stream_outv CE_XCAT(ce_streamv_, OUT_DT)
#define load_posv CE_XCAT(ce_loadv_, POS_DT)

__kernel void ce_embed(__global const TABLE_T *table, ulong t_off, ulong t_ld, ulong t_rows,
                       __global const int *ids32, __global const long *ids64, ulong id_off, int id64, ulong n,
                       __global OUT_T *out, ulong o_off, ulong o_ld, ulong cols, float scale, int policy,
                       long padding, __global const float *freq, __global const POS_T *ptab, ulong p_off,
                       ulong p_ld, ulong p_rows, ulong seq_len, ulong pos_offset, __global const int *so32,
                       __global const long *so64, ulong so_off, int so64f, int has_so, float dropout,
                       uint seed_lo, uint seed_hi, float keep_scale, __global uint *err, uint slot) {
#if ROWS
  /* Work-item g: tokens g*ROWS .. g*ROWS + ROWS - 1. Reading
   * ROWS rows side by side keeps ROWS memory streams going, which a CPU's
   * prefetchers need when rows are gathered from random places. */
  ulong g = get_global_id(0), t0, tstep;
#if STRIDED
  /* STRIDED (several sequences of seq_len, positions shared): item g takes
   * position x of sequences ROWS*q .. ROWS*q + ROWS - 1, q = g / seq_len, so
   * its tokens read one position row (once from memory, then from cache) */
  ulong q = g / seq_len, x = g - q * seq_len;
  t0 = q * ROWS * seq_len + x;
  tstep = seq_len;
#else
  t0 = g * ROWS;
  tstep = 1;
#endif
  if (t0 >= n) return;
  /* the last work-item may have fewer than ROWS tokens (`live`): the missing
   * ones stand in as token n - 1 in the set-up below and are skipped after it */
  int live = (int)min((ulong)ROWS, (n - t0 + tstep - 1) / tstep);
  __global const TABLE_T *trow[ROWS];
  __global OUT_T *orow[ROWS];
  int has[ROWS], nt[ROWS]; /* nt: streaming stores (STREAM, and the row aligned to a vector) */
  ulong e0[ROWS]; /* element index of the row's column 0 (the dropout counter) */
#if POSITIONS == 1
  ulong pp[ROWS]; /* the token's position */
  int pok[ROWS];
#elif POSITIONS == 2
  __global const POS_T *prow[ROWS];
  int pok[ROWS];
#endif
  for (int k = 0; k < ROWS; k++) {
    ulong t = t0 + k * tstep, i = min(t, n - 1);
    int bad;
    long id = ce_load_id(ids32, ids64, id64, id_off + i);
    long row = ce_resolve(id, t_rows, policy, padding, &bad);
    if (bad && t < n) ce_report(err, slot, 0, i, id);
    has[k] = row >= 0;
    trow[k] = table + t_off + (ulong)(row >= 0 ? row : 0) * t_ld;
    orow[k] = out + o_off + i * o_ld;
    nt[k] = STREAM && CE_STREAMING && ((ulong)orow[k] & (VEC * sizeof(OUT_T) - 1)) == 0;
    e0[k] = i * cols;
#if POSITIONS != 0
    ulong b = seq_len ? i / seq_len : 0, jj = i - b * seq_len;
    long first = has_so ? ce_load_id(so32, so64, so64f, so_off + b) : (long)pos_offset;
    ulong p = (ulong)first + jj;
#if POSITIONS == 1
    pok[k] = first >= 0 && p < CE_POSITION_END; /* the sinusoid's positions: [0, 2^32) */
    pp[k] = p;
#else
    pok[k] = first >= 0 && p < p_rows;
    prow[k] = ptab + p_off + (pok[k] ? p : 0) * p_ld;
#endif
    if (!pok[k] && t < n) ce_report(err, slot, 1, i, first);
#endif
  }
  ulong cv = cols / VEC * VEC;
  for (ulong c = 0; c < cv; c += VEC) {
#if POSITIONS == 1 && STRIDED
    FV pe = ce_sinusoidv(pp[0], freq, cols, c); /* one position for all the item's tokens */
#endif
    for (int k = 0; k < ROWS && k < live; k++) {
      FV v = has[k] ? scale * load_tablev(trow[k], c) : (FV)(0.0f);
#if POSITIONS == 1 && STRIDED
      if (pok[k]) v += pe;
#elif POSITIONS == 1
      if (pok[k]) v += ce_sinusoidv(pp[k], freq, cols, c);
#elif POSITIONS == 2
      if (pok[k]) v += load_posv(prow[k], c);
#endif
#if DROPOUT
      v = ce_maskv(v, e0[k] + c, dropout, keep_scale, seed_lo, seed_hi);
#endif
      if (nt[k])
        stream_outv(orow[k], c, v);
      else
        store_outv(orow[k], c, v);
    }
  }
  for (ulong c = cv; c < cols; c++)
    for (int k = 0; k < ROWS && k < live; k++) {
      float v = has[k] ? scale * load_table(trow[k], c) : 0.0f;
#if POSITIONS == 1
      if (pok[k]) v += ce_sinusoid(pp[k], freq, cols, c);
#elif POSITIONS == 2
      if (pok[k]) v += load_pos(prow[k], c);
#endif
#if DROPOUT
      v = ce_mask1(v, e0[k] + c, dropout, keep_scale, seed_lo, seed_hi);
#endif
      store_out(orow[k], c, v);
    }
#elif VW == 4
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
  int pos_ok = first >= 0 && p < CE_POSITION_END;
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
      v += (float4)(ce_sinusoid(p, freq, cols, c), ce_sinusoid(p, freq, cols, c + 1),
                    ce_sinusoid(p, freq, cols, c + 2), ce_sinusoid(p, freq, cols, c + 3));
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
  if (first >= 0 && p < CE_POSITION_END)
    v += ce_sinusoid(p, freq, cols, c);
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
