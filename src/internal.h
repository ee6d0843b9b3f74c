/* Private structs and helpers shared by the library's source files. */
#ifndef CLEMBED_INTERNAL_H
#define CLEMBED_INTERNAL_H

#include "clembed.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

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

/* Kernel families: one .cl file each (common.cl is prepended to all). */
typedef enum ce_family {
  CE_FAMILY_FORWARD = 0,
  CE_FAMILY_POSITIONAL,
  CE_FAMILY_BACKWARD,
  CE_FAMILY_INIT,
  CE_FAMILY_UTIL,
  CE_FAMILY_COUNT
} ce_family;

/* One error slot on the device per checked operation (8 uints, all 0xFF when
 * clean). With 64-bit atomics (ctx->atom64): 4 ulongs, minima of
 * (token << 32 | value word): [0] id low word, [1] id high word, [2] sequence
 * start low word, [3] high word. Without: [0] first bad-id token, [1] first
 * bad-position token, [2,3] the id (lo, hi), [4,5] that token's sequence start,
 * the values filled in by ce_record_error. The host keeps what the message needs. */
#define CE_SLOT_UINTS 8
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
} ce_slot_info;

/* Slots read aside (without waiting) when every slot was taken before a finish. */
typedef struct ce_slot_batch {
  struct ce_slot_batch *next;
  size_t used;
  cl_uint host[CE_SLOTS * CE_SLOT_UINTS];
  ce_slot_info info[CE_SLOTS];
} ce_slot_batch;

typedef struct ce_kernel_entry ce_kernel_entry;
typedef struct ce_program_set ce_program_set;

typedef struct ce_freq_cache {
  double base;
  int exponent, layout;
  size_t cols;
  cl_mem buffer; /* cols float2 (hi, lo); a negative hi marks a cos column */
  unsigned stamp;
} ce_freq_cache;
#define CE_FREQ_CACHE 4

/* A command of this context whose completion is checked by the next finish
 * (and waited for by destroy on a shared queue). */
typedef struct ce_tracked {
  cl_event event;
  const char *op;
} ce_tracked;

struct clembed_context {
  cl_platform_id platform;
  cl_device_id device;
  cl_context context;
  cl_command_queue queue;
  int in_order;
  int atom64; /* cl_khr_int64_base_atomics: error records need no second kernel */
  /* Kernel shapes for a CPU (whole rows per work-item, wide vectors) rather than
   * for a GPU (consecutive work-items on consecutive columns): the device type,
   * or CLEMBED_TUNING=cpu|gpu. */
  int cpu_shapes;
  cl_uint units; /* CL_DEVICE_MAX_COMPUTE_UNITS */
  cl_ulong cache_bytes; /* CL_DEVICE_GLOBAL_MEM_CACHE_SIZE (0: unknown) */
  int exact_div; /* CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT in CL_DEVICE_SINGLE_FP_CONFIG */
  /* a CPU device on the host's memory: large matrices are made in host memory
   * on huge pages (data.c) */
  int host_pages;
  char device_name[512];
  size_t max_work_group;
  size_t max_items[2]; /* CL_DEVICE_MAX_WORK_ITEM_SIZES in x and y */
  cl_ulong max_alloc;

  char *message; /* last failure */
  size_t message_cap;
  const char *op;               /* the public function running, for error details */
  clembed_error_detail detail;  /* the last failure's structured detail */
  int own_queue;                /* the queue was created by clembed (not a caller's) */

  ce_tracked *tracked;          /* commands not yet checked by a finish */
  size_t ntracked, tracked_cap;
  clembed_error_detail failed;  /* the first failed command found (status 0: none) */

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

  ce_freq_cache freq[CE_FREQ_CACHE];
  unsigned freq_stamp;
  /* The sinusoid table for positions [0, pe_rows) of the last sinusoid used by
   * the forward (F32, cols wide), so that the forward reads it instead of
   * recomputing sin/cos per element. */
  clembed_matrix pe;
  clembed_sinusoid pe_sinusoid;

  const char *test_source_override; /* test hook: replaces one family's source */
  int test_source_family;
};

/* ----- messages (context.c) */
clembed_status ce_fail(clembed_context *ctx, clembed_status code, const char *fmt, ...);
/* As ce_fail, with the detail's fields (op NULL: the running operation). */
clembed_status ce_fail_arg(clembed_context *ctx, clembed_status code, const char *op, const char *argument,
                           int64_t index, int64_t value, const char *fmt, ...);
/* Records a detail on the context (the message is left as it is). */
void ce_set_detail(clembed_context *ctx, clembed_status code, const char *op, const char *argument, int64_t index,
                   int64_t value);
/* A public function called with a NULL context. */
clembed_status ce_no_context(const char *op);

/* ----- tracked commands (context.c) */
/* Ends a device operation: on success keeps its last command's event (the
 * caller's `event`, retained, or *own) for the next finish to check; on
 * failure releases `own`. Returns status. */
clembed_status ce_track_end(clembed_context *ctx, clembed_status status, cl_event *event, const cl_event *own);
#define CE_EVENT_BEGIN(event, own) ((own) = NULL, (event) ? (event) : &(own))
void ce_set_message(clembed_context *ctx, const char *fmt, ...);
void ce_vset_message(clembed_context *ctx, const char *fmt, va_list ap);
void ce_append_message(clembed_context *ctx, const char *text);
/* The calling thread's clembed_last_error_message() and error detail, for
 * failures without a context (CLEMBED_OK and "" to clear them). */
