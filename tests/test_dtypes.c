/* The operation x dtype matrix: every operation that takes a table, over every
 * dtype of the one dtype list (src/runtime/dtypes.h's CE_DTYPES: a dtype
 * added there is tested here with nothing else to write, and one this file
 * cannot make a table of fails the test), in both kernel shapes (contexts with
 * CLEMBED_TUNING=cpu and =gpu), on the test device (POCL, and again on
 * Oclgrind and rusticl).
 *
 * Each dtype's table has random contents (random finite scales for the block
 * types; values exact in every float type for F32, F16 and BF16) and a twin:
 * an F32 table of its values, dequantized by ggml's own reference code
 * (reference_ggml.h). The checks, all bit for bit:
 *   values      the table read back as F32 equals the reference values
 *   lookup      rows of the reference values; clembed_embed with a scale,
 *               padding, a bad id under ZERO and a learned position table of
 *               the same dtype equals the twin's results
 *   bags        clembed_embedding_bag (SUM) and clembed_embedding_bags (SUM,
 *               MEAN, weighted SUM, MAX with max_rows in one call) against a
 *               float32 reference doing the documented operations in order
 *               (an empty bag, a padding id and a bad id among them)
 *   mixed       one clembed_embedding_bags call over every dtype's table at
 *               once (SUM and MEAN) against the same reference
 *   grad_weights clembed_bag_backward's per_sample_weights gradient against
 *               the float32 reference
 *   layer       BERT's layer (segments and LayerNorm) equals the twin's
 *   split       the table in 14 buffers (CLEMBED_MAX_BUFFER_BYTES, 3 rows a
 *               buffer): the four poolings (max_rows too) against the
 *               reference, SUM and MEAN with the table's pieces in their
 *               launch, weighted SUM and MAX (17 buffers with their weights
 *               or max_rows) through the gathered rows
 *   refusals    the operations that write a table, a gradient or an output
 *               take the float dtypes and refuse every block type with
 *               CLEMBED_ERR_UNSUPPORTED naming it
 * The full run takes every operation, dtype and shape; the `small` runs
 * (Oclgrind, rusticl) a part of it in turns along the list (op_runs), and the
 * quick run's test_dtypes_sample a part of that (every fourth dtype). */
#include "runtime/dtypes.h" /* the one dtype list */
#include "test_util.h"

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint32_t rnd32(void) {
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng >> 32);
}
#include "quant_types.h"

/* The dtypes of the list, in its order. */
#define DT_CODE(ID, value, name, qk, bytes) value,
static const int DTS[] = {CE_DTYPES(DT_CODE)};
#undef DT_CODE
#define NDT ((int)(sizeof DTS / sizeof DTS[0]))

static int is_float(int dt) { return clembed_dtype_block_values((clembed_dtype)dt) == 1; }

#define ROWS 40
#define PAD_ID 3

/* One dtype's table and its F32 twin. */
typedef struct fx {
  int dt;
  size_t cols;
  clembed_matrix tab, twin;
  float vals[ROWS * 512];
} fx;

/* Columns: a float table 40 (two vectors of 16 and a tail of 8), a block
 * table two blocks of 32 or one of 256. */
static size_t cols_of(int dt) {
  size_t qk = clembed_dtype_block_values((clembed_dtype)dt);
  return qk == 1 ? 40 : qk == 32 ? 64 : 256;
}

/* The table's values and bytes. 0 when this file cannot make the dtype (a
 * failure: a new dtype needs its generator in quant_types.h). */
static int make_host(int dt, size_t cols, float *vals, uint8_t **bytes) {
  *bytes = NULL;
  if (is_float(dt)) {
    for (size_t i = 0; i < ROWS * cols; i++) vals[i] = (float)((int)(rnd32() % 129) - 64) / 8.0f;
    return 1;
  }
  if (!tq(dt)) return 0;
  size_t rb = clembed_dtype_row_bytes((clembed_dtype)dt, cols), qk = tq_qk(dt), bb = tq_bb(dt);
  EXPECT(rb == cols / qk * bb, "%s: the library's row bytes %zu, ggml's %zu", clembed_dtype_name(dt), rb,
         cols / qk * bb);
  *bytes = malloc(ROWS * rb);
  for (size_t b = 0; b < ROWS * cols / qk; b++) rnd_block(dt, *bytes + b * bb);
  for (size_t r = 0; r < ROWS; r++) ref_dequantize(dt, *bytes + r * rb, vals + r * cols, cols);
  return 1;
}

