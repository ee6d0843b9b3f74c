/* Shared by the device tests: context set-up, assertions, plain float64/float32
 * references for the dtype conversions. Each test is one executable. */
#ifndef CLEMBED_TEST_UTIL_H
#define CLEMBED_TEST_UTIL_H
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv, strdup */
#endif

#include "clembed.h"
#include "test_hooks.h" /* src/: clembed's own test hooks */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static inline int tu_finish(const char *name) {
  printf("%s: %d checks, %d failed\n", name, tu_checks, tu_failures);
  return tu_failures ? 1 : 0;
}

/* Plain reference conversions (not the library's). */
static inline float tu_f16_to_f32(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) return m ? NAN : (s ? -INFINITY : INFINITY);
  if (e == 0) v = ldexp((double)m, -24);
  else v = ldexp((double)(m + 1024), e - 25);
  return (float)(s ? -v : v);
}

/* Round to nearest even by search: the half whose value is nearest to f. */
static inline uint16_t tu_f32_to_f16(float f) {
  if (isnan(f)) return 0x7E00;
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  double a = fabs((double)f);
  if (a >= 65520.0) return sign | 0x7C00;
  uint16_t best = 0;
  double bd = INFINITY;
  /* binary search over the ordered positive halves */
  int lo = 0, hi = 0x7BFF;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (tu_f16_to_f32((uint16_t)mid) <= a) lo = mid; else hi = mid - 1;
  }
  for (int c = lo; c <= lo + 1 && c <= 0x7C00; c++) {
    double d = fabs((double)tu_f16_to_f32((uint16_t)c) - a);
    if (d < bd || (d == bd && (c & 1) == 0)) { bd = d; best = (uint16_t)c; }
  }
  return sign | best;
}

static inline float tu_bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t tu_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  uint32_t lower = u & 0xFFFF, upper = u >> 16;
  if (lower > 0x8000 || (lower == 0x8000 && (upper & 1))) upper++;
  return (uint16_t)upper;
}

/* The value a float takes when stored in dtype t and read back. */
static inline float tu_round(float v, clembed_dtype t) {
  if (t == CLEMBED_F16) return tu_f16_to_f32(tu_f32_to_f16(v));
  if (t == CLEMBED_BF16) return tu_bf16_to_f32(tu_f32_to_bf16(v));
  return v;
}

/* Host arrays of elements of a dtype. */
static inline void *tu_alloc_elems(size_t n, clembed_dtype t) { return calloc(n ? n : 1, clembed_dtype_size(t)); }

/* Element i of a host array of dtype t, as a float. */
static inline float tu_elem(const void *p, size_t i, clembed_dtype t) {
  if (t == CLEMBED_F32) return ((const float *)p)[i];
  if (t == CLEMBED_F16) return tu_f16_to_f32(((const uint16_t *)p)[i]);
  return tu_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* Stores v, rounded to nearest even, as element i of a host array of dtype t. */
static inline void tu_set_elem(void *p, size_t i, clembed_dtype t, float v) {
  if (t == CLEMBED_F32) ((float *)p)[i] = v;
  else if (t == CLEMBED_F16) ((uint16_t *)p)[i] = tu_f32_to_f16(v);
  else ((uint16_t *)p)[i] = tu_f32_to_bf16(v);
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
    if (!inside && tu_elem(all, e, m->dtype) != tu_round(TU_FILL, m->dtype)) touched++;
  }
  free(all);
  return touched;
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

/* Philox4x32-10, written plainly from the Random123 definition. */
static inline void tu_philox(uint64_t seed, uint64_t e, uint32_t out[4]) {
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  uint32_t c0 = (uint32_t)e, c1 = (uint32_t)(e >> 32), c2 = 0, c3 = 0;
  for (int r = 0; r < 10; r++) {
    if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

static inline double tu_unit(uint32_t x) { return (double)(x >> 8) / 16777216.0; }

#endif
