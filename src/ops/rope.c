/* Rotary position embeddings: the cos/sin cache and the rotation, on exact
 * angles (cl/lib/angle.cl), with frequencies from freq_cache.c (ce_rope_freq). */
#include "ops.h"

#include <stdio.h>
#include <string.h>

clembed_rope clembed_rope_defaults(void) {
  clembed_rope r;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
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

static int is_float(clembed_dtype t) { return t == CLEMBED_F32 || t == CLEMBED_F16 || t == CLEMBED_BF16; }

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
  clembed_rope rr = clembed_rope_defaults(); /* the caller's, as far as its struct_size goes (NULL: refused later) */
  clembed_status status = ce_struct_read(ctx, NULL, "r", -1, &ce_rope_layout, r, &rr);
  if (status == CLEMBED_OK) status = cache_run(ctx, r ? &rr : NULL, first_position, cos_sin, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

clembed_status clembed_rope_apply(clembed_context *ctx, const clembed_rope *r, const clembed_matrix *x,
                                  const clembed_ids *positions, size_t seq_len, size_t position_offset, int inverse,
                                  clembed_matrix *out, cl_uint nwait, const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, "clembed_rope_apply");
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  clembed_rope rr = clembed_rope_defaults(); /* the caller's, as far as its struct_size goes (NULL: refused later) */
  clembed_status status = ce_struct_read(ctx, NULL, "r", -1, &ce_rope_layout, r, &rr);
  if (status == CLEMBED_OK)
    status = apply_run(ctx, r ? &rr : NULL, x, positions, seq_len, position_offset, inverse, out, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

static clembed_status cache_run(clembed_context *ctx, const clembed_rope *r, size_t first_position,
                                clembed_matrix *cos_sin, cl_uint nwait, const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  size_t R = 0;
  cl_mem freq = NULL;
  float attention = 1.0f;
  cl_kernel k;
  char opts[96];
  ce_pieces op;
  ce_chain ch;
  ce_chain_init(&ch, ctx, nwait, wait);
  ce_pieces_none(&op);
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_check_pieces(ctx, cos_sin, "clembed_rope_cache: cos_sin", 0, &op));
  if (!is_float(cos_sin->dtype))
    FAIL_ARG(CLEMBED_ERR_UNSUPPORTED, "cos_sin", -1, (int64_t)cos_sin->dtype,
             "clembed_rope_cache: cos_sin must be F32, F16 or BF16 (not a quantized type)");
  CHECK(ce_rope_freq(ctx, r, &R, &freq, &attention));
  if (cos_sin->cols != R)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "cos_sin", -1, (int64_t)cos_sin->cols,
             "clembed_rope_cache: cos_sin has %zu cols but the rotary dimension is %zu", cos_sin->cols, R);
  if (ce_positions_past_end(first_position, cos_sin->rows))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "first_position", -1, (int64_t)first_position,
             "clembed_rope_cache: first_position %zu + rows %zu is past 2^32 (RoPE takes positions below 2^32)",
             first_position, cos_sin->rows);
  ce_pieces *mats[1] = {&op};
  CHECK(ce_pieces_plan(ctx, "clembed_rope_cache", mats, 1));
  snprintf(opts, sizeof opts, "-DOUT_DT=%d", (int)cos_sin->dtype);
  ce_pieces_option(opts, sizeof opts, &op, "out");
  CHECK(ce_kernel(ctx, CE_FAMILY_ROPE, opts, "ce_rope_cache", &k));
  cl_ulong o_ld = op.ld, rows = cos_sin->rows, half = R / 2, first = first_position;
  cl_float attn = attention;
  do {
    CHECK(ce_set_args(ctx, k, "ce_rope_cache", CE_PIECES(&op), CE_ARG(o_ld), CE_ARG(rows), CE_ARG(half),
                      CE_ARG(first), CE_ARG(freq), CE_ARG(attn), CE_END));
    CHECK(ce_chain_2d(&ch, k, "ce_rope_cache", R / 2, cos_sin->rows));
  } while (ce_pieces_next(mats, 1));
  CHECK(ce_chain_close(&ch, event));
cleanup:
  ce_chain_release(&ch);
  ce_pieces_release(&op);
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
  char opts[160];
  ce_pieces xp, op;
  ce_chain ch;
  ce_chain_init(&ch, ctx, nwait, wait);
  ce_pieces_none(&xp);
  ce_pieces_none(&op);
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_check_pieces(ctx, x, "clembed_rope_apply: x", 0, &xp));
  CHECK(ce_check_pieces(ctx, out, "clembed_rope_apply: out", 0, &op));
  x_ld = xp.ld;
  o_ld = op.ld;
  if (!is_float(x->dtype) || !is_float(out->dtype))
    FAIL_ARG(CLEMBED_ERR_UNSUPPORTED, is_float(x->dtype) ? "out" : "x", -1,
             (int64_t)(is_float(x->dtype) ? out->dtype : x->dtype),
             "clembed_rope_apply: %s must be F32, F16 or BF16 (not a quantized type)", is_float(x->dtype) ? "out" : "x");
  CHECK(ce_rope_freq(ctx, r, &R, &freq, &attention));
  if (x->cols % r->head_dim)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "x", -1, (int64_t)x->cols,
             "clembed_rope_apply: x has %zu cols, not a multiple of head_dim %zu", x->cols, r->head_dim);
  if (out->rows != x->rows || out->cols != x->cols)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "out", -1, (int64_t)out->rows,
             "clembed_rope_apply: out is %zu x %zu but x is %zu x %zu", out->rows, out->cols, x->rows, x->cols);
  if (positions) {
    CHECK(ce_check_ids(ctx, positions, "clembed_rope_apply: positions"));
    if (positions->count < x->rows)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "positions", -1, (int64_t)positions->count,
               "clembed_rope_apply: %zu positions for %zu rows", positions->count, x->rows);
  } else {
    size_t span = seq_len && seq_len < x->rows ? seq_len : x->rows;
    if (ce_positions_past_end(position_offset, span))
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "position_offset", -1, (int64_t)position_offset,
               "clembed_rope_apply: position_offset %zu + %zu positions is past 2^32 (RoPE takes positions below "
               "2^32)",
               position_offset, span);
  }
  /* in place (the same elements), or no overlap at all */
  int in_place = 0;
  if (x->buffer == out->buffer && x->rows && x->cols) {
    in_place = x->offset == out->offset && x_ld == o_ld && x->dtype == out->dtype;
    size_t xl, xh, ol, oh;
    span_bytes(x, x_ld, &xl, &xh);
    span_bytes(out, o_ld, &ol, &oh);
    if (!in_place && xl < oh && ol < xh)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "out", -1, 0,
               "clembed_rope_apply: out overlaps x without being x (the same buffer, offset, ld and dtype: in place)");
  }
  /* one kernel per shape: a row per work-item, 16 pairs at a time (the vector
   * angle and vector loads over every head), or a pair of every head per
   * work-item (consecutive work-items on consecutive pairs) */
  int rowwise = ctx->tune->rope_rowwise;
  const char *name = rowwise ? "ce_rope_apply_rows" : "ce_rope_apply";
  /* an output larger than the device's cache goes out with streaming stores
   * (not in place: the row was just read) */
  size_t out_bytes = x->rows * x->cols * clembed_dtype_size(out->dtype);
  int stream = rowwise && !in_place && ctx->tune->embed_stream && ctx->cache_bytes && out_bytes > ctx->cache_bytes;
  ce_pieces *mats[2] = {&xp, &op};
  CHECK(ce_pieces_plan(ctx, "clembed_rope_apply", mats, 2));
  snprintf(opts, sizeof opts, "-DOUT_DT=%d -DX_DT=%d -DPOS=%d -DVEC=16 -DROPE_PAIRS=%u -DSTREAM=%d", (int)out->dtype,
           (int)x->dtype, positions != NULL, ctx->tune->rope_pairs, stream);
  ce_pieces_option(opts, sizeof opts, &xp, "x");
  ce_pieces_option(opts, sizeof opts, &op, "out");
  CHECK(ce_kernel(ctx, CE_FAMILY_ROPE, opts, name, &k));
  ce_record rec = {CE_NO_SLOT, CE_FAMILY_ROPE, opts, positions, NULL, 0};
  size_t half = R / 2, heads = x->cols / r->head_dim, rest = r->head_dim - R;
  if (positions && x->rows && heads) {
    ce_slot_info info = {"clembed_rope_apply", NULL, 0, CE_POSITION_END, 0, 0, 0, 0, 0, "positions", 0, 0, 0, 0, 0, 0,
                         0, 0};
    CHECK(ce_slot_reserve(ctx, &info, &rec.slot));
  }
  cl_mem none = NULL, pb = positions ? positions->buffer : none;
  cl_ulong xl = x_ld, ol = o_ld, rows = x->rows, nh = heads, hd = r->head_dim;
  cl_ulong hf = half, po = positions ? positions->offset : 0, sl = seq_len, poff = position_offset;
  cl_int gptj = r->layout == CLEMBED_ROPE_GPTJ, copy_rest = !in_place;
  cl_int p64 = positions && positions->type == CLEMBED_I64;
  cl_float attn = attention, sign = inverse ? -1.0f : 1.0f;
  cl_uint slot_arg = rec.slot == CE_NO_SLOT ? 0 : rec.slot;
  size_t ny = heads ? x->rows : 0;
  do {
    CHECK(ce_set_args(ctx, k, name, CE_PIECES(&xp), CE_ARG(xl), CE_PIECES(&op), CE_ARG(ol), CE_ARG(rows), CE_ARG(nh),
                      CE_ARG(hd), CE_ARG(hf), CE_ARG(gptj), CE_ARG(copy_rest), CE_ARG(freq), CE_ARG(attn),
                      CE_ARG(sign), CE_ARG(pb), CE_ARG(pb), CE_ARG(po), CE_ARG(p64), CE_ARG(sl), CE_ARG(poff),
                      CE_ARG(ctx->errbuf), CE_ARG(slot_arg), CE_END));
    if (rowwise && ny)
      CHECK(ce_chain_1d(&ch, k, name, ny, CE_LOCAL_ROWS));
    else
      CHECK(ce_chain_2d(&ch, k, name, rowwise ? 1 : half + rest, ny));
  } while (ce_pieces_next(mats, 2));
  CHECK(ce_chain_close_checked(&ch, &rec, event));
cleanup:
  ce_chain_release(&ch);
  ce_pieces_release(&xp);
  ce_pieces_release(&op);
  return status;
}
