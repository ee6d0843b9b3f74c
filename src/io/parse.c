/* Recognises a file by its content and runs its reader; the helpers the three
 * readers share (messages, the tensor table, the final checks). */
#include "io.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* At most this many tensors in a file (a table entry per tensor). */
#define CE_IO_MAX_TENSORS ((size_t)1 << 24)

int ce_io_fail(ce_io_table *table, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(table->message, sizeof table->message, fmt, ap);
  va_end(ap);
  return -1;
}

void ce_io_table_free(ce_io_table *table) {
  if (!table) return;
  free(table->t);
  free(table->strings);
  free(table->dims);
  free(table->meta);
  table->meta = NULL;
  table->meta_count = table->meta_cap = 0;
  table->t = NULL;
  table->strings = NULL;
  table->dims = NULL;
  table->count = table->cap = table->strings_len = table->strings_cap = 0;
  table->dims_len = table->dims_cap = 0;
}

ce_io_tensor *ce_io_add(ce_io_table *table) {
  if (table->count >= CE_IO_MAX_TENSORS) {
    ce_io_fail(table, "more than %zu tensors", CE_IO_MAX_TENSORS);
    return NULL;
  }
  if (table->count == table->cap) {
    size_t cap = table->cap ? table->cap * 2 : 8;
    ce_io_tensor *t = realloc(table->t, cap * sizeof *t);
    if (!t) {
      ce_io_fail(table, "out of host memory for %zu tensor entries", cap);
      return NULL;
    }
    table->t = t;
    table->cap = cap;
  }
  ce_io_tensor *e = &table->t[table->count++];
  memset(e, 0, sizeof *e);
  e->type_off = (size_t)-1;
  e->dims_off = (size_t)-1;
  return e;
}

size_t ce_io_string(ce_io_table *table, const char *s, size_t len) {
  /* the caller's len is bounded by the file's size; guard the sum anyway */
  if (len > SIZE_MAX / 4 || table->strings_len > SIZE_MAX / 4 - len - 1) {
    ce_io_fail(table, "a name of %zu bytes is too long", len);
    return (size_t)-1;
  }
  size_t need = table->strings_len + len + 1;
  if (need > table->strings_cap) {
    size_t cap = table->strings_cap ? table->strings_cap : 256;
    while (cap < need) cap *= 2;
    char *p = realloc(table->strings, cap);
    if (!p) {
      ce_io_fail(table, "out of host memory for %zu bytes of names", cap);
      return (size_t)-1;
    }
    table->strings = p;
    table->strings_cap = cap;
  }
  size_t off = table->strings_len;
  if (len) memcpy(table->strings + off, s, len);
  table->strings[off + len] = '\0';
  table->strings_len = need;
  return off;
}

int ce_io_meta(ce_io_table *table, const char *key, size_t key_len, const char *value, size_t value_len) {
  if (table->meta_count == table->meta_cap) {
    size_t cap = table->meta_cap ? table->meta_cap * 2 : 16;
    size_t *m = cap < SIZE_MAX / (2 * sizeof *m) ? realloc(table->meta, cap * 2 * sizeof *m) : NULL;
    if (!m) return ce_io_fail(table, "out of host memory");
    table->meta = m;
    table->meta_cap = cap;
  }
  size_t k = ce_io_string(table, key, key_len);
  if (k == (size_t)-1) return -1;
  size_t v = ce_io_string(table, value, value_len);
  if (v == (size_t)-1) return -1;
  table->meta[2 * table->meta_count] = k;
  table->meta[2 * table->meta_count + 1] = v;
  table->meta_count++;
  return 0;
}

int ce_io_mul(uint64_t a, uint64_t b, uint64_t *out) {
  if (a && b > UINT64_MAX / a) return 0;
  *out = a * b;
  return 1;
}

