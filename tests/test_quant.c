/* test_quant: ggml's block formats (Q8_0, Q4_0, Q4_K, Q6_K).
 *
 * Host cases check the library's block code (src/ops/quant.c) bit for bit
 * against a plain transcription of ggml's own functions (reference_ggml.h):
 * the f16 conversions, the four dequantizers on random blocks, and the Q8_0 and
 * Q4_0 reference quantizers on random rows with zeros, extremes and ties.
 *
 *   test_quant            every case
 *   test_quant host       the host cases
 *   test_quant NAME ...   the named cases */
#include "test_util.h"

#include "ops/quant.h"
#include "reference_ggml.h"

#include <float.h>
#include <stddef.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint32_t rnd32(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng_state >> 32);
}
static float rnd_unit(void) { return tu_rand(&rng_state); }

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* A random finite half (exponent field below 31). */
static uint16_t rnd_finite_half(void) {
  for (;;) {
    uint16_t h = (uint16_t)rnd32();
    if (((h >> 10) & 31) != 31) return h;
  }
}

/* Block bytes of `dtype`, random, with finite f16 scales. */
static void rnd_block(int dtype, uint8_t *b) {
  size_t bytes = ce_quant_block_bytes(dtype);
  for (size_t i = 0; i < bytes; i++) b[i] = (uint8_t)rnd32();
  uint16_t d = rnd_finite_half(), m = rnd_finite_half();
  size_t dpos = dtype == CE_Q6_K ? 208 : 0;
  b[dpos] = (uint8_t)d;
  b[dpos + 1] = (uint8_t)(d >> 8);
  if (dtype == CE_Q4_K) {
    b[2] = (uint8_t)m;
    b[3] = (uint8_t)(m >> 8);
  }
}

/* The reference dequantizer of ggml for n values of `dtype` from raw bytes. */
static void ref_dequantize(int dtype, const uint8_t *raw, float *y, size_t n) {
  size_t nb = n / ce_quant_block_values(dtype), bytes = nb * ce_quant_block_bytes(dtype);
  void *blocks = malloc(bytes ? bytes : 1);
  memcpy(blocks, raw, bytes);
  if (dtype == CE_Q8_0) ref_dequantize_row_q8_0((const ref_block_q8_0 *)blocks, y, (int64_t)n);
  if (dtype == CE_Q4_0) ref_dequantize_row_q4_0((const ref_block_q4_0 *)blocks, y, (int64_t)n);
  if (dtype == CE_Q4_K) ref_dequantize_row_q4_K((const ref_block_q4_K *)blocks, y, (int64_t)n);
  if (dtype == CE_Q6_K) ref_dequantize_row_q6_K((const ref_block_q6_K *)blocks, y, (int64_t)n);
  free(blocks);
}

