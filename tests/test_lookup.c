/* Token-embedding lookup: exact results across shapes, dtypes, id types,
 * strides, offsets, scale, padding and every index policy, against a plain
 * reference; and every error the lookup can return. */
#include "test_util.h"

typedef struct lcase {
  size_t V, d, n;
  clembed_dtype tdt, odt;
  clembed_index_type itype;
  size_t t_pad, t_off;   /* extra ld and offset of the table */
  size_t o_pad, o_off;   /* extra ld and offset of the output */
  size_t id_off;         /* offset into the ids buffer */
  float scale;
  clembed_index_policy policy;
  int64_t padding;
  int with_bad;          /* put out-of-range ids in */
} lcase;

static void run_case(clembed_context *ctx, const lcase *c) {
  uint64_t rng = 0x1234 + c->V * 31 + c->d * 7 + c->n;
  size_t V = c->V, d = c->d, n = c->n;
  void *w = tu_alloc_elems(V * d, c->tdt);
  for (size_t i = 0; i < V * d; i++) tu_set_elem(w, i, c->tdt, tu_rand(&rng) * 8.0f);
  int64_t *ids = calloc(c->id_off + n + 1, sizeof *ids);
  long long first_bad = -1, first_bad_val = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t v = (int64_t)((uint64_t)((tu_rand(&rng) + 1.0f) * 1e6f) % V);
    if (c->with_bad && i % 5 == 3) v = (i % 2) ? (int64_t)V + (int64_t)i : -(int64_t)(i % 3) - 1;
    if (i % 11 == 0 && n > 20) v = (int64_t)(V / 2); /* a repeated id */
    ids[c->id_off + i] = v;
  }
  /* ids in the requested type, with a leading offset filled with junk */
  size_t ni = c->id_off + n;
  void *hid = calloc(ni ? ni : 1, 8);
  for (size_t i = 0; i < ni; i++) {
    int64_t v = i < c->id_off ? 0x7FFFFFF : ids[i];
    if (c->itype == CLEMBED_I32) ((int32_t *)hid)[i] = (int32_t)v;
    else ((int64_t *)hid)[i] = v;
  }
  clembed_matrix table = {0}, out = {0};
  clembed_ids did = {0};
  OK(ctx, tu_make_strided(ctx, V, d, c->t_pad, c->t_off, c->tdt, w, &table));
  OK(ctx, clembed_ids_create(ctx, hid, ni, c->itype, &did));
  did.offset = c->id_off;
  did.count = n;
  void *zero = tu_alloc_elems(n * d, c->odt);
  OK(ctx, tu_make_strided(ctx, n, d, c->o_pad, c->o_off, c->odt, zero, &out));
  clembed_embed_options o = clembed_embed_defaults();
  o.scale = c->scale;
  o.policy = c->policy;
  o.padding_idx = c->padding;
  clembed_status s = clembed_embed(ctx, &table, &did, &o, &out, 0, NULL, NULL);
  EXPECT(s == CLEMBED_OK, "embed: %s %s", clembed_status_string(s), clembed_context_message(ctx));
  clembed_status fin = clembed_finish(ctx);

  /* reference */
  int64_t pad = ref_padding_row(c->padding, (int64_t)V);
  void *got = tu_alloc_elems(n * d, c->odt);
  OK(ctx, clembed_matrix_read(ctx, &out, got, c->odt));
  size_t bad_elems = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t id = ids[c->id_off + i];
    int is_bad;
    int64_t r = ref_resolve(id, (int64_t)V, c->policy, pad, &is_bad);
    if (is_bad && first_bad < 0) {
      first_bad = (long long)i;
      first_bad_val = (long long)id;
    }
    for (size_t k = 0; k < d; k++) {
      float wk = r >= 0 ? tu_elem(w, (size_t)r * d + k, c->tdt) : 0.0f;
      float ref = ref_round(ref_forward(c->scale, r >= 0 ? &wk : NULL, NULL, 0.0f, 1), c->odt);
      float g = tu_elem(got, i * d + k, c->odt);
      if (!(g == ref || (isnan(g) && isnan(ref)))) bad_elems++;
      if (bad_elems == 1 && !(g == ref)) {
        fprintf(stderr, "  first mismatch at token %zu col %zu: got %.9g want %.9g\n", i, k, g, ref);
        bad_elems++;
      }
    }
  }
  EXPECT(bad_elems == 0, "V=%zu d=%zu n=%zu tdt=%d odt=%d itype=%d pad=%zu/%zu/%zu/%zu/%zu policy=%d: %zu wrong",
         V, d, n, c->tdt, c->odt, c->itype, c->t_pad, c->t_off, c->o_pad, c->o_off, c->id_off, c->policy,
         bad_elems);
  if (first_bad >= 0) {
    char want[128];
    snprintf(want, sizeof want, "ids[%lld] = %lld is outside [%s%zu, %zu)", first_bad, first_bad_val,
             c->policy == CLEMBED_INDEX_WRAP ? "-" : "", c->policy == CLEMBED_INDEX_WRAP ? V : 0, V);
    EXPECT(fin == CLEMBED_ERR_INDEX_OUT_OF_RANGE, "finish returned %s", clembed_status_string(fin));
    EXPECT(strstr(clembed_context_message(ctx), want) != NULL, "message '%s' lacks '%s'",
           clembed_context_message(ctx), want);
    /* cleared after it was returned */
    EXPECT(clembed_finish(ctx) == CLEMBED_OK, "deferred error not cleared");
  } else {
    EXPECT(fin == CLEMBED_OK, "finish: %s %s", clembed_status_string(fin), clembed_context_message(ctx));
  }
  /* the stride gaps and the leading offset of the output are untouched */
  if (c->o_pad || c->o_off) {
    size_t touched = tu_written_outside(ctx, &out, c->o_off + n * (d + c->o_pad));
    EXPECT(touched == 0, "%zu elements outside the output window were written", touched);
  }
  clembed_matrix_release(&table);
  clembed_matrix_release(&out);
  clembed_ids_release(&did);
  free(w);
  free(ids);
  free(hid);
  free(zero);
  free(got);
}

