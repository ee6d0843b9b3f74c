/*
 * clembed_io: model and array files (.npy, .safetensors, .gguf) for clembed.
 *
 * Part of the clembed library (link with clembed). A file is recognised by its
 * content, not by its name:
 *   .npy          NumPy format 1.0, 2.0 or 3.0, one array, C order, 0 to
 *                 CLEMBED_FILE_MAX_DIMS dimensions. "<f4" and "<f2" load as
 *                 tables; "<i4" and "<i8" are ids (clembed_ids_load); any other
 *                 simple type ("<f8", ">f4", "|u1", ...) is listed with dtype
 *                 -1. Structured and object arrays and fortran_order True are
 *                 refused.
 *   .safetensors  an 8-byte little-endian header length, a JSON header
 *                 ({name: {"dtype", "shape", "data_offsets"}}, plus an optional
 *                 "__metadata__" map of strings: clembed_file_metadata) and the data;
 *                 0 to CLEMBED_FILE_MAX_DIMS dimensions. F32, F16 and BF16
 *                 load as tables; I32 and I64 are ids; the
 *                 other safetensors types are listed with dtype -1.
 *   .gguf         versions 2 and 3. The key/value section is checked and
 *                 skipped except for general.alignment (uint32, a power of two,
 *                 default 32). ggml types f32, f16, bf16 and the block types
 *                 q8_0, q4_0, q4_1, q5_0, q5_1, q2_K ... q6_K, iq4_nl, iq4_xs,
 *                 iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m, tq1_0,
 *                 tq2_0, mxfp4 are usable; i32 and i64 are ids; every other
 *                 ggml type is listed with dtype -1 and ggml's name for it
 *                 ("q8_K", "nvfp4", ...).
 *
 * Files are mapped read-only, never read whole. Every offset, length, count and
 * shape in a file is checked against the file before use (with overflow-safe
 * arithmetic; allocations are bounded by the file's size): a bad file is
 * CLEMBED_ERR_INVALID_ARGUMENT with a message naming the file and what is
 * wrong, from clembed_last_error_message() (clembed_file_open has no context),
 * or from the context's message for clembed_matrix_load. Data are read as
 * little-endian (the files' byte order); a big-endian host is not supported.
 */
#ifndef CLEMBED_IO_H
#define CLEMBED_IO_H

#include "clembed.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clembed_file clembed_file; /* opaque: an opened .npy, .safetensors or .gguf file */

/* The most dimensions a .npy or .safetensors tensor may have (NumPy 2's
 * limit; a GGUF tensor has at most 4, as in ggml). */
#define CLEMBED_FILE_MAX_DIMS 64

typedef struct clembed_tensor_info {
  const char *name;      /* owned by the file; "" for .npy */
  int dtype;             /* a clembed_dtype (CLEMBED_Q8_0 = 3 ... CLEMBED_MXFP4 = 24 for ggml's block
                            types), or -1 for a type clembed cannot use as a table (ids included, and
                            ggml's q8_1, q8_K, nvfp4, q1_0, q2_0: see type_name) */
  const char *type_name; /* the file's own name for the type: "F32", "BF16", "q4_K", "<f4", ...
                            (owned by the file) */
  int ndim;              /* 0 to 4: a tensor of more than 4 dimensions shows as 4, the last
                            being the product of its dimensions from the fourth on (as
                            clembed_matrix_load flattens; clembed_file_tensor_shape gives
                            them all) */
  uint64_t shape[4];     /* outermost first, as NumPy (a GGUF file's dims are reversed); unused
                            entries are 0 */
  uint64_t bytes;        /* the tensor's data in the file */
} clembed_tensor_info;

/* Opens and checks a file (mapped read-only; the mapping lives until
 * clembed_file_close). *f receives NULL on failure; the reason is in
 * clembed_last_error_message() (and clembed_context_error(NULL, ...)). A bad
 * file, a missing one, a directory or a pipe is CLEMBED_ERR_INVALID_ARGUMENT;
 * a big-endian host is CLEMBED_ERR_UNSUPPORTED. */
