/* The .npy reader: one array (format 1.0, 2.0 or 3.0, C order).
 *
 *   "\x93NUMPY" major minor, header length (uint16 LE for 1.0, uint32 LE for
 *   2.0 and 3.0), a Python dict literal {'descr': ..., 'fortran_order': ...,
 *   'shape': (...)} padded with spaces, then the data, which must fill the rest
 *   of the file exactly.
 * The dict parser is strict (the checks of the command-line tool's reader):
 * three keys exactly once each, a simple type string, True or False, a tuple of
 * non-negative integers (a Python 2 "L" suffix allowed). */
#include "io.h"

#include <stdio.h>
#include <string.h>

#define NPY_HEADER_LIMIT ((size_t)1 << 20)
#define NPY_MAX_DIMS CE_IO_MAX_DIMS

typedef struct cursor {
  const uint8_t *p, *end;
  ce_io_table *table;
} cursor;

typedef struct header {
  int have_descr, have_fortran, have_shape, fortran, ndim;
  char descr[32];
  size_t descr_len; /* may exceed sizeof descr - 1: then it was cut */
  uint64_t shape[NPY_MAX_DIMS];
} header;

static void skip_ws(cursor *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r' || *c->p == '\f' ||
                           *c->p == '\v'))
    c->p++;
}

static const char *what_is_here(cursor *c, char *buf, size_t cap) {
  if (c->p >= c->end) return "the end of the header";
  if (*c->p >= 0x21 && *c->p < 0x7f)
    snprintf(buf, cap, "'%c'", *c->p);
  else
    snprintf(buf, cap, "byte 0x%02x", *c->p);
  return buf;
}

static int ident(uint8_t ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/* A quoted string without escapes; copies up to cap - 1 bytes, *len = its full length. */
static int parse_string(cursor *c, char *buf, size_t cap, size_t *len, const char *what) {
  char tmp[16];
  if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
    return ce_io_fail(c->table, "malformed .npy header: expected a quoted %s, found %s", what,
                      what_is_here(c, tmp, sizeof tmp));
  uint8_t quote = *c->p++;
  size_t n = 0;
  while (c->p < c->end) {
    uint8_t ch = *c->p++;
    if (ch == quote) {
      buf[n < cap ? n : cap - 1] = '\0';
      *len = n;
      return 0;
    }
    if (ch == '\\') return ce_io_fail(c->table, "malformed .npy header: escape sequences in strings are not supported");
    if (ch == '\n' || ch == '\0') break;
    if (n + 1 < cap) buf[n] = (char)ch;
    n++;
  }
  return ce_io_fail(c->table, "malformed .npy header: unterminated string");
}

static int parse_shape(cursor *c, header *h) {
  char tmp[16];
  int saw_comma = 0;
  h->ndim = 0;
  if (c->p >= c->end || *c->p != '(')
    return ce_io_fail(c->table, "malformed .npy header: 'shape' is not a tuple (found %s)",
                      what_is_here(c, tmp, sizeof tmp));
  c->p++;
  skip_ws(c);
  if (c->p < c->end && *c->p == ')') {
    c->p++;
    return 0;
  }
  for (;;) {
    uint64_t v = 0;
    skip_ws(c);
    if (c->p >= c->end) return ce_io_fail(c->table, "malformed .npy header: unterminated shape tuple");
    if (*c->p == '-') return ce_io_fail(c->table, "negative dimension in the .npy shape");
    if (*c->p < '0' || *c->p > '9')
      return ce_io_fail(c->table, "non-numeric dimension in the .npy shape (found %s)",
                        what_is_here(c, tmp, sizeof tmp));
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
      unsigned d = (unsigned)(*c->p - '0');
      if (v > (UINT64_MAX - d) / 10) return ce_io_fail(c->table, "a dimension in the .npy shape is too large");
      v = v * 10 + d;
      c->p++;
    }
    if (c->p < c->end && (*c->p == 'L' || *c->p == 'l')) c->p++; /* Python 2's long suffix */
    if (c->p < c->end && (ident(*c->p) || *c->p == '.'))
      return ce_io_fail(c->table, "non-numeric dimension in the .npy shape (found %s after a number)",
                        what_is_here(c, tmp, sizeof tmp));
    if (h->ndim >= NPY_MAX_DIMS)
      return ce_io_fail(c->table, "the .npy shape has more than %d dimensions", NPY_MAX_DIMS);
    h->shape[h->ndim++] = v;
    skip_ws(c);
    if (c->p >= c->end) return ce_io_fail(c->table, "malformed .npy header: unterminated shape tuple");
    if (*c->p == ',') {
      c->p++;
      saw_comma = 1;
      skip_ws(c);
      if (c->p < c->end && *c->p == ')') {
        c->p++;
        return 0;
      }
      continue;
    }
    if (*c->p == ')') {
      c->p++;
      if (h->ndim == 1 && !saw_comma)
        return ce_io_fail(c->table, "malformed .npy header: 'shape' is not a tuple (one dimension needs a "
                                    "trailing comma, e.g. (3,))");
      return 0;
    }
    return ce_io_fail(c->table, "malformed .npy header: expected ',' or ')' in the shape, found %s",
                      what_is_here(c, tmp, sizeof tmp));
  }
}

