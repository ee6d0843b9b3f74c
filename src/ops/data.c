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
  ce_pieces p;
  p.piece = p.local;
  p.count = 0;
  CE_ENTER(ctx, "clembed_matrix_create");
  if (!m) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "m", -1, 0, "clembed_matrix_create: m is NULL");
  size_t qk = clembed_dtype_block_values(dtype), bytes;
  const ce_rowwise_facts *rw = ce_rowwise_of((int)dtype);
  if (rw) qk = ce_rowwise_cols_multiple(rw);
  if (!qk)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "dtype", -1, (int64_t)dtype, "clembed_matrix_create: unknown dtype %d",
             (int)dtype);
  if (rw && (cols % qk || !cols))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "cols", -1, (int64_t)cols,
             "clembed_matrix_create: cols %zu is not a multiple of %zu, at least 1, as %s needs", cols, qk,
             ce_dtype_name(dtype));
  if (cols % qk)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "cols", -1, (int64_t)cols,
             "clembed_matrix_create: cols %zu is not a multiple of the %s block size %zu", cols, ce_dtype_name(dtype),
             qk);
  size_t row_bytes = clembed_dtype_row_bytes(dtype, cols);
  if ((cols && !row_bytes) || ce_mul_overflows(rows, row_bytes, &bytes))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "rows", -1, (int64_t)rows,
             "clembed_matrix_create: %zu x %zu %s overflows size_t", rows, cols, ce_dtype_name(dtype));
  /* one buffer, or pieces of whole rows (ce_matrix_alloc), each rounded up to
   * whole words and zeroed by a kernel that is enqueued, not waited for:
   * creating a matrix on a queue gated by a caller's user event must not
   * block. The queue orders it before later commands (an in-order queue by
   * itself, an out-of-order one by a barrier on the fills), and the fills are
   * tracked, so clembed_finish reports one that fails. */
  CHECK(ce_matrix_alloc(ctx, rows, cols, dtype, "clembed_matrix_create", &b, &p));
  cl_kernel k;
  CHECK(ce_kernel(ctx, CE_FAMILY_UTIL, "", "ce_zero", &k));
  for (size_t j = 0; j < p.count; j++) {
    size_t pb = ce_piece_nrows(&p, j) * row_bytes;
    cl_ulong nw = pb / 4 + (pb % 4 != 0);
    cl_event ev = NULL;
    if (nw == 0) nw = 1;
    CHECK(ce_set_args(ctx, k, "ce_zero", CE_ARG(p.piece[j].buffer), CE_ARG(nw), CE_END));
    CHECK(ce_enqueue_1d(ctx, k, "ce_zero", (size_t)nw, 0, 0, NULL, &ev));
    cl_int err = ctx->in_order ? CL_SUCCESS : clEnqueueBarrierWithWaitList(ctx->queue, 1, &ev, NULL);
    CHECK(ce_track_end(ctx, CLEMBED_OK, NULL, &ev)); /* the context keeps ev */
    if (err != CL_SUCCESS) {
      status = ce_cl_fail(ctx, err, "clembed_matrix_create: ordering the zero fill");
      goto cleanup;
    }
  }
  m->buffer = b;
  m->offset = 0;
  m->rows = rows;
  m->cols = cols;
  m->ld = cols;
  m->dtype = dtype;
  b = NULL;
cleanup:
  if (b) {
    ce_pieces_forget(b);
    clReleaseMemObject(b);
  }
  ce_pieces_release(&p);
  return status;
}

/* Copies between a dense host block (in the matrix's dtype: elements, or rows
 * of blocks) and rows [r0, r0 + n) of the matrix, piece by piece. */
