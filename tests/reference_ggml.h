/* reference_ggml.h: ggml's block formats and their (de)quantizers, transcribed
 * plainly from ggml's src/ggml-common.h, src/ggml-impl.h and src/ggml-quants.c
 * (github.com/ggml-org/ggml), for the tests to check the library against.
 * Written apart from the library's src/: same structs, same statements, only
 * the names prefixed with ref_ and ggml's macros spelled out.
 *
 * The tests compile this with -ffp-contract=off, as ggml's scalar code reads:
 * each product rounded to float32 before the next operation.
 *
 * ggml converts floats to int8_t with plain C conversions (undefined in C out
 * of range); the tests call the quantizers here only on rows where those
 * conversions are in range. */
#ifndef CLEMBED_REFERENCE_GGML_H
#define CLEMBED_REFERENCE_GGML_H

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define REF_MAX(a, b) ((a) > (b) ? (a) : (b))
#define REF_MIN(a, b) ((a) < (b) ? (a) : (b))

typedef uint16_t ref_ggml_half;

#define REF_QK4_0 32
typedef struct {
  ref_ggml_half d;           /* delta */
  uint8_t qs[REF_QK4_0 / 2]; /* nibbles / quants */
} ref_block_q4_0;
_Static_assert(sizeof(ref_block_q4_0) == sizeof(ref_ggml_half) + REF_QK4_0 / 2, "wrong q4_0 block size/padding");

#define REF_QK8_0 32
typedef struct {
  ref_ggml_half d;       /* delta */
  int8_t qs[REF_QK8_0];  /* quants */
} ref_block_q8_0;
_Static_assert(sizeof(ref_block_q8_0) == sizeof(ref_ggml_half) + REF_QK8_0, "wrong q8_0 block size/padding");

#define REF_QK_K 256
#define REF_K_SCALE_SIZE 12
typedef struct {
  ref_ggml_half d;                  /* super-block scale for quantized scales */
  ref_ggml_half dmin;               /* super-block scale for quantized mins */
  uint8_t scales[REF_K_SCALE_SIZE]; /* scales and mins, quantized with 6 bits */
  uint8_t qs[REF_QK_K / 2];         /* 4--bit quants */
} ref_block_q4_K;
_Static_assert(sizeof(ref_block_q4_K) == 2 * sizeof(ref_ggml_half) + REF_K_SCALE_SIZE + REF_QK_K / 2,
               "wrong q4_K block size/padding");

typedef struct {
  uint8_t ql[REF_QK_K / 2];      /* quants, lower 4 bits */
  uint8_t qh[REF_QK_K / 4];      /* quants, upper 2 bits */
  int8_t scales[REF_QK_K / 16];  /* scales, quantized with 8 bits */
  ref_ggml_half d;               /* super-block scale */
} ref_block_q6_K;
_Static_assert(sizeof(ref_block_q6_K) == sizeof(ref_ggml_half) + REF_QK_K / 16 + 3 * REF_QK_K / 4,
               "wrong q6_K block size/padding");

/* ---- ggml-impl.h: FP16 <-> FP32 (ref: https://github.com/Maratyszcza/FP16) */

static inline float ref_fp32_from_bits(uint32_t w) {
  union {
    uint32_t as_bits;
    float as_value;
  } fp32;
  fp32.as_bits = w;
  return fp32.as_value;
}

static inline uint32_t ref_fp32_to_bits(float f) {
  union {
    float as_value;
    uint32_t as_bits;
  } fp32;
  fp32.as_value = f;
  return fp32.as_bits;
}

static inline float ref_ggml_compute_fp16_to_fp32(ref_ggml_half h) {
  const uint32_t w = (uint32_t)h << 16;
  const uint32_t sign = w & UINT32_C(0x80000000);
  const uint32_t two_w = w + w;

  const uint32_t exp_offset = UINT32_C(0xE0) << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized_value = ref_fp32_from_bits((two_w >> 4) + exp_offset) * exp_scale;

  const uint32_t magic_mask = UINT32_C(126) << 23;
  const float magic_bias = 0.5f;
  const float denormalized_value = ref_fp32_from_bits((two_w >> 17) | magic_mask) - magic_bias;

  const uint32_t denormalized_cutoff = UINT32_C(1) << 27;
  const uint32_t result = sign | (two_w < denormalized_cutoff ? ref_fp32_to_bits(denormalized_value)
                                                               : ref_fp32_to_bits(normalized_value));
  return ref_fp32_from_bits(result);
}

static inline ref_ggml_half ref_ggml_compute_fp32_to_fp16(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (fabsf(f) * scale_to_inf) * scale_to_zero;

  const uint32_t w = ref_fp32_to_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & UINT32_C(0x80000000);
  uint32_t bias = shl1_w & UINT32_C(0xFF000000);
  if (bias < UINT32_C(0x71000000)) {
    bias = UINT32_C(0x71000000);
  }

  base = ref_fp32_from_bits((bias >> 1) + UINT32_C(0x07800000)) + base;
  const uint32_t bits = ref_fp32_to_bits(base);
  const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
  const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return (ref_ggml_half)((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT16_C(0x7E00) : nonsign));
}

#define REF_GGML_FP16_TO_FP32(x) ref_ggml_compute_fp16_to_fp32(x)
#define REF_GGML_FP32_TO_FP16(x) ref_ggml_compute_fp32_to_fp16(x)

/* ---- ggml-quants.c */

