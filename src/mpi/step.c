/* clembed_mpi_optimizer_step: every token's gradient row goes to the owner of
 * its id, and each owner runs clembed_optimizer_step on what it received.
 *
 * Why the bits are one device's: clembed_optimizer_step folds the
 * contributions to a row in ascending token order, from zero (the segment
 * fold after a stable sort by row). Each rank sends, to each owner, the rows
 * of its tokens that the owner owns, in token order (a stable counting sort
 * by owner); MPI_Alltoallv places what an owner receives in rank order. For
 * the ranks' batches concatenated in rank order that is ascending global
 * token order, and the owner's own stable sort by row keeps it: every row
 * folds the same float32 values in the same order as one device would. The
 * values are the same: a rank applies its own dropout mask before sending
 * (clembed_embed of the gradient rows with scale 1 and the rank's dropout and
 * seed: its element e = i*cols + c is g * (1 / (1 - p)) where the mask keeps
 * it, else 0, the float operations the backward's mask does); scale is the
 * owner's (after the sum, as on one device); scale_grad_by_freq divides by
 * the number of contributions the owner received for the row, the id's count
 * over all ranks. Bad, dropped (ZERO) and padding tokens are resolved on the
 * rank that passed them and send nothing, as they add nothing on one device.
 * Nothing is summed before sending: a partial sum on the sending side would
 * change the order of the additions.
 *
 * The rows are read where they lie: the gradient mapped (when it travels as
 * it is: no dropout, the wire's dtype), else the masked or converted rows the
 * device wrote; the host copies each token's row, in one pass along them,
 * into send order, or, for the rows the rank owns itself, straight into the
 * matrix its own step reads (they do not go through MPI).
 *
 * All or nothing: the ranks agree first (one MPI_Allreduce: the call, the
 * options that must agree, each rank's own failure); a rank that cannot
 * prepare its rows says so in the counts' exchange (negative counts), and
 * then no rank steps. Only a failure while an owner steps (the device, out
 * of memory) can leave the table stepped elsewhere; every rank is told. */
#include "mpi_table.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_float(clembed_dtype d) { return d == CLEMBED_F32 || d == CLEMBED_F16 || d == CLEMBED_BF16; }

/* The optimizer as the owner's clembed_optimizer_step gets it: the state
 * matrices given (the shard's, or 0-row stand-ins for the argument check),
 * and first_row moved on by the shard's first row (first), so that stochastic
 * rounding draws the whole table's bits (row first_row + first + v for the
 * shard's row v). */
static clembed_optimizer with_states(const clembed_optimizer *o, clembed_matrix *s1, clembed_matrix *s2,
                                     size_t first) {
  clembed_optimizer p = *o;
  p.state = o->kind == CLEMBED_SGD ? NULL : s1;
  p.state2 = o->kind == CLEMBED_ADAM ? s2 : NULL;
  p.first_row = o->first_row + (uint64_t)first;
  return p;
}

/* The step's backward options on the owner: the contributions come masked and
 * resolved (local rows, none bad, no padding); scale and scale_grad_by_freq
 * are the call's. */
static clembed_backward_options owner_options(const clembed_backward_options *bo) {
  clembed_backward_options b = clembed_backward_defaults();
  b.scale = bo->scale;
  b.scale_grad_by_freq = bo->scale_grad_by_freq;
  return b;
}

/* The optimizer of a sharded step, on this rank: no states passed in, the
 * kind of the table's state, and clembed_optimizer_step's own checks (kind,
 * learning_rate, eps, betas, weight_decay, step; a quantized table), run on 0
 * rows of the shard with 0-row states and the owner's options b: nothing is
 * touched. */
