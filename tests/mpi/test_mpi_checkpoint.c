/* Sharded checkpoints under mpirun (run by mpi_checkpoint.sh): a training run
 * of four tables (SGD, Adagrad, Adam with plain steps, row-wise Adagrad with
 * bag steps; F32 and BF16), each step's global batch split over the ranks,
 * saved, loaded on another number of ranks and continued.
 *   test_mpi_checkpoint run OUT FIRST LAST [IN]
 * makes the tables (initialised, or loaded from IN, whose "step" metadata must
 * be FIRST - 1), runs steps FIRST..LAST and saves to OUT with "step" = LAST.
 *   test_mpi_checkpoint refusals IN
 * checks the refusals on every rank (a damaged file, a mismatched table, ranks
 * that disagree) and that no table changed.
 *   test_mpi_checkpoint single IN
 * (one rank) loads IN with clembed_checkpoint_load into whole matrices and
 * compares them with clembed_mpi_checkpoint_load's shards.
 * Exit 0 on success; every failure is printed with the rank. */
#include "clembed_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 300
#define COLS 16
#define TOKENS 96
#define BAGS 24 /* of TOKENS / BAGS ids each */
#define NT 4

static int rank, size, failures;
static const char *names[NT] = {"sgd", "adagrad", "adam", "rowwise"};
static const clembed_optimizer_kind kinds[NT] = {CLEMBED_SGD, CLEMBED_ADAGRAD, CLEMBED_ADAM,
                                                 CLEMBED_ROWWISE_ADAGRAD};
static const clembed_dtype dtypes[NT] = {CLEMBED_F32, CLEMBED_BF16, CLEMBED_F32, CLEMBED_BF16};

#define CHECK(cond, ...)                                 \
  do {                                                   \
    if (!(cond)) {                                       \
      failures++;                                        \
      fprintf(stderr, "rank %d: FAILED: ", rank);        \
      fprintf(stderr, __VA_ARGS__);                      \
      fprintf(stderr, "\n");                             \
    }                                                    \
  } while (0)

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return *s >> 33;
}

/* Step `step` of table `t`: this rank's part of the global batch (tokens
 * [r*T/size, (r+1)*T/size), or for bags the bags of that range). */
static void step_table(clembed_context *ctx, clembed_mpi_table *tab, int t, uint64_t step) {
  uint64_t seed = 77 + step * 131 + (uint64_t)t;
  int64_t ids[TOKENS];
  float grads[TOKENS * COLS];
  for (int i = 0; i < TOKENS; i++) ids[i] = (int64_t)(lcg(&seed) % ROWS);
  for (int i = 0; i < TOKENS * COLS; i++) grads[i] = (float)((double)(lcg(&seed) % 2001) / 1000.0 - 1.0);
  int bags = kinds[t] == CLEMBED_ROWWISE_ADAGRAD, units = bags ? BAGS : TOKENS, per = TOKENS / BAGS;
  size_t u0 = (size_t)rank * units / size, u1 = (size_t)(rank + 1) * units / size, nu = u1 - u0;
  size_t id0 = bags ? u0 * per : u0, nid = bags ? nu * per : nu;
  clembed_ids di, doff;
  clembed_matrix g;
  int64_t offs[BAGS + 1];
  size_t noffs = bags ? nu + 1 : 1;
  for (size_t b = 0; b < noffs; b++) offs[b] = (int64_t)(b * per);
  CHECK(clembed_ids_create(ctx, ids + id0, nid, CLEMBED_I64, &di) == CLEMBED_OK, "ids");
  CHECK(clembed_ids_create(ctx, offs, noffs, CLEMBED_I64, &doff) == CLEMBED_OK, "offsets");
  CHECK(clembed_matrix_create(ctx, nu, COLS, CLEMBED_F32, &g) == CLEMBED_OK, "grad");
  if (nu) CHECK(clembed_matrix_write(ctx, &g, grads + u0 * COLS, CLEMBED_F32) == CLEMBED_OK, "grad write");
  clembed_optimizer o = clembed_optimizer_defaults(kinds[t]);
  o.learning_rate = 0.03f;
  o.step = step;
  clembed_status s = bags ? clembed_mpi_bag_optimizer_step(tab, &g, &di, &doff, NULL, &o)
                          : clembed_mpi_optimizer_step(tab, &g, &di, NULL, &o);
  CHECK(s == CLEMBED_OK, "step %llu of %s: %s", (unsigned long long)step, names[t], clembed_context_message(ctx));
  clembed_ids_release(&di);
  clembed_ids_release(&doff);
  clembed_matrix_release(&g);
}

