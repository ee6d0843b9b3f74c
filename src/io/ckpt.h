/* The checkpoint file's format and its safe writing (ckpt_format.c), shared by
 * clembed_checkpoint_save/_load (checkpoint.c) and libclembed_mpi's
 * clembed_mpi_checkpoint_save/_load (src/mpi/checkpoint.c), which compiles
 * ckpt_format.c into its own library (hidden there as here): C library, POSIX
 * and clembed's public headers only, no OpenCL calls and no context.
 *
 * A checkpoint is a .safetensors file (clembed_io.h reads it as any other):
 *   8 bytes: the header's length N (little-endian);
 *   N bytes: the JSON header, padded with spaces so that the data start at a
 *            multiple of 64 bytes: first "__metadata__", then the tensors in
 *            the caller's order, each {"dtype", "shape", "data_offsets"}
 *            (F32, F16, BF16 as [rows, cols]; every other dtype as "U8"
 *            [rows, row bytes]);
 *   the tensors' bytes, in the same order, each row as the device holds it
 *   (clembed_dtype_row_bytes), no gaps.
 * "__metadata__" holds "clembed.checkpoint": "1", for each tensor
 * "clembed.tensor.NAME": "dtype=f32 rows=R cols=C crc32c=xxxxxxxx" (clembed's
 * dtype name, the logical shape, the CRC-32C of the tensor's bytes in 8
 * lower-case hex digits), then the caller's entries (keys not starting with
 * "clembed."). The header's length does not depend on the checksums, so the
 * data can be written before the header is. */
#ifndef CLEMBED_CKPT_H
#define CLEMBED_CKPT_H

#include "clembed_io.h"

#include <stddef.h>
#include <stdint.h>

#define CE_CKPT_ALIGN 64 /* the data start at a multiple of this */
#define CE_CKPT_PREFIX "clembed."
#define CE_CKPT_TENSOR_KEY "clembed.tensor."

/* CRC-32C (Castagnoli: polynomial 0x1EDC6F41, reflected 0x82F63B78; initial
 * and final xor 0xFFFFFFFF; iSCSI's, ext4's, and SSE4.2's crc32 instruction's,
 * which computes it where the CPU has it): crc of the bytes that follow those
 * summed into `crc` (0 to start). */
uint32_t ce_ckpt_crc32c(uint32_t crc, const void *p, size_t n);
/* The CRC-32C of A followed by B from crc(A), crc(B) and B's length (as zlib's
 * crc32_combine does it for its polynomial). */
uint32_t ce_ckpt_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

typedef struct ce_ckpt_tensor {
  const char *name;
  clembed_dtype dtype;
  uint64_t rows, cols;
  uint64_t row_bytes, bytes; /* filled by ce_ckpt_header */
  uint64_t offset;           /* of the data, from the start of the file: filled by ce_ckpt_header */
  uint32_t crc;
} ce_ckpt_tensor;

/* Checks the names (non-empty valid UTF-8, unique, not "__metadata__"), the
 * dtypes and shapes (a row's bytes exist), the caller's metadata (keys
 * non-empty valid UTF-8 not starting with "clembed.", unique; values valid
 * UTF-8) and builds the whole header (the 8-byte length included) into a
 * malloc'd buffer: *len its size (the offset of the data). Fills each
 * tensor's row_bytes, bytes and offset. NULL on failure, with msg (naming
 * what is wrong) and *status (CLEMBED_ERR_INVALID_ARGUMENT, or
 * CLEMBED_ERR_OUT_OF_MEMORY) set. Deterministic: the same arguments give the
 * same bytes on every rank. */
char *ce_ckpt_header(ce_ckpt_tensor *t, size_t n, const char *const *keys, const char *const *values, size_t n_meta,
                     size_t *len, clembed_status *status, char *msg, size_t cap);
/* ... with entries of clembed's own (own_keys starting with "clembed.", not
 * checked) after the tensors' entries. */
char *ce_ckpt_header_own(ce_ckpt_tensor *t, size_t n, const char *const *keys, const char *const *values,
                         size_t n_meta, const char *const *own_keys, const char *const *own_values, size_t n_own,
                         size_t *len, clembed_status *status, char *msg, size_t cap);

