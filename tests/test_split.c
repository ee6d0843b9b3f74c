/* Matrices larger than one buffer: split over several (include/clembed.h,
 * "Tables past one buffer").
 *
 * CLEMBED_MAX_BUFFER_BYTES, read when a context is created, lowers the largest
 * buffer of a matrix, so small tables split: the suite's own context has no
 * limit, and contexts made here have limits that split a 21-row F32 table of
 * 32 columns (128 bytes a row) into 2 (a limit that is not a multiple of a
 * row), 3 and 7 pieces, and into one piece per row (21: more pieces than a
 * launch takes, so the launches over windows of them run). Every matrix those
 * contexts create past the limit is split: tables, outputs, gradients,
 * optimizer states, positional and RoPE outputs. Each scenario below runs the
 * same calls on the same host data in the unlimited context and in each
 * limited one, and the results must be the same bits (and the same status and
 * error detail for a bad id):
 *   layout          pieces and their rows (clembed_matrix_pieces), read raw
 *                   from each piece's buffer; views of a split matrix
 *   transfers       write and read with every conversion, views (rows, a
 *                   column window), bad views refused
 *   lookup_embed    every table dtype (F32, F16, BF16, Q8_0, Q4_0, Q4_K,
 *                   Q6_K), outputs F32/F16/BF16, scale, sinusoid and learned
 *                   positions (the position table split too), sequence
 *                   offsets, dropout, padding, every policy, a bad id
 *   backward        accumulate, overwrite, the atomic path, scale_grad_by_freq,
 *                   dropout, position_grad, grad_out split
 *   steps           clembed_sgd_update (F32/F16/BF16 tables) and every
 *                   optimizer kind with its states split, weight decay, steps
 *   bags            clembed_embedding_bag (SUM, MEAN, MAX, weighted,
 *                   padding, fixed bags, F32/F16/BF16/Q8_0 tables, a bad id)
 *                   and clembed_embedding_bags (split and one-buffer tables
 *                   together), out split; clembed_bag_backward with
 *                   grad_weights, the bag steps (SGD, ADAGRAD,
 *                   ROWWISE_ADAGRAD, ADAM; one table and several), renorm
 *   init            uniform and normal, F32/F16/BF16, both kernel shapes, a view
 *                   initialised as rows of a larger table (the _at calls)
 *   norm_layer      BERT's layer (segments, LayerNorm and RMSNorm, the
 *                   policies, padding, a view as output) and its backward
 *                   into every gradient, its matrices in any number of
 *                   buffers (21 and 37 under the last limit)
 *   positional_rope the sinusoid table, the RoPE cache, RoPE applied (a
 *                   positions buffer, in place, GPT-J pairs)
 *   load            .npy files loaded split: as stored (the file's pages on
 *                   POCL, and copied), converted to F16 and quantized to Q8_0;
 *                   a range of rows (clembed_matrix_load_rows)
 *   gpu_shapes      the forward, backward and steps in the GPU kernel shapes
 *                   (the bags' too)
 *   limits          a limit below one row (CLEMBED_ERR_INVALID_ARGUMENT naming
 *                   CLEMBED_MAX_BUFFER_BYTES), a malformed limit, a limit
 *                   above the device's largest buffer
 *   registry        release through one copy, clReleaseMemObject on the first
 *                   piece (where the implementation calls destructor
 *                   callbacks), a second context on the same cl_context, a
 *                   matrix over a caller's cl_mem, threads creating and
 *                   releasing split matrices at once
 * `small` (Oclgrind) runs fewer variants and limits. Without `full` (ctest's
 * test_split_full, label exhaustive) each scenario is compared under one of the
 * limits, in turns; lookup_embed takes each table dtype with one of its
 * options, in turns (every option meets some dtype); bags and gpu_shapes a
 * share of their scenarios, every operation among them. */
#include "test_util.h"

#include "clembed_io.h"

#include <pthread.h>
#include <time.h>

enum { R = 21, D = 32, N = 37, QD = 256 };

/* the limits: 2, 3, 7 and 21 pieces of a 21 x 32 F32 table */
static const char *const LIMITS[] = {"1458", "896", "384", "130"};
static const size_t PIECES_F32[] = {2, 3, 7, 21};
#define NLIM 4

static clembed_context *lim_ctx[NLIM];

/* A context on the default device with CLEMBED_MAX_BUFFER_BYTES = limit (NULL:
 * unset) and CLEMBED_TUNING = tuning (NULL: unset). */
static clembed_context *limited(const char *limit, const char *tuning) {
  clembed_context *c = NULL;
  if (limit) setenv("CLEMBED_MAX_BUFFER_BYTES", limit, 1);
  if (tuning) setenv("CLEMBED_TUNING", tuning, 1);
  clembed_status s = clembed_context_create(NULL, &c);
  unsetenv("CLEMBED_MAX_BUFFER_BYTES");
  unsetenv("CLEMBED_TUNING");
  EXPECT(s == CLEMBED_OK, "context with CLEMBED_MAX_BUFFER_BYTES=%s: %s (%s)", limit ? limit : "(unset)",
         clembed_status_string(s), clembed_last_error_message());
  return c;
}

static cl_context cl_context_of(clembed_context *ctx) {
  cl_context c = NULL;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_CONTEXT, sizeof c, &c, NULL);
  return c;
}

static size_t pieces_of(clembed_context *ctx, const clembed_matrix *m) {
  size_t n = 0;
  OK(ctx, clembed_matrix_pieces(ctx, m, 0, NULL, NULL, &n));
  return n;
}

/* ------------------------------------------------------------- host data */

/* Value i of a data set `seed`: multiples of 1/64 in [-8, 8) (exact in every
 * float dtype). */
static float val(size_t i, unsigned seed) {
  return (float)((long)((i * 2654435761u + seed * 40503u) % 1024u) - 512) / 64.0f;
}

static float *values(size_t n, unsigned seed) {
  float *h = malloc((n + 1) * sizeof *h);
  for (size_t i = 0; i < n; i++) h[i] = val(i, seed);
  return h;
}

/* A rows x cols matrix of dtype t made by clembed_matrix_create and written
 * with values(seed) (floats, quantized for the block types). */
static clembed_matrix filled(clembed_context *ctx, size_t rows, size_t cols, clembed_dtype t, unsigned seed) {
  clembed_matrix m = {0};
  OK(ctx, clembed_matrix_create(ctx, rows, cols, t, &m));
  float *h = values(rows * cols, seed);
  if (t == CLEMBED_Q4_K || t == CLEMBED_Q6_K) { /* no quantizer: blocks of pseudo-random bytes with sane scales */
    size_t bytes = rows * clembed_dtype_row_bytes(t, cols);
    uint8_t *b = malloc(bytes);
    uint64_t st = seed;
    for (size_t i = 0; i < bytes; i++) b[i] = (uint8_t)(tu_rand(&st) * 127.0f + 128.0f);
    size_t bb = t == CLEMBED_Q4_K ? 144 : 210;
    for (size_t k = 0; k < bytes / bb; k++) { /* d (and dmin) as small F16 values */
      uint16_t d = ref_f32_to_f16(0.01f + 0.001f * (float)(k % 7));
      size_t at = t == CLEMBED_Q4_K ? 0 : 208;
      memcpy(b + k * bb + at, &d, 2);
      if (t == CLEMBED_Q4_K) memcpy(b + k * bb + 2, &d, 2);
    }
    OK(ctx, clembed_matrix_write(ctx, &m, b, t));
    free(b);
  } else {
    OK(ctx, clembed_matrix_write(ctx, &m, h, CLEMBED_F32));
  }
  free(h);
  return m;
}

/* The matrix's bytes as stored (host dtype = its dtype), dense. */
static uint8_t *raw(clembed_context *ctx, const clembed_matrix *m, size_t *bytes) {
  *bytes = m->rows * clembed_dtype_row_bytes(m->dtype, m->cols);
  uint8_t *h = malloc(*bytes + 1);
  OK(ctx, clembed_matrix_read(ctx, m, h, m->dtype));
  return h;
}

/* Releases the matrices listed (RELEASE(&a, &b, ...)). */
static void release_matrices(clembed_matrix *const *m, size_t n) {
  for (size_t k = 0; k < n; k++) clembed_matrix_release(m[k]);
}
#define RELEASE(...)                                                    \
  release_matrices((clembed_matrix *const[]){__VA_ARGS__},              \
                   sizeof((clembed_matrix *const[]){__VA_ARGS__}) / sizeof(clembed_matrix *))

static clembed_ids ids_of(clembed_context *ctx, const int64_t *h, size_t n) {
  clembed_ids d = {0};
  OK(ctx, clembed_ids_create(ctx, h, n, CLEMBED_I64, &d));
  return d;
}

/* Token ids in [0, rows) with repeats (and row 0 often), the same for every context. */
static void token_ids(int64_t *h, size_t n, size_t rows, unsigned seed) {
  for (size_t i = 0; i < n; i++) h[i] = (int64_t)((i * 7 + seed * 13 + (i * i) % 5) % rows);
}

/* A gradient-like matrix (rows x cols F32), made by clembed_matrix_create: in
 * as many buffers as the limit makes (37 under the last: more than one launch
 * takes, so the backward joins them first). */
