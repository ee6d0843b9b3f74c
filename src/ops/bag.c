/* Bags of ids: clembed_embedding_bag and clembed_embedding_bags (the forward),
 * clembed_bag_backward, clembed_bag_optimizer_step and
 * clembed_bags_optimizer_step (contributions fed to the segment fold of
 * backward.c), and clembed_renorm. The kernels are cl/ops/bag.cl's.
 *
 * Features and launches. Every call describes its features to the kernels in
 * one descriptor (BAG_FIELDS: a row of ulongs per feature, the field indices
 * passed as -DBF_NAME options, so this list is the only one) and gives each
 * launch up to CLEMBED_BAGS_BUFFERS buffers: plan() takes the features in
 * order into groups whose distinct buffers (table, ids, offsets, weights,
 * max_rows) fit, and each group is one launch of each kernel. A single feature
 * is the batch of one: clembed_embedding_bag and clembed_embedding_bags run
 * the same kernel, so a block of the batched output has the bits of the
 * feature alone. The program of a launch is built for the one table dtype
 * and the poolings its features use (TABLE_DT, MODES): a launch that reads
 * rows reads one dtype (the forward takes the features by dtype, then in
 * order). The CPU shape
 * takes a feature's bags on consecutive work-items (the tuning's
 * bag_by_feature), so one table is read at a time, and pools a bag of plain
 * ids a row at a time without masks (bag_plain, -DPLAIN).
 *
 * Split matrices (include/clembed.h, "Tables past one buffer"). A bag is
 * pooled in one work-item over rows of any piece, so the forward's launch
 * takes every piece of a feature's table as one of its buffers (BF_TAB_NP,
 * the pieces listed in the descriptor; -DBAG_SPLIT=1), and a table whose
 * pieces do not fit beside its feature's other buffers is refused; out goes
 * through pieces.cl (a launch per window of its pieces). grad_weights reads
 * the table a window of its pieces per launch. The backward and the steps hand
 * the tables, states and grad_out to the fold as pieces; renorm's table goes
 * through pieces.cl.
 *
 * The backward produces contributions (ops.h's ce_contrib) for the one
 * segment fold: an entry per id of every feature feeding one table, in
 * feature order then id order; step_keys enqueues ce_bag_counts (the offsets
 * checked, MEAN's counts), ce_bag_gather_max (MAX) and ce_bag_keys (the sort
 * keys and the records), then backward.c sorts and folds with -DBAG=1. */
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

clembed_bag_options clembed_bag_defaults(void) {
  clembed_bag_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.mode = CLEMBED_BAG_SUM;
  o.policy = CLEMBED_INDEX_CHECK;
  o.padding_idx = CLEMBED_NO_PADDING;
  return o;
}

clembed_bag_feature clembed_bag_feature_defaults(void) {
  clembed_bag_feature f;
  memset(&f, 0, sizeof f);
  f.struct_size = sizeof f;
  f.options = clembed_bag_defaults();
  return f;
}

/* ------------------------------------------------------------ descriptor */

/* A feature's fields (cl/ops/bag.cl's ce_bag_load reads them): buffers by
 * their index among the launch's (BAG_NONE: absent), offsets in elements. A
 * table split over several buffers (include/clembed.h's split matrices) gives
 * each piece the launch takes as one of its buffers: TAB_NP pieces, listed
 * after the features' rows from element TAB_P on as triples (buffer index,
 * first row, element of that row), holding the rows [TAB_LO, TAB_HI). */
#define BAG_FIELDS(X)                                                                                      \
  X(TAB) X(TAB_OFF) X(TAB_LD) X(TAB_ROWS) X(COLS) X(DTYPE) X(IDS) X(IDS_OFF) X(IDS_N) X(IDS64) X(OFFS)     \
  X(OFFS_OFF) X(OFFS64) X(W) X(W_OFF) X(W_LD) X(MR) X(MR_OFF) X(MR64) X(MODE) X(POLICY) X(PADDING) X(COL0) \
  X(ERR) X(REPORT) X(CHUNK0) X(E0) X(CNT0) X(MRT0) X(TAB_NP) X(TAB_P) X(TAB_LO) X(TAB_HI)
#define BAG_FIELD_ENUM(name) BF_##name,
enum { BAG_FIELDS(BAG_FIELD_ENUM) BF_COUNT };
#undef BAG_FIELD_ENUM
#define BAG_NONE 0xFFu

/* "-DBF_TAB=0 -DBF_TAB_OFF=1 ... -DBF_COUNT=n" */
static void field_options(char *buf, size_t cap) {
  static const char *const names[] = {
#define BAG_FIELD_NAME(name) #name,
      BAG_FIELDS(BAG_FIELD_NAME)
#undef BAG_FIELD_NAME
  };
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < BF_COUNT && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, " -DBF_%s=%d", names[i], i);
  if (used < cap) snprintf(buf + used, cap - used, " -DBF_COUNT=%d", (int)BF_COUNT);
}

/* One feature, checked. */
typedef struct bag_feat {
  const clembed_matrix *table; /* the table (for the backward without one: grad_table, rows and cols only) */
  size_t t_ld;
  const clembed_ids *ids, *offsets;
  clembed_bag_options opt;
  cl_long padding;
  size_t w_ld;
  size_t col0;   /* its block of out or grad_out */
  long index;    /* features[index] of a batched call, -1 otherwise */
  cl_uint slot;  /* its error slot, CE_NO_SLOT */
  ce_pieces tp;  /* the table's pieces (check_feature; ce_pieces_release on the checked feature, not a copy) */
  size_t pg0, pgn; /* the pieces a launch reads: [pg0, pg0 + pgn) */
  /* a table in more buffers than a launch takes (gather_rows): the feature as
   * given, and the gathered rows and positions it is pooled through */
  struct {
    int on;
    const clembed_matrix *table;
    const clembed_ids *ids;
    clembed_index_policy policy;
    cl_long padding;
    clembed_ids *max_rows; /* the caller's, written from pos_rows */
    clembed_matrix rows;   /* ids->count rows of the table's dtype */
    clembed_ids idx, pos_rows;
  } g;
} bag_feat;

static void release_features(bag_feat *F, size_t n) {
  for (size_t f = 0; F && f < n; f++) {
    ce_pieces_release(&F[f].tp);
    if (F[f].g.rows.buffer) clReleaseMemObject(F[f].g.rows.buffer);
    if (F[f].g.idx.buffer) clReleaseMemObject(F[f].g.idx.buffer);
    if (F[f].g.pos_rows.buffer) clReleaseMemObject(F[f].g.pos_rows.buffer);
    memset(&F[f].g, 0, sizeof F[f].g);
  }
}

/* The one feature of the single-table calls: opt read as far as its
 * struct_size goes (NULL: the defaults). */
static clembed_status one_feature(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                                  const clembed_ids *offsets, const clembed_bag_options *opt, bag_feat *F) {
  memset(F, 0, sizeof *F);
  F->table = table;
  F->ids = ids;
  F->offsets = offsets;
  F->opt = clembed_bag_defaults();
  F->index = -1;
  F->slot = CE_NO_SLOT;
  ce_pieces_none(&F->tp);
  return ce_struct_read(ctx, NULL, "opt", -1, &ce_bag_options_layout, opt, &F->opt);
}

/* The optimizers of a step, each as far as its struct_size goes: one
 * (array 0), or an array of n read with the stride of o[0]'s struct_size;
 * *out NULL for o NULL (refused by steps_run). */
static clembed_status read_optimizers(clembed_context *ctx, const char *what, const clembed_optimizer *o, size_t n,
                                      int array, clembed_optimizer **out) {
  clembed_status status = CLEMBED_OK;
  size_t stride = 0;
  clembed_optimizer *r = NULL;
  *out = NULL;
  if (!o) return CLEMBED_OK;
  r = calloc(n ? n : 1, sizeof *r);
  if (!r) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
  if (array) CHECK(ce_struct_stride(ctx, NULL, "o", &ce_optimizer_layout, o, n, &stride));
  for (size_t f = 0; f < n; f++)
    CHECK(ce_optimizer_read(ctx, "o", array ? (int64_t)f : -1,
                            (const clembed_optimizer *)((const char *)o + f * stride), &r[f]));
  *out = r;
  r = NULL;
cleanup:
  free(r);
  return status;
}

