/* common.cl: prepended to every kernel family. OpenCL C 1.2 only.
 * dtype load/store, index policy, Philox4x32-10 and the error-recording
 * kernel. */

#pragma OPENCL FP_CONTRACT OFF
#if CE_ATOM64
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
#endif

/* dtype codes (clembed_dtype): 0 F32, 1 F16 (IEEE half), 2 BF16 (top half of a float).
 * A family file picks a storage type and loaders for each role with e.g.
 *   #define TABLE_T CE_XCAT(CE_STORE_, TABLE_DT)  and  CE_XCAT(ce_load_, TABLE_DT). */
#define CE_CAT(a, b) a##b
#define CE_XCAT(a, b) CE_CAT(a, b)
#define CE_STORE_0 float
#define CE_STORE_1 half
#define CE_STORE_2 ushort

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

/* ------------------------------------------------------------------- ids */

/* An ids buffer is passed twice (as int and as long); `is64` picks the view. */
inline long ce_load_id(__global const int *p32, __global const long *p64, int is64, ulong i) {
  return is64 ? p64[i] : (long)p32[i];
}

#define CE_POLICY_CHECK 0
#define CE_POLICY_CLAMP 1
#define CE_POLICY_ZERO 2
#define CE_POLICY_WRAP 3
#define CE_NONE 0xFFFFFFFFu
#define CE_SLOT_UINTS 8

/* The table row for `id` under `policy`, or -1 for a zero row. *bad is set when
 * the id must be reported (CHECK, and WRAP beyond -rows). */
inline long ce_resolve(long id, ulong rows, int policy, long padding, int *bad) {
  long r = (long)rows;
  *bad = 0;
  if (policy == CE_POLICY_WRAP && id < 0 && id >= -r) id += r;
  if (id < 0 || id >= r) {
    if (policy == CE_POLICY_CLAMP && r > 0) {
      id = id < 0 ? 0 : r - 1;
    } else {
      *bad = policy != CE_POLICY_ZERO;
      return -1;
    }
  }
  return id == padding ? -1 : id;
}

/* Records token i as the first bad one of its kind (0 id, 1 position), with
 * `value` (the id, or the start of the token's sequence).
 * With 64-bit atomics (CE_ATOM64, from cl_khr_int64_base_atomics) the slot holds
 * two minima per kind, (i << 32 | low word of value) and (i << 32 | high word),
 * so the first token and its value land together and no second kernel is
 * needed. Without, only the token index is kept here and ce_record_error
 * fetches the value after the operation. */
inline void ce_report(__global uint *err, uint slot, int kind, ulong i, long value) {
  ulong key = min(i, (ulong)0xFFFFFFFEu);
#if CE_ATOM64
  __global ulong *s = (__global ulong *)(err + slot * CE_SLOT_UINTS) + 2 * kind;
  atom_min(&s[0], (key << 32) | (ulong)(uint)value);
  atom_min(&s[1], (key << 32) | ((ulong)value >> 32));
#else
  atomic_min(&err[slot * CE_SLOT_UINTS + kind], (uint)key);
#endif
}

/* After an operation: stores the value of the first bad id and the sequence
 * start of the first bad position next to their token indices. One work-item. */
__kernel void ce_record_error(__global uint *err, uint slot, __global const int *ids32,
                              __global const long *ids64, ulong id_off, int id64, __global const int *so32,
                              __global const long *so64, ulong so_off, int so64f, int has_so, ulong seq_len) {
  if (get_global_id(0) != 0) return;
  __global uint *s = err + slot * CE_SLOT_UINTS;
  uint bi = s[0], bp = s[1];
  if (bi != CE_NONE) {
    long v = ce_load_id(ids32, ids64, id64, id_off + bi);
    s[2] = (uint)v;
    s[3] = (uint)((ulong)v >> 32);
  }
  if (bp != CE_NONE && has_so) {
    ulong b = seq_len ? (ulong)bp / seq_len : 0;
    long f = ce_load_id(so32, so64, so64f, so_off + b);
    s[4] = (uint)f;
    s[5] = (uint)((ulong)f >> 32);
  }
}

/* --------------------------------------------------------------- Philox */

/* Philox4x32-10 (Salmon et al., Random123): counter ctr, key key. */
inline uint4 ce_philox(uint2 key, uint4 ctr) {
  for (int r = 0; r < 10; r++) {
    if (r) key += (uint2)(0x9E3779B9u, 0xBB67AE85u);
    uint hi0 = mul_hi(0xD2511F53u, ctr.x), lo0 = 0xD2511F53u * ctr.x;
    uint hi1 = mul_hi(0xCD9E8D57u, ctr.z), lo1 = 0xCD9E8D57u * ctr.z;
    ctr = (uint4)(hi1 ^ ctr.y ^ key.x, lo1, hi0 ^ ctr.w ^ key.y, lo0);
  }
  return ctr;
}

