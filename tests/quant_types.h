/* quant_types.h: the block types under test, shared by test_quant and test_io:
 * clembed's dtype, ggml's type number (reference_ggml.h's traits give the
 * block's values, bytes and dequantizer: the tests' own sizes) and where its
 * f16 scales lie, with random blocks (finite, extreme or any scales) and the
 * reference dequantizer by dtype. A test defines `static uint32_t rnd32(void)`
 * before including this. */
#ifndef CLEMBED_QUANT_TYPES_H
#define CLEMBED_QUANT_TYPES_H

#include "clembed.h"
#include "reference_ggml.h"

#include <stddef.h>
#include <stdlib.h>

/* The block types: clembed's dtype, ggml's type number (reference_ggml.h's
 * traits give the block's values, bytes and dequantizer: the test's own sizes)
 * and the byte offsets of the block's f16 scales (IQ1_M has none: its d is the
 * top nibbles of its four scale words; MXFP4 neither: its scale is the E8M0
 * byte e; set_half). */
typedef struct tq_type {
  int dtype, ggml;
  const char *name;
  int nhalf;
  size_t half[2];
} tq_type;
static const tq_type TQ[] = {
    {CLEMBED_Q8_0, 8, "Q8_0", 1, {offsetof(ref_block_q8_0, d)}},
    {CLEMBED_Q4_0, 2, "Q4_0", 1, {offsetof(ref_block_q4_0, d)}},
    {CLEMBED_Q4_K, 12, "Q4_K", 2, {offsetof(ref_block_q4_K, d), offsetof(ref_block_q4_K, dmin)}},
    {CLEMBED_Q6_K, 14, "Q6_K", 1, {offsetof(ref_block_q6_K, d)}},
    {CLEMBED_Q4_1, 3, "Q4_1", 2, {offsetof(ref_block_q4_1, d), offsetof(ref_block_q4_1, m)}},
    {CLEMBED_Q5_0, 6, "Q5_0", 1, {offsetof(ref_block_q5_0, d)}},
    {CLEMBED_Q5_1, 7, "Q5_1", 2, {offsetof(ref_block_q5_1, d), offsetof(ref_block_q5_1, m)}},
    {CLEMBED_Q2_K, 10, "Q2_K", 2, {offsetof(ref_block_q2_K, d), offsetof(ref_block_q2_K, dmin)}},
    {CLEMBED_Q3_K, 11, "Q3_K", 1, {offsetof(ref_block_q3_K, d)}},
    {CLEMBED_Q5_K, 13, "Q5_K", 2, {offsetof(ref_block_q5_K, d), offsetof(ref_block_q5_K, dmin)}},
    {CLEMBED_IQ4_NL, 20, "IQ4_NL", 1, {offsetof(ref_block_iq4_nl, d)}},
    {CLEMBED_IQ4_XS, 23, "IQ4_XS", 1, {offsetof(ref_block_iq4_xs, d)}},
    {CLEMBED_IQ2_XXS, 16, "IQ2_XXS", 1, {offsetof(ref_block_iq2_xxs, d)}},
    {CLEMBED_IQ2_XS, 17, "IQ2_XS", 1, {offsetof(ref_block_iq2_xs, d)}},
    {CLEMBED_IQ2_S, 22, "IQ2_S", 1, {offsetof(ref_block_iq2_s, d)}},
    {CLEMBED_IQ3_XXS, 18, "IQ3_XXS", 1, {offsetof(ref_block_iq3_xxs, d)}},
    {CLEMBED_IQ3_S, 21, "IQ3_S", 1, {offsetof(ref_block_iq3_s, d)}},
    {CLEMBED_IQ1_S, 19, "IQ1_S", 1, {offsetof(ref_block_iq1_s, d)}},
    {CLEMBED_IQ1_M, 29, "IQ1_M", 1, {0}},
    {CLEMBED_TQ1_0, 34, "TQ1_0", 1, {offsetof(ref_block_tq1_0, d)}},
    {CLEMBED_TQ2_0, 35, "TQ2_0", 1, {offsetof(ref_block_tq2_0, d)}},
    {CLEMBED_MXFP4, 39, "MXFP4", 1, {offsetof(ref_block_mxfp4, e)}},
};
#define NTQ ((int)(sizeof TQ / sizeof TQ[0]))

