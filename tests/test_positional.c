/* clembed_positional against the exact float64 reference of reference.h
 * (p*w formed and reduced exactly) for the formula of include/clembed.h:
 *   d = cols, h = ceil(d/2); column i of position p is
 *   INTERLEAVED: sin(p*w) for even i, cos(p*w) for odd i, with
 *                w = base^(-2*floor(i/2)/d) (PAIR) or base^(-i/d) (INDEX);
 *   HALVES:      sin(p*w_i) for i < h, cos(p*w_(i-h)) for i >= h, w_k = base^(-2k/d).
 * Tolerances:
 *   F32 output: |got - exact| <= 1e-6 for every position below 2^32 (the contract);
 *   F16/BF16:   got is within one ulp (of that dtype) of the dtype's rounding of
 *               the exact value, or is the rounding of a value within 1e-6 of it
 *               (the F32 contract followed by one rounding; this matters only for
 *               tiny values, where a BF16 ulp is below 1e-6).
 * Covered: every variant, odd d (1, 3, 7, 37), base 10000, 5 and 2.5, first
 * position 0, 1000 and far positions up to 2^20-1 (every position below 2^20 for
 * d = 8 in the normal run; full rows of d = 4096 at sampled positions), positions
 * near 2^24, 2^28, 2^31 and up to 2^32 - 1 for bases 1, 2, 10000, 500000 and
 * 1e6 (float32's p*w error printed beside), the refusal at 2^32, ld and
 * offset windows, the tutorial's numbers, the frequency cache, events and wait
 * lists, and every argument error; and the CPU shapes (a row per work-item,
 * the vector sinusoid) give the same bits as the GPU shapes (one element per
 * work-item). */
#include "test_util.h"

static const char *DN[3] = {"F32", "F16", "BF16"};
#define P20 ((size_t)1 << 20)

/* ------------------------------------------------------------ reference */

/* One ulp of dtype t at the magnitude of v. */
static double ulp_of(double v, clembed_dtype t) {
  double a = fabs(v);
  if (t == CLEMBED_F16) return a < ldexp(1.0, -14) ? ldexp(1.0, -24) : ldexp(1.0, ilogb(a) - 10);
  if (t == CLEMBED_BF16) return a < ldexp(1.0, -126) ? ldexp(1.0, -133) : ldexp(1.0, ilogb(a) - 7);
  return a < ldexp(1.0, -126) ? ldexp(1.0, -149) : ldexp(1.0, ilogb(a) - 23);
}

/* Is `got` (read back as float) acceptable for the exact value `ref`? */
static int acceptable(float got, double ref, clembed_dtype t, double *err) {
  *err = fabs((double)got - ref);
  if (isnan(got)) return 0;
  if (t == CLEMBED_F32) return *err <= 1e-6;
  double r = (double)ref_round((float)ref, t);
  if (fabs((double)got - r) <= ulp_of(ref, t)) return 1;
  float lo = ref_round((float)(ref - 1e-6), t), hi = ref_round((float)(ref + 1e-6), t);
  return got >= lo && got <= hi;
}

typedef struct stats {
  double max_err;
  size_t checked, bad;
} stats;

static stats g_stats; /* over every case that runs: printed at the end */

/* ------------------------------------------------------------ one call */

/* Positional table of `rows` x `d` from `first` into an output of dtype t with
 * `pad` extra columns per row and `off` leading elements (both filled with a
 * sentinel that must survive), compared with the reference. s NULL: defaults. */
