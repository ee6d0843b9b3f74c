/* The runtime: what every operation stands on (messages, status strings,
 * devices, tuning, programs, buffers, launches, deferred errors, argument
 * checks, the context). It knows no operation: nothing here includes
 * src/ops/, and the caches an operation keeps on a context are released
 * through the function the operation registers (ce_cache_add). */
#ifndef CLEMBED_RUNTIME_H
#define CLEMBED_RUNTIME_H

#include "clembed.h"
#include "dtypes.h"
#include "families.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------- check macros */

/* Jump to the function's single cleanup label with `status` set when `expr`
 * (an OpenCL or clembed status) is not success. */
#define CHECK(expr)                    \
  do {                                 \
    status = (clembed_status)(expr);   \
    if (status != CLEMBED_OK) goto cleanup; \
  } while (0)

/* Fail with a message on the context. */
#define FAIL(code, ...)                                  \
  do {                                                   \
    status = ce_fail(ctx, (code), __VA_ARGS__);          \
    goto cleanup;                                        \
  } while (0)

/* Fail naming an argument (and the element and value, -1 and 0 when none). */
#define FAIL_ARG(code, arg, index, value, ...)                                         \
  do {                                                                                 \
    status = ce_fail_arg(ctx, (code), NULL, (arg), (index), (value), __VA_ARGS__);     \
    goto cleanup;                                                                      \
  } while (0)

/* The first lines of a public function: names the operation for error details;
 * a NULL context fails with CLEMBED_ERR_INVALID_ARGUMENT (detail per thread). */
#define CE_ENTER(ctx, name)                                  \
  do {                                                       \
    if (!(ctx)) return ce_no_context(name);                  \
    (ctx)->op = (name);                                      \
  } while (0)

/* ------------------------------------------------------------------ tuning */

/* Every kernel-shape number and device fact, resolved for a device from the
 * tuning database (tuning.c; tuning/devices.conf, the user's entries,
 * CLEMBED_TUNE; docs/tuning.md). Kernels receive theirs as -D options and keep
 * #ifndef defaults equal to the GPU default's. */
