/* Sparse optimizer steps on the segments of the backward (backward.c): each
 * step is a store mode of the segment fold (ce_store_mode), so it reads and
 * writes only the rows that occur in ids, needs O(ids) memory and
 * materialises no gradient. clembed_sgd_update is CE_STORE_SGD: table[v] -=
 * learning_rate * r, in float32, rounded to the table's dtype (F32, F16 or
 * BF16) when written back; always the sorted, deterministic path. A
 * position_grad in the options is added into as by clembed_backward (the
 * position table's step is the caller's). clembed_optimizer_step's kinds are
 * further store modes (ADAGRAD, ROWWISE_ADAGRAD, ADAM; SGD with weight decay),
 * with their state rows beside the table's: this file checks the optimizer's
 * fields and states and computes the step's float32 constants; backward.c
 * folds and stores. An optimizer's stochastic_rounding (with its seed, step and
 * first_row) goes to the fold as the step's ce_rounding; clembed_sgd_update
 * always rounds to nearest even. */
#include "ops.h"

#include <math.h>
#include <string.h>

clembed_status clembed_sgd_update(clembed_context *ctx, const clembed_matrix *grad_out, const clembed_ids *ids,
                                  float learning_rate, const clembed_backward_options *opt, clembed_matrix *table,
                                  cl_uint nwait, const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, "clembed_sgd_update");
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  ce_step step = {"clembed_sgd_update", CE_STORE_SGD, learning_rate, 0, NULL, NULL, {0, 0, 0, 0}};
  clembed_backward_options o = clembed_backward_defaults(); /* the caller's, as far as its struct_size goes */
  clembed_status status = ce_struct_read(ctx, NULL, "opt", -1, &ce_backward_options_layout, opt, &o);
  if (status == CLEMBED_OK) status = ce_segment_step(ctx, &step, grad_out, ids, &o, table, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

/* ------------------------------------------------- clembed_optimizer_step */

clembed_optimizer clembed_optimizer_defaults(clembed_optimizer_kind kind) {
  clembed_optimizer o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.kind = kind;
  o.learning_rate = kind == CLEMBED_SGD ? 0.1f : 0.01f;
  o.eps = kind == CLEMBED_ADAGRAD ? 1e-10f : 1e-8f;
  o.beta1 = 0.9f;
  o.beta2 = 0.999f;
  return o;
}

static const char *const kind_names[4] = {"SGD", "ADAGRAD", "ROWWISE_ADAGRAD", "ADAM"};

/* A state: present, F32, rows x cols. */
static clembed_status check_state(clembed_context *ctx, const char *what, const clembed_matrix *st, const char *name,
                                  const char *kind, size_t rows, size_t cols, size_t *ld, ce_pieces *p) {
  clembed_status status = CLEMBED_OK;
  if (!st)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, name, -1, 0, "%s: %s is NULL; %s needs it (F32, %zu x %zu)", what, name,
             kind, rows, cols);
  CHECK(ce_check_pieces(ctx, st, name, 0, p));
  *ld = p->ld;
  if (st->dtype != CLEMBED_F32)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, name, -1, (int64_t)st->dtype, "%s: %s must be F32, not %s", what, name,
             ce_dtype_name(st->dtype));
  if (st->rows != rows || st->cols != cols)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, name, -1, (int64_t)st->rows,
             "%s: %s is %zu x %zu; %s on this table needs %zu x %zu", what, name, st->rows, st->cols, kind, rows,
             cols);
cleanup:
  return status;
}

/* The optimizer's fields and states, checked against the table; the float32
 * constants of the step (ADAM's from float64, each rounded once). */
