/* loadstore.cl: the first of the helpers every program starts with (cl/lib/,
 * in src/runtime/families.h's order). OpenCL C 1.2 only.
 * Loads and stores of each dtype (scalar, 4-wide, and VEC-wide when the
 * program is built with -DVEC=4, 8 or 16), F16 and BF16 by their bits, the
 * streaming stores, and the load of an id of either index type. */

#pragma OPENCL FP_CONTRACT OFF

/* dtype codes (clembed_dtype): 0 F32, 1 F16 (IEEE half), 2 BF16 (top half of a float).
 * A family file picks a storage type and loaders for each role with e.g.
 *   #define TABLE_T CE_XCAT(CE_STORE_, TABLE_DT)  and  CE_XCAT(ce_load_, TABLE_DT). */
#define CE_CAT(a, b) a##b
#define CE_XCAT(a, b) CE_CAT(a, b)
#define CE_STORE_0 float
#define CE_STORE_1 half
#define CE_STORE_2 ushort

/* A helper called inside a vector loop is inlined whatever the compiler's
 * own estimate: a call there makes the caller spill every vector register. */
#define CE_INLINE __attribute__((always_inline)) inline

/* F16 is converted by its bits (not vload_half / vstore_half_rte), so that
 * every device, every kernel shape and the host give the same bits: the
 * OpenCL functions leave a NaN's payload to the implementation (POCL's
 * vstore_half_rte makes some NaNs 0x7FFF and keeps others' payloads). Exact
 * for loads; stores round to nearest even, overflow to infinity, and keep a
 * NaN's sign and the top 10 bits of its payload, made quiet. */
inline float ce_half_to_float(uint h) {
  uint em = h & 0x7FFFu;
  float normal = as_float((em << 13) + (112u << 23)); /* rebias 15 -> 127 */
  float sub = (float)em * 0x1p-24f;                   /* exponent 0: em * 2^-24 */
  float special = as_float((em << 13) | 0x7F800000u); /* inf, nan */
  float m = em >= 0x7C00u ? special : em < 0x400u ? sub : normal;
  return as_float(as_uint(m) | ((h & 0x8000u) << 16));
}
inline ushort ce_float_to_half(float v) {
  uint x = as_uint(v), a = x & 0x7FFFFFFFu, sign = (x >> 16) & 0x8000u, h;
  if (a > 0x7F800000u)
    h = 0x7E00u | ((a >> 13) & 0x3FFu); /* nan */
  else if (a >= 0x477FF000u)
    h = 0x7C00u; /* 65520 and up: inf */
  else if (a < 0x38800000u)
    h = (uint)rint(as_float(a) * 0x1p24f); /* below 2^-14: units of 2^-24 */
  else
    h = ((a - 0x38000000u) + 0x0FFFu + ((a >> 13) & 1u)) >> 13; /* rebias 127 -> 15, round */
  return (ushort)(h | sign);
}

/* The pointer to element i (for the block types, cl/lib/quant.cl: to the block
 * holding value i; a row's start when i is its first value). */
#define ce_ptr_0(p, i) ((p) + (i))
#define ce_ptr_1(p, i) ((p) + (i))
#define ce_ptr_2(p, i) ((p) + (i))

inline float ce_load_0(__global const float *p, ulong i) { return p[i]; }
inline float ce_load_1(__global const half *p, ulong i) { return ce_half_to_float(((__global const ushort *)p)[i]); }
inline float ce_load_2(__global const ushort *p, ulong i) { return as_float((uint)p[i] << 16); }

inline void ce_store_0(__global float *p, ulong i, float v) { p[i] = v; }
inline void ce_store_1(__global half *p, ulong i, float v) { ((__global ushort *)p)[i] = ce_float_to_half(v); }
inline ushort ce_to_bf16(float v) {
  uint x = as_uint(v);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (ushort)((x >> 16) | 0x40u); /* quiet nan */
  return (ushort)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);                /* nearest even */
}
inline void ce_store_2(__global ushort *p, ulong i, float v) { p[i] = ce_to_bf16(v); }

/* Stochastic rounding to F16 and BF16 with a random 32-bit word r (the
 * optimizers' stochastic_rounding; include/clembed.h is the contract). For a
 * finite v, lo <= |v| < hi are the neighbours of |v| in the format (lo = |v|
 * truncated: its bits past the format's dropped, or for an F16 below 2^-14 the
 * whole units of 2^-24; hi the next value up, infinity past the largest finite
 * one) and f = floor(2^32 * (|v| - lo) / u), u the spacing at lo (hi - lo, or
 * below the infinity the spacing before it), exact but for an F16 below 2^-33;
 * the result, with v's sign, is hi when f + r carries out of 32 bits,
 * else lo: hi with probability f / 2^32 over a uniform r. F16: |v| >= 2^16 and
 * infinity give infinity. NaN as the nearest-even stores. */
