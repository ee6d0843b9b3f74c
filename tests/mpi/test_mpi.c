/* libclembed_mpi under mpirun (1, 2, 3 and 4 ranks): every function against
 * the single-device API on the ranks' batches concatenated in rank order, bit
 * for bit. Each rank computes that reference itself, on a whole copy of the
 * table on its own device: every rank can generate every rank's batch (the
 * batches are functions of the rank), so no reference travels. Tables of F32
 * and BF16 (and Q8_0 and FBGEMM's row-wise types for the forward), rows not divisible by the rank count,
 * fewer rows than ranks, ranks with no ids, every id owned by one rank, and
 * the refusals: a bad id, a wrong shape or a disagreeing option on one rank.
 * Every case is collective: each rank runs the same calls in the same order.
 *
 *   mpirun -n N test_mpi [CASE ...]   (--list names the cases) */
#define _GNU_SOURCE
#include "clembed_mpi.h"
#include "test_mpi_util.h"

#include <stdlib.h>
#include <unistd.h>

static int g_rank, g_size;

/* ------------------------------------------------------------------ helpers */

/* A deterministic value from (a, b, c), in [-1, 1), exact in BF16 for some. */
static float value(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t s = a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL) * 0xBF58476D1CE4E5B9ULL ^ c * 0x94D049BB133111EBULL;
  return tu_rand(&s);
}

/* A whole table's values, the same on every rank. */
static float *table_values(size_t R, size_t C, unsigned seed) {
  float *h = malloc((R * C + 1) * sizeof *h);
  for (size_t i = 0; i < R * C; i++) h[i] = value(seed, i / C, i % C);
  return h;
}

/* A sharded table holding `host` (every rank writes its rows through its shard). */
static clembed_mpi_table *make_table(clembed_context *ctx, size_t R, size_t C, clembed_dtype dt, const float *host) {
  clembed_mpi_table *t = NULL;
  OK(ctx, clembed_mpi_table_create(ctx, MPI_COMM_WORLD, R, C, dt, &t));
  size_t first = 0;
  clembed_matrix shard = {0};
  if (t && clembed_mpi_table_shard(t, &first, &shard) == CLEMBED_OK && shard.rows && C)
    OK(ctx, clembed_matrix_write(ctx, &shard, host + first * C, CLEMBED_F32));
  return t;
}

/* The whole table on this rank's device. */
static clembed_matrix whole_table(clembed_context *ctx, size_t R, size_t C, clembed_dtype dt, const float *host) {
  clembed_matrix m = {0};
  OK(ctx, clembed_matrix_create(ctx, R, C, dt, &m));
  if (R && C) OK(ctx, clembed_matrix_write(ctx, &m, host, CLEMBED_F32));
  return m;
}

/* A matrix's elements in its own dtype (bytes). */
static void *raw(clembed_context *ctx, const clembed_matrix *m) {
  size_t bytes = clembed_dtype_row_bytes(m->dtype, m->cols) * m->rows;
  void *p = calloc(bytes + 1, 1);
  if (m->rows && m->cols) OK(ctx, clembed_matrix_read(ctx, m, p, m->dtype));
  return p;
}

/* Rows [first, first + n) of m, a view. */
static clembed_matrix rows_of(const clembed_matrix *m, size_t first, size_t n) {
  clembed_matrix v = *m;
  size_t ld = m->ld ? m->ld : m->cols;
  v.offset += first * ld;
  v.rows = n;
  return v;
}

/* This rank's shard equals its rows of `whole`, byte for byte. */
static void expect_shard(clembed_context *ctx, const clembed_matrix *shard, size_t first, const clembed_matrix *whole,
                         const char *what) {
  clembed_matrix ref = rows_of(whole, first, shard->rows);
  void *a = raw(ctx, shard), *b = raw(ctx, &ref);
  size_t bytes = clembed_dtype_row_bytes(shard->dtype, shard->cols) * shard->rows;
  EXPECT(shard->dtype == whole->dtype && shard->cols == whole->cols && !memcmp(a, b, bytes),
         "%s: rank %d's rows %zu .. %zu differ from one device's", what, g_rank, first, first + shard->rows);
  free(a);
  free(b);
}

static void expect_table(clembed_context *ctx, clembed_mpi_table *t, const clembed_matrix *whole, const char *what) {
  size_t first = 0;
  clembed_matrix shard = {0};
  if (!t) return;
  OK(ctx, clembed_mpi_table_shard(t, &first, &shard));
  expect_shard(ctx, &shard, first, whole, what);
}

/* Two matrices hold the same bytes. */
static void expect_same(clembed_context *ctx, const clembed_matrix *a, const clembed_matrix *b, const char *what) {
  void *x = raw(ctx, a), *y = raw(ctx, b);
  size_t bytes = clembed_dtype_row_bytes(a->dtype, a->cols) * a->rows;
  EXPECT(a->rows == b->rows && a->cols == b->cols && a->dtype == b->dtype && !memcmp(x, y, bytes),
         "%s: rank %d's result differs from one device's", what, g_rank);
  free(x);
  free(y);
}

/* Rank r's batch: n(r) ids in [lo, hi) (bad ones where asked), a function of
 * (r, seed) only, so every rank can make every rank's batch. */
typedef struct batch_spec {
  size_t base, step;    /* rank r has base + r*step ids (0 ids for ranks in `empty`) */
  unsigned empty;       /* bit r: rank r passes no ids */
  int64_t lo, hi;       /* ids drawn from [lo, hi) */
  unsigned seed;
} batch_spec;

static size_t batch_len(const batch_spec *b, int r) {
  return (b->empty >> r) & 1 ? 0 : b->base + (size_t)r * b->step;
}

static void batch_ids(const batch_spec *b, int r, int64_t *out) {
  size_t n = batch_len(b, r);
  uint64_t span = (uint64_t)(b->hi - b->lo);
  for (size_t i = 0; i < n; i++) {
    uint64_t s = (uint64_t)b->seed * 1000003u + (uint64_t)r * 7919u + i * 104729u + 17u;
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    s ^= s >> 29;
    out[i] = b->lo + (int64_t)((s * 0xBF58476D1CE4E5B9ULL >> 17) % (span ? span : 1));
  }
}

/* Every rank's batch concatenated in rank order; *mine receives where this rank's starts. */
static int64_t *all_ids(const batch_spec *b, size_t *total, size_t *mine) {
  size_t n = 0;
  for (int r = 0; r < g_size; r++) n += batch_len(b, r);
  int64_t *all = malloc((n + 1) * sizeof *all);
  size_t at = 0;
  for (int r = 0; r < g_size; r++) {
    if (r == g_rank) *mine = at;
    batch_ids(b, r, all + at);
    at += batch_len(b, r);
  }
  *total = n;
  return all;
}

/* The same status on every rank? (and this rank's, for the message) */
static void expect_status(clembed_context *ctx, clembed_status got, clembed_status want, const char *what) {
  EXPECT(got == want, "%s: rank %d got %s, expected %s: %s", what, g_rank, clembed_status_string(got),
         clembed_status_string(want), clembed_context_message(ctx));
}

static void expect_argument(clembed_context *ctx, const char *op, const char *argument, const char *what) {
  clembed_error_detail d;
  clembed_context_error(ctx, &d);
  EXPECT(!strcmp(d.operation, op) && !strcmp(d.argument, argument), "%s: rank %d: detail %s '%s', expected %s '%s' (%s)",
         what, g_rank, d.operation, d.argument, op, argument, clembed_context_message(ctx));
}

static const clembed_dtype DTS[2] = {CLEMBED_F32, CLEMBED_BF16};
static const char *const DNAME[7] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q6_K"};

/* ------------------------------------------------------------------- tables */

/* Rank r owns [r*R/n, (r+1)*R/n): the shards partition the table, for any R
 * (0, fewer than the ranks, not divisible by them). */
TU_CASE(shards_cover_the_table) {
  const size_t Rs[] = {0, 1, 2, 3, 5, 7, 13, 100};
  for (size_t k = 0; k < sizeof Rs / sizeof Rs[0]; k++) {
    size_t R = Rs[k], first = 99, sum = 0;
    clembed_mpi_table *t = NULL;
    OK(ctx, clembed_mpi_table_create(ctx, MPI_COMM_WORLD, R, 3, CLEMBED_F32, &t));
    clembed_matrix shard = {0};
    OK(ctx, clembed_mpi_table_shard(t, &first, &shard));
    size_t want_first = (size_t)g_rank * R / (size_t)g_size, want_n = (size_t)(g_rank + 1) * R / (size_t)g_size - want_first;
    EXPECT(first == want_first && shard.rows == want_n && shard.cols == 3 && shard.dtype == CLEMBED_F32,
           "R %zu: rank %d has rows %zu + %zu, expected %zu + %zu", R, g_rank, first, shard.rows, want_first, want_n);
    MPI_Allreduce(&shard.rows, &sum, 1, MPI_UNSIGNED_LONG, MPI_SUM, MPI_COMM_WORLD);
    EXPECT(sum == R, "R %zu: the shards hold %zu rows", R, sum);
    /* zeros, as clembed_matrix_create */
    float *h = tu_read_f32(ctx, &shard);
    size_t nz = 0;
    for (size_t i = 0; i < shard.rows * 3; i++) nz += h[i] != 0.0f;
    EXPECT(nz == 0, "R %zu: %zu non-zero elements in a new table", R, nz);
    free(h);
    clembed_matrix st;
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_table_state(t, 1, NULL, &st)); /* no step yet */
    clembed_mpi_table_release(t);
  }
  clembed_mpi_table_release(NULL);
  FAILS(NULL, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_table_shard(NULL, NULL, NULL));
}

/* Ranks that disagree on the shape, or one that passes a bad argument: every
 * rank fails, none hangs, no table is made. */
TU_CASE(create_refusals) {
  clembed_mpi_table *t = (clembed_mpi_table *)&t;
  size_t last = (size_t)g_size - 1;
  /* rows differ on the last rank (with one rank: an unknown dtype there) */
  clembed_status s = clembed_mpi_table_create(ctx, MPI_COMM_WORLD, 10 + (g_size > 1 && (size_t)g_rank == last), 4,
                                              g_size > 1 ? CLEMBED_F32 : (clembed_dtype)99, &t);
  expect_status(ctx, s, CLEMBED_ERR_INVALID_ARGUMENT, "rows differ");
  EXPECT(t == NULL, "a refused create gave a table");
  if (g_size > 1) {
    EXPECT(strstr(clembed_context_message(ctx), "disagree on rows") != NULL, "message: %s", clembed_context_message(ctx));
    expect_argument(ctx, "clembed_mpi_table_create", "rows", "rows differ");
  }
  s = clembed_mpi_table_create(ctx, MPI_COMM_WORLD, 10, 4, (size_t)g_rank == last ? CLEMBED_BF16 : CLEMBED_F32, &t);
  expect_status(ctx, s, g_size > 1 ? CLEMBED_ERR_INVALID_ARGUMENT : CLEMBED_OK, "dtypes differ");
  if (g_size > 1) { /* every rank's value, by its name: "rank 0 passed F32, rank 1 passed BF16" */
    char want[96];
    if (last == 1) snprintf(want, sizeof want, "rank 0 passed F32, rank 1 passed BF16");
    else snprintf(want, sizeof want, "ranks 0-%zu passed F32, rank %zu passed BF16", last - 1, last);
    const char *m = clembed_context_message(ctx);
    EXPECT(strstr(m, "disagree on dtype") && strstr(m, want) && !strstr(m, "this rank passed") &&
               strstr(m, "the same call with the same arguments"),
           "message: %s (want %s)", m, want);
  }
  clembed_mpi_table_release(t);
  t = NULL;
  /* one rank's own bad argument: it names it, the others name the rank */
  s = clembed_mpi_table_create(ctx, MPI_COMM_WORLD, 10, (size_t)g_rank == last ? 33 : 32, CLEMBED_Q8_0, &t);
  expect_status(ctx, s, CLEMBED_ERR_INVALID_ARGUMENT, "Q8_0 with 33 cols");
  if ((size_t)g_rank == last) expect_argument(ctx, "clembed_mpi_table_create", "cols", "its own cols");
  s = clembed_mpi_table_create(ctx, MPI_COMM_WORLD, 10, 4, CLEMBED_F32, g_rank == 0 ? NULL : &t);
  expect_status(ctx, s, CLEMBED_ERR_INVALID_ARGUMENT, "a NULL t on rank 0");
  if (g_rank == 0) expect_argument(ctx, "clembed_mpi_table_create", "t", "NULL t");
  else EXPECT(strstr(clembed_context_message(ctx), "rank 0") != NULL, "message: %s", clembed_context_message(ctx));
  EXPECT(t == NULL, "a refused create gave a table");
  /* a Q8_0 table of whole blocks is fine */
  OK(ctx, clembed_mpi_table_create(ctx, MPI_COMM_WORLD, 10, 64, CLEMBED_Q8_0, &t));
  clembed_mpi_table_release(t);
}

