/* Sharded feature sets under mpirun (1, 2, 3 and 4 ranks): every plan (ROW,
 * TABLE, COLUMN, TABLE_ROW and the planner's) mixed in one set, the forward
 * and two optimizer steps against one device's clembed_embedding_bags and
 * clembed_bags_optimizer_step on the ranks' batches concatenated in rank
 * order, bit for bit. Each rank computes that reference itself, on whole
 * copies of the tables on its own device: every rank's batch is a function of
 * the rank, so every rank can make all of them. Also the refusals (a
 * disagreeing option, a plan the ranks cannot hold, the row-wise calls on a
 * COLUMN table), a bad id on one rank, the planner's choices, and a
 * checkpoint saved under one plan and loaded under another. A set of ROW and
 * TABLE_ROW tables of every kind of dtype: the same bits, and the exchanges a
 * call makes (MPI_Alltoallv and MPI_Ialltoallv counted through MPI's profiling
 * interface) the same for one such table as for several.
 *
 *   mpirun -n N test_mpi_sets [CASE ...]   (--list names the cases) */
#define _GNU_SOURCE
#include "clembed_mpi.h"
#include "clembed_io.h"
#include "test_mpi_util.h"

#include <stdlib.h>
#include <unistd.h>

static int g_rank, g_size;

/* MPI's profiling interface: every MPI_Alltoallv and MPI_Ialltoallv of the
 * process (the library's too) counted, then done by PMPI_. */
static long g_alltoallv;
int MPI_Alltoallv(const void *sb, const int sc[], const int sd[], MPI_Datatype st, void *rb, const int rc[],
                  const int rd[], MPI_Datatype rt, MPI_Comm comm) {
  g_alltoallv++;
  return PMPI_Alltoallv(sb, sc, sd, st, rb, rc, rd, rt, comm);
}
int MPI_Ialltoallv(const void *sb, const int sc[], const int sd[], MPI_Datatype st, void *rb, const int rc[],
                   const int rd[], MPI_Datatype rt, MPI_Comm comm, MPI_Request *req) {
  g_alltoallv++;
  return PMPI_Ialltoallv(sb, sc, sd, st, rb, rc, rd, rt, comm, req);
}
/* The exchanges of the last clembed_mpi_embedding_bags and clembed_mpi_bags_optimizer_step the cases made. */
static long g_forward_exchanges, g_step_exchanges;

/* ------------------------------------------------------------------ helpers */

static uint64_t hash3(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full ^ c * 0x165667B19E3779F9ull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 29;
  return x;
}
static float value(uint64_t a, uint64_t b, uint64_t c) { return (float)((int)(hash3(a, b, c) % 2001) - 1000) / 997.0f; }

typedef struct tspec {
  const char *name;
  size_t rows, cols;
  clembed_dtype dt;
  clembed_shard_kind shard;
  int owner;            /* -2: the last rank */
  clembed_bag_mode mode;
  int weights, fixed;   /* per_sample_weights; bags of one size (offsets NULL) */
  int64_t padding;      /* CLEMBED_NO_PADDING or a row */
  clembed_index_policy policy;
  clembed_optimizer_kind opt;
} tspec;

/* Rank r's bags of feature f: r + 2 bags (case `empty_rank`: rank 0 none),
 * 0 - 4 ids each (fixed: 2), ids a function of (r, f, seed). */
typedef struct batch {
  size_t bags, n;
  int64_t *ids, *offsets;
  float *w;
} batch;

static size_t g_bags_of_rank0 = 2;

static size_t bags_of(int r) { return r == 0 ? g_bags_of_rank0 : (size_t)r + 2; }

static batch batch_of(const tspec *t, size_t f, int r, unsigned seed, int bad) {
  batch b = {0};
  b.bags = bags_of(r);
  b.offsets = calloc(b.bags + 1, sizeof *b.offsets);
  size_t cap = b.bags * 4 + 2;
  b.ids = calloc(cap, sizeof *b.ids);
  b.w = calloc(cap, sizeof *b.w);
  for (size_t k = 0; k < b.bags; k++) {
    size_t len = t->fixed ? 2 : (size_t)(hash3((uint64_t)r, f * 131 + k, seed) % 5);
    for (size_t j = 0; j < len; j++) {
      uint64_t h = hash3((uint64_t)r * 7 + j, f * 1009 + k, seed + 1);
      int64_t id = (int64_t)(h % t->rows);
      if (t->padding != CLEMBED_NO_PADDING && h % 7 == 0) id = t->padding;
      b.ids[b.n] = id;
      b.w[b.n] = value(r, f * 977 + b.n, seed + 2);
      b.n++;
    }
    b.offsets[k + 1] = (int64_t)b.n;
  }
  if (bad && b.bags) { /* one more id in the last bag, past the table */
    b.ids[b.n] = (int64_t)t->rows + 5;
    b.w[b.n] = 0.5f;
    b.offsets[b.bags] = (int64_t)++b.n;
  }
  return b;
}

static void batch_free(batch *b) {
  free(b->ids);
  free(b->offsets);
  free(b->w);
}

/* Every rank's batches of feature f concatenated in rank order. */
static batch batch_all(const tspec *t, size_t f, unsigned seed, int bad_rank, size_t *first_bag) {
  batch a = {0};
  size_t cap = 1, bcap = 1;
  for (int r = 0; r < g_size; r++) cap += bags_of(r) * 4 + 1, bcap += bags_of(r);
  a.ids = calloc(cap, sizeof *a.ids);
  a.w = calloc(cap, sizeof *a.w);
  a.offsets = calloc(bcap + 1, sizeof *a.offsets);
  for (int r = 0; r < g_size; r++) {
    batch b = batch_of(t, f, r, seed, r == bad_rank);
    if (r == g_rank) *first_bag = a.bags;
    memcpy(a.ids + a.n, b.ids, b.n * sizeof *a.ids);
    memcpy(a.w + a.n, b.w, b.n * sizeof *a.w);
    for (size_t k = 1; k <= b.bags; k++) a.offsets[a.bags + k] = (int64_t)a.n + b.offsets[k];
    a.n += b.n;
    a.bags += b.bags;
    batch_free(&b);
  }
  return a;
}

/* Device copies of a batch for one feature. */
typedef struct dev {
  clembed_ids ids, offsets, max_rows;
  clembed_matrix w;
} dev;

static void dev_make(clembed_context *ctx, const tspec *t, const batch *b, size_t C, dev *d) {
  memset(d, 0, sizeof *d);
  OK(ctx, clembed_ids_create(ctx, b->ids, b->n, CLEMBED_I64, &d->ids));
  if (!t->fixed) OK(ctx, clembed_ids_create(ctx, b->offsets, b->bags + 1, CLEMBED_I64, &d->offsets));
  if (t->weights) {
    OK(ctx, clembed_matrix_create(ctx, b->n, 1, CLEMBED_F32, &d->w));
    if (b->n) OK(ctx, clembed_matrix_write(ctx, &d->w, b->w, CLEMBED_F32));
  }
  if (t->mode == CLEMBED_BAG_MAX) {
    int64_t *z = calloc(b->bags * C + 1, sizeof *z);
    OK(ctx, clembed_ids_create(ctx, z, b->bags * C, CLEMBED_I64, &d->max_rows));
    free(z);
  }
}

