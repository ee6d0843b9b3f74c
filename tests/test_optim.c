/* clembed_optimizer_step against a float32 transcription of the contract.
 *
 * The row gradient g is what clembed_backward gives (accumulate 0, the same
 * options): the contract defines g as exactly those bits, and test_backward
 * checks them against its own reference. From g, the reference below performs
 * the documented float32 operations in the documented order:
 *   weight decay: g = g + wd * w
 *   SGD:      w = w - lr * g
 *   ADAGRAD:  s = s + g * g;  w = w - lr * (g / (sqrt(s) + eps))
 *   ROWWISE:  a = 0; a = a + g_c * g_c (c ascending); m = m + a / cols;
 *             w = w - (lr / (sqrt(m) + eps)) * g
 *   ADAM:     m = m + (g - m) * b1c;  u = u + (g * g - u) * b2c;
 *             w = w - step_size * (m / (sqrt(u) + eps)),
 *             b1c, b2c and step_size from float64 on the host, rounded once.
 * States without sqrt or division (ADAGRAD's s, ADAM's m and u) must match bit
 * for bit; the rest within 4 ulp of the result plus 4 ulp of the step (a device
 * without correctly rounded sqrt and division may differ there), and for an
 * F16/BF16 table plus one unit of the table's precision. Rows that are not
 * stepped (not in ids, the padding row, bad ids) and their state rows must
 * keep every bit, as must the bytes around each matrix (offset, ld > cols).
 *
 * Cases (all by default, or name some; --list names them; `small` shrinks them for Oclgrind):
 *   sgd adagrad rowwise_adagrad adam   each kind: F32/F16/BF16 tables, widths 1,
 *                   37, 64, 300, weight decay, scale, scale_grad_by_freq, a row
 *                   repeated 100 times (the column-split path), several steps
 *   sgd_equals_update   SGD with weight_decay 0 is clembed_sgd_update, bit for bit
 *   untouched       padding row, a bad id (deferred error) and absent rows keep their bits
 *   deterministic   two runs, and the CPU and GPU kernel shapes, give the same bits
 *   dropout         the dropout mask replayed as the backward replays it
 *   errors          every refusal of the contract (a quantized table, refused
 *                   with CLEMBED_ERR_UNSUPPORTED, is not among this build's dtypes) */
#include "test_util.h"

static cl_context cl_ctx;
static cl_command_queue cl_queue;

static const char *KN[4] = {"SGD", "ADAGRAD", "ROWWISE_ADAGRAD", "ADAM"};
static const char *DN[3] = {"F32", "F16", "BF16"};

/* ------------------------------------------------------------ device data */

static clembed_matrix mk_matrix(size_t rows, size_t cols, clembed_dtype dt, size_t extra, size_t off,
                                const float *host) {
  return tu_gapped_matrix(cl_ctx, rows, cols, dt, extra, off, host);
}

static void rel(clembed_matrix *m) {
  if (m->buffer) clReleaseMemObject(m->buffer);
  memset(m, 0, sizeof *m);
}

static clembed_ids mk_ids(clembed_context *ctx, const int64_t *host, size_t n, clembed_index_type t) {
  clembed_ids ids = {0};
  if (t == CLEMBED_I64) {
    OK(ctx, clembed_ids_create(ctx, host, n, t, &ids));
  } else {
    int32_t *h = malloc((n + 1) * 4);
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)host[i];
    OK(ctx, clembed_ids_create(ctx, h, n, t, &ids));
    free(h);
  }
  return ids;
}

/* ------------------------------------------------------------ reference */

typedef struct problem {
  size_t V, d, n;
  clembed_dtype dt;
  int64_t *ids;
  float *grad;  /* n x d */
  float *table; /* V x d, values representable in dt */
  float *s1, *s2; /* states (V x d, or V x 1 for ROWWISE) */
  clembed_backward_options bo;
  clembed_optimizer o;
} problem;

/* Which rows are stepped: ids after the policy (CHECK here: valid ids only),
 * not the padding row. */