/* A launch: features [first, first + count) and their buffers. */
typedef struct bag_launch {
  size_t first, count;
  cl_mem bufs[CLEMBED_BAGS_BUFFERS];
  int nbufs;
  int dtype;              /* its first feature's table dtype (plans by_dtype: every feature's), TABLE_DT */
  unsigned modes;         /* and MODES (bag.cl: 1 SUM or MEAN, 2 weighted SUM, 4 MAX) */
  int max;                /* a MAX feature */
  size_t chunks;          /* the GPU shape's x range */
  size_t entries;         /* ids (the backward's entries) */
  int reports;            /* a feature reports errors */
  int split;              /* a feature reads a table in several buffers (BAG_SPLIT) */
} bag_launch;

/* The table's pieces a launch takes for F: those it reads (`pieces`: the
 * forward and grad_weights), else only the first (the keys read no row). */
static size_t feature_pieces(const bag_feat *F, int pieces) { return pieces && F->pgn > 1 ? F->pgn : 1; }

/* The buffers a feature reads or writes (its table's pieces, then up to 4). */
#define BAG_FEATURE_BUFFERS (CLEMBED_BAGS_BUFFERS + 4)
static int feature_buffers(const bag_feat *F, int pieces, cl_mem *m) {
  int k = 0;
  size_t np = feature_pieces(F, pieces);
  for (size_t j = 0; j < np && j < CLEMBED_BAGS_BUFFERS; j++) m[k++] = F->tp.piece[F->pg0 + j].buffer;
  m[k++] = F->ids->buffer;
  if (F->offsets) m[k++] = F->offsets->buffer;
  if (F->opt.per_sample_weights) m[k++] = F->opt.per_sample_weights->buffer;
  if (F->opt.max_rows) m[k++] = F->opt.max_rows->buffer;
  return k;
}

static int buffer_index(const bag_launch *L, cl_mem m) {
  for (int i = 0; i < L->nbufs; i++)
    if (L->bufs[i] == m) return i;
  return -1;
}

/* The distinct buffers of F's table pieces, ids, offsets, weights and max_rows. */
static size_t own_buffers(const bag_feat *F) {
  size_t own = 0, np = F->tp.count;
  for (size_t j = 0; j < np; j++) {
    int seen = 0;
    for (size_t i = 0; i < j && !seen; i++) seen = F->tp.piece[i].buffer == F->tp.piece[j].buffer;
    own += !seen;
  }
  cl_mem m[4] = {F->ids->buffer, F->offsets ? F->offsets->buffer : NULL,
                 F->opt.per_sample_weights ? F->opt.per_sample_weights->buffer : NULL,
                 F->opt.max_rows ? F->opt.max_rows->buffer : NULL};
  for (int i = 0; i < 4; i++) {
    int seen = !m[i];
    for (size_t j = 0; j < np && !seen; j++) seen = F->tp.piece[j].buffer == m[i];
    for (int k = 0; k < i && !seen; k++) seen = m[k] == m[i];
    own += !seen;
  }
  return own;
}

/* The features in order, in groups of at most CLEMBED_BAGS_BUFFERS buffers
 * (by_dtype: and of one table dtype; pieces: as feature_pieces). A feature
 * whose buffers alone are more is CLEMBED_ERR_UNSUPPORTED (a table in too
 * many buffers for the kernels that read its rows). */
static clembed_status plan(clembed_context *ctx, const char *what, const bag_feat *F, size_t n, size_t vec,
                           int by_dtype, int pieces, bag_launch **out, size_t *nout) {
  bag_launch *L = calloc(n ? n : 1, sizeof *L);
  size_t nl = 0;
  if (!L) return ce_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "bags: out of host memory");
  for (size_t f = 0; f < n; f++) {
    cl_mem m[BAG_FEATURE_BUFFERS];
    int k = feature_buffers(&F[f], pieces, m), fresh = 0, own = 0;
    for (int i = 0; i < k; i++) {
      int seen = 0;
      for (int j = 0; j < i && !seen; j++) seen = m[j] == m[i];
      own += !seen;
    }
    size_t np = feature_pieces(&F[f], pieces);
    if (own > CLEMBED_BAGS_BUFFERS || np > CLEMBED_BAGS_BUFFERS) {
      char at[48] = "";
      int all = own + (np > CLEMBED_BAGS_BUFFERS ? (int)np - CLEMBED_BAGS_BUFFERS : 0); /* (m holds 16 pieces) */
      if (F[f].index >= 0) snprintf(at, sizeof at, " (features[%ld])", F[f].index);
      free(L);
      return ce_fail_arg(ctx, CLEMBED_ERR_UNSUPPORTED, NULL, "table", F[f].index, (int64_t)F[f].tp.count,
                         "%s: table lies in %zu buffers%s; its ids, offsets, per_sample_weights and max_rows with "
                         "them make %d, and a launch of the bag kernels takes at most %d (CLEMBED_BAGS_BUFFERS)",
                         what, F[f].tp.count, at, all, CLEMBED_BAGS_BUFFERS);
    }
    bag_launch *cur = nl ? &L[nl - 1] : NULL;
    for (int i = 0; cur && i < k; i++) {
      int seen = buffer_index(cur, m[i]) >= 0;
      for (int j = 0; j < i && !seen; j++) seen = m[j] == m[i];
      fresh += !seen;
    }
    int dt = (int)F[f].table->dtype;
    if (!cur || cur->nbufs + fresh > CLEMBED_BAGS_BUFFERS || (by_dtype && cur->dtype != dt)) {
      cur = &L[nl++];
      cur->first = f;
      cur->dtype = dt;
    }
    for (int i = 0; i < k; i++)
      if (buffer_index(cur, m[i]) < 0) cur->bufs[cur->nbufs++] = m[i];
    cur->count++;
    cur->modes |= F[f].opt.mode == CLEMBED_BAG_MAX ? 4u : F[f].opt.per_sample_weights ? 2u : 1u;
    cur->split |= np > 1;
    cur->max |= F[f].opt.mode == CLEMBED_BAG_MAX;
    size_t chunks = (F[f].table->cols + vec - 1) / vec;
    cur->chunks += chunks ? chunks : 1; /* a feature of 0 columns still checks its ids */
    cur->entries += F[f].ids->count;
    cur->reports |= F[f].slot != CE_NO_SLOT;
  }
  *out = L;
  *nout = nl;
  return CLEMBED_OK;
}

/* The sizes the backward's temporaries need for these features. */
typedef struct bag_sizes {
  size_t entries, counts, mrt; /* ids; MEAN's bag counts; MAX's gathered max_rows */
} bag_sizes;

/* The descriptor of every feature (the launches' buffer indices, the GPU
 * shape's chunks, and the backward's entry, count and max_rows starts), and
 * the sizes they add up to. */
