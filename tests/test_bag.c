/* Bags of ids (clembed_embedding_bag, clembed_embedding_bags), their backward
 * and fused steps, and clembed_renorm, against a plain float32 reference that
 * performs the documented operations in the documented order:
 *   forward, per column over a bag's taken ids in ascending order:
 *     SUM acc = 0; acc = acc + t (weighted: fmaf(w, t, acc)); MEAN acc / (float)count;
 *     MAX the first taken value, then t when t > acc or (t is NaN and acc is not);
 *   backward, per row and column over the contributions in ascending id position:
 *     S = 0; S = S + x, x = g (SUM), w * g (weighted), g / (float)count (MEAN),
 *     under MAX g[c] once per bag to the row max_rows[b][c] names; grad_table + S;
 *   steps: that S, then weight decay and the optimizer's float32 operations.
 * Table values of the block-quantized dtypes are the library's host
 * dequantization (clembed_matrix_read to F32, which test_quant checks against
 * ggml's code): the kernels must give the same bits from the blocks.
 * Everything is compared bit for bit (NaN with NaN), except the steps' sqrt
 * and division, which a device may not round correctly (4 ulp, as test_optim),
 * and renorm's general p (1e-6 relative, pow being the device's).
 *
 * Cases (all by default, or name some; --list names them; `small` shrinks
 * them for Oclgrind; `full` runs every combination of the cross products of
 * forward_float, forward_quant, batched, backward and steps, of which the
 * default runs a sample that meets every value of each setting in each shape:
 * ctest's test_bag_full, label exhaustive); every device case runs in both
 * kernel shapes (contexts with CLEMBED_TUNING=cpu and =gpu):
 *   forward_float forward_quant   every mode (SUM, weighted SUM, MEAN, MAX with
 *                   max_rows), table dtype, out dtype, index type, policy,
 *                   padding, fixed bags, strided tables and outputs
 *   edge_bags       empty bags, bags of padding only, one id 10,000 times, 0 bags,
 *                   0 columns, NaN and infinity under MAX
 *   hostile_offsets non-monotone, past the end, negative, huge, a wrong first or
 *                   last entry: the deferred error names offsets (index, value),
 *                   the bags hold their clamped ranges, in the forward, the
 *                   backward and the step (Oclgrind checks the accesses)
 *   batched         clembed_embedding_bags equals per-feature calls bit for bit:
 *                   mixed dtypes, widths, modes, shared tables, more buffers than
 *                   one launch takes; bad ids name features[f]
 *   backward        SUM, weighted SUM (grad_weights), MEAN, MAX, accumulated
 *   steps           every optimizer kind through clembed_bag_optimizer_step
 *   bags_steps      clembed_bags_optimizer_step: shared tables folded in feature
 *                   then id order; unshared tables equal the single step
 *   deterministic   two runs and both shapes give the same bits
 *   renorm          p = 1, 2, infinity, 3; repeated ids; F16/BF16; bad ids
 *   errors          every refusal */
#include "test_util.h"

/* ------------------------------------------------------------ device data */

static cl_context ctx_of(clembed_context *ctx) {
  cl_context c = NULL;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_CONTEXT, sizeof c, &c, NULL);
  return c;
}

static const char *DTN[7] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q6_K"};

static size_t qk_of(clembed_dtype t) { return clembed_dtype_block_values(t); }

/* A random finite f16 scale in about [2^-9, 2^-6]. */
static uint16_t rnd_scale(uint64_t *st) {
  float v = ldexpf(1.0f + 0.5f * tu_rand(st), -7 - (int)((tu_rand(st) + 1.0f) * 1.0f));
  return ref_f32_to_f16(v);
}

/* Random blocks of a quantized dtype with finite scales. */
static void rnd_blocks(uint64_t *st, clembed_dtype t, uint8_t *b, size_t nblocks) {
  size_t bb = clembed_dtype_row_bytes(t, qk_of(t));
  for (size_t k = 0; k < nblocks * bb; k++) b[k] = (uint8_t)((tu_rand(st) + 1.0f) * 127.9f);
  for (size_t k = 0; k < nblocks; k++) {
    uint8_t *p = b + k * bb;
    uint16_t d = rnd_scale(st), m = rnd_scale(st);
    if (t == CLEMBED_Q6_K) {
      memcpy(p + 208, &d, 2);
    } else {
      memcpy(p, &d, 2);
      if (t == CLEMBED_Q4_K) memcpy(p + 2, &m, 2);
    }
  }
}

/* A rows x cols table of dtype t in a buffer of its own, `lead` values before
 * it and `pad` after each row (multiples of the block size), random content;
 * *ref receives its values as float32 (the host's dequantization). */
static clembed_matrix make_table(clembed_context *ctx, uint64_t *st, clembed_dtype t, size_t rows, size_t cols,
                                 size_t lead, size_t pad, float **ref) {
  clembed_matrix whole = {0}, m;
  size_t ld = cols + pad, total = lead + rows * ld;
  if (total == 0) total = qk_of(t);
  OK(ctx, clembed_matrix_create(ctx, 1, total, t, &whole));
  if (qk_of(t) > 1) {
    size_t nb = total / qk_of(t);
    uint8_t *b = malloc(nb * clembed_dtype_row_bytes(t, qk_of(t)) + 1);
    rnd_blocks(st, t, b, nb);
    OK(ctx, clembed_matrix_write(ctx, &whole, b, t));
    free(b);
  } else {
    float *v = malloc(total * sizeof(float));
    for (size_t k = 0; k < total; k++) v[k] = ref_round(ldexpf(tu_rand(st), (int)((tu_rand(st) + 1.0f) * 3.0f) - 3), t);
    OK(ctx, clembed_matrix_write(ctx, &whole, v, CLEMBED_F32));
    free(v);
  }
  m = whole;
  m.offset = lead;
  m.rows = rows;
  m.cols = cols;
  m.ld = ld;
  *ref = malloc((rows * cols + 1) * sizeof(float));
  if (rows && cols) OK(ctx, clembed_matrix_read(ctx, &m, *ref, CLEMBED_F32));
  return m;
}

