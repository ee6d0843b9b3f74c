/* backward.cl: the embedding backward (table and position gradients) and the
 * fused sparse steps. OpenCL C 1.2; cl/lib/ files come first.
 *
 * Deterministic path (sort and segment, as PyTorch's EmbeddingBackwardKernel.cu):
 *   ce_bwd_keys / ce_bwd_pos_keys  key[i] = the row token i adds to (its resolved
 *                                  id, or its position), or `none` (the number of
 *                                  rows, which sorts last) when it adds nothing;
 *                                  idx[i] = i. Bad ids and positions are reported.
 *   (cl/ops/sort.cl)               the stable radix sort of (key, idx), so equal
 *                                  keys keep ascending token order.
 *   ce_bwd_rows / ce_bwd_pos       each segment of equal keys is folded, column
 *                                  by column, in ascending token order in
 *                                  float32 and its row stored once (rows: the
 *                                  table gradient, set or added, or the fused
 *                                  SGD step; pos: position_grad, added).
 *   ce_bwd_optim, ce_bwd_rowwise   the same fold with an optimizer's step
 *                                  (clembed_optimizer_step) and its state rows.
 * The fold is a strict left fold s = ((0 + g0) + g1) + ..., so a long segment
 * (one id repeated 20,000 times) cannot be split and combined without changing
 * the bits; it stays parallel over its columns instead (d is 512..4096 in
 * practice, and a long segment's columns are spread over several work-groups:
 * see CE_SEGMENTS), which is enough to keep the device busy.
 *
 * Atomic path: ce_bwd_atomic adds each token's contribution with a
 * compare-and-swap loop on the 32-bit words of grad_table (order unspecified);
 * ce_bwd_count counts each row's tokens for scale_grad_by_freq.
 *
 * Build options: GRAD_DT, TABLE_DT (dtype codes), DROPOUT (0/1), KEY64 (0: uint
 * keys, 1: ulong keys), VEC (4, 8 or 16), FOLD_TILE and FOLD_GROUP (the tuning
 * table's): a work-item of the grouped shapes folds FOLD_TILE vectors of VEC
 * columns at once over FOLD_GROUP sorted positions (ce_bwd_rowwise_grouped:
 * one vector at a time over VEC positions); BAG (below); STOCH_ROUND (below). */

#ifndef FOLD_TILE
#define FOLD_TILE 1
#endif

/* Split matrices (cl/lib/pieces.cl): the gradient (whole in every launch: a
 * segment's tokens are anywhere in it), and the table (or grad_table), its
 * states and position_grad, whose rows are the keys: a launch folds the
 * segments whose key is in its windows of them. */
/* row `key` of a keyed matrix: its buffer, and the element of its column 0 there */
#define TAB_AT(key) CE_AT(tab, (ulong)(key))
#define TAB_OFF(key) CE_OFF(tab, t_off, t_ld, (ulong)(key))
/* a keyed row asked for ahead (prefetch hints), or 0 when another launch has it */
#define TAB_AHEAD(key) (CE_OWNS(tab, (ulong)(key)) ? TAB_AT(key) + TAB_OFF(key) : 0)
#define GRAD_PARAMS __global const GRAD_T *grad, ulong g_off CE_PIECE_PARAMS(const GRAD_T, grad), ulong g_ld
#define GRAD_PASS grad, g_off CE_PIECE_PASS(grad), g_ld
#define GRAD_ROW(i) (CE_GRAD_AT(i) + CE_GRAD_OFF(i)) /* (below: a token's row, or a bag's) */

#define GRAD_T CE_XCAT(CE_STORE_, GRAD_DT)
#define TABLE_T CE_XCAT(CE_STORE_, TABLE_DT)
#define load_grad CE_XCAT(ce_load_, GRAD_DT)
#define load_table CE_XCAT(ce_load_, TABLE_DT)
#define store_table CE_XCAT(ce_store_, TABLE_DT)

#if KEY64
#define KEY_T ulong
#else
#define KEY_T uint
#endif

#define load_gradv CE_XCAT(ce_loadv_, GRAD_DT)
#define load_tablev CE_XCAT(ce_loadv_, TABLE_DT)
#define store_tablev CE_XCAT(ce_storev_, TABLE_DT)

/* STOCH_ROUND (1: the host's choice for an F16 or BF16 table whose optimizer
 * asks for stochastic rounding; 0: round to nearest even). The steps store a
 * table element through store_table_at / store_tablev_at, which take the
 * step's key k (CE_SR_KEY of the kernel arguments sr_lo, sr_hi, sr_step:
 * the seed and the step), the element's row in the whole table (sr_row0 +
 * the row here) and its column, and round with the random word of cl/lib/philox.cl's
 * ce_sr_word (lane-wise ce_sr_wordv: columns col .. col + VEC - 1) as
 * cl/lib/loadstore.cl's ce_store_sr_* define. */
#ifndef STOCH_ROUND
#define STOCH_ROUND 0
#endif
#if STOCH_ROUND
#define CE_SR_KEY(lo, hi, step) ce_sr_key(lo, hi, step)
#define store_table_at(p, o, v, k, row, col) CE_XCAT(ce_store_sr_, TABLE_DT)(p, o, v, ce_sr_word(k, row, col))
#define store_tablev_at(p, o, v, k, row, col) CE_XCAT(ce_storev_sr_, TABLE_DT)(p, o, v, ce_sr_wordv(k, row, col))
#else
#define CE_SR_KEY(lo, hi, step) ((uint2)(0u, 0u))
#define store_table_at(p, o, v, k, row, col) store_table(p, o, v)
#define store_tablev_at(p, o, v, k, row, col) store_tablev(p, o, v)
#endif
/* the kernel arguments, and the step's key, made once per work-item */
#define CE_SR_KPARAMS , uint sr_lo, uint sr_hi, ulong sr_step, ulong sr_row0
#define CE_SR_BEGIN const uint2 srk = CE_SR_KEY(sr_lo, sr_hi, sr_step);
/* what a store needs of row `key`: its first element (the column of element o
 * is o - TAB_OFF(key)), the key, and its row in the whole table */
#define CE_SR_ARGS(key) TAB_OFF(key), srk, sr_row0 + (ulong)(key)

/* BAG (1: the bag backward, src/ops/bag_train.c): a sorted entry is an id of a bag,
 * not a token. Its record (cb, two ulongs per entry, written by bag.cl's
 * ce_bag_keys) gives the element offset of its gradient row (bag b's row of
 * grad_out, relative to g_off) and, in the top two bits of the second, how
 * the row contributes: as it is, times a weight or divided by the bag's count
 * (the float in the low word; the product or quotient rounded), or (MAX) only
 * in the columns whose max_rows element (mr, from the element in the low 62
 * bits) names the entry's row, and only from the bag's first entry of that
 * row (its previous sorted entry has another gradient row). Other columns add
 * +0.0f, which leaves a fold started at +0.0f as it is. The fold, its order
 * and the store modes are the same. */
#ifndef BAG
#define BAG 0
#endif
#if BAG
#define CE_BAG_KPARAMS , __global const ulong *cb, __global const long *mr
#define CE_BAG_FPARAMS , __global const ulong *cb, __global const long *mr, KEY_T key
#define CE_BAG_FARGS , cb, mr, key
/* sorted entry e's gradient row: its buffer, and the element there (grad_out
 * split, every piece in the launch: the record's b * g_ld + column read as bag
 * row b's piece and its column) */