static clembed_status describe(clembed_context *ctx, const bag_feat *F, size_t n, const bag_launch *L, size_t nl,
                               size_t vec, size_t bags, int pieces, cl_mem *desc, bag_sizes *sz) {
  size_t words = (n ? n : 1) * BF_COUNT, list = words;
  for (size_t f = 0; f < n; f++)
    if (feature_pieces(&F[f], pieces) > 1) words += 3 * feature_pieces(&F[f], pieces);
  cl_ulong *d = calloc(words, sizeof *d);
  if (!d) return ce_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "bags: out of host memory");
  bag_sizes z = {0, 0, 0};
  for (size_t l = 0; l < nl; l++) {
    size_t chunk0 = 0;
    for (size_t f = L[l].first; f < L[l].first + L[l].count; f++) {
      const bag_feat *x = &F[f];
      const clembed_matrix *t = x->table, *w = x->opt.per_sample_weights;
      const clembed_ids *o = x->offsets, *mr = x->opt.max_rows;
      cl_ulong *r = d + f * BF_COUNT;
      const ce_piece *p0 = &x->tp.piece[x->pg0];
      size_t np = feature_pieces(x, pieces), end = x->pg0 + x->pgn;
      r[BF_TAB] = (cl_ulong)buffer_index(&L[l], p0->buffer);
      r[BF_TAB_OFF] = p0->offset;
      r[BF_TAB_NP] = np;
      r[BF_TAB_P] = list;
      r[BF_TAB_LO] = p0->first;
      r[BF_TAB_HI] = pieces && end < x->tp.count ? (cl_ulong)x->tp.piece[end].first : CL_ULONG_MAX;
      for (size_t j = 0; np > 1 && j < np; j++, list += 3) {
        const ce_piece *q = &x->tp.piece[x->pg0 + j];
        d[list] = (cl_ulong)buffer_index(&L[l], q->buffer);
        d[list + 1] = q->first;
        d[list + 2] = q->offset;
      }
      r[BF_TAB_LD] = x->t_ld;
      r[BF_TAB_ROWS] = t->rows;
      r[BF_COLS] = t->cols;
      r[BF_DTYPE] = (cl_ulong)t->dtype;
      r[BF_IDS] = (cl_ulong)buffer_index(&L[l], x->ids->buffer);
      r[BF_IDS_OFF] = x->ids->offset;
      r[BF_IDS_N] = x->ids->count;
      r[BF_IDS64] = x->ids->type == CLEMBED_I64;
      r[BF_OFFS] = o ? (cl_ulong)buffer_index(&L[l], o->buffer) : BAG_NONE;
      r[BF_OFFS_OFF] = o ? o->offset : 0;
      r[BF_OFFS64] = o && o->type == CLEMBED_I64;
      r[BF_W] = w ? (cl_ulong)buffer_index(&L[l], w->buffer) : BAG_NONE;
      r[BF_W_OFF] = w ? w->offset : 0;
      r[BF_W_LD] = x->w_ld;
      r[BF_MR] = mr ? (cl_ulong)buffer_index(&L[l], mr->buffer) : BAG_NONE;
      r[BF_MR_OFF] = mr ? mr->offset : 0;
      r[BF_MR64] = mr && mr->type == CLEMBED_I64;
      r[BF_MODE] = (cl_ulong)x->opt.mode;
      r[BF_POLICY] = (cl_ulong)x->opt.policy;
      r[BF_PADDING] = (cl_ulong)x->padding;
      r[BF_COL0] = x->col0;
      r[BF_ERR] = x->slot == CE_NO_SLOT ? 0 : x->slot;
      r[BF_REPORT] = x->slot != CE_NO_SLOT;
      r[BF_CHUNK0] = chunk0;
      r[BF_E0] = z.entries;
      r[BF_CNT0] = z.counts;
      r[BF_MRT0] = z.mrt;
      size_t chunks = (t->cols + vec - 1) / vec;
      chunk0 += chunks ? chunks : 1;
      z.entries += x->ids->count;
      if (x->opt.mode == CLEMBED_BAG_MEAN) z.counts += bags;
      if (x->opt.mode == CLEMBED_BAG_MAX) z.mrt += bags * t->cols; /* (max_rows holds as many) */
    }
  }
  clembed_status s = CLEMBED_OK;
  if (desc) s = ce_buffer(ctx, CE_BUFFER_CONST, words * sizeof *d, d, "bags: descriptor", desc);
  free(d);
  if (sz) *sz = z;
  return s;
}

/* The arguments every bag kernel starts with (cl/ops/bag.cl's CE_BAG_ARGS). */
typedef struct bag_args {
  cl_mem desc;
  cl_uint f0, nf;
  cl_ulong bags;
  cl_mem b[CLEMBED_BAGS_BUFFERS];
} bag_args;
#define BAG_COMMON(a)                                                                                         \
  CE_ARG((a).desc), CE_ARG((a).f0), CE_ARG((a).nf), CE_ARG((a).bags), CE_ARG(ctx->errbuf), CE_ARG((a).b[0]),  \
      CE_ARG((a).b[1]), CE_ARG((a).b[2]), CE_ARG((a).b[3]), CE_ARG((a).b[4]), CE_ARG((a).b[5]),               \
      CE_ARG((a).b[6]), CE_ARG((a).b[7]), CE_ARG((a).b[8]), CE_ARG((a).b[9]), CE_ARG((a).b[10]),              \
      CE_ARG((a).b[11]), CE_ARG((a).b[12]), CE_ARG((a).b[13]), CE_ARG((a).b[14]), CE_ARG((a).b[15])

static bag_args launch_args(cl_mem desc, const bag_launch *L, size_t bags) {
  bag_args a;
  memset(&a, 0, sizeof a);
  a.desc = desc;
  a.f0 = (cl_uint)L->first;
  a.nf = (cl_uint)L->count;
  a.bags = bags;
  for (int i = 0; i < L->nbufs; i++) a.b[i] = L->bufs[i];
  return a;
}

/* A launch's program options: `base`, the table dtype its features read (one
 * per launch: bag.cl's pooling is written for it alone) and the poolings it
 * uses, and whether a table lies in several of its buffers. */
static void launch_options(char *buf, size_t cap, const char *base, const bag_launch *L) {
  snprintf(buf, cap, "%s -DTABLE_DT=%d -DMODES=%u%s", base, L->dtype, L->modes, L->split ? " -DBAG_SPLIT=1" : "");
}

/* The options every bag program has: the fields, the vector width, exact
 * division where the device can. */
static char *base_options(clembed_context *ctx, const char *extra) {
  char fields[1024];
  field_options(fields, sizeof fields);
  size_t cap = strlen(fields) + strlen(extra) + 160;
  char *o = malloc(cap);
  if (!o) return NULL;
  snprintf(o, cap, "%s -DVEC=%u%s%s", extra, ctx->tune->bag_vec, fields,
           ctx->exact_div ? " -cl-fp32-correctly-rounded-divide-sqrt" : "");
  return o;
}

/* Devices without 64-bit atomics: the values of the launch's errors. */
static clembed_status record_errors(ce_chain *ch, const char *opts, const bag_args *a, const bag_launch *L) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = ch->ctx;
  cl_kernel k;
  if (ctx->atom64 || !L->reports) return CLEMBED_OK;
  CHECK(ce_kernel(ctx, CE_FAMILY_BAG, opts, "ce_bag_record", &k));
  CHECK(ce_set_args(ctx, k, "ce_bag_record", BAG_COMMON(*a), CE_END));
  CHECK(ce_chain_1d(ch, k, "ce_bag_record", L->count, 0));
cleanup:
  return status;
}

/* ------------------------------------------------------------- checks */

enum { BAG_FORWARD, BAG_BACKWARD, BAG_STEP };

/* A feature's arguments against bags (its table already in F->table). */
static clembed_status check_feature(clembed_context *ctx, const char *what, bag_feat *F, size_t bags, int role) {
  clembed_status status = CLEMBED_OK;
  const clembed_bag_options *o = &F->opt;
  const clembed_matrix *t = F->table, *w = o->per_sample_weights;
  const clembed_ids *ids = F->ids, *off = F->offsets;
  clembed_ids *mr = o->max_rows;
  size_t need;
  ce_pieces_release(&F->tp);
  CHECK(ce_check_pieces(ctx, t, "table", 1, &F->tp));
  F->t_ld = F->tp.ld;
  F->pg0 = 0;
  F->pgn = F->tp.count;
  if (role == BAG_STEP && ce_dtype_is_block(t->dtype))
    FAIL_ARG(CLEMBED_ERR_UNSUPPORTED, "table", -1, (int64_t)t->dtype,
             "%s: table: a quantized table (%s) cannot be trained; F32, F16 or BF16 can", what,
             ce_dtype_name(t->dtype));
  CHECK(ce_check_ids(ctx, ids, "ids"));
  if ((uint64_t)ids->count >= 0xFFFFFFFFu)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "ids", -1, (int64_t)ids->count, "%s: %zu ids; at most 4294967294",
             what, ids->count);
  if ((unsigned)o->mode > (unsigned)CLEMBED_BAG_MAX)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "mode", -1, (int64_t)o->mode, "%s: unknown bag mode %d", what,
             (int)o->mode);
  if ((unsigned)o->policy > (unsigned)CLEMBED_INDEX_WRAP)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "policy", -1, (int64_t)o->policy, "%s: unknown index policy %d", what,
             (int)o->policy);
  CHECK(ce_padding(ctx, o->padding_idx, t->rows, what, &F->padding));
  if (off) {
    CHECK(ce_check_ids(ctx, off, "offsets"));
    if (off->count != bags + 1)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "offsets", -1, (int64_t)off->count,
               "%s: offsets has %zu entries; %zu bags need %zu (a start per bag, then the number of ids)", what,
               off->count, bags, bags + 1);
  } else if (bags ? ids->count % bags != 0 : ids->count != 0) {
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "ids", -1, (int64_t)ids->count,
             "%s: offsets is NULL (bags of one size) but %zu ids do not make %zu bags of one size", what, ids->count,
             bags);
  }
  if (w) {
    if (o->mode != CLEMBED_BAG_SUM)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "per_sample_weights", -1, (int64_t)o->mode,
               "%s: per_sample_weights are for mode SUM only, not %s", what,
               o->mode == CLEMBED_BAG_MEAN ? "MEAN" : "MAX");
    CHECK(ce_check_matrix(ctx, w, "per_sample_weights", &F->w_ld));
    if (w->dtype != CLEMBED_F32 || w->rows != ids->count || w->cols != 1)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "per_sample_weights", -1, (int64_t)w->rows,
               "%s: per_sample_weights is %s %zu x %zu; %zu ids need F32 %zu x 1", what, ce_dtype_name(w->dtype),
               w->rows, w->cols, ids->count, ids->count);
  }
  if (mr) {
    if (o->mode != CLEMBED_BAG_MAX)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "max_rows", -1, (int64_t)o->mode,
               "%s: max_rows is for mode MAX only, not %s", what, o->mode == CLEMBED_BAG_SUM ? "SUM" : "MEAN");
    CHECK(ce_check_ids(ctx, mr, "max_rows"));
    if (ce_mul_overflows(bags, t->cols, &need) || mr->count != need)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "max_rows", -1, (int64_t)mr->count,
               "%s: max_rows has %zu entries; %zu bags of %zu cols need %zu", what, mr->count, bags, t->cols,
               bags * t->cols);
    if (mr->type == CLEMBED_I32 && (uint64_t)t->rows > ((uint64_t)1 << 31))
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "max_rows", -1, (int64_t)t->rows,
               "%s: max_rows is I32 but the table has %zu rows; I64 holds them", what, t->rows);
  } else if (o->mode == CLEMBED_BAG_MAX && role != BAG_FORWARD) {
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "max_rows", -1, 0,
             "%s: max_rows is NULL; the MAX backward needs it as the forward wrote it", what);
  }
