/* Pruned tables (include/clembed.h, "Pruned tables"): clembed_embed_options.remap
 * and clembed_bag_options.remap, FBGEMM's pruned_array. A reference written
 * plainly here resolves each id (the policy against remap_rows, padding_idx an
 * id of the unpruned table, then remap[id]: a row, -1 pruned) and computes the
 * values in the contract's float32 order; the device's must be the same bits
 * (MEAN: within two ulps, the division's rounding). python/tests/test_remap.py
 * checks the bags against FBGEMM's inference TBE where fbgemm-gpu-cpu is
 * installed.
 *
 * Cases (`small` shrinks them for Oclgrind and rusticl):
 *   lookup     clembed_lookup / clembed_embed (scale, learned positions over
 *              sequences: the strided shape) through I32 and I64 remaps, I32
 *              and I64 ids, F32, BF16, I8_ROWWISE and Q8_0 tables, every policy
 *   bags       clembed_embedding_bag SUM, MEAN (a pruned id counts), MAX (and its max_rows),
 *              weighted SUM; padding_idx past the kept rows
 *   bags_policies  bags under ZERO, CLAMP and WRAP (SUM, MEAN)
 *   bags_multi clembed_embedding_bags: features with and without a remap, two
 *              remaps over one table, in one call
 *   deferred   a bad id (past remap_rows) and a damaged remap entry, under
 *              CHECK, ZERO and CLAMP, named by clembed_finish
 *   refused    the backward, the steps, the layer, padding_idx past remap_rows */
#include "test_util.h"

static uint64_t rng = 0x243F6A8885A308D3ULL;
static uint32_t rnd32(void) { return tu_rand32(&rng); }
static float rndf(void) { return (float)((int)(rnd32() % 20001) - 10000) / 997.0f; }

static int same_bits(float a, float b) {
  uint32_t x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  return x == y || (isnan(a) && isnan(b));
}

/* A pruned table: `kept` rows of values, and a remap of `urows` ids of the
 * unpruned table, each -1 (about a third) or a kept row (each kept row at most
 * once, as a pruning leaves them). */
typedef struct pruned {
  size_t kept, urows, cols;
  float *tv;       /* the table's values as the device reads them (kept x cols) */
  int64_t *remap;  /* urows entries */
} pruned;

static pruned mk_pruned(size_t kept, size_t urows, size_t cols) {
  pruned p = {kept, urows, cols, malloc((kept * cols + 1) * sizeof(float)), malloc((urows + 1) * sizeof(int64_t))};
  for (size_t i = 0; i < kept * cols; i++) p.tv[i] = rndf();
  size_t next = 0;
  for (size_t u = 0; u < urows; u++) p.remap[u] = (rnd32() % 3 == 0 || next == kept) ? -1 : (int64_t)next++;
  /* shuffle which kept row each unpruned id reads */
  for (size_t u = urows; u > 1; u--) {
    size_t v = rnd32() % u;
    int64_t t = p.remap[u - 1];
    p.remap[u - 1] = p.remap[v];
    p.remap[v] = t;
  }
  return p;
}

static void free_pruned(pruned *p) {
  free(p->tv);
  free(p->remap);
}

/* The reference's resolution of an id: its kept row, -1 for nothing (a bad
 * id, padding, ZERO), -2 for a pruned id (nothing, but MEAN counts it). */
static int64_t ref_row(const pruned *p, int64_t id, clembed_index_policy policy, int64_t pad_row) {
  int64_t v = ref_resolve(id, (int64_t)p->urows, policy, pad_row, NULL);
  if (v < 0) return -1;
  return p->remap[v] == -1 ? -2 : p->remap[v];
}

/* The table on the device in dtype d, and the values it holds (tv rewritten). */
static clembed_matrix table_of(clembed_context *ctx, pruned *p, clembed_dtype d) {
  clembed_matrix m = {0};
  OK(ctx, clembed_matrix_create(ctx, p->kept, p->cols, d, &m));
  OK(ctx, clembed_matrix_write(ctx, &m, p->tv, CLEMBED_F32));
  float *back = tu_read_f32(ctx, &m);
  memcpy(p->tv, back, p->kept * p->cols * sizeof(float));
  free(back);
  return m;
}