/* d of 1, 3, 37, 1024 and 0, 1, 5, 300 ids, every dtype, I32 and I64 ids */
TU_CASE(shapes_dtypes_and_id_types) {
  const size_t ds[] = {1, 3, 37, 1024};
  const size_t ns[] = {0, 1, 5, 300};
  const clembed_dtype dts[] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  for (size_t a = 0; a < 4; a++)
    for (size_t b = 0; b < 4; b++) {
      size_t d = ds[a], n = ns[b];
      if (tu_small && d * n > 4000) continue;
      for (int t = 0; t < 3; t++) {
        lcase c = {1000, d, n, dts[t], dts[t], (b & 1) ? CLEMBED_I64 : CLEMBED_I32, 0, 0, 0, 0, 0,
                   1.0f, CLEMBED_INDEX_CHECK, CLEMBED_NO_PADDING, 0};
        run_case(ctx, &c);
      }
    }
}

/* every table dtype into every output dtype, with strides and offsets */
TU_CASE(every_dtype_into_every_dtype_strided) {
  const clembed_dtype dts[] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  for (int t = 0; t < 3; t++)
    for (int o = 0; o < 3; o++) {
      lcase c = {50, 37, 40, dts[t], dts[o], (t + o) & 1 ? CLEMBED_I64 : CLEMBED_I32, 5, 13, 3, 7, 9,
                 1.0f, CLEMBED_INDEX_CHECK, CLEMBED_NO_PADDING, 0};
      run_case(ctx, &c);
    }
}

