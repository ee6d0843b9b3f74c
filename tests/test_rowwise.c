/* FBGEMM's row-wise quantized tables (I8_ROWWISE, I4_ROWWISE, I2_ROWWISE,
 * I8_TBE, I4_TBE, I2_TBE, FP8_ROWWISE) against FBGEMM's own code written out
 * plainly here: its reference quantizers (QuantUtils.cc's
 * FloatOrHalfToFused8BitRowwiseQuantizedSBFloatRef and
 * FloatOrHalfToFusedNBitRowwiseQuantizedSBHalfRef, fbgemm_gpu's quantize_embs
 * for the 8-bit TBE rows, quantize_fp8_rowwise.cu with quantize_ops_utils.h's
 * float_to_hfp8) byte for byte, and its dequantization (fma(q, scale, bias),
 * rw_hfp8_to_float(q) / scale) bit for bit; the lookups and bags against these
 * values in the contract's float32 order. (python/tests/test_rowwise.py checks
 * the same against fbgemm-gpu-cpu itself where it is installed.)
 *
 * Cases (all by default, or name some; `small` shrinks them for Oclgrind and rusticl):
 *   layout        row bytes, names, the cols each type takes, views of whole rows only
 *   quantize      clembed_matrix_write of F32 rows: FBGEMM's bytes; corner rows
 *                 (constant, zeros, a range past f16, tiny values, negatives)
 *   dequantize    random rows (any q, any finite scale and bias): clembed_matrix_read
 *                 gives fma(q, scale, bias) / hfp8(q) / scale, bit for bit
 *   lookup        clembed_lookup and clembed_embed (scale 2) on the device: the values
 *                 read back, bit for bit; a view of rows, a table in several buffers
 *   bags          clembed_embedding_bag SUM, weighted SUM, MAX bit for bit, MEAN
 *                 within an ulp of the float32 order; padding
 *   bags_multi    clembed_embedding_bags over every row-wise type, two widths of one
 *                 type, F32 and Q8_0 in one call: each feature's block is its own bag's bits
 *   quantize_rows clembed_quantize_rows of a device F32 matrix: the bytes of the write
 *   errors        what they refuse, naming the argument */
#include "test_util.h"

static const clembed_dtype RW[7] = {CLEMBED_I8_ROWWISE, CLEMBED_I4_ROWWISE, CLEMBED_I2_ROWWISE, CLEMBED_I8_TBE,
                                    CLEMBED_I4_TBE,     CLEMBED_I2_TBE,     CLEMBED_FP8_ROWWISE};
static const char *RW_NAME[7] = {"i8_rowwise", "i4_rowwise", "i2_rowwise", "i8_tbe", "i4_tbe", "i2_tbe", "fp8_rowwise"};

#include "rowwise_ref.h"

/* ------------------------------------------------------------ helpers */

static uint64_t rng = 0x5DEECE66DULL;
static float rnd(float lo, float hi) { return lo + (hi - lo) * (0.5f + 0.5f * tu_rand(&rng)); }
static uint32_t rnd32(void) { return tu_rand32(&rng); }

/* rows x cols float values, each row its own magnitude; a few special rows */
static float *values(size_t rows, size_t cols) {
  float *x = malloc((rows * cols + 1) * sizeof *x);
  for (size_t r = 0; r < rows; r++) {
    float mag = powf(10.0f, rnd(-3.0f, 3.0f));
    for (size_t j = 0; j < cols; j++) x[r * cols + j] = rnd(-mag, mag);
    if (r % 11 == 3) /* constant */
      for (size_t j = 0; j < cols; j++) x[r * cols + j] = 1.5f;
    if (r % 11 == 5) /* zeros */
      for (size_t j = 0; j < cols; j++) x[r * cols + j] = 0.0f;
    if (r % 11 == 7 && cols > 1) { /* a range past f16's largest, and tiny values */
      for (size_t j = 0; j < cols; j++) x[r * cols + j] = rnd(0.0f, 1e-6f);
      x[r * cols + cols / 2] = 1e6f;
    }
    if (r % 11 == 9) /* negatives only */
      for (size_t j = 0; j < cols; j++) x[r * cols + j] = rnd(-100.0f, -1.0f);
  }
  return x;
}

