/* The .safetensors reader.
 *
 *   uint64 LE N, N bytes of JSON (UTF-8, may end with spaces), the data.
 *   The JSON is an object: each member is a tensor
 *     "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
 *   (offsets into the data, which starts after the header), except
 *   "__metadata__", an object of strings, which is checked and kept
 *   (clembed_file_metadata).
 * The JSON parser is strict RFC 8259 for exactly this (no trailing commas, no
 * comments, valid UTF-8, escapes decoded, nesting bounded); a tensor's other
 * members, if any, are skipped as the reference reader does. As the reference
 * reader requires, the tensors' data cover the data section exactly, with no
 * gap and no overlap, and each one's size is its element count times its
 * type's size. */
#include "io.h"
#include "../runtime/json.h" /* the UTF-8 and escape helpers */

#include <stdlib.h>
#include <string.h>

#define ST_HEADER_LIMIT ((uint64_t)100000000) /* the reference reader's limit */
#define ST_MAX_DEPTH 64
#define ST_MAX_DIMS CE_IO_MAX_DIMS

typedef struct json {
  const uint8_t *p, *end;
  ce_io_table *table;
  char *scratch; /* a decoded string; as long as the header */
} json;

static void ws(json *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int jfail_at(json *j, const char *what) {
  if (j->p >= j->end) return ce_io_fail(j->table, "malformed safetensors header: %s, found the end of the header", what);
  uint8_t c = *j->p;
  if (c >= 0x21 && c < 0x7f)
    return ce_io_fail(j->table, "malformed safetensors header: %s, found '%c'", what, c);
  return ce_io_fail(j->table, "malformed safetensors header: %s, found byte 0x%02x", what, c);
}

static int expect(json *j, char c, const char *what) {
  ws(j);
  if (j->p >= j->end || *j->p != (uint8_t)c) return jfail_at(j, what);
  j->p++;
  return 0;
}

/* A string, decoded into j->scratch (NUL-terminated; *len excludes the NUL). A
 * decoded NUL is refused: names are C strings. */
static int string(json *j, size_t *len) {
  ws(j);
  if (j->p >= j->end || *j->p != '"') return jfail_at(j, "expected a string");
  j->p++;
  size_t o = 0;
  for (;;) {
    if (j->p >= j->end) return ce_io_fail(j->table, "malformed safetensors header: unterminated string");
    uint8_t c = *j->p;
    if (c == '"') {
      j->p++;
      j->scratch[o] = '\0';
      *len = o;
      return 0;
    }
    if (c < 0x20) return jfail_at(j, "a control character in a string");
    if (c == '\\') {
      if (j->end - j->p < 2) return ce_io_fail(j->table, "malformed safetensors header: unterminated string");
      uint8_t e = j->p[1];
      const char *map = strchr("\"\\/bfnrt", e);
      if (e && map) {
        static const char out[] = "\"\\/\b\f\n\r\t";
        j->scratch[o++] = out[map - "\"\\/bfnrt"];
        j->p += 2;
        continue;
      }
      if (e != 'u') return jfail_at(j, "a valid escape sequence");
      unsigned cp, lo;
      if (j->end - j->p < 6 || ce_hex4((const char *)j->p + 2, &cp)) return jfail_at(j, "four hex digits after \\u");
      j->p += 6;
      if (cp >= 0xDC00 && cp <= 0xDFFF) return ce_io_fail(j->table, "malformed safetensors header: a lone low surrogate");
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || ce_hex4((const char *)j->p + 2, &lo) || lo < 0xDC00 ||
            lo > 0xDFFF)
          return ce_io_fail(j->table, "malformed safetensors header: a high surrogate without its low surrogate");
        j->p += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      }
      if (cp == 0) return ce_io_fail(j->table, "a name or string in the safetensors header contains a NUL (\\u0000)");
      o += ce_utf8_put(j->scratch + o, cp);
      continue;
    }
    if (c < 0x80) {
      j->scratch[o++] = (char)c;
      j->p++;
      continue;
    }
    size_t n = ce_utf8_seq(j->p, j->end);
    if (!n) return ce_io_fail(j->table, "malformed safetensors header: invalid UTF-8 in a string");
    memcpy(j->scratch + o, j->p, n);
    o += n;
    j->p += n;
  }
}

