/* clembed_matrix_init_uniform / _normal against Philox references.
 *   Element (r, c) is e = r*cols + c; one Philox4x32-10 counter serves four
 *   consecutive elements: key (seed lo, seed hi), counter (q lo, q hi, 0, 0) with
 *   q = e / 4 gives x0..x3, and element e takes word j = e % 4 (uniform) or the
 *   pair (x0, x1) / (x2, x3) that j falls in (normal); u(x) = (x >> 8) * 2^-24.
 *   uniform: low + (high - low) * u(x_j), in float32 arithmetic: exact (bit for
 *            bit), the reference doing the float operations in the plain order;
 *   normal:  Box-Muller with v = ((x0 >> 8) + 1) 2^-24, t = u(x1): z0 = R cos 2 pi t,
 *            z1 = R sin 2 pi t, R = sqrt(-2 ln v) (z2, z3 from x2, x3), then
 *            mean + std * z_j: exact (bit for bit) against the host's own
 *            compilation of cl/lib/exactmath.cl, and within 1e-6 * (|mean| + |std| *
 *            (1 + |z|)) of the float64 transform of the same v and t.
 *   F16/BF16 output: the dtype's rounding of the float value (exact).
 * Also: ref_philox against Random123's known-answer vector, determinism (same
 * seed same bytes; another seed, low or high 32 bits, other numbers), ld/offset
 * and shape independence (element e depends only on seed and e), moments of a
 * large table (mean within 4 sigma, variance within 5%, and a histogram), events,
 * and the argument errors. */
#include "test_util.h"

#include <float.h>
#include "exactmath_host.h"