/* The table (and, with `twin`, its F32 twin) of dtype dt. */
static int fx_make_twin(clembed_context *ctx, int dt, fx *f, int twin) {
  memset(f, 0, sizeof *f);
  f->dt = dt;
  f->cols = cols_of(dt);
  uint8_t *bytes;
  if (!make_host(dt, f->cols, f->vals, &bytes)) {
    EXPECT(0, "dtype %s (%d) has no table generator in tests/quant_types.h", clembed_dtype_name(dt), dt);
    return 0;
  }
  OK(ctx, clembed_matrix_create(ctx, ROWS, f->cols, (clembed_dtype)dt, &f->tab));
  OK(ctx, clembed_matrix_write(ctx, &f->tab, bytes ? (const void *)bytes : f->vals,
                               bytes ? (clembed_dtype)dt : CLEMBED_F32));
  if (twin) {
    OK(ctx, clembed_matrix_create(ctx, ROWS, f->cols, CLEMBED_F32, &f->twin));
    OK(ctx, clembed_matrix_write(ctx, &f->twin, f->vals, CLEMBED_F32));
  }
  free(bytes);
  return f->tab.buffer && (!twin || f->twin.buffer);
}

static int fx_make(clembed_context *ctx, int dt, fx *f) { return fx_make_twin(ctx, dt, f, 1); }

static void fx_release(fx *f) {
  clembed_matrix_release(&f->tab);
  clembed_matrix_release(&f->twin);
}

static int same_bits(const float *a, const float *b, size_t n, size_t *at) {
  for (size_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof a[i])) {
      *at = i;
      return 0;
    }
  return 1;
}

/* n x cols F32 of a matrix */
static float *read_f32(clembed_context *ctx, const clembed_matrix *m) {
  float *h = calloc(m->rows * m->cols + 1, sizeof *h);
  OK(ctx, clembed_matrix_read(ctx, m, h, CLEMBED_F32));
  return h;
}

static clembed_ids make_ids(clembed_context *ctx, const int64_t *v, size_t n) {
  clembed_ids ids;
  memset(&ids, 0, sizeof ids);
  OK(ctx, clembed_ids_create(ctx, v, n, CLEMBED_I64, &ids));
  return ids;
}

/* What runs. The full run: every operation over every dtype in both shapes.
 * The small runs (Oclgrind, rusticl, ./tools/check.sh --quick), where each
 * program's compilation is what costs: every dtype through the bags (the four
 * poolings in one call) in one shape, alternating along the list, and through
 * one more operation, in turn along the list (so every operation meets
 * several dtypes of each kind and both shapes). */
enum { OP_LOOKUP, OP_GRAD_WEIGHTS, OP_LAYER, OP_SPLIT, OP_MIXED, OP_COUNT };
/* CLEMBED_TEST_DTYPE_STRIDE=S: only every S-th dtype of the list (the quick
 * run's sample, test_dtypes_sample; the full run takes them all). The turns
 * go along the dtypes that run. */
static int stride(void) {
  const char *e = getenv("CLEMBED_TEST_DTYPE_STRIDE");
  int s = e ? atoi(e) : 1;
  return s > 1 ? s : 1;
}
static int dtype_runs(int k) { return k % stride() == 0; }
static int shape_runs(int k, int shape) { return !tu_small || (k / stride()) % 2 == shape; }
static int op_runs(int k, int op) { return !tu_small || (k / stride()) % OP_COUNT == op; }

/* --------------------------------------------------------------- values */

TU_CASE(values) {
  for (int k = 0; k < NDT; k++) {
    fx f;
    if (!dtype_runs(k) || !fx_make(ctx, DTS[k], &f)) continue;
    float *h = read_f32(ctx, &f.tab);
    size_t at = 0;
    EXPECT(same_bits(h, f.vals, ROWS * f.cols, &at), "%s: value %zu read %.9g, ggml's %.9g",
           clembed_dtype_name(f.dt), at, (double)h[at], (double)f.vals[at]);
    free(h);
    fx_release(&f);
  }
}

/* --------------------------------------------------------------- lookup */

static const int64_t LOOK[] = {5, 0, 39, PAD_ID, 5, 27, ROWS + 4, 2};
#define NLOOK (sizeof LOOK / sizeof LOOK[0])

