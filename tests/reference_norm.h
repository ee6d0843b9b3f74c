/* The references of the BERT-style input layer (include/clembed.h, "The input
 * layer of BERT-style models"), written plainly from the contract:
 *   - the float64 result of a row: LayerNorm or RMSNorm of the float32 x
 *     (mean, biased variance, 1/sqrt in float64), and its backward's dx;
 *   - the float32 operations in the header's order (the row sum's 32 partial
 *     sums and fixed tree, rsqrt's three Newton steps), which every device and
 *     kernel shape must match bit for bit. Compile without FP contraction
 *     (-ffp-contract=off), as the kernels run. */
#ifndef CLEMBED_TEST_REFERENCE_NORM_H
#define CLEMBED_TEST_REFERENCE_NORM_H

#include "clembed.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------ float32, the header's order */

/* The row sum: q_k over the columns k, k + 32, ... ascending from +0, then
 * q_k = q_k + q_(k+h) for h = 16, 8, 4, 2, 1. */
static inline float ref_rowsum32(const float *t, size_t d) {
  float q[32];
  for (int k = 0; k < 32; k++) q[k] = 0.0f;
  for (size_t c = 0; c < d; c++) q[c % 32] = q[c % 32] + t[c];
  for (int h = 16; h > 0; h /= 2)
    for (int k = 0; k < h; k++) q[k] = q[k] + q[k + h];
  return q[0];
}

/* rsqrt: the estimate from the bits 0x5F375A86 - (bits >> 1), three Newton
 * steps y = y * (1.5 - ((0.5 * a) * y) * y); a subnormal a scaled by 2^64. */
static inline float ref_rsqrt32(float a) {
  if (!(a > 0.0f)) return a == 0.0f ? INFINITY : NAN;
  if (isinf(a)) return 0.0f;
  float post = 1.0f;
  if (a < 0x1p-126f) {
    a = a * 0x1p64f;
    post = 0x1p32f;
  }
  uint32_t u;
  memcpy(&u, &a, 4);
  u = 0x5F375A86u - (u >> 1);
  float y;
  memcpy(&y, &u, 4);
  float h = 0.5f * a;
  for (int s = 0; s < 3; s++) {
    float hy = h * y, hyy = hy * y, f = 1.5f - hyy;
    y = y * f;
  }
  return y * post;
}

/* A row's statistics in float32: mean (LAYER; 0 for RMS) and rstd. */
static inline void ref_norm_stats32(const float *x, size_t d, clembed_norm_kind kind, float eps, float *mean,
                                    float *rstd) {
  float inv_d = (float)(1.0 / (double)d);
  float *t = malloc((d + 1) * sizeof(float));
  *mean = 0.0f;
  if (kind == CLEMBED_NORM_LAYER) {
    *mean = ref_rowsum32(x, d) * inv_d;
    for (size_t c = 0; c < d; c++) {
      float v = x[c] - *mean;
      t[c] = v * v;
    }
  } else {
    for (size_t c = 0; c < d; c++) t[c] = x[c] * x[c];
  }
  float s = ref_rowsum32(t, d) * inv_d;
  *rstd = ref_rsqrt32(s + eps);
  free(t);
}

/* y of one row in float32 (w, b NULL: none). */
static inline void ref_norm_row32(const float *x, size_t d, clembed_norm_kind kind, const float *w, const float *b,
                                  float eps, float *y) {
  if (kind == CLEMBED_NORM_NONE) {
    memcpy(y, x, d * sizeof(float));
    return;
  }
  float mean, rstd;
  ref_norm_stats32(x, d, kind, eps, &mean, &rstd);
  for (size_t c = 0; c < d; c++) {
    float v = kind == CLEMBED_NORM_LAYER ? x[c] - mean : x[c];
    float yc = v * rstd;
    if (w) yc = yc * w[c];
    if (b) yc = yc + b[c];
    y[c] = yc;
  }
}

/* dx and g * xh of one row in float32, from the masked gradient g. */
static inline void ref_norm_backward_row32(const float *x, const float *g, size_t d, clembed_norm_kind kind,
                                           const float *w, float eps, float *dx, float *gxh) {
  float mean, rstd, inv_d = (float)(1.0 / (double)d);
  ref_norm_stats32(x, d, kind, eps, &mean, &rstd);
  float *h = malloc((d + 1) * sizeof(float)), *hx = malloc((d + 1) * sizeof(float));
  float *xh = malloc((d + 1) * sizeof(float));
  for (size_t c = 0; c < d; c++) {
    xh[c] = kind == CLEMBED_NORM_LAYER ? (x[c] - mean) * rstd : x[c] * rstd;
    h[c] = w ? g[c] * w[c] : g[c];
    hx[c] = h[c] * xh[c];
  }
  float A = ref_rowsum32(h, d) * inv_d, B = ref_rowsum32(hx, d) * inv_d;
  for (size_t c = 0; c < d; c++) {
    float xb = xh[c] * B, r;
    if (kind == CLEMBED_NORM_LAYER) {
      float ha = h[c] - A;
      r = ha - xb;
    } else {
      r = h[c] - xb;
    }
    dx[c] = rstd * r;
    gxh[c] = g[c] * xh[c];
  }
  free(h);
  free(hx);
  free(xh);
}

/* ------------------------------------------------------------ float64 */

/* The float64 statistics of a float32 row. */
static inline void ref_norm_stats64(const float *x, size_t d, clembed_norm_kind kind, double eps, double *mean,
                                    double *rstd) {
  double s = 0.0, q = 0.0;
  for (size_t c = 0; c < d; c++) s += x[c];
  *mean = kind == CLEMBED_NORM_LAYER ? s / (double)d : 0.0;
  for (size_t c = 0; c < d; c++) q += ((double)x[c] - *mean) * ((double)x[c] - *mean);
  *rstd = 1.0 / sqrt(q / (double)d + eps);
}

static inline void ref_norm_row64(const float *x, size_t d, clembed_norm_kind kind, const float *w, const float *b,
                                  double eps, double *y) {
  double mean = 0.0, rstd = 1.0;
  if (kind != CLEMBED_NORM_NONE) ref_norm_stats64(x, d, kind, eps, &mean, &rstd);
  for (size_t c = 0; c < d; c++) {
    double v = ((double)x[c] - mean) * rstd;
    if (w) v *= w[c];
    if (b) v += b[c];
    y[c] = v;
  }
}

/* dx (float64) of one row from the masked gradient g (as float32 values), and
 * mag[c], a bound of the terms' sizes for a tolerance; gxh = g * xh. */
static inline void ref_norm_backward_row64(const float *x, const float *g, size_t d, clembed_norm_kind kind,
                                           const float *w, double eps, double *dx, double *gxh, double *mag) {
  double mean, rstd, a = 0.0, b = 0.0;
  ref_norm_stats64(x, d, kind, eps, &mean, &rstd);
  for (size_t c = 0; c < d; c++) {
    double xh = ((double)x[c] - mean) * rstd, h = w ? (double)g[c] * w[c] : (double)g[c];
    a += h;
    b += h * xh;
  }
  a /= (double)d;
  b /= (double)d;
  if (kind != CLEMBED_NORM_LAYER) a = 0.0;
  for (size_t c = 0; c < d; c++) {
    double xh = ((double)x[c] - mean) * rstd, h = w ? (double)g[c] * w[c] : (double)g[c];
    dx[c] = rstd * ((h - a) - xh * b);
    gxh[c] = (double)g[c] * xh;
    mag[c] = rstd * (fabs(h) + fabs(a) + fabs(xh * b));
  }
}

#endif
