/* A small JSON reader and writer (json.h). */
#include "json.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct reader {
  const char *p, *end;
  int line;
  char *err;
  size_t errlen;
} reader;

static int fail(reader *r, const char *fmt, ...) {
  if (r->err && r->errlen) {
    int n = snprintf(r->err, r->errlen, "line %d: ", r->line);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < r->errlen) vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* What is at the reader, for a message. */
static const char *found(reader *r, char *buf, size_t cap) {
  if (r->p >= r->end) return "the end of the text";
  unsigned char c = (unsigned char)*r->p;
  if (c > 0x20 && c < 0x7f)
    snprintf(buf, cap, "'%c'", c);
  else
    snprintf(buf, cap, "byte 0x%02x", c);
  return buf;
}

static void ws(reader *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\r' || *r->p == '\n')) {
    if (*r->p == '\n') r->line++;
    r->p++;
  }
}

int ce_hex4(const char *p, unsigned *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                 : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                 : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                        : 16u;
    if (d > 15) return -1;
    *v = *v * 16 + d;
  }
  return 0;
}

size_t ce_utf8_put(char *o, unsigned cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | cp >> 6);
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | cp >> 12);
    o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | cp >> 18);
  o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
  o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

size_t ce_utf8_seq(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0];
  size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (!n || (size_t)(end - p) < n) return 0;
  for (size_t i = 1; i < n; i++)
    if ((p[i] & 0xC0) != 0x80) return 0;
  if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F) || (c == 0xF0 && p[1] < 0x90) ||
      (c == 0xF4 && p[1] > 0x8F))
    return 0; /* overlong, a surrogate, past U+10FFFF */
  return n;
}

/* A string at the reader (at its opening quote) into *out (malloc'd). */
static int string(reader *r, char **out) {
  char buf[16];
  *out = NULL;
  if (r->p >= r->end || *r->p != '"') return fail(r, "expected a string, found %s", found(r, buf, sizeof buf));
  r->p++;
  /* the decoded string is at most as long as its text: to the first quote that no backslash escapes */
  const char *q = r->p;
  while (q < r->end && *q != '"') q += *q == '\\' && q + 1 < r->end ? 2 : 1;
  char *s = malloc((size_t)(q - r->p) + 1), *o = s;
  if (!s) return fail(r, "out of memory");
  for (;;) {
    if (r->p >= r->end) {
      free(s);
      return fail(r, "a string without its closing quote");
    }
    unsigned char c = (unsigned char)*r->p;
    if (c == '"') {
      r->p++;
      break;
    }
    if (c < 0x20) {
      free(s);
      return fail(r, "a control character (byte 0x%02x) in a string", c);
    }
    if (c >= 0x80) {
      size_t n = ce_utf8_seq((const unsigned char *)r->p, (const unsigned char *)r->end);
      if (!n) {
        free(s);
        return fail(r, "a string that is not UTF-8 (byte 0x%02x)", c);
      }
      memcpy(o, r->p, n);
      o += n;
      r->p += n;
      continue;
    }
    r->p++;
    if (c != '\\') {
      *o++ = (char)c;
      continue;
    }
    char e = r->p < r->end ? *r->p++ : 0;
    unsigned cp = 0, lo = 0;
    switch (e) {
    case '"': *o++ = '"'; break;
    case '\\': *o++ = '\\'; break;
    case '/': *o++ = '/'; break;
    case 'b': *o++ = '\b'; break;
    case 'f': *o++ = '\f'; break;
    case 'n': *o++ = '\n'; break;
    case 'r': *o++ = '\r'; break;
    case 't': *o++ = '\t'; break;
    case 'u':
      if (r->end - r->p < 4 || ce_hex4(r->p, &cp)) {
        free(s);
        return fail(r, "a \\u escape without four hexadecimal digits");
      }
      r->p += 4;
      if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate: its low one follows */
        if (r->end - r->p < 6 || r->p[0] != '\\' || r->p[1] != 'u' || ce_hex4(r->p + 2, &lo) || lo < 0xDC00 ||
            lo > 0xDFFF) {
          free(s);
          return fail(r, "a \\u escape of a lone surrogate");
        }
        r->p += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        free(s);
        return fail(r, "a \\u escape of a lone surrogate");
      }
      if (cp == 0) {
        free(s);
        return fail(r, "a NUL character (\\u0000) in a string");
      }
      o += ce_utf8_put(o, cp);
      break;
    default:
      free(s);
      if (e > 0x20 && e < 0x7f) return fail(r, "'\\%c' is not a JSON escape", e);
      return fail(r, "a backslash and byte 0x%02x are not a JSON escape", (unsigned char)e);
    }
  }
  *o = 0;
  *out = s;
  return 0;
}

