/* Host-side angle preparation and the RoPE frequencies (see freq.h). */
#include "freq.h"

#include <math.h>

/* 1/(2 pi) as three doubles (their sum is within 2^-160 of it). */
#define CE_INV2PI_1 0x1.45f306dc9c883p-3
#define CE_INV2PI_2 (-0x1.6b01ec5417056p-57)
#define CE_INV2PI_3 (-0x1.6447e493ad4cep-111)

/* a*b = *p + *e exactly (fma is correctly rounded). */
static void two_prod(double a, double b, double *p, double *e) {
  *p = a * b;
  *e = fma(a, b, -*p);
}
/* a+b = *s + *e exactly. */
static void two_sum(double a, double b, double *s, double *e) {
  double t = a + b, bb = t - a;
  *s = t;
  *e = (a - (t - bb)) + (b - bb);
}
/* x - floor(x), exact for every finite double (0 for |x| >= 2^52). */
static double frac_exact(double x) { return x - floor(x); }

/* The fraction of scale * w / (2 pi) in turns, as f + lo with f in [0, 1) and
 * |lo| below 2^-50; scale is a power of two. w/(2 pi) is w times the three
 * parts of 1/(2 pi): two exact products and a third term, each reduced modulo 1
 * exactly before they are added. */
static void turns_fraction(double w, double scale, double *f, double *lo) {
  double p1, e1, p2, e2, t3 = w * CE_INV2PI_3 * scale;
  two_prod(w, CE_INV2PI_1, &p1, &e1);
  two_prod(w, CE_INV2PI_2, &p2, &e2);
  double c[5] = {frac_exact(p1 * scale), frac_exact(e1 * scale), frac_exact(p2 * scale), frac_exact(e2 * scale),
                 frac_exact(t3)};
  double s = 0.0, err = 0.0;
  for (int i = 0; i < 5; i++) {
    double e;
    two_sum(s, c[i], &s, &e);
    err += e;
  }
  double h = frac_exact(s), e;
  two_sum(h, err, &s, &e); /* err is tiny: s within [-2^-40, 1 + 2^-40) */
  h = frac_exact(s);
  *f = h;
  *lo = e;
}

/* Three 7-bit digits and a remainder of the fraction f + lo. */
static void digits(double f, double lo, float *out) {
  double m = rint(f * 0x1p21);          /* 0 .. 2^21 */
  double rest = (f - m * 0x1p-21) + lo; /* the subtraction is exact; |rest| <= 2^-22 + |lo| */
  unsigned long mi = (unsigned long)m & 0x1FFFFFul; /* 2^21 is 0 turns modulo 1 */
  out[0] = (float)((double)(mi >> 14) * 0x1p-7);
  out[1] = (float)((double)((mi >> 7) & 0x7Ful) * 0x1p-14);
  out[2] = (float)((double)(mi & 0x7Ful) * 0x1p-21);
  out[3] = (float)rest;
}

void ce_angle_pieces(double w, float out[CE_ANGLE_PIECES]) {
  double f, lo;
  turns_fraction(w, 0x1p16, &f, &lo);
  digits(f, lo, out);
  turns_fraction(w, 1.0, &f, &lo);
  digits(f, lo, out + 4);
}

size_t ce_rope_rotary_dim(const clembed_rope *r, const char **why) {
  *why = NULL;
  if (r->head_dim == 0) {
    *why = "head_dim must be > 0";
    return 0;
  }
  size_t R = r->rotary_dim ? r->rotary_dim : r->head_dim;
  if (R > r->head_dim) {
    *why = "rotary_dim must be <= head_dim";
    return 0;
  }
  if (R % 2) {
    *why = r->rotary_dim ? "rotary_dim must be even" : "head_dim is odd: give an even rotary_dim";
    return 0;
  }
  return R;
}

static int positive(double x) { return isfinite(x) && x > 0.0; }