/* A non-negative integer without sign, fraction or exponent. */
static int uint(json *j, uint64_t *v, const char *what) {
  ws(j);
  if (j->p >= j->end || *j->p < '0' || *j->p > '9') {
    if (j->p < j->end && *j->p == '-') return ce_io_fail(j->table, "negative %s in the safetensors header", what);
    return jfail_at(j, "expected a non-negative integer");
  }
  if (*j->p == '0' && j->end - j->p > 1 && j->p[1] >= '0' && j->p[1] <= '9')
    return ce_io_fail(j->table, "malformed safetensors header: a number with a leading zero");
  uint64_t x = 0;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
    unsigned d = (unsigned)(*j->p - '0');
    if (x > (UINT64_MAX - d) / 10) return ce_io_fail(j->table, "%s in the safetensors header overflows 64 bits", what);
    x = x * 10 + d;
    j->p++;
  }
  if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
    return ce_io_fail(j->table, "%s in the safetensors header is not an integer", what);
  *v = x;
  return 0;
}

static int literal(json *j, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n)) return jfail_at(j, "expected a JSON value");
  j->p += n;
  return 0;
}

/* Any JSON value, checked and skipped (nesting at most ST_MAX_DEPTH). */
static int skip_value(json *j, int depth) {
  size_t len;
  if (depth > ST_MAX_DEPTH) return ce_io_fail(j->table, "the safetensors header nests deeper than %d", ST_MAX_DEPTH);
  ws(j);
  if (j->p >= j->end) return jfail_at(j, "expected a JSON value");
  uint8_t c = *j->p;
  if (c == '"') return string(j, &len);
  if (c == '{' || c == '[') {
    uint8_t close = c == '{' ? '}' : ']';
    j->p++;
    ws(j);
    if (j->p < j->end && *j->p == close) {
      j->p++;
      return 0;
    }
    for (;;) {
      if (c == '{') {
        if (string(j, &len) || expect(j, ':', "expected ':' after a key")) return -1;
      }
      if (skip_value(j, depth + 1)) return -1;
      ws(j);
      if (j->p < j->end && *j->p == ',') {
        j->p++;
        continue;
      }
      if (j->p < j->end && *j->p == close) {
        j->p++;
        return 0;
      }
      return jfail_at(j, c == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
  }
  if (c == 't') return literal(j, "true");
  if (c == 'f') return literal(j, "false");
  if (c == 'n') return literal(j, "null");
  if (c == '-' || (c >= '0' && c <= '9')) { /* a number: -?int frac? exp? */
    if (c == '-') j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jfail_at(j, "expected a digit");
    if (*j->p == '0')
      j->p++;
    else
      while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    if (j->p < j->end && *j->p == '.') {
      j->p++;
      if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jfail_at(j, "expected a digit after '.'");
      while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
      j->p++;
      if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
      if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jfail_at(j, "expected a digit in an exponent");
      while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    }
    return 0;
  }
  return jfail_at(j, "expected a JSON value");
}

/* Separator of a list: 1 after ',', 0 at the closing character. */
static int next(json *j, char close, const char *what) {
  ws(j);
  if (j->p < j->end && *j->p == ',') {
    j->p++;
    return 1;
  }
  if (j->p < j->end && *j->p == (uint8_t)close) {
    j->p++;
    return 0;
  }
  jfail_at(j, what);
  return -1;
}

typedef struct st_type {
  const char *name;
  uint32_t size;
  ce_io_kind kind;
  int dtype;
} st_type;

static const st_type st_types[] = {
    {"F32", 4, CE_IO_F32, CLEMBED_F32},   {"F16", 2, CE_IO_F16, CLEMBED_F16}, {"BF16", 2, CE_IO_BF16, CLEMBED_BF16},
    {"I32", 4, CE_IO_I32, -1},            {"I64", 8, CE_IO_I64, -1},          {"F64", 8, CE_IO_OTHER, -1},
    {"BOOL", 1, CE_IO_OTHER, -1},         {"U8", 1, CE_IO_U8, -1},         {"I8", 1, CE_IO_OTHER, -1},
    {"F8_E5M2", 1, CE_IO_OTHER, -1},      {"F8_E4M3", 1, CE_IO_OTHER, -1},    {"F8_E8M0", 1, CE_IO_OTHER, -1},
    {"I16", 2, CE_IO_OTHER, -1},          {"U16", 2, CE_IO_OTHER, -1},        {"U32", 4, CE_IO_OTHER, -1},
    {"U64", 8, CE_IO_OTHER, -1},          {"C64", 8, CE_IO_OTHER, -1},
};

/* One tensor's object: its members, in any order. */
static int tensor(json *j, const char *name, uint64_t data_len, uint64_t data_start, uint64_t *begin_out,
                  uint64_t *end_out) {
  ce_io_table *table = j->table;
  char q[96];
  ce_io_quote(q, sizeof q, name, strlen(name));
  int have_dtype = 0, have_shape = 0, have_offsets = 0, ndim = 0;
  const st_type *type = NULL;
  uint64_t shape[ST_MAX_DIMS] = {0}, begin = 0, end = 0;
  if (expect(j, '{', "expected an object for a tensor")) return -1;
  ws(j);
  if (j->p < j->end && *j->p == '}')
    return ce_io_fail(table, "tensor %s: an empty object (no dtype, shape or data_offsets)", q);
  for (;;) {
    size_t klen;
    if (string(j, &klen) || expect(j, ':', "expected ':' after a key")) return -1;
    if (!strcmp(j->scratch, "dtype")) {
      if (have_dtype++) return ce_io_fail(table, "tensor %s: duplicate key 'dtype'", q);
      size_t len;
      if (string(j, &len)) return -1;
      for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
        if (!strcmp(j->scratch, st_types[i].name)) type = &st_types[i];
      if (!type) {
        char t[48];
        ce_io_quote(t, sizeof t, j->scratch, len);
        return ce_io_fail(table, "tensor %s: unknown safetensors dtype %s", q, t);
      }
    } else if (!strcmp(j->scratch, "shape")) {
      if (have_shape++) return ce_io_fail(table, "tensor %s: duplicate key 'shape'", q);
      if (expect(j, '[', "expected an array for 'shape'")) return -1;
      ws(j);
      if (j->p < j->end && *j->p == ']') {
        j->p++;
      } else {
        for (;;) {
          uint64_t v;
          if (uint(j, &v, "dimension")) return -1;
          if (ndim >= ST_MAX_DIMS) return ce_io_fail(table, "tensor %s: more than %d dimensions", q, ST_MAX_DIMS);
          shape[ndim++] = v;
          int r = next(j, ']', "expected ',' or ']' in 'shape'");
          if (r < 0) return -1;
          if (!r) break;
        }
      }
    } else if (!strcmp(j->scratch, "data_offsets")) {
      if (have_offsets++) return ce_io_fail(table, "tensor %s: duplicate key 'data_offsets'", q);
      if (expect(j, '[', "expected an array of two offsets for 'data_offsets'") || uint(j, &begin, "offset") ||
          expect(j, ',', "expected two offsets in 'data_offsets'") || uint(j, &end, "offset") ||
          expect(j, ']', "expected exactly two offsets in 'data_offsets'"))
        return -1;
    } else if (skip_value(j, 2)) {
      return -1;
    }
    int r = next(j, '}', "expected ',' or '}' in a tensor");
    if (r < 0) return -1;
    if (!r) break;
  }
  if (!have_dtype) return ce_io_fail(table, "tensor %s: no 'dtype'", q);
  if (!have_shape) return ce_io_fail(table, "tensor %s: no 'shape'", q);
  if (!have_offsets) return ce_io_fail(table, "tensor %s: no 'data_offsets'", q);
  uint64_t elements, bytes;
  if (!ce_io_elements(shape, ndim, &elements)) return ce_io_fail(table, "tensor %s: the element count overflows", q);
  if (!ce_io_mul(elements, type->size, &bytes)) return ce_io_fail(table, "tensor %s: the byte count overflows", q);
  if (begin > end)
    return ce_io_fail(table, "tensor %s: data_offsets [%llu, %llu] begin after they end", q, (unsigned long long)begin,
                      (unsigned long long)end);
  if (end > data_len)
    return ce_io_fail(table, "tensor %s: data_offsets [%llu, %llu] end past the data section (%llu bytes)", q,
                      (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_len);
  if (end - begin != bytes)
    return ce_io_fail(table, "tensor %s: data_offsets [%llu, %llu] hold %llu bytes, but %llu %s values take %llu", q,
                      (unsigned long long)begin, (unsigned long long)end, (unsigned long long)(end - begin),
                      (unsigned long long)elements, type->name, (unsigned long long)bytes);
  ce_io_tensor *e = ce_io_add(table);
  if (!e) return -1;
  e->name_off = ce_io_string(table, name, strlen(name));
  if (e->name_off == (size_t)-1) return -1;
  e->type_static = type->name;
  e->info.dtype = type->dtype;
  if (ce_io_set_shape(table, e, shape, ndim)) return -1;
  e->info.bytes = bytes;
  e->offset = data_start + begin;
  e->elements = elements;
  e->kind = type->kind;
  e->block_values = 1;
  e->block_bytes = type->size;
  *begin_out = begin;
  *end_out = end;
  return 0;
}

/* "__metadata__": an object of strings. */
static int metadata(json *j) {
  size_t len;
  if (expect(j, '{', "expected an object for '__metadata__'")) return -1;
  ws(j);
  if (j->p < j->end && *j->p == '}') {
    j->p++;
    return 0;
  }
  for (;;) {
    if (string(j, &len) || expect(j, ':', "expected ':' after a key")) return -1;
    ws(j);
    if (j->p >= j->end || *j->p != '"')
      return ce_io_fail(j->table, "malformed safetensors header: a '__metadata__' value is not a string");
    char *key = malloc(len + 1);
    if (!key) return ce_io_fail(j->table, "out of host memory");
    memcpy(key, j->scratch, len + 1);
    size_t vlen;
    int bad = string(j, &vlen) || ce_io_meta(j->table, key, len, j->scratch, vlen);
    free(key);
    if (bad) return -1;
    int r = next(j, '}', "expected ',' or '}' in '__metadata__'");
    if (r < 0) return -1;
    if (!r) return 0;
  }
}

typedef struct span {
  uint64_t begin, end;
  size_t index;
} span;

static int by_offsets(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

int ce_io_parse_safetensors(const uint8_t *data, size_t size, ce_io_table *table) {
  uint64_t n = ce_io_le64(data);
  if (n > (uint64_t)(size - 8))
    return ce_io_fail(table, "the safetensors header length %llu points past the end of the file (%zu bytes follow it)",
                      (unsigned long long)n, size - 8);
  if (n > ST_HEADER_LIMIT)
    return ce_io_fail(table, "the safetensors header length %llu exceeds the limit of %llu bytes",
                      (unsigned long long)n, (unsigned long long)ST_HEADER_LIMIT);
  json j = {data + 8, data + 8 + n, table, malloc((size_t)n + 1)};
  span *spans = NULL;
  size_t nspans = 0, capspans = 0;
  int rc = -1, have_meta = 0;
  uint64_t data_start = 8 + n, data_len = (uint64_t)size - data_start;
  if (!j.scratch) {
    ce_io_fail(table, "out of host memory for a %llu-byte header", (unsigned long long)n);
    goto done;
  }
  if (expect(&j, '{', "expected '{' to open the header")) goto done;
  ws(&j);
  if (j.p < j.end && *j.p == '}') {
    j.p++;
  } else {
    for (;;) {
      size_t len;
      if (string(&j, &len) || expect(&j, ':', "expected ':' after a name")) goto done;
      if (!strcmp(j.scratch, "__metadata__")) {
        if (have_meta++) {
          ce_io_fail(table, "two '__metadata__' members in the safetensors header");
          goto done;
        }
        if (metadata(&j)) goto done;
      } else {
        char *name = malloc(len + 1);
        if (!name) {
          ce_io_fail(table, "out of host memory");
          goto done;
        }
        memcpy(name, j.scratch, len + 1);
        if (nspans == capspans) {
          size_t cap = capspans ? capspans * 2 : 16;
          span *s = realloc(spans, cap * sizeof *s);
          if (!s) {
            free(name);
            ce_io_fail(table, "out of host memory");
            goto done;
          }
          spans = s;
          capspans = cap;
        }
        span *s = &spans[nspans];
        s->index = table->count;
        int bad = tensor(&j, name, data_len, data_start, &s->begin, &s->end);
        free(name);
        if (bad) goto done;
        nspans++;
      }
      int r = next(&j, '}', "expected ',' or '}' after a tensor");
      if (r < 0) goto done;
      if (!r) break;
    }
  }
  ws(&j);
  if (j.p < j.end) {
    jfail_at(&j, "only spaces may follow the header's object");
    goto done;
  }
  /* the data section covered exactly: no gap, no overlap */
  if (nspans) qsort(spans, nspans, sizeof *spans, by_offsets);
  uint64_t at = 0;
  for (size_t i = 0; i < nspans; i++) {
    if (spans[i].begin != at) {
      const char *name = table->strings + table->t[spans[i].index].name_off;
      char q[96];
      ce_io_quote(q, sizeof q, name, strlen(name));
      ce_io_fail(table, "tensor %s: data_offsets [%llu, %llu] %s the previous tensor's data, which end at %llu", q,
                 (unsigned long long)spans[i].begin, (unsigned long long)spans[i].end,
                 spans[i].begin > at ? "leave a gap after" : "overlap", (unsigned long long)at);
      goto done;
    }
    at = spans[i].end;
  }
  if (at != data_len) {
    ce_io_fail(table, "the tensors' data cover %llu bytes, but %llu bytes follow the header",
               (unsigned long long)at, (unsigned long long)data_len);
    goto done;
  }
  rc = 0;
done:
  free(j.scratch);
  free(spans);
  return rc;
}