static int is_digit(reader *r) { return r->p < r->end && *r->p >= '0' && *r->p <= '9'; }

static int number(reader *r, ce_json *v) {
  const char *start = r->p;
  if (r->p < r->end && *r->p == '-') r->p++;
  if (!is_digit(r)) return fail(r, "a number without digits");
  if (*r->p == '0') {
    r->p++;
    if (is_digit(r)) return fail(r, "a number with a leading zero");
  } else {
    while (is_digit(r)) r->p++;
  }
  if (r->p < r->end && *r->p == '.') {
    r->p++;
    if (!is_digit(r)) return fail(r, "a number without digits after its point");
    while (is_digit(r)) r->p++;
  }
  if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
    r->p++;
    if (r->p < r->end && (*r->p == '+' || *r->p == '-')) r->p++;
    if (!is_digit(r)) return fail(r, "a number without digits in its exponent");
    while (is_digit(r)) r->p++;
  }
  size_t n = (size_t)(r->p - start);
  v->type = CE_JNUMBER;
  v->text = malloc(n + 1);
  if (!v->text) return fail(r, "out of memory");
  memcpy(v->text, start, n);
  v->text[n] = 0;
  return 0;
}

/* Room for one more member of v (an array or object). */
static int grow(reader *r, ce_json *v, size_t *cap) {
  if (v->n < *cap) return 0;
  size_t c = *cap ? 2 * *cap : 4;
  ce_json *items = realloc(v->items, c * sizeof *items);
  if (!items) return fail(r, "out of memory");
  v->items = items;
  if (v->type == CE_JOBJECT) {
    char **keys = realloc(v->keys, c * sizeof *keys);
    if (!keys) return fail(r, "out of memory");
    v->keys = keys;
  }
  *cap = c;
  return 0;
}

static int value(reader *r, ce_json *v, int depth) {
  char buf[16];
  memset(v, 0, sizeof *v);
  ws(r);
  v->line = r->line;
  if (r->p >= r->end) return fail(r, "expected a value, found the end of the text");
  static const struct {
    const char *word;
    ce_jtype type;
  } words[] = {{"null", CE_JNULL}, {"false", CE_JFALSE}, {"true", CE_JTRUE}};
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(words[i].word);
    if ((size_t)(r->end - r->p) >= n && !memcmp(r->p, words[i].word, n)) {
      r->p += n;
      v->type = words[i].type;
      return 0;
    }
  }
  if (*r->p == '"') {
    v->type = CE_JSTRING;
    return string(r, &v->text);
  }
  if (*r->p == '-' || is_digit(r)) return number(r, v);
  char close = *r->p == '[' ? ']' : *r->p == '{' ? '}' : 0;
  if (!close) return fail(r, "expected a value, found %s", found(r, buf, sizeof buf));
  if (depth >= JSON_MAX_DEPTH) return fail(r, "nested deeper than %d", JSON_MAX_DEPTH);
  v->type = close == ']' ? CE_JARRAY : CE_JOBJECT;
  r->p++;
  ws(r);
  if (r->p < r->end && *r->p == close) {
    r->p++;
    return 0;
  }
  size_t cap = 0;
  for (;;) {
    if (grow(r, v, &cap)) return -1;
    ce_json *item = &v->items[v->n];
    if (v->type == CE_JOBJECT) {
      ws(r);
      char *key = NULL;
      if (string(r, &key)) return -1;
      v->keys[v->n] = key;
      memset(item, 0, sizeof *item);
      v->n++; /* freed with v from here on */
      ws(r);
      if (r->p >= r->end || *r->p != ':')
        return fail(r, "expected ':' after the key \"%.100s\", found %s", key, found(r, buf, sizeof buf));
      r->p++;
      if (value(r, item, depth + 1)) return -1;
    } else {
      memset(item, 0, sizeof *item);
      v->n++;
      if (value(r, item, depth + 1)) return -1;
    }
    ws(r);
    if (r->p < r->end && *r->p == ',') {
      r->p++;
      continue;
    }
    if (r->p < r->end && *r->p == close) {
      r->p++;
      return 0;
    }
    return fail(r, "expected ',' or '%c', found %s", close, found(r, buf, sizeof buf));
  }
}

