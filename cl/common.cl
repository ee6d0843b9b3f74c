/* common.cl: prepended to every kernel family. OpenCL C 1.2 only.
 * dtype load/store, index policy, Philox4x32-10, the extended-precision
 * sinusoid, and the error-recording kernel. */

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

inline float ce_load_0(__global const float *p, ulong i) { return p[i]; }
inline float ce_load_1(__global const half *p, ulong i) { return vload_half((size_t)i, p); }
inline float ce_load_2(__global const ushort *p, ulong i) { return as_float((uint)p[i] << 16); }

inline void ce_store_0(__global float *p, ulong i, float v) { p[i] = v; }
inline void ce_store_1(__global half *p, ulong i, float v) { vstore_half_rte(v, (size_t)i, p); }
inline ushort ce_to_bf16(float v) {
  uint x = as_uint(v);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (ushort)((x >> 16) | 0x40u); /* quiet nan */
  return (ushort)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);                /* nearest even */
}
inline void ce_store_2(__global ushort *p, ulong i, float v) { p[i] = ce_to_bf16(v); }

/* Four consecutive elements p[base + 4j .. base + 4j + 3] (element alignment only). */
inline float4 ce_load4_0(__global const float *p, ulong base, ulong j) { return vload4((size_t)j, p + base); }
inline float4 ce_load4_1(__global const half *p, ulong base, ulong j) { return vload_half4((size_t)j, p + base); }
inline float4 ce_load4_2(__global const ushort *p, ulong base, ulong j) {
  return as_float4(convert_uint4(vload4((size_t)j, p + base)) << 16);
}
inline void ce_store4_0(__global float *p, ulong base, ulong j, float4 v) { vstore4(v, (size_t)j, p + base); }
inline void ce_store4_1(__global half *p, ulong base, ulong j, float4 v) { vstore_half4_rte(v, (size_t)j, p + base); }
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

/* ------------------------------------------------------------- sinusoid */

/* sin(y) and cos(y) for |y| <= pi/4 (Cephes' sinf/cosf polynomials, about 6e-8). */
inline float ce_sin_poly(float y) {
  float z = y * y;
  return y + y * z * ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f);
}
inline float ce_cos_poly(float y) {
  float z = y * y;
  return 1.0f - 0.5f * z + z * z * ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f);
}

/* sin(p*w) or cos(p*w) for a column frequency f = (w_hi, w_lo), w = w_hi + w_lo
 * to 48 bits (computed in double on the host); a negative w_hi marks a cos
 * column. The angle is carried in float-float (exact products by fma, which
 * OpenCL requires to be correctly rounded) and reduced modulo 2*pi with a
 * three-part 2*pi, then to a quadrant and |y| <= pi/4; cos is the next quadrant
 * of sin, and both are short polynomials: the accuracy does not depend on the
 * device's sin/cos (OpenCL allows them 4 ulp), and every column takes the same
 * branch-free path. The error is about 2e-7 for angles below 2^20 (measured
 * worst 1.7e-7 over every position below 2^20). */
inline float ce_sinusoid(ulong p, float2 f) {
  const float C1 = 0x1.921fb6p+2f, C2 = -0x1.777a5cp-23f, C3 = -0x1p-47f; /* 2*pi = C1 + C2 + C3 */
  const float H1 = 0x1.921fb6p+0f, H2 = -0x1.777a5cp-25f;                 /* pi/2 = H1 + H2 */
  int is_cos = signbit(f.x);
  float wh = fabs(f.x), wl = is_cos ? -f.y : f.y;
  float ph = (float)(p & ~(ulong)0xFFF), pl = (float)(p & (ulong)0xFFF);
  float a1 = ph * wh, e1 = fma(ph, wh, -a1);
  float a2 = pl * wh, e2 = fma(pl, wh, -a2);
  float s = a1 + a2, bb = s - a1, e3 = (a1 - (s - bb)) + (a2 - bb);
  float lo = ((e1 + e2) + e3) + (float)p * wl;
  float k = rint(s * 0x1.45f306p-3f);
  float t = k * C1, et = fma(k, C1, -t);
  float r = s - t; /* exact: s and t are within a factor of two, or k == 0 */
  float rl = fma(-k, C3, fma(-k, C2, lo - et));
  float x = r + rl; /* about [-pi, pi] */
  float q = rint(x * 0x1.45f306p-1f); /* quadrant: x * 2/pi */
  float y = fma(-q, H2, fma(-q, H1, x));
  int quad = ((int)q + is_cos) & 3;
  float v = (quad & 1) ? ce_cos_poly(y) : ce_sin_poly(y);
  return (quad & 2) ? -v : v;
}
