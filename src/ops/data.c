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
  size_t qk = clembed_dtype_block_values(dtype), bytes;
  if (!qk)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "dtype", -1, (int64_t)dtype, "clembed_matrix_create: unknown dtype %d",
             (int)dtype);
  if (cols % qk)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "cols", -1, (int64_t)cols,
             "clembed_matrix_create: cols %zu is not a multiple of the %s block size %zu", cols, ce_dtype_name(dtype),
             qk);
  size_t row_bytes = clembed_dtype_row_bytes(dtype, cols);
  if ((cols && !row_bytes) || ce_mul_overflows(rows, row_bytes, &bytes))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "rows", -1, (int64_t)rows,
             "clembed_matrix_create: %zu x %zu %s overflows size_t", rows, cols, ce_dtype_name(dtype));
  /* rounded up to whole words, zeroed by a kernel that is enqueued, not
   * waited for: creating a matrix on a queue gated by a caller's user event
   * must not block. The queue orders it before later commands (an in-order
   * queue by itself, an out-of-order one by a barrier on the fill), and the
   * fill is tracked, so clembed_finish reports it if it fails. */
  size_t words = bytes / 4 + (bytes % 4 != 0);
  if (words == 0) words = 1;
  CHECK(ce_buffer(ctx, CE_BUFFER_DATA, words * 4, NULL, "clembed_matrix_create", &b));
  cl_kernel k;
  cl_ulong nw = words;
  cl_event ev = NULL;
  CHECK(ce_kernel(ctx, CE_FAMILY_UTIL, "", "ce_zero", &k));
  CHECK(ce_set_args(ctx, k, "ce_zero", CE_ARG(b), CE_ARG(nw), CE_END));
  CHECK(ce_enqueue_1d(ctx, k, "ce_zero", words, 0, 0, NULL, &ev));
  cl_int err = ctx->in_order ? CL_SUCCESS : clEnqueueBarrierWithWaitList(ctx->queue, 1, &ev, NULL);
  CHECK(ce_track_end(ctx, CLEMBED_OK, NULL, &ev)); /* the context keeps ev */
  if (err != CL_SUCCESS) {
    status = ce_cl_fail(ctx, err, "clembed_matrix_create: ordering the zero fill");
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

/* Copies between a dense host block (in the matrix's dtype: elements, or rows
 * of blocks) and the matrix. */
static cl_int transfer(clembed_context *ctx, const clembed_matrix *m, size_t ld, void *host, int write) {
  cl_int berr = ce_after_earlier_work(ctx);
  if (berr != CL_SUCCESS) return berr;
  if (m->rows == 0 || m->cols == 0) return CL_SUCCESS;
  /* in bytes (values / block size * block bytes for the block types) */
  size_t off = clembed_dtype_row_bytes(m->dtype, m->offset), rb = clembed_dtype_row_bytes(m->dtype, m->cols);
  size_t lb = clembed_dtype_row_bytes(m->dtype, ld);
  if (ld == m->cols) {
    size_t bytes = m->rows * rb;
    return write ? clEnqueueWriteBuffer(ctx->queue, m->buffer, CL_TRUE, off, bytes, host, 0, NULL, NULL)
                 : clEnqueueReadBuffer(ctx->queue, m->buffer, CL_TRUE, off, bytes, host, 0, NULL, NULL);
  }
  size_t borigin[3] = {off, 0, 0}, horigin[3] = {0, 0, 0};
  size_t region[3] = {rb, m->rows, 1};
  return write ? clEnqueueWriteBufferRect(ctx->queue, m->buffer, CL_TRUE, borigin, horigin, region, lb, 0, rb, 0,
                                          host, 0, NULL, NULL)
               : clEnqueueReadBufferRect(ctx->queue, m->buffer, CL_TRUE, borigin, horigin, region, lb, 0, rb, 0, host,
                                         0, NULL, NULL);
}

/* The host side of a write (or a read) between `host_dtype` and m's dtype. The
 * conversions there are: among the float dtypes; float values into Q8_0 or
 * Q4_0 blocks (ggml's reference quantizers); blocks into float values (ggml's
 * dequantizers). *temp_bytes: the size of the matrix-side copy (0 when host and
 * matrix share the dtype). */
static clembed_status plan_transfer(clembed_context *ctx, const char *fn, const clembed_matrix *m,
                                    clembed_dtype host_dtype, int write, size_t *temp_bytes) {
  size_t hqk = clembed_dtype_block_values(host_dtype);
  *temp_bytes = 0;
  if (!hqk)
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "host_dtype", -1, (int64_t)host_dtype,
                       "%s: unknown host dtype %d", fn, (int)host_dtype);
  if (host_dtype == m->dtype) return CLEMBED_OK;
  clembed_dtype into = write ? m->dtype : host_dtype; /* the side the values are converted into */
  if (ce_dtype_is_block(host_dtype) && ce_dtype_is_block(m->dtype))
    return ce_fail_arg(ctx, CLEMBED_ERR_UNSUPPORTED, NULL, "host_dtype", -1, (int64_t)host_dtype,
                       "%s: a %s matrix and %s host blocks: there is no conversion between block types", fn,
                       ce_dtype_name(m->dtype), ce_dtype_name(host_dtype));
  if (ce_dtype_is_block(into) && into != CLEMBED_Q8_0 && into != CLEMBED_Q4_0)
    return ce_fail_arg(ctx, CLEMBED_ERR_UNSUPPORTED, NULL, write ? "m" : "host_dtype", -1, (int64_t)into,
                       "%s: float values cannot be quantized into %s here (Q8_0 and Q4_0 only, as ggml's reference "
                       "quantizers); write %s blocks", fn, ce_dtype_name(into), ce_dtype_name(into));
  if (m->cols % hqk)
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "host_dtype", -1, (int64_t)host_dtype,
                       "%s: host %s blocks need cols a multiple of %zu, not %zu", fn, ce_dtype_name(host_dtype), hqk,
                       m->cols);
  if (ce_mul_overflows(m->rows, clembed_dtype_row_bytes(m->dtype, m->cols), temp_bytes))
    return ce_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "%s: %zu x %zu overflows size_t", fn, m->rows, m->cols);
  return CLEMBED_OK;
}

