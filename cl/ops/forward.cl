/* forward.cl: the fused embedding forward, one kernel per shape.
 *   out[i][c] = dropout(scale * table[row(ids[i])][c] + P[p(i)][c])
 * Build options: TABLE_DT, OUT_DT (dtype codes), POSITIONS (0 none, 1 sinusoid,
 * 2 table), POS_DT (for POSITIONS 2), DROPOUT (0/1), REMAP (0/1), VEC, and for the row
 * shapes ROWS and STREAM. The host picks the shape (src/ops/embed.c):
 *   ce_embed          work-item (c, i): column c of token i;
 *   ce_embed_vec4     work-item (x, i): the float4 chunks 4x .. 4x + 3 of token
 *                     i's row (cols % 4 == 0);
 *   ce_embed_rows     work-item g: the whole output rows of tokens
 *                     g*ROWS .. g*ROWS + ROWS - 1, VEC columns at a time, the
 *                     rows side by side (a CPU's prefetchers need several
 *                     streams when rows are gathered from random places);
 *   ce_embed_strided  as ce_embed_rows, for the same position of ROWS
 *                     consecutive sequences (each position row read once).
 * STREAM (an output larger than the device's cache) writes the row shapes'
 * output with streaming stores. Every shape resolves a token and its position
 * with ids.cl's ce_token_row and ce_token_position and computes the same float
 * operations in the same order, so the results are identical bit for bit.
 * The table (and a learned position table) may be of a block-quantized dtype
 * (cl/lib/quant.cl): rows then start at ce_ptr_T(base, value offset), loads
 * are value-indexed from a row's first block, and the row shapes' VEC and the
 * vec4 shape's 4 divide every block's runs (cols is a multiple of 32).
 * The table, a learned position table and the output may each be a split
 * matrix (cl/lib/pieces.cl: -DCE_PIECES_table, _ptab, _out): a launch then
 * writes the tokens whose table row, position and output row are all in its
 * windows (a token without a table row or position goes with the first
 * window of that matrix), so every token is written once, with the same
 * operations. */


#ifndef ROWS
#define ROWS 4
#endif
#ifndef STREAM
#define STREAM 0
#endif
/* EMBED_STRIDED_AHEAD (the strided shape; the host sets it for short table rows where
 * CE_PREFETCH is 1): the rows are written one after another, and the table
 * row EMBED_STRIDED_AHEAD rows on is asked for while one is written; 0: none */
#ifndef EMBED_STRIDED_AHEAD
#define EMBED_STRIDED_AHEAD 0
#endif
/* EMBED_NEXT (the row shapes without EMBED_STRIDED_AHEAD; the host sets it where CE_PREFETCH is
 * 1): while an item's rows are written side by side, the table rows of the
 * next item's tokens (from t0 + tnext) are asked for, a line or more of each
 * at every column step; 0: none */
#ifndef EMBED_NEXT
#define EMBED_NEXT 0
#endif
/* COPY (the host sets it for a same-dtype F16 or BF16 lookup: scale 1, no
 * positions, no dropout): the row shapes move each row's 16-bit words as they
 * are, a NaN made quiet (F16: bit 9, BF16: bit 6 set), which are the bits the
 * conversion through float32 gives (an exact load, 1*v, a store of a value it
 * represents), without converting. */
#ifndef COPY
#define COPY 0
#endif

