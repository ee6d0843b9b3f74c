/* The input layer of BERT-style models: clembed_embed with segments and a
 * fused LayerNorm/RMSNorm, and clembed_embed_backward.
 *
 * Every result is checked twice: bit for bit against the float32 operations
 * in the header's order (reference_norm.h: the row sums' fixed order, rsqrt's
 * Newton steps, the folds in ascending token order), which makes the bits the
 * same on every device and kernel shape this test runs on (it runs on the
 * default device, in the GPU shapes, on Oclgrind and on rusticl), and within
 * the contract's tolerance of the float64 result (1e-5 * (1 + |y|), plus half
 * an ulp of an F16/BF16 output; gradients within 1e-5 of the sum of their
 * terms' sizes). The values the device reads (a table's dequantized or
 * rounded values, the sinusoid) come back from the device first. */
#include "test_util.h"
#include "reference_norm.h"

/* ------------------------------------------------------------ a layer case */

typedef struct lcase {
  size_t V, d, n, L, T;           /* table rows, cols, tokens, position rows, segment types */
  clembed_dtype table_dt, out_dt, pos_dt, seg_dt, grad_dt;
  clembed_positions positions;
  int segments;                   /* 0 none, 1 a segment table and ids, 2 a table without ids (type 0) */
  clembed_norm_kind kind;
  int has_w, has_b;
  float eps, scale, dropout;
  uint64_t seed;
  size_t seq_len, pos_offset;
  int with_so;                    /* sequence_offsets */
  clembed_index_policy policy;
  int64_t padding_idx;
  int keep_row;                   /* padding_keeps_row: the padding row read as stored, no gradient */
  int bad_ids, bad_sids;          /* put ids (segment ids) outside the tables among the tokens */
  clembed_index_type it;
  size_t t_pad, o_pad;            /* extra columns (ld) of the table and the output */
  float init;                     /* the gradients' values before the backward (accumulated into) */
} lcase;

static lcase base_case(size_t d) {
  lcase c = {0};
  c.V = 11;
  c.d = d;
  c.n = tu_small ? 6 : 23;
  c.L = 40;
  c.T = 2;
  c.table_dt = c.out_dt = c.pos_dt = c.seg_dt = c.grad_dt = CLEMBED_F32;
  c.positions = CLEMBED_POSITIONS_TABLE;
  c.segments = 1;
  c.kind = CLEMBED_NORM_LAYER;
  c.has_w = c.has_b = 1;
  c.eps = 1e-12f;
  c.scale = 1.0f;
  c.seed = 99;
  c.seq_len = 5;
  c.policy = CLEMBED_INDEX_CHECK;
  c.padding_idx = CLEMBED_NO_PADDING;
  c.it = CLEMBED_I32;
  c.init = 0.25f;
  return c;
}

/* Host and device data of a case. */
typedef struct ldata {
  lcase c;
  clembed_matrix table, ptab, stab, w, b, out;
  clembed_ids ids, sids, so;
  float *W, *P, *S, *wv, *bv; /* the values the device reads */
  int64_t *id, *sid, *sov;
  size_t prows;               /* rows of P (the sinusoid: positions covered) */
  clembed_embed_options opt;
} ldata;

static float *read_values(clembed_context *ctx, const clembed_matrix *m) {
  float *h = malloc((m->rows * m->cols + 1) * sizeof(float));
  OK(ctx, clembed_matrix_read(ctx, m, h, CLEMBED_F32));
  return h;
}

/* Q4_K / Q6_K blocks with random quants and small finite scales. */
static void *random_k_blocks(clembed_dtype dt, size_t values, uint64_t *rng) {
  size_t nb = values / 256, bs = dt == CLEMBED_Q4_K ? 144 : 210;
  unsigned char *b = malloc(nb * bs + 1);
  for (size_t i = 0; i < nb * bs; i++) b[i] = (unsigned char)(tu_rand(rng) * 127.0f + 128.0f);
  for (size_t k = 0; k < nb; k++) {
    unsigned char *blk = b + k * bs;
    uint16_t d = ref_f32_to_f16(0.01f + 0.004f * tu_rand(rng)), dm = ref_f32_to_f16(0.003f);
    if (dt == CLEMBED_Q4_K) {
      memcpy(blk, &d, 2);
      memcpy(blk + 2, &dm, 2);
    } else {
      memcpy(blk + 208, &d, 2);
    }
  }
  return b;
}

/* A table of rows x cols of dtype dt in its own buffer, written from random
 * values around `center` (quantized ones from blocks or quantized values),
 * with `pad` extra columns; *vals receives what the device reads. */
static void make_table(clembed_context *ctx, size_t rows, size_t cols, size_t pad, clembed_dtype dt, float center,
                       float spread, uint64_t *rng, clembed_matrix *m, float **vals) {
  size_t qk = clembed_dtype_block_values(dt), ld = cols + (qk > 1 ? 0 : pad);
  clembed_matrix whole;
  OK(ctx, clembed_matrix_create(ctx, rows ? rows : 1, ld ? ld : 1, dt, &whole));
  *m = whole;
  m->rows = rows;
  m->cols = cols;
  m->ld = ld;
  float *h = malloc((rows * cols + 1) * sizeof(float));
  for (size_t i = 0; i < rows * cols; i++) h[i] = center + spread * tu_rand(rng);
  if (rows && cols) {
    if (dt == CLEMBED_Q4_K || dt == CLEMBED_Q6_K) {
      void *blocks = random_k_blocks(dt, rows * cols, rng);
      OK(ctx, clembed_matrix_write(ctx, m, blocks, dt));
      free(blocks);
    } else {
      OK(ctx, clembed_matrix_write(ctx, m, h, CLEMBED_F32));
    }
  }
  free(h);
  *vals = read_values(ctx, m);
}

static void make_ids(clembed_context *ctx, const int64_t *v, size_t n, clembed_index_type t, clembed_ids *ids) {
  int32_t *h32 = malloc((n + 1) * sizeof(int32_t));
  for (size_t i = 0; i < n; i++) h32[i] = (int32_t)v[i];
  OK(ctx, clembed_ids_create(ctx, t == CLEMBED_I32 ? (const void *)h32 : (const void *)v, n, t, ids));
  free(h32);
}

