/* Rotary position embeddings: the cos/sin cache and the rotation, on exact
 * angles (cl/lib/angle.cl), with frequencies from rope_freq.c. */
#include "internal.h"
#include "ops/rope_freq.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

clembed_rope clembed_rope_defaults(void) {
  clembed_rope r;
  memset(&r, 0, sizeof r);
  r.base = 10000.0;
  r.layout = CLEMBED_ROPE_NEOX;
  r.scaling = CLEMBED_ROPE_SCALING_NONE;
  r.factor = 1.0;
  r.original_max_position = 8192;
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  r.beta_fast = 32.0;
  r.beta_slow = 1.0;
  r.attention_factor = 0.0;
  return r;
}

static int same_params(const clembed_rope *a, const clembed_rope *b) {
  return a->base == b->base && a->rotary_dim == b->rotary_dim && a->scaling == b->scaling &&
         a->factor == b->factor && a->original_max_position == b->original_max_position &&
         a->low_freq_factor == b->low_freq_factor && a->high_freq_factor == b->high_freq_factor &&
         a->beta_fast == b->beta_fast && a->beta_slow == b->beta_slow && a->attention_factor == b->attention_factor;
}

static int is_float(clembed_dtype t) { return t == CLEMBED_F32 || t == CLEMBED_F16 || t == CLEMBED_BF16; }

/* Checks r and gives R, the device buffer of the frequencies' angle pieces
 * (8 planes of R/2 floats; cached per context, least recently used replaced)
 * and the attention factor. */
static clembed_status rope_prepare(clembed_context *ctx, const char *op, const clembed_rope *r, size_t *R_out,
                                   cl_mem *buffer, float *attention) {
  clembed_status status = CLEMBED_OK;
  double *w = NULL;
  float *host = NULL;
  cl_mem b = NULL;
  const char *why;
  if (!r) {
    status = ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "r", -1, 0, "%s: r is NULL", op);
    goto cleanup;
  }
  size_t R = ce_rope_rotary_dim(r, &why);
  if (!R) {
    status = ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "r", -1, 0, "%s: %s (head_dim %zu, rotary_dim %zu)",
                         op, why, r->head_dim, r->rotary_dim);
    goto cleanup;
  }
  clembed_rope key = *r;
  key.head_dim = R;
  key.rotary_dim = R;
  key.layout = CLEMBED_ROPE_NEOX; /* the frequencies do not depend on the layout */
  if (r->layout != CLEMBED_ROPE_NEOX && r->layout != CLEMBED_ROPE_GPTJ)
    FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "%s: unknown layout %d", op, (int)r->layout);
  ce_rope_freq_cache *slot = &ctx->rope_freq[0];
  for (int i = 0; i < CE_FREQ_CACHE; i++) {
    ce_rope_freq_cache *e = &ctx->rope_freq[i];
    if (e->buffer && same_params(&e->key, &key)) {
      e->stamp = ++ctx->freq_stamp;
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
  if (!w || !host) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: frequencies: out of host memory", op);
  double a;
  const char *msg = ce_rope_frequencies(r, R, w, &a);
  if (msg) {
    status = ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "r", -1, 0, "%s: %s", op, msg);
    goto cleanup;
  }
  if (!((float)a < INFINITY)) FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "%s: attention factor %g overflows float", op, a);
  for (size_t k = 0; k < half; k++) {
    float p[CE_ANGLE_PIECES];
    ce_angle_pieces(w[k], p);
    for (int j = 0; j < CE_ANGLE_PIECES; j++) host[(size_t)j * half + k] = p[j];
  }
  cl_int err;
  b = clCreateBuffer(ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, half * CE_ANGLE_PIECES * sizeof *host,
                     host, &err);
  if (err != CL_SUCCESS) {
    b = NULL;
    status = ce_cl_fail(ctx, err, "RoPE frequencies");
    goto cleanup;
  }
  if (slot->buffer) clReleaseMemObject(slot->buffer);
  slot->buffer = b;
  slot->key = key;
  slot->attention = (float)a;
  slot->stamp = ++ctx->freq_stamp;
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

static clembed_status cache_run(clembed_context *ctx, const clembed_rope *r, size_t first_position,
                                clembed_matrix *cos_sin, cl_uint nwait, const cl_event *wait, cl_event *event);