const char *ce_rope_frequencies(const clembed_rope *r, size_t R, double *w, double *attention) {
  size_t half = R / 2;
  double base = r->base, factor = r->factor;
  if (!positive(base)) return "base must be finite and > 0";
  if (r->layout != CLEMBED_ROPE_NEOX && r->layout != CLEMBED_ROPE_GPTJ) return "unknown layout";
  if (!(r->attention_factor >= 0.0) || !isfinite(r->attention_factor))
    return "attention_factor must be finite and >= 0 (0: the default)";
  switch (r->scaling) {
  case CLEMBED_ROPE_SCALING_NONE:
    break;
  case CLEMBED_ROPE_SCALING_LINEAR:
  case CLEMBED_ROPE_SCALING_NTK:
  case CLEMBED_ROPE_SCALING_YARN:
  case CLEMBED_ROPE_SCALING_LLAMA3:
    if (!positive(factor)) return "factor must be finite and > 0";
    break;
  default:
    return "unknown scaling";
  }
  if (r->scaling == CLEMBED_ROPE_SCALING_NTK) {
    if (R <= 2) return "NTK scaling needs a rotary dimension > 2 (the base is base * factor^(R/(R-2)))";
    base = base * pow(factor, (double)R / (double)(R - 2));
    if (!positive(base)) return "NTK scaling: base * factor^(R/(R-2)) is not finite";
  }
  for (size_t k = 0; k < half; k++) w[k] = pow(base, -(double)(2 * k) / (double)R);
  *attention = r->attention_factor > 0.0 ? r->attention_factor : 1.0;

  if (r->scaling == CLEMBED_ROPE_SCALING_LINEAR) {
    for (size_t k = 0; k < half; k++) w[k] /= factor;
  } else if (r->scaling == CLEMBED_ROPE_SCALING_YARN) {
    /* transformers' _compute_yarn_parameters, truncate = True */
    double omp = (double)r->original_max_position;
    double beta_fast = r->beta_fast != 0.0 ? r->beta_fast : 32.0;
    double beta_slow = r->beta_slow != 0.0 ? r->beta_slow : 1.0;
    if (r->original_max_position == 0) return "YARN scaling needs original_max_position > 0";
    if (!(base > 1.0)) return "YARN scaling needs base > 1";
    if (!positive(beta_fast) || !positive(beta_slow)) return "beta_fast and beta_slow must be finite and > 0";
    const double two_pi = 6.283185307179586;
    double low = floor((double)R * log(omp / (beta_fast * two_pi)) / (2.0 * log(base)));
    double high = ceil((double)R * log(omp / (beta_slow * two_pi)) / (2.0 * log(base)));
    if (low < 0.0) low = 0.0;
    if (high > (double)(R - 1)) high = (double)(R - 1);
    if (low == high) high += 0.001;
    for (size_t k = 0; k < half; k++) {
      double ramp = ((double)k - low) / (high - low);
      ramp = ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp;
      double extrapolation = 1.0 - ramp;
      double interp = w[k] / factor, extrap = w[k];
      w[k] = interp * (1.0 - extrapolation) + extrap * extrapolation;
    }
    if (r->attention_factor == 0.0) *attention = factor <= 1.0 ? 1.0 : 0.1 * log(factor) + 1.0;
  } else if (r->scaling == CLEMBED_ROPE_SCALING_LLAMA3) {
    /* transformers' _compute_llama3_parameters */
    double omp = (double)r->original_max_position;
    double lff = r->low_freq_factor, hff = r->high_freq_factor;
    if (r->original_max_position == 0) return "LLAMA3 scaling needs original_max_position > 0";
    if (!positive(lff) || !positive(hff) || !(hff > lff))
      return "LLAMA3 scaling needs 0 < low_freq_factor < high_freq_factor";
    double low_wavelen = omp / lff, high_wavelen = omp / hff;
    const double two_pi = 6.283185307179586;
    for (size_t k = 0; k < half; k++) {
      double inv = w[k], wavelen = two_pi / inv;
      if (wavelen > low_wavelen) {
        w[k] = inv / factor;
      } else if (!(wavelen < high_wavelen)) {
        double smooth = (omp / wavelen - lff) / (hff - lff);
        w[k] = (1.0 - smooth) * inv / factor + smooth * inv;
      }
    }
  }
  for (size_t k = 0; k < half; k++)
    if (!isfinite(w[k]) || !(w[k] >= 0.0)) return "a frequency is not finite (check base and factor)";
  if (!isfinite(*attention)) return "the attention factor is not finite";
  return NULL;
}
