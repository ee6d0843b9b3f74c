/* clembed_mpi_embed: each rank resolves its ids on the host (the kernels'
 * index policy, against the whole table) and sorts the tokens that reach a row
 * by row (a radix sort), which finds each distinct row of its batch once and
 * groups them by owner; it asks each owner once for every distinct row
 * (MPI_Alltoallv of the rows' indices in the owner's shard, ascending), the
 * owners gather those rows on their devices with clembed_lookup (in ascending
 * row order) and send them back (MPI_Alltoallv of the rows' bytes). The rank
 * then runs clembed_embed, with its own options, on the rows it received: a
 * matrix of its distinct rows, its ids renumbered into it. With plain options
 * (scale 1, no positions, segments, norm or dropout) and an output of the
 * rows' dtype in one buffer, the output is the rows themselves, as
 * clembed_lookup gave them on the owners: the host copies their bytes into
 * it, mapped, from the rows as they arrived, and the rows a rank asks of
 * itself do not go through MPI (it writes their tokens from where its device
 * gathered them while the other ranks' rows travel). The rows travel in the
 * table's own dtype (block-quantized rows as the F32 values every kernel
 * dequantizes them to), so each output element is computed by a device from
 * the same float32 values in the same operations as on one device. Bad ids
 * keep their value in the renumbered ids: a bad id of the table is outside
 * the smaller matrix too (negative, or at least rows), so the local
 * clembed_embed zeroes and reports it exactly as one device would; the report
 * is then restated against the whole table. Where the host copies the rows,
 * bad, dropped and padding tokens get zero rows and the first bad id is
 * reported, as clembed_embed does. */
#include "mpi_table.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* A stable LSD radix sort of m keys by their bits [lo, lo + bits), with
 * values moved alongside when v is not NULL: digits of at most 11 bits,
 * every pass's histogram counted in one read. The keys come in *k (values
 * *v) and leave in *k, *v: the same arrays or the scratch (k2, v2). hist:
 * 6 * 2048 entries. */
static void radix_sort(uint64_t **k, uint32_t **v, uint64_t *k2, uint32_t *v2, size_t m, unsigned lo,
                       unsigned bits, uint32_t *hist) {
  unsigned passes = (bits + 10) / 11, width = passes ? (bits + passes - 1) / passes : 0;
  size_t buckets = (size_t)1 << width, mask = buckets - 1;
  if (!passes || m < 2) return;
  memset(hist, 0, passes * buckets * sizeof *hist);
  for (size_t i = 0; i < m; i++) {
    uint64_t x = (*k)[i] >> lo;
    for (unsigned p = 0; p < passes; p++) hist[p * buckets + ((x >> (p * width)) & mask)]++;
  }
  uint64_t *ka = *k, *kb = k2;
  uint32_t *va = *v, *vb = v2;
  for (unsigned p = 0; p < passes; p++) {
    uint32_t *h = hist + p * buckets, at = 0;
    unsigned shift = lo + p * width;
    for (size_t b = 0; b < buckets; b++) {
      uint32_t c = h[b];
      h[b] = at;
      at += c;
    }
    if (va) {
      for (size_t i = 0; i < m; i++) {
        uint32_t to = h[(ka[i] >> shift) & mask]++;
        kb[to] = ka[i];
        vb[to] = va[i];
      }
    } else {
      for (size_t i = 0; i < m; i++) kb[h[(ka[i] >> shift) & mask]++] = ka[i];
    }
    uint64_t *kt = ka;
    uint32_t *vt = va;
    ka = kb, va = vb, kb = kt, vb = vt;
  }
  *k = ka;
  *v = va;
}

/* The tokens that reach a row, sorted by row (see plan): entry j is token
 * tok(j) of row row(j), packed (row << 32 | token) where rows fit in 32 bits,
 * else in two arrays. */
typedef struct sorted_tokens {
  const uint64_t *k;
  const uint32_t *v;
  size_t m;
  int packed;
} sorted_tokens;

static inline uint64_t row_of(const sorted_tokens *st, size_t j) { return st->packed ? st->k[j] >> 32 : st->k[j]; }
static inline size_t token_of(const sorted_tokens *st, size_t j) {
  return st->packed ? (size_t)(uint32_t)st->k[j] : (size_t)st->v[j];
}