static unsigned char *stepped_rows(const problem *p) {
  unsigned char *t = calloc(p->V, 1);
  int64_t pad = p->bo.padding_idx;
  if (pad != CLEMBED_NO_PADDING && pad < 0) pad += (int64_t)p->V;
  for (size_t i = 0; i < p->n; i++)
    if (p->ids[i] >= 0 && (size_t)p->ids[i] < p->V && p->ids[i] != pad) t[p->ids[i]] = 1;
  return t;
}

/* The reference step from the backward's row gradients G (V x d) in place on
 * w (V x d floats of the table, rounded to dt after the step), s1, s2. tol[e]
 * receives the tolerance of w's element e (reference.h). */
static void reference_step(const problem *p, const float *G, const unsigned char *stepped, float *w, float *s1,
                           float *s2, double *tol) {
  ref_optimizer_step(&p->o, G, stepped, p->V, p->d, p->dt, w, s1, s2, tol);
}

/* ------------------------------------------------------------ one check */

static void make_states(clembed_context *ctx, const problem *p, clembed_matrix *st1, clembed_matrix *st2,
                        size_t extra, size_t off) {
  memset(st1, 0, sizeof *st1);
  memset(st2, 0, sizeof *st2);
  if (p->o.kind == CLEMBED_SGD) return;
  size_t scols = p->o.kind == CLEMBED_ROWWISE_ADAGRAD ? 1 : p->d;
  *st1 = mk_matrix(p->V, scols, CLEMBED_F32, extra, off, p->s1);
  if (p->o.kind == CLEMBED_ADAM) *st2 = mk_matrix(p->V, p->d, CLEMBED_F32, extra + 1, off + 2, p->s2);
  (void)ctx;
}