static clembed_matrix quantized(clembed_context *ctx, clembed_dtype d, const float *x, size_t rows, size_t cols) {
  clembed_matrix m = {0};
  OK(ctx, clembed_matrix_create(ctx, rows, cols, d, &m));
  if (rows && cols) OK(ctx, clembed_matrix_write(ctx, &m, x, CLEMBED_F32));
  return m;
}

static uint8_t *raw(clembed_context *ctx, const clembed_matrix *m) {
  uint8_t *h = malloc(m->rows * rw_row_bytes(m->dtype, m->cols) + 1);
  OK(ctx, clembed_matrix_read(ctx, m, h, m->dtype));
  return h;
}

static clembed_ids mk_ids(clembed_context *ctx, const int64_t *h, size_t n) {
  clembed_ids ids = {0};
  OK(ctx, clembed_ids_create(ctx, h, n, CLEMBED_I64, &ids));
  return ids;
}

/* the same bits, or both NaN (a NaN's payload is the device's); an INT4 or
 * INT2 row whose range is past f16's largest has an infinite scale, and its
 * values are NaN where q is 0, as in FBGEMM */
static int same_bits(float a, float b) {
  uint32_t x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  return x == y || (isnan(a) && isnan(b));
}

/* The widths a case runs: every one on the host; on the device (dev: a program
 * per width, compiled for each) vectors and tails, 1 .. 136, or with `full` all */
static size_t widths_of(clembed_dtype d, size_t *w, int dev) {
  static const size_t all[] = {1, 2, 3, 4, 8, 12, 16, 20, 40, 64, 100, 128, 136};
  size_t n = 0;
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
    size_t c = all[k];
    int take = !dev || tu_full ? !tu_small || k % 3 == 0 || c == 8
                               : tu_small ? c == 8 || c == 40 : c == 2 || c == 4 || c == 8 || c == 20 || c == 136;
    if (c % rw_cols_multiple(d) == 0 && take) w[n++] = c;
  }
  return n;
}
static size_t widths(clembed_dtype d, size_t *w) { return widths_of(d, w, 0); }
static size_t dev_widths(clembed_dtype d, size_t *w) { return widths_of(d, w, 1); }

/* ------------------------------------------------------------ cases */

TU_CASE(layout) {
  (void)ctx;
  for (int t = 0; t < 7; t++) {
    clembed_dtype d = RW[t];
    EXPECT(!strcmp(clembed_dtype_name(d), RW_NAME[t]), "%d named %s", (int)d, clembed_dtype_name(d));
    EXPECT(clembed_dtype_block_values(d) == 0 && clembed_dtype_size(d) == 0, "%s: block values, size", RW_NAME[t]);
    for (size_t c = 0; c <= 70; c++) {
      size_t want = c == 0 || c % rw_cols_multiple(d) ? 0 : rw_row_bytes(d, c); /* (at least 1 column) */
      EXPECT(clembed_dtype_row_bytes(d, c) == want, "%s: %zu cols: %zu bytes, not %zu", RW_NAME[t], c,
             clembed_dtype_row_bytes(d, c), want);
    }
  }
  EXPECT(clembed_dtype_row_bytes(CLEMBED_I8_ROWWISE, 128) == 136 && clembed_dtype_row_bytes(CLEMBED_I4_TBE, 128) == 68 &&
             clembed_dtype_row_bytes(CLEMBED_FP8_ROWWISE, 5) == 16,
         "FBGEMM's row sizes");
  EXPECT(!strcmp(clembed_dtype_name((clembed_dtype)32), "unknown"), "32 is past the list");
}