clembed_status clembed_matrix_write(clembed_context *ctx, clembed_matrix *m, const void *host,
                                    clembed_dtype host_dtype) {
  clembed_status status = CLEMBED_OK;
  void *tmp = NULL;
  size_t ld = 0, temp_bytes;
  CE_ENTER(ctx, "clembed_matrix_write");
  CHECK(ce_check_table(ctx, m, "clembed_matrix_write: m", &ld));
  CHECK(plan_transfer(ctx, "clembed_matrix_write", m, host_dtype, 1, &temp_bytes));
  size_t n = m->rows * m->cols;
  if (n && !host) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "host", -1, 0, "clembed_matrix_write: host is NULL");
  const void *src = host;
  if (temp_bytes && n) {
    tmp = malloc(temp_bytes);
    if (!tmp || ce_convert_values(tmp, m->dtype, host, host_dtype, n) != 0)
      FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "clembed_matrix_write: out of host memory");
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
  size_t ld = 0, temp_bytes;
  CE_ENTER(ctx, "clembed_matrix_read");
  CHECK(ce_check_table(ctx, m, "clembed_matrix_read: m", &ld));
  CHECK(plan_transfer(ctx, "clembed_matrix_read", m, host_dtype, 0, &temp_bytes));
  size_t n = m->rows * m->cols;
  if (n && !host) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "host", -1, 0, "clembed_matrix_read: host is NULL");
  void *dst = host;
  if (temp_bytes && n) {
    tmp = malloc(temp_bytes);
    if (!tmp) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "clembed_matrix_read: out of host memory");
    dst = tmp;
  }
  cl_int err = transfer(ctx, m, ld, dst, 0);
  if (err != CL_SUCCESS) {
    status = ce_cl_fail(ctx, err, "clembed_matrix_read");
    goto cleanup;
  }
  if (tmp && ce_convert_values(host, host_dtype, tmp, m->dtype, n) != 0)
    FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "clembed_matrix_read: out of host memory");
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