static void dev_free(dev *d) {
  clembed_ids_release(&d->ids);
  clembed_ids_release(&d->offsets);
  clembed_ids_release(&d->max_rows);
  clembed_matrix_release(&d->w);
}

static clembed_bag_feature feature_of(const tspec *t, dev *d, clembed_matrix *table) {
  clembed_bag_feature f = clembed_bag_feature_defaults();
  f.table = table;
  f.ids = &d->ids;
  f.offsets = t->fixed ? NULL : &d->offsets;
  f.options.mode = t->mode;
  f.options.policy = t->policy;
  f.options.padding_idx = t->padding;
  f.options.per_sample_weights = t->weights ? &d->w : NULL;
  f.options.max_rows = t->mode == CLEMBED_BAG_MAX ? &d->max_rows : NULL;
  return f;
}

static void *raw(clembed_context *ctx, const clembed_matrix *m) {
  size_t bytes = clembed_dtype_row_bytes(m->dtype, m->cols) * m->rows;
  void *h = calloc(bytes + 1, 1);
  if (bytes) OK(ctx, clembed_matrix_read(ctx, m, h, m->dtype));
  return h;
}

/* The plan's block of columns of this rank: as include/clembed_mpi.h defines it. */
static void my_block(clembed_mpi_feature_set *s, size_t i, const tspec *t, size_t *c0, size_t *w) {
  clembed_shard_kind k;
  int first, ranks;
  OK(NULL, clembed_mpi_feature_set_plan(s, i, &k, &first, &ranks));
  *c0 = 0;
  *w = t->cols;
  if (k != CLEMBED_SHARD_COLUMN) return;
  size_t unit = clembed_dtype_block_values(t->dt), u = t->cols / unit;
  if (g_rank < first || g_rank >= first + ranks) {
    *w = 0;
    return;
  }
  size_t j = (size_t)(g_rank - first);
  *c0 = j * u / (size_t)ranks * unit;
  *w = ((j + 1) * u / (size_t)ranks) * unit - *c0;
}

/* The part of whole (rows x cols, raw bytes) this rank's shard of table i holds: rows and column block. */
static char *part_of(clembed_mpi_feature_set *s, size_t i, const tspec *t, const char *whole, const clembed_matrix *shard,
                     size_t first_row) {
  size_t c0, w;
  my_block(s, i, t, &c0, &w);
  size_t unit = clembed_dtype_block_values(t->dt) ? clembed_dtype_block_values(t->dt) : t->cols;
  size_t rb = clembed_dtype_row_bytes(t->dt, t->cols), ub = clembed_dtype_row_bytes(t->dt, unit);
  size_t wb = shard->cols ? clembed_dtype_row_bytes(t->dt, shard->cols) : 0;
  char *p = calloc(shard->rows * wb + 1, 1);
  for (size_t r = 0; r < shard->rows; r++) memcpy(p + r * wb, whole + (first_row + r) * rb + c0 / unit * ub, wb);
  return p;
}

/* The set's table i holds the bytes of the whole matrix W (its rows and columns). */
static void expect_table(clembed_context *ctx, clembed_mpi_feature_set *s, size_t i, const tspec *t,
                         const clembed_matrix *W, int which, const char *what) {
  clembed_mpi_table *mt = clembed_mpi_feature_set_table(s, i);
  size_t first = 0;
  clembed_matrix shard = {0};
  OK(ctx, clembed_mpi_table_shard(mt, &first, &shard));
  if (which) {
    clembed_optimizer_kind kind;
    clembed_status st = clembed_mpi_table_state(mt, which, &kind, &shard);
    EXPECT(st == CLEMBED_OK, "%s: table %zu has no state %d on rank %d", what, i, which, g_rank);
    if (st != CLEMBED_OK) return;
  }
  char *whole = raw(ctx, W);
  tspec st = *t;
  if (which) st.dt = CLEMBED_F32, st.cols = W->cols;
  char *want = part_of(s, i, &st, whole, &shard, first);
  char *got = raw(ctx, &shard);
  size_t bytes = shard.cols ? clembed_dtype_row_bytes(shard.dtype, shard.cols) * shard.rows : 0;
  EXPECT(!memcmp(want, got, bytes), "%s: table %zu (%s)%s on rank %d differs from one device's", what, i, t->name,
         which ? "'s state" : "", g_rank);
  free(whole);
  free(want);
  free(got);
}

/* Writes the whole matrix W's bytes into the set's table i (its part on this rank). */
static void fill_table(clembed_context *ctx, clembed_mpi_feature_set *s, size_t i, const tspec *t,
                       const clembed_matrix *W) {
  clembed_mpi_table *mt = clembed_mpi_feature_set_table(s, i);
  size_t first = 0;
  clembed_matrix shard = {0};
  OK(ctx, clembed_mpi_table_shard(mt, &first, &shard));
  char *whole = raw(ctx, W);
  char *part = part_of(s, i, t, whole, &shard, first);
  if (shard.rows && shard.cols) OK(ctx, clembed_matrix_write(ctx, &shard, part, t->dt));
  free(whole);
  free(part);
}

static clembed_matrix whole_of(clembed_context *ctx, const tspec *t, size_t f) {
  clembed_matrix W = {0};
  OK(ctx, clembed_matrix_create(ctx, t->rows, t->cols, t->dt, &W));
  float *h = malloc(t->rows * t->cols * sizeof *h + 4);
  for (size_t k = 0; k < t->rows * t->cols; k++) h[k] = value(f, k, 4242);
  OK(ctx, clembed_matrix_write(ctx, &W, h, CLEMBED_F32));
  free(h);
  return W;
}

static clembed_mpi_feature_set *make_set(clembed_context *ctx, const tspec *T, size_t n) {
  clembed_mpi_table_spec *sp = calloc(n, sizeof *sp);
  for (size_t i = 0; i < n; i++) {
    sp[i].name = T[i].name;
    sp[i].rows = T[i].rows;
    sp[i].cols = T[i].cols;
    sp[i].dtype = T[i].dt;
    sp[i].shard = T[i].shard;
    sp[i].owner = T[i].owner == -2 ? g_size - 1 : T[i].owner;
  }
  clembed_mpi_feature_set *s = NULL;
  OK(ctx, clembed_mpi_feature_set_create(ctx, MPI_COMM_WORLD, sp, n, &s));
  free(sp);
  for (size_t i = 0; s && i < n; i++) {
    clembed_shard_kind k = CLEMBED_SHARD_AUTO;
    int first = -1, ranks = 0;
    OK(ctx, clembed_mpi_feature_set_plan(s, i, &k, &first, &ranks));
    EXPECT(k != CLEMBED_SHARD_AUTO && first >= 0 && ranks >= 1 && first + ranks <= g_size,
           "table %zu: plan %d, ranks %d + %d", i, (int)k, first, ranks);
    if (T[i].shard != CLEMBED_SHARD_AUTO) EXPECT(k == T[i].shard, "table %zu: plan %d, forced %d", i, (int)k, (int)T[i].shard);
    if (T[i].shard == CLEMBED_SHARD_TABLE && T[i].owner != -1)
      EXPECT(first == (T[i].owner == -2 ? g_size - 1 : T[i].owner), "table %zu: owner %d", i, first);
  }
  return s;
}

