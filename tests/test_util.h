/* Shared by the tests: named cases (TU_CASE, tu_main), assertions, the test
 * device's context, host arrays of any dtype and strided device windows. The
 * references the tests compare against are in reference.h. Each test is one
 * executable; each of its cases can be run alone by name:
 *   test_embed                        every case
 *   test_embed --list                 the case names
 *   test_embed padding_keeps_position one case (several names: several cases)
 *   test_embed small NAME...          reduced sizes (the Oclgrind runs)
 *   test_embed full                   every combination of the cross products that a
 *                                     test samples by default (ctest label exhaustive)
 * A name that is not a case is an error (exit 2). */
#ifndef CLEMBED_TEST_UTIL_H
#define CLEMBED_TEST_UTIL_H
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv, strdup */
#endif

#include "clembed.h"
#include "test_hooks.h" /* src/: clembed's own test hooks */
#include "reference.h"

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int tu_failures = 0;
static int tu_checks = 0;

#define EXPECT(cond, ...)                                              \
  do {                                                                 \
    tu_checks++;                                                       \
    if (!(cond)) {                                                     \
      tu_failures++;                                                   \
      fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                    \
      fprintf(stderr, "\n");                                           \
    }                                                                  \
  } while (0)

/* A call that must succeed; prints the context message otherwise. */
#define OK(ctx, call)                                                                      \
  do {                                                                                     \
    clembed_status tu_s = (call);                                                          \
    tu_checks++;                                                                           \
    if (tu_s != CLEMBED_OK) {                                                              \
      tu_failures++;                                                                       \
      fprintf(stderr, "%s:%d: FAILED: %s -> %s: %s\n", __FILE__, __LINE__, #call,          \
              clembed_status_string(tu_s), clembed_context_message(ctx));                  \
    }                                                                                      \
  } while (0)

/* A call that must fail with `code`. */
#define FAILS(ctx, code, call)                                                             \
  do {                                                                                     \
    clembed_status tu_s = (call);                                                          \
    tu_checks++;                                                                           \
    if (tu_s != (code)) {                                                                  \
      tu_failures++;                                                                       \
      fprintf(stderr, "%s:%d: FAILED: %s -> %s, expected %s (%s)\n", __FILE__, __LINE__,    \
              #call, clembed_status_string(tu_s), clembed_status_string(code),             \
              clembed_context_message(ctx));                                               \
    }                                                                                      \
  } while (0)

/* A context on the test device whose buffers hold at most `bytes` (CLEMBED_MAX_BUFFER_BYTES:
 * larger matrices are made of pieces), or NULL (a failed check) when it cannot be made. */
static inline clembed_context *tu_small_buffer_context(const char *bytes);

/* Opens the test device (CLEMBED_DEVICE or the default). No device is a failure,
 * unless CLEMBED_ALLOW_NO_DEVICE=1, when the test is skipped (exit 77). */
static inline clembed_context *tu_context(void) {
  clembed_context *ctx = NULL;
  clembed_status s = clembed_context_create(NULL, &ctx);
  if (s != CLEMBED_OK) {
    const char *allow = getenv("CLEMBED_ALLOW_NO_DEVICE");
    fprintf(stderr, "no OpenCL device: %s: %s\n", clembed_status_string(s), clembed_last_error_message());
    if (allow && !strcmp(allow, "1") && s == CLEMBED_ERR_NO_DEVICE) exit(77);
    exit(1);
  }
  printf("device: %s\n", clembed_context_device_name(ctx));
  return ctx;
}

static inline clembed_context *tu_small_buffer_context(const char *bytes) {
  clembed_context *c = NULL;
  setenv("CLEMBED_MAX_BUFFER_BYTES", bytes, 1);
  clembed_status s = clembed_context_create(NULL, &c);
  unsetenv("CLEMBED_MAX_BUFFER_BYTES");
  EXPECT(s == CLEMBED_OK, "a context with CLEMBED_MAX_BUFFER_BYTES=%s: %s", bytes, clembed_status_string(s));
  return s == CLEMBED_OK ? c : NULL;
}