void ce_set_last_error(clembed_status code, const char *op, const char *argument, const char *fmt, ...);
/* OpenCL call failed: records "what: CL_XXX" and returns the code. */
clembed_status ce_cl_fail(clembed_context *ctx, cl_int err, const char *what);

/* ----- deferred errors (context.c) */
/* Reserves an error slot for an operation (never waits: when all are in use,
 * their contents are read aside first). Returns the slot index in *slot. */
clembed_status ce_slot_reserve(clembed_context *ctx, const ce_slot_info *info, cl_uint *slot);
/* Waits, reads the slots, and returns (and clears) the first deferred error. */
clembed_status ce_collect(clembed_context *ctx);
void ce_slot_batches_free(clembed_context *ctx);

/* ----- programs and kernels (program.c) */
/* Returns the context's kernel `name` of `family` built with `options`
 * (preprocessor definitions such as "-DTABLE_DT=0"). Builds once per
 * cl_context, device and options. */
clembed_status ce_kernel(clembed_context *ctx, ce_family family, const char *options,
                         const char *name, cl_kernel *kernel);
clembed_status ce_program_set_acquire(clembed_context *ctx);
void ce_program_set_release(clembed_context *ctx);
void ce_kernels_release(clembed_context *ctx);
const char *ce_family_source(ce_family family, size_t *length);

/* Sets kernel arguments 0, 1, ... from CE_ARG(x) pairs ending with CE_END. */
clembed_status ce_set_args(clembed_context *ctx, cl_kernel k, const char *name, ...);
#define CE_ARG(x) sizeof(x), (const void *)&(x)
#define CE_END (size_t)0, (const void *)0

/* Enqueues a 2-D range: x = columns, y = rows, rounded up to the local size. */
clembed_status ce_enqueue_2d(clembed_context *ctx, cl_kernel k, const char *name, size_t nx,
                             size_t ny, cl_uint nwait, const cl_event *wait, cl_event *event);
/* Enqueues a 1-D range of n work-items, rounded up to the local size
 * (local size 0: chosen from the kernel and device; CE_LOCAL_CPU: for items
 * that each do a large piece of work, the CPU shapes: small work-groups, enough
 * of them to keep every compute unit busy). */
#define CE_LOCAL_CPU ((size_t)-1)
clembed_status ce_enqueue_1d(clembed_context *ctx, cl_kernel k, const char *name, size_t n,
                             size_t local, cl_uint nwait, const cl_event *wait, cl_event *event);

/* ----- argument checks (data.c) */
clembed_status ce_check_events(clembed_context *ctx, cl_uint n, const cl_event *list);
/* Checks a matrix against its buffer; `what` names it in messages. Fills *ld. */
clembed_status ce_check_matrix(clembed_context *ctx, const clembed_matrix *m, const char *what,
                               size_t *ld);
clembed_status ce_check_ids(clembed_context *ctx, const clembed_ids *ids, const char *what);
int ce_mul_overflows(size_t a, size_t b, size_t *out);
int ce_add_overflows(size_t a, size_t b, size_t *out);

/* ----- sinusoid frequencies (positional.c) */
clembed_status ce_sinusoid_check(clembed_context *ctx, const clembed_sinusoid *s);
clembed_status ce_sinusoid_freq(clembed_context *ctx, const clembed_sinusoid *s, size_t cols,
                                cl_mem *buffer);
void ce_freq_release(clembed_context *ctx);
/* The cached sinusoid table covering positions [0, end) for cols columns, or
 * NULL in *table (not an error) when building it is not worth it for a call of
 * `tokens` tokens. */
clembed_status ce_sinusoid_table(clembed_context *ctx, const clembed_sinusoid *s, size_t cols, size_t end,
                                 size_t tokens, const clembed_matrix **table);

/* ----- the error-recording kernel (forward.c) */
/* Enqueues the main kernel `k` of a checked operation (2-D, nx x ny; or, with
 * one_d, 1-D over ny work-items with CE_LOCAL_CPU; an empty range runs
 * nothing) and, when
 * `slot` is not CE_NO_SLOT, the error-recording kernel of the same program after
 * it; `event` (if not NULL) completes after both. */
#define CE_NO_SLOT 0xFFFFFFFFu
clembed_status ce_enqueue_checked(clembed_context *ctx, cl_kernel k, const char *name, int one_d, size_t nx,
                                  size_t ny, ce_family family, const char *options, cl_uint slot, const clembed_ids *ids,
                                  const clembed_ids *seq_offsets, size_t seq_len, cl_uint nwait,
                                  const cl_event *wait, cl_event *event);
/* The padding id normalised against `rows` (-1: none); fails for one outside the table. */
clembed_status ce_padding(clembed_context *ctx, int64_t padding_idx, size_t rows, const char *what, cl_long *out);
/* Checks the options shared by forward and backward: policy, dropout, sequence
 * offsets (enough for every sequence). */
clembed_status ce_check_common(clembed_context *ctx, const char *what, clembed_index_policy policy, float dropout,
                               size_t count, size_t seq_len, const clembed_ids *seq_offsets);

/* ----- dtype conversion on the host (data.c) */
uint16_t ce_f32_to_f16(float f);
float ce_f16_to_f32(uint16_t h);
uint16_t ce_f32_to_bf16(float f);
float ce_bf16_to_f32(uint16_t b);

#endif
