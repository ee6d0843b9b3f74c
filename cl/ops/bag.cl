/* bag.cl: bags of ids pooled per sample (EmbeddingBag), any number of
 * features in one launch; the contributions of the bag backward (keys and
 * records for the segment fold of backward.cl); the per_sample_weights
 * gradient; renorm (max_norm). OpenCL C 1.2; cl/lib/ files come first.
 *
 * Features. A launch serves features f0 .. f0 + nf - 1 of a descriptor `fd`
 * (BF_COUNT ulongs per feature; the field indices BF_* come from src/ops/bag.h's
 * one list as -D options) and up to CE_BAG_BUFS buffers b0 .. b15: a feature
 * names the buffer of its table, ids, offsets, per_sample_weights and max_rows
 * by its index among them (CE_BAG_NONE: absent) and its elements by offsets.
 * ce_bag_load turns a feature's fields into typed pointers (ce_bag_feat).
 *
 * Forward, one kernel per shape, the same float32 operations in the same
 * order (so the same bits), per output column over the bag's ids in ascending
 * order (src/ops/bag_forward.c and include/clembed.h give the contract):
 *   ce_bag_rows  (CPU) a work-item per bag, every feature of the launch in
 *                turn, or (ce_bag_rows_by_feature, bag_by_feature 1) per bag
 *                and feature, a feature's bags on consecutive items; whole
 *                rows BAG_TILE vectors of VEC columns at a time (accumulators in
 *                registers), the bag's ids ROWS at a time: the group's rows
 *                found first and read side by side, each vector adding them
 *                in ascending order without a branch; the row of the id
 *                BAG_AHEAD on asked for (CE_PREFETCH); with BAG_PLAIN, a bag of
 *                plain ids a row at a time (CE_BAG_PLAIN)
 *   ce_bag_cols  (GPU) work-item (x, bag): x a chunk of VEC columns of one
 *                feature (consecutive items on consecutive columns)
 * The work-item that holds a feature's first columns (chunk 0) reports its bad
 * ids and offsets; a feature of 0 columns gets a chunk that only checks.
 *
 * Backward (src/ops/bag_train.c; the fold is backward.cl's with -DBAG=1):
 *   ce_bag_counts   checks the offsets; MEAN: each bag's count of taken ids
 *   ce_bag_keys     one entry per id: the sort key (its row, or `none`), and the
 *                   record the fold reads (the gradient row and the kind)
 *   ce_bag_gather_max  MAX: the features' max_rows as one I64 array
 *   ce_bag_grad_weights  grad_weights
 *   ce_bag_record   devices without 64-bit atomics: the bad values
 * Tables in more buffers than a launch takes: util.cl's ce_gather (their rows,
 * in id order, into one buffer, which the pooling reads), ce_bag_gather_rows
 * (MAX's max_rows from the gathered positions).
 * Renorm: ce_renorm_keys, then the sort, then ce_renorm_rows (a row per segment).
 *
 * Build options: OUT_DT, GRAD_DT dtype codes; TABLE_DT, the dtype code of
 * the table every feature of the launch reads (src/ops/bag.c's launches each
 * read one table dtype, any of the dtype list's: the pooling is written once,
 * for it, with no switch over dtypes; renorm's table too, a float one); MODES
 * (a bit per pooling the launch's features use: the others are left out); VEC, BAG_TILE, ROWS (1 to 16; the GPU shape 1), BAG_AHEAD,
 * BAG_PLAIN; KEY64;
 * BF_* and BF_COUNT; BAG_REMAP (1: a feature reads its ids through a pruned
 * table's remap, BF_RM); BAG_SPLIT (1: a feature's table lies in several of the
 * launch's buffers, BF_TAB_NP pieces
 * listed from fd[BF_TAB_P] on, holding its rows [BF_TAB_LO, BF_TAB_HI)); the
 * out and renorm's tab may be split (CE_PIECES_out, CE_PIECES_tab). */

#ifndef OUT_DT
#define OUT_DT 0
#endif
#ifndef GRAD_DT
#define GRAD_DT 0
#endif
#ifndef TABLE_DT
#define TABLE_DT 0
#endif
#ifndef BAG_TILE
#define BAG_TILE 1
#endif
#ifndef BAG_SPLIT
#define BAG_SPLIT 0
#endif
#ifndef BAG_AHEAD
#define BAG_AHEAD 0
#endif
#ifndef BAG_PLAIN
#define BAG_PLAIN 0
#endif
#ifndef ROWS
#define ROWS 1
#endif
#ifndef BAG_REMAP
#define BAG_REMAP 0
#endif
#ifndef MODES
#define MODES 7
#endif
#if KEY64
#define KEY_T ulong
#else
#define KEY_T uint
#endif

#define OUT_T CE_XCAT(CE_STORE_, OUT_DT)
#define store_out CE_XCAT(ce_store_, OUT_DT)
#define store_outv CE_XCAT(ce_storev_, OUT_DT)
#define GRAD_T CE_XCAT(CE_STORE_, GRAD_DT)
#define load_grad CE_XCAT(ce_load_, GRAD_DT)
#define TABLE_T CE_XCAT(CE_STORE_, TABLE_DT)
#define load_table CE_XCAT(ce_load_, TABLE_DT)
#define store_table CE_XCAT(ce_store_, TABLE_DT)
#define IV CE_XCAT(int, VEC)

/* clembed_bag_mode, and the kinds of a record's aux word (backward.cl) */
#define CE_BAG_SUM 0
#define CE_BAG_MEAN 1
#define CE_BAG_MAX 2
#define CE_BAG_NONE 0xFFu       /* a buffer index: absent */
#define CE_BAG_NO_ARG 0xFFFFFFFFu /* MAX: no id taken yet */
#define CE_BAG_BUFS 16

#define CE_BAG_BUF_PARAMS                                                                                      \
  __global uchar *b0, __global uchar *b1, __global uchar *b2, __global uchar *b3, __global uchar *b4,          \
      __global uchar *b5, __global uchar *b6, __global uchar *b7, __global uchar *b8, __global uchar *b9,      \
      __global uchar *b10, __global uchar *b11, __global uchar *b12, __global uchar *b13, __global uchar *b14, \
      __global uchar *b15
/* The arguments every bag kernel starts with (src/ops/bag.c sets them once). */
#define CE_BAG_ARGS __global const ulong *fd, uint f0, uint nf, ulong bags, __global uint *err, CE_BAG_BUF_PARAMS
#define CE_BAG_BUFS_ARRAY                                                                                      \
  __global uchar *bufs_[CE_BAG_BUFS] = {b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15}

/* One feature, as its descriptor gives it. */
typedef struct ce_bag_feat {
  __global const uchar *tab;
  ulong t_off, t_ld, t_rows, cols;
  int dtype;
  __global const int *ids32;
  __global const long *ids64;
  ulong id_off, n;
  int id64;
  __global const int *of32;
  __global const long *of64;
  ulong of_off;
  int of64f, has_of;
  __global const float *w;
  ulong w_off, w_ld;
  int has_w;
  __global int *mr32;
  __global long *mr64;
  ulong mr_off;
  int mr64f, has_mr;
  int mode, policy;
  long padding;
  ulong col0;
  uint slot;
  int report;
#if BAG_REMAP
  __global const int *rm32;   /* a pruned table's remap (has_rm), rm_rows entries */
  __global const long *rm64;
  ulong rm_off, rm_rows;
  int rm64f, has_rm;
#endif
#if BAG_SPLIT
  ulong np, t_lo, t_hi;       /* the table's pieces in this launch, the rows they hold [t_lo, t_hi) */
  __global const ulong *pl;   /* np triples: buffer index, first row, element of that row */
  __global uchar **bufs;
#endif
} ce_bag_feat;