/* A context on the default device with the CPU or the GPU kernel shapes
 * (CLEMBED_TUNING, read when a context is created; restored afterwards), or
 * NULL (counted as a failure). */
static inline clembed_context *tu_shaped_context(const char *tuning) {
  const char *old = getenv("CLEMBED_TUNING");
  char *saved = old ? strdup(old) : NULL;
  setenv("CLEMBED_TUNING", tuning, 1);
  clembed_context *ctx = NULL;
  clembed_status s = clembed_context_create(NULL, &ctx);
  if (saved) {
    setenv("CLEMBED_TUNING", saved, 1);
    free(saved);
  } else {
    unsetenv("CLEMBED_TUNING");
  }
  EXPECT(s == CLEMBED_OK, "context with CLEMBED_TUNING=%s: %s", tuning, clembed_status_string(s));
  return s == CLEMBED_OK ? ctx : NULL;
}

/* Both shapes on the default device; 0 (both NULL) when either fails or the
 * contexts do not use the shapes asked for. */
static inline int tu_shaped_pair(clembed_context **cpu, clembed_context **gpu) {
  *cpu = tu_shaped_context("cpu");
  *gpu = tu_shaped_context("gpu");
  if (*cpu && *gpu) {
    int c = clembed__test_cpu_shapes(*cpu), g = clembed__test_cpu_shapes(*gpu);
    EXPECT(c == 1 && g == 0, "CLEMBED_TUNING=cpu gave shapes %d, =gpu gave %d (1 = CPU shapes)", c, g);
    if (c == 1 && g == 0) return 1;
  }
  clembed_context_destroy(*cpu);
  clembed_context_destroy(*gpu);
  *cpu = *gpu = NULL;
  return 0;
}


/* The device's global memory cache in bytes (CL_DEVICE_GLOBAL_MEM_CACHE_SIZE),
 * or `none` where it reports 0. */
static inline unsigned long long tu_device_cache(clembed_context *ctx, unsigned long long none) {
  cl_device_id dev;
  cl_ulong cache = 0;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof cache, &cache, NULL);
  return cache ? (unsigned long long)cache : none;
}

/* 0 where setting a user event that a command waits on hangs the caller:
 * POCL's single-threaded `basic` device (POCL_DEVICES=basic) runs the waiting
 * command inside clSetUserEventStatus, which holds the event's lock that the
 * command's own status update then waits for, on an in-order queue too
 * (pocl/pocl#1177, open; POCL 3.1). A case that holds an operation back with a
 * user event skips that part there. 1 elsewhere. */
static inline int tu_user_events_gate(cl_device_id dev) {
  cl_platform_id p = NULL;
  char pname[128] = "", dname[128] = "";
  clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof p, &p, NULL);
  if (p) clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);
  return !(!strcmp(pname, "Portable Computing Language") && !strncmp(dname, "basic", 5));
}

/* Host arrays of elements of a dtype. */
static inline void *tu_alloc_elems(size_t n, clembed_dtype t) { return calloc(n ? n : 1, clembed_dtype_size(t)); }