static void ldata_make(clembed_context *ctx, const lcase *c, ldata *L) {
  memset(L, 0, sizeof *L);
  L->c = *c;
  uint64_t rng = c->seed * 7919 + c->d;
  make_table(ctx, c->V, c->d, c->t_pad, c->table_dt, 0.3f, 1.0f, &rng, &L->table, &L->W);
  L->opt = clembed_embed_defaults();
  clembed_embed_options *o = &L->opt;
  o->scale = c->scale;
  o->policy = c->policy;
  o->padding_idx = c->padding_idx;
  o->padding_keeps_row = c->keep_row;
  o->positions = c->positions;
  o->seq_len = c->seq_len;
  o->position_offset = c->pos_offset;
  o->dropout = c->dropout;
  o->dropout_seed = c->seed;
  L->id = malloc((c->n + 1) * sizeof(int64_t));
  L->sid = malloc((c->n + 1) * sizeof(int64_t));
  for (size_t i = 0; i < c->n; i++) {
    L->id[i] = (int64_t)((i * 7 + i / 3) % c->V);
    L->sid[i] = (int64_t)((i / 3) % (c->T ? c->T : 1));
  }
  if (c->bad_ids && c->n > 4) {
    L->id[2] = (int64_t)c->V + 3;
    L->id[4] = -1;
  }
  if (c->bad_sids && c->n > 3) {
    L->sid[3] = (int64_t)c->T;
    L->sid[c->n - 1] = -(int64_t)c->T - 2;
  }
  make_ids(ctx, L->id, c->n, c->it, &L->ids);
  size_t nseq = c->seq_len ? (c->n + c->seq_len - 1) / c->seq_len : 1;
  L->sov = malloc((nseq + 1) * sizeof(int64_t));
  for (size_t b = 0; b < nseq; b++) L->sov[b] = (int64_t)((b * 3) % 7);
  if (c->with_so) {
    make_ids(ctx, L->sov, nseq, CLEMBED_I64, &L->so);
    o->sequence_offsets = &L->so;
  }
  if (c->positions == CLEMBED_POSITIONS_TABLE) {
    make_table(ctx, c->L, c->d, 0, c->pos_dt, 0.0f, 0.5f, &rng, &L->ptab, &L->P);
    L->prows = c->L;
    o->position_table = &L->ptab;
  } else if (c->positions == CLEMBED_POSITIONS_SINUSOID) {
    L->prows = c->pos_offset + c->n + 8; /* every position this case reaches */
    OK(ctx, clembed_matrix_create(ctx, L->prows, c->d, CLEMBED_F32, &L->ptab));
    OK(ctx, clembed_positional(ctx, NULL, 0, &L->ptab, 0, NULL, NULL));
    L->P = read_values(ctx, &L->ptab);
  }
  if (c->segments) {
    make_table(ctx, c->T, c->d, 0, c->seg_dt, 0.0f, 0.2f, &rng, &L->stab, &L->S);
    o->segment_table = &L->stab;
    if (c->segments == 1) {
      make_ids(ctx, L->sid, c->n, c->it, &L->sids);
      o->segment_ids = &L->sids;
    }
  }
  o->norm.kind = c->kind;
  o->norm.eps = c->eps;
  if (c->has_w) {
    make_table(ctx, 1, c->d, 0, CLEMBED_F32, 1.0f, 0.2f, &rng, &L->w, &L->wv);
    o->norm.weight = &L->w;
  }
  if (c->has_b) {
    make_table(ctx, 1, c->d, 0, CLEMBED_F32, 0.0f, 0.1f, &rng, &L->b, &L->bv);
    o->norm.bias = &L->b;
  }
}

static void ldata_free(ldata *L) {
  clembed_matrix_release(&L->table);
  clembed_matrix_release(&L->ptab);
  clembed_matrix_release(&L->stab);
  clembed_matrix_release(&L->w);
  clembed_matrix_release(&L->b);
  clembed_matrix_release(&L->out);
  clembed_ids_release(&L->ids);
  clembed_ids_release(&L->sids);
  clembed_ids_release(&L->so);
  free(L->W);
  free(L->P);
  free(L->S);
  free(L->wv);
  free(L->bv);
  free(L->id);
  free(L->sid);
  free(L->sov);
}

/* Token i's parts as the contract resolves them: the table row (or -1), the
 * position row of P (or -1) and the segment row (or -1); *bad_* flag reports. */
static void token_parts(const ldata *L, size_t i, int64_t *row, int64_t *prow, int64_t *srow, int *bad_id,
                        int *bad_pos, int *bad_sid) {
  const lcase *c = &L->c;
  int64_t pad = c->keep_row ? -1 : ref_padding_row(c->padding_idx, (int64_t)c->V); /* keep_row: read as stored */
  *row = ref_resolve(L->id[i], (int64_t)c->V, c->policy, pad, bad_id);
  *prow = -1;
  *bad_pos = 0;
  if (c->positions != CLEMBED_POSITIONS_NONE) {
    size_t b = c->seq_len ? i / c->seq_len : 0, j = c->seq_len ? i % c->seq_len : i;
    int64_t first = c->with_so ? L->sov[b] : (int64_t)c->pos_offset;
    uint64_t p = (uint64_t)first + j;
    if (first >= 0 && p < L->prows) *prow = (int64_t)p;
    else *bad_pos = 1;
  }
  *srow = -1;
  *bad_sid = 0;
  if (c->segments == 2) *srow = 0;
  if (c->segments == 1) *srow = ref_resolve(L->sid[i], (int64_t)c->T, c->policy, -1, bad_sid);
}

