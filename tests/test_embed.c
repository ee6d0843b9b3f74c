/* clembed_embed: the fused forward out[i] = dropout(scale * W[ids[i]] + P[p(i)])
 * against a plain reference.
 *   Token i is in sequence b = i / seq_len at p = first_b + i % seq_len, with
 *   first_b = sequence_offsets[b] if given, else position_offset.
 * Tolerances:
 *   POSITIONS_NONE / POSITIONS_TABLE: exact. The reference does the device's
 *     float32 operations in the same order (scale*W, + P, * keep), then the
 *     output dtype's rounding (round to nearest even).
 *   POSITIONS_SINUSOID: the token part is exact (float scale*W), the positional
 *     part is the float64 formula of include/clembed.h; F32 output within 4e-6 of their sum
 *     (times keep = 1/(1-p) under dropout); other output dtypes: the rounding of
 *     a value within that bound.
 * Dropout: the mask is Philox(seed, i*cols + c) word 0, kept when
 *   u(x0) = (x0 >> 8) * 2^-24 >= p (ref_philox, ref_unit), element for element; kept
 *   values are multiplied by keep = 1.0f / (1.0f - p) computed in float; the kept
 *   fraction of a large output is within 4 sigma of 1 - p; same seed same mask,
 *   a different seed (low or high 32 bits) a different mask.
 * Also: seq_len (2-D batches, a last partial sequence), position_offset,
 * sequence_offsets (I32 and I64, at an offset, KV-cache style), padding (token
 * row zero, position still added), positions past a learned table and negative
 * sequence offsets (deferred CLEMBED_ERR_INDEX_OUT_OF_RANGE naming the token and
 * position, that row's positional part zero), and the argument errors. */
#include "test_util.h"

static const char *DN[3] = {"F32", "F16", "BF16"};

/* ------------------------------------------------------------ helpers */

/* ------------------------------------------------------------ one case */

typedef struct ecase {
  const char *name;
  size_t V, d, n;
  clembed_dtype tdt, odt, pdt;
  clembed_positions positions;
  clembed_sinusoid sin;
  size_t P;                 /* position table rows */
  float scale;
  int64_t padding;
  int keep_row;             /* padding_keeps_row: the padding row read as stored */
  size_t seq_len, position_offset;
  const int64_t *so;        /* sequence offsets (NULL: none) */
  size_t so_count;
  clembed_index_type so_type;
  size_t so_off;            /* the offsets sit at this offset in their buffer */
  float dropout;
  uint64_t seed;
  size_t t_pad, t_off, o_pad, o_off, p_pad, p_off;
  const int64_t *ids;       /* NULL: random valid ids */
  clembed_index_type itype;
  clembed_index_policy policy;
} ecase;

typedef struct eresult {
  size_t kept, nonzero; /* device elements kept among those whose value before dropout is not 0 */
  float *got;           /* n x d as F32, the caller frees */
} eresult;