CLEMBED_API clembed_status clembed_file_open(const char *path, clembed_file **f);

/* Opens a file's bytes that are already in memory (read from a pipe, embedded,
 * downloaded): the same checks and messages as clembed_file_open, with `name`
 * naming the bytes in messages (a path, "standard input", ...). The memory is
 * borrowed, not copied: `size` bytes at `data` must stay valid and unchanged
 * until clembed_file_close. data may be NULL when size is 0 (an empty file,
 * refused as such). */
CLEMBED_API clembed_status clembed_file_open_memory(const void *data, size_t size, const char *name,
                                                    clembed_file **f);

/* Unmaps and frees. NULL is a no-op. Matrices loaded from the file stay valid. */
CLEMBED_API void clembed_file_close(clembed_file *f);

/* The number of tensors (1 for .npy; may be 0 for the others). 0 for NULL. */
CLEMBED_API size_t clembed_file_tensor_count(const clembed_file *f);

/* Tensor i, in the file's order (GGUF: the order of its tensor infos;
 * safetensors: the order of the JSON header). The strings are owned by the
 * file. */
CLEMBED_API clembed_status clembed_file_tensor_info(const clembed_file *f, size_t i,
                                                    clembed_tensor_info *info);

/* Tensor i's whole shape, outermost first (as NumPy; a GGUF file's dims
 * reversed): *ndim receives its number of dimensions (0 to
 * CLEMBED_FILE_MAX_DIMS) and shape[0 .. min(*ndim, capacity) - 1] its first
 * dimensions; shape may be NULL with capacity 0 (to ask for *ndim). */
CLEMBED_API clembed_status clembed_file_tensor_shape(const clembed_file *f, size_t i, uint64_t *shape,
                                                     int capacity, int *ndim);

/* The index of the tensor called `name` (exact, case-sensitive), or
 * CLEMBED_ERR_INVALID_ARGUMENT when there is none (the message, from
 * clembed_last_error_message(), lists the tensors). */
CLEMBED_API clembed_status clembed_file_find(const clembed_file *f, const char *name, size_t *i);

/* The tensor's bytes as the file stores them (little-endian; a block type's
 * blocks), inside the read-only mapping: valid until clembed_file_close, never
 * to be written. Not aligned in general (a safetensors tensor may start at any
 * byte). *data is NULL for a tensor of 0 bytes. */
CLEMBED_API clembed_status clembed_file_tensor_data(const clembed_file *f, size_t i, const void **data);

/* A .safetensors file's "__metadata__" (a map of strings), in the file's
 * order; 0 entries for .npy and .gguf files (GGUF's key/value section is not
 * kept) and for NULL. */
CLEMBED_API size_t clembed_file_metadata_count(const clembed_file *f);

/* Entry i of the metadata: *key and *value (either may be NULL) receive
 * NUL-terminated UTF-8 strings owned by the file (a NUL inside a string, "\u0000",
 * is refused when the file is opened). i past the count:
 * CLEMBED_ERR_INVALID_ARGUMENT. */
CLEMBED_API clembed_status clembed_file_metadata(const clembed_file *f, size_t i, const char **key,
                                                 const char **value);

/* The value of the first metadata entry whose key is `key` (exact), or NULL
 * when there is none (or f or key is NULL). Owned by the file. */
CLEMBED_API const char *clembed_file_metadata_find(const clembed_file *f, const char *key);