static int parse_header(cursor *c, header *h) {
  char tmp[16];
  memset(h, 0, sizeof *h);
  skip_ws(c);
  if (c->p >= c->end) return ce_io_fail(c->table, "the .npy header is empty (expected a dict)");
  if (*c->p != '{')
    return ce_io_fail(c->table, "the .npy header is not a dict (expected '{', found %s)",
                      what_is_here(c, tmp, sizeof tmp));
  c->p++;
  for (;;) {
    char key[32];
    size_t klen;
    skip_ws(c);
    if (c->p >= c->end) return ce_io_fail(c->table, "malformed .npy header: unterminated dict");
    if (*c->p == '}') {
      c->p++;
      break;
    }
    if (parse_string(c, key, sizeof key, &klen, "key")) return -1;
    skip_ws(c);
    if (c->p >= c->end || *c->p != ':')
      return ce_io_fail(c->table, "malformed .npy header: expected ':' after a key, found %s",
                        what_is_here(c, tmp, sizeof tmp));
    c->p++;
    skip_ws(c);
    if (klen == 5 && !strcmp(key, "descr")) {
      if (h->have_descr) return ce_io_fail(c->table, "malformed .npy header: duplicate key 'descr'");
      h->have_descr = 1;
      if (c->p < c->end && *c->p == '[')
        return ce_io_fail(c->table, "unsupported .npy dtype: structured dtypes are not supported");
      if (parse_string(c, h->descr, sizeof h->descr, &h->descr_len, "dtype string")) return -1;
    } else if (klen == 13 && !strcmp(key, "fortran_order")) {
      if (h->have_fortran) return ce_io_fail(c->table, "malformed .npy header: duplicate key 'fortran_order'");
      h->have_fortran = 1;
      const uint8_t *start = c->p;
      while (c->p < c->end && ident(*c->p)) c->p++;
      size_t len = (size_t)(c->p - start);
      if (len == 4 && !memcmp(start, "True", 4))
        h->fortran = 1;
      else if (len == 5 && !memcmp(start, "False", 5))
        h->fortran = 0;
      else
        return ce_io_fail(c->table, "malformed .npy header: 'fortran_order' must be True or False");
    } else if (klen == 5 && !strcmp(key, "shape")) {
      if (h->have_shape) return ce_io_fail(c->table, "malformed .npy header: duplicate key 'shape'");
      h->have_shape = 1;
      if (parse_shape(c, h)) return -1;
    } else {
      char q[48];
      ce_io_quote(q, sizeof q, key, klen < sizeof key ? klen : sizeof key - 1);
      return ce_io_fail(c->table, "malformed .npy header: unexpected key %s", q);
    }
    skip_ws(c);
    if (c->p >= c->end) return ce_io_fail(c->table, "malformed .npy header: unterminated dict");
    if (*c->p == ',') {
      c->p++;
      continue;
    }
    if (*c->p == '}') {
      c->p++;
      break;
    }
    return ce_io_fail(c->table, "malformed .npy header: expected ',' or '}' in the dict, found %s",
                      what_is_here(c, tmp, sizeof tmp));
  }
  skip_ws(c); /* padding */
  if (c->p < c->end)
    return ce_io_fail(c->table, "malformed .npy header: unexpected %s after the dict", what_is_here(c, tmp, sizeof tmp));
  if (!h->have_descr) return ce_io_fail(c->table, "the .npy header is missing key 'descr'");
  if (!h->have_fortran) return ce_io_fail(c->table, "the .npy header is missing key 'fortran_order'");
  if (!h->have_shape) return ce_io_fail(c->table, "the .npy header is missing key 'shape'");
  return 0;
}

/* A simple NumPy type string: byte order, kind and item size ("<f4", "|u1",
 * ">i8", "<U10"). 0 and the item size, or -1 for anything else. */
