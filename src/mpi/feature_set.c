/* Sharded feature sets (include/clembed_mpi.h, "Sharded feature sets"): a
 * model's tables, each by its plan, the planner, and the one call per batch
 * for all their features, forward and step.
 *
 * TABLE and COLUMN features ("grouped"): each rank packs, for every owner, its
 * bags of the features that owner holds (feature order): the count of ids,
 * the offsets (bags + 1, from 0), the ids, the weights' bits, in the step also
 * MAX's max_rows (the owner's columns) and, after the features, the rows of
 * its gradient's columns that owner holds (bags x the owner's width, in the
 * gradient's dtype). One MPI_Alltoallv moves them. Each owner concatenates the
 * ranks' bags in rank order and runs one clembed_embedding_bags (or
 * clembed_bags_optimizer_step) for all its grouped features: that is one
 * device's call on the concatenated batch, restricted to those tables (a
 * bag's pooled row depends on its own ids only, a column on that column only,
 * a table's step on its own feature only). In the forward a second
 * MPI_Alltoallv sends each rank the rows of its bags (and MAX's max_rows).
 *
 * ROW and TABLE_ROW features travel in the same two exchanges: at the head of
 * each rank's part of the first (before its grouped bags), and after the
 * pooled rows in the second. A forward makes one MPI_Alltoallv of each, a
 * step one, however many tables the set has. They go through the phases of
 * the single-table calls (embed.c, bag.c, step.c), on each table's own host
 * buffers and stages.
 * - Forward: each rank plans every ROW feature's request (ce_mpi_fetch_plan:
 *   each distinct row once, ascending, so grouped by owner; its ids
 *   renumbered into them) and sends each owner, per feature, the count and
 *   the indices it asks of it. Each owner puts the indices every rank asked of
 *   a table in rank order into the table's asked stage and gathers each
 *   rank's part with clembed_lookup (ce_mpi_serve_into) straight into the
 *   second exchange's send buffer (a device buffer, mapped for the exchange),
 *   its own part into the table's in stage. The rows come back in the second
 *   exchange; each rank puts them into that stage and pools its bags on that
 *   matrix of its distinct rows exactly as clembed_mpi_embedding_bag does
 *   (ce_mpi_bag_pool: the padding row's place as padding_idx, MAX's max_rows
 *   mapped back to the table's rows, a bad id reported against the whole
 *   table), then copies them into out's columns.
 * - Step: each rank forms every ROW feature's contributions on the host from
 *   its gradient as F32 (ce_mpi_bag_contrib_plan, then _fill: the values one
 *   device's bag fold adds, in ascending id position), written per owner in
 *   id order straight into the first exchange (the ones for itself kept
 *   apart). Each owner puts every rank's contributions to a table into its
 *   stages in rank order, so in global id order, and steps it with
 *   clembed_optimizer_step (ce_mpi_step_own), as clembed_mpi_bag_optimizer_step
 *   does.
 * Each ROW part is 8-byte aligned; its counts travel in the first exchange.
 *
 * Every rank knows every plan and every rank's bag count (one
 * MPI_Allgather): with those counts, both ends know every size of the second
 * exchange. A rank's own failure before the exchanges (an argument, host memory)
 * fails the call on every rank in the agreement; one after it (an owner's
 * device or memory while it pools, serves or steps for others) is learnt by
 * every rank in an MPI_Allreduce after the exchanges. A bad id is the result
 * of the rank that passed it only. */
#include "mpi_table.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fs_table {
  clembed_mpi_table *t;
  clembed_shard_kind kind;
  int first, ranks; /* the consecutive ranks holding a part */
  size_t rows, cols, unit;
  clembed_dtype dtype;
  char name[96];
} fs_table;

/* Buffers kept between calls (grown when a call needs more): the exchanges'
 * and the calls' host arrays, and the owner's device arrays. Fresh pages cost
 * a fault each on first touch; a training loop's calls reuse these. */
enum { HB_X1S, HB_X1R, HB_X2S, HB_X2R, HB_FEAT, HB_OFFS, HB_HOST, HB_POOLED, HB_GRAD, HB_GRADF, HB_N };
enum { DB_IDS, DB_OFFS, DB_WTS, DB_MAXR, DB_ROWS, DB_X2S, DB_N };

struct clembed_mpi_feature_set {
  clembed_context *ctx;
  MPI_Comm comm;
  int rank, size;
  size_t n;
  fs_table *tab;
  struct {
    void *p;
    size_t cap;
  } hb[HB_N];
  struct {
    clembed_matrix m; /* bytes / 4 x 1 F32: the context's own buffer (huge pages where it uses them), */
    cl_mem raw;       /* or, where the context would split it, one buffer of the device's */
    size_t cap;
  } db[DB_N];
};

/* Host buffer k of at least `bytes` (its contents not kept when it grows); NULL when memory runs out. */
static void *fs_host(clembed_mpi_feature_set *s, int k, size_t bytes) {
  if (bytes < 8) bytes = 8;
  if (s->hb[k].cap < bytes) {
    free(s->hb[k].p);
    s->hb[k].p = malloc(bytes);
    s->hb[k].cap = s->hb[k].p ? bytes : 0;
  }
  return s->hb[k].p;
}

/* Device buffer k of at least `bytes` on the set's context, one buffer; NULL when it cannot be made. */
static cl_mem fs_dev(clembed_mpi_feature_set *s, int k, size_t bytes) {
  if (bytes < 64) bytes = 64;
  if (s->db[k].cap < bytes) {
    clembed_matrix_release(&s->db[k].m);
    if (s->db[k].raw) clReleaseMemObject(s->db[k].raw);
    s->db[k].raw = NULL;
    s->db[k].cap = 0;
    size_t pieces = 0;
    if (clembed_matrix_create(s->ctx, (bytes + 3) / 4, 1, CLEMBED_F32, &s->db[k].m) != CLEMBED_OK) return NULL;
    if (clembed_matrix_pieces(s->ctx, &s->db[k].m, 0, NULL, NULL, &pieces) != CLEMBED_OK || pieces != 1) {
      clembed_matrix_release(&s->db[k].m); /* (CLEMBED_MAX_BUFFER_BYTES below it): a buffer of the device's */
      cl_context cl = NULL;
      cl_int err = clGetCommandQueueInfo(clembed_context_queue(s->ctx), CL_QUEUE_CONTEXT, sizeof cl, &cl, NULL);
      if (err == CL_SUCCESS) s->db[k].raw = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
      if (err != CL_SUCCESS || !s->db[k].raw) {
        s->db[k].raw = NULL;
        return NULL;
      }
    }
    s->db[k].cap = bytes;
  }
  return s->db[k].raw ? s->db[k].raw : s->db[k].m.buffer;
}

static int grouped(const fs_table *x) { return x->kind == CLEMBED_SHARD_TABLE || x->kind == CLEMBED_SHARD_COLUMN; }

/* Rank d's columns of a grouped table: [*c0, *c0 + *w); 0 wide when it holds none. */
static void block_of(const fs_table *x, int d, size_t *c0, size_t *w) {
  *c0 = 0;
  *w = 0;
  if (d < x->first || d >= x->first + x->ranks) return;
  if (x->kind == CLEMBED_SHARD_TABLE) {
    *w = x->cols;
    return;
  }
  size_t u = x->cols / x->unit, j = (size_t)(d - x->first), k = (size_t)x->ranks;
  size_t a = j * u / k, z = (j + 1) * u / k; /* u < 2^31 / 4: no overflow */
  *c0 = a * x->unit;
  *w = (z - a) * x->unit;
}

static int is_float(clembed_dtype d) { return d == CLEMBED_F32 || d == CLEMBED_F16 || d == CLEMBED_BF16; }
static int rowwise(clembed_dtype d) { return !clembed_dtype_block_values(d); }
static const char *kind_name(clembed_shard_kind k) {
  static const char *const names[] = {"ROW", "TABLE", "COLUMN", "TABLE_ROW", "AUTO"};
  return (unsigned)k <= (unsigned)CLEMBED_SHARD_AUTO ? names[k] : "unknown";
}