static clembed_matrix grad_matrix(clembed_context *ctx, size_t rows, size_t cols, unsigned seed) {
  return filled(ctx, rows, cols, CLEMBED_F32, seed);
}

/* ----------------------------------------------------------- scenarios */

/* What a scenario leaves to compare: bytes (results read as stored), the
 * status of its last call and its error detail. */
typedef struct result {
  uint8_t *bytes;
  size_t n, cap;
  clembed_status status;
  clembed_error_detail detail;
  size_t split; /* the most buffers one of its matrices had */
} result;

/* The buffers of one of the scenario's inputs, counted. */
static void note(result *r, clembed_context *ctx, const clembed_matrix *m) {
  size_t p = pieces_of(ctx, m);
  if (p > r->split) r->split = p;
}

static void keep(result *r, clembed_context *ctx, const clembed_matrix *m) {
  size_t n;
  uint8_t *b = raw(ctx, m, &n);
  if (r->n + n > r->cap) {
    r->cap = (r->n + n) * 2;
    r->bytes = realloc(r->bytes, r->cap);
  }
  memcpy(r->bytes + r->n, b, n);
  r->n += n;
  free(b);
  size_t p = pieces_of(ctx, m);
  if (p > r->split) r->split = p;
}

static void keep_status(result *r, clembed_context *ctx, clembed_status s) {
  if (s == CLEMBED_OK) s = clembed_finish(ctx);
  r->status = s;
  clembed_context_error(ctx, &r->detail);
  if (s == CLEMBED_OK) memset(&r->detail, 0, sizeof r->detail);
}

typedef void (*scenario)(clembed_context *ctx, int variant, result *r);

/* Runs variant v of s in the unlimited context and in each limited one (the
 * first `nlim`), and compares. `min_split`: the least buffers expected of one
 * of its matrices in each limited context (0: not checked). */
static void same_everywhere(clembed_context *ctx, const char *what, scenario s, int v, int nlim, size_t min_split) {
  static unsigned turn = 0; /* without `full`: the limits in turns, one a call */
  result ref = {0};
  s(ctx, v, &ref);
  EXPECT(ref.split == 1, "%s %d: the unlimited context split a matrix (%zu buffers)", what, v, ref.split);
  int avail[NLIM], na = 0, only = -1;
  for (int l = 0; l < nlim; l++)
    if (lim_ctx[l]) avail[na++] = l;
  if (!tu_full && na) only = avail[turn++ % (unsigned)na];
  for (int l = 0; l < nlim; l++) {
    if (!lim_ctx[l] || (only >= 0 && l != only)) continue;
    result got = {0};
    s(lim_ctx[l], v, &got);
    EXPECT(got.status == ref.status, "%s %d, limit %s: status %s, unlimited %s (%s)", what, v, LIMITS[l],
           clembed_status_string(got.status), clembed_status_string(ref.status), clembed_context_message(lim_ctx[l]));
    EXPECT(got.detail.index == ref.detail.index && got.detail.value == ref.detail.value &&
               !strcmp(got.detail.argument ? got.detail.argument : "", ref.detail.argument ? ref.detail.argument : ""),
           "%s %d, limit %s: error detail %s[%lld] = %lld, unlimited %s[%lld] = %lld", what, v, LIMITS[l],
           got.detail.argument, (long long)got.detail.index, (long long)got.detail.value, ref.detail.argument,
           (long long)ref.detail.index, (long long)ref.detail.value);
    EXPECT(got.n == ref.n && (ref.n == 0 || !memcmp(got.bytes, ref.bytes, ref.n)),
           "%s %d, limit %s: results differ from the unlimited context's (%zu and %zu bytes)", what, v, LIMITS[l],
           got.n, ref.n);
    if (got.n == ref.n && ref.n && memcmp(got.bytes, ref.bytes, ref.n)) {
      size_t k = 0;
      while (got.bytes[k] == ref.bytes[k]) k++;
      fprintf(stderr, "  first difference at byte %zu\n", k);
    }
    if (min_split)
      EXPECT(got.split >= min_split, "%s %d, limit %s: its matrices lie in at most %zu buffers, expected %zu or more",
             what, v, LIMITS[l], got.split, min_split);
    free(got.bytes);
  }
  free(ref.bytes);
}

/* ---- lookup and embed */

static const clembed_dtype TDT[] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16, CLEMBED_Q8_0, CLEMBED_Q4_0,
                                    CLEMBED_Q4_K, CLEMBED_Q6_K};
#define EMBED_OPTS 8

/* variant = table dtype * EMBED_OPTS + options */
static void embed_scenario(clembed_context *ctx, int v, result *r) {
  clembed_dtype t = TDT[v / EMBED_OPTS];
  int o = v % EMBED_OPTS;
  size_t cols = (t == CLEMBED_Q4_K || t == CLEMBED_Q6_K) ? QD : D;
  clembed_dtype od = o == 1 ? CLEMBED_F16 : o == 2 ? CLEMBED_BF16 : CLEMBED_F32;
  if (cols == QD && od == CLEMBED_F32) od = CLEMBED_F16; /* rows of at most 512 bytes */
  int64_t h[N];
  token_ids(h, N, R, (unsigned)v);
  clembed_embed_options opt = clembed_embed_defaults();
  clembed_matrix table = filled(ctx, R, cols, t, 1 + (unsigned)v), out = {0}, pt = {0};
  clembed_ids so = {0};
  switch (o) {
    case 1: opt.scale = 0.5f; break;
    case 2: opt.positions = CLEMBED_POSITIONS_SINUSOID; opt.scale = 2.0f; break;
    case 3: /* learned positions, a table split too; sequences of 5 from sequence_offsets */
      pt = filled(ctx, 40, cols, t == CLEMBED_Q4_K || t == CLEMBED_Q6_K ? CLEMBED_F16 : CLEMBED_F32, 9);
      opt.positions = CLEMBED_POSITIONS_TABLE;
      opt.position_table = &pt;
      opt.seq_len = 5;
      {
        int64_t starts[8] = {0, 3, 30, 12, 7, 1, 20, 33};
        so = ids_of(ctx, starts, 8);
      }
      opt.sequence_offsets = &so;
      break;
    case 4: opt.dropout = 0.25f; opt.dropout_seed = 77; opt.positions = CLEMBED_POSITIONS_SINUSOID; break;
    case 5: opt.padding_idx = 0; opt.policy = CLEMBED_INDEX_ZERO; h[3] = 999; h[4] = -5; break;
    case 6: opt.policy = CLEMBED_INDEX_WRAP; h[2] = -1; h[5] = -R; opt.policy = CLEMBED_INDEX_WRAP; break;
    case 7: h[11] = R + 4; h[29] = -3; break; /* CHECK: a deferred error naming token 11 */
    default: break;
  }
  clembed_ids ids = ids_of(ctx, h, N);
  OK(ctx, clembed_matrix_create(ctx, N, cols, od, &out));
  clembed_status s = clembed_embed(ctx, &table, &ids, &opt, &out, 0, NULL, NULL);
  keep_status(r, ctx, s);
  keep(r, ctx, &out);
  keep(r, ctx, &table);
  if (pt.buffer) keep(r, ctx, &pt);
  RELEASE(&table, &out, &pt);
  clembed_ids_release(&ids);
  clembed_ids_release(&so);
}

/* ---- backward */

/* variants: 0 accumulate, 1 overwrite, 2 atomic, 3 scale_grad_by_freq + scale,
 * 4 dropout + position_grad (sequences), 5 CLAMP with huge ids, 6 a bad id */
static void backward_scenario(clembed_context *ctx, int v, result *r) {
  int64_t h[N];
  token_ids(h, N, R, 3 + (unsigned)v);
  clembed_backward_options opt = clembed_backward_defaults();
  clembed_matrix g = grad_matrix(ctx, N, D, 11), gt = filled(ctx, R, D, CLEMBED_F32, 12), pg = {0};
  if (v == 1) opt.accumulate = 0;
  if (v == 2) opt.deterministic = 0; /* values multiples of 1/64 below 8: every order sums exactly */
  if (v == 3) {
    opt.scale_grad_by_freq = 1;
    opt.scale = 0.75f;
  }
  if (v == 4) {
    opt.dropout = 0.3f;
    opt.dropout_seed = 5;
    opt.seq_len = 6;
    opt.position_offset = 2;
    pg = filled(ctx, 9, D, CLEMBED_F32, 13);
    opt.position_grad = &pg;
  }
  if (v == 5) {
    opt.policy = CLEMBED_INDEX_CLAMP;
    h[1] = 1000;
    h[7] = -40;
  }
  if (v == 6) h[20] = R;
  clembed_ids ids = ids_of(ctx, h, N);
  keep_status(r, ctx, clembed_backward(ctx, &g, &ids, &opt, &gt, 0, NULL, NULL));
  note(r, ctx, &g);
  keep(r, ctx, &gt);
  if (pg.buffer) keep(r, ctx, &pg);
  RELEASE(&g, &gt, &pg);
  clembed_ids_release(&ids);
}

