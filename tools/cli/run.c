/* Resources, failures and exit codes, the device, the memory budget. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char cli_cmd[64] = "clembed";
clembed_context *cli_ctx = NULL;

/* ------------------------------------------------------------ resources */

#define R_MAX 16

static struct {
  void *mem[R_MAX];
  int nmem;
  clembed_matrix mats[R_MAX];
  int nmats;
  clembed_ids ids[R_MAX];
  int nids;
  cl_mem mapped[R_MAX]; /* buffers mapped by cli_download, unmapped before the matrices go */
  void *maps[R_MAX];
  int nmaps;
} R;

/* input.c's mappings */
void cli_input_release(void);

void cli_release_all(void) {
  cli_output_abort();
  if (cli_ctx && R.nmaps) {
    cl_command_queue q = clembed_context_queue(cli_ctx);
    for (int i = R.nmaps - 1; i >= 0; i--) clEnqueueUnmapMemObject(q, R.mapped[i], R.maps[i], 0, NULL, NULL);
    clFinish(q);
  }
  R.nmaps = 0;
  for (int i = R.nmats - 1; i >= 0; i--) clembed_matrix_release(&R.mats[i]);
  for (int i = R.nids - 1; i >= 0; i--) clembed_ids_release(&R.ids[i]);
  R.nmats = R.nids = 0;
  clembed_context_destroy(cli_ctx);
  cli_ctx = NULL;
  cli_input_release();
  for (int i = R.nmem - 1; i >= 0; i--) free(R.mem[i]);
  R.nmem = 0;
}

static void vreport(const char *fmt, va_list ap) {
  fflush(stdout);
  fprintf(stderr, "%s: ", cli_cmd);
  vfprintf(stderr, fmt, ap);
}

_Noreturn void cli_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  cli_release_all();
  exit(code);
}

_Noreturn void cli_fail_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry '%s --help'.\n", cli_cmd);
  cli_release_all();
  exit(1);
}

void *cli_malloc(size_t bytes) {
  if (R.nmem == R_MAX) cli_fail(2, "internal error: too many allocations");
  void *p = malloc(bytes ? bytes : 1);
  if (!p) cli_fail(2, "out of host memory (%zu bytes)", bytes);
  R.mem[R.nmem++] = p;
  return p;
}

static clembed_matrix *new_matrix(void) {
  if (R.nmats == R_MAX) cli_fail(2, "internal error: too many matrices");
  clembed_matrix *m = &R.mats[R.nmats++];
  memset(m, 0, sizeof *m);
  return m;
}

clembed_ids *cli_new_ids(void) {
  if (R.nids == R_MAX) cli_fail(2, "internal error: too many id buffers");
  clembed_ids *d = &R.ids[R.nids++];
  memset(d, 0, sizeof *d);
  return d;
}

size_t cli_mul3(size_t a, size_t b, size_t c, const char *what) {
  if ((b && a > SIZE_MAX / b) || (c && a * b > SIZE_MAX / c)) cli_fail(1, "%s is too large", what);
  return a * b * c;
}

/* ------------------------------------------------------------ the device */

/* Why no device is listed: the library's message (no platform installed, or
 * the platforms that list no device and, for POCL, its kernel cache
 * directory), or NULL when devices exist. */
const char *cli_no_device_reason(void) {
  static char buf[4096];
  size_t n = 0;
  clembed_status st = clembed_devices(NULL, 0, &n);
  if (st != CLEMBED_OK) {
    snprintf(buf, sizeof buf, "%s (%s)", clembed_last_error_message(), clembed_status_string(st));
    return buf;
  }
  if (n > 0) return NULL; /* devices exist: the library's message says what failed */
  clembed_context *c = NULL;
  st = clembed_context_create("", &c); /* fails with the reason (with no device, any spec does) */
  clembed_context_destroy(c);
  if (st == CLEMBED_OK) return "no platform listed a device a moment ago";
  const char *m = clembed_last_error_message(), *p = "no OpenCL device found: ";
  snprintf(buf, sizeof buf, "%s", strncmp(m, p, strlen(p)) ? m : m + strlen(p));
  return buf;
}

