/* Philox initialisation: clembed_matrix_init_uniform / _normal (cl/ops/init.cl,
 * on cl/lib/philox.cl and cl/lib/exactmath.cl). One Philox4x32-10 counter
 * serves four consecutive elements; the normal draw's logarithm, square root,
 * cosine and sine are built from correctly rounded operations only, so every
 * device gives the same bits (the mapping is in include/clembed.h). */
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Two kernel shapes (cl/ops/init.cl), the same bits: with the CPU shapes and a
 * dense matrix (ld == cols, or one row) 16 Philox counters (64 elements) per
 * work-item in 16-lane vectors (`kernel` + "16"); otherwise one counter (4
 * elements, any ld) per work-item; the 16-counter shape writes a matrix
 * larger than the device's cache with streaming stores (the tuning's
 * embed_stream, as the forward). Mesa's rusticl gets the one-counter shape
 * on its CPU device too: its compiler spends minutes on the 16-lane kernel. */
static clembed_status init(clembed_context *ctx, const char *fn, const char *kernel, clembed_matrix *m, float a,
                           float b, uint64_t seed, cl_uint nwait, const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  size_t ld;
  cl_kernel k;
  char opts[48], name[40];
  CHECK(ce_check_events(ctx, nwait, wait));
  /* a literal: the error detail keeps a pointer into it */
  const char *what = !strcmp(kernel, "ce_init_uniform") ? "clembed_matrix_init_uniform: m" : "clembed_matrix_init_normal: m";
  (void)fn;
  CHECK(ce_check_matrix(ctx, m, what, &ld));
  int wide = ctx->tune->cpu_shapes && (ld == m->cols || m->rows == 1) && !strstr(ctx->device_name, "rusticl");
  /* a matrix larger than the device's cache goes out with streaming stores */
  size_t bytes = m->rows * m->cols * (m->dtype == CLEMBED_F32 ? 4 : 2);
  int stream = wide && ctx->tune->embed_stream && ctx->cache_bytes && bytes > ctx->cache_bytes;
  snprintf(opts, sizeof opts, "-DOUT_DT=%d -DVEC=16 -DSTREAM=%d", (int)m->dtype, stream);
  snprintf(name, sizeof name, "%s%s", kernel, wide ? "16" : "");
  CHECK(ce_kernel(ctx, CE_FAMILY_INIT, opts, name, &k));
  size_t total = m->rows * m->cols; /* the matrix lies in a buffer: no overflow */
  cl_ulong off = m->offset, ldl = ld, rows = m->rows, cols = m->cols, tot = total;
  cl_uint lo = (cl_uint)seed, hi = (cl_uint)(seed >> 32);
  if (wide)
    CHECK(ce_set_args(ctx, k, name, CE_ARG(m->buffer), CE_ARG(off), CE_ARG(tot), CE_ARG(a), CE_ARG(b), CE_ARG(lo),
                      CE_ARG(hi), CE_END));
  else
    CHECK(ce_set_args(ctx, k, name, CE_ARG(m->buffer), CE_ARG(off), CE_ARG(ldl), CE_ARG(rows), CE_ARG(cols),
                      CE_ARG(a), CE_ARG(b), CE_ARG(lo), CE_ARG(hi), CE_END));
  /* an empty matrix still runs one (idle) group, so the event completes in order */
  CHECK(ce_enqueue_1d(ctx, k, name, wide ? (total + 63) / 64 : (total + 3) / 4, wide ? CE_LOCAL_ROWS : 0, nwait, wait,
                      event));
cleanup:
  return status;
}

clembed_status clembed_matrix_init_uniform(clembed_context *ctx, clembed_matrix *m, float low, float high,
                                           uint64_t seed, cl_uint nwait, const cl_event *wait, cl_event *event) {
  const char *fn = "clembed_matrix_init_uniform";
  cl_event own;
  CE_ENTER(ctx, fn);
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  if ((!isfinite(low) || !isfinite(high)))
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, isfinite(low) ? "high" : "low", -1, 0, "%s: low %g and high %g must be finite", fn, (double)low,
                   (double)high);
  if (!(low <= high))
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "low", -1, 0, "%s: low %g > high %g", fn, (double)low, (double)high);
  clembed_status status = init(ctx, fn, "ce_init_uniform", m, low, high, seed, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

clembed_status clembed_matrix_init_normal(clembed_context *ctx, clembed_matrix *m, float mean, float std,
                                          uint64_t seed, cl_uint nwait, const cl_event *wait, cl_event *event) {
  const char *fn = "clembed_matrix_init_normal";
  cl_event own;
  CE_ENTER(ctx, fn);
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  if ((!isfinite(mean) || !isfinite(std)))
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, isfinite(mean) ? "std" : "mean", -1, 0, "%s: mean %g and std %g must be finite", fn, (double)mean,
                   (double)std);
  if (!(std >= 0.0f))
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "std", -1, 0, "%s: std %g is negative", fn, (double)std);
  clembed_status status = init(ctx, fn, "ce_init_normal", m, mean, std, seed, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}