/* x of token i in float32, (scale * w + p) + s. */
static void token_x(const ldata *L, size_t i, float *x) {
  const lcase *c = &L->c;
  int64_t row, prow, srow;
  int b1, b2, b3;
  token_parts(L, i, &row, &prow, &srow, &b1, &b2, &b3);
  for (size_t k = 0; k < c->d; k++) {
    float v = row >= 0 ? c->scale * L->W[(size_t)row * c->d + k] : 0.0f;
    if (prow >= 0) v = v + L->P[(size_t)prow * c->d + k];
    if (srow >= 0) v = v + L->S[(size_t)srow * c->d + k];
    x[k] = v;
  }
}

/* The first bad token of the call and what the error names. */
static int expected_error(const ldata *L, const char **arg, int64_t *index) {
  const lcase *c = &L->c;
  int64_t first_id = -1, first_sid = -1;
  for (size_t i = 0; i < c->n; i++) {
    int64_t r, p, s;
    int bi, bp, bs;
    token_parts(L, i, &r, &p, &s, &bi, &bp, &bs);
    if ((bi || bp) && first_id < 0) first_id = (int64_t)i;
    if (bs && first_sid < 0) first_sid = (int64_t)i;
  }
  if (first_id >= 0) {
    *arg = "ids";
    *index = first_id;
    return 1;
  }
  if (first_sid >= 0) {
    *arg = "segment_ids";
    *index = first_sid;
    return 1;
  }
  return 0;
}

/* The deferred error of the call (clembed_finish) against the case's bad ids. */
static void check_deferred(clembed_context *ctx, const ldata *L, const char *what) {
  const char *arg = NULL;
  int64_t index = -1;
  int expect = expected_error(L, &arg, &index);
  clembed_status s = clembed_finish(ctx);
  EXPECT(s == (expect ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK), "%s: finish gave %s (%s)", what,
         clembed_status_string(s), clembed_context_message(ctx));
  if (expect && s == CLEMBED_ERR_INDEX_OUT_OF_RANGE) {
    clembed_error_detail d;
    clembed_context_error(ctx, &d);
    EXPECT(!strcmp(d.argument, arg) && d.index == index, "%s: the error names %s[%lld], expected %s[%lld]: %s",
           what, d.argument, (long long)d.index, arg, (long long)index, clembed_context_message(ctx));
    if (!strcmp(arg, "segment_ids"))
      EXPECT(d.value == L->sid[index], "%s: the error's value %lld, expected %lld", what, (long long)d.value,
             (long long)L->sid[index]);
  }
}

/* Half an ulp of dtype t at |v| (0 for F32). */
static double half_ulp(double v, clembed_dtype t) {
  if (t == CLEMBED_F32) return 0.0;
  int e;
  frexp(fabs(v), &e); /* |v| in [2^(e-1), 2^e) */
  int mant = t == CLEMBED_F16 ? 10 : 7, emin = t == CLEMBED_F16 ? -14 : -126;
  int ex = e - 1 < emin ? emin : e - 1;
  return ldexp(1.0, ex - mant) / 2.0;
}

/* The forward of a case on ctx: exact against the float32 order, within the
 * tolerance of float64; *bits (when not NULL) receives the output. */
static void run_forward(clembed_context *ctx, const lcase *c, const char *what, float **bits) {
  ldata L;
  ldata_make(ctx, c, &L);
  clembed_matrix whole;
  size_t ld = c->d + c->o_pad;
  OK(ctx, clembed_matrix_create(ctx, c->n ? c->n : 1, ld ? ld : 1, c->out_dt, &whole));
  L.out = whole;
  L.out.rows = c->n;
  L.out.cols = c->d;
  L.out.ld = ld;
  OK(ctx, clembed_embed(ctx, &L.table, &L.ids, &L.opt, &L.out, 0, NULL, NULL));
  check_deferred(ctx, &L, what);
  float *out = read_values(ctx, &L.out);
  float *x = malloc((c->d + 1) * sizeof(float)), *y = malloc((c->d + 1) * sizeof(float));
  double *y64 = malloc((c->d + 1) * sizeof(double));
  size_t exact_bad = 0, tol_bad = 0;
  double worst = 0.0;
  float keep = c->dropout > 0.0f ? ref_dropout_scale(c->dropout) : 1.0f;
  for (size_t i = 0; i < c->n; i++) {
    token_x(&L, i, x);
    ref_norm_row32(x, c->d, c->kind, c->has_w ? L.wv : NULL, c->kind == CLEMBED_NORM_LAYER && c->has_b ? L.bv : NULL,
                   c->eps, y);
    ref_norm_row64(x, c->d, c->kind, c->has_w ? L.wv : NULL, c->kind == CLEMBED_NORM_LAYER && c->has_b ? L.bv : NULL,
                   c->eps, y64);
    for (size_t k = 0; k < c->d; k++) {
      int kept = c->dropout > 0.0f ? ref_dropout_kept(c->seed, (uint64_t)i * c->d + k, c->dropout) : 1;
      float e = c->dropout > 0.0f ? (kept ? y[k] * keep : 0.0f) : y[k];
      e = ref_round(e, c->out_dt);
      float got = out[i * c->d + k];
      if (memcmp(&got, &e, 4) != 0 && exact_bad++ < 3)
        fprintf(stderr, "  %s: token %zu col %zu: %.9g, the header's order gives %.9g\n", what, i, k, got, e);
      if (!kept) continue;
      double want = y64[k] * keep, err = fabs((double)got - want);
      double tol = 1e-5 * (1.0 + fabs(y64[k])) * keep + half_ulp(want, c->out_dt);
      if (err / tol > worst) worst = err / tol;
      if (err > tol && tol_bad++ < 3)
        fprintf(stderr, "  %s: token %zu col %zu: %.9g, float64 gives %.12g\n", what, i, k, got, want);
    }
  }
  EXPECT(exact_bad == 0, "%s: %zu elements differ from the header's float32 order", what, exact_bad);
  EXPECT(tol_bad == 0, "%s: %zu elements outside the float64 tolerance", what, tol_bad);
  if (bits) *bits = out;
  else free(out);
  free(x);
  free(y);
  free(y64);
  ldata_free(&L);
}

/* ------------------------------------------------------------ the backward */

/* One gradient: device values against the fold in ascending token order of
 * the float32 contributions (exact) and of the float64 ones (tolerance). */
