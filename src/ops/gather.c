/* Matrices in more buffers than a launch of an operation's kernel takes
 * (include/clembed.h's split matrices: any number of pieces), brought into one
 * buffer for that operation: the rows a call's ids take from a table
 * (ce_gather_rows: bags, BERT's layer), or a whole matrix joined (ce_join,
 * written back with ce_join_back: BERT's layer's position and segment tables,
 * its output and grad_out). The bytes are copied as they lie, so the operation
 * computes the same values in the same order: the same bits. The kernels are
 * cl/ops/util.cl's ce_gather and ce_copy_rows. A temporary here is sized by
 * the call (its ids, or the matrix), not by CLEMBED_MAX_BUFFER_BYTES, which
 * bounds matrices: it must fit one buffer of the device
 * (CL_DEVICE_MAX_MEM_ALLOC_SIZE), else the call is refused, naming what to
 * pass fewer of. */
#include "ops.h"

#include <stdlib.h>
#include <string.h>

/* A temporary of `bytes` (a whole number of words) within the device's
 * largest buffer, for matrix `mat` (a refusal names argument `arg`). */
static clembed_status temp(clembed_context *ctx, const char *fn, const char *mat, const char *arg, size_t bytes,
                           const char *what, const char *hint, cl_mem *out) {
  if (bytes > SIZE_MAX - 8 || (ctx->max_alloc && bytes + 4 > ctx->max_alloc))
    return ce_fail_arg(ctx, CLEMBED_ERR_UNSUPPORTED, NULL, arg, -1, -1,
                       "%s: %s lies in more buffers than one launch takes, so it is brought into one buffer first, "
                       "and %s (%zu bytes) is more than the device's largest buffer (%llu bytes): %s",
                       fn, mat, what, bytes, (unsigned long long)ctx->max_alloc, hint);
  return ce_buffer(ctx, CE_BUFFER_TEMP, (bytes / 4 + 1) * 4, NULL, what, out);
}

clembed_status ce_gather_rows(ce_chain *ch, const char *fn, const clembed_matrix *t, const ce_pieces *tp,
                              const clembed_ids *ids, clembed_index_policy policy, cl_long padding, cl_uint slot,
                              clembed_matrix *rows, clembed_ids *idx) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = ch->ctx;
  size_t n = ids->count, rb = clembed_dtype_row_bytes(t->dtype, t->cols), bytes;
  cl_kernel k;
  *rows = (clembed_matrix){NULL, 0, n, t->cols, t->cols, t->dtype};
  *idx = (clembed_ids){NULL, 0, n, CLEMBED_I64};
  if (ce_mul_overflows(n, rb, &bytes)) bytes = SIZE_MAX;
  CHECK(temp(ctx, fn, "table", "ids", bytes, "the rows its ids take", "pass fewer ids a call", &rows->buffer));
  CHECK(ce_buffer(ctx, CE_BUFFER_TEMP, (n ? n : 1) * sizeof(cl_long), NULL, "gathered ids", &idx->buffer));
  CHECK(ce_kernel(ctx, CE_FAMILY_UTIL, "", "ce_gather", &k));
  {
    cl_ulong id_off = ids->offset, nn = n, trows = t->rows, rbl = rb, ld = clembed_dtype_row_bytes(t->dtype, tp->ld);
    cl_int id64 = ids->type == CLEMBED_I64, pol = (cl_int)policy, report = slot != CE_NO_SLOT;
    cl_uint sl = report ? slot : 0;
    for (size_t j = 0; j < tp->count; j++) {
      const ce_piece *pc = &tp->piece[j];
      cl_ulong first = pc->first, nrows = ce_piece_nrows(tp, j);
      cl_ulong off = ce_dtype_bytes_at(t->dtype, tp->ld, pc->offset);
      cl_int head = j == 0;
      CHECK(ce_set_args(ctx, k, "ce_gather", CE_ARG(ids->buffer), CE_ARG(ids->buffer), CE_ARG(id_off), CE_ARG(id64),
                        CE_ARG(nn), CE_ARG(trows), CE_ARG(pol), CE_ARG(padding), CE_ARG(ctx->errbuf), CE_ARG(sl),
                        CE_ARG(report), CE_ARG(head), CE_ARG(pc->buffer), CE_ARG(off), CE_ARG(ld), CE_ARG(first),
                        CE_ARG(nrows), CE_ARG(rows->buffer), CE_ARG(rbl), CE_ARG(idx->buffer), CE_END));
      CHECK(ce_chain_1d(ch, k, "ce_gather", n, 0));
    }
  }
