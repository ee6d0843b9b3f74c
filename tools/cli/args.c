/* Flag parsing and the values of flags (exit 1 naming the flag). */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The flag `arg` names ("--name" or "--name=value"), or NULL. */
static cli_flag *flag_find(cli_flag *f, size_t nf, const char *arg, const char **inline_value) {
  const char *eq = NULL;
  size_t len = strlen(arg);
  *inline_value = NULL;
  if (arg[0] == '-' && arg[1] == '-' && (eq = strchr(arg, '=')) != NULL) len = (size_t)(eq - arg);
  for (size_t i = 0; i < nf; i++) {
    if ((strlen(f[i].name) == len && !strncmp(f[i].name, arg, len)) ||
        (f[i].alias && !strcmp(f[i].alias, arg))) {
      if (eq) *inline_value = eq + 1;
      return &f[i];
    }
  }
  return NULL;
}

/* Whether a flag's value `v` is rather a flag: "-o", "--scale", "-x" (not "-",
 * not a negative number such as "-1", "-0.5" or "-inf"). A value that starts
 * so is given as --flag=VALUE. */
static int looks_like_flag(const char *v) {
  double d;
  return v[0] == '-' && (v[1] == '-' || isalpha((unsigned char)v[1])) && !cli_parse_double(v, &d);
}

/* The usage describes `name` after its synopsis (the text past the first
 * blank line), as a word of its own ("--scale" in "--scale-grad-by-freq" is
 * not). */
static int describes(const char *usage, const char *name) {
  const char *body = strstr(usage, "\n\n"), *p = body ? body : usage;
  size_t n = strlen(name);
  while ((p = strstr(p, name)) != NULL) {
    char before = p == usage ? ' ' : p[-1], after = p[n];
    if (!isalnum((unsigned char)before) && before != '-' && !isalnum((unsigned char)after) && after != '-' &&
        after != '_')
      return 1;
    p += n;
  }
  return 0;
}

/* --help: the usage, which must describe every flag the subcommand takes
 * (checked here, so that a flag added without its line cannot pass the tests). */
static _Noreturn void print_help(const cli_flag *f, size_t nf, const char *usage) {
  int missing = 0;
  cli_put_usage(usage, stdout);
  fflush(stdout);
  for (size_t i = 0; i < nf; i++)
    if (!describes(usage, f[i].name))
      fprintf(stderr, "%s: internal error: --help does not describe %s\n", cli_cmd, f[i].name), missing++;
  cli_release_all();
  exit(missing ? 2 : 0);
}

/* Parses flags and up to max_ops operands (arguments that are neither flags
 * nor their values) into ops; *nops receives their count. */
static void parse(int argc, char **argv, cli_flag *f, size_t nf, const char *usage, const char **ops, int max_ops,
                  const char *op_name, int *nops) {
  const char *iv;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) print_help(f, nf, usage);
    cli_flag *fl = flag_find(f, nf, argv[i], &iv);
    if (fl && fl->has_value && !iv && i + 1 < argc && !looks_like_flag(argv[i + 1])) i++;
  }
  *nops = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    cli_flag *fl = flag_find(f, nf, a, &iv);
    if (!fl) {
      if (a[0] == '-' && a[1]) {
        const char *eq = strchr(a, '=');
        int len = eq && a[1] == '-' ? (int)(eq - a) : (int)strlen(a);
        cli_fail_usage("unknown flag '%.*s'", len, a);
      }
      if (*nops < max_ops) {
        ops[(*nops)++] = a;
        continue;
      }
      if (max_ops) cli_fail_usage("one %s only ('%s' and '%s' given)", op_name, ops[0], a);
      cli_fail_usage("unexpected argument '%s'", a);
    }
    if (fl->given) cli_fail_usage("%s is given more than once", fl->name);
    fl->given = 1;
    if (fl->has_value) {
      if (iv) fl->value = iv;
      else if (i + 1 < argc && !looks_like_flag(argv[i + 1])) fl->value = argv[++i];
      else if (i + 1 < argc)
        cli_fail_usage("%s needs a value, and '%s' looks like a flag (a value that starts with '-' is given as "
                       "%s=VALUE)", fl->name, argv[i + 1], fl->name);
      else cli_fail_usage("%s needs a value", fl->name);
    } else if (iv) {
      cli_fail_usage("%s takes no value", fl->name);
    }
  }
}

