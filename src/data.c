/* Matrices and ids: create, write, read, dtype conversion, argument checks. */
#define _DEFAULT_SOURCE /* mmap's MAP_ANONYMOUS, madvise, MADV_HUGEPAGE */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* -------------------------------------------------------- dtype conversion */

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t ce_f32_to_f16(float f) {
  uint32_t x = f2u(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) /* inf or nan (quiet, keeping the top payload bits) */
    return (uint16_t)(sign | 0x7C00u | (ax > 0x7F800000u ? (0x200u | ((ax >> 13) & 0x3FFu)) : 0));
  if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* rounds to >= 65520: inf */
  if (ax < 0x38800000u) {                                   /* below 2^-14: subnormal half or zero */
    if (ax < 0x33000000u) return (uint16_t)sign;            /* below 2^-25: rounds to 0 */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((ax - 0x38000000u) >> 13); /* rebias exponent 127 -> 15 */
  uint32_t rem = ax & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

float ce_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return u2f(sign | 0x7F800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return u2f(sign);
    float v = ldexpf((float)m, -24);
    return sign ? -v : v;
  }
  return u2f(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t ce_f32_to_bf16(float f) {
  uint32_t x = f2u(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
  x += 0x7FFFu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

float ce_bf16_to_f32(uint16_t b) { return u2f((uint32_t)b << 16); }

size_t clembed_dtype_size(clembed_dtype dtype) {
  switch (dtype) {
    case CLEMBED_F32: return 4;
    case CLEMBED_F16:
    case CLEMBED_BF16: return 2;
  }
  return 0;
}

static float load_as_f32(const void *p, size_t i, clembed_dtype t) {
  switch (t) {
    case CLEMBED_F32: return ((const float *)p)[i];
    case CLEMBED_F16: return ce_f16_to_f32(((const uint16_t *)p)[i]);
    case CLEMBED_BF16: return ce_bf16_to_f32(((const uint16_t *)p)[i]);
  }
  return 0.0f;
}

static void store_from_f32(void *p, size_t i, clembed_dtype t, float v) {
  switch (t) {
    case CLEMBED_F32: ((float *)p)[i] = v; break;
    case CLEMBED_F16: ((uint16_t *)p)[i] = ce_f32_to_f16(v); break;
    case CLEMBED_BF16: ((uint16_t *)p)[i] = ce_f32_to_bf16(v); break;
  }
}

static void convert(void *dst, clembed_dtype dt, const void *src, clembed_dtype st, size_t n) {
  if (dt == st) {
    memcpy(dst, src, n * clembed_dtype_size(dt));
    return;
  }
  for (size_t i = 0; i < n; i++) store_from_f32(dst, i, dt, load_as_f32(src, i, st));
}

/* ------------------------------------------------------------------- checks */

int ce_mul_overflows(size_t a, size_t b, size_t *out) {
  if (a && b > SIZE_MAX / a) return 1;
  *out = a * b;
  return 0;
}

int ce_add_overflows(size_t a, size_t b, size_t *out) {
  if (b > SIZE_MAX - a) return 1;
  *out = a + b;
  return 0;
}

clembed_status ce_check_events(clembed_context *ctx, cl_uint n, const cl_event *list) {
  const char *arg = "event_wait_list";
  if (n > 0 && !list)
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, arg, -1, (int64_t)n,
                       "event_wait_list is NULL but num_events_in_wait_list is %u", (unsigned)n);
  if (n == 0 && list)
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, arg, -1, 0,
                       "event_wait_list is not NULL but num_events_in_wait_list is 0");
  for (cl_uint i = 0; i < n; i++) {
    if (!list[i])
      return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, arg, (int64_t)i, 0, "event_wait_list[%u] is NULL",
                         (unsigned)i);
    cl_context c = NULL;
    cl_int err = clGetEventInfo(list[i], CL_EVENT_CONTEXT, sizeof c, &c, NULL);
    if (err != CL_SUCCESS)
      return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, arg, (int64_t)i, 0,
                         "event_wait_list[%u] is not a valid event (%s)", (unsigned)i,
                         clembed_status_string((clembed_status)err));
    if (c != ctx->context)
      return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, arg, (int64_t)i, 0,
                         "event_wait_list[%u] belongs to another cl_context than the context's", (unsigned)i);
  }
  return CLEMBED_OK;
}

