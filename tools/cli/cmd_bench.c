/* clembed bench and clembed tune: run the benchmark, a program of its own
 * (clembed-bench, tools/bench/ and tools/ceiling/, built with the tools and
 * installed beside clembed), so that the installed clembed links none of its
 * code; `tune` is its tuner (clembed-bench --tune, tools/bench/tune.c). The
 * arguments pass through unchanged, and its output and exit status are the
 * benchmark's own (it replaces this process). When there is no clembed-bench
 * beside this clembed: exit 127 (the shell's "command not found") naming the
 * path looked at. */
#define _DEFAULT_SOURCE
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BENCH_PROGRAM "clembed-bench"

/* Runs clembed-bench with `first` (NULL: none) and argv[1..]. */
static int run_bench(const char *cmd, const char *first, int argc, char **argv) {
  char self[PATH_MAX], path[PATH_MAX + sizeof BENCH_PROGRAM + 1];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "clembed %s: cannot find this program's own directory (/proc/self/exe: %s), where the "
                    "benchmark " BENCH_PROGRAM " lies: run " BENCH_PROGRAM "%s itself, with the same arguments\n",
            cmd, strerror(errno), first ? " --tune" : "");
    return 127;
  }
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  if (slash) slash[1] = '\0';
  snprintf(path, sizeof path, "%s" BENCH_PROGRAM, slash ? self : "./");
  char **args = cli_malloc(((size_t)argc + 2) * sizeof *args);
  int a = 0;
  args[a++] = path;
  if (first) args[a++] = (char *)first;
  for (int i = 1; i < argc; i++) args[a++] = argv[i];
  args[a] = NULL;
  fflush(stdout);
  fflush(stderr);
  execv(path, args);
  int e = errno;
  fprintf(stderr,
          "clembed %s: the benchmark is a program of its own, " BENCH_PROGRAM ", looked for beside clembed: %s: %s "
          "(it is built with the tools, -DCLEMBED_BUILD_TOOLS=ON, and installed with clembed)\n",
          cmd, path, strerror(e));
  cli_release_all();
  return 127;
}

int cli_cmd_bench(int argc, char **argv) { return run_bench("bench", NULL, argc, argv); }

int cli_cmd_tune(int argc, char **argv) { return run_bench("tune", "--tune", argc, argv); }
