/* quant.cl: ggml's (GGUF's) block-quantized table formats, dequantized as
 * ggml's dequantize_row_* does in float32: the same integer operations and
 * the same float32 products, in the same order, never contracted. OpenCL C 1.2.
 *
 * dtype codes (clembed_dtype) and blocks, byte for byte as ggml-common.h:
 *   3 Q8_0  32 values, 34 bytes: f16 d; int8 qs[32]
 *   4 Q4_0  32 values, 18 bytes: f16 d; uint8 qs[16] (value j: low nibble of
 *           qs[j], value j + 16: its high nibble)
 *   5 Q4_K 256 values, 144 bytes: f16 d; f16 dmin; uint8 scales[12]; uint8 qs[128]
 *   6 Q6_K 256 values, 210 bytes: uint8 ql[128]; uint8 qh[64]; int8 scales[16]; f16 d
 *
 * A quantized table is a byte buffer (storage type uchar). Its values are
 * addressed like any dtype's elements: value index i from a pointer `p` at the
 * start of a block (a table's offset and ld are multiples of the block size),
 * so `ce_load_T(p, i)` reads value i, and `ce_ptr_T(p, i)` is the pointer to
 * the block holding value i (a row's start, when i is a row's first value).
 *   ce_load_T(p, i)       value i
 *   ce_load4_T(p, b, j)   values b + 4j .. b + 4j + 3 (b a multiple of the block size)
 *   ce_loadv_T(p, o)      values o .. o + VEC - 1 (o a multiple of VEC; VEC 4, 8 or 16)
 *   ce_loadw_T(p, o, a, b) values o .. o + 2 VEC - 1 as two vectors (o a multiple of 2 VEC)
 * Vector loads never straddle a block: 4, 8 and 16 divide the runs of values
 * that share a block, a sub-block scale (Q4_K: 32, Q6_K: 16) and a nibble half
 * (Q4_0: 16).
 *
 * The codes 7 .. 24 (ggml's other types) are described with their loads
 * below. Every helper here is static: a program compiles only those it calls
 * (an unused inline helper of external linkage would still be compiled).
 *
 * f16 scales are converted by their bits with ce_half_to_float
 * (loadstore.cl): exact, as ggml's GGML_FP16_TO_FP32, and the same bits on every
 * device (vload_half leaves a NaN's payload to the implementation). Blocks are
 * read as bytes: no alignment is assumed beyond the buffer's. */

#pragma OPENCL FP_CONTRACT OFF

#define CE_STORE_3 uchar
#define CE_STORE_4 uchar
#define CE_STORE_5 uchar
#define CE_STORE_6 uchar

/* value i's block */
#define ce_ptr_3(p, i) ((p) + ((ulong)(i) >> 5) * 34)
#define ce_ptr_4(p, i) ((p) + ((ulong)(i) >> 5) * 18)
#define ce_ptr_5(p, i) ((p) + ((ulong)(i) >> 8) * 144)
#define ce_ptr_6(p, i) ((p) + ((ulong)(i) >> 8) * 210)

/* the f16 at b[0], b[1] (little-endian), as float32 */
static inline float ce_q_half(__global const uchar *b) { return ce_half_to_float((uint)b[0] | ((uint)b[1] << 8)); }

/* Q4_K: get_scale_min_k4(s, scales) with d*sc and dmin*m, as ggml's d1 (d2) and
 * m1 (m2). Without a branch, as three byte loads (a = q[s & 3], b = q[(s & 3) + 4],
 * c = q[(s & 3) + 8]) and selects. */
static CE_INLINE float2 ce_q4_k_scale_min(__global const uchar *blk, uint s) {
  __global const uchar *q = blk + 4 + (s & 3u);
  const uint a = q[0], b = q[4], c = q[8];
  const uint sc = s < 4 ? a & 63u : (c & 0xFu) | ((a >> 6) << 4);
  const uint m = s < 4 ? b & 63u : (c >> 4) | ((b >> 6) << 4);
  const float d = ce_q_half(blk), min = ce_q_half(blk + 2);
  const float d1 = d * (float)sc;
  const float m1 = min * (float)m;
  return (float2)(d1, m1);
}

/* ----------------------------------------------------------- one value */

/* Q8_0: y = qs[j]*d */
static inline float ce_load_3(__global const uchar *p, ulong i) {
  __global const uchar *b = ce_ptr_3(p, i);
  const float d = ce_q_half(b);
  return (float)(char)b[2 + (i & 31)] * d;
}

/* Q4_0: x0 = (qs[j] & 0x0F) - 8 (j < 16), x1 = (qs[j] >> 4) - 8 (value j + 16); y = x*d */
static inline float ce_load_4(__global const uchar *p, ulong i) {
  __global const uchar *b = ce_ptr_4(p, i);
  const float d = ce_q_half(b);
  uint j = (uint)(i & 31), q = b[2 + (j & 15)];
  const int x = (int)(j < 16 ? q & 0x0Fu : q >> 4) - 8;
  return (float)x * d;
}

/* Q4_K: value j of the super-block: 64-value group g = j/64, sub-block 2g (low
 * nibbles of qs[32g .. 32g + 31]) or 2g + 1 (their high nibbles); y = d1*q - m1 */
static inline float ce_load_5(__global const uchar *p, ulong i) {
  __global const uchar *b = ce_ptr_5(p, i);
  uint j = (uint)(i & 255), g = j >> 6, hi = (j >> 5) & 1u, l = j & 31u;
  const float2 dm = ce_q4_k_scale_min(b, 2 * g + hi);
  uint q = b[16 + 32 * g + l];
  q = hi ? q >> 4 : q & 0xFu;
  return dm.x * (float)q - dm.y;
}

/* Q6_K: half n = j/128 (ql += 64n, qh += 32n, sc += 8n), quarter t of it (32
 * values), l = j % 32: the low 4 bits from ql[l + 32(t & 1)] (low nibble for
 * t < 2, high for t >= 2), the high 2 from qh[l] >> 2t, scale sc[l/16 + 2t];
 * q = (int8)(low | high << 4) - 32; y = d * sc * q */
static inline float ce_load_6(__global const uchar *p, ulong i) {
  __global const uchar *b = ce_ptr_6(p, i);
  uint j = (uint)(i & 255), n = j >> 7, t = (j >> 5) & 3u, l = j & 31u;
  uint lo = b[64 * n + l + 32 * (t & 1u)];
  lo = (t >> 1) ? lo >> 4 : lo & 0xFu;
  uint hi = (b[128 + 32 * n + l] >> (2 * t)) & 3u;
  const int q = (int)(lo | (hi << 4)) - 32;
  const float d = ce_q_half(b + 208);
  const int sc = (char)b[192 + 8 * n + (l >> 4) + 2 * t];
  return d * (float)sc * (float)q;
}

/* ----------------------------------------- N consecutive values (4, 8, 16) */

/* ce_T_atN(b, j, scales): the N values of block b from its value j, with the
 * block's scales already decoded (Q8_0, Q4_0: d; Q4_K: the sub-block's d1 and
 * m1 from ce_q4_k_scale_min; Q6_K: d). ce_T_loadN(p, i): value i and the next
 * N - 1. ce_T_load2xN(p, i, a, z): 2N values from i (i a multiple of 2N; 2N
 * divides 32, so they share a block, Q4_K's sub-block scale and Q6_K's
 * quarter) as two vectors, the scales decoded once for both: the same
 * operations as two loadN, so the same bits. */