/* init_normal / init_uniform: the whole table's bits, F32 and BF16, rows not
 * divisible by the ranks; disagreeing parameters change nothing. */
TU_CASE(init_whole_table_bits) {
  const size_t R = 13, C = 5;
  for (int k = 0; k < 2; k++) {
    clembed_mpi_table *t = NULL;
    clembed_matrix whole = {0};
    OK(ctx, clembed_mpi_table_create(ctx, MPI_COMM_WORLD, R, C, DTS[k], &t));
    OK(ctx, clembed_matrix_create(ctx, R, C, DTS[k], &whole));
    OK(ctx, clembed_mpi_table_init_normal(t, 0.5f, 2.0f, 1234));
    OK(ctx, clembed_matrix_init_normal(ctx, &whole, 0.5f, 2.0f, 1234, 0, NULL, NULL));
    expect_table(ctx, t, &whole, "init_normal");
    OK(ctx, clembed_mpi_table_init_uniform(t, -0.25f, 0.75f, (uint64_t)77 << 33));
    OK(ctx, clembed_matrix_init_uniform(ctx, &whole, -0.25f, 0.75f, (uint64_t)77 << 33, 0, NULL, NULL));
    expect_table(ctx, t, &whole, "init_uniform");
    /* the seed differs on the last rank: nothing changes anywhere */
    clembed_status s = clembed_mpi_table_init_normal(t, 0.0f, 1.0f, g_rank == g_size - 1 && g_size > 1 ? 6 : 5);
    expect_status(ctx, s, g_size > 1 ? CLEMBED_ERR_INVALID_ARGUMENT : CLEMBED_OK, "seeds differ");
    if (g_size > 1) {
      expect_argument(ctx, "clembed_mpi_table_init_normal", "seed", "seeds differ");
      expect_table(ctx, t, &whole, "after a refused init");
    }
    /* a negative std everywhere: the core's refusal, on every rank */
    s = clembed_mpi_table_init_normal(t, 0.0f, -1.0f, 5);
    expect_status(ctx, s, CLEMBED_ERR_INVALID_ARGUMENT, "negative std");
    clembed_mpi_table_release(t);
    clembed_matrix_release(&whole);
  }
  FAILS(NULL, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_table_init_uniform(NULL, 0.0f, 1.0f, 1));
}

/* ------------------------------------------------------------------- files */

static char g_dir[256];

/* A .safetensors file of two R x C F32 tensors, "a" and "b" (both v). */
static void write_two_tensors(const char *path, const float *v, size_t R, size_t C) {
  char hdr[256];
  size_t bytes = R * C * sizeof *v;
  int n = snprintf(hdr, sizeof hdr,
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[%zu,%zu],\"data_offsets\":[0,%zu]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[%zu,%zu],\"data_offsets\":[%zu,%zu]}}",
                   R, C, bytes, R, C, bytes, 2 * bytes);
  while (n % 8) hdr[n++] = ' ';
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)n >> (8 * i));
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fwrite(len, 1, 8, f);
  fwrite(hdr, 1, (size_t)n, f);
  fwrite(v, 1, bytes, f);
  fwrite(v, 1, bytes, f);
  fclose(f);
}

/* The shard holds the bits of clembed_matrix_load's rows (F32, BF16, Q8_0
 * quantized on loading); a lookup of the Q8_0 table equals one device's. */
