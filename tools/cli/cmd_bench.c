/* clembed bench: dispatch to the benchmark (tools/bench/bench.c). */
#include "cli.h"

/* tools/bench/bench.c */
extern int clembed_bench_main(int argc, char **argv);

int cli_cmd_bench(int argc, char **argv) { return clembed_bench_main(argc, argv); }