#define CE_Q_VECTOR_LOADS(N)                                                                        \
  static CE_INLINE float##N ce_q8_0_at##N(__global const uchar *b, uint j, float d) {                     \
    return convert_float##N(vload##N(0, (__global const char *)b + 2 + j)) * d;                     \
  }                                                                                                 \
  static CE_INLINE float##N ce_q4_0_at##N(__global const uchar *b, uint j, float d) {                     \
    uchar##N q = vload##N(0, b + 2 + (j & 15));                                                     \
    q = j < 16 ? q & (uchar)0x0F : q >> (uchar)4;                                                   \
    return convert_float##N(convert_int##N(q) - 8) * d;                                             \
  }                                                                                                 \
  /* value j: 64-value group g = j/64, sub-block 2g + hi; y = d1*q - m1 */                          \
  static CE_INLINE float##N ce_q4_k_at##N(__global const uchar *b, uint j, float2 dm) {                   \
    uint g = j >> 6, hi = (j >> 5) & 1u, l = j & 31u;                                               \
    uchar##N q = vload##N(0, b + 16 + 32 * g + l);                                                  \
    q = hi ? q >> (uchar)4 : q & (uchar)0x0F;                                                       \
    return dm.x * convert_float##N(q) - dm.y;                                                       \
  }                                                                                                 \
  /* value j: half n, quarter t, l as ce_load_6 */                                                  \
  static CE_INLINE float##N ce_q6_k_at##N(__global const uchar *b, uint j, float d) {                     \
    uint n = j >> 7, t = (j >> 5) & 3u, l = j & 31u;                                                \
    uchar##N lo = vload##N(0, b + 64 * n + l + 32 * (t & 1u));                                      \
    lo = (t >> 1) ? lo >> (uchar)4 : lo & (uchar)0x0F;                                              \
    uchar##N hi = (vload##N(0, b + 128 + 32 * n + l) >> (uchar)(2 * t)) & (uchar)3;                 \
    const int##N q = convert_int##N(lo | (hi << (uchar)4)) - 32;                                    \
    const int sc = (char)b[192 + 8 * n + (l >> 4) + 2 * t];                                         \
    const float dsc = d * (float)sc;                                                                \
    return dsc * convert_float##N(q);                                                               \
  }                                                                                                 \
  static inline float##N ce_q8_0_load##N(__global const uchar *p, ulong i) {                              \
    __global const uchar *b = ce_ptr_3(p, i);                                                       \
    return ce_q8_0_at##N(b, (uint)(i & 31), ce_q_half(b));                                          \
  }                                                                                                 \
  static inline float##N ce_q4_0_load##N(__global const uchar *p, ulong i) {                              \
    __global const uchar *b = ce_ptr_4(p, i);                                                       \
    return ce_q4_0_at##N(b, (uint)(i & 31), ce_q_half(b));                                          \
  }                                                                                                 \
  static inline float##N ce_q4_k_load##N(__global const uchar *p, ulong i) {                              \
    __global const uchar *b = ce_ptr_5(p, i);                                                       \
    uint j = (uint)(i & 255);                                                                       \
    return ce_q4_k_at##N(b, j, ce_q4_k_scale_min(b, j >> 5));                                      \
  }                                                                                                 \
  static inline float##N ce_q6_k_load##N(__global const uchar *p, ulong i) {                              \
    __global const uchar *b = ce_ptr_6(p, i);                                                       \
    return ce_q6_k_at##N(b, (uint)(i & 255), ce_q_half(b + 208));                                  \
  }                                                                                                 \
  static CE_INLINE void ce_q8_0_load2x##N(__global const uchar *p, ulong i, float##N *a, float##N *z) {   \
    __global const uchar *b = ce_ptr_3(p, i);                                                       \
    const uint j = (uint)(i & 31);                                                                  \
    const float d = ce_q_half(b);                                                                   \
    *a = ce_q8_0_at##N(b, j, d);                                                                    \
    *z = ce_q8_0_at##N(b, j + N, d);                                                                \
  }                                                                                                 \
  static CE_INLINE void ce_q4_0_load2x##N(__global const uchar *p, ulong i, float##N *a, float##N *z) {   \
    __global const uchar *b = ce_ptr_4(p, i);                                                       \
    const uint j = (uint)(i & 31);                                                                  \
    const float d = ce_q_half(b);                                                                   \
    *a = ce_q4_0_at##N(b, j, d);                                                                    \
    *z = ce_q4_0_at##N(b, j + N, d);                                                                \
  }                                                                                                 \
  static CE_INLINE void ce_q4_k_load2x##N(__global const uchar *p, ulong i, float##N *a, float##N *z) {   \
    __global const uchar *b = ce_ptr_5(p, i);                                                       \
    const uint j = (uint)(i & 255);                                                                 \
    const float2 dm = ce_q4_k_scale_min(b, j >> 5);                                                 \
    *a = ce_q4_k_at##N(b, j, dm);                                                                   \
    *z = ce_q4_k_at##N(b, j + N, dm);                                                               \
  }                                                                                                 \
  static CE_INLINE void ce_q6_k_load2x##N(__global const uchar *p, ulong i, float##N *a, float##N *z) {   \
    __global const uchar *b = ce_ptr_6(p, i);                                                       \
    const uint j = (uint)(i & 255);                                                                 \
    const float d = ce_q_half(b + 208);                                                             \
    *a = ce_q6_k_at##N(b, j, d);                                                                    \
    *z = ce_q6_k_at##N(b, j + N, d);                                                                \
  }

CE_Q_VECTOR_LOADS(4)
CE_Q_VECTOR_LOADS(8)
CE_Q_VECTOR_LOADS(16)

static inline float4 ce_load4_3(__global const uchar *p, ulong base, ulong j) { return ce_q8_0_load4(p, base + 4 * j); }
static inline float4 ce_load4_4(__global const uchar *p, ulong base, ulong j) { return ce_q4_0_load4(p, base + 4 * j); }
static inline float4 ce_load4_5(__global const uchar *p, ulong base, ulong j) { return ce_q4_k_load4(p, base + 4 * j); }
static inline float4 ce_load4_6(__global const uchar *p, ulong base, ulong j) { return ce_q6_k_load4(p, base + 4 * j); }

/* (spelled out: a name built with CE_XCAT here would not expand inside the
 * families' own CE_XCAT(ce_loadv_, TABLE_DT)) */
#if defined(VEC) && VEC == 4
#define ce_loadv_3 ce_q8_0_load4
#define ce_loadv_4 ce_q4_0_load4
#define ce_loadv_5 ce_q4_k_load4
#define ce_loadv_6 ce_q6_k_load4
#define ce_loadw_3(p, o, a, b) ce_q8_0_load2x4(p, o, &(a), &(b))
#define ce_loadw_4(p, o, a, b) ce_q4_0_load2x4(p, o, &(a), &(b))
#define ce_loadw_5(p, o, a, b) ce_q4_k_load2x4(p, o, &(a), &(b))
#define ce_loadw_6(p, o, a, b) ce_q6_k_load2x4(p, o, &(a), &(b))
#elif defined(VEC) && VEC == 8
#define ce_loadv_3 ce_q8_0_load8
#define ce_loadv_4 ce_q4_0_load8
#define ce_loadv_5 ce_q4_k_load8
#define ce_loadv_6 ce_q6_k_load8
#define ce_loadw_3(p, o, a, b) ce_q8_0_load2x8(p, o, &(a), &(b))
#define ce_loadw_4(p, o, a, b) ce_q4_0_load2x8(p, o, &(a), &(b))
#define ce_loadw_5(p, o, a, b) ce_q4_k_load2x8(p, o, &(a), &(b))
#define ce_loadw_6(p, o, a, b) ce_q6_k_load2x8(p, o, &(a), &(b))
#elif defined(VEC) && VEC == 16
#define ce_loadv_3 ce_q8_0_load16
#define ce_loadv_4 ce_q4_0_load16
#define ce_loadv_5 ce_q4_k_load16
#define ce_loadv_6 ce_q6_k_load16
#define ce_loadw_3(p, o, a, b) ce_q8_0_load2x16(p, o, &(a), &(b))
#define ce_loadw_4(p, o, a, b) ce_q4_0_load2x16(p, o, &(a), &(b))
#define ce_loadw_5(p, o, a, b) ce_q4_k_load2x16(p, o, &(a), &(b))
#define ce_loadw_6(p, o, a, b) ce_q6_k_load2x16(p, o, &(a), &(b))
#endif

