/* Device data: matrices and ids.
 * - Round trips for every (host dtype written) x (device dtype) x (host dtype
 *   read) with exact expectations from the plain reference conversions of
 *   reference.h: every F16 and BF16 bit pattern, and F32 special values
 *   (bf16 round-to-nearest-even ties, f16 subnormals and their ties, overflow
 *   to inf, NaN stays NaN, -0.0 keeps its sign) plus random bit patterns.
 * - The device kernels' own conversions (a lookup from one dtype to another)
 *   on the same special values.
 * - ld > cols and offset windows: written and read back, elements outside the
 *   window unchanged.
 * - 0-row and 0-col matrices; ids I32/I64 with offsets.
 * - Every invalid argument, rows*cols overflow (INVALID_ARGUMENT) and a matrix
 *   larger than CL_DEVICE_MAX_MEM_ALLOC_SIZE (OUT_OF_MEMORY). */
#include "test_util.h"

static const clembed_dtype DT[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
static const char *DN[3] = {"F32", "F16", "BF16"};

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint32_t to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* Same value: NaN matches NaN, and zeros must agree in sign. */
static int same(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  return a == b && signbit(a) == signbit(b);
}

/* The bits of a non-NaN value in dtype t (for checking the device's storage). */
static uint32_t bits_of(const void *p, size_t i, clembed_dtype t) {
  if (t == CLEMBED_F32) return to_bits(((const float *)p)[i]);
  return ((const uint16_t *)p)[i];
}

static int device_has_denorms(clembed_context *ctx) {
  cl_device_id d = NULL;
  cl_device_fp_config fc = 0;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_DEVICE, sizeof d, &d, NULL);
  clGetDeviceInfo(d, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fc, &fc, NULL);
  return (fc & CL_FP_DENORM) != 0;
}

static cl_ulong device_max_alloc(clembed_context *ctx) {
  cl_device_id d = NULL;
  cl_ulong m = 0;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_DEVICE, sizeof d, &d, NULL);
  clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof m, &m, NULL);
  return m;
}

/* F32 values that probe every conversion rule. */
static size_t special_f32(float *v, size_t cap, int with_f32_subnormals) {
  size_t n = 0;
#define ADD(x) \
  do {         \
    if (n < cap) v[n++] = (x); \
  } while (0)
  ADD(0.0f);
  ADD(-0.0f);
  ADD(1.0f);
  ADD(-1.0f);
  ADD(0.1f);
  ADD(-3.14159265f);
  ADD(INFINITY);
  ADD(-INFINITY);
  ADD(NAN);
  ADD(-NAN);
  ADD(from_bits(0x7FA00001u)); /* a signalling NaN pattern */
  /* f16: the largest finite, the overflow boundary (65520 rounds to inf) */
  ADD(65504.0f);
  ADD(65505.0f);
  ADD(65519.0f);
  ADD(65519.996f);
  ADD(65520.0f);
  ADD(-65520.0f);
  ADD(1e6f);
  ADD(-1e6f);
  ADD(3.4028235e38f); /* FLT_MAX: bf16 rounds it to inf */
  ADD(-3.4028235e38f);
  ADD(from_bits(0x7F7F7FFFu)); /* just below the bf16 overflow tie: stays finite */
  ADD(from_bits(0x7F7F8000u)); /* tie at the top, upper odd: rounds to inf */
  /* f16 normal/subnormal boundary and subnormals */
  ADD(ldexpf(1.0f, -14));
  ADD(ldexpf(1.0f, -14) * 0.999f);
  ADD(ldexpf(1.0f, -24));          /* smallest f16 subnormal */
  ADD(-ldexpf(1.0f, -24));
  ADD(ldexpf(1.0f, -25));          /* tie between 0 and the smallest: to even (0) */
  ADD(-ldexpf(1.0f, -25));         /* -> -0 */
  ADD(ldexpf(3.0f, -25));          /* tie between 1 and 2 ulp: to even (2) */
  ADD(ldexpf(5.0f, -25));          /* tie between 2 and 3 ulp: to even (2) */
  ADD(ldexpf(1.0f, -25) * 1.0001f);/* just above the tie: rounds up */
  ADD(ldexpf(1.0f, -26));          /* rounds to 0 */
  ADD(ldexpf(1023.0f, -24));       /* the largest subnormal */
  ADD(ldexpf(1023.5f, -24));       /* tie to the smallest normal (even) */
  /* f16 normal ties: 1 + 2^-11 (tie, to even 1), 1 + 3*2^-11 (tie, up) */
  ADD(1.0f + ldexpf(1.0f, -11));
  ADD(1.0f + ldexpf(3.0f, -11));
  ADD(2048.0f + 1.0f);              /* tie at ulp 2: to even 2048 */
  ADD(2048.0f + 3.0f);              /* tie: to 2052 */
  /* bf16 ties: lower half exactly 0x8000 */
  ADD(from_bits(0x3F808000u)); /* upper even: stays 0x3F80 */
  ADD(from_bits(0x3F818000u)); /* upper odd: to 0x3F82 */
  ADD(from_bits(0x3F808001u)); /* above the tie: up */
  ADD(from_bits(0x3F807FFFu)); /* below the tie: down */
  ADD(from_bits(0xBF818000u)); /* negative tie, upper odd */
  ADD(from_bits(0x3FFFFFFFu)); /* carries into the exponent */
  ADD(from_bits(0x00808000u)); /* tie at the smallest normal */
  if (with_f32_subnormals) {
    ADD(from_bits(0x00000001u)); /* the smallest f32 subnormal */
    ADD(from_bits(0x80000001u));
    ADD(from_bits(0x00018000u)); /* a bf16 tie among subnormals */
    ADD(from_bits(0x007FFFFFu));
  }
#undef ADD
  return n;
}

