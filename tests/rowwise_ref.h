/* rowwise_ref.h: FBGEMM's row-wise tables written out plainly for the tests:
 * their layouts (every byte), FBGEMM's reference quantizers (QuantUtils.cc's
 * FloatOrHalfToFused8BitRowwiseQuantizedSBFloatRef and
 * FloatOrHalfToFusedNBitRowwiseQuantizedSBHalfRef, fbgemm_gpu's quantize_embs
 * for the 8-bit TBE rows, quantize_fp8_rowwise.cu with quantize_ops_utils.h's
 * float_to_hfp8) and dequantization (fma(q, scale, bias); rw_hfp8_to_float(q) /
 * scale), as FBGEMM's source reads. Include after reference.h (f16). */
#ifndef CLEMBED_TESTS_ROWWISE_REF_H
#define CLEMBED_TESTS_ROWWISE_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline unsigned rw_bits(clembed_dtype d) {
  return d == CLEMBED_I4_ROWWISE || d == CLEMBED_I4_TBE ? 4 : d == CLEMBED_I2_ROWWISE || d == CLEMBED_I2_TBE ? 2 : 8;
}
static inline int rw_tbe(clembed_dtype d) { return d == CLEMBED_I8_TBE || d == CLEMBED_I4_TBE || d == CLEMBED_I2_TBE; }
/* the cols a type takes: FBGEMM's row-wise INT4/INT2 operators whole f16 words, the TBE whole bytes */
static inline size_t rw_cols_multiple(clembed_dtype d) {
  unsigned b = rw_bits(d);
  return b == 8 ? 1 : rw_tbe(d) ? 8 / b : 16 / b;
}
static inline size_t rw_value_bytes(clembed_dtype d, size_t cols) {
  size_t v = cols * rw_bits(d) / 8;
  return d == CLEMBED_FP8_ROWWISE ? (v + 3) / 4 * 4 : v;
}
static inline size_t rw_sb_bytes(clembed_dtype d) {
  return d == CLEMBED_I8_ROWWISE || d == CLEMBED_FP8_ROWWISE ? 8 : 4;
}
static inline size_t rw_row_bytes(clembed_dtype d, size_t cols) { return rw_value_bytes(d, cols) + rw_sb_bytes(d); }
static inline size_t rw_vals_at(clembed_dtype d) { return rw_tbe(d) ? 4 : 0; }
static inline size_t rw_sb_at(clembed_dtype d, size_t cols) { return rw_tbe(d) ? 0 : rw_value_bytes(d, cols); }

static inline float rw_f32_of(const uint8_t *b) {
  uint32_t w = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  float f;
  memcpy(&f, &w, 4);
  return f;
}
static inline void rw_put32(uint8_t *b, float f) {
  uint32_t w;
  memcpy(&w, &f, 4);
  for (int k = 0; k < 4; k++) b[k] = (uint8_t)(w >> (8 * k));
}
static inline float rw_f16_of(const uint8_t *b) { return ref_f16_to_f32((uint16_t)(b[0] | b[1] << 8)); }
static inline void rw_put16(uint8_t *b, uint16_t h) {
  b[0] = (uint8_t)h;
  b[1] = (uint8_t)(h >> 8);
}

/* quantize_ops_utils.h's rw_hfp8_to_float(q, 4, 15) */
static inline float rw_hfp8_to_float(uint8_t q) {
  uint32_t sign = (uint32_t)(q & 0x80) << 24, bits = (uint32_t)(q & 0x7F) << (24 - (8 - 4));
  float v, mult;
  uint32_t mb = (uint32_t)(127 + (127 - 15)) << 23;
  memcpy(&v, &bits, 4);
  memcpy(&mult, &mb, 4);
  v *= mult;
  memcpy(&bits, &v, 4);
  bits |= sign;
  memcpy(&v, &bits, 4);
  return v;
}