static void expect_error(clembed_context *ctx, const char *arg, int64_t index, const char *what) {
  clembed_status s = clembed_finish(ctx);
  clembed_error_detail d;
  memset(&d, 0, sizeof d);
  clembed_context_error(ctx, &d);
  EXPECT(s == CLEMBED_ERR_INDEX_OUT_OF_RANGE && d.argument && !strcmp(d.argument, arg) && d.index == index,
         "%s: clembed_finish gives %s naming %s[%lld], not INDEX_OUT_OF_RANGE naming %s[%lld]: %s", what,
         clembed_status_string(s), d.argument ? d.argument : "none", (long long)d.index, arg, (long long)index,
         clembed_context_message(ctx));
}

/* ------------------------------------------------------------ cases */

TU_CASE(lookup) {
  static const clembed_dtype dts[4] = {CLEMBED_F32, CLEMBED_BF16, CLEMBED_I8_ROWWISE, CLEMBED_Q8_0};
  static const clembed_index_policy pols[4] = {CLEMBED_INDEX_CHECK, CLEMBED_INDEX_ZERO, CLEMBED_INDEX_CLAMP,
                                               CLEMBED_INDEX_WRAP};
  size_t n = tu_small ? 48 : 600, seq = 8;
  for (int t = 0; t < 4; t++) {
    pruned p = mk_pruned(23, 61, 32);
    clembed_matrix m = table_of(ctx, &p, dts[t]), out = {0}, ptab = {0};
    float *pv = malloc(seq * p.cols * sizeof *pv);
    for (size_t i = 0; i < seq * p.cols; i++) pv[i] = rndf();
    OK(ctx, clembed_matrix_create(ctx, seq, p.cols, CLEMBED_F32, &ptab));
    OK(ctx, clembed_matrix_write(ctx, &ptab, pv, CLEMBED_F32));
    OK(ctx, clembed_matrix_create(ctx, n, p.cols, CLEMBED_F32, &out));
    for (int pi = 0; pi < 4; pi++) {
      clembed_index_policy pol = pols[pi];
      /* ids: every unpruned id often; out of range ones where the policy takes them */
      int64_t *id = malloc(n * sizeof *id);
      for (size_t i = 0; i < n; i++) {
        id[i] = (int64_t)(rnd32() % p.urows);
        if (pol != CLEMBED_INDEX_CHECK && i % 7 == 3) id[i] = (int64_t)p.urows + (int64_t)(rnd32() % 5);
        if (pol != CLEMBED_INDEX_CHECK && i % 11 == 5) id[i] = -1 - (int64_t)(rnd32() % p.urows);
        if (pol == CLEMBED_INDEX_WRAP && i % 7 == 3) id[i] = -(int64_t)p.urows; /* (WRAP: in range) */
      }
      clembed_index_type it = (t + pi) % 2 ? CLEMBED_I64 : CLEMBED_I32, rt = pi % 2 ? CLEMBED_I32 : CLEMBED_I64;
      clembed_ids ids = tu_ids(ctx, id, n, it), rm = tu_ids(ctx, p.remap, p.urows, rt);
      int64_t pad = pi == 1 ? (int64_t)p.urows - 2 : CLEMBED_NO_PADDING;
      for (int shape = 0; shape < 2; shape++) {
        clembed_embed_options o = clembed_embed_defaults();
        o.policy = pol;
        o.padding_idx = pad;
        o.remap = &rm;
        if (shape) { /* scale and learned positions over sequences of `seq` */
          o.scale = 2.0f;
          o.positions = CLEMBED_POSITIONS_TABLE;
          o.position_table = &ptab;
          o.seq_len = seq;
        }
        OK(ctx, clembed_embed(ctx, &m, &ids, &o, &out, 0, NULL, NULL));
        OK(ctx, clembed_finish(ctx));
        float *y = tu_read_f32(ctx, &out);
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
          int64_t r = ref_row(&p, id[i], pol, ref_padding_row(pad, (int64_t)p.urows));
          for (size_t c = 0; c < p.cols; c++) {
            float w = r >= 0 ? p.tv[r * p.cols + c] : 0.0f, want = w;
            if (shape) {
              want = 2.0f * w;
              want = want + pv[(i % seq) * p.cols + c];
            }
            if (!same_bits(y[i * p.cols + c], want) && bad++ < 3)
              EXPECT(0, "%s, policy %d, shape %d: id %zu (%lld, row %lld) [%zu] is %a, the reference %a",
                     clembed_dtype_name(dts[t]), (int)pol, shape, i, (long long)id[i], (long long)r, c,
                     y[i * p.cols + c], want);
          }
        }
        EXPECT(!bad, "%s, policy %d, shape %d, ids %s, remap %s: every token (%d differ)", clembed_dtype_name(dts[t]),
               (int)pol, shape, it == CLEMBED_I64 ? "I64" : "I32", rt == CLEMBED_I64 ? "I64" : "I32", bad);
        free(y);
      }
      clembed_ids_release(&ids);
      clembed_ids_release(&rm);
      free(id);
    }
    clembed_matrix_release(&m);
    clembed_matrix_release(&out);
    clembed_matrix_release(&ptab);
    free(pv);
    free_pruned(&p);
  }
}