#define FD(f, k) fd[(ulong)(f) * BF_COUNT + (k)]

CE_INLINE __global uchar *ce_bag_buf(__global uchar **bufs, ulong s) { return bufs[s < CE_BAG_BUFS ? s : 0]; }

CE_INLINE void ce_bag_load(ce_bag_feat *F, __global const ulong *fd, ulong f, __global uchar **bufs) {
  F->tab = ce_bag_buf(bufs, FD(f, BF_TAB));
  F->t_off = FD(f, BF_TAB_OFF);
  F->t_ld = FD(f, BF_TAB_LD);
  F->t_rows = FD(f, BF_TAB_ROWS);
  F->cols = FD(f, BF_COLS);
  F->dtype = (int)FD(f, BF_DTYPE);
  __global uchar *ib = ce_bag_buf(bufs, FD(f, BF_IDS));
  F->ids32 = (__global const int *)ib;
  F->ids64 = (__global const long *)ib;
  F->id_off = FD(f, BF_IDS_OFF);
  F->n = FD(f, BF_IDS_N);
  F->id64 = (int)FD(f, BF_IDS64);
  F->has_of = FD(f, BF_OFFS) != CE_BAG_NONE;
  __global uchar *ob = ce_bag_buf(bufs, FD(f, BF_OFFS));
  F->of32 = (__global const int *)ob;
  F->of64 = (__global const long *)ob;
  F->of_off = FD(f, BF_OFFS_OFF);
  F->of64f = (int)FD(f, BF_OFFS64);
  F->has_w = FD(f, BF_W) != CE_BAG_NONE;
  F->w = (__global const float *)ce_bag_buf(bufs, FD(f, BF_W));
  F->w_off = FD(f, BF_W_OFF);
  F->w_ld = FD(f, BF_W_LD);
  F->has_mr = FD(f, BF_MR) != CE_BAG_NONE;
  __global uchar *mb = ce_bag_buf(bufs, FD(f, BF_MR));
  F->mr32 = (__global int *)mb;
  F->mr64 = (__global long *)mb;
  F->mr_off = FD(f, BF_MR_OFF);
  F->mr64f = (int)FD(f, BF_MR64);
  F->mode = (int)FD(f, BF_MODE);
  F->policy = (int)FD(f, BF_POLICY);
  F->padding = (long)FD(f, BF_PADDING);
  F->col0 = FD(f, BF_COL0);
  F->slot = (uint)FD(f, BF_ERR);
  F->report = (int)FD(f, BF_REPORT);
#if BAG_REMAP
  F->has_rm = FD(f, BF_RM) != CE_BAG_NONE;
  __global uchar *rb = ce_bag_buf(bufs, FD(f, BF_RM));
  F->rm32 = (__global const int *)rb;
  F->rm64 = (__global const long *)rb;
  F->rm_off = FD(f, BF_RM_OFF);
  F->rm64f = (int)FD(f, BF_RM64);
  F->rm_rows = FD(f, BF_RM_ROWS);
#endif
#if BAG_SPLIT
  F->np = FD(f, BF_TAB_NP);
  F->t_lo = FD(f, BF_TAB_LO);
  F->t_hi = FD(f, BF_TAB_HI);
  F->pl = fd + FD(f, BF_TAB_P);
  F->bufs = bufs;
#endif
}

/* The buffer that holds table row `row` (of the launch's pieces), and in *off
 * the element of its column 0 there: the last piece whose first row is at
 * most row. */
CE_INLINE __global const uchar *ce_bag_tabrow(const ce_bag_feat *F, ulong row, ulong *off) {
#if BAG_SPLIT
  if (F->np > 1) {
    ulong k = F->np - 1;
    while (k > 0 && F->pl[3 * k + 1] > row) k--;
    *off = F->pl[3 * k + 2] + (row - F->pl[3 * k + 1]) * F->t_ld;
    return ce_bag_buf(F->bufs, F->pl[3 * k]);
  }
#endif
  *off = F->t_off + row * F->t_ld;
  return F->tab;
}

/* The last of the launch's features whose `field` (BF_CHUNK0, BF_E0: starts
 * that do not decrease) is at most x. */
