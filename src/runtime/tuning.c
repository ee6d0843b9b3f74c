/* Every kernel-shape number in one place, a table per kind of device. The
 * kernels get theirs as -D options (with #ifndef defaults equal to the GPU
 * table's). The figures behind these choices are in docs/performance.md. */
#include "runtime.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const ce_tuning gpu = {
    .name = "gpu",
    .cpu_shapes = 0,
    .group_target = 256,
    .row_items_max = 16,
    .row_groups_per_unit = 8,
    .embed_rows = 0, /* work-item (x, token): consecutive items on consecutive columns */
    .embed_strided_rows = 0,
    .embed_vec = 16,
    .embed_stream = 0,
    .stream_cache_bytes = 0,
    .embed_next = 0,
    .embed_strided_prefetch_bytes = 0,
    .embed_strided_ahead = 0,
    .norm_rows = 0,           /* work-group rows of 32 work-items, 8 tokens per group */
    .norm_strided_rows = 0,
    .norm_group_rows = 8,
    .norm_next = 0,
    .norm_scratch_cols = 0,
    .norm_side_cols = 0,
    .norm_sums = 0,           /* the backward's position and segment gradients by their folds */
    .positional_rowwise = 0,
    .positional_vec = 16,
    .rope_rowwise = 0,
    .rope_pairs = 4,
    .sort_chunk = 64,
    .sort_max_chunks = 4096,
    .sort_radix_bits = 8,
    .sort_local = 64,
    .fold_vec = 4,
    .fold_tile = 1,
    .fold_block_columns = 256,
    .fold_split = 1, /* every segment is split into column blocks */
    .fold_group = 4,
    .fold_ahead_bytes = 0,
    .fold_ahead = 4,
    .step_ahead = 1,
    .fold_slices_per_unit = 16 * 256,
    .fold_min_slices = 256,
    .row_items = 256,
    .bag_vec = 4,  /* consecutive work-items on consecutive 4-column vectors */
    .bag_tile = 1,
    .bag_rows = 1,
    .bag_rows_features = 1,
    .bag_ahead = 0,
    .bag_plain = 0,
    .bag_by_feature = 0,
    .sinusoid_table_max_elements = (size_t)16 << 20,
    .sinusoid_table_min_rows = 64,
    .sinusoid_table_inline_rows = 4096,
    .huge_page_bytes = (size_t)2 << 20,
    .piece_args = 8,
};

static const ce_tuning cpu = {
    .name = "cpu",
    .cpu_shapes = 1,
    .group_target = 256,
    .row_items_max = 16, /* a CPU runtime runs a work-group's items in one thread */
    .row_groups_per_unit = 8,
    .embed_rows = 8,          /* whole output rows of 8 tokens per work-item, side by side */
    .embed_strided_rows = 8,  /* one position of 8 sequences per work-item */
    .embed_vec = 16,
    .embed_stream = 1,        /* streaming stores for an output larger than the cache, */
    .stream_cache_bytes = (size_t)32 << 20, /* 32 MiB where the device does not say (a server core's L3) */
    .embed_next = 1,          /* (POCL) the next item's 8 rows asked for during the item's */
    .embed_strided_prefetch_bytes = 2048, /* positions shared: quantized rows, 16-bit rows of 1024, */
    .embed_strided_ahead = 4,     /* 4 rows on */
    .norm_rows = 1,               /* the norm: a token per work-item, */
    .norm_strided_rows = 8,       /* one position of 8 sequences when positions are shared, */
    .norm_group_rows = 8,
    .norm_next = 1,               /* (POCL) the next rows asked for during the first pass; */
    .norm_scratch_cols = 9216,    /* rows of up to 9216 kept aside between the norm's passes, */
    .norm_side_cols = 4608,       /* as many side by side as take 18 KiB (4 of 1024: 1.04 - 1.09x over 8) */
    .norm_sums = 1,               /* the backward: the position and a few segment rows' gradients summed in its passes */
    .positional_rowwise = 1,  /* a row per work-item, 16 columns at a time */
    .positional_vec = 16,
    .rope_rowwise = 1,        /* a row per work-item, */
    .rope_pairs = 4,          /* 64 pairs' cos and sin at a time, every head's columns in order */
    .sort_chunk = 4096,       /* a few long chunks: each item's 256 counters stay in its cache */
    .sort_max_chunks = 4096,
    .sort_radix_bits = 8,
    .sort_local = 64,
    .fold_vec = 16,
    .fold_tile = 4,           /* 4 vectors of 16 columns folded at once */
    .fold_block_columns = 256,
    .fold_split = 64,         /* shorter segments are folded over whole rows */
    .fold_group = 4,          /* sorted positions per work-item */
    .fold_ahead_bytes = 1024, /* (POCL) rows of up to 1 KiB one after another, */
    .fold_ahead = 4,          /* the rows of the position 4 on asked for during a fold */
    .step_ahead = 1,          /* (POCL) the steps ask for their table and state rows ahead */
    .fold_slices_per_unit = (size_t)1 << 24, /* an item per group: a thread takes sorted positions in order */
    .fold_min_slices = 256,
    .row_items = 256,
    .bag_vec = 16,
    .bag_tile = 8,            /* a bag's rows pooled 128 columns at a time, in registers, */
    .bag_rows = 8,            /* 8 rows read side by side, */
    .bag_rows_features = 4,   /* 4 in a call of several features (26 features: 1.15 - 1.2x over 8) */
    .bag_ahead = 32,          /* (POCL) the row of the id 32 on asked for (64-column rows 1.1-1.2x over 8; 128 level) */
    .bag_plain = 1,           /* bags of plain ids a row at a time, without masks */
    .bag_by_feature = 1,      /* a feature's bags one after another: one table read at a time */
    .sinusoid_table_max_elements = (size_t)16 << 20,
    .sinusoid_table_min_rows = 64,
    .sinusoid_table_inline_rows = 4096,
    .huge_page_bytes = (size_t)2 << 20,
    .piece_args = 8,
};

