/* clembed_backward and clembed_sgd_update against a plain float32 reference
 * that performs the documented operations in the documented order:
 *   S = 0.0f; S = S + m_i for the tokens of a row in ascending order;
 *   r = scale * S; r = r / (float)count (scale_grad_by_freq);
 *   grad_table = r or grad_table + r; sgd: table = round(w - lr * r).
 * The deterministic path must match it bit for bit; the atomic path within a
 * tolerance. `test_backward small` shrinks every case (for Oclgrind). */
#include "test_util.h"

/* No FP contraction: C11 mode (-std=c11) compiles a * b + c as two roundings. */

static cl_context cl_ctx;
static cl_command_queue cl_queue;

/* ------------------------------------------------------------ device data */

static clembed_matrix mk_matrix(clembed_context *ctx, size_t rows, size_t cols, clembed_dtype dt, size_t extra,
                                size_t off, const float *host) {
  (void)ctx;
  return tu_gapped_matrix(cl_ctx, rows, cols, dt, extra, off, host);
}

static clembed_ids mk_ids(clembed_context *ctx, const int64_t *host, size_t n, clembed_index_type t, size_t off) {
  clembed_ids ids = {0};
  size_t es = t == CLEMBED_I64 ? 8 : 4;
  unsigned char *h = calloc(off + n + 1, es);
  for (size_t i = 0; i < n; i++) {
    if (t == CLEMBED_I64) memcpy(h + (off + i) * 8, &host[i], 8);
    else {
      int32_t v = (int32_t)host[i];
      memcpy(h + (off + i) * 4, &v, 4);
    }
  }
  cl_int err;
  ids.buffer = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, (off + n + 1) * es, h, &err);
  EXPECT(err == CL_SUCCESS, "clCreateBuffer ids %d", err);
  free(h);
  ids.offset = off;
  ids.count = n;
  ids.type = t;
  (void)ctx;
  return ids;
}

/* Random gradient values of varied magnitude (so that the order of a sum shows
 * in its bits), rounded to what dtype dt holds. */
static float *rand_grad(uint64_t *st, size_t n, clembed_dtype dt) {
  float *g = malloc((n + 1) * sizeof(float));
  for (size_t k = 0; k < n; k++) {
    float v = tu_rand(st);
    int e = (int)((tu_rand(st) + 1.0f) * 6.0f) - 6; /* 2^-6 .. 2^6 */
    g[k] = ref_round(ldexpf(v, e), dt);
  }
  return g;
}

static size_t count_diff(const float *a, const float *b, size_t n, size_t *first) {
  size_t bad = 0;
  *first = 0;
  for (size_t k = 0; k < n; k++)
    if (memcmp(&a[k], &b[k], 4) != 0) {
      if (!bad) *first = k;
      bad++;
    }
  return bad;
}

#define EXPECT_BITS(a, b, n, ...)                                                               \
  do {                                                                                          \
    size_t f_, bad_ = count_diff((a), (b), (n), &f_);                                           \
    EXPECT(bad_ == 0, "%zu of %zu differ, first at %zu: %.9g vs %.9g (%s)", bad_, (size_t)(n),  \
           f_, bad_ ? (double)(a)[f_] : 0.0, bad_ ? (double)(b)[f_] : 0.0, __VA_ARGS__);         \
  } while (0)

/* ------------------------------------------------------------ one case */

typedef struct bcase {
  const char *name;
  size_t n, d, V;
  clembed_dtype gdt;
  clembed_index_type it;
  size_t g_extra, g_off, t_extra, t_off, id_off;
  clembed_backward_options o;
  const int64_t *ids; /* NULL: random in [0, V) */
  int atomic_tol;     /* compare within a tolerance (the atomic path) */
} bcase;

