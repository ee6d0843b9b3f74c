/* Running the built `clembed` tool from a test: the temporary directory's
 * paths, the run itself (stdout and stderr kept for the checks), and the .npy
 * files it reads and writes. Shared by test_cli and test_cli_rope. */
#ifndef CLEMBED_CLI_RUN_H
#define CLEMBED_CLI_RUN_H

#include "read_array.h"
#include "test_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *g_exe;
static char g_dir[512];
static char g_out[1 << 16], g_err[1 << 16]; /* the last run's stdout and stderr */

/* dir/name, from a ring of buffers. */
static const char *P(const char *name) {
  static char ring[32][640];
  static int next = 0;
  char *b = ring[next++ % 32];
  snprintf(b, sizeof ring[0], "%s/%s", g_dir, name);
  return b;
}

static void slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  size_t n = 0;
  if (f) {
    n = fread(buf, 1, cap - 1, f);
    fclose(f);
  }
  buf[n] = '\0';
}

/* Starts the tool with the NULL-terminated arguments, its stdout and stderr
 * going to files in the directory, without waiting; returns its pid. */
static inline pid_t cli_spawn(const char *const *args) {
  char *argv[64];
  int n = 0;
  argv[n++] = (char *)g_exe;
  for (; *args && n < 63; args++) argv[n++] = (char *)*args;
  argv[n] = NULL;
  const char *outp = P(".stdout"), *errp = P(".stderr");
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(1);
  }
  if (pid == 0) {
    int fo = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fo < 0 || fe < 0) _exit(126);
    dup2(fo, 1);
    dup2(fe, 2);
    close(fo);
    close(fe);
    execv(g_exe, argv);
    _exit(127);
  }
  return pid;
}

/* Runs the tool with the NULL-terminated arguments; returns its exit status
 * (-1 when it did not exit normally), its stdout in g_out, stderr in g_err. */
static int cli(const char *const *args) {
  pid_t pid = cli_spawn(args);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0) {
  }
  slurp(P(".stdout"), g_out, sizeof g_out);
  slurp(P(".stderr"), g_err, sizeof g_err);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
#define CLI(...) cli((const char *const[]){__VA_ARGS__, NULL})

/* A run that must exit with `rc`; prints its stderr otherwise. */
#define RUNS(rc, ...)                                                                           \
  do {                                                                                          \
    int r_ = CLI(__VA_ARGS__);                                                                  \
    EXPECT(r_ == (rc), "exit %d, expected %d; stderr: %s", r_, (rc), g_err);                    \
  } while (0)

/* The last run's stderr contains s. */
#define ERR_HAS(s) EXPECT(strstr(g_err, (s)) != NULL, "stderr lacks \"%s\": %s", (s), g_err)

static void write_npy(const char *path, npy_dtype t, int ndim, const size_t *shape, const void *data) {
  char err[512];
  if (npy_write(path, t, ndim, shape, data, err, sizeof err) != 0) {
    fprintf(stderr, "npy_write: %s\n", err);
    exit(1);
  }
}

/* A .safetensors file of one tensor `name` ("F32", "BF16", ...; `bytes` of data). */
static inline void write_safetensors(const char *path, const char *name, const char *dtype, int ndim, const size_t *shape,
                              const void *data, size_t bytes) {
  char header[1024];
  int n = snprintf(header, sizeof header, "{\"%s\":{\"dtype\":\"%s\",\"shape\":[", name, dtype);
  for (int d = 0; d < ndim; d++) n += snprintf(header + n, sizeof header - (size_t)n, "%s%zu", d ? "," : "", shape[d]);
  n += snprintf(header + n, sizeof header - (size_t)n, "],\"data_offsets\":[0,%zu]}}", bytes);
  while (n % 8) header[n++] = ' ';
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)n >> (8 * i));
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(len, 1, 8, f) != 8 || fwrite(header, 1, (size_t)n, f) != (size_t)n ||
      (bytes && fwrite(data, 1, bytes, f) != bytes) || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
}

/* Reads an output (through the library's reader); a failure counts as a
 * failed check and gives a zeroed array. Release it with free_array. */
static int read_npy(const char *path, npy_array *a) {
  char err[512];
  int ok = read_array(path, a, err, sizeof err) == 0;
  EXPECT(ok, "%s", err);
  return ok;
}

#endif