cleanup:
  if (status != CLEMBED_OK && F->index >= 0) {
    char at[48];
    snprintf(at, sizeof at, " (features[%ld])", F->index);
    ce_append_message(ctx, at);
  }
  return status;
}

/* The features' column blocks: col0 of each, and their total in *cols. */
static clembed_status place_columns(clembed_context *ctx, const char *what, bag_feat *F, size_t n, size_t *cols) {
  size_t sum = 0;
  for (size_t f = 0; f < n; f++) {
    F[f].col0 = sum;
    if (ce_add_overflows(sum, F[f].table->cols, &sum))
      return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "features", (int64_t)f, 0,
                         "%s: the features' columns overflow size_t", what);
  }
  *cols = sum;
  return CLEMBED_OK;
}

/* An error slot for a feature that can find a bad id or offset. */
static clembed_status feature_slot(clembed_context *ctx, const char *what, bag_feat *F) {
  const clembed_bag_options *o = &F->opt;
  int can_fail = F->offsets != NULL ||
                 (F->ids->count && (o->policy == CLEMBED_INDEX_CHECK || o->policy == CLEMBED_INDEX_WRAP ||
                                    (o->policy == CLEMBED_INDEX_CLAMP && F->table->rows == 0)));
  F->slot = CE_NO_SLOT;
  if (!can_fail) return CLEMBED_OK;
  ce_slot_info info;
  memset(&info, 0, sizeof info);
  info.op = what;
  info.pos_arg = "offsets";
  info.wrap = o->policy == CLEMBED_INDEX_WRAP;
  info.id_rows = F->table->rows;
  info.pos_rows = F->ids->count;
  info.id_arg = "ids";
  info.bag_offsets = 1;
  info.has_feature = F->index >= 0;
  info.feature = F->index >= 0 ? (uint64_t)F->index : 0;
  return ce_slot_reserve(ctx, &info, &F->slot);
}

/* ------------------------------------------------------------- forward */

/* A feature whose table lies in more buffers than one launch takes beside its
 * ids, offsets, weights and max_rows (a table of any number of pieces): the
 * rows its ids take are gathered first (gather.c's ce_gather_rows), and the
 * feature is pooled from there through idx under ZERO with no padding: the
 * same values in the same order, so the same bits. The gather resolves and
 * reports the ids as the pooling would; MAX's max_rows, which the pooling then
 * writes as positions, become rows afterwards (gathered_after). */
static clembed_status gather_rows(ce_chain *ch, const char *what, bag_feat *F) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = ch->ctx;
  const clembed_matrix *t = F->table;
  F->g.on = 1;
  F->g.table = t;
  F->g.ids = F->ids;
  F->g.policy = F->opt.policy;
  F->g.padding = F->padding;
  CHECK(ce_gather_rows(ch, what, t, &F->tp, F->ids, F->opt.policy, F->padding, F->slot, &F->g.rows, &F->g.idx));
  if (F->opt.mode == CLEMBED_BAG_MAX && F->opt.max_rows) {
    size_t m = F->opt.max_rows->count;
    F->g.max_rows = F->opt.max_rows;
    F->g.pos_rows = (clembed_ids){NULL, 0, m, CLEMBED_I64};
    CHECK(ce_buffer(ctx, CE_BUFFER_TEMP, (m ? m : 1) * sizeof(cl_long), NULL, "bags: gathered max_rows",
                    &F->g.pos_rows.buffer));
    F->opt.max_rows = &F->g.pos_rows;
  }
  /* the feature from here on: the gathered rows through idx */
  F->table = &F->g.rows;
  F->ids = &F->g.idx;
  F->opt.policy = CLEMBED_INDEX_ZERO;
  F->padding = -1;
  ce_pieces_release(&F->tp);
  CHECK(ce_check_pieces(ctx, F->table, "table", 1, &F->tp));
  F->t_ld = F->tp.ld;
  F->pg0 = 0;
  F->pgn = F->tp.count;
cleanup:
  return status;
}

/* After a gathered feature's pooling: MAX's max_rows from the positions, and
 * on a device without 64-bit atomics the first bad id's value from the ids as
 * given (the pooling's record read the gathered ones). */
static clembed_status gathered_after(ce_chain *ch, const bag_feat *F) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = ch->ctx;
  char *opts = NULL;
  cl_kernel k;
  const clembed_ids *ids = F->g.ids;
  cl_ulong id_off = ids->offset, rows = F->g.table->rows;
  cl_int id64 = ids->type == CLEMBED_I64, policy = (cl_int)F->g.policy;
  cl_long padding = F->g.padding;
  opts = base_options(ctx, "-DMODES=0");
  if (!opts) return ce_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "bags: out of host memory");
  if (F->g.max_rows) {
    const clembed_ids *mr = F->g.max_rows;
    cl_ulong m = mr->count, mr_off = mr->offset;
    cl_int mr64 = mr->type == CLEMBED_I64;
    CHECK(ce_kernel(ctx, CE_FAMILY_BAG, opts, "ce_bag_gather_rows", &k));
    CHECK(ce_set_args(ctx, k, "ce_bag_gather_rows", CE_ARG(ids->buffer), CE_ARG(ids->buffer), CE_ARG(id_off),
                      CE_ARG(id64), CE_ARG(rows), CE_ARG(policy), CE_ARG(padding), CE_ARG(F->g.pos_rows.buffer),
                      CE_ARG(m), CE_ARG(mr->buffer), CE_ARG(mr->buffer), CE_ARG(mr_off), CE_ARG(mr64), CE_END));
    CHECK(ce_chain_1d(ch, k, "ce_bag_gather_rows", mr->count, 0));
  }
  if (!ctx->atom64 && F->slot != CE_NO_SLOT) {
    cl_uint slot = F->slot;
    cl_ulong zero = 0;
    cl_int no = 0;
    CHECK(ce_kernel(ctx, CE_FAMILY_BAG, opts, "ce_record_error", &k));
    CHECK(ce_set_args(ctx, k, "ce_record_error", CE_ARG(ctx->errbuf), CE_ARG(slot), CE_ARG(ids->buffer),
                      CE_ARG(ids->buffer), CE_ARG(id_off), CE_ARG(id64), CE_ARG(ids->buffer), CE_ARG(ids->buffer),
                      CE_ARG(zero), CE_ARG(no), CE_ARG(no), CE_ARG(zero), CE_END));
    CHECK(ce_chain_1d(ch, k, "ce_record_error", 1, 0));
  }
cleanup:
  free(opts);
  return status;
}

