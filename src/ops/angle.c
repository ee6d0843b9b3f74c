/* Angles: the sinusoid's frequencies in double on the host, cached on the
 * device per context (the kernels' angle reduction is cl/lib/angle.cl). */
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

clembed_status ce_sinusoid_check(clembed_context *ctx, const clembed_sinusoid *s) {
  if (!(s->base > 0.0) || !isfinite(s->base))
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "sinusoid", -1, 0, "sinusoid base %g must be finite and > 0", s->base);
  if (s->exponent != CLEMBED_EXPONENT_PAIR && s->exponent != CLEMBED_EXPONENT_INDEX)
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "sinusoid", -1, (int64_t)s->exponent, "unknown sinusoid exponent %d", (int)s->exponent);
  if (s->layout != CLEMBED_LAYOUT_INTERLEAVED && s->layout != CLEMBED_LAYOUT_HALVES)
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "sinusoid", -1, (int64_t)s->layout, "unknown sinusoid layout %d", (int)s->layout);
  if (s->exponent == CLEMBED_EXPONENT_INDEX && s->layout == CLEMBED_LAYOUT_HALVES)
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "sinusoid", -1, 0,
                   "the INDEX exponent has no HALVES layout (use PAIR with HALVES, or INTERLEAVED)");
  return CLEMBED_OK;
}

/* Column c's frequency w (double) and whether it is a cos column. */
static double column_freq(const clembed_sinusoid *s, size_t d, size_t c, int *is_cos) {
  double k2; /* the exponent's numerator: w = base^(-k2/d) */
  if (s->layout == CLEMBED_LAYOUT_HALVES) {
    size_t h = (d + 1) / 2;
    *is_cos = c >= h;
    k2 = 2.0 * (double)(c >= h ? c - h : c);
  } else {
    *is_cos = (int)(c & 1);
    k2 = s->exponent == CLEMBED_EXPONENT_PAIR ? 2.0 * (double)(c / 2) : (double)c;
  }
  return pow(s->base, -k2 / (double)d);
}

/* The frequency buffers of the last few sinusoids, per context. */
#define CE_FREQ_CACHE 4
typedef struct freq_entry {
  double base;
  int exponent, layout;
  size_t cols;
  cl_mem buffer; /* cols float2 (hi, lo); a negative hi marks a cos column */
  unsigned stamp;
} freq_entry;
typedef struct freq_cache {
  freq_entry e[CE_FREQ_CACHE];
  unsigned stamp;
} freq_cache;
static const char freq_key = 0;

static void freq_release(clembed_context *ctx, void *data) {
  (void)ctx;
  freq_cache *c = data;
  for (int i = 0; i < CE_FREQ_CACHE; i++)
    if (c->e[i].buffer) clReleaseMemObject(c->e[i].buffer);
  free(c);
}

static clembed_status freq_cache_get(clembed_context *ctx, freq_cache **out) {
  *out = ce_cache_find(ctx, &freq_key);
  if (*out) return CLEMBED_OK;
  freq_cache *c = calloc(1, sizeof *c);
  if (!c) return ce_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "sinusoid frequencies: out of host memory");
  clembed_status s = ce_cache_add(ctx, &freq_key, c, freq_release);
  if (s != CLEMBED_OK) {
    free(c);
    return s;
  }
  *out = c;
  return CLEMBED_OK;
}

/* A device buffer of cols float2 (w_hi, w_lo), negated for cos columns; cached
 * per context (the least recently used of CE_FREQ_CACHE entries is replaced). */
clembed_status ce_sinusoid_freq(clembed_context *ctx, const clembed_sinusoid *s, size_t cols, cl_mem *buffer) {
  clembed_status status = CLEMBED_OK;
  float *host = NULL;
  cl_mem b = NULL;
  freq_cache *fc;
  CHECK(freq_cache_get(ctx, &fc));
  freq_entry *slot = &fc->e[0];
  for (int i = 0; i < CE_FREQ_CACHE; i++) {
    freq_entry *e = &fc->e[i];
    if (e->buffer && e->base == s->base && e->exponent == (int)s->exponent && e->layout == (int)s->layout &&
        e->cols == cols) {
      e->stamp = ++fc->stamp;
      *buffer = e->buffer;
      return CLEMBED_OK;
    }
    if (!e->buffer || e->stamp < slot->stamp) slot = e;
  }
  size_t bytes = 2 * sizeof(float) * (cols ? cols : 1);
  host = calloc(cols ? cols : 1, 2 * sizeof(float));
  if (!host) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "sinusoid frequencies: out of host memory");
  for (size_t c = 0; c < cols; c++) {
    int is_cos;
    double w = column_freq(s, cols, c, &is_cos);
    float hi = (float)w, lo = (float)(w - (double)hi);
    host[2 * c] = is_cos ? -hi : hi;
    host[2 * c + 1] = is_cos ? -lo : lo;
  }
  CHECK(ce_buffer(ctx, CE_BUFFER_CONST, bytes, host, "sinusoid frequencies", &b));
  if (slot->buffer) clReleaseMemObject(slot->buffer);
  slot->buffer = b;
  slot->base = s->base;
  slot->exponent = (int)s->exponent;
  slot->layout = (int)s->layout;
  slot->cols = cols;
  slot->stamp = ++fc->stamp;
  *buffer = b;
  b = NULL;
cleanup:
  if (b) clReleaseMemObject(b);
  free(host);
  return status;
}


