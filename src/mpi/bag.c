/* clembed_mpi_embedding_bag and clembed_mpi_bag_optimizer_step: bags of ids
 * (EmbeddingBag) on a table split over the ranks.
 *
 * Forward. The rank fetches the row of every id of its bags from the owners,
 * exactly as clembed_mpi_embed does (ce_mpi_fetch_rows: each distinct row
 * asked once, the rows sent in the table's own dtype, block-quantized ones as
 * the F32 values every kernel dequantizes them to), and pools them with
 * clembed_embedding_bag on that local matrix of its distinct rows, its ids
 * renumbered into it, with its own offsets, weights and mode. The pooling
 * runs per bag over the ids in ascending position on the same float32 values
 * as one device, so each output row has one device's bits. The padding row,
 * if the batch holds it, is a row of the local matrix and passed as its
 * padding_idx; bad ids keep their values (outside the smaller matrix too) and
 * are left out and reported as one device does, the report restated against
 * the whole table. MAX's max_rows come back as local rows and are mapped to
 * the table's rows on the host (written back into the caller's buffer).
 *
 * Step. The rank forms, on the host from its grad_out (read as F32, which
 * every float gradient converts to exactly), the contributions one device's
 * bag fold adds, in ascending id position: for each taken id j of bag b (not
 * padding, not bad) g_b (SUM), w_j * g_b (weighted SUM, the float product),
 * g_b / count_b (MEAN, the float division, correctly rounded); under MAX, for
 * the first id in bag b of each row that max_rows[b] names somewhere, g_b[c]
 * in the columns c whose max_rows element names the row and +0.0f elsewhere.
 * (One device also folds the later ids of that row in the bag, adding +0.0f
 * in every column, which leaves a sum started at +0.0f unchanged; and a row
 * of the bag that max_rows does not name contributes nothing and is not
 * stepped.) These rows then go to the owners exactly as the rows of
 * clembed_mpi_optimizer_step (ce_mpi_step_deliver: grouped by owner in id
 * order, received in rank order, so in global id order, and stepped by the
 * owner's clembed_optimizer_step, whose fold adds them in that order from
 * zero, with scale 1 and no frequency scaling, as the bag step does). So each
 * row folds the same float32 values in the same order as
 * clembed_bag_optimizer_step on one device, and the rows stepped are the
 * same.
 *
 * The phases are shared with a feature set's ROW and TABLE_ROW features
 * (feature_set.c), which do the exchanges for all their tables at once: the
 * forward's request (ce_mpi_fetch_plan, embed.c), serving
 * (ce_mpi_serve_into) and pooling (ce_mpi_bag_pool, here); the step's
 * contributions (ce_mpi_bag_contrib_plan, which finds them and counts them
 * per owner, and ce_mpi_bag_contrib_fill, which writes each owner's where the
 * caller says) and the owner's step (ce_mpi_step_own, step.c). */
#include "mpi_table.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_float(clembed_dtype d) { return d == CLEMBED_F32 || d == CLEMBED_F16 || d == CLEMBED_BF16; }

/* max_rows as the local pooling wrote it (rows of the local matrix, or -1),
 * mapped to the table's rows (distinct[local]) in place. */
static void map_max_rows(clembed_mpi_table *t, const char *op, const clembed_ids *mr, const uint64_t *distinct,
                         size_t d, ce_mpi_error *e) {
  clembed_context *ctx = t->ctx;
  size_t n = mr->count, es = mr->type == CLEMBED_I64 ? 8 : 4;
  if (!n) return;
  int64_t *h = malloc(n * 8);
  if (!h) {
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for max_rows", op);
    return;
  }
  if (ce_mpi_read_ids_ctx(ctx, mr, h, e) != CLEMBED_OK) {
    free(h);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    int64_t v = h[i] >= 0 && (uint64_t)h[i] < d ? (int64_t)distinct[h[i]] : -1;
    if (mr->type == CLEMBED_I64) h[i] = v;
    else ((int32_t *)h)[i] = (int32_t)v;
  }
  cl_int err = clEnqueueWriteBuffer(t->queue, mr->buffer, CL_TRUE, mr->offset * es, n * es, h, 0, NULL, NULL);
  if (err != CL_SUCCESS)
    ce_mpi_fail(e, (clembed_status)err, "max_rows", -1, err, "%s: writing max_rows: %s", op,
                clembed_status_string((clembed_status)err));
  free(h);
}