static int item_size(const char *d, size_t len, uint32_t *size) {
  size_t i = 0;
  if (len && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) i++;
  if (i >= len || !strchr("biufcSUV", d[i]) || d[i] == '\0') return -1;
  char kind = d[i++];
  if (i >= len) return -1;
  uint32_t n = 0;
  for (; i < len; i++) {
    if (d[i] < '0' || d[i] > '9' || n > 100000) return -1;
    n = n * 10 + (uint32_t)(d[i] - '0');
  }
  if (n == 0) return -1;
  *size = kind == 'U' ? n * 4 : n;
  return 0;
}

int ce_io_parse_npy(const uint8_t *data, size_t size, ce_io_table *table) {
  if (size < 8) return ce_io_fail(table, "truncated .npy header: the file is only %zu bytes long", size);
  unsigned major = data[6], minor = data[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    return ce_io_fail(table, "unsupported .npy format version %u.%u (expected 1.0, 2.0 or 3.0)", major, minor);
  size_t pre = major == 1 ? 10 : 12;
  if (size < pre) return ce_io_fail(table, "truncated .npy header: the file ends inside the header length");
  size_t hlen = major == 1 ? ce_io_le16(data + 8) : ce_io_le32(data + 8);
  if (hlen > size - pre)
    return ce_io_fail(table, "the .npy header length %zu points past the end of the file (%zu bytes follow the "
                             "%zu-byte preamble)", hlen, size - pre, pre);
  if (hlen > NPY_HEADER_LIMIT)
    return ce_io_fail(table, "the .npy header length %zu exceeds the limit of %zu bytes", hlen, NPY_HEADER_LIMIT);
  cursor c = {data + pre, data + pre + hlen, table};
  header h;
  if (parse_header(&c, &h)) return -1;
  if (h.fortran) return ce_io_fail(table, "fortran_order True is not supported (only C-order arrays)");

  char q[48];
  size_t dlen = h.descr_len < sizeof h.descr ? h.descr_len : sizeof h.descr - 1;
  ce_io_kind kind = CE_IO_OTHER;
  int dtype = -1;
  uint32_t isize = 0;
  if (h.descr_len == 3 && !strcmp(h.descr, "<f4")) {
    kind = CE_IO_F32, dtype = CLEMBED_F32, isize = 4;
  } else if (h.descr_len == 3 && !strcmp(h.descr, "<f2")) {
    kind = CE_IO_F16, dtype = CLEMBED_F16, isize = 2;
  } else if (h.descr_len == 3 && !strcmp(h.descr, "<i4")) {
    kind = CE_IO_I32, isize = 4;
  } else if (h.descr_len == 3 && !strcmp(h.descr, "<i8")) {
    kind = CE_IO_I64, isize = 8;
  } else if (h.descr_len == 3 && !strcmp(h.descr, "|u1")) {
    kind = CE_IO_U8, isize = 1;
  } else if (h.descr_len >= sizeof h.descr || item_size(h.descr, h.descr_len, &isize)) {
    ce_io_quote(q, sizeof q, h.descr, dlen);
    return ce_io_fail(table, "unsupported .npy dtype %s (not a simple type such as '<f4')", q);
  }

  uint64_t elements, bytes;
  if (!ce_io_elements(h.shape, h.ndim, &elements))
    return ce_io_fail(table, "the .npy shape is too large: its element count overflows");
  if (!ce_io_mul(elements, isize, &bytes))
    return ce_io_fail(table, "the .npy shape is too large: its byte count overflows");
  size_t have = size - pre - hlen;
  if ((uint64_t)have < bytes)
    return ce_io_fail(table, "truncated .npy data: expected %llu bytes, found %zu", (unsigned long long)bytes, have);
  if ((uint64_t)have > bytes)
    return ce_io_fail(table, "trailing garbage after the .npy data: expected %llu bytes, found %zu",
                      (unsigned long long)bytes, have);

  ce_io_tensor *e = ce_io_add(table);
  if (!e) return -1;
  size_t name = ce_io_string(table, "", 0), type = name == (size_t)-1 ? name : ce_io_string(table, h.descr, dlen);
  if (type == (size_t)-1) return -1;
  e->name_off = name;
  e->type_off = type;
  e->info.dtype = dtype;
  if (ce_io_set_shape(table, e, h.shape, h.ndim)) return -1;
  e->info.bytes = bytes;
  e->offset = pre + hlen;
  e->elements = elements;
  e->kind = kind;
  e->block_values = 1;
  e->block_bytes = isize;
  return 0;
}