TU_CASE(lookup) {
  clembed_context *sh[2];
  if (!tu_shaped_pair(&sh[0], &sh[1])) return;
  for (int k = 0; k < NDT; k++)
    for (int s = 0; s < 2; s++) {
      if (!dtype_runs(k) || !shape_runs(k, s) || !op_runs(k, OP_LOOKUP)) continue;
      clembed_context *c = sh[s];
      fx f;
      if (!fx_make(c, DTS[k], &f)) continue;
      const char *dn = clembed_dtype_name(f.dt), *shn = s ? "gpu" : "cpu";
      clembed_ids ids = make_ids(c, LOOK, NLOOK - 2); /* (good ids) */
      clembed_matrix out = {0}, out2 = {0};
      OK(c, clembed_matrix_create(c, NLOOK, f.cols, CLEMBED_F32, &out));
      OK(c, clembed_matrix_create(c, NLOOK, f.cols, CLEMBED_F32, &out2));
      clembed_matrix o6 = out;
      o6.rows = NLOOK - 2;
      OK(c, clembed_lookup(c, &f.tab, &ids, &o6, 0, NULL, NULL));
      OK(c, clembed_finish(c));
      float *h = read_f32(c, &out);
      for (size_t i = 0; i < NLOOK - 2; i++) {
        size_t at = 0;
        EXPECT(same_bits(h + i * f.cols, f.vals + LOOK[i] * f.cols, f.cols, &at),
               "lookup %s (%s shape): token %zu column %zu: %.9g, expected %.9g", dn, shn, i, at,
               (double)h[i * f.cols + at], (double)f.vals[LOOK[i] * f.cols + at]);
      }
      free(h);
      clembed_ids_release(&ids);
      /* the fused forward: scale, padding, a bad id under ZERO, positions of the same dtype */
      ids = make_ids(c, LOOK, NLOOK);
      fx pos;
      if (fx_make(c, f.dt, &pos)) {
        clembed_embed_options o = clembed_embed_defaults();
        o.scale = 0.75f;
        o.padding_idx = PAD_ID;
        o.policy = CLEMBED_INDEX_ZERO;
        o.positions = CLEMBED_POSITIONS_TABLE;
        o.seq_len = 4;
        o.position_offset = 1;
        o.position_table = &pos.tab;
        OK(c, clembed_embed(c, &f.tab, &ids, &o, &out, 0, NULL, NULL));
        o.position_table = &pos.twin;
        OK(c, clembed_embed(c, &f.twin, &ids, &o, &out2, 0, NULL, NULL));
        OK(c, clembed_finish(c));
        float *a = read_f32(c, &out), *b = read_f32(c, &out2);
        size_t at = 0;
        EXPECT(same_bits(a, b, NLOOK * f.cols, &at), "embed %s (%s shape): element %zu: %.9g, the twin's %.9g", dn,
               shn, at, (double)a[at], (double)b[at]);
        free(a);
        free(b);
        fx_release(&pos);
      }
      clembed_ids_release(&ids);
      clembed_matrix_release(&out);
      clembed_matrix_release(&out2);
      fx_release(&f);
    }
  clembed_context_destroy(sh[0]);
  clembed_context_destroy(sh[1]);
}

/* ----------------------------------------------------------------- bags */

/* Bags: [0, 3) [3, 3) empty, [3, 7), [7, 8), [8, 12): a padding id, a bad id
 * (ZERO leaves it out), repeated rows. */
static const int64_t BIDS[] = {34, 9, 34, PAD_ID, 1, ROWS + 2, 37, 6, 0, 11, 22, 8};
static const int64_t BOFF[] = {0, 3, 3, 7, 8, 12};
#define NB 5
#define NBID 12

static float weight_of(size_t j) { return 0.25f * (float)((int)(j % 7) - 3); }

/* The float32 reference of one bag output row (documented order). */
static void ref_bag(const fx *f, int mode, int weighted, size_t b, float *out, int64_t *mrows) {
  for (size_t c = 0; c < f->cols; c++) {
    float acc = 0.0f;
    int64_t arg = -1;
    int cnt = 0;
    for (int64_t j = BOFF[b]; j < BOFF[b + 1]; j++) {
      int64_t id = BIDS[j];
      if (id == PAD_ID || id < 0 || id >= ROWS) continue;
      float t = f->vals[id * f->cols + c];
      if (mode == CLEMBED_BAG_MAX) {
        if (!cnt || t > acc || (isnan(t) && !isnan(acc))) {
          acc = t;
          arg = id;
        }
      } else if (weighted) {
        acc = fmaf(weight_of((size_t)j), t, acc);
      } else {
        acc = acc + t;
      }
      cnt++;
    }
    if (mode == CLEMBED_BAG_MEAN && cnt) acc = acc / (float)cnt;
    out[c] = acc;
    if (mrows) mrows[c] = arg;
  }
}

typedef struct bag_io {
  clembed_ids ids, offs, mrows;
  clembed_matrix w;
} bag_io;

static void bag_io_make(clembed_context *c, size_t cols, bag_io *io) {
  io->ids = make_ids(c, BIDS, NBID);
  io->offs = make_ids(c, BOFF, NB + 1);
  int64_t *z = calloc(NB * cols, sizeof *z);
  io->mrows = make_ids(c, z, NB * cols);
  free(z);
  float w[NBID];
  for (size_t j = 0; j < NBID; j++) w[j] = weight_of(j);
  OK(c, clembed_matrix_create(c, NBID, 1, CLEMBED_F32, &io->w));
  OK(c, clembed_matrix_write(c, &io->w, w, CLEMBED_F32));
}

