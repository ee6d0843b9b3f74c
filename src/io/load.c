/* clembed_matrix_load, clembed_ids_load: a tensor from a file's mapping to the
 * device, through the public data functions (a piece of the matrix at a time,
 * written as a 1 x k view), so no host copy is made when the stored type is
 * the device dtype. Of the library's internals, src/io uses only the messages
 * (here and in file.c) and the host dtype conversions (here). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "file.h"

#include "../ops/ops.h" /* the context's message and detail; the host dtype conversions */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The most bytes one write takes from the mapping (and the size of the
 * conversion temporary). */
#define CE_IO_CHUNK_BYTES ((size_t)16 << 20)

static const char *dtype_name(int d) {
  return ce_dtype_known((clembed_dtype)d) ? clembed_dtype_name((clembed_dtype)d) : "an unknown dtype";
}
static int is_float(int d) { return clembed_dtype_size((clembed_dtype)d) != 0; }
static int is_block(int d) { return ce_dtype_is_block((clembed_dtype)d); }

/* n stored values at p (unaligned, little-endian) to `dtype` in out. */
static void convert(void *out, clembed_dtype dtype, const uint8_t *p, ce_io_kind kind, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float v;
    if (kind == CE_IO_F32) {
      uint32_t u = ce_io_le32(p + 4 * i);
      memcpy(&v, &u, 4);
    } else if (kind == CE_IO_F16) {
      v = ce_f16_to_f32(ce_io_le16(p + 2 * i));
    } else {
      v = ce_bf16_to_f32(ce_io_le16(p + 2 * i));
    }
    if (dtype == CLEMBED_F32)
      ((float *)out)[i] = v;
    else if (dtype == CLEMBED_F16)
      ((uint16_t *)out)[i] = ce_f32_to_f16(v);
    else
      ((uint16_t *)out)[i] = ce_f32_to_bf16(v);
  }
}

/* Fails naming the operation (a call made inside it names itself) and the argument. */
#define LFAIL(code, arg, ...)                                                \
  do {                                                                       \
    status = ce_fail_arg(ctx, (code), op, (arg), -1, 0, __VA_ARGS__);        \
    goto cleanup;                                                            \
  } while (0)

static ce_io_kind kind_of(int dtype) {
  if (dtype == CLEMBED_F32) return CE_IO_F32;
  if (dtype == CLEMBED_F16) return CE_IO_F16;
  return dtype == CLEMBED_BF16 ? CE_IO_BF16 : CE_IO_BLOCKS;
}

/* A mapping of a file's pages owned by a buffer (freed when the buffer is). */
typedef struct ce_io_pages {
  void *base;
  size_t len;
} ce_io_pages;

static void CL_CALLBACK unmap_pages(cl_mem mem, void *user) {
  ce_io_pages *p = user;
  (void)mem;
  munmap(p->base, p->len);
  free(p);
}

/* On POCL's CPU devices (ctx->host_pages), a tensor stored as the device dtype
 * (the bytes [offset, offset + bytes) of the file: the tensor, or some of its
 * rows) becomes a buffer over its own copy-on-write mapping of the file's pages
 * (CL_MEM_USE_HOST_PTR): nothing is copied, only the pages that the work
 * touches are read, and what the device writes stays private to the buffer
 * (the file is never written). Rows larger than one buffer become pieces, each
 * over a mapping of its rows' pages. A mapping starts on a page, so a piece's
 * first row is at the rows' place in their first page (*lead, in values). The
 * buffer holds the mapping until it is released, whether or not the file is
 * closed. The `bytes` from file offset `at`: a buffer, or NULL when that is not
 * possible here (the caller uploads a copy). */
static cl_mem map_range(clembed_context *ctx, const clembed_file *f, const ce_io_tensor *e, uint64_t at,
                        uint64_t bytes, size_t *lead_values) {
  if (!ctx->host_pages || f->fd < 0 || bytes == 0 || getenv("CLEMBED_NO_FILE_PAGES")) return NULL;
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return NULL;
  uint64_t start = at / (uint64_t)page * (uint64_t)page, lead = at - start;
  if (lead % e->block_bytes || start > (uint64_t)INT64_MAX || bytes > SIZE_MAX - lead) return NULL;
  size_t len = (size_t)(lead + bytes);
  ce_io_pages *pages = malloc(sizeof *pages);
  if (!pages) return NULL;
  void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, f->fd, (off_t)start);
  if (base == MAP_FAILED) {
    free(pages);
    return NULL;
  }
  /* rows are read where ids point: no read-ahead around them */
  posix_madvise(base, len, POSIX_MADV_RANDOM);
  pages->base = base;
  pages->len = len;
  cl_int err = CL_SUCCESS;
  cl_mem buf = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, len, base, &err);
  if (err == CL_SUCCESS && buf && clSetMemObjectDestructorCallback(buf, unmap_pages, pages) == CL_SUCCESS) {
    *lead_values = (size_t)(lead / e->block_bytes) * e->block_values;
    return buf;
  }
  if (buf) clReleaseMemObject(buf);
  munmap(base, len);
  free(pages);
  return NULL;
}