/* reference implementation for deterministic creation of model files */
static inline void ref_quantize_row_q4_0_ref(const float *x, ref_block_q4_0 *y, int64_t k) {
  static const int qk = REF_QK4_0;

  assert(k % qk == 0);

  const int nb = k / qk;

  for (int i = 0; i < nb; i++) {
    float amax = 0.0f; /* absolute max */
    float max = 0.0f;

    for (int j = 0; j < qk; j++) {
      const float v = x[i * qk + j];
      if (amax < fabsf(v)) {
        amax = fabsf(v);
        max = v;
      }
    }

    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;

    y[i].d = REF_GGML_FP32_TO_FP16(d);

    for (int j = 0; j < qk / 2; ++j) {
      const float x0 = x[i * qk + 0 + j] * id;
      const float x1 = x[i * qk + qk / 2 + j] * id;

      const uint8_t xi0 = REF_MIN(15, (int8_t)(x0 + 8.5f));
      const uint8_t xi1 = REF_MIN(15, (int8_t)(x1 + 8.5f));

      y[i].qs[j] = xi0;
      y[i].qs[j] |= xi1 << 4;
    }
  }
}

/* reference implementation for deterministic creation of model files */
static inline void ref_quantize_row_q8_0_ref(const float *x, ref_block_q8_0 *y, int64_t k) {
  assert(k % REF_QK8_0 == 0);
  const int nb = k / REF_QK8_0;

  for (int i = 0; i < nb; i++) {
    float amax = 0.0f; /* absolute max */

    for (int j = 0; j < REF_QK8_0; j++) {
      const float v = x[i * REF_QK8_0 + j];
      amax = REF_MAX(amax, fabsf(v));
    }

    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;

    y[i].d = REF_GGML_FP32_TO_FP16(d);

    for (int j = 0; j < REF_QK8_0; ++j) {
      const float x0 = x[i * REF_QK8_0 + j] * id;

      y[i].qs[j] = roundf(x0);
    }
  }
}

static inline void ref_dequantize_row_q4_0(const ref_block_q4_0 *x, float *y, int64_t k) {
  static const int qk = REF_QK4_0;

  assert(k % qk == 0);

  const int nb = k / qk;

  for (int i = 0; i < nb; i++) {
    const float d = REF_GGML_FP16_TO_FP32(x[i].d);

    for (int j = 0; j < qk / 2; ++j) {
      const int x0 = (x[i].qs[j] & 0x0F) - 8;
      const int x1 = (x[i].qs[j] >> 4) - 8;

      y[i * qk + j + 0] = x0 * d;
      y[i * qk + j + qk / 2] = x1 * d;
    }
  }
}

static inline void ref_dequantize_row_q8_0(const ref_block_q8_0 *x, float *y, int64_t k) {
  static const int qk = REF_QK8_0;

  assert(k % qk == 0);

  const int nb = k / qk;

  for (int i = 0; i < nb; i++) {
    const float d = REF_GGML_FP16_TO_FP32(x[i].d);

    for (int j = 0; j < qk; ++j) {
      y[i * qk + j] = x[i].qs[j] * d;
    }
  }
}

static inline void ref_get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