static void bag_io_release(bag_io *io) {
  clembed_ids_release(&io->ids);
  clembed_ids_release(&io->offs);
  clembed_ids_release(&io->mrows);
  clembed_matrix_release(&io->w);
}

/* Features 0..3 of one table: SUM, MEAN, weighted SUM, MAX with max_rows. */
static void four_features(clembed_matrix *tab, bag_io *io, clembed_bag_feature *F) {
  static const int modes[4] = {CLEMBED_BAG_SUM, CLEMBED_BAG_MEAN, CLEMBED_BAG_SUM, CLEMBED_BAG_MAX};
  for (int q = 0; q < 4; q++) {
    F[q] = clembed_bag_feature_defaults(); /* struct_size set (include/clembed.h, "Option structs") */
    F[q].table = tab;
    F[q].ids = &io->ids;
    F[q].offsets = &io->offs;
    F[q].options = clembed_bag_defaults();
    F[q].options.mode = (clembed_bag_mode)modes[q];
    F[q].options.policy = CLEMBED_INDEX_ZERO;
    F[q].options.padding_idx = PAD_ID;
    if (q == 2) F[q].options.per_sample_weights = &io->w;
    if (q == 3) F[q].options.max_rows = &io->mrows;
  }
}

TU_CASE(bags) {
  clembed_context *sh[2];
  if (!tu_shaped_pair(&sh[0], &sh[1])) return;
  for (int k = 0; k < NDT; k++)
    for (int s = 0; s < 2; s++) {
      if (!dtype_runs(k) || !shape_runs(k, s)) continue;
      clembed_context *c = sh[s];
      fx f;
      if (!fx_make(c, DTS[k], &f)) continue;
      const char *dn = clembed_dtype_name(f.dt), *shn = s ? "gpu" : "cpu";
      size_t cols = f.cols;
      bag_io io;
      bag_io_make(c, cols, &io);
      float *ref = calloc(NB * cols, sizeof *ref);
      int64_t *rmr = calloc(NB * cols, sizeof *rmr), *mr = calloc(NB * cols, sizeof *mr);
      /* clembed_embedding_bag, SUM: out filled with NaN first (a bag left unwritten shows) */
      clembed_matrix out = {0};
      OK(c, clembed_matrix_create(c, NB, cols, CLEMBED_F32, &out));
      float *nan = malloc(NB * cols * sizeof *nan);
      for (size_t i = 0; i < NB * cols; i++) nan[i] = NAN;
      OK(c, clembed_matrix_write(c, &out, nan, CLEMBED_F32));
      clembed_bag_options o = clembed_bag_defaults();
      o.policy = CLEMBED_INDEX_ZERO;
      o.padding_idx = PAD_ID;
      OK(c, clembed_embedding_bag(c, &f.tab, &io.ids, &io.offs, &o, &out, 0, NULL, NULL));
      OK(c, clembed_finish(c));
      float *h = read_f32(c, &out);
      for (size_t b = 0; b < NB; b++) ref_bag(&f, CLEMBED_BAG_SUM, 0, b, ref + b * cols, NULL);
      size_t at = 0;
      EXPECT(same_bits(h, ref, NB * cols, &at), "bag SUM %s (%s shape): bag %zu column %zu: %.9g, expected %.9g", dn,
             shn, at / cols, at % cols, (double)h[at], (double)ref[at]);
      free(h);
      /* the four poolings in one clembed_embedding_bags call */
      clembed_bag_feature F[4];
      four_features(&f.tab, &io, F);
      clembed_matrix all = {0};
      OK(c, clembed_matrix_create(c, NB, 4 * cols, CLEMBED_F32, &all));
      OK(c, clembed_embedding_bags(c, F, 4, &all, 0, NULL, NULL));
      OK(c, clembed_finish(c));
      h = read_f32(c, &all);
      OK(c, clembed_ids_read(c, &io.mrows, mr));
      static const char *what[4] = {"SUM", "MEAN", "weighted SUM", "MAX"};
      for (int q = 0; q < 4; q++)
        for (size_t b = 0; b < NB; b++) {
          float row[512];
          ref_bag(&f, (int)F[q].options.mode, q == 2, b, row, q == 3 ? rmr + b * cols : NULL);
          at = 0;
          EXPECT(same_bits(h + b * 4 * cols + q * cols, row, cols, &at),
                 "bags %s %s (%s shape): bag %zu column %zu: %.9g, expected %.9g", what[q], dn, shn, b, at,
                 (double)h[b * 4 * cols + q * cols + at], (double)row[at]);
        }
      EXPECT(!memcmp(mr, rmr, NB * cols * sizeof *mr), "bags MAX %s (%s shape): max_rows differ", dn, shn);
      free(h);
      free(nan);
      free(ref);
      free(rmr);
      free(mr);
      clembed_matrix_release(&out);
      clembed_matrix_release(&all);
      bag_io_release(&io);
      fx_release(&f);
    }
  clembed_context_destroy(sh[0]);
  clembed_context_destroy(sh[1]);
}

