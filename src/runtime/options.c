/* Reading a caller's option struct by its struct_size (options.h). The valid
 * sizes of a struct are the ends of its fields (from the first after
 * struct_size) and its sizeof: the sizeof of each earlier version is one of
 * them, because a later version only appends fields. Two rules keep that
 * true, for whoever adds a field:
 * - a field is added after the last one, never into the tail padding of the
 *   previous version's struct (where C would put it there, an unused field
 *   goes first), so an older caller's padding is never read as a field;
 * - a struct inside another (the sinusoid and the norm of
 *   clembed_embed_options) is part of its holder's layout: growing it moves
 *   the holder's later fields, and the holder's older sizes then need a
 *   reading of their own (their version's layout), not this prefix copy.
 *   The options of a clembed_bag_feature are its last field: a shorter one
 *   (an older caller's) is read as far as it goes, as here. */
#include "options.h"

#include <stdio.h>
#include <string.h>

typedef struct ce_nested {
  size_t offset;                  /* in the holder */
  const ce_struct_layout *layout; /* the struct there */
  const char *field;              /* its name, the argument its errors name */
} ce_nested;

struct ce_struct_layout {
  const char *name;     /* "clembed_embed_options" */
  const char *defaults; /* "clembed_embed_defaults()" */
  size_t size;          /* this version's sizeof */
  const size_t *ends;   /* the valid sizes, ascending: each field's end, then sizeof */
  size_t n_ends;
  const ce_nested *nested; /* the structs inside, ascending offsets */
  size_t n_nested;
};

