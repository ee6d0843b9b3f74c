/* Argument checks every operation shares: wait lists, matrices and ids
 * against their buffers (and their cl_context), sizes without overflow, the
 * padding id, and the options the forward and the backward have in common. */
#include "runtime.h"

#include <stdio.h>
#include <string.h>

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

/* A view of a split matrix (its buffer is a registered first piece): offset,
 * rows, cols and ld address the whole matrix's rows laid end to end with ld
 * = its cols, and every row of the view lies in one of its rows. Resolved into
 * the pieces that hold the view's rows. */
static clembed_status check_split(clembed_context *ctx, const clembed_matrix *m, const char *what, size_t l,
                                  size_t rows, size_t cols, clembed_dtype dtype, ce_pieces *p) {
  if (m->dtype != dtype)
    return ARG_FAIL(m->dtype, "%s: its buffer holds a %zu x %zu %s matrix in %zu buffers; a view of it "
                    "keeps that dtype (not %s)", what, rows, cols, ce_dtype_name(dtype), p->count,
                    ce_dtype_name(m->dtype));
  if (l != cols)
    return ARG_FAIL(l, "%s: its buffer holds a %zu x %zu matrix in %zu buffers; a view of it keeps ld %zu (not %zu)",
                    what, rows, cols, p->count, cols, l);
  size_t r0 = cols ? m->offset / cols : 0, c0 = cols ? m->offset % cols : 0;
  if (cols == 0 ? m->offset != 0 : c0 + m->cols > cols)
    return ARG_FAIL(m->offset, "%s: offset %zu + cols %zu crosses a row of the %zu x %zu matrix in %zu buffers "
                    "(offset %% ld + cols must be at most ld %zu)", what, m->offset, m->cols, rows, cols, p->count,
                    cols);
  if (r0 > rows || (m->rows && m->cols && m->rows > rows - r0))
    return ARG_FAIL(m->rows, "%s: rows %zu from row %zu are past the %zu rows of the matrix in %zu buffers", what,
                    m->rows, r0, rows, p->count);
  /* the pieces that hold rows [r0, r0 + m->rows) (for an empty view, the one at r0) */
  size_t end = r0 + (m->rows && m->cols ? m->rows : 0), out = 0;
  for (size_t j = 0; j < p->count; j++) {
    size_t lo = p->piece[j].first, hi = j + 1 < p->count ? p->piece[j + 1].first : rows;
    int take = end > r0 ? lo < end && hi > r0 : (r0 >= lo && (r0 < hi || j + 1 == p->count));
    if (!take) continue;
    size_t from = lo > r0 ? lo : r0;
    p->piece[out].buffer = p->piece[j].buffer;
    p->piece[out].offset = p->piece[j].offset + (from - lo) * cols + c0;
    p->piece[out].first = from - r0;
    out++;
    if (end <= r0) break;
  }
  p->count = out;
  p->rows = m->rows;
  p->ld = cols;
  return CLEMBED_OK;
}

/* A matrix against its buffer. The block-quantized dtypes (allowed only with
 * `blocks`) count offset, cols and ld in values, each a multiple of the block
 * size, and their extent in whole blocks. With p, a split matrix's view is
 * resolved into p; without, it is refused. */
static clembed_status check_matrix(clembed_context *ctx, const clembed_matrix *m, const char *what, size_t *ld,
                                   int blocks, ce_pieces *p) {
  ce_pieces own;
  if (!p) p = &own;
  p->piece = p->local;
  p->count = 0;
  if (!m) return ARG_FAIL(0, "%s is NULL", what);
  if (!m->buffer) return ARG_FAIL(0, "%s has a NULL buffer", what);
  if (!ce_dtype_known(m->dtype)) return ARG_FAIL(m->dtype, "%s has an unknown dtype %d", what, (int)m->dtype);
  if (ce_dtype_is_block(m->dtype) && !blocks)
    return ce_fail_arg(ctx, CLEMBED_ERR_UNSUPPORTED, NULL, arg_name(what), -1, (int64_t)m->dtype,
                       "%s is %s: block-quantized matrices are tables to read, never an output, a gradient or a "
                       "table to train or initialise", what, ce_dtype_name(m->dtype));
  size_t l = m->ld ? m->ld : m->cols;
  if (l < m->cols) return ARG_FAIL(l, "%s: ld %zu is less than cols %zu", what, l, m->cols);
  const ce_rowwise_facts *rw = ce_rowwise_of((int)m->dtype);
  if (rw) { /* a row-wise type's block is the row: views of whole rows */
    if (l != m->cols)
      return ARG_FAIL(l, "%s: ld %zu is not cols %zu: a %s matrix's views are whole rows (ld = cols)", what, l,
                      m->cols, ce_dtype_name(m->dtype));
    if (m->cols % ce_rowwise_cols_multiple(rw) || !m->cols)
      return ARG_FAIL(m->cols, "%s: cols is %zu, not a multiple of %u, at least 1, as %s needs", what, m->cols,
                      ce_rowwise_cols_multiple(rw), ce_dtype_name(m->dtype));
  }
  size_t qk = ce_dtype_unit(m->dtype, l); /* (a row-wise matrix's l is at least 1, above) */
  if (m->cols % qk || m->offset % qk || l % qk) {
    const char *f = m->cols % qk ? "cols" : m->offset % qk ? "offset" : "ld";
    size_t v = m->cols % qk ? m->cols : m->offset % qk ? m->offset : l;
    return ARG_FAIL(v, "%s: %s is %zu, not a multiple of the %s block size %zu", what, f, v, ce_dtype_name(m->dtype),
                    qk);
  }
  size_t size;
  clembed_status s = buffer_size(ctx, m->buffer, what, &size);
  if (s != CLEMBED_OK) return s;
  size_t srows, scols;
  clembed_dtype sdtype;
  int split = ce_pieces_find(m->buffer, &srows, &scols, &sdtype, p);
  if (split < 0)
    return ce_fail_arg(ctx, CLEMBED_ERR_OUT_OF_MEMORY, NULL, arg_name(what), -1, 0,
                       "%s: out of host memory for the list of its buffers", what);
  if (split) {
    p->what = arg_name(what);
    if (p == &own) {
      s = ce_fail_arg(ctx, CLEMBED_ERR_UNSUPPORTED, NULL, arg_name(what), -1, (int64_t)p->count,
                      "%s is a matrix in %zu buffers, which this operation does not take", what, p->count);
      ce_pieces_release(p);
      return s;
    }
    s = check_split(ctx, m, what, l, srows, scols, sdtype, p);
    if (s != CLEMBED_OK) {
      ce_pieces_release(p);
      return s;
    }
    if (ld) *ld = l;
    return CLEMBED_OK;
  }
  size_t end = m->offset, t;
  if (m->rows && m->cols) {
    if (ce_mul_overflows(m->rows - 1, l, &t) || ce_add_overflows(end, t, &end) ||
        ce_add_overflows(end, m->cols, &end))
      return ARG_FAIL(m->offset, "%s: offset %zu + (rows %zu - 1) * ld %zu + cols %zu overflows size_t", what,
                      m->offset, m->rows, l, m->cols);
  }
  /* bytes up to the extent's end: elements, or whole blocks, times their size */
  t = ce_dtype_bytes_at(m->dtype, l, end);
  if (end && !t) return ARG_FAIL(0, "%s: its extent in bytes overflows size_t", what);
  if (t > size)
    return ARG_FAIL(t, "%s: %zu x %zu (offset %zu, ld %zu) needs %zu bytes but its buffer holds %zu", what, m->rows,
                    m->cols, m->offset, l, t, size);
  p->count = 1;
  p->rows = m->rows;
  p->ld = l;
  p->what = arg_name(what);
  p->piece[0] = (ce_piece){m->buffer, 0, m->offset};
  if (ld) *ld = l;
  return CLEMBED_OK;
}