static cl_int transfer(clembed_context *ctx, const clembed_matrix *m, const ce_pieces *p, size_t r0, size_t n,
                       void *host, int write) {
  if (n == 0 || m->cols == 0) return CL_SUCCESS;
  /* in bytes (values / block size * block bytes for the block types) */
  size_t rb = clembed_dtype_row_bytes(m->dtype, m->cols), lb = clembed_dtype_row_bytes(m->dtype, p->ld);
  for (size_t j = 0; j < p->count; j++) {
    size_t lo = p->piece[j].first, hi = lo + ce_piece_nrows(p, j);
    size_t a = lo > r0 ? lo : r0, b = hi < r0 + n ? hi : r0 + n;
    if (a >= b) continue;
    cl_mem buf = p->piece[j].buffer;
    size_t off = ce_dtype_bytes_at(m->dtype, p->ld, p->piece[j].offset) + (a - lo) * lb;
    char *h = (char *)host + (a - r0) * rb;
    cl_int err;
    if (p->ld == m->cols)
      err = write ? clEnqueueWriteBuffer(ctx->queue, buf, CL_TRUE, off, (b - a) * rb, h, 0, NULL, NULL)
                  : clEnqueueReadBuffer(ctx->queue, buf, CL_TRUE, off, (b - a) * rb, h, 0, NULL, NULL);
    else {
      size_t borigin[3] = {off, 0, 0}, horigin[3] = {0, 0, 0}, region[3] = {rb, b - a, 1};
      err = write ? clEnqueueWriteBufferRect(ctx->queue, buf, CL_TRUE, borigin, horigin, region, lb, 0, rb, 0, h, 0,
                                             NULL, NULL)
                  : clEnqueueReadBufferRect(ctx->queue, buf, CL_TRUE, borigin, horigin, region, lb, 0, rb, 0, h, 0,
                                            NULL, NULL);
    }
    if (err != CL_SUCCESS) return err;
  }
  return CL_SUCCESS;
}

/* The host side of a write (or a read) between `host_dtype` and m's dtype. The
 * conversions there are: among the float dtypes; float values into Q8_0 or
 * Q4_0 blocks (ggml's reference quantizers); blocks into float values (ggml's
 * dequantizers). *temp_rows: the rows a conversion takes at a time (its
 * matrix-side copy at most ctx->max_piece bytes, whole rows; 0 when host and
 * matrix share the dtype). */
static clembed_status plan_transfer(clembed_context *ctx, const char *fn, const clembed_matrix *m,
                                    clembed_dtype host_dtype, int write, size_t *temp_rows) {
  size_t hqk = ce_dtype_unit(host_dtype, m->cols);
  *temp_rows = 0;
  if (!ce_dtype_known(host_dtype))
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "host_dtype", -1, (int64_t)host_dtype,
                       "%s: unknown host dtype %d", fn, (int)host_dtype);
  if (ce_rowwise_of((int)host_dtype) && !clembed_dtype_row_bytes(host_dtype, m->cols))
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "host_dtype", -1, (int64_t)host_dtype,
                       "%s: host %s rows cannot hold %zu cols (a multiple of %u, at least 1)", fn,
                       ce_dtype_name(host_dtype), m->cols, ce_rowwise_cols_multiple(ce_rowwise_of((int)host_dtype)));
  if (host_dtype == m->dtype) return CLEMBED_OK;
  clembed_dtype into = write ? m->dtype : host_dtype; /* the side the values are converted into */
  if (ce_dtype_is_block(host_dtype) && ce_dtype_is_block(m->dtype))
    return ce_fail_arg(ctx, CLEMBED_ERR_UNSUPPORTED, NULL, "host_dtype", -1, (int64_t)host_dtype,
                       "%s: a %s matrix and %s host blocks: there is no conversion between block types", fn,
                       ce_dtype_name(m->dtype), ce_dtype_name(host_dtype));
  if (ce_dtype_is_block(into) && into != CLEMBED_Q8_0 && into != CLEMBED_Q4_0 && !ce_rowwise_of((int)into))
    return ce_fail_arg(ctx, CLEMBED_ERR_UNSUPPORTED, NULL, write ? "m" : "host_dtype", -1, (int64_t)into,
                       "%s: float values cannot be quantized into %s here (Q8_0 and Q4_0, as ggml's reference "
                       "quantizers, and FBGEMM's row-wise types); write %s blocks", fn, ce_dtype_name(into),
                       ce_dtype_name(into));
  if (hqk && m->cols % hqk)
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "host_dtype", -1, (int64_t)host_dtype,
                       "%s: host %s blocks need cols a multiple of %zu, not %zu", fn, ce_dtype_name(host_dtype), hqk,
                       m->cols);
  size_t rb = clembed_dtype_row_bytes(m->dtype, m->cols);
  *temp_rows = rb && ctx->max_piece / rb ? ctx->max_piece / rb : 1; /* a row is the least */
  if (*temp_rows > m->rows) *temp_rows = m->rows;
  return CLEMBED_OK;
}