/* The argument's name in `what` ("clembed_matrix_write: m" names "m"). */
static const char *arg_name(const char *what) {
  const char *a = what;
  for (const char *p = what; *p; p++)
    if (p[0] == ':' && p[1] == ' ') a = p + 2;
  return a;
}

#define ARG_FAIL(value, ...) \
  ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, arg_name(what), -1, (int64_t)(value), __VA_ARGS__)

static clembed_status buffer_size(clembed_context *ctx, cl_mem b, const char *what, size_t *size) {
  cl_int err = clGetMemObjectInfo(b, CL_MEM_SIZE, sizeof *size, size, NULL);
  if (err != CL_SUCCESS)
    return ARG_FAIL(0, "%s: its buffer is not a valid cl_mem (%s)", what, clembed_status_string((clembed_status)err));
  cl_context c = NULL;
  err = clGetMemObjectInfo(b, CL_MEM_CONTEXT, sizeof c, &c, NULL);
  if (err != CL_SUCCESS || c != ctx->context)
    return ARG_FAIL(0, "%s: its buffer belongs to another cl_context than the context's", what);
  return CLEMBED_OK;
}

clembed_status ce_check_matrix(clembed_context *ctx, const clembed_matrix *m, const char *what, size_t *ld) {
  if (!m) return ARG_FAIL(0, "%s is NULL", what);
  if (!m->buffer) return ARG_FAIL(0, "%s has a NULL buffer", what);
  size_t es = clembed_dtype_size(m->dtype);
  if (!es) return ARG_FAIL(m->dtype, "%s has an unknown dtype %d", what, (int)m->dtype);
  size_t l = m->ld ? m->ld : m->cols;
  if (l < m->cols) return ARG_FAIL(l, "%s: ld %zu is less than cols %zu", what, l, m->cols);
  size_t size;
  clembed_status s = buffer_size(ctx, m->buffer, what, &size);
  if (s != CLEMBED_OK) return s;
  size_t end = m->offset, t;
  if (m->rows && m->cols) {
    if (ce_mul_overflows(m->rows - 1, l, &t) || ce_add_overflows(end, t, &end) ||
        ce_add_overflows(end, m->cols, &end))
      return ARG_FAIL(m->offset, "%s: offset %zu + (rows %zu - 1) * ld %zu + cols %zu overflows size_t", what,
                      m->offset, m->rows, l, m->cols);
  }
  if (ce_mul_overflows(end, es, &t)) return ARG_FAIL(0, "%s: its extent in bytes overflows size_t", what);
  if (t > size)
    return ARG_FAIL(t, "%s: %zu x %zu (offset %zu, ld %zu) needs %zu bytes but its buffer holds %zu", what, m->rows,
                    m->cols, m->offset, l, t, size);
  if (ld) *ld = l;
  return CLEMBED_OK;
}

static size_t index_size(clembed_index_type t) {
  return t == CLEMBED_I32 ? 4 : t == CLEMBED_I64 ? 8 : 0;
}

clembed_status ce_check_ids(clembed_context *ctx, const clembed_ids *ids, const char *what) {
  if (!ids) return ARG_FAIL(0, "%s is NULL", what);
  size_t es = index_size(ids->type);
  if (!es) return ARG_FAIL(ids->type, "%s has an unknown index type %d", what, (int)ids->type);
  if (!ids->buffer) {
    if (ids->count == 0) return CLEMBED_OK;
    return ARG_FAIL(0, "%s has a NULL buffer", what);
  }
  size_t size, end, bytes;
  clembed_status s = buffer_size(ctx, ids->buffer, what, &size);
  if (s != CLEMBED_OK) return s;
  if (ce_add_overflows(ids->offset, ids->count, &end) || ce_mul_overflows(end, es, &bytes))
    return ARG_FAIL(ids->count, "%s: offset %zu + count %zu overflows size_t", what, ids->offset, ids->count);
  if (bytes > size)
    return ARG_FAIL(ids->count, "%s: offset %zu + count %zu ids need %zu bytes but its buffer holds %zu", what,
                    ids->offset, ids->count, bytes, size);
  return CLEMBED_OK;
}

