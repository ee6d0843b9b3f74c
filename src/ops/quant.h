/* quant.h: host-side code for ggml's (GGUF's) block-quantized formats.
 *
 * Block layouts, byte for byte as ggml's ggml-common.h (little-endian):
 *   Q8_0  32 values, 34 bytes: f16 d; int8 qs[32].            value j = qs[j]*d
 *   Q4_0  32 values, 18 bytes: f16 d; uint8 qs[16].           value j < 16 = ((qs[j] & 15) - 8)*d,
 *                                                              value j + 16 = ((qs[j] >> 4) - 8)*d
 *   Q4_K 256 values, 144 bytes: f16 d; f16 dmin; uint8 scales[12] (eight 6-bit scales and
 *                               eight 6-bit mins); uint8 qs[128] (4-bit quants)
 *   Q6_K 256 values, 210 bytes: uint8 ql[128] (low 4 bits); uint8 qh[64] (high 2 bits);
 *                               int8 scales[16]; f16 d
 * and ggml's other types (dtypes 7 .. 24: Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K,
 * IQ4_NL, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0,
 * TQ2_0, MXFP4), whose layouts quant.c's dequantizers and cl/lib/quant.cl spell
 * out, the grid, IQ4 and MXFP4 types' tables from cl/lib/iqtables.cl (ggml's).
 * Dequantization is ggml's dequantize_row_* in float32, operation for operation
 * (no contraction into fused multiply-adds); quantization of F32 rows is ggml's
 * quantize_row_q8_0_ref and quantize_row_q4_0_ref, bit for bit.
 *
 * Self-contained: depends on nothing else in the library but the dtype facts
 * (src/runtime/dtypes.h, macros only). The dtype codes are clembed_dtype's. */
#ifndef CLEMBED_OPS_QUANT_H
#define CLEMBED_OPS_QUANT_H

#include "../runtime/dtypes.h" /* the dtype codes and block sizes: CE_Q4_K, CE_Q4_K_VALUES, CE_Q4_K_BYTES */

#include <stddef.h>
#include <stdint.h>

/* ggml's GGML_FP16_TO_FP32 and GGML_FP32_TO_FP16 (exact; round to nearest even,
 * NaN becomes 0x7E00 with its sign). */
float ce_quant_f16_to_f32(uint16_t h);
uint16_t ce_quant_f32_to_f16(float f);

/* Quantizes n values (a multiple of 32) into n/32 blocks, as ggml's
 * quantize_row_q8_0_ref / quantize_row_q4_0_ref. Returns 0, or -1 when n is
 * not a multiple of 32. */
int ce_quant_quantize_q8_0(const float *x, void *blocks, size_t n);
int ce_quant_quantize_q4_0(const float *x, void *blocks, size_t n);

/* Dequantizes n values (a multiple of the block size) of a block `dtype` into
 * y, as ggml's dequantize_row_*. Returns 0, or -1 for a bad dtype or n. */
int ce_quant_dequantize(int dtype, const void *blocks, float *y, size_t n);

/* FBGEMM's row-wise types (dtypes 25 .. 31, src/runtime/dtypes.h), a row of
 * cols values at a time, byte for byte as FBGEMM (the header's description):
 * dequantized as its CPU dequantizers give them (fma(q, scale, bias) in
 * float32, one rounding; FP8: FBGEMM's hfp8 value, 4 exponent bits and bias
 * 15, / scale), quantized
 * as its reference quantizers (FloatOrHalfToFused8BitRowwiseQuantizedSBFloatRef,
 * FloatOrHalfToFusedNBitRowwiseQuantizedSBHalfRef). Return 0, or -1 for a dtype
 * that is not row-wise or cols it cannot take. */
int ce_quant_rowwise_dequantize(int dtype, const void *row, float *y, size_t cols);
int ce_quant_rowwise_quantize(int dtype, const float *x, void *row, size_t cols);

#endif