void ce_mpi_bag_pool(clembed_mpi_table *t, const char *op, const clembed_bag_options *o, const clembed_ids *offsets,
                     size_t d, size_t n, clembed_dtype wire, int64_t pad_local, clembed_matrix *out, ce_mpi_error *e) {
  clembed_context *ctx = t->ctx;
  clembed_bag_options lo = *o;
  if (lo.policy == CLEMBED_INDEX_CLAMP) lo.policy = CLEMBED_INDEX_CHECK; /* resolved already; bad ones stay bad */
  lo.padding_idx = pad_local >= 0 ? pad_local : CLEMBED_NO_PADDING;
  clembed_matrix rows;
  clembed_ids lids;
  clembed_status s = ce_mpi_fetched(t, d, n, wire, e, &rows, &lids);
  if (s == CLEMBED_OK) s = clembed_embedding_bag(ctx, &rows, &lids, offsets, &lo, out, 0, NULL, NULL);
  if (s == CLEMBED_OK) s = clembed_finish(ctx);
  clembed_error_detail det;
  int deferred = s == CLEMBED_ERR_INDEX_OUT_OF_RANGE && clembed_context_error(ctx, &det) == CLEMBED_OK;
  if (deferred && !strcmp(det.argument, "ids"))
    ce_mpi_bad_id(e, op, det.index, det.value, o->policy, t->rows);
  else if (s != CLEMBED_OK && e->status == CLEMBED_OK)
    ce_mpi_fail_from(e, ctx, s);
  /* the output is written (a bad id or offset is a deferred error): max_rows named the local rows */
  if ((s == CLEMBED_OK || deferred) && o->mode == CLEMBED_BAG_MAX && o->max_rows)
    map_max_rows(t, op, o->max_rows, t->buf[CE_MPI_KEYS].p, d, e);
}