static inline void ref_dequantize_row_q4_K(const ref_block_q4_K *x, float *y, int64_t k) {
  assert(k % REF_QK_K == 0);
  const int nb = k / REF_QK_K;

  for (int i = 0; i < nb; i++) {
    const uint8_t *q = x[i].qs;

    const float d = REF_GGML_FP16_TO_FP32(x[i].d);
    const float min = REF_GGML_FP16_TO_FP32(x[i].dmin);

    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < REF_QK_K; j += 64) {
      ref_get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      ref_get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

static inline void ref_dequantize_row_q6_K(const ref_block_q6_K *x, float *y, int64_t k) {
  assert(k % REF_QK_K == 0);
  const int64_t nb = k / REF_QK_K;

  for (int i = 0; i < nb; i++) {
    const float d = REF_GGML_FP16_TO_FP32(x[i].d);

    const uint8_t *ql = x[i].ql;
    const uint8_t *qh = x[i].qh;
    const int8_t *sc = x[i].scales;

    for (int n = 0; n < REF_QK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        int is = l / 16;
        const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

/* ---- ggml's other block types (ggml-common.h) and their dequantize_row_*
 * (ggml-quants.c), transcribed the same way. The grids and value tables are
 * cl/lib/iqtables.cl's (ggml's GGML_TABLE_BEGIN text, shared with the library
 * as data); ref_check_tables pins each to the FNV-1a hash of ggml's own table. */

#define REF_QK4_1 32
typedef struct {
  ref_ggml_half d; /* delta */
  ref_ggml_half m; /* min */
  uint8_t qs[REF_QK4_1 / 2];
} ref_block_q4_1;
_Static_assert(sizeof(ref_block_q4_1) == 2 * sizeof(ref_ggml_half) + REF_QK4_1 / 2, "wrong q4_1 block size/padding");

#define REF_QK5_0 32
typedef struct {
  ref_ggml_half d;
  uint8_t qh[4]; /* 5-th bit of quants */
  uint8_t qs[REF_QK5_0 / 2];
} ref_block_q5_0;
_Static_assert(sizeof(ref_block_q5_0) == sizeof(ref_ggml_half) + sizeof(uint32_t) + REF_QK5_0 / 2,
               "wrong q5_0 block size/padding");

#define REF_QK5_1 32
typedef struct {
  ref_ggml_half d;
  ref_ggml_half m;
  uint8_t qh[4];
  uint8_t qs[REF_QK5_1 / 2];
} ref_block_q5_1;
_Static_assert(sizeof(ref_block_q5_1) == 2 * sizeof(ref_ggml_half) + sizeof(uint32_t) + REF_QK5_1 / 2,
               "wrong q5_1 block size/padding");

typedef struct {
  uint8_t scales[REF_QK_K / 16]; /* scales and mins, quantized with 4 bits */
  uint8_t qs[REF_QK_K / 4];      /* quants */
  ref_ggml_half d;               /* super-block scale for quantized scales */
  ref_ggml_half dmin;            /* super-block scale for quantized mins */
} ref_block_q2_K;
_Static_assert(sizeof(ref_block_q2_K) == 2 * sizeof(ref_ggml_half) + REF_QK_K / 16 + REF_QK_K / 4,
               "wrong q2_K block size/padding");

typedef struct {
  uint8_t hmask[REF_QK_K / 8]; /* quants - high bit */
  uint8_t qs[REF_QK_K / 4];    /* quants - low 2 bits */
  uint8_t scales[12];          /* scales, quantized with 6 bits */
  ref_ggml_half d;             /* super-block scale */
} ref_block_q3_K;
_Static_assert(sizeof(ref_block_q3_K) == sizeof(ref_ggml_half) + REF_QK_K / 4 + REF_QK_K / 8 + 12,
               "wrong q3_K block size/padding");

typedef struct {
  ref_ggml_half d;
  ref_ggml_half dmin;
  uint8_t scales[REF_K_SCALE_SIZE];
  uint8_t qh[REF_QK_K / 8];
  uint8_t qs[REF_QK_K / 2];
} ref_block_q5_K;
_Static_assert(sizeof(ref_block_q5_K) == 2 * sizeof(ref_ggml_half) + REF_K_SCALE_SIZE + REF_QK_K / 2 + REF_QK_K / 8,
               "wrong q5_K block size/padding");

typedef struct {
  ref_ggml_half d;
  uint16_t qs[REF_QK_K / 8];
} ref_block_iq2_xxs;
_Static_assert(sizeof(ref_block_iq2_xxs) == sizeof(ref_ggml_half) + REF_QK_K / 8 * sizeof(uint16_t),
               "wrong iq2_xxs block size/padding");

typedef struct {
  ref_ggml_half d;
  uint16_t qs[REF_QK_K / 8];
  uint8_t scales[REF_QK_K / 32];
} ref_block_iq2_xs;
_Static_assert(sizeof(ref_block_iq2_xs) == sizeof(ref_ggml_half) + REF_QK_K / 8 * sizeof(uint16_t) + REF_QK_K / 32,
               "wrong iq2_xs block size/padding");

typedef struct {
  ref_ggml_half d;
  uint8_t qs[REF_QK_K / 4];
  uint8_t qh[REF_QK_K / 32];
  uint8_t scales[REF_QK_K / 32];
} ref_block_iq2_s;
_Static_assert(sizeof(ref_block_iq2_s) == sizeof(ref_ggml_half) + REF_QK_K / 4 + REF_QK_K / 16,
               "wrong iq2_s block size/padding");

typedef struct {
  ref_ggml_half d;
  uint8_t qs[3 * REF_QK_K / 8];
} ref_block_iq3_xxs;
_Static_assert(sizeof(ref_block_iq3_xxs) == sizeof(ref_ggml_half) + 3 * (REF_QK_K / 8),
               "wrong iq3_xxs block size/padding");

#define REF_IQ3S_N_SCALE REF_QK_K / 64
typedef struct {
  ref_ggml_half d;
  uint8_t qs[REF_QK_K / 4];
  uint8_t qh[REF_QK_K / 32];
  uint8_t signs[REF_QK_K / 8];
  uint8_t scales[REF_IQ3S_N_SCALE];
} ref_block_iq3_s;
_Static_assert(sizeof(ref_block_iq3_s) == sizeof(ref_ggml_half) + 13 * (REF_QK_K / 32) + REF_IQ3S_N_SCALE,
               "wrong iq3_s block size/padding");

typedef struct {
  ref_ggml_half d;
  uint8_t qs[REF_QK_K / 8];
  uint16_t qh[REF_QK_K / 32];
} ref_block_iq1_s;
_Static_assert(sizeof(ref_block_iq1_s) == sizeof(ref_ggml_half) + REF_QK_K / 8 + REF_QK_K / 16,
               "wrong iq1_s block size/padding");

typedef struct {
  uint8_t qs[REF_QK_K / 8];      /* grid index, low 8 bits */
  uint8_t qh[REF_QK_K / 16];     /* grid index, high 3 bits + grid shift bit (for two groups of 8) */
  uint8_t scales[REF_QK_K / 32]; /* 3-bit block scales (4-bit if QK_K == 64) */
} ref_block_iq1_m;
_Static_assert(sizeof(ref_block_iq1_m) == REF_QK_K / 8 + REF_QK_K / 16 + REF_QK_K / 32,
               "wrong iq1_m block size/padding");

typedef union {
  ref_ggml_half f16;
  uint16_t u16;
} ref_iq1m_scale_t;

#define REF_QK4_NL 32
typedef struct {
  ref_ggml_half d;
  uint8_t qs[REF_QK4_NL / 2];
} ref_block_iq4_nl;
_Static_assert(sizeof(ref_block_iq4_nl) == sizeof(ref_ggml_half) + REF_QK4_NL / 2, "wrong iq4_nl block size/padding");

typedef struct {
  ref_ggml_half d;
  uint16_t scales_h;
  uint8_t scales_l[REF_QK_K / 64];
  uint8_t qs[REF_QK_K / 2];
} ref_block_iq4_xs;
_Static_assert(sizeof(ref_block_iq4_xs) == sizeof(ref_ggml_half) + sizeof(uint16_t) + REF_QK_K / 64 + REF_QK_K / 2,
               "wrong iq4_xs block size/padding");

#define REF_QK_MXFP4 32
typedef struct {
  uint8_t e; /* E8M0 */
  uint8_t qs[REF_QK_MXFP4 / 2];
} ref_block_mxfp4;
_Static_assert(sizeof(ref_block_mxfp4) == sizeof(uint8_t) + REF_QK_MXFP4 / 2, "wrong mxfp4 block size/padding");

/* 1.6875 bpw */
typedef struct {
  uint8_t qs[(REF_QK_K - 4 * REF_QK_K / 64) / 5]; /* 5 elements per byte (3^5 = 243 < 256) */
  uint8_t qh[REF_QK_K / 64];                      /* 4 elements per byte */
  ref_ggml_half d;
} ref_block_tq1_0;
_Static_assert(sizeof(ref_block_tq1_0) == sizeof(ref_ggml_half) + REF_QK_K / 64 + (REF_QK_K - 4 * REF_QK_K / 64) / 5,
               "wrong tq1_0 block size/padding");

/* 2.0625 bpw */
typedef struct {
  uint8_t qs[REF_QK_K / 4]; /* 2 bits per element */
  ref_ggml_half d;
} ref_block_tq2_0;
_Static_assert(sizeof(ref_block_tq2_0) == sizeof(ref_ggml_half) + REF_QK_K / 4, "wrong tq2_0 block size/padding");

/* ---- ggml-impl.h: ggml_e8m0_to_fp32_half (GGML_E8M0_TO_FP32_HALF) */

/* Equal to ggml_e8m0_to_fp32/2
 * Useful with MXFP4 quantization since the E0M2 values are doubled */
static inline float ref_ggml_e8m0_to_fp32_half(uint8_t x) {
  uint32_t bits;

  /* For x < 2: use precomputed denormal patterns */
  if (x < 2) {
    /* 0x00200000 = 2^(-128), 0x00400000 = 2^(-127) */
    bits = 0x00200000 << x;
  }
  /* For x >= 2: normalized exponent adjustment */
  else {
    /* 0.5 * 2^(x-127) = 2^(x-128) = normalized with exponent (x-1) */
    bits = (uint32_t)(x - 1) << 23;
  }
  /* Note: NaNs are not handled here */

  float result;
  memcpy(&result, &bits, sizeof(float));
  return result;
}
#define REF_GGML_E8M0_TO_FP32_HALF(x) ref_ggml_e8m0_to_fp32_half(x)

/* the tables, as data (names ce_ + ggml's) */
#define CE_TABLES_FOR(t) 1
#include "../cl/lib/iqtables.cl"
#undef CE_TABLES_FOR

static const uint8_t ref_kmask_iq2xs[8] = {1, 2, 4, 8, 16, 32, 64, 128};

/* FNV-1a of a table's values as little-endian bytes of its element type */
static inline uint64_t ref_table_hash(const void *t, size_t n, size_t size) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    uint64_t v = 0;
    memcpy(&v, (const uint8_t *)t + i * size, size); /* little-endian hosts (x86-64, arm64) */
    for (size_t k = 0; k < size; k++) {
      h ^= (uint8_t)(v >> (8 * k));
      h *= 0x100000001b3ull;
    }
  }
  return h;
}
/* The number of tables that differ from ggml's (d99724f2's src/ggml-common.h, hashed apart). */
static inline int ref_check_tables(void) {
  int bad = 0;
  bad += ref_table_hash(ce_ksigns_iq2xs, 128, 1) != 0xf19ba8f8c3292ba5ull;
  bad += ref_table_hash(ce_kvalues_iq4nl, 16, 1) != 0x055d06d2d8fa0f75ull;
  bad += ref_table_hash(ce_iq2xxs_grid, 256, 8) != 0xbb4ee025b5ac6e8eull;
  bad += ref_table_hash(ce_iq2xs_grid, 512, 8) != 0xc9b1ee61e79909bdull;
  bad += ref_table_hash(ce_iq2s_grid, 1024, 8) != 0x123edd38a3b62b90ull;
  bad += ref_table_hash(ce_iq3xxs_grid, 256, 4) != 0xdfa5dc83d6a155d5ull;
  bad += ref_table_hash(ce_iq3s_grid, 512, 4) != 0xfa37020c25b44829ull;
  bad += ref_table_hash(ce_iq1s_grid, 2048, 8) != 0x6703ed863501ae2eull;
  bad += ref_table_hash(ce_kvalues_fp4, 16, 1) != 0x3f0e3c08af1e5eb5ull;
  return bad;
}

static inline void ref_dequantize_row_q4_1(const ref_block_q4_1 *x, float *y, int64_t k) {
  static const int qk = REF_QK4_1;

  assert(k % qk == 0);

  const int nb = k / qk;

  for (int i = 0; i < nb; i++) {
    const float d = REF_GGML_FP16_TO_FP32(x[i].d);
    const float m = REF_GGML_FP16_TO_FP32(x[i].m);

    for (int j = 0; j < qk / 2; ++j) {
      const int x0 = (x[i].qs[j] & 0x0F);
      const int x1 = (x[i].qs[j] >> 4);

      y[i * qk + j + 0] = x0 * d + m;
      y[i * qk + j + qk / 2] = x1 * d + m;
    }
  }
}

static inline void ref_dequantize_row_q5_0(const ref_block_q5_0 *x, float *y, int64_t k) {
  static const int qk = REF_QK5_0;

  assert(k % qk == 0);

  const int nb = k / qk;

  for (int i = 0; i < nb; i++) {
    const float d = REF_GGML_FP16_TO_FP32(x[i].d);

    uint32_t qh;
    memcpy(&qh, x[i].qh, sizeof(qh));

    for (int j = 0; j < qk / 2; ++j) {
      const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
      const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;

      const int32_t x0 = ((x[i].qs[j] & 0x0F) | xh_0) - 16;
      const int32_t x1 = ((x[i].qs[j] >> 4) | xh_1) - 16;

      y[i * qk + j + 0] = x0 * d;
      y[i * qk + j + qk / 2] = x1 * d;
    }
  }
}

static inline void ref_dequantize_row_q5_1(const ref_block_q5_1 *x, float *y, int64_t k) {
  static const int qk = REF_QK5_1;

  assert(k % qk == 0);

  const int nb = k / qk;

  for (int i = 0; i < nb; i++) {
    const float d = REF_GGML_FP16_TO_FP32(x[i].d);
    const float m = REF_GGML_FP16_TO_FP32(x[i].m);

    uint32_t qh;
    memcpy(&qh, x[i].qh, sizeof(qh));

    for (int j = 0; j < qk / 2; ++j) {
      const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
      const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;

      const int x0 = (x[i].qs[j] & 0x0F) | xh_0;
      const int x1 = (x[i].qs[j] >> 4) | xh_1;

      y[i * qk + j + 0] = x0 * d + m;
      y[i * qk + j + qk / 2] = x1 * d + m;
    }
  }
}

static inline void ref_dequantize_row_q2_K(const ref_block_q2_K *x, float *y, int64_t k) {
  assert(k % REF_QK_K == 0);
  const int nb = k / REF_QK_K;

  for (int i = 0; i < nb; i++) {
    const float d = REF_GGML_FP16_TO_FP32(x[i].d);
    const float min = REF_GGML_FP16_TO_FP32(x[i].dmin);

    const uint8_t *q = x[i].qs;

    int is = 0;
    float dl, ml;
    for (int n = 0; n < REF_QK_K; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        uint8_t sc = x[i].scales[is++];
        dl = d * (sc & 0xF);
        ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l] >> shift) & 3)) - ml;

        sc = x[i].scales[is++];
        dl = d * (sc & 0xF);
        ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3)) - ml;

        shift += 2;
      }
      q += 32;
    }
  }
}

