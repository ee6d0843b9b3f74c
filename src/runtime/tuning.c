/* Every kernel-shape number in one place, a table per kind of device. The
 * kernels get theirs as -D options (with #ifndef defaults equal to the GPU
 * table's). The figures behind these choices are in docs/performance.md. */
#include "runtime.h"

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
    .embed_prefetch_bytes = 0,
    .embed_prefetch_rows = 0,
    .embed_prefetch_ahead = 0,
    .embed_strided_prefetch_bytes = 0,
    .embed_strided_ahead = 0,
    .positional_rowwise = 0,
    .positional_vec = 16,
    .rope_rowwise = 0,
    .sort_chunk = 64,
    .sort_max_chunks = 4096,
    .sort_radix_bits = 8,
    .sort_local = 64,
    .fold_vec = 4,
    .fold_tile = 1,
    .fold_block_columns = 256,
    .fold_split = 1, /* every segment is split into column blocks */
    .fold_group = 4,
    .fold_ahead = 4,
    .rowwise_ahead = 2,
    .fold_slices_per_unit = 16 * 256,
    .fold_min_slices = 256,
    .row_items = 256,
    .sinusoid_table_max_elements = (size_t)16 << 20,
    .sinusoid_table_min_rows = 64,
    .sinusoid_table_inline_rows = 4096,
    .huge_page_bytes = (size_t)2 << 20,
};

static const ce_tuning cpu = {
    .name = "cpu",
    .cpu_shapes = 1,
    .group_target = 256,
    .row_items_max = 16, /* a CPU runtime runs a work-group's items in one thread */
    .row_groups_per_unit = 8,
    .embed_rows = 4,          /* whole output rows of 4 tokens per work-item */
    .embed_strided_rows = 8,  /* one position of 8 sequences per work-item */
    .embed_vec = 16,
    .embed_stream = 1,        /* streaming stores for an output larger than the cache */
    .embed_prefetch_bytes = 4096, /* rows of up to 1024 F32 values, */
    .embed_prefetch_rows = 1,     /* then one token per work-item, */
    .embed_prefetch_ahead = 4,    /* asking for the row 4 rows on; */
    .embed_strided_prefetch_bytes = 2048, /* positions shared: quantized rows, 16-bit rows of 1024, */
    .embed_strided_ahead = 4,     /* 4 rows on */
    .positional_rowwise = 1,  /* a row per work-item, 16 columns at a time */
    .positional_vec = 16,
    .rope_rowwise = 1,        /* a row per work-item, 16 pairs at a time */
    .sort_chunk = 64,
    .sort_max_chunks = 4096,
    .sort_radix_bits = 8,
    .sort_local = 64,
    .fold_vec = 16,
    .fold_tile = 4,           /* 4 vectors of 16 columns folded at once */
    .fold_block_columns = 256,
    .fold_split = 64,         /* shorter segments are folded over whole rows */
    .fold_group = 4,          /* sorted positions per work-item */
    .fold_ahead = 4,          /* (POCL) the rows of the position 4 on asked for during a fold */
    .rowwise_ahead = 2,       /* (POCL) row-wise Adagrad: the table row 2 segments on */
    .fold_slices_per_unit = 16 * 256,
    .fold_min_slices = 256,
    .row_items = 256,
    .sinusoid_table_max_elements = (size_t)16 << 20,
    .sinusoid_table_min_rows = 64,
    .sinusoid_table_inline_rows = 4096,
    .huge_page_bytes = (size_t)2 << 20,
};

const ce_tuning *ce_tuning_choose(int is_cpu, const char *env) {
  if (env && *env) {
    if (!strcasecmp(env, "cpu")) return &cpu;
    if (!strcasecmp(env, "gpu")) return &gpu;
    return NULL;
  }
  return is_cpu ? &cpu : &gpu;
}