#define END(T, f) (offsetof(T, f) + sizeof(((T *)0)->f))
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define LAYOUT(var, T, defaults_name, ends_arr, nested_arr, n_nested_) \
  const ce_struct_layout var = {#T, defaults_name, sizeof(T), ends_arr, COUNT(ends_arr), nested_arr, n_nested_}

/* ----------------------------------------------------------------- layouts */

static const size_t sinusoid_ends[] = {END(clembed_sinusoid, base), END(clembed_sinusoid, exponent),
                                       END(clembed_sinusoid, layout), sizeof(clembed_sinusoid)};
LAYOUT(ce_sinusoid_layout, clembed_sinusoid, "clembed_sinusoid_defaults()", sinusoid_ends, NULL, 0);

static const size_t norm_ends[] = {END(clembed_norm, kind), END(clembed_norm, weight), END(clembed_norm, bias),
                                   END(clembed_norm, eps), sizeof(clembed_norm)};
LAYOUT(ce_norm_layout, clembed_norm, "clembed_norm_defaults()", norm_ends, NULL, 0);

#define EO clembed_embed_options
/* remap comes after the previous version's sizeof (padding_keeps_row's end
 * rounded up to the struct's alignment), never into its tail padding; an ABI
 * where it would not (a 4-byte pointer beside 8-aligned 64-bit fields) stops
 * the build here rather than reading an older caller's padding as remap */
_Static_assert(offsetof(EO, remap) % _Alignof(EO) == 0 && offsetof(EO, remap) >= END(EO, padding_keeps_row),
               "clembed_embed_options.remap lies in the previous version's tail padding");
static const size_t embed_ends[] = {
    END(EO, scale),           END(EO, policy),          END(EO, padding_idx),   END(EO, positions),
    END(EO, sinusoid),        END(EO, position_table),  END(EO, seq_len),       END(EO, position_offset),
    END(EO, sequence_offsets), END(EO, dropout),        END(EO, dropout_seed),  END(EO, segment_table),
    END(EO, segment_ids),     END(EO, norm),            END(EO, padding_keeps_row),
    offsetof(EO, remap), /* the sizeof of the version before remap (padding_keeps_row's tail padding) */
    END(EO, remap),           sizeof(EO)};
static const ce_nested embed_nested[] = {{offsetof(EO, sinusoid), &ce_sinusoid_layout, "sinusoid"},
                                         {offsetof(EO, norm), &ce_norm_layout, "norm"}};
LAYOUT(ce_embed_options_layout, clembed_embed_options, "clembed_embed_defaults()", embed_ends, embed_nested,
       COUNT(embed_nested));
#undef EO

#define EG clembed_embed_grads
static const size_t grads_ends[] = {END(EG, table),       END(EG, position_table), END(EG, segment_table),
                                    END(EG, norm_weight), END(EG, norm_bias),      sizeof(EG)};
LAYOUT(ce_embed_grads_layout, clembed_embed_grads, "clembed_embed_grads_defaults()", grads_ends, NULL, 0);
#undef EG

#define BO clembed_backward_options
static const size_t backward_ends[] = {
    END(BO, scale),           END(BO, policy),        END(BO, padding_idx),     END(BO, scale_grad_by_freq),
    END(BO, deterministic),   END(BO, accumulate),    END(BO, seq_len),         END(BO, position_offset),
    END(BO, sequence_offsets), END(BO, position_grad), END(BO, dropout),        END(BO, dropout_seed),
    sizeof(BO)};
LAYOUT(ce_backward_options_layout, clembed_backward_options, "clembed_backward_defaults()", backward_ends, NULL, 0);
#undef BO

#define OP clembed_optimizer
static const size_t optimizer_ends[] = {END(OP, kind),         END(OP, learning_rate), END(OP, eps),
                                        END(OP, beta1),        END(OP, beta2),         END(OP, weight_decay),
                                        END(OP, step),         END(OP, state),         END(OP, state2),
                                        END(OP, stochastic_rounding), END(OP, seed),   END(OP, first_row),
                                        sizeof(OP)};
LAYOUT(ce_optimizer_layout, clembed_optimizer, "clembed_optimizer_defaults(kind)", optimizer_ends, NULL, 0);
#undef OP

#define RO clembed_rope
static const size_t rope_ends[] = {
    END(RO, base),      END(RO, head_dim),  END(RO, rotary_dim),       END(RO, layout),
    END(RO, scaling),   END(RO, factor),    END(RO, original_max_position), END(RO, low_freq_factor),
    END(RO, high_freq_factor), END(RO, beta_fast), END(RO, beta_slow), END(RO, attention_factor),
    sizeof(RO)};
LAYOUT(ce_rope_layout, clembed_rope, "clembed_rope_defaults()", rope_ends, NULL, 0);
#undef RO

#define BG clembed_bag_options
static const size_t bag_ends[] = {END(BG, mode),     END(BG, policy),   END(BG, padding_idx),
                                  END(BG, per_sample_weights), END(BG, max_rows), END(BG, remap), sizeof(BG)};
LAYOUT(ce_bag_options_layout, clembed_bag_options, "clembed_bag_defaults()", bag_ends, NULL, 0);
#undef BG

#define BF clembed_bag_feature
static const size_t feature_ends[] = {END(BF, table), END(BF, ids), END(BF, offsets), END(BF, options), sizeof(BF)};
static const ce_nested feature_nested[] = {{offsetof(BF, options), &ce_bag_options_layout, "options"}};
LAYOUT(ce_bag_feature_layout, clembed_bag_feature, "clembed_bag_feature_defaults()", feature_ends, feature_nested,
       COUNT(feature_nested));
#undef BF

const ce_struct_layout *ce_struct_layout_of(clembed_struct_type type) {
  switch (type) {
  case CLEMBED_STRUCT_SINUSOID: return &ce_sinusoid_layout;
  case CLEMBED_STRUCT_NORM: return &ce_norm_layout;
  case CLEMBED_STRUCT_EMBED_OPTIONS: return &ce_embed_options_layout;
  case CLEMBED_STRUCT_EMBED_GRADS: return &ce_embed_grads_layout;
  case CLEMBED_STRUCT_BACKWARD_OPTIONS: return &ce_backward_options_layout;
  case CLEMBED_STRUCT_OPTIMIZER: return &ce_optimizer_layout;
  case CLEMBED_STRUCT_ROPE: return &ce_rope_layout;
  case CLEMBED_STRUCT_BAG_OPTIONS: return &ce_bag_options_layout;
  case CLEMBED_STRUCT_BAG_FEATURE: return &ce_bag_feature_layout;
  }
  return NULL;
}

/* ----------------------------------------------------------------- reading */

/* s is a field's end (or sizeof), or for a holder whose last field is a
 * struct, that field's offset plus a valid (shorter) size of it. */
static int valid_size(const ce_struct_layout *L, size_t s) {
  for (size_t i = 0; i < L->n_ends; i++)
    if (L->ends[i] == s) return 1;
  if (L->n_nested) {
    const ce_nested *t = &L->nested[L->n_nested - 1];
    if (t->offset + t->layout->size == L->size && s > t->offset && s < L->size) return valid_size(t->layout, s - t->offset);
  }
  return 0;
}

static size_t size_field(const void *p) {
  size_t s;
  memcpy(&s, p, sizeof s); /* a caller's struct need not be aligned for us */
  return s;
}

static const char *op_of(const clembed_context *ctx, const char *op) {
  return op ? op : ctx && ctx->op ? ctx->op : "";
}

/* The refusal of a struct_size s of L at `path` ("opt", "opt.norm", "features[2]"). */
static clembed_status refuse(clembed_context *ctx, const char *op, const char *path, const char *argument,
                             int64_t index, const ce_struct_layout *L, size_t s, size_t room) {
  char why[320];
  if (s == 0)
    snprintf(why, sizeof why, "0: the struct was not made by %s (or struct_size = sizeof(%s) set)", L->defaults,
             L->name);
  else if (s > room && room < L->size)
    snprintf(why, sizeof why, "%zu, past the %zu bytes its holder gives it", s, room);
  else if (s > L->size)
    snprintf(why, sizeof why,
             "%zu, more than this version's sizeof(%s), %zu: a struct of clembed 0.3 or earlier (no struct_size), "
             "or of a caller built against a later clembed than this %d.%d.%d",
             s, L->name, L->size, CLEMBED_VERSION_MAJOR, CLEMBED_VERSION_MINOR, CLEMBED_VERSION_PATCH);
  else
    snprintf(why, sizeof why,
             "%zu, not a size of %s (its sizeof is %zu; a shorter one ends one of its fields, %zu at least): a "
             "struct of clembed 0.3 or earlier (no struct_size), or one not made by %s",
             s, L->name, L->size, L->ends[0], L->defaults);
  return clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op_of(ctx, op), argument, index,
                              (int64_t)(s > (size_t)INT64_MAX ? INT64_MAX : s), "%s: %s.struct_size is %s",
                              op_of(ctx, op), path, why);
}

