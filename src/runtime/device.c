/* Devices: enumeration, the device spec, and the facts a context keeps. */
#define _POSIX_C_SOURCE 200809L
#include "runtime.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Appends the devices of platform p to *out (n used of cap). */
static clembed_status list_platform(cl_platform_id plat, cl_uint p, ce_device_entry **out, size_t *n, size_t *cap) {
  char pname[256] = "";
  clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
  cl_uint nd = 0;
  if (clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0) return CLEMBED_OK;
  cl_device_id *devs = calloc(nd, sizeof *devs);
  if (!devs) return CLEMBED_ERR_OUT_OF_MEMORY;
  if (clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, nd, devs, NULL) != CL_SUCCESS) nd = 0;
  for (cl_uint d = 0; d < nd; d++) {
    if (*n == *cap) {
      size_t nc = *cap ? *cap * 2 : 8;
      ce_device_entry *g = realloc(*out, nc * sizeof *g);
      if (!g) {
        free(devs);
        return CLEMBED_ERR_OUT_OF_MEMORY;
      }
      *out = g;
      *cap = nc;
    }
    ce_device_entry *e = &(*out)[(*n)++];
    memset(e, 0, sizeof *e);
    e->platform = plat;
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

/* POCL's kernel cache directory (POCL lists no device when it cannot create
 * it) and the variable it comes from. */
static void pocl_cache_dir(char *dir, size_t len, const char **from) {
  const char *env = getenv("POCL_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (env && *env) {
    snprintf(dir, len, "%s", env);
    *from = "$POCL_CACHE_DIR";
  } else if (xdg && *xdg) {
    snprintf(dir, len, "%s/pocl/kcache", xdg);
    *from = "$XDG_CACHE_HOME";
  } else if (home && *home) {
    snprintf(dir, len, "%s/.cache/pocl/kcache", home);
    *from = "$HOME";
  } else {
    snprintf(dir, len, "/tmp/pocl/kcache");
    *from = "no $HOME";
  }
}

void ce_no_device_reason(char *buf, size_t len) {
  cl_uint np = 0;
  cl_platform_id *plats = NULL;
  cl_int err = clGetPlatformIDs(0, NULL, &np);
  if (err != CL_SUCCESS || np == 0 || !(plats = calloc(np, sizeof *plats)) ||
      clGetPlatformIDs(np, plats, NULL) != CL_SUCCESS) {
    free(plats);
    snprintf(buf, len, "no OpenCL platform is installed (for the CPU, on Debian: apt-get install pocl-opencl-icd)");
    return;
  }
  char names[1024] = "";
  size_t used = 0;
  cl_uint empty = 0;
  int pocl = 0, rusticl = 0;
  for (cl_uint p = 0; p < np; p++) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) == CL_SUCCESS && nd > 0) continue;
    char pname[128] = "";
    clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
    pocl |= contains_nocase(pname, "Portable Computing Language") || contains_nocase(pname, "pocl");
    rusticl |= contains_nocase(pname, "rusticl");
    int w = snprintf(names + used, sizeof names - used, "%s%s", empty ? ", " : "", pname);
    if (w > 0) used = used + (size_t)w < sizeof names ? used + (size_t)w : sizeof names - 1;
    empty++;
  }
  free(plats);
  int n = snprintf(buf, len, "%u platform%s (%s) list%s no device", empty, empty == 1 ? "" : "s", names,
                   empty == 1 ? "s" : "");
  if (n < 0 || (size_t)n >= len) return;
  if (pocl) {
    char dir[1024];
    const char *from;
    pocl_cache_dir(dir, sizeof dir, &from);
    int m = snprintf(buf + n, len - (size_t)n,
                     "; POCL lists none when it cannot create its kernel cache directory %s (from %s): set "
                     "POCL_CACHE_DIR to a writable directory",
                     dir, from);
    if (m < 0 || (size_t)(n + m) >= len) return;
    n += m;
  }
  if (rusticl)
    snprintf(buf + n, len - (size_t)n, "; Mesa's rusticl lists devices only when RUSTICL_ENABLE names a driver "
             "(RUSTICL_ENABLE=llvmpipe for the CPU)");
}

