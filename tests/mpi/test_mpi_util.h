/* Shared by the MPI test suites (run under mpirun): main's work around
 * test_util.h's tu_main. */
#ifndef CLEMBED_TEST_MPI_UTIL_H
#define CLEMBED_TEST_MPI_UTIL_H

#include "test_util.h"

#include <mpi.h>

/* MPI initialised, *rank and *size set, the suite `name` run on the test
 * device (each case at most case_timeout_s), every rank told whether any
 * failed (rank 0 prints it), MPI finalised. Returns this rank's tu_main
 * status. */
static inline int tu_mpi_main(int argc, char **argv, const char *name, unsigned case_timeout_s, int *rank,
                              int *size) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  int rc = tu_main(argc, argv, (tu_suite){.name = name, .device = 1, .case_timeout_s = case_timeout_s});
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (*rank == 0) printf("%s on %d ranks: %s\n", name, *size, worst ? "FAILED" : "passed");
  MPI_Finalize();
  return rc;
}

#endif