int ce_io_set_shape(ce_io_table *table, ce_io_tensor *e, const uint64_t *shape, int ndim) {
  e->ndim = ndim;
  e->info.ndim = ndim < 4 ? ndim : 4;
  for (int i = 0; i < e->info.ndim; i++) e->info.shape[i] = shape[i];
  if (ndim <= 4) return 0;
  for (int i = 4; i < ndim; i++) e->info.shape[3] *= shape[i]; /* fits: the caller checked the product */
  /* the dimensions are bounded by the file's size: each takes bytes of it */
  if (table->dims_len + (size_t)ndim > table->dims_cap) {
    size_t cap = table->dims_cap ? table->dims_cap : 64;
    while (cap < table->dims_len + (size_t)ndim) cap *= 2;
    uint64_t *d = realloc(table->dims, cap * sizeof *d);
    if (!d) return ce_io_fail(table, "out of host memory for the shapes of %zu dimensions", cap);
    table->dims = d;
    table->dims_cap = cap;
  }
  e->dims_off = table->dims_len;
  memcpy(table->dims + table->dims_len, shape, (size_t)ndim * sizeof *shape);
  table->dims_len += (size_t)ndim;
  return 0;
}

int ce_io_elements(const uint64_t *shape, int ndim, uint64_t *elements) {
  uint64_t p = 1;
  int zero = 0;
  for (int i = 0; i < ndim; i++) {
    if (!shape[i]) zero = 1;
    else if (!ce_io_mul(p, shape[i], &p)) return 0;
  }
  *elements = zero ? 0 : p;
  return 1;
}

void ce_io_quote(char *out, size_t cap, const char *s, size_t len) {
  size_t o = 0;
  if (cap < 8) {
    if (cap) out[0] = '\0';
    return;
  }
  out[o++] = '\'';
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (o + 6 >= cap) { /* room for "...'" and the NUL */
      memcpy(out + o, "...", 3);
      o += 3;
      break;
    }
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out[o++] = (char)c;
    } else {
      if (o + 10 >= cap) {
        memcpy(out + o, "...", 3);
        o += 3;
        break;
      }
      o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
  }
  out[o++] = '\'';
  out[o] = '\0';
}

static int by_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

int ce_io_finish(ce_io_table *table, uint64_t file_size) {
  for (size_t i = 0; i < table->count; i++) {
    ce_io_tensor *e = &table->t[i];
    e->info.name = table->strings ? table->strings + e->name_off : "";
    e->info.type_name = e->type_off != (size_t)-1 ? table->strings + e->type_off : e->type_static;
    if (e->offset > file_size || e->info.bytes > file_size - e->offset)
      return ce_io_fail(table, "tensor '%s': its %llu bytes at offset %llu end past the end of the file (%llu bytes)",
                        e->info.name, (unsigned long long)e->info.bytes, (unsigned long long)e->offset,
                        (unsigned long long)file_size);
  }
  if (table->count < 2) return 0;
  const char **order = malloc(table->count * sizeof *order);
  if (!order) return ce_io_fail(table, "out of host memory checking %zu names", table->count);
  for (size_t i = 0; i < table->count; i++) order[i] = table->t[i].info.name;
  qsort(order, table->count, sizeof *order, by_name);
  int rc = 0;
  for (size_t i = 1; i < table->count; i++) {
    if (!strcmp(order[i - 1], order[i])) {
      char q[96];
      ce_io_quote(q, sizeof q, order[i], strlen(order[i]));
      rc = ce_io_fail(table, "two tensors are named %s", q);
      break;
    }
  }
  free(order);
  return rc;
}

int ce_io_parse(const uint8_t *data, size_t size, ce_io_table *table) {
  memset(table, 0, sizeof *table);
  int rc;
  if (size == 0) {
    rc = ce_io_fail(table, "empty file (0 bytes): not a .npy, .safetensors or .gguf file");
  } else if (size >= 6 && !memcmp(data, "\x93NUMPY", 6)) {
    table->format = CE_IO_NPY;
    rc = ce_io_parse_npy(data, size, table);
  } else if (size >= 4 && !memcmp(data, "GGUF", 4)) {
    table->format = CE_IO_GGUF;
    rc = ce_io_parse_gguf(data, size, table);
  } else if (size >= 9 && data[8] == '{') {
    table->format = CE_IO_SAFETENSORS;
    rc = ce_io_parse_safetensors(data, size, table);
  } else {
    rc = ce_io_fail(table, "not a .npy, .safetensors or .gguf file (unrecognised content)");
  }
  if (rc == 0) rc = ce_io_finish(table, size);
  if (rc != 0) ce_io_table_free(table);
  return rc;
}