/* ---- sparse steps: 0..2 sgd_update on F32/F16/BF16, 3..6 each optimizer kind
 * (F32 table, two steps), 7 ADAM with weight decay on a BF16 table, 8
 * ROWWISE_ADAGRAD on F16 with weight decay */
static void steps_scenario(clembed_context *ctx, int v, result *r) {
  static const clembed_dtype sd[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  clembed_dtype t = v < 3 ? sd[v] : v == 7 ? CLEMBED_BF16 : v == 8 ? CLEMBED_F16 : CLEMBED_F32;
  int64_t h[N];
  token_ids(h, N, R, 5 + (unsigned)v);
  clembed_matrix g = grad_matrix(ctx, N, D, 21), table = filled(ctx, R, D, t, 22), s1 = {0}, s2 = {0};
  clembed_ids ids = ids_of(ctx, h, N);
  clembed_status s;
  if (v < 3) {
    s = clembed_sgd_update(ctx, &g, &ids, 0.125f, NULL, &table, 0, NULL, NULL);
  } else {
    clembed_optimizer_kind kind = v == 7 ? CLEMBED_ADAM : v == 8 ? CLEMBED_ROWWISE_ADAGRAD
                                                                  : (clembed_optimizer_kind)(v - 3);
    clembed_optimizer o = clembed_optimizer_defaults(kind);
    if (v >= 7) o.weight_decay = 0.01f;
    if (kind != CLEMBED_SGD) {
      OK(ctx, clembed_matrix_create(ctx, R, kind == CLEMBED_ROWWISE_ADAGRAD ? 1 : D, CLEMBED_F32, &s1));
      o.state = &s1;
    }
    if (kind == CLEMBED_ADAM) {
      OK(ctx, clembed_matrix_create(ctx, R, D, CLEMBED_F32, &s2));
      o.state2 = &s2;
    }
    s = CLEMBED_OK;
    for (int step = 1; step <= 2 && s == CLEMBED_OK; step++) {
      o.step = (uint64_t)step;
      s = clembed_optimizer_step(ctx, &g, &ids, NULL, &o, &table, 0, NULL, NULL);
    }
  }
  keep_status(r, ctx, s);
  note(r, ctx, &g);
  keep(r, ctx, &table);
  if (s1.buffer) keep(r, ctx, &s1);
  if (s2.buffer) keep(r, ctx, &s2);
  RELEASE(&g, &table, &s1, &s2);
  clembed_ids_release(&ids);
}

/* ---- bags (clembed_embedding_bag(s), clembed_bag_backward, the bag steps,
 * clembed_renorm). NB bags of the ids of bag_ids; per_sample_weights and
 * grad_weights in a caller's own buffer (one cl_mem: the bag operations take
 * them in one buffer), grad_out as grad_matrix makes it, everything else made
 * by clembed_matrix_create (split past the limit). */
enum { NB = 9 };
static const int64_t ZERO_IDS[NB * D]; /* max_rows' first values */

/* A rows x cols F32 matrix over a caller's own cl_mem (one buffer whatever the limit). */
static clembed_matrix own_matrix(clembed_context *ctx, size_t rows, size_t cols, unsigned seed) {
  float *h = values(rows * cols, seed);
  cl_int err;
  clembed_matrix m = {0};
  m.buffer = clCreateBuffer(cl_context_of(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                            (rows * cols + 1) * sizeof(float), h, &err);
  EXPECT(err == CL_SUCCESS, "clCreateBuffer: %d", err);
  m.rows = rows;
  m.cols = cols;
  m.ld = cols;
  m.dtype = CLEMBED_F32;
  free(h);
  return m;
}

/* N ids (seed) in NB bags of uneven sizes (two empty), and their offsets. */
static void bag_ids(clembed_context *ctx, unsigned seed, clembed_ids *ids, clembed_ids *offs) {
  static const int64_t o[NB + 1] = {0, 3, 3, 10, 11, 18, 18, 25, 30, N};
  int64_t h[N];
  token_ids(h, N, R, seed);
  *ids = ids_of(ctx, h, N);
  *offs = ids_of(ctx, o, NB + 1);
}

/* The ids' values, kept as results. */
static void keep_ids(result *r, clembed_context *ctx, const clembed_ids *ids) {
  size_t n = ids->count * (ids->type == CLEMBED_I64 ? 8 : 4);
  uint8_t *b = malloc(n + 1);
  OK(ctx, clembed_ids_read(ctx, ids, b));
  if (r->n + n > r->cap) {
    r->cap = (r->n + n) * 2;
    r->bytes = realloc(r->bytes, r->cap);
  }
  memcpy(r->bytes + r->n, b, n);
  r->n += n;
  free(b);
}

/* The forward: 0 SUM, 1 MEAN with padding 0, 2 MAX (max_rows), 3 weighted SUM,
 * 4 an F16 table (F16 out), 5 a Q8_0 table (MEAN), 6 fixed bags (no offsets,
 * BF16 table), 7 a bad id (CHECK), 8 clembed_embedding_bags: features on split
 * tables (F32, F16 MAX, Q8_0) and on a caller's one-buffer table, two on one
 * table, out split too. */
static void bags_forward_scenario(clembed_context *ctx, int v, result *r) {
  clembed_ids ids, offs, mr = {0};
  bag_ids(ctx, 7 + (unsigned)v, &ids, &offs);
  clembed_bag_options opt = clembed_bag_defaults();
  clembed_matrix w = {0}, out = {0};
  clembed_status s;
  if (v < 8) {
    clembed_dtype t = v == 4 ? CLEMBED_F16 : v == 5 ? CLEMBED_Q8_0 : v == 6 ? CLEMBED_BF16 : CLEMBED_F32;
    clembed_matrix table = filled(ctx, R, D, t, 30 + (unsigned)v);
    const clembed_ids *o = &offs;
    if (v == 1) {
      opt.mode = CLEMBED_BAG_MEAN;
      opt.padding_idx = 0;
    }
    if (v == 2 || v == 7) {
      opt.mode = CLEMBED_BAG_MAX;
      OK(ctx, clembed_ids_create(ctx, ZERO_IDS, NB * D, CLEMBED_I64, &mr));
      opt.max_rows = &mr;
    }
    if (v == 3) {
      w = own_matrix(ctx, N, 1, 31);
      opt.per_sample_weights = &w;
    }
    if (v == 5) opt.mode = CLEMBED_BAG_MEAN;
    if (v == 6) o = NULL;
    clembed_ids bad = ids;
    if (v == 7) {
      int64_t h[N];
      token_ids(h, N, R, 14);
      h[12] = R + 3;
      h[20] = -2;
      bad = ids_of(ctx, h, N);
    }
    size_t bags = v == 6 ? N : NB; /* fixed bags of one id */
    OK(ctx, clembed_matrix_create(ctx, bags, D, v == 4 ? CLEMBED_F16 : CLEMBED_F32, &out));
    s = clembed_embedding_bag(ctx, &table, &bad, o, &opt, &out, 0, NULL, NULL);
    keep_status(r, ctx, s);
    if (s == CLEMBED_OK) keep(r, ctx, &out);
    note(r, ctx, &table);
    if (v == 7) clembed_ids_release(&bad);
    RELEASE(&table);
  } else {
    clembed_matrix ta = filled(ctx, R, D, CLEMBED_F32, 40), tb = filled(ctx, R, D, CLEMBED_F16, 41),
                   tq = filled(ctx, R, D, CLEMBED_Q8_0, 42), tu = own_matrix(ctx, 8, D, 43);
    clembed_ids ids2, offs2;
    bag_ids(ctx, 44, &ids2, &offs2);
    int64_t hs[N];
    token_ids(hs, N, 8, 45);
    clembed_ids ids3 = ids_of(ctx, hs, N);
    OK(ctx, clembed_ids_create(ctx, ZERO_IDS, NB * D, CLEMBED_I32, &mr));
    w = own_matrix(ctx, N, 1, 46);
    clembed_bag_feature f[5];
    for (int k = 0; k < 5; k++) f[k].options = clembed_bag_defaults();
    f[0] = (clembed_bag_feature){sizeof(clembed_bag_feature), &ta, &ids, &offs, clembed_bag_defaults()};
    f[1] = (clembed_bag_feature){sizeof(clembed_bag_feature), &tb, &ids2, &offs2, clembed_bag_defaults()};
    f[1].options.mode = CLEMBED_BAG_MAX;
    f[1].options.max_rows = &mr;
    f[2] = (clembed_bag_feature){sizeof(clembed_bag_feature), &tu, &ids3, &offs, clembed_bag_defaults()};
    f[2].options.per_sample_weights = &w;
    f[3] = (clembed_bag_feature){sizeof(clembed_bag_feature), &tq, &ids2, &offs2, clembed_bag_defaults()};
    f[3].options.mode = CLEMBED_BAG_MEAN;
    f[4] = (clembed_bag_feature){sizeof(clembed_bag_feature), &ta, &ids2, &offs2, clembed_bag_defaults()};
    f[4].options.policy = CLEMBED_INDEX_ZERO;
    f[4].options.padding_idx = 2;
    OK(ctx, clembed_matrix_create(ctx, NB, 5 * D, CLEMBED_F16, &out));
    s = clembed_embedding_bags(ctx, f, 5, &out, 0, NULL, NULL);
    keep_status(r, ctx, s);
    if (s == CLEMBED_OK) keep(r, ctx, &out);
    note(r, ctx, &ta);
    RELEASE(&ta, &tb, &tq, &tu);
    clembed_ids_release(&ids2);
    clembed_ids_release(&offs2);
    clembed_ids_release(&ids3);
  }
  if (mr.buffer && r->status == CLEMBED_OK) keep_ids(r, ctx, &mr);
  note(r, ctx, &out);
  RELEASE(&out, &w);
  clembed_ids_release(&ids);
  clembed_ids_release(&offs);
  clembed_ids_release(&mr);
}

/* MAX's max_rows (opt->max_rows) as the forward writes them for the F32
 * table of values(seed), from a one-buffer copy of it. */
static void max_rows_of(clembed_context *ctx, unsigned seed, const clembed_ids *ids, const clembed_ids *offs,
                        clembed_bag_options *opt) {
  clembed_matrix t = own_matrix(ctx, R, D, seed), out = own_matrix(ctx, NB, D, 0);
  OK(ctx, clembed_embedding_bag(ctx, &t, ids, offs, opt, &out, 0, NULL, NULL));
  RELEASE(&t, &out);
}

/* Training: 0 clembed_bag_backward SUM weighted with grad_weights, 1 MEAN
 * without the table, 2 MAX (max_rows from the forward), 3 grad_weights from a
 * Q8_0 table, 4..7 clembed_bag_optimizer_step
 * with SGD, ADAGRAD, ROWWISE_ADAGRAD, ADAM (states split too; two steps;
 * MEAN, MAX, SUM, weighted), 8 clembed_bags_optimizer_step: ADAGRAD on a
 * table two features share and ADAM on an F16 one, 9 clembed_renorm (p = 2, a
 * view of rows from row 2), 10 clembed_renorm p = 1 on BF16, 11 p = 3 on F16. */
static void bags_train_scenario(clembed_context *ctx, int v, result *r) {
  clembed_ids ids, offs, mr = {0};
  bag_ids(ctx, 17 + (unsigned)v, &ids, &offs);
  clembed_bag_options opt = clembed_bag_defaults();
  clembed_matrix w = {0}, g = {0}, gw = {0}, gt = {0}, s1 = {0}, s2 = {0}, t1 = {0}, t2 = {0}, u1 = {0},
                 u2 = {0};
  clembed_status s = CLEMBED_OK;
  if (v < 4) {
    clembed_matrix table = filled(ctx, R, D, v == 3 ? CLEMBED_Q8_0 : CLEMBED_F32, 50 + (unsigned)v);
    gt = filled(ctx, R, D, CLEMBED_F32, 51);
    g = grad_matrix(ctx, NB, D, 52);
    if (v == 0 || v == 3) {
      w = own_matrix(ctx, N, 1, 53);
      opt.per_sample_weights = &w;
      gw = own_matrix(ctx, N, 1, 54);
    }
    if (v == 1) opt.mode = CLEMBED_BAG_MEAN;
    if (v == 2) {
      opt.mode = CLEMBED_BAG_MAX;
      OK(ctx, clembed_ids_create(ctx, ZERO_IDS, NB * D, CLEMBED_I64, &mr));
      opt.max_rows = &mr;
      max_rows_of(ctx, 50 + (unsigned)v, &ids, &offs, &opt);
    }
    s = clembed_bag_backward(ctx, &g, &ids, &offs, &opt, v == 1 ? NULL : &table, &gt, gw.buffer ? &gw : NULL, 0,
                             NULL, NULL);
    keep_status(r, ctx, s);
    keep(r, ctx, &gt);
    if (gw.buffer) keep(r, ctx, &gw);
    note(r, ctx, &table);
    RELEASE(&table);
  } else if (v < 9) {
    clembed_optimizer_kind kind = v == 8 ? CLEMBED_ADAGRAD : (clembed_optimizer_kind)(v - 4);
    clembed_optimizer o = clembed_optimizer_defaults(kind);
    t1 = filled(ctx, R, D, CLEMBED_F32, 60 + (unsigned)v);
    if (kind != CLEMBED_SGD) {
      OK(ctx, clembed_matrix_create(ctx, R, kind == CLEMBED_ROWWISE_ADAGRAD ? 1 : D, CLEMBED_F32, &s1));
      o.state = &s1;
    }
    if (kind == CLEMBED_ADAM) {
      OK(ctx, clembed_matrix_create(ctx, R, D, CLEMBED_F32, &s2));
      o.state2 = &s2;
      o.weight_decay = 0.01f;
    }
    if (v < 8) {
      g = grad_matrix(ctx, NB, D, 61);
      if (v == 4) opt.mode = CLEMBED_BAG_MEAN;
      if (v == 5) {
        opt.mode = CLEMBED_BAG_MAX;
        OK(ctx, clembed_ids_create(ctx, ZERO_IDS, NB * D, CLEMBED_I64, &mr));
        opt.max_rows = &mr;
        max_rows_of(ctx, 60 + (unsigned)v, &ids, &offs, &opt);
      }
      if (v == 7) {
        w = own_matrix(ctx, N, 1, 62);
        opt.per_sample_weights = &w;
      }
      for (int step = 1; step <= 2 && s == CLEMBED_OK; step++) {
        o.step = (uint64_t)step;
        s = clembed_bag_optimizer_step(ctx, &g, &ids, &offs, &opt, &o, &t1, 0, NULL, NULL);
      }
    } else {
      clembed_ids ids2, offs2;
      bag_ids(ctx, 63, &ids2, &offs2);
      t2 = filled(ctx, R, D, CLEMBED_F16, 64);
      clembed_optimizer o2 = clembed_optimizer_defaults(CLEMBED_ADAM);
      OK(ctx, clembed_matrix_create(ctx, R, D, CLEMBED_F32, &u1));
      OK(ctx, clembed_matrix_create(ctx, R, D, CLEMBED_F32, &u2));
      o2.state = &u1;
      o2.state2 = &u2;
      clembed_bag_feature f[3] = {{sizeof(clembed_bag_feature), &t1, &ids, &offs, clembed_bag_defaults()},
                                  {sizeof(clembed_bag_feature), &t2, &ids2, &offs2, clembed_bag_defaults()},
                                  {sizeof(clembed_bag_feature), &t1, &ids2, &offs2, clembed_bag_defaults()}};
      f[2].options.mode = CLEMBED_BAG_MEAN;
      /* grad_out split too where its rows (384 bytes) fit the limit */
      clembed_matrix probe = {0};
      if (clembed_matrix_create(ctx, 1, 3 * D, CLEMBED_F32, &probe) == CLEMBED_OK)
        g = grad_matrix(ctx, NB, 3 * D, 65);
      else
        g = own_matrix(ctx, NB, 3 * D, 65);
      RELEASE(&probe);
      for (int step = 1; step <= 2 && s == CLEMBED_OK; step++) {
        o.step = o2.step = (uint64_t)step;
        clembed_optimizer os[3] = {o, o2, o};
        s = clembed_bags_optimizer_step(ctx, f, 3, &g, os, 0, NULL, NULL);
      }
      clembed_ids_release(&ids2);
      clembed_ids_release(&offs2);
    }
    keep_status(r, ctx, s);
    keep(r, ctx, &t1);
    if (t2.buffer) keep(r, ctx, &t2);
    if (s1.buffer) keep(r, ctx, &s1);
    if (s2.buffer) keep(r, ctx, &s2);
    if (u1.buffer) keep(r, ctx, &u1);
    if (u2.buffer) keep(r, ctx, &u2);
  } else {
    clembed_dtype t = v == 10 ? CLEMBED_BF16 : v == 11 ? CLEMBED_F16 : CLEMBED_F32;
    t1 = filled(ctx, R, D, t, 70 + (unsigned)v);
    clembed_matrix view = t1;
    if (v == 9) { /* rows 2 .. R-1 */
      view.offset = 2 * D;
      view.rows = R - 2;
    }
    int64_t h[N];
    token_ids(h, N, R - 2, 71);
    clembed_ids rid = ids_of(ctx, h, N);
    s = clembed_renorm(ctx, &view, &rid, v == 10 ? 20.0f : 9.0f, v == 9 ? 2.0f : v == 10 ? 1.0f : 3.0f, 0, NULL,
                       NULL);
    keep_status(r, ctx, s);
    keep(r, ctx, &t1);
    clembed_ids_release(&rid);
  }
  RELEASE(&g, &w, &gw, &gt, &s1, &s2, &t1, &t2, &u1, &u2);
  clembed_ids_release(&ids);
  clembed_ids_release(&offs);
  clembed_ids_release(&mr);
}

/* ---- initialisation: dtype (3) x uniform/normal (2) x whole/view (2) */
static void init_scenario(clembed_context *ctx, int v, result *r) {
  static const clembed_dtype dt[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  clembed_dtype t = dt[v % 3];
  int normal = (v / 3) % 2, view = v / 6;
  clembed_matrix m = {0};
  OK(ctx, clembed_matrix_create(ctx, 2 * R + 1, D, t, &m));
  clembed_matrix w = m;
  if (view) { /* rows 3 .. 3 + 2R - 5, columns 5 .. 5 + D - 10 (odd: the _at calls' first index not a multiple of 4) */
    w.offset = 3 * D + 5;
    w.rows = 2 * R - 4;
    w.cols = D - 9;
  }
  /* the view as rows 1001 .. of a larger table (the _at calls: its Philox indices from (1001 + r) * cols) */
  clembed_status s = normal ? (view ? clembed_matrix_init_normal_at(ctx, &w, 1001, 0.5f, 2.0f, 1234 + (uint64_t)v, 0,
                                                                    NULL, NULL)
                                    : clembed_matrix_init_normal(ctx, &w, 0.5f, 2.0f, 1234 + (uint64_t)v, 0, NULL, NULL))
                            : (view ? clembed_matrix_init_uniform_at(ctx, &w, 1001, -3.0f, 5.0f, 99 + (uint64_t)v, 0,
                                                                     NULL, NULL)
                                    : clembed_matrix_init_uniform(ctx, &w, -3.0f, 5.0f, 99 + (uint64_t)v, 0, NULL, NULL));
  keep_status(r, ctx, s);
  keep(r, ctx, &m);
  clembed_matrix_release(&m);
}

/* ---- positional and RoPE: 0 the sinusoid table (F32), 1 (BF16), 2 the RoPE
 * cache, 3 RoPE from a positions buffer, 4 in place with GPT-J pairs, 5 inverse
 * into an F16 output, sequences */
static void positional_scenario(clembed_context *ctx, int v, result *r) {
  clembed_status s;
  if (v <= 2) {
    clembed_matrix out = {0};
    OK(ctx, clembed_matrix_create(ctx, 2 * R, D, v == 1 ? CLEMBED_BF16 : CLEMBED_F32, &out));
    if (v < 2) {
      s = clembed_positional(ctx, NULL, 17, &out, 0, NULL, NULL);
    } else {
      clembed_rope rp = clembed_rope_defaults();
      rp.head_dim = D;
      s = clembed_rope_cache(ctx, &rp, 100, &out, 0, NULL, NULL);
    }
    keep_status(r, ctx, s);
    keep(r, ctx, &out);
    clembed_matrix_release(&out);
    return;
  }
  clembed_rope rp = clembed_rope_defaults();
  rp.head_dim = 16;
  rp.rotary_dim = v == 5 ? 12 : 0;
  rp.layout = v == 4 ? CLEMBED_ROPE_GPTJ : CLEMBED_ROPE_NEOX;
  clembed_matrix x = filled(ctx, N, D, CLEMBED_F32, 31), out = {0};
  int64_t pos[N];
  for (size_t i = 0; i < N; i++) pos[i] = (int64_t)((i * 37) % 1000);
  clembed_ids p = ids_of(ctx, pos, N);
  if (v == 3) {
    OK(ctx, clembed_matrix_create(ctx, N, D, CLEMBED_F32, &out));
    s = clembed_rope_apply(ctx, &rp, &x, &p, 0, 0, 0, &out, 0, NULL, NULL);
  } else if (v == 4) {
    s = clembed_rope_apply(ctx, &rp, &x, NULL, 0, 7, 0, &x, 0, NULL, NULL);
  } else {
    OK(ctx, clembed_matrix_create(ctx, N, D, CLEMBED_F16, &out));
    s = clembed_rope_apply(ctx, &rp, &x, NULL, 8, 3, 1, &out, 0, NULL, NULL);
  }
  keep_status(r, ctx, s);
  keep(r, ctx, out.buffer ? &out : &x);
  clembed_matrix_release(&x);
  clembed_matrix_release(&out);
  clembed_ids_release(&p);
}

/* ---- transfers: write as host dtype hd into a matrix of dtype t, read back as
 * F32 and as stored; views of rows and of a column window */
static void transfer_scenario(clembed_context *ctx, int v, result *r) {
  static const clembed_dtype md[5] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16, CLEMBED_Q8_0, CLEMBED_Q4_0};
  clembed_dtype t = md[v % 5];
  int from16 = v >= 5; /* the host values as F16 */
  clembed_matrix m = {0};
  OK(ctx, clembed_matrix_create(ctx, R, D, t, &m));
  float *h = values(R * D, 40 + (unsigned)v);
  uint16_t *h16 = malloc(R * D * sizeof *h16);
  for (size_t i = 0; i < R * D; i++) h16[i] = ref_f32_to_f16(h[i]);
  OK(ctx, clembed_matrix_write(ctx, &m, from16 ? (void *)h16 : (void *)h, from16 ? CLEMBED_F16 : CLEMBED_F32));
  if (clembed_dtype_block_values(t) == 1) { /* a view of rows 4 .. 16 and columns 3 .. 26 rewritten */
    clembed_matrix w = m;
    w.offset = 4 * D + 3;
    w.rows = 13;
    w.cols = 24;
    OK(ctx, clembed_matrix_write(ctx, &w, h + 100, CLEMBED_F32));
    keep(r, ctx, &w);
  }
  float *f = malloc(R * D * sizeof *f);
  OK(ctx, clembed_matrix_read(ctx, &m, f, CLEMBED_F32));
  clembed_matrix as_f32 = {0};
  OK(ctx, clembed_matrix_create(ctx, R, D, CLEMBED_F32, &as_f32));
  OK(ctx, clembed_matrix_write(ctx, &as_f32, f, CLEMBED_F32));
  keep(r, ctx, &as_f32);
  keep(r, ctx, &m);
  keep_status(r, ctx, CLEMBED_OK);
  free(f);
  free(h);
  free(h16);
  clembed_matrix_release(&m);
  clembed_matrix_release(&as_f32);
}

/* ---- BERT's layer (segments, a norm; norm.c): 0 LayerNorm with weight and bias,
 * learned positions and segment ids, the forward then clembed_embed_backward
 * into every gradient; 1 RMSNorm with sinusoid positions and dropout; 2 segments
 * without a norm, a bad segment id; 3 LayerNorm, a bad id under CHECK and a
 * padding id; 4 RMSNorm under WRAP (negative ids), padding_keeps_row, no
 * segment ids (type 0); 5 LayerNorm under CLAMP into an F16 output that is a
 * view (columns 1 .. D of a wider matrix, whose other columns must not
 * change), learned positions from sequence offsets */
static void norm_scenario(clembed_context *ctx, int v, result *r) {
  int64_t h[N], sid[N];
  token_ids(h, N, R, 7 + (unsigned)v);
  for (size_t i = 0; i < N; i++) sid[i] = (int64_t)((i * 5) % 3);
  if (v == 2) sid[9] = 3;
  if (v == 3) h[7] = R + 4;
  if (v == 4) h[2] = -1, h[11] = -R, h[20] = 1;
  if (v == 5) h[3] = R + 9, h[30] = -4;
  clembed_matrix table = filled(ctx, R, D, CLEMBED_F32, 60), seg = filled(ctx, 3, D, CLEMBED_F32, 61);
  clembed_matrix pt = {0}, w = filled(ctx, 1, D, CLEMBED_F32, 62), b = filled(ctx, 1, D, CLEMBED_F32, 63);
  clembed_matrix out = {0}, wide = {0}, g = grad_matrix(ctx, N, D, 64);
  clembed_ids so = {0};
  clembed_matrix gt = filled(ctx, R, D, CLEMBED_F32, 65), gp = {0}, gs = filled(ctx, 3, D, CLEMBED_F32, 66);
  clembed_matrix gw = filled(ctx, 1, D, CLEMBED_F32, 67), gb = filled(ctx, 1, D, CLEMBED_F32, 68);
  clembed_ids ids = ids_of(ctx, h, N), sids = ids_of(ctx, sid, N);
  clembed_embed_options opt = clembed_embed_defaults();
  opt.segment_table = &seg;
  opt.segment_ids = &sids;
  opt.scale = 2.0f;
  clembed_embed_grads grads = {sizeof(clembed_embed_grads), &gt, NULL, &gs, NULL, NULL};
  if (v == 0) {
    pt = filled(ctx, 20, D, CLEMBED_F32, 69);
    OK(ctx, clembed_matrix_create(ctx, 20, D, CLEMBED_F32, &gp));
    opt.positions = CLEMBED_POSITIONS_TABLE;
    opt.position_table = &pt;
    opt.seq_len = 10;
    opt.norm.kind = CLEMBED_NORM_LAYER;
    opt.norm.weight = &w;
    opt.norm.bias = &b;
    opt.norm.eps = 1e-5f;
    grads.position_table = &gp;
    grads.norm_weight = &gw;
    grads.norm_bias = &gb;
  } else if (v == 1) {
    opt.positions = CLEMBED_POSITIONS_SINUSOID;
    opt.norm.kind = CLEMBED_NORM_RMS;
    opt.norm.weight = &w;
    opt.dropout = 0.2f;
    opt.dropout_seed = 3;
    grads.norm_weight = &gw;
  } else if (v >= 3) {
    opt.norm.kind = v == 4 ? CLEMBED_NORM_RMS : CLEMBED_NORM_LAYER;
    opt.norm.weight = &w;
    if (v != 4) opt.norm.bias = &b;
    grads.norm_weight = &gw;
    if (v != 4) grads.norm_bias = &gb;
    opt.policy = v == 3 ? CLEMBED_INDEX_CHECK : v == 4 ? CLEMBED_INDEX_WRAP : CLEMBED_INDEX_CLAMP;
    if (v == 3) opt.padding_idx = 2;
    if (v == 4) {
      opt.padding_idx = 1;
      opt.padding_keeps_row = 1;
      opt.segment_ids = NULL;
    }
    if (v == 5) {
      int64_t starts[4] = {0, 3, 1, 5};
      so = ids_of(ctx, starts, 4);
      pt = filled(ctx, 15, D, CLEMBED_F32, 70);
      opt.positions = CLEMBED_POSITIONS_TABLE;
      opt.position_table = &pt;
      opt.seq_len = 10;
      opt.sequence_offsets = &so;
    }
  }
  if (v == 5) { /* out: columns 1 .. D of an N x (D + 3) F16 matrix */
    wide = filled(ctx, N, D + 3, CLEMBED_F16, 71);
    out = wide;
    out.offset = wide.offset + 1;
    out.cols = D;
    out.ld = D + 3;
  } else {
    OK(ctx, clembed_matrix_create(ctx, N, D, CLEMBED_F32, &out));
  }
  clembed_status s = clembed_embed(ctx, &table, &ids, &opt, &out, 0, NULL, NULL);
  if (s == CLEMBED_OK) s = clembed_finish(ctx);
  if (s == CLEMBED_OK) s = clembed_embed_backward(ctx, &g, &table, &ids, &opt, &grads, 0, NULL, NULL);
  keep_status(r, ctx, s);
  note(r, ctx, &table);
  if (pt.buffer) note(r, ctx, &pt);
  keep(r, ctx, v == 5 ? &wide : &out);
  clembed_matrix *res[] = {&gt, &gp, &gs, &gw, &gb};
  for (size_t k = 0; k < 5; k++)
    if (res[k]->buffer) keep(r, ctx, res[k]);
  if (v == 5) out = (clembed_matrix){0};
  RELEASE(&table, &seg, &pt, &w, &b, &out, &wide, &g, &gt, &gp, &gs, &gw, &gb);
  clembed_ids_release(&ids);
  clembed_ids_release(&so);
  clembed_ids_release(&sids);
}

/* ---- load: a .npy file of R x D values ("<f4" or "<f2"), loaded as F32, F16
 * or Q8_0; with the file's pages (POCL) or copied (CLEMBED_NO_FILE_PAGES) */
static char npy_path[2][256];

static void write_npy(const char *path, int f16, unsigned seed) {
  char dict[128];
  snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }", f16 ? "<f2" : "<f4",
           R, D);
  size_t len = strlen(dict), total = 128;
  FILE *f = fopen(path, "wb");
  EXPECT(f != NULL, "cannot write %s", path);
  if (!f) return;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(total - 10), 0};
  fwrite(pre, 1, 10, f);
  fwrite(dict, 1, len, f);
  for (size_t i = 10 + len; i < total - 1; i++) fputc(' ', f);
  fputc('\n', f);
  float *h = values(R * D, seed);
  for (size_t i = 0; i < R * D; i++) {
    if (f16) {
      uint16_t b = ref_f32_to_f16(h[i]);
      fwrite(&b, 2, 1, f);
    } else {
      fwrite(&h[i], 4, 1, f);
    }
  }
  free(h);
  fclose(f);
}