/* ------------------------------------------------------------ round trips */

TU_CASE(round_trips_every_dtype_and_bit_pattern) {
  /* inputs per host dtype: F32 specials + random bit patterns; every F16/BF16 pattern */
  size_t nrand = tu_small ? 2000 : 20000;
  size_t cap = 64 + nrand;
  float *f32in = malloc(cap * sizeof *f32in);
  size_t n32 = special_f32(f32in, 64, 1);
  uint64_t rng = 42;
  for (size_t i = 0; i < nrand; i++) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    uint32_t u = (uint32_t)(rng >> 32);
    if (i % 4 == 1) u = (u & 0x8FFFFFFFu) | 0x30000000u; /* around the f16 range */
    if (i % 4 == 2) u &= 0x807FFFFFu | (0x1Fu << 23);   /* tiny and subnormal */
    f32in[n32++] = from_bits(u);
  }
  size_t n16 = 65536;
  uint16_t *h16 = malloc(n16 * 2);
  for (size_t i = 0; i < n16; i++) h16[i] = (uint16_t)i;

  for (int h = 0; h < 3; h++) {
    size_t n = DT[h] == CLEMBED_F32 ? n32 : n16;
    const void *in = DT[h] == CLEMBED_F32 ? (const void *)f32in : (const void *)h16;
    /* a matrix shape that is not a single row */
    size_t cols = 37, rows = (n + cols - 1) / cols;
    size_t total = rows * cols;
    void *host = calloc(total, 4);
    memcpy(host, in, n * clembed_dtype_size(DT[h]));
    for (size_t i = n; i < total; i++) tu_set_elem(host, i, DT[h], 0.5f);
    for (int d = 0; d < 3; d++) {
      clembed_matrix m = {0};
      OK(ctx, clembed_matrix_create(ctx, rows, cols, DT[d], &m));
      OK(ctx, clembed_matrix_write(ctx, &m, host, DT[h]));
      for (int r = 0; r < 3; r++) {
        void *got = calloc(total, 4);
        OK(ctx, clembed_matrix_read(ctx, &m, got, DT[r]));
        size_t bad = 0, badbits = 0;
        for (size_t i = 0; i < total; i++) {
          float x = tu_elem(host, i, DT[h]);                 /* the written value */
          float dv = ref_round(x, DT[d]);                  /* as stored on the device */
          float want = ref_round(dv, DT[r]);               /* as read back */
          float g = tu_elem(got, i, DT[r]);
          if (!same(g, want)) {
            if (bad < 5)
              fprintf(stderr, "  %s -> %s -> %s: element %zu (0x%08x): got %.9g want %.9g\n", DN[h], DN[d], DN[r],
                      i, DT[h] == CLEMBED_F32 ? to_bits(x) : (unsigned)((uint16_t *)host)[i], g, want);
            bad++;
          }
          /* the exact bits when reading in the device dtype (NaN payloads aside) */
          if (r == d && !isnan(want)) {
            uint32_t wb = DT[d] == CLEMBED_F32   ? to_bits(want)
                          : DT[d] == CLEMBED_F16 ? ref_f32_to_f16(want)
                                                 : ref_f32_to_bf16(want);
            if (bits_of(got, i, DT[r]) != wb) badbits++;
          }
        }
        EXPECT(bad == 0, "host %s -> device %s -> host %s: %zu of %zu values wrong", DN[h], DN[d], DN[r], bad,
               total);
        EXPECT(badbits == 0, "host %s -> device %s: %zu stored bit patterns wrong", DN[h], DN[d], badbits);
        free(got);
      }
      clembed_matrix_release(&m);
      EXPECT(m.buffer == NULL && m.rows == 0 && m.cols == 0, "release does not zero the matrix");
    }
    free(host);
  }
  free(f32in);
  free(h16);
}

