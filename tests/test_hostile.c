/* Hostile input to the public API. Every call must fail cleanly (the status the
 * header names and a context message that names the problem), or succeed with
 * exact results, and no kernel may read or write outside its buffers whatever
 * the ids, offsets and strides say:
 * - NULL for every pointer argument of every public function;
 * - event wait lists: NULL with a non-zero count, non-NULL with 0, a NULL entry;
 * - unknown enums (dtype, index type, policy, positions, exponent, layout) and
 *   non-finite or out-of-range scalars (dropout, base, init parameters, padding);
 * - size computations that overflow size_t (rows * cols * dtype size, offset +
 *   (rows - 1) * ld + cols, offset + count) and extents one element past the
 *   buffer (CL_MEM_SIZE), ld < cols, a view of a wider dtype than the buffer;
 * - out-of-range ids (INT64_MAX, INT64_MIN, INT32_MIN, -rows-1, rows, 2^32...)
 *   under every policy, I32 and I64, for the forward, the backward (sorted and
 *   atomic, accumulate and overwrite, scale_grad_by_freq) and the SGD step, on
 *   tables and outputs surrounded by guard elements that must stay untouched;
 *   an empty table; positions far outside the position table through
 *   sequence_offsets and position_offset;
 * - device specs that match nothing (format directives included).
 * Under Oclgrind (argument "small", label oclgrind) an invalid read or write
 * anywhere fails the test through FAIL_REGULAR_EXPRESSION. */
#include "test_util.h"

#include <limits.h>


#define SENTINEL (-96.0f) /* exact in F32, F16 and BF16 */

/* Sets the context message to one that names none of the problems checked
 * here, so that a check cannot pass on a stale message: every call that fails
 * must set its own. */
#define POISON "424242"
static void poison(clembed_context *ctx) {
  clembed_ids d;
  int32_t h = 0;
  (void)clembed_ids_create(ctx, &h, 1, (clembed_index_type)424242, &d);
}

/* The context message is new and contains `sub`. */
#define MSG_HAS(ctx, sub)                                                                              \
  EXPECT(strstr(clembed_context_message(ctx), (sub)) != NULL &&                                         \
             strstr(clembed_context_message(ctx), POISON) == NULL,                                      \
         "message '%s' does not name '%s'", clembed_context_message(ctx), (sub))

/* A call that must fail with `code` and set a message containing `sub`. */
#define FAILS_MSG(ctx, code, sub, call) \
  do {                                  \
    poison(ctx);                        \
    FAILS(ctx, code, call);             \
    MSG_HAS(ctx, sub);                  \
  } while (0)

#define INVALID CLEMBED_ERR_INVALID_ARGUMENT

/* ------------------------------------------------------------ guarded data */

/* A rows x cols matrix of dtype t inside a larger buffer: `pre` elements before
 * it, ld = cols + pad, `post` elements after; everything outside the window
 * holds SENTINEL. */
typedef struct guarded {
  clembed_matrix m;
  size_t total;
} guarded;

enum { G_PRE = 5, G_PAD = 2, G_POST = 7 };

static void make_guarded(clembed_context *ctx, size_t rows, size_t cols, clembed_dtype t, const float *vals,
                         guarded *g) {
  size_t ld = cols + G_PAD, total = G_PRE + rows * ld + G_POST;
  clembed_matrix whole;
  memset(g, 0, sizeof *g);
  OK(ctx, clembed_matrix_create(ctx, 1, total, t, &whole));
  float *fill = malloc(total * sizeof *fill);
  for (size_t i = 0; i < total; i++) fill[i] = SENTINEL;
  OK(ctx, clembed_matrix_write(ctx, &whole, fill, CLEMBED_F32));
  free(fill);
  g->total = total;
  g->m = whole;
  g->m.offset = G_PRE;
  g->m.rows = rows;
  g->m.cols = cols;
  g->m.ld = ld;
  if (vals && rows && cols) OK(ctx, clembed_matrix_write(ctx, &g->m, vals, CLEMBED_F32));
}

/* Reads the whole buffer as F32; checks that every element outside the window
 * is still SENTINEL; returns the window, dense (caller frees). */
static float *read_guarded(clembed_context *ctx, const guarded *g, const char *what) {
  float *all = tu_read_buffer(ctx, &g->m, g->total, CLEMBED_F32);
  size_t rows = g->m.rows, cols = g->m.cols, ld = g->m.ld;
  size_t nwin = rows * cols;
  float *win = malloc((nwin ? nwin : 1) * sizeof *win);
  int bad_guards = 0;
  for (size_t i = 0; i < g->total; i++) {
    int inside = i >= G_PRE && i - G_PRE < rows * ld && (i - G_PRE) % ld < cols;
    if (inside) win[((i - G_PRE) / ld) * cols + (i - G_PRE) % ld] = all[i];
    else if (all[i] != SENTINEL && bad_guards++ < 3)
      EXPECT(0, "%s: guard element %zu outside the %zu x %zu window was overwritten: %g", what, i, rows, cols,
             (double)all[i]);
  }
  if (bad_guards == 0) EXPECT(1, "guards");
  free(all);
  return win;
}

/* ------------------------------------------------------------- the fixture */

enum { FV = 5, FD = 4, FN = 4, FP = 6 };

typedef struct fx {
  clembed_matrix table, out, grad, gtab, ptab, pgrad;
  clembed_matrix buf12, buf12h; /* 1 x 12 F32, 1 x 12 F16 */
  clembed_ids ids, ids4;        /* FN valid ids; a buffer of 4 I32 */
  clembed_ids so;               /* one sequence offset */
} fx;

static void fx_make(clembed_context *ctx, fx *f) {
  float t[FV * FD], g[FN * FD], p[FP * FD];
  for (int i = 0; i < FV * FD; i++) t[i] = (float)i;
  for (int i = 0; i < FN * FD; i++) g[i] = 0.5f * (float)i;
  for (int i = 0; i < FP * FD; i++) p[i] = 0.25f * (float)i;
  const int32_t ids[FN] = {1, 0, 4, 1}, zero = 0;
  memset(f, 0, sizeof *f);
  OK(ctx, clembed_matrix_create(ctx, FV, FD, CLEMBED_F32, &f->table));
  OK(ctx, clembed_matrix_write(ctx, &f->table, t, CLEMBED_F32));
  OK(ctx, clembed_matrix_create(ctx, FN, FD, CLEMBED_F32, &f->out));
  OK(ctx, clembed_matrix_create(ctx, FN, FD, CLEMBED_F32, &f->grad));
  OK(ctx, clembed_matrix_write(ctx, &f->grad, g, CLEMBED_F32));
  OK(ctx, clembed_matrix_create(ctx, FV, FD, CLEMBED_F32, &f->gtab));
  OK(ctx, clembed_matrix_create(ctx, FP, FD, CLEMBED_F32, &f->ptab));
  OK(ctx, clembed_matrix_write(ctx, &f->ptab, p, CLEMBED_F32));
  OK(ctx, clembed_matrix_create(ctx, FP, FD, CLEMBED_F32, &f->pgrad));
  OK(ctx, clembed_matrix_create(ctx, 1, 12, CLEMBED_F32, &f->buf12));
  OK(ctx, clembed_matrix_create(ctx, 1, 12, CLEMBED_F16, &f->buf12h));
  OK(ctx, clembed_ids_create(ctx, ids, FN, CLEMBED_I32, &f->ids));
  OK(ctx, clembed_ids_create(ctx, ids, 4, CLEMBED_I32, &f->ids4));
  OK(ctx, clembed_ids_create(ctx, &zero, 1, CLEMBED_I32, &f->so));
}

static fx g_fx; /* made before the cases, freed after them */

static void fx_free(fx *f) {
  clembed_matrix *ms[] = {&f->table, &f->out, &f->grad, &f->gtab, &f->ptab, &f->pgrad, &f->buf12, &f->buf12h};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) clembed_matrix_release(ms[i]);
  clembed_ids_release(&f->ids);
  clembed_ids_release(&f->ids4);
  clembed_ids_release(&f->so);
}

/* ------------------------------------------------- every matrix argument */

/* A matrix argument in one role of one function; `bad` replaces it. */
typedef clembed_status (*matrix_role)(clembed_context *ctx, fx *f, clembed_matrix *bad);
/* Roles whose argument is optional (NULL means "none") skip the NULL case. */