static const clembed_dtype DT[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
static const char *DN[3] = {"F32", "F16", "BF16"};

/* ------------------------------------------------------------ references */

/* The float32 value the device must give: mean + std * z_j with z from the
 * host's exactmath. */
static float normal_ref(uint64_t seed, uint64_t e, float mean, float std) {
  uint32_t x[4];
  ref_philox(seed, e / 4, x);
  float z[4];
  ce_xm_box_muller(x[0], x[1], &z[0], &z[1]);
  ce_xm_box_muller(x[2], x[3], &z[2], &z[3]);
  float scaled = std * z[e % 4];
  return mean + scaled;
}

static double normal_tol(float mean, float std, double z) {
  return 1e-6 * (fabs((double)mean) + fabs((double)std) * (1.0 + fabs(z)));
}

/* ------------------------------------------------------------ checks */

TU_CASE(philox_reference_known_answer) {
  /* Random123 kat_vectors: philox4x32 10 rounds, counter 0, key 0 */
  uint32_t x[4];
  ref_philox(0, 0, x);
  EXPECT(x[0] == 0x6627e8d5u && x[1] == 0xe169c58du && x[2] == 0xbc57ac4cu && x[3] == 0x9b00dbd8u,
         "ref_philox(0, 0) = %08x %08x %08x %08x", x[0], x[1], x[2], x[3]);
}

/* Initialises a rows x cols matrix of dtype t as rows first_row .. of a
 * larger table (the plain call for first_row 0, else the _at call) and
 * compares every element with the reference at its Philox index. */
static void check_values_at(clembed_context *ctx, int normal, uint64_t first_row, size_t rows, size_t cols,
                            clembed_dtype t, float a, float b, uint64_t seed) {
  clembed_matrix m = {0};
  OK(ctx, clembed_matrix_create(ctx, rows, cols, t, &m));
  if (first_row && normal) OK(ctx, clembed_matrix_init_normal_at(ctx, &m, first_row, a, b, seed, 0, NULL, NULL));
  else if (first_row) OK(ctx, clembed_matrix_init_uniform_at(ctx, &m, first_row, a, b, seed, 0, NULL, NULL));
  else if (normal) OK(ctx, clembed_matrix_init_normal(ctx, &m, a, b, seed, 0, NULL, NULL));
  else OK(ctx, clembed_matrix_init_uniform(ctx, &m, a, b, seed, 0, NULL, NULL));
  size_t n = rows * cols;
  float *g = malloc((n ? n : 1) * sizeof *g);
  OK(ctx, clembed_matrix_read(ctx, &m, g, CLEMBED_F32));
  size_t bad = 0;
  double worst = 0.0;
  for (size_t l = 0; l < n; l++) {
    int ok;
    double err;
    uint64_t e = first_row * cols + l; /* the Philox index; g[l] is the element */
    if (!normal) {
      float want = ref_round(ref_uniform(seed, e, a, b), t);
      ok = g[l] == want;
      err = fabs((double)g[l] - want);
    } else {
      double z = ref_normal_z(seed, e), ref = (double)a + (double)b * z, tol = normal_tol(a, b, z);
      float want = ref_round(normal_ref(seed, e, a, b), t), exact = normal_ref(seed, e, a, b);
      err = fabs((double)exact - ref);
      ok = memcmp(&g[l], &want, 4) == 0 && err <= tol;
      if (err / (tol / 1e-6) > worst) worst = err / (tol / 1e-6);
    }
    if (!ok) {
      if (bad < 3)
        fprintf(stderr, "  %s %s(%g, %g) seed %llu: element %llu: got %.9g (err %.3g)\n", normal ? "normal" : "uniform",
                DN[t], (double)a, (double)b, (unsigned long long)seed, (unsigned long long)e, g[l], err);
      bad++;
    }
  }
  EXPECT(bad == 0, "%s %zux%zu from row %llu %s (%g, %g) seed %llu: %zu of %zu wrong", normal ? "normal" : "uniform",
         rows, cols, (unsigned long long)first_row, DN[t], (double)a, (double)b, (unsigned long long)seed, bad, n);
  if (normal && t == CLEMBED_F32 && n) printf("normal (%g, %g): worst relative error %.3g\n", (double)a, (double)b, worst);
  free(g);
  clembed_matrix_release(&m);
}

static void check_values(clembed_context *ctx, int normal, size_t rows, size_t cols, clembed_dtype t, float a,
                         float b, uint64_t seed) {
  check_values_at(ctx, normal, 0, rows, cols, t, a, b, seed);
}

/* uniform and normal F32 values element for element, seeds 0, 1 and 64-bit */
TU_CASE(values_f32_every_seed) {
  size_t R = tu_small ? 64 : 1000;
  const uint64_t seeds[3] = {0, 1, 0xDEADBEEFCAFEBABEULL};
  for (int s = 0; s < 3; s++) {
    check_values(ctx, 0, R, 37, CLEMBED_F32, 0.0f, 1.0f, seeds[s]);
    check_values(ctx, 1, R, 37, CLEMBED_F32, 0.0f, 1.0f, seeds[s]);
  }
}

/* one element, low == high, a wide range, std 0, empty matrices */
TU_CASE(values_f32_edge_parameters) {
  size_t R = tu_small ? 64 : 1000;
  check_values(ctx, 0, 1, 1, CLEMBED_F32, -0.1f, 0.1f, 42);
  check_values(ctx, 0, 3, 5, CLEMBED_F32, -3.0f, 7.5f, 42);
  check_values(ctx, 0, R, 3, CLEMBED_F32, -0.05f, 0.05f, 7);
  check_values(ctx, 0, 10, 10, CLEMBED_F32, 5.0f, 5.0f, 7);      /* low == high: all 5 */
  check_values(ctx, 0, 10, 10, CLEMBED_F32, -1e30f, 1e30f, 8);   /* a wide range */
  check_values(ctx, 1, R, 7, CLEMBED_F32, 0.0f, 0.02f, 9);       /* a typical embedding init */
  check_values(ctx, 1, 50, 7, CLEMBED_F32, 3.0f, 0.5f, 10);
  check_values(ctx, 1, 10, 10, CLEMBED_F32, -1.0f, 0.0f, 11);    /* std 0: all mean */
  if (!tu_small) { /* larger than a 32 MiB cache: the CPU shape's streaming stores */
    check_values(ctx, 1, 2900, 3001, CLEMBED_F32, 0.5f, 2.0f, 77);
    check_values(ctx, 0, 2900, 3001, CLEMBED_F32, -1.0f, 1.0f, 78);
  }
  check_values(ctx, 0, 0, 5, CLEMBED_F32, 0.0f, 1.0f, 1);        /* empty */
  check_values(ctx, 1, 5, 0, CLEMBED_F32, 0.0f, 1.0f, 1);
}

TU_CASE(values_f16_and_bf16) {
  size_t R = tu_small ? 64 : 1000;
  for (int t = 1; t < 3; t++) {
    check_values(ctx, 0, R / 2, 37, DT[t], -1.0f, 1.0f, 12);
    check_values(ctx, 0, 20, 16, DT[t], 100.0f, 300.0f, 13);
    check_values(ctx, 1, R / 2, 37, DT[t], 0.0f, 1.0f, 14);
    check_values(ctx, 1, 20, 16, DT[t], 2.0f, 0.01f, 15);
  }
}

/* Reads a matrix's elements in its own dtype (raw bytes). */
static void *read_raw(clembed_context *ctx, const clembed_matrix *m) {
  size_t n = m->rows * m->cols;
  void *p = calloc(n ? n : 1, 4);
  OK(ctx, clembed_matrix_read(ctx, m, p, m->dtype));
  return p;
}

static clembed_status init(clembed_context *ctx, int normal, clembed_matrix *m, uint64_t seed) {
  return normal ? clembed_matrix_init_normal(ctx, m, 0.25f, 1.5f, seed, 0, NULL, NULL)
                : clembed_matrix_init_uniform(ctx, m, -0.5f, 2.0f, seed, 0, NULL, NULL);
}

TU_CASE(same_seed_same_bytes_other_seed_other_numbers) {
  size_t R = tu_small ? 40 : 300, C = 29;
  for (int normal = 0; normal < 2; normal++)
    for (int t = 0; t < 3; t++) {
      clembed_matrix a = {0}, b = {0}, c = {0}, d = {0};
      OK(ctx, clembed_matrix_create(ctx, R, C, DT[t], &a));
      OK(ctx, clembed_matrix_create(ctx, R, C, DT[t], &b));
      OK(ctx, clembed_matrix_create(ctx, R, C, DT[t], &c));
      OK(ctx, clembed_matrix_create(ctx, R, C, DT[t], &d));
      OK(ctx, init(ctx, normal, &a, 1234));
      OK(ctx, init(ctx, normal, &b, 1234));
      OK(ctx, init(ctx, normal, &c, 1235));
      OK(ctx, init(ctx, normal, &d, 1234 + (1ULL << 32))); /* the high 32 bits of the seed count */
      void *pa = read_raw(ctx, &a), *pb = read_raw(ctx, &b), *pc = read_raw(ctx, &c), *pd = read_raw(ctx, &d);
      size_t es = clembed_dtype_size(DT[t]), n = R * C;
      EXPECT(!memcmp(pa, pb, n * es), "%s %s: the same seed gave different bytes", normal ? "normal" : "uniform",
             DN[t]);
      size_t same_c = 0, same_d = 0;
      for (size_t e = 0; e < n; e++) {
        same_c += !memcmp((char *)pa + e * es, (char *)pc + e * es, es);
        same_d += !memcmp((char *)pa + e * es, (char *)pd + e * es, es);
      }
      /* independent draws coincide rarely (BF16 has 8 bits: allow a few percent) */
      EXPECT(same_c < n / 20, "%s %s: seeds 1234 and 1235 agree in %zu of %zu elements",
             normal ? "normal" : "uniform", DN[t], same_c, n);
      EXPECT(same_d < n / 20, "%s %s: seeds 1234 and 1234 + 2^32 agree in %zu of %zu elements",
             normal ? "normal" : "uniform", DN[t], same_d, n);
      /* neighbouring elements differ too (not the same number everywhere) */
      size_t runs = 0;
      for (size_t e = 1; e < n; e++) runs += !memcmp((char *)pa + e * es, (char *)pa + (e - 1) * es, es);
      EXPECT(runs < n / 20, "%s %s: %zu neighbouring elements are equal", normal ? "normal" : "uniform", DN[t], runs);
      free(pa);
      free(pb);
      free(pc);
      free(pd);
      clembed_matrix_release(&a);
      clembed_matrix_release(&b);
      clembed_matrix_release(&c);
      clembed_matrix_release(&d);
    }
}

/* Element (r, c) depends only on seed and r*cols + c: a strided window at an
 * offset gives the dense matrix's bytes, the rest of its buffer is untouched,
 * and R x C, (R*C) x 1 and 1 x (R*C) matrices hold the same numbers. */
TU_CASE(element_depends_only_on_seed_and_index) {
  size_t R = tu_small ? 17 : 200, C = 13, pad = 5, off = 11;
  for (int normal = 0; normal < 2; normal++)
    for (int t = 0; t < 3; t++) {
      clembed_matrix dense = {0}, whole = {0}, col = {0}, row = {0};
      OK(ctx, clembed_matrix_create(ctx, R, C, DT[t], &dense));
      OK(ctx, init(ctx, normal, &dense, 99));
      size_t total = off + R * (C + pad) + 3;
      OK(ctx, clembed_matrix_create(ctx, 1, total, DT[t], &whole));
      float *fill = malloc(total * sizeof *fill);
      for (size_t i = 0; i < total; i++) fill[i] = TU_FILL;
      OK(ctx, clembed_matrix_write(ctx, &whole, fill, CLEMBED_F32));
      clembed_matrix win = {whole.buffer, off, R, C, C + pad, DT[t]};
      OK(ctx, init(ctx, normal, &win, 99));
      void *pd = read_raw(ctx, &dense), *pw = read_raw(ctx, &win);
      size_t es = clembed_dtype_size(DT[t]);
      EXPECT(!memcmp(pd, pw, R * C * es), "%s %s: a strided window (ld %zu, offset %zu) differs from the dense matrix",
             normal ? "normal" : "uniform", DN[t], C + pad, off);
      size_t touched = tu_written_outside(ctx, &win, total);
      EXPECT(touched == 0, "%s %s: %zu elements outside the window were written", normal ? "normal" : "uniform",
             DN[t], touched);
      OK(ctx, clembed_matrix_create(ctx, R * C, 1, DT[t], &col));
      OK(ctx, clembed_matrix_create(ctx, 1, R * C, DT[t], &row));
      OK(ctx, init(ctx, normal, &col, 99));
      OK(ctx, init(ctx, normal, &row, 99));
      void *pc = read_raw(ctx, &col), *pr = read_raw(ctx, &row);
      EXPECT(!memcmp(pd, pc, R * C * es), "%s %s: (R*C) x 1 differs from R x C", normal ? "normal" : "uniform", DN[t]);
      EXPECT(!memcmp(pd, pr, R * C * es), "%s %s: 1 x (R*C) differs from R x C", normal ? "normal" : "uniform", DN[t]);
      free(fill);
      free(pd);
      free(pw);
      free(pc);
      free(pr);
      clembed_matrix_release(&dense);
      clembed_matrix_release(&whole);
      clembed_matrix_release(&col);
      clembed_matrix_release(&row);
    }
}

/* The _at variants: a table initialised piece by piece, cut at any rows
 * (first Philox index of a piece not a multiple of 4, or of 64; pieces of 0
 * and 1 rows; a strided piece), holds the bytes of one whole call; rows past
 * 2^32 / cols take the counter's high word; the reference at each index. */
TU_CASE(init_at_pieces_equal_the_whole) {
  size_t R = tu_small ? 23 : 151, C = 7, pad = 3;
  const size_t cuts[] = {0, 1, 1, 2, 5, 9, 10, R - 3, R};
  for (int normal = 0; normal < 2; normal++)
    for (int t = 0; t < 3; t++) {
      clembed_matrix whole = {0}, back = {0};
      size_t es = clembed_dtype_size(DT[t]);
      OK(ctx, clembed_matrix_create(ctx, R, C, DT[t], &whole));
      OK(ctx, clembed_matrix_create(ctx, R, C + pad, DT[t], &back));
      OK(ctx, init(ctx, normal, &whole, 5));
      for (size_t k = 0; k + 1 < sizeof cuts / sizeof cuts[0]; k++) {
        /* the piece as its own dense matrix, and as a strided window of `back` */
        size_t r0 = cuts[k], n = cuts[k + 1] - r0;
        clembed_matrix piece = {0}, win = {back.buffer, r0 * (C + pad), n, C, C + pad, DT[t]};
        OK(ctx, clembed_matrix_create(ctx, n, C, DT[t], &piece));
        if (normal) {
          OK(ctx, clembed_matrix_init_normal_at(ctx, &piece, r0, 0.25f, 1.5f, 5, 0, NULL, NULL));
          OK(ctx, clembed_matrix_init_normal_at(ctx, &win, r0, 0.25f, 1.5f, 5, 0, NULL, NULL));
        } else {
          OK(ctx, clembed_matrix_init_uniform_at(ctx, &piece, r0, -0.5f, 2.0f, 5, 0, NULL, NULL));
          OK(ctx, clembed_matrix_init_uniform_at(ctx, &win, r0, -0.5f, 2.0f, 5, 0, NULL, NULL));
        }
        clembed_matrix rows = {whole.buffer, r0 * C, n, C, 0, DT[t]};
        void *pw = read_raw(ctx, &rows), *pp = read_raw(ctx, &piece), *pv = read_raw(ctx, &win);
        EXPECT(!memcmp(pw, pp, n * C * es), "%s %s: rows %zu .. %zu initialised alone differ from the whole table's",
               normal ? "normal" : "uniform", DN[t], r0, r0 + n);
        EXPECT(!memcmp(pw, pv, n * C * es), "%s %s: rows %zu .. %zu as a strided window differ from the whole table's",
               normal ? "normal" : "uniform", DN[t], r0, r0 + n);
        free(pw);
        free(pp);
        free(pv);
        clembed_matrix_release(&piece);
      }
      /* the pad columns between the windows were never written */
      float *all = tu_read_f32(ctx, &back);
      size_t touched = 0;
      for (size_t r = 0; r < R; r++)
        for (size_t c = C; c < C + pad; c++) touched += all[r * (C + pad) + c] != 0.0f;
      EXPECT(touched == 0, "%s %s: %zu pad elements between the windows were written", normal ? "normal" : "uniform",
             DN[t], touched);
      free(all);
      clembed_matrix_release(&whole);
      clembed_matrix_release(&back);
    }
  /* far rows: element indices past 2^32 and near 2^40, against the reference */
  check_values_at(ctx, 0, ((uint64_t)1 << 32) / 5 - 1, 9, 5, CLEMBED_F32, -1.0f, 1.0f, 21);
  check_values_at(ctx, 1, ((uint64_t)1 << 40) / 3 + 1, 9, 3, CLEMBED_F32, 0.0f, 1.0f, 22);
  check_values_at(ctx, 1, 123, 40, 67, CLEMBED_BF16, 0.0f, 0.02f, 23);
  /* (first_row + rows) * cols past 2^63: refused, naming first_row */
  clembed_matrix m = {0};
  clembed_error_detail d;
  OK(ctx, clembed_matrix_create(ctx, 4, 8, CLEMBED_F32, &m));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT,
        clembed_matrix_init_normal_at(ctx, &m, ((uint64_t)1 << 60) - 1, 0.0f, 1.0f, 1, 0, NULL, NULL));
  clembed_context_error(ctx, &d);
  EXPECT(!strcmp(d.argument, "first_row"), "the refusal names '%s', not first_row", d.argument);
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_init_uniform_at(ctx, &m, UINT64_MAX, 0.0f, 1.0f, 1, 0, NULL, NULL));
  OK(ctx, clembed_matrix_init_uniform_at(ctx, &m, ((uint64_t)1 << 60) - 4, 0.0f, 1.0f, 1, 0, NULL, NULL));
  clembed_matrix_release(&m);
}

