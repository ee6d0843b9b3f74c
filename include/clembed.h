/*
 * clembed: the embedding layer of a transformer on any OpenCL device.
 *
 * Token-embedding lookup, sinusoidal and learned positional embeddings, the
 * fused forward `out = scale * W[id] + P[position]` (with BERT's segments and a
 * fused LayerNorm or RMSNorm), its backward (table gradient, sparse SGD step)
 * and Philox table initialisation.
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
 * - Option structs grow without breaking a caller built against an earlier
 *   version, through a bound FFI (ctypes, cffi, bindgen) as well as through C
 *   (see "Option structs" below): each starts with `size_t struct_size`, set by
 *   its _defaults() function and checked by every call, which reads the
 *   caller's struct only as far as struct_size goes.
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
#define CLEMBED_VERSION_MINOR 4
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
  CLEMBED_ERR_UNSUPPORTED = -2006,        /* the device cannot do what was asked */
  CLEMBED_ERR_COMMUNICATION = -2007,      /* an MPI call of clembed_mpi failed (MPI's error string
                                             is in the message) */
  CLEMBED_ERR_FILE = -2008                /* a file could not be written (no space, a write error, a
                                             folder that does not exist); the message names the path */
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
 * writes whole rows with wide vectors, several side by side, and where the
 * device takes prefetch hints (POCL) asks for the rows it will take next while
 * it writes; streaming stores for an output larger than the device's cache);
 * other devices use the GPU shapes (consecutive work-items on consecutive
 * columns). The environment variable CLEMBED_TUNING=cpu or =gpu, read when a
 * context is created, overrides the choice (another non-empty value makes the
 * context creation fail with CLEMBED_ERR_INVALID_ARGUMENT), and
 * CLEMBED_TUNE="name=count,..." sets single numbers of the chosen table (the
 * fields of ce_tuning in src/runtime/runtime.h, e.g. "embed_rows=4,fold_ahead=8",
 * for tuning a new device; an unknown name, a value that is not a count or one
 * the parameter does not take, alone or with the others (docs/tuning.md),
 * fails the same way). Results are the same bit for bit whatever the shapes
 * (the atomic backward aside, whose order of additions is unspecified). */

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

/* The tuning this context's device runs with (docs/tuning.md): the entries of
 * the tuning database that apply to it and where each came from, e.g.
 * "default cpu, device pocl-cpu (built in); device my-gpu
 * (/home/u/.cache/clembed/tuning.json)", then any CLEMBED_TUNE settings. The
 * built-in entries are tuning/devices.conf's; a user's own, written by
 * `clembed tune`, are read from CLEMBED_TUNING_FILE (empty or "none": no
 * file), else $XDG_CACHE_HOME/clembed/tuning.json, else
 * ~/.cache/clembed/tuning.json (JSON, or the built-in file's format),
 * whenever a context is made (not with CLEMBED_TUNING=cpu|gpu, which asks for
 * a type's built-in shapes). A file that cannot be read or parsed fails no
 * context: it is left out (the built-in entries apply), this string says
 * "; not read: PATH", and clembed_context_message names the file and what is
 * wrong (with the line and the entry where the fault is in one). An earlier
 * release's tuning.conf in that folder is read where there is no
 * tuning.json (clembed_tuning_file names tuning.json). No entry changes a bit of any result. "" for NULL. Owned by
 * the context. */
CLEMBED_API const char *clembed_context_tuning(const clembed_context *ctx);

/* The user's tuning file (see clembed_context_tuning), which `clembed tune`
 * writes, into path (capacity bytes): CLEMBED_OK; CLEMBED_ERR_UNSUPPORTED when
 * there is none (CLEMBED_TUNING_FILE empty or "none", no HOME);
 * CLEMBED_ERR_INVALID_ARGUMENT for a NULL path or a capacity it does not fit. */
CLEMBED_API clembed_status clembed_tuning_file(char *path, size_t capacity);

/* The value this context runs with of tuning parameter `name` (docs/tuning.md
 * lists them) into *value: CLEMBED_OK; CLEMBED_ERR_INVALID_ARGUMENT for a NULL
 * argument or a name that is not a parameter (the message names it). */
CLEMBED_API clembed_status clembed_tuning_value(const clembed_context *ctx, const char *name, uint64_t *value);

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

/* Records a failure on ctx the way clembed's own calls record theirs, for a
 * library built on clembed (libclembed_mpi is one): clembed_context_message
 * then gives the message (printf-style fmt), clembed_context_error the detail
 * (status, operation, argument, index, value; operation and argument are kept
 * as pointers: pass strings that live as long as the context, such as
 * literals; NULL means ""). With ctx NULL they go to this thread's
 * clembed_last_error_message and clembed_context_error(NULL, ...). Returns
 * status. A deferred error that clembed_finish would return is not touched. */
CLEMBED_API clembed_status clembed_context_fail(clembed_context *ctx, clembed_status status, const char *operation,
                                                const char *argument, int64_t index, int64_t value,
                                                const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 7, 8)))
#endif
    ;

/* ---------------------------------------------------------- option structs
 *
 * The structs a call reads its options from can grow in a later version
 * without breaking a caller built against an earlier one, whether the caller
 * is C (which the SONAME already guards) or a bound FFI (ctypes, cffi,
 * bindgen, which no SONAME guards):
 *   clembed_sinusoid, clembed_norm, clembed_embed_options, clembed_embed_grads,
 *   clembed_backward_options, clembed_optimizer, clembed_rope,
 *   clembed_bag_options and clembed_bag_feature.
 * Each starts with
 *   size_t struct_size;   the bytes of the struct as the caller knows it
 * which its _defaults() function sets to this version's sizeof. Every call
 * that takes one (by pointer, or inside another: the sinusoid and the norm of
 * clembed_embed_options, the options of a clembed_bag_feature) reads the
 * caller's struct only as far as struct_size goes; the fields past it (those
 * a later version added) take their defaults, and nothing past it is read.
 * A valid struct_size is the end of one of the struct's fields, from the end
 * of its first field after struct_size up to this version's sizeof (the sizeof
 * of an earlier version's struct is one: fields are only ever added at the
 * end). Anything else is CLEMBED_ERR_INVALID_ARGUMENT naming the argument
 * ("opt", "o", "r", "s", "grads", "features" with the element as index; "norm",
 * "sinusoid" or "options" for one inside another) with the bad value: a
 * struct_size of 0 (a struct zeroed or filled by hand without it), one larger
 * than this version's sizeof (a caller built against a later version), and a
 * struct of clembed 0.3 or earlier, which has no struct_size (its first bytes
 * are a float, a double, an enum or a pointer, never a valid size).
 * An array of them (clembed_bag_feature features[n], the n optimizers of
 * clembed_bags_optimizer_step) is read with a stride of its first element's
 * struct_size, which every element must carry.
 *
 * How a caller keeps up:
 * - C: take the struct from its _defaults() function and set the fields
 *   wanted (`clembed_embed_options o = clembed_embed_defaults(); o.scale = 8;`),
 *   or set struct_size = sizeof(the struct) and every field; never a
 *   positional initializer (`{10000.0, ...}` puts the first value in
 *   struct_size). Recompiling against a later header gives that version's
 *   fields their defaults.
 * - A binding declares each struct exactly as this header does, struct_size
 *   first, and either fills it from the _defaults() function (returned by
 *   value) or sets struct_size to the size of its own declaration
 *   (ctypes.sizeof(Structure), ffi.sizeof("clembed_embed_options")) and
 *   every field. A binding written against this header keeps working with a
 *   later library: the fields it does not know take their defaults. It may
 *   compare its sizes with clembed_struct_size() when it loads the library.
 * Not option structs, and fixed in layout: clembed_matrix and clembed_ids
 * (descriptors of a caller's buffers, filled by hand and copied into other
 * structs and arrays), and the structs a call fills (clembed_device_info,
 * clembed_error_detail, clembed_tensor_info): a later version that needs more
 * there adds a struct and a call instead of growing them.
 */
typedef enum clembed_struct_type {
  CLEMBED_STRUCT_SINUSOID = 0,
  CLEMBED_STRUCT_NORM = 1,
  CLEMBED_STRUCT_EMBED_OPTIONS = 2,
  CLEMBED_STRUCT_EMBED_GRADS = 3,
  CLEMBED_STRUCT_BACKWARD_OPTIONS = 4,
  CLEMBED_STRUCT_OPTIMIZER = 5,
  CLEMBED_STRUCT_ROPE = 6,
  CLEMBED_STRUCT_BAG_OPTIONS = 7,
  CLEMBED_STRUCT_BAG_FEATURE = 8
} clembed_struct_type;

/* This library's sizeof of the option struct `type` (what its _defaults()
 * puts in struct_size); 0 for an unknown type. */
CLEMBED_API size_t clembed_struct_size(clembed_struct_type type);

/* Reads a caller's option struct of `type` the way every clembed call does,
 * for a library or binding built on clembed (libclembed_mpi is one): *out, a
 * whole struct of this version that already holds the defaults (from the
 * _defaults() function), receives the caller's fields as far as in->struct_size
 * goes (a struct inside it likewise), and its struct_size (and theirs) become
 * this version's sizeof. in NULL leaves *out as it is. A struct_size that is
 * not valid (above) is CLEMBED_ERR_INVALID_ARGUMENT, recorded as
 * clembed_context_fail records a failure (operation and argument kept as
 * pointers; ctx NULL: this thread's last error), *out then unspecified; so
 * are out NULL and an unknown type. */
CLEMBED_API clembed_status clembed_struct_read(clembed_context *ctx, const char *operation, const char *argument,
                                               clembed_struct_type type, const void *in, void *out);

/* ------------------------------------------------------------- device data */