void ce_mpi_check_optimizer(clembed_mpi_table *t, const char *op, const clembed_optimizer *o,
                            const clembed_backward_options *b, ce_mpi_error *e) {
  if (o->state || o->state2) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, o->state ? "state" : "state2", -1, 0,
                "%s: the optimizer's %s must be NULL: the table keeps each shard's state itself", op,
                o->state ? "state" : "state2");
  } else if (t->has_state && t->kind != o->kind) {
    char had[32], asked[32];
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "kind", -1, (int64_t)o->kind,
                "%s: the table's state belongs to %s; a step of %s cannot use it", op,
                ce_mpi_kind_text((int)t->kind, had, sizeof had), ce_mpi_kind_text((int)o->kind, asked, sizeof asked));
  } else {
    clembed_context *ctx = t->ctx;
    clembed_matrix tv = ce_mpi_rows(&t->shard, 0), g0 = ce_mpi_rows(&t->scratch, 0);
    clembed_matrix s1 = g0, s2 = g0;
    g0.cols = t->cols;
    s1.cols = o->kind == CLEMBED_ROWWISE_ADAGRAD ? 1 : t->cols;
    s2.cols = t->cols;
    g0.ld = s1.ld = s2.ld = 0;
    clembed_ids none = {0};
    none.type = CLEMBED_I32;
    clembed_optimizer p = with_states(o, &s1, &s2, 0);
    clembed_status s = CLEMBED_OK;
    if (t->rows && o->first_row > (uint64_t)0 - (uint64_t)t->rows) /* (a shard's step would refuse it) */
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "first_row", -1, 0,
                  "%s: first_row %llu + the table's %zu rows pass 2^64", op, (unsigned long long)o->first_row,
                  t->rows);
    else
      s = clembed_optimizer_step(ctx, &g0, &none, b, &p, &tv, 0, NULL, NULL);
    if (s == CLEMBED_OK) s = clembed_finish(ctx);
    if (s != CLEMBED_OK) ce_mpi_fail_from(e, ctx, s);
  }
}

/* The rank's own arguments; on success the optimizer's settings have been
 * checked by clembed_optimizer_step itself on 0 rows of the shard. */
static void check_args(clembed_mpi_table *t, const char *op, const clembed_matrix *g, const clembed_ids *ids,
                       const clembed_backward_options *bo, const clembed_optimizer *o, int pad_bad, ce_mpi_error *e) {
  size_t limit = (size_t)INT_MAX / (size_t)t->size;
  if (!g || !ids || !o) {
    const char *a = !g ? "grad_out" : !ids ? "ids" : "optimizer";
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, a, -1, 0, "%s: %s is NULL", op, a);
  } else if (o->state || o->state2) {
    ce_mpi_check_optimizer(t, op, o, bo, e);
  } else if (g->rows != ids->count || g->cols != t->cols) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "grad_out", -1, (int64_t)g->rows,
                "%s: grad_out is %zu x %zu but %zu ids of a table of %zu cols need %zu x %zu", op, g->rows, g->cols,
                ids->count, t->cols, ids->count, t->cols);
  } else if (!is_float(g->dtype)) {
    char dt[32];
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "grad_out", -1, (int64_t)g->dtype,
                "%s: grad_out must be F32, F16 or BF16, not %s", op, ce_mpi_dtype_text(g->dtype, dt, sizeof dt));
  } else if (bo->position_grad) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "position_grad", -1, 0,
                "%s: a sharded step does not fold a position table's gradient; take it with clembed_backward on "
                "the rank's batch", op);
  } else if ((unsigned)bo->policy > (unsigned)CLEMBED_INDEX_WRAP) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "policy", -1, (int64_t)bo->policy, "%s: unknown index policy %d", op,
                (int)bo->policy);
  } else if (pad_bad) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "padding_idx", -1, bo->padding_idx,
                "%s: padding_idx %lld is outside the table of %zu rows", op, (long long)bo->padding_idx, t->rows);
  } else if (!(bo->dropout >= 0.0f && bo->dropout < 1.0f)) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "dropout", -1, 0, "%s: dropout %g is outside [0, 1)", op,
                (double)bo->dropout);
  } else if (ids->count > limit) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "ids", -1, (int64_t)ids->count,
                "%s: %zu ids; at most %zu per rank and call with %d ranks (MPI counts are int)", op, ids->count, limit,
                t->size);
  } else {
    clembed_backward_options b = owner_options(bo);
    ce_mpi_check_optimizer(t, op, o, &b, e);
  }
}

