/* Argument checks every operation shares: wait lists, matrices and ids
 * against their buffers (and their cl_context), sizes without overflow, the
 * padding id, and the options the forward and the backward have in common. */
#include "runtime.h"

#include <stdio.h>

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

/* A matrix against its buffer. The block-quantized dtypes (allowed only with
 * `blocks`) count offset, cols and ld in values, each a multiple of the block
 * size, and their extent in whole blocks. */
static clembed_status check_matrix(clembed_context *ctx, const clembed_matrix *m, const char *what, size_t *ld,
                                   int blocks) {
  if (!m) return ARG_FAIL(0, "%s is NULL", what);
  if (!m->buffer) return ARG_FAIL(0, "%s has a NULL buffer", what);
  size_t qk = clembed_dtype_block_values(m->dtype);
  if (!qk) return ARG_FAIL(m->dtype, "%s has an unknown dtype %d", what, (int)m->dtype);
  if (qk > 1 && !blocks)
    return ce_fail_arg(ctx, CLEMBED_ERR_UNSUPPORTED, NULL, arg_name(what), -1, (int64_t)m->dtype,
                       "%s is %s: block-quantized matrices are tables to read, never an output, a gradient or a "
                       "table to train or initialise", what, ce_dtype_name(m->dtype));
  size_t l = m->ld ? m->ld : m->cols;
  if (l < m->cols) return ARG_FAIL(l, "%s: ld %zu is less than cols %zu", what, l, m->cols);
  if (m->cols % qk || m->offset % qk || l % qk) {
    const char *f = m->cols % qk ? "cols" : m->offset % qk ? "offset" : "ld";
    size_t v = m->cols % qk ? m->cols : m->offset % qk ? m->offset : l;
    return ARG_FAIL(v, "%s: %s is %zu, not a multiple of the %s block size %zu", what, f, v, ce_dtype_name(m->dtype),
                    qk);
  }
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
  /* bytes up to the extent's end: elements, or whole blocks, times their size */
  t = clembed_dtype_row_bytes(m->dtype, end);
  if (end && !t) return ARG_FAIL(0, "%s: its extent in bytes overflows size_t", what);
  if (t > size)
    return ARG_FAIL(t, "%s: %zu x %zu (offset %zu, ld %zu) needs %zu bytes but its buffer holds %zu", what, m->rows,
                    m->cols, m->offset, l, t, size);
  if (ld) *ld = l;
  return CLEMBED_OK;
}

clembed_status ce_check_matrix(clembed_context *ctx, const clembed_matrix *m, const char *what, size_t *ld) {
  return check_matrix(ctx, m, what, ld, 0);
}

clembed_status ce_check_table(clembed_context *ctx, const clembed_matrix *m, const char *what, size_t *ld) {
  return check_matrix(ctx, m, what, ld, 1);
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
  if (padding_idx == CLEMBED_NO_PADDING) {
    *out = -1;
    return CLEMBED_OK;
  }
  /* negative: counted from the end (-1 is the last row, as nn.Embedding) */
  int64_t p = padding_idx < 0 ? padding_idx + (int64_t)rows : padding_idx;
  if (p < 0 || (uint64_t)p >= (uint64_t)rows)
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "padding_idx", -1, padding_idx,
                       "%s: padding_idx %lld is outside the table of %zu rows", what, (long long)padding_idx, rows);
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

