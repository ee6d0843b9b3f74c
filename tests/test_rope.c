/* clembed_rope_cache and clembed_rope_apply against float64 references
 * (reference_rope.h: the frequencies in double as the contract gives them, the
 * angle p*w formed and reduced exactly, sin/cos in double).
 * Tolerances (include/clembed.h, clembed_rope_cache and clembed_rope_apply):
 *   cache: |got - a*cos| and |got - a*sin| <= 1e-6 * a, plus half an ulp of an
 *          F16/BF16 output;
 *   apply: every output within 2e-6 * a * (|x_a| + |x_b|) of the exact rotation
 *          of the same inputs, plus half an ulp of an F16/BF16 output; columns
 *          past R copied exactly; in place identical to out of place.
 * Positions: near 0, 2^17, 2^20, 2^24, 2^28, 2^31 and up to 2^32 - 1. Every
 * scaling (none, linear, NTK, YaRN, Llama 3), both layouts, partial rotary,
 * inverse(apply(x)) = x, F16/BF16 rounding, positions from a buffer (I32, I64)
 * or offset + i % seq_len, and every error. The float32 formula most
 * frameworks use (p*w in float32) is measured at the same positions and its
 * error printed, not asserted.
 * Named cases (test_util.h): `test_rope --list`, `test_rope NAME`; `small` shrinks the sweeps. */
#include "test_util.h"
#include "reference_rope.h"

static const char *DN[3] = {"F32", "F16", "BF16"};

static const uint64_t FAR[] = {0,
                               1,
                               ((uint64_t)1 << 17) + 3,
                               ((uint64_t)1 << 20) - 1,
                               ((uint64_t)1 << 20) + 1,
                               ((uint64_t)1 << 24) - 2,
                               ((uint64_t)1 << 28) + 5,
                               ((uint64_t)1 << 31) - 1,
                               ((uint64_t)1 << 31) + 12345,
                               3141592653u,
                               ((uint64_t)1 << 32) - 2,
                               ((uint64_t)1 << 32) - 1};
#define NFAR (sizeof FAR / sizeof *FAR)

/* One ulp of dtype t at the magnitude of v. */
static double ulp_of(double v, clembed_dtype t) {
  double a = fabs(v);
  if (t == CLEMBED_F16) return a < ldexp(1.0, -14) ? ldexp(1.0, -24) : ldexp(1.0, ilogb(a) - 10);
  if (t == CLEMBED_BF16) return a < ldexp(1.0, -126) ? ldexp(1.0, -133) : ldexp(1.0, ilogb(a) - 7);
  return a < ldexp(1.0, -126) ? ldexp(1.0, -149) : ldexp(1.0, ilogb(a) - 23);
}
/* the contract's bound `b` on the float32 value, plus half an ulp of the output dtype */
static double with_rounding(double ref, double b, clembed_dtype t) {
  return t == CLEMBED_F32 ? b : b + 0.5 * ulp_of(fabs(ref) + b, t);
}

/* The configurations: every scaling, with the parameters of real models. */
typedef struct config {
  const char *name;
  clembed_rope r;
} config;

static size_t configs(config *out) {
  size_t n = 0;
  clembed_rope r = clembed_rope_defaults();
  r.head_dim = 64;
  out[n++] = (config){"none 10000", r};
  r.base = 1.0;
  out[n++] = (config){"none base 1", r};
  r.base = 2.0;
  out[n++] = (config){"none base 2", r};
  r.base = 1e6;
  r.head_dim = 128;
  out[n++] = (config){"none 1e6", r};
  r = clembed_rope_defaults();
  r.head_dim = 80;
  r.rotary_dim = 32; /* partial rotary, as GPT-NeoX / Phi */
  r.scaling = CLEMBED_ROPE_SCALING_LINEAR;
  r.factor = 4.0;
  out[n++] = (config){"linear 4, R 32 of 80", r};
  r = clembed_rope_defaults();
  r.head_dim = 64;
  r.scaling = CLEMBED_ROPE_SCALING_NTK;
  r.factor = 2.0;
  out[n++] = (config){"ntk 2", r};
  r = clembed_rope_defaults();
  r.head_dim = 128;
  r.base = 1e6;
  r.scaling = CLEMBED_ROPE_SCALING_YARN;
  r.factor = 4.0;
  r.original_max_position = 32768;
  out[n++] = (config){"yarn 4 (Qwen)", r};
  r.attention_factor = 1.0;
  r.head_dim = 64;
  r.base = 10000.0;
  r.original_max_position = 4096;
  out[n++] = (config){"yarn attention 1", r};
  r = clembed_rope_defaults();
  r.head_dim = 128;
  r.base = 500000.0;
  r.scaling = CLEMBED_ROPE_SCALING_LLAMA3;
  r.factor = 8.0;
  r.original_max_position = 8192;
  out[n++] = (config){"llama3 (Llama 3.1)", r};
  return n;
}

