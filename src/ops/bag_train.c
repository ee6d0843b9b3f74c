/* Bags of ids, the training side: clembed_bag_backward (grad_table, and
 * grad_weights), clembed_bag_optimizer_step and clembed_bags_optimizer_step
 * (the features and launches of bag.c; the kernels are cl/ops/bag.cl's).
 *
 * The backward produces contributions (ops.h's ce_contrib) for the one
 * segment fold: an entry per id of every feature feeding one table, in
 * feature order then id order; fold_keys enqueues ce_bag_counts (the offsets
 * checked, MEAN's counts), ce_bag_gather_max (MAX) and ce_bag_keys (the sort
 * keys and the records), then backward.c sorts and folds with -DBAG=1. A step
 * is the same fold with an optimizer's store, one per distinct table. */
#include "bag.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  CHECK(bag_plan(ctx, s->what, s->F, s->n, vec, 0, 0, &L, &nl));
  CHECK(bag_describe(ctx, s->F, s->n, L, nl, vec, s->bags, 0, NULL, NULL, &s->sz));
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
  snprintf(extra, sizeof extra, "-DKEY64=%d -DMODES=0", key64); /* (no pooling: one program for all) */
  base = bag_base_options(ctx, extra);
  if (!base) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", s->what);
  cl_ulong rows = s->rows, g_ld = s->g_ld;
  size_t items = s->bags ? s->bags : 1;
  /* the features a part at a time (bag_part; a call of none is one part of
   * none); the entries, counts and max_rows of the parts one after another,
   * as one part's */
  bag_sizes from = {0, 0, 0};
  size_t c0 = 0, nc = 0;
  do {
    bag_feat *P = s->F + c0;
    bag_sizes upto;
    CHECK(bag_part(ctx, s->what, s->F, s->n, c0, &nc));
    CHECK(bag_plan(ctx, s->what, P, nc, vec, 0, 0, &L, &nl));
    CHECK(bag_describe(ctx, P, nc, L, nl, vec, s->bags, 0, &from, &desc, &upto));
    for (size_t l = 0; l < nl; l++) {
      cl_kernel k;
      bag_args a = bag_launch_args(desc, &L[l], s->bags);
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
        cl_ulong e_first = from.entries, e_count = L[l].entries;
        for (size_t f = 0; f < L[l].first; f++) e_first += P[f].ids->count;
        CHECK(ce_kernel(ctx, CE_FAMILY_BAG, opts, "ce_bag_keys", &k));
        CHECK(ce_set_args(ctx, k, "ce_bag_keys", BAG_COMMON(a), CE_ARG(s->counts), CE_ARG(rows), CE_ARG(g_ld),
                          CE_ARG(e_first), CE_ARG(e_count), CE_ARG(keys), CE_ARG(idx), CE_ARG(c->records), CE_END));
        CHECK(ce_chain_1d(ch, k, "ce_bag_keys", L[l].entries, 0));
      }
      CHECK(bag_record_errors(ch, opts, &a, &L[l]));
    }
    clReleaseMemObject(desc); /* (OpenCL keeps it until the launches are done) */
    desc = NULL;
    free(L);
    L = NULL;
    from = upto;
    c0 += nc;
  } while (c0 < s->n);
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
    ce_step step = {s->what, CE_STORE_ACCUMULATE, 0.0f, 0, NULL, &s->contrib, {0, 0, 0, 0}};
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
    int others = bag_feature_buffers(&F, 0, m) - 1; /* ids, offsets, per_sample_weights */
    per = (size_t)(CLEMBED_BAGS_BUFFERS - others);
  }
  ce_pieces *gmats[1] = {gp}; /* grad_out: every piece in each launch, as in the fold (joined when they */
  gp->whole = 1;              /* do not fit one launch) */
  if (ce_pieces_plan_short(ctx, gmats, 1) == 0) CHECK(ce_join(ch, what, grad_out, gp, 1, &gj));
  CHECK(ce_pieces_plan(ctx, what, gmats, 1));
  snprintf(extra, sizeof extra, "-DGRAD_DT=%d", (int)grad_out->dtype);
  ce_pieces_option(extra, sizeof extra, gp, "grad");
  base = bag_base_options(ctx, extra);
  if (!base) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
  cl_ulong g_ldl = g_ld, w_off = gw->offset, w_ldl = gw_ld;
  for (F.pg0 = 0; F.pg0 < count; F.pg0 += F.pgn) {
    F.pgn = count - F.pg0 < per ? count - F.pg0 : per;
    CHECK(bag_plan(ctx, what, &F, 1, vec, 1, 1, &L, &nl));
    CHECK(bag_describe(ctx, &F, 1, L, nl, vec, bags, 1, NULL, &desc, NULL));
    bag_launch_options(opts, sizeof opts, base, &L[0]);
    bag_args a = bag_launch_args(desc, &L[0], bags);
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
  CHECK(bag_one_feature(ctx, table ? table : grad_table, ids, offsets, opt, &F));
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
  CHECK(bag_check_feature(ctx, what, &F, grad_out->rows, BAG_BACKWARD));
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
  bag_release_features(&F, 1);
  return ce_track_end(ctx, status, event, &own);
}

/* --------------------------------------------------------------- steps */

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
         same_state(a->state, b->state) && same_state(a->state2, b->state2) &&
         a->stochastic_rounding == b->stochastic_rounding && a->seed == b->seed && a->first_row == b->first_row;
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
  for (size_t f = 0; f < n; f++) CHECK(bag_check_feature(ctx, what, &F[f], grad_out->rows, BAG_STEP));
  CHECK(bag_place_columns(ctx, what, F, n, &cols));
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
  bag_release_features(F, n);
  ce_pieces_release(&gp);
  free(lead);
  free(G);
  return status;
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
  clembed_status status = bag_one_feature(ctx, table, ids, offsets, opt, &F);
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
  status = bag_batch_features(ctx, what, features, n, &F);
  if (status == CLEMBED_OK) status = read_optimizers(ctx, what, o, n, 1, &oo);
  if (status == CLEMBED_OK) status = steps_run(ctx, what, F, n, grad_out, oo, nwait, wait, ev);
  free(F);
  free(oo);
  return ce_track_end(ctx, status, event, &own);
}
