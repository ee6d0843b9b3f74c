/* The tool's names of dtypes: one table, lower case everywhere (flags,
 * messages, `clembed inspect`). clembed's dtypes by clembed's names (ggml's
 * type names in lower case for the block types); a new clembed_dtype is one
 * line in `dtypes` below, with the sets of flags that take it. The types a
 * file holds that clembed cannot use are named in the same scheme (i32, i64,
 * f64, u8, bool, q8_k, ...; see cli_type_text). */
#include "cli.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static const struct {
  const char *name;
  clembed_dtype dtype;
  unsigned sets; /* CLI_DT_* */
} dtypes[] = {
    {"f32", CLEMBED_F32, CLI_DT_FLOAT | CLI_DT_NPY | CLI_DT_EMBED | CLI_DT_TABLE},
    {"f16", CLEMBED_F16, CLI_DT_FLOAT | CLI_DT_NPY | CLI_DT_EMBED | CLI_DT_TABLE},
    {"bf16", CLEMBED_BF16, CLI_DT_FLOAT | CLI_DT_EMBED | CLI_DT_TABLE},
    {"q8_0", CLEMBED_Q8_0, CLI_DT_EMBED | CLI_DT_TABLE},
    {"q4_0", CLEMBED_Q4_0, CLI_DT_EMBED | CLI_DT_TABLE},
    {"q4_k", CLEMBED_Q4_K, CLI_DT_TABLE},
    {"q6_k", CLEMBED_Q6_K, CLI_DT_TABLE},
    {"q4_1", CLEMBED_Q4_1, CLI_DT_TABLE},
    {"q5_0", CLEMBED_Q5_0, CLI_DT_TABLE},
    {"q5_1", CLEMBED_Q5_1, CLI_DT_TABLE},
    {"q2_k", CLEMBED_Q2_K, CLI_DT_TABLE},
    {"q3_k", CLEMBED_Q3_K, CLI_DT_TABLE},
    {"q5_k", CLEMBED_Q5_K, CLI_DT_TABLE},
    {"iq4_nl", CLEMBED_IQ4_NL, CLI_DT_TABLE},
    {"iq4_xs", CLEMBED_IQ4_XS, CLI_DT_TABLE},
    {"iq2_xxs", CLEMBED_IQ2_XXS, CLI_DT_TABLE},
    {"iq2_xs", CLEMBED_IQ2_XS, CLI_DT_TABLE},
    {"iq2_s", CLEMBED_IQ2_S, CLI_DT_TABLE},
    {"iq3_xxs", CLEMBED_IQ3_XXS, CLI_DT_TABLE},
    {"iq3_s", CLEMBED_IQ3_S, CLI_DT_TABLE},
    {"iq1_s", CLEMBED_IQ1_S, CLI_DT_TABLE},
    {"iq1_m", CLEMBED_IQ1_M, CLI_DT_TABLE},
};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])

const char *cli_dtype_name(int dtype) {
  for (size_t i = 0; i < NDTYPES; i++)
    if ((int)dtypes[i].dtype == dtype) return dtypes[i].name;
  return NULL;
}

const char *cli_dtype_list(unsigned set, char *buf, size_t cap) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < NDTYPES; i++) {
    if (!(dtypes[i].sets & set)) continue;
    int w = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", dtypes[i].name);
    if (w < 0 || (size_t)w >= cap - used) break;
    used += (size_t)w;
  }
  return buf;
}

clembed_dtype cli_arg_dtype(const char *flagname, const char *s, unsigned set) {
  for (size_t i = 0; i < NDTYPES; i++)
    if ((dtypes[i].sets & set) && !strcmp(s, dtypes[i].name)) return dtypes[i].dtype;
  char list[256];
  cli_fail(1, "%s: '%s' is not one of %s", flagname, s, cli_dtype_list(set, list, sizeof list));
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
