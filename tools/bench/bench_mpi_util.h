/* What the MPI benchmarks share (bench_mpi.c, bench_mpi_sets.c,
 * bench_checkpoint.c): a failed call ends every rank, and the slowest rank's
 * time. Each program defines BENCH_NAME, `rank` and `ctx` before including it. */
#ifndef CLEMBED_BENCH_MPI_UTIL_H
#define CLEMBED_BENCH_MPI_UTIL_H

#include <mpi.h>
#include <stdio.h>

#include "timing.h"

#define TRY(call)                                                                                  \
  do {                                                                                             \
    clembed_status s_ = (call);                                                                    \
    if (s_ != CLEMBED_OK) {                                                                        \
      fprintf(stderr, "%s: rank %d: %s: %s: %s\n", BENCH_NAME, rank, #call, clembed_status_string(s_), \
              ctx ? clembed_context_message(ctx) : clembed_last_error_message());                  \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                \
    }                                                                                              \
  } while (0)

/* The slowest rank's seconds since t0. */
static inline double slowest(double t0) {
  double mine = now() - t0, all = 0.0;
  MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return all;
}

#endif
