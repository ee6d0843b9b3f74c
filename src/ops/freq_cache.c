/* Angles: the sinusoid's and RoPE's frequencies in double on the host, as the
 * exact-angle pieces of freq.c, cached on the device per context (the
 * kernels' angle reduction is cl/lib/angle.cl). */
#include "ops.h"
#include "freq.h"

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
  cl_mem buffer; /* 9 planes of cols floats: the angle pieces, then the phase */
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

/* A device buffer of 9 planes of cols floats: the columns' angle pieces
 * (ce_angle_pieces: plane j holds piece j of every column) and their phase
 * (plane 8: 0 for sin, 1 for cos); cached per context (the least recently used
 * of CE_FREQ_CACHE entries is replaced). */
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
  size_t n = cols ? cols : 1, bytes;
  if (ce_mul_overflows(n, (CE_ANGLE_PIECES + 1) * sizeof(float), &bytes))
    FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "sinusoid frequencies: %zu columns overflow a size", cols);
  host = calloc(n, (CE_ANGLE_PIECES + 1) * sizeof(float));
  if (!host) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "sinusoid frequencies: out of host memory");
  for (size_t c = 0; c < cols; c++) {
    int is_cos;
    float pieces[CE_ANGLE_PIECES];
    ce_angle_pieces(column_freq(s, cols, c, &is_cos), pieces);
    for (int j = 0; j < CE_ANGLE_PIECES; j++) host[(size_t)j * cols + c] = pieces[j];
    host[(size_t)CE_ANGLE_PIECES * cols + c] = is_cos ? 1.0f : 0.0f;
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



/* ------------------------------------------------------------------ RoPE */

/* The frequency buffers of the last few RoPE parameter sets, per context. */
typedef struct rope_entry {
  clembed_rope key; /* head_dim and rotary_dim both R, layout NEOX */
  cl_mem buffer;    /* 8 planes of R/2 floats: the angle pieces of w_k */
  float attention;
  unsigned stamp;
} rope_entry;
typedef struct rope_cache {
  rope_entry e[CE_FREQ_CACHE];
  unsigned stamp;
} rope_cache;
static const char rope_key = 0;

static void rope_release(clembed_context *ctx, void *data) {
  (void)ctx;
  rope_cache *c = data;
  for (int i = 0; i < CE_FREQ_CACHE; i++)
    if (c->e[i].buffer) clReleaseMemObject(c->e[i].buffer);
  free(c);
}

static int same_rope(const clembed_rope *a, const clembed_rope *b) {
  return a->base == b->base && a->rotary_dim == b->rotary_dim && a->scaling == b->scaling &&
         a->factor == b->factor && a->original_max_position == b->original_max_position &&
         a->low_freq_factor == b->low_freq_factor && a->high_freq_factor == b->high_freq_factor &&
         a->beta_fast == b->beta_fast && a->beta_slow == b->beta_slow && a->attention_factor == b->attention_factor;
}

clembed_status ce_rope_freq(clembed_context *ctx, const clembed_rope *r, size_t *R_out, cl_mem *buffer,
                            float *attention) {
  clembed_status status = CLEMBED_OK;
  double *w = NULL;
  float *host = NULL;
  cl_mem b = NULL;
  const char *why;
  if (!r) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "r", -1, 0, "%s: r is NULL", ctx->op);
  size_t R = ce_rope_rotary_dim(r, &why);
  if (!R)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "r", -1, 0, "%s: %s (head_dim %zu, rotary_dim %zu)", ctx->op, why,
             r->head_dim, r->rotary_dim);
  if (r->layout != CLEMBED_ROPE_NEOX && r->layout != CLEMBED_ROPE_GPTJ)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "r", -1, (int64_t)r->layout, "%s: unknown layout %d", ctx->op,
             (int)r->layout);
  clembed_rope key = *r;
  key.head_dim = R;
  key.rotary_dim = R;
  key.layout = CLEMBED_ROPE_NEOX; /* the frequencies do not depend on the layout */
  rope_cache *rc = ce_cache_find(ctx, &rope_key);
  if (!rc) {
    rc = calloc(1, sizeof *rc);
    if (!rc) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "RoPE frequencies: out of host memory");
    status = ce_cache_add(ctx, &rope_key, rc, rope_release);
    if (status != CLEMBED_OK) {
      free(rc);
      goto cleanup;
    }
  }
  rope_entry *slot = &rc->e[0];
  for (int i = 0; i < CE_FREQ_CACHE; i++) {
    rope_entry *e = &rc->e[i];
    if (e->buffer && same_rope(&e->key, &key)) {
      e->stamp = ++rc->stamp;
      *R_out = R;
      *buffer = e->buffer;
      *attention = e->attention;
      return CLEMBED_OK;
    }
    if (!e->buffer || e->stamp < slot->stamp) slot = e;
  }
  size_t half = R / 2;
  w = malloc(half * sizeof *w);
  host = malloc(half * CE_ANGLE_PIECES * sizeof *host);
  if (!w || !host) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "RoPE frequencies: out of host memory");
  double a;
  const char *msg = ce_rope_frequencies(r, R, w, &a);
  if (msg) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "r", -1, 0, "%s: %s", ctx->op, msg);
  if (!((float)a < INFINITY))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "r", -1, 0, "%s: attention factor %g overflows float", ctx->op, a);
  for (size_t k = 0; k < half; k++) {
    float p[CE_ANGLE_PIECES];
    ce_angle_pieces(w[k], p);
    for (int j = 0; j < CE_ANGLE_PIECES; j++) host[(size_t)j * half + k] = p[j];
  }
  CHECK(ce_buffer(ctx, CE_BUFFER_CONST, half * CE_ANGLE_PIECES * sizeof *host, host, "RoPE frequencies", &b));
  if (slot->buffer) clReleaseMemObject(slot->buffer);
  slot->buffer = b;
  slot->key = key;
  slot->attention = (float)a;
  slot->stamp = ++rc->stamp;
  *R_out = R;
  *buffer = b;
  *attention = (float)a;
  b = NULL;
cleanup:
  if (b) clReleaseMemObject(b);
  free(w);
  free(host);
  return status;
}