cleanup:
  return status;
}

/* Copies the rows of each piece of p between the pieces and the joined buffer
 * (row r at element r * ld there); `in`: into the joined buffer. Only a row's
 * cols are copied: the bytes between rows (a view's ld) are never written. */
static clembed_status copy_pieces(ce_chain *ch, const clembed_matrix *m, const ce_pieces *p, cl_mem joined, int in) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = ch->ctx;
  cl_kernel k;
  CHECK(ce_kernel(ctx, CE_FAMILY_UTIL, "", "ce_copy_rows", &k));
  for (size_t j = 0; j < p->count; j++) {
    const ce_piece *pc = &p->piece[j];
    cl_ulong ld = clembed_dtype_row_bytes(m->dtype, p->ld), rb = clembed_dtype_row_bytes(m->dtype, m->cols);
    cl_ulong poff = ce_dtype_bytes_at(m->dtype, p->ld, pc->offset), joff = pc->first * ld;
    cl_ulong nrows = ce_piece_nrows(p, j);
    cl_int words = ld % 4 == 0 && rb % 4 == 0 && poff % 4 == 0 && joff % 4 == 0;
    cl_mem src = in ? pc->buffer : joined, dst = in ? joined : pc->buffer;
    cl_ulong soff = in ? poff : joff, doff = in ? joff : poff;
    CHECK(ce_set_args(ctx, k, "ce_copy_rows", CE_ARG(src), CE_ARG(soff), CE_ARG(ld), CE_ARG(dst), CE_ARG(doff),
                      CE_ARG(ld), CE_ARG(rb), CE_ARG(nrows), CE_ARG(words), CE_END));
    CHECK(ce_chain_1d(ch, k, "ce_copy_rows", nrows, 0));
  }
cleanup:
  return status;
}

clembed_status ce_join(ce_chain *ch, const char *fn, const clembed_matrix *m, ce_pieces *p, int copy_in,
                       ce_joined *j) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = ch->ctx;
  size_t bytes;
  if (ce_mul_overflows(p->rows, clembed_dtype_row_bytes(m->dtype, p->ld), &bytes)) bytes = SIZE_MAX;
  const char *name = p->what ? p->what : "a matrix";
  CHECK(temp(ctx, fn, name, name, bytes, "the whole matrix", "pass fewer rows a call", &j->buffer));
  if (copy_in) CHECK(copy_pieces(ch, m, p, j->buffer, 1));
  /* p becomes the joined buffer; its pieces are kept in j for ce_join_back */
  j->m = m;
  j->from = *p;
  if (p->piece == p->local) j->from.piece = j->from.local;
  {
    const char *what = p->what;
    size_t rows = p->rows, ld = p->ld;
    memset(p, 0, sizeof *p);
    p->piece = p->local;
    p->count = 1;
    p->rows = rows;
    p->ld = ld;
    p->what = what;
    p->piece[0].buffer = j->buffer;
  }
cleanup:
  return status;
}

clembed_status ce_join_back(ce_chain *ch, const ce_joined *j) {
  return copy_pieces(ch, j->m, &j->from, j->buffer, 0);
}

void ce_joined_release(ce_joined *j) {
  if (!j) return;
  if (j->buffer) clReleaseMemObject(j->buffer);
  j->buffer = NULL;
  if (j->m) ce_pieces_release(&j->from);
  j->m = NULL;
}
