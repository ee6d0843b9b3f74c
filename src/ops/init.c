/* Philox initialisation: clembed_matrix_init_uniform / _normal (cl/ops/init.cl,
 * on cl/lib/philox.cl and cl/lib/exactmath.cl). One Philox4x32-10 counter
 * serves four consecutive elements; the normal draw's logarithm, square root,
 * cosine and sine are built from correctly rounded operations only, so every
 * device gives the same bits (the mapping is in include/clembed.h). */
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Two kernel shapes (cl/ops/init.cl), the same bits: with the tuning's
 * init_wide and a dense matrix (ld == cols, or one row) 16 Philox counters
 * (64 elements) per work-item in 16-lane vectors (`kernel` + "16"); otherwise
 * one counter (4 elements, any ld) per work-item; the 16-counter shape writes
 * a matrix larger than the device's cache with streaming stores (the tuning's
 * embed_stream, as the forward). */
static clembed_status init(clembed_context *ctx, const char *fn, const char *kernel, clembed_matrix *m,
                           uint64_t first_row, float a, float b, uint64_t seed, cl_uint nwait, const cl_event *wait,
                           cl_event *event) {
  clembed_status status = CLEMBED_OK;
  size_t ld;
  cl_kernel k;
  char opts[96], name[40];
  ce_pieces op;
  ce_chain ch;
  ce_chain_init(&ch, ctx, nwait, wait);
  ce_pieces_none(&op);
  CHECK(ce_check_events(ctx, nwait, wait));
  /* a literal: the error detail keeps a pointer into it */
  static const char *const whats[2][2] = {{"clembed_matrix_init_normal: m", "clembed_matrix_init_normal_at: m"},
                                          {"clembed_matrix_init_uniform: m", "clembed_matrix_init_uniform_at: m"}};
  const char *what = whats[!strcmp(kernel, "ce_init_uniform")][strstr(fn, "_at") != NULL];
  CHECK(ce_check_pieces(ctx, m, what, 0, &op));
  ld = op.ld;
  /* the Philox index of element 0, and of the end, at most 2^63 */
  uint64_t limit = (uint64_t)1 << 63, first = 0;
  if (first_row > limit || (m->cols && first_row + m->rows > limit / m->cols))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "first_row", -1, (int64_t)(first_row > limit ? limit : first_row),
             "%s: (first_row %llu + rows %zu) * cols %zu passes 2^63, the largest element index", fn,
             (unsigned long long)first_row, m->rows, m->cols);
  first = first_row * m->cols;
  int wide = ctx->tune->init_wide && (ld == m->cols || m->rows == 1);
  /* a matrix larger than the device's cache goes out with streaming stores */
  size_t bytes = m->rows * m->cols * (m->dtype == CLEMBED_F32 ? 4 : 2);
  int stream = wide && ctx->tune->embed_stream && ctx->cache_bytes && bytes > ctx->cache_bytes;
  ce_pieces *mats[1] = {&op};
  CHECK(ce_pieces_plan(ctx, fn, mats, 1));
  snprintf(opts, sizeof opts, "-DOUT_DT=%d -DVEC=16 -DSTREAM=%d", (int)m->dtype, stream);
  ce_pieces_option(opts, sizeof opts, &op, "out");
  snprintf(name, sizeof name, "%s%s", kernel, wide ? "16" : "");
  CHECK(ce_kernel(ctx, CE_FAMILY_INIT, opts, name, &k));
  size_t total = m->rows * m->cols; /* the matrix lies in its buffers: no overflow */
  cl_ulong ldl = ld, rows = m->rows, cols = m->cols, tot = total, fst = first;
  cl_uint lo = (cl_uint)seed, hi = (cl_uint)(seed >> 32);
  /* counters from first / 4 on, covering [first, end); an empty matrix still
   * runs one (idle) group, so the event completes in order */
  size_t span = (size_t)(first % 4) + total;
  do {
    if (wide)
      CHECK(ce_set_args(ctx, k, name, CE_PIECES(&op), CE_ARG(cols), CE_ARG(tot), CE_ARG(fst), CE_ARG(a), CE_ARG(b),
                        CE_ARG(lo), CE_ARG(hi), CE_END));
    else
      CHECK(ce_set_args(ctx, k, name, CE_PIECES(&op), CE_ARG(ldl), CE_ARG(rows), CE_ARG(cols), CE_ARG(fst),
                        CE_ARG(a), CE_ARG(b), CE_ARG(lo), CE_ARG(hi), CE_END));
    CHECK(ce_chain_1d(&ch, k, name, wide ? (span + 63) / 64 : (span + 3) / 4, wide ? CE_LOCAL_ROWS : 0));
  } while (ce_pieces_next(mats, 1));
  CHECK(ce_chain_close(&ch, event));
cleanup:
  ce_chain_release(&ch);
  ce_pieces_release(&op);
  return status;
}

static clembed_status uniform(clembed_context *ctx, const char *fn, clembed_matrix *m, uint64_t first_row, float low,
                              float high, uint64_t seed, cl_uint nwait, const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, fn);
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  if ((!isfinite(low) || !isfinite(high)))
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, isfinite(low) ? "high" : "low", -1, 0, "%s: low %g and high %g must be finite", fn, (double)low,
                   (double)high);
  if (!(low <= high))
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "low", -1, 0, "%s: low %g > high %g", fn, (double)low, (double)high);
  clembed_status status = init(ctx, fn, "ce_init_uniform", m, first_row, low, high, seed, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

static clembed_status normal(clembed_context *ctx, const char *fn, clembed_matrix *m, uint64_t first_row, float mean,
                             float std, uint64_t seed, cl_uint nwait, const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, fn);
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  if ((!isfinite(mean) || !isfinite(std)))
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, isfinite(mean) ? "std" : "mean", -1, 0, "%s: mean %g and std %g must be finite", fn, (double)mean,
                   (double)std);
  if (!(std >= 0.0f))
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "std", -1, 0, "%s: std %g is negative", fn, (double)std);
  clembed_status status = init(ctx, fn, "ce_init_normal", m, first_row, mean, std, seed, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

clembed_status clembed_matrix_init_uniform(clembed_context *ctx, clembed_matrix *m, float low, float high,
                                           uint64_t seed, cl_uint nwait, const cl_event *wait, cl_event *event) {
  return uniform(ctx, "clembed_matrix_init_uniform", m, 0, low, high, seed, nwait, wait, event);
}

clembed_status clembed_matrix_init_normal(clembed_context *ctx, clembed_matrix *m, float mean, float std,
                                          uint64_t seed, cl_uint nwait, const cl_event *wait, cl_event *event) {
  return normal(ctx, "clembed_matrix_init_normal", m, 0, mean, std, seed, nwait, wait, event);
}

clembed_status clembed_matrix_init_uniform_at(clembed_context *ctx, clembed_matrix *m, uint64_t first_row, float low,
                                              float high, uint64_t seed, cl_uint nwait, const cl_event *wait,
                                              cl_event *event) {
  return uniform(ctx, "clembed_matrix_init_uniform_at", m, first_row, low, high, seed, nwait, wait, event);
}

clembed_status clembed_matrix_init_normal_at(clembed_context *ctx, clembed_matrix *m, uint64_t first_row, float mean,
                                             float std, uint64_t seed, cl_uint nwait, const cl_event *wait,
                                             cl_event *event) {
  return normal(ctx, "clembed_matrix_init_normal_at", m, first_row, mean, std, seed, nwait, wait, event);
}
