/* clembed_mpi_embed: each rank resolves its ids on the host (the kernels'
 * index policy, against the whole table), asks each owner once for every
 * distinct row of its batch (MPI_Alltoallv of the rows' indices in the
 * owner's shard), the owners gather those rows on their devices
 * (clembed_lookup) and send them back (MPI_Alltoallv of the rows' bytes), and
 * the rank runs clembed_embed, with its own options, on the rows it received:
 * a matrix of its distinct rows (grouped by owner), its ids renumbered into
 * it. The rows travel in the table's own dtype (block-quantized rows as the
 * F32 values every kernel dequantizes them to), so each output element is
 * computed from the same float32 values in the same operations as on one
 * device. Bad ids keep their value in the renumbered ids: a bad id of the
 * table is outside the smaller matrix too (negative, or at least rows), so
 * the local clembed_embed zeroes and reports it exactly as one device would;
 * the report is then restated against the whole table. */
#include "mpi_table.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* The rank's request. Its distinct rows are found with a hash table (open
 * addressing, one pass over the ids), then grouped by owner (a counting
 * sort): keys receives them in send order, and `local` the rank's ids
 * renumbered into that order (a bad id keeps its value: it is outside the
 * smaller matrix too). Fills the send counts (rows per owner); *pad_local
 * receives the padding row's place, or -1. Returns the number of distinct
 * rows, or -1 when host memory runs out (recorded on e). */
static long long plan(clembed_mpi_table *t, const int64_t *host, size_t n, clembed_index_policy policy, uint64_t pad,
                      int64_t *local, int64_t *pad_local, ce_mpi_error *e, const char *op) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  unsigned shift = 64;
  for (size_t c = cap; c > 1; c /= 2) shift--;
  uint64_t *first = ce_mpi_buffer(t, CE_MPI_KEYS2, n * 8 + 8), *hk = ce_mpi_buffer(t, CE_MPI_VALS2, cap * 8);
  uint64_t *keys = ce_mpi_buffer(t, CE_MPI_KEYS, n * 8 + 8);
  uint32_t *which = ce_mpi_buffer(t, CE_MPI_VALS, n * 4 + 4), *pos = ce_mpi_buffer(t, CE_MPI_POS, n * 4 + 4);
  uint32_t *hv = ce_mpi_buffer(t, CE_MPI_SEND2, cap * 4);
  int *sc = ce_mpi_send_counts(t), *at = malloc(((size_t)t->size + 1) * sizeof *at);
  if (!first || !hk || !keys || !which || !pos || !hv || !at) {
    free(at);
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for %zu ids", op, n);
    return -1;
  }
  memset(hk, 0, cap * 8); /* row + 1; 0: empty */
  size_t d = 0, mask = cap - 1;
  for (size_t i = 0; i < n; i++) {
    uint64_t row;
    local[i] = host[i];
    which[i] = UINT32_MAX;
    if (ce_mpi_resolve(host[i], t->rows, policy, &row) != 1) continue;
    size_t h = (size_t)((row * 0x9E3779B97F4A7C15ULL) >> shift);
    while (hk[h] && hk[h] != row + 1) h = (h + 1) & mask;
    if (!hk[h]) {
      hk[h] = row + 1;
      hv[h] = (uint32_t)d;
      first[d++] = row;
    }
    which[i] = hv[h];
  }
  /* grouped by owner, each owner's rows in first-occurrence order */
  memset(sc, 0, (size_t)t->size * sizeof *sc);
  for (size_t k = 0; k < d; k++) sc[ce_mpi_owner(t, first[k])]++;
  at[0] = 0;
  for (int r = 0; r < t->size; r++) at[r + 1] = at[r] + sc[r];
  *pad_local = -1;
  for (size_t k = 0; k < d; k++) {
    int r = ce_mpi_owner(t, first[k]);
    pos[k] = (uint32_t)at[r]++;
    keys[pos[k]] = first[k];
    if (first[k] == pad) *pad_local = pos[k];
  }
  for (size_t i = 0; i < n; i++)
    if (which[i] != UINT32_MAX) local[i] = pos[which[i]];
  free(at);
  return (long long)d;
}