CE_INLINE uint ce_bag_find(__global const ulong *fd, uint f0, uint nf, uint field, ulong x) {
  uint lo = 0, hi = nf - 1;
  while (lo < hi) {
    uint mid = lo + (hi - lo + 1) / 2;
    if (FD(f0 + mid, field) <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* offsets[i] */
CE_INLINE long ce_bag_off(const ce_bag_feat *F, ulong i) {
  return ce_load_id(F->of32, F->of64, F->of64f, F->of_off + i);
}

/* Id j's row under the feature's policy (-1: left out; through a pruned
 * table's remap, CE_PRUNED for a pruned id); reported when `report`. */
CE_INLINE long ce_bag_row(const ce_bag_feat *F, ulong j, __global uint *err, int report) {
#if BAG_REMAP
  if (F->has_rm)
    return ce_token_row_rm(F->ids32, F->ids64, F->id64, F->id_off, j, F->t_rows, F->policy, F->padding, err,
                           F->slot, report && F->report, F->rm32, F->rm64, F->rm_off, F->rm64f, F->rm_rows);
#endif
  return ce_token_row(F->ids32, F->ids64, F->id64, F->id_off, j, F->t_rows, F->policy, F->padding, err, F->slot,
                      report && F->report);
}

/* Id j's row for a prefetch hint (unchecked: a bad one is outside [0, t_rows)). */
CE_INLINE long ce_bag_hint_row(const ce_bag_feat *F, ulong j) {
#if BAG_REMAP
  if (F->has_rm) return ce_bag_row(F, j, (__global uint *)0, 0);
#endif
  return ce_load_id(F->ids32, F->ids64, F->id64, F->id_off + j);
}

/* Bag b's ids [lo, hi) (b < bags): its offsets clamped into [0, n], each on
 * its own (hi not below lo), or the b-th run of n / bags ids. */
CE_INLINE void ce_bag_range(const ce_bag_feat *F, ulong b, ulong bags, ulong *lo, ulong *hi) {
  if (F->has_of) {
    long n = (long)F->n, a = ce_bag_off(F, b), z = ce_bag_off(F, b + 1);
    a = clamp(a, (long)0, n);
    z = clamp(z, a, n);
    *lo = (ulong)a;
    *hi = (ulong)z;
  } else {
    ulong len = F->n / bags;
    *lo = b * len;
    *hi = *lo + len;
  }
}

/* The offsets that bag b's work-item answers for: position b + 1, and 0 for
 * bag 0 (with no bags, offsets[0] alone, which must be 0 and the number of
 * ids). A bad one is reported with its position and value (kind 1). */
CE_INLINE void ce_bag_check_offsets(const ce_bag_feat *F, ulong b, ulong bags, __global uint *err) {
  if (!F->has_of || !F->report) return;
  long n = (long)F->n;
  if (b == 0) {
    long v = ce_bag_off(F, 0);
    if (v != 0 || (bags == 0 && v != n)) ce_report(err, F->slot, 1, 0, v);
  }
  if (b < bags) {
    long a = ce_bag_off(F, b), v = ce_bag_off(F, b + 1);
    if (v < 0 || v < a || v > n || (b + 1 == bags && v != n)) ce_report(err, F->slot, 1, b + 1, v);
  }
}

/* The bag of id j (j < n, bags > 0): the last bag whose offset is at most j
 * (with good offsets the one holding j; with bad ones some bag), or j / (n /
 * bags) for fixed bags. The bag where j would be with bags of equal sizes is
 * tried first (two loads where they nearly are; a binary search else). */
CE_INLINE ulong ce_bag_of(const ce_bag_feat *F, ulong j, ulong bags) {
  if (!F->has_of) return j / (F->n / bags);
  ulong g = min((ulong)((float)j * ((float)bags / (float)max(F->n, (ulong)1))), bags - 1);
  if (ce_bag_off(F, g) <= (long)j && (g + 1 == bags || ce_bag_off(F, g + 1) > (long)j)) return g;
  ulong lo = 0, hi = bags - 1;
  while (lo < hi) {
    ulong mid = lo + (hi - lo + 1) / 2;
    if (ce_bag_off(F, mid) <= (long)j)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* --------------------------------------------------------- the pooling */

/* A weighted bag's step fma(w, t, a), with a product of an exact zero (w or t
 * zero) added as a + w * t instead: the same value in IEEE arithmetic (the
 * product is exact, so the one rounding is the sum's), and a zero's sign as
 * the contract gives it where a compiler folds fma's addend of +0 away
 * (fma(-0.75f, 0.0f, +0.0f) must be +0, not the product's -0). */
CE_INLINE float ce_bag_fma(float w, float t, float a) { return w == 0.0f || t == 0.0f ? a + w * t : fma(w, t, a); }
CE_INLINE FV ce_bag_fmav(FV w, FV t, FV a) {
  return select(fma(w, t, a), a + w * t, (w == (FV)(0.0f)) | (t == (FV)(0.0f)));
}

/* One id's value t of one column (T float) or of VEC columns (T FV) into its
 * accumulator A (and, under MAX, the position G of the id that gave it), as
 * the first taken id (`first`) or a later one:
 *   SUM     A = A + t        weighted: A = fma(w, t, A)
 *   MAX     the first sets A; then t replaces A when t > A, or when t is NaN and A
 *           is not (so a NaN stays, the first one)
 * (`t > A`, isnan and select give -1/0 lanes for vectors and 1/0 for a scalar,
 * which select reads alike: one text for both.) */
#define CE_BAG_MAXSTEP(A, G, t, J, MT, first)                   \
  if (first) {                                                  \
    A = t;                                                      \
    G = J;                                                      \
  } else {                                                      \
    MT take_ = (t > A) | (isnan(t) & !isnan(A));                \
    A = select(A, t, take_);                                    \
    G = select(G, J, take_);                                    \
  }

/* The lanes of a pass and the rows of a group written out by the
 * preprocessor, M(k, D) for k = 0 .. n - 1 (CE_Ln: n lanes, CE_Rn: n rows;
 * two texts, since a macro does not expand inside itself), each guarded by a
 * condition on k that is known when compiling: no loop inside the loop over a
 * bag's ids, so the accumulators stay in registers whatever the compiler
 * unrolls (and Mesa's llvmpipe, which ends a work-item's loops after 65,535
 * iterations in all, counts one per group of ids). */
#if BAG_TILE > 16 || VEC > 16 || ROWS > 16 || ROWS < 1
#error "bag.cl writes out at most 16 lanes of a pass and 16 rows of a group: BAG_TILE, VEC and ROWS are 1 to 16"
#endif
#define CE_L1(M, D) M(0, D)
#define CE_L2(M, D) CE_L1(M, D) M(1, D)
#define CE_L3(M, D) CE_L2(M, D) M(2, D)
#define CE_L4(M, D) CE_L3(M, D) M(3, D)
#define CE_L5(M, D) CE_L4(M, D) M(4, D)
#define CE_L6(M, D) CE_L5(M, D) M(5, D)
#define CE_L7(M, D) CE_L6(M, D) M(6, D)
#define CE_L8(M, D) CE_L7(M, D) M(7, D)
#define CE_L9(M, D) CE_L8(M, D) M(8, D)
#define CE_L10(M, D) CE_L9(M, D) M(9, D)
#define CE_L11(M, D) CE_L10(M, D) M(10, D)
#define CE_L12(M, D) CE_L11(M, D) M(11, D)
#define CE_L13(M, D) CE_L12(M, D) M(12, D)
#define CE_L14(M, D) CE_L13(M, D) M(13, D)
#define CE_L15(M, D) CE_L14(M, D) M(14, D)
#define CE_L16(M, D) CE_L15(M, D) M(15, D)
#define CE_R1(M, D) M(0, D)
#define CE_R2(M, D) CE_R1(M, D) M(1, D)
#define CE_R3(M, D) CE_R2(M, D) M(2, D)
#define CE_R4(M, D) CE_R3(M, D) M(3, D)
#define CE_R5(M, D) CE_R4(M, D) M(4, D)
#define CE_R6(M, D) CE_R5(M, D) M(5, D)
#define CE_R7(M, D) CE_R6(M, D) M(6, D)
#define CE_R8(M, D) CE_R7(M, D) M(7, D)
#define CE_R9(M, D) CE_R8(M, D) M(8, D)
#define CE_R10(M, D) CE_R9(M, D) M(9, D)
#define CE_R11(M, D) CE_R10(M, D) M(10, D)
#define CE_R12(M, D) CE_R11(M, D) M(11, D)
#define CE_R13(M, D) CE_R12(M, D) M(12, D)
#define CE_R14(M, D) CE_R13(M, D) M(13, D)
#define CE_R15(M, D) CE_R14(M, D) M(14, D)
#define CE_R16(M, D) CE_R15(M, D) M(15, D)
#define CE_BAG_EACH_V(M, D) CE_XCAT(CE_L, BAG_TILE)(M, D) /* a pass's vectors */
#define CE_BAG_EACH_T(M, D) CE_XCAT(CE_L, VEC)(M, D)  /* its tail columns (at most VEC - 1) */
#define CE_BAG_EACH_R(M, D) CE_XCAT(CE_R, ROWS)(M, D)  /* a group's rows */

/* vector k (of BAG_TILE, nv live) and tail column l (of VEC - 1, nt live) */
#define CE_BAG_V(k) if ((k) < BAG_TILE && (k) < nv)
#define CE_BAG_T(l) if ((l) < VEC - 1 && (l) < nt)
#define CE_BAG_TLOAD(l, D) CE_XCAT(ce_load_, D)(p, ct + (ulong)(l))
/* Row r's values of the vector from column cv_ into a_ (g_: MAX's
 * positions) where the row is taken (lanes m[r]: all -1 or all 0), without a
 * branch: SUM a_ + t, weighted fma(w, t, a_), MAX as CE_BAG_MAXSTEP (lanes
 * fm[r]: the first id taken) */
#define CE_BAG_RADD(r, D) \
  if ((r) < ROWS) a_ = select(a_, a_ + CE_XCAT(ce_loadv_, D)(pr[r], cv_), m[r]);
#define CE_BAG_RFMA(r, D) \
  if ((r) < ROWS) a_ = select(a_, ce_bag_fmav((FV)(w[r]), CE_XCAT(ce_loadv_, D)(pr[r], cv_), a_), m[r]);
#define CE_BAG_RMAX(r, D)                                                   \
  if ((r) < ROWS) {                                                         \
    const FV t_ = CE_XCAT(ce_loadv_, D)(pr[r], cv_);                        \
    const IV take_ = ((t_ > a_) | (isnan(t_) & !isnan(a_)) | fm[r]) & m[r];  \
    a_ = select(a_, t_, take_);                                             \
    g_ = select(g_, (UV)((uint)(j + (r))), take_);                          \
  }
/* Vector k of the pass: the group's rows in ascending order (the order of
 * the ids), its accumulator in a register meanwhile */
#define CE_BAG_VADD(k, D) \
  CE_BAG_V(k) { const ulong cv_ = c + (ulong)(k) * VEC; FV a_ = acc[k]; CE_BAG_EACH_R(CE_BAG_RADD, D) acc[k] = a_; }
#define CE_BAG_VFMA(k, D) \
  CE_BAG_V(k) { const ulong cv_ = c + (ulong)(k) * VEC; FV a_ = acc[k]; CE_BAG_EACH_R(CE_BAG_RFMA, D) acc[k] = a_; }
#define CE_BAG_VMAX(k, D)                                                                   \
  CE_BAG_V(k) {                                                                             \
    const ulong cv_ = c + (ulong)(k) * VEC;                                                 \
    FV a_ = acc[k];                                                                         \
    UV g_ = arg[k];                                                                         \
    CE_BAG_EACH_R(CE_BAG_RMAX, D)                                                           \
    acc[k] = a_;                                                                            \
    arg[k] = g_;                                                                            \
  }
/* tail column l of the row at p (one row a group) */
#define CE_BAG_TMAX(l, D) CE_BAG_T(l) { float t = CE_BAG_TLOAD(l, D); CE_BAG_MAXSTEP(tacc[l], targ[l], t, ju, int, first) }
#define CE_BAG_TFMA(l, D) CE_BAG_T(l) tacc[l] = ce_bag_fma(w0, CE_BAG_TLOAD(l, D), tacc[l]);
#define CE_BAG_TADD(l, D) CE_BAG_T(l) tacc[l] = tacc[l] + CE_BAG_TLOAD(l, D);

/* Row r of the group of ids from j: whether the id is the bag's and takes a
 * row (reported when `report`; m[r] its lanes), where that row is (row 0's
 * place for one that takes none: read, never added), its weight, and whether
 * it is the first taken (fm[r]) */
#define CE_BAG_RESOLVE(r, D)                                                                                 \
  if ((r) < ROWS) {                                                                                          \
    const long row_ = (r) == 0 || j + (r) < hi ? ce_bag_row(F, j + (r), err, report) : -1;                   \
    const int has_ = row_ >= 0;                                                                              \
    pr[r] = ce_bag_rowp_##D(F, has_ ? (ulong)row_ : 0, 0);                                                   \
    m[r] = (IV)(-has_);                                                                                      \
    fm[r] = (IV)(-(taken == 0));                                                                             \
    w[r] = weighted ? F->w[F->w_off + (j + (has_ ? (r) : 0)) * F->w_ld] : 0.0f;                               \
    some |= has_;                                                                                            \
    taken += has_;                                                                                           \
    CE_BAG_COUNT_PRUNED(row_)                                                                                \
  }
/* a pruned id counts in MEAN's count (FBGEMM divides by the bag's length) */
#if BAG_REMAP
#define CE_BAG_COUNT_PRUNED(row) pruned += (row) == CE_PRUNED;
#else
#define CE_BAG_COUNT_PRUNED(row)
#endif
/* A pruned table's remap entry of the id 2 * BAG_AHEAD on asked for, so that
 * the hint below finds the row of the id BAG_AHEAD on without waiting for it */
#if BAG_REMAP
#define CE_BAG_AHEAD_REMAP(r)                                                                                 \
  if (F->has_rm && j + (r) + 2 * BAG_AHEAD < F->n) {                                                          \
    const long u_ = ce_load_id(F->ids32, F->ids64, F->id64, F->id_off + j + (r) + 2 * BAG_AHEAD);              \
    if (u_ >= 0 && (ulong)u_ < F->rm_rows)                                                                    \
      ce_prefetch(F->rm64f ? (__global const uchar *)(F->rm64 + F->rm_off + (ulong)u_)                         \
                           : (__global const uchar *)(F->rm32 + F->rm_off + (ulong)u_));                       \
  }
#else
#define CE_BAG_AHEAD_REMAP(r)
#endif
/* With prefetch hints (BAG_TILE > 1): the pass's columns of the row of the id
 * BAG_AHEAD on from row r's (past the bag's end the next bag's, which the next
 * work-item pools) asked for */
#define CE_BAG_AHEAD(r, D)                                                                                    \
  if ((r) < ROWS && CE_PREFETCH && BAG_AHEAD && BAG_TILE > 1 && j + (r) + BAG_AHEAD < F->n) {                               \
    CE_BAG_AHEAD_REMAP(r)                                                                                     \
    long id_ = ce_bag_hint_row(F, j + (r) + BAG_AHEAD);                                                         \
    if (id_ >= 0 && (ulong)id_ < F->t_rows) {                                                                 \
      __global const CE_STORE_##D *rp_ = ce_bag_rowp_##D(F, (ulong)id_, 0);                                  \
      __global const uchar *a_ = (__global const uchar *)ce_ptr_##D(rp_, c);                                  \
      __global const uchar *z_ = (__global const uchar *)ce_ptr_##D(rp_, ct + (ulong)nt);                     \
      for (; a_ < z_; a_ += 64) ce_prefetch(a_);                                                              \
    }                                                                                                         \
  }
/* The bag's ids ROWS at a time: the group's rows found first, then each
 * vector of the pass takes them in ascending order without a branch (the
 * loads of several rows independent of one another, so several are read at
 * once); with one row a group, the tail columns after the vectors (more rows:
 * CE_BAG_TAILS) */
#define CE_BAG_GROUPS(VFN, TFN, D)                                                                  \
  for (ulong j = lo; j < hi; j += ROWS) {                                                           \
    __global const CE_STORE_##D *pr[ROWS];                                                          \
    IV m[ROWS], fm[ROWS];                                                                           \
    float w[ROWS];                                                                                  \
    int some = 0;                                                                                   \
    const int first = taken == 0;                                                                   \
    CE_BAG_EACH_R(CE_BAG_RESOLVE, D)                                                                \
    if (!some) continue;                                                                            \
    CE_BAG_EACH_R(CE_BAG_AHEAD, D)                                                                  \
    CE_BAG_EACH_V(VFN, D)                                                                           \
    if (ROWS == 1 && nt) {                                                                          \
      __global const CE_STORE_##D *p = pr[0];                                                       \
      const uint ju = (uint)j;                                                                      \
      const float w0 = w[0];                                                                        \
      CE_BAG_EACH_T(TFN, D)                                                                         \
    }                                                                                               \
  }
/* More rows a group: the tail columns after the vectors, an id at a time */
#define CE_BAG_TAILS(TFN, D)                                                                        \
  for (ulong j = lo; j < hi; j++) {                                                                 \
    long row = ce_bag_row(F, j, err, 0);                                                            \
    if (row < 0) continue;                                                                          \
    __global const CE_STORE_##D *p = ce_bag_rowp_##D(F, (ulong)row, 0);                            \
    const uint ju = (uint)j;                                                                        \
    const int first = tail_taken == 0;                                                              \
    const float w0 = weighted ? F->w[F->w_off + j * F->w_ld] : 0.0f;                                 \
    CE_BAG_EACH_T(TFN, D)                                                                           \
    tail_taken++;                                                                                   \
  }

/* The poolings a launch compiles (MODES: bit 0 SUM and MEAN, bit 1 weighted
 * SUM, bit 2 MAX; the host sets the bits of its features' modes), each
 * written out ROWS x BAG_TILE times per dtype: less for the compiler to do */
#if MODES & 1
#define CE_BAG_IF_SUM(...) __VA_ARGS__
#else
#define CE_BAG_IF_SUM(...)
#endif
#if MODES & 2
#define CE_BAG_IF_W(...) __VA_ARGS__
#else
#define CE_BAG_IF_W(...)
#endif
#if MODES & 4
#define CE_BAG_IF_MAX(...) __VA_ARGS__
#else
#define CE_BAG_IF_MAX(...)
#endif

/* BAG_PLAIN (the CPU shape): a SUM, MEAN or weighted SUM bag whose ids are all
 * plain (in the table, not the padding row: every policy takes them as they
 * are, none is reported) in a table of one piece (any dtype) is pooled a row
 * at a time without the groups' masks, the row of the id BAG_AHEAD on asked for
 * a line with each vector (CE_BAG_PMIX), the tail columns after the row's
 * vectors; the same operations in the same order as CE_BAG_GROUPS (each
 * column's ids one by one in ascending order). The check is a first pass over
 * the bag's ids (once per bag, whatever the passes), which the pooling reads
 * again from the cache. A row is found
 * without ce_bag_tabrow's search over pieces (CE_BAG_PROW: the table's one
 * piece). */
#define CE_BAG_PROW(D, row) \
  ce_ptr_##D((__global const CE_STORE_##D *)F->tab, F->t_off + (ulong)(row) * F->t_ld)
#if BAG_PLAIN && CE_PREFETCH && BAG_AHEAD && BAG_TILE > 1
#define CE_BAG_PMIX(k) ce_prefetch(pa_ + min((ulong)(k) * pst, plast));
/* the bytes of the pass's columns in a row (row 0's, never read); the part a vector asks for */
#define CE_BAG_SPAN_DECL(D)                                                                              \
  const ulong pspan = (ulong)((__global const uchar *)ce_bag_rowp_##D(F, 0, ct + (ulong)nt) -            \
                              (__global const uchar *)ce_bag_rowp_##D(F, 0, c)),                         \
              pst = ce_prefetch_step(pspan, (ulong)nv), plast = max(pspan, (ulong)1) - 1;
#define CE_BAG_PAHEAD(D)                                                                                    \
  long ida_ = j + BAG_AHEAD < F->n ? ce_load_id(F->ids32, F->ids64, F->id64, F->id_off + j + BAG_AHEAD) : id_;        \
  ida_ = (ulong)ida_ < F->t_rows ? ida_ : id_;                                                              \
  __global const uchar *pa_ = (__global const uchar *)ce_ptr_##D(CE_BAG_PROW(D, ida_), c);
#else
#define CE_BAG_PMIX(k)
#define CE_BAG_SPAN_DECL(D)
#define CE_BAG_PAHEAD(D)
#endif
/* Vectors k and k + 1 (k even, BAG_TILE even: the pair's first column a multiple
 * of 2 * VEC) through one ce_loadw (a block type decodes its block's scales
 * once for both: the same operations as two ce_loadv, so the same bits); an
 * odd k was taken with k - 1, a last even one alone. OP(k, v) adds v into
 * vector k's accumulator. */
#define CE_BAG_PAIRS (BAG_TILE % 2 == 0)
#define CE_BAG_K1(k) ((k) + 1 < BAG_TILE ? (k) + 1 : (k))
#define CE_BAG_PLOAD2(k, D, OP)                                        \
  CE_BAG_V(k) {                                                        \
    if (CE_BAG_PAIRS && (k) % 2 == 0 && (k) + 1 < nv) {                \
      FV a_, z_;                                                       \
      CE_XCAT(ce_loadw_, D)(p, c + (ulong)(k) * VEC, a_, z_);          \
      OP(k, a_);                                                       \
      OP(CE_BAG_K1(k), z_);                                            \
      CE_BAG_PMIX(k)                                                   \
      CE_BAG_PMIX(CE_BAG_K1(k))                                        \
    } else if (!CE_BAG_PAIRS || (k) % 2 == 0) {                        \
      OP(k, CE_XCAT(ce_loadv_, D)(p, c + (ulong)(k) * VEC));           \
      CE_BAG_PMIX(k)                                                   \
    }                                                                  \
  }
#define CE_BAG_OPADD(k, v) acc[k] = acc[k] + (v)
#define CE_BAG_OPFMA(k, v) acc[k] = ce_bag_fmav((FV)(w0), (v), acc[k])
#define CE_BAG_PADD(k, D) CE_BAG_PLOAD2(k, D, CE_BAG_OPADD)
#define CE_BAG_PFMA(k, D) CE_BAG_PLOAD2(k, D, CE_BAG_OPFMA)
/* whether bag [lo, hi)'s ids are all plain */
CE_INLINE int ce_bag_plain(const ce_bag_feat *F, ulong lo, ulong hi) {
  int ok = 1;
#if BAG_REMAP
  if (F->has_rm) return 0; /* (its ids are not rows) */
#endif
  const ulong rows = F->t_rows;
  const long pad = F->padding;
  if (F->id64) /* (two loops: no test of the id width per id) */
    for (ulong j = lo; j < hi; j++) ok &= (ulong)F->ids64[F->id_off + j] < rows & F->ids64[F->id_off + j] != pad;
  else
    for (ulong j = lo; j < hi; j++) ok &= (ulong)(long)F->ids32[F->id_off + j] < rows & F->ids32[F->id_off + j] != pad;
  return ok;
}
/* The plain bag: each row's vectors (PFN), then its tail columns (TFN) */
#define CE_BAG_PLAIN(PFN, TFN, D)                                                                           \
  for (ulong j = lo; j < hi; j++) {                                                                         \
    const long id_ = ce_load_id(F->ids32, F->ids64, F->id64, F->id_off + j);                                \
    __global const CE_STORE_##D *p = CE_BAG_PROW(D, id_);                                                   \
    const float w0 = weighted ? F->w[F->w_off + j * F->w_ld] : 0.0f;                                         \
    CE_BAG_PAHEAD(D)                                                                                        \
    CE_BAG_EACH_V(PFN, D)                                                                                   \
    if (nt) {                                                                                               \
      CE_BAG_EACH_T(TFN, D)                                                                                 \
    }                                                                                                       \
  }                                                                                                         \
  taken = (int)(hi - lo);
/* The same with the pass's vector count a constant where the row is BAG_TILE or
 * BAG_TILE / 2 whole vectors (the common widths: no per-vector test) */
#define CE_BAG_PLAIN_NV(PFN, TFN, D)               \
  if (nt == 0 && nv == BAG_TILE) {                     \
    const int nv = BAG_TILE, nt = 0;                   \
    CE_BAG_PLAIN(PFN, TFN, D)                      \
  } else if (nt == 0 && nv == BAG_TILE / 2) {          \
    const int nv = BAG_TILE / 2, nt = 0;               \
    CE_BAG_PLAIN(PFN, TFN, D)                      \
  } else {                                         \
    CE_BAG_PLAIN(PFN, TFN, D)                      \
  }
#if BAG_SPLIT
#define CE_BAG_ONE_PIECE(F) ((F)->np <= 1)
#else
#define CE_BAG_ONE_PIECE(F) 1
#endif

/* The pooling of the columns from c of bag [lo, hi): nv (at most BAG_TILE)
 * vectors of VEC columns into acc/arg, then nt (< VEC) single columns into
 * tacc/targ (so a bag's ids are read once per BAG_TILE * VEC columns; with one
 * row a group the tail rides along with the last vectors); *cnt receives the
 * ids taken. Every accumulator starts from `zero` (0.0f, a kernel argument,
 * so that no compiler turns the first fma(w, t, 0) into w * t). Each column
 * takes the bag's ids one by one in ascending order, so the operations are
 * those of one id at a time whatever ROWS is. `plain`: the bag's ids are all
 * plain (ce_bag_columns checks once per bag, not per pass), for CE_BAG_PLAIN. */
#define CE_BAG_POOL_FN(D)                                                                                          \
  /* column col of table row `row` (ce_bag_tabrow's piece) */                                                     \
  CE_INLINE __global const CE_STORE_##D *ce_bag_rowp_##D(const ce_bag_feat *F, ulong row, ulong col) {            \
    ulong ro_;                                                                                                    \
    __global const CE_STORE_##D *tp_ = (__global const CE_STORE_##D *)ce_bag_tabrow(F, row, &ro_);               \
    return ce_ptr_##D(ce_ptr_##D(tp_, ro_), col);                                                                 \
  }                                                                                                               \
  CE_INLINE void ce_bag_pool_##D(const ce_bag_feat *F, ulong lo, ulong hi, int plain, ulong c, int nv, int nt,    \
                                 float zero, FV *acc, UV *arg, float *tacc, uint *targ, int *cnt, int report,      \
                                 __global uint *err) {                                                            \
    const ulong ct = c + (ulong)nv * VEC; /* the tail's first column */                                           \
    int taken = 0, tail_taken = 0, pruned = 0;                                                                    \
    CE_BAG_SPAN_DECL(D)                                                                                           \
    for (int k = 0; k < BAG_TILE; k++) {                                                                              \
      acc[k] = (FV)(zero);                                                                                        \
      arg[k] = (UV)(CE_BAG_NO_ARG);                                                                               \
    }                                                                                                             \
    for (int l = 0; l < VEC; l++) {                                                                               \
      tacc[l] = zero;                                                                                             \
      targ[l] = CE_BAG_NO_ARG;                                                                                    \
    }                                                                                                             \
    if (F->mode == CE_BAG_MAX) {                                                                                  \
      CE_BAG_IF_MAX(const int weighted = 0; CE_BAG_GROUPS(CE_BAG_VMAX, CE_BAG_TMAX, D)                            \
                    if (ROWS > 1 && nt) CE_BAG_TAILS(CE_BAG_TMAX, D))                                             \
    } else if (plain) {                                                                                           \
      if (F->has_w) {                                                                                             \
        CE_BAG_IF_W(const int weighted = 1; CE_BAG_PLAIN_NV(CE_BAG_PFMA, CE_BAG_TFMA, D))                         \
      } else {                                                                                                    \
        CE_BAG_IF_SUM(const int weighted = 0; CE_BAG_PLAIN_NV(CE_BAG_PADD, CE_BAG_TADD, D))                       \
      }                                                                                                           \
    } else if (F->has_w) {                                                                                        \
      CE_BAG_IF_W(const int weighted = 1; CE_BAG_GROUPS(CE_BAG_VFMA, CE_BAG_TFMA, D)                              \
                  if (ROWS > 1 && nt) CE_BAG_TAILS(CE_BAG_TFMA, D))                                               \
    } else {                                                                                                      \
      CE_BAG_IF_SUM(const int weighted = 0; CE_BAG_GROUPS(CE_BAG_VADD, CE_BAG_TADD, D)                            \
                    if (ROWS > 1 && nt) CE_BAG_TAILS(CE_BAG_TADD, D))                                             \
    }                                                                                                             \
    *cnt = taken + pruned;                                                                                        \
  }                                                                                                               \
  /* one value (grad_weights) */                                                                                  \
  CE_INLINE void ce_bag_value_##D(const ce_bag_feat *F, ulong row, ulong c, float *v) {                           \
    *v = ce_load_##D(ce_bag_rowp_##D(F, row, 0), c);                                                              \
  }
/* the pooling of the launch's one table dtype (ce_bag_pool_5 for Q4_K, ...) */
#define CE_BAG_POOL_FN_OF(D) CE_BAG_POOL_FN(D)
CE_BAG_POOL_FN_OF(TABLE_DT)
#define ce_bag_pool CE_XCAT(ce_bag_pool_, TABLE_DT)
#define ce_bag_value CE_XCAT(ce_bag_value_, TABLE_DT)

/* max_rows[b][c + l] for the lanes l < nl of arg (a position, or none: -1). */
CE_INLINE void ce_bag_store_rows(const ce_bag_feat *F, ulong b, ulong c, const uint *arg, int nl) {
  for (int l = 0; l < nl; l++) {
    long r = arg[l] == CE_BAG_NO_ARG ? -1 : ce_bag_row(F, arg[l], (__global uint *)0, 0);
    ulong o = F->mr_off + b * F->cols + c + (ulong)l;
    if (F->mr64f)
      F->mr64[o] = r;
    else
      F->mr32[o] = (int)r;
  }
}

/* Bag b of feature F, columns [c, c_end), into its output row: passes of
 * BAG_TILE vectors of VEC columns, the last pass with the columns past the last
 * whole vector; MEAN divides by the count, MAX writes max_rows. The first pass
 * reports the bag's bad ids (`report`); with no column to write the ids are
 * still checked.
 *
 * lcap (0: none): the most ids a bag may have on a device that ends a
 * work-item's loops after a number of iterations in all (the tuning's
 * loop_limit; the host sizes lcap so that the launch's loops stay below it,
 * src/ops/bag_forward.c). A longer bag is not pooled: its columns get zeros
 * (MAX's max_rows -1) and it is reported (kind 2: its index and length),
 * which clembed_finish returns as CLEMBED_ERR_UNSUPPORTED. */
CE_INLINE void ce_bag_columns(const ce_bag_feat *F, ulong b, ulong bags, ulong c, ulong c_end, float zero,
                              ulong lcap, __global OUT_T *orow, int report, __global uint *err) {
  ulong lo, hi;
  ce_bag_range(F, b, bags, &lo, &hi);
  int mean = F->mode == CE_BAG_MEAN, max = F->mode == CE_BAG_MAX && F->has_mr;
  if (lcap && hi - lo > lcap) {
    if (F->report) ce_report(err, F->slot, 2, b, (long)(hi - lo));
    uint none[1] = {CE_BAG_NO_ARG};
    for (; c < c_end; c++) {
      store_out(orow, c, 0.0f);
      if (max) ce_bag_store_rows(F, b, c, none, 1);
    }
    return;
  }
  const int plain = BAG_PLAIN && F->mode != CE_BAG_MAX && CE_BAG_ONE_PIECE(F) && c < c_end && ce_bag_plain(F, lo, hi);
  while (c < c_end) {
    ulong left = c_end - c;
    int last = left / VEC <= BAG_TILE, nv = (int)min((ulong)BAG_TILE, left / VEC), nt = last ? (int)(left % VEC) : 0;
    int cnt = 0;
    FV acc[BAG_TILE];
    UV arg[BAG_TILE];
    float tacc[VEC];
    uint targ[VEC];
    ce_bag_pool(F, lo, hi, plain, c, nv, nt, zero, acc, arg, tacc, targ, &cnt, report, err);
    report = 0;
    FV div = (FV)((float)cnt);
    for (int k = 0; k < BAG_TILE; k++)
      if (k < nv) {
        FV v = acc[k];
        if (mean && cnt) v = v / div;
        store_outv(orow, c + (ulong)k * VEC, v);
        if (max) {
          uint a[VEC];
          vstoreV(arg[k], 0, a);
          ce_bag_store_rows(F, b, c + (ulong)k * VEC, a, VEC);
        }
      }
    c += (ulong)nv * VEC;
    for (int l = 0; l < nt; l++) {
      float v = tacc[l], d = (float)cnt;
      if (mean && cnt) v = v / d;
      store_out(orow, c + (ulong)l, v);
    }
    if (max && nt) ce_bag_store_rows(F, b, c, targ, nt);
    c += (ulong)nt;
  }
  if (report)
    for (ulong j = lo; j < hi; j++) ce_bag_row(F, j, err, 1);
}

/* The arguments of the forward's shapes, after CE_BAG_ARGS. */
#define CE_BAG_OUT_ARGS \
  __global OUT_T *out, ulong o_off CE_PIECE_PARAMS(OUT_T, out), ulong o_ld, ulong nchunks, float zero, ulong lcap
/* bag b's output row (out may be split: cl/lib/pieces.cl), and whether this
 * launch writes it (with no bags, the first window's item 0 checks) */
#define CE_BAG_OROW(b) (CE_AT(out, (b)) + CE_OFF(out, o_off, o_ld, (b)))
#define CE_BAG_MINE(b) (bags ? CE_OWNS(out, (b)) : CE_FIRST(out))

/* CPU shape, whole rows, a work-item per bag: every feature of the launch in
 * turn (with no bags, item 0 checks the offsets). */
__kernel void ce_bag_rows(CE_BAG_ARGS, CE_BAG_OUT_ARGS) {
  CE_BAG_BUFS_ARRAY;
  const ulong b = get_global_id(0);
  if (b >= max(bags, (ulong)1)) return;
  if (!CE_BAG_MINE(b)) return;
  for (uint f = 0; f < nf; f++) {
    ce_bag_feat F;
    ce_bag_load(&F, fd, f0 + f, bufs_);
    ce_bag_check_offsets(&F, b, bags, err);
    if (b < bags) ce_bag_columns(&F, b, bags, 0, F.cols, zero, lcap, CE_BAG_OROW(b) + F.col0, 1, err);
  }
}

/* CPU shape, whole rows, a work-item per (bag, feature) (bag_by_feature):
 * item b + f * bags, so consecutive items take consecutive bags of one
 * feature and one table is read at a time (with no bags, each feature's item
 * checks its offsets). */
__kernel void ce_bag_rows_by_feature(CE_BAG_ARGS, CE_BAG_OUT_ARGS) {
  CE_BAG_BUFS_ARRAY;
  const ulong nb = max(bags, (ulong)1), g = get_global_id(0);
  if (g >= nb * nf) return;
  const ulong b = g % nb;
  if (!CE_BAG_MINE(b)) return;
  ce_bag_feat F;
  ce_bag_load(&F, fd, f0 + (uint)(g / nb), bufs_);
  ce_bag_check_offsets(&F, b, bags, err);
  if (b < bags) ce_bag_columns(&F, b, bags, 0, F.cols, zero, lcap, CE_BAG_OROW(b) + F.col0, 1, err);
}

/* GPU shape: work-item (x, b), x one of the launch's nchunks chunks of VEC
 * columns (feature f's are BF_CHUNK0 on, at least one per feature). */
__kernel void ce_bag_cols(CE_BAG_ARGS, CE_BAG_OUT_ARGS) {
  CE_BAG_BUFS_ARRAY;
  ulong x = get_global_id(0), b = get_global_id(1);
  if (x >= nchunks || b >= max(bags, (ulong)1)) return;
  if (!CE_BAG_MINE(b)) return;
  uint lo = ce_bag_find(fd, f0, nf, BF_CHUNK0, x);
  ce_bag_feat F;
  ce_bag_load(&F, fd, f0 + lo, bufs_);
  ulong c = (x - FD(f0 + lo, BF_CHUNK0)) * VEC;
  int first = c == 0;
  if (first) ce_bag_check_offsets(&F, b, bags, err);
  if (b < bags)
    ce_bag_columns(&F, b, bags, c, min(c + VEC, F.cols), zero, lcap, CE_BAG_OROW(b) + F.col0, first, err);
}

/* Devices without 64-bit atomics: the value of each feature's first bad id
 * and bad offset, beside their positions in its error slot (as
 * ce_record_error), and the length of the first bag too long for the loop
 * limit (word 7, beside its index in word 6). A work-item per feature. */
__kernel void ce_bag_record(CE_BAG_ARGS) {
  CE_BAG_BUFS_ARRAY;
  ulong f = get_global_id(0);
  if (f >= nf) return;
  ce_bag_feat F;
  ce_bag_load(&F, fd, f0 + f, bufs_);
  if (!F.report) return;
  __global uint *s = err + F.slot * CE_SLOT_UINTS;
  uint bi = s[0], bp = s[1];
  if (bi != CE_NONE && bi < F.n) {
    long v = ce_load_id(F.ids32, F.ids64, F.id64, F.id_off + bi);
    s[2] = (uint)v;
    s[3] = (uint)((ulong)v >> 32);
  }
  if (bp != CE_NONE && F.has_of && bp <= bags) {
    long v = ce_bag_off(&F, bp);
    s[4] = (uint)v;
    s[5] = (uint)((ulong)v >> 32);
  }
  uint bl = s[6];
  if (bl != CE_NONE && bl < bags) {
    ulong lo, hi;
    ce_bag_range(&F, bl, bags, &lo, &hi);
    s[7] = (uint)min(hi - lo, (ulong)0xFFFFFFFEu);
  }
}

/* ------------------------------------------------------------ backward */

/* Work-item (f, b): checks the offsets bag b answers for; MEAN features also
 * store the bag's count of taken ids at counts[BF_CNT0 + b]. */
__kernel void ce_bag_counts(CE_BAG_ARGS, __global float *counts) {
  CE_BAG_BUFS_ARRAY;
  ulong f = get_global_id(0), b = get_global_id(1);
  if (f >= nf || b >= max(bags, (ulong)1)) return;
  ce_bag_feat F;
  ce_bag_load(&F, fd, f0 + f, bufs_);
  ce_bag_check_offsets(&F, b, bags, err);
  if (b >= bags || F.mode != CE_BAG_MEAN) return;
  ulong lo, hi;
  uint cnt = 0;
  ce_bag_range(&F, b, bags, &lo, &hi);
  for (ulong j = lo; j < hi; j++) cnt += ce_bag_row(&F, j, err, 0) >= 0;
  counts[FD(f0 + f, BF_CNT0) + b] = (float)cnt;
}

/* The kinds of a record's aux word (its top two bits; backward.cl reads them) */
#define CE_CB_PLAIN 0UL /* g */
#define CE_CB_MUL 1UL   /* w * g, w the float in the low word */
#define CE_CB_DIV 2UL   /* g / count, count the float in the low word */
#define CE_CB_MAX 3UL   /* g where max_rows (the gathered array, from the element in the low 62 bits) names the row */

/* Entry p of the group's entries [e_first, e_first + e_count) (feature f's
 * ids are entries BF_E0 on, in feature order): the key (the id's row, or
 * `rows`, sorting last, for an id that contributes nothing: left out, bad,
 * or under MAX a row that max_rows[b] does not name), idx = p, and the record
 * (the gradient row's element offset b * g_ld + BF_COL0, and the kind with
 * its weight, count or max_rows element). Bad ids are reported here. */
__kernel void ce_bag_keys(CE_BAG_ARGS, __global const float *counts, ulong rows, ulong g_ld, ulong e_first,
                          ulong e_count, __global KEY_T *keys, __global uint *idx, __global ulong *rec) {
  CE_BAG_BUFS_ARRAY;
  ulong q = get_global_id(0);
  if (q >= e_count) return;
  ulong p = e_first + q;
  uint lo = ce_bag_find(fd, f0, nf, BF_E0, p);
  ce_bag_feat F;
  ce_bag_load(&F, fd, f0 + lo, bufs_);
  ulong j = p - FD(f0 + lo, BF_E0);
  long row = ce_bag_row(&F, j, err, 1);
  ulong b = bags ? ce_bag_of(&F, j, bags) : 0, key = rows, aux = CE_CB_PLAIN << 62;
  if (row >= 0 && bags) {
    key = (ulong)row;
    if (F.mode == CE_BAG_MAX) {
      int named = 0;
      for (ulong c = 0; c < F.cols && !named; c++) {
        ulong o = F.mr_off + b * F.cols + c;
        named = (F.mr64f ? F.mr64[o] : (long)F.mr32[o]) == row;
      }
      if (!named) key = rows;
      aux = (CE_CB_MAX << 62) | (FD(f0 + lo, BF_MRT0) + b * F.cols);
    } else if (F.mode == CE_BAG_MEAN) {
      aux = (CE_CB_DIV << 62) | as_uint(counts[FD(f0 + lo, BF_CNT0) + b]);
    } else if (F.has_w) {
      aux = (CE_CB_MUL << 62) | as_uint(F.w[F.w_off + j * F.w_ld]);
    }
  }
  keys[p] = (KEY_T)key;
  idx[p] = (uint)p;
  rec[2 * p] = b * g_ld + F.col0;
  rec[2 * p + 1] = aux;
}

/* MAX features: max_rows (I32 or I64) as one I64 array, feature f's bags x
 * cols from BF_MRT0 on. Work-item (x, b) of feature f: columns x, x +
 * get_global_size(0), ... of every MAX feature of the launch. */
__kernel void ce_bag_gather_max(CE_BAG_ARGS, __global long *mrt) {
  CE_BAG_BUFS_ARRAY;
  ulong b = get_global_id(1);
  if (b >= bags) return;
  for (uint f = 0; f < nf; f++) {
    ce_bag_feat F;
    ce_bag_load(&F, fd, f0 + f, bufs_);
    if (F.mode != CE_BAG_MAX) continue;
    ulong t = FD(f0 + f, BF_MRT0) + b * F.cols, o = F.mr_off + b * F.cols;
    for (ulong c = get_global_id(0); c < F.cols; c += get_global_size(0))
      mrt[t + c] = F.mr64f ? F.mr64[o + c] : (long)F.mr32[o + c];
  }
}

/* ------------------------------------------ tables in many buffers */

/* A gathered MAX feature's max_rows: the pooling named positions j (pos, -1
 * for none); each becomes the row ids[j] resolves to. */
__kernel void ce_bag_gather_rows(__global const int *ids32, __global const long *ids64, ulong id_off, int id64,
                                 ulong rows, int policy, long padding, __global const long *pos, ulong n,
                                 __global int *mr32, __global long *mr64, ulong mr_off, int mr64f) {
  ulong i = get_global_id(0);
  if (i >= n) return;
  long v = pos[i];
  long r = v < 0 ? -1 : ce_token_row(ids32, ids64, id64, id_off, (ulong)v, rows, policy, padding, (__global uint *)0, 0, 0);
  if (mr64f)
    mr64[mr_off + i] = r;
  else
    mr32[mr_off + i] = (int)r;
}

/* Whether id j (its row `row`) is another launch's in the weights' gradient:
 * a table split over windows of its pieces has a launch per window, the
 * window of the id's row writes it, the first window an id that takes no row;
 * one piece, never. */
#if BAG_SPLIT
#define CE_BAG_OTHER_WINDOW(F, row) \
  ((row) >= 0 && bags ? (ulong)(row) < (F).t_lo || (ulong)(row) >= (F).t_hi : (F).t_lo != 0)
#else
#define CE_BAG_OTHER_WINDOW(F, row) 0
#endif

/* grad_weights[j] = the sum over columns c ascending of g_b[c] * t_j[c] (each
 * product rounded, added from 0), 0 for an id left out; one feature (f0), a
 * work-item per id. */
__kernel void ce_bag_grad_weights(CE_BAG_ARGS, __global const GRAD_T *grad,
                                  ulong g_off CE_PIECE_PARAMS(const GRAD_T, grad), ulong g_ld, __global float *gw,
                                  ulong gw_off, ulong gw_ld) {
  CE_BAG_BUFS_ARRAY;
  ulong j = get_global_id(0);
  ce_bag_feat F;
  ce_bag_load(&F, fd, f0, bufs_);
  if (j >= F.n) return;
  long row = ce_bag_row(&F, j, err, 0);
  float acc = 0.0f;
  if (CE_BAG_OTHER_WINDOW(F, row)) return;
  if (row >= 0 && bags) {
    ulong b = ce_bag_of(&F, j, bags), g = CE_OFF(grad, g_off, g_ld, b) + F.col0;
    __global const GRAD_T *gb = CE_AT(grad, b);
    for (ulong c = 0; c < F.cols; c++) {
      float t = 0.0f;
      ce_bag_value(&F, (ulong)row, c, &t);
      float pr = load_grad(gb, g + c) * t;
      acc = acc + pr;
    }
  }
  gw[gw_off + j * gw_ld] = acc;
}

/* -------------------------------------------------------------- renorm */

/* key[i] = the row of ids[i] (CHECK: a bad id is reported and gets `rows`). */
__kernel void ce_renorm_keys(__global const int *ids32, __global const long *ids64, ulong id_off, int id64, ulong n,
                             ulong rows, __global KEY_T *keys, __global uint *idx, __global uint *err, uint slot) {
  ulong i = get_global_id(0);
  if (i >= n) return;
  long r = ce_token_row(ids32, ids64, id64, id_off, i, rows, CE_POLICY_CHECK, -1, err, slot, 1);
  keys[i] = r >= 0 ? (KEY_T)r : (KEY_T)rows;
  idx[i] = (uint)i;
}

#if TABLE_DT <= 2 /* a float table (renorm writes it; the host refuses the block types) */
/* A work-item per sorted position; the first of each row's segment renorms
 * it: the norm (kind 1: sum |x|; 2: sqrt(sum x*x); 3: the largest |x|, NaN if
 * any; 0: pow(sum pow(|x|, p), inv_p)), columns ascending, then, when it
 * exceeds max_norm, x = x * (max_norm / (norm + 1e-7f)). */
__kernel void ce_renorm_rows(__global TABLE_T *tab, ulong t_off CE_PIECE_PARAMS(TABLE_T, tab), ulong t_ld, ulong cols,
                             __global const KEY_T *skeys, ulong n, KEY_T none, float max_norm, int kind, float p,
                             float inv_p) {
  ulong t = get_global_id(0);
  if (t >= n) return;
  KEY_T key = skeys[t];
  if (key == none || (t > 0 && skeys[t - 1] == key)) return;
  if (!CE_OWNS(tab, (ulong)key)) return; /* another window's row */
  __global TABLE_T *tb = CE_AT(tab, (ulong)key);
  ulong o = CE_OFF(tab, t_off, t_ld, (ulong)key);
  float s = 0.0f;
  for (ulong c = 0; c < cols; c++) {
    float a = fabs(load_table(tb, o + c));
    if (kind == 1) {
      s = s + a;
    } else if (kind == 2) {
      float sq = a * a;
      s = s + sq;
    } else if (kind == 3) {
      s = (a > s || isnan(a)) && !isnan(s) ? a : s;
    } else {
      float e = pow(a, p);
      s = s + e;
    }
  }
  float norm = kind == 2 ? sqrt(s) : kind == 0 ? pow(s, inv_p) : s;
  if (!(norm > max_norm)) return;
  float den = norm + 1e-7f, scale = max_norm / den;
  for (ulong c = 0; c < cols; c++) store_table(tb, o + c, load_table(tb, o + c) * scale);
}
#endif
