/* Links against an installed libclembed_mpi through find_package(clembed). */
#include <clembed_mpi.h>

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  clembed_mpi_table_release(NULL); /* a no-op, and the symbol resolved */
  MPI_Finalize();
  return 0;
}
