/* Kernel arguments, work sizes, enqueues, and the event chain of an
 * operation's commands. */
#include "runtime.h"

#include <stdio.h>

static clembed_status set_args(clembed_context *ctx, cl_kernel k, const char *name, cl_uint first, va_list ap) {
  clembed_status status = CLEMBED_OK;
  for (cl_uint i = first;; i++) {
    size_t size = va_arg(ap, size_t);
    const void *value = va_arg(ap, const void *);
    if (size == 0) break;
    cl_int err = clSetKernelArg(k, (cl_uint)i, size, value);
    if (err != CL_SUCCESS) {
      char what[160];
      snprintf(what, sizeof what, "%s: setting argument %u", name, (unsigned)i);
      status = ce_cl_fail(ctx, err, what);
      break;
    }
  }
  return status;
}

clembed_status ce_set_args(clembed_context *ctx, cl_kernel k, const char *name, ...) {
  va_list ap;
  va_start(ap, name);
  clembed_status status = set_args(ctx, k, name, 0, ap);
  va_end(ap);
  return status;
}

clembed_status ce_set_args_at(clembed_context *ctx, cl_kernel k, const char *name, cl_uint first, ...) {
  va_list ap;
  va_start(ap, first);
  clembed_status status = set_args(ctx, k, name, first, ap);
  va_end(ap);
  return status;
}

static size_t round_up(size_t n, size_t m) { return m ? (n + m - 1) / m * m : n; }

static size_t kernel_wg(clembed_context *ctx, cl_kernel k, size_t *multiple) {
  size_t wg = 0, mul = 0;
  if (clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL) != CL_SUCCESS ||
      wg == 0)
    wg = ctx->max_work_group;
  if (clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE, sizeof mul, &mul,
                               NULL) != CL_SUCCESS ||
      mul == 0)
    mul = 1;
  *multiple = mul;
  return wg;
}

size_t ce_local_if_allowed(clembed_context *ctx, cl_kernel k, size_t want) {
  size_t wg = 0;
  if (clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL) != CL_SUCCESS)
    return 0;
  return wg >= want ? want : 0;
}

static clembed_status enqueue(clembed_context *ctx, cl_kernel k, const char *name, cl_uint dims,
                              const size_t *global, const size_t *local, cl_uint nwait, const cl_event *wait,
                              cl_event *event) {
  cl_int err = clEnqueueNDRangeKernel(ctx->queue, k, dims, NULL, global, local, nwait, wait, event);
  if (err != CL_SUCCESS) return ce_cl_fail(ctx, err, name);
  return CLEMBED_OK;
}

/* The local size for n work-items that each do a large piece of work (the CPU
 * shapes), for a kernel allowing wg: a CPU runtime runs a work-group's items in
 * one thread, so few of these items to a group, and several groups per compute
 * unit where n allows. */
static size_t rows_local(const clembed_context *ctx, size_t wg, size_t n) {
  const ce_tuning *t = ctx->tune;
  size_t local = 1;
  while (local * 2 <= t->row_items_max && local * 2 <= wg && n >= local * 2 * t->row_groups_per_unit * ctx->units)
    local *= 2;
  return local;
}

clembed_status ce_enqueue_2d(clembed_context *ctx, cl_kernel k, const char *name, size_t nx, size_t ny,
                             cl_uint nwait, const cl_event *wait, cl_event *event) {
  size_t mul, wg = kernel_wg(ctx, k, &mul);
  size_t target = wg < ctx->tune->group_target ? wg : ctx->tune->group_target;
  /* x covers the columns (a power of two up to the target), y the rest. */
  size_t lx = 1;
  while (lx < nx && lx * 2 <= target && lx * 2 <= ctx->max_items[0]) lx *= 2;
  size_t ly = 1;
  while (ly * 2 * lx <= target && ly * 2 <= ctx->max_items[1] && ly < ny) ly *= 2;
  /* CPU shapes, one work-item across: each item does a whole row's work (the
   * segment kernels), so small groups spread the work evenly over the compute units */
  if (ctx->cpu_shapes && nx == 1) ly = rows_local(ctx, wg, ny);
  if (nx == 0 || ny == 0) { /* nothing to run; the event still completes after the wait list */
    if (!event) return CLEMBED_OK;
    cl_int err = clEnqueueMarkerWithWaitList(ctx->queue, nwait, wait, event);
    return err == CL_SUCCESS ? CLEMBED_OK : ce_cl_fail(ctx, err, name);
  }
  size_t local[2] = {lx, ly};
  size_t global[2] = {round_up(nx, lx), round_up(ny, ly)};
  return enqueue(ctx, k, name, 2, global, local, nwait, wait, event);
}