/* The rank's request. The tokens that reach a row are sorted by row (a stable
 * radix sort: *st), so each distinct row is found once, in ascending order,
 * which groups them by owner (the shards are ranges of rows) and lets each
 * owner gather them in ascending order. Fills, for the d distinct rows in
 * that order: the send counts (rows per owner), t->buf[CE_MPI_KEYS] their
 * global rows and the ids sent (their rows in the owners' shards,
 * t->buf[CE_MPI_SEND], int32, or int64 when `big`). With `local` (the
 * rank's own forward on the rows received), local[i] receives token i's
 * distinct row (a token that reaches no row keeps its id: a bad id of the
 * table is outside the smaller matrix too) and *pad_local the padding row's
 * place or -1. Without (the host writes the output), the padding row is not
 * asked for, and the tokens that get a zero row (bad, dropped and padding
 * ones) go to t->buf[CE_MPI_VALS] (*nzero of them, int). *bad_at / *bad_id
 * receive the first bad id (CHECK, WRAP past -rows, CLAMP of an empty table).
 * Returns d, or -1 when host memory runs out (recorded on e). */
static long long plan(clembed_mpi_table *t, const int64_t *host, size_t n, clembed_index_policy policy, uint64_t pad,
                      int64_t *local, sorted_tokens *st, size_t *nzero, int64_t *pad_local, int64_t *bad_at,
                      int64_t *bad_id, ce_mpi_error *e, const char *op) {
  int big = t->max_shard > (size_t)INT32_MAX, packed = (uint64_t)t->rows <= (uint64_t)1 << 32, direct = !local;
  uint64_t *k = ce_mpi_buffer(t, CE_MPI_KEYS2, 2 * n * 8 + 16), *rows = ce_mpi_buffer(t, CE_MPI_KEYS, n * 8 + 8);
  uint32_t *v = packed ? NULL : ce_mpi_buffer(t, CE_MPI_VALS2, 2 * n * 4 + 8);
  uint32_t *hist = ce_mpi_buffer(t, CE_MPI_POS, 6 * 2048 * sizeof *hist);
  int *zero = direct ? ce_mpi_buffer(t, CE_MPI_VALS, n * 4 + 4) : NULL;
  void *send = ce_mpi_buffer(t, CE_MPI_SEND, n * 8 + 8);
  int *sc = ce_mpi_send_counts(t);
  memset(sc, 0, (size_t)t->size * sizeof *sc);
  *pad_local = -1;
  *nzero = 0;
  if (!k || !rows || (!packed && !v) || !hist || (direct && !zero) || !send) {
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for %zu ids", op, n);
    return -1;
  }
  /* the tokens that reach a row, in token order */
  size_t m = 0, nz = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t row;
    int r = ce_mpi_resolve(host[i], t->rows, policy, &row);
    if (r == 1 && !(direct && row == pad)) {
      if (packed) {
        k[m++] = row << 32 | (uint64_t)i;
      } else {
        k[m] = row;
        v[m++] = (uint32_t)i;
      }
      continue;
    }
    if (direct) zero[nz++] = (int)i;
    else local[i] = host[i];
    if (r < 0 && *bad_at < 0) {
      *bad_at = (int64_t)i;
      *bad_id = host[i];
    }
  }
  unsigned bits = 0;
  while (bits < 64 && (t->rows - 1) >> bits) bits++;
  uint64_t *ks = k;
  uint32_t *vs = v;
  radix_sort(&ks, &vs, k + n, packed ? NULL : v + n, m, packed ? 32 : 0, bits, hist);
  *st = (sorted_tokens){ks, vs, m, packed};
  *nzero = nz;
  /* the distinct rows */
  size_t d = 0;
  int owner = 0;
  for (size_t j = 0; j < m; j++) {
    uint64_t row = row_of(st, j);
    if (!d || row != rows[d - 1]) {
      while (owner + 1 < t->size && t->bounds[owner + 1] <= row) owner++;
      sc[owner]++;
      size_t in_shard = row - t->bounds[owner];
      if (big) ((int64_t *)send)[d] = (int64_t)in_shard;
      else ((int32_t *)send)[d] = (int32_t)in_shard;
      if (row == pad) *pad_local = (int64_t)d;
      rows[d++] = row;
    }
    if (local) local[token_of(st, j)] = (int64_t)(d - 1);
  }
  return (long long)d;
}

/* The host's copying of the output: in the sorted tokens' order, distinct
 * row q (counted along it) from the rank's own rows (rows q - own_first, for
 * own_count of them, at own) or from `in` (row q, as received), rb bytes
 * each, to its tokens' rows (ld apart; reading along the rows, writing where
 * the tokens lie, with streaming stores where the output's rows allow them:
 * ce_mpi_stream_row), bytes as they lie. `which`: 1 the tokens of the rank's
 * own rows only (with req, the rows' exchange in flight meanwhile: MPI_Test
 * now and then lets it progress), 2 the others only and the zeros to the
 * nzero tokens `zero`, 3 both. */