static size_t rotary(const clembed_rope *r) { return r->rotary_dim ? r->rotary_dim : r->head_dim; }

static clembed_matrix upload(clembed_context *ctx, size_t rows, size_t cols, clembed_dtype t, const float *host) {
  clembed_matrix m = {0};
  OK(ctx, clembed_matrix_create(ctx, rows, cols, t, &m));
  if (host) OK(ctx, clembed_matrix_write(ctx, &m, host, CLEMBED_F32));
  return m;
}

static float *download(clembed_context *ctx, const clembed_matrix *m) {
  size_t n = m->rows * m->cols;
  float *h = malloc((n ? n : 1) * sizeof *h);
  OK(ctx, clembed_matrix_read(ctx, m, h, CLEMBED_F32));
  return h;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double urand(void) { /* [-1, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) * 0x1p-52 - 1.0;
}

/* --------------------------------------------------------------- cache */

TU_CASE(cache_exact) {
  config cf[16];
  size_t nc = configs(cf), checked = 0, bad = 0;
  double worst = 0.0, f32_worst = 0.0, f32_worst_17 = 0.0;
  for (size_t c = 0; c < nc; c++)
    for (int t = 0; t < 3; t++) {
      if (tu_small && t && c % 3) continue;
      const clembed_rope *r = &cf[c].r;
      size_t R = rotary(r), half = R / 2;
      double w[256], a;
      EXPECT(ref_rope_freq(r, R, w, &a) == 0, "%s: reference refused", cf[c].name);
      for (size_t f = 0; f < NFAR; f++) {
        size_t rows = FAR[f] + 3 <= ((uint64_t)1 << 32) ? 3 : (size_t)(((uint64_t)1 << 32) - FAR[f]);
        clembed_matrix m = upload(ctx, rows, R, (clembed_dtype)t, NULL);
        OK(ctx, clembed_rope_cache(ctx, r, (size_t)FAR[f], &m, 0, NULL, NULL));
        float *g = download(ctx, &m);
        for (size_t i = 0; i < rows; i++)
          for (size_t k = 0; k < half; k++) {
            uint64_t p = FAR[f] + i;
            double rc = a * ref_cos_exact(p, w[k]), rs = a * ref_sin_exact(p, w[k]);
            double gc = g[i * R + k], gs = g[i * R + half + k];
            double ec = fabs(gc - rc), es = fabs(gs - rs);
            int okc = ec <= with_rounding(rc, 1e-6 * a, (clembed_dtype)t);
            int oks = es <= with_rounding(rs, 1e-6 * a, (clembed_dtype)t);
            if ((!okc || !oks) && bad++ < 8)
              fprintf(stderr, "cache %s %s p=%llu k=%zu: cos %.9g (exact %.12g), sin %.9g (exact %.12g)\n",
                      cf[c].name, DN[t], (unsigned long long)p, k, gc, rc, gs, rs);
            if (t == 0) worst = fmax(worst, fmax(ec, es) / a);
            checked += 2;
            if (t == 0) { /* the frameworks' float32 formula, for the log */
              float ang = (float)p * (float)w[k];
              double e32 = fmax(fabs(cosf(ang) - rc / a), fabs(sinf(ang) - rs / a));
              f32_worst = fmax(f32_worst, e32);
              if (p < ((uint64_t)1 << 18)) f32_worst_17 = fmax(f32_worst_17, e32);
            }
          }
        free(g);
        clembed_matrix_release(&m);
      }
    }
  EXPECT(bad == 0, "%zu of %zu cache values outside the bound", bad, checked);
  printf("cache: %zu values, max F32 error %.3g * a (limit 1e-6 * a)\n", checked, worst);
  printf("cache: float32 p*w (the frameworks' formula): max error %.3g below 2^18, %.3g up to 2^32 - 1\n",
         f32_worst_17, f32_worst);
}

/* --------------------------------------------------------------- apply */

typedef struct apply_case {
  const clembed_rope *r;
  const char *name;
  size_t rows, heads;
  clembed_dtype xt, ot;
  int inverse, use_positions, in_place;
  clembed_index_type ptype;
  size_t seq_len, offset;
  const int64_t *pos; /* rows positions when use_positions */
} apply_case;

/* Runs one apply and checks it; returns the output (caller frees) for further checks. */
static float *run_apply(clembed_context *ctx, const apply_case *ac, const float *xin, size_t *nbad, double *worst) {
  const clembed_rope *r = ac->r;
  size_t R = rotary(r), half = R / 2, cols = ac->heads * r->head_dim, n = ac->rows * cols;
  double w[256], a;
  EXPECT(ref_rope_freq(r, R, w, &a) == 0, "%s: reference refused", ac->name);
  /* the inputs as the device holds them */
  float *xr = malloc((n ? n : 1) * sizeof *xr);
  for (size_t i = 0; i < n; i++) xr[i] = ref_round(xin[i], ac->xt);
  clembed_matrix x = upload(ctx, ac->rows, cols, ac->xt, xr), out = x;
  if (!ac->in_place) out = upload(ctx, ac->rows, cols, ac->ot, NULL);
  clembed_ids ids = {0};
  if (ac->use_positions) {
    if (ac->ptype == CLEMBED_I64) {
      OK(ctx, clembed_ids_create(ctx, ac->pos, ac->rows, CLEMBED_I64, &ids));
    } else {
      int32_t *p32 = malloc((ac->rows ? ac->rows : 1) * sizeof *p32);
      for (size_t i = 0; i < ac->rows; i++) p32[i] = (int32_t)ac->pos[i];
      OK(ctx, clembed_ids_create(ctx, p32, ac->rows, CLEMBED_I32, &ids));
      free(p32);
    }
  }
  OK(ctx, clembed_rope_apply(ctx, r, &x, ac->use_positions ? &ids : NULL, ac->seq_len, ac->offset, ac->inverse,
                             &out, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
  float *g = download(ctx, &out);
  clembed_dtype ot = ac->in_place ? ac->xt : ac->ot;
  for (size_t i = 0; i < ac->rows; i++) {
    uint64_t p = ac->use_positions ? (uint64_t)ac->pos[i] : ac->offset + (ac->seq_len ? i % ac->seq_len : i);
    for (size_t h = 0; h < ac->heads; h++) {
      const float *xi = xr + i * cols + h * r->head_dim;
      const float *gi = g + i * cols + h * r->head_dim;
      for (size_t k = 0; k < half; k++) {
        size_t ca, cb;
        ref_rope_columns(r->layout, R, k, &ca, &cb);
        double ya, yb, xa = xi[ca], xb = xi[cb];
        ref_rope_pair(p, w[k], a, ac->inverse, xa, xb, &ya, &yb);
        double b = 2e-6 * a * (fabs(xa) + fabs(xb));
        double ea = fabs(gi[ca] - ya), eb = fabs(gi[cb] - yb);
        if ((!(ea <= with_rounding(ya, b, ot)) || !(eb <= with_rounding(yb, b, ot))) && (*nbad)++ < 8)
          fprintf(stderr, "apply %s %s->%s p=%llu head %zu pair %zu: (%.9g, %.9g), exact (%.12g, %.12g)\n", ac->name,
                  DN[ac->xt], DN[ot], (unsigned long long)p, h, k, gi[ca], gi[cb], ya, yb);
        double s = fabs(xa) + fabs(xb);
        if (ot == CLEMBED_F32 && s > 0) *worst = fmax(*worst, fmax(ea, eb) / (a * s));
      }
      for (size_t c = R; c < r->head_dim; c++)
        if (gi[c] != ref_round(xi[c], ot) && (*nbad)++ < 8)
          fprintf(stderr, "apply %s: column %zu past R not copied: %g vs %g\n", ac->name, c, gi[c], xi[c]);
    }
  }
  if (ac->use_positions) clembed_ids_release(&ids);
  if (!ac->in_place) clembed_matrix_release(&out);
  clembed_matrix_release(&x);
  free(xr);
  return g;
}

static float *random_x(size_t n) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = (float)(urand() * (i % 7 == 0 ? 100.0 : 1.0));
  return x;
}

TU_CASE(apply_exact) {
  config cf[16];
  size_t nc = configs(cf), nbad = 0, runs = 0;
  double worst = 0.0;
  int64_t pos[NFAR * 2], pos31[NFAR * 2]; /* I64 positions up to 2^32 - 1; I32 ones below 2^31 */
  for (size_t f = 0; f < NFAR; f++) pos[f] = (int64_t)FAR[f];
  for (size_t f = 0; f < NFAR; f++) pos[NFAR + f] = (int64_t)(FAR[NFAR - 1 - f] ^ (f * 977)) & 0xFFFFFFFF;
  for (size_t f = 0; f < 2 * NFAR; f++) pos31[f] = pos[f] & 0x7FFFFFFF;
  for (size_t c = 0; c < nc; c++)
    for (int layout = 0; layout < 2; layout++)
      for (int inv = 0; inv < 2; inv++) {
        clembed_rope r = cf[c].r;
        r.layout = (clembed_rope_layout)layout;
        int i32 = (layout + inv) % 2;
        apply_case ac = {&r, cf[c].name, NFAR * 2, 3, CLEMBED_F32, CLEMBED_F32, inv, 1, 0,
                         i32 ? CLEMBED_I32 : CLEMBED_I64, 0, 0, i32 ? pos31 : pos};
        float *x = random_x(ac.rows * ac.heads * r.head_dim);
        free(run_apply(ctx, &ac, x, &nbad, &worst));
        free(x);
        runs++;
      }
  EXPECT(nbad == 0, "%zu apply values outside the bound", nbad);
  printf("apply: %zu runs (every scaling, NEOX and GPTJ, inverse), max F32 error %.3g * a * (|xa| + |xb|) (limit "
         "2e-6)\n",
         runs, worst);
}

/* positions NULL: position_offset + i % seq_len, near 2^32 */
TU_CASE(offset_positions) {
  config cf[16];
  configs(cf);
  size_t nbad = 0;
  double worst = 0.0;
  const size_t offsets[] = {0, (size_t)1 << 20, ((size_t)1 << 32) - 5};
  const size_t seq[] = {0, 5, 5};
  for (int k = 0; k < 3; k++) {
    clembed_rope r = cf[k == 2 ? 8 : k].r;
    apply_case ac = {&r, "offset", k == 0 ? 7 : 15, 2, CLEMBED_F32, CLEMBED_F32, 0, 0, 0, CLEMBED_I32, seq[k],
                     offsets[k], NULL};
    float *x = random_x(ac.rows * ac.heads * r.head_dim);
    free(run_apply(ctx, &ac, x, &nbad, &worst));
    free(x);
  }
  EXPECT(nbad == 0, "%zu values outside the bound", nbad);
  printf("offset positions: max error %.3g * a * (|xa| + |xb|)\n", worst);
}

/* inverse(apply(x)) = x (attention factor 1), partial rotary included */
TU_CASE(inverse) {
  config cf[16];
  size_t nc = configs(cf);
  double worst = 0.0;
  int64_t pos[NFAR];
  for (size_t f = 0; f < NFAR; f++) pos[f] = (int64_t)FAR[f];
  for (size_t c = 0; c < nc; c++) {
    clembed_rope r = cf[c].r;
    if (r.scaling == CLEMBED_ROPE_SCALING_YARN) r.attention_factor = 1.0;
    for (int layout = 0; layout < 2; layout++) {
      r.layout = (clembed_rope_layout)layout;
      size_t cols = 2 * r.head_dim, n = NFAR * cols;
      float *x = random_x(n);
      clembed_matrix m = upload(ctx, NFAR, cols, CLEMBED_F32, x);
      clembed_ids ids = {0};
      OK(ctx, clembed_ids_create(ctx, pos, NFAR, CLEMBED_I64, &ids));
      OK(ctx, clembed_rope_apply(ctx, &r, &m, &ids, 0, 0, 0, &m, 0, NULL, NULL));
      OK(ctx, clembed_rope_apply(ctx, &r, &m, &ids, 0, 0, 1, &m, 0, NULL, NULL));
      float *g = download(ctx, &m);
      size_t R = rotary(&r);
      for (size_t i = 0; i < NFAR; i++)
        for (size_t h = 0; h < 2; h++)
          for (size_t k = 0; k < R / 2; k++) {
            size_t ca, cb, o = i * cols + h * r.head_dim;
            ref_rope_columns(r.layout, R, k, &ca, &cb);
            double s = fabs(x[o + ca]) + fabs(x[o + cb]);
            double e = fmax(fabs(g[o + ca] - x[o + ca]), fabs(g[o + cb] - x[o + cb]));
            EXPECT(e <= 6e-6 * s, "%s p=%lld k=%zu: round trip off by %g (|xa|+|xb| = %g)", cf[c].name,
                   (long long)pos[i], k, e, s);
            if (s > 0) worst = fmax(worst, e / s);
          }
      for (size_t i = 0; i < NFAR; i++)
        for (size_t h = 0; h < 2; h++)
          for (size_t cc = R; cc < r.head_dim; cc++)
            EXPECT(g[i * cols + h * r.head_dim + cc] == x[i * cols + h * r.head_dim + cc], "column past R changed");
      free(g);
      free(x);
      clembed_ids_release(&ids);
      clembed_matrix_release(&m);
    }
  }
  printf("inverse(apply(x)): max |x'' - x| = %.3g * (|xa| + |xb|)\n", worst);
}

/* F16 and BF16 in and out, in place and out of place: in place gives the same bits */
TU_CASE(dtypes) {
  config cf[16];
  configs(cf);
  size_t nbad = 0;
  double worst = 0.0;
  int64_t pos[NFAR];
  for (size_t f = 0; f < NFAR; f++) pos[f] = (int64_t)FAR[f];
  for (int xt = 0; xt < 3; xt++)
    for (int ot = 0; ot < 3; ot++) {
      clembed_rope r = cf[xt == ot ? 4 : 8].r; /* partial rotary, and Llama 3 */
      r.layout = (clembed_rope_layout)((xt + ot) % 2);
      apply_case ac = {&r, "dtypes", NFAR, 2, (clembed_dtype)xt, (clembed_dtype)ot, ot == 2, 1, 0, CLEMBED_I64, 0, 0,
                       pos};
      float *x = random_x(NFAR * 2 * r.head_dim);
      float *g1 = run_apply(ctx, &ac, x, &nbad, &worst);
      if (xt == ot) {
        ac.in_place = 1;
        float *g2 = run_apply(ctx, &ac, x, &nbad, &worst);
        EXPECT(memcmp(g1, g2, NFAR * 2 * r.head_dim * sizeof *g1) == 0, "%s: in place differs from out of place",
               DN[xt]);
        free(g2);
      }
      free(g1);
      free(x);
    }
  EXPECT(nbad == 0, "%zu values outside the bound", nbad);
  printf("dtypes: F32/F16/BF16 in and out, in place: ok\n");
}

/* An output larger than the device's cache (written with streaming stores on
 * a CPU device, two vectors of pairs at a time): F32 and F16, both layouts,
 * within the bound like any other. Not in the small (Oclgrind) runs. */
TU_CASE(output_past_the_cache) {
  if (tu_small) {
    tu_skip("an output past the device's cache is too large for the small runs");
    return;
  }
  unsigned long long cache = tu_device_cache(ctx, 0);
  if (cache > (64ULL << 20)) cache = 64ULL << 20; /* the largest output tried: 96 MiB */
  config cf[16];
  configs(cf);
  size_t nbad = 0;
  double worst = 0.0;
  for (int ot = 0; ot < 2; ot++) {
    clembed_rope r = cf[0].r;
    r.head_dim = 128;
    r.rotary_dim = 0;
    r.layout = (clembed_rope_layout)ot;
    size_t heads = 32, cols = heads * r.head_dim, esize = ot ? 2 : 4;
    size_t rows = (size_t)(cache * 3 / 2) / (cols * esize) + 1;
    apply_case ac = {&r, "past the cache", rows, heads, (clembed_dtype)ot, (clembed_dtype)ot, 0, 0, 0, CLEMBED_I32,
                     0, 3, NULL};
    float *x = random_x(rows * cols);
    free(run_apply(ctx, &ac, x, &nbad, &worst));
    free(x);
  }
  EXPECT(nbad == 0, "%zu values outside the bound", nbad);
}

/* positions negative or >= 2^32: deferred error naming the row and the value; the row is copied */
TU_CASE(bad_positions) {
  clembed_rope r = clembed_rope_defaults();
  r.head_dim = 8;
  int64_t pos[4] = {5, ((int64_t)1 << 32), -3, 7};
  float x[4 * 8];
  for (int i = 0; i < 32; i++) x[i] = (float)(i + 1);
  for (int t = 0; t < 2; t++) {
    clembed_matrix m = upload(ctx, 4, 8, CLEMBED_F32, x), o = upload(ctx, 4, 8, CLEMBED_F32, NULL);
    clembed_ids ids = {0};
    if (t == 0) {
      OK(ctx, clembed_ids_create(ctx, pos, 4, CLEMBED_I64, &ids));
    } else {
      int32_t p32[4] = {5, -1, 6, -7};
      OK(ctx, clembed_ids_create(ctx, p32, 4, CLEMBED_I32, &ids));
    }
    OK(ctx, clembed_rope_apply(ctx, &r, &m, &ids, 0, 0, 0, &o, 0, NULL, NULL));
    clembed_status s = clembed_finish(ctx);
    EXPECT(s == CLEMBED_ERR_INDEX_OUT_OF_RANGE, "bad position gave %s", clembed_status_string(s));
    const char *msg = clembed_context_message(ctx);
    EXPECT(strstr(msg, "positions[1]") && strstr(msg, t == 0 ? "4294967296" : "-1"), "message: %s", msg);
    clembed_error_detail d;
    OK(ctx, clembed_context_error(ctx, &d));
    EXPECT(d.status == CLEMBED_ERR_INDEX_OUT_OF_RANGE && !strcmp(d.operation, "clembed_rope_apply") &&
               !strcmp(d.argument, "positions") && d.index == 1 && d.value == (t == 0 ? ((int64_t)1 << 32) : -1),
           "detail: %s %s %s [%lld] = %lld", clembed_status_string(d.status), d.operation, d.argument,
           (long long)d.index, (long long)d.value);
    float g[32];
    OK(ctx, clembed_matrix_read(ctx, &o, g, CLEMBED_F32));
    EXPECT(memcmp(g + 8, x + 8, 8 * sizeof *g) == 0, "the bad row is not a copy of its input");
    if (t == 0) EXPECT(memcmp(g + 16, x + 16, 8 * sizeof *g) == 0, "the negative row is not a copy of its input");
    EXPECT(g[0] != x[0] || g[1] != x[1], "the good row 0 was not rotated");
    OK(ctx, clembed_finish(ctx)); /* cleared */
    clembed_ids_release(&ids);
    clembed_matrix_release(&m);
    clembed_matrix_release(&o);
  }
}

TU_CASE(errors) {
  const clembed_status INV = CLEMBED_ERR_INVALID_ARGUMENT;
  clembed_rope r = clembed_rope_defaults();
  r.head_dim = 8;
  clembed_matrix x = upload(ctx, 4, 16, CLEMBED_F32, NULL), o = upload(ctx, 4, 16, CLEMBED_F32, NULL);
  clembed_matrix cs = upload(ctx, 4, 8, CLEMBED_F32, NULL);
  FAILS(ctx, INV, clembed_rope_apply(ctx, NULL, &x, NULL, 0, 0, 0, &o, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_rope_apply(NULL, &r, &x, NULL, 0, 0, 0, &o, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_rope_apply(ctx, &r, NULL, NULL, 0, 0, 0, &o, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_rope_cache(ctx, NULL, 0, &cs, 0, NULL, NULL));
  clembed_rope b = r;
  b.head_dim = 0;
  FAILS(ctx, INV, clembed_rope_apply(ctx, &b, &x, NULL, 0, 0, 0, &o, 0, NULL, NULL));
  b = r;
  b.head_dim = 6; /* 16 % 6 != 0 */
  FAILS(ctx, INV, clembed_rope_apply(ctx, &b, &x, NULL, 0, 0, 0, &o, 0, NULL, NULL));
  EXPECT(strstr(clembed_context_message(ctx), "head_dim") != NULL, "%s", clembed_context_message(ctx));
  b = r;
  b.rotary_dim = 3;
  FAILS(ctx, INV, clembed_rope_apply(ctx, &b, &x, NULL, 0, 0, 0, &o, 0, NULL, NULL));
  b.rotary_dim = 10;
  FAILS(ctx, INV, clembed_rope_apply(ctx, &b, &x, NULL, 0, 0, 0, &o, 0, NULL, NULL));
  b = r;
  b.scaling = CLEMBED_ROPE_SCALING_YARN;
  b.factor = -1.0;
  FAILS(ctx, INV, clembed_rope_cache(ctx, &b, 0, &cs, 0, NULL, NULL));
  EXPECT(strstr(clembed_context_message(ctx), "factor") != NULL, "%s", clembed_context_message(ctx));
  b = r;
  b.scaling = (clembed_rope_scaling)17;
  FAILS(ctx, INV, clembed_rope_cache(ctx, &b, 0, &cs, 0, NULL, NULL));
  b = r;
  b.layout = (clembed_rope_layout)5;
  FAILS(ctx, INV, clembed_rope_apply(ctx, &b, &x, NULL, 0, 0, 0, &o, 0, NULL, NULL));
  b = r;
  b.base = NAN;
  FAILS(ctx, INV, clembed_rope_cache(ctx, &b, 0, &cs, 0, NULL, NULL));
  /* shapes */
  clembed_matrix o2 = upload(ctx, 3, 16, CLEMBED_F32, NULL);
  FAILS(ctx, INV, clembed_rope_apply(ctx, &r, &x, NULL, 0, 0, 0, &o2, 0, NULL, NULL));
  clembed_matrix cs2 = upload(ctx, 4, 6, CLEMBED_F32, NULL);
  FAILS(ctx, INV, clembed_rope_cache(ctx, &r, 0, &cs2, 0, NULL, NULL));
  /* an unknown dtype */
  clembed_matrix q = x;
  q.dtype = (clembed_dtype)99;
  FAILS(ctx, INV, clembed_rope_apply(ctx, &r, &q, NULL, 0, 0, 0, &o, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_rope_apply(ctx, &r, &x, NULL, 0, 0, 0, &q, 0, NULL, NULL));
  /* positions at or past 2^32 known on the host */
  size_t end = (size_t)1 << 32;
  FAILS(ctx, INV, clembed_rope_cache(ctx, &r, end - 3, &cs, 0, NULL, NULL));
  EXPECT(strstr(clembed_context_message(ctx), "2^32") != NULL, "%s", clembed_context_message(ctx));
  clembed_error_detail d;
  OK(ctx, clembed_context_error(ctx, &d));
  EXPECT(!strcmp(d.operation, "clembed_rope_cache") && !strcmp(d.argument, "first_position") &&
             d.value == (int64_t)(end - 3),
         "detail: %s %s = %lld", d.operation, d.argument, (long long)d.value);
  OK(ctx, clembed_rope_cache(ctx, &r, end - 4, &cs, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_rope_cache(ctx, &r, SIZE_MAX, &cs, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_rope_apply(ctx, &r, &x, NULL, 0, end - 3, 0, &o, 0, NULL, NULL));
  OK(ctx, clembed_rope_apply(ctx, &r, &x, NULL, 0, end - 4, 0, &o, 0, NULL, NULL));
  OK(ctx, clembed_rope_apply(ctx, &r, &x, NULL, 2, end - 2, 0, &o, 0, NULL, NULL)); /* seq_len 2: ends at 2^32 - 1 */
  FAILS(ctx, INV, clembed_rope_apply(ctx, &r, &x, NULL, 3, end - 2, 0, &o, 0, NULL, NULL));
  /* too few positions */
  int32_t p3[3] = {0, 1, 2};
  clembed_ids ids = {0};
  OK(ctx, clembed_ids_create(ctx, p3, 3, CLEMBED_I32, &ids));
  FAILS(ctx, INV, clembed_rope_apply(ctx, &r, &x, &ids, 0, 0, 0, &o, 0, NULL, NULL));
  /* out overlapping x without being x */
  clembed_matrix big = upload(ctx, 1, 80, CLEMBED_F32, NULL), xa = big, xb = big;
  xa.rows = 4;
  xa.cols = 16;
  xb = xa;
  xb.offset = 8;
  FAILS(ctx, INV, clembed_rope_apply(ctx, &r, &xa, NULL, 0, 0, 0, &xb, 0, NULL, NULL));
  xb.offset = 64; /* disjoint parts of one buffer: fine */
  xb.rows = 1;
  xa.rows = 1;
  OK(ctx, clembed_rope_apply(ctx, &r, &xa, NULL, 0, 0, 0, &xb, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
  clembed_ids_release(&ids);
  clembed_matrix_release(&big);
  clembed_matrix_release(&cs2);
  clembed_matrix_release(&o2);
  clembed_matrix_release(&cs);
  clembed_matrix_release(&o);
  clembed_matrix_release(&x);
}

/* The CPU shape (a row per work-item, 16 pairs at a time) and the GPU shape (a
 * pair per work-item) give the same bits: every layout, dtype, partial rotary,
 * pair counts that are and are not multiples of 16, in place, bad positions. */
TU_CASE(both_shapes) {
  clembed_context *cpu, *gpu;
  if (!tu_shaped_pair(&cpu, &gpu)) return;
  config cf[16];
  size_t nc = configs(cf), same = 0, cases = 0;
  int64_t pos[NFAR + 1];
  for (size_t f = 0; f < NFAR; f++) pos[f] = (int64_t)FAR[f];
  pos[NFAR] = -5; /* a bad row: copied by both */
  for (size_t c = 0; c < nc; c++)
    for (int layout = 0; layout < 2; layout++)
      for (int t = 0; t < 3; t++) {
        if (tu_small && (c + t) % 3) continue;
        clembed_rope r = cf[c].r;
        r.layout = (clembed_rope_layout)layout;
        if (c == 2) r.head_dim = r.rotary_dim = 36; /* 18 pairs: one vector of 16 and a tail */
        size_t rows = NFAR + 1, cols = 3 * r.head_dim, n = rows * cols;
        float *x = random_x(n), *res[2][2];
        clembed_context *cx[2] = {cpu, gpu};
        for (int k = 0; k < 2; k++) {
          clembed_ids ids = {0};
          OK(cx[k], clembed_ids_create(cx[k], pos, rows, CLEMBED_I64, &ids));
          for (int inplace = 0; inplace < 2; inplace++) {
            clembed_matrix m = upload(cx[k], rows, cols, (clembed_dtype)t, x), o = m;
            if (!inplace) o = upload(cx[k], rows, cols, (clembed_dtype)((t + 1) % 3), NULL);
            OK(cx[k], clembed_rope_apply(cx[k], &r, &m, &ids, 0, 0, (int)(c % 2), &o, 0, NULL, NULL));
            EXPECT(clembed_finish(cx[k]) == CLEMBED_ERR_INDEX_OUT_OF_RANGE, "the bad row was not reported");
            res[k][inplace] = download(cx[k], &o);
            if (!inplace) clembed_matrix_release(&o);
            clembed_matrix_release(&m);
          }
          clembed_ids_release(&ids);
        }
        for (int inplace = 0; inplace < 2; inplace++) {
          int eq = memcmp(res[0][inplace], res[1][inplace], n * sizeof(float)) == 0;
          EXPECT(eq, "%s %s %s%s: CPU and GPU shapes differ", cf[c].name, layout ? "GPTJ" : "NEOX", DN[t],
                 inplace ? " in place" : "");
          same += eq;
          cases++;
        }
        for (int k = 0; k < 2; k++)
          for (int inplace = 0; inplace < 2; inplace++) free(res[k][inplace]);
        free(x);
      }
  printf("CPU and GPU shapes: %zu of %zu results identical bit for bit\n", same, cases);
  clembed_context_destroy(cpu);
  clembed_context_destroy(gpu);
}

int main(int argc, char **argv) { return tu_main(argc, argv, (tu_suite){.name = "test_rope", .device = 1}); }
