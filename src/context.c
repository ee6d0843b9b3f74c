/* Device choice, context and queue lifetime, messages, deferred errors. */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------- messages */

static _Thread_local char ce_last_error[2048];
static _Thread_local clembed_error_detail ce_last_detail;

const char *clembed_last_error_message(void) { return ce_last_error; }

static void detail_fill(clembed_error_detail *d, clembed_status code, const char *op, const char *argument,
                        int64_t index, int64_t value) {
  d->status = code;
  d->operation = op ? op : "";
  d->argument = argument ? argument : "";
  d->index = index;
  d->value = value;
}

void ce_set_detail(clembed_context *ctx, clembed_status code, const char *op, const char *argument, int64_t index,
                   int64_t value) {
  if (!ctx) return;
  detail_fill(&ctx->detail, code, op ? op : ctx->op, argument, index, value);
}

clembed_status clembed_context_error(const clembed_context *ctx, clembed_error_detail *d) {
  if (!d) return CLEMBED_ERR_INVALID_ARGUMENT;
  *d = ctx ? ctx->detail : ce_last_detail;
  if (!d->operation) d->operation = "";
  if (!d->argument) d->argument = "";
  return CLEMBED_OK;
}

void ce_vset_message(clembed_context *ctx, const char *fmt, va_list ap) {
  if (!ctx) return;
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  if ((size_t)n + 1 > ctx->message_cap) {
    char *m = realloc(ctx->message, (size_t)n + 1);
    if (!m) { /* keep the old buffer; truncate */
      if (ctx->message_cap) vsnprintf(ctx->message, ctx->message_cap, fmt, ap);
      return;
    }
    ctx->message = m;
    ctx->message_cap = (size_t)n + 1;
  }
  vsnprintf(ctx->message, ctx->message_cap, fmt, ap);
}

void ce_set_message(clembed_context *ctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ce_vset_message(ctx, fmt, ap);
  va_end(ap);
}

void ce_append_message(clembed_context *ctx, const char *text) {
  if (!ctx || !text) return;
  size_t have = ctx->message ? strlen(ctx->message) : 0, add = strlen(text);
  if (have + add + 1 > ctx->message_cap) {
    char *m = realloc(ctx->message, have + add + 1);
    if (!m) return;
    if (!ctx->message) m[0] = '\0';
    ctx->message = m;
    ctx->message_cap = have + add + 1;
  }
  memcpy(ctx->message + have, text, add + 1);
}

clembed_status ce_fail(clembed_context *ctx, clembed_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ce_vset_message(ctx, fmt, ap);
  va_end(ap);
  ce_set_detail(ctx, code, NULL, "", -1, 0);
  return code;
}

clembed_status ce_fail_arg(clembed_context *ctx, clembed_status code, const char *op, const char *argument,
                           int64_t index, int64_t value, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ce_vset_message(ctx, fmt, ap);
  va_end(ap);
  ce_set_detail(ctx, code, op, argument, index, value);
  return code;
}

clembed_status ce_cl_fail(clembed_context *ctx, cl_int err, const char *what) {
  clembed_status s = (clembed_status)err;
  if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY || err == CL_OUT_OF_RESOURCES)
    s = CLEMBED_ERR_OUT_OF_MEMORY; /* the OpenCL code stays in the message */
  ce_set_message(ctx, "%s: %s", what, clembed_status_string((clembed_status)err));
  ce_set_detail(ctx, s, NULL, "", -1, (int64_t)err);
  return s;
}

clembed_status ce_no_context(const char *op) {
  snprintf(ce_last_error, sizeof ce_last_error, "%s: ctx is NULL", op);
  detail_fill(&ce_last_detail, CLEMBED_ERR_INVALID_ARGUMENT, op, "ctx", -1, 0);
  return CLEMBED_ERR_INVALID_ARGUMENT;
}

/* ------------------------------------------------------- tracked commands */

/* Records a failed command's status in ctx->failed (the first one wins). */
static void tracked_note(clembed_context *ctx, const ce_tracked *t, cl_int st) {
  if (st >= 0 || ctx->failed.status != CLEMBED_OK) return;
  clembed_status code = st > -1000 ? (clembed_status)st : (clembed_status)CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
  detail_fill(&ctx->failed, code, t->op, st == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST ? "event_wait_list" : "",
              -1, (int64_t)st);
}