/* Every dtype's table in one clembed_embedding_bags call (the launches taken
 * by dtype) against the reference (the bags case checks each alone). */
TU_CASE(mixed) {
  clembed_context *sh[2];
  if (!tu_shaped_pair(&sh[0], &sh[1])) return;
  for (int s = 0; s < 2; s++) {
    if (tu_small && s) continue; /* (the cpu shape, whose launches group by dtype) */
    clembed_context *c = sh[s];
    /* every dtype (the small runs: F32 and those whose turn it is) */
    int kk[NDT], nm = 0;
    for (int k = 0; k < NDT; k++)
      if (k == 0 || (dtype_runs(k) && op_runs(k, OP_MIXED))) kk[nm++] = k;
    fx *f = calloc(NDT, sizeof *f);
    clembed_bag_feature *F = calloc(NDT, sizeof *F);
    bag_io io;
    bag_io_make(c, 256, &io);
    size_t total = 0;
    int made = 1;
    for (int k = 0; k < nm; k++) {
      made &= fx_make(c, DTS[kk[k]], &f[k]);
      F[k] = clembed_bag_feature_defaults(); /* struct_size set (include/clembed.h, "Option structs") */
      F[k].table = &f[k].tab;
      F[k].ids = &io.ids;
      F[k].offsets = &io.offs;
      F[k].options = clembed_bag_defaults();
      F[k].options.policy = CLEMBED_INDEX_ZERO;
      F[k].options.padding_idx = PAD_ID;
      F[k].options.mode = k % 3 == 1 ? CLEMBED_BAG_MEAN : CLEMBED_BAG_SUM;
      total += f[k].cols;
    }
    if (made) {
      clembed_matrix all = {0};
      OK(c, clembed_matrix_create(c, NB, total, CLEMBED_F32, &all));
      OK(c, clembed_embedding_bags(c, F, (size_t)nm, &all, 0, NULL, NULL));
      OK(c, clembed_finish(c));
      float *h = read_f32(c, &all);
      size_t col0 = 0;
      for (int k = 0; k < nm; k++) {
        float row[512];
        for (size_t b = 0; b < NB; b++) {
          size_t at = 0;
          ref_bag(&f[k], (int)F[k].options.mode, 0, b, row, NULL);
          EXPECT(same_bits(h + b * total + col0, row, f[k].cols, &at),
                 "mixed call, features[%d] (%s, %s shape): bag %zu column %zu: %.9g, expected %.9g", k,
                 clembed_dtype_name(f[k].dt), s ? "gpu" : "cpu", b, at, (double)h[b * total + col0 + at],
                 (double)row[at]);
        }
        col0 += f[k].cols;
      }
      free(h);
      clembed_matrix_release(&all);
    }
    for (int k = 0; k < nm; k++) fx_release(&f[k]);
    bag_io_release(&io);
    free(f);
    free(F);
  }
  clembed_context_destroy(sh[0]);
  clembed_context_destroy(sh[1]);
}

/* ------------------------------------------------------------ grad_weights */

