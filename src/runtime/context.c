/* Creates and destroys a context; calls no operation (an operation's caches
 * are released through the function it registered with ce_cache_add). */
#define _POSIX_C_SOURCE 200809L
#include "runtime.h"
#include "../test_hooks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cl_command_queue clembed_context_queue(const clembed_context *ctx) { return ctx ? ctx->queue : NULL; }

const char *clembed_context_device_name(const clembed_context *ctx) { return ctx ? ctx->device_name : ""; }

const char *clembed_context_tuning(const clembed_context *ctx) { return ctx ? ctx->tuning_desc : ""; }

clembed_status clembed_tuning_file(char *path, size_t capacity) {
  char buf[4096];
  if (!path || !capacity) {
    ce_last_message("clembed_tuning_file: %s", path ? "capacity is 0" : "path is NULL");
    return ce_last_fail(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_tuning_file", path ? "capacity" : "path");
  }
  path[0] = 0;
  if (!ce_tuning_user_file(buf, sizeof buf)) {
    ce_last_message("clembed_tuning_file: no tuning file (CLEMBED_TUNING_FILE is empty or \"none\", or there is no "
                    "HOME)");
    return ce_last_fail(CLEMBED_ERR_UNSUPPORTED, "clembed_tuning_file", "CLEMBED_TUNING_FILE");
  }
  if (strlen(buf) >= capacity) {
    ce_last_message("clembed_tuning_file: the path takes %zu bytes, capacity is %zu", strlen(buf) + 1, capacity);
    return ce_last_fail(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_tuning_file", "capacity");
  }
  memcpy(path, buf, strlen(buf) + 1);
  return CLEMBED_OK;
}

int clembed__test_cpu_shapes(const clembed_context *ctx) { return ctx ? ctx->cpu_shapes : -1; }

clembed_status clembed_tuning_value(const clembed_context *ctx, const char *name, uint64_t *value) {
  int i = ctx && name ? ce_tuning_field(name) : -1;
  if (i < 0 || !value) {
    const char *arg = !ctx ? "ctx" : !name ? "name" : !value ? "value" : "name";
    if (ctx && name && value)
      ce_last_message("clembed_tuning_value: '%.100s' is not a tuning parameter (docs/tuning.md lists them)", name);
    else
      ce_last_message("clembed_tuning_value: %s is NULL", arg);
    return ce_last_fail(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_tuning_value", arg);
  }
  *value = ce_tuning_get(ctx->tune, i);
  return CLEMBED_OK;
}

void *ce_cache_find(const clembed_context *ctx, const void *key) {
  for (int i = 0; i < CE_CACHES; i++)
    if (ctx->caches[i].key == key) return ctx->caches[i].data;
  return NULL;
}

clembed_status ce_cache_add(clembed_context *ctx, const void *key, void *data, ce_release_fn release) {
  for (int i = 0; i < CE_CACHES; i++)
    if (!ctx->caches[i].key) {
      ctx->caches[i].key = key;
      ctx->caches[i].data = data;
      ctx->caches[i].release = release;
      return CLEMBED_OK;
    }
  return ce_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "internal: more than %d caches on a context", CE_CACHES);
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
  ce_last_message("%s", "");
  if (!out) {
    ce_last_message("clembed_context_create: ctx is NULL");
    return ce_last_fail(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_context_create", "ctx");
  }
  *out = NULL;
  const char *spec = device;
  if (!spec || !*spec) {
    const char *env = getenv("CLEMBED_DEVICE");
    if (env && *env) spec = env;
  }
  status = ce_list_devices(&list, &n);
  if (status != CLEMBED_OK) {
    ce_last_message("clembed_context_create: listing OpenCL platforms failed: %s", clembed_status_string(status));
    goto cleanup;
  }
  long idx = ce_match_spec(list, n, spec);
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
    if (n == 0) {
      char why[1536];
      ce_no_device_reason(why, sizeof why);
      ce_last_message("no OpenCL device found: %s", why);
    } else
      ce_last_message("no OpenCL device matches '%s'%s; the devices are:\n%s", spec ? spec : "",
            (spec == device) ? "" : " (from CLEMBED_DEVICE)", buf);
    status = CLEMBED_ERR_NO_DEVICE;
    goto cleanup;
  }
  ctx = context_alloc();
  if (!ctx) {
    ce_last_message("clembed_context_create: out of host memory");
    status = CLEMBED_ERR_OUT_OF_MEMORY;
    goto cleanup;
  }
  ctx->platform = list[idx].platform;
  ctx->device = list[idx].device;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ctx->platform, 0};
  ctx->context = clCreateContext(props, 1, &ctx->device, NULL, NULL, &err);
  if (err != CL_SUCCESS) {
    ce_last_message("clCreateContext on %s: %s", list[idx].name, clembed_status_string((clembed_status)err));
    status = (clembed_status)err;
    goto cleanup;
  }
  ctx->queue = clCreateCommandQueue(ctx->context, ctx->device, 0, &err);
  if (err != CL_SUCCESS) {
    ce_last_message("clCreateCommandQueue on %s: %s", list[idx].name, clembed_status_string((clembed_status)err));
    status = (clembed_status)err;
    goto cleanup;
  }
  ctx->own_queue = 1;
  status = context_init(ctx);
cleanup:
  free(list);
  if (status != CLEMBED_OK) {
    clembed_context_destroy(ctx);
    return ce_last_fail(status, "clembed_context_create", status == CLEMBED_ERR_NO_DEVICE ? "device" : "");
  }
  *out = ctx;
  return CLEMBED_OK;
}

clembed_status clembed_context_create_from_queue(cl_command_queue queue, clembed_context **out) {
  clembed_status status = CLEMBED_OK;
  ce_last_message("%s", "");
  const char *op = "clembed_context_create_from_queue";
  if (!out) {
    ce_last_message("clembed_context_create_from_queue: ctx is NULL");
    return ce_last_fail(CLEMBED_ERR_INVALID_ARGUMENT, op, "ctx");
  }
  *out = NULL;
  if (!queue) {
    ce_last_message("clembed_context_create_from_queue: queue is NULL");
    return ce_last_fail(CLEMBED_ERR_INVALID_ARGUMENT, op, "queue");
  }
  clembed_context *ctx = context_alloc();
  if (!ctx) {
    ce_last_message("clembed_context_create_from_queue: out of host memory");
    return ce_last_fail(CLEMBED_ERR_OUT_OF_MEMORY, op, "");
  }
  cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof ctx->context, &ctx->context, NULL);
  if (err == CL_SUCCESS)
    err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof ctx->device, &ctx->device, NULL);
  if (err == CL_SUCCESS)
    err = clGetDeviceInfo(ctx->device, CL_DEVICE_PLATFORM, sizeof ctx->platform, &ctx->platform, NULL);
  if (err != CL_SUCCESS) {
    ce_last_message("clembed_context_create_from_queue: the queue cannot be queried: %s",
          clembed_status_string((clembed_status)err));
    ctx->context = NULL;
    free(ctx);
    return ce_last_fail((clembed_status)err, op, "queue");
  }
  clRetainContext(ctx->context);
  clRetainCommandQueue(queue);
  ctx->queue = queue;
  status = context_init(ctx);
  if (status != CLEMBED_OK) {
    clembed_context_destroy(ctx);
    return ce_last_fail(status, op, "");
  }
  *out = ctx;
  return CLEMBED_OK;
}


