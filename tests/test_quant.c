/* test_quant: ggml's block formats, every type clembed takes as a table (Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q2_K ... Q6_K, IQ4_NL, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0, MXFP4: tests/quant_types.h).
 *
 * Host cases check the library's block code (src/ops/quant.c) bit for bit
 * against a plain transcription of ggml's own functions (reference_ggml.h):
 * the f16 conversions, every dequantizer on random blocks (finite, extreme,
 * infinite and NaN scales; one block with every f16 scale), hand-checked
 * values, the block facts and ggml's grids (hashed), and the Q8_0 and Q4_0
 * reference quantizers on random rows with zeros, extremes and ties.
 *
 * Device cases check quantized tables in the library, exactly: the reference
 * value of a table element is ggml's dequantizer (reference_ggml.h) in float32;
 * an output element is then computed as the forward does, in float32 and in its
 * order (v = scale*w; v = v + p; v = v*keep when kept by dropout; 0 for a zero
 * token row), and rounded to the output dtype (nearest even). Types x output
 * dtypes (all of them with "full", a rotation by default: tq_runs), lookup and
 * embed (positions, padding, index policies, dropout, sequences), in both
 * kernel shapes (CLEMBED_TUNING cpu and gpu),
 * windows with offsets and ld, extreme, infinite and NaN scales (a NaN must
 * stay a NaN), every load function of cl/lib/quant.cl for every type
 * (dev_loads), matrix write/read in every direction, and the rejections.
 *
 *   test_quant            every case
 *   test_quant host       the host cases
 *   test_quant small      every case, smaller (the quick run)
 *   test_quant small full every case, smaller, Q8_0 ... Q6_K in every shape and output dtype (Oclgrind)
 *   test_quant full       every case, every type x shape x output dtype x option
 *   test_quant --list     the case names
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
#include "quant_types.h" /* after rnd32 */
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

static const char *qname(int dtype) {
  static const char *names[] = {"F32", "F16", "BF16"};
  if (dtype >= 0 && dtype <= 2) return names[dtype];
  return tq(dtype) ? tq(dtype)->name : "?";
}

/* ---------------------------------------------------------- host cases */

TU_CASE(layouts) {
  /* ggml's structs, as transcribed: the offsets the library reads. */
  EXPECT(sizeof(ref_block_q8_0) == 34 && offsetof(ref_block_q8_0, qs) == 2, "q8_0 layout");
  EXPECT(sizeof(ref_block_q4_0) == 18 && offsetof(ref_block_q4_0, qs) == 2, "q4_0 layout");
  EXPECT(sizeof(ref_block_q4_K) == 144 && offsetof(ref_block_q4_K, dmin) == 2 &&
             offsetof(ref_block_q4_K, scales) == 4 && offsetof(ref_block_q4_K, qs) == 16,
         "q4_K layout");
  EXPECT(sizeof(ref_block_q6_K) == 210 && offsetof(ref_block_q6_K, qh) == 128 &&
             offsetof(ref_block_q6_K, scales) == 192 && offsetof(ref_block_q6_K, d) == 208,
         "q6_K layout");
  EXPECT(offsetof(ref_block_q4_1, qs) == 4 && offsetof(ref_block_q5_0, qs) == 6 && offsetof(ref_block_q5_1, qh) == 4 &&
             offsetof(ref_block_q5_1, qs) == 8,
         "q4_1, q5_0, q5_1 layouts");
  EXPECT(offsetof(ref_block_q2_K, qs) == 16 && offsetof(ref_block_q2_K, d) == 80 && offsetof(ref_block_q3_K, qs) == 32 &&
             offsetof(ref_block_q3_K, scales) == 96 && offsetof(ref_block_q3_K, d) == 108 &&
             offsetof(ref_block_q5_K, qh) == 16 && offsetof(ref_block_q5_K, qs) == 48,
         "q2_K, q3_K, q5_K layouts");
  EXPECT(offsetof(ref_block_iq4_xs, scales_l) == 4 && offsetof(ref_block_iq4_xs, qs) == 8 &&
             offsetof(ref_block_iq2_xs, scales) == 66 && offsetof(ref_block_iq2_s, qh) == 66 &&
             offsetof(ref_block_iq2_s, scales) == 74 && offsetof(ref_block_iq3_s, qh) == 66 &&
             offsetof(ref_block_iq3_s, signs) == 74 && offsetof(ref_block_iq3_s, scales) == 106 &&
             offsetof(ref_block_iq1_s, qh) == 34 && offsetof(ref_block_iq1_m, qh) == 32 &&
             offsetof(ref_block_iq1_m, scales) == 48,
         "iq layouts");
  EXPECT(sizeof(ref_block_tq1_0) == 54 && offsetof(ref_block_tq1_0, qh) == 48 && offsetof(ref_block_tq1_0, d) == 52 &&
             sizeof(ref_block_tq2_0) == 66 && offsetof(ref_block_tq2_0, d) == 64 && sizeof(ref_block_mxfp4) == 17 &&
             offsetof(ref_block_mxfp4, e) == 0 && offsetof(ref_block_mxfp4, qs) == 1,
         "tq1_0, tq2_0, mxfp4 layouts");
  /* every type: the library's block facts are ggml's (type_traits) */
  for (int k = 0; k < NTQ; k++) {
    const ref_type_traits_t *r = ref_get_type_traits(TQ[k].ggml);
    clembed_dtype d = (clembed_dtype)TQ[k].dtype;
    EXPECT(r && clembed_dtype_block_values(d) == (size_t)r->blck_size &&
               clembed_dtype_row_bytes(d, (size_t)r->blck_size) == r->type_size && clembed_dtype_size(d) == 0,
           "%s: the library's block of %zu values, %zu bytes; ggml's %s: %lld, %zu", TQ[k].name,
           clembed_dtype_block_values(d), clembed_dtype_row_bytes(d, clembed_dtype_block_values(d)),
           r ? r->type_name : "?", r ? (long long)r->blck_size : 0LL, r ? r->type_size : 0);
  }
  /* the grids and value tables are ggml's (hashed apart from its source) */
  EXPECT(ref_check_tables() == 0, "%d of cl/lib/iqtables.cl's tables differ from ggml's", ref_check_tables());
}

TU_CASE(row_bytes) {
  static const struct { int dtype; size_t cols, bytes; } t[] = {
      {0, 3, 12},          {1, 3, 6},         {2, 5, 10},        {CE_Q8_0, 32, 34},  {CE_Q8_0, 96, 102},
      {CE_Q4_0, 64, 36},   {CE_Q4_K, 256, 144}, {CE_Q4_K, 512, 288}, {CE_Q6_K, 256, 210}, {CE_Q6_K, 768, 630},
      {CE_Q8_0, 0, 0},     {CE_Q8_0, 33, 0},  {CE_Q4_0, 16, 0},  {CE_Q4_K, 32, 0},   {CE_Q6_K, 255, 0},
      {CLEMBED_Q4_1, 64, 40}, {CLEMBED_Q5_0, 96, 66}, {CLEMBED_Q5_1, 32, 24}, {CLEMBED_Q2_K, 512, 168},
      {CLEMBED_Q3_K, 256, 110}, {CLEMBED_Q5_K, 768, 528}, {CLEMBED_IQ4_NL, 64, 36}, {CLEMBED_IQ4_XS, 256, 136},
      {CLEMBED_IQ2_XXS, 256, 66}, {CLEMBED_IQ2_XS, 512, 148}, {CLEMBED_IQ2_S, 256, 82}, {CLEMBED_IQ3_XXS, 256, 98},
      {CLEMBED_IQ3_S, 256, 110}, {CLEMBED_IQ1_S, 256, 50}, {CLEMBED_IQ1_M, 512, 112}, {CLEMBED_IQ4_NL, 16, 0},
      {CLEMBED_IQ1_M, 128, 0}, {CLEMBED_TQ1_0, 512, 108}, {CLEMBED_TQ2_0, 256, 66}, {CLEMBED_MXFP4, 96, 51},
      {CLEMBED_TQ1_0, 32, 0}, {CLEMBED_MXFP4, 16, 0},
      {CLEMBED_MXFP4, (SIZE_MAX / 32) * 32, (SIZE_MAX / 32) * 17}, /* fewer bytes than values: no overflow */
      {32, 32, 0},         {-1, 32, 0},       {CE_Q8_0, (SIZE_MAX / 32) * 32, 0}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    size_t got = clembed_dtype_row_bytes((clembed_dtype)t[i].dtype, t[i].cols);
    EXPECT(got == t[i].bytes, "row bytes of %s x %zu: %zu, expected %zu", qname(t[i].dtype), t[i].cols, got,
           t[i].bytes);
  }
  static const char *const names[] = {"f32",    "f16",    "bf16",    "q8_0",   "q4_0",   "q4_k",
                                      "q6_k",   "q4_1",   "q5_0",    "q5_1",   "q2_k",   "q3_k",
                                      "q5_k",   "iq4_nl", "iq4_xs",  "iq2_xxs", "iq2_xs", "iq2_s",
                                      "iq3_xxs", "iq3_s", "iq1_s",   "iq1_m",   "tq1_0",  "tq2_0",
                                      "mxfp4"};
  for (int d = 0; d < 25; d++)
    EXPECT(!strcmp(clembed_dtype_name((clembed_dtype)d), names[d]), "clembed_dtype_name(%d) is '%s', expected '%s'",
           d, clembed_dtype_name((clembed_dtype)d), names[d]);
  EXPECT(!strcmp(clembed_dtype_name((clembed_dtype)-1), "unknown") &&
             !strcmp(clembed_dtype_name((clembed_dtype)32), "unknown"),
         "clembed_dtype_name of a value that is none");
}