/* FNV-1a over bytes, for the agreement on a list of fields. */
static uint64_t mix(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
static uint64_t mix_u(uint64_t h, uint64_t x) { return mix(h, &x, sizeof x); }

/* ------------------------------------------------------------------ planner */

typedef struct plan_in {
  size_t rows, cols, row_bytes;
  clembed_dtype dtype;
  clembed_shard_kind shard;
  int owner;
  double ids, distinct; /* a batch's ids and distinct ids over every rank */
  double bags;          /* the bags they make over every rank (0: not known) */
} plan_in;

/* An exchange's fixed cost (its latency, its host work), as bytes moved. */
#define CE_FS_EXCHANGE 65536.0
/* A byte that crosses to another rank costs this many bytes a device reads:
 * it is copied on the host at both ends and through the transport. */
#define CE_FS_CROSS 2.0

/* Every rank runs this on the same inputs: the same plan everywhere. A rank's
 * cost is bytes per batch (include/clembed_mpi.h, "the planner"): each AUTO
 * table goes whole to a rank (TABLE) when that costs the ranks less in all
 * than cutting it by rows (ROW) and its owner's part is no more than a rank's
 * share of the whole set's cost; the TABLE tables are then placed the largest
 * first, each on the rank whose cost it raises least, within 3/4 of that
 * rank's device memory; a table no rank holds goes by rows (over the least
 * loaded node that holds it where the ranks span several nodes). */
static void plan_tables(const plan_in *in, size_t n, int size, const uint64_t *mem, const int *node, fs_table *out) {
  double *load = calloc((size_t)size, sizeof *load), *store = calloc((size_t)size, sizeof *store);
  double *own = calloc(n + 1, sizeof *own), *other = calloc(n + 1, sizeof *other), *row = calloc(n + 1, sizeof *row);
  double *st = calloc(n + 1, sizeof *st);
  size_t *order = malloc((n + 1) * sizeof *order);
  double bags = 0; /* a batch's bags over every rank: as the samples say, else the fewest ids a sampled table reads */
  for (size_t i = 0; i < n; i++)
    if (in[i].bags > bags) bags = in[i].bags;
  for (size_t i = 0; i < n && bags == 0; i++)
    for (size_t j = 0; j < n; j++)
      if (in[j].ids > 0 && (bags == 0 || in[j].ids < bags)) bags = in[j].ids;
  if (bags == 0) bags = size;
  double S = size, share = 0;
  for (size_t i = 0; i < n; i++) {
    out[i].kind = in[i].shard;
    out[i].first = 0;
    out[i].ranks = size;
  }
  if (!load || !store || !own || !other || !row || !st || !order) { /* no memory to plan with: AUTO by rows */
    for (size_t i = 0; i < n; i++) {
      if (out[i].kind == CLEMBED_SHARD_AUTO) out[i].kind = CLEMBED_SHARD_ROW;
      if (out[i].kind == CLEMBED_SHARD_TABLE) out[i].first = in[i].owner >= 0 ? in[i].owner : 0, out[i].ranks = 1;
      if (out[i].kind == CLEMBED_SHARD_TABLE_ROW) { /* the node of the owner (rank 0's) */
        int a = node[in[i].owner >= 0 ? in[i].owner : 0], z = a;
        while (z + 1 < size && node[z + 1] == a) z++;
        out[i].first = a, out[i].ranks = z - a + 1;
      }
    }
    goto columns;
  }
  for (size_t i = 0; i < n; i++) {
    const plan_in *x = &in[i];
    double I = x->ids > 0 ? x->ids : bags, D = x->distinct > 0 ? x->distinct : I, rb = (double)x->row_bytes;
    double pooled = bags * (double)x->cols * 4.0, cross = CE_FS_CROSS * (S - 1) / S;
    /* TABLE: the owner reads every id's row, takes the others' ids and sends their pooled rows */
    own[i] = I * rb + cross * (I * 8.0 + pooled);
    other[i] = size > 1 ? CE_FS_CROSS * (I * 8.0 + pooled) / S : 0.0;
    /* ROW: each rank serves D/S rows, asks for its distinct rows and pools its own, plus a fixed cost of
     * two exchanges' (the host work of its requests and rows) */
    row[i] = (I / S) * rb + (D / S) * rb + cross * 2.0 * (D / S) * (8.0 + rb) + (size > 1 ? 2.0 * CE_FS_EXCHANGE : 0.0);
    st[i] = (double)x->rows * (rb + 4.0 * (double)x->cols);
    order[i] = i;
    if (x->shard == CLEMBED_SHARD_AUTO)
      out[i].kind = own[i] + (S - 1) * other[i] <= S * row[i] ? CLEMBED_SHARD_TABLE : CLEMBED_SHARD_ROW;
    share += out[i].kind == CLEMBED_SHARD_TABLE ? own[i] + (S - 1) * other[i] : S * row[i];
  }
  share /= S;
  for (size_t i = 0; i < n; i++) /* a table too hot for one rank goes by rows */
    if (in[i].shard == CLEMBED_SHARD_AUTO && out[i].kind == CLEMBED_SHARD_TABLE && size > 1 && own[i] > share)
      out[i].kind = CLEMBED_SHARD_ROW;
  /* the largest owner's part first */
  for (size_t a = 1; a < n; a++)
    for (size_t b = a; b > 0 && own[order[b]] > own[order[b - 1]]; b--) {
      size_t t = order[b];
      order[b] = order[b - 1];
      order[b - 1] = t;
    }
  /* the plans placed already: forced owners, rows */
  for (size_t i = 0; i < n; i++) {
    if (out[i].kind == CLEMBED_SHARD_TABLE && in[i].owner >= 0) {
      out[i].first = in[i].owner;
      out[i].ranks = 1;
      for (int k = 0; k < size; k++) load[k] += k == in[i].owner ? own[i] : other[i];
      store[in[i].owner] += st[i];
    } else if (out[i].kind == CLEMBED_SHARD_ROW) {
      for (int k = 0; k < size; k++) load[k] += row[i], store[k] += st[i] / S;
    }
  }
  for (size_t q = 0; q < n; q++) {
    size_t i = order[q];
    if (out[i].kind == CLEMBED_SHARD_TABLE_ROW) {
      int a = node[in[i].owner >= 0 ? in[i].owner : 0], z = a;
      while (z + 1 < size && node[z + 1] == a) z++;
      out[i].first = a;
      out[i].ranks = z - a + 1;
      for (int k = a; k <= z; k++) load[k] += row[i] * S / out[i].ranks, store[k] += st[i] / out[i].ranks;
      continue;
    }
    if (out[i].kind != CLEMBED_SHARD_TABLE || in[i].owner >= 0) continue;
    int best = -1;
    double best_max = 0;
    for (int r = 0; r < size; r++) {
      if (store[r] + st[i] > 0.75 * (double)mem[r] && in[i].shard == CLEMBED_SHARD_AUTO) continue;
      double m = 0;
      for (int k = 0; k < size; k++) {
        double l = load[k] + (k == r ? own[i] : other[i]);
        if (l > m) m = l;
      }
      if (best < 0 || m < best_max) best = r, best_max = m;
    }
    if (best < 0) { /* no rank holds it whole: by rows, over the least loaded node that holds it if there are several */
      out[i].kind = CLEMBED_SHARD_ROW;
      int nb = -1;
      double nb_load = 0;
      for (int r = 0; r < size; r++) {
        if (node[r] != r) continue; /* a node's first rank */
        int a = r, z = r, count = 0;
        while (z + 1 < size && node[z + 1] == r) z++;
        if (z - a + 1 == size) break; /* one node: ROW is that */
        for (int k = 0; k < size; k++) count += node[k] == r;
        if (count != z - a + 1) continue; /* a node whose ranks are not consecutive in comm */
        int fits = 1;
        double l = 0;
        for (int k = a; k <= z; k++) {
          fits &= store[k] + st[i] / (z - a + 1) <= 0.75 * (double)mem[k];
          if (load[k] > l) l = load[k];
        }
        if (fits && (nb < 0 || l < nb_load)) nb = r, nb_load = l;
      }
      if (nb >= 0) {
        int z = nb;
        while (z + 1 < size && node[z + 1] == nb) z++;
        out[i].kind = CLEMBED_SHARD_TABLE_ROW;
        out[i].first = nb;
        out[i].ranks = z - nb + 1;
        for (int k = nb; k <= z; k++) load[k] += row[i] * S / out[i].ranks, store[k] += st[i] / out[i].ranks;
      } else {
        for (int k = 0; k < size; k++) load[k] += row[i], store[k] += st[i] / S;
      }
      continue;
    }
    out[i].first = best;
    out[i].ranks = 1;
    for (int k = 0; k < size; k++) load[k] += k == best ? own[i] : other[i];
    store[best] += st[i];
  }
columns:
  for (size_t i = 0; i < n; i++)
    if (out[i].kind == CLEMBED_SHARD_COLUMN) {
      size_t u = in[i].cols / (clembed_dtype_block_values(in[i].dtype) ? clembed_dtype_block_values(in[i].dtype) : 1);
      out[i].first = 0;
      out[i].ranks = u < (size_t)size ? (int)(u ? u : 1) : size;
    }
  free(load);
  free(store);
  free(own);
  free(other);
  free(row);
  free(st);
  free(order);
}

/* ------------------------------------------------------------------ create */

static void release_set(clembed_mpi_feature_set *s) {
  if (!s) return;
  for (int k = 0; k < HB_N; k++) free(s->hb[k].p);
  for (int k = 0; k < DB_N; k++) {
    clembed_matrix_release(&s->db[k].m);
    if (s->db[k].raw) clReleaseMemObject(s->db[k].raw);
  }
  for (size_t i = 0; i < s->n; i++) clembed_mpi_table_release(s->tab ? s->tab[i].t : NULL);
  free(s->tab);
  if (s->comm != MPI_COMM_NULL) MPI_Comm_free(&s->comm);
  free(s);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* A sample's ids and distinct ids (0, 0 for none; -1 when it cannot be read). */
static int sample_counts(clembed_context *ctx, const clembed_ids *ids, double *count, double *distinct) {
  *count = *distinct = 0;
  if (!ids || !ids->count) return 0;
  size_t n = ids->count, es = ids->type == CLEMBED_I64 ? 8 : 4;
  void *raw = malloc(n * es);
  int64_t *h = malloc(n * sizeof *h);
  if (!raw || !h || clembed_ids_read(ctx, ids, raw) != CLEMBED_OK) {
    free(raw);
    free(h);
    return -1;
  }
  for (size_t i = 0; i < n; i++) h[i] = es == 8 ? ((int64_t *)raw)[i] : ((int32_t *)raw)[i];
  qsort(h, n, sizeof *h, cmp_i64);
  size_t d = n ? 1 : 0;
  for (size_t i = 1; i < n; i++) d += h[i] != h[i - 1];
  *count = (double)n;
  *distinct = (double)d;
  free(raw);
  free(h);
  return 0;
}

clembed_status clembed_mpi_feature_set_create(clembed_context *ctx, MPI_Comm comm, const clembed_mpi_table_spec *tables,
                                              size_t n, clembed_mpi_feature_set **out) {
  const char *op = "clembed_mpi_feature_set_create";
  ce_mpi_error e = {0};
  ce_mpi_vote v = {0};
  if (out) *out = NULL;
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin)
    return clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, "comm", -1, 0, "%s: MPI is %s", op,
                                fin ? "finalized" : "not initialised (call MPI_Init_thread first)");
  if (comm == MPI_COMM_NULL)
    return clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, "comm", -1, 0, "%s: comm is MPI_COMM_NULL", op);
  MPI_Comm dup = MPI_COMM_NULL;
  if (MPI_Comm_dup(comm, &dup) != MPI_SUCCESS)
    return clembed_context_fail(ctx, CLEMBED_ERR_COMMUNICATION, op, "comm", -1, 0, "%s: MPI_Comm_dup failed", op);
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  clembed_mpi_feature_set *s = calloc(1, sizeof *s);
  if (!s) { /* still in the agreement, so that the others do not wait */
    int rank = 0, size = 1;
    MPI_Comm_rank(dup, &rank);
    MPI_Comm_size(dup, &size);
    ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
    ce_mpi_agree_as(&v, "the call", CE_MPI_CALL, CE_MPI_CALL_FS_CREATE);
    ce_mpi_vote_run(dup, rank, size, &v, 1, &e);
    MPI_Comm_free(&dup);
    return ce_mpi_report(ctx, op, &e);
  }
  s->ctx = ctx;
  s->comm = dup;
  MPI_Comm_rank(s->comm, &s->rank);
  MPI_Comm_size(s->comm, &s->size);
  int size = s->size;

  /* this rank's own checks, and the hash of every spec */
  plan_in *in = calloc(n + 1, sizeof *in);
  uint64_t *h = calloc(2 * n + 2, sizeof *h);
  double *samples = calloc(3 * n + 3, sizeof *samples), *sums = calloc(3 * n + 3, sizeof *sums);
  uint64_t *mem = calloc((size_t)size, sizeof *mem);
  s->tab = calloc(n + 1, sizeof *s->tab);
  int *node = calloc((size_t)size, sizeof *node);
  if (!ctx || !out)
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, ctx ? "s" : "ctx", -1, 0, "%s: %s is NULL", op, ctx ? "s" : "ctx");
  else if (n && !tables)
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "tables", -1, 0, "%s: tables is NULL with n = %zu", op, n);
  else if (!in || !h || !samples || !sums || !mem || !node || !s->tab)
    ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
  else if (n > (size_t)INT32_MAX / 3)
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "n", -1, (int64_t)n, "%s: %zu tables is too many", op, n);
  for (size_t i = 0; i < n && e.status == CLEMBED_OK; i++) {
    const clembed_mpi_table_spec *x = &tables[i];
    size_t bv = clembed_dtype_block_values(x->dtype);
    if (!strcmp(clembed_dtype_name(x->dtype), "unknown"))
      ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "tables", (int64_t)i, (int64_t)x->dtype,
                  "%s: tables[%zu]: unknown dtype %d", op, i, (int)x->dtype);
    else if ((unsigned)x->shard > (unsigned)CLEMBED_SHARD_AUTO)
      ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "tables", (int64_t)i, (int64_t)x->shard,
                  "%s: tables[%zu]: unknown shard kind %d", op, i, (int)x->shard);
    else if (x->owner < -1 || x->owner >= size)
      ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "tables", (int64_t)i, x->owner,
                  "%s: tables[%zu]: owner %d is not a rank of the %d (or -1)", op, i, x->owner, size);
    else if (x->shard == CLEMBED_SHARD_COLUMN && rowwise(x->dtype))
      ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "tables", (int64_t)i, (int64_t)x->dtype,
                  "%s: tables[%zu]: a %s table cannot be cut by columns (a row's scale and bias span them); "
                  "plan it TABLE, ROW or TABLE_ROW", op, i, clembed_dtype_name(x->dtype));
    else if (x->shard == CLEMBED_SHARD_COLUMN && (!x->cols || (bv && x->cols % bv)))
      ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "tables", (int64_t)i, (int64_t)x->cols,
                  "%s: tables[%zu]: %zu cols cannot be cut into blocks of whole %s units", op, i, x->cols,
                  clembed_dtype_name(x->dtype));
    else if (x->name && strlen(x->name) >= sizeof s->tab[0].name)
      ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "tables", (int64_t)i, 0,
                  "%s: tables[%zu]: the name is longer than %zu bytes", op, i, sizeof s->tab[0].name - 1);
    else if (sample_counts(ctx, x->id_sample, &samples[3 * i], &samples[3 * i + 1]) < 0)
      ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "tables", (int64_t)i, 0,
                  "%s: tables[%zu]: its id_sample cannot be read (%s)", op, i, clembed_context_message(ctx));
    if (e.status != CLEMBED_OK) break;
    samples[3 * i + 2] = (double)x->sample_bags;
    in[i].rows = x->rows;
    in[i].cols = x->cols;
    in[i].dtype = x->dtype;
    in[i].row_bytes = clembed_dtype_row_bytes(x->dtype, x->cols);
    in[i].shard = x->shard;
    in[i].owner = x->owner;
    uint64_t hh = 14695981039346656037ull;
    hh = mix_u(hh, x->rows);
    hh = mix_u(hh, x->cols);
    hh = mix_u(hh, (uint64_t)x->dtype);
    hh = mix_u(hh, (uint64_t)x->shard);
    hh = mix_u(hh, (uint64_t)(int64_t)x->owner);
    if (x->name) hh = mix(hh, x->name, strlen(x->name) + 1);
    h[i] = hh;
    h[n + i] = ~hh;
  }
  ce_mpi_agree_as(&v, "the call", CE_MPI_CALL, CE_MPI_CALL_FS_CREATE);
  ce_mpi_agree(&v, "n", (uint64_t)n);
  if (!ce_mpi_vote_run(s->comm, s->rank, size, &v, e.status != CLEMBED_OK, &e) ||
      ce_mpi_vote_outcome(&v, op, &e) != CLEMBED_OK)
    goto fail;
  /* the first table whose spec differs */
  if (!ce_mpi_ok(&e, MPI_Allreduce(MPI_IN_PLACE, h, (int)(2 * n), MPI_UINT64_T, MPI_MAX, s->comm),
                 "MPI_Allreduce (the tables' specs)"))
    goto fail;
  for (size_t i = 0; i < n; i++)
    if (h[i] != ~h[n + i]) {
      ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "tables", (int64_t)i, 0,
                  "%s: the ranks disagree on tables[%zu] (name, rows, cols, dtype, shard or owner); every rank "
                  "passes the same specs", op, i);
      goto fail;
    }
  /* what the planner knows: the samples summed, each rank's memory and node */
  if (!ce_mpi_ok(&e, MPI_Allreduce(samples, sums, (int)(3 * n), MPI_DOUBLE, MPI_SUM, s->comm),
                 "MPI_Allreduce (the id samples)"))
    goto fail;
  {
    cl_device_id dev = NULL;
    cl_ulong bytes = 0;
    cl_command_queue q = clembed_context_queue(ctx);
    if (q && clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL) == CL_SUCCESS)
      clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof bytes, &bytes, NULL);
    uint64_t me = bytes;
    MPI_Comm local;
    int leader = s->rank;
    if (MPI_Comm_split_type(s->comm, MPI_COMM_TYPE_SHARED, s->rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
      int lr = 0;
      MPI_Comm_rank(local, &lr);
      leader = s->rank - lr; /* the node's first rank, when its ranks are consecutive */
      int lowest = s->rank;
      MPI_Allreduce(&s->rank, &lowest, 1, MPI_INT, MPI_MIN, local);
      leader = lowest;
      MPI_Comm_free(&local);
    }
    if (!ce_mpi_ok(&e, MPI_Allgather(&me, 1, MPI_UINT64_T, mem, 1, MPI_UINT64_T, s->comm),
                   "MPI_Allgather (the devices' memory)") ||
        !ce_mpi_ok(&e, MPI_Allgather(&leader, 1, MPI_INT, node, 1, MPI_INT, s->comm), "MPI_Allgather (the nodes)"))
      goto fail;
  }
  for (size_t i = 0; i < n; i++) {
    in[i].ids = sums[3 * i];
    in[i].distinct = sums[3 * i + 1];
    in[i].bags = sums[3 * i + 2];
  }
  plan_tables(in, n, size, mem, node, s->tab);
  /* a forced TABLE_ROW needs its node's ranks consecutive */
  for (size_t i = 0; i < n; i++) {
    fs_table *x = &s->tab[i];
    if (x->kind != CLEMBED_SHARD_TABLE_ROW) continue;
    int count = 0;
    for (int r = 0; r < size; r++) count += node[r] == x->first;
    if (count != x->ranks) {
      ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "tables", (int64_t)i, 0,
                  "%s: tables[%zu]: TABLE_ROW over the node of rank %d, whose ranks are not consecutive ranks of "
                  "comm; plan it ROW, or order the ranks by node", op, i, x->first);
      goto fail;
    }
  }
  /* the tables, each collectively */
  for (size_t i = 0; i < n; i++) {
    fs_table *x = &s->tab[i];
    size_t bv = clembed_dtype_block_values(tables[i].dtype);
    x->rows = tables[i].rows;
    x->cols = tables[i].cols;
    x->dtype = tables[i].dtype;
    x->unit = bv ? bv : 1;
    if (tables[i].name) snprintf(x->name, sizeof x->name, "%s", tables[i].name);
    else snprintf(x->name, sizeof x->name, "table%zu", i);
    ce_mpi_layout lay = {x->first, x->ranks, x->kind == CLEMBED_SHARD_COLUMN, 0, 0};
    block_of(x, s->rank, &lay.col_first, &lay.col_width);
    clembed_status st = ce_mpi_table_create_laid(ctx, s->comm, op, x->rows, x->cols, x->dtype, &lay, &x->t);
    s->n = i + 1; /* released with the set should a later one fail */
    if (st != CLEMBED_OK) {
      char msg[700];
      snprintf(msg, sizeof msg, "%s", clembed_context_message(ctx));
      ce_mpi_fail(&e, st, "tables", (int64_t)i, 0, "%s: tables[%zu] (%s, %s): %s", op, i, x->name, kind_name(x->kind),
                  msg);
      goto fail;
    }
  }
  s->n = n;
  free(in);
  free(h);
  free(samples);
  free(sums);
  free(mem);
  free(node);
  *out = s;
  return CLEMBED_OK;