static void run(clembed_context *ctx, const clembed_sinusoid *s, size_t first, size_t rows, size_t d,
                clembed_dtype t, size_t pad, size_t off, stats *st) {
  clembed_sinusoid def = {sizeof(clembed_sinusoid), 10000.0, CLEMBED_EXPONENT_PAIR, CLEMBED_LAYOUT_INTERLEAVED};
  const clembed_sinusoid *rs = s ? s : &def;
  size_t ld = d + pad, total = off + rows * ld;
  clembed_matrix whole = {0};
  OK(ctx, clembed_matrix_create(ctx, 1, total ? total : 1, t, &whole));
  float *all = malloc((total ? total : 1) * sizeof *all);
  for (size_t i = 0; i < total; i++) all[i] = 777.0f;
  if (pad || off) OK(ctx, clembed_matrix_write(ctx, &whole, all, CLEMBED_F32));
  clembed_matrix out = {whole.buffer, off, rows, d, ld, t};
  clembed_status sc = clembed_positional(ctx, s, first, &out, 0, NULL, NULL);
  EXPECT(sc == CLEMBED_OK, "positional(base %g, exp %d, layout %d, first %zu, %zux%zu %s): %s: %s", rs->base,
         rs->exponent, rs->layout, first, rows, d, DN[t], clembed_status_string(sc), clembed_context_message(ctx));
  OK(ctx, clembed_matrix_read(ctx, &whole, all, CLEMBED_F32));
  size_t bad = 0, outside = 0;
  double worst = 0.0;
  for (size_t e = 0; e < total; e++) {
    int in = e >= off && (e - off) / ld < rows && (e - off) % ld < d;
    if (!in) {
      if (all[e] != ref_round(777.0f, t)) outside++;
      continue;
    }
    size_t r = (e - off) / ld, c = (e - off) % ld;
    double ref = ref_sinusoid(rs, d, first + r, c), err;
    if (!acceptable(all[e], ref, t, &err)) {
      if (bad < 3)
        fprintf(stderr, "  base %g exp %d layout %d d %zu %s: position %zu column %zu: got %.9g want %.12g (err %.3g)\n",
                rs->base, rs->exponent, rs->layout, d, DN[t], first + r, c, all[e], ref, err);
      bad++;
    }
    if (err > worst) worst = err;
  }
  EXPECT(bad == 0, "base %g exp %d layout %d first %zu rows %zu d %zu %s: %zu of %zu wrong (max err %.3g)", rs->base,
         rs->exponent, rs->layout, first, rows, d, DN[t], bad, rows * d, worst);
  EXPECT(outside == 0, "%zu elements outside the window were written (pad %zu off %zu)", outside, pad, off);
  if (st) {
    if (t == CLEMBED_F32 && worst > st->max_err) st->max_err = worst;
    st->checked += rows * d;
    st->bad += bad;
  }
  free(all);
  clembed_matrix_release(&whole);
}

static const clembed_sinusoid VARIANTS[3] = {{sizeof(clembed_sinusoid), 10000.0, CLEMBED_EXPONENT_PAIR, CLEMBED_LAYOUT_INTERLEAVED},
                                             {sizeof(clembed_sinusoid), 10000.0, CLEMBED_EXPONENT_INDEX, CLEMBED_LAYOUT_INTERLEAVED},
                                             {sizeof(clembed_sinusoid), 10000.0, CLEMBED_EXPONENT_PAIR, CLEMBED_LAYOUT_HALVES}};

/* Every variant x d x base x first position. */
TU_CASE(every_variant_d_base_and_first_position) {
  stats *st = &g_stats;
  const size_t ds[] = {1, 2, 3, 7, 37, 64, 513};
  const double bases[] = {10000.0, 5.0, 2.5};
  const size_t firsts[] = {0, 1000, P20 - 24};
  size_t rows = tu_small ? 6 : 24;
  for (int v = 0; v < 3; v++)
    for (size_t a = 0; a < sizeof ds / sizeof *ds; a++)
      for (int b = 0; b < 3; b++)
        for (int f = 0; f < 3; f++) {
          if (tu_small && ds[a] > 64 && (b || f != 2)) continue;
          clembed_sinusoid s = VARIANTS[v];
          s.base = bases[b];
          run(ctx, &s, firsts[f], rows, ds[a], CLEMBED_F32, 0, 0, st);
        }
}