/* The words for element e with seed (lo, hi). */
inline uint4 ce_philox_element(uint seed_lo, uint seed_hi, ulong e) {
  return ce_philox((uint2)(seed_lo, seed_hi), (uint4)((uint)e, (uint)(e >> 32), 0u, 0u));
}

/* u(x) = (x >> 8) * 2^-24 in [0, 1). */
inline float ce_unit(uint x) { return (float)(x >> 8) * 0x1p-24f; }

/* The sinusoid (exact angles) is in angle.cl, built after this file. */

/* ------------------------------------------------- VEC-wide dtype access */

/* Families built with -DVEC=4, 8 or 16 get VEC-wide loads and stores of each
 * dtype (as float32 vectors) and the dropout mask VEC elements at a time. */
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
inline void ce_storev_0(__global float *p, ulong o, FV v) { vstoreV(v, 0, p + o); }
/* F16 stores by their bits too: ce_float_to_half lane by lane. */
inline USV ce_f16_bitsv(FV v) {
  UV x = as_UV(v), a = x & 0x7FFFFFFFu, sign = (x >> 16) & 0x8000u;
  UV normal = ((a - 0x38000000u) + 0x0FFFu + ((a >> 13) & 1u)) >> 13; /* rebias 127 -> 15, round */
  UV sub = convert_UV(rint(as_FV(a) * 0x1p24f));                      /* below 2^-14: units of 2^-24 */
  UV h = select(normal, sub, a < 0x38800000u);
  h = select(h, (UV)(0x7C00u), a >= 0x477FF000u); /* 65520 and up: inf */
  h = select(h, (UV)(0x7E00u) | ((a >> 13) & 0x3FFu), a > 0x7F800000u); /* nan: quiet, top payload bits */
  return convert_USV(h | sign);
}
inline USV ce_bf16_bitsv(FV v) { /* ce_to_bf16, lane-wise */
  UV x = as_UV(v);
  UV rne = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16, qnan = (x >> 16) | 0x40u;
  return convert_USV(select(rne, qnan, (x & 0x7FFFFFFFu) > 0x7F800000u));
}
inline void ce_storev_1(__global half *p, ulong o, FV v) { vstoreV(ce_f16_bitsv(v), 0, (__global ushort *)p + o); }
inline void ce_storev_2(__global ushort *p, ulong o, FV v) { vstoreV(ce_bf16_bitsv(v), 0, p + o); }

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
#if CE_STREAMING
inline void ce_streamv_0(__global float *p, ulong o, FV v) { __builtin_nontemporal_store(v, (__global FV *)(p + o)); }
inline void ce_streamv_1(__global half *p, ulong o, FV v) {
  __builtin_nontemporal_store(ce_f16_bitsv(v), (__global USV *)((__global ushort *)p + o));
}
inline void ce_streamv_2(__global ushort *p, ulong o, FV v) {
  __builtin_nontemporal_store(ce_bf16_bitsv(v), (__global USV *)(p + o));
}
#else
#define CE_STREAMING 0
#define ce_streamv_0 ce_storev_0
#define ce_streamv_1 ce_storev_1
#define ce_streamv_2 ce_storev_2
#endif

/* x0 of Philox(seed, e0 + lane) for each lane: ce_philox_element(...).x, lane-wise. */
inline UV ce_philox_xv(uint seed_lo, uint seed_hi, ulong e0) {
  ULV e = (ULV)(e0) + CE_LANES;
  UV c0 = convert_UV(e), c1 = convert_UV(e >> 32), c2 = (UV)(0u), c3 = (UV)(0u);
  uint k0 = seed_lo, k1 = seed_hi;
  for (int r = 0; r < 10; r++) {
    if (r) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    UV hi0 = mul_hi((UV)(0xD2511F53u), c0), lo0 = (UV)(0xD2511F53u) * c0;
    UV hi1 = mul_hi((UV)(0xCD9E8D57u), c2), lo1 = (UV)(0xCD9E8D57u) * c2;
    UV n0 = hi1 ^ c1 ^ (UV)(k0), n2 = hi0 ^ c3 ^ (UV)(k1);
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return c0;
}

/* The dropout mask on element e (row i, column c: e = i*cols + c), as the
 * forward applies it and the backward replays it on the gradient: kept
 * elements are multiplied by keep, dropped ones become exactly 0. */
inline float ce_mask1(float g, ulong e, float dropout, float keep, uint seed_lo, uint seed_hi) {
  return ce_unit(ce_philox_element(seed_lo, seed_hi, e).x) >= dropout ? g * keep : 0.0f;
}
inline FV ce_maskv(FV g, ulong e0, float dropout, float keep, uint seed_lo, uint seed_hi) {
  FV u = convert_FV(ce_philox_xv(seed_lo, seed_hi, e0) >> 8) * 0x1p-24f;
  return select((FV)(0.0f), g * keep, u >= (FV)(dropout));
}

#endif /* VEC */
