/* The bench's C ceilings (tools/ceiling/) do the work they stand for: each
 * kind's results against a plain reference, in every instruction set the
 * machine has (the dispatch picks the best; the plain-C body is compiled in
 * too). A ceiling that skipped work would flatter the library's ratios. The
 * threads are run one after another here (a phase's parts are independent). */
#include "test_util.h"
#include "reference_ggml.h"
#include "rowwise_ref.h"
#include "ceiling/ceiling.h"

/* Every instruction set this CPU has, in turn (the case runs once per entry). */
static const char *const isas[3] = {"c", "avx2", "avx512"};
#define FOR_EACH_ISA(k) for (int k = 0; k < 3 && (setenv("CLEMBED_CEILING_ISA", isas[k], 1), 1); k++) \
  if (k == 0 || strcmp(ceiling_isa(), "C"))

static void serial_runner(void *runner_arg, ceiling_part_fn fn, void *arg) {
  int threads = *(const int *)runner_arg;
  for (int i = 0; i < threads; i++) fn(arg, i, threads);
}

static uint64_t rnd(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

static void random_ids(int32_t *ids, size_t n, size_t rows, uint64_t seed) {
  uint64_t x = seed;
  for (size_t i = 0; i < n; i++) ids[i] = (int32_t)(rnd(&x) % rows);
}

/* A row of the table as float, as ggml dequantizes it. */
static void table_row(const ceiling_view *v, clembed_dtype dt, size_t r, size_t cols, float *y) {
  const unsigned char *row = v->table + r * v->row_bytes;
  for (size_t c = 0; c < cols; c++) {
    if (dt == CLEMBED_F32) memcpy(&y[c], row + 4 * c, 4);
    else if (dt == CLEMBED_F16) y[c] = ref_f16_to_f32((uint16_t)(row[2 * c] | row[2 * c + 1] << 8));
    else if (dt == CLEMBED_BF16) y[c] = ref_bf16_to_f32((uint16_t)(row[2 * c] | row[2 * c + 1] << 8));
  }
  if (dt == CLEMBED_Q8_0) ref_dequantize_row_q8_0((const ref_block_q8_0 *)row, y, (int64_t)cols);
  if (dt == CLEMBED_Q4_0) ref_dequantize_row_q4_0((const ref_block_q4_0 *)row, y, (int64_t)cols);
  if (dt == CLEMBED_Q4_K) ref_dequantize_row_q4_K((const ref_block_q4_K *)row, y, (int64_t)cols);
  if (dt >= CLEMBED_I8_ROWWISE && dt <= CLEMBED_FP8_ROWWISE)
    for (size_t c = 0; c < cols; c++) y[c] = rw_ref_value(dt, row, cols, c);
}

static uint32_t stored_bits(const unsigned char *o, clembed_dtype dt, size_t c) {
  if (dt == CLEMBED_F32) {
    uint32_t u;
    memcpy(&u, o + 4 * c, 4);
    return u;
  }
  return (uint32_t)(o[2 * c] | o[2 * c + 1] << 8);
}

static uint32_t expected_bits(float f, clembed_dtype dt) {
  if (dt == CLEMBED_F16) return ref_f32_to_f16(f);
  if (dt == CLEMBED_BF16) return ref_f32_to_bf16(f);
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* GATHER: every table dtype into every output dtype, plain and with a scale
 * and position rows (the position-major order), 1 and 3 threads. */
static void gather_every_dtype_pair_once(void) {
  const clembed_dtype tdts[6] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16, CLEMBED_Q8_0, CLEMBED_Q4_0, CLEMBED_Q4_K};
  const clembed_dtype odts[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  const size_t rows = 37, cols = 512, n = 24, seq = 4;
  int32_t ids[24];
  random_ids(ids, n, rows, 7);
  float *w = malloc(cols * sizeof *w);
  for (int t = 0; t < 6; t++)
    for (int o = 0; o < 3; o++)
      for (int fused = 0; fused < 2; fused++)
        for (int threads = 1; threads <= 3; threads += 2) {
          ceiling_desc d = {.kind = CEILING_GATHER, .table_dtype = tdts[t], .out_dtype = odts[o], .rows = rows,
                            .cols = cols, .n = n, .ids = ids, .scale = fused ? 2.5f : 1.0f, .seq = seq,
                            .positions = fused};
          char err[128];
          ceiling *c = ceiling_create(&d, err, sizeof err);
          EXPECT(c != NULL, "%s", err);
          if (!c) continue;
          ceiling_run(c, serial_runner, &threads);
          ceiling_view v;
          ceiling_get_view(c, &v);
          size_t bad = 0;
          for (size_t i = 0; i < n; i++) {
            table_row(&v, tdts[t], (size_t)ids[i], cols, w);
            for (size_t col = 0; col < cols; col++) {
              float y = w[col];
              if (fused) y = 2.5f * y + v.pos[(i % seq) * cols + col];
              bad += stored_bits(v.out + i * v.out_row_bytes, odts[o], col) != expected_bits(y, odts[o]);
            }
          }
          EXPECT(bad == 0, "table %d out %d fused %d threads %d: %zu values differ (%s)", t, o, fused, threads, bad,
                 ceiling_isa());
          ceiling_destroy(c);
        }
  free(w);
}

/* A ceiling made with CLEMBED_CEILING_SIDE set to `side` (NULL, failing the
 * case, where it refuses). */
static ceiling *create_with_side(const ceiling_desc *d, int side) {
  char sv[16], err[128];
  snprintf(sv, sizeof sv, "%d", side);
  setenv("CLEMBED_CEILING_SIDE", sv, 1);
  ceiling *c = ceiling_create(d, err, sizeof err);
  unsetenv("CLEMBED_CEILING_SIDE");
  EXPECT(c != NULL, "%s", err);
  return c;
}

/* BERT's layer in double, as the ceilings' (two segment rows: a sequence's
 * second half takes the second): token i's x into x (cols), its mean into
 * *mean; returns its rstd. */
static double layer_x(const ceiling_view *v, const int32_t *ids, size_t i, size_t cols, size_t seq, double scale,
                      double *x, double *mean) {
  const float *w = (const float *)(v->table + (size_t)ids[i] * v->row_bytes);
  const float *s = v->norm + (i % seq >= seq / 2 ? cols : 0);
  double m = 0.0, var = 0.0;
  for (size_t col = 0; col < cols; col++) {
    x[col] = scale * w[col] + (double)v->pos[(i % seq) * cols + col] + (double)s[col];
    m += x[col];
  }
  m /= (double)cols;
  for (size_t col = 0; col < cols; col++) var += (x[col] - m) * (x[col] - m);
  *mean = m;
  return 1.0 / sqrt(var / (double)cols + 1e-12);
}

/* GATHER with layer_norm (BERT's layer): against LayerNorm in double, 1 and
 * 3 threads, rows one at a time and side by side. */
static void layer_norms_once(void) {
  const size_t rows = 37, cols = 528, n = 24, seq = 6;
  int32_t ids[24];
  random_ids(ids, n, rows, 11);
  double *x = malloc(cols * sizeof *x);
  for (int side = 1; side <= 4; side *= 4)
    for (int threads = 1; threads <= 3; threads += 2) {
      ceiling_desc d = {.kind = CEILING_GATHER, .table_dtype = CLEMBED_F32, .out_dtype = CLEMBED_F32, .rows = rows,
                        .cols = cols, .n = n, .ids = ids, .scale = 2.5f, .seq = seq, .positions = 1,
                        .layer_norm = 1};
      ceiling *c = create_with_side(&d, side);
      if (!c) continue;
      ceiling_run(c, serial_runner, &threads);
      ceiling_view v;
      ceiling_get_view(c, &v);
      double worst = 0.0;
      for (size_t i = 0; i < n; i++) {
        const float *g = v.norm + 2 * cols, *b = v.norm + 3 * cols;
        double mean;
        const double rstd = layer_x(&v, ids, i, cols, seq, 2.5, x, &mean);
        for (size_t col = 0; col < cols; col++) {
          float y;
          memcpy(&y, v.out + i * v.out_row_bytes + 4 * col, 4);
          double e = fabs((double)y - ((x[col] - mean) * rstd * (double)g[col] + (double)b[col]));
          if (!(e <= worst)) worst = e;
        }
      }
      EXPECT(worst < 1e-5, "side %d threads %d: %g from LayerNorm in double (%s)", side, threads, worst,
             ceiling_isa());
      ceiling_destroy(c);
    }
  free(x);
}

/* LAYER_BACKWARD: every gradient of BERT's layer against its backward in
 * double (LayerNorm's dx, the sums over tokens), 1 and 3 threads, rows one at
 * a time and side by side; ids repeated (the fold's segments). */
static void layer_backward_once(void) {
  const size_t rows = 9, cols = 528, n = 24, seq = 6;
  const double scale = 2.5;
  int32_t ids[24];
  random_ids(ids, n, rows, 13);
  double *x = malloc(cols * sizeof *x), *dW = calloc(rows * cols, sizeof *dW), *dP = calloc(seq * cols, sizeof *dP),
         *dN = calloc(4 * cols, sizeof *dN);
  for (int side = 1; side <= 4; side *= 4)
    for (int threads = 1; threads <= 3; threads += 2) {
      ceiling_desc d = {.kind = CEILING_LAYER_BACKWARD, .table_dtype = CLEMBED_F32, .out_dtype = CLEMBED_F32,
                        .rows = rows, .cols = cols, .n = n, .ids = ids, .scale = (float)scale, .seq = seq,
                        .positions = 1};
      ceiling *c = create_with_side(&d, side);
      if (!c) continue;
      ceiling_run(c, serial_runner, &threads);
      ceiling_view v;
      ceiling_get_view(c, &v);
      memset(dW, 0, rows * cols * sizeof *dW);
      memset(dP, 0, seq * cols * sizeof *dP);
      memset(dN, 0, 4 * cols * sizeof *dN);
      const float *wt = v.norm + 2 * cols;
      for (size_t i = 0; i < n; i++) {
        const float *g = v.grad + i * cols;
        const size_t seg = i % seq >= seq / 2;
        double mean, A = 0.0, B = 0.0;
        const double rstd = layer_x(&v, ids, i, cols, seq, scale, x, &mean);
        for (size_t col = 0; col < cols; col++) {
          const double h = (double)g[col] * wt[col], xh = (x[col] - mean) * rstd;
          A += h;
          B += h * xh;
        }
        A /= (double)cols;
        B /= (double)cols;
        for (size_t col = 0; col < cols; col++) {
          const double h = (double)g[col] * wt[col], xh = (x[col] - mean) * rstd, dx = rstd * ((h - A) - xh * B);
          dW[(size_t)ids[i] * cols + col] += scale * dx;
          dP[(i % seq) * cols + col] += dx;
          dN[seg * cols + col] += dx;
          dN[2 * cols + col] += g[col] * xh;
          dN[3 * cols + col] += g[col];
        }
      }
      double worst[3] = {0.0, 0.0, 0.0};
      for (size_t k = 0; k < rows * cols; k++) {
        double e = fabs((double)((const float *)v.out)[k] - dW[k]);
        if (!(e <= worst[0])) worst[0] = e;
      }
      for (size_t k = 0; k < seq * cols; k++) {
        double e = fabs((double)v.dpos[k] - dP[k]);
        if (!(e <= worst[1])) worst[1] = e;
      }
      for (size_t k = 0; k < 4 * cols; k++) {
        double e = fabs((double)v.dnorm[k] - dN[k]);
        if (!(e <= worst[2])) worst[2] = e;
      }
      EXPECT(worst[0] < 1e-4 && worst[1] < 1e-4 && worst[2] < 1e-4,
             "side %d threads %d: dW %g, dpos %g, the segments' / weight's / bias's %g from double (%s)", side,
             threads, worst[0], worst[1], worst[2], ceiling_isa());
      ceiling_destroy(c);
    }
  free(x);
  free(dW);
  free(dP);
  free(dN);
}

/* FOLD: each store mode on F32 and BF16 tables, rows repeated many times; a
 * gradient row per token, and (with 3 threads) one per 4 tokens, as a bag
 * step's SUM has. */
static void fold_every_store_once(void) {
  const size_t rows = 50, cols = 64, n = 300;
  int32_t ids[300];
  random_ids(ids, n, rows, 11);
  for (int i = 0; i < 40; i++) ids[i * 5] = 3; /* a long segment */
  const ceiling_store stores[5] = {CEILING_ACCUMULATE, CEILING_SGD, CEILING_ADAGRAD, CEILING_ROWWISE_ADAGRAD,
                                   CEILING_ADAM};
  const clembed_dtype tdts[2] = {CLEMBED_F32, CLEMBED_BF16};
  for (int k = 0; k < 5; k++)
    for (int t = 0; t < 2; t++)
      for (int threads = 1; threads <= 3; threads += 2) {
        if (stores[k] == CEILING_ACCUMULATE && t) continue; /* a dense gradient is F32 */
        const size_t gs = threads == 3 ? 4 : 1;
        ceiling_desc d = {.kind = CEILING_FOLD, .table_dtype = tdts[t], .rows = rows, .cols = cols, .n = n,
                          .ids = ids, .store = stores[k], .learning_rate = 0.25f, .grad_seq = gs};
        char err[128];
        ceiling *c = ceiling_create(&d, err, sizeof err);
        EXPECT(c != NULL, "%s", err);
        if (!c) continue;
        ceiling_view v;
        ceiling_get_view(c, &v);
        /* the reference, from the arrays as they are before the run */
        float *w = malloc(rows * cols * sizeof *w), *s1 = calloc(rows * cols, sizeof *s1),
              *s2 = calloc(rows * cols, sizeof *s2), *g = malloc(cols * sizeof *g);
        for (size_t r = 0; r < rows; r++) table_row(&v, tdts[t], r, cols, w + r * cols);
        for (size_t r = 0; r < rows; r++) {
          int any = 0;
          for (size_t i = 0; i < n; i++) /* ascending token order */
            if ((size_t)ids[i] == r) {
              for (size_t col = 0; col < cols; col++) {
                float x = v.grad[i / gs * cols + col];
                g[col] = any ? g[col] + x : x;
              }
              any = 1;
            }
          if (!any) continue;
          float *wr = w + r * cols;
          double sq = 0;
          for (size_t col = 0; col < cols; col++) sq += (double)g[col] * g[col];
          float m = (float)(sq / (double)cols), rate = v.lr / (sqrtf(m) + v.eps);
          for (size_t col = 0; col < cols; col++) {
            float x = g[col];
            switch (stores[k]) {
            case CEILING_ACCUMULATE: wr[col] = wr[col] + x; break;
            case CEILING_SGD: wr[col] = wr[col] - v.lr * x; break;
            case CEILING_ADAGRAD:
              s1[r * cols + col] = s1[r * cols + col] + x * x;
              wr[col] = wr[col] - v.lr * (x / (sqrtf(s1[r * cols + col]) + v.eps));
              break;
            case CEILING_ROWWISE_ADAGRAD: wr[col] = wr[col] - rate * x; break;
            case CEILING_ADAM: {
              float *mm = &s1[r * cols + col], *uu = &s2[r * cols + col];
              *mm = *mm + (x - *mm) * v.b1c;
              *uu = *uu + (x * x - *uu) * v.b2c;
              wr[col] = wr[col] - v.lr * (*mm / (sqrtf(*uu) + v.eps));
              break;
            }
            }
            if (tdts[t] == CLEMBED_BF16) wr[col] = ref_bf16_to_f32(ref_f32_to_bf16(wr[col]));
          }
        }
        ceiling_run(c, serial_runner, &threads);
        size_t bad = 0;
        float *got = malloc(cols * sizeof *got);
        for (size_t r = 0; r < rows; r++) {
          table_row(&v, tdts[t], r, cols, got);
          for (size_t col = 0; col < cols; col++) {
            float e = w[r * cols + col];
            /* row-wise Adagrad's sum of squares runs in 16 partial sums */
            float tol = stores[k] == CEILING_ROWWISE_ADAGRAD ? 1e-6f * (1.0f + fabsf(e)) : 0.0f;
            if (tdts[t] == CLEMBED_BF16 && tol > 0) tol = 1e-2f * (1.0f + fabsf(e));
            bad += !(fabsf(got[col] - e) <= tol);
          }
        }
        EXPECT(bad == 0, "store %d table %d threads %d: %zu values differ (%s)", k, t, threads, bad, ceiling_isa());
        free(got);
        free(w);
        free(s1);
        free(s2);
        free(g);
        ceiling_destroy(c);
      }
}

/* ROPE: the NeoX rotation of F32 and F16 tokens from the cos/sin rows. */
static void rope_rotates_once(void) {
  const size_t n = 9, hd = 64, cols = 3 * hd, half = hd / 2;
  const clembed_dtype dts[2] = {CLEMBED_F32, CLEMBED_F16};
  for (int t = 0; t < 2; t++) {
    int threads = 2;
    ceiling_desc d = {.kind = CEILING_ROPE, .table_dtype = dts[t], .rows = n, .cols = cols, .n = n, .head_dim = hd};
    char err[128];
    ceiling *c = ceiling_create(&d, err, sizeof err);
    EXPECT(c != NULL, "%s", err);
    if (!c) continue;
    ceiling_run(c, serial_runner, &threads);
    ceiling_view v;
    ceiling_get_view(c, &v);
    float *x = malloc(cols * sizeof *x);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
      table_row(&v, dts[t], i, cols, x);
      for (size_t h = 0; h < cols; h += hd)
        for (size_t k = 0; k < half; k++) {
          float co = v.pos[i * hd + k], si = v.pos[i * hd + half + k], a = x[h + k], b = x[h + k + half];
          bad += stored_bits(v.out + i * v.out_row_bytes, dts[t], h + k) != expected_bits(a * co - b * si, dts[t]);
          bad += stored_bits(v.out + i * v.out_row_bytes, dts[t], h + k + half) != expected_bits(b * co + a * si, dts[t]);
        }
    }
    EXPECT(bad == 0, "dtype %d: %zu values differ", t, bad);
    free(x);
    ceiling_destroy(c);
  }
}

/* BAG: bags of 5 ids over 1 and 3 features, 64, 128 and 96 columns (the
 * accumulators' constant counts and the general one), sums and means, every
 * table dtype it takes, 1 and 3 threads: each value the float sum of the bag's
 * rows in id order (from 0; FBGEMM's row-wise values as rowwise_ref.h gives them),
 * the mean that sum divided by 5. */
static void bag_pools_once(void) {
  const size_t widths[4] = {64, 128, 96, 256}, rows_per = 11, seq = 5, bags = 7;
  const clembed_dtype tdts[13] = {CLEMBED_F32,        CLEMBED_F16,         CLEMBED_BF16,      CLEMBED_Q8_0,
                                  CLEMBED_Q4_0,       CLEMBED_Q4_K,        CLEMBED_I8_ROWWISE, CLEMBED_I4_ROWWISE,
                                  CLEMBED_I2_ROWWISE, CLEMBED_I8_TBE,      CLEMBED_I4_TBE,    CLEMBED_I2_TBE,
                                  CLEMBED_FP8_ROWWISE};
  float *y = malloc(256 * sizeof *y), *sum = malloc(256 * sizeof *sum);
  for (size_t wi = 0; wi < 4; wi++)
    for (size_t F = 1, cols = widths[wi]; F <= 3; F += 2) {
    const size_t n = F * bags * seq;
    int32_t *ids = malloc(n * sizeof *ids);
    random_ids(ids, n, rows_per, 7 + F);
    for (int t = 0; t < 13; t++)
      for (int mean = 0; mean < 2 && (tdts[t] != CLEMBED_Q4_K || cols % 256 == 0); mean++)
        for (int threads = 1; threads <= 3; threads += 2) {
          ceiling_desc d = {.kind = CEILING_BAG, .table_dtype = tdts[t], .out_dtype = CLEMBED_F32,
                            .rows = F * rows_per, .cols = cols, .n = n, .ids = ids, .seq = seq, .features = F,
                            .mean = mean};
          char err[128];
          ceiling *c = ceiling_create(&d, err, sizeof err);
          EXPECT(c != NULL, "%s", err);
          if (!c) continue;
          ceiling_run(c, serial_runner, &threads);
          ceiling_view v;
          ceiling_get_view(c, &v);
          EXPECT(v.out_row_bytes == F * cols * 4, "out rows of %zu bytes", v.out_row_bytes);
          size_t bad = 0;
          for (size_t b = 0; b < bags; b++)
            for (size_t f = 0; f < F; f++) {
              for (size_t col = 0; col < cols; col++) sum[col] = 0.0f;
              for (size_t j = 0; j < seq; j++) {
                table_row(&v, tdts[t], f * rows_per + (size_t)ids[f * bags * seq + b * seq + j], cols, y);
                for (size_t col = 0; col < cols; col++) sum[col] += y[col];
              }
              for (size_t col = 0; col < cols; col++) {
                float e = mean ? sum[col] / (float)seq : sum[col];
                bad += stored_bits(v.out + b * v.out_row_bytes, CLEMBED_F32, f * cols + col) !=
                       expected_bits(e, CLEMBED_F32);
              }
            }
          EXPECT(bad == 0, "cols %zu features %zu table %d mean %d threads %d: %zu values differ (%s)", cols, F, t,
                 mean, threads, bad, ceiling_isa());
          ceiling_destroy(c);
        }
    free(ids);
  }
  free(y);
  free(sum);
}

TU_CASE(gather_every_dtype_pair) {
  FOR_EACH_ISA(k) gather_every_dtype_pair_once();
  unsetenv("CLEMBED_CEILING_ISA");
}
TU_CASE(fold_every_store) {
  FOR_EACH_ISA(k) fold_every_store_once();
  unsetenv("CLEMBED_CEILING_ISA");
}
TU_CASE(rope_rotates) {
  FOR_EACH_ISA(k) rope_rotates_once();
  unsetenv("CLEMBED_CEILING_ISA");
}
TU_CASE(layer_norms) {
  FOR_EACH_ISA(k) layer_norms_once();
  unsetenv("CLEMBED_CEILING_ISA");
}
TU_CASE(layer_backward) {
  FOR_EACH_ISA(k) layer_backward_once();
  unsetenv("CLEMBED_CEILING_ISA");
}
TU_CASE(bag_pools) {
  FOR_EACH_ISA(k) bag_pools_once();
  unsetenv("CLEMBED_CEILING_ISA");
}

/* What the ceiling does not do is refused with a reason, never run wrong. */
TU_CASE(refuses_what_it_cannot_do) {
  int32_t ids[4] = {0, 1, 2, 3};
  char err[128] = "";
  ceiling_desc d = {.kind = CEILING_GATHER, .table_dtype = CLEMBED_F32, .out_dtype = CLEMBED_F32, .rows = 4,
                    .cols = 24, .n = 4, .ids = ids, .scale = 1.0f};
  EXPECT(ceiling_create(&d, err, sizeof err) == NULL && strstr(err, "16"), "24 columns: '%s'", err);
  d.cols = 32;
  ids[3] = 4;
  EXPECT(ceiling_create(&d, err, sizeof err) == NULL && strstr(err, "outside"), "id 4 of 4 rows: '%s'", err);
  ids[3] = 3;
  d.table_dtype = CLEMBED_Q4_K;
  EXPECT(ceiling_create(&d, err, sizeof err) == NULL, "Q4_K with 32 columns");
  d.table_dtype = CLEMBED_F32;
  d.layer_norm = 1; /* the layer needs positions */
  EXPECT(ceiling_create(&d, err, sizeof err) == NULL && strstr(err, "positions"), "a layer without positions: '%s'",
         err);
  d.layer_norm = 0;
  d.kind = CEILING_LAYER_BACKWARD; /* whole sequences only */
  d.seq = 3;
  EXPECT(ceiling_create(&d, err, sizeof err) == NULL && strstr(err, "sequences"), "4 ids in sequences of 3: '%s'",
         err);
  d.kind = CEILING_GATHER;
  d.seq = 0;
  ceiling_desc b = {.kind = CEILING_BAG, .table_dtype = CLEMBED_F32, .out_dtype = CLEMBED_F32, .rows = 4,
                    .cols = 32, .n = 4, .ids = ids, .seq = 3};
  EXPECT(ceiling_create(&b, err, sizeof err) == NULL && strstr(err, "whole bags"), "4 ids in bags of 3: '%s'", err);
  b.seq = 2;
  b.features = 2; /* each feature's table has 2 rows: id 3 is outside */
  EXPECT(ceiling_create(&b, err, sizeof err) == NULL && strstr(err, "outside"), "id 3 of 2 rows: '%s'", err);
  b.features = 1;
  b.out_dtype = CLEMBED_F16;
  EXPECT(ceiling_create(&b, err, sizeof err) == NULL && strstr(err, "output"), "a bag into F16: '%s'", err);
  ceiling_destroy(NULL);
}

int main(int argc, char **argv) { return tu_main(argc, argv, (tu_suite){.name = "test_ceiling"}); }