int ce_mpi_make_state(clembed_mpi_table *t, clembed_optimizer_kind kind, ce_mpi_error *e) {
  if (t->has_state || kind == CLEMBED_SGD) return 0;
  clembed_context *ctx = t->ctx;
  size_t r = t->shard.rows;
  size_t c = t->shard.cols; /* the table's cols; a COLUMN table's block */
  clembed_status s = clembed_matrix_create(ctx, r, kind == CLEMBED_ROWWISE_ADAGRAD ? 1 : c, CLEMBED_F32, &t->state);
  if (s == CLEMBED_OK && kind == CLEMBED_ADAM) s = clembed_matrix_create(ctx, r, c, CLEMBED_F32, &t->state2);
  if (s != CLEMBED_OK) {
    ce_mpi_fail_from(e, ctx, s);
    clembed_matrix_release(&t->state);
    clembed_matrix_release(&t->state2);
    return 0;
  }
  return 1;
}

/* The rank's contributions: its tokens that reach a row (not bad, dropped or
 * padding), grouped by owner in token order (a stable counting sort). Fills
 * the send counts, each token's place in send order (pos; -1 for a token
 * that sends nothing) and their rows in the owners' shards (the ids sent);
 * the first bad id to report goes to *bad_at / *bad_id. Returns the count, or
 * -1 when host memory runs out. */
static long long plan(clembed_mpi_table *t, const int64_t *host, size_t n, clembed_index_policy policy, uint64_t pad,
                      int *pos, void *send, int big, int64_t *bad_at, int64_t *bad_id) {
  int *sc = ce_mpi_send_counts(t), size = t->size;
  int32_t *owner = ce_mpi_buffer(t, CE_MPI_VALS2, n * 4 + 4);
  uint64_t *in_shard = ce_mpi_buffer(t, CE_MPI_KEYS, n * 8 + 8);
  int *at = malloc(((size_t)size + 1) * sizeof *at);
  if (!owner || !in_shard || !at) {
    free(at);
    return -1;
  }
  memset(sc, 0, (size_t)size * sizeof *sc);
  const size_t *bounds = t->bounds, rows = t->rows;
  for (size_t i = 0; i < n; i++) {
    uint64_t row = 0;
    int r = ce_mpi_resolve(host[i], rows, policy, &row), o = -1;
    if (r == 1 && row != pad) {
      o = ce_mpi_owner(t, row);
      sc[o]++;
      in_shard[i] = row - bounds[o];
    } else if (r < 0 && *bad_at < 0) {
      *bad_at = (int64_t)i;
      *bad_id = host[i];
    }
    owner[i] = o;
  }
  at[0] = 0;
  for (int k = 0; k < size; k++) at[k + 1] = at[k] + sc[k];
  long long total = at[size];
  for (size_t i = 0; i < n; i++) {
    pos[i] = -1;
    if (owner[i] < 0) continue;
    int k = at[owner[i]]++;
    pos[i] = k;
    if (big) ((int64_t *)send)[k] = (int64_t)in_shard[i];
    else ((int32_t *)send)[k] = (int32_t)in_shard[i];
  }
  free(at);
  return total;
}

/* The rank's gradient rows as `wire` values, for the host to read (row i of
 * *rows, rows *ld bytes apart): the gradient itself, mapped, when it travels
 * as it is (no dropout, the wire's dtype, one buffer); else, on the device,
 * the gradient with the rank's dropout mask applied or converted to the
 * wire's dtype (clembed_embed of its n rows with scale 1 and the rank's
 * dropout into the mask stage), mapped. */
static clembed_status pack(clembed_mpi_table *t, const clembed_matrix *g, const clembed_backward_options *bo, size_t m,
                           clembed_dtype wire, char **rows, size_t *ld, ce_mpi_error *e) {
  clembed_context *ctx = t->ctx;
  clembed_status s = CLEMBED_OK;
  size_t n = g->rows, rb = clembed_dtype_size(wire) * t->cols;
  *rows = NULL;
  *ld = rb;
  if (!m || !rb) return CLEMBED_OK;
  if (!(bo->dropout > 0.0f) && g->dtype == wire && ce_mpi_map_matrix(t, g, CL_MAP_READ, rows, ld)) return CLEMBED_OK;
  *ld = rb;
  uint32_t *iota = ce_mpi_stage_write(t, CE_MPI_ST_IOTA, n * 4, e);
  if (!iota) return e->status;
  for (size_t i = 0; i < n; i++) iota[i] = (uint32_t)i;
  if ((s = ce_mpi_stage_done(t, CE_MPI_ST_IOTA, e)) != CLEMBED_OK) return s;
  if ((s = ce_mpi_stage_reserve(t, CE_MPI_ST_MASK, n * rb, e)) != CLEMBED_OK) return s;
  clembed_embed_options eo = clembed_embed_defaults();
  eo.dropout = bo->dropout;
  eo.dropout_seed = bo->dropout_seed;
  clembed_ids all = ce_mpi_stage_ids(t, CE_MPI_ST_IOTA, n, CLEMBED_I32);
  clembed_matrix masked = ce_mpi_stage_matrix(t, CE_MPI_ST_MASK, n, t->cols, wire);
  s = clembed_embed(ctx, g, &all, &eo, &masked, 0, NULL, NULL);
  if (s == CLEMBED_OK) s = clembed_finish(ctx);
  if (s != CLEMBED_OK) return ce_mpi_fail_from(e, ctx, s);
  *rows = ce_mpi_stage_read(t, CE_MPI_ST_MASK, n * rb, e);
  return *rows ? CLEMBED_OK : e->status;
}