/* ------------------------------------------------------------------- cases */

#define NT 8
#define MAXT 16 /* the most tables a case's set has */
static const tspec MIXED[NT] = {
    {"users", 1000, 16, CLEMBED_F32, CLEMBED_SHARD_ROW, -1, CLEMBED_BAG_SUM, 1, 0, CLEMBED_NO_PADDING,
     CLEMBED_INDEX_CHECK, CLEMBED_ADAGRAD},
    {"genres", 50, 8, CLEMBED_F16, CLEMBED_SHARD_TABLE, -2, CLEMBED_BAG_MEAN, 0, 0, 3, CLEMBED_INDEX_CHECK,
     CLEMBED_ROWWISE_ADAGRAD},
    {"items", 300, 24, CLEMBED_BF16, CLEMBED_SHARD_COLUMN, -1, CLEMBED_BAG_SUM, 0, 0, CLEMBED_NO_PADDING,
     CLEMBED_INDEX_WRAP, CLEMBED_ADAM},
    {"hours", 20, 4, CLEMBED_F32, CLEMBED_SHARD_TABLE, -1, CLEMBED_BAG_MAX, 0, 0, CLEMBED_NO_PADDING,
     CLEMBED_INDEX_CHECK, CLEMBED_SGD},
    {"words", 200, 64, CLEMBED_Q8_0, CLEMBED_SHARD_COLUMN, -1, CLEMBED_BAG_SUM, 1, 0, CLEMBED_NO_PADDING,
     CLEMBED_INDEX_CLAMP, CLEMBED_SGD},
    {"days", 7, 8, CLEMBED_F32, CLEMBED_SHARD_TABLE_ROW, 0, CLEMBED_BAG_SUM, 0, 1, CLEMBED_NO_PADDING,
     CLEMBED_INDEX_CHECK, CLEMBED_ADAGRAD},
    {"ads", 500, 12, CLEMBED_F32, CLEMBED_SHARD_AUTO, -1, CLEMBED_BAG_MEAN, 0, 0, 0, CLEMBED_INDEX_ZERO,
     CLEMBED_ROWWISE_ADAGRAD},
    {"sites", 64, 16, CLEMBED_I8_ROWWISE, CLEMBED_SHARD_TABLE, 0, CLEMBED_BAG_SUM, 0, 0, CLEMBED_NO_PADDING,
     CLEMBED_INDEX_CHECK, CLEMBED_SGD},
};

static cl_context ctx_of(clembed_context *ctx) {
  cl_context c = NULL;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_CONTEXT, sizeof c, &c, NULL);
  return c;
}

static int g_view; /* the forward's out a view of a wider buffer (offset 3, 5 columns more a row) */

/* The forward of every feature, out dtype od, against one device. */
static void check_forward(clembed_context *ctx, const tspec *T, size_t n, clembed_dtype od, unsigned seed, int bad_rank) {
  clembed_mpi_feature_set *s = make_set(ctx, T, n);
  if (!s) return;
  clembed_matrix W[MAXT];
  batch mine[MAXT], all[MAXT];
  dev dm[MAXT], da[MAXT];
  clembed_bag_feature fm[MAXT], fa[MAXT];
  size_t width = 0, first_bag = 0;
  for (size_t i = 0; i < n; i++) {
    W[i] = whole_of(ctx, &T[i], i);
    fill_table(ctx, s, i, &T[i], &W[i]);
    mine[i] = batch_of(&T[i], i, g_rank, seed, g_rank == bad_rank && i % 2 == 0);
    all[i] = batch_all(&T[i], i, seed, bad_rank, &first_bag);
    if (bad_rank >= 0 && i % 2) { /* only the even features get the bad id */
      batch_free(&all[i]);
      all[i] = batch_all(&T[i], i, seed, -1, &first_bag);
    }
    dev_make(ctx, &T[i], &mine[i], T[i].cols, &dm[i]);
    dev_make(ctx, &T[i], &all[i], T[i].cols, &da[i]);
    fm[i] = feature_of(&T[i], &dm[i], NULL);
    fa[i] = feature_of(&T[i], &da[i], &W[i]);
    width += T[i].cols;
  }
  size_t B = bags_of(g_rank), total = all[0].bags;
  clembed_matrix out = {0}, ref = {0};
  if (g_view) out = tu_gapped_matrix(ctx_of(ctx), B, width, od, 5, 3, NULL);
  else OK(ctx, clembed_matrix_create(ctx, B, width, od, &out));
  OK(ctx, clembed_matrix_create(ctx, total, width, od, &ref));
  long before = g_alltoallv;
  clembed_status st = clembed_mpi_embedding_bags(s, fm, n, &out);
  g_forward_exchanges = g_alltoallv - before;
  clembed_status rs = clembed_embedding_bags(ctx, fa, n, &ref, 0, NULL, NULL);
  if (rs == CLEMBED_OK) rs = clembed_finish(ctx);
  if (g_rank == bad_rank) {
    EXPECT(st == CLEMBED_ERR_INDEX_OUT_OF_RANGE, "the rank with a bad id got %s", clembed_status_string(st));
    clembed_error_detail det;
    EXPECT(clembed_context_error(ctx, &det) == CLEMBED_OK && !strcmp(det.argument, "ids") &&
               det.value == (int64_t)T[0].rows + 5,
           "the bad id's detail: %s", clembed_context_message(ctx));
    EXPECT(strstr(clembed_context_message(ctx), "features[0].ids[") != NULL, "message: %s",
           clembed_context_message(ctx));
  } else {
    EXPECT(st == CLEMBED_OK, "rank %d: %s: %s", g_rank, clembed_status_string(st), clembed_context_message(ctx));
  }
  if (bad_rank < 0) EXPECT(rs == CLEMBED_OK, "reference: %s", clembed_context_message(ctx));
  size_t rb = clembed_dtype_row_bytes(od, width);
  char *got = raw(ctx, &out), *want = raw(ctx, &ref);
  EXPECT(!memcmp(got, want + first_bag * rb, B * rb), "rank %d: the pooled rows (out %s) differ from one device's",
         g_rank, clembed_dtype_name(od));
  for (size_t i = 0; i < n; i++) {
    if (T[i].mode != CLEMBED_BAG_MAX) continue;
    size_t C = T[i].cols;
    int64_t *a = calloc(B * C + 1, 8), *b = calloc(total * C + 1, 8);
    OK(ctx, clembed_ids_read(ctx, &dm[i].max_rows, a));
    OK(ctx, clembed_ids_read(ctx, &da[i].max_rows, b));
    EXPECT(!memcmp(a, b + first_bag * C, B * C * 8), "rank %d: max_rows of feature %zu differ", g_rank, i);
    free(a);
    free(b);
  }
  free(got);
  free(want);
  if (g_view) {
    tu_check_gaps(clembed_context_queue(ctx), &out, "the forward into a view");
    clReleaseMemObject(out.buffer);
  } else {
    clembed_matrix_release(&out);
  }
  clembed_matrix_release(&ref);
  for (size_t i = 0; i < n; i++) {
    clembed_matrix_release(&W[i]);
    batch_free(&mine[i]);
    batch_free(&all[i]);
    dev_free(&dm[i]);
    dev_free(&da[i]);
  }
  clembed_mpi_feature_set_release(s);
}