TU_CASE(grad_weights) {
  clembed_context *sh[2];
  if (!tu_shaped_pair(&sh[0], &sh[1])) return;
  for (int k = 0; k < NDT; k++)
    for (int s = 0; s < 2; s++) {
      if (!dtype_runs(k) || !shape_runs(k, s) || !op_runs(k, OP_GRAD_WEIGHTS)) continue;
      clembed_context *c = sh[s];
      fx f;
      if (!fx_make(c, DTS[k], &f)) continue;
      size_t cols = f.cols;
      bag_io io;
      bag_io_make(c, cols, &io);
      float *g = malloc(NB * cols * sizeof *g), ref[NBID], gw[NBID];
      for (size_t i = 0; i < NB * cols; i++) g[i] = (float)((int)(rnd32() % 33) - 16) / 16.0f;
      clembed_matrix go = {0}, gt = {0}, gwm = {0};
      OK(c, clembed_matrix_create(c, NB, cols, CLEMBED_F32, &go));
      OK(c, clembed_matrix_write(c, &go, g, CLEMBED_F32));
      OK(c, clembed_matrix_create(c, ROWS, cols, CLEMBED_F32, &gt));
      OK(c, clembed_matrix_create(c, NBID, 1, CLEMBED_F32, &gwm));
      clembed_bag_options o = clembed_bag_defaults();
      o.policy = CLEMBED_INDEX_ZERO;
      o.padding_idx = PAD_ID;
      o.per_sample_weights = &io.w;
      OK(c, clembed_bag_backward(c, &go, &io.ids, &io.offs, &o, &f.tab, &gt, &gwm, 0, NULL, NULL));
      OK(c, clembed_finish(c));
      OK(c, clembed_matrix_read(c, &gwm, gw, CLEMBED_F32));
      for (size_t b = 0; b < NB; b++)
        for (int64_t j = BOFF[b]; j < BOFF[b + 1]; j++) {
          int64_t id = BIDS[j];
          float acc = 0.0f;
          if (id != PAD_ID && id >= 0 && id < ROWS)
            for (size_t cc = 0; cc < cols; cc++) {
              float p = g[b * cols + cc] * f.vals[id * cols + cc];
              acc = acc + p;
            }
          ref[j] = acc;
        }
      size_t at = 0;
      EXPECT(same_bits(gw, ref, NBID, &at), "grad_weights %s (%s shape): id %zu: %.9g, expected %.9g",
             clembed_dtype_name(f.dt), s ? "gpu" : "cpu", at, (double)gw[at], (double)ref[at]);
      free(g);
      clembed_matrix_release(&go);
      clembed_matrix_release(&gt);
      clembed_matrix_release(&gwm);
      bag_io_release(&io);
      fx_release(&f);
    }
  clembed_context_destroy(sh[0]);
  clembed_context_destroy(sh[1]);
}

/* ------------------------------------------------------- BERT's layer */

TU_CASE(layer) {
  clembed_context *sh[2];
  if (!tu_shaped_pair(&sh[0], &sh[1])) return;
  for (int k = 0; k < NDT; k++)
    for (int s = 0; s < 2; s++) {
      if (!dtype_runs(k) || !shape_runs(k, s) || !op_runs(k, OP_LAYER)) continue;
      clembed_context *c = sh[s];
      fx f;
      if (!fx_make(c, DTS[k], &f)) continue;
      size_t cols = f.cols;
      float *seg = malloc(2 * cols * sizeof *seg);
      for (size_t i = 0; i < 2 * cols; i++) seg[i] = (float)((int)(rnd32() % 17) - 8) / 32.0f;
      clembed_matrix segm = {0}, out = {0}, out2 = {0};
      OK(c, clembed_matrix_create(c, 2, cols, CLEMBED_F32, &segm));
      OK(c, clembed_matrix_write(c, &segm, seg, CLEMBED_F32));
      OK(c, clembed_matrix_create(c, NLOOK, cols, CLEMBED_F32, &out));
      OK(c, clembed_matrix_create(c, NLOOK, cols, CLEMBED_F32, &out2));
      int64_t sv[NLOOK];
      for (size_t i = 0; i < NLOOK; i++) sv[i] = (int64_t)(i % 2);
      clembed_ids ids = make_ids(c, LOOK, NLOOK), sids = make_ids(c, sv, NLOOK);
      clembed_embed_options o = clembed_embed_defaults();
      o.policy = CLEMBED_INDEX_ZERO;
      o.padding_idx = PAD_ID;
      o.positions = CLEMBED_POSITIONS_SINUSOID;
      o.segment_table = &segm;
      o.segment_ids = &sids;
      o.norm.kind = CLEMBED_NORM_LAYER;
      o.norm.eps = 1e-5f;
      OK(c, clembed_embed(c, &f.tab, &ids, &o, &out, 0, NULL, NULL));
      OK(c, clembed_embed(c, &f.twin, &ids, &o, &out2, 0, NULL, NULL));
      OK(c, clembed_finish(c));
      float *a = read_f32(c, &out), *b = read_f32(c, &out2);
      size_t at = 0;
      EXPECT(same_bits(a, b, NLOOK * cols, &at), "layer %s (%s shape): element %zu: %.9g, the twin's %.9g",
             clembed_dtype_name(f.dt), s ? "gpu" : "cpu", at, (double)a[at], (double)b[at]);
      free(a);
      free(b);
      free(seg);
      clembed_ids_release(&ids);
      clembed_ids_release(&sids);
      clembed_matrix_release(&segm);
      clembed_matrix_release(&out);
      clembed_matrix_release(&out2);
      fx_release(&f);
    }
  clembed_context_destroy(sh[0]);
  clembed_context_destroy(sh[1]);
}

/* --------------------------------------------------------------- split */