/* ---------------------------------------------------------------- matrices */

#if defined(__linux__) && defined(MADV_HUGEPAGE)
#define CE_HUGE_PAGE ((size_t)2 << 20)
typedef struct host_mapping {
  void *base;
  size_t length;
} host_mapping;

/* Frees a huge-page buffer's host memory when OpenCL deletes the buffer (the
 * library must stay loaded while a buffer it made is alive, as with any
 * callback). */
static void CL_CALLBACK unmap_host_memory(cl_mem m, void *user) {
  (void)m;
  host_mapping *h = user;
  munmap(h->base, h->length);
  free(h);
}

/* On a CPU device that shares the host's memory: a buffer of 4 MiB or more in
 * its own anonymous mapping, aligned to 2 MiB and advised for transparent huge
 * pages, used by the device in place (CL_MEM_USE_HOST_PTR). A table gathered
 * at random rows then costs far fewer TLB misses (measured on POCL: 1.13x on
 * the lookup, 1.2x on the backward). A mapping of its own (not malloc's heap)
 * keeps the advice from reaching other allocations after it is freed. NULL
 * when any step fails: the caller makes an ordinary buffer. */
static cl_mem huge_page_buffer(clembed_context *ctx, size_t bytes) {
  if (bytes < 2 * CE_HUGE_PAGE) return NULL;
  size_t rounded = (bytes + CE_HUGE_PAGE - 1) / CE_HUGE_PAGE * CE_HUGE_PAGE, length = rounded + CE_HUGE_PAGE;
  if (rounded < bytes || length < rounded) return NULL;
  host_mapping *h = malloc(sizeof *h);
  if (!h) return NULL;
  void *p = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    free(h);
    return NULL;
  }
  /* the aligned part, and the slack before and after it given back */
  uintptr_t start = ((uintptr_t)p + CE_HUGE_PAGE - 1) / CE_HUGE_PAGE * CE_HUGE_PAGE;
  size_t head = (size_t)(start - (uintptr_t)p), tail = length - head - rounded;
  if (head) munmap(p, head);
  if (tail) munmap((char *)start + rounded, tail);
  h->base = (void *)start;
  h->length = rounded;
  madvise(h->base, rounded, MADV_HUGEPAGE); /* advice only: without it the pages are ordinary */
  cl_int err;
  cl_mem b = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, h->base, &err);
  if (err == CL_SUCCESS && clSetMemObjectDestructorCallback(b, unmap_host_memory, h) == CL_SUCCESS) return b;
  if (err == CL_SUCCESS) clReleaseMemObject(b); /* the memory could not be freed with the buffer: not used */
  munmap(h->base, h->length);
  free(h);
  return NULL;
}
#else
static cl_mem huge_page_buffer(clembed_context *ctx, size_t bytes) {
  (void)ctx;
  (void)bytes;
  return NULL;
}
#endif

static clembed_status new_buffer(clembed_context *ctx, size_t bytes, const char *what, cl_mem *out) {
  if (bytes == 0) bytes = 4;
  if (ctx->max_alloc && bytes > ctx->max_alloc)
    return ce_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "%s: %zu bytes exceed the device's largest allocation (%llu)",
                   what, bytes, (unsigned long long)ctx->max_alloc);
  cl_int err;
  *out = ctx->host_pages ? huge_page_buffer(ctx, bytes) : NULL;
  if (*out) return CLEMBED_OK;
  *out = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) {
    *out = NULL;
    char what_size[160];
    snprintf(what_size, sizeof what_size, "%s: allocating %zu bytes", what, bytes);
    return ce_cl_fail(ctx, err, what_size); /* allocation failures become CLEMBED_ERR_OUT_OF_MEMORY */
  }
  return CLEMBED_OK;
}

