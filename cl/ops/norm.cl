/* norm.cl: the input layer of BERT-style models, one kernel per shape
 * (src/ops/norm.c; the operations and their order are include/clembed.h's,
 * "The input layer of BERT-style models"):
 *   x = (scale * table[row(i)] + P[p(i)]) + segment_table[s(i)],
 *   y = LayerNorm or RMSNorm of x (or x), out = dropout(y),
 * and the rows of its backward, dx (and g * xh for the norm's weight).
 *   ce_norm_keys      a work-item per token: resolves its id, position and
 *                     segment id exactly as the forward does (reporting the bad
 *                     ones into the call's slots: ids and positions `slot`,
 *                     segment ids `sslot`) and writes, when asked, its position
 *                     and its segment (-1: none) for the backward's folds;
 *   ce_norm           GPU shape: work-group (LX, LY), LX <= 32 work-items
 *                     across a token's row (LY tokens per group); work-item k
 *                     keeps the row sum's partial sums q_k, q_(k+LX), ...
 *                     (cl/lib/rowsum.cl), which meet in local memory;
 *   ce_norm_rows      CPU shape: a work-item per ROWS tokens, each row whole,
 *                     VEC columns at a time, the 32 partial sums in 32 / VEC
 *                     vectors; the tokens in groups of SIDE whose first pass
 *                     reads their rows side by side into a private scratch
 *                     (the later passes take each row from there); where
 *                     CE_PREFETCH is 1 (NORM_NEXT) the next group's table rows are
 *                     asked for during that pass ("CPU row groups" below);
 *                     ce_norm_rows_side where a norm's rows are in the
 *                     scratch: the group's output side by side too;
 *   ce_norm_bwd, ce_norm_bwd_rows   the backward's rows in the same two shapes;
 *   ce_norm_params, ce_norm_params_block   the norm weight's and bias's
 *                     gradients, a column or a block of columns per work-item.
 * The GPU shape's passes over a row, and the CPU shapes' for a row wider
 * than the scratch (SCRATCH 0), recompute x from the tables (from the cache:
 * the row was just read) rather than keep it, so a row of any width takes no
 * memory; every shape does the same float operations in the same order and
 * so gives the same bits.
 * Build options: TABLE_DT, OUT_DT, POSITIONS (0 none, 1 sinusoid, 2 table),
 * POS_DT, SEGMENTS (0/1), SEG_DT, NORM (0 none, 1 layer, 2 rms), HAS_W, HAS_B
 * (the norm's weight and bias, 0/1), DROPOUT, VEC;
 * the CPU shapes ROWS, SIDE, SCRATCH, STREAM and NORM_NEXT; the backward GRAD_DT,
 * DX (0/1: write dx), STATS (0/1: write each row's mean, rstd, A and B
 * for ce_norm_params), POSG (0/1: the CPU shape's strided items sum their
 * position's gradient themselves, below) and NORM_SUMS (0/1: ce_norm_params may sum
 * a few segment rows' gradient). */

#ifndef ROWS
#define ROWS 1
#endif
#ifndef STREAM
#define STREAM 0
#endif
#ifndef NORM_NEXT
#define NORM_NEXT 0
#endif
#ifndef DX
#define DX 1
#endif
#ifndef STATS
#define STATS 0
#endif
#ifndef POSG
#define POSG 0
#endif
#ifndef GRAD_DT
#define GRAD_DT 0
#endif
#ifndef HAS_W
#define HAS_W 0
#endif
#ifndef HAS_B
#define HAS_B 0
#endif

#define TABLE_T CE_XCAT(CE_STORE_, TABLE_DT)
#define OUT_T CE_XCAT(CE_STORE_, OUT_DT)
#define GRAD_T CE_XCAT(CE_STORE_, GRAD_DT)
#define load_table CE_XCAT(ce_load_, TABLE_DT)
#define load_tablev CE_XCAT(ce_loadv_, TABLE_DT)
#define table_ptr CE_XCAT(ce_ptr_, TABLE_DT)
#define store_out CE_XCAT(ce_store_, OUT_DT)
#define store_outv CE_XCAT(ce_storev_, OUT_DT)
#define stream_outv CE_XCAT(ce_streamv_, OUT_DT)
#define load_grad CE_XCAT(ce_load_, GRAD_DT)
#define load_gradv CE_XCAT(ce_loadv_, GRAD_DT)
#if POSITIONS == 2
#define POS_T CE_XCAT(CE_STORE_, POS_DT)
#define load_pos CE_XCAT(ce_load_, POS_DT)
#define load_posv CE_XCAT(ce_loadv_, POS_DT)
#define pos_ptr CE_XCAT(ce_ptr_, POS_DT)
#else
#define POS_T float
#endif
#if SEGMENTS
#define SEG_T CE_XCAT(CE_STORE_, SEG_DT)
#define load_seg CE_XCAT(ce_load_, SEG_DT)
#define load_segv CE_XCAT(ce_loadv_, SEG_DT)
#else
#define SEG_T float
#endif
#define CE_NP (CE_ROWSUM_PARTS / VEC) /* the CPU shapes' vectors of partial sums */

/* The table, the position and segment tables, the output and the backward's
 * gradient may be split matrices (cl/lib/pieces.cl), each with all its pieces
 * in the one launch (the host marks them whole: a work-group's items share a
 * token's row, so no launch leaves rows to another; one in more pieces than
 * that is brought into one buffer first, src/ops/norm.c's fit_pieces: the
 * table's rows then come gathered, through ids under `policy` ZERO, while the
 * segment ids keep the call's, `seg_policy`). */
#if TABLE_DT <= 2 /* elements, not blocks: a row's piece without a branch (CE_ROWP) */
#define TABLE_ROW(r) CE_ROWP(const TABLE_T, table, t_off, t_ld, (ulong)(r))
#else
#define TABLE_ROW(r) table_ptr(CE_AT(table, (ulong)(r)), CE_OFF(table, t_off, t_ld, (ulong)(r)))
#endif
#define OUT_ROW(i) CE_ROWP(OUT_T, out, o_off, o_ld, (ulong)(i))
#define GRAD_ROW(i) (CE_AT(grad, (ulong)(i)) + CE_OFF(grad, g_off, g_ld, (ulong)(i)))

/* What every kernel takes: the forward's inputs and options. */
#define CE_NORM_IN_ARGS                                                                                        \
  __global const TABLE_T *table, ulong t_off CE_PIECE_PARAMS(const TABLE_T, table), ulong t_ld, ulong t_rows, \
      __global const int *ids32, __global const long *ids64, ulong id_off, int id64, ulong n, ulong cols,     \
      float scale, int policy, int seg_policy, long padding, __global const float *freq,                       \
      __global const POS_T *ptab,                                                                            \
      ulong p_off CE_PIECE_PARAMS(const POS_T, ptab), ulong p_ld, ulong p_rows, ulong seq_len,                \
      ulong pos_offset, __global const int *so32, __global const long *so64, ulong so_off, int so64f,         \
      int has_so, __global const SEG_T *stab, ulong s_off CE_PIECE_PARAMS(const SEG_T, stab), ulong s_ld,     \
      ulong s_rows,                                                                                          \
      __global const int *sid32, __global const long *sid64, ulong sid_off, int sid64f, int has_sid,          \
      __global const float *nw, ulong nw_off, __global const float *nb, ulong nb_off,                       \
      float eps, float inv_d, float dropout, uint seed_lo, uint seed_hi, float keep_scale, __global uint *err, \
      uint slot, uint sslot

/* Token i's parts, as the forward resolves them (bad ones reported when
 * `report`): has/trow (its table row), pok/pp/prow (its position), sok/srow
 * (its segment row). */
#if POSITIONS != 0
#define CE_NORM_POSITION(i, report) \
  int pok;                          \
  ulong pp = ce_token_position((i), seq_len, pos_offset, so32, so64, so_off, so64f, has_so, POSITIONS == 2, p_rows, \
                               err, slot, (report), &pok);
#else
#define CE_NORM_POSITION(i, report)
#endif
#if POSITIONS == 2
#define CE_NORM_POS_ROW \
  __global const POS_T *prow = pos_ptr(CE_AT(ptab, pok ? pp : 0UL), CE_OFF(ptab, p_off, p_ld, pok ? pp : 0UL));