/* Ids (or offsets) of type t in a buffer of their own with `off` values before them. */
static clembed_ids make_ids(clembed_context *ctx, const int64_t *host, size_t n, clembed_index_type t, size_t off) {
  clembed_ids ids = {0};
  size_t es = t == CLEMBED_I64 ? 8 : 4;
  unsigned char *h = calloc(off + n + 1, es);
  for (size_t i = 0; i < off; i++) memset(h + i * es, 0x7F, es); /* something a stray read would notice */
  for (size_t i = 0; i < n; i++) {
    if (t == CLEMBED_I64) {
      memcpy(h + (off + i) * 8, &host[i], 8);
    } else {
      int32_t v = (int32_t)host[i];
      memcpy(h + (off + i) * 4, &v, 4);
    }
  }
  cl_int err;
  ids.buffer = clCreateBuffer(ctx_of(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, (off + n + 1) * es, h, &err);
  EXPECT(err == CL_SUCCESS, "clCreateBuffer ids %d", err);
  free(h);
  ids.offset = off;
  ids.count = n;
  ids.type = t;
  return ids;
}

static void release_ids(clembed_ids *ids) {
  if (ids->buffer) clReleaseMemObject(ids->buffer);
  memset(ids, 0, sizeof *ids);
}

static void release_matrix(clembed_matrix *m) {
  if (m->buffer) clReleaseMemObject(m->buffer);
  memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------ reference */

/* Bag b's ids [lo, hi): its offsets clamped into [0, n] (each on its own) or
 * the b-th run of n / bags. */
static void ref_range(const int64_t *off, size_t n, size_t bags, size_t b, size_t *lo, size_t *hi) {
  if (off) {
    int64_t a = off[b], z = off[b + 1];
    a = a < 0 ? 0 : a > (int64_t)n ? (int64_t)n : a;
    z = z < a ? a : z > (int64_t)n ? (int64_t)n : z;
    *lo = (size_t)a;
    *hi = (size_t)z;
  } else {
    *lo = b * (n / bags);
    *hi = *lo + n / bags;
  }
}

typedef struct bagp { /* one bag problem on the host */
  const float *T;     /* rows x cols table values */
  size_t rows, cols;
  const int64_t *ids;
  size_t n;
  const int64_t *off; /* bags + 1, or NULL */
  size_t bags;
  clembed_bag_options o; /* per_sample_weights / max_rows unused here */
  const float *w;        /* n weights, or NULL */
} bagp;

static int64_t ref_row(const bagp *p, size_t j) {
  return ref_resolve(p->ids[j], (int64_t)p->rows, p->o.policy, ref_padding_row(p->o.padding_idx, (int64_t)p->rows),
                     NULL);
}

/* The forward: out (bags x cols, float32 before the output's rounding), mr
 * (bags x cols, the MAX rows) */
static void bag_ref_forward(const bagp *p, float *out, int64_t *mr) {
  for (size_t b = 0; b < p->bags; b++) {
    size_t lo, hi;
    ref_range(p->off, p->n, p->bags, b, &lo, &hi);
    for (size_t c = 0; c < p->cols; c++) {
      float acc = 0.0f;
      int64_t arg = -1;
      unsigned cnt = 0;
      for (size_t j = lo; j < hi; j++) {
        int64_t r = ref_row(p, j);
        if (r < 0) continue;
        float t = p->T[(size_t)r * p->cols + c];
        if (p->o.mode == CLEMBED_BAG_MAX) {
          if (cnt == 0 || t > acc || (isnan(t) && !isnan(acc))) {
            acc = t;
            arg = r;
          }
        } else if (p->w) {
          acc = fmaf(p->w[j], t, acc);
        } else {
          acc = acc + t;
        }
        cnt++;
      }
      if (p->o.mode == CLEMBED_BAG_MEAN && cnt) acc = acc / (float)cnt;
      out[b * p->cols + c] = acc;
      if (mr) mr[b * p->cols + c] = arg;
    }
  }
}

/* The first bad id (position, value) under CHECK/WRAP, -1 if none. */
static int64_t ref_first_bad(const bagp *p, int64_t *value) {
  for (size_t j = 0; j < p->n; j++) {
    int bad;
    ref_resolve(p->ids[j], (int64_t)p->rows, p->o.policy, -1, &bad);
    if (bad) {
      *value = p->ids[j];
      return (int64_t)j;
    }
  }
  return -1;
}

/* The first bad offset (position, value), -1 if none. */
static int64_t ref_bad_offset(const bagp *p, int64_t *value) {
  if (!p->off) return -1;
  int64_t n = (int64_t)p->n;
  if (p->off[0] != 0 || (p->bags == 0 && p->off[0] != n)) {
    *value = p->off[0];
    return 0;
  }
  for (size_t b = 0; b < p->bags; b++) {
    int64_t a = p->off[b], v = p->off[b + 1];
    if (v < 0 || v < a || v > n || (b + 1 == p->bags && v != n)) {
      *value = v;
      return (int64_t)b + 1;
    }
  }
  return -1;
}

/* The bag of id j (the last whose offset is at most j), as the kernels assign it. */
static size_t ref_bag_of(const bagp *p, size_t j) {
  if (!p->off) return j / (p->n / p->bags);
  size_t b = 0;
  for (size_t k = 0; k < p->bags; k++)
    if (p->off[k] <= (int64_t)j) b = k;
  return b;
}

/* The row gradients (rows x cols) of the bag backward, folded from zero in
 * ascending id position; touched[v] = 1 for a row with a contribution. */
static void bag_ref_backward(const bagp *p, const float *g, size_t g_ld, const int64_t *mr, float *G,
                         unsigned char *touched) {
  size_t cols = p->cols;
  memset(G, 0, p->rows * cols * sizeof(float));
  memset(touched, 0, p->rows ? p->rows : 1);
  unsigned *cnt = calloc(p->bags + 1, sizeof *cnt);
  for (size_t b = 0; b < p->bags; b++) {
    size_t lo, hi;
    ref_range(p->off, p->n, p->bags, b, &lo, &hi);
    for (size_t j = lo; j < hi; j++) cnt[b] += ref_row(p, j) >= 0;
  }
  size_t *bag = malloc((p->n + 1) * sizeof *bag);
  for (size_t j = 0; j < p->n && p->bags; j++) bag[j] = ref_bag_of(p, j);
  for (size_t j = 0; j < p->n && p->bags; j++) {
    int64_t r = ref_row(p, j);
    if (r < 0) continue;
    size_t b = bag[j];
    const float *gb = g + b * g_ld;
    int first = 1; /* MAX: the bag's first id of this row (its ids are consecutive) */
    for (size_t k = j; k-- > 0 && bag[k] == b;)
      if (ref_row(p, k) == r) {
        first = 0;
        break;
      }
    int named = 0;
    for (size_t c = 0; c < cols; c++) {
      float x;
      if (p->o.mode == CLEMBED_BAG_MAX) {
        int here = mr[b * cols + c] == r;
        named |= here;
        x = here && first ? gb[c] : 0.0f;
      } else if (p->o.mode == CLEMBED_BAG_MEAN) {
        x = gb[c] / (float)cnt[b];
      } else {
        x = p->w ? p->w[j] * gb[c] : gb[c];
      }
      G[(size_t)r * cols + c] = G[(size_t)r * cols + c] + x;
    }
    if (p->o.mode != CLEMBED_BAG_MAX || named) touched[r] = 1;
  }
  free(bag);
  free(cnt);
}

/* ------------------------------------------------------------ comparisons */

static uint32_t f32_bits(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

/* Element i of a host array of dtype t, as stored bits. */
static uint32_t host_bits(const void *p, size_t i, clembed_dtype t) {
  return t == CLEMBED_F32 ? f32_bits(((const float *)p)[i]) : ((const uint16_t *)p)[i];
}
static uint32_t stored_bits(float v, clembed_dtype t) {
  if (t == CLEMBED_F16) return ref_f32_to_f16(v);
  if (t == CLEMBED_BF16) return ref_f32_to_bf16(v);
  return f32_bits(v);
}

/* out (read as its dtype) against want (float32, before the output's rounding),
 * bit for bit (a NaN matches a NaN). With `zero_sign`, a zero matches a zero of
 * either sign: a weighted SUM's fma gives -0 for fma(w, t, +0) with w * t = -0 on
 * Mesa's llvmpipe (IEEE's and the other devices' +0). */
static void expect_matrix(clembed_context *ctx, const clembed_matrix *out, const float *want, const char *what,
                          int zero_sign) {
  size_t n = out->rows * out->cols, bad = 0, first = 0;
  void *got = tu_alloc_elems(n, out->dtype);
  if (n) OK(ctx, clembed_matrix_read(ctx, out, got, out->dtype));
  for (size_t i = 0; i < n; i++) {
    float g = tu_elem(got, i, out->dtype);
    if (host_bits(got, i, out->dtype) != stored_bits(want[i], out->dtype) && !(isnan(g) && isnan(want[i])) &&
        !(zero_sign && g == 0.0f && want[i] == 0.0f) && !bad++)
      first = i;
  }
  EXPECT(bad == 0, "%s: %zu of %zu values differ, first [%zu][%zu]: %.9g, expected %.9g", what, bad, n,
         n ? first / out->cols : 0, n ? first % out->cols : 0, n ? (double)tu_elem(got, first, out->dtype) : 0.0,
         n ? (double)ref_round(want[first], out->dtype) : 0.0);
  free(got);
}

static int64_t *read_ids64(clembed_context *ctx, const clembed_ids *ids) {
  int64_t *h = malloc((ids->count + 1) * 8);
  if (ids->type == CLEMBED_I64) {
    OK(ctx, clembed_ids_read(ctx, ids, h));
  } else {
    int32_t *t = malloc((ids->count + 1) * 4);
    OK(ctx, clembed_ids_read(ctx, ids, t));
    for (size_t i = 0; i < ids->count; i++) h[i] = t[i];
    free(t);
  }
  return h;
}

/* The finish's status and detail: `code`, and for an error its argument, index and value. */
static void expect_finish(clembed_context *ctx, clembed_status code, const char *arg, int64_t index, int64_t value,
                          const char *what) {
  clembed_status s = clembed_finish(ctx);
  EXPECT(s == code, "%s: finish gave %s, expected %s (%s)", what, clembed_status_string(s),
         clembed_status_string(code), clembed_context_message(ctx));
  if (s != code || code == CLEMBED_OK) return;
  clembed_error_detail d;
  clembed_context_error(ctx, &d);
  EXPECT(!strcmp(d.argument, arg) && d.index == index && d.value == value,
         "%s: detail %s[%lld] = %lld, expected %s[%lld] = %lld (%s)", what, d.argument, (long long)d.index,
         (long long)d.value, arg, (long long)index, (long long)value, clembed_context_message(ctx));
}

/* ------------------------------------------------------------ shapes */

static clembed_context *shape_ctx[2];
static int shapes_ok = -1;
static const char *SHAPE[2] = {"cpu shapes", "gpu shapes"};

static int shapes(void) {
  if (shapes_ok < 0) shapes_ok = tu_shaped_pair(&shape_ctx[0], &shape_ctx[1]);
  return shapes_ok;
}

/* ------------------------------------------------------------ forward */

typedef struct fcase {
  clembed_dtype tdt, odt;
  size_t rows, cols, bags, maxlen;
  clembed_bag_mode mode;
  int weighted, fixed, with_mr, bad_ids;
  clembed_index_policy policy;
  int64_t padding_idx;
  clembed_index_type it, ot, mrt;
  size_t t_lead, t_pad, o_extra, o_off, id_off;
  const int64_t *ids, *off; /* given bags (n ids, bags + 1 offsets or NULL for fixed bags), else random */
  size_t n;
  const float *T; /* given table values (F32), else random */
  clembed_status finish;    /* when given bags: what finish returns, */
  const char *err_arg;      /* and its detail */
  int64_t err_index, err_value;
} fcase;

static size_t rnd_below(uint64_t *st, size_t k) {
  size_t v = (size_t)((double)(tu_rand(st) + 1.0f) * 0.5 * (double)k);
  return v < k ? v : (k ? k - 1 : 0);
}

/* Random bags: ids (some the padding row, some outside the table when bad_ids)
 * and offsets (lengths 0 .. maxlen), or fixed bags of maxlen. */
static size_t make_bags(uint64_t *st, const fcase *fc, int64_t **ids, int64_t **off) {
  size_t n = 0;
  *off = NULL;
  if (fc->ids) {
    *ids = malloc((fc->n + 1) * sizeof(int64_t));
    memcpy(*ids, fc->ids, fc->n * sizeof(int64_t));
    if (fc->off) {
      *off = malloc((fc->bags + 1) * sizeof(int64_t));
      memcpy(*off, fc->off, (fc->bags + 1) * sizeof(int64_t));
    }
    return fc->n;
  }
  if (fc->fixed) {
    n = fc->bags * fc->maxlen;
  } else {
    *off = malloc((fc->bags + 1) * sizeof(int64_t));
    (*off)[0] = 0;
    for (size_t b = 0; b < fc->bags; b++) {
      size_t len = rnd_below(st, fc->maxlen + 1);
      if (b % 5 == 1) len = 0; /* some empty bags */
      n += len;
      (*off)[b + 1] = (int64_t)n;
    }
  }
  *ids = malloc((n + 1) * sizeof(int64_t));
  int64_t pad = ref_padding_row(fc->padding_idx, (int64_t)fc->rows);
  for (size_t j = 0; j < n; j++) {
    int64_t v = (int64_t)rnd_below(st, fc->rows);
    size_t r = rnd_below(st, 16);
    if (pad >= 0 && r == 0) v = pad;
    if (fc->bad_ids && r == 1) v = (int64_t)fc->rows + (int64_t)rnd_below(st, 5);
    if (fc->bad_ids && r == 2) v = -1 - (int64_t)rnd_below(st, (size_t)fc->rows + 3); /* WRAP: some in range */
    (*ids)[j] = v;
  }
  return n;
}

/* One forward on ctx against the reference: out (strided, its gaps kept),
 * max_rows, and the deferred error of the first bad id. */
static void run_forward(clembed_context *ctx, const fcase *fc, const char *what) {
  uint64_t st = 0x9E37 + fc->rows * 131 + fc->cols * 17 + fc->bags * 7 + (uint64_t)fc->mode * 3 + fc->tdt;
  int64_t *ids, *off;
  size_t n = make_bags(&st, fc, &ids, &off), cols = fc->cols, bags = fc->bags;
  float *T, *w = NULL;
  clembed_matrix tab = make_table(ctx, &st, fc->tdt, fc->rows, cols, fc->t_lead, fc->t_pad, &T), wm = {0};
  if (fc->T) { /* given values */
    OK(ctx, clembed_matrix_write(ctx, &tab, fc->T, CLEMBED_F32));
    if (fc->rows && cols) OK(ctx, clembed_matrix_read(ctx, &tab, T, CLEMBED_F32));
  }
  if (fc->weighted) {
    w = malloc((n + 1) * sizeof(float));
    for (size_t j = 0; j < n; j++) w[j] = tu_rand(&st) * 2.0f;
    wm = tu_gapped_matrix(ctx_of(ctx), n, 1, CLEMBED_F32, 1, 3, w);
  }
  clembed_ids di = make_ids(ctx, ids, n, fc->it, fc->id_off), doff = {0}, dmr = {0};
  if (off) doff = make_ids(ctx, off, bags + 1, fc->ot, 1);
  int64_t *zeros = calloc(bags * cols + 1, sizeof(int64_t));
  if (fc->with_mr) dmr = make_ids(ctx, zeros, bags * cols, fc->mrt, 2);
  clembed_matrix out = tu_gapped_matrix(ctx_of(ctx), bags, cols, fc->odt, fc->o_extra, fc->o_off, NULL);
  clembed_bag_options o = clembed_bag_defaults();
  o.mode = fc->mode;
  o.policy = fc->policy;
  o.padding_idx = fc->padding_idx;
  o.per_sample_weights = fc->weighted ? &wm : NULL;
  o.max_rows = fc->with_mr ? &dmr : NULL;
  OK(ctx, clembed_embedding_bag(ctx, &tab, &di, off ? &doff : NULL, &o, &out, 0, NULL, NULL));
  bagp p = {T, fc->rows, cols, ids, n, off, bags, o, w};
  int reports = fc->policy == CLEMBED_INDEX_CHECK || fc->policy == CLEMBED_INDEX_WRAP;
  int64_t badv = 0, bad = reports ? ref_first_bad(&p, &badv) : -1;
  if (fc->err_arg)
    expect_finish(ctx, fc->finish, fc->err_arg, fc->err_index, fc->err_value, what);
  else
    expect_finish(ctx, bad >= 0 ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK, "ids", bad, badv, what);
  float *want = malloc((bags * cols + 1) * sizeof(float));
  int64_t *mr = malloc((bags * cols + 1) * sizeof(int64_t));
  bag_ref_forward(&p, want, mr);
  expect_matrix(ctx, &out, want, what, fc->weighted);
  cl_command_queue q = clembed_context_queue(ctx);
  tu_check_gaps(q, &out, what);
  if (fc->with_mr) {
    int64_t *got = read_ids64(ctx, &dmr);
    size_t diff = 0, first = 0;
    for (size_t k = 0; k < bags * cols; k++)
      if (got[k] != mr[k] && !diff++) first = k;
    EXPECT(diff == 0, "%s: max_rows: %zu differ, first [%zu]: %lld, expected %lld", what, diff, first,
           diff ? (long long)got[first] : 0LL, diff ? (long long)mr[first] : 0LL);
    free(got);
  }
  free(want);
  free(mr);
  free(zeros);
  free(T);
  free(w);
  free(ids);
  free(off);
  release_matrix(&tab);
  release_matrix(&out);
  release_matrix(&wm);
  release_ids(&di);
  release_ids(&doff);
  release_ids(&dmr);
}

static const clembed_bag_mode MODES4[4] = {CLEMBED_BAG_SUM, CLEMBED_BAG_SUM, CLEMBED_BAG_MEAN, CLEMBED_BAG_MAX};
static const char *MODEN[4] = {"SUM", "weighted SUM", "MEAN", "MAX"};
static const clembed_index_policy POLICIES[4] = {CLEMBED_INDEX_CHECK, CLEMBED_INDEX_CLAMP, CLEMBED_INDEX_ZERO,
                                                 CLEMBED_INDEX_WRAP};

/* A case of every mode for a table dtype and width, the other settings varied with k. */
static fcase forward_case(clembed_dtype tdt, size_t cols, int m, int k) {
  fcase fc;
  memset(&fc, 0, sizeof fc);
  fc.tdt = tdt;
  fc.odt = k % 4 != 3 ? CLEMBED_F32 : k / 4 % 2 ? CLEMBED_F16 : CLEMBED_BF16;
  fc.rows = 37;
  fc.cols = cols;
  fc.bags = tu_small ? 6 : 23;
  fc.maxlen = tu_small ? 5 : 13;
  fc.mode = MODES4[m];
  fc.weighted = m == 1;
  fc.fixed = k % 3 == 2;
  fc.with_mr = m == 3 && k % 2 == 0;
  fc.policy = POLICIES[k % 4];
  fc.bad_ids = 1;
  fc.padding_idx = k % 2 ? 5 : k % 4 == 2 ? -2 : CLEMBED_NO_PADDING;
  fc.it = k % 2 ? CLEMBED_I64 : CLEMBED_I32;
  fc.ot = k / 4 % 2 ? CLEMBED_I32 : CLEMBED_I64;
  fc.mrt = k % 4 < 2 ? CLEMBED_I64 : CLEMBED_I32;
  size_t qk = qk_of(tdt);
  fc.t_lead = k % 2 ? qk * 2 : 0;
  fc.t_pad = k % 2 ? qk : 0;
  fc.o_extra = k % 2 ? 3 : 0;
  fc.o_off = k % 2 ? 5 : 0;
  fc.id_off = k % 2 ? 3 : 0;
  return fc;
}

/* The forward over dtypes x widths x modes in both shapes. With `full` every
 * combination; by default a sample of the same cases: in each shape every mode
 * once, each with the dtype (m + s) % ndt (the CPU shape's float dtypes paired
 * as batched's float features are: their programs are then built once) and
 * the width (m + s) % nw, so that each shape meets every dtype and every mode,
 * and the sample still meets every output dtype, bag kind (fixed, I32 and I64
 * offsets), policy and padding (checked below). */
static void forward_dtypes(const clembed_dtype *dts, size_t ndt, const size_t *widths, size_t nw) {
  if (!shapes()) return;
  static const size_t cpu_floats[4] = {0, 2, 1, 0}; /* SUM F32, weighted SUM BF16, MEAN F16, MAX F32 */
  int k = 0;
  unsigned seen_dt[2] = {0, 0}, seen_mode[2] = {0, 0}, seen_out = 0, seen_bags = 0, seen_policy = 0;
  for (int s = 0; s < 2; s++)
    for (size_t d = 0; d < ndt; d++)
      for (size_t c = 0; c < nw; c++)
        for (int m = 0; m < 4; m++, k++) {
          size_t pick = s == 0 && ndt == 3 ? cpu_floats[m] : ((size_t)m + (size_t)s) % ndt;
          if (!tu_full && (d != pick || c != ((size_t)m + (size_t)s) % nw)) continue;
          size_t cols = widths[c] * qk_of(dts[d]);
          fcase fc = forward_case(dts[d], cols, m, k);
          char what[160];
          snprintf(what, sizeof what, "%s, %s table, %zu cols, %s, out %s, policy %d, %s, %s", SHAPE[s], DTN[dts[d]],
                   cols, MODEN[m], DTN[fc.odt], (int)fc.policy, fc.fixed ? "fixed bags" : "offsets",
                   fc.with_mr ? "max_rows" : "no max_rows");
          run_forward(shape_ctx[s], &fc, what);
          seen_dt[s] |= 1u << d;
          seen_mode[s] |= 1u << m;
          seen_out |= 1u << fc.odt;
          seen_bags |= fc.fixed ? 1u : fc.ot == CLEMBED_I32 ? 2u : 4u;
          seen_policy |= 1u << fc.policy;
        }
  for (int s = 0; s < 2; s++)
    EXPECT(seen_dt[s] == (1u << ndt) - 1 && seen_mode[s] == 15u,
           "%s: the forward's cases met dtypes %#x and modes %#x, not all", SHAPE[s], seen_dt[s], seen_mode[s]);
  EXPECT(seen_out == (1u << CLEMBED_F32 | 1u << CLEMBED_F16 | 1u << CLEMBED_BF16) && seen_bags == 7u &&
             seen_policy == 15u,
         "the forward's cases met output dtypes %#x, bag kinds %#x and policies %#x, not all", seen_out, seen_bags,
         seen_policy);
}

TU_CASE(forward_float) {
  static const clembed_dtype dts[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  /* 80: an odd count of whole vectors (a last vector without its pair) where VEC is 16 */
  static const size_t w_all[7] = {1, 3, 17, 64, 80, 128, 133}, w_small[3] = {3, 17, 40};
  forward_dtypes(dts, 3, tu_small ? w_small : w_all, tu_small ? 3 : 7);
}

TU_CASE(forward_quant) {
  static const clembed_dtype dts[4] = {CLEMBED_Q8_0, CLEMBED_Q4_0, CLEMBED_Q4_K, CLEMBED_Q6_K};
  static const size_t w_all[2] = {1, 2}, w_small[1] = {1};
  forward_dtypes(dts, 4, tu_small ? w_small : w_all, tu_small ? 1 : 2);
}

/* An F32 case of given bags, default settings otherwise. */
static fcase given_case(size_t rows, size_t cols, clembed_bag_mode mode, const int64_t *ids, size_t n,
                        const int64_t *off, size_t bags) {
  fcase fc;
  memset(&fc, 0, sizeof fc);
  fc.tdt = CLEMBED_F32;
  fc.odt = CLEMBED_F32;
  fc.rows = rows;
  fc.cols = cols;
  fc.bags = bags;
  fc.mode = mode;
  fc.policy = CLEMBED_INDEX_CHECK;
  fc.padding_idx = CLEMBED_NO_PADDING;
  fc.it = CLEMBED_I64;
  fc.ot = CLEMBED_I64;
  fc.mrt = CLEMBED_I64;
  fc.ids = ids;
  fc.n = n;
  fc.off = off;
  fc.fixed = off == NULL;
  return fc;
}

/* Empty bags, bags of padding only, one id 10,000 times, 0 bags, 0 columns,
 * NaN and infinities under MAX. */
TU_CASE(edge_bags) {
  if (!shapes()) return;
  size_t rep = 10000, n = rep + 9;
  int64_t *ids = malloc(n * sizeof(int64_t));
  int64_t head[9] = {4, 4, 1, 2, 3, 4, 0, 4, 1}; /* bag 1: padding only (4); bag 3: padding and ids */
  memcpy(ids, head, sizeof head);
  for (size_t j = 9; j < n; j++) ids[j] = 7; /* bag 5: row 7, 10,000 times */
  int64_t off[7] = {0, 0, 2, 2, 9, 9, (int64_t)n}; /* bags 0, 2, 4 empty */
  for (int s = 0; s < 2; s++)
    for (int m = 0; m < 4; m++)
      for (size_t cols = 5; cols <= 40; cols += 35) {
        char what[128];
        snprintf(what, sizeof what, "%s, %s, %zu cols, empty and padding bags, an id 10,000 times", SHAPE[s],
                 MODEN[m], cols);
        fcase fc = given_case(11, cols, MODES4[m], ids, n, off, 6);
        fc.padding_idx = 4;
        fc.weighted = m == 1;
        fc.with_mr = m == 3;
        run_forward(shape_ctx[s], &fc, what);
      }
  /* NaN and infinities under MAX: a NaN wins wherever it is (the first one),
   * +inf beats everything else, -inf loses to everything */
  float T[6 * 4];
  for (int k = 0; k < 24; k++) T[k] = (float)(k % 7) - 3.0f;
  T[1 * 4 + 0] = NAN;
  T[3 * 4 + 0] = -NAN;
  T[2 * 4 + 1] = INFINITY;
  T[4 * 4 + 2] = -INFINITY;
  T[5 * 4 + 3] = NAN;
  int64_t nids[10] = {0, 1, 2, 3, 4, 2, 5, 4, 4, 4}, noff[4] = {0, 5, 7, 10};
  for (int s = 0; s < 2; s++)
    for (int m = 0; m < 4; m++) {
      char what[96];
      snprintf(what, sizeof what, "%s, %s over NaN and infinities", SHAPE[s], MODEN[m]);
      fcase fc = given_case(6, 4, MODES4[m], nids, 10, noff, 3);
      fc.T = T;
      fc.weighted = m == 1;
      fc.with_mr = m == 3;
      run_forward(shape_ctx[s], &fc, what);
    }
  /* 0 bags: offsets {0} and no ids, or fixed bags of no ids; 0 columns: the ids are still checked */
  int64_t zero[1] = {0}, bad_ids[3] = {1, 99, 2}, off3[2] = {0, 3};
  for (int s = 0; s < 2; s++) {
    char what[96];
    snprintf(what, sizeof what, "%s, 0 bags", SHAPE[s]);
    fcase fc = given_case(5, 3, CLEMBED_BAG_SUM, zero, 0, zero, 0);
    run_forward(shape_ctx[s], &fc, what);
    fc = given_case(5, 3, CLEMBED_BAG_MEAN, zero, 0, NULL, 0);
    run_forward(shape_ctx[s], &fc, what);
    /* 0 bags but 3 ids: offsets {0} cannot end at 3 */
    fc = given_case(5, 3, CLEMBED_BAG_SUM, bad_ids, 3, zero, 0);
    fc.policy = CLEMBED_INDEX_CLAMP;
    fc.finish = CLEMBED_ERR_INDEX_OUT_OF_RANGE;
    fc.err_arg = "offsets";
    fc.err_index = 0;
    fc.err_value = 0;
    run_forward(shape_ctx[s], &fc, what);
    snprintf(what, sizeof what, "%s, 0 columns", SHAPE[s]);
    fc = given_case(5, 0, CLEMBED_BAG_MAX, bad_ids, 3, off3, 1);
    fc.with_mr = 1;
    run_forward(shape_ctx[s], &fc, what); /* ids[1] = 99 reported */
  }
  free(ids);
}

/* ------------------------------------------------------------ the loop limit */

/* One call of nf features (nf == 1: clembed_embedding_bag; else
 * clembed_embedding_bags) over tables of 50 rows (F32, random; made on ctx,
 * so split where the context splits its buffers): one of `cols` columns, and
 * for the odd features one of cols - 3 (a pass with a tail where the
 * other's has none, or the other way round), every eighth (f % 8 == 7) one
 * of no columns (its ids checked in a loop of their own), its
 * features' ids in two buffers (I64 for even f, I32 for odd), their offsets,
 * weights and max_rows in one buffer each, so that the call is one launch
 * whose work-items hold bags of several features; feature f has nb bags of
 * lens[f * nb + b] ids (random rows; every other bag with the padding row 7
 * among them, so that bags of plain ids and bags with a padding id lie side
 * by side) pooled by mode MODES4[mode[f]] (1: weighted). `cap` (0: unknown,
 * a refusal expected) the cap past which bags are expected refused: checks the
 * finish (CLEMBED_ERR_UNSUPPORTED naming offsets, the first feature's first
 * bag past the cap and its length, or OK), the output (a refused bag's row
 * zero, MAX's max_rows -1; the others exact) and returns the cap the message
 * names (else `cap`). */
static size_t cap_call(clembed_context *ctx, size_t nf, size_t cols, const int *mode, size_t nb, const size_t *lens,
                       size_t cap, const char *what) {
  uint64_t st = 0xCA9 + nf * 7 + nb * 131 + lens[0];
  size_t got_cap = 0, total = 0, nid[2] = {0, 0};
  long want_f = -1, want_b = -1;
  size_t *n = calloc(nf, sizeof *n), *first = calloc(nf, sizeof *first), *idfirst = calloc(nf, sizeof *idfirst);
  for (size_t f = 0; f < nf; f++) {
    for (size_t b = 0; b < nb; b++) n[f] += lens[f * nb + b];
    first[f] = total;
    idfirst[f] = nid[f % 2];
    total += n[f];
    nid[f % 2] += n[f];
  }
  int64_t *ids = malloc((total + 1) * sizeof *ids), *idh[2], *off = malloc((nf * (nb + 1) + 1) * sizeof *off);
  idh[0] = malloc((nid[0] + 1) * sizeof *ids);
  idh[1] = malloc((nid[1] + 1) * sizeof *ids);
  const size_t cv[3] = {cols, cols > 3 ? cols - 3 : 1, 0};
  size_t *cf = calloc(nf, sizeof *cf), *c0 = calloc(nf, sizeof *c0), tc = 0, mrn = 0;
  for (size_t f = 0; f < nf; f++) {
    cf[f] = cv[nf < 2 ? 0 : f % 8 == 7 ? 2 : f % 2];
    c0[f] = tc;
    tc += cf[f];
  }
  float *w = malloc((total + 1) * sizeof *w), *T[3] = {malloc((50 * cv[0] + 1) * sizeof(float)),
                                                        malloc((50 * cv[1] + 1) * sizeof(float)), malloc(4)};
  for (size_t f = 0; f < nf; f++) {
    int64_t *o = off + f * (nb + 1), *x = ids + first[f];
    o[0] = 0;
    for (size_t b = 0, j = 0; b < nb; b++) {
      for (size_t k = 0; k < lens[f * nb + b]; k++, j++) {
        x[j] = (int64_t)rnd_below(&st, 50);
        if (b % 2 == 1 && k == lens[f * nb + b] / 2) x[j] = 7;
        else if (x[j] == 7) x[j] = 8;
        w[first[f] + j] = tu_rand(&st) * 2.0f;
      }
      o[b + 1] = o[b] + (int64_t)lens[f * nb + b];
    }
    memcpy(idh[f % 2] + idfirst[f], x, n[f] * sizeof *x);
  }
  clembed_matrix tab[3] = {{0}, {0}, {0}}, out = {0};
  clembed_matrix wall = tu_gapped_matrix(ctx_of(ctx), total ? total : 1, 1, CLEMBED_F32, 0, 0, w);
  for (int k = 0; k < 3; k++) {
    for (size_t e = 0; e < 50 * cv[k]; e++) T[k][e] = ldexpf(tu_rand(&st), (int)((tu_rand(&st) + 1.0f) * 3.0f) - 3);
    OK(ctx, clembed_matrix_create(ctx, 50, cv[k], CLEMBED_F32, &tab[k]));
    if (cv[k]) OK(ctx, clembed_matrix_write(ctx, &tab[k], T[k], CLEMBED_F32));
  }
  int64_t *zeros = calloc(nb * tc + 1, sizeof(int64_t));
  clembed_ids dids[2] = {make_ids(ctx, idh[0], nid[0], CLEMBED_I64, 0), make_ids(ctx, idh[1], nid[1], CLEMBED_I32, 0)};
  clembed_ids doff = make_ids(ctx, off, nf * (nb + 1), CLEMBED_I64, 1), dmr = make_ids(ctx, zeros, nb * tc, CLEMBED_I64, 0);
  clembed_bag_feature *F = calloc(nf, sizeof *F);
  clembed_ids *vi = calloc(nf, sizeof *vi), *vo = calloc(nf, sizeof *vo), *vm = calloc(nf, sizeof *vm);
  clembed_matrix *vw = calloc(nf, sizeof *vw);
  for (size_t f = 0; f < nf; f++) {
    clembed_bag_options o = clembed_bag_defaults();
    o.mode = MODES4[mode[f]];
    o.padding_idx = 7;
    vi[f] = dids[f % 2];
    vi[f].offset += idfirst[f];
    vi[f].count = n[f];
    vo[f] = doff;
    vo[f].offset += f * (nb + 1);
    vo[f].count = nb + 1;
    if (mode[f] == 1) {
      vw[f] = wall;
      vw[f].offset += first[f];
      vw[f].rows = n[f];
      o.per_sample_weights = &vw[f];
    }
    if (mode[f] == 3) {
      vm[f] = dmr;
      vm[f].offset += mrn;
      vm[f].count = nb * cf[f];
      mrn += nb * cf[f];
      o.max_rows = &vm[f];
    }
    F[f] = clembed_bag_feature_defaults();
    F[f].table = &tab[cf[f] == cols ? 0 : cf[f] ? 1 : 2];
    F[f].ids = &vi[f];
    F[f].offsets = &vo[f];
    F[f].options = o;
  }
  OK(ctx, clembed_matrix_create(ctx, nb, tc, CLEMBED_F32, &out));
  if (nf == 1)
    OK(ctx, clembed_embedding_bag(ctx, &tab[0], &vi[0], &vo[0], &F[0].options, &out, 0, NULL, NULL));
  else
    OK(ctx, clembed_embedding_bags(ctx, F, nf, &out, 0, NULL, NULL));
  clembed_status s = clembed_finish(ctx);
  const char *msg = clembed_context_message(ctx);
  clembed_error_detail d;
  clembed_context_error(ctx, &d);
  const char *at = s == CLEMBED_ERR_UNSUPPORTED ? strstr(msg, "at most ") : NULL;
  if (at) got_cap = (size_t)strtoull(at + 8, NULL, 10);
  if (!cap) { /* a probe: a refusal expected, the cap learnt */
    EXPECT(s == CLEMBED_ERR_UNSUPPORTED && !strcmp(d.argument, "offsets") && strstr(msg, "loop_limit") && got_cap,
           "%s: finish gave %s, expected CLEMBED_ERR_UNSUPPORTED naming the cap (%s)", what,
           clembed_status_string(s), msg);
    cap = got_cap;
  }
  for (size_t f = 0; f < nf && cap && want_f < 0; f++)
    for (size_t b = 0; b < nb && want_b < 0; b++)
      if (lens[f * nb + b] > cap) want_f = (long)f, want_b = (long)b;
  if (want_f >= 0) {
    char feat[48] = "";
    if (nf > 1) snprintf(feat, sizeof feat, "features[%ld].", want_f);
    EXPECT(s == CLEMBED_ERR_UNSUPPORTED && !strcmp(d.argument, "offsets") && d.index == want_b &&
               d.value == (int64_t)lens[want_f * nb + want_b] && got_cap == cap && (!*feat || strstr(msg, feat)),
           "%s: finish gave %s, detail %s[%lld] = %lld, expected CLEMBED_ERR_UNSUPPORTED for %soffsets[%ld] = %zu, "
           "the cap %zu (%s)",
           what, clembed_status_string(s), d.argument, (long long)d.index, (long long)d.value, feat, want_b,
           lens[want_f * nb + want_b], cap, msg);
  } else {
    EXPECT(s == CLEMBED_OK, "%s: finish gave %s (%s)", what, clembed_status_string(s), msg);
  }
  float *want = calloc(nb * tc + 1, sizeof(float)), *fw = malloc((nb * cols + 1) * sizeof(float));
  int64_t *mr = malloc((nb * cols + 1) * sizeof(int64_t)), *gmr = read_ids64(ctx, &dmr);
  size_t wrong_mr = 0;
  for (size_t f = 0, at = 0; f < nf; f++) {
    bagp p = {T[cf[f] == cols ? 0 : cf[f] ? 1 : 2], 50, cf[f], ids + first[f], n[f], off + f * (nb + 1), nb, F[f].options,
              mode[f] == 1 ? w + first[f] : NULL};
    bag_ref_forward(&p, fw, mr);
    for (size_t b = 0; b < nb; b++)
      for (size_t c = 0; c < cf[f]; c++) {
        int refused = cap && lens[f * nb + b] > cap;
        want[b * tc + c0[f] + c] = refused ? 0.0f : fw[b * cf[f] + c];
        if (mode[f] == 3) wrong_mr += gmr[at + b * cf[f] + c] != (refused ? -1 : mr[b * cf[f] + c]);
      }
    if (mode[f] == 3) at += nb * cf[f];
  }
  expect_matrix(ctx, &out, want, what, 1);
  EXPECT(wrong_mr == 0, "%s: %zu max_rows differ", what, wrong_mr);
  release_matrix(&tab[0]);
  release_matrix(&tab[1]);
  release_matrix(&tab[2]);
  release_matrix(&wall);
  release_matrix(&out);
  release_ids(&dids[0]);
  release_ids(&dids[1]);
  release_ids(&doff);
  release_ids(&dmr);
  free(want), free(fw), free(mr), free(gmr), free(zeros), free(F), free(vi), free(vo), free(vm), free(vw);
  free(ids), free(idh[0]), free(idh[1]), free(off), free(w), free(T[0]), free(T[1]), free(T[2]), free(n), free(first);
  free(idfirst), free(cf), free(c0);
  return got_cap ? got_cap : cap;
}

/* On ctx (a device with a loop limit, or one set by CLEMBED_TUNE), nb bags a
 * feature of `cols` columns: a probe past the cap learns it; then every mode
 * at the cap (one feature; and nf features side by side, modes mixed, the ids
 * of both widths) exact, one past it refused; fixed bags past the cap refused
 * at the call, the output untouched. */
static void cap_cases(clembed_context *ctx, size_t cols, size_t nb, size_t nf, size_t big, const char *name) {
  char what[200];
  size_t *lens = malloc((2 * nf + nb + 1) * sizeof *lens), cap = 0, cap_sum = 0;
  int *modes = malloc((nf + 1) * sizeof *modes);
  for (int m = 0; m < 4; m++) { /* (the cap depends on the paths the call's modes take) */
    int mm[1] = {m};
    for (size_t k = 0; k < nb; k++) lens[k] = k == 1 || k + 2 == nb ? big : 3 + k % 4;
    snprintf(what, sizeof what, "%s, %zu cols, %s, %zu bags, two of %zu ids", name, cols, MODEN[m], nb, big);
    cap = cap_call(ctx, 1, cols, mm, nb, lens, 0, what);
    if (!cap) break;
    if (m == 0) cap_sum = cap;
    EXPECT(cap < big, "%s: the cap %zu is not below %zu", what, cap, big);
    for (size_t k = 0; k < nb; k++) lens[k] = k % 5 == 4 ? cap - 1 : cap;
    snprintf(what, sizeof what, "%s, %zu cols, %s, %zu bags at the cap (%zu ids)", name, cols, MODEN[m], nb, cap);
    cap_call(ctx, 1, cols, mm, nb, lens, cap, what);
    lens[nb / 2] = cap + 1;
    snprintf(what, sizeof what, "%s, %zu cols, %s, a bag one past the cap (%zu ids)", name, cols, MODEN[m], cap + 1);
    cap_call(ctx, 1, cols, mm, nb, lens, cap, what);
  }
  /* nf features in one launch, 2 bags each (consecutive work-items, so the
   * lanes a device runs together, on bags of several features): SUM, SUM,
   * weighted, weighted over and over (a table with a tail and one without
   * each, ids of both widths: every copy of the plain loop in one group of
   * lanes, beside the group loops of the bags with a padding id), then every
   * mode in turn */
  static const int MIX[2][4] = {{0, 0, 1, 1}, {0, 1, 2, 3}};
  for (int x = 0; cap && nf > 1 && x < 2; x++) {
    for (size_t f = 0; f < nf; f++) modes[f] = MIX[x][f % 4];
    for (size_t k = 0; k < 2 * nf; k++) lens[k] = k == 5 ? big : 2 + k % 3;
    snprintf(what, sizeof what, "%s, %zu cols, %zu features of modes %s, one bag of %zu ids", name, cols, nf,
             x ? "in turn" : "SUM and weighted", big);
    size_t cap2 = cap_call(ctx, nf, cols, modes, 2, lens, 0, what);
    if (!cap2) continue;
    for (size_t k = 0; k < 2 * nf; k++) lens[k] = k % 7 == 6 ? cap2 - 1 : cap2;
    snprintf(what, sizeof what, "%s, %zu cols, %zu features of modes %s, every bag at the cap (%zu ids)", name, cols,
             nf, x ? "in turn" : "SUM and weighted", cap2);
    cap_call(ctx, nf, cols, modes, 2, lens, cap2, what);
    lens[2 * nf - 3] = cap2 + 1;
    snprintf(what, sizeof what, "%s, %zu cols, %zu features of modes %s, a bag one past the cap", name, cols, nf,
             x ? "in turn" : "SUM and weighted");
    cap_call(ctx, nf, cols, modes, 2, lens, cap2, what);
  }
  free(lens);
  free(modes);
  if (!cap_sum) return;
  /* fixed bags (SUM) past the cap: refused at the call, out untouched */
  cap = cap_sum;
  size_t fb = 2, n = fb * (cap + 1);
  int64_t *ids = calloc(n, sizeof *ids);
  float *before = malloc(fb * cols * sizeof *before), *after = malloc(fb * cols * sizeof *after);
  for (size_t k = 0; k < fb * cols; k++) before[k] = (float)k + 0.5f;
  clembed_ids di = make_ids(ctx, ids, n, CLEMBED_I32, 0);
  clembed_matrix tab = {0}, out = {0};
  OK(ctx, clembed_matrix_create(ctx, 50, cols, CLEMBED_F32, &tab)); /* (as cap_call's: split alike) */
  OK(ctx, clembed_matrix_create(ctx, fb, cols, CLEMBED_F32, &out));
  OK(ctx, clembed_matrix_write(ctx, &out, before, CLEMBED_F32));
  clembed_status s = clembed_embedding_bag(ctx, &tab, &di, NULL, NULL, &out, 0, NULL, NULL);
  clembed_error_detail d;
  clembed_context_error(ctx, &d);
  EXPECT(s == CLEMBED_ERR_UNSUPPORTED && !strcmp(d.argument, "ids") && strstr(clembed_context_message(ctx), "loop_limit"),
         "%s: fixed bags of %zu ids: %s (%s)", name, cap + 1, clembed_status_string(s), clembed_context_message(ctx));
  OK(ctx, clembed_finish(ctx));
  OK(ctx, clembed_matrix_read(ctx, &out, after, CLEMBED_F32));
  EXPECT(!memcmp(before, after, fb * cols * sizeof *after), "%s: refused fixed bags wrote the output", name);
  free(before);
  free(after);
  release_matrix(&tab);
  release_matrix(&out);
  release_ids(&di);
  free(ids);
}

/* A device that ends a work-item's loops after loop_limit iterations in all
 * (Mesa's llvmpipe: 65,535, with no error) pools every bag up to the cap the
 * library names, exactly, and refuses a longer one instead of pooling part of
 * it: with loop_limit = 6000 on every device, in both shapes and the CPU
 * shape's order of every feature in a work-item; and on a device with a limit
 * of its own, with that limit, where a cap set too high gives short sums: 256
 * bags a call (work-groups of several items, so that the lanes a device runs
 * together hold bags of plain ids and bags with a padding id), 256 features of
 * mixed modes in a launch, and a table split into pieces (CLEMBED_MAX_BUFFER_BYTES). */
TU_CASE(loop_limit) {
  static const char *const TUNE[3] = {"loop_limit=6000", "loop_limit=6000", "loop_limit=6000,bag_by_feature=0"};
  static const char *const TUNING[3] = {"cpu", "gpu", "cpu"};
  static const char *const NAME[3] = {"cpu shapes, loop_limit 6000", "gpu shapes, loop_limit 6000",
                                      "cpu shapes, every feature a work-item, loop_limit 6000"};
  const char *given = getenv("CLEMBED_TUNE"); /* (a variant's settings kept, the limit added) */
  char *saved = given ? strdup(given) : NULL;
  for (int s = 0; s < 3; s++) {
    char tune[256];
    snprintf(tune, sizeof tune, "%s%s%s", saved ? saved : "", saved && *saved ? "," : "", TUNE[s]);
    setenv("CLEMBED_TUNE", tune, 1);
    clembed_context *c = tu_shaped_context(TUNING[s]);
    if (saved)
      setenv("CLEMBED_TUNE", saved, 1);
    else
      unsetenv("CLEMBED_TUNE");
    if (!c) continue;
    for (size_t cols = 5; cols <= 40; cols += 35) cap_cases(c, cols, tu_small ? 6 : 40, tu_small ? 3 : 8, 4000, NAME[s]);
    clembed_context_destroy(c);
  }
  free(saved);
  clembed_context *c = NULL;
  uint64_t limit = 0;
  OK(c, clembed_context_create(NULL, &c));
  OK(c, clembed_tuning_value(c, "loop_limit", &limit));
  if (limit) {
    char name[96];
    snprintf(name, sizeof name, "the device's own loop_limit %llu", (unsigned long long)limit);
    cap_cases(c, 128, 256, 256, (size_t)limit, name);
    cap_cases(c, 16, 256, 256, (size_t)limit, name);
  }
  clembed_context_destroy(c);
  if (limit) { /* tables in pieces: each id finds its piece */
    const char *old = getenv("CLEMBED_MAX_BUFFER_BYTES");
    char *keep = old ? strdup(old) : NULL;
    setenv("CLEMBED_MAX_BUFFER_BYTES", "4096", 1);
    c = NULL;
    OK(c, clembed_context_create(NULL, &c));
    if (keep)
      setenv("CLEMBED_MAX_BUFFER_BYTES", keep, 1);
    else
      unsetenv("CLEMBED_MAX_BUFFER_BYTES");
    free(keep);
    cap_cases(c, 128, 256, 1, (size_t)limit, "tables in pieces of 4096 bytes, the device's own loop_limit");
    clembed_context_destroy(c);
  }
}

/* nf features over one table, feature f's ids the 6 from 6f on of di (views
 * vi[f]), the offsets doff. */
static void six_id_views(clembed_matrix *tab, const clembed_ids *di, const clembed_ids *doff, int nf,
                         clembed_bag_feature *F, clembed_ids *vi) {
  for (int f = 0; f < nf; f++) {
    vi[f] = *di;
    vi[f].offset = (size_t)f * 6;
    vi[f].count = 6;
    F[f] = clembed_bag_feature_defaults();
    F[f].table = tab;
    F[f].ids = &vi[f];
    F[f].offsets = doff;
  }
}

/* ... pooled into out by clembed_embedding_bags; the finish's status, its
 * detail in *d. */
static clembed_status six_id_features(clembed_context *c, clembed_matrix *tab, const clembed_ids *di,
                                      const clembed_ids *doff, int nf, clembed_bag_feature *F, clembed_ids *vi,
                                      clembed_matrix *out, clembed_error_detail *d) {
  six_id_views(tab, di, doff, nf, F, vi);
  OK(c, clembed_embedding_bags(c, F, (size_t)nf, out, 0, NULL, NULL));
  clembed_status s = clembed_finish(c);
  clembed_context_error(c, d);
  return s;
}

/* A call of several features whose error slots are taken when the context's
 * record is nearly full (many calls since the last finish): every feature's
 * bad id is still reported, none read aside before the call's kernels ran;
 * and a call of more features than the record holds (300), the forward and
 * the fused step: a bad id of an early feature and of one past the 256th are
 * reported as their own. */
TU_CASE(slots_nearly_full) {
  clembed_context *c = NULL;
  OK(c, clembed_context_create(NULL, &c));
  enum { NF = 26, V = 10, D = 4, NB = 3, MANY = 300 };
  float T[V * D];
  for (int k = 0; k < V * D; k++) T[k] = (float)k;
  int64_t ids[NF * 6], off[NB + 1] = {0, 2, 4, 6};
  for (int k = 0; k < NF * 6; k++) ids[k] = k % V;
  clembed_matrix tab = {0}, out1 = {0}, out = {0};
  OK(c, clembed_matrix_create(c, V, D, CLEMBED_F32, &tab));
  OK(c, clembed_matrix_write(c, &tab, T, CLEMBED_F32));
  OK(c, clembed_matrix_create(c, NB, D, CLEMBED_F32, &out1));
  OK(c, clembed_matrix_create(c, NB, NF * D, CLEMBED_F32, &out));
  for (int bad = 2; bad < NF; bad += 11) {
    int64_t with_bad[NF * 6];
    memcpy(with_bad, ids, sizeof ids);
    with_bad[bad * 6 + 3] = 1000 + bad; /* feature `bad`, bag 1 */
    clembed_ids di = make_ids(c, with_bad, NF * 6, CLEMBED_I64, 0), doff = make_ids(c, off, NB + 1, CLEMBED_I64, 0);
    clembed_ids one = di;
    one.count = 6;
    for (int k = 0; k < 250; k++) /* 250 slots taken (feature 0's ids: no bad one) */
      OK(c, clembed_embedding_bag(c, &tab, &one, &doff, NULL, &out1, 0, NULL, NULL));
    clembed_bag_feature F[NF];
    clembed_ids vi[NF];
    clembed_error_detail d;
    clembed_status s = six_id_features(c, &tab, &di, &doff, NF, F, vi, &out, &d);
    char feat[32];
    snprintf(feat, sizeof feat, "features[%d].", bad);
    EXPECT(s == CLEMBED_ERR_INDEX_OUT_OF_RANGE && !strcmp(d.argument, "ids") && d.index == 3 &&
               d.value == 1000 + bad && strstr(clembed_context_message(c), feat),
           "feature %d's bad id after 250 calls: %s, detail %s[%lld] = %lld (%s)", bad, clembed_status_string(s),
           d.argument, (long long)d.index, (long long)d.value, clembed_context_message(c));
    release_ids(&di);
    release_ids(&doff);
  }
  int64_t *many = malloc(MANY * 6 * sizeof *many);
  for (int k = 0; k < MANY * 6; k++) many[k] = k % V;
  for (int pass = 0; pass < 2; pass++) { /* a bad id in feature 280; then in features 3 and 280 */
    many[280 * 6 + 4] = 2000;
    if (pass) many[3 * 6 + 1] = 3000;
    clembed_ids di = make_ids(c, many, MANY * 6, CLEMBED_I32, 0), doff = make_ids(c, off, NB + 1, CLEMBED_I32, 0);
    clembed_bag_feature *F = calloc(MANY, sizeof *F);
    clembed_ids *vi = calloc(MANY, sizeof *vi);
    clembed_matrix wide = {0};
    OK(c, clembed_matrix_create(c, NB, MANY * D, CLEMBED_F32, &wide));
    clembed_error_detail d;
    clembed_status s = six_id_features(c, &tab, &di, &doff, MANY, F, vi, &wide, &d);
    int bad = pass ? 3 : 280, at = pass ? 1 : 4;
    char feat[32];
    snprintf(feat, sizeof feat, "features[%d].", bad);
    EXPECT(s == CLEMBED_ERR_INDEX_OUT_OF_RANGE && !strcmp(d.argument, "ids") && d.index == at &&
               d.value == (pass ? 3000 : 2000) && strstr(clembed_context_message(c), feat),
           "%d features, a bad id in feature %d: %s, detail %s[%lld] = %lld (%s)", MANY, bad, clembed_status_string(s),
           d.argument, (long long)d.index, (long long)d.value, clembed_context_message(c));
    /* the bags of the features without a bad id, exact: feature f's bag b is rows (6f + 2b) % V, (6f + 2b + 1) % V */
    float *got = malloc(NB * MANY * D * sizeof *got);
    OK(c, clembed_matrix_read(c, &wide, got, CLEMBED_F32));
    size_t wrong = 0;
    for (int f = 0; f < MANY; f++)
      for (int b = 0; b < NB; b++)
        for (int col = 0; col < D; col++) {
          int64_t r0 = many[f * 6 + 2 * b], r1 = many[f * 6 + 2 * b + 1];
          float want = (r0 < V ? T[r0 * D + col] : 0.0f) + (r1 < V ? T[r1 * D + col] : 0.0f);
          wrong += got[(size_t)b * MANY * D + (size_t)f * D + (size_t)col] != want;
        }
    EXPECT(wrong == 0, "%d features: %zu pooled values wrong", MANY, wrong);
    free(got);
    free(F);
    free(vi);
    release_matrix(&wide);
    release_ids(&di);
    release_ids(&doff);
  }
  { /* the fused step of the 300 features (bad ids in features 3 and 280): feature 3's reported */
    clembed_ids di = make_ids(c, many, MANY * 6, CLEMBED_I64, 0), doff = make_ids(c, off, NB + 1, CLEMBED_I64, 0);
    clembed_bag_feature *F = calloc(MANY, sizeof *F);
    clembed_ids *vi = calloc(MANY, sizeof *vi);
    clembed_optimizer *os = calloc(MANY, sizeof *os);
    clembed_matrix g = {0};
    OK(c, clembed_matrix_create(c, NB, MANY * D, CLEMBED_F32, &g));
    OK(c, clembed_matrix_init_uniform(c, &g, -1.0f, 1.0f, 5, 0, NULL, NULL));
    for (int f = 0; f < MANY; f++) os[f] = clembed_optimizer_defaults(CLEMBED_SGD);
    clembed_error_detail d;
    six_id_views(&tab, &di, &doff, MANY, F, vi);
    OK(c, clembed_bags_optimizer_step(c, F, MANY, &g, os, 0, NULL, NULL));
    clembed_status s = clembed_finish(c);
    clembed_context_error(c, &d);
    EXPECT(s == CLEMBED_ERR_INDEX_OUT_OF_RANGE && !strcmp(d.argument, "ids") && d.index == 1 && d.value == 3000 &&
               strstr(clembed_context_message(c), "features[3]."),
           "the step of %d features, bad ids in features 3 and 280: %s, detail %s[%lld] = %lld (%s)", MANY,
           clembed_status_string(s), d.argument, (long long)d.index, (long long)d.value, clembed_context_message(c));
    free(F);
    free(vi);
    free(os);
    release_matrix(&g);
    release_ids(&di);
    release_ids(&doff);
  }
  free(many);
  release_matrix(&tab);
  release_matrix(&out1);
  release_matrix(&out);
  clembed_context_destroy(c);
}

/* Offsets that break the rules: the first bad entry is reported (argument
 * "offsets", its position and value) and the bags hold their offsets clamped
 * into [0, n], each on its own; nothing is read outside a buffer. */
typedef struct hostile {
  const char *name;
  int64_t off[5];
  int64_t index; /* the first bad entry */
} hostile;
#define HN 12 /* the ids of every hostile case */
static const hostile HOSTILE[] = {
    {"decreasing", {0, 5, 3, 8, HN}, 2},
    {"past the end", {0, 3, HN + 50, 8, HN}, 2},
    {"negative", {0, -4, 2, 8, HN}, 1},
    {"huge", {0, 2, 4, INT64_MAX, HN}, 3},
    {"huge 32-bit", {0, 2, INT32_MAX, 8, HN}, 2},
    {"first not 0", {3, 4, 6, 8, HN}, 0},
    {"last not the number of ids", {0, 2, 4, 8, HN - 1}, 4},
    {"most negative", {INT64_MIN, 2, 4, 8, HN}, 0},
    {"last past the end", {0, 2, 4, 8, HN + 1}, 4},
};

TU_CASE(hostile_offsets) {
  if (!shapes()) return;
  int64_t ids[HN] = {1, 2, 3, 1, 0, 4, 4, 2, 3, 0, 1, 2};
  for (int s = 0; s < 2; s++)
    for (size_t h = 0; h < sizeof HOSTILE / sizeof HOSTILE[0]; h++)
      for (int t = 0; t < 2; t++) {
        const hostile *x = &HOSTILE[h];
        clembed_index_type ot = t ? CLEMBED_I64 : CLEMBED_I32;
        if (ot == CLEMBED_I32) {
          int skip = 0; /* values an I32 cannot hold */
          for (int k = 0; k < 5; k++) skip |= x->off[k] != (int32_t)x->off[k];
          if (skip) continue;
        }
        for (int m = 0; m < 4; m++) {
          char what[128];
          snprintf(what, sizeof what, "%s, offsets %s (%s), %s", SHAPE[s], x->name, t ? "I64" : "I32", MODEN[m]);
          fcase fc = given_case(5, 6, MODES4[m], ids, HN, x->off, 4);
          fc.ot = ot;
          fc.weighted = m == 1;
          fc.with_mr = m == 3;
          fc.finish = CLEMBED_ERR_INDEX_OUT_OF_RANGE;
          fc.err_arg = "offsets";
          fc.err_index = x->index;
          fc.err_value = x->off[x->index];
          bagp p = {NULL, 5, 6, ids, HN, x->off, 4, clembed_bag_defaults(), NULL};
          int64_t v = 0;
          EXPECT(ref_bad_offset(&p, &v) == x->index && v == x->off[x->index], "%s: the case's first bad entry", what);
          run_forward(shape_ctx[s], &fc, what);
        }
      }
}

/* ------------------------------------------------------------ batched */

typedef struct fspec {
  clembed_dtype dt;
  size_t cols;
  int m;      /* MODES4 index */
  int shared; /* uses the table of features[shared], -1: its own */
  int fixed;
} fspec;

/* The features of a batch (tables, bags, weights) on ctx, in separate buffers
 * or (packed) with every ids and every offsets in one buffer each. */
typedef struct batch {
  size_t nf, bags, cols;
  clembed_matrix tab[12], wm[12];
  float *T[12];
  int64_t *ids[12], *off[12];
  size_t n[12];
  clembed_ids di[12], doff[12], mr[12], packed_ids, packed_off;
  clembed_bag_feature f[12];
} batch;

static void batch_make(clembed_context *ctx, batch *B, const fspec *sp, size_t nf, size_t bags, int packed,
                       uint64_t seed) {
  uint64_t st = seed;
  memset(B, 0, sizeof *B);
  B->nf = nf;
  B->bags = bags;
  size_t total_ids = 0, total_off = 0;
  for (size_t f = 0; f < nf; f++) {
    fcase fc;
    memset(&fc, 0, sizeof fc);
    fc.rows = 29 + f;
    if (sp[f].shared >= 0) fc.rows = B->tab[sp[f].shared].rows;
    fc.bags = bags;
    fc.maxlen = tu_small ? 4 : 9;
    fc.fixed = sp[f].fixed;
    fc.padding_idx = f % 3 == 0 ? 2 : CLEMBED_NO_PADDING;
    B->n[f] = make_bags(&st, &fc, &B->ids[f], &B->off[f]);
    for (size_t j = 0; j < B->n[f]; j++) /* valid ids (clamped) */
      if (B->ids[f][j] < 0 || B->ids[f][j] >= (int64_t)fc.rows) B->ids[f][j] = (int64_t)(j % fc.rows);
    if (sp[f].shared >= 0) {
      B->tab[f] = B->tab[sp[f].shared];
      B->T[f] = NULL;
    } else {
      B->tab[f] = make_table(ctx, &st, sp[f].dt, fc.rows, sp[f].cols * qk_of(sp[f].dt), f % 2 ? qk_of(sp[f].dt) : 0,
                             0, &B->T[f]);
    }
    clembed_bag_options o = clembed_bag_defaults();
    o.mode = MODES4[sp[f].m];
    o.padding_idx = fc.padding_idx;
    o.policy = f % 2 ? CLEMBED_INDEX_CHECK : CLEMBED_INDEX_WRAP;
    if (sp[f].m == 1) {
      float *w = malloc((B->n[f] + 1) * sizeof(float));
      for (size_t j = 0; j < B->n[f]; j++) w[j] = tu_rand(&st);
      B->wm[f] = tu_gapped_matrix(ctx_of(ctx), B->n[f], 1, CLEMBED_F32, 0, f, w);
      free(w);
      o.per_sample_weights = &B->wm[f];
    }
    B->f[f] = clembed_bag_feature_defaults();
    B->f[f].table = &B->tab[f];
    B->f[f].options = o;
    B->cols += B->tab[f].cols;
    total_ids += B->n[f] + 1;
    total_off += B->off[f] ? bags + 2 : 0;
  }
  if (packed) { /* one buffer of ids, one of offsets: views into them */
    int64_t *all = calloc(total_ids + 1, 8), *offs = calloc(total_off + 1, 8);
    size_t a = 0, b = 0;
    for (size_t f = 0; f < nf; f++) {
      memcpy(all + a + 1, B->ids[f], B->n[f] * 8);
      a += B->n[f] + 1;
      if (B->off[f]) {
        memcpy(offs + b + 1, B->off[f], (bags + 1) * 8);
        b += bags + 2;
      }
    }
    B->packed_ids = make_ids(ctx, all, total_ids, CLEMBED_I64, 0);
    B->packed_off = make_ids(ctx, offs, total_off ? total_off : 1, CLEMBED_I32, 0);
    a = b = 0;
    for (size_t f = 0; f < nf; f++) {
      B->di[f] = B->packed_ids;
      B->di[f].offset = a + 1;
      B->di[f].count = B->n[f];
      a += B->n[f] + 1;
      if (B->off[f]) {
        B->doff[f] = B->packed_off;
        B->doff[f].offset = b + 1;
        B->doff[f].count = bags + 1;
        b += bags + 2;
      }
    }
    free(all);
    free(offs);
  } else {
    for (size_t f = 0; f < nf; f++) {
      B->di[f] = make_ids(ctx, B->ids[f], B->n[f], f % 2 ? CLEMBED_I32 : CLEMBED_I64, f % 3);
      if (B->off[f]) B->doff[f] = make_ids(ctx, B->off[f], bags + 1, f % 2 ? CLEMBED_I64 : CLEMBED_I32, 1);
    }
  }
  for (size_t f = 0; f < nf; f++) {
    B->f[f].ids = &B->di[f];
    B->f[f].offsets = B->off[f] ? &B->doff[f] : NULL;
  }
}

static void batch_free(batch *B, int packed) {
  for (size_t f = 0; f < B->nf; f++) {
    if (B->T[f]) release_matrix(&B->tab[f]);
    release_matrix(&B->wm[f]);
    free(B->T[f]);
    free(B->ids[f]);
    free(B->off[f]);
    if (!packed) {
      release_ids(&B->di[f]);
      release_ids(&B->doff[f]);
    }
    release_ids(&B->mr[f]);
  }
  release_ids(&B->packed_ids);
  release_ids(&B->packed_off);
}

/* The features of a batch: every dtype, widths with and without a tail, every
 * mode, a table used by two features (one MAX), fixed bags. */
static const fspec SPECS[] = {
    {CLEMBED_F32, 64, 0, -1, 0},  {CLEMBED_F16, 17, 2, -1, 0},  {CLEMBED_Q8_0, 2, 3, -1, 0},
    {CLEMBED_BF16, 3, 1, -1, 1},  {CLEMBED_Q4_K, 1, 0, -1, 0},  {CLEMBED_Q6_K, 1, 2, -1, 0},
    {CLEMBED_F32, 64, 3, 0, 0},   {CLEMBED_Q4_0, 1, 1, -1, 0},  {CLEMBED_F32, 0, 0, -1, 0},
    {CLEMBED_F16, 16, 0, 1, 1},
};
#define NSPECS (sizeof SPECS / sizeof SPECS[0])

/* Batched equals per-feature, bit for bit, with separate buffers (more than
 * one launch takes) and packed ids and offsets (one launch); out F32 and F16.
 * Each shape both ways with every feature with `full`; by default the GPU
 * shape packed with every feature and the CPU shape with separate buffers and
 * the float features (F32, F16, BF16: its block-type programs, a CPU shape's
 * dearest to build, are forward_quant's). */
TU_CASE(batched) {
  if (!shapes()) return;
  size_t bags = tu_small ? 5 : 19;
  fspec floats[NSPECS]; /* SPECS' float features, in order (the shared tables are features 0 and 1 in both) */
  size_t nfloats = 0;
  for (size_t f = 0; f < NSPECS; f++)
    if (qk_of(SPECS[f].dt) == 1) floats[nfloats++] = SPECS[f];
  for (int s = 0; s < 2; s++)
    for (int packed = 0; packed < 2; packed++) {
      if (!tu_full && packed != s) continue;
      clembed_context *c = shape_ctx[s];
      const fspec *sp = tu_full || s ? SPECS : floats;
      size_t ns = tu_full || s ? NSPECS : nfloats;
      batch B;
      batch_make(c, &B, sp, ns, bags, packed, 0xBA6 + (uint64_t)packed);
      clembed_dtype odt = packed ? CLEMBED_F16 : CLEMBED_F32;
      clembed_matrix out = tu_gapped_matrix(ctx_of(c), bags, B.cols, odt, 2, 1, NULL);
      clembed_ids mr1[NSPECS];
      int64_t *zeros = calloc(bags * 1024 + 1, 8);
      for (size_t f = 0; f < ns; f++) {
        memset(&mr1[f], 0, sizeof mr1[f]);
        if (B.f[f].options.mode != CLEMBED_BAG_MAX) continue;
        B.mr[f] = make_ids(c, zeros, bags * B.tab[f].cols, CLEMBED_I64, 0);
        mr1[f] = make_ids(c, zeros, bags * B.tab[f].cols, CLEMBED_I32, 0);
        B.f[f].options.max_rows = &B.mr[f];
      }
      OK(c, clembed_embedding_bags(c, B.f, ns, &out, 0, NULL, NULL));
      OK(c, clembed_finish(c));
      tu_check_gaps(clembed_context_queue(c), &out, "batched out");
      void *all = tu_alloc_elems(bags * B.cols, odt);
      OK(c, clembed_matrix_read(c, &out, all, odt));
      size_t col0 = 0;
      for (size_t f = 0; f < ns; f++) {
        size_t cols = B.tab[f].cols;
        clembed_matrix one;
        OK(c, clembed_matrix_create(c, bags, cols, odt, &one));
        clembed_bag_options o = B.f[f].options;
        if (o.max_rows) o.max_rows = &mr1[f];
        OK(c, clembed_embedding_bag(c, B.f[f].table, B.f[f].ids, B.f[f].offsets, &o, &one, 0, NULL, NULL));
        OK(c, clembed_finish(c));
        void *single = tu_alloc_elems(bags * cols, odt);
        if (bags && cols) OK(c, clembed_matrix_read(c, &one, single, odt));
        size_t bad = 0;
        for (size_t b = 0; b < bags; b++)
          for (size_t k = 0; k < cols; k++)
            bad += host_bits(all, b * B.cols + col0 + k, odt) != host_bits(single, b * cols + k, odt);
        EXPECT(bad == 0, "%s, %s: features[%zu] (%s, %zu cols, %s): %zu values differ from its own call", SHAPE[s],
               packed ? "packed" : "separate buffers", f, DTN[B.tab[f].dtype], cols, MODEN[sp[f].m], bad);
        if (o.max_rows) {
          int64_t *a = read_ids64(c, &B.mr[f]), *b1 = read_ids64(c, &mr1[f]);
          size_t diff = 0;
          for (size_t k = 0; k < bags * cols; k++) diff += a[k] != b1[k];
          EXPECT(diff == 0, "%s: features[%zu]: max_rows: %zu differ from its own call", SHAPE[s], f, diff);
          free(a);
          free(b1);
        }
        col0 += cols;
        free(single);
        clembed_matrix_release(&one);
        release_ids(&mr1[f]);
      }
      /* a bad id in features[3] (policy CHECK): reported naming it */
      if (!packed) {
        int64_t bad_id = 9999;
        size_t at = B.n[3] / 2;
        clembed_ids saved = B.di[3];
        int64_t *h = malloc((B.n[3] + 1) * 8);
        memcpy(h, B.ids[3], B.n[3] * 8);
        h[at] = bad_id;
        B.di[3] = make_ids(c, h, B.n[3], CLEMBED_I32, 0);
        OK(c, clembed_embedding_bags(c, B.f, ns, &out, 0, NULL, NULL));
        expect_finish(c, B.n[3] ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK, "ids", (int64_t)at, bad_id,
                      "batched, a bad id");
        EXPECT(!B.n[3] || strstr(clembed_context_message(c), "features[3].ids"), "message: %s",
               clembed_context_message(c));
        release_ids(&B.di[3]);
        B.di[3] = saved;
        free(h);
      }
      free(all);
      free(zeros);
      release_matrix(&out);
      batch_free(&B, packed);
    }
}

/* ------------------------------------------------------------ backward */

/* Random values of varied magnitude, rounded to dtype dt. */
static float *rand_values(uint64_t *st, size_t n, clembed_dtype dt) {
  float *g = malloc((n + 1) * sizeof(float));
  for (size_t k = 0; k < n; k++) g[k] = ref_round(ldexpf(tu_rand(st), (int)((tu_rand(st) + 1.0f) * 5.0f) - 5), dt);
  return g;
}

/* A problem of the backward and the steps on ctx: the bags (fc), grad_out
 * (gdt), weights, and under MAX the forward's max_rows (run on ctx). */
typedef struct bwd {
  bagp p;
  int64_t *ids, *off, *mr;
  float *T, *w, *g;
  clembed_matrix tab, wm, gm;
  clembed_ids di, doff, dmr;
  clembed_bag_options o;
  int64_t bad, badv; /* the first bad id (-1: none) */
} bwd;

static void bwd_make(clembed_context *ctx, bwd *B, const fcase *fc, clembed_dtype gdt, uint64_t seed) {
  uint64_t st = seed;
  memset(B, 0, sizeof *B);
  size_t n = make_bags(&st, fc, &B->ids, &B->off), cols = fc->cols, bags = fc->bags;
  B->tab = make_table(ctx, &st, fc->tdt, fc->rows, cols, fc->t_lead, fc->t_pad, &B->T);
  B->o = clembed_bag_defaults();
  B->o.mode = fc->mode;
  B->o.policy = fc->policy;
  B->o.padding_idx = fc->padding_idx;
  if (fc->weighted) {
    B->w = malloc((n + 1) * sizeof(float));
    for (size_t j = 0; j < n; j++) B->w[j] = tu_rand(&st) * 2.0f;
    B->wm = tu_gapped_matrix(ctx_of(ctx), n, 1, CLEMBED_F32, 2, 1, B->w);
    B->o.per_sample_weights = &B->wm;
  }
  B->di = make_ids(ctx, B->ids, n, fc->it, fc->id_off);
  if (B->off) B->doff = make_ids(ctx, B->off, bags + 1, fc->ot, 2);
  B->g = rand_values(&st, bags * cols, gdt);
  B->gm = tu_gapped_matrix(ctx_of(ctx), bags, cols, gdt, fc->o_extra, fc->o_off, B->g);
  bagp p = {B->T, fc->rows, cols, B->ids, n, B->off, bags, B->o, B->w};
  B->p = p;
  B->bad = fc->policy == CLEMBED_INDEX_CHECK || fc->policy == CLEMBED_INDEX_WRAP ? ref_first_bad(&p, &B->badv) : -1;
  if (fc->mode == CLEMBED_BAG_MAX) { /* max_rows as the forward writes it */
    int64_t *zeros = calloc(bags * cols + 1, 8);
    B->dmr = make_ids(ctx, zeros, bags * cols, fc->mrt, 1);
    free(zeros);
    B->o.max_rows = &B->dmr;
    clembed_matrix out;
    OK(ctx, clembed_matrix_create(ctx, bags, cols, CLEMBED_F32, &out));
    OK(ctx, clembed_embedding_bag(ctx, &B->tab, &B->di, B->off ? &B->doff : NULL, &B->o, &out, 0, NULL, NULL));
    clembed_finish(ctx); /* (a bad id is checked by the caller's call) */
    clembed_matrix_release(&out);
    B->mr = read_ids64(ctx, &B->dmr);
  }
}

static void bwd_free(bwd *B) {
  free(B->ids);
  free(B->off);
  free(B->mr);
  free(B->T);
  free(B->w);
  free(B->g);
  release_matrix(&B->tab);
  release_matrix(&B->wm);
  release_matrix(&B->gm);
  release_ids(&B->di);
  release_ids(&B->doff);
  release_ids(&B->dmr);
}

static size_t count_bits_diff(const float *a, const float *b, size_t n, size_t *first) {
  size_t bad = 0;
  *first = 0;
  for (size_t k = 0; k < n; k++)
    if (memcmp(&a[k], &b[k], 4) != 0 && !(isnan(a[k]) && isnan(b[k])) && !bad++) *first = k;
  return bad;
}
#define EXPECT_BITS(a, b, n, ...)                                                                 \
  do {                                                                                            \
    size_t f_, bad_ = count_bits_diff((a), (b), (n), &f_);                                        \
    EXPECT(bad_ == 0, "%zu of %zu differ, first at %zu: %.9g vs %.9g (%s)", bad_, (size_t)(n), f_, \
           bad_ ? (double)(a)[f_] : 0.0, bad_ ? (double)(b)[f_] : 0.0, __VA_ARGS__);               \
  } while (0)

static void run_backward(clembed_context *ctx, const fcase *fc, clembed_dtype gdt, int with_gw, const char *what) {
  uint64_t st = 0xB0 + fc->cols * 13 + (uint64_t)fc->mode * 5 + gdt;
  bwd B;
  bwd_make(ctx, &B, fc, gdt, st);
  size_t rows = fc->rows, cols = fc->cols, n = B.p.n;
  float *gt0 = rand_values(&st, rows * cols, CLEMBED_F32);
  clembed_matrix gt = tu_gapped_matrix(ctx_of(ctx), rows, cols, CLEMBED_F32, 1, 2, gt0), gw = {0};
  if (with_gw) gw = tu_gapped_matrix(ctx_of(ctx), n, 1, CLEMBED_F32, 1, 1, NULL);
  OK(ctx, clembed_bag_backward(ctx, &B.gm, &B.di, B.off ? &B.doff : NULL, &B.o, with_gw ? &B.tab : NULL, &gt,
                               with_gw ? &gw : NULL, 0, NULL, NULL));
  expect_finish(ctx, B.bad >= 0 ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK, "ids", B.bad, B.badv, what);
  float *G = malloc((rows * cols + 1) * sizeof(float)), *want = malloc((rows * cols + 1) * sizeof(float));
  unsigned char *touched = malloc(rows + 1);
  bag_ref_backward(&B.p, B.g, cols, B.mr, G, touched);
  for (size_t v = 0; v < rows; v++)
    for (size_t c = 0; c < cols; c++)
      want[v * cols + c] = touched[v] ? gt0[v * cols + c] + G[v * cols + c] : gt0[v * cols + c];
  float *got = tu_read_f32(ctx, &gt);
  EXPECT_BITS(got, want, rows * cols, what);
  tu_check_gaps(clembed_context_queue(ctx), &gt, what);
  if (with_gw) {
    float *gwant = malloc((n + 1) * sizeof(float)), *ggot = tu_read_f32(ctx, &gw);
    for (size_t j = 0; j < n; j++) {
      int64_t r = ref_row(&B.p, j);
      float acc = 0.0f;
      if (r >= 0 && B.p.bags) {
        size_t b = ref_bag_of(&B.p, j);
        for (size_t c = 0; c < cols; c++) {
          float pr = B.g[b * cols + c] * B.T[(size_t)r * cols + c];
          acc = acc + pr;
        }
      }
      gwant[j] = acc;
    }
    EXPECT_BITS(ggot, gwant, n, what);
    tu_check_gaps(clembed_context_queue(ctx), &gw, what);
    free(gwant);
    free(ggot);
  }
  free(got);
  free(G);
  free(want);
  free(touched);
  free(gt0);
  release_matrix(&gt);
  release_matrix(&gw);
  bwd_free(&B);
}

/* Every mode, F32 and F16 gradients, F32 and quantized tables (grad_weights
 * reads them), every policy, one id 10,000 times in one bag. Every width x
 * mode with `full`; by default each mode once a shape, with the width
 * (m + s) % 3 (every width, a quantized table and an F16 gradient in each
 * shape). */
TU_CASE(backward) {
  if (!shapes()) return;
  int k = 0;
  static const size_t widths[3] = {3, 32, 70};
  unsigned seen[2] = {0, 0}; /* 1..4: widths, 8: a quantized table, 16: an F16 gradient, 32 << m: modes */
  for (int s = 0; s < 2; s++)
    for (int w = 0; w < 3; w++)
      for (int m = 0; m < 4; m++, k++) {
        if (!tu_full && w != (m + s) % 3) continue;
        fcase fc = forward_case(w == 1 && m < 2 ? CLEMBED_Q8_0 : CLEMBED_F32, widths[w], m, k);
        clembed_dtype gdt = k % 3 == 1 ? CLEMBED_F16 : CLEMBED_F32;
        char what[160];
        snprintf(what, sizeof what, "%s, %s table, %zu cols, %s, grad %s, policy %d, %s", SHAPE[s], DTN[fc.tdt],
                 fc.cols, MODEN[m], DTN[gdt], (int)fc.policy, fc.fixed ? "fixed bags" : "offsets");
        run_backward(shape_ctx[s], &fc, gdt, MODES4[m] == CLEMBED_BAG_SUM, what);
        seen[s] |= 1u << w | (fc.tdt != CLEMBED_F32 ? 8u : 0u) | (gdt == CLEMBED_F16 ? 16u : 0u) | 32u << m;
      }
  for (int s = 0; s < 2; s++)
    EXPECT(seen[s] == 0x1FFu, "%s: the backward's cases met %#x of 0x1ff (widths, a quantized table, an F16 "
           "gradient, modes)", SHAPE[s], seen[s]);
  /* one id 10,000 times in a bag (a segment of 10,000 entries), beside short bags */
  size_t rep = 10000, n = rep + 6;
  int64_t *ids = malloc(n * sizeof(int64_t)), off[4] = {0, 3, 3 + (int64_t)rep, (int64_t)n};
  int64_t head[3] = {1, 3, 3};
  memcpy(ids, head, sizeof head);
  for (size_t j = 3; j < 3 + rep; j++) ids[j] = 3;
  ids[3 + rep] = 0;
  ids[4 + rep] = 3;
  ids[5 + rep] = 2;
  for (int s = 0; s < 2; s++)
    for (int m = 0; m < 4; m++) {
      char what[96];
      snprintf(what, sizeof what, "%s, %s, an id 10,000 times", SHAPE[s], MODEN[m]);
      /* 16 columns: the fold goes over a row's segment once per vector of columns and once per column
       * past them, and Mesa's llvmpipe ends a work-item's loops after 65,535 iterations in all */
      fcase fc = given_case(5, 16, MODES4[m], ids, n, off, 3);
      fc.weighted = m == 1;
      run_backward(shape_ctx[s], &fc, CLEMBED_F32, m < 2, what);
    }
  free(ids);
}

/* ------------------------------------------------------------ steps */

static const char *KN[4] = {"SGD", "ADAGRAD", "ROWWISE_ADAGRAD", "ADAM"};

/* within tol[k] of want (exact where tol is 0) */
static void expect_close(const float *got, const float *want, const double *tol, size_t n, const char *what,
                         const char *part) {
  size_t bad = 0, first = 0;
  for (size_t k = 0; k < n; k++) {
    int same = memcmp(&got[k], &want[k], 4) == 0 || (isnan(got[k]) && isnan(want[k]));
    if (!same && !(tol && fabs((double)got[k] - (double)want[k]) <= tol[k]) && !bad++) first = k;
  }
  EXPECT(bad == 0, "%s: %s: %zu of %zu differ, first at %zu: %.9g vs %.9g", what, part, bad, n, first,
         bad ? (double)got[first] : 0.0, bad ? (double)want[first] : 0.0);
}

/* The states of an optimizer kind on ctx (s1: rows x cols, or rows x 1 for
 * ROWWISE; s2 for ADAM), random non-negative sums and moments. */
static void make_states(clembed_context *ctx, uint64_t *st, clembed_optimizer *o, size_t rows, size_t cols,
                        float **h1, float **h2, clembed_matrix *m1, clembed_matrix *m2) {
  size_t c1 = o->kind == CLEMBED_ROWWISE_ADAGRAD ? 1 : cols;
  *h1 = rand_values(st, rows * c1, CLEMBED_F32);
  *h2 = rand_values(st, rows * cols, CLEMBED_F32);
  for (size_t k = 0; k < rows * c1; k++)
    if (o->kind != CLEMBED_ADAM) (*h1)[k] = fabsf((*h1)[k]);
  for (size_t k = 0; k < rows * cols; k++) (*h2)[k] = fabsf((*h2)[k]);
  memset(m1, 0, sizeof *m1);
  memset(m2, 0, sizeof *m2);
  if (o->kind != CLEMBED_SGD) {
    *m1 = tu_gapped_matrix(ctx_of(ctx), rows, c1, CLEMBED_F32, 1, 1, *h1);
    o->state = m1;
  }
  if (o->kind == CLEMBED_ADAM) {
    *m2 = tu_gapped_matrix(ctx_of(ctx), rows, cols, CLEMBED_F32, 0, 3, *h2);
    o->state2 = m2;
  }
}

static void run_step(clembed_context *ctx, const fcase *fc, clembed_optimizer_kind kind, float wd, const char *what) {
  uint64_t st = 0x57 + fc->cols * 7 + (uint64_t)kind * 11 + (uint64_t)fc->mode;
  bwd B;
  bwd_make(ctx, &B, fc, CLEMBED_F32, st);
  size_t rows = fc->rows, cols = fc->cols;
  clembed_optimizer o = clembed_optimizer_defaults(kind);
  o.learning_rate = 0.05f;
  o.weight_decay = wd;
  o.step = 3;
  float *h1, *h2, *w = malloc((rows * cols + 1) * sizeof(float));
  clembed_matrix m1, m2;
  make_states(ctx, &st, &o, rows, cols, &h1, &h2, &m1, &m2);
  memcpy(w, B.T, rows * cols * sizeof(float));
  OK(ctx, clembed_bag_optimizer_step(ctx, &B.gm, &B.di, B.off ? &B.doff : NULL, &B.o, &o, &B.tab, 0, NULL, NULL));
  expect_finish(ctx, B.bad >= 0 ? CLEMBED_ERR_INDEX_OUT_OF_RANGE : CLEMBED_OK, "ids", B.bad, B.badv, what);
  float *G = malloc((rows * cols + 1) * sizeof(float));
  double *tol = malloc((rows * cols + 1) * sizeof(double));
  unsigned char *touched = malloc(rows + 1);
  bag_ref_backward(&B.p, B.g, cols, B.mr, G, touched);
  ref_optimizer_step(&o, G, touched, rows, cols, fc->tdt, w, h1, h2, tol);
  float *got = tu_read_f32(ctx, &B.tab);
  expect_close(got, w, tol, rows * cols, what, "table");
  free(got);
  if (kind != CLEMBED_SGD) {
    got = tu_read_f32(ctx, &m1); /* ADAGRAD's and ADAM's states are exact; ROWWISE's divides by cols */
    double *stol = calloc(m1.rows * m1.cols + 1, sizeof(double));
    for (size_t e = 0; kind == CLEMBED_ROWWISE_ADAGRAD && e < m1.rows; e++) stol[e] = 4.0 * ref_ulp32(h1[e]);
    expect_close(got, h1, stol, m1.rows * m1.cols, what, "state");
    free(stol);
    free(got);
    tu_check_gaps(clembed_context_queue(ctx), &m1, what);
  }
  if (kind == CLEMBED_ADAM) {
    got = tu_read_f32(ctx, &m2);
    expect_close(got, h2, NULL, rows * cols, what, "state2");
    free(got);
  }
  free(G);
  free(tol);
  free(touched);
  free(w);
  free(h1);
  free(h2);
  release_matrix(&m1);
  release_matrix(&m2);
  bwd_free(&B);
}

/* Every optimizer kind, every mode, F32/F16/BF16 tables, weight decay. Every
 * kind x mode with `full`; by default each kind once a shape, with the mode
 * (kind + s) % 4 (every mode and table dtype in each shape, weight decay in
 * one). */
TU_CASE(steps) {
  if (!shapes()) return;
  static const clembed_dtype dts[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  int k = 0;
  unsigned seen[2] = {0, 0}, seen_wd = 0; /* 1 << dtype, 8 << mode */
  for (int s = 0; s < 2; s++)
    for (int kind = 0; kind < 4; kind++)
      for (int m = 0; m < 4; m++, k++) {
        if (!tu_full && m != (kind + s) % 4) continue;
        fcase fc = forward_case(dts[k % 3], k % 2 ? 19 : 40, m, k);
        float wd = k % 5 == 2 ? 0.01f : 0.0f;
        char what[160];
        snprintf(what, sizeof what, "%s, %s, %s table, %zu cols, %s, wd %g, policy %d", SHAPE[s], KN[kind],
                 DTN[fc.tdt], fc.cols, MODEN[m], (double)wd, (int)fc.policy);
        run_step(shape_ctx[s], &fc, (clembed_optimizer_kind)kind, wd, what);
        seen[s] |= 1u << fc.tdt | 8u << m;
        seen_wd |= wd != 0.0f;
      }
  for (int s = 0; s < 2; s++)
    EXPECT(seen[s] == 0x7Fu, "%s: the steps met table dtypes and modes %#x of 0x7f", SHAPE[s], seen[s]);
  EXPECT(seen_wd, "no step with weight decay");
}

/* clembed_bags_optimizer_step: features[0] and [2] share table A (their
 * contributions fold in feature order, then id order: one ROWWISE_ADAGRAD
 * state), features[1] has table B (ADAM) and gives what
 * clembed_bag_optimizer_step gives for it alone. */
TU_CASE(bags_steps) {
  if (!shapes()) return;
  for (int s = 0; s < 2; s++) {
    clembed_context *c = shape_ctx[s];
    uint64_t st = 0x5EED + (uint64_t)s;
    size_t bags = tu_small ? 4 : 11, rows = 23;
    fcase fa = forward_case(CLEMBED_F32, 24, 0, 2), fb = forward_case(CLEMBED_F16, 17, 2, 1),
          fm = forward_case(CLEMBED_F32, 24, 3, 2);
    fa.bags = fb.bags = fm.bags = bags;
    fa.rows = fm.rows = rows;
    fa.policy = fb.policy = fm.policy = CLEMBED_INDEX_CLAMP; /* no deferred error here */
    bwd A, Bb, M;
    bwd_make(c, &A, &fa, CLEMBED_F32, st);
    bwd_make(c, &Bb, &fb, CLEMBED_F32, st + 1);
    bwd_make(c, &M, &fm, CLEMBED_F32, st + 2);
    /* M uses A's table (its values and max_rows from A's table) */
    release_matrix(&M.tab);
    M.tab = A.tab;
    memcpy(M.T, A.T, rows * 24 * sizeof(float));
    M.p.T = M.T;
    {
      clembed_matrix out;
      OK(c, clembed_matrix_create(c, bags, 24, CLEMBED_F32, &out));
      OK(c, clembed_embedding_bag(c, &M.tab, &M.di, M.off ? &M.doff : NULL, &M.o, &out, 0, NULL, NULL));
      OK(c, clembed_finish(c));
      clembed_matrix_release(&out);
      free(M.mr);
      M.mr = read_ids64(c, &M.dmr);
    }
    /* grad_out: bags x (24 + 17 + 24), each feature's block from its own gradient */
    size_t cols = 24 + 17 + 24;
    float *g = malloc(bags * cols * sizeof(float));
    for (size_t b = 0; b < bags; b++) {
      memcpy(g + b * cols, A.g + b * 24, 24 * sizeof(float));
      memcpy(g + b * cols + 24, Bb.g + b * 17, 17 * sizeof(float));
      memcpy(g + b * cols + 41, M.g + b * 24, 24 * sizeof(float));
    }
    clembed_matrix gm = tu_gapped_matrix(ctx_of(c), bags, cols, CLEMBED_F32, 3, 2, g);
    clembed_optimizer oa = clembed_optimizer_defaults(CLEMBED_ROWWISE_ADAGRAD);
    clembed_optimizer ob = clembed_optimizer_defaults(CLEMBED_ADAM);
    oa.learning_rate = 0.1f;
    ob.step = 2;
    float *ha1, *ha2, *hb1, *hb2;
    clembed_matrix ma1, ma2, mb1, mb2;
    make_states(c, &st, &oa, rows, 24, &ha1, &ha2, &ma1, &ma2);
    make_states(c, &st, &ob, fb.rows, 17, &hb1, &hb2, &mb1, &mb2);
    /* B alone first, on a copy of its table and states */
    clembed_matrix bt2 = tu_gapped_matrix(ctx_of(c), fb.rows, 17, CLEMBED_F16, 0, 0, Bb.T);
    clembed_matrix mb1c = tu_gapped_matrix(ctx_of(c), fb.rows, 17, CLEMBED_F32, 0, 0, hb1);
    clembed_matrix mb2c = tu_gapped_matrix(ctx_of(c), fb.rows, 17, CLEMBED_F32, 0, 0, hb2);
    clembed_optimizer obc = ob;
    obc.state = &mb1c;
    obc.state2 = &mb2c;
    OK(c, clembed_bag_optimizer_step(c, &Bb.gm, &Bb.di, Bb.off ? &Bb.doff : NULL, &Bb.o, &obc, &bt2, 0, NULL, NULL));
    clembed_bag_feature f[3] = {{sizeof(clembed_bag_feature), &A.tab, &A.di, A.off ? &A.doff : NULL, A.o},
                                {sizeof(clembed_bag_feature), &Bb.tab, &Bb.di, Bb.off ? &Bb.doff : NULL, Bb.o},
                                {sizeof(clembed_bag_feature), &A.tab, &M.di, M.off ? &M.doff : NULL, M.o}};
    clembed_optimizer os[3] = {oa, ob, oa};
    cl_event ev = NULL;
    OK(c, clembed_bags_optimizer_step(c, f, 3, &gm, os, 0, NULL, &ev));
    EXPECT(ev != NULL, "bags_optimizer_step gave no event");
    if (ev) {
      EXPECT(clWaitForEvents(1, &ev) == CL_SUCCESS, "the event");
      clReleaseEvent(ev);
    }
    OK(c, clembed_finish(c));
    /* table A: the fold of features[0]'s contributions, then features[2]'s */
    float *G = malloc(rows * 24 * sizeof(float)), *G2 = malloc(rows * 24 * sizeof(float)), *w = malloc(rows * 24 * 4);
    double *tol = malloc(rows * 24 * sizeof(double));
    unsigned char *t1 = malloc(rows), *t2 = malloc(rows);
    bag_ref_backward(&A.p, g, cols, NULL, G, t1);
    bagp pm = M.p;
    bag_ref_backward(&pm, g + 41, cols, M.mr, G2, t2); /* (for the rows it touches) */
    for (size_t v = 0; v < rows; v++) t1[v] |= t2[v];
    /* each row's fold goes on with features[2]'s contributions, one by one in id order */
    for (size_t j = 0; j < pm.n && pm.bags; j++) {
      int64_t r = ref_row(&pm, j);
      if (r < 0) continue;
      size_t b = ref_bag_of(&pm, j);
      int first = 1;
      for (size_t k2 = 0; k2 < j; k2++)
        if (ref_bag_of(&pm, k2) == b && ref_row(&pm, k2) == r) first = 0;
      for (size_t cc = 0; cc < 24; cc++) {
        float x = M.mr[b * 24 + cc] == r && first ? g[b * cols + 41 + cc] : 0.0f;
        G[(size_t)r * 24 + cc] = G[(size_t)r * 24 + cc] + x;
      }
    }
    memcpy(w, A.T, rows * 24 * sizeof(float));
    ref_optimizer_step(&oa, G, t1, rows, 24, CLEMBED_F32, w, ha1, ha2, tol);
    float *got = tu_read_f32(c, &A.tab);
    expect_close(got, w, tol, rows * 24, SHAPE[s], "shared table A");
    free(got);
    /* table B equals the single step's bits, and so do its states */
    float *b1 = tu_read_f32(c, &Bb.tab), *b2 = tu_read_f32(c, &bt2);
    EXPECT_BITS(b1, b2, fb.rows * 17, s ? "gpu shapes, table B" : "cpu shapes, table B");
    free(b1);
    free(b2);
    b1 = tu_read_f32(c, &mb2);
    b2 = tu_read_f32(c, &mb2c);
    EXPECT_BITS(b1, b2, fb.rows * 17, s ? "gpu shapes, table B's state2" : "cpu shapes, table B's state2");
    free(b1);
    free(b2);
    /* a shared table with another optimizer is refused, and nothing is stepped */
    clembed_optimizer bad[3] = {oa, ob, oa};
    bad[2].learning_rate = 0.5f;
    FAILS(c, CLEMBED_ERR_INVALID_ARGUMENT, clembed_bags_optimizer_step(c, f, 3, &gm, bad, 0, NULL, NULL));
    free(G);
    free(G2);
    free(w);
    free(tol);
    free(t1);
    free(t2);
    free(g);
    free(ha1);
    free(ha2);
    free(hb1);
    free(hb2);
    release_matrix(&gm);
    release_matrix(&ma1);
    release_matrix(&ma2);
    release_matrix(&mb1);
    release_matrix(&mb2);
    release_matrix(&mb1c);
    release_matrix(&mb2c);
    release_matrix(&bt2);
    memset(&M.tab, 0, sizeof M.tab);
    bwd_free(&A);
    bwd_free(&Bb);
    bwd_free(&M);
  }
}

/* Two runs and both kernel shapes give the same bits: the backward of a bag
 * holding one id many times beside many short bags, and the row-wise Adagrad
 * step. */
TU_CASE(deterministic) {
  if (!shapes()) return;
  fcase fc = forward_case(CLEMBED_F32, 33, 2, 0);
  fc.bags = tu_small ? 8 : 64;
  fc.maxlen = tu_small ? 20 : 60;
  fc.rows = 7; /* many repeats */
  fc.policy = CLEMBED_INDEX_CLAMP;
  float *res[4];
  for (int r = 0; r < 4; r++) {
    clembed_context *c = shape_ctx[r / 2];
    bwd B;
    bwd_make(c, &B, &fc, CLEMBED_F32, 0xDE7);
    clembed_matrix gt;
    OK(c, clembed_matrix_create(c, fc.rows, fc.cols, CLEMBED_F32, &gt));
    OK(c, clembed_bag_backward(c, &B.gm, &B.di, B.off ? &B.doff : NULL, &B.o, NULL, &gt, NULL, 0, NULL, NULL));
    clembed_optimizer o = clembed_optimizer_defaults(CLEMBED_ROWWISE_ADAGRAD);
    clembed_matrix st;
    OK(c, clembed_matrix_create(c, fc.rows, 1, CLEMBED_F32, &st));
    o.state = &st;
    OK(c, clembed_bag_optimizer_step(c, &B.gm, &B.di, B.off ? &B.doff : NULL, &B.o, &o, &B.tab, 0, NULL, NULL));
    OK(c, clembed_finish(c));
    float *g = tu_read_f32(c, &gt), *t = tu_read_f32(c, &B.tab);
    res[r] = malloc(2 * fc.rows * fc.cols * sizeof(float));
    memcpy(res[r], g, fc.rows * fc.cols * sizeof(float));
    memcpy(res[r] + fc.rows * fc.cols, t, fc.rows * fc.cols * sizeof(float));
    free(g);
    free(t);
    clembed_matrix_release(&gt);
    clembed_matrix_release(&st);
    bwd_free(&B);
  }
  for (int r = 1; r < 4; r++)
    EXPECT_BITS(res[r], res[0], 2 * fc.rows * fc.cols, r == 1 ? "a second run" : "the other shape");
  for (int r = 0; r < 4; r++) free(res[r]);
}

/* ------------------------------------------------------------ renorm */

static void ref_renorm(float *T, size_t rows, size_t cols, const int64_t *ids, size_t n, float max_norm, float p,
                       clembed_dtype dt) {
  unsigned char *done = calloc(rows + 1, 1);
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= (int64_t)rows || done[ids[i]]) continue;
    done[ids[i]] = 1;
    float *x = T + (size_t)ids[i] * cols, s = 0.0f;
    for (size_t c = 0; c < cols; c++) {
      float a = fabsf(x[c]);
      if (p == 1.0f) {
        s = s + a;
      } else if (p == 2.0f) {
        float sq = a * a;
        s = s + sq;
      } else if (isinf(p)) {
        s = (a > s || isnan(a)) && !isnan(s) ? a : s;
      } else {
        float e = (float)pow((double)a, (double)p);
        s = s + e;
      }
    }
    float norm = p == 2.0f ? sqrtf(s) : (p == 1.0f || isinf(p)) ? s : (float)pow((double)s, (double)(1.0f / p));
    if (!(norm > max_norm)) continue;
    float den = norm + 1e-7f, scale = max_norm / den;
    for (size_t c = 0; c < cols; c++) x[c] = ref_round(x[c] * scale, dt);
  }
  free(done);
}

TU_CASE(renorm) {
  if (!shapes()) return;
  static const float ps[4] = {1.0f, 2.0f, INFINITY, 3.0f};
  static const clembed_dtype dts[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  int64_t ids[12] = {3, 1, 3, 7, 0, 1, 9, 3, 12, 4, 4, 1}; /* repeats; 12 is outside 10 rows (CHECK) */
  for (int s = 0; s < 2; s++)
    for (int k = 0; k < 4; k++)
      for (int d = 0; d < 3; d++) {
        clembed_context *c = shape_ctx[s];
        uint64_t st = 0x4E + (uint64_t)k * 3 + (uint64_t)d;
        size_t rows = 10, cols = k % 2 ? 7 : 33;
        float *T;
        clembed_matrix tab = make_table(c, &st, dts[d], rows, cols, 2, 1, &T);
        clembed_ids di = make_ids(c, ids, 12, k % 2 ? CLEMBED_I32 : CLEMBED_I64, 1);
        float max_norm = k == 2 ? 0.5f : 1.5f, *before = malloc(rows * cols * sizeof(float) + 4);
        memcpy(before, T, rows * cols * sizeof(float));
        OK(c, clembed_renorm(c, &tab, &di, max_norm, ps[k], 0, NULL, NULL));
        char what[96];
        snprintf(what, sizeof what, "%s, renorm p %g, %s table", SHAPE[s], (double)ps[k], DTN[dts[d]]);
        expect_finish(c, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "ids", 8, 12, what);
        ref_renorm(T, rows, cols, ids, 12, max_norm, ps[k], dts[d]);
        size_t scaled = 0; /* the case renorms some rows and leaves others */
        for (size_t v = 0; v < rows; v++) scaled += memcmp(T + v * cols, before + v * cols, cols * 4) != 0;
        EXPECT(scaled > 0 && scaled < rows, "%s: %zu of %zu rows renormed", what, scaled, rows);
        free(before);
        float *got = tu_read_f32(c, &tab);
        double *tol = calloc(rows * cols + 1, sizeof(double));
        for (size_t e = 0; k == 3 && e < rows * cols; e++) /* pow is the device's: 1e-6 relative, plus a table unit */
          tol[e] = 1e-6 * fabs((double)T[e]) + ref_ulp_dt(T[e], dts[d]);
        expect_close(got, T, k == 3 ? tol : NULL, rows * cols, what, "table");
        free(got);
        free(tol);
        free(T);
        release_matrix(&tab);
        release_ids(&di);
      }
}

/* Hostile offsets in the backward and the step: the error names offsets (the
 * first bad entry), nothing is written outside the matrices (their gaps), and
 * on Oclgrind nothing is read outside a buffer. A fold of no ids still
 * checks its offsets. */
TU_CASE(hostile_offsets_backward) {
  if (!shapes()) return;
  int64_t ids[HN] = {1, 2, 3, 1, 0, 4, 4, 2, 3, 0, 1, 2};
  for (int s = 0; s < 2; s++)
    for (size_t h = 0; h < sizeof HOSTILE / sizeof HOSTILE[0]; h++)
      for (int m = 0; m < 4; m++) {
        clembed_context *c = shape_ctx[s];
        const hostile *x = &HOSTILE[h];
        char what[128];
        snprintf(what, sizeof what, "%s, backward and step, offsets %s, %s", SHAPE[s], x->name, MODEN[m]);
        fcase fc = given_case(5, 6, MODES4[m], ids, HN, x->off, 4);
        fc.weighted = m == 1;
        bwd B;
        bwd_make(c, &B, &fc, CLEMBED_F32, 0x0FF + h);
        clembed_matrix gt = tu_gapped_matrix(ctx_of(c), 5, 6, CLEMBED_F32, 2, 3, NULL);
        OK(c, clembed_bag_backward(c, &B.gm, &B.di, &B.doff, &B.o, &B.tab, &gt, NULL, 0, NULL, NULL));
        expect_finish(c, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "offsets", x->index, x->off[x->index], what);
        tu_check_gaps(clembed_context_queue(c), &gt, what);
        clembed_optimizer o = clembed_optimizer_defaults(CLEMBED_ADAGRAD);
        clembed_matrix st = tu_gapped_matrix(ctx_of(c), 5, 6, CLEMBED_F32, 1, 1, NULL);
        o.state = &st;
        OK(c, clembed_bag_optimizer_step(c, &B.gm, &B.di, &B.doff, &B.o, &o, &B.tab, 0, NULL, NULL));
        expect_finish(c, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "offsets", x->index, x->off[x->index], what);
        tu_check_gaps(clembed_context_queue(c), &st, what);
        release_matrix(&gt);
        release_matrix(&st);
        bwd_free(&B);
      }
  /* no ids: offsets {0, 3} of one bag is still checked (the last must be 0) */
  int64_t off[2] = {0, 3}, none[1] = {0};
  for (int s = 0; s < 2; s++) {
    clembed_context *c = shape_ctx[s];
    fcase fc = given_case(5, 6, CLEMBED_BAG_SUM, none, 0, off, 1);
    bwd B;
    bwd_make(c, &B, &fc, CLEMBED_F32, 7);
    clembed_matrix gt;
    OK(c, clembed_matrix_create(c, 5, 6, CLEMBED_F32, &gt));
    OK(c, clembed_bag_backward(c, &B.gm, &B.di, &B.doff, &B.o, NULL, &gt, NULL, 0, NULL, NULL));
    expect_finish(c, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "offsets", 1, 3, "a backward of no ids");
    clembed_matrix_release(&gt);
    bwd_free(&B);
  }
}

/* Every refusal names its argument, enqueues nothing and leaves the output alone. */
#define REFUSES(c, code, arg, call)                                                                       \
  do {                                                                                                    \
    clembed_status s_ = (call);                                                                           \
    clembed_error_detail d_;                                                                              \
    clembed_context_error(c, &d_);                                                                        \
    EXPECT(s_ == (code) && !strcmp(d_.argument, arg), "%s -> %s naming '%s', expected %s naming '%s' (%s)", \
           #call, clembed_status_string(s_), d_.argument, clembed_status_string(code), arg,               \
           clembed_context_message(c));                                                                   \
  } while (0)

TU_CASE(errors) {
  clembed_context *c = ctx;
  uint64_t st = 0xE;
  const clembed_status INV = CLEMBED_ERR_INVALID_ARGUMENT;
  float *T;
  clembed_matrix tab = make_table(c, &st, CLEMBED_F32, 10, 4, 0, 0, &T), out, out5, gt, q8, w, wbad, g, gw;
  int64_t idh[6] = {1, 2, 3, 4, 5, 6}, offh[4] = {0, 2, 4, 6}, zeros[12] = {0};
  clembed_ids ids = make_ids(c, idh, 6, CLEMBED_I32, 0), off = make_ids(c, offh, 4, CLEMBED_I64, 0);
  clembed_ids off3 = make_ids(c, offh, 3, CLEMBED_I64, 0), mr = make_ids(c, zeros, 12, CLEMBED_I64, 0);
  clembed_ids mr32 = make_ids(c, zeros, 12, CLEMBED_I32, 0);
  OK(c, clembed_matrix_create(c, 3, 4, CLEMBED_F32, &out));
  OK(c, clembed_matrix_create(c, 3, 5, CLEMBED_F32, &out5));
  OK(c, clembed_matrix_create(c, 10, 4, CLEMBED_F32, &gt));
  OK(c, clembed_matrix_create(c, 10, 32, CLEMBED_Q8_0, &q8));
  OK(c, clembed_matrix_create(c, 6, 1, CLEMBED_F32, &w));
  OK(c, clembed_matrix_create(c, 5, 1, CLEMBED_F32, &wbad));
  OK(c, clembed_matrix_create(c, 3, 4, CLEMBED_F32, &g));
  OK(c, clembed_matrix_create(c, 6, 1, CLEMBED_F32, &gw));
  clembed_bag_options o = clembed_bag_defaults();
  {
    clembed_error_detail d;
    EXPECT(clembed_embedding_bag(NULL, &tab, &ids, &off, &o, &out, 0, NULL, NULL) == INV &&
               clembed_context_error(NULL, &d) == CLEMBED_OK && !strcmp(d.argument, "ctx"),
           "a NULL context");
  }
  REFUSES(c, INV, "table", clembed_embedding_bag(c, NULL, &ids, &off, &o, &out, 0, NULL, NULL));
  REFUSES(c, INV, "ids", clembed_embedding_bag(c, &tab, NULL, &off, &o, &out, 0, NULL, NULL));
  REFUSES(c, INV, "out", clembed_embedding_bag(c, &tab, &ids, &off, &o, NULL, 0, NULL, NULL));
  REFUSES(c, INV, "out", clembed_embedding_bag(c, &tab, &ids, &off, &o, &out5, 0, NULL, NULL));
  REFUSES(c, CLEMBED_ERR_UNSUPPORTED, "out", clembed_embedding_bag(c, &tab, &ids, &off, &o, &q8, 0, NULL, NULL));
  REFUSES(c, INV, "offsets", clembed_embedding_bag(c, &tab, &ids, &off3, &o, &out, 0, NULL, NULL));
  REFUSES(c, INV, "event_wait_list", clembed_embedding_bag(c, &tab, &ids, &off, &o, &out, 1, NULL, NULL));
  ids.count = 5; /* 5 ids do not make 3 fixed bags */
  REFUSES(c, INV, "ids", clembed_embedding_bag(c, &tab, &ids, NULL, &o, &out, 0, NULL, NULL));
  ids.count = 6;
  o.mode = (clembed_bag_mode)7;
  REFUSES(c, INV, "mode", clembed_embedding_bag(c, &tab, &ids, &off, &o, &out, 0, NULL, NULL));
  o = clembed_bag_defaults();
  o.policy = (clembed_index_policy)9;
  REFUSES(c, INV, "policy", clembed_embedding_bag(c, &tab, &ids, &off, &o, &out, 0, NULL, NULL));
  o = clembed_bag_defaults();
  o.padding_idx = 10;
  REFUSES(c, INV, "padding_idx", clembed_embedding_bag(c, &tab, &ids, &off, &o, &out, 0, NULL, NULL));
  o = clembed_bag_defaults();
  o.mode = CLEMBED_BAG_MEAN;
  o.per_sample_weights = &w;
  REFUSES(c, INV, "per_sample_weights", clembed_embedding_bag(c, &tab, &ids, &off, &o, &out, 0, NULL, NULL));
  o.mode = CLEMBED_BAG_SUM;
  o.per_sample_weights = &wbad;
  REFUSES(c, INV, "per_sample_weights", clembed_embedding_bag(c, &tab, &ids, &off, &o, &out, 0, NULL, NULL));
  o = clembed_bag_defaults();
  o.max_rows = &mr; /* not MAX */
  REFUSES(c, INV, "max_rows", clembed_embedding_bag(c, &tab, &ids, &off, &o, &out, 0, NULL, NULL));
  o.mode = CLEMBED_BAG_MAX;
  mr.count = 11;
  REFUSES(c, INV, "max_rows", clembed_embedding_bag(c, &tab, &ids, &off, &o, &out, 0, NULL, NULL));
  mr.count = 12;
  OK(c, clembed_embedding_bag(c, &tab, &ids, &off, &o, &out, 0, NULL, NULL));
  OK(c, clembed_finish(c));
  /* the backward */
  o = clembed_bag_defaults();
  REFUSES(c, INV, "grad_table", clembed_bag_backward(c, &g, &ids, &off, &o, &tab, &out, NULL, 0, NULL, NULL));
  REFUSES(c, CLEMBED_ERR_UNSUPPORTED, "grad_table",
          clembed_bag_backward(c, &g, &ids, &off, &o, NULL, &q8, NULL, 0, NULL, NULL));
  REFUSES(c, INV, "grad_out", clembed_bag_backward(c, &out5, &ids, &off, &o, NULL, &gt, NULL, 0, NULL, NULL));
  REFUSES(c, INV, "table", clembed_bag_backward(c, &g, &ids, &off, &o, NULL, &gt, &gw, 0, NULL, NULL));
  REFUSES(c, INV, "grad_weights", clembed_bag_backward(c, &g, &ids, &off, &o, &tab, &gt, &wbad, 0, NULL, NULL));
  o.mode = CLEMBED_BAG_MAX;
  REFUSES(c, INV, "max_rows", clembed_bag_backward(c, &g, &ids, &off, &o, NULL, &gt, NULL, 0, NULL, NULL));
  o.max_rows = &mr;
  REFUSES(c, INV, "grad_weights", clembed_bag_backward(c, &g, &ids, &off, &o, &tab, &gt, &gw, 0, NULL, NULL));
  OK(c, clembed_bag_backward(c, &g, &ids, &off, &o, NULL, &gt, NULL, 0, NULL, NULL));
  OK(c, clembed_finish(c));
  /* the steps */
  o = clembed_bag_defaults();
  clembed_optimizer opt = clembed_optimizer_defaults(CLEMBED_ADAGRAD);
  REFUSES(c, INV, "o", clembed_bag_optimizer_step(c, &g, &ids, &off, &o, NULL, &tab, 0, NULL, NULL));
  REFUSES(c, INV, "state", clembed_bag_optimizer_step(c, &g, &ids, &off, &o, &opt, &tab, 0, NULL, NULL));
  opt = clembed_optimizer_defaults(CLEMBED_SGD);
  opt.learning_rate = -1.0f;
  REFUSES(c, INV, "learning_rate", clembed_bag_optimizer_step(c, &g, &ids, &off, &o, &opt, &tab, 0, NULL, NULL));
  opt = clembed_optimizer_defaults(CLEMBED_SGD);
  REFUSES(c, CLEMBED_ERR_UNSUPPORTED, "table",
          clembed_bag_optimizer_step(c, &g, &ids, &off, &o, &opt, &q8, 0, NULL, NULL));
  REFUSES(c, INV, "grad_out", clembed_bag_optimizer_step(c, &out5, &ids, &off, &o, &opt, &tab, 0, NULL, NULL));
  o.mode = CLEMBED_BAG_MAX;
  o.max_rows = &mr32; /* I32 max_rows: fine for 10 rows */
  OK(c, clembed_bag_optimizer_step(c, &g, &ids, &off, &o, &opt, &tab, 0, NULL, NULL));
  OK(c, clembed_finish(c));
  /* batched */
  clembed_bag_feature f[2] = {{sizeof(clembed_bag_feature), &tab, &ids, &off, clembed_bag_defaults()},
                              {sizeof(clembed_bag_feature), &tab, &ids, NULL, clembed_bag_defaults()}};
  clembed_matrix out8;
  OK(c, clembed_matrix_create(c, 3, 8, CLEMBED_F32, &out8));
  REFUSES(c, INV, "features", clembed_embedding_bags(c, NULL, 2, &out8, 0, NULL, NULL));
  REFUSES(c, INV, "out", clembed_embedding_bags(c, f, 2, &out, 0, NULL, NULL));
  f[1].options.mode = (clembed_bag_mode)5;
  REFUSES(c, INV, "mode", clembed_embedding_bags(c, f, 2, &out8, 0, NULL, NULL));
  EXPECT(strstr(clembed_context_message(c), "features[1]") != NULL, "message: %s", clembed_context_message(c));
  f[1].options.mode = CLEMBED_BAG_SUM;
  OK(c, clembed_embedding_bags(c, f, 2, &out8, 0, NULL, NULL));
  REFUSES(c, INV, "out", clembed_embedding_bags(c, f, 0, &out, 0, NULL, NULL)); /* no feature: 0 columns */
  clembed_matrix none;
  OK(c, clembed_matrix_create(c, 3, 0, CLEMBED_F32, &none));
  OK(c, clembed_embedding_bags(c, f, 0, &none, 0, NULL, NULL)); /* no feature: nothing to do */
  OK(c, clembed_finish(c));
  clembed_optimizer two[2] = {clembed_optimizer_defaults(CLEMBED_SGD), clembed_optimizer_defaults(CLEMBED_SGD)};
  REFUSES(c, INV, "grad_out", clembed_bags_optimizer_step(c, f, 2, &g, two, 0, NULL, NULL));
  REFUSES(c, INV, "o", clembed_bags_optimizer_step(c, f, 2, &out8, NULL, 0, NULL, NULL));
  two[1].learning_rate = 0.5f; /* the same table, another optimizer */
  REFUSES(c, INV, "o", clembed_bags_optimizer_step(c, f, 2, &out8, two, 0, NULL, NULL));
  /* renorm */
  REFUSES(c, INV, "max_norm", clembed_renorm(c, &tab, &ids, -1.0f, 2.0f, 0, NULL, NULL));
  REFUSES(c, INV, "max_norm", clembed_renorm(c, &tab, &ids, NAN, 2.0f, 0, NULL, NULL));
  REFUSES(c, INV, "norm_type", clembed_renorm(c, &tab, &ids, 1.0f, 0.0f, 0, NULL, NULL));
  REFUSES(c, INV, "norm_type", clembed_renorm(c, &tab, &ids, 1.0f, NAN, 0, NULL, NULL));
  REFUSES(c, CLEMBED_ERR_UNSUPPORTED, "table", clembed_renorm(c, &q8, &ids, 1.0f, 2.0f, 0, NULL, NULL));
  REFUSES(c, INV, "ids", clembed_renorm(c, &tab, NULL, 1.0f, 2.0f, 0, NULL, NULL));
  OK(c, clembed_finish(c));
  EXPECT(clembed_bag_defaults().padding_idx == CLEMBED_NO_PADDING && clembed_bag_defaults().mode == CLEMBED_BAG_SUM &&
             clembed_bag_defaults().policy == CLEMBED_INDEX_CHECK,
         "clembed_bag_defaults");
  free(T);
  release_matrix(&tab);
  clembed_matrix_release(&out);
  clembed_matrix_release(&out5);
  clembed_matrix_release(&out8);
  clembed_matrix_release(&none);
  clembed_matrix_release(&gt);
  clembed_matrix_release(&q8);
  clembed_matrix_release(&w);
  clembed_matrix_release(&wbad);
  clembed_matrix_release(&g);
  clembed_matrix_release(&gw);
  release_ids(&ids);
  release_ids(&off);
  release_ids(&off3);
  release_ids(&mr);
  release_ids(&mr32);
}

static void teardown(clembed_context *ctx) {
  (void)ctx;
  clembed_context_destroy(shape_ctx[0]);
  clembed_context_destroy(shape_ctx[1]);
}

int main(int argc, char **argv) {
  tu_suite suite = {"test_bag", 1, NULL, teardown, 0};
  return tu_main(argc, argv, suite);
}