TU_CASE(f16) {
  size_t bad = 0;
  for (uint32_t h = 0; h < 65536; h++)
    if (bits_of(ce_quant_f16_to_f32((uint16_t)h)) != bits_of(ref_ggml_compute_fp16_to_fp32((uint16_t)h))) bad++;
  EXPECT(bad == 0, "%zu halves convert to other floats than ggml's", bad);
  /* every half against the plain conversion of reference.h (finite and infinite) */
  bad = 0;
  for (uint32_t h = 0; h < 65536; h++)
    if (((h >> 10) & 31) != 31 || (h & 1023) == 0)
      if (bits_of(ce_quant_f16_to_f32((uint16_t)h)) != bits_of(ref_f16_to_f32((uint16_t)h))) bad++;
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
      uint32_t mid = bits_of(ref_f16_to_f32(h)) + (h & 0x7C00 ? 0x1000u : 0u);
      f = float_of(mid + (uint32_t)(rnd32() % 3) - 1u);
    }
    if (ce_quant_f32_to_f16(f) != ref_ggml_compute_fp32_to_fp16(f)) bad++;
    if (!isnan(f) && ce_quant_f32_to_f16(f) != ref_f32_to_f16(f)) bad_exact++;
  }
  EXPECT(bad == 0, "%zu floats convert to other halves than ggml's", bad);
  EXPECT(bad_exact == 0, "%zu floats convert to other halves than nearest even", bad_exact);
  EXPECT(ce_quant_f32_to_f16(NAN) == 0x7E00 && ce_quant_f32_to_f16(-NAN) == 0xFE00, "NaN -> 0x7E00 with sign");
  EXPECT(ce_quant_f32_to_f16(65520.0f) == 0x7C00 && ce_quant_f32_to_f16(65519.996f) == 0x7BFF, "overflow edge");
}

/* Random blocks of every type (finite scales, some extreme; then any scale,
 * infinities and NaNs included), dequantized by both, compared bit for bit. */
TU_CASE(dequantize) {
  for (int t = 0; t < NTQ; t++) {
    int dtype = TQ[t].dtype;
    size_t qk = tq_qk(dtype), bb = tq_bb(dtype), nb = 600;
    uint8_t *raw = malloc(nb * bb);
    float *got = malloc(nb * qk * sizeof(float)), *want = malloc(nb * qk * sizeof(float));
    for (int any = 0; any < 2; any++) {
      for (size_t b = 0; b < nb; b++) (any ? rnd_block_any : rnd_block)(dtype, raw + b * bb);
      EXPECT(ce_quant_dequantize(dtype, raw, got, nb * qk) == 0, "%s dequantize", qname(dtype));
      ref_dequantize(dtype, raw, want, nb * qk);
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < nb * qk; i++)
        if (bits_of(got[i]) != bits_of(want[i]) && !bad++) first = i;
      EXPECT(bad == 0, "%s%s: %zu of %zu values differ from ggml's, first %zu: %a vs %a", qname(dtype),
             any ? " (any scale)" : "", bad, nb * qk, first, got[first], want[first]);
    }
    EXPECT(ce_quant_dequantize(dtype, raw, got, qk + 1) == -1, "%s: a partial block is refused", qname(dtype));
    free(raw);
    free(got);
    free(want);
  }
  EXPECT(ce_quant_dequantize(2, NULL, NULL, 0) == -1, "a float dtype is refused");
  EXPECT(ce_quant_dequantize(25, NULL, NULL, 0) == -1, "a dtype that is none is refused");
}

/* One block of each type with every possible f16 scale (inf and NaN
 * included); a second scale (a min) runs through the halves backwards. */
TU_CASE(every_scale) {
  for (int t = 0; t < NTQ; t++) {
    int dtype = TQ[t].dtype;
    size_t qk = tq_qk(dtype), bad = 0;
    uint8_t raw[TQ_MAX_BYTES];
    float got[256], want[256];
    rnd_block(dtype, raw);
    for (uint32_t h = 0; h < 65536; h++) {
      set_half(dtype, raw, 0, (uint16_t)h);
      if (n_halves(dtype) == 2) set_half(dtype, raw, 1, (uint16_t)~h);
      ce_quant_dequantize(dtype, raw, got, qk);
      ref_dequantize(dtype, raw, want, qk);
      for (size_t i = 0; i < qk; i++) bad += bits_of(got[i]) != bits_of(want[i]);
    }
    EXPECT(bad == 0, "%s: %zu values differ from ggml's over every scale", qname(dtype), bad);
  }
}