/* The forward's fetch, shared with clembed_mpi_embedding_bag (mpi_table.h). */
int ce_mpi_fetch_rows(clembed_mpi_table *t, const char *op, const int64_t *host, size_t n,
                      clembed_index_policy policy, uint64_t pad, size_t *d_out, int64_t *pad_local,
                      clembed_dtype *wire_out, ce_mpi_error *e, ce_mpi_error *serve) {
  clembed_context *ctx = t->ctx;
  int big = t->max_shard > (size_t)INT32_MAX, idb = big ? 8 : 4;
  long long d = 0;
  int64_t *local = NULL;
  *d_out = 0;
  *pad_local = -1;
  *wire_out = clembed_dtype_size(t->dtype) ? t->dtype : CLEMBED_F32;
  /* the request: distinct rows per owner, as indices in the owner's shard; the
   * rank's ids renumbered into them, straight into the ids of its own forward */
  int *sc = ce_mpi_send_counts(t);
  memset(sc, 0, (size_t)t->size * sizeof *sc);
  if (e->status == CLEMBED_OK) local = ce_mpi_stage_write(t, CE_MPI_ST_LOCAL, n * 8, e);
  if (local) {
    d = plan(t, host, n, policy, pad, local, pad_local, e, op);
    if (d < 0) memset(sc, 0, (size_t)t->size * sizeof *sc);
  }
  if (d < 0) d = 0;
  const uint64_t *distinct = t->buf[CE_MPI_KEYS].p;
  void *send = ce_mpi_buffer(t, CE_MPI_SEND, (size_t)d * 8 + 8);
  if (!send) {
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
    d = 0;
    memset(sc, 0, (size_t)t->size * sizeof *sc);
  }
  for (long long k = 0; k < d; k++) {
    size_t row = distinct[k], in_shard = row - t->bounds[ce_mpi_owner(t, row)];
    if (big) ((int64_t *)send)[k] = (int64_t)in_shard;
    else ((int32_t *)send)[k] = (int32_t)in_shard;
  }
  long long nserve = ce_mpi_exchange_counts(t, e);
  if (nserve < 0) return 0;
  /* the ids asked of this shard arrive in its ids stage (a host buffer if that fails: the answer must still go) */
  void *asked = ce_mpi_stage_write(t, CE_MPI_ST_ASKED, (size_t)nserve * (size_t)idb, serve);
  if (!asked) asked = ce_mpi_buffer(t, CE_MPI_RECV, (size_t)nserve * 8 + 8);
  if (!asked) {
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for %lld requests", op, nserve);
    return 0;
  }
  if (!ce_mpi_alltoallv(t, send, asked, big ? MPI_INT64_T : MPI_INT32_T, 0, e)) return 0;
  ce_mpi_stage_done(t, CE_MPI_ST_ASKED, serve);

  /* serve: the rows asked of this shard, gathered on the device into the out stage */
  clembed_dtype wire = *wire_out;
  size_t rb = clembed_dtype_size(wire) * t->cols;
  void *rows_out = NULL, *rows_in = NULL;
  if (serve->status == CLEMBED_OK && nserve && rb) {
    clembed_status s = ce_mpi_stage_reserve(t, CE_MPI_ST_OUT, (size_t)nserve * rb, serve);
    clembed_ids sids = ce_mpi_stage_ids(t, CE_MPI_ST_ASKED, (size_t)nserve, big ? CLEMBED_I64 : CLEMBED_I32);
    clembed_matrix gathered = ce_mpi_stage_matrix(t, CE_MPI_ST_OUT, (size_t)nserve, t->cols, wire);
    if (s == CLEMBED_OK) s = clembed_lookup(ctx, &t->shard, &sids, &gathered, 0, NULL, NULL);
    if (s == CLEMBED_OK) s = clembed_finish(ctx);
    if (s != CLEMBED_OK && serve->status == CLEMBED_OK) ce_mpi_fail_from(serve, ctx, s);
    else if (s == CLEMBED_OK) rows_out = ce_mpi_stage_read(t, CE_MPI_ST_OUT, (size_t)nserve * rb, serve);
  }
  if (!rows_out) rows_out = ce_mpi_buffer(t, CE_MPI_SEND2, (size_t)nserve * rb + 1); /* garbage for a failed serve */
  if (e->status == CLEMBED_OK) rows_in = ce_mpi_stage_write(t, CE_MPI_ST_IN, (size_t)d * rb, e);
  if (!rows_in) rows_in = ce_mpi_buffer(t, CE_MPI_RECV2, (size_t)d * rb + 1);
  if (!rows_out || !rows_in) {
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for the rows", op);
    return 0;
  }
  if (!ce_mpi_alltoallv_rows(t, rows_out, rows_in, rb, 1, e)) return 0;
  /* a rank that could not serve spoils the others' rows: every rank learns it */
  clembed_status theirs = CLEMBED_OK;
  int bad = ce_mpi_first_failed(t->comm, t->rank, t->size, serve->status, e, &theirs);
  if (bad == -2) return 0;
  if (bad >= 0) {
    if (e->status == CLEMBED_OK && serve->status != CLEMBED_OK) *e = *serve;
    ce_mpi_fail(e, theirs, "", bad, 0,
                "%s: rank %d could not send the rows asked of it (its context's message says why)", op, bad);
    return 0;
  }
  if (e->status != CLEMBED_OK) return 0;

  *d_out = (size_t)d;
  return 1;
}