clembed_status clembed_mpi_embedding_bag(clembed_mpi_table *t, const clembed_ids *ids, const clembed_ids *offsets,
                                         const clembed_bag_options *opt, clembed_matrix *out) {
  const char *op = "clembed_mpi_embedding_bag";
  if (!t)
    return ce_mpi_null_handle(op, "t");
  if (t->column) return ce_mpi_refuse_column(t, op);
  clembed_context *ctx = t->ctx;
  ce_mpi_error e = {0}, serve = {0};
  ce_mpi_vote v = {0};
  clembed_bag_options o = clembed_bag_defaults(); /* the caller's, as far as its struct_size goes */
  int read_ok = ce_mpi_read_options(ctx, op, "opt", CLEMBED_STRUCT_BAG_OPTIONS, opt, &o, sizeof o, &e);
  int pad_bad = 0;
  uint64_t pad = ce_mpi_padding(o.padding_idx, t->rows, &pad_bad);
  size_t n = 0, d = 0, limit = (size_t)INT_MAX / (size_t)t->size;
  int64_t *host = NULL, pad_local = -1;

  /* this rank's own arguments (the rest is checked by the local pooling) */
  if (!read_ok) {
    /* recorded on e */
  } else if (!ids || !out) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, ids ? "out" : "ids", -1, 0, "%s: %s is NULL", op, ids ? "out" : "ids");
  } else if (o.remap) {
    ce_mpi_fail(&e, CLEMBED_ERR_UNSUPPORTED, "remap", -1, 0,
                "%s: remap (a pruned table) is for one device's lookups and bags, not an MPI table's", op);
  } else if ((unsigned)o.mode > (unsigned)CLEMBED_BAG_MAX) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "mode", -1, (int64_t)o.mode, "%s: unknown bag mode %d", op,
                (int)o.mode);
  } else if ((unsigned)o.policy > (unsigned)CLEMBED_INDEX_WRAP) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "policy", -1, (int64_t)o.policy, "%s: unknown index policy %d", op,
                (int)o.policy);
  } else if (pad_bad) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "padding_idx", -1, o.padding_idx,
                "%s: padding_idx %lld is outside the table of %zu rows", op, (long long)o.padding_idx, t->rows);
  } else if (out->cols != t->cols) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "out", -1, (int64_t)out->cols,
                "%s: out has %zu cols; the table has %zu", op, out->cols, t->cols);
  } else if (o.max_rows && o.max_rows->type == CLEMBED_I32 && t->rows > (size_t)INT32_MAX) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "max_rows", -1, 0,
                "%s: max_rows is I32 but the table has %zu rows (I64 needed)", op, t->rows);
  } else if (ids->count > limit) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "ids", -1, (int64_t)ids->count,
                "%s: %zu ids; at most %zu per rank and call with %d ranks (MPI counts are int)", op, ids->count, limit,
                t->size);
  } else {
    n = ids->count;
    host = ce_mpi_buffer(t, CE_MPI_IDS, n * 8 + 8);
    if (!host) ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for %zu ids", op, n);
    else ce_mpi_read_ids(t, ids, host, &e);
  }
  if (e.status != CLEMBED_OK) n = 0;

  /* what must agree; a rank's own failure does not stop the others' forward */
  ce_mpi_agree_as(&v, "the call", CE_MPI_CALL, CE_MPI_CALL_BAG);
  ce_mpi_agree_as(&v, "mode", CE_MPI_MODE, (uint64_t)o.mode);
  ce_mpi_agree_as(&v, "policy", CE_MPI_POLICY, (uint64_t)o.policy);
  ce_mpi_agree_as(&v, "padding_idx", CE_MPI_PADDING, pad_bad ? (uint64_t)o.padding_idx : pad);
  ce_mpi_agree_as(&v, "per_sample_weights", CE_MPI_GIVEN, (uint64_t)(o.per_sample_weights != NULL));
  clembed_status voted;
  if (!ce_mpi_forward_vote(t, ctx, op, &v, &e, &voted)) return voted;

  clembed_dtype wire;
  if (!ce_mpi_fetch_rows(t, op, host, n, o.policy, pad, NULL, 0, &d, &pad_local, &wire, &e, &serve))
    goto done;

  /* the rank's own pooling on the rows it received (the in stage) */
  ce_mpi_bag_pool(t, op, &o, offsets, d, n, wire, pad_local, out, &e);
done:
  for (int k = 0; k < CE_MPI_NSTAGE; k++) ce_mpi_stage_done(t, k, &serve);
  return ce_mpi_report(ctx, op, &e);
}

/* ------------------------------------------------------------------- step */

