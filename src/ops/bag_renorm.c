/* clembed_renorm (nn.Embedding's max_norm): each distinct row its ids take
 * whose norm exceeds max_norm scaled in place (cl/ops/bag.cl's ce_renorm_keys,
 * then sort.c's sort, then ce_renorm_rows, a row per segment); the table
 * through pieces.cl, a launch per window of its pieces. Its programs have the
 * options of every bag program (bag.c's bag_base_options). */
#include "bag.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

clembed_status clembed_renorm(clembed_context *ctx, clembed_matrix *table, const clembed_ids *ids, float max_norm,
                              float norm_type, cl_uint nwait, const cl_event *wait, cl_event *event) {
  const char *what = "clembed_renorm";
  clembed_status status = CLEMBED_OK;
  cl_event own;
  size_t t_ld;
  ce_sort srt;
  ce_chain ch;
  ce_pieces tp; /* the table's pieces: launches over windows of them where they are many */
  ce_pieces *tmats[1] = {&tp};
  char *opts = NULL, extra[128];
  CE_ENTER(ctx, what);
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  memset(&srt, 0, sizeof srt);
  ce_pieces_none(&tp);
  ce_chain_init(&ch, ctx, nwait, wait);
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_check_pieces(ctx, table, "table", 0, &tp));
  t_ld = tp.ld;
  CHECK(ce_check_ids(ctx, ids, "ids"));
  if ((uint64_t)ids->count >= 0xFFFFFFFFu)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "ids", -1, (int64_t)ids->count, "%s: %zu ids; at most 4294967294", what,
             ids->count);
  if (!(max_norm >= 0.0f) || isinf(max_norm))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "max_norm", -1, 0, "%s: max_norm %g must be finite and >= 0", what,
             (double)max_norm);
  if (!(norm_type > 0.0f))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "norm_type", -1, 0, "%s: norm_type %g must be > 0 (or INFINITY)", what,
             (double)norm_type);
  ce_record rec = {CE_NO_SLOT, CE_FAMILY_BAG, NULL, ids, NULL, 0};
  CHECK(ce_fold_fits(ctx, what, "ids", ids->count));
  if (ids->count) {
    cl_int kind = norm_type == 1.0f ? 1 : norm_type == 2.0f ? 2 : isinf(norm_type) ? 3 : 0;
    cl_float p = norm_type, inv_p = 1.0f / norm_type, mn = max_norm;
    int key64 = (uint64_t)table->rows > 0xFFFFFFFFu;
    cl_ulong n = ids->count, rows = table->rows, none64 = rows, t_ldl = t_ld;
    cl_ulong cols = table->cols, id_off = ids->offset;
    cl_uint none32 = (cl_uint)rows;
    cl_int id64 = ids->type == CLEMBED_I64;
    cl_kernel k;
    int which;
    CHECK(ce_pieces_plan(ctx, what, tmats, 1));
    snprintf(extra, sizeof extra, "-DTABLE_DT=%d -DKEY64=%d -DMODES=0", (int)table->dtype, key64);
    ce_pieces_option(extra, sizeof extra, &tp, "tab");
    opts = bag_base_options(ctx, extra);
    if (!opts) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    rec.options = opts;
    ce_slot_info info;
    memset(&info, 0, sizeof info);
    info.op = what;
    info.id_rows = table->rows;
    CHECK(ce_slot_reserve(ctx, &info, &rec.slot));
    CHECK(ce_sort_alloc(ctx, ids->count, key64, &srt));
    CHECK(ce_kernel(ctx, CE_FAMILY_BAG, opts, "ce_renorm_keys", &k));
    CHECK(ce_set_args(ctx, k, "ce_renorm_keys", CE_ARG(ids->buffer), CE_ARG(ids->buffer), CE_ARG(id_off),
                      CE_ARG(id64), CE_ARG(n), CE_ARG(rows), CE_ARG(srt.keys[0]), CE_ARG(srt.idx[0]),
                      CE_ARG(ctx->errbuf), CE_ARG(rec.slot), CE_END));
    CHECK(ce_chain_1d(&ch, k, "ce_renorm_keys", ids->count, 0));
    if (cols) {
      CHECK(ce_sort_run(&ch, &srt, ce_bit_width(rows), &which));
      CHECK(ce_kernel(ctx, CE_FAMILY_BAG, opts, "ce_renorm_rows", &k));
      do { /* a launch per window of the table's pieces: each renorms the rows it holds */
        CHECK(ce_set_args(ctx, k, "ce_renorm_rows", CE_PIECES(&tp), CE_ARG(t_ldl), CE_ARG(cols),
                          CE_ARG(srt.keys[which]), CE_ARG(n), key64 ? sizeof none64 : sizeof none32,
                          key64 ? (const void *)&none64 : (const void *)&none32, CE_ARG(mn), CE_ARG(kind), CE_ARG(p),
                          CE_ARG(inv_p), CE_END));
        CHECK(ce_chain_1d(&ch, k, "ce_renorm_rows", ids->count, 0));
      } while (ce_pieces_next(tmats, 1));
    }
  }
  CHECK(ce_chain_close_checked(&ch, &rec, ev));
cleanup:
  ce_sort_release(&srt);
  ce_chain_release(&ch);
  ce_pieces_release(&tp);
  free(opts);
  return ce_track_end(ctx, status, event, &own);
}