static void place(const sorted_tokens *st, const int *zero, size_t nzero, size_t own_first, size_t own_count,
                  const char *own, const char *in, size_t rb, char *out, size_t ld, int which, MPI_Request *req) {
  size_t q = 0, placed = 0;
  const int stream = ce_mpi_stream_ok(out, ld, rb); /* streaming stores: the output's lines are not read first */
  for (size_t j = 0; j < st->m; j++) {
    q += (size_t)(j && row_of(st, j) != row_of(st, j - 1));
    int mine = q - own_first < own_count;
    if (!((mine ? 1 : 2) & which)) continue;
    if (req && *req != MPI_REQUEST_NULL && ++placed % CE_MPI_TEST == 0) {
      int done = 0;
      MPI_Test(req, &done, MPI_STATUS_IGNORE); /* a failure shows in the wait */
    }
    char *dst = out + token_of(st, j) * ld;
    const char *src = mine ? own + (q - own_first) * rb : in + q * rb;
    if (stream) {
      ce_mpi_stream_row(dst, src, rb);
    } else {
      if (j + CE_MPI_AHEAD < st->m) ce_mpi_prefetch_write(out + token_of(st, j + CE_MPI_AHEAD) * ld, rb);
      memcpy(dst, src, rb);
    }
  }
  if (stream) ce_mpi_stream_done();
  if (which & 2)
    for (size_t z = 0; z < nzero; z++) memset(out + (size_t)zero[z] * ld, 0, rb);
}

long long ce_mpi_fetch_plan(clembed_mpi_table *t, const char *op, const int64_t *host, size_t n,
                            clembed_index_policy policy, uint64_t pad, int64_t *pad_local, ce_mpi_error *e) {
  int64_t bad_at = -1, bad_id = 0;
  sorted_tokens st = {0};
  size_t nzero = 0;
  int *sc = ce_mpi_send_counts(t);
  memset(sc, 0, (size_t)t->size * sizeof *sc);
  *pad_local = -1;
  int64_t *local = ce_mpi_stage_write(t, CE_MPI_ST_LOCAL, n * 8, e);
  if (!local) return -1;
  return plan(t, host, n, policy, pad, local, &st, &nzero, pad_local, &bad_at, &bad_id, e, op);
}

clembed_status ce_mpi_serve_into(clembed_mpi_table *t, size_t first, size_t count, const clembed_matrix *dst) {
  int big = t->max_shard > (size_t)INT32_MAX;
  clembed_ids sids = ce_mpi_stage_ids(t, CE_MPI_ST_ASKED, count, big ? CLEMBED_I64 : CLEMBED_I32);
  clembed_matrix out = *dst;
  sids.offset = first;
  return count ? clembed_lookup(t->ctx, &t->shard, &sids, &out, 0, NULL, NULL) : CLEMBED_OK;
}

void *ce_mpi_serve_rows(clembed_mpi_table *t, size_t nserve, clembed_dtype wire, ce_mpi_error *serve) {
  clembed_context *ctx = t->ctx;
  size_t rb = clembed_dtype_size(wire) * t->cols;
  ce_mpi_stage_done(t, CE_MPI_ST_ASKED, serve);
  if (serve->status != CLEMBED_OK || !nserve || !rb) return NULL;
  clembed_status s = ce_mpi_stage_reserve(t, CE_MPI_ST_OUT, nserve * rb, serve);
  clembed_matrix gathered = ce_mpi_stage_matrix(t, CE_MPI_ST_OUT, nserve, t->cols, wire);
  if (s == CLEMBED_OK) s = ce_mpi_serve_into(t, 0, nserve, &gathered);
  if (s == CLEMBED_OK) s = clembed_finish(ctx);
  if (s != CLEMBED_OK) {
    if (serve->status == CLEMBED_OK) ce_mpi_fail_from(serve, ctx, s);
    return NULL;
  }
  return ce_mpi_stage_read(t, CE_MPI_ST_OUT, nserve * rb, serve);
}

