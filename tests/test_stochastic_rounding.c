/* Stochastic rounding of the optimizer steps (clembed_optimizer's
 * stochastic_rounding, seed, step and first_row) against reference.h's
 * bit-level reference: ref_sr_word (Philox4x32-10 written plainly, the key and
 * counter words of include/clembed.h) and ref_sr_f16 / ref_sr_bf16 (the two
 * neighbours found by search, the fraction floor(2^32 (|x| - lo) / spacing)
 * in float64, hi when it and the word carry out of 32 bits).
 *
 * x, the float32 result a step writes back, is taken from the same step on an
 * F32 "twin" of the table (the same values, the same states): the step's
 * float32 operations do not depend on the table's dtype and an F32 table is
 * written back as it is (the option is ignored there). So every element of an
 * F16 or BF16 table is checked bit for bit on any device, whatever its sqrt and
 * division; the states must equal the twin's bit for bit; after each step the
 * twin takes the table's rounded values again. sgd_exact also checks x itself:
 * w - lr * g in float32 here.
 *
 * Cases (all by default, or name some; `small` shrinks them for Oclgrind and rusticl):
 *   optimizer_step  clembed_optimizer_step: SGD (with and without weight decay),
 *                   ADAGRAD, ROWWISE_ADAGRAD, ADAM on F16 and BF16 tables, widths
 *                   1, 3, 37, 64, 300 (vectors and tails), a row repeated 100
 *                   times (the column-split path), three steps (fresh bits each),
 *                   the bytes around the table untouched
 *   bag_step        the same through clembed_bag_optimizer_step (SUM and MEAN bags)
 *   bags_step       clembed_bags_optimizer_step: an F16 table (two features) and a
 *                   BF16 table, each with its own seed
 *   sgd_exact       SGD's x against w - lr * g in float32 here (distinct ids)
 *   edges           every path of the rounding: F16 and BF16 subnormals down to
 *                   2^-149, 65504 .. 2^16 and past it, the largest floats,
 *                   infinities, NaN, zeros of both signs, random bit patterns
 *   first_row       a table holding rows [k, k + rows) of a larger one, with
 *                   first_row k, gets the larger table's bits
 *   option_off      an F32 table is the same with and without the option; 0 rounds
 *                   F16 and BF16 to nearest even; seeds and steps change the bits
 *   shapes          the CPU and GPU kernel shapes give the same bits
 *   split           a table and states split over buffers give the bits of one buffer
 *   unbiased        10^6 roundings (small: 2 * 10^4) of one value between two BF16
 *                   values, two F16 values and two subnormal F16 values: the mean is
 *                   within 5 standard errors of x, round to nearest's is not
 *   errors          stochastic_rounding other than 0 and 1, first_row + rows past
 *                   2^64: CLEMBED_ERR_INVALID_ARGUMENT naming the field; a caller's
 *                   struct that ends before the new fields gets their defaults */
#include "test_util.h"

#include <float.h>
#include <stddef.h>

static cl_context cl_ctx;
static cl_command_queue cl_queue;

static const char *KN[4] = {"SGD", "ADAGRAD", "ROWWISE_ADAGRAD", "ADAM"};
static const char *DN[3] = {"F32", "F16", "BF16"};

/* ------------------------------------------------------------ helpers */

static uint64_t rng = 0x9E3779B97F4A7C15ULL;

static float rnd(float lo, float hi) { return lo + (hi - lo) * (0.5f + 0.5f * tu_rand(&rng)); }