/* The owner's step on what it received (mpi_table.h): its shard's rows, in
 * global token order, the table's state, first_row moved on by the shard's
 * first row. */
void ce_mpi_step_own(clembed_mpi_table *t, const clembed_optimizer *o, const clembed_backward_options *b,
                     size_t nrecv, clembed_dtype wire, ce_mpi_error *own) {
  clembed_context *ctx = t->ctx;
  int big = t->max_shard > (size_t)INT32_MAX;
  if (!nrecv || own->status != CLEMBED_OK) return;
  clembed_optimizer p = with_states(o, &t->state, &t->state2, t->bounds[t->rank]);
  clembed_status s = ce_mpi_stage_done(t, CE_MPI_ST_ASKED, own);
  if (s == CLEMBED_OK) s = ce_mpi_stage_done(t, CE_MPI_ST_IN, own);
  clembed_matrix rows = ce_mpi_stage_matrix(t, CE_MPI_ST_IN, nrecv, t->cols, wire);
  clembed_ids lids = ce_mpi_stage_ids(t, CE_MPI_ST_ASKED, nrecv, big ? CLEMBED_I64 : CLEMBED_I32);
  if (s == CLEMBED_OK) s = clembed_optimizer_step(ctx, &rows, &lids, b, &p, &t->shard, 0, NULL, NULL);
  if (s == CLEMBED_OK) s = clembed_finish(ctx);
  if (s != CLEMBED_OK && own->status == CLEMBED_OK) ce_mpi_fail_from(own, ctx, s);
}

/* The exchange and the owners' step, shared by the sharded steps. The rank's
 * contributions are ready (the send counts set, send_ids their rows in the
 * owners' shards; their `wire` rows are the rows of src, src_ld bytes apart:
 * row i goes to place pos[i] in send order (none where -1), i < npos, or
 * with pos NULL rows k are in send order already), or e holds its failure,
 * announced in the counts' exchange: then no rank steps and a state made by
 * this call (made) goes again. With pos, the host copies src's rows in one
 * pass along them, the rank's own straight where its step reads them and the
 * others' into send order, then sends the others'; without, it sends them
 * from src and copies its own while they travel. Each owner receives its
 * rows in rank order and runs clembed_optimizer_step on them with options b;
 * a failure there (kept in own) is learnt by every rank. */