static inline void ref_dequantize_row_q3_K(const ref_block_q3_K *x, float *y, int64_t k) {
  assert(k % REF_QK_K == 0);
  const int nb = k / REF_QK_K;

  const uint32_t kmask1 = 0x03030303;
  const uint32_t kmask2 = 0x0f0f0f0f;

  uint32_t aux[4];
  const int8_t *scales = (const int8_t *)aux;

  for (int i = 0; i < nb; i++) {
    const float d_all = REF_GGML_FP16_TO_FP32(x[i].d);

    const uint8_t *q = x[i].qs;
    const uint8_t *hm = x[i].hmask;
    uint8_t m = 1;

    memcpy(aux, x[i].scales, 12);
    uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);

    int is = 0;
    float dl;
    for (int n = 0; n < REF_QK_K; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        dl = d_all * (scales[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * ((int8_t)((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
        }

        dl = d_all * (scales[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
        }

        shift += 2;
        m <<= 1;
      }
      q += 32;
    }
  }
}

static inline void ref_dequantize_row_q5_K(const ref_block_q5_K *x, float *y, int64_t k) {
  assert(k % REF_QK_K == 0);
  const int64_t nb = k / REF_QK_K;

  for (int i = 0; i < nb; i++) {
    const uint8_t *ql = x[i].qs;
    const uint8_t *qh = x[i].qh;

    const float d = REF_GGML_FP16_TO_FP32(x[i].d);
    const float min = REF_GGML_FP16_TO_FP32(x[i].dmin);

    int is = 0;
    uint8_t sc, m;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < REF_QK_K; j += 64) {
      ref_get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      ref_get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}

static inline void ref_dequantize_row_iq2_xxs(const ref_block_iq2_xxs *x, float *y, int64_t k) {
  assert(k % REF_QK_K == 0);
  const int64_t nb = k / REF_QK_K;

  uint32_t aux32[2];
  const uint8_t *aux8 = (const uint8_t *)aux32;

  for (int i = 0; i < nb; i++) {
    const float d = REF_GGML_FP16_TO_FP32(x[i].d);

    for (int ib32 = 0; ib32 < REF_QK_K / 32; ++ib32) {
      memcpy(aux32, x[i].qs + 4 * ib32, 2 * sizeof(uint32_t));
      const float db = d * (0.5f + (aux32[1] >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        const uint8_t *grid = (const uint8_t *)(ce_iq2xxs_grid + aux8[l]);
        const uint8_t signs = ce_ksigns_iq2xs[(aux32[1] >> 7 * l) & 127];
        for (int j = 0; j < 8; ++j) {
          y[j] = db * grid[j] * (signs & ref_kmask_iq2xs[j] ? -1.f : 1.f);
        }
        y += 8;
      }
    }
  }
}

static inline void ref_dequantize_row_iq2_xs(const ref_block_iq2_xs *x, float *y, int64_t k) {
  assert(k % REF_QK_K == 0);
  const int64_t nb = k / REF_QK_K;

  float db[2];

  for (int i = 0; i < nb; i++) {
    const float d = REF_GGML_FP16_TO_FP32(x[i].d);

    for (int ib32 = 0; ib32 < REF_QK_K / 32; ++ib32) {
      db[0] = d * (0.5f + (x[i].scales[ib32] & 0xf)) * 0.25f;
      db[1] = d * (0.5f + (x[i].scales[ib32] >> 4)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        const uint8_t *grid = (const uint8_t *)(ce_iq2xs_grid + (x[i].qs[4 * ib32 + l] & 511));
        const uint8_t signs = ce_ksigns_iq2xs[x[i].qs[4 * ib32 + l] >> 9];
        for (int j = 0; j < 8; ++j) {
          y[j] = db[l / 2] * grid[j] * (signs & ref_kmask_iq2xs[j] ? -1.f : 1.f);
        }
        y += 8;
      }
    }
  }
}

static inline void ref_dequantize_row_iq2_s(const ref_block_iq2_s *x, float *y, int64_t k) {
  assert(k % REF_QK_K == 0);
  const int64_t nb = k / REF_QK_K;

  float db[2];

  for (int i = 0; i < nb; i++) {
    const float d = REF_GGML_FP16_TO_FP32(x[i].d);
    const uint8_t *qs = x[i].qs;
    const uint8_t *qh = x[i].qh;
    const uint8_t *signs = qs + REF_QK_K / 8;

    for (int ib32 = 0; ib32 < REF_QK_K / 32; ++ib32) {
      db[0] = d * (0.5f + (x[i].scales[ib32] & 0xf)) * 0.25f;
      db[1] = d * (0.5f + (x[i].scales[ib32] >> 4)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        const float dl = db[l / 2];
        const uint8_t *grid = (const uint8_t *)(ce_iq2s_grid + (qs[l] | (qh[ib32] << (8 - 2 * l) & 0x300)));
        for (int j = 0; j < 8; ++j) {
          y[j] = dl * grid[j] * (signs[l] & ref_kmask_iq2xs[j] ? -1.f : 1.f);
        }
        y += 8;
      }
      qs += 4;
      signs += 4;
    }
  }
}

static inline void ref_dequantize_row_iq3_xxs(const ref_block_iq3_xxs *x, float *y, int64_t k) {
  assert(k % REF_QK_K == 0);
  const int64_t nb = k / REF_QK_K;

  uint32_t aux32;

  for (int i = 0; i < nb; i++) {
    const float d = REF_GGML_FP16_TO_FP32(x[i].d);
    const uint8_t *qs = x[i].qs;
    const uint8_t *scales_and_signs = qs + REF_QK_K / 4;

    for (int ib32 = 0; ib32 < REF_QK_K / 32; ++ib32) {
      memcpy(&aux32, scales_and_signs + 4 * ib32, sizeof(uint32_t));
      const float db = d * (0.5f + (aux32 >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l) {
        const uint8_t signs = ce_ksigns_iq2xs[(aux32 >> 7 * l) & 127];
        const uint8_t *grid1 = (const uint8_t *)(ce_iq3xxs_grid + qs[2 * l + 0]);
        const uint8_t *grid2 = (const uint8_t *)(ce_iq3xxs_grid + qs[2 * l + 1]);
        for (int j = 0; j < 4; ++j) {
          y[j + 0] = db * grid1[j] * (signs & ref_kmask_iq2xs[j + 0] ? -1.f : 1.f);
          y[j + 4] = db * grid2[j] * (signs & ref_kmask_iq2xs[j + 4] ? -1.f : 1.f);
        }
        y += 8;
      }
      qs += 8;
    }
  }
}

static inline void ref_dequantize_row_iq3_s(const ref_block_iq3_s *x, float *y, int64_t k) {
  assert(k % REF_QK_K == 0);
  const int64_t nb = k / REF_QK_K;

  for (int i = 0; i < nb; i++) {
    const float d = REF_GGML_FP16_TO_FP32(x[i].d);
    const uint8_t *qs = x[i].qs;
    const uint8_t *qh = x[i].qh;
    const uint8_t *signs = x[i].signs;

    for (int ib32 = 0; ib32 < REF_QK_K / 32; ib32 += 2) {
      const float db1 = d * (1 + 2 * (x[i].scales[ib32 / 2] & 0xf));
      const float db2 = d * (1 + 2 * (x[i].scales[ib32 / 2] >> 4));
      for (int l = 0; l < 4; ++l) {
        const uint8_t *grid1 = (const uint8_t *)(ce_iq3s_grid + (qs[2 * l + 0] | ((qh[0] << (8 - 2 * l)) & 256)));
        const uint8_t *grid2 = (const uint8_t *)(ce_iq3s_grid + (qs[2 * l + 1] | ((qh[0] << (7 - 2 * l)) & 256)));
        for (int j = 0; j < 4; ++j) {
          y[j + 0] = db1 * grid1[j] * (signs[l] & ref_kmask_iq2xs[j + 0] ? -1.f : 1.f);
          y[j + 4] = db1 * grid2[j] * (signs[l] & ref_kmask_iq2xs[j + 4] ? -1.f : 1.f);
        }
        y += 8;
      }
      qs += 8;
      signs += 4;
      for (int l = 0; l < 4; ++l) {
        const uint8_t *grid1 = (const uint8_t *)(ce_iq3s_grid + (qs[2 * l + 0] | ((qh[1] << (8 - 2 * l)) & 256)));
        const uint8_t *grid2 = (const uint8_t *)(ce_iq3s_grid + (qs[2 * l + 1] | ((qh[1] << (7 - 2 * l)) & 256)));
        for (int j = 0; j < 4; ++j) {
          y[j + 0] = db2 * grid1[j] * (signs[l] & ref_kmask_iq2xs[j + 0] ? -1.f : 1.f);
          y[j + 4] = db2 * grid2[j] * (signs[l] & ref_kmask_iq2xs[j + 4] ? -1.f : 1.f);
        }
        y += 8;
      }
      qh += 2;
      qs += 8;
      signs += 4;
    }
  }
}

static inline void ref_dequantize_row_iq1_s(const ref_block_iq1_s *x, float *y, int64_t k) {
  assert(k % REF_QK_K == 0);
  const int64_t nb = k / REF_QK_K;

  for (int i = 0; i < nb; i++) {
    const float d = REF_GGML_FP16_TO_FP32(x[i].d);
    const uint8_t *qs = x[i].qs;
    const uint16_t *qh = x[i].qh;

    for (int ib = 0; ib < REF_QK_K / 32; ++ib) {
      const float dl = d * (2 * ((qh[ib] >> 12) & 7) + 1);
      const float delta = qh[ib] & 0x8000 ? -IQ1S_DELTA : IQ1S_DELTA;
      for (int l = 0; l < 4; ++l) {
        const int8_t *grid = (const int8_t *)(ce_iq1s_grid + (qs[l] | (((qh[ib] >> 3 * l) & 7) << 8)));
        for (int j = 0; j < 8; ++j) {
          y[j] = dl * (grid[j] + delta);
        }
        y += 8;
      }
      qs += 4;
    }
  }
}

static inline void ref_dequantize_row_iq1_m(const ref_block_iq1_m *x, float *y, int64_t k) {
  assert(k % REF_QK_K == 0);
  const int64_t nb = k / REF_QK_K;

  float delta[4];
  uint16_t idx[4];

  ref_iq1m_scale_t scale;

  for (int i = 0; i < nb; i++) {
    const uint16_t *sc = (const uint16_t *)x[i].scales;
    scale.u16 = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
    const float d = REF_GGML_FP16_TO_FP32(scale.f16);

    const uint8_t *qs = x[i].qs;
    const uint8_t *qh = x[i].qh;

    for (int ib = 0; ib < REF_QK_K / 32; ++ib) {
      const float dl1 = d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 0)) & 0x7) + 1);
      const float dl2 = d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 0x7) + 1);

      idx[0] = qs[0] | ((qh[0] << 8) & 0x700);
      idx[1] = qs[1] | ((qh[0] << 4) & 0x700);
      idx[2] = qs[2] | ((qh[1] << 8) & 0x700);
      idx[3] = qs[3] | ((qh[1] << 4) & 0x700);
      delta[0] = qh[0] & 0x08 ? -IQ1S_DELTA : IQ1S_DELTA;
      delta[1] = qh[0] & 0x80 ? -IQ1S_DELTA : IQ1S_DELTA;
      delta[2] = qh[1] & 0x08 ? -IQ1S_DELTA : IQ1S_DELTA;
      delta[3] = qh[1] & 0x80 ? -IQ1S_DELTA : IQ1S_DELTA;
      for (int l = 0; l < 2; ++l) {
        const int8_t *grid = (const int8_t *)(ce_iq1s_grid + idx[l]);
        for (int j = 0; j < 8; ++j) {
          y[j] = dl1 * (grid[j] + delta[l]);
        }
        y += 8;
      }
      for (int l = 2; l < 4; ++l) {
        const int8_t *grid = (const int8_t *)(ce_iq1s_grid + idx[l]);
        for (int j = 0; j < 8; ++j) {
          y[j] = dl2 * (grid[j] + delta[l]);
        }
        y += 8;
      }
      qs += 4;
      qh += 2;
    }
  }
}

