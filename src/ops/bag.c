/* What the bag calls share (bag.h): the options' defaults, the features read
 * and checked, their launches planned and described to the kernels, and the
 * options every bag program has. The calls are bag_forward.c's,
 * bag_train.c's and bag_renorm.c's; the kernels cl/ops/bag.cl's.
 *
 * Features and launches. Every call describes its features to the kernels in
 * one descriptor (BAG_FIELDS: a row of ulongs per feature, the field indices
 * passed as -DBF_NAME options, so this list is the only one) and gives each
 * launch up to CLEMBED_BAGS_BUFFERS buffers: bag_plan() takes the features in
 * order into groups whose distinct buffers (table, ids, offsets, weights,
 * max_rows) fit, and each group is one launch of each kernel. The program of
 * a launch is built for the one table dtype and the poolings its features use
 * (TABLE_DT, MODES): a launch that reads rows reads one dtype (the forward
 * takes the features by dtype, then in order).
 *
 * Split matrices (include/clembed.h, "Tables past one buffer"). A bag is
 * pooled in one work-item over rows of any piece, so the forward's launch
 * takes every piece of a feature's table as one of its buffers (BF_TAB_NP,
 * the pieces listed in the descriptor; -DBAG_SPLIT=1), and a table whose
 * pieces do not fit beside its feature's other buffers is refused; out goes
 * through pieces.cl (a launch per window of its pieces). grad_weights reads
 * the table a window of its pieces per launch. The backward and the steps hand
 * the tables, states and grad_out to the fold as pieces; renorm's table goes
 * through pieces.cl. */
#include "bag.h"

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

/* ------------------------------------------------------------- features */

void bag_release_features(bag_feat *F, size_t n) {
  for (size_t f = 0; F && f < n; f++) {
    ce_pieces_release(&F[f].tp);
    if (F[f].g.rows.buffer) clReleaseMemObject(F[f].g.rows.buffer);
    if (F[f].g.idx.buffer) clReleaseMemObject(F[f].g.idx.buffer);
    if (F[f].g.pos_rows.buffer) clReleaseMemObject(F[f].g.pos_rows.buffer);
    memset(&F[f].g, 0, sizeof F[f].g);
  }
}