/* Creates *m (the caller owns it; release with clembed_matrix_release) and
 * uploads the tensor into it, straight from the file's mapping. Blocking.
 * - `name` NULL means the file's only tensor; for a GGUF file with several
 *   tensors, "token_embd.weight".
 * - Shape: a tensor of 2 or more dimensions has rows = the first dimension and
 *   cols = the product of the others; 1 dimension (n,) loads as 1 x n; 0
 *   dimensions as 1 x 1.
 * - `dtype` is the device dtype, from any stored F32, F16, BF16 or block-quantized
 *   (Q8_0 ... MXFP4) tensor: F32, F16 or BF16 from a float tensor (converted on
 *   the host, rounding to nearest even) or from a block-quantized one
 *   (dequantized exactly as ggml's dequantize_row_*); a block type from a
 *   tensor of that same type (its blocks as they lie); Q8_0 or Q4_0 from a
 *   float tensor (quantized as ggml's reference quantizers, whose cols must
 *   be a multiple of the block: CLEMBED_ERR_INVALID_ARGUMENT otherwise).
 *   Quantizing a float tensor to another block type: CLEMBED_ERR_UNSUPPORTED; a
 *   block type from another block type: CLEMBED_ERR_INVALID_ARGUMENT.
 *   FBGEMM's row-wise types (I8_ROWWISE ... FP8_ROWWISE) also from a float
 *   tensor (quantized as FBGEMM's quantizers) or from bytes as FBGEMM stores
 *   them (.npy |u1, safetensors U8, shape (rows, row bytes)): the rows as they
 *   are, cols the values a row of that many bytes holds (FP8_ROWWISE, whose
 *   values are padded to 4 bytes: the most it holds); rows of a length no row
 *   of the type has, or bytes loaded as another dtype:
 *   CLEMBED_ERR_INVALID_ARGUMENT naming dtype.
 * - When the stored type is the device dtype, the data go from the mapping to
 *   the buffer with no host copy in between; on POCL's CPU devices the matrix
 *   is a buffer over its own copy-on-write mapping of the file's pages (no
 *   copy at all; CLEMBED_NO_FILE_PAGES=1 makes it a copy). Otherwise through
 *   a temporary of at most 16 MiB (or CLEMBED_MAX_BUFFER_BYTES), a piece of
 *   whole blocks at a time.
 * - A tensor larger than the device's largest buffer (or
 *   CLEMBED_MAX_BUFFER_BYTES) loads as a split matrix (clembed.h, "Tables past
 *   one buffer"), piece by piece; on POCL each piece is over its own
 *   copy-on-write mapping of its rows' pages.
 * - A missing name, an unknown name (the message lists the file's tensors), a
 *   type that cannot be loaded as `dtype`: CLEMBED_ERR_INVALID_ARGUMENT with
 *   the detail in the context's message. *m is untouched on failure. */
CLEMBED_API clembed_status clembed_matrix_load(clembed_context *ctx, const clembed_file *f, const char *name,
                                               clembed_dtype dtype, clembed_matrix *m);

/* clembed_matrix_load of the tensor's rows first_row .. first_row + rows - 1
 * only (rows and cols as clembed_matrix_load counts them): *m is rows x cols,
 * holding the bits that clembed_matrix_load gives for those rows, and only
 * those rows' bytes of the file are read (mapped on POCL's CPU devices, as
 * there). rows may be 0. How a process holding a shard of a table loads it
 * (clembed_mpi_table_load). first_row past the tensor's rows, or rows past its
 * end: CLEMBED_ERR_INVALID_ARGUMENT naming first_row or rows; everything else
 * as clembed_matrix_load. */
CLEMBED_API clembed_status clembed_matrix_load_rows(clembed_context *ctx, const clembed_file *f, const char *name,
                                                    clembed_dtype dtype, uint64_t first_row, uint64_t rows,
                                                    clembed_matrix *m);

/* Creates *ids from an integer tensor (.npy "<i4"/"<i8", safetensors I32/I64,
 * GGUF i32/i64) of any shape, all its elements in C order; the index type is
 * the stored one. `name` as for clembed_matrix_load (NULL: the only tensor).
 * Blocking; the caller releases *ids with clembed_ids_release. */
CLEMBED_API clembed_status clembed_ids_load(clembed_context *ctx, const clembed_file *f, const char *name,
                                            clembed_ids *ids);