static clembed_status r_lookup_table(clembed_context *c, fx *f, clembed_matrix *m) {
  return clembed_lookup(c, m, &f->ids, &f->out, 0, NULL, NULL);
}
static clembed_status r_lookup_out(clembed_context *c, fx *f, clembed_matrix *m) {
  return clembed_lookup(c, &f->table, &f->ids, m, 0, NULL, NULL);
}
static clembed_status r_embed_table(clembed_context *c, fx *f, clembed_matrix *m) {
  clembed_embed_options o = clembed_embed_defaults();
  o.positions = CLEMBED_POSITIONS_SINUSOID;
  return clembed_embed(c, m, &f->ids, &o, &f->out, 0, NULL, NULL);
}
static clembed_status r_embed_out(clembed_context *c, fx *f, clembed_matrix *m) {
  clembed_embed_options o = clembed_embed_defaults();
  o.positions = CLEMBED_POSITIONS_SINUSOID;
  return clembed_embed(c, &f->table, &f->ids, &o, m, 0, NULL, NULL);
}
static clembed_status r_embed_ptab(clembed_context *c, fx *f, clembed_matrix *m) {
  clembed_embed_options o = clembed_embed_defaults();
  o.positions = CLEMBED_POSITIONS_TABLE;
  o.position_table = m;
  return clembed_embed(c, &f->table, &f->ids, &o, &f->out, 0, NULL, NULL);
}
static clembed_status r_bwd_grad(clembed_context *c, fx *f, clembed_matrix *m) {
  return clembed_backward(c, m, &f->ids, NULL, &f->gtab, 0, NULL, NULL);
}
static clembed_status r_bwd_gtab(clembed_context *c, fx *f, clembed_matrix *m) {
  return clembed_backward(c, &f->grad, &f->ids, NULL, m, 0, NULL, NULL);
}
static clembed_status r_bwd_atomic_gtab(clembed_context *c, fx *f, clembed_matrix *m) {
  clembed_backward_options o = clembed_backward_defaults();
  o.deterministic = 0;
  o.scale_grad_by_freq = 1;
  return clembed_backward(c, &f->grad, &f->ids, &o, m, 0, NULL, NULL);
}
static clembed_status r_bwd_pgrad(clembed_context *c, fx *f, clembed_matrix *m) {
  clembed_backward_options o = clembed_backward_defaults();
  o.position_grad = m;
  return clembed_backward(c, &f->grad, &f->ids, &o, &f->gtab, 0, NULL, NULL);
}
static clembed_status r_sgd_grad(clembed_context *c, fx *f, clembed_matrix *m) {
  return clembed_sgd_update(c, m, &f->ids, 0.5f, NULL, &f->table, 0, NULL, NULL);
}
static clembed_status r_sgd_table(clembed_context *c, fx *f, clembed_matrix *m) {
  return clembed_sgd_update(c, &f->grad, &f->ids, 0.5f, NULL, m, 0, NULL, NULL);
}
static clembed_status r_sgd_pgrad(clembed_context *c, fx *f, clembed_matrix *m) {
  clembed_backward_options o = clembed_backward_defaults();
  o.position_grad = m;
  return clembed_sgd_update(c, &f->grad, &f->ids, 0.5f, &o, &f->table, 0, NULL, NULL);
}
static clembed_status r_write(clembed_context *c, fx *f, clembed_matrix *m) {
  static float host[4096];
  (void)f;
  return clembed_matrix_write(c, m, host, CLEMBED_F32);
}
static clembed_status r_read(clembed_context *c, fx *f, clembed_matrix *m) {
  static float host[4096];
  (void)f;
  return clembed_matrix_read(c, m, host, CLEMBED_F32);
}
static clembed_status r_init_normal(clembed_context *c, fx *f, clembed_matrix *m) {
  (void)f;
  return clembed_matrix_init_normal(c, m, 0.0f, 1.0f, 1, 0, NULL, NULL);
}
static clembed_status r_init_uniform(clembed_context *c, fx *f, clembed_matrix *m) {
  (void)f;
  return clembed_matrix_init_uniform(c, m, -1.0f, 1.0f, 1, 0, NULL, NULL);
}
static clembed_status r_positional(clembed_context *c, fx *f, clembed_matrix *m) {
  (void)f;
  return clembed_positional(c, NULL, 0, m, 0, NULL, NULL);
}

static const struct {
  const char *name;
  matrix_role call;
  int optional;
} matrix_roles[] = {
    {"clembed_lookup table", r_lookup_table, 0},
    {"clembed_lookup out", r_lookup_out, 0},
    {"clembed_embed table", r_embed_table, 0},
    {"clembed_embed out", r_embed_out, 0},
    {"clembed_embed position_table", r_embed_ptab, 0},
    {"clembed_backward grad_out", r_bwd_grad, 0},
    {"clembed_backward grad_table", r_bwd_gtab, 0},
    {"clembed_backward (atomic) grad_table", r_bwd_atomic_gtab, 0},
    {"clembed_backward position_grad", r_bwd_pgrad, 1},
    {"clembed_sgd_update grad_out", r_sgd_grad, 0},
    {"clembed_sgd_update table", r_sgd_table, 0},
    {"clembed_sgd_update position_grad", r_sgd_pgrad, 1},
    {"clembed_matrix_write m", r_write, 0},
    {"clembed_matrix_read m", r_read, 0},
    {"clembed_matrix_init_normal m", r_init_normal, 0},
    {"clembed_matrix_init_uniform m", r_init_uniform, 0},
    {"clembed_positional out", r_positional, 0},
};

TU_CASE(bad_matrix_arguments) {
  fx *f = &g_fx;
  const size_t HUGE = SIZE_MAX;
  cl_mem b = f->buf12.buffer; /* 12 floats = 48 bytes */
  const struct {
    const char *what, *msg;
    int null_ptr;
    clembed_matrix m;
  } bad[] = {
      {"NULL pointer", "is NULL", 1, {0}},
      {"NULL buffer", "NULL buffer", 0, {NULL, 0, 3, 4, 0, CLEMBED_F32}},
      {"unknown dtype 99", "unknown dtype", 0, {b, 0, 3, 4, 0, (clembed_dtype)99}},
      {"unknown dtype -1", "unknown dtype", 0, {b, 0, 3, 4, 0, (clembed_dtype)-1}},
      {"ld < cols", "less than cols", 0, {b, 0, 3, 4, 3, CLEMBED_F32}},
      {"one element past the end (offset)", "buffer holds 48", 0, {b, 1, 3, 4, 0, CLEMBED_F32}},
      {"one element past the end (ld)", "buffer holds 48", 0, {b, 0, 3, 3, 5, CLEMBED_F32}},
      {"one row past the end", "buffer holds 48", 0, {b, 0, 5, 3, 0, CLEMBED_F32}},
      {"offset past the end", "buffer holds 48", 0, {b, 13, 1, 1, 0, CLEMBED_F32}},
      {"an F32 view of an F16 buffer", "buffer holds 24", 0, {f->buf12h.buffer, 0, 1, 12, 0, CLEMBED_F32}},
      {"rows * ld overflows", "overflows", 0, {b, 0, HUGE, 4, 0, CLEMBED_F32}},
      {"huge ld overflows", "overflows", 0, {b, 0, 3, 4, HUGE / 2, CLEMBED_F32}},
      {"offset + extent overflows", "overflows", 0, {b, HUGE - 2, 1, 4, 0, CLEMBED_F32}},
      {"extent in bytes overflows", "overflows", 0, {b, HUGE / 4 + 1, 1, 1, 0, CLEMBED_F32}},
  };
  for (size_t r = 0; r < sizeof matrix_roles / sizeof matrix_roles[0]; r++)
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
      if (bad[k].null_ptr && matrix_roles[r].optional) continue;
      clembed_matrix m = bad[k].m;
      poison(ctx);
      clembed_status s = matrix_roles[r].call(ctx, f, bad[k].null_ptr ? NULL : &m);
      const char *msg = clembed_context_message(ctx);
      EXPECT(s == INVALID, "%s, %s: %s (%s), expected CLEMBED_ERR_INVALID_ARGUMENT", matrix_roles[r].name,
             bad[k].what, clembed_status_string(s), msg);
      EXPECT(strstr(msg, bad[k].msg) != NULL && !strstr(msg, POISON), "%s, %s: message '%s' does not say '%s'", matrix_roles[r].name,
             bad[k].what, msg, bad[k].msg);
    }
  /* The same extents that fit exactly are accepted (the check is not off by one). */
  clembed_matrix fit = {b, 0, 3, 4, 0, CLEMBED_F32}, fit_ld = {b, 0, 3, 3, 4, CLEMBED_F32},
                 fit_off = {b, 9, 1, 3, 0, CLEMBED_F32}, fit_h = {f->buf12h.buffer, 0, 1, 12, 0, CLEMBED_F16};
  OK(ctx, r_write(ctx, f, &fit));
  OK(ctx, r_read(ctx, f, &fit));
  OK(ctx, r_write(ctx, f, &fit_ld));
  OK(ctx, r_init_uniform(ctx, f, &fit_off));
  OK(ctx, r_positional(ctx, f, &fit_h));
  OK(ctx, clembed_finish(ctx));
}

/* ---------------------------------------------------- every ids argument */

typedef clembed_status (*ids_role)(clembed_context *ctx, fx *f, clembed_ids *bad);

static clembed_status i_lookup(clembed_context *c, fx *f, clembed_ids *d) {
  return clembed_lookup(c, &f->table, d, &f->out, 0, NULL, NULL);
}
static clembed_status i_embed_so(clembed_context *c, fx *f, clembed_ids *d) {
  clembed_embed_options o = clembed_embed_defaults();
  o.positions = CLEMBED_POSITIONS_TABLE;
  o.position_table = &f->ptab;
  o.sequence_offsets = d;
  return clembed_embed(c, &f->table, &f->ids, &o, &f->out, 0, NULL, NULL);
}
static clembed_status i_bwd(clembed_context *c, fx *f, clembed_ids *d) {
  return clembed_backward(c, &f->grad, d, NULL, &f->gtab, 0, NULL, NULL);
}
static clembed_status i_bwd_so(clembed_context *c, fx *f, clembed_ids *d) {
  clembed_backward_options o = clembed_backward_defaults();
  o.position_grad = &f->pgrad;
  o.sequence_offsets = d;
  return clembed_backward(c, &f->grad, &f->ids, &o, &f->gtab, 0, NULL, NULL);
}
static clembed_status i_sgd(clembed_context *c, fx *f, clembed_ids *d) {
  return clembed_sgd_update(c, &f->grad, d, 0.5f, NULL, &f->table, 0, NULL, NULL);
}
static clembed_status i_read(clembed_context *c, fx *f, clembed_ids *d) {
  static int64_t host[64];
  (void)f;
  return clembed_ids_read(c, d, host);
}