typedef struct gref {
  size_t rows, d;
  float *s32;        /* the float32 folds */
  double *s64, *mag; /* float64 sums, and the sums of the terms' sizes */
  char *hit;
} gref;

static void gref_init(gref *g, size_t rows, size_t d) {
  g->rows = rows;
  g->d = d;
  g->s32 = calloc(rows * d + 1, sizeof(float));
  g->s64 = calloc(rows * d + 1, sizeof(double));
  g->mag = calloc(rows * d + 1, sizeof(double));
  g->hit = calloc(rows + 1, 1);
}

static void gref_add(gref *g, int64_t row, const float *t32, const double *t64, const double *mag) {
  if (row < 0) return;
  g->hit[row] = 1;
  for (size_t k = 0; k < g->d; k++) {
    size_t e = (size_t)row * g->d + k;
    g->s32[e] = g->s32[e] + t32[k];
    g->s64[e] += t64[k];
    g->mag[e] += mag[k];
  }
}

/* The device gradient m (started at init) against init + scale * fold. */
static void gref_check(clembed_context *ctx, const gref *g, const clembed_matrix *m, float init, float scale,
                       const char *what) {
  float *dev = read_values(ctx, m);
  size_t exact_bad = 0, tol_bad = 0;
  for (size_t r = 0; r < g->rows; r++)
    for (size_t k = 0; k < g->d; k++) {
      size_t e = r * g->d + k;
      float want = init;
      if (g->hit[r]) {
        float rr = scale * g->s32[e];
        want = init + rr;
      }
      if (memcmp(&dev[e], &want, 4) != 0 && exact_bad++ < 3)
        fprintf(stderr, "  %s[%zu][%zu] = %.9g, the fold in token order gives %.9g\n", what, r, k, dev[e], want);
      double w64 = (double)init + (double)scale * g->s64[e];
      double tol = 1e-5 * (1.0 + fabs((double)init) + fabs((double)scale) * g->mag[e]);
      if (fabs(dev[e] - w64) > tol && tol_bad++ < 3)
        fprintf(stderr, "  %s[%zu][%zu] = %.9g, float64 gives %.12g\n", what, r, k, dev[e], w64);
    }
  EXPECT(exact_bad == 0, "%s: %zu elements differ from the fold in ascending token order", what, exact_bad);
  EXPECT(tol_bad == 0, "%s: %zu elements outside the float64 tolerance", what, tol_bad);
  free(dev);
}

static void gref_free(gref *g) {
  free(g->s32);
  free(g->s64);
  free(g->mag);
  free(g->hit);
}

static clembed_matrix grad_matrix(clembed_context *ctx, size_t rows, size_t cols, float init) {
  clembed_matrix m;
  OK(ctx, clembed_matrix_create(ctx, rows, cols, CLEMBED_F32, &m));
  float *h = malloc((rows * cols + 1) * sizeof(float));
  for (size_t i = 0; i < rows * cols; i++) h[i] = init;
  if (rows && cols) OK(ctx, clembed_matrix_write(ctx, &m, h, CLEMBED_F32));
  free(h);
  return m;
}

/* Which gradients to ask for. */
enum { G_TABLE = 1, G_POS = 2, G_SEG = 4, G_W = 8, G_B = 16, G_ALL = 31 };