/* `rows` rows of `row_bytes` from file offset `offset` (stored as the device
 * dtype) over mappings of the file's pages: one buffer, or pieces registered
 * as a split matrix. A buffer holds its mapping from the start of a page, so
 * the bytes before its first row (its lead) count against ctx->max_piece with
 * its rows: each piece takes the rows that fit beside its own lead. 1: done;
 * 0: not possible here. */
static int map_pages(clembed_context *ctx, const clembed_file *f, const ce_io_tensor *e, uint64_t offset,
                     uint64_t row_bytes, clembed_dtype dtype, size_t rows, size_t cols, clembed_matrix *out) {
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0 || row_bytes == 0) return 0;
  size_t limit = ctx->max_piece / 4 * 4, cap = CE_PIECES_LOCAL, made = 0, lead;
  ce_piece local[CE_PIECES_LOCAL], *pieces = local;
  int ok = 1;
  for (size_t r0 = 0; ok && (r0 < rows || made == 0);) {
    uint64_t at = offset + (uint64_t)r0 * row_bytes, before = at % (uint64_t)page;
    size_t nr = rows - r0;
    if (before + (uint64_t)nr * row_bytes > limit) { /* the rows that fit beside this piece's lead */
      nr = before < limit ? (size_t)((limit - before) / row_bytes) : 0;
      if (nr == 0) {
        ok = 0;
        break;
      }
    }
    if (made == cap) {
      ce_piece *grown = malloc(2 * cap * sizeof *grown);
      if (!grown) {
        ok = 0;
        break;
      }
      memcpy(grown, pieces, made * sizeof *grown);
      if (pieces != local) free(pieces);
      pieces = grown;
      cap *= 2;
    }
    cl_mem b = map_range(ctx, f, e, at, (uint64_t)nr * row_bytes, &lead);
    if (!b) {
      ok = 0;
      break;
    }
    pieces[made++] = (ce_piece){b, r0, lead};
    r0 += nr;
  }
  int done = ok && (made == 1 || ce_pieces_register(ctx, pieces, made, rows, cols, dtype) == CLEMBED_OK);
  if (done) {
    out->buffer = pieces[0].buffer;
    out->offset = made == 1 ? pieces[0].offset : 0; /* a split matrix's offset counts from its first row */
    out->rows = rows;
    out->cols = cols;
    out->ld = made == 1 ? 0 : cols;
    out->dtype = dtype;
  } else {
    for (size_t j = 0; j < made; j++) clReleaseMemObject(pieces[j].buffer);
  }
  if (pieces != local) free(pieces);
  return done;
}

/* The tensor a load asks for, checked against the device dtype: its index in
 * *i, its rows and columns (rows = the first dimension, cols = the product of
 * the others), and whether a float tensor is quantized on the way. Bytes (U8)
 * loaded as a row-wise dtype are its rows as stored: *raw_bytes is then the
 * bytes of a row (the product of the other dimensions) and cols the values
 * they hold; else 0. */
