/* The one output of a run (-o).
 *
 * Checked and made ready before the work starts, written at the end:
 * - a regular file (new, existing, or the target of a symlink, which stays a
 *   link) is written to a temporary file beside it, renamed over it at the
 *   end; an existing file keeps its mode (and, for root, its owner). The
 *   temporary file is removed on failure and on SIGINT, SIGTERM and SIGHUP;
 * - a device node or FIFO (/dev/null, a named pipe) is written directly;
 * - "-" writes the .npy to standard output (refused on a terminal). */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static struct {
  const char *arg;   /* as given */
  char *target;      /* the file written (a symlink resolved) */
  int fd;            /* -1 when nothing is open */
  int to_stdout, direct;
  int keep_mode;     /* an existing regular file: its mode and owner */
  struct stat st;
} O = {NULL, NULL, -1, 0, 0, 0, {0}};

/* The temporary file, for the signal handler: a fixed buffer and a flag. */
static char g_tmp[8192];
static volatile sig_atomic_t g_tmp_live = 0;

static const int g_signals[] = {SIGINT, SIGTERM, SIGHUP};

/* Async-signal-safe: removes the temporary file, then dies of the signal. */
static void on_signal(int sig) {
  if (g_tmp_live) unlink(g_tmp);
  signal(sig, SIG_DFL);
  raise(sig);
}

static void install_handlers(void) {
  for (size_t i = 0; i < sizeof g_signals / sizeof g_signals[0]; i++) {
    struct sigaction old, sa;
    if (sigaction(g_signals[i], NULL, &old) != 0) continue;
    if (old.sa_handler == SIG_IGN) continue; /* e.g. SIGHUP under nohup */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t k = 0; k < sizeof g_signals / sizeof g_signals[0]; k++) sigaddset(&sa.sa_mask, g_signals[k]);
    sigaction(g_signals[i], &sa, NULL);
  }
}

static char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (!p) cli_fail(2, "out of host memory");
  memcpy(p, s, n);
  return p;
}

/* The directory part of `path` ("." when it has none). */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return xstrdup(".");
  size_t n = slash == path ? 1 : (size_t)(slash - path);
  char *d = malloc(n + 1);
  if (!d) cli_fail(2, "out of host memory");
  memcpy(d, path, n);
  d[n] = '\0';
  return d;
}