/* The kernels' conversions: a lookup of the special values from a table of
 * one dtype into an output of another (scale 1: the value is only converted). */
TU_CASE(kernel_conversions_of_special_values) {
  float v[64];
  int denorms = device_has_denorms(ctx);
  size_t n = special_f32(v, 64, denorms);
  for (int t = 0; t < 3; t++)
    for (int o = 0; o < 3; o++) {
      clembed_matrix tab = {0}, out = {0};
      clembed_ids ids = {0};
      int32_t id[3] = {0, 2, 1};
      /* 3 rows: the values, their negations, the values halved */
      float *w = malloc(3 * n * sizeof *w), *got = malloc(3 * n * sizeof *got);
      for (size_t i = 0; i < n; i++) {
        w[i] = v[i];
        w[n + i] = -v[i];
        w[2 * n + i] = v[i] * 0.5f;
        if (!denorms && fpclassify(w[2 * n + i]) == FP_SUBNORMAL) w[2 * n + i] = v[i];
      }
      OK(ctx, clembed_matrix_create(ctx, 3, n, DT[t], &tab));
      OK(ctx, clembed_matrix_write(ctx, &tab, w, CLEMBED_F32));
      OK(ctx, clembed_matrix_create(ctx, 3, n, DT[o], &out));
      OK(ctx, clembed_ids_create(ctx, id, 3, CLEMBED_I32, &ids));
      OK(ctx, clembed_lookup(ctx, &tab, &ids, &out, 0, NULL, NULL));
      OK(ctx, clembed_matrix_read(ctx, &out, got, CLEMBED_F32));
      size_t bad = 0;
      for (size_t r = 0; r < 3; r++)
        for (size_t i = 0; i < n; i++) {
          float want = ref_round(ref_round(w[(size_t)id[r] * n + i], DT[t]), DT[o]);
          float g = got[r * n + i];
          if (!same(g, want)) {
            if (bad < 5)
              fprintf(stderr, "  kernel %s -> %s: value 0x%08x: got %.9g (0x%08x) want %.9g\n", DN[t], DN[o],
                      to_bits(w[(size_t)id[r] * n + i]), g, to_bits(g), want);
            bad++;
          }
        }
      EXPECT(bad == 0, "kernel conversion %s -> %s: %zu of %zu wrong", DN[t], DN[o], bad, 3 * n);
      clembed_matrix_release(&tab);
      clembed_matrix_release(&out);
      clembed_ids_release(&ids);
      free(w);
      free(got);
    }
}

/* The F16 stores of the row shapes (whole vectors: on an x86 CPU under POCL
 * the CPU's conversion instruction, elsewhere the bit formula) against the
 * reference, bit for bit, NaNs included: a NaN keeps its sign and the top 10
 * bits of its payload, made quiet. A 64 x 64 F32 table of the special values
 * and of random bit patterns (every exponent, NaN payloads), looked up into
 * F16 rows of 64 columns. */