const ce_tuning *ce_tuning_choose(int is_cpu, const char *env) {
  if (env && *env) {
    if (!strcasecmp(env, "cpu")) return &cpu;
    if (!strcasecmp(env, "gpu")) return &gpu;
    return NULL;
  }
  return is_cpu ? &cpu : &gpu;
}

static void set_int(int *f, unsigned long long v) { *f = (int)v; }
static void set_unsigned(unsigned *f, unsigned long long v) { *f = (unsigned)v; }
static void set_size(size_t *f, unsigned long long v) { *f = (size_t)v; }
#define CE_SET_FIELD(f, v) _Generic((f), int *: set_int, unsigned *: set_unsigned, size_t *: set_size)((f), (v))

clembed_status ce_tuning_apply(const ce_tuning *base, const char *env, ce_tuning *out) {
  *out = *base;
  if (!env) return CLEMBED_OK;
  char item[128];
  for (const char *p = env; *p;) {
    size_t len = strcspn(p, ",");
    if (len == 0 || len >= sizeof item) {
      ce_last_message("CLEMBED_TUNE is '%.200s'; it must be name=count settings separated by commas", env);
      return CLEMBED_ERR_INVALID_ARGUMENT;
    }
    memcpy(item, p, len);
    item[len] = 0;
    p += len + (p[len] == ',');
    char *eq = strchr(item, '='), *end = NULL;
    unsigned long long v = 0;
    if (eq) {
      *eq = 0;
      v = strtoull(eq + 1, &end, 10);
    }
    if (!eq || !eq[1] || *end || eq[1] == '-' || v > (1ull << 40)) {
      ce_last_message("CLEMBED_TUNE: '%.100s' must be name=count (a count from 0 to 2^40)", item);
      return CLEMBED_ERR_INVALID_ARGUMENT;
    }
    int known = 0;
#define CE_TUNE_FIELD(name)            \
    if (!strcmp(item, #name)) {        \
      CE_SET_FIELD(&out->name, v);     \
      known = 1;                       \
    }
    CE_TUNING_FIELDS(CE_TUNE_FIELD)
#undef CE_TUNE_FIELD
    if (!known) {
      ce_last_message("CLEMBED_TUNE: '%.100s' is not a tuning field (src/runtime/runtime.h lists them)", item);
      return CLEMBED_ERR_INVALID_ARGUMENT;
    }
  }
  return CLEMBED_OK;
}