/* The rank's own arguments of the step (the checks of clembed_bag_optimizer_step). */
static void check_step_args(clembed_mpi_table *t, const char *op, const clembed_matrix *g, const clembed_ids *ids,
                            const clembed_ids *offsets, const clembed_bag_options *bo, const clembed_optimizer *o,
                            int pad_bad, ce_mpi_error *e) {
  size_t limit = (size_t)INT_MAX / (size_t)t->size;
  const clembed_matrix *w = bo->per_sample_weights;
  const clembed_ids *mr = bo->max_rows;
  clembed_backward_options b = clembed_backward_defaults();
  char dt[32]; /* a dtype's or mode's name, for a message */
  if (!g || !ids || !o) {
    const char *a = !g ? "grad_out" : !ids ? "ids" : "optimizer";
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, a, -1, 0, "%s: %s is NULL", op, a);
  } else if (o->state || o->state2) {
    ce_mpi_check_optimizer(t, op, o, &b, e);
  } else if ((unsigned)bo->mode > (unsigned)CLEMBED_BAG_MAX) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "mode", -1, (int64_t)bo->mode, "%s: unknown bag mode %d", op,
                (int)bo->mode);
  } else if ((unsigned)bo->policy > (unsigned)CLEMBED_INDEX_WRAP) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "policy", -1, (int64_t)bo->policy, "%s: unknown index policy %d", op,
                (int)bo->policy);
  } else if (pad_bad) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "padding_idx", -1, bo->padding_idx,
                "%s: padding_idx %lld is outside the table of %zu rows", op, (long long)bo->padding_idx, t->rows);
  } else if (g->cols != t->cols || !is_float(g->dtype)) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "grad_out", -1, (int64_t)g->cols,
                "%s: grad_out must be F32, F16 or BF16 with the table's %zu cols (it is %s, %zu cols)", op, t->cols,
                ce_mpi_dtype_text(g->dtype, dt, sizeof dt), g->cols);
  } else if (offsets && offsets->count != g->rows + 1) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "offsets", -1, (int64_t)offsets->count,
                "%s: offsets has %zu entries; %zu bags need %zu", op, offsets->count, g->rows, g->rows + 1);
  } else if (!offsets && (g->rows ? ids->count % g->rows != 0 : ids->count != 0)) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "ids", -1, (int64_t)ids->count,
                "%s: %zu ids do not make %zu bags of one size", op, ids->count, g->rows);
  } else if (w && bo->mode != CLEMBED_BAG_SUM) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "per_sample_weights", -1, (int64_t)bo->mode,
                "%s: per_sample_weights are for mode SUM only, not %s", op, ce_mpi_mode_text(bo->mode, dt, sizeof dt));
  } else if (w && (w->dtype != CLEMBED_F32 || w->rows != ids->count || w->cols != 1)) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "per_sample_weights", -1, (int64_t)w->rows,
                "%s: per_sample_weights must be F32 %zu x 1 (it is %s, %zu x %zu)", op, ids->count,
                ce_mpi_dtype_text(w->dtype, dt, sizeof dt), w->rows, w->cols);
  } else if (mr && bo->mode != CLEMBED_BAG_MAX) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "max_rows", -1, (int64_t)bo->mode,
                "%s: max_rows is for mode MAX only, not %s", op, ce_mpi_mode_text(bo->mode, dt, sizeof dt));
  } else if (bo->mode == CLEMBED_BAG_MAX && (!mr || mr->count != g->rows * t->cols)) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "max_rows", -1, mr ? (int64_t)mr->count : 0,
                "%s: MAX needs max_rows of %zu bags x %zu cols (the forward's)%s", op, g->rows, t->cols,
                mr ? "; its count differs" : "; it is NULL");
  } else if (ids->count > limit) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "ids", -1, (int64_t)ids->count,
                "%s: %zu ids; at most %zu per rank and call with %d ranks (MPI counts are int)", op, ids->count, limit,
                t->size);
  } else {
    ce_mpi_check_optimizer(t, op, o, &b, e);
  }
}

/* The step's host inputs. */
typedef struct bag_host {
  int64_t *ids, *offsets, *max_rows;
  float *grad, *weights;
} bag_host;

static void host_release(bag_host *h) {
  free(h->offsets);
  free(h->max_rows);
  free(h->grad);
  free(h->weights);
}

/* Reads the rank's inputs (ids into the table's ids buffer) and checks the
 * offsets as one device does (a bad one: INDEX_OUT_OF_RANGE naming
 * "offsets", its position and value; here it refuses the step). */