static eresult run_case(clembed_context *ctx, const ecase *c) {
  eresult res = {0, 0, NULL};
  size_t V = c->V, d = c->d, n = c->n;
  uint64_t rng = 0xE3B + V * 131 + d * 17 + n + (uint64_t)c->positions * 7;
  void *w = tu_alloc_elems(V * d, c->tdt);
  for (size_t i = 0; i < V * d; i++) tu_set_elem(w, i, c->tdt, tu_rand(&rng));
  int64_t *ids = malloc((n ? n : 1) * sizeof *ids);
  for (size_t i = 0; i < n; i++) ids[i] = c->ids ? c->ids[i] : (int64_t)(((uint64_t)((tu_rand(&rng) + 1.0f) * 1e6f)) % V);
  if (!c->ids && c->padding != CLEMBED_NO_PADDING)
    for (size_t i = 0; i < n; i += 3) ids[i] = ref_padding_row(c->padding, (int64_t)V);
  void *hid = calloc(n ? n : 1, 8);
  for (size_t i = 0; i < n; i++) {
    if (c->itype == CLEMBED_I32) ((int32_t *)hid)[i] = (int32_t)ids[i];
    else ((int64_t *)hid)[i] = ids[i];
  }
  size_t P = c->P;
  void *ptab = tu_alloc_elems(P * d, c->pdt);
  for (size_t i = 0; i < P * d; i++) tu_set_elem(ptab, i, c->pdt, tu_rand(&rng) * 0.5f);

  clembed_matrix table = {0}, out = {0}, pm = {0};
  clembed_ids did = {0}, dso = {0};
  OK(ctx, tu_make_strided(ctx, V, d, c->t_pad, c->t_off, c->tdt, w, &table));
  OK(ctx, clembed_ids_create(ctx, hid, n, c->itype, &did));
  void *zero = tu_alloc_elems(n * d, c->odt);
  OK(ctx, tu_make_strided(ctx, n, d, c->o_pad, c->o_off, c->odt, zero, &out));
  clembed_embed_options o = clembed_embed_defaults();
  o.scale = c->scale;
  o.policy = c->policy;
  o.padding_idx = c->padding;
  o.padding_keeps_row = c->keep_row;
  o.positions = c->positions;
  o.sinusoid = c->sin;
  o.seq_len = c->seq_len;
  o.position_offset = c->position_offset;
  o.dropout = c->dropout;
  o.dropout_seed = c->seed;
  if (c->positions == CLEMBED_POSITIONS_TABLE) {
    OK(ctx, tu_make_strided(ctx, P, d, c->p_pad, c->p_off, c->pdt, ptab, &pm));
    o.position_table = &pm;
  }
  if (c->so) {
    size_t m = c->so_off + c->so_count;
    void *h = calloc(m ? m : 1, 8);
    for (size_t i = 0; i < m; i++) {
      int64_t v = i < c->so_off ? -999 : c->so[i - c->so_off];
      if (c->so_type == CLEMBED_I32) ((int32_t *)h)[i] = (int32_t)v;
      else ((int64_t *)h)[i] = v;
    }
    OK(ctx, clembed_ids_create(ctx, h, m, c->so_type, &dso));
    dso.offset = c->so_off;
    dso.count = c->so_count;
    o.sequence_offsets = &dso;
    free(h);
  }
  clembed_status s = clembed_embed(ctx, &table, &did, &o, &out, 0, NULL, NULL);
  EXPECT(s == CLEMBED_OK, "%s: embed: %s: %s", c->name, clembed_status_string(s), clembed_context_message(ctx));
  clembed_status fin = clembed_finish(ctx);
  char finmsg[512];
  snprintf(finmsg, sizeof finmsg, "%s", clembed_context_message(ctx));

  /* the reference (padding_keeps_row: the padding row is any other row) */
  int64_t pad = c->keep_row ? -1 : ref_padding_row(c->padding, (int64_t)V);
  float keep = c->dropout > 0.0f ? ref_dropout_scale(c->dropout) : 1.0f;
  long long first_bad_id = -1, first_bad_pos = -1, bad_id_val = 0, bad_pos_val = 0;
  void *got = tu_alloc_elems(n * d, c->odt);
  OK(ctx, clembed_matrix_read(ctx, &out, got, c->odt));
  res.got = malloc((n ? n : 1) * d * sizeof *res.got);
  size_t bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    int64_t id = ids[i];
    int id_bad;
    int64_t r = ref_resolve(id, (int64_t)V, c->policy, pad, &id_bad);
    if (id_bad && first_bad_id < 0) {
      first_bad_id = (long long)i;
      bad_id_val = (long long)id;
    }
    size_t b = c->seq_len ? i / c->seq_len : 0, j = c->seq_len ? i % c->seq_len : i;
    int64_t first = c->so ? c->so[b] : (int64_t)c->position_offset;
    int64_t p = first + (int64_t)j;
    int pos_ok = 1;
    if (c->positions == CLEMBED_POSITIONS_SINUSOID) pos_ok = first >= 0;
    if (c->positions == CLEMBED_POSITIONS_TABLE) pos_ok = first >= 0 && (uint64_t)p < (uint64_t)P;
    if (!pos_ok && first_bad_pos < 0) {
      first_bad_pos = (long long)i;
      bad_pos_val = (long long)p;
    }
    for (size_t k = 0; k < d; k++) {
      float wk = r >= 0 ? tu_elem(w, (size_t)r * d + k, c->tdt) : 0.0f;
      float tok = ref_forward(c->scale, r >= 0 ? &wk : NULL, NULL, 0.0f, 1);
      size_t e = i * d + k;
      int keep_it = c->dropout > 0.0f ? ref_dropout_kept(c->seed, (uint64_t)e, c->dropout) : 1;
      float g = tu_elem(got, e, c->odt);
      res.got[e] = g;
      int ok;
      double err = 0.0;
      if (c->positions == CLEMBED_POSITIONS_SINUSOID && pos_ok) {
        double ref = (double)tok + ref_sinusoid(&c->sin, d, (uint64_t)p, k), before = ref;
        double tol = 4e-6;
        if (c->dropout > 0.0f) {
          ref = keep_it ? ref * (double)keep : 0.0;
          tol *= (double)keep;
        }
        err = fabs((double)g - ref);
        if (c->odt == CLEMBED_F32) ok = err <= tol;
        else ok = g >= ref_round((float)(ref - tol), c->odt) && g <= ref_round((float)(ref + tol), c->odt);
        if (!keep_it) ok = g == 0.0f;
        if (before != 0.0) {
          res.nonzero++;
          res.kept += g != 0.0f;
        }
      } else {
        int has_pos = c->positions == CLEMBED_POSITIONS_TABLE && pos_ok;
        float pk = has_pos ? tu_elem(ptab, (size_t)p * d + k, c->pdt) : 0.0f;
        float before = ref_forward(c->scale, r >= 0 ? &wk : NULL, has_pos ? &pk : NULL, 0.0f, 1);
        float v = ref_forward(c->scale, r >= 0 ? &wk : NULL, has_pos ? &pk : NULL, c->dropout, keep_it);
        float want = ref_round(v, c->odt);
        ok = g == want || (isnan(g) && isnan(want));
        err = fabs((double)g - (double)want);
        if (before != 0.0f) {
          res.nonzero++;
          res.kept += g != 0.0f;
        }
      }
      if (err > worst) worst = err;
      if (!ok) {
        if (bad < 3)
          fprintf(stderr, "  %s: token %zu (id %lld, position %lld) column %zu: got %.9g (err %.3g)%s\n", c->name, i,
                  (long long)id, (long long)p, k, g, err, keep_it ? "" : " (dropped)");
        bad++;
      }
    }
  }
  EXPECT(bad == 0, "%s: %zu of %zu elements wrong (max err %.3g)", c->name, bad, n * d, worst);
  /* the deferred error: the first bad token, by token index, id before position */
  if (first_bad_id >= 0 || first_bad_pos >= 0) {
    char want[160];
    if (first_bad_id >= 0 && (first_bad_pos < 0 || first_bad_id <= first_bad_pos))
      snprintf(want, sizeof want, "ids[%lld] = %lld is outside [0, %zu)", first_bad_id, bad_id_val, V);
    else
      snprintf(want, sizeof want, "token %lld is at position %lld", first_bad_pos, bad_pos_val);
    EXPECT(fin == CLEMBED_ERR_INDEX_OUT_OF_RANGE, "%s: finish returned %s, expected INDEX_OUT_OF_RANGE", c->name,
           clembed_status_string(fin));
    EXPECT(strstr(finmsg, want) != NULL, "%s: message '%s' lacks '%s'", c->name, finmsg, want);
    if (first_bad_pos >= 0 && !(first_bad_id >= 0 && first_bad_id <= first_bad_pos))
      EXPECT(strstr(finmsg, "position") != NULL, "%s: message '%s' lacks 'position'", c->name, finmsg);
    OK(ctx, clembed_finish(ctx)); /* cleared */
  } else {
    EXPECT(fin == CLEMBED_OK, "%s: finish: %s: %s", c->name, clembed_status_string(fin), finmsg);
  }
  /* nothing outside the output window was written */
  if (c->o_pad || c->o_off) {
    size_t touched = tu_written_outside(ctx, &out, c->o_off + n * (d + c->o_pad));
    EXPECT(touched == 0, "%s: %zu elements outside the output window were written", c->name, touched);
  }
  clembed_matrix_release(&table);
  clembed_matrix_release(&out);
  clembed_matrix_release(&pm);
  clembed_ids_release(&did);
  clembed_ids_release(&dso);
  free(w);
  free(ids);
  free(hid);
  free(ptab);
  free(zero);
  free(got);
  return res;
}

static ecase base_case(const char *name, size_t V, size_t d, size_t n) {
  ecase c;
  memset(&c, 0, sizeof c);
  c.name = name;
  c.V = V;
  c.d = d;
  c.n = n;
  c.tdt = c.odt = c.pdt = CLEMBED_F32;
  c.positions = CLEMBED_POSITIONS_NONE;
  c.sin = clembed_sinusoid_defaults(); /* 10000, PAIR, INTERLEAVED */
  c.scale = 1.0f;
  c.padding = CLEMBED_NO_PADDING;
  c.so_type = CLEMBED_I32;
  c.itype = CLEMBED_I32;
  c.policy = CLEMBED_INDEX_CHECK;
  return c;
}

static void run_free(clembed_context *ctx, const ecase *c) { free(run_case(ctx, c).got); }

/* ------------------------------------------------------------ sinusoid */

/* scale sqrt(d_model); batches of seq_len; position_offset near and far */
TU_CASE(sinusoid_batches_and_position_offsets) {
  size_t n = tu_small ? 60 : 600;
  ecase c = base_case("sinusoid", 100, 64, n);
  c.positions = CLEMBED_POSITIONS_SINUSOID;
  c.scale = 8.0f; /* sqrt(d_model) */
  run_free(ctx, &c);

  c.name = "sinusoid seq_len 50, position_offset 1000 (100 small)";
  c.seq_len = 50;
  c.position_offset = tu_small ? 100 : 1000;
  run_free(ctx, &c);

  c.name = "sinusoid far position_offset";
  c.position_offset = ((size_t)1 << 20) - 50;
  run_free(ctx, &c);
}

/* sequence offsets, KV-cache style: each sequence starts elsewhere (I32, I64 at
 * an offset, a last partial sequence, seq_len 0) */
