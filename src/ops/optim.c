/* Sparse optimizer steps on the segments of the backward (backward.c): each
 * step is a store mode of the segment fold (ce_store_mode), so it reads and
 * writes only the rows that occur in ids, needs O(ids) memory and
 * materialises no gradient. clembed_sgd_update is CE_STORE_SGD: table[v] -=
 * learning_rate * r, in float32, rounded to the table's dtype (F32, F16 or
 * BF16) when written back; always the sorted, deterministic path. A
 * position_grad in the options is added into as by clembed_backward (the
 * position table's step is the caller's). Further steps (Adagrad, Adam) are
 * further store modes, with their state rows beside the table's. */
#include "ops.h"

clembed_status clembed_sgd_update(clembed_context *ctx, const clembed_matrix *grad_out, const clembed_ids *ids,
                                  float learning_rate, const clembed_backward_options *opt, clembed_matrix *table,
                                  cl_uint nwait, const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, "clembed_sgd_update");
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  ce_step step = {"clembed_sgd_update", CE_STORE_SGD, learning_rate, 0};
  clembed_status status = ce_segment_step(ctx, &step, grad_out, ids, opt, table, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}