static inline const tq_type *tq(int dtype) {
  for (int k = 0; k < NTQ; k++)
    if (TQ[k].dtype == dtype) return &TQ[k];
  return NULL;
}
static inline const ref_type_traits_t *tq_traits(int dtype) { return ref_get_type_traits(tq(dtype)->ggml); }
static inline size_t tq_qk(int dtype) { return (size_t)tq_traits(dtype)->blck_size; }
static inline size_t tq_bb(int dtype) { return tq_traits(dtype)->type_size; }
#define TQ_MAX_BYTES 256 /* more than any block's */

/* A random finite half (exponent field below 31). */
static inline uint16_t rnd_finite_half(void) {
  for (;;) {
    uint16_t h = (uint16_t)rnd32();
    if (((h >> 10) & 31) != 31) return h;
  }
}

/* Halves at the edges: the largest, the smallest subnormal, zeros, infinities, NaNs. */
static const uint16_t EXTREME_HALVES[] = {0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0400, 0x0000, 0x8000,
                                          0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0x7FFF};
#define N_EXTREME_FINITE 7 /* the first 7 are finite */

/* Scale k of a block set to half h (IQ1_M: d's 4 nibbles, the top nibble of
 * each of its scale words, ggml's iq1m_scale_t; MXFP4: its exponent e, the
 * half's low byte, so that the halves run through every e, and the extreme
 * ones give e 255 (2^127: values past FLT_MAX), 0 and 1 (subnormal scales)). */
static inline void set_half(int dtype, uint8_t *b, int k, uint16_t h) {
  if (dtype == CLEMBED_MXFP4) {
    b[offsetof(ref_block_mxfp4, e)] = (uint8_t)h;
    return;
  }
  if (dtype == CLEMBED_IQ1_M) {
    for (int w = 0; w < 4; w++) {
      uint8_t *hi = b + offsetof(ref_block_iq1_m, scales) + 2 * w + 1; /* little-endian: the high byte */
      *hi = (uint8_t)((*hi & 0x0F) | (((h >> (4 * w)) & 0xF) << 4));
    }
    return;
  }
  const tq_type *t = tq(dtype);
  b[t->half[k]] = (uint8_t)h;
  b[t->half[k] + 1] = (uint8_t)(h >> 8);
}
static inline int n_halves(int dtype) { return dtype == CLEMBED_IQ1_M ? 1 : tq(dtype)->nhalf; }

/* Block bytes of `dtype`, random, with finite f16 scales: random ones, or
 * (one block in 8) extreme finite ones. MXFP4's scale 2^(e - 128) is random
 * with e from 28 to 228 (one block in 8 an end): its values normal floats or 0,
 * as every other type's, far from FLT_MAX and from the subnormals (which a
 * device may flush), their sums and products in the tests too; e 0, 1 and 255
 * are rnd_block_any's and set_half's. */
static inline void rnd_block(int dtype, uint8_t *b) {
  size_t bytes = tq_bb(dtype);
  for (size_t i = 0; i < bytes; i++) b[i] = (uint8_t)rnd32();
  int edge = rnd32() % 8 == 0;
  if (dtype == CLEMBED_MXFP4) {
    b[offsetof(ref_block_mxfp4, e)] = (uint8_t)(edge ? (rnd32() % 2 ? 228 : 28) : 28 + rnd32() % 201);
    return;
  }
  for (int k = 0; k < n_halves(dtype); k++)
    set_half(dtype, b, k, edge ? EXTREME_HALVES[rnd32() % N_EXTREME_FINITE] : rnd_finite_half());
}

/* The same with any scale, infinities and NaNs among them (one in 3; MXFP4:
 * e 0 and 1, subnormal scales, and 255, values past FLT_MAX). */
static inline void rnd_block_any(int dtype, uint8_t *b) {
  rnd_block(dtype, b);
  for (int k = 0; k < n_halves(dtype); k++)
    if (rnd32() % 3 == 0)
      set_half(dtype, b, k, EXTREME_HALVES[N_EXTREME_FINITE + rnd32() % (sizeof EXTREME_HALVES / 2 - N_EXTREME_FINITE)]);
}

/* The reference dequantizer of ggml for n values of `dtype` from raw bytes. */
static inline void ref_dequantize(int dtype, const uint8_t *raw, float *y, size_t n) {
  size_t nb = n / tq_qk(dtype), bytes = nb * tq_bb(dtype);
  void *blocks = malloc(bytes ? bytes : 1); /* aligned, as ggml's blocks are */
  memcpy(blocks, raw, bytes);
  tq_traits(dtype)->to_float(blocks, y, (int64_t)n);
  free(blocks);
}

#endif