TU_CASE(forward_every_plan) {
  check_forward(ctx, MIXED, NT, CLEMBED_F32, 1, -1);
  check_forward(ctx, MIXED, NT, CLEMBED_F16, 2, -1);
}

TU_CASE(forward_rank_without_bags) {
  g_bags_of_rank0 = 0;
  check_forward(ctx, MIXED, NT, CLEMBED_F32, 3, -1);
  g_bags_of_rank0 = 2;
}

TU_CASE(forward_into_views) {
  /* out a view of a wider buffer (each owner's columns written into it, the gaps untouched) */
  g_view = 1;
  check_forward(ctx, MIXED, NT, CLEMBED_F32, 6, -1);
  g_view = 0;
  /* out and the tables in pieces (a context whose buffers hold 2 KiB): put together on the host */
  clembed_context *small = tu_small_buffer_context("1024");
  if (!small) return;
  size_t width = 0, pieces = 0;
  for (size_t i = 0; i < NT; i++) width += MIXED[i].cols;
  clembed_matrix probe = {0};
  OK(small, clembed_matrix_create(small, bags_of(g_rank), width, CLEMBED_F32, &probe));
  OK(small, clembed_matrix_pieces(small, &probe, 0, NULL, NULL, &pieces));
  EXPECT(pieces > 1, "rank %d's out (%zu x %zu F32) is in %zu pieces under 1 KiB buffers", g_rank, bags_of(g_rank),
         width, pieces);
  clembed_matrix_release(&probe);
  check_forward(small, MIXED, NT, CLEMBED_F32, 7, -1);
  clembed_context_destroy(small);
}

TU_CASE(bad_id_on_one_rank) { check_forward(ctx, MIXED, 4, CLEMBED_F32, 4, g_size - 1); }

/* Two steps of every float table, each by its own optimizer, against one device. */
static void check_steps(clembed_context *ctx, const tspec *T, size_t n, clembed_dtype gdt, int stochastic) {
  clembed_mpi_feature_set *s = make_set(ctx, T, n);
  if (!s) return;
  clembed_matrix W[MAXT], S1[MAXT], S2[MAXT];
  clembed_optimizer o[MAXT], ro[MAXT];
  size_t width = 0;
  for (size_t i = 0; i < n; i++) {
    W[i] = whole_of(ctx, &T[i], i);
    fill_table(ctx, s, i, &T[i], &W[i]);
    memset(&S1[i], 0, sizeof S1[i]);
    memset(&S2[i], 0, sizeof S2[i]);
    o[i] = clembed_optimizer_defaults(T[i].opt);
    o[i].learning_rate = 0.05f;
    o[i].weight_decay = i == 0 ? 0.01f : 0.0f;
    if (stochastic && T[i].shard != CLEMBED_SHARD_COLUMN && T[i].dt != CLEMBED_F32) {
      o[i].stochastic_rounding = 1;
      o[i].seed = 99;
    }
    ro[i] = o[i];
    if (T[i].opt != CLEMBED_SGD)
      OK(ctx, clembed_matrix_create(ctx, T[i].rows, T[i].opt == CLEMBED_ROWWISE_ADAGRAD ? 1 : T[i].cols, CLEMBED_F32,
                                    &S1[i]));
    if (T[i].opt == CLEMBED_ADAM) OK(ctx, clembed_matrix_create(ctx, T[i].rows, T[i].cols, CLEMBED_F32, &S2[i]));
    ro[i].state = S1[i].buffer ? &S1[i] : NULL;
    ro[i].state2 = S2[i].buffer ? &S2[i] : NULL;
    width += T[i].cols;
  }
  for (int stepno = 1; stepno <= 2; stepno++) {
    batch mine[MAXT], all[MAXT];
    dev dm[MAXT], da[MAXT];
    clembed_bag_feature fm[MAXT], fa[MAXT];
    size_t first_bag = 0;
    for (size_t i = 0; i < n; i++) {
      mine[i] = batch_of(&T[i], i, g_rank, 10 + (unsigned)stepno, 0);
      all[i] = batch_all(&T[i], i, 10 + (unsigned)stepno, -1, &first_bag);
      dev_make(ctx, &T[i], &mine[i], T[i].cols, &dm[i]);
      dev_make(ctx, &T[i], &all[i], T[i].cols, &da[i]);
      fm[i] = feature_of(&T[i], &dm[i], NULL);
      fa[i] = feature_of(&T[i], &da[i], &W[i]);
      o[i].step = ro[i].step = (uint64_t)stepno;
    }
    size_t B = bags_of(g_rank), total = all[0].bags;
    /* the forward first (MAX's max_rows), then the gradients: every rank's, a function of the rank */
    clembed_matrix out = {0}, ref = {0}, g = {0}, ga = {0};
    OK(ctx, clembed_matrix_create(ctx, B, width, CLEMBED_F32, &out));
    OK(ctx, clembed_matrix_create(ctx, total, width, CLEMBED_F32, &ref));
    OK(ctx, clembed_mpi_embedding_bags(s, fm, n, &out));
    OK(ctx, clembed_embedding_bags(ctx, fa, n, &ref, 0, NULL, NULL));
    float *gh = malloc(total * width * sizeof *gh + 4);
    for (size_t k = 0; k < total * width; k++) gh[k] = value(stepno, k, 777);
    OK(ctx, clembed_matrix_create(ctx, B, width, gdt, &g));
    OK(ctx, clembed_matrix_create(ctx, total, width, gdt, &ga));
    OK(ctx, clembed_matrix_write(ctx, &ga, gh, CLEMBED_F32));
    if (B) OK(ctx, clembed_matrix_write(ctx, &g, gh + first_bag * width, CLEMBED_F32));
    long before = g_alltoallv;
    OK(ctx, clembed_mpi_bags_optimizer_step(s, fm, n, &g, o));
    g_step_exchanges = g_alltoallv - before;
    OK(ctx, clembed_bags_optimizer_step(ctx, fa, n, &ga, ro, 0, NULL, NULL));
    OK(ctx, clembed_finish(ctx));
    free(gh);
    clembed_matrix_release(&out);
    clembed_matrix_release(&ref);
    clembed_matrix_release(&g);
    clembed_matrix_release(&ga);
    for (size_t i = 0; i < n; i++) {
      batch_free(&mine[i]);
      batch_free(&all[i]);
      dev_free(&dm[i]);
      dev_free(&da[i]);
    }
  }
  for (size_t i = 0; i < n; i++) {
    expect_table(ctx, s, i, &T[i], &W[i], 0, "after two steps");
    if (S1[i].buffer) expect_table(ctx, s, i, &T[i], &S1[i], 1, "after two steps");
    if (S2[i].buffer) expect_table(ctx, s, i, &T[i], &S2[i], 2, "after two steps");
    clembed_matrix_release(&W[i]);
    clembed_matrix_release(&S1[i]);
    clembed_matrix_release(&S2[i]);
  }
  clembed_mpi_feature_set_release(s);
}

/* The float tables of MIXED (0 - 3, 5, 6), each with its optimizer. */
static void float_tables(tspec *T, size_t *n) {
  *n = 0;
  for (size_t i = 0; i < NT; i++)
    if (MIXED[i].dt == CLEMBED_F32 || MIXED[i].dt == CLEMBED_F16 || MIXED[i].dt == CLEMBED_BF16) T[(*n)++] = MIXED[i];
}