static inline void ref_dequantize_row_iq4_nl(const ref_block_iq4_nl *x, float *y, int64_t k) {
  assert(k % REF_QK4_NL == 0);
  const int64_t nb = k / REF_QK4_NL;

  for (int i = 0; i < nb; i++) {
    const uint8_t *qs = x[i].qs;

    const float d = REF_GGML_FP16_TO_FP32(x[i].d);
    for (int j = 0; j < REF_QK4_NL / 2; ++j) {
      y[j + 0] = d * ce_kvalues_iq4nl[qs[j] & 0xf];
      y[j + REF_QK4_NL / 2] = d * ce_kvalues_iq4nl[qs[j] >> 4];
    }
    y += REF_QK4_NL;
    qs += REF_QK4_NL / 2;
  }
}

static inline void ref_dequantize_row_iq4_xs(const ref_block_iq4_xs *x, float *y, int64_t k) {
  assert(k % REF_QK_K == 0);
  const int64_t nb = k / REF_QK_K;

  for (int i = 0; i < nb; i++) {
    const uint8_t *qs = x[i].qs;

    const float d = REF_GGML_FP16_TO_FP32(x[i].d);

    for (int ib = 0; ib < REF_QK_K / 32; ++ib) {
      const int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((x[i].scales_h >> 2 * ib) & 3) << 4);
      const float dl = d * (ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j + 0] = dl * ce_kvalues_iq4nl[qs[j] & 0xf];
        y[j + 16] = dl * ce_kvalues_iq4nl[qs[j] >> 4];
      }
      y += 32;
      qs += 16;
    }
  }
}