/* The backward of a case: every gradient asked for (want), exact and within tolerance. */
static void run_backward(clembed_context *ctx, const lcase *c, int want, const char *what) {
  ldata L;
  ldata_make(ctx, c, &L);
  uint64_t rng = c->seed * 31 + 5;
  size_t n = c->n, d = c->d;
  float *G = malloc((n * d + 1) * sizeof(float));
  for (size_t i = 0; i < n * d; i++) G[i] = ref_round(tu_rand(&rng), c->grad_dt);
  clembed_matrix gout;
  OK(ctx, clembed_matrix_create(ctx, n, d, c->grad_dt, &gout));
  if (n && d) OK(ctx, clembed_matrix_write(ctx, &gout, G, CLEMBED_F32));
  clembed_embed_grads gr = clembed_embed_grads_defaults();
  clembed_matrix gt = {0}, gp = {0}, gs = {0}, gw = {0}, gb = {0};
  int has_pos = c->positions == CLEMBED_POSITIONS_TABLE, norm = c->kind != CLEMBED_NORM_NONE;
  int has_b = c->kind == CLEMBED_NORM_LAYER && c->has_b;
  if (want & G_TABLE) {
    gt = grad_matrix(ctx, c->V, d, c->init);
    gr.table = &gt;
  }
  if ((want & G_POS) && has_pos) {
    gp = grad_matrix(ctx, c->L, d, c->init);
    gr.position_table = &gp;
  }
  if ((want & G_SEG) && c->segments) {
    gs = grad_matrix(ctx, c->T, d, c->init);
    gr.segment_table = &gs;
  }
  if ((want & G_W) && norm && c->has_w) {
    gw = grad_matrix(ctx, 1, d, c->init);
    gr.norm_weight = &gw;
  }
  if ((want & G_B) && has_b) {
    gb = grad_matrix(ctx, 1, d, c->init);
    gr.norm_bias = &gb;
  }
  OK(ctx, clembed_embed_backward(ctx, &gout, &L.table, &L.ids, &L.opt, &gr, 0, NULL, NULL));
  check_deferred(ctx, &L, what);

  gref rt, rp, rs, rw, rb;
  gref_init(&rt, c->V, d);
  gref_init(&rp, c->L, d);
  gref_init(&rs, c->T, d);
  gref_init(&rw, 1, d);
  gref_init(&rb, 1, d);
  float *x = malloc((d + 1) * sizeof(float)), *g = malloc((d + 1) * sizeof(float));
  float *dx = malloc((d + 1) * sizeof(float)), *gxh = malloc((d + 1) * sizeof(float));
  double *dx64 = malloc((d + 1) * sizeof(double)), *gxh64 = malloc((d + 1) * sizeof(double));
  double *mag = malloc((d + 1) * sizeof(double)), *g64 = malloc((d + 1) * sizeof(double));
  double *gmag = malloc((d + 1) * sizeof(double)), *wmag = malloc((d + 1) * sizeof(double));
  float keep = c->dropout > 0.0f ? ref_dropout_scale(c->dropout) : 1.0f;
  for (size_t i = 0; i < n; i++) {
    int64_t row, prow, srow;
    int b1, b2, b3;
    token_parts(&L, i, &row, &prow, &srow, &b1, &b2, &b3);
    token_x(&L, i, x);
    for (size_t k = 0; k < d; k++) {
      float v = G[i * d + k];
      if (c->dropout > 0.0f) v = ref_dropout_kept(c->seed, (uint64_t)i * d + k, c->dropout) ? v * keep : 0.0f;
      g[k] = v;
      g64[k] = v;
      gmag[k] = fabs(v);
    }
    if (norm) {
      const float *w = c->has_w ? L.wv : NULL;
      ref_norm_backward_row32(x, g, d, c->kind, w, c->eps, dx, gxh);
      ref_norm_backward_row64(x, g, d, c->kind, w, c->eps, dx64, gxh64, mag);
      for (size_t k = 0; k < d; k++) wmag[k] = fabs(gxh64[k]);
    } else {
      memcpy(dx, g, d * sizeof(float));
      memcpy(dx64, g64, d * sizeof(double));
      memcpy(mag, gmag, d * sizeof(double));
    }
    /* the padding row gets no gradient, read as stored or not */
    gref_add(&rt, row == ref_padding_row(c->padding_idx, (int64_t)c->V) ? -1 : row, dx, dx64, mag);
    gref_add(&rp, has_pos ? prow : -1, dx, dx64, mag);
    gref_add(&rs, srow, dx, dx64, mag);
    if (norm) gref_add(&rw, 0, gxh, gxh64, wmag);
    gref_add(&rb, 0, g, g64, gmag);
  }
  char name[160];
  if (gr.table) {
    snprintf(name, sizeof name, "%s: grads.table", what);
    gref_check(ctx, &rt, &gt, c->init, c->scale, name);
  }
  if (gr.position_table) {
    snprintf(name, sizeof name, "%s: grads.position_table", what);
    gref_check(ctx, &rp, &gp, c->init, 1.0f, name);
  }
  if (gr.segment_table) {
    snprintf(name, sizeof name, "%s: grads.segment_table", what);
    gref_check(ctx, &rs, &gs, c->init, 1.0f, name);
  }
  if (gr.norm_weight) {
    snprintf(name, sizeof name, "%s: grads.norm_weight", what);
    gref_check(ctx, &rw, &gw, c->init, 1.0f, name);
  }
  if (gr.norm_bias) {
    snprintf(name, sizeof name, "%s: grads.norm_bias", what);
    gref_check(ctx, &rb, &gb, c->init, 1.0f, name);
  }
  /* without a norm: the table and position gradients are clembed_backward's bits */
  if (!norm && gr.table) {
    clembed_backward_options bo = clembed_backward_defaults();
    bo.scale = c->scale;
    bo.policy = c->policy;
    bo.padding_idx = c->padding_idx;
    bo.seq_len = c->seq_len;
    bo.position_offset = c->pos_offset;
    bo.sequence_offsets = c->with_so ? &L.so : NULL;
    bo.dropout = c->dropout;
    bo.dropout_seed = c->seed;
    clembed_matrix bt = grad_matrix(ctx, c->V, d, c->init), bp = {0};
    if (gr.position_table) {
      bp = grad_matrix(ctx, c->L, d, c->init);
      bo.position_grad = &bp;
    }
    OK(ctx, clembed_backward(ctx, &gout, &L.ids, &bo, &bt, 0, NULL, NULL));
    clembed_finish(ctx); /* the same bad ids: reported above */
    float *a = read_values(ctx, &gt), *b = read_values(ctx, &bt);
    EXPECT(memcmp(a, b, c->V * d * sizeof(float)) == 0, "%s: grads.table differs from clembed_backward's bits", what);
    free(a);
    free(b);
    if (gr.position_table) {
      a = read_values(ctx, &gp);
      b = read_values(ctx, &bp);
      EXPECT(memcmp(a, b, c->L * d * sizeof(float)) == 0,
             "%s: grads.position_table differs from clembed_backward's position_grad", what);
      free(a);
      free(b);
    }
    clembed_matrix_release(&bt);
    clembed_matrix_release(&bp);
  }
  gref_free(&rt);
  gref_free(&rp);
  gref_free(&rs);
  gref_free(&rw);
  gref_free(&rb);
  free(x);
  free(g);
  free(dx);
  free(gxh);
  free(dx64);
  free(gxh64);
  free(mag);
  free(g64);
  free(gmag);
  free(wmag);
  free(G);
  clembed_matrix_release(&gout);
  clembed_matrix_release(&gt);
  clembed_matrix_release(&gp);
  clembed_matrix_release(&gs);
  clembed_matrix_release(&gw);
  clembed_matrix_release(&gb);
  ldata_free(&L);
}

/* ------------------------------------------------------------------ cases */

static const size_t dims[] = {1, 3, 100, 768, 1024, 4096};

TU_CASE(layer_norm_dims) {
  for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
    lcase c = base_case(dims[k]);
    if (tu_small && dims[k] >= 1024) c.n = 3;
    char what[64];
    snprintf(what, sizeof what, "LAYER d=%zu", dims[k]);
    run_forward(ctx, &c, what, NULL);
  }
}

TU_CASE(rms_norm_dims) {
  for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
    lcase c = base_case(dims[k]);
    if (tu_small && dims[k] >= 1024) c.n = 3;
    c.kind = CLEMBED_NORM_RMS;
    c.has_b = 0;
    c.eps = 1e-6f;
    char what[64];
    snprintf(what, sizeof what, "RMS d=%zu", dims[k]);
    run_forward(ctx, &c, what, NULL);
  }
}

/* Without weight or bias, with the eps of PyTorch, a large mean (the
 * deviations are small beside it), and segments without a norm. */