TU_CASE(quantize) {
  for (int t = 0; t < 7; t++) {
    size_t w[16], nw = widths(RW[t], w);
    for (size_t k = 0; k < nw; k++) {
      size_t rows = tu_small ? 12 : 40, cols = w[k], rb = rw_row_bytes(RW[t], cols);
      float *x = values(rows, cols);
      clembed_matrix m = quantized(ctx, RW[t], x, rows, cols);
      uint8_t *got = raw(ctx, &m), *want = malloc(rb);
      int bad = 0;
      for (size_t r = 0; r < rows && bad < 3; r++) {
        rw_ref_quantize(RW[t], x + r * cols, cols, want);
        if (memcmp(got + r * rb, want, rb)) {
          bad++;
          size_t b = 0;
          while (got[r * rb + b] == want[b]) b++;
          EXPECT(0, "%s, %zu cols, row %zu: byte %zu is %u, FBGEMM's %u", RW_NAME[t], cols, r, b, got[r * rb + b],
                 want[b]);
        }
      }
      EXPECT(!bad, "%s, %zu cols: every row FBGEMM's bytes", RW_NAME[t], cols);
      /* F16 host values: converted exactly to F32 first */
      uint16_t *h = malloc(rows * cols * 2 + 2);
      float *xr = malloc(rows * cols * 4 + 4);
      for (size_t i = 0; i < rows * cols; i++) {
        h[i] = ref_f32_to_f16(x[i]);
        xr[i] = ref_f16_to_f32(h[i]);
      }
      OK(ctx, clembed_matrix_write(ctx, &m, h, CLEMBED_F16));
      uint8_t *g16 = raw(ctx, &m);
      bad = 0;
      for (size_t r = 0; r < rows; r++) {
        rw_ref_quantize(RW[t], xr + r * cols, cols, want);
        bad += memcmp(g16 + r * rb, want, rb) != 0;
      }
      EXPECT(!bad, "%s, %zu cols: F16 host values quantized as their F32 values (%d rows differ)", RW_NAME[t], cols,
             bad);
      free(h);
      free(xr);
      free(g16);
      free(got);
      free(want);
      free(x);
      clembed_matrix_release(&m);
    }
  }
}

TU_CASE(dequantize) {
  for (int t = 0; t < 7; t++) {
    size_t w[16], nw = widths(RW[t], w);
    for (size_t k = 0; k < nw; k++) {
      size_t rows = tu_small ? 10 : 50, cols = w[k], rb = rw_row_bytes(RW[t], cols);
      uint8_t *h = malloc(rows * rb);
      for (size_t i = 0; i < rows * rb; i++) h[i] = (uint8_t)rnd32();
      for (size_t r = 0; r < rows; r++) { /* finite scales and biases of any magnitude */
        uint8_t *sb = h + r * rb + rw_sb_at(RW[t], cols);
        if (rw_sb_bytes(RW[t]) == 8) {
          rw_put32(sb, ldexpf(rnd(0.5f, 1.0f), (int)(rnd32() % 60) - 30) * (r % 4 == 1 ? -1.0f : 1.0f));
          rw_put32(sb + 4, RW[t] == CLEMBED_FP8_ROWWISE ? 0.0f : rnd(-100.0f, 100.0f));
        } else {
          rw_put16(sb, (uint16_t)(rnd32() % 0x7C00u) | (r % 4 == 1 ? 0x8000u : 0));
          rw_put16(sb + 2, (uint16_t)(rnd32() % 0x7C00u) | (r % 2 ? 0x8000u : 0));
        }
      }
      clembed_matrix m = {0};
      OK(ctx, clembed_matrix_create(ctx, rows, cols, RW[t], &m));
      OK(ctx, clembed_matrix_write(ctx, &m, h, RW[t]));
      float *y = tu_read_f32(ctx, &m);
      int bad = 0;
      for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++) {
          float want = rw_ref_value(RW[t], h + r * rb, cols, j);
          if (!same_bits(y[r * cols + j], want) && !(isnan(want) && isnan(y[r * cols + j])) && bad++ < 3)
            EXPECT(0, "%s, %zu cols: [%zu][%zu] is %a, FBGEMM's %a", RW_NAME[t], cols, r, j, y[r * cols + j], want);
        }
      EXPECT(!bad, "%s, %zu cols: every value FBGEMM's (%d differ)", RW_NAME[t], cols, bad);
      free(y);
      free(h);
      clembed_matrix_release(&m);
    }
  }
}

/* the host-read values of m (F32) */
static float *host_values(clembed_context *ctx, const clembed_matrix *m) { return tu_read_f32(ctx, m); }