/* A context whose buffers hold at most `bytes` (CLEMBED_MAX_BUFFER_BYTES). */
static clembed_context *limited_context(size_t bytes) {
  char v[32];
  snprintf(v, sizeof v, "%zu", bytes);
  setenv("CLEMBED_MAX_BUFFER_BYTES", v, 1);
  clembed_context *c = NULL;
  clembed_status s = clembed_context_create(NULL, &c);
  unsetenv("CLEMBED_MAX_BUFFER_BYTES");
  EXPECT(s == CLEMBED_OK, "a context with CLEMBED_MAX_BUFFER_BYTES=%zu: %s", bytes, clembed_status_string(s));
  return s == CLEMBED_OK ? c : NULL;
}

TU_CASE(split) {
  for (int k = 0; k < NDT; k++) {
    int dt = DTS[k];
    if (!dtype_runs(k) || !op_runs(k, OP_SPLIT)) continue;
    size_t rb = clembed_dtype_row_bytes((clembed_dtype)dt, cols_of(dt));
    clembed_context *c = limited_context((rb * 3 + 3) / 4 * 4); /* 3 rows a piece: 14 pieces */
    if (!c) return;
    fx f;
    if (fx_make_twin(c, dt, &f, 0)) {
      size_t np = 0, cols = f.cols;
      OK(c, clembed_matrix_pieces(c, &f.tab, 0, NULL, NULL, &np));
      EXPECT(np == (ROWS + 2) / 3, "%s: a %d-row table of 3 rows a buffer lies in %zu buffers", clembed_dtype_name(dt),
             ROWS, np);
      float *h = calloc(ROWS * cols, sizeof *h);
      OK(c, clembed_matrix_read(c, &f.tab, h, CLEMBED_F32));
      size_t at = 0;
      EXPECT(same_bits(h, f.vals, ROWS * cols, &at), "split %s: value %zu", clembed_dtype_name(dt), at);
      free(h);
      bag_io io;
      bag_io_make(c, cols, &io);
      clembed_bag_feature F[4];
      four_features(&f.tab, &io, F);
      /* out: a caller's buffer (the limit splits the library's matrices only) */
      cl_context cc = NULL;
      clGetCommandQueueInfo(clembed_context_queue(c), CL_QUEUE_CONTEXT, sizeof cc, &cc, NULL);
      cl_int err = CL_SUCCESS;
      clembed_matrix all = {0};
      all.buffer = clCreateBuffer(cc, CL_MEM_READ_WRITE, NB * 4 * cols * sizeof(float), NULL, &err);
      all.rows = NB;
      all.cols = 4 * cols;
      all.dtype = CLEMBED_F32;
      EXPECT(err == CL_SUCCESS && all.buffer, "clCreateBuffer: %d", (int)err);
      if (all.buffer) {
        h = calloc(NB * 4 * cols, sizeof *h);
        int64_t *mr = calloc(NB * cols, sizeof *mr), *rmr = calloc(NB * cols, sizeof *rmr);
        OK(c, clembed_embedding_bags(c, F, 4, &all, 0, NULL, NULL));
        OK(c, clembed_matrix_read(c, &all, h, CLEMBED_F32));
        OK(c, clembed_ids_read(c, &io.mrows, mr));
        for (int q = 0; q < 4; q++)
          for (size_t b = 0; b < NB; b++) {
            float row[512];
            ref_bag(&f, (int)F[q].options.mode, q == 2, b, row, q == 3 ? rmr + b * cols : NULL);
            EXPECT(same_bits(h + b * 4 * cols + q * cols, row, cols, &at), "split %s: feature %d bag %zu column %zu",
                   clembed_dtype_name(dt), q, b, at);
          }
        EXPECT(!memcmp(mr, rmr, NB * cols * sizeof *mr), "split %s: MAX's max_rows differ", clembed_dtype_name(dt));
        free(mr);
        free(rmr);
        free(h);
        clReleaseMemObject(all.buffer);
      }
      bag_io_release(&io);
      fx_release(&f);
    }
    clembed_context_destroy(c);
  }
}

/* ------------------------------------------------------------ refusals */

/* status s of an operation that takes float tables only: OK for a float
 * dtype, else CLEMBED_ERR_UNSUPPORTED with a message naming the dtype. */
static void expect_float_only(clembed_context *c, int dt, clembed_status s, const char *op) {
  const char *dn = clembed_dtype_name((clembed_dtype)dt);
  if (is_float(dt)) {
    EXPECT(s == CLEMBED_OK, "%s over %s: %s: %s", op, dn, clembed_status_string(s), clembed_context_message(c));
    OK(c, clembed_finish(c));
    return;
  }
  char up[32];
  size_t i = 0;
  for (; dn[i] && i + 1 < sizeof up; i++) up[i] = (char)(dn[i] >= 'a' && dn[i] <= 'z' ? dn[i] - 32 : dn[i]);
  up[i] = 0;
  const char *m = clembed_context_message(c);
  EXPECT(s == CLEMBED_ERR_UNSUPPORTED && (strstr(m, dn) || strstr(m, up)),
         "%s over %s: %s (%s), expected CLEMBED_ERR_UNSUPPORTED naming %s", op, dn, clembed_status_string(s), m, dn);
}