#else
#define CE_NORM_POS_ROW
#endif
#if SEGMENTS
/* the segment row (-1: none), reported into sslot; row 0 without segment ids */
#define CE_NORM_SEGMENT(i, report)                                                                             \
  long sr_ = has_sid ? ce_token_row(sid32, sid64, sid64f, sid_off, (i), s_rows, seg_policy, -1, err, sslot, (report)) \
                     : 0;                                                                                      \
  int sok = sr_ >= 0;                                                                                          \
  __global const SEG_T *srow = CE_AT(stab, (ulong)(sok ? sr_ : 0)) + CE_OFF(stab, s_off, s_ld, (ulong)(sok ? sr_ : 0));
#else
#define CE_NORM_SEGMENT(i, report)
#endif
#define CE_NORM_TOKEN(i, report)                                                                 \
  long row_ = ce_token_row(ids32, ids64, id64, id_off, (i), t_rows, policy, padding, err, slot, (report)); \
  int has = row_ >= 0;                                                                           \
  __global const TABLE_T *trow = TABLE_ROW(has ? row_ : 0);                                      \
  CE_NORM_POSITION(i, report)                                                                    \
  CE_NORM_POS_ROW                                                                                \
  CE_NORM_SEGMENT(i, report)

/* x at column c (one column, or VEC from c): (scale * w + p) + s. */
#if POSITIONS == 1
#define CE_POS1(c, x) \
  if (pok) x += ce_sinusoid(pp, freq, cols, (c))
#define CE_POSV(c, x) \
  if (pok) x += ce_sinusoidv(pp, freq, cols, (c))
#elif POSITIONS == 2
#define CE_POS1(c, x) \
  if (pok) x += load_pos(prow, (c))
#define CE_POSV(c, x) \
  if (pok) x += load_posv(prow, (c))
#else
#define CE_POS1(c, x)
#define CE_POSV(c, x)
#endif
#if SEGMENTS
#define CE_SEG1(c, x) \
  if (sok) x += load_seg(srow, (c))
#define CE_SEGV(c, x) \
  if (sok) x += load_segv(srow, (c))
#else
#define CE_SEG1(c, x)
#define CE_SEGV(c, x)
#endif
#define CE_X1(c, x)                                          \
  do {                                                       \
    x = has ? scale * load_table(trow, (c)) : 0.0f;          \
    CE_POS1(c, x);                                           \
    CE_SEG1(c, x);                                           \
  } while (0)
#define CE_XV(c, x)                                          \
  do {                                                       \
    x = has ? scale * load_tablev(trow, (c)) : (FV)(0.0f);   \
    CE_POSV(c, x);                                           \
    CE_SEGV(c, x);                                           \
  } while (0)
/* The same for a `full` row (its token, position and segment rows all there):
 * no test per vector (the CPU shapes' loops run it when they can). */
#if POSITIONS == 1
#define CE_POSVF(c, x) x += ce_sinusoidv(pp, freq, cols, (c))
#elif POSITIONS == 2
#define CE_POSVF(c, x) x += load_posv(prow, (c))
#else
#define CE_POSVF(c, x)
#endif
#if SEGMENTS
#define CE_SEGVF(c, x) x += load_segv(srow, (c))
#else
#define CE_SEGVF(c, x)
#endif
#define CE_XVF(c, x)                          \
  do {                                        \
    x = scale * load_tablev(trow, (c));       \
    CE_POSVF(c, x);                           \
    CE_SEGVF(c, x);                           \
  } while (0)
#if POSITIONS != 0 && SEGMENTS
#define CE_FULL (has && pok && sok)
#elif POSITIONS != 0
#define CE_FULL (has && pok)
#elif SEGMENTS
#define CE_FULL (has && sok)
#else
#define CE_FULL has
#endif

/* xh (the normalised x, before the weight) from x: LAYER (x - mean) * rstd, RMS x * rstd. */
#if NORM == 1
#define CE_XH(x) (((x) - mean) * rstd)
#else
#define CE_XH(x) ((x) * rstd)
#endif
/* y from x at column c (one column, or VEC). */
#if NORM == 0
#define CE_Y1(c, x) (x)
#define CE_YV(c, x) (x)
#else
CE_INLINE float ce_norm_y1(float xh, ulong c, __global const float *nw, ulong nw_off, __global const float *nb,
                           ulong nb_off) {
  float y = xh;
#if HAS_W
  y = y * nw[nw_off + c];
#endif
#if HAS_B
  y = y + nb[nb_off + c];
#endif
  return y;
}
#define CE_Y1(c, x) ce_norm_y1(CE_XH(x), (c), nw, nw_off, nb, nb_off)
#ifdef VEC
CE_INLINE FV ce_norm_yv(FV xh, ulong c, __global const float *nw, ulong nw_off, __global const float *nb,
                        ulong nb_off) {
  FV y = xh;
#if HAS_W
  y = y * vloadV(0, nw + nw_off + c);
#endif
#if HAS_B
  y = y + vloadV(0, nb + nb_off + c);
#endif
  return y;
}
#define CE_YV(c, x) ce_norm_yv(CE_XH(x), (c), nw, nw_off, nb, nb_off)
#endif
#endif

/* ------------------------------------------------------------- row sums */

/* CPU shapes: result = the row sum (rowsum.cl's order) of the values T that
 * STEPV(c, T) makes for VEC columns from c and STEP1(c, T) for one column. */
#define CE_ROWSUMV(result, STEPV, STEP1)                                             \
  {                                                                                  \
    FV a_[CE_NP];                                                                    \
    for (int m_ = 0; m_ < CE_NP; m_++) a_[m_] = (FV)(0.0f);                          \
    ulong c0_ = 0;                                                                   \
    for (; c0_ + CE_ROWSUM_PARTS <= cols; c0_ += CE_ROWSUM_PARTS) {                  \
      _Pragma("unroll") for (int m_ = 0; m_ < CE_NP; m_++) {                        \
        FV t_;                                                                       \
        STEPV(c0_ + (ulong)m_ * VEC, t_);                                            \
        a_[m_] = a_[m_] + t_;                                                        \
      }                                                                              \
    }                                                                                \
    float q_[CE_ROWSUM_PARTS];                                                       \
    for (int m_ = 0; m_ < CE_NP; m_++) vstoreV(a_[m_], 0, q_ + m_ * VEC);            \
    for (ulong c_ = c0_; c_ < cols; c_++) {                                          \
      float t1_;                                                                     \
      STEP1(c_, t1_);                                                                \
      q_[c_ - c0_] = q_[c_ - c0_] + t1_;                                             \
    }                                                                                \
    result = ce_rowsum_fold(q_);                                                     \
  }
/* Two row sums over the same columns at once (STEPV2(c, T, U)). */
#define CE_ROWSUM2V(ra, rb, STEPV2, STEP12)                                          \
  {                                                                                  \
    FV a_[CE_NP], b_[CE_NP];                                                         \
    for (int m_ = 0; m_ < CE_NP; m_++) a_[m_] = b_[m_] = (FV)(0.0f);                 \
    ulong c0_ = 0;                                                                   \
    for (; c0_ + CE_ROWSUM_PARTS <= cols; c0_ += CE_ROWSUM_PARTS) {                  \
      _Pragma("unroll") for (int m_ = 0; m_ < CE_NP; m_++) {                        \
        FV t_, u_;                                                                   \
        STEPV2(c0_ + (ulong)m_ * VEC, t_, u_);                                       \
        a_[m_] = a_[m_] + t_;                                                        \
        b_[m_] = b_[m_] + u_;                                                        \
      }                                                                              \
    }                                                                                \
    float q_[CE_ROWSUM_PARTS], r_[CE_ROWSUM_PARTS];                                  \
    for (int m_ = 0; m_ < CE_NP; m_++) {                                             \
      vstoreV(a_[m_], 0, q_ + m_ * VEC);                                             \
      vstoreV(b_[m_], 0, r_ + m_ * VEC);                                             \
    }                                                                                \
    for (ulong c_ = c0_; c_ < cols; c_++) {                                          \
      float t1_, u1_;                                                                \
      STEP12(c_, t1_, u1_);                                                          \
      q_[c_ - c0_] = q_[c_ - c0_] + t1_;                                             \
      r_[c_ - c0_] = r_[c_ - c0_] + u1_;                                             \
    }                                                                                \
    ra = ce_rowsum_fold(q_);                                                         \
    rb = ce_rowsum_fold(r_);                                                         \
  }