#if CE_PIECES_grad
#define CE_GRAD_B(e) (cb[2 * (ulong)(e)] / max(g_ld, (ulong)1))
#define CE_GRAD_AT(e) CE_AT(grad, CE_GRAD_B(e))
#define CE_GRAD_OFF(e) (CE_OFF(grad, g_off, g_ld, CE_GRAD_B(e)) + cb[2 * (ulong)(e)] % max(g_ld, (ulong)1))
#else
#define CE_GRAD_AT(e) (grad)
#define CE_GRAD_OFF(e) (g_off + cb[2 * (ulong)(e)])
#endif
/* Entry t's contribution at V columns from c (T = FV, V = VEC; or one column,
 * T = float, V = 1) of the segment that starts at j, g its gradient row there:
 * kind 1 and 2 the row times the weight or divided by the count; kind 3 (MAX)
 * the columns whose max_rows element names the row, from the bag's first entry
 * of that row only (its previous sorted entry has another gradient row). */
#define CE_BAG_CONTRIB_BODY(T, V, LOADV, STOREV)                                   \
  ulong e = sidx[t], aux = cb[2 * e + 1], kind = aux >> 62;                        \
  if (kind == 1) {                                                                 \
    g = as_float((uint)aux) * g;                                                   \
  } else if (kind == 2) {                                                          \
    g = g / as_float((uint)aux);                                                   \
  } else if (kind == 3) {                                                          \
    int first = t == j || cb[2 * (ulong)sidx[t - 1]] != cb[2 * e];                 \
    ulong m = (aux & 0x3FFFFFFFFFFFFFFFUL) + c;                                    \
    float v[V];                                                                    \
    STOREV(g, v);                                                                  \
    for (int k = 0; k < V; k++)                                                    \
      if (!first || mr[m + k] != (long)key) v[k] = 0.0f;                           \
    g = LOADV(v);                                                                  \
  }                                                                                \
  return g;
#define CE_BAG_STOREV(g, v) vstoreV(g, 0, v)
#define CE_BAG_LOADV(v) vloadV(0, v)
#define CE_BAG_STORE1(g, v) (v[0] = g)
#define CE_BAG_LOAD1(v) v[0]
CE_INLINE FV ce_bag_contribv(FV g, __global const ulong *cb, __global const long *mr, KEY_T key,
                             __global const uint *sidx, ulong t, ulong j, ulong c) {
  CE_BAG_CONTRIB_BODY(FV, VEC, CE_BAG_LOADV, CE_BAG_STOREV)
}
inline float ce_bag_contrib1(float g, __global const ulong *cb, __global const long *mr, KEY_T key,
                             __global const uint *sidx, ulong t, ulong j, ulong c) {
  CE_BAG_CONTRIB_BODY(float, 1, CE_BAG_LOAD1, CE_BAG_STORE1)
}
#else
#define CE_BAG_KPARAMS
#define CE_BAG_FPARAMS
#define CE_BAG_FARGS
/* token e's gradient row: its buffer, and the element there */
#define CE_GRAD_AT(e) CE_AT(grad, (ulong)(e))
#define CE_GRAD_OFF(e) CE_OFF(grad, g_off, g_ld, (ulong)(e))
#endif

/* ------------------------------------------------------------------ keys */

/* Token keys: the resolved table row, or `rows` (sorts last) for a token that
 * adds nothing (padding, ZERO, a bad id under CHECK/WRAP, which is reported). */
__kernel void ce_bwd_keys(__global const int *ids32, __global const long *ids64, ulong id_off, int id64, ulong n,
                          ulong rows, int policy, long padding, __global KEY_T *keys, __global uint *idx,
                          __global uint *err, uint slot) {
  ulong i = get_global_id(0);
  if (i >= n) return;
  long r = ce_token_row(ids32, ids64, id64, id_off, i, rows, policy, padding, err, slot, 1);
  keys[i] = r >= 0 ? (KEY_T)r : (KEY_T)rows;
  idx[i] = (uint)i;
}

/* Position keys, as the forward computes positions: token i = b * len + j
 * (len = seq_len, or n for one sequence) is at p = first_b + j; a position
 * outside [0, p_rows) is reported and gets the key p_rows. Work-item (x, b)
 * takes j = x, x + get_global_size(0), ... (no i / len and i % len: LLVM
 * turns a division and remainder of the same operands into `freeze`, which
 * Oclgrind's uninitialised-value checker cannot run). */
__kernel void ce_bwd_pos_keys(ulong n, ulong len, ulong pos_offset, __global const int *so32,
                              __global const long *so64, ulong so_off, int so64f, int has_so, ulong p_rows,
                              __global KEY_T *keys, __global uint *idx, __global uint *err, uint slot) {
  ulong b = get_global_id(1);
  if (b * len >= n) return;
  long first = ce_sequence_first(b, pos_offset, so32, so64, so_off, so64f, has_so);
  for (ulong j = get_global_id(0); j < len && b * len + j < n; j += get_global_size(0)) {
    ulong i = b * len + j, p = (ulong)first + j;
    int ok = first >= 0 && p < p_rows;
    if (!ok) ce_report(err, slot, 1, i, first);
    keys[i] = ok ? (KEY_T)p : (KEY_T)p_rows;
    idx[i] = (uint)i;
  }
}

/* ------------------------------------------------------- segmented fold */

/* A gradient element's steps for a feature (nothing without it): a bag
 * entry's contribution (ce_bag_contrib1 / ce_bag_contribv above) of sorted
 * entry t of the segment that starts at j, at column c, and the forward's
 * dropout of element e; one column or VEC. */
#if BAG
#define BWD_BAG1(g, t, c) g = ce_bag_contrib1(g, cb, mr, key, sidx, (t), j, (c))
#define BWD_BAGV(g, t, c) g = ce_bag_contribv(g, cb, mr, key, sidx, (t), j, (c))
#else
#define BWD_BAG1(g, t, c)
#define BWD_BAGV(g, t, c)
#endif
#if DROPOUT
#define BWD_DROP1(g, e) g = ce_mask1(g, (e), dropout, keep, seed_lo, seed_hi)
#define BWD_DROPV(g, e) g = ce_maskv(g, (e), dropout, keep, seed_lo, seed_hi)
#else
#define BWD_DROP1(g, e)
#define BWD_DROPV(g, e)
#endif

/* The sum, in ascending token order, of the gradient rows of the segment
 * [j, end) of the sorted order, at VEC columns from c (or one column):
 * s = ((0 + g[i_j]) + g[i_j+1]) + ... in float32. */
CE_INLINE FV ce_foldv(GRAD_PARAMS, ulong cols, __global const uint *sidx, ulong j, ulong end CE_BAG_FPARAMS, ulong c,
                      float dropout, uint seed_lo, uint seed_hi, float keep) {
  FV s = (FV)(0.0f);
  for (ulong t = j; t < end; t++) {
    ulong i = sidx[t];
    FV g = load_gradv(CE_GRAD_AT(i), CE_GRAD_OFF(i) + c);
    BWD_BAGV(g, t, c);
    BWD_DROPV(g, i * cols + c);
    s = s + g;
  }
  return s;
}