static inline void ref_dequantize_row_mxfp4(const ref_block_mxfp4 *x, float *y, int64_t k) {
  static const int qk = REF_QK_MXFP4;

  assert(k % qk == 0);

  const int nb = k / qk;

  for (int i = 0; i < nb; i++) {
    const float d = REF_GGML_E8M0_TO_FP32_HALF(x[i].e);

    for (int j = 0; j < qk / 2; ++j) {
      const int8_t x0 = ce_kvalues_fp4[x[i].qs[j] & 0x0F]; /* kvalues_mxfp4 */
      const int8_t x1 = ce_kvalues_fp4[x[i].qs[j] >> 4];

      y[i * qk + j + 0] = x0 * d;
      y[i * qk + j + qk / 2] = x1 * d;
    }
  }
}

static inline void ref_dequantize_row_tq1_0(const ref_block_tq1_0 *x, float *y, int64_t k) {
  assert(k % REF_QK_K == 0);
  const int64_t nb = k / REF_QK_K;

  const uint8_t pow3[6] = {1, 3, 9, 27, 81, 243};

  for (int64_t i = 0; i < nb; ++i) {

    const float d = REF_GGML_FP16_TO_FP32(x[i].d);

    for (size_t j = 0; j < sizeof(x->qs) - sizeof(x->qs) % 32; j += 32) {
      for (size_t n = 0; n < 5; ++n) {
        for (size_t m = 0; m < 32; ++m) {
          uint8_t q = x[i].qs[j + m] * pow3[n];
          int16_t xi = ((uint16_t)q * 3) >> 8;
          *y++ = (float)(xi - 1) * d;
        }
      }
    }
    for (size_t j = sizeof(x->qs) - sizeof(x->qs) % 32; j < sizeof(x->qs); j += 16) {
      for (size_t n = 0; n < 5; ++n) {
        for (size_t m = 0; m < 16; ++m) {
          uint8_t q = x[i].qs[j + m] * pow3[n];
          int16_t xi = ((uint16_t)q * 3) >> 8;
          *y++ = (float)(xi - 1) * d;
        }
      }
    }

    for (size_t n = 0; n < 4; ++n) {
      for (size_t j = 0; j < sizeof(x->qh); ++j) {
        uint8_t q = x[i].qh[j] * pow3[n];
        int16_t xi = ((uint16_t)q * 3) >> 8;
        *y++ = (float)(xi - 1) * d;
      }
    }
  }
}

