/* The .gguf reader (ggml's docs/gguf.md, versions 2 and 3, little-endian).
 *
 *   "GGUF", uint32 version, uint64 tensor count, uint64 key/value count;
 *   the key/value pairs (string key, uint32 value type, value); the tensor
 *   infos (string name, uint32 n_dims <= 4, n_dims uint64 dims innermost
 *   first, uint32 ggml type, uint64 offset); padding to the alignment; the
 *   data, each tensor at data start + its offset (a multiple of the alignment).
 *   A string is a uint64 length and that many bytes; an array a uint32 element
 *   type, a uint64 count and the elements (arrays may nest).
 * Every length and count is checked against the bytes left before anything
 * is read or allocated, and an array's count against the smallest size its
 * elements can have, so a hostile file costs time and memory in proportion to
 * its size. The key/value pairs are skipped except general.alignment (uint32,
 * a power of two; 32 by default), as ggml reads it. */
#include "io.h"

#include <stdio.h>
#include <string.h>

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64 /* ggml's GGML_MAX_NAME: names are shorter */
#define GGUF_MAX_DEPTH 8 /* nested arrays */

enum { T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64, T_COUNT };
static const uint8_t value_size[T_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static const char *const value_name[T_COUNT] = {"uint8", "int8",  "uint16", "int16", "uint32", "int32", "float32",
                                                "bool",  "string", "array", "uint64", "int64", "float64"};

/* ggml's types: name, values per block, bytes per block (ggml.c type_traits;
 * gguf-py's GGML_QUANT_SIZES). Numbers without a name were removed from ggml. */
typedef struct ggml_type {
  const char *name;
  uint32_t block_values, block_bytes;
  ce_io_kind kind;
  int dtype;
} ggml_type;

static const ggml_type ggml_types[] = {
    [0] = {"f32", 1, 4, CE_IO_F32, CLEMBED_F32},
    [1] = {"f16", 1, 2, CE_IO_F16, CLEMBED_F16},
    [2] = {"q4_0", 32, 18, CE_IO_BLOCKS, CLEMBED_Q4_0},
    [3] = {"q4_1", 32, 20, CE_IO_BLOCKS, CLEMBED_Q4_1},
    [6] = {"q5_0", 32, 22, CE_IO_BLOCKS, CLEMBED_Q5_0},
    [7] = {"q5_1", 32, 24, CE_IO_BLOCKS, CLEMBED_Q5_1},
    [8] = {"q8_0", 32, 34, CE_IO_BLOCKS, CLEMBED_Q8_0},
    [9] = {"q8_1", 32, 36, CE_IO_OTHER, -1}, /* two f16 (d, s) and 32 int8 */
    [10] = {"q2_K", 256, 84, CE_IO_BLOCKS, CLEMBED_Q2_K},
    [11] = {"q3_K", 256, 110, CE_IO_BLOCKS, CLEMBED_Q3_K},
    [12] = {"q4_K", 256, 144, CE_IO_BLOCKS, CLEMBED_Q4_K},
    [13] = {"q5_K", 256, 176, CE_IO_BLOCKS, CLEMBED_Q5_K},
    [14] = {"q6_K", 256, 210, CE_IO_BLOCKS, CLEMBED_Q6_K},
    [15] = {"q8_K", 256, 292, CE_IO_OTHER, -1},
    [16] = {"iq2_xxs", 256, 66, CE_IO_BLOCKS, CLEMBED_IQ2_XXS},
    [17] = {"iq2_xs", 256, 74, CE_IO_BLOCKS, CLEMBED_IQ2_XS},
    [18] = {"iq3_xxs", 256, 98, CE_IO_BLOCKS, CLEMBED_IQ3_XXS},
    [19] = {"iq1_s", 256, 50, CE_IO_BLOCKS, CLEMBED_IQ1_S},
    [20] = {"iq4_nl", 32, 18, CE_IO_BLOCKS, CLEMBED_IQ4_NL},
    [21] = {"iq3_s", 256, 110, CE_IO_BLOCKS, CLEMBED_IQ3_S},
    [22] = {"iq2_s", 256, 82, CE_IO_BLOCKS, CLEMBED_IQ2_S},
    [23] = {"iq4_xs", 256, 136, CE_IO_BLOCKS, CLEMBED_IQ4_XS},
    [24] = {"i8", 1, 1, CE_IO_OTHER, -1},
    [25] = {"i16", 1, 2, CE_IO_OTHER, -1},
    [26] = {"i32", 1, 4, CE_IO_I32, -1},
    [27] = {"i64", 1, 8, CE_IO_I64, -1},
    [28] = {"f64", 1, 8, CE_IO_OTHER, -1},
    [29] = {"iq1_m", 256, 56, CE_IO_BLOCKS, CLEMBED_IQ1_M},
    [30] = {"bf16", 1, 2, CE_IO_BF16, CLEMBED_BF16},
    [34] = {"tq1_0", 256, 54, CE_IO_BLOCKS, CLEMBED_TQ1_0},
    [35] = {"tq2_0", 256, 66, CE_IO_BLOCKS, CLEMBED_TQ2_0},
    [39] = {"mxfp4", 32, 17, CE_IO_BLOCKS, CLEMBED_MXFP4},
    [40] = {"nvfp4", 64, 36, CE_IO_OTHER, -1},
    [41] = {"q1_0", 128, 18, CE_IO_OTHER, -1},
    [42] = {"q2_0", 64, 18, CE_IO_OTHER, -1},
};
#define GGML_TYPE_COUNT (sizeof ggml_types / sizeof ggml_types[0])

typedef struct reader {
  const uint8_t *p, *end;
  ce_io_table *table;
  const char *where; /* for messages: "the header", "key 'x'", "tensor 3" */
  char where_buf[160];
} reader;

static size_t left(const reader *r) { return (size_t)(r->end - r->p); }

static int truncated(reader *r, const char *what) {
  return ce_io_fail(r->table, "the GGUF file ends inside %s (%s)", r->where, what);
}

static int u32(reader *r, uint32_t *v, const char *what) {
  if (left(r) < 4) return truncated(r, what);
  *v = ce_io_le32(r->p);
  r->p += 4;
  return 0;
}

static int u64(reader *r, uint64_t *v, const char *what) {
  if (left(r) < 8) return truncated(r, what);
  *v = ce_io_le64(r->p);
  r->p += 8;
  return 0;
}

/* A string: points into the file, length checked against what is left. */
static int str(reader *r, const uint8_t **s, uint64_t *len, const char *what) {
  if (u64(r, len, what)) return -1;
  if (*len > left(r))
    return ce_io_fail(r->table, "in %s, %s: a string of %llu bytes, but only %zu bytes are left in the file", r->where,
                      what, (unsigned long long)*len, left(r));
  *s = r->p;
  r->p += *len;
  return 0;
}

static int skip_value(reader *r, uint32_t type, int depth);

/* An array's element type and count, then its elements. */
static int skip_array(reader *r, int depth) {
  uint32_t type;
  uint64_t n;
  if (depth >= GGUF_MAX_DEPTH)
    return ce_io_fail(r->table, "in %s: arrays nest deeper than %d", r->where, GGUF_MAX_DEPTH);
  if (u32(r, &type, "an array's element type") || u64(r, &n, "an array's length")) return -1;
  if (type >= T_COUNT) return ce_io_fail(r->table, "in %s: an array of unknown value type %u", r->where, type);
  /* the smallest an element can be: its size, a string's length, an array's type and length */
  uint64_t least = type == T_STRING ? 8 : type == T_ARRAY ? 12 : value_size[type];
  if (n > left(r) / least)
    return ce_io_fail(r->table, "in %s: an array of %llu %s values cannot fit in the %zu bytes left in the file",
                      r->where, (unsigned long long)n, value_name[type], left(r));
  if (type != T_STRING && type != T_ARRAY) {
    r->p += n * value_size[type];
    return 0;
  }
  for (uint64_t i = 0; i < n; i++)
    if (skip_value(r, type, depth + 1)) return -1;
  return 0;
}

static int skip_value(reader *r, uint32_t type, int depth) {
  const uint8_t *s;
  uint64_t len;
  if (type >= T_COUNT) return ce_io_fail(r->table, "in %s: unknown value type %u", r->where, type);
  if (type == T_STRING) return str(r, &s, &len, "a string value");
  if (type == T_ARRAY) return skip_array(r, depth);
  if (left(r) < value_size[type]) return truncated(r, "a value");
  r->p += value_size[type];
  return 0;
}

/* A tensor count against the least its infos take (8 + 4 + 4 + 8 bytes each). */
static int tensor_count_fits(reader *r, uint64_t ntensors) {
  if (ntensors > left(r) / 24)
    return ce_io_fail(r->table, "the GGUF header claims %llu tensors, more than the %zu bytes left can hold",
                      (unsigned long long)ntensors, left(r));
  return 0;
}

/* "GGUF" (checked by the caller), the version and the two counts, each count
 * against the least its entries can take: a pair 8 (key length) + 4 (type) + 1
 * bytes, a tensor info 8 + 4 + 4 + 8. */
static int parse_header(reader *r, uint64_t *ntensors, uint64_t *nkv) {
  uint32_t version;
  r->p += 4; /* the magic */
  if (u32(r, &version, "the version")) return -1;
  if (version == 1) return ce_io_fail(r->table, "GGUF version 1 is not supported (versions 2 and 3 are)");
  if (version != 2 && version != 3) {
    if ((version & 0xFFFF) == 0 && version)
      return ce_io_fail(r->table, "GGUF version %u is not supported: a big-endian GGUF file?", version);
    return ce_io_fail(r->table, "GGUF version %u is not supported (versions 2 and 3 are)", version);
  }
  if (u64(r, ntensors, "the tensor count") || u64(r, nkv, "the key/value count")) return -1;
  if (*nkv > left(r) / 13)
    return ce_io_fail(r->table, "the GGUF header claims %llu key/value pairs, more than the %zu bytes left can hold",
                      (unsigned long long)*nkv, left(r));
  return tensor_count_fits(r, *ntensors);
}

/* The key/value pairs: skipped, but for general.alignment (*alignment). */
static int parse_pairs(reader *r, uint64_t nkv, uint32_t *alignment) {
  int have_alignment = 0;
  for (uint64_t i = 0; i < nkv; i++) {
    const uint8_t *key;
    uint64_t klen;
    uint32_t type;
    snprintf(r->where_buf, sizeof r->where_buf, "key/value pair %llu", (unsigned long long)i);
    r->where = r->where_buf;
    if (str(r, &key, &klen, "its key")) return -1;
    char q[96];
    ce_io_quote(q, sizeof q, (const char *)key, (size_t)klen);
    snprintf(r->where_buf, sizeof r->where_buf, "key/value pair %llu (key %s)", (unsigned long long)i, q);
    if (u32(r, &type, "its value type")) return -1;
    if (type >= T_COUNT) return ce_io_fail(r->table, "%s has unknown value type %u", r->where, type);
    if (klen == 17 && !memcmp(key, "general.alignment", 17)) {
      if (have_alignment++) return ce_io_fail(r->table, "general.alignment is given twice");
      if (type != T_U32)
        return ce_io_fail(r->table, "general.alignment has value type %s, expected uint32", value_name[type]);
      if (u32(r, alignment, "its value")) return -1;
      if (*alignment == 0 || (*alignment & (*alignment - 1)))
        return ce_io_fail(r->table, "general.alignment %u is not a power of two", *alignment);
      continue;
    }
    if (skip_value(r, type, 0)) return -1;
  }
  return 0;
}

/* Tensor info i's name (checked as ggml checks it), quoted into q for messages. */
static int tensor_name(reader *r, uint64_t i, const uint8_t **name, uint64_t *nlen, char *q, size_t qcap) {
  snprintf(r->where_buf, sizeof r->where_buf, "tensor info %llu", (unsigned long long)i);
  r->where = r->where_buf;
  if (str(r, name, nlen, "its name")) return -1;
  ce_io_quote(q, qcap, (const char *)*name, (size_t)*nlen);
  if (*nlen >= GGUF_MAX_NAME)
    return ce_io_fail(r->table, "tensor %s: a name of %llu bytes (ggml's names are shorter than %d)", q,
                      (unsigned long long)*nlen, GGUF_MAX_NAME);
  if (memchr(*name, '\0', (size_t)*nlen)) return ce_io_fail(r->table, "tensor %s: a NUL byte in its name", q);
  snprintf(r->where_buf, sizeof r->where_buf, "tensor info %llu (%s)", (unsigned long long)i, q);
  return 0;
}

/* The dimension count and the dimensions (innermost first), and the element
 * count, whose every partial product fits (ggml's int64). */
static int tensor_dims(reader *r, const char *q, uint32_t *ndim, uint64_t *dims, uint64_t *elements) {
  uint64_t ones[GGUF_MAX_DIMS], nonzero;
  if (u32(r, ndim, "its dimension count")) return -1;
  if (*ndim > GGUF_MAX_DIMS)
    return ce_io_fail(r->table, "tensor %s: %u dimensions (at most %d)", q, *ndim, GGUF_MAX_DIMS);
  for (uint32_t d = 0; d < *ndim; d++) {
    if (u64(r, &dims[d], "its dimensions")) return -1;
    if (dims[d] > (uint64_t)INT64_MAX)
      return ce_io_fail(r->table, "tensor %s: dimension %u is %llu (negative as ggml's int64)", q, d,
                        (unsigned long long)dims[d]);
    ones[d] = dims[d] ? dims[d] : 1;
  }
  if (!ce_io_elements(dims, (int)*ndim, elements) || !ce_io_elements(ones, (int)*ndim, &nonzero) ||
      nonzero > (uint64_t)INT64_MAX)
    return ce_io_fail(r->table, "tensor %s: the element count overflows", q);
  return 0;
}

/* Tensor info i: name, dimensions, ggml type and offset, checked and added to
 * the table (the offset still from the data section's start). */
static int parse_tensor_info(reader *r, uint64_t i, uint32_t alignment) {
  const uint8_t *name;
  uint64_t nlen, dims[GGUF_MAX_DIMS], elements, offset, bytes;
  uint32_t ndim, tnum;
  ce_io_table *table = r->table;
  char q[96];
  if (tensor_name(r, i, &name, &nlen, q, sizeof q) || tensor_dims(r, q, &ndim, dims, &elements)) return -1;
  if (u32(r, &tnum, "its type") || u64(r, &offset, "its offset")) return -1;
  if (tnum >= GGML_TYPE_COUNT || !ggml_types[tnum].name)
    return ce_io_fail(table, "tensor %s: unknown ggml type %u", q, tnum);
  const ggml_type *t = &ggml_types[tnum];
  uint64_t row = ndim ? dims[0] : 1;
  if (row % t->block_values)
    return ce_io_fail(table, "tensor %s: %llu values per row, not a multiple of %s's block of %u", q,
                      (unsigned long long)row, t->name, t->block_values);
  if (!ce_io_mul(elements / t->block_values, t->block_bytes, &bytes))
    return ce_io_fail(table, "tensor %s: the byte count overflows", q);
  if (offset % alignment)
    return ce_io_fail(table, "tensor %s: offset %llu is not a multiple of the alignment %u", q,
                      (unsigned long long)offset, alignment);
  ce_io_tensor *e = ce_io_add(table);
  if (!e) return -1;
  e->name_off = ce_io_string(table, (const char *)name, (size_t)nlen);
  if (e->name_off == (size_t)-1) return -1;
  e->type_static = t->name;
  e->info.dtype = t->dtype;
  e->info.ndim = (int)ndim;
  for (uint32_t d = 0; d < ndim; d++) e->info.shape[d] = dims[ndim - 1 - d]; /* NumPy's order */
  e->info.bytes = bytes;
  e->offset = offset; /* from the data section for now */
  e->elements = elements;
  e->kind = t->kind;
  e->block_values = t->block_values;
  e->block_bytes = t->block_bytes;
  return 0;
}

/* The data section starts at the next multiple of the alignment after the
 * tensor infos (at r->p); every tensor's bytes must lie in it. */
static int place_data(reader *r, const uint8_t *data, size_t size, uint32_t alignment) {
  ce_io_table *table = r->table;
  uint64_t at = (uint64_t)(r->p - data), start = (at + alignment - 1) / alignment * alignment;
  if (table->count && start > size)
    return ce_io_fail(table, "the GGUF file ends before its data section (at %llu, after padding to %u)",
                      (unsigned long long)start, alignment);
  for (size_t i = 0; i < table->count; i++) {
    ce_io_tensor *e = &table->t[i];
    if (e->offset > (uint64_t)size - start || e->info.bytes > (uint64_t)size - start - e->offset) {
      char q[96];
      const char *n = table->strings + e->name_off;
      ce_io_quote(q, sizeof q, n, strlen(n));
      return ce_io_fail(table, "tensor %s: its %llu bytes at offset %llu of the data section end past the end of "
                               "the file (the data section has %llu bytes)", q, (unsigned long long)e->info.bytes,
                        (unsigned long long)e->offset, (unsigned long long)((uint64_t)size - start));
    }
    e->offset += start;
  }
  return 0;
}

int ce_io_parse_gguf(const uint8_t *data, size_t size, ce_io_table *table) {
  reader r = {data, data + size, table, "the header", ""};
  uint32_t alignment = 32;
  uint64_t ntensors, nkv;
  if (parse_header(&r, &ntensors, &nkv) || parse_pairs(&r, nkv, &alignment) || tensor_count_fits(&r, ntensors))
    return -1;
  for (uint64_t i = 0; i < ntensors; i++)
    if (parse_tensor_info(&r, i, alignment)) return -1;
  return place_data(&r, data, size, alignment);
}