TU_CASE(refusals) {
  for (int k = 0; k < NDT; k++) {
    fx f;
    if (!dtype_runs(k) || !fx_make(ctx, DTS[k], &f)) continue;
    int dt = f.dt;
    size_t cols = f.cols;
    clembed_ids ids = make_ids(ctx, LOOK, NLOOK - 2);
    clembed_matrix g = {0}, q = {0};
    OK(ctx, clembed_matrix_create(ctx, NLOOK - 2, cols, CLEMBED_F32, &g));
    clembed_backward_options bo = clembed_backward_defaults();
    clembed_optimizer sgd = clembed_optimizer_defaults(CLEMBED_SGD);
    expect_float_only(ctx, dt, clembed_optimizer_step(ctx, &g, &ids, &bo, &sgd, &f.tab, 0, NULL, NULL),
                      "clembed_optimizer_step");
    expect_float_only(ctx, dt, clembed_sgd_update(ctx, &g, &ids, 0.1f, &bo, &f.tab, 0, NULL, NULL),
                      "clembed_sgd_update");
    expect_float_only(ctx, dt, clembed_renorm(ctx, &f.tab, &ids, 1.0f, 2.0f, 0, NULL, NULL), "clembed_renorm");
    expect_float_only(ctx, dt, clembed_matrix_init_normal(ctx, &f.tab, 0.0f, 1.0f, 7, 0, NULL, NULL),
                      "clembed_matrix_init_normal");
    /* a gradient or an output of the dtype */
    OK(ctx, clembed_matrix_create(ctx, ROWS, cols, (clembed_dtype)dt, &q));
    clembed_status sb = clembed_backward(ctx, &g, &ids, &bo, &q, 0, NULL, NULL);
    if (dt == CLEMBED_F16 || dt == CLEMBED_BF16) /* (a dense gradient is F32 only) */
      EXPECT(sb == CLEMBED_ERR_INVALID_ARGUMENT, "clembed_backward into %s: %s", clembed_dtype_name(dt),
             clembed_status_string(sb));
    else
      expect_float_only(ctx, dt, sb, "clembed_backward's grad_table");
    clembed_matrix o6 = q;
    o6.rows = NLOOK - 2;
    expect_float_only(ctx, dt, clembed_lookup(ctx, &f.twin, &ids, &o6, 0, NULL, NULL), "clembed_lookup's out");
    /* the bag step */
    bag_io io;
    bag_io_make(ctx, cols, &io);
    clembed_matrix bg = {0};
    OK(ctx, clembed_matrix_create(ctx, NB, cols, CLEMBED_F32, &bg));
    clembed_bag_options o = clembed_bag_defaults();
    o.policy = CLEMBED_INDEX_ZERO;
    expect_float_only(ctx, dt, clembed_bag_optimizer_step(ctx, &bg, &io.ids, &io.offs, &o, &sgd, &f.tab, 0, NULL, NULL),
                      "clembed_bag_optimizer_step");
    clembed_matrix_release(&bg);
    bag_io_release(&io);
    clembed_matrix_release(&q);
    clembed_matrix_release(&g);
    clembed_ids_release(&ids);
    fx_release(&f);
  }
}

/* The list's facts against ggml's (quant_types.h) and the library's. */
TU_CASE(list) {
#define DT_FACT(ID, value, name, qk, bytes)                                                                       \
  EXPECT(!strcmp(clembed_dtype_name((clembed_dtype)value), #name), "dtype %d: the library names it %s, the list " \
         #name, value, clembed_dtype_name((clembed_dtype)value));                                                 \
  EXPECT(clembed_dtype_block_values((clembed_dtype)value) == qk, "%s: block values", #name);                      \
  EXPECT(qk == 1 || (tq(value) && tq_qk(value) == qk && tq_bb(value) == bytes),                                   \
         "%s: the list's block (%d values, %d bytes) is not ggml's", #name, qk, bytes);
  CE_DTYPES(DT_FACT)
#undef DT_FACT
  EXPECT(clembed_dtype_block_values((clembed_dtype)NDT) == 0, "dtype %d past the list is known to the library", NDT);
}

int main(int argc, char **argv) {
  tu_suite suite = {"test_dtypes", 1, NULL, NULL, 0};
  return tu_main(argc, argv, suite);
}