static clembed_status load_tensor(clembed_context *ctx, const char *op, const clembed_file *f, const char *name,
                                  clembed_dtype dtype, size_t *i, uint64_t *rows_out, uint64_t *cols_out,
                                  int *quantize, uint64_t *raw_bytes) {
  clembed_status status = CLEMBED_OK;
  char msg[1400];
  if (!is_float((int)dtype) && !is_block((int)dtype))
    LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, "dtype", "%s: unknown dtype %d", op, (int)dtype);
  if (ce_file_lookup(f, name, i, msg, sizeof msg) != CLEMBED_OK) LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, "name", "%s", msg);
  const ce_io_tensor *e = &f->table.t[*i];
  const char *tn = e->info.name, *ty = e->info.type_name;
  const ce_rowwise_facts *rw = ce_rowwise_of((int)dtype);
  *raw_bytes = 0;
  if (e->kind == CE_IO_U8 && !rw)
    LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, "dtype",
          "%s: tensor '%s' is of type %s (bytes), which loads only as the rows of one of FBGEMM's row-wise types "
          "(i8_rowwise ... fp8_rowwise), not as %s",
          f->path, tn, ty, dtype_name((int)dtype));
  if (e->kind != CE_IO_F32 && e->kind != CE_IO_F16 && e->kind != CE_IO_BF16 && e->kind != CE_IO_BLOCKS &&
      e->kind != CE_IO_U8) {
    char types[256] = "";
    for (int d = 0, used = 0; ce_dtype_facts_of(d) && used < (int)sizeof types; d++)
      if (is_block(d)) used += snprintf(types + used, sizeof types - (size_t)used, "%s%s", used ? ", " : "", dtype_name(d));
    LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, "name",
          "%s: tensor '%s' is of type %s, which cannot be loaded as a matrix (the float types F32, F16, BF16 and "
          "ggml's block types %s can; bytes, as the rows of FBGEMM's row-wise types)", f->path, tn, ty, types);
  }
  if (e->kind == CE_IO_BLOCKS && is_block((int)dtype) && (int)dtype != e->info.dtype)
    LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, "dtype",
          "%s: tensor '%s' is %s and cannot be loaded as %s (load it as %s, or dequantize it to f32, f16 or bf16)",
          f->path, tn, ty, dtype_name((int)dtype), dtype_name(e->info.dtype));
  if (e->kind != CE_IO_BLOCKS && is_block((int)dtype) && dtype != CLEMBED_Q8_0 && dtype != CLEMBED_Q4_0 &&
      !ce_rowwise_of((int)dtype))
    LFAIL(CLEMBED_ERR_UNSUPPORTED, "dtype",
          "%s: tensor '%s' is %s: quantizing it to %s on loading is not available (q8_0, q4_0 and FBGEMM's row-wise "
          "types are)", f->path, tn, ty, dtype_name((int)dtype));
  /* a float tensor quantized: pieces of whole blocks of the device dtype */
  *quantize = e->kind != CE_IO_BLOCKS && e->kind != CE_IO_U8 && is_block((int)dtype);
  uint64_t rows = 1, cols = 1;
  if (e->info.ndim == 1) cols = e->info.shape[0];
  if (e->info.ndim >= 2) rows = e->info.shape[0];
  for (int d = 1; d < e->info.ndim; d++)
    if (!ce_io_mul(cols, e->info.shape[d], &cols)) /* only when rows is 0 */
      LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, "name", "%s: tensor '%s': its column count overflows", f->path, tn);
  if (rows > SIZE_MAX || cols > SIZE_MAX || e->elements > SIZE_MAX || e->info.bytes > SIZE_MAX)
    LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, "name", "%s: tensor '%s' is too large for this process", f->path, tn);
  if (e->kind == CE_IO_BLOCKS && cols % e->block_values)
    LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, "name", "%s: tensor '%s': %llu columns, not a multiple of %s's block of %u",
          f->path, tn, (unsigned long long)cols, ty, e->block_values);
  if (e->kind == CE_IO_U8) { /* FBGEMM's rows as they are: a row's bytes give its values */
    uint64_t c = ce_rowwise_cols_of_bytes(rw, (size_t)cols);
    if (!c)
      LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, "dtype",
            "%s: tensor '%s': rows of %llu bytes, which no %s row is (its rows hold C values in %u%s bytes, C a "
            "multiple of %u%s)",
            f->path, tn, (unsigned long long)cols, dtype_name((int)dtype), rw->sb,
            rw->bits == 8 ? " + C" : rw->bits == 4 ? " + C/2" : " + C/4", rw->mult,
            rw->pad > 1 ? ", the values padded to a multiple of 4 bytes" : "");
    *raw_bytes = cols;
    cols = c;
  }
  if (*quantize && ce_rowwise_of((int)dtype) && !clembed_dtype_row_bytes(dtype, (size_t)cols))
    LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, "dtype",
          "%s: tensor '%s': %llu columns, not a multiple of %u, cannot be quantized to %s", f->path, tn,
          (unsigned long long)cols, ce_rowwise_cols_multiple(ce_rowwise_of((int)dtype)), dtype_name((int)dtype));
  if (*quantize && !ce_rowwise_of((int)dtype) && cols % clembed_dtype_block_values(dtype))
    LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, "dtype",
          "%s: tensor '%s': %llu columns, not a multiple of %s's block of %zu values, cannot be quantized to it",
          f->path, tn, (unsigned long long)cols, dtype_name((int)dtype), clembed_dtype_block_values(dtype));
  *rows_out = rows;
  *cols_out = cols;
cleanup:
  return status;
}