clembed_status clembed_matrix_create(clembed_context *ctx, size_t rows, size_t cols, clembed_dtype dtype,
                                     clembed_matrix *m) {
  clembed_status status = CLEMBED_OK;
  cl_mem b = NULL;
  CE_ENTER(ctx, "clembed_matrix_create");
  if (!m) FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_matrix_create: m is NULL");
  size_t es = clembed_dtype_size(dtype), n, bytes;
  if (!es) FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_matrix_create: unknown dtype %d", (int)dtype);
  if (ce_mul_overflows(rows, cols, &n) || ce_mul_overflows(n, es, &bytes))
    FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_matrix_create: %zu x %zu x %zu bytes overflows size_t", rows, cols,
         es);
  /* rounded up to whole words, zeroed by a kernel */
  size_t words = bytes / 4 + (bytes % 4 != 0);
  if (words == 0) words = 1;
  CHECK(new_buffer(ctx, words * 4, "clembed_matrix_create", &b));
  cl_kernel k;
  cl_ulong nw = words;
  cl_event ev = NULL;
  CHECK(ce_kernel(ctx, CE_FAMILY_UTIL, "", "ce_zero", &k));
  CHECK(ce_set_args(ctx, k, "ce_zero", CE_ARG(b), CE_ARG(nw), CE_END));
  CHECK(ce_enqueue_1d(ctx, k, "ce_zero", words, 0, 0, NULL, &ev));
  cl_int err = clWaitForEvents(1, &ev);
  clReleaseEvent(ev);
  if (err != CL_SUCCESS) {
    status = ce_cl_fail(ctx, err, "clembed_matrix_create: zero-filling");
    goto cleanup;
  }
  m->buffer = b;
  m->offset = 0;
  m->rows = rows;
  m->cols = cols;
  m->ld = cols;
  m->dtype = dtype;
  b = NULL;
cleanup:
  if (b) clReleaseMemObject(b);
  return status;
}

/* Blocking calls wait for the work enqueued before them: implicit on an
 * in-order queue, a barrier on an out-of-order one. */
static cl_int after_earlier_work(clembed_context *ctx) {
  return ctx->in_order ? CL_SUCCESS : clEnqueueBarrierWithWaitList(ctx->queue, 0, NULL, NULL);
}

/* Copies between a dense host block (in the matrix's dtype) and the matrix. */
static cl_int transfer(clembed_context *ctx, const clembed_matrix *m, size_t ld, void *host, int write) {
  size_t es = clembed_dtype_size(m->dtype);
  cl_int berr = after_earlier_work(ctx);
  if (berr != CL_SUCCESS) return berr;
  if (m->rows == 0 || m->cols == 0) return CL_SUCCESS;
  if (ld == m->cols) {
    size_t bytes = m->rows * m->cols * es;
    return write ? clEnqueueWriteBuffer(ctx->queue, m->buffer, CL_TRUE, m->offset * es, bytes, host, 0, NULL, NULL)
                 : clEnqueueReadBuffer(ctx->queue, m->buffer, CL_TRUE, m->offset * es, bytes, host, 0, NULL, NULL);
  }
  size_t borigin[3] = {m->offset * es, 0, 0}, horigin[3] = {0, 0, 0};
  size_t region[3] = {m->cols * es, m->rows, 1};
  return write ? clEnqueueWriteBufferRect(ctx->queue, m->buffer, CL_TRUE, borigin, horigin, region, ld * es, 0,
                                          m->cols * es, 0, host, 0, NULL, NULL)
               : clEnqueueReadBufferRect(ctx->queue, m->buffer, CL_TRUE, borigin, horigin, region, ld * es, 0,
                                         m->cols * es, 0, host, 0, NULL, NULL);
}

clembed_status clembed_matrix_write(clembed_context *ctx, clembed_matrix *m, const void *host,
                                    clembed_dtype host_dtype) {
  clembed_status status = CLEMBED_OK;
  void *tmp = NULL;
  size_t ld = 0;
  CE_ENTER(ctx, "clembed_matrix_write");
  CHECK(ce_check_matrix(ctx, m, "clembed_matrix_write: m", &ld));
  if (!clembed_dtype_size(host_dtype))
    FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_matrix_write: unknown host dtype %d", (int)host_dtype);
  size_t n = m->rows * m->cols;
  if (n && !host) FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_matrix_write: host is NULL");
  const void *src = host;
  if (host_dtype != m->dtype && n) {
    tmp = malloc(n * clembed_dtype_size(m->dtype));
    if (!tmp) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "clembed_matrix_write: out of host memory");
    convert(tmp, m->dtype, host, host_dtype, n);
    src = tmp;
  }
  cl_int err = transfer(ctx, m, ld, (void *)src, 1);
  if (err != CL_SUCCESS) status = ce_cl_fail(ctx, err, "clembed_matrix_write");
