/* Sinusoid parameters (frequencies in double on the host) and the positional table. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

void ce_freq_release(clembed_context *ctx) {
  for (int i = 0; i < CE_FREQ_CACHE; i++) {
    if (ctx->freq[i].buffer) clReleaseMemObject(ctx->freq[i].buffer);
    ctx->freq[i].buffer = NULL;
  }
  clembed_matrix_release(&ctx->pe);
}

/* A device buffer of cols float2 (w_hi, w_lo), negated for cos columns; cached
 * per context (the least recently used of CE_FREQ_CACHE entries is replaced). */
clembed_status ce_sinusoid_freq(clembed_context *ctx, const clembed_sinusoid *s, size_t cols, cl_mem *buffer) {
  clembed_status status = CLEMBED_OK;
  float *host = NULL;
  cl_mem b = NULL;
  ce_freq_cache *slot = &ctx->freq[0];
  for (int i = 0; i < CE_FREQ_CACHE; i++) {
    ce_freq_cache *e = &ctx->freq[i];
    if (e->buffer && e->base == s->base && e->exponent == (int)s->exponent && e->layout == (int)s->layout &&
        e->cols == cols) {
      e->stamp = ++ctx->freq_stamp;
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
  cl_int err;
  b = clCreateBuffer(ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, host, &err);
  if (err != CL_SUCCESS) {
    b = NULL;
    status = ce_cl_fail(ctx, err, "sinusoid frequencies");
    goto cleanup;
  }
  if (slot->buffer) clReleaseMemObject(slot->buffer);
  slot->buffer = b;
  slot->base = s->base;
  slot->exponent = (int)s->exponent;
  slot->layout = (int)s->layout;
  slot->cols = cols;
  slot->stamp = ++ctx->freq_stamp;
  *buffer = b;
  b = NULL;
cleanup:
  if (b) clReleaseMemObject(b);
  free(host);
  return status;
}

static clembed_status positional_run(clembed_context *ctx, const clembed_sinusoid *s, size_t first_position,
                                     clembed_matrix *out, cl_uint nwait, const cl_event *wait, cl_event *event);

/* Largest cached table, in elements (64 MiB of float). */
#define CE_PE_MAX_ELEMENTS ((size_t)16 << 20)

clembed_status ce_sinusoid_table(clembed_context *ctx, const clembed_sinusoid *s, size_t cols, size_t end,
                                 size_t tokens, const clembed_matrix **table) {
  clembed_status status = CLEMBED_OK;
  clembed_matrix m = {0};
  *table = NULL;
  if (ctx->pe.buffer && ctx->pe.cols == cols && ctx->pe.rows >= end && ctx->pe_sinusoid.base == s->base &&
      ctx->pe_sinusoid.exponent == s->exponent && ctx->pe_sinusoid.layout == s->layout) {
    *table = &ctx->pe;
    return CLEMBED_OK;
  }
  /* rows: a power of two from 64, so that growing offsets (decoding) rebuild rarely */
  size_t rows = 64;
  while (rows < end && rows <= CE_PE_MAX_ELEMENTS) rows *= 2;
  /* compute inline instead on an out-of-order queue (nothing would order the
   * table before its readers), or when the table would be large, or much larger
   * than this call's work (one decoding step far into a sequence) */
  if (!ctx->in_order || cols == 0 || rows > CE_PE_MAX_ELEMENTS / cols || (rows > 4096 && rows / 4 > tokens))
    return CLEMBED_OK;
  /* written whole by the positional kernel: no zero-fill, and nothing waits
   * (the forward that reads it follows it on the in-order queue) */
  cl_int err;
  m.buffer = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, rows * cols * sizeof(float), NULL, &err);
  if (err != CL_SUCCESS) {
    m.buffer = NULL;
    FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "sinusoid table of %zu x %zu: %s", rows, cols,
         clembed_status_string((clembed_status)err));
  }
  m.rows = rows;
  m.cols = cols;
  m.ld = cols;
  m.dtype = CLEMBED_F32;
  CHECK(positional_run(ctx, s, 0, &m, 0, NULL, NULL));
  clembed_matrix_release(&ctx->pe);
  ctx->pe = m;
  ctx->pe_sinusoid = *s;
  m.buffer = NULL;
  *table = &ctx->pe;
cleanup:
  clembed_matrix_release(&m);
  return status;
}

static const clembed_sinusoid default_sinusoid = {10000.0, CLEMBED_EXPONENT_PAIR, CLEMBED_LAYOUT_INTERLEAVED};

clembed_status clembed_positional(clembed_context *ctx, const clembed_sinusoid *s, size_t first_position,
                                  clembed_matrix *out, cl_uint nwait, const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, "clembed_positional");
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  clembed_status status = positional_run(ctx, s, first_position, out, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

static clembed_status positional_run(clembed_context *ctx, const clembed_sinusoid *s, size_t first_position,
                                     clembed_matrix *out, cl_uint nwait, const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  size_t ld;
  cl_mem freq = NULL;
  cl_kernel k;
  char opts[64];
  if (!s) s = &default_sinusoid;
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_check_matrix(ctx, out, "clembed_positional: out", &ld));
  CHECK(ce_sinusoid_check(ctx, s));
  size_t last;
  if (out->rows && ce_add_overflows(first_position, out->rows - 1, &last))
    FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_positional: first_position %zu + rows %zu overflows", first_position,
         out->rows);
  CHECK(ce_sinusoid_freq(ctx, s, out->cols, &freq));
  /* CPU shapes: a row per work-item, 16 columns at a time (measured on POCL:
   * 18x the one-element shape) */
  int rowwise = ctx->cpu_shapes;
  snprintf(opts, sizeof opts, "-DOUT_DT=%d -DROWWISE=%d -DVEC=16", (int)out->dtype, rowwise);
  CHECK(ce_kernel(ctx, CE_FAMILY_POSITIONAL, opts, "ce_positional", &k));
  cl_ulong o_off = out->offset, o_ld = ld, rows = out->rows, cols = out->cols, first = first_position;
  CHECK(ce_set_args(ctx, k, "ce_positional", CE_ARG(out->buffer), CE_ARG(o_off), CE_ARG(o_ld), CE_ARG(rows),
                    CE_ARG(cols), CE_ARG(first), CE_ARG(freq), CE_END));
  if (rowwise)
    CHECK(ce_enqueue_1d(ctx, k, "ce_positional", out->rows, CE_LOCAL_CPU, nwait, wait, event));
  else
    CHECK(ce_enqueue_2d(ctx, k, "ce_positional", out->cols, out->rows, nwait, wait, event));
cleanup:
  return status;
}