TU_CASE(norm_variants) {
  lcase c = base_case(100);
  c.has_w = c.has_b = 0;
  c.eps = 1e-5f;
  run_forward(ctx, &c, "LAYER without weight and bias", NULL);
  c.has_w = 1;
  run_forward(ctx, &c, "LAYER with weight, no bias", NULL);
  c = base_case(77);
  c.scale = 30.0f; /* the rows' mean far from 0 */
  run_forward(ctx, &c, "LAYER scale 30", NULL);
  c = base_case(100);
  c.kind = CLEMBED_NORM_NONE;
  c.has_w = c.has_b = 0;
  run_forward(ctx, &c, "segments without a norm", NULL);
  c.segments = 2;
  run_forward(ctx, &c, "a segment table without segment_ids", NULL);
  static const size_t tails[] = {20, 50, 63}; /* a whole vector among the last 32 columns */
  for (size_t k = 0; k < 3; k++) {
    c = base_case(tails[k]);
    c.kind = k == 1 ? CLEMBED_NORM_RMS : CLEMBED_NORM_LAYER;
    c.has_b = k != 1;
    run_forward(ctx, &c, "d = 20, 50, 63", NULL);
  }
  c = base_case(64);
  c.segments = 0;
  run_forward(ctx, &c, "a norm without segments", NULL);
  c.kind = CLEMBED_NORM_RMS;
  c.has_b = 0;
  c.eps = 0.0f;
  run_forward(ctx, &c, "RMS eps 0", NULL);
}

/* Every table dtype (quantized included), output dtype and segment and
 * position table dtype. */
TU_CASE(dtypes) {
  static const clembed_dtype tables[] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16, CLEMBED_Q8_0,
                                         CLEMBED_Q4_0, CLEMBED_Q4_K, CLEMBED_Q6_K};
  for (size_t k = 0; k < sizeof tables / sizeof tables[0]; k++) {
    lcase c = base_case(tables[k] >= CLEMBED_Q4_K ? 256 : tables[k] >= CLEMBED_Q8_0 ? 96 : 70);
    c.table_dt = tables[k];
    c.out_dt = (clembed_dtype)(k % 3);
    c.seg_dt = (clembed_dtype)((k + 1) % 3);
    c.pos_dt = tables[k] == CLEMBED_Q8_0 ? CLEMBED_Q8_0 : (clembed_dtype)((k + 2) % 3);
    c.it = k % 2 ? CLEMBED_I64 : CLEMBED_I32;
    char what[64];
    snprintf(what, sizeof what, "table dtype %d, out %d, segments %d, positions %d", (int)c.table_dt, (int)c.out_dt,
             (int)c.seg_dt, (int)c.pos_dt);
    run_forward(ctx, &c, what, NULL);
  }
}

TU_CASE(positions_and_dropout) {
  lcase c = base_case(96);
  c.positions = CLEMBED_POSITIONS_SINUSOID;
  c.pos_offset = 3;
  run_forward(ctx, &c, "sinusoid (the cached table)", NULL);
  c.with_so = 1;
  run_forward(ctx, &c, "sinusoid per sequence (computed per element)", NULL);
  c = base_case(50);
  c.with_so = 1;
  run_forward(ctx, &c, "a learned table, sequence_offsets", NULL);
  c.with_so = 0;
  c.seq_len = 0;
  c.pos_offset = 2;
  run_forward(ctx, &c, "one sequence from position 2", NULL);
  c.positions = CLEMBED_POSITIONS_NONE;
  c.dropout = 0.25f;
  c.scale = 1.5f;
  run_forward(ctx, &c, "no positions, dropout, scale", NULL);
  c = base_case(130);
  c.dropout = 0.5f;
  c.kind = CLEMBED_NORM_RMS;
  c.has_b = 0;
  c.out_dt = CLEMBED_BF16;
  run_forward(ctx, &c, "RMS, dropout, BF16", NULL);
}

/* The index policies: bad ids and segment ids, padding, offsets and strides. */
TU_CASE(policies) {
  static const clembed_index_policy pol[] = {CLEMBED_INDEX_CHECK, CLEMBED_INDEX_CLAMP, CLEMBED_INDEX_ZERO,
                                             CLEMBED_INDEX_WRAP};
  for (int k = 0; k < 4; k++) {
    lcase c = base_case(40);
    c.policy = pol[k];
    c.bad_ids = c.bad_sids = 1;
    c.padding_idx = 3;
    c.t_pad = 5;
    c.o_pad = 3;
    char what[64];
    snprintf(what, sizeof what, "policy %d, bad ids and segment ids", (int)pol[k]);
    run_forward(ctx, &c, what, NULL);
    c.bad_ids = 0;
    snprintf(what, sizeof what, "policy %d, bad segment ids only", (int)pol[k]);
    run_forward(ctx, &c, what, NULL);
  }
}

/* padding_keeps_row (PyTorch's nn.Embedding, Hugging Face's BertEmbeddings):
 * the padding id's row goes into the sum as stored, and gets no gradient; the
 * rows are random, never zero, so a zero padding row fails the forward. */
TU_CASE(padding_keeps_row) {
  static const clembed_norm_kind kinds[] = {CLEMBED_NORM_LAYER, CLEMBED_NORM_RMS, CLEMBED_NORM_NONE};
  for (int k = 0; k < 3; k++)
    for (int pad = 0; pad < 2; pad++) {
      lcase c = base_case(40);
      c.kind = kinds[k];
      c.has_b = c.kind == CLEMBED_NORM_LAYER;
      c.has_w = c.kind != CLEMBED_NORM_NONE;
      c.padding_idx = pad ? -8 : 3; /* -8: row 3 of 11, counted from the end */
      c.keep_row = 1;
      c.scale = 2.0f;
      c.dropout = k == 0 && pad ? 0.25f : 0.0f;
      char what[96];
      snprintf(what, sizeof what, "padding_keeps_row, norm %d, padding_idx %lld", (int)c.kind,
               (long long)c.padding_idx);
      run_forward(ctx, &c, what, NULL);
      run_backward(ctx, &c, G_ALL, what);
    }
  /* 2 is neither */
  lcase c = base_case(8);
  c.padding_idx = 3;
  c.keep_row = 2;
  ldata L;
  ldata_make(ctx, &c, &L);
  OK(ctx, clembed_matrix_create(ctx, c.n, c.d, CLEMBED_F32, &L.out));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_embed(ctx, &L.table, &L.ids, &L.opt, &L.out, 0, NULL, NULL));
  ldata_free(&L);
}