/* Element i of a host array of dtype t, as a float. */
static inline float tu_elem(const void *p, size_t i, clembed_dtype t) {
  if (t == CLEMBED_F32) return ((const float *)p)[i];
  if (t == CLEMBED_F16) return ref_f16_to_f32(((const uint16_t *)p)[i]);
  return ref_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* Stores v, rounded to nearest even, as element i of a host array of dtype t. */
static inline void tu_set_elem(void *p, size_t i, clembed_dtype t, float v) {
  if (t == CLEMBED_F32) ((float *)p)[i] = v;
  else if (t == CLEMBED_F16) ((uint16_t *)p)[i] = ref_f32_to_f16(v);
  else ((uint16_t *)p)[i] = ref_f32_to_bf16(v);
}

/* What surrounds a window in a test's buffer, so that a stray write shows. */
#define TU_FILL 777.0f

/* Elements [0, total) of m's buffer (its window and what lies around it), as
 * dtype t, in a new allocation (at least one element). */
static inline void *tu_read_buffer(clembed_context *ctx, const clembed_matrix *m, size_t total, clembed_dtype t) {
  clembed_matrix whole = *m;
  whole.offset = 0;
  whole.rows = 1;
  whole.cols = total ? total : 1;
  whole.ld = whole.cols;
  void *all = tu_alloc_elems(whole.cols, t);
  OK(ctx, clembed_matrix_read(ctx, &whole, all, t));
  return all;
}

/* How many of the first `total` elements of m's buffer lie outside m's window
 * and no longer hold TU_FILL: writes out of bounds. */
static inline size_t tu_written_outside(clembed_context *ctx, const clembed_matrix *m, size_t total) {
  void *all = tu_read_buffer(ctx, m, total, m->dtype);
  size_t touched = 0;
  for (size_t e = 0; e < total; e++) {
    int inside = m->ld && e >= m->offset && (e - m->offset) / m->ld < m->rows && (e - m->offset) % m->ld < m->cols;
    if (!inside && tu_elem(all, e, m->dtype) != ref_round(TU_FILL, m->dtype)) touched++;
  }
  free(all);
  return touched;
}

/* ------------------------------------------------ matrices with guarded gaps */

/* A rows x cols matrix in its own buffer of cl_context c, with `off` elements
 * before it and ld = cols + extra; every other byte holds 0xA5 so gaps can be
 * checked (tu_check_gaps). The whole buffer is written in one host write
 * (Oclgrind 21.10 tracks only the last host write of a buffer as initialised,
 * so a write at an offset would make it report the rest). */
static inline clembed_matrix tu_gapped_matrix(cl_context c, size_t rows, size_t cols, clembed_dtype dt, size_t extra,
                                              size_t off, const float *host) {
  clembed_matrix m = {0};
  size_t ld = cols + extra, es = clembed_dtype_size(dt);
  size_t elems = off + (rows ? (rows - 1) * ld + cols : 0) + 1;
  cl_int err;
  unsigned char *img = malloc(elems * es);
  memset(img, 0xA5, elems * es);
  for (size_t r = 0; r < rows && host; r++)
    for (size_t col = 0; col < cols; col++) {
      unsigned char *p = img + (off + r * ld + col) * es;
      float v = host[r * cols + col];
      uint16_t h = dt == CLEMBED_F16 ? ref_f32_to_f16(v) : ref_f32_to_bf16(v);
      if (dt == CLEMBED_F32) memcpy(p, &v, 4);
      else memcpy(p, &h, 2);
    }
  m.buffer = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, elems * es, img, &err);
  EXPECT(err == CL_SUCCESS, "clCreateBuffer %d", err);
  free(img);
  m.offset = off;
  m.rows = rows;
  m.cols = cols;
  m.ld = extra ? ld : 0;
  m.dtype = dt;
  return m;
}

/* n host ids (int64) on the device as `type` (I32: each narrowed). */
static inline clembed_ids tu_ids(clembed_context *ctx, const int64_t *h, size_t n, clembed_index_type type) {
  clembed_ids ids;
  memset(&ids, 0, sizeof ids);
  if (type == CLEMBED_I64) {
    OK(ctx, clembed_ids_create(ctx, h, n, CLEMBED_I64, &ids));
  } else {
    int32_t *h32 = (int32_t *)malloc((n + 1) * sizeof *h32);
    for (size_t i = 0; i < n; i++) h32[i] = (int32_t)h[i];
    OK(ctx, clembed_ids_create(ctx, h32, n, CLEMBED_I32, &ids));
    free(h32);
  }
  return ids;
}

