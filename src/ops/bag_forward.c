/* Bags of ids, the forward: clembed_embedding_bag and clembed_embedding_bags
 * (the features and launches of bag.c; the kernels are cl/ops/bag.cl's
 * ce_bag_rows, ce_bag_rows_by_feature and ce_bag_cols). A single feature is
 * the batch of one: clembed_embedding_bag and clembed_embedding_bags run the
 * same kernel, so a block of the batched output has the bits of the feature
 * alone. The CPU shape takes a feature's bags on consecutive work-items (the
 * tuning's bag_by_feature: ce_bag_rows_by_feature), so one table is read at a
 * time, and pools a bag of plain
 * ids a row at a time without masks (bag_plain, -DBAG_PLAIN). */
#include "bag.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The distinct buffers of F's table pieces, ids, offsets, weights and max_rows. */
static size_t own_buffers(const bag_feat *F) {
  size_t own = 0, np = F->tp.count;
  for (size_t j = 0; j < np; j++) {
    int seen = 0;
    for (size_t i = 0; i < j && !seen; i++) seen = F->tp.piece[i].buffer == F->tp.piece[j].buffer;
    own += !seen;
  }
  cl_mem m[5] = {F->ids->buffer, F->offsets ? F->offsets->buffer : NULL,
                 F->opt.per_sample_weights ? F->opt.per_sample_weights->buffer : NULL,
                 F->opt.max_rows ? F->opt.max_rows->buffer : NULL, F->opt.remap ? F->opt.remap->buffer : NULL};
  for (int i = 0; i < 5; i++) {
    int seen = !m[i];
    for (size_t j = 0; j < np && !seen; j++) seen = F->tp.piece[j].buffer == m[i];
    for (int k = 0; k < i && !seen; k++) seen = m[k] == m[i];
    own += !seen;
  }
  return own;
}

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
  opts = bag_base_options(ctx, "-DMODES=0");
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

/* On a device that ends a work-item's loops after loop_limit iterations in
 * all, with no error (the tuning's device fact; Mesa's llvmpipe), the most ids
 * a bag may have in this call, so that no work-item's pooling can reach the
 * limit; each feature's F->lcap gets it where one of its bags could be longer
 * (0: no cap). The lanes a device runs together run every branch some lane
 * takes, each loop as long as its longest lane, so the bound adds the loops
 * of every path the call's features can take (bag.cl's ce_bag_columns and
 * ce_bag_pool), per pass over a bag's columns (BAG_TILE vectors of VEC
 * columns a pass on the CPU shape, one vector on the GPU shape), for a bag of
 * L ids:
 *   - once a bag: the check for plain ids (a loop per id width the features
 *     use) and the check of the ids where no column is written: L each;
 *   - a pass: each copy of the plain loop the features can take L (CE_BAG_PLAIN_NV
 *     writes it out 3 times, the third for a pass that is neither BAG_TILE nor
 *     BAG_TILE / 2 whole vectors; one a feature and pass, and once for
 *     weighted bags and once for the others); each kind of group loop (SUM or MEAN,
 *     weighted SUM, MAX) L, each id finding its table piece (ce_bag_tabrow: up
 *     to the pieces' count) and, with prefetch hints, again for the row ahead
 *     and the lines asked for; with ROWS > 1 the tails again; and the pass's own
 *     loops over its vectors and columns;
 *   - a refused bag's zeros: twice its columns.
 * ce_bag_rows runs every feature in a work-item (their passes add); the other
 * shapes a (bag, feature) or (chunk, bag) a work-item, lanes of several
 * features together (the most passes). A margin of 1,024 as ce_fold_fits. A
 * fixed bag (no offsets) past the cap is refused here, before anything is
 * written, and so is a call whose fixed loops alone leave no room for an id a
 * bag; a bag by offsets, which the host does not read, is left unpooled by the
 * kernel (zeros; its ids are not checked) and reported (CLEMBED_ERR_UNSUPPORTED
 * at the next finish). */