static void read_inputs(clembed_mpi_table *t, const char *op, const clembed_matrix *g, const clembed_ids *ids,
                        const clembed_ids *offsets, const clembed_bag_options *bo, bag_host *h, ce_mpi_error *e) {
  clembed_context *ctx = t->ctx;
  size_t n = ids->count, bags = g->rows, C = t->cols;
  h->ids = ce_mpi_buffer(t, CE_MPI_IDS, n * 8 + 8);
  h->grad = malloc(bags * C * sizeof(float) + 4);
  if (offsets) h->offsets = malloc((bags + 1) * 16);
  if (bo->per_sample_weights) h->weights = malloc(n * sizeof(float) + 4);
  if (bo->max_rows) h->max_rows = malloc(bo->max_rows->count * 8 + 8);
  if (!h->ids || !h->grad || (offsets && !h->offsets) || (bo->per_sample_weights && !h->weights) ||
      (bo->max_rows && !h->max_rows)) {
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for %zu ids", op, n);
    return;
  }
  if (ce_mpi_read_ids(t, ids, h->ids, e) != CLEMBED_OK) return;
  if (offsets && ce_mpi_read_ids(t, offsets, h->offsets, e) != CLEMBED_OK) return;
  if (bo->max_rows && ce_mpi_read_ids(t, bo->max_rows, h->max_rows, e) != CLEMBED_OK) return;
  clembed_status s = CLEMBED_OK;
  if (bags && C) s = clembed_matrix_read(ctx, g, h->grad, CLEMBED_F32);
  if (s == CLEMBED_OK && n && bo->per_sample_weights)
    s = clembed_matrix_read(ctx, bo->per_sample_weights, h->weights, CLEMBED_F32);
  if (s != CLEMBED_OK) {
    ce_mpi_fail_from(e, ctx, s);
    return;
  }
  if (!offsets) return;
  const int64_t *of = h->offsets;
  int64_t nn = (int64_t)n;
  if (of[0] != 0 || (bags == 0 && of[0] != nn)) {
    ce_mpi_fail(e, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "offsets", 0, of[0],
                "%s: offsets[0] = %lld; it must be 0%s", op, (long long)of[0], bags ? "" : " and the number of ids");
    return;
  }
  for (size_t b = 0; b < bags; b++) {
    int64_t a = of[b], z = of[b + 1];
    if (z < 0 || z < a || z > nn || (b + 1 == bags && z != nn)) {
      ce_mpi_fail(e, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "offsets", (int64_t)(b + 1), z,
                  "%s: offsets[%zu] = %lld (after %lld, of %zu ids): offsets must rise from 0 to the number of ids",
                  op, b + 1, (long long)z, (long long)a, n);
      return;
    }
  }
}

/* The entries of the rank's contributions (see the top), in ascending id
 * position j: its row, its bag, and j, in t->buf[CE_MPI_KEYS], [CE_MPI_VALS]
 * and [CE_MPI_POS]; each bag's count of taken ids in [CE_MPI_VALS2]. */
long long ce_mpi_bag_contrib_plan(clembed_mpi_table *t, const ce_mpi_bag_inputs *h, const clembed_bag_options *bo,
                                  uint64_t pad, int64_t *bad_at, int64_t *bad_id) {
  size_t C = t->cols, n = h->n, bags = h->bags;
  int *sc = ce_mpi_send_counts(t);
  uint64_t *row = ce_mpi_buffer(t, CE_MPI_KEYS, (n + 1) * sizeof *row);
  uint32_t *bag = ce_mpi_buffer(t, CE_MPI_VALS, (n + 1) * sizeof *bag);
  uint32_t *pos = ce_mpi_buffer(t, CE_MPI_POS, (n + 1) * sizeof *pos);
  float *count = ce_mpi_buffer(t, CE_MPI_VALS2, (bags + 1) * sizeof *count);
  long long m = 0;
  memset(sc, 0, (size_t)t->size * sizeof *sc);
  if (!row || !bag || !pos || !count) return -1;
  for (size_t b = 0; b < bags; b++) {
    size_t lo = h->offsets ? (size_t)h->offsets[b] : b * (n / bags);
    size_t hi = h->offsets ? (size_t)h->offsets[b + 1] : lo + n / bags;
    size_t first = (size_t)m, taken = 0;
    for (size_t j = lo; j < hi; j++) {
      uint64_t r;
      int k = ce_mpi_resolve(h->ids[j], t->rows, bo->policy, &r);
      if (k < 0 && *bad_at < 0) {
        *bad_at = (int64_t)j;
        *bad_id = h->ids[j];
      }
      if (k != 1 || r == pad) continue;
      taken++;
      if (bo->mode == CLEMBED_BAG_MAX) {
        const int64_t *mr = h->max_rows + b * C;
        int named = 0;
        for (size_t c = 0; c < C && !named; c++) named = mr[c] == (int64_t)r;
        for (size_t q = first; q < (size_t)m && named; q++) named = row[q] != r; /* the bag's first of that row */
        if (!named) continue;
      }
      row[m] = r;
      bag[m] = (uint32_t)b;
      pos[m] = (uint32_t)j;
      sc[ce_mpi_owner(t, r)]++;
      m++;
    }
    count[b] = (float)taken;
  }
  return m;
}