static cl_int event_status(cl_event e) {
  cl_int st = CL_COMPLETE;
  if (clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL) != CL_SUCCESS) st = CL_COMPLETE;
  return st;
}

/* Drops the commands that have completed (noting failures); with `wait`, waits
 * for every one first. */
static void tracked_sweep(clembed_context *ctx, int wait) {
  size_t keep = 0;
  for (size_t i = 0; i < ctx->ntracked; i++) {
    ce_tracked *t = &ctx->tracked[i];
    cl_int st = event_status(t->event);
    if (wait && st > CL_COMPLETE) { /* (a wait on a failed event is itself an error on some implementations) */
      clWaitForEvents(1, &t->event);
      st = event_status(t->event);
    }
    if (st > CL_COMPLETE) { /* still queued or running */
      ctx->tracked[keep++] = *t;
      continue;
    }
    tracked_note(ctx, t, st);
    clReleaseEvent(t->event);
  }
  ctx->ntracked = keep;
}

static void tracked_wait_release(clembed_context *ctx) {
  tracked_sweep(ctx, 1);
  for (size_t i = 0; i < ctx->ntracked; i++) clReleaseEvent(ctx->tracked[i].event);
  ctx->ntracked = 0;
}

/* Keeps `ev` (a reference the context owns) for the next finish. */
static clembed_status track(clembed_context *ctx, cl_event ev, const char *op) {
  if (ctx->ntracked == ctx->tracked_cap) tracked_sweep(ctx, 0);
  if (ctx->ntracked == ctx->tracked_cap) {
    size_t cap = ctx->tracked_cap ? 2 * ctx->tracked_cap : 64;
    ce_tracked *t = realloc(ctx->tracked, cap * sizeof *t);
    if (!t) { /* cannot keep it: wait for it now */
      clWaitForEvents(1, &ev);
      ce_tracked one = {ev, op};
      tracked_note(ctx, &one, event_status(ev));
      clReleaseEvent(ev);
      return CLEMBED_OK;
    }
    ctx->tracked = t;
    ctx->tracked_cap = cap;
  }
  ctx->tracked[ctx->ntracked].event = ev;
  ctx->tracked[ctx->ntracked++].op = op;
  return CLEMBED_OK;
}

clembed_status ce_track_end(clembed_context *ctx, clembed_status status, cl_event *event, const cl_event *ownp) {
  cl_event own = *ownp;
  if (status != CLEMBED_OK) {
    if (own) clReleaseEvent(own);
    return status;
  }
  if (event && *event) {
    clRetainEvent(*event);
    track(ctx, *event, ctx->op);
  } else if (own) {
    track(ctx, own, ctx->op);
  }
  return status;
}

/* After a clFinish: the first failed command since the last check, as a
 * status with its message and detail (and forgotten). */
static clembed_status tracked_collect(clembed_context *ctx) {
  tracked_sweep(ctx, 1);
  clembed_error_detail f = ctx->failed;
  if (f.status == CLEMBED_OK) return CLEMBED_OK;
  memset(&ctx->failed, 0, sizeof ctx->failed);
  ce_set_message(ctx, "%s: a command on the device failed with %s (%lld)%s", f.operation,
                 clembed_status_string((clembed_status)f.value), (long long)f.value,
                 f.value == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST
                     ? ": an event in its wait list failed; its output was not written"
                     : "; its output was not written");
  ctx->detail = f;
  return f.status;
}

/* ---------------------------------------------------------- accessors */

const char *clembed_context_message(const clembed_context *ctx) {
  return ctx && ctx->message ? ctx->message : "";
}

cl_command_queue clembed_context_queue(const clembed_context *ctx) { return ctx ? ctx->queue : NULL; }

const char *clembed_context_device_name(const clembed_context *ctx) {
  return ctx ? ctx->device_name : "";
}

/* ------------------------------------------------------- device choice */

typedef struct ce_device_entry {
  cl_platform_id platform;
  cl_device_id device;
  cl_uint pi, di;
  cl_device_type type;
  char name[512]; /* "platform name device name" */
  char pname[128], dname[128];
} ce_device_entry;

/* The message of a call that has no context (per thread). */
static void lastf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ce_last_error, sizeof ce_last_error, fmt, ap);
  va_end(ap);
}

