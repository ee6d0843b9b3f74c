/* angle.cl: sin and cos of p*w to 1e-6 whatever the device's sin/cos: the
 * angle carried in float-float, reduced modulo 2*pi in extended precision,
 * then short polynomials on |y| <= pi/4. The sinusoid uses it; a rotary
 * embedding's angles are the same products. */

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
 * branch-free path. The error is about 2e-7 for angles below 2^20 (the
 * measurement is in docs/performance.md). */
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

#ifdef VEC
/* ce_sinusoid for VEC consecutive columns of one position: the same operations
 * lane by lane, so the same bits. fx, fy: the columns' (w_hi, w_lo). */
#define IV CE_XCAT(int, VEC)
#define convert_IV CE_XCAT(convert_int, VEC)
inline FV ce_sin_polyv(FV y) {
  FV z = y * y;
  return y + y * z * (((FV)(-1.9515295891e-4f) * z + (FV)(8.3321608736e-3f)) * z - (FV)(1.6666654611e-1f));
}
inline FV ce_cos_polyv(FV y) {
  FV z = y * y;
  return (FV)(1.0f) - (FV)(0.5f) * z +
         z * z * (((FV)(2.443315711809948e-5f) * z - (FV)(1.388731625493765e-3f)) * z + (FV)(4.166664568298827e-2f));
}
inline FV ce_sinusoidv(ulong p, FV fx, FV fy) {
  const FV C1 = (FV)(0x1.921fb6p+2f), C2 = (FV)(-0x1.777a5cp-23f), C3 = (FV)(-0x1p-47f);
  const FV H1 = (FV)(0x1.921fb6p+0f), H2 = (FV)(-0x1.777a5cp-25f);
  IV is_cos = signbit(fx) & 1;
  FV wh = fabs(fx), wl = select(fy, -fy, is_cos != 0);
  FV ph = (FV)((float)(p & ~(ulong)0xFFF)), pl = (FV)((float)(p & (ulong)0xFFF));
  FV a1 = ph * wh, e1 = fma(ph, wh, -a1);
  FV a2 = pl * wh, e2 = fma(pl, wh, -a2);
  FV s = a1 + a2, bb = s - a1, e3 = (a1 - (s - bb)) + (a2 - bb);
  FV lo = ((e1 + e2) + e3) + (FV)((float)p) * wl;
  FV k = rint(s * (FV)(0x1.45f306p-3f));
  FV t = k * C1, et = fma(k, C1, -t);
  FV r = s - t;
  FV rl = fma(-k, C3, fma(-k, C2, lo - et));
  FV x = r + rl;
  FV q = rint(x * (FV)(0x1.45f306p-1f));
  FV y = fma(-q, H2, fma(-q, H1, x));
  IV quad = (convert_IV(q) + is_cos) & 3;
  FV v = select(ce_sin_polyv(y), ce_cos_polyv(y), (quad & 1) != 0);
  return select(v, -v, (quad & 2) != 0);
}
#endif /* VEC */
