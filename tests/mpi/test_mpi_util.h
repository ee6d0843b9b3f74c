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

/* A .npy file of R x C float32 values (v, C order). */
static inline void tu_write_npy_f32(const char *path, const float *v, size_t R, size_t C) {
  char dict[128];
  snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }", R, C);
  size_t len = strlen(dict), total = (10 + len + 1 + 63) / 64 * 64;
  FILE *f = fopen(path, "wb");
  if (!f) return;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)((total - 10) & 255),
                           (unsigned char)((total - 10) >> 8)};
  fwrite(pre, 1, 10, f);
  fwrite(dict, 1, len, f);
  for (size_t i = 10 + len; i + 1 < total; i++) fputc(' ', f);
  fputc('\n', f);
  fwrite(v, sizeof *v, R * C, f);
  fclose(f);
}

#endif