/* variant: file (f4, f2) * 3 device dtypes (F32, F16, Q8_0) * pages (on, off);
 * 12 and 13: rows 2 .. 18 alone (clembed_matrix_load_rows) as F32, pages on, off */
static void load_scenario(clembed_context *ctx, int v, result *r) {
  static const clembed_dtype dt[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_Q8_0};
  int file = v % 2, copy = v >= 12 ? v == 13 : v / 6, rows = v >= 12;
  clembed_dtype t = v >= 12 ? CLEMBED_F32 : dt[(v / 2) % 3];
  if (copy) setenv("CLEMBED_NO_FILE_PAGES", "1", 1);
  clembed_file *f = NULL;
  clembed_matrix m = {0};
  OK(ctx, clembed_file_open(npy_path[file], &f));
  clembed_status s = rows ? clembed_matrix_load_rows(ctx, f, NULL, t, 2, 17, &m)
                          : clembed_matrix_load(ctx, f, NULL, t, &m);
  clembed_file_close(f); /* the matrix outlives the file (a mapping is the buffers') */
  unsetenv("CLEMBED_NO_FILE_PAGES");
  keep_status(r, ctx, s);
  if (s == CLEMBED_OK) {
    keep(r, ctx, &m);
    /* written after loading: the copy-on-write pages stay the matrix's */
    float row[D];
    for (int c = 0; c < D; c++) row[c] = (float)c;
    clembed_matrix last = m;
    last.offset = m.offset + (m.rows - 1) * D; /* a matrix over a file's pages starts where the tensor does */
    last.rows = 1;
    OK(ctx, clembed_matrix_write(ctx, &last, row, CLEMBED_F32));
    keep(r, ctx, &m);
  }
  clembed_matrix_release(&m);
}