static const char *qname(int dtype) {
  static const char *names[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q6_K"};
  return dtype >= 0 && dtype <= 6 ? names[dtype] : "?";
}

/* ---------------------------------------------------------- host cases */

static void case_layouts(void) {
  /* ggml's structs, as transcribed: the offsets the library reads. */
  EXPECT(sizeof(ref_block_q8_0) == CE_Q8_0_BYTES && offsetof(ref_block_q8_0, qs) == 2, "q8_0 layout");
  EXPECT(sizeof(ref_block_q4_0) == CE_Q4_0_BYTES && offsetof(ref_block_q4_0, qs) == 2, "q4_0 layout");
  EXPECT(sizeof(ref_block_q4_K) == CE_Q4_K_BYTES && offsetof(ref_block_q4_K, dmin) == 2 &&
             offsetof(ref_block_q4_K, scales) == 4 && offsetof(ref_block_q4_K, qs) == 16,
         "q4_K layout");
  EXPECT(sizeof(ref_block_q6_K) == CE_Q6_K_BYTES && offsetof(ref_block_q6_K, qh) == 128 &&
             offsetof(ref_block_q6_K, scales) == 192 && offsetof(ref_block_q6_K, d) == 208,
         "q6_K layout");
}

static void case_row_bytes(void) {
  static const struct { int dtype; size_t cols, bytes; } t[] = {
      {0, 3, 12},          {1, 3, 6},         {2, 5, 10},        {CE_Q8_0, 32, 34},  {CE_Q8_0, 96, 102},
      {CE_Q4_0, 64, 36},   {CE_Q4_K, 256, 144}, {CE_Q4_K, 512, 288}, {CE_Q6_K, 256, 210}, {CE_Q6_K, 768, 630},
      {CE_Q8_0, 0, 0},     {CE_Q8_0, 33, 0},  {CE_Q4_0, 16, 0},  {CE_Q4_K, 32, 0},   {CE_Q6_K, 255, 0},
      {7, 32, 0},          {-1, 32, 0},       {CE_Q8_0, (SIZE_MAX / 32) * 32, 0}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    size_t got = ce_quant_row_bytes(t[i].dtype, t[i].cols);
    EXPECT(got == t[i].bytes, "row bytes of %s x %zu: %zu, expected %zu", qname(t[i].dtype), t[i].cols, got,
           t[i].bytes);
  }
}

static void case_f16(void) {
  size_t bad = 0;
  for (uint32_t h = 0; h < 65536; h++)
    if (bits_of(ce_quant_f16_to_f32((uint16_t)h)) != bits_of(ref_ggml_compute_fp16_to_fp32((uint16_t)h))) bad++;
  EXPECT(bad == 0, "%zu halves convert to other floats than ggml's", bad);
  /* every half against the plain conversion of test_util.h (finite and infinite) */
  bad = 0;
  for (uint32_t h = 0; h < 65536; h++)
    if (((h >> 10) & 31) != 31 || (h & 1023) == 0)
      if (bits_of(ce_quant_f16_to_f32((uint16_t)h)) != bits_of(tu_f16_to_f32((uint16_t)h))) bad++;
  EXPECT(bad == 0, "%zu halves convert to other floats than the exact value", bad);
  /* floats to halves: random bits, and every float near the rounding boundaries of some halves */
  bad = 0;
  size_t bad_exact = 0;
  for (int i = 0; i < 400000; i++) {
    float f = float_of(rnd32());
    if (i % 4 == 1) f = rnd_unit() * 70000.0f;
    if (i % 4 == 2) f = rnd_unit() * 1e-4f;
    if (i % 4 == 3) { /* half + half an ulp, and its neighbours: the ties */
      uint16_t h = rnd_finite_half();
      uint32_t mid = bits_of(tu_f16_to_f32(h)) + (h & 0x7C00 ? 0x1000u : 0u);
      f = float_of(mid + (uint32_t)(rnd32() % 3) - 1u);
    }
    if (ce_quant_f32_to_f16(f) != ref_ggml_compute_fp32_to_fp16(f)) bad++;
    if (!isnan(f) && ce_quant_f32_to_f16(f) != tu_f32_to_f16(f)) bad_exact++;
  }
  EXPECT(bad == 0, "%zu floats convert to other halves than ggml's", bad);
  EXPECT(bad_exact == 0, "%zu floats convert to other halves than nearest even", bad_exact);
  EXPECT(ce_quant_f32_to_f16(NAN) == 0x7E00 && ce_quant_f32_to_f16(-NAN) == 0xFE00, "NaN -> 0x7E00 with sign");
  EXPECT(ce_quant_f32_to_f16(65520.0f) == 0x7C00 && ce_quant_f32_to_f16(65519.996f) == 0x7BFF, "overflow edge");
}

/* Random blocks of every type, dequantized by both, compared bit for bit. */
static void case_dequantize(void) {
  static const int types[] = {CE_Q8_0, CE_Q4_0, CE_Q4_K, CE_Q6_K};
  for (int t = 0; t < 4; t++) {
    int dtype = types[t];
    size_t qk = ce_quant_block_values(dtype), bb = ce_quant_block_bytes(dtype), nb = 600;
    uint8_t *raw = malloc(nb * bb);
    float *got = malloc(nb * qk * sizeof(float)), *want = malloc(nb * qk * sizeof(float));
    for (size_t b = 0; b < nb; b++) rnd_block(dtype, raw + b * bb);
    EXPECT(ce_quant_dequantize(dtype, raw, got, nb * qk) == 0, "%s dequantize", qname(dtype));
    ref_dequantize(dtype, raw, want, nb * qk);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < nb * qk; i++)
      if (bits_of(got[i]) != bits_of(want[i]) && !bad++) first = i;
    EXPECT(bad == 0, "%s: %zu of %zu values differ from ggml's, first %zu: %a vs %a", qname(dtype), bad, nb * qk,
           first, got[first], want[first]);
    EXPECT(ce_quant_dequantize(dtype, raw, got, qk + 1) == -1, "%s: a partial block is refused", qname(dtype));
    free(raw);
    free(got);
    free(want);
  }
  EXPECT(ce_quant_dequantize(2, NULL, NULL, 0) == -1, "a float dtype is refused");
}