typedef enum clembed_dtype { CLEMBED_F32 = 0, CLEMBED_F16 = 1, CLEMBED_BF16 = 2,
                             CLEMBED_Q8_0 = 3, CLEMBED_Q4_0 = 4, CLEMBED_Q4_K = 5, CLEMBED_Q6_K = 6,
                             /* ggml's other block types a GGUF table ships in (layouts below) */
                             CLEMBED_Q4_1 = 7, CLEMBED_Q5_0 = 8, CLEMBED_Q5_1 = 9, CLEMBED_Q2_K = 10,
                             CLEMBED_Q3_K = 11, CLEMBED_Q5_K = 12, CLEMBED_IQ4_NL = 13, CLEMBED_IQ4_XS = 14,
                             CLEMBED_IQ2_XXS = 15, CLEMBED_IQ2_XS = 16, CLEMBED_IQ2_S = 17, CLEMBED_IQ3_XXS = 18,
                             CLEMBED_IQ3_S = 19, CLEMBED_IQ1_S = 20, CLEMBED_IQ1_M = 21, CLEMBED_TQ1_0 = 22,
                             CLEMBED_TQ2_0 = 23, CLEMBED_MXFP4 = 24,
                             /* FBGEMM's row-wise types (described below) */
                             CLEMBED_I8_ROWWISE = 25, CLEMBED_I4_ROWWISE = 26, CLEMBED_I2_ROWWISE = 27,
                             CLEMBED_I8_TBE = 28, CLEMBED_I4_TBE = 29, CLEMBED_I2_TBE = 30,
                             CLEMBED_FP8_ROWWISE = 31 } clembed_dtype;
typedef enum clembed_index_type { CLEMBED_I32 = 0, CLEMBED_I64 = 1 } clembed_index_type;

/* Bytes of one element: 4, 2, 2 for F32, F16, BF16; 0 for the block-quantized
 * dtypes (see clembed_dtype_row_bytes) and for an unknown value. */
CLEMBED_API size_t clembed_dtype_size(clembed_dtype dtype);

/* Values per block: 1 for F32, F16, BF16; 32 for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 * IQ4_NL and MXFP4; 256 for the K, IQ4_XS, IQ2, IQ3, IQ1 and TQ types; 0 for
 * FBGEMM's row-wise types (a row is their block: clembed_dtype_row_bytes) and
 * for an unknown value (clembed_dtype_name says "unknown" for that one). */
CLEMBED_API size_t clembed_dtype_block_values(clembed_dtype dtype);

/* Bytes of a row of `cols` values: 4*cols (F32), 2*cols (F16, BF16), and
 * cols / block values * block bytes for the block types (the table below:
 * cols/32*34 for Q8_0, cols/256*144 for Q4_K, ...); for FBGEMM's row-wise types
 * the row's values and its scale and bias (cols + 8 for I8_ROWWISE, ...:
 * described below). 0 for an unknown dtype, for cols not a multiple of the
 * block size (the cols a row-wise type cannot take), and when the size
 * overflows size_t. */
CLEMBED_API size_t clembed_dtype_row_bytes(clembed_dtype dtype, size_t cols);

/* clembed's lower-case name of a dtype, as the CLI and the Python package
 * spell it: "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k", "q4_1", "q5_0",
 * "q5_1", "q2_k", "q3_k", "q5_k", "iq4_nl", "iq4_xs", "iq2_xxs", "iq2_xs",
 * "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m", "tq1_0", "tq2_0", "mxfp4",
 * "i8_rowwise", "i4_rowwise", "i2_rowwise", "i8_tbe", "i4_tbe", "i2_tbe",
 * "fp8_rowwise";
 * "unknown" for a value that is none. Never NULL. */
CLEMBED_API const char *clembed_dtype_name(clembed_dtype dtype);