/* ---------------------------------------------------------------- cases */

static void setup(clembed_context *ctx) {
  (void)ctx;
  for (int l = 0; l < NLIM; l++)
    if (!tu_small || l == 1 || l == 3) lim_ctx[l] = limited(LIMITS[l], NULL);
  for (int k = 0; k < 2; k++) {
    snprintf(npy_path[k], sizeof npy_path[k], "/tmp/clembed_test_split_%ld_%d.npy", (long)getpid(), k);
    write_npy(npy_path[k], k, 50 + (unsigned)k);
  }
}

static void teardown(clembed_context *ctx) {
  (void)ctx;
  for (int l = 0; l < NLIM; l++) clembed_context_destroy(lim_ctx[l]);
  for (int k = 0; k < 2; k++) remove(npy_path[k]);
}

TU_CASE(layout) {
  for (int l = 0; l < NLIM; l++) {
    clembed_context *c = lim_ctx[l];
    if (!c) continue;
    clembed_matrix m = filled(c, R, D, CLEMBED_F32, 7);
    clembed_matrix p[32];
    size_t first[32], n = 0, per = (size_t)atoi(LIMITS[l]) / 4 * 4 / (D * 4);
    OK(c, clembed_matrix_pieces(c, &m, 32, p, first, &n));
    EXPECT(n == PIECES_F32[l], "limit %s: %zu pieces, expected %zu", LIMITS[l], n, PIECES_F32[l]);
    /* each piece: the next rows, at most `per`, its bytes within the limit; read raw from its buffer */
    float *h = values(R * D, 7);
    size_t row = 0;
    for (size_t j = 0; j < n && j < 32; j++) {
      EXPECT(first[j] == row && p[j].rows >= 1 && p[j].rows <= per && p[j].cols == D && p[j].ld == D &&
                 p[j].dtype == CLEMBED_F32,
             "limit %s: piece %zu starts at row %zu (expected %zu), %zu x %zu ld %zu", LIMITS[l], j, first[j], row,
             p[j].rows, p[j].cols, p[j].ld);
      size_t size = 0;
      clGetMemObjectInfo(p[j].buffer, CL_MEM_SIZE, sizeof size, &size, NULL);
      EXPECT(size <= (size_t)atoi(LIMITS[l]), "limit %s: piece %zu has %zu bytes", LIMITS[l], j, size);
      float *b = malloc(p[j].rows * D * sizeof *b);
      cl_int err = clEnqueueReadBuffer(clembed_context_queue(c), p[j].buffer, CL_TRUE, p[j].offset * 4,
                                       p[j].rows * D * 4, b, 0, NULL, NULL);
      EXPECT(err == CL_SUCCESS && !memcmp(b, h + row * D, p[j].rows * D * 4),
             "limit %s: piece %zu does not hold rows %zu .. %zu", LIMITS[l], j, row, row + p[j].rows - 1);
      free(b);
      row += p[j].rows;
    }
    EXPECT(row == R, "limit %s: the pieces hold %zu rows", LIMITS[l], row);
    /* a view of rows 5 .. 14, columns 8 .. 23: the pieces it lies in */
    clembed_matrix w = m;
    w.offset = 5 * D + 8;
    w.rows = 10;
    w.cols = 16;
    size_t vn = 0;
    OK(c, clembed_matrix_pieces(c, &w, 32, p, first, &vn));
    size_t got = 0;
    for (size_t j = 0; j < vn && j < 32; j++) {
      EXPECT(first[j] == got && p[j].cols == 16 && p[j].ld == D, "limit %s: view piece %zu", LIMITS[l], j);
      float b[16];
      clEnqueueReadBuffer(clembed_context_queue(c), p[j].buffer, CL_TRUE, p[j].offset * 4, 64, b, 0, NULL, NULL);
      EXPECT(!memcmp(b, h + (5 + got) * D + 8, 64), "limit %s: view piece %zu's first row", LIMITS[l], j);
      got += p[j].rows;
    }
    EXPECT(got == 10, "limit %s: the view's pieces hold %zu rows", LIMITS[l], got);
    /* a view inside one piece is one buffer */
    w.offset = 0;
    w.rows = 1;
    EXPECT(pieces_of(c, &w) == 1, "limit %s: a one-row view", LIMITS[l]);
    free(h);
    clembed_matrix_release(&m);
    EXPECT(m.buffer == NULL, "release zeroes the matrix");
  }
  /* the unlimited context: one buffer */
  clembed_matrix m = filled(ctx, R, D, CLEMBED_F32, 7);
  EXPECT(pieces_of(ctx, &m) == 1, "unlimited: one buffer");
  clembed_matrix_release(&m);
}