TU_CASE(sinusoid_sequence_offsets) {
  int64_t so[16];
  for (int b = 0; b < 16; b++) so[b] = (int64_t)b * 37 + (b % 3 == 2 ? 1000000 : 0);
  ecase c = base_case("sinusoid sequence_offsets I32", 50, 37, 12 * 16);
  c.positions = CLEMBED_POSITIONS_SINUSOID;
  c.seq_len = 12;
  c.position_offset = 5; /* overridden */
  c.so = so;
  c.so_count = 16;
  c.so_type = CLEMBED_I32;
  run_free(ctx, &c);
  c.name = "sinusoid sequence_offsets I64 at offset 3, I64 ids";
  c.so_type = CLEMBED_I64;
  c.so_off = 3;
  c.itype = CLEMBED_I64;
  run_free(ctx, &c);
  c.name = "sinusoid sequence_offsets, last sequence partial";
  c.n = 12 * 15 + 5; /* 16 sequences, the last of 5 tokens */
  run_free(ctx, &c);
  c.name = "sinusoid sequence_offsets with seq_len 0 (one sequence)";
  c.seq_len = 0;
  c.n = 40;
  c.so = so + 2; /* starts at 1000074 */
  c.so_count = 1;
  run_free(ctx, &c);
}

/* the variants, odd d, other bases */
TU_CASE(sinusoid_variants_odd_d_other_bases) {
  const clembed_sinusoid vs[4] = {{sizeof(clembed_sinusoid), 10000.0, CLEMBED_EXPONENT_INDEX, CLEMBED_LAYOUT_INTERLEAVED},
                                  {sizeof(clembed_sinusoid), 10000.0, CLEMBED_EXPONENT_PAIR, CLEMBED_LAYOUT_HALVES},
                                  {sizeof(clembed_sinusoid), 5.0, CLEMBED_EXPONENT_INDEX, CLEMBED_LAYOUT_INTERLEAVED},
                                  {sizeof(clembed_sinusoid), 2.5, CLEMBED_EXPONENT_PAIR, CLEMBED_LAYOUT_HALVES}};
  const size_t ds[3] = {1, 3, 37};
  for (int v = 0; v < 4; v++)
    for (int k = 0; k < 3; k++) {
      char name[96];
      snprintf(name, sizeof name, "sinusoid base %g exp %d layout %d d %zu", vs[v].base, vs[v].exponent,
               vs[v].layout, ds[k]);
      ecase c = base_case(name, 30, ds[k], 40);
      c.positions = CLEMBED_POSITIONS_SINUSOID;
      c.sin = vs[v];
      c.seq_len = 7;
      c.position_offset = (tu_small ? 50 : 100000) * (size_t)v;
      run_free(ctx, &c);
    }
}

/* every table and output dtype, ld > cols and offsets */
TU_CASE(sinusoid_every_dtype_strided) {
  const clembed_dtype dts[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  for (int t = 0; t < 3; t++)
    for (int o = 0; o < 3; o++) {
      char name[96];
      snprintf(name, sizeof name, "sinusoid table %s out %s strided", DN[t], DN[o]);
      ecase c = base_case(name, 40, 33, 50);
      c.positions = CLEMBED_POSITIONS_SINUSOID;
      c.tdt = dts[t];
      c.odt = dts[o];
      c.scale = 2.0f;
      c.seq_len = 10;
      c.position_offset = tu_small ? 345 : 12345;
      c.t_pad = 3;
      c.t_off = 5;
      c.o_pad = 2;
      c.o_off = 7;
      run_free(ctx, &c);
    }
}

/* a padding token's row is zero but it keeps its positional part (sinusoid,
 * a learned table; a non-negative and a negative padding_idx) */
TU_CASE(padding_keeps_position) {
  ecase c = base_case("sinusoid with padding", 20, 16, 45);
  c.positions = CLEMBED_POSITIONS_SINUSOID;
  c.padding = 4;
  c.scale = 3.0f;
  c.seq_len = 9;
  c.position_offset = 77;
  run_free(ctx, &c);
  c.name = "sinusoid with padding_idx -2 (rows - 2)";
  c.padding = -2;
  run_free(ctx, &c);
  c = base_case("table with padding", 10, 8, 30);
  c.positions = CLEMBED_POSITIONS_TABLE;
  c.P = 30;
  c.padding = 0;
  run_free(ctx, &c);
}

/* padding_keeps_row (PyTorch's F.embedding): the padding id's row is read as
 * stored, its positional part added as for any token; every third token is
 * the padding id and the rows are random (never zero), so a zero row fails. */
TU_CASE(padding_keeps_row_reads_the_stored_row) {
  ecase c = base_case("padding_keeps_row, no positions", 20, 16, 45);
  c.padding = 4;
  c.keep_row = 1;
  c.scale = 3.0f;
  run_free(ctx, &c);
  c.name = "padding_keeps_row, padding_idx -2, f16 table, bf16 out";
  c.padding = -2;
  c.tdt = CLEMBED_F16;
  c.odt = CLEMBED_BF16;
  c.scale = 1.0f;
  run_free(ctx, &c);
  c = base_case("padding_keeps_row, sinusoid", 20, 16, 45);
  c.positions = CLEMBED_POSITIONS_SINUSOID;
  c.padding = 4;
  c.keep_row = 1;
  c.seq_len = 9;
  c.position_offset = 77;
  run_free(ctx, &c);
  c = base_case("padding_keeps_row, learned table, strided", 10, 8, 30);
  c.positions = CLEMBED_POSITIONS_TABLE;
  c.P = 30;
  c.padding = 0;
  c.keep_row = 1;
  c.t_pad = 3;
  c.o_off = 5;
  run_free(ctx, &c);
  /* CLAMP onto the padding row (rows - 1): read as stored too */
  static const int64_t far_ids[6] = {9, 12, -3, 0, 9, 100};
  c = base_case("padding_keeps_row, CLAMP onto the padding row", 10, 8, 6);
  c.ids = far_ids;
  c.policy = CLEMBED_INDEX_CLAMP;
  c.padding = 9;
  c.keep_row = 1;
  run_free(ctx, &c);

  /* the stored row itself, against the table as written (a plain reference) */
  enum { RV = 6, RD = 5, RN = 4 };
  float w[RV * RD], got[RN * RD];
  for (int i = 0; i < RV * RD; i++) w[i] = 0.5f + (float)i;
  const int32_t rid[RN] = {2, 5, 2, 0};
  clembed_matrix t, out;
  clembed_ids di;
  OK(ctx, clembed_matrix_create(ctx, RV, RD, CLEMBED_F32, &t));
  OK(ctx, clembed_matrix_write(ctx, &t, w, CLEMBED_F32));
  OK(ctx, clembed_matrix_create(ctx, RN, RD, CLEMBED_F32, &out));
  OK(ctx, clembed_ids_create(ctx, rid, RN, CLEMBED_I32, &di));
  clembed_embed_options o = clembed_embed_defaults();
  o.padding_idx = 2;
  for (int keep = 0; keep < 2; keep++) {
    o.padding_keeps_row = keep;
    OK(ctx, clembed_embed(ctx, &t, &di, &o, &out, 0, NULL, NULL));
    OK(ctx, clembed_matrix_read(ctx, &out, got, CLEMBED_F32));
    int bad = 0;
    for (int i = 0; i < RN; i++)
      for (int k = 0; k < RD; k++) bad += got[i * RD + k] != (rid[i] == 2 && !keep ? 0.0f : w[rid[i] * RD + k]);
    EXPECT(!bad, "padding_keeps_row %d: %d values are not the %s", keep, bad,
           keep ? "stored rows" : "rows with the padding row zero");
  }
  /* 0 or 1 only */
  o.padding_keeps_row = 2;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_embed(ctx, &t, &di, &o, &out, 0, NULL, NULL));
  clembed_error_detail det;
  clembed_context_error(ctx, &det);
  EXPECT(!strcmp(det.argument, "padding_keeps_row") && det.value == 2, "the refusal names '%s' (%lld)",
         det.argument, (long long)det.value);
  clembed_matrix_release(&t);
  clembed_matrix_release(&out);
  clembed_ids_release(&di);
}