/* ===================================================== ggml's other types
 *
 * dtype codes and blocks (byte offsets), byte for byte as ggml-common.h:
 *    7 Q4_1     32 values,  20 bytes: d 0, m 2, qs[16] 4          y = q*d + m
 *    8 Q5_0     32 values,  22 bytes: d 0, qh 2 (uint32), qs[16] 6  y = (q | h << 4) - 16)*d
 *    9 Q5_1     32 values,  24 bytes: d 0, m 2, qh 4, qs[16] 8     y = (q | h << 4)*d + m
 *   10 Q2_K    256 values,  84 bytes: scales[16] 0, qs[64] 16, d 80, dmin 82
 *   11 Q3_K    256 values, 110 bytes: hmask[32] 0, qs[64] 32, scales[12] 96, d 108
 *   12 Q5_K    256 values, 176 bytes: d 0, dmin 2, scales[12] 4, qh[32] 16, qs[128] 48
 *   13 IQ4_NL   32 values,  18 bytes: d 0, qs[16] 2                y = d*kvalues[q]
 *   14 IQ4_XS  256 values, 136 bytes: d 0, scales_h 2, scales_l[4] 4, qs[128] 8
 *   15 IQ2_XXS 256 values,  66 bytes: d 0, qs 2 (per 32 values: 4 grid indices, a uint32 of
 *                                     4 7-bit sign codes and a 4-bit scale)
 *   16 IQ2_XS  256 values,  74 bytes: d 0, qs[32] 2 (uint16: 9-bit index, 7-bit sign code), scales[8] 66
 *   17 IQ2_S   256 values,  82 bytes: d 0, qs[32] 2, signs[32] 34, qh[8] 66, scales[8] 74
 *   18 IQ3_XXS 256 values,  98 bytes: d 0, qs[64] 2, scales and signs (uint32 per 32 values) 66
 *   19 IQ3_S   256 values, 110 bytes: d 0, qs[64] 2, qh[8] 66, signs[32] 74, scales[4] 106
 *   20 IQ1_S   256 values,  50 bytes: d 0, qs[32] 2, qh[8] 34 (uint16)
 *   21 IQ1_M   256 values,  56 bytes: qs[32] 0, qh[16] 32, scales[8] 48 (d: their top nibbles)
 *   22 TQ1_0   256 values,  54 bytes: qs[48] 0 (5 ternary digits a byte), qh[4] 48 (4 a byte), d 52
 *   23 TQ2_0   256 values,  66 bytes: qs[64] 0 (2 bits a value), d 64         y = (q - 1)*d
 *   24 MXFP4    32 values,  17 bytes: e 0 (E8M0), qs[16] 1    y = kvalues_mxfp4[q]*2^(e - 128)
 * Each value is computed with ggml's operations in ggml's order (its
 * dequantize_row_*: the integer arithmetic, then the float32 products and sums
 * as written, e.g. IQ2_XXS's (db * grid) * sign with db = d * (0.5 + s) * 0.25).
 *
 * ce_NAME_atN(b, j) gives the N values (4, 8, 16) of block b from its value j
 * (j a multiple of N): 16 values share every scale of the legacy and K types
 * (Q2_K's and Q3_K's scales are per 16 values); the grid types are computed
 * 8 values at a time (one grid entry, or two of IQ3's 4-value entries, and one
 * sign byte), 16 as two such groups. The IQ4, grid and MXFP4 types' tables are
 * iqtables.cl's, present only in a program that reads their dtype
 * (CE_TABLES_FOR there), and so are these types' functions. */

#define CE_QCAT(a, b) a##b
#define CE_QXCAT(a, b) CE_QCAT(a, b) /* (not CE_XCAT: these expand inside a family's CE_XCAT) */

#define CE_LANES4 (uint4)(0, 1, 2, 3)
#define CE_LANES8 (uint8)(0, 1, 2, 3, 4, 5, 6, 7)
#define CE_LANES16 (uint16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)

static inline uint ce_q_u16(__global const uchar *b) { return (uint)b[0] | ((uint)b[1] << 8); }
static inline uint ce_q_u32(__global const uchar *b) { return ce_q_u16(b) | (ce_q_u16(b + 2) << 16); }

#define CE_STORE_7 uchar
#define CE_STORE_8 uchar
#define CE_STORE_9 uchar
#define CE_STORE_10 uchar
#define CE_STORE_11 uchar
#define CE_STORE_12 uchar
#define CE_STORE_13 uchar
#define CE_STORE_14 uchar
#define CE_STORE_15 uchar
#define CE_STORE_16 uchar
#define CE_STORE_17 uchar
#define CE_STORE_18 uchar
#define CE_STORE_19 uchar
#define CE_STORE_20 uchar
#define CE_STORE_21 uchar
#define CE_STORE_22 uchar
#define CE_STORE_23 uchar
#define CE_STORE_24 uchar
#define ce_ptr_7(p, i) ((p) + ((ulong)(i) >> 5) * 20)
#define ce_ptr_8(p, i) ((p) + ((ulong)(i) >> 5) * 22)
#define ce_ptr_9(p, i) ((p) + ((ulong)(i) >> 5) * 24)
#define ce_ptr_10(p, i) ((p) + ((ulong)(i) >> 8) * 84)
#define ce_ptr_11(p, i) ((p) + ((ulong)(i) >> 8) * 110)
#define ce_ptr_12(p, i) ((p) + ((ulong)(i) >> 8) * 176)
#define ce_ptr_13(p, i) ((p) + ((ulong)(i) >> 5) * 18)
#define ce_ptr_14(p, i) ((p) + ((ulong)(i) >> 8) * 136)
#define ce_ptr_15(p, i) ((p) + ((ulong)(i) >> 8) * 66)
#define ce_ptr_16(p, i) ((p) + ((ulong)(i) >> 8) * 74)
#define ce_ptr_17(p, i) ((p) + ((ulong)(i) >> 8) * 82)
#define ce_ptr_18(p, i) ((p) + ((ulong)(i) >> 8) * 98)
#define ce_ptr_19(p, i) ((p) + ((ulong)(i) >> 8) * 110)
#define ce_ptr_20(p, i) ((p) + ((ulong)(i) >> 8) * 50)
#define ce_ptr_21(p, i) ((p) + ((ulong)(i) >> 8) * 56)
#define ce_ptr_22(p, i) ((p) + ((ulong)(i) >> 8) * 54)
#define ce_ptr_23(p, i) ((p) + ((ulong)(i) >> 8) * 66)
#define ce_ptr_24(p, i) ((p) + ((ulong)(i) >> 5) * 17)

/* Q3_K's 6-bit scale `is` (0..15), minus 32: ggml's unpacking of scales[12]
 * into aux[4], byte `is` of it: the low 4 bits from byte is % 8 (its low
 * nibble for is < 8, else its high one), the high 2 from byte 8 + is % 4,
 * bits 2 (is / 4) and up. */
static CE_INLINE int ce_q3_k_scale(__global const uchar *b, uint is) {
  const uint x = b[96 + (is & 7u)];
  const uint lo = is < 8 ? x & 0xFu : x >> 4;
  const uint hi = (b[104 + (is & 3u)] >> (2 * (is >> 2))) & 3u;
  return (int)(lo | (hi << 4)) - 32;
}