/* Writes nrows x cols of tensor e from file byte `first_byte` into `out` (of
 * the device dtype), a piece of whole blocks (whole values of a float type)
 * at a time, at most CE_IO_CHUNK_BYTES of the file or of the float values it
 * becomes (and at most the largest buffer of a matrix), of whole rows when
 * there are several (a matrix in several buffers takes views of whole rows):
 *  - the stored type: written from the mapping as it lies;
 *  - blocks to a float dtype: written from the mapping as host blocks
 *    (clembed_matrix_write dequantizes them, ggml's dequantize_row_*);
 *  - a float type to another: converted here;
 *  - a float type to Q8_0/Q4_0 or a row-wise type: converted here to F32,
 *    written as F32 (clembed_matrix_write quantizes: ggml's
 *    quantize_row_*_ref, FBGEMM's row-wise quantizers). */
static clembed_status upload(clembed_context *ctx, const char *op, const clembed_file *f, const ce_io_tensor *e,
                             uint64_t first_byte, uint64_t nrows, uint64_t cols, int quantize, uint64_t raw_bytes,
                             clembed_matrix *out) {
  clembed_status status = CLEMBED_OK;
  clembed_dtype dtype = out->dtype;
  void *tmp = NULL;
  const uint8_t *src = f->map + first_byte;
  size_t unit_values = e->block_values, unit_bytes = e->block_bytes;
  if (quantize) { /* a block of the device dtype (a row of a row-wise type) */
    unit_values = ce_rowwise_of((int)dtype) ? (size_t)cols : clembed_dtype_block_values(dtype);
    unit_bytes = unit_values * e->block_bytes;
  }
  if (raw_bytes) { /* a row-wise type's rows as stored: a row is the unit */
    unit_values = (size_t)cols;
    unit_bytes = (size_t)raw_bytes;
  }
  if (!unit_values) return CLEMBED_OK; /* no columns: nothing to write */
  size_t units = (size_t)(nrows * cols) / unit_values;
  int same = raw_bytes || (kind_of((int)dtype) == e->kind && (e->kind != CE_IO_BLOCKS || (int)dtype == e->info.dtype));
  int from_blocks = e->kind == CE_IO_BLOCKS && !same;
  int convert_here = !same && !from_blocks;
  clembed_dtype tmp_dtype = quantize ? CLEMBED_F32 : dtype;
  size_t widest = unit_bytes; /* the most bytes a unit takes in the file or as float values */
  if (!same && unit_values * 4 > widest) widest = unit_values * 4;
  size_t chunk = CE_IO_CHUNK_BYTES < ctx->max_piece ? CE_IO_CHUNK_BYTES : ctx->max_piece;
  size_t per = chunk / widest, row_units = nrows > 1 ? units / (size_t)nrows : 0;
  if (per == 0) per = 1;
  if (row_units) per = per < row_units ? row_units : per / row_units * row_units;
  if (convert_here && units) {
    size_t n = per < units ? per : units;
    tmp = malloc(n * unit_values * clembed_dtype_size(tmp_dtype));
    if (!tmp) LFAIL(CLEMBED_ERR_OUT_OF_MEMORY, "", "%s: out of host memory for a %zu-value piece", op, n);
  }
  for (size_t u = 0; u < units; u += per) {
    size_t n = units - u < per ? units - u : per;
    clembed_matrix view = *out;
    view.offset = u * unit_values;
    view.rows = row_units ? n / row_units : 1;
    view.cols = row_units ? (size_t)cols : n * unit_values;
    view.ld = row_units ? (size_t)cols : 0;
    const uint8_t *p = src + u * unit_bytes;
    if (same) {
      status = clembed_matrix_write(ctx, &view, p, dtype);
    } else if (from_blocks) {
      status = clembed_matrix_write(ctx, &view, p, (clembed_dtype)e->info.dtype);
    } else {
      convert(tmp, tmp_dtype, p, e->kind, n * unit_values);
      status = clembed_matrix_write(ctx, &view, tmp, tmp_dtype);
    }
    if (status != CLEMBED_OK) {
      char detail[512];
      snprintf(detail, sizeof detail, "%s", clembed_context_message(ctx));
      LFAIL(status, "", "%s: loading tensor '%s': %s", f->path, e->info.name, detail);
    }
  }
cleanup:
  free(tmp);
  return status;
}

/* clembed_matrix_load (`all`: every row) and clembed_matrix_load_rows (the
 * tensor's rows [first_row, first_row + nrows)). */
