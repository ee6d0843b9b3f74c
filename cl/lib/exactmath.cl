/* exactmath.cl: the logarithm, square root, sine and cosine behind
 * clembed_matrix_init_normal, built only from operations that OpenCL rounds
 * correctly (+, -, *, fma, conversions of integers below 2^24, rint, and bit
 * moves), never from the device's built-in log, sqrt, sin, cos or division,
 * whose accuracy OpenCL leaves to the implementation. With FP_CONTRACT OFF
 * (no a*b+c fused behind our back) every device computes the same bits, and
 * so does the host: this file is also valid C, and tests/test_exactmath.c
 * compiles it (with CE_XM_FN defined to `static inline` and the OpenCL
 * built-ins as_uint, as_float, fma and rint provided) to check every input
 * against float64.
 *
 * No intermediate is subnormal for the inputs these functions take, so a
 * device that flushes subnormals gives the same bits too.
 *
 * The functions serve the Box-Muller transform on 24-bit uniforms:
 *   u = ((a >> 8) + 1) * 2^-24 in (0, 1],  t = (b >> 8) * 2^-24 in [0, 1),
 *   radius = sqrt(-2 ln u),  (z0, z1) = (radius * cos(2 pi t), radius * sin(2 pi t)).
 * Accuracy (checked for all 2^24 values of u and of t): -2 ln u and the radius
 * within 1 ulp of the exact value, cos(2 pi t) and sin(2 pi t) within 2 ulp
 * (exactly 0 and +-1 at the quarter turns), each Box-Muller output within 4 ulp
 * of the exact transform of the same u and t. Zeros are +0 by their bits. */

#ifdef __OPENCL_VERSION__
#pragma OPENCL FP_CONTRACT OFF
#endif
#ifndef CE_XM_FN
#define CE_XM_FN inline
#endif

/* -2 ln(u) for a float u in [2^-24, 1] (Cephes' logf reduction and
 * polynomial, in fma form): u = m 2^e with m in [sqrt(1/2), sqrt(2)), x = m - 1
 * exactly, ln u = e ln 2 + x - x^2/2 + x^3 P(x), with ln 2 split so that e times
 * its first part is exact. */
CE_XM_FN float ce_xm_neg2log(float u) {
  unsigned int ix = as_uint(u);
  int e = (int)(ix >> 23) - 126;                            /* u = m * 2^e, m in [0.5, 1) */
  float m = as_float((ix & 0x007FFFFFu) | 0x3F000000u);
  int lower = m < 0.70710678f;                              /* m < sqrt(1/2): use 2m, e - 1 */
  float x = (lower ? m + m : m) - 1.0f;                     /* exact (Sterbenz) */
  float fe = (float)(lower ? e - 1 : e);
  float z = x * x;
  float p = 7.0376836292e-2f;
  p = fma(p, x, -1.1514610310e-1f);
  p = fma(p, x, 1.1676998740e-1f);
  p = fma(p, x, -1.2420140846e-1f);
  p = fma(p, x, 1.4249322787e-1f);
  p = fma(p, x, -1.6668057665e-1f);
  p = fma(p, x, 2.0000714765e-1f);
  p = fma(p, x, -2.4999993993e-1f);
  p = fma(p, x, 3.3333331174e-1f);
  float y = (x * z) * p;                                    /* x^3 P(x) */
  y = fma(fe, -2.12194440e-4f, y);                          /* e * (ln 2 - 0.693359375) */
  y = fma(-0.5f, z, y);
  float l = x + y;
  l = fma(fe, 0.693359375f, l);                             /* e * 0.693359375 is exact */
  return as_float(as_uint(-2.0f * l) & 0x7FFFFFFFu);         /* >= 0; u = 1 gives +0 */
}

/* sqrt(v) for v = 0 or a normal float below 2^64: an estimate of 1/sqrt(v)
 * from the bits, three Newton steps, then sqrt = v*y with one correction step
 * on the exact residual v - r*r (fma). */
CE_XM_FN float ce_xm_sqrt(float v) {
  float w = v > 0.0f ? v : 1.0f;                            /* 0 is answered at the end */
  float y = as_float(0x5F3759DFu - (as_uint(w) >> 1));      /* within 3.5% */
  float hw = 0.5f * w;
  y = y * (1.5f - hw * (y * y));
  y = y * (1.5f - hw * (y * y));
  y = y * (1.5f - hw * (y * y));
  float r = w * y;
  float d = fma(-r, r, w);
  r = fma(0.5f * y, d, r);
  return v > 0.0f ? r : 0.0f;
}