/* A call that must fail with `want`, its error detail naming `arg`. */
static inline void tu_refused(clembed_context *ctx, clembed_status want, clembed_status got, const char *arg,
                              const char *what) {
  clembed_error_detail d;
  memset(&d, 0, sizeof d);
  clembed_context_error(ctx, &d);
  EXPECT(got == want && d.argument && !strcmp(d.argument, arg), "%s: %s (argument %s), not %s (argument %s): %s",
         what, clembed_status_string(got), d.argument ? d.argument : "none", clembed_status_string(want), arg,
         clembed_context_message(ctx));
}

/* The matrix read back as F32, in a new allocation (at least one element). */
static inline float *tu_read_f32(clembed_context *ctx, const clembed_matrix *m) {
  float *h = malloc((m->rows * m->cols + 1) * sizeof(float));
  OK(ctx, clembed_matrix_read(ctx, m, h, CLEMBED_F32));
  return h;
}

/* Checks that the bytes of m's buffer outside the matrix still hold 0xA5. */
static inline void tu_check_gaps(cl_command_queue q, const clembed_matrix *m, const char *what) {
  size_t size;
  clGetMemObjectInfo(m->buffer, CL_MEM_SIZE, sizeof size, &size, NULL);
  unsigned char *b = malloc(size);
  clEnqueueReadBuffer(q, m->buffer, CL_TRUE, 0, size, b, 0, NULL, NULL);
  size_t es = clembed_dtype_size(m->dtype), ld = m->ld ? m->ld : m->cols, bad = 0;
  for (size_t e = 0; e < size / es; e++) {
    int inside = 0;
    if (e >= m->offset && m->cols) {
      size_t r = (e - m->offset) / ld, c = (e - m->offset) % ld;
      inside = r < m->rows && c < m->cols;
    }
    if (!inside)
      for (size_t k = 0; k < es; k++) bad += b[e * es + k] != 0xA5;
  }
  EXPECT(bad == 0, "%s: %zu bytes outside the matrix changed", what, bad);
  free(b);
}

/* A device matrix inside a larger buffer: `pad` extra columns per row and `off`
 * leading elements, all holding TU_FILL, with `host` (dense, dtype t) written
 * into the rows x cols window. The caller releases m->buffer. */
static inline clembed_status tu_make_strided(clembed_context *ctx, size_t rows, size_t cols, size_t pad,
                                             size_t off, clembed_dtype t, const void *host, clembed_matrix *m) {
  clembed_matrix whole;
  size_t ld = cols + pad, total = off + rows * ld;
  clembed_status s = clembed_matrix_create(ctx, 1, total ? total : 1, t, &whole);
  if (s != CLEMBED_OK) return s;
  void *fill = tu_alloc_elems(total, t);
  for (size_t i = 0; i < total; i++) tu_set_elem(fill, i, t, TU_FILL);
  s = clembed_matrix_write(ctx, &whole, fill, t);
  free(fill);
  m->buffer = whole.buffer;
  m->offset = off;
  m->rows = rows;
  m->cols = cols;
  m->ld = ld;
  m->dtype = t;
  if (s == CLEMBED_OK && rows && cols) s = clembed_matrix_write(ctx, m, host, t);
  return s;
}

/* A deterministic pseudo-random float in [-1, 1). */
static inline float tu_rand(uint64_t *state) {
  *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((double)(*state >> 40) / (double)(1ULL << 24) * 2.0 - 1.0);
}

/* The next 32 bits of the generator of tu_rand. */
static inline uint32_t tu_rand32(uint64_t *state) {
  *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(*state >> 32);
}

/* Bags for the bag tests: `bags` bags (CSR offsets, bags + 1 entries) of 0 to
 * 12 ids below `rows` (bags 4, 13, 22, ... empty), a weight in [-2, 2) per id. */
typedef struct tu_bagset {
  size_t n, bags;
  int64_t *id, *off;
  float *w;
} tu_bagset;