static clembed_status apply_run(clembed_context *ctx, const clembed_rope *r, const clembed_matrix *x,
                                const clembed_ids *positions, size_t seq_len, size_t position_offset, int inverse,
                                clembed_matrix *out, cl_uint nwait, const cl_event *wait, cl_event *event);

clembed_status clembed_rope_cache(clembed_context *ctx, const clembed_rope *r, size_t first_position,
                                  clembed_matrix *cos_sin, cl_uint nwait, const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, "clembed_rope_cache");
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  clembed_status status = cache_run(ctx, r, first_position, cos_sin, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

clembed_status clembed_rope_apply(clembed_context *ctx, const clembed_rope *r, const clembed_matrix *x,
                                  const clembed_ids *positions, size_t seq_len, size_t position_offset, int inverse,
                                  clembed_matrix *out, cl_uint nwait, const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, "clembed_rope_apply");
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  clembed_status status = apply_run(ctx, r, x, positions, seq_len, position_offset, inverse, out, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

static clembed_status cache_run(clembed_context *ctx, const clembed_rope *r, size_t first_position,
                                clembed_matrix *cos_sin, cl_uint nwait, const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  size_t ld, R = 0;
  cl_mem freq = NULL;
  float attention = 1.0f;
  cl_kernel k;
  char opts[64];
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_check_matrix(ctx, cos_sin, "clembed_rope_cache: cos_sin", &ld));
  if (!is_float(cos_sin->dtype))
    FAIL(CLEMBED_ERR_UNSUPPORTED, "clembed_rope_cache: cos_sin must be F32, F16 or BF16 (not a quantized type)");
  CHECK(rope_prepare(ctx, "clembed_rope_cache", r, &R, &freq, &attention));
  if (cos_sin->cols != R)
    FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_rope_cache: cos_sin has %zu cols but the rotary dimension is %zu",
         cos_sin->cols, R);
  if (ce_positions_past_end(first_position, cos_sin->rows)) {
    status = ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "first_position", -1, (int64_t)first_position,
                         "clembed_rope_cache: first_position %zu + rows %zu is past 2^32 (RoPE takes positions "
                         "below 2^32)",
                         first_position, cos_sin->rows);
    goto cleanup;
  }
  snprintf(opts, sizeof opts, "-DOUT_DT=%d", (int)cos_sin->dtype);
  CHECK(ce_kernel(ctx, CE_FAMILY_ROPE, opts, "ce_rope_cache", &k));
  cl_ulong o_off = cos_sin->offset, o_ld = ld, rows = cos_sin->rows, half = R / 2, first = first_position;
  cl_float attn = attention;
  CHECK(ce_set_args(ctx, k, "ce_rope_cache", CE_ARG(cos_sin->buffer), CE_ARG(o_off), CE_ARG(o_ld), CE_ARG(rows),
                    CE_ARG(half), CE_ARG(first), CE_ARG(freq), CE_ARG(attn), CE_END));
  CHECK(ce_enqueue_2d(ctx, k, "ce_rope_cache", R / 2, cos_sin->rows, nwait, wait, event));
cleanup:
  return status;
}

/* The byte range [lo, hi) a matrix's elements span (rows > 0, cols > 0). */
static void span_bytes(const clembed_matrix *m, size_t ld, size_t *lo, size_t *hi) {
  size_t es = clembed_dtype_size(m->dtype);
  *lo = m->offset * es;
  *hi = (m->offset + (m->rows - 1) * ld + m->cols) * es;
}