/* padding_keeps_row gives the padding row no gradient (the backward of the
 * whole layer without a norm, against a plain sum), and the rows the forward
 * reads stay the stored ones (with a norm: test_norm). */
TU_CASE(padding_keeps_row_gets_no_gradient) {
  enum { RV = 6, RD = 3, RN = 7 };
  const int32_t rid[RN] = {2, 5, 2, 0, 2, 5, 1};
  float w[RV * RD], g[RN * RD], dw[RV * RD], want[RV * RD];
  for (int i = 0; i < RV * RD; i++) w[i] = 1.0f + (float)i;
  for (int i = 0; i < RN * RD; i++) g[i] = 0.25f * (float)(i % 5) + 0.125f;
  clembed_matrix t, gm, gt;
  clembed_ids di;
  OK(ctx, clembed_matrix_create(ctx, RV, RD, CLEMBED_F32, &t));
  OK(ctx, clembed_matrix_write(ctx, &t, w, CLEMBED_F32));
  OK(ctx, clembed_matrix_create(ctx, RN, RD, CLEMBED_F32, &gm));
  OK(ctx, clembed_matrix_write(ctx, &gm, g, CLEMBED_F32));
  OK(ctx, clembed_matrix_create(ctx, RV, RD, CLEMBED_F32, &gt));
  OK(ctx, clembed_ids_create(ctx, rid, RN, CLEMBED_I32, &di));
  clembed_embed_options o = clembed_embed_defaults();
  o.padding_idx = 2;
  o.padding_keeps_row = 1;
  o.scale = 2.0f;
  clembed_embed_grads gr = clembed_embed_grads_defaults();
  gr.table = &gt;
  OK(ctx, clembed_embed_backward(ctx, &gm, &t, &di, &o, &gr, 0, NULL, NULL));
  OK(ctx, clembed_matrix_read(ctx, &gt, dw, CLEMBED_F32));
  for (int v = 0; v < RV; v++)
    for (int k = 0; k < RD; k++) {
      float s = 0.0f;
      for (int i = 0; i < RN; i++)
        if (rid[i] == v && v != 2) s = s + g[i * RD + k];
      want[v * RD + k] = 2.0f * s;
    }
  EXPECT(!memcmp(dw, want, sizeof dw), "padding_keeps_row: the table gradient is not the plain sum with no "
                                        "gradient to the padding row (row 2: %g %g %g)",
         (double)dw[6], (double)dw[7], (double)dw[8]);
  clembed_matrix_release(&t);
  clembed_matrix_release(&gm);
  clembed_matrix_release(&gt);
  clembed_ids_release(&di);
}

/* Decoding: one token at a time at growing positions (without sequence offsets
 * the library may read a cached sinusoid table that grows with the positions),
 * and several sinusoid configurations enqueued before anything is read. */
TU_CASE(decode_one_token_at_growing_positions) {
  const size_t d = 24, V = 16;
  float w[16 * 24];
  uint64_t rng = 3;
  for (size_t i = 0; i < V * d; i++) w[i] = tu_rand(&rng);
  clembed_matrix t = {0};
  OK(ctx, clembed_matrix_create(ctx, V, d, CLEMBED_F32, &t));
  OK(ctx, clembed_matrix_write(ctx, &t, w, CLEMBED_F32));
  const size_t steps[] = {0, 1, 62, 63, 64, 65, 127, 128, 129, 300, 1000, 1001, 5, 4095, 4096, 70000};
  const int nsteps = tu_small ? 12 : (int)(sizeof steps / sizeof *steps);
  enum { K = 16 };
  clembed_matrix o[K];
  clembed_ids di[K];
  clembed_sinusoid sins[K];
  for (int k = 0; k < nsteps; k++) {
    int32_t id = (int32_t)(k % V);
    OK(ctx, clembed_ids_create(ctx, &id, 1, CLEMBED_I32, &di[k]));
    OK(ctx, clembed_matrix_create(ctx, 1, d, CLEMBED_F32, &o[k]));
    clembed_embed_options op = clembed_embed_defaults();
    op.positions = CLEMBED_POSITIONS_SINUSOID;
    op.position_offset = steps[k];
    /* every fourth step another configuration, the rest the default */
    if (k % 4 == 3) {
      op.sinusoid.base = 100.0 + (double)k;
      op.sinusoid.layout = CLEMBED_LAYOUT_HALVES;
    }
    sins[k] = op.sinusoid;
    OK(ctx, clembed_embed(ctx, &t, &di[k], &op, &o[k], 0, NULL, NULL));
  }
  for (int k = 0; k < nsteps; k++) {
    float g[24];
    OK(ctx, clembed_matrix_read(ctx, &o[k], g, CLEMBED_F32));
    size_t bad = 0;
    for (size_t c = 0; c < d; c++) {
      double ref = (double)w[(size_t)(k % V) * d + c] +
                   ref_sinusoid(&sins[k], d, (uint64_t)steps[k], c);
      if (!(fabs(g[c] - ref) <= 4e-6)) bad++;
    }
    EXPECT(bad == 0, "decode step %d (position %zu, base %g): %zu of %zu wrong", k, steps[k], sins[k].base, bad, d);
    clembed_matrix_release(&o[k]);
    clembed_ids_release(&di[k]);
  }
  clembed_matrix_release(&t);
}

/* ------------------------------------------------------------ learned table */

TU_CASE(learned_table) {
  ecase c = base_case("table", 100, 48, tu_small ? 64 : 512);
  c.positions = CLEMBED_POSITIONS_TABLE;
  c.P = 64;
  c.seq_len = 16;
  c.position_offset = 10;
  c.scale = 1.5f;
  run_free(ctx, &c);
}

static const int64_t TABLE_SO[8] = {0, 5, 40, 48, 1, 47, 0, 30};

/* sequence offsets I32 and I64 (at an offset) into a learned table */
TU_CASE(learned_table_sequence_offsets) {
  ecase c = base_case("table sequence_offsets I32", 60, 20, 16 * 8);
  c.positions = CLEMBED_POSITIONS_TABLE;
  c.P = 64;
  c.seq_len = 16;
  c.so = TABLE_SO;
  c.so_count = 8;
  run_free(ctx, &c);
  c.name = "table sequence_offsets I64 at offset 5";
  c.so_type = CLEMBED_I64;
  c.so_off = 5;
  run_free(ctx, &c);
}