/* GPU shape: work-item lx of LX across the row keeps the partial sums
 * q_lx, q_(lx+LX), ...; they meet in `part` (32 floats, this row's). Every
 * work-item of the group passes both barriers. */
#define CE_ROWSUM_G(result, STEP1)                                                   \
  {                                                                                  \
    for (ulong k_ = lx; k_ < CE_ROWSUM_PARTS; k_ += LX) {                            \
      float s_ = 0.0f;                                                               \
      for (ulong c_ = k_; c_ < cols; c_ += CE_ROWSUM_PARTS) {                        \
        float t1_;                                                                   \
        STEP1(c_, t1_);                                                              \
        s_ = s_ + t1_;                                                               \
      }                                                                              \
      part[k_] = s_;                                                                 \
    }                                                                                \
    barrier(CLK_LOCAL_MEM_FENCE);                                                    \
    result = ce_rowsum_fold_local(part);                                             \
    barrier(CLK_LOCAL_MEM_FENCE);                                                    \
  }
#define CE_ROWSUM2_G(ra, rb, STEP12)                                                 \
  {                                                                                  \
    for (ulong k_ = lx; k_ < CE_ROWSUM_PARTS; k_ += LX) {                            \
      float s_ = 0.0f, u_ = 0.0f;                                                    \
      for (ulong c_ = k_; c_ < cols; c_ += CE_ROWSUM_PARTS) {                        \
        float t1_, u1_;                                                              \
        STEP12(c_, t1_, u1_);                                                        \
        s_ = s_ + t1_;                                                               \
        u_ = u_ + u1_;                                                               \
      }                                                                              \
      part[k_] = s_;                                                                 \
      part[CE_ROWSUM_PARTS + k_] = u_;                                               \
    }                                                                                \
    barrier(CLK_LOCAL_MEM_FENCE);                                                    \
    ra = ce_rowsum_fold_local(part);                                                 \
    rb = ce_rowsum_fold_local(part + CE_ROWSUM_PARTS);                               \
    barrier(CLK_LOCAL_MEM_FENCE);                                                    \
  }

/* The passes' values: x (LAYER's mean, RMS's mean square), (x - mean)^2.
 * The GPU shape's (one column) recompute x in every pass. The CPU shapes'
 * (VEC columns, or one) keep their group's rows of x (below) in the private
 * scratch xsa_ when the host sets SCRATCH (its floats: SIDE rows of xst_,
 * the row rounded up to VEC and, with SIDE > 1, a vector more, so that the
 * rows do not fall on the same cache sets): the first pass puts them there,
 * the later passes get the row at xs_ back (CE_GET) instead of recomputing
 * it; F: the steps of a full row (CE_XVF), or not. The same values either way. */
#ifndef SCRATCH
#define SCRATCH 0
#endif
#ifndef SIDE
#define SIDE 1
#endif
#if SCRATCH
/* a vector at c, a multiple of VEC, is aligned: whole stores, no vstore */
#define CE_SCRATCH_DECL                                 \
  float xsa_[SCRATCH] __attribute__((aligned(4 * VEC))); \
  const ulong xst_ = (cols + VEC - 1) / VEC * VEC + (SIDE > 1 ? VEC : 0);
#define CE_SCRATCH_ROW(k) float *xs_ = xsa_ + (ulong)(k) * xst_;
#define CE_GPUTV_(k, c, t) *(FV *)(xsa_ + (ulong)(k) * xst_ + (c)) = (t)
#define CE_GPUT1_(k, c, t) xsa_[(ulong)(k) * xst_ + (c)] = (t)
#define CE_GETV(F, c, x) x = *(const FV *)(xs_ + (c))
#define CE_GET1(c, x) x = xs_[c]
#else
#define CE_SCRATCH_DECL
#define CE_SCRATCH_ROW(k)
#define CE_GPUTV_(k, c, t)
#define CE_GPUT1_(k, c, t)
#define CE_GETV(F, c, x) CE_XV##F(c, x)
#define CE_GET1(c, x) CE_X1(c, x)
#endif
/* GPU: one column */
#define CE_SX1(c, t) CE_X1(c, t)
#define CE_SQ1(c, t) \
  do {               \
    CE_X1(c, t);     \
    t = t * t;       \
  } while (0)
#define CE_DEV1(c, t) \
  do {                \
    CE_X1(c, t);      \
    t = t - mean;     \
    t = t * t;        \
  } while (0)
/* CPU: the second pass of LAYER, (x - mean)^2 */
#define CE_DEV1G(c, t) \
  do {                 \
    CE_GET1(c, t);     \
    t = t - mean;      \
    t = t * t;         \
  } while (0)
#define CE_DEVV(c, t)  \
  do {                 \
    CE_GETV(, c, t);   \
    t = t - mean;      \
    t = t * t;         \
  } while (0)
#define CE_DEVVF(c, t) \
  do {                 \
    CE_GETV(F, c, t);  \
    t = t - mean;      \
    t = t * t;         \
  } while (0)

/* The GPU shape's statistics of its row: mean (LAYER; 0 for RMS) and rstd. */
#if NORM == 1
#define CE_NORM_STATS_GPU                                 \
  float mean, rstd, s1_, s2_;                             \
  CE_ROWSUM_G(s1_, CE_SX1)                                \
  mean = s1_ * inv_d;                                     \
  CE_ROWSUM_G(s2_, CE_DEV1)                               \
  rstd = ce_rsqrt_fixed(s2_ * inv_d + eps);
#elif NORM == 2
#define CE_NORM_STATS_GPU                                 \
  float mean = 0.0f, rstd, s2_;                           \
  CE_ROWSUM_G(s2_, CE_SQ1)                                \
  rstd = ce_rsqrt_fixed(s2_ * inv_d + eps);
#else
#define CE_NORM_STATS_GPU
#endif

/* ------------------------------------------------------------------ keys */

/* Resolves every token's id, position and segment id as the forward does
 * (reporting the bad ones) and writes, when asked, its position and its
 * segment row (-1 for none) as the keys of the backward's folds. */
#if POSITIONS != 0
#define CE_NORM_POS_KEY(i) \
  if (want_pos) pos_keys[i] = pok ? (long)pp : -1
#else
#define CE_NORM_POS_KEY(i)
#endif
#if SEGMENTS
#define CE_NORM_SEG_KEY(i) \
  if (want_seg) seg_keys[i] = sok ? sr_ : -1
#else
#define CE_NORM_SEG_KEY(i)
#endif
__kernel void ce_norm_keys(CE_NORM_IN_ARGS, __global long *pos_keys, int want_pos, __global long *seg_keys,
                           int want_seg) {
  ulong i = get_global_id(0);
  if (i >= n) return;
  CE_NORM_TOKEN(i, 1)
  (void)trow;
  CE_NORM_POS_KEY(i);
  CE_NORM_SEG_KEY(i);
}

/* --------------------------------------------------------------- forward */

/* The dropout of element e, scalar and VEC-wide. */
#if DROPOUT
#define CE_DROP1(y, e) y = ce_mask1(y, (e), dropout, keep_scale, seed_lo, seed_hi)
#define CE_DROPV(y, e) y = ce_maskv(y, (e), dropout, keep_scale, seed_lo, seed_hi)
#else
#define CE_DROP1(y, e)
#define CE_DROPV(y, e)
#endif

/* GPU shape: token get_global_id(1); work-item lx of LX across its row. The
 * items of a token past n follow the barriers on token n - 1 and write nothing.
 * part: 32 floats of local memory per token of the group. */
__kernel void ce_norm(CE_NORM_IN_ARGS, __global OUT_T *out, ulong o_off CE_PIECE_PARAMS(OUT_T, out), ulong o_ld,
                      __local float *part_all) {
  ulong lx = get_local_id(0), LX = get_local_size(0), i = get_global_id(1);
  __local float *part = part_all + get_local_id(1) * CE_ROWSUM_PARTS;
  int live = i < n;
  ulong t = live ? i : n - 1;
  (void)part;
  CE_NORM_TOKEN(t, live && lx == 0)
  CE_NORM_STATS_GPU
  if (!live) return; /* after the last barrier */
  __global OUT_T *orow = OUT_ROW(t);
  for (ulong c = lx; c < cols; c += LX) {
    float x;
    CE_X1(c, x);
    float y = CE_Y1(c, x);
    CE_DROP1(y, t * cols + c);
    store_out(orow, c, y);
  }
}