static const struct {
  const char *name;
  ids_role call;
  int optional;
} ids_roles[] = {
    {"clembed_lookup ids", i_lookup, 0},    {"clembed_embed sequence_offsets", i_embed_so, 1},
    {"clembed_backward ids", i_bwd, 0},     {"clembed_backward sequence_offsets", i_bwd_so, 1},
    {"clembed_sgd_update ids", i_sgd, 0},   {"clembed_ids_read ids", i_read, 0},
};

TU_CASE(bad_ids_arguments) {
  fx *f = &g_fx;
  cl_mem b = f->ids4.buffer; /* 4 I32 = 16 bytes */
  const struct {
    const char *what, *msg;
    int null_ptr;
    clembed_ids d;
  } bad[] = {
      {"NULL pointer", "is NULL", 1, {0}},
      {"NULL buffer with a count", "NULL buffer", 0, {NULL, 0, FN, CLEMBED_I32}},
      {"unknown index type 2", "unknown index type", 0, {b, 0, FN, (clembed_index_type)2}},
      {"unknown index type -1", "unknown index type", 0, {b, 0, FN, (clembed_index_type)-1}},
      {"one id past the end", "buffer holds 16", 0, {b, 1, FN, CLEMBED_I32}},
      {"I64 view of 4 I32", "buffer holds 16", 0, {b, 0, FN, CLEMBED_I64}},
      {"offset + count overflows", "overflows", 0, {b, SIZE_MAX, FN, CLEMBED_I32}},
      {"bytes overflow", "overflows", 0, {b, SIZE_MAX / 8, FN, CLEMBED_I64}},
  };
  for (size_t r = 0; r < sizeof ids_roles / sizeof ids_roles[0]; r++)
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
      if (bad[k].null_ptr && ids_roles[r].optional) continue;
      clembed_ids d = bad[k].d;
      poison(ctx);
      clembed_status s = ids_roles[r].call(ctx, f, bad[k].null_ptr ? NULL : &d);
      const char *msg = clembed_context_message(ctx);
      EXPECT(s == INVALID, "%s, %s: %s (%s), expected CLEMBED_ERR_INVALID_ARGUMENT", ids_roles[r].name,
             bad[k].what, clembed_status_string(s), msg);
      EXPECT(strstr(msg, bad[k].msg) != NULL && !strstr(msg, POISON), "%s, %s: message '%s' does not say '%s'", ids_roles[r].name,
             bad[k].what, msg, bad[k].msg);
    }
  /* sequence_offsets too short for the sequences */
  clembed_ids one = {b, 0, 1, CLEMBED_I32};
  clembed_embed_options o = clembed_embed_defaults();
  o.positions = CLEMBED_POSITIONS_TABLE;
  o.position_table = &f->ptab;
  o.seq_len = 1;
  o.sequence_offsets = &one;
  FAILS_MSG(ctx, INVALID, "sequence_offsets has 1", clembed_embed(ctx, &f->table, &f->ids, &o, &f->out, 0, NULL, NULL));
  /* exactly fitting ids are accepted */
  clembed_ids fit = {b, 0, 4, CLEMBED_I32}, fit64 = {b, 0, 2, CLEMBED_I64}, tail = {b, 3, 1, CLEMBED_I32};
  int64_t h[4];
  int32_t last = -7;
  OK(ctx, clembed_ids_read(ctx, &fit, h));
  OK(ctx, clembed_ids_read(ctx, &fit64, h));
  OK(ctx, clembed_ids_read(ctx, &tail, &last));
  EXPECT(last == 1, "ids read at offset 3: %d", (int)last);
  OK(ctx, clembed_finish(ctx)); /* no failed call above left work or an error behind */
}

/* ------------------------------------------------------ NULL everywhere */