inline uint ce_sr_carry(uint f, uint r) { return f + r < r ? 1u : 0u; }
inline ushort ce_to_bf16_sr(float v, uint r) {
  uint x = as_uint(v);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (ushort)((x >> 16) | 0x40u); /* quiet nan */
  return (ushort)((x >> 16) + ce_sr_carry(x << 16, r));
}
inline ushort ce_float_to_half_sr(float v, uint r) {
  uint x = as_uint(v), a = x & 0x7FFFFFFFu, sign = (x >> 16) & 0x8000u, h;
  if (a > 0x7F800000u) {
    h = 0x7E00u | ((a >> 13) & 0x3FFu); /* nan */
  } else if (a >= 0x47800000u) {
    h = 0x7C00u; /* 2^16 and up: inf */
  } else if (a >= 0x38800000u) {
    uint t = a - 0x38000000u; /* rebias 127 -> 15; the 13 bits dropped are the fraction */
    h = (t >> 13) + ce_sr_carry(t << 19, r);
  } else { /* below 2^-14: |v| = m * 2^-(24 + s) in units of 2^-24 (s = 14 .. 125) */
    uint e = a >> 23, m = e ? (a & 0x7FFFFFu) | 0x800000u : a, s = e ? 126u - e : 125u;
    uint q = s < 24u ? m >> s : 0u, d = s < 24u ? m & ((1u << s) - 1u) : m; /* units, fraction d / 2^s */
    uint f = s <= 32u ? d << (32u - s) : s < 56u ? d >> (s - 32u) : 0u;
    h = q + ce_sr_carry(f, r);
  }
  return (ushort)(h | sign);
}
/* The stores with stochastic rounding (F32: the plain store, r unused). */
inline void ce_store_sr_0(__global float *p, ulong i, float v, uint r) { p[i] = v; }
inline void ce_store_sr_1(__global half *p, ulong i, float v, uint r) {
  ((__global ushort *)p)[i] = ce_float_to_half_sr(v, r);
}
inline void ce_store_sr_2(__global ushort *p, ulong i, float v, uint r) { p[i] = ce_to_bf16_sr(v, r); }

/* Four consecutive elements p[base + 4j .. base + 4j + 3] (element alignment only). */
inline float4 ce_load4_0(__global const float *p, ulong base, ulong j) { return vload4((size_t)j, p + base); }
inline float4 ce_load4_1(__global const half *p, ulong base, ulong j) {
  ushort4 h = vload4((size_t)j, (__global const ushort *)p + base);
  return (float4)(ce_half_to_float(h.x), ce_half_to_float(h.y), ce_half_to_float(h.z), ce_half_to_float(h.w));
}
inline float4 ce_load4_2(__global const ushort *p, ulong base, ulong j) {
  return as_float4(convert_uint4(vload4((size_t)j, p + base)) << 16);
}
inline void ce_store4_0(__global float *p, ulong base, ulong j, float4 v) { vstore4(v, (size_t)j, p + base); }
inline void ce_store4_1(__global half *p, ulong base, ulong j, float4 v) {
  vstore4((ushort4)(ce_float_to_half(v.x), ce_float_to_half(v.y), ce_float_to_half(v.z), ce_float_to_half(v.w)),
          (size_t)j, (__global ushort *)p + base);
}
inline void ce_store4_2(__global ushort *p, ulong base, ulong j, float4 v) {
  vstore4((ushort4)(ce_to_bf16(v.x), ce_to_bf16(v.y), ce_to_bf16(v.z), ce_to_bf16(v.w)), (size_t)j, p + base);
}

/* A hint to bring the cache line at p in (CE_PREFETCH, set by the host where
 * the compiler lowers __builtin_prefetch to the CPU's prefetch instruction);
 * elsewhere nothing. Gathered rows are short streams that a CPU's own
 * prefetchers see too late. */
#if CE_PREFETCH
#define ce_prefetch(p) __builtin_prefetch((p), 0, 3)
#else
#define ce_prefetch(p) ((void)0)
#endif
/* A row of `bytes` asked for while another is worked on in `steps` column
 * steps, spread over them: ce_prefetch_step gives the bytes a step asks for
 * (whole lines), ce_prefetch_part asks for the `step` bytes from `at`. */
