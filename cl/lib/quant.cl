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
 * f16 scales are converted by their bits with ce_half_to_float (dtype
 * helpers): exact, as ggml's GGML_FP16_TO_FP32, and the same bits on every
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
inline float ce_q_half(__global const uchar *b) { return ce_half_to_float((uint)b[0] | ((uint)b[1] << 8)); }

/* Q4_K: get_scale_min_k4(s, scales) with d*sc and dmin*m, as ggml's d1 (d2) and
 * m1 (m2). Without a branch, as three byte loads (a = q[s & 3], b = q[(s & 3) + 4],
 * c = q[(s & 3) + 8]) and selects. */
CE_INLINE float2 ce_q4_k_scale_min(__global const uchar *blk, uint s) {
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
inline float ce_load_3(__global const uchar *p, ulong i) {
  __global const uchar *b = ce_ptr_3(p, i);
  const float d = ce_q_half(b);
  return (float)(char)b[2 + (i & 31)] * d;
}

/* Q4_0: x0 = (qs[j] & 0x0F) - 8 (j < 16), x1 = (qs[j] >> 4) - 8 (value j + 16); y = x*d */
inline float ce_load_4(__global const uchar *p, ulong i) {
  __global const uchar *b = ce_ptr_4(p, i);
  const float d = ce_q_half(b);
  uint j = (uint)(i & 31), q = b[2 + (j & 15)];
  const int x = (int)(j < 16 ? q & 0x0Fu : q >> 4) - 8;
  return (float)x * d;
}

/* Q4_K: value j of the super-block: 64-value group g = j/64, sub-block 2g (low
 * nibbles of qs[32g .. 32g + 31]) or 2g + 1 (their high nibbles); y = d1*q - m1 */
inline float ce_load_5(__global const uchar *p, ulong i) {
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
inline float ce_load_6(__global const uchar *p, ulong i) {
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
  CE_INLINE float##N ce_q8_0_at##N(__global const uchar *b, uint j, float d) {                     \
    return convert_float##N(vload##N(0, (__global const char *)b + 2 + j)) * d;                     \
  }                                                                                                 \
  CE_INLINE float##N ce_q4_0_at##N(__global const uchar *b, uint j, float d) {                     \
    uchar##N q = vload##N(0, b + 2 + (j & 15));                                                     \
    q = j < 16 ? q & (uchar)0x0F : q >> (uchar)4;                                                   \
    return convert_float##N(convert_int##N(q) - 8) * d;                                             \
  }                                                                                                 \
  /* value j: 64-value group g = j/64, sub-block 2g + hi; y = d1*q - m1 */                          \
  CE_INLINE float##N ce_q4_k_at##N(__global const uchar *b, uint j, float2 dm) {                   \
    uint g = j >> 6, hi = (j >> 5) & 1u, l = j & 31u;                                               \
    uchar##N q = vload##N(0, b + 16 + 32 * g + l);                                                  \
    q = hi ? q >> (uchar)4 : q & (uchar)0x0F;                                                       \
    return dm.x * convert_float##N(q) - dm.y;                                                       \
  }                                                                                                 \
  /* value j: half n, quarter t, l as ce_load_6 */                                                  \
  CE_INLINE float##N ce_q6_k_at##N(__global const uchar *b, uint j, float d) {                     \
    uint n = j >> 7, t = (j >> 5) & 3u, l = j & 31u;                                                \
    uchar##N lo = vload##N(0, b + 64 * n + l + 32 * (t & 1u));                                      \
    lo = (t >> 1) ? lo >> (uchar)4 : lo & (uchar)0x0F;                                              \
    uchar##N hi = (vload##N(0, b + 128 + 32 * n + l) >> (uchar)(2 * t)) & (uchar)3;                 \
    const int##N q = convert_int##N(lo | (hi << (uchar)4)) - 32;                                    \
    const int sc = (char)b[192 + 8 * n + (l >> 4) + 2 * t];                                         \
    const float dsc = d * (float)sc;                                                                \
    return dsc * convert_float##N(q);                                                               \
  }                                                                                                 \
  inline float##N ce_q8_0_load##N(__global const uchar *p, ulong i) {                              \
    __global const uchar *b = ce_ptr_3(p, i);                                                       \
    return ce_q8_0_at##N(b, (uint)(i & 31), ce_q_half(b));                                          \
  }                                                                                                 \
  inline float##N ce_q4_0_load##N(__global const uchar *p, ulong i) {                              \
    __global const uchar *b = ce_ptr_4(p, i);                                                       \
    return ce_q4_0_at##N(b, (uint)(i & 31), ce_q_half(b));                                          \
  }                                                                                                 \
  inline float##N ce_q4_k_load##N(__global const uchar *p, ulong i) {                              \
    __global const uchar *b = ce_ptr_5(p, i);                                                       \
    uint j = (uint)(i & 255);                                                                       \
    return ce_q4_k_at##N(b, j, ce_q4_k_scale_min(b, j >> 5));                                      \
  }                                                                                                 \
  inline float##N ce_q6_k_load##N(__global const uchar *p, ulong i) {                              \
    __global const uchar *b = ce_ptr_6(p, i);                                                       \
    return ce_q6_k_at##N(b, (uint)(i & 255), ce_q_half(b + 208));                                  \
  }                                                                                                 \
  CE_INLINE void ce_q8_0_load2x##N(__global const uchar *p, ulong i, float##N *a, float##N *z) {   \
    __global const uchar *b = ce_ptr_3(p, i);                                                       \
    const uint j = (uint)(i & 31);                                                                  \
    const float d = ce_q_half(b);                                                                   \
    *a = ce_q8_0_at##N(b, j, d);                                                                    \
    *z = ce_q8_0_at##N(b, j + N, d);                                                                \
  }                                                                                                 \
  CE_INLINE void ce_q4_0_load2x##N(__global const uchar *p, ulong i, float##N *a, float##N *z) {   \
    __global const uchar *b = ce_ptr_4(p, i);                                                       \
    const uint j = (uint)(i & 31);                                                                  \
    const float d = ce_q_half(b);                                                                   \
    *a = ce_q4_0_at##N(b, j, d);                                                                    \
    *z = ce_q4_0_at##N(b, j + N, d);                                                                \
  }                                                                                                 \
  CE_INLINE void ce_q4_k_load2x##N(__global const uchar *p, ulong i, float##N *a, float##N *z) {   \
    __global const uchar *b = ce_ptr_5(p, i);                                                       \
    const uint j = (uint)(i & 255);                                                                 \
    const float2 dm = ce_q4_k_scale_min(b, j >> 5);                                                 \
    *a = ce_q4_k_at##N(b, j, dm);                                                                   \
    *z = ce_q4_k_at##N(b, j + N, dm);                                                               \
  }                                                                                                 \
  CE_INLINE void ce_q6_k_load2x##N(__global const uchar *p, ulong i, float##N *a, float##N *z) {   \
    __global const uchar *b = ce_ptr_6(p, i);                                                       \
    const uint j = (uint)(i & 255);                                                                 \
    const float d = ce_q_half(b + 208);                                                             \
    *a = ce_q6_k_at##N(b, j, d);                                                                    \
    *z = ce_q6_k_at##N(b, j + N, d);                                                                \
  }

CE_Q_VECTOR_LOADS(4)
CE_Q_VECTOR_LOADS(8)
CE_Q_VECTOR_LOADS(16)

inline float4 ce_load4_3(__global const uchar *p, ulong base, ulong j) { return ce_q8_0_load4(p, base + 4 * j); }
inline float4 ce_load4_4(__global const uchar *p, ulong base, ulong j) { return ce_q4_0_load4(p, base + 4 * j); }
inline float4 ce_load4_5(__global const uchar *p, ulong base, ulong j) { return ce_q4_k_load4(p, base + 4 * j); }
inline float4 ce_load4_6(__global const uchar *p, ulong base, ulong j) { return ce_q6_k_load4(p, base + 4 * j); }

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