TU_CASE(transfers) {
  for (int v = 0; v < (tu_small ? 5 : 10); v++) same_everywhere(ctx, "transfers", transfer_scenario, v, NLIM, 2);
  /* bad views of a split matrix */
  clembed_context *c = lim_ctx[1];
  clembed_matrix m = filled(c, R, D, CLEMBED_F32, 3), w;
  float h[R * D];
  w = m;
  w.ld = D + 1; /* another ld */
  w.rows = 2;
  FAILS(c, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_read(c, &w, h, CLEMBED_F32));
  EXPECT(strstr(clembed_context_message(c), "keeps ld") != NULL, "message: %s", clembed_context_message(c));
  w = m;
  w.offset = 5;
  w.ld = 0; /* ld = cols, now 32: fine; but offset 5 + cols 32 crosses a row */
  FAILS(c, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_read(c, &w, h, CLEMBED_F32));
  EXPECT(strstr(clembed_context_message(c), "crosses a row") != NULL, "message: %s", clembed_context_message(c));
  w = m;
  w.offset = 3 * D;
  w.rows = R - 2; /* past the last row */
  FAILS(c, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_read(c, &w, h, CLEMBED_F32));
  w = m;
  w.dtype = CLEMBED_F16;
  FAILS(c, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_read(c, &w, h, CLEMBED_F32));
  clembed_error_detail d;
  clembed_context_error(c, &d);
  EXPECT(!strcmp(d.argument, "m"), "detail argument %s", d.argument);
  w = m;
  w.rows = 0; /* an empty view anywhere in the matrix */
  w.offset = R * D;
  OK(c, clembed_matrix_read(c, &w, h, CLEMBED_F32));
  clembed_matrix_release(&m);
}