clembed_status ce_enqueue_1d(clembed_context *ctx, cl_kernel k, const char *name, size_t n, size_t local,
                             cl_uint nwait, const cl_event *wait, cl_event *event) {
  size_t mul, wg = kernel_wg(ctx, k, &mul);
  if (local == CE_LOCAL_ROWS) {
    local = rows_local(ctx, wg, n);
  } else if (local == 0) {
    local = wg < ctx->tune->group_target ? wg : ctx->tune->group_target;
    if (local > mul) local = local / mul * mul;
  }
  if (local > wg)
    return ce_fail(ctx, CLEMBED_ERR_UNSUPPORTED, "%s: needs a work-group of %zu, the device allows %zu", name, local,
                   wg);
  size_t global = round_up(n ? n : 1, local);
  return enqueue(ctx, k, name, 1, &global, &local, nwait, wait, event);
}

/* ---------------------------------------------------------------- chains */

void ce_chain_init(ce_chain *ch, clembed_context *ctx, cl_uint nwait, const cl_event *wait) {
  ch->ctx = ctx;
  ch->nwait = nwait;
  ch->wait = wait;
  ch->prev = NULL;
}

cl_uint ce_chain_nwait(const ce_chain *ch) { return ch->prev ? 1u : ch->nwait; }
const cl_event *ce_chain_wait(const ce_chain *ch) { return ch->prev ? &ch->prev : ch->wait; }

static void chain_next(ce_chain *ch, cl_event ev) {
  if (!ev) return;
  if (ch->prev) clReleaseEvent(ch->prev);
  ch->prev = ev;
}

clembed_status ce_chain_1d(ce_chain *ch, cl_kernel k, const char *name, size_t n, size_t local) {
  cl_event ev = NULL;
  clembed_status s = ce_enqueue_1d(ch->ctx, k, name, n, local, ce_chain_nwait(ch), ce_chain_wait(ch), &ev);
  chain_next(ch, ev);
  return s;
}

clembed_status ce_chain_2d(ce_chain *ch, cl_kernel k, const char *name, size_t nx, size_t ny) {
  cl_event ev = NULL;
  clembed_status s = ce_enqueue_2d(ch->ctx, k, name, nx, ny, ce_chain_nwait(ch), ce_chain_wait(ch), &ev);
  chain_next(ch, ev);
  return s;
}

clembed_status ce_chain_2d_local(ce_chain *ch, cl_kernel k, const char *name, size_t nx, size_t ny, size_t lx,
                                 size_t ly) {
  cl_event ev = NULL;
  size_t local[2] = {lx, ly}, global[2] = {round_up(nx, lx), round_up(ny, ly)};
  clembed_status s = CLEMBED_OK;
  if (nx == 0 || ny == 0)
    s = ce_enqueue_2d(ch->ctx, k, name, 0, 0, ce_chain_nwait(ch), ce_chain_wait(ch), &ev); /* a marker */
  else
    s = enqueue(ch->ctx, k, name, 2, global, local, ce_chain_nwait(ch), ce_chain_wait(ch), &ev);
  chain_next(ch, ev);
  return s;
}

void ce_chain_adopt(ce_chain *ch, cl_event ev) { chain_next(ch, ev); }

clembed_status ce_chain_close(ce_chain *ch, cl_event *event) {
  if (!event) return CLEMBED_OK;
  if (ch->prev) { /* the last command's event is the caller's */
    *event = ch->prev;
    ch->prev = NULL;
    return CLEMBED_OK;
  }
  cl_int err = clEnqueueMarkerWithWaitList(ch->ctx->queue, ch->nwait, ch->wait, event);
  return err == CL_SUCCESS ? CLEMBED_OK : ce_cl_fail(ch->ctx, err, "clEnqueueMarkerWithWaitList");
}

void ce_chain_release(ce_chain *ch) {
  if (ch->prev) clReleaseEvent(ch->prev);
  ch->prev = NULL;
}