/* Far positions: sampled starts across [0, 2^20), full rows of large d. */
TU_CASE(far_positions_full_rows) {
  stats *st = &g_stats;
  size_t starts[64];
  size_t ns = 0;
  starts[ns++] = P20 - 2; /* covers 2^20 - 1 */
  starts[ns++] = P20 - 17;
  starts[ns++] = 524288 + 123;
  starts[ns++] = 524288 - 1;
  starts[ns++] = 65535;
  starts[ns++] = 4095; /* where the angle's split into high and low parts changes */
  starts[ns++] = 4096 * 37 - 1;
  starts[ns++] = 999983;
  starts[ns++] = 710; /* p*w near a multiple of 2*pi for w = 1 (710 ~ 113*2*pi) */
  starts[ns++] = 104348 - 1; /* 104348 ~ 16607*2*pi: a hard reduction case */
  starts[ns++] = 833719 - 1; /* 833719 ~ 132692*2*pi */
  uint64_t rng = 7;
  size_t want = tu_small ? 20 : 48;
  while (ns < want) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    starts[ns++] = (size_t)((rng >> 20) % (P20 - 2));
  }
  size_t d = tu_small ? 1024 : 4096, rows = 2;
  for (int v = 0; v < 3; v++)
    for (size_t k = 0; k < ns; k++) {
      if (tu_small && v && k % 2) continue;
      run(ctx, &VARIANTS[v], starts[k], rows, d, CLEMBED_F32, 0, 0, st);
    }
  /* up to 2^32 - 1 (the last position), for bases 1, 2, 10000, 500000 and 1e6 */
  const size_t big[] = {P20 - 3,
                        ((size_t)1 << 24) - 3,
                        ((size_t)1 << 28) - 3,
                        ((size_t)1 << 31) - 3,
                        ((size_t)1 << 31) + 77777,
                        ((size_t)1 << 32) - 6,
                        3141592653u,
                        4000000000u};
  const double bases[] = {1.0, 2.0, 10000.0, 500000.0, 1e6};
  stats far = {0};
  for (int v = 0; v < 3; v++)
    for (size_t b = 0; b < 5; b++)
      for (size_t k = 0; k < sizeof big / sizeof *big; k++) {
        clembed_sinusoid s = VARIANTS[v];
        s.base = bases[b];
        run(ctx, &s, big[k], 6, tu_small ? 64 : 333, CLEMBED_F32, 0, 0, &far);
      }
  /* what float32 p*w (as most libraries compute it) gives at those positions, for comparison */
  double f32_worst = 0.0;
  for (size_t k = 0; k < sizeof big / sizeof *big; k++)
    for (size_t i = 0; i < 64; i++) {
      int is_cos;
      clembed_sinusoid s = {sizeof(clembed_sinusoid), 10000.0, CLEMBED_EXPONENT_PAIR, CLEMBED_LAYOUT_INTERLEAVED};
      double w = ref_sinusoid_freq(&s, 64, i, &is_cos);
      float a = (float)big[k] * (float)w;
      double e = fabs((is_cos ? (double)cosf(a) : (double)sinf(a)) - ref_sinusoid(&s, 64, big[k], i));
      if (e > f32_worst) f32_worst = e;
    }
  printf("positions up to 2^32 - 1, bases 1 to 1e6: %zu values, max error %.3g (limit 1e-6); float32 p*w: max "
         "error %.3g\n",
         far.checked, far.max_err, f32_worst);
  st->checked += far.checked;
  st->bad += far.bad;
  if (far.max_err > st->max_err) st->max_err = far.max_err;
}

/* Every position below 2^20 for a few frequencies (d = 8: w = 1, 0.1, 0.01, 0.001
 * for PAIR; d = 5 INDEX: w = base^(-i/5)), in chunks. Normal run only. */