typedef struct ce_tuning {
  int cpu_shapes;              /* whole rows per work-item, wide vectors */
  /* launches */
  size_t group_target;         /* work-items per work-group the 1-D/2-D launches aim for */
  size_t row_items_max;        /* CPU shapes: work-items per group for items doing a row's work */
  size_t row_groups_per_unit;  /* ...and at least this many groups per compute unit */
  size_t embed_local;          /* the forward's row shapes: work-items per group (0: the rule above) */
  size_t bag_local;            /* the bags' CPU shape: work-items per group (0: the rule above) */
  /* forward */
  unsigned embed_rows;         /* tokens per work-item (0: the column shapes) */
  size_t embed_rows_bytes;     /* ...fewer where table rows are wide: as many as have at most this many bytes
                                * of table rows together, at least 1 (0: embed_rows whatever the width) */
  unsigned embed_strided_rows; /* sequences per work-item that share a position */
  unsigned embed_vec;          /* columns per vector in the row shapes */
  int embed_stream;            /* streaming stores for an output larger than the device's cache */
  size_t stream_cache_bytes;   /* ...the cache taken where the device reports none (its global memory cache
                                * size 0, as POCL on a machine whose sysfs has no cache facts; 0: no stream) */
  /* where the device takes prefetch hints (ctx->prefetch): the row shapes'
   * rows side by side ask for the next work-item's table rows, a line or two
   * of each at a column step (forward.cl's EMBED_NEXT), when embed_next is 1; */
  int embed_next;
  /* with positions shared (the strided shape), rows of at most this many
   * bytes are written one after another instead, the table row this many rows
   * on asked for during each (forward.cl's AHEAD) */
  size_t embed_strided_prefetch_bytes;
  unsigned embed_strided_ahead;
  /* the forward with segments or a norm (cl/ops/norm.cl) and its backward's rows */
  unsigned norm_rows;          /* tokens per work-item of the CPU shape (0: the GPU shape) */
  unsigned norm_strided_rows;  /* ...and sequences per work-item that share a position (the forward) */
  unsigned norm_bwd_strided_rows; /* ...the same in the backward's rows */
  unsigned norm_group_rows;    /* GPU shape: tokens per work-group (32 work-items across each) */
  unsigned norm_next;          /* with prefetch hints (1): the next rows asked for during the first pass */
  unsigned norm_scratch_cols;  /* CPU shape: the private floats its rows are kept in between passes (rows of
                                * up to this many columns; as many side by side as fit, up to the item's) */
  unsigned norm_side_cols;     /* CPU shape: rows side by side only while they take at most this many of the
                                * scratch's floats (an L1 budget), two at least where two fit (0: no budget) */
  unsigned norm_sums;          /* the backward with a norm: ce_norm_params sums a segment table of a few rows
                                * (NORM_SUMS) and the CPU shape's strided items the position table (POSG), 1;
                                * or their folds over dx, 0 (the same bits) */
  unsigned norm_params_cols;   /* CPU shape: ce_norm_params' widest block of columns per work-item (its sums,
                                * two rows of this many floats and one per segment row, are private) */
  /* positional table */
  int positional_rowwise;      /* a row per work-item */
  unsigned positional_vec;
  /* RoPE */
  int rope_rowwise;            /* a row per work-item (else a pair per work-item), */
  unsigned rope_pairs;         /* ...this many vectors of 16 pairs at a time, every head's in turn */
  /* sort */
  size_t sort_chunk;           /* entries per work-item, at least */
  size_t sort_max_chunks;      /* the scan is one work-group */
  unsigned sort_radix_bits;
  size_t sort_local;           /* local size of the histogram and scatter launches */
  /* segment fold (backward, optimizer steps) */
  unsigned fold_vec, fold_tile;
  size_t fold_block_columns;   /* a column block's width */
  size_t fold_split;           /* segments of at least this many tokens are split into blocks */
  unsigned fold_group;         /* CPU shapes: sorted positions per work-item group */
  size_t fold_ahead_bytes;     /* ...and, with prefetch hints, the short segments of gradient rows of at
                                  most this many bytes go one after another (backward.cl's CE_FOLD_ORDER
                                  1), the rows fold_ahead sorted positions on asked for while one is
                                  folded (FOLD_AHEAD); longer rows go side by side */
  unsigned fold_ahead;
  unsigned step_ahead;         /* the steps, with prefetch hints (backward.cl's STEP_AHEAD): 1,
                                  row-wise Adagrad's first pass asks for the group's table and state
                                  rows, which the second steps, and the other optimizers ask for the
                                  state rows with the table row (CE_COLUMNS_GROUP); 0, neither */
  size_t fold_slices_per_unit; /* work-items per compute unit the slices aim for */
  size_t fold_min_slices;
  size_t row_items;            /* work-items across a row for the row-looping helper kernels */
  /* bags (clembed_embedding_bag(s)): the CPU shape pools a bag's rows TILE vectors of VEC columns at a
   * time (a work-item per bag); the GPU shape one VEC of columns per work-item (bag_tile at most 16) */
  unsigned bag_vec, bag_tile;
  unsigned bag_rows;           /* the CPU shape: a bag's ids taken this many at a time (their rows loaded
                                  side by side, then added in order; 1 to 16) */
  unsigned bag_rows_features;  /* ...in a call of several features (clembed_embedding_bags) */
  unsigned bag_ahead;          /* with prefetch hints: the row of the id this many on asked for */
  unsigned bag_plain;          /* the CPU shape: 1, a SUM/MEAN/weighted bag whose ids are all in the table
                                  and not padding is pooled a row at a time without masks (bag.cl's PLAIN) */
  unsigned bag_cols;           /* the forward's shape: 1, the GPU shape (ce_bag_cols: a work-item per bag and
                                  vector of columns); 0, the CPU shape (ce_bag_rows: whole rows per work-item) */
  unsigned bag_by_feature;     /* the CPU shape: 1, a work-item per (bag, feature), the feature the slow
                                  index (one feature's table read at a time); 0, a work-item per bag over
                                  every feature of the launch */
  /* caches and buffers */
  size_t sinusoid_table_max_elements;
  size_t sinusoid_table_min_rows;
  size_t sinusoid_table_inline_rows; /* above this, a table four times the call's tokens is not built */
  size_t huge_page_bytes;            /* host pages for large buffers on CPU devices sharing host memory */
  /* split matrices */
  size_t piece_args;                 /* pieces of a split matrix one launch takes (1 .. 8): 1 is a launch per
                                        piece, over the rows that fall in it */
  /* initialisation */
  int init_wide;                     /* the CPU shape's 64 values a work-item, 16 at a time (else 4) */
  /* device facts */
  int prefetch;                      /* kernels may use __builtin_prefetch (-DCE_PREFETCH=1) */
  int host_pages;                    /* large buffers on huge host pages, files used in place (where the
                                        device's memory is the host's) */
  int zero_temporaries;              /* temporaries created zeroed */
  size_t loop_limit;                 /* the device stops a work-item's loops after this many iterations in
                                        all (gallivm's limit on llvmpipe); kernels whose loops grow with a
                                        call are then launched in parts that stay below it (0: no limit) */
} ce_tuning;

/* The parameters, by name (the database's, CLEMBED_TUNE's and the kernels'
 * -D options' names). */
