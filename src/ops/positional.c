/* The sinusoid table: clembed_positional, and the table the forward reads
 * instead of computing sin/cos per element (a cache on the context). */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The table for positions [0, rows) of the last sinusoid the forward used
 * (F32, cols wide). */
typedef struct table_cache {
  clembed_matrix pe;
  clembed_sinusoid sinusoid;
} table_cache;
static const char table_key = 0;

static void table_release(clembed_context *ctx, void *data) {
  (void)ctx;
  table_cache *c = data;
  clembed_matrix_release(&c->pe);
  free(c);
}

static clembed_status table_cache_get(clembed_context *ctx, table_cache **out) {
  *out = ce_cache_find(ctx, &table_key);
  if (*out) return CLEMBED_OK;
  table_cache *c = calloc(1, sizeof *c);
  if (!c) return ce_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "sinusoid table: out of host memory");
  clembed_status s = ce_cache_add(ctx, &table_key, c, table_release);
  if (s != CLEMBED_OK) {
    free(c);
    return s;
  }
  *out = c;
  return CLEMBED_OK;
}

/* The rows a table for positions [0, end) gets (a power of two from the
 * minimum, so that growing offsets, as in decoding, rebuild rarely), or 0 when
 * the forward computes inline instead: on an out-of-order queue (nothing would
 * order the table before its readers), or when the table would be large, or
 * much larger than this call's work (one decoding step far into a sequence). */
static size_t table_rows(const clembed_context *ctx, size_t cols, size_t end, size_t tokens) {
  const ce_tuning *t = ctx->tune;
  size_t rows = t->sinusoid_table_min_rows;
  while (rows < end && rows <= t->sinusoid_table_max_elements) rows *= 2;
  if (!ctx->in_order || cols == 0 || rows > t->sinusoid_table_max_elements / cols ||
      rows * cols > ctx->max_piece / sizeof(float) ||
      (rows > t->sinusoid_table_inline_rows && rows / 4 > tokens))
    return 0;
  return rows;
}

clembed_status ce_sinusoid_table(clembed_context *ctx, const clembed_sinusoid *s, size_t cols, size_t end,
                                 size_t tokens, const clembed_matrix **table) {
  clembed_status status = CLEMBED_OK;
  clembed_matrix m = {0};
  table_cache *c;
  *table = NULL;
  CHECK(table_cache_get(ctx, &c));
  if (c->pe.buffer && c->pe.cols == cols && c->pe.rows >= end && c->sinusoid.base == s->base &&
      c->sinusoid.exponent == s->exponent && c->sinusoid.layout == s->layout) {
    *table = &c->pe;
    return CLEMBED_OK;
  }
  size_t rows = table_rows(ctx, cols, end, tokens);
  if (!rows) return CLEMBED_OK;
  /* written whole by the positional kernel: no zero-fill, and nothing waits
   * (the forward that reads it follows it on the in-order queue) */
  CHECK(ce_buffer(ctx, CE_BUFFER_TEMP, rows * cols * sizeof(float), NULL, "sinusoid table", &m.buffer));
  m.rows = rows;
  m.cols = cols;
  m.ld = cols;
  m.dtype = CLEMBED_F32;
  CHECK(ce_positional_run(ctx, s, 0, &m, 0, NULL, NULL));
  clembed_matrix_release(&c->pe);
  c->pe = m;
  c->sinusoid = *s;
  m.buffer = NULL;
  *table = &c->pe;
cleanup:
  clembed_matrix_release(&m);
  return status;
}

clembed_sinusoid clembed_sinusoid_defaults(void) {
  clembed_sinusoid s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  s.base = 10000.0;
  s.exponent = CLEMBED_EXPONENT_PAIR;
  s.layout = CLEMBED_LAYOUT_INTERLEAVED;
  return s;
}

clembed_status clembed_positional(clembed_context *ctx, const clembed_sinusoid *s, size_t first_position,
                                  clembed_matrix *out, cl_uint nwait, const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, "clembed_positional");
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  clembed_sinusoid sn = clembed_sinusoid_defaults(); /* the caller's, as far as its struct_size goes */
  clembed_status status = ce_struct_read(ctx, NULL, "s", -1, &ce_sinusoid_layout, s, &sn);
  if (status == CLEMBED_OK) status = ce_positional_run(ctx, &sn, first_position, out, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

clembed_status ce_positional_run(clembed_context *ctx, const clembed_sinusoid *s, size_t first_position,
                                 clembed_matrix *out, cl_uint nwait, const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  cl_mem freq = NULL;
  cl_kernel k;
  char opts[96];
  ce_pieces op;
  ce_chain ch;
  ce_chain_init(&ch, ctx, nwait, wait);
  ce_pieces_none(&op);
  clembed_sinusoid defaults = clembed_sinusoid_defaults();
  if (!s) s = &defaults;
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_check_pieces(ctx, out, "clembed_positional: out", 0, &op));
  CHECK(ce_sinusoid_check(ctx, s));
  if (ce_positions_past_end(first_position, out->rows))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "first_position", -1, (int64_t)first_position,
             "clembed_positional: first_position %zu + rows %zu is past 2^32 (the sinusoid takes positions below "
             "2^32)",
             first_position, out->rows);
  CHECK(ce_sinusoid_freq(ctx, s, out->cols, &freq));
  const ce_tuning *t = ctx->tune;
  /* one kernel per shape: a row per work-item (VEC columns at a time), or an element */
  const char *name = t->positional_rowwise ? "ce_positional_rows" : "ce_positional";
  ce_pieces *mats[1] = {&op};
  CHECK(ce_pieces_plan(ctx, "clembed_positional", mats, 1));
  snprintf(opts, sizeof opts, "-DOUT_DT=%d -DVEC=%u", (int)out->dtype, t->positional_vec);
  ce_pieces_option(opts, sizeof opts, &op, "out");
  CHECK(ce_kernel(ctx, CE_FAMILY_POSITIONAL, opts, name, &k));
  cl_ulong o_ld = op.ld, rows = out->rows, cols = out->cols, first = first_position;
  do {
    CHECK(ce_set_args(ctx, k, name, CE_PIECES(&op), CE_ARG(o_ld), CE_ARG(rows), CE_ARG(cols), CE_ARG(first),
                      CE_ARG(freq), CE_END));
    if (t->positional_rowwise)
      CHECK(ce_chain_1d(&ch, k, name, out->rows, CE_LOCAL_ROWS));
    else
      CHECK(ce_chain_2d(&ch, k, name, out->cols, out->rows));
  } while (ce_pieces_next(mats, 1));
  CHECK(ce_chain_close(&ch, event));
cleanup:
  ce_chain_release(&ch);
  ce_pieces_release(&op);
  return status;
}
