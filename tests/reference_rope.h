/* Float64 references for RoPE, written plainly, on reference.h's exact angle
 * (shared with the sinusoid). The angle p*w (p an integer below 2^53, w a double) is formed
 * exactly as a double-double, reduced modulo 2*pi with a three-double 2*pi, and
 * sin/cos of the reduced angle (hi + lo) are taken in double: within about
 * 1e-16 of the exact values. The frequencies follow the contract (include/clembed.h):
 * the sinusoid's base^(-k/d) and RoPE's scalings as Hugging Face transformers'
 * modeling_rope_utils.py computes them, in double. */
#ifndef CLEMBED_REFERENCE_ROPE_H
#define CLEMBED_REFERENCE_ROPE_H

#include "clembed.h"
#include "reference.h" /* the exact angle: ref_angle, ref_sin_exact, ref_cos_exact */

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ RoPE */

/* The frequencies w[0 .. R/2-1] and the attention factor of r for rotary
 * dimension R; 0 on success, -1 for parameters the contract refuses. */
static inline int ref_rope_freq(const clembed_rope *r, size_t R, double *w, double *attention) {
  const double two_pi = 2.0 * 3.141592653589793; /* math.pi */
  double base = r->base, factor = r->factor;
  size_t half = R / 2;
  if (r->scaling == CLEMBED_ROPE_SCALING_NTK) {
    if (R <= 2) return -1;
    base = base * pow(factor, (double)R / (double)(R - 2));
  }
  for (size_t k = 0; k < half; k++) w[k] = pow(base, -(double)(2 * k) / (double)R);
  *attention = r->attention_factor > 0.0 ? r->attention_factor : 1.0;
  switch (r->scaling) {
  case CLEMBED_ROPE_SCALING_NONE:
  case CLEMBED_ROPE_SCALING_NTK:
    break;
  case CLEMBED_ROPE_SCALING_LINEAR: /* inv_freq /= factor */
    for (size_t k = 0; k < half; k++) w[k] = w[k] / factor;
    break;
  case CLEMBED_ROPE_SCALING_YARN: {
    /* find_correction_range(beta_fast, beta_slow, dim, base, original_max_position, truncate=True) */
    double bf = r->beta_fast != 0.0 ? r->beta_fast : 32.0, bs = r->beta_slow != 0.0 ? r->beta_slow : 1.0;
    double omp = (double)r->original_max_position;
    double low = floor((double)R * log(omp / (bf * two_pi)) / (2.0 * log(base)));
    double high = ceil((double)R * log(omp / (bs * two_pi)) / (2.0 * log(base)));
    if (low < 0.0) low = 0.0;
    if (high > (double)R - 1.0) high = (double)R - 1.0;
    if (low == high) high += 0.001; /* linear_ramp_factor's guard */
    for (size_t k = 0; k < half; k++) {
      double ramp = fmin(fmax(((double)k - low) / (high - low), 0.0), 1.0);
      double extrapolation_factor = 1.0 - ramp;
      double inv_interpolation = w[k] / factor, inv_extrapolation = w[k];
      w[k] = inv_interpolation * (1.0 - extrapolation_factor) + inv_extrapolation * extrapolation_factor;
    }
    if (r->attention_factor == 0.0) *attention = factor <= 1.0 ? 1.0 : 0.1 * log(factor) + 1.0;
    break;
  }
  case CLEMBED_ROPE_SCALING_LLAMA3: {
    double omp = (double)r->original_max_position;
    double low_wavelen = omp / r->low_freq_factor, high_wavelen = omp / r->high_freq_factor;
    for (size_t k = 0; k < half; k++) {
      double wavelen = two_pi / w[k];
      double scaled = wavelen > low_wavelen ? w[k] / factor : w[k];
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        double smooth = (omp / wavelen - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
        scaled = (1.0 - smooth) * scaled / factor + smooth * scaled;
      }
      w[k] = scaled;
    }
    break;
  }
  default:
    return -1;
  }
  return 0;
}

/* The rotation of one pair (xa, xb) at position p with frequency w and
 * attention factor a: (xa*c - xb*s, xb*c + xa*s), c = a*cos, s = +-a*sin. */
static inline void ref_rope_pair(uint64_t p, double w, double a, int inverse, double xa, double xb, double *ya,
                                 double *yb) {
  double c = a * ref_cos_exact(p, w), s = a * ref_sin_exact(p, w);
  if (inverse) s = -s;
  *ya = xa * c - xb * s;
  *yb = xb * c + xa * s;
}

/* Column indices of pair k in a head with rotary dimension R. */
static inline void ref_rope_columns(clembed_rope_layout layout, size_t R, size_t k, size_t *ca, size_t *cb) {
  if (layout == CLEMBED_ROPE_GPTJ) {
    *ca = 2 * k;
    *cb = 2 * k + 1;
  } else {
    *ca = k;
    *cb = k + R / 2;
  }
}

#endif