void cli_parse_flags(int argc, char **argv, cli_flag *f, size_t nf, const char *usage) {
  int n;
  parse(argc, argv, f, nf, usage, NULL, 0, NULL, &n);
}

const char *cli_parse_operand(int argc, char **argv, cli_flag *f, size_t nf, const char *usage, const char *name) {
  const char *op = NULL;
  int n;
  parse(argc, argv, f, nf, usage, &op, 1, name, &n);
  if (!n) cli_fail_usage("no %s given", name);
  return op;
}

cli_flag *cli_flag_get(cli_flag *f, size_t nf, const char *name) {
  for (size_t i = 0; i < nf; i++)
    if (!strcmp(f[i].name, name)) return &f[i];
  cli_fail(2, "internal error: no flag %s", name);
}

void cli_require(cli_flag *f, size_t nf, const char *const *names) {
  char buf[512] = "";
  int missing = 0;
  for (; *names; names++) {
    const cli_flag *g = cli_flag_get(f, nf, *names);
    if (g->given) continue;
    size_t used = strlen(buf);
    snprintf(buf + used, sizeof buf - used, "%s%s", missing ? ", " : "", g->alias ? g->alias : g->name);
    missing++;
  }
  if (missing) cli_fail_usage("missing required flag%s %s", missing > 1 ? "s" : "", buf);
}

/* ------------------------------------------------------- number parsing */

int cli_parse_double(const char *s, double *out) {
  char *end;
  if (!s || !*s || isspace((unsigned char)s[0])) return 0;
  errno = 0;
  double d = strtod(s, &end);
  if (*end) return 0;
  *out = d;
  return 1;
}

float cli_arg_float(const char *flagname, const char *s) {
  double d;
  if (!cli_parse_double(s, &d)) cli_fail(1, "%s: '%s' is not a number", flagname, s);
  if (!isfinite(d) || !isfinite((float)d)) cli_fail(1, "%s: '%s' is not a finite float32 number", flagname, s);
  return (float)d;
}

uint64_t cli_arg_u64(const char *flagname, const char *s) {
  char *end;
  if (!s || !isdigit((unsigned char)s[0]))
    cli_fail(1, "%s: '%s' is not a non-negative integer", flagname, s ? s : "");
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end) cli_fail(1, "%s: '%s' is not a non-negative integer", flagname, s);
  if (errno == ERANGE) cli_fail(1, "%s: '%s' is out of range", flagname, s);
  return (uint64_t)v;
}

size_t cli_arg_size(const char *flagname, const char *s) {
  uint64_t v = cli_arg_u64(flagname, s);
#if SIZE_MAX < UINT64_MAX
  if (v > SIZE_MAX) cli_fail(1, "%s: '%s' is out of range", flagname, s);
#endif
  return (size_t)v;
}

size_t cli_arg_dim(const char *flagname, const char *s) {
  size_t v = cli_arg_size(flagname, s);
  if (v == 0) cli_fail(1, "%s: must be at least 1", flagname);
  return v;
}

int64_t cli_arg_i64(const char *flagname, const char *s) {
  char *end;
  const char *d = s && (s[0] == '-') ? s + 1 : s;
  if (!d || !isdigit((unsigned char)d[0])) cli_fail(1, "%s: '%s' is not an integer", flagname, s ? s : "");
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (*end) cli_fail(1, "%s: '%s' is not an integer", flagname, s);
  if (errno == ERANGE) cli_fail(1, "%s: '%s' is out of range", flagname, s);
  return (int64_t)v;
}

int cli_arg_choice(const char *flagname, const char *s, const char *const *names) {
  char list[256] = "";
  for (int i = 0; names[i]; i++) {
    if (!strcmp(s, names[i])) return i;
    size_t used = strlen(list);
    snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", names[i]);
  }
  cli_fail(1, "%s: '%s' is not one of %s", flagname, s, list);
}