#define TABLE_T CE_XCAT(CE_STORE_, TABLE_DT)
#define OUT_T CE_XCAT(CE_STORE_, OUT_DT)
#define load_table CE_XCAT(ce_load_, TABLE_DT)
#define table_ptr CE_XCAT(ce_ptr_, TABLE_DT) /* a row's start (its first block, for the block types) */
#define store_out CE_XCAT(ce_store_, OUT_DT)
#if POSITIONS == 2
#define POS_T CE_XCAT(CE_STORE_, POS_DT)
#define load_pos CE_XCAT(ce_load_, POS_DT)
#define pos_ptr CE_XCAT(ce_ptr_, POS_DT)
#else
#define POS_T float
#endif
#define load4_table CE_XCAT(ce_load4_, TABLE_DT)
#define store4_out CE_XCAT(ce_store4_, OUT_DT)
#define load4_pos CE_XCAT(ce_load4_, POS_DT)
#define load_tablev CE_XCAT(ce_loadv_, TABLE_DT)
#define load_tablew CE_XCAT(ce_loadw_, TABLE_DT)
#define store_outv CE_XCAT(ce_storev_, OUT_DT)
#define stream_outv CE_XCAT(ce_streamv_, OUT_DT)
#define stream2_outv CE_XCAT(ce_stream2v_, OUT_DT)
#define load_posv CE_XCAT(ce_loadv_, POS_DT)
#if COPY && TABLE_DT == 1
#define CE_COPY_QUIET 0x0200 /* F16: exponent 0x7C00, quiet bit 9 */
#define CE_COPY_INF 0x7C00
#elif COPY
#define CE_COPY_QUIET 0x0040 /* BF16: exponent 0x7F80, quiet bit 6 */
#define CE_COPY_INF 0x7F80
#endif

/* The arguments of every shape (src/ops/embed.c sets them once for all). */
#define CE_EMBED_ARGS                                                                                          \
  __global const TABLE_T *table, ulong t_off CE_PIECE_PARAMS(const TABLE_T, table), ulong t_ld, ulong t_rows, \
      __global const int *ids32, __global const long *ids64, ulong id_off, int id64, ulong n,                 \
      __global OUT_T *out, ulong o_off CE_PIECE_PARAMS(OUT_T, out), ulong o_ld, ulong cols, float scale,      \
      int policy, long padding, __global const float *freq, __global const POS_T *ptab,                       \
      ulong p_off CE_PIECE_PARAMS(const POS_T, ptab), ulong p_ld, ulong p_rows, ulong seq_len,                \
      ulong pos_offset, __global const int *so32, __global const long *so64, ulong so_off, int so64f,         \
      int has_so, float dropout, uint seed_lo, uint seed_hi, float keep_scale, __global uint *err, uint slot, \
      __global const int *rm32, __global const long *rm64, ulong rm_off, int rm64f, ulong rm_rows
#define CE_EMBED_PASS                                                                                          \
  table, t_off CE_PIECE_PASS(table), t_ld, t_rows, ids32, ids64, id_off, id64, n, out,                         \
      o_off CE_PIECE_PASS(out), o_ld, cols, scale, policy, padding, freq, ptab, p_off CE_PIECE_PASS(ptab),     \
      p_ld, p_rows, seq_len, pos_offset, so32, so64, so_off, so64f, has_so, dropout, seed_lo, seed_hi,          \
      keep_scale, err, slot, rm32, rm64, rm_off, rm64f, rm_rows

/* Token i's row (reported by the work-item that speaks for it) and position;
 * REMAP (a pruned table: the arguments rm*) through the remap (ids.cl's
 * ce_token_row_rm: a pruned id's CE_PRUNED is a zero row as -1 is). PF_ROW(t):
 * token t's row for a prefetch hint (unchecked, unreported: a bad one is
 * outside [0, t_rows)). */
#ifndef REMAP
#define REMAP 0
#endif
#if REMAP
#define TOKEN_ROW(i, report)                                                                                 \
  ce_token_row_rm(ids32, ids64, id64, id_off, (i), t_rows, policy, padding, err, slot, (report), rm32, rm64, \
                  rm_off, rm64f, rm_rows)
#define PF_ROW(t)                                                                                              \
  ce_token_row_rm(ids32, ids64, id64, id_off, (t), t_rows, CE_POLICY_ZERO, -1, err, slot, 0, rm32, rm64, rm_off, \
                  rm64f, rm_rows)