TU_CASE(lookup) {
  for (int t = 0; t < 7; t++) {
    size_t w[16], nw = dev_widths(RW[t], w);
    for (size_t k = 0; k < nw; k++) {
      size_t rows = 37, cols = w[k], n = tu_small ? 50 : 300;
      float *x = values(rows, cols);
      clembed_matrix m = quantized(ctx, RW[t], x, rows, cols), out = {0}, view = m;
      float *tv = host_values(ctx, &m);
      int64_t *id = malloc(n * sizeof *id);
      for (size_t i = 0; i < n; i++) id[i] = (int64_t)(rnd32() % rows);
      clembed_ids ids = mk_ids(ctx, id, n);
      OK(ctx, clembed_matrix_create(ctx, n, cols, CLEMBED_F32, &out));
      OK(ctx, clembed_lookup(ctx, &m, &ids, &out, 0, NULL, NULL));
      float *y = tu_read_f32(ctx, &out);
      int bad = 0;
      for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < cols; j++) bad += !same_bits(y[i * cols + j], tv[id[i] * cols + j]);
      EXPECT(!bad, "%s, %zu cols: clembed_lookup gives the values (%d differ)", RW_NAME[t], cols, bad);
      free(y);
      /* clembed_embed, scale 2 (exact) */
      clembed_embed_options o = clembed_embed_defaults();
      o.scale = 2.0f;
      OK(ctx, clembed_embed(ctx, &m, &ids, &o, &out, 0, NULL, NULL));
      y = tu_read_f32(ctx, &out);
      bad = 0;
      for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < cols; j++) bad += !same_bits(y[i * cols + j], 2.0f * tv[id[i] * cols + j]);
      EXPECT(!bad, "%s, %zu cols: clembed_embed (scale 2) (%d differ)", RW_NAME[t], cols, bad);
      free(y);
      /* a view of rows [5, 25) */
      view.offset = 5 * cols;
      view.rows = 20;
      for (size_t i = 0; i < n; i++) id[i] %= 20;
      clembed_ids ids2 = mk_ids(ctx, id, n);
      OK(ctx, clembed_lookup(ctx, &view, &ids2, &out, 0, NULL, NULL));
      y = tu_read_f32(ctx, &out);
      bad = 0;
      for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < cols; j++) bad += !same_bits(y[i * cols + j], tv[(id[i] + 5) * cols + j]);
      EXPECT(!bad, "%s, %zu cols: a view of rows 5 .. 24 (%d differ)", RW_NAME[t], cols, bad);
      free(y);
      clembed_ids_release(&ids);
      clembed_ids_release(&ids2);
      clembed_matrix_release(&out);
      clembed_matrix_release(&m);
      free(tv);
      free(x);
      free(id);
    }
  }
  /* a table in several buffers (rows of 68 bytes, buffers of at most 1 KiB) */
  setenv("CLEMBED_MAX_BUFFER_BYTES", "1024", 1);
  clembed_context *c2 = tu_context();
  unsetenv("CLEMBED_MAX_BUFFER_BYTES");
  size_t rows = 100, cols = 128, n = 200;
  float *x = values(rows, cols);
  clembed_matrix m = quantized(c2, CLEMBED_I4_TBE, x, rows, cols), out = {0}, pieces[64];
  size_t first[64], count = 0;
  OK(c2, clembed_matrix_pieces(c2, &m, 64, pieces, first, &count));
  EXPECT(count > 1, "the table lies in %zu buffers", count);
  float *tv = host_values(c2, &m);
  int64_t id[200];
  for (size_t i = 0; i < n; i++) id[i] = (int64_t)(rnd32() % rows);
  clembed_ids ids = mk_ids(c2, id, n);
  OK(c2, clembed_matrix_create(c2, n, cols, CLEMBED_F32, &out));
  OK(c2, clembed_lookup(c2, &m, &ids, &out, 0, NULL, NULL));
  float *y = tu_read_f32(c2, &out);
  int bad = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < cols; j++) bad += !same_bits(y[i * cols + j], tv[id[i] * cols + j]);
  EXPECT(!bad, "a split I4_TBE table: clembed_lookup gives the values (%d differ)", bad);
  clembed_bag_options bo = clembed_bag_defaults();
  clembed_matrix pooled = {0};
  OK(c2, clembed_matrix_create(c2, 20, cols, CLEMBED_F32, &pooled));
  OK(c2, clembed_embedding_bag(c2, &m, &ids, NULL, &bo, &pooled, 0, NULL, NULL));
  float *p = tu_read_f32(c2, &pooled);
  bad = 0;
  for (size_t b = 0; b < 20; b++)
    for (size_t j = 0; j < cols; j++) {
      float acc = 0.0f;
      for (size_t i = b * 10; i < b * 10 + 10; i++) acc = acc + tv[id[i] * cols + j];
      bad += !same_bits(acc, p[b * cols + j]);
    }
  EXPECT(!bad, "a split I4_TBE table: bags of 10 (%d differ)", bad);
  free(p);
  free(y);
  free(tv);
  free(x);
  clembed_ids_release(&ids);
  clembed_matrix_release(&out);
  clembed_matrix_release(&pooled);
  clembed_matrix_release(&m);
  clembed_context_destroy(c2);
}