/* four columns per work-item: strides and offsets that are not multiples of 4 */
TU_CASE(ld_and_offsets_not_multiples_of_four) {
  const clembed_dtype dts[] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  for (int t = 0; t < 3; t++) {
    lcase c = {50, 36, 40, dts[t], dts[2 - t], t & 1 ? CLEMBED_I64 : CLEMBED_I32, 3, 5, 1, 3, 1,
               0.5f, CLEMBED_INDEX_CHECK, CLEMBED_NO_PADDING, 0};
    run_case(ctx, &c);
  }
}

/* scale and padding (also a negative padding index, as in PyTorch) */
TU_CASE(scale_and_padding) {
  lcase c1 = {20, 16, 64, CLEMBED_F32, CLEMBED_F32, CLEMBED_I32, 0, 0, 0, 0, 0, 5.656854f, CLEMBED_INDEX_CHECK, 10, 0};
  run_case(ctx, &c1);
  lcase c2 = {20, 16, 64, CLEMBED_F16, CLEMBED_F32, CLEMBED_I64, 0, 0, 0, 0, 0, 0.125f, CLEMBED_INDEX_CHECK, -3, 0};
  run_case(ctx, &c2);
}

TU_CASE(one_id_repeated_thousands_of_times) {
  lcase c3 = {3, 8, tu_small ? 400 : 5000, CLEMBED_F32, CLEMBED_F32, CLEMBED_I32, 0, 0, 0, 0, 0, 1.0f,
              CLEMBED_INDEX_CHECK, CLEMBED_NO_PADDING, 0};
  run_case(ctx, &c3);
}

/* every policy with bad ids in both id types */
TU_CASE(every_policy_with_bad_ids) {
  for (int p = 0; p < 4; p++)
    for (int it = 0; it < 2; it++) {
      lcase c = {30, 5, 60, CLEMBED_F32, CLEMBED_F32, it ? CLEMBED_I64 : CLEMBED_I32, 0, 0, 0, 0, 2, 2.0f,
                 (clembed_index_policy)p, 7, 1};
      run_case(ctx, &c);
    }
}

/* ids[23] = 123456 in a table of 1000 rows: the deferred error's message;
 * the first of several operations' errors; error slots recycled; events. */