#else
#define TOKEN_ROW(i, report) \
  ce_token_row(ids32, ids64, id64, id_off, (i), t_rows, policy, padding, err, slot, (report))
#define PF_ROW(t) ce_load_id(ids32, ids64, id64, id_off + (t))
#endif
#define TOKEN_POSITION(i, report, ok)                                                                       \
  ce_token_position((i), seq_len, pos_offset, so32, so64, so_off, so64f, has_so, POSITIONS == 2, p_rows, err, \
                    slot, (report), (ok))

/* Row r's start in the table, the position table and the output (their pieces). */
#if TABLE_DT <= 2 /* elements, not blocks: pieces.cl's CE_ROWP */
#define TABLE_ROW(r) CE_ROWP(const TABLE_T, table, t_off, t_ld, (ulong)(r))
#else
#define TABLE_ROW(r) table_ptr(CE_AT(table, (ulong)(r)), CE_OFF(table, t_off, t_ld, (ulong)(r)))
#endif
#define POS_ROW(p) pos_ptr(CE_AT(ptab, (ulong)(p)), CE_OFF(ptab, p_off, p_ld, (ulong)(p)))
#define OUT_ROW(i) CE_ROWP(OUT_T, out, o_off, o_ld, (ulong)(i))
/* Whether this launch writes token i: its output row, table row (row, -1 for
 * none) and learned position (p when pok) are in the launch's windows. */
#if POSITIONS == 2
#define POS_OWNED(p, pok) ((pok) ? CE_OWNS(ptab, (ulong)(p)) : CE_FIRST(ptab))
#else
#define POS_OWNED(p, pok) 1
#endif
#define TOKEN_OWNED(i, row, p, pok) \
  (CE_OWNS(out, (ulong)(i)) && ((row) >= 0 ? CE_OWNS(table, (ulong)(row)) : CE_FIRST(table)) && POS_OWNED(p, pok))
#if CE_PIECES_table > 8 || CE_PIECES_out > 8 || CE_PIECES_ptab > 8 /* windows (pieces.cl) */
#define OWNED(k) own[k]
#else
#define OWNED(k) 1
#endif

/* The simple shapes' steps for a feature: token i's position (p, ok), the
 * position's element c (four from c) added to v, and the dropout of element e
 * (e .. e + 3); nothing where the call has none. */
#if POSITIONS != 0
#define TOKEN_POS(i, report) \
  int ok;                    \
  ulong p = TOKEN_POSITION((i), (report), &ok);
#else
#define TOKEN_POS(i, report)
#endif
#if POSITIONS == 1
#define ADD_POS1(v, c) \
  if (ok) v += ce_sinusoid(p, freq, cols, (c))
#define POS4_ROW
#define ADD_POS4(v, j, c)                                                                                 \
  if (ok)                                                                                                 \
  v += (float4)(ce_sinusoid(p, freq, cols, (c)), ce_sinusoid(p, freq, cols, (c) + 1),                    \
                ce_sinusoid(p, freq, cols, (c) + 2), ce_sinusoid(p, freq, cols, (c) + 3))
#elif POSITIONS == 2
#define ADD_POS1(v, c) \
  if (ok) v += load_pos(CE_AT(ptab, p), CE_OFF(ptab, p_off, p_ld, p) + (c))
#define POS4_ROW __global const POS_T *prow = POS_ROW(ok ? p : CE_LO(ptab));
#define ADD_POS4(v, j, c) \
  if (ok) v += load4_pos(prow, 0, (j))