TU_CASE(steps_every_plan) {
  tspec T[NT];
  size_t n;
  float_tables(T, &n);
  check_steps(ctx, T, n, CLEMBED_F32, 0);
  T[1].dt = CLEMBED_BF16; /* a TABLE table of BF16, stochastically rounded; an F16 gradient */
  check_steps(ctx, T, n, CLEMBED_F16, 1);
}

TU_CASE(steps_every_plan_forced) {
  /* every float table under each forced plan in turn (COLUMN with the element-wise optimizers) */
  static const clembed_shard_kind kinds[4] = {CLEMBED_SHARD_ROW, CLEMBED_SHARD_TABLE, CLEMBED_SHARD_COLUMN,
                                              CLEMBED_SHARD_TABLE_ROW};
  for (int k = 0; k < 4; k++) {
    tspec T[NT];
    size_t n;
    float_tables(T, &n);
    for (size_t i = 0; i < n; i++) {
      T[i].shard = kinds[k];
      T[i].owner = kinds[k] == CLEMBED_SHARD_TABLE ? (int)(i % (size_t)g_size) : -1;
      if (kinds[k] == CLEMBED_SHARD_COLUMN && T[i].opt == CLEMBED_ROWWISE_ADAGRAD) T[i].opt = CLEMBED_ADAGRAD;
      /* a MAX feature's blocks: ADAGRAD (a row not named in a block's columns adds +0 there, as on one device) */
      if (kinds[k] == CLEMBED_SHARD_COLUMN && T[i].mode == CLEMBED_BAG_MAX) T[i].opt = CLEMBED_ADAGRAD;
    }
    check_steps(ctx, T, n, CLEMBED_F32, 0);
  }
}

/* ROW and TABLE_ROW tables of every kind of dtype (float, block-quantized,
 * FBGEMM's row-wise), with SUM, MEAN, MAX, weights, padding and each index
 * policy: their features travel together, in the exchanges of the TABLE and
 * COLUMN features. */
#define NR 7
static const tspec ROWS[NR] = {
    {"r_users", 400, 16, CLEMBED_F32, CLEMBED_SHARD_ROW, -1, CLEMBED_BAG_SUM, 1, 0, CLEMBED_NO_PADDING,
     CLEMBED_INDEX_CHECK, CLEMBED_ADAGRAD},
    {"r_genres", 300, 8, CLEMBED_F16, CLEMBED_SHARD_TABLE_ROW, 0, CLEMBED_BAG_MEAN, 0, 0, 5, CLEMBED_INDEX_CHECK,
     CLEMBED_ROWWISE_ADAGRAD},
    {"r_items", 200, 12, CLEMBED_BF16, CLEMBED_SHARD_ROW, -1, CLEMBED_BAG_MAX, 0, 0, CLEMBED_NO_PADDING,
     CLEMBED_INDEX_WRAP, CLEMBED_SGD},
    {"r_words", 150, 64, CLEMBED_Q8_0, CLEMBED_SHARD_ROW, -1, CLEMBED_BAG_SUM, 1, 1, 2, CLEMBED_INDEX_CLAMP,
     CLEMBED_SGD},
    {"r_sites", 100, 16, CLEMBED_I8_ROWWISE, CLEMBED_SHARD_TABLE_ROW, -2, CLEMBED_BAG_MEAN, 0, 0, CLEMBED_NO_PADDING,
     CLEMBED_INDEX_ZERO, CLEMBED_SGD},
    {"r_hours", 500, 24, CLEMBED_F32, CLEMBED_SHARD_ROW, -1, CLEMBED_BAG_MAX, 0, 0, 7, CLEMBED_INDEX_CHECK,
     CLEMBED_ADAM},
    /* three rows: each takes several ids from several ranks, whose order the
     * owner's fold must keep (a sum of two is the same either way); on four
     * ranks one shard is empty */
    {"r_tiny", 3, 8, CLEMBED_F32, CLEMBED_SHARD_ROW, -1, CLEMBED_BAG_SUM, 1, 0, CLEMBED_NO_PADDING,
     CLEMBED_INDEX_CHECK, CLEMBED_ADAGRAD},
};

TU_CASE(rows_forward_every_dtype) {
  check_forward(ctx, ROWS, NR, CLEMBED_F32, 11, -1);
  check_forward(ctx, ROWS, NR, CLEMBED_BF16, 12, -1);
  check_forward(ctx, ROWS, NR, CLEMBED_F32, 13, g_size - 1); /* a bad id on the last rank */
  /* with the TABLE and COLUMN features of MIXED: one set, one pair of exchanges */
  tspec T[NT + NR];
  memcpy(T, MIXED, sizeof MIXED);
  memcpy(T + NT, ROWS, sizeof ROWS);
  check_forward(ctx, T, NT + NR, CLEMBED_F16, 14, -1);
  EXPECT(g_forward_exchanges == 2, "rank %d: a forward of every plan made %ld exchanges, not 2", g_rank,
         g_forward_exchanges);
}

TU_CASE(rows_steps_every_float_dtype) {
  tspec T[NR];
  size_t n = 0;
  for (size_t i = 0; i < NR; i++)
    if (ROWS[i].dt == CLEMBED_F32 || ROWS[i].dt == CLEMBED_F16 || ROWS[i].dt == CLEMBED_BF16) T[n++] = ROWS[i];
  check_steps(ctx, T, n, CLEMBED_F32, 0);
  check_steps(ctx, T, n, CLEMBED_BF16, 1); /* a BF16 gradient; the F16 and BF16 tables stochastically rounded */
}

TU_CASE(rows_exchanges_do_not_grow) {
  /* one ROW table, then five ROW and TABLE_ROW tables: the same MPI_Alltoallv
   * count a call, two in the forward, one in the step */
  tspec one[1] = {ROWS[0]}, five[5] = {ROWS[0], ROWS[1], ROWS[2], ROWS[3], ROWS[5]};
  check_forward(ctx, one, 1, CLEMBED_F32, 21, -1);
  long f1 = g_forward_exchanges;
  check_forward(ctx, five, 5, CLEMBED_F32, 22, -1);
  long f5 = g_forward_exchanges;
  EXPECT(f1 == f5 && f1 == 2, "rank %d: the forward made %ld exchanges for one ROW table, %ld for five (2 each)",
         g_rank, f1, f5);
  /* the step: one ROW table, the four float ROW and TABLE_ROW tables, then those and a TABLE one */
  tspec steps[5] = {ROWS[0], ROWS[1], ROWS[2], ROWS[5], MIXED[1]};
  check_steps(ctx, steps, 1, CLEMBED_F32, 0);
  long k1 = g_step_exchanges;
  check_steps(ctx, steps, 4, CLEMBED_F32, 0);
  long k4 = g_step_exchanges;
  check_steps(ctx, steps, 5, CLEMBED_F32, 0);
  long k5 = g_step_exchanges;
  EXPECT(k1 == k4 && k4 == k5 && k1 == 1,
         "rank %d: the step made %ld exchanges for one ROW table, %ld for four, %ld with a TABLE one (1 each)", g_rank,
         k1, k4, k5);
}