TU_CASE(every_position_below_2_to_the_20) {
  stats *st = &g_stats;
  if (tu_small) {
    tu_skip("normal run only");
    return;
  }
  const struct {
    clembed_sinusoid s;
    size_t d;
  } cfg[2] = {{{sizeof(clembed_sinusoid), 10000.0, CLEMBED_EXPONENT_PAIR, CLEMBED_LAYOUT_INTERLEAVED}, 8},
              {{sizeof(clembed_sinusoid), 10000.0, CLEMBED_EXPONENT_INDEX, CLEMBED_LAYOUT_INTERLEAVED}, 5}};
  size_t chunk = (size_t)1 << 18;
  for (int k = 0; k < 2; k++) {
    size_t d = cfg[k].d;
    clembed_matrix m = {0};
    float *g = malloc(chunk * d * sizeof *g);
    OK(ctx, clembed_matrix_create(ctx, chunk, d, CLEMBED_F32, &m));
    size_t bad = 0;
    double worst = 0.0;
    size_t worst_p = 0, worst_c = 0;
    for (size_t first = 0; first < P20; first += chunk) {
      OK(ctx, clembed_positional(ctx, &cfg[k].s, first, &m, 0, NULL, NULL));
      OK(ctx, clembed_matrix_read(ctx, &m, g, CLEMBED_F32));
      for (size_t r = 0; r < chunk; r++)
        for (size_t c = 0; c < d; c++) {
          double ref = ref_sinusoid(&cfg[k].s, d, first + r, c);
          double err = fabs((double)g[r * d + c] - ref);
          if (!(err <= 1e-6)) bad++;
          if (err > worst || isnan(err)) {
            worst = err;
            worst_p = first + r;
            worst_c = c;
          }
        }
    }
    EXPECT(bad == 0, "every position below 2^20, d %zu exp %d: %zu values off by more than 1e-6 (worst %.3g at "
           "position %zu column %zu)", d, cfg[k].s.exponent, bad, worst, worst_p, worst_c);
    printf("every position below 2^20, d %zu exponent %d: max error %.3g at position %zu column %zu\n", d,
           cfg[k].s.exponent, worst, worst_p, worst_c);
    if (worst > st->max_err) st->max_err = worst;
    st->checked += P20 * d;
    st->bad += bad;
    clembed_matrix_release(&m);
    free(g);
  }
}

/* F16 and BF16 outputs, and ld/offset windows. */
TU_CASE(f16_bf16_outputs_and_windows) {
  stats *st = &g_stats;
  const clembed_dtype ts[2] = {CLEMBED_F16, CLEMBED_BF16};
  for (int t = 0; t < 2; t++)
    for (int v = 0; v < 3; v++) {
      run(ctx, &VARIANTS[v], 0, 16, 37, ts[t], 0, 0, st);
      run(ctx, &VARIANTS[v], 1000, 8, 64, ts[t], 3, 5, st);
      run(ctx, &VARIANTS[v], P20 - 8, 8, tu_small ? 128 : 1024, ts[t], 0, 0, st);
    }
  run(ctx, &VARIANTS[0], 7, 9, 5, CLEMBED_F32, 4, 13, st);
  run(ctx, &VARIANTS[2], 3, 5, 7, CLEMBED_F32, 1, 1, st);
  run(ctx, &VARIANTS[1], 0, 1, 1, CLEMBED_F32, 0, 3, st);
  /* NULL sinusoid: the defaults */
  run(ctx, NULL, 0, 10, 16, CLEMBED_F32, 0, 0, st);
  run(ctx, NULL, 123456, 4, 33, CLEMBED_F16, 2, 2, st);
  /* zero rows, zero cols */
  run(ctx, &VARIANTS[0], 5, 0, 8, CLEMBED_F32, 0, 0, st);
  run(ctx, &VARIANTS[0], 5, 3, 0, CLEMBED_F32, 0, 0, st);
}

