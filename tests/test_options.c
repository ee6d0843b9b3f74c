/* Option structs that grow (include/clembed.h, "Option structs"): every call
 * reads a caller's struct through its struct_size. Each case is named;
 * `test_options NAME` runs one.
 * - the sizes: clembed_struct_size, every _defaults() (and the structs inside);
 * - refusals: a struct_size of 0, cutting a field, past this version's sizeof,
 *   a struct inside another or an array element that disagrees, for every call
 *   that takes one (CLEMBED_ERR_INVALID_ARGUMENT naming the argument);
 * - an older caller: a struct that ends before this version's last fields,
 *   allocated with exactly its size (ASan and valgrind see any read past it),
 *   is read that far and the rest takes the defaults; the same bytes with
 *   fields set past struct_size change nothing;
 * - a caller of clembed 0.3 (structs without struct_size, their first bytes a
 *   float, a double, an enum or a pointer), each allocated with exactly its
 *   0.3 size: refused, never read past;
 * - clembed_struct_read, for libraries built on clembed. */
#include "test_util.h"

#include <stddef.h>

#define INV CLEMBED_ERR_INVALID_ARGUMENT
#define END(T, f) (offsetof(T, f) + sizeof(((T *)0)->f))

/* The call failed with `code`, its detail naming `arg` (and index, unless -2). */
#define REFUSED(ctx, arg, idx, call)                                                                        \
  do {                                                                                                      \
    clembed_status s_ = (call);                                                                             \
    clembed_error_detail d_;                                                                                \
    clembed_context_error(ctx, &d_);                                                                        \
    EXPECT(s_ == INV && !strcmp(d_.argument, arg) && ((idx) == -2 || d_.index == (idx)),                    \
           "%s -> %s, argument '%s' index %lld (expected INVALID_ARGUMENT naming '%s'): %s", #call,          \
           clembed_status_string(s_), d_.argument, (long long)d_.index, arg, clembed_context_message(ctx));  \
  } while (0)

/* A copy of `n` bytes of `src` in an allocation of exactly n bytes, its
 * struct_size (the first size_t) set to `size`. */
static void *exact(const void *src, size_t n, size_t size) {
  unsigned char *p = malloc(n);
  memcpy(p, src, n);
  memcpy(p, &size, sizeof size);
  return p;
}

/* ------------------------------------------------------------- a fixture */

enum { V = 8, D = 4, N = 5, NB = 2 };
static const int32_t IDS[N] = {3, 1, 3, 7, 0};
static const int32_t OFFS[NB + 1] = {0, 2, N};

typedef struct fx {
  clembed_matrix table, out, grad, gtab, pos, cs, bout, bgrad, bout2;
  clembed_ids ids, offs;
  float W[V * D];
} fx;

/* table[v][c] = 1 + v + c / 8 (no row is zero) */
static void fx_make(clembed_context *ctx, fx *f) {
  memset(f, 0, sizeof *f);
  for (int v = 0; v < V; v++)
    for (int c = 0; c < D; c++) f->W[v * D + c] = 1.0f + (float)v + (float)c / 8.0f;
  float g[N * D];
  for (int i = 0; i < N * D; i++) g[i] = 0.25f * (float)(i % 7) - 0.5f;
  OK(ctx, clembed_matrix_create(ctx, V, D, CLEMBED_F32, &f->table));
  OK(ctx, clembed_matrix_write(ctx, &f->table, f->W, CLEMBED_F32));
  OK(ctx, clembed_matrix_create(ctx, N, D, CLEMBED_F32, &f->out));
  OK(ctx, clembed_matrix_create(ctx, N, D, CLEMBED_F32, &f->grad));
  OK(ctx, clembed_matrix_write(ctx, &f->grad, g, CLEMBED_F32));
  OK(ctx, clembed_matrix_create(ctx, V, D, CLEMBED_F32, &f->gtab));
  OK(ctx, clembed_matrix_create(ctx, 6, D, CLEMBED_F32, &f->pos));
  OK(ctx, clembed_matrix_create(ctx, 6, D, CLEMBED_F32, &f->cs));
  OK(ctx, clembed_matrix_create(ctx, NB, D, CLEMBED_F32, &f->bout));
  OK(ctx, clembed_matrix_create(ctx, NB, 2 * D, CLEMBED_F32, &f->bout2));
  OK(ctx, clembed_matrix_create(ctx, NB, D, CLEMBED_F32, &f->bgrad));
  OK(ctx, clembed_matrix_write(ctx, &f->bgrad, g, CLEMBED_F32));
  OK(ctx, clembed_ids_create(ctx, IDS, N, CLEMBED_I32, &f->ids));
  OK(ctx, clembed_ids_create(ctx, OFFS, NB + 1, CLEMBED_I32, &f->offs));
}

static void fx_release(fx *f) {
  clembed_matrix *m[] = {&f->table, &f->out, &f->grad, &f->gtab, &f->pos, &f->cs, &f->bout, &f->bout2, &f->bgrad};
  for (size_t k = 0; k < sizeof m / sizeof *m; k++) clembed_matrix_release(m[k]);
  clembed_ids_release(&f->ids);
  clembed_ids_release(&f->offs);
}

static void read_into(clembed_context *ctx, const clembed_matrix *m, float *h) {
  OK(ctx, clembed_matrix_read(ctx, m, h, CLEMBED_F32));
}

static int same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof *a); }