/* The tokens of CPU work-item g: t0, t0 + tstep, ... (ROWS of them):
 * g*ROWS .. g*ROWS + ROWS - 1, or with `strided` (positions shared by
 * several sequences of seq_len) position x of the sequences ROWS*q ..
 * ROWS*q + ROWS - 1, q = g / seq_len (each position row read once from
 * memory for them). */
inline ulong ce_norm_first(ulong g, int strided, ulong seq_len, ulong *tstep) {
  if (!strided) {
    *tstep = 1;
    return g * ROWS;
  }
  ulong q = g / seq_len, x = g - q * seq_len;
  *tstep = seq_len;
  return q * ROWS * seq_len + x;
}
#define CE_NORM_TOKENS(g) \
  ulong tstep, t0 = ce_norm_first((g), strided, seq_len, &tstep);

/* ------------------------------------------------------- CPU row groups */

/* The CPU shapes take an item's tokens in groups of SIDE (the host's choice:
 * as many rows as the scratch holds within the tuning's L1 budget, at most
 * ROWS; 1 without a norm). The
 * group's first pass reads its rows side by side, VEC columns of each in
 * turn (a CPU's prefetchers get several streams), putting x in the scratch
 * and adding it (RMS: x * x) into the row's partial sums; the later passes
 * then take one row at a time from the scratch. With NORM_NEXT (where CE_PREFETCH
 * is 1) the table rows of the next group (this item's, or the next item's
 * first: the tokens the work-item takes next) and, in the backward, their
 * gradient rows are asked for during the memory-bound pass, a line or so of
 * each at each column step: requests spread over the work, rather than all
 * queued at once, let the loads of the rows being read through.
 * A group's tokens: tg, tg + tstep, ... (`live` of them, 1 .. SIDE). */
#if POSITIONS != 0
#define CE_G_POS_DECL \
  int pok_k[SIDE];    \
  ulong pp_k[SIDE];
#define CE_G_POS_SET(k) \
  pok_k[k] = pok;       \
  pp_k[k] = pp;
#define CE_G_POS_BIND(k)   \
  const int pok = pok_k[k]; \
  const ulong pp = pp_k[k]; \
  (void)pok;                \
  (void)pp;
#else
#define CE_G_POS_DECL
#define CE_G_POS_SET(k)
#define CE_G_POS_BIND(k)
#endif
#if POSITIONS == 2
#define CE_G_PROW_DECL __global const POS_T *prow_k[SIDE];
#define CE_G_PROW_SET(k) prow_k[k] = prow;
#define CE_G_PROW_BIND(k) __global const POS_T *prow = prow_k[k];
#else
#define CE_G_PROW_DECL
#define CE_G_PROW_SET(k)
#define CE_G_PROW_BIND(k)
#endif
#if SEGMENTS
#define CE_G_SEG_DECL \
  int sok_k[SIDE];    \
  __global const SEG_T *srow_k[SIDE];
#define CE_G_SEG_SET(k) \
  sok_k[k] = sok;       \
  srow_k[k] = srow;
#define CE_G_SEG_BIND(k)    \
  const int sok = sok_k[k]; \
  __global const SEG_T *srow = srow_k[k];
#else
#define CE_G_SEG_DECL
#define CE_G_SEG_SET(k)
#define CE_G_SEG_BIND(k)
#endif
/* The group's tokens resolved (reported when `report`) into arrays, and
 * token k's parts bound to the names CE_X* use. */
#define CE_G_RESOLVE(report)                       \
  ulong i_k[SIDE];                                 \
  int has_k[SIDE];                                 \
  __global const TABLE_T *trow_k[SIDE];            \
  CE_G_POS_DECL                                    \
  CE_G_PROW_DECL                                   \
  CE_G_SEG_DECL                                    \
  for (int k = 0; k < live; k++) {                 \
    ulong i = tg + (ulong)k * tstep;               \
    CE_NORM_TOKEN(i, report)                       \
    i_k[k] = i;                                    \
    has_k[k] = has;                                \
    trow_k[k] = trow;                              \
    CE_G_POS_SET(k)                                \
    CE_G_PROW_SET(k)                               \
    CE_G_SEG_SET(k)                                \
  }
#define CE_G_BIND(k)                              \
  const int has = has_k[k];                       \
  __global const TABLE_T *trow = trow_k[k];       \
  CE_G_POS_BIND(k)                                \
  CE_G_PROW_BIND(k)                               \
  CE_G_SEG_BIND(k)

/* The group loop: groups of SIDE tokens from t0 (tg, live and r0_, the
 * first of the item's rows, defined). */