TU_CASE(lookup_embed) {
  int ndt = tu_small ? 4 : 7;
  for (int t = 0; t < ndt; t++)
    for (int o = 0; o < EMBED_OPTS; o++) {
      if (tu_small && o % 2) continue;
      if (!tu_full && (tu_small ? o / 2 : o) % ndt != t) continue; /* each dtype once, each option once */
      /* K-quant rows (256 columns, 512-byte F16 outputs) fit the first two limits only */
      int nlim = TDT[t] == CLEMBED_Q4_K || TDT[t] == CLEMBED_Q6_K ? 2 : NLIM;
      same_everywhere(ctx, "lookup_embed", embed_scenario, t * EMBED_OPTS + o, nlim, 2);
    }
}

TU_CASE(backward) {
  for (int v = 0; v < 7; v++)
    if (!tu_small || v % 2 == 0) same_everywhere(ctx, "backward", backward_scenario, v, NLIM, 2);
}

TU_CASE(steps) {
  for (int v = 0; v < 9; v++)
    if (!tu_small || v >= 3) same_everywhere(ctx, "steps", steps_scenario, v, NLIM, 2);
}

/* The bag operations: the forward where a launch takes the table's pieces
 * with its ids, offsets, weights and max_rows (the first three limits: at
 * most 7 pieces; out in up to 9, so over windows) and past that (21 pieces:
 * one per row; the rows its ids take gathered first); the backward,
 * grad_weights, the steps and renorm under every limit: the same bits, the
 * same deferred errors. */
TU_CASE(bags) {
  /* the fourth limit (the table in 21 pieces, gathered) for SUM, MAX with
   * max_rows, weighted SUM, and bad ids under CHECK (the 5-feature call's F16
   * output rows do not fit it) */
  /* (without `full`: SUM and the batched call (its features MAX, weighted, Q8_0 MEAN, padding); the
   * backward with grad_weights, an SGD step, the batched step, renorm: every bag operation once) */
  for (int v = 0; v < 9; v++)
    if ((!tu_small || v % 2 == 0) && (tu_full || v == 0 || v == 8)) /* (the F16 and Q8_0 tables and out fit 1458 bytes) */
      same_everywhere(ctx, "bags forward", bags_forward_scenario, v, v == 0 || v == 2 || v == 3 || v == 7 ? NLIM : 3,
                      v == 4 || v == 5 ? 0 : 2);
  for (int v = 0; v < 12; v++)
    if ((!tu_small || v % 2 == 0 || v == 3) && (tu_full || v % 4 == 0 || v == 10)) /* (the 21-row F16 and BF16 tables fit 1458 bytes) */
      same_everywhere(ctx, "bags train", bags_train_scenario, v, NLIM, v >= 10 ? 0 : 2);
  clembed_context *c = lim_ctx[3];
  if (!c) return;
  clembed_matrix table = filled(c, R, D, CLEMBED_F32, 1);
  EXPECT(pieces_of(c, &table) == R, "%zu pieces", pieces_of(c, &table));
  RELEASE(&table);
}

TU_CASE(init) {
  for (int v = 0; v < 12; v++)
    if (!tu_small || v % 3 == 0) same_everywhere(ctx, "init", init_scenario, v, NLIM, 2);
}

TU_CASE(positional_rope) {
  for (int v = 0; v < 6; v++) same_everywhere(ctx, "positional_rope", positional_scenario, v, NLIM, 2);
}

/* BERT's layer with its matrices in any number of buffers (under the last
 * limits the table in 21, the output and gradient in 37: the table's rows
 * gathered, the others joined), the same bits and the same errors as in one
 * buffer each. */
TU_CASE(norm_layer) {
  for (int v = 0; v < 6; v++)
    if (!tu_small || v % 2 == 0) same_everywhere(ctx, "norm_layer", norm_scenario, v, NLIM, 2);
}

TU_CASE(load) {
  for (int v = 0; v < 14; v++) /* the F32 loads split under every limit */
    if (!tu_small || v % 3 == 0)
      same_everywhere(ctx, "load", load_scenario, v, NLIM, v >= 12 || (v / 2) % 3 == 0 ? 2 : 0);
}

/* The forward, backward and steps in the GPU kernel shapes, split and not. */
TU_CASE(gpu_shapes) {
  clembed_context *saved[NLIM];
  memcpy(saved, lim_ctx, sizeof saved);
  clembed_context *g = limited(NULL, "gpu");
  for (int l = 0; l < NLIM; l++) lim_ctx[l] = (l == 1 || l == 3) ? limited(LIMITS[l], "gpu") : NULL;
  if (g) {
    /* (without `full`: every other backward, step and bag forward) */
    int every = tu_full ? 1 : 2;
    for (int t = 0; t < 4; t++) same_everywhere(g, "lookup_embed gpu", embed_scenario, t * EMBED_OPTS + 3, NLIM, 2);
    for (int v = 0; v < 7; v += 2 * every) same_everywhere(g, "backward gpu", backward_scenario, v, NLIM, 2);
    for (int v = 3; v < 9; v += every) same_everywhere(g, "steps gpu", steps_scenario, v, NLIM, 2);
    same_everywhere(g, "init gpu", init_scenario, 4, NLIM, 2);
    same_everywhere(g, "rope gpu", positional_scenario, 3, NLIM, 2);
    same_everywhere(g, "norm gpu", norm_scenario, 0, 2, 2);
    for (int v = 0; v < 9; v += 2 * every) same_everywhere(g, "bags forward gpu", bags_forward_scenario, v, 3, 2);
    for (int v = 0; v < 9; v += 3) same_everywhere(g, "bags train gpu", bags_train_scenario, v, NLIM, 2);
  }
  for (int l = 0; l < NLIM; l++) clembed_context_destroy(lim_ctx[l]);
  clembed_context_destroy(g);
  memcpy(lim_ctx, saved, sizeof saved);
}