/* Runs `steps` optimizer steps on the device and the reference, and compares. */
static void check_problem(clembed_context *ctx, problem *p, int steps, const char *label) {
  size_t V = p->V, d = p->d, n = p->n;
  size_t extra = d % 3, off = 5;
  clembed_matrix table = mk_matrix(V, d, p->dt, extra, off, p->table);
  clembed_matrix grad = mk_matrix(n, d, CLEMBED_F32, 2, 3, p->grad);
  clembed_matrix st1, st2, G = {0};
  make_states(ctx, p, &st1, &st2, 1, 7);
  clembed_ids ids = mk_ids(ctx, p->ids, n, n % 2 ? CLEMBED_I64 : CLEMBED_I32);
  OK(ctx, clembed_matrix_create(ctx, V, d, CLEMBED_F32, &G));
  clembed_backward_options bo = p->bo;
  bo.accumulate = 0;
  bo.deterministic = 1;
  OK(ctx, clembed_backward(ctx, &grad, &ids, &bo, &G, 0, NULL, NULL));
  float *Gh = tu_read_f32(ctx, &G);
  unsigned char *stepped = stepped_rows(p);
  float *w = malloc(V * d * sizeof *w);
  for (size_t e = 0; e < V * d; e++) w[e] = ref_round(p->table[e], p->dt);
  size_t s1n = p->o.kind == CLEMBED_ROWWISE_ADAGRAD ? V : V * d;
  float *s1 = malloc((s1n + 1) * sizeof *s1), *s2 = malloc((V * d + 1) * sizeof *s2);
  if (p->s1) memcpy(s1, p->s1, s1n * sizeof *s1);
  if (p->s2) memcpy(s2, p->s2, V * d * sizeof *s2);
  double *tol = calloc(V * d + 1, sizeof *tol), *acc_tol = calloc(V * d + 1, sizeof *acc_tol);
  clembed_optimizer o = p->o;
  o.state = st1.buffer ? &st1 : NULL;
  o.state2 = st2.buffer ? &st2 : NULL;
  uint64_t step0 = o.step;
  for (int k = 0; k < steps; k++) {
    o.step = step0 + (uint64_t)k;
    p->o.step = o.step;
    OK(ctx, clembed_optimizer_step(ctx, &grad, &ids, &p->bo, &o, &table, 0, NULL, NULL));
    reference_step(p, Gh, stepped, w, s1, s2, tol);
    for (size_t e = 0; e < V * d; e++) acc_tol[e] = acc_tol[e] * 2.0 + tol[e]; /* earlier steps' slack carries on */
  }
  OK(ctx, clembed_finish(ctx));
  float *wg = tu_read_f32(ctx, &table);
  size_t bad = 0, bad_s = 0, bad_u = 0;
  double worst = 0.0;
  for (size_t e = 0; e < V * d; e++) {
    double diff = fabs((double)wg[e] - (double)w[e]);
    int same_bits = memcmp(&wg[e], &w[e], 4) == 0;
    if (!stepped[e / d] ? !same_bits : !(diff <= acc_tol[e])) {
      if (bad < 5)
        fprintf(stderr, "%s: w[%zu][%zu] = %.9g, reference %.9g (tolerance %.3g)\n", label, e / d, e % d, wg[e], w[e],
                acc_tol[e]);
      bad++;
    }
    if (acc_tol[e] > 0 && diff / acc_tol[e] > worst) worst = diff / acc_tol[e];
  }
  EXPECT(bad == 0, "%s: %zu table elements off", label, bad);
  if (st1.buffer) {
    float *sg = tu_read_f32(ctx, &st1);
    int exact = p->o.kind != CLEMBED_ROWWISE_ADAGRAD;
    for (size_t e = 0; e < s1n; e++) {
      size_t row = p->o.kind == CLEMBED_ROWWISE_ADAGRAD ? e : e / d;
      int same = memcmp(&sg[e], &s1[e], 4) == 0;
      double diff = fabs((double)sg[e] - (double)s1[e]);
      int okv = !stepped[row] || exact ? same : diff <= 4.0 * steps * ref_ulp32(s1[e]);
      if (!okv) {
        if (bad_s < 5) fprintf(stderr, "%s: state[%zu] = %.9g, reference %.9g\n", label, e, sg[e], s1[e]);
        bad_s++;
      }
    }
    EXPECT(bad_s == 0, "%s: %zu state elements off", label, bad_s);
    tu_check_gaps(cl_queue, &st1, "state");
    free(sg);
  }
  if (st2.buffer) {
    float *ug = tu_read_f32(ctx, &st2);
    for (size_t e = 0; e < V * d; e++)
      if (memcmp(&ug[e], &s2[e], 4) != 0) {
        if (bad_u < 5) fprintf(stderr, "%s: state2[%zu] = %.9g, reference %.9g\n", label, e, ug[e], s2[e]);
        bad_u++;
      }
    EXPECT(bad_u == 0, "%s: %zu state2 elements off", label, bad_u);
    tu_check_gaps(cl_queue, &st2, "state2");
    free(ug);
  }
  tu_check_gaps(cl_queue, &table, "table");
  free(wg);
  free(Gh);
  free(stepped);
  free(w);
  free(s1);
  free(s2);
  free(tol);
  free(acc_tol);
  rel(&table);
  rel(&grad);
  rel(&st1);
  rel(&st2);
  clembed_matrix_release(&G);
  clembed_ids_release(&ids);
}

static uint64_t rng = 0x853C49E6748FEA9BULL;

static void fill(float *x, size_t n, float lo, float hi, clembed_dtype dt) {
  for (size_t i = 0; i < n; i++) x[i] = ref_round(lo + (hi - lo) * (0.5f + 0.5f * tu_rand(&rng)), dt); /* [lo, hi] */
}

/* A problem with V rows of width d, n ids (a fifth of them one row, `hot`
 * times more), states filled with plausible values. */
static problem mk_problem(clembed_optimizer_kind kind, clembed_dtype dt, size_t V, size_t d, size_t n, size_t hot) {
  problem p;
  memset(&p, 0, sizeof p);
  p.V = V;
  p.d = d;
  p.n = n + hot;
  p.dt = dt;
  p.ids = malloc((p.n + 1) * sizeof *p.ids);
  for (size_t i = 0; i < p.n; i++)
    p.ids[i] = (int64_t)((i % 5 == 0 || i >= n) ? 3 % V : (size_t)((0.5f + 0.5f * tu_rand(&rng)) * V) % V);
  p.grad = malloc((p.n * d + 1) * sizeof *p.grad);
  fill(p.grad, p.n * d, -1.0f, 1.0f, CLEMBED_F32);
  p.table = malloc((V * d + 1) * sizeof *p.table);
  fill(p.table, V * d, -2.0f, 2.0f, dt);
  size_t s1n = kind == CLEMBED_ROWWISE_ADAGRAD ? V : V * d;
  p.s1 = malloc((V * d + 1) * sizeof *p.s1);
  p.s2 = malloc((V * d + 1) * sizeof *p.s2);
  fill(p.s1, s1n, kind == CLEMBED_ADAM ? -0.5f : 0.0f, 0.5f, CLEMBED_F32);
  fill(p.s2, V * d, 0.0f, 0.25f, CLEMBED_F32);
  p.bo = clembed_backward_defaults();
  p.o = clembed_optimizer_defaults(kind);
  p.o.step = 1;
  return p;
}