static clembed_status forward_run(clembed_context *ctx, const char *what, bag_feat *F, size_t n,
                                  clembed_matrix *out, cl_uint nwait, const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  bag_launch *L = NULL;
  bag_feat *G = NULL;
  size_t nl = 0, o_ld, cols, bags;
  cl_mem desc = NULL;
  char *base = NULL, opts[2048];
  const ce_tuning *t = ctx->tune;
  int cpu = t->cpu_shapes, by_feature = cpu && t->bag_by_feature;
  ce_chain ch;
  ce_pieces op; /* out's pieces: launches over windows of them where they are many */
  ce_pieces *omats[1] = {&op};
  ce_pieces_none(&op);
  ce_chain_init(&ch, ctx, nwait, wait);
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_check_pieces(ctx, out, "out", 0, &op));
  o_ld = op.ld;
  bags = out->rows;
  for (size_t f = 0; f < n; f++) CHECK(check_feature(ctx, what, &F[f], bags, BAG_FORWARD));
  CHECK(place_columns(ctx, what, F, n, &cols));
  if (out->cols != cols)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "out", -1, (int64_t)out->cols,
             "%s: out is %zu x %zu but %zu bags of %zu columns need %zu x %zu", what, out->rows, out->cols, bags,
             cols, bags, cols);
  for (size_t f = 0; f < n; f++) CHECK(feature_slot(ctx, what, &F[f]));
  for (size_t f = 0; f < n; f++)
    if (own_buffers(&F[f]) > CLEMBED_BAGS_BUFFERS) CHECK(gather_rows(&ch, what, &F[f]));
  /* the features by table dtype (stable), so that a launch's program pools one
   * dtype: the program of the features alone, and no program with every
   * dtype's code at once (minutes of compiling on some devices) */
  G = malloc((n ? n : 1) * sizeof *G);
  if (!G) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
  for (unsigned d = 0, g = 0; d < 32; d++)
    for (size_t f = 0; f < n; f++)
      if ((unsigned)F[f].table->dtype == d) G[g++] = F[f];
  CHECK(plan(ctx, what, G, n, t->bag_vec, 1, 1, &L, &nl));
  CHECK(describe(ctx, G, n, L, nl, t->bag_vec, bags, 1, &desc, NULL));
  CHECK(ce_pieces_plan(ctx, what, omats, 1));
  {
    char extra[256];
    snprintf(extra, sizeof extra,
             "-DOUT_DT=%d -DTILE=%u -DROWS=%u -DAHEAD=%u -DPLAIN=%d -DBY_FEATURE=%d", (int)out->dtype, t->bag_tile,
             !cpu ? 1 : n > 1 ? t->bag_rows_features : t->bag_rows, ctx->prefetch ? t->bag_ahead : 0,
             cpu && t->bag_plain, by_feature);
    ce_pieces_option(extra, sizeof extra, &op, "out");
    base = base_options(ctx, extra);
    if (!base) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
  }
  const char *name = cpu ? "ce_bag_rows" : "ce_bag_cols";
  cl_ulong o_ldl = o_ld;
  cl_float zero = 0.0f; /* the accumulators' start, opaque to the compiler (bag.cl) */
  for (size_t l = 0; l < nl; l++) {
    cl_kernel k;
    bag_args a = launch_args(desc, &L[l], bags);
    cl_ulong nchunks = L[l].chunks;
    launch_options(opts, sizeof opts, base, &L[l]);
    CHECK(ce_kernel(ctx, CE_FAMILY_BAG, opts, name, &k));
    do { /* a launch per window of out's pieces: each writes the bags of its rows */
      CHECK(ce_set_args(ctx, k, name, BAG_COMMON(a), CE_PIECES(&op), CE_ARG(o_ldl), CE_ARG(nchunks), CE_ARG(zero),
                        CE_END));
      size_t items = bags ? bags : 1; /* with no bags one item checks the offsets */
      if (by_feature && ce_mul_overflows(items, L[l].count, &items))
        FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "out", -1, (int64_t)bags, "%s: %zu bags of %zu features overflow size_t",
                 what, bags, L[l].count);
      if (cpu)
        CHECK(ce_chain_1d(&ch, k, name, items, CE_LOCAL_ROWS));
      else
        CHECK(ce_chain_2d(&ch, k, name, L[l].chunks, items));
    } while (ce_pieces_next(omats, 1));
    CHECK(record_errors(&ch, opts, &a, &L[l]));
  }
  for (size_t f = 0; f < n; f++)
    if (F[f].g.on) CHECK(gathered_after(&ch, &F[f]));
  CHECK(ce_chain_close(&ch, event));
cleanup:
  ce_pieces_release(&op);
  release_features(F, n);
  if (desc) clReleaseMemObject(desc);
  free(L);
  free(G);
  free(base);
  ce_chain_release(&ch);
  return status;
}

clembed_status clembed_embedding_bag(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                                     const clembed_ids *offsets, const clembed_bag_options *opt, clembed_matrix *out,
                                     cl_uint nwait, const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, "clembed_embedding_bag");
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  bag_feat F;
  clembed_status status = one_feature(ctx, table, ids, offsets, opt, &F);
  if (status == CLEMBED_OK) status = forward_run(ctx, "clembed_embedding_bag", &F, 1, out, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

/* The features of a batched call (read with the stride of features[0]'s
 * struct_size, each as far as its struct_size goes), unchecked beyond their
 * pointers. */
static clembed_status batch_features(clembed_context *ctx, const char *what, const clembed_bag_feature *features,
                                     size_t n, bag_feat **out) {
  clembed_status status = CLEMBED_OK;
  bag_feat *F = NULL;
  size_t stride = 0;
  *out = NULL;
  if (!features && n)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "features", -1, (int64_t)n, "%s: features is NULL with n = %zu", what, n);
  F = calloc(n ? n : 1, sizeof *F);
  if (!F) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
  CHECK(ce_struct_stride(ctx, NULL, "features", &ce_bag_feature_layout, features, n, &stride));
  for (size_t f = 0; f < n; f++) {
    clembed_bag_feature ft = clembed_bag_feature_defaults();
    CHECK(ce_struct_read(ctx, NULL, "features", (int64_t)f, &ce_bag_feature_layout,
                         (const char *)features + f * stride, &ft));
    if (!ft.table || !ft.ids)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, ft.table ? "ids" : "table", (int64_t)f, 0,
               "%s: features[%zu].%s is NULL", what, f, ft.table ? "ids" : "table");
    F[f].table = ft.table;
    F[f].ids = ft.ids;
    F[f].offsets = ft.offsets;
    F[f].opt = ft.options;
    F[f].index = (long)f;
    F[f].slot = CE_NO_SLOT;
  }
  *out = F;
  F = NULL;
cleanup:
  free(F);
  return status;
}

clembed_status clembed_embedding_bags(clembed_context *ctx, const clembed_bag_feature *features, size_t n,
                                      clembed_matrix *out, cl_uint nwait, const cl_event *wait, cl_event *event) {
  const char *what = "clembed_embedding_bags";
  clembed_status status;
  cl_event own;
  bag_feat *F;
  CE_ENTER(ctx, what);
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  status = batch_features(ctx, what, features, n, &F);
  if (status == CLEMBED_OK) status = forward_run(ctx, what, F, n, out, nwait, wait, ev);
  free(F);
  return ce_track_end(ctx, status, event, &own);
}

/* ------------------------------------------------------------ backward */

/* The features that feed one table's fold, and the temporaries of their
 * contributions. */
typedef struct bag_fold {
  clembed_context *ctx;
  const char *what;
  bag_feat *F;
  size_t n, bags, g_ld, rows; /* rows: the fold's table's (the key of nothing) */
  bag_sizes sz;
  cl_mem counts, mrt;
  ce_contrib contrib;
} bag_fold;