void ce_mpi_bag_contrib_fill(clembed_mpi_table *t, const ce_mpi_bag_inputs *h, const clembed_bag_options *bo,
                             long long m, char **ids_to, float **rows_to) {
  size_t C = t->cols;
  int big = t->max_shard > (size_t)INT32_MAX;
  const uint64_t *row = t->buf[CE_MPI_KEYS].p;
  const uint32_t *bag = t->buf[CE_MPI_VALS].p, *pos = t->buf[CE_MPI_POS].p;
  const float *count = t->buf[CE_MPI_VALS2].p;
  for (long long q = 0; q < m; q++) {
    int owner = ce_mpi_owner(t, row[q]);
    size_t b = bag[q], in_shard = row[q] - t->bounds[owner];
    if (big) memcpy(ids_to[owner], &(int64_t){(int64_t)in_shard}, 8);
    else memcpy(ids_to[owner], &(int32_t){(int32_t)in_shard}, 4);
    ids_to[owner] += big ? 8 : 4;
    const float *g = h->grad + b * h->grad_ld;
    float *out = rows_to[owner];
    rows_to[owner] += C;
    if (bo->mode == CLEMBED_BAG_MAX) {
      const int64_t *mr = h->max_rows + b * C;
      for (size_t c = 0; c < C; c++) out[c] = mr[c] == (int64_t)row[q] ? g[c] : 0.0f;
    } else if (bo->mode == CLEMBED_BAG_MEAN) {
      for (size_t c = 0; c < C; c++) out[c] = g[c] / count[b];
    } else if (h->weights) {
      const float w = h->weights[pos[q]];
      for (size_t c = 0; c < C; c++) out[c] = w * g[c];
    } else {
      memcpy(out, g, C * sizeof *out);
    }
  }
}