/* The legacy and K types, N values from value j of block b. */
#define CE_Q_OTHER_AT(N)                                                                               \
  /* Q4_1: x0*d + m */                                                                                 \
  static CE_INLINE float##N ce_q4_1_at##N(__global const uchar *b, uint j) {                                 \
    uchar##N q = vload##N(0, b + 4 + (j & 15));                                                        \
    q = j < 16 ? q & (uchar)0x0F : q >> (uchar)4;                                                      \
    const float d = ce_q_half(b), m = ce_q_half(b + 2);                                                \
    return convert_float##N(q) * d + m;                                                                \
  }                                                                                                    \
  /* Q5_0, Q5_1: value j's fifth bit is bit j of qh (ggml's xh_0, xh_1) */                             \
  static CE_INLINE int##N ce_q5_quant##N(__global const uchar *qh, __global const uchar *qs, uint j) {        \
    uchar##N q = vload##N(0, qs + (j & 15));                                                           \
    q = j < 16 ? q & (uchar)0x0F : q >> (uchar)4;                                                      \
    const uint##N h = ((uint##N)(ce_q_u32(qh) >> j) >> CE_LANES##N) & 1u;                              \
    return convert_int##N(q) | convert_int##N(h << 4);                                                 \
  }                                                                                                    \
  static CE_INLINE float##N ce_q5_0_at##N(__global const uchar *b, uint j) {                                 \
    const int##N x = ce_q5_quant##N(b + 2, b + 6, j) - 16;                                             \
    return convert_float##N(x) * ce_q_half(b);                                                         \
  }                                                                                                    \
  static CE_INLINE float##N ce_q5_1_at##N(__global const uchar *b, uint j) {                                 \
    const int##N x = ce_q5_quant##N(b + 4, b + 8, j);                                                  \
    const float d = ce_q_half(b), m = ce_q_half(b + 2);                                                \
    return convert_float##N(x) * d + m;                                                                \
  }                                                                                                    \
  /* Q2_K: value j: scale byte j/16 (dl = d*(sc & 15), ml = dmin*(sc >> 4)), 2 bits of               \
   * qs[32(j/128) + j%32] at 2((j/32) % 4); y = dl*q - ml */                                           \
  static CE_INLINE float##N ce_q2_k_at##N(__global const uchar *b, uint j) {                                 \
    const uint sc = b[j >> 4];                                                                         \
    const float d = ce_q_half(b + 80), min = ce_q_half(b + 82);                                        \
    const float dl = d * (float)(sc & 0xFu), ml = min * (float)(sc >> 4);                              \
    const uchar##N q = (vload##N(0, b + 16 + 32 * (j >> 7) + (j & 31)) >> (uchar)(2 * ((j >> 5) & 3u))) & \
                       (uchar)3;                                                                       \
    return dl * convert_float##N(q) - ml;                                                              \
  }                                                                                                    \
  /* Q3_K: as Q2_K's 2 bits, minus 4 where bit j/32 of hmask[j%32] is clear; y = dl*q with             \
   * dl = d*(scale - 32) */                                                                            \
  static CE_INLINE float##N ce_q3_k_at##N(__global const uchar *b, uint j) {                                 \
    const float dl = ce_q_half(b + 108) * (float)ce_q3_k_scale(b, j >> 4);                             \
    const uchar##N q = (vload##N(0, b + 32 + 32 * (j >> 7) + (j & 31)) >> (uchar)(2 * ((j >> 5) & 3u))) & \
                       (uchar)3;                                                                       \
    const uchar##N h = (vload##N(0, b + (j & 31)) >> (uchar)(j >> 5)) & (uchar)1;                      \
    return dl * convert_float##N(convert_int##N(q) - 4 + (convert_int##N(h) << 2));                    \
  }                                                                                                    \
  /* Q5_K: Q4_K's scales (dm: ce_q4_k_scale_min's d1, m1 of sub-block j/32) and nibbles (at 48),     \
   * plus 16 where bit j/32 of qh[j%32] is set */                                                      \
  static CE_INLINE float##N ce_q5_k_dm##N(__global const uchar *b, uint j, float2 dm) {               \
    uchar##N q = vload##N(0, b + 48 + 32 * (j >> 6) + (j & 31));                                       \
    q = ((j >> 5) & 1u) ? q >> (uchar)4 : q & (uchar)0x0F;                                             \
    const uchar##N h = (vload##N(0, b + 16 + (j & 31)) >> (uchar)(j >> 5)) & (uchar)1;                 \
    return dm.x * convert_float##N(q + (h << (uchar)4)) - dm.y;                                        \
  }                                                                                                    \
  static CE_INLINE float##N ce_q5_k_at##N(__global const uchar *b, uint j) {                          \
    return ce_q5_k_dm##N(b, j, ce_q4_k_scale_min(b, j >> 5));                                          \
  }                                                                                                    \
  /* 2N values from j (a multiple of 2N, within one 32-value sub-block): its scales decoded once */   \
  static CE_INLINE void ce_q5_k_at2x##N(__global const uchar *b, uint j, float##N *a, float##N *z) {  \
    const float2 dm = ce_q4_k_scale_min(b, j >> 5);                                                    \
    *a = ce_q5_k_dm##N(b, j, dm);                                                                      \
    *z = ce_q5_k_dm##N(b, j + N, dm);                                                                  \
  }

CE_Q_OTHER_AT(4)
CE_Q_OTHER_AT(8)
CE_Q_OTHER_AT(16)

/* TQ1_0's 3^n modulo 256 (ggml's pow3[n], n <= 4) */
static inline uint ce_tq_pow3(uint n) { return (uint)(0xF3511B090301UL >> (8 * n)) & 0xFFu; }

/* The ternary types, N values from value j of block b: y = (t - 1)*d for a digit t of 0, 1, 2. */
#define CE_Q_TERNARY_AT(N)                                                                              \
  /* TQ1_0: values 0..159 digit j/32 of qs[j%32], 160..239 digit (j-160)/16 of qs[32 + j%16]      \
   * (N values share the digit), 240..255 digit (j-240)/4 of qh[j%4] (lane k: digit              \
   * (j-240)/4 + k/4 of qh[k%4]); digit n of byte x: t = ((uchar)(x*3^n)*3) >> 8, as ggml */       \
  static CE_INLINE float##N ce_tq1_0_at##N(__global const uchar *b, uint j) {                          \
    uchar##N x, p;                                                                                     \
    if (j < 160) {                                                                                     \
      x = vload##N(0, b + (j & 31u));                                                                  \
      p = (uchar##N)((uchar)ce_tq_pow3(j >> 5));                                                       \
    } else if (j < 240) {                                                                              \
      x = vload##N(0, b + 32 + (j & 15u));                                                             \
      p = (uchar##N)((uchar)ce_tq_pow3((j - 160) >> 4));                                               \
    } else {                                                                                           \
      x = shuffle(vload4(0, b + 48), convert_uchar##N(CE_LANES##N & 3u));                              \
      const uint##N n = (uint##N)((j - 240) >> 2) + (CE_LANES##N >> 2);                                \
      p = convert_uchar##N(((uint##N)(0x1B090301u) >> (8u * n)) & 0xFFu);                              \
    }                                                                                                  \
    const uchar##N q = x * p; /* modulo 256, as ggml's uint8_t q */                                    \
    const int##N t = convert_int##N((convert_ushort##N(q) * (ushort)3) >> (ushort)8);                  \
    return convert_float##N(t - 1) * ce_q_half(b + 52);                                                \
  }                                                                                                    \
  /* TQ2_0: 2 bits of qs[32(j/128) + j%32] at 2((j/32) % 4) */                                         \
  static CE_INLINE float##N ce_tq2_0_at##N(__global const uchar *b, uint j) {                          \
    const uchar##N q = (vload##N(0, b + 32 * (j >> 7) + (j & 31u)) >> (uchar)(2 * ((j >> 5) & 3u))) & \
                       (uchar)3;                                                                       \
    return convert_float##N(convert_int##N(q) - 1) * ce_q_half(b + 64);                                \
  }
CE_Q_TERNARY_AT(4)
CE_Q_TERNARY_AT(8)
CE_Q_TERNARY_AT(16)

/* IQ4_NL and IQ4_XS: N values j.. of 16 nibbles from qs (low nibbles for j < 16 of their 32),
 * each mapped through kvalues_iq4nl and multiplied by d: d * kvalues[q] */
#if CE_TABLES_FOR(13) || CE_TABLES_FOR(14)
#define CE_Q_IQ4_AT(N)                                                                                 \
  static CE_INLINE float##N ce_iq4_values##N(__global const uchar *qs, uint j, float d) {                    \
    float t[N];                                                                                        \
    for (uint k = 0; k < N; k++) {                                                                     \
      const uint q = qs[(j + k) & 15];                                                                 \
      t[k] = (float)ce_kvalues_iq4nl[j < 16 ? q & 0xFu : q >> 4];                                      \
    }                                                                                                  \
    return d * vload##N(0, t);                                                                         \
  }                                                                                                    \
  static CE_INLINE float##N ce_iq4_nl_at##N(__global const uchar *b, uint j) {                               \
    return ce_iq4_values##N(b + 2, j, ce_q_half(b));                                                   \
  }                                                                                                    \
  /* IQ4_XS: sub-block ib = j/32, 6-bit scale ls (4 bits of scales_l, 2 of scales_h);             \
   * dl = d*(ls - 32) */                                                                               \
  static CE_INLINE float##N ce_iq4_xs_at##N(__global const uchar *b, uint j) {                               \
    const uint ib = j >> 5;                                                                            \
    const uint ls = ((b[4 + (ib >> 1)] >> (4 * (ib & 1u))) & 0xFu) | (((ce_q_u16(b + 2) >> (2 * ib)) & 3u) << 4); \
    const float dl = ce_q_half(b) * (float)((int)ls - 32);                                             \
    return ce_iq4_values##N(b + 8 + 16 * ib, j & 31, dl);                                              \
  }