inline float ce_fold1(GRAD_PARAMS, ulong cols, __global const uint *sidx, ulong j, ulong end CE_BAG_FPARAMS, ulong c,
                      float dropout, uint seed_lo, uint seed_hi, float keep) {
  float s = 0.0f;
  for (ulong t = j; t < end; t++) {
    ulong i = sidx[t];
    float g = load_grad(CE_GRAD_AT(i), CE_GRAD_OFF(i) + c);
    BWD_BAG1(g, t, c);
    BWD_DROP1(g, i * cols + c);
    s = s + g;
  }
  return s;
}

/* FOLD_TILE (CPU) vectors of consecutive columns from c folded at once, so that
 * each gradient row is read FOLD_TILE * VEC columns at a time. Every column is still
 * the same left fold in ascending token order. */
CE_INLINE void ce_fold_tile(FV *acc, GRAD_PARAMS, ulong cols, __global const uint *sidx, ulong j, ulong end
                            CE_BAG_FPARAMS, ulong c, float dropout, uint seed_lo, uint seed_hi, float keep) {
  for (int k = 0; k < FOLD_TILE; k++) acc[k] = (FV)(0.0f);
  for (ulong t = j; t < end; t++) {
    ulong i = sidx[t], base = CE_GRAD_OFF(i) + c;
    __global const GRAD_T *gp = CE_GRAD_AT(i);
    for (int k = 0; k < FOLD_TILE; k++) {
      FV g = load_gradv(gp, base + (ulong)k * VEC);
      BWD_BAGV(g, t, c + (ulong)k * VEC);
      BWD_DROPV(g, i * cols + c + (ulong)k * VEC);
      acc[k] = acc[k] + g;
    }
  }
}

/* The work of the segment kernels. Work-item (x, y), y = block * 2^slice_bits
 * + slice, takes the segments that start at sorted positions slice,
 * slice + 2^slice_bits, ... A segment of at least `split` tokens is split into
 * column blocks of bw columns, which go to different work-groups: the item
 * takes the columns [lo_, hi_) of block `block`; a shorter segment is done
 * whole by the items of block 0 (lo_ = x * VEC, hi_ = cols). On a GPU
 * (FOLD_TILE 1) split is 1 (every segment is split; a block is 256 columns) and the
 * item takes one VEC at lo_, lo_ + get_global_size(0) * VEC, ...: consecutive
 * work-items read consecutive columns of a gradient row. So one id repeated
 * 20,000 times is still summed in parallel over its columns. The number of
 * slices is a power of two (shifts, not / and %: see ce_bwd_pos_keys).
 * CE_SEGMENTS opens the loop over the item's segments, with key, j (start),
 * end, lo_ and hi_ defined; it skips a segment unless OWNED (an expression in
 * key: its rows are in the launch's windows of split matrices). It serves the GPU shapes (FOLD_TILE 1); the CPU shapes
 * (FOLD_TILE > 1, one work-item across) use CE_GROUPS below, where the item reads
 * its columns in order, FOLD_TILE * VEC at a time: whole rows of the short segments
 * (sequential reads) and 256-column blocks of long ones. */