/* ------------------------------------------------------------- checkpoints
 *
 * A checkpoint is one .safetensors file holding matrices (tables, optimizer
 * states, position tables, ...) under names the caller chooses, and the
 * caller's metadata (step counts, seeds) as strings. Any safetensors reader
 * reads it: F32, F16 and BF16 matrices are tensors of their own type and
 * shape [rows, cols]; every other dtype (the block-quantized ones) is "U8" of
 * shape [rows, clembed_dtype_row_bytes(dtype, cols)], the rows' bytes as the
 * device holds them. "__metadata__" holds "clembed.checkpoint": "1", and for
 * each tensor "clembed.tensor.NAME": "dtype=q4_0 rows=R cols=C crc32c=XXXXXXXX"
 * (clembed_dtype_name's name, the matrix's shape, the CRC-32C of the
 * tensor's bytes as 8 lower-case hex digits), then the caller's entries. The
 * header is padded with spaces so that the data start at a multiple of 64
 * bytes; the tensors follow in the order given, with no gaps.
 * Optimizer states go under "TABLE.momentum1" and "TABLE.momentum2"
 * (clembed_optimizer's state and state2, as FBGEMM names them) and the step
 * count as metadata (clembed_optimizer.step): the Python package names them so,
 * with "TABLE.optimizer" (the kind) and "TABLE.step"; libclembed_mpi so, with
 * "clembed.optimizer.TABLE" (and takes either kind entry on load). Read the
 * metadata back with clembed_file_open and clembed_file_metadata_find. */
typedef struct clembed_checkpoint_item { /* one tensor to save or load */
  const char *name;                      /* its name in the file */
  clembed_matrix *matrix;                /* a table, an optimizer state, a position table ... */
} clembed_checkpoint_item;

/* Saves n matrices (any dtype, any shape, split ones and views too) and n_meta
 * metadata entries (meta_keys[i]: meta_values[i]; keys non-empty and unique,
 * not starting with "clembed."; keys, values and names valid UTF-8; names
 * non-empty, unique, not "__metadata__") into `path`. Blocking (it waits for
 * the context's work before reading each matrix).
 * Atomic: the file is written to a temporary file in the same folder
 * (".NAME.clembed-tmp.HOST.PID"), fsynced, renamed over `path`, and the folder
 * fsynced; a failure (no space, a write error, a kill of the process at any
 * moment) leaves the previous file at `path` whole. A failed save removes its
 * temporary file; one left by a killed process is removed by the next save to
 * the same path on the same host. One save to a path at a time.
 * The matrices are read a piece of rows (at most 32 MiB) at a time, never
 * staged whole; a split matrix piece by piece.
 * Errors: a bad argument (a NULL, a name or key as above, a matrix the data
 * calls refuse) CLEMBED_ERR_INVALID_ARGUMENT naming it; the file cannot be
 * created, written, synced or renamed (no space, RLIMIT_FSIZE, a missing
 * folder, no permission) CLEMBED_ERR_FILE, the message naming the path and
 * the system's reason; a device failure while reading a matrix its status. */
CLEMBED_API clembed_status clembed_checkpoint_save(clembed_context *ctx, const char *path,
                                                   const clembed_checkpoint_item *items, size_t n,
                                                   const char *const *meta_keys, const char *const *meta_values,
                                                   size_t n_meta);

/* Loads n matrices saved by clembed_checkpoint_save into existing matrices
 * (each item's matrix, written in place: a split one piece by piece). Every
 * check comes before any matrix is written: the file is a checkpoint (its
 * "clembed.checkpoint" entry), each item's name is in it, with the matrix's
 * dtype, rows and cols, stored as the format says, and the CRC-32C of every
 * tensor's bytes is the one its entry records. A failure of any of them is
 * CLEMBED_ERR_INVALID_ARGUMENT, the message naming the path, the tensor and
 * what differs (the file's shape and dtype and the matrix's, the stored and
 * computed checksums; a file that is not safetensors, is truncated or damaged
 * in its header: the reader's message), and no matrix is modified. The file
 * may hold more tensors than asked for. The metadata is read with
 * clembed_file_open and clembed_file_metadata_find. Blocking. */
CLEMBED_API clembed_status clembed_checkpoint_load(clembed_context *ctx, const char *path,
                                                   const clembed_checkpoint_item *items, size_t n);

#ifdef __cplusplus
}
#endif

#endif