void ce_set_last_error(clembed_status code, const char *op, const char *argument, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ce_last_error, sizeof ce_last_error, fmt, ap);
  va_end(ap);
  detail_fill(&ce_last_detail, code, op, argument, -1, 0);
}

/* The detail of a context creation that failed (per thread). */
static clembed_status create_failed(clembed_status status, const char *op, const char *argument) {
  detail_fill(&ce_last_detail, status, op, argument, -1, 0);
  return status;
}

/* Lists every device; returns the count (0 with *list NULL when none). */
static clembed_status list_devices(ce_device_entry **list, size_t *count) {
  cl_uint np = 0;
  cl_platform_id *plats = NULL;
  ce_device_entry *out = NULL;
  size_t n = 0, cap = 0;
  clembed_status status = CLEMBED_OK;
  *list = NULL;
  *count = 0;
  cl_int err = clGetPlatformIDs(0, NULL, &np);
  if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || np == 0) return CLEMBED_OK;
  if (err != CL_SUCCESS) return (clembed_status)err;
  plats = calloc(np, sizeof *plats);
  if (!plats) return CLEMBED_ERR_OUT_OF_MEMORY;
  err = clGetPlatformIDs(np, plats, NULL);
  if (err != CL_SUCCESS) {
    status = (clembed_status)err;
    goto cleanup;
  }
  for (cl_uint p = 0; p < np; p++) {
    char pname[256] = "";
    clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0) continue;
    cl_device_id *devs = calloc(nd, sizeof *devs);
    if (!devs) {
      status = CLEMBED_ERR_OUT_OF_MEMORY;
      goto cleanup;
    }
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, nd, devs, NULL) != CL_SUCCESS) nd = 0;
    for (cl_uint d = 0; d < nd; d++) {
      if (n == cap) {
        size_t nc = cap ? cap * 2 : 8;
        ce_device_entry *g = realloc(out, nc * sizeof *g);
        if (!g) {
          free(devs);
          status = CLEMBED_ERR_OUT_OF_MEMORY;
          goto cleanup;
        }
        out = g;
        cap = nc;
      }
      ce_device_entry *e = &out[n++];
      memset(e, 0, sizeof *e);
      e->platform = plats[p];
      e->device = devs[d];
      e->pi = p;
      e->di = d;
      char dname[256] = "";
      clGetDeviceInfo(devs[d], CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof e->type, &e->type, NULL);
      snprintf(e->name, sizeof e->name, "%s %s", pname, dname);
      snprintf(e->pname, sizeof e->pname, "%s", pname);
      snprintf(e->dname, sizeof e->dname, "%s", dname);
    }
    free(devs);
  }
cleanup:
  free(plats);
  if (status != CLEMBED_OK) {
    free(out);
    return status;
  }
  *list = out;
  *count = n;
  return CLEMBED_OK;
}

static int contains_nocase(const char *hay, const char *needle) {
  size_t nl = strlen(needle);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < nl && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
    if (i == nl) return 1;
  }
  return nl == 0;
}

static long pick_type(const ce_device_entry *l, size_t n, cl_device_type t) {
  for (size_t i = 0; i < n; i++)
    if (l[i].type & t) return (long)i;
  return -1;
}

/* Index of the device the spec names, or -1. */
static long match_spec(const ce_device_entry *l, size_t n, const char *spec) {
  if (!spec || !*spec) {
    long i = pick_type(l, n, CL_DEVICE_TYPE_GPU);
    if (i < 0) i = pick_type(l, n, CL_DEVICE_TYPE_ACCELERATOR);
    if (i < 0) i = pick_type(l, n, CL_DEVICE_TYPE_CPU);
    if (i < 0 && n > 0) i = 0;
    return i;
  }
  /* "P:D": two decimal indices, nothing else */
  const char *colon = strchr(spec, ':');
  if (colon && colon > spec && colon[1] && strspn(spec, "0123456789") == (size_t)(colon - spec) &&
      strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
    errno = 0;
    unsigned long long p = strtoull(spec, NULL, 10), d = strtoull(colon + 1, NULL, 10);
    if (errno) return -1; /* out of range: names no device */
    for (size_t i = 0; i < n; i++)
      if (l[i].pi == p && l[i].di == d) return (long)i;
    return -1;
  }
  if (!strcasecmp(spec, "gpu")) return pick_type(l, n, CL_DEVICE_TYPE_GPU);
  if (!strcasecmp(spec, "cpu")) return pick_type(l, n, CL_DEVICE_TYPE_CPU);
  if (!strcasecmp(spec, "accelerator")) return pick_type(l, n, CL_DEVICE_TYPE_ACCELERATOR);
  for (size_t i = 0; i < n; i++)
    if (contains_nocase(l[i].name, spec)) return (long)i;
  return -1;
}

