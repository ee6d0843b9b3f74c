/*
 * npy_write.h - the .npy writer of the command-line tool (and of the tests'
 * input files). Files are read through the library (clembed_io.h:
 * clembed_file_open, clembed_file_tensor_info, clembed_file_tensor_data).
 *
 * Element types (little-endian, C order):
 *   NPY_F4 '<f4'   float32
 *   NPY_F2 '<f2'   IEEE 754 binary16, kept as raw 16-bit patterns
 *   NPY_I4 '<i4'   int32
 *   NPY_I8 '<i8'   int64
 *
 * Writing produces format 1.0 (2.0 if the header would not fit) with the
 * header padded to a multiple of 64 bytes, exactly like numpy.save(), with 0
 * to NPY_MAX_DIMS dimensions. npy_write replaces the destination atomically
 * (temporary file in the same directory, fsync, rename); the tool's own output
 * (tools/cli/output.c) does the same around npy_write_fd.
 *
 * Element data in npy_array.data and in the buffer given to npy_write() is in
 * host byte order (the file is always little-endian; big-endian hosts are
 * byte-swapped transparently).
 */
#ifndef CLEMBED_TOOLS_NPY_WRITE_H
#define CLEMBED_TOOLS_NPY_WRITE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* as many as the library reads (CLEMBED_FILE_MAX_DIMS) */
#define NPY_MAX_DIMS 64

typedef enum { NPY_F4, NPY_F2, NPY_I4, NPY_I8 } npy_dtype;

/* An array in host memory, as the tool holds its inputs (data inside a
 * file's mapping, or the tool's own copy) and as it writes them. */
typedef struct {
    npy_dtype dtype;
    int ndim;                    /* 0 .. NPY_MAX_DIMS */
    size_t shape[NPY_MAX_DIMS];  /* unused entries are 0 */
    size_t count;                /* product of shape (1 when ndim == 0) */
    void *data;                  /* count * itemsize bytes (read-only for inputs) */
} npy_array;

/* Size in bytes of one element (0 for an invalid dtype). */
size_t npy_itemsize(npy_dtype dtype);

/* "<f4", "<f2", "<i4", "<i8" (or "?" for an invalid dtype). */
const char *npy_dtype_name(npy_dtype dtype);

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

#endif /* CLEMBED_TOOLS_NPY_WRITE_H */