static void run_case(clembed_context *ctx, const bcase *bc) {
  uint64_t st = 0x1234 + bc->n * 31 + bc->d * 7 + bc->V;
  size_t n = bc->n, d = bc->d, V = bc->V;
  int64_t *ids = malloc((n + 1) * sizeof(int64_t));
  for (size_t i = 0; i < n; i++)
    ids[i] = bc->ids ? bc->ids[i] : (int64_t)((tu_rand(&st) + 1.0f) * 0.5f * (float)V) % (int64_t)(V ? V : 1);
  float *g = rand_grad(&st, n * d, bc->gdt);
  float *t0 = rand_grad(&st, V * d, CLEMBED_F32);
  clembed_matrix gm = mk_matrix(ctx, n, d, bc->gdt, bc->g_extra, bc->g_off, g);
  clembed_matrix tm = mk_matrix(ctx, V, d, CLEMBED_F32, bc->t_extra, bc->t_off, t0);
  clembed_ids im = mk_ids(ctx, ids, n, bc->it, bc->id_off);
  OK(ctx, clembed_backward(ctx, &gm, &im, &bc->o, &tm, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
  float *got = tu_read_f32(ctx, &tm);
  float *want = malloc((V * d + 1) * sizeof(float));
  memcpy(want, t0, V * d * sizeof(float));
  ref_backward(g, ids, n, d, V, &bc->o, want);
  if (!bc->atomic_tol) {
    EXPECT_BITS(got, want, V * d, bc->name);
  } else {
    /* Within a bound on the rounding of any order: 2^-22 * sum |terms| per row. */
    float *absr = malloc((V * d + 1) * sizeof(float));
    uint32_t *cnt = malloc((V + 1) * sizeof(uint32_t));
    clembed_backward_options ao = bc->o;
    float *ga = malloc((n * d + 1) * sizeof(float));
    for (size_t k = 0; k < n * d; k++) ga[k] = fabsf(g[k]);
    ao.scale = fabsf(ao.scale);
    ref_backward_rows(ga, ids, n, d, V, &ao, absr, cnt);
    size_t bad = 0;
    for (size_t k = 0; k < V * d; k++) {
      double tol = 1e-6 * (double)absr[k] * (double)(cnt[k / d] + 1) + 1e-6 * fabs((double)want[k]) + 1e-30;
      if (!(fabs((double)got[k] - (double)want[k]) <= tol)) {
        if (!bad)
          fprintf(stderr, "%s: element %zu: %.9g vs %.9g (tol %.3g)\n", bc->name, k, got[k], want[k], tol);
        bad++;
      }
    }
    EXPECT(bad == 0, "%s: %zu elements outside the tolerance", bc->name, bad);
    free(absr);
    free(cnt);
    free(ga);
  }
  tu_check_gaps(cl_queue, &tm, bc->name);
  free(got);
  free(want);
  free(g);
  free(t0);
  free(ids);
  clembed_matrix_release(&gm);
  clembed_matrix_release(&tm);
  clembed_ids_release(&im);
}

/* --------------------------------------------------------------- cases */

/* A case of n tokens, d columns, V rows, gradient dtype gdt, I32 ids (random
 * unless `ids`), no strides, the default options. */
static bcase base_bcase(const char *name, size_t n, size_t d, size_t V, clembed_dtype gdt, const int64_t *ids) {
  bcase bc = {0};
  bc.name = name;
  bc.n = n;
  bc.d = d;
  bc.V = V;
  bc.gdt = gdt;
  bc.it = CLEMBED_I32;
  bc.ids = ids;
  bc.o = clembed_backward_defaults();
  return bc;
}

/* d of 1, 3, 37 and more; I32 and I64 ids; every gradient dtype with ld > cols
 * and offsets on the gradient, the table and the ids */
TU_CASE(shapes_dtypes_strides_and_offsets) {
  size_t ds[] = {1, 3, 37, tu_small ? 67 : 1030};
  for (int k = 0; k < 4; k++)
    for (int t = 0; t < 2; t++) {
      bcase bc = base_bcase(t ? "shapes i64" : "shapes i32", tu_small ? 40 : 600, ds[k], tu_small ? 13 : 150, CLEMBED_F32,
                            NULL);
      bc.it = t ? CLEMBED_I64 : CLEMBED_I32;
      run_case(ctx, &bc);
      bc.o.accumulate = 0;
      bc.name = "shapes overwrite";
      run_case(ctx, &bc);
    }
  /* grad dtypes, ld > cols and offsets everywhere */
  for (int dt = 0; dt < 3; dt++) {
    bcase bc = base_bcase(dt == 0 ? "ld/offset f32" : dt == 1 ? "ld/offset f16" : "ld/offset bf16",
                          tu_small ? 30 : 500, tu_small ? 19 : 70, tu_small ? 9 : 64, (clembed_dtype)dt, NULL);
    bc.it = dt == 1 ? CLEMBED_I64 : CLEMBED_I32;
    bc.g_extra = 5;
    bc.g_off = 7;
    bc.t_extra = 3;
    bc.t_off = 11;
    bc.id_off = 3;
    bc.o.scale = 1.7f;
    run_case(ctx, &bc);
    bc.o.accumulate = 0;
    run_case(ctx, &bc);
  }
}

/* One id repeated 20,000 times (2,000 when small), among a few others: the
 * result is the sequential float32 sum in token order, and that differs from a
 * pairwise sum (so the test can tell the orders apart). */
TU_CASE(one_id_repeated_twenty_thousand_times) {
  size_t n = tu_small ? 2000 : 20000, d = tu_small ? 5 : 64, V = 10;
  int64_t *ids = malloc(n * sizeof(int64_t));
  for (size_t i = 0; i < n; i++) ids[i] = (i % 97 == 5) ? (int64_t)(i % 10) : 7;
  bcase bc = base_bcase("heavy repeats", n, d, V, CLEMBED_F32, ids);
  bc.o.accumulate = 0;
  run_case(ctx, &bc);
  bc.o.scale_grad_by_freq = 1;
  bc.name = "heavy repeats, freq";
  run_case(ctx, &bc);

  /* Explicitly: row 7 of a fresh gradient equals the sequential sum, not a pairwise one. */
  uint64_t st = 99;
  float *g = rand_grad(&st, n * d, CLEMBED_F32);
  clembed_matrix gm = mk_matrix(ctx, n, d, CLEMBED_F32, 0, 0, g);
  clembed_matrix tm = mk_matrix(ctx, V, d, CLEMBED_F32, 0, 0, NULL);
  clembed_ids im = mk_ids(ctx, ids, n, CLEMBED_I32, 0);
  clembed_backward_options o = clembed_backward_defaults();
  o.accumulate = 0;
  OK(ctx, clembed_backward(ctx, &gm, &im, &o, &tm, 0, NULL, NULL));
  float *got = tu_read_f32(ctx, &tm);
  int pairwise_differs = 0;
  size_t m = 0;
  float *vals = malloc(n * sizeof(float));
  for (size_t c = 0; c < d; c++) {
    float seq = 0.0f;
    m = 0;
    for (size_t i = 0; i < n; i++)
      if (ids[i] == 7) {
        seq = seq + g[i * d + c];
        vals[m++] = g[i * d + c];
      }
    EXPECT(memcmp(&seq, &got[7 * d + c], 4) == 0, "column %zu: %.9g vs sequential %.9g", c, got[7 * d + c], seq);
    for (size_t w = 1; w < m; w *= 2) /* pairwise */
      for (size_t i = 0; i + w < m; i += 2 * w) vals[i] = vals[i] + vals[i + w];
    if (memcmp(&vals[0], &seq, 4) != 0) pairwise_differs = 1;
  }
  EXPECT(pairwise_differs, "the data cannot tell a pairwise sum from a sequential one");

  /* Identical bytes across runs. */
  OK(ctx, clembed_backward(ctx, &gm, &im, &o, &tm, 0, NULL, NULL));
  float *again = tu_read_f32(ctx, &tm);
  EXPECT(memcmp(got, again, V * d * sizeof(float)) == 0, "two runs differ");
  free(again);
  free(vals);
  free(got);
  free(g);
  free(ids);
  clembed_matrix_release(&gm);
  clembed_matrix_release(&tm);
  clembed_ids_release(&im);
}

/* The ids of the option cases: a skewed mix, a few out of range both ways. */
static int64_t *option_ids(size_t *pn, size_t *pV, size_t *pd) {
  size_t n = tu_small ? 60 : 900, V = tu_small ? 11 : 80, d = tu_small ? 6 : 33;
  *pn = n;
  *pV = V;
  *pd = d;
  int64_t *ids = malloc(n * sizeof(int64_t));
  uint64_t st = 5;
  for (size_t i = 0; i < n; i++) {
    /* a skewed mix of ids, a few out of range both ways */
    float u = (tu_rand(&st) + 1.0f) * 0.5f;
    ids[i] = (int64_t)(u * u * (float)V);
    if (i % 17 == 3) ids[i] = -1 - (int64_t)(i % 5);
    if (i % 23 == 4) ids[i] = (int64_t)V + (int64_t)(i % 3);
    if (i % 29 == 6) ids[i] = -(int64_t)V - 2;
  }
  return ids;
}

/* scale, padding_idx (non-negative and negative), scale_grad_by_freq,
 * accumulate, dropout and the atomic path, under CLAMP and ZERO */
TU_CASE(scale_padding_freq_accumulate_dropout) {
  size_t n, V, d;
  int64_t *ids = option_ids(&n, &V, &d);
  for (int freq = 0; freq < 2; freq++)
    for (int acc = 0; acc < 2; acc++)
      for (int pol = 1; pol <= 3; pol++) {
        char name[96];
        snprintf(name, sizeof name, "options freq %d acc %d policy %d", freq, acc, pol);
        bcase bc = base_bcase(name, n, d, V, CLEMBED_F32, ids);
        bc.o.scale = 0.37f;
        bc.o.padding_idx = 2;
        bc.o.policy = (clembed_index_policy)pol;
        bc.o.scale_grad_by_freq = freq;
        bc.o.accumulate = acc;
        if (pol != CLEMBED_INDEX_WRAP) run_case(ctx, &bc); /* WRAP reports the ids beyond -V */
        bc.o.padding_idx = -1 - 1; /* V - 2 */
        bc.o.dropout = 0.25f;
        bc.o.dropout_seed = 0x123456789ULL;
        if (pol != CLEMBED_INDEX_WRAP) run_case(ctx, &bc);
        bc.o.dropout = 0.0f;
        bc.o.deterministic = 0;
        bc.atomic_tol = 1;
        if (pol != CLEMBED_INDEX_WRAP) run_case(ctx, &bc);
      }

  free(ids);
}

/* WRAP: ids in [-V, V) are fine. */
TU_CASE(wrap_policy_negative_ids) {
  size_t n, V, d;
  int64_t *ids = option_ids(&n, &V, &d);
  int64_t *w = malloc(n * sizeof(int64_t));
  for (size_t i = 0; i < n; i++) w[i] = (int64_t)(i * 7 % (2 * V)) - (int64_t)V;
  bcase bc = base_bcase("wrap", n, d, V, CLEMBED_F16, w);
  bc.it = CLEMBED_I64;
  bc.o.policy = CLEMBED_INDEX_WRAP;
  run_case(ctx, &bc);
  bc.o.deterministic = 0;
  bc.atomic_tol = 1;
  bc.name = "wrap atomic";
  run_case(ctx, &bc);

  free(w);
  free(ids);
}

/* CHECK and WRAP with bad ids: no gradient from them, and the deferred error
 * names the first bad position and its value. */
TU_CASE(bad_ids_give_no_gradient_and_a_named_error) {
  size_t n, V, d;
  int64_t *ids = option_ids(&n, &V, &d);
  for (int pol = 0; pol < 2; pol++)
    for (int det = 0; det < 2; det++) {
      clembed_index_policy p = pol ? CLEMBED_INDEX_WRAP : CLEMBED_INDEX_CHECK;
      uint64_t s2 = 77;
      float *g = rand_grad(&s2, n * d, CLEMBED_F32);
      clembed_matrix gm = mk_matrix(ctx, n, d, CLEMBED_F32, 0, 0, g);
      clembed_matrix tm = mk_matrix(ctx, V, d, CLEMBED_F32, 0, 0, NULL);
      clembed_ids im = mk_ids(ctx, ids, n, CLEMBED_I64, 0);
      clembed_backward_options o = clembed_backward_defaults();
      o.policy = p;
      o.accumulate = 0;
      o.deterministic = det;
      OK(ctx, clembed_backward(ctx, &gm, &im, &o, &tm, 0, NULL, NULL));
      FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
      size_t first = 0;
      while (first < n && ref_resolve(ids[first], (int64_t)V, p, -1, NULL) >= 0) first++;
      char want[128];
      snprintf(want, sizeof want, "clembed_backward: ids[%zu] = %lld is outside [%s%zu, %zu)", first,
               (long long)ids[first], p == CLEMBED_INDEX_WRAP ? "-" : "", p == CLEMBED_INDEX_WRAP ? V : 0, V);
      EXPECT(strstr(clembed_context_message(ctx), want) != NULL, "message '%s', want '%s'",
             clembed_context_message(ctx), want);
      OK(ctx, clembed_finish(ctx)); /* cleared */
      float *got = tu_read_f32(ctx, &tm), *ref = calloc(V * d + 1, sizeof(float));
      ref_backward(g, ids, n, d, V, &o, ref);
      if (det) EXPECT_BITS(got, ref, V * d, "check policy");
      else {
        size_t bad = 0;
        for (size_t k = 0; k < V * d; k++) bad += fabsf(got[k] - ref[k]) > 1e-3f * (1.0f + fabsf(ref[k]));
        EXPECT(bad == 0, "check policy, atomic: %zu differ", bad);
      }
      free(got);
      free(ref);
      free(g);
      clembed_matrix_release(&gm);
      clembed_matrix_release(&tm);
      clembed_ids_release(&im);
    }
  free(ids);
}

/* Zero ids: accumulate keeps grad_table, overwrite zeroes it; events work. */
TU_CASE(zero_ids_accumulate_and_overwrite) {
  size_t V = 7, d = 5;
  uint64_t st = 3;
  float *t0 = rand_grad(&st, V * d, CLEMBED_F32);
  clembed_matrix gm = mk_matrix(ctx, 0, d, CLEMBED_BF16, 0, 0, NULL);
  clembed_matrix tm = mk_matrix(ctx, V, d, CLEMBED_F32, 2, 1, t0);
  clembed_ids im = {0};
  im.count = 0;
  im.type = CLEMBED_I32;
  for (int det = 0; det < 2; det++) {
    clembed_backward_options o = clembed_backward_defaults();
    o.deterministic = det;
    cl_event ev = NULL;
    OK(ctx, clembed_backward(ctx, &gm, &im, &o, &tm, 0, NULL, &ev));
    EXPECT(ev != NULL, "no event");
    if (ev) {
      EXPECT(clWaitForEvents(1, &ev) == CL_SUCCESS, "wait");
      clReleaseEvent(ev);
    }
    float *got = tu_read_f32(ctx, &tm);
    EXPECT_BITS(got, t0, V * d, "empty, accumulate");
    free(got);
    o.accumulate = 0;
    ev = NULL;
    OK(ctx, clembed_backward(ctx, &gm, &im, &o, &tm, 0, NULL, &ev));
    EXPECT(ev != NULL, "no event");
    if (ev) clReleaseEvent(ev);
    got = tu_read_f32(ctx, &tm);
    size_t nz = 0;
    for (size_t k = 0; k < V * d; k++) nz += got[k] != 0.0f;
    EXPECT(nz == 0, "empty, overwrite: %zu nonzero", nz);
    free(got);
    clembed_matrix_release(&tm);
    tm = mk_matrix(ctx, V, d, CLEMBED_F32, 2, 1, t0);
    /* sgd with no ids touches nothing */
    OK(ctx, clembed_sgd_update(ctx, &gm, &im, 0.5f, &o, &tm, 0, NULL, NULL));
    got = tu_read_f32(ctx, &tm);
    EXPECT_BITS(got, t0, V * d, "empty sgd");
    free(got);
  }
  tu_check_gaps(cl_queue, &tm, "empty");
  free(t0);
  clembed_matrix_release(&gm);
  clembed_matrix_release(&tm);
}

/* Learned positions: seq_len, position_offset, sequence_offsets; a position
 * past position_grad->rows is a deferred error. */
TU_CASE(learned_position_gradient) {
  size_t seq = tu_small ? 6 : 40, nseq = tu_small ? 4 : 25, n = seq * nseq - 3, d = tu_small ? 7 : 45, V = tu_small ? 9 : 60;
  size_t P = seq + 10;
  uint64_t st = 11;
  int64_t *ids = malloc(n * sizeof(int64_t));
  for (size_t i = 0; i < n; i++) ids[i] = (int64_t)(i * 13 % V);
  int64_t so[64];
  for (size_t b = 0; b < nseq; b++) so[b] = (int64_t)((b * 3) % 11);
  float *g = rand_grad(&st, n * d, CLEMBED_BF16);
  float *t0 = rand_grad(&st, V * d, CLEMBED_F32), *p0 = rand_grad(&st, P * d, CLEMBED_F32);
  clembed_matrix gm = mk_matrix(ctx, n, d, CLEMBED_BF16, 1, 2, g);
  clembed_ids im = mk_ids(ctx, ids, n, CLEMBED_I32, 0);
  clembed_ids sm = mk_ids(ctx, so, nseq, CLEMBED_I64, 1);
  for (int variant = 0; variant < 5; variant++) {
    clembed_matrix tm = mk_matrix(ctx, V, d, CLEMBED_F32, 0, 0, t0);
    clembed_matrix pm = mk_matrix(ctx, P, d, CLEMBED_F32, 4, 3, p0);
    clembed_backward_options o = clembed_backward_defaults();
    o.position_grad = &pm;
    o.padding_idx = 1;
    o.scale = 2.5f;
    if (variant == 0) o.seq_len = 0, o.position_offset = 0; /* one sequence: positions 0..n-1 overflow P */
    if (variant == 1) o.seq_len = seq, o.position_offset = 4;
    if (variant == 2) o.seq_len = seq, o.sequence_offsets = &sm;
    if (variant == 3) o.seq_len = seq, o.sequence_offsets = &sm, o.dropout = 0.5f, o.dropout_seed = 42;
    if (variant == 4) o.seq_len = seq, o.position_offset = 1, o.deterministic = 0;
    OK(ctx, clembed_backward(ctx, &gm, &im, &o, &tm, 0, NULL, NULL));
    clembed_status fs = clembed_finish(ctx);
    if (variant == 0) {
      EXPECT(fs == CLEMBED_ERR_INDEX_OUT_OF_RANGE, "positions past the table: %s", clembed_status_string(fs));
      char want[160];
      snprintf(want, sizeof want, "clembed_backward: token %zu is at position %zu, outside the position table [0, %zu)",
               P, P, P);
      EXPECT(strstr(clembed_context_message(ctx), want) != NULL, "message '%s', want '%s'",
             clembed_context_message(ctx), want);
    } else {
      EXPECT(fs == CLEMBED_OK, "variant %d: %s: %s", variant, clembed_status_string(fs), clembed_context_message(ctx));
    }
    float *pt = tu_read_f32(ctx, &pm), *pw = malloc(P * d * sizeof(float));
    memcpy(pw, p0, P * d * sizeof(float));
    ref_backward_positions(g, n, d, P, &o, o.sequence_offsets ? so : NULL, pw);
    EXPECT_BITS(pt, pw, P * d, "position_grad");
    tu_check_gaps(cl_queue, &pm, "position_grad");
    float *tt = tu_read_f32(ctx, &tm), *tw = malloc(V * d * sizeof(float));
    memcpy(tw, t0, V * d * sizeof(float));
    ref_backward(g, ids, n, d, V, &o, tw);
    if (!o.deterministic) {
      size_t bad = 0;
      for (size_t k = 0; k < V * d; k++) bad += fabsf(tt[k] - tw[k]) > 1e-4f * (1.0f + fabsf(tw[k]));
      EXPECT(bad == 0, "table gradient with positions, atomic: %zu differ", bad);
    } else {
      EXPECT_BITS(tt, tw, V * d, "table gradient with positions");
    }
    free(pt);
    free(pw);
    free(tt);
    free(tw);
    clembed_matrix_release(&tm);
    clembed_matrix_release(&pm);
  }
  free(ids);
  free(g);
  free(t0);
  free(p0);
  clembed_matrix_release(&gm);
  clembed_ids_release(&im);
  clembed_ids_release(&sm);
}

/* The mask of the forward: a table of nonzero values, distinct ids, dropout in
 * the forward; the backward of a gradient of ones has its zeros exactly where
 * the forward output has them. */
TU_CASE(dropout_mask_matches_the_forward) {
  size_t V = tu_small ? 24 : 300, n = tu_small ? 20 : 256, d = tu_small ? 13 : 130;
  float *tab = malloc(V * d * sizeof(float)), *ones = malloc(n * d * sizeof(float));
  for (size_t k = 0; k < V * d; k++) tab[k] = 1.0f + (float)(k % 7);
  for (size_t k = 0; k < n * d; k++) ones[k] = 1.0f;
  int64_t *ids = malloc(n * sizeof(int64_t));
  for (size_t i = 0; i < n; i++) ids[i] = (int64_t)((i * 7 + 3) % V); /* distinct: gcd(7, V) = 1 */
  clembed_matrix tm = mk_matrix(ctx, V, d, CLEMBED_F32, 0, 0, tab);
  clembed_matrix om = mk_matrix(ctx, n, d, CLEMBED_F32, 0, 0, NULL);
  clembed_matrix gm = mk_matrix(ctx, n, d, CLEMBED_F16, 0, 0, ones);
  clembed_matrix dm = mk_matrix(ctx, V, d, CLEMBED_F32, 0, 0, NULL);
  clembed_ids im = mk_ids(ctx, ids, n, CLEMBED_I64, 0);
  clembed_embed_options eo = clembed_embed_defaults();
  eo.dropout = 0.3f;
  eo.dropout_seed = 0xDEADBEEFCAFEULL;
  OK(ctx, clembed_embed(ctx, &tm, &im, &eo, &om, 0, NULL, NULL));
  clembed_backward_options o = clembed_backward_defaults();
  o.dropout = eo.dropout;
  o.dropout_seed = eo.dropout_seed;
  o.accumulate = 0;
  float keep = 1.0f / (1.0f - o.dropout);
  for (int det = 1; det >= 0; det--) {
    o.deterministic = det;
    OK(ctx, clembed_backward(ctx, &gm, &im, &o, &dm, 0, NULL, NULL));
    float *out = tu_read_f32(ctx, &om), *dw = tu_read_f32(ctx, &dm);
    size_t mismatch = 0, zeros = 0, wrong = 0;
    for (size_t i = 0; i < n; i++)
      for (size_t c = 0; c < d; c++) {
        float f = out[i * d + c], b = dw[(size_t)ids[i] * d + c];
        zeros += f == 0.0f;
        mismatch += (f == 0.0f) != (b == 0.0f);
        wrong += !(b == 0.0f || b == keep);
      }
    EXPECT(mismatch == 0, "det %d: %zu elements where the forward and backward masks disagree", det, mismatch);
    EXPECT(wrong == 0, "det %d: %zu kept gradients are not 1/(1-p)", det, wrong);
    EXPECT(zeros > n * d / 5 && zeros < n * d * 2 / 5, "det %d: %zu of %zu dropped", det, zeros, n * d);
    free(out);
    free(dw);
  }
  free(tab);
  free(ones);
  free(ids);
  clembed_matrix_release(&tm);
  clembed_matrix_release(&om);
  clembed_matrix_release(&gm);
  clembed_matrix_release(&dm);
  clembed_ids_release(&im);
}

/* sgd_update: touched rows become round(w - lr * r), the rest keep their bits. */
TU_CASE(sgd_touched_rows_rounded_untouched_kept) {
  size_t V = tu_small ? 40 : 500, n = tu_small ? 50 : 700, d = tu_small ? 9 : 66;
  for (int dt = 0; dt < 3; dt++)
    for (int var = 0; var < 3; var++) {
      uint64_t st = 1000 + (uint64_t)dt * 10 + (uint64_t)var;
      int64_t *ids = malloc(n * sizeof(int64_t));
      for (size_t i = 0; i < n; i++) {
        float u = (tu_rand(&st) + 1.0f) * 0.5f;
        ids[i] = (int64_t)(u * u * u * (float)V) % (int64_t)V; /* skewed, many rows untouched */
      }
      clembed_dtype tdt = (clembed_dtype)dt, gdt = (clembed_dtype)((dt + var) % 3);
      float *g = rand_grad(&st, n * d, gdt);
      float *w0 = rand_grad(&st, V * d, tdt);
      clembed_matrix gm = mk_matrix(ctx, n, d, gdt, var, var * 2, g);
      clembed_matrix tm = mk_matrix(ctx, V, d, tdt, var == 1 ? 3 : 0, var, w0);
      clembed_ids im = mk_ids(ctx, ids, n, var == 2 ? CLEMBED_I64 : CLEMBED_I32, 0);
      /* the raw bytes of the table before */
      size_t es = clembed_dtype_size(tdt), tld = tm.ld ? tm.ld : d;
      size_t bytes = (tm.offset + (V - 1) * tld + d) * es;
      unsigned char *before = malloc(bytes), *after = malloc(bytes);
      clEnqueueReadBuffer(cl_queue, tm.buffer, CL_TRUE, 0, bytes, before, 0, NULL, NULL);
      clembed_backward_options o = clembed_backward_defaults();
      o.scale = var == 1 ? 3.0f : 1.0f;
      o.scale_grad_by_freq = var == 2;
      o.padding_idx = var == 0 ? 0 : CLEMBED_NO_PADDING;
      o.dropout = var == 1 ? 0.2f : 0.0f;
      o.dropout_seed = 17;
      o.accumulate = var != 2; /* ignored */
      o.deterministic = var != 1; /* ignored: always the segmented pass */
      float lr = 0.125f + 0.01f * (float)var;
      OK(ctx, clembed_sgd_update(ctx, &gm, &im, lr, &o, &tm, 0, NULL, NULL));
      OK(ctx, clembed_finish(ctx));
      clEnqueueReadBuffer(cl_queue, tm.buffer, CL_TRUE, 0, bytes, after, 0, NULL, NULL);
      float *got = tu_read_f32(ctx, &tm);
      float *r = malloc(V * d * sizeof(float));
      uint32_t *cnt = malloc(V * sizeof(uint32_t));
      ref_backward_rows(g, ids, n, d, V, &o, r, cnt);
      size_t untouched_changed = 0, far = 0, not_rounded = 0;
      for (size_t v = 0; v < V; v++) {
        int touched = 0;
        for (size_t i = 0; i < n && !touched; i++) touched = ref_resolve(ids[i], (int64_t)V, o.policy, ref_padding_row(o.padding_idx, (int64_t)V), NULL) == (int64_t)v;
        EXPECT(touched == (cnt[v] != 0), "row %zu", v);
        size_t rb = (tm.offset + v * tld) * es;
        if (!touched) {
          untouched_changed += memcmp(before + rb, after + rb, d * es) != 0;
          continue;
        }
        for (size_t c = 0; c < d; c++) {
          double dd = (double)w0[v * d + c] - (double)lr * (double)r[v * d + c];
          if (tdt == CLEMBED_F32) far += fabs((double)got[v * d + c] - dd) > 1e-5 * (1.0 + fabs(dd));
          not_rounded += memcmp(&got[v * d + c], &(float){ref_sgd(w0[v * d + c], lr, r[v * d + c], tdt)}, 4) != 0;
        }
      }
      EXPECT(untouched_changed == 0, "sgd dtype %d var %d: %zu untouched rows changed", dt, var, untouched_changed);
      EXPECT(far == 0, "sgd dtype %d var %d: %zu elements off W - lr*dW by more than 1e-5", dt, var, far);
      EXPECT(not_rounded == 0, "sgd dtype %d var %d: %zu elements are not round(w - lr*r)", dt, var, not_rounded);
      tu_check_gaps(cl_queue, &tm, "sgd table");
      free(before);
      free(after);
      free(got);
      free(r);
      free(cnt);
      free(g);
      free(w0);
      free(ids);
      clembed_matrix_release(&gm);
      clembed_matrix_release(&tm);
      clembed_ids_release(&im);
    }
}

/* F16 by its bits: gradients with subnormal, huge and infinite halves are read
 * exactly, and an F16 table is written rounded to nearest even (subnormals,
 * ties, overflow to inf). With distinct ids, lr = 1, a zero table and grad = -t
 * the step stores exactly round_f16(t). */
TU_CASE(f16_gradients_and_table_by_their_bits) {
  size_t V = 64, d = 70, n = V;
  uint64_t st = 4242;
  float *t = malloc(n * d * sizeof(float)), *neg = malloc(n * d * sizeof(float));
  const float special[] = {65504.0f, 65519.99f, 65520.0f, 1e9f, 0x1p-24f, 0x1p-25f, 0x1.8p-24f, 0x1p-14f,
                           0x1p-14f - 0x1p-25f, 1.0f + 0x1p-11f, 1.0f + 0x1.8p-10f, 0x1.ffcp-15f, 3e-8f, 0x1p-26f,
                           2049.0f, 2051.0f, INFINITY};
  size_t ns = sizeof special / sizeof special[0];
  for (size_t k = 0; k < n * d; k++) {
    float m = 1.0f + 0.5f * (tu_rand(&st) + 1.0f), sgn = tu_rand(&st) < 0 ? -1.0f : 1.0f;
    int e = (int)((tu_rand(&st) + 1.0f) * 23.0f) - 28; /* 2^-28 .. 2^17 */
    t[k] = k % 5 == 0 ? sgn * special[(k / 5) % ns] : sgn * ldexpf(m, e);
    neg[k] = -t[k];
  }
  int64_t *ids = malloc(n * sizeof(int64_t));
  for (size_t i = 0; i < n; i++) ids[i] = (int64_t)((i * 5 + 1) % V);
  clembed_ids im = mk_ids(ctx, ids, n, CLEMBED_I32, 0);
  float *want = malloc(n * d * sizeof(float)), *got;
  /* table step: F32 gradient, F16 table of zeros, offset and ld so columns are odd */
  clembed_matrix gm = mk_matrix(ctx, n, d, CLEMBED_F32, 0, 0, neg);
  float *zeros = calloc(V * d, sizeof(float));
  clembed_matrix tm = mk_matrix(ctx, V, d, CLEMBED_F16, 3, 1, zeros);
  clembed_backward_options o = clembed_backward_defaults();
  OK(ctx, clembed_sgd_update(ctx, &gm, &im, 1.0f, &o, &tm, 0, NULL, NULL));
  got = tu_read_f32(ctx, &tm);
  for (size_t i = 0; i < n; i++)
    for (size_t c = 0; c < d; c++) want[(size_t)ids[i] * d + c] = ref_round(t[i * d + c], CLEMBED_F16);
  EXPECT_BITS(got, want, V * d, "f16 table rounding");
  free(got);
  tu_check_gaps(cl_queue, &tm, "f16 table");
  /* gradient read: F16 gradient of the same values, F32 grad_table, overwrite */
  clembed_matrix g16 = mk_matrix(ctx, n, d, CLEMBED_F16, 1, 5, t);
  clembed_matrix dm = mk_matrix(ctx, V, d, CLEMBED_F32, 0, 0, NULL);
  o.accumulate = 0;
  OK(ctx, clembed_backward(ctx, &g16, &im, &o, &dm, 0, NULL, NULL));
  got = tu_read_f32(ctx, &dm);
  for (size_t k = 0; k < V * d; k++) want[k] = 0.0f + want[k]; /* S = 0 + g: -0 becomes +0 */
  EXPECT_BITS(got, want, V * d, "f16 gradient read");
  free(got);
  free(want);
  free(zeros);
  free(t);
  free(neg);
  free(ids);
  clembed_ids_release(&im);
  clembed_matrix_release(&gm);
  clembed_matrix_release(&tm);
  clembed_matrix_release(&g16);
  clembed_matrix_release(&dm);
}

/* An out-of-order queue (the commands are chained by events), with a wait
 * list (held back by a user event until the call has returned, where the
 * device's user events allow it) and an event. */
TU_CASE(out_of_order_queue) {
  (void)ctx; /* this case runs on a context of its own, on an out-of-order queue */
  cl_device_id dev;
  clGetCommandQueueInfo(cl_queue, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  cl_command_queue_properties props = 0;
  clGetDeviceInfo(dev, CL_DEVICE_QUEUE_PROPERTIES, sizeof props, &props, NULL);
  if (!(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)) {
    tu_skip("the device has no out-of-order queues");
    return;
  }
  cl_int err;
  cl_command_queue q = clCreateCommandQueue(cl_ctx, dev, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
  EXPECT(err == CL_SUCCESS, "clCreateCommandQueue %d", err);
  if (err != CL_SUCCESS) return;
  clembed_context *oq = NULL;
  OK(oq, clembed_context_create_from_queue(q, &oq));
  clReleaseCommandQueue(q);
  if (!oq) return;
  size_t n = tu_small ? 100 : 3000, d = tu_small ? 11 : 40, V = tu_small ? 17 : 120, P = tu_small ? 30 : 100;
  uint64_t st = 8;
  int64_t *ids = malloc(n * sizeof(int64_t));
  for (size_t i = 0; i < n; i++) ids[i] = (int64_t)((tu_rand(&st) + 1.0f) * 0.5f * (float)V) % (int64_t)V;
  float *g = rand_grad(&st, n * d, CLEMBED_F32), *t0 = rand_grad(&st, V * d, CLEMBED_F32);
  float *zeros = calloc(P * d, sizeof(float));
  clembed_matrix gm = mk_matrix(oq, n, d, CLEMBED_F32, 0, 0, g);
  clembed_matrix tm = mk_matrix(oq, V, d, CLEMBED_F32, 0, 0, t0);
  clembed_matrix pm = mk_matrix(oq, P, d, CLEMBED_F32, 0, 0, zeros);
  clembed_ids im = {0};
  OK(oq, clembed_ids_create(oq, ids, n, CLEMBED_I64, &im));
  cl_event gate = clCreateUserEvent(cl_ctx, &err), done = NULL;
  clembed_backward_options o = clembed_backward_defaults();
  o.seq_len = P / 2;
  o.position_grad = &pm;
  o.scale_grad_by_freq = 1;
  const int gates = tu_user_events_gate(dev); /* else the gate opens before the call */
  if (!gates) clSetUserEventStatus(gate, CL_COMPLETE);
  OK(oq, clembed_backward(oq, &gm, &im, &o, &tm, 1, &gate, &done));
  if (gates) {
    cl_int est = 0;
    clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof est, &est, NULL);
    EXPECT(est != CL_COMPLETE, "the operation completed before its wait list");
    clSetUserEventStatus(gate, CL_COMPLETE);
  }
  EXPECT(clWaitForEvents(1, &done) == CL_SUCCESS, "waiting for the event");
  clReleaseEvent(done);
  clReleaseEvent(gate);
  OK(oq, clembed_finish(oq));
  float *got = tu_read_f32(oq, &tm), *pt = tu_read_f32(oq, &pm);
  float *pw = calloc(P * d, sizeof(float));
  ref_backward(g, ids, n, d, V, &o, t0);
  ref_backward_positions(g, n, d, P, &o, NULL, pw);
  EXPECT_BITS(got, t0, V * d, "out-of-order queue");
  EXPECT_BITS(pt, pw, P * d, "out-of-order queue, positions");
  /* sgd through the same queue */
  OK(oq, clembed_sgd_update(oq, &gm, &im, 0.5f, &o, &tm, 0, NULL, &done));
  if (done) {
    clWaitForEvents(1, &done);
    clReleaseEvent(done);
  }
  OK(oq, clembed_finish(oq));
  free(got);
  free(pt);
  free(pw);
  free(zeros);
  free(g);
  free(t0);
  free(ids);
  clembed_matrix_release(&gm);
  clembed_matrix_release(&tm);
  clembed_matrix_release(&pm);
  clembed_ids_release(&im);
  clembed_context_destroy(oq);
}

/* Every error the two functions return for bad arguments. */
TU_CASE(argument_errors) {
  const clembed_status E = CLEMBED_ERR_INVALID_ARGUMENT;
  int64_t ids_h[4] = {0, 1, 2, 3};
  clembed_matrix g = mk_matrix(ctx, 4, 3, CLEMBED_F32, 0, 0, NULL);
  clembed_matrix g5 = mk_matrix(ctx, 5, 3, CLEMBED_F32, 0, 0, NULL);
  clembed_matrix g4 = mk_matrix(ctx, 4, 4, CLEMBED_F32, 0, 0, NULL);
  clembed_matrix t = mk_matrix(ctx, 6, 3, CLEMBED_F32, 0, 0, NULL);
  clembed_matrix th = mk_matrix(ctx, 6, 3, CLEMBED_F16, 0, 0, NULL);
  clembed_matrix p = mk_matrix(ctx, 6, 3, CLEMBED_F32, 0, 0, NULL);
  clembed_matrix p4 = mk_matrix(ctx, 6, 4, CLEMBED_F32, 0, 0, NULL);
  clembed_ids ids = mk_ids(ctx, ids_h, 4, CLEMBED_I32, 0);
  clembed_ids so = mk_ids(ctx, ids_h, 1, CLEMBED_I32, 0);
  clembed_backward_options o = clembed_backward_defaults();
  cl_event ev = NULL;

  FAILS(ctx, E, clembed_backward(NULL, &g, &ids, NULL, &t, 0, NULL, NULL));
  FAILS(ctx, E, clembed_backward(ctx, NULL, &ids, NULL, &t, 0, NULL, NULL));
  FAILS(ctx, E, clembed_backward(ctx, &g, NULL, NULL, &t, 0, NULL, NULL));
  FAILS(ctx, E, clembed_backward(ctx, &g, &ids, NULL, NULL, 0, NULL, NULL));
  FAILS(ctx, E, clembed_backward(ctx, &g, &ids, NULL, &t, 1, NULL, NULL));
  FAILS(ctx, E, clembed_backward(ctx, &g, &ids, NULL, &t, 0, &ev, NULL));
  FAILS(ctx, E, clembed_backward(ctx, &g5, &ids, NULL, &t, 0, NULL, NULL)); /* grad rows != ids */
  FAILS(ctx, E, clembed_backward(ctx, &g4, &ids, NULL, &t, 0, NULL, NULL)); /* cols mismatch */
  FAILS(ctx, E, clembed_backward(ctx, &g, &ids, NULL, &th, 0, NULL, NULL)); /* grad_table not F32 */
  clembed_matrix nb = t;
  nb.buffer = NULL;
  FAILS(ctx, E, clembed_backward(ctx, &g, &ids, NULL, &nb, 0, NULL, NULL));
  clembed_matrix big = t;
  big.rows = 7;
  FAILS(ctx, E, clembed_backward(ctx, &g, &ids, NULL, &big, 0, NULL, NULL)); /* past the buffer */
  o.policy = (clembed_index_policy)9;
  FAILS(ctx, E, clembed_backward(ctx, &g, &ids, &o, &t, 0, NULL, NULL));
  o = clembed_backward_defaults();
  o.dropout = 1.0f;
  FAILS(ctx, E, clembed_backward(ctx, &g, &ids, &o, &t, 0, NULL, NULL));
  o.dropout = -0.5f;
  FAILS(ctx, E, clembed_backward(ctx, &g, &ids, &o, &t, 0, NULL, NULL));
  o = clembed_backward_defaults();
  o.padding_idx = 6;
  FAILS(ctx, E, clembed_backward(ctx, &g, &ids, &o, &t, 0, NULL, NULL));
  o.padding_idx = -7;
  FAILS(ctx, E, clembed_backward(ctx, &g, &ids, &o, &t, 0, NULL, NULL));
  o = clembed_backward_defaults();
  o.position_grad = &th;
  FAILS(ctx, E, clembed_backward(ctx, &g, &ids, &o, &t, 0, NULL, NULL)); /* position_grad not F32 */
  o.position_grad = &p4;
  FAILS(ctx, E, clembed_backward(ctx, &g, &ids, &o, &t, 0, NULL, NULL)); /* position_grad cols */
  o.position_grad = &p;
  o.seq_len = 2;
  o.sequence_offsets = &so; /* 2 sequences, 1 offset */
  FAILS(ctx, E, clembed_backward(ctx, &g, &ids, &o, &t, 0, NULL, NULL));
  o.seq_len = 4;
  OK(ctx, clembed_backward(ctx, &g, &ids, &o, &t, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));

  FAILS(ctx, E, clembed_sgd_update(NULL, &g, &ids, 0.1f, NULL, &t, 0, NULL, NULL));
  FAILS(ctx, E, clembed_sgd_update(ctx, NULL, &ids, 0.1f, NULL, &t, 0, NULL, NULL));
  FAILS(ctx, E, clembed_sgd_update(ctx, &g, NULL, 0.1f, NULL, &t, 0, NULL, NULL));
  FAILS(ctx, E, clembed_sgd_update(ctx, &g, &ids, 0.1f, NULL, NULL, 0, NULL, NULL));
  FAILS(ctx, E, clembed_sgd_update(ctx, &g5, &ids, 0.1f, NULL, &t, 0, NULL, NULL));
  FAILS(ctx, E, clembed_sgd_update(ctx, &g4, &ids, 0.1f, NULL, &th, 0, NULL, NULL));
  FAILS(ctx, E, clembed_sgd_update(ctx, &g, &ids, 0.1f, NULL, &t, 2, NULL, NULL));
  OK(ctx, clembed_sgd_update(ctx, &g, &ids, 0.1f, NULL, &th, 0, NULL, NULL)); /* F16 tables are fine */
  OK(ctx, clembed_finish(ctx));

  /* A bad id under CHECK in sgd: deferred, named after the operation. */
  int64_t bad_h[4] = {0, 1, 99, -3};
  clembed_ids bad = mk_ids(ctx, bad_h, 4, CLEMBED_I64, 0);
  OK(ctx, clembed_sgd_update(ctx, &g, &bad, 0.1f, NULL, &t, 0, NULL, NULL));
  FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
  EXPECT(strstr(clembed_context_message(ctx), "clembed_sgd_update: ids[2] = 99 is outside [0, 6)") != NULL,
         "message '%s'", clembed_context_message(ctx));
  /* ZERO drops it silently. */
  o = clembed_backward_defaults();
  o.policy = CLEMBED_INDEX_ZERO;
  OK(ctx, clembed_backward(ctx, &g, &bad, &o, &t, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));

  clembed_matrix_release(&g);
  clembed_matrix_release(&g5);
  clembed_matrix_release(&g4);
  clembed_matrix_release(&t);
  clembed_matrix_release(&th);
  clembed_matrix_release(&p);
  clembed_matrix_release(&p4);
  clembed_ids_release(&ids);
  clembed_ids_release(&so);
  clembed_ids_release(&bad);
}

static void setup(clembed_context *ctx) {
  cl_queue = clembed_context_queue(ctx);
  clGetCommandQueueInfo(cl_queue, CL_QUEUE_CONTEXT, sizeof cl_ctx, &cl_ctx, NULL);
}

int main(int argc, char **argv) {
  return tu_main(argc, argv, (tu_suite){.name = "test_backward", .device = 1, .setup = setup});
}
