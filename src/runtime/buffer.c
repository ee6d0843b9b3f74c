/* The one allocator: every cl_mem clembed makes comes from ce_buffer. Matrices
 * and ids on POCL's CPU devices (ctx->host_pages, device.c) go on huge pages;
 * temporaries are created zeroed where a checker needs it; constants are
 * copied from the host when created (no command on the queue). */
#define _DEFAULT_SOURCE /* mmap's MAP_ANONYMOUS, madvise, MADV_HUGEPAGE */
#include "runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__linux__) && defined(MADV_HUGEPAGE)
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

/* A buffer of two huge pages or more in its own anonymous mapping, aligned to
 * a huge page and advised for transparent huge pages, used by the device in
 * place (CL_MEM_USE_HOST_PTR): a table gathered at random rows then costs far
 * fewer TLB misses. A mapping of its own (not malloc's heap) keeps the advice
 * from reaching other allocations after it is freed. NULL when any step
 * fails: the caller makes an ordinary buffer. */
static cl_mem huge_page_buffer(clembed_context *ctx, size_t bytes) {
  const size_t page = ctx->tune->huge_page_bytes;
  if (bytes < 2 * page) return NULL;
  size_t rounded = (bytes + page - 1) / page * page, length = rounded + page;
  if (rounded < bytes || length < rounded) return NULL;
  host_mapping *h = malloc(sizeof *h);
  if (!h) return NULL;
  void *p = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    free(h);
    return NULL;
  }
  /* the aligned part, and the slack before and after it given back */
  uintptr_t start = ((uintptr_t)p + page - 1) / page * page;
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

clembed_status ce_buffer(clembed_context *ctx, ce_buffer_kind kind, size_t bytes, const void *host,
                         const char *what, cl_mem *out) {
  clembed_status status = CLEMBED_OK;
  void *zero = NULL;
  cl_mem_flags flags = CL_MEM_READ_WRITE;
  *out = NULL;
  if (bytes == 0) bytes = 4;
  if (ctx->max_alloc && bytes > ctx->max_alloc)
    FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: %zu bytes exceed the device's largest allocation (%llu)", what, bytes,
         (unsigned long long)ctx->max_alloc);
  if (kind == CE_BUFFER_DATA && ctx->host_pages && (*out = huge_page_buffer(ctx, bytes))) return CLEMBED_OK;
  if (kind == CE_BUFFER_CONST || kind == CE_BUFFER_COPY) {
    flags = (kind == CE_BUFFER_CONST ? CL_MEM_READ_ONLY : CL_MEM_READ_WRITE) | CL_MEM_COPY_HOST_PTR;
  } else if (kind == CE_BUFFER_TEMP && ctx->zero_temporaries) {
    if (!(zero = calloc(1, bytes))) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    flags |= CL_MEM_COPY_HOST_PTR;
    host = zero;
  } else {
    host = NULL;
  }
  cl_int err;
  *out = clCreateBuffer(ctx->context, flags, bytes, (void *)host, &err);
  if (err != CL_SUCCESS) {
    *out = NULL;
    char what_size[160];
    snprintf(what_size, sizeof what_size, "%s: allocating %zu bytes", what, bytes);
    status = ce_cl_fail(ctx, err, what_size); /* allocation failures become CLEMBED_ERR_OUT_OF_MEMORY */
  }
cleanup:
  free(zero);
  return status;
}