/* bags of random sizes (0 .. 12) over n ids; pads some ids */
typedef tu_bagset bagset;

/* bag b's column j in the contract's order (mode 0 SUM, 1 MEAN, 2 MAX; weighted SUM) */
static float ref_bag(const bagset *s, const float *tv, size_t cols, size_t b, size_t j, int mode, int weighted,
                     int64_t pad) {
  float acc = 0.0f, best = 0.0f;
  int count = 0;
  for (int64_t i = s->off[b]; i < s->off[b + 1]; i++) {
    if (s->id[i] == pad) continue;
    float t = tv[s->id[i] * cols + j];
    if (mode == 2) { /* the largest, the first on ties; the first NaN */
      if (count == 0 || (!isnan(best) && (t > best || isnan(t)))) best = t;
    } else
      acc = weighted ? fmaf(s->w[i], t, acc) : acc + t;
    count++;
  }
  if (mode == 2) return best;
  return mode == 1 && count ? acc / (float)count : acc;
}

/* Each bag program is compiled per type, width and pooling (tens of seconds on
 * POCL): by default each type runs one width in one of the three programs
 * (SUM and MEAN share theirs), every program and width meeting several
 * types; `full` runs every type x width x mode. */
TU_CASE(bags) {
  static const size_t sample_w[3] = {8, 136, 20};
  for (int t = 0; t < 7; t++) {
    size_t w[16], nw = dev_widths(RW[t], w);
    if (!tu_full) {
      size_t c = sample_w[t % 3];
      if (c % rw_cols_multiple(RW[t])) c = 8;
      w[0] = tu_small ? 8 : c;
      nw = 1;
    }
    for (size_t k = 0; k < nw; k++) {
      size_t rows = 45, cols = w[k], bags = tu_small ? 9 : 40;
      float *x = values(rows, cols);
      clembed_matrix m = quantized(ctx, RW[t], x, rows, cols), out = {0}, wm = {0};
      float *tv = host_values(ctx, &m);
      bagset s = tu_bags(rows, bags, &rng);
      clembed_ids ids = mk_ids(ctx, s.id, s.n), offs = mk_ids(ctx, s.off, bags + 1);
      OK(ctx, clembed_matrix_create(ctx, bags, cols, CLEMBED_F32, &out));
      OK(ctx, clembed_matrix_create(ctx, s.n, 1, CLEMBED_F32, &wm));
      if (s.n) OK(ctx, clembed_matrix_write(ctx, &wm, s.w, CLEMBED_F32));
      for (int mode = 0; mode < 4; mode++) {
        /* the programs: SUM and MEAN (0, 1), MAX (2), weighted SUM (3) */
        int program = mode == 1 ? 0 : mode == 2 ? 1 : mode == 3 ? 2 : 0;
        if (!tu_full && program != t % 3) continue;
        clembed_bag_options o = clembed_bag_defaults();
        o.mode = mode == 3 ? CLEMBED_BAG_SUM : (clembed_bag_mode)mode;
        if (mode == 3) o.per_sample_weights = &wm;
        int64_t pad = (t + k) % 2 ? 7 : CLEMBED_NO_PADDING;
        o.padding_idx = pad;
        OK(ctx, clembed_embedding_bag(ctx, &m, &ids, &offs, &o, &out, 0, NULL, NULL));
        float *y = tu_read_f32(ctx, &out);
        int bad = 0;
        for (size_t b = 0; b < bags; b++)
          for (size_t j = 0; j < cols; j++) {
            float want = ref_bag(&s, tv, cols, b, j, mode == 3 ? 0 : mode, mode == 3, pad), got = y[b * cols + j];
            int ok = mode == 1 && !isnan(want) ? fabsf(got - want) <= 2.0f * ldexpf(1.0f, -23) * fabsf(want)
                                               : same_bits(got, want);
            if (!ok && bad++ < 3)
              EXPECT(0, "%s, %zu cols, mode %d: bag %zu [%zu] is %a, the reference %a", RW_NAME[t], cols, mode, b, j,
                     got, want);
          }
        EXPECT(!bad, "%s, %zu cols, mode %d (%s): every bag (%d differ)", RW_NAME[t], cols, mode,
               mode == 3 ? "weighted SUM" : mode == 2 ? "MAX" : mode ? "MEAN" : "SUM", bad);
        free(y);
      }
      clembed_ids_release(&ids);
      clembed_ids_release(&offs);
      clembed_matrix_release(&out);
      clembed_matrix_release(&wm);
      clembed_matrix_release(&m);
      tu_free_bags(&s);
      free(tv);
      free(x);
    }
  }
}