/* bag b's column c in the contract's order (mode 0 SUM, 1 MEAN, 2 MAX; weighted SUM) */
static float ref_bag_row(const pruned *p, const int64_t *id, const int64_t *off, const float *w, size_t b, size_t c,
                         int mode, int weighted, clembed_index_policy pol, int64_t pad_row, int64_t *max_row) {
  float acc = 0.0f, best = 0.0f;
  int count = 0, taken = 0;
  *max_row = -1;
  for (int64_t i = off[b]; i < off[b + 1]; i++) {
    int64_t r = ref_row(p, id[i], pol, pad_row);
    count += r >= 0 || r == -2; /* MEAN counts a pruned id */
    if (r < 0) continue;
    float t = p->tv[r * p->cols + c];
    if (mode == 2) { /* the largest, the first on ties; the first NaN */
      if (taken == 0 || (!isnan(best) && (t > best || isnan(t)))) {
        best = t;
        *max_row = r; /* a row of the kept table */
      }
    } else {
      acc = weighted ? fmaf(w[i], t, acc) : acc + t;
    }
    taken++;
  }
  if (mode == 2) return best;
  return mode == 1 && count ? acc / (float)count : acc;
}

static float ref_bag(const pruned *p, const int64_t *id, const int64_t *off, const float *w, size_t b, size_t c,
                     int mode, int weighted, clembed_index_policy pol, int64_t pad_row) {
  int64_t unused;
  return ref_bag_row(p, id, off, w, b, c, mode, weighted, pol, pad_row, &unused);
}

typedef tu_bagset bagset;

/* tu_bags' bags over the unpruned ids, bag 3 (where there are 4) of a pruned id only */
static bagset mk_bags(const pruned *p, size_t bags) {
  bagset s = tu_bags(p->urows, bags, &rng);
  int64_t first_pruned = -1;
  for (size_t u = 0; u < p->urows && first_pruned < 0; u++)
    if (p->remap[u] == -1) first_pruned = (int64_t)u;
  if (bags > 3 && first_pruned >= 0)
    for (int64_t i = s.off[3]; i < s.off[4]; i++) s.id[i] = first_pruned;
  return s;
}

static int bag_ok(float got, float want, int mode) {
  if (mode == 1 && !isnan(want)) return fabsf(got - want) <= 2.0f * ldexpf(1.0f, -23) * fabsf(want);
  return same_bits(got, want);
}