clembed_status ce_list_devices(ce_device_entry **list, size_t *count) {
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
  for (cl_uint p = 0; p < np; p++) CHECK(list_platform(plats[p], p, &out, &n, &cap));
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


static long pick_type(const ce_device_entry *l, size_t n, cl_device_type t) {
  for (size_t i = 0; i < n; i++)
    if (l[i].type & t) return (long)i;
  return -1;
}

long ce_match_spec(const ce_device_entry *l, size_t n, const char *spec) {
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

static void fill_info(clembed_device_info *d, const ce_device_entry *e, int is_default) {
  memset(d, 0, sizeof *d);
  snprintf(d->spec, sizeof d->spec, "%u:%u", e->pi, e->di);
  snprintf(d->platform, sizeof d->platform, "%s", e->pname);
  snprintf(d->name, sizeof d->name, "%s", e->dname);
  d->type = e->type;
  d->is_default = is_default;
  cl_ulong g = 0, a = 0;
  clGetDeviceInfo(e->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof g, &g, NULL);
  clGetDeviceInfo(e->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof a, &a, NULL);
  d->global_mem_bytes = g;
  d->max_alloc_bytes = a;
}

clembed_status clembed_devices(clembed_device_info *list, size_t capacity, size_t *count) {
  ce_device_entry *l = NULL;
  size_t n = 0;
  if (!count || (capacity && !list)) {
    ce_last_message("clembed_devices: %s", !count ? "count is NULL" : "list is NULL with a non-zero capacity");
    return ce_last_fail(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_devices", !count ? "count" : "list");
  }
  *count = 0;
  clembed_status status = ce_list_devices(&l, &n);
  if (status != CLEMBED_OK) {
    ce_last_message("clembed_devices: listing OpenCL platforms failed: %s", clembed_status_string(status));
    return ce_last_fail(status, "clembed_devices", "");
  }
  const char *env = getenv("CLEMBED_DEVICE");
  long def = ce_match_spec(l, n, env && *env ? env : NULL);
  for (size_t i = 0; i < n && i < capacity; i++) fill_info(&list[i], &l[i], (long)i == def);
  *count = n;
  free(l);
  return CLEMBED_OK;
}

/* Work-group limits, 64-bit atomics, the device's name and what the tuning
 * database matches. */
static void limits(clembed_context *ctx, cl_device_type type, ce_device_ident *id) {
  memset(id, 0, sizeof *id);
  clGetPlatformInfo(ctx->platform, CL_PLATFORM_NAME, sizeof id->platform - 1, id->platform, NULL);
  clGetDeviceInfo(ctx->device, CL_DEVICE_NAME, sizeof id->device - 1, id->device, NULL);
  clGetDeviceInfo(ctx->device, CL_DEVICE_VENDOR, sizeof id->vendor - 1, id->vendor, NULL);
  clGetDeviceInfo(ctx->device, CL_DRIVER_VERSION, sizeof id->driver - 1, id->driver, NULL);
  id->type = (type & CL_DEVICE_TYPE_CPU) ? "cpu" : (type & CL_DEVICE_TYPE_GPU) ? "gpu" : "accelerator";
  snprintf(ctx->device_name, sizeof ctx->device_name, "%.250s / %.250s", id->platform, id->device);
  clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof ctx->max_work_group, &ctx->max_work_group, NULL);
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
}

clembed_status ce_device_facts(clembed_context *ctx) {
  cl_device_type type = 0;
  clGetDeviceInfo(ctx->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  ce_device_ident id;
  limits(ctx, type, &id);
  char warn[1024];
  clembed_status s = ce_tuning_resolve(&id, &ctx->tune_table, ctx->tuning_desc, sizeof ctx->tuning_desc, warn,
                                       sizeof warn);
  if (s != CLEMBED_OK) return s;
  /* a damaged or foreign tuning file fails no context: the message says why it was left out */
  if (warn[0]) ce_set_message(ctx, "%s", warn);
  ctx->tune = &ctx->tune_table;
  ctx->cpu_shapes = ctx->tune->cpu_shapes;
  ctx->zero_temporaries = ctx->tune->zero_temporaries;
  ctx->prefetch = ctx->tune->prefetch;
  /* buffers over host memory that clembed frees when OpenCL deletes the buffer
   * (huge pages, a file's pages) where the entry says so and the device's
   * buffers are the host's memory */
  cl_bool unified = CL_FALSE;
  clGetDeviceInfo(ctx->device, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
  ctx->host_pages = ctx->tune->host_pages && unified;
  /* the largest buffer of a matrix: the device's largest allocation, or less */
  ctx->max_piece = ctx->max_alloc && ctx->max_alloc < SIZE_MAX ? (size_t)ctx->max_alloc : SIZE_MAX;
  const char *limit = getenv("CLEMBED_MAX_BUFFER_BYTES");
  if (limit && *limit) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(limit, &end, 10);
    if (errno || *end || v == 0 || limit[0] == '-' || limit[0] == '+') {
      ce_last_message("CLEMBED_MAX_BUFFER_BYTES is '%.100s'; it must be a number of bytes (a positive integer), or "
                      "unset", limit);
      return CLEMBED_ERR_INVALID_ARGUMENT;
    }
    if (v < ctx->max_piece) {
      ctx->max_piece = (size_t)v;
      ctx->max_piece_env = 1;
    }
  }
  if (clGetDeviceInfo(ctx->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof ctx->global_mem, &ctx->global_mem, NULL) !=
      CL_SUCCESS)
    ctx->global_mem = 0;
  if (clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_PARAMETER_SIZE, sizeof ctx->max_param, &ctx->max_param, NULL) !=
      CL_SUCCESS || ctx->max_param < 256)
    ctx->max_param = 256; /* the least OpenCL allows */
  if (clGetDeviceInfo(ctx->device, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof ctx->cache_bytes, &ctx->cache_bytes,
                      NULL) != CL_SUCCESS)
    ctx->cache_bytes = 0;
  cl_device_fp_config fp = 0;
  clGetDeviceInfo(ctx->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
  ctx->exact_div = (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
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
    ce_last_message("%s supports '%s'; clembed needs OpenCL 1.2", ctx->device_name, version);
    return CLEMBED_ERR_UNSUPPORTED;
  }
  return CLEMBED_OK;
}
