/* cl/lib/exactmath.cl compiled for the host (FP contraction off in the tests
 * that include this): the logarithm, square root, sine and cosine of the
 * normal initialisation, so the host computes the bits every device must give. */
#ifndef CLEMBED_EXACTMATH_HOST_H
#define CLEMBED_EXACTMATH_HOST_H

#include <float.h>
#include <math.h>
#include <string.h>

#if FLT_EVAL_METHOD != 0
#error "cl/lib/exactmath.cl on the host needs float arithmetic in float (SSE2 on x86: -mfpmath=sse)"
#endif

static inline unsigned int as_uint(float f) {
  unsigned int u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float as_float(unsigned int u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
#define fma(a, b, c) fmaf(a, b, c)
#define rint(x) rintf(x)
#define CE_XM_FN static inline
#include "../cl/lib/exactmath.cl"
#undef fma
#undef rint

#endif