#define CE_TUNING_FIELDS(X)                                                                                     \
  X(cpu_shapes) X(group_target) X(row_items_max) X(row_groups_per_unit) X(embed_local) X(bag_local) X(embed_rows) X(embed_rows_bytes) X(embed_strided_rows)     \
  X(embed_vec) X(embed_stream) X(stream_cache_bytes) X(embed_next) X(embed_strided_prefetch_bytes) X(embed_strided_ahead) X(positional_rowwise) X(positional_vec) X(rope_rowwise) X(rope_pairs) \
  X(sort_chunk) X(sort_max_chunks) X(sort_radix_bits) X(sort_local) X(fold_vec) X(fold_tile)                     \
  X(fold_block_columns) X(fold_split) X(fold_group) X(fold_ahead_bytes) X(fold_ahead) X(step_ahead) X(fold_slices_per_unit)        \
  X(fold_min_slices) X(row_items) X(sinusoid_table_max_elements) X(sinusoid_table_min_rows)                      \
  X(sinusoid_table_inline_rows) X(huge_page_bytes)                                                               \
  X(norm_rows) X(norm_strided_rows) X(norm_bwd_strided_rows) X(norm_group_rows) X(norm_next) X(norm_scratch_cols) X(norm_side_cols) X(norm_sums) X(norm_params_cols) X(piece_args)  \
  X(bag_vec) X(bag_tile) X(bag_rows) X(bag_rows_features) X(bag_ahead) X(bag_plain) X(bag_cols) X(bag_by_feature)         \
  X(init_wide) X(prefetch) X(host_pages) X(zero_temporaries) X(loop_limit)
/* What the database's match lines compare: the platform's and device's
 * names, the vendor, the driver version, and the type ("cpu", "gpu",
 * "accelerator"). */
typedef struct ce_device_ident {
  char platform[256], device[256], vendor[256], driver[128];
  const char *type;
} ce_device_ident;
/* The device's tuning: the default of its type (or CLEMBED_TUNING's), the
 * built-in entries that match it, the user's (unless CLEMBED_TUNING is set),
 * CLEMBED_TUNE's settings; desc (cap bytes) names them and where they came
 * from. A user file that cannot be read or parsed is left out, with the
 * reason in warn (wcap bytes; "" when there is none); a bad CLEMBED_TUNING or
 * CLEMBED_TUNE is CLEMBED_ERR_INVALID_ARGUMENT with its message in
 * ce_last_message. */
clembed_status ce_tuning_resolve(const ce_device_ident *d, ce_tuning *out, char *desc, size_t cap, char *warn,
                                 size_t wcap);
/* The parameters by index (0 .. ce_tuning_field_count() - 1): a name's index
 * (-1: none), an index's name (NULL: none), a tuning's value. */
int ce_tuning_field(const char *name);
const char *ce_tuning_field_name(int i);
size_t ce_tuning_field_count(void);
unsigned long long ce_tuning_get(const ce_tuning *t, int i);
/* The user's tuning file (CLEMBED_TUNING_FILE, else $XDG_CACHE_HOME/clembed/
 * tuning.json, else ~/.cache/clembed/tuning.json) into path: 1, or 0 when
 * there is none (CLEMBED_TUNING_FILE empty or "none", no HOME). */
int ce_tuning_user_file(char *path, size_t cap);
/* The built-in database's text (tuning/devices.conf). */
const char *ce_tuning_builtin_text(size_t *len);
/* Copies `base` into *out (out may be base) with CLEMBED_TUNE's settings
 * ("name=count,..."; env NULL: none) applied; a name it does not know or a
 * value that is not a count is an error whose message goes to ce_last_message. */
clembed_status ce_tuning_apply(const ce_tuning *base, const char *env, ce_tuning *out);

/* ---------------------------------------------------------- error records */

/* One error slot on the device per checked operation (12 uints, all 0xFF when
 * clean). With 64-bit atomics (ctx->atom64): 6 ulongs, minima of
 * (token << 32 | value word): [0] id low word, [1] id high word, [2] sequence
 * start low word, [3] high word, [4] a bag too long for the loop limit (its
 * index << 32 | its length's low word), [5] its high word. Without: [0] first
 * bad-id token, [1] first bad-position token, [2,3] the id (lo, hi), [4,5]
 * that token's sequence start, [6] the first bag too long, [7] its length,
 * the values filled in by ce_record_error (ce_bag_record). The host keeps
 * what the message needs. */
#define CE_SLOT_UINTS 12
#define CE_SLOTS 256
typedef struct ce_slot_info {
  const char *op;        /* "clembed_embed", "clembed_backward", ... */
  const char *pos_arg;   /* what a bad position is reported against: "position_table", "position_grad" */
  int wrap;              /* CLEMBED_INDEX_WRAP: ids in [-id_rows, id_rows) are valid */
  uint64_t id_rows;      /* ids must be in [0, id_rows) */
  uint64_t pos_rows;     /* positions must be in [0, pos_rows); 0 when no table */
  uint64_t seq_len;
  uint64_t position_offset;
  int has_sequence_offsets;
  int sinusoid;          /* positions are the sinusoid's (below 2^32), not a table's */
  const char *id_arg;    /* what the ids are called in messages and error detail; NULL: "ids" */
  int bag_offsets;       /* bags: a bad position is a bad entry of "offsets" (the index and value
                            reported are the entry's); pos_rows holds the number of ids */
  int has_feature;       /* a batched call: the messages name features[feature] */
  uint64_t feature;
  int remap;             /* a pruned table: id_rows is the remap's count; a reported id that is one of
                            them (under `policy`) names a damaged remap entry instead */
  int policy;            /* the call's clembed_index_policy (with remap) */
  uint64_t table_rows;   /* with remap: the rows its entries must be below */
  uint64_t bag_cap;      /* bags: the most ids a bag may have here (0: no cap), */
  uint64_t bag_cols;     /* and the columns of the feature's rows */
} ce_slot_info;