/* Checks, and the temporaries (the records, MEAN's counts, MAX's max_rows). */
static clembed_status fold_prepare(bag_fold *s) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = s->ctx;
  size_t vec = ctx->tune->bag_vec, bytes;
  bag_launch *L = NULL;
  size_t nl = 0;
  CHECK(plan(ctx, s->what, s->F, s->n, vec, 0, 0, &L, &nl));
  CHECK(describe(ctx, s->F, s->n, L, nl, vec, s->bags, 0, NULL, &s->sz));
  if ((uint64_t)s->sz.entries >= 0xFFFFFFFFu)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "ids", -1, (int64_t)s->sz.entries,
             "%s: %zu ids feed one table; at most 4294967294", s->what, s->sz.entries);
  if (ce_mul_overflows(s->sz.entries, 2 * sizeof(cl_ulong), &bytes))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "ids", -1, 0, "%s: the ids' records overflow size_t", s->what);
  CHECK(ce_buffer(ctx, CE_BUFFER_TEMP, bytes, NULL, "bags: records", &s->contrib.records));
  CHECK(ce_buffer(ctx, CE_BUFFER_TEMP, s->sz.counts * sizeof(cl_float), NULL, "bags: counts", &s->counts));
  if (s->sz.mrt) {
    if (ce_mul_overflows(s->sz.mrt, sizeof(cl_long), &bytes))
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "max_rows", -1, 0, "%s: max_rows overflow size_t", s->what);
    CHECK(ce_buffer(ctx, CE_BUFFER_TEMP, bytes, NULL, "bags: max_rows", &s->mrt));
  }
  s->contrib.count = s->sz.entries;
  s->contrib.max_rows = s->mrt ? s->mrt : s->contrib.records;
  s->contrib.data = s;
cleanup:
  free(L);
  return status;
}

static void fold_release(bag_fold *s) {
  if (s->contrib.records) clReleaseMemObject(s->contrib.records);
  if (s->counts) clReleaseMemObject(s->counts);
  if (s->mrt) clReleaseMemObject(s->mrt);
  s->contrib.records = s->counts = s->mrt = NULL;
}

/* The contributions' producer (ce_contrib's keys): the features' slots, the
 * offsets checked and MEAN's counts, MAX's max_rows gathered, the keys and
 * records; keys and idx NULL: the checks alone (a fold of no ids). */
static clembed_status fold_keys(ce_chain *ch, const ce_contrib *c, cl_mem keys, cl_mem idx, int key64) {
  clembed_status status = CLEMBED_OK;
  bag_fold *s = c->data;
  clembed_context *ctx = ch->ctx;
  size_t vec = ctx->tune->bag_vec, nl = 0;
  bag_launch *L = NULL;
  cl_mem desc = NULL;
  char *base = NULL, opts[2048], extra[64];
  for (size_t f = 0; f < s->n; f++) CHECK(feature_slot(ctx, s->what, &s->F[f]));
  CHECK(plan(ctx, s->what, s->F, s->n, vec, 0, 0, &L, &nl));
  CHECK(describe(ctx, s->F, s->n, L, nl, vec, s->bags, 0, &desc, NULL));
  snprintf(extra, sizeof extra, "-DKEY64=%d -DMODES=0", key64); /* (no pooling: one program for all) */
  base = base_options(ctx, extra);
  if (!base) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", s->what);
  cl_ulong rows = s->rows, g_ld = s->g_ld;
  size_t items = s->bags ? s->bags : 1;
  for (size_t l = 0; l < nl; l++) {
    cl_kernel k;
    bag_args a = launch_args(desc, &L[l], s->bags);
    snprintf(opts, sizeof opts, "%s", base);
    CHECK(ce_kernel(ctx, CE_FAMILY_BAG, opts, "ce_bag_counts", &k));
    CHECK(ce_set_args(ctx, k, "ce_bag_counts", BAG_COMMON(a), CE_ARG(s->counts), CE_END));
    CHECK(ce_chain_2d(ch, k, "ce_bag_counts", L[l].count, items));
    if (L[l].max && s->bags && keys) {
      CHECK(ce_kernel(ctx, CE_FAMILY_BAG, opts, "ce_bag_gather_max", &k));
      CHECK(ce_set_args(ctx, k, "ce_bag_gather_max", BAG_COMMON(a), CE_ARG(s->mrt), CE_END));
      CHECK(ce_chain_2d(ch, k, "ce_bag_gather_max", ctx->tune->row_items, s->bags));
    }
    if (keys && L[l].entries) {
      cl_ulong e_first = 0, e_count = L[l].entries;
      for (size_t f = 0; f < L[l].first; f++) e_first += s->F[f].ids->count;
      CHECK(ce_kernel(ctx, CE_FAMILY_BAG, opts, "ce_bag_keys", &k));
      CHECK(ce_set_args(ctx, k, "ce_bag_keys", BAG_COMMON(a), CE_ARG(s->counts), CE_ARG(rows), CE_ARG(g_ld),
                        CE_ARG(e_first), CE_ARG(e_count), CE_ARG(keys), CE_ARG(idx), CE_ARG(c->records), CE_END));
      CHECK(ce_chain_1d(ch, k, "ce_bag_keys", L[l].entries, 0));
    }
    CHECK(record_errors(ch, opts, &a, &L[l]));
  }
cleanup:
  if (desc) clReleaseMemObject(desc);
  free(L);
  free(base);
  return status;
}

/* After a fold of no ids (which runs no producer): the features' checks. */
static clembed_status fold_checks_alone(bag_fold *s, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  ce_chain ch;
  ce_chain_init(&ch, s->ctx, *event ? 1 : 0, *event ? event : NULL);
  cl_event done = NULL;
  CHECK(fold_keys(&ch, &s->contrib, NULL, NULL, 0));
  CHECK(ce_chain_close(&ch, &done));
  if (*event) clReleaseEvent(*event);
  *event = done;
cleanup:
  ce_chain_release(&ch);
  return status;
}

static clembed_backward_options fold_options(void) {
  clembed_backward_options o = clembed_backward_defaults(); /* scale 1, no frequency, no dropout */
  return o;
}

/* One table's fold: the backward (grad_table, accumulated) or an optimizer's
 * step (o), of the contributions of s's features; *event receives its last
 * command's event. */
static clembed_status fold_run(bag_fold *s, const clembed_matrix *grad_out, clembed_matrix *target,
                               const clembed_optimizer *o, cl_uint nwait, const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  clembed_backward_options bo = fold_options();
  *event = NULL;
  s->contrib.keys = fold_keys;
  CHECK(fold_prepare(s));
  if (o) {
    CHECK(ce_optimizer_fold(s->ctx, s->what, grad_out, NULL, &bo, o, target, &s->contrib, nwait, wait, event));
  } else {
    ce_step step = {s->what, CE_STORE_ACCUMULATE, 0.0f, 0, NULL, &s->contrib};
    CHECK(ce_segment_step(s->ctx, &step, grad_out, NULL, &bo, target, nwait, wait, event));
  }
  if (s->contrib.count == 0) CHECK(fold_checks_alone(s, event));
cleanup:
  fold_release(s);
  return status;
}

/* grad_out against the features: bags rows, their columns (its pieces in *gp,
 * its ld in *ld; ce_pieces_release *gp). */
static clembed_status check_grad_out(clembed_context *ctx, const char *what, const clembed_matrix *g, size_t cols,
                                     ce_pieces *gp, size_t *ld) {
  clembed_status status = CLEMBED_OK;
  ce_pieces_release(gp);
  CHECK(ce_check_pieces(ctx, g, "grad_out", 0, gp));
  *ld = gp->ld;
  if (g->cols != cols)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "grad_out", -1, (int64_t)g->cols,
             "%s: grad_out has %zu cols; the bags' output has %zu", what, g->cols, cols);
cleanup:
  return status;
}

/* grad_weights: a work-item per id (the feature's slot has reported its bad
 * ids). A table in more buffers than one launch takes beside the feature's
 * others: a launch per window of its pieces, each writing the ids whose rows
 * it holds (the first also those that take no row). */