/* sin(2 pi t) and cos(2 pi t) for t in [0, 1) a multiple of 2^-24: 4t = n + f
 * exactly with n an integer and |f| <= 1/2, a = |f| pi/2 (pi/2 in two parts),
 * Cephes' sinf and cosf polynomials on 0 <= a <= pi/4, and the signs and the
 * quadrant n mod 4 applied to the bits. An exact zero is +0. */
CE_XM_FN void ce_xm_sincos_turns(float t, float *s_out, float *c_out) {
  float q = 4.0f * t;
  float n = rint(q);
  float f = q - n;                                          /* exact */
  unsigned int fsign = as_uint(f) & 0x80000000u;
  float af = as_float(as_uint(f) & 0x7FFFFFFFu);
  float a = fma(af, 1.57079637050628662109375f, af * -4.37113900018624283e-8f);
  float a2 = a * a;
  float sp = fma(fma(-1.9515295891e-4f, a2, 8.3321608736e-3f), a2, -1.6666654611e-1f);
  float s = fma(a * a2, sp, a);                             /* sin a >= 0, 0 only for a = 0 */
  float cp = fma(fma(2.443315711809948e-5f, a2, -1.388731625493765e-3f), a2, 4.166664568298827e-2f);
  float c = fma(a2 * a2, cp, fma(-0.5f, a2, 1.0f));         /* cos a > 0.7 */
  unsigned int sb = as_uint(s) & 0x7FFFFFFFu, cb = as_uint(c) & 0x7FFFFFFFu;
  int quadrant = (int)n & 3;
  unsigned int odd_sign = quadrant == 1 ? 0x80000000u : 0u, even_sign = quadrant == 2 ? 0x80000000u : 0u;
  /* sin(n pi/2 + a'), cos(n pi/2 + a') with a' = a times the sign of f */
  unsigned int sin_s = sb ? sb | (fsign ^ even_sign) : 0u, cos_s = sb ? sb | (fsign ^ odd_sign) : 0u;
  *s_out = as_float(quadrant & 1 ? cb | (quadrant == 3 ? 0x80000000u : 0u) : sin_s);
  *c_out = as_float(quadrant & 1 ? cos_s : cb | even_sign);
}

/* A product's zero made +0 by its bits (compilers differ on what they assume
 * of signed zeros; the bits must not). */
CE_XM_FN float ce_xm_plus_zero(float v) {
  unsigned int b = as_uint(v);
  return as_float(b << 1 ? b : 0u);
}

/* The 24-bit uniforms of a Philox word: [0, 1) and (0, 1]. */
CE_XM_FN float ce_xm_unit(unsigned int x) { return (float)(x >> 8) * 0x1p-24f; }
CE_XM_FN float ce_xm_unit_open0(unsigned int x) { return (float)((x >> 8) + 1u) * 0x1p-24f; }

/* Two standard normal values from two Philox words (Box-Muller, both the
 * cosine and the sine). */
CE_XM_FN void ce_xm_box_muller(unsigned int a, unsigned int b, float *z0, float *z1) {
  float radius = ce_xm_sqrt(ce_xm_neg2log(ce_xm_unit_open0(a)));
  float s, c;
  ce_xm_sincos_turns(ce_xm_unit(b), &s, &c);
  *z0 = ce_xm_plus_zero(radius * c);
  *z1 = ce_xm_plus_zero(radius * s);
}

#ifdef __OPENCL_VERSION__
/* The same functions on 16 lanes (explicit vectors: a CPU device's compiler
 * keeps them in SIMD registers, where it would not vectorise the scalar ones
 * across work-items). Lane for lane the same operations in the same order, so
 * the same bits: test_exactmath checks every input against the scalar ones. */
