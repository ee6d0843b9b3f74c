/* The references every test compares against, written plainly from the
 * contract (include/clembed.h, clembed_io.h) and
 * from the published definitions, independent of src/ (nothing here calls the
 * library): dtype conversions and rounding, id resolution under each policy and
 * padding, the exact sinusoid (p*w formed and reduced exactly; RoPE in
 * reference_rope.h shares its angle), Philox4x32-10 with its uniform/normal/
 * dropout draws (init: four elements per counter),
 * the forward element, the backward's row and position sums, and the SGD step.
 * Where the contract says exact, a reference does the device's float32
 * operations in the same order (sums in ascending token order); elsewhere it
 * computes in float64 and the test states its tolerance. */
#ifndef CLEMBED_TEST_REFERENCE_H
#define CLEMBED_TEST_REFERENCE_H

#include "clembed.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ dtypes */

/* IEEE binary16 to float, from its fields (exact in float64). */
static inline float ref_f16_to_f32(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) return m ? NAN : (s ? -INFINITY : INFINITY);
  if (e == 0) v = ldexp((double)m, -24);
  else v = ldexp((double)(m + 1024), e - 25);
  return (float)(s ? -v : v);
}

/* Round to nearest even by search: the half whose value is nearest to f (ties
 * to the even bit pattern); 65520 and above overflow to inf; NaN is 0x7E00. */
static inline uint16_t ref_f32_to_f16(float f) {
  if (isnan(f)) return 0x7E00;
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  double a = fabs((double)f);
  if (a >= 65520.0) return sign | 0x7C00;
  uint16_t best = 0;
  double bd = INFINITY;
  /* binary search over the ordered positive halves */
  int lo = 0, hi = 0x7BFF;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (ref_f16_to_f32((uint16_t)mid) <= a) lo = mid; else hi = mid - 1;
  }
  for (int c = lo; c <= lo + 1 && c <= 0x7C00; c++) {
    double d = fabs((double)ref_f16_to_f32((uint16_t)c) - a);
    if (d < bd || (d == bd && (c & 1) == 0)) { bd = d; best = (uint16_t)c; }
  }
  return sign | best;
}

static inline float ref_bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* The upper 16 bits, rounded to nearest even on the lower 16; NaN stays a quiet NaN. */
static inline uint16_t ref_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  uint32_t lower = u & 0xFFFF, upper = u >> 16;
  if (lower > 0x8000 || (lower == 0x8000 && (upper & 1))) upper++;
  return (uint16_t)upper;
}

/* The value a float takes when stored in dtype t and read back. */
static inline float ref_round(float v, clembed_dtype t) {
  if (t == CLEMBED_F16) return ref_f16_to_f32(ref_f32_to_f16(v));
  if (t == CLEMBED_BF16) return ref_bf16_to_f32(ref_f32_to_bf16(v));
  return v;
}

/* ------------------------------------------------------------ ids */

/* The row padding_idx names in a table of `rows` rows, or -1 for none:
 * CLEMBED_NO_PADDING is none, a negative index counts from the end. */
static inline int64_t ref_padding_row(int64_t padding_idx, int64_t rows) {
  if (padding_idx == CLEMBED_NO_PADDING) return -1;
  return padding_idx < 0 ? padding_idx + rows : padding_idx;
}

/* The row an id reads under a policy, or -1 for a zero row (out of range under
 * CHECK, ZERO or WRAP, or the padding row `pad_row` from ref_padding_row).
 * *bad (when not NULL) is 1 when the id is an error: out of range under CHECK,
 * or under WRAP below -rows or at rows and above. */
static inline int64_t ref_resolve(int64_t id, int64_t rows, clembed_index_policy policy, int64_t pad_row, int *bad) {
  if (bad) *bad = 0;
  if (policy == CLEMBED_INDEX_WRAP && id < 0 && id >= -rows) id += rows;
  if (id < 0 || id >= rows) {
    if (policy == CLEMBED_INDEX_CLAMP && rows > 0) {
      id = id < 0 ? 0 : rows - 1;
    } else {
      if (bad) *bad = policy != CLEMBED_INDEX_ZERO;
      return -1;
    }
  }
  return id == pad_row ? -1 : id;
}