/* With a remap (NULL: nothing), sets info's remap fields and id_rows. */
void ce_slot_remap(ce_slot_info *info, const clembed_ids *remap, clembed_index_policy policy, size_t table_rows);

/* Slots read aside (without waiting) when every slot was taken before a finish. */
typedef struct ce_slot_batch {
  struct ce_slot_batch *next;
  size_t used;
  cl_uint host[CE_SLOTS * CE_SLOT_UINTS];
  ce_slot_info info[CE_SLOTS];
} ce_slot_batch;

/* A command of this context whose completion is checked by the next finish
 * (and waited for by destroy on a shared queue). */
typedef struct ce_tracked {
  cl_event event;
  const char *op;
} ce_tracked;

/* ------------------------------------------------------------------- context */

typedef struct ce_kernel_entry ce_kernel_entry;
typedef struct ce_program_set ce_program_set;

/* A cache an operation keeps on the context, released with it. */
typedef void (*ce_release_fn)(clembed_context *ctx, void *data);
typedef struct ce_cache {
  const void *key;
  void *data;
  ce_release_fn release;
} ce_cache;
#define CE_CACHES 8

struct clembed_context {
  cl_platform_id platform;
  cl_device_id device;
  cl_context context;
  cl_command_queue queue;
  int own_queue;  /* the queue was created by clembed (not a caller's) */
  int in_order;
  int atom64;     /* cl_khr_int64_base_atomics: error records need no second kernel */
  const ce_tuning *tune; /* &tune_table */
  ce_tuning tune_table;   /* the device's tuning (ce_tuning_resolve) */
  char tuning_desc[1024]; /* ...its entries and where they came from (clembed_context_tuning) */
  int cpu_shapes; /* tune->cpu_shapes */
  cl_uint units;  /* CL_DEVICE_MAX_COMPUTE_UNITS */
  cl_ulong cache_bytes; /* CL_DEVICE_GLOBAL_MEM_CACHE_SIZE (0: unknown) */
  int exact_div;  /* CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT in CL_DEVICE_SINGLE_FP_CONFIG */
  int host_pages; /* POCL's CPU devices: large buffers on huge pages, files used in place */
  int zero_temporaries; /* create temporaries zeroed (Oclgrind's shadow-memory checker) */
  int prefetch;   /* kernels may use __builtin_prefetch (-DCE_PREFETCH=1): POCL's CPU devices */
  char device_name[512];
  size_t max_work_group;
  size_t max_items[2]; /* CL_DEVICE_MAX_WORK_ITEM_SIZES in x and y */
  cl_ulong max_alloc;
  size_t max_piece;     /* the largest buffer of a matrix (or staging copy): max_alloc, or
                           CLEMBED_MAX_BUFFER_BYTES when lower */
  int max_piece_env;    /* max_piece comes from CLEMBED_MAX_BUFFER_BYTES */
  size_t max_param;     /* CL_DEVICE_MAX_PARAMETER_SIZE */
  cl_ulong global_mem;  /* CL_DEVICE_GLOBAL_MEM_SIZE (0: unknown) */

  char *message; /* last failure */
  size_t message_cap;
  const char *op;              /* the public function running, for error details */
  clembed_error_detail detail; /* the last failure's structured detail */

  ce_program_set *programs; /* shared with contexts on the same cl_context and device */
  ce_kernel_entry *kernels; /* this context's kernel objects */

  cl_mem errbuf;
  size_t slots_used;
  cl_uint clean_slots[CE_SLOTS * CE_SLOT_UINTS]; /* all 0xFF: the reset pattern */
  cl_uint slot_host[CE_SLOTS * CE_SLOT_UINTS];   /* the slots as last read */
  ce_slot_batch *batches, *batches_tail;         /* set aside, oldest first */
  ce_slot_info slot_info[CE_SLOTS];
  clembed_status deferred;
  char deferred_message[512];
  clembed_error_detail deferred_detail;

  ce_tracked *tracked; /* commands not yet checked by a finish */
  size_t ntracked, tracked_cap;
  clembed_error_detail failed; /* the first failed command found (status 0: none) */

  ce_cache caches[CE_CACHES];

  const char *test_source_override; /* test hook: replaces one family's source */
  int test_source_family;
};

/* Whether an output of `bytes` goes out in streaming stores (embed_stream):
 * when it is larger than the device's cache, or where the device reports
 * none the tuning's stream_cache_bytes (0: never). */
static inline int ce_stream_output(const clembed_context *ctx, size_t bytes) {
  const size_t cache = ctx->cache_bytes ? (size_t)ctx->cache_bytes : ctx->tune->stream_cache_bytes;
  return ctx->tune->embed_stream && cache && bytes > cache;
}