CE_INLINE ulong ce_prefetch_step(ulong bytes, ulong steps) {
  steps = max(steps, (ulong)1);
  return ((bytes + 63) / 64 + steps - 1) / steps * 64;
}
CE_INLINE void ce_prefetch_part(__global const uchar *p, ulong at, ulong step, ulong bytes) {
  for (ulong o = at; o < at + step && o < bytes; o += 64) ce_prefetch(p + o);
}

/* An ids buffer is passed twice (as int and as long); `is64` picks the view. */
inline long ce_load_id(__global const int *p32, __global const long *p64, int is64, ulong i) {
  return is64 ? p64[i] : (long)p32[i];
}


/* Programs built with -DVEC=4, 8 or 16 get VEC-wide loads and stores of each
 * dtype (as float32 vectors); philox.cl and angle.cl add their VEC-wide forms. */
#ifdef VEC
#define FV CE_XCAT(float, VEC)
#define UV CE_XCAT(uint, VEC)
#define ULV CE_XCAT(ulong, VEC)
#define USV CE_XCAT(ushort, VEC)
#define as_FV CE_XCAT(as_float, VEC)
#define as_UV CE_XCAT(as_uint, VEC)
#define convert_FV CE_XCAT(convert_float, VEC)
#define convert_UV CE_XCAT(convert_uint, VEC)
#define convert_USV CE_XCAT(convert_ushort, VEC)
#define vloadV CE_XCAT(vload, VEC)
#define vstoreV CE_XCAT(vstore, VEC)
#if VEC == 4
#define CE_LANES ((ULV)(0, 1, 2, 3))
#elif VEC == 8
#define CE_LANES ((ULV)(0, 1, 2, 3, 4, 5, 6, 7))
#elif VEC == 16
#define CE_LANES ((ULV)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))
#else
#error "VEC must be 4, 8 or 16"
#endif

/* VEC consecutive elements of each dtype, as float32. */
inline FV ce_loadv_0(__global const float *p, ulong o) { return vloadV(0, p + o); }
/* F16 by its bits, as ce_half_to_float lane by lane (and some POCL versions
 * compile vload_half8/16 to 16-byte-aligned loads, which fault at an odd
 * column). */
inline FV ce_loadv_1(__global const half *p, ulong o) {
  UV h = convert_UV(vloadV(0, (__global const ushort *)p + o)), em = h & 0x7FFFu;
  FV normal = as_FV((em << 13) + (UV)(112u << 23));            /* rebias 15 -> 127 */
  FV sub = convert_FV(em) * 0x1p-24f;                          /* exponent 0: em * 2^-24 */
  FV special = as_FV((em << 13) | 0x7F800000u);                /* inf, nan */
  FV m = select(select(normal, sub, em < 0x400u), special, em >= 0x7C00u);
  return as_FV(as_UV(m) | ((h & 0x8000u) << 16));
}
inline FV ce_loadv_2(__global const ushort *p, ulong o) { return as_FV(convert_UV(vloadV(0, p + o)) << 16); }
/* 2 * VEC consecutive elements from o, as two vectors (the block types, in
 * quant.cl, decode a block's scales once for both). */
#define ce_loadw_0(p, o, a, b) ((a) = ce_loadv_0(p, o), (b) = ce_loadv_0(p, (o) + VEC))
#define ce_loadw_1(p, o, a, b) ((a) = ce_loadv_1(p, o), (b) = ce_loadv_1(p, (o) + VEC))
#define ce_loadw_2(p, o, a, b) ((a) = ce_loadv_2(p, o), (b) = ce_loadv_2(p, (o) + VEC))
/* A float vector is stored whole when p + o is aligned to the vector's size:
 * POCL compiles vstore16 of float to five stores of 16 and 8 bytes. */
inline void ce_storev_0(__global float *p, ulong o, FV v) {
  if (((ulong)(p + o) & (sizeof(FV) - 1)) == 0)
    *(__global FV *)(p + o) = v;
  else
    vstoreV(v, 0, p + o);
}
/* F16 stores by their bits too: ce_float_to_half lane by lane. On an x86
 * CPU with F16C (POCL compiles for the host CPU, and clang defines __F16C__
 * there; compilers for other devices do not), the conversion is the CPU's own
 * instruction (vcvtps2ph, rounding to nearest even): its bits are those of the
 * formula below for every float32, NaNs included (a NaN: sign, quiet bit set,
 * the top 10 payload bits), and it is one instruction instead of a dozen (F16
 * outputs of the lookups were bound by them). */
