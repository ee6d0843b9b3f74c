/* quant.c: ggml's block formats on the host (see quant.h).
 *
 * Every float operation below is the one ggml's ggml-quants.c performs, in
 * the same order and in float32; the build compiles this file with
 * -ffp-contract=off (and the pragma below for compilers that honour it), so
 * no product is fused into the following sum. */
#include "quant.h"

#include <math.h>
#include <string.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define CE_QK_K 256 /* ggml's QK_K: the super-block of the K and IQ types */

/* ---------------------------------------------------------------- f16 */

static float f32_from_bits(uint32_t w) {
  float f;
  memcpy(&f, &w, sizeof f);
  return f;
}
static uint32_t f32_to_bits(float f) {
  uint32_t w;
  memcpy(&w, &f, sizeof w);
  return w;
}

/* ggml_compute_fp16_to_fp32 (after Maratyszcza's FP16), operation for operation. */
float ce_quant_f16_to_f32(uint16_t h) {
  const uint32_t w = (uint32_t)h << 16;
  const uint32_t sign = w & UINT32_C(0x80000000);
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = UINT32_C(0xE0) << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized_value = f32_from_bits((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = UINT32_C(126) << 23;
  const float magic_bias = 0.5f;
  const float denormalized_value = f32_from_bits((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denormalized_cutoff = UINT32_C(1) << 27;
  const uint32_t result =
      sign | (two_w < denormalized_cutoff ? f32_to_bits(denormalized_value) : f32_to_bits(normalized_value));
  return f32_from_bits(result);
}

/* ggml_compute_fp32_to_fp16, operation for operation. */
uint16_t ce_quant_f32_to_f16(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (fabsf(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = f32_to_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & UINT32_C(0x80000000);
  uint32_t bias = shl1_w & UINT32_C(0xFF000000);
  if (bias < UINT32_C(0x71000000)) bias = UINT32_C(0x71000000);
  base = f32_from_bits((bias >> 1) + UINT32_C(0x07800000)) + base;
  const uint32_t bits = f32_to_bits(base);
  const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
  const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return (uint16_t)((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT16_C(0x7E00) : nonsign));
}

static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static void put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)(v & 0xFF);
  p[1] = (uint8_t)(v >> 8);
}

/* ggml converts float to int8_t with a plain C conversion, which C leaves
 * undefined out of range; that happens only when a block's scale d is so small
 * (below 2^-128) that 1/d overflows to infinity, and then every dequantized
 * value is 0 whatever the quants. This gives what ggml's code computes on
 * x86-64 (cvttss2si: truncation, and INT32_MIN for NaN and out-of-range
 * values; then the low byte), so the bytes match there too. */
static int8_t to_int8(float x) {
  int32_t i = (x > -2147483904.0f && x < 2147483648.0f) ? (int32_t)x : INT32_MIN;
  return (int8_t)(uint8_t)((uint32_t)i & 0xFFu);
}

/* -------------------------------------------------------- quantization */

/* quantize_row_q8_0_ref */
int ce_quant_quantize_q8_0(const float *x, void *blocks, size_t n) {
  if (n % CE_Q8_0_VALUES != 0) return -1;
  uint8_t *y = (uint8_t *)blocks;
  for (size_t i = 0; i < n / CE_Q8_0_VALUES; i++, y += CE_Q8_0_BYTES) {
    const float *xb = x + i * CE_Q8_0_VALUES;
    float amax = 0.0f; /* MAX(amax, fabsf(v)) as ggml's macro: ((a) > (b) ? (a) : (b)) */
    for (int j = 0; j < CE_Q8_0_VALUES; j++) {
      const float v = fabsf(xb[j]);
      amax = amax > v ? amax : v;
    }
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    put_u16(y, ce_quant_f32_to_f16(d));
    for (int j = 0; j < CE_Q8_0_VALUES; j++) {
      const float x0 = xb[j] * id;
      y[2 + j] = (uint8_t)to_int8(roundf(x0));
    }
  }
  return 0;
}

/* quantize_row_q4_0_ref */
int ce_quant_quantize_q4_0(const float *x, void *blocks, size_t n) {
  if (n % CE_Q4_0_VALUES != 0) return -1;
  const int qk = CE_Q4_0_VALUES;
  uint8_t *y = (uint8_t *)blocks;
  for (size_t i = 0; i < n / CE_Q4_0_VALUES; i++, y += CE_Q4_0_BYTES) {
    const float *xb = x + i * CE_Q4_0_VALUES;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < qk; j++) {
      const float v = xb[j];
      if (amax < fabsf(v)) {
        amax = fabsf(v);
        max = v;
      }
    }
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    put_u16(y, ce_quant_f32_to_f16(d));
    for (int j = 0; j < qk / 2; ++j) {
      const float x0 = xb[0 + j] * id;
      const float x1 = xb[qk / 2 + j] * id;
      const int8_t t0 = to_int8(x0 + 8.5f), t1 = to_int8(x1 + 8.5f);
      const uint8_t xi0 = (uint8_t)(15 < t0 ? 15 : t0); /* MIN(15, (int8_t)(x0 + 8.5f)) */
      const uint8_t xi1 = (uint8_t)(15 < t1 ? 15 : t1);
      y[2 + j] = xi0;
      y[2 + j] |= (uint8_t)(xi1 << 4);
    }
  }
  return 0;
}

/* ------------------------------------------------------ dequantization */

/* dequantize_row_q8_0 */
static void dequantize_q8_0(const uint8_t *x, float *y, size_t nb) {
  for (size_t i = 0; i < nb; i++, x += CE_Q8_0_BYTES) {
    const float d = ce_quant_f16_to_f32(get_u16(x));
    for (int j = 0; j < CE_Q8_0_VALUES; ++j) y[i * CE_Q8_0_VALUES + j] = (float)(int8_t)x[2 + j] * d;
  }
}

/* dequantize_row_q4_0 */
static void dequantize_q4_0(const uint8_t *x, float *y, size_t nb) {
  const int qk = CE_Q4_0_VALUES;
  for (size_t i = 0; i < nb; i++, x += CE_Q4_0_BYTES) {
    const float d = ce_quant_f16_to_f32(get_u16(x));
    const uint8_t *qs = x + 2;
    for (int j = 0; j < qk / 2; ++j) {
      const int x0 = (qs[j] & 0x0F) - 8;
      const int x1 = (qs[j] >> 4) - 8;
      y[i * qk + j + 0] = (float)x0 * d;
      y[i * qk + j + qk / 2] = (float)x1 * d;
    }
  }
}

/* get_scale_min_k4 */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

/* dequantize_row_q4_K: bytes 0-1 d, 2-3 dmin, 4-15 scales, 16-143 qs */
static void dequantize_q4_k(const uint8_t *x, float *y, size_t nb) {
  for (size_t i = 0; i < nb; i++, x += CE_Q4_K_BYTES) {
    const uint8_t *scales = x + 4, *q = x + 16;
    const float d = ce_quant_f16_to_f32(get_u16(x));
    const float min = ce_quant_f16_to_f32(get_u16(x + 2));
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < CE_QK_K; j += 64) {
      scale_min_k4(is + 0, scales, &sc, &m);
      const float d1 = d * (float)sc;
      const float m1 = min * (float)m;
      scale_min_k4(is + 1, scales, &sc, &m);
      const float d2 = d * (float)sc;
      const float m2 = min * (float)m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (float)(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (float)(q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

/* dequantize_row_q6_K: bytes 0-127 ql, 128-191 qh, 192-207 scales, 208-209 d */
static void dequantize_q6_k(const uint8_t *x, float *y, size_t nb) {
  for (size_t i = 0; i < nb; i++, x += CE_Q6_K_BYTES) {
    const float d = ce_quant_f16_to_f32(get_u16(x + 208));
    const uint8_t *ql = x, *qh = x + 128;
    const int8_t *sc = (const int8_t *)(x + 192);
    for (int n = 0; n < CE_QK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        int is = l / 16;
        const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * (float)sc[is + 0] * (float)q1;
        y[l + 32] = d * (float)sc[is + 2] * (float)q2;
        y[l + 64] = d * (float)sc[is + 4] * (float)q3;
        y[l + 96] = d * (float)sc[is + 6] * (float)q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

int ce_quant_dequantize(int dtype, const void *blocks, float *y, size_t n) {
  const ce_dtype_facts *f = ce_dtype_facts_of(dtype);
  if (!f || f->block_values == 1 || n % f->block_values != 0) return -1;
  size_t qk = f->block_values;
  const uint8_t *x = (const uint8_t *)blocks;
  switch (dtype) {
  case CE_Q8_0: dequantize_q8_0(x, y, n / qk); break;
  case CE_Q4_0: dequantize_q4_0(x, y, n / qk); break;
  case CE_Q4_K: dequantize_q4_k(x, y, n / qk); break;
  default: dequantize_q6_k(x, y, n / qk); break;
  }
  return 0;
}