clembed_status bag_one_feature(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
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

clembed_status bag_batch_features(clembed_context *ctx, const char *what, const clembed_bag_feature *features,
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

/* ------------------------------------------------------------- launches */

/* The table's pieces a launch takes for F: those it reads (`pieces`: the
 * forward and grad_weights), else only the first (the keys read no row). */
static size_t feature_pieces(const bag_feat *F, int pieces) { return pieces && F->pgn > 1 ? F->pgn : 1; }

int bag_feature_buffers(const bag_feat *F, int pieces, cl_mem *m) {
  int k = 0;
  size_t np = feature_pieces(F, pieces);
  for (size_t j = 0; j < np && j < CLEMBED_BAGS_BUFFERS; j++) m[k++] = F->tp.piece[F->pg0 + j].buffer;
  m[k++] = F->ids->buffer;
  if (F->offsets) m[k++] = F->offsets->buffer;
  if (F->opt.per_sample_weights) m[k++] = F->opt.per_sample_weights->buffer;
  if (F->opt.max_rows) m[k++] = F->opt.max_rows->buffer;
  if (F->opt.remap) m[k++] = F->opt.remap->buffer;
  return k;
}

static int buffer_index(const bag_launch *L, cl_mem m) {
  for (int i = 0; i < L->nbufs; i++)
    if (L->bufs[i] == m) return i;
  return -1;
}

clembed_status bag_plan(clembed_context *ctx, const char *what, const bag_feat *F, size_t n, size_t vec,
                        int by_dtype, int pieces, bag_launch **out, size_t *nout) {
  bag_launch *L = calloc(n ? n : 1, sizeof *L);
  size_t nl = 0;
  if (!L) return ce_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "bags: out of host memory");
  for (size_t f = 0; f < n; f++) {
    cl_mem m[BAG_FEATURE_BUFFERS];
    int k = bag_feature_buffers(&F[f], pieces, m), fresh = 0, own = 0;
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
                         "%s: table lies in %zu buffers%s; its ids, offsets, per_sample_weights, max_rows and "
                         "remap with them make %d, and a launch of the bag kernels takes at most %d "
                         "(CLEMBED_BAGS_BUFFERS)",
                         what, F[f].tp.count, at, all, CLEMBED_BAGS_BUFFERS);
    }
    bag_launch *cur = nl ? &L[nl - 1] : NULL;
    for (int i = 0; cur && i < k; i++) {
      int seen = buffer_index(cur, m[i]) >= 0;
      for (int j = 0; j < i && !seen; j++) seen = m[j] == m[i];
      fresh += !seen;
    }
    int dt = (int)F[f].table->dtype;
    size_t width = ce_rowwise_of(dt) ? F[f].table->cols : 0; /* (a row-wise table's ld is its cols) */
    if (!cur || cur->nbufs + fresh > CLEMBED_BAGS_BUFFERS || (by_dtype && cur->dtype != dt) ||
        ((ce_rowwise_of(dt) || ce_rowwise_of(cur->dtype)) && (cur->dtype != dt || cur->width != width))) {
      cur = &L[nl++];
      cur->first = f;
      cur->dtype = dt;
      cur->width = width;
    }
    for (int i = 0; i < k; i++)
      if (buffer_index(cur, m[i]) < 0) cur->bufs[cur->nbufs++] = m[i];
    cur->count++;
    cur->modes |= F[f].opt.mode == CLEMBED_BAG_MAX ? 4u : F[f].opt.per_sample_weights ? 2u : 1u;
    cur->split |= np > 1;
    cur->remap |= F[f].opt.remap != NULL;
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

clembed_status bag_describe(clembed_context *ctx, const bag_feat *F, size_t n, const bag_launch *L, size_t nl,
                            size_t vec, size_t bags, int pieces, const bag_sizes *from, cl_mem *desc, bag_sizes *sz) {
  size_t words = (n ? n : 1) * BF_COUNT, list = words;
  for (size_t f = 0; f < n; f++)
    if (feature_pieces(&F[f], pieces) > 1) words += 3 * feature_pieces(&F[f], pieces);
  cl_ulong *d = calloc(words, sizeof *d);
  if (!d) return ce_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "bags: out of host memory");
  bag_sizes z = from ? *from : (bag_sizes){0, 0, 0};
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
      const clembed_ids *rm = x->opt.remap;
      r[BF_RM] = rm ? (cl_ulong)buffer_index(&L[l], rm->buffer) : BAG_NONE;
      r[BF_RM_OFF] = rm ? rm->offset : 0;
      r[BF_RM64] = rm && rm->type == CLEMBED_I64;
      r[BF_RM_ROWS] = rm ? rm->count : 0;
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

bag_args bag_launch_args(cl_mem desc, const bag_launch *L, size_t bags) {
  bag_args a;
  memset(&a, 0, sizeof a);
  a.desc = desc;
  a.f0 = (cl_uint)L->first;
  a.nf = (cl_uint)L->count;
  a.bags = bags;
  for (int i = 0; i < L->nbufs; i++) a.b[i] = L->bufs[i];
  return a;
}

void bag_launch_options(char *buf, size_t cap, const char *base, const bag_launch *L) {
  snprintf(buf, cap, "%s -DTABLE_DT=%d -DMODES=%u%s%s", base, L->dtype, L->modes, L->split ? " -DBAG_SPLIT=1" : "",
           L->remap ? " -DBAG_REMAP=1" : "");
  ce_rowwise_option(buf, cap, (clembed_dtype)L->dtype, L->width, 0); /* (base has the division flag) */
}

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

char *bag_base_options(clembed_context *ctx, const char *extra) {
  char fields[1024];
  field_options(fields, sizeof fields);
  size_t cap = strlen(fields) + strlen(extra) + 160;
  char *o = malloc(cap);
  if (!o) return NULL;
  snprintf(o, cap, "%s -DVEC=%u%s%s", extra, ctx->tune->bag_vec, fields,
           ctx->exact_div ? " -cl-fp32-correctly-rounded-divide-sqrt" : "");
  return o;
}

clembed_status bag_record_errors(ce_chain *ch, const char *opts, const bag_args *a, const bag_launch *L) {
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

clembed_status bag_check_feature(clembed_context *ctx, const char *what, bag_feat *F, size_t bags, int role) {
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
  if (o->remap) { /* a pruned table (include/clembed.h, "Pruned tables"): served, not trained */
    CHECK(ce_check_ids(ctx, o->remap, "remap"));
    if (role != BAG_FORWARD)
      FAIL_ARG(CLEMBED_ERR_UNSUPPORTED, "remap", -1, (int64_t)o->remap->count,
               "%s: remap: a pruned table is served (the bag forward), not trained", what);
  }
  /* padding_idx is an id: of the unpruned table with a remap */
  CHECK(ce_padding_of(ctx, o->padding_idx, o->remap ? o->remap->count : t->rows, o->remap != NULL, what,
                      &F->padding));
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

clembed_status bag_place_columns(clembed_context *ctx, const char *what, bag_feat *F, size_t n, size_t *cols) {
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

clembed_status bag_part(clembed_context *ctx, const char *what, bag_feat *F, size_t n, size_t c0, size_t *nc) {
  *nc = n - c0 < CE_SLOTS ? n - c0 : CE_SLOTS;
  clembed_status s = ce_slot_room(ctx, *nc);
  for (size_t f = 0; s == CLEMBED_OK && f < *nc; f++) s = bag_feature_slot(ctx, what, &F[c0 + f]);
  return s;
}

clembed_status bag_feature_slot(clembed_context *ctx, const char *what, bag_feat *F) {
  const clembed_bag_options *o = &F->opt;
  int can_fail = F->offsets != NULL || (F->ids->count && o->remap) ||
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
  ce_slot_remap(&info, o->remap, o->policy, F->table->rows);
  info.bag_cap = F->lcap;
  info.bag_cols = F->table->cols;
  return ce_slot_reserve(ctx, &info, &F->slot);
}