static clembed_status apply_run(clembed_context *ctx, const clembed_rope *r, const clembed_matrix *x,
                                const clembed_ids *positions, size_t seq_len, size_t position_offset, int inverse,
                                clembed_matrix *out, cl_uint nwait, const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  size_t x_ld, o_ld, R = 0;
  cl_mem freq = NULL;
  float attention = 1.0f;
  cl_kernel k;
  char opts[96];
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_check_matrix(ctx, x, "clembed_rope_apply: x", &x_ld));
  CHECK(ce_check_matrix(ctx, out, "clembed_rope_apply: out", &o_ld));
  if (!is_float(x->dtype) || !is_float(out->dtype))
    FAIL(CLEMBED_ERR_UNSUPPORTED, "clembed_rope_apply: %s must be F32, F16 or BF16 (not a quantized type)",
         is_float(x->dtype) ? "out" : "x");
  CHECK(rope_prepare(ctx, "clembed_rope_apply", r, &R, &freq, &attention));
  if (x->cols % r->head_dim)
    FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_rope_apply: x has %zu cols, not a multiple of head_dim %zu", x->cols,
         r->head_dim);
  if (out->rows != x->rows || out->cols != x->cols)
    FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_rope_apply: out is %zu x %zu but x is %zu x %zu", out->rows,
         out->cols, x->rows, x->cols);
  if (positions) {
    CHECK(ce_check_ids(ctx, positions, "clembed_rope_apply: positions"));
    if (positions->count < x->rows)
      FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_rope_apply: %zu positions for %zu rows", positions->count,
           x->rows);
  } else {
    size_t span = seq_len && seq_len < x->rows ? seq_len : x->rows;
    if (ce_positions_past_end(position_offset, span)) {
      status = ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "position_offset", -1, (int64_t)position_offset,
                           "clembed_rope_apply: position_offset %zu + %zu positions is past 2^32 (RoPE takes "
                           "positions below 2^32)",
                           position_offset, span);
      goto cleanup;
    }
  }
  /* in place (the same elements), or no overlap at all */
  int in_place = 0;
  if (x->buffer == out->buffer && x->rows && x->cols) {
    in_place = x->offset == out->offset && x_ld == o_ld && x->dtype == out->dtype;
    size_t xl, xh, ol, oh;
    span_bytes(x, x_ld, &xl, &xh);
    span_bytes(out, o_ld, &ol, &oh);
    if (!in_place && xl < oh && ol < xh)
      FAIL(CLEMBED_ERR_INVALID_ARGUMENT,
           "clembed_rope_apply: out overlaps x without being x (same buffer, offset, ld and dtype) in place");
  }
  /* CPU shapes: a row per work-item, 16 pairs at a time (the vector angle and
   * vector loads over every head); GPU shapes: a pair of every head per
   * work-item, consecutive work-items on consecutive pairs */
  int rowwise = ctx->cpu_shapes;
  snprintf(opts, sizeof opts, "-DOUT_DT=%d -DX_DT=%d -DPOS=%d -DROWWISE=%d -DVEC=16", (int)out->dtype,
           (int)x->dtype, positions != NULL, rowwise);
  CHECK(ce_kernel(ctx, CE_FAMILY_ROPE, opts, "ce_rope_apply", &k));
  cl_uint slot = CE_NO_SLOT;
  if (positions && x->rows && x->cols) {
    ce_slot_info info = {"clembed_rope_apply", NULL, 0, CE_POSITION_END, 0, 0, 0, 0, 0, "positions"};
    CHECK(ce_slot_reserve(ctx, &info, &slot));
  }
  size_t half = R / 2, heads = x->cols / r->head_dim, rest = r->head_dim - R;
  cl_mem none = NULL, pb = positions ? positions->buffer : none;
  cl_ulong xo = x->offset, xl = x_ld, oo = out->offset, ol = o_ld, rows = x->rows, nh = heads, hd = r->head_dim;
  cl_ulong hf = half, po = positions ? positions->offset : 0, sl = seq_len, poff = position_offset;
  cl_int gptj = r->layout == CLEMBED_ROPE_GPTJ, copy_rest = !in_place, p64 = positions && positions->type == CLEMBED_I64;
  cl_float attn = attention, sign = inverse ? -1.0f : 1.0f;
  cl_uint slot_arg = slot == CE_NO_SLOT ? 0 : slot;
  CHECK(ce_set_args(ctx, k, "ce_rope_apply", CE_ARG(x->buffer), CE_ARG(xo), CE_ARG(xl), CE_ARG(out->buffer),
                    CE_ARG(oo), CE_ARG(ol), CE_ARG(rows), CE_ARG(nh), CE_ARG(hd), CE_ARG(hf), CE_ARG(gptj),
                    CE_ARG(copy_rest), CE_ARG(freq), CE_ARG(attn), CE_ARG(sign), CE_ARG(pb), CE_ARG(pb), CE_ARG(po),
                    CE_ARG(p64), CE_ARG(sl), CE_ARG(poff), CE_ARG(ctx->errbuf), CE_ARG(slot_arg), CE_END));
  size_t nx = heads ? half + rest : 0, ny = heads ? x->rows : 0;
  CHECK(ce_enqueue_checked(ctx, k, "ce_rope_apply", rowwise, nx, ny, CE_FAMILY_ROPE, opts, slot, positions, NULL, 0,
                           nwait, wait, event));
cleanup:
  return status;
}