/* ------------------------------------------------------------------ sizes */

TU_CASE(sizes_and_defaults) {
  (void)ctx;
  const struct {
    clembed_struct_type t;
    size_t size;
  } S[] = {{CLEMBED_STRUCT_SINUSOID, sizeof(clembed_sinusoid)},
           {CLEMBED_STRUCT_NORM, sizeof(clembed_norm)},
           {CLEMBED_STRUCT_EMBED_OPTIONS, sizeof(clembed_embed_options)},
           {CLEMBED_STRUCT_EMBED_GRADS, sizeof(clembed_embed_grads)},
           {CLEMBED_STRUCT_BACKWARD_OPTIONS, sizeof(clembed_backward_options)},
           {CLEMBED_STRUCT_OPTIMIZER, sizeof(clembed_optimizer)},
           {CLEMBED_STRUCT_ROPE, sizeof(clembed_rope)},
           {CLEMBED_STRUCT_BAG_OPTIONS, sizeof(clembed_bag_options)},
           {CLEMBED_STRUCT_BAG_FEATURE, sizeof(clembed_bag_feature)}};
  for (size_t k = 0; k < sizeof S / sizeof *S; k++)
    EXPECT(clembed_struct_size(S[k].t) == S[k].size, "clembed_struct_size(%d) = %zu, sizeof %zu", (int)S[k].t,
           clembed_struct_size(S[k].t), S[k].size);
  EXPECT(clembed_struct_size((clembed_struct_type)99) == 0, "an unknown type has a size");
  clembed_embed_options eo = clembed_embed_defaults();
  clembed_bag_feature bf = clembed_bag_feature_defaults();
  EXPECT(eo.struct_size == sizeof eo && eo.sinusoid.struct_size == sizeof eo.sinusoid &&
             eo.norm.struct_size == sizeof eo.norm && eo.padding_keeps_row == 0,
         "clembed_embed_defaults: sizes %zu %zu %zu, padding_keeps_row %d", eo.struct_size, eo.sinusoid.struct_size,
         eo.norm.struct_size, eo.padding_keeps_row);
  EXPECT(clembed_sinusoid_defaults().struct_size == sizeof(clembed_sinusoid) &&
             clembed_sinusoid_defaults().base == 10000.0,
         "clembed_sinusoid_defaults");
  EXPECT(clembed_norm_defaults().struct_size == sizeof(clembed_norm) && clembed_norm_defaults().eps == 1e-5f,
         "clembed_norm_defaults");
  EXPECT(clembed_embed_grads_defaults().struct_size == sizeof(clembed_embed_grads) &&
             !clembed_embed_grads_defaults().table,
         "clembed_embed_grads_defaults");
  EXPECT(clembed_backward_defaults().struct_size == sizeof(clembed_backward_options), "clembed_backward_defaults");
  for (int k = 0; k < 4; k++)
    EXPECT(clembed_optimizer_defaults((clembed_optimizer_kind)k).struct_size == sizeof(clembed_optimizer),
           "clembed_optimizer_defaults(%d)", k);
  EXPECT(clembed_rope_defaults().struct_size == sizeof(clembed_rope), "clembed_rope_defaults");
  EXPECT(clembed_bag_defaults().struct_size == sizeof(clembed_bag_options), "clembed_bag_defaults");
  EXPECT(bf.struct_size == sizeof bf && bf.options.struct_size == sizeof bf.options && !bf.table && !bf.ids,
         "clembed_bag_feature_defaults");
}

/* -------------------------------------------------------------- refusals */