#if defined(__F16C__) && defined(__has_builtin)
#if VEC == 16 && defined(__AVX512F__) && __has_builtin(__builtin_ia32_vcvtps2ph512_mask)
#define CE_F16C 1
typedef float ce_x86_sf __attribute__((__vector_size__(64)));
typedef short ce_x86_hi __attribute__((__vector_size__(32)));
inline USV ce_f16_bitsv(FV v) {
  return as_ushort16(__builtin_ia32_vcvtps2ph512_mask((ce_x86_sf)v, 0, (ce_x86_hi)((short16)(0)), (ushort)0xFFFF));
}
#elif VEC == 8 && __has_builtin(__builtin_ia32_vcvtps2ph256)
#define CE_F16C 1
typedef float ce_x86_sf __attribute__((__vector_size__(32)));
inline USV ce_f16_bitsv(FV v) { return as_ushort8(__builtin_ia32_vcvtps2ph256((ce_x86_sf)v, 0)); }
#elif VEC == 4 && __has_builtin(__builtin_ia32_vcvtps2ph)
#define CE_F16C 1
typedef float ce_x86_sf __attribute__((__vector_size__(16)));
inline USV ce_f16_bitsv(FV v) { return as_ushort8(__builtin_ia32_vcvtps2ph((ce_x86_sf)v, 0)).lo; }
#endif
#endif
#ifndef CE_F16C
inline USV ce_f16_bitsv(FV v) {
  UV x = as_UV(v), a = x & 0x7FFFFFFFu, sign = (x >> 16) & 0x8000u;
  UV normal = ((a - 0x38000000u) + 0x0FFFu + ((a >> 13) & 1u)) >> 13; /* rebias 127 -> 15, round */
  /* below 2^-14: units of 2^-24, rounded to nearest even by adding and
   * taking away 2^23 (what rint gives for 0 <= x < 2^10, without a call) */
  UV sub = convert_UV((as_FV(a) * 0x1p24f + 0x1p23f) - 0x1p23f);
  UV h = select(normal, sub, a < 0x38800000u);
  h = select(h, (UV)(0x7C00u), a >= 0x477FF000u); /* 65520 and up: inf */
  h = select(h, (UV)(0x7E00u) | ((a >> 13) & 0x3FFu), a > 0x7F800000u); /* nan: quiet, top payload bits */
  return convert_USV(h | sign);
}
#endif
inline USV ce_bf16_bitsv(FV v) { /* ce_to_bf16, lane-wise */
  UV x = as_UV(v);
  UV rne = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16, qnan = (x >> 16) | 0x40u;
  return convert_USV(select(rne, qnan, (x & 0x7FFFFFFFu) > 0x7F800000u));
}
/* ce_float_to_half_sr and ce_to_bf16_sr, lane-wise (r: each lane's word). */
CE_INLINE UV ce_sr_carryv(UV f, UV r) { return select((UV)(0u), (UV)(1u), f + r < r); }
CE_INLINE USV ce_bf16_bitsv_sr(FV v, UV r) {
  UV x = as_UV(v);
  UV sr = (x >> 16) + ce_sr_carryv(x << 16, r), qnan = (x >> 16) | 0x40u;
  return convert_USV(select(sr, qnan, (x & 0x7FFFFFFFu) > 0x7F800000u));
}
CE_INLINE USV ce_f16_bitsv_sr(FV v, UV r) {
  UV x = as_UV(v), a = x & 0x7FFFFFFFu, sign = (x >> 16) & 0x8000u;
  UV t = a - 0x38000000u;
  UV normal = (t >> 13) + ce_sr_carryv(t << 19, r);
  /* below 2^-14 (the other lanes' shifts are out of range, and not selected) */
  UV e = a >> 23, m = select(a, (a & 0x7FFFFFu) | 0x800000u, e != 0u), s = select((UV)(125u), (UV)(126u) - e, e != 0u);
  UV q = select((UV)(0u), m >> s, s < 24u), d = select(m, m & (((UV)(1u) << s) - 1u), s < 24u);
  UV f = select(select((UV)(0u), d >> (s - 32u), s < 56u), d << ((UV)(32u) - s), s <= 32u);
  UV h = select(normal, q + ce_sr_carryv(f, r), a < 0x38800000u);
  h = select(h, (UV)(0x7C00u), a >= 0x47800000u);                        /* 2^16 and up: inf */
  h = select(h, (UV)(0x7E00u) | ((a >> 13) & 0x3FFu), a > 0x7F800000u); /* nan */
  return convert_USV(h | sign);
}
/* A 16-bit vector is stored whole when p + o is aligned to the vector's size:
 * POCL compiles vstoreV of ushort to one 2-byte store per lane. */