static void free_problem(problem *p) {
  free(p->ids);
  free(p->grad);
  free(p->table);
  free(p->s1);
  free(p->s2);
}

static void kind_case(clembed_context *ctx, clembed_optimizer_kind kind) {
  const size_t widths[4] = {1, 37, 64, 300};
  for (int t = 0; t < 3; t++)
    for (int wi = 0; wi < 4; wi++) {
      size_t d = widths[wi];
      if (tu_small && wi == 3) continue;
      for (int variant = 0; variant < 3; variant++) {
        size_t V = tu_small ? 23 : 97, n = tu_small ? 40 : 400, hot = variant == 2 ? 100 : 0;
        problem p = mk_problem(kind, (clembed_dtype)t, V, d, n, hot);
        if (variant >= 1) {
          p.o.weight_decay = 0.01f;
          p.bo.scale = 0.5f;
          p.bo.scale_grad_by_freq = 1;
          p.o.learning_rate = 0.05f;
        }
        if (variant == 2) p.bo.padding_idx = 0;
        char label[128];
        snprintf(label, sizeof label, "%s %s d %zu variant %d", KN[kind], DN[t], d, variant);
        check_problem(ctx, &p, kind == CLEMBED_ADAM ? 3 : 2, label);
        free_problem(&p);
      }
    }
}

/* ------------------------------------------------------------ other cases */

TU_CASE(sgd_equals_update) {
  for (int t = 0; t < 3; t++) {
    problem p = mk_problem(CLEMBED_SGD, (clembed_dtype)t, 50, 45, tu_small ? 60 : 500, 70);
    p.bo.scale = 0.75f;
    p.bo.scale_grad_by_freq = 1;
    clembed_matrix a = mk_matrix(p.V, p.d, p.dt, 0, 0, p.table), b = mk_matrix(p.V, p.d, p.dt, 0, 0, p.table);
    clembed_matrix grad = mk_matrix(p.n, p.d, CLEMBED_F32, 0, 0, p.grad);
    clembed_ids ids = mk_ids(ctx, p.ids, p.n, CLEMBED_I32);
    p.o.learning_rate = 0.3f;
    OK(ctx, clembed_optimizer_step(ctx, &grad, &ids, &p.bo, &p.o, &a, 0, NULL, NULL));
    OK(ctx, clembed_sgd_update(ctx, &grad, &ids, 0.3f, &p.bo, &b, 0, NULL, NULL));
    float *ha = tu_read_f32(ctx, &a), *hb = tu_read_f32(ctx, &b);
    EXPECT(memcmp(ha, hb, p.V * p.d * 4) == 0, "SGD step and clembed_sgd_update differ (%s)", DN[t]);
    size_t changed = 0;
    for (size_t e = 0; e < p.V * p.d; e++) changed += ha[e] != ref_round(p.table[e], p.dt);
    EXPECT(changed > 0, "SGD step changed nothing (%s)", DN[t]);
    free(ha);
    free(hb);
    rel(&a);
    rel(&b);
    rel(&grad);
    clembed_ids_release(&ids);
    free_problem(&p);
  }
}

