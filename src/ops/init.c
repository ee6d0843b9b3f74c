/* Philox initialisation: clembed_matrix_init_uniform / _normal (cl/ops/init.cl,
 * on cl/lib/philox.cl). */
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static clembed_status init(clembed_context *ctx, const char *fn, const char *kernel, clembed_matrix *m, float a,
                           float b, uint64_t seed, cl_uint nwait, const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  size_t ld;
  cl_kernel k;
  char opts[32];
  CHECK(ce_check_events(ctx, nwait, wait));
  /* a literal: the error detail keeps a pointer into it */
  const char *what = !strcmp(kernel, "ce_init_uniform") ? "clembed_matrix_init_uniform: m" : "clembed_matrix_init_normal: m";
  (void)fn;
  CHECK(ce_check_matrix(ctx, m, what, &ld));
  snprintf(opts, sizeof opts, "-DOUT_DT=%d", (int)m->dtype);
  CHECK(ce_kernel(ctx, CE_FAMILY_INIT, opts, kernel, &k));
  cl_ulong off = m->offset, ldl = ld, rows = m->rows, cols = m->cols;
  cl_uint lo = (cl_uint)seed, hi = (cl_uint)(seed >> 32);
  CHECK(ce_set_args(ctx, k, kernel, CE_ARG(m->buffer), CE_ARG(off), CE_ARG(ldl), CE_ARG(rows), CE_ARG(cols),
                    CE_ARG(a), CE_ARG(b), CE_ARG(lo), CE_ARG(hi), CE_END));
  CHECK(ce_enqueue_2d(ctx, k, kernel, m->cols, m->rows, nwait, wait, event));
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