/* Hand-checked values: the layouts read as the contract describes. */
TU_CASE(known_values) {
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
  uint8_t b[TQ_MAX_BYTES];
  /* Q4_1: d = 0.5, m = -1; qs[0] = 0x3A: value 0 = 10*0.5 - 1, value 16 = 3*0.5 - 1 */
  memset(b, 0, sizeof b), b[1] = 0x38, b[3] = 0xBC, b[4] = 0x3A;
  ce_quant_dequantize(CLEMBED_Q4_1, b, y, 32);
  EXPECT(y[0] == 4.0f && y[16] == 0.5f && y[1] == -1.0f, "q4_1: %g %g %g", y[0], y[16], y[1]);
  /* Q5_0: d = 1; qh bits 0 and 16; qs[0] = 0x21, qs[1] = 0x0F: values 0, 16, 1 = 17-16, 18-16, 15-16 */
  memset(b, 0, sizeof b), b[1] = 0x3C, b[2] = 0x01, b[4] = 0x01, b[6] = 0x21, b[7] = 0x0F;
  ce_quant_dequantize(CLEMBED_Q5_0, b, y, 32);
  EXPECT(y[0] == 1.0f && y[16] == 2.0f && y[1] == -1.0f && y[17] == -16.0f, "q5_0: %g %g %g %g", y[0], y[16], y[1],
         y[17]);
  /* Q5_1: d = 2, m = 0.5; qh bit 31; qs[15] = 0xF0: value 31 = 31*2 + 0.5, value 15 = 0.5 */
  memset(b, 0, sizeof b), b[1] = 0x40, b[3] = 0x38, b[7] = 0x80, b[8 + 15] = 0xF0;
  ce_quant_dequantize(CLEMBED_Q5_1, b, y, 32);
  EXPECT(y[31] == 62.5f && y[15] == 0.5f, "q5_1: %g %g", y[31], y[15]);
  /* Q2_K: d = 1, dmin = 0.5; scales[0] = 0x23 (3, min 2), qs[0] = 0x02: value 0 = 3*2 - 1; scales[2] = 0x10:
   * value 32 (shift 2 of qs[0]) = 0*q - 0.5; value 200 (scale 12, qs[32 + 8] >> 4) = 5*3 */
  memset(b, 0, sizeof b), b[81] = 0x3C, b[83] = 0x38, b[0] = 0x23, b[2] = 0x10, b[12] = 0x05, b[16] = 0x02,
                          b[16 + 40] = 0x30;
  ce_quant_dequantize(CLEMBED_Q2_K, b, y, 256);
  EXPECT(y[0] == 5.0f && y[32] == -0.5f && y[200] == 15.0f, "q2_K: %g %g %g", y[0], y[32], y[200]);
  /* Q3_K: d = 1; scale 0 = 3 | 2 << 4 = 35 (minus 32: 3): value 0 (q 1, hmask set) = 3, value 1 (q 0,
   * hmask clear: -4) = -12; scale 9 = (scales[1] >> 4) | ((scales[9] >> 4) & 3) << 4 = 53 (21): value 144
   * (qs[32 + 16] & 3 = 3, hmask[16] bit 4 set) = 63 */
  memset(b, 0, sizeof b), b[109] = 0x3C, b[96] = 0x03, b[104] = 0x02, b[97] = 0x50, b[105] = 0x30, b[32] = 0x01,
                          b[0] = 0x01, b[32 + 48] = 0x03, b[16] = 0x10;
  ce_quant_dequantize(CLEMBED_Q3_K, b, y, 256);
  EXPECT(y[0] == 3.0f && y[1] == -12.0f && y[144] == 63.0f, "q3_K: %g %g %g", y[0], y[1], y[144]);
  /* Q5_K: d = 1, dmin = 1; sub-block 0 scale 2 min 1; qs[0] = 0x07, qh[0] bit 0: value 0 = 2*(7 + 16) - 1 */
  memset(b, 0, sizeof b), b[1] = 0x3C, b[3] = 0x3C, b[4] = 2, b[8] = 1, b[16] = 0x01, b[48] = 0x07;
  ce_quant_dequantize(CLEMBED_Q5_K, b, y, 256);
  EXPECT(y[0] == 45.0f && y[1] == -1.0f, "q5_K: %g %g", y[0], y[1]);
  /* IQ4_NL: d = 1; qs[0] = 0xF0: value 0 = kvalues[0] = -127, value 16 = kvalues[15] = 113 */
  memset(b, 0, sizeof b), b[1] = 0x3C, b[2] = 0xF0;
  ce_quant_dequantize(CLEMBED_IQ4_NL, b, y, 32);
  EXPECT(y[0] == -127.0f && y[16] == 113.0f, "iq4_nl: %g %g", y[0], y[16]);
  /* IQ4_XS: d = 0.5; sub-block 0: ls = 1 | 2 << 4 = 33 (dl 0.5), qs[0] = 0x98: kvalues[8] = 1, kvalues[9] = 13;
   * sub-block 3: ls 0 (dl -16), value 96 = -16 * kvalues[0] */
  memset(b, 0, sizeof b), b[1] = 0x38, b[2] = 0x02, b[4] = 0x01, b[8] = 0x98;
  ce_quant_dequantize(CLEMBED_IQ4_XS, b, y, 256);
  EXPECT(y[0] == 0.5f && y[16] == 6.5f && y[96] == 2032.0f, "iq4_xs: %g %g %g", y[0], y[16], y[96]);
  /* IQ2_XXS: d = 1; grid entry 0 (all 8); aux = scale 1 << 28 | sign code 1 (ksigns 129: bits 0 and 7):
   * db = (0.5 + 1) * 0.25; values 0, 1, 7 = -3, 3, -3; value 8 (sign code 0) = 3 */
  memset(b, 0, sizeof b), b[1] = 0x3C, b[6] = 0x01, b[9] = 0x10;
  ce_quant_dequantize(CLEMBED_IQ2_XXS, b, y, 256);
  EXPECT(y[0] == -3.0f && y[1] == 3.0f && y[7] == -3.0f && y[8] == 3.0f, "iq2_xxs: %g %g %g %g", y[0], y[1], y[7],
         y[8]);
  /* IQ3_XXS: d = 1; grid entry 0 (all 4); aux = 2 << 28: db = (0.5 + 2) * 0.5; value 0 = 5 */
  memset(b, 0, sizeof b), b[1] = 0x3C, b[69] = 0x20;
  ce_quant_dequantize(CLEMBED_IQ3_XXS, b, y, 256);
  EXPECT(y[0] == 5.0f && y[31] == 5.0f, "iq3_xxs: %g %g", y[0], y[31]);
  /* IQ1_S: d = 1; grid entry 0 (all -1); qh 0: dl 1, delta 0.125: -0.875; sub-block 1's qh = 0x8000 | 3 << 12:
   * dl 7, delta -0.125: -7.875 */
  memset(b, 0, sizeof b), b[1] = 0x3C, b[37] = 0xB0;
  ce_quant_dequantize(CLEMBED_IQ1_S, b, y, 256);
  EXPECT(y[0] == -0.875f && y[32] == -7.875f, "iq1_s: %g %g", y[0], y[32]);
  /* IQ1_M: d = 1 (0x3C00: the scale words' top nibbles 0, 0, C, 3); sub-block 0's 3-bit scales 0 and 1
   * (dl1 1, dl2 3); grid entry 0; qh[1] = 0x80 (values 24..31: delta -0.125): values 0, 16, 24 */
  memset(b, 0, sizeof b), b[48 + 5] = 0xC0, b[48 + 7] = 0x30, b[48] = 1 << 3, b[33] = 0x80;
  ce_quant_dequantize(CLEMBED_IQ1_M, b, y, 256);
  EXPECT(y[0] == -0.875f && y[16] == 3 * -0.875f && y[24] == 3 * -1.125f, "iq1_m: %g %g %g", y[0], y[16], y[24]);
  /* TQ1_0: d = 0.5; digit n of byte x is ((uint8)(x*3^n)*3) >> 8, minus 1. x = 200: 200 (600 >> 8 = 2: +1),
   * 88 (264 >> 8 = 1: 0), 8 (-1); x = 100: 100 (300 >> 8 = 1: 0), 44 (132 >> 8 = 0: -1), 132 (396 >> 8 = 1: 0);
   * x = 0: -1 everywhere. qs[0] = 200: values 0, 32, 64 (32 a digit); qs[33] = 200: values 161, 177, 193 (16 a
   * digit from 160); qh[2] = 100: values 242, 246, 250 (4 a digit from 240) */
  memset(b, 0, sizeof b), b[53] = 0x38, b[0] = 200, b[33] = 200, b[48 + 2] = 100;
  ce_quant_dequantize(CLEMBED_TQ1_0, b, y, 256);
  EXPECT(y[0] == 0.5f && y[32] == 0.0f && y[64] == -0.5f && y[1] == -0.5f, "tq1_0 qs[0]: %g %g %g %g", y[0], y[32],
         y[64], y[1]);
  EXPECT(y[161] == 0.5f && y[177] == 0.0f && y[193] == -0.5f && y[160] == -0.5f, "tq1_0 qs[33]: %g %g %g %g", y[161],
         y[177], y[193], y[160]);
  EXPECT(y[242] == 0.0f && y[246] == -0.5f && y[250] == 0.0f && y[255] == -0.5f, "tq1_0 qh[2]: %g %g %g %g", y[242],
         y[246], y[250], y[255]);
  /* TQ2_0: d = 2; qs[0] = 0xE4: 2-bit fields 0, 1, 2, 3 (values 0, 32, 64, 96) = -2, 0, 2, 4; qs[37] = 0x03: value
   * 128 + 5 = 4, value 165 = -2 */
  memset(b, 0, sizeof b), b[65] = 0x40, b[0] = 0xE4, b[37] = 0x03;
  ce_quant_dequantize(CLEMBED_TQ2_0, b, y, 256);
  EXPECT(y[0] == -2.0f && y[32] == 0.0f && y[64] == 2.0f && y[96] == 4.0f && y[133] == 4.0f && y[165] == -2.0f,
         "tq2_0: %g %g %g %g %g %g", y[0], y[32], y[64], y[96], y[133], y[165]);
  /* MXFP4 (kvalues_mxfp4 = 2 * E2M1: 0 1 2 3 4 6 8 12, then their negatives), d = 2^(e - 128): block 0 e = 128
   * (d 1), qs[0] = 0xF7: value 0 = 12, value 16 = -12; block 1 e = 127 (d 0.5), qs[1] = 0x91: 0.5, -0.5;
   * block 2 e = 1 (d 2^-127, subnormal), qs[0] = 0x17: 12 * 2^-127 (normal), value 16 = 2^-127 (subnormal);
   * block 3 e = 255 (d 2^127), qs[0] = 0x21: 2^127, value 16 = 2 * 2^127 = inf; block 4 e = 0: 8 * 2^-128 */
  memset(b, 0, sizeof b);
  b[0] = 128, b[1] = 0xF7, b[17] = 127, b[18 + 1] = 0x91, b[34] = 1, b[35] = 0x17, b[51] = 255, b[52] = 0x21, b[68] = 0,
  b[69] = 0x06;
  ce_quant_dequantize(CLEMBED_MXFP4, b, y, 160);
  EXPECT(y[0] == 12.0f && y[16] == -12.0f && y[1] == 0.0f && y[33] == 0.5f && y[49] == -0.5f,
         "mxfp4 e 128, 127: %g %g %g %g %g", y[0], y[16], y[1], y[33], y[49]);
  EXPECT(y[64] == 0x1.8p-124f && y[80] == 0x1p-127f && y[96] == 0x1p127f && y[112] == INFINITY && y[128] == 0x1p-125f,
         "mxfp4 e 1, 255, 0: %a %a %a %a %a", y[64], y[80], y[96], y[112], y[128]);
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

TU_CASE(quantize) {
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
TU_CASE(quantize_known) {
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
TU_CASE(tiny_scale) {
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
TU_CASE(nan_inputs) {
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
TU_CASE(roundtrip) {
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

/* -------------------------------------------------------- device cases */

static clembed_context *dev_ctx = NULL;              /* the default device, default shapes */
static clembed_context *shape_ctx[2] = {NULL, NULL}; /* CLEMBED_TUNING=cpu, =gpu */
static int shapes_state = -1;
static const char *SHAPE_NAME[2] = {"cpu shapes", "gpu shapes"};
static const char *DN_F[3] = {"F32", "F16", "BF16"};
static const clembed_dtype FTYPES[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
/* "full" (test_util.h's tu_full): every type in every shape, output dtype and
 * option (ctest's test_quant_full, label exhaustive); "small full" (Oclgrind and
 * rusticl): the first four types in all of them, the others as below. */
#define tq_full tu_full
static int tq_every(void) { return tq_full && !tu_small; } /* every combination */

/* Whether type TQ[k] runs in shape sh with output dtype FTYPES[f]. By default
 * each type in both shapes, each shape with one output dtype, rotating over the
 * types so that every shape meets every output dtype (the loads are the
 * table's, the stores the output's: they meet in the forward, whose every
 * pairing is in "full"); with "small full" the first four types (Q8_0 ... Q6_K)
 * in all of them. Under small (Oclgrind, the quick run) the other types in one
 * shape each. */
static int tq_runs(int k, int sh, int f) {
  if (tq_full && (!tu_small || k < 4)) return 1;
  if (tu_small && k >= 4 && sh != k % 2) return 0;
  return f == (k + sh) % 3;
}

static clembed_context *device(void) {
  if (!dev_ctx) dev_ctx = tu_context();
  return dev_ctx;
}
/* 1 when both shaped contexts exist (a failure is counted otherwise) */
static int shapes(void) {
  if (shapes_state < 0) shapes_state = tu_shaped_pair(&shape_ctx[0], &shape_ctx[1]);
  return shapes_state;
}

/* A host table: rows x cols of type t, random blocks with finite scales, and
 * its reference values (ggml's dequantizer, reference_ggml.h). */
typedef struct qtab {
  int t;
  size_t rows, cols, row_bytes;
  uint8_t *blocks;
  float *ref;
} qtab;

static qtab qtab_make(int t, size_t rows, size_t cols) {
  qtab q = {t, rows, cols, cols / tq_qk(t) * tq_bb(t), NULL, NULL};
  size_t nb = rows * cols / tq_qk(t);
  q.blocks = malloc(nb * tq_bb(t) + 1);
  q.ref = malloc(rows * cols * sizeof(float) + 4);
  for (size_t b = 0; b < nb; b++) rnd_block(t, q.blocks + b * tq_bb(t));
  ref_dequantize(t, q.blocks, q.ref, rows * cols);
  return q;
}
static void qtab_free(qtab *q) {
  free(q->blocks);
  free(q->ref);
}

/* The table on the device in a buffer of random blocks: `lead` values before
 * it and `pad` values after each row (multiples of the block size). */
static clembed_status qtab_upload(clembed_context *ctx, const qtab *q, size_t lead, size_t pad, clembed_matrix *m) {
  size_t ld = q->cols + pad, total = lead + q->rows * ld, nb = total / tq_qk(q->t);
  clembed_matrix whole;
  clembed_status s = clembed_matrix_create(ctx, 1, total, (clembed_dtype)q->t, &whole);
  if (s != CLEMBED_OK) return s;
  uint8_t *fill = malloc(nb * tq_bb(q->t) + 1);
  for (size_t b = 0; b < nb; b++) rnd_block(q->t, fill + b * tq_bb(q->t));
  s = clembed_matrix_write(ctx, &whole, fill, (clembed_dtype)q->t);
  free(fill);
  *m = whole;
  m->offset = lead;
  m->rows = q->rows;
  m->cols = q->cols;
  m->ld = ld;
  if (s == CLEMBED_OK) s = clembed_matrix_write(ctx, m, q->blocks, (clembed_dtype)q->t);
  return s;
}

/* The bits of v stored as dtype t. */
static uint32_t stored_bits(float v, clembed_dtype t) {
  if (t == CLEMBED_F16) return ref_f32_to_f16(v);
  if (t == CLEMBED_BF16) return ref_f32_to_bf16(v);
  return bits_of(v);
}
static uint32_t host_bits(const void *p, size_t i, clembed_dtype t) {
  return t == CLEMBED_F32 ? bits_of(((const float *)p)[i]) : ((const uint16_t *)p)[i];
}

/* Compares n values read from `out` (dtype t) with want (float32, before the
 * output rounding), bit for bit; `read_status` is what the read must return. */
static void expect_out(clembed_context *ctx, const clembed_matrix *out, const float *want, clembed_status read_status,
                       const char *what) {
  size_t n = out->rows * out->cols, bad = 0, first = 0;
  void *got = tu_alloc_elems(n, out->dtype);
  clembed_status s = clembed_matrix_read(ctx, out, got, out->dtype);
  EXPECT(s == read_status, "%s: read returned %s, expected %s (%s)", what, clembed_status_string(s),
         clembed_status_string(read_status), clembed_context_message(ctx));
  for (size_t i = 0; i < n; i++)
    if (host_bits(got, i, out->dtype) != stored_bits(want[i], out->dtype) && !bad++) first = i;
  EXPECT(bad == 0, "%s: %zu of %zu values differ, first [%zu][%zu]: %g, expected %g", what, bad, n,
         n ? first / out->cols : 0, n ? first % out->cols : 0, n ? tu_elem(got, first, out->dtype) : 0.0,
         n ? ref_round(want[first], out->dtype) : 0.0);
  free(got);
}

static const char *dname(int t) { return qname(t); }

/* Matrices written and read back: blocks as they were, values dequantized as
 * ggml's, a window's surroundings untouched. */
TU_CASE(dev_roundtrip) {
  ctx = device();
  for (int k = 0; k < NTQ; k++) {
    int t = TQ[k].dtype;
    size_t qk = tq_qk(t), rows = tu_small ? 3 : 17, cols = qk * 3;
    qtab q = qtab_make(t, rows, cols);
    char what[96];
    for (int strided = 0; strided < 2; strided++) {
      clembed_matrix m = {0};
      size_t lead = strided ? 2 * qk : 0, pad = strided ? qk : 0;
      OK(ctx, qtab_upload(ctx, &q, lead, pad, &m));
      uint8_t *before = NULL;
      size_t total = lead + rows * (cols + pad), tb = total / qk * tq_bb(t);
      if (strided) { /* the whole buffer, to see that the window's write kept to it */
        clembed_matrix whole = m;
        whole.offset = 0, whole.rows = 1, whole.cols = total, whole.ld = total;
        before = malloc(tb);
        OK(ctx, clembed_matrix_read(ctx, &whole, before, (clembed_dtype)t));
        qtab q2 = qtab_make(t, rows, cols);
        OK(ctx, clembed_matrix_write(ctx, &m, q2.blocks, (clembed_dtype)t));
        uint8_t *after = malloc(tb);
        OK(ctx, clembed_matrix_read(ctx, &whole, after, (clembed_dtype)t));
        size_t outside = 0, rb = q.row_bytes, lb = lead / qk * tq_bb(t), ldb = (cols + pad) / qk * tq_bb(t);
        for (size_t b = 0; b < tb; b++) {
          int inside = b >= lb && (b - lb) % ldb < rb && (b - lb) / ldb < rows;
          outside += !inside && before[b] != after[b];
        }
        EXPECT(outside == 0, "%s strided write: %zu bytes outside the window changed", dname(t), outside);
        OK(ctx, clembed_matrix_write(ctx, &m, q.blocks, (clembed_dtype)t));
        qtab_free(&q2);
        free(after);
        free(before);
      }
      uint8_t *blocks = malloc(rows * q.row_bytes);
      OK(ctx, clembed_matrix_read(ctx, &m, blocks, (clembed_dtype)t));
      EXPECT(!memcmp(blocks, q.blocks, rows * q.row_bytes), "%s%s: blocks read back differ", dname(t),
             strided ? " (window)" : "");
      free(blocks);
      for (int f = 0; f < 3; f++) {
        snprintf(what, sizeof what, "%s%s read as %s", dname(t), strided ? " (window)" : "", DN_F[f]);
        clembed_matrix as_out = m; /* expect_out reads in the matrix's dtype: read by hand here */
        void *got = tu_alloc_elems(rows * cols, FTYPES[f]);
        OK(ctx, clembed_matrix_read(ctx, &as_out, got, FTYPES[f]));
        size_t bad = 0;
        for (size_t i = 0; i < rows * cols; i++) bad += host_bits(got, i, FTYPES[f]) != stored_bits(q.ref[i], FTYPES[f]);
        EXPECT(bad == 0, "%s: %zu of %zu values differ from ggml's dequantization", what, bad, rows * cols);
        free(got);
      }
      clembed_matrix_release(&m);
    }
    qtab_free(&q);
  }
}

/* Q8_0 and Q4_0 written from floats: the blocks of ggml's reference
 * quantizers; float matrices from blocks and into blocks. */
TU_CASE(dev_write_floats) {
  ctx = device();
  size_t rows = tu_small ? 4 : 40, cols = 64, n = rows * cols;
  float *x = quant_rows(n);
  for (int k = 0; k < 2; k++) {
    int t = TQ[k].dtype;
    size_t rb = cols / 32 * tq_bb(t);
    uint8_t *want = malloc(rows * rb), *got = malloc(rows * rb);
    if (t == CLEMBED_Q8_0) ref_quantize_row_q8_0_ref(x, (ref_block_q8_0 *)want, (int64_t)n);
    else ref_quantize_row_q4_0_ref(x, (ref_block_q4_0 *)want, (int64_t)n);
    clembed_matrix m = {0};
    OK(ctx, clembed_matrix_create(ctx, rows, cols, (clembed_dtype)t, &m));
    OK(ctx, clembed_matrix_write(ctx, &m, x, CLEMBED_F32));
    OK(ctx, clembed_matrix_read(ctx, &m, got, (clembed_dtype)t));
    EXPECT(!memcmp(got, want, rows * rb), "%s from F32: blocks differ from ggml's reference quantizer", dname(t));
    /* from F16 and BF16: their values exactly as F32, then quantized */
    for (int f = 1; f < 3; f++) {
      void *h = tu_alloc_elems(n, FTYPES[f]);
      float *hx = malloc(n * sizeof(float));
      for (size_t i = 0; i < n; i++) {
        tu_set_elem(h, i, FTYPES[f], x[i] * (f == 1 ? 1e-30f : 1.0f) + (f == 1 ? rnd_unit() : 0.0f));
        hx[i] = tu_elem(h, i, FTYPES[f]);
      }
      if (t == CLEMBED_Q8_0) ref_quantize_row_q8_0_ref(hx, (ref_block_q8_0 *)want, (int64_t)n);
      else ref_quantize_row_q4_0_ref(hx, (ref_block_q4_0 *)want, (int64_t)n);
      OK(ctx, clembed_matrix_write(ctx, &m, h, FTYPES[f]));
      OK(ctx, clembed_matrix_read(ctx, &m, got, (clembed_dtype)t));
      EXPECT(!memcmp(got, want, rows * rb), "%s from %s: blocks differ from ggml's reference quantizer", dname(t),
             DN_F[f]);
      free(h);
      free(hx);
    }
    /* an F32 matrix read into blocks: quantized on the host */
    clembed_matrix fm = {0};
    OK(ctx, clembed_matrix_create(ctx, rows, cols, CLEMBED_F32, &fm));
    OK(ctx, clembed_matrix_write(ctx, &fm, x, CLEMBED_F32));
    if (t == CLEMBED_Q8_0) ref_quantize_row_q8_0_ref(x, (ref_block_q8_0 *)want, (int64_t)n);
    else ref_quantize_row_q4_0_ref(x, (ref_block_q4_0 *)want, (int64_t)n);
    memset(got, 0, rows * rb);
    OK(ctx, clembed_matrix_read(ctx, &fm, got, (clembed_dtype)t));
    EXPECT(!memcmp(got, want, rows * rb), "F32 matrix read as %s: blocks differ from ggml's reference quantizer",
           dname(t));
    clembed_matrix_release(&fm);
    clembed_matrix_release(&m);
    free(want);
    free(got);
  }
  free(x);
  /* float matrices written from blocks of every type: ggml's values, rounded */
  for (int k = 0; k < NTQ; k++) {
    int t = TQ[k].dtype;
    qtab q = qtab_make(t, 3, tq_qk(t) * 2);
    for (int f = 0; f < 3; f++) {
      clembed_matrix fm = {0};
      OK(ctx, clembed_matrix_create(ctx, q.rows, q.cols, FTYPES[f], &fm));
      OK(ctx, clembed_matrix_write(ctx, &fm, q.blocks, (clembed_dtype)t));
      char what[64];
      snprintf(what, sizeof what, "%s matrix written from %s blocks", DN_F[f], dname(t));
      expect_out(ctx, &fm, q.ref, CLEMBED_OK, what);
      clembed_matrix_release(&fm);
    }
    qtab_free(&q);
  }
}

/* Lookup from every type into every output dtype, in both kernel shapes, with
 * the table and the output in windows. */
TU_CASE(dev_lookup) {
  if (!shapes()) return;
  for (int sh = 0; sh < 2; sh++) {
    ctx = shape_ctx[sh];
    for (int k = 0; k < NTQ; k++) {
      int t = TQ[k].dtype;
      if (!tq_runs(k, sh, 0) && !tq_runs(k, sh, 1) && !tq_runs(k, sh, 2)) continue;
      size_t qk = tq_qk(t), rows = tu_small ? 9 : 150;
      size_t cols = qk * (t == CLEMBED_Q6_K || tu_small || (k >= 4 && qk == 256) ? 1 : 3);
      size_t n = tu_small ? 13 : 999;
      qtab q = qtab_make(t, rows, cols);
      int64_t *ids = malloc(n * sizeof(int64_t));
      for (size_t i = 0; i < n; i++) ids[i] = i % 7 == 3 ? (int64_t)rows - 1 : (int64_t)(rnd32() % rows);
      clembed_ids dids = {0};
      OK(ctx, clembed_ids_create(ctx, ids, n, CLEMBED_I64, &dids));
      float *want = malloc(n * cols * sizeof(float));
      for (size_t i = 0; i < n; i++)
        for (size_t c = 0; c < cols; c++) want[i * cols + c] = 1.0f * q.ref[(size_t)ids[i] * cols + c];
      for (int strided = 0; strided < 2; strided++) {
        clembed_matrix table = {0};
        OK(ctx, qtab_upload(ctx, &q, strided ? 3 * qk : 0, strided ? 2 * qk : 0, &table));
        for (int f = 0; f < 3; f++) {
          if (!tq_runs(k, sh, f)) continue;
          clembed_matrix out = {0};
          float *zeros = calloc(n * (cols + 5) + 7, sizeof(float));
          if (strided)
            OK(ctx, tu_make_strided(ctx, n, cols, 5, 7, FTYPES[f], zeros, &out));
          else
            OK(ctx, clembed_matrix_create(ctx, n, cols, FTYPES[f], &out));
          OK(ctx, clembed_lookup(ctx, &table, &dids, &out, 0, NULL, NULL));
          char what[96];
          snprintf(what, sizeof what, "%s: lookup %s -> %s%s", SHAPE_NAME[sh], dname(t), DN_F[f],
                   strided ? " (windows)" : "");
          expect_out(ctx, &out, want, CLEMBED_OK, what);
          if (strided)
            EXPECT(tu_written_outside(ctx, &out, 7 + n * (cols + 5)) == 0, "%s: writes outside the output", what);
          clembed_matrix_release(&out);
          free(zeros);
        }
        clembed_matrix_release(&table);
      }
      clembed_ids_release(&dids);
      free(ids);
      free(want);
      qtab_free(&q);
    }
  }
}

/* The forward's options on a quantized table, against the reference in the
 * forward's float32 order. */
typedef struct qopt {
  float scale;
  clembed_index_policy policy;
  int64_t padding; /* CLEMBED_NO_PADDING or a (possibly negative) id */
  int learned;     /* positions from a table (F32, or Q8_0 with qpos) */
  int qpos;
  size_t seq_len, pos_offset;
  float dropout;
  uint64_t seed;
} qopt;

static void run_embed(clembed_context *ctx, const char *shape, int t, clembed_dtype odt, const qopt *o) {
  size_t qk = tq_qk(t), rows = tu_small ? 7 : 60, cols = qk * (tu_small || qk == 256 ? 1 : 2);
  size_t n = tu_small ? 19 : 403, prow = 50;
  qtab q = qtab_make(t, rows, cols);
  int64_t *ids = malloc(n * sizeof(int64_t));
  for (size_t i = 0; i < n; i++) {
    ids[i] = (int64_t)(rnd32() % rows);
    if (i % 5 == 1) ids[i] = -(int64_t)(rnd32() % (rows + 3)) - 1; /* negative: wraps or is bad */
    if (i % 9 == 4) ids[i] = (int64_t)rows + (int64_t)(rnd32() % 1000); /* past the table */
    if (i % 11 == 6) ids[i] = INT64_MAX - (int64_t)(rnd32() % 3);
    if (o->padding != CLEMBED_NO_PADDING && i % 4 == 0) ids[i] = o->padding < 0 ? o->padding + (int64_t)rows : o->padding;
  }
  /* the learned positions: F32 values, or a quantized table and its reference values (Q8_0 with the
   * first four types, else the table's own type: one program reading two tables of it) */
  int pdt = tq(t) - TQ < 4 ? CLEMBED_Q8_0 : t;
  float *pos = malloc(prow * cols * sizeof(float));
  qtab qp = {0};
  if (o->qpos) {
    qp = qtab_make(pdt, prow, cols);
    memcpy(pos, qp.ref, prow * cols * sizeof(float));
  } else {
    for (size_t i = 0; i < prow * cols; i++) pos[i] = rnd_unit();
  }
  clembed_ids dids = {0};
  clembed_matrix table = {0}, out = {0}, ptab = {0};
  OK(ctx, clembed_ids_create(ctx, ids, n, CLEMBED_I64, &dids));
  OK(ctx, qtab_upload(ctx, &q, qk, qk, &table));
  OK(ctx, clembed_matrix_create(ctx, n, cols, odt, &out));
  if (o->learned) {
    if (o->qpos) {
      OK(ctx, qtab_upload(ctx, &qp, 0, 0, &ptab));
    } else {
      OK(ctx, clembed_matrix_create(ctx, prow, cols, CLEMBED_F32, &ptab));
      OK(ctx, clembed_matrix_write(ctx, &ptab, pos, CLEMBED_F32));
    }
  }
  clembed_embed_options eo = clembed_embed_defaults();
  eo.scale = o->scale;
  eo.policy = o->policy;
  eo.padding_idx = o->padding;
  eo.positions = o->learned ? CLEMBED_POSITIONS_TABLE : CLEMBED_POSITIONS_NONE;
  eo.position_table = o->learned ? &ptab : NULL;
  eo.seq_len = o->seq_len;
  eo.position_offset = o->pos_offset;
  eo.dropout = o->dropout;
  eo.dropout_seed = o->seed;
  /* the reference, in the forward's float32 order */
  float *want = malloc(n * cols * sizeof(float));
  int64_t first_bad = -1, first_bad_id = 0, first_bad_pos = -1;
  for (size_t i = 0; i < n; i++) {
    int bad;
    long r = ref_resolve(ids[i], (int64_t)rows, o->policy, ref_padding_row(o->padding, (int64_t)rows), &bad);
    if (bad && first_bad < 0) first_bad = (int64_t)i, first_bad_id = ids[i];
    size_t b = o->seq_len ? i / o->seq_len : 0, p = o->pos_offset + (i - b * o->seq_len);
    int pok = o->learned && p < prow;
    if (o->learned && !pok && first_bad_pos < 0) first_bad_pos = (int64_t)i;
    for (size_t c = 0; c < cols; c++) {
      int kept = o->dropout > 0.0f && ref_dropout_kept(o->seed, (uint64_t)(i * cols + c), o->dropout);
      want[i * cols + c] = ref_forward(o->scale, r >= 0 ? &q.ref[(size_t)r * cols + c] : NULL,
                                       pok ? &pos[p * cols + c] : NULL, o->dropout, kept);
    }
  }
  OK(ctx, clembed_embed(ctx, &table, &dids, &eo, &out, 0, NULL, NULL));
  char what[160];
  snprintf(what, sizeof what, "%s: embed %s -> %s (scale %g, policy %d, padding %lld, %s positions, seq_len %zu, dropout %g)",
           shape, dname(t), DN_F[odt], o->scale, (int)o->policy, (long long)o->padding,
           o->learned ? (o->qpos ? dname(pdt) : "F32") : "no", o->seq_len, o->dropout);
  int errs = first_bad >= 0 || first_bad_pos >= 0;
  expect_out(ctx, &out, want, errs ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK, what);
  if (errs && (first_bad < 0 || first_bad_pos < 0)) { /* one kind of error: its first token */
    clembed_error_detail d;
    clembed_context_error(ctx, &d);
    int ids_kind = first_bad >= 0;
    int64_t tok = ids_kind ? first_bad : first_bad_pos;
    int64_t val = ids_kind ? first_bad_id : (int64_t)(o->pos_offset + (size_t)tok % (o->seq_len ? o->seq_len : n));
    EXPECT(d.index == tok && d.value == val && !strcmp(d.argument, ids_kind ? "ids" : "position_table"),
           "%s: the error names %s[%lld] = %lld, expected %s[%lld] = %lld (%s)", what, d.argument,
           (long long)d.index, (long long)d.value, ids_kind ? "ids" : "position_table", (long long)tok,
           (long long)val, clembed_context_message(ctx));
  }
  clembed_matrix_release(&ptab);
  clembed_matrix_release(&table);
  clembed_matrix_release(&out);
  clembed_ids_release(&dids);
  if (o->qpos) qtab_free(&qp);
  free(pos);
  free(want);
  free(ids);
  qtab_free(&q);
}

TU_CASE(dev_embed) {
  if (!shapes()) return;
  const qopt opts[] = {
      {1.0f, CLEMBED_INDEX_ZERO, CLEMBED_NO_PADDING, 0, 0, 0, 0, 0.0f, 0},
      {0.37f, CLEMBED_INDEX_CLAMP, 2, 1, 0, 0, 5, 0.0f, 0},
      {3.0f, CLEMBED_INDEX_CHECK, -1, 1, 0, 16, 3, 0.0f, 0},
      {1.5f, CLEMBED_INDEX_WRAP, CLEMBED_NO_PADDING, 1, 1, 8, 40, 0.0f, 0},
      {0.125f, CLEMBED_INDEX_ZERO, 0, 0, 0, 0, 0, 0.3f, 0x123456789ABCDEFULL},
      {2.0f, CLEMBED_INDEX_CLAMP, CLEMBED_NO_PADDING, 1, 1, 10, 0, 0.5f, 7},
  };
  size_t nopt = sizeof opts / sizeof opts[0];
  for (int sh = 0; sh < 2; sh++)
    for (int k = 0; k < NTQ; k++)
      for (int f = 0; f < 3; f++)
        for (size_t j = 0; j < nopt; j++) {
          if (!tq_runs(k, sh, f)) continue;
          if (tu_small && (j + (size_t)f + (size_t)k) % 3 != 0) continue; /* a third of the grid under Oclgrind */
          if (!tq_every() && k >= 4 && j % 3 != (size_t)(k + sh) % 3) continue; /* the other types: 2 options a shape */
          run_embed(shape_ctx[sh], SHAPE_NAME[sh], TQ[k].dtype, FTYPES[f], &opts[j]);
        }
}

/* The sinusoid (and sequence offsets) on a quantized table: the same bits as the
 * same forward on an F32 table holding ggml's values. */
TU_CASE(dev_sinusoid) {
  if (!shapes()) return;
  for (int sh = 0; sh < 2; sh++)
    for (int k = 0; k < NTQ; k++) {
      if (!tq_runs(k, sh, 0) && !tq_runs(k, sh, 1) && !tq_runs(k, sh, 2)) continue;
      ctx = shape_ctx[sh];
      int t = TQ[k].dtype;
      size_t rows = 11, cols = tq_qk(t), n = tu_small ? 24 : 300;
      qtab q = qtab_make(t, rows, cols);
      int32_t *ids = malloc(n * sizeof(int32_t));
      for (size_t i = 0; i < n; i++) ids[i] = (int32_t)(rnd32() % rows);
      int32_t so[64];
      for (int b = 0; b < 64; b++) so[b] = (int32_t)(rnd32() % 5000);
      clembed_ids dids = {0}, dso = {0};
      clembed_matrix qt = {0}, ft = {0}, o1 = {0}, o2 = {0};
      OK(ctx, clembed_ids_create(ctx, ids, n, CLEMBED_I32, &dids));
      OK(ctx, clembed_ids_create(ctx, so, 64, CLEMBED_I32, &dso));
      OK(ctx, qtab_upload(ctx, &q, 0, 0, &qt));
      OK(ctx, clembed_matrix_create(ctx, rows, cols, CLEMBED_F32, &ft));
      OK(ctx, clembed_matrix_write(ctx, &ft, q.ref, CLEMBED_F32));
      for (int variant = 0; variant < 3; variant++) {
        if (!tq_runs(k, sh, variant)) continue;
        clembed_dtype odt = FTYPES[variant];
        OK(ctx, clembed_matrix_create(ctx, n, cols, odt, &o1));
        OK(ctx, clembed_matrix_create(ctx, n, cols, odt, &o2));
        clembed_embed_options eo = clembed_embed_defaults();
        eo.scale = 0.75f;
        eo.positions = CLEMBED_POSITIONS_SINUSOID;
        eo.seq_len = 12;
        eo.position_offset = variant == 1 ? 100000 : 0;
        eo.sequence_offsets = variant == 2 ? &dso : NULL;
        eo.dropout = variant == 1 ? 0.25f : 0.0f;
        eo.dropout_seed = 99;
        OK(ctx, clembed_embed(ctx, &qt, &dids, &eo, &o1, 0, NULL, NULL));
        OK(ctx, clembed_embed(ctx, &ft, &dids, &eo, &o2, 0, NULL, NULL));
        void *a = tu_alloc_elems(n * cols, odt), *b = tu_alloc_elems(n * cols, odt);
        OK(ctx, clembed_matrix_read(ctx, &o1, a, odt));
        OK(ctx, clembed_matrix_read(ctx, &o2, b, odt));
        EXPECT(!memcmp(a, b, n * cols * clembed_dtype_size(odt)),
               "%s: sinusoid embed of %s -> %s (variant %d) differs from the F32 table of its values", SHAPE_NAME[sh],
               dname(t), DN_F[variant], variant);
        free(a);
        free(b);
        clembed_matrix_release(&o1);
        clembed_matrix_release(&o2);
      }
      clembed_matrix_release(&qt);
      clembed_matrix_release(&ft);
      clembed_ids_release(&dids);
      clembed_ids_release(&dso);
      free(ids);
      qtab_free(&q);
    }
}

/* Both shapes give the same bits on a larger lookup (many rows per work-item,
 * tails), and a table whose last row ends the buffer is never read past. */
TU_CASE(dev_edges) {
  if (!shapes()) return;
  for (int k = 0; k < NTQ; k++) {
    int t = TQ[k].dtype;
    size_t rows = 5, cols = tq_qk(t), n = 23;
    qtab q = qtab_make(t, rows, cols);
    int64_t ids[23];
    for (size_t i = 0; i < n; i++)
      ids[i] = i % 3 == 0 ? (int64_t)rows - 1 : i % 3 == 1 ? (int64_t)(rows + i) : -(int64_t)i - 1;
    for (int sh = 0; sh < 2; sh++) {
      int f = k < 4 && tq_full ? 0 : (k + sh) % 3; /* (dev_lookup's output dtype, the same program) */
      if (!tq_runs(k, sh, f)) continue;
      ctx = shape_ctx[sh];
      for (int policy = 0; policy < 4; policy++) {
        clembed_ids dids = {0};
        clembed_matrix table = {0}, out = {0};
        OK(ctx, clembed_ids_create(ctx, ids, n, CLEMBED_I64, &dids));
        OK(ctx, clembed_matrix_create(ctx, rows, cols, (clembed_dtype)t, &table)); /* exactly the blocks */
        OK(ctx, clembed_matrix_write(ctx, &table, q.blocks, (clembed_dtype)t));
        OK(ctx, clembed_matrix_create(ctx, n, cols, FTYPES[f], &out));
        clembed_embed_options eo = clembed_embed_defaults();
        eo.policy = (clembed_index_policy)policy;
        OK(ctx, clembed_embed(ctx, &table, &dids, &eo, &out, 0, NULL, NULL));
        float *want = malloc(n * cols * sizeof(float));
        int anybad = 0;
        for (size_t i = 0; i < n; i++) {
          int bad;
          long r = ref_resolve(ids[i], (int64_t)rows, (clembed_index_policy)policy, -1, &bad); /* no padding */
          anybad |= bad;
          for (size_t c = 0; c < cols; c++) want[i * cols + c] = r >= 0 ? 1.0f * q.ref[(size_t)r * cols + c] : 0.0f;
        }
        char what[96];
        snprintf(what, sizeof what, "%s: %s table ending its buffer -> %s, policy %d", SHAPE_NAME[sh], dname(t),
                 DN_F[f], policy);
        expect_out(ctx, &out, want, anybad ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK, what);
        free(want);
        clembed_matrix_release(&table);
        clembed_matrix_release(&out);
        clembed_ids_release(&dids);
      }
    }
    qtab_free(&q);
  }
}

/* 1 when stored bits g of dtype t are a NaN */
static int nan_bits(uint32_t g, clembed_dtype t) {
  if (t == CLEMBED_F32) return (g & 0x7FFFFFFFu) > 0x7F800000u;
  return (g & 0x7FFFu) > (t == CLEMBED_F16 ? 0x7C00u : 0x7F80u);
}
/* 1 when ctx's device flushes subnormal floats (no CL_FP_DENORM, which OpenCL
 * 1.2 allows): MXFP4's values of e 0 and 1 below 2^-126 may then come out 0, as
 * include/clembed.h says (the other types' values are never subnormal). */
static int flushes_subnormals(clembed_context *c) {
  cl_device_id d = NULL;
  cl_device_fp_config fc = 0;
  clGetCommandQueueInfo(clembed_context_queue(c), CL_QUEUE_DEVICE, sizeof d, &d, NULL);
  clGetDeviceInfo(d, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fc, &fc, NULL);
  return (fc & CL_FP_DENORM) == 0;
}
/* Whether g, a device's stored bits of dtype t for want, is what `flush`
 * allows besides want's own bits: a zero for a subnormal want. */
static int flushed_zero(uint32_t g, clembed_dtype t, float want, int flush) {
  return flush && fpclassify(want) == FP_SUBNORMAL && (g & (t == CLEMBED_F32 ? 0x7FFFFFFFu : 0x7FFFu)) == 0;
}
/* As expect_out, where want may hold NaNs: a NaN must come out a NaN (its
 * payload is the device's: OpenCL leaves it free), every other value exact
 * (or a zero for a subnormal, with `flush`). */
static size_t count_differ_nan(const void *got, clembed_dtype t, const float *want, size_t n, int flush) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t g = host_bits(got, i, t);
    bad += isnan(want[i]) ? !nan_bits(g, t) : g != stored_bits(want[i], t) && !flushed_zero(g, t, want[i], flush);
  }
  return bad;
}

/* Blocks with any f16 scale: the largest, subnormal, zero, infinite and NaN
 * (ggml's products then give infinities and NaNs: inf * 0 is a NaN, as in
 * ggml; MXFP4: e 0 and 1, subnormal scales, and 255, values past FLT_MAX), in
 * lookups (both shapes) and read back as F32, F16 and BF16. */
TU_CASE(dev_extreme) {
  if (!shapes()) return;
  for (int k = 0; k < NTQ; k++) {
    int t = TQ[k].dtype;
    size_t qk = tq_qk(t), rows = 8, cols = qk * (qk == 32 ? 2 : 1), nb = rows * cols / qk, n = 16;
    qtab q = qtab_make(t, rows, cols);
    for (size_t b = 0; b < nb; b++) rnd_block_any(t, q.blocks + b * tq_bb(t));
    static const uint16_t first[4] = {0x7C00, 0x7E00, 0x7BFF, 0x0001}; /* rows 0..3: inf, NaN, max, subnormal */
    for (size_t r = 0; r < 4; r++)
      for (int h = 0; h < n_halves(t); h++) set_half(t, q.blocks + r * q.row_bytes, h, first[r] ^ (uint16_t)(h << 15));
    ref_dequantize(t, q.blocks, q.ref, rows * cols);
    int64_t ids[16];
    for (size_t i = 0; i < n; i++) ids[i] = (int64_t)(i % rows);
    float *want = malloc(n * cols * sizeof(float));
    for (size_t i = 0; i < n; i++) memcpy(want + i * cols, q.ref + (size_t)ids[i] * cols, cols * sizeof(float));
    for (int sh = 0; sh < 2; sh++) {
      int f = k < 4 && tq_full ? 0 : (k + sh) % 3;
      if (!tq_runs(k, sh, f)) continue;
      ctx = shape_ctx[sh];
      clembed_ids dids = {0};
      clembed_matrix table = {0}, out = {0};
      OK(ctx, clembed_ids_create(ctx, ids, n, CLEMBED_I64, &dids));
      OK(ctx, clembed_matrix_create(ctx, rows, cols, (clembed_dtype)t, &table));
      OK(ctx, clembed_matrix_write(ctx, &table, q.blocks, (clembed_dtype)t));
      OK(ctx, clembed_matrix_create(ctx, n, cols, FTYPES[f], &out));
      OK(ctx, clembed_lookup(ctx, &table, &dids, &out, 0, NULL, NULL));
      void *got = tu_alloc_elems(n * cols, FTYPES[f]);
      OK(ctx, clembed_matrix_read(ctx, &out, got, FTYPES[f]));
      size_t bad = count_differ_nan(got, FTYPES[f], want, n * cols, flushes_subnormals(ctx));
      EXPECT(bad == 0, "%s: lookup of %s blocks with extreme scales -> %s: %zu of %zu values differ", SHAPE_NAME[sh],
             dname(t), DN_F[f], bad, n * cols);
      free(got);
      for (int g = 0; g < 3 && sh == 0; g++) { /* read back, dequantized on the host */
        got = tu_alloc_elems(rows * cols, FTYPES[g]);
        OK(ctx, clembed_matrix_read(ctx, &table, got, FTYPES[g]));
        bad = count_differ_nan(got, FTYPES[g], q.ref, rows * cols, 0); /* the host's values */
        EXPECT(bad == 0, "%s blocks with extreme scales read as %s: %zu of %zu values differ", dname(t), DN_F[g], bad,
               rows * cols);
        free(got);
      }
      clembed_matrix_release(&table);
      clembed_matrix_release(&out);
      clembed_ids_release(&dids);
    }
    free(want);
    qtab_free(&q);
  }
}

/* Every load function of cl/lib/quant.cl, for every type, in one program of
 * the helpers (loadstore.cl, iqtables.cl with every table, quant.cl, read from the
 * source tree) and a kernel per type that writes each value of a table
 * through each of them: ce_load_T (one value), ce_load4_T (4), the 8-value
 * load, ce_loadv_T (VEC 16), ce_loadw_T (2 x 16), and the 2 x 4 and 2 x 8
 * loads. Some are not reached by the forward's shapes on block tables (the
 * scalar one, VEC loads of a column tail) but are by other families'. */
static const char LOADS_KERNELS[] =
    "#define T_LOADS(code, name)                                                                     \\\n"
    "__kernel void t_loads_##code(__global const uchar *p, ulong n, __global float *o) {            \\\n"
    "  ulong i = get_global_id(0) * 32;                                                             \\\n"
    "  if (i >= n) return;                                                                          \\\n"
    "  for (uint k = 0; k < 32; k++) o[i + k] = ce_load_##code(p, i + k);                           \\\n"
    "  for (uint k = 0; k < 8; k++) vstore4(ce_load4_##code(p, i, k), 0, o + n + i + 4 * k);        \\\n"
    "  for (uint k = 0; k < 4; k++) vstore8(ce_##name##_load8(p, i + 8 * k), 0, o + 2 * n + i + 8 * k); \\\n"
    "  for (uint k = 0; k < 2; k++) vstore16(ce_loadv_##code(p, i + 16 * k), 0, o + 3 * n + i + 16 * k); \\\n"
    "  float16 a, b;                                                                                \\\n"
    "  ce_loadw_##code(p, i, a, b);                                                                 \\\n"
    "  vstore16(a, 0, o + 4 * n + i), vstore16(b, 0, o + 4 * n + i + 16);                           \\\n"
    "  for (uint k = 0; k < 4; k++) {                                                               \\\n"
    "    float4 c, d;                                                                               \\\n"
    "    ce_##name##_load2x4(p, i + 8 * k, &c, &d);                                                 \\\n"
    "    vstore4(c, 0, o + 5 * n + i + 8 * k), vstore4(d, 0, o + 5 * n + i + 8 * k + 4);            \\\n"
    "  }                                                                                            \\\n"
    "  for (uint k = 0; k < 2; k++) {                                                               \\\n"
    "    float8 c, d;                                                                               \\\n"
    "    ce_##name##_load2x8(p, i + 16 * k, &c, &d);                                                \\\n"
    "    vstore8(c, 0, o + 6 * n + i + 16 * k), vstore8(d, 0, o + 6 * n + i + 16 * k + 8);          \\\n"
    "  }                                                                                            \\\n"
    "}                                                                                              \n"
    "T_LOADS(3, q8_0) T_LOADS(4, q4_0) T_LOADS(5, q4_k) T_LOADS(6, q6_k) T_LOADS(7, q4_1)          \n"
    "T_LOADS(8, q5_0) T_LOADS(9, q5_1) T_LOADS(10, q2_k) T_LOADS(11, q3_k) T_LOADS(12, q5_k)       \n"
    "T_LOADS(13, iq4_nl) T_LOADS(14, iq4_xs) T_LOADS(15, iq2_xxs) T_LOADS(16, iq2_xs)             \n"
    "T_LOADS(17, iq2_s) T_LOADS(18, iq3_xxs) T_LOADS(19, iq3_s) T_LOADS(20, iq1_s) T_LOADS(21, iq1_m) \n"
    "T_LOADS(22, tq1_0) T_LOADS(23, tq2_0) T_LOADS(24, mxfp4)                                      \n";
#define N_LOADS 7
static const char *LOAD_NAMES[N_LOADS] = {"ce_load_T", "ce_load4_T", "load8", "ce_loadv_T (16)", "ce_loadw_T (2 x 16)",
                                          "load2x4", "load2x8"};

static char *read_text(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *p = malloc((size_t)n + 1);
  *len = fread(p, 1, (size_t)n, f);
  p[*len] = '\0';
  fclose(f);
  return p;
}

TU_CASE(dev_loads) {
  ctx = device();
  cl_command_queue queue = clembed_context_queue(ctx);
  cl_context cc = NULL;
  cl_device_id dev = NULL;
  clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof cc, &cc, NULL);
  clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  static const char *const files[] = {"loadstore.cl", "iqtables.cl", "quant.cl"};
  const char *src[4];
  size_t len[4];
  int have = 1;
  for (int i = 0; i < 3; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", CLEMBED_CL_LIB_DIR, files[i]);
    src[i] = read_text(path, &len[i]);
    EXPECT(src[i] != NULL, "cannot read %s", path);
    have &= src[i] != NULL;
  }
  src[3] = LOADS_KERNELS;
  len[3] = strlen(LOADS_KERNELS);
  cl_int err = CL_SUCCESS;
  cl_program prog = have ? clCreateProgramWithSource(cc, 4, src, len, &err) : NULL;
  if (prog) err = clBuildProgram(prog, 1, &dev, "-cl-std=CL1.2 -DVEC=16 -DCE_ALL_TABLES=1 -DCE_PREFETCH=0", NULL, NULL);
  if (prog && err != CL_SUCCESS) {
    char log[8192] = "";
    clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    fprintf(stderr, "%s\n", log);
  }
  EXPECT(prog && err == CL_SUCCESS, "building the loads' program: %d", (int)err);
  const int flush = flushes_subnormals(ctx);
  for (int k = 0; prog && err == CL_SUCCESS && k < NTQ; k++) {
    int t = TQ[k].dtype;
    size_t qk = tq_qk(t), n = qk == 32 ? 32 * 24 : 256 * (tu_small ? 2 : 6), nb = n / qk;
    qtab q = qtab_make(t, 1, n);
    for (size_t b = 0; b < nb; b++) rnd_block(t, q.blocks + b * tq_bb(t));
    if (t == CLEMBED_MXFP4) { /* the exponents of subnormal scales and of values past FLT_MAX, through every load */
      static const uint8_t es[4] = {0, 1, 254, 255};
      for (size_t b = 0; b < 4; b++) q.blocks[b * tq_bb(t) + offsetof(ref_block_mxfp4, e)] = es[b];
    }
    ref_dequantize(t, q.blocks, q.ref, n);
    char name[32];
    snprintf(name, sizeof name, "t_loads_%d", t);
    cl_int e2 = CL_SUCCESS;
    cl_kernel kern = clCreateKernel(prog, name, &e2);
    cl_mem in = clCreateBuffer(cc, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nb * tq_bb(t), q.blocks, &e2);
    cl_mem out = clCreateBuffer(cc, CL_MEM_WRITE_ONLY, N_LOADS * n * sizeof(float), NULL, &e2);
    cl_ulong nn = n;
    size_t global = n / 32;
    float *got = malloc(N_LOADS * n * sizeof(float));
    e2 = clSetKernelArg(kern, 0, sizeof in, &in);
    e2 |= clSetKernelArg(kern, 1, sizeof nn, &nn);
    e2 |= clSetKernelArg(kern, 2, sizeof out, &out);
    if (e2 == CL_SUCCESS) e2 = clEnqueueNDRangeKernel(queue, kern, 1, NULL, &global, NULL, 0, NULL, NULL);
    if (e2 == CL_SUCCESS)
      e2 = clEnqueueReadBuffer(queue, out, CL_TRUE, 0, N_LOADS * n * sizeof(float), got, 0, NULL, NULL);
    EXPECT(e2 == CL_SUCCESS, "%s: running %s: %d", dname(t), name, (int)e2);
    for (int v = 0; e2 == CL_SUCCESS && v < N_LOADS; v++) {
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < n; i++) {
        uint32_t g = bits_of(got[v * n + i]);
        if (g != bits_of(q.ref[i]) && !flushed_zero(g, CLEMBED_F32, q.ref[i], flush) && !bad++) first = i;
      }
      EXPECT(bad == 0, "%s through %s: %zu of %zu values differ from ggml's, first %zu: %a, expected %a", dname(t),
             LOAD_NAMES[v], bad, n, first, got[v * n + first], q.ref[first]);
    }
    free(got);
    clReleaseMemObject(in);
    clReleaseMemObject(out);
    clReleaseKernel(kern);
    qtab_free(&q);
  }
  if (prog) clReleaseProgram(prog);
  for (int i = 0; i < 3; i++) free((void *)src[i]);
}

/* A failure with `code` whose error detail names the argument `arg` and whose
 * message says `says`. */
#define REFUSES(ctx, code, arg, says, call)                                                                    \
  do {                                                                                                         \
    FAILS(ctx, code, call);                                                                                    \
    clembed_error_detail tq_d;                                                                                 \
    clembed_context_error(ctx, &tq_d);                                                                         \
    EXPECT(!strcmp(tq_d.argument, arg) && strstr(clembed_context_message(ctx), says) != NULL,                  \
           "%s: argument '%s', message \"%s\"; expected '%s' and \"%s\"", #call, tq_d.argument,                  \
           clembed_context_message(ctx), arg, says);                                                           \
  } while (0)

TU_CASE(dev_rejections) {
  ctx = device();
  clembed_matrix m = {0}, q8 = {0}, f = {0}, g = {0}, pos = {0};
  int32_t idv[4] = {0, 1, 2, 3};
  clembed_ids ids = {0};
  OK(ctx, clembed_ids_create(ctx, idv, 4, CLEMBED_I32, &ids));
  /* sizes that are not whole blocks */
  REFUSES(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "cols", "Q8_0 block size 32", clembed_matrix_create(ctx, 2, 33, CLEMBED_Q8_0, &m));
  REFUSES(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "cols", "Q4_0 block size 32", clembed_matrix_create(ctx, 2, 16, CLEMBED_Q4_0, &m));
  REFUSES(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "cols", "Q4_K block size 256", clembed_matrix_create(ctx, 2, 32, CLEMBED_Q4_K, &m));
  REFUSES(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "cols", "Q6_K block size 256", clembed_matrix_create(ctx, 2, 128, CLEMBED_Q6_K, &m));
  REFUSES(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "cols", "Q5_1 block size 32", clembed_matrix_create(ctx, 2, 48, CLEMBED_Q5_1, &m));
  REFUSES(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "cols", "IQ4_XS block size 256", clembed_matrix_create(ctx, 2, 96, CLEMBED_IQ4_XS, &m));
  REFUSES(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "cols", "IQ1_M block size 256", clembed_matrix_create(ctx, 2, 32, CLEMBED_IQ1_M, &m));
  REFUSES(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "cols", "TQ1_0 block size 256", clembed_matrix_create(ctx, 2, 160, CLEMBED_TQ1_0, &m));
  REFUSES(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "cols", "MXFP4 block size 32", clembed_matrix_create(ctx, 2, 17, CLEMBED_MXFP4, &m));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_create(ctx, 2, 32, (clembed_dtype)99, &m));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_create(ctx, 2, 32, (clembed_dtype)32, &m));
  EXPECT(clembed_dtype_row_bytes(CLEMBED_Q4_K, 512) == 288 && clembed_dtype_row_bytes(CLEMBED_Q8_0, 31) == 0 &&
             clembed_dtype_row_bytes(CLEMBED_F16, 3) == 6 && clembed_dtype_row_bytes((clembed_dtype)99, 32) == 0,
         "clembed_dtype_row_bytes");
  EXPECT(clembed_dtype_size(CLEMBED_Q8_0) == 0, "no element size for a block type");
  OK(ctx, clembed_matrix_create(ctx, 4, 64, CLEMBED_Q8_0, &q8));
  OK(ctx, clembed_matrix_create(ctx, 4, 64, CLEMBED_F32, &f));
  /* windows off the block grid */
  clembed_matrix w = q8;
  w.offset = 16, w.rows = 1, w.cols = 32;
  REFUSES(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "table", "offset is 16", clembed_lookup(ctx, &w, &ids, &f, 0, NULL, NULL));
  w.offset = 0, w.ld = 48, w.rows = 2;
  REFUSES(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "table", "ld is 48", clembed_lookup(ctx, &w, &ids, &f, 0, NULL, NULL));
  w.ld = 0, w.cols = 40;
  uint8_t blocks[4 * 2 * 34] = {0};
  REFUSES(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "m", "cols is 40", clembed_matrix_write(ctx, &w, blocks, CLEMBED_Q8_0));
  w.cols = 32, w.offset = 8;
  REFUSES(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "m", "offset is 8", clembed_matrix_read(ctx, &w, blocks, CLEMBED_Q8_0));
  /* a window past its buffer, counted in blocks */
  w = q8;
  w.offset = 64;
  REFUSES(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "table", "needs 340 bytes but its buffer holds 272", clembed_lookup(ctx, &w, &ids, &f, 0, NULL, NULL));
  /* conversions there are none of */
  clembed_matrix k4 = {0};
  OK(ctx, clembed_matrix_create(ctx, 1, 256, CLEMBED_Q4_K, &k4));
  float vals[256] = {0};
  REFUSES(ctx, CLEMBED_ERR_UNSUPPORTED, "m", "quantized into Q4_K", clembed_matrix_write(ctx, &k4, vals, CLEMBED_F32));
  REFUSES(ctx, CLEMBED_ERR_UNSUPPORTED, "host_dtype", "quantized into Q4_K", clembed_matrix_read(ctx, &f, blocks, CLEMBED_Q4_K));
  REFUSES(ctx, CLEMBED_ERR_UNSUPPORTED, "host_dtype", "no conversion between block types", clembed_matrix_write(ctx, &k4, blocks, CLEMBED_Q8_0));
  clembed_matrix_release(&k4);
  /* the other types: no quantizer either, and no conversion from or to another block type */
  for (int k = 4; k < NTQ; k++) {
    clembed_matrix o = {0};
    size_t qk = tq_qk(TQ[k].dtype);
    char says[64];
    OK(ctx, clembed_matrix_create(ctx, 1, qk, (clembed_dtype)TQ[k].dtype, &o));
    snprintf(says, sizeof says, "quantized into %s", TQ[k].name);
    REFUSES(ctx, CLEMBED_ERR_UNSUPPORTED, "m", says, clembed_matrix_write(ctx, &o, vals, CLEMBED_F32));
    REFUSES(ctx, CLEMBED_ERR_UNSUPPORTED, "host_dtype", "no conversion between block types",
            clembed_matrix_read(ctx, &o, blocks, CLEMBED_Q4_0));
    clembed_matrix_release(&o);
  }
  REFUSES(ctx, CLEMBED_ERR_UNSUPPORTED, "host_dtype", "quantized into Q2_K", clembed_matrix_read(ctx, &f, blocks, CLEMBED_Q2_K));
  /* quantized matrices as outputs, gradients, tables to train or initialise */
  clembed_matrix q8out = {0};
  OK(ctx, clembed_matrix_create(ctx, 4, 64, CLEMBED_Q8_0, &q8out));
  REFUSES(ctx, CLEMBED_ERR_UNSUPPORTED, "out", "out is Q8_0", clembed_lookup(ctx, &q8, &ids, &q8out, 0, NULL, NULL));
  REFUSES(ctx, CLEMBED_ERR_UNSUPPORTED, "out", "out is Q8_0", clembed_embed(ctx, &f, &ids, NULL, &q8out, 0, NULL, NULL));
  REFUSES(ctx, CLEMBED_ERR_UNSUPPORTED, "out", "out is Q8_0", clembed_positional(ctx, NULL, 0, &q8out, 0, NULL, NULL));
  clembed_backward_options bo = clembed_backward_defaults();
  REFUSES(ctx, CLEMBED_ERR_UNSUPPORTED, "grad_table", "grad_table is Q8_0", clembed_backward(ctx, &f, &ids, &bo, &q8, 0, NULL, NULL));
  OK(ctx, clembed_matrix_create(ctx, 4, 64, CLEMBED_F32, &g));
  REFUSES(ctx, CLEMBED_ERR_UNSUPPORTED, "grad_out", "grad_out is Q8_0", clembed_backward(ctx, &q8out, &ids, &bo, &g, 0, NULL, NULL));
  OK(ctx, clembed_matrix_create(ctx, 4, 64, CLEMBED_Q4_0, &pos));
  bo.position_grad = &pos;
  REFUSES(ctx, CLEMBED_ERR_UNSUPPORTED, "position_grad", "position_grad is Q4_0", clembed_backward(ctx, &f, &ids, &bo, &g, 0, NULL, NULL));
  bo.position_grad = NULL;
  REFUSES(ctx, CLEMBED_ERR_UNSUPPORTED, "table", "table is Q8_0", clembed_sgd_update(ctx, &f, &ids, 0.1f, &bo, &q8, 0, NULL, NULL));
  REFUSES(ctx, CLEMBED_ERR_UNSUPPORTED, "m", "init_normal: m is Q8_0", clembed_matrix_init_normal(ctx, &q8, 0.0f, 1.0f, 1, 0, NULL, NULL));
  REFUSES(ctx, CLEMBED_ERR_UNSUPPORTED, "m", "init_uniform: m is Q8_0", clembed_matrix_init_uniform(ctx, &q8, 0.0f, 1.0f, 1, 0, NULL, NULL));
  clembed_matrix_release(&q8out);
  clembed_matrix_release(&pos);
  clembed_matrix_release(&g);
  clembed_matrix_release(&f);
  clembed_matrix_release(&q8);
  clembed_ids_release(&ids);
}

/* ------------------------------------------------------------- driver */

/* The device contexts are opened by the first device case that needs them. */
static void teardown(clembed_context *unused) {
  (void)unused;
  clembed_context_destroy(shape_ctx[0]);
  clembed_context_destroy(shape_ctx[1]);
  clembed_context_destroy(dev_ctx);
}

int main(int argc, char **argv) {
  tu_suite suite = {.name = "test_quant", .teardown = teardown};
  if (argc >= 2 && !strcmp(argv[1], "full")) { /* every type x shape x output dtype x option */
    tq_full = 1;
    argv[1] = argv[0];
    argc--, argv++;
  } /* (tu_main takes "full" anywhere else) */
  if (argc == 2 && !strcmp(argv[1], "host")) { /* the cases that need no device */
    char *host[] = {argv[0], "layouts", "row_bytes", "f16", "dequantize", "every_scale", "known_values", "quantize", "quantize_known", "tiny_scale", "nan_inputs", "roundtrip"};
    return tu_main((int)(sizeof host / sizeof *host), host, suite);
  }
  return tu_main(argc, argv, suite);
}
