/*
 * clembed: the embedding layer of a transformer on any OpenCL device.
 *
 * Token-embedding lookup, sinusoidal and learned positional embeddings, the
 * fused forward `out = scale * W[id] + P[position]`, its backward (table
 * gradient, sparse SGD step) and Philox table initialisation.
 *
 * Conventions
 * - Every function that can fail returns a clembed_status: CLEMBED_OK (0), an
 *   OpenCL error code (negative, > -1000) passed through unchanged, or one of
 *   the CLEMBED_ERR_* codes below. clembed_context_message() holds the detail
 *   of the last failure on a context.
 * - Device-side functions end with the three arguments of clEnqueue*:
 *   (num_events_in_wait_list, event_wait_list, event). They enqueue and return
 *   at once. A non-NULL `event` receives an event that completes when the
 *   whole operation has completed; the caller releases it. The wait list is
 *   validated as OpenCL does: a NULL list with a non-zero count, or a non-NULL
 *   list with a zero count, is CLEMBED_ERR_INVALID_ARGUMENT.
 * - The library keeps no caller's cl_mem, queue or pointer past a call unless
 *   the call says so, and never prints, aborts or exits. Every release and
 *   destroy function accepts NULL.
 * - A context is used from one thread at a time. Different contexts may be
 *   used from different threads.
 */
#ifndef CLEMBED_H
#define CLEMBED_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#ifdef __APPLE__
#include <OpenCL/opencl.h>
#else
#include <CL/cl.h>
#endif

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CLEMBED_VERSION_MAJOR 0
#define CLEMBED_VERSION_MINOR 2
#define CLEMBED_VERSION_PATCH 0
#define CLEMBED_VERSION_NUMBER \
  (CLEMBED_VERSION_MAJOR * 10000 + CLEMBED_VERSION_MINOR * 100 + CLEMBED_VERSION_PATCH)

#if defined(_WIN32) && defined(CLEMBED_SHARED_BUILD)
#define CLEMBED_API __declspec(dllexport)
#elif defined(__GNUC__)
#define CLEMBED_API __attribute__((visibility("default")))
#else
#define CLEMBED_API
#endif

/* ------------------------------------------------------------------ status */

typedef enum clembed_status {
  CLEMBED_OK = 0,
  CLEMBED_ERR_INVALID_ARGUMENT = -2001,   /* a NULL, a zero or mismatched size, an unknown enum,
                                             overflow of a size computation, a buffer too small */
  CLEMBED_ERR_INDEX_OUT_OF_RANGE = -2002, /* a token id (or position) outside the table */
  CLEMBED_ERR_NO_DEVICE = -2003,          /* no OpenCL device, or none matches the device spec */
  CLEMBED_ERR_BUILD_FAILED = -2004,       /* a kernel did not compile; the log is in the message */
  CLEMBED_ERR_OUT_OF_MEMORY = -2005,      /* host or device allocation failed */
  CLEMBED_ERR_UNSUPPORTED = -2006         /* the device cannot do what was asked */
} clembed_status;

/* A fixed string for every code, OpenCL's included ("CL_INVALID_VALUE"); never NULL.
 * Unknown codes give "CLEMBED_UNKNOWN_STATUS". */
CLEMBED_API const char *clembed_status_string(clembed_status s);

/* CLEMBED_VERSION_NUMBER of the library that is running. */
CLEMBED_API unsigned clembed_version_number(void);

/* ----------------------------------------------------------------- context */

typedef struct clembed_context clembed_context; /* opaque */

/* Creates a context (OpenCL context and in-order queue) on the device named by
 * `device`:
 *   NULL or ""    the environment variable CLEMBED_DEVICE if set, else the first
 *                 GPU, else the first accelerator, else the first CPU device;
 *   "P:D"         platform index P, device index D (as `clembed devices` lists);
 *   "gpu", "cpu", "accelerator"  the first device of that type;
 *   anything else a case-insensitive substring of "platform name device name".
 * No match: CLEMBED_ERR_NO_DEVICE, and *ctx receives NULL. The reason (with the
 * list of devices that exist) is available from clembed_last_error_message(). */