static inline tu_bagset tu_bags(size_t rows, size_t bags, uint64_t *rng) {
  tu_bagset s = {0, bags, NULL, NULL, NULL};
  s.off = (int64_t *)malloc((bags + 1) * sizeof *s.off);
  for (size_t b = 0; b < bags; b++) {
    s.off[b] = (int64_t)s.n;
    s.n += b % 9 == 4 ? 0 : tu_rand32(rng) % 13;
  }
  s.off[bags] = (int64_t)s.n;
  s.id = (int64_t *)malloc((s.n + 1) * sizeof *s.id);
  s.w = (float *)malloc((s.n + 1) * sizeof *s.w);
  for (size_t i = 0; i < s.n; i++) {
    s.id[i] = (int64_t)(tu_rand32(rng) % rows);
    s.w[i] = 2.0f * tu_rand(rng);
  }
  return s;
}

static inline void tu_free_bags(tu_bagset *s) {
  free(s->id);
  free(s->off);
  free(s->w);
}

/* ------------------------------------------------------------ named cases */

/* TU_CASE(name) { ... } defines a case: a function of the suite's context
 * (`ctx`: the test device's for device suites, NULL otherwise), registered
 * under `name` before main runs (by a GCC/Clang constructor). Cases run in
 * the order they are written. A case must check something: one that makes no
 * check fails, unless it calls tu_skip() to say why it checks nothing here. */
typedef void (*tu_case_fn)(clembed_context *ctx);
typedef struct tu_case_entry {
  const char *name;
  tu_case_fn fn;
  int line;
} tu_case_entry;

#define TU_MAX_CASES 256
static tu_case_entry tu_cases[TU_MAX_CASES];
static int tu_ncases = 0;
static int tu_small = 0;                /* "small" on the command line: reduced sizes */
/* "full" on the command line: every combination of a test's cross products
 * (dtype x width x mode x shape ...), where by default a test runs a sample of
 * them that still meets every value of every setting (the `exhaustive` ctest
 * entries pass it; ./tools/check.sh --quick leaves them out). */
static int tu_full = 0;
static const char *tu_skipped = NULL;   /* why the running case checks nothing */

static inline void tu_register(const char *name, tu_case_fn fn, int line) {
  if (tu_ncases == TU_MAX_CASES) {
    fprintf(stderr, "more than %d cases: raise TU_MAX_CASES\n", TU_MAX_CASES);
    exit(2);
  }
  tu_cases[tu_ncases].name = name;
  tu_cases[tu_ncases].fn = fn;
  tu_cases[tu_ncases].line = line;
  tu_ncases++;
}

#define TU_CASE(name)                                                          \
  static void tu_case_##name(clembed_context *ctx);                            \
  __attribute__((constructor)) static void tu_register_##name(void) {          \
    tu_register(#name, tu_case_##name, __LINE__);                              \
  }                                                                            \
  static void tu_case_##name(clembed_context *ctx __attribute__((unused)))

/* The running case checks nothing on this device or in this mode, and says why. */
static inline void tu_skip(const char *why) {
  tu_skipped = why;
  printf("  skipped: %s\n", why);
}

/* A suite: its name, whether its cases need the test device (a context from
 * tu_context(), passed to every case and destroyed at the end), optional
 * set-up and tear-down around the cases (their checks count as a case
 * "setup"/"teardown" when they fail), and optionally the seconds a case may
 * take before the test fails naming it (a deadlock fails instead of hanging). */
typedef struct tu_suite {
  const char *name;
  int device;
  void (*setup)(clembed_context *ctx);
  void (*teardown)(clembed_context *ctx);
  unsigned case_timeout_s;
} tu_suite;

static const char *tu_running = ""; /* the running case's name, for tu_on_alarm */

static void tu_on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAILED: a case blocked past its time limit (deadlock): ";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
  if (write(2, tu_running, strlen(tu_running)) < 0) _exit(1);
  if (write(2, "\n", 1) < 0) _exit(1);
  _exit(1);
}