static clembed_status loop_caps(clembed_context *ctx, const char *what, bag_feat *F, size_t n, size_t bags,
                                int cpu, int by_feature, unsigned rows) {
  clembed_status status = CLEMBED_OK;
  const ce_tuning *t = ctx->tune;
  const uint64_t limit = t->loop_limit, vec = t->bag_vec ? t->bag_vec : 1, ktile = t->bag_tile ? t->bag_tile : 1;
  if (!limit || !n) return CLEMBED_OK;
  const uint64_t tile = cpu ? ktile : 1; /* vectors a pass */
  const uint64_t lines = ctx->prefetch && t->bag_ahead && ktile > 1 ? ktile * vec * 4 / 64 + 2 : 0;
  const uint64_t pass_loops = ktile + vec + ktile * (1 + vec) + 2 * vec + 8;
  uint64_t plain[2] = {0, 0}, kinds[3] = {0, 0, 0}, widths[2] = {0, 0}, pieces = 1, cols_max = 0, p_max = 0, p_sum = 0;
  for (size_t f = 0; f < n; f++) {
    const clembed_bag_options *o = &F[f].opt;
    uint64_t cols = F[f].table->cols, nvec = cols / vec;
    /* the passes over the row: tile vectors each in the CPU shape, one in the GPU shape's work-item */
    const uint64_t p = !cols ? 0 : !cpu || nvec <= tile ? 1 : (nvec + tile - 1) / tile;
    p_max = p > p_max ? p : p_max;
    p_sum += p;
    cols_max = cols > cols_max ? cols : cols_max;
    pieces = F[f].tp.count > pieces ? F[f].tp.count : pieces; /* (ce_bag_tabrow's loop: with more than one) */
    int max = o->mode == CLEMBED_BAG_MAX, weighted = !max && o->per_sample_weights;
    kinds[max ? 2 : weighted ? 1 : 0] = 1;
    if (cpu && t->bag_plain && !max && !o->remap) {
      plain[weighted]++;
      widths[F[f].ids->type == CLEMBED_I64] = 1;
    }
  }
  const uint64_t nkinds = kinds[0] + kinds[1] + kinds[2];
  const uint64_t np = pieces > 1 ? pieces : 0;
  const uint64_t copies = ktile > 1 ? 3 : 2; /* (BAG_TILE 1: no pass of BAG_TILE / 2 = 0 vectors) */
  const uint64_t per_id = (plain[0] < copies ? plain[0] : copies) + (plain[1] < copies ? plain[1] : copies) +
                          nkinds * (1 + np + (lines ? np + lines : 0)) + (rows > 1 ? nkinds * (1 + np) : 0);
  const uint64_t per_bag = widths[0] + widths[1] + 1;
  uint64_t a, b;
  if (cpu && !by_feature) { /* every feature in one work-item */
    a = (uint64_t)n * per_bag + p_sum * per_id;
    b = p_sum * pass_loops + 2 * cols_max + 16 * (uint64_t)n;
  } else {
    a = per_bag + p_max * per_id;
    b = p_max * pass_loops + 2 * cols_max + 16;
  }
  uint64_t room = limit > 1024 + b ? limit - 1024 - b : 0, cap = room / (a ? a : 1);
  if (cap < 1)
    FAIL_ARG(CLEMBED_ERR_UNSUPPORTED, "ids", -1, (int64_t)n,
             "%s: this device ends a work-item's loops after %llu iterations (the tuning's loop_limit), which the "
             "loops of pooling %zu features of up to %llu columns in one call leave no room under: fewer features "
             "or columns a call",
             what, (unsigned long long)limit, n, (unsigned long long)cols_max);
  for (size_t f = 0; f < n; f++) {
    size_t ids = F[f].ids->count;
    if (ids <= cap) continue;
    if (F[f].offsets) {
      F[f].lcap = (size_t)cap;
      continue;
    }
    size_t len = bags ? ids / bags : 0;
    if (len <= cap) continue;
    char at[48] = "";
    if (F[f].index >= 0) snprintf(at, sizeof at, "features[%ld].", F[f].index);
    FAIL_ARG(CLEMBED_ERR_UNSUPPORTED, "ids", F[f].index, (int64_t)len,
             "%s: %sids: fixed bags of %zu ids; this device ends a work-item's loops after %llu iterations (the "
             "tuning's loop_limit), which pooling so many ids in this call can pass: at most %llu ids a bag in "
             "this call here",
             what, at, len, (unsigned long long)limit, (unsigned long long)cap);
  }
cleanup:
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
  int cpu = !t->bag_cols, by_feature = cpu && t->bag_by_feature; /* the forward's shape */
  ce_chain ch;
  ce_pieces op; /* out's pieces: launches over windows of them where they are many */
  ce_pieces *omats[1] = {&op};
  ce_pieces_none(&op);
  ce_chain_init(&ch, ctx, nwait, wait);
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_check_pieces(ctx, out, "out", 0, &op));
  o_ld = op.ld;
  bags = out->rows;
  for (size_t f = 0; f < n; f++) CHECK(bag_check_feature(ctx, what, &F[f], bags, BAG_FORWARD));
  CHECK(bag_place_columns(ctx, what, F, n, &cols));
  if (out->cols != cols)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "out", -1, (int64_t)out->cols,
             "%s: out is %zu x %zu but %zu bags of %zu columns need %zu x %zu", what, out->rows, out->cols, bags,
             cols, bags, cols);
  for (size_t f = 0; f < n; f++) /* (before any slot or work: a refused call leaves nothing behind) */
    if (F[f].opt.remap && own_buffers(&F[f]) > CLEMBED_BAGS_BUFFERS) {
      /* (the gather's positions cannot tell a pruned id from one left out) */
      char at[48] = "";
      if (F[f].index >= 0) snprintf(at, sizeof at, " (features[%ld])", F[f].index);
      FAIL_ARG(CLEMBED_ERR_UNSUPPORTED, "remap", F[f].index, (int64_t)F[f].tp.count,
               "%s: remap with a table in %zu buffers%s: a pruned table's pieces, ids, offsets, weights and "
               "remap are read in one launch, which takes at most %d buffers (CLEMBED_BAGS_BUFFERS)",
               what, F[f].tp.count, at, CLEMBED_BAGS_BUFFERS);
    }
  {
    unsigned rows = !cpu ? 1 : n > 1 ? t->bag_rows_features : t->bag_rows;
    CHECK(loop_caps(ctx, what, F, n, bags, cpu, by_feature, rows));
  }
  CHECK(ce_pieces_plan(ctx, what, omats, 1));
  {
    char extra[256];
    snprintf(extra, sizeof extra,
             "-DOUT_DT=%d -DBAG_TILE=%u -DROWS=%u -DBAG_AHEAD=%u -DBAG_PLAIN=%d", (int)out->dtype, t->bag_tile,
             !cpu ? 1 : n > 1 ? t->bag_rows_features : t->bag_rows, ctx->prefetch ? t->bag_ahead : 0,
             cpu && t->bag_plain);
    ce_pieces_option(extra, sizeof extra, &op, "out");
    base = bag_base_options(ctx, extra);
    if (!base) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
  }
  const char *name = !cpu ? "ce_bag_cols" : by_feature ? "ce_bag_rows_by_feature" : "ce_bag_rows";
  cl_ulong o_ldl = o_ld;
  cl_float zero = 0.0f; /* the accumulators' start, opaque to the compiler (bag.cl) */
  G = malloc((n ? n : 1) * sizeof *G);
  if (!G) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
  /* the features a part at a time (bag_part; a call of none is one part of none) */
  size_t c0 = 0, nc = 0;
  do {
    bag_feat *P = F + c0;
    CHECK(bag_part(ctx, what, F, n, c0, &nc));
    for (size_t f = 0; f < nc; f++)
      if (own_buffers(&P[f]) > CLEMBED_BAGS_BUFFERS) CHECK(gather_rows(&ch, what, &P[f]));
    /* the features by table dtype (stable), so that a launch's program pools one
     * dtype: the program of the features alone, and no program with every
     * dtype's code at once (minutes of compiling on some devices) */
    for (unsigned d = 0, g = 0; d < 32; d++)
      for (size_t f = 0; f < nc; f++)
        if ((unsigned)P[f].table->dtype == d) G[g++] = P[f];
    CHECK(bag_plan(ctx, what, G, nc, t->bag_vec, 1, 1, &L, &nl));
    CHECK(bag_describe(ctx, G, nc, L, nl, t->bag_vec, bags, 1, NULL, &desc, NULL));
    for (size_t l = 0; l < nl; l++) {
      cl_kernel k;
      bag_args a = bag_launch_args(desc, &L[l], bags);
      cl_ulong lcap = 0; /* the cap, where a feature of the launch needs one */
      for (size_t f = L[l].first; f < L[l].first + L[l].count; f++) lcap = G[f].lcap ? G[f].lcap : lcap;
      cl_ulong nchunks = L[l].chunks;
      bag_launch_options(opts, sizeof opts, base, &L[l]);
      CHECK(ce_kernel(ctx, CE_FAMILY_BAG, opts, name, &k));
      do { /* a launch per window of out's pieces: each writes the bags of its rows */
        CHECK(ce_set_args(ctx, k, name, BAG_COMMON(a), CE_PIECES(&op), CE_ARG(o_ldl), CE_ARG(nchunks), CE_ARG(zero),
                          CE_ARG(lcap), CE_END));
        size_t items = bags ? bags : 1; /* with no bags one item checks the offsets */
        if (by_feature && ce_mul_overflows(items, L[l].count, &items))
          FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "out", -1, (int64_t)bags,
                   "%s: %zu bags of %zu features overflow size_t", what, bags, L[l].count);
        if (cpu)
          CHECK(ce_chain_1d(&ch, k, name, items, ce_rows_local(ctx, k, t->bag_local)));
        else
          CHECK(ce_chain_2d(&ch, k, name, L[l].chunks, items));
      } while (ce_pieces_next(omats, 1));
      CHECK(bag_record_errors(&ch, opts, &a, &L[l]));
    }
    clReleaseMemObject(desc); /* (OpenCL keeps it until the launches are done) */
    desc = NULL;
    free(L);
    L = NULL;
    c0 += nc;
  } while (c0 < n);
  for (size_t f = 0; f < n; f++)
    if (F[f].g.on) CHECK(gathered_after(&ch, &F[f]));
  CHECK(ce_chain_close(&ch, event));
cleanup:
  ce_pieces_release(&op);
  bag_release_features(F, n);
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
  clembed_status status = bag_one_feature(ctx, table, ids, offsets, opt, &F);
  if (status == CLEMBED_OK) status = forward_run(ctx, "clembed_embedding_bag", &F, 1, out, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

clembed_status clembed_embedding_bags(clembed_context *ctx, const clembed_bag_feature *features, size_t n,
                                      clembed_matrix *out, cl_uint nwait, const cl_event *wait, cl_event *event) {
  const char *what = "clembed_embedding_bags";
  clembed_status status;
  cl_event own;
  bag_feat *F;
  CE_ENTER(ctx, what);
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  status = bag_batch_features(ctx, what, features, n, &F);
  if (status == CLEMBED_OK) status = forward_run(ctx, what, F, n, out, nwait, wait, ev);
  free(F);
  return ce_track_end(ctx, status, event, &own);
}