static inline void ref_dequantize_row_tq2_0(const ref_block_tq2_0 *x, float *y, int64_t k) {
  assert(k % REF_QK_K == 0);
  const int64_t nb = k / REF_QK_K;

  for (int64_t i = 0; i < nb; ++i) {

    const float d = REF_GGML_FP16_TO_FP32(x[i].d);

    for (size_t j = 0; j < sizeof(x->qs); j += 32) {
      for (size_t l = 0; l < 4; ++l) {
        for (size_t m = 0; m < 32; ++m) {
          int8_t q = (x[i].qs[j + m] >> (l * 2)) & 3;
          *y++ = (float)(q - 1) * d;
        }
      }
    }
  }
}

/* ---- ggml.c's type_traits for the block types: ggml's type number, values
 * and bytes per block, and to_float (dequantize_row_*). */
typedef void (*ref_to_float_t)(const void *x, float *y, int64_t k);
typedef struct {
  const char *type_name;
  int ggml_type;
  int64_t blck_size;
  size_t type_size;
  ref_to_float_t to_float;
} ref_type_traits_t;

#define REF_TO_FLOAT(block)                                                           \
  static inline void ref_to_float_##block(const void *x, float *y, int64_t k) {       \
    ref_dequantize_row_##block((const ref_block_##block *)x, y, k);                    \
  }