static clembed_status context_init(clembed_context *ctx);

static clembed_context *context_alloc(void) {
  clembed_context *ctx = calloc(1, sizeof *ctx);
  return ctx;
}

clembed_status clembed_context_create(const char *device, clembed_context **out) {
  ce_device_entry *list = NULL;
  size_t n = 0;
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = NULL;
  cl_int err;
  ce_last_error[0] = '\0';
  if (!out) {
    lastf("clembed_context_create: ctx is NULL");
    return create_failed(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_context_create", "ctx");
  }
  *out = NULL;
  const char *spec = device;
  if (!spec || !*spec) {
    const char *env = getenv("CLEMBED_DEVICE");
    if (env && *env) spec = env;
  }
  status = list_devices(&list, &n);
  if (status != CLEMBED_OK) {
    lastf("clembed_context_create: listing OpenCL platforms failed: %s", clembed_status_string(status));
    goto cleanup;
  }
  long idx = match_spec(list, n, spec);
  if (idx < 0) {
    char buf[1536];
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && used + 1 < sizeof buf; i++) {
      int w = snprintf(buf + used, sizeof buf - used, "%s  %u:%u %s", i ? "\n" : "", list[i].pi,
                       list[i].di, list[i].name);
      if (w < 0) break;
      used += (size_t)w;
      if (used >= sizeof buf) used = sizeof buf - 1;
    }
    if (n == 0)
      lastf("no OpenCL device found (no platform or no device is installed; on Debian: apt-get install "
            "pocl-opencl-icd)");
    else
      lastf("no OpenCL device matches '%s'%s; the devices are:\n%s", spec ? spec : "",
            (spec == device) ? "" : " (from CLEMBED_DEVICE)", buf);
    status = CLEMBED_ERR_NO_DEVICE;
    goto cleanup;
  }
  ctx = context_alloc();
  if (!ctx) {
    lastf("clembed_context_create: out of host memory");
    status = CLEMBED_ERR_OUT_OF_MEMORY;
    goto cleanup;
  }
  ctx->platform = list[idx].platform;
  ctx->device = list[idx].device;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ctx->platform, 0};
  ctx->context = clCreateContext(props, 1, &ctx->device, NULL, NULL, &err);
  if (err != CL_SUCCESS) {
    lastf("clCreateContext on %s: %s", list[idx].name, clembed_status_string((clembed_status)err));
    status = (clembed_status)err;
    goto cleanup;
  }
  ctx->queue = clCreateCommandQueue(ctx->context, ctx->device, 0, &err);
  if (err != CL_SUCCESS) {
    lastf("clCreateCommandQueue on %s: %s", list[idx].name, clembed_status_string((clembed_status)err));
    status = (clembed_status)err;
    goto cleanup;
  }
  ctx->own_queue = 1;
  status = context_init(ctx);
cleanup:
  free(list);
  if (status != CLEMBED_OK) {
    clembed_context_destroy(ctx);
    return create_failed(status, "clembed_context_create", status == CLEMBED_ERR_NO_DEVICE ? "device" : "");
  }
  *out = ctx;
  return CLEMBED_OK;
}