#define CE_G_LOOP                                                     \
  for (int r0_ = 0; r0_ < ROWS; r0_ += SIDE) {                        \
    const ulong tg = t0 + (ulong)r0_ * tstep;                         \
    if (tg >= n) return;                                              \
    int live = min(SIDE, ROWS - r0_);                                 \
    if ((ulong)(live - 1) * tstep >= n - tg) live = (int)((n - tg - 1) / tstep + 1);

/* NORM_NEXT: pf_ (2 * SIDE rows: the next group's table rows, then the rows
 * GROW(token) gives, its gradient rows in the backward, 0 in the forward) and the spread of their lines over `steps` column
 * steps: CE_G_ASK(line) asks for each row's lines from `line`. */
#if NORM_NEXT
#define CE_G_NEXT(steps, GROW)                                                                                  \
  __global const uchar *pf_[2 * SIDE];                                                                        \
  const ulong pb_ = (ulong)((__global const uchar *)table_ptr(table, cols) - (__global const uchar *)table);    \
  const ulong pgb_ = cols * sizeof(GRAD_T), ps_ = ce_prefetch_step(pb_, (steps));                            \
  const ulong pgs_ = ce_prefetch_step(pgb_, (steps));                                                          \
  {                                                                                                           \
    ulong ns_ = tstep, nt_ = tg + (ulong)SIDE * tstep;                                                        \
    if (r0_ + SIDE >= ROWS) nt_ = ce_norm_first(get_global_id(0) + 1, strided, seq_len, &ns_);                \
    for (int k = 0; k < SIDE; k++) {                                                                          \
      const ulong ti_ = nt_ + (ulong)k * ns_;                                                                 \
      const long id_ = ti_ < n ? ce_load_id(ids32, ids64, id64, id_off + ti_) : -1;                           \
      pf_[k] = id_ >= 0 && (ulong)id_ < t_rows ? (__global const uchar *)TABLE_ROW(id_) : 0;                  \
      pf_[SIDE + k] = ti_ < n ? (__global const uchar *)GROW(ti_) : 0;                                          \
    }                                                                                                         \
  }
#define CE_NO_ROW(t) 0
#define CE_G_ASK(line)                                                          \
  for (int k = 0; k < SIDE; k++) {                                              \
    if (pf_[k]) ce_prefetch_part(pf_[k], (line) * ps_, ps_, pb_);              \
    if (pf_[SIDE + k]) ce_prefetch_part(pf_[SIDE + k], (line) * pgs_, pgs_, pgb_); \
  }
#else
#define CE_G_NEXT(steps, GROW)
#define CE_G_ASK(line)
#endif

/* The group's first pass (NORM 1 or 2): x of its rows side by side, into the
 * scratch, and each row's sum (rowsum.cl's order) of x (LAYER) or x * x
 * (RMS) into sum_k. */
#if NORM == 1
#define CE_P1T(x) (x)
#else
#define CE_P1T(x) ((x) * (x))
#endif
#define CE_G_PASS1_(F, sum_k)                                                         \
  {                                                                                  \
    FV a_[SIDE][CE_NP];                                                              \
    for (int k = 0; k < SIDE; k++)                                                   \
      for (int m_ = 0; m_ < CE_NP; m_++) a_[k][m_] = (FV)(0.0f);                     \
    ulong c0_ = 0, line_ = 0;                                                        \
    for (; c0_ + CE_ROWSUM_PARTS <= cols; c0_ += CE_ROWSUM_PARTS) {                  \
      _Pragma("unroll") for (int m_ = 0; m_ < CE_NP; m_++, line_++) {               \
        const ulong c_ = c0_ + (ulong)m_ * VEC;                                      \
        CE_G_ASK(line_)                                                              \
        _Pragma("unroll") for (int k = 0; k < SIDE; k++) {                          \
          if (k < live) {                                                            \
            CE_G_BIND(k)                                                             \
            FV x_;                                                                   \
            CE_XV##F(c_, x_);                                                        \
            CE_GPUTV_(k, c_, x_);                                                    \
            a_[k][m_] = a_[k][m_] + CE_P1T(x_);                                      \
          }                                                                          \
        }                                                                            \
      }                                                                              \
    }                                                                                \
    for (int k = 0; k < live; k++) {                                                 \
      CE_G_BIND(k)                                                                   \
      float q_[CE_ROWSUM_PARTS];                                                     \
      for (int m_ = 0; m_ < CE_NP; m_++) vstoreV(a_[k][m_], 0, q_ + m_ * VEC);       \
      for (ulong c_ = c0_; c_ < cols; c_++) {                                        \
        float x1_;                                                                   \
        CE_X1(c_, x1_);                                                              \
        CE_GPUT1_(k, c_, x1_);                                                       \
        q_[c_ - c0_] = q_[c_ - c0_] + CE_P1T(x1_);                                   \
      }                                                                              \
      sum_k[k] = ce_rowsum_fold(q_);                                                 \
    }                                                                                \
  }
/* (the steps without tests when every row of the group is full) */
#define CE_G_PASS1(sum_k)                   \
  {                                         \
    int all_ = 1;                           \
    for (int k = 0; k < live; k++) {        \
      CE_G_BIND(k)                          \
      all_ = all_ && CE_FULL;               \
    }                                       \
    if (all_)                               \
      CE_G_PASS1_(F, sum_k)                 \
    else                                    \
      CE_G_PASS1_(, sum_k)                  \
  }
/* The column steps of the first pass (NORM_NEXT's spread): the whole 32s' vectors. */
#define CE_G_STEPS (cols / CE_ROWSUM_PARTS * CE_NP)

/* Row k's mean and rstd from its first pass's sum (LAYER: the second pass,
 * the squared deviations, from the scratch or recomputed). */
#if NORM == 1
#define CE_G_STATS(k)                                       \
  float mean = sum_k[k] * inv_d, rstd, s2_;                 \
  if (full)                                                 \
    CE_ROWSUMV(s2_, CE_DEVVF, CE_DEV1G)                     \
  else                                                      \
    CE_ROWSUMV(s2_, CE_DEVV, CE_DEV1G)                      \
  rstd = ce_rsqrt_fixed(s2_ * inv_d + eps);
#else
#define CE_G_STATS(k)                                       \
  float mean = 0.0f, rstd = ce_rsqrt_fixed(sum_k[k] * inv_d + eps);
#endif

/* ---------------------------------------------------------- CPU forward */

/* The output's whole vectors of a row (F: a full row's steps): x from the
 * scratch row after the norm's passes, else computed here (without a norm,
 * with the next group's rows asked for: this is its pass over memory). */
#if NORM == 0
#define CE_NORM_OUT_XV(F, c, x) CE_XV##F(c, x)
#define CE_NORM_OUT_X1(c, x) CE_X1(c, x)
#define CE_NORM_OUT_ASK(c) CE_G_ASK((c) / VEC)
#else
#define CE_NORM_OUT_XV(F, c, x) CE_GETV(F, c, x)
#define CE_NORM_OUT_X1(c, x) CE_GET1(c, x)
#define CE_NORM_OUT_ASK(c)
#endif
#define CE_NORM_OUT_LOOP(F)                 \
  for (ulong c = 0; c < cv; c += VEC) {     \
    FV x;                                   \
    CE_NORM_OUT_ASK(c);                     \
    CE_NORM_OUT_XV(F, c, x);                \
    FV y = CE_YV(c, x);                     \
    CE_DROPV(y, e0 + c);                    \
    if (nt)                                 \
      stream_outv(orow, c, y);              \
    else                                    \
      store_outv(orow, c, y);               \
  }

/* The row-at-a-time kernel's first pass: with a norm, the group's rows side
 * by side into their sums (CE_G_PASS1), the next group's rows asked for over
 * its column steps; without, nothing (the output loop is the pass over
 * memory, and asks for the next rows over its vectors). Its statistics of row
 * k: with a norm CE_G_STATS, without none. */
#if NORM != 0
#define CE_NORM_FIRST_PASS            \
  CE_G_NEXT(CE_G_STEPS, CE_NO_ROW)    \
  float sum_k[SIDE];                  \
  CE_G_PASS1(sum_k)
#define CE_NORM_ROW_STATS(k) CE_G_STATS(k)
#else
#define CE_NORM_FIRST_PASS CE_G_NEXT(cols / VEC, CE_NO_ROW)
#define CE_NORM_ROW_STATS(k)
#endif
/* The norm's weight and bias at VEC columns from c, loaded once for the
 * group's rows (CE_NORM_W_DECL, CE_NORM_B_DECL), and applied to a row's xh
 * (CE_NORM_W, CE_NORM_B); nothing without them. */
#if HAS_W
#define CE_NORM_W_DECL(c) const FV w_ = vloadV(0, nw + nw_off + (c));
#define CE_NORM_W(y) y = y * w_
#else
#define CE_NORM_W_DECL(c)
#define CE_NORM_W(y)
#endif
#if HAS_B
#define CE_NORM_B_DECL(c) const FV b_ = vloadV(0, nb + nb_off + (c));
#define CE_NORM_B(y) y = y + b_
#else
#define CE_NORM_B_DECL(c)
#define CE_NORM_B(y)
#endif

/* The CPU forward has two kernels; the program holds the one its options
 * select, the host names it (src/ops/norm.c): ce_norm_rows_side where a norm's
 * rows are kept in the scratch (NORM 1 or 2 with SCRATCH), else ce_norm_rows. */
#if NORM != 0 && SCRATCH
/* The group's rows' statistics, then their output side by side from the
 * scratch, each vector of the weight and bias loaded once for them. */
__kernel void ce_norm_rows_side(CE_NORM_IN_ARGS, __global OUT_T *out, ulong o_off CE_PIECE_PARAMS(OUT_T, out),
                                ulong o_ld, int strided) {
  CE_NORM_TOKENS(get_global_id(0))
  CE_SCRATCH_DECL
  CE_G_LOOP
  CE_G_RESOLVE(1)
  CE_NORM_FIRST_PASS
  float mean_k[SIDE], rstd_k[SIDE];
  __global OUT_T *orow_k[SIDE];
  int nt_k[SIDE];
  for (int k = 0; k < live; k++) {
    CE_G_BIND(k)
    CE_SCRATCH_ROW(k)
    const int full = CE_FULL;
    CE_G_STATS(k)
    mean_k[k] = mean;
    rstd_k[k] = rstd;
    orow_k[k] = OUT_ROW(i_k[k]);
    nt_k[k] = STREAM && CE_STREAMING && ((ulong)orow_k[k] & (VEC * sizeof(OUT_T) - 1)) == 0;
  }
  const ulong cv = cols / VEC * VEC;
  for (ulong c = 0; c < cv; c += VEC) {
    CE_NORM_W_DECL(c)
    CE_NORM_B_DECL(c)
    _Pragma("unroll") for (int k = 0; k < SIDE; k++) {
      if (k < live) {
        const float mean = mean_k[k], rstd = rstd_k[k];
        FV x = *(const FV *)(xsa_ + (ulong)k * xst_ + c);
        FV y = CE_XH(x); /* CE_YV's operations, the weight and bias loaded once */
        CE_NORM_W(y);
        CE_NORM_B(y);
        CE_DROPV(y, i_k[k] * cols + c);
        if (nt_k[k])
          stream_outv(orow_k[k], c, y);
        else
          store_outv(orow_k[k], c, y);
      }
    }
  }
  for (int k = 0; k < live; k++) {
    const float mean = mean_k[k], rstd = rstd_k[k];
    for (ulong c = cv; c < cols; c++) {
      float x = xsa_[(ulong)k * xst_ + c];
      float y = CE_Y1(c, x);
      CE_DROP1(y, i_k[k] * cols + c);
      store_out(orow_k[k], c, y);
    }
  }
  }
}
#else
/* A row at a time: its statistics, then its output (x from the scratch, or
 * recomputed). */