/* ----- caches of operations (context.c) */
void *ce_cache_find(const clembed_context *ctx, const void *key);
/* Keeps `data` under `key` until the context is destroyed, when release(ctx, data) runs. */
clembed_status ce_cache_add(clembed_context *ctx, const void *key, void *data, ce_release_fn release);

/* ----- messages (message.c) */
clembed_status ce_fail(clembed_context *ctx, clembed_status code, const char *fmt, ...);
/* As ce_fail, with the detail's fields (op NULL: the running operation). */
clembed_status ce_fail_arg(clembed_context *ctx, clembed_status code, const char *op, const char *argument,
                           int64_t index, int64_t value, const char *fmt, ...);
/* Records a detail on the context (the message is left as it is). */
void ce_set_detail(clembed_context *ctx, clembed_status code, const char *op, const char *argument, int64_t index,
                   int64_t value);
void ce_detail_fill(clembed_error_detail *d, clembed_status code, const char *op, const char *argument,
                    int64_t index, int64_t value);
void ce_set_message(clembed_context *ctx, const char *fmt, ...);
void ce_vset_message(clembed_context *ctx, const char *fmt, va_list ap);
void ce_append_message(clembed_context *ctx, const char *text);
/* OpenCL call failed: records "what: CL_XXX" and returns the code. */
clembed_status ce_cl_fail(clembed_context *ctx, cl_int err, const char *what);
/* A public function called with a NULL context. */
clembed_status ce_no_context(const char *op);
/* The message and detail of a call that has no context (per thread). */
void ce_last_message(const char *fmt, ...);
clembed_status ce_last_fail(clembed_status status, const char *op, const char *argument);

/* ----- devices (device.c) */
typedef struct ce_device_entry {
  cl_platform_id platform;
  cl_device_id device;
  cl_uint pi, di;
  cl_device_type type;
  char name[512]; /* "platform name device name" */
  char pname[128], dname[128];
} ce_device_entry;
/* Every device of every platform (*list NULL and *count 0 when none). */
clembed_status ce_list_devices(ce_device_entry **list, size_t *count);
/* Index of the device a spec names (NULL or "": the default), or -1. */
long ce_match_spec(const ce_device_entry *list, size_t n, const char *spec);
/* Why no platform lists a device, for the message of CLEMBED_ERR_NO_DEVICE:
 * no platform at all (the package to install), or the platforms that list
 * none, with POCL's kernel cache directory when POCL is among them. */
void ce_no_device_reason(char *buf, size_t len);
/* Reads the device's facts into the context and chooses its tuning table; the
 * message of a failure goes to ce_last_message. */
clembed_status ce_device_facts(clembed_context *ctx);

/* ----- programs and kernels (program.c) */
/* Kernel families: cl/lib/ files followed by one cl/ops/ file (families.h is
 * the list). */
#define CE_FAMILY_ENUM(ID, file) CE_FAMILY_##ID,
typedef enum ce_family { CE_FAMILIES(CE_FAMILY_ENUM) CE_FAMILY_COUNT } ce_family;
#undef CE_FAMILY_ENUM

/* Returns the context's kernel `name` of `family` built with `options`
 * (-D definitions such as "-DTABLE_DT=0"). Builds once per cl_context, device
 * and options. */
clembed_status ce_kernel(clembed_context *ctx, ce_family family, const char *options, const char *name,
                         cl_kernel *kernel);
clembed_status ce_program_set_acquire(clembed_context *ctx);
void ce_program_set_release(clembed_context *ctx);
void ce_kernels_release(clembed_context *ctx);

/* ----- buffers (buffer.c): the one allocator */
typedef enum ce_buffer_kind {
  CE_BUFFER_DATA,     /* a matrix or ids: on huge pages where the device uses host memory */
  CE_BUFFER_TEMP,     /* a temporary, written by a kernel before it is read */
  CE_BUFFER_CONST,    /* copied from `host` when created, read-only on the device */
  CE_BUFFER_COPY      /* copied from `host` when created, read-write */
} ce_buffer_kind;
/* A buffer of `bytes` (0 counts as 4); `what` names it in messages. */
clembed_status ce_buffer(clembed_context *ctx, ce_buffer_kind kind, size_t bytes, const void *host,
                         const char *what, cl_mem *out);

/* ----- matrices in several buffers (buffer.c): the pieces of a split matrix
 * A matrix larger than ctx->max_piece bytes (the device's largest allocation,
 * or CLEMBED_MAX_BUFFER_BYTES when lower) is made of pieces: buffers of whole
 * consecutive rows. The matrix's `buffer` is its first piece; a process-wide
 * registry (guarded by a mutex) maps that cl_mem to the pieces until
 * clembed_matrix_release, or until the first piece is deleted (its destructor
 * callback, where the implementation calls it). Any other cl_mem is one
 * buffer. Operations never read the registry: they check a matrix into a
 * ce_pieces (ce_check_pieces) and hand that to their kernels (CE_PIECES in
 * ce_set_args, ce_pieces_plan / _options / _next) or walk its pieces. */

/* Rows [first, the next piece's first) of a matrix (or of a view of it) lie
 * in `buffer`, the first of them from element (value) `offset`, ld apart. */