void cli_open_device(const char *spec) {
  clembed_status s = clembed_context_create(spec, &cli_ctx);
  if (s == CLEMBED_OK) return;
  cli_ctx = NULL;
  char m[4096];
  snprintf(m, sizeof m, "%s", clembed_last_error_message());
  const char *why = s == CLEMBED_ERR_NO_DEVICE ? cli_no_device_reason() : NULL;
  if (why) cli_fail(2, "no OpenCL device found: %s", why);
  /* a bad setting (CLEMBED_TUNING) is bad input; the rest is the device's */
  int code = s == CLEMBED_ERR_INVALID_ARGUMENT ? 1 : 2;
  if (spec && *spec) cli_fail(code, "--device %s: %s (%s)", spec, m, clembed_status_string(s));
  cli_fail(code, "%s (%s)", m, clembed_status_string(s));
}

/* The library's message without its "clembed_function: " prefix. */
static const char *strip_prefix(const char *m) {
  if (strncmp(m, "clembed_", 8) != 0) return m;
  const char *p = m + 8;
  while (*p == '_' || islower((unsigned char)*p) || isdigit((unsigned char)*p)) p++;
  return (p[0] == ':' && p[1] == ' ') ? p + 2 : m;
}

/* Where a failure is reported: the ids file and the position file. */
static const char *g_ids_what = "ids";
static const char *g_pos_what = NULL;

void cli_blame(const char *ids_what, const char *positions_what) {
  g_ids_what = ids_what ? ids_what : "ids";
  g_pos_what = positions_what;
}

/* Other arguments and what they name (cli_blame_arg). */
static struct {
  const char *argument, *what;
} g_blame[8];

void cli_blame_arg(const char *argument, const char *what) {
  for (size_t i = 0; i < sizeof g_blame / sizeof g_blame[0]; i++)
    if (!g_blame[i].argument || !strcmp(g_blame[i].argument, argument)) {
      g_blame[i].argument = argument;
      g_blame[i].what = what;
      return;
    }
}

void cli_check(clembed_status s) {
  if (s == CLEMBED_OK) return;
  const char *m = strip_prefix(clembed_context_message(cli_ctx));
  /* the file or flag to blame, from the structured detail (never the message text) */
  clembed_error_detail d;
  const char *what = NULL;
  if (clembed_context_error(cli_ctx, &d) == CLEMBED_OK && d.argument) {
    if (!strcmp(d.argument, "ids")) what = g_ids_what;
    else if (!strcmp(d.argument, "position_table") || !strcmp(d.argument, "positions")) what = g_pos_what;
    for (size_t i = 0; !what && i < sizeof g_blame / sizeof g_blame[0] && g_blame[i].argument; i++)
      if (!strcmp(d.argument, g_blame[i].argument)) what = g_blame[i].what;
  }
  /* bad input, and what the library refuses to do with an argument it names
   * (a quantized table to train, a matrix in more buffers than an operation
   * takes): exit 1; the device's own failures: exit 2 */
  int refused = s == CLEMBED_ERR_UNSUPPORTED && clembed_context_error(cli_ctx, &d) == CLEMBED_OK && d.argument &&
                *d.argument;
  if (s == CLEMBED_ERR_INDEX_OUT_OF_RANGE || s == CLEMBED_ERR_INVALID_ARGUMENT || refused) {
    if (what) cli_fail(1, "%s: %s", what, *m ? m : clembed_status_string(s));
    cli_fail(1, "%s", *m ? m : clembed_status_string(s));
  }
  cli_fail(2, "%s%s%s", clembed_status_string(s), *m ? ": " : "", m);
}

/* The list entry of the context's device (matched by its "platform / device"
 * name; the first of identical ones, which is the one a spec picks), or -1. */
long cli_context_device(const clembed_device_info *list, size_t n) {
  const char *full = clembed_context_device_name(cli_ctx);
  for (size_t i = 0; i < n; i++) {
    size_t pl = strlen(list[i].platform), nl = strlen(list[i].name);
    if (!strncmp(full, list[i].platform, pl) && !strncmp(full + pl, " / ", 3) && !strncmp(full + pl + 3, list[i].name, nl))
      return (long)i;
  }
  return -1;
}

/* ------------------------------------------------------- memory budget */

/* The device's memory (clembed_devices) and whether it is the host's (a CPU device). */
static int device_memory(uint64_t *global, int *shared) {
  size_t n = 0;
  if (clembed_devices(NULL, 0, &n) != CLEMBED_OK || n == 0) return 0;
  clembed_device_info *list = cli_malloc(n * sizeof *list);
  if (clembed_devices(list, n, &n) != CLEMBED_OK) return 0;
  long i = cli_context_device(list, n);
  if (i < 0 || list[i].global_mem_bytes == 0) return 0;
  *global = list[i].global_mem_bytes;
  *shared = (list[i].type & CL_DEVICE_TYPE_CPU) != 0;
  return 1;
}