TU_CASE(limits) {
  /* below one row: the variable named, in the message and the detail */
  clembed_context *c = limited("100", NULL);
  if (c) {
    clembed_matrix m = {0};
    FAILS(c, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_create(c, R, D, CLEMBED_F32, &m)); /* 128-byte rows */
    clembed_error_detail d;
    clembed_context_error(c, &d);
    EXPECT(d.argument && !strcmp(d.argument, "CLEMBED_MAX_BUFFER_BYTES") && d.value == 100,
           "detail: %s = %lld", d.argument, (long long)d.value);
    EXPECT(strstr(clembed_context_message(c), "CLEMBED_MAX_BUFFER_BYTES=100") != NULL, "message: %s",
           clembed_context_message(c));
    EXPECT(m.buffer == NULL, "a failed create filled the matrix");
    OK(c, clembed_matrix_create(c, R, 24, CLEMBED_F32, &m)); /* rows of 96 bytes: one per buffer */
    EXPECT(pieces_of(c, &m) == R, "rows of 96 bytes under a limit of 100: %zu buffers", pieces_of(c, &m));
    clembed_matrix_release(&m);
    /* loading: the same refusal */
    clembed_file *f = NULL;
    OK(c, clembed_file_open(npy_path[0], &f));
    FAILS(c, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_load(c, f, NULL, CLEMBED_F32, &m));
    EXPECT(strstr(clembed_context_message(c), "CLEMBED_MAX_BUFFER_BYTES") != NULL, "message: %s",
           clembed_context_message(c));
    clembed_file_close(f);
    clembed_context_destroy(c);
  }
  /* malformed limits: the context is refused, naming the variable */
  const char *bad[] = {"0", "-5", "12kb", "abc", "99999999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    clembed_context *x = NULL;
    setenv("CLEMBED_MAX_BUFFER_BYTES", bad[i], 1);
    clembed_status s = clembed_context_create(NULL, &x);
    unsetenv("CLEMBED_MAX_BUFFER_BYTES");
    EXPECT(s == CLEMBED_ERR_INVALID_ARGUMENT && x == NULL &&
               strstr(clembed_last_error_message(), "CLEMBED_MAX_BUFFER_BYTES") != NULL,
           "CLEMBED_MAX_BUFFER_BYTES=%s: %s (%s)", bad[i], clembed_status_string(s), clembed_last_error_message());
    clembed_context_destroy(x);
  }
  /* a limit above the device's largest allocation changes nothing */
  c = limited("99999999999999999", NULL);
  if (c) {
    clembed_matrix m = filled(c, R, D, CLEMBED_F32, 1);
    EXPECT(pieces_of(c, &m) == 1, "a high limit split a small matrix");
    clembed_matrix_release(&m);
    clembed_context_destroy(c);
  }
}

/* ------------------------------------------------------------- registry */

static int on_oclgrind(clembed_context *c) {
  cl_device_id d = NULL;
  cl_platform_id p = NULL;
  char name[256] = "";
  clGetCommandQueueInfo(clembed_context_queue(c), CL_QUEUE_DEVICE, sizeof d, &d, NULL);
  if (d) clGetDeviceInfo(d, CL_DEVICE_PLATFORM, sizeof p, &p, NULL);
  if (p) clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof name - 1, name, NULL);
  return strstr(name, "Oclgrind") != NULL;
}

static void nap(void) {
  struct timespec t = {0, 10000000};
  nanosleep(&t, NULL);
}

static void CL_CALLBACK note_deleted(cl_mem m, void *user) {
  (void)m;
  *(volatile int *)user = 1;
}

/* Whether this implementation calls the destructor callback of a buffer that
 * a command has used, soon after its last release (Mesa 22's rusticl does not). */
static int calls_destructors(clembed_context *c) {
  static volatile int seen;
  seen = 0;
  cl_int err;
  unsigned char bytes[64] = {0};
  cl_mem b = clCreateBuffer(cl_context_of(c), CL_MEM_READ_WRITE, 64, NULL, &err);
  if (err != CL_SUCCESS) return 0;
  clEnqueueWriteBuffer(clembed_context_queue(c), b, CL_TRUE, 0, sizeof bytes, bytes, 0, NULL, NULL);
  clFinish(clembed_context_queue(c));
  clSetMemObjectDestructorCallback(b, note_deleted, (void *)&seen);
  clReleaseMemObject(b);
  for (int i = 0; i < 100 && !seen; i++) nap();
  return seen;
}

static cl_uint refcount(cl_mem m) {
  cl_uint n = 0;
  clGetMemObjectInfo(m, CL_MEM_REFERENCE_COUNT, sizeof n, &n, NULL);
  return n;
}

typedef struct worker {
  clembed_context *ctx;
  int failures;
} worker;

static void *churn(void *arg) {
  worker *w = arg;
  for (int i = 0; i < 20; i++) {
    clembed_matrix m = {0};
    float h[R * D], back[R * D];
    for (size_t k = 0; k < R * D; k++) h[k] = (float)(k + (size_t)i);
    if (clembed_matrix_create(w->ctx, R, D, CLEMBED_F32, &m) != CLEMBED_OK ||
        clembed_matrix_write(w->ctx, &m, h, CLEMBED_F32) != CLEMBED_OK ||
        clembed_matrix_read(w->ctx, &m, back, CLEMBED_F32) != CLEMBED_OK || memcmp(h, back, sizeof h))
      w->failures++;
    clembed_matrix_release(&m);
  }
  return NULL;
}

TU_CASE(registry) {
  clembed_context *c = lim_ctx[1];
  if (!c) return;
  /* copies share the pieces; releasing one copy releases every piece */
  clembed_matrix m = filled(c, R, D, CLEMBED_F32, 4), copy = m;
  clembed_matrix p[4];
  size_t first[4], n = 0;
  OK(c, clembed_matrix_pieces(c, &m, 4, p, first, &n));
  EXPECT(n == 3, "%zu pieces", n);
  clRetainMemObject(p[1].buffer); /* watched */
  EXPECT(refcount(p[1].buffer) == 2, "piece 1 held by the matrix: %u references", refcount(p[1].buffer));
  clembed_matrix_release(&copy);
  EXPECT(refcount(p[1].buffer) == 1, "after release: %u references to piece 1", refcount(p[1].buffer));
  clReleaseMemObject(p[1].buffer);
  /* the first piece released by the caller: its destructor callback releases the others */
  if (calls_destructors(c)) {
    m = filled(c, R, D, CLEMBED_F32, 4);
    OK(c, clembed_matrix_pieces(c, &m, 4, p, first, &n));
    /* piece 1: the zero fill's kernel object last took piece 2 as its argument, which
     * some implementations count among its references */
    clRetainMemObject(p[1].buffer);
    OK(c, clembed_finish(c));
    clReleaseMemObject(m.buffer);
    cl_uint left = 2;
    for (int i = 0; i < 100 && (left = refcount(p[1].buffer)) != 1; i++) nap();
    EXPECT(left == 1, "after clReleaseMemObject of the first piece: %u references to piece 1", left);
    clReleaseMemObject(p[1].buffer);
  } else {
    printf("  (this implementation calls no destructor callback: clembed_matrix_release alone frees the pieces)\n");
  }
  /* a second context on the same cl_context takes the split matrix */
  m = filled(c, R, D, CLEMBED_F32, 5);
  clembed_context *c2 = NULL;
  OK(c, clembed_context_create_from_queue(clembed_context_queue(c), &c2));
  if (c2) {
    int64_t h[N];
    token_ids(h, N, R, 2);
    clembed_ids ids = ids_of(c2, h, N);
    clembed_matrix o1 = {0}, o2 = {0};
    OK(c2, clembed_matrix_create(c2, N, D, CLEMBED_F32, &o2));
    OK(c, clembed_matrix_create(c, N, D, CLEMBED_F32, &o1));
    OK(c2, clembed_lookup(c2, &m, &ids, &o2, 0, NULL, NULL));
    OK(c, clembed_lookup(c, &m, &ids, &o1, 0, NULL, NULL));
    size_t b1, b2;
    uint8_t *r1 = raw(c, &o1, &b1), *r2 = raw(c2, &o2, &b2);
    EXPECT(b1 == b2 && !memcmp(r1, r2, b1), "two contexts on one cl_context disagree");
    free(r1);
    free(r2);
    clembed_matrix_release(&o1);
    clembed_matrix_release(&o2);
    clembed_ids_release(&ids);
    clembed_context_destroy(c2);
  }
  clembed_matrix_release(&m);
  /* a matrix over a caller's own cl_mem is one buffer, whatever the limit and
   * whatever lies past it */
  cl_int err;
  float big[4 * R * D];
  for (size_t k = 0; k < 4 * R * D; k++) big[k] = (float)k;
  cl_mem own = clCreateBuffer(cl_context_of(c), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof big, big, &err);
  clembed_matrix u = {own, 7, 3 * R, D, D + 5, CLEMBED_F32};
  EXPECT(pieces_of(c, &u) == 1, "a caller's buffer is one piece");
  float back[3 * R * D];
  OK(c, clembed_matrix_read(c, &u, back, CLEMBED_F32));
  EXPECT(back[0] == 7.0f && back[D] == (float)(7 + D + 5), "a caller's matrix read: %g %g", (double)back[0],
         (double)back[D]);
  clReleaseMemObject(own);
  /* threads creating, writing, reading and releasing split matrices at once
   * (not on Oclgrind: its runtime's command bookkeeping is one map without a
   * lock, and two threads' queues break it) */
  if (on_oclgrind(c)) {
    printf("  (Oclgrind cannot run commands from two threads at once: the threads are left to real implementations)\n");
    return;
  }
  pthread_t th[4];
  worker w[4];
  for (int i = 0; i < 4; i++) {
    clembed_context *wc = limited(LIMITS[1], NULL);
    w[i] = (worker){wc, wc ? 0 : 1};
    if (wc) pthread_create(&th[i], NULL, churn, &w[i]);
  }
  for (int i = 0; i < 4; i++) {
    if (w[i].ctx) pthread_join(th[i], NULL);
    EXPECT(w[i].failures == 0, "thread %d: %d failures", i, w[i].failures);
    clembed_context_destroy(w[i].ctx);
  }
}

int main(int argc, char **argv) {
  tu_suite s = {"test_split", 1, setup, teardown, 900};
  return tu_main(argc, argv, s);
}