TU_CASE(deferred_error_messages_and_events) {
  int32_t ids[40];
  for (int i = 0; i < 40; i++) ids[i] = i;
  ids[23] = 123456;
  ids[31] = -5;
  clembed_matrix t = {0}, o = {0};
  clembed_ids di = {0};
  OK(ctx, clembed_matrix_create(ctx, 1000, 4, CLEMBED_F32, &t));
  OK(ctx, clembed_matrix_create(ctx, 40, 4, CLEMBED_F32, &o));
  OK(ctx, clembed_ids_create(ctx, ids, 40, CLEMBED_I32, &di));
  OK(ctx, clembed_lookup(ctx, &t, &di, &o, 0, NULL, NULL));
  float host[160];
  FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_matrix_read(ctx, &o, host, CLEMBED_F32));
  EXPECT(strstr(clembed_context_message(ctx), "ids[23] = 123456 is outside [0, 1000)"), "message: %s",
         clembed_context_message(ctx));
  /* two operations: the first one's error is reported */
  clembed_ids d2 = {0}, dc = {0};
  ids[23] = 23;
  OK(ctx, clembed_ids_create(ctx, ids, 40, CLEMBED_I32, &dc)); /* only ids[31] is bad */
  ids[31] = 31;
  OK(ctx, clembed_ids_create(ctx, ids, 40, CLEMBED_I32, &d2)); /* clean */
  OK(ctx, clembed_lookup(ctx, &t, &d2, &o, 0, NULL, NULL));
  OK(ctx, clembed_lookup(ctx, &t, &dc, &o, 0, NULL, NULL));
  OK(ctx, clembed_lookup(ctx, &t, &di, &o, 0, NULL, NULL));
  FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
  EXPECT(strstr(clembed_context_message(ctx), "ids[31] = -5 is outside [0, 1000)"), "message: %s",
         clembed_context_message(ctx));
  OK(ctx, clembed_finish(ctx));
  /* more checked operations than error slots without a finish: the one bad
   * operation (after the slots were recycled) is still reported */
  for (int k = 0; k < 300; k++) OK(ctx, clembed_lookup(ctx, &t, k == 290 ? &di : &d2, &o, 0, NULL, NULL));
  FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
  EXPECT(strstr(clembed_context_message(ctx), "ids[23] = 123456"), "message: %s", clembed_context_message(ctx));
  for (int k = 0; k < 300; k++) OK(ctx, clembed_lookup(ctx, &t, k == 100 ? &di : &d2, &o, 0, NULL, NULL));
  FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
  OK(ctx, clembed_finish(ctx));
  /* event: completes, and the caller owns it */
  cl_event ev = NULL;
  OK(ctx, clembed_lookup(ctx, &t, &d2, &o, 0, NULL, &ev));
  EXPECT(ev != NULL, "no event returned");
  if (ev) {
    EXPECT(clWaitForEvents(1, &ev) == CL_SUCCESS, "event wait failed");
    clReleaseEvent(ev);
  }
  /* a wait list is honoured */
  cl_event e1 = NULL, e2 = NULL;
  OK(ctx, clembed_lookup(ctx, &t, &d2, &o, 0, NULL, &e1));
  if (e1) {
    OK(ctx, clembed_lookup(ctx, &t, &d2, &o, 1, &e1, &e2));
    if (e2) {
      clWaitForEvents(1, &e2);
      clReleaseEvent(e2);
    }
    clReleaseEvent(e1);
  }
  OK(ctx, clembed_finish(ctx));
  clembed_matrix_release(&t);
  clembed_matrix_release(&o);
  clembed_ids_release(&di);
  clembed_ids_release(&d2);
  clembed_ids_release(&dc);
}