inline float16 ce_xm_neg2log16(float16 u) {
  uint16 ix = as_uint16(u);
  int16 e = convert_int16(ix >> 23) - (int16)(126);
  float16 m = as_float16((ix & (uint16)(0x007FFFFFu)) | (uint16)(0x3F000000u));
  int16 lower = m < (float16)(0.70710678f);
  float16 x = select(m, m + m, lower) - (float16)(1.0f);
  float16 fe = convert_float16(select(e, e - (int16)(1), lower));
  float16 z = x * x;
  float16 p = (float16)(7.0376836292e-2f);
  p = fma(p, x, (float16)(-1.1514610310e-1f));
  p = fma(p, x, (float16)(1.1676998740e-1f));
  p = fma(p, x, (float16)(-1.2420140846e-1f));
  p = fma(p, x, (float16)(1.4249322787e-1f));
  p = fma(p, x, (float16)(-1.6668057665e-1f));
  p = fma(p, x, (float16)(2.0000714765e-1f));
  p = fma(p, x, (float16)(-2.4999993993e-1f));
  p = fma(p, x, (float16)(3.3333331174e-1f));
  float16 y = (x * z) * p;
  y = fma(fe, (float16)(-2.12194440e-4f), y);
  y = fma((float16)(-0.5f), z, y);
  float16 l = x + y;
  l = fma(fe, (float16)(0.693359375f), l);
  return as_float16(as_uint16((float16)(-2.0f) * l) & (uint16)(0x7FFFFFFFu));
}

inline float16 ce_xm_sqrt16(float16 v) {
  int16 pos = v > (float16)(0.0f);
  float16 w = select((float16)(1.0f), v, pos);
  float16 y = as_float16((uint16)(0x5F3759DFu) - (as_uint16(w) >> 1));
  float16 hw = (float16)(0.5f) * w;
  y = y * ((float16)(1.5f) - hw * (y * y));
  y = y * ((float16)(1.5f) - hw * (y * y));
  y = y * ((float16)(1.5f) - hw * (y * y));
  float16 r = w * y;
  float16 d = fma(-r, r, w);
  r = fma((float16)(0.5f) * y, d, r);
  return select((float16)(0.0f), r, pos);
}

inline void ce_xm_sincos_turns16(float16 t, float16 *s_out, float16 *c_out) {
  float16 q = (float16)(4.0f) * t;
  float16 n = rint(q);
  float16 f = q - n;
  uint16 fsign = as_uint16(f) & (uint16)(0x80000000u);
  float16 af = as_float16(as_uint16(f) & (uint16)(0x7FFFFFFFu));
  float16 a = fma(af, (float16)(1.57079637050628662109375f), af * (float16)(-4.37113900018624283e-8f));
  float16 a2 = a * a;
  float16 sp = fma(fma((float16)(-1.9515295891e-4f), a2, (float16)(8.3321608736e-3f)), a2,
                   (float16)(-1.6666654611e-1f));
  float16 s = fma(a * a2, sp, a);
  float16 cp = fma(fma((float16)(2.443315711809948e-5f), a2, (float16)(-1.388731625493765e-3f)), a2,
                   (float16)(4.166664568298827e-2f));
  float16 c = fma(a2 * a2, cp, fma((float16)(-0.5f), a2, (float16)(1.0f)));
  uint16 sb = as_uint16(s) & (uint16)(0x7FFFFFFFu), cb = as_uint16(c) & (uint16)(0x7FFFFFFFu);
  uint16 quadrant = convert_uint16(convert_int16(n) & (int16)(3));
  uint16 sign = (uint16)(0x80000000u), zero = (uint16)(0u);
  uint16 odd_sign = select(zero, sign, quadrant == (uint16)(1u));
  uint16 even_sign = select(zero, sign, quadrant == (uint16)(2u));
  uint16 sin_s = select(zero, sb | (fsign ^ even_sign), sb != zero);
  uint16 cos_s = select(zero, sb | (fsign ^ odd_sign), sb != zero);
  int16 odd = convert_int16(quadrant & (uint16)(1u)) != (int16)(0);
  *s_out = as_float16(select(sin_s, cb | select(zero, sign, quadrant == (uint16)(3u)), odd));
  *c_out = as_float16(select(cb | even_sign, cos_s, odd));
}

inline float16 ce_xm_plus_zero16(float16 v) {
  uint16 b = as_uint16(v);
  return as_float16(select((uint16)(0u), b, (b << 1) != (uint16)(0u)));
}

inline float16 ce_xm_unit16(uint16 x) { return convert_float16(x >> 8) * (float16)(0x1p-24f); }
inline float16 ce_xm_unit_open016(uint16 x) { return convert_float16((x >> 8) + (uint16)(1u)) * (float16)(0x1p-24f); }

inline void ce_xm_box_muller16(uint16 a, uint16 b, float16 *z0, float16 *z1) {
  float16 radius = ce_xm_sqrt16(ce_xm_neg2log16(ce_xm_unit_open016(a)));
  float16 s, c;
  ce_xm_sincos_turns16(ce_xm_unit16(b), &s, &c);
  *z0 = ce_xm_plus_zero16(radius * c);
  *z1 = ce_xm_plus_zero16(radius * s);
}
#endif