static void make_tables(clembed_context *ctx, clembed_mpi_table **tabs) {
  for (int t = 0; t < NT; t++) {
    CHECK(clembed_mpi_table_create(ctx, MPI_COMM_WORLD, ROWS, COLS, dtypes[t], &tabs[t]) == CLEMBED_OK, "create");
    CHECK(clembed_mpi_table_init_normal(tabs[t], 0.0f, 0.3f, 1000 + (uint64_t)t) == CLEMBED_OK, "init");
  }
}

static uint64_t step_of(const char *path) {
  clembed_file *f = NULL;
  if (clembed_file_open(path, &f) != CLEMBED_OK) return 0;
  const char *s = clembed_file_metadata_find(f, "step");
  uint64_t v = s ? strtoull(s, NULL, 10) : 0;
  clembed_file_close(f);
  return v;
}

static int run(clembed_context *ctx, const char *out, uint64_t first, uint64_t last, const char *in) {
  clembed_mpi_table *tabs[NT] = {0};
  make_tables(ctx, tabs);
  if (in) {
    clembed_status s = clembed_mpi_checkpoint_load(in, tabs, names, NT);
    CHECK(s == CLEMBED_OK, "load %s: %s", in, clembed_context_message(ctx));
    CHECK(step_of(in) == first - 1, "%s holds step %llu, expected %llu", in, (unsigned long long)step_of(in),
          (unsigned long long)(first - 1));
    for (int t = 1; t < NT; t++) { /* every stepped table got its state back */
      clembed_optimizer_kind k;
      clembed_matrix st;
      CHECK(first == 1 || clembed_mpi_table_state(tabs[t], 1, &k, &st) == CLEMBED_OK, "%s has no state", names[t]);
    }
  }
  for (uint64_t s = first; s <= last; s++)
    for (int t = 0; t < NT; t++) step_table(ctx, tabs[t], t, s);
  char step[32];
  snprintf(step, sizeof step, "%llu", (unsigned long long)last);
  const char *keys[] = {"step", "note"}, *values[] = {step, "a sharded run"};
  clembed_status s = clembed_mpi_checkpoint_save(out, tabs, names, NT, keys, values, 2);
  CHECK(s == CLEMBED_OK, "save %s: %s", out, clembed_context_message(ctx));
  for (int t = 0; t < NT; t++) clembed_mpi_table_release(tabs[t]);
  return failures;
}

/* The shards' bytes, gathered to every rank (the whole table, rows in order). */
static unsigned char *gather_table(clembed_context *ctx, clembed_mpi_table *tab, int which, size_t row_bytes) {
  size_t first;
  clembed_matrix shard;
  clembed_mpi_table_shard(tab, &first, &shard);
  if (which) {
    clembed_optimizer_kind k;
    if (clembed_mpi_table_state(tab, which, &k, &shard) != CLEMBED_OK) shard.rows = 0;
  }
  unsigned char *mine = malloc(shard.rows * row_bytes + 1), *all = malloc(ROWS * row_bytes + 1);
  if (shard.rows) clembed_matrix_read(ctx, &shard, mine, shard.dtype);
  int *counts = malloc(sizeof(int) * size), *displs = malloc(sizeof(int) * size), n = (int)(shard.rows * row_bytes);
  MPI_Allgather(&n, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD);
  displs[0] = 0;
  for (int r = 1; r < size; r++) displs[r] = displs[r - 1] + counts[r - 1];
  MPI_Allgatherv(mine, n, MPI_BYTE, all, counts, displs, MPI_BYTE, MPI_COMM_WORLD);
  free(mine);
  free(counts);
  free(displs);
  return all;
}

