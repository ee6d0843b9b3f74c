/* Transfers: matrices and ids created, written, read and released. */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- matrices */

clembed_status clembed_matrix_create(clembed_context *ctx, size_t rows, size_t cols, clembed_dtype dtype,
                                     clembed_matrix *m) {
  clembed_status status = CLEMBED_OK;
  cl_mem b = NULL;
  CE_ENTER(ctx, "clembed_matrix_create");
  if (!m) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "m", -1, 0, "clembed_matrix_create: m is NULL");
  size_t es = clembed_dtype_size(dtype), n, bytes;
  if (!es) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "dtype", -1, (int64_t)dtype, "clembed_matrix_create: unknown dtype %d", (int)dtype);
  if (ce_mul_overflows(rows, cols, &n) || ce_mul_overflows(n, es, &bytes))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "rows", -1, (int64_t)rows, "clembed_matrix_create: %zu x %zu x %zu bytes overflows size_t", rows, cols,
         es);
  /* rounded up to whole words, zeroed by a kernel */
  size_t words = bytes / 4 + (bytes % 4 != 0);
  if (words == 0) words = 1;
  CHECK(ce_buffer(ctx, CE_BUFFER_DATA, words * 4, NULL, "clembed_matrix_create", &b));
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

/* Copies between a dense host block (in the matrix's dtype) and the matrix. */
static cl_int transfer(clembed_context *ctx, const clembed_matrix *m, size_t ld, void *host, int write) {
  size_t es = clembed_dtype_size(m->dtype);
  cl_int berr = ce_after_earlier_work(ctx);
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
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "host_dtype", -1, (int64_t)host_dtype, "clembed_matrix_write: unknown host dtype %d", (int)host_dtype);
  size_t n = m->rows * m->cols;
  if (n && !host) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "host", -1, 0, "clembed_matrix_write: host is NULL");
  const void *src = host;
  if (host_dtype != m->dtype && n) {
    tmp = malloc(n * clembed_dtype_size(m->dtype));
    if (!tmp) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "clembed_matrix_write: out of host memory");
    ce_convert(tmp, m->dtype, host, host_dtype, n);
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
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "host_dtype", -1, (int64_t)host_dtype, "clembed_matrix_read: unknown host dtype %d", (int)host_dtype);
  size_t n = m->rows * m->cols;
  if (n && !host) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "host", -1, 0, "clembed_matrix_read: host is NULL");
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
  if (tmp) ce_convert(host, host_dtype, tmp, m->dtype, n);
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
  if (!ids) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "ids", -1, 0, "clembed_ids_create: ids is NULL");
  size_t es = ce_index_size(type), bytes;
  if (!es) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "type", -1, (int64_t)type, "clembed_ids_create: unknown index type %d", (int)type);
  if (count && !host) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "host", -1, 0, "clembed_ids_create: host is NULL with count %zu", count);
  if (ce_mul_overflows(count, es, &bytes))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "count", -1, (int64_t)count, "clembed_ids_create: count %zu overflows size_t", count);
  CHECK(ce_buffer(ctx, CE_BUFFER_DATA, bytes, NULL, "clembed_ids_create", &b));
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
  if (ids->count && !host) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "host", -1, 0, "clembed_ids_read: host is NULL");
  if (ids->count) {
    size_t es = ce_index_size(ids->type);
    cl_int err = ce_after_earlier_work(ctx);
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