typedef struct ce_piece {
  cl_mem buffer;
  size_t first;
  size_t offset;
} ce_piece;

#define CE_PIECES_LOCAL 8
/* A checked matrix resolved into the pieces its rows lie in: one for a matrix
 * in one buffer (and for a view inside one piece), several for a view across
 * pieces (piece[0].first is 0). */
typedef struct ce_pieces {
  size_t rows, ld, count;
  ce_piece *piece; /* count entries, ascending first: `local` or an allocation */
  ce_piece local[CE_PIECES_LOCAL];
  const char *what; /* the argument's name, for messages */
  int whole;        /* set by the operation: every launch must take all its pieces (a kernel that cannot
                       leave part of this matrix's rows to another launch) */
  /* launches (ce_pieces_plan): */
  size_t per_launch; /* pieces a launch takes (0: one buffer, no piece arguments) */
  size_t group;      /* this launch's: pieces [group * per_launch, + per_launch) */
} ce_pieces;

/* The most rows of `row_bytes` a buffer of a matrix holds (whole words within
 * ctx->max_piece); fails (naming CLEMBED_MAX_BUFFER_BYTES when it set the
 * limit) when one row does not fit. */
clembed_status ce_piece_rows(clembed_context *ctx, size_t row_bytes, const char *what, size_t *per);
/* A rows x cols matrix's buffers (CE_BUFFER_DATA, not zeroed): one buffer of
 * whole words when it fits in ctx->max_piece, else pieces of ce_piece_rows rows,
 * registered. *first receives the matrix's buffer, *p its pieces (released by
 * the caller with ce_pieces_release; the buffers with ce_pieces_forget, then
 * clReleaseMemObject(*first)). */
clembed_status ce_matrix_alloc(clembed_context *ctx, size_t rows, size_t cols, clembed_dtype dtype,
                               const char *what, cl_mem *first, ce_pieces *p);
/* Registers n pieces (first = their first row) of a rows x cols matrix made by
 * the caller (clembed_matrix_load's mapped pieces); the registry takes the
 * references of pieces 1 .. n-1, the matrix's buffer is piece 0. */
clembed_status ce_pieces_register(clembed_context *ctx, const ce_piece *pieces, size_t n, size_t rows, size_t cols,
                                  clembed_dtype dtype);
/* Forgets the split matrix whose first piece is `first` and releases its other
 * pieces; nothing for any other cl_mem. */
void ce_pieces_forget(cl_mem first);
/* The pieces of the registered matrix `first` (a split matrix's buffer): 1 and
 * its record (rows, cols, dtype; the pieces' first rows of the whole matrix),
 * 0 for any other cl_mem, -1 when host memory for the list runs out. */
int ce_pieces_find(cl_mem first, size_t *rows, size_t *cols, clembed_dtype *dtype, ce_pieces *p);
/* Piece j of a resolved matrix as a one-buffer view (for host-side loops over
 * the pieces; never handed back to a public function, whose check would read
 * a first piece as its split matrix). */
void ce_piece_view(const ce_pieces *p, size_t j, const clembed_matrix *m, clembed_matrix *view);
/* A matrix argument that is absent (a NULL buffer, one piece). */
void ce_pieces_none(ce_pieces *p);
/* The rows of piece j of p. */
size_t ce_piece_nrows(const ce_pieces *p, size_t j);
void ce_pieces_release(ce_pieces *p);

/* ----- launches (launch.c) */
/* Sets kernel arguments 0, 1, ... from CE_ARG(x) pairs ending with CE_END.
 * CE_PIECES(p) (a ce_pieces *) sets a matrix's buffer and offset arguments,
 * and when it is split the piece arguments of this launch that follow them
 * (cl/lib/pieces.cl's CE_PIECE_PARAMS). */
clembed_status ce_set_args(clembed_context *ctx, cl_kernel k, const char *name, ...);
/* The same from argument `first` on. */
clembed_status ce_set_args_at(clembed_context *ctx, cl_kernel k, const char *name, cl_uint first, ...);
#define CE_ARG(x) sizeof(x), (const void *)&(x)
/* A __local argument of `bytes` (for ce_set_args). */
#define CE_LOCAL_ARG(bytes) (size_t)(bytes), (const void *)0
#define CE_END (size_t)0, (const void *)0
#define CE_PIECES_MARK ((size_t)-1)
#define CE_PIECES(p) CE_PIECES_MARK, (const void *)(p)

/* A kernel's matrices: how many pieces each launch takes of each split one
 * (the tuning's piece_args, fewer where the device's parameter space is small;
 * a matrix marked `whole` must fit in one launch, else CLEMBED_ERR_UNSUPPORTED
 * naming it), and the first launch's groups. NULL entries are skipped. */
clembed_status ce_pieces_plan(clembed_context *ctx, const char *fn, ce_pieces *const *mats, size_t n);
/* The same plan without failing: the index of the `whole` matrix with the most
 * pieces that does not fit one launch (the operation brings it into one buffer,
 * src/ops/gather.c, and plans again), or -1 when every one fits. */