fail:
  free(in);
  free(h);
  free(samples);
  free(sums);
  free(mem);
  free(node);
  release_set(s);
  return ce_mpi_report(ctx, op, &e);
}

clembed_status clembed_mpi_feature_set_plan(const clembed_mpi_feature_set *s, size_t table, clembed_shard_kind *kind,
                                            int *first_rank, int *ranks) {
  const char *op = "clembed_mpi_feature_set_plan";
  if (!s) return clembed_context_fail(NULL, CLEMBED_ERR_INVALID_ARGUMENT, op, "s", -1, 0, "%s: s is NULL", op);
  if (table >= s->n)
    return clembed_context_fail(s->ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, "table", (int64_t)table, 0,
                                "%s: table %zu; the set has %zu", op, table, s->n);
  if (kind) *kind = s->tab[table].kind;
  if (first_rank) *first_rank = s->tab[table].first;
  if (ranks) *ranks = s->tab[table].ranks;
  return CLEMBED_OK;
}

clembed_mpi_table *clembed_mpi_feature_set_table(clembed_mpi_feature_set *s, size_t table) {
  return s && table < s->n ? s->tab[table].t : NULL;
}

void clembed_mpi_feature_set_release(clembed_mpi_feature_set *s) { release_set(s); }

/* --------------------------------------------------------- the calls' inputs */

typedef struct fs_feat {
  clembed_bag_feature f;
  uint64_t pad;          /* resolved; UINT64_MAX: none */
  int64_t *ids;          /* grouped features: the rank's ids (in the arena, or mapped) */
  void *map;             /* the ids mapped (map_mem), unmapped by call_release */
  cl_mem map_mem;
  int64_t *offsets;      /* every feature: bags + 1, from 0 */
  float *weights;
  int64_t *max_rows;     /* the step's MAX (bags x cols), the forward's MAX output (grouped) */
  size_t nids;
  int64_t bad_at, bad_id; /* the first bad id (-1: none) */
} fs_feat;

/* A ROW or TABLE_ROW feature's part of a call. Its table keeps the rest:
 * t->counts (this rank's counts per owner and their displacements, what each
 * rank sends this owner and theirs), t->buf[CE_MPI_SEND] the indices in the
 * owners' shards, t->buf[CE_MPI_KEYS] (forward) the distinct rows, and its
 * stages. */
typedef struct fs_row {
  long long m;           /* forward: the distinct rows asked; step: the contributions */
  int64_t pad_local;     /* forward: the padding row's place among them, or -1 */
  clembed_dtype wire;    /* the rows' dtype on the wire (step: F32) */
  size_t rb;             /* a row's bytes on the wire */
  int idb;               /* an index's bytes (int32, int64 past 2^31 rows a shard) */
  ce_mpi_bag_inputs in;  /* step: the feature's inputs on the host */
  float *rows;           /* step: the contributions this rank steps itself (cols F32 each) */
} fs_row;

typedef struct fs_call {
  const char *op;
  clembed_mpi_feature_set *s;
  fs_feat *F;
  size_t bags, width;    /* this rank's bags; the sum of the tables' cols */
  size_t *coff;          /* each feature's first column in out / grad_out */
  uint64_t *B;           /* every rank's bags */
  fs_row *R;             /* the ROW and TABLE_ROW features' parts (n) */
  const char **from;     /* where rank r's part of ROW feature i starts in the first exchange (n x size) */
  size_t *lead_r;        /* the ROW features' bytes at the head of each rank's part of the first exchange */
  size_t *tail_s, *tail_r; /* the grouped features' bytes before the ROW rows in each part of the second */
  size_t *lead_at;       /* (scratch: a place in each rank's part) */
  char **ids_to;         /* (scratch: where each owner's indices and rows go) */
  float **rows_to;
  ce_mpi_error e;
} fs_call;

/* The caller's ids mapped by read_features handed back (before any write to a caller's buffer). */
static void unmap_ids(fs_call *c) {
  int unmapped = 0;
  for (size_t i = 0; c->F && i < c->s->n; i++)
    if (c->F[i].map) {
      clEnqueueUnmapMemObject(clembed_context_queue(c->s->ctx), c->F[i].map_mem, c->F[i].map, 0, NULL, NULL);
      c->F[i].map = NULL;
      c->F[i].ids = NULL;
      unmapped = 1;
    }
  if (unmapped) clFinish(clembed_context_queue(c->s->ctx));
}

static void call_release(fs_call *c) { /* (the features' arrays are the set's arena) */
  unmap_ids(c);
  for (size_t i = 0; c->R && i < c->s->n; i++) {
    ce_mpi_error ignored = {0};
    if (c->s->tab[i].kind == CLEMBED_SHARD_ROW || c->s->tab[i].kind == CLEMBED_SHARD_TABLE_ROW)
      for (int k = 0; k < CE_MPI_NSTAGE; k++) ce_mpi_stage_done(c->s->tab[i].t, k, &ignored);
  }
  free(c->R);
  free(c->from);
  free(c->lead_r);
  free(c->ids_to);
  free(c->rows_to);
  free(c->F);
  free(c->coff);
  free(c->B);
}

static int read_i64(clembed_context *ctx, const clembed_ids *ids, int64_t *h, ce_mpi_error *e) {
  return ce_mpi_read_ids_ctx(ctx, ids, h, e) == CLEMBED_OK;
}

/* Reads and checks this rank's features (and for a step, max_rows); the
 * failure on c->e. grad: the step's gradient, or NULL. */
static void read_features(fs_call *c, const clembed_bag_feature *features, size_t n, size_t bags, int step) {
  clembed_mpi_feature_set *s = c->s;
  clembed_context *ctx = s->ctx;
  const char *op = c->op;
  ce_mpi_error *e = &c->e;
  c->bags = bags;
  if (n != s->n) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "n", -1, (int64_t)n, "%s: n = %zu features; the set has %zu tables",
                op, n, s->n);
    return;
  }
  if (n && !features) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "features", -1, 0, "%s: features is NULL", op);
    return;
  }
  c->F = calloc(n + 1, sizeof *c->F);
  c->coff = calloc(n + 1, sizeof *c->coff);
  if (!c->F || !c->coff) {
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
    return;
  }
  size_t stride = n ? features[0].struct_size : 0, limit = (size_t)INT_MAX / 16 / (size_t)s->size;
  for (size_t i = 0; i < n; i++) {
    fs_feat *x = &c->F[i];
    const fs_table *tb = &s->tab[i];
    x->bad_at = -1;
    c->coff[i] = c->width;
    c->width += tb->cols;
    x->f = clembed_bag_feature_defaults();
    if (e->status != CLEMBED_OK) continue;
    const void *el = (const char *)features + i * stride;
    clembed_status st = clembed_struct_read(ctx, op, "features", CLEMBED_STRUCT_BAG_FEATURE, el, &x->f);
    if (st != CLEMBED_OK) {
      ce_mpi_fail_from(e, ctx, st);
      continue;
    }
    const clembed_bag_options *o = &x->f.options;
    int pad_bad = 0;
    x->pad = ce_mpi_padding(o->padding_idx, tb->rows, &pad_bad);
    const clembed_ids *ids = x->f.ids, *off = x->f.offsets;
    const clembed_matrix *w = o->per_sample_weights;
    char dt[32];
    if (!ids)
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "ids", (int64_t)i, 0, "%s: features[%zu].ids is NULL", op, i);
    else if (o->remap)
      ce_mpi_fail(e, CLEMBED_ERR_UNSUPPORTED, "remap", (int64_t)i, 0,
                  "%s: features[%zu]: remap (a pruned table) is for one device's bags, not a feature set's", op, i);
    else if ((unsigned)o->mode > (unsigned)CLEMBED_BAG_MAX)
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "mode", (int64_t)i, (int64_t)o->mode,
                  "%s: features[%zu]: unknown bag mode %d", op, i, (int)o->mode);
    else if ((unsigned)o->policy > (unsigned)CLEMBED_INDEX_WRAP)
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "policy", (int64_t)i, (int64_t)o->policy,
                  "%s: features[%zu]: unknown index policy %d", op, i, (int)o->policy);
    else if (pad_bad)
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "padding_idx", (int64_t)i, o->padding_idx,
                  "%s: features[%zu]: padding_idx %lld is outside the table of %zu rows", op, i,
                  (long long)o->padding_idx, tb->rows);
    else if (off && off->count != bags + 1)
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "offsets", (int64_t)i, (int64_t)off->count,
                  "%s: features[%zu].offsets has %zu entries; %zu bags need %zu", op, i, off->count, bags, bags + 1);
    else if (!off && (bags ? ids->count % bags != 0 : ids->count != 0))
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "ids", (int64_t)i, (int64_t)ids->count,
                  "%s: features[%zu]: %zu ids do not make %zu bags of one size", op, i, ids->count, bags);
    else if (w && o->mode != CLEMBED_BAG_SUM)
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "per_sample_weights", (int64_t)i, (int64_t)o->mode,
                  "%s: features[%zu]: per_sample_weights are for mode SUM only, not %s", op, i,
                  ce_mpi_mode_text(o->mode, dt, sizeof dt));
    else if (w && (w->dtype != CLEMBED_F32 || w->rows != ids->count || w->cols != 1))
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "per_sample_weights", (int64_t)i, (int64_t)w->rows,
                  "%s: features[%zu]: per_sample_weights must be F32 %zu x 1 (it is %s, %zu x %zu)", op, i,
                  ids->count, ce_mpi_dtype_text(w->dtype, dt, sizeof dt), w->rows, w->cols);
    else if (o->max_rows && o->mode != CLEMBED_BAG_MAX)
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "max_rows", (int64_t)i, (int64_t)o->mode,
                  "%s: features[%zu]: max_rows is for mode MAX only, not %s", op, i,
                  ce_mpi_mode_text(o->mode, dt, sizeof dt));
    else if (o->max_rows && o->max_rows->count != bags * tb->cols)
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "max_rows", (int64_t)i, (int64_t)o->max_rows->count,
                  "%s: features[%zu]: max_rows holds %zu ids; %zu bags x %zu cols need %zu", op, i,
                  o->max_rows->count, bags, tb->cols, bags * tb->cols);
    else if (o->max_rows && o->max_rows->type == CLEMBED_I32 && tb->rows > (size_t)INT32_MAX)
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "max_rows", (int64_t)i, 0,
                  "%s: features[%zu]: max_rows is I32 but the table has %zu rows (I64 needed)", op, i, tb->rows);
    else if (step && o->mode == CLEMBED_BAG_MAX && !o->max_rows)
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "max_rows", (int64_t)i, 0,
                  "%s: features[%zu]: MAX needs max_rows (the forward's) of %zu bags x %zu cols", op, i, bags,
                  tb->cols);
    else if (ids->count > limit)
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "ids", (int64_t)i, (int64_t)ids->count,
                  "%s: features[%zu]: %zu ids; at most %zu per rank and call with %d ranks (MPI counts are int)", op,
                  i, ids->count, limit, s->size);
    if (e->status != CLEMBED_OK) continue;
    x->nids = ids->count;
  }
  if (e->status != CLEMBED_OK) return;
  /* one arena for every feature's host arrays (the set keeps it between calls) */
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    const fs_feat *x = &c->F[i];
    int g = grouped(&s->tab[i]);
    total += (bags + 1) * 8;
    if (g) total += x->nids * 8;
    if (x->f.options.per_sample_weights && (g || step)) total += (x->nids * 4 + 7) / 8 * 8;
    if (step && x->f.options.mode == CLEMBED_BAG_MAX) total += bags * s->tab[i].cols * 8;
  }
  char *arena = fs_host(s, HB_FEAT, total);
  if (!arena) {
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
    return;
  }
  for (size_t i = 0; i < n && e->status == CLEMBED_OK; i++) {
    fs_feat *x = &c->F[i];
    const fs_table *tb = &s->tab[i];
    const clembed_bag_options *o = &x->f.options;
    const clembed_ids *ids = x->f.ids, *off = x->f.offsets;
    const clembed_matrix *w = o->per_sample_weights;
    clembed_status st;
    size_t nids = x->nids;
    /* the offsets (every feature: a bad one is the rank's own failure), the ids and weights (grouped ones) */
    x->offsets = (int64_t *)arena;
    arena += (bags + 1) * 8;
    if (off) {
      if (!read_i64(ctx, off, x->offsets, e)) continue;
      int64_t nn = (int64_t)nids;
      if (x->offsets[0] != 0 || (bags == 0 && nn != 0)) {
        ce_mpi_fail(e, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "offsets", 0, x->offsets[0],
                    "%s: features[%zu].offsets[0] = %lld; it must be 0%s", op, i, (long long)x->offsets[0],
                    bags ? "" : " and the number of ids");
        continue;
      }
      for (size_t b = 0; b < bags; b++) {
        int64_t a = x->offsets[b], z = x->offsets[b + 1];
        if (z < a || z > nn || (b + 1 == bags && z != nn)) {
          ce_mpi_fail(e, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "offsets", (int64_t)(b + 1), z,
                      "%s: features[%zu].offsets[%zu] = %lld (after %lld, of %zu ids): offsets must rise from 0 to "
                      "the number of ids", op, i, b + 1, (long long)z, (long long)a, nids);
          break;
        }
      }
      if (e->status != CLEMBED_OK) continue;
    } else {
      for (size_t b = 0; b <= bags; b++) x->offsets[b] = (int64_t)(b * (bags ? nids / bags : 0));
    }
    if (!grouped(tb)) { /* a ROW feature's ids in its table's buffer (the calls of bag.c read them there) */
      x->ids = ce_mpi_buffer(tb->t, CE_MPI_IDS, nids * 8 + 8);
      if (!x->ids) {
        ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for %zu ids", op, nids);
        continue;
      }
      if (!read_i64(ctx, ids, x->ids, e) || !step) continue; /* (its bad ids: found where its rows are used) */
    } else {
      x->ids = (int64_t *)arena;
      arena += nids * 8;
    }
    if (w) {
      x->weights = (float *)arena;
      arena += (nids * 4 + 7) / 8 * 8;
    }
    if (grouped(tb) && ids->type == CLEMBED_I64 && nids) { /* mapped where the device allows: no copy where it shares host memory */
      cl_int err = CL_SUCCESS;
      void *m = clEnqueueMapBuffer(clembed_context_queue(ctx), ids->buffer, CL_TRUE, CL_MAP_READ, ids->offset * 8,
                                   nids * 8, 0, NULL, NULL, &err);
      if (err == CL_SUCCESS && m) {
        x->map = m;
        x->map_mem = ids->buffer;
        x->ids = m;
      }
    }
    if (grouped(tb) && !x->map && !read_i64(ctx, ids, x->ids, e)) continue;
    if (w && nids) {
      st = clembed_matrix_read(ctx, w, x->weights, CLEMBED_F32);
      if (st != CLEMBED_OK) {
        ce_mpi_fail_from(e, ctx, st);
        continue;
      }
    }
    if (step && o->mode == CLEMBED_BAG_MAX) {
      x->max_rows = (int64_t *)arena;
      arena += bags * tb->cols * 8;
      if (!read_i64(ctx, o->max_rows, x->max_rows, e)) continue;
    }
    if (!grouped(tb)) continue;
    /* the first bad id: a pass that only looks for ids outside [0, rows) (vectorised), then each such id resolved */
    int any = 0;
    const uint64_t R = (uint64_t)tb->rows;
    if (o->policy != CLEMBED_INDEX_ZERO)
      for (size_t j = 0; j < nids; j++) any |= (uint64_t)x->ids[j] >= R;
    for (size_t j = 0; any && j < nids; j++) {
      uint64_t r;
      if ((uint64_t)x->ids[j] >= R && ce_mpi_resolve(x->ids[j], tb->rows, o->policy, &r) < 0) {
        x->bad_at = (int64_t)j;
        x->bad_id = x->ids[j];
        break;
      }
    }
  }
}