clembed_status clembed_context_create_from_queue(cl_command_queue queue, clembed_context **out) {
  clembed_status status = CLEMBED_OK;
  ce_last_error[0] = '\0';
  const char *op = "clembed_context_create_from_queue";
  if (!out) {
    lastf("clembed_context_create_from_queue: ctx is NULL");
    return create_failed(CLEMBED_ERR_INVALID_ARGUMENT, op, "ctx");
  }
  *out = NULL;
  if (!queue) {
    lastf("clembed_context_create_from_queue: queue is NULL");
    return create_failed(CLEMBED_ERR_INVALID_ARGUMENT, op, "queue");
  }
  clembed_context *ctx = context_alloc();
  if (!ctx) {
    lastf("clembed_context_create_from_queue: out of host memory");
    return create_failed(CLEMBED_ERR_OUT_OF_MEMORY, op, "");
  }
  cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof ctx->context, &ctx->context, NULL);
  if (err == CL_SUCCESS)
    err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof ctx->device, &ctx->device, NULL);
  if (err == CL_SUCCESS)
    err = clGetDeviceInfo(ctx->device, CL_DEVICE_PLATFORM, sizeof ctx->platform, &ctx->platform, NULL);
  if (err != CL_SUCCESS) {
    lastf("clembed_context_create_from_queue: the queue cannot be queried: %s",
          clembed_status_string((clembed_status)err));
    ctx->context = NULL;
    free(ctx);
    return create_failed((clembed_status)err, op, "queue");
  }
  clRetainContext(ctx->context);
  clRetainCommandQueue(queue);
  ctx->queue = queue;
  status = context_init(ctx);
  if (status != CLEMBED_OK) {
    clembed_context_destroy(ctx);
    return create_failed(status, op, "");
  }
  *out = ctx;
  return CLEMBED_OK;
}

#define CE_ERRBUF_BYTES (CE_SLOTS * CE_SLOT_UINTS * sizeof(cl_uint))