/* Parses a "clembed.tensor.NAME" value. 0 on success, -1 when malformed. */
int ce_ckpt_parse_entry(const char *value, clembed_dtype *dtype, uint64_t *rows, uint64_t *cols, uint32_t *crc);

/* The safetensors type a matrix of dtype is stored as: "F32", "F16", "BF16", else "U8". */
const char *ce_ckpt_stored_type(clembed_dtype dtype);

/* Tensor `name` of checkpoint f (opened from `path`) as a dtype rows x cols
 * matrix: its entry there, its shape, dtype and storage checked; *data and
 * *bytes its bytes in the mapping, *crc the CRC-32C its entry records. 0, or
 * -1 with msg set ("PATH holds no tensor 'NAME'", "PATH: tensor 'NAME' is R x C
 * q8_0 in the file, but WHOSE is ...", a malformed entry, a storage that does
 * not hold the matrix); whose names the caller's matrix in that message
 * ("the matrix of item 3", "the table"). *oom is set when host memory ran out. */
int ce_ckpt_find(const clembed_file *f, const char *path, const char *name, clembed_dtype dtype, uint64_t rows,
                 uint64_t cols, const char *whose, const uint8_t **data, uint64_t *bytes, uint32_t *crc, int *oom,
                 char *msg, size_t cap);

/* Rows and pieces: the saves and loads move a matrix a piece of at most
 * CE_CKPT_CHUNK bytes of whole rows at a time (one row when a row is larger). */
#define CE_CKPT_CHUNK ((size_t)32 << 20)
static inline size_t ce_ckpt_rows_per_piece(uint64_t row_bytes) {
  return row_bytes >= CE_CKPT_CHUNK ? 1 : (size_t)(CE_CKPT_CHUNK / (row_bytes ? row_bytes : 1));
}
/* The largest piece any of the n tensors (row_bytes and bytes filled) moves:
 * the size of the buffer a save reads them through. */
static inline uint64_t ce_ckpt_largest_piece(const ce_ckpt_tensor *t, size_t n) {
  uint64_t most = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t piece = (uint64_t)ce_ckpt_rows_per_piece(t[i].row_bytes) * t[i].row_bytes;
    if (piece > t[i].bytes) piece = t[i].bytes;
    if (piece > most) most = piece;
  }
  return most;
}
/* A view of rows [r0, r0 + k) of m. */
static inline clembed_matrix ce_ckpt_rows_of(const clembed_matrix *m, size_t r0, size_t k) {
  clembed_matrix v = *m;
  v.offset = m->offset + r0 * (m->ld ? m->ld : m->cols);
  v.rows = k;
  return v;
}

/* The temporary file of a save to `path`: ".BASENAME.clembed-tmp.HOST.PID" in
 * path's folder (malloc'd; NULL when out of memory). */
char *ce_ckpt_temp_path(const char *path);
/* Removes what earlier saves to `path` left behind: temporary files of this
 * host whose process no longer runs (a killed save's). */
void ce_ckpt_remove_stale(const char *path);
/* Writes n bytes at offset off (pwrite until done, EINTR retried). 0, or -1
 * with errno set. */
int ce_ckpt_pwrite(int fd, const void *p, size_t n, uint64_t off);
/* Starts the disk writing [off, off + n) of fd now (Linux: sync_file_range
 * with SYNC_FILE_RANGE_WRITE; elsewhere nothing), so that the disk works while
 * the next piece is read and summed instead of all at the fsync. A hint: its
 * failure is ignored (the fsync reports errors). */
void ce_ckpt_start_writeback(int fd, uint64_t off, uint64_t n);
/* fsyncs the folder holding `path`. 0, or -1 with errno set. */
int ce_ckpt_sync_folder(const char *path);

/* Test hook (src/test_hooks.h): called at each stage of a save ("opened",
 * "data", "header", "synced", "renamed", "done"). */
extern void (*ce_ckpt_stage_hook)(const char *stage);
static inline void ce_ckpt_stage(const char *stage) {
  if (ce_ckpt_stage_hook) ce_ckpt_stage_hook(stage);
}

#endif