TU_CASE(untouched) {
  for (int k = 0; k < 4; k++) {
    problem p = mk_problem((clembed_optimizer_kind)k, CLEMBED_F32, 40, 19, 30, 0);
    for (size_t i = 0; i < p.n; i++) p.ids[i] = (int64_t)(i % 7) * 3; /* rows 0, 3, ..., 18 */
    p.ids[4] = 5000;                                                  /* a bad id: deferred, steps nothing */
    p.bo.padding_idx = 6;                                              /* row 6 gets no step */
    clembed_matrix table = mk_matrix(p.V, p.d, p.dt, 1, 2, p.table), grad = mk_matrix(p.n, p.d, CLEMBED_F32, 0, 0, p.grad);
    clembed_matrix st1, st2;
    make_states(ctx, &p, &st1, &st2, 3, 1);
    clembed_ids ids = mk_ids(ctx, p.ids, p.n, CLEMBED_I64);
    clembed_optimizer o = p.o;
    o.state = st1.buffer ? &st1 : NULL;
    o.state2 = st2.buffer ? &st2 : NULL;
    OK(ctx, clembed_optimizer_step(ctx, &grad, &ids, &p.bo, &o, &table, 0, NULL, NULL));
    FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
    clembed_error_detail det;
    OK(ctx, clembed_context_error(ctx, &det));
    EXPECT(det.index == 4 && det.value == 5000, "bad id reported at %lld value %lld", (long long)det.index,
           (long long)det.value);
    float *w = tu_read_f32(ctx, &table), *s = st1.buffer ? tu_read_f32(ctx, &st1) : NULL, *u = st2.buffer ? tu_read_f32(ctx, &st2) : NULL;
    size_t scols = k == CLEMBED_ROWWISE_ADAGRAD ? 1 : p.d, kept = 0, moved = 0;
    for (size_t v = 0; v < p.V; v++) {
      int hit = v % 3 == 0 && v <= 18 && v != 6;
      for (size_t c = 0; c < p.d; c++) {
        int same = memcmp(&w[v * p.d + c], &p.table[v * p.d + c], 4) == 0;
        if (!hit) kept += !same;
        else moved += !same;
      }
      for (size_t c = 0; s && c < scols; c++)
        if (!hit) kept += memcmp(&s[v * scols + c], &p.s1[v * scols + c], 4) != 0;
      for (size_t c = 0; u && c < p.d; c++)
        if (!hit) kept += memcmp(&u[v * p.d + c], &p.s2[v * p.d + c], 4) != 0;
    }
    EXPECT(kept == 0, "%s: %zu elements of rows not stepped changed", KN[k], kept);
    EXPECT(moved > 0, "%s: no stepped row changed", KN[k]);
    tu_check_gaps(cl_queue, &table, "table");
    free(w);
    free(s);
    free(u);
    rel(&table);
    rel(&grad);
    rel(&st1);
    rel(&st2);
    clembed_ids_release(&ids);
    free_problem(&p);
  }
}

/* The table and states after `steps` steps on ctx, concatenated as bytes. */
static unsigned char *run_bytes(clembed_context *ctx, const problem *p, int steps, size_t *len) {
  clembed_matrix table, grad, st1, st2;
  cl_context saved = cl_ctx;
  cl_command_queue q = clembed_context_queue(ctx);
  clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof cl_ctx, &cl_ctx, NULL);
  table = mk_matrix(p->V, p->d, p->dt, 0, 0, p->table);
  grad = mk_matrix(p->n, p->d, CLEMBED_F32, 0, 0, p->grad);
  make_states(ctx, p, &st1, &st2, 0, 0);
  cl_ctx = saved;
  clembed_ids ids = mk_ids(ctx, p->ids, p->n, CLEMBED_I32);
  clembed_optimizer o = p->o;
  o.state = st1.buffer ? &st1 : NULL;
  o.state2 = st2.buffer ? &st2 : NULL;
  for (int k = 0; k < steps; k++) {
    o.step = (uint64_t)k + 1;
    OK(ctx, clembed_optimizer_step(ctx, &grad, &ids, &p->bo, &o, &table, 0, NULL, NULL));
  }
  size_t a = p->V * p->d, b = st1.buffer ? st1.rows * st1.cols : 0, c = st2.buffer ? a : 0;
  *len = (a + b + c) * 4;
  unsigned char *out = malloc(*len + 1);
  float *w = tu_read_f32(ctx, &table);
  memcpy(out, w, a * 4);
  free(w);
  if (b) {
    float *s = tu_read_f32(ctx, &st1);
    memcpy(out + a * 4, s, b * 4);
    free(s);
  }
  if (c) {
    float *u = tu_read_f32(ctx, &st2);
    memcpy(out + (a + b) * 4, u, c * 4);
    free(u);
  }
  rel(&table);
  rel(&grad);
  rel(&st1);
  rel(&st2);
  clembed_ids_release(&ids);
  return out;
}