/* Every call that takes an option struct, with opt's struct_size `size`. */
static void every_call_refuses(clembed_context *ctx, fx *f, size_t size) {
  clembed_embed_options eo = clembed_embed_defaults();
  eo.struct_size = size;
  REFUSED(ctx, "opt", -1, clembed_embed(ctx, &f->table, &f->ids, &eo, &f->out, 0, NULL, NULL));
  clembed_embed_grads g = clembed_embed_grads_defaults();
  g.table = &f->gtab;
  REFUSED(ctx, "opt", -1, clembed_embed_backward(ctx, &f->grad, &f->table, &f->ids, &eo, &g, 0, NULL, NULL));
  eo.struct_size = sizeof eo;
  g.struct_size = size;
  REFUSED(ctx, "grads", -1, clembed_embed_backward(ctx, &f->grad, &f->table, &f->ids, &eo, &g, 0, NULL, NULL));
  clembed_sinusoid s = clembed_sinusoid_defaults();
  s.struct_size = size;
  REFUSED(ctx, "s", -1, clembed_positional(ctx, &s, 0, &f->pos, 0, NULL, NULL));
  clembed_backward_options bo = clembed_backward_defaults();
  bo.struct_size = size;
  REFUSED(ctx, "opt", -1, clembed_backward(ctx, &f->grad, &f->ids, &bo, &f->gtab, 0, NULL, NULL));
  REFUSED(ctx, "opt", -1, clembed_sgd_update(ctx, &f->grad, &f->ids, 0.1f, &bo, &f->gtab, 0, NULL, NULL));
  clembed_optimizer o = clembed_optimizer_defaults(CLEMBED_SGD);
  REFUSED(ctx, "opt", -1, clembed_optimizer_step(ctx, &f->grad, &f->ids, &bo, &o, &f->gtab, 0, NULL, NULL));
  o.struct_size = size;
  REFUSED(ctx, "optimizer", -1, clembed_optimizer_step(ctx, &f->grad, &f->ids, NULL, &o, &f->gtab, 0, NULL, NULL));
  clembed_rope r = clembed_rope_defaults();
  r.head_dim = D;
  r.struct_size = size;
  REFUSED(ctx, "r", -1, clembed_rope_cache(ctx, &r, 0, &f->cs, 0, NULL, NULL));
  REFUSED(ctx, "r", -1, clembed_rope_apply(ctx, &r, &f->out, NULL, 0, 0, 0, &f->out, 0, NULL, NULL));
  clembed_bag_options b = clembed_bag_defaults();
  b.struct_size = size;
  REFUSED(ctx, "opt", -1, clembed_embedding_bag(ctx, &f->table, &f->ids, &f->offs, &b, &f->bout, 0, NULL, NULL));
  REFUSED(ctx, "opt", -1,
          clembed_bag_backward(ctx, &f->bgrad, &f->ids, &f->offs, &b, NULL, &f->gtab, NULL, 0, NULL, NULL));
  clembed_optimizer so = clembed_optimizer_defaults(CLEMBED_SGD);
  REFUSED(ctx, "opt", -1,
          clembed_bag_optimizer_step(ctx, &f->bgrad, &f->ids, &f->offs, &b, &so, &f->gtab, 0, NULL, NULL));
  so.struct_size = size;
  REFUSED(ctx, "o", -1,
          clembed_bag_optimizer_step(ctx, &f->bgrad, &f->ids, &f->offs, NULL, &so, &f->gtab, 0, NULL, NULL));
  clembed_bag_feature ft[2] = {clembed_bag_feature_defaults(), clembed_bag_feature_defaults()};
  for (int k = 0; k < 2; k++) {
    ft[k].table = &f->gtab;
    ft[k].ids = &f->ids;
    ft[k].offsets = &f->offs;
  }
  ft[0].struct_size = ft[1].struct_size = size;
  REFUSED(ctx, "features", 0, clembed_embedding_bags(ctx, ft, 2, &f->bout2, 0, NULL, NULL));
  clembed_optimizer os[2] = {clembed_optimizer_defaults(CLEMBED_SGD), clembed_optimizer_defaults(CLEMBED_SGD)};
  REFUSED(ctx, "features", 0, clembed_bags_optimizer_step(ctx, ft, 2, &f->bout2, os, 0, NULL, NULL));
  ft[0].struct_size = ft[1].struct_size = sizeof ft[0];
  os[0].struct_size = os[1].struct_size = size;
  REFUSED(ctx, "o", 0, clembed_bags_optimizer_step(ctx, ft, 2, &f->bout2, os, 0, NULL, NULL));
  /* structs inside others */
  eo = clembed_embed_defaults();
  eo.norm.struct_size = size;
  REFUSED(ctx, "norm", -1, clembed_embed(ctx, &f->table, &f->ids, &eo, &f->out, 0, NULL, NULL));
  eo = clembed_embed_defaults();
  eo.sinusoid.struct_size = size;
  REFUSED(ctx, "sinusoid", -1, clembed_embed(ctx, &f->table, &f->ids, &eo, &f->out, 0, NULL, NULL));
  ft[1].options.struct_size = size;
  REFUSED(ctx, "options", 1, clembed_embedding_bags(ctx, ft, 2, &f->bout2, 0, NULL, NULL));
}

TU_CASE(wrong_sizes_are_refused) {
  fx f;
  fx_make(ctx, &f);
  /* 0 (zeroed, or filled by hand), 1, a size inside the first field, a size
   * cutting a pointer in two, past this version's sizeof, huge */
  const size_t sizes[] = {0, 1, sizeof(size_t) + 2, sizeof(size_t) + 1, 4096, (size_t)1 << 40, (size_t)-1};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) every_call_refuses(ctx, &f, sizes[k]);
  /* each struct one past its sizeof (a caller built against a later version) */
  clembed_embed_options eo = clembed_embed_defaults();
  eo.struct_size = sizeof eo + 8;
  REFUSED(ctx, "opt", -1, clembed_embed(ctx, &f.table, &f.ids, &eo, &f.out, 0, NULL, NULL));
  clembed_error_detail d;
  clembed_context_error(ctx, &d);
  EXPECT(d.value == (int64_t)(sizeof eo + 8) && d.index == -1 && !strcmp(d.operation, "clembed_embed"),
         "the detail: %s %s %lld %lld", d.operation, d.argument, (long long)d.index, (long long)d.value);
  EXPECT(strstr(clembed_context_message(ctx), "opt.struct_size") && strstr(clembed_context_message(ctx), "later"),
         "the message: %s", clembed_context_message(ctx));
  /* a size inside a field of the middle (scale's 4 bytes cut in two) */
  eo.struct_size = offsetof(clembed_embed_options, scale) + 2;
  REFUSED(ctx, "opt", -1, clembed_embed(ctx, &f.table, &f.ids, &eo, &f.out, 0, NULL, NULL));
  eo.struct_size = offsetof(clembed_embed_options, position_table) + 3;
  REFUSED(ctx, "opt", -1, clembed_embed(ctx, &f.table, &f.ids, &eo, &f.out, 0, NULL, NULL));
  /* a struct_size that ends inside the sinusoid or the norm (a struct inside is whole or absent) */
  eo.struct_size = offsetof(clembed_embed_options, norm) + sizeof(size_t) + 4;
  REFUSED(ctx, "opt", -1, clembed_embed(ctx, &f.table, &f.ids, &eo, &f.out, 0, NULL, NULL));
  /* the elements of an array disagree */
  clembed_bag_feature ft[3] = {clembed_bag_feature_defaults(), clembed_bag_feature_defaults(),
                               clembed_bag_feature_defaults()};
  for (int k = 0; k < 3; k++) {
    ft[k].table = &f.table;
    ft[k].ids = &f.ids;
    ft[k].offsets = &f.offs;
  }
  clembed_matrix out3;
  OK(ctx, clembed_matrix_create(ctx, NB, 3 * D, CLEMBED_F32, &out3));
  OK(ctx, clembed_embedding_bags(ctx, ft, 3, &out3, 0, NULL, NULL));
  ft[2].struct_size = END(clembed_bag_feature, offsets);
  REFUSED(ctx, "features", 2, clembed_embedding_bags(ctx, ft, 3, &out3, 0, NULL, NULL));
  /* a feature's options longer than the feature leaves them */
  ft[2].struct_size = sizeof ft[2];
  clembed_bag_feature *old = exact(&ft[0], offsetof(clembed_bag_feature, options) + END(clembed_bag_options, mode),
                                   offsetof(clembed_bag_feature, options) + END(clembed_bag_options, mode));
  REFUSED(ctx, "options", 0, clembed_embedding_bags(ctx, old, 1, &f.bout, 0, NULL, NULL));
  free(old);
  clembed_matrix_release(&out3);
  OK(ctx, clembed_finish(ctx));
  fx_release(&f);
}