TU_CASE(null_arguments) {
  fx *f = &g_fx;
  float host[64] = {0};
  int32_t ids[4] = {0, 1, 2, 3};
  clembed_matrix m;
  clembed_ids d;
  clembed_context *c2 = (clembed_context *)&m; /* must be overwritten with NULL on failure */

  /* contexts */
  EXPECT(clembed_context_create(NULL, NULL) == INVALID, "create(NULL, NULL)");
  EXPECT(strstr(clembed_last_error_message(), "NULL") != NULL, "last error '%s'", clembed_last_error_message());
  EXPECT(clembed_context_create_from_queue(NULL, &c2) == INVALID && c2 == NULL, "create_from_queue(NULL queue)");
  EXPECT(strstr(clembed_last_error_message(), "queue is NULL") != NULL, "last error '%s'",
         clembed_last_error_message());
  EXPECT(clembed_context_create_from_queue(clembed_context_queue(ctx), NULL) == INVALID,
         "create_from_queue(queue, NULL)");
  clembed_context_destroy(NULL);
  EXPECT(clembed_context_queue(NULL) == NULL, "queue(NULL)");
  EXPECT(clembed_context_device_name(NULL) != NULL && !*clembed_context_device_name(NULL), "device_name(NULL)");
  EXPECT(clembed_context_message(NULL) != NULL && !*clembed_context_message(NULL), "message(NULL)");
  EXPECT(clembed_finish(NULL) == INVALID, "finish(NULL)");
  EXPECT(clembed_last_error_message() != NULL, "last_error_message");

  /* matrices: a NULL context gives INVALID_ARGUMENT (there is no message to set) */
  EXPECT(clembed_matrix_create(NULL, 2, 2, CLEMBED_F32, &m) == INVALID, "matrix_create(NULL ctx)");
  FAILS_MSG(ctx, INVALID, "m is NULL", clembed_matrix_create(ctx, 2, 2, CLEMBED_F32, NULL));
  EXPECT(clembed_matrix_write(NULL, &f->out, host, CLEMBED_F32) == INVALID, "matrix_write(NULL ctx)");
  FAILS_MSG(ctx, INVALID, "host is NULL", clembed_matrix_write(ctx, &f->out, NULL, CLEMBED_F32));
  EXPECT(clembed_matrix_read(NULL, &f->out, host, CLEMBED_F32) == INVALID, "matrix_read(NULL ctx)");
  FAILS_MSG(ctx, INVALID, "host is NULL", clembed_matrix_read(ctx, &f->out, NULL, CLEMBED_F32));
  clembed_matrix_release(NULL);
  memset(&m, 0, sizeof m);
  clembed_matrix_release(&m); /* a zeroed struct: no buffer */
  /* 0 elements: host may be NULL */
  clembed_matrix empty;
  OK(ctx, clembed_matrix_create(ctx, 0, 3, CLEMBED_F32, &empty));
  OK(ctx, clembed_matrix_write(ctx, &empty, NULL, CLEMBED_F32));
  OK(ctx, clembed_matrix_read(ctx, &empty, NULL, CLEMBED_F32));

  /* ids */
  EXPECT(clembed_ids_create(NULL, ids, 4, CLEMBED_I32, &d) == INVALID, "ids_create(NULL ctx)");
  FAILS_MSG(ctx, INVALID, "host is NULL", clembed_ids_create(ctx, NULL, 4, CLEMBED_I32, &d));
  FAILS_MSG(ctx, INVALID, "ids is NULL", clembed_ids_create(ctx, ids, 4, CLEMBED_I32, NULL));
  EXPECT(clembed_ids_read(NULL, &f->ids, host) == INVALID, "ids_read(NULL ctx)");
  FAILS_MSG(ctx, INVALID, "host is NULL", clembed_ids_read(ctx, &f->ids, NULL));
  clembed_ids_release(NULL);
  memset(&d, 0, sizeof d);
  clembed_ids_release(&d);
  clembed_ids none;
  OK(ctx, clembed_ids_create(ctx, NULL, 0, CLEMBED_I64, &none)); /* count 0: host may be NULL */
  OK(ctx, clembed_ids_read(ctx, &none, NULL));

  /* operations with a NULL context */
  clembed_embed_options eo = clembed_embed_defaults();
  clembed_backward_options bo = clembed_backward_defaults();
  EXPECT(clembed_positional(NULL, NULL, 0, &f->out, 0, NULL, NULL) == INVALID, "positional(NULL ctx)");
  EXPECT(clembed_lookup(NULL, &f->table, &f->ids, &f->out, 0, NULL, NULL) == INVALID, "lookup(NULL ctx)");
  EXPECT(clembed_embed(NULL, &f->table, &f->ids, &eo, &f->out, 0, NULL, NULL) == INVALID, "embed(NULL ctx)");
  EXPECT(clembed_backward(NULL, &f->grad, &f->ids, &bo, &f->gtab, 0, NULL, NULL) == INVALID, "backward(NULL ctx)");
  EXPECT(clembed_sgd_update(NULL, &f->grad, &f->ids, 0.5f, &bo, &f->table, 0, NULL, NULL) == INVALID,
         "sgd_update(NULL ctx)");
  EXPECT(clembed_matrix_init_normal(NULL, &f->out, 0.0f, 1.0f, 0, 0, NULL, NULL) == INVALID, "init_normal(NULL ctx)");
  EXPECT(clembed_matrix_init_uniform(NULL, &f->out, 0.0f, 1.0f, 0, 0, NULL, NULL) == INVALID,
         "init_uniform(NULL ctx)");
  /* the defaults behind NULL options: the same as explicit defaults */
  float a[FN * FD], b[FN * FD];
  OK(ctx, clembed_embed(ctx, &f->table, &f->ids, NULL, &f->out, 0, NULL, NULL));
  OK(ctx, clembed_matrix_read(ctx, &f->out, a, CLEMBED_F32));
  OK(ctx, clembed_embed(ctx, &f->table, &f->ids, &eo, &f->out, 0, NULL, NULL));
  OK(ctx, clembed_matrix_read(ctx, &f->out, b, CLEMBED_F32));
  EXPECT(!memcmp(a, b, sizeof a), "embed with NULL options differs from the defaults");
  OK(ctx, clembed_backward(ctx, &f->grad, &f->ids, NULL, &f->gtab, 0, NULL, NULL));
  OK(ctx, clembed_sgd_update(ctx, &f->grad, &f->ids, 0.0f, NULL, &f->gtab, 0, NULL, NULL));
  OK(ctx, clembed_positional(ctx, NULL, 3, &f->out, 0, NULL, NULL));
  /* NULL ids (count 0, no buffer) with a 0-row output: nothing to do */
  clembed_ids nothing = {NULL, 0, 0, CLEMBED_I32};
  clembed_matrix out0;
  OK(ctx, clembed_matrix_create(ctx, 0, FD, CLEMBED_F32, &out0));
  OK(ctx, clembed_lookup(ctx, &f->table, &nothing, &out0, 0, NULL, NULL));
  clembed_matrix grad0 = out0;
  OK(ctx, clembed_backward(ctx, &grad0, &nothing, NULL, &f->gtab, 0, NULL, NULL));
  OK(ctx, clembed_sgd_update(ctx, &grad0, &nothing, 1.0f, NULL, &f->table, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
  clembed_matrix_release(&out0);
  clembed_matrix_release(&empty);
  clembed_ids_release(&none);
}

/* ------------------------------------------------------- event wait lists */

typedef clembed_status (*event_op)(clembed_context *c, fx *f, cl_uint n, const cl_event *w, cl_event *e);

static clembed_status e_positional(clembed_context *c, fx *f, cl_uint n, const cl_event *w, cl_event *e) {
  return clembed_positional(c, NULL, 0, &f->out, n, w, e);
}
static clembed_status e_lookup(clembed_context *c, fx *f, cl_uint n, const cl_event *w, cl_event *e) {
  return clembed_lookup(c, &f->table, &f->ids, &f->out, n, w, e);
}
static clembed_status e_embed(clembed_context *c, fx *f, cl_uint n, const cl_event *w, cl_event *e) {
  clembed_embed_options o = clembed_embed_defaults();
  o.positions = CLEMBED_POSITIONS_TABLE;
  o.position_table = &f->ptab;
  return clembed_embed(c, &f->table, &f->ids, &o, &f->out, n, w, e);
}
static clembed_status e_backward(clembed_context *c, fx *f, cl_uint n, const cl_event *w, cl_event *e) {
  return clembed_backward(c, &f->grad, &f->ids, NULL, &f->gtab, n, w, e);
}
static clembed_status e_backward_atomic(clembed_context *c, fx *f, cl_uint n, const cl_event *w, cl_event *e) {
  clembed_backward_options o = clembed_backward_defaults();
  o.deterministic = 0;
  return clembed_backward(c, &f->grad, &f->ids, &o, &f->gtab, n, w, e);
}
static clembed_status e_sgd(clembed_context *c, fx *f, cl_uint n, const cl_event *w, cl_event *e) {
  return clembed_sgd_update(c, &f->grad, &f->ids, 0.0f, NULL, &f->gtab, n, w, e);
}
static clembed_status e_normal(clembed_context *c, fx *f, cl_uint n, const cl_event *w, cl_event *e) {
  return clembed_matrix_init_normal(c, &f->out, 0.0f, 1.0f, 3, n, w, e);
}
static clembed_status e_uniform(clembed_context *c, fx *f, cl_uint n, const cl_event *w, cl_event *e) {
  return clembed_matrix_init_uniform(c, &f->out, 0.0f, 1.0f, 3, n, w, e);
}

TU_CASE(bad_event_wait_lists) {
  fx *f = &g_fx;
  const struct {
    const char *name;
    event_op op;
  } ops[] = {{"clembed_positional", e_positional}, {"clembed_lookup", e_lookup},
             {"clembed_embed", e_embed},           {"clembed_backward", e_backward},
             {"clembed_backward (atomic)", e_backward_atomic}, {"clembed_sgd_update", e_sgd},
             {"clembed_matrix_init_normal", e_normal},         {"clembed_matrix_init_uniform", e_uniform}};
  cl_context clc = NULL;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_CONTEXT, sizeof clc, &clc, NULL);
  cl_int err;
  cl_event done = clCreateUserEvent(clc, &err);
  EXPECT(err == CL_SUCCESS, "clCreateUserEvent: %d", (int)err);
  clSetUserEventStatus(done, CL_COMPLETE);
  cl_event with_null[2] = {done, NULL};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    cl_event ev = (cl_event)&ev; /* must stay untouched on failure */
    cl_event before = ev;
    poison(ctx);
    clembed_status s = ops[i].op(ctx, f, 1, NULL, &ev);
    EXPECT(s == INVALID && strstr(clembed_context_message(ctx), "event_wait_list is NULL"),
           "%s with a NULL wait list and count 1: %s (%s)", ops[i].name, clembed_status_string(s),
           clembed_context_message(ctx));
    EXPECT(ev == before, "%s wrote its event on failure", ops[i].name);
    s = ops[i].op(ctx, f, 0xFFFFFFFFu, NULL, NULL);
    EXPECT(s == INVALID, "%s with a NULL wait list and count 2^32-1: %s", ops[i].name, clembed_status_string(s));
    poison(ctx);
    s = ops[i].op(ctx, f, 0, &done, NULL);
    EXPECT(s == INVALID && strstr(clembed_context_message(ctx), "num_events_in_wait_list is 0"),
           "%s with a list and count 0: %s (%s)", ops[i].name, clembed_status_string(s),
           clembed_context_message(ctx));
    poison(ctx);
    s = ops[i].op(ctx, f, 2, with_null, NULL);
    EXPECT(s == INVALID && strstr(clembed_context_message(ctx), "event_wait_list[1] is NULL"),
           "%s with a NULL entry: %s (%s)", ops[i].name, clembed_status_string(s), clembed_context_message(ctx));
    /* and a valid list with an event out */
    ev = NULL;
    s = ops[i].op(ctx, f, 1, &done, &ev);
    EXPECT(s == CLEMBED_OK && ev != NULL, "%s with a valid list: %s (%s)", ops[i].name, clembed_status_string(s),
           clembed_context_message(ctx));
    if (ev) {
      EXPECT(clWaitForEvents(1, &ev) == CL_SUCCESS, "%s: waiting for its event", ops[i].name);
      clReleaseEvent(ev);
    }
  }
  OK(ctx, clembed_finish(ctx));
  clReleaseEvent(done);
}

/* --------------------------------------------------- enums and scalars */

/* unknown dtypes, index types, policies, positions, exponents, layouts */
TU_CASE(out_of_range_enums) {
  fx *f = &g_fx;
  clembed_matrix m;
  int32_t h[2] = {0, 1};
  clembed_ids d;
  int first = 0; /* the first value that is no dtype (the list grows) */
  while (strcmp(clembed_dtype_name((clembed_dtype)first), "unknown") != 0) first++;
  const int bad_values[] = {first, -1, 1000, INT_MAX};
  for (size_t k = 0; k < sizeof bad_values / sizeof bad_values[0]; k++) {
    int v = bad_values[k];
    EXPECT(clembed_dtype_size((clembed_dtype)v) == 0, "dtype_size(%d)", v);
    FAILS_MSG(ctx, INVALID, "unknown dtype", clembed_matrix_create(ctx, 2, 2, (clembed_dtype)v, &m));
    FAILS_MSG(ctx, INVALID, "unknown host dtype", clembed_matrix_write(ctx, &f->out, h, (clembed_dtype)v));
    FAILS_MSG(ctx, INVALID, "unknown host dtype", clembed_matrix_read(ctx, &f->out, h, (clembed_dtype)v));
    int iv = v == first ? 2 : v; /* 2 is the first unknown index type */
    FAILS_MSG(ctx, INVALID, "unknown index type", clembed_ids_create(ctx, h, 2, (clembed_index_type)iv, &d));

    int pv = v == first ? 4 : v; /* 4 is the first unknown policy */
    clembed_embed_options eo = clembed_embed_defaults();
    eo.policy = (clembed_index_policy)pv;
    FAILS_MSG(ctx, INVALID, "unknown index policy", clembed_embed(ctx, &f->table, &f->ids, &eo, &f->out, 0, NULL, NULL));
    clembed_backward_options bo = clembed_backward_defaults();
    bo.policy = (clembed_index_policy)pv;
    FAILS_MSG(ctx, INVALID, "unknown index policy",
              clembed_backward(ctx, &f->grad, &f->ids, &bo, &f->gtab, 0, NULL, NULL));
    FAILS_MSG(ctx, INVALID, "unknown index policy",
              clembed_sgd_update(ctx, &f->grad, &f->ids, 0.5f, &bo, &f->table, 0, NULL, NULL));

    eo = clembed_embed_defaults();
    eo.positions = (clembed_positions)v;
    FAILS_MSG(ctx, INVALID, "unknown positions", clembed_embed(ctx, &f->table, &f->ids, &eo, &f->out, 0, NULL, NULL));

    int sv = v == first ? 2 : v; /* 2 is the first unknown exponent and layout */
    clembed_sinusoid s = {sizeof(clembed_sinusoid), 10000.0, (clembed_exponent)sv, CLEMBED_LAYOUT_INTERLEAVED};
    FAILS_MSG(ctx, INVALID, "exponent", clembed_positional(ctx, &s, 0, &f->out, 0, NULL, NULL));
    eo = clembed_embed_defaults();
    eo.positions = CLEMBED_POSITIONS_SINUSOID;
    eo.sinusoid = s;
    FAILS_MSG(ctx, INVALID, "exponent", clembed_embed(ctx, &f->table, &f->ids, &eo, &f->out, 0, NULL, NULL));
    s.exponent = CLEMBED_EXPONENT_PAIR;
    s.layout = (clembed_layout)sv;
    FAILS_MSG(ctx, INVALID, "layout", clembed_positional(ctx, &s, 0, &f->out, 0, NULL, NULL));
    eo.sinusoid = s;
    FAILS_MSG(ctx, INVALID, "layout", clembed_embed(ctx, &f->table, &f->ids, &eo, &f->out, 0, NULL, NULL));
  }
  clembed_sinusoid ih = {sizeof(clembed_sinusoid), 10000.0, CLEMBED_EXPONENT_INDEX, CLEMBED_LAYOUT_HALVES};
  FAILS_MSG(ctx, INVALID, "HALVES", clembed_positional(ctx, &ih, 0, &f->out, 0, NULL, NULL));

}