/* One block of each type with every possible f16 scale (inf and NaN included). */
static void case_every_scale(void) {
  static const int types[] = {CE_Q8_0, CE_Q4_0, CE_Q4_K, CE_Q6_K};
  for (int t = 0; t < 4; t++) {
    int dtype = types[t];
    size_t qk = ce_quant_block_values(dtype), bb = ce_quant_block_bytes(dtype), bad = 0;
    uint8_t raw[CE_Q4_K_BYTES > CE_Q6_K_BYTES ? CE_Q4_K_BYTES : CE_Q6_K_BYTES];
    float got[256], want[256];
    rnd_block(dtype, raw);
    size_t dpos = dtype == CE_Q6_K ? 208 : 0;
    for (uint32_t h = 0; h < 65536; h++) {
      raw[dpos] = (uint8_t)h;
      raw[dpos + 1] = (uint8_t)(h >> 8);
      if (dtype == CE_Q4_K) { /* dmin runs through the halves backwards */
        raw[2] = (uint8_t)~h;
        raw[3] = (uint8_t)(~h >> 8);
      }
      ce_quant_dequantize(dtype, raw, got, qk);
      ref_dequantize(dtype, raw, want, qk);
      for (size_t i = 0; i < qk; i++) bad += bits_of(got[i]) != bits_of(want[i]);
    }
    (void)bb;
    EXPECT(bad == 0, "%s: %zu values differ from ggml's over every scale", qname(dtype), bad);
  }
}

/* Hand-checked values: the layouts read as the contract describes. */
static void case_known_values(void) {
  uint8_t q8[CE_Q8_0_BYTES] = {0x00, 0x40}; /* d = 2 */
  for (int j = 0; j < 32; j++) q8[2 + j] = (uint8_t)(int8_t)(j - 16);
  float y[256];
  ce_quant_dequantize(CE_Q8_0, q8, y, 32);
  EXPECT(y[0] == -32.0f && y[16] == 0.0f && y[31] == 30.0f, "q8_0: %g %g %g", y[0], y[16], y[31]);
  uint8_t q4[CE_Q4_0_BYTES] = {0x00, 0x38}; /* d = 0.5 */
  for (int j = 0; j < 16; j++) q4[2 + j] = (uint8_t)(j | (15 - j) << 4);
  ce_quant_dequantize(CE_Q4_0, q4, y, 32);
  EXPECT(y[0] == -4.0f && y[15] == 3.5f && y[16] == 3.5f && y[31] == -4.0f, "q4_0: %g %g %g %g", y[0], y[15],
         y[16], y[31]);
  /* Q4_K: d = 1, dmin = 0.5; sub-block 0 scale 3 min 2; sub-block 5 (j = 5 >= 4) scale
   * (scales[9] & 15) | (scales[1] >> 6) << 4 = 1 | 1 << 4 = 17, min (scales[9] >> 4) | (scales[5] >> 6) << 4 = 2 | 2 << 4 = 34 */
  uint8_t k4[CE_Q4_K_BYTES] = {0x00, 0x3C, 0x00, 0x38};
  k4[4 + 0] = 3;
  k4[4 + 4] = 2;
  k4[4 + 1] = 0x40;
  k4[4 + 5] = 0x80;
  k4[4 + 9] = 0x21;
  k4[16 + 0] = 0x57;  /* value 0: 7, value 32: 5 */
  k4[16 + 64] = 0x09; /* value 128 + 32 = 160 (sub-block 5): high nibble 0 */
  k4[16 + 65] = 0x90; /* value 161: 9 */
  ce_quant_dequantize(CE_Q4_K, k4, y, 256);
  EXPECT(y[0] == 3.0f * 7 - 1.0f, "q4_K value 0: %g", y[0]);
  EXPECT(y[160] == -17.0f && y[161] == 17.0f * 9 - 17.0f, "q4_K values 160, 161: %g %g", y[160], y[161]);
  /* Q6_K: d = 0.25; value 0 = ql[0] & 15 | (qh[0] & 3) << 4, value 96 = ql[32] >> 4 | (qh[0] >> 6) << 4,
   * value 200 (second half, l = 8, quadrant 2) = ql[64 + 8] >> 4 | ((qh[32 + 8] >> 4) & 3) << 4 */
  uint8_t k6[CE_Q6_K_BYTES] = {0};
  k6[208] = 0x00;
  k6[209] = 0x34;
  k6[0] = 0x0F;
  k6[128] = 0x83;      /* value 0: 15 | 3 << 4 = 63; value 96: 0 | 2 << 4 = 32 */
  k6[32] = 0x00;
  k6[72] = 0x50;       /* value 200 low bits 5 */
  k6[128 + 40] = 0x10; /* value 200 high bits 1 */
  k6[192 + 0] = 2;
  k6[192 + 6] = (uint8_t)(int8_t)-3;
  k6[192 + 8 + 4] = 4;
  ce_quant_dequantize(CE_Q6_K, k6, y, 256);
  EXPECT(y[0] == 0.25f * 2 * 31, "q6_K value 0: %g", y[0]);
  EXPECT(y[96] == 0.25f * -3 * 0, "q6_K value 96: %g", y[96]);
  EXPECT(y[200] == 0.25f * 4 * (21 - 32), "q6_K value 200: %g", y[200]);
}