TU_CASE(f16_vector_stores_bit_for_bit) {
  enum { R = 64, C = 64 };
  float v[64], *w = malloc(R * C * sizeof *w);
  uint16_t *got = malloc(R * C * sizeof *got);
  int32_t id[R];
  int denorms = device_has_denorms(ctx);
  size_t n = special_f32(v, 64, denorms);
  uint64_t rng = 0x5EED;
  for (size_t i = 0; i < (size_t)R * C; i++) {
    uint32_t b;
    if (i < 2 * n) {
      w[i] = i < n ? v[i] : -v[i - n];
      continue;
    }
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    b = (uint32_t)(rng >> 32);
    if (i % 2) b = (b & 0x807FFFFFu) | ((uint32_t)(96 + (rng >> 20) % 48) << 23); /* near F16's range */
    memcpy(&w[i], &b, 4);
    if (!denorms && fpclassify(w[i]) == FP_SUBNORMAL) w[i] = 0.0f;
  }
  for (int r = 0; r < R; r++) id[r] = (r * 37) % R;
  clembed_matrix tab = {0}, out = {0};
  clembed_ids ids = {0};
  OK(ctx, tu_make_strided(ctx, R, C, 0, 0, CLEMBED_F32, w, &tab));
  OK(ctx, clembed_matrix_create(ctx, R, C, CLEMBED_F16, &out));
  OK(ctx, clembed_ids_create(ctx, id, R, CLEMBED_I32, &ids));
  OK(ctx, clembed_lookup(ctx, &tab, &ids, &out, 0, NULL, NULL));
  OK(ctx, clembed_matrix_read(ctx, &out, got, CLEMBED_F16));
  size_t bad = 0;
  for (size_t r = 0; r < R; r++)
    for (size_t c = 0; c < C; c++) {
      float x = w[(size_t)id[r] * C + c];
      uint32_t xb = to_bits(x);
      uint16_t want = isnan(x) ? (uint16_t)(((xb >> 16) & 0x8000u) | 0x7E00u | ((xb >> 13) & 0x3FFu))
                               : ref_f32_to_f16(x);
      if (got[r * C + c] != want) {
        if (bad < 5)
          fprintf(stderr, "  F32 0x%08x -> F16: got 0x%04x want 0x%04x\n", xb, got[r * C + c], want);
        bad++;
      }
    }
  EXPECT(bad == 0, "F16 vector stores: %zu of %d wrong", bad, R * C);
  clembed_matrix_release(&tab);
  clembed_matrix_release(&out);
  clembed_ids_release(&ids);
  free(w);
  free(got);
}

/* ------------------------------------------------------------ windows */

/* A rows x cols window at `off` with leading dimension ld in a buffer of
 * `total` elements filled with a sentinel: write, read back, and the rest of
 * the buffer is unchanged. host_dt may differ from the device dtype. */
static void window_case(clembed_context *ctx, size_t rows, size_t cols, size_t ld, size_t off, clembed_dtype dt,
                        clembed_dtype host_dt) {
  size_t total = off + (rows ? (rows - 1) * ld + cols : 0) + 5;
  clembed_matrix whole = {0};
  OK(ctx, clembed_matrix_create(ctx, 1, total, dt, &whole));
  float *fill = malloc(total * sizeof *fill);
  for (size_t i = 0; i < total; i++) fill[i] = 777.0f;
  OK(ctx, clembed_matrix_write(ctx, &whole, fill, CLEMBED_F32));
  clembed_matrix m = {whole.buffer, off, rows, cols, ld, dt};
  size_t n = rows * cols;
  void *host = calloc(n ? n : 1, 4), *back = calloc(n ? n : 1, 4);
  uint64_t rng = rows * 1000 + cols * 10 + ld + off;
  for (size_t i = 0; i < n; i++) tu_set_elem(host, i, host_dt, tu_rand(&rng) * 100.0f);
  OK(ctx, clembed_matrix_write(ctx, &m, host, host_dt));
  OK(ctx, clembed_matrix_read(ctx, &m, back, host_dt));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    if (!same(tu_elem(back, i, host_dt), ref_round(ref_round(tu_elem(host, i, host_dt), dt), host_dt))) bad++;
  EXPECT(bad == 0, "window %zux%zu ld %zu off %zu %s (host %s): %zu wrong on reading back", rows, cols, ld, off,
         DN[dt], DN[host_dt], bad);
  float *all = malloc(total * sizeof *all);
  OK(ctx, clembed_matrix_read(ctx, &whole, all, CLEMBED_F32));
  size_t outside = 0, inside = 0;
  for (size_t e = 0; e < total; e++) {
    int in = e >= off && (e - off) / ld < rows && (e - off) % ld < cols;
    if (!in && all[e] != ref_round(777.0f, dt)) outside++;
    if (in) {
      size_t r = (e - off) / ld, c = (e - off) % ld;
      if (!same(all[e], ref_round(tu_elem(host, r * cols + c, host_dt), dt))) inside++;
    }
  }
  EXPECT(outside == 0, "window %zux%zu ld %zu off %zu %s: %zu elements outside the window changed", rows, cols, ld,
         off, DN[dt], outside);
  EXPECT(inside == 0, "window %zux%zu ld %zu off %zu %s: %zu elements misplaced in the buffer", rows, cols, ld, off,
         DN[dt], inside);
  free(fill);
  free(host);
  free(back);
  free(all);
  clembed_matrix_release(&whole);
}

