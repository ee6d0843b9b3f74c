/* bench_checkpoint: saving and loading a table with its Adagrad state against
 * the disk's own sequential write and read of the same bytes, in the same run.
 *
 *   [mpirun -n N] bench_checkpoint [--dir DIR] [--rows R] [--cols C] [--reps K] [--quick] [--device SPEC]
 *
 * The table is R x C F32 (default 262144 x 1024: 1 GiB) with an ADAGRAD state
 * of the same shape (1 GiB more), split by rows over the ranks (clembed_mpi).
 * Each repetition times, one after another (a barrier between; a time is the
 * slowest rank's; the reference write first in even repetitions, after the
 * saves in odd ones):
 *   write        the same bytes from host memory into one new file in DIR
 *                (each rank its rows of both tensors at their place, pwrite
 *                in 32 MiB pieces, each handed to the disk at once with
 *                sync_file_range as the checkpoint calls do), fsync, rename:
 *                the disk's sequential write, dd-like;
 *   save         clembed_checkpoint_save of the table and state (one rank),
 *                and clembed_mpi_checkpoint_save of the sharded table (every
 *                rank count): the device's rows read, their CRC-32C, written,
 *                fsynced, renamed;
 *   read         the written file's bytes into host memory, cold (its pages
 *                dropped from the page cache first: posix_fadvise DONTNEED
 *                after the fsync), each rank its rows;
 *   load         clembed_checkpoint_load / clembed_mpi_checkpoint_load of the
 *                file, cold as well: every check (the CRC-32C of every byte)
 *                and the rows written into the device's matrices.
 * Printed: the medians in ms and GB/s, and each clembed call's rate as a
 * fraction of the disk's own (write for save, read for load). Public APIs,
 * POSIX and MPI only. */
#define _GNU_SOURCE /* sync_file_range */
#include "clembed_mpi.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BENCH_NAME "bench_checkpoint"
#include "bench_mpi_util.h"
#include "timing.h"

static int rank, size;