/* Rows for the quantizers: random, with zeros, blocks of zeros, +-FLT_MAX,
 * equal magnitudes of both signs, and exact ties of the rounding. */
static float *quant_rows(size_t n) {
  float *x = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) {
    float v = rnd_unit();
    switch (rnd32() % 8) {
    case 0: v = 0.0f; break;
    case 1: v *= 1e30f; break;
    case 2: v *= 1e-20f; break;
    case 3: v = (float)(int)(rnd_unit() * 127.0f) + 0.5f; break; /* ties where d = 1 */
    default: break;
    }
    x[i] = v;
  }
  size_t nb = n / 32;
  for (size_t b = 0; b < nb; b++) {
    float *xb = x + b * 32;
    switch (b % 10) {
    case 0: for (int j = 0; j < 32; j++) xb[j] = 0.0f; break;
    case 1: xb[rnd32() % 32] = FLT_MAX; break;
    case 2: xb[rnd32() % 32] = -FLT_MAX; break;
    case 3: xb[3] = 2.0f; xb[9] = -2.0f; break; /* equal magnitude, both signs: the first is max */
    case 4: xb[7] = -8.0f; xb[20] = 8.0f; break;
    case 5: /* amax 127 -> d 1: every value a half-integer tie of roundf */
      for (int j = 0; j < 32; j++) xb[j] = (float)((int)(rnd32() % 254) - 127) + 0.5f;
      xb[0] = 127.0f;
      break;
    case 6: /* max -8 -> d 1 for Q4_0: x + 8.5 lands on integers and halves */
      for (int j = 0; j < 32; j++) xb[j] = (float)((int)(rnd32() % 16) - 8) * 0.5f;
      xb[5] = -8.0f;
      break;
    case 7: for (int j = 0; j < 32; j++) xb[j] = -0.0f; xb[1] = 1e-30f; break;
    default: break;
    }
  }
  return x;
}

static void case_quantize(void) {
  size_t n = 32 * 4000;
  float *x = quant_rows(n);
  uint8_t *got = malloc(n / 32 * CE_Q8_0_BYTES), *want = malloc(n / 32 * CE_Q8_0_BYTES);
  EXPECT(ce_quant_quantize_q8_0(x, got, n) == 0, "q8_0 quantize");
  ref_quantize_row_q8_0_ref(x, (ref_block_q8_0 *)want, (int64_t)n);
  size_t bad = 0;
  for (size_t i = 0; i < n / 32 * CE_Q8_0_BYTES; i++) bad += got[i] != want[i];
  EXPECT(bad == 0, "q8_0: %zu bytes differ from quantize_row_q8_0_ref", bad);
  EXPECT(ce_quant_quantize_q4_0(x, got, n) == 0, "q4_0 quantize");
  ref_quantize_row_q4_0_ref(x, (ref_block_q4_0 *)want, (int64_t)n);
  bad = 0;
  for (size_t i = 0; i < n / 32 * CE_Q4_0_BYTES; i++) bad += got[i] != want[i];
  EXPECT(bad == 0, "q4_0: %zu bytes differ from quantize_row_q4_0_ref", bad);
  EXPECT(ce_quant_quantize_q8_0(x, got, 31) == -1 && ce_quant_quantize_q4_0(x, got, 33) == -1,
         "a partial block is refused");
  free(x);
  free(got);
  free(want);
}

/* The rounding, checked by hand: roundf rounds half away from zero; Q4_0
 * truncates x/d + 8.5 and clips at 15; the extreme block value picks the sign. */
