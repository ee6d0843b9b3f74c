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
 *                     vectors; where CE_PREFETCH is 1 the table row AHEAD
 *                     tokens on is asked for during the first pass;
 *   ce_norm_bwd, ce_norm_bwd_rows   the backward's rows in the same two shapes.
 * The norm's passes over a row recompute x from the tables (from the cache:
 * the row was just read) rather than keep it, so a row of any width takes no
 * memory; every shape does the same float operations in the same order and
 * so gives the same bits.
 * Build options: TABLE_DT, OUT_DT, POSITIONS (0 none, 1 sinusoid, 2 table),
 * POS_DT, SEGMENTS (0/1), SEG_DT, NORM (0 none, 1 layer, 2 rms), HAS_W, HAS_B
 * (the norm's weight and bias, 0/1), DROPOUT, VEC;
 * the CPU shapes ROWS, STREAM and AHEAD; the backward GRAD_DT and GXH (0/1:
 * write g * xh). */

#ifndef ROWS
#define ROWS 1
#endif
#ifndef STREAM
#define STREAM 0
#endif
#ifndef AHEAD
#define AHEAD 0
#endif
#ifndef GXH
#define GXH 0
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
 * token's row, so no launch leaves rows to another). */
#define TABLE_ROW(r) table_ptr(CE_AT(table, (ulong)(r)), CE_OFF(table, t_off, t_ld, (ulong)(r)))
#define OUT_ROW(i) (CE_AT(out, (ulong)(i)) + CE_OFF(out, o_off, o_ld, (ulong)(i)))
#define GRAD_ROW(i) (CE_AT(grad, (ulong)(i)) + CE_OFF(grad, g_off, g_ld, (ulong)(i)))

/* What every kernel takes: the forward's inputs and options. */
#define CE_NORM_IN_ARGS                                                                                        \
  __global const TABLE_T *table, ulong t_off CE_PIECE_PARAMS(const TABLE_T, table), ulong t_ld, ulong t_rows, \
      __global const int *ids32, __global const long *ids64, ulong id_off, int id64, ulong n, ulong cols,     \
      float scale, int policy, long padding, __global const float *freq, __global const POS_T *ptab,          \
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
  long sr_ = has_sid ? ce_token_row(sid32, sid64, sid64f, sid_off, (i), s_rows, policy, -1, err, sslot, (report)) \
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
 * (VEC columns, or one) keep a row's x in the private row xs_ when the host
 * sets SCRATCH (the longest row that fits): the first pass puts it there
 * (CE_PUT), the later passes get it back (CE_GET) instead of recomputing it;
 * F: the steps of a full row (CE_XVF), or not. The same values either way. */
#ifndef SCRATCH
#define SCRATCH 0
#endif
#if SCRATCH
/* a vector at c, a multiple of VEC, is aligned: whole stores, no vstore */
#define CE_SCRATCH_DECL float xs_[SCRATCH] __attribute__((aligned(4 * VEC)));
#define CE_PUTV(c, t) *(FV *)(xs_ + (c)) = (t)
#define CE_PUT1(c, t) xs_[c] = (t)
#define CE_GETV(F, c, x) x = *(const FV *)(xs_ + (c))
#define CE_GET1(c, x) x = xs_[c]
#else
#define CE_SCRATCH_DECL
#define CE_PUTV(c, t)
#define CE_PUT1(c, t)
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
/* CPU: the first pass (x, or x^2 for RMS), putting x aside */
#define CE_SX1P(c, t) \
  do {                \
    CE_X1(c, t);      \
    CE_PUT1(c, t);    \
  } while (0)
#define CE_SQ1P(c, t) \
  do {                \
    CE_X1(c, t);      \
    CE_PUT1(c, t);    \
    t = t * t;        \
  } while (0)
#define CE_SXV_(XV, c, t) \
  do {                    \
    XV(c, t);             \
    CE_PUTV(c, t);        \
  } while (0)
#define CE_SQV_(XV, c, t) \
  do {                    \
    XV(c, t);             \
    CE_PUTV(c, t);        \
    t = t * t;            \
  } while (0)
#define CE_SXV(c, t) CE_SXV_(CE_XV, c, t)
#define CE_SXVF(c, t) CE_SXV_(CE_XVF, c, t)
#define CE_SQV(c, t) CE_SQV_(CE_XV, c, t)
#define CE_SQVF(c, t) CE_SQV_(CE_XVF, c, t)
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

/* The row's statistics: mean (LAYER; 0 for RMS) and rstd, from the row sums
 * of the CPU shapes (CE_ROWSUMV, with the vector steps of a full row when
 * `full`) or the GPU shape (CE_ROWSUM_G). */
#if NORM == 1
#define CE_NORM_STATS_CPU_(F)                      \
  {                                                       \
    float s1_, s2_;                                       \
    CE_ROWSUMV(s1_, CE_SXV##F, CE_SX1P)            \
    mean = s1_ * inv_d;                                   \
    CE_ROWSUMV(s2_, CE_DEVV##F, CE_DEV1G)      \
    rstd = ce_rsqrt_fixed(s2_ * inv_d + eps);             \
  }
#define CE_NORM_STATS_GPU                                 \
  float mean, rstd, s1_, s2_;                             \
  CE_ROWSUM_G(s1_, CE_SX1)                                \
  mean = s1_ * inv_d;                                     \
  CE_ROWSUM_G(s2_, CE_DEV1)                               \
  rstd = ce_rsqrt_fixed(s2_ * inv_d + eps);
#elif NORM == 2
#define CE_NORM_STATS_CPU_(F)                      \
  {                                                       \
    float s2_;                                            \
    CE_ROWSUMV(s2_, CE_SQV##F, CE_SQ1P)            \
    rstd = ce_rsqrt_fixed(s2_ * inv_d + eps);             \
  }
#define CE_NORM_STATS_GPU                                 \
  float mean = 0.0f, rstd, s2_;                           \
  CE_ROWSUM_G(s2_, CE_SQ1)                                \
  rstd = ce_rsqrt_fixed(s2_ * inv_d + eps);
#else
#define CE_NORM_STATS_CPU_(F)
#define CE_NORM_STATS_GPU
#endif
/* mean and rstd of the CPU shapes (full: the loops without tests) */
#define CE_NORM_STATS_CPU             \
  float mean = 0.0f, rstd = 1.0f;            \
  if (full) CE_NORM_STATS_CPU_(F)     \
  else CE_NORM_STATS_CPU_()

/* ------------------------------------------------------------------ keys */

/* Resolves every token's id, position and segment id as the forward does
 * (reporting the bad ones) and writes, when asked, its position and its
 * segment row (-1 for none) as the keys of the backward's folds. */
__kernel void ce_norm_keys(CE_NORM_IN_ARGS, __global long *pos_keys, int want_pos, __global long *seg_keys,
                           int want_seg) {
  ulong i = get_global_id(0);
  if (i >= n) return;
  CE_NORM_TOKEN(i, 1)
  (void)trow;
#if POSITIONS != 0
  if (want_pos) pos_keys[i] = pok ? (long)pp : -1;
#endif
#if SEGMENTS
  if (want_seg) seg_keys[i] = sok ? sr_ : -1;
#endif
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

/* AHEAD (where CE_PREFETCH is 1): before it starts, a work-item asks for the
 * table rows of its own tokens (all at once: several rows on their way
 * together) and of the work-item about AHEAD tokens on (max(1, AHEAD / ROWS)
 * items on), into the second-level cache. */
#if AHEAD
inline void ce_norm_prefetch_item(ulong g, int strided, ulong seq_len, __global const int *ids32,
                                  __global const long *ids64, int id64, ulong id_off, ulong n,
                                  __global const TABLE_T *table, ulong t_off CE_PIECE_PARAMS(const TABLE_T, table),
                                  ulong t_ld, ulong t_rows, ulong bytes) {
  ulong tstep, t0 = ce_norm_first(g, strided, seq_len, &tstep);
  for (int k = 0; k < ROWS; k++) {
    ulong i = t0 + (ulong)k * tstep;
    if (i >= n) break;
    long id = ce_load_id(ids32, ids64, id64, id_off + i);
    if (id < 0 || (ulong)id >= t_rows) continue;
    __global const uchar *p = (__global const uchar *)TABLE_ROW(id);
    for (ulong o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 2);
  }
}
#define CE_NORM_AHEAD(g)                                                                                        \
  {                                                                                                             \
    const ulong bytes_ = (ulong)((__global const uchar *)table_ptr(table, cols) - (__global const uchar *)table); \
    const ulong lead_ = AHEAD / ROWS > 1 ? AHEAD / ROWS : 1;                                                    \
    ce_norm_prefetch_item((g), strided, seq_len, ids32, ids64, id64, id_off, n, table,                          \
                          t_off CE_PIECE_PASS(table), t_ld, t_rows, bytes_);                                    \
    ce_norm_prefetch_item((g) + lead_, strided, seq_len, ids32, ids64, id64, id_off, n, table,                  \
                          t_off CE_PIECE_PASS(table), t_ld, t_rows, bytes_);                                    \
  }
#else
#define CE_NORM_AHEAD(g)
#endif

/* The output's whole vectors of a row (F: a full row's steps): x from the
 * scratch row after the norm's passes, else computed here. */
#if NORM == 0
#define CE_NORM_OUT_XV(F, c, x) CE_XV##F(c, x)
#define CE_NORM_OUT_X1(c, x) CE_X1(c, x)
#else
#define CE_NORM_OUT_XV(F, c, x) CE_GETV(F, c, x)
#define CE_NORM_OUT_X1(c, x) CE_GET1(c, x)
#endif
#define CE_NORM_OUT_LOOP(F)                 \
  for (ulong c = 0; c < cv; c += VEC) {     \
    FV x;                                   \
    CE_NORM_OUT_XV(F, c, x);                \
    FV y = CE_YV(c, x);                     \
    CE_DROPV(y, e0 + c);                    \
    if (nt)                                 \
      stream_outv(orow, c, y);              \
    else                                    \
      store_outv(orow, c, y);               \
  }

__kernel void ce_norm_rows(CE_NORM_IN_ARGS, __global OUT_T *out, ulong o_off CE_PIECE_PARAMS(OUT_T, out), ulong o_ld,
                           int strided) {
  CE_NORM_TOKENS(get_global_id(0))
  CE_SCRATCH_DECL
  CE_NORM_AHEAD(get_global_id(0))
  for (int k = 0; k < ROWS; k++) {
    ulong i = t0 + (ulong)k * tstep;
    if (i >= n) return;
    CE_NORM_TOKEN(i, 1)
    const int full = CE_FULL;
#if NORM != 0
    CE_NORM_STATS_CPU
#endif
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

/* -------------------------------------------------------------- backward */

/* The rows of the backward with a norm (NORM 1 or 2): for token i, g the
 * masked gradient, h = g * weight, A = sum(h) * r, B = sum(h * xh) * r, then
 * dx = rstd * ((h - A) - xh * B) (RMS: rstd * (h - xh * B)) into dx, and with
 * GXH g * xh into gxh (both dense, cols wide, F32). */
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
 * in a second one (gs_) for the last pass. */
#if SCRATCH
#define CE_GSCRATCH_DECL float gs_[SCRATCH] __attribute__((aligned(4 * VEC)));
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
                          __global float *gxh, __local float *part_all) {
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
  for (ulong c = lx; c < cols; c += LX) {
    float x, g;
    CE_X1(c, x);
    CE_G1(c, g);
    float xh = CE_XH(x), h = CE_H1(c, g);
    dx[e0 + c] = CE_DX(h, xh);
#if GXH
    gxh[e0 + c] = g * xh;
#endif
  }
}

/* dx (and g * xh) of a row's whole vectors, x from XV. */
#if GXH
#define CE_NORM_GXHV(c, g, xh) ce_storev_0(gxh, e0 + (c), (g) * (xh))
#else
#define CE_NORM_GXHV(c, g, xh)
#endif
#define CE_NORM_DX_LOOP(F)                           \
  for (ulong c = 0; c < cv; c += VEC) {              \
    FV x, g;                                         \
    CE_GETV(F, c, x);                                \
    CE_GGETV(c, g);                                  \
    FV xh = CE_XH(x), h = CE_HV(c, g);               \
    ce_storev_0(dx, e0 + c, CE_DX(h, xh));           \
    CE_NORM_GXHV(c, g, xh);                          \
  }

__kernel void ce_norm_bwd_rows(CE_NORM_IN_ARGS, __global const GRAD_T *grad,
                               ulong g_off CE_PIECE_PARAMS(const GRAD_T, grad), ulong g_ld, __global float *dx,
                               __global float *gxh, int strided) {
  CE_NORM_TOKENS(get_global_id(0))
  CE_SCRATCH_DECL
  CE_GSCRATCH_DECL
  CE_NORM_AHEAD(get_global_id(0))
  for (int k = 0; k < ROWS; k++) {
    ulong i = t0 + (ulong)k * tstep, e0 = i * cols;
    if (i >= n) return;
    CE_NORM_TOKEN(i, 0)
    const int full = CE_FULL;
    __global const GRAD_T *grow = GRAD_ROW(i);
    CE_NORM_STATS_CPU
    float sa, sb;
    if (full)
      CE_ROWSUM2V(sa, sb, CE_ABVF, CE_AB1C)
    else
      CE_ROWSUM2V(sa, sb, CE_ABV, CE_AB1C)
    float A = sa * inv_d, B = sb * inv_d;
    (void)A;
    const ulong cv = cols / VEC * VEC;
    if (full)
      CE_NORM_DX_LOOP(F)
    else
      CE_NORM_DX_LOOP()
    for (ulong c = cv; c < cols; c++) {
      float x, g;
      CE_GET1(c, x);
      CE_GGET1(c, g);
      float xh = CE_XH(x), h = CE_H1(c, g);
      dx[e0 + c] = CE_DX(h, xh);
#if GXH
      gxh[e0 + c] = g * xh;
#endif
    }
  }
}
#endif /* NORM != 0 */