static clembed_status context_init(clembed_context *ctx) {
  cl_int err;
  char pname[256] = "", dname[256] = "";
  clGetPlatformInfo(ctx->platform, CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
  clGetDeviceInfo(ctx->device, CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);
  snprintf(ctx->device_name, sizeof ctx->device_name, "%.250s / %.250s", pname, dname);
  clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof ctx->max_work_group,
                  &ctx->max_work_group, NULL);
  if (ctx->max_work_group == 0) ctx->max_work_group = 1;
  size_t items[3] = {1, 1, 1};
  if (clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof items, items, NULL) != CL_SUCCESS)
    items[0] = items[1] = 1;
  ctx->max_items[0] = items[0] ? items[0] : 1;
  ctx->max_items[1] = items[1] ? items[1] : 1;
  clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof ctx->max_alloc, &ctx->max_alloc, NULL);
  size_t ext_len = 0;
  if (clGetDeviceInfo(ctx->device, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_len) == CL_SUCCESS && ext_len) {
    char *ext = malloc(ext_len + 1);
    if (ext && clGetDeviceInfo(ctx->device, CL_DEVICE_EXTENSIONS, ext_len, ext, NULL) == CL_SUCCESS) {
      ext[ext_len] = '\0';
      ctx->atom64 = strstr(ext, "cl_khr_int64_base_atomics") != NULL && !getenv("CLEMBED_NO_ATOM64");
    }
    free(ext);
  }
  cl_device_type type = 0;
  clGetDeviceInfo(ctx->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  ctx->cpu_shapes = (type & CL_DEVICE_TYPE_CPU) != 0;
  const char *tuning = getenv("CLEMBED_TUNING");
  if (tuning && *tuning) {
    if (!strcasecmp(tuning, "cpu")) {
      ctx->cpu_shapes = 1;
    } else if (!strcasecmp(tuning, "gpu")) {
      ctx->cpu_shapes = 0;
    } else {
      lastf("CLEMBED_TUNING is '%.100s'; it must be cpu, gpu, or unset", tuning);
      return CLEMBED_ERR_INVALID_ARGUMENT;
    }
  }
  if (clGetDeviceInfo(ctx->device, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof ctx->cache_bytes, &ctx->cache_bytes,
                      NULL) != CL_SUCCESS)
    ctx->cache_bytes = 0;
  cl_device_fp_config fp = 0;
  clGetDeviceInfo(ctx->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
  ctx->exact_div = (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
  cl_bool unified = CL_FALSE;
  clGetDeviceInfo(ctx->device, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
  ctx->host_pages = (type & CL_DEVICE_TYPE_CPU) && unified;
  if (clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof ctx->units, &ctx->units, NULL) !=
          CL_SUCCESS ||
      ctx->units == 0)
    ctx->units = 1;
  cl_command_queue_properties qp = 0;
  clGetCommandQueueInfo(ctx->queue, CL_QUEUE_PROPERTIES, sizeof qp, &qp, NULL);
  ctx->in_order = !(qp & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);

  char version[128] = "";
  clGetDeviceInfo(ctx->device, CL_DEVICE_VERSION, sizeof version - 1, version, NULL);
  int major = 0, minor = 0;
  if (sscanf(version, "OpenCL %d.%d", &major, &minor) != 2 || major * 10 + minor < 12) {
    lastf("%s supports '%s'; clembed needs OpenCL 1.2", ctx->device_name, version);
    return CLEMBED_ERR_UNSUPPORTED;
  }

  /* Deferred-error slots: 0xFF bytes mean "no error". Initialised from host
   * memory when created, not by a command: nothing is enqueued on (or waits
   * for) a caller's queue, which may be held back by a user event. */
  memset(ctx->clean_slots, 0xFF, sizeof ctx->clean_slots);
  ctx->errbuf = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, CE_ERRBUF_BYTES,
                               ctx->clean_slots, &err);
  if (err != CL_SUCCESS) {
    ctx->errbuf = NULL;
    lastf("allocating the error record on %s: %s", ctx->device_name,
          clembed_status_string((clembed_status)err));
    return CLEMBED_ERR_OUT_OF_MEMORY;
  }
  clembed_status status = ce_program_set_acquire(ctx);
  if (status != CLEMBED_OK) lastf("%s", clembed_context_message(ctx));
  return status;
}

void clembed_context_destroy(clembed_context *ctx) {
  if (!ctx) return;
  /* A queue of its own is finished; a caller's queue is never finished (it
   * may hold the caller's work, or wait on a user event): only the context's
   * own commands are waited for, those that write into its host memory among
   * them. */
  if (ctx->queue && ctx->own_queue) clFinish(ctx->queue);
  tracked_wait_release(ctx);
  ce_kernels_release(ctx);
  ce_program_set_release(ctx);
  ce_freq_release(ctx);
  ce_slot_batches_free(ctx);
  if (ctx->errbuf) clReleaseMemObject(ctx->errbuf);
  if (ctx->queue) clReleaseCommandQueue(ctx->queue);
  if (ctx->context) clReleaseContext(ctx->context);
  free(ctx->message);
  free(ctx->tracked);
  free(ctx);
}

/* ------------------------------------------------------- deferred errors */

/* Records the first error among `used` slots read from the device in
 * ctx->deferred (if none is pending). */
static void slots_scan(clembed_context *ctx, const cl_uint *s, const ce_slot_info *info, size_t used) {
  for (size_t k = 0; k < used && ctx->deferred == CLEMBED_OK; k++) {
    const cl_uint *w = s + k * CE_SLOT_UINTS;
    const ce_slot_info *in = &info[k];
    /* r: [0] bad-id token, [1] bad-position token, [2,3] id, [4,5] sequence start */
    cl_uint r[6] = {w[0], w[1], w[2], w[3], w[4], w[5]};
    if (ctx->atom64) {
      uint64_t q[4];
      memcpy(q, w, sizeof q);
      r[0] = (cl_uint)(q[0] >> 32);
      r[1] = (cl_uint)(q[2] >> 32);
      r[2] = (cl_uint)q[0];
      r[3] = (cl_uint)q[1];
      r[4] = (cl_uint)q[2];
      r[5] = (cl_uint)q[3];
    }
    if (r[0] == 0xFFFFFFFFu && r[1] == 0xFFFFFFFFu) continue;
    ctx->deferred = CLEMBED_ERR_INDEX_OUT_OF_RANGE;
    if (r[0] <= r[1]) {
      int64_t v = (int64_t)((uint64_t)r[2] | ((uint64_t)r[3] << 32));
      unsigned long long rows = (unsigned long long)in->id_rows;
      if (in->wrap)
        snprintf(ctx->deferred_message, sizeof ctx->deferred_message, "%s: ids[%u] = %lld is outside [-%llu, %llu)",
                 in->op, r[0], (long long)v, rows, rows);
      else
        snprintf(ctx->deferred_message, sizeof ctx->deferred_message, "%s: ids[%u] = %lld is outside [0, %llu)",
                 in->op, r[0], (long long)v, rows);
      detail_fill(&ctx->deferred_detail, CLEMBED_ERR_INDEX_OUT_OF_RANGE, in->op, "ids", (int64_t)r[0], v);
    } else {
      uint64_t i = r[1];
      uint64_t first = in->position_offset;
      uint64_t inseq = in->seq_len ? i % in->seq_len : i;
      if (in->has_sequence_offsets) first = (uint64_t)r[4] | ((uint64_t)r[5] << 32);
      if ((int64_t)first < 0 && in->has_sequence_offsets) {
        uint64_t b = in->seq_len ? i / in->seq_len : 0;
        snprintf(ctx->deferred_message, sizeof ctx->deferred_message,
                 "%s: token %llu is at position %lld: sequence_offsets gives its sequence a negative start",
                 in->op, (unsigned long long)i, (long long)(first + inseq));
        detail_fill(&ctx->deferred_detail, CLEMBED_ERR_INDEX_OUT_OF_RANGE, in->op, "sequence_offsets", (int64_t)b,
                    (int64_t)first);
      } else if ((int64_t)first < 0) {
        snprintf(ctx->deferred_message, sizeof ctx->deferred_message,
                 "%s: token %llu is at position %llu: position_offset %llu is beyond 2^63 - 1", in->op,
                 (unsigned long long)i, (unsigned long long)(first + inseq), (unsigned long long)first);
        detail_fill(&ctx->deferred_detail, CLEMBED_ERR_INDEX_OUT_OF_RANGE, in->op, "positions", (int64_t)i,
                    (int64_t)(first + inseq));
      } else {
        snprintf(ctx->deferred_message, sizeof ctx->deferred_message,
                 "%s: token %llu is at position %llu, outside the position table [0, %llu)", in->op,
                 (unsigned long long)i, (unsigned long long)(first + inseq), (unsigned long long)in->pos_rows);
        detail_fill(&ctx->deferred_detail, CLEMBED_ERR_INDEX_OUT_OF_RANGE, in->op,
                    in->pos_arg ? in->pos_arg : "positions", (int64_t)i, (int64_t)(first + inseq));
      }
    }
  }
}

/* Enqueues, without waiting, a read of the used slots into `host` and their
 * reset (on an out-of-order queue fenced by barriers on both sides, so that no
 * later kernel reports into a slot before it is reset). */
static cl_int slots_read_and_reset(clembed_context *ctx, size_t used, cl_uint *host, int reset) {
  size_t bytes = used * CE_SLOT_UINTS * sizeof(cl_uint);
  cl_int err = CL_SUCCESS;
  cl_event last = NULL, ev = NULL;
  if (!ctx->in_order) err = clEnqueueBarrierWithWaitList(ctx->queue, 0, NULL, NULL);
  if (err == CL_SUCCESS && host) err = clEnqueueReadBuffer(ctx->queue, ctx->errbuf, CL_FALSE, 0, bytes, host, 0, NULL, &last);
  if (err == CL_SUCCESS && reset) {
    err = clEnqueueWriteBuffer(ctx->queue, ctx->errbuf, CL_FALSE, 0, bytes, ctx->clean_slots, 0, NULL, &ev);
    if (err == CL_SUCCESS && last) clReleaseEvent(last);
    if (err == CL_SUCCESS) last = ev;
  }
  if (err == CL_SUCCESS && reset && !ctx->in_order) err = clEnqueueBarrierWithWaitList(ctx->queue, 0, NULL, NULL);
  /* they read from and write into the context's memory: destroy waits for them */
  if (last && err == CL_SUCCESS) track(ctx, last, "clembed_finish");
  else if (last) clReleaseEvent(last);
  return err;
}

void ce_slot_batches_free(clembed_context *ctx) {
  for (ce_slot_batch *b = ctx->batches, *n; b; b = n) {
    n = b->next;
    free(b);
  }
  ctx->batches = NULL;
  ctx->batches_tail = NULL;
}

/* Waits for the work enqueued so far (one clFinish, after a read of the used
 * slots), records the first error of the batches put aside and of the slots in
 * ctx->deferred (if none is pending), and resets the slots if any changed. */
static clembed_status slots_drain(clembed_context *ctx) {
  size_t used = ctx->slots_used;
  cl_int err = used ? slots_read_and_reset(ctx, used, ctx->slot_host, 0) : CL_SUCCESS;
  if (err == CL_SUCCESS) err = clFinish(ctx->queue);
  if (err != CL_SUCCESS) return ce_cl_fail(ctx, err, "waiting for the context's work");
  for (ce_slot_batch *b = ctx->batches; b; b = b->next) slots_scan(ctx, b->host, b->info, b->used);
  ce_slot_batches_free(ctx);
  if (!used) return CLEMBED_OK;
  ctx->slots_used = 0;
  slots_scan(ctx, ctx->slot_host, ctx->slot_info, used);
  /* a slot changes only when its operation found an error: reset only then */
  if (memcmp(ctx->slot_host, ctx->clean_slots, used * CE_SLOT_UINTS * sizeof(cl_uint)) != 0 &&
      (err = slots_read_and_reset(ctx, used, NULL, 1)) != CL_SUCCESS)
    return ce_cl_fail(ctx, err, "resetting the error record");
  return CLEMBED_OK;
}

/* When every slot is taken: puts the slots' contents aside (a non-blocking
 * read into a batch the next drain scans first) and resets them, without
 * waiting, so an enqueue never blocks. */
static clembed_status slots_set_aside(clembed_context *ctx) {
  size_t used = ctx->slots_used;
  ce_slot_batch *b = malloc(sizeof *b);
  if (!b) return ce_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "error record: out of host memory");
  b->next = NULL;
  b->used = used;
  memcpy(b->info, ctx->slot_info, used * sizeof b->info[0]);
  cl_int err = slots_read_and_reset(ctx, used, b->host, 1);
  if (err != CL_SUCCESS) {
    clFinish(ctx->queue); /* a read into b may be pending */
    free(b);
    return ce_cl_fail(ctx, err, "setting the error record aside");
  }
  if (ctx->batches_tail) ctx->batches_tail->next = b;
  else ctx->batches = b;
  ctx->batches_tail = b;
  ctx->slots_used = 0;
  return CLEMBED_OK;
}