clembed_status ce_check_matrix(clembed_context *ctx, const clembed_matrix *m, const char *what, size_t *ld) {
  return check_matrix(ctx, m, what, ld, 0, NULL);
}

clembed_status ce_check_table(clembed_context *ctx, const clembed_matrix *m, const char *what, size_t *ld) {
  return check_matrix(ctx, m, what, ld, 1, NULL);
}

clembed_status ce_check_pieces(clembed_context *ctx, const clembed_matrix *m, const char *what, int table,
                               ce_pieces *p) {
  memset(p, 0, sizeof *p);
  p->piece = p->local;
  return check_matrix(ctx, m, what, NULL, table, p);
}

size_t ce_index_size(clembed_index_type t) {
  return t == CLEMBED_I32 ? 4 : t == CLEMBED_I64 ? 8 : 0;
}

clembed_status ce_check_ids(clembed_context *ctx, const clembed_ids *ids, const char *what) {
  if (!ids) return ARG_FAIL(0, "%s is NULL", what);
  size_t es = ce_index_size(ids->type);
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

clembed_status ce_padding(clembed_context *ctx, int64_t padding_idx, size_t rows, const char *what, cl_long *out) {
  return ce_padding_of(ctx, padding_idx, rows, 0, what, out);
}

clembed_status ce_padding_of(clembed_context *ctx, int64_t padding_idx, size_t rows, int remap, const char *what,
                             cl_long *out) {
  if (padding_idx == CLEMBED_NO_PADDING) {
    *out = -1;
    return CLEMBED_OK;
  }
  /* negative: counted from the end (-1 is the last row, as nn.Embedding) */
  int64_t p = padding_idx < 0 ? padding_idx + (int64_t)rows : padding_idx;
  if (p < 0 || (uint64_t)p >= (uint64_t)rows)
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "padding_idx", -1, padding_idx,
                       remap ? "%s: padding_idx %lld is outside the remap's %zu ids (padding_idx is an id of "
                               "the unpruned table)"
                             : "%s: padding_idx %lld is outside the table of %zu rows",
                       what, (long long)padding_idx, rows);
  *out = p;
  return CLEMBED_OK;
}

clembed_status ce_check_common(clembed_context *ctx, const char *what, clembed_index_policy policy, float dropout,
                               size_t count, size_t seq_len, const clembed_ids *seq_offsets) {
  if ((unsigned)policy > CLEMBED_INDEX_WRAP)
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "policy", -1, (int64_t)policy,
                       "%s: unknown index policy %d", what, (int)policy);
  if (!(dropout >= 0.0f && dropout < 1.0f))
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "dropout", -1, 0, "%s: dropout %g is outside [0, 1)",
                       what, (double)dropout);
  if (seq_offsets) {
    clembed_status s = ce_check_ids(ctx, seq_offsets, "sequence_offsets");
    if (s != CLEMBED_OK) return s;
    size_t nseq = seq_len ? count / seq_len + (count % seq_len != 0) : 1;
    if (count && seq_offsets->count < nseq)
      return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "sequence_offsets", -1, (int64_t)seq_offsets->count,
                     "%s: sequence_offsets has %zu entries but %zu ids in sequences of %zu need %zu", what,
                     seq_offsets->count, count, seq_len, nseq);
  }
  return CLEMBED_OK;
}