static clembed_status load(clembed_context *ctx, const char *op, const clembed_file *f, const char *name,
                           clembed_dtype dtype, int all, uint64_t first_row, uint64_t nrows, clembed_matrix *m) {
  clembed_status status = CLEMBED_OK;
  clembed_matrix out = {0};
  size_t i = 0;
  uint64_t rows = 0, cols = 0, raw_bytes = 0;
  int quantize = 0;
  CE_ENTER(ctx, op);
  if (!f || !m) LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, f ? "m" : "f", "%s: %s is NULL", op, f ? "m" : "f");
  status = load_tensor(ctx, op, f, name, dtype, &i, &rows, &cols, &quantize, &raw_bytes);
  if (status != CLEMBED_OK) goto cleanup;
  const ce_io_tensor *e = &f->table.t[i];
  const char *tn = e->info.name;
  if (all) nrows = rows;
  if (first_row > rows || nrows > rows - first_row)
    LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, first_row > rows ? "first_row" : "rows",
          "%s: %s: %llu rows from row %llu of tensor '%s', which has %llu rows", op, f->path,
          (unsigned long long)nrows, (unsigned long long)first_row, tn, (unsigned long long)rows);
  /* the rows' bytes in the file: whole blocks (or values) of `cols` per row */
  uint64_t row_bytes = raw_bytes ? raw_bytes : cols / e->block_values * e->block_bytes,
           first_byte = e->offset + first_row * row_bytes;
  if ((int)dtype == e->info.dtype &&
      map_pages(ctx, f, e, first_byte, row_bytes, dtype, (size_t)nrows, (size_t)cols, &out)) {
    *m = out;
    out.buffer = NULL;
    ctx->op = op;
    goto cleanup;
  }
  status = clembed_matrix_create(ctx, (size_t)nrows, (size_t)cols, dtype, &out);
  if (status != CLEMBED_OK) {
    char detail[512];
    snprintf(detail, sizeof detail, "%s", clembed_context_message(ctx));
    LFAIL(status, "", "%s: tensor '%s' (%llu x %llu): %s", f->path, tn, (unsigned long long)nrows,
          (unsigned long long)cols, detail);
  }
  status = upload(ctx, op, f, e, first_byte, nrows, cols, quantize, raw_bytes, &out);
  if (status != CLEMBED_OK) goto cleanup;
  *m = out;
  out.buffer = NULL;
  ctx->op = op;
cleanup:
  clembed_matrix_release(&out);
  return status;
}

clembed_status clembed_matrix_load(clembed_context *ctx, const clembed_file *f, const char *name, clembed_dtype dtype,
                                   clembed_matrix *m) {
  return load(ctx, "clembed_matrix_load", f, name, dtype, 1, 0, 0, m);
}

clembed_status clembed_matrix_load_rows(clembed_context *ctx, const clembed_file *f, const char *name,
                                        clembed_dtype dtype, uint64_t first_row, uint64_t rows, clembed_matrix *m) {
  return load(ctx, "clembed_matrix_load_rows", f, name, dtype, 0, first_row, rows, m);
}

clembed_status clembed_ids_load(clembed_context *ctx, const clembed_file *f, const char *name, clembed_ids *ids) {
  clembed_status status = CLEMBED_OK;
  char msg[1400];
  size_t i;
  const char *op = "clembed_ids_load";
  CE_ENTER(ctx, op);
  if (!f || !ids) LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, f ? "ids" : "f", "clembed_ids_load: %s is NULL", f ? "ids" : "f");
  if (ce_file_lookup(f, name, &i, msg, sizeof msg) != CLEMBED_OK) LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, "name", "%s", msg);
  const ce_io_tensor *e = &f->table.t[i];
  if (e->kind != CE_IO_I32 && e->kind != CE_IO_I64)
    LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, "name", "%s: tensor '%s' is of type %s; ids must be 32- or 64-bit integers", f->path,
         e->info.name, e->info.type_name);
  if (e->elements > SIZE_MAX)
    LFAIL(CLEMBED_ERR_INVALID_ARGUMENT, "name", "%s: tensor '%s' is too large for this process", f->path, e->info.name);
  status = clembed_ids_create(ctx, e->elements ? f->map + e->offset : NULL, (size_t)e->elements,
                              e->kind == CE_IO_I32 ? CLEMBED_I32 : CLEMBED_I64, ids);
  if (status != CLEMBED_OK) {
    snprintf(msg, sizeof msg, "%s", clembed_context_message(ctx));
    LFAIL(status, "", "%s: tensor '%s': %s", f->path, e->info.name, msg);
  }
  ctx->op = op;
cleanup:
  return status;
}