TU_CASE(deterministic) {
  clembed_context *cpu = NULL, *gpu = NULL;
  int shapes = tu_shaped_pair(&cpu, &gpu);
  for (int k = 0; k < 4; k++) {
    problem p = mk_problem((clembed_optimizer_kind)k, CLEMBED_BF16, 300, 200, tu_small ? 300 : 3000, 500);
    p.o.weight_decay = 0.001f;
    size_t l1, l2;
    unsigned char *a = run_bytes(ctx, &p, 3, &l1), *b = run_bytes(ctx, &p, 3, &l2);
    EXPECT(l1 == l2 && memcmp(a, b, l1) == 0, "%s: two runs differ", KN[k]);
    if (shapes) {
      size_t l3, l4;
      unsigned char *c = run_bytes(cpu, &p, 3, &l3), *g = run_bytes(gpu, &p, 3, &l4);
      EXPECT(l3 == l4 && memcmp(c, g, l3) == 0, "%s: CPU and GPU kernel shapes differ", KN[k]);
      free(c);
      free(g);
    }
    free(a);
    free(b);
    free_problem(&p);
  }
  clembed_context_destroy(cpu);
  clembed_context_destroy(gpu);
}

TU_CASE(dropout) {
  for (int k = 0; k < 4; k++) {
    problem p = mk_problem((clembed_optimizer_kind)k, CLEMBED_F32, 31, 70, tu_small ? 50 : 300, 80);
    p.bo.dropout = 0.25f;
    p.bo.dropout_seed = 99;
    char label[64];
    snprintf(label, sizeof label, "%s with dropout", KN[k]);
    check_problem(ctx, &p, 2, label);
    free_problem(&p);
  }
}

