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

/* dequantize_row_q4_K (five 0: bytes 0-1 d, 2-3 dmin, 4-15 scales, 16-143 qs)
 * and dequantize_row_q5_K (five 1: 4-15 scales, 16-47 qh, 48-175 qs): Q5_K's
 * values add 16 where their qh bit is set, Q4_K's nothing (the same float
 * operations on the same integers) */
static void dequantize_q45_k(const uint8_t *x, float *y, size_t nb, int five) {
  for (size_t i = 0; i < nb; i++, x += five ? CE_Q5_K_BYTES : CE_Q4_K_BYTES) {
    const uint8_t *scales = x + 4, *q = x + (five ? 48 : 16), *qh = x + 16;
    const float d = ce_quant_f16_to_f32(get_u16(x));
    const float min = ce_quant_f16_to_f32(get_u16(x + 2));
    int is = 0;
    uint8_t sc, m;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < CE_QK_K; j += 64) {
      scale_min_k4(is + 0, scales, &sc, &m);
      const float d1 = d * (float)sc;
      const float m1 = min * (float)m;
      scale_min_k4(is + 1, scales, &sc, &m);
      const float d2 = d * (float)sc;
      const float m2 = min * (float)m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (float)((q[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (float)((q[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
      q += 32;
      is += 2;
      u1 = (uint8_t)(u1 << 2);
      u2 = (uint8_t)(u2 << 2);
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

/* ---------------------------------------- the other legacy and K types */

static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static float get_half(const uint8_t *p) { return ce_quant_f16_to_f32(get_u16(p)); }

/* dequantize_row_q4_1: bytes 0-1 d, 2-3 m, 4-19 qs */
static void dequantize_q4_1(const uint8_t *x, float *y, size_t nb) {
  const int qk = CE_Q4_1_VALUES;
  for (size_t i = 0; i < nb; i++, x += CE_Q4_1_BYTES) {
    const float d = get_half(x), m = get_half(x + 2);
    const uint8_t *qs = x + 4;
    for (int j = 0; j < qk / 2; ++j) {
      const int x0 = (qs[j] & 0x0F);
      const int x1 = (qs[j] >> 4);
      y[i * qk + j + 0] = (float)x0 * d + m;
      y[i * qk + j + qk / 2] = (float)x1 * d + m;
    }
  }
}

/* dequantize_row_q5_0 (with_min 0) and dequantize_row_q5_1 (with_min 1):
 * Q5_0 bytes 0-1 d, 2-5 qh, 6-21 qs; Q5_1 bytes 0-1 d, 2-3 m, 4-7 qh, 8-23 qs */
static void dequantize_q5(const uint8_t *x, float *y, size_t nb, int with_min) {
  const int qk = CE_Q5_0_VALUES;
  const size_t bytes = with_min ? CE_Q5_1_BYTES : CE_Q5_0_BYTES;
  for (size_t i = 0; i < nb; i++, x += bytes) {
    const float d = get_half(x), m = with_min ? get_half(x + 2) : 0.0f;
    const uint32_t qh = get_u32(x + (with_min ? 4 : 2));
    const uint8_t *qs = x + (with_min ? 8 : 6);
    for (int j = 0; j < qk / 2; ++j) {
      const uint8_t xh_0 = (uint8_t)(((qh >> (j + 0)) << 4) & 0x10);
      const uint8_t xh_1 = (uint8_t)(((qh >> (j + 12))) & 0x10);
      if (with_min) {
        const int x0 = (qs[j] & 0x0F) | xh_0;
        const int x1 = (qs[j] >> 4) | xh_1;
        y[i * qk + j + 0] = (float)x0 * d + m;
        y[i * qk + j + qk / 2] = (float)x1 * d + m;
      } else {
        const int32_t x0 = ((qs[j] & 0x0F) | xh_0) - 16;
        const int32_t x1 = ((qs[j] >> 4) | xh_1) - 16;
        y[i * qk + j + 0] = (float)x0 * d;
        y[i * qk + j + qk / 2] = (float)x1 * d;
      }
    }
  }
}

/* dequantize_row_q2_K: bytes 0-15 scales, 16-79 qs, 80-81 d, 82-83 dmin */
static void dequantize_q2_k(const uint8_t *x, float *y, size_t nb) {
  for (size_t i = 0; i < nb; i++, x += CE_Q2_K_BYTES) {
    const float d = get_half(x + 80);
    const float min = get_half(x + 82);
    const uint8_t *q = x + 16, *scales = x;
    int is = 0;
    float dl, ml;
    for (int n = 0; n < CE_QK_K; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        uint8_t sc = scales[is++];
        dl = d * (float)(sc & 0xF);
        ml = min * (float)(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * (float)((int8_t)((q[l] >> shift) & 3)) - ml;
        sc = scales[is++];
        dl = d * (float)(sc & 0xF);
        ml = min * (float)(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * (float)((int8_t)((q[l + 16] >> shift) & 3)) - ml;
        shift += 2;
      }
      q += 32;
    }
  }
}

/* dequantize_row_q3_K: bytes 0-31 hmask, 32-95 qs, 96-107 scales, 108-109 d.
 * The 16 6-bit scales are unpacked as ggml does, into aux read as int8 bytes
 * in little-endian order (ggml's (const int8_t *)aux). */
static void dequantize_q3_k(const uint8_t *x, float *y, size_t nb) {
  const uint32_t kmask1 = 0x03030303;
  const uint32_t kmask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  for (size_t i = 0; i < nb; i++, x += CE_Q3_K_BYTES) {
    const float d_all = get_half(x + 108);
    const uint8_t *q = x + 32, *hm = x;
    uint8_t m = 1;
    aux[0] = get_u32(x + 96);
    aux[1] = get_u32(x + 100);
    aux[2] = get_u32(x + 104);
    uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    int8_t scales[16];
    for (int k = 0; k < 16; k++) scales[k] = (int8_t)(uint8_t)(aux[k / 4] >> (8 * (k % 4)));
    int is = 0;
    float dl;
    for (int n = 0; n < CE_QK_K; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        dl = d_all * (float)(scales[is++] - 32);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * (float)((int8_t)((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
        dl = d_all * (float)(scales[is++] - 32);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * (float)((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
        shift += 2;
        m = (uint8_t)(m << 1);
      }
      q += 32;
    }
  }
}

/* ------------------------------------------- the non-linear and grid types */

/* ggml's tables (cl/lib/iqtables.cl, valid C): every one of them here (kvalues_fp4 too, MXFP4's). */
#define CE_TABLES_FOR(t) 1
#include "../../cl/lib/iqtables.cl"

/* byte k of a grid entry (ggml reads the entry's bytes in memory: little-endian) */
static uint8_t grid_byte(uint64_t entry, int k) { return (uint8_t)(entry >> (8 * k)); }
/* ggml's kmask_iq2xs[j] */
static uint8_t kmask(int j) { return (uint8_t)(1u << j); }

/* dequantize_row_iq4_nl: bytes 0-1 d, 2-17 qs */
static void dequantize_iq4_nl(const uint8_t *x, float *y, size_t nb) {
  for (size_t i = 0; i < nb; i++, x += CE_IQ4_NL_BYTES) {
    const uint8_t *qs = x + 2;
    const float d = get_half(x);
    for (int j = 0; j < CE_IQ4_NL_VALUES / 2; ++j) {
      y[j + 0] = d * (float)ce_kvalues_iq4nl[qs[j] & 0xf];
      y[j + CE_IQ4_NL_VALUES / 2] = d * (float)ce_kvalues_iq4nl[qs[j] >> 4];
    }
    y += CE_IQ4_NL_VALUES;
  }
}

/* dequantize_row_iq4_xs: bytes 0-1 d, 2-3 scales_h, 4-7 scales_l, 8-135 qs */
static void dequantize_iq4_xs(const uint8_t *x, float *y, size_t nb) {
  for (size_t i = 0; i < nb; i++, x += CE_IQ4_XS_BYTES) {
    const uint8_t *qs = x + 8, *scales_l = x + 4;
    const uint16_t scales_h = get_u16(x + 2);
    const float d = get_half(x);
    for (int ib = 0; ib < CE_QK_K / 32; ++ib) {
      const int ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
      const float dl = d * (float)(ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j + 0] = dl * (float)ce_kvalues_iq4nl[qs[j] & 0xf];
        y[j + 16] = dl * (float)ce_kvalues_iq4nl[qs[j] >> 4];
      }
      y += 32;
      qs += 16;
    }
  }
}

/* dequantize_row_iq2_xxs: bytes 0-1 d, 2-65 qs (per 32 values: 4 grid
 * indices, then 4 bytes of 4 7-bit sign codes and a 4-bit scale) */
static void dequantize_iq2_xxs(const uint8_t *x, float *y, size_t nb) {
  uint32_t aux32[2];
  for (size_t i = 0; i < nb; i++, x += CE_IQ2_XXS_BYTES) {
    const float d = get_half(x);
    for (int ib32 = 0; ib32 < CE_QK_K / 32; ++ib32) {
      const uint8_t *aux8 = x + 2 + 8 * ib32;
      aux32[0] = get_u32(aux8);
      aux32[1] = get_u32(aux8 + 4);
      const float db = d * (0.5f + (float)(aux32[1] >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        const uint64_t grid = ce_iq2xxs_grid[aux8[l]];
        const uint8_t signs = ce_ksigns_iq2xs[(aux32[1] >> 7 * l) & 127];
        for (int j = 0; j < 8; ++j) y[j] = db * (float)grid_byte(grid, j) * (signs & kmask(j) ? -1.f : 1.f);
        y += 8;
      }
    }
  }
}

/* dequantize_row_iq2_xs: bytes 0-1 d, 2-65 qs (uint16: 9-bit grid index,
 * 7-bit sign code), 66-73 scales */
static void dequantize_iq2_xs(const uint8_t *x, float *y, size_t nb) {
  float db[2];
  for (size_t i = 0; i < nb; i++, x += CE_IQ2_XS_BYTES) {
    const float d = get_half(x);
    const uint8_t *scales = x + 66;
    for (int ib32 = 0; ib32 < CE_QK_K / 32; ++ib32) {
      db[0] = d * (0.5f + (float)(scales[ib32] & 0xf)) * 0.25f;
      db[1] = d * (0.5f + (float)(scales[ib32] >> 4)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        const uint16_t qs = get_u16(x + 2 + 2 * (4 * ib32 + l));
        const uint64_t grid = ce_iq2xs_grid[qs & 511];
        const uint8_t signs = ce_ksigns_iq2xs[qs >> 9];
        for (int j = 0; j < 8; ++j) y[j] = db[l / 2] * (float)grid_byte(grid, j) * (signs & kmask(j) ? -1.f : 1.f);
        y += 8;
      }
    }
  }
}

/* dequantize_row_iq2_s: bytes 0-1 d, 2-33 qs (grid index low bits), 34-65
 * signs, 66-73 qh, 74-81 scales */
static void dequantize_iq2_s(const uint8_t *x, float *y, size_t nb) {
  float db[2];
  for (size_t i = 0; i < nb; i++, x += CE_IQ2_S_BYTES) {
    const float d = get_half(x);
    const uint8_t *qs = x + 2, *qh = x + 66, *scales = x + 74;
    const uint8_t *signs = qs + CE_QK_K / 8;
    for (int ib32 = 0; ib32 < CE_QK_K / 32; ++ib32) {
      db[0] = d * (0.5f + (float)(scales[ib32] & 0xf)) * 0.25f;
      db[1] = d * (0.5f + (float)(scales[ib32] >> 4)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        const float dl = db[l / 2];
        const uint64_t grid = ce_iq2s_grid[qs[l] | (qh[ib32] << (8 - 2 * l) & 0x300)];
        for (int j = 0; j < 8; ++j) y[j] = dl * (float)grid_byte(grid, j) * (signs[l] & kmask(j) ? -1.f : 1.f);
        y += 8;
      }
      qs += 4;
      signs += 4;
    }
  }
}

/* dequantize_row_iq3_xxs: bytes 0-1 d, 2-65 grid indices, 66-97 scales and signs */
static void dequantize_iq3_xxs(const uint8_t *x, float *y, size_t nb) {
  uint32_t aux32;
  for (size_t i = 0; i < nb; i++, x += CE_IQ3_XXS_BYTES) {
    const float d = get_half(x);
    const uint8_t *qs = x + 2;
    const uint8_t *scales_and_signs = qs + CE_QK_K / 4;
    for (int ib32 = 0; ib32 < CE_QK_K / 32; ++ib32) {
      aux32 = get_u32(scales_and_signs + 4 * ib32);
      const float db = d * (0.5f + (float)(aux32 >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l) {
        const uint8_t signs = ce_ksigns_iq2xs[(aux32 >> 7 * l) & 127];
        const uint32_t grid1 = ce_iq3xxs_grid[qs[2 * l + 0]];
        const uint32_t grid2 = ce_iq3xxs_grid[qs[2 * l + 1]];
        for (int j = 0; j < 4; ++j) {
          y[j + 0] = db * (float)grid_byte(grid1, j) * (signs & kmask(j + 0) ? -1.f : 1.f);
          y[j + 4] = db * (float)grid_byte(grid2, j) * (signs & kmask(j + 4) ? -1.f : 1.f);
        }
        y += 8;
      }
      qs += 8;
    }
  }
}

/* dequantize_row_iq3_s: bytes 0-1 d, 2-65 qs, 66-73 qh, 74-105 signs, 106-109 scales */
static void dequantize_iq3_s(const uint8_t *x, float *y, size_t nb) {
  for (size_t i = 0; i < nb; i++, x += CE_IQ3_S_BYTES) {
    const float d = get_half(x);
    const uint8_t *qs = x + 2, *qh = x + 66, *signs = x + 74, *scales = x + 106;
    for (int ib32 = 0; ib32 < CE_QK_K / 32; ib32 += 2) {
      const float db1 = d * (float)(1 + 2 * (scales[ib32 / 2] & 0xf));
      const float db2 = d * (float)(1 + 2 * (scales[ib32 / 2] >> 4));
      for (int half = 0; half < 2; half++) { /* ggml's two spelled-out loops: db1 with qh[0], db2 with qh[1] */
        const float db = half ? db2 : db1;
        for (int l = 0; l < 4; ++l) {
          const uint32_t grid1 = ce_iq3s_grid[qs[2 * l + 0] | ((qh[half] << (8 - 2 * l)) & 256)];
          const uint32_t grid2 = ce_iq3s_grid[qs[2 * l + 1] | ((qh[half] << (7 - 2 * l)) & 256)];
          for (int j = 0; j < 4; ++j) {
            y[j + 0] = db * (float)grid_byte(grid1, j) * (signs[l] & kmask(j + 0) ? -1.f : 1.f);
            y[j + 4] = db * (float)grid_byte(grid2, j) * (signs[l] & kmask(j + 4) ? -1.f : 1.f);
          }
          y += 8;
        }
        qs += 8;
        signs += 4;
      }
      qh += 2;
    }
  }
}

/* dequantize_row_iq1_s: bytes 0-1 d, 2-33 qs, 34-49 qh (uint16) */
static void dequantize_iq1_s(const uint8_t *x, float *y, size_t nb) {
  for (size_t i = 0; i < nb; i++, x += CE_IQ1_S_BYTES) {
    const float d = get_half(x);
    const uint8_t *qs = x + 2;
    for (int ib = 0; ib < CE_QK_K / 32; ++ib) {
      const uint16_t qh = get_u16(x + 34 + 2 * ib);
      const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
      const float delta = qh & 0x8000 ? -IQ1S_DELTA : IQ1S_DELTA;
      for (int l = 0; l < 4; ++l) {
        const uint64_t grid = ce_iq1s_grid[qs[l] | (((qh >> 3 * l) & 7) << 8)];
        for (int j = 0; j < 8; ++j) y[j] = dl * ((float)(int8_t)grid_byte(grid, j) + delta);
        y += 8;
      }
      qs += 4;
    }
  }
}

/* dequantize_row_iq1_m: bytes 0-31 qs, 32-47 qh, 48-55 scales (4 uint16, the
 * top nibbles of which make the f16 d) */
static void dequantize_iq1_m(const uint8_t *x, float *y, size_t nb) {
  float delta[4];
  uint16_t idx[4];
  for (size_t i = 0; i < nb; i++, x += CE_IQ1_M_BYTES) {
    uint16_t sc[4];
    for (int k = 0; k < 4; k++) sc[k] = get_u16(x + 48 + 2 * k);
    const uint16_t scale = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                                      (sc[3] & 0xf000));
    const float d = ce_quant_f16_to_f32(scale);
    const uint8_t *qs = x, *qh = x + 32;
    for (int ib = 0; ib < CE_QK_K / 32; ++ib) {
      const float dl1 = d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 0)) & 0x7) + 1);
      const float dl2 = d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 0x7) + 1);
      idx[0] = (uint16_t)(qs[0] | ((qh[0] << 8) & 0x700));
      idx[1] = (uint16_t)(qs[1] | ((qh[0] << 4) & 0x700));
      idx[2] = (uint16_t)(qs[2] | ((qh[1] << 8) & 0x700));
      idx[3] = (uint16_t)(qs[3] | ((qh[1] << 4) & 0x700));
      delta[0] = qh[0] & 0x08 ? -IQ1S_DELTA : IQ1S_DELTA;
      delta[1] = qh[0] & 0x80 ? -IQ1S_DELTA : IQ1S_DELTA;
      delta[2] = qh[1] & 0x08 ? -IQ1S_DELTA : IQ1S_DELTA;
      delta[3] = qh[1] & 0x80 ? -IQ1S_DELTA : IQ1S_DELTA;
      for (int l = 0; l < 4; ++l) {
        const uint64_t grid = ce_iq1s_grid[idx[l]];
        const float dl = l < 2 ? dl1 : dl2;
        for (int j = 0; j < 8; ++j) y[j] = dl * ((float)(int8_t)grid_byte(grid, j) + delta[l]);
        y += 8;
      }
      qs += 4;
      qh += 2;
    }
  }
}

/* ------------------------------------------------ the ternary and fp4 types */

/* dequantize_row_tq1_0: bytes 0-47 qs (5 ternary digits a byte), 48-51 qh (4
 * a byte), 52-53 d. Digit n of byte b: q = (uint8_t)(b * 3^n), xi = (q * 3) >> 8
 * (0, 1 or 2), value (xi - 1) * d; ggml's loops: qs[0..31] digit by digit (32
 * values a digit), qs[32..47] likewise (16 a digit), then qh (4 a digit). */
static void dequantize_tq1_0(const uint8_t *x, float *y, size_t nb) {
  static const uint8_t pow3[6] = {1, 3, 9, 27, 81, 243};
  for (size_t i = 0; i < nb; i++, x += CE_TQ1_0_BYTES) {
    const float d = get_half(x + 52);
    const uint8_t *qs = x, *qh = x + 48;
    for (size_t j = 0; j < 32; j += 32) /* ggml's sizeof(qs) - sizeof(qs) % 32 */
      for (size_t n = 0; n < 5; ++n)
        for (size_t m = 0; m < 32; ++m) {
          const uint8_t q = (uint8_t)(qs[j + m] * pow3[n]);
          const int16_t xi = (int16_t)(((uint16_t)q * 3) >> 8);
          *y++ = (float)(xi - 1) * d;
        }
    for (size_t j = 32; j < 48; j += 16)
      for (size_t n = 0; n < 5; ++n)
        for (size_t m = 0; m < 16; ++m) {
          const uint8_t q = (uint8_t)(qs[j + m] * pow3[n]);
          const int16_t xi = (int16_t)(((uint16_t)q * 3) >> 8);
          *y++ = (float)(xi - 1) * d;
        }
    for (size_t n = 0; n < 4; ++n)
      for (size_t j = 0; j < 4; ++j) {
        const uint8_t q = (uint8_t)(qh[j] * pow3[n]);
        const int16_t xi = (int16_t)(((uint16_t)q * 3) >> 8);
        *y++ = (float)(xi - 1) * d;
      }
  }
}

/* dequantize_row_tq2_0: bytes 0-63 qs (2 bits a value), 64-65 d */
static void dequantize_tq2_0(const uint8_t *x, float *y, size_t nb) {
  for (size_t i = 0; i < nb; i++, x += CE_TQ2_0_BYTES) {
    const float d = get_half(x + 64);
    for (size_t j = 0; j < 64; j += 32)
      for (size_t l = 0; l < 4; ++l)
        for (size_t m = 0; m < 32; ++m) {
          const int8_t q = (int8_t)((x[j + m] >> (l * 2)) & 3);
          *y++ = (float)(q - 1) * d;
        }
  }
}

/* ggml_e8m0_to_fp32_half (GGML_E8M0_TO_FP32_HALF): 2^(e - 128) by its bits,
 * the two smallest subnormal; e = 255 is 2^127, not a NaN */
static float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? UINT32_C(0x00200000) << e : (uint32_t)(e - 1) << 23;
  return f32_from_bits(bits);
}

/* dequantize_row_mxfp4: byte 0 e, 1-16 qs */
static void dequantize_mxfp4(const uint8_t *x, float *y, size_t nb) {
  const int qk = CE_MXFP4_VALUES;
  for (size_t i = 0; i < nb; i++, x += CE_MXFP4_BYTES) {
    const float d = e8m0_to_fp32_half(x[0]);
    const uint8_t *qs = x + 1;
    for (int j = 0; j < qk / 2; ++j) {
      const int8_t x0 = ce_kvalues_fp4[qs[j] & 0x0F];
      const int8_t x1 = ce_kvalues_fp4[qs[j] >> 4];
      y[i * qk + j + 0] = (float)x0 * d;
      y[i * qk + j + qk / 2] = (float)x1 * d;
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
  case CE_Q4_K: dequantize_q45_k(x, y, n / qk, 0); break;
  case CE_Q6_K: dequantize_q6_k(x, y, n / qk); break;
  case CE_Q4_1: dequantize_q4_1(x, y, n / qk); break;
  case CE_Q5_0: dequantize_q5(x, y, n / qk, 0); break;
  case CE_Q5_1: dequantize_q5(x, y, n / qk, 1); break;
  case CE_Q2_K: dequantize_q2_k(x, y, n / qk); break;
  case CE_Q3_K: dequantize_q3_k(x, y, n / qk); break;
  case CE_Q5_K: dequantize_q45_k(x, y, n / qk, 1); break;
  case CE_IQ4_NL: dequantize_iq4_nl(x, y, n / qk); break;
  case CE_IQ4_XS: dequantize_iq4_xs(x, y, n / qk); break;
  case CE_IQ2_XXS: dequantize_iq2_xxs(x, y, n / qk); break;
  case CE_IQ2_XS: dequantize_iq2_xs(x, y, n / qk); break;
  case CE_IQ2_S: dequantize_iq2_s(x, y, n / qk); break;
  case CE_IQ3_XXS: dequantize_iq3_xxs(x, y, n / qk); break;
  case CE_IQ3_S: dequantize_iq3_s(x, y, n / qk); break;
  case CE_IQ1_S: dequantize_iq1_s(x, y, n / qk); break;
  case CE_IQ1_M: dequantize_iq1_m(x, y, n / qk); break;
  case CE_TQ1_0: dequantize_tq1_0(x, y, n / qk); break;
  case CE_TQ2_0: dequantize_tq2_0(x, y, n / qk); break;
  case CE_MXFP4: dequantize_mxfp4(x, y, n / qk); break;
  default: return -1;
  }
  return 0;
}

/* ------------------------------------------------ FBGEMM's row-wise types */

static void put_f32(uint8_t *b, float f) {
  uint32_t w = f32_to_bits(f);
  for (int k = 0; k < 4; k++) b[k] = (uint8_t)(w >> (8 * k));
}
static float get_f32(const uint8_t *b) {
  return f32_from_bits((uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24));
}
static void put_f16(uint8_t *b, uint16_t h) {
  b[0] = (uint8_t)h;
  b[1] = (uint8_t)(h >> 8);
}
static float get_f16(const uint8_t *b) { return ce_quant_f16_to_f32((uint16_t)(b[0] | (b[1] << 8))); }

/* A row's values, scale and bias: where they lie in its bytes. */
typedef struct rw_row {
  const ce_rowwise_facts *f;
  size_t vals, sb; /* byte offsets */
} rw_row;

static int rw_layout(int dtype, size_t cols, rw_row *r) {
  r->f = ce_rowwise_of(dtype);
  if (!r->f || cols % ce_rowwise_cols_multiple(r->f)) return -1;
  size_t data = ce_rowwise_value_bytes(r->f, cols);
  r->vals = r->f->first ? r->f->sb : 0;
  r->sb = r->f->first ? 0 : data;
  return 0;
}

/* FBGEMM's hfp8_to_float(q, 4, 15), exact (quant.cl's ce_rw_hfp8) */
static float hfp8_to_f32(uint8_t q) {
  uint32_t s = (uint32_t)(q & 0x80u) << 24, e = (q >> 3) & 0xFu, m = q & 7u;
  if (e == 0) return f32_from_bits(s | f32_to_bits((float)m * 0x1p-17f));
  return f32_from_bits(s | ((e + 112u) << 23) | (m << 20));
}

/* FBGEMM's float_to_hfp8(x, 4, 15, 0.9375): saturating to the largest value,
 * rounding to nearest even (its bouncer additions), NaN to the largest value
 * with the NaN's sign */
static uint8_t f32_to_hfp8(float x) {
  const int ebits = 4, bias = 15, mbits = 7 - ebits;
  uint32_t v = f32_to_bits(x), sign = v & 0x80000000u;
  v &= 0x7FFFFFFFu;
  float f = fminf(f32_from_bits(v), 0.9375f);
  v = f32_to_bits(f);
  const float smallest_normal = f32_from_bits((uint32_t)(127 - bias + 1) << 23);
  if (f >= smallest_normal) {
    const float bouncer = f32_from_bits((v & 0xFF800000u) + ((uint32_t)(23 - mbits) << 23));
    f = (bouncer + f) - bouncer;
    v = f32_to_bits(f);
    v = (v - ((uint32_t)(127 - bias) << 23)) << (8 - ebits);
    return (uint8_t)((v | sign) >> 24);
  }
  const float bouncer = f32_from_bits((uint32_t)(127 + (23 + (1 - bias - mbits))) << 23);
  f = bouncer + f;
  v = f32_to_bits(f);
  return (uint8_t)((v | (sign >> 24)) & 0xFFu);
}

int ce_quant_rowwise_dequantize(int dtype, const void *row, float *y, size_t cols) {
  rw_row r;
  if (rw_layout(dtype, cols, &r)) return -1;
  const uint8_t *b = row, *v = b + r.vals;
  const unsigned bits = r.f->bits, mask = (1u << bits) - 1u;
  if (dtype == CE_FP8_ROWWISE) {
    const float scale = get_f32(b + r.sb);
    for (size_t j = 0; j < cols; j++) y[j] = hfp8_to_f32(v[j]) / scale;
    return 0;
  }
  const float scale = r.f->sb == 8 ? get_f32(b + r.sb) : get_f16(b + r.sb);
  const float bias = r.f->sb == 8 ? get_f32(b + r.sb + 4) : get_f16(b + r.sb + 2);
  for (size_t j = 0; j < cols; j++) {
    unsigned q = (v[j * bits / 8] >> ((j * bits) % 8)) & mask;
    y[j] = fmaf((float)q, scale, bias);
  }
  return 0;
}

static void min_max(const float *x, size_t n, float *lo, float *hi) {
  float a = n ? x[0] : 0.0f, z = a;
  for (size_t j = 1; j < n; j++) { /* std::min_element / max_element: a NaN compares false */
    if (x[j] < a) a = x[j];
    if (z < x[j]) z = x[j];
  }
  *lo = a;
  *hi = z;
}

int ce_quant_rowwise_quantize(int dtype, const float *x, void *row, size_t cols) {
  rw_row r;
  if (rw_layout(dtype, cols, &r)) return -1;
  uint8_t *b = row, *v = b + r.vals;
  const unsigned bits = r.f->bits;
  float lo, hi;
  min_max(x, cols, &lo, &hi);
  if (bits == 8 && dtype != CE_FP8_ROWWISE) {
    /* FloatOrHalfToFused8BitRowwiseQuantizedSBFloatRef; the TBE's rows keep
     * its f32 scale and bias rounded to f16 (fbgemm_gpu's quantize_embs) */
    const float range = hi - lo, inverse_scale = 255.0f / (range + 1e-8f);
    if (r.f->sb == 8) {
      put_f32(b + r.sb, range / 255.0f);
      put_f32(b + r.sb + 4, lo);
    } else {
      put_f16(b + r.sb, ce_quant_f32_to_f16(range / 255.0f));
      put_f16(b + r.sb + 2, ce_quant_f32_to_f16(lo));
    }
    for (size_t j = 0; j < cols; j++) v[j] = (uint8_t)lrintf((x[j] - lo) * inverse_scale);
    return 0;
  }
  if (dtype == CE_FP8_ROWWISE) { /* FloatToFP8RowwiseQuantized (forward: hfp8 4 exponent bits, bias 15) */
    const float scale = 0.9375f / (1e-20f + fmaxf(hi, -lo));
    put_f32(b + r.sb, scale);
    put_f32(b + r.sb + 4, 0.0f);
    memset(v, 0, ce_rowwise_value_bytes(r.f, cols));
    for (size_t j = 0; j < cols; j++) v[j] = f32_to_hfp8(x[j] * scale);
    return 0;
  }
  /* FloatOrHalfToFusedNBitRowwiseQuantizedSBHalfRef (bit rate 8 for the 8-bit TBE rows) */
  lo = ce_quant_f16_to_f32(ce_quant_f32_to_f16(lo));
  const float range = hi - lo;
  float scale = range == 0 ? 1.0f : range / (float)((1u << bits) - 1u);
  scale = ce_quant_f16_to_f32(ce_quant_f32_to_f16(scale));
  if (scale == 0) scale = 1.0f;
  float inverse_scale = 1.0f / scale;
  if (isinf(inverse_scale)) {
    scale = 1.0f;
    inverse_scale = 1.0f;
  }
  put_f16(b + r.sb, ce_quant_f32_to_f16(scale));
  put_f16(b + r.sb + 2, ce_quant_f32_to_f16(lo));
  const long top = (long)((1u << bits) - 1u);
  const size_t per = 8u / bits;
  for (size_t j = 0; j < cols; j++) {
    long q = lrintf((x[j] - lo) * inverse_scale);
    q = q < 0 ? 0 : q > top ? top : q;
    if (j % per == 0)
      v[j / per] = (uint8_t)q;
    else
      v[j / per] |= (uint8_t)(q << ((j % per) * bits));
  }
  return 0;
}