__kernel void ce_norm_rows(CE_NORM_IN_ARGS, __global OUT_T *out, ulong o_off CE_PIECE_PARAMS(OUT_T, out), ulong o_ld,
                           int strided) {
  CE_NORM_TOKENS(get_global_id(0))
  CE_SCRATCH_DECL
  CE_G_LOOP
  CE_G_RESOLVE(1)
  CE_NORM_FIRST_PASS
  for (int k = 0; k < live; k++) {
    CE_G_BIND(k)
    CE_SCRATCH_ROW(k)
    const ulong i = i_k[k];
    const int full = CE_FULL;
    CE_NORM_ROW_STATS(k)
    __global OUT_T *orow = OUT_ROW(i);
    const int nt = STREAM && CE_STREAMING && ((ulong)orow & (VEC * sizeof(OUT_T) - 1)) == 0;
    const ulong cv = cols / VEC * VEC, e0 = i * cols;
    if (full)
      CE_NORM_OUT_LOOP(F)
    else
      CE_NORM_OUT_LOOP()
    for (ulong c = cv; c < cols; c++) {
      float x;
      CE_NORM_OUT_X1(c, x);
      float y = CE_Y1(c, x);
      CE_DROP1(y, e0 + c);
      store_out(orow, c, y);
    }
  }
  }
}
#endif

/* -------------------------------------------------------------- backward */

/* The rows of the backward with a norm (NORM 1 or 2): for token i, g the
 * masked gradient, h = g * weight, A = sum(h) * r, B = sum(h * xh) * r, then
 * with DX dx = rstd * ((h - A) - xh * B) (RMS: rstd * (h - xh * B)) into dx
 * (dense, cols wide, F32; with STREAM in streaming stores), and with STATS the
 * row's mean, rstd, A and B into stats[4 i ..] (ce_norm_params recomputes
 * xh and dx from them, the same operations: the same bits). */
#if NORM != 0
#define CE_G1(c, g)                                     \
  do {                                                  \
    g = load_grad(grow, (c));                           \
    CE_DROP1(g, e0 + (c));                              \
  } while (0)
#define CE_GV(c, g)                                     \
  do {                                                  \
    g = load_gradv(grow, (c));                          \
    CE_DROPV(g, e0 + (c));                              \
  } while (0)
#if HAS_W
#define CE_H1(c, g) ((g) * nw[nw_off + (c)])
#define CE_HV(c, g) ((g) * vloadV(0, nw + nw_off + (c)))
#else
#define CE_H1(c, g) (g)
#define CE_HV(c, g) (g)
#endif
/* the two sums' values at column c: h (LAYER; 0 for RMS) and h * xh */
#if NORM == 1
#define CE_HA(h) (h)
#else
#define CE_HA(h) (0.0f * (h))
#endif
#define CE_AB1(c, ta, tb)          \
  do {                             \
    float x_, g_;                  \
    CE_X1(c, x_);                  \
    CE_G1(c, g_);                  \
    float h_ = CE_H1(c, g_);       \
    ta = CE_HA(h_);                \
    tb = h_ * CE_XH(x_);           \
  } while (0)
/* The CPU shape: x from the scratch row, and the masked gradient put aside
 * in a second scratch (gs_, one row) for the last pass. */
#if SCRATCH
#define CE_GSCRATCH_DECL float gs_[SCRATCH / SIDE] __attribute__((aligned(4 * VEC)));
#define CE_GPUTV(c, g) *(FV *)(gs_ + (c)) = (g)
#define CE_GPUT1(c, g) gs_[c] = (g)
#define CE_GGETV(c, g) g = *(const FV *)(gs_ + (c))
#define CE_GGET1(c, g) g = gs_[c]
#else
#define CE_GSCRATCH_DECL
#define CE_GPUTV(c, g)
#define CE_GPUT1(c, g)
#define CE_GGETV(c, g) CE_GV(c, g)
#define CE_GGET1(c, g) CE_G1(c, g)
#endif
#define CE_AB1C(c, ta, tb)         \
  do {                             \
    float x_, g_;                  \
    CE_GET1(c, x_);                \
    CE_G1(c, g_);                  \
    CE_GPUT1(c, g_);               \
    float h_ = CE_H1(c, g_);       \
    ta = CE_HA(h_);                \
    tb = h_ * CE_XH(x_);           \
  } while (0)
#define CE_ABV_(F, c, ta, tb)      \
  do {                             \
    FV x_, g_;                     \
    CE_GETV(F, c, x_);             \
    CE_GV(c, g_);                  \
    CE_GPUTV(c, g_);               \
    FV h_ = CE_HV(c, g_);          \
    ta = CE_HA(h_);                \
    tb = h_ * CE_XH(x_);           \
  } while (0)
#define CE_ABV(c, ta, tb) CE_ABV_(, c, ta, tb)
#define CE_ABVF(c, ta, tb) CE_ABV_(F, c, ta, tb)
#if NORM == 1
#define CE_DX(h, xh) (rstd * (((h) - A) - (xh) * B))
#else
#define CE_DX(h, xh) (rstd * ((h) - (xh) * B))
#endif

__kernel void ce_norm_bwd(CE_NORM_IN_ARGS, __global const GRAD_T *grad,
                          ulong g_off CE_PIECE_PARAMS(const GRAD_T, grad), ulong g_ld, __global float *dx,
                          __global float *stats, __local float *part_all) {
  ulong lx = get_local_id(0), LX = get_local_size(0), i = get_global_id(1);
  __local float *part = part_all + get_local_id(1) * 2 * CE_ROWSUM_PARTS;
  int live = i < n;
  ulong t = live ? i : n - 1, e0 = t * cols;
  CE_NORM_TOKEN(t, 0)
  __global const GRAD_T *grow = GRAD_ROW(t);
  CE_NORM_STATS_GPU
  float sa, sb;
  CE_ROWSUM2_G(sa, sb, CE_AB1)
  float A = sa * inv_d, B = sb * inv_d;
  (void)A;
  if (!live) return; /* after the last barrier */
  if (STATS && lx == 0) vstore4((float4)(mean, rstd, A, B), t, stats);
  if (DX)
    for (ulong c = lx; c < cols; c += LX) {
      float x, g;
      CE_X1(c, x);
      CE_G1(c, g);
      float xh = CE_XH(x), h = CE_H1(c, g);
      dx[e0 + c] = CE_DX(h, xh);
    }
}

/* dx of a row's whole vectors, x from XV: into dx (DX; nt: streaming
 * stores) and, with POSG, added into the position's sums pacc_ (padd_). */
#if DX
#define CE_NORM_DX_PUTV(c, v) \
  if (nt)                     \
    ce_streamv_0(dx, e0 + (c), v); \
  else                        \
    ce_storev_0(dx, e0 + (c), v)
#define CE_NORM_DX_PUT1(c, v) dx[e0 + (c)] = (v)
#else
#define CE_NORM_DX_PUTV(c, v)
#define CE_NORM_DX_PUT1(c, v)
#endif
#if POSG
#define CE_NORM_DX_ADDV(c, v) \
  if (padd_) *(FV *)(pacc_ + (c)) = *(const FV *)(pacc_ + (c)) + (v)
#define CE_NORM_DX_ADD1(c, v) \
  if (padd_) pacc_[c] = pacc_[c] + (v)
#else
#define CE_NORM_DX_ADDV(c, v)
#define CE_NORM_DX_ADD1(c, v)
#endif
#define CE_NORM_DX_LOOP(F)                           \
  for (ulong c = 0; c < cv; c += VEC) {              \
    FV x, g;                                         \
    CE_GETV(F, c, x);                                \
    CE_GGETV(c, g);                                  \
    FV xh = CE_XH(x), h = CE_HV(c, g);               \
    const FV d_ = CE_DX(h, xh);                      \
    CE_NORM_DX_PUTV(c, d_);                          \
    CE_NORM_DX_ADDV(c, d_);                          \
  }

/* POSG: the host sets it for the CPU shape's strided items (SCRATCH set) when
 * every token of a position is in one item (at most ROWS sequences) and the
 * position table's gradient is one buffer: the item's tokens, in ascending
 * order, add their dx into pacc_ (from +0) when their position is in the
 * table, and its last group adds the sums into gpos's row: the position fold,
 * bit for bit, without its pass over dx. */
#if POSG
#define CE_POSG_DECL                                                       \
  float pacc_[SCRATCH / SIDE] __attribute__((aligned(4 * VEC)));           \
  int pany_ = 0;                                                           \
  ulong prow_ = 0;                                                         \
  for (ulong c = 0; c < cols; c++) pacc_[c] = 0.0f;