/* Block-quantized tables use ggml's (GGUF's) block layouts byte for byte, so a
 * table from a GGUF file is used as it lies (little-endian, f16 scales; the
 * fields in order, with their byte offsets):
 *   Q8_0     32 values,  34 bytes: d, int8 q[32]; value j = q[j]*d
 *   Q4_0     32 values,  18 bytes: d, uint8 q[16]; value j = ((q[j] & 15) - 8)*d,
 *            value j+16 = ((q[j] >> 4) - 8)*d
 *   Q4_1     32 values,  20 bytes: d, m, q[16]; value j = (q[j] & 15)*d + m, j+16 its high nibble
 *   Q5_0     32 values,  22 bytes: d, qh (uint32: bit j is value j's fifth bit), q[16];
 *            value = ((nibble | bit << 4) - 16)*d
 *   Q5_1     32 values,  24 bytes: d, m, qh, q[16]; value = (nibble | bit << 4)*d + m
 *   IQ4_NL   32 values,  18 bytes: d, q[16]; value = d*kvalues_iq4nl[nibble]
 *   Q2_K    256 values,  84 bytes: scales[16] 0 (4-bit scale and min per 16 values),
 *            q[64] 16 (2 bits), d 80, dmin 82
 *   Q3_K    256 values, 110 bytes: hmask[32] 0 (third bits), q[64] 32 (2 bits),
 *            scales[12] 96 (sixteen 6-bit scales), d 108
 *   Q4_K    256 values, 144 bytes: d, dmin, 12 bytes of 6-bit scales and mins,
 *            128 bytes of 4-bit quants
 *   Q5_K    256 values, 176 bytes: d, dmin, scales[12] 4 (as Q4_K's), qh[32] 16
 *            (fifth bits), q[128] 48 (4 bits)
 *   Q6_K    256 values, 210 bytes: 128 bytes of low 4 bits, 64 of high 2 bits,
 *            int8 scales[16], d
 *   IQ4_XS  256 values, 136 bytes: d, scales_h (uint16), scales_l[4] 4 (a 6-bit
 *            scale per 32 values), q[128] 8; value = d*(scale - 32)*kvalues_iq4nl[nibble]
 *   IQ2_XXS 256 values,  66 bytes: d, then per 32 values 4 grid indices (iq2xxs_grid)
 *            and a uint32 of four 7-bit sign codes and a 4-bit scale
 *   IQ2_XS  256 values,  74 bytes: d, uint16 q[32] 2 (9-bit grid index, 7-bit sign
 *            code), scales[8] 66
 *   IQ2_S   256 values,  82 bytes: d, q[32] 2 (grid index low bits), signs[32] 34,
 *            qh[8] 66 (index high bits), scales[8] 74
 *   IQ3_XXS 256 values,  98 bytes: d, q[64] 2 (grid indices of 4 values), then per 32
 *            values a uint32 of sign codes and a scale (66)
 *   IQ3_S   256 values, 110 bytes: d, q[64] 2, qh[8] 66, signs[32] 74, scales[4] 106
 *   IQ1_S   256 values,  50 bytes: d, q[32] 2, uint16 qh[8] 34 (index high bits,
 *            a 3-bit scale and the sign of a 0.125 shift per 32 values)
 *   IQ1_M   256 values,  56 bytes: q[32] 0, qh[16] 32, scales[8] 48 (3-bit scales;
 *            d is the f16 of their four top nibbles)
 *   TQ1_0   256 values,  54 bytes: q[48] 0 (5 ternary digits a byte), qh[4] 48 (4 a byte),
 *            d 52; value v = (t - 1)*d for digit t = ((uint8)(b*3^n)*3) >> 8 of byte b:
 *            b = q[v%32], n = v/32 for v < 160; q[32 + v%16], (v-160)/16 for v < 240;
 *            qh[v%4], (v-240)/4 for the last 16
 *   TQ2_0   256 values,  66 bytes: q[64] 0 (2 bits), d 64; value 128h + 32l + m
 *            (h < 2, l < 4, m < 32) = (((q[32h + m] >> 2l) & 3) - 1)*d
 *   MXFP4    32 values,  17 bytes: e (uint8, an E8M0 exponent) 0, q[16] 1; value j =
 *            kvalues_mxfp4[nibble]*2^(e - 128) (ggml's GGML_E8M0_TO_FP32_HALF, whose e = 255
 *            is 2^127), j < 16 the low nibble of q[j], j + 16 its high one
 * (d, m, dmin: f16 at offset 0, 2 unless given.) The IQ2, IQ3 and IQ1 types'
 * values come from ggml's grids (iq2xxs_grid ... iq1s_grid, ksigns_iq2xs), the
 * IQ4 types' from kvalues_iq4nl, MXFP4's from kvalues_mxfp4 (twice the E2M1
 * values): the tables of ggml's ggml-common.h, which the
 * kernels hold in constant memory (at most 16 KiB per program: every device's
 * 64 KiB holds them). Values are dequantized exactly as ggml's dequantize_row_*
 * (the same integer operations and float32 products in the same order, none
 * fused; the kernels compute an MXFP4 product of e 0 or 1, exact, as two exact
 * ones), on the host and in every kernel; a NaN or infinite f16 scale gives
 * what ggml's code gives (a NaN's payload is the device's), and so does an MXFP4
 * value past FLT_MAX (an infinity). MXFP4's values below 2^-126 in magnitude (e 0
 * or 1 with a small nibble) are subnormal floats: a device that flushes subnormals
 * (without CL_FP_DENORM) gives 0 for them. For these dtypes cols, offset and ld count values and
 * must be multiples of the block size (clembed_dtype_block_values), else
 * CLEMBED_ERR_INVALID_ARGUMENT; row r of a matrix starts at byte
 * clembed_dtype_row_bytes(dtype, offset + r*ld) of its buffer.
 * clembed_matrix_write takes host blocks of the matrix's own dtype (rows rows
 * of clembed_dtype_row_bytes(dtype, cols) bytes, dense), or for Q8_0 and Q4_0
 * F32 values (F16 and BF16 ones are converted exactly to F32 first), quantized
 * on the host bit for bit as ggml's quantize_row_q8_0_ref and
 * quantize_row_q4_0_ref (as their C source reads, no contraction; where ggml's
 * float-to-int8 conversion is out of range, which happens only in a block whose
 * scale rounds to 0, the quants are 0, as on x86-64). The other block types have
 * no quantizer here: writing floats into them is CLEMBED_ERR_UNSUPPORTED.
 * clembed_matrix_read gives the blocks (host_dtype = the matrix's dtype) or the
 * values dequantized to F32, F16 or BF16. A float matrix may also be written
 * from host blocks of any block type (dequantized on the host) and read into
 * Q8_0 or Q4_0 blocks (quantized on the host). Between two block types there is
 * no conversion (CLEMBED_ERR_UNSUPPORTED).
 * Quantized matrices are tables to read: the table and the position_table of
 * clembed_lookup and clembed_embed. As an output, a gradient, or a table to
 * train or to initialise they are CLEMBED_ERR_UNSUPPORTED, the message and the
 * error detail naming the argument.
 *
 * FBGEMM's row-wise types (the tables recommendation models are served from),
 * a row of C values each, byte for byte as FBGEMM's code writes them
 * (little-endian; q_j the row's value j packed `bits` bits each, value j in
 * byte j*bits/8 from bit (j*bits) % 8, low bits first):
 *   I8_ROWWISE  "i8_rowwise"  C + 8 bytes: q[C] (uint8) 0, f32 scale C, f32 bias C + 4
 *               (FloatToFused8BitRowwiseQuantized; any C)
 *   I4_ROWWISE  "i4_rowwise"  C/2 + 4 bytes: q[C/2] 0, f16 scale C/2, f16 bias C/2 + 2
 *               (FloatToFusedNBitRowwiseQuantizedSBHalf, bit rate 4; C a multiple of 4)
 *   I2_ROWWISE  "i2_rowwise"  C/4 + 4 bytes: q[C/4] 0, f16 scale C/4, f16 bias C/4 + 2
 *               (bit rate 2; C a multiple of 8)
 *   I8_TBE      "i8_tbe"      C + 4 bytes: f16 scale 0, f16 bias 2, q[C] 4
 *   I4_TBE      "i4_tbe"      C/2 + 4 bytes: f16 scale 0, f16 bias 2, q[C/2] 4 (C even)
 *   I2_TBE      "i2_tbe"      C/4 + 4 bytes: f16 scale 0, f16 bias 2, q[C/4] 4 (C a multiple of 4)
 *               (the rows of FBGEMM's inference TBE, IntNBitTableBatchedEmbeddingBagsCodegen,
 *               on the CPU: row_alignment 1, scale and bias first)
 *   FP8_ROWWISE "fp8_rowwise" C4 + 8 bytes, C4 = C rounded up to a multiple of 4: q[C] 0
 *               (FBGEMM's hfp8: 4 exponent bits, bias 15, no reserved codes; bytes C .. C4 - 1
 *               padding), f32 scale C4, f32 0 C4 + 4 (FloatToFP8RowwiseQuantized)
 * Value j = fma(q_j, scale, bias) in float32, one rounding, as FBGEMM's CPU
 * dequantizers give it (for the f16 scales the product is exact, so this is
 * also the product then the sum); FP8_ROWWISE: hfp8(q_j) / scale, correctly
 * rounded where the device divides so (CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT),
 * else within the device's division. These are block types whose block is the
 * row: a matrix's ld must equal its cols and its offset be whole rows (views of
 * rows; CLEMBED_ERR_INVALID_ARGUMENT otherwise); row r starts at byte
 * (offset / cols + r) * clembed_dtype_row_bytes(dtype, cols);
 * clembed_dtype_block_values gives 0 for them. They are tables to read as the
 * block types are (lookup, embed, the bags, the multi-table call, MPI tables),
 * never a position table. clembed_matrix_write quantizes F32 (F16, BF16)
 * values into them on the host bit for bit as FBGEMM's reference quantizers
 * (FloatOrHalfToFused8BitRowwiseQuantizedSBFloatRef for the 8-bit types, whose
 * TBE rows keep its scale and bias rounded to f16 as fbgemm_gpu's quantize_embs
 * does; FloatOrHalfToFusedNBitRowwiseQuantizedSBHalfRef for INT4 and INT2;
 * FloatToFP8RowwiseQuantized's arithmetic for FP8), and
 * clembed_matrix_read dequantizes them (clembed_quantize_rows quantizes a
 * device matrix). */

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
 * 0 cols is allowed (its buffer holds one element). It does not wait for the
 * device: the zero fill is enqueued on the context's queue (ordered before
 * every later command of that queue, by a barrier on an out-of-order one), so
 * creating a matrix on a queue gated by a caller's user event does not block,
 * and clembed's later operations and blocking reads and writes see the zeros.
 * A caller using the buffer on another queue first waits for clembed_finish
 * (which also reports a failed fill).
 * On Linux, on POCL's CPU devices (which share the host's memory), a buffer of
 * 4 MiB or more that clembed allocates (a matrix here, or ids) lives in host memory
 * of its own, aligned to 2 MiB and advised for transparent huge pages, which
 * the device uses in place (CL_MEM_USE_HOST_PTR): rows gathered at random then
 * cost fewer TLB misses. That memory is freed when the buffer is (a destructor
 * callback), so a buffer the caller retains stays valid. Elsewhere it is an
 * ordinary buffer (Mesa 22's rusticl, for one, never calls that callback).
 * A matrix larger than the device's largest buffer (or CLEMBED_MAX_BUFFER_BYTES)
 * is made of several: see "Tables past one buffer" below. */
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

/* Releases m->buffer (every piece of a split matrix, see below) and zeroes *m.
 * NULL is a no-op. */
CLEMBED_API void clembed_matrix_release(clembed_matrix *m);

/* Quantizes F32 matrix `in` into `out` (the same rows and cols), a row-wise
 * type (I8_ROWWISE ... FP8_ROWWISE), bit for bit as clembed_matrix_write with
 * F32 host values would: FBGEMM's quantizers, a row at a time on the host (the
 * rows read from the device and written back, at most 32 MiB of F32 rows at a
 * time). Blocking: returns after the work of the wait list and of the context
 * and its own; *event (if not NULL) is a completed event. out of another dtype
 * is CLEMBED_ERR_UNSUPPORTED; in and out must not overlap. */
CLEMBED_API clembed_status clembed_quantize_rows(clembed_context *ctx, const clembed_matrix *in,
                                                 clembed_matrix *out, cl_uint num_events_in_wait_list,
                                                 const cl_event *event_wait_list, cl_event *event);

/* Copies `count` host ids of `type` into a new buffer (offset 0). count may be 0
 * (host may then be NULL). Blocking. */
CLEMBED_API clembed_status clembed_ids_create(clembed_context *ctx, const void *host, size_t count,
                                              clembed_index_type type, clembed_ids *ids);

/* Reads ids->count ids of ids->type into host. Blocking, returns a pending deferred error. */
CLEMBED_API clembed_status clembed_ids_read(clembed_context *ctx, const clembed_ids *ids, void *host);

/* Releases ids->buffer and zeroes *ids. NULL is a no-op. */
CLEMBED_API void clembed_ids_release(clembed_ids *ids);

/* ------------------------------------------------- tables past one buffer
 *
 * OpenCL caps one buffer at the device's CL_DEVICE_MAX_MEM_ALLOC_SIZE
 * (clembed_device_info's max_alloc_bytes): 1 GiB on Qualcomm Adreno, 4 GiB on
 * Intel GPUs, a quarter of global memory on many other GPUs (NVIDIA's, AMD's),
 * and on POCL's CPU devices a share of the host's memory. clembed_matrix_create and clembed_matrix_load
 * make a matrix larger than that, or than CLEMBED_MAX_BUFFER_BYTES=N in the
 * environment when N is lower (read when a context is created; a value that is
 * not a positive number of bytes fails the creation with
 * CLEMBED_ERR_INVALID_ARGUMENT), out of several buffers, its pieces: each holds
 * consecutive whole rows (a row never straddles two) in at most that many bytes
 * (whole 4-byte words). A row larger than the limit is
 * CLEMBED_ERR_INVALID_ARGUMENT naming CLEMBED_MAX_BUFFER_BYTES when the
 * variable set it (argument "CLEMBED_MAX_BUFFER_BYTES", value N), else
 * CLEMBED_ERR_OUT_OF_MEMORY; a split matrix larger than the device's global
 * memory is CLEMBED_ERR_OUT_OF_MEMORY. A matrix that fits is one buffer, as
 * before. Ids are always one buffer.
 *
 * A split matrix is a clembed_matrix like any other:
 * - `buffer` is its first piece. The library keeps the others in a
 *   process-wide registry keyed by that cl_mem (guarded by a lock: usable from
 *   any thread, and by every context on the same cl_context). A matrix whose
 *   buffer is any other cl_mem is one buffer: a clembed_matrix filled by hand
 *   over a caller's cl_mem works as it always did.
 * - offset, rows, cols and ld address the whole matrix as if its rows lay end
 *   to end with ld = its cols: create and load give offset 0 and ld = cols. A
 *   view (a copy of the struct with another offset, rows or cols) works as on
 *   one buffer, provided its ld stays the matrix's cols, each of its rows lies
 *   in one row of the matrix (offset % ld + cols <= ld), its rows lie in the
 *   matrix's, and its dtype is the matrix's; else
 *   CLEMBED_ERR_INVALID_ARGUMENT naming the argument.
 * - Every function that takes a matrix takes a split one (or a view of one)
 *   and gives the same bits as with one buffer: reads and writes (every
 *   conversion, a bounded number of rows at a time), the tables, position
 *   tables and outputs of clembed_lookup and clembed_embed (quantized tables
 *   included), clembed_backward's grad_table and position_grad, the tables and
 *   states of clembed_sgd_update and clembed_optimizer_step (states split by
 *   their own rows: their pieces need not line up with the table's),
 *   initialisation (the _at calls too), clembed_positional,
 *   clembed_rope_cache, clembed_rope_apply's x and out, BERT's layer (its
 *   segment table and gradients too), clembed_matrix_load_rows, and the bags:
 *   the tables and out of clembed_embedding_bag and clembed_embedding_bags,
 *   the table, grad_table and grad_out of clembed_bag_backward, the tables,
 *   states and grad_out of clembed_bag_optimizer_step and
 *   clembed_bags_optimizer_step, and clembed_renorm's table. A kernel
 *   takes up to 8 pieces of each split matrix; a matrix in more is taken by
 *   several launches of it, each over a window of the pieces, each row by one
 *   of them (never a path per row). Where every launch reads any of a
 *   matrix's rows (the grad_out of clembed_backward, clembed_sgd_update,
 *   clembed_optimizer_step, clembed_bag_backward and the bag steps; the
 *   matrices of BERT's layer, clembed_embed with segments or a norm and
 *   clembed_embed_backward: a token's row is normalised by one work-group),
 *   a launch takes all its pieces; one in more than a launch takes (8, fewer
 *   where CL_DEVICE_MAX_PARAMETER_SIZE is small) is first copied into one
 *   temporary buffer (an output copied back into its pieces after, only its
 *   rows' cols), or for a table read through ids (BERT's layer; the bags,
 *   whose forward pools a bag in one work-item, beside the feature's ids,
 *   offsets, per_sample_weights and max_rows within CLEMBED_BAGS_BUFFERS),
 *   the rows its ids take are copied, in id order, into one temporary buffer
 *   of ids->count rows, read from there. Any number of pieces (a 24 GiB table
 *   under a 1 GiB limit is 24), the same bits and max_rows, and the same
 *   deferred errors (a bag feature's bad offsets too: where they are bad as
 *   well as its ids, the first bad id may be named before a bad offset that
 *   comes earlier). A temporary must fit one buffer of the device, else
 *   CLEMBED_ERR_UNSUPPORTED naming "ids" (the gathered rows: pass fewer ids a
 *   call) or the matrix; CLEMBED_MAX_BUFFER_BYTES does not bound it.
 *   clembed_bag_backward's grad_weights and the steps take any
 *   number of pieces. per_sample_weights and grad_weights (ids->count x 1)
 *   are taken in one buffer: a split one is CLEMBED_ERR_UNSUPPORTED naming it.
 * - Copies of the struct share the pieces. Release exactly one copy, with
 *   clembed_matrix_release, which releases every piece and forgets the
 *   matrix. clReleaseMemObject on `buffer` releases the first piece only; the
 *   others follow when the first is deleted where the implementation calls
 *   destructor callbacks (POCL does; Mesa 22's rusticl does not, and there
 *   they stay allocated). A caller who retains `buffer` keeps only the first
 *   piece's rows once the matrix is released.
 * - clembed_matrix_load of a tensor stored as the device dtype, on POCL's CPU
 *   devices, makes each piece over its own copy-on-write mapping of the file's
 *   pages (see clembed_io.h); elsewhere, and for a conversion, pieces are
 *   written from the mapping a bounded piece at a time.
 */

/* The buffers a matrix's rows lie in: *count receives their number (1 for a
 * matrix in one buffer, and for a view inside one piece), and the first
 * min(capacity, *count) entries of pieces and first_rows receive each piece as
 * a matrix in one buffer (its cl_mem, the offset of its first row there, its
 * rows, m's cols, ld and dtype) and the row of m where it starts. For the
 * caller's own kernels: give clembed m itself, never a piece (a matrix over the
 * first piece's buffer is read as m). pieces and first_rows may be NULL with
 * capacity 0 (to count). */
CLEMBED_API clembed_status clembed_matrix_pieces(clembed_context *ctx, const clembed_matrix *m, size_t capacity,
                                                 clembed_matrix *pieces, size_t *first_rows, size_t *count);

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
 * base must be finite and > 0. Every value is within 1e-6 of the exact value
 * (the frequency w in double, the product p*w and its reduction modulo 2*pi
 * done exactly) for every position below 2^32 and every base (float32
 * output), and never outside [-1, 1]: w is prepared on the host as exact
 * fractions of a turn (in double-double), the position is split into two
 * 16-bit halves so that every product on the device is exact in float32, the
 * angle is reduced modulo one turn exactly, and sin/cos come from clembed's own
 * polynomials (no fma, no fp64, not the device's sin/cos). Positions at or past
 * 2^32 are refused: CLEMBED_ERR_INVALID_ARGUMENT for first_position + rows
 * (clembed_positional) and position_offset + min(seq_len, count) (clembed_embed),
 * a deferred CLEMBED_ERR_INDEX_OUT_OF_RANGE naming the token and its sequence's
 * start when the position comes from sequence_offsets (that token's positional
 * part is zero). */
typedef struct clembed_sinusoid {
  size_t struct_size;          /* sizeof(clembed_sinusoid): see "Option structs" */
  double base;                 /* 10000 in the original Transformer */
  clembed_exponent exponent;
  clembed_layout layout;
} clembed_sinusoid;

/* {10000, PAIR, INTERLEAVED}. The sinusoid is read alone by clembed_positional
 * and inside clembed_embed_options (whose own struct_size and defaults cover
 * it there too), so it carries a size of its own. */
CLEMBED_API clembed_sinusoid clembed_sinusoid_defaults(void);

typedef enum clembed_positions {
  CLEMBED_POSITIONS_NONE = 0,
  CLEMBED_POSITIONS_SINUSOID,
  CLEMBED_POSITIONS_TABLE
} clembed_positions;

/* The norm of the BERT-style input layer (clembed_embed_options.norm; see
 * "The input layer of BERT-style models" below for the exact operations). */
typedef enum clembed_norm_kind {
  CLEMBED_NORM_NONE = 0,
  CLEMBED_NORM_LAYER = 1, /* (x - mean) / sqrt(var + eps) * weight + bias (nn.LayerNorm) */
  CLEMBED_NORM_RMS = 2    /* x / sqrt(mean(x^2) + eps) * weight (RMSNorm; no bias) */
} clembed_norm_kind;
typedef struct clembed_norm {
  size_t struct_size;                  /* sizeof(clembed_norm): see "Option structs" */
  clembed_norm_kind kind;
  const clembed_matrix *weight, *bias; /* 1 x cols, F32; NULL means 1 and 0; RMS has no bias */
  float eps;                           /* 1e-12 BERT, 1e-5 / 1e-6 elsewhere; finite, >= 0 */
} clembed_norm;

/* {NONE, no weight, no bias, eps 1e-5}. The norm lives inside
 * clembed_embed_options (clembed_embed_defaults() sets it); it carries a size
 * of its own so that a norm assigned there whole (opt.norm = clembed_norm_defaults(),
 * then its fields) is checked like any option struct. */
CLEMBED_API clembed_norm clembed_norm_defaults(void);

/* No padding id. Before 0.2 this was -1; -1 now means the last row, as in PyTorch. */
#define CLEMBED_NO_PADDING INT64_MIN

typedef struct clembed_embed_options {
  size_t struct_size;                   /* sizeof(clembed_embed_options): see "Option structs" */
  float scale;                          /* token row multiplier, e.g. sqrt(d_model) */
  clembed_index_policy policy;
  int64_t padding_idx;                  /* this id's token row counts as zero (but see
                                           padding_keeps_row); a negative value counts from the
                                           end (-1 = rows-1, as nn.Embedding); CLEMBED_NO_PADDING
                                           for none. It never gets a gradient. */
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
  /* BERT's token types and a fused norm (below, "The input layer of BERT-style models") */
  const clembed_matrix *segment_table;  /* token-type embeddings, rows = types, cols = the table's */
  const clembed_ids *segment_ids;       /* one per id; NULL with a segment_table: type 0 everywhere */
  clembed_norm norm;                    /* after the sum, before dropout */
  int padding_keeps_row;                /* 0 (default): the padding id's token row counts as zero;
                                           1: it is read as stored, as PyTorch's F.embedding does
                                           (it still gets no gradient). Other values:
                                           CLEMBED_ERR_INVALID_ARGUMENT */
  const clembed_ids *remap;             /* pruning (FBGEMM's pruned_array): NULL for none, else an
                                           I32 or I64 array of remap->count ("remap_rows")
                                           entries, one per id of the unpruned table; see
                                           "Pruned tables" below. Not with a segment_table or a
                                           norm (CLEMBED_ERR_UNSUPPORTED) */
} clembed_embed_options;

/* scale 1, CHECK, no padding, no positions, sinusoid {10000, PAIR, INTERLEAVED},
 * no position table, seq_len 0, position_offset 0, no sequence offsets, dropout 0, seed 0,
 * no segments, norm {NONE, no weight, no bias, eps 1e-5}, padding_keeps_row 0, no remap;
 * struct_size (and the sinusoid's and the norm's) this version's sizeof.
 *
 * Pruned tables (FBGEMM's pruned_array, the index remapping of its inference
 * TBE). A table whose rows were pruned keeps only some rows; `remap` maps the
 * ids of the unpruned table to them: remap[id] is the kept row to read, or -1
 * for a pruned id. It is applied in the same pass as the lookup or the bag, to
 * each id in turn:
 *   1. the id is resolved under the policy against remap_rows = remap->count
 *      (CHECK, CLAMP, ZERO, WRAP as without a remap, with remap_rows for the
 *      table's rows: an id outside [0, remap_rows) is a bad id), and compared
 *      with padding_idx (an id of the unpruned table, in [0, remap_rows); a
 *      negative one counts from remap_rows);
 *   2. r = remap[id]: -1 (a pruned id) contributes nothing, with no error (as
 *      padding: a zero row in clembed_embed, nothing added to its bag; but,
 *      unlike a padding id, it counts in MEAN's count, as FBGEMM's TBE
 *      divides by the bag's length); a row of the table, 0 <= r < rows, is
 *      read; any other entry is a damaged remap, reported under every policy
 *      as a deferred CLEMBED_ERR_INDEX_OUT_OF_RANGE (the id takes no row):
 *      its detail's argument is "remap", index the entry (the id after the
 *      policy), value the id as given; its message names the id's position
 *      too ("ids[3] = 4: remap[4] is neither -1 (pruned) nor ...").
 * Refused with CLEMBED_ERR_INVALID_ARGUMENT: a remap that is not I32 or I64
 * ids; with CLEMBED_ERR_UNSUPPORTED: a remap in the backward and the optimizer
 * steps (pruned tables are served, not trained), with a segment_table or a
 * norm, and for a table in more buffers than a launch of the bag kernels
 * takes; and by the MPI calls. */
CLEMBED_API clembed_embed_options clembed_embed_defaults(void);

/* The sinusoid table for positions first_position .. first_position + out->rows - 1,
 * d = out->cols, into `out` (any dtype). s NULL means clembed_sinusoid_defaults(). */
CLEMBED_API clembed_status clembed_positional(clembed_context *ctx, const clembed_sinusoid *s,
                                              size_t first_position, clembed_matrix *out,
                                              cl_uint num_events_in_wait_list,
                                              const cl_event *event_wait_list, cl_event *event);

/* clembed_embed with the defaults: out[i] = table[ids[i]]. Its errors, deferred ones
 * included, name clembed_lookup as their operation. */
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
 * padding id's token row is zero (with padding_keeps_row 1: the row as stored,
 * as in PyTorch); its positional part is still added.
 * With the sinusoid, positions must be below 2^32 (see clembed_sinusoid); with a
 * position table, a position_offset past 2^63 - 1 is a bad position too. With 0 columns nothing is
 * written, but every id and position is still checked (the deferred error as above). The backward
 * steps (clembed_backward, clembed_sgd_update, clembed_optimizer_step) with 0 columns add and step
 * nothing but check every id the same way.
 * opt NULL means clembed_embed_defaults(). */
CLEMBED_API clembed_status clembed_embed(clembed_context *ctx, const clembed_matrix *table,
                                         const clembed_ids *ids, const clembed_embed_options *opt,
                                         clembed_matrix *out, cl_uint num_events_in_wait_list,
                                         const cl_event *event_wait_list, cl_event *event);

/* ---------------------------------------------------------------- backward */

typedef struct clembed_backward_options {
  size_t struct_size;              /* sizeof(clembed_backward_options): see "Option structs" */
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
 * seq_len 0, position_offset 0, no sequence offsets, no position_grad, dropout 0, seed 0;
 * struct_size this version's sizeof. */
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
 * the table's dtype (F32, F16 or BF16; to nearest even: clembed_optimizer_step with
 * kind SGD rounds stochastically when asked); no other row is touched and no dense
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

/* Counter-based Philox4x32-10 with key (seed low 32 bits, seed high 32 bits).
 * One counter serves four consecutive elements: element e = r*cols + c is word
 * x_j, j = e mod 4, of the counter (q low 32 bits, q high 32 bits, 0, 0) with
 * q = e div 4 (words x0..x3). With u(x) = (x >> 8) * 2^-24 in [0, 1):
 *   uniform: low + (high - low) * u(x_j), evaluated in float32 as
 *            2 * (low/2 + (high/2 - low/2) * u(x_j)) (the same result for normal
 *            bounds, and no overflow for any finite ones);
 *   normal:  Box-Muller on the word pairs (x0, x1) and (x2, x3), both the cosine
 *            and the sine: with v = ((x0 >> 8) + 1) * 2^-24 in (0, 1], t = u(x1),
 *            R = sqrt(-2 ln v): z0 = R cos(2 pi t), z1 = R sin(2 pi t), and z2, z3
 *            the same from (x2, x3); the element is mean + std * z_j.
 * The logarithm, square root, cosine and sine are computed from operations that
 * OpenCL rounds correctly (+, -, *, fma; cl/lib/exactmath.cl), never from the
 * device's built-ins, with no contraction: every device and every work size
 * gives the same bits, uniform and normal. Accuracy: R within 1 ulp, cos and sin
 * within 2 ulp, z within 4 ulp of the exact transform of the same v and t; an
 * exact zero z is +0. */
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

/* The same draws for a piece of a larger table: element (r, c) of m takes the
 * value that element (first_row + r, c) of a table of m->cols columns gets from
 * clembed_matrix_init_normal / _uniform, that is Philox element index
 * e = (first_row + r) * cols + c in the mapping above (so a table initialised
 * piece by piece, at any row boundaries, holds the bits of one whole call; a
 * sharded table's init, clembed_mpi.h, is this on each shard). first_row 0 is
 * the plain call. (first_row + rows) * cols past 2^63 is
 * CLEMBED_ERR_INVALID_ARGUMENT naming first_row; other arguments as above. */
CLEMBED_API clembed_status clembed_matrix_init_normal_at(clembed_context *ctx, clembed_matrix *m,
                                                         uint64_t first_row, float mean, float std,
                                                         uint64_t seed, cl_uint num_events_in_wait_list,
                                                         const cl_event *event_wait_list, cl_event *event);
CLEMBED_API clembed_status clembed_matrix_init_uniform_at(clembed_context *ctx, clembed_matrix *m,
                                                          uint64_t first_row, float low, float high,
                                                          uint64_t seed, cl_uint num_events_in_wait_list,
                                                          const cl_event *event_wait_list, cl_event *event);

/* Dropout mask: output element e = i*cols + c of the forward is kept when
 * u(x0) >= dropout, x0 the first word of Philox4x32-10 with key (dropout_seed low
 * 32 bits, high 32 bits) and counter (e low 32 bits, e high 32 bits, 0, 0), and
 * then multiplied by 1 / (1 - dropout). */

/* ---------------------------------------------------- sparse optimizer steps */

typedef enum {
  CLEMBED_SGD = 0,
  CLEMBED_ADAGRAD = 1,
  CLEMBED_ROWWISE_ADAGRAD = 2,
  CLEMBED_ADAM = 3
} clembed_optimizer_kind;

typedef struct clembed_optimizer {
  size_t struct_size;      /* sizeof(clembed_optimizer): see "Option structs" */
  clembed_optimizer_kind kind;
  float learning_rate;
  float eps;               /* ADAGRAD 1e-10, ROWWISE_ADAGRAD 1e-8, ADAM 1e-8 */
  float beta1, beta2;      /* ADAM: 0.9, 0.999 */
  float weight_decay;      /* L2: g = g + weight_decay * w before the step; default 0 */
  uint64_t step;           /* ADAM: this step's number t >= 1, counted by the caller */
  clembed_matrix *state;   /* ADAGRAD: sum of squares (rows x cols); ROWWISE_ADAGRAD: (rows x 1);
                              ADAM: 1st moment (rows x cols). F32; the caller creates it (zeros) */
  clembed_matrix *state2;  /* ADAM: 2nd moment (rows x cols), F32 */
  int stochastic_rounding; /* how an F16 or BF16 table is written back: 0 (default) rounded to
                              nearest even; 1 stochastically rounded (clembed_optimizer_step
                              defines the bits). An F32 table ignores it */
  uint64_t seed;           /* stochastic rounding's random bits: Philox(seed, step, row, column) */
  uint64_t first_row;      /* the row, in those bits, of the table's row 0: 0 (default) for a
                              whole table; a table that holds rows [first_row, first_row + rows)
                              of a larger one gets the larger table's bits (libclembed_mpi's
                              shards set it themselves) */
} clembed_optimizer;

/* learning_rate 0.01 (SGD 0.1), eps 1e-10 (ADAGRAD) or 1e-8, beta1 0.9, beta2
 * 0.999, weight_decay 0, step 0, no states, stochastic_rounding 0, seed 0,
 * first_row 0; struct_size this version's sizeof. A caller's optimizer shorter
 * than this version's takes the missing fields from the defaults of its own
 * kind. */
CLEMBED_API clembed_optimizer clembed_optimizer_defaults(clembed_optimizer_kind kind);

/* One fused sparse step, like clembed_sgd_update: for every row v that occurs in
 * ids (after the policy; not the padding row), g is the row gradient exactly as
 * clembed_backward computes it (the same bits: ascending token order, scale,
 * scale_grad_by_freq, dropout), then in float32, per column, in this order (w the
 * table element read as float32; s, m, u the state elements):
 *   weight decay (when weight_decay != 0): g = g + weight_decay * w
 *   SGD:             w = w - lr * g  (clembed_sgd_update is this with weight_decay 0)
 *   ADAGRAD:         s = s + g * g;  w = w - lr * (g / (sqrt(s) + eps))   (PyTorch's Adagrad
 *                    on a sparse gradient)
 *   ROWWISE_ADAGRAD: m = m + (sum over columns c ascending of g_c * g_c) / cols, one value
 *                    per row; then w = w - (lr / (sqrt(m) + eps)) * g      (FBGEMM's
 *                    EXACT_ROWWISE_ADAGRAD)
 *   ADAM:            m = m + (g - m) * (1 - beta1);  u = u + (g * g - u) * (1 - beta2);
 *                    w = w - step_size * (m / (sqrt(u) + eps))            (PyTorch's SparseAdam:
 *                    rows not in ids are not decayed)
 * where 1 - beta1, 1 - beta2 and step_size = lr * sqrt(1 - beta2^t) / (1 - beta1^t), t = step,
 * are computed in float64 on the host and each rounded to float32 once. The table is F32,
 * F16 or BF16 (written back rounded to nearest even, or with stochastic_rounding 1 as
 * below); the states are F32 with the table's rows. sqrt and / are correctly rounded where
 * the device says it can (CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT), else the device's (a few ulp).
 *
 * Stochastic rounding (stochastic_rounding 1; an F16 or BF16 table, every kind): each element
 * the step writes, x its float32 result w, is written as lo or hi with x's sign, the two values
 * of the table's dtype around |x|: lo <= |x| < hi, lo = |x| truncated (BF16: the low 16 bits of
 * x's float32 pattern cleared; F16: x's significand cut to the half's 10 bits, or below 2^-14
 * to whole units of 2^-24, the subnormal halves) and hi the dtype's next value above lo
 * (infinity after the largest finite value: 65504 for F16, 0x7F7F for BF16). With
 * f = floor(2^32 * (|x| - lo) / u), u the dtype's spacing at lo (hi - lo; after the largest
 * finite value the spacing below it, 32 for F16 and 2^120 for BF16), the fraction that lo
 * discards (exact but for an F16 |x| below 2^-33, where it is truncated to 32 bits), and r
 * the element's random word, the element is hi when f + r >= 2^32, else lo: hi with
 * probability f / 2^32, so that its expected value is x. +0 and -0 stay; an F16 |x| >= 2^16
 * and an infinity give infinity; a NaN is stored as the nearest-even store stores it. The random word of element (v, c), v the
 * table row and c the column, with Philox4x32-10 as in clembed_matrix_init_normal (Random123;
 * words x0 .. x3; key and counter words in the order written):
 *   K = (x0, x1) of Philox4x32-10 with key (seed low 32 bits, seed high 32 bits) and counter
 *       (step low 32 bits, step high 32 bits, 0x53524E44, 0)                  (the step's key)
 *   r = x0 of Philox4x32-10 with key K and counter (c low 32 bits, c high 32 bits,
 *       R low 32 bits, R high 32 bits), R = first_row + v.
 * So the bits are the same on every device, work size, kernel shape and number of MPI ranks.
 * step is the optimizer's field: the caller counts the steps there for SGD and ADAGRAD too
 * (whose step is otherwise unused; 0 is allowed), so that each step draws fresh bits (the same
 * seed, step and row draw the same bits again). clembed_sgd_update always rounds to nearest
 * even: its stochastic form is this step with kind SGD.
 *
 * One pass after the sort of clembed_backward: each touched row of the table and of each
 * state is read once and written once, in the kernel that folds its gradient; no dense
 * gradient is made; rows not in ids and their state rows are not touched (not even
 * rewritten). ROWWISE_ADAGRAD folds a row's gradient twice (its sum of squares comes before
 * its first step) and, with weight decay, reads the table row twice. Deterministic:
 * bit-identical on every run, work size and kernel shape. opt NULL means the backward
 * defaults (its deterministic and accumulate fields are ignored; a position_grad is added
 * into as by clembed_backward).
 *
 * Refused with CLEMBED_ERR_INVALID_ARGUMENT naming the field: a NULL optimizer, an unknown
 * kind, a missing state, a state of the wrong shape or dtype, learning_rate negative or not
 * finite, eps negative or not finite, beta1 or beta2 outside [0, 1), weight_decay negative
 * or not finite, step 0 for ADAM, stochastic_rounding other than 0 and 1, first_row + the
 * table's rows past 2^64. A quantized table: CLEMBED_ERR_UNSUPPORTED. Bad ids as in
 * the backward (deferred; they add nothing and no row is stepped for them). */
CLEMBED_API clembed_status clembed_optimizer_step(clembed_context *ctx, const clembed_matrix *grad_out,
                                                  const clembed_ids *ids,
                                                  const clembed_backward_options *opt,
                                                  const clembed_optimizer *o, clembed_matrix *table,
                                                  cl_uint num_events_in_wait_list,
                                                  const cl_event *event_wait_list, cl_event *event);

/* ------------------------------------------------------------------------
 * Rotary position embeddings (RoPE)
 *
 * With R = rotary_dim and k = 0 .. R/2-1, the frequencies are computed in
 * double on the host: w_k = base^(-2k/R); LINEAR divides every w_k by factor;
 * NTK uses the base base * factor^(R/(R-2)); YARN and LLAMA3 follow Hugging
 * Face transformers' _compute_yarn_parameters (with truncation of the
 * correction range, and the ramp over k) and _compute_llama3_parameters; YARN
 * takes factor as given (transformers replaces it by max_position_embeddings /
 * original_max_position_embeddings when a config has both: pass that ratio).
 * The attention factor a multiplies cos and sin: attention_factor if > 0, else
 * 0.1*ln(factor) + 1 for YARN (1 when factor <= 1), else 1.
 *
 * Accuracy: cos and sin are within 1e-6 * a of the exact value (the double
 * frequency, the product p*w_k and its reduction done exactly) for every
 * position below 2^32; the angle is split and reduced exactly as for the
 * sinusoid. Positions at or past 2^32 are refused (see below). Every output of
 * clembed_rope_apply is within 2e-6 * a * (|x_a| + |x_b|) of the exact rotation
 * of the same inputs, plus half an ulp of an F16/BF16 output.
 * ------------------------------------------------------------------------ */
typedef enum { CLEMBED_ROPE_NEOX = 0, CLEMBED_ROPE_GPTJ = 1 } clembed_rope_layout;
typedef enum {
  CLEMBED_ROPE_SCALING_NONE = 0,
  CLEMBED_ROPE_SCALING_LINEAR,
  CLEMBED_ROPE_SCALING_NTK,
  CLEMBED_ROPE_SCALING_YARN,
  CLEMBED_ROPE_SCALING_LLAMA3
} clembed_rope_scaling;

typedef struct clembed_rope {
  size_t struct_size;           /* sizeof(clembed_rope): see "Option structs" */
  double base;                  /* rope_theta: 10000; Llama 3: 500000 (finite, > 0) */
  size_t head_dim;              /* columns per head */
  size_t rotary_dim;            /* leading columns of each head that rotate (even, <= head_dim);
                                   0 means head_dim */
  clembed_rope_layout layout;   /* NEOX: pairs (k, k + R/2); GPTJ: pairs (2k, 2k + 1) */
  clembed_rope_scaling scaling;
  double factor;                /* LINEAR, NTK, YARN, LLAMA3 (finite, > 0) */
  size_t original_max_position; /* YARN, LLAMA3 (> 0) */
  double low_freq_factor, high_freq_factor; /* LLAMA3 (defaults 1, 4; high > low) */
  double beta_fast, beta_slow;  /* YARN (defaults 32, 1; 0 means the default, as in transformers) */
  double attention_factor;      /* cos and sin are multiplied by it; 0 means 1, or
                                   0.1*ln(factor) + 1 for YARN */
} clembed_rope;

/* struct_size this version's sizeof, base 10000, head_dim 0 (the caller sets
 * it), rotary_dim 0, NEOX, no scaling, factor 1, original_max_position 8192,
 * low/high_freq_factor 1 and 4,
 * beta_fast/slow 32 and 1, attention_factor 0. */
CLEMBED_API clembed_rope clembed_rope_defaults(void);

/* The cos/sin cache for positions first_position .. first_position + rows - 1:
 * cos_sin has R columns (any float dtype), a*cos(p*w_k) in column k and
 * a*sin(p*w_k) in column R/2 + k (vLLM's cos_sin_cache). first_position + rows
 * past 2^32 is CLEMBED_ERR_INVALID_ARGUMENT. The frequencies are cached per
 * context. */
CLEMBED_API clembed_status clembed_rope_cache(clembed_context *ctx, const clembed_rope *r,
                                              size_t first_position, clembed_matrix *cos_sin,
                                              cl_uint num_events_in_wait_list,
                                              const cl_event *event_wait_list, cl_event *event);

/* RoPE applied to x (rows x cols, cols a multiple of head_dim): row i is at
 * position positions[i] (I32 or I64, count >= rows), or, with positions NULL,
 * position_offset + i % seq_len (seq_len 0: one sequence). In each head, each
 * pair (a, b) of the first R columns becomes (a*c - b*s, b*c + a*s) with
 * c = a_f*cos(p*w_k), s = a_f*sin(p*w_k) (a_f the attention factor); inverse
 * uses -s (the backward, and undoing a rotation). Columns R .. head_dim-1 are
 * copied. out has x's shape, any float dtype, and may be x itself (in place;
 * a partial overlap is not allowed). A position from `positions` that is
 * negative or >= 2^32 makes that row a copy of its input and a deferred
 * CLEMBED_ERR_INDEX_OUT_OF_RANGE naming the first such row (index) and its
 * position (value), argument "positions"; position_offset + min(rows, seq_len)
 * past 2^32 is CLEMBED_ERR_INVALID_ARGUMENT. */
CLEMBED_API clembed_status clembed_rope_apply(clembed_context *ctx, const clembed_rope *r,
                                              const clembed_matrix *x, const clembed_ids *positions,
                                              size_t seq_len, size_t position_offset, int inverse,
                                              clembed_matrix *out, cl_uint num_events_in_wait_list,
                                              const cl_event *event_wait_list, cl_event *event);

/* ------------------------------------------------------------------------
 * The input layer of BERT-style models: segments and a fused norm
 *
 * clembed_embed with a segment_table or a norm (clembed_embed_options) does,
 * in one pass over each output row (token i, d = cols, r = 1/d rounded to
 * float32 on the host), in float32 with no contraction, in this order:
 *   x_c = (scale * W[row(i)][c] + P[p(i)][c]) + S[s(i)][c]
 *         (the token and positional parts exactly as without segments; S is
 *         segment_table row s(i) = segment_ids[i] under the index policy, row 0
 *         without segment_ids, a zero row for a bad or dropped segment id)
 *   LAYER: mean = sum(x) * r;  v_c = x_c - mean;  var = sum(v * v) * r;
 *          rstd = rsqrt(var + eps);  y_c = ((v_c * rstd) * weight_c) + bias_c
 *   RMS:   ms = sum(x * x) * r;  rstd = rsqrt(ms + eps);  y_c = (x_c * rstd) * weight_c
 *   NONE:  y_c = x_c
 *   out[i][c] = dropout(y_c)   (the same mask, on element i*cols + c, as without a norm)
 * A NULL weight (bias) multiplies (adds) nothing. The row sum sum(t) of a row's
 * d values t_c, in one fixed order:
 *   q_k = ((0 + t_k) + t_(k+32)) + t_(k+64) + ...  for k = 0 .. 31, ascending columns;
 *   then for h = 16, 8, 4, 2, 1: q_k = q_k + q_(k+h) for every k < h; sum = q_0.
 * rsqrt(a) uses + and * only: y = bits(0x5F375A86 - (bits(a) >> 1)), then three
 * Newton steps y = y * (1.5 - ((0.5 * a) * y) * y) (within 2 ulp of 1/sqrt(a); a
 * subnormal a is scaled by 2^64 first; 0 gives +inf, +inf gives 0). Every step
 * being a correctly rounded float32 operation, the output has the same bits on
 * every device, kernel shape and work size (a device that flushes subnormal
 * floats may differ where an intermediate is subnormal: a row spread below
 * about 1e-19, or eps = 0 with such a row), and is within 1e-5 * (1 + |y|) of
 * the float64 result of the same x, plus half an ulp of an F16/BF16 output.
 *
 * segment_table: F32, F16 or BF16 (a quantized one is CLEMBED_ERR_UNSUPPORTED),
 * cols = the table's; segment_ids: I32 or I64, count = ids->count, only with a
 * segment_table (without segment_ids the table needs a row). Segment ids follow
 * the index policy like token ids (padding_idx is the token ids' alone): CLAMP
 * clamps into the segment table, ZERO gives a zero segment row, CHECK (and WRAP
 * beyond -types) gives a zero segment row and a deferred
 * CLEMBED_ERR_INDEX_OUT_OF_RANGE naming "segment_ids", the token and its value
 * (a bad id or position of the same call is reported first). norm.weight and
 * norm.bias are 1 x cols F32 matrices; norm.kind unknown, a weight or bias of
 * another shape or dtype, a bias with RMS, a weight or bias with NONE, eps
 * negative or not finite: CLEMBED_ERR_INVALID_ARGUMENT naming the field
 * ("norm.weight", ...). With 0 columns nothing is written; every id, position
 * and segment id is still checked. Without a segment_table and with NONE,
 * clembed_embed is the plain forward above, unchanged.
 * ------------------------------------------------------------------------ */

typedef struct clembed_embed_grads {
  size_t struct_size;                                     /* sizeof(clembed_embed_grads): see "Option structs" */
  clembed_matrix *table, *position_table, *segment_table; /* accumulated (F32, the tables' shapes); NULL: not wanted */
  clembed_matrix *norm_weight, *norm_bias;                /* accumulated, 1 x cols F32; NULL: not wanted */
} clembed_embed_grads;

/* No gradient wanted (every pointer NULL). The gradients asked of the layer
 * grow with its parts, so this struct carries a size like the options. */
CLEMBED_API clembed_embed_grads clembed_embed_grads_defaults(void);

/* The backward of the whole layer of clembed_embed with options opt (NULL: the
 * defaults): grad_out (ids->count x cols, any float dtype) is the gradient of
 * `out`. The forward's rows are recomputed from table, ids and opt and its
 * dropout mask replayed (nothing is kept between the calls). With g_c the
 * masked grad_out[i][c] (g * (1 / (1 - dropout)) where the mask kept it, else
 * 0) and x, mean, v, rstd exactly as the forward computed them:
 *   LAYER: xh_c = v_c * rstd;  RMS: xh_c = x_c * rstd;
 *          h_c = g_c * weight_c (g_c without a weight);  A = sum(h) * r;  B = sum(h * xh) * r;
 *   LAYER: dx_c = rstd * ((h_c - A) - xh_c * B);  RMS: dx_c = rstd * (h_c - xh_c * B);
 *   NONE:  dx_c = g_c.
 * Then every gradient is a sum over tokens in ascending token order, folded
 * from 0 and then added into the gradient, as clembed_backward's segment fold
 * does (the same bits on every run, device, kernel shape and work size):
 *   table[v]          += scale * (sum of dx over the tokens whose id resolves to v;
 *                        not the padding id, not a bad or dropped id)
 *   position_table[p] += sum of dx over the tokens at position p (POSITIONS_TABLE)
 *   segment_table[s]  += sum of dx over the tokens of segment s (not a bad one)
 *   norm_weight       += sum over every token of g * xh;  norm_bias += sum of g.
 * With norm.kind NONE, table and position_table receive exactly the bits of
 * clembed_backward with the forward's scale, policy, padding, positions and
 * dropout (accumulate 1, a position_grad). Bad ids, positions and segment ids
 * add nothing and give the forward's deferred error. A gradient of a part the
 * forward does not have (position_table without POSITIONS_TABLE, segment_table
 * without a segment_table, norm_weight or norm_bias without norm.weight or
 * norm.bias), of another shape, or not F32, is CLEMBED_ERR_INVALID_ARGUMENT
 * naming it ("grads.norm_weight", ...); grads may ask for none (the ids are
 * still checked). Temporaries: O(ids), and with a norm one ids->count x cols
 * F32 matrix (two when norm_weight is asked). */
CLEMBED_API clembed_status clembed_embed_backward(clembed_context *ctx, const clembed_matrix *grad_out,
                                                  const clembed_matrix *table, const clembed_ids *ids,
                                                  const clembed_embed_options *opt,
                                                  const clembed_embed_grads *grads,
                                                  cl_uint num_events_in_wait_list,
                                                  const cl_event *event_wait_list, cl_event *event);

/* ------------------------------------------------------------------------
 * Bags of ids (EmbeddingBag) and many tables in one call
 *
 * A bag is a run of ids pooled into one output row (PyTorch's
 * nn.EmbeddingBag): bag b of `offsets` (bags + 1 entries, CSR, PyTorch's
 * include_last_offset=True) is ids[offsets[b] .. offsets[b+1]); offsets[0]
 * must be 0, offsets[bags] equal ids->count, and the entries must not
 * decrease. A bad offset (negative, decreasing, past ids->count, a first entry
 * other than 0 or a last other than ids->count) is a deferred
 * CLEMBED_ERR_INDEX_OUT_OF_RANGE naming "offsets", the first bad position
 * (index) and its value; the bags then hold what their offsets, clamped into
 * [0, ids->count], give (each bag's range clamped on its own), and no kernel
 * reads or writes outside a buffer whatever the offsets say. `offsets` NULL
 * means bags of a fixed size: out->rows bags of ids->count / out->rows ids
 * (ids->count must divide evenly; with out->rows 0, ids->count must be 0).
 * ids->count is below 2^32 - 1.
 *
 * The float32 operations, per output column, over the bag's ids j in
 * ascending order, leaving out ids equal to padding_idx and ids that the
 * policy drops (a bad id under CHECK, which also records the deferred error,
 * or ZERO; CLAMP and WRAP move ids as in clembed_embed), t_j the table value:
 *   SUM   acc = 0; acc = acc + t_j   (with per_sample_weights: acc = fma(w_j, t_j, acc),
 *         the fused multiply-add rounded once)
 *   MEAN  the SUM, then acc / (float)count (count: the ids taken; correctly rounded where
 *         the device divides correctly rounded, CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT)
 *   MAX   the largest t_j, the first on ties; NaN when any t_j is NaN (the first NaN)
 * An empty bag (or one of left-out ids only) gives zeros (MAX: max_rows -1).
 * The result is rounded once to the output's dtype. The bits are the same on
 * every device that divides correctly rounded, in both kernel shapes and in
 * clembed_embedding_bags; for an F32 table they equal PyTorch's CPU
 * F.embedding_bag (1.13) except where PyTorch is not principled: a weighted bag
 * holding a padding id (PyTorch rounds w*t before adding there) and NaN under
 * MAX (PyTorch keeps a NaN only from a bag's first id).
 * ------------------------------------------------------------------------ */
typedef enum { CLEMBED_BAG_SUM = 0, CLEMBED_BAG_MEAN = 1, CLEMBED_BAG_MAX = 2 } clembed_bag_mode;

typedef struct clembed_bag_options {
  size_t struct_size;                       /* sizeof(clembed_bag_options): see "Option structs" */
  clembed_bag_mode mode;
  clembed_index_policy policy;              /* as in clembed_embed (WRAP included) */
  int64_t padding_idx;                      /* ids equal to it (after WRAP and CLAMP) are left out of
                                               their bag and of MEAN's count; negative counts from the
                                               end; CLEMBED_NO_PADDING for none */
  const clembed_matrix *per_sample_weights; /* optional, SUM only: F32, ids->count x 1, one weight per id */
  clembed_ids *max_rows;                    /* MAX only, optional output of the forward (the input of
                                               the MAX backward): bags x cols ids (count = bags * cols,
                                               I32 or I64; I32 needs a table below 2^31 rows), the
                                               table row that gave each output element, -1 for an
                                               empty bag */
  const clembed_ids *remap;                 /* pruning: NULL for none, else as clembed_embed_options'
                                               remap ("Pruned tables" below); the forward only */
} clembed_bag_options;

/* SUM, CHECK, CLEMBED_NO_PADDING, no weights, no max_rows, no remap; struct_size this version's sizeof. */
CLEMBED_API clembed_bag_options clembed_bag_defaults(void);

/* out (bags x table->cols, F32, F16 or BF16) = the bags of ids pooled over
 * table (any dtype, the block-quantized ones included, dequantized as ggml
 * does); opt NULL means clembed_bag_defaults(). Refused with
 * CLEMBED_ERR_INVALID_ARGUMENT naming it: an unknown mode or policy, offsets
 * of other than out->rows + 1 entries, ids that do not divide into fixed bags,
 * per_sample_weights with MEAN or MAX or of the wrong shape or dtype, max_rows
 * without MAX or of the wrong count, a padding_idx outside the table. The
 * table and out may be split ("Tables past one buffer": the table's pieces
 * share one launch with the ids, offsets, weights and max_rows). On a device
 * that ends a work-item's loops after a number of iterations (the tuning's
 * loop_limit: Mesa's llvmpipe), a bag longer than the cap that limit sets for
 * the call (its message names it) is not pooled: fixed bags are refused at the
 * call with CLEMBED_ERR_UNSUPPORTED naming ids, nothing written; a bag given
 * by offsets gets a zero row (max_rows -1; its ids are not checked) and
 * clembed_finish returns CLEMBED_ERR_UNSUPPORTED naming offsets, the bag's
 * index and its length; a call whose features leave no room under the limit
 * at all is refused at the call. */
CLEMBED_API clembed_status clembed_embedding_bag(clembed_context *ctx, const clembed_matrix *table,
                                                 const clembed_ids *ids, const clembed_ids *offsets,
                                                 const clembed_bag_options *opt, clembed_matrix *out,
                                                 cl_uint num_events_in_wait_list,
                                                 const cl_event *event_wait_list, cl_event *event);

/* The bag backward, through the segment fold of clembed_backward: each taken
 * id j of bag b contributes g_b (SUM), w_j * g_b (weighted SUM, the product
 * rounded), g_b / (float)count_b (MEAN, correctly rounded as in the forward)
 * to its table row, where g_b is row b of grad_out (bags x table->cols, any
 * float dtype); under MAX, column c of g_b goes to row opt->max_rows[b][c]
 * only (as the forward wrote it; required), once however often that row occurs
 * in the bag. Per row and column the contributions are folded from zero in
 * ascending id position (S = 0; S = S + x), then added to grad_table (F32,
 * table's rows and cols): grad_table[v][c] = grad_table[v][c] + S. No dense
 * gradient is made; bit-identical on every run, work size and kernel shape.
 * grad_weights (optional, F32, ids->count x 1, overwritten): for each id j of
 * bag b, the sum over columns c ascending of g_b[c] * t_j[c] (each product
 * rounded, then added from 0); 0 for a left-out id (PyTorch's gradient of
 * per_sample_weights); it needs SUM and `table` (any dtype, only read; without
 * grad_weights table may be NULL). Bad ids and offsets as in the forward
 * (deferred errors; they contribute nothing). table, grad_table and grad_out
 * may be split; grad_weights is one buffer. */
CLEMBED_API clembed_status clembed_bag_backward(clembed_context *ctx, const clembed_matrix *grad_out,
                                                const clembed_ids *ids, const clembed_ids *offsets,
                                                const clembed_bag_options *opt, const clembed_matrix *table,
                                                clembed_matrix *grad_table, clembed_matrix *grad_weights,
                                                cl_uint num_events_in_wait_list,
                                                const cl_event *event_wait_list, cl_event *event);

/* The row gradient of clembed_bag_backward (the same bits, folded from zero)
 * followed by the step of clembed_optimizer_step, fused the same way: g is the
 * row's folded sum (no scale, no frequency scaling), then weight decay and the
 * optimizer's float32 operations in the documented order; each touched row of
 * the table and its state rows read and written once. The rows stepped are
 * those with a contribution: every row of a taken id (SUM, MEAN), under MAX
 * only the rows named in max_rows. The table is F32, F16 or BF16; the
 * optimizer's fields and states are checked as clembed_optimizer_step does,
 * and its stochastic_rounding rounds the table's elements as there (v the
 * table's row). The table and states may be split, grad_out too. */
CLEMBED_API clembed_status clembed_bag_optimizer_step(clembed_context *ctx, const clembed_matrix *grad_out,
                                                      const clembed_ids *ids, const clembed_ids *offsets,
                                                      const clembed_bag_options *opt, const clembed_optimizer *o,
                                                      clembed_matrix *table, cl_uint num_events_in_wait_list,
                                                      const cl_event *event_wait_list, cl_event *event);

typedef struct clembed_bag_feature {      /* one sparse feature of a batch */
  size_t struct_size;                     /* sizeof(clembed_bag_feature): see "Option structs"; an
                                             array of features is read with the stride of
                                             features[0].struct_size, which every element carries */
  clembed_matrix *table;                  /* several features may share one table (the same matrix:
                                             buffer, offset, rows, cols, ld and dtype) */
  const clembed_ids *ids, *offsets;       /* every feature has the same number of bags (out->rows) */
  clembed_bag_options options;            /* its own struct_size as any bag options; it is the
                                             feature's last field, so it may be shorter than this
                                             version's (an older caller's), never longer than the
                                             feature's struct_size allows */
} clembed_bag_feature;

/* No table, ids or offsets (the caller sets them), options clembed_bag_defaults(). */
CLEMBED_API clembed_bag_feature clembed_bag_feature_defaults(void);

/* The largest number of distinct buffers (cl_mem) one launch of
 * clembed_embedding_bags reads or writes for its features. */
#define CLEMBED_BAGS_BUFFERS 16

/* All features of a batch at once: out is bags x (the sum of the features'
 * cols), F32, F16 or BF16; feature f's bags go to its own block of columns, in
 * feature order (FBGEMM's table-batched output, TorchRec's KeyedTensor), and
 * each block equals what clembed_embedding_bag gives for that feature alone
 * (the same out dtype), bit for bit. Features may differ in table dtype (any
 * clembed_dtype: the float types and every block type), width, mode, policy,
 * padding, weights and index types.
 * The launches, a small constant number: the features are taken by table
 * dtype (then in order) into groups of one table dtype whose buffers (tables,
 * ids, offsets, per_sample_weights and max_rows, each cl_mem counted once)
 * number at most CLEMBED_BAGS_BUFFERS; each group is one kernel launch (on a
 * device without cl_khr_int64_base_atomics, one more small launch records its
 * errors), whose program holds the pooling of that dtype only. So a batch whose
 * features share a table dtype and use at most 16 buffers in all (say 14 tables
 * with one ids and one offsets buffer, or one buffer holding every table) is
 * one launch however many features it has, and a batch of B buffers over T
 * table dtypes about B / 12 + T launches. A split table counts each of its
 * pieces (see "Tables past one buffer": one in more pieces than a launch
 * takes is gathered first); out may be split (a launch per window
 * of its pieces where they are more than 8). A bad id or offset of feature f,
 * or a bag past a loop limit's cap (the cap set by every feature of the call),
 * is reported as in clembed_embedding_bag, the message naming features[f]. */
CLEMBED_API clembed_status clembed_embedding_bags(clembed_context *ctx, const clembed_bag_feature *features,
                                                  size_t n, clembed_matrix *out, cl_uint num_events_in_wait_list,
                                                  const cl_event *event_wait_list, cl_event *event);

/* The fused step of every feature's table: grad_out has the forward's shape
 * (bags x the sum of cols), o[f] is the optimizer of feature f's table
 * (features sharing a table give the same kind, fields and states; o is read
 * with the stride of o[0].struct_size, which every o[f] carries). A table
 * shared by several features folds their contributions in feature order, then
 * id order, in one segment fold; each distinct table is one fold (its keys,
 * sort and step), in the order the tables first occur. Each table's result
 * equals clembed_bag_optimizer_step's on that table when one feature uses it. */
CLEMBED_API clembed_status clembed_bags_optimizer_step(clembed_context *ctx, const clembed_bag_feature *features,
                                                       size_t n, const clembed_matrix *grad_out,
                                                       const clembed_optimizer *o, cl_uint num_events_in_wait_list,
                                                       const cl_event *event_wait_list, cl_event *event);

/* nn.Embedding(max_norm=...): every distinct row in ids whose norm_type-norm
 * exceeds max_norm is scaled in place by max_norm / (norm + 1e-7) (PyTorch's
 * embedding_renorm_); other rows are not touched. In float32: the norm's sum
 * runs over ascending columns (p = 1: |x|; p = 2: x*x, then sqrt; infinity:
 * the largest |x|; other p > 0: pow(|x|, p), then pow(sum, 1/p), 1/p rounded
 * once on the host), then scale = max_norm / (norm + 1e-7f) and x = x * scale,
 * rounded to the table's dtype (F32, F16 or BF16). For p = 1, 2 and infinity
 * the bits are the same on every device dividing and taking square roots
 * correctly rounded; other p within 1e-6 relative (pow is the device's). Bad
 * ids (outside [0, rows)) are a deferred CLEMBED_ERR_INDEX_OUT_OF_RANGE and
 * renorm nothing. max_norm finite and >= 0, norm_type > 0 (or INFINITY), else
 * CLEMBED_ERR_INVALID_ARGUMENT. The table may be split. */
CLEMBED_API clembed_status clembed_renorm(clembed_context *ctx, clembed_matrix *table, const clembed_ids *ids,
                                          float max_norm, float norm_type, cl_uint num_events_in_wait_list,
                                          const cl_event *event_wait_list, cl_event *event);

#ifdef __cplusplus
}
#endif

#endif /* CLEMBED_H */