CLEMBED_API clembed_status clembed_context_create(const char *device, clembed_context **ctx);

/* Kernel shapes. A context on a CPU device uses the CPU shapes (a work-item
 * writes whole rows, several side by side, with wide vectors; streaming stores
 * for an output larger than the device's cache); other devices use the GPU
 * shapes (consecutive work-items on consecutive columns). The environment
 * variable CLEMBED_TUNING=cpu or =gpu, read when a context is created,
 * overrides the choice (another non-empty value makes the context creation fail
 * with CLEMBED_ERR_INVALID_ARGUMENT). Results are the same bit for bit either
 * way (the atomic backward aside, whose order of additions is unspecified). */

/* Joins an existing pipeline: retains `queue` (released by destroy) and uses its
 * context and device. Enqueues nothing and waits for nothing on the queue (a
 * queue held back by a user event does not block it). */
CLEMBED_API clembed_status clembed_context_create_from_queue(cl_command_queue queue,
                                                             clembed_context **ctx);

/* Waits for the context's work, releases everything it owns. NULL is a no-op.
 * On a caller's queue (create_from_queue) it waits only for the commands clembed
 * enqueued, never for the caller's (no clFinish of a shared queue). */
CLEMBED_API void clembed_context_destroy(clembed_context *ctx);

/* The queue the context enqueues on (owned by the context; do not release). NULL for NULL. */
CLEMBED_API cl_command_queue clembed_context_queue(const clembed_context *ctx);

/* "platform name / device name"; "" for NULL. Owned by the context. */
CLEMBED_API const char *clembed_context_device_name(const clembed_context *ctx);

/* Detail of the last failure on this context, "" if none (and for NULL). Valid
 * until the next call on the context. */
CLEMBED_API const char *clembed_context_message(const clembed_context *ctx);

/* Detail of the last clembed_context_create / _create_from_queue failure in
 * this thread (there is no context to hold it), "" if none. */
CLEMBED_API const char *clembed_last_error_message(void);

/* Waits for all work enqueued through this context and returns the first
 * deferred error (an out-of-range id or position, recorded on the device), then
 * clears it. Device work that failed is reported first: a command of this
 * context whose event ended with a negative status (for instance one that
 * waited on a user event set to a negative status) gives that OpenCL status
 * (CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST for a failed wait list), as do
 * the blocking reads, which return it rather than data the failed command did
 * not write. */
CLEMBED_API clembed_status clembed_finish(clembed_context *ctx);

/* ------------------------------------------------- devices and error detail */

typedef struct clembed_device_info {
  char spec[16];              /* "P:D", usable as a device spec */
  char platform[128], name[128];
  cl_device_type type;
  int is_default;             /* the device that a NULL spec picks (CLEMBED_DEVICE included) */
  uint64_t global_mem_bytes, max_alloc_bytes;
} clembed_device_info;

/* Lists the OpenCL devices in the order `clembed devices` shows them: *count
 * receives the number of devices, and the first min(capacity, *count) entries
 * of list are filled. list may be NULL with capacity 0 (to count). No device is
 * not an error (*count = 0). */
CLEMBED_API clembed_status clembed_devices(clembed_device_info *list, size_t capacity, size_t *count);

typedef struct clembed_error_detail {
  clembed_status status;      /* CLEMBED_OK when nothing has failed */
  const char *operation;      /* "clembed_embed", ... ("" if none) */
  const char *argument;       /* "ids", "sequence_offsets", "positions", "position_table", ... ("" if none) */
  int64_t index;              /* the element of that argument, -1 if none */
  int64_t value;              /* the bad value (0 if none) */
} clembed_error_detail;