/* quantize_ops_utils.h's rw_float_to_hfp8(x, 4, 15, 0.9375) */
static inline uint8_t rw_float_to_hfp8(float x) {
  const int ebits = 4, bias = 15, mbits = 7 - ebits;
  const float max_pos = 0.9375f;
  uint32_t I, sign;
  float F;
  memcpy(&I, &x, 4);
  sign = I & 0x80000000u;
  I &= 0x7FFFFFFFu;
  memcpy(&F, &I, 4);
  F = fminf(F, max_pos);
  uint32_t sn = (uint32_t)(127 - bias + 1) << 23;
  float smallest_normal;
  memcpy(&smallest_normal, &sn, 4);
  memcpy(&I, &F, 4);
  if (F >= smallest_normal) {
    uint32_t bb = (I & 0xFF800000u) + ((uint32_t)(23 - mbits) << 23);
    float bouncer;
    memcpy(&bouncer, &bb, 4);
    F = (bouncer + F) - bouncer;
    memcpy(&I, &F, 4);
    I = (I - ((uint32_t)(127 - bias) << 23)) << (8 - ebits);
    I = (I | sign) >> 24;
  } else {
    uint32_t bb = (uint32_t)(127 + (23 + (1 - bias - mbits))) << 23;
    float bouncer;
    memcpy(&bouncer, &bb, 4);
    F = bouncer + F;
    memcpy(&I, &F, 4);
    I = I | (sign >> 24);
  }
  return (uint8_t)I;
}

/* value j of a row */
static inline float rw_ref_value(clembed_dtype d, const uint8_t *row, size_t cols, size_t j) {
  const uint8_t *v = row + rw_vals_at(d), *sb = row + rw_sb_at(d, cols);
  unsigned b = rw_bits(d), q = (v[j * b / 8] >> (j * b % 8)) & ((1u << b) - 1);
  if (d == CLEMBED_FP8_ROWWISE) return rw_hfp8_to_float((uint8_t)q) / rw_f32_of(sb);
  float scale = rw_sb_bytes(d) == 8 ? rw_f32_of(sb) : rw_f16_of(sb), bias = rw_sb_bytes(d) == 8 ? rw_f32_of(sb + 4) : rw_f16_of(sb + 2);
  return fmaf((float)q, scale, bias);
}

/* FBGEMM's quantizers, a row at a time */
static inline void rw_ref_quantize(clembed_dtype d, const float *x, size_t cols, uint8_t *row) {
  memset(row, 0, rw_row_bytes(d, cols));
  uint8_t *v = row + rw_vals_at(d), *sb = row + rw_sb_at(d, cols);
  float mn = x[0], mx = x[0];
  for (size_t j = 1; j < cols; j++) {
    if (x[j] < mn) mn = x[j];
    if (mx < x[j]) mx = x[j];
  }
  if (d == CLEMBED_FP8_ROWWISE) {
    const float scale = 0.9375f / (1e-20f + fmaxf(mx, -mn));
    rw_put32(sb, scale);
    rw_put32(sb + 4, 0.0f);
    for (size_t j = 0; j < cols; j++) v[j] = rw_float_to_hfp8(x[j] * scale);
    return;
  }
  if (rw_bits(d) == 8) { /* FloatOrHalfToFused8BitRowwiseQuantizedSBFloatRef (+ quantize_embs' f16 for the TBE) */
    float range = mx - mn;
    if (d == CLEMBED_I8_ROWWISE) {
      rw_put32(sb, range / 255.0f);
      rw_put32(sb + 4, mn);
    } else {
      rw_put16(sb, ref_f32_to_f16(range / 255.0f));
      rw_put16(sb + 2, ref_f32_to_f16(mn));
    }
    const float inverse_scale = 255.0f / (range + 1e-8f);
    for (size_t j = 0; j < cols; j++) v[j] = (uint8_t)lrintf((x[j] - mn) * inverse_scale);
    return;
  }
  /* FloatOrHalfToFusedNBitRowwiseQuantizedSBHalfRef */
  const unsigned bit_rate = rw_bits(d), per = 8 / bit_rate;
  uint16_t mn16 = ref_f32_to_f16(mn);
  mn = ref_f16_to_f32(mn16);
  const float range = mx - mn;
  float scale = range == 0 ? 1.0f : range / (float)((1 << bit_rate) - 1);
  scale = ref_f16_to_f32(ref_f32_to_f16(scale));
  if (scale == 0) scale = 1.0f;
  float inverse_scale = 1.0f / scale;
  if (isinf(inverse_scale)) {
    scale = 1.0f;
    inverse_scale = 1.0f;
  }
  rw_put16(sb, ref_f32_to_f16(scale));
  rw_put16(sb + 2, mn16);
  for (size_t j = 0; j < cols; j++) {
    long l = lrintf((x[j] - mn) * inverse_scale);
    int q = l < 0 ? 0 : l > (1 << bit_rate) - 1 ? (1 << bit_rate) - 1 : (int)l;
    if (j % per == 0)
      v[j / per] = (uint8_t)q;
    else
      v[j / per] |= (uint8_t)(q << ((j % per) * bit_rate));
  }
}

#endif