TU_CASE(errors) {
  problem p = mk_problem(CLEMBED_ADAM, CLEMBED_F32, 10, 8, 6, 0);
  clembed_matrix table = mk_matrix(10, 8, CLEMBED_F32, 0, 0, p.table), grad = mk_matrix(6, 8, CLEMBED_F32, 0, 0, p.grad);
  clembed_matrix m = mk_matrix(10, 8, CLEMBED_F32, 0, 0, p.s1), u = mk_matrix(10, 8, CLEMBED_F32, 0, 0, p.s2);
  clembed_matrix narrow = mk_matrix(10, 1, CLEMBED_F32, 0, 0, p.s1), half = mk_matrix(10, 8, CLEMBED_F16, 0, 0, p.s1);
  clembed_matrix shortm = mk_matrix(9, 8, CLEMBED_F32, 0, 0, p.s1);
  clembed_ids ids = mk_ids(ctx, p.ids, 6, CLEMBED_I32);
  clembed_backward_options bo = clembed_backward_defaults();
  clembed_optimizer o = clembed_optimizer_defaults(CLEMBED_ADAM);
  o.state = &m;
  o.state2 = &u;
  o.step = 1;
  OK(ctx, clembed_optimizer_step(ctx, &grad, &ids, &bo, &o, &table, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
#define REFUSED(CODE, ARG, ...)                                                                               \
  do {                                                                                                        \
    clembed_optimizer e_ = o;                                                                                 \
    __VA_ARGS__;                                                                                              \
    FAILS(ctx, CODE, clembed_optimizer_step(ctx, &grad, &ids, &bo, &e_, &table, 0, NULL, NULL));              \
    EXPECT(strstr(clembed_context_message(ctx), ARG) != NULL, "message '%s' names %s", clembed_context_message(ctx), ARG); \
  } while (0)
  REFUSED(CLEMBED_ERR_INVALID_ARGUMENT, "step", e_.step = 0);
  REFUSED(CLEMBED_ERR_INVALID_ARGUMENT, "state2", e_.state2 = NULL);
  REFUSED(CLEMBED_ERR_INVALID_ARGUMENT, "state", e_.state = NULL);
  REFUSED(CLEMBED_ERR_INVALID_ARGUMENT, "state", e_.state = &narrow);
  REFUSED(CLEMBED_ERR_INVALID_ARGUMENT, "state", e_.state = &half);
  REFUSED(CLEMBED_ERR_INVALID_ARGUMENT, "state2", e_.state2 = &shortm);
  REFUSED(CLEMBED_ERR_INVALID_ARGUMENT, "learning_rate", e_.learning_rate = -1.0f);
  REFUSED(CLEMBED_ERR_INVALID_ARGUMENT, "learning_rate", e_.learning_rate = NAN);
  REFUSED(CLEMBED_ERR_INVALID_ARGUMENT, "eps", e_.eps = NAN);
  REFUSED(CLEMBED_ERR_INVALID_ARGUMENT, "beta1", e_.beta1 = 1.0f);
  REFUSED(CLEMBED_ERR_INVALID_ARGUMENT, "beta2", e_.beta2 = -0.5f);
  REFUSED(CLEMBED_ERR_INVALID_ARGUMENT, "weight_decay", e_.weight_decay = NAN);
  REFUSED(CLEMBED_ERR_INVALID_ARGUMENT, "kind", e_.kind = (clembed_optimizer_kind)9);
  REFUSED(CLEMBED_ERR_INVALID_ARGUMENT, "state", e_.kind = CLEMBED_ROWWISE_ADAGRAD); /* 10 x 8 is not rows x 1 */
  REFUSED(CLEMBED_ERR_INVALID_ARGUMENT, "state", e_.kind = CLEMBED_ADAGRAD; e_.state = &narrow);
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_optimizer_step(ctx, &grad, &ids, &bo, NULL, &table, 0, NULL, NULL));
  /* SGD needs no state and ignores the fields it does not use */
  clembed_optimizer s = clembed_optimizer_defaults(CLEMBED_SGD);
  s.step = 0;
  OK(ctx, clembed_optimizer_step(ctx, &grad, &ids, &bo, &s, &table, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
  /* the defaults of the contract */
  clembed_optimizer dsgd = clembed_optimizer_defaults(CLEMBED_SGD), dag = clembed_optimizer_defaults(CLEMBED_ADAGRAD);
  clembed_optimizer drw = clembed_optimizer_defaults(CLEMBED_ROWWISE_ADAGRAD), dad = clembed_optimizer_defaults(CLEMBED_ADAM);
  EXPECT(dsgd.kind == CLEMBED_SGD && dsgd.learning_rate == 0.1f && dsgd.weight_decay == 0.0f, "SGD defaults");
  EXPECT(dag.learning_rate == 0.01f && dag.eps == 1e-10f && !dag.state, "ADAGRAD defaults");
  EXPECT(drw.learning_rate == 0.01f && drw.eps == 1e-8f, "ROWWISE_ADAGRAD defaults");
  EXPECT(dad.learning_rate == 0.01f && dad.eps == 1e-8f && dad.beta1 == 0.9f && dad.beta2 == 0.999f,
         "ADAM defaults");
  rel(&table);
  rel(&grad);
  rel(&m);
  rel(&u);
  rel(&narrow);
  rel(&half);
  rel(&shortm);
  clembed_ids_release(&ids);
  free_problem(&p);
}

TU_CASE(sgd) { kind_case(ctx, CLEMBED_SGD); }
TU_CASE(adagrad) { kind_case(ctx, CLEMBED_ADAGRAD); }
TU_CASE(rowwise_adagrad) { kind_case(ctx, CLEMBED_ROWWISE_ADAGRAD); }
TU_CASE(adam) { kind_case(ctx, CLEMBED_ADAM); }

/* The device's OpenCL context and queue, for the cases that make raw buffers. */
static void setup(clembed_context *ctx) {
  cl_queue = clembed_context_queue(ctx);
  EXPECT(clGetCommandQueueInfo(cl_queue, CL_QUEUE_CONTEXT, sizeof cl_ctx, &cl_ctx, NULL) == CL_SUCCESS,
         "the queue's OpenCL context");
}

int main(int argc, char **argv) {
  return tu_main(argc, argv, (tu_suite){.name = "test_optim", .device = 1, .setup = setup});
}