/* non-finite and out-of-range scalars */
TU_CASE(non_finite_and_out_of_range_scalars) {
  fx *f = &g_fx;
  const double bases[] = {0.0, -1.0, NAN, INFINITY, -INFINITY};
  for (size_t k = 0; k < sizeof bases / sizeof bases[0]; k++) {
    clembed_sinusoid s = {sizeof(clembed_sinusoid), bases[k], CLEMBED_EXPONENT_PAIR, CLEMBED_LAYOUT_INTERLEAVED};
    FAILS_MSG(ctx, INVALID, "base", clembed_positional(ctx, &s, 0, &f->out, 0, NULL, NULL));
  }
  const float drops[] = {1.0f, -0.25f, NAN, INFINITY, 2.0f};
  for (size_t k = 0; k < sizeof drops / sizeof drops[0]; k++) {
    clembed_embed_options eo = clembed_embed_defaults();
    eo.dropout = drops[k];
    FAILS_MSG(ctx, INVALID, "dropout", clembed_embed(ctx, &f->table, &f->ids, &eo, &f->out, 0, NULL, NULL));
    clembed_backward_options bo = clembed_backward_defaults();
    bo.dropout = drops[k];
    FAILS_MSG(ctx, INVALID, "dropout", clembed_backward(ctx, &f->grad, &f->ids, &bo, &f->gtab, 0, NULL, NULL));
    FAILS_MSG(ctx, INVALID, "dropout",
              clembed_sgd_update(ctx, &f->grad, &f->ids, 0.5f, &bo, &f->table, 0, NULL, NULL));
  }
  FAILS_MSG(ctx, INVALID, "nan", clembed_matrix_init_uniform(ctx, &f->out, NAN, 1.0f, 0, 0, NULL, NULL));
  FAILS_MSG(ctx, INVALID, "finite", clembed_matrix_init_uniform(ctx, &f->out, -INFINITY, INFINITY, 0, 0, NULL, NULL));
  FAILS_MSG(ctx, INVALID, "low", clembed_matrix_init_uniform(ctx, &f->out, 1.0f, -1.0f, 0, 0, NULL, NULL));
  FAILS_MSG(ctx, INVALID, "std", clembed_matrix_init_normal(ctx, &f->out, 0.0f, -1.0f, 0, 0, NULL, NULL));
  FAILS(ctx, INVALID, clembed_matrix_init_normal(ctx, &f->out, 0.0f, NAN, 0, 0, NULL, NULL));
  FAILS(ctx, INVALID, clembed_matrix_init_normal(ctx, &f->out, INFINITY, 1.0f, 0, 0, NULL, NULL));

}

/* padding ids outside the table (-rows .. -1 count from the end; INT64_MIN is "no padding") */
TU_CASE(padding_idx_outside_the_table) {
  fx *f = &g_fx;
  const int64_t pads[] = {FV, -FV - 1, INT64_MAX, INT64_MIN + 1, (int64_t)1 << 32};
  for (size_t k = 0; k < sizeof pads / sizeof pads[0]; k++) {
    clembed_embed_options eo = clembed_embed_defaults();
    eo.padding_idx = pads[k];
    FAILS_MSG(ctx, INVALID, "padding_idx", clembed_embed(ctx, &f->table, &f->ids, &eo, &f->out, 0, NULL, NULL));
    clembed_backward_options bo = clembed_backward_defaults();
    bo.padding_idx = pads[k];
    FAILS_MSG(ctx, INVALID, "padding_idx", clembed_backward(ctx, &f->grad, &f->ids, &bo, &f->gtab, 0, NULL, NULL));
    FAILS_MSG(ctx, INVALID, "padding_idx",
              clembed_sgd_update(ctx, &f->grad, &f->ids, 0.5f, &bo, &f->table, 0, NULL, NULL));
  }

}

/* mismatched shapes and dtypes */
TU_CASE(mismatched_shapes_and_dtypes) {
  fx *f = &g_fx;
  clembed_matrix wrong = f->out;
  wrong.rows = FN - 1;
  FAILS_MSG(ctx, INVALID, "out is", clembed_lookup(ctx, &f->table, &f->ids, &wrong, 0, NULL, NULL));
  wrong = f->out;
  wrong.cols = FD - 1;
  FAILS_MSG(ctx, INVALID, "out is", clembed_lookup(ctx, &f->table, &f->ids, &wrong, 0, NULL, NULL));
  FAILS_MSG(ctx, INVALID, "grad_out is", clembed_backward(ctx, &wrong, &f->ids, NULL, &f->gtab, 0, NULL, NULL));
  FAILS_MSG(ctx, INVALID, "grad_out is", clembed_sgd_update(ctx, &wrong, &f->ids, 1.0f, NULL, &f->table, 0, NULL, NULL));
  clembed_matrix p3 = f->ptab;
  p3.cols = FD - 1;
  clembed_embed_options eo = clembed_embed_defaults();
  eo.positions = CLEMBED_POSITIONS_TABLE;
  eo.position_table = &p3;
  FAILS_MSG(ctx, INVALID, "position_table has", clembed_embed(ctx, &f->table, &f->ids, &eo, &f->out, 0, NULL, NULL));
  clembed_matrix h16 = {f->buf12h.buffer, 0, FV, 2, 0, CLEMBED_F16};
  clembed_matrix g2 = {f->grad.buffer, 0, FN, 2, 0, CLEMBED_F32};
  FAILS_MSG(ctx, INVALID, "must be F32", clembed_backward(ctx, &g2, &f->ids, NULL, &h16, 0, NULL, NULL));
  clembed_backward_options bo = clembed_backward_defaults();
  clembed_matrix pg16 = {f->buf12h.buffer, 0, 3, FD, 0, CLEMBED_F16};
  bo.position_grad = &pg16;
  FAILS_MSG(ctx, INVALID, "position_grad must be F32",
            clembed_backward(ctx, &f->grad, &f->ids, &bo, &f->gtab, 0, NULL, NULL));
  clembed_matrix pgc = f->pgrad;
  pgc.cols = FD - 1;
  bo.position_grad = &pgc;
  FAILS_MSG(ctx, INVALID, "position_grad has", clembed_backward(ctx, &f->grad, &f->ids, &bo, &f->gtab, 0, NULL, NULL));

}

/* unknown status codes still have a string */
TU_CASE(unknown_status_codes_have_strings) {
  const int codes[] = {1, -1, -999, -1000, -1001, -2000, -2007, -3000, INT_MIN, INT_MAX};
  for (size_t k = 0; k < sizeof codes / sizeof codes[0]; k++) {
    const char *s = clembed_status_string((clembed_status)codes[k]);
    EXPECT(s != NULL && *s, "status_string(%d)", codes[k]);
  }
}

/* ---------------------------------------------------------- size overflow */