static clembed_status grad_weights_run(ce_chain *ch, const char *what, bag_feat F, size_t bags,
                                       const clembed_matrix *grad_out, ce_pieces *gp, size_t g_ld, clembed_matrix *gw,
                                       size_t gw_ld) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = ch->ctx;
  size_t vec = ctx->tune->bag_vec, nl = 0, count = F.tp.count, per;
  bag_launch *L = NULL;
  cl_mem desc = NULL;
  char *base = NULL, opts[2048], extra[64];
  cl_kernel k;
  ce_joined gj;
  memset(&gj, 0, sizeof gj);
  F.slot = CE_NO_SLOT;
  {
    cl_mem m[BAG_FEATURE_BUFFERS];
    F.pgn = 1;
    int others = feature_buffers(&F, 0, m) - 1; /* ids, offsets, per_sample_weights */
    per = (size_t)(CLEMBED_BAGS_BUFFERS - others);
  }
  ce_pieces *gmats[1] = {gp}; /* grad_out: every piece in each launch, as in the fold (joined when they */
  gp->whole = 1;              /* do not fit one launch) */
  if (ce_pieces_plan_short(ctx, gmats, 1) == 0) CHECK(ce_join(ch, what, grad_out, gp, 1, &gj));
  CHECK(ce_pieces_plan(ctx, what, gmats, 1));
  snprintf(extra, sizeof extra, "-DGRAD_DT=%d", (int)grad_out->dtype);
  ce_pieces_option(extra, sizeof extra, gp, "grad");
  base = base_options(ctx, extra);
  if (!base) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
  cl_ulong g_ldl = g_ld, w_off = gw->offset, w_ldl = gw_ld;
  for (F.pg0 = 0; F.pg0 < count; F.pg0 += F.pgn) {
    F.pgn = count - F.pg0 < per ? count - F.pg0 : per;
    CHECK(plan(ctx, what, &F, 1, vec, 1, 1, &L, &nl));
    CHECK(describe(ctx, &F, 1, L, nl, vec, bags, 1, &desc, NULL));
    launch_options(opts, sizeof opts, base, &L[0]);
    bag_args a = launch_args(desc, &L[0], bags);
    CHECK(ce_kernel(ctx, CE_FAMILY_BAG, opts, "ce_bag_grad_weights", &k));
    CHECK(ce_set_args(ctx, k, "ce_bag_grad_weights", BAG_COMMON(a), CE_PIECES(gp), CE_ARG(g_ldl), CE_ARG(gw->buffer),
                      CE_ARG(w_off), CE_ARG(w_ldl), CE_END));
    CHECK(ce_chain_1d(ch, k, "ce_bag_grad_weights", F.ids->count, 0));
    clReleaseMemObject(desc); /* (the enqueued kernel holds it) */
    desc = NULL;
    free(L);
    L = NULL;
  }
cleanup:
  if (desc) clReleaseMemObject(desc);
  free(L);
  free(base);
  ce_joined_release(&gj);
  return status;
}

clembed_status clembed_bag_backward(clembed_context *ctx, const clembed_matrix *grad_out, const clembed_ids *ids,
                                    const clembed_ids *offsets, const clembed_bag_options *opt,
                                    const clembed_matrix *table, clembed_matrix *grad_table,
                                    clembed_matrix *grad_weights, cl_uint nwait, const cl_event *wait,
                                    cl_event *event) {
  const char *what = "clembed_bag_backward";
  clembed_status status = CLEMBED_OK;
  cl_event own, mid = NULL;
  size_t g_ld, gw_ld = 0;
  ce_chain ch;
  ce_pieces gtp, gp; /* grad_table checked here (the fold takes its pieces); grad_out's for grad_weights */
  CE_ENTER(ctx, what);
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  ce_chain_init(&ch, ctx, nwait, wait);
  ce_pieces_none(&gtp);
  ce_pieces_none(&gp);
  bag_feat F;
  CHECK(one_feature(ctx, table ? table : grad_table, ids, offsets, opt, &F));
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_check_pieces(ctx, grad_table, "grad_table", 0, &gtp));
  if (grad_table->dtype != CLEMBED_F32)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "grad_table", -1, (int64_t)grad_table->dtype,
             "%s: grad_table must be F32 (%s)", what, ce_dtype_name(grad_table->dtype));
  if (table && (table->rows != grad_table->rows || table->cols != grad_table->cols))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "grad_table", -1, (int64_t)grad_table->rows,
             "%s: grad_table is %zu x %zu but the table is %zu x %zu", what, grad_table->rows, grad_table->cols,
             table ? table->rows : 0, table ? table->cols : 0);
  CHECK(check_grad_out(ctx, what, grad_out, grad_out->cols, &gp, &g_ld));
  CHECK(check_feature(ctx, what, &F, grad_out->rows, BAG_BACKWARD));
  CHECK(check_grad_out(ctx, what, grad_out, F.table->cols, &gp, &g_ld));
  if (grad_weights) {
    if (!table)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "table", -1, 0, "%s: grad_weights needs the table (it is NULL)", what);
    if (F.opt.mode != CLEMBED_BAG_SUM)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "grad_weights", -1, (int64_t)F.opt.mode,
               "%s: grad_weights is for mode SUM only, not %s", what,
               F.opt.mode == CLEMBED_BAG_MEAN ? "MEAN" : "MAX");
    CHECK(ce_check_matrix(ctx, grad_weights, "grad_weights", &gw_ld));
    if (grad_weights->dtype != CLEMBED_F32 || grad_weights->rows != ids->count || grad_weights->cols != 1)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "grad_weights", -1, (int64_t)grad_weights->rows,
               "%s: grad_weights is %s %zu x %zu; %zu ids need F32 %zu x 1", what,
               ce_dtype_name(grad_weights->dtype), grad_weights->rows, grad_weights->cols, ids->count, ids->count);
  }
  {
    bag_fold s;
    memset(&s, 0, sizeof s);
    s.ctx = ctx;
    s.what = what;
    s.F = &F;
    s.n = 1;
    s.bags = grad_out->rows;
    s.g_ld = g_ld;
    s.rows = grad_table->rows;
    CHECK(fold_run(&s, grad_out, grad_table, NULL, nwait, wait, &mid));
  }
  if (grad_weights) {
    ce_chain_release(&ch);
    ce_chain_init(&ch, ctx, mid ? 1 : 0, mid ? &mid : NULL);
    CHECK(grad_weights_run(&ch, what, F, grad_out->rows, grad_out, &gp, g_ld, grad_weights, gw_ld));
    CHECK(ce_chain_close(&ch, ev));
  } else if (ev) {
    *ev = mid;
    mid = NULL;
  }
cleanup:
  if (mid) clReleaseEvent(mid);
  ce_chain_release(&ch);
  ce_pieces_release(&gtp);
  ce_pieces_release(&gp);
  release_features(&F, 1);
  return ce_track_end(ctx, status, event, &own);
}

/* Two features use the same table: the same matrix. */
static int same_table(const clembed_matrix *a, const clembed_matrix *b) {
  size_t la = a->ld ? a->ld : a->cols, lb = b->ld ? b->ld : b->cols;
  return a->buffer == b->buffer && a->offset == b->offset && a->rows == b->rows && a->cols == b->cols && la == lb &&
         a->dtype == b->dtype;
}

static int same_state(const clembed_matrix *a, const clembed_matrix *b) {
  if (!a || !b) return a == b;
  return same_table(a, b);
}

static int same_optimizer(const clembed_optimizer *a, const clembed_optimizer *b) {
  return a->kind == b->kind && a->learning_rate == b->learning_rate && a->eps == b->eps && a->beta1 == b->beta1 &&
         a->beta2 == b->beta2 && a->weight_decay == b->weight_decay && a->step == b->step &&
         same_state(a->state, b->state) && same_state(a->state2, b->state2);
}

/* The steps of the features' tables: o[f] for feature f (o[0] for a single
 * one). Everything is checked before the first fold is enqueued; then a fold
 * per distinct table, in the order the tables first occur, each waiting for
 * the one before. */