TU_CASE(init_every_plan) {
  /* clembed_mpi_table_init_normal of a set's tables: the whole table's bits under every plan */
  tspec T[4] = {MIXED[0], MIXED[1], MIXED[2], MIXED[5]};
  T[2].cols = 40; /* column blocks of uneven widths */
  clembed_mpi_feature_set *s = make_set(ctx, T, 4);
  if (!s) return;
  for (size_t i = 0; i < 4; i++) {
    clembed_matrix W = {0};
    OK(ctx, clembed_matrix_create(ctx, T[i].rows, T[i].cols, T[i].dt, &W));
    OK(ctx, clembed_matrix_init_normal_at(ctx, &W, 0, 0.5f, 2.0f, 1234 + i, 0, NULL, NULL));
    OK(ctx, clembed_mpi_table_init_normal(clembed_mpi_feature_set_table(s, i), 0.5f, 2.0f, 1234 + i));
    expect_table(ctx, s, i, &T[i], &W, 0, "init_normal");
    clembed_matrix_release(&W);
  }
  clembed_mpi_feature_set_release(s);
}

TU_CASE(load_every_plan) {
  /* clembed_mpi_table_load_into: a file's table into a set's tables of every plan, F32 and BF16 (converted) */
  enum { R = 301, C = 40 };
  tspec T[5] = {MIXED[0], MIXED[0], MIXED[0], MIXED[0], MIXED[0]};
  static const clembed_shard_kind kinds[5] = {CLEMBED_SHARD_ROW, CLEMBED_SHARD_TABLE, CLEMBED_SHARD_COLUMN,
                                              CLEMBED_SHARD_TABLE_ROW, CLEMBED_SHARD_COLUMN};
  for (int i = 0; i < 5; i++) {
    T[i].rows = R;
    T[i].cols = C;
    T[i].shard = kinds[i];
    T[i].owner = kinds[i] == CLEMBED_SHARD_TABLE ? -2 : -1;
    T[i].dt = i == 4 ? CLEMBED_BF16 : CLEMBED_F32;
  }
  char path[256];
  snprintf(path, sizeof path, "/tmp/clembed_sets_load_%d.npy", (int)getppid());
  float *v = malloc(R * C * sizeof *v);
  for (size_t k = 0; k < (size_t)R * C; k++) v[k] = value(9, k, 31);
  if (g_rank == 0) tu_write_npy_f32(path, v, R, C);
  MPI_Barrier(MPI_COMM_WORLD);
  clembed_mpi_feature_set *s = make_set(ctx, T, 5);
  clembed_file *f = NULL;
  OK(ctx, clembed_file_open(path, &f));
  for (size_t i = 0; s && f && i < 5; i++) {
    clembed_matrix W = {0};
    OK(ctx, clembed_matrix_load(ctx, f, NULL, T[i].dt, &W));
    OK(ctx, clembed_mpi_table_load_into(clembed_mpi_feature_set_table(s, i), f, NULL));
    expect_table(ctx, s, i, &T[i], &W, 0, "load_into");
    clembed_matrix_release(&W);
  }
  /* a table of another shape: every rank refuses, naming both */
  tspec wrong = T[0];
  wrong.rows = R + 1;
  clembed_mpi_feature_set *w = make_set(ctx, &wrong, 1);
  if (w && f) {
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_table_load_into(clembed_mpi_feature_set_table(w, 0), f, NULL));
    EXPECT(strstr(clembed_context_message(ctx), "302 x 40") != NULL, "%s", clembed_context_message(ctx));
  }
  clembed_file_close(f);
  clembed_mpi_feature_set_release(w);
  clembed_mpi_feature_set_release(s);
  free(v);
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == 0) unlink(path);
}