TU_CASE(overflowing_sizes) {
  fx *f = &g_fx;
  clembed_matrix m = {0};
  int64_t h[4] = {0};
  clembed_ids d = {0};
  FAILS_MSG(ctx, INVALID, "overflows", clembed_matrix_create(ctx, SIZE_MAX / 2 + 1, 2, CLEMBED_F32, &m));
  FAILS_MSG(ctx, INVALID, "overflows", clembed_matrix_create(ctx, SIZE_MAX / 4 + 1, 1, CLEMBED_F32, &m));
  FAILS_MSG(ctx, INVALID, "overflows", clembed_matrix_create(ctx, SIZE_MAX / 2 + 1, 1, CLEMBED_F16, &m));
  FAILS_MSG(ctx, INVALID, "overflows", clembed_matrix_create(ctx, (size_t)1 << 40, (size_t)1 << 40, CLEMBED_BF16, &m));
  FAILS_MSG(ctx, INVALID, "overflows", clembed_matrix_create(ctx, SIZE_MAX, SIZE_MAX, CLEMBED_F32, &m));
  EXPECT(m.buffer == NULL, "a failed matrix_create wrote its matrix");
  /* representable but larger than any device allows */
  FAILS_MSG(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "largest allocation",
            clembed_matrix_create(ctx, (size_t)1 << 31, (size_t)1 << 20, CLEMBED_F32, &m));
  FAILS_MSG(ctx, INVALID, "overflows", clembed_ids_create(ctx, h, SIZE_MAX / 8 + 1, CLEMBED_I64, &d));
  FAILS_MSG(ctx, INVALID, "overflows", clembed_ids_create(ctx, h, SIZE_MAX / 4 + 1, CLEMBED_I32, &d));
  FAILS_MSG(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "largest allocation",
            clembed_ids_create(ctx, h, (size_t)1 << 50, CLEMBED_I64, &d));
  EXPECT(d.buffer == NULL, "a failed ids_create wrote its ids");
  /* positions end at 2^32 (and nothing overflows size_t on the way) */
  FAILS_MSG(ctx, INVALID, "2^32", clembed_positional(ctx, NULL, SIZE_MAX - 1, &f->out, 0, NULL, NULL));
  FAILS_MSG(ctx, INVALID, "2^32", clembed_positional(ctx, NULL, SIZE_MAX - (FN - 1), &f->out, 0, NULL, NULL));
  FAILS_MSG(ctx, INVALID, "2^32", clembed_positional(ctx, NULL, ((size_t)1 << 32) - (FN - 1), &f->out, 0, NULL, NULL));
  OK(ctx, clembed_positional(ctx, NULL, ((size_t)1 << 32) - FN, &f->out, 0, NULL, NULL)); /* fits exactly */
  OK(ctx, clembed_finish(ctx));
}

/* --------------------------------------------- out-of-range ids, all paths */

static const char *const POL[] = {"CHECK", "CLAMP", "ZERO", "WRAP"};

/* Checks the deferred result of the last operation: INDEX_OUT_OF_RANGE naming
 * ids[first] = value, or OK when first < 0. */
static void expect_deferred(clembed_context *ctx, const char *what, long first, int64_t value, size_t rows) {
  poison(ctx);
  clembed_status s = clembed_finish(ctx);
  if (first < 0) {
    EXPECT(s == CLEMBED_OK, "%s: finish: %s (%s), expected OK", what, clembed_status_string(s),
           clembed_context_message(ctx));
    return;
  }
  char want[128];
  int wrap = strstr(what, " WRAP ") != NULL; /* WRAP's range is [-rows, rows) */
  snprintf(want, sizeof want, "ids[%ld] = %lld is outside [%s%zu, %zu)", first, (long long)value, wrap ? "-" : "",
           wrap ? rows : 0, rows);
  EXPECT(s == CLEMBED_ERR_INDEX_OUT_OF_RANGE, "%s: finish: %s (%s), expected INDEX_OUT_OF_RANGE", what,
         clembed_status_string(s), clembed_context_message(ctx));
  EXPECT(strstr(clembed_context_message(ctx), want) != NULL, "%s: message '%s' lacks '%s'", what,
         clembed_context_message(ctx), want);
  EXPECT(clembed_finish(ctx) == CLEMBED_OK, "%s: the deferred error was not cleared", what);
}

/* Ids, as int64 values; for I32 they are what the buffer holds (sign-extended). */
static size_t hostile_ids(clembed_index_type it, int64_t rows, int64_t *v) {
  size_t n = 0;
  v[n++] = 0;
  v[n++] = rows - 1;
  v[n++] = -1;
  v[n++] = rows; /* first bad for CHECK, WRAP: index 3 */
  v[n++] = -rows - 1;
  v[n++] = -rows;
  v[n++] = 2 % (rows ? rows : 1);
  if (it == CLEMBED_I64) {
    v[n++] = INT64_MAX;
    v[n++] = INT64_MIN;
    v[n++] = (int64_t)1 << 32;          /* a naive (int) cast makes this 0 */
    v[n++] = ((int64_t)1 << 32) + 1;    /* ... and this 1 */
    v[n++] = -((int64_t)1 << 32);
    v[n++] = rows ? INT64_MAX - rows + 1 : INT64_MAX - 1; /* overflows id + rows */
    v[n++] = INT64_MIN + 1;
  } else {
    v[n++] = INT32_MAX;
    v[n++] = INT32_MIN;
    v[n++] = INT32_MAX - 1;
    v[n++] = INT32_MIN + 1;
    v[n++] = 65536;
    v[n++] = -65536;
  }
  v[n++] = 1 % (rows ? rows : 1);
  v[n++] = 1 % (rows ? rows : 1);
  return n;
}

static void make_ids(clembed_context *ctx, clembed_index_type it, const int64_t *v, size_t n, clembed_ids *d) {
  if (it == CLEMBED_I64) {
    OK(ctx, clembed_ids_create(ctx, v, n, CLEMBED_I64, d));
  } else {
    int32_t w[64];
    for (size_t i = 0; i < n; i++) w[i] = (int32_t)v[i];
    OK(ctx, clembed_ids_create(ctx, w, n, CLEMBED_I32, d));
  }
}

/* One forward with hostile ids: exact output, untouched guards. */
static void forward_case(clembed_context *ctx, clembed_index_type it, clembed_index_policy pol, size_t V, size_t D,
                         clembed_dtype tdt, int64_t pad) {
  int64_t v[64];
  size_t n = hostile_ids(it, (int64_t)V, v);
  char what[160];
  snprintf(what, sizeof what, "forward %s %s V=%zu D=%zu dtype %d padding %lld", it == CLEMBED_I64 ? "I64" : "I32",
           POL[pol], V, D, (int)tdt, (long long)pad);
  float *tv = malloc((V * D + 1) * sizeof *tv);
  for (size_t i = 0; i < V * D; i++) tv[i] = (float)(i / D + 1) + 0.25f * (float)(i % D);
  guarded table, out;
  make_guarded(ctx, V, D, tdt, tv, &table);
  make_guarded(ctx, n, D, tdt, NULL, &out);
  clembed_ids d;
  make_ids(ctx, it, v, n, &d);
  clembed_embed_options o = clembed_embed_defaults();
  o.policy = pol;
  o.scale = 2.0f;
  o.padding_idx = pad;
  OK(ctx, clembed_embed(ctx, &table.m, &d, &o, &out.m, 0, NULL, NULL));
  long first = -1;
  int64_t padn = ref_padding_row(pad, (int64_t)V);
  for (size_t i = 0; i < n; i++) {
    int bad;
    ref_resolve(v[i], (int64_t)V, pol, padn, &bad);
    if (bad && first < 0) first = (long)i;
  }
  expect_deferred(ctx, what, first, first >= 0 ? v[first] : 0, V);
  float *got = read_guarded(ctx, &out, what);
  int shown = 0;
  for (size_t i = 0; i < n; i++) {
    int bad;
    int64_t r = ref_resolve(v[i], (int64_t)V, pol, padn, &bad);
    for (size_t c = 0; c < D; c++) {
      float want = ref_forward(2.0f, r >= 0 ? &tv[r * D + c] : NULL, NULL, 0.0f, 1);
      if (got[i * D + c] != want && shown++ < 4)
        EXPECT(0, "%s: out[%zu][%zu] (id %lld) = %g, expected %g", what, i, c, (long long)v[i],
               (double)got[i * D + c], (double)want);
    }
  }
  if (!shown) EXPECT(1, "values");
  free(got);
  got = read_guarded(ctx, &table, what); /* the table is untouched */
  EXPECT(!memcmp(got, tv, V * D * sizeof *tv), "%s: the table changed", what);
  free(got);
  free(tv);
  clembed_ids_release(&d);
  clembed_matrix_release(&table.m);
  clembed_matrix_release(&out.m);
}

/* One backward (or SGD step) with hostile ids: exact table gradient or table,
 * untouched guards and rows. */