/* Drops the file's pages from the page cache (rank 0; every rank then reads cold). */
static void drop(const char *path) {
  if (rank == 0) {
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
      fdatasync(fd);
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      close(fd);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

static void must(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "bench_checkpoint: rank %d: %s failed\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* n bytes at off in pieces of 32 MiB, each handed to the disk at once (Linux:
 * sync_file_range), as the checkpoint calls write: the disk's best sequential
 * write, not the page cache's burst and one long fsync. */
static void write_pieces(int fd, const char *p, size_t n, size_t off) {
  const size_t piece = (size_t)32 << 20;
  for (size_t at = 0; at < n; at += piece) {
    size_t k = n - at < piece ? n - at : piece;
    must(pwrite(fd, p + at, k, (off_t)(off + at)) == (ssize_t)k, "pwrite");
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
    sync_file_range(fd, (off_t)(off + at), (off_t)k, SYNC_FILE_RANGE_WRITE);
#endif
  }
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *dir = ".", *device = NULL;
  size_t rows = 262144, cols = 1024;
  int reps = 5;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
    else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--cols") && i + 1 < argc) cols = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!strcmp(argv[i], "--quick")) rows = 4096, cols = 256, reps = 3;
    else {
      if (rank == 0)
        fprintf(stderr, "usage: [mpirun -n N] bench_checkpoint [--dir DIR] [--rows R] [--cols C] [--reps K] "
                        "[--quick] [--device SPEC]\n");
      MPI_Finalize();
      return 2;
    }
  }
  if (reps < 1 || rows < (size_t)size || !cols) {
    if (rank == 0) fprintf(stderr, "bench_checkpoint: --reps >= 1, --rows >= ranks, --cols >= 1\n");
    MPI_Finalize();
    return 2;
  }
  clembed_context *ctx = NULL;
  if (clembed_context_create(device, &ctx) != CLEMBED_OK) {
    fprintf(stderr, "bench_checkpoint: rank %d: no device: %s\n", rank, clembed_last_error_message());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  char ref[1024], ck[1024], mck[1024];
  snprintf(ref, sizeof ref, "%s/bench-ckpt-ref.bin", dir);
  snprintf(ck, sizeof ck, "%s/bench-ckpt.safetensors", dir);
  snprintf(mck, sizeof mck, "%s/bench-ckpt-mpi.safetensors", dir);

  /* the sharded table and its state (one Adagrad step makes the state) */
  clembed_mpi_table *t = NULL;
  TRY(clembed_mpi_table_create(ctx, MPI_COMM_WORLD, rows, cols, CLEMBED_F32, &t));
  TRY(clembed_mpi_table_init_normal(t, 0.0f, 1.0f, 1));
  {
    int64_t id = 0;
    clembed_ids ids;
    clembed_matrix g;
    TRY(clembed_ids_create(ctx, &id, 1, CLEMBED_I64, &ids));
    TRY(clembed_matrix_create(ctx, 1, cols, CLEMBED_F32, &g));
    clembed_optimizer o = clembed_optimizer_defaults(CLEMBED_ADAGRAD);
    o.step = 1;
    TRY(clembed_mpi_optimizer_step(t, &g, &ids, NULL, &o));
    clembed_ids_release(&ids);
    clembed_matrix_release(&g);
  }
  size_t first;
  clembed_matrix shard, state;
  TRY(clembed_mpi_table_shard(t, &first, &shard));
  TRY(clembed_mpi_table_state(t, 1, NULL, &state));
  size_t shard_bytes = shard.rows * cols * 4, total = 2 * rows * cols * 4;
  /* one process's whole matrices, for clembed_checkpoint_save/_load (one rank only) */
  clembed_matrix whole = {0}, whole_state = {0};
  if (size == 1) {
    TRY(clembed_matrix_create(ctx, rows, cols, CLEMBED_F32, &whole));
    TRY(clembed_matrix_create(ctx, rows, cols, CLEMBED_F32, &whole_state));
    TRY(clembed_matrix_init_normal(ctx, &whole, 0.0f, 1.0f, 1, 0, NULL, NULL));
    TRY(clembed_matrix_init_uniform(ctx, &whole_state, 0.0f, 1.0f, 2, 0, NULL, NULL));
    TRY(clembed_finish(ctx));
  }
  char *host = malloc(2 * shard_bytes + 1);
  must(host != NULL, "malloc");
  TRY(clembed_matrix_read(ctx, &shard, host, CLEMBED_F32));
  TRY(clembed_matrix_read(ctx, &state, host + shard_bytes, CLEMBED_F32));
  clembed_checkpoint_item items[] = {{"table", &whole}, {"table.momentum1", &whole_state}};
  clembed_mpi_table *tabs[] = {t};
  const char *names[] = {"table"};

  enum { WRITE, SAVE, MSAVE, READ, LOAD, MLOAD, NROW };
  static const char *const row_names[] = {"write, the same bytes (dd-like: pwrite, fsync, rename)",
                                          "clembed_checkpoint_save", "clembed_mpi_checkpoint_save",
                                          "read, the same bytes (cold)", "clembed_checkpoint_load (cold)",
                                          "clembed_mpi_checkpoint_load (cold)"};
  double *times = calloc((size_t)NROW * reps, sizeof *times);
  for (int r = 0; r < reps; r++) {
    /* the writes, the reference first in even repetitions and last in odd ones (the
     * disk's state after one write is the next one's: no side gets it always) */
    double t0;
    int fd;
    for (int half = 0; half < 2; half++) {
      if ((half == 0) == (r % 2 == 0)) {
        /* write: each rank its rows of both tensors at their place in one file */
        char tmp[1100];
        snprintf(tmp, sizeof tmp, "%s.tmp", ref);
        if (rank == 0) {
          int made = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
          must(made >= 0, "creating the reference file");
          close(made);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = now();
        fd = open(tmp, O_WRONLY);
        must(fd >= 0, "opening the reference file");
        write_pieces(fd, host, shard_bytes, first * cols * 4);
        write_pieces(fd, host + shard_bytes, shard_bytes, rows * cols * 4 + first * cols * 4);
        must(fsync(fd) == 0, "fsync");
        close(fd);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) must(rename(tmp, ref) == 0, "rename");
        times[WRITE * reps + r] = slowest(t0);
      } else {
        if (size == 1) {
          MPI_Barrier(MPI_COMM_WORLD);
          t0 = now();
          TRY(clembed_checkpoint_save(ctx, ck, items, 2, NULL, NULL, 0));
          times[SAVE * reps + r] = slowest(t0);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = now();
        TRY(clembed_mpi_checkpoint_save(mck, tabs, names, 1, NULL, NULL, 0));
        times[MSAVE * reps + r] = slowest(t0);
      }
    }
    /* the reads, cold */
    drop(ref);
    t0 = now();
    fd = open(ref, O_RDONLY);
    must(fd >= 0, "opening the reference file");
    must(pread(fd, host, shard_bytes, (off_t)(first * cols * 4)) == (ssize_t)shard_bytes, "pread");
    must(pread(fd, host + shard_bytes, shard_bytes, (off_t)(rows * cols * 4 + first * cols * 4)) ==
             (ssize_t)shard_bytes,
         "pread");
    close(fd);
    times[READ * reps + r] = slowest(t0);
    if (size == 1) {
      drop(ck);
      t0 = now();
      TRY(clembed_checkpoint_load(ctx, ck, items, 2));
      times[LOAD * reps + r] = slowest(t0);
    }
    drop(mck);
    t0 = now();
    TRY(clembed_mpi_checkpoint_load(mck, tabs, names, 1));
    times[MLOAD * reps + r] = slowest(t0);
  }
  if (rank == 0) {
    double med[NROW];
    for (int k = 0; k < NROW; k++) med[k] = median(times + (size_t)k * reps, reps);
    printf("bench_checkpoint: %d rank%s, a %zu x %zu F32 table and its ADAGRAD state (%.2f GiB), %d reps, in %s\n",
           size, size > 1 ? "s" : "", rows, cols, (double)total / (1 << 30), reps, dir);
    for (int k = 0; k < NROW; k++) {
      if (size > 1 && (k == SAVE || k == LOAD)) continue;
      int base = k < READ ? WRITE : READ;
      printf("  %-58s %9.1f ms %7.2f GB/s", row_names[k], med[k] * 1e3, (double)total / med[k] / 1e9);
      if (k != base) printf("   %.2f of the disk's %s", med[base] / med[k], base == WRITE ? "write" : "read");
      printf("\n");
    }
  }
  remove(ref);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    remove(ck);
    remove(mck);
  }
  free(times);
  free(host);
  clembed_matrix_release(&whole);
  clembed_matrix_release(&whole_state);
  clembed_mpi_table_release(t);
  clembed_context_destroy(ctx);
  MPI_Finalize();
  return 0;
}
