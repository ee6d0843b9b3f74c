/* clembed bench: runs the benchmark, a program of its own (clembed-bench,
 * tools/bench/ and tools/ceiling/, built with the tools and installed beside
 * clembed), so that the installed clembed links none of its code. The
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

int cli_cmd_bench(int argc, char **argv) {
  char self[PATH_MAX], path[PATH_MAX + sizeof BENCH_PROGRAM + 1];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "clembed bench: cannot find this program's own directory (/proc/self/exe: %s), where the "
                    "benchmark " BENCH_PROGRAM " lies: run " BENCH_PROGRAM " itself, with the same arguments\n",
            strerror(errno));
    return 127;
  }
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  if (slash) slash[1] = '\0';
  snprintf(path, sizeof path, "%s" BENCH_PROGRAM, slash ? self : "./");
  char **args = cli_malloc(((size_t)argc + 1) * sizeof *args);
  args[0] = path;
  for (int i = 1; i < argc; i++) args[i] = argv[i];
  args[argc] = NULL;
  fflush(stdout);
  fflush(stderr);
  execv(path, args);
  int e = errno;
  fprintf(stderr,
          "clembed bench: the benchmark is a program of its own, " BENCH_PROGRAM ", looked for beside clembed: %s: %s "
          "(it is built with the tools, -DCLEMBED_BUILD_TOOLS=ON, and installed with clembed)\n",
          path, strerror(e));
  cli_release_all();
  return 127;
}