cleanup:
  free(tmp);
  return status;
}

clembed_status clembed_matrix_read(clembed_context *ctx, const clembed_matrix *m, void *host,
                                   clembed_dtype host_dtype) {
  clembed_status status = CLEMBED_OK;
  void *tmp = NULL;
  size_t ld = 0;
  CE_ENTER(ctx, "clembed_matrix_read");
  CHECK(ce_check_matrix(ctx, m, "clembed_matrix_read: m", &ld));
  if (!clembed_dtype_size(host_dtype))
    FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_matrix_read: unknown host dtype %d", (int)host_dtype);
  size_t n = m->rows * m->cols;
  if (n && !host) FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_matrix_read: host is NULL");
  void *dst = host;
  if (host_dtype != m->dtype && n) {
    tmp = malloc(n * clembed_dtype_size(m->dtype));
    if (!tmp) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "clembed_matrix_read: out of host memory");
    dst = tmp;
  }
  cl_int err = transfer(ctx, m, ld, dst, 0);
  if (err != CL_SUCCESS) {
    status = ce_cl_fail(ctx, err, "clembed_matrix_read");
    goto cleanup;
  }
  if (tmp) convert(host, host_dtype, tmp, m->dtype, n);
  status = ce_collect(ctx);
cleanup:
  free(tmp);
  return status;
}

void clembed_matrix_release(clembed_matrix *m) {
  if (!m) return;
  if (m->buffer) clReleaseMemObject(m->buffer);
  memset(m, 0, sizeof *m);
}

/* --------------------------------------------------------------------- ids */

clembed_status clembed_ids_create(clembed_context *ctx, const void *host, size_t count, clembed_index_type type,
                                  clembed_ids *ids) {
  clembed_status status = CLEMBED_OK;
  cl_mem b = NULL;
  CE_ENTER(ctx, "clembed_ids_create");
  if (!ids) FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_ids_create: ids is NULL");
  size_t es = index_size(type), bytes;
  if (!es) FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_ids_create: unknown index type %d", (int)type);
  if (count && !host) FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_ids_create: host is NULL with count %zu", count);
  if (ce_mul_overflows(count, es, &bytes))
    FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_ids_create: count %zu overflows size_t", count);
  CHECK(new_buffer(ctx, bytes, "clembed_ids_create", &b));
  if (bytes) {
    cl_int err = clEnqueueWriteBuffer(ctx->queue, b, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
      status = ce_cl_fail(ctx, err, "clembed_ids_create: writing");
      goto cleanup;
    }
  }
  ids->buffer = b;
  ids->offset = 0;
  ids->count = count;
  ids->type = type;
  b = NULL;
cleanup:
  if (b) clReleaseMemObject(b);
  return status;
}

clembed_status clembed_ids_read(clembed_context *ctx, const clembed_ids *ids, void *host) {
  clembed_status status = CLEMBED_OK;
  CE_ENTER(ctx, "clembed_ids_read");
  CHECK(ce_check_ids(ctx, ids, "clembed_ids_read: ids"));
  if (ids->count && !host) FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_ids_read: host is NULL");
  if (ids->count) {
    size_t es = index_size(ids->type);
    cl_int err = after_earlier_work(ctx);
    if (err == CL_SUCCESS)
      err = clEnqueueReadBuffer(ctx->queue, ids->buffer, CL_TRUE, ids->offset * es, ids->count * es, host, 0,
                                     NULL, NULL);
    if (err != CL_SUCCESS) {
      status = ce_cl_fail(ctx, err, "clembed_ids_read");
      goto cleanup;
    }
  }
  status = ce_collect(ctx);
cleanup:
  return status;
}

void clembed_ids_release(clembed_ids *ids) {
  if (!ids) return;
  if (ids->buffer) clReleaseMemObject(ids->buffer);
  memset(ids, 0, sizeof *ids);
}