/* ------------------------------------------------------------ sinusoid */

/* The exact sinusoid: the angle p*w (p an integer below 2^53, w a double) is
 * formed exactly as a double-double, reduced modulo 2*pi with a three-double
 * 2*pi, and sin/cos of the reduced angle (hi + lo) are taken in double: within
 * about 1e-16 of the exact values. RoPE (reference_rope.h) uses the same angle. */

/* 2*pi = REF_2PI_1 + REF_2PI_2 + REF_2PI_3 (to about 2^-160) */
#define REF_2PI_1 0x1.921fb54442d18p+2
#define REF_2PI_2 0x1.1a62633145c07p-52
#define REF_2PI_3 (-0x1.f1976b7ed8fbcp-108)

typedef struct ref_dd {
  double hi, lo;
} ref_dd;

static inline ref_dd ref_two_sum(double a, double b) {
  double s = a + b, bb = s - a;
  ref_dd r = {s, (a - (s - bb)) + (b - bb)};
  return r;
}
static inline ref_dd ref_two_prod(double a, double b) {
  double p = a * b;
  ref_dd r = {p, fma(a, b, -p)};
  return r;
}
/* a + b for double-doubles (accurate to about 2^-104 of the larger). */
static inline ref_dd ref_dd_add(ref_dd a, ref_dd b) {
  ref_dd s = ref_two_sum(a.hi, b.hi);
  ref_dd t = ref_two_sum(a.lo, b.lo);
  s.lo += t.hi;
  s = ref_two_sum(s.hi, s.lo);
  s.lo += t.lo;
  return ref_two_sum(s.hi, s.lo);
}
static inline ref_dd ref_dd_neg(ref_dd a) {
  ref_dd r = {-a.hi, -a.lo};
  return r;
}

/* p*w - 2*pi*k for the nearest k, as a double-double in [-pi, pi] (about). */
static inline ref_dd ref_angle(uint64_t p, double w) {
  ref_dd x = ref_two_prod((double)p, w); /* exact: p < 2^53, so p*w fits 106 bits */
  double k = nearbyint(x.hi / REF_2PI_1);
  ref_dd t1 = ref_two_prod(k, REF_2PI_1), t2 = ref_two_prod(k, REF_2PI_2);
  ref_dd t3 = {k * REF_2PI_3, 0.0};
  ref_dd r = ref_dd_add(x, ref_dd_neg(t1));
  r = ref_dd_add(r, ref_dd_neg(t2));
  r = ref_dd_add(r, ref_dd_neg(t3));
  return r;
}
/* sin(hi + lo) and cos(hi + lo) for |lo| << |hi| */
static inline double ref_sin_exact(uint64_t p, double w) {
  ref_dd r = ref_angle(p, w);
  return sin(r.hi) + r.lo * cos(r.hi);
}
static inline double ref_cos_exact(uint64_t p, double w) {
  ref_dd r = ref_angle(p, w);
  return cos(r.hi) - r.lo * sin(r.hi);
}

/* ------------------------------------------------------------- sinusoid */

/* Column c's frequency and kind (1: cos) for d columns (include/clembed.h, clembed_positional). */
static inline double ref_sinusoid_freq(const clembed_sinusoid *s, size_t d, size_t c, int *is_cos) {
  double num;
  if (s->layout == CLEMBED_LAYOUT_HALVES) {
    size_t h = (d + 1) / 2;
    *is_cos = c >= h;
    num = 2.0 * (double)(c >= h ? c - h : c);
  } else {
    *is_cos = (int)(c % 2);
    num = s->exponent == CLEMBED_EXPONENT_PAIR ? 2.0 * (double)(c / 2) : (double)c;
  }
  return pow(s->base, -num / (double)d);
}
static inline double ref_sinusoid(const clembed_sinusoid *s, size_t d, uint64_t p, size_t c) {
  int is_cos;
  double w = ref_sinusoid_freq(s, d, c, &is_cos);
  return is_cos ? ref_cos_exact(p, w) : ref_sin_exact(p, w);
}