#define CE_SEGMENTS(skeys, n, none, slice_bits, bw, split, cols, OWNED)              \
  ulong y_ = get_global_id(1), nslices_ = (ulong)1 << (slice_bits);                 \
  ulong block_ = y_ >> (slice_bits), x_ = get_global_id(0) * VEC;                   \
  ulong cstep_ = get_global_size(0) * VEC;                                          \
  if (block_ * (bw) >= (cols)) return;                                              \
  for (ulong j = y_ & (nslices_ - 1); j < (n); j += nslices_) {                     \
    KEY_T key = skeys[j];                                                           \
    if (key == (none)) break; /* sorted: the rest are `none` too */                 \
    if (!(OWNED)) continue;   /* another launch's rows */                           \
    if (j > 0 && skeys[j - 1] == key) continue; /* not a segment start */           \
    ulong end = j + 1;                                                              \
    while (end < (n) && skeys[end] == key) end++;                                   \
    ulong lo_ = x_, hi_ = (cols);                                                   \
    if (end - j >= (split)) {                                                       \
      lo_ = block_ * (bw) + x_;                                                     \
      hi_ = min(block_ * (bw) + (bw), (ulong)(cols));                               \
    } else if (block_ != 0) {                                                       \
      continue;                                                                     \
    }
#define CE_SEGMENTS_END }

/* The item's columns of the segment [j, end): STOREV(o, sum of VEC columns,
 * ...) and STORE1(o, sum of one column, ...) with o = base + column. */
#define CE_FOLD_ARGS GRAD_PASS, cols, sidx, j, end CE_BAG_FARGS
#define CE_MASK_ARGS dropout, seed_lo, seed_hi, keep
/* The FOLD_TILE * VEC columns from c of the segment [j, end), folded and stored. */
#define CE_TILE_STORE(STOREV, base, c, ...)                                                 \
  {                                                                                        \
    FV acc[FOLD_TILE];                                                                          \
    ce_fold_tile(acc, CE_FOLD_ARGS, c, CE_MASK_ARGS);                                      \
    for (int k = 0; k < FOLD_TILE; k++) STOREV((base) + (c) + (ulong)k * VEC, acc[k], __VA_ARGS__); \
  }
/* The grouped shapes' columns: in order, FOLD_TILE * VEC at a time. */
#define CE_COLUMNS_TILED(STOREV, STORE1, base, ...)                                           \
  {                                                                                          \
    ulong c = lo_;                                                                           \
    for (; c + FOLD_TILE * VEC <= hi_; c += FOLD_TILE * VEC) CE_TILE_STORE(STOREV, base, c, __VA_ARGS__) \
    for (; c + VEC <= hi_; c += VEC) STOREV((base) + c, ce_foldv(CE_FOLD_ARGS, c, CE_MASK_ARGS), __VA_ARGS__); \
    for (; c < hi_; c++) STORE1((base) + c, ce_fold1(CE_FOLD_ARGS, c, CE_MASK_ARGS), __VA_ARGS__);           \
  }
/* The segment shapes' columns: VEC at lo_, lo_ + cstep_, ... */
#define CE_COLUMNS_STRIDED(STOREV, STORE1, base, ...)                                         \
  for (ulong c = lo_; c < hi_; c += cstep_) {                                                \
    if (c + VEC <= hi_)                                                                      \
      STOREV((base) + c, ce_foldv(CE_FOLD_ARGS, c, CE_MASK_ARGS), __VA_ARGS__);              \
    else                                                                                     \
      for (ulong k = c; k < hi_; k++) STORE1((base) + k, ce_fold1(CE_FOLD_ARGS, k, CE_MASK_ARGS), __VA_ARGS__); \
  }

/* CPU shapes: the segments are taken in groups, so that one work-item reads
 * several gradient rows and table rows at once (a CPU's prefetchers follow
 * several streams; one row at a time leaves the memory system idle between
 * rows), or, where the device takes prefetch hints, one after another with
 * the rows of later positions asked for (CE_COLUMNS_GROUP below). Work-item
 * (0, y), y = block * 2^slice_bits + slice, takes the groups of FOLD_GROUP
 * sorted positions [g, g + FOLD_GROUP), g = FOLD_GROUP * (slice,
 * slice + 2^slice_bits, ...). Of the segments that start there, a long one (at
 * least `split` tokens) is done by every block, bw columns each, as
 * CE_SEGMENTS does; the short ones by block 0, whole rows, side by side.
 * CE_GROUPS opens the loop over groups and the long-segment body (j, end, key,
 * lo_, hi_ and cnt_ = end - j as a float defined); CE_GROUPS_SHORT ends that
 * body and CE_COLUMNS_GROUP folds the group's short segments (m_ of them,
 * starts sj_, ends se_, keys sk_); CE_GROUPS_END closes the loop. */
#ifndef FOLD_GROUP
#define FOLD_GROUP 4 /* the tuning table's fold_group */
#endif
#define CE_GROUPS(skeys, n, none, slice_bits, bw, split, cols, OWNED) \
  CE_GROUPS_OF(FOLD_GROUP, skeys, n, none, slice_bits, bw, split, cols, OWNED)
/* The same with groups of G positions (ce_bwd_rowwise_grouped: VEC). */
#define CE_GROUPS_OF(G, skeys, n, none, slice_bits, bw, split, cols, OWNED)           \
  ulong y_ = get_global_id(1), nslices_ = (ulong)1 << (slice_bits);                 \
  ulong block_ = y_ >> (slice_bits);                                                \
  if (block_ * (bw) >= (cols)) return;                                              \
  for (ulong g_ = (y_ & (nslices_ - 1)) * (G); g_ < (n); g_ += nslices_ * (G)) {    \
    ulong sj_[G], se_[G], gend_ = min(g_ + (G), (ulong)(n));                        \
    KEY_T sk_[G];                                                                   \
    int m_ = 0;                                                                     \
    for (ulong j = g_; j < gend_; j++) {                                            \
      KEY_T key = skeys[j];                                                         \
      if (key == (none)) break; /* sorted: the rest are `none` too */               \
      if (!(OWNED)) continue;   /* another launch's rows */                         \
      if (j > 0 && skeys[j - 1] == key) continue; /* not a segment start */         \
      ulong end = j + 1;                                                            \
      while (end < (n) && skeys[end] == key) end++;                                 \
      if (end - j < (split)) {                                                      \
        if (block_ == 0) {                                                          \
          sj_[m_] = j;                                                              \
          se_[m_] = end;                                                            \
          sk_[m_] = key;                                                            \
          m_++;                                                                     \
        }                                                                           \
        continue;                                                                   \
      }                                                                             \
      ulong lo_ = block_ * (bw), hi_ = min(block_ * (bw) + (bw), (ulong)(cols));    \
      float cnt_ = (float)(end - j);
#define CE_GROUPS_SHORT }
#define CE_GROUPS_END }

#ifndef FOLD_AHEAD
#define FOLD_AHEAD 4 /* the tuning table's fold_ahead */
#endif
#ifndef STEP_AHEAD
#define STEP_AHEAD 1 /* the tuning table's step_ahead */
#endif
/* CE_FOLD_ORDER (the CPU shapes' short segments): 0 side by side; 1 (where
 * the device takes prefetch hints, for short rows: the host's choice from the
 * tuning table's fold_ahead_bytes) one after another with the rows FOLD_AHEAD
 * positions on asked for */
#ifndef CE_FOLD_ORDER
#define CE_FOLD_ORDER 0
#endif
#if CE_FOLD_ORDER == 1
/* With prefetch hints (a CPU under POCL): the segments one after another,
 * whole rows, and while one is folded, the gradient row and the TABP row
 * (TABP + base) of the sorted position FOLD_AHEAD on from its start are asked
 * for, whole lines at each column step, and with them the row's float state
 * rows (the optimizers'). Requests spread over the work let the
 * loads of the rows being folded through; rows side by side without them left
 * the fold waiting on memory. The same folds and stores as the other order:
 * each (row, column) is written once. AHEADP is that row's start, an
 * expression in key (0: none), TABP's elements are its element type; AHEADS1
 * and AHEADS2 the starts of its state rows (cols floats each), or 0. */
#define CE_COLUMNS_GROUP(STOREV, STORE1, TABP, AHEADP, AHEADS1, AHEADS2, base, ...)             \
  {                                                                                              \
    const ulong gb_ = (ulong)(cols) * sizeof(GRAD_T), tb_ = (ulong)(cols) * sizeof(*(TABP));     \
    const ulong sb_ = (ulong)(cols) * sizeof(float);                                             \
    const ulong gs_ = ce_prefetch_step(gb_, (ulong)(cols) / (FOLD_TILE * VEC));                       \
    const ulong ts_ = ce_prefetch_step(tb_, (ulong)(cols) / (FOLD_TILE * VEC));                       \
    const ulong ss_ = ce_prefetch_step(sb_, (ulong)(cols) / (FOLD_TILE * VEC));                       \
    for (int s_ = 0; s_ < m_; s_++) {                                                            \
      ulong j = sj_[s_], end = se_[s_], q_ = j + FOLD_AHEAD;                                       \
      __global const uchar *pg_ = 0, *pt_ = 0, *p1_ = 0, *p2_ = 0;                               \
      if (q_ < (n)) {                                                                            \
        KEY_T key = skeys[q_];                                                                   \
        if (key != none) {                                                                       \
          pg_ = (__global const uchar *)GRAD_ROW(sidx[q_]);                                      \
          pt_ = (__global const uchar *)(AHEADP);                                                \
          p1_ = (__global const uchar *)(AHEADS1);                                               \
          p2_ = (__global const uchar *)(AHEADS2);                                               \
        }                                                                                        \
      }                                                                                          \
      KEY_T key = sk_[s_];                                                                       \
      float cnt_ = (float)(end - j);                                                             \
      ulong c = 0, gl_ = 0, tl_ = 0, sl_ = 0;                                                    \
      for (; c + FOLD_TILE * VEC <= cols; c += FOLD_TILE * VEC, gl_ += gs_, tl_ += ts_, sl_ += ss_) {      \
        if (pg_) {                                                                               \
          ce_prefetch_part(pg_, gl_, gs_, gb_);                                                  \
          if (pt_) ce_prefetch_part(pt_, tl_, ts_, tb_);                                         \
          if (p1_) ce_prefetch_part(p1_, sl_, ss_, sb_);                                         \
          if (p2_) ce_prefetch_part(p2_, sl_, ss_, sb_);                                         \
        }                                                                                        \
        CE_TILE_STORE(STOREV, base, c, __VA_ARGS__)                                              \
      }                                                                                          \
      ulong lo_ = c, hi_ = cols;                                                                 \
      CE_COLUMNS_TILED(STOREV, STORE1, base, __VA_ARGS__)                                        \
    }                                                                                            \
  }
#else
#define CE_COLUMNS_GROUP(STOREV, STORE1, TABP, AHEADP, AHEADS1, AHEADS2, base, ...)               \
  {                                                                                          \
    ulong c = 0;                                                                             \
    for (; c + FOLD_TILE * VEC <= cols; c += FOLD_TILE * VEC) {                                        \
      for (int s_ = 0; s_ < m_; s_++) {                                                      \
        ulong j = sj_[s_], end = se_[s_];                                                    \
        KEY_T key = sk_[s_];                                                                 \
        float cnt_ = (float)(end - j);                                                       \
        CE_TILE_STORE(STOREV, base, c, __VA_ARGS__)                                          \
      }                                                                                      \
    }                                                                                        \
    for (int s_ = 0; s_ < m_; s_++) { /* the columns past the last whole tile */            \
      ulong j = sj_[s_], end = se_[s_], lo_ = c, hi_ = cols;                                 \
      KEY_T key = sk_[s_];                                                                   \
      float cnt_ = (float)(end - j);                                                         \
      CE_COLUMNS_TILED(STOREV, STORE1, base, __VA_ARGS__)                                    \
    }                                                                                        \
  }
#endif

/* The store modes (src/ops/ops.h's ce_store_mode), a kernel argument: one
 * program serves them all. The row gradient r = (scale * S) / count (the
 * division only with freq): OVERWRITE stores r, ACCUMULATE adds r
 * (grad_table, F32), SGD stores w - lr * r rounded to the table's dtype
 * (store_table_at: to nearest even, or stochastically with STOCH_ROUND). */
#ifndef CE_STORE_SGD /* given by the host with every build */
#define CE_STORE_OVERWRITE 0
#define CE_STORE_ACCUMULATE 1
#define CE_STORE_SGD 2
#endif
CE_INLINE void ce_rows_storev(ulong o, FV s, __global TABLE_T *tab, float scale, int freq, float cnt, float lr,
                           int mode, ulong tb, uint2 srk, ulong grow) {
  FV r = scale * s;
  if (freq) r = r / cnt;
  if (mode == CE_STORE_SGD) {
    FV w = load_tablev(tab, o), d = lr * r;
    store_tablev_at(tab, o, w - d, srk, grow, o - tb);
  } else {
    __global float *f = (__global float *)tab; /* grad_table is F32 */
    ce_storev_0(f, o, mode == CE_STORE_ACCUMULATE ? ce_loadv_0(f, o) + r : r);
  }
}

inline void ce_rows_store1(ulong o, float s, __global TABLE_T *tab, float scale, int freq, float cnt, float lr,
                           int mode, ulong tb, uint2 srk, ulong grow) {
  float r = scale * s;
  if (freq) r = r / cnt;
  if (mode == CE_STORE_SGD) {
    float w = load_table(tab, o), d = lr * r;
    store_table_at(tab, o, w - d, srk, grow, o - tb);
  } else {
    __global float *f = (__global float *)tab;
    ce_store_0(f, o, mode == CE_STORE_ACCUMULATE ? ce_load_0(f, o) + r : r);
  }
}

/* Each (row, column) is written by exactly one work-item, in one of two shapes:
 * ce_bwd_rows (segments, consecutive work-items on consecutive columns) and
 * ce_bwd_rows_grouped (groups of segments, whole rows, FOLD_TILE * VEC columns at
 * a time). */
#define CE_ROWS_ARGS                                                                                           \
  GRAD_PARAMS, ulong cols, __global const KEY_T *skeys, __global const uint *sidx, ulong n, KEY_T none,       \
      uint slice_bits, ulong bw, ulong split, float scale, int freq, __global TABLE_T *tab,                    \
      ulong t_off CE_PIECE_PARAMS(TABLE_T, tab), ulong t_ld, float lr, int mode, float dropout, uint seed_lo,  \
      uint seed_hi, float keep CE_SR_KPARAMS CE_BAG_KPARAMS

__kernel void ce_bwd_rows(CE_ROWS_ARGS) {
  CE_SR_BEGIN
  CE_SEGMENTS(skeys, n, none, slice_bits, bw, split, cols, CE_OWNS(tab, (ulong)key))
  float cnt = (float)(end - j);
  CE_COLUMNS_STRIDED(ce_rows_storev, ce_rows_store1, TAB_OFF(key), TAB_AT(key), scale, freq, cnt, lr, mode,
                     CE_SR_ARGS(key))
  CE_SEGMENTS_END
}

__kernel void ce_bwd_rows_grouped(CE_ROWS_ARGS) {
  CE_SR_BEGIN
  CE_GROUPS(skeys, n, none, slice_bits, bw, split, cols, CE_OWNS(tab, (ulong)key))
  CE_COLUMNS_TILED(ce_rows_storev, ce_rows_store1, TAB_OFF(key), TAB_AT(key), scale, freq, cnt_, lr, mode,
                   CE_SR_ARGS(key))
  CE_GROUPS_SHORT
  CE_COLUMNS_GROUP(ce_rows_storev, ce_rows_store1, tab, TAB_AHEAD(key), 0, 0, TAB_OFF(key), TAB_AT(key), scale, freq,
                   cnt_, lr, mode, CE_SR_ARGS(key))
  CE_GROUPS_END
}

/* The optimizer store modes (clembed_optimizer_step; src/ops/optim.c checks
 * the fields): the row gradient g of ce_rows_store* (the same operations),
 * then per element, in the contract's order, weight decay (when wd != 0:
 * g = g + wd * w) and the step:
 *   SGD      w = w - lr * g
 *   ADAGRAD  s = s + g * g; w = w - lr * (g / (sqrt(s) + eps))
 *   ADAM     m = m + (g - m) * b1c; u = u + (g * g - u) * b2c;
 *            w = w - step_size * (m / (sqrt(u) + eps))
 * (ROWWISE_ADAGRAD is ce_bwd_rowwise below). o is the table element; its
 * column o - tb (tb = the row's first element) places it in the state rows
 * s1b and s2b. Each touched element of the table and the states is read once
 * and written once, by one work-item; the table's through store_table_at
 * (row grow of the whole table, column c: its stochastic rounding's word). */
#ifndef CE_STORE_ADAM /* given by the host with every build */
#define CE_STORE_ADAGRAD 3
#define CE_STORE_ADAM 5
#endif
#define CE_OPT_PARAMS                                                                                      \
  __global TABLE_T *tab, float scale, int freq, float cnt, ulong tb, __global float *s1, ulong s1b,        \
      __global float *s2, ulong s2b, float lr, float eps, float wd, float b1c, float b2c, float step_size, \
      int mode, uint2 srk, ulong grow

/* One body for a vector of VEC columns (T = FV) and for one column (T =
 * float): the same operations in the same order, so the same bits. */
#define CE_OPT_STORE_BODY(T, LOAD_TABLE, STORE_TABLE, LOAD_STATE, STORE_STATE) \
  T g = scale * s;                                                             \
  if (freq) g = g / cnt;                                                       \
  T w = LOAD_TABLE(tab, o), d;                                                 \
  if (wd != 0.0f) {                                                            \
    T dec = wd * w;                                                            \
    g = g + dec;                                                               \
  }                                                                            \
  ulong c = o - tb;                                                            \
  if (mode == CE_STORE_ADAGRAD) {                                              \
    T sq = g * g, acc = LOAD_STATE(s1, s1b + c) + sq;                          \
    STORE_STATE(s1, s1b + c, acc);                                             \
    T den = sqrt(acc) + eps, q = g / den;                                      \
    d = lr * q;                                                                \
  } else if (mode == CE_STORE_ADAM) {                                          \
    T m = LOAD_STATE(s1, s1b + c), u = LOAD_STATE(s2, s2b + c);                \
    T dm = g - m, sq = g * g;                                                  \
    dm = dm * b1c;                                                             \
    m = m + dm;                                                                \
    T du = sq - u;                                                             \
    du = du * b2c;                                                             \
    u = u + du;                                                                \
    STORE_STATE(s1, s1b + c, m);                                               \
    STORE_STATE(s2, s2b + c, u);                                               \
    T den = sqrt(u) + eps, q = m / den;                                        \
    d = step_size * q;                                                         \
  } else {                                                                     \
    d = lr * g;                                                                \
  }                                                                            \
  STORE_TABLE(tab, o, w - d, srk, grow, c);

CE_INLINE void ce_opt_storev(ulong o, FV s, CE_OPT_PARAMS) {
  CE_OPT_STORE_BODY(FV, load_tablev, store_tablev_at, ce_loadv_0, ce_storev_0)
}

inline void ce_opt_store1(ulong o, float s, CE_OPT_PARAMS) {
  CE_OPT_STORE_BODY(float, load_table, store_table_at, ce_load_0, ce_store_0)
}

#define CE_OPT_ARGS                                                                                          \
  GRAD_PARAMS, ulong cols, __global const KEY_T *skeys, __global const uint *sidx, ulong n, KEY_T none,       \
      uint slice_bits, ulong bw, ulong split, float scale, int freq, __global TABLE_T *tab,                    \
      ulong t_off CE_PIECE_PARAMS(TABLE_T, tab), ulong t_ld, __global float *s1,                               \
      ulong s1_off CE_PIECE_PARAMS(float, s1), ulong s1_ld, __global float *s2,                                \
      ulong s2_off CE_PIECE_PARAMS(float, s2), ulong s2_ld, float lr, float eps, float wd, float b1c,          \
      float b2c, float step_size, int mode, float dropout, uint seed_lo, uint seed_hi,                         \
      float keep CE_SR_KPARAMS CE_BAG_KPARAMS
#define CE_OPT_STORE_ARGS(cnt)                                                                               \
  TAB_AT(key), scale, freq, cnt, TAB_OFF(key), CE_AT(s1, (ulong)key), CE_OFF(s1, s1_off, s1_ld, (ulong)key), \
      CE_AT(s2, (ulong)key), CE_OFF(s2, s2_off, s2_ld, (ulong)key), lr, eps, wd, b1c, b2c, step_size, mode,   \
      srk, sr_row0 + (ulong)key
#define CE_OPT_OWNED CE_OWNS(tab, (ulong)key) && CE_OWNS(s1, (ulong)key) && CE_OWNS(s2, (ulong)key)
/* a keyed row's state rows asked for ahead (where the mode has them), or 0 */
#define S1_AHEAD(key)                                                                                     \
  ((STEP_AHEAD && (mode == CE_STORE_ADAGRAD || mode == CE_STORE_ADAM) && CE_OWNS(s1, (ulong)(key))) \
       ? CE_AT(s1, (ulong)(key)) + CE_OFF(s1, s1_off, s1_ld, (ulong)(key))                               \
       : 0)
#define S2_AHEAD(key)                                                                \
  ((STEP_AHEAD && mode == CE_STORE_ADAM && CE_OWNS(s2, (ulong)(key)))             \
       ? CE_AT(s2, (ulong)(key)) + CE_OFF(s2, s2_off, s2_ld, (ulong)(key))          \
       : 0)

/* The two shapes of ce_bwd_rows, with the optimizer store modes. */
__kernel void ce_bwd_optim(CE_OPT_ARGS) {
  CE_SR_BEGIN
  CE_SEGMENTS(skeys, n, none, slice_bits, bw, split, cols, CE_OPT_OWNED)
  float cnt = (float)(end - j);
  CE_COLUMNS_STRIDED(ce_opt_storev, ce_opt_store1, TAB_OFF(key), CE_OPT_STORE_ARGS(cnt))
  CE_SEGMENTS_END
}

__kernel void ce_bwd_optim_grouped(CE_OPT_ARGS) {
  CE_SR_BEGIN
  CE_GROUPS(skeys, n, none, slice_bits, bw, split, cols, CE_OPT_OWNED)
  CE_COLUMNS_TILED(ce_opt_storev, ce_opt_store1, TAB_OFF(key), CE_OPT_STORE_ARGS(cnt_))
  CE_GROUPS_SHORT
  CE_COLUMNS_GROUP(ce_opt_storev, ce_opt_store1, tab, TAB_AHEAD(key), S1_AHEAD(key), S2_AHEAD(key), TAB_OFF(key),
                   CE_OPT_STORE_ARGS(cnt_))
  CE_GROUPS_END
}

/* ROWWISE_ADAGRAD, one shape: a work-item per row (slices of sorted positions
 * as CE_SEGMENTS; launched one item across, and a segment is never split over
 * columns), because the row's sum of squares is one left fold over its columns
 * in ascending order. Pass 1 folds the row gradient (with weight decay) and
 * adds g_c * g_c column by column; then m = m + sum / cols and rate = lr /
 * (sqrt(m) + eps); pass 2 folds the gradient again (the same bits) and stores
 * w - rate * g. The gradient rows are read twice, and with weight decay the
 * table row too (from the cache, on a CPU). */
#define CE_RW_PARAMS                                                                                      \
  __global TABLE_T *tab, float scale, int freq, float cnt, float wd, float rate, float *sum, ulong tb, uint2 srk, \
      ulong grow

/* The row gradient of VEC columns at table element o (with weight decay), as
 * both passes compute it; w: the table's values there (read when needed). */
CE_INLINE FV ce_rw_gradv(ulong o, FV s, __global TABLE_T *tab, float scale, int freq, float cnt, float wd, int need_w,
                      FV *w) {
  FV g = scale * s;
  if (freq) g = g / cnt;
  *w = (FV)(0.0f);
  if (wd != 0.0f || need_w) *w = load_tablev(tab, o);
  if (wd != 0.0f) {
    FV dec = wd * *w;
    g = g + dec;
  }
  return g;
}

CE_INLINE void ce_rw_storev(ulong o, FV s, CE_RW_PARAMS) {
  FV w, g = ce_rw_gradv(o, s, tab, scale, freq, cnt, wd, !sum, &w);
  if (sum) { /* pass 1: the squares, added one column after the other */
    float sq[VEC];
    vstoreV(g * g, 0, sq);
    for (int k = 0; k < VEC; k++) *sum = *sum + sq[k];
  } else {
    FV d = rate * g;
    store_tablev_at(tab, o, w - d, srk, grow, o - tb);
  }
}

inline void ce_rw_store1(ulong o, float s, CE_RW_PARAMS) {
  float g = scale * s;
  if (freq) g = g / cnt;
  float w = 0.0f;
  if (wd != 0.0f || !sum) w = load_table(tab, o);
  if (wd != 0.0f) {
    float dec = wd * w;
    g = g + dec;
  }
  if (sum) {
    float sq = g * g;
    *sum = *sum + sq;
  } else {
    float d = rate * g;
    store_table_at(tab, o, w - d, srk, grow, o - tb);
  }
}

/* Every column of the segment, VEC at a time, in order. */
#define CE_COLUMNS_ALL(STOREV, STORE1, base, ...)                                             \
  for (ulong c = 0; c < cols; c += VEC) {                                                    \
    if (c + VEC <= cols)                                                                     \
      STOREV((base) + c, ce_foldv(CE_FOLD_ARGS, c, CE_MASK_ARGS), __VA_ARGS__);              \
    else                                                                                     \
      for (ulong k = c; k < cols; k++) STORE1((base) + k, ce_fold1(CE_FOLD_ARGS, k, CE_MASK_ARGS), __VA_ARGS__); \
  }

#define CE_RW_ARGS                                                                                           \
  GRAD_PARAMS, ulong cols, __global const KEY_T *skeys, __global const uint *sidx, ulong n, KEY_T none,       \
      uint slice_bits, float scale, int freq, __global TABLE_T *tab, ulong t_off CE_PIECE_PARAMS(TABLE_T, tab), \
      ulong t_ld, __global float *s1, ulong s1_off CE_PIECE_PARAMS(float, s1), ulong s1_ld, float lr,         \
      float eps, float wd, float dropout, uint seed_lo, uint seed_hi, float keep CE_SR_KPARAMS CE_BAG_KPARAMS
#define CE_RW_OWNED CE_OWNS(tab, (ulong)key) && CE_OWNS(s1, (ulong)key)
/* row `key`'s state (rows x 1) */
#define S1_AT(key) (CE_AT(s1, (ulong)(key)) + CE_OFF(s1, s1_off, s1_ld, (ulong)(key)))

__kernel void ce_bwd_rowwise(CE_RW_ARGS) {
  if (get_global_id(0) != 0) return; /* one item across: columns VEC at a time, in order */
  CE_SR_BEGIN
  CE_SEGMENTS(skeys, n, none, slice_bits, cols, n + 1, cols, CE_RW_OWNED)
  float cnt = (float)(end - j), sum = 0.0f;
  ulong tb = TAB_OFF(key);
  __global TABLE_T *tp = TAB_AT(key);
  __global float *sm = S1_AT(key);
  CE_COLUMNS_ALL(ce_rw_storev, ce_rw_store1, tb, tp, scale, freq, cnt, wd, 0.0f, &sum, CE_SR_ARGS(key))
  float mean = sum / (float)cols, m = *sm + mean;
  *sm = m;
  float den = sqrt(m) + eps, rate = lr / den;
  CE_COLUMNS_ALL(ce_rw_storev, ce_rw_store1, tb, tp, scale, freq, cnt, wd, rate, (float *)0, CE_SR_ARGS(key))
  CE_SEGMENTS_END
}

/* The transpose of a VEC x VEC matrix held as VEC row vectors: in stages of
 * block size b = VEC/2, ..., 1, rows i and i + b ((i & b) == 0) swap their
 * off-diagonal b x b blocks, two shuffles each: lane c of row i takes
 * CE_LO_b[c] and of row i + b CE_HI_b[c] (an index < VEC picks row i's lane,
 * VEC + k row i + b's lane k). Clang's __builtin_shufflevector gives the
 * compiler the constant masks (POCL's shuffle2 went lane by lane through
 * memory); other compilers get shuffle2. */
#if VEC == 4
#define CE_LO_2 0, 1, 4, 5
#define CE_HI_2 2, 3, 6, 7
#define CE_LO_1 0, 4, 2, 6
#define CE_HI_1 1, 5, 3, 7
#elif VEC == 8
#define CE_LO_4 0, 1, 2, 3, 8, 9, 10, 11
#define CE_HI_4 4, 5, 6, 7, 12, 13, 14, 15
#define CE_LO_2 0, 1, 8, 9, 4, 5, 12, 13
#define CE_HI_2 2, 3, 10, 11, 6, 7, 14, 15
#define CE_LO_1 0, 8, 2, 10, 4, 12, 6, 14
#define CE_HI_1 1, 9, 3, 11, 5, 13, 7, 15
#elif VEC == 16
#define CE_LO_8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define CE_HI_8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define CE_LO_4 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define CE_HI_4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define CE_LO_2 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define CE_HI_2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define CE_LO_1 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define CE_HI_1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
#endif
#if defined(__clang__)
#define CE_SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define CE_SHUFFLE(a, b, ...) shuffle2(a, b, (UV)(__VA_ARGS__))
#endif
#define CE_SWAP_BLOCKS(q, B)                                           \
  _Pragma("unroll") for (int i_ = 0; i_ < VEC; i_++)                   \
    if ((i_ & (B)) == 0) {                                             \
      FV a_ = q[i_], b_ = q[i_ + (B)];                                 \
      q[i_] = CE_SHUFFLE(a_, b_, CE_LO_##B);                           \
      q[i_ + (B)] = CE_SHUFFLE(a_, b_, CE_HI_##B);                     \
    }
CE_INLINE void ce_transpose(FV *q) {
#if VEC == 16
  CE_SWAP_BLOCKS(q, 8)
#endif
#if VEC >= 8
  CE_SWAP_BLOCKS(q, 4)
#endif
  CE_SWAP_BLOCKS(q, 2)
  CE_SWAP_BLOCKS(q, 1)
}

/* ROWWISE_ADAGRAD, the CPU shape: a work-item takes groups of VEC sorted
 * positions (CE_GROUPS_OF; a segment is never split) and does the rows of the
 * segments that start there together, lane s of a vector for row s: pass 1
 * squares VEC columns of each row, transposes the VEC x VEC squares so that
 * vector k holds column c + k of every row, and adds the VEC vectors in column
 * order. Each lane is still its row's left fold over the columns in ascending
 * order, with the same bits as ce_bwd_rowwise's, but VEC rows advance with
 * each add (one row's chain is a float add's latency per column). With
 * prefetch hints (STEP_AHEAD 1), pass 1 also asks for the rows' table lines
 * and states, which pass 2 then steps VEC columns at a time, row by row. */
__kernel void ce_bwd_rowwise_grouped(CE_RW_ARGS) {
  CE_SR_BEGIN
  CE_GROUPS_OF(VEC, skeys, n, none, slice_bits, cols, n + 1, cols, CE_RW_OWNED)
  CE_GROUPS_SHORT
  if (m_ == 0) continue; /* no row starts here (inside a long segment) */
  float sum[VEC], rate[VEC];
  FV acc = (FV)(0.0f);
  ulong c = 0;
  for (; c + VEC <= cols; c += VEC) { /* pass 1: VEC columns of every row */
    FV q[VEC];
#pragma unroll
    for (int s_ = 0; s_ < VEC; s_++) {
      q[s_] = (FV)(0.0f); /* the rows past m_ add zeros */
      if (s_ < m_) {
        ulong j = sj_[s_], end = se_[s_];
        KEY_T key = sk_[s_];
        (void)key;
        FV w, g = ce_rw_gradv(TAB_OFF(sk_[s_]) + c, ce_foldv(CE_FOLD_ARGS, c, CE_MASK_ARGS), TAB_AT(sk_[s_]),
                              scale, freq, (float)(end - j), wd, 0, &w);
        q[s_] = g * g;
        if (STEP_AHEAD) { /* the table row's line (and first its state) asked for: pass 2 steps them */
          ce_prefetch(TAB_AT(sk_[s_]) + TAB_OFF(sk_[s_]) + c);
          if (c == 0) ce_prefetch(S1_AT(sk_[s_]));
        }
      }
    }
    ce_transpose(q);
#pragma unroll
    for (int k = 0; k < VEC; k++) acc = acc + q[k];
  }
  vstoreV(acc, 0, sum);
  for (int s_ = 0; s_ < m_; s_++) {
    ulong j = sj_[s_], end = se_[s_], tb = TAB_OFF(sk_[s_]);
    KEY_T key = sk_[s_];
    (void)key;
    __global float *sm = S1_AT(sk_[s_]);
    for (ulong k = c; k < cols; k++) /* the columns past the last whole vector */
      ce_rw_store1(tb + k, ce_fold1(CE_FOLD_ARGS, k, CE_MASK_ARGS), TAB_AT(sk_[s_]), scale, freq, (float)(end - j),
                   wd, 0.0f, &sum[s_], CE_SR_ARGS(sk_[s_]));
    float mean = sum[s_] / (float)cols, m = *sm + mean;
    *sm = m;
    float den = sqrt(m) + eps;
    rate[s_] = lr / den;
  }
/* pass 2's step for VEC columns from c of row s_ (j, end: its segment) */
#define CE_RW_STEP(c)                                                                                         \
  ce_rw_storev(TAB_OFF(sk_[s_]) + (c), ce_foldv(CE_FOLD_ARGS, (c), CE_MASK_ARGS), TAB_AT(sk_[s_]), scale, freq, \
               (float)(end - j), wd, rate[s_], (float *)0, CE_SR_ARGS(sk_[s_]))
  for (c = 0; c + VEC <= cols; c += VEC) /* pass 2: the step */ {
    for (int s_ = 0; s_ < m_; s_++) {
      ulong j = sj_[s_], end = se_[s_];
      KEY_T key = sk_[s_];
      (void)key;
      CE_RW_STEP(c);
    }
  }
  for (int s_ = 0; s_ < m_; s_++) {
    ulong j = sj_[s_], end = se_[s_], tb = TAB_OFF(sk_[s_]);
    KEY_T key = sk_[s_];
    (void)key;
    for (ulong k = c; k < cols; k++)
      ce_rw_store1(tb + k, ce_fold1(CE_FOLD_ARGS, k, CE_MASK_ARGS), TAB_AT(sk_[s_]), scale, freq, (float)(end - j),
                   wd, rate[s_], (float *)0, CE_SR_ARGS(sk_[s_]));
  }
  CE_GROUPS_END
}

/* position_grad[p] += S (F32): the positional part of the forward is not scaled. */
CE_INLINE void ce_pos_storev(ulong o, FV s, __global float *pg) { ce_storev_0(pg, o, ce_loadv_0(pg, o) + s); }
inline void ce_pos_store1(ulong o, float s, __global float *pg) { ce_store_0(pg, o, ce_load_0(pg, o) + s); }

#define CE_POS_ARGS                                                                                       \
  GRAD_PARAMS, ulong cols, __global const KEY_T *skeys, __global const uint *sidx, ulong n, KEY_T none,   \
      uint slice_bits, ulong bw, ulong split, __global float *pg, ulong p_off CE_PIECE_PARAMS(float, pg),  \
      ulong p_ld, float dropout, uint seed_lo, uint seed_hi, float keep CE_BAG_KPARAMS
#define PG_AT(key) CE_AT(pg, (ulong)(key))
#define PG_OFF(key) CE_OFF(pg, p_off, p_ld, (ulong)(key))

__kernel void ce_bwd_pos(CE_POS_ARGS) {
  CE_SEGMENTS(skeys, n, none, slice_bits, bw, split, cols, CE_OWNS(pg, (ulong)key))
  CE_COLUMNS_STRIDED(ce_pos_storev, ce_pos_store1, PG_OFF(key), PG_AT(key))
  CE_SEGMENTS_END
}

__kernel void ce_bwd_pos_grouped(CE_POS_ARGS) {
  CE_GROUPS(skeys, n, none, slice_bits, bw, split, cols, CE_OWNS(pg, (ulong)key))
  CE_COLUMNS_TILED(ce_pos_storev, ce_pos_store1, PG_OFF(key), PG_AT(key))
  CE_GROUPS_SHORT
  CE_COLUMNS_GROUP(ce_pos_storev, ce_pos_store1, pg, CE_OWNS(pg, (ulong)key) ? PG_AT(key) + PG_OFF(key) : 0, 0, 0,
                   PG_OFF(key), PG_AT(key))
  CE_GROUPS_END
}

/* ------------------------------------------------------------- helpers */

/* m[r][c] = 0 for a rows x cols F32 matrix; work-item (x, r) takes the
 * columns x, x + get_global_size(0), ... (a fixed-width range, so the
 * work-group shape does not depend on cols). */
__kernel void ce_bwd_zero(__global float *m, ulong off, ulong ld, ulong rows, ulong cols) {
  ulong r = get_global_id(1);
  if (r >= rows) return;
  for (ulong c = get_global_id(0); c < cols; c += get_global_size(0)) m[off + r * ld + c] = 0.0f;
}

/* ------------------------------------------------------------ atomic path */

/* *p += v with a compare-and-swap loop on the float's 32-bit word. It starts
 * from a guess of +0.0 rather than a plain read, so every access is atomic. */
inline void ce_atomic_add_f32(__global float *p, float v) {
  volatile __global uint *u = (volatile __global uint *)p;
  uint expected = 0u;
  for (;;) {
    uint seen = atomic_cmpxchg(u, expected, as_uint(as_float(expected) + v));
    if (seen == expected) break;
    expected = seen;
  }
}

/* counts[row] = tokens that add to row (for scale_grad_by_freq). */
__kernel void ce_bwd_count(__global const int *ids32, __global const long *ids64, ulong id_off, int id64, ulong n,
                           ulong rows, int policy, long padding, __global uint *counts) {
  ulong i = get_global_id(0);
  if (i >= n) return;
  long r = ce_token_row(ids32, ids64, id64, id_off, i, rows, policy, padding, (__global uint *)0, 0, 0);
  if (r >= 0) atomic_inc(&counts[r]);
}

/* grad_table[row][c] += (scale * g) / count for every gradient element;
 * work-item (x, i) takes token i's columns x, x + get_global_size(0), ... */
__kernel void ce_bwd_atomic(GRAD_PARAMS, ulong cols, __global const int *ids32, __global const long *ids64,
                            ulong id_off, int id64, ulong n, ulong rows, int policy, long padding, float scale,
                            int freq, __global const uint *counts, __global float *gt,
                            ulong t_off CE_PIECE_PARAMS(float, gt), ulong t_ld, float dropout, uint seed_lo,
                            uint seed_hi, float keep, __global uint *err, uint slot) {
  ulong i = get_global_id(1);
  if (i >= n) return;
  long r = ce_token_row(ids32, ids64, id64, id_off, i, rows, policy, padding, err, slot, get_global_id(0) == 0);
  if (r < 0) return;
  if (!CE_OWNS(gt, (ulong)r)) return; /* another window's row */
  __global float *gr = CE_AT(gt, (ulong)r) + CE_OFF(gt, t_off, t_ld, (ulong)r);
  for (ulong c = get_global_id(0); c < cols; c += get_global_size(0)) {
    float g = load_grad(CE_AT(grad, i), CE_OFF(grad, g_off, g_ld, i) + c);
    BWD_DROP1(g, i * cols + c);
    float v = scale * g;
    if (freq) v = v / (float)counts[r];
    ce_atomic_add_f32(gr + c, v);
  }
}