int ce_mpi_fetch_rows(clembed_mpi_table *t, const char *op, const int64_t *host, size_t n,
                      clembed_index_policy policy, uint64_t pad, char *direct, size_t direct_ld, size_t *d_out,
                      int64_t *pad_local, clembed_dtype *wire_out, ce_mpi_error *e, ce_mpi_error *serve) {
  int big = t->max_shard > (size_t)INT32_MAX, idb = big ? 8 : 4, to_out = direct_ld != 0;
  long long d = 0;
  int64_t *local = NULL, bad_at = -1, bad_id = 0;
  sorted_tokens st = {0};
  size_t nzero = 0;
  *d_out = 0;
  *pad_local = -1;
  *wire_out = clembed_dtype_size(t->dtype) ? t->dtype : CLEMBED_F32;
  /* the request: distinct rows per owner, as indices in the owner's shard; the
   * rank's ids renumbered into them (into the ids of its own forward, or for
   * the host's copying of the output) */
  int *sc = ce_mpi_send_counts(t);
  memset(sc, 0, (size_t)t->size * sizeof *sc);
  if (e->status == CLEMBED_OK && !to_out) local = ce_mpi_stage_write(t, CE_MPI_ST_LOCAL, n * 8, e);
  if (e->status == CLEMBED_OK)
    d = plan(t, host, n, policy, pad, local, &st, &nzero, pad_local, &bad_at, &bad_id, e, op);
  if (d < 0) {
    d = 0;
    memset(sc, 0, (size_t)t->size * sizeof *sc);
  }
  void *send = t->buf[CE_MPI_SEND].p;
  if (!send && !(send = ce_mpi_buffer(t, CE_MPI_SEND, 8))) {
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
    d = 0;
    memset(sc, 0, (size_t)t->size * sizeof *sc);
  }
  long long nserve = ce_mpi_exchange_counts(t, e);
  if (nserve < 0) return 0;
  /* the ids asked of this shard arrive in its ids stage (a host buffer if that
   * fails: the answer must still go) */
  void *asked = ce_mpi_stage_write(t, CE_MPI_ST_ASKED, (size_t)nserve * (size_t)idb, serve);
  if (!asked) asked = ce_mpi_buffer(t, CE_MPI_RECV, (size_t)nserve * 8 + 8);
  if (!asked) {
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for %lld requests", op, nserve);
    return 0;
  }
  if (!ce_mpi_alltoallv(t, send, asked, big ? MPI_INT64_T : MPI_INT32_T, 0, e)) return 0;

  /* serve: the rows asked of this shard, gathered on the device into the out stage */
  clembed_dtype wire = *wire_out;
  size_t rb = clembed_dtype_size(wire) * t->cols;
  void *rows_out = ce_mpi_serve_rows(t, (size_t)nserve, wire, serve), *rows_in = NULL;
  int me = t->rank, *sd = t->counts + 2 * t->size, *rd = t->counts + 3 * t->size;
  if (!rows_out) rows_out = ce_mpi_buffer(t, CE_MPI_SEND2, (size_t)nserve * rb + 1); /* garbage for a failed serve */
  /* the rows come back into the in stage, or (to the output) into host memory,
   * the rank's own rows staying where it gathered them */
  if (e->status == CLEMBED_OK && !to_out) rows_in = ce_mpi_stage_write(t, CE_MPI_ST_IN, (size_t)d * rb, e);
  if (!rows_in) rows_in = ce_mpi_buffer(t, CE_MPI_RECV2, (size_t)d * rb + 1);
  if (!rows_out || !rows_in) {
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for the rows", op);
    return 0;
  }
  /* (to the output: the rank's own rows placed while the others' travel) */
  size_t own_first = (size_t)sd[me], own_count = (size_t)sc[me];
  const char *own = (const char *)rows_out + (size_t)rd[me] * rb;
  MPI_Datatype rowt;
  MPI_Request req;
  int started = ce_mpi_rows_start(t, rows_out, rows_in, rb, 1, to_out, &rowt, &req, e);
  int own_early = started && to_out && rb && e->status == CLEMBED_OK && serve->status == CLEMBED_OK;
  if (own_early) place(&st, NULL, 0, own_first, own_count, own, rows_in, rb, direct, direct_ld, 1, &req);
  if (!ce_mpi_rows_wait(&rowt, &req, e) || !started) return 0;
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
  if (to_out && rb) /* each token's row, from where it arrived (or its own rows, where it gathered them) */
    place(&st, t->buf[CE_MPI_VALS].p, nzero, own_first, own_count, own, rows_in, rb, direct, direct_ld,
          own_early ? 2 : 3, NULL);
  if (to_out && bad_at >= 0) ce_mpi_bad_id(e, op, bad_at, bad_id, policy, t->rows);
  *d_out = (size_t)d;
  return 1;
}