void ce_mpi_step_deliver(clembed_mpi_table *t, const char *op, const clembed_optimizer *o,
                         const clembed_backward_options *b, void *send_ids, const char *src, size_t src_ld,
                         const int *pos, size_t npos, clembed_dtype wire, int made, ce_mpi_error *e,
                         ce_mpi_error *own) {
  int big = t->max_shard > (size_t)INT32_MAX, me = t->rank, *sc = ce_mpi_send_counts(t);
  size_t rb = clembed_dtype_size(wire) * t->cols, m = 0;
  char *gathered = NULL;
  for (int k = 0; e->status == CLEMBED_OK && k < t->size; k++) m += (size_t)sc[k];
  if (e->status == CLEMBED_OK && pos && m && rb && !(gathered = ce_mpi_buffer(t, CE_MPI_SEND2, m * rb)))
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for %zu gradient rows", op, m);
  if (e->status != CLEMBED_OK)
    for (int k = 0; k < t->size; k++) sc[k] = -1;
  long long nrecv = ce_mpi_exchange_counts(t, e);
  int failed = nrecv < 0 ? -1 : ce_mpi_count_failure(t);
  if (nrecv < 0 || failed >= 0) { /* no row is stepped: a state made for this step goes again */
    if (made) {
      clembed_matrix_release(&t->state);
      clembed_matrix_release(&t->state2);
    }
    if (failed >= 0)
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "", failed, 0,
                  "%s: rank %d could not prepare its gradient rows (its context's message says why); no row was "
                  "stepped", op, failed);
    return;
  }
  if (made) { /* the state is the table's from this step on */
    t->has_state = 1;
    t->kind = o->kind;
  }
  /* what the owner receives goes straight into the stages its step reads */
  void *recv_ids = ce_mpi_stage_write(t, CE_MPI_ST_ASKED, (size_t)nrecv * (big ? 8 : 4), own);
  char *recv_rows = ce_mpi_stage_write(t, CE_MPI_ST_IN, (size_t)nrecv * rb, own);
  if (!recv_ids) recv_ids = ce_mpi_buffer(t, CE_MPI_RECV, (size_t)nrecv * 8 + 8); /* the answer must still go */
  if (!recv_rows) recv_rows = ce_mpi_buffer(t, CE_MPI_RECV2, (size_t)nrecv * rb + 1);
  if (!recv_ids || !recv_rows) {
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for %lld contributions", op, nrecv);
    return;
  }
  if (!ce_mpi_alltoallv(t, send_ids, recv_ids, big ? MPI_INT64_T : MPI_INT32_T, 0, e)) return;
  /* the rows: with pos, every one copied in one pass along src (read once, in
   * order: the others' into send order, the rank's own into place), then the
   * others' sent; without, the others' sent from src as they lie and the
   * rank's own copied into place while they travel */
  const size_t own0 = (size_t)t->counts[2 * t->size + me], nown = (size_t)sc[me];
  char *own_to = recv_rows + (size_t)t->counts[3 * t->size + me] * rb;
  MPI_Datatype rowt;
  MPI_Request req = MPI_REQUEST_NULL;
  if (pos && gathered)
    for (size_t i = 0; i < npos; i++) {
      if (pos[i] < 0) continue;
      size_t k = (size_t)pos[i];
      memcpy(k - own0 < nown ? own_to + (k - own0) * rb : gathered + k * rb, src + i * src_ld, rb);
    }
  int started = ce_mpi_rows_start(t, gathered ? gathered : src ? src : (const char *)recv_rows, recv_rows, rb, 0, 1,
                                  &rowt, &req, e);
  if (!pos && src)
    for (size_t j = 0; j < nown && rb; j++) {
      memcpy(own_to + j * rb, src + (own0 + j) * src_ld, rb);
      if (req != MPI_REQUEST_NULL && (j + 1) % CE_MPI_TEST == 0) {
        int done = 0;
        MPI_Test(&req, &done, MPI_STATUS_IGNORE); /* the exchange's progress; a failure shows in the wait */
      }
    }
  if (!ce_mpi_rows_wait(&rowt, &req, e) || !started) return;
  ce_mpi_unmap_matrix(t, own); /* the rank's gradient, if it was read mapped */

  /* the owner's step on what it received, in global token order */
  ce_mpi_step_own(t, o, b, (size_t)nrecv, wire, own);
  clembed_status theirs = CLEMBED_OK;
  int bad = ce_mpi_first_failed(t->comm, t->rank, t->size, own->status, e, &theirs);
  if (bad >= 0) {
    if (e->status == CLEMBED_OK && own->status != CLEMBED_OK) *e = *own;
    ce_mpi_fail(e, theirs, "", bad, 0,
                "%s: rank %d could not step its rows (its context's message says why); the other shards were "
                "stepped", op, bad);
  }
}