/* ------------------------------------------------------- an older caller */

TU_CASE(older_embed_options_read_so_far) {
  fx f;
  fx_make(ctx, &f);
  float want[N * D], got[N * D];
  /* a caller without padding_keeps_row (the fields up to norm): id 3 is padding */
  clembed_embed_options full = clembed_embed_defaults();
  full.padding_idx = 3;
  full.padding_keeps_row = 1; /* past the older caller's struct: must not be read */
  size_t P = END(clembed_embed_options, norm);
  clembed_embed_options *o = exact(&full, P, P);
  OK(ctx, clembed_embed(ctx, &f.table, &f.ids, o, &f.out, 0, NULL, NULL));
  read_into(ctx, &f.out, got);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < D; c++) want[i * D + c] = IDS[i] == 3 ? 0.0f : f.W[IDS[i] * D + c];
  EXPECT(same(got, want, N * D), "a struct ending at norm: padding_keeps_row was read past its end");
  free(o);
  /* the same bytes in a whole struct, struct_size the older one's */
  full.struct_size = P;
  OK(ctx, clembed_embed(ctx, &f.table, &f.ids, &full, &f.out, 0, NULL, NULL));
  read_into(ctx, &f.out, got);
  EXPECT(same(got, want, N * D), "struct_size %zu: a field past it was read", P);
  /* and this version's whole struct: the stored row */
  full.struct_size = sizeof full;
  OK(ctx, clembed_embed(ctx, &f.table, &f.ids, &full, &f.out, 0, NULL, NULL));
  read_into(ctx, &f.out, got);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < D; c++) want[i * D + c] = f.W[IDS[i] * D + c];
  EXPECT(same(got, want, N * D), "padding_keeps_row 1 in a whole struct: not the stored rows");

  /* a caller from before BERT's layer (up to dropout_seed), scale 2; past it a
   * norm that would be refused if it were read */
  full = clembed_embed_defaults();
  full.scale = 2.0f;
  full.norm.kind = (clembed_norm_kind)7;
  full.norm.struct_size = 3;
  P = END(clembed_embed_options, dropout_seed);
  o = exact(&full, P, P);
  OK(ctx, clembed_embed(ctx, &f.table, &f.ids, o, &f.out, 0, NULL, NULL));
  read_into(ctx, &f.out, got);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < D; c++) want[i * D + c] = 2.0f * f.W[IDS[i] * D + c];
  EXPECT(same(got, want, N * D), "a struct ending at dropout_seed: not 2 * the rows");
  /* the backward of the whole layer reads it the same way */
  clembed_embed_grads g = clembed_embed_grads_defaults();
  g.table = &f.gtab;
  OK(ctx, clembed_embed_backward(ctx, &f.grad, &f.table, &f.ids, o, &g, 0, NULL, NULL));
  free(o);
  /* a norm that ends at its kind (an older norm): weight and bias past it are not read */
  full = clembed_embed_defaults();
  full.norm.kind = CLEMBED_NORM_LAYER;
  full.norm.weight = &f.table; /* V x D: refused if it were read */
  full.norm.struct_size = END(clembed_norm, kind);
  OK(ctx, clembed_embed(ctx, &f.table, &f.ids, &full, &f.out, 0, NULL, NULL));
  read_into(ctx, &f.out, want);
  full.norm = clembed_norm_defaults();
  full.norm.kind = CLEMBED_NORM_LAYER;
  OK(ctx, clembed_embed(ctx, &f.table, &f.ids, &full, &f.out, 0, NULL, NULL));
  read_into(ctx, &f.out, got);
  EXPECT(same(got, want, N * D), "a norm ending at kind: not the norm without weight and bias");

  /* a caller from before remap: its sizeof ends at padding_keeps_row's tail
   * padding; a remap past it that would prune every id if it were read */
  int64_t pruned_all[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  clembed_ids rm = {0};
  OK(ctx, clembed_ids_create(ctx, pruned_all, 8, CLEMBED_I64, &rm));
  full = clembed_embed_defaults();
  full.remap = &rm;
  P = offsetof(clembed_embed_options, remap);
  o = exact(&full, P, P);
  OK(ctx, clembed_embed(ctx, &f.table, &f.ids, o, &f.out, 0, NULL, NULL));
  read_into(ctx, &f.out, got);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < D; c++) want[i * D + c] = f.W[IDS[i] * D + c];
  EXPECT(same(got, want, N * D), "a struct ending before remap: the remap past it was read");
  free(o);
  full.struct_size = sizeof full; /* this version's: every id pruned, zero rows */
  OK(ctx, clembed_embed(ctx, &f.table, &f.ids, &full, &f.out, 0, NULL, NULL));
  read_into(ctx, &f.out, got);
  memset(want, 0, sizeof want);
  EXPECT(same(got, want, N * D), "the whole struct's remap (every id pruned): not zero rows");
  clembed_ids_release(&rm);
  OK(ctx, clembed_finish(ctx));
  fx_release(&f);
}