void cli_arg_pair(const char *flagname, const char *s, const char *form, float *a, float *b) {
  const char *comma = strchr(s, ',');
  if (!comma || strchr(comma + 1, ',')) cli_fail(1, "%s: '%s' is not %s", flagname, s, form);
  size_t n = (size_t)(comma - s);
  char first[128];
  if (n >= sizeof first) cli_fail(1, "%s: '%s' is not %s", flagname, s, form);
  memcpy(first, s, n);
  first[n] = '\0';
  double x, y;
  if (!cli_parse_double(first, &x) || !cli_parse_double(comma + 1, &y))
    cli_fail(1, "%s: '%s' is not %s", flagname, s, form);
  if (!isfinite(x) || !isfinite(y) || !isfinite((float)x) || !isfinite((float)y))
    cli_fail(1, "%s: '%s' has a value that is not a finite float32 number", flagname, s);
  *a = (float)x;
  *b = (float)y;
}

static const char *const policy_names[] = {"check", "clamp", "zero", "wrap", NULL};
static const clembed_index_policy policy_values[] = {CLEMBED_INDEX_CHECK, CLEMBED_INDEX_CLAMP, CLEMBED_INDEX_ZERO,
                                                     CLEMBED_INDEX_WRAP};
static const char *const exponent_names[] = {"pair", "index", NULL};
static const char *const layout_names[] = {"interleaved", "halves", NULL};

clembed_index_policy cli_arg_policy(const char *s) {
  return s ? policy_values[cli_arg_choice("--on-bad-id", s, policy_names)] : CLEMBED_INDEX_CHECK;
}

clembed_sinusoid cli_arg_sinusoid(const char *base, const char *exponent, const char *layout) {
  clembed_sinusoid s = clembed_sinusoid_defaults(); /* 10000, PAIR, INTERLEAVED */
  if (base) {
    double b;
    if (!cli_parse_double(base, &b)) cli_fail(1, "--base: '%s' is not a number", base);
    if (!isfinite(b) || !(b > 0.0)) cli_fail(1, "--base: '%s' must be a finite number > 0", base);
    s.base = b;
  }
  if (exponent)
    s.exponent = cli_arg_choice("--exponent", exponent, exponent_names) ? CLEMBED_EXPONENT_INDEX
                                                                         : CLEMBED_EXPONENT_PAIR;
  if (layout)
    s.layout = cli_arg_choice("--layout", layout, layout_names) ? CLEMBED_LAYOUT_HALVES : CLEMBED_LAYOUT_INTERLEAVED;
  if (s.exponent == CLEMBED_EXPONENT_INDEX && s.layout == CLEMBED_LAYOUT_HALVES)
    cli_fail(1, "--exponent index cannot be combined with --layout halves");
  return s;
}

float cli_arg_scale(const char *s, size_t d) {
  if (!s) return 1.0f;
  if (!strcmp(s, "sqrt")) return (float)sqrt((double)d);
  return cli_arg_float("--scale", s);
}

void cli_check_scale(const char *s) {
  if (s && strcmp(s, "sqrt")) cli_arg_float("--scale", s);
}

float cli_arg_dropout(const char *s) {
  if (!s) return 0.0f;
  float p = cli_arg_float("--dropout", s);
  if (!(p >= 0.0f && p < 1.0f)) cli_fail(1, "--dropout: %s is outside [0, 1)", s);
  return p;
}

int64_t cli_arg_padding(const char *s, size_t rows) {
  if (!s) return CLEMBED_NO_PADDING;
  int64_t p = cli_arg_i64("--padding-idx", s);
  int64_t r = rows > (size_t)INT64_MAX ? INT64_MAX : (int64_t)rows;
  if (p < -r || p >= r) cli_fail(1, "--padding-idx: %s is outside [%" PRId64 ", %" PRId64 ")", s, -r, r);
  return p < 0 ? p + r : p;
}