/* The structured detail of the last failure on ctx (the one that
 * clembed_context_message describes), the deferred errors that clembed_finish
 * returns included: a bad id is argument "ids", index = the token, value = the
 * id; a position outside a learned table is "position_table" (or
 * "position_grad" in the backward), index = the token, value = the position; a
 * negative sequence start is "sequence_offsets", index = the sequence, value =
 * its start. With ctx NULL: the last failure in this thread of a call that had
 * no context (context creation, clembed_devices, a NULL ctx). The strings are
 * static. CLEMBED_ERR_INVALID_ARGUMENT only when d is NULL. */
CLEMBED_API clembed_status clembed_context_error(const clembed_context *ctx, clembed_error_detail *d);

/* ------------------------------------------------------------- device data */

typedef enum clembed_dtype { CLEMBED_F32 = 0, CLEMBED_F16 = 1, CLEMBED_BF16 = 2 } clembed_dtype;
typedef enum clembed_index_type { CLEMBED_I32 = 0, CLEMBED_I64 = 1 } clembed_index_type;

/* Bytes of one element: 4, 2, 2 (0 for an unknown value). */
CLEMBED_API size_t clembed_dtype_size(clembed_dtype dtype);

typedef struct clembed_matrix { /* row-major rows x cols in a cl_mem */
  cl_mem buffer;
  size_t offset;                /* first element, in elements */
  size_t rows, cols;
  size_t ld;                    /* elements between row starts; 0 means cols */
  clembed_dtype dtype;
} clembed_matrix;

typedef struct clembed_ids {    /* token ids in a cl_mem */
  cl_mem buffer;
  size_t offset;                /* in elements */
  size_t count;
  clembed_index_type type;
} clembed_ids;

/* A user's own buffers are used by filling the structs directly; every call
 * checks that offset, ld and the extent fit in the buffer (CL_MEM_SIZE), and
 * refuses a buffer or a wait-list event of another cl_context
 * (CLEMBED_ERR_INVALID_ARGUMENT naming it).
 *
 * F16 is IEEE binary16, BF16 the top 16 bits of binary32; conversions to them
 * round to nearest even (a NaN stays a NaN, made quiet, with its sign and the
 * top bits of its payload: the same conversion on the host and in every
 * kernel). Arithmetic is always done in float32 (and a NaN it produces or
 * passes on follows the device's rules). */

/* Allocates a zero-filled rows x cols matrix (ld = cols, offset 0); the caller
 * owns it and releases it with clembed_matrix_release. A matrix with 0 rows or
 * 0 cols is allowed (its buffer holds one element). Blocking.
 * On Linux, on a CPU device that shares the host's memory, a buffer of 4 MiB
 * or more that clembed allocates (a matrix here, or ids) lives in host memory
 * of its own, aligned to 2 MiB and advised for transparent huge pages, which
 * the device uses in place (CL_MEM_USE_HOST_PTR): rows gathered at random then
 * cost fewer TLB misses. That memory is freed when the buffer is (a destructor
 * callback), so a buffer the caller retains stays valid. Elsewhere it is an
 * ordinary buffer. */
CLEMBED_API clembed_status clembed_matrix_create(clembed_context *ctx, size_t rows, size_t cols,
                                                 clembed_dtype dtype, clembed_matrix *m);

/* Writes rows*cols dense host values of `host_dtype` into m (converting to
 * m->dtype, honouring offset and ld). Blocking. */
CLEMBED_API clembed_status clembed_matrix_write(clembed_context *ctx, clembed_matrix *m,
                                                const void *host, clembed_dtype host_dtype);

/* Reads m into rows*cols dense host values of `host_dtype`. Blocking: waits for
 * the context's work and returns a pending deferred error (after reading). */
CLEMBED_API clembed_status clembed_matrix_read(clembed_context *ctx, const clembed_matrix *m,
                                               void *host, clembed_dtype host_dtype);

/* Releases m->buffer and zeroes *m. NULL is a no-op. */
CLEMBED_API void clembed_matrix_release(clembed_matrix *m);

/* Copies `count` host ids of `type` into a new buffer (offset 0). count may be 0
 * (host may then be NULL). Blocking. */
CLEMBED_API clembed_status clembed_ids_create(clembed_context *ctx, const void *host, size_t count,
                                              clembed_index_type type, clembed_ids *ids);