#else
#define ADD_POS1(v, c)
#define POS4_ROW
#define ADD_POS4(v, j, c)
#endif
#if DROPOUT
#define DROP1(v, e) v = ce_mask1(v, (e), dropout, keep_scale, seed_lo, seed_hi)
#define DROP4(v, e)                                                     \
  do {                                                                  \
    v.x = ce_mask1(v.x, (e), dropout, keep_scale, seed_lo, seed_hi);     \
    v.y = ce_mask1(v.y, (e) + 1, dropout, keep_scale, seed_lo, seed_hi); \
    v.z = ce_mask1(v.z, (e) + 2, dropout, keep_scale, seed_lo, seed_hi); \
    v.w = ce_mask1(v.w, (e) + 3, dropout, keep_scale, seed_lo, seed_hi); \
  } while (0)
#else
#define DROP1(v, e)
#define DROP4(v, e)
#endif

__kernel void ce_embed(CE_EMBED_ARGS) {
  ulong c = get_global_id(0), i = get_global_id(1);
  if (c >= cols || i >= n) return;
  long row = TOKEN_ROW(i, c == 0);
  TOKEN_POS(i, c == 0)
  if (!TOKEN_OWNED(i, row, p, ok)) return;
  float v = row >= 0 ? scale * load_table(CE_AT(table, (ulong)row), CE_OFF(table, t_off, t_ld, (ulong)row) + c) : 0.0f;
  ADD_POS1(v, c);
  DROP1(v, i * cols + c);
  store_out(CE_AT(out, i), CE_OFF(out, o_off, o_ld, i) + c, v);
}

__kernel void ce_embed_vec4(CE_EMBED_ARGS) {
  ulong i = get_global_id(1), j0 = get_global_id(0) * 4;
  if (4 * j0 >= cols || i >= n) return;
  long row = TOKEN_ROW(i, j0 == 0);
  TOKEN_POS(i, j0 == 0)
  if (!TOKEN_OWNED(i, row, p, ok)) return;
  __global const TABLE_T *trow = TABLE_ROW(row >= 0 ? (ulong)row : CE_LO(table));
  __global OUT_T *orow = OUT_ROW(i);
  POS4_ROW
  ulong jend = min(j0 + 4, cols / 4);
  for (ulong j = j0; j < jend; j++) {
    ulong c = 4 * j;
    float4 v = row >= 0 ? scale * load4_table(trow, 0, j) : (float4)(0.0f);
    ADD_POS4(v, j, c);
    DROP4(v, i * cols + c);
    store4_out(orow, 0, j, v);
  }
}

/* The row shapes' steps for VEC columns of row k from column c. COPY: the
 * 16-bit words moved as they are. Otherwise v (the scaled table values)
 * gets its position (pe: the shared one), dropout, and is stored. */
#define CE_COPY_VEC(k, c)                                                                          \
  do {                                                                                             \
    USV h = has[k] ? vloadV(0, (__global const ushort *)trow[k] + (c)) : (USV)(0);                 \
    h = select(h, h | (USV)(CE_COPY_QUIET), (h & (USV)(0x7FFF)) > (USV)(CE_COPY_INF));             \
    if (nt[k])                                                                                     \
      ce_stream_us((__global ushort *)orow[k] + (c), h);                                           \
    else                                                                                           \
      ce_storev_us((__global ushort *)orow[k] + (c), h);                                           \
  } while (0)
#if POSITIONS == 1
#define CE_ADD_POS(k, c, v, pe) \
  if (pok[k]) v += shared ? pe : ce_sinusoidv(pp[k], freq, cols, (c))
#elif POSITIONS == 2
#define CE_ADD_POS(k, c, v, pe) \
  if (pok[k]) v += load_posv(prow[k], (c))
#else
#define CE_ADD_POS(k, c, v, pe)
#endif
#if DROPOUT
#define CE_DROP(k, c, v) v = ce_maskv(v, e0[k] + (c), dropout, keep_scale, seed_lo, seed_hi)
#else
#define CE_DROP(k, c, v)
#endif
#define CE_FINISH_VEC(k, c, v, pe)  \
  do {                              \
    CE_ADD_POS(k, c, v, pe);        \
    CE_DROP(k, c, v);               \
    if (nt[k])                      \
      stream_outv(orow[k], (c), v); \
    else                            \
      store_outv(orow[k], (c), v);  \
  } while (0)