TU_CASE(ld_larger_than_cols_and_offsets) {
  for (int d = 0; d < 3; d++)
    for (int h = 0; h < 3; h++) {
      window_case(ctx, 7, 5, 9, 3, DT[d], DT[h]);
      window_case(ctx, 1, 5, 5, 1, DT[d], DT[h]);
      window_case(ctx, 13, 1, 4, 11, DT[d], DT[h]);
      window_case(ctx, 3, 37, 37, 0, DT[d], DT[h]);
    }
  window_case(ctx, 64, 33, 40, 17, CLEMBED_F16, CLEMBED_F32);
  window_case(ctx, 64, 33, 34, 1, CLEMBED_BF16, CLEMBED_BF16);
  window_case(ctx, 0, 4, 6, 2, CLEMBED_F32, CLEMBED_F32);
  window_case(ctx, 3, 0, 6, 2, CLEMBED_F32, CLEMBED_F16);
}

/* ------------------------------------------------------------ empty shapes */

TU_CASE(zero_rows_and_zero_cols) {
  const size_t shapes[3][2] = {{0, 5}, {5, 0}, {0, 0}};
  for (int s = 0; s < 3; s++)
    for (int d = 0; d < 3; d++) {
      clembed_matrix m = {0};
      size_t r = shapes[s][0], c = shapes[s][1];
      OK(ctx, clembed_matrix_create(ctx, r, c, DT[d], &m));
      EXPECT(m.buffer != NULL && m.rows == r && m.cols == c && m.ld == c && m.offset == 0 && m.dtype == DT[d],
             "%zux%zu %s: fields %zu %zu %zu %zu", r, c, DN[d], m.rows, m.cols, m.ld, m.offset);
      float x = 1.0f;
      OK(ctx, clembed_matrix_write(ctx, &m, NULL, CLEMBED_F32));
      OK(ctx, clembed_matrix_read(ctx, &m, NULL, CLEMBED_F16));
      OK(ctx, clembed_matrix_write(ctx, &m, &x, CLEMBED_F32));
      OK(ctx, clembed_matrix_read(ctx, &m, &x, CLEMBED_F32));
      EXPECT(x == 1.0f, "reading a %zux%zu matrix wrote to the host", r, c);
      clembed_matrix_release(&m);
    }
}

/* ------------------------------------------------------------ ids */

TU_CASE(ids_round_trips_with_offsets) {
  int32_t a32[10];
  int64_t a64[10];
  for (int i = 0; i < 10; i++) {
    a32[i] = (i - 3) * 123456789 / 7;
    a64[i] = (int64_t)(i - 5) * 1234567890123LL; /* beyond 32 bits */
  }
  a32[9] = INT32_MIN;
  a64[9] = INT64_MIN;
  a64[8] = INT64_MAX;
  clembed_ids d32 = {0}, d64 = {0};
  OK(ctx, clembed_ids_create(ctx, a32, 10, CLEMBED_I32, &d32));
  OK(ctx, clembed_ids_create(ctx, a64, 10, CLEMBED_I64, &d64));
  EXPECT(d32.buffer && d32.count == 10 && d32.offset == 0 && d32.type == CLEMBED_I32, "I32 ids fields");
  EXPECT(d64.buffer && d64.count == 10 && d64.offset == 0 && d64.type == CLEMBED_I64, "I64 ids fields");
  int32_t b32[10] = {0};
  int64_t b64[10] = {0};
  OK(ctx, clembed_ids_read(ctx, &d32, b32));
  OK(ctx, clembed_ids_read(ctx, &d64, b64));
  EXPECT(!memcmp(a32, b32, sizeof a32), "I32 ids round trip");
  EXPECT(!memcmp(a64, b64, sizeof a64), "I64 ids round trip");
  /* with an offset: a window of the buffer */
  clembed_ids w32 = d32, w64 = d64;
  w32.offset = 3;
  w32.count = 5;
  w64.offset = 4;
  w64.count = 6;
  int32_t c32[10] = {0};
  int64_t c64[10] = {0};
  c32[5] = 99;
  OK(ctx, clembed_ids_read(ctx, &w32, c32));
  OK(ctx, clembed_ids_read(ctx, &w64, c64));
  EXPECT(!memcmp(c32, a32 + 3, 5 * 4) && c32[5] == 99, "I32 ids at offset 3");
  EXPECT(!memcmp(c64, a64 + 4, 6 * 8), "I64 ids at offset 4");
  /* past the end of the buffer */
  w32.offset = 6;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_ids_read(ctx, &w32, c32));
  w64 = d64;
  w64.count = 11;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_ids_read(ctx, &w64, c64));
  w32 = d32;
  w32.offset = SIZE_MAX;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_ids_read(ctx, &w32, c32));
  /* the I32 buffer read as I64 is too small */
  w32 = d32;
  w32.type = CLEMBED_I64;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_ids_read(ctx, &w32, c64));
  /* zero ids: host may be NULL */
  clembed_ids e = {0};
  OK(ctx, clembed_ids_create(ctx, NULL, 0, CLEMBED_I64, &e));
  EXPECT(e.count == 0, "empty ids count %zu", e.count);
  OK(ctx, clembed_ids_read(ctx, &e, NULL));
  clembed_ids_release(&e);
  clembed_ids_release(&d32);
  clembed_ids_release(&d64);
  EXPECT(d32.buffer == NULL && d32.count == 0, "ids release does not zero");
  clembed_ids_release(NULL);
  clembed_matrix_release(NULL);
}