long ce_pieces_plan_short(clembed_context *ctx, ce_pieces *const *mats, size_t n);
/* Appends " -DCE_PIECES_<role>=K" for a split matrix (its kernel argument is
 * `role`): K pieces in every launch, or 8 + K for launches over windows of K. */
void ce_pieces_option(char *opts, size_t cap, const ce_pieces *p, const char *role);
/* The arguments CE_PIECES(p) sets beyond the matrix's buffer and offset (the
 * index of a kernel's later arguments, for ce_set_args_at). */
cl_uint ce_pieces_extra_args(const ce_pieces *p);
/* Moves to the next launch's groups (every combination of the split
 * matrices' groups, each once); 0 after the last. */
int ce_pieces_next(ce_pieces *const *mats, size_t n);

/* Enqueues a 2-D range: x = columns, y = rows, rounded up to the local size. An
 * empty range runs nothing (a marker gives `event`). */
clembed_status ce_enqueue_2d(clembed_context *ctx, cl_kernel k, const char *name, size_t nx, size_t ny,
                             cl_uint nwait, const cl_event *wait, cl_event *event);
/* Enqueues a 1-D range of n work-items, rounded up to the local size (local 0:
 * chosen from the kernel and device; CE_LOCAL_ROWS: for items that each do a
 * large piece of work, the CPU shapes: small work-groups, enough of them to
 * keep every compute unit busy). */
#define CE_LOCAL_ROWS ((size_t)-1)
clembed_status ce_enqueue_1d(clembed_context *ctx, cl_kernel k, const char *name, size_t n, size_t local,
                             cl_uint nwait, const cl_event *wait, cl_event *event);
/* A 1-D local size of `want` when the kernel allows it, else 0 (the default). */
size_t ce_local_if_allowed(clembed_context *ctx, cl_kernel k, size_t want);
/* The local size of a row shape's launch from its tuning parameter (embed_local,
 * bag_local): `want` work-items a group, at most what the kernel allows; 0 is
 * CE_LOCAL_ROWS (the launches' rule from row_items_max and row_groups_per_unit). */
size_t ce_rows_local(clembed_context *ctx, cl_kernel k, size_t want);

/* The commands of one operation, in order: each waits on the previous one's
 * event (the first on the caller's wait list); ce_chain_close gives the
 * caller's event, which completes after the last. */
typedef struct ce_chain {
  clembed_context *ctx;
  cl_uint nwait;
  const cl_event *wait;
  cl_event prev;
} ce_chain;
void ce_chain_init(ce_chain *ch, clembed_context *ctx, cl_uint nwait, const cl_event *wait);
clembed_status ce_chain_1d(ce_chain *ch, cl_kernel k, const char *name, size_t n, size_t local);
clembed_status ce_chain_2d(ce_chain *ch, cl_kernel k, const char *name, size_t nx, size_t ny);
/* A 2-D command with the local size (lx, ly) (the global size rounded up to it). */
clembed_status ce_chain_2d_local(ce_chain *ch, cl_kernel k, const char *name, size_t nx, size_t ny, size_t lx,
                                 size_t ly);
/* Makes `ev` (a reference the chain now owns: a command enqueued with the
 * chain's wait list, e.g. by another operation's steps) the chain's last event. */
void ce_chain_adopt(ce_chain *ch, cl_event ev);
/* The wait list of the next command. */
cl_uint ce_chain_nwait(const ce_chain *ch);
const cl_event *ce_chain_wait(const ce_chain *ch);
/* Hands the last command's event to `event` (a marker when nothing ran) and
 * releases the chain. */
clembed_status ce_chain_close(ce_chain *ch, cl_event *event);
void ce_chain_release(ce_chain *ch);

/* ----- deferred errors and tracked commands (deferred.c) */
/* Reserves an error slot for an operation (never waits: when all are in use,
 * their contents are read aside first). Returns the slot index in *slot. */
clembed_status ce_slot_reserve(clembed_context *ctx, const ce_slot_info *info, cl_uint *slot);
/* Before an operation reserves k slots (one per feature of a bag call, two
 * for a norm's ids and segments): where fewer than k are free, the slots are
 * read aside now, so that none of the operation's slots is read aside (and
 * reset, and given again) before its kernels have run. k above CE_SLOTS: as
 * many as there are. */
clembed_status ce_slot_room(clembed_context *ctx, size_t k);
#define CE_NO_SLOT 0xFFFFFFFFu
/* What the error-recording kernel needs after a checked operation. */
typedef struct ce_record {
  cl_uint slot; /* CE_NO_SLOT: nothing to record */
  ce_family family;
  const char *options; /* the operation's program (ce_record_error is in cl/lib/report.cl) */
  const clembed_ids *ids, *sequence_offsets;
  size_t seq_len;
} ce_record;
/* On a device without 64-bit atomics, the error-recording kernel of `rec` as
 * the chain's next command (nothing otherwise, or without a slot): for an
 * operation with a second slot, before ce_chain_close_checked records the first. */