/* The tutorial: base 5, INDEX, INTERLEAVED, d 10: row 1 begins 0.84147, 0.65898, 0.66297. */
TU_CASE(tutorial_numbers) {
  clembed_sinusoid s = {sizeof(clembed_sinusoid), 5.0, CLEMBED_EXPONENT_INDEX, CLEMBED_LAYOUT_INTERLEAVED};
  clembed_matrix m = {0};
  float g[3 * 10];
  OK(ctx, clembed_matrix_create(ctx, 3, 10, CLEMBED_F32, &m));
  OK(ctx, clembed_positional(ctx, &s, 0, &m, 0, NULL, NULL));
  OK(ctx, clembed_matrix_read(ctx, &m, g, CLEMBED_F32));
  const float want[3] = {0.84147f, 0.65898f, 0.66297f};
  for (int c = 0; c < 3; c++)
    EXPECT(fabsf(g[10 + c] - want[c]) <= 5e-6f, "tutorial row 1 column %d: %.6f, expected %.5f", c, g[10 + c],
           want[c]);
  /* row 0: sin(0) = 0, cos(0) = 1 exactly */
  for (int c = 0; c < 10; c++)
    EXPECT(g[c] == (c % 2 ? 1.0f : 0.0f), "row 0 column %d: %.9g", c, g[c]);
  clembed_matrix_release(&m);
}

/* Several configurations enqueued before anything is read: more than the
 * library caches frequencies for, on outputs of different widths. */
TU_CASE(queued_configurations) {
  enum { K = 7 };
  clembed_matrix m[K];
  clembed_sinusoid s[K];
  size_t d[K] = {8, 9, 8, 16, 8, 31, 8};
  for (int k = 0; k < K; k++) {
    s[k] = VARIANTS[k % 3];
    s[k].base = 10.0 + 100.0 * k;
    OK(ctx, clembed_matrix_create(ctx, 20, d[k], CLEMBED_F32, &m[k]));
  }
  for (int rep = 0; rep < 2; rep++)
    for (int k = 0; k < K; k++) OK(ctx, clembed_positional(ctx, &s[k], 100 * (size_t)k, &m[k], 0, NULL, NULL));
  for (int k = 0; k < K; k++) {
    float g[20 * 31];
    OK(ctx, clembed_matrix_read(ctx, &m[k], g, CLEMBED_F32));
    size_t bad = 0;
    for (size_t r = 0; r < 20; r++)
      for (size_t c = 0; c < d[k]; c++) {
        double ref = ref_sinusoid(&s[k], d[k], 100 * (size_t)k + r, c);
        if (!(fabs(g[r * d[k] + c] - ref) <= 1e-6)) bad++;
      }
    EXPECT(bad == 0, "queued configuration %d (base %g, d %zu): %zu wrong", k, s[k].base, d[k], bad);
    clembed_matrix_release(&m[k]);
  }
}