TU_CASE(bags) {
  static const clembed_dtype dts[2] = {CLEMBED_F32, CLEMBED_I8_ROWWISE};
  size_t bags = tu_small ? 9 : 60;
  for (int t = 0; t < 2; t++) {
    pruned p = mk_pruned(30, 71, 20);
    clembed_matrix m = table_of(ctx, &p, dts[t]), out = {0}, wm = {0};
    bagset s = mk_bags(&p, bags);
    clembed_ids ids = tu_ids(ctx, s.id, s.n, t ? CLEMBED_I64 : CLEMBED_I32), offs = tu_ids(ctx, s.off, bags + 1, CLEMBED_I64);
    clembed_ids rm = tu_ids(ctx, p.remap, p.urows, t ? CLEMBED_I32 : CLEMBED_I64);
    OK(ctx, clembed_matrix_create(ctx, bags, p.cols, CLEMBED_F32, &out));
    OK(ctx, clembed_matrix_create(ctx, s.n, 1, CLEMBED_F32, &wm));
    if (s.n) OK(ctx, clembed_matrix_write(ctx, &wm, s.w, CLEMBED_F32));
    /* a padding id past the kept rows: an id of the unpruned table */
    int64_t pad = (int64_t)p.urows - 3;
    for (int mode = 0; mode < 4; mode++) {
      clembed_bag_options o = clembed_bag_defaults();
      o.mode = mode == 3 ? CLEMBED_BAG_SUM : (clembed_bag_mode)mode;
      if (mode == 3) o.per_sample_weights = &wm;
      o.padding_idx = mode % 2 ? pad : CLEMBED_NO_PADDING;
      o.remap = &rm;
      clembed_ids mr = {0};
      int64_t *mrh = malloc((bags * p.cols + 1) * sizeof *mrh);
      if (mode == 2) { /* MAX: the rows that gave each element, rows of the kept table */
        for (size_t k = 0; k < bags * p.cols; k++) mrh[k] = 77;
        mr = tu_ids(ctx, mrh, bags * p.cols, CLEMBED_I64);
        o.max_rows = &mr;
      }
      OK(ctx, clembed_embedding_bag(ctx, &m, &ids, &offs, &o, &out, 0, NULL, NULL));
      OK(ctx, clembed_finish(ctx));
      if (mode == 2) OK(ctx, clembed_ids_read(ctx, &mr, mrh));
      float *y = tu_read_f32(ctx, &out);
      int bad = 0, bad_rows = 0;
      for (size_t b = 0; b < bags; b++)
        for (size_t c = 0; c < p.cols; c++) {
          int64_t want_row;
          float want = ref_bag_row(&p, s.id, s.off, s.w, b, c, mode == 3 ? 0 : mode, mode == 3, CLEMBED_INDEX_CHECK,
                                   ref_padding_row(o.padding_idx, (int64_t)p.urows), &want_row);
          if (!bag_ok(y[b * p.cols + c], want, mode) && bad++ < 3)
            EXPECT(0, "%s, mode %d: bag %zu [%zu] is %a, the reference %a", clembed_dtype_name(dts[t]), mode, b, c,
                   y[b * p.cols + c], want);
          if (mode == 2 && mrh[b * p.cols + c] != want_row && bad_rows++ < 3)
            EXPECT(0, "%s, MAX: max_rows[%zu][%zu] is %lld, the reference %lld", clembed_dtype_name(dts[t]), b, c,
                   (long long)mrh[b * p.cols + c], (long long)want_row);
        }
      EXPECT(!bad && !bad_rows, "%s, mode %d: every bag (%d differ, %d max_rows)", clembed_dtype_name(dts[t]), mode,
             bad, bad_rows);
      free(y);
      free(mrh);
      clembed_ids_release(&mr);
    }
    /* MEAN divides by the bag's length with its pruned ids: a bag of one kept and one pruned id */
    {
      int64_t kept_id = -1, pruned_id = -1;
      for (size_t u = 0; u < p.urows; u++) {
        if (p.remap[u] >= 0 && kept_id < 0) kept_id = (int64_t)u;
        if (p.remap[u] == -1 && pruned_id < 0) pruned_id = (int64_t)u;
      }
      int64_t two[2] = {kept_id, pruned_id}, o2[2] = {0, 2};
      clembed_ids i2 = tu_ids(ctx, two, 2, CLEMBED_I64), of2 = tu_ids(ctx, o2, 2, CLEMBED_I64);
      clembed_matrix one = {0};
      OK(ctx, clembed_matrix_create(ctx, 1, p.cols, CLEMBED_F32, &one));
      clembed_bag_options o = clembed_bag_defaults();
      o.mode = CLEMBED_BAG_MEAN;
      o.remap = &rm;
      OK(ctx, clembed_embedding_bag(ctx, &m, &i2, &of2, &o, &one, 0, NULL, NULL));
      float *y = tu_read_f32(ctx, &one);
      float want = p.tv[p.remap[kept_id] * p.cols] / 2.0f;
      EXPECT(same_bits(y[0], want), "%s: MEAN of a kept and a pruned id is %a, half the kept row's %a",
             clembed_dtype_name(dts[t]), y[0], want);
      free(y);
      clembed_ids_release(&i2);
      clembed_ids_release(&of2);
      clembed_matrix_release(&one);
    }
    clembed_ids_release(&ids);
    clembed_ids_release(&offs);
    clembed_ids_release(&rm);
    clembed_matrix_release(&m);
    clembed_matrix_release(&out);
    clembed_matrix_release(&wm);
    tu_free_bags(&s);
    free_pruned(&p);
  }
}