TU_CASE(bags_multi) {
  /* every row-wise type at 40 cols (I2_ROWWISE 48), I8_ROWWISE also at 24, an F32 and a Q8_0 table
   * (by default: I8_ROWWISE at 40 and 24, I4_TBE, FP8_ROWWISE and the F32 table, SUM, MEAN, MAX) */
  enum { NF = 10 };
  static const int sample[5] = {0, 7, 4, 6, 8};
  size_t rows = 30, bags = tu_small ? 6 : 25;
  clembed_matrix tab[NF];
  clembed_ids ids[NF], offs[NF];
  bagset s[NF];
  clembed_bag_feature f[NF];
  size_t total = 0;
  const int nf = tu_full ? NF : 5;
  for (int kk = 0; kk < nf; kk++) {
    int k = tu_full ? kk : sample[kk];
    clembed_dtype d = k < 7 ? RW[k] : k == 7 ? CLEMBED_I8_ROWWISE : k == 8 ? CLEMBED_F32 : CLEMBED_Q8_0;
    size_t cols = k == 7 ? 24 : k == 9 ? 64 : d == CLEMBED_I2_ROWWISE ? 48 : 40;
    float *x = values(rows, cols);
    tab[kk] = quantized(ctx, d, x, rows, cols);
    free(x);
    s[kk] = tu_bags(rows, bags, &rng);
    ids[kk] = mk_ids(ctx, s[kk].id, s[kk].n);
    offs[kk] = mk_ids(ctx, s[kk].off, bags + 1);
    f[kk] = clembed_bag_feature_defaults();
    f[kk].table = &tab[kk];
    f[kk].ids = &ids[kk];
    f[kk].offsets = &offs[kk];
    f[kk].options.mode = (clembed_bag_mode)(k % 3);
    total += cols;
  }
  clembed_matrix all = {0}, one = {0};
  OK(ctx, clembed_matrix_create(ctx, bags, total, CLEMBED_F32, &all));
  OK(ctx, clembed_embedding_bags(ctx, f, (size_t)nf, &all, 0, NULL, NULL));
  float *a = tu_read_f32(ctx, &all);
  size_t c0 = 0;
  for (int k = 0; k < nf; k++) {
    size_t cols = tab[k].cols;
    OK(ctx, clembed_matrix_create(ctx, bags, cols, CLEMBED_F32, &one));
    OK(ctx, clembed_embedding_bag(ctx, &tab[k], &ids[k], &offs[k], &f[k].options, &one, 0, NULL, NULL));
    float *y = tu_read_f32(ctx, &one);
    int bad = 0;
    for (size_t b = 0; b < bags; b++)
      for (size_t j = 0; j < cols; j++) bad += !same_bits(a[b * total + c0 + j], y[b * cols + j]);
    EXPECT(!bad, "feature %d (%s, %zu cols): its block is its own bag's bits (%d differ)", k,
           clembed_dtype_name(tab[k].dtype), cols, bad);
    free(y);
    clembed_matrix_release(&one);
    c0 += cols;
  }
  free(a);
  for (int k = 0; k < nf; k++) {
    clembed_matrix_release(&tab[k]);
    clembed_ids_release(&ids[k]);
    clembed_ids_release(&offs[k]);
    tu_free_bags(&s[k]);
  }
  clembed_matrix_release(&all);
}