static clembed_matrix mk(clembed_context *ctx, size_t rows, size_t cols, clembed_dtype dt, const float *host) {
  clembed_matrix m = {0};
  OK(ctx, clembed_matrix_create(ctx, rows, cols, dt, &m));
  if (rows && cols && host) OK(ctx, clembed_matrix_write(ctx, &m, host, CLEMBED_F32));
  return m;
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

static uint16_t *read_bits(clembed_context *ctx, const clembed_matrix *m) {
  uint16_t *h = malloc((m->rows * m->cols + 1) * 2);
  OK(ctx, clembed_matrix_read(ctx, m, h, m->dtype));
  return h;
}

static float bits_value(uint16_t b, clembed_dtype dt) {
  return dt == CLEMBED_F16 ? ref_f16_to_f32(b) : ref_bf16_to_f32(b);
}

static uint16_t sr_ref(float x, clembed_dtype dt, uint64_t seed, uint64_t step, uint64_t row, uint64_t col) {
  uint32_t r = ref_sr_word(seed, step, row, col);
  return dt == CLEMBED_F16 ? ref_sr_f16(x, r) : ref_sr_bf16(x, r);
}

static uint16_t rne_bits(float x, clembed_dtype dt) { return dt == CLEMBED_F16 ? ref_f32_to_f16(x) : ref_f32_to_bf16(x); }

/* ------------------------------------------------------------ problems */

/* One table's steps: tokens (optimizer_step) or bags (bag_step). */
typedef struct problem {
  clembed_optimizer_kind kind;
  clembed_dtype dt;
  size_t V, d, n;     /* table rows and cols; ids */
  size_t bags;        /* bags: grad has bags rows (0: a token step, n rows) */
  clembed_bag_mode mode;
  int64_t *ids, *offsets;
  float *grad, *table, *s1, *s2;
  float lr, wd;
  uint64_t seed, first_row;
} problem;

static void free_problem(problem *p) {
  free(p->ids);
  free(p->offsets);
  free(p->grad);
  free(p->table);
  free(p->s1);
  free(p->s2);
}

/* V rows of width d, values representable in dt; n ids (a fifth of them row 3,
 * `hot` more of it); bags > 0: the ids in that many bags of 0 .. 6 ids. */
static problem mk_problem(clembed_optimizer_kind kind, clembed_dtype dt, size_t V, size_t d, size_t n, size_t hot,
                          size_t bags) {
  problem p;
  memset(&p, 0, sizeof p);
  p.kind = kind;
  p.dt = dt;
  p.V = V;
  p.d = d;
  p.n = n + hot;
  p.bags = bags;
  p.mode = CLEMBED_BAG_SUM;
  p.ids = malloc((p.n + 1) * sizeof *p.ids);
  for (size_t i = 0; i < p.n; i++)
    p.ids[i] = (int64_t)((i % 5 == 0 || i >= n) ? 3 % V : (size_t)(rnd(0.0f, 1.0f) * (float)V) % V);
  if (bags) {
    p.offsets = malloc((bags + 1) * sizeof *p.offsets);
    p.offsets[0] = 0;
    for (size_t b = 1; b < bags; b++) {
      int64_t k = p.offsets[b - 1] + (int64_t)(rnd(0.0f, 6.99f));
      p.offsets[b] = k > (int64_t)p.n ? (int64_t)p.n : k;
    }
    p.offsets[bags] = (int64_t)p.n;
  }
  size_t grows = bags ? bags : p.n;
  p.grad = malloc((grows * d + 1) * sizeof *p.grad);
  for (size_t i = 0; i < grows * d; i++) p.grad[i] = rnd(-1.0f, 1.0f);
  p.table = malloc((V * d + 1) * sizeof *p.table);
  for (size_t i = 0; i < V * d; i++) p.table[i] = ref_round(rnd(-2.0f, 2.0f), dt);
  p.s1 = malloc((V * d + 1) * sizeof *p.s1);
  p.s2 = malloc((V * d + 1) * sizeof *p.s2);
  for (size_t i = 0; i < V * d; i++) {
    p.s1[i] = rnd(kind == CLEMBED_ADAM ? -0.5f : 0.0f, 0.5f);
    p.s2[i] = rnd(0.0f, 0.25f);
  }
  p.lr = kind == CLEMBED_SGD ? 0.1f : 0.05f;
  p.seed = 0x5EEDull * 7919u + (uint64_t)kind * 131u + (uint64_t)dt;
  return p;
}

/* A table with its states, on the device. */
typedef struct dev_table {
  clembed_matrix t, s1, s2;
} dev_table;

static dev_table dev_make(clembed_context *ctx, const problem *p, clembed_dtype dt, const float *values,
                          const float *s1, const float *s2, int gapped) {
  dev_table D;
  memset(&D, 0, sizeof D);
  if (gapped) D.t = tu_gapped_matrix(cl_ctx, p->V, p->d, dt, p->d % 3 + 1, 5, values);
  else D.t = mk(ctx, p->V, p->d, dt, values);
  if (p->kind != CLEMBED_SGD) D.s1 = mk(ctx, p->V, p->kind == CLEMBED_ROWWISE_ADAGRAD ? 1 : p->d, CLEMBED_F32, s1);
  if (p->kind == CLEMBED_ADAM) D.s2 = mk(ctx, p->V, p->d, CLEMBED_F32, s2);
  return D;
}

static void dev_free(dev_table *D) {
  clembed_matrix_release(&D->t);
  clembed_matrix_release(&D->s1);
  clembed_matrix_release(&D->s2);
}

static clembed_optimizer optimizer_of(const problem *p, dev_table *D, uint64_t step, int sr) {
  clembed_optimizer o = clembed_optimizer_defaults(p->kind);
  o.learning_rate = p->lr;
  o.weight_decay = p->wd;
  o.step = step;
  o.state = D->s1.buffer ? &D->s1 : NULL;
  o.state2 = D->s2.buffer ? &D->s2 : NULL;
  o.stochastic_rounding = sr;
  o.seed = p->seed;
  o.first_row = p->first_row;
  return o;
}

/* The step's inputs on the device. */
typedef struct dev_batch {
  clembed_matrix grad;
  clembed_ids ids, offsets;
} dev_batch;

static dev_batch batch_make(clembed_context *ctx, const problem *p) {
  dev_batch B;
  memset(&B, 0, sizeof B);
  B.grad = mk(ctx, p->bags ? p->bags : p->n, p->d, CLEMBED_F32, p->grad);
  B.ids = mk_ids(ctx, p->ids, p->n, p->n % 2 ? CLEMBED_I64 : CLEMBED_I32);
  if (p->bags) B.offsets = mk_ids(ctx, p->offsets, p->bags + 1, CLEMBED_I64);
  return B;
}

static void batch_free(dev_batch *B) {
  clembed_matrix_release(&B->grad);
  clembed_ids_release(&B->ids);
  clembed_ids_release(&B->offsets);
}

/* One step of D with p's batch (a token step or a bag step). */
static void run_step(clembed_context *ctx, const problem *p, dev_batch *B, dev_table *D, uint64_t step, int sr) {
  clembed_optimizer o = optimizer_of(p, D, step, sr);
  if (p->bags) {
    clembed_bag_options bo = clembed_bag_defaults();
    bo.mode = p->mode;
    OK(ctx, clembed_bag_optimizer_step(ctx, &B->grad, &B->ids, &B->offsets, &bo, &o, &D->t, 0, NULL, NULL));
  } else {
    OK(ctx, clembed_optimizer_step(ctx, &B->grad, &B->ids, NULL, &o, &D->t, 0, NULL, NULL));
  }
}

static int same_f32(clembed_context *ctx, const clembed_matrix *a, const clembed_matrix *b) {
  if (!a->buffer) return 1;
  float *x = tu_read_f32(ctx, a), *y = tu_read_f32(ctx, b);
  int same = memcmp(x, y, a->rows * a->cols * 4) == 0;
  free(x);
  free(y);
  return same;
}

static size_t g_other_way; /* elements that stochastic rounding took to the neighbour nearest-even did not */

/* `steps` steps of p's table with stochastic rounding against its F32 twin and
 * the reference, every element of every step. */
static void check_twin(clembed_context *ctx, problem *p, int steps, const char *label) {
  size_t V = p->V, d = p->d;
  float *cur = malloc((V * d + 1) * sizeof *cur);
  memcpy(cur, p->table, V * d * sizeof *cur);
  dev_table R = dev_make(ctx, p, p->dt, cur, p->s1, p->s2, 1), T = dev_make(ctx, p, CLEMBED_F32, cur, p->s1, p->s2, 0);
  dev_batch B = batch_make(ctx, p);
  size_t bad = 0;
  for (int k = 0; k < steps; k++) {
    uint64_t step = (uint64_t)k + 1;
    run_step(ctx, p, &B, &R, step, 1);
    run_step(ctx, p, &B, &T, step, 1);
    uint16_t *got = read_bits(ctx, &R.t);
    float *x = tu_read_f32(ctx, &T.t);
    for (size_t e = 0; e < V * d; e++) {
      size_t v = e / d, c = e % d;
      uint16_t want = sr_ref(x[e], p->dt, p->seed, step, p->first_row + v, c);
      /* a NaN's sign is not x's to keep: the F16/BF16 program and the twin's F32
       * one may give the same NaN operation either sign (IEEE 754 leaves it open) */
      uint16_t mask = isnan(x[e]) ? 0x7FFF : 0xFFFF;
      if ((got[e] & mask) != (want & mask)) {
        if (bad < 5)
          fprintf(stderr, "%s, step %d: [%zu][%zu] = 0x%04x, reference 0x%04x (x = %.9g)\n", label, k + 1, v, c,
                  got[e], want, x[e]);
        bad++;
      }
      g_other_way += got[e] != rne_bits(x[e], p->dt);
      cur[e] = bits_value(got[e], p->dt);
    }
    EXPECT(same_f32(ctx, &R.s1, &T.s1) && same_f32(ctx, &R.s2, &T.s2), "%s, step %d: the states differ from the twin's",
           label, k + 1);
    free(got);
    free(x);
    clembed_matrix_release(&T.t); /* the twin takes the rounded values again */
    T.t = mk(ctx, V, d, CLEMBED_F32, cur);
  }
  EXPECT(bad == 0, "%s: %zu elements off", label, bad);
  tu_check_gaps(cl_queue, &R.t, "table");
  if (R.t.buffer) clReleaseMemObject(R.t.buffer); /* (made by tu_gapped_matrix) */
  R.t.buffer = NULL;
  dev_free(&R);
  dev_free(&T);
  batch_free(&B);
  free(cur);
}

static void kinds_case(clembed_context *ctx, size_t bags) {
  const size_t widths[5] = {1, 3, 37, 64, 300};
  g_other_way = 0;
  for (int k = 0; k < 4; k++)
    for (int t = CLEMBED_F16; t <= CLEMBED_BF16; t++)
      for (int wi = 0; wi < 5; wi++) {
        if (tu_small && (wi == 1 || wi == 4)) continue;
        for (int variant = 0; variant < 2; variant++) {
          size_t V = tu_small ? 23 : 97, n = tu_small ? 40 : 300, hot = variant == 1 ? 100 : 0;
          problem p = mk_problem((clembed_optimizer_kind)k, (clembed_dtype)t, V, widths[wi], n, hot,
                                 bags ? (tu_small ? 12 : 80) : 0);
          if (variant == 1) {
            p.wd = 0.01f;
            p.mode = CLEMBED_BAG_MEAN;
            p.first_row = 1000003;
          }
          char label[128];
          snprintf(label, sizeof label, "%s %s %s d %zu variant %d", bags ? "bag" : "token", KN[k], DN[t],
                   widths[wi], variant);
          check_twin(ctx, &p, 3, label);
          free_problem(&p);
        }
      }
  EXPECT(g_other_way > 0, "stochastic rounding never took the other neighbour than nearest even");
}

TU_CASE(optimizer_step) { kinds_case(ctx, 0); }
TU_CASE(bag_step) { kinds_case(ctx, 1); }

/* clembed_bags_optimizer_step: features 0 and 2 on an F16 table A, feature 1 on a
 * BF16 table B; o[0] = o[2] (A's: its seed, its states), o[1] B's. */
TU_CASE(bags_step) {
  for (int k = 0; k < 4; k++) {
    size_t bags = tu_small ? 10 : 60;
    problem a = mk_problem((clembed_optimizer_kind)k, CLEMBED_F16, 31, 37, bags * 3, 0, bags);
    problem b = mk_problem((clembed_optimizer_kind)k, CLEMBED_BF16, 17, 20, bags * 3, 0, bags);
    problem a2 = mk_problem((clembed_optimizer_kind)k, CLEMBED_F16, 31, 37, bags * 2, 10, bags); /* ids, offsets */
    a.seed = 101;
    b.seed = 202;
    b.first_row = 5;
    size_t C = a.d + b.d + a.d;
    float *g = malloc(bags * C * sizeof *g);
    for (size_t i = 0; i < bags * C; i++) g[i] = rnd(-1.0f, 1.0f);
    float *ca = malloc(a.V * a.d * sizeof *ca), *cb = malloc(b.V * b.d * sizeof *cb);
    memcpy(ca, a.table, a.V * a.d * sizeof *ca);
    memcpy(cb, b.table, b.V * b.d * sizeof *cb);
    dev_table RA = dev_make(ctx, &a, CLEMBED_F16, ca, a.s1, a.s2, 0), TA = dev_make(ctx, &a, CLEMBED_F32, ca, a.s1, a.s2, 0);
    dev_table RB = dev_make(ctx, &b, CLEMBED_BF16, cb, b.s1, b.s2, 0), TB = dev_make(ctx, &b, CLEMBED_F32, cb, b.s1, b.s2, 0);
    dev_batch BA = batch_make(ctx, &a), BB = batch_make(ctx, &b), BA2 = batch_make(ctx, &a2);
    clembed_matrix grad = mk(ctx, bags, C, CLEMBED_F32, g);
    size_t bad = 0;
    for (uint64_t step = 1; step <= 2; step++) {
      for (int twin = 0; twin < 2; twin++) {
        dev_table *A = twin ? &TA : &RA, *Bt = twin ? &TB : &RB;
        clembed_bag_feature f[3];
        dev_batch *bt[3] = {&BA, &BB, &BA2};
        for (int i = 0; i < 3; i++) {
          f[i] = clembed_bag_feature_defaults();
          f[i].table = i == 1 ? &Bt->t : &A->t;
          f[i].ids = &bt[i]->ids;
          f[i].offsets = &bt[i]->offsets;
          f[i].options.mode = i == 2 ? CLEMBED_BAG_MEAN : CLEMBED_BAG_SUM;
        }
        clembed_optimizer o[3] = {optimizer_of(&a, A, step, 1), optimizer_of(&b, Bt, step, 1),
                                  optimizer_of(&a, A, step, 1)};
        OK(ctx, clembed_bags_optimizer_step(ctx, f, 3, &grad, o, 0, NULL, NULL));
      }
      for (int which = 0; which < 2; which++) {
        problem *p = which ? &b : &a;
        dev_table *R = which ? &RB : &RA, *T = which ? &TB : &TA;
        float *cur = which ? cb : ca;
        uint16_t *got = read_bits(ctx, &R->t);
        float *x = tu_read_f32(ctx, &T->t);
        for (size_t e = 0; e < p->V * p->d; e++) {
          uint16_t want = sr_ref(x[e], p->dt, p->seed, step, p->first_row + e / p->d, e % p->d);
          if (got[e] != want && bad++ < 5)
            fprintf(stderr, "bags %s table %d step %d: [%zu] = 0x%04x, reference 0x%04x\n", KN[k], which, (int)step, e,
                    got[e], want);
          cur[e] = bits_value(got[e], p->dt);
        }
        EXPECT(same_f32(ctx, &R->s1, &T->s1) && same_f32(ctx, &R->s2, &T->s2), "bags %s: states differ", KN[k]);
        clembed_matrix_release(&T->t);
        T->t = mk(ctx, p->V, p->d, CLEMBED_F32, cur);
        free(got);
        free(x);
      }
    }
    EXPECT(bad == 0, "bags %s: %zu elements off", KN[k], bad);
    dev_free(&RA);
    dev_free(&TA);
    dev_free(&RB);
    dev_free(&TB);
    batch_free(&BA);
    batch_free(&BB);
    batch_free(&BA2);
    clembed_matrix_release(&grad);
    free(g);
    free(ca);
    free(cb);
    free_problem(&a);
    free_problem(&b);
    free_problem(&a2);
  }
}

/* SGD with distinct ids: x = w - lr * g (the row's gradient is its one token's
 * row), in float32 here (no contraction: see tests/CMakeLists.txt). */
TU_CASE(sgd_exact) {
  for (int t = CLEMBED_F16; t <= CLEMBED_BF16; t++) {
    size_t V = 64, d = tu_small ? 37 : 129;
    problem p = mk_problem(CLEMBED_SGD, (clembed_dtype)t, V, d, V, 0, 0);
    for (size_t i = 0; i < V; i++) p.ids[i] = (int64_t)((i * 37) % V); /* a permutation */
    p.lr = 0.37f;
    dev_table R = dev_make(ctx, &p, p.dt, p.table, NULL, NULL, 0);
    dev_batch B = batch_make(ctx, &p);
    run_step(ctx, &p, &B, &R, 9, 1);
    uint16_t *got = read_bits(ctx, &R.t);
    size_t bad = 0, other = 0;
    for (size_t i = 0; i < V; i++)
      for (size_t c = 0; c < d; c++) {
        size_t v = (size_t)p.ids[i], e = v * d + c;
        float step = p.lr * p.grad[i * d + c], x = p.table[e] - step;
        uint16_t want = sr_ref(x, p.dt, p.seed, 9, v, c);
        bad += got[e] != want;
        other += want != rne_bits(x, p.dt);
      }
    EXPECT(bad == 0, "SGD %s: %zu elements are not the stochastic rounding of w - lr * g", DN[t], bad);
    EXPECT(other > 0, "SGD %s: no element rounded the other way", DN[t]);
    free(got);
    dev_free(&R);
    batch_free(&B);
    free_problem(&p);
  }
}

/* The rounding's paths: a row per value v (both signs), x = -0 - lr * (-v) with lr
 * 1, so x is v (and -0 and +0 both occur); 37 columns, so each value meets 37
 * random words. The twin gives x as the device computed it. */
TU_CASE(edges) {
  const float special[] = {0.0f,
                           0x1p-149f,
                           0x1.fffffcp-127f,
                           0x1p-126f,
                           0x1.8p-100f,
                           0x1.234p-40f,
                           0x1.fffp-34f,
                           0x1.001p-33f,
                           0x1.5p-30f,
                           0x1.7p-25f,
                           0x1.8p-24f,
                           0x1.ffep-15f,
                           0x1.fffffep-15f,
                           0x1p-14f,
                           0x1.0018p-14f,
                           0.1f,
                           1.0f / 3.0f,
                           1.0f,
                           1.00048828125f,
                           2047.5f,
                           65503.0f,
                           65504.0f,
                           65505.0f,
                           65519.0f,
                           65520.0f,
                           65535.99f,
                           65536.0f,
                           70000.0f,
                           1e10f,
                           0x1.fep127f,
                           0x1.fe01p127f,
                           0x1.ffp127f,
                           FLT_MAX,
                           INFINITY,
                           NAN};
  size_t ns = sizeof special / sizeof special[0], nr = 40, V = 2 * ns + nr, d = 37;
  float *vals = malloc(V * sizeof *vals);
  for (size_t i = 0; i < ns; i++) {
    vals[2 * i] = special[i];
    vals[2 * i + 1] = -special[i];
  }
  for (size_t i = 0; i < nr; i++) { /* finite random patterns over every exponent */
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    uint32_t u = (uint32_t)(rng >> 32);
    if (((u >> 23) & 0xFF) == 0xFF) u &= 0xBFFFFFFFu;
    memcpy(&vals[2 * ns + i], &u, 4);
  }
  for (int t = CLEMBED_F16; t <= CLEMBED_BF16; t++) {
    problem p = mk_problem(CLEMBED_SGD, (clembed_dtype)t, V, d, V, 0, 0);
    for (size_t i = 0; i < V; i++) {
      p.ids[i] = (int64_t)i;
      for (size_t c = 0; c < d; c++) {
        p.grad[i * d + c] = -vals[i];
        p.table[i * d + c] = -0.0f;
      }
    }
    p.lr = 1.0f;
    p.seed = 77 + (uint64_t)t;
    g_other_way = 0;
    check_twin(ctx, &p, 2, t == CLEMBED_F16 ? "edges F16" : "edges BF16");
    EXPECT(g_other_way > 0, "edges %s: no element rounded the other way", DN[t]);
    free_problem(&p);
  }
  free(vals);
}

/* Rows [k, k + V) of a table of k + V + 3 rows, stepped alone with first_row k,
 * hold the bits the whole table's step gives them. */
TU_CASE(first_row) {
  for (int kind = 0; kind < 4; kind++) {
    size_t k = 11, V = 20, d = 37, W = k + V + 3;
    problem whole = mk_problem((clembed_optimizer_kind)kind, CLEMBED_BF16, W, d, 60, 10, 0);
    for (size_t i = 0; i < whole.n; i++) whole.ids[i] = (int64_t)(k + (size_t)whole.ids[i] % V);
    problem part = whole; /* the same arrays, rows k .. */
    part.V = V;
    part.table = whole.table + k * d;
    part.s1 = whole.s1 + k * (kind == CLEMBED_ROWWISE_ADAGRAD ? 1 : d);
    part.s2 = whole.s2 + k * d;
    part.first_row = k;
    int64_t *local = malloc(whole.n * sizeof *local);
    for (size_t i = 0; i < whole.n; i++) local[i] = whole.ids[i] - (int64_t)k;
    part.ids = local;
    dev_table DW = dev_make(ctx, &whole, whole.dt, whole.table, whole.s1, whole.s2, 0);
    dev_table DP = dev_make(ctx, &part, part.dt, part.table, part.s1, part.s2, 0);
    dev_batch BW = batch_make(ctx, &whole), BP = batch_make(ctx, &part);
    for (uint64_t s = 1; s <= 2; s++) {
      run_step(ctx, &whole, &BW, &DW, s, 1);
      run_step(ctx, &part, &BP, &DP, s, 1);
    }
    uint16_t *w = read_bits(ctx, &DW.t), *q = read_bits(ctx, &DP.t);
    EXPECT(memcmp(w + k * d, q, V * d * 2) == 0, "%s: the rows stepped with first_row %zu differ from the whole table's",
           KN[kind], k);
    free(w);
    free(q);
    dev_free(&DW);
    dev_free(&DP);
    batch_free(&BW);
    batch_free(&BP);
    free(local);
    free_problem(&whole);
  }
}

/* The option off (0): nearest even, as before; an F32 table ignores it; another
 * seed or step gives other bits. */
TU_CASE(option_off) {
  for (int kind = 0; kind < 4; kind++)
    for (int t = 0; t < 3; t++) {
      problem p = mk_problem((clembed_optimizer_kind)kind, (clembed_dtype)t, 41, 37, 80, 20, 0);
      p.wd = 0.001f;
      dev_table A = dev_make(ctx, &p, p.dt, p.table, p.s1, p.s2, 0), Bt = dev_make(ctx, &p, p.dt, p.table, p.s1, p.s2, 0);
      dev_table T = dev_make(ctx, &p, CLEMBED_F32, p.table, p.s1, p.s2, 0);
      dev_batch B = batch_make(ctx, &p);
      run_step(ctx, &p, &B, &A, 4, 0);
      run_step(ctx, &p, &B, &Bt, 4, 1);
      run_step(ctx, &p, &B, &T, 4, 0);
      float *x = tu_read_f32(ctx, &T.t);
      if (t == CLEMBED_F32) {
        EXPECT(same_f32(ctx, &A.t, &Bt.t), "%s F32: stochastic_rounding changed an F32 table", KN[kind]);
        EXPECT(same_f32(ctx, &A.t, &T.t), "%s F32: two runs differ", KN[kind]);
      } else {
        uint16_t *off = read_bits(ctx, &A.t), *on = read_bits(ctx, &Bt.t);
        size_t bad = 0, differ = 0;
        for (size_t e = 0; e < p.V * p.d; e++) {
          bad += off[e] != rne_bits(x[e], p.dt);
          differ += off[e] != on[e];
        }
        EXPECT(bad == 0, "%s %s: %zu elements with stochastic_rounding 0 are not x to nearest even", KN[kind], DN[t],
               bad);
        EXPECT(differ > 0, "%s %s: stochastic rounding gave the nearest-even bits everywhere", KN[kind], DN[t]);
        /* another seed, another step: other bits (the same: the same bits) */
        dev_table C = dev_make(ctx, &p, p.dt, p.table, p.s1, p.s2, 0), D = dev_make(ctx, &p, p.dt, p.table, p.s1, p.s2, 0);
        dev_table E = dev_make(ctx, &p, p.dt, p.table, p.s1, p.s2, 0);
        run_step(ctx, &p, &B, &C, 5, 1);
        p.seed += 1;
        run_step(ctx, &p, &B, &D, 4, 1);
        p.seed -= 1;
        run_step(ctx, &p, &B, &E, 4, 1);
        uint16_t *c = read_bits(ctx, &C.t), *dd = read_bits(ctx, &D.t), *ee = read_bits(ctx, &E.t);
        EXPECT(memcmp(c, on, p.V * p.d * 2) != 0, "%s %s: steps 4 and 5 drew the same bits", KN[kind], DN[t]);
        EXPECT(memcmp(dd, on, p.V * p.d * 2) != 0, "%s %s: two seeds drew the same bits", KN[kind], DN[t]);
        EXPECT(memcmp(ee, on, p.V * p.d * 2) == 0, "%s %s: the same seed and step drew other bits", KN[kind], DN[t]);
        free(c);
        free(dd);
        free(ee);
        dev_free(&C);
        dev_free(&D);
        dev_free(&E);
        free(off);
        free(on);
      }
      free(x);
      dev_free(&A);
      dev_free(&Bt);
      dev_free(&T);
      batch_free(&B);
      free_problem(&p);
    }
}

/* The table's bits after three steps on ctx (a token or a bag step). */
static uint16_t *run_bits(clembed_context *ctx, const problem *p) {
  dev_table D = dev_make(ctx, p, p->dt, p->table, p->s1, p->s2, 0);
  dev_batch B = batch_make(ctx, p);
  for (uint64_t s = 1; s <= 3; s++) run_step(ctx, p, &B, &D, s, 1);
  uint16_t *h = read_bits(ctx, &D.t);
  dev_free(&D);
  batch_free(&B);
  return h;
}

TU_CASE(shapes) {
  clembed_context *cpu = NULL, *gpu = NULL;
  if (!tu_shaped_pair(&cpu, &gpu)) {
    tu_skip("the CPU and GPU kernel shapes cannot both be had here");
    return;
  }
  for (int kind = 0; kind < 4; kind++)
    for (int t = CLEMBED_F16; t <= CLEMBED_BF16; t++)
      for (int bag = 0; bag < 2; bag++) {
        problem p = mk_problem((clembed_optimizer_kind)kind, (clembed_dtype)t, 300, tu_small ? 70 : 200,
                               tu_small ? 300 : 3000, 500, bag ? (tu_small ? 100 : 800) : 0);
        p.wd = 0.001f;
        uint16_t *a = run_bits(cpu, &p), *b = run_bits(gpu, &p), *c = run_bits(ctx, &p);
        EXPECT(memcmp(a, b, p.V * p.d * 2) == 0 && memcmp(a, c, p.V * p.d * 2) == 0,
               "%s %s %s: the kernel shapes give different bits", bag ? "bag" : "token", KN[kind], DN[t]);
        free(a);
        free(b);
        free(c);
        free_problem(&p);
      }
  clembed_context_destroy(cpu);
  clembed_context_destroy(gpu);
}

/* A table (and its states) split over several buffers (CLEMBED_MAX_BUFFER_BYTES):
 * each row's bits are those of the table in one buffer. */
TU_CASE(split) {
  setenv("CLEMBED_MAX_BUFFER_BYTES", "896", 1);
  clembed_context *lim = NULL;
  clembed_status s = clembed_context_create(NULL, &lim);
  unsetenv("CLEMBED_MAX_BUFFER_BYTES");
  EXPECT(s == CLEMBED_OK, "a context with CLEMBED_MAX_BUFFER_BYTES=896: %s", clembed_status_string(s));
  if (s != CLEMBED_OK) return;
  for (int kind = 0; kind < 4; kind++)
    for (int bag = 0; bag < 2; bag++) {
      problem p = mk_problem((clembed_optimizer_kind)kind, bag ? CLEMBED_F16 : CLEMBED_BF16, 97, 37,
                             tu_small ? 100 : 400, 50, bag ? 40 : 0);
      p.wd = 0.001f;
      p.first_row = 77;
      clembed_matrix probe = mk(lim, p.V, p.d, p.dt, NULL);
      size_t pieces = 0;
      OK(lim, clembed_matrix_pieces(lim, &probe, 0, NULL, NULL, &pieces));
      EXPECT(pieces > 1, "the table is in %zu piece(s)", pieces);
      clembed_matrix_release(&probe);
      uint16_t *a = run_bits(ctx, &p), *b = run_bits(lim, &p);
      EXPECT(memcmp(a, b, p.V * p.d * 2) == 0, "%s %s: a split table's bits differ", bag ? "bag" : "token", KN[kind]);
      free(a);
      free(b);
      free_problem(&p);
    }
  clembed_context_destroy(lim);
}

/* N elements that all step from w to the same x between two values of dt: the
 * mean of the stochastically rounded results is within 5 standard errors of x
 * (each is hi with probability p = (x - lo) / (hi - lo): the standard error is
 * (hi - lo) sqrt(p (1 - p) / N)); the mean of the nearest-even results is off by
 * more than 20 of them. */
static void unbiased_one(clembed_context *ctx, clembed_dtype dt, float w, float lr, float g, const char *what) {
  size_t rows = tu_small ? 100 : 1000, cols = tu_small ? 200 : 1000, N = rows * cols;
  float *host = malloc(N * sizeof *host), *gh = malloc(N * sizeof *gh);
  int64_t *ids = malloc(rows * sizeof *ids);
  for (size_t e = 0; e < N; e++) {
    host[e] = w;
    gh[e] = g;
  }
  for (size_t r = 0; r < rows; r++) ids[r] = (int64_t)r;
  clembed_matrix grad = mk(ctx, rows, cols, CLEMBED_F32, gh), x32 = mk(ctx, rows, cols, CLEMBED_F32, host);
  clembed_ids id = mk_ids(ctx, ids, rows, CLEMBED_I32);
  double mean[2] = {0, 0}, x = 0.0;
  for (int sr = 0; sr < 2; sr++) {
    clembed_matrix t = mk(ctx, rows, cols, dt, host);
    clembed_optimizer o = clembed_optimizer_defaults(CLEMBED_SGD);
    o.learning_rate = lr;
    o.stochastic_rounding = sr;
    o.seed = 12345;
    o.step = 1;
    OK(ctx, clembed_optimizer_step(ctx, &grad, &id, NULL, &o, &t, 0, NULL, NULL));
    if (sr == 0) OK(ctx, clembed_optimizer_step(ctx, &grad, &id, NULL, &o, &x32, 0, NULL, NULL));
    float *v = tu_read_f32(ctx, &t);
    double s = 0.0;
    for (size_t e = 0; e < N; e++) s += (double)v[e];
    mean[sr] = s / (double)N;
    free(v);
    clembed_matrix_release(&t);
  }
  float *xs = tu_read_f32(ctx, &x32);
  x = (double)xs[0];
  float step = lr * g, xh = w - step;
  EXPECT(xs[0] == xh && xs[N - 1] == xh, "%s: x is %.9g on the device, %.9g here", what, xs[0], (double)xh);
  /* the neighbours of |x| in dt: lo <= |x| < hi */
  uint16_t lb = rne_bits((float)fabs(x), dt);
  if ((double)bits_value(lb, dt) > fabs(x)) lb--;
  double vlo = (double)bits_value(lb, dt), vhi = (double)bits_value((uint16_t)(lb + 1), dt);
  double p = (fabs(x) - vlo) / (vhi - vlo), se = (vhi - vlo) * sqrt(p * (1.0 - p) / (double)N);
  printf("%s: |x| %.9g between %.9g and %.9g (p %.4f), N %zu: the stochastic mean is off by %.3g (%.2f standard "
         "errors), nearest even's by %.3g (%.1f)\n",
         what, fabs(x), vlo, vhi, p, N, mean[1] - x, (mean[1] - x) / se, mean[0] - x, (mean[0] - x) / se);
  EXPECT(p > 0.05 && p < 0.95, "%s: x is not well between two values (p %g)", what, p);
  EXPECT(fabs(mean[1] - x) <= 5.0 * se, "%s: the stochastically rounded mean %.12g is %.2f standard errors from x %.12g",
         what, mean[1], fabs(mean[1] - x) / se, x);
  EXPECT(fabs(mean[0] - x) >= 20.0 * se, "%s: nearest even's mean %.12g is within %.2f standard errors of x",
         what, mean[0], fabs(mean[0] - x) / se);
  free(xs);
  free(host);
  free(gh);
  free(ids);
  clembed_matrix_release(&grad);
  clembed_matrix_release(&x32);
  clembed_ids_release(&id);
}

TU_CASE(unbiased) {
  unbiased_one(ctx, CLEMBED_BF16, 1.0f, 0.001f, 1.0f, "BF16 1 - 0.001");
  unbiased_one(ctx, CLEMBED_F16, 1.0f, 0.0001f, 1.0f, "F16 1 - 0.0001");
  unbiased_one(ctx, CLEMBED_F16, 0.0f, 1.0f, 1.234e-6f, "F16 subnormal -1.234e-6");
  unbiased_one(ctx, CLEMBED_BF16, -3.0f, 0.3f, 0.01f, "BF16 -3 - 0.003");
}

TU_CASE(errors) {
  problem p = mk_problem(CLEMBED_ADAM, CLEMBED_BF16, 10, 8, 6, 0, 0);
  dev_table D = dev_make(ctx, &p, p.dt, p.table, p.s1, p.s2, 0);
  dev_batch B = batch_make(ctx, &p);
  clembed_optimizer o = optimizer_of(&p, &D, 1, 1);
  OK(ctx, clembed_optimizer_step(ctx, &B.grad, &B.ids, NULL, &o, &D.t, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
  clembed_matrix grad_bag = mk(ctx, 2, 8, CLEMBED_F32, p.grad);
  int64_t offs[3] = {0, 2, 6};
  clembed_ids offsets = mk_ids(ctx, offs, 3, CLEMBED_I64);
#define REFUSED(ARG, ...)                                                                                           \
  do {                                                                                                             \
    clembed_optimizer e_ = o;                                                                                      \
    __VA_ARGS__;                                                                                                   \
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_optimizer_step(ctx, &B.grad, &B.ids, NULL, &e_, &D.t, 0, NULL, NULL)); \
    clembed_error_detail det_;                                                                                     \
    clembed_context_error(ctx, &det_);                                                                             \
    EXPECT(det_.argument && !strcmp(det_.argument, ARG) && strstr(clembed_context_message(ctx), ARG),             \
           "clembed_optimizer_step: argument %s, message '%s'; expected %s", det_.argument,                       \
           clembed_context_message(ctx), ARG);                                                                     \
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT,                                                                       \
          clembed_bag_optimizer_step(ctx, &grad_bag, &B.ids, &offsets, NULL, &e_, &D.t, 0, NULL, NULL));            \
    EXPECT(strstr(clembed_context_message(ctx), ARG) != NULL, "clembed_bag_optimizer_step: message '%s'; expected %s", \
           clembed_context_message(ctx), ARG);                                                                     \
  } while (0)
  REFUSED("stochastic_rounding", e_.stochastic_rounding = 2);
  REFUSED("stochastic_rounding", e_.stochastic_rounding = -1);
  REFUSED("first_row", e_.first_row = UINT64_MAX - 5);
  /* an F32 table refuses a bad value too (the option is checked whatever the dtype) */
  REFUSED("stochastic_rounding", e_.kind = CLEMBED_SGD; e_.stochastic_rounding = 3);
  /* first_row + rows == 2^64 exactly is fine */
  clembed_optimizer edge = o;
  edge.first_row = UINT64_MAX - (uint64_t)p.V + 1;
  edge.step = 2;
  OK(ctx, clembed_optimizer_step(ctx, &B.grad, &B.ids, NULL, &edge, &D.t, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
  /* a caller's struct that ends at state2 (an earlier version's): the new fields
   * take their defaults, whatever lies past struct_size */
  dev_table E = dev_make(ctx, &p, p.dt, p.table, p.s1, p.s2, 0), F = dev_make(ctx, &p, p.dt, p.table, p.s1, p.s2, 0);
  clembed_optimizer old = optimizer_of(&p, &E, 1, 0), now = optimizer_of(&p, &F, 1, 0);
  old.struct_size = offsetof(clembed_optimizer, state2) + sizeof(clembed_matrix *);
  old.stochastic_rounding = 7; /* not read */
  old.seed = 99;
  OK(ctx, clembed_optimizer_step(ctx, &B.grad, &B.ids, NULL, &old, &E.t, 0, NULL, NULL));
  OK(ctx, clembed_optimizer_step(ctx, &B.grad, &B.ids, NULL, &now, &F.t, 0, NULL, NULL));
  uint16_t *a = read_bits(ctx, &E.t), *b = read_bits(ctx, &F.t);
  EXPECT(memcmp(a, b, p.V * p.d * 2) == 0, "an earlier version's optimizer does not round to nearest even");
  EXPECT(clembed_struct_size(CLEMBED_STRUCT_OPTIMIZER) == sizeof(clembed_optimizer), "clembed_struct_size");
  clembed_optimizer dflt = clembed_optimizer_defaults(CLEMBED_ADAM);
  EXPECT(dflt.stochastic_rounding == 0 && dflt.seed == 0 && dflt.first_row == 0, "the defaults");
  free(a);
  free(b);
  dev_free(&E);
  dev_free(&F);
  dev_free(&D);
  batch_free(&B);
  clembed_matrix_release(&grad_bag);
  clembed_ids_release(&offsets);
  free_problem(&p);
}

/* The device's OpenCL context and queue, for the gapped table. */
static void setup(clembed_context *ctx) {
  cl_queue = clembed_context_queue(ctx);
  EXPECT(clGetCommandQueueInfo(cl_queue, CL_QUEUE_CONTEXT, sizeof cl_ctx, &cl_ctx, NULL) == CL_SUCCESS,
         "the queue's OpenCL context");
}

int main(int argc, char **argv) {
  return tu_main(argc, argv, (tu_suite){.name = "test_stochastic_rounding", .device = 1, .setup = setup});
}