CE_Q_IQ4_AT(4)
CE_Q_IQ4_AT(8)
CE_Q_IQ4_AT(16)
#endif

/* MXFP4: N values j.. of its 16 nibbles (low nibbles for j < 16), k = kvalues_mxfp4[q], times
 * d = 2^(e - 128) (ggml's GGML_E8M0_TO_FP32_HALF: the float of bits (e - 1) << 23 for e >= 2, the
 * subnormal 2^-128 and 2^-127 for e 0 and 1). ggml's k*d is exact (k has at most 2 significant
 * bits) but past FLT_MAX (an infinity); for e < 2 it is computed here as (k * 2^-126) * 2^(e - 2):
 * the same value, with no subnormal operand (a device that flushes them still gets those of the
 * products that are normal). */
#if CE_TABLES_FOR(24)
#define CE_Q_MXFP4_AT(N)                                                                               \
  static CE_INLINE float##N ce_mxfp4_at##N(__global const uchar *b, uint j) {                          \
    float t[N];                                                                                        \
    for (uint k = 0; k < N; k++) {                                                                     \
      const uint q = b[1 + ((j + k) & 15)];                                                            \
      t[k] = (float)ce_kvalues_fp4[j < 16 ? q & 0xFu : q >> 4];                                        \
    }                                                                                                  \
    const uint e = b[0];                                                                               \
    if (e >= 2) return vload##N(0, t) * as_float((e - 1) << 23);                                       \
    return (vload##N(0, t) * 0x1p-126f) * (e ? 0.5f : 0.25f);                                          \
  }
CE_Q_MXFP4_AT(4)
CE_Q_MXFP4_AT(8)
CE_Q_MXFP4_AT(16)
#endif

/* The grid types: 8 values (a group g = j/8, j a multiple of 8). */

/* the bytes of a grid entry (byte k: bits 8k..8k+7) */
static CE_INLINE uchar8 ce_grid_bytes8(ulong e) {
  const uint lo = (uint)e, hi = (uint)(e >> 32);
  return convert_uchar8(((uint8)(lo, lo, lo, lo, hi, hi, hi, hi) >> (uint8)(0, 8, 16, 24, 0, 8, 16, 24)) & 0xFFu);
}
static CE_INLINE uchar4 ce_grid_bytes4(uint e) { return convert_uchar4(((uint4)(e) >> (uint4)(0, 8, 16, 24)) & 0xFFu); }
/* (db * grid byte k) * (bit k of signs ? -1 : 1), as ggml */
static CE_INLINE float8 ce_iq_signed8(float db, uchar8 g, uint signs) {
  const float8 s = convert_float8(1 - 2 * convert_int8(((uint8)(signs) >> CE_LANES8) & 1u));
  return db * convert_float8(g) * s;
}
/* dl * (grid value + delta), grid values int8 (IQ1_S, IQ1_M) */
static CE_INLINE float8 ce_iq1_values8(float dl, ulong e, float delta) {
  return dl * (convert_float8(as_char8(ce_grid_bytes8(e))) + delta);
}

#if CE_TABLES_FOR(15)
/* IQ2_XXS: per 32 values 8 bytes: 4 grid indices, then a uint32 aux (4 7-bit sign codes, a
 * 4-bit scale in the top bits); db = d * (0.5 + aux >> 28) * 0.25 */
static CE_INLINE float8 ce_iq2_xxs_at8(__global const uchar *b, uint j) {
  __global const uchar *q = b + 2 + 8 * (j >> 5);
  const uint l = (j >> 3) & 3u, aux = ce_q_u32(q + 4);
  const float db = ce_q_half(b) * (0.5f + (float)(aux >> 28)) * 0.25f;
  return ce_iq_signed8(db, ce_grid_bytes8(ce_iq2xxs_grid[q[l]]), ce_ksigns_iq2xs[(aux >> (7 * l)) & 127u]);
}
#endif
#if CE_TABLES_FOR(16)
/* IQ2_XS: uint16 qs: 9-bit grid index, 7-bit sign code; a scale nibble per 16 values */
static CE_INLINE float8 ce_iq2_xs_at8(__global const uchar *b, uint j) {
  const uint ib = j >> 5, l = (j >> 3) & 3u, qs = ce_q_u16(b + 2 + 2 * (4 * ib + l)), sc = b[66 + ib];
  const float db = ce_q_half(b) * (0.5f + (float)(l < 2 ? sc & 0xFu : sc >> 4)) * 0.25f;
  return ce_iq_signed8(db, ce_grid_bytes8(ce_iq2xs_grid[qs & 511u]), ce_ksigns_iq2xs[qs >> 9]);
}
#endif
#if CE_TABLES_FOR(17)
/* IQ2_S: a 10-bit grid index (qs, and 2 bits of qh), a sign byte */
static CE_INLINE float8 ce_iq2_s_at8(__global const uchar *b, uint j) {
  const uint ib = j >> 5, l = (j >> 3) & 3u, sc = b[74 + ib];
  const float db = ce_q_half(b) * (0.5f + (float)(l < 2 ? sc & 0xFu : sc >> 4)) * 0.25f;
  const uint idx = b[2 + 4 * ib + l] | (((uint)b[66 + ib] << (8 - 2 * l)) & 0x300u);
  return ce_iq_signed8(db, ce_grid_bytes8(ce_iq2s_grid[idx]), b[34 + 4 * ib + l]);
}
#endif
#if CE_TABLES_FOR(18)
/* IQ3_XXS: two 4-value grid entries per 8 values; db = d * (0.5 + aux >> 28) * 0.5 */
static CE_INLINE float8 ce_iq3_xxs_at8(__global const uchar *b, uint j) {
  const uint ib = j >> 5, l = (j >> 3) & 3u, aux = ce_q_u32(b + 66 + 4 * ib);
  const float db = ce_q_half(b) * (0.5f + (float)(aux >> 28)) * 0.5f;
  __global const uchar *q = b + 2 + 8 * ib + 2 * l;
  const uchar8 g = (uchar8)(ce_grid_bytes4(ce_iq3xxs_grid[q[0]]), ce_grid_bytes4(ce_iq3xxs_grid[q[1]]));
  return ce_iq_signed8(db, g, ce_ksigns_iq2xs[(aux >> (7 * l)) & 127u]);
}
#endif
#if CE_TABLES_FOR(19)
/* IQ3_S: two 9-bit grid indices (qs, and bits 2l, 2l + 1 of qh), a sign byte;
 * db = d * (1 + 2 * scale nibble) */
static CE_INLINE float8 ce_iq3_s_at8(__global const uchar *b, uint j) {
  const uint ib = j >> 5, l = (j >> 3) & 3u, qh = b[66 + ib];
  const float db = ce_q_half(b) * (float)(1 + 2 * ((b[106 + (ib >> 1)] >> (4 * (ib & 1u))) & 0xFu));
  __global const uchar *q = b + 2 + 8 * ib + 2 * l;
  const uint i1 = q[0] | ((qh << (8 - 2 * l)) & 256u), i2 = q[1] | ((qh << (7 - 2 * l)) & 256u);
  const uchar8 g = (uchar8)(ce_grid_bytes4(ce_iq3s_grid[i1]), ce_grid_bytes4(ce_iq3s_grid[i2]));
  return ce_iq_signed8(db, g, b[74 + 4 * ib + l]);
}
#endif
#if CE_TABLES_FOR(20)
/* IQ1_S: an 11-bit grid index (qs, 3 bits of the sub-block's uint16 qh); dl = d * (2 * (qh >> 12
 * & 7) + 1), delta -0.125 where bit 15 of qh is set, else 0.125 */