TU_CASE(older_other_structs_read_so_far) {
  fx f;
  fx_make(ctx, &f);
  float want[V * D], got[V * D];
  /* backward options up to accumulate: the dropout past them is not read */
  clembed_backward_options bo = clembed_backward_defaults();
  bo.accumulate = 0;
  OK(ctx, clembed_backward(ctx, &f.grad, &f.ids, &bo, &f.gtab, 0, NULL, NULL));
  read_into(ctx, &f.gtab, want);
  bo.dropout = 0.5f;
  bo.dropout_seed = 9;
  size_t P = END(clembed_backward_options, accumulate);
  clembed_backward_options *b = exact(&bo, P, P);
  OK(ctx, clembed_backward(ctx, &f.grad, &f.ids, b, &f.gtab, 0, NULL, NULL));
  read_into(ctx, &f.gtab, got);
  EXPECT(same(got, want, V * D), "backward options ending at accumulate: dropout was read");
  free(b);

  /* an SGD optimizer up to weight_decay (no step, no states) */
  clembed_optimizer op = clembed_optimizer_defaults(CLEMBED_SGD);
  op.learning_rate = 0.5f;
  op.state = &f.table; /* past the older struct: refused for SGD if it were read */
  P = END(clembed_optimizer, weight_decay);
  clembed_optimizer *oo = exact(&op, P, P);
  clembed_matrix t2;
  OK(ctx, clembed_matrix_create(ctx, V, D, CLEMBED_F32, &t2));
  OK(ctx, clembed_matrix_write(ctx, &t2, f.W, CLEMBED_F32));
  OK(ctx, clembed_optimizer_step(ctx, &f.grad, &f.ids, NULL, oo, &t2, 0, NULL, NULL));
  read_into(ctx, &t2, got);
  OK(ctx, clembed_matrix_write(ctx, &t2, f.W, CLEMBED_F32));
  OK(ctx, clembed_sgd_update(ctx, &f.grad, &f.ids, 0.5f, NULL, &t2, 0, NULL, NULL));
  read_into(ctx, &t2, want);
  EXPECT(same(got, want, V * D), "an optimizer ending at weight_decay: not the SGD step");
  /* an ADAGRAD one up to weight_decay has no state (its default): refused naming it */
  op = clembed_optimizer_defaults(CLEMBED_ADAGRAD);
  op.state = &f.gtab;
  free(oo);
  oo = exact(&op, P, P);
  REFUSED(ctx, "state", -1, clembed_optimizer_step(ctx, &f.grad, &f.ids, NULL, oo, &t2, 0, NULL, NULL));
  free(oo);
  clembed_matrix_release(&t2);

  /* rope up to layout: scaling LINEAR x4 past it is not read */
  clembed_rope r = clembed_rope_defaults();
  r.head_dim = D;
  OK(ctx, clembed_rope_cache(ctx, &r, 100, &f.cs, 0, NULL, NULL));
  read_into(ctx, &f.cs, want);
  r.scaling = CLEMBED_ROPE_SCALING_LINEAR;
  r.factor = 4.0;
  OK(ctx, clembed_rope_cache(ctx, &r, 100, &f.cs, 0, NULL, NULL));
  float scaled[6 * D];
  read_into(ctx, &f.cs, scaled);
  EXPECT(!same(scaled, want, 6 * D), "LINEAR x4 changes nothing: the case checks nothing");
  P = END(clembed_rope, layout);
  clembed_rope *rr = exact(&r, P, P);
  OK(ctx, clembed_rope_cache(ctx, rr, 100, &f.cs, 0, NULL, NULL));
  read_into(ctx, &f.cs, got);
  EXPECT(same(got, want, 6 * D), "rope ending at layout: its scaling was read");
  free(rr);

  /* a sinusoid up to exponent: layout HALVES past it is not read */
  clembed_sinusoid s = clembed_sinusoid_defaults();
  OK(ctx, clembed_positional(ctx, &s, 3, &f.pos, 0, NULL, NULL));
  read_into(ctx, &f.pos, want);
  s.layout = CLEMBED_LAYOUT_HALVES;
  P = END(clembed_sinusoid, exponent);
  clembed_sinusoid *ss = exact(&s, P, P);
  OK(ctx, clembed_positional(ctx, ss, 3, &f.pos, 0, NULL, NULL));
  read_into(ctx, &f.pos, got);
  EXPECT(same(got, want, 6 * D), "a sinusoid ending at exponent: its layout was read");
  free(ss);

  /* bag options up to padding_idx: per_sample_weights past them (a matrix
   * that would be refused) are not read */
  clembed_bag_options bg = clembed_bag_defaults();
  OK(ctx, clembed_embedding_bag(ctx, &f.table, &f.ids, &f.offs, &bg, &f.bout, 0, NULL, NULL));
  read_into(ctx, &f.bout, want);
  bg.per_sample_weights = &f.table;
  P = END(clembed_bag_options, padding_idx);
  clembed_bag_options *bb = exact(&bg, P, P);
  OK(ctx, clembed_embedding_bag(ctx, &f.table, &f.ids, &f.offs, bb, &f.bout, 0, NULL, NULL));
  read_into(ctx, &f.bout, got);
  EXPECT(same(got, want, NB * D), "bag options ending at padding_idx: per_sample_weights was read");
  free(bb);

  /* an array of older features (their options up to padding_idx), strided by
   * their struct_size, in an allocation of exactly two of them */
  size_t FS = offsetof(clembed_bag_feature, options) + END(clembed_bag_options, padding_idx);
  unsigned char *arr = malloc(2 * FS);
  for (int k = 0; k < 2; k++) {
    clembed_bag_feature ft = clembed_bag_feature_defaults();
    ft.struct_size = FS;
    ft.table = &f.table;
    ft.ids = &f.ids;
    ft.offsets = &f.offs;
    ft.options.struct_size = END(clembed_bag_options, padding_idx);
    ft.options.mode = k ? CLEMBED_BAG_MEAN : CLEMBED_BAG_SUM;
    memcpy(arr + k * FS, &ft, FS);
  }
  OK(ctx, clembed_embedding_bags(ctx, (const clembed_bag_feature *)arr, 2, &f.bout2, 0, NULL, NULL));
  float both[NB * 2 * D], one[NB * D];
  read_into(ctx, &f.bout2, both);
  int bad = 0;
  for (int k = 0; k < 2; k++) {
    clembed_bag_options m = clembed_bag_defaults();
    m.mode = k ? CLEMBED_BAG_MEAN : CLEMBED_BAG_SUM;
    OK(ctx, clembed_embedding_bag(ctx, &f.table, &f.ids, &f.offs, &m, &f.bout, 0, NULL, NULL));
    read_into(ctx, &f.bout, one);
    for (int r2 = 0; r2 < NB; r2++)
      for (int c = 0; c < D; c++) bad += both[r2 * 2 * D + k * D + c] != one[r2 * D + c];
  }
  EXPECT(!bad, "older features strided by their struct_size: %d values differ from one feature's bags", bad);
  /* their SGD steps, the optimizers older too (strided by theirs) */
  size_t OS = END(clembed_optimizer, weight_decay);
  unsigned char *oarr = malloc(2 * OS);
  for (int k = 0; k < 2; k++) {
    clembed_optimizer x = clembed_optimizer_defaults(CLEMBED_SGD);
    x.struct_size = OS;
    memcpy(oarr + k * OS, &x, OS);
  }
  clembed_matrix g2;
  OK(ctx, clembed_matrix_create(ctx, NB, 2 * D, CLEMBED_F32, &g2));
  OK(ctx, clembed_bags_optimizer_step(ctx, (const clembed_bag_feature *)arr, 2, &g2,
                                      (const clembed_optimizer *)oarr, 0, NULL, NULL));
  free(oarr);
  free(arr);
  clembed_matrix_release(&g2);

  /* embed grads up to table: a position_table gradient past it (refused: the
   * forward has no positions) is not read */
  clembed_embed_grads gr = clembed_embed_grads_defaults();
  gr.table = &f.gtab;
  gr.position_table = &f.pos;
  REFUSED(ctx, "grads.position_table", -1,
          clembed_embed_backward(ctx, &f.grad, &f.table, &f.ids, NULL, &gr, 0, NULL, NULL));
  P = END(clembed_embed_grads, table);
  clembed_embed_grads *gg = exact(&gr, P, P);
  OK(ctx, clembed_embed_backward(ctx, &f.grad, &f.table, &f.ids, NULL, gg, 0, NULL, NULL));
  free(gg);
  OK(ctx, clembed_finish(ctx));
  fx_release(&f);
}