static const char *human(uint64_t b, char *buf, size_t len) {
  static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1024.0 && u < 6) v /= 1024.0, u++;
  if (u == 0) snprintf(buf, len, "%" PRIu64 " bytes", b);
  else snprintf(buf, len, "%.1f %s", v, unit[u]);
  return buf;
}

static uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

void cli_memory_budget(uint64_t host_bytes, uint64_t device_bytes) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t phys = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
  uint64_t global = UINT64_MAX;
  int shared = 1;
  char a[32], b[32], c[32], d[32];
  if (!device_memory(&global, &shared)) global = UINT64_MAX, shared = 0;
  if (shared) {
    uint64_t total = add_sat(host_bytes, device_bytes);
    if (total > phys)
      cli_fail(1, "this run needs %s of memory (%s on the host and %s on the device, which uses the host's), "
                  "more than the machine's %s",
               human(total, a, sizeof a), human(host_bytes, b, sizeof b), human(device_bytes, c, sizeof c),
               human(phys, d, sizeof d));
    return;
  }
  if (device_bytes > global)
    cli_fail(1, "this run needs %s of device memory, more than the device's %s", human(device_bytes, a, sizeof a),
             human(global, b, sizeof b));
  if (host_bytes > phys)
    cli_fail(1, "this run needs %s of host memory, more than the machine's %s", human(host_bytes, a, sizeof a),
             human(phys, b, sizeof b));
}

/* ------------------------------------------------------- device buffers */

clembed_matrix *cli_new_matrix(void) { return new_matrix(); }

clembed_matrix *cli_upload(const void *host, clembed_dtype hd, size_t rows, size_t cols, clembed_dtype dt) {
  clembed_matrix *m = new_matrix();
  cli_check(clembed_matrix_create(cli_ctx, rows, cols, dt, m));
  if (rows && cols) cli_check(clembed_matrix_write(cli_ctx, m, host, hd));
  return m;
}

clembed_matrix *cli_zeros(size_t rows, size_t cols, clembed_dtype dt) {
  clembed_matrix *m = new_matrix();
  cli_check(clembed_matrix_create(cli_ctx, rows, cols, dt, m));
  return m;
}

/* Whether the context's device is a CPU that shares host memory: there a
 * buffer is mapped rather than copied. */
static int host_unified_cpu(void) {
  cl_device_id dev = NULL;
  cl_device_type type = 0;
  cl_bool unified = CL_FALSE;
  cl_command_queue q = clembed_context_queue(cli_ctx);
  if (!q || clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL) != CL_SUCCESS ||
      clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL) != CL_SUCCESS ||
      clGetDeviceInfo(dev, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL) != CL_SUCCESS)
    return 0;
  return (type & CL_DEVICE_TYPE_CPU) && unified;
}

void *cli_download(const clembed_matrix *m, clembed_dtype hd) {
  /* a dense matrix of the wanted dtype on a CPU device: mapped, not copied (read-only use) */
  size_t bytes = cli_mul3(m->rows, m->cols, clembed_dtype_size(hd), "the output"), buffers = 0;
  if (bytes && m->dtype == hd && m->offset == 0 && (m->ld == 0 || m->ld == m->cols) && R.nmaps < R_MAX &&
      clembed_matrix_pieces(cli_ctx, m, 0, NULL, NULL, &buffers) == CLEMBED_OK && buffers == 1 &&
      host_unified_cpu()) { /* (a matrix split over several buffers is read) */
    cli_check(clembed_finish(cli_ctx));
    cl_int err = CL_SUCCESS;
    void *p = clEnqueueMapBuffer(clembed_context_queue(cli_ctx), m->buffer, CL_TRUE, CL_MAP_READ, 0, bytes, 0, NULL,
                                 NULL, &err);
    if (err == CL_SUCCESS && p) {
      R.mapped[R.nmaps] = m->buffer;
      R.maps[R.nmaps++] = p;
      return p;
    }
  }
  void *h = cli_malloc(cli_mul3(m->rows, m->cols, clembed_dtype_size(hd), "the output"));
  if (m->rows && m->cols) cli_check(clembed_matrix_read(cli_ctx, m, h, hd));
  cli_check(clembed_finish(cli_ctx));
  return h;
}