/* A write or a read: straight between the host and the pieces, or through a
 * conversion a bounded number of rows at a time. */
static clembed_status matrix_io(clembed_context *ctx, const char *fn, const clembed_matrix *m, void *host,
                                clembed_dtype host_dtype, int write) {
  clembed_status status = CLEMBED_OK;
  void *tmp = NULL;
  size_t temp_rows;
  ce_pieces p;
  CHECK(ce_check_pieces(ctx, m, write ? "clembed_matrix_write: m" : "clembed_matrix_read: m", 1, &p));
  CHECK(plan_transfer(ctx, fn, m, host_dtype, write, &temp_rows));
  size_t n = m->rows * m->cols;
  if (n && !host) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "host", -1, 0, "%s: host is NULL", fn);
  cl_int err = ce_after_earlier_work(ctx);
  if (err == CL_SUCCESS && (!temp_rows || !n)) err = transfer(ctx, m, &p, 0, m->rows, host, write);
  if (err == CL_SUCCESS && temp_rows && n) {
    size_t rb = clembed_dtype_row_bytes(m->dtype, m->cols);
    /* host rows: values of host_dtype (or its blocks) */
    size_t hrb = ce_dtype_is_block(host_dtype) ? clembed_dtype_row_bytes(host_dtype, m->cols)
                                               : m->cols * clembed_dtype_size(host_dtype);
    tmp = malloc(temp_rows * rb);
    if (!tmp) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    for (size_t r = 0; r < m->rows && err == CL_SUCCESS; r += temp_rows) {
      size_t nr = m->rows - r < temp_rows ? m->rows - r : temp_rows;
      char *h = (char *)host + r * hrb;
      if (write && ce_convert_rows(tmp, m->dtype, h, host_dtype, nr, m->cols) != 0)
        FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
      err = transfer(ctx, m, &p, r, nr, tmp, write);
      if (err == CL_SUCCESS && !write && ce_convert_rows(h, host_dtype, tmp, m->dtype, nr, m->cols) != 0)
        FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
  }
  if (err != CL_SUCCESS) {
    status = ce_cl_fail(ctx, err, fn);
    goto cleanup;
  }
  if (!write) status = ce_collect(ctx);
cleanup:
  free(tmp);
  ce_pieces_release(&p);
  return status;
}

clembed_status clembed_matrix_write(clembed_context *ctx, clembed_matrix *m, const void *host,
                                    clembed_dtype host_dtype) {
  CE_ENTER(ctx, "clembed_matrix_write");
  return matrix_io(ctx, "clembed_matrix_write", m, (void *)host, host_dtype, 1);
}

clembed_status clembed_matrix_read(clembed_context *ctx, const clembed_matrix *m, void *host,
                                   clembed_dtype host_dtype) {
  CE_ENTER(ctx, "clembed_matrix_read");
  return matrix_io(ctx, "clembed_matrix_read", m, host, host_dtype, 0);
}