/* The row shapes' steps for row k from column c: 2 * VEC columns (pe0, pe1:
 * the shared position's sinusoid), VEC columns, one column. */
#if COPY
/* two vectors: a whole line (VEC 16) in one streaming store where the row is
 * aligned to it, not two half-line stores (docs/performance.md) */
#define CE_COPY_WORDS(k, c)                                                                            \
  (has[k] ? vloadV(0, (__global const ushort *)trow[k] + (c)) : (USV)(0))
#define CE_QUIET(h) select((h), (h) | (USV)(CE_COPY_QUIET), ((h) & (USV)(0x7FFF)) > (USV)(CE_COPY_INF))
#define CE_STEP2(k, c, pe0, pe1)                                         \
  do {                                                                   \
    if (nt2[k]) {                                                        \
      USV h0 = CE_COPY_WORDS(k, c), h1 = CE_COPY_WORDS(k, (c) + VEC);    \
      ce_stream2_us((__global ushort *)orow[k] + (c), CE_QUIET(h0), CE_QUIET(h1)); \
    } else {                                                             \
      CE_COPY_VEC(k, c);                                                 \
      CE_COPY_VEC(k, (c) + VEC);                                         \
    }                                                                    \
  } while (0)
#define CE_STEP1(k, c, pe0) CE_COPY_VEC(k, c)
#else
#define CE_STEP2(k, c, pe0, pe1)                              \
  do {                                                        \
    FV v0 = (FV)(0.0f), v1 = (FV)(0.0f);                      \
    if (has[k]) {                                             \
      load_tablew(trow[k], (c), v0, v1);                      \
      v0 = scale * v0;                                        \
      v1 = scale * v1;                                        \
    }                                                         \
    CE_ADD_POS(k, (c), v0, pe0);                              \
    CE_ADD_POS(k, (c) + VEC, v1, pe1);                        \
    CE_DROP(k, (c), v0);                                      \
    CE_DROP(k, (c) + VEC, v1);                                \
    if (nt2[k]) {                                             \
      stream2_outv(orow[k], (c), v0, v1);                     \
    } else if (nt[k]) { /* a row aligned to one vector only */ \
      stream_outv(orow[k], (c), v0);                          \
      stream_outv(orow[k], (c) + VEC, v1);                    \
    } else {                                                  \
      store_outv(orow[k], (c), v0);                           \
      store_outv(orow[k], (c) + VEC, v1);                     \
    }                                                         \
  } while (0)
#define CE_STEP1(k, c, pe0)                                                \
  do {                                                                     \
    FV v0 = has[k] ? scale * load_tablev(trow[k], (c)) : (FV)(0.0f);       \
    CE_FINISH_VEC(k, (c), v0, pe0);                                        \
  } while (0)
#endif
#if POSITIONS == 1
#define CE_POS0(k, c, v) \
  if (pok[k]) v += ce_sinusoid(pp[k], freq, cols, (c))
#elif POSITIONS == 2
#define CE_POS0(k, c, v) \
  if (pok[k]) v += load_pos(prow[k], (c))
#else
#define CE_POS0(k, c, v)
#endif
#if DROPOUT
#define CE_DROP0(k, c, v) v = ce_mask1(v, e0[k] + (c), dropout, keep_scale, seed_lo, seed_hi)
#else
#define CE_DROP0(k, c, v)
#endif
#define CE_STEP0(k, c)                                             \
  do {                                                             \
    float v = has[k] ? scale * load_table(trow[k], (c)) : 0.0f;    \
    CE_POS0(k, c, v);                                              \
    CE_DROP0(k, c, v);                                             \
    store_out(orow[k], (c), v);                                    \
  } while (0)

