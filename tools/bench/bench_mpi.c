/* bench_mpi: a sharded table's forward and optimizer step against their parts,
 * measured in the same run (docs/scaling.md).
 *
 *   mpirun -n 2 bench_mpi [--rows R] [--cols C] [--tokens B] [--dtype f32|f16|bf16]
 *                         [--dist uniform|hot|local] [--reps K] [--quick] [--device SPEC]
 *
 * Every rank holds rows/n rows and passes B ids per step. For each repetition,
 * one after another on every rank (a barrier between), it times:
 *   sharded forward  clembed_mpi_embed of the rank's B ids;
 *   local forward    clembed_embed of B ids on the rank's own shard (the same
 *                    device work as if every id were local);
 *   raw exchange     the MPI_Alltoallv calls of exactly the bytes the forward
 *                    must move: each rank's distinct ids to their owners (4 or
 *                    8 bytes each) and their rows back (row bytes each);
 *   sharded step     clembed_mpi_optimizer_step (row-wise Adagrad) of B
 *                    gradient rows;
 *   local step       clembed_optimizer_step of B gradient rows on the shard;
 *   owner step       clembed_optimizer_step of the gradient rows the rank
 *                    receives in the sharded step (every rank's tokens whose
 *                    row it owns, in rank then token order): the device work
 *                    the sharded step does there, which with hot ids is
 *                    more than B rows on rank 0;
 *   raw exchange     MPI_Alltoallv of each token's shard row index and
 *                    gradient row (F32, whatever the table's dtype: the
 *                    bench's gradient is F32) to its owner.
 * A time is the slowest rank's (MPI_Allreduce MAX). Printed: the medians, and
 * the median over the repetitions of sharded / (local + raw), the figure the
 * sharded calls are judged by, and for the step sharded / (owner + raw) as
 * well; and the bytes each rank sends and receives.
 * Distributions: uniform ids; hot (half the ids from the first 1% of rows, all
 * on rank 0: the imbalance of a popular feature); local (every id on the
 * rank's own shard: no bytes cross but the calls' own). Uses the public APIs
 * and MPI only. */
#define _POSIX_C_SOURCE 200809L
#include "clembed_mpi.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_NAME "bench_mpi"
#include "bench_mpi_util.h"
#include "timing.h"

static int rank, size;

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}



/* The raw exchange: an MPI_Alltoallv of `send_counts` items of `bytes` bytes
 * out, and (when back_bytes) the answers of back_bytes per item received back. */
typedef struct exchange {
  int *sc, *rc, *sd, *rd;
  char *out, *in, *back_out, *back_in;
  size_t bytes, back_bytes;
  long long sent, received;
} exchange;

static void exchange_make(exchange *x, const int *counts, size_t bytes, size_t back_bytes) {
  x->sc = calloc((size_t)size, sizeof(int));
  x->rc = calloc((size_t)size, sizeof(int));
  x->sd = calloc((size_t)size, sizeof(int));
  x->rd = calloc((size_t)size, sizeof(int));
  memcpy(x->sc, counts, (size_t)size * sizeof(int));
  MPI_Alltoall(x->sc, 1, MPI_INT, x->rc, 1, MPI_INT, MPI_COMM_WORLD);
  x->sent = x->received = 0;
  for (int r = 0; r < size; r++) {
    x->sd[r] = (int)x->sent;
    x->rd[r] = (int)x->received;
    x->sent += x->sc[r];
    x->received += x->rc[r];
  }
  x->bytes = bytes;
  x->back_bytes = back_bytes;
  x->out = calloc((size_t)x->sent * bytes + 1, 1);
  x->in = calloc((size_t)x->received * bytes + 1, 1);
  x->back_out = calloc((size_t)x->received * back_bytes + 1, 1);
  x->back_in = calloc((size_t)x->sent * back_bytes + 1, 1);
}

static void exchange_run(exchange *x) {
  MPI_Datatype t, b;
  MPI_Type_contiguous((int)x->bytes, MPI_BYTE, &t);
  MPI_Type_commit(&t);
  MPI_Alltoallv(x->out, x->sc, x->sd, t, x->in, x->rc, x->rd, t, MPI_COMM_WORLD);
  MPI_Type_free(&t);
  if (x->back_bytes) {
    MPI_Type_contiguous((int)x->back_bytes, MPI_BYTE, &b);
    MPI_Type_commit(&b);
    MPI_Alltoallv(x->back_out, x->rc, x->rd, b, x->back_in, x->sc, x->sd, b, MPI_COMM_WORLD);
    MPI_Type_free(&b);
  }
}