static int tu_case_order(const void *a, const void *b) {
  return ((const tu_case_entry *)a)->line - ((const tu_case_entry *)b)->line;
}

static inline int tu_find_case(const char *name) {
  for (int i = 0; i < tu_ncases; i++)
    if (!strcmp(tu_cases[i].name, name)) return i;
  return -1;
}

/* Runs the cases named on the command line (all without names) and prints each
 * one's result, then "N passed, M failed". Arguments: case names, "small",
 * "full", "--list" (prints the names, runs nothing). CLEMBED_TEST_SMALL=1 in the
 * environment is "small" for every test (./tools/check.sh --quick). Exit 0
 * when all passed, 1 when any failed, 2 for an unknown argument; 77 from
 * tu_context() when no device and CLEMBED_ALLOW_NO_DEVICE=1. */
static inline int tu_main(int argc, char **argv, tu_suite suite) {
  if (tu_ncases == 0) { /* a suite that runs nothing must not pass */
    fprintf(stderr, "%s: no case is registered\n", suite.name);
    return 1;
  }
  qsort(tu_cases, (size_t)tu_ncases, sizeof tu_cases[0], tu_case_order);
  char *selected = calloc((size_t)tu_ncases + 1, 1);
  int any = 0, list = 0;
  const char *small_env = getenv("CLEMBED_TEST_SMALL");
  if (small_env && !strcmp(small_env, "1")) tu_small = 1;
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "small")) {
      tu_small = 1;
    } else if (!strcmp(argv[a], "full")) {
      tu_full = 1;
    } else if (!strcmp(argv[a], "--list")) {
      list = 1;
    } else {
      int k = tu_find_case(argv[a]);
      if (k < 0) {
        fprintf(stderr, "%s: no case named '%s' (%s --list names them)\n", suite.name, argv[a], argv[0]);
        free(selected);
        return 2;
      }
      selected[k] = 1;
      any = 1;
    }
  }
  if (list) {
    for (int i = 0; i < tu_ncases; i++) printf("%s\n", tu_cases[i].name);
    free(selected);
    return 0;
  }
  clembed_context *ctx = suite.device ? tu_context() : NULL;
  if (suite.case_timeout_s) signal(SIGALRM, tu_on_alarm);
  int passed = 0, failed = 0;
  if (suite.setup) {
    int before = tu_failures;
    suite.setup(ctx);
    if (tu_failures != before) {
      printf("setup: FAILED (%d checks failed)\n", tu_failures - before);
      failed++;
    }
  }
  for (int i = 0; i < tu_ncases; i++) {
    if (any && !selected[i]) continue;
    int checks = tu_checks, failures = tu_failures;
    tu_skipped = NULL;
    printf("case %s\n", tu_cases[i].name);
    fflush(stdout);
    tu_running = tu_cases[i].name;
    if (suite.case_timeout_s) alarm(suite.case_timeout_s);
    tu_cases[i].fn(ctx);
    if (suite.case_timeout_s) alarm(0);
    fflush(stderr);
    checks = tu_checks - checks;
    failures = tu_failures - failures;
    if (failures) {
      printf("case %s: FAILED (%d of %d checks)\n", tu_cases[i].name, failures, checks);
      failed++;
    } else if (!checks && !tu_skipped) {
      printf("case %s: FAILED (it made no check)\n", tu_cases[i].name);
      tu_failures++;
      failed++;
    } else {
      printf("case %s: passed (%d checks)\n", tu_cases[i].name, checks);
      passed++;
    }
    fflush(stdout);
  }
  if (suite.teardown) {
    int before = tu_failures;
    suite.teardown(ctx);
    if (tu_failures != before) {
      printf("teardown: FAILED (%d checks failed)\n", tu_failures - before);
      failed++;
    }
  }
  clembed_context_destroy(ctx);
  free(selected);
  printf("%s%s%s: %d checks, %d failed\n", suite.name, tu_small ? " small" : "", tu_full ? " full" : "", tu_checks,
         tu_failures);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

#endif