TU_CASE(quantize_rows) {
  for (int t = 0; t < 7; t++) {
    size_t rows = 33, cols = 40 * rw_cols_multiple(RW[t]) / (rw_cols_multiple(RW[t]) > 4 ? 5 : 1);
    float *x = values(rows, cols);
    clembed_matrix f = {0}, q = {0};
    OK(ctx, clembed_matrix_create(ctx, rows, cols, CLEMBED_F32, &f));
    OK(ctx, clembed_matrix_write(ctx, &f, x, CLEMBED_F32));
    OK(ctx, clembed_matrix_create(ctx, rows, cols, RW[t], &q));
    cl_event ev = NULL;
    OK(ctx, clembed_quantize_rows(ctx, &f, &q, 0, NULL, &ev));
    cl_int st = -1;
    EXPECT(ev && clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL) == CL_SUCCESS &&
               st == CL_COMPLETE,
           "%s: a completed event", RW_NAME[t]);
    if (ev) clReleaseEvent(ev);
    uint8_t *got = raw(ctx, &q), *want = malloc(rw_row_bytes(RW[t], cols));
    int bad = 0;
    for (size_t r = 0; r < rows; r++) {
      rw_ref_quantize(RW[t], x + r * cols, cols, want);
      bad += memcmp(got + r * rw_row_bytes(RW[t], cols), want, rw_row_bytes(RW[t], cols)) != 0;
    }
    EXPECT(!bad, "%s, %zu cols: clembed_quantize_rows gives FBGEMM's bytes (%d rows differ)", RW_NAME[t], cols, bad);
    /* a view: rows 3 .. 12 of f into rows 10 .. 19 of q, the rest untouched */
    clembed_matrix vf = f, vq = q;
    vf.offset = 3 * cols;
    vf.rows = 10;
    vq.offset = 10 * cols;
    vq.rows = 10;
    float *z = calloc(rows * cols, sizeof *z);
    OK(ctx, clembed_matrix_write(ctx, &q, z, CLEMBED_F32));
    uint8_t *before = raw(ctx, &q);
    OK(ctx, clembed_quantize_rows(ctx, &vf, &vq, 0, NULL, NULL));
    uint8_t *after = raw(ctx, &q);
    size_t rb = rw_row_bytes(RW[t], cols);
    bad = 0;
    for (size_t r = 0; r < rows; r++) {
      if (r >= 10 && r < 20) {
        rw_ref_quantize(RW[t], x + (r - 7) * cols, cols, want);
        bad += memcmp(after + r * rb, want, rb) != 0;
      } else
        bad += memcmp(after + r * rb, before + r * rb, rb) != 0;
    }
    EXPECT(!bad, "%s: views of rows quantized, the other rows untouched (%d differ)", RW_NAME[t], bad);
    free(z);
    free(before);
    free(after);
    free(got);
    free(want);
    free(x);
    clembed_matrix_release(&f);
    clembed_matrix_release(&q);
  }
}