/* ------------------------------------------------------------ Philox */

/* Philox4x32-10 with any key (k0, k1) and counter c[0..3], plainly (Random123). */
static inline void ref_philox_kc(uint32_t k0, uint32_t k1, const uint32_t c[4], uint32_t out[4]) {
  uint32_t c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
  for (int r = 0; r < 10; r++) {
    if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* ... with key (seed lo, seed hi) and counter (e lo, e hi, 0, 0): the init's and dropout's. */
static inline void ref_philox(uint64_t seed, uint64_t e, uint32_t out[4]) {
  const uint32_t c[4] = {(uint32_t)e, (uint32_t)(e >> 32), 0, 0};
  ref_philox_kc((uint32_t)seed, (uint32_t)(seed >> 32), c, out);
}

/* u(x) = (x >> 8) * 2^-24, in [0, 1), exact in float. */
static inline double ref_unit(uint32_t x) { return (double)(x >> 8) / 16777216.0; }

/* Dropout keeps element e (of the output, row-major) when u(word 0) >= p. */
static inline int ref_dropout_kept(uint64_t seed, uint64_t e, float p) {
  uint32_t x[4];
  ref_philox(seed, e, x);
  return ref_unit(x[0]) >= (double)p;
}

/* What dropout multiplies a kept value by: 1 / (1 - p), in float. */
static inline float ref_dropout_scale(float p) { return 1.0f / (1.0f - p); }

/* Initialisation draws (include/clembed.h): one Philox counter serves four
 * consecutive elements: element e takes word j = e % 4 of counter q = e / 4. */

/* init_uniform's element e: low + (high - low) * u(x_j), in float32 in this order. */
static inline float ref_uniform(uint64_t seed, uint64_t e, float low, float high) {
  uint32_t x[4];
  ref_philox(seed, e / 4, x);
  float u = (float)ref_unit(x[e % 4]); /* exact: 24 bits */
  float span = high - low;
  float scaled = span * u;
  return low + scaled;
}

/* init_normal's standard normal value z of element e (float64 Box-Muller of
 * the same 24-bit uniforms): the pair (x0, x1) or (x2, x3) that j falls in,
 * v = ((x_p >> 8) + 1) 2^-24, t = u(x_(p+1)), R = sqrt(-2 ln v); z = R cos 2 pi t
 * for even j, R sin 2 pi t for odd j. */
static inline double ref_normal_z(uint64_t seed, uint64_t e) {
  uint32_t x[4];
  ref_philox(seed, e / 4, x);
  const double pi = 3.14159265358979323846;
  int j = (int)(e % 4), p = j & 2;
  double v = ((double)(x[p] >> 8) + 1.0) / 16777216.0, t = ref_unit(x[p + 1]);
  double r = sqrt(-2.0 * log(v));
  return (j & 1) ? r * sin(2.0 * pi * t) : r * cos(2.0 * pi * t);
}

/* ------------------------------------------------------------ forward */

/* One element of the forward before the output dtype's rounding, in the
 * device's float32 order: (scale * w + pos) * keep. w NULL: the token's row is
 * zero (padding, or an id the policy zeroes); pos NULL: no positional part;
 * dropout > 0: a kept element is multiplied by ref_dropout_scale, a dropped one is 0. */
static inline float ref_forward(float scale, const float *w, const float *pos, float dropout, int kept) {
  float v = w ? scale * *w : 0.0f;
  if (pos) v = v + *pos;
  if (dropout > 0.0f) v = kept ? v * ref_dropout_scale(dropout) : 0.0f;
  return v;
}

/* ------------------------------------------------------------ backward */

/* The dropout-masked gradient element (i, c) of a d-column gradient. */
static inline float ref_masked_grad(float g, size_t i, size_t c, size_t d, const clembed_backward_options *o) {
  if (o->dropout > 0.0f)
    return ref_dropout_kept(o->dropout_seed, (uint64_t)i * d + c, o->dropout) ? g * ref_dropout_scale(o->dropout)
                                                                              : 0.0f;
  return g;
}

/* The gradient of every row: r[v*d + c] = scale * (the float32 sum, in
 * ascending token order, of the masked rows of the tokens that read v), divided
 * by cnt[v] under scale_grad_by_freq; cnt[v] the number of such tokens. */
static inline void ref_backward_rows(const float *g, const int64_t *ids, size_t n, size_t d, size_t V,
                                     const clembed_backward_options *o, float *r, uint32_t *cnt) {
  int64_t pad = ref_padding_row(o->padding_idx, (int64_t)V);
  memset(r, 0, V * d * sizeof(float));
  memset(cnt, 0, V * sizeof(uint32_t));
  for (size_t i = 0; i < n; i++) {
    int64_t v = ref_resolve(ids[i], (int64_t)V, o->policy, pad, NULL);
    if (v < 0) continue;
    cnt[v]++;
    for (size_t c = 0; c < d; c++) {
      float s = r[v * d + c];
      s = s + ref_masked_grad(g[i * d + c], i, c, d, o);
      r[v * d + c] = s;
    }
  }
  for (size_t v = 0; v < V; v++)
    for (size_t c = 0; c < d && cnt[v]; c++) {
      float x = o->scale * r[v * d + c];
      if (o->scale_grad_by_freq) x = x / (float)cnt[v];
      r[v * d + c] = x;
    }
}

/* clembed_backward into a dense V x d float table: a touched row becomes its
 * gradient (plus the old value under accumulate); an untouched row keeps its
 * value under accumulate and is zero otherwise. */
static inline void ref_backward(const float *g, const int64_t *ids, size_t n, size_t d, size_t V,
                                const clembed_backward_options *o, float *table) {
  float *r = malloc((V * d + 1) * sizeof(float));
  uint32_t *cnt = malloc((V + 1) * sizeof(uint32_t));
  ref_backward_rows(g, ids, n, d, V, o, r, cnt);
  for (size_t v = 0; v < V; v++)
    for (size_t c = 0; c < d; c++) {
      float *t = &table[v * d + c];
      if (cnt[v]) *t = o->accumulate ? *t + r[v * d + c] : r[v * d + c];
      else if (!o->accumulate) *t = 0.0f;
    }
  free(r);
  free(cnt);
}

/* position_grad[p] += the float32 sum, in ascending token order, of the masked
 * rows of the tokens at position p (token i of sequence b = i / seq_len is at
 * first_b + i % seq_len, first_b = so[b] or position_offset); tokens at a
 * negative first position or at p >= prows add nothing. */
static inline void ref_backward_positions(const float *g, size_t n, size_t d, size_t prows,
                                          const clembed_backward_options *o, const int64_t *so, float *pg) {
  float *s = calloc(prows * d + 1, sizeof(float));
  char *hit = calloc(prows + 1, 1);
  for (size_t i = 0; i < n; i++) {
    size_t b = o->seq_len ? i / o->seq_len : 0, j = o->seq_len ? i % o->seq_len : i;
    int64_t first = so ? so[b] : (int64_t)o->position_offset;
    uint64_t p = (uint64_t)first + j;
    if (first < 0 || p >= prows) continue;
    hit[p] = 1;
    for (size_t c = 0; c < d; c++) s[p * d + c] = s[p * d + c] + ref_masked_grad(g[i * d + c], i, c, d, o);
  }
  for (size_t p = 0; p < prows; p++)
    for (size_t c = 0; c < d && hit[p]; c++) pg[p * d + c] = pg[p * d + c] + s[p * d + c];
  free(s);
  free(hit);
}

/* The SGD step of a touched element: w - lr * r in float32, rounded to the
 * table's dtype (r from ref_backward_rows). */
static inline float ref_sgd(float w, float lr, float r, clembed_dtype table_dtype) {
  float step = lr * r;
  return ref_round(w - step, table_dtype);
}

/* ------------------------------------------------------------ optimizer steps */

/* One unit in the last place of a float32 at |x|. */
static inline double ref_ulp32(double x) {
  x = fabs(x);
  if (x < 0x1p-126) return 0x1p-149;
  int e;
  frexp(x, &e);
  return ldexp(1.0, e - 24);
}
/* One unit in the last place of an F16/BF16 value at |x| (0 for F32). */
static inline double ref_ulp_dt(double x, clembed_dtype dt) {
  if (dt == CLEMBED_F32) return 0.0;
  int e;
  frexp(fabs(x), &e);
  if (dt == CLEMBED_BF16) return ldexp(1.0, (e < -125 ? -125 : e) - 8);
  return ldexp(1.0, (e < -13 ? -13 : e) - 11);
}

/* clembed_optimizer_step's step (include/clembed.h's order, every kind) of the
 * rows `stepped` names, from their gradients G (rows x cols), in place on w
 * (rows x cols, rounded to dt after the step), s1 and s2 (the states). tol[e]
 * receives the tolerance of w's element e: 0 (exact) for SGD and rows not
 * stepped, else 4 ulp of the result and of the step (a device's sqrt and
 * division need not be correctly rounded) plus one unit of an F16/BF16 table. */
static inline void ref_optimizer_step(const clembed_optimizer *o, const float *G, const unsigned char *touched,
                                      size_t rows, size_t cols, clembed_dtype dt, float *w, float *s1, float *s2,
                                      double *tol) {
  float lr = o->learning_rate, eps = o->eps, wd = o->weight_decay;
  double t = (double)o->step;
  float b1c = (float)(1.0 - (double)o->beta1), b2c = (float)(1.0 - (double)o->beta2);
  float step_size = (float)((double)lr * sqrt(1.0 - pow((double)o->beta2, t)) / (1.0 - pow((double)o->beta1, t)));
  for (size_t v = 0; v < rows; v++) {
    if (!touched[v]) {
      for (size_t c = 0; c < cols; c++) tol[v * cols + c] = 0.0;
      continue;
    }
    float rate = 0.0f;
    if (o->kind == CLEMBED_ROWWISE_ADAGRAD) {
      float acc = 0.0f;
      for (size_t c = 0; c < cols; c++) {
        float g = G[v * cols + c];
        if (wd != 0.0f) {
          float dec = wd * w[v * cols + c];
          g = g + dec;
        }
        float sq = g * g;
        acc = acc + sq;
      }
      float mean = acc / (float)cols;
      s1[v] = s1[v] + mean;
      float den = sqrtf(s1[v]) + eps;
      rate = lr / den;
    }
    for (size_t c = 0; c < cols; c++) {
      size_t e = v * cols + c;
      float g = G[e], w0 = w[e], step;
      if (wd != 0.0f) {
        float dec = wd * w0;
        g = g + dec;
      }
      double slack = 4.0;
      if (o->kind == CLEMBED_SGD) {
        step = lr * g;
        slack = 0.0;
      } else if (o->kind == CLEMBED_ADAGRAD) {
        float sq = g * g;
        s1[e] = s1[e] + sq;
        float den = sqrtf(s1[e]) + eps, q = g / den;
        step = lr * q;
      } else if (o->kind == CLEMBED_ROWWISE_ADAGRAD) {
        step = rate * g;
      } else {
        float dm = g - s1[e];
        dm = dm * b1c;
        s1[e] = s1[e] + dm;
        float sq = g * g, du = sq - s2[e];
        du = du * b2c;
        s2[e] = s2[e] + du;
        float den = sqrtf(s2[e]) + eps, q = s1[e] / den;
        step = step_size * q;
      }
      float w1 = w0 - step;
      w[e] = ref_round(w1, dt);
      tol[e] = slack * (ref_ulp32(w1) + ref_ulp32(step)) + (slack > 0.0 ? ref_ulp_dt(w1, dt) : 0.0);
    }
  }
}

/* ------------------------------------------------------------ stochastic rounding */

/* The random word of table element (row, col) of a step (clembed_optimizer_step's
 * stochastic rounding): K = (x0, x1) of Philox(seed; step lo, step hi, 0x53524E44, 0),
 * then x0 of Philox(K; col lo, col hi, row lo, row hi). row: first_row + the table's row. */
static inline uint32_t ref_sr_word(uint64_t seed, uint64_t step, uint64_t row, uint64_t col) {
  uint32_t k[4], x[4];
  const uint32_t c1[4] = {(uint32_t)step, (uint32_t)(step >> 32), 0x53524E44u, 0u};
  ref_philox_kc((uint32_t)seed, (uint32_t)(seed >> 32), c1, k);
  const uint32_t c2[4] = {(uint32_t)col, (uint32_t)(col >> 32), (uint32_t)row, (uint32_t)(row >> 32)};
  ref_philox_kc(k[0], k[1], c2, x);
  return x[0];
}

/* hi (1) or lo (0) for |x| = a between lo and lo + u (u the spacing at lo): with
 * f = floor(2^32 (a - lo) / u), hi when f + r >= 2^32. In float64, exactly:
 * a - lo is exact (both floats near each other or lo 0), u a power of two. */
static inline int ref_sr_up(double a, double lo, double u, uint32_t r) {
  double f = floor((a - lo) / u * 4294967296.0);
  return (uint64_t)f + (uint64_t)r >= ((uint64_t)1 << 32);
}

/* Stochastic rounding of x to BF16 bits with the random word r: lo is |x|
 * truncated (the low 16 bits of its pattern cleared), hi the next BF16
 * (infinity after 0x7F7F, whose spacing is 2^120); NaN as the nearest-even store. */
static inline uint16_t ref_sr_bf16(float x, uint32_t r) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if (isnan(x)) return (uint16_t)((u >> 16) | 0x40);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000), lo = (uint16_t)((u >> 16) & 0x7FFF);
  if (lo == 0x7F80) return sign | lo; /* infinity */
  double a = fabs((double)x), vlo = (double)ref_bf16_to_f32(lo);
  double spacing = lo == 0x7F7F ? ldexp(1.0, 120) : (double)ref_bf16_to_f32((uint16_t)(lo + 1)) - vlo;
  return sign | (uint16_t)(lo + ref_sr_up(a, vlo, spacing, r));
}

/* Stochastic rounding of x to F16 bits with the random word r: lo the largest
 * half <= |x| (found by search), hi the next (infinity after 65504, whose
 * spacing is 32); |x| >= 65536 and infinity give infinity; NaN as the
 * nearest-even store (quiet, its sign and top 10 payload bits). */
static inline uint16_t ref_sr_f16(float x, uint32_t r) {
  uint32_t u;
  memcpy(&u, &x, 4);
  uint16_t sign = (u >> 31) ? 0x8000 : 0;
  if (isnan(x)) return sign | 0x7E00 | (uint16_t)((u >> 13) & 0x3FF);
  double a = fabs((double)x);
  if (a >= 65536.0) return sign | 0x7C00;
  int lo = 0, hi = 0x7BFF; /* the largest half <= a */
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if ((double)ref_f16_to_f32((uint16_t)mid) <= a) lo = mid; else hi = mid - 1;
  }
  double vlo = (double)ref_f16_to_f32((uint16_t)lo);
  double spacing = lo == 0x7BFF ? 32.0 : (double)ref_f16_to_f32((uint16_t)(lo + 1)) - vlo;
  return sign | (uint16_t)(lo + ref_sr_up(a, vlo, spacing, r));
}

#endif