/* A caller's buffer holds `elems` elements of `es` bytes from `offset` on, in
 * the set's cl_context: else the rank's own failure, naming it. */
static void check_extent(fs_call *c, cl_mem m, size_t offset, size_t elems, size_t es, const char *name) {
  size_t size = 0;
  cl_context mine = NULL, theirs = NULL;
  if (!elems) return;
  clGetCommandQueueInfo(clembed_context_queue(c->s->ctx), CL_QUEUE_CONTEXT, sizeof mine, &mine, NULL);
  if (!m || clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof size, &size, NULL) != CL_SUCCESS ||
      clGetMemObjectInfo(m, CL_MEM_CONTEXT, sizeof theirs, &theirs, NULL) != CL_SUCCESS)
    ce_mpi_fail(&c->e, CLEMBED_ERR_INVALID_ARGUMENT, name, -1, 0, "%s: %s's buffer is not a valid cl_mem", c->op, name);
  else if (theirs != mine)
    ce_mpi_fail(&c->e, CLEMBED_ERR_INVALID_ARGUMENT, name, -1, 0, "%s: %s's buffer belongs to another cl_context",
                c->op, name);
  else if (offset > size / es || elems > size / es - offset)
    ce_mpi_fail(&c->e, CLEMBED_ERR_INVALID_ARGUMENT, name, -1, (int64_t)size,
                "%s: %s reaches past its buffer of %zu bytes", c->op, name, size);
}

/* The checks of an output matrix before any exchange (clembed_matrix_pieces's:
 * its buffer, its extent, its pieces). */
static void check_matrix(fs_call *c, const clembed_matrix *m) {
  size_t pieces = 0;
  clembed_status st = clembed_matrix_pieces(c->s->ctx, m, 0, NULL, NULL, &pieces);
  if (st != CLEMBED_OK) ce_mpi_fail_from(&c->e, c->s->ctx, st);
}

/* The agreement of a call: the call, n, a dtype and every feature's agreed
 * options (and for a step, every optimizer). A failure on c->e. */
static int agree(fs_call *c, int call, clembed_dtype dtype, const clembed_optimizer *o, const char *dtype_name) {
  clembed_mpi_feature_set *s = c->s;
  ce_mpi_vote v = {0};
  int ok = c->e.status == CLEMBED_OK;
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; ok && i < s->n; i++) {
    const clembed_bag_options *b = &c->F[i].f.options;
    h = mix_u(h, (uint64_t)b->mode);
    h = mix_u(h, (uint64_t)b->policy);
    h = mix_u(h, c->F[i].pad);
    h = mix_u(h, (uint64_t)(b->per_sample_weights != NULL));
    h = mix_u(h, (uint64_t)(b->max_rows != NULL));
  }
  uint64_t ho = 14695981039346656037ull;
  for (size_t i = 0; ok && o && i < s->n; i++) {
    const clembed_optimizer *x = &o[i];
    ho = mix_u(ho, (uint64_t)x->kind);
    ho = mix(ho, &x->learning_rate, sizeof x->learning_rate);
    ho = mix(ho, &x->eps, sizeof x->eps);
    ho = mix(ho, &x->beta1, sizeof x->beta1);
    ho = mix(ho, &x->beta2, sizeof x->beta2);
    ho = mix(ho, &x->weight_decay, sizeof x->weight_decay);
    ho = mix_u(ho, x->step);
    ho = mix_u(ho, (uint64_t)(int64_t)x->stochastic_rounding);
    ho = mix_u(ho, x->seed);
    ho = mix_u(ho, x->first_row);
  }
  ce_mpi_agree_as(&v, "the call", CE_MPI_CALL, (uint64_t)call);
  ce_mpi_agree(&v, "n", ok ? (uint64_t)s->n : 0);
  ce_mpi_agree_as(&v, dtype_name, CE_MPI_DTYPE, ok ? (uint64_t)dtype : 0);
  ce_mpi_agree(&v, "the features' mode, policy, padding_idx, per_sample_weights and max_rows", ok ? h : 0);
  if (o) ce_mpi_agree(&v, "the optimizers' fields", ok ? ho : 0);
  if (!ce_mpi_vote_run(s->comm, s->rank, s->size, &v, !ok, &c->e)) return 0;
  return ce_mpi_vote_outcome(&v, c->op, &c->e) == CLEMBED_OK;
}

/* --------------------------------------------------------------- exchanges */

/* Bytes of a rank's bags of grouped feature i for an owner in the first
 * exchange (without MAX's max_rows and the gradient rows of a step). */
static size_t feat_bytes(const fs_call *c, size_t i, uint64_t bags, size_t nids) {
  const fs_feat *x = &c->F[i];
  size_t b = 8 + (size_t)(bags + 1) * 8 + nids * 8;
  if (x->f.options.per_sample_weights) b += (nids * 4 + 7) / 8 * 8;
  return b;
}

typedef struct fs_x { /* one MPI_Alltoallv of bytes, its buffers the set's host buffers ks and kr */
  int *sc, *sd, *rc, *rd;
  char *send, *recv;
  int ks, kr;
} fs_x;

static void x_release(fs_x *x) {
  free(x->sc);
  memset(x, 0, sizeof *x);
}

static int x_alloc(fs_x *x, int size, int ks, int kr) {
  x->sc = calloc(4 * (size_t)size, sizeof *x->sc);
  if (!x->sc) return 0;
  x->sd = x->sc + size;
  x->rc = x->sd + size;
  x->rd = x->rc + size;
  x->ks = ks;
  x->kr = kr;
  return 1;
}

/* Displacements from the counts, and the buffers; 0 when a total passes
 * INT_MAX or memory runs out. */
static int x_displace(fs_x *x, clembed_mpi_feature_set *s) {
  long long a = 0, b = 0;
  for (int r = 0; r < s->size; r++) {
    x->sd[r] = (int)a;
    x->rd[r] = (int)b;
    a += x->sc[r];
    b += x->rc[r];
    if (a > INT_MAX || b > INT_MAX) return 0;
  }
  x->send = fs_host(s, x->ks, (size_t)a);
  x->recv = fs_host(s, x->kr, (size_t)b);
  return x->send && x->recv;
}

/* ------------------------------------------- the ROW and TABLE_ROW features */

static int by_rows(const fs_table *x) { return !grouped(x); }
static size_t pad8(size_t b) { return (b + 7) / 8 * 8; }

/* Displacements from counts in a ROW feature's table: this rank's counts per
 * owner (t->counts[0, size)) or what each rank sends it ([size, 2 size)). */
static void row_displace(clembed_mpi_table *t, int received) {
  int n = t->size, *cnt = t->counts + (received ? n : 0), *at = t->counts + (received ? 3 : 2) * n;
  long long a = 0;
  for (int k = 0; k < n; k++) {
    at[k] = (int)a;
    a += cnt[k];
  }
}

static long long row_total(const clembed_mpi_table *t, int received) {
  long long a = 0;
  for (int k = 0; k < t->size; k++) a += t->counts[(received ? t->size : 0) + k];
  return a;
}

/* This rank's part of every ROW feature, made before the agreement (so that a
 * failure here stops every rank before anything moves): in the forward its
 * requests (ce_mpi_fetch_plan: each distinct row once, per owner), in the
 * step which of its ids contribute to which owner's rows
 * (ce_mpi_bag_contrib_plan; the gradient as F32, bags x width, read at the
 * fill) and room for the contributions it steps itself. */
static void rows_plan(fs_call *c, int step, const float *grad) {
  clembed_mpi_feature_set *s = c->s;
  for (size_t i = 0; i < s->n && c->e.status == CLEMBED_OK; i++) {
    if (!by_rows(&s->tab[i])) continue;
    clembed_mpi_table *t = s->tab[i].t;
    fs_row *R = &c->R[i];
    fs_feat *x = &c->F[i];
    R->idb = t->max_shard > (size_t)INT32_MAX ? 8 : 4;
    if (!step) {
      R->wire = clembed_dtype_size(t->dtype) ? t->dtype : CLEMBED_F32;
      R->rb = clembed_dtype_size(R->wire) * t->cols;
      R->m = ce_mpi_fetch_plan(t, c->op, x->ids, x->nids, x->f.options.policy, x->pad, &R->pad_local, &c->e);
    } else {
      R->wire = CLEMBED_F32;
      R->rb = t->cols * sizeof(float);
      R->in = (ce_mpi_bag_inputs){x->ids, x->offsets, x->max_rows, grad + c->coff[i], x->weights,
                                  x->nids, c->bags, c->width};
      R->m = ce_mpi_buffer(t, CE_MPI_SEND, x->nids * 8 + 8)
                 ? ce_mpi_bag_contrib_plan(t, &R->in, &x->f.options, x->pad, &x->bad_at, &x->bad_id)
                 : -1;
      /* (the contributions the rank steps itself: kept here; the others' written into the exchange) */
      if (R->m >= 0 && !(R->rows = ce_mpi_buffer(t, CE_MPI_SEND2, ((size_t)t->counts[s->rank] * t->cols + 1) * 4)))
        R->m = -1;
      if (R->m < 0)
        ce_mpi_fail(&c->e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for %zu ids", c->op,
                    x->nids);
    }
    if (R->m < 0) {
      R->m = 0;
      memset(t->counts, 0, (size_t)t->size * sizeof *t->counts);
    }
    row_displace(t, 0);
  }
}

/* The bytes of this rank's ROW features for rank d at the head of its part
 * of the first exchange (none for itself: read where they lie): per feature,
 * the count (int64), the indices in d's shards (8-byte aligned), in the step
 * their contribution rows (F32, 8-byte aligned). */
static size_t rows_lead(const fs_call *c, int d, int step) {
  size_t bytes = 0;
  if (d == c->s->rank) return 0;
  for (size_t i = 0; i < c->s->n; i++) {
    if (!by_rows(&c->s->tab[i])) continue;
    size_t m = (size_t)c->s->tab[i].t->counts[d];
    bytes += 8 + pad8(m * (size_t)c->R[i].idb) + (step ? pad8(m * c->R[i].rb) : 0);
  }
  return bytes;
}

/* The ROW features' parts of the first exchange (see rows_lead), for every
 * rank but this one, in x's send buffer: the requests (forward); the
 * contributions, written there as they are made (step: the ones this rank
 * steps itself into R->rows and the table's send buffer). */
static void rows_fill(fs_call *c, const fs_x *x, int step) {
  clembed_mpi_feature_set *s = c->s;
  int size = s->size, me = s->rank;
  for (int d = 0; d < size; d++) c->lead_at[d] = 0;
  for (size_t i = 0; i < s->n; i++) {
    if (!by_rows(&s->tab[i])) continue;
    clembed_mpi_table *t = s->tab[i].t;
    fs_row *R = &c->R[i];
    char *own_ids = t->buf[CE_MPI_SEND].p;
    for (int d = 0; d < size; d++) {
      size_t m = (size_t)t->counts[d], ib = m * (size_t)R->idb, rb = m * R->rb;
      if (d == me) {
        c->ids_to[d] = own_ids + (size_t)t->counts[2 * size + d] * (size_t)R->idb;
        c->rows_to[d] = R->rows;
        continue;
      }
      char *p = x->send + x->sd[d] + c->lead_at[d];
      int64_t mm = (int64_t)m;
      memcpy(p, &mm, 8);
      c->ids_to[d] = p + 8;
      if (!step && ib) memcpy(p + 8, own_ids + (size_t)t->counts[2 * size + d] * (size_t)R->idb, ib);
      memset(p + 8 + ib, 0, pad8(ib) - ib);
      if (step) {
        c->rows_to[d] = (float *)(void *)(p + 8 + pad8(ib));
        memset(p + 8 + pad8(ib) + rb, 0, pad8(rb) - rb);
      }
      c->lead_at[d] += 8 + pad8(ib) + (step ? pad8(rb) : 0);
    }
    if (step) ce_mpi_bag_contrib_fill(t, &R->in, &c->F[i].f.options, R->m, c->ids_to, c->rows_to);
  }
}