static void backward_case(clembed_context *ctx, clembed_index_type it, clembed_index_policy pol, size_t V, size_t D,
                          clembed_dtype tdt, int sgd, int deterministic, int accumulate, int freq, int64_t pad) {
  int64_t v[64];
  size_t n = hostile_ids(it, (int64_t)V, v);
  char what[200];
  snprintf(what, sizeof what, "%s %s %s V=%zu D=%zu dtype %d det %d acc %d freq %d padding %lld",
           sgd ? "sgd" : "backward", it == CLEMBED_I64 ? "I64" : "I32", POL[pol], V, D, (int)tdt, deterministic,
           accumulate, freq, (long long)pad);
  if (!sgd) tdt = CLEMBED_F32;
  float *gv = malloc((n * D + 1) * sizeof *gv), *tv = malloc((V * D + 1) * sizeof *tv);
  for (size_t i = 0; i < n * D; i++) gv[i] = 0.125f * (float)(i % 13 + 1) - 0.5f * (float)(i % D);
  for (size_t i = 0; i < V * D; i++) tv[i] = (float)(i / D) - 0.25f * (float)(i % D);
  guarded grad, target;
  make_guarded(ctx, n, D, CLEMBED_F32, gv, &grad);
  make_guarded(ctx, V, D, tdt, tv, &target);
  clembed_ids d;
  make_ids(ctx, it, v, n, &d);
  clembed_backward_options o = clembed_backward_defaults();
  o.policy = pol;
  o.scale = 2.0f;
  o.padding_idx = pad;
  o.deterministic = deterministic;
  o.accumulate = accumulate;
  o.scale_grad_by_freq = freq;
  const float lr = 0.5f;
  if (sgd) OK(ctx, clembed_sgd_update(ctx, &grad.m, &d, lr, &o, &target.m, 0, NULL, NULL));
  else OK(ctx, clembed_backward(ctx, &grad.m, &d, &o, &target.m, 0, NULL, NULL));

  /* reference: the first bad id, then the rows and counts */
  int64_t padn = ref_padding_row(pad, (int64_t)V);
  long first = -1;
  for (size_t i = 0; i < n; i++) {
    int bad;
    ref_resolve(v[i], (int64_t)V, pol, padn, &bad);
    if (bad && first < 0) first = (long)i;
  }
  expect_deferred(ctx, what, first, first >= 0 ? v[first] : 0, V);
  float *got = read_guarded(ctx, &target, what);
  float *rows = malloc((V * D + 1) * sizeof *rows);
  uint32_t *cnt = malloc((V + 1) * sizeof *cnt);
  ref_backward_rows(gv, v, n, D, V, &o, rows, cnt);
  int shown = 0;
  for (size_t r = 0; r < V; r++) {
    size_t count = cnt[r];
    for (size_t c = 0; c < D; c++) {
      float g = rows[r * D + c];
      float old = tv[r * D + c], want;
      if (sgd) want = count ? ref_sgd(old, lr, g, tdt) : ref_round(old, tdt);
      else if (accumulate) want = count ? old + g : old;
      else want = count ? g : 0.0f;
      float have = got[r * D + c];
      /* exact, but the atomic path with scale_grad_by_freq divides each term */
      /* exact; with scale_grad_by_freq within the division's rounding (the atomic
       * path divides each term, and a device may not divide correctly rounded) */
      int ok = freq ? fabsf(have - want) <= 1e-6f * (1.0f + fabsf(want)) : have == want;
      if (!ok && shown++ < 4)
        EXPECT(0, "%s: row %zu col %zu = %.9g, expected %.9g (count %zu)", what, r, c, (double)have, (double)want,
               count);
    }
  }
  if (!shown) EXPECT(1, "values");
  free(rows);
  free(cnt);
  free(got);
  got = read_guarded(ctx, &grad, what); /* grad_out is untouched */
  EXPECT(!memcmp(got, gv, n * D * sizeof *gv), "%s: grad_out changed", what);
  free(got);
  free(gv);
  free(tv);
  clembed_ids_release(&d);
  clembed_matrix_release(&grad.m);
  clembed_matrix_release(&target.m);
}

TU_CASE(bad_ids_every_policy_forward_backward_sgd) {
  const clembed_index_type its[2] = {CLEMBED_I32, CLEMBED_I64};
  const size_t dims[2] = {3, 8}; /* one column per work-item, and four */
  for (int a = 0; a < 2; a++)
    for (int p = 0; p < 4; p++)
      for (int k = 0; k < 2; k++) {
        clembed_index_type it = its[a];
        clembed_index_policy pol = (clembed_index_policy)p;
        size_t D = dims[k];
        clembed_dtype tdt = a == 0 ? (k == 0 ? CLEMBED_F32 : CLEMBED_F16) : (k == 0 ? CLEMBED_BF16 : CLEMBED_F32);
        int64_t pad = (p + k) % 2 ? 3 : CLEMBED_NO_PADDING;
        forward_case(ctx, it, pol, 5, D, tdt, pad);
        backward_case(ctx, it, pol, 5, D, tdt, 0, 1, 1, 0, pad);
        backward_case(ctx, it, pol, 5, D, tdt, 0, 0, 0, 1, pad);
        backward_case(ctx, it, pol, 5, D, tdt, 1, 1, 1, 0, pad);
        if (!tu_small) {
          backward_case(ctx, it, pol, 5, D, tdt, 0, 1, 0, 1, -2);
          backward_case(ctx, it, pol, 5, D, tdt, 0, 0, 1, 0, CLEMBED_NO_PADDING);
          backward_case(ctx, it, pol, 5, D, tdt, 1, 1, 1, 1, -5);
        }
      }
}

/* an empty table: every id is outside it (CLAMP has nowhere to clamp to) */
TU_CASE(bad_ids_empty_table) {
  for (int p = 0; p < 4; p++) {
    forward_case(ctx, CLEMBED_I64, (clembed_index_policy)p, 0, 4, CLEMBED_F32, CLEMBED_NO_PADDING);
    backward_case(ctx, CLEMBED_I64, (clembed_index_policy)p, 0, 4, CLEMBED_F32, 0, 1, 1, 0, CLEMBED_NO_PADDING);
    backward_case(ctx, CLEMBED_I32, (clembed_index_policy)p, 0, 4, CLEMBED_F32, 0, 0, 0, 1, CLEMBED_NO_PADDING);
    backward_case(ctx, CLEMBED_I32, (clembed_index_policy)p, 0, 4, CLEMBED_F16, 1, 1, 1, 0, CLEMBED_NO_PADDING);
  }
}

/* a table of 0 columns: nothing is written, but every id is still checked */
TU_CASE(bad_ids_zero_column_table) {
  for (int p = 0; p < 4; p++) {
    forward_case(ctx, CLEMBED_I32, (clembed_index_policy)p, 5, 0, CLEMBED_F32, CLEMBED_NO_PADDING);
    forward_case(ctx, CLEMBED_I64, (clembed_index_policy)p, 5, 0, CLEMBED_F16, 3);
    backward_case(ctx, CLEMBED_I32, (clembed_index_policy)p, 5, 0, CLEMBED_F32, 0, 1, 1, 0, CLEMBED_NO_PADDING);
    backward_case(ctx, CLEMBED_I64, (clembed_index_policy)p, 5, 0, CLEMBED_F32, 0, 0, 0, 1, 3);
    backward_case(ctx, CLEMBED_I64, (clembed_index_policy)p, 5, 0, CLEMBED_F16, 1, 1, 1, 0, CLEMBED_NO_PADDING);
  }
}

TU_CASE(bad_ids_one_row_table) {
  for (int p = 0; p < 4; p++) {
    forward_case(ctx, CLEMBED_I64, (clembed_index_policy)p, 1, 5, CLEMBED_F32, CLEMBED_NO_PADDING);
    backward_case(ctx, CLEMBED_I64, (clembed_index_policy)p, 1, 5, CLEMBED_F32, 1, 1, 1, 0, CLEMBED_NO_PADDING);
  }
}

/* ------------------------------------------------ positions out of range */

/* The message names "token k" (not token k0, k1, ...). */
static int names_token(const char *m, int k) {
  char want[32];
  int n = snprintf(want, sizeof want, "token %d", k);
  for (const char *p = strstr(m, want); p; p = strstr(p + 1, want))
    if (p[n] < '0' || p[n] > '9') return 1;
  return 0;
}

