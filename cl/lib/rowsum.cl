/* rowsum.cl: the row sums of the fused norm (cl/ops/norm.cl) in their one
 * fixed order, and the reciprocal square root it needs, both from operations
 * OpenCL rounds correctly (+, -, *: 0 ulp), so that every device, kernel shape
 * and work size gives the same bits (include/clembed.h, "The input layer of
 * BERT-style models").
 *
 * The sum of a row's values t_0 .. t_(d-1):
 *   q_k = ((0 + t_k) + t_(k+32)) + t_(k+64) + ...   k = 0 .. 31, columns ascending
 *   then for h = 16, 8, 4, 2, 1: q_k = q_k + q_(k+h) for every k < h;  sum = q_0.
 * A GPU work-group keeps q_k in the work-item k mod its width; a CPU work-item
 * keeps them in 32 / VEC vectors, lane j of vector m holding q_(m*VEC + j), and
 * adds the columns from the last whole 32 on lane by lane. Every q_k starts at
 * +0 and so is never -0: adding +0 for a column past the row's end (a vector's
 * padding) leaves it as it is. */

#define CE_ROWSUM_PARTS 32

/* q_0 after the fixed tree over q[0..31] (a private array; q is changed). */
CE_INLINE float ce_rowsum_fold(float *q) {
#pragma unroll
  for (int h = CE_ROWSUM_PARTS / 2; h > 0; h >>= 1) {
#pragma unroll
    for (int k = 0; k < h; k++) q[k] = q[k] + q[k + h];
  }
  return q[0];
}

/* The same for the 32 partial sums in local memory (read, not changed). */
CE_INLINE float ce_rowsum_fold_local(__local const float *part) {
  float q[CE_ROWSUM_PARTS];
  for (int k = 0; k < CE_ROWSUM_PARTS; k++) q[k] = part[k];
  return ce_rowsum_fold(q);
}

/* 1/sqrt(a) for a >= 0 from + and * only: the estimate from the bits, then
 * three Newton steps (within 2 ulp); a subnormal a is scaled by 2^64 first
 * (and the result by 2^32); 0 gives +inf, +inf gives 0, a NaN or a negative a
 * gives NaN. */
CE_INLINE float ce_rsqrt_fixed(float a) {
  if (!(a > 0.0f)) return a == 0.0f ? INFINITY : NAN;
  if (a == INFINITY) return 0.0f;
  float post = 1.0f;
  if (a < 0x1p-126f) {
    a = a * 0x1p64f;
    post = 0x1p32f;
  }
  float y = as_float(0x5F375A86u - (as_uint(a) >> 1)); /* within 0.18% */
  float h = 0.5f * a;
  y = y * (1.5f - (h * y) * y);
  y = y * (1.5f - (h * y) * y);
  y = y * (1.5f - (h * y) * y);
  return y * post;
}