/* After the first exchange: what each rank sends this rank of every ROW
 * feature (the counts into t->counts, where its indices lie into c->from),
 * and the bytes of the ROW features at the head of each rank's part. */
static void rows_parse(fs_call *c, const fs_x *x, int step) {
  clembed_mpi_feature_set *s = c->s;
  int size = s->size, me = s->rank;
  for (int r = 0; r < size; r++) {
    const char *p = x->recv + x->rd[r], *start = p;
    for (size_t i = 0; i < s->n; i++) {
      if (!by_rows(&s->tab[i])) continue;
      clembed_mpi_table *t = s->tab[i].t;
      if (r == me) {
        t->counts[size + me] = t->counts[me];
        continue;
      }
      int64_t m;
      memcpy(&m, p, 8);
      t->counts[size + r] = (int)m;
      c->from[i * (size_t)size + (size_t)r] = p + 8;
      p += 8 + pad8((size_t)m * (size_t)c->R[i].idb) + (step ? pad8((size_t)m * c->R[i].rb) : 0);
    }
    c->lead_r[r] = (size_t)(p - start);
  }
  for (size_t i = 0; i < s->n; i++)
    if (by_rows(&s->tab[i])) row_displace(s->tab[i].t, 1);
}

/* Where rank r's part of ROW feature i begins: its indices, then (step) its rows. */
static const char *rows_from(const fs_call *c, size_t i, int r, int rows) {
  const clembed_mpi_table *t = c->s->tab[i].t;
  const fs_row *R = &c->R[i];
  size_t m = (size_t)t->counts[t->size + r];
  if (r == c->s->rank) {
    size_t at = (size_t)t->counts[2 * t->size + r];
    return rows ? (const char *)R->rows : (const char *)t->buf[CE_MPI_SEND].p + at * (size_t)R->idb;
  }
  const char *p = c->from[i * (size_t)c->s->size + (size_t)r];
  return rows ? p + pad8(m * (size_t)R->idb) : p;
}

/* The owner's side: every rank's part of ROW feature i, in rank order, into
 * its table's asked stage (the indices) and, with rows, its in stage (the
 * contribution rows). The stages stay mapped. 0 on a failure (on own). */
static int rows_gather(fs_call *c, size_t i, int rows, ce_mpi_error *own) {
  clembed_mpi_table *t = c->s->tab[i].t;
  const fs_row *R = &c->R[i];
  size_t total = (size_t)row_total(t, 1), idb = (size_t)R->idb;
  char *ids = ce_mpi_stage_write(t, CE_MPI_ST_ASKED, total * idb, own);
  char *in = ids && rows ? ce_mpi_stage_write(t, CE_MPI_ST_IN, total * R->rb, own) : NULL;
  if (!ids || (rows && !in)) return 0;
  for (int r = 0; r < c->s->size; r++) {
    size_t m = (size_t)t->counts[t->size + r], at = (size_t)t->counts[3 * t->size + r];
    if (!m) continue;
    memcpy(ids + at * idb, rows_from(c, i, r, 0), m * idb);
    if (rows && R->rb) memcpy(in + at * R->rb, rows_from(c, i, r, 1), m * R->rb);
  }
  return 1;
}

/* The bytes of the ROW features' rows in the second exchange, after the
 * grouped features' (each feature's 8-byte aligned): what this rank serves
 * rank r (send) or asked of it (receive); none with itself. */
static size_t rows_back(const fs_call *c, int r, int received) {
  size_t bytes = 0;
  if (r == c->s->rank) return 0;
  for (size_t i = 0; i < c->s->n; i++)
    if (by_rows(&c->s->tab[i]))
      bytes += pad8((size_t)c->s->tab[i].t->counts[(received ? 0 : c->s->size) + r] * c->R[i].rb);
  return bytes;
}

/* Forward, the owner's side: the rows every rank asked of this shard of each
 * ROW feature (its indices gathered in rank order into the asked stage),
 * gathered on the device by clembed_lookup (ce_mpi_serve_into) straight into
 * the second exchange's send buffer xs (the device's buffer, where rank r's
 * part lies at x2->sd[r]); the ones this rank asked itself are gathered
 * later, where it pools (rows_pool). A failure on serve (every rank learns it
 * before any row is used). */
static void rows_serve(fs_call *c, const fs_x *x2, cl_mem xs, ce_mpi_error *serve) {
  clembed_mpi_feature_set *s = c->s;
  int size = s->size, me = s->rank, any = 0;
  clembed_status st = CLEMBED_OK;
  for (int r = 0; r < size; r++) c->lead_at[r] = c->tail_s[r];
  for (size_t i = 0; i < s->n && serve->status == CLEMBED_OK && st == CLEMBED_OK; i++) {
    if (!by_rows(&s->tab[i])) continue;
    clembed_mpi_table *t = s->tab[i].t;
    const fs_row *R = &c->R[i];
    size_t es = clembed_dtype_size(R->wire);
    if (!rows_gather(c, i, 0, serve) || ce_mpi_stage_done(t, CE_MPI_ST_ASKED, serve) != CLEMBED_OK) break;
    any = 1;
    for (int r = 0; r < size && st == CLEMBED_OK; r++) {
      size_t m = (size_t)t->counts[size + r];
      clembed_matrix dst = {0};
      if (r == me) continue; /* (its own: gathered where it pools them, rows_pool) */
      dst.buffer = xs;
      dst.offset = ((size_t)x2->sd[r] + c->lead_at[r]) / es;
      dst.rows = m;
      dst.cols = t->cols;
      dst.dtype = R->wire;
      c->lead_at[r] += pad8(m * R->rb);
      if (m && R->rb) st = ce_mpi_serve_into(t, (size_t)t->counts[3 * size + r], m, &dst);
    }
  }
  if (st == CLEMBED_OK && any && serve->status == CLEMBED_OK) st = clembed_finish(s->ctx);
  if (st != CLEMBED_OK) ce_mpi_fail_from(serve, s->ctx, st);
}

/* Forward, the rank's own side of ROW feature i: the rows it asked of itself
 * gathered on its device into its table's in stage (ce_mpi_serve_into, from
 * its part of the asked stage), the rows it asked of the other ranks put
 * there as they arrived, and its bags pooled on them into tmp as
 * clembed_mpi_embedding_bag pools them (ce_mpi_bag_pool). A bad id is kept
 * as the feature's. */
static void rows_pool(fs_call *c, const fs_x *x2, size_t i, clembed_matrix *tmp, ce_mpi_error *mine) {
  clembed_mpi_feature_set *s = c->s;
  clembed_mpi_table *t = s->tab[i].t;
  fs_row *R = &c->R[i];
  fs_feat *x = &c->F[i];
  int size = s->size, me = s->rank;
  size_t own = (size_t)t->counts[me];
  if (ce_mpi_stage_reserve(t, CE_MPI_ST_IN, (size_t)R->m * R->rb, mine) != CLEMBED_OK) return;
  if (own && R->rb) {
    clembed_matrix dst = ce_mpi_stage_matrix(t, CE_MPI_ST_IN, own, t->cols, R->wire);
    dst.offset = (size_t)t->counts[2 * size + me] * t->cols;
    clembed_status st = ce_mpi_serve_into(t, (size_t)t->counts[3 * size + me], own, &dst);
    if (st != CLEMBED_OK) {
      ce_mpi_fail_from(mine, s->ctx, st);
      return;
    }
  }
  char *in = ce_mpi_stage_update(t, CE_MPI_ST_IN, (size_t)R->m * R->rb, mine); /* (after the gather: in order) */
  if (!in) return;
  for (int o = 0; o < size && R->rb; o++) {
    size_t m = (size_t)t->counts[o], at = (size_t)t->counts[2 * size + o];
    if (!m || o == me) continue;
    const char *src = x2->recv + x2->rd[o] + c->tail_r[o];
    for (size_t j = 0; j < i; j++)
      if (by_rows(&s->tab[j])) src += pad8((size_t)s->tab[j].t->counts[o] * c->R[j].rb);
    memcpy(in + at * R->rb, src, m * R->rb);
  }
  ce_mpi_bag_pool(t, c->op, &x->f.options, x->f.offsets, (size_t)R->m, x->nids, R->wire, R->pad_local, tmp, mine);
  if (mine->status == CLEMBED_ERR_INDEX_OUT_OF_RANGE && !strcmp(mine->argument, "ids")) {
    x->bad_at = mine->index;
    x->bad_id = mine->value;
    memset(mine, 0, sizeof *mine);
  }
}

/* Step, the owner's side: every rank's contributions to this shard of each
 * ROW feature, in rank order (so in global id order), stepped by
 * ce_mpi_step_own (clembed_optimizer_step, scale 1, no frequency scaling, as
 * the bag step). A failure on own. */
static void rows_step(fs_call *c, const clembed_optimizer *o, ce_mpi_error *own) {
  clembed_mpi_feature_set *s = c->s;
  clembed_backward_options b = clembed_backward_defaults();
  for (size_t i = 0; i < s->n && own->status == CLEMBED_OK; i++) {
    if (!by_rows(&s->tab[i])) continue;
    if (!rows_gather(c, i, 1, own)) break;
    ce_mpi_step_own(s->tab[i].t, &o[i], &b, (size_t)row_total(s->tab[i].t, 1), CLEMBED_F32, own);
  }
}

/* The rank's own grouped bags, packed for every owner (step: with MAX's
 * max_rows of the owner's block and the gradient rows of its columns, from
 * grad: bags x width values of es bytes). Returns 0 on failure (on c->e). */
static int pack_bags(fs_call *c, fs_x *x, int step, const char *grad, size_t es) {
  clembed_mpi_feature_set *s = c->s;
  int size = s->size;
  size_t B = c->bags;
  for (int d = 0; d < size; d++) {
    long long bytes = 0;
    size_t W = 0;
    for (size_t i = 0; i < s->n; i++) {
      size_t c0, w;
      block_of(&s->tab[i], d, &c0, &w);
      if (!grouped(&s->tab[i]) || !w) continue;
      bytes += (long long)feat_bytes(c, i, B, c->F[i].nids);
      if (step && c->F[i].f.options.mode == CLEMBED_BAG_MAX) bytes += (long long)(B * w * 8);
      W += w;
    }
    if (step) bytes += (long long)(B * W * es);
    if (!step && d == s->rank) bytes = 0; /* the forward's own bags are read where they lie (unpack_bags) */
    bytes = (bytes + 7) / 8 * 8 + (long long)rows_lead(c, d, step); /* (each part 8-byte aligned) */
    if (bytes > INT_MAX) {
      ce_mpi_fail(&c->e, CLEMBED_ERR_INVALID_ARGUMENT, "ids", -1, bytes,
                  "%s: this rank's bags for rank %d take %lld bytes, more than one MPI exchange moves (INT_MAX); "
                  "pass fewer bags a call", c->op, d, bytes);
      return 0;
    }
    x->sc[d] = (int)bytes;
  }
  return 1;
}

static void pack_fill(fs_call *c, fs_x *x, int step, const char *grad, size_t es) {
  clembed_mpi_feature_set *s = c->s;
  size_t B = c->bags;
  for (int d = 0; d < s->size; d++) {
    if (!step && d == s->rank) continue; /* (see pack_bags) */
    char *p = x->send + x->sd[d] + rows_lead(c, d, step); /* (after the ROW features': rows_fill) */
    for (size_t i = 0; i < s->n; i++) {
      size_t c0, w;
      const fs_feat *f = &c->F[i];
      block_of(&s->tab[i], d, &c0, &w);
      if (!grouped(&s->tab[i]) || !w) continue;
      int64_t m = (int64_t)f->nids;
      memcpy(p, &m, 8);
      p += 8;
      memcpy(p, f->offsets, (B + 1) * 8);
      p += (B + 1) * 8;
      memcpy(p, f->ids, f->nids * 8);
      p += f->nids * 8;
      if (f->f.options.per_sample_weights) {
        memcpy(p, f->weights, f->nids * 4);
        p += (f->nids * 4 + 7) / 8 * 8;
      }
      if (step && f->f.options.mode == CLEMBED_BAG_MAX)
        for (size_t b = 0; b < B; b++, p += w * 8) memcpy(p, f->max_rows + b * s->tab[i].cols + c0, w * 8);
    }
    if (step)
      for (size_t b = 0; b < B; b++)
        for (size_t i = 0; i < s->n; i++) {
          size_t c0, w;
          block_of(&s->tab[i], d, &c0, &w);
          if (!grouped(&s->tab[i]) || !w) continue;
          memcpy(p, grad + (b * c->width + c->coff[i] + c0) * es, w * es);
          p += w * es;
        }
  }
}

static int alltoall_counts(fs_call *c, fs_x *x) {
  return ce_mpi_ok(&c->e, MPI_Alltoall(x->sc, 1, MPI_INT, x->rc, 1, MPI_INT, c->s->comm), "MPI_Alltoall (counts)");
}

static int alltoallv(fs_call *c, fs_x *x) {
  return ce_mpi_ok(&c->e, MPI_Alltoallv(x->send, x->sc, x->sd, MPI_BYTE, x->recv, x->rc, x->rd, MPI_BYTE, c->s->comm),
                   "MPI_Alltoallv (the features' bags)");
}

/* The owner's side: the ranks' bags of its grouped features concatenated in
 * rank order, as device ids and matrices for one clembed call. */