TU_CASE(events_and_wait_lists) {
  const int INV = CLEMBED_ERR_INVALID_ARGUMENT;
  clembed_matrix m = {0};
  OK(ctx, clembed_matrix_create(ctx, 4, 6, CLEMBED_F32, &m));
  cl_event ev = NULL, dummy = NULL;
  FAILS(ctx, INV, clembed_positional(ctx, NULL, 0, &m, 1, NULL, NULL));
  EXPECT(strstr(clembed_context_message(ctx), "event_wait_list") != NULL, "message: %s", clembed_context_message(ctx));
  FAILS(ctx, INV, clembed_positional(ctx, NULL, 0, &m, 0, &dummy, NULL));
  FAILS(ctx, INV, clembed_positional(ctx, NULL, 0, &m, 1, &dummy, NULL)); /* a NULL event in the list */

  /* the returned event completes and is the caller's */
  OK(ctx, clembed_positional(ctx, NULL, 0, &m, 0, NULL, &ev));
  EXPECT(ev != NULL, "no event");
  if (ev) {
    EXPECT(clWaitForEvents(1, &ev) == CL_SUCCESS, "wait");
    cl_int st = -1;
    clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
    EXPECT(st == CL_COMPLETE, "status %d", st);
    clReleaseEvent(ev);
    ev = NULL;
  }

  /* a wait list is honoured: held back by a user event (where the device's user events allow it) */
  cl_context cc = NULL;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_CONTEXT, sizeof cc, &cc, NULL);
  cl_int err;
  cl_event ue = clCreateUserEvent(cc, &err);
  EXPECT(err == CL_SUCCESS, "clCreateUserEvent %d", err);
  cl_device_id dev = NULL;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  if (err == CL_SUCCESS && tu_user_events_gate(dev)) {
    clembed_sinusoid s = {sizeof(clembed_sinusoid), 5.0, CLEMBED_EXPONENT_INDEX, CLEMBED_LAYOUT_INTERLEAVED};
    OK(ctx, clembed_positional(ctx, &s, 1, &m, 1, &ue, &ev));
    if (ev) {
      cl_int st = -1;
      clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
      EXPECT(st != CL_COMPLETE, "completed before its wait list");
      clSetUserEventStatus(ue, CL_COMPLETE);
      EXPECT(clWaitForEvents(1, &ev) == CL_SUCCESS, "wait");
      clReleaseEvent(ev);
      ev = NULL;
    } else {
      clSetUserEventStatus(ue, CL_COMPLETE);
    }
    float g[24];
    OK(ctx, clembed_matrix_read(ctx, &m, g, CLEMBED_F32));
    EXPECT(fabs(g[0] - sin(1.0)) <= 1e-6, "row 0 (position 1): %.9g", g[0]);
    clReleaseEvent(ue);
  } else if (err == CL_SUCCESS) {
    clReleaseEvent(ue);
  }
  /* zero rows with an event: the event still completes */
  clembed_matrix z = {0};
  OK(ctx, clembed_matrix_create(ctx, 0, 6, CLEMBED_F32, &z));
  OK(ctx, clembed_positional(ctx, NULL, 0, &z, 0, NULL, &ev));
  EXPECT(ev != NULL, "no event for an empty output");
  if (ev) {
    EXPECT(clWaitForEvents(1, &ev) == CL_SUCCESS, "wait");
    clReleaseEvent(ev);
  }
  clembed_matrix_release(&z);
  clembed_matrix_release(&m);
}