int ce_json_parse(const char *text, size_t len, ce_json *out, char *err, size_t errlen) {
  reader r = {text, text + len, 1, err, errlen};
  char buf[16];
  if (err && errlen) err[0] = 0;
  if (value(&r, out, 0)) {
    ce_json_free(out);
    return -1;
  }
  ws(&r);
  if (r.p < r.end) {
    fail(&r, "text after the value: %s", found(&r, buf, sizeof buf));
    ce_json_free(out);
    return -1;
  }
  return 0;
}

void ce_json_free(ce_json *v) {
  if (!v) return;
  for (size_t i = 0; i < v->n; i++) {
    ce_json_free(&v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->text);
  memset(v, 0, sizeof *v);
}

const ce_json *ce_json_get(const ce_json *obj, const char *key) {
  if (!obj || obj->type != CE_JOBJECT) return NULL;
  for (size_t i = obj->n; i-- > 0;)
    if (!strcmp(obj->keys[i], key)) return &obj->items[i];
  return NULL;
}

void ce_utf8_clean(char *s) {
  unsigned char *p = (unsigned char *)s, *end = p + strlen(s);
  while (p < end) {
    size_t n = *p < 0x80 ? 1 : ce_utf8_seq(p, end);
    if (!n) *p = '?', n = 1;
    p += n;
  }
}

void ce_json_write_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': fputs("\\\"", f); break;
    case '\\': fputs("\\\\", f); break;
    case '\n': fputs("\\n", f); break;
    case '\r': fputs("\\r", f); break;
    case '\t': fputs("\\t", f); break;
    default:
      if (*p < 0x20)
        fprintf(f, "\\u%04x", *p);
      else
        fputc(*p, f);
    }
  }
  fputc('"', f);
}

static int flat(const ce_json *v) {
  for (size_t i = 0; i < v->n; i++)
    if ((v->items[i].type == CE_JARRAY || v->items[i].type == CE_JOBJECT) && v->items[i].n) return 0;
  return 1;
}

void ce_json_write(FILE *f, const ce_json *v, int indent) {
  switch (v->type) {
  case CE_JNULL: fputs("null", f); return;
  case CE_JFALSE: fputs("false", f); return;
  case CE_JTRUE: fputs("true", f); return;
  case CE_JNUMBER: fputs(v->text, f); return;
  case CE_JSTRING: ce_json_write_string(f, v->text); return;
  default: break;
  }
  const int object = v->type == CE_JOBJECT, one_line = flat(v);
  fputc(object ? '{' : '[', f);
  for (size_t i = 0; i < v->n; i++) {
    if (one_line) {
      if (i) fputs(", ", f);
    } else {
      fprintf(f, "%s\n%*s", i ? "," : "", 2 * (indent + 1), "");
    }
    if (object) {
      ce_json_write_string(f, v->keys[i]);
      fputs(": ", f);
    }
    ce_json_write(f, &v->items[i], indent + 1);
  }
  if (!one_line && v->n) fprintf(f, "\n%*s", 2 * indent, "");
  fputc(object ? '}' : ']', f);
}