/* --------------------------------------------------- a caller of clembed 0.3 */

/* The option structs as clembed 0.3 declared them (no struct_size). */
typedef struct v03_sinusoid {
  double base;
  int exponent, layout;
} v03_sinusoid;
typedef struct v03_norm {
  int kind;
  const clembed_matrix *weight, *bias;
  float eps;
} v03_norm;
typedef struct v03_embed_options {
  float scale;
  int policy;
  int64_t padding_idx;
  int positions;
  v03_sinusoid sinusoid;
  const clembed_matrix *position_table;
  size_t seq_len, position_offset;
  const clembed_ids *sequence_offsets;
  float dropout;
  uint64_t dropout_seed;
  const clembed_matrix *segment_table;
  const clembed_ids *segment_ids;
  v03_norm norm;
} v03_embed_options;
typedef struct v03_backward_options {
  float scale;
  int policy;
  int64_t padding_idx;
  int scale_grad_by_freq, deterministic, accumulate;
  size_t seq_len, position_offset;
  const clembed_ids *sequence_offsets;
  clembed_matrix *position_grad;
  float dropout;
  uint64_t dropout_seed;
} v03_backward_options;
typedef struct v03_optimizer {
  int kind;
  float learning_rate, eps, beta1, beta2, weight_decay;
  uint64_t step;
  clembed_matrix *state, *state2;
} v03_optimizer;
typedef struct v03_rope {
  double base;
  size_t head_dim, rotary_dim;
  int layout, scaling;
  double factor;
  size_t original_max_position;
  double low_freq_factor, high_freq_factor, beta_fast, beta_slow, attention_factor;
} v03_rope;
typedef struct v03_bag_options {
  int mode, policy;
  int64_t padding_idx;
  const clembed_matrix *per_sample_weights;
  clembed_ids *max_rows;
} v03_bag_options;
typedef struct v03_bag_feature {
  clembed_matrix *table;
  const clembed_ids *ids, *offsets;
  v03_bag_options options;
} v03_bag_feature;
typedef struct v03_embed_grads {
  clembed_matrix *table, *position_table, *segment_table, *norm_weight, *norm_bias;
} v03_embed_grads;