TU_CASE(argument_errors) {
  const int INV = CLEMBED_ERR_INVALID_ARGUMENT;
  clembed_matrix m = {0}, bad;
  OK(ctx, clembed_matrix_create(ctx, 4, 6, CLEMBED_F32, &m));
  clembed_sinusoid s = {sizeof(clembed_sinusoid), 10000.0, CLEMBED_EXPONENT_PAIR, CLEMBED_LAYOUT_INTERLEAVED};
  FAILS(NULL, INV, clembed_positional(NULL, &s, 0, &m, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_positional(ctx, &s, 0, NULL, 0, NULL, NULL));
  const double bad_bases[] = {0.0, -0.0, -1.0, NAN, INFINITY, -INFINITY};
  for (int i = 0; i < 6; i++) {
    s.base = bad_bases[i];
    FAILS(ctx, INV, clembed_positional(ctx, &s, 0, &m, 0, NULL, NULL));
    EXPECT(strstr(clembed_context_message(ctx), "base") != NULL, "message for base %g: %s", bad_bases[i],
           clembed_context_message(ctx));
  }
  s.base = 10000.0;
  s.exponent = CLEMBED_EXPONENT_INDEX;
  s.layout = CLEMBED_LAYOUT_HALVES;
  FAILS(ctx, INV, clembed_positional(ctx, &s, 0, &m, 0, NULL, NULL));
  s.exponent = (clembed_exponent)2;
  s.layout = CLEMBED_LAYOUT_INTERLEAVED;
  FAILS(ctx, INV, clembed_positional(ctx, &s, 0, &m, 0, NULL, NULL));
  s.exponent = CLEMBED_EXPONENT_PAIR;
  s.layout = (clembed_layout)2;
  FAILS(ctx, INV, clembed_positional(ctx, &s, 0, &m, 0, NULL, NULL));
  s.layout = CLEMBED_LAYOUT_INTERLEAVED;
  /* first_position + rows - 1 overflows */
  FAILS(ctx, INV, clembed_positional(ctx, &s, SIZE_MAX - 1, &m, 0, NULL, NULL));
  bad = m;
  bad.buffer = NULL;
  FAILS(ctx, INV, clembed_positional(ctx, &s, 0, &bad, 0, NULL, NULL));
  bad = m;
  bad.dtype = (clembed_dtype)99;
  FAILS(ctx, INV, clembed_positional(ctx, &s, 0, &bad, 0, NULL, NULL));
  bad = m;
  bad.ld = 5;
  FAILS(ctx, INV, clembed_positional(ctx, &s, 0, &bad, 0, NULL, NULL));
  bad = m;
  bad.rows = 5;
  FAILS(ctx, INV, clembed_positional(ctx, &s, 0, &bad, 0, NULL, NULL));
  bad = m;
  bad.offset = 1;
  FAILS(ctx, INV, clembed_positional(ctx, &s, 0, &bad, 0, NULL, NULL));
  /* the output is unchanged by the failed calls (still zero) and the context works on */
  float g[24];
  OK(ctx, clembed_matrix_read(ctx, &m, g, CLEMBED_F32));
  int nz = 0;
  for (int i = 0; i < 24; i++) nz += g[i] != 0.0f;
  EXPECT(nz == 0, "a failed call wrote %d elements", nz);
  /* positions end at 2^32: the last one (2^32 - 1) is accepted, one past it refused */
  OK(ctx, clembed_positional(ctx, &s, ((size_t)1 << 32) - 4, &m, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_positional(ctx, &s, ((size_t)1 << 32) - 3, &m, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_positional(ctx, &s, (size_t)1 << 32, &m, 0, NULL, NULL));
  FAILS(ctx, INV, clembed_positional(ctx, &s, SIZE_MAX - 3, &m, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
  clembed_matrix_release(&m);
}

static void table_f32(clembed_context *ctx, const clembed_sinusoid *s, size_t first, size_t rows, size_t d,
                      float *host) {
  clembed_matrix m = {0};
  OK(ctx, clembed_matrix_create(ctx, rows, d, CLEMBED_F32, &m));
  OK(ctx, clembed_positional(ctx, s, first, &m, 0, NULL, NULL));
  OK(ctx, clembed_matrix_read(ctx, &m, host, CLEMBED_F32));
  clembed_matrix_release(&m);
}

TU_CASE(cpu_and_gpu_shapes_agree) {
  clembed_context *cpu, *gpu;
  if (!tu_shaped_pair(&cpu, &gpu)) return;
  const size_t ds[] = {1, 16, 37, 1024};
  const size_t firsts[] = {0, 123457, P20 - 50, ((size_t)1 << 32) - 64};
  const double bases[] = {10000.0, 5.0, 0.5};
  size_t rows = tu_small ? 8 : 64, same = 0, cases = 0;
  for (int v = 0; v < 3; v++)
    for (size_t a = 0; a < sizeof ds / sizeof ds[0]; a++)
      for (size_t f = 0; f < sizeof firsts / sizeof firsts[0]; f++)
        for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++) {
          clembed_sinusoid s = VARIANTS[v];
          s.base = bases[b];
          size_t d = ds[a];
          float *x = malloc(rows * d * sizeof *x), *y = malloc(rows * d * sizeof *y);
          table_f32(cpu, &s, firsts[f], rows, d, x);
          table_f32(gpu, &s, firsts[f], rows, d, y);
          int eq = memcmp(x, y, rows * d * sizeof *x) == 0;
          EXPECT(eq, "CPU and GPU shapes differ: variant %d, d %zu, first %zu, base %g", v, d, firsts[f], s.base);
          same += eq;
          cases++;
          free(x);
          free(y);
        }
  printf("CPU and GPU shapes: %zu of %zu tables identical bit for bit\n", same, cases);
  clembed_context_destroy(cpu);
  clembed_context_destroy(gpu);
}

static void report(clembed_context *ctx) {
  printf("positional: %zu values checked, %zu wrong, max F32 error %.3g (limit 1e-6)\n", g_stats.checked,
         g_stats.bad, g_stats.max_err);
}

int main(int argc, char **argv) {
  return tu_main(argc, argv, (tu_suite){.name = "test_positional", .device = 1, .teardown = report});
}
