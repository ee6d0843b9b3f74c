/* Kernel arguments, work sizes, enqueues, and the event chain of an
 * operation's commands. */
#include "runtime.h"

#include <stdio.h>
#include <string.h>

/* The first piece of this launch's group, and how many follow it in the group. */
static size_t group_first(const ce_pieces *p) { return p->per_launch ? p->group * p->per_launch : 0; }

/* A matrix's arguments (cl/lib/pieces.cl): its buffer and the offset of its
 * first row there; split, the launch's window [f0, end) and the group's other
 * pieces (buffer, first row, the element of its row 0), a missing one as the
 * first buffer again with a first row no row reaches. */
static cl_int set_piece_args(cl_kernel k, cl_uint *i, const ce_pieces *p) {
  size_t g = group_first(p);
  cl_ulong off = p->piece[g].offset, f0 = p->piece[g].first;
  cl_int err = clSetKernelArg(k, (*i)++, sizeof(cl_mem), &p->piece[g].buffer);
  if (err == CL_SUCCESS) err = clSetKernelArg(k, (*i)++, sizeof off, &off);
  if (!p->per_launch || err != CL_SUCCESS) return err;
  size_t last = g + p->per_launch < p->count ? g + p->per_launch : p->count;
  cl_ulong end = last < p->count ? p->piece[last].first : p->rows;
  err = clSetKernelArg(k, (*i)++, sizeof f0, &f0);
  if (err == CL_SUCCESS) err = clSetKernelArg(k, (*i)++, sizeof end, &end);
  for (size_t j = 1; j < p->per_launch && err == CL_SUCCESS; j++) {
    int has = g + j < last;
    const ce_piece *q = &p->piece[has ? g + j : g];
    /* o: the element its row 0 would have (wrapping; pieces.cl's m_oj) */
    cl_ulong first = has ? q->first : CL_ULONG_MAX, o = has ? (cl_ulong)q->offset - (cl_ulong)q->first * p->ld : 0;
    err = clSetKernelArg(k, (*i)++, sizeof(cl_mem), &q->buffer);
    if (err == CL_SUCCESS) err = clSetKernelArg(k, (*i)++, sizeof first, &first);
    if (err == CL_SUCCESS) err = clSetKernelArg(k, (*i)++, sizeof o, &o);
  }
  return err;
}

static clembed_status set_args(clembed_context *ctx, cl_kernel k, const char *name, cl_uint first, va_list ap) {
  clembed_status status = CLEMBED_OK;
  for (cl_uint i = first;;) {
    size_t size = va_arg(ap, size_t);
    const void *value = va_arg(ap, const void *);
    if (size == 0) break;
    cl_uint at = i;
    cl_int err = size == CE_PIECES_MARK ? set_piece_args(k, &i, value) : clSetKernelArg(k, i++, size, value);
    if (err != CL_SUCCESS) {
      char what[160];
      snprintf(what, sizeof what, "%s: setting argument %u", name, (unsigned)at);
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

/* ------------------------------------------------------ split matrices */

/* The parameter bytes a launch of a kernel may spend on pieces: the device's
 * parameter space (1024 bytes at least) less what the largest kernel's own
 * arguments take, with room to spare. */
#define CE_OWN_PARAM_BYTES 448
#define CE_PIECE_ARGS_MAX 8 /* cl/lib/pieces.cl's CE_PP_8 */

/* The parameter bytes of a split matrix taken K pieces at a time: its window
 * (2 ulongs) and 3 arguments for each piece after its first. */
static size_t piece_bytes(size_t k) { return k ? (2 + 3 * (k - 1)) * 8 : 0; }

/* Plans the launches; returns the index of the whole matrix with the most
 * pieces that does not fit one launch, or -1. */
static long plan(clembed_context *ctx, ce_pieces *const *mats, size_t n) {
  size_t budget = ctx->max_param > CE_OWN_PARAM_BYTES ? ctx->max_param - CE_OWN_PARAM_BYTES : 0, used = 0;
  size_t pref = ctx->tune->piece_args < CE_PIECE_ARGS_MAX ? ctx->tune->piece_args : CE_PIECE_ARGS_MAX;
  if (pref == 0) pref = 1;
  /* each split matrix: all its pieces where it must be whole, else the tuning's number */
  for (size_t i = 0; i < n; i++) {
    ce_pieces *p = mats[i];
    if (!p) continue;
    size_t want = p->whole ? CE_PIECE_ARGS_MAX : pref;
    p->group = 0;
    p->per_launch = p->count > 1 ? (p->count < want ? p->count : want) : 0;
    used += piece_bytes(p->per_launch);
  }
  /* over the device's parameter space: fewer pieces a launch for the largest
   * share, those that may be left to other launches first */
  while (used > budget) {
    ce_pieces *big = NULL;
    for (int whole = 0; whole < 2 && !big; whole++)
      for (size_t i = 0; i < n; i++)
        if (mats[i] && mats[i]->whole == whole && mats[i]->per_launch > 1 &&
            (!big || mats[i]->per_launch > big->per_launch))
          big = mats[i];
    if (!big) break;
    used -= piece_bytes(big->per_launch);
    big->per_launch--;
    used += piece_bytes(big->per_launch);
  }
  long worst = -1;
  for (size_t i = 0; i < n; i++) {
    ce_pieces *p = mats[i];
    if (p && p->whole && p->count > 1 && p->per_launch < p->count && (worst < 0 || p->count > mats[worst]->count))
      worst = (long)i;
  }
  return worst;
}

clembed_status ce_pieces_plan(clembed_context *ctx, const char *fn, ce_pieces *const *mats, size_t n) {
  long i = plan(ctx, mats, n);
  if (i < 0) return CLEMBED_OK;
  const ce_pieces *p = mats[i];
  return ce_fail_arg(ctx, CLEMBED_ERR_UNSUPPORTED, NULL, p->what, -1, (int64_t)p->count,
                     "%s: %s lies in %zu buffers; this operation takes it in at most %zu on this device", fn, p->what,
                     p->count, p->per_launch);
}

long ce_pieces_plan_short(clembed_context *ctx, ce_pieces *const *mats, size_t n) { return plan(ctx, mats, n); }

void ce_pieces_option(char *opts, size_t cap, const ce_pieces *p, const char *role) {
  if (!p || !p->per_launch) return;
  /* K: every piece in the one launch; 8 + K: a window of K pieces (pieces.cl) */
  size_t used = strlen(opts), k = p->per_launch + (p->per_launch < p->count ? CE_PIECE_ARGS_MAX : 0);
  if (used < cap) snprintf(opts + used, cap - used, " -DCE_PIECES_%s=%zu", role, k);
}

cl_uint ce_pieces_extra_args(const ce_pieces *p) { return (cl_uint)(piece_bytes(p->per_launch) / 8); }

int ce_pieces_next(ce_pieces *const *mats, size_t n) {
  for (size_t i = 0; i < n; i++) {
    ce_pieces *p = mats[i];
    if (!p || !p->per_launch) continue;
    size_t groups = (p->count + p->per_launch - 1) / p->per_launch;
    if (++p->group < groups) return 1;
    p->group = 0; /* carried into the next matrix's groups */
  }
  return 0;
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

size_t ce_rows_local(clembed_context *ctx, cl_kernel k, size_t want) {
  if (!want) return CE_LOCAL_ROWS;
  size_t mul, wg = kernel_wg(ctx, k, &mul);
  return want < wg ? want : wg;
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