TU_CASE(errors) {
  clembed_matrix m = {0}, f = {0}, out = {0}, q8 = {0};
  tu_refused(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_create(ctx, 4, 6, CLEMBED_I4_ROWWISE, &m), "cols",
          "I4_ROWWISE with 6 cols");
  tu_refused(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_create(ctx, 4, 3, CLEMBED_I4_TBE, &m), "cols",
          "I4_TBE with 3 cols");
  tu_refused(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_create(ctx, 4, 0, CLEMBED_I8_ROWWISE, &m), "cols",
          "I8_ROWWISE with no columns (its rows carry a scale)");
  OK(ctx, clembed_matrix_create(ctx, 10, 16, CLEMBED_I8_TBE, &m));
  OK(ctx, clembed_matrix_create(ctx, 10, 16, CLEMBED_F32, &f));
  OK(ctx, clembed_matrix_create(ctx, 4, 16, CLEMBED_F32, &out));
  OK(ctx, clembed_matrix_create(ctx, 10, 32, CLEMBED_Q8_0, &q8));
  int64_t id[4] = {1, 2, 3, 4};
  clembed_ids ids = mk_ids(ctx, id, 4);
  clembed_matrix v = m;
  v.cols = 8;
  v.ld = 16;
  tu_refused(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_lookup(ctx, &v, &ids, &out, 0, NULL, NULL), "table",
          "a view of columns");
  v = m;
  v.offset = 3;
  v.rows = 5;
  tu_refused(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_lookup(ctx, &v, &ids, &out, 0, NULL, NULL), "table",
          "an offset inside a row");
  v = m;
  v.rows = 11;
  tu_refused(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_lookup(ctx, &v, &ids, &out, 0, NULL, NULL), "table",
          "rows past the buffer");
  clembed_embed_options o = clembed_embed_defaults();
  o.positions = CLEMBED_POSITIONS_TABLE;
  o.position_table = &m;
  tu_refused(ctx, CLEMBED_ERR_UNSUPPORTED, clembed_embed(ctx, &f, &ids, &o, &out, 0, NULL, NULL), "position_table",
          "a row-wise position table");
  clembed_optimizer opt = clembed_optimizer_defaults(CLEMBED_SGD);
  opt.learning_rate = 0.1f;
  tu_refused(ctx, CLEMBED_ERR_UNSUPPORTED, clembed_optimizer_step(ctx, &out, &ids, NULL, &opt, &m, 0, NULL, NULL), "table",
          "an optimizer step on a row-wise table");
  tu_refused(ctx, CLEMBED_ERR_UNSUPPORTED, clembed_quantize_rows(ctx, &f, &q8, 0, NULL, NULL), "out",
          "clembed_quantize_rows into Q8_0");
  tu_refused(ctx, CLEMBED_ERR_UNSUPPORTED, clembed_quantize_rows(ctx, &q8, &m, 0, NULL, NULL), "in",
          "clembed_quantize_rows from Q8_0");
  tu_refused(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_quantize_rows(ctx, &out, &m, 0, NULL, NULL), "out",
          "clembed_quantize_rows of another shape");
  /* host rows of a row-wise type into a float matrix: the cols they can hold */
  clembed_matrix f6 = {0};
  OK(ctx, clembed_matrix_create(ctx, 2, 6, CLEMBED_F32, &f6));
  uint8_t rows6[64] = {0};
  tu_refused(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_write(ctx, &f6, rows6, CLEMBED_I4_ROWWISE), "host_dtype",
          "I4_ROWWISE host rows of 6 values");
  tu_refused(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_read(ctx, &f6, rows6, CLEMBED_I2_TBE), "host_dtype",
          "I2_TBE host rows of 6 values");
  OK(ctx, clembed_matrix_write(ctx, &f6, rows6, CLEMBED_I8_TBE)); /* (8-bit rows hold any cols) */
  clembed_matrix_release(&f6);
  uint8_t blocks[10 * 34] = {0};
  tu_refused(ctx, CLEMBED_ERR_UNSUPPORTED, clembed_matrix_write(ctx, &m, blocks, CLEMBED_Q8_0), "host_dtype",
          "Q8_0 blocks into a row-wise matrix");
  clembed_ids_release(&ids);
  clembed_matrix_release(&m);
  clembed_matrix_release(&f);
  clembed_matrix_release(&out);
  clembed_matrix_release(&q8);
}

int main(int argc, char **argv) { return tu_main(argc, argv, (tu_suite){.name = "test_rowwise", .device = 1}); }
