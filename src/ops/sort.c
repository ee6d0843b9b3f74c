/* A stable LSD radix sort of (key, index) pairs on the device, as commands of
 * an operation's chain: the digits a pass come from the tuning table (8 bits),
 * as many passes as the keys' bit width needs. Each pass is three launches of
 * cl/ops/sort.cl: ce_sort_hist (a digit histogram per chunk of consecutive
 * entries), ce_sort_scan (an exclusive scan of the digit-major histograms in
 * one work-group) and ce_sort_scatter (each chunk writes its entries in order:
 * stable). Temporaries are O(entries). */
#include "ops.h"

#include <stdio.h>
#include <string.h>

unsigned ce_bit_width(uint64_t v) {
  unsigned b = 0;
  while (v) {
    b++;
    v >>= 1;
  }
  return b;
}

clembed_status ce_fold_fits(clembed_context *ctx, const char *what, const char *arg, size_t n) {
  const size_t limit = ctx->tune->loop_limit;
  if (!limit || 2 * (uint64_t)n + 1024 <= limit) return CLEMBED_OK;
  return ce_fail_arg(ctx, CLEMBED_ERR_UNSUPPORTED, NULL, arg, -1, (int64_t)n,
                     "%s: %zu %s in one call; this device stops a work-item's loops after %zu iterations (the "
                     "tuning's loop_limit), which a fold of so many can pass: at most %zu in a call here",
                     what, n, arg, limit, (size_t)((limit - 1024) / 2));
}

clembed_status ce_sort_alloc(clembed_context *ctx, size_t n, int key64, ce_sort *s) {
  clembed_status status = CLEMBED_OK;
  const ce_tuning *t = ctx->tune;
  memset(s, 0, sizeof *s);
  s->n = n;
  s->key64 = key64;
  s->chunk = t->sort_chunk;
  s->nchunks = (n + s->chunk - 1) / s->chunk;
  if (s->nchunks > t->sort_max_chunks) { /* the scan is one work-group: longer chunks */
    s->chunk = (n + t->sort_max_chunks - 1) / t->sort_max_chunks;
    s->nchunks = (n + s->chunk - 1) / s->chunk;
  }
  snprintf(s->opts, sizeof s->opts, "-DKEY64=%d -DSORT_RADIX_BITS=%u", key64, t->sort_radix_bits);
  size_t key_bytes = key64 ? sizeof(cl_ulong) : sizeof(cl_uint);
  for (int i = 0; i < 2; i++) {
    CHECK(ce_buffer(ctx, CE_BUFFER_TEMP, n * key_bytes, NULL, "backward: sort keys", &s->keys[i]));
    CHECK(ce_buffer(ctx, CE_BUFFER_TEMP, n * sizeof(cl_uint), NULL, "backward: sort indices", &s->idx[i]));
  }
  CHECK(ce_buffer(ctx, CE_BUFFER_TEMP, ((size_t)1 << t->sort_radix_bits) * s->nchunks * sizeof(cl_uint), NULL,
                  "backward: sort histograms", &s->hist));
cleanup:
  return status;
}

/* Released after enqueueing: OpenCL keeps them until the commands finish. */
void ce_sort_release(ce_sort *s) {
  for (int i = 0; i < 2; i++) {
    if (s->keys[i]) clReleaseMemObject(s->keys[i]);
    if (s->idx[i]) clReleaseMemObject(s->idx[i]);
  }
  if (s->hist) clReleaseMemObject(s->hist);
  memset(s, 0, sizeof *s);
}

clembed_status ce_sort_run(ce_chain *ch, ce_sort *s, unsigned bits, int *which) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = ch->ctx;
  const unsigned radix_bits = ctx->tune->sort_radix_bits;
  cl_kernel kh, ks, kc;
  CHECK(ce_kernel(ctx, CE_FAMILY_SORT, s->opts, "ce_sort_hist", &kh));
  CHECK(ce_kernel(ctx, CE_FAMILY_SORT, s->opts, "ce_sort_scan", &ks));
  CHECK(ce_kernel(ctx, CE_FAMILY_SORT, s->opts, "ce_sort_scatter", &kc));
  unsigned passes = (bits + radix_bits - 1) / radix_bits;
  if (passes == 0) passes = 1;
  cl_ulong n = s->n, chunk = s->chunk;
  cl_uint nchunks = (cl_uint)s->nchunks, m = (cl_uint)(s->nchunks << radix_bits);
  size_t local = ce_local_if_allowed(ctx, kh, ctx->tune->sort_local);
  int cur = 0;
  for (unsigned p = 0; p < passes; p++) {
    cl_uint shift = p * radix_bits;
    CHECK(ce_set_args(ctx, kh, "ce_sort_hist", CE_ARG(s->keys[cur]), CE_ARG(n), CE_ARG(chunk), CE_ARG(nchunks),
                      CE_ARG(shift), CE_ARG(s->hist), CE_END));
    CHECK(ce_chain_1d(ch, kh, "ce_sort_hist", s->nchunks, local));
    CHECK(ce_set_args(ctx, ks, "ce_sort_scan", CE_ARG(s->hist), CE_ARG(m), CE_END));
    CHECK(ce_chain_1d(ch, ks, "ce_sort_scan", 1, 0));
    CHECK(ce_set_args(ctx, kc, "ce_sort_scatter", CE_ARG(s->keys[cur]), CE_ARG(s->idx[cur]), CE_ARG(n),
                      CE_ARG(chunk), CE_ARG(nchunks), CE_ARG(shift), CE_ARG(s->hist), CE_ARG(s->keys[1 - cur]),
                      CE_ARG(s->idx[1 - cur]), CE_END));
    CHECK(ce_chain_1d(ch, kc, "ce_sort_scatter", s->nchunks, local));
    cur = 1 - cur;
  }
  *which = cur;
cleanup:
  return status;
}