static clembed_status read_in(clembed_context *ctx, const char *op, const char *path, const char *argument,
                              int64_t index, const ce_struct_layout *L, const unsigned char *in, size_t room,
                              unsigned char *out) {
  size_t s = size_field(in);
  if (!valid_size(L, s) || s > room) return refuse(ctx, op, path, argument, index, L, s, room);
  size_t done = 0;
  for (size_t k = 0; k < L->n_nested; k++) {
    const ce_nested *n = &L->nested[k];
    if (n->offset >= s) break; /* not reached: its defaults stand */
    memcpy(out + done, in + done, n->offset - done);
    char sub[96];
    snprintf(sub, sizeof sub, "%s.%s", path, n->field);
    clembed_status st = read_in(ctx, op, sub, n->field, index, n->layout, in + n->offset, s - n->offset, out + n->offset);
    if (st != CLEMBED_OK) return st;
    done = n->offset + n->layout->size;
  }
  if (done < s) memcpy(out + done, in + done, s - done);
  memcpy(out, &L->size, sizeof L->size);
  return CLEMBED_OK;
}

clembed_status ce_struct_read(clembed_context *ctx, const char *op, const char *argument, int64_t index,
                              const ce_struct_layout *L, const void *in, void *out) {
  if (!in) return CLEMBED_OK;
  char path[64];
  if (index >= 0) snprintf(path, sizeof path, "%s[%lld]", argument, (long long)index);
  else snprintf(path, sizeof path, "%s", argument);
  return read_in(ctx, op, path, argument, index, L, in, (size_t)-1, out);
}

clembed_status ce_struct_stride(clembed_context *ctx, const char *op, const char *argument, const ce_struct_layout *L,
                                const void *in, size_t n, size_t *stride) {
  *stride = 0;
  if (!n || !in) return CLEMBED_OK;
  size_t s = size_field(in);
  if (!valid_size(L, s)) {
    char path[64];
    snprintf(path, sizeof path, "%s[0]", argument);
    return refuse(ctx, op, path, argument, 0, L, s, (size_t)-1);
  }
  for (size_t f = 1; f < n; f++) {
    size_t e = size_field((const char *)in + f * s);
    if (e != s)
      return clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op_of(ctx, op), argument, (int64_t)f,
                                  (int64_t)(e > (size_t)INT64_MAX ? INT64_MAX : e),
                                  "%s: %s[%zu].struct_size is %zu but %s[0]'s is %zu: the array is read with the "
                                  "stride of its first element's struct_size, which every element carries",
                                  op_of(ctx, op), argument, f, e, argument, s);
  }
  *stride = s;
  return CLEMBED_OK;
}

clembed_status ce_struct_read_array(clembed_context *ctx, const char *op, const char *argument,
                                    const ce_struct_layout *L, const void *in, size_t n, void *out) {
  size_t stride;
  clembed_status s = ce_struct_stride(ctx, op, argument, L, in, n, &stride);
  for (size_t f = 0; s == CLEMBED_OK && f < n && in; f++)
    s = ce_struct_read(ctx, op, argument, (int64_t)f, L, (const char *)in + f * stride, (char *)out + f * L->size);
  return s;
}

/* ------------------------------------------------------------------ public */

size_t clembed_struct_size(clembed_struct_type type) {
  const ce_struct_layout *L = ce_struct_layout_of(type);
  return L ? L->size : 0;
}

clembed_status clembed_struct_read(clembed_context *ctx, const char *operation, const char *argument,
                                   clembed_struct_type type, const void *in, void *out) {
  const char *op = operation ? operation : "clembed_struct_read";
  const char *arg = argument ? argument : "in";
  const ce_struct_layout *L = ce_struct_layout_of(type);
  if (!L)
    return clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, "type", -1, (int64_t)type,
                                "%s: unknown option struct type %d", op, (int)type);
  if (!out)
    return clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, "out", -1, 0,
                                "%s: out is NULL (a %s holding the defaults)", op, L->name);
  if (in && in == out)
    return clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, "out", -1, 0,
                                "%s: out is the caller's struct itself; read it into a copy of the defaults", op);
  return ce_struct_read(ctx, op, arg, -1, L, in, out);
}