static void case_quantize_known(void) {
  float x[32] = {0};
  uint8_t b[CE_Q8_0_BYTES];
  x[0] = 127.0f; /* d = 1 */
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.5f;
  x[4] = -126.5f;
  ce_quant_quantize_q8_0(x, b, 32);
  EXPECT(b[0] == 0x00 && b[1] == 0x3C, "q8_0 d = 1: %02x%02x", b[1], b[0]);
  EXPECT((int8_t)b[2] == 127 && (int8_t)b[3] == 3 && (int8_t)b[4] == -3 && (int8_t)b[5] == 1 &&
             (int8_t)b[6] == -127 && b[7] == 0,
         "q8_0 ties away from zero: %d %d %d %d %d", (int8_t)b[2], (int8_t)b[3], (int8_t)b[4], (int8_t)b[5],
         (int8_t)b[6]);
  float y[32] = {0};
  y[0] = 4.0f; /* max 4 (positive): d = -0.5, 1/d = -2 */
  y[1] = -4.0f;
  y[16] = 1.0f;  /* -2 + 8.5 = 6.5 -> 6 */
  y[17] = -0.75f; /* 1.5 + 8.5 = 10 */
  uint8_t q[CE_Q4_0_BYTES];
  ce_quant_quantize_q4_0(y, q, 32);
  EXPECT(q[0] == 0x00 && q[1] == 0xB8, "q4_0 d = -0.5: %02x%02x", q[1], q[0]);
  /* value 0: -8 + 8.5 = 0.5 -> 0; value 1: 8 + 8.5 -> 16 -> 15; value 16 -> 6; value 17 -> 10; zeros -> 8 */
  EXPECT(q[2] == (0 | 6 << 4) && q[3] == (15 | 10 << 4) && q[4] == (8 | 8 << 4), "q4_0 nibbles %02x %02x %02x",
         q[2], q[3], q[4]);
  /* -FLT_MAX as the extreme: d = FLT_MAX/8 overflows the half to infinity, as ggml's does */
  y[1] = -FLT_MAX;
  ce_quant_quantize_q4_0(y, q, 32);
  EXPECT(q[0] == 0x00 && q[1] == 0x7C, "q4_0 d of -FLT_MAX: %02x%02x", q[1], q[0]);
}

/* A block whose scale is so small that 1/d overflows: every dequantized value
 * is 0 and the quants are 0 (ggml's conversions on x86-64). */
static void case_tiny_scale(void) {
  float x[32];
  for (int j = 0; j < 32; j++) x[j] = (j % 3 - 1) * 1e-39f;
  uint8_t b8[CE_Q8_0_BYTES], b4[CE_Q4_0_BYTES];
  ce_quant_quantize_q8_0(x, b8, 32);
  ce_quant_quantize_q4_0(x, b4, 32);
  int zero8 = 1, zero4 = 1;
  for (int j = 0; j < CE_Q8_0_BYTES; j++) zero8 &= b8[j] == 0;
  for (int j = 2; j < CE_Q4_0_BYTES; j++) zero4 &= b4[j] == 0;
  EXPECT(zero8, "q8_0 block of a tiny scale is all zero bytes");
  EXPECT(zero4 && b4[0] == 0 && (b4[1] == 0x80 || b4[1] == 0), "q4_0 block of a tiny scale: d %02x%02x", b4[1],
         b4[0]);
  float y[32];
  ce_quant_dequantize(CE_Q4_0, b4, y, 32);
  int zeros = 1;
  for (int j = 0; j < 32; j++) zeros &= y[j] == 0.0f;
  EXPECT(zeros, "q4_0 block of a tiny scale dequantizes to zeros");
}

/* NaN in a row, hand-checked (ggml's conversions on x86-64 make a NaN quant 0):
 * Q8_0's MAX(amax, fabsf(v)) takes a NaN and lets the next larger value replace
 * it; Q4_0's `amax < fabsf(v)` skips it. */