static CE_INLINE float8 ce_iq1_s_at8(__global const uchar *b, uint j) {
  const uint ib = j >> 5, l = (j >> 3) & 3u, qh = ce_q_u16(b + 34 + 2 * ib);
  const float dl = ce_q_half(b) * (float)(2 * ((qh >> 12) & 7u) + 1);
  const float delta = (qh & 0x8000u) ? -IQ1S_DELTA : IQ1S_DELTA;
  return ce_iq1_values8(dl, ce_iq1s_grid[b[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7u) << 8)], delta);
}
#endif
#if CE_TABLES_FOR(21)
/* IQ1_M: d is the f16 of the scales' four top nibbles; a 3-bit scale per 16 values, a
 * 3-bit index part and a delta bit per 8 values in qh */
static CE_INLINE float8 ce_iq1_m_at8(__global const uchar *b, uint j) {
  const uint ib = j >> 5, l = (j >> 3) & 3u;
  const uint scale = (ce_q_u16(b + 48) >> 12) | ((ce_q_u16(b + 50) >> 8) & 0x00F0u) |
                     ((ce_q_u16(b + 52) >> 4) & 0x0F00u) | (ce_q_u16(b + 54) & 0xF000u);
  const float d = ce_half_to_float(scale);
  const uint s = ce_q_u16(b + 48 + 2 * (ib >> 1));
  const float dl = d * (float)(2 * ((s >> (6 * (ib & 1u) + (l < 2 ? 0u : 3u))) & 0x7u) + 1);
  const uint qh = b[32 + 2 * ib + (l >> 1)];
  const uint idx = b[4 * ib + l] | (((l & 1u) ? qh << 4 : qh << 8) & 0x700u);
  const float delta = (qh & ((l & 1u) ? 0x80u : 0x08u)) ? -IQ1S_DELTA : IQ1S_DELTA;
  return ce_iq1_values8(dl, ce_iq1s_grid[idx], delta);
}
#endif

/* 4 and 16 values of a grid type from its 8-value groups */
#define CE_Q_AT_FROM8(name)                                                            \
  static CE_INLINE float4 ce_##name##_at4(__global const uchar *b, uint j) {                 \
    const float8 v = ce_##name##_at8(b, j & ~7u);                                      \
    return (j & 4u) ? v.hi : v.lo;                                                     \
  }                                                                                    \
  static CE_INLINE float16 ce_##name##_at16(__global const uchar *b, uint j) {               \
    return (float16)(ce_##name##_at8(b, j), ce_##name##_at8(b, j + 8));                \
  }

/* 2N values from j as two vectors, ce_NAME_at2xN (a type whose 2N values share
 * scales worth decoding once defines its own, as Q5_K above) */
#define CE_Q_AT2X(name)                                                                                 \
  CE_Q_AT2X_N(name, 4)                                                                                  \
  CE_Q_AT2X_N(name, 8)                                                                                  \
  CE_Q_AT2X_N(name, 16)
#define CE_Q_AT2X_N(name, N)                                                                            \
  static CE_INLINE void ce_##name##_at2x##N(__global const uchar *b, uint j, float##N *a, float##N *z) { \
    *a = ce_##name##_at##N(b, j);                                                                       \
    *z = ce_##name##_at##N(b, j + N);                                                                   \
  }

/* The loads of a type from its ce_NAME_atN and ce_NAME_at2xN: value i
 * (ce_load_T), 4 values (ce_load4_T), VEC values (ce_loadv_T) and 2 VEC values
 * as two vectors (ce_loadw_T), each from the block holding value i; `mask` is
 * the block's values - 1. */
#define CE_Q_LOADS_N(name, code, mask, N)                                                               \
  static inline float##N ce_##name##_load##N(__global const uchar *p, ulong i) {                              \
    return ce_##name##_at##N(ce_ptr_##code(p, i), (uint)(i & mask));                                    \
  }                                                                                                     \
  static CE_INLINE void ce_##name##_load2x##N(__global const uchar *p, ulong i, float##N *a, float##N *z) {   \
    ce_##name##_at2x##N(ce_ptr_##code(p, i), (uint)(i & mask), a, z);                                   \
  }
#define CE_Q_LOADS(name, code, mask) CE_Q_AT2X(name) CE_Q_LOADS_OWN2X(name, code, mask)
#define CE_Q_LOADS_OWN2X(name, code, mask) /* the type defines its ce_NAME_at2xN */                     \
  CE_Q_LOADS_N(name, code, mask, 4)                                                                     \
  CE_Q_LOADS_N(name, code, mask, 8)                                                                     \
  CE_Q_LOADS_N(name, code, mask, 16)                                                                    \
  static inline float ce_load_##code(__global const uchar *p, ulong i) {                                      \
    const float4 v = ce_##name##_load4(p, i & ~(ulong)3);                                               \
    const uint k = (uint)(i & 3); /* (by its bits: Oclgrind 21.10 picks wrong from k == 0 ? .. : k == 1 ? ..) */ \
    return (k & 2u) ? ((k & 1u) ? v.w : v.z) : ((k & 1u) ? v.y : v.x);                                  \
  }                                                                                                     \
  static inline float4 ce_load4_##code(__global const uchar *p, ulong base, ulong j) {                        \
    return ce_##name##_load4(p, base + 4 * j);                                                          \
  }

/* a grid type's loads, from its 8-value groups */
#define CE_Q_GRID_LOADS(name, code) CE_Q_AT_FROM8(name) CE_Q_LOADS(name, code, 255)

CE_Q_LOADS(q4_1, 7, 31)
CE_Q_LOADS(q5_0, 8, 31)
CE_Q_LOADS(q5_1, 9, 31)
CE_Q_LOADS(q2_k, 10, 255)
CE_Q_LOADS(q3_k, 11, 255)
CE_Q_LOADS_OWN2X(q5_k, 12, 255)
#if CE_TABLES_FOR(13) || CE_TABLES_FOR(14)
CE_Q_LOADS(iq4_nl, 13, 31)
CE_Q_LOADS(iq4_xs, 14, 255)
#endif
#if CE_TABLES_FOR(15)
CE_Q_GRID_LOADS(iq2_xxs, 15)
#endif
#if CE_TABLES_FOR(16)
CE_Q_GRID_LOADS(iq2_xs, 16)
#endif
#if CE_TABLES_FOR(17)
CE_Q_GRID_LOADS(iq2_s, 17)
#endif
#if CE_TABLES_FOR(18)
CE_Q_GRID_LOADS(iq3_xxs, 18)
#endif
#if CE_TABLES_FOR(19)
CE_Q_GRID_LOADS(iq3_s, 19)
#endif
#if CE_TABLES_FOR(20)
CE_Q_GRID_LOADS(iq1_s, 20)
#endif
#if CE_TABLES_FOR(21)
CE_Q_GRID_LOADS(iq1_m, 21)
#endif
CE_Q_LOADS(tq1_0, 22, 255)
CE_Q_LOADS(tq2_0, 23, 255)
#if CE_TABLES_FOR(24)
CE_Q_LOADS(mxfp4, 24, 31)
#endif