/* Reads ids->count ids of ids->type into host. Blocking, returns a pending deferred error. */
CLEMBED_API clembed_status clembed_ids_read(clembed_context *ctx, const clembed_ids *ids, void *host);

/* Releases ids->buffer and zeroes *ids. NULL is a no-op. */
CLEMBED_API void clembed_ids_release(clembed_ids *ids);

/* -------------------------------------------------------------- operations */

typedef enum clembed_index_policy {
  CLEMBED_INDEX_CHECK = 0, /* default: a bad id gives a zero token row and a deferred
                              CLEMBED_ERR_INDEX_OUT_OF_RANGE naming the first bad
                              position and its value */
  CLEMBED_INDEX_CLAMP,     /* clamp into [0, rows-1] */
  CLEMBED_INDEX_ZERO,      /* zero token row, no error */
  CLEMBED_INDEX_WRAP       /* ONNX Gather: -rows <= id < 0 means id + rows; other bad ids as CHECK */
} clembed_index_policy;

typedef enum clembed_exponent { CLEMBED_EXPONENT_PAIR = 0, CLEMBED_EXPONENT_INDEX = 1 } clembed_exponent;
typedef enum clembed_layout { CLEMBED_LAYOUT_INTERLEAVED = 0, CLEMBED_LAYOUT_HALVES = 1 } clembed_layout;

/* Sinusoid, with d = cols, h = ceil(d/2): column i of position p is
 *   INTERLEAVED: sin(p*w) for even i, cos(p*w) for odd i, with
 *                w = base^(-2*floor(i/2)/d) (PAIR) or w = base^(-i/d) (INDEX);
 *   HALVES:      sin(p*w_i) for i < h, cos(p*w_(i-h)) for i >= h, w_k = base^(-2k/d);
 *                INDEX with HALVES is CLEMBED_ERR_INVALID_ARGUMENT.
 * base must be finite and > 0. For base >= 1 (every frequency at most 1) every
 * value is within 1e-6 of the float64 value for every position below 2^20
 * (float32 output; docs/performance.md has the measured worst case): the frequencies are computed in double
 * on the host, and the angle is carried in float-float and reduced modulo 2*pi in
 * extended precision on the device. A base below 1 gives frequencies above 1, and
 * the error grows with the angle p*w (about 1e-6 at 2^26, unbounded past 2^36). */
typedef struct clembed_sinusoid {
  double base; /* 10000 in the original Transformer */
  clembed_exponent exponent;
  clembed_layout layout;
} clembed_sinusoid;

typedef enum clembed_positions {
  CLEMBED_POSITIONS_NONE = 0,
  CLEMBED_POSITIONS_SINUSOID,
  CLEMBED_POSITIONS_TABLE
} clembed_positions;

/* No padding id. Before 0.2 this was -1; -1 now means the last row, as in PyTorch. */
#define CLEMBED_NO_PADDING INT64_MIN

typedef struct clembed_embed_options {
  float scale;                          /* token row multiplier, e.g. sqrt(d_model) */
  clembed_index_policy policy;
  int64_t padding_idx;                  /* this id's token row counts as zero; a negative value
                                           counts from the end (-1 = rows-1, as nn.Embedding);
                                           CLEMBED_NO_PADDING for none */
  clembed_positions positions;
  clembed_sinusoid sinusoid;            /* for POSITIONS_SINUSOID */
  const clembed_matrix *position_table; /* for POSITIONS_TABLE (learned positions), rows = positions,
                                           cols = the table's cols */
  size_t seq_len;                       /* tokens per sequence; 0 means all ids are one sequence */
  size_t position_offset;               /* position of each sequence's first token (KV-cache decoding) */
  const clembed_ids *sequence_offsets;  /* optional: one first position per sequence, overrides
                                           position_offset; needs count >= number of sequences */
  float dropout;                        /* training: probability in [0, 1) of zeroing an output
                                           element (inverted dropout) */
  uint64_t dropout_seed;                /* the mask is Philox(dropout_seed, element index) */
} clembed_embed_options;

