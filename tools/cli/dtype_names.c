/* The tool's names of dtypes, lower case everywhere (flags, messages, --help,
 * `clembed inspect`). The dtypes and their names are the library's one list
 * (src/runtime/dtypes.h), asked through the public API as any program would:
 * every code that clembed_dtype_name names, in code order. A new clembed_dtype
 * is in every flag, message and --help that takes table dtypes with nothing
 * typed here. The sets of flags that take a dtype (CLI_DT_*) follow from its
 * facts: the float types (one value a block), NumPy's two (f32, f16), and the
 * block types clembed_matrix_write quantizes float values into (Q8_0, Q4_0,
 * and FBGEMM's row-wise types, whose block values are 0; include/clembed.h). The types a file holds that clembed cannot use are
 * named in the same scheme (i32, i64, f64, u8, bool, q8_k, ...; see
 * cli_type_text). */
#include "cli.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* The codes asked: the list's values are small and dense (0, 1, 2, ...). */
#define CLI_DTYPE_CODES 256

static int known(int d) { return d >= 0 && strcmp(clembed_dtype_name((clembed_dtype)d), "unknown") != 0; }

/* The CLI_DT_* sets a known dtype belongs to. */
static unsigned sets_of(int d) {
  /* FBGEMM's row-wise types (block values 0) are no file's tensor type: --dtype quantizes into them */
  if (clembed_dtype_block_values((clembed_dtype)d) == 0) return CLI_DT_EMBED;
  unsigned s = CLI_DT_TABLE;
  if (clembed_dtype_block_values((clembed_dtype)d) == 1) s |= CLI_DT_FLOAT | CLI_DT_EMBED;
  if (d == CLEMBED_F32 || d == CLEMBED_F16) s |= CLI_DT_NPY;
  if (d == CLEMBED_Q8_0 || d == CLEMBED_Q4_0) s |= CLI_DT_EMBED;
  return s;
}

const char *cli_dtype_name(int dtype) { return known(dtype) ? clembed_dtype_name((clembed_dtype)dtype) : NULL; }

/* The names of a set, each with `sep` before it but the first. */
static const char *list_of(unsigned set, const char *sep, char *buf, size_t cap) {
  size_t used = 0;
  buf[0] = '\0';
  for (int d = 0; d < CLI_DTYPE_CODES; d++) {
    if (!known(d) || !(sets_of(d) & set)) continue;
    int w = snprintf(buf + used, cap - used, "%s%s", used ? sep : "", clembed_dtype_name((clembed_dtype)d));
    if (w < 0 || (size_t)w >= cap - used) break;
    used += (size_t)w;
  }
  return buf;
}

const char *cli_dtype_list(unsigned set, char *buf, size_t cap) { return list_of(set, ", ", buf, cap); }

clembed_dtype cli_arg_dtype(const char *flagname, const char *s, unsigned set) {
  for (int d = 0; d < CLI_DTYPE_CODES; d++)
    if (known(d) && (sets_of(d) & set) && !strcmp(s, clembed_dtype_name((clembed_dtype)d))) return (clembed_dtype)d;
  char list[1024];
  cli_fail(1, "%s: '%s' is not one of %s", flagname, s, cli_dtype_list(set, list, sizeof list));
}

void cli_put_usage(const char *usage, FILE *f) {
  const char *mark = CLI_TABLE_DTYPES;
  size_t marklen = strlen(mark);
  const char *p = usage, *m;
  while ((m = strstr(p, mark)) != NULL) {
    fwrite(p, 1, (size_t)(m - p), f);
    /* the names from the marker's column on, wrapped before column 92 at that column */
    const char *line = m;
    while (line > usage && line[-1] != '\n') line--;
    size_t column = (size_t)(m - line), at = column;
    char names[1024];
    list_of(CLI_DT_TABLE, " ", names, sizeof names);
    for (char *w = strtok(names, " "); w; w = strtok(NULL, " ")) {
      size_t n = strlen(w);
      if (at > column && at + 1 + n > 92) {
        fprintf(f, "\n%*s", (int)column, "");
        at = column;
      } else if (at > column) {
        fputc(' ', f);
        at++;
      }
      fputs(w, f);
      at += n;
    }
    p = m + marklen;
  }
  fputs(p, f);
}

/* A NumPy type string of a little-endian (or one-byte) number: the scheme's
 * name ("<f8" -> f64, "|u1" -> u8, "|b1" -> bool), else 0. */
static int npy_name(const char *d, char *buf, size_t cap) {
  if (d[0] != '<' && d[0] != '|') return 0;
  char kind = d[1];
  if (!kind || !strchr("fiucb", kind)) return 0;
  unsigned size = 0;
  const char *p = d + 2;
  if (!*p) return 0;
  for (; *p; p++) {
    if (!isdigit((unsigned char)*p) || size > 1000) return 0;
    size = size * 10 + (unsigned)(*p - '0');
  }
  if (size == 0 || (d[0] == '|' && size != 1)) return 0;
  if (kind == 'b') {
    if (size != 1) return 0;
    snprintf(buf, cap, "bool");
  } else {
    snprintf(buf, cap, "%c%u", kind, size * 8);
  }
  return 1;
}

const char *cli_type_text(const clembed_tensor_info *t, char *buf, size_t cap) {
  const char *n = cli_dtype_name(t->dtype);
  if (n) return n;
  const char *s = t->type_name ? t->type_name : "?";
  if (s[0] && strchr("<>|=", s[0])) /* a NumPy type string */
    return npy_name(s, buf, cap) ? buf : s; /* big-endian, text, ...: as NumPy writes it */
  size_t i = 0;
  for (; s[i] && i + 1 < cap; i++) buf[i] = (char)tolower((unsigned char)s[i]);
  buf[i] = '\0';
  return buf;
}