/* The row shapes' work: tokens t0, t0 + tstep, ... (ROWS of them, fewer for
 * the last work-item: `live`). With `shared` (the strided shape) every token
 * is at the same position. Without EMBED_STRIDED_AHEAD the rows go side by side, a chunk of
 * columns of each in turn (a CPU's prefetchers get several streams; a shared
 * position's sinusoid is computed once per chunk), and with EMBED_NEXT the next
 * item's rows (from t0 + tnext) are asked for a line or so of each per chunk.
 * With EMBED_STRIDED_AHEAD (short rows, positions shared, where CE_PREFETCH is 1) they go
 * one after another, and while row k is
 * written the table row EMBED_STRIDED_AHEAD rows on (in the order the rows are taken: this
 * item's, then the next items' from t0 + tnext) is asked for, line s at
 * column step s (whole lines a step): requests spread over the work, rather
 * than all queued at once, let the loads of the row being written through. */
inline void ce_embed_row_tokens(CE_EMBED_ARGS, ulong t0, ulong tstep, ulong tnext, int shared) {
  if (t0 >= n) return;
  /* the missing tokens stand in as token n - 1 in the set-up below and are skipped after it */
  int live = (int)min((ulong)ROWS, (n - t0 + tstep - 1) / tstep);
  __global const TABLE_T *trow[ROWS];
  __global OUT_T *orow[ROWS];
  int has[ROWS], nt[ROWS], nt2[ROWS]; /* streaming stores (STREAM, and the row aligned to a vector, to two) */
  int own[ROWS];           /* the token is this launch's (split matrices) */
  ulong e0[ROWS];          /* element index of the row's column 0 (the dropout counter) */
#if POSITIONS != 0
  ulong pp[ROWS]; /* the token's position */
  int pok[ROWS];
#endif
#if POSITIONS == 2
  __global const POS_T *prow[ROWS];
#endif
  /* unrolled: the tokens' rows resolved in straight-line code (docs/performance.md) */
#pragma unroll
  for (int k = 0; k < ROWS; k++) {
    ulong t = t0 + k * tstep, i = min(t, n - 1);
    long row = TOKEN_ROW(i, t < n);
    has[k] = row >= 0;
    trow[k] = TABLE_ROW(row >= 0 ? (ulong)row : CE_LO(table));
    orow[k] = OUT_ROW(i);
    nt[k] = STREAM && CE_STREAMING && ((ulong)orow[k] & (VEC * sizeof(OUT_T) - 1)) == 0;
    nt2[k] = STREAM && CE_STREAMING && ((ulong)orow[k] & (2 * VEC * sizeof(OUT_T) - 1)) == 0;
    e0[k] = i * cols;
#if POSITIONS != 0
    pp[k] = TOKEN_POSITION(i, t < n, &pok[k]);
    own[k] = TOKEN_OWNED(i, row, pp[k], pok[k]);
#else
    own[k] = TOKEN_OWNED(i, row, 0, 0);
#endif
#if POSITIONS == 2
    prow[k] = POS_ROW(pok[k] ? pp[k] : CE_LO(ptab));
#endif
  }
  /* 2 * VEC columns at a time (a block's scales decoded once for both
   * vectors; a 16-bit output's cache line written whole, back to back), then
   * a last VEC, then single columns */
  const ulong cw = cols / (2 * VEC) * (2 * VEC), cv = cols / VEC * VEC;
#if EMBED_STRIDED_AHEAD
  const ulong bytes = (ulong)((__global const uchar *)table_ptr(table, cols) - (__global const uchar *)table);
  const ulong step = ce_prefetch_step(bytes, cols / (2 * VEC));
  for (int k = 0; k < live; k++) {
    if (!OWNED(k)) continue;
    const ulong ta = t0 + (ulong)((k + EMBED_STRIDED_AHEAD) / ROWS) * tnext + (ulong)((k + EMBED_STRIDED_AHEAD) % ROWS) * tstep;
    const long id = ta < n ? PF_ROW(ta) : -1;
    __global const uchar *pf = id >= 0 && (ulong)id < t_rows && CE_OWNS(table, (ulong)id)
                                   ? (__global const uchar *)TABLE_ROW(id)
                                   : 0;
    for (ulong c = 0, line = 0; c < cw; c += 2 * VEC, line += step) {
      if (pf) ce_prefetch_part(pf, line, step, bytes);
#if POSITIONS == 1
      FV pe0 = shared ? ce_sinusoidv(pp[k], freq, cols, c) : (FV)(0.0f);
      FV pe1 = shared ? ce_sinusoidv(pp[k], freq, cols, c + VEC) : (FV)(0.0f);
#endif
      CE_STEP2(k, c, pe0, pe1);
    }
    for (ulong c = cw; c < cv; c += VEC) {
#if POSITIONS == 1
      FV pe0 = shared ? ce_sinusoidv(pp[k], freq, cols, c) : (FV)(0.0f);
#endif
      CE_STEP1(k, c, pe0);
    }
    for (ulong c = cv; c < cols; c++) CE_STEP0(k, c);
  }
#else
#if EMBED_NEXT
  const ulong bytes = (ulong)((__global const uchar *)table_ptr(table, cols) - (__global const uchar *)table);
  const ulong step = ce_prefetch_step(bytes, cols / (2 * VEC));
  __global const uchar *pf[ROWS];
  for (int k = 0; k < ROWS; k++) {
    const ulong ta = t0 + tnext + (ulong)k * tstep;
    const long id = ta < n ? PF_ROW(ta) : -1;
    pf[k] = id >= 0 && (ulong)id < t_rows && CE_OWNS(table, (ulong)id) ? (__global const uchar *)TABLE_ROW(id) : 0;
  }
  for (ulong c = 0, line = 0; c < cw; c += 2 * VEC, line += step) {
#else
  for (ulong c = 0; c < cw; c += 2 * VEC) {
#endif
#if POSITIONS == 1
    FV pe0 = (FV)(0.0f), pe1 = (FV)(0.0f); /* one position for all the item's tokens */
    if (shared) {
      pe0 = ce_sinusoidv(pp[0], freq, cols, c);
      pe1 = ce_sinusoidv(pp[0], freq, cols, c + VEC);
    }
#endif
    for (int k = 0; k < ROWS && k < live; k++) {
#if EMBED_NEXT
      if (pf[k]) ce_prefetch_part(pf[k], line, step, bytes);
#endif
      if (OWNED(k)) CE_STEP2(k, c, pe0, pe1);
    }
  }
  for (ulong c = cw; c < cv; c += VEC) {
#if POSITIONS == 1
    FV pe0 = shared ? ce_sinusoidv(pp[0], freq, cols, c) : (FV)(0.0f);
#endif
    for (int k = 0; k < ROWS && k < live; k++)
      if (OWNED(k)) CE_STEP1(k, c, pe0);
  }
  for (ulong c = cv; c < cols; c++)
    for (int k = 0; k < ROWS && k < live; k++)
      if (OWNED(k)) CE_STEP0(k, c);
#endif
}

__kernel void ce_embed_rows(CE_EMBED_ARGS) {
  ulong g = get_global_id(0);
  ce_embed_row_tokens(CE_EMBED_PASS, g * ROWS, 1, ROWS, 0);
}

/* Several sequences of seq_len, positions shared: item g takes position x of
 * sequences ROWS*q .. ROWS*q + ROWS - 1, q = g / seq_len. */
__kernel void ce_embed_strided(CE_EMBED_ARGS) {
  ulong g = get_global_id(0), q = g / seq_len, x = g - q * seq_len;
  ce_embed_row_tokens(CE_EMBED_PASS, q * ROWS * seq_len + x, seq_len, 1, 1);
}