/* scale 1, CHECK, no padding, no positions, sinusoid {10000, PAIR, INTERLEAVED},
 * no position table, seq_len 0, position_offset 0, no sequence offsets, dropout 0, seed 0. */
CLEMBED_API clembed_embed_options clembed_embed_defaults(void);

/* The sinusoid table for positions first_position .. first_position + out->rows - 1,
 * d = out->cols, into `out` (any dtype). s NULL means {10000, PAIR, INTERLEAVED}. */
CLEMBED_API clembed_status clembed_positional(clembed_context *ctx, const clembed_sinusoid *s,
                                              size_t first_position, clembed_matrix *out,
                                              cl_uint num_events_in_wait_list,
                                              const cl_event *event_wait_list, cl_event *event);

/* clembed_embed with the defaults: out[i] = table[ids[i]]. */
CLEMBED_API clembed_status clembed_lookup(clembed_context *ctx, const clembed_matrix *table,
                                          const clembed_ids *ids, clembed_matrix *out,
                                          cl_uint num_events_in_wait_list,
                                          const cl_event *event_wait_list, cl_event *event);

/* The fused forward in one pass over the output:
 *   out[i] = dropout(scale * table[ids[i]] + P[p]),
 * out has ids->count rows and table->cols columns (any dtype). Token i is in
 * sequence b = i / seq_len at position p = first_b + i % seq_len, where first_b
 * is sequence_offsets[b] if given, else position_offset. P is nothing, the
 * sinusoid, or position_table (a position past its rows is a deferred
 * CLEMBED_ERR_INDEX_OUT_OF_RANGE and that row's positional part is zero). The
 * padding id's token row is zero; its positional part is still added.
 * A position_offset past 2^63 - 1 is a bad position too. With 0 columns there is nothing to
 * compute: no kernel runs and the ids are not checked (likewise in the backward).
 * opt NULL means clembed_embed_defaults(). */
CLEMBED_API clembed_status clembed_embed(clembed_context *ctx, const clembed_matrix *table,
                                         const clembed_ids *ids, const clembed_embed_options *opt,
                                         clembed_matrix *out, cl_uint num_events_in_wait_list,
                                         const cl_event *event_wait_list, cl_event *event);

/* ---------------------------------------------------------------- backward */

typedef struct clembed_backward_options {
  float scale;                     /* the forward scale; gradients are multiplied by it */
  clembed_index_policy policy;     /* as in the forward: CLAMP sends the gradient to the clamped
                                      row, ZERO and CHECK drop it (CHECK also reports) */
  int64_t padding_idx;             /* gets no gradient; CLEMBED_NO_PADDING */
  int scale_grad_by_freq;          /* divide each id's gradient by its count in this call */
  int deterministic;               /* 1 (default): contributions to each row are added in
                                      ascending token order; bit-identical on every run.
                                      0: float atomics (compare-and-swap), order unspecified */
  int accumulate;                  /* 1 (default): add into grad_table; 0: overwrite it (rows
                                      that no token touches become 0) */
  size_t seq_len, position_offset; /* as in the forward, for position_grad */
  const clembed_ids *sequence_offsets;
  clembed_matrix *position_grad;   /* optional: gradient of a learned position table, F32,
                                      accumulated (added into) in ascending token order */
  float dropout;                   /* the forward's dropout and seed: the same mask is applied */
  uint64_t dropout_seed;
} clembed_backward_options;

/* scale 1, CHECK, no padding, scale_grad_by_freq 0, deterministic 1, accumulate 1,
 * seq_len 0, position_offset 0, no sequence offsets, no position_grad, dropout 0, seed 0. */
CLEMBED_API clembed_backward_options clembed_backward_defaults(void);