clembed_status ce_chain_record(ce_chain *ch, const ce_record *rec);
/* Closes a checked operation's chain: on a device without 64-bit atomics the
 * error-recording kernel runs after it; `event` completes after both. */
clembed_status ce_chain_close_checked(ce_chain *ch, const ce_record *rec, cl_event *event);
/* Waits, reads the slots, and returns (and clears) the first failed command or
 * deferred error. */
clembed_status ce_collect(clembed_context *ctx);
void ce_slot_batches_free(clembed_context *ctx);
/* Ends a device operation: on success keeps its last command's event (the
 * caller's `event`, retained, or *own) for the next finish to check; on
 * failure releases *own. Returns status. */
clembed_status ce_track_end(clembed_context *ctx, clembed_status status, cl_event *event, const cl_event *own);
#define CE_EVENT_BEGIN(event, own) ((own) = NULL, (event) ? (event) : &(own))
/* Waits for every tracked command (destroy on a shared queue) and forgets them. */
void ce_tracked_wait_release(clembed_context *ctx);
/* Blocking calls wait for the work enqueued before them: implicit on an
 * in-order queue, a barrier on an out-of-order one. */
cl_int ce_after_earlier_work(clembed_context *ctx);

/* ----- dtypes (dtypes.c; the facts are dtypes.h's list) */
/* 1 for a block-quantized dtype (Q8_0 and the others after the float types,
 * FBGEMM's row-wise types too: tables to read, never written by a kernel). */
int ce_dtype_is_block(clembed_dtype t);
/* 1 for a dtype of the list (dtypes.h's two lists). */
int ce_dtype_known(clembed_dtype t);
/* The values of a dtype's block in a matrix of `width` stored columns (its ld):
 * 1 for the float types, ggml's block size, or the row (width) for a row-wise type. */
size_t ce_dtype_unit(clembed_dtype t, size_t width);
/* The byte position of value `values` (a multiple of the unit) in a matrix of
 * `width` stored columns: clembed_dtype_row_bytes(t, values) but for the
 * row-wise types, whose bytes are per row; 0 on overflow. */
size_t ce_dtype_bytes_at(clembed_dtype t, size_t width, size_t values);
/* Appends " -DCE_RW_COLS=width" to a program's options (of capacity cap) when
 * the table dtype t is a row-wise type: its loads (cl/lib/quant.cl) find a
 * row's bytes from its stored width, a constant of the program; for
 * FP8_ROWWISE's division, the correctly rounded one where the device has it
 * (exact_div). */
void ce_rowwise_option(char *opts, size_t cap, clembed_dtype t, size_t width, int exact_div);
/* The enum's spelling for messages: "F32", ..., "Q4_K", or "unknown". */
const char *ce_dtype_name(clembed_dtype t);

/* ----- argument checks (check.c) */
clembed_status ce_check_events(clembed_context *ctx, cl_uint n, const cl_event *list);
/* Checks a matrix against its buffer; `what` names it in messages (the text
 * after its last ": " is the detail's argument). Fills *ld. */
clembed_status ce_check_matrix(clembed_context *ctx, const clembed_matrix *m, const char *what, size_t *ld);
/* The same for a matrix that is only read as a table (lookup and embed, a
 * learned position table, transfers): the block-quantized dtypes are allowed
 * (offset, cols and ld multiples of the block size, extent in whole blocks);
 * ce_check_matrix refuses them with CLEMBED_ERR_UNSUPPORTED naming `what`. */
clembed_status ce_check_table(clembed_context *ctx, const clembed_matrix *m, const char *what, size_t *ld);
/* The check every operation makes of a matrix it works on: as ce_check_table
 * (`table` 1: block types allowed) or ce_check_matrix, a split matrix's view
 * included, resolved into its pieces (p->ld set; ce_pieces_release after). The
 * two checks above refuse a split matrix (CLEMBED_ERR_UNSUPPORTED naming it):
 * they serve code that uses a matrix's buffer directly. */
clembed_status ce_check_pieces(clembed_context *ctx, const clembed_matrix *m, const char *what, int table,
                               ce_pieces *p);
clembed_status ce_check_ids(clembed_context *ctx, const clembed_ids *ids, const char *what);
size_t ce_index_size(clembed_index_type t);
int ce_mul_overflows(size_t a, size_t b, size_t *out);
int ce_add_overflows(size_t a, size_t b, size_t *out);
/* The padding id normalised against `rows` (-1: none); fails for one outside the table. */
clembed_status ce_padding(clembed_context *ctx, int64_t padding_idx, size_t rows, const char *what, cl_long *out);
/* The same, rows the remap's count when `remap` (its message says so). */
clembed_status ce_padding_of(clembed_context *ctx, int64_t padding_idx, size_t rows, int remap, const char *what,
                             cl_long *out);
/* Checks the options shared by forward and backward: policy, dropout, sequence
 * offsets (enough for every sequence). */
clembed_status ce_check_common(clembed_context *ctx, const char *what, clembed_index_policy policy, float dropout,
                               size_t count, size_t seq_len, const clembed_ids *seq_offsets);

#endif