static void exchange_free(exchange *x) {
  free(x->sc), free(x->rc), free(x->sd), free(x->rd);
  free(x->out), free(x->in), free(x->back_out), free(x->back_in);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t rows = 1000000, cols = 64, B = 65536;
  int reps = 11;
  const char *dist = "uniform", *device = NULL;
  clembed_dtype dt = CLEMBED_F32;
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "--quick")) {
      rows = 100000;
      B = 8192;
      reps = 5;
    } else if (a + 1 < argc && !strcmp(argv[a], "--rows")) {
      rows = strtoull(argv[++a], NULL, 10);
    } else if (a + 1 < argc && !strcmp(argv[a], "--cols")) {
      cols = strtoull(argv[++a], NULL, 10);
    } else if (a + 1 < argc && !strcmp(argv[a], "--tokens")) {
      B = strtoull(argv[++a], NULL, 10);
    } else if (a + 1 < argc && !strcmp(argv[a], "--reps")) {
      reps = atoi(argv[++a]);
    } else if (a + 1 < argc && !strcmp(argv[a], "--dist")) {
      dist = argv[++a];
    } else if (a + 1 < argc && !strcmp(argv[a], "--device")) {
      device = argv[++a];
    } else if (a + 1 < argc && !strcmp(argv[a], "--dtype")) {
      const char *d = argv[++a];
      dt = !strcmp(d, "f16") ? CLEMBED_F16 : !strcmp(d, "bf16") ? CLEMBED_BF16 : CLEMBED_F32;
    } else {
      if (rank == 0)
        fprintf(stderr, "usage: mpirun -n N bench_mpi [--rows R] [--cols C] [--tokens B] [--dtype f32|f16|bf16] "
                        "[--dist uniform|hot|local] [--reps K] [--quick] [--device SPEC]\n");
      MPI_Finalize();
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  if (rows < (size_t)size) rows = (size_t)size;
  clembed_context *ctx = NULL;
  clembed_mpi_table *t = NULL;
  TRY(clembed_context_create(device, &ctx));
  TRY(clembed_mpi_table_create(ctx, MPI_COMM_WORLD, rows, cols, dt, &t));
  TRY(clembed_mpi_table_init_normal(t, 0.0f, 0.02f, 1));
  size_t first = 0;
  clembed_matrix shard = {0};
  TRY(clembed_mpi_table_shard(t, &first, &shard));
  size_t *bounds = malloc(((size_t)size + 1) * sizeof *bounds);
  for (int r = 0; r <= size; r++) bounds[r] = (size_t)r * (rows / (size_t)size) + (size_t)r * (rows % (size_t)size) / (size_t)size;

  /* this rank's ids, and the same ids inside its own shard (for the local parts) */
  uint64_t *ids = malloc(B * sizeof *ids), *local = malloc(B * sizeof *local), *sorted = malloc(B * sizeof *sorted);
  /* every rank's ids made here (rank r's from its own seed): this rank's, and
   * those of every rank that fall in its shard, in rank then token order (the
   * rows its sharded step receives) */
  size_t hot = rows / 100 ? rows / 100 : 1, nown = 0;
  uint64_t *own = malloc((size_t)size * B * sizeof *own);
  for (int r = 0; r < size; r++) {
    uint64_t s = 88172645463325252ULL ^ (uint64_t)r * 0x9E3779B97F4A7C15ULL;
    for (size_t i = 0; i < B; i++) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      uint64_t v = s % rows;
      if (!strcmp(dist, "hot") && (s >> 40) % 2) v = (s >> 20) % hot;
      if (!strcmp(dist, "local")) v = bounds[r] + (bounds[r + 1] > bounds[r] ? s % (bounds[r + 1] - bounds[r]) : 0);
      if (r == rank) {
        ids[i] = v;
        local[i] = shard.rows ? v % shard.rows : 0;
      }
      if (v >= bounds[rank] && v < bounds[rank + 1]) own[nown++] = v - bounds[rank];
    }
  }
  /* the counts the forward moves (distinct ids per owner) and the step moves (tokens per owner) */
  int *fwd = calloc((size_t)size, sizeof(int)), *stp = calloc((size_t)size, sizeof(int));
  memcpy(sorted, ids, B * sizeof *ids);
  qsort(sorted, B, sizeof *sorted, cmp_u64);
  for (size_t i = 0, owner = 0; i < B; i++) {
    while (owner + 1 < (size_t)size && bounds[owner + 1] <= sorted[i]) owner++;
    stp[owner]++;
    if (i == 0 || sorted[i] != sorted[i - 1]) fwd[owner]++;
  }
  int idb = bounds[1] - bounds[0] + 1 > 0x7fffffffULL ? 8 : 4;
  size_t rb = clembed_dtype_size(dt) * cols, gb = 4 * cols; /* a table row; a gradient row (F32) */
  exchange xf, xs;
  exchange_make(&xf, fwd, (size_t)idb, rb);
  exchange_make(&xs, stp, (size_t)idb + gb, 0);

  clembed_ids dev_ids = {0}, dev_local = {0}, dev_own = {0};
  clembed_matrix out = {0}, grad = {0}, gown = {0};
  TRY(clembed_ids_create(ctx, ids, B, CLEMBED_I64, &dev_ids));
  TRY(clembed_ids_create(ctx, local, B, CLEMBED_I64, &dev_local));
  TRY(clembed_ids_create(ctx, own, nown ? nown : 1, CLEMBED_I64, &dev_own));
  TRY(clembed_matrix_create(ctx, nown ? nown : 1, cols, CLEMBED_F32, &gown));
  TRY(clembed_matrix_init_normal(ctx, &gown, 0.0f, 1e-3f, 12 + (uint64_t)rank, 0, NULL, NULL));
  TRY(clembed_matrix_create(ctx, B, cols, CLEMBED_F32, &out));
  TRY(clembed_matrix_create(ctx, B, cols, CLEMBED_F32, &grad));
  TRY(clembed_matrix_init_normal(ctx, &grad, 0.0f, 1e-3f, 2 + (uint64_t)rank, 0, NULL, NULL));
  clembed_optimizer o = clembed_optimizer_defaults(CLEMBED_ROWWISE_ADAGRAD);
  clembed_matrix lstate = {0};
  TRY(clembed_matrix_create(ctx, shard.rows, 1, CLEMBED_F32, &lstate));
  clembed_optimizer lo = o;
  lo.state = &lstate;

  double *m[7], *rf = malloc((size_t)reps * sizeof(double)), *rs = malloc((size_t)reps * sizeof(double));
  double *ro = malloc((size_t)reps * sizeof(double));
  for (int k = 0; k < 7; k++) m[k] = malloc((size_t)reps * sizeof(double));
  /* one warm-up of each (kernels compiled, buffers touched) */
  for (int rep = -1; rep < reps; rep++) {
    double v[7], t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now();
    TRY(clembed_mpi_embed(t, &dev_ids, NULL, &out));
    v[0] = slowest(t0);
    t0 = now();
    TRY(clembed_embed(ctx, &shard, &dev_local, NULL, &out, 0, NULL, NULL));
    TRY(clembed_finish(ctx));
    v[1] = slowest(t0);
    t0 = now();
    exchange_run(&xf);
    v[2] = slowest(t0);
    t0 = now();
    TRY(clembed_mpi_optimizer_step(t, &grad, &dev_ids, NULL, &o));
    v[3] = slowest(t0);
    t0 = now();
    TRY(clembed_optimizer_step(ctx, &grad, &dev_local, NULL, &lo, &shard, 0, NULL, NULL));
    TRY(clembed_finish(ctx));
    v[4] = slowest(t0);
    t0 = now();
    exchange_run(&xs);
    v[5] = slowest(t0);
    t0 = now();
    if (nown) { /* (no rows: nothing to time) */
      TRY(clembed_optimizer_step(ctx, &gown, &dev_own, NULL, &lo, &shard, 0, NULL, NULL));
      TRY(clembed_finish(ctx));
    }
    v[6] = slowest(t0);
    if (rep < 0) continue;
    for (int k = 0; k < 7; k++) m[k][rep] = v[k];
    rf[rep] = v[0] / (v[1] + v[2]);
    rs[rep] = v[3] / (v[4] + v[5]);
    ro[rep] = v[3] / (v[6] + v[5]);
  }
  long long fb[2] = {xf.sent * idb + xf.received * (long long)rb, xf.received * idb + xf.sent * (long long)rb};
  long long sb[2] = {xs.sent * (long long)(idb + gb), xs.received * (long long)(idb + gb)};
  if (rank == 0) {
    const char *names[7] = {"sharded forward", "local forward", "raw exchange (forward)", "sharded step",
                            "local step", "raw exchange (step)", "owner step"};
    printf("bench_mpi: %d ranks, %s, table %zu x %zu %s (%zu rows a rank), %zu ids a rank, %s ids, %d repetitions\n",
           size, clembed_context_device_name(ctx), rows, cols, dt == CLEMBED_F32 ? "F32" : dt == CLEMBED_F16 ? "F16" : "BF16",
           shard.rows, B, dist, reps);
    printf("rank 0 moves: forward %lld bytes out, %lld in; step %lld out, %lld in\n", fb[0], fb[1], sb[0], sb[1]);
    for (int k = 0; k < 7; k++) printf("  %-24s %10.3f ms (median)\n", names[k], 1e3 * median(m[k], reps));
    printf("forward: sharded / (local + raw exchange) = %.3f (median of %d)\n", median(rf, reps), reps);
    printf("step:    sharded / (local + raw exchange) = %.3f (median of %d)\n", median(rs, reps), reps);
    printf("step:    sharded / (owner + raw exchange) = %.3f (median of %d)\n", median(ro, reps), reps);
  }
  for (int k = 0; k < 7; k++) free(m[k]);
  free(rf), free(rs), free(ro), free(ids), free(local), free(own), free(sorted), free(bounds), free(fwd), free(stp);
  exchange_free(&xf);
  exchange_free(&xs);
  clembed_ids_release(&dev_ids);
  clembed_ids_release(&dev_local);
  clembed_ids_release(&dev_own);
  clembed_matrix_release(&gown);
  clembed_matrix_release(&out);
  clembed_matrix_release(&grad);
  clembed_matrix_release(&lstate);
  clembed_mpi_table_release(t);
  clembed_context_destroy(ctx);
  MPI_Finalize();
  return 0;
}