TU_CASE(planner_balances_tables) {
  /* 8 equal small tables and a hot one, with id samples: every plan is chosen
   * (never AUTO), the small ones whole on a rank, spread over the ranks */
  enum { N = 9 };
  clembed_mpi_table_spec sp[N];
  clembed_ids samples[N];
  for (size_t i = 0; i < N; i++) {
    memset(&sp[i], 0, sizeof sp[i]);
    sp[i].rows = i == 8 ? 4000 : 100;
    sp[i].cols = 16;
    sp[i].dtype = CLEMBED_F32;
    sp[i].shard = CLEMBED_SHARD_AUTO;
    sp[i].owner = -1;
    size_t k = i == 8 ? 400 : 20;
    int64_t *h = malloc(k * sizeof *h);
    for (size_t j = 0; j < k; j++) h[j] = (int64_t)(hash3(g_rank, i, j) % sp[i].rows);
    OK(ctx, clembed_ids_create(ctx, h, k, CLEMBED_I64, &samples[i]));
    sp[i].id_sample = &samples[i];
    sp[i].sample_bags = 20; /* the small tables' samples: one id a bag; the hot one's: 20 ids a bag */
    free(h);
  }
  clembed_mpi_feature_set *s = NULL;
  OK(ctx, clembed_mpi_feature_set_create(ctx, MPI_COMM_WORLD, sp, N, &s));
  int per_rank[8] = {0};
  for (size_t i = 0; s && i < N; i++) {
    clembed_shard_kind k;
    int first, ranks;
    OK(ctx, clembed_mpi_feature_set_plan(s, i, &k, &first, &ranks));
    EXPECT(k == CLEMBED_SHARD_TABLE || k == CLEMBED_SHARD_ROW, "table %zu: the planner chose %d", i, (int)k);
    if (i < 8) {
      EXPECT(k == CLEMBED_SHARD_TABLE, "small table %zu: the planner chose %d, not TABLE", i, (int)k);
      if (k == CLEMBED_SHARD_TABLE && first < 8) per_rank[first]++;
    }
    /* every rank sees the same plan */
    int mine[2] = {(int)k, first}, lo[2], hi[2];
    MPI_Allreduce(mine, lo, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(mine, hi, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT(lo[0] == hi[0] && lo[1] == hi[1], "table %zu: the ranks' plans differ", i);
  }
  /* the small tables spread over the ranks, the hot table's owner holding no more of them than any other */
  clembed_shard_kind hk = CLEMBED_SHARD_AUTO;
  int hot = -1, most = 0, least = 9;
  if (s) OK(ctx, clembed_mpi_feature_set_plan(s, 8, &hk, &hot, NULL));
  for (int r = 0; r < g_size && s; r++) {
    if (per_rank[r] > most) most = per_rank[r];
    if (r != hot && per_rank[r] < least) least = per_rank[r];
  }
  if (hk == CLEMBED_SHARD_TABLE && g_size > 1)
    EXPECT(per_rank[hot] <= least, "the hot table's owner, rank %d, holds %d small tables; another %d", hot,
           per_rank[hot], least);
  if (g_size > 1) EXPECT(most < 8 || hk == CLEMBED_SHARD_TABLE, "one rank holds every small table");
  clembed_shard_kind k;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_feature_set_plan(s, N, &k, NULL, NULL));
  EXPECT(clembed_mpi_feature_set_table(s, N) == NULL, "a table past n");
  clembed_mpi_feature_set_release(s);
  for (size_t i = 0; i < N; i++) clembed_ids_release(&samples[i]);
}

TU_CASE(refusals) {
  tspec T[3] = {MIXED[0], MIXED[2], MIXED[1]};
  clembed_mpi_feature_set *s = make_set(ctx, T, 3);
  if (!s) return;
  batch b[3];
  dev d[3];
  clembed_bag_feature f[3];
  for (size_t i = 0; i < 3; i++) {
    b[i] = batch_of(&T[i], i, g_rank, 5, 0);
    dev_make(ctx, &T[i], &b[i], T[i].cols, &d[i]);
    f[i] = feature_of(&T[i], &d[i], NULL);
  }
  size_t B = bags_of(g_rank), width = T[0].cols + T[1].cols + T[2].cols;
  clembed_matrix out = {0}, g = {0};
  OK(ctx, clembed_matrix_create(ctx, B, width, CLEMBED_F32, &out));
  OK(ctx, clembed_matrix_create(ctx, B, width, CLEMBED_F32, &g));
  /* n other than the set's: every rank refuses (the rank's own, the others naming it) */
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_embedding_bags(s, f, g_rank == 0 ? 2 : 3, &out));
  if (g_rank == 0) EXPECT(strstr(clembed_context_message(ctx), "n = 2") != NULL, "%s", clembed_context_message(ctx));
  /* a mode that differs on one rank */
  f[2].options.mode = g_rank == g_size - 1 && g_size > 1 ? CLEMBED_BAG_SUM : CLEMBED_BAG_MEAN;
  if (g_size > 1) {
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_embedding_bags(s, f, 3, &out));
    EXPECT(strstr(clembed_context_message(ctx), "disagree") != NULL, "%s", clembed_context_message(ctx));
  }
  f[2].options.mode = CLEMBED_BAG_MEAN;
  OK(ctx, clembed_mpi_embedding_bags(s, f, 3, &out));
  /* a wrong out width; a NULL set */
  out.cols--;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_embedding_bags(s, f, 3, &out));
  out.cols++;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_embedding_bags(NULL, f, 3, &out));
  /* ROWWISE_ADAGRAD on the COLUMN table (1); stochastic rounding there */
  clembed_optimizer o[3] = {clembed_optimizer_defaults(CLEMBED_SGD), clembed_optimizer_defaults(CLEMBED_ROWWISE_ADAGRAD),
                            clembed_optimizer_defaults(CLEMBED_SGD)};
  FAILS(ctx, CLEMBED_ERR_UNSUPPORTED, clembed_mpi_bags_optimizer_step(s, f, 3, &g, o));
  EXPECT(strstr(clembed_context_message(ctx), "ROWWISE_ADAGRAD") != NULL, "%s", clembed_context_message(ctx));
  o[1] = clembed_optimizer_defaults(CLEMBED_SGD);
  o[1].stochastic_rounding = 1;
  FAILS(ctx, CLEMBED_ERR_UNSUPPORTED, clembed_mpi_bags_optimizer_step(s, f, 3, &g, o));
  o[1].stochastic_rounding = 0;
  /* a MAX feature on a COLUMN table with ADAM (a column a block does not see named changes on one device) */
  clembed_ids mr1 = {0};
  int64_t *zeros = calloc(B * T[1].cols + 1, sizeof *zeros);
  OK(ctx, clembed_ids_create(ctx, zeros, B * T[1].cols, CLEMBED_I64, &mr1));
  free(zeros);
  f[1].options.mode = CLEMBED_BAG_MAX;
  f[1].options.max_rows = &mr1;
  o[1] = clembed_optimizer_defaults(CLEMBED_ADAM);
  o[1].step = 1;
  FAILS(ctx, CLEMBED_ERR_UNSUPPORTED, clembed_mpi_bags_optimizer_step(s, f, 3, &g, o));
  EXPECT(strstr(clembed_context_message(ctx), "MAX") != NULL, "%s", clembed_context_message(ctx));
  f[1].options.mode = T[1].mode;
  f[1].options.max_rows = NULL;
  clembed_ids_release(&mr1);
  o[1] = clembed_optimizer_defaults(CLEMBED_SGD);
  /* an out that reaches past its buffer on one rank: every rank refuses before anything moves */
  {
    clembed_matrix past = out;
    if (g_rank == 0) past.offset = 1u << 20;
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_embedding_bags(s, f, 3, &past));
    EXPECT(strstr(clembed_context_message(ctx), g_rank == 0 ? "buffer holds" : "rank 0") != NULL, "%s",
           clembed_context_message(ctx));
  }
  /* a state passed in */
  clembed_matrix st = {0};
  OK(ctx, clembed_matrix_create(ctx, T[0].rows, T[0].cols, CLEMBED_F32, &st));
  o[0] = clembed_optimizer_defaults(CLEMBED_ADAGRAD);
  o[0].state = &st;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_bags_optimizer_step(s, f, 3, &g, o));
  o[0].state = NULL;
  OK(ctx, clembed_mpi_bags_optimizer_step(s, f, 3, &g, o));
  /* then another kind on that table */
  o[0] = clembed_optimizer_defaults(CLEMBED_ADAM);
  o[0].step = 1;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_bags_optimizer_step(s, f, 3, &g, o));
  clembed_matrix_release(&st);
  /* the row-wise calls refuse a COLUMN table */
  clembed_mpi_table *ct = clembed_mpi_feature_set_table(s, 1);
  FAILS(ctx, CLEMBED_ERR_UNSUPPORTED, clembed_mpi_embedding_bag(ct, f[1].ids, f[1].offsets, &f[1].options, &out));
  EXPECT(strstr(clembed_context_message(ctx), "COLUMN") != NULL, "%s", clembed_context_message(ctx));
  clembed_matrix_release(&out);
  clembed_matrix_release(&g);
  for (size_t i = 0; i < 3; i++) {
    batch_free(&b[i]);
    dev_free(&d[i]);
  }
  clembed_mpi_feature_set_release(s);
  clembed_mpi_feature_set_release(NULL);

  /* create: a COLUMN table of a row-wise type, an owner past the ranks, specs that differ */
  clembed_mpi_table_spec sp = {"t", 10, 16, CLEMBED_I8_ROWWISE, CLEMBED_SHARD_COLUMN, -1, NULL, 0};
  clembed_mpi_feature_set *bad = (clembed_mpi_feature_set *)1;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_feature_set_create(ctx, MPI_COMM_WORLD, &sp, 1, &bad));
  EXPECT(bad == NULL, "a refused create leaves *s NULL");
  sp.dtype = CLEMBED_F32;
  sp.shard = CLEMBED_SHARD_TABLE;
  sp.owner = g_size;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_feature_set_create(ctx, MPI_COMM_WORLD, &sp, 1, &bad));
  EXPECT(strstr(clembed_context_message(ctx), "owner") != NULL, "%s", clembed_context_message(ctx));
  sp.owner = 0;
  sp.rows = g_rank == 0 ? 10 : 11;
  if (g_size > 1) {
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_feature_set_create(ctx, MPI_COMM_WORLD, &sp, 1, &bad));
    EXPECT(strstr(clembed_context_message(ctx), "tables[0]") != NULL, "%s", clembed_context_message(ctx));
  }
}

static void *file_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  void *p = NULL;
  *n = 0;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (len > 0 && (p = malloc((size_t)len)) && fread(p, 1, (size_t)len, f) == (size_t)len) *n = (size_t)len;
  fclose(f);
  return p;
}