clembed_status clembed_quantize_rows(clembed_context *ctx, const clembed_matrix *in, clembed_matrix *out,
                                     cl_uint nwait, const cl_event *wait, cl_event *event) {
  static const char fn[] = "clembed_quantize_rows";
  clembed_status status = CLEMBED_OK;
  float *tmp = NULL;
  ce_pieces ip, op;
  ce_pieces_none(&ip);
  ce_pieces_none(&op);
  CE_ENTER(ctx, fn);
  if (event) *event = NULL;
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_check_pieces(ctx, in, "clembed_quantize_rows: in", 0, &ip));
  CHECK(ce_check_pieces(ctx, out, "clembed_quantize_rows: out", 1, &op));
  if (in->dtype != CLEMBED_F32)
    FAIL_ARG(CLEMBED_ERR_UNSUPPORTED, "in", -1, (int64_t)in->dtype, "%s: in is %s; it quantizes F32 values", fn,
             ce_dtype_name(in->dtype));
  if (!ce_rowwise_of((int)out->dtype))
    FAIL_ARG(CLEMBED_ERR_UNSUPPORTED, "out", -1, (int64_t)out->dtype,
             "%s: out is %s; it makes FBGEMM's row-wise types (I8_ROWWISE, I4_ROWWISE, I2_ROWWISE, I8_TBE, I4_TBE, "
             "I2_TBE, FP8_ROWWISE)", fn, ce_dtype_name(out->dtype));
  if (in->rows != out->rows || in->cols != out->cols)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "out", -1, (int64_t)out->rows, "%s: in is %zu x %zu but out is %zu x %zu",
             fn, in->rows, in->cols, out->rows, out->cols);
  if (in->buffer == out->buffer)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "out", -1, 0, "%s: in and out share a buffer", fn);
  if (nwait) {
    cl_int err = clWaitForEvents(nwait, wait);
    if (err != CL_SUCCESS) {
      status = ce_cl_fail(ctx, err, "clembed_quantize_rows: waiting for event_wait_list");
      goto cleanup;
    }
  }
  if (in->rows && in->cols) {
    size_t chunk = ctx->max_piece < ((size_t)32 << 20) ? ctx->max_piece : ((size_t)32 << 20);
    size_t per = chunk / (in->cols * sizeof(float));
    if (!per) per = 1;
    if (per > in->rows) per = in->rows;
    tmp = malloc(per * in->cols * sizeof(float));
    if (!tmp) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    size_t ild = in->ld ? in->ld : in->cols;
    for (size_t r = 0; r < in->rows; r += per) {
      size_t nr = in->rows - r < per ? in->rows - r : per;
      clembed_matrix vi = *in, vo = *out;
      vi.offset += r * ild;
      vi.rows = nr;
      vo.offset += r * out->cols;
      vo.rows = nr;
      CHECK(matrix_io(ctx, fn, &vi, tmp, CLEMBED_F32, 0));
      CHECK(matrix_io(ctx, fn, &vo, tmp, CLEMBED_F32, 1));
    }
  }
  if (event) {
    cl_int err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, event);
    if (err == CL_SUCCESS) err = clWaitForEvents(1, event);
    if (err != CL_SUCCESS) {
      if (*event) clReleaseEvent(*event);
      *event = NULL;
      status = ce_cl_fail(ctx, err, "clembed_quantize_rows: its event");
    }
  }
cleanup:
  free(tmp);
  ce_pieces_release(&ip);
  ce_pieces_release(&op);
  return status;
}

void clembed_matrix_release(clembed_matrix *m) {
  if (!m) return;
  if (m->buffer) {
    ce_pieces_forget(m->buffer); /* a split matrix's other pieces */
    clReleaseMemObject(m->buffer);
  }
  memset(m, 0, sizeof *m);
}

clembed_status clembed_matrix_pieces(clembed_context *ctx, const clembed_matrix *m, size_t capacity,
                                     clembed_matrix *pieces, size_t *first_rows, size_t *count) {
  clembed_status status = CLEMBED_OK;
  ce_pieces p;
  p.piece = p.local;
  CE_ENTER(ctx, "clembed_matrix_pieces");
  if (!count) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "count", -1, 0, "clembed_matrix_pieces: count is NULL");
  if (capacity && (!pieces || !first_rows))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, pieces ? "first_rows" : "pieces", -1, 0,
             "clembed_matrix_pieces: %s is NULL with a capacity of %zu", pieces ? "first_rows" : "pieces", capacity);
  CHECK(ce_check_pieces(ctx, m, "clembed_matrix_pieces: m", 1, &p));
  for (size_t j = 0; j < p.count && j < capacity; j++) {
    ce_piece_view(&p, j, m, &pieces[j]);
    first_rows[j] = p.piece[j].first;
  }
  *count = p.count;
cleanup:
  ce_pieces_release(&p);
  return status;
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
