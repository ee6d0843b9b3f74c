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

#endif