/* ------------------------------------------------------------ invalid */

static const int INV = CLEMBED_ERR_INVALID_ARGUMENT;

TU_CASE(dtype_sizes) {
  EXPECT(clembed_dtype_size(CLEMBED_F32) == 4 && clembed_dtype_size(CLEMBED_F16) == 2 &&
             clembed_dtype_size(CLEMBED_BF16) == 2 && clembed_dtype_size((clembed_dtype)3) == 0,
         "clembed_dtype_size");
}

/* NULL arguments, bad dtypes, rows*cols and byte counts that overflow */
TU_CASE(create_rejects_bad_arguments_and_overflow) {
  clembed_matrix x = {0};
  FAILS(NULL, INV, clembed_matrix_create(NULL, 2, 2, CLEMBED_F32, &x));
  FAILS(ctx, INV, clembed_matrix_create(ctx, 2, 2, CLEMBED_F32, NULL));
  FAILS(ctx, INV, clembed_matrix_create(ctx, 2, 2, (clembed_dtype)99, &x));
  FAILS(ctx, INV, clembed_matrix_create(ctx, 2, 2, (clembed_dtype)-1, &x));
  FAILS(ctx, INV, clembed_matrix_create(ctx, SIZE_MAX / 2, 3, CLEMBED_F32, &x));        /* rows*cols */
  FAILS(ctx, INV, clembed_matrix_create(ctx, SIZE_MAX / 4 + 1, 1, CLEMBED_F32, &x));    /* bytes */
  FAILS(ctx, INV, clembed_matrix_create(ctx, (size_t)1 << 40, (size_t)1 << 40, CLEMBED_F16, &x));
  EXPECT(strstr(clembed_context_message(ctx), "overflow") != NULL, "message: %s", clembed_context_message(ctx));
  EXPECT(x.buffer == NULL, "a failed create filled the matrix");
}

/* a matrix row or ids larger than CL_DEVICE_MAX_MEM_ALLOC_SIZE: OUT_OF_MEMORY
 * (a matrix of smaller rows is split over several buffers: test_split) */
TU_CASE(create_larger_than_the_device_allows) {
  clembed_matrix x = {0};
  float host[12] = {0};
  cl_ulong max_alloc = device_max_alloc(ctx);
  if (max_alloc && max_alloc / 4 + 1 < (cl_ulong)SIZE_MAX) {
    FAILS(ctx, CLEMBED_ERR_OUT_OF_MEMORY,
          clembed_matrix_create(ctx, 1, (size_t)(max_alloc / 4 + 1), CLEMBED_F32, &x));
    EXPECT(strstr(clembed_context_message(ctx), "one row") != NULL, "message: %s", clembed_context_message(ctx));
    EXPECT(x.buffer == NULL, "a failed create filled the matrix");
    /* ids too */
    clembed_ids i = {0};
    FAILS(ctx, CLEMBED_ERR_OUT_OF_MEMORY, clembed_ids_create(ctx, host, (size_t)(max_alloc / 4 + 1), CLEMBED_I32, &i));
    EXPECT(i.buffer == NULL, "a failed ids_create filled the ids");
  } else {
    tu_skip("the device's allocation limit is not below SIZE_MAX");
  }
}