clembed_status clembed_mpi_embed(clembed_mpi_table *t, const clembed_ids *ids, const clembed_embed_options *opt,
                                 clembed_matrix *out) {
  const char *op = "clembed_mpi_embed";
  if (!t)
    return clembed_context_fail(NULL, CLEMBED_ERR_INVALID_ARGUMENT, op, "t", -1, 0,
                                "%s: t is NULL (no communicator to speak on)", op);
  clembed_context *ctx = t->ctx;
  ce_mpi_error e = {0}, serve = {0};
  ce_mpi_vote v = {0};
  clembed_embed_options o = opt ? *opt : clembed_embed_defaults();
  int pad_bad = 0;
  uint64_t pad = ce_mpi_padding(o.padding_idx, t->rows, &pad_bad);
  size_t n = 0, limit = (size_t)INT_MAX / (size_t)t->size;
  size_t d = 0;
  int64_t *host = NULL, pad_local = -1;

  /* this rank's own arguments */
  if (!ids || !out) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, ids ? "out" : "ids", -1, 0, "%s: %s is NULL", op, ids ? "out" : "ids");
  } else if ((unsigned)o.policy > (unsigned)CLEMBED_INDEX_WRAP) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "policy", -1, (int64_t)o.policy, "%s: unknown index policy %d", op,
                (int)o.policy);
  } else if (pad_bad) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "padding_idx", -1, o.padding_idx,
                "%s: padding_idx %lld is outside the table of %zu rows", op, (long long)o.padding_idx, t->rows);
  } else if (out->rows != ids->count || out->cols != t->cols) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "out", -1, (int64_t)out->rows,
                "%s: out is %zu x %zu but %zu ids of a table of %zu cols need %zu x %zu", op, out->rows, out->cols,
                ids->count, t->cols, ids->count, t->cols);
  } else if (ids->count > limit) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "ids", -1, (int64_t)ids->count,
                "%s: %zu ids; at most %zu per rank and call with %d ranks (MPI counts are int)", op, ids->count, limit,
                t->size);
  } else {
    n = ids->count;
    host = ce_mpi_buffer(t, CE_MPI_IDS, n * 8);
    if (!host) ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for %zu ids", op, n);
    else ce_mpi_read_ids(t, ids, host, &e);
  }

  /* what must agree; a rank's own failure does not stop the others' forward */
  ce_mpi_agree(&v, "the call", CE_MPI_CALL_EMBED);
  ce_mpi_agree_float(&v, "scale", o.scale);
  ce_mpi_agree(&v, "policy", (uint64_t)o.policy);
  ce_mpi_agree(&v, "padding_idx", pad_bad ? (uint64_t)o.padding_idx : pad);
  clembed_status voted;
  if (!ce_mpi_forward_vote(t, ctx, op, &v, &e, &voted)) return voted;

  clembed_dtype wire;
  if (!ce_mpi_fetch_rows(t, op, host, n, o.policy, pad, &d, &pad_local, &wire, &e, &serve)) goto done;

  /* the rank's own forward on the rows it received (the in stage) */
  {
    clembed_embed_options lo = o;
    if (lo.policy == CLEMBED_INDEX_CLAMP) lo.policy = CLEMBED_INDEX_CHECK; /* resolved already; bad ones stay bad */
    lo.padding_idx = pad_local >= 0 ? pad_local : CLEMBED_NO_PADDING;
    clembed_matrix rows;
    clembed_ids lids;
    clembed_status s = ce_mpi_fetched(t, d, n, wire, &e, &rows, &lids);
    if (s == CLEMBED_OK) s = clembed_embed(ctx, &rows, &lids, &lo, out, 0, NULL, NULL);
    if (s == CLEMBED_OK) s = clembed_finish(ctx);
    clembed_error_detail det;
    if (s == CLEMBED_ERR_INDEX_OUT_OF_RANGE && clembed_context_error(ctx, &det) == CLEMBED_OK &&
        !strcmp(det.argument, "ids"))
      ce_mpi_bad_id(&e, op, det.index, det.value, o.policy, t->rows);
    else if (s != CLEMBED_OK && e.status == CLEMBED_OK)
      ce_mpi_fail_from(&e, ctx, s);
  }
done:
  for (int k = 0; k < CE_MPI_NSTAGE; k++) ce_mpi_stage_done(t, k, &serve);
  return ce_mpi_report(ctx, op, &e);
}

void ce_mpi_bad_id(ce_mpi_error *e, const char *op, int64_t at, int64_t id, clembed_index_policy policy, size_t rows) {
  ce_mpi_fail(e, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "ids", at, id, "%s: ids[%lld] = %lld is outside [%s%zu, %zu)", op,
              (long long)at, (long long)id, policy == CLEMBED_INDEX_WRAP ? "-" : "",
              policy == CLEMBED_INDEX_WRAP ? rows : 0, rows);
}

clembed_status ce_mpi_fetched(clembed_mpi_table *t, size_t d, size_t n, clembed_dtype wire, ce_mpi_error *e,
                              clembed_matrix *rows, clembed_ids *lids) {
  clembed_status s = ce_mpi_stage_done(t, CE_MPI_ST_IN, e);
  if (s == CLEMBED_OK) s = ce_mpi_stage_done(t, CE_MPI_ST_LOCAL, e);
  *rows = ce_mpi_stage_matrix(t, CE_MPI_ST_IN, d, t->cols, wire);
  *lids = ce_mpi_stage_ids(t, CE_MPI_ST_LOCAL, n, CLEMBED_I64);
  return s;
}