/* VEC values and 2 VEC values (a macro of VEC, which the program defines) */
#define ce_loadv_7(p, o) CE_QXCAT(ce_q4_1_load, VEC)(p, o)
#define ce_loadv_8(p, o) CE_QXCAT(ce_q5_0_load, VEC)(p, o)
#define ce_loadv_9(p, o) CE_QXCAT(ce_q5_1_load, VEC)(p, o)
#define ce_loadv_10(p, o) CE_QXCAT(ce_q2_k_load, VEC)(p, o)
#define ce_loadv_11(p, o) CE_QXCAT(ce_q3_k_load, VEC)(p, o)
#define ce_loadv_12(p, o) CE_QXCAT(ce_q5_k_load, VEC)(p, o)
#define ce_loadv_13(p, o) CE_QXCAT(ce_iq4_nl_load, VEC)(p, o)
#define ce_loadv_14(p, o) CE_QXCAT(ce_iq4_xs_load, VEC)(p, o)
#define ce_loadv_15(p, o) CE_QXCAT(ce_iq2_xxs_load, VEC)(p, o)
#define ce_loadv_16(p, o) CE_QXCAT(ce_iq2_xs_load, VEC)(p, o)
#define ce_loadv_17(p, o) CE_QXCAT(ce_iq2_s_load, VEC)(p, o)
#define ce_loadv_18(p, o) CE_QXCAT(ce_iq3_xxs_load, VEC)(p, o)
#define ce_loadv_19(p, o) CE_QXCAT(ce_iq3_s_load, VEC)(p, o)
#define ce_loadv_20(p, o) CE_QXCAT(ce_iq1_s_load, VEC)(p, o)
#define ce_loadv_21(p, o) CE_QXCAT(ce_iq1_m_load, VEC)(p, o)
#define ce_loadv_22(p, o) CE_QXCAT(ce_tq1_0_load, VEC)(p, o)
#define ce_loadv_23(p, o) CE_QXCAT(ce_tq2_0_load, VEC)(p, o)
#define ce_loadv_24(p, o) CE_QXCAT(ce_mxfp4_load, VEC)(p, o)
#define ce_loadw_7(p, o, a, b) CE_QXCAT(ce_q4_1_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_8(p, o, a, b) CE_QXCAT(ce_q5_0_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_9(p, o, a, b) CE_QXCAT(ce_q5_1_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_10(p, o, a, b) CE_QXCAT(ce_q2_k_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_11(p, o, a, b) CE_QXCAT(ce_q3_k_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_12(p, o, a, b) CE_QXCAT(ce_q5_k_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_13(p, o, a, b) CE_QXCAT(ce_iq4_nl_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_14(p, o, a, b) CE_QXCAT(ce_iq4_xs_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_15(p, o, a, b) CE_QXCAT(ce_iq2_xxs_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_16(p, o, a, b) CE_QXCAT(ce_iq2_xs_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_17(p, o, a, b) CE_QXCAT(ce_iq2_s_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_18(p, o, a, b) CE_QXCAT(ce_iq3_xxs_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_19(p, o, a, b) CE_QXCAT(ce_iq3_s_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_20(p, o, a, b) CE_QXCAT(ce_iq1_s_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_21(p, o, a, b) CE_QXCAT(ce_iq1_m_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_22(p, o, a, b) CE_QXCAT(ce_tq1_0_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_23(p, o, a, b) CE_QXCAT(ce_tq2_0_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_24(p, o, a, b) CE_QXCAT(ce_mxfp4_load2x, VEC)(p, o, &(a), &(b))

/* ============================================ FBGEMM's row-wise types
 *
 * A row of CE_RW_COLS values (a constant of the program, the table's cols: the
 * row is these types' block), its values packed bits each (value j in byte
 * j*bits/8 at bit (j*bits) % 8, low bits first) and its scale and bias,
 * byte for byte as FBGEMM defines them (include/clembed.h has every byte):
 *   25 I8_ROWWISE  q[C] 0, f32 scale C, f32 bias C + 4     (Fused8BitRowwise)
 *   26 I4_ROWWISE  q[C/2] 0, f16 scale C/2, f16 bias C/2 + 2 (FusedNBitRowwise...SBHalf)
 *   27 I2_ROWWISE  q[C/4] 0, f16 scale C/4, f16 bias C/4 + 2
 *   28 I8_TBE      f16 scale 0, f16 bias 2, q[C] 4         (the inference TBE's rows)
 *   29 I4_TBE      f16 scale 0, f16 bias 2, q[C/2] 4
 *   30 I2_TBE      f16 scale 0, f16 bias 2, q[C/4] 4
 *   31 FP8_ROWWISE q[C4] 0 (FBGEMM's hfp8: 4 exponent bits, bias 15), f32 scale C4,
 *                  f32 0 C4 + 4 (C4: C rounded up to a multiple of 4)
 * value j = fma(q_j, scale, bias) in float32 (one rounding), as FBGEMM's CPU
 * dequantizers give it (for INT4, INT2 and the TBE rows, whose scales are f16,
 * q_j * scale is exact and so the same as the product then the sum); FP8:
 * q_j's value / scale, correctly rounded where the device can divide so (the
 * host adds -cl-fp32-correctly-rounded-divide-sqrt). A program reads at most
 * one row-wise width: the host adds CE_RW_COLS for a row-wise table
 * (runtime.h's ce_rowwise_option). */
#define CE_STORE_25 uchar
#define CE_STORE_26 uchar
#define CE_STORE_27 uchar
#define CE_STORE_28 uchar
#define CE_STORE_29 uchar
#define CE_STORE_30 uchar
#define CE_STORE_31 uchar
#ifdef CE_RW_COLS
#define CE_RW_C ((uint)(CE_RW_COLS))
#define ce_ptr_25(p, i) ((p) + ((ulong)(i) / CE_RW_C) * (CE_RW_C + 8u))
#define ce_ptr_26(p, i) ((p) + ((ulong)(i) / CE_RW_C) * (CE_RW_C / 2u + 4u))
#define ce_ptr_27(p, i) ((p) + ((ulong)(i) / CE_RW_C) * (CE_RW_C / 4u + 4u))
#define ce_ptr_28(p, i) ((p) + ((ulong)(i) / CE_RW_C) * (CE_RW_C + 4u))
#define ce_ptr_29(p, i) ((p) + ((ulong)(i) / CE_RW_C) * (CE_RW_C / 2u + 4u))
#define ce_ptr_30(p, i) ((p) + ((ulong)(i) / CE_RW_C) * (CE_RW_C / 4u + 4u))
#define ce_ptr_31(p, i) ((p) + ((ulong)(i) / CE_RW_C) * ((CE_RW_C + 3u) / 4u * 4u + 8u))

/* a row's (scale, bias) */
static inline float2 ce_rw_sb_f32(__global const uchar *b) {
  return (float2)(as_float(ce_q_u32(b)), as_float(ce_q_u32(b + 4)));
}
static inline float2 ce_rw_sb_f16(__global const uchar *b) { return (float2)(ce_q_half(b), ce_q_half(b + 2)); }

/* the integer value j of values v packed `bits` each */
#define CE_RW_Q(v, j, bits) ((uint)((v)[((j) * (bits)) >> 3] >> (((j) * (bits)) & 7u)) & ((1u << (bits)) - 1u))

/* FBGEMM's hfp8 with 4 exponent bits and bias 15 (hfp8_to_float(q, 4, 15)) as
 * float32, exact: no code is reserved; exponent field 0 is m * 2^-17, built
 * without a subnormal intermediate (hfp8_to_float's) that a device may flush */
static inline float ce_rw_hfp8(uint q) {
  const uint s = (q & 0x80u) << 24, e = (q >> 3) & 0xFu, m = q & 7u;
  if (e == 0) return as_float(s | as_uint((float)m * 0x1p-17f));
  return as_float(s | ((e + 112u) << 23) | (m << 20));
}

/* N integer values (N = 4, 8, 16) of values v packed `bits` each, from value
 * j (a multiple of N, as every vector load's is), as floats: vector loads and
 * shifts, no loop over the lanes */