/* NULL arguments, bad dtypes, windows that do not fit their buffer (ld < cols,
 * offsets, extents that overflow), windows that exactly fit; a failed call
 * leaves the context working and names the problem */
TU_CASE(write_and_read_check_the_window) {
  clembed_matrix m = {0}, bad;
  float host[12] = {0};
  OK(ctx, clembed_matrix_create(ctx, 3, 4, CLEMBED_F32, &m));
  FAILS(NULL, INV, clembed_matrix_write(NULL, &m, host, CLEMBED_F32));
  FAILS(ctx, INV, clembed_matrix_write(ctx, NULL, host, CLEMBED_F32));
  FAILS(ctx, INV, clembed_matrix_write(ctx, &m, NULL, CLEMBED_F32));
  FAILS(ctx, INV, clembed_matrix_write(ctx, &m, host, (clembed_dtype)99));
  FAILS(NULL, INV, clembed_matrix_read(NULL, &m, host, CLEMBED_F32));
  FAILS(ctx, INV, clembed_matrix_read(ctx, NULL, host, CLEMBED_F32));
  FAILS(ctx, INV, clembed_matrix_read(ctx, &m, NULL, CLEMBED_F32));
  FAILS(ctx, INV, clembed_matrix_read(ctx, &m, host, (clembed_dtype)99));
  bad = m;
  bad.dtype = (clembed_dtype)99;
  FAILS(ctx, INV, clembed_matrix_write(ctx, &bad, host, CLEMBED_F32));
  FAILS(ctx, INV, clembed_matrix_read(ctx, &bad, host, CLEMBED_F32));
  bad = m;
  bad.buffer = NULL;
  FAILS(ctx, INV, clembed_matrix_write(ctx, &bad, host, CLEMBED_F32));
  FAILS(ctx, INV, clembed_matrix_read(ctx, &bad, host, CLEMBED_F32));
  bad = m;
  bad.ld = 3; /* < cols */
  FAILS(ctx, INV, clembed_matrix_write(ctx, &bad, host, CLEMBED_F32));
  FAILS(ctx, INV, clembed_matrix_read(ctx, &bad, host, CLEMBED_F32));
  bad = m;
  bad.offset = 1; /* past the buffer */
  FAILS(ctx, INV, clembed_matrix_write(ctx, &bad, host, CLEMBED_F32));
  FAILS(ctx, INV, clembed_matrix_read(ctx, &bad, host, CLEMBED_F32));
  bad = m;
  bad.ld = 5; /* (3-1)*5 + 4 = 14 > 12 */
  FAILS(ctx, INV, clembed_matrix_write(ctx, &bad, host, CLEMBED_F32));
  FAILS(ctx, INV, clembed_matrix_read(ctx, &bad, host, CLEMBED_F32));
  bad = m;
  bad.rows = 4;
  FAILS(ctx, INV, clembed_matrix_read(ctx, &bad, host, CLEMBED_F32));
  bad = m;
  bad.rows = SIZE_MAX; /* overflow of the extent */
  FAILS(ctx, INV, clembed_matrix_read(ctx, &bad, host, CLEMBED_F32));
  bad = m;
  bad.offset = SIZE_MAX - 2;
  FAILS(ctx, INV, clembed_matrix_write(ctx, &bad, host, CLEMBED_F32));
  bad = m;
  bad.dtype = CLEMBED_F32;
  bad.cols = 2;
  bad.ld = 2;
  bad.offset = 6; /* exactly fits: 6 + 2*2 + 2 = 12 */
  OK(ctx, clembed_matrix_read(ctx, &bad, host, CLEMBED_F32));
  bad.offset = 7;
  FAILS(ctx, INV, clembed_matrix_read(ctx, &bad, host, CLEMBED_F32));
  /* the same buffer seen as a wider dtype: 3x4 F16 = 24 bytes fits in 48; F32 6x4 = 96 does not */
  bad = m;
  bad.dtype = CLEMBED_F16;
  OK(ctx, clembed_matrix_read(ctx, &bad, host, CLEMBED_F32));
  bad.rows = 6;
  bad.dtype = CLEMBED_F32;
  FAILS(ctx, INV, clembed_matrix_read(ctx, &bad, host, CLEMBED_F32));
  /* a failed call leaves the context working and its message names the problem */
  FAILS(ctx, INV, clembed_matrix_read(ctx, &bad, host, CLEMBED_F32));
  EXPECT(clembed_context_message(ctx)[0] != '\0', "no message after a failure");
  OK(ctx, clembed_matrix_read(ctx, &m, host, CLEMBED_F32));
  OK(ctx, clembed_finish(ctx));
  clembed_matrix_release(&m);
}