clembed_status clembed_mpi_optimizer_step(clembed_mpi_table *t, const clembed_matrix *grad_out,
                                          const clembed_ids *ids, const clembed_backward_options *opt,
                                          const clembed_optimizer *o) {
  const char *op = "clembed_mpi_optimizer_step";
  if (!t)
    return ce_mpi_null_handle(op, "t");
  if (t->column) return ce_mpi_refuse_column(t, op);
  clembed_context *ctx = t->ctx;
  ce_mpi_error e = {0};
  ce_mpi_vote v = {0};
  clembed_backward_options bo = clembed_backward_defaults(); /* the caller's, as far as its struct_size goes */
  clembed_optimizer oo;
  ce_mpi_read_options(ctx, op, "opt", CLEMBED_STRUCT_BACKWARD_OPTIONS, opt, &bo, sizeof bo, &e);
  ce_mpi_read_optimizer(ctx, op, o, &oo, &e);
  if (o) o = &oo; /* NULL: refused by check_args */
  ce_mpi_error own = {0}; /* a failure of this rank's owner side: every rank learns it */
  int pad_bad = 0, made = 0, big = t->max_shard > (size_t)INT32_MAX;
  uint64_t pad = ce_mpi_padding(bo.padding_idx, t->rows, &pad_bad);
  int64_t *host = NULL, bad_at = -1, bad_id = 0;
  size_t n = 0;

  check_args(t, op, grad_out, ids, &bo, o, pad_bad, &e);
  if (e.status == CLEMBED_OK) {
    n = ids->count;
    host = ce_mpi_buffer(t, CE_MPI_IDS, n * 8 + 8);
    if (!host) ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for %zu ids", op, n);
    else ce_mpi_read_ids(t, ids, host, &e);
  }
  if (e.status == CLEMBED_OK) made = ce_mpi_make_state(t, o->kind, &e);

  /* agree: the call and its settings; each rank's own failure; whether the
   * gradients all have one dtype and none has dropout (then they travel as they are) */
  int ok = e.status == CLEMBED_OK;
  ce_mpi_agree_as(&v, "the call", CE_MPI_CALL, CE_MPI_CALL_STEP);
  ce_mpi_agree_float(&v, "scale", ok ? bo.scale : 0.0f);
  ce_mpi_agree_as(&v, "policy", CE_MPI_POLICY, ok ? (uint64_t)bo.policy : 0);
  ce_mpi_agree_as(&v, "padding_idx", CE_MPI_PADDING, ok ? pad : 0);
  ce_mpi_agree_as(&v, "scale_grad_by_freq", CE_MPI_SWITCH, ok ? (uint64_t)(bo.scale_grad_by_freq != 0) : 0);
  ce_mpi_agree_optimizer(&v, ok ? o : NULL);
  v.max[0] = ok ? (uint64_t)grad_out->dtype : 0;
  v.max[1] = ok ? ~(uint64_t)grad_out->dtype : ~(uint64_t)0;
  v.max[2] = ok && bo.dropout > 0.0f;
  if (!ce_mpi_vote_run(t->comm, t->rank, t->size, &v, !ok, &e)) goto done;
  if (ce_mpi_vote_outcome(&v, op, &e) != CLEMBED_OK) {
    if (made) {
      clembed_matrix_release(&t->state);
      clembed_matrix_release(&t->state2);
    }
    goto done;
  }
  clembed_dtype wire = v.max[0] == ~v.max[1] && !v.max[2] ? grad_out->dtype : CLEMBED_F32;

  /* the rank's contributions, prepared: its tokens in send order, whose rows
   * the exchange reads where they lie; a failure is announced with the counts */
  int *pos = ce_mpi_buffer(t, CE_MPI_VALS, n * 4 + 4);
  void *send_ids = ce_mpi_buffer(t, CE_MPI_SEND, n * 8 + 8);
  char *send_rows = NULL;
  size_t send_ld = 0;
  long long m = pos && send_ids ? plan(t, host, n, bo.policy, pad, pos, send_ids, big, &bad_at, &bad_id) : -1;
  if (m < 0 && e.status == CLEMBED_OK)
    ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for %zu ids", op, n);
  if (m >= 0) pack(t, grad_out, &bo, (size_t)m, wire, &send_rows, &send_ld, &e);
  clembed_backward_options b = owner_options(&bo);
  ce_mpi_step_deliver(t, op, o, &b, send_ids, send_rows, send_ld, pos, n, wire, made, &e, &own);
  if (bad_at >= 0) /* kept only when no failure came first */
    ce_mpi_bad_id(&e, op, bad_at, bad_id, bo.policy, t->rows);
done:
  ce_mpi_unmap_matrix(t, &own);
  for (int k = 0; k < CE_MPI_NSTAGE; k++) ce_mpi_stage_done(t, k, &own);
  return ce_mpi_report(ctx, op, &e);
}
