/* angle.cl: exact angles p*w for positions p < 2^32 on a float32 device, and
 * sin/cos from them with clembed's own polynomials (the accuracy does not rest
 * on the device's sin/cos, which OpenCL allows 4 ulp). No fma, no fp64:
 * every product below is exact in float because its factors have few bits,
 * and every reduction modulo one turn is exact (x - round(x) always is).
 *
 * A frequency w comes from the host (src/ops/rope_freq.c, ce_angle_pieces) as
 * 8 floats in turns: A1..A4 for frac(2^16 * w / 2pi), B1..B4 for frac(w / 2pi).
 * A1, A2, A3 are 7-bit digits (multiples of 2^-7, 2^-14, 2^-21 below 1), A4 the
 * rest (|A4| <= 2^-22, within 2^-46). With p = h*2^16 + l (h, l < 2^16):
 *   p*w/2pi = h*2^16*w/2pi + l*w/2pi = h*(A1+A2+A3+A4) + l*(B1+B2+B3+B4)  (mod 1)
 * For each digit, h*Ai + l*Bi is exact (two 23-bit products on the same grid,
 * their sum within 24 bits) and is reduced modulo 1 exactly; the reduced
 * digits add up exactly. h*A4 + l*B4 (below 2^-5) is the only rounded part.
 * The result, in turns, is within 2^-28 of exact; the quadrant is taken in
 * turns (exact), and the rest (at most 1/8 turn) becomes radians with an exact
 * split product and a single rounding. */

#pragma OPENCL FP_CONTRACT OFF

/* Positions are below 2^32. */
#define CE_POSITION_END ((ulong)1 << 32)

/* round to nearest even for |x| <= 2^22: x + 1.5*2^23 lands where the ulp is 1
 * (FP_CONTRACT OFF and no fast-math keep both additions); the same value as
 * rint(x), in two additions rather than a call some compilers do not vectorize */
#define CE_RINT_MAGIC 0x1.8p23f
inline float ce_rint22(float x) { return (x + CE_RINT_MAGIC) - CE_RINT_MAGIC; }
inline float ce_frac1(float x) { return x - ce_rint22(x); } /* exact: x - round(x), in [-1/2, 1/2] */

/* Reduces p*w (p < 2^32; a, b: A1..A4 and B1..B4) to y in radians, |y| <= pi/4
 * (+2^-30), and a quadrant: p*w = 2pi*n + quadrant*pi/2 + y. */
inline float ce_angle_reduce(uint p, float4 a, float4 b, int *quadrant) {
  float h = (float)(p >> 16), l = (float)(p & 0xFFFFu);
  /* digits 1 and 2: multiples of 2^-7 and 2^-14, reduced, their sum exact in [-1, 1] */
  float s = ce_frac1(h * a.x + l * b.x) + ce_frac1(h * a.y + l * b.y);
  /* digit 3: multiples of 2^-21; |s| <= 3/2, exact */
  s = s + ce_frac1(h * a.z + l * b.z);
  float t = h * a.w + l * b.w; /* |t| <= 2^-5 */
  /* quadrant in turns: r = s - q/4 is exact (multiples of 2^-21, |r| < 1/4);
   * q may be -6 .. 6, a whole number of quarter turns */
  float q = ce_rint22((s + t) * 4.0f);
  float r = s - q * 0.25f;
  /* radians: r = rh + rl with rh on a 2^-12 grid (10 bits), rl on 2^-21 (8
   * bits); C1 = 2pi to 12 bits, so rh*C1 and rl*C1 are exact */
  const float C1 = 0x1.922p+2f;      /* 6.28320312 */
  const float C2 = -0x1.2aeef4p-16f; /* 2pi - C1, to float */
  const float TWO_PI = 0x1.921fb6p+2f;
  float rh = ce_rint22(r * 4096.0f) * 0x1p-12f, rl = r - rh;
  float yh = rh * C1;
  float yl = rl * C1 + (r * C2 + t * TWO_PI);
  *quadrant = (int)q & 3;
  return yh + yl;
}

/* sin(y) and cos(y) for |y| <= pi/4 (Cephes' sinf/cosf polynomials, within
 * about 6e-8, evaluated in float). */
inline float ce_sin_poly(float y) {
  float z = y * y;
  return y + y * z * ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f);
}
inline float ce_cos_poly(float y) {
  float z = y * y;
  return 1.0f - 0.5f * z + z * z * ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f);
}

/* sin(p*w) (phase 0) or cos(p*w) (phase 1): sin of the next quadrant. */
inline float ce_angle_sin(uint p, float4 a, float4 b, int phase) {
  int quad;
  float y = ce_angle_reduce(p, a, b, &quad);
  quad = (quad + phase) & 3;
  float v = (quad & 1) ? ce_cos_poly(y) : ce_sin_poly(y);
  return (quad & 2) ? -v : v;
}