/* The CPU and GPU shapes give the same bits (and both the header's order), for
 * token counts that fill the GPU shape's groups differently. */
TU_CASE(shapes_same_bits) {
  clembed_context *cpu, *gpu;
  if (!tu_shaped_pair(&cpu, &gpu)) return;
  static const size_t ns[] = {1, 7, 33};
  for (size_t k = 0; k < 3; k++) {
    lcase c = base_case(k == 2 ? 300 : 45);
    c.n = ns[k];
    c.dropout = k == 1 ? 0.3f : 0.0f;
    c.kind = k == 1 ? CLEMBED_NORM_RMS : CLEMBED_NORM_LAYER;
    c.has_b = k != 1;
    c.bad_sids = 1;
    float *a, *b;
    run_forward(cpu, &c, "CPU shape", &a);
    run_forward(gpu, &c, "GPU shape", &b);
    EXPECT(memcmp(a, b, c.n * c.d * sizeof(float)) == 0, "n=%zu: the CPU and GPU shapes differ", c.n);
    free(a);
    free(b);
    run_backward(cpu, &c, G_ALL, "backward, CPU shape");
    run_backward(gpu, &c, G_ALL, "backward, GPU shape");
  }
  clembed_context_destroy(cpu);
  clembed_context_destroy(gpu);
}

TU_CASE(backward_layer) {
  static const size_t bd[] = {1, 3, 100, 768};
  for (size_t k = 0; k < sizeof bd / sizeof bd[0]; k++) {
    lcase c = base_case(bd[k]);
    c.scale = 2.0f;
    char what[64];
    snprintf(what, sizeof what, "backward LAYER d=%zu", bd[k]);
    run_backward(ctx, &c, G_ALL, what);
  }
  lcase c = base_case(64);
  c.dropout = 0.2f;
  c.grad_dt = CLEMBED_F16;
  c.table_dt = CLEMBED_Q8_0;
  run_backward(ctx, &c, G_ALL, "backward LAYER, dropout, F16 grad, Q8_0 table");
  c.kind = CLEMBED_NORM_RMS;
  c.has_b = 0;
  c.positions = CLEMBED_POSITIONS_SINUSOID;
  run_backward(ctx, &c, G_ALL, "backward RMS, sinusoid");
  c = base_case(33);
  c.has_w = 0;
  c.with_so = 1;
  run_backward(ctx, &c, G_ALL, "backward LAYER without weight, sequence_offsets");
  run_backward(ctx, &c, G_SEG | G_B, "backward: only the segment and bias gradients");
  run_backward(ctx, &c, G_SEG | G_TABLE, "backward: only the segment and table gradients");
  c = base_case(37);
  c.T = 4;
  c.n = 6; /* segment rows 2 and 3 without tokens: left as they are (-0, not +0) */
  c.init = -0.0f;
  run_backward(ctx, &c, G_ALL, "backward, segment rows without tokens, gradients at -0");
  c = base_case(37);
  c.T = 6; /* more segment rows than ce_norm_params sums: the segment fold */
  c.init = -0.0f;
  run_backward(ctx, &c, G_ALL, "backward, 6 segment types");
  run_backward(ctx, &c, G_SEG | G_W, "backward, 6 segment types: the segment and weight gradients");
}

/* An output (and the backward's dx) larger than the device's cache, 32 MiB
 * where the device reports none: on a CPU written with streaming stores. */
TU_CASE(outputs_larger_than_the_cache) {
  if (tu_small) {
    tu_skip("not in small mode");
    return;
  }
  unsigned long long cache = tu_device_cache(ctx, 32ULL << 20);
  if (cache > (64ULL << 20)) {
    tu_skip("the device's cache size is above 64 MiB");
    return;
  }
  lcase c = base_case(1024);
  c.n = (size_t)cache / (1024 * 4) + 37;
  c.seq_len = 64;
  c.L = 64;
  run_forward(ctx, &c, "LAYER d=1024, an output larger than the cache", NULL);
  run_backward(ctx, &c, G_ALL, "backward LAYER d=1024, dx larger than the cache");
}

TU_CASE(backward_without_norm) {
  lcase c = base_case(40);
  c.kind = CLEMBED_NORM_NONE;
  c.has_w = c.has_b = 0;
  c.scale = 3.0f;
  c.padding_idx = 2;
  c.dropout = 0.3f;
  run_backward(ctx, &c, G_ALL, "backward, segments, no norm");
  c.segments = 0;
  c.with_so = 1;
  run_backward(ctx, &c, G_ALL, "backward, no segments, no norm (clembed_backward)");
}

TU_CASE(backward_bad_ids) {
  static const clembed_index_policy pol[] = {CLEMBED_INDEX_CHECK, CLEMBED_INDEX_CLAMP, CLEMBED_INDEX_ZERO,
                                             CLEMBED_INDEX_WRAP};
  for (int k = 0; k < 4; k++) {
    lcase c = base_case(20);
    c.policy = pol[k];
    c.bad_sids = 1;
    c.bad_ids = k % 2;
    c.padding_idx = -1;
    char what[64];
    snprintf(what, sizeof what, "backward, policy %d, bad segment ids", (int)pol[k]);
    run_backward(ctx, &c, G_ALL, what);
  }
}

/* No columns: nothing written, every id checked; no ids. */
TU_CASE(empty) {
  lcase c = base_case(0);
  c.bad_sids = 1;
  run_forward(ctx, &c, "0 columns, bad segment ids", NULL);
  run_backward(ctx, &c, G_ALL, "backward, 0 columns");
  c = base_case(16);
  c.n = 0;
  run_forward(ctx, &c, "0 ids", NULL);
  run_backward(ctx, &c, G_ALL, "backward, 0 ids");
}