/* a token: whether its dx goes into the sums (padd_), and the item's row */
#define CE_POSG_TOKEN \
  const int padd_ = pok; \
  if (pok) {             \
    pany_ = 1;           \
    prow_ = pp;          \
  }
/* the item's last group: its position's sum into the gradient */
#define CE_POSG_FLUSH                                                                  \
  if (pany_ && (r0_ + SIDE >= ROWS || (ulong)SIDE * tstep >= n - tg)) {                \
    __global float *gr_ = gpos + gpos_off + prow_ * gpos_ld;                           \
    for (ulong c = 0; c < cols; c++) gr_[c] = gr_[c] + pacc_[c];                       \
  }
#else
#define CE_POSG_DECL
#define CE_POSG_TOKEN
#define CE_POSG_FLUSH
#endif

__kernel void ce_norm_bwd_rows(CE_NORM_IN_ARGS, __global const GRAD_T *grad,
                               ulong g_off CE_PIECE_PARAMS(const GRAD_T, grad), ulong g_ld, __global float *dx,
                               __global float *stats, __global float *gpos, ulong gpos_off, ulong gpos_ld,
                               int strided) {
  CE_NORM_TOKENS(get_global_id(0))
  CE_SCRATCH_DECL
  CE_GSCRATCH_DECL
  CE_POSG_DECL
  CE_G_LOOP
  CE_G_RESOLVE(0)
  CE_G_NEXT(CE_G_STEPS, GRAD_ROW)
  float sum_k[SIDE];
  CE_G_PASS1(sum_k)
  for (int k = 0; k < live; k++) {
    CE_G_BIND(k)
    CE_SCRATCH_ROW(k)
    const ulong i = i_k[k], e0 = i * cols;
    const int full = CE_FULL;
    __global const GRAD_T *grow = GRAD_ROW(i);
    CE_G_STATS(k)
    float sa, sb;
    if (full)
      CE_ROWSUM2V(sa, sb, CE_ABVF, CE_AB1C)
    else
      CE_ROWSUM2V(sa, sb, CE_ABV, CE_AB1C)
    float A = sa * inv_d, B = sb * inv_d;
    (void)A;
    if (STATS) vstore4((float4)(mean, rstd, A, B), i, stats);
    if (DX || POSG) {
      CE_POSG_TOKEN
      const ulong cv = cols / VEC * VEC;
      const int nt = DX && STREAM && CE_STREAMING && ((ulong)(dx + e0) & (VEC * sizeof(float) - 1)) == 0;
      (void)nt;
      if (full)
        CE_NORM_DX_LOOP(F)
      else
        CE_NORM_DX_LOOP()
      for (ulong c = cv; c < cols; c++) {
        float x, g;
        CE_GET1(c, x);
        CE_GGET1(c, g);
        float xh = CE_XH(x), h = CE_H1(c, g);
        const float d_ = CE_DX(h, xh);
        CE_NORM_DX_PUT1(c, d_);
        CE_NORM_DX_ADD1(c, d_);
      }
    }
  }
  CE_POSG_FLUSH
  }
}

/* The norm's weight and bias gradients, and with want_s the segment
 * table's, without the segment fold's sort: work-item x takes the columns
 * [x * pw, x * pw + pw) and walks every token in ascending order, with g
 * grad_out's element with the forward's dropout (as the fold replays it) and
 * xh and dx recomputed from the token's rows and its stats (ce_norm_bwd's
 * operations, so the same bits): sw = sw + g * xh, sb = sb + g and, for the
 * token's segment row r (none: nothing), ss[r] = ss[r] + dx, each from +0;
 * then gw[c] = gw[c] + sw, gb[c] = gb[c] + sb (want_w, want_b) and
 * gs[r][c] = gs[r][c] + ss[r] for each row r some token has: the fold of
 * every token keyed to one row (to its segment row), bit for bit. The host
 * sets want_s only when the segment table has at most CE_NORM_SMAX rows,
 * and only with NORM_SUMS 1: without it (llvmpipe, the GPU shape) the kernel
 * keeps no segment sums (CE_PSEGS 0: the loops over them take no step and
 * the token's sg is -1, so none of their code is compiled; gallivm had not
 * compiled this kernel with them after minutes) and the segment table goes
 * to its fold.
 * Two shapes; the program holds the one NORM_PARAMS_COLS selects, the host
 * names it (src/ops/norm.c):
 *   ce_norm_params_block  (NORM_PARAMS_COLS > 1, the CPU shape: pw <=
 *                 NORM_PARAMS_COLS, a multiple of VEC but for the last item)
 *                 keeps the sums of a wide block in private rows (each row
 *                 read a long run at a time; where CE_PREFETCH is 1 the table
 *                 and gradient rows CE_PAHEAD tokens on asked for a line at
 *                 each vector);
 *   ce_norm_params  (NORM_PARAMS_COLS 1, the GPU shape) a column at a time.
 * A launch walks the tokens [t0, t1): with `first` the sums start from +0,
 * else from acc, where the launch before left them; with `last` they are
 * added into the gradients as above, else left in acc (a device that stops a
 * work-item's loops after loop_limit iterations gets the tokens in several
 * launches, one sum carried from each to the next: the same bits). acc:
 * (2 + CE_NORM_SMAX) rows of cols floats (sw, sb, ss[r]), then each
 * work-item's CE_NORM_SMAX seen flags. */
#ifndef NORM_PARAMS_COLS
#define NORM_PARAMS_COLS 1
#endif
#define CE_PAHEAD 4
#define CE_NORM_SMAX 4
#ifndef NORM_SUMS
#define NORM_SUMS 0
#endif
/* The segment rows whose sums the kernel keeps (CE_PSEGS, its arrays'
 * CE_PSEG_DIM) and token i's row among them, sg = CE_PSEG(its segment row),
 * -1 for none. */
#if SEGMENTS && NORM_SUMS
#define CE_PSEGS CE_NORM_SMAX
#define CE_PSEG(r) (want_s && sok ? (int)(r) : -1)
#else
#define CE_PSEGS 0
#define CE_PSEG(r) (-1)
#endif
#define CE_PSEG_DIM (CE_PSEGS > 0 ? CE_PSEGS : 1)
/* the carried sums: sw at acc[c], sb at acc[cols + c], ss[r] at acc[(2 + r) * cols + c] */
#define ACC_W(c) ((c))
#define ACC_B(c) (cols + (c))
#define ACC_S(r, c) ((2 + (ulong)(r)) * cols + (c))
#define CE_PARAMS_HEAD                                                                                 \
  const ulong c0 = get_global_id(0) * pw;                                                              \
  if (c0 >= cols) return;                                                                              \
  const ulong c1 = min(c0 + pw, cols);                                                                 \
  __global float *acc_seen = acc + (2 + CE_NORM_SMAX) * cols + get_global_id(0) * CE_NORM_SMAX;        \
  const int want_x = want_w || (CE_PSEGS > 0 && want_s);                                               \
  int seen[CE_PSEG_DIM];                                                                               \
  for (int r = 0; r < CE_PSEGS; r++) seen[r] = first ? 0 : acc_seen[r] != 0.0f;                       \
  (void)gs;                                                                                            \
  (void)gs_off;                                                                                        \
  (void)gs_ld;
#define CE_PARAMS_ARGS                                                                                     \
  CE_NORM_IN_ARGS, __global const GRAD_T *grad, ulong g_off CE_PIECE_PARAMS(const GRAD_T, grad), ulong g_ld, \
      __global const float *stats, __global float *gw, ulong gw_off, int want_w, __global float *gb,         \
      ulong gb_off, int want_b, __global float *gs, ulong gs_off, ulong gs_ld, int want_s, ulong pw, ulong t0, \
      ulong t1, __global float *acc, int first, int last

#if NORM_PARAMS_COLS > 1
/* The table and gradient rows CE_PAHEAD tokens on (pt_, pg_), and a line of
 * each at column c asked for. */
#if CE_PREFETCH
#define CE_PARAMS_AHEAD(i)                                                                                  \
  const int ask = (i) + CE_PAHEAD < n;                                                                      \
  long pid_ = ask && want_x ? ce_load_id(ids32, ids64, id64, id_off + (i) + CE_PAHEAD) : -1;                \
  __global const uchar *pt_ = pid_ >= 0 && (ulong)pid_ < t_rows ? (__global const uchar *)TABLE_ROW(pid_) : 0; \
  __global const uchar *pg_ = ask ? (__global const uchar *)GRAD_ROW((i) + CE_PAHEAD) : 0;
