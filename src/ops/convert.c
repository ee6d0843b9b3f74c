/* Host-side dtype conversions: F16 and BF16, bit for bit the kernels'
 * (cl/lib/loadstore.cl); the block-quantized types through quant.c (ggml's
 * formats, bit for bit cl/lib/quant.cl). The dtypes' sizes and names are the
 * runtime's (src/runtime/dtypes.h, dtypes.c). */
#include "ops.h"
#include "quant.h"

#include <stdlib.h>

#include <math.h>
#include <string.h>

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t ce_f32_to_f16(float f) {
  uint32_t x = f2u(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) /* inf or nan (quiet, keeping the top payload bits) */
    return (uint16_t)(sign | 0x7C00u | (ax > 0x7F800000u ? (0x200u | ((ax >> 13) & 0x3FFu)) : 0));
  if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* rounds to >= 65520: inf */
  if (ax < 0x38800000u) {                                   /* below 2^-14: subnormal half or zero */
    if (ax < 0x33000000u) return (uint16_t)sign;            /* below 2^-25: rounds to 0 */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((ax - 0x38000000u) >> 13); /* rebias exponent 127 -> 15 */
  uint32_t rem = ax & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

float ce_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return u2f(sign | 0x7F800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return u2f(sign);
    float v = ldexpf((float)m, -24);
    return sign ? -v : v;
  }
  return u2f(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t ce_f32_to_bf16(float f) {
  uint32_t x = f2u(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
  x += 0x7FFFu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

float ce_bf16_to_f32(uint16_t b) { return u2f((uint32_t)b << 16); }

static float load_as_f32(const void *p, size_t i, clembed_dtype t) {
  switch (t) {
    case CLEMBED_F32: return ((const float *)p)[i];
    case CLEMBED_F16: return ce_f16_to_f32(((const uint16_t *)p)[i]);
    case CLEMBED_BF16: return ce_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0.0f;
  }
}

static void store_from_f32(void *p, size_t i, clembed_dtype t, float v) {
  switch (t) {
    case CLEMBED_F32: ((float *)p)[i] = v; break;
    case CLEMBED_F16: ((uint16_t *)p)[i] = ce_f32_to_f16(v); break;
    case CLEMBED_BF16: ((uint16_t *)p)[i] = ce_f32_to_bf16(v); break;
    default: break;
  }
}

void ce_convert(void *dst, clembed_dtype dt, const void *src, clembed_dtype st, size_t n) {
  if (dt == st) {
    memcpy(dst, src, n * clembed_dtype_size(dt));
    return;
  }
  for (size_t i = 0; i < n; i++) store_from_f32(dst, i, dt, load_as_f32(src, i, st));
}


int ce_convert_values(void *dst, clembed_dtype dt, const void *src, clembed_dtype st, size_t n) {
  int sq = ce_dtype_is_block(st), dq = ce_dtype_is_block(dt);
  if (!sq && !dq) {
    ce_convert(dst, dt, src, st, n);
    return 0;
  }
  if (sq && dq) return dt == st ? (memcpy(dst, src, clembed_dtype_row_bytes(dt, n)), 0) : -1;
  if (dq && dt != CLEMBED_Q8_0 && dt != CLEMBED_Q4_0) return -1;
  /* F32 in between: blocks -> F32 -> dt, or st -> F32 -> blocks */
  float *f = NULL;
  int direct = sq ? dt == CLEMBED_F32 : st == CLEMBED_F32;
  if (!direct) {
    if (n > SIZE_MAX / sizeof(float) || !(f = malloc(n ? n * sizeof(float) : 1))) return -2;
  }
  if (sq) {
    ce_quant_dequantize((int)st, src, direct ? (float *)dst : f, n);
    if (!direct) ce_convert(dst, dt, f, CLEMBED_F32, n);
  } else {
    const float *x = src;
    if (!direct) {
      ce_convert(f, CLEMBED_F32, src, st, n);
      x = f;
    }
    if (dt == CLEMBED_Q8_0)
      ce_quant_quantize_q8_0(x, dst, n);
    else
      ce_quant_quantize_q4_0(x, dst, n);
  }
  free(f);
  return 0;
}

int ce_convert_rows(void *dst, clembed_dtype dt, const void *src, clembed_dtype st, size_t rows, size_t cols) {
  const int sr = ce_rowwise_of((int)st) != NULL, dr = ce_rowwise_of((int)dt) != NULL;
  if (!sr && !dr) return ce_convert_values(dst, dt, src, st, rows * cols);
  if (dt == st) {
    memcpy(dst, src, rows * clembed_dtype_row_bytes(dt, cols));
    return 0;
  }
  if (ce_dtype_is_block(sr ? dt : st)) return -1; /* no conversion between block types */
  /* a row at a time through F32 */
  float *f = malloc((cols ? cols : 1) * sizeof(float));
  if (!f) return -2;
  const size_t rb = clembed_dtype_row_bytes(sr ? st : dt, cols), eb = clembed_dtype_size(sr ? dt : st);
  for (size_t r = 0; r < rows; r++) {
    if (sr) {
      if (ce_quant_rowwise_dequantize((int)st, (const char *)src + r * rb, f, cols)) {
        free(f);
        return -1;
      }
      ce_convert((char *)dst + r * cols * eb, dt, f, CLEMBED_F32, cols);
    } else {
      ce_convert(f, CLEMBED_F32, (const char *)src + r * cols * eb, st, cols);
      if (ce_quant_rowwise_quantize((int)dt, f, (char *)dst + r * rb, cols)) {
        free(f);
        return -1;
      }
    }
  }
  free(f);
  return 0;
}
