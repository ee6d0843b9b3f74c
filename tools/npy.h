/*
 * npy.h - minimal, defensive reader/writer for NumPy .npy files.
 *
 * Supported element types (little-endian only, C order only):
 *   NPY_F4 '<f4'   float32
 *   NPY_F2 '<f2'   IEEE 754 binary16, kept as raw 16-bit patterns
 *   NPY_I4 '<i4'   int32
 *   NPY_I8 '<i8'   int64
 *
 * Reading accepts format versions 1.0, 2.0 and 3.0 and 0 to NPY_MAX_DIMS
 * dimensions.  Anything else (other dtypes, big-endian data, structured
 * dtypes, fortran_order True, malformed or truncated files, trailing bytes
 * after the data) is rejected with a message of the form "<path>: <problem>".
 *
 * Writing produces format 1.0 (2.0 if the header would not fit) with the
 * header padded to a multiple of 64 bytes, exactly like numpy.save(), and
 * replaces the destination atomically (temporary file in the same directory,
 * fsync, rename).
 *
 * Element data in npy_array.data and in the buffer given to npy_write() is in
 * host byte order (the file is always little-endian; big-endian hosts are
 * byte-swapped transparently).
 */
#ifndef CLEMBED_TOOLS_NPY_H
#define CLEMBED_TOOLS_NPY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NPY_MAX_DIMS 8

typedef enum { NPY_F4, NPY_F2, NPY_I4, NPY_I8 } npy_dtype;

typedef struct {
    npy_dtype dtype;
    int ndim;                    /* 0 .. NPY_MAX_DIMS */
    size_t shape[NPY_MAX_DIMS];  /* unused entries are 0 */
    size_t count;                /* product of shape (1 when ndim == 0) */
    void *data;                  /* malloc'd, count * itemsize bytes; never
                                    NULL after a successful npy_read */
} npy_array;

/* Size in bytes of one element (0 for an invalid dtype). */
size_t npy_itemsize(npy_dtype dtype);

/* "<f4", "<f2", "<i4", "<i8" (or "?" for an invalid dtype). */
const char *npy_dtype_name(npy_dtype dtype);

/*
 * Load a .npy file.  Returns 0 on success (out filled in; release with
 * npy_free) or -1 on failure, in which case *out is zeroed, nothing is
 * leaked, and err (if non-NULL and errlen > 0) holds a NUL-terminated
 * message that starts with the path.
 */
int npy_read(const char *path, npy_array *out, char *err, size_t errlen);

/*
 * A .npy file mapped read-only: array.data points into the mapping (after
 * the header) and must not be written.  Files that are not mapped (pipes,
 * FIFOs, data not aligned to the item size, and every file on a big-endian
 * host) are read as npy_read reads them.
 */
typedef struct {
    npy_array array;
    void *map;         /* the mapping, or NULL when the file was read */
    size_t map_bytes;
} npy_mapping;

/*
 * Map a .npy file with the checks of npy_read (the same messages).  Returns 0
 * (release with npy_unmap, never npy_free) or -1 with *out zeroed and a
 * message in err.  The file must not shrink while it is mapped.
 */
int npy_map(const char *path, npy_mapping *out, char *err, size_t errlen);

/* Unmap (or free) and zero the struct.  Accepts NULL and a zeroed struct. */
void npy_unmap(npy_mapping *m);

/* Free a's data and zero the struct.  Accepts NULL. */
void npy_free(npy_array *a);

/*
 * Write a C-order little-endian .npy file.  shape may be NULL only when
 * ndim == 0; data may be NULL only when the element count is 0.
 * The file is first written to "<path>.tmp.XXXXXX" in the same directory,
 * flushed and fsync'ed, then renamed over path.  On failure the temporary
 * file is removed and an existing file at path is left untouched.
 * Returns 0 on success, -1 on failure with a message in err.
 */
int npy_write(const char *path, npy_dtype dtype, int ndim, const size_t *shape,
              const void *data, char *err, size_t errlen);

/*
 * Write a .npy file (header and data, as npy_write writes them) to an open
 * file descriptor: a pipe, a device, a FIFO or a file.  `name` names it in
 * messages.  Returns 0, or -1 with a message in err (some bytes may have been
 * written).
 */
int npy_write_fd(int fd, const char *name, npy_dtype dtype, int ndim, const size_t *shape,
                 const void *data, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* CLEMBED_TOOLS_NPY_H */