static void case_nan_inputs(void) {
  float x[32] = {0};
  uint8_t b[CE_Q8_0_BYTES];
  x[0] = NAN;
  x[1] = 127.0f;
  ce_quant_quantize_q8_0(x, b, 32);
  EXPECT(b[0] == 0x00 && b[1] == 0x3C && b[2] == 0 && b[3] == 127, "q8_0 NaN then 127: d %02x%02x, q %d %d", b[1],
         b[0], (int8_t)b[2], (int8_t)b[3]);
  x[0] = 1.0f;
  x[1] = 0.5f;
  x[31] = NAN; /* last: amax stays NaN, d is NaN (0x7E00), every quant 0 */
  ce_quant_quantize_q8_0(x, b, 32);
  int zeros = 1;
  for (int j = 2; j < CE_Q8_0_BYTES; j++) zeros &= b[j] == 0;
  EXPECT(b[0] == 0x00 && b[1] == 0x7E && zeros, "q8_0 NaN last: d %02x%02x", b[1], b[0]);
  uint8_t q[CE_Q4_0_BYTES];
  x[0] = -8.0f; /* max -8: d 1 */
  x[16] = NAN;
  ce_quant_quantize_q4_0(x, q, 32);
  EXPECT(q[0] == 0x00 && q[1] == 0x3C, "q4_0 NaN skipped by the max: d %02x%02x", q[1], q[0]);
  /* value 0: -8 + 8.5 -> 0; 16: NaN -> 0; 1: 0.5 + 8.5 -> 9; 17: 8; 15: 8; 31: NaN -> 0 */
  EXPECT(q[2] == 0x00 && q[3] == (9 | 8 << 4) && q[17] == 0x08, "q4_0 quants with a NaN: %02x %02x %02x", q[2],
         q[3], q[17]);
}

/* Quantized then dequantized: within half a step of the block's scale. */
static void case_roundtrip(void) {
  size_t n = 32 * 500;
  float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) x[i] = rnd_unit() * 3.0f;
  uint8_t *b = malloc(n / 32 * CE_Q8_0_BYTES);
  ce_quant_quantize_q8_0(x, b, n);
  ce_quant_dequantize(CE_Q8_0, b, y, n);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    double d = ce_quant_f16_to_f32((uint16_t)(b[i / 32 * CE_Q8_0_BYTES] | b[i / 32 * CE_Q8_0_BYTES + 1] << 8));
    bad += fabs((double)y[i] - x[i]) > 0.5 * d + 2e-3 * fabs(x[i]);
  }
  EXPECT(bad == 0, "q8_0: %zu values off by more than half a step", bad);
  ce_quant_quantize_q4_0(x, b, n);
  ce_quant_dequantize(CE_Q4_0, b, y, n);
  bad = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs(ce_quant_f16_to_f32((uint16_t)(b[i / 32 * CE_Q4_0_BYTES] | b[i / 32 * CE_Q4_0_BYTES + 1] << 8)));
    bad += fabs((double)y[i] - x[i]) > 0.5 * d + 2e-3 * fabs(x[i]) + (fabs(x[i]) > 7 * d ? d : 0);
  }
  EXPECT(bad == 0, "q4_0: %zu values off by more than half a step", bad);
  free(x);
  free(y);
  free(b);
}

/* ------------------------------------------------------------- driver */

typedef struct tq_case {
  const char *name;
  int host; /* needs no device */
  void (*run)(void);
} tq_case;

static const tq_case cases[] = {
    {"layouts", 1, case_layouts},
    {"row_bytes", 1, case_row_bytes},
    {"f16", 1, case_f16},
    {"dequantize", 1, case_dequantize},
    {"every_scale", 1, case_every_scale},
    {"known_values", 1, case_known_values},
    {"quantize", 1, case_quantize},
    {"quantize_known", 1, case_quantize_known},
    {"tiny_scale", 1, case_tiny_scale},
    {"nan_inputs", 1, case_nan_inputs},
    {"roundtrip", 1, case_roundtrip},
};
#define NCASES (sizeof cases / sizeof cases[0])

int main(int argc, char **argv) {
  int host_only = argc > 1 && !strcmp(argv[1], "host");
  int named = argc > 1 && !host_only;
  for (int a = 1; named && a < argc; a++) {
    size_t k = 0;
    while (k < NCASES && strcmp(cases[k].name, argv[a])) k++;
    if (k == NCASES) {
      fprintf(stderr, "test_quant: no case '%s'; cases:", argv[a]);
      for (k = 0; k < NCASES; k++) fprintf(stderr, " %s", cases[k].name);
      fprintf(stderr, "\n");
      return 1;
    }
  }
  int ran = 0;
  for (size_t k = 0; k < NCASES; k++) {
    int want = !named;
    for (int a = 1; named && a < argc; a++) want |= !strcmp(cases[k].name, argv[a]);
    if (host_only && !cases[k].host) want = 0;
    if (!want) continue;
    int before = tu_failures;
    cases[k].run();
    printf("%-16s %s\n", cases[k].name, tu_failures == before ? "ok" : "FAILED");
    ran++;
  }
  EXPECT(ran > 0, "no case ran");
  return tu_finish("test_quant");
}