#define CE_PARAMS_ASK(c)                                         \
  do {                                                           \
    if (pg_) ce_prefetch(pg_ + (c) * sizeof(GRAD_T));            \
    if (pt_) ce_prefetch(pt_ + (c) * sizeof(TABLE_T));           \
  } while (0)
#else
#define CE_PARAMS_AHEAD(i)
#define CE_PARAMS_ASK(c)
#endif
/* The block's whole vectors of token i (F: a full row's steps). */
#define CE_PARAMS_LOOP(F)                                                   \
  for (ulong m = 0; m < nv; m++) {                                          \
    const ulong c = c0 + m * VEC;                                           \
    CE_PARAMS_ASK(c);                                                       \
    FV g;                                                                   \
    CE_GV(c, g);                                                            \
    if (want_b) sb[m] = sb[m] + g;                                          \
    if (want_x) {                                                           \
      FV x;                                                                 \
      CE_XV##F(c, x);                                                       \
      const FV xh = CE_XH(x);                                               \
      if (want_w) sw[m] = sw[m] + g * xh;                                   \
      if (sg >= 0) {                                                        \
        const FV h = CE_HV(c, g);                                           \
        ss[sg][m] = ss[sg][m] + CE_DX(h, xh);                               \
      }                                                                     \
    }                                                                       \
  }
__kernel void ce_norm_params_block(CE_PARAMS_ARGS) {
  CE_PARAMS_HEAD
  const ulong nv = (c1 - c0) / VEC, cv = c0 + nv * VEC;
  /* the block's sums: its whole vectors (sw, sb, ss), its last columns (tw, tb, ts) */
  FV sw[NORM_PARAMS_COLS / VEC], sb[NORM_PARAMS_COLS / VEC], ss[CE_PSEG_DIM][NORM_PARAMS_COLS / VEC];
  float tw[VEC], tb[VEC], ts[CE_PSEG_DIM][VEC];
  for (ulong m = 0; m < nv; m++) {
    sw[m] = first ? (FV)(0.0f) : ce_loadv_0(acc, ACC_W(c0 + m * VEC));
    sb[m] = first ? (FV)(0.0f) : ce_loadv_0(acc, ACC_B(c0 + m * VEC));
    for (int r = 0; r < CE_PSEGS; r++) ss[r][m] = first ? (FV)(0.0f) : ce_loadv_0(acc, ACC_S(r, c0 + m * VEC));
  }
  for (int m = 0; m < VEC; m++) {
    tw[m] = tb[m] = 0.0f;
    for (int r = 0; r < CE_PSEGS; r++) ts[r][m] = 0.0f;
  }
  for (ulong c = cv; c < c1 && !first; c++) {
    tw[c - cv] = acc[ACC_W(c)];
    tb[c - cv] = acc[ACC_B(c)];
    for (int r = 0; r < CE_PSEGS; r++) ts[r][c - cv] = acc[ACC_S(r, c)];
  }
  for (ulong i = t0; i < t1; i++) {
    CE_NORM_TOKEN(i, 0)
    __global const GRAD_T *grow = GRAD_ROW(i);
    const ulong e0 = i * cols;
    float mean = 0.0f, rstd = 0.0f, A = 0.0f, B = 0.0f;
    if (want_x) {
      const float4 st_ = vload4(i, stats);
      mean = st_.s0;
      rstd = st_.s1;
      A = st_.s2;
      B = st_.s3;
    }
    (void)mean;
    (void)A;
    const int sg = CE_PSEG(sr_);
    if (sg >= 0) seen[sg] = 1;
    CE_PARAMS_AHEAD(i)
    if (CE_FULL)
      CE_PARAMS_LOOP(F)
    else
      CE_PARAMS_LOOP()
    for (ulong c = cv; c < c1; c++) {
      float g;
      CE_G1(c, g);
      if (want_b) tb[c - cv] = tb[c - cv] + g;
      if (want_x) {
        float x;
        CE_X1(c, x);
        const float xh = CE_XH(x);
        if (want_w) tw[c - cv] = tw[c - cv] + g * xh;
        if (sg >= 0) {
          const float h = CE_H1(c, g);
          ts[sg][c - cv] = ts[sg][c - cv] + CE_DX(h, xh);
        }
      }
    }
  }
  if (!last) { /* the sums for the next launch */
    for (ulong m = 0; m < nv; m++) {
      ce_storev_0(acc, ACC_W(c0 + m * VEC), sw[m]);
      ce_storev_0(acc, ACC_B(c0 + m * VEC), sb[m]);
      for (int r = 0; r < CE_PSEGS; r++) ce_storev_0(acc, ACC_S(r, c0 + m * VEC), ss[r][m]);
    }
    for (ulong c = cv; c < c1; c++) {
      acc[ACC_W(c)] = tw[c - cv];
      acc[ACC_B(c)] = tb[c - cv];
      for (int r = 0; r < CE_PSEGS; r++) acc[ACC_S(r, c)] = ts[r][c - cv];
    }
    for (int r = 0; r < CE_PSEGS; r++) acc_seen[r] = seen[r] ? 1.0f : 0.0f;
    return;
  }
  for (ulong m = 0; m < nv; m++) {
    const ulong c = c0 + m * VEC;
    if (want_w) ce_storev_0(gw, gw_off + c, ce_loadv_0(gw, gw_off + c) + sw[m]);
    if (want_b) ce_storev_0(gb, gb_off + c, ce_loadv_0(gb, gb_off + c) + sb[m]);
    for (int r = 0; r < CE_PSEGS; r++)
      if (seen[r]) {
        const ulong o = gs_off + (ulong)r * gs_ld + c;
        ce_storev_0(gs, o, ce_loadv_0(gs, o) + ss[r][m]);
      }
  }
  for (ulong c = cv; c < c1; c++) {
    if (want_w) gw[gw_off + c] = gw[gw_off + c] + tw[c - cv];
    if (want_b) gb[gb_off + c] = gb[gb_off + c] + tb[c - cv];
    for (int r = 0; r < CE_PSEGS; r++)
      if (seen[r]) {
        const ulong o = gs_off + (ulong)r * gs_ld + c;
        gs[o] = gs[o] + ts[r][c - cv];
      }
  }
}
#else
__kernel void ce_norm_params(CE_PARAMS_ARGS) {
  CE_PARAMS_HEAD
  for (ulong c = c0; c < c1; c++) {
    float sw = first ? 0.0f : acc[ACC_W(c)], sb = first ? 0.0f : acc[ACC_B(c)], ss[CE_PSEG_DIM];
    for (int r = 0; r < CE_PSEGS; r++) ss[r] = first ? 0.0f : acc[ACC_S(r, c)];
    for (ulong i = t0; i < t1; i++) {
      CE_NORM_TOKEN(i, 0)
      __global const GRAD_T *grow = GRAD_ROW(i);
      const ulong e0 = i * cols;
      float g;
      CE_G1(c, g);
      if (want_b) sb = sb + g;
      if (want_x) {
        const float4 st_ = vload4(i, stats);
        const float mean = st_.s0, rstd = st_.s1, A = st_.s2, B = st_.s3;
        (void)mean;
        (void)A;
        float x;
        CE_X1(c, x);
        const float xh = CE_XH(x);
        if (want_w) sw = sw + g * xh;
        const int sg = CE_PSEG(sr_);
        if (sg >= 0) {
          const float h = CE_H1(c, g);
          ss[sg] = ss[sg] + CE_DX(h, xh);
          seen[sg] = 1;
        }
      }
    }
    if (!last) {
      acc[ACC_W(c)] = sw;
      acc[ACC_B(c)] = sb;
      for (int r = 0; r < CE_PSEGS; r++) acc[ACC_S(r, c)] = ss[r];
      continue;
    }
    if (want_w) gw[gw_off + c] = gw[gw_off + c] + sw;
    if (want_b) gb[gb_off + c] = gb[gb_off + c] + sb;
    for (int r = 0; r < CE_PSEGS; r++)
      if (seen[r]) gs[gs_off + (ulong)r * gs_ld + c] = gs[gs_off + (ulong)r * gs_ld + c] + ss[r];
  }
  if (!last)
    for (int r = 0; r < CE_PSEGS; r++) acc_seen[r] = seen[r] ? 1.0f : 0.0f;
}
#endif
#endif /* NORM != 0 */