TU_CASE(load_rows_of_a_file) {
  const size_t R = 11, C = 64;
  float *h = table_values(R, C, 5);
  char path[320];
  if (g_rank == 0) {
    snprintf(g_dir, sizeof g_dir, "%s/clembed_mpi_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) g_dir[0] = '\0';
    snprintf(path, sizeof path, "%s/table.npy", g_dir);
    tu_write_npy_f32(path, h, R, C);
  }
  MPI_Bcast(g_dir, sizeof g_dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  snprintf(path, sizeof path, "%s/table.npy", g_dir);
  clembed_file *f = NULL;
  OK(NULL, clembed_file_open(path, &f));
  const clembed_dtype dts[3] = {CLEMBED_F32, CLEMBED_BF16, CLEMBED_Q8_0};
  for (int k = 0; k < 3; k++) {
    clembed_mpi_table *t = NULL;
    clembed_matrix whole = {0};
    OK(ctx, clembed_mpi_table_load(ctx, MPI_COMM_WORLD, f, NULL, dts[k], &t));
    OK(ctx, clembed_matrix_load(ctx, f, NULL, dts[k], &whole));
    if (t && whole.buffer) expect_table(ctx, t, &whole, DNAME[dts[k]]);
    clembed_mpi_table_release(t);
    clembed_matrix_release(&whole);
  }
  /* the ranks disagree on the dtype; one rank names a tensor the file lacks */
  clembed_mpi_table *t = NULL;
  clembed_status s = clembed_mpi_table_load(ctx, MPI_COMM_WORLD, f, NULL, g_rank ? CLEMBED_F16 : CLEMBED_F32, &t);
  expect_status(ctx, s, g_size > 1 ? CLEMBED_ERR_INVALID_ARGUMENT : CLEMBED_OK, "dtypes differ");
  clembed_mpi_table_release(t);
  t = NULL;
  s = clembed_mpi_table_load(ctx, MPI_COMM_WORLD, f, g_rank == g_size - 1 ? "nope" : NULL, CLEMBED_F32, &t);
  expect_status(ctx, s, CLEMBED_ERR_INVALID_ARGUMENT, "a missing tensor on one rank");
  EXPECT(t == NULL, "a refused load gave a table");
  clembed_file_close(f);
  /* the ranks name different tensors of one file: the message names each rank's */
  char two[340];
  snprintf(two, sizeof two, "%s/two.safetensors", g_dir);
  if (g_rank == 0) write_two_tensors(two, h, R, C);
  MPI_Barrier(MPI_COMM_WORLD);
  f = NULL;
  OK(NULL, clembed_file_open(two, &f));
  if (f) {
    t = NULL;
    s = clembed_mpi_table_load(ctx, MPI_COMM_WORLD, f, g_rank ? "b" : "a", CLEMBED_F32, &t);
    expect_status(ctx, s, g_size > 1 ? CLEMBED_ERR_INVALID_ARGUMENT : CLEMBED_OK, "names differ");
    if (g_size > 1) {
      char want[96];
      if (g_size == 2) snprintf(want, sizeof want, "disagree on name (rank 0 passed 'a', rank 1 passed 'b')");
      else snprintf(want, sizeof want, "disagree on name (rank 0 passed 'a', ranks 1-%d passed 'b')", g_size - 1);
      EXPECT(strstr(clembed_context_message(ctx), want) != NULL, "message: %s (want %s)", clembed_context_message(ctx),
             want);
    }
    clembed_mpi_table_release(t);
    clembed_file_close(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == 0) {
    unlink(two);
    unlink(path);
    rmdir(g_dir);
  }
  free(h);
}

/* ------------------------------------------------------------------ forward */

/* clembed_mpi_embed against clembed_embed of the whole table, per rank. */
static void check_embed(clembed_context *ctx, size_t R, size_t C, clembed_dtype dt, const batch_spec *b,
                        const clembed_embed_options *opt, clembed_dtype out_dt, clembed_status want,
                        const char *what) {
  float *h = table_values(R, C, 3);
  clembed_mpi_table *t = make_table(ctx, R, C, dt, h);
  clembed_matrix whole = whole_table(ctx, R, C, dt, h);
  size_t n = batch_len(b, g_rank);
  int64_t *mine = malloc((n + 1) * sizeof *mine);
  batch_ids(b, g_rank, mine);
  clembed_ids ids = tu_ids(ctx, mine, n, g_rank % 2 ? CLEMBED_I32 : CLEMBED_I64);
  clembed_matrix out = {0}, ref = {0};
  OK(ctx, clembed_matrix_create(ctx, n, C, out_dt, &out));
  OK(ctx, clembed_matrix_create(ctx, n, C, out_dt, &ref));
  clembed_status s = clembed_mpi_embed(t, &ids, opt, &out);
  expect_status(ctx, s, want, what);
  clembed_error_detail got = {0};
  clembed_context_error(ctx, &got);
  OK(ctx, clembed_embed(ctx, &whole, &ids, opt, &ref, 0, NULL, NULL));
  clembed_status rs = clembed_finish(ctx);
  EXPECT(rs == want, "%s: one device gives %s (rank %d)", what, clembed_status_string(rs), g_rank);
  if (want == CLEMBED_ERR_INDEX_OUT_OF_RANGE) { /* the same bad id named, by the sharded call */
    clembed_error_detail d;
    clembed_context_error(ctx, &d);
    EXPECT(!strcmp(got.operation, "clembed_mpi_embed") && !strcmp(got.argument, d.argument) && got.index == d.index &&
               got.value == d.value,
           "%s: rank %d: %s %s[%lld] = %lld, one device %s[%lld] = %lld", what, g_rank, got.operation, got.argument,
           (long long)got.index, (long long)got.value, d.argument, (long long)d.index, (long long)d.value);
  }
  expect_same(ctx, &out, &ref, what);
  clembed_matrix_release(&out);
  clembed_matrix_release(&ref);
  clembed_matrix_release(&whole);
  clembed_ids_release(&ids);
  clembed_mpi_table_release(t);
  free(mine);
  free(h);
}

/* F32 and BF16 tables; defaults, scale and sinusoid positions with padding,
 * a learned position table with per-rank sequence offsets and dropout, F16
 * and BF16 outputs; repeated ids; batches of different lengths per rank. */
TU_CASE(embed_equals_one_device) {
  const size_t R = 37, C = 6;
  batch_spec b = {5, 3, 0, 0, (int64_t)R, 11};
  for (int k = 0; k < 2; k++) {
    clembed_embed_options o = clembed_embed_defaults();
    check_embed(ctx, R, C, DTS[k], &b, NULL, CLEMBED_F32, CLEMBED_OK, "defaults");
    o.scale = 2.5f;
    o.positions = CLEMBED_POSITIONS_SINUSOID;
    o.seq_len = 4;
    o.position_offset = 3 + (size_t)g_rank; /* each rank's own */
    o.padding_idx = -1;
    b.hi = (int64_t)R; /* the last row (the padding row) occurs */
    check_embed(ctx, R, C, DTS[k], &b, &o, CLEMBED_F32, CLEMBED_OK, "scale, sinusoid, padding -1");
    check_embed(ctx, R, C, DTS[k], &b, &o, CLEMBED_BF16, CLEMBED_OK, "a BF16 output");
    /* padding_keeps_row: the padding row fetched and read as stored, on the device's path and
     * (plain options) the host's */
    o.padding_keeps_row = 1;
    check_embed(ctx, R, C, DTS[k], &b, &o, CLEMBED_F32, CLEMBED_OK, "padding_keeps_row, scale, sinusoid");
    clembed_embed_options kp = clembed_embed_defaults();
    kp.padding_idx = -1;
    check_embed(ctx, R, C, DTS[k], &b, &kp, CLEMBED_F32, CLEMBED_OK, "padding -1, plain options");
    kp.padding_keeps_row = 1;
    check_embed(ctx, R, C, DTS[k], &b, &kp, CLEMBED_F32, CLEMBED_OK, "padding_keeps_row, plain options");
    /* learned positions, sequence offsets and dropout, each rank's own */
    clembed_matrix pt = {0};
    float *ph = table_values(16, C, 9);
    OK(ctx, clembed_matrix_create(ctx, 16, C, CLEMBED_F32, &pt));
    OK(ctx, clembed_matrix_write(ctx, &pt, ph, CLEMBED_F32));
    int64_t offs[8];
    for (int i = 0; i < 8; i++) offs[i] = (g_rank + i) % 5;
    clembed_ids so = tu_ids(ctx, offs, 8, CLEMBED_I64);
    o = clembed_embed_defaults();
    o.positions = CLEMBED_POSITIONS_TABLE;
    o.position_table = &pt;
    o.seq_len = 3;
    o.sequence_offsets = &so;
    o.dropout = 0.25f;
    o.dropout_seed = 100 + (uint64_t)g_rank;
    check_embed(ctx, R, C, DTS[k], &b, &o, CLEMBED_F16, CLEMBED_OK, "learned positions, dropout");
    clembed_ids_release(&so);
    clembed_matrix_release(&pt);
    free(ph);
  }
}

/* The index policies against the whole table: CLAMP and ZERO with ids past
 * both ends, WRAP with negative ids; a Q8_0 table (rows travel dequantized). */
TU_CASE(embed_policies_and_q8_0) {
  const size_t R = 23, C = 32;
  batch_spec b = {6, 2, 0, -30, 30, 21};
  clembed_embed_options o = clembed_embed_defaults();
  o.policy = CLEMBED_INDEX_CLAMP;
  check_embed(ctx, R, C, CLEMBED_F32, &b, &o, CLEMBED_F32, CLEMBED_OK, "CLAMP");
  o.policy = CLEMBED_INDEX_ZERO;
  check_embed(ctx, R, C, CLEMBED_BF16, &b, &o, CLEMBED_F32, CLEMBED_OK, "ZERO");
  o.policy = CLEMBED_INDEX_WRAP;
  b.lo = -(int64_t)R;
  b.hi = (int64_t)R;
  o.padding_idx = 3;
  check_embed(ctx, R, C, CLEMBED_F32, &b, &o, CLEMBED_F32, CLEMBED_OK, "WRAP, padding 3");
  b.lo = 0;
  o = clembed_embed_defaults();
  o.scale = 0.5f;
  check_embed(ctx, R, C, CLEMBED_Q8_0, &b, &o, CLEMBED_F32, CLEMBED_OK, "a Q8_0 table");
  /* FBGEMM's row-wise tables: their rows travel dequantized too */
  check_embed(ctx, R, 40, CLEMBED_I8_ROWWISE, &b, &o, CLEMBED_F32, CLEMBED_OK, "an I8_ROWWISE table");
  check_embed(ctx, R, 24, CLEMBED_I4_TBE, &b, &o, CLEMBED_F32, CLEMBED_OK, "an I4_TBE table");
  check_embed(ctx, R, 10, CLEMBED_FP8_ROWWISE, &b, &o, CLEMBED_F32, CLEMBED_OK, "an FP8_ROWWISE table");
}

/* A bad id on one rank: that rank's call returns it (ids, its position, its
 * value; a zero row), the others return their rows. */
TU_CASE(embed_bad_id_on_one_rank) {
  const size_t R = 19, C = 4;
  int bad = g_size - 1;
  batch_spec b = {7, 1, 0, 0, (int64_t)R, 31};
  /* the last rank's batch reaches past the table: ids up to R + 5 */
  batch_spec mine = b;
  if (g_rank == bad) mine.hi = (int64_t)R + 6;
  clembed_embed_options o = clembed_embed_defaults();
  /* whether the last rank's batch has a bad id depends on the draw: look */
  size_t n = batch_len(&mine, g_rank);
  int64_t *h = malloc((n + 1) * sizeof *h);
  batch_ids(&mine, g_rank, h);
  int has_bad = 0;
  for (size_t i = 0; i < n; i++) has_bad |= h[i] >= (int64_t)R;
  free(h);
  EXPECT(g_rank != bad || has_bad, "the test's batch for rank %d has no bad id", bad);
  check_embed(ctx, R, C, CLEMBED_F32, &mine, &o, CLEMBED_F32,
              g_rank == bad ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK, "CHECK, a bad id on the last rank");
  if (g_rank == bad)
    EXPECT(strstr(clembed_context_message(ctx), "[0, 19)") != NULL, "message: %s", clembed_context_message(ctx));
  o.policy = CLEMBED_INDEX_WRAP;
  check_embed(ctx, R, C, CLEMBED_BF16, &mine, &o, CLEMBED_F32,
              g_rank == bad ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK, "WRAP, a bad id on the last rank");
}

/* Ranks with no ids; every id owned by one rank (the first, then the last);
 * fewer rows than ranks; an empty table (every id bad). */
TU_CASE(embed_imbalance_and_tiny_tables) {
  const size_t R = 41, C = 5;
  batch_spec b = {9, 2, 0x5, 0, (int64_t)(R / (size_t)g_size) ? (int64_t)(R / (size_t)g_size) : 1, 41};
  check_embed(ctx, R, C, CLEMBED_F32, &b, NULL, CLEMBED_F32, CLEMBED_OK, "ranks 0 and 2 pass no ids; rank 0 owns all");
  b.empty = 0;
  b.lo = (int64_t)((size_t)(g_size - 1) * R / (size_t)g_size);
  b.hi = (int64_t)R;
  check_embed(ctx, R, C, CLEMBED_BF16, &b, NULL, CLEMBED_F32, CLEMBED_OK, "the last rank owns every id");
  batch_spec tiny = {4, 1, 0, 0, 2, 43};
  check_embed(ctx, 2, C, CLEMBED_F32, &tiny, NULL, CLEMBED_F32, CLEMBED_OK, "2 rows");
  clembed_embed_options o = clembed_embed_defaults();
  o.policy = CLEMBED_INDEX_CLAMP;
  check_embed(ctx, 1, C, CLEMBED_BF16, &tiny, &o, CLEMBED_F32, CLEMBED_OK, "1 row (ids 0 and 1), CLAMP");
  o.policy = CLEMBED_INDEX_ZERO;
  check_embed(ctx, 0, C, CLEMBED_F32, &tiny, &o, CLEMBED_F32, CLEMBED_OK, "an empty table, ZERO");
  tiny.empty = ~1u; /* only rank 0 passes ids: only it fails */
  check_embed(ctx, 0, C, CLEMBED_F32, &tiny, NULL, CLEMBED_F32, g_rank == 0 ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK,
              "an empty table, CHECK");
  batch_spec none = {0, 0, 0, 0, 1, 1};
  check_embed(ctx, R, 0, CLEMBED_F32, &b, NULL, CLEMBED_F32, CLEMBED_OK, "0 columns");
  check_embed(ctx, R, C, CLEMBED_F32, &none, NULL, CLEMBED_F32, CLEMBED_OK, "no ids anywhere");
}

/* One rank's out of the wrong shape: it is refused there, the others get
 * their rows; a disagreeing scale: every rank refuses. */
TU_CASE(embed_refusals) {
  const size_t R = 17, C = 4;
  float *h = table_values(R, C, 7);
  clembed_mpi_table *t = make_table(ctx, R, C, CLEMBED_F32, h);
  clembed_matrix whole = whole_table(ctx, R, C, CLEMBED_F32, h);
  int64_t mine[6] = {1, 16, 8, 8, 0, (int64_t)(g_rank * 4) % 17};
  clembed_ids ids = tu_ids(ctx, mine, 6, CLEMBED_I64);
  clembed_matrix out = {0}, ref = {0}, wrong = {0};
  OK(ctx, clembed_matrix_create(ctx, 6, C, CLEMBED_F32, &out));
  OK(ctx, clembed_matrix_create(ctx, 6, C, CLEMBED_F32, &ref));
  OK(ctx, clembed_matrix_create(ctx, 5, C, CLEMBED_F32, &wrong));
  OK(ctx, clembed_lookup(ctx, &whole, &ids, &ref, 0, NULL, NULL));
  clembed_status s = clembed_mpi_embed(t, &ids, NULL, g_rank == 0 ? &wrong : &out);
  expect_status(ctx, s, g_rank == 0 ? CLEMBED_ERR_INVALID_ARGUMENT : CLEMBED_OK, "rank 0's out is 5 x 4");
  if (g_rank == 0) expect_argument(ctx, "clembed_mpi_embed", "out", "wrong shape");
  else expect_same(ctx, &out, &ref, "the others' rows beside a refused rank");
  clembed_embed_options o = clembed_embed_defaults();
  o.scale = g_rank == g_size - 1 ? 2.0f : 1.0f;
  s = clembed_mpi_embed(t, &ids, &o, &out);
  expect_status(ctx, s, g_size > 1 ? CLEMBED_ERR_INVALID_ARGUMENT : CLEMBED_OK, "scales differ");
  if (g_size > 1) expect_argument(ctx, "clembed_mpi_embed", "scale", "scales differ");
  o = clembed_embed_defaults();
  o.padding_idx = 17; /* outside the table, on every rank */
  s = clembed_mpi_embed(t, &ids, &o, &out);
  expect_status(ctx, s, CLEMBED_ERR_INVALID_ARGUMENT, "padding_idx 17");
  o = clembed_embed_defaults();
  o.padding_idx = 3;
  o.padding_keeps_row = g_rank == g_size - 1; /* agreed, as padding_idx */
  s = clembed_mpi_embed(t, &ids, &o, &out);
  expect_status(ctx, s, g_size > 1 ? CLEMBED_ERR_INVALID_ARGUMENT : CLEMBED_OK, "padding_keeps_row differs");
  if (g_size > 1) expect_argument(ctx, "clembed_mpi_embed", "padding_keeps_row", "padding_keeps_row differs");
  /* an option struct without a valid struct_size (a caller of clembed 0.3) on rank 0: its own refusal */
  o = clembed_embed_defaults();
  if (g_rank == 0) o.struct_size = 0;
  s = clembed_mpi_embed(t, &ids, &o, &out);
  expect_status(ctx, s, g_rank == 0 ? CLEMBED_ERR_INVALID_ARGUMENT : CLEMBED_OK, "rank 0's opt.struct_size 0");
  if (g_rank == 0) expect_argument(ctx, "clembed_mpi_embed", "opt", "struct_size 0");
  else expect_same(ctx, &out, &ref, "the others' rows beside a refused struct");
  s = clembed_mpi_embed(t, g_rank == 0 ? NULL : &ids, NULL, &out);
  expect_status(ctx, s, g_rank == 0 ? CLEMBED_ERR_INVALID_ARGUMENT : CLEMBED_OK, "NULL ids on rank 0");
  FAILS(NULL, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_embed(NULL, &ids, NULL, &out));
  clembed_matrix_release(&out);
  clembed_matrix_release(&ref);
  clembed_matrix_release(&wrong);
  clembed_matrix_release(&whole);
  clembed_ids_release(&ids);
  clembed_mpi_table_release(t);
  free(h);
}

/* Tables holding NaNs (signalling and quiet, with payloads), infinities,
 * signed zeros and denormals: the forward with plain options gives one
 * device's bits (a NaN made quiet as the device's lookup makes it), whether a
 * rank's rows come from another rank or from its own shard. F32, F16, BF16. */
TU_CASE(embed_odd_values) {
  const size_t R = 11;
  const uint32_t f32[7] = {0x7f800001u, 0xffa00000u, 0x7fc12345u, 0x00000001u, 0x80000000u, 0x7f800000u, 0x807fffffu};
  const uint16_t f16[6] = {0x7c01, 0xfd55, 0x7e00, 0x0001, 0x8000, 0x7c00};
  const uint16_t bf16[6] = {0x7f81, 0xffa5, 0x7fc3, 0x0001, 0x8000, 0x7f80};
  const clembed_dtype dts[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  /* 8 columns: rows of whole 16-byte vectors (streaming copies where the host copies the rows to the output);
   * 5: rows that are not (memcpy) */
  for (int k = 0; k < 6; k++) {
    clembed_dtype dt = dts[k % 3];
    const size_t C = k < 3 ? 8 : 5;
    size_t es = clembed_dtype_size(dt);
    unsigned char *h = calloc(R * C * es + 1, 1);
    float *v = table_values(R, C, 23);
    for (size_t i = 0; i < R * C; i++) { /* ordinary values (F16, BF16: the top half of some floats' bits) */
      uint32_t u;
      memcpy(&u, &v[i], 4);
      if (dt == CLEMBED_F32) memcpy(h + 4 * i, &u, 4);
      else ((uint16_t *)h)[i] = (uint16_t)((dt == CLEMBED_F16 ? 0x3c00u | (u >> 22 & 0x3ff) : u >> 16) & 0xbfff);
    }
    for (size_t r = 1; r < R; r += 2) /* odd rows hold one special value each, at a column of their own (the
                                          * signalling NaNs in the last ones) */
      for (size_t c = C - 1 - (r / 2) % C, j = 0; j < 1; j++) {
        size_t i = r * C + c, q = (r / 2) % (dt == CLEMBED_F32 ? 7 : 6);
        if (dt == CLEMBED_F32) memcpy(h + 4 * i, &f32[q], 4);
        else ((uint16_t *)h)[i] = dt == CLEMBED_F16 ? f16[q] : bf16[q];
      }
    clembed_mpi_table *t = NULL;
    OK(ctx, clembed_mpi_table_create(ctx, MPI_COMM_WORLD, R, C, dt, &t));
    size_t first = 0;
    clembed_matrix shard = {0}, whole = {0};
    OK(ctx, clembed_mpi_table_shard(t, &first, &shard));
    if (shard.rows) OK(ctx, clembed_matrix_write(ctx, &shard, h + first * C * es, dt));
    OK(ctx, clembed_matrix_create(ctx, R, C, dt, &whole));
    OK(ctx, clembed_matrix_write(ctx, &whole, h, dt));
    /* every row, twice, from every rank (its own rows too) */
    int64_t ids_h[2 * 11];
    for (size_t i = 0; i < 2 * R; i++) ids_h[i] = (int64_t)((i * 7 + (size_t)g_rank) % R);
    clembed_ids ids = tu_ids(ctx, ids_h, 2 * R, CLEMBED_I64);
    clembed_matrix out = {0}, ref = {0};
    OK(ctx, clembed_matrix_create(ctx, 2 * R, C, dt, &out));
    OK(ctx, clembed_matrix_create(ctx, 2 * R, C, dt, &ref));
    OK(ctx, clembed_mpi_embed(t, &ids, NULL, &out));
    OK(ctx, clembed_lookup(ctx, &whole, &ids, &ref, 0, NULL, NULL));
    OK(ctx, clembed_finish(ctx));
    char what[64];
    snprintf(what, sizeof what, "%s table of odd values, %zu cols", DNAME[dt], C);
    expect_same(ctx, &out, &ref, what);
    clembed_matrix_release(&out);
    clembed_matrix_release(&ref);
    if (dt != CLEMBED_F32) { /* to an F32 output: every value widened, a NaN made quiet, as one device does */
      OK(ctx, clembed_matrix_create(ctx, 2 * R, C, CLEMBED_F32, &out));
      OK(ctx, clembed_matrix_create(ctx, 2 * R, C, CLEMBED_F32, &ref));
      OK(ctx, clembed_mpi_embed(t, &ids, NULL, &out));
      OK(ctx, clembed_lookup(ctx, &whole, &ids, &ref, 0, NULL, NULL));
      OK(ctx, clembed_finish(ctx));
      snprintf(what, sizeof what, "%s table of odd values, %zu cols, to F32", DNAME[dt], C);
      expect_same(ctx, &out, &ref, what);
      clembed_matrix_release(&out);
      clembed_matrix_release(&ref);
    }
    clembed_matrix_release(&whole);
    clembed_ids_release(&ids);
    clembed_mpi_table_release(t);
    free(v);
    free(h);
  }
}

/* --------------------------------------------------------------------- step */

/* Stochastic rounding in the steps of check_steps and check_bag_steps (both
 * sides, with this seed; 0: off): set by step_stochastic_rounding. */
static int g_sr;
static const uint64_t SR_SEED = 0xC0FFEE12345ull;

/* Rank r's gradient rows (n x C), as float values of dtype gdt. */
static float *grad_values(int r, size_t n, size_t C, unsigned seed, clembed_dtype gdt) {
  float *g = malloc((n * C + 1) * sizeof *g);
  for (size_t i = 0; i < n * C; i++) g[i] = ref_round(value(1000 + seed, (uint64_t)r * 100000 + i / C, i % C), gdt);
  return g;
}

typedef struct step_case {
  clembed_optimizer_kind kind;
  clembed_dtype table;
  clembed_dtype grad[2];        /* even ranks, odd ranks */
  clembed_backward_options bo;  /* dropout_seed: plus the rank */
  float weight_decay;
  int steps;
} step_case;

/* `steps` sharded steps against clembed_optimizer_step of one device on the
 * concatenated batch (with dropout: the ranks' masked gradients, masked on the
 * host by the reference). The table and the states, every step. */
static void check_steps(clembed_context *ctx, size_t R, size_t C, const batch_spec *b0, const step_case *sc,
                        int bad_rank, const char *what) {
  float *h = table_values(R, C, 13);
  clembed_mpi_table *t = make_table(ctx, R, C, sc->table, h);
  clembed_matrix whole = whole_table(ctx, R, C, sc->table, h), s1 = {0}, s2 = {0};
  OK(ctx, clembed_matrix_create(ctx, R, sc->kind == CLEMBED_ROWWISE_ADAGRAD ? 1 : C, CLEMBED_F32, &s1));
  OK(ctx, clembed_matrix_create(ctx, R, C, CLEMBED_F32, &s2));
  for (int step = 1; step <= sc->steps; step++) {
    batch_spec b = *b0;
    b.seed += (unsigned)step;
    size_t total = 0, at = 0;
    int64_t *all = all_ids(&b, &total, &at);
    size_t n = batch_len(&b, g_rank);
    if (bad_rank >= 0) { /* a bad id at the bad rank's position 2, in everyone's concatenation */
      size_t start = 0;
      for (int r = 0; r < bad_rank; r++) start += batch_len(&b, r);
      all[start + 2] = (int64_t)R + 3;
    }
    /* every rank's gradient; the concatenation, masked per rank as each rank's forward masks it */
    float *gall = malloc((total * C + 1) * sizeof *gall), *gmine = NULL;
    size_t off = 0;
    for (int r = 0; r < g_size; r++) {
      size_t nr = batch_len(&b, r);
      float *g = grad_values(r, nr, C, (unsigned)step, sc->grad[r % 2]);
      clembed_backward_options ro = sc->bo;
      ro.dropout_seed = sc->bo.dropout_seed + (uint64_t)r;
      for (size_t i = 0; i < nr; i++)
        for (size_t c = 0; c < C; c++) gall[(off + i) * C + c] = ref_masked_grad(g[i * C + c], i, c, C, &ro);
      if (r == g_rank) gmine = g;
      else free(g);
      off += nr;
    }
    /* the sharded step */
    clembed_ids ids = tu_ids(ctx, all + at, n, g_rank % 2 ? CLEMBED_I32 : CLEMBED_I64);
    clembed_matrix grad = {0};
    OK(ctx, clembed_matrix_create(ctx, n, C, sc->grad[g_rank % 2], &grad));
    if (n && C) OK(ctx, clembed_matrix_write(ctx, &grad, gmine, CLEMBED_F32));
    clembed_backward_options bo = sc->bo;
    bo.dropout_seed = sc->bo.dropout_seed + (uint64_t)g_rank;
    clembed_optimizer o = clembed_optimizer_defaults(sc->kind);
    o.learning_rate = 0.05f;
    o.weight_decay = sc->weight_decay;
    o.step = (uint64_t)step;
    o.stochastic_rounding = g_sr;
    o.seed = SR_SEED;
    clembed_status s = clembed_mpi_optimizer_step(t, &grad, &ids, &bo, &o);
    expect_status(ctx, s, g_rank == bad_rank ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK, what);
    if (g_rank == bad_rank) {
      clembed_error_detail d;
      clembed_context_error(ctx, &d);
      EXPECT(!strcmp(d.operation, "clembed_mpi_optimizer_step") && !strcmp(d.argument, "ids") && d.index == 2 &&
                 d.value == (int64_t)R + 3,
             "%s: detail %s %s[%lld] = %lld", what, d.operation, d.argument, (long long)d.index, (long long)d.value);
    }
    /* one device on the concatenation (masked already: no dropout there) */
    clembed_ids wids = tu_ids(ctx, all, total, CLEMBED_I64);
    clembed_matrix wgrad = {0};
    OK(ctx, clembed_matrix_create(ctx, total, C, CLEMBED_F32, &wgrad));
    if (total && C) OK(ctx, clembed_matrix_write(ctx, &wgrad, gall, CLEMBED_F32));
    clembed_backward_options wo = sc->bo;
    wo.dropout = 0.0f;
    o.state = &s1;
    o.state2 = &s2;
    OK(ctx, clembed_optimizer_step(ctx, &wgrad, &wids, &wo, &o, &whole, 0, NULL, NULL));
    clembed_status ws = clembed_finish(ctx);
    EXPECT(ws == (bad_rank >= 0 ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK), "%s: one device: %s", what,
           clembed_status_string(ws));
    char name[160];
    snprintf(name, sizeof name, "%s, step %d: the table", what, step);
    expect_table(ctx, t, &whole, name);
    clembed_optimizer_kind kind;
    clembed_matrix st = {0};
    size_t first = 0;
    clembed_mpi_table_shard(t, &first, NULL);
    if (sc->kind != CLEMBED_SGD) {
      OK(ctx, clembed_mpi_table_state(t, 1, &kind, &st));
      EXPECT(kind == sc->kind, "state kind %d", (int)kind);
      snprintf(name, sizeof name, "%s, step %d: the state", what, step);
      if (st.buffer) expect_shard(ctx, &st, first, &s1, name);
    } else {
      FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_table_state(t, 1, &kind, &st));
    }
    if (sc->kind == CLEMBED_ADAM) {
      OK(ctx, clembed_mpi_table_state(t, 2, NULL, &st));
      snprintf(name, sizeof name, "%s, step %d: the second state", what, step);
      if (st.buffer) expect_shard(ctx, &st, first, &s2, name);
    }
    clembed_ids_release(&ids);
    clembed_ids_release(&wids);
    clembed_matrix_release(&grad);
    clembed_matrix_release(&wgrad);
    free(all);
    free(gall);
    free(gmine);
  }
  clembed_matrix_release(&whole);
  clembed_matrix_release(&s1);
  clembed_matrix_release(&s2);
  clembed_mpi_table_release(t);
  free(h);
}

/* Every optimizer on F32 and BF16 tables: plain; scale, scale_grad_by_freq,
 * padding and weight decay with F16 gradients; per-rank dropout with BF16 and
 * F32 gradients side by side. Three steps each (the states carry over). */
TU_CASE(step_equals_one_device) {
  const size_t R = 29, C = 5;
  /* ids from 14 rows, about three tokens a row on every rank: the order of the additions shows */
  batch_spec b = {40, 4, 0, 0, 14, 51};
  const clembed_optimizer_kind kinds[4] = {CLEMBED_SGD, CLEMBED_ADAGRAD, CLEMBED_ROWWISE_ADAGRAD, CLEMBED_ADAM};
  for (int k = 0; k < 4; k++)
    for (int d = 0; d < 2; d++) {
      char what[96];
      step_case sc = {kinds[k], DTS[d], {CLEMBED_F32, CLEMBED_F32}, clembed_backward_defaults(), 0.0f, 3};
      snprintf(what, sizeof what, "kind %d, %s table, plain", (int)kinds[k], DNAME[DTS[d]]);
      check_steps(ctx, R, C, &b, &sc, -1, what);
      sc.bo.scale = 1.5f;
      sc.bo.scale_grad_by_freq = 1;
      sc.bo.padding_idx = 4;
      sc.weight_decay = 0.01f;
      sc.grad[0] = sc.grad[1] = CLEMBED_F16;
      snprintf(what, sizeof what, "kind %d, %s table, scale, freq, padding, decay, F16 grads", (int)kinds[k],
               DNAME[DTS[d]]);
      check_steps(ctx, R, C, &b, &sc, -1, what);
      sc = (step_case){kinds[k], DTS[d], {CLEMBED_BF16, CLEMBED_F32}, clembed_backward_defaults(), 0.0f, 2};
      sc.bo.dropout = 0.3f;
      sc.bo.dropout_seed = 500;
      sc.bo.policy = CLEMBED_INDEX_WRAP;
      snprintf(what, sizeof what, "kind %d, %s table, dropout per rank, BF16 and F32 grads", (int)kinds[k],
               DNAME[DTS[d]]);
      batch_spec wb = b;
      wb.lo = -(int64_t)R;
      check_steps(ctx, R, C, &wb, &sc, -1, what);
    }
}

/* A bad id on one rank (it gets the error; the step is one device's, where
 * the bad id adds nothing); ranks with no ids; one owner for every id; fewer
 * rows than ranks; CLAMP. */
TU_CASE(step_robustness) {
  const size_t R = 31, C = 3;
  step_case sc = {CLEMBED_ADAM, CLEMBED_F32, {CLEMBED_F32, CLEMBED_F32}, clembed_backward_defaults(), 0.0f, 2};
  batch_spec b = {6, 3, 0, 0, (int64_t)R, 61};
  check_steps(ctx, R, C, &b, &sc, g_size - 1, "a bad id on the last rank");
  sc.kind = CLEMBED_ROWWISE_ADAGRAD;
  sc.bo.scale_grad_by_freq = 1;
  batch_spec one = {20, 5, 0x2, 0, (int64_t)(R / (size_t)g_size), 62};
  check_steps(ctx, R, C, &one, &sc, -1, "rank 1 passes no ids; rank 0 owns every id");
  one.lo = (int64_t)((size_t)(g_size - 1) * R / (size_t)g_size);
  one.hi = (int64_t)R;
  one.empty = 0x1;
  check_steps(ctx, R, C, &one, &sc, -1, "the last rank owns every id");
  batch_spec tiny = {7, 2, 0, -2, 5, 63};
  sc.bo.policy = CLEMBED_INDEX_CLAMP;
  sc.table = CLEMBED_BF16;
  check_steps(ctx, 2, C, &tiny, &sc, -1, "2 rows, CLAMP");
  sc.kind = CLEMBED_ADAGRAD;
  sc.bo.policy = CLEMBED_INDEX_ZERO;
  check_steps(ctx, 3, C, &tiny, &sc, -1, "3 rows, ZERO");
  batch_spec none = {0, 0, 0, 0, 1, 64};
  check_steps(ctx, R, C, &none, &sc, -1, "no ids anywhere");
}

/* Refusals: a wrong gradient shape on one rank, states passed in, a position
 * gradient, a disagreeing learning rate, a bad learning rate, another kind
 * after the first step: every rank fails and no row changes. */
TU_CASE(step_refusals) {
  const size_t R = 21, C = 4;
  float *h = table_values(R, C, 17);
  clembed_mpi_table *t = make_table(ctx, R, C, CLEMBED_F32, h);
  clembed_matrix whole = whole_table(ctx, R, C, CLEMBED_F32, h), grad = {0}, wrong = {0}, pg = {0};
  int64_t mine[5] = {0, 20, 3, 3, (int64_t)g_rank};
  clembed_ids ids = tu_ids(ctx, mine, 5, CLEMBED_I32);
  OK(ctx, clembed_matrix_create(ctx, 5, C, CLEMBED_F32, &grad));
  OK(ctx, clembed_matrix_create(ctx, 5, C + 1, CLEMBED_F32, &wrong));
  OK(ctx, clembed_matrix_create(ctx, 16, C, CLEMBED_F32, &pg));
  float *gh = grad_values(g_rank, 5, C, 1, CLEMBED_F32);
  OK(ctx, clembed_matrix_write(ctx, &grad, gh, CLEMBED_F32));
  clembed_optimizer o = clembed_optimizer_defaults(CLEMBED_ADAGRAD);
  const char *op = "clembed_mpi_optimizer_step";
  int last = g_size - 1;
  clembed_status s = clembed_mpi_optimizer_step(t, g_rank == last ? &wrong : &grad, &ids, NULL, &o);
  expect_status(ctx, s, CLEMBED_ERR_INVALID_ARGUMENT, "grad_out of the wrong shape on the last rank");
  if (g_rank == last) expect_argument(ctx, op, "grad_out", "wrong grad shape");
  else EXPECT(strstr(clembed_context_message(ctx), "refused") != NULL, "message %s", clembed_context_message(ctx));
  clembed_matrix st;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_table_state(t, 1, NULL, &st)); /* no state was kept */
  o.state = &pg;
  s = clembed_mpi_optimizer_step(t, &grad, &ids, NULL, &o);
  expect_status(ctx, s, CLEMBED_ERR_INVALID_ARGUMENT, "a state passed in");
  expect_argument(ctx, op, "state", "a state passed in");
  o.state = NULL;
  clembed_backward_options bo = clembed_backward_defaults();
  bo.position_grad = &pg;
  s = clembed_mpi_optimizer_step(t, &grad, &ids, &bo, &o);
  expect_status(ctx, s, CLEMBED_ERR_INVALID_ARGUMENT, "a position_grad");
  expect_argument(ctx, op, "position_grad", "a position_grad");
  o.learning_rate = g_rank == last ? 0.5f : 0.25f;
  s = clembed_mpi_optimizer_step(t, &grad, &ids, NULL, &o);
  expect_status(ctx, s, g_size > 1 ? CLEMBED_ERR_INVALID_ARGUMENT : CLEMBED_OK, "learning rates differ");
  if (g_size > 1) {
    expect_argument(ctx, op, "learning_rate", "learning rates differ");
    expect_table(ctx, t, &whole, "after refused steps");
    o.learning_rate = 0.5f;
    OK(ctx, clembed_mpi_optimizer_step(t, &grad, &ids, NULL, &o)); /* the first step: ADAGRAD's state */
  }
  o.learning_rate = -1.0f; /* the core's own check, on every rank */
  s = clembed_mpi_optimizer_step(t, &grad, &ids, NULL, &o);
  expect_status(ctx, s, CLEMBED_ERR_INVALID_ARGUMENT, "a negative learning rate");
  expect_argument(ctx, op, "learning_rate", "a negative learning rate");
  clembed_optimizer adam = clembed_optimizer_defaults(CLEMBED_ADAM);
  adam.step = 1;
  s = clembed_mpi_optimizer_step(t, &grad, &ids, NULL, &adam);
  expect_status(ctx, s, CLEMBED_ERR_INVALID_ARGUMENT, "ADAM after ADAGRAD");
  expect_argument(ctx, op, "kind", "another kind");
  EXPECT(strstr(clembed_context_message(ctx), "belongs to ADAGRAD; a step of ADAM cannot use it") != NULL,
         "the kinds by name: %s", clembed_context_message(ctx));
  adam.step = 0;
  FAILS(NULL, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_optimizer_step(NULL, &grad, &ids, NULL, &adam));
  clembed_matrix_release(&grad);
  clembed_matrix_release(&wrong);
  clembed_matrix_release(&pg);
  clembed_matrix_release(&whole);
  clembed_ids_release(&ids);
  clembed_mpi_table_release(t);
  free(gh);
  free(h);
}

/* Outputs and gradients that are views of wider matrices (an offset, ld past
 * cols): the forward writes the view's rows only, every byte around them as
 * it was, and the step reads the view's rows; with repeated ids, the padding
 * row and a bad id under ZERO; F32 and F16 (the rows as they travel), and a
 * BF16 output of an F32 table. */
TU_CASE(views_of_wider_matrices) {
  const size_t R = 23, C = 6, W = C + 3, OFF = 2;
  const clembed_dtype tdt[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_F32};
  const clembed_dtype odt[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  batch_spec b = {9, 2, 0, 0, (int64_t)R + 2, 71}; /* ids past the table: ZERO drops them */
  for (int k = 0; k < 3; k++) {
    float *h = table_values(R, C, 19 + (unsigned)k);
    clembed_mpi_table *t = make_table(ctx, R, C, tdt[k], h);
    clembed_matrix whole = whole_table(ctx, R, C, tdt[k], h);
    size_t total = 0, at = 0, n = batch_len(&b, g_rank);
    int64_t *all = all_ids(&b, &total, &at);
    clembed_ids ids = tu_ids(ctx, all + at, n, g_rank % 2 ? CLEMBED_I32 : CLEMBED_I64);
    /* the forward into rows OFF .. of a wider matrix filled with other values */
    clembed_matrix wide = {0}, wref = {0};
    float *fill = table_values(n + 1, W, 99);
    OK(ctx, clembed_matrix_create(ctx, n + 1, W, odt[k], &wide));
    OK(ctx, clembed_matrix_create(ctx, n + 1, W, odt[k], &wref));
    OK(ctx, clembed_matrix_write(ctx, &wide, fill, CLEMBED_F32));
    OK(ctx, clembed_matrix_write(ctx, &wref, fill, CLEMBED_F32));
    clembed_matrix out = wide, ref = wref;
    out.offset = ref.offset = OFF;
    out.rows = ref.rows = n;
    out.cols = ref.cols = C;
    out.ld = ref.ld = W;
    clembed_embed_options o = clembed_embed_defaults();
    o.policy = CLEMBED_INDEX_ZERO;
    o.padding_idx = 5;
    OK(ctx, clembed_mpi_embed(t, &ids, &o, &out));
    OK(ctx, clembed_embed(ctx, &whole, &ids, &o, &ref, 0, NULL, NULL));
    OK(ctx, clembed_finish(ctx));
    char what[96];
    snprintf(what, sizeof what, "%s table, %s output view", DNAME[tdt[k]], DNAME[odt[k]]);
    expect_same(ctx, &wide, &wref, what);
    /* the step from rows OFF .. of a wider gradient matrix */
    if (k < 2) {
      clembed_dtype gdt = tdt[k];
      float *gall = malloc((total * C + 1) * sizeof *gall), *gwide = calloc((n + 1) * W + 1, sizeof *gwide);
      for (int r = 0, off = 0; r < g_size; off += (int)batch_len(&b, r), r++) {
        float *g = grad_values(r, batch_len(&b, r), C, 5, gdt);
        memcpy(gall + (size_t)off * C, g, batch_len(&b, r) * C * sizeof *g);
        if (r == g_rank)
          for (size_t i = 0; i < n; i++) memcpy(gwide + OFF + i * W, g + i * C, C * sizeof *g);
        free(g);
      }
      clembed_matrix gw = {0}, wgrad = {0}, s1 = {0};
      OK(ctx, clembed_matrix_create(ctx, n + 1, W, gdt, &gw));
      OK(ctx, clembed_matrix_write(ctx, &gw, gwide, CLEMBED_F32));
      clembed_matrix grad = gw;
      grad.offset = OFF;
      grad.rows = n;
      grad.cols = C;
      grad.ld = W;
      clembed_backward_options bo = clembed_backward_defaults();
      bo.policy = CLEMBED_INDEX_ZERO;
      bo.padding_idx = 5;
      clembed_optimizer opt = clembed_optimizer_defaults(CLEMBED_ADAGRAD);
      OK(ctx, clembed_mpi_optimizer_step(t, &grad, &ids, &bo, &opt));
      clembed_ids wids = tu_ids(ctx, all, total, CLEMBED_I64);
      OK(ctx, clembed_matrix_create(ctx, total, C, CLEMBED_F32, &wgrad));
      if (total) OK(ctx, clembed_matrix_write(ctx, &wgrad, gall, CLEMBED_F32));
      OK(ctx, clembed_matrix_create(ctx, R, C, CLEMBED_F32, &s1));
      opt.state = &s1;
      OK(ctx, clembed_optimizer_step(ctx, &wgrad, &wids, &bo, &opt, &whole, 0, NULL, NULL));
      OK(ctx, clembed_finish(ctx));
      snprintf(what, sizeof what, "%s table, a step from a %s gradient view", DNAME[tdt[k]], DNAME[gdt]);
      expect_table(ctx, t, &whole, what);
      clembed_ids_release(&wids);
      clembed_matrix_release(&gw);
      clembed_matrix_release(&wgrad);
      clembed_matrix_release(&s1);
      free(gall);
      free(gwide);
    }
    clembed_matrix_release(&wide);
    clembed_matrix_release(&wref);
    clembed_matrix_release(&whole);
    clembed_ids_release(&ids);
    clembed_mpi_table_release(t);
    free(all);
    free(fill);
    free(h);
  }
}

/* --------------------------------------------------------------------- bags */

/* Rank r's bags: bags + r*step of them (none for ranks in `empty`), each of
 * `fixed` ids (offsets NULL) or of 0 .. 5 ids (some empty), ids drawn from
 * [lo, hi), one F32 weight per id; a function of (r, seed) only. */
typedef struct bag_spec {
  size_t bags, step, fixed;
  unsigned empty;
  int64_t lo, hi;
  unsigned seed;
} bag_spec;

typedef struct bag_batch {
  size_t nb, n;
  int64_t *ids, *offsets; /* offsets: nb + 1 entries */
  float *w;
} bag_batch;

static uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t s = a * 1000003u + b * 7919u + c * 104729u + 17u;
  s = s * 6364136223846793005ULL + 1442695040888963407ULL;
  s ^= s >> 29;
  return s * 0xBF58476D1CE4E5B9ULL >> 17;
}

static bag_batch bag_batch_of(const bag_spec *s, int r) {
  bag_batch b = {0};
  b.nb = (s->empty >> r) & 1 ? 0 : s->bags + (size_t)r * s->step;
  b.offsets = malloc((b.nb + 1) * sizeof *b.offsets);
  b.offsets[0] = 0;
  for (size_t k = 0; k < b.nb; k++)
    b.offsets[k + 1] = b.offsets[k] + (int64_t)(s->fixed ? s->fixed : mix(s->seed, (uint64_t)r, k) % 6);
  b.n = (size_t)b.offsets[b.nb];
  b.ids = malloc((b.n + 1) * sizeof *b.ids);
  b.w = malloc((b.n + 1) * sizeof *b.w);
  uint64_t span = (uint64_t)(s->hi - s->lo);
  for (size_t i = 0; i < b.n; i++) {
    b.ids[i] = s->lo + (int64_t)(mix(s->seed + 5, (uint64_t)r + 100, i) % (span ? span : 1));
    b.w[i] = value(s->seed + 9, (uint64_t)r, i);
  }
  return b;
}

static void bag_batch_free(bag_batch *b) {
  free(b->ids);
  free(b->offsets);
  free(b->w);
}

/* Every rank's bags concatenated in rank order (the offsets shifted); *mine
 * receives this rank's batch, *first_bag where its bags start. A bad id
 * (rows + 3) at position 2 of bad_rank's ids, in both. */
static bag_batch bag_all(const bag_spec *s, size_t R, int bad_rank, bag_batch *mine, size_t *first_bag) {
  bag_batch all = {0};
  bag_batch *b = calloc((size_t)g_size, sizeof *b);
  for (int r = 0; r < g_size; r++) {
    b[r] = bag_batch_of(s, r);
    if (r == bad_rank && b[r].n > 2) b[r].ids[2] = (int64_t)R + 3;
    all.nb += b[r].nb;
    all.n += b[r].n;
  }
  all.ids = malloc((all.n + 1) * sizeof *all.ids);
  all.w = malloc((all.n + 1) * sizeof *all.w);
  all.offsets = malloc((all.nb + 1) * sizeof *all.offsets);
  size_t at = 0, bag = 0;
  all.offsets[0] = 0;
  for (int r = 0; r < g_size; r++) {
    if (r == g_rank) *first_bag = bag;
    memcpy(all.ids + at, b[r].ids, b[r].n * sizeof *all.ids);
    memcpy(all.w + at, b[r].w, b[r].n * sizeof *all.w);
    for (size_t k = 0; k < b[r].nb; k++) all.offsets[bag + k + 1] = (int64_t)at + b[r].offsets[k + 1];
    at += b[r].n;
    bag += b[r].nb;
  }
  for (int r = 0; r < g_size; r++) {
    if (r == g_rank) *mine = b[r];
    else bag_batch_free(&b[r]);
  }
  free(b);
  return all;
}

/* A batch's device inputs: ids, offsets (unless fixed), weights (if asked),
 * max_rows (MAX), of the index types given. */
typedef struct bag_dev {
  clembed_ids ids, offsets, max_rows;
  clembed_matrix w;
  clembed_bag_options o;
} bag_dev;

static void bag_upload(clembed_context *ctx, bag_dev *dp, const bag_batch *b, size_t C,
                       const clembed_bag_options *base, int weighted, int fixed, clembed_index_type it) {
  bag_dev d = {0};
  d.o = *base;
  d.ids = tu_ids(ctx, b->ids, b->n, it);
  if (!fixed) d.offsets = tu_ids(ctx, b->offsets, b->nb + 1, it);
  if (weighted) {
    OK(ctx, clembed_matrix_create(ctx, b->n, 1, CLEMBED_F32, &d.w));
    if (b->n) OK(ctx, clembed_matrix_write(ctx, &d.w, b->w, CLEMBED_F32));
  }
  if (base->mode == CLEMBED_BAG_MAX) {
    int64_t *z = calloc(b->nb * C + 1, sizeof *z);
    d.max_rows = tu_ids(ctx, z, b->nb * C, it);
    free(z);
  }
  *dp = d; /* the options point into *dp */
  if (weighted) dp->o.per_sample_weights = &dp->w;
  if (base->mode == CLEMBED_BAG_MAX) dp->o.max_rows = &dp->max_rows;
}

static void bag_dev_free(bag_dev *d) {
  clembed_ids_release(&d->ids);
  clembed_ids_release(&d->offsets);
  clembed_ids_release(&d->max_rows);
  clembed_matrix_release(&d->w);
}

static int64_t *ids_values(clembed_context *ctx, const clembed_ids *ids) {
  int64_t *h = calloc(ids->count + 1, sizeof *h);
  if (ids->type == CLEMBED_I64) {
    if (ids->count) OK(ctx, clembed_ids_read(ctx, ids, h));
  } else {
    int32_t *h32 = calloc(ids->count + 1, sizeof *h32);
    if (ids->count) OK(ctx, clembed_ids_read(ctx, ids, h32));
    for (size_t i = 0; i < ids->count; i++) h[i] = h32[i];
    free(h32);
  }
  return h;
}

/* The sharded forward of each rank's bags against clembed_embedding_bag of one
 * device on the concatenation: out and max_rows, bit for bit; a bad id on
 * bad_rank (its error there, OK elsewhere). */
static void check_bags(clembed_context *ctx, size_t R, size_t C, clembed_dtype dt, const bag_spec *s,
                       const clembed_bag_options *base, int weighted, clembed_dtype out_dt, int bad_rank,
                       const char *what) {
  float *h = table_values(R, C, 21);
  clembed_mpi_table *t = make_table(ctx, R, C, dt, h);
  clembed_matrix whole = whole_table(ctx, R, C, dt, h), out = {0}, wout = {0};
  bag_batch mine = {0};
  size_t first = 0;
  bag_batch all = bag_all(s, R, bad_rank, &mine, &first);
  bag_dev d, w;
  bag_upload(ctx, &d, &mine, C, base, weighted, s->fixed != 0, g_rank % 2 ? CLEMBED_I32 : CLEMBED_I64);
  bag_upload(ctx, &w, &all, C, base, weighted, s->fixed != 0, CLEMBED_I64);
  OK(ctx, clembed_matrix_create(ctx, mine.nb, C, out_dt, &out));
  OK(ctx, clembed_matrix_create(ctx, all.nb, C, out_dt, &wout));
  clembed_status st = clembed_mpi_embedding_bag(t, &d.ids, s->fixed ? NULL : &d.offsets, &d.o, &out);
  expect_status(ctx, st, g_rank == bad_rank ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK, what);
  if (g_rank == bad_rank) {
    clembed_error_detail e;
    clembed_context_error(ctx, &e);
    EXPECT(!strcmp(e.operation, "clembed_mpi_embedding_bag") && !strcmp(e.argument, "ids") && e.index == 2 &&
               e.value == (int64_t)R + 3,
           "%s: detail %s %s[%lld] = %lld", what, e.operation, e.argument, (long long)e.index, (long long)e.value);
  }
  OK(ctx, clembed_embedding_bag(ctx, &whole, &w.ids, s->fixed ? NULL : &w.offsets, &w.o, &wout, 0, NULL, NULL));
  clembed_status ws = clembed_finish(ctx);
  EXPECT(ws == (bad_rank >= 0 ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK), "%s: one device: %s", what,
         clembed_status_string(ws));
  clembed_matrix ref = rows_of(&wout, first, mine.nb);
  expect_same(ctx, &out, &ref, what);
  if (base->mode == CLEMBED_BAG_MAX) {
    int64_t *a = ids_values(ctx, &d.max_rows), *b = ids_values(ctx, &w.max_rows);
    size_t diff = 0;
    for (size_t i = 0; i < mine.nb * C; i++) diff += a[i] != b[first * C + i];
    EXPECT(diff == 0, "%s: rank %d: %zu max_rows differ from one device's", what, g_rank, diff);
    free(a);
    free(b);
  }
  bag_dev_free(&d);
  bag_dev_free(&w);
  bag_batch_free(&mine);
  bag_batch_free(&all);
  clembed_matrix_release(&out);
  clembed_matrix_release(&wout);
  clembed_matrix_release(&whole);
  clembed_mpi_table_release(t);
  free(h);
}

/* SUM, MEAN, MAX and weighted SUM; padding; empty bags and ranks with no bags;
 * fixed-size bags; F32, F16 and BF16 tables (and Q8_0) into F32, F16 and BF16
 * outputs; the index policies; a bad id on one rank. */
TU_CASE(bags_equal_one_device) {
  const size_t R = 23, C = 5;
  const clembed_bag_mode modes[3] = {CLEMBED_BAG_SUM, CLEMBED_BAG_MEAN, CLEMBED_BAG_MAX};
  const clembed_dtype tdts[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  bag_spec s = {6, 2, 0, 0, 0, 12, 71}; /* ids from 12 rows: rows repeat within and across bags */
  bag_spec fixed = {4, 1, 3, 0, 0, (int64_t)R, 72};
  for (int m = 0; m < 3; m++)
    for (int k = 0; k < 3; k++) {
      char what[128];
      clembed_bag_options o = clembed_bag_defaults();
      o.mode = modes[m];
      snprintf(what, sizeof what, "bags: mode %d, %s table", (int)modes[m], DNAME[tdts[k]]);
      check_bags(ctx, R, C, tdts[k], &s, &o, 0, CLEMBED_F32, -1, what);
      o.padding_idx = 3;
      snprintf(what, sizeof what, "bags: mode %d, %s table, padding, BF16 out", (int)modes[m], DNAME[tdts[k]]);
      check_bags(ctx, R, C, tdts[k], &s, &o, 0, CLEMBED_BF16, -1, what);
      o.padding_idx = CLEMBED_NO_PADDING;
      snprintf(what, sizeof what, "bags: mode %d, %s table, fixed bags, F16 out", (int)modes[m], DNAME[tdts[k]]);
      check_bags(ctx, R, C, tdts[k], &fixed, &o, 0, CLEMBED_F16, -1, what);
    }
  clembed_bag_options o = clembed_bag_defaults();
  check_bags(ctx, R, C, CLEMBED_F32, &s, &o, 1, CLEMBED_F32, -1, "bags: weighted SUM");
  o.padding_idx = -2;
  check_bags(ctx, R, C, CLEMBED_BF16, &s, &o, 1, CLEMBED_F32, -1, "bags: weighted SUM, padding -2, BF16 table");
  /* WRAP with negative ids; CLAMP past the end; ZERO drops; ranks with no bags */
  bag_spec wrap = {5, 1, 0, 0x2, -(int64_t)R, (int64_t)R, 73};
  o = clembed_bag_defaults();
  o.mode = CLEMBED_BAG_MAX;
  o.policy = CLEMBED_INDEX_WRAP;
  check_bags(ctx, R, C, CLEMBED_F32, &wrap, &o, 0, CLEMBED_F32, -1, "bags: MAX, WRAP, rank 1 has no bags");
  bag_spec past = {5, 1, 0, 0x1, 10, (int64_t)R + 6, 74};
  o.mode = CLEMBED_BAG_MEAN;
  o.policy = CLEMBED_INDEX_CLAMP;
  check_bags(ctx, R, C, CLEMBED_F32, &past, &o, 0, CLEMBED_F32, -1, "bags: MEAN, CLAMP, rank 0 has no bags");
  o.policy = CLEMBED_INDEX_ZERO;
  o.mode = CLEMBED_BAG_SUM;
  check_bags(ctx, R, C, CLEMBED_F32, &past, &o, 1, CLEMBED_F32, -1, "bags: weighted SUM, ZERO");
  /* Q8_0: the rows travel dequantized */
  o = clembed_bag_defaults();
  o.mode = CLEMBED_BAG_MEAN;
  check_bags(ctx, R, 64, CLEMBED_Q8_0, &s, &o, 0, CLEMBED_F32, -1, "bags: MEAN, Q8_0 table");
  check_bags(ctx, R, 40, CLEMBED_I8_TBE, &s, &o, 0, CLEMBED_F32, -1, "bags: MEAN, I8_TBE table");
  o.mode = CLEMBED_BAG_SUM;
  check_bags(ctx, R, 16, CLEMBED_I2_ROWWISE, &s, &o, 1, CLEMBED_F32, -1, "bags: weighted SUM, I2_ROWWISE table");
  /* fewer rows than ranks */
  bag_spec tiny = {3, 1, 0, 0, 0, 2, 75};
  o.mode = CLEMBED_BAG_MAX;
  check_bags(ctx, 2, C, CLEMBED_F32, &tiny, &o, 0, CLEMBED_F32, -1, "bags: MAX, 2 rows");
  /* a bad id on the last rank (its bags hold at least 3 ids) */
  bag_spec bad = {4, 1, 2, 0, 0, (int64_t)R, 76};
  for (int m = 0; m < 3; m++) {
    o = clembed_bag_defaults();
    o.mode = modes[m];
    check_bags(ctx, R, C, CLEMBED_F32, &bad, &o, 0, CLEMBED_F32, g_size - 1, "bags: a bad id on the last rank");
  }
}

/* `steps` sharded bag steps against clembed_bag_optimizer_step of one device
 * on the concatenated bags (MAX: the max_rows of each side's own forward, which
 * must agree): the table and the states, every step. */
static void check_bag_steps(clembed_context *ctx, size_t R, size_t C, clembed_dtype tdt, const bag_spec *s0,
                            const clembed_bag_options *base, int weighted, clembed_optimizer_kind kind,
                            clembed_dtype gdt, int steps, int bad_rank, const char *what) {
  float *h = table_values(R, C, 31);
  clembed_mpi_table *t = make_table(ctx, R, C, tdt, h);
  clembed_matrix whole = whole_table(ctx, R, C, tdt, h), s1 = {0}, s2 = {0};
  OK(ctx, clembed_matrix_create(ctx, R, kind == CLEMBED_ROWWISE_ADAGRAD ? 1 : C, CLEMBED_F32, &s1));
  OK(ctx, clembed_matrix_create(ctx, R, C, CLEMBED_F32, &s2));
  for (int step = 1; step <= steps; step++) {
    bag_spec s = *s0;
    s.seed += (unsigned)step * 10;
    bag_batch mine = {0};
    size_t first = 0;
    bag_batch all = bag_all(&s, R, bad_rank, &mine, &first);
    bag_dev d, w;
    bag_upload(ctx, &d, &mine, C, base, weighted, s.fixed != 0, g_rank % 2 ? CLEMBED_I32 : CLEMBED_I64);
    bag_upload(ctx, &w, &all, C, base, weighted, s.fixed != 0, CLEMBED_I64);
    const clembed_ids *offs = s.fixed ? NULL : &d.offsets, *woffs = s.fixed ? NULL : &w.offsets;
    char name[200];
    if (base->mode == CLEMBED_BAG_MAX) { /* each side's forward writes its max_rows */
      clembed_matrix out = {0}, wout = {0};
      OK(ctx, clembed_matrix_create(ctx, mine.nb, C, CLEMBED_F32, &out));
      OK(ctx, clembed_matrix_create(ctx, all.nb, C, CLEMBED_F32, &wout));
      clembed_status st = clembed_mpi_embedding_bag(t, &d.ids, offs, &d.o, &out);
      expect_status(ctx, st, g_rank == bad_rank ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK, what);
      clembed_embedding_bag(ctx, &whole, &w.ids, woffs, &w.o, &wout, 0, NULL, NULL);
      clembed_finish(ctx);
      snprintf(name, sizeof name, "%s, step %d: the forward", what, step);
      clembed_matrix ref = rows_of(&wout, first, mine.nb);
      expect_same(ctx, &out, &ref, name);
      clembed_matrix_release(&out);
      clembed_matrix_release(&wout);
    }
    /* every rank's gradient rows (rounded to gdt), and the concatenation */
    float *gall = malloc((all.nb * C + 1) * sizeof *gall);
    for (size_t i = 0; i < all.nb * C; i++) gall[i] = ref_round(value(2000 + (uint64_t)step, i / C, i % C), gdt);
    clembed_matrix grad = {0}, wgrad = {0};
    OK(ctx, clembed_matrix_create(ctx, mine.nb, C, gdt, &grad));
    OK(ctx, clembed_matrix_create(ctx, all.nb, C, gdt, &wgrad));
    if (mine.nb) OK(ctx, clembed_matrix_write(ctx, &grad, gall + first * C, CLEMBED_F32));
    if (all.nb) OK(ctx, clembed_matrix_write(ctx, &wgrad, gall, CLEMBED_F32));
    clembed_optimizer o = clembed_optimizer_defaults(kind);
    o.learning_rate = 0.05f;
    o.weight_decay = step == 2 ? 0.01f : 0.0f;
    o.step = (uint64_t)step;
    o.stochastic_rounding = g_sr;
    o.seed = SR_SEED;
    clembed_status st = clembed_mpi_bag_optimizer_step(t, &grad, &d.ids, offs, &d.o, &o);
    expect_status(ctx, st, g_rank == bad_rank ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK, what);
    if (g_rank == bad_rank) {
      clembed_error_detail e;
      clembed_context_error(ctx, &e);
      EXPECT(!strcmp(e.operation, "clembed_mpi_bag_optimizer_step") && !strcmp(e.argument, "ids") && e.index == 2 &&
                 e.value == (int64_t)R + 3,
             "%s: detail %s %s[%lld] = %lld", what, e.operation, e.argument, (long long)e.index, (long long)e.value);
    }
    o.state = &s1;
    o.state2 = &s2;
    OK(ctx, clembed_bag_optimizer_step(ctx, &wgrad, &w.ids, woffs, &w.o, &o, &whole, 0, NULL, NULL));
    clembed_status ws = clembed_finish(ctx);
    EXPECT(ws == (bad_rank >= 0 ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK), "%s: one device: %s", what,
           clembed_status_string(ws));
    snprintf(name, sizeof name, "%s, step %d: the table", what, step);
    expect_table(ctx, t, &whole, name);
    size_t row0 = 0;
    clembed_matrix st1 = {0};
    clembed_mpi_table_shard(t, &row0, NULL);
    if (kind != CLEMBED_SGD) {
      OK(ctx, clembed_mpi_table_state(t, 1, NULL, &st1));
      snprintf(name, sizeof name, "%s, step %d: the state", what, step);
      if (st1.buffer) expect_shard(ctx, &st1, row0, &s1, name);
    }
    if (kind == CLEMBED_ADAM) {
      OK(ctx, clembed_mpi_table_state(t, 2, NULL, &st1));
      snprintf(name, sizeof name, "%s, step %d: the second state", what, step);
      if (st1.buffer) expect_shard(ctx, &st1, row0, &s2, name);
    }
    clembed_matrix_release(&grad);
    clembed_matrix_release(&wgrad);
    free(gall);
    bag_dev_free(&d);
    bag_dev_free(&w);
    bag_batch_free(&mine);
    bag_batch_free(&all);
  }
  clembed_matrix_release(&whole);
  clembed_matrix_release(&s1);
  clembed_matrix_release(&s2);
  clembed_mpi_table_release(t);
  free(h);
}

/* Every optimizer and mode (weighted SUM and padding too), F32 and BF16 tables,
 * F32 and F16 gradients, fixed-size bags, three steps each (the states carry
 * over); a bad id on one rank. Ids from few rows: the order of the additions
 * shows, and under MAX some rows of a bag are never its max (not stepped). */
TU_CASE(bag_step_equals_one_device) {
  const size_t R = 19, C = 4;
  const clembed_optimizer_kind kinds[4] = {CLEMBED_SGD, CLEMBED_ADAGRAD, CLEMBED_ROWWISE_ADAGRAD, CLEMBED_ADAM};
  const clembed_bag_mode modes[3] = {CLEMBED_BAG_SUM, CLEMBED_BAG_MEAN, CLEMBED_BAG_MAX};
  bag_spec s = {5, 2, 0, 0, 0, 10, 81};
  bag_spec fixed = {3, 1, 4, 0, 0, 10, 82};
  for (int k = 0; k < 4; k++)
    for (int m = 0; m < 3; m++) {
      char what[128];
      clembed_bag_options o = clembed_bag_defaults();
      o.mode = modes[m];
      snprintf(what, sizeof what, "bag step: kind %d, mode %d, F32", (int)kinds[k], (int)modes[m]);
      check_bag_steps(ctx, R, C, CLEMBED_F32, &s, &o, 0, kinds[k], CLEMBED_F32, 3, -1, what);
      o.padding_idx = 2;
      snprintf(what, sizeof what, "bag step: kind %d, mode %d, BF16 table, F16 grads, padding, fixed bags",
               (int)kinds[k], (int)modes[m]);
      check_bag_steps(ctx, R, C, CLEMBED_BF16, &fixed, &o, 0, kinds[k], CLEMBED_F16, 2, -1, what);
    }
  clembed_bag_options o = clembed_bag_defaults();
  check_bag_steps(ctx, R, C, CLEMBED_F32, &s, &o, 1, CLEMBED_ADAM, CLEMBED_F32, 3, -1, "bag step: weighted SUM, ADAM");
  o.padding_idx = 5;
  check_bag_steps(ctx, R, C, CLEMBED_F16, &s, &o, 1, CLEMBED_ADAGRAD, CLEMBED_BF16, 2, -1,
                  "bag step: weighted SUM, padding, F16 table, BF16 grads, ADAGRAD");
  bag_spec bad = {4, 1, 3, 0, 0, (int64_t)R, 83};
  for (int m = 0; m < 3; m++) {
    o = clembed_bag_defaults();
    o.mode = modes[m];
    check_bag_steps(ctx, R, C, CLEMBED_F32, &bad, &o, 0, CLEMBED_ADAM, CLEMBED_F32, 2, g_size - 1,
                    "bag step: a bad id on the last rank");
  }
  bag_spec tiny = {3, 1, 0, 0x1, 0, 2, 84};
  o = clembed_bag_defaults();
  o.mode = CLEMBED_BAG_MAX;
  check_bag_steps(ctx, 2, C, CLEMBED_F32, &tiny, &o, 0, CLEMBED_ROWWISE_ADAGRAD, CLEMBED_F32, 2, -1,
                  "bag step: MAX, 2 rows, rank 0 has no bags");
}

/* Stochastic rounding (clembed_optimizer.stochastic_rounding): the sharded
 * token and bag steps of F16 and BF16 tables equal one device's on the whole
 * table bit for bit, every kind, so the random bits are those of each row in
 * the whole table (each shard steps with first_row its first row) and any
 * rank count gives the same table. A rank whose seed differs is refused. */
TU_CASE(step_stochastic_rounding) {
  const size_t R = 29, C = 37; /* 37: the vector columns and a tail */
  batch_spec b = {40, 4, 0, 0, 29, 52};
  const clembed_optimizer_kind kinds[4] = {CLEMBED_SGD, CLEMBED_ADAGRAD, CLEMBED_ROWWISE_ADAGRAD, CLEMBED_ADAM};
  const clembed_dtype dts[2] = {CLEMBED_F16, CLEMBED_BF16};
  g_sr = 1;
  for (int k = 0; k < 4; k++)
    for (int d = 0; d < 2; d++) {
      char what[128];
      step_case sc = {kinds[k], dts[d], {CLEMBED_F32, CLEMBED_F32}, clembed_backward_defaults(), 0.01f, 3};
      snprintf(what, sizeof what, "stochastic rounding: kind %d, %s table", (int)kinds[k], DNAME[dts[d]]);
      check_steps(ctx, R, C, &b, &sc, -1, what);
      bag_spec s = {5, 2, 0, 0, 0, (int64_t)R, 85};
      clembed_bag_options o = clembed_bag_defaults();
      o.mode = d ? CLEMBED_BAG_MEAN : CLEMBED_BAG_SUM;
      snprintf(what, sizeof what, "stochastic rounding: bag step, kind %d, %s table", (int)kinds[k], DNAME[dts[d]]);
      check_bag_steps(ctx, R, C, dts[d], &s, &o, 0, kinds[k], CLEMBED_F32, 2, -1, what);
    }
  g_sr = 0;
  /* the seed must agree */
  float *h = table_values(R, C, 43);
  clembed_mpi_table *t = make_table(ctx, R, C, CLEMBED_BF16, h);
  int64_t ids_h[3] = {1, 2, 3};
  clembed_ids ids = tu_ids(ctx, ids_h, 3, CLEMBED_I64);
  clembed_matrix grad = {0};
  OK(ctx, clembed_matrix_create(ctx, 3, C, CLEMBED_F32, &grad));
  clembed_optimizer o = clembed_optimizer_defaults(CLEMBED_SGD);
  o.stochastic_rounding = 1;
  o.seed = g_size > 1 && g_rank == g_size - 1 ? 8 : 7;
  clembed_status s = clembed_mpi_optimizer_step(t, &grad, &ids, NULL, &o);
  expect_status(ctx, s, g_size > 1 ? CLEMBED_ERR_INVALID_ARGUMENT : CLEMBED_OK, "seeds that differ");
  if (g_size > 1) expect_argument(ctx, "clembed_mpi_optimizer_step", "seed", "seeds that differ");
  o.seed = 7;
  o.stochastic_rounding = 2;
  s = clembed_mpi_optimizer_step(t, &grad, &ids, NULL, &o);
  expect_status(ctx, s, CLEMBED_ERR_INVALID_ARGUMENT, "stochastic_rounding 2");
  expect_argument(ctx, "clembed_mpi_optimizer_step", "stochastic_rounding", "stochastic_rounding 2");
  clembed_ids_release(&ids);
  clembed_matrix_release(&grad);
  clembed_mpi_table_release(t);
  free(h);
}

/* Refusals: the mode differs on the last rank (every rank refuses, nothing is
 * stepped, none hangs); MAX without max_rows on one rank; a bad offset in a
 * step; a NULL table. */
TU_CASE(bag_refusals) {
  const size_t R = 11, C = 3;
  float *h = table_values(R, C, 41);
  clembed_mpi_table *t = make_table(ctx, R, C, CLEMBED_F32, h);
  clembed_matrix whole = whole_table(ctx, R, C, CLEMBED_F32, h), out = {0}, grad = {0};
  int64_t ids_h[6] = {0, 4, 4, 10, 7, (int64_t)g_rank}, offs_h[3] = {0, 2, 6}, bad_offs[3] = {0, 4, 3};
  clembed_ids ids = tu_ids(ctx, ids_h, 6, CLEMBED_I64), offs = tu_ids(ctx, offs_h, 3, CLEMBED_I32);
  clembed_ids boffs = tu_ids(ctx, bad_offs, 3, CLEMBED_I64);
  OK(ctx, clembed_matrix_create(ctx, 2, C, CLEMBED_F32, &out));
  OK(ctx, clembed_matrix_create(ctx, 2, C, CLEMBED_F32, &grad));
  float *gh = grad_values(g_rank, 2, C, 3, CLEMBED_F32);
  OK(ctx, clembed_matrix_write(ctx, &grad, gh, CLEMBED_F32));
  int last = g_size - 1;
  clembed_bag_options o = clembed_bag_defaults();
  o.mode = g_rank == last ? CLEMBED_BAG_MEAN : CLEMBED_BAG_SUM;
  clembed_status s = clembed_mpi_embedding_bag(t, &ids, &offs, &o, &out);
  expect_status(ctx, s, g_size > 1 ? CLEMBED_ERR_INVALID_ARGUMENT : CLEMBED_OK, "bag modes differ");
  if (g_size > 1) expect_argument(ctx, "clembed_mpi_embedding_bag", "mode", "bag modes differ");
  clembed_optimizer sgd = clembed_optimizer_defaults(CLEMBED_SGD);
  s = clembed_mpi_bag_optimizer_step(t, &grad, &ids, &offs, &o, &sgd);
  expect_status(ctx, s, g_size > 1 ? CLEMBED_ERR_INVALID_ARGUMENT : CLEMBED_OK, "bag step modes differ");
  if (g_size > 1) {
    expect_argument(ctx, "clembed_mpi_bag_optimizer_step", "mode", "bag step modes differ");
    expect_table(ctx, t, &whole, "after a refused bag step");
  }
  /* a pruned table's remap: for one device's bags, refused on every rank naming remap */
  {
    int64_t rm_h[11] = {0, 1, -1, 3, 4, 5, 6, 7, 8, 9, 10};
    clembed_ids rm = tu_ids(ctx, rm_h, 11, CLEMBED_I64);
    clembed_bag_options ro = clembed_bag_defaults();
    ro.remap = &rm;
    s = clembed_mpi_embedding_bag(t, &ids, &offs, &ro, &out);
    expect_status(ctx, s, CLEMBED_ERR_UNSUPPORTED, "a remap in the MPI bag");
    expect_argument(ctx, "clembed_mpi_embedding_bag", "remap", "a remap in the MPI bag");
    s = clembed_mpi_bag_optimizer_step(t, &grad, &ids, &offs, &ro, &sgd);
    expect_status(ctx, s, CLEMBED_ERR_UNSUPPORTED, "a remap in the MPI bag step");
    expect_argument(ctx, "clembed_mpi_bag_optimizer_step", "remap", "a remap in the MPI bag step");
    if (g_size > 1) expect_table(ctx, t, &whole, "after a refused remap step"); /* (1 rank: the step above ran) */
    clembed_embed_options eo = clembed_embed_defaults();
    eo.remap = &rm;
    clembed_matrix eout = {0};
    OK(ctx, clembed_matrix_create(ctx, 6, C, CLEMBED_F32, &eout));
    s = clembed_mpi_embed(t, &ids, &eo, &eout);
    expect_status(ctx, s, CLEMBED_ERR_UNSUPPORTED, "a remap in the MPI lookup");
    expect_argument(ctx, "clembed_mpi_embed", "remap", "a remap in the MPI lookup");
    clembed_matrix_release(&eout);
    clembed_ids_release(&rm);
  }
  /* MAX without max_rows on the last rank: it names max_rows, the others the rank */
  clembed_ids mr = {0};
  int64_t z[6] = {0};
  mr = tu_ids(ctx, z, 2 * C, CLEMBED_I64);
  o.mode = CLEMBED_BAG_MAX;
  o.max_rows = g_rank == last ? NULL : &mr;
  OK(ctx, clembed_mpi_embedding_bag(t, &ids, &offs, &o, &out)); /* max_rows is optional in the forward */
  s = clembed_mpi_bag_optimizer_step(t, &grad, &ids, &offs, &o, &sgd);
  expect_status(ctx, s, CLEMBED_ERR_INVALID_ARGUMENT, "MAX step without max_rows on the last rank");
  if (g_rank == last) expect_argument(ctx, "clembed_mpi_bag_optimizer_step", "max_rows", "no max_rows");
  else EXPECT(strstr(clembed_context_message(ctx), "refused") != NULL, "message %s", clembed_context_message(ctx));
  /* a bad offset on rank 0: its own INDEX_OUT_OF_RANGE, nothing stepped anywhere */
  o = clembed_bag_defaults();
  clembed_matrix shard = {0};
  OK(ctx, clembed_mpi_table_shard(t, NULL, &shard));
  void *before = raw(ctx, &shard);
  s = clembed_mpi_bag_optimizer_step(t, &grad, &ids, g_rank == 0 ? &boffs : &offs, &o, &sgd);
  expect_status(ctx, s, g_rank == 0 ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_ERR_INVALID_ARGUMENT, "a bad offset");
  if (g_rank == 0) {
    clembed_error_detail d;
    clembed_context_error(ctx, &d);
    EXPECT(!strcmp(d.argument, "offsets") && d.index == 2 && d.value == 3, "bad offset: detail %s[%lld] = %lld",
           d.argument, (long long)d.index, (long long)d.value);
  }
  void *after = raw(ctx, &shard);
  EXPECT(!memcmp(before, after, clembed_dtype_row_bytes(shard.dtype, shard.cols) * shard.rows),
         "a step refused for a bad offset changed rank %d's rows", g_rank);
  free(before);
  free(after);
  /* a bad offset in the forward: the deferred error of the rank's own pooling */
  s = clembed_mpi_embedding_bag(t, &ids, g_rank == 0 ? &boffs : &offs, &o, &out);
  expect_status(ctx, s, g_rank == 0 ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK, "a bad offset in the forward");
  if (g_rank == 0) expect_argument(ctx, "clembed_mpi_embedding_bag", "offsets", "a bad offset in the forward");
  FAILS(NULL, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_embedding_bag(NULL, &ids, &offs, &o, &out));
  FAILS(NULL, CLEMBED_ERR_INVALID_ARGUMENT, clembed_mpi_bag_optimizer_step(NULL, &grad, &ids, &offs, &o, &sgd));
  clembed_ids_release(&ids);
  clembed_ids_release(&offs);
  clembed_ids_release(&boffs);
  clembed_ids_release(&mr);
  clembed_matrix_release(&out);
  clembed_matrix_release(&grad);
  clembed_matrix_release(&whole);
  clembed_mpi_table_release(t);
  free(gh);
  free(h);
}

/* A rank calling another function than its peers: both refuse, none hangs. */
TU_CASE(different_calls) {
  float *h = table_values(9, 3, 1);
  clembed_mpi_table *t = make_table(ctx, 9, 3, CLEMBED_F32, h);
  clembed_status s;
  if (g_rank == 0) {
    s = clembed_mpi_table_init_normal(t, 0.0f, 1.0f, 1);
  } else {
    int64_t one = 1;
    clembed_ids ids = tu_ids(ctx, &one, 1, CLEMBED_I64);
    clembed_matrix out = {0};
    OK(ctx, clembed_matrix_create(ctx, 1, 3, CLEMBED_F32, &out));
    s = clembed_mpi_embed(t, &ids, NULL, &out);
    clembed_matrix_release(&out);
    clembed_ids_release(&ids);
  }
  expect_status(ctx, s, g_size > 1 ? CLEMBED_ERR_INVALID_ARGUMENT : CLEMBED_OK, "init on rank 0, embed elsewhere");
  if (g_size > 1) { /* each rank's function by its name, and no "the same the call" */
    char want[160];
    if (g_size == 2)
      snprintf(want, sizeof want, "rank 0 called clembed_mpi_table_init_normal, rank 1 called clembed_mpi_embed");
    else
      snprintf(want, sizeof want, "rank 0 called clembed_mpi_table_init_normal, ranks 1-%d called clembed_mpi_embed",
               g_size - 1);
    const char *m = clembed_context_message(ctx);
    EXPECT(strstr(m, "the ranks call different functions") && strstr(m, want) && !strstr(m, "the same the call"),
           "message: %s (want %s)", m, want);
  }
  clembed_mpi_table_release(t);
  free(h);
}

int main(int argc, char **argv) { return tu_mpi_main(argc, argv, "test_mpi", 1200, &g_rank, &g_size); }