/* bags of ids past remap_rows and negative ones under ZERO, CLAMP and WRAP
 * (SUM and MEAN: an id left out is not counted, a pruned one is) */
TU_CASE(bags_policies) {
  static const clembed_index_policy pols[3] = {CLEMBED_INDEX_ZERO, CLEMBED_INDEX_CLAMP, CLEMBED_INDEX_WRAP};
  size_t bags = tu_small ? 9 : 40;
  pruned p = mk_pruned(20, 45, 12);
  clembed_matrix m = table_of(ctx, &p, CLEMBED_F32), out = {0};
  bagset s = mk_bags(&p, bags);
  for (size_t i = 0; i < s.n; i++) { /* some past the end, some negative (WRAP's in range, and below) */
    if (i % 5 == 1) s.id[i] = (int64_t)p.urows + (int64_t)(rnd32() % 4);
    if (i % 7 == 2) s.id[i] = -1 - (int64_t)(rnd32() % (p.urows + 3));
  }
  clembed_ids ids = tu_ids(ctx, s.id, s.n, CLEMBED_I64), offs = tu_ids(ctx, s.off, bags + 1, CLEMBED_I64);
  clembed_ids rm = tu_ids(ctx, p.remap, p.urows, CLEMBED_I32);
  OK(ctx, clembed_matrix_create(ctx, bags, p.cols, CLEMBED_F32, &out));
  for (int k = 0; k < 3; k++)
    for (int mode = 0; mode < 2; mode++) {
      clembed_bag_options o = clembed_bag_defaults();
      o.mode = (clembed_bag_mode)mode;
      o.policy = pols[k];
      o.remap = &rm;
      OK(ctx, clembed_embedding_bag(ctx, &m, &ids, &offs, &o, &out, 0, NULL, NULL));
      clembed_status st = clembed_finish(ctx);
      /* WRAP reports the ids below -remap_rows */
      int wrap_bad = 0;
      for (size_t i = 0; i < s.n; i++) wrap_bad |= s.id[i] < -(int64_t)p.urows || s.id[i] >= (int64_t)p.urows;
      EXPECT(st == (pols[k] == CLEMBED_INDEX_WRAP && wrap_bad ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK),
             "policy %d: clembed_finish %s", (int)pols[k], clembed_status_string(st));
      float *y = tu_read_f32(ctx, &out);
      int bad = 0;
      for (size_t b = 0; b < bags; b++)
        for (size_t c = 0; c < p.cols; c++) {
          float want = ref_bag(&p, s.id, s.off, NULL, b, c, mode, 0, pols[k], -1);
          if (!bag_ok(y[b * p.cols + c], want, mode) && bad++ < 3)
            EXPECT(0, "policy %d, mode %d: bag %zu [%zu] is %a, the reference %a", (int)pols[k], mode, b, c,
                   y[b * p.cols + c], want);
        }
      EXPECT(!bad, "policy %d, mode %d: every bag (%d differ)", (int)pols[k], mode, bad);
      free(y);
    }
  tu_free_bags(&s);
  clembed_ids_release(&ids);
  clembed_ids_release(&offs);
  clembed_ids_release(&rm);
  clembed_matrix_release(&m);
  clembed_matrix_release(&out);
  free_pruned(&p);
}