/* every table / position-table / output dtype, strided */
TU_CASE(learned_table_every_dtype_strided) {
  const clembed_dtype dts[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  for (int t = 0; t < 3; t++)
    for (int p = 0; p < 3; p++)
      for (int o = 0; o < 3; o++) {
        char name[96];
        snprintf(name, sizeof name, "table %s positions %s out %s", DN[t], DN[p], DN[o]);
        ecase c = base_case(name, 30, 19, 36);
        c.positions = CLEMBED_POSITIONS_TABLE;
        c.tdt = dts[t];
        c.pdt = dts[p];
        c.odt = dts[o];
        c.P = 40;
        c.seq_len = 12;
        c.position_offset = 3;
        c.scale = 0.75f;
        c.t_pad = (size_t)t;
        c.t_off = 3;
        c.p_pad = 2;
        c.p_off = (size_t)p + 1;
        c.o_pad = (size_t)o;
        c.o_off = 4;
        c.itype = (t + p + o) & 1 ? CLEMBED_I64 : CLEMBED_I32;
        run_free(ctx, &c);
      }
}

/* no positions, with seq_len and sequence offsets given: they are ignored */
TU_CASE(no_positions_ignores_seq_len_and_offsets) {
  ecase c = base_case("no positions, seq_len and sequence_offsets ignored", 10, 8, 32);
  c.seq_len = 8;
  c.so = TABLE_SO;
  c.so_count = 4;
  run_free(ctx, &c);
}

/* ------------------------------------------------------------ deferred errors */

/* positions past a learned table (the token count, position_offset, a
 * sequence offset): a deferred error naming the first token */
TU_CASE(positions_past_the_table) {
  /* positions 20..29 past a 20-row table: token 20 is the first */
  ecase c = base_case("positions past the table", 10, 6, 30);
  c.positions = CLEMBED_POSITIONS_TABLE;
  c.P = 20;
  run_free(ctx, &c);

  c.name = "position_offset past the table";
  c.n = 8;
  c.seq_len = 4;
  c.position_offset = 18; /* tokens 2, 3 and 6, 7 are at 20, 21 */
  run_free(ctx, &c);

  int64_t so[3] = {0, 18, 2};
  c = base_case("a sequence offset past the table", 10, 6, 15);
  c.positions = CLEMBED_POSITIONS_TABLE;
  c.P = 20;
  c.seq_len = 5;
  c.so = so; /* sequence 1: positions 18..22, token 7 is at 20 */
  c.so_count = 3;
  run_free(ctx, &c);
}

static const int64_t DEFERRED_SO[3] = {0, 18, 2};

TU_CASE(negative_sequence_offset) {
  int64_t neg[3] = {0, -3, 4};
  ecase c = base_case("a negative sequence offset (table)", 10, 6, 12);
  c.positions = CLEMBED_POSITIONS_TABLE;
  c.P = 20;
  c.seq_len = 4;
  c.so = neg; /* token 4 is at position -3 */
  c.so_count = 3;
  c.so_type = CLEMBED_I64;
  run_free(ctx, &c);
  c.name = "a negative sequence offset (sinusoid)";
  c.positions = CLEMBED_POSITIONS_SINUSOID;
  c.so_type = CLEMBED_I32;
  run_free(ctx, &c);
}

/* a bad id after a bad position, and before one: the earlier token is named */
TU_CASE(earlier_of_bad_id_and_bad_position_named) {
  int64_t ids[12] = {0, 1, 2, 3, 4, 5, 6, 99, 8, 9, 0, 1};
  ecase c = base_case("bad position before a bad id", 10, 6, 12);
  c.ids = ids;
  c.positions = CLEMBED_POSITIONS_TABLE;
  c.P = 20;
  c.seq_len = 4;
  c.so = DEFERRED_SO; /* sequence 1 (tokens 4..7) at 18..21: token 6 is at 20 */
  c.so_count = 3;
  run_free(ctx, &c);
  int64_t ids2[12] = {0, 1, 2, -4, 4, 5, 6, 7, 8, 9, 0, 1};
  c.name = "bad id before a bad position";
  c.ids = ids2;
  run_free(ctx, &c);
  c.name = "bad position, bad ids zeroed (ZERO policy)";
  c.policy = CLEMBED_INDEX_ZERO;
  run_free(ctx, &c);
  c.name = "bad position, bad ids clamped";
  c.policy = CLEMBED_INDEX_CLAMP;
  run_free(ctx, &c);
}

/* more operations with position errors than error slots before a finish */
TU_CASE(position_errors_past_the_error_slots) {
  {
    clembed_matrix t = {0}, o = {0}, pt = {0};
    clembed_ids di = {0};
    int32_t id[4] = {0, 1, 2, 3};
    OK(ctx, clembed_matrix_create(ctx, 4, 3, CLEMBED_F32, &t));
    OK(ctx, clembed_matrix_create(ctx, 4, 3, CLEMBED_F32, &o));
    OK(ctx, clembed_matrix_create(ctx, 6, 3, CLEMBED_F32, &pt));
    OK(ctx, clembed_ids_create(ctx, id, 4, CLEMBED_I32, &di));
    clembed_embed_options op = clembed_embed_defaults();
    op.positions = CLEMBED_POSITIONS_TABLE;
    op.position_table = &pt;
    for (int k = 0; k < 300; k++) {
      op.position_offset = k == 280 ? 4 : 0; /* tokens 2, 3 at 6, 7 */
      OK(ctx, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
    }
    FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
    EXPECT(strstr(clembed_context_message(ctx), "token 2 is at position 6") != NULL, "message: %s",
           clembed_context_message(ctx));
    OK(ctx, clembed_finish(ctx));
    clembed_matrix_release(&t);
    clembed_matrix_release(&o);
    clembed_matrix_release(&pt);
    clembed_ids_release(&di);
  }
}

/* ------------------------------------------------------------ dropout */

/* the kept fraction of a large output is within 4 sigma of 1 - p */
TU_CASE(dropout_kept_fraction) {
  size_t n = tu_small ? 128 : 4096, d = tu_small ? 64 : 256;
  const float ps[3] = {0.1f, 0.25f, 0.5f};
  for (int k = 0; k < 3; k++) {
    char name[64];
    snprintf(name, sizeof name, "dropout %g", (double)ps[k]);
    ecase c = base_case(name, 500, d, n);
    c.dropout = ps[k];
    c.seed = 0x1234567890ABCDEFULL + (uint64_t)k;
    c.scale = 2.0f;
    eresult r = run_case(ctx, &c);
    double N = (double)r.nonzero, p = ps[k];
    double frac = r.kept / N, sigma = sqrt(p * (1.0 - p) / N);
    EXPECT(fabs(frac - (1.0 - p)) <= 4.0 * sigma, "dropout %g: kept fraction %.5f, expected %.5f +- %.5f (4 sigma)",
           p, frac, 1.0 - p, 4.0 * sigma);
    printf("dropout %g: kept %.5f of %.0f (expected %.5f, sigma %.5f)\n", p, frac, N, 1.0 - p, sigma);
    free(r.got);
  }
}

/* with positions and other dtypes, on a strided output (the mask index is
 * i*cols + c, not the buffer position); tiny p and p just below 1 */
TU_CASE(dropout_with_positions_dtypes_and_strides) {
  ecase c = base_case("dropout with sinusoid, strided F32 out", 50, 37, tu_small ? 40 : 300);
  c.positions = CLEMBED_POSITIONS_SINUSOID;
  c.seq_len = 20;
  c.position_offset = tu_small ? 99 : 999;
  c.dropout = 0.3f;
  c.seed = 99;
  c.o_pad = 5;
  c.o_off = 11;
  run_free(ctx, &c);
  c.name = "dropout with sinusoid, F16 out";
  c.odt = CLEMBED_F16;
  c.o_pad = c.o_off = 0;
  run_free(ctx, &c);
  c = base_case("dropout with a learned table, BF16 table", 50, 24, tu_small ? 40 : 300);
  c.positions = CLEMBED_POSITIONS_TABLE;
  c.P = 40;
  c.seq_len = 20;
  c.position_offset = 3;
  c.tdt = CLEMBED_BF16;
  c.dropout = 0.6f;
  c.seed = 1ULL << 40;
  c.padding = 7;
  run_free(ctx, &c);
  c.name = "dropout tiny p";
  c.dropout = 1e-6f;
  c.positions = CLEMBED_POSITIONS_NONE;
  run_free(ctx, &c);
  c.name = "dropout p just below 1";
  c.dropout = 0.99f;
  run_free(ctx, &c);
}

/* the same seed gives the same bytes; another seed (low or high 32 bits) another mask */
TU_CASE(dropout_seed_determines_the_mask) {
  ecase a = base_case("dropout seed A", 100, 32, tu_small ? 64 : 512);
  a.dropout = 0.5f;
  a.seed = 5;
  eresult r1 = run_case(ctx, &a), r2 = run_case(ctx, &a);
  EXPECT(!memcmp(r1.got, r2.got, a.n * a.d * sizeof(float)), "the same seed gave different outputs");
  const uint64_t other[3] = {6, 5 + (1ULL << 32), 0};
  for (int k = 0; k < 3; k++) {
    ecase b = a;
    b.name = "dropout seed B";
    b.seed = other[k];
    eresult r3 = run_case(ctx, &b);
    size_t differ = 0, total = a.n * a.d;
    for (size_t e = 0; e < total; e++) differ += (r1.got[e] == 0.0f) != (r3.got[e] == 0.0f);
    /* two independent masks at p = 0.5 differ in half the elements */
    EXPECT(differ > total / 4, "seed 5 vs %llu: the masks differ in only %zu of %zu elements",
           (unsigned long long)other[k], differ, total);
    free(r3.got);
  }
  free(r1.got);
  free(r2.got);
}

TU_CASE(dropout_zero_is_no_dropout) {
  ecase z = base_case("dropout 0", 20, 8, 20);
  z.dropout = 0.0f;
  z.seed = 77;
  run_free(ctx, &z);
}

/* ------------------------------------------------------------ arguments */

/* The operands of the argument cases: a 10 x 4 table and output, 10 ids, a
 * 16-row position table and a narrower one, 2 sequence offsets. */
typedef struct afx {
  clembed_matrix t, o, pt, pt_narrow;
  clembed_ids di, so;
} afx;

static const int INV = CLEMBED_ERR_INVALID_ARGUMENT;

static void afx_make(clembed_context *ctx, afx *f) {
  memset(f, 0, sizeof *f);
  int32_t ids[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  OK(ctx, clembed_matrix_create(ctx, 10, 4, CLEMBED_F32, &f->t));
  OK(ctx, clembed_matrix_create(ctx, 10, 4, CLEMBED_F32, &f->o));
  OK(ctx, clembed_matrix_create(ctx, 16, 4, CLEMBED_F32, &f->pt));
  OK(ctx, clembed_matrix_create(ctx, 16, 3, CLEMBED_F32, &f->pt_narrow));
  OK(ctx, clembed_ids_create(ctx, ids, 10, CLEMBED_I32, &f->di));
  OK(ctx, clembed_ids_create(ctx, ids, 2, CLEMBED_I32, &f->so));
}

static void afx_free(afx *f) {
  clembed_matrix_release(&f->t);
  clembed_matrix_release(&f->o);
  clembed_matrix_release(&f->pt);
  clembed_matrix_release(&f->pt_narrow);
  clembed_ids_release(&f->di);
  clembed_ids_release(&f->so);
}

/* clembed_embed_defaults, and NULL options meaning them */
TU_CASE(defaults) {
  afx f;
  afx_make(ctx, &f);
  clembed_matrix t = f.t, o = f.o;
  clembed_ids di = f.di;
  clembed_embed_options op = clembed_embed_defaults();
  EXPECT(op.scale == 1.0f && op.policy == CLEMBED_INDEX_CHECK && op.padding_idx == CLEMBED_NO_PADDING &&
             op.positions == CLEMBED_POSITIONS_NONE && op.sinusoid.base == 10000.0 &&
             op.sinusoid.exponent == CLEMBED_EXPONENT_PAIR && op.sinusoid.layout == CLEMBED_LAYOUT_INTERLEAVED &&
             op.position_table == NULL && op.seq_len == 0 && op.position_offset == 0 &&
             op.sequence_offsets == NULL && op.dropout == 0.0f && op.dropout_seed == 0,
         "clembed_embed_defaults");
  OK(ctx, clembed_embed(ctx, &t, &di, NULL, &o, 0, NULL, NULL));
  afx_free(&f);
}

/* sequence offsets too short (10 ids in sequences of 4 need 3; one sequence
 * needs one), past their buffer, of an unknown type */
TU_CASE(bad_sequence_offsets_rejected) {
  afx f;
  afx_make(ctx, &f);
  clembed_matrix t = f.t, o = f.o;
  clembed_ids di = f.di, so = f.so;
  clembed_embed_options op = clembed_embed_defaults();
  op.positions = CLEMBED_POSITIONS_SINUSOID;
  op.seq_len = 4;
  op.sequence_offsets = &so;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
  EXPECT(strstr(clembed_context_message(ctx), "sequence_offsets") != NULL, "message: %s",
         clembed_context_message(ctx));
  op.seq_len = 5; /* 2 sequences: enough */
  OK(ctx, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
  clembed_ids so0 = so;
  so0.count = 0; /* one sequence needs one offset */
  op.seq_len = 0;
  op.sequence_offsets = &so0;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
  clembed_ids sob = so;
  sob.offset = 1; /* past its buffer */
  op.sequence_offsets = &sob;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
  sob = so;
  sob.type = (clembed_index_type)4;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
  afx_free(&f);
}

/* a sinusoid base of 0 or NaN; INDEX with HALVES */
TU_CASE(bad_sinusoid_rejected) {
  afx f;
  afx_make(ctx, &f);
  clembed_matrix t = f.t, o = f.o;
  clembed_ids di = f.di;
  clembed_embed_options op = clembed_embed_defaults();
  op.positions = CLEMBED_POSITIONS_SINUSOID;
  op.sinusoid.base = 0.0;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
  op.sinusoid.base = NAN;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
  op.sinusoid.base = 10000.0;
  op.sinusoid.exponent = CLEMBED_EXPONENT_INDEX;
  op.sinusoid.layout = CLEMBED_LAYOUT_HALVES;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
  afx_free(&f);
}

/* the position table: missing, mismatched cols, bad matrix */
TU_CASE(bad_position_table_rejected) {
  afx f;
  afx_make(ctx, &f);
  clembed_matrix t = f.t, o = f.o, pt = f.pt, pt_narrow = f.pt_narrow;
  clembed_ids di = f.di;
  clembed_embed_options op = clembed_embed_defaults();
  op.positions = CLEMBED_POSITIONS_TABLE;
  op.position_table = NULL;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
  op.position_table = &pt_narrow;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
  EXPECT(strstr(clembed_context_message(ctx), "cols") != NULL, "message: %s", clembed_context_message(ctx));
  clembed_matrix ptb = pt;
  ptb.rows = 17; /* past its buffer */
  op.position_table = &ptb;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
  ptb = pt;
  ptb.dtype = (clembed_dtype)99;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
  op.position_table = &pt;
  OK(ctx, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
  afx_free(&f);
}

/* dropout outside [0, 1) */
TU_CASE(dropout_outside_0_1_rejected) {
  afx f;
  afx_make(ctx, &f);
  clembed_matrix t = f.t, o = f.o;
  clembed_ids di = f.di;
  clembed_embed_options op = clembed_embed_defaults();
  op.positions = CLEMBED_POSITIONS_TABLE;
  op.position_table = &f.pt;
  const float bad_p[4] = {-0.1f, 1.0f, 1.5f, NAN};
  for (int k = 0; k < 4; k++) {
    op.dropout = bad_p[k];
    FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
  }
  afx_free(&f);
}

/* unknown positions, NULL arguments, bad wait lists */
TU_CASE(null_arguments_and_bad_wait_lists) {
  afx f;
  afx_make(ctx, &f);
  clembed_matrix t = f.t, o = f.o;
  clembed_ids di = f.di;
  clembed_embed_options op = clembed_embed_defaults();
  op.position_table = &f.pt;
  op.positions = (clembed_positions)3;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL));
  op.positions = CLEMBED_POSITIONS_TABLE;
  FAILS(NULL, INV, clembed_embed(NULL, &t, &di, &op, &o, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_embed(ctx, NULL, &di, &op, &o, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_embed(ctx, &t, NULL, &op, &o, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, NULL, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 1, NULL, NULL));
  cl_event none = NULL;
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 0, &none, NULL));
  FAILS(ctx, INV, clembed_embed(ctx, &t, &di, &op, &o, 1, &none, NULL));
  afx_free(&f);
}

/* an event, then a wait on it */
TU_CASE(event_then_a_wait_on_it) {
  afx f;
  afx_make(ctx, &f);
  clembed_matrix t = f.t, o = f.o;
  clembed_ids di = f.di;
  clembed_embed_options op = clembed_embed_defaults();
  op.positions = CLEMBED_POSITIONS_TABLE;
  op.position_table = &f.pt;
  cl_event e1 = NULL, e2 = NULL;
  OK(ctx, clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, &e1));
  EXPECT(e1 != NULL, "no event");
  if (e1) {
    OK(ctx, clembed_embed(ctx, &t, &di, &op, &o, 1, &e1, &e2));
    if (e2) {
      EXPECT(clWaitForEvents(1, &e2) == CL_SUCCESS, "wait");
      clReleaseEvent(e2);
    }
    clReleaseEvent(e1);
  }
  afx_free(&f);
}

TU_CASE(zero_ids_with_positions_and_dropout) {
  afx f;
  afx_make(ctx, &f);
  clembed_matrix t = f.t;
  clembed_embed_options op = clembed_embed_defaults();
  op.positions = CLEMBED_POSITIONS_TABLE;
  op.position_table = &f.pt;
  clembed_ids d0 = {0};
  clembed_matrix o0 = {0};
  OK(ctx, clembed_ids_create(ctx, NULL, 0, CLEMBED_I64, &d0));
  OK(ctx, clembed_matrix_create(ctx, 0, 4, CLEMBED_F32, &o0));
  op.dropout = 0.5f;
  OK(ctx, clembed_embed(ctx, &t, &d0, &op, &o0, 0, NULL, NULL));
  op.positions = CLEMBED_POSITIONS_SINUSOID;
  OK(ctx, clembed_embed(ctx, &t, &d0, &op, &o0, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
  clembed_ids_release(&d0);
  clembed_matrix_release(&o0);
  afx_free(&f);
}

/* The sinusoid computed per element (sequence_offsets: every sequence starts
 * elsewhere) and read from the context's cached table (one offset) give the
 * same bits for the same positions: sequences of 300 tokens starting at 5 and
 * 305 are positions 5, 6, ..., 604, as one run from offset 5. */
TU_CASE(sinusoid_per_element_equals_cached_table) {
  const size_t V = 50, d = 70, L = tu_small ? 30 : 300, n = 2 * L;
  float *w = malloc(V * d * sizeof *w), *a = malloc(n * d * sizeof *a), *b = malloc(n * d * sizeof *b);
  uint64_t rng = 11;
  for (size_t i = 0; i < V * d; i++) w[i] = tu_rand(&rng);
  int32_t *ids = malloc(n * sizeof *ids), starts[2] = {5, 5 + (int32_t)L};
  for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 7) % V);
  clembed_matrix t = {0}, oa = {0}, ob = {0};
  clembed_ids di = {0}, so = {0};
  OK(ctx, clembed_matrix_create(ctx, V, d, CLEMBED_F32, &t));
  OK(ctx, clembed_matrix_write(ctx, &t, w, CLEMBED_F32));
  OK(ctx, clembed_matrix_create(ctx, n, d, CLEMBED_F32, &oa));
  OK(ctx, clembed_matrix_create(ctx, n, d, CLEMBED_F32, &ob));
  OK(ctx, clembed_ids_create(ctx, ids, n, CLEMBED_I32, &di));
  OK(ctx, clembed_ids_create(ctx, starts, 2, CLEMBED_I32, &so));
  clembed_embed_options op = clembed_embed_defaults();
  op.scale = 3.0f;
  op.positions = CLEMBED_POSITIONS_SINUSOID;
  op.seq_len = L;
  op.sequence_offsets = &so;
  OK(ctx, clembed_embed(ctx, &t, &di, &op, &oa, 0, NULL, NULL));
  op.seq_len = 0;
  op.sequence_offsets = NULL;
  op.position_offset = 5;
  OK(ctx, clembed_embed(ctx, &t, &di, &op, &ob, 0, NULL, NULL));
  OK(ctx, clembed_matrix_read(ctx, &oa, a, CLEMBED_F32));
  OK(ctx, clembed_matrix_read(ctx, &ob, b, CLEMBED_F32));
  EXPECT(!memcmp(a, b, n * d * sizeof *a), "sinusoid per element and from the cached table differ");
  clembed_matrix_release(&t);
  clembed_matrix_release(&oa);
  clembed_matrix_release(&ob);
  clembed_ids_release(&di);
  clembed_ids_release(&so);
  free(w);
  free(a);
  free(b);
  free(ids);
}

/* One forward on one context: the output's whole buffer (guard elements
 * included) as raw elements, and the statuses and message. */
typedef struct shaped_run {
  void *raw;
  size_t total;
  clembed_status call, fin;
  char msg[256];
} shaped_run;

typedef struct shaped_case {
  size_t V, d, n, pad, off, seq_len, p_rows, offset;
  clembed_dtype tdt, odt;
  clembed_index_type itype;
  clembed_index_policy policy;
  int64_t padding;
  int positions; /* 0 none, 1 sinusoid, 2 sinusoid with sequence offsets, 3 table */
  float scale, dropout;
  const float *w, *pt;
  const int64_t *ids, *starts;
} shaped_case;

static void shaped_forward(clembed_context *ctx, const shaped_case *c, shaped_run *r) {
  clembed_matrix t = {0}, o = {0}, p = {0};
  clembed_ids di = {0}, so = {0};
  size_t nseq = c->seq_len ? c->n / c->seq_len + 1 : 1;
  void *wh = tu_alloc_elems(c->V * c->d, c->tdt), *zero = tu_alloc_elems(c->n * c->d + 1, c->odt);
  for (size_t i = 0; i < c->V * c->d; i++) tu_set_elem(wh, i, c->tdt, c->w[i]);
  OK(ctx, tu_make_strided(ctx, c->V, c->d, 0, 0, c->tdt, wh, &t));
  OK(ctx, tu_make_strided(ctx, c->n, c->d, c->pad, c->off, c->odt, zero, &o));
  if (c->itype == CLEMBED_I64) {
    OK(ctx, clembed_ids_create(ctx, c->ids, c->n ? c->n : 1, CLEMBED_I64, &di));
  } else {
    int32_t *i32 = malloc((c->n + 1) * sizeof *i32);
    for (size_t i = 0; i < c->n; i++) i32[i] = (int32_t)c->ids[i];
    OK(ctx, clembed_ids_create(ctx, i32, c->n ? c->n : 1, CLEMBED_I32, &di));
    free(i32);
  }
  di.count = c->n;
  OK(ctx, clembed_ids_create(ctx, c->starts, nseq, CLEMBED_I64, &so));
  clembed_embed_options op = clembed_embed_defaults();
  op.scale = c->scale;
  op.policy = c->policy;
  op.padding_idx = c->padding;
  op.dropout = c->dropout;
  op.dropout_seed = 99;
  op.seq_len = c->seq_len;
  op.position_offset = c->offset;
  if (c->positions == 1 || c->positions == 2) op.positions = CLEMBED_POSITIONS_SINUSOID;
  if (c->positions == 2) op.sequence_offsets = &so;
  if (c->positions == 3) {
    OK(ctx, clembed_matrix_create(ctx, c->p_rows, c->d, CLEMBED_F32, &p));
    if (c->p_rows && c->d) OK(ctx, clembed_matrix_write(ctx, &p, c->pt, CLEMBED_F32));
    op.positions = CLEMBED_POSITIONS_TABLE;
    op.position_table = &p;
  }
  r->call = clembed_embed(ctx, &t, &di, &op, &o, 0, NULL, NULL);
  r->fin = clembed_finish(ctx);
  snprintf(r->msg, sizeof r->msg, "%s", clembed_context_message(ctx));
  r->total = c->off + c->n * (c->d + c->pad);
  r->raw = tu_read_buffer(ctx, &o, r->total, c->odt);
  clembed_matrix_release(&t);
  clembed_matrix_release(&o);
  clembed_matrix_release(&p);
  clembed_ids_release(&di);
  clembed_ids_release(&so);
  free(wh);
  free(zero);
}

/* The CPU shapes (whole rows, several tokens side by side) and the GPU shapes
 * (columns across work-items) give the same output buffer bit for bit, NaN
 * payloads included, and the same statuses and messages, over random shapes,
 * dtypes, strides, policies, positions (the sinusoid from the cached table, and
 * per element far from 0, where the cache is not used) and dropout. (Outputs
 * larger than the cache, with streaming stores, are test_lookup's.) */
TU_CASE(cpu_and_gpu_shapes_agree) {
  clembed_context *cpu, *gpu;
  if (!tu_shaped_pair(&cpu, &gpu)) return;
  const size_t ds[] = {0, 1, 5, 16, 37, 70}, ns[] = {0, 1, 3, 5, 37}, lens[] = {0, 3, 7};
  uint64_t rng = 2024;
  /* (the quick run, small without full: 16; Oclgrind and rusticl: small full) */
  int cases = tu_small ? (tu_full ? 40 : 16) : 300, same = 0, nan_cases = 0, far_strided = 0;
  for (int k = 0; k < cases; k++) {
    shaped_case c;
    memset(&c, 0, sizeof c);
    uint64_t pick = (uint64_t)((tu_rand(&rng) + 1.0f) * 1e6f);
    c.V = k % 2 ? 7 : 50;
    c.d = ds[pick % 6];
    c.n = ns[(pick / 6) % 5];
    c.tdt = (clembed_dtype)((pick / 30) % 3);
    c.odt = (clembed_dtype)((pick / 90) % 3);
    c.itype = (pick / 270) % 2 ? CLEMBED_I64 : CLEMBED_I32;
    c.policy = (clembed_index_policy)((pick / 540) % 4);
    c.padding = (pick / 2160) % 3 == 0 ? 2 : CLEMBED_NO_PADDING;
    c.positions = (int)((pick / 6480) % 4);
    c.seq_len = lens[(pick / 25920) % 3];
    c.pad = k % 3 == 0 ? 0 : (size_t)(k % 5);
    c.off = k % 4 == 0 ? 0 : (size_t)(k % 17);
    c.p_rows = 9;
    c.offset = k % 5 == 0 ? 1000 : k % 5 == 1 ? (size_t)1 << 22 : 0; /* 2^22: too far to cache */
    c.scale = k % 2 ? 1.0f : 2.5f;
    c.dropout = k % 7 == 3 ? 0.3f : 0.0f;
    if (k % 25 == 1) { /* the strided shape with the sinusoid per element, for sure */
      c.positions = 1;
      c.seq_len = 7;
      c.n = 37;
      c.d = ds[3 + (size_t)k % 3];
    }
    float *w = malloc((c.V * c.d + 1) * sizeof *w), *pt = malloc((c.p_rows * c.d + 1) * sizeof *pt);
    for (size_t i = 0; i < c.V * c.d; i++) w[i] = tu_rand(&rng) * 4.0f;
    if (c.V * c.d > 3) { /* a NaN with a payload, infinities */
      uint32_t nan_bits = 0x7FC12345u;
      memcpy(&w[1], &nan_bits, 4);
      w[2] = INFINITY;
      w[3] = -INFINITY;
    }
    for (size_t i = 0; i < c.p_rows * c.d; i++) pt[i] = tu_rand(&rng);
    int64_t *ids = malloc((c.n + 1) * sizeof *ids), starts[16];
    for (size_t i = 0; i < c.n; i++) {
      int64_t v = (int64_t)((uint64_t)((tu_rand(&rng) + 1.0f) * 1e6f) % c.V);
      if (i % 6 == 5) v = i % 12 == 5 ? (int64_t)c.V + 3 : -2; /* bad under CHECK */
      ids[i] = i == 0 ? 0 : v; /* row 0 holds the NaN */
    }
    for (int q = 0; q < 16; q++) starts[q] = (int64_t)(q * 5) - (k % 9 == 0 && q == 2 ? 20 : 0);
    c.w = w;
    c.pt = pt;
    c.ids = ids;
    c.starts = starts;
    shaped_run a, b;
    shaped_forward(cpu, &c, &a);
    shaped_forward(gpu, &c, &b);
    size_t bytes = (a.total ? a.total : 1) * clembed_dtype_size(c.odt);
    int eq = a.call == b.call && a.fin == b.fin && !strcmp(a.msg, b.msg) && !memcmp(a.raw, b.raw, bytes);
    EXPECT(eq,
           "case %d (V %zu d %zu n %zu dtypes %d->%d policy %d positions %d seq_len %zu dropout %g): CPU shapes %s/%s "
           "'%s', GPU shapes %s/%s '%s'%s",
           k, c.V, c.d, c.n, (int)c.tdt, (int)c.odt, (int)c.policy, c.positions, c.seq_len, (double)c.dropout,
           clembed_status_string(a.call), clembed_status_string(a.fin), a.msg, clembed_status_string(b.call),
           clembed_status_string(b.fin), b.msg, memcmp(a.raw, b.raw, bytes) ? ", outputs differ" : "");
    same += eq;
    for (size_t e = 0; e < a.total; e++)
      if (isnan(tu_elem(a.raw, e, c.odt))) {
        nan_cases++;
        break;
      }
    /* the strided shape (positions shared by sequences) with the sinusoid per element */
    far_strided += c.positions == 1 && c.offset == ((size_t)1 << 22) && c.seq_len && c.n >= 2 * c.seq_len && c.d >= 16;
    free(a.raw);
    free(b.raw);
    free(w);
    free(pt);
    free(ids);
  }
  printf("CPU and GPU shapes: %d of %d forwards identical (%d with a NaN out, %d strided with the sinusoid per "
         "element)\n", same, cases, nan_cases, far_strided);
  EXPECT(nan_cases > 0, "no case put a NaN in the output");
  EXPECT(far_strided > 0, "no case ran the strided shape with the sinusoid per element");
  clembed_context_destroy(cpu);
  clembed_context_destroy(gpu);
}

int main(int argc, char **argv) { return tu_main(argc, argv, (tu_suite){.name = "test_embed", .device = 1}); }
