/* Private to src/io: the parsed table of a file's tensors, filled by the three
 * readers (npy.c, safetensors.c, gguf.c) from the bytes of a mapping. The
 * readers use the C library only (no OpenCL, no context), so the fuzz targets
 * compile them on their own. */
#ifndef CLEMBED_IO_PRIVATE_H
#define CLEMBED_IO_PRIVATE_H

#include "clembed_io.h"

#include <stddef.h>
#include <stdint.h>

/* The formats, recognised by content. */
typedef enum ce_io_format { CE_IO_NPY = 0, CE_IO_SAFETENSORS, CE_IO_GGUF } ce_io_format;

/* The block types are clembed_dtype's CLEMBED_Q8_0 ... CLEMBED_MXFP4
 * (clembed.h, included by clembed_io.h). */

/* How a tensor's elements are stored, as far as loading is concerned. */
typedef enum ce_io_kind {
  CE_IO_OTHER = 0, /* listed, not loadable */
  CE_IO_F32,
  CE_IO_F16,
  CE_IO_BF16,
  CE_IO_I32,
  CE_IO_I64,
  CE_IO_BLOCKS, /* a block-quantized type: info.dtype says which */
  CE_IO_U8      /* bytes (.npy |u1, safetensors U8): loadable as the rows of a row-wise type */
} ce_io_kind;

typedef struct ce_io_tensor {
  clembed_tensor_info info; /* name and type_name set by ce_io_finish */
  size_t name_off;          /* into ce_io_table.strings */
  size_t type_off;          /* into strings, or (size_t)-1 with type_static set */
  const char *type_static;
  uint64_t offset;          /* of the data, from the start of the file */
  uint64_t elements;        /* product of the shape */
  ce_io_kind kind;
  uint32_t block_values, block_bytes; /* 1 and the element size for a plain type */
  int ndim;                 /* with dims_off: the whole shape's dimensions (info.ndim is at most 4) */
  size_t dims_off;          /* into ce_io_table.dims when ndim > 4, else (size_t)-1: info is the shape */
} ce_io_tensor;

/* At most this many dimensions in a .npy or .safetensors tensor: NumPy 2's
 * NPY_MAXDIMS (CLEMBED_FILE_MAX_DIMS). A GGUF tensor has at most 4 (ggml's). */
#define CE_IO_MAX_DIMS 64

typedef struct ce_io_table {
  ce_io_format format;
  size_t count, cap;
  ce_io_tensor *t;
  char *strings; /* NUL-terminated names and type names */
  size_t strings_len, strings_cap;
  uint64_t *dims; /* the shapes of tensors of more than 4 dimensions */
  size_t dims_len, dims_cap;
  size_t *meta;   /* a safetensors file's __metadata__: key and value offsets into strings, in pairs */
  size_t meta_count, meta_cap;
  char message[512]; /* what is wrong (without the file name) */
} ce_io_table;

/* Parses `size` bytes (a whole file). Returns 0, or -1 with table->message set;
 * on failure the table is freed. Pure: reads only [data, data + size). */
int ce_io_parse(const uint8_t *data, size_t size, ce_io_table *table);
void ce_io_table_free(ce_io_table *table);

/* ----- shared by the readers (parse.c) */
int ce_io_fail(ce_io_table *table, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Appends a new zeroed tensor; NULL (message set) when out of memory. */
ce_io_tensor *ce_io_add(ce_io_table *table);
/* Stores `len` bytes plus a NUL; returns its offset, or (size_t)-1 (message set). */
size_t ce_io_string(ce_io_table *table, const char *s, size_t len);
/* Keeps a metadata entry (a safetensors file's __metadata__: key, value). 0, or
 * -1 (message set) when out of memory. */
int ce_io_meta(ce_io_table *table, const char *key, size_t key_len, const char *value, size_t value_len);
/* Sets e's shape from `ndim` dimensions (at most CE_IO_MAX_DIMS, outermost
 * first, their product checked by the caller with ce_io_elements): info.ndim
 * and info.shape as clembed_tensor_info shows them (more than 4: the first
 * three and the product of the rest), the whole shape kept in the table.
 * Returns 0, or -1 (message set) when out of memory. */
int ce_io_set_shape(ce_io_table *table, ce_io_tensor *e, const uint64_t *shape, int ndim);
/* Checked products: 0 on overflow of uint64_t. */
int ce_io_mul(uint64_t a, uint64_t b, uint64_t *out);
/* The element count of a shape; 0 (failure) when the product of its non-zero
 * dimensions overflows, even if a zero makes the count 0, so that any subset of
 * the dimensions can be multiplied safely. */
int ce_io_elements(const uint64_t *shape, int ndim, uint64_t *elements);
/* Sets the string pointers, checks that names are unique and that every
 * tensor's [offset, offset + bytes) lies inside the file. */
int ce_io_finish(ce_io_table *table, uint64_t file_size);
/* A printable, quoted copy of untrusted bytes for a message ("..." if cut). */
void ce_io_quote(char *out, size_t cap, const char *s, size_t len);

int ce_io_parse_npy(const uint8_t *data, size_t size, ce_io_table *table);
int ce_io_parse_safetensors(const uint8_t *data, size_t size, ce_io_table *table);
int ce_io_parse_gguf(const uint8_t *data, size_t size, ce_io_table *table);

/* Little-endian reads (the files' byte order) from unaligned bytes. */
static inline uint16_t ce_io_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t ce_io_le32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t ce_io_le64(const uint8_t *p) {
  return (uint64_t)ce_io_le32(p) | ((uint64_t)ce_io_le32(p + 4) << 32);
}

#endif