TU_CASE(checkpoint_across_plans) {
  /* tables and optimizer states saved from a set planned one way load into a set planned
   * another (COLUMN both ways), and that set saves the very same file */
  enum { NCK = 4 };
  tspec A[NCK] = {MIXED[0], MIXED[1], MIXED[2], MIXED[5]}, Bt[NCK] = {MIXED[0], MIXED[1], MIXED[2], MIXED[5]};
  A[0].opt = CLEMBED_ADAGRAD, A[1].opt = CLEMBED_SGD, A[2].opt = CLEMBED_ADAM, A[3].opt = CLEMBED_ADAGRAD;
  Bt[0].shard = CLEMBED_SHARD_COLUMN;
  Bt[1].shard = CLEMBED_SHARD_ROW;
  Bt[2].shard = CLEMBED_SHARD_TABLE;
  Bt[2].owner = -2;
  Bt[3].shard = CLEMBED_SHARD_COLUMN;
  clembed_mpi_feature_set *a = make_set(ctx, A, NCK), *b = make_set(ctx, Bt, NCK);
  if (!a || !b) return;
  char path[256], path2[256];
  snprintf(path, sizeof path, "/tmp/clembed_sets_ckpt_%d.safetensors", (int)getppid());
  snprintf(path2, sizeof path2, "/tmp/clembed_sets_ckpt2_%d.safetensors", (int)getppid());
  clembed_mpi_table *ta[NCK], *tb[NCK];
  const char *names[NCK] = {"users", "genres", "items", "days"};
  clembed_matrix W[NCK];
  batch bt[NCK];
  dev d[NCK];
  clembed_bag_feature f[NCK];
  clembed_optimizer o[NCK];
  size_t width = 0;
  for (size_t i = 0; i < NCK; i++) {
    W[i] = whole_of(ctx, &A[i], 50 + i);
    fill_table(ctx, a, i, &A[i], &W[i]);
    ta[i] = clembed_mpi_feature_set_table(a, i);
    tb[i] = clembed_mpi_feature_set_table(b, i);
    bt[i] = batch_of(&A[i], i, g_rank, 21, 0);
    dev_make(ctx, &A[i], &bt[i], A[i].cols, &d[i]);
    f[i] = feature_of(&A[i], &d[i], NULL);
    o[i] = clembed_optimizer_defaults(A[i].opt);
    o[i].step = 1;
    width += A[i].cols;
  }
  /* one step, so that the file holds the optimizers' states too */
  clembed_matrix g = {0};
  size_t B = bags_of(g_rank);
  float *gh = malloc(B * width * sizeof *gh + 4);
  for (size_t k = 0; k < B * width; k++) gh[k] = value(g_rank, k, 88);
  OK(ctx, clembed_matrix_create(ctx, B, width, CLEMBED_F32, &g));
  if (B) OK(ctx, clembed_matrix_write(ctx, &g, gh, CLEMBED_F32));
  OK(ctx, clembed_mpi_bags_optimizer_step(a, f, NCK, &g, o));
  OK(ctx, clembed_mpi_checkpoint_save(path, ta, names, NCK, NULL, NULL, 0));
  OK(ctx, clembed_mpi_checkpoint_load(path, tb, names, NCK));
  OK(ctx, clembed_mpi_checkpoint_save(path2, tb, names, NCK, NULL, NULL, 0));
  MPI_Barrier(MPI_COMM_WORLD);
  size_t n1 = 0, n2 = 0;
  void *f1 = file_bytes(path, &n1), *f2 = file_bytes(path2, &n2);
  EXPECT(n1 && n1 == n2 && f1 && f2 && !memcmp(f1, f2, n1),
         "rank %d: the file saved under the second plan (%zu bytes) differs from the first's (%zu)", g_rank, n2, n1);
  free(f1);
  free(f2);
  /* and the file loads in one process (clembed_checkpoint_load) into whole tables: the tables' bits */
  clembed_matrix Wl[NCK];
  clembed_checkpoint_item items[NCK];
  for (size_t i = 0; i < NCK; i++) {
    OK(ctx, clembed_matrix_create(ctx, A[i].rows, A[i].cols, A[i].dt, &Wl[i]));
    items[i] = (clembed_checkpoint_item){names[i], &Wl[i]};
  }
  OK(ctx, clembed_checkpoint_load(ctx, path, items, NCK));
  /* a row-wise Adagrad state (a whole row's) into a COLUMN table: refused on every rank, nothing changed */
  {
    tspec R1 = A[0], C1 = A[0];
    R1.shard = CLEMBED_SHARD_ROW;
    C1.shard = CLEMBED_SHARD_COLUMN;
    clembed_mpi_feature_set *r1 = make_set(ctx, &R1, 1), *c1 = make_set(ctx, &C1, 1);
    clembed_matrix g1 = {0};
    OK(ctx, clembed_matrix_create(ctx, B, A[0].cols, CLEMBED_F32, &g1));
    clembed_optimizer rw = clembed_optimizer_defaults(CLEMBED_ROWWISE_ADAGRAD);
    if (r1 && c1) {
      clembed_mpi_table *tr = clembed_mpi_feature_set_table(r1, 0), *tc = clembed_mpi_feature_set_table(c1, 0);
      OK(ctx, clembed_mpi_bags_optimizer_step(r1, f, 1, &g1, &rw));
      OK(ctx, clembed_mpi_checkpoint_save(path2, &tr, names, 1, NULL, NULL, 0));
      FAILS(ctx, CLEMBED_ERR_UNSUPPORTED, clembed_mpi_checkpoint_load(path2, &tc, names, 1));
      EXPECT(strstr(clembed_context_message(ctx), "rowwise_adagrad") != NULL, "%s", clembed_context_message(ctx));
      clembed_optimizer_kind kind;
      clembed_matrix st = {0};
      EXPECT(clembed_mpi_table_state(tc, 1, &kind, &st) != CLEMBED_OK, "the refused load gave the COLUMN table a state");
    }
    clembed_matrix_release(&g1);
    clembed_mpi_feature_set_release(r1);
    clembed_mpi_feature_set_release(c1);
  }
  for (size_t i = 0; i < NCK; i++) {
    expect_table(ctx, b, i, &Bt[i], &Wl[i], 0, "loaded under another plan");
    clembed_matrix_release(&Wl[i]);
    clembed_matrix_release(&W[i]);
    batch_free(&bt[i]);
    dev_free(&d[i]);
  }
  free(gh);
  clembed_matrix_release(&g);
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == 0) unlink(path), unlink(path2);
  clembed_mpi_feature_set_release(a);
  clembed_mpi_feature_set_release(b);
}

TU_CASE(steps_in_pieces) {
  /* the tables, gradients and states in pieces (a context whose buffers hold 1 KiB) */
  clembed_context *small = tu_small_buffer_context("1024");
  if (!small) return;
  tspec T[NT];
  size_t n;
  float_tables(T, &n);
  check_steps(small, T, n, CLEMBED_F32, 0);
  clembed_context_destroy(small);
}

int main(int argc, char **argv) { return tu_mpi_main(argc, argv, "test_mpi_sets", 900, &g_rank, &g_size); }
