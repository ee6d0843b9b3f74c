/* Data-parallel training of a table split over MPI ranks, from C.
 *
 * One process per device. The table (V x D, row-wise Adagrad) is split by
 * rows over the ranks; every step has one global batch of N tokens, and rank
 * r takes its contiguous part [r*N/n, (r+1)*N/n). Each rank looks up its
 * tokens (clembed_mpi_embed), takes the squared error against the targets on
 * the host and hands its gradient rows to clembed_mpi_optimizer_step, which
 * sends each row to the owner of its id; the owners step their rows. Since
 * the sharded calls give one device's bits for the ranks' batches
 * concatenated in rank order, the table after the run is the same, bit for
 * bit, with 1, 2, 4 or any number of ranks: the program prints a hash of the
 * whole table (gathered on rank 0) to show it. Exit status 1 if the loss
 * does not fall below a tenth of where it started.
 *
 *   mpicc train_mpi.c -lclembed_mpi -lclembed -lOpenCL -lm
 *   mpirun -n 4 ./a.out [steps] [device]
 */
#include "clembed_mpi.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A failure on any rank ends the job (the peers would wait for it in the next call). */
#define TRY(call)                                                                                  \
  do {                                                                                             \
    clembed_status s_ = (call);                                                                    \
    if (s_ != CLEMBED_OK) {                                                                        \
      fprintf(stderr, "rank %d: %s: %s: %s\n", rank, #call, clembed_status_string(s_),             \
              ctx ? clembed_context_message(ctx) : clembed_last_error_message());                  \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                \
    }                                                                                              \
  } while (0)

enum { V = 1000, D = 16, N = 512 };

static float target(int v, int c) { return (float)sin(0.37 * v + 1.3 * c); }

int main(int argc, char **argv) {
  int provided, rank, size, rc = 1, steps = argc > 1 ? atoi(argv[1]) : 60;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  clembed_context *ctx = NULL;
  clembed_mpi_table *table = NULL;
  clembed_matrix out = {0}, grad = {0};
  clembed_ids ids = {0};
  int first = rank * N / size, n = (rank + 1) * N / size - first; /* this rank's part of the global batch */
  int32_t *batch = malloc(N * sizeof *batch);
  float *got = malloc((size_t)(n ? n : 1) * D * sizeof *got), *g = malloc((size_t)(n ? n : 1) * D * sizeof *g);
  double loss = 0.0, first_loss = 0.0;
  unsigned rng = 12345u;
  if (steps < 1) steps = 1;

  TRY(clembed_context_create(argc > 2 ? argv[2] : NULL, &ctx));
  TRY(clembed_mpi_table_create(ctx, MPI_COMM_WORLD, V, D, CLEMBED_F32, &table));
  TRY(clembed_mpi_table_init_normal(table, 0.0f, 0.5f, 42));
  TRY(clembed_matrix_create(ctx, (size_t)n, D, CLEMBED_F32, &out));
  TRY(clembed_matrix_create(ctx, (size_t)n, D, CLEMBED_F32, &grad));
  clembed_optimizer o = clembed_optimizer_defaults(CLEMBED_ROWWISE_ADAGRAD);
  o.learning_rate = 0.5f;

  for (int step = 1; step <= steps; step++) {
    /* the global batch, the same on every rank; tokens skewed towards low ids */
    for (int i = 0; i < N; i++) {
      rng = rng * 1664525u + 1013904223u;
      unsigned u = (rng >> 8) % V;
      batch[i] = (int32_t)(u % 7 == 0 ? u % 50 : u);
    }
    clembed_ids_release(&ids);
    TRY(clembed_ids_create(ctx, batch + first, (size_t)n, CLEMBED_I32, &ids));
    TRY(clembed_mpi_embed(table, &ids, NULL, &out));
    TRY(clembed_matrix_read(ctx, &out, got, CLEMBED_F32));
    /* loss = mean over the global batch of 0.5 * |row - target|^2; its gradient */
    double mine = 0.0;
    for (int i = 0; i < n; i++)
      for (int c = 0; c < D; c++) {
        float diff = got[i * D + c] - target(batch[first + i], c);
        mine += 0.5 * diff * diff / N;
        g[i * D + c] = diff / (float)N;
      }
    MPI_Allreduce(&mine, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (step == 1) first_loss = loss;
    if (rank == 0 && (step == 1 || step % 20 == 0)) printf("step %3d  loss %.6f\n", step, loss);
    TRY(clembed_matrix_write(ctx, &grad, g, CLEMBED_F32));
    TRY(clembed_mpi_optimizer_step(table, &grad, &ids, NULL, &o));
  }

  /* the whole table on rank 0, in row order, and its hash (FNV-1a of the bytes) */
  {
    size_t row0 = 0;
    clembed_matrix shard = {0};
    TRY(clembed_mpi_table_shard(table, &row0, &shard));
    float *part = malloc((shard.rows ? shard.rows : 1) * D * sizeof *part), *all = NULL;
    TRY(clembed_matrix_read(ctx, &shard, part, CLEMBED_F32));
    int count = (int)(shard.rows * D), *counts = malloc((size_t)size * sizeof *counts),
        *displs = malloc((size_t)size * sizeof *displs);
    MPI_Gather(&count, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      all = malloc((size_t)V * D * sizeof *all);
      for (int r = 0, at = 0; r < size; at += counts[r++]) displs[r] = at;
    }
    MPI_Gatherv(part, count, MPI_FLOAT, all, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      uint64_t h = 0xcbf29ce484222325ULL;
      const unsigned char *b = (const unsigned char *)all;
      for (size_t i = 0; i < (size_t)V * D * sizeof *all; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
      printf("%d ranks, %d steps: loss %.6f -> %.6f, table hash %016llx\n", size, steps, first_loss, loss,
             (unsigned long long)h);
    }
    free(part);
    free(all);
    free(counts);
    free(displs);
  }
  rc = loss < first_loss / 10.0 ? 0 : 1;
  if (rank == 0 && rc) printf("the loss did not fall enough\n");
  clembed_ids_release(&ids);
  clembed_matrix_release(&out);
  clembed_matrix_release(&grad);
  clembed_mpi_table_release(table);
  clembed_context_destroy(ctx);
  free(batch);
  free(got);
  free(g);
  MPI_Finalize();
  return rc;
}