TU_CASE(bags_multi) {
  /* features 0 and 2 read one pruned table through two remaps; feature 1 an
   * unpruned F32 table; all SUM and MEAN (one program) */
  size_t bags = tu_small ? 7 : 40;
  pruned p = mk_pruned(25, 50, 16), q = mk_pruned(25, 40, 16);
  memcpy(q.tv, p.tv, p.kept * p.cols * sizeof(float)); /* (one table: p's values) */
  pruned u = mk_pruned(20, 20, 8);
  for (size_t i = 0; i < u.urows; i++) u.remap[i] = (int64_t)i; /* (the reference of a table without a remap) */
  clembed_matrix tp = table_of(ctx, &p, CLEMBED_F32), tu = table_of(ctx, &u, CLEMBED_F32), out = {0};
  memcpy(q.tv, p.tv, p.kept * p.cols * sizeof(float));
  bagset s[3] = {mk_bags(&p, bags), mk_bags(&u, bags), mk_bags(&q, bags)};
  const pruned *ref[3] = {&p, &u, &q};
  clembed_ids ids[3], offs[3], rp = tu_ids(ctx, p.remap, p.urows, CLEMBED_I32),
                              rq = tu_ids(ctx, q.remap, q.urows, CLEMBED_I64);
  clembed_bag_feature f[3];
  for (int k = 0; k < 3; k++) {
    ids[k] = tu_ids(ctx, s[k].id, s[k].n, CLEMBED_I64);
    offs[k] = tu_ids(ctx, s[k].off, bags + 1, CLEMBED_I32);
    f[k] = clembed_bag_feature_defaults();
    f[k].table = k == 1 ? &tu : &tp;
    f[k].ids = &ids[k];
    f[k].offsets = &offs[k];
    f[k].options.mode = k == 2 ? CLEMBED_BAG_MEAN : CLEMBED_BAG_SUM;
    f[k].options.remap = k == 0 ? &rp : k == 2 ? &rq : NULL;
  }
  size_t cols = 16 + 8 + 16;
  OK(ctx, clembed_matrix_create(ctx, bags, cols, CLEMBED_F32, &out));
  OK(ctx, clembed_embedding_bags(ctx, f, 3, &out, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
  float *y = tu_read_f32(ctx, &out);
  size_t col0[3] = {0, 16, 24};
  for (int k = 0; k < 3; k++) {
    int bad = 0, mode = k == 2 ? 1 : 0;
    for (size_t b = 0; b < bags; b++)
      for (size_t c = 0; c < ref[k]->cols; c++) {
        float want = ref_bag(ref[k], s[k].id, s[k].off, NULL, b, c, mode, 0, CLEMBED_INDEX_CHECK, -1);
        float got = y[b * cols + col0[k] + c];
        if (!bag_ok(got, want, mode) && bad++ < 3)
          EXPECT(0, "features[%d]: bag %zu [%zu] is %a, the reference %a", k, b, c, got, want);
      }
    EXPECT(!bad, "features[%d] (%s): every bag (%d differ)", k, k == 1 ? "no remap" : "remapped", bad);
  }
  free(y);
  for (int k = 0; k < 3; k++) {
    clembed_ids_release(&ids[k]);
    clembed_ids_release(&offs[k]);
    tu_free_bags(&s[k]);
  }
  clembed_ids_release(&rp);
  clembed_ids_release(&rq);
  clembed_matrix_release(&tp);
  clembed_matrix_release(&tu);
  clembed_matrix_release(&out);
  free_pruned(&p);
  free_pruned(&q);
  free_pruned(&u);
}

TU_CASE(deferred) {
  pruned p = mk_pruned(6, 12, 8);
  p.remap[4] = 6;   /* damaged: past the kept rows */
  p.remap[9] = -3;  /* damaged: negative, not -1 */
  clembed_matrix m = table_of(ctx, &p, CLEMBED_F32), out = {0}, bo = {0};
  clembed_ids rm = tu_ids(ctx, p.remap, p.urows, CLEMBED_I64);
  OK(ctx, clembed_matrix_create(ctx, 5, 8, CLEMBED_F32, &out));
  OK(ctx, clembed_matrix_create(ctx, 1, 8, CLEMBED_F32, &bo));
  int64_t good = 0;
  while (p.remap[good] < -1 || p.remap[good] >= 6) good++;
  struct {
    int64_t id[5];
    clembed_index_policy pol;
    const char *arg;
    int64_t index;
    const char *what;
  } c[5] = {
      {{good, good, 12, good, 13}, CLEMBED_INDEX_CHECK, "ids", 2, "an id at remap_rows under CHECK"},
      {{good, good, good, 4, 9}, CLEMBED_INDEX_CHECK, "remap", 4, "remap[4] past the kept rows"},
      {{good, 9, good, 99, good}, CLEMBED_INDEX_ZERO, "remap", 9, "remap[9] = -3 under ZERO"},
      {{good, good, -13, good, good}, CLEMBED_INDEX_WRAP, "ids", 2, "an id below -remap_rows under WRAP"},
      {{good, 40, good, good, good}, CLEMBED_INDEX_CLAMP, "remap", 11, "an id clamped to 11: remap[11]"},
  };
  p.remap[11] = 100; /* (the clamped case's entry) */
  clembed_ids_release(&rm);
  rm = tu_ids(ctx, p.remap, p.urows, CLEMBED_I64);
  for (int k = 0; k < 5; k++) {
    clembed_ids ids = tu_ids(ctx, c[k].id, 5, CLEMBED_I32);
    clembed_embed_options o = clembed_embed_defaults();
    o.policy = c[k].pol;
    o.remap = &rm;
    OK(ctx, clembed_embed(ctx, &m, &ids, &o, &out, 0, NULL, NULL));
    expect_error(ctx, c[k].arg, c[k].index, c[k].what);
    /* the same ids as one bag */
    int64_t off[2] = {0, 5};
    clembed_ids offs = tu_ids(ctx, off, 2, CLEMBED_I64);
    clembed_bag_options b = clembed_bag_defaults();
    b.policy = c[k].pol;
    b.remap = &rm;
    OK(ctx, clembed_embedding_bag(ctx, &m, &ids, &offs, &b, &bo, 0, NULL, NULL));
    expect_error(ctx, c[k].arg, c[k].index, c[k].what);
    clembed_ids_release(&offs);
    clembed_ids_release(&ids);
  }
  /* the message names the entry */
  {
    int64_t id[5] = {good, good, good, 4, good};
    clembed_ids ids = tu_ids(ctx, id, 5, CLEMBED_I64);
    clembed_embed_options o = clembed_embed_defaults();
    o.remap = &rm;
    OK(ctx, clembed_embed(ctx, &m, &ids, &o, &out, 0, NULL, NULL));
    clembed_finish(ctx);
    const char *msg = clembed_context_message(ctx);
    EXPECT(strstr(msg, "ids[3] = 4") && strstr(msg, "remap[4]"), "the message names ids[3] and remap[4]: %s", msg);
    clembed_ids_release(&ids);
  }
  clembed_ids_release(&rm);
  clembed_matrix_release(&m);
  clembed_matrix_release(&out);
  clembed_matrix_release(&bo);
  free_pruned(&p);
}

TU_CASE(refused) {
  pruned p = mk_pruned(6, 12, 8);
  clembed_matrix m = table_of(ctx, &p, CLEMBED_F32), out = {0}, g = {0}, gt = {0};
  clembed_ids rm = tu_ids(ctx, p.remap, p.urows, CLEMBED_I64);
  int64_t id[4] = {0, 1, 2, 3}, off[3] = {0, 2, 4};
  clembed_ids ids = tu_ids(ctx, id, 4, CLEMBED_I64), offs = tu_ids(ctx, off, 3, CLEMBED_I64);
  OK(ctx, clembed_matrix_create(ctx, 4, 8, CLEMBED_F32, &out));
  OK(ctx, clembed_matrix_create(ctx, 2, 8, CLEMBED_F32, &g));
  OK(ctx, clembed_matrix_create(ctx, 6, 8, CLEMBED_F32, &gt));
  clembed_bag_options b = clembed_bag_defaults();
  b.remap = &rm;
  tu_refused(ctx, CLEMBED_ERR_UNSUPPORTED, clembed_bag_backward(ctx, &g, &ids, &offs, &b, &m, &gt, NULL, 0, NULL, NULL),
          "remap", "the bag backward with a remap");
  clembed_optimizer opt = clembed_optimizer_defaults(CLEMBED_SGD);
  opt.learning_rate = 0.1f;
  tu_refused(ctx, CLEMBED_ERR_UNSUPPORTED,
          clembed_bag_optimizer_step(ctx, &g, &ids, &offs, &b, &opt, &m, 0, NULL, NULL), "remap",
          "the bag step with a remap");
  clembed_bag_feature f = clembed_bag_feature_defaults();
  f.table = &m;
  f.ids = &ids;
  f.offsets = &offs;
  f.options = b;
  tu_refused(ctx, CLEMBED_ERR_UNSUPPORTED, clembed_bags_optimizer_step(ctx, &f, 1, &g, &opt, 0, NULL, NULL), "remap",
          "the multi-table step with a remap");
  clembed_embed_options o = clembed_embed_defaults();
  o.remap = &rm;
  o.norm.kind = CLEMBED_NORM_RMS;
  tu_refused(ctx, CLEMBED_ERR_UNSUPPORTED, clembed_embed(ctx, &m, &ids, &o, &out, 0, NULL, NULL), "remap",
          "the layer (a norm) with a remap");
  clembed_embed_grads eg = clembed_embed_grads_defaults();
  eg.table = &gt;
  o.norm.kind = CLEMBED_NORM_NONE;
  tu_refused(ctx, CLEMBED_ERR_UNSUPPORTED, clembed_embed_backward(ctx, &out, &m, &ids, &o, &eg, 0, NULL, NULL), "remap",
          "the layer's backward with a remap");
  o.padding_idx = 12; /* past remap_rows, though an id of 12 rows */
  tu_refused(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_embed(ctx, &m, &ids, &o, &out, 0, NULL, NULL), "padding_idx",
          "padding_idx at remap_rows");
  o.padding_idx = 8; /* past the kept rows, an id of the unpruned table: taken */
  OK(ctx, clembed_embed(ctx, &m, &ids, &o, &out, 0, NULL, NULL));
  clembed_ids broken = rm;
  broken.count = 1000; /* past its buffer */
  o.padding_idx = CLEMBED_NO_PADDING;
  o.remap = &broken;
  tu_refused(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_embed(ctx, &m, &ids, &o, &out, 0, NULL, NULL), "remap",
          "a remap past its buffer");
  b.remap = &broken;
  tu_refused(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_embedding_bag(ctx, &m, &ids, &offs, &b, &g, 0, NULL, NULL),
          "remap", "a bag remap past its buffer");
  OK(ctx, clembed_finish(ctx));
  clembed_ids_release(&ids);
  clembed_ids_release(&offs);
  clembed_ids_release(&rm);
  clembed_matrix_release(&m);
  clembed_matrix_release(&out);
  clembed_matrix_release(&g);
  clembed_matrix_release(&gt);
  free_pruned(&p);
}

int main(int argc, char **argv) { return tu_main(argc, argv, (tu_suite){.name = "test_remap", .device = 1}); }