typedef struct fs_local {
  size_t k;                  /* the owned grouped features */
  size_t *feat;              /* their indices */
  clembed_bag_feature *lf;
  clembed_ids *ids, *offs, *maxr; /* views of the set's device arrays */
  clembed_matrix *wts;
  clembed_matrix rows;       /* total x W: the pooled rows (forward), the gradient's (step) */
  size_t total, W;           /* bags over the ranks; the owner's width */
  size_t *bstart;            /* each rank's first bag */
} fs_local;

static void local_release(fs_local *L) {
  free(L->feat);
  free(L->lf);
  free(L->ids);
  free(L->offs);
  free(L->maxr);
  free(L->wts);
  free(L->bstart);
  memset(L, 0, sizeof *L);
}

/* Unpacks what the owner received (x->recv) into the set's device arrays:
 * each rank's ids, weights, MAX's max_rows (step) and gradient rows (step)
 * written from where they arrived, the offsets rebased on the host, for one
 * call over the ranks' bags concatenated in rank order (the writes done when
 * this returns). L->rows is total x W of `dtype` (the step's gradient is in
 * it). 0 on failure (on own). */
static int unpack_bags(fs_call *c, fs_x *x, int step, clembed_dtype dtype, fs_local *L, ce_mpi_error *own) {
  clembed_mpi_feature_set *s = c->s;
  int size = s->size, me = s->rank;
  const char *op = c->op;
  size_t es = clembed_dtype_row_bytes(dtype, 1);
  cl_command_queue q = clembed_context_queue(s->ctx);
  memset(L, 0, sizeof *L);
  L->bstart = calloc((size_t)size + 1, sizeof *L->bstart);
  L->feat = calloc(s->n + 1, sizeof *L->feat);
  if (!L->bstart || !L->feat) goto oom;
  for (int r = 0; r < size; r++) L->bstart[r + 1] = L->bstart[r] + (size_t)c->B[r];
  L->total = L->bstart[size];
  for (size_t i = 0; i < s->n; i++) {
    size_t c0, w;
    block_of(&s->tab[i], me, &c0, &w);
    if (grouped(&s->tab[i]) && w) {
      L->feat[L->k++] = i;
      L->W += w;
    }
  }
  if (!L->k) return 1;
  size_t k = L->k, T = L->total;
  L->lf = calloc(k, sizeof *L->lf);
  L->ids = calloc(k, sizeof *L->ids);
  L->offs = calloc(k, sizeof *L->offs);
  L->maxr = calloc(k, sizeof *L->maxr);
  L->wts = calloc(k, sizeof *L->wts);
  /* per feature: where each rank's part starts in its stream; its ids' count */
  const char **at = calloc((size_t)size * k + 1, sizeof *at), **grad_at = calloc((size_t)size + 1, sizeof *grad_at);
  size_t *nid = calloc(k + 1, sizeof *nid);
  if (!L->lf || !L->ids || !L->offs || !L->maxr || !L->wts || !at || !nid || !grad_at) {
    free(at);
    free(grad_at);
    free(nid);
    goto oom;
  }
  for (int r = 0; r < size; r++) {
    const char *p = x->recv + x->rd[r] + c->lead_r[r]; /* (after the ROW features') */
    if (!step && r == me) { /* the forward's own bags: read where they lie */
      for (size_t j = 0; j < k; j++) nid[j] += c->F[L->feat[j]].nids;
      continue;
    }
    for (size_t j = 0; j < k; j++) {
      size_t i = L->feat[j], c0, w;
      block_of(&s->tab[i], me, &c0, &w);
      at[(size_t)r * k + j] = p;
      int64_t m;
      memcpy(&m, p, 8);
      nid[j] += (size_t)m;
      p += 8 + (size_t)(c->B[r] + 1) * 8 + (size_t)m * 8;
      if (c->F[i].f.options.per_sample_weights) p += ((size_t)m * 4 + 7) / 8 * 8;
      if (step && c->F[i].f.options.mode == CLEMBED_BAG_MAX) p += (size_t)c->B[r] * w * 8;
    }
    grad_at[r] = p;
  }
  /* the arrays: every feature's part of each, one after another */
  size_t n_ids = 0, n_wts = 0, n_mr = 0;
  for (size_t j = 0; j < k; j++) {
    size_t i = L->feat[j], c0, w;
    block_of(&s->tab[i], me, &c0, &w);
    n_ids += nid[j];
    if (c->F[i].f.options.per_sample_weights) n_wts += nid[j];
    if (c->F[i].f.options.mode == CLEMBED_BAG_MAX) n_mr += T * w;
  }
  cl_mem d_ids = fs_dev(s, DB_IDS, n_ids * 8), d_offs = fs_dev(s, DB_OFFS, k * (T + 1) * 8);
  cl_mem d_wts = fs_dev(s, DB_WTS, n_wts * 4), d_mr = fs_dev(s, DB_MAXR, n_mr * 8);
  cl_mem d_rows = fs_dev(s, DB_ROWS, T * L->W * es);
  int64_t *offs = fs_host(s, HB_OFFS, k * (T + 1) * 8);
  cl_int err = CL_SUCCESS;
  if (!d_ids || !d_offs || !d_wts || !d_mr || !d_rows || !offs) {
    free(at);
    free(grad_at);
    free(nid);
    ce_mpi_fail(own, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of device or host memory for the ranks' bags", op);
    return 0;
  }
  L->rows = (clembed_matrix){d_rows, 0, T, L->W, 0, dtype};
  size_t o_ids = 0, o_wts = 0, o_mr = 0;
  for (size_t j = 0; j < k && err == CL_SUCCESS; j++) {
    size_t i = L->feat[j], c0, w, N = nid[j];
    block_of(&s->tab[i], me, &c0, &w);
    const clembed_bag_options *o = &c->F[i].f.options;
    int is_max = o->mode == CLEMBED_BAG_MAX, wt = o->per_sample_weights != NULL;
    int64_t *of = offs + j * (T + 1);
    size_t qn = 0, b0 = 0;
    of[0] = 0;
    for (int r = 0; r < size && err == CL_SUCCESS; r++) {
      const char *p = at[(size_t)r * k + j];
      const fs_feat *f = &c->F[i];
      int self = !step && r == me;
      int64_t m = (int64_t)f->nids;
      if (!self) {
        memcpy(&m, p, 8);
        p += 8;
      }
      size_t Br = (size_t)c->B[r];
      const char *po = self ? (const char *)f->offsets : p; /* this rank's offsets, from 0 */
      for (size_t b = 1; b <= Br; b++) {
        int64_t v;
        memcpy(&v, po + b * 8, 8);
        of[b0 + b] = (int64_t)qn + v;
      }
      if (!self) p += (Br + 1) * 8;
      const void *pi = self ? (const void *)f->ids : p;
      if (m) err = clEnqueueWriteBuffer(q, d_ids, CL_FALSE, (o_ids + qn) * 8, (size_t)m * 8, pi, 0, NULL, NULL);
      if (!self) p += (size_t)m * 8;
      if (wt) {
        const void *pw = self ? (const void *)f->weights : p;
        if (m && err == CL_SUCCESS)
          err = clEnqueueWriteBuffer(q, d_wts, CL_FALSE, (o_wts + qn) * 4, (size_t)m * 4, pw, 0, NULL, NULL);
        if (!self) p += ((size_t)m * 4 + 7) / 8 * 8;
      }
      if (step && is_max && Br && w && err == CL_SUCCESS)
        err = clEnqueueWriteBuffer(q, d_mr, CL_FALSE, (o_mr + b0 * w) * 8, Br * w * 8, p, 0, NULL, NULL);
      qn += (size_t)m;
      b0 += Br;
    }
    if (err == CL_SUCCESS)
      err = clEnqueueWriteBuffer(q, d_offs, CL_FALSE, j * (T + 1) * 8, (T + 1) * 8, of, 0, NULL, NULL);
    L->ids[j] = (clembed_ids){d_ids, o_ids, N, CLEMBED_I64};
    L->offs[j] = (clembed_ids){d_offs, j * (T + 1), T + 1, CLEMBED_I64};
    L->maxr[j] = (clembed_ids){d_mr, o_mr, is_max ? T * w : 0, CLEMBED_I64};
    L->wts[j] = (clembed_matrix){d_wts, o_wts, N, 1, 0, CLEMBED_F32};
    clembed_bag_feature *lf = &L->lf[j];
    *lf = clembed_bag_feature_defaults();
    lf->table = &s->tab[i].t->shard;
    lf->ids = &L->ids[j];
    lf->offsets = &L->offs[j];
    lf->options = clembed_bag_defaults();
    lf->options.mode = o->mode;
    lf->options.policy = o->policy;
    lf->options.padding_idx = c->F[i].pad == UINT64_MAX ? CLEMBED_NO_PADDING : (int64_t)c->F[i].pad;
    lf->options.per_sample_weights = wt ? &L->wts[j] : NULL;
    lf->options.max_rows = is_max ? &L->maxr[j] : NULL;
    o_ids += N;
    if (wt) o_wts += N;
    if (is_max) o_mr += T * w;
  }
  /* the step's gradient rows, rank after rank */
  for (int r = 0; step && r < size && err == CL_SUCCESS; r++)
    if (c->B[r] && L->W)
      err = clEnqueueWriteBuffer(q, d_rows, CL_FALSE, L->bstart[r] * L->W * es, (size_t)c->B[r] * L->W * es,
                                 grad_at[r], 0, NULL, NULL);
  cl_int fin = clFinish(q); /* the writes read the receive buffer and the offsets */
  if (err == CL_SUCCESS) err = fin;
  free(at);
  free(grad_at);
  free(nid);
  if (err != CL_SUCCESS) {
    ce_mpi_fail(own, (clembed_status)err, "", -1, err, "%s: writing the ranks' bags to the device: %s", op,
                clembed_status_string((clembed_status)err));
    return 0;
  }
  return 1;
oom:
  ce_mpi_fail(own, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for the ranks' bags", op);
  return 0;
}

/* An owner's call done: its deferred report of a bad id (which the rank that
 * passed the id reports itself) is not a failure of the owner's. */
static clembed_status owner_outcome(clembed_context *ctx, clembed_status st) {
  if (st == CLEMBED_OK) st = clembed_finish(ctx);
  clembed_error_detail det;
  if (st == CLEMBED_ERR_INDEX_OUT_OF_RANGE && clembed_context_error(ctx, &det) == CLEMBED_OK &&
      !strcmp(det.argument, "ids"))
    return CLEMBED_OK;
  return st;
}

/* The first bad id of the rank's grouped features (found on the host) on
 * c->e; a ROW feature's comes from its pooling (rows_pool) or its step's
 * contributions (ce_mpi_bag_contrib_plan). */
static void report_bad(fs_call *c) {
  for (size_t i = 0; i < c->s->n; i++) {
    const fs_feat *x = &c->F[i];
    if (x->bad_at < 0) continue;
    const fs_table *t = &c->s->tab[i];
    int wrap = x->f.options.policy == CLEMBED_INDEX_WRAP;
    ce_mpi_fail(&c->e, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "ids", x->bad_at, x->bad_id,
                "%s: features[%zu].ids[%lld] = %lld is outside [%s%zu, %zu) (table %s)", c->op, i,
                (long long)x->bad_at, (long long)x->bad_id, wrap ? "-" : "", wrap ? t->rows : 0, t->rows, t->name);
    return;
  }
}

/* The failure of an owner's device (pooling, stepping or serving rows): every rank learns it. */
static void share_failure(fs_call *c, ce_mpi_error *own, const char *what) {
  clembed_status theirs = CLEMBED_OK;
  int first = ce_mpi_first_failed(c->s->comm, c->s->rank, c->s->size, own->status, &c->e, &theirs);
  if (own->status != CLEMBED_OK && c->e.status == CLEMBED_OK) c->e = *own;
  if (first >= 0 && c->e.status == CLEMBED_OK)
    ce_mpi_fail(&c->e, theirs, "", first, 0, "%s: rank %d could not %s (its context's message says why)", c->op, first,
                what);
}

/* Every rank learns whether any failed at this point (one MPI_Allreduce);
 * 1 when none did. */
static int all_well(fs_call *c, ce_mpi_error *own, const char *what) {
  share_failure(c, own, what);
  return c->e.status == CLEMBED_OK;
}

/* The columns of the grouped features this rank holds (from the plans). */
static size_t owned_width(const clembed_mpi_feature_set *s, int d) {
  size_t W = 0;
  for (size_t i = 0; i < s->n; i++) {
    size_t c0, w;
    block_of(&s->tab[i], d, &c0, &w);
    if (grouped(&s->tab[i])) W += w;
  }
  return W;
}

/* An earlier call's pending error is this rank's answer (own failure). */
static void pending_error(fs_call *c) {
  if (c->e.status != CLEMBED_OK) return;
  clembed_status st = clembed_finish(c->s->ctx);
  if (st != CLEMBED_OK) ce_mpi_fail_from(&c->e, c->s->ctx, st);
}

static int setup(fs_call *c, clembed_mpi_feature_set *s, const char *op) {
  memset(c, 0, sizeof *c);
  c->op = op;
  c->s = s;
  size_t size = (size_t)s->size;
  c->B = calloc(size + 1, sizeof *c->B);
  c->R = calloc(s->n + 1, sizeof *c->R);
  c->from = calloc(s->n * size + 1, sizeof *c->from);
  c->lead_r = calloc(4 * size, sizeof *c->lead_r);
  c->ids_to = calloc(size, sizeof *c->ids_to);
  c->rows_to = calloc(size, sizeof *c->rows_to);
  if (!c->B || !c->R || !c->from || !c->lead_r || !c->ids_to || !c->rows_to) {
    ce_mpi_fail(&c->e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
    return 1;
  }
  c->tail_s = c->lead_r + size;
  c->tail_r = c->tail_s + size;
  c->lead_at = c->tail_r + size;
  return 1;
}

static int gather_bags(fs_call *c) {
  uint64_t mine = c->bags;
  return ce_mpi_ok(&c->e, MPI_Allgather(&mine, 1, MPI_UINT64_T, c->B, 1, MPI_UINT64_T, c->s->comm),
                   "MPI_Allgather (the ranks' bags)");
}

/* The first exchange: every rank's bag count learnt, the packed bags (see
 * pack_fill) to their owners. 1 on success; 0 on every rank alike otherwise. */
static int send_bags(fs_call *c, fs_x *x, int step, const char *grad, size_t es) {
  if (!gather_bags(c) || !alltoall_counts(c, x)) return 0;
  ce_mpi_error mem = {0};
  if (!x_displace(x, c->s))
    ce_mpi_fail(&mem, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory for the exchange", c->op);
  if (!all_well(c, &mem, "allocate the exchange")) return 0;
  pack_fill(c, x, step, grad, es);
  rows_fill(c, x, step);
  if (!alltoallv(c, x)) return 0;
  rows_parse(c, x, step);
  return 1;
}

/* ------------------------------------------------------------------ forward */

clembed_status clembed_mpi_embedding_bags(clembed_mpi_feature_set *s, const clembed_bag_feature *features, size_t n,
                                          clembed_matrix *out) {
  const char *op = "clembed_mpi_embedding_bags";
  if (!s)
    return ce_mpi_null_handle(op, "s");
  clembed_context *ctx = s->ctx;
  fs_call c;
  setup(&c, s, op);
  fs_x x1 = {0}, x2 = {0};
  fs_local L = {0};
  ce_mpi_error own = {0}, serve = {0};
  char *host = NULL, *pooled = NULL;
  void *mapped = NULL; /* the owner's pooled rows, mapped for the exchange */
  cl_mem mapped_mem = NULL;
  int64_t **maxr = NULL;
  size_t es = 0;
  char dt[32];
  if (!out) ce_mpi_fail(&c.e, CLEMBED_ERR_INVALID_ARGUMENT, "out", -1, 0, "%s: out is NULL", op);
  else if (!is_float(out->dtype))
    ce_mpi_fail(&c.e, CLEMBED_ERR_INVALID_ARGUMENT, "out", -1, (int64_t)out->dtype,
                "%s: out must be F32, F16 or BF16 (it is %s)", op, ce_mpi_dtype_text(out->dtype, dt, sizeof dt));
  pending_error(&c);
  if (c.e.status == CLEMBED_OK) read_features(&c, features, n, out->rows, 0);
  if (c.e.status == CLEMBED_OK && out->cols != c.width)
    ce_mpi_fail(&c.e, CLEMBED_ERR_INVALID_ARGUMENT, "out", -1, (int64_t)out->cols,
                "%s: out has %zu cols; the set's tables have %zu together", op, out->cols, c.width);
  if (c.e.status == CLEMBED_OK) check_matrix(&c, out);
  for (size_t i = 0; i < s->n && c.e.status == CLEMBED_OK; i++) { /* the outputs written after the exchanges */
    const clembed_ids *mr = c.F[i].f.options.max_rows;
    const clembed_matrix *w = c.F[i].f.options.per_sample_weights;
    if (mr) check_extent(&c, mr->buffer, mr->offset, mr->count, mr->type == CLEMBED_I64 ? 8 : 4, "max_rows");
    /* a ROW feature's weights are read by its own pooling, after them */
    if (w && !grouped(&s->tab[i]) && c.e.status == CLEMBED_OK) check_matrix(&c, w);
  }
  if (c.e.status == CLEMBED_OK) {
    es = clembed_dtype_row_bytes(out->dtype, 1);
    maxr = calloc(s->n + 1, sizeof *maxr);
    if (!maxr || !x_alloc(&x1, s->size, HB_X1S, HB_X1R) || !x_alloc(&x2, s->size, HB_X2S, HB_X2R))
      ce_mpi_fail(&c.e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
  }
  if (c.e.status == CLEMBED_OK) rows_plan(&c, 0, NULL);
  if (c.e.status == CLEMBED_OK) pack_bags(&c, &x1, 0, NULL, 0);
  if (!agree(&c, CE_MPI_CALL_FS_BAGS, out ? out->dtype : CLEMBED_F32, NULL, "out's dtype")) goto done;

  /* the grouped features: bags to their owners, pooled there, rows back */
  if (!send_bags(&c, &x1, 0, NULL, 0)) goto done;
  /* the second exchange's sizes, from the plans (both ends know them): to rank
   * r its bags' rows of every owned feature, then MAX's max_rows, then (8-byte
   * aligned) the rows r asked of this rank's shard of each ROW feature */
  size_t Wme = owned_width(s, s->rank), row_bytes = 0;
  int owns_max = 0, any_rows = 0;
  cl_mem xs = NULL; /* with ROW rows to send: the send buffer, the device's (they are gathered into it) */
  size_t xs_bytes = 0; /* ...its size: every rank's part, this rank's own included */
  for (size_t i = 0; i < s->n; i++) any_rows |= by_rows(&s->tab[i]);
  {
    for (int r = 0; r < s->size; r++) {
      size_t Br = (size_t)c.B[r], bytes = Br * Wme * es, rb = 0;
      for (size_t i = 0; i < s->n; i++) {
        size_t c0, w, w2;
        int is_max = c.F[i].f.options.mode == CLEMBED_BAG_MAX;
        block_of(&s->tab[i], s->rank, &c0, &w);
        block_of(&s->tab[i], r, &c0, &w2);
        if (!grouped(&s->tab[i])) continue;
        if (is_max && w) owns_max = 1, bytes += Br * w * 8;
        rb += c.bags * w2 * es + (is_max ? c.bags * w2 * 8 : 0);
      }
      if (any_rows) bytes = pad8(bytes), rb = pad8(rb); /* then the ROW features' rows, 8-byte aligned */
      c.tail_s[r] = bytes;
      c.tail_r[r] = rb;
      bytes += rows_back(&c, r, 0);
      rb += rows_back(&c, r, 1);
      x2.sc[r] = bytes > INT_MAX ? -1 : (int)bytes;
      x2.rc[r] = rb > INT_MAX ? -1 : (int)rb;
    }
    ce_mpi_error mem = {0};
    int fits = 1;
    for (int r = 0; r < s->size; r++) fits &= x2.sc[r] >= 0 && x2.rc[r] >= 0;
    if (!fits || !x_displace(&x2, s))
      ce_mpi_fail(&mem, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0,
                  "%s: the pooled rows of a call pass what one MPI exchange moves (INT_MAX bytes) or host memory", op);
    for (int r = 0; r < s->size; r++) row_bytes += rows_back(&c, r, 0);
    if (mem.status == CLEMBED_OK && row_bytes &&
        !(xs = fs_dev(s, DB_X2S, xs_bytes = (size_t)x2.sd[s->size - 1] + (size_t)x2.sc[s->size - 1])))
      ce_mpi_fail(&mem, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of device memory for the rows asked of it", op);
    if (!all_well(&c, &mem, "allocate the exchange of the pooled rows")) goto done;
    /* this rank's own bags' rows stay where they are (read from the send buffer below) */
    x2.sc[s->rank] = x2.rc[s->rank] = 0;
  }
  /* the rows asked of this rank's shards of the ROW features, gathered */
  rows_serve(&c, &x2, xs, &serve);
  /* the owner's one call; without MAX (and without ROW features) its rows,
   * rank after rank, are the send buffer as it lies, read there straight */
  int in_place = 0;
  int unpacked = unpack_bags(&c, &x1, 0, out->dtype, &L, &own);
  unmap_ids(&c); /* the ids are on the device now: before any write to the caller's buffers */
  if (unpacked && L.k && L.total) {
    clembed_matrix lo = L.rows;
    clembed_status st = owner_outcome(ctx, clembed_embedding_bags(ctx, L.lf, L.k, &lo, 0, NULL, NULL));
    if (st == CLEMBED_OK && !owns_max && !any_rows) { /* mapped: MPI sends them from where the device wrote them */
      cl_int err = CL_SUCCESS;
      void *m = clEnqueueMapBuffer(clembed_context_queue(ctx), lo.buffer, CL_TRUE, CL_MAP_READ, 0,
                                   L.total * L.W * es, 0, NULL, NULL, &err);
      if (err == CL_SUCCESS && m) {
        mapped = m;
        mapped_mem = lo.buffer;
        x2.send = m;
        in_place = 1;
      } else {
        st = clembed_matrix_read(ctx, &lo, x2.send, out->dtype);
        in_place = st == CLEMBED_OK;
      }
    } else if (st == CLEMBED_OK) {
      pooled = fs_host(s, HB_POOLED, L.total * L.W * es);
      st = pooled ? clembed_matrix_read(ctx, &lo, pooled, out->dtype)
                  : clembed_context_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, op, "", -1, 0, "%s: out of host memory", op);
    }
    for (size_t j = 0; j < L.k && st == CLEMBED_OK; j++) {
      size_t i = L.feat[j];
      if (c.F[i].f.options.mode != CLEMBED_BAG_MAX) continue;
      maxr[i] = malloc(L.maxr[j].count * 8 + 8);
      st = maxr[i] ? clembed_ids_read(ctx, &L.maxr[j], maxr[i])
                   : clembed_context_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, op, "", -1, 0, "%s: out of host memory", op);
    }
    if (st != CLEMBED_OK) ce_mpi_fail_from(&own, ctx, st);
  }
  if (xs) { /* the send buffer is where the ROW rows were gathered: the grouped rows written into it */
    cl_int err = CL_SUCCESS;
    /* (the whole buffer: x2.sc of this rank is 0 by now, but its own part is read and written) */
    void *m = clEnqueueMapBuffer(clembed_context_queue(ctx), xs, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, xs_bytes, 0,
                                 NULL, NULL, &err);
    if (err == CL_SUCCESS && m) {
      mapped = m;
      mapped_mem = xs;
      x2.send = m;
    } else { /* (the host's buffer goes instead; every rank learns it) */
      if (err == CL_SUCCESS) err = CL_MAP_FAILURE;
      ce_mpi_fail(&serve, (clembed_status)err, "", -1, err, "%s: mapping the rows asked of it: %s", op,
                  clembed_status_string((clembed_status)err));
    }
  }
  if (!in_place) {
    size_t first = 0;
    for (int r = 0; r < s->size; r++) {
      char *p = x2.send + x2.sd[r];
      size_t Br = (size_t)c.B[r];
      int ok = pooled && own.status == CLEMBED_OK;
      if (ok) memcpy(p, pooled + first * Wme * es, Br * Wme * es);
      else memset(p, 0, Br * Wme * es);
      p += Br * Wme * es;
      for (size_t i = 0; i < s->n; i++) {
        size_t c0, w;
        block_of(&s->tab[i], s->rank, &c0, &w);
        if (!grouped(&s->tab[i]) || !w || c.F[i].f.options.mode != CLEMBED_BAG_MAX) continue;
        if (ok && maxr[i]) memcpy(p, maxr[i] + first * w, Br * w * 8);
        else memset(p, 0, Br * w * 8);
        p += Br * w * 8;
      }
      first += Br;
    }
  }
  if (!ce_mpi_ok(&c.e, MPI_Alltoallv(x2.send, x2.sc, x2.sd, MPI_BYTE, x2.recv, x2.rc, x2.rd, MPI_BYTE, s->comm),
                 "MPI_Alltoallv (the pooled rows)"))
    goto done;
  share_failure(&c, &own, "pool the bags of the tables it holds");
  share_failure(&c, &serve, "send the rows asked of it");
  if (c.e.status != CLEMBED_OK) goto done;

  /* out: where it is one buffer, each owner's blocks written into their
   * columns as they arrived and each ROW feature's rows copied on the device;
   * else put together on the host and written once */
  cl_command_queue q = clembed_context_queue(ctx);
  size_t pieces = 0, ld = out->ld ? out->ld : out->cols;
  int direct = clembed_matrix_pieces(ctx, out, 0, NULL, NULL, &pieces) == CLEMBED_OK && pieces == 1;
  if (!direct && !host) {
    host = fs_host(s, HB_HOST, c.bags * c.width * es);
    if (!host) ce_mpi_fail(&c.e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
  }
  int64_t **mine = c.e.status == CLEMBED_OK ? calloc(s->n + 1, sizeof *mine) : NULL;
  if (c.e.status == CLEMBED_OK && !mine) ce_mpi_fail(&c.e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
  if (mine) { /* (no MPI call follows: a failure here is this rank's own) */
    for (int d = 0; d < s->size && c.e.status == CLEMBED_OK; d++) {
      const char *p = d == s->rank ? x2.send + x2.sd[d] : x2.recv + x2.rd[d]; /* (the same layout) */
      size_t Wd = owned_width(s, d), at = 0;
      for (size_t i = 0; i < s->n && c.bags; i++) {
        size_t c0, w;
        block_of(&s->tab[i], d, &c0, &w);
        if (!grouped(&s->tab[i]) || !w) continue;
        if (direct) {
          size_t bo[3] = {(out->offset + c.coff[i] + c0) * es, 0, 0}, ho[3] = {0, 0, 0}, rg[3] = {w * es, c.bags, 1};
          cl_int err = clEnqueueWriteBufferRect(q, out->buffer, CL_FALSE, bo, ho, rg, ld * es, 0, Wd * es, 0,
                                                p + at * es, 0, NULL, NULL);
          if (err != CL_SUCCESS)
            ce_mpi_fail(&c.e, (clembed_status)err, "out", -1, err, "%s: writing out: %s", op,
                        clembed_status_string((clembed_status)err));
        } else {
          for (size_t b = 0; b < c.bags; b++)
            memcpy(host + (b * c.width + c.coff[i] + c0) * es, p + (b * Wd + at) * es, w * es);
        }
        at += w;
      }
      p += c.bags * Wd * es;
      for (size_t i = 0; i < s->n; i++) {
        size_t c0, w, C = s->tab[i].cols;
        block_of(&s->tab[i], d, &c0, &w);
        if (!grouped(&s->tab[i]) || !w || c.F[i].f.options.mode != CLEMBED_BAG_MAX) continue;
        if (!mine[i]) mine[i] = malloc(c.bags * C * 8 + 8);
        if (mine[i])
          for (size_t b = 0; b < c.bags; b++) memcpy(mine[i] + b * C + c0, p + b * w * 8, w * 8);
        p += c.bags * w * 8;
      }
    }
    /* the direct writes read the buffers: done before they are used again or unmapped */
    if (direct) {
      cl_int fin = clFinish(q);
      if (fin != CL_SUCCESS && c.e.status == CLEMBED_OK)
        ce_mpi_fail(&c.e, (clembed_status)fin, "out", -1, fin, "%s: writing out: %s", op,
                    clembed_status_string((clembed_status)fin));
    }
    if (mapped) {
      clEnqueueUnmapMemObject(q, mapped_mem, mapped, 0, NULL, NULL);
      mapped = NULL;
    }
    for (size_t i = 0; i < s->n && c.e.status == CLEMBED_OK; i++) {
      clembed_ids *mr = c.F[i].f.options.max_rows;
      if (!mr || !grouped(&s->tab[i])) continue;
      if (!mine[i]) {
        ce_mpi_fail(&c.e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
        break;
      }
      size_t cnt = mr->count, esz = mr->type == CLEMBED_I64 ? 8 : 4;
      if (mr->type == CLEMBED_I32)
        for (size_t k = 0; k < cnt; k++) ((int32_t *)mine[i])[k] = (int32_t)mine[i][k];
      cl_int err = cnt ? clEnqueueWriteBuffer(q, mr->buffer, CL_TRUE, mr->offset * esz, cnt * esz, mine[i], 0, NULL,
                                              NULL)
                       : CL_SUCCESS;
      if (err != CL_SUCCESS)
        ce_mpi_fail(&c.e, (clembed_status)err, "max_rows", (int64_t)i, err, "%s: writing features[%zu].max_rows: %s",
                    op, i, clembed_status_string((clembed_status)err));
    }
    for (size_t i = 0; i < s->n; i++) free(mine[i]);
    free(mine);
  }

  /* the ROW and TABLE_ROW features: each pooled on this rank from the rows it
   * received, straight into its columns of out where out is one buffer, else
   * into a matrix of its own whose rows are put together on the host */
  for (size_t i = 0; i < s->n; i++) {
    if (grouped(&s->tab[i])) continue;
    size_t C = s->tab[i].cols;
    ce_mpi_error mine = {0};
    if (direct) {
      clembed_matrix cols = *out; /* its columns: a view */
      cols.offset = out->offset + (c.bags ? c.coff[i] : 0); /* (no bags: where out's buffer is known to hold it) */
      cols.cols = C;
      cols.ld = ld;
      rows_pool(&c, &x2, i, &cols, &mine);
    } else {
      clembed_matrix tmp = {0};
      clembed_status st = clembed_matrix_create(ctx, c.bags, C, out->dtype, &tmp);
      if (st != CLEMBED_OK) ce_mpi_fail_from(&mine, ctx, st);
      else rows_pool(&c, &x2, i, &tmp, &mine);
      if (mine.status == CLEMBED_OK && c.bags && C && host) { /* (no host buffer: the call failed already) */
        char *rows = malloc(c.bags * C * es + 8);
        st = rows ? clembed_matrix_read(ctx, &tmp, rows, out->dtype)
                  : clembed_context_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, op, "", -1, 0, "%s: out of host memory", op);
        if (st != CLEMBED_OK) ce_mpi_fail_from(&mine, ctx, st);
        for (size_t b = 0; b < c.bags && st == CLEMBED_OK; b++)
          memcpy(host + (b * c.width + c.coff[i]) * es, rows + b * C * es, C * es);
        free(rows);
      }
      clembed_matrix_release(&tmp);
    }
    if (mine.status != CLEMBED_OK && c.e.status == CLEMBED_OK) c.e = mine;
  }
  if (c.e.status == CLEMBED_OK && c.bags && c.width) {
    clembed_status st = direct ? clembed_finish(ctx) : clembed_matrix_write(ctx, out, host, out->dtype);
    if (st != CLEMBED_OK) ce_mpi_fail_from(&c.e, ctx, st);
  }
  if (c.e.status == CLEMBED_OK) report_bad(&c);
done:
  if (maxr)
    for (size_t i = 0; i < s->n; i++) free(maxr[i]);
  free(maxr);
  if (mapped) clEnqueueUnmapMemObject(clembed_context_queue(ctx), mapped_mem, mapped, 0, NULL, NULL);
  local_release(&L);
  x_release(&x1);
  x_release(&x2);
  call_release(&c);
  return ce_mpi_report(ctx, op, &c.e);
}

/* --------------------------------------------------------------------- step */

clembed_status clembed_mpi_bags_optimizer_step(clembed_mpi_feature_set *s, const clembed_bag_feature *features,
                                               size_t n, const clembed_matrix *grad_out, const clembed_optimizer *o) {
  const char *op = "clembed_mpi_bags_optimizer_step";
  if (!s)
    return ce_mpi_null_handle(op, "s");
  clembed_context *ctx = s->ctx;
  fs_call c;
  setup(&c, s, op);
  fs_x x1 = {0};
  fs_local L = {0};
  ce_mpi_error own = {0};
  char *grad = NULL;
  float *gradf = NULL;
  clembed_optimizer *oo = calloc(s->n + 1, sizeof *oo), *lo = NULL;
  unsigned char *made = calloc(s->n + 1, 1);
  size_t es = 0;
  char dt[32];
  if (!oo || !made) ce_mpi_fail(&c.e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
  else if (!grad_out || !o) {
    const char *a = !grad_out ? "grad_out" : "o";
    ce_mpi_fail(&c.e, CLEMBED_ERR_INVALID_ARGUMENT, a, -1, 0, "%s: %s is NULL", op, a);
  } else if (!is_float(grad_out->dtype))
    ce_mpi_fail(&c.e, CLEMBED_ERR_INVALID_ARGUMENT, "grad_out", -1, (int64_t)grad_out->dtype,
                "%s: grad_out must be F32, F16 or BF16 (it is %s)", op,
                ce_mpi_dtype_text(grad_out->dtype, dt, sizeof dt));
  pending_error(&c);
  if (c.e.status == CLEMBED_OK) read_features(&c, features, n, grad_out->rows, 1);
  if (c.e.status == CLEMBED_OK && grad_out->cols != c.width)
    ce_mpi_fail(&c.e, CLEMBED_ERR_INVALID_ARGUMENT, "grad_out", -1, (int64_t)grad_out->cols,
                "%s: grad_out has %zu cols; the set's tables have %zu together", op, grad_out->cols, c.width);
  /* the optimizers, read with the stride of the first one's struct_size */
  size_t stride = c.e.status == CLEMBED_OK && n ? o[0].struct_size : 0;
  for (size_t i = 0; i < s->n && c.e.status == CLEMBED_OK; i++) {
    const clembed_optimizer *in = (const clembed_optimizer *)((const char *)o + i * stride);
    if (!ce_mpi_read_optimizer(ctx, op, in, &oo[i], &c.e)) break;
    const fs_table *t = &s->tab[i];
    if (oo[i].state || oo[i].state2)
      ce_mpi_fail(&c.e, CLEMBED_ERR_INVALID_ARGUMENT, "o", (int64_t)i, 0,
                  "%s: o[%zu].state: a feature set's table keeps its own state (pass NULL)", op, i);
    else if ((unsigned)oo[i].kind > (unsigned)CLEMBED_ADAM)
      ce_mpi_fail(&c.e, CLEMBED_ERR_INVALID_ARGUMENT, "o", (int64_t)i, (int64_t)oo[i].kind,
                  "%s: o[%zu]: unknown optimizer kind %d", op, i, (int)oo[i].kind);
    else if (!is_float(t->dtype))
      ce_mpi_fail(&c.e, CLEMBED_ERR_UNSUPPORTED, "o", (int64_t)i, 0,
                  "%s: table %zu (%s) is %s: quantized tables are read, not trained", op, i, t->name,
                  clembed_dtype_name(t->dtype));
    else if (t->kind == CLEMBED_SHARD_COLUMN && oo[i].kind == CLEMBED_ROWWISE_ADAGRAD)
      ce_mpi_fail(&c.e, CLEMBED_ERR_UNSUPPORTED, "o", (int64_t)i, 0,
                  "%s: table %zu (%s) is cut by columns: ROWWISE_ADAGRAD's state is a whole row's, so it is not "
                  "stepped by column blocks (plan the table TABLE, ROW or TABLE_ROW)", op, i, t->name);
    else if (t->kind == CLEMBED_SHARD_COLUMN && c.F[i].f.options.mode == CLEMBED_BAG_MAX &&
             (oo[i].kind == CLEMBED_ADAM || oo[i].weight_decay != 0.0f))
      ce_mpi_fail(&c.e, CLEMBED_ERR_UNSUPPORTED, "o", (int64_t)i, 0,
                  "%s: table %zu (%s) is cut by columns and its feature is MAX: one device steps every column of a "
                  "row max_rows names in any column, which a block does not see, and %s changes a column whose "
                  "gradient is 0 (plan the table TABLE, ROW or TABLE_ROW, or use SGD or ADAGRAD without weight decay)",
                  op, i, t->name, oo[i].kind == CLEMBED_ADAM ? "ADAM" : "weight decay");
    else if (t->kind == CLEMBED_SHARD_COLUMN && oo[i].stochastic_rounding && t->dtype != CLEMBED_F32)
      ce_mpi_fail(&c.e, CLEMBED_ERR_UNSUPPORTED, "o", (int64_t)i, 0,
                  "%s: table %zu (%s) is cut by columns: stochastic rounding's bits are keyed by the whole row's "
                  "column (plan the table TABLE, ROW or TABLE_ROW)", op, i, t->name);
    else if (t->t->has_state && t->t->kind != oo[i].kind && oo[i].kind != CLEMBED_SGD)
      ce_mpi_fail(&c.e, CLEMBED_ERR_INVALID_ARGUMENT, "o", (int64_t)i, (int64_t)oo[i].kind,
                  "%s: o[%zu]: table %zu's state is of another optimizer kind, made by its earlier steps", op, i, i);
    else if (by_rows(t)) { /* the checks of clembed_mpi_bag_optimizer_step, which a ROW table's step had */
      clembed_backward_options b = clembed_backward_defaults();
      ce_mpi_check_optimizer(t->t, op, &oo[i], &b, &c.e);
    }
  }
  if (c.e.status == CLEMBED_OK) {
    es = clembed_dtype_row_bytes(grad_out->dtype, 1);
    grad = fs_host(s, HB_GRAD, c.bags * c.width * es);
    if (!grad || !x_alloc(&x1, s->size, HB_X1S, HB_X1R))
      ce_mpi_fail(&c.e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
    else if (c.bags && c.width) {
      clembed_status st = clembed_matrix_read(ctx, grad_out, grad, grad_out->dtype);
      if (st != CLEMBED_OK) ce_mpi_fail_from(&c.e, ctx, st);
    }
  }
  /* the ROW features' contributions read the gradient as F32 (every float gradient converts to it exactly) */
  int any_rows = 0;
  for (size_t i = 0; i < s->n; i++) any_rows |= by_rows(&s->tab[i]);
  if (c.e.status == CLEMBED_OK && any_rows) {
    gradf = grad_out->dtype == CLEMBED_F32 ? (float *)grad : fs_host(s, HB_GRADF, c.bags * c.width * sizeof *gradf);
    if (!gradf) ce_mpi_fail(&c.e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
    else if (gradf != (float *)grad && c.bags && c.width) {
      clembed_status st = clembed_matrix_read(ctx, grad_out, gradf, CLEMBED_F32);
      if (st != CLEMBED_OK) ce_mpi_fail_from(&c.e, ctx, st);
    }
  }
  for (size_t i = 0; i < s->n && c.e.status == CLEMBED_OK; i++)
    made[i] = (unsigned char)ce_mpi_make_state(s->tab[i].t, oo[i].kind, &c.e);
  if (c.e.status == CLEMBED_OK) rows_plan(&c, 1, gradf);
  if (c.e.status == CLEMBED_OK) pack_bags(&c, &x1, 1, grad, es);
  if (!agree(&c, CE_MPI_CALL_FS_STEP, grad_out ? grad_out->dtype : CLEMBED_F32, oo, "grad_out's dtype")) goto undo;

  /* the grouped features: bags and gradient rows to their owners, stepped there */
  if (!send_bags(&c, &x1, 1, grad, es)) goto undo;
  int unpacked = unpack_bags(&c, &x1, 1, grad_out->dtype, &L, &own);
  unmap_ids(&c);
  if (unpacked && L.k && L.total) {
    clembed_matrix gl = L.rows;
    clembed_status st = CLEMBED_OK;
    lo = calloc(L.k, sizeof *lo);
    if (!lo && st == CLEMBED_OK)
      st = clembed_context_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, op, "", -1, 0, "%s: out of host memory", op);
    for (size_t j = 0; j < L.k && st == CLEMBED_OK; j++) {
      size_t i = L.feat[j];
      clembed_mpi_table *t = s->tab[i].t;
      lo[j] = oo[i];
      lo[j].struct_size = sizeof lo[j];
      lo[j].state = oo[i].kind == CLEMBED_SGD ? NULL : &t->state;
      lo[j].state2 = oo[i].kind == CLEMBED_ADAM ? &t->state2 : NULL;
    }
    if (st == CLEMBED_OK)
      st = owner_outcome(ctx, clembed_bags_optimizer_step(ctx, L.lf, L.k, &gl, lo, 0, NULL, NULL));
    if (st != CLEMBED_OK) ce_mpi_fail_from(&own, ctx, st);
  }
  rows_step(&c, oo, &own); /* the ROW features' contributions received, each table stepped */
  share_failure(&c, &own, "step the tables it holds");
  for (size_t i = 0; i < s->n; i++) /* the state exists on every rank now (0 rows where none of its rows are) */
    if (made[i]) {
      s->tab[i].t->has_state = 1;
      s->tab[i].t->kind = oo[i].kind;
      made[i] = 0;
    }

  if (c.e.status == CLEMBED_OK) report_bad(&c);
  goto done;
undo:
  for (size_t i = 0; made && i < s->n; i++)
    if (made[i]) {
      clembed_matrix_release(&s->tab[i].t->state);
      clembed_matrix_release(&s->tab[i].t->state2);
    }
done:
  local_release(&L);
  x_release(&x1);
  free(oo);
  free(lo);
  free(made);
  call_release(&c);
  return ce_mpi_report(ctx, op, &c.e);
}