TU_CASE(moments_of_a_large_table) {
  size_t N = tu_small ? ((size_t)1 << 14) : ((size_t)1 << 20), C = 64;
  clembed_matrix m = {0};
  float *g = malloc(N * sizeof *g);
  OK(ctx, clembed_matrix_create(ctx, N / C, C, CLEMBED_F32, &m));

  /* uniform(-2, 3): mean 0.5, variance 25/12, every value in [low, high], flat */
  OK(ctx, clembed_matrix_init_uniform(ctx, &m, -2.0f, 3.0f, 2024, 0, NULL, NULL));
  OK(ctx, clembed_matrix_read(ctx, &m, g, CLEMBED_F32));
  double s = 0, s2 = 0, lo = INFINITY, hi = -INFINITY;
  size_t bins[10] = {0};
  for (size_t i = 0; i < N; i++) {
    s += g[i];
    if (g[i] < lo) lo = g[i];
    if (g[i] > hi) hi = g[i];
    int b = (int)((g[i] + 2.0) / 0.5);
    bins[b < 0 ? 0 : b > 9 ? 9 : b]++;
  }
  double mean = s / (double)N;
  for (size_t i = 0; i < N; i++) s2 += (g[i] - mean) * (g[i] - mean);
  double var = s2 / (double)(N - 1), var_ref = 25.0 / 12.0;
  EXPECT(fabs(mean - 0.5) <= 4.0 * sqrt(var_ref / (double)N), "uniform mean %.6f, expected 0.5 +- %.6f", mean,
         4.0 * sqrt(var_ref / (double)N));
  EXPECT(fabs(var / var_ref - 1.0) <= 0.05, "uniform variance %.6f, expected %.6f within 5%%", var, var_ref);
  EXPECT(lo >= -2.0 && hi <= 3.0, "uniform values outside [-2, 3]: [%g, %g]", lo, hi);
  EXPECT(lo < -1.99 && hi > 2.99, "uniform values do not reach the ends: [%g, %g]", lo, hi);
  double binsig = sqrt((double)N * 0.1 * 0.9);
  for (int b = 0; b < 10; b++)
    EXPECT(fabs((double)bins[b] - 0.1 * (double)N) <= 4.0 * binsig, "uniform bin %d holds %zu, expected %.0f +- %.0f",
           b, bins[b], 0.1 * (double)N, 4.0 * binsig);
  printf("uniform(-2, 3): mean %.5f variance %.5f (N %zu)\n", mean, var, N);

  /* normal(0.5, 2): mean, variance, and the fraction within one std (0.682689) */
  OK(ctx, clembed_matrix_init_normal(ctx, &m, 0.5f, 2.0f, 77, 0, NULL, NULL));
  OK(ctx, clembed_matrix_read(ctx, &m, g, CLEMBED_F32));
  s = 0;
  s2 = 0;
  size_t within = 0, finite = 0;
  for (size_t i = 0; i < N; i++) {
    s += g[i];
    within += fabs(g[i] - 0.5) < 2.0;
    finite += isfinite(g[i]) != 0;
  }
  mean = s / (double)N;
  for (size_t i = 0; i < N; i++) s2 += (g[i] - mean) * (g[i] - mean);
  var = s2 / (double)(N - 1);
  EXPECT(finite == N, "%zu normal values are not finite", N - finite);
  EXPECT(fabs(mean - 0.5) <= 4.0 * 2.0 / sqrt((double)N), "normal mean %.6f, expected 0.5 +- %.6f", mean,
         4.0 * 2.0 / sqrt((double)N));
  EXPECT(fabs(var / 4.0 - 1.0) <= 0.05, "normal variance %.6f, expected 4 within 5%%", var);
  double p1 = 0.682689492, fr = (double)within / (double)N, sig1 = sqrt(p1 * (1 - p1) / (double)N);
  EXPECT(fabs(fr - p1) <= 4.0 * sig1, "normal: %.5f within one std, expected %.5f +- %.5f", fr, p1, 4.0 * sig1);
  printf("normal(0.5, 2): mean %.5f variance %.5f within 1 std %.5f (N %zu)\n", mean, var, fr, N);
  free(g);
  clembed_matrix_release(&m);
}

