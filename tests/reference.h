/* The references every test compares against, written plainly from API.md and
 * from the published definitions, independent of src/ (nothing here calls the
 * library): dtype conversions and rounding, id resolution under each policy and
 * padding, the sinusoid, Philox4x32-10 with its uniform/normal/dropout draws,
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

/* Column i of position p in a d-column table (API.md), in float64:
 *   INTERLEAVED: sin(p*w) for even i, cos(p*w) for odd i, with
 *                w = base^(-2*floor(i/2)/d) (PAIR) or base^(-i/d) (INDEX);
 *   HALVES:      sin(p*w_i) for i < h, cos(p*w_(i-h)) for i >= h, h = ceil(d/2),
 *                w_k = base^(-2k/d). */
static inline double ref_sinusoid(double base, clembed_exponent e, clembed_layout l, size_t d, int64_t p, size_t i) {
  double w;
  int is_cos;
  if (l == CLEMBED_LAYOUT_HALVES) {
    size_t h = (d + 1) / 2;
    size_t k = i < h ? i : i - h;
    w = pow(base, -2.0 * (double)k / (double)d);
    is_cos = i >= h;
  } else {
    if (e == CLEMBED_EXPONENT_PAIR) w = pow(base, -2.0 * floor((double)i / 2.0) / (double)d);
    else w = pow(base, -(double)i / (double)d);
    is_cos = (int)(i % 2);
  }
  double a = (double)p * w;
  return is_cos ? cos(a) : sin(a);
}

/* ------------------------------------------------------------ Philox */

/* Philox4x32-10, written plainly from the Random123 definition: key (seed lo,
 * seed hi), counter (e lo, e hi, 0, 0). */
static inline void ref_philox(uint64_t seed, uint64_t e, uint32_t out[4]) {
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  uint32_t c0 = (uint32_t)e, c1 = (uint32_t)(e >> 32), c2 = 0, c3 = 0;
  for (int r = 0; r < 10; r++) {
    if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
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

/* init_uniform's element e: low + (high - low) * u(x0), in float32 in this order. */
static inline float ref_uniform(uint64_t seed, uint64_t e, float low, float high) {
  uint32_t x[4];
  ref_philox(seed, e, x);
  float u = (float)ref_unit(x[0]); /* exact: 24 bits */
  float span = high - low;
  float scaled = span * u;
  return low + scaled;
}

/* init_normal's standard normal value z of element e (Box-Muller, float64):
 * sqrt(-2 ln(1 - u(x0))) * cos(2 pi u(x1)). */
static inline double ref_normal_z(uint64_t seed, uint64_t e) {
  uint32_t x[4];
  ref_philox(seed, e, x);
  const double pi = 3.14159265358979323846;
  return sqrt(-2.0 * log(1.0 - ref_unit(x[0]))) * cos(2.0 * pi * ref_unit(x[1]));
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

#endif