clembed_status ce_slot_reserve(clembed_context *ctx, const ce_slot_info *info, cl_uint *slot) {
  if (ctx->slots_used == CE_SLOTS) {
    clembed_status s = slots_set_aside(ctx);
    if (s != CLEMBED_OK) return s;
  }
  *slot = (cl_uint)ctx->slots_used;
  ctx->slot_info[ctx->slots_used++] = *info;
  return CLEMBED_OK;
}

clembed_status ce_collect(clembed_context *ctx) {
  clembed_status s = slots_drain(ctx);
  if (s != CLEMBED_OK) return s;
  s = tracked_collect(ctx);
  if (s != CLEMBED_OK) return s;
  s = ctx->deferred;
  if (s != CLEMBED_OK) {
    ce_set_message(ctx, "%s", ctx->deferred_message);
    ctx->detail = ctx->deferred_detail;
    ctx->deferred = CLEMBED_OK;
    ctx->deferred_message[0] = '\0';
  }
  return s;
}

clembed_status clembed_finish(clembed_context *ctx) {
  CE_ENTER(ctx, "clembed_finish");
  return ce_collect(ctx);
}

/* ------------------------------------------------------------ devices */

clembed_status clembed_devices(clembed_device_info *list, size_t capacity, size_t *count) {
  ce_device_entry *l = NULL;
  size_t n = 0;
  if (!count || (capacity && !list)) {
    lastf("clembed_devices: %s", !count ? "count is NULL" : "list is NULL with a non-zero capacity");
    return create_failed(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_devices", !count ? "count" : "list");
  }
  *count = 0;
  clembed_status status = list_devices(&l, &n);
  if (status != CLEMBED_OK) {
    lastf("clembed_devices: listing OpenCL platforms failed: %s", clembed_status_string(status));
    return create_failed(status, "clembed_devices", "");
  }
  const char *env = getenv("CLEMBED_DEVICE");
  long def = match_spec(l, n, env && *env ? env : NULL);
  for (size_t i = 0; i < n && i < capacity; i++) {
    clembed_device_info *d = &list[i];
    memset(d, 0, sizeof *d);
    snprintf(d->spec, sizeof d->spec, "%u:%u", l[i].pi, l[i].di);
    snprintf(d->platform, sizeof d->platform, "%s", l[i].pname);
    snprintf(d->name, sizeof d->name, "%s", l[i].dname);
    d->type = l[i].type;
    d->is_default = (long)i == def;
    cl_ulong g = 0, a = 0;
    clGetDeviceInfo(l[i].device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof g, &g, NULL);
    clGetDeviceInfo(l[i].device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof a, &a, NULL);
    d->global_mem_bytes = g;
    d->max_alloc_bytes = a;
  }
  *count = n;
  free(l);
  return CLEMBED_OK;
}