static CE_INLINE float4 ce_rw_q8_4(__global const uchar *v, uint j) { return convert_float4(vload4(0, v + j)); }
static CE_INLINE float8 ce_rw_q8_8(__global const uchar *v, uint j) { return convert_float8(vload8(0, v + j)); }
static CE_INLINE float16 ce_rw_q8_16(__global const uchar *v, uint j) { return convert_float16(vload16(0, v + j)); }
static CE_INLINE float4 ce_rw_q4_4(__global const uchar *v, uint j) {
  const uchar4 b = shuffle(vload2(0, v + (j >> 1)), (uchar4)(0, 0, 1, 1));
  return convert_float4((b >> (uchar4)(0, 4, 0, 4)) & (uchar4)(15));
}
static CE_INLINE float8 ce_rw_q4_8(__global const uchar *v, uint j) {
  const uchar8 b = shuffle(vload4(0, v + (j >> 1)), (uchar8)(0, 0, 1, 1, 2, 2, 3, 3));
  return convert_float8((b >> (uchar8)(0, 4, 0, 4, 0, 4, 0, 4)) & (uchar8)(15));
}
static CE_INLINE float16 ce_rw_q4_16(__global const uchar *v, uint j) {
  const uchar16 b = shuffle(vload8(0, v + (j >> 1)), (uchar16)(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
  return convert_float16((b >> (uchar16)(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4)) & (uchar16)(15));
}
static CE_INLINE float4 ce_rw_q2_4(__global const uchar *v, uint j) {
  return convert_float4(((uchar4)(v[j >> 2]) >> (uchar4)(0, 2, 4, 6)) & (uchar4)(3));
}
static CE_INLINE float8 ce_rw_q2_8(__global const uchar *v, uint j) {
  const uchar8 b = shuffle(vload2(0, v + (j >> 2)), (uchar8)(0, 0, 0, 0, 1, 1, 1, 1));
  return convert_float8((b >> (uchar8)(0, 2, 4, 6, 0, 2, 4, 6)) & (uchar8)(3));
}
static CE_INLINE float16 ce_rw_q2_16(__global const uchar *v, uint j) {
  const uchar16 b = shuffle(vload4(0, v + (j >> 2)), (uchar16)(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
  return convert_float16((b >> (uchar16)(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6)) & (uchar16)(3));
}
/* N hfp8 bytes as float32 (ce_rw_hfp8 lane by lane, as vectors) */
#define CE_RW_HFP8_N(N)                                                                                   \
  static CE_INLINE float##N ce_rw_hfp8_##N(__global const uchar *v, uint j) {                              \
    const uint##N q = convert_uint##N(vload##N(0, v + j)), s = (q & (uint##N)(0x80u)) << 24;              \
    const uint##N e = (q >> 3) & (uint##N)(0xFu), m = q & (uint##N)(7u);                                  \
    const uint##N nrm = s | ((e + (uint##N)(112u)) << 23) | (m << 20);                                     \
    const uint##N sub = s | as_uint##N(convert_float##N(m) * (float##N)(0x1p-17f));                       \
    return as_float##N(select(nrm, sub, e == (uint##N)(0u)));                                              \
  }
CE_RW_HFP8_N(4)
CE_RW_HFP8_N(8)
CE_RW_HFP8_N(16)

/* N values of a row-wise type from value j of row b: VALS the values' start,
 * SB the (scale, bias), Q the integer value j (one) or QV the N of them */
#define CE_RW_AT_N(name, N, VALS, SB, QV, VALUE)                                                          \
  static CE_INLINE float##N ce_##name##_at##N(__global const uchar *b, uint j) {                           \
    __global const uchar *v = (VALS);                                                                      \
    const float2 sb = (SB);                                                                                \
    return VALUE##N(QV##_##N(v, j), sb, N);                                                                \
  }
#define CE_RW_AFFINE(q, sb) fma((float)(q), (sb).x, (sb).y)
#define CE_RW_AFFINE4(q, sb, N) fma((q), (float##N)((sb).x), (float##N)((sb).y))
#define CE_RW_AFFINE8 CE_RW_AFFINE4
#define CE_RW_AFFINE16 CE_RW_AFFINE4
#define CE_RW_FP8(q, sb) (ce_rw_hfp8(q) / (sb).x)
#define CE_RW_FP84(h, sb, N) ((h) / (float##N)((sb).x))
#define CE_RW_FP88 CE_RW_FP84
#define CE_RW_FP816 CE_RW_FP84
#define CE_RW_Q8(v, j) ((uint)(v)[j])
#define CE_RW_Q4(v, j) CE_RW_Q(v, j, 4u)
#define CE_RW_Q2(v, j) CE_RW_Q(v, j, 2u)
#define CE_RW_TYPE(name, code, VALS, SB, Q, QV, VALUE)                                                 \
  CE_RW_AT_N(name, 4, VALS, SB, QV, VALUE)                                                             \
  CE_RW_AT_N(name, 8, VALS, SB, QV, VALUE)                                                             \
  CE_RW_AT_N(name, 16, VALS, SB, QV, VALUE)                                                            \
  CE_Q_AT2X(name)                                                                                      \
  CE_RW_LOADS_N(name, code, 4)                                                                         \
  CE_RW_LOADS_N(name, code, 8)                                                                         \
  CE_RW_LOADS_N(name, code, 16)                                                                        \
  static inline float ce_load_##code(__global const uchar *p, ulong i) {                               \
    __global const uchar *b = ce_ptr_##code(p, i);                                                     \
    __global const uchar *v = (VALS);                                                                  \
    const uint j = (uint)(i % CE_RW_C);                                                                \
    return VALUE((Q(v, j)), (SB));                                                                     \
  }                                                                                                    \
  static inline float4 ce_load4_##code(__global const uchar *p, ulong base, ulong j) {                 \
    return ce_##name##_load4(p, base + 4 * j);                                                         \
  }
#define CE_RW_LOADS_N(name, code, N)                                                                  \
  static inline float##N ce_##name##_load##N(__global const uchar *p, ulong i) {                       \
    return ce_##name##_at##N(ce_ptr_##code(p, i), (uint)(i % CE_RW_C));                                \
  }                                                                                                    \
  static CE_INLINE void ce_##name##_load2x##N(__global const uchar *p, ulong i, float##N *a, float##N *z) { \
    ce_##name##_at2x##N(ce_ptr_##code(p, i), (uint)(i % CE_RW_C), a, z);                               \
  }

CE_RW_TYPE(i8_rowwise, 25, b, ce_rw_sb_f32(b + CE_RW_C), CE_RW_Q8, ce_rw_q8, CE_RW_AFFINE)
CE_RW_TYPE(i4_rowwise, 26, b, ce_rw_sb_f16(b + CE_RW_C / 2u), CE_RW_Q4, ce_rw_q4, CE_RW_AFFINE)
CE_RW_TYPE(i2_rowwise, 27, b, ce_rw_sb_f16(b + CE_RW_C / 4u), CE_RW_Q2, ce_rw_q2, CE_RW_AFFINE)
CE_RW_TYPE(i8_tbe, 28, b + 4, ce_rw_sb_f16(b), CE_RW_Q8, ce_rw_q8, CE_RW_AFFINE)
CE_RW_TYPE(i4_tbe, 29, b + 4, ce_rw_sb_f16(b), CE_RW_Q4, ce_rw_q4, CE_RW_AFFINE)
CE_RW_TYPE(i2_tbe, 30, b + 4, ce_rw_sb_f16(b), CE_RW_Q2, ce_rw_q2, CE_RW_AFFINE)
#define CE_RW_SB_FP8(b) ((float2)(as_float(ce_q_u32((b) + (CE_RW_C + 3u) / 4u * 4u)), 0.0f))
CE_RW_TYPE(fp8_rowwise, 31, b, CE_RW_SB_FP8(b), CE_RW_Q8, ce_rw_hfp8, CE_RW_FP8)
#endif /* CE_RW_COLS */

#define ce_loadv_25(p, o) CE_QXCAT(ce_i8_rowwise_load, VEC)(p, o)
#define ce_loadv_26(p, o) CE_QXCAT(ce_i4_rowwise_load, VEC)(p, o)
#define ce_loadv_27(p, o) CE_QXCAT(ce_i2_rowwise_load, VEC)(p, o)
#define ce_loadv_28(p, o) CE_QXCAT(ce_i8_tbe_load, VEC)(p, o)
#define ce_loadv_29(p, o) CE_QXCAT(ce_i4_tbe_load, VEC)(p, o)
#define ce_loadv_30(p, o) CE_QXCAT(ce_i2_tbe_load, VEC)(p, o)
#define ce_loadv_31(p, o) CE_QXCAT(ce_fp8_rowwise_load, VEC)(p, o)
#define ce_loadw_25(p, o, a, b) CE_QXCAT(ce_i8_rowwise_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_26(p, o, a, b) CE_QXCAT(ce_i4_rowwise_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_27(p, o, a, b) CE_QXCAT(ce_i2_rowwise_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_28(p, o, a, b) CE_QXCAT(ce_i8_tbe_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_29(p, o, a, b) CE_QXCAT(ce_i4_tbe_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_30(p, o, a, b) CE_QXCAT(ce_i2_tbe_load2x, VEC)(p, o, &(a), &(b))
#define ce_loadw_31(p, o, a, b) CE_QXCAT(ce_fp8_rowwise_load2x, VEC)(p, o, &(a), &(b))