inline void ce_storev_us(__global ushort *q, USV h) {
  if (((ulong)q & (sizeof(USV) - 1)) == 0)
    *(__global USV *)q = h;
  else
    vstoreV(h, 0, q);
}
inline void ce_storev_1(__global half *p, ulong o, FV v) { ce_storev_us((__global ushort *)p + o, ce_f16_bitsv(v)); }
inline void ce_storev_2(__global ushort *p, ulong o, FV v) { ce_storev_us(p + o, ce_bf16_bitsv(v)); }
/* ... and with stochastic rounding (ce_store_sr_*, lane-wise) */
CE_INLINE void ce_storev_sr_0(__global float *p, ulong o, FV v, UV r) { ce_storev_0(p, o, v); }
CE_INLINE void ce_storev_sr_1(__global half *p, ulong o, FV v, UV r) {
  ce_storev_us((__global ushort *)p + o, ce_f16_bitsv_sr(v, r));
}
CE_INLINE void ce_storev_sr_2(__global ushort *p, ulong o, FV v, UV r) { ce_storev_us(p + o, ce_bf16_bitsv_sr(v, r)); }

/* Streaming stores (the compiler's non-temporal store: the data goes to memory
 * without first reading the line into the cache, like memcpy's large copies)
 * for a CPU writing more than its cache holds. CE_STREAMING is 1 where the
 * compiler has __builtin_nontemporal_store (clang, so POCL); elsewhere these
 * are the plain stores. p + o must be aligned to the vector's size (the
 * caller checks). */
#ifdef __has_builtin
#if __has_builtin(__builtin_nontemporal_store)
#define CE_STREAMING 1
#endif
#endif
/* Two 16-bit vectors side by side as one vector of 32-bit words (a cache
 * line for VEC 16), for one streaming store rather than two half-line ones
 * (docs/performance.md). */
#if VEC == 4
#define CE_US2 uint4
#define ce_us2(a, b) ((uint4)(as_uint2(a), as_uint2(b)))
#elif VEC == 8
#define CE_US2 uint8
#define ce_us2(a, b) ((uint8)(as_uint4(a), as_uint4(b)))
#else
#define CE_US2 uint16
#define ce_us2(a, b) ((uint16)(as_uint8(a), as_uint8(b)))
#endif
#if CE_STREAMING
inline void ce_stream_us(__global ushort *q, USV h) { __builtin_nontemporal_store(h, (__global USV *)q); }
inline void ce_stream2_us(__global ushort *q, USV a, USV b) { __builtin_nontemporal_store(ce_us2(a, b), (__global CE_US2 *)q); }
inline void ce_streamv_0(__global float *p, ulong o, FV v) { __builtin_nontemporal_store(v, (__global FV *)(p + o)); }
#else
#define CE_STREAMING 0
#define ce_stream_us ce_storev_us
#define ce_streamv_0 ce_storev_0
inline void ce_stream2_us(__global ushort *q, USV a, USV b) {
  ce_storev_us(q, a);
  ce_storev_us(q + VEC, b);
}
#endif
inline void ce_streamv_1(__global half *p, ulong o, FV v) { ce_stream_us((__global ushort *)p + o, ce_f16_bitsv(v)); }
inline void ce_streamv_2(__global ushort *p, ulong o, FV v) { ce_stream_us(p + o, ce_bf16_bitsv(v)); }
/* 2 * VEC elements from o: p + o aligned to twice the vector's size */
inline void ce_stream2v_0(__global float *p, ulong o, FV a, FV b) {
  ce_streamv_0(p, o, a);
  ce_streamv_0(p, o + VEC, b);
}
inline void ce_stream2v_1(__global half *p, ulong o, FV a, FV b) {
  ce_stream2_us((__global ushort *)p + o, ce_f16_bitsv(a), ce_f16_bitsv(b));
}
inline void ce_stream2v_2(__global ushort *p, ulong o, FV a, FV b) {
  ce_stream2_us(p + o, ce_bf16_bitsv(a), ce_bf16_bitsv(b));
}

#endif /* VEC */