REF_TO_FLOAT(q4_0) REF_TO_FLOAT(q4_1) REF_TO_FLOAT(q5_0) REF_TO_FLOAT(q5_1) REF_TO_FLOAT(q8_0)
REF_TO_FLOAT(q2_K) REF_TO_FLOAT(q3_K) REF_TO_FLOAT(q4_K) REF_TO_FLOAT(q5_K) REF_TO_FLOAT(q6_K)
REF_TO_FLOAT(iq2_xxs) REF_TO_FLOAT(iq2_xs) REF_TO_FLOAT(iq3_xxs) REF_TO_FLOAT(iq1_s) REF_TO_FLOAT(iq4_nl)
REF_TO_FLOAT(iq3_s) REF_TO_FLOAT(iq2_s) REF_TO_FLOAT(iq4_xs) REF_TO_FLOAT(iq1_m) REF_TO_FLOAT(tq1_0)
REF_TO_FLOAT(tq2_0) REF_TO_FLOAT(mxfp4)
#undef REF_TO_FLOAT
#define REF_TRAIT(name, num, blk, block) {#name, num, blk, sizeof(ref_block_##block), ref_to_float_##block}
static const ref_type_traits_t ref_type_traits[] = {
    REF_TRAIT(q4_0, 2, REF_QK4_0, q4_0),        REF_TRAIT(q4_1, 3, REF_QK4_1, q4_1),
    REF_TRAIT(q5_0, 6, REF_QK5_0, q5_0),        REF_TRAIT(q5_1, 7, REF_QK5_1, q5_1),
    REF_TRAIT(q8_0, 8, REF_QK8_0, q8_0),        REF_TRAIT(q2_K, 10, REF_QK_K, q2_K),
    REF_TRAIT(q3_K, 11, REF_QK_K, q3_K),        REF_TRAIT(q4_K, 12, REF_QK_K, q4_K),
    REF_TRAIT(q5_K, 13, REF_QK_K, q5_K),        REF_TRAIT(q6_K, 14, REF_QK_K, q6_K),
    REF_TRAIT(iq2_xxs, 16, REF_QK_K, iq2_xxs),  REF_TRAIT(iq2_xs, 17, REF_QK_K, iq2_xs),
    REF_TRAIT(iq3_xxs, 18, REF_QK_K, iq3_xxs),  REF_TRAIT(iq1_s, 19, REF_QK_K, iq1_s),
    REF_TRAIT(iq4_nl, 20, REF_QK4_NL, iq4_nl),  REF_TRAIT(iq3_s, 21, REF_QK_K, iq3_s),
    REF_TRAIT(iq2_s, 22, REF_QK_K, iq2_s),      REF_TRAIT(iq4_xs, 23, REF_QK_K, iq4_xs),
    REF_TRAIT(iq1_m, 29, REF_QK_K, iq1_m),      REF_TRAIT(tq1_0, 34, REF_QK_K, tq1_0),
    REF_TRAIT(tq2_0, 35, REF_QK_K, tq2_0),      REF_TRAIT(mxfp4, 39, REF_QK_MXFP4, mxfp4),
};
#undef REF_TRAIT

/* The traits of ggml type `t`, or NULL. */
static inline const ref_type_traits_t *ref_get_type_traits(int t) {
  for (size_t i = 0; i < sizeof ref_type_traits / sizeof ref_type_traits[0]; i++)
    if (ref_type_traits[i].ggml_type == t) return &ref_type_traits[i];
  return NULL;
}

#endif