/* grad_table[v] (+)= scale * sum of grad_out[i] over tokens i with ids[i] == v
 * (divided by the count of v with scale_grad_by_freq), in float32. grad_out has
 * ids->count rows and grad_table->cols columns (any dtype); grad_table must be F32.
 * opt NULL means clembed_backward_defaults().
 *
 * The float32 operations, in this order: S = 0; S = S + m_i for the tokens i of
 * row v in ascending order, where m_i is grad_out[i][c] (with dropout: times
 * 1/(1 - dropout) where the mask keeps it, else 0); r = scale * S; with
 * scale_grad_by_freq r = r / count(v) (the tokens that reach row v after the
 * index policy); then grad_table[v][c] = r, or += r with accumulate.
 *
 * deterministic = 1 (default): the tokens are sorted by row on the device (a
 * stable radix sort, O(ids) temporaries) and each row's segment is summed in
 * order, split over columns only, so a very frequent id stays parallel.
 * deterministic = 0: a compare-and-swap float add per element; it can win on a
 * GPU with few repeated ids and a huge vocabulary, and is slower on a CPU.
 * position_grad (F32, rows = positions, cols = grad cols) receives the unscaled,
 * unmasked-by-policy sum per position, always in ascending token order, always
 * added; a position past its rows is a deferred CLEMBED_ERR_INDEX_OUT_OF_RANGE. */
CLEMBED_API clembed_status clembed_backward(clembed_context *ctx, const clembed_matrix *grad_out,
                                            const clembed_ids *ids,
                                            const clembed_backward_options *opt,
                                            clembed_matrix *grad_table,
                                            cl_uint num_events_in_wait_list,
                                            const cl_event *event_wait_list, cl_event *event);

/* table[v] -= learning_rate * grad[v] for the rows v that occur in ids, where
 * grad[v] is r of clembed_backward (the same float32 operations), then rounded to
 * the table's dtype (F32, F16 or BF16); no other row is touched and no dense
 * gradient is materialised (temporaries are O(ids)). Always the sorted,
 * deterministic path (deterministic and accumulate are ignored); a position_grad
 * in opt is added into as by clembed_backward. opt NULL means the defaults. */
CLEMBED_API clembed_status clembed_sgd_update(clembed_context *ctx, const clembed_matrix *grad_out,
                                              const clembed_ids *ids, float learning_rate,
                                              const clembed_backward_options *opt,
                                              clembed_matrix *table,
                                              cl_uint num_events_in_wait_list,
                                              const cl_event *event_wait_list, cl_event *event);

/* ------------------------------------------------------------ initialisation */

/* Counter-based Philox4x32-10 with key (seed low 32 bits, seed high 32 bits) and
 * counter (e low 32 bits, e high 32 bits, 0, 0) for element e = r*cols + c,
 * giving words x0..x3. With u(x) = (x >> 8) * 2^-24 in [0, 1):
 *   uniform: low + (high - low) * u(x0), evaluated as 2 * (low/2 + (high/2 - low/2) * u(x0))
 *            (the same float32 result for normal bounds, and no overflow for any finite ones);
 *   normal:  mean + std * sqrt(-2 ln(1 - u(x0))) * cos(2 pi u(x1)) (Box-Muller).
 * computed in float32 on the device (uniform: the same bits on every device, as
 * it uses only correctly rounded operations; normal: within the device's
 * log/sqrt/cospi accuracy, a few ulp). Every work size gives the same numbers. */
CLEMBED_API clembed_status clembed_matrix_init_normal(clembed_context *ctx, clembed_matrix *m,
                                                      float mean, float std, uint64_t seed,
                                                      cl_uint num_events_in_wait_list,
                                                      const cl_event *event_wait_list,
                                                      cl_event *event);
CLEMBED_API clembed_status clembed_matrix_init_uniform(clembed_context *ctx, clembed_matrix *m,
                                                       float low, float high, uint64_t seed,
                                                       cl_uint num_events_in_wait_list,
                                                       const cl_event *event_wait_list,
                                                       cl_event *event);

/* Dropout mask: output element e = i*cols + c of the forward is kept when
 * u(x0) >= dropout for Philox(dropout_seed, e) as above, and then multiplied by
 * 1 / (1 - dropout). */

#ifdef __cplusplus
}
#endif

#endif /* CLEMBED_H */