static clembed_status context_init(clembed_context *ctx) {
  clembed_status status = ce_device_facts(ctx);
  if (status != CLEMBED_OK) return status;
  /* Deferred-error slots: 0xFF bytes mean "no error". Initialised from host
   * memory when created, not by a command: nothing is enqueued on (or waits
   * for) a caller's queue, which may be held back by a user event. */
  memset(ctx->clean_slots, 0xFF, sizeof ctx->clean_slots);
  status = ce_buffer(ctx, CE_BUFFER_COPY, sizeof ctx->clean_slots, ctx->clean_slots, "the error record", &ctx->errbuf);
  if (status == CLEMBED_OK) status = ce_program_set_acquire(ctx);
  if (status != CLEMBED_OK) ce_last_message("%s", clembed_context_message(ctx));
  return status;
}

void clembed_context_destroy(clembed_context *ctx) {
  if (!ctx) return;
  /* A queue of its own is finished; a caller's queue is never finished (it
   * may hold the caller's work, or wait on a user event): only the context's
   * own commands are waited for, those that write into its host memory among
   * them. */
  if (ctx->queue && ctx->own_queue) clFinish(ctx->queue);
  ce_tracked_wait_release(ctx);
  for (int i = CE_CACHES - 1; i >= 0; i--)
    if (ctx->caches[i].key && ctx->caches[i].release) ctx->caches[i].release(ctx, ctx->caches[i].data);
  ce_kernels_release(ctx);
  ce_program_set_release(ctx);
  ce_slot_batches_free(ctx);
  if (ctx->errbuf) clReleaseMemObject(ctx->errbuf);
  if (ctx->queue) clReleaseCommandQueue(ctx->queue);
  if (ctx->context) clReleaseContext(ctx->context);
  free(ctx->message);
  free(ctx->tracked);
  free(ctx);
}