/* Bad arguments: each refused, naming the field. */
TU_CASE(bad_arguments) {
  lcase c = base_case(32);
  ldata L;
  ldata_make(ctx, &c, &L);
  clembed_matrix out, w8, q8;
  OK(ctx, clembed_matrix_create(ctx, c.n, c.d, CLEMBED_F32, &out));
  OK(ctx, clembed_matrix_create(ctx, 1, 8, CLEMBED_F32, &w8));
  OK(ctx, clembed_matrix_create(ctx, 2, 32, CLEMBED_Q8_0, &q8));
  struct {
    const char *arg;
    clembed_status code;
  } expect[] = {{"segment_ids", CLEMBED_ERR_INVALID_ARGUMENT}, {"norm.kind", CLEMBED_ERR_INVALID_ARGUMENT},
                {"norm.bias", CLEMBED_ERR_INVALID_ARGUMENT},   {"norm.weight", CLEMBED_ERR_INVALID_ARGUMENT},
                {"norm.eps", CLEMBED_ERR_INVALID_ARGUMENT},    {"norm.eps", CLEMBED_ERR_INVALID_ARGUMENT},
                {"norm.weight", CLEMBED_ERR_INVALID_ARGUMENT}, {"segment_table", CLEMBED_ERR_UNSUPPORTED},
                {"segment_table", CLEMBED_ERR_INVALID_ARGUMENT}, {"segment_ids", CLEMBED_ERR_INVALID_ARGUMENT}};
  for (int k = 0; k < (int)(sizeof expect / sizeof expect[0]); k++) {
    clembed_embed_options o = L.opt;
    clembed_ids short_ids = L.sids;
    switch (k) {
      case 0: o.segment_table = NULL; break;                 /* segment_ids without a table */
      case 1: o.norm.kind = (clembed_norm_kind)7; break;
      case 2: o.norm.kind = CLEMBED_NORM_RMS; break;         /* a bias with RMS */
      case 3: o.norm.kind = CLEMBED_NORM_NONE; break;        /* a weight with NONE */
      case 4: o.norm.eps = -1.0f; break;
      case 5: o.norm.eps = INFINITY; break;
      case 6: o.norm.weight = &w8; break;                    /* 1 x 8 for 32 columns */
      case 7: o.segment_table = &q8; break;                  /* quantized */
      case 8: o.segment_table = &w8; break;                  /* 8 columns */
      case 9: short_ids.count--; o.segment_ids = &short_ids; break;
    }
    if (k == 3) o.norm.bias = NULL;
    FAILS(ctx, expect[k].code, clembed_embed(ctx, &L.table, &L.ids, &o, &out, 0, NULL, NULL));
    clembed_error_detail d;
    clembed_context_error(ctx, &d);
    EXPECT(!strcmp(d.argument, expect[k].arg), "case %d: the error names '%s', expected '%s' (%s)", k, d.argument,
           expect[k].arg, clembed_context_message(ctx));
  }
  /* the backward: gradients of parts the forward lacks, or of the wrong shape */
  clembed_matrix g;
  OK(ctx, clembed_matrix_create(ctx, c.n, c.d, CLEMBED_F32, &g));
  clembed_matrix wrong;
  OK(ctx, clembed_matrix_create(ctx, 3, c.d, CLEMBED_F32, &wrong));
  clembed_embed_options o = L.opt;
  clembed_embed_grads gr = clembed_embed_grads_defaults();
  gr.norm_bias = &w8;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_embed_backward(ctx, &g, &L.table, &L.ids, &o, &gr, 0, NULL, NULL));
  clembed_error_detail d;
  clembed_context_error(ctx, &d);
  EXPECT(!strcmp(d.argument, "grads.norm_bias"), "the error names '%s'", d.argument);
  gr = clembed_embed_grads_defaults();
  gr.segment_table = &wrong;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_embed_backward(ctx, &g, &L.table, &L.ids, &o, &gr, 0, NULL, NULL));
  clembed_context_error(ctx, &d);
  EXPECT(!strcmp(d.argument, "grads.segment_table"), "the error names '%s'", d.argument);
  o.norm.bias = NULL;
  gr = clembed_embed_grads_defaults();
  gr.norm_bias = &out; /* no bias in the forward */
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_embed_backward(ctx, &g, &L.table, &L.ids, &o, &gr, 0, NULL, NULL));
  o = L.opt;
  o.positions = CLEMBED_POSITIONS_NONE;
  gr = clembed_embed_grads_defaults();
  gr.position_table = &wrong;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_embed_backward(ctx, &g, &L.table, &L.ids, &o, &gr, 0, NULL, NULL));
  clembed_context_error(ctx, &d);
  EXPECT(!strcmp(d.argument, "grads.position_table"), "the error names '%s'", d.argument);
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_embed_backward(ctx, &g, &L.table, &L.ids, &o, NULL, 0, NULL, NULL));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_embed_backward(NULL, &g, &L.table, &L.ids, &o, &gr, 0, NULL, NULL));
  clembed_matrix_release(&g);
  clembed_matrix_release(&wrong);
  clembed_matrix_release(&out);
  clembed_matrix_release(&w8);
  clembed_matrix_release(&q8);
  ldata_free(&L);
}

/* The defaults leave the plain forward: no segments, NONE, eps 1e-5. */
TU_CASE(defaults) {
  clembed_embed_options o = clembed_embed_defaults();
  EXPECT(o.segment_table == NULL && o.segment_ids == NULL, "defaults: segments");
  EXPECT(o.norm.kind == CLEMBED_NORM_NONE && !o.norm.weight && !o.norm.bias && o.norm.eps == 1e-5f,
         "defaults: norm {%d, %p, %p, %g}", (int)o.norm.kind, (const void *)o.norm.weight, (const void *)o.norm.bias,
         (double)o.norm.eps);
}

int main(int argc, char **argv) {
  tu_suite s = {"test_norm", 1, NULL, NULL, 0};
  return tu_main(argc, argv, s);
}