TU_CASE(bad_positions_forward_and_backward) {
  enum { V = 5, D = 4, P = 4, L = 2, NSEQ = 6, N = NSEQ * L };
  const int64_t so64[NSEQ] = {0, 3, INT64_MAX, INT64_MIN, -1, 2};
  const int32_t so32[NSEQ] = {0, 3, INT32_MAX, INT32_MIN, -1, 2};
  float tv[V * D], pv[P * D], gv[N * D];
  int32_t ids[N];
  for (int i = 0; i < V * D; i++) tv[i] = (float)i;
  for (int i = 0; i < P * D; i++) pv[i] = 100.0f + (float)i;
  for (int i = 0; i < N * D; i++) gv[i] = 0.25f * (float)(i + 1);
  for (int i = 0; i < N; i++) ids[i] = i % V;
  for (int w = 0; w < 2; w++) {
    const char *what = w ? "positions I64 sequence_offsets" : "positions I32 sequence_offsets";
    guarded table, ptab, out, grad, gtab, pgrad;
    make_guarded(ctx, V, D, CLEMBED_F32, tv, &table);
    make_guarded(ctx, P, D, w ? CLEMBED_F16 : CLEMBED_F32, pv, &ptab);
    make_guarded(ctx, N, D, CLEMBED_F32, NULL, &out);
    clembed_ids d, so;
    OK(ctx, clembed_ids_create(ctx, ids, N, CLEMBED_I32, &d));
    if (w) OK(ctx, clembed_ids_create(ctx, so64, NSEQ, CLEMBED_I64, &so));
    else OK(ctx, clembed_ids_create(ctx, so32, NSEQ, CLEMBED_I32, &so));
    clembed_embed_options o = clembed_embed_defaults();
    o.positions = CLEMBED_POSITIONS_TABLE;
    o.position_table = &ptab.m;
    o.seq_len = L;
    o.sequence_offsets = &so;
    OK(ctx, clembed_embed(ctx, &table.m, &d, &o, &out.m, 0, NULL, NULL));
    FAILS_MSG(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "token 3 is at position 4", clembed_finish(ctx));
    float *got = read_guarded(ctx, &out, what);
    int shown = 0;
    for (int i = 0; i < N; i++) {
      int64_t first = w ? so64[i / L] : so32[i / L];
      uint64_t p = (uint64_t)first + (uint64_t)(i % L);
      int ok = first >= 0 && p < P;
      for (int c = 0; c < D; c++) {
        float want = ref_forward(1.0f, &tv[ids[i] * D + c], ok ? &pv[p * D + c] : NULL, 0.0f, 1);
        if (got[i * D + c] != want && shown++ < 4)
          EXPECT(0, "%s: out[%d][%d] = %g, expected %g", what, i, c, (double)got[i * D + c], (double)want);
      }
    }
    free(got);
    /* the backward's position gradient over the same positions */
    make_guarded(ctx, N, D, CLEMBED_F32, gv, &grad);
    make_guarded(ctx, V, D, CLEMBED_F32, NULL, &gtab);
    float zero[P * D] = {0};
    make_guarded(ctx, P, D, CLEMBED_F32, zero, &pgrad);
    clembed_backward_options bo = clembed_backward_defaults();
    bo.seq_len = L;
    bo.sequence_offsets = &so;
    bo.position_grad = &pgrad.m;
    OK(ctx, clembed_backward(ctx, &grad.m, &d, &bo, &gtab.m, 0, NULL, NULL));
    FAILS_MSG(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "token 3 is at position 4", clembed_finish(ctx));
    got = read_guarded(ctx, &pgrad, what);
    int64_t starts[NSEQ];
    for (int b = 0; b < NSEQ; b++) starts[b] = w ? so64[b] : so32[b];
    float want_pg[P * D] = {0};
    ref_backward_positions(gv, N, D, P, &bo, starts, want_pg);
    shown = 0;
    for (int p = 0; p < P; p++)
      for (int c = 0; c < D; c++) {
        float s = want_pg[p * D + c];
        if (got[p * D + c] != s && shown++ < 4)
          EXPECT(0, "%s: position_grad[%d][%d] = %g, expected %g", what, p, c, (double)got[p * D + c], (double)s);
      }
    free(got);
    got = read_guarded(ctx, &gtab, what);
    free(got);
    /* a sinusoid with the same offsets: no crash, negative starts reported */
    o.positions = CLEMBED_POSITIONS_SINUSOID;
    o.position_table = NULL;
    OK(ctx, clembed_embed(ctx, &table.m, &d, &o, &out.m, 0, NULL, NULL));
    clembed_status s = clembed_finish(ctx);
    EXPECT(s == CLEMBED_ERR_INDEX_OUT_OF_RANGE, "%s: sinusoid with negative sequence starts: %s (%s)", what,
           clembed_status_string(s), clembed_context_message(ctx));
    got = read_guarded(ctx, &out, what);
    free(got);

    /* position_offset far outside the position table, without sequence offsets */
    /* (past 2^63 - 1 a position is a bad position too: positions are signed on the device) */
    const size_t offsets[] = {SIZE_MAX, (size_t)1 << 63, (size_t)INT64_MAX, (size_t)1 << 62, P - 1};
    for (size_t k = 0; k < sizeof offsets / sizeof offsets[0]; k++) {
      o = clembed_embed_defaults();
      o.positions = CLEMBED_POSITIONS_TABLE;
      o.position_table = &ptab.m;
      o.seq_len = L;
      o.position_offset = offsets[k];
      OK(ctx, clembed_embed(ctx, &table.m, &d, &o, &out.m, 0, NULL, NULL));
      poison(ctx);
      s = clembed_finish(ctx);
      const char *m = clembed_context_message(ctx);
      EXPECT(s == CLEMBED_ERR_INDEX_OUT_OF_RANGE && names_token(m, offsets[k] == P - 1 ? 1 : 0) &&
                 strstr(m, "position"),
             "%s: position_offset %zu: %s (%s)", what, offsets[k], clembed_status_string(s), m);
      /* no sequence_offsets were given: the message must not blame them */
      EXPECT(!strstr(m, "sequence_offsets"), "%s: position_offset %zu without sequence_offsets: message '%s'", what,
             offsets[k], m);
      got = read_guarded(ctx, &out, what);
      free(got);
      bo = clembed_backward_defaults();
      bo.seq_len = L;
      bo.position_offset = offsets[k];
      bo.position_grad = &pgrad.m;
      OK(ctx, clembed_backward(ctx, &grad.m, &d, &bo, &gtab.m, 0, NULL, NULL));
      s = clembed_finish(ctx);
      EXPECT(s == CLEMBED_ERR_INDEX_OUT_OF_RANGE, "%s: backward position_offset %zu: %s (%s)", what, offsets[k],
             clembed_status_string(s), clembed_context_message(ctx));
      got = read_guarded(ctx, &pgrad, what);
      free(got);
    }
    /* the sinusoid takes positions below 2^32: an offset that reaches 2^32 is refused on the host */
    o = clembed_embed_defaults();
    o.positions = CLEMBED_POSITIONS_SINUSOID;
    o.seq_len = L;
    const size_t end32 = (size_t)1 << 32;
    const size_t refused[] = {SIZE_MAX, (size_t)1 << 63, end32, end32 - L + 1};
    for (size_t k = 0; k < sizeof refused / sizeof *refused; k++) {
      o.position_offset = refused[k];
      FAILS_MSG(ctx, INVALID, "2^32", clembed_embed(ctx, &table.m, &d, &o, &out.m, 0, NULL, NULL));
    }
    o.position_offset = end32 - L; /* the last sequence ends at 2^32 - 1 */
    OK(ctx, clembed_embed(ctx, &table.m, &d, &o, &out.m, 0, NULL, NULL));
    OK(ctx, clembed_finish(ctx));
    got = read_guarded(ctx, &out, what);
    free(got);
    /* ...and one that reaches it through sequence_offsets is a deferred error naming the token and sequence */
    {
      const int64_t so_far[NSEQ] = {0, (int64_t)end32 - 2, (int64_t)end32 - 1, 5, 6, 7};
      clembed_ids sf;
      OK(ctx, clembed_ids_create(ctx, so_far, NSEQ, CLEMBED_I64, &sf));
      o.position_offset = 0;
      o.sequence_offsets = &sf;
      OK(ctx, clembed_embed(ctx, &table.m, &d, &o, &out.m, 0, NULL, NULL));
      FAILS_MSG(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "token 5 is at position 4294967296 (sequence_offsets[2]",
                clembed_finish(ctx));
      clembed_error_detail det;
      OK(ctx, clembed_context_error(ctx, &det));
      EXPECT(!strcmp(det.argument, "sequence_offsets") && det.index == 2 && det.value == (int64_t)end32 - 1,
             "%s: detail of a sequence reaching 2^32: %s[%lld] = %lld", what, det.argument, (long long)det.index,
             (long long)det.value);
      got = read_guarded(ctx, &out, what);
      /* token 5's positional part is zero; tokens 2, 3 and 4 (positions 2^32 - 2, 2^32 - 1) carry theirs */
      for (int c = 0; c < D; c++)
        EXPECT(got[5 * D + c] == tv[ids[5] * D + c], "%s: token at 2^32: out[5][%d] = %g, want the token row %g", what,
               c, (double)got[5 * D + c], (double)tv[ids[5] * D + c]);
      EXPECT(got[4 * D] != tv[ids[4] * D], "%s: token at 2^32 - 1 got no sinusoid", what);
      free(got);
      clembed_ids_release(&sf);
    }

    clembed_ids_release(&d);
    clembed_ids_release(&so);
    clembed_matrix_release(&table.m);
    clembed_matrix_release(&ptab.m);
    clembed_matrix_release(&out.m);
    clembed_matrix_release(&grad.m);
    clembed_matrix_release(&gtab.m);
    clembed_matrix_release(&pgrad.m);
  }
}

/* ------------------------------------------------------- device specs */

TU_CASE(hostile_device_specs) {
  const char *specs[] = {"%s%n%s%n", "99:99", "0:4294967296", "-1:-1", "no such device, surely", "gpux",
                         "\xff\xfe", "0:0:0"};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    clembed_context *c = (clembed_context *)&c;
    clembed_status s = clembed_context_create(specs[i], &c);
    if (s == CLEMBED_OK) {
      EXPECT(0, "spec '%s' matched %s", specs[i], clembed_context_device_name(c));
      clembed_context_destroy(c);
      continue;
    }
    EXPECT(c == NULL, "spec '%s': *ctx not NULL on failure", specs[i]);
    EXPECT(s == CLEMBED_ERR_NO_DEVICE, "spec '%s': %s", specs[i], clembed_status_string(s));
    EXPECT(strstr(clembed_last_error_message(), specs[i]) != NULL, "spec '%s': message '%s' does not name it",
           specs[i], clembed_last_error_message());
  }
  /* a 64 KiB spec */
  size_t n = 65536;
  char *big = malloc(n + 1);
  memset(big, 'x', n);
  big[n] = '\0';
  clembed_context *c = NULL;
  clembed_status s = clembed_context_create(big, &c);
  EXPECT(s == CLEMBED_ERR_NO_DEVICE && c == NULL, "a 64 KiB spec: %s", clembed_status_string(s));
  EXPECT(strlen(clembed_last_error_message()) < 4096, "a 64 KiB spec: the message is not bounded");
  free(big);
}

static void setup(clembed_context *ctx) { fx_make(ctx, &g_fx); }
static void teardown(clembed_context *ctx) { fx_free(&g_fx); }

int main(int argc, char **argv) {
  return tu_main(argc, argv, (tu_suite){.name = "test_hostile", .device = 1, .setup = setup, .teardown = teardown});
}