/* Follows symlinks (a dangling one included) to the path that is written. */
static char *resolve(const char *arg) {
  char *p = xstrdup(arg);
  for (int hops = 0; hops < 40; hops++) {
    struct stat st;
    if (lstat(p, &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    char link[4096];
    ssize_t n = readlink(p, link, sizeof link - 1);
    if (n < 0) {
      int e = errno;
      free(p);
      cli_fail(1, "-o %s: cannot read the symbolic link: %s", arg, strerror(e));
    }
    link[n] = '\0';
    char *next;
    if (link[0] == '/') {
      next = xstrdup(link);
    } else {
      char *d = dir_of(p);
      size_t len = strlen(d) + strlen(link) + 2;
      next = malloc(len);
      if (!next) cli_fail(2, "out of host memory");
      snprintf(next, len, "%s/%s", d, link);
      free(d);
    }
    free(p);
    p = next;
  }
  free(p);
  cli_fail(1, "-o %s: too many levels of symbolic links", arg);
}

/* Creates TARGET.tmp.XXXXXX (mode 0666 less the umask, as a new file gets). */
static int create_temp(const char *target) {
  static unsigned long counter;
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  size_t len = strlen(target);
  if (len + 12 > sizeof g_tmp) {
    errno = ENAMETOOLONG;
    return -1;
  }
  uint64_t r0 = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)clock();
  for (int attempt = 0; attempt < 100; attempt++) {
    uint64_t r = r0 + 0x9e3779b97f4a7c15ULL * (uint64_t)(++counter + (unsigned long)attempt);
    r ^= r >> 31;
    r *= 0xbf58476d1ce4e5b9ULL;
    r ^= r >> 29;
    char name[sizeof g_tmp];
    memcpy(name, target, len);
    memcpy(name + len, ".tmp.", 5);
    for (int i = 0; i < 6; i++) {
      name[len + 5 + (size_t)i] = alphabet[r % (sizeof alphabet - 1)];
      r /= sizeof alphabet - 1;
    }
    name[len + 11] = '\0';
    /* the handler may run between these lines: it removes at most a file
       that does not exist yet */
    g_tmp_live = 0;
    memcpy(g_tmp, name, len + 12);
    g_tmp_live = 1;
    int fd = open(g_tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return fd;
    g_tmp_live = 0;
    if (errno != EEXIST) return -1;
  }
  errno = EEXIST;
  return -1;
}

void cli_output_open(const char *arg) {
  O.arg = arg;
  if (!strcmp(arg, "-")) {
    if (isatty(STDOUT_FILENO))
      cli_fail(1, "-o -: standard output is a terminal; redirect it to a file or a pipe");
    O.to_stdout = 1;
    O.fd = STDOUT_FILENO;
    return;
  }
  if (!*arg) cli_fail(1, "-o: the path is empty");
  O.target = resolve(arg);
  struct stat st;
  if (stat(O.target, &st) == 0) {
    if (S_ISDIR(st.st_mode)) cli_fail(1, "-o %s: is a directory", arg);
    if (!S_ISREG(st.st_mode)) {
      /* a device node, a FIFO: written in place (a FIFO waits for its reader) */
      O.fd = open(O.target, O_WRONLY | O_CLOEXEC);
      if (O.fd < 0) cli_fail(1, "-o %s: cannot open for writing: %s", arg, strerror(errno));
      O.direct = 1;
      return;
    }
    O.keep_mode = 1;
    O.st = st;
  } else if (errno != ENOENT) {
    cli_fail(1, "-o %s: %s", arg, strerror(errno));
  }
  char *dir = dir_of(O.target);
  struct stat ds;
  if (stat(dir, &ds) != 0) {
    int e = errno;
    char msg[4300];
    snprintf(msg, sizeof msg, "%s", dir);
    free(dir);
    cli_fail(1, "-o %s: directory %s: %s", arg, msg, strerror(e));
  }
  if (!S_ISDIR(ds.st_mode)) {
    char msg[4300];
    snprintf(msg, sizeof msg, "%s", dir);
    free(dir);
    cli_fail(1, "-o %s: %s is not a directory", arg, msg);
  }
  install_handlers();
  O.fd = create_temp(O.target);
  if (O.fd < 0) {
    int e = errno;
    char msg[4300];
    snprintf(msg, sizeof msg, "%s", dir);
    free(dir);
    cli_fail(1, "-o %s: cannot create a file in directory %s: %s", arg, msg, strerror(e));
  }
  free(dir);
  if (O.keep_mode) {
    if (geteuid() == 0 && (O.st.st_uid != 0 || O.st.st_gid != 0)) {
      if (fchown(O.fd, O.st.st_uid, O.st.st_gid) != 0) { /* the mode still follows */
      }
    }
    if (fchmod(O.fd, O.st.st_mode & 07777) != 0)
      cli_fail(1, "-o %s: cannot give the new file the mode of the old: %s", arg, strerror(errno));
  }
}

/* Best effort: makes the rename durable. */
static void sync_dir(const char *path) {
  char *dir = dir_of(path);
  int fd = open(dir, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  free(dir);
}

/* The output is a .safetensors file: -o names one (standard output is .npy). */
static int to_safetensors(void) {
  size_t n = O.arg ? strlen(O.arg) : 0;
  return !O.to_stdout && n >= 12 && !strcmp(O.arg + n - 12, ".safetensors");
}

clembed_dtype cli_output_dtype(const char *value, clembed_dtype dflt) {
  clembed_dtype d = value ? cli_arg_dtype("--out-dtype", value, CLI_DT_FLOAT) : dflt;
  if (!value && d == CLEMBED_BF16 && !to_safetensors()) d = CLEMBED_F32; /* a bf16 table's default, into .npy */
  if (d == CLEMBED_BF16 && !to_safetensors())
    cli_fail(1, "--out-dtype bf16: a .npy file cannot hold bfloat16; write -o OUT.safetensors");
  return d;
}

static void finish_output(void);
static void output_npy(npy_dtype dtype, int ndim, const size_t *shape, const void *data);

static int write_all(int fd, const void *p, size_t n) {
  const unsigned char *b = p;
  while (n) {
    ssize_t w = write(fd, b, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

void cli_output_array(clembed_dtype dtype, int ndim, const size_t *shape, const void *data) {
  if (!to_safetensors()) {
    if (dtype == CLEMBED_BF16) cli_fail(1, "-o %s: a .npy file cannot hold bfloat16; write .safetensors", O.arg);
    output_npy(dtype == CLEMBED_F16 ? NPY_F2 : NPY_F4, ndim, shape, data);
    return;
  }
  if (O.fd < 0) cli_fail(2, "internal error: the output is not open");
  /* one tensor, "output": {"dtype", "shape", "data_offsets"}, the header padded to 8 bytes */
  size_t count = 1;
  for (int i = 0; i < ndim; i++) count = cli_mul3(count, shape[i], 1, "the output");
  size_t bytes = cli_mul3(count, clembed_dtype_size(dtype), 1, "the output");
  char header[128 + NPY_MAX_DIMS * 22]; /* up to 20 digits and a comma per dimension */
  int n = snprintf(header, sizeof header, "{\"output\":{\"dtype\":\"%s\",\"shape\":[",
                   dtype == CLEMBED_F32 ? "F32" : dtype == CLEMBED_F16 ? "F16" : "BF16");
  for (int i = 0; i < ndim; i++) n += snprintf(header + n, sizeof header - (size_t)n, "%s%zu", i ? "," : "", shape[i]);
  n += snprintf(header + n, sizeof header - (size_t)n, "],\"data_offsets\":[0,%zu]}}", bytes);
  while (n % 8) header[n++] = ' ';
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)n >> (8 * i));
  if (write_all(O.fd, len, 8) || write_all(O.fd, header, (size_t)n) || (bytes && write_all(O.fd, data, bytes)))
    cli_fail(1, "-o %s: write: %s", O.arg, strerror(errno));
  finish_output();
}

static void output_npy(npy_dtype dtype, int ndim, const size_t *shape, const void *data) {
  char err[1024];
  if (O.fd < 0) cli_fail(2, "internal error: the output is not open");
  const char *name = O.to_stdout ? "standard output" : O.arg;
  if (npy_write_fd(O.fd, name, dtype, ndim, shape, data, err, sizeof err) != 0) cli_fail(1, "-o %s", err);
  finish_output();
}

/* fsync, close, rename into place. */
static void finish_output(void) {
  if (O.to_stdout) {
    O.fd = -1;
    return;
  }
  if (!O.direct && fsync(O.fd) != 0) cli_fail(1, "-o %s: fsync: %s", O.arg, strerror(errno));
  int fd = O.fd;
  O.fd = -1;
  if (close(fd) != 0) cli_fail(1, "-o %s: close: %s", O.arg, strerror(errno));
  if (O.direct) return;
  if (rename(g_tmp, O.target) != 0) cli_fail(1, "-o %s: cannot rename %s into place: %s", O.arg, g_tmp, strerror(errno));
  g_tmp_live = 0;
  sync_dir(O.target);
}

void cli_output_abort(void) {
  if (O.fd >= 0 && !O.to_stdout) close(O.fd);
  O.fd = -1;
  if (g_tmp_live) {
    unlink(g_tmp);
    g_tmp_live = 0;
  }
  free(O.target);
  O.target = NULL;
}