/* A 0.3 struct in an allocation of exactly its size. */
#define V03(T, value) ((const void *)exact_v03(&(value), sizeof(T)))
static void *exact_v03(const void *src, size_t n) {
  void *p = malloc(n);
  memcpy(p, src, n);
  return p;
}

TU_CASE(structs_of_0_3_are_refused) {
  fx f;
  fx_make(ctx, &f);
  const float scales[] = {1.0f, 0.5f, 2.0f, 22.627417f, 0.0f, -1.0f, 1e-30f};
  for (size_t k = 0; k < sizeof scales / sizeof *scales; k++)
    for (int pol = 0; pol < 4; pol++) {
      v03_embed_options e = {scales[k], pol, CLEMBED_NO_PADDING, 0, {10000.0, 0, 0}, NULL, 0, 0, NULL,
                             0.0f, 0, NULL, NULL, {0, NULL, NULL, 1e-5f}};
      void *p = exact_v03(&e, sizeof e);
      REFUSED(ctx, "opt", -1, clembed_embed(ctx, &f.table, &f.ids, p, &f.out, 0, NULL, NULL));
      REFUSED(ctx, "opt", -1, clembed_embed_backward(ctx, &f.grad, &f.table, &f.ids, p, NULL, 0, NULL, NULL));
      free(p);
      v03_backward_options b = {scales[k], pol, CLEMBED_NO_PADDING, 0, 1, 1, 0, 0, NULL, NULL, 0.0f, 0};
      p = exact_v03(&b, sizeof b);
      REFUSED(ctx, "opt", -1, clembed_backward(ctx, &f.grad, &f.ids, p, &f.gtab, 0, NULL, NULL));
      REFUSED(ctx, "opt", -1, clembed_sgd_update(ctx, &f.grad, &f.ids, 0.1f, p, &f.gtab, 0, NULL, NULL));
      free(p);
    }
  const float rates[] = {0.1f, 0.01f, 0.0f, 1.0f, 0.5f};
  for (int kind = 0; kind < 4; kind++)
    for (size_t k = 0; k < sizeof rates / sizeof *rates; k++) {
      v03_optimizer o = {kind, rates[k], 1e-8f, 0.9f, 0.999f, 0.0f, 1, NULL, NULL};
      void *p = exact_v03(&o, sizeof o);
      REFUSED(ctx, "optimizer", -1, clembed_optimizer_step(ctx, &f.grad, &f.ids, NULL, p, &f.gtab, 0, NULL, NULL));
      REFUSED(ctx, "o", -1,
              clembed_bag_optimizer_step(ctx, &f.bgrad, &f.ids, &f.offs, NULL, p, &f.gtab, 0, NULL, NULL));
      free(p);
    }
  const double bases[] = {10000.0, 500000.0, 1e6, 5.0, 1.0, 0.0};
  for (size_t k = 0; k < sizeof bases / sizeof *bases; k++) {
    v03_rope r = {bases[k], D, 0, 0, 0, 1.0, 8192, 1.0, 4.0, 32.0, 1.0, 0.0};
    void *p = exact_v03(&r, sizeof r);
    REFUSED(ctx, "r", -1, clembed_rope_cache(ctx, p, 0, &f.cs, 0, NULL, NULL));
    REFUSED(ctx, "r", -1, clembed_rope_apply(ctx, p, &f.out, NULL, 0, 0, 0, &f.out, 0, NULL, NULL));
    free(p);
    v03_sinusoid s = {bases[k], 0, 0};
    p = exact_v03(&s, sizeof s);
    REFUSED(ctx, "s", -1, clembed_positional(ctx, p, 0, &f.pos, 0, NULL, NULL));
    free(p);
  }
  for (int mode = 0; mode < 3; mode++)
    for (int pol = 0; pol < 4; pol++) {
      v03_bag_options b = {mode, pol, CLEMBED_NO_PADDING, NULL, NULL};
      void *p = exact_v03(&b, sizeof b);
      REFUSED(ctx, "opt", -1, clembed_embedding_bag(ctx, &f.table, &f.ids, &f.offs, p, &f.bout, 0, NULL, NULL));
      REFUSED(ctx, "opt", -1,
              clembed_bag_backward(ctx, &f.bgrad, &f.ids, &f.offs, p, NULL, &f.gtab, NULL, 0, NULL, NULL));
      free(p);
      v03_bag_feature ft[2] = {{&f.table, &f.ids, &f.offs, b}, {&f.table, &f.ids, &f.offs, b}};
      p = exact_v03(&ft, sizeof ft);
      REFUSED(ctx, "features", 0, clembed_embedding_bags(ctx, p, 2, &f.bout2, 0, NULL, NULL));
      clembed_optimizer os[2] = {clembed_optimizer_defaults(CLEMBED_SGD), clembed_optimizer_defaults(CLEMBED_SGD)};
      REFUSED(ctx, "features", 0, clembed_bags_optimizer_step(ctx, p, 2, &f.bout2, os, 0, NULL, NULL));
      free(p);
    }
  v03_embed_grads g = {&f.gtab, NULL, NULL, NULL, NULL};
  void *p = exact_v03(&g, sizeof g);
  REFUSED(ctx, "grads", -1, clembed_embed_backward(ctx, &f.grad, &f.table, &f.ids, NULL, p, 0, NULL, NULL));
  free(p);
  /* every refusal left the context usable */
  OK(ctx, clembed_embed(ctx, &f.table, &f.ids, NULL, &f.out, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
  fx_release(&f);
}

/* ---------------------------------------------------- clembed_struct_read */

TU_CASE(struct_read) {
  clembed_embed_options full = clembed_embed_defaults(), out;
  full.scale = 3.0f;
  full.padding_keeps_row = 1;
  full.norm.eps = 0.5f;
  size_t P = END(clembed_embed_options, dropout_seed);
  void *older = exact(&full, P, P);
  out = clembed_embed_defaults();
  OK(ctx, clembed_struct_read(ctx, "op", "opt", CLEMBED_STRUCT_EMBED_OPTIONS, older, &out));
  EXPECT(out.struct_size == sizeof out && out.scale == 3.0f && out.padding_keeps_row == 0 && out.norm.eps == 1e-5f &&
             out.norm.struct_size == sizeof out.norm,
         "an older struct read: size %zu scale %g padding_keeps_row %d eps %g", out.struct_size, (double)out.scale,
         out.padding_keeps_row, (double)out.norm.eps);
  free(older);
  out = clembed_embed_defaults();
  OK(ctx, clembed_struct_read(ctx, "op", "opt", CLEMBED_STRUCT_EMBED_OPTIONS, &full, &out));
  EXPECT(out.scale == 3.0f && out.padding_keeps_row == 1 && out.norm.eps == 0.5f, "a whole struct read");
  out = clembed_embed_defaults();
  OK(ctx, clembed_struct_read(ctx, "op", "opt", CLEMBED_STRUCT_EMBED_OPTIONS, NULL, &out));
  EXPECT(out.scale == 1.0f, "NULL: the defaults");
  full.struct_size = 0;
  REFUSED(ctx, "opt", -1, clembed_struct_read(ctx, "op", "opt", CLEMBED_STRUCT_EMBED_OPTIONS, &full, &out));
  clembed_error_detail d;
  clembed_context_error(ctx, &d);
  EXPECT(!strcmp(d.operation, "op"), "the operation named is '%s'", d.operation);
  REFUSED(ctx, "type", -1, clembed_struct_read(ctx, "op", "opt", (clembed_struct_type)42, &full, &out));
  REFUSED(ctx, "out", -1, clembed_struct_read(ctx, "op", "opt", CLEMBED_STRUCT_EMBED_OPTIONS, &full, NULL));
  full.struct_size = sizeof full;
  REFUSED(ctx, "out", -1, clembed_struct_read(ctx, "op", "opt", CLEMBED_STRUCT_EMBED_OPTIONS, &full, &full));
  /* no context: this thread's detail */
  full.struct_size = 5;
  EXPECT(clembed_struct_read(NULL, "op", "opt", CLEMBED_STRUCT_EMBED_OPTIONS, &full, &out) == INV,
         "no context: accepted");
  clembed_context_error(NULL, &d);
  EXPECT(d.status == INV && !strcmp(d.argument, "opt") && strstr(clembed_last_error_message(), "opt.struct_size"),
         "no context: the thread's detail '%s', message '%s'", d.argument, clembed_last_error_message());
  /* an optimizer: the fields past its struct_size from its own kind's defaults */
  clembed_optimizer o = clembed_optimizer_defaults(CLEMBED_ADAGRAD), r = clembed_optimizer_defaults(CLEMBED_SGD);
  o.learning_rate = 0.25f;
  o.struct_size = END(clembed_optimizer, learning_rate);
  OK(ctx, clembed_struct_read(ctx, "op", "o", CLEMBED_STRUCT_OPTIMIZER, &o, &r));
  EXPECT(r.kind == CLEMBED_ADAGRAD && r.learning_rate == 0.25f && r.eps == clembed_optimizer_defaults(CLEMBED_SGD).eps,
         "struct_read fills from the defaults it is given (kind %d lr %g eps %g)", (int)r.kind,
         (double)r.learning_rate, (double)r.eps);
}

int main(int argc, char **argv) {
  return tu_main(argc, argv, (tu_suite){.name = "test_options", .device = 1, .case_timeout_s = 120});
}