clembed_status ce_optimizer_check(clembed_context *ctx, const char *what, const clembed_optimizer *o,
                                  const clembed_matrix *table, ce_optim_step *p) {
  clembed_status status = CLEMBED_OK;
  memset(p, 0, sizeof *p);
  ce_pieces_none(&p->s1);
  ce_pieces_none(&p->s2);
  if (!o) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "optimizer", -1, 0, "%s: the optimizer is NULL", what);
  if ((unsigned)o->kind > (unsigned)CLEMBED_ADAM)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "kind", -1, (int64_t)o->kind, "%s: unknown optimizer kind %d", what,
             (int)o->kind);
  const char *kind = kind_names[o->kind];
  if (!(o->learning_rate >= 0.0f) || isinf(o->learning_rate))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "learning_rate", -1, 0, "%s: learning_rate %g must be finite and >= 0",
             what, (double)o->learning_rate);
  if (!(o->weight_decay >= 0.0f) || isinf(o->weight_decay))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "weight_decay", -1, 0, "%s: weight_decay %g must be finite and >= 0",
             what, (double)o->weight_decay);
  if (o->stochastic_rounding != 0 && o->stochastic_rounding != 1)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "stochastic_rounding", -1, (int64_t)o->stochastic_rounding,
             "%s: stochastic_rounding is %d; 0 (round to nearest even) or 1 (stochastic)", what,
             o->stochastic_rounding);
  if (table->rows && o->first_row > (uint64_t)0 - (uint64_t)table->rows) /* its last row past 2^64 - 1 */
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "first_row", -1, (int64_t)(o->first_row > INT64_MAX ? INT64_MAX : o->first_row),
             "%s: first_row %llu + the table's %zu rows pass 2^64", what, (unsigned long long)o->first_row,
             table->rows);
  if (o->kind != CLEMBED_SGD && (!(o->eps >= 0.0f) || isinf(o->eps)))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "eps", -1, 0, "%s: eps %g must be finite and >= 0", what,
             (double)o->eps);
  if (o->kind == CLEMBED_ADAM) {
    if (!(o->beta1 >= 0.0f && o->beta1 < 1.0f))
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "beta1", -1, 0, "%s: beta1 %g must be in [0, 1)", what,
               (double)o->beta1);
    if (!(o->beta2 >= 0.0f && o->beta2 < 1.0f))
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "beta2", -1, 0, "%s: beta2 %g must be in [0, 1)", what,
               (double)o->beta2);
    if (o->step == 0)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "step", -1, 0, "%s: step is 0; ADAM's step t counts from 1", what);
  }
  if (o->kind != CLEMBED_SGD) {
    CHECK(check_state(ctx, what, o->state, "state", kind, table->rows,
                      o->kind == CLEMBED_ROWWISE_ADAGRAD ? 1 : table->cols, &p->s1_ld, &p->s1));
    p->state = o->state;
  }
  if (o->kind == CLEMBED_ADAM) {
    CHECK(check_state(ctx, what, o->state2, "state2", kind, table->rows, table->cols, &p->s2_ld, &p->s2));
    p->state2 = o->state2;
  }
  p->eps = o->eps;
  p->weight_decay = o->weight_decay;
  if (o->kind == CLEMBED_ADAM) {
    double t = (double)o->step, b1 = (double)o->beta1, b2 = (double)o->beta2;
    p->b1c = (float)(1.0 - b1);
    p->b2c = (float)(1.0 - b2);
    p->step_size = (float)((double)o->learning_rate * sqrt(1.0 - pow(b2, t)) / (1.0 - pow(b1, t)));
  }
cleanup:
  return status;
}

clembed_status clembed_optimizer_step(clembed_context *ctx, const clembed_matrix *grad_out, const clembed_ids *ids,
                                      const clembed_backward_options *opt, const clembed_optimizer *o,
                                      clembed_matrix *table, cl_uint nwait, const cl_event *wait, cl_event *event) {
  const char *what = "clembed_optimizer_step";
  clembed_status status;
  cl_event own;
  CE_ENTER(ctx, what);
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  clembed_backward_options bo = clembed_backward_defaults();
  clembed_optimizer oo;
  status = ce_struct_read(ctx, NULL, "opt", -1, &ce_backward_options_layout, opt, &bo);
  if (status == CLEMBED_OK && o) status = ce_optimizer_read(ctx, "optimizer", -1, o, &oo);
  if (status == CLEMBED_OK)
    status = ce_optimizer_fold(ctx, what, grad_out, ids, &bo, o ? &oo : NULL, table, NULL, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

clembed_status ce_optimizer_read(clembed_context *ctx, const char *argument, int64_t index, const clembed_optimizer *in,
                                 clembed_optimizer *out) {
  /* the fields past the caller's struct_size take the defaults of its own kind
   * (the first field, always there); an unknown kind is refused later, by name */
  clembed_optimizer probe = clembed_optimizer_defaults(CLEMBED_SGD);
  clembed_status s = ce_struct_read(ctx, NULL, argument, index, &ce_optimizer_layout, in, &probe);
  if (s != CLEMBED_OK || !in) {
    *out = probe;
    return s;
  }
  *out = clembed_optimizer_defaults((unsigned)probe.kind <= (unsigned)CLEMBED_ADAM ? probe.kind : CLEMBED_SGD);
  return ce_struct_read(ctx, NULL, argument, index, &ce_optimizer_layout, in, out);
}

clembed_status ce_optimizer_fold(clembed_context *ctx, const char *what, const clembed_matrix *grad_out,
                                 const clembed_ids *ids, const clembed_backward_options *opt,
                                 const clembed_optimizer *o, clembed_matrix *table, const ce_contrib *contrib,
                                 cl_uint nwait, const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  ce_optim_step p;
  ce_pieces tp;
  ce_pieces_none(&p.s1);
  ce_pieces_none(&p.s2);
  CHECK(ce_check_pieces(ctx, table, "table", 0, &tp)); /* before its rows and cols are used */
  ce_pieces_release(&tp);
  CHECK(ce_optimizer_check(ctx, what, o, table, &p));
  {
    static const ce_store_mode modes[4] = {CE_STORE_SGD, CE_STORE_ADAGRAD, CE_STORE_ROWWISE_ADAGRAD, CE_STORE_ADAM};
    /* SGD without weight decay is clembed_sgd_update's fold (the same
     * operations, and its kernel has no state arguments to carry) */
    int plain = o->kind == CLEMBED_SGD && o->weight_decay == 0.0f;
    ce_step step = {what, modes[o->kind], o->learning_rate, 0, plain ? NULL : &p, contrib,
                    {o->stochastic_rounding, o->seed, o->step, o->first_row}};
    status = ce_segment_step(ctx, &step, grad_out, ids, opt, table, nwait, wait, event);
  }
cleanup:
  ce_pieces_release(&p.s1);
  ce_pieces_release(&p.s2);
  return status;
}
