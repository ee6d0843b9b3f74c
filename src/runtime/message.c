/* Messages and error details: the latest on each context, and per thread for
 * calls that have no context. A leaf: calls nothing else in clembed but the
 * status strings. */
#include "runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[2048];
static _Thread_local clembed_error_detail last_detail;

const char *clembed_last_error_message(void) { return last_error; }

const char *clembed_context_message(const clembed_context *ctx) {
  return ctx && ctx->message ? ctx->message : "";
}

void ce_detail_fill(clembed_error_detail *d, clembed_status code, const char *op, const char *argument,
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
  ce_detail_fill(&ctx->detail, code, op ? op : ctx->op, argument, index, value);
}

clembed_status clembed_context_error(const clembed_context *ctx, clembed_error_detail *d) {
  if (!d) return CLEMBED_ERR_INVALID_ARGUMENT;
  *d = ctx ? ctx->detail : last_detail;
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

clembed_status clembed_context_fail(clembed_context *ctx, clembed_status status, const char *operation,
                                    const char *argument, int64_t index, int64_t value, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (ctx) {
    ce_vset_message(ctx, fmt ? fmt : "", ap);
    ce_detail_fill(&ctx->detail, status, operation, argument, index, value);
  } else {
    vsnprintf(last_error, sizeof last_error, fmt ? fmt : "", ap);
    ce_detail_fill(&last_detail, status, operation, argument, index, value);
  }
  va_end(ap);
  return status;
}

clembed_status ce_cl_fail(clembed_context *ctx, cl_int err, const char *what) {
  clembed_status s = (clembed_status)err;
  if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY || err == CL_OUT_OF_RESOURCES)
    s = CLEMBED_ERR_OUT_OF_MEMORY; /* the OpenCL code stays in the message */
  ce_set_message(ctx, "%s: %s", what, clembed_status_string((clembed_status)err));
  ce_set_detail(ctx, s, NULL, "", -1, (int64_t)err);
  return s;
}

void ce_last_message(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
}

clembed_status ce_last_fail(clembed_status status, const char *op, const char *argument) {
  ce_detail_fill(&last_detail, status, op, argument, -1, 0);
  return status;
}

clembed_status ce_no_context(const char *op) {
  ce_last_message("%s: ctx is NULL", op);
  return ce_last_fail(CLEMBED_ERR_INVALID_ARGUMENT, op, "ctx");
}