clembed_status clembed_mpi_bag_optimizer_step(clembed_mpi_table *t, const clembed_matrix *grad_out,
                                              const clembed_ids *ids, const clembed_ids *offsets,
                                              const clembed_bag_options *opt, const clembed_optimizer *o) {
  const char *op = "clembed_mpi_bag_optimizer_step";
  if (!t)
    return ce_mpi_null_handle(op, "t");
  if (t->column) return ce_mpi_refuse_column(t, op);
  clembed_context *ctx = t->ctx;
  ce_mpi_error e = {0}, own = {0};
  ce_mpi_vote v = {0};
  clembed_bag_options bo = clembed_bag_defaults(); /* the caller's, as far as its struct_size goes */
  clembed_optimizer oo;
  ce_mpi_read_options(ctx, op, "opt", CLEMBED_STRUCT_BAG_OPTIONS, opt, &bo, sizeof bo, &e);
  ce_mpi_read_optimizer(ctx, op, o, &oo, &e);
  if (o) o = &oo; /* NULL: refused by check_step_args */
  int pad_bad = 0, made = 0;
  uint64_t pad = ce_mpi_padding(bo.padding_idx, t->rows, &pad_bad);
  int64_t bad_at = -1, bad_val = 0;
  bag_host h = {0};
  float *rows = NULL;

  if (e.status == CLEMBED_OK && bo.remap)
    ce_mpi_fail(&e, CLEMBED_ERR_UNSUPPORTED, "remap", -1, 0, "%s: remap: a pruned table is served, not trained", op);
  check_step_args(t, op, grad_out, ids, offsets, &bo, o, pad_bad, &e);
  if (e.status == CLEMBED_OK) read_inputs(t, op, grad_out, ids, offsets, &bo, &h, &e);
  if (e.status == CLEMBED_OK) made = ce_mpi_make_state(t, o->kind, &e);

  /* agree: the call and its settings; each rank's own failure */
  int ok = e.status == CLEMBED_OK;
  ce_mpi_agree_as(&v, "the call", CE_MPI_CALL, CE_MPI_CALL_BAG_STEP);
  ce_mpi_agree_as(&v, "mode", CE_MPI_MODE, ok ? (uint64_t)bo.mode : 0);
  ce_mpi_agree_as(&v, "policy", CE_MPI_POLICY, ok ? (uint64_t)bo.policy : 0);
  ce_mpi_agree_as(&v, "padding_idx", CE_MPI_PADDING, ok ? pad : 0);
  ce_mpi_agree_as(&v, "per_sample_weights", CE_MPI_GIVEN, ok ? (uint64_t)(bo.per_sample_weights != NULL) : 0);
  ce_mpi_agree_optimizer(&v, ok ? o : NULL);
  if (!ce_mpi_vote_run(t->comm, t->rank, t->size, &v, !ok, &e) || ce_mpi_vote_outcome(&v, op, &e) != CLEMBED_OK) {
    if (made) {
      clembed_matrix_release(&t->state);
      clembed_matrix_release(&t->state2);
    }
    goto done;
  }

  /* the contributions, then the exchange and the owners' step */
  {
    size_t n = ids->count;
    void *send_ids = ce_mpi_buffer(t, CE_MPI_SEND, n * 8 + 8);
    ce_mpi_bag_inputs in = {h.ids, h.offsets, h.max_rows, h.grad, h.weights, n, grad_out->rows, t->cols};
    long long m = send_ids ? ce_mpi_bag_contrib_plan(t, &in, &bo, pad, &bad_at, &bad_val) : -1;
    if (m >= 0) { /* in send order: each owner's from its displacement on */
      int size = t->size, idb = t->max_shard > (size_t)INT32_MAX ? 8 : 4, *sc = ce_mpi_send_counts(t);
      char **ids_to = malloc(((size_t)size + 1) * sizeof *ids_to);
      float **rows_to = malloc(((size_t)size + 1) * sizeof *rows_to);
      rows = ce_mpi_buffer(t, CE_MPI_SEND2, ((size_t)m * t->cols + 1) * sizeof *rows);
      size_t at = 0;
      for (int k = 0; ids_to && rows_to && rows && k < size; at += (size_t)sc[k++]) {
        ids_to[k] = (char *)send_ids + at * (size_t)idb;
        rows_to[k] = rows + at * t->cols;
      }
      if (ids_to && rows_to && rows) ce_mpi_bag_contrib_fill(t, &in, &bo, m, ids_to, rows_to);
      else m = -1;
      free(ids_to);
      free(rows_to);
    }
    if (m < 0) ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for %zu ids", op, n);
    clembed_backward_options b = clembed_backward_defaults(); /* scale 1, no frequency scaling, as the bag step */
    ce_mpi_step_deliver(t, op, o, &b, send_ids, (const char *)rows, t->cols * sizeof(float), NULL, 0, CLEMBED_F32,
                        made, &e, &own);
    if (bad_at >= 0) ce_mpi_bad_id(&e, op, bad_at, bad_val, bo.policy, t->rows); /* kept only when no failure came first */
  }
done:
  for (int k = 0; k < CE_MPI_NSTAGE; k++) ce_mpi_stage_done(t, k, &own);
  host_release(&h);
  return ce_mpi_report(ctx, op, &e);
}