TU_CASE(events_and_argument_errors) {
  const int INV = CLEMBED_ERR_INVALID_ARGUMENT;
  clembed_matrix m = {0}, bad;
  OK(ctx, clembed_matrix_create(ctx, 4, 5, CLEMBED_F32, &m));
  /* low > high, non-finite parameters, negative std */
  FAILS(ctx, INV, clembed_matrix_init_uniform(ctx, &m, 1.0f, 0.0f, 1, 0, NULL, NULL));
  EXPECT(strstr(clembed_context_message(ctx), "low") != NULL, "message: %s", clembed_context_message(ctx));
  const float nf[3] = {NAN, INFINITY, -INFINITY};
  for (int k = 0; k < 3; k++) {
    FAILS(ctx, INV, clembed_matrix_init_uniform(ctx, &m, nf[k], 1.0f, 1, 0, NULL, NULL));
    FAILS(ctx, INV, clembed_matrix_init_uniform(ctx, &m, -1.0f, nf[k], 1, 0, NULL, NULL));
    FAILS(ctx, INV, clembed_matrix_init_normal(ctx, &m, nf[k], 1.0f, 1, 0, NULL, NULL));
    FAILS(ctx, INV, clembed_matrix_init_normal(ctx, &m, 0.0f, nf[k], 1, 0, NULL, NULL));
  }
  FAILS(ctx, INV, clembed_matrix_init_uniform(ctx, &m, -INFINITY, INFINITY, 1, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_matrix_init_normal(ctx, &m, 0.0f, -1.0f, 1, 0, NULL, NULL));
  EXPECT(strstr(clembed_context_message(ctx), "std") != NULL, "message: %s", clembed_context_message(ctx));
  FAILS(ctx, INV, clembed_matrix_init_normal(ctx, &m, 0.0f, -1e-30f, 1, 0, NULL, NULL));
  /* a range whose width overflows float gives inf * u: rejected or finite, never inf/NaN values */
  {
    clembed_status s = clembed_matrix_init_uniform(ctx, &m, -3e38f, 3e38f, 1, 0, NULL, NULL);
    if (s == CLEMBED_OK) {
      float g[20];
      OK(ctx, clembed_matrix_read(ctx, &m, g, CLEMBED_F32));
      int nonfinite = 0;
      for (int i = 0; i < 20; i++) nonfinite += !isfinite(g[i]);
      EXPECT(nonfinite == 0, "uniform(-3e38, 3e38) wrote %d non-finite values", nonfinite);
    } else {
      EXPECT(s == INV, "uniform(-3e38, 3e38): %s", clembed_status_string(s));
    }
  }
  /* NULL and bad matrices */
  FAILS(NULL, INV, clembed_matrix_init_uniform(NULL, &m, 0.0f, 1.0f, 1, 0, NULL, NULL));
  FAILS(NULL, INV, clembed_matrix_init_normal(NULL, &m, 0.0f, 1.0f, 1, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_matrix_init_uniform(ctx, NULL, 0.0f, 1.0f, 1, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_matrix_init_normal(ctx, NULL, 0.0f, 1.0f, 1, 0, NULL, NULL));
  bad = m;
  bad.buffer = NULL;
  FAILS(ctx, INV, clembed_matrix_init_uniform(ctx, &bad, 0.0f, 1.0f, 1, 0, NULL, NULL));
  bad = m;
  bad.dtype = (clembed_dtype)99;
  FAILS(ctx, INV, clembed_matrix_init_normal(ctx, &bad, 0.0f, 1.0f, 1, 0, NULL, NULL));
  bad = m;
  bad.ld = 4;
  FAILS(ctx, INV, clembed_matrix_init_uniform(ctx, &bad, 0.0f, 1.0f, 1, 0, NULL, NULL));
  bad = m;
  bad.rows = 5;
  FAILS(ctx, INV, clembed_matrix_init_normal(ctx, &bad, 0.0f, 1.0f, 1, 0, NULL, NULL));
  /* event wait lists */
  cl_event none = NULL, ev = NULL;
  FAILS(ctx, INV, clembed_matrix_init_uniform(ctx, &m, 0.0f, 1.0f, 1, 1, NULL, NULL));
  FAILS(ctx, INV, clembed_matrix_init_uniform(ctx, &m, 0.0f, 1.0f, 1, 0, &none, NULL));
  FAILS(ctx, INV, clembed_matrix_init_normal(ctx, &m, 0.0f, 1.0f, 1, 1, &none, NULL));
  /* the failed calls wrote nothing: m still holds zeros or the last good init */
  OK(ctx, clembed_matrix_init_uniform(ctx, &m, 0.0f, 1.0f, 3, 0, NULL, &ev));
  EXPECT(ev != NULL, "no event");
  if (ev) {
    cl_event ev2 = NULL;
    OK(ctx, clembed_matrix_init_normal(ctx, &m, 0.0f, 1.0f, 3, 1, &ev, &ev2));
    if (ev2) {
      EXPECT(clWaitForEvents(1, &ev2) == CL_SUCCESS, "wait");
      clReleaseEvent(ev2);
    }
    clReleaseEvent(ev);
  }
  float g[20];
  OK(ctx, clembed_matrix_read(ctx, &m, g, CLEMBED_F32));
  size_t bad_n = 0;
  for (size_t e = 0; e < 20; e++) {
    double z = ref_normal_z(3, e);
    if (!(fabs(g[e] - z) <= normal_tol(0.0f, 1.0f, z))) bad_n++;
  }
  EXPECT(bad_n == 0, "the normal init after a wait on the uniform init: %zu wrong", bad_n);
  /* an empty matrix with an event: the event completes */
  clembed_matrix z = {0};
  OK(ctx, clembed_matrix_create(ctx, 0, 3, CLEMBED_F16, &z));
  ev = NULL;
  OK(ctx, clembed_matrix_init_normal(ctx, &z, 0.0f, 1.0f, 3, 0, NULL, &ev));
  if (ev) {
    EXPECT(clWaitForEvents(1, &ev) == CL_SUCCESS, "wait on an empty init");
    clReleaseEvent(ev);
  }
  OK(ctx, clembed_finish(ctx));
  clembed_matrix_release(&z);
  clembed_matrix_release(&m);
}

int main(int argc, char **argv) { return tu_main(argc, argv, (tu_suite){.name = "test_init", .device = 1}); }