/* cos(p*w) and sin(p*w) together. */
inline float2 ce_angle_cos_sin(uint p, float4 a, float4 b) {
  int quad;
  float y = ce_angle_reduce(p, a, b, &quad);
  float sy = ce_sin_poly(y), cy = ce_cos_poly(y);
  float c = (quad & 1) ? -sy : cy, s = (quad & 1) ? cy : sy;
  return (quad & 2) ? (float2)(-c, -s) : (float2)(c, s);
}

/* ------------------------------------------------------------- sinusoid */

/* The sinusoid's frequencies come as 9 planes of `cols` floats: planes 0-3 the
 * columns' A1..A4, 4-7 their B1..B4, plane 8 the phase (0: sin, 1: cos).
 * Column c of position p (p < 2^32, checked by the caller). */
inline float ce_sinusoid(ulong p, __global const float *f, ulong cols, ulong c) {
  float4 a = (float4)(f[c], f[cols + c], f[2 * cols + c], f[3 * cols + c]);
  float4 b = (float4)(f[4 * cols + c], f[5 * cols + c], f[6 * cols + c], f[7 * cols + c]);
  return ce_angle_sin((uint)p, a, b, (int)f[8 * cols + c]);
}

#ifdef VEC
/* ce_sinusoid for VEC consecutive columns c .. c + VEC - 1 of one position:
 * the same operations lane by lane, so the same bits. */
#define IV CE_XCAT(int, VEC)
#define convert_IV CE_XCAT(convert_int, VEC)
inline FV ce_rint22v(FV x) { return (x + (FV)(CE_RINT_MAGIC)) - (FV)(CE_RINT_MAGIC); }
inline FV ce_frac1v(FV x) { return x - ce_rint22v(x); }
inline FV ce_sin_polyv(FV y) {
  FV z = y * y;
  return y + y * z * (((FV)(-1.9515295891e-4f) * z + (FV)(8.3321608736e-3f)) * z - (FV)(1.6666654611e-1f));
}
inline FV ce_cos_polyv(FV y) {
  FV z = y * y;
  return (FV)(1.0f) - (FV)(0.5f) * z +
         z * z * (((FV)(2.443315711809948e-5f) * z - (FV)(1.388731625493765e-3f)) * z + (FV)(4.166664568298827e-2f));
}
/* ce_angle_reduce lane by lane (the same operations, so the same bits) for
 * VEC frequencies whose pieces are at f + j*stride + c, j = 0..7. */
inline FV ce_angle_reducev(uint p, __global const float *f, ulong stride, ulong c, IV *quad) {
  FV a1 = vloadV(0, f + c), a2 = vloadV(0, f + stride + c), a3 = vloadV(0, f + 2 * stride + c);
  FV a4 = vloadV(0, f + 3 * stride + c), b1 = vloadV(0, f + 4 * stride + c), b2 = vloadV(0, f + 5 * stride + c);
  FV b3 = vloadV(0, f + 6 * stride + c), b4 = vloadV(0, f + 7 * stride + c);
  FV h = (FV)((float)(p >> 16)), l = (FV)((float)(p & 0xFFFFu));
  FV s = ce_frac1v(h * a1 + l * b1) + ce_frac1v(h * a2 + l * b2);
  s = s + ce_frac1v(h * a3 + l * b3);
  FV t = h * a4 + l * b4;
  FV q = ce_rint22v((s + t) * (FV)(4.0f));
  FV r = s - q * (FV)(0.25f);
  FV rh = ce_rint22v(r * (FV)(4096.0f)) * (FV)(0x1p-12f), rl = r - rh;
  FV yh = rh * (FV)(0x1.922p+2f);
  FV yl = rl * (FV)(0x1.922p+2f) + (r * (FV)(-0x1.2aeef4p-16f) + t * (FV)(0x1.921fb6p+2f));
  *quad = convert_IV(q) & 3;
  return yh + yl;
}

/* ce_sinusoid for VEC consecutive columns c .. c + VEC - 1 of one position. */
inline FV ce_sinusoidv(ulong p, __global const float *f, ulong cols, ulong c) {
  IV quad;
  FV y = ce_angle_reducev((uint)p, f, cols, c, &quad);
  quad = (quad + convert_IV(vloadV(0, f + 8 * cols + c))) & 3;
  FV v = select(ce_sin_polyv(y), ce_cos_polyv(y), (quad & 1) != 0);
  return select(v, -v, (quad & 2) != 0);
}

/* ce_angle_cos_sin for VEC frequencies (pieces at f + j*stride + c). */
inline void ce_angle_cos_sinv(uint p, __global const float *f, ulong stride, ulong c, FV *cv, FV *sv) {
  IV quad;
  FV y = ce_angle_reducev(p, f, stride, c, &quad);
  FV sy = ce_sin_polyv(y), cy = ce_cos_polyv(y);
  IV odd = (quad & 1) != 0, neg = (quad & 2) != 0;
  FV co = select(cy, -sy, odd), si = select(sy, cy, odd);
  *cv = select(co, -co, neg);
  *sv = select(si, -si, neg);
}
#endif