TU_CASE(argument_errors) {
  clembed_matrix t = {0}, o = {0}, bad;
  clembed_ids di = {0};
  int32_t ids[4] = {0, 1, 2, 3};
  OK(ctx, clembed_matrix_create(ctx, 10, 4, CLEMBED_F32, &t));
  OK(ctx, clembed_matrix_create(ctx, 4, 4, CLEMBED_F32, &o));
  OK(ctx, clembed_ids_create(ctx, ids, 4, CLEMBED_I32, &di));
  const int INV = CLEMBED_ERR_INVALID_ARGUMENT;
  FAILS(NULL, INV, clembed_lookup(NULL, &t, &di, &o, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_lookup(ctx, NULL, &di, &o, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_lookup(ctx, &t, NULL, &o, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_lookup(ctx, &t, &di, NULL, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_lookup(ctx, &t, &di, &o, 2, NULL, NULL));
  EXPECT(strstr(clembed_context_message(ctx), "event_wait_list") != NULL, "%s", clembed_context_message(ctx));
  cl_event dummy = NULL;
  FAILS(ctx, INV, clembed_lookup(ctx, &t, &di, &o, 0, &dummy, NULL));
  FAILS(ctx, INV, clembed_lookup(ctx, &t, &di, &o, 1, &dummy, NULL)); /* a NULL event in the list */
  bad = o;
  bad.rows = 3;
  FAILS(ctx, INV, clembed_lookup(ctx, &t, &di, &bad, 0, NULL, NULL));
  bad = o;
  bad.cols = 5;
  bad.ld = 5;
  FAILS(ctx, INV, clembed_lookup(ctx, &t, &di, &bad, 0, NULL, NULL)); /* mismatch and too big */
  bad = t;
  bad.ld = 3;
  FAILS(ctx, INV, clembed_lookup(ctx, &bad, &di, &o, 0, NULL, NULL));
  EXPECT(strstr(clembed_context_message(ctx), "ld 3 is less than cols 4") != NULL, "%s", clembed_context_message(ctx));
  bad = t;
  bad.offset = 1;
  FAILS(ctx, INV, clembed_lookup(ctx, &bad, &di, &o, 0, NULL, NULL)); /* past the buffer */
  EXPECT(strstr(clembed_context_message(ctx), "buffer holds 160") != NULL, "%s", clembed_context_message(ctx));
  bad = t;
  bad.rows = SIZE_MAX / 2;
  FAILS(ctx, INV, clembed_lookup(ctx, &bad, &di, &o, 0, NULL, NULL)); /* overflow */
  bad = t;
  bad.dtype = (clembed_dtype)99;
  FAILS(ctx, INV, clembed_lookup(ctx, &bad, &di, &o, 0, NULL, NULL));
  bad = t;
  bad.buffer = NULL;
  FAILS(ctx, INV, clembed_lookup(ctx, &bad, &di, &o, 0, NULL, NULL));
  clembed_ids bi = di;
  bi.offset = 2;
  FAILS(ctx, INV, clembed_lookup(ctx, &t, &bi, &o, 0, NULL, NULL));
  bi = di;
  bi.type = (clembed_index_type)5;
  FAILS(ctx, INV, clembed_lookup(ctx, &t, &bi, &o, 0, NULL, NULL));
  bi = di;
  bi.type = CLEMBED_I64; /* 4 i64 ids need 32 bytes, the buffer holds 16 */
  FAILS(ctx, INV, clembed_lookup(ctx, &t, &bi, &o, 0, NULL, NULL));
  clembed_embed_options opt = clembed_embed_defaults();
  opt.policy = (clembed_index_policy)17;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &opt, &o, 0, NULL, NULL));
  opt = clembed_embed_defaults();
  opt.padding_idx = 10;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &opt, &o, 0, NULL, NULL));
  opt.padding_idx = -11;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &opt, &o, 0, NULL, NULL));
  opt = clembed_embed_defaults();
  opt.dropout = 1.0f;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &opt, &o, 0, NULL, NULL));
  opt = clembed_embed_defaults();
  opt.positions = (clembed_positions)7;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &opt, &o, 0, NULL, NULL));
  /* a failed call does not break the context */
  OK(ctx, clembed_lookup(ctx, &t, &di, &o, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
  clembed_matrix_release(&t);
  clembed_matrix_release(&o);
  clembed_ids_release(&di);
}

/* Outputs larger than the device's cache (32 MiB where the device reports
 * none: the CPU tuning's stream_cache_bytes): on a CPU they are written with
 * streaming stores where each row is aligned to the vector, plain stores
 * otherwise (an odd offset or ld); the results are the same. */
TU_CASE(outputs_larger_than_the_cache) {
  if (tu_small) {
    tu_skip("not in small mode");
    return;
  }
  unsigned long long cache = tu_device_cache(ctx, 32ULL << 20);
  if (cache > (256ULL << 20)) {
    printf("large outputs: the device's cache is %llu bytes: not run\n", (unsigned long long)cache);
    tu_skip("the device's cache size is above 256 MiB");
    return;
  }
  size_t d = 1024, n32 = (size_t)cache / (d * 4) + 37, n16 = (size_t)cache / (d * 2) + 37;
  lcase aligned = {3000, d, n32, CLEMBED_F32, CLEMBED_F32, CLEMBED_I32, 0, 0, 0, 0, 0,
                   1.5f, CLEMBED_INDEX_CHECK, CLEMBED_NO_PADDING, 0};
  run_case(ctx, &aligned);
  lcase odd = {3000, d, n32, CLEMBED_F32, CLEMBED_F32, CLEMBED_I64, 0, 0, 5, 3, 0,
               1.0f, CLEMBED_INDEX_ZERO, 17, 1};
  run_case(ctx, &odd);
  lcase half = {3000, d, n16, CLEMBED_BF16, CLEMBED_F16, CLEMBED_I32, 0, 0, 0, 16, 0,
                0.5f, CLEMBED_INDEX_CHECK, CLEMBED_NO_PADDING, 0};
  run_case(ctx, &half);
  lcase bf = {3000, d + 5, n16, CLEMBED_F32, CLEMBED_BF16, CLEMBED_I32, 0, 0, 11, 0, 0,
              1.0f, CLEMBED_INDEX_CHECK, CLEMBED_NO_PADDING, 0};
  run_case(ctx, &bf);
  lcase same = {3000, d, n16, CLEMBED_F16, CLEMBED_F16, CLEMBED_I32, 0, 0, 0, 0, 0,
                1.0f, CLEMBED_INDEX_ZERO, 5, 1};
  run_case(ctx, &same);
}

/* A same-dtype F16 or BF16 lookup (scale 1, no positions) gives every 16-bit
 * pattern back as converting through float32 does: the same bits, a NaN made
 * quiet (F16 bit 9, BF16 bit 6) with its sign and payload; padding and
 * zeroed ids give +0. All 65536 patterns, d = 1024 (whole vectors) and
 * d = 1027 (a tail). */
TU_CASE(same_dtype_bits) {
  const clembed_dtype dts[2] = {CLEMBED_F16, CLEMBED_BF16};
  const size_t ds[2] = {1024, 1027};
  for (int t = 0; t < 2; t++)
    for (int k = 0; k < 2; k++) {
      size_t d = ds[k], V = 65536 / d + 1, n = V + 3;
      uint16_t *w = calloc(V * d, 2), *got = calloc(n * d, 2);
      int32_t *ids = calloc(n, sizeof *ids);
      for (size_t i = 0; i < V * d; i++) w[i] = (uint16_t)(i * 40503u);
      for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 7) % V);
      ids[1] = (int32_t)V + 4; /* out of range: zeroed */
      ids[2] = -2;             /* out of range: zeroed */
      clembed_matrix table = {0}, out = {0};
      clembed_ids did = {0};
      OK(ctx, clembed_matrix_create(ctx, V, d, dts[t], &table));
      OK(ctx, clembed_matrix_write(ctx, &table, w, dts[t]));
      OK(ctx, clembed_matrix_create(ctx, n, d, dts[t], &out));
      OK(ctx, clembed_ids_create(ctx, ids, n, CLEMBED_I32, &did));
      clembed_embed_options o = clembed_embed_defaults();
      o.policy = CLEMBED_INDEX_ZERO;
      o.padding_idx = 3;
      OK(ctx, clembed_embed(ctx, &table, &did, &o, &out, 0, NULL, NULL));
      OK(ctx, clembed_matrix_read(ctx, &out, got, dts[t]));
      uint16_t inf = dts[t] == CLEMBED_F16 ? 0x7C00 : 0x7F80, quiet = dts[t] == CLEMBED_F16 ? 0x0200 : 0x0040;
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < n; i++)
        for (size_t c = 0; c < d; c++) {
          int zero = ids[i] < 0 || ids[i] >= (int32_t)V || ids[i] == 3;
          uint16_t h = zero ? 0 : w[(size_t)ids[i] * d + c];
          if ((h & 0x7FFF) > inf) h |= quiet;
          if (got[i * d + c] != h && !bad++) first = i * d + c;
        }
      EXPECT(bad == 0, "%s lookup, d %zu: %zu of %zu outputs differ in their bits (first at %zu: %04x)",
             dts[t] == CLEMBED_F16 ? "F16" : "BF16", d, bad, n * d, first, got[first]);
      clembed_matrix_release(&table);
      clembed_matrix_release(&out);
      clembed_ids_release(&did);
      free(w);
      free(got);
      free(ids);
    }
}

int main(int argc, char **argv) { return tu_main(argc, argv, (tu_suite){.name = "test_lookup", .device = 1}); }