/* a buffer that is not a cl_mem of this size: one too small by a byte */
TU_CASE(buffer_smaller_than_the_window) {
  float host[12] = {0};
  {
    cl_context cc = NULL;
    clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_CONTEXT, sizeof cc, &cc, NULL);
    cl_int err;
    cl_mem small = clCreateBuffer(cc, CL_MEM_READ_WRITE, 3 * 4 * 4 - 1, NULL, &err);
    clembed_matrix u = {small, 0, 3, 4, 0, CLEMBED_F32};
    FAILS(ctx, INV, clembed_matrix_write(ctx, &u, host, CLEMBED_F32));
    u.rows = 2; /* 32 bytes fit */
    OK(ctx, clembed_matrix_write(ctx, &u, host, CLEMBED_F32));
    clReleaseMemObject(small);
  }
}

TU_CASE(ids_reject_bad_arguments) {
  int32_t ids[4] = {1, 2, 3, 4};
  clembed_ids di = {0};
  FAILS(NULL, INV, clembed_ids_create(NULL, ids, 4, CLEMBED_I32, &di));
  FAILS(ctx, INV, clembed_ids_create(ctx, ids, 4, CLEMBED_I32, NULL));
  FAILS(ctx, INV, clembed_ids_create(ctx, NULL, 4, CLEMBED_I32, &di));
  FAILS(ctx, INV, clembed_ids_create(ctx, ids, 4, (clembed_index_type)2, &di));
  FAILS(ctx, INV, clembed_ids_create(ctx, ids, SIZE_MAX / 4, CLEMBED_I64, &di)); /* bytes overflow */
  EXPECT(di.buffer == NULL, "a failed ids_create filled the ids");
  OK(ctx, clembed_ids_create(ctx, ids, 4, CLEMBED_I32, &di));
  int32_t back[4];
  FAILS(NULL, INV, clembed_ids_read(NULL, &di, back));
  FAILS(ctx, INV, clembed_ids_read(ctx, NULL, back));
  FAILS(ctx, INV, clembed_ids_read(ctx, &di, NULL));
  clembed_ids bi = di;
  bi.type = (clembed_index_type)9;
  FAILS(ctx, INV, clembed_ids_read(ctx, &bi, back));
  bi = di;
  bi.buffer = NULL;
  FAILS(ctx, INV, clembed_ids_read(ctx, &bi, back));
  clembed_ids_release(&di);
}

/* Creation zero-fills (and a reused buffer does not leak old contents). */
TU_CASE(creation_zero_fills) {
  for (int d = 0; d < 3; d++)
    for (int rep = 0; rep < 3; rep++) {
      size_t rows = 33, cols = 7 + (size_t)rep; /* odd byte counts for 2-byte dtypes */
      clembed_matrix m = {0};
      OK(ctx, clembed_matrix_create(ctx, rows, cols, DT[d], &m));
      float *g = malloc(rows * cols * sizeof *g);
      for (size_t i = 0; i < rows * cols; i++) g[i] = 5.0f;
      OK(ctx, clembed_matrix_read(ctx, &m, g, CLEMBED_F32));
      size_t nz = 0;
      for (size_t i = 0; i < rows * cols; i++)
        if (!(g[i] == 0.0f && !signbit(g[i]))) nz++;
      EXPECT(nz == 0, "a new %s matrix has %zu non-zero elements", DN[d], nz);
      for (size_t i = 0; i < rows * cols; i++) g[i] = 3.0f;
      OK(ctx, clembed_matrix_write(ctx, &m, g, CLEMBED_F32));
      free(g);
      clembed_matrix_release(&m);
    }
}

int main(int argc, char **argv) { return tu_main(argc, argv, (tu_suite){.name = "test_data", .device = 1}); }