/* The options under which the forward is the rows themselves (as
 * clembed_lookup gives them, which is what the owners send): scale 1, no
 * positions, segments, norm or dropout. */
static int plain(const clembed_embed_options *o) {
  return o->scale == 1.0f && o->positions == CLEMBED_POSITIONS_NONE && !o->sequence_offsets && o->dropout == 0.0f &&
         !o->segment_table && !o->segment_ids && o->norm.kind == CLEMBED_NORM_NONE;
}

clembed_status clembed_mpi_embed(clembed_mpi_table *t, const clembed_ids *ids, const clembed_embed_options *opt,
                                 clembed_matrix *out) {
  const char *op = "clembed_mpi_embed";
  if (!t)
    return ce_mpi_null_handle(op, "t");
  if (t->column) return ce_mpi_refuse_column(t, op);
  clembed_context *ctx = t->ctx;
  ce_mpi_error e = {0}, serve = {0};
  ce_mpi_vote v = {0};
  clembed_embed_options o = clembed_embed_defaults(); /* the caller's, as far as its struct_size goes */
  int read_ok = ce_mpi_read_options(ctx, op, "opt", CLEMBED_STRUCT_EMBED_OPTIONS, opt, &o, sizeof o, &e);
  int pad_bad = 0;
  uint64_t pad = ce_mpi_padding(o.padding_idx, t->rows, &pad_bad);
  /* padding_keeps_row: the padding row is fetched and read as any other (the
   * padding_idx is still checked and agreed) */
  uint64_t pad_fetch = o.padding_keeps_row ? UINT64_MAX : pad;
  size_t n = 0, limit = (size_t)INT_MAX / (size_t)t->size;
  size_t d = 0;
  int64_t *host = NULL, pad_local = -1;

  /* this rank's own arguments */
  if (!read_ok) {
    /* recorded on e */
  } else if (!ids || !out) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, ids ? "out" : "ids", -1, 0, "%s: %s is NULL", op, ids ? "out" : "ids");
  } else if (o.remap) {
    ce_mpi_fail(&e, CLEMBED_ERR_UNSUPPORTED, "remap", -1, 0,
                "%s: remap (a pruned table) is for one device's lookups and bags, not an MPI table's", op);
  } else if ((unsigned)o.policy > (unsigned)CLEMBED_INDEX_WRAP) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "policy", -1, (int64_t)o.policy, "%s: unknown index policy %d", op,
                (int)o.policy);
  } else if (pad_bad) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "padding_idx", -1, o.padding_idx,
                "%s: padding_idx %lld is outside the table of %zu rows", op, (long long)o.padding_idx, t->rows);
  } else if (o.padding_keeps_row != 0 && o.padding_keeps_row != 1) {
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "padding_keeps_row", -1, o.padding_keeps_row,
                "%s: padding_keeps_row is %d; 0 (the padding row counts as zero) or 1 (read as stored)", op,
                o.padding_keeps_row);
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
  ce_mpi_agree_as(&v, "the call", CE_MPI_CALL, CE_MPI_CALL_EMBED);
  ce_mpi_agree_float(&v, "scale", o.scale);
  ce_mpi_agree_as(&v, "policy", CE_MPI_POLICY, (uint64_t)o.policy);
  ce_mpi_agree_as(&v, "padding_idx", CE_MPI_PADDING, pad_bad ? (uint64_t)o.padding_idx : pad);
  ce_mpi_agree(&v, "padding_keeps_row", (uint64_t)(int64_t)o.padding_keeps_row);
  clembed_status voted;
  if (!ce_mpi_forward_vote(t, ctx, op, &v, &e, &voted)) return voted;

  /* With plain options and an output of the rows' dtype in one buffer, the
   * output is the rows themselves: the host writes it, mapped, from the rows
   * as they arrived (and the rank's own rows where it gathered them), with no
   * second pass on the device and no copy of its own rows through MPI. */
  clembed_dtype wire = clembed_dtype_size(t->dtype) ? t->dtype : CLEMBED_F32;
  char *direct = NULL;
  size_t direct_ld = 0;
  if (e.status == CLEMBED_OK && plain(&o) && out->dtype == wire &&
      !ce_mpi_map_matrix(t, out, CL_MAP_WRITE, &direct, &direct_ld))
    direct_ld = 0;
  if (!ce_mpi_fetch_rows(t, op, host, n, o.policy, pad_fetch, direct, direct_ld, &d, &pad_local, &wire, &e, &serve))
    goto done;
  if (direct_ld) goto done;

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
  ce_mpi_unmap_matrix(t, &e);
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