static clembed_status steps_run(clembed_context *ctx, const char *what, bag_feat *F, size_t n,
                                const clembed_matrix *grad_out, const clembed_optimizer *o, cl_uint nwait,
                                const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  size_t g_ld, cols, *lead = NULL;
  bag_feat *G = NULL;
  cl_event prev = NULL, ev = NULL;
  ce_pieces gp; /* grad_out's (checked here; the fold takes its pieces) */
  ce_pieces_none(&gp);
  CHECK(ce_check_events(ctx, nwait, wait));
  if (!o) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "o", -1, 0, "%s: the optimizer is NULL", what);
  CHECK(check_grad_out(ctx, what, grad_out, grad_out->cols, &gp, &g_ld));
  for (size_t f = 0; f < n; f++) CHECK(check_feature(ctx, what, &F[f], grad_out->rows, BAG_STEP));
  CHECK(place_columns(ctx, what, F, n, &cols));
  CHECK(check_grad_out(ctx, what, grad_out, cols, &gp, &g_ld));
  lead = malloc((n ? n : 1) * sizeof *lead);
  G = calloc(n ? n : 1, sizeof *G);
  if (!lead || !G) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
  for (size_t f = 0; f < n; f++) {
    lead[f] = f;
    for (size_t g = 0; g < f && lead[f] == f; g++)
      if (same_table(F[g].table, F[f].table)) lead[f] = lead[g];
    if (lead[f] == f) {
      ce_optim_step p;
      status = ce_optimizer_check(ctx, what, &o[f], F[f].table, &p);
      ce_pieces_release(&p.s1);
      ce_pieces_release(&p.s2);
      if (status != CLEMBED_OK) {
        if (F[f].index >= 0) {
          char at[48];
          snprintf(at, sizeof at, " (o[%zu])", f);
          ce_append_message(ctx, at);
        }
        goto cleanup;
      }
    } else if (!same_optimizer(&o[f], &o[lead[f]])) {
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "o", (int64_t)f, 0,
               "%s: features[%zu] shares the table of features[%zu] but o[%zu] is not o[%zu] (the same kind, "
               "fields and states)",
               what, f, lead[f], f, lead[f]);
    }
  }
  for (size_t f = 0; f < n; f++) {
    if (lead[f] != f) continue;
    size_t m = 0;
    for (size_t g = f; g < n; g++)
      if (lead[g] == f) G[m++] = F[g];
    bag_fold s;
    memset(&s, 0, sizeof s);
    s.ctx = ctx;
    s.what = what;
    s.F = G;
    s.n = m;
    s.bags = grad_out->rows;
    s.g_ld = g_ld;
    s.rows = F[f].table->rows;
    CHECK(fold_run(&s, grad_out, (clembed_matrix *)F[f].table, &o[f], prev ? 1 : nwait, prev ? &prev : wait, &ev));
    if (prev) clReleaseEvent(prev);
    prev = ev;
    ev = NULL;
  }
  if (!prev) { /* no feature: the event completes after the wait list */
    ce_chain ch;
    ce_chain_init(&ch, ctx, nwait, wait);
    status = ce_chain_close(&ch, event);
    ce_chain_release(&ch);
  } else if (event) {
    *event = prev;
    prev = NULL;
  }
cleanup:
  if (prev) clReleaseEvent(prev);
  if (ev) clReleaseEvent(ev);
  release_features(F, n);
  ce_pieces_release(&gp);
  free(lead);
  free(G);
  return status;
}

clembed_status clembed_bag_optimizer_step(clembed_context *ctx, const clembed_matrix *grad_out,
                                          const clembed_ids *ids, const clembed_ids *offsets,
                                          const clembed_bag_options *opt, const clembed_optimizer *o,
                                          clembed_matrix *table, cl_uint nwait, const cl_event *wait,
                                          cl_event *event) {
  const char *what = "clembed_bag_optimizer_step";
  cl_event own;
  CE_ENTER(ctx, what);
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  bag_feat F;
  clembed_optimizer *oo = NULL;
  clembed_status status = one_feature(ctx, table, ids, offsets, opt, &F);
  if (status == CLEMBED_OK) status = read_optimizers(ctx, what, o, 1, 0, &oo);
  if (status == CLEMBED_OK) status = steps_run(ctx, what, &F, 1, grad_out, oo, nwait, wait, ev);
  free(oo);
  return ce_track_end(ctx, status, event, &own);
}

clembed_status clembed_bags_optimizer_step(clembed_context *ctx, const clembed_bag_feature *features, size_t n,
                                           const clembed_matrix *grad_out, const clembed_optimizer *o,
                                           cl_uint nwait, const cl_event *wait, cl_event *event) {
  const char *what = "clembed_bags_optimizer_step";
  clembed_status status;
  cl_event own;
  bag_feat *F;
  CE_ENTER(ctx, what);
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  clembed_optimizer *oo = NULL;
  status = batch_features(ctx, what, features, n, &F);
  if (status == CLEMBED_OK) status = read_optimizers(ctx, what, o, n, 1, &oo);
  if (status == CLEMBED_OK) status = steps_run(ctx, what, F, n, grad_out, oo, nwait, wait, ev);
  free(F);
  free(oo);
  return ce_track_end(ctx, status, event, &own);
}

/* -------------------------------------------------------------- renorm */

clembed_status clembed_renorm(clembed_context *ctx, clembed_matrix *table, const clembed_ids *ids, float max_norm,
                              float norm_type, cl_uint nwait, const cl_event *wait, cl_event *event) {
  const char *what = "clembed_renorm";
  clembed_status status = CLEMBED_OK;
  cl_event own;
  size_t t_ld;
  ce_sort srt;
  ce_chain ch;
  ce_pieces tp; /* the table's pieces: launches over windows of them where they are many */
  ce_pieces *tmats[1] = {&tp};
  char *opts = NULL, extra[128];
  CE_ENTER(ctx, what);
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  memset(&srt, 0, sizeof srt);
  ce_pieces_none(&tp);
  ce_chain_init(&ch, ctx, nwait, wait);
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_check_pieces(ctx, table, "table", 0, &tp));
  t_ld = tp.ld;
  CHECK(ce_check_ids(ctx, ids, "ids"));
  if ((uint64_t)ids->count >= 0xFFFFFFFFu)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "ids", -1, (int64_t)ids->count, "%s: %zu ids; at most 4294967294", what,
             ids->count);
  if (!(max_norm >= 0.0f) || isinf(max_norm))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "max_norm", -1, 0, "%s: max_norm %g must be finite and >= 0", what,
             (double)max_norm);
  if (!(norm_type > 0.0f))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "norm_type", -1, 0, "%s: norm_type %g must be > 0 (or INFINITY)", what,
             (double)norm_type);
  ce_record rec = {CE_NO_SLOT, CE_FAMILY_BAG, NULL, ids, NULL, 0};
  if (ids->count) {
    cl_int kind = norm_type == 1.0f ? 1 : norm_type == 2.0f ? 2 : isinf(norm_type) ? 3 : 0;
    cl_float p = norm_type, inv_p = 1.0f / norm_type, mn = max_norm;
    int key64 = (uint64_t)table->rows > 0xFFFFFFFFu;
    cl_ulong n = ids->count, rows = table->rows, none64 = rows, t_ldl = t_ld;
    cl_ulong cols = table->cols, id_off = ids->offset;
    cl_uint none32 = (cl_uint)rows;
    cl_int id64 = ids->type == CLEMBED_I64;
    cl_kernel k;
    int which;
    CHECK(ce_pieces_plan(ctx, what, tmats, 1));
    snprintf(extra, sizeof extra, "-DTABLE_DT=%d -DKEY64=%d -DMODES=0", (int)table->dtype, key64);
    ce_pieces_option(extra, sizeof extra, &tp, "tab");
    opts = base_options(ctx, extra);
    if (!opts) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    rec.options = opts;
    ce_slot_info info;
    memset(&info, 0, sizeof info);
    info.op = what;
    info.id_rows = table->rows;
    CHECK(ce_slot_reserve(ctx, &info, &rec.slot));
    CHECK(ce_sort_alloc(ctx, ids->count, key64, &srt));
    CHECK(ce_kernel(ctx, CE_FAMILY_BAG, opts, "ce_renorm_keys", &k));
    CHECK(ce_set_args(ctx, k, "ce_renorm_keys", CE_ARG(ids->buffer), CE_ARG(ids->buffer), CE_ARG(id_off),
                      CE_ARG(id64), CE_ARG(n), CE_ARG(rows), CE_ARG(srt.keys[0]), CE_ARG(srt.idx[0]),
                      CE_ARG(ctx->errbuf), CE_ARG(rec.slot), CE_END));
    CHECK(ce_chain_1d(&ch, k, "ce_renorm_keys", ids->count, 0));
    if (cols) {
      CHECK(ce_sort_run(&ch, &srt, ce_bit_width(rows), &which));
      CHECK(ce_kernel(ctx, CE_FAMILY_BAG, opts, "ce_renorm_rows", &k));
      do { /* a launch per window of the table's pieces: each renorms the rows it holds */
        CHECK(ce_set_args(ctx, k, "ce_renorm_rows", CE_PIECES(&tp), CE_ARG(t_ldl), CE_ARG(cols),
                          CE_ARG(srt.keys[which]), CE_ARG(n), key64 ? sizeof none64 : sizeof none32,
                          key64 ? (const void *)&none64 : (const void *)&none32, CE_ARG(mn), CE_ARG(kind), CE_ARG(p),
                          CE_ARG(inv_p), CE_END));
        CHECK(ce_chain_1d(&ch, k, "ce_renorm_rows", ids->count, 0));
      } while (ce_pieces_next(tmats, 1));
    }
  }
  CHECK(ce_chain_close_checked(&ch, &rec, ev));
cleanup:
  ce_sort_release(&srt);
  ce_chain_release(&ch);
  ce_pieces_release(&tp);
  free(opts);
  return ce_track_end(ctx, status, event, &own);
}