static int refusals(clembed_context *ctx, const char *in) {
  clembed_mpi_table *tabs[NT] = {0};
  make_tables(ctx, tabs);
  size_t rb0 = clembed_dtype_row_bytes(dtypes[0], COLS);
  unsigned char *before = gather_table(ctx, tabs[0], 0, rb0);
  /* a damaged copy: one byte of the last tensor's data flipped (rank 0 writes it) */
  char bad[600];
  snprintf(bad, sizeof bad, "%s.damaged", in);
  if (rank == 0) {
    FILE *f = fopen(in, "rb"), *g = fopen(bad, "wb");
    int c;
    long n = 0;
    fseek(f, 0, SEEK_END);
    long size_ = ftell(f);
    fseek(f, 0, SEEK_SET);
    while ((c = fgetc(f)) != EOF) fputc(++n == size_ - 5 ? c ^ 4 : c, g);
    fclose(f);
    fclose(g);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  clembed_status s = clembed_mpi_checkpoint_load(bad, tabs, names, NT);
  CHECK(s == CLEMBED_ERR_INVALID_ARGUMENT && strstr(clembed_context_message(ctx), "is damaged"),
        "a damaged file: %s", clembed_context_message(ctx));
  /* a table of another shape */
  clembed_mpi_table *other = NULL, *mixed[NT];
  CHECK(clembed_mpi_table_create(ctx, MPI_COMM_WORLD, ROWS + 1, COLS, CLEMBED_F32, &other) == CLEMBED_OK, "create");
  memcpy(mixed, tabs, sizeof mixed);
  mixed[2] = other;
  s = clembed_mpi_checkpoint_load(in, mixed, names, NT);
  CHECK(s == CLEMBED_ERR_INVALID_ARGUMENT && strstr(clembed_context_message(ctx), "'adam' is 300 x 16 f32 in the file"),
        "a table of another shape: %s", clembed_context_message(ctx));
  /* ranks that disagree on the names (with more than one rank) */
  if (size > 1) {
    const char *renamed[NT] = {"sgd", "adagrad", "adam", rank == size - 1 ? "other" : "rowwise"};
    s = clembed_mpi_checkpoint_load(in, tabs, renamed, NT);
    CHECK(s == CLEMBED_ERR_INVALID_ARGUMENT, "names that differ between ranks: %s", clembed_context_message(ctx));
    s = clembed_mpi_checkpoint_save(bad, tabs, renamed, NT, NULL, NULL, 0);
    CHECK(s == CLEMBED_ERR_INVALID_ARGUMENT && strstr(clembed_context_message(ctx), "disagree"),
          "a save with names that differ: %s", clembed_context_message(ctx));
  }
  /* a folder that does not exist: CLEMBED_ERR_FILE on rank 0, every rank fails */
  s = clembed_mpi_checkpoint_save("/nonexistent-folder/x.safetensors", tabs, names, NT, NULL, NULL, 0);
  CHECK(s != CLEMBED_OK && (rank != 0 || s == CLEMBED_ERR_FILE), "a missing folder: %s", clembed_context_message(ctx));
  unsigned char *after = gather_table(ctx, tabs[0], 0, rb0);
  CHECK(!memcmp(before, after, ROWS * rb0), "a refused load changed a table");
  free(before);
  free(after);
  clembed_mpi_table_release(other);
  for (int t = 0; t < NT; t++) clembed_mpi_table_release(tabs[t]);
  if (rank == 0) remove(bad);
  return failures;
}

/* One rank: the file loads whole with clembed_checkpoint_load too, with the shards' bits. */
static int single(clembed_context *ctx, const char *in) {
  clembed_mpi_table *tabs[NT] = {0};
  make_tables(ctx, tabs);
  CHECK(clembed_mpi_checkpoint_load(in, tabs, names, NT) == CLEMBED_OK, "load: %s", clembed_context_message(ctx));
  for (int t = 0; t < NT; t++) {
    clembed_matrix m, st;
    size_t rb = clembed_dtype_row_bytes(dtypes[t], COLS), scols = kinds[t] == CLEMBED_ROWWISE_ADAGRAD ? 1 : COLS;
    CHECK(clembed_matrix_create(ctx, ROWS, COLS, dtypes[t], &m) == CLEMBED_OK, "matrix");
    CHECK(clembed_matrix_create(ctx, ROWS, scols, CLEMBED_F32, &st) == CLEMBED_OK, "matrix");
    char sname[64];
    snprintf(sname, sizeof sname, "%s.momentum1", names[t]);
    clembed_checkpoint_item items[2] = {{names[t], &m}, {sname, &st}};
    CHECK(clembed_checkpoint_load(ctx, in, items, t == 0 ? 1 : 2) == CLEMBED_OK, "%s", clembed_context_message(ctx));
    unsigned char *a = malloc(ROWS * rb), *b = gather_table(ctx, tabs[t], 0, rb);
    clembed_matrix_read(ctx, &m, a, dtypes[t]);
    CHECK(!memcmp(a, b, ROWS * rb), "%s: clembed_checkpoint_load and the shards differ", names[t]);
    free(a);
    free(b);
    if (t) {
      a = malloc(ROWS * scols * 4);
      b = gather_table(ctx, tabs[t], 1, scols * 4);
      clembed_matrix_read(ctx, &st, a, CLEMBED_F32);
      CHECK(!memcmp(a, b, ROWS * scols * 4), "%s: the state differs", names[t]);
      free(a);
      free(b);
    }
    if (kinds[t] == CLEMBED_ADAGRAD) {
      /* the whole table and state saved in one process as the Python package names them
       * ("NAME.optimizer"), loaded into a fresh sharded table: its state comes back too */
      char py[600];
      snprintf(py, sizeof py, "%s.python", in);
      const char *keys[] = {"adagrad.optimizer", "adagrad.step"}, *values[] = {"adagrad", "6"};
      CHECK(clembed_checkpoint_save(ctx, py, items, 2, keys, values, 2) == CLEMBED_OK, "%s",
            clembed_context_message(ctx));
      clembed_mpi_table *fresh = NULL;
      CHECK(clembed_mpi_table_create(ctx, MPI_COMM_WORLD, ROWS, COLS, dtypes[t], &fresh) == CLEMBED_OK, "create");
      const char *one[] = {"adagrad"};
      CHECK(clembed_mpi_checkpoint_load(py, &fresh, one, 1) == CLEMBED_OK, "%s", clembed_context_message(ctx));
      a = gather_table(ctx, fresh, 1, COLS * 4);
      b = gather_table(ctx, tabs[t], 1, COLS * 4);
      CHECK(!memcmp(a, b, ROWS * COLS * 4), "the Python-named state did not load into the sharded table");
      free(a);
      free(b);
      clembed_mpi_table_release(fresh);
      remove(py);
    }
    clembed_matrix_release(&m);
    clembed_matrix_release(&st);
  }
  for (int t = 0; t < NT; t++) clembed_mpi_table_release(tabs[t]);
  return failures;
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  clembed_context *ctx = NULL;
  if (clembed_context_create(NULL, &ctx) != CLEMBED_OK) {
    fprintf(stderr, "rank %d: no device: %s\n", rank, clembed_last_error_message());
    MPI_Finalize();
    return 1;
  }
  int rc = 2;
  if (argc >= 5 && !strcmp(argv[1], "run"))
    rc = run(ctx, argv[2], strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10), argc > 5 ? argv[5] : NULL);
  else if (argc == 3 && !strcmp(argv[1], "refusals"))
    rc = refusals(ctx, argv[2]);
  else if (argc == 3 && !strcmp(argv[1], "single"))
    rc = single(ctx, argv[2]);
  else if (rank == 0)
    fprintf(stderr, "usage: %s run OUT FIRST LAST [IN] | refusals IN | single IN\n", argv[0]);
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  clembed_context_destroy(ctx);
  MPI_Finalize();
  return worst ? 1 : 0;
}
