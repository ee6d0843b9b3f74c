/* clembed: the command-line tool (API.md, "Command-line tool").
 *
 * Built on the public header alone (and plain OpenCL for `devices`). Arrays are
 * .npy files read and written by npy.c; output is written only after every
 * check and all device work succeeded, to a temporary file renamed into place.
 *
 * Exit status: 0 success; 1 bad usage or bad input (the message names the
 * file, flag or position); 2 device or OpenCL failure (no device, build
 * failure, out of memory).
 *
 * Every resource is registered in one table (`R`) so that a failure anywhere
 * (fail() -> exit) releases everything. */
#include "clembed.h"
#include "npy.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tools/bench.c */
extern int clembed_bench_main(int argc, char **argv);

#if defined(__GNUC__) || defined(__clang__)
#define CLI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CLI_PRINTF(f, a)
#endif

/* ------------------------------------------------------------ resources */

#define R_MAX 16

static struct {
  npy_array arrays[R_MAX];
  int narrays;
  void *mem[R_MAX];
  int nmem;
  clembed_matrix mats[R_MAX];
  int nmats;
  clembed_ids ids[R_MAX];
  int nids;
  clembed_context *ctx;
} R;

static void release_all(void) {
  for (int i = R.nmats - 1; i >= 0; i--) clembed_matrix_release(&R.mats[i]);
  for (int i = R.nids - 1; i >= 0; i--) clembed_ids_release(&R.ids[i]);
  R.nmats = R.nids = 0;
  clembed_context_destroy(R.ctx);
  R.ctx = NULL;
  for (int i = R.narrays - 1; i >= 0; i--) npy_free(&R.arrays[i]);
  for (int i = R.nmem - 1; i >= 0; i--) free(R.mem[i]);
  R.narrays = R.nmem = 0;
}

/* "clembed embed" etc., the prefix of every message. */
static char g_cmd[64] = "clembed";

static _Noreturn void fail(int code, const char *fmt, ...) CLI_PRINTF(2, 3);
static _Noreturn void fail(int code, const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "%s: ", g_cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  release_all();
  exit(code);
}

/* A usage error: the message and a pointer to --help. */
static _Noreturn void fail_usage(const char *fmt, ...) CLI_PRINTF(1, 2);
static _Noreturn void fail_usage(const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "%s: ", g_cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry '%s --help'.\n", g_cmd);
  release_all();
  exit(1);
}

static void *xmalloc(size_t bytes) {
  if (R.nmem == R_MAX) fail(2, "internal error: too many allocations");
  void *p = malloc(bytes ? bytes : 1);
  if (!p) fail(2, "out of host memory (%zu bytes)", bytes);
  R.mem[R.nmem++] = p;
  return p;
}

static npy_array *new_array(void) {
  if (R.narrays == R_MAX) fail(2, "internal error: too many arrays");
  npy_array *a = &R.arrays[R.narrays++];
  memset(a, 0, sizeof *a);
  return a;
}

static clembed_matrix *new_matrix(void) {
  if (R.nmats == R_MAX) fail(2, "internal error: too many matrices");
  clembed_matrix *m = &R.mats[R.nmats++];
  memset(m, 0, sizeof *m);
  return m;
}

static clembed_ids *new_ids(void) {
  if (R.nids == R_MAX) fail(2, "internal error: too many id buffers");
  clembed_ids *d = &R.ids[R.nids++];
  memset(d, 0, sizeof *d);
  return d;
}

/* a * b * c bytes, or a bad-input failure naming `what` when it overflows. */
static size_t mul3(size_t a, size_t b, size_t c, const char *what) {
  if ((b && a > SIZE_MAX / b) || (c && a * b > SIZE_MAX / c)) fail(1, "%s is too large", what);
  return a * b * c;
}

/* ----------------------------------------------------------- flag parsing */

typedef struct flag {
  const char *name;  /* "--table" */
  const char *alias; /* "-o", or NULL */
  int has_value;     /* 0: a switch */
  const char *value; /* the value given */
  int given;
} flag;

#define FV(n) {n, NULL, 1, NULL, 0}
#define FA(n, a) {n, a, 1, NULL, 0}
#define FS(n) {n, NULL, 0, NULL, 0}
#define NFLAGS(f) (sizeof(f) / sizeof((f)[0]))

/* The flag `arg` names ("--name" or "--name=value"), or NULL. */
static flag *flag_find(flag *f, size_t nf, const char *arg, const char **inline_value) {
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

/* Parses argv[1..argc-1] (argv[0] is the subcommand) into f. --help or -h
 * anywhere (not as a flag's value) prints `usage` and exits 0. */
static void parse_flags(int argc, char **argv, flag *f, size_t nf, const char *usage) {
  const char *iv;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(usage, stdout);
      release_all();
      exit(0);
    }
    flag *fl = flag_find(f, nf, argv[i], &iv);
    if (fl && fl->has_value && !iv) i++;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    flag *fl = flag_find(f, nf, a, &iv);
    if (!fl) {
      if (a[0] == '-' && a[1]) {
        const char *eq = strchr(a, '=');
        int len = eq && a[1] == '-' ? (int)(eq - a) : (int)strlen(a);
        fail_usage("unknown flag '%.*s'", len, a);
      }
      fail_usage("unexpected argument '%s'", a);
    }
    if (fl->given) fail_usage("%s is given more than once", fl->name);
    fl->given = 1;
    if (fl->has_value) {
      if (iv) fl->value = iv;
      else if (i + 1 < argc) fl->value = argv[++i];
      else fail_usage("%s needs a value", fl->name);
    } else if (iv) {
      fail_usage("%s takes no value", fl->name);
    }
  }
}

static flag *flag_get(flag *f, size_t nf, const char *name) {
  for (size_t i = 0; i < nf; i++)
    if (!strcmp(f[i].name, name)) return &f[i];
  fail(2, "internal error: no flag %s", name);
}

#define VAL(n) (flag_get(fl, NFLAGS(fl), n)->value)
#define GIVEN(n) (flag_get(fl, NFLAGS(fl), n)->given)

/* Fails naming every flag of the NULL-terminated list that is missing. */
static void require(flag *f, size_t nf, const char *const *names) {
  char buf[512] = "";
  int missing = 0;
  for (; *names; names++) {
    const flag *g = flag_get(f, nf, *names);
    if (g->given) continue;
    size_t used = strlen(buf);
    snprintf(buf + used, sizeof buf - used, "%s%s", missing ? ", " : "", g->alias ? g->alias : g->name);
    missing++;
  }
  if (missing) fail_usage("missing required flag%s %s", missing > 1 ? "s" : "", buf);
}

/* ------------------------------------------------------- number parsing */

static int parse_double(const char *s, double *out) {
  char *end;
  if (!s || !*s || isspace((unsigned char)s[0])) return 0;
  errno = 0;
  double d = strtod(s, &end);
  if (*end) return 0;
  *out = d;
  return 1;
}

/* A finite float32 value. */
static float arg_float(const char *flagname, const char *s) {
  double d;
  if (!parse_double(s, &d)) fail(1, "%s: '%s' is not a number", flagname, s);
  if (!isfinite(d) || !isfinite((float)d)) fail(1, "%s: '%s' is not a finite float32 number", flagname, s);
  return (float)d;
}

static uint64_t arg_u64(const char *flagname, const char *s) {
  char *end;
  if (!s || !isdigit((unsigned char)s[0])) fail(1, "%s: '%s' is not a non-negative integer", flagname, s ? s : "");
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end) fail(1, "%s: '%s' is not a non-negative integer", flagname, s);
  if (errno == ERANGE) fail(1, "%s: '%s' is out of range", flagname, s);
  return (uint64_t)v;
}

static size_t arg_size(const char *flagname, const char *s) {
  uint64_t v = arg_u64(flagname, s);
#if SIZE_MAX < UINT64_MAX
  if (v > SIZE_MAX) fail(1, "%s: '%s' is out of range", flagname, s);
#endif
  return (size_t)v;
}

static int64_t arg_i64(const char *flagname, const char *s) {
  char *end;
  const char *d = s && (s[0] == '-') ? s + 1 : s;
  if (!d || !isdigit((unsigned char)d[0])) fail(1, "%s: '%s' is not an integer", flagname, s ? s : "");
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (*end) fail(1, "%s: '%s' is not an integer", flagname, s);
  if (errno == ERANGE) fail(1, "%s: '%s' is out of range", flagname, s);
  return (int64_t)v;
}

/* One of the NULL-terminated `names`; returns its index. */
static int arg_choice(const char *flagname, const char *s, const char *const *names) {
  char list[256] = "";
  for (int i = 0; names[i]; i++) {
    if (!strcmp(s, names[i])) return i;
    size_t used = strlen(list);
    snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", names[i]);
  }
  fail(1, "%s: '%s' is not one of %s", flagname, s, list);
}

/* "MEAN,STD" -> two finite floats. */
static void arg_pair(const char *flagname, const char *s, const char *form, float *a, float *b) {
  const char *comma = strchr(s, ',');
  if (!comma || strchr(comma + 1, ',')) fail(1, "%s: '%s' is not %s", flagname, s, form);
  size_t n = (size_t)(comma - s);
  char first[128];
  if (n >= sizeof first) fail(1, "%s: '%s' is not %s", flagname, s, form);
  memcpy(first, s, n);
  first[n] = '\0';
  double x, y;
  if (!parse_double(first, &x) || !parse_double(comma + 1, &y)) fail(1, "%s: '%s' is not %s", flagname, s, form);
  if (!isfinite(x) || !isfinite(y) || !isfinite((float)x) || !isfinite((float)y))
    fail(1, "%s: '%s' has a value that is not a finite float32 number", flagname, s);
  *a = (float)x;
  *b = (float)y;
}

static const char *const policy_names[] = {"check", "clamp", "zero", "wrap", NULL};
static const clembed_index_policy policy_values[] = {CLEMBED_INDEX_CHECK, CLEMBED_INDEX_CLAMP, CLEMBED_INDEX_ZERO,
                                                     CLEMBED_INDEX_WRAP};
static const char *const exponent_names[] = {"pair", "index", NULL};
static const char *const layout_names[] = {"interleaved", "halves", NULL};

static clembed_index_policy arg_policy(const char *s) {
  return s ? policy_values[arg_choice("--on-bad-id", s, policy_names)] : CLEMBED_INDEX_CHECK;
}

/* The sinusoid from --base, --exponent, --layout (each optional). */
static clembed_sinusoid arg_sinusoid(const char *base, const char *exponent, const char *layout) {
  clembed_sinusoid s = {10000.0, CLEMBED_EXPONENT_PAIR, CLEMBED_LAYOUT_INTERLEAVED};
  if (base) {
    double b;
    if (!parse_double(base, &b)) fail(1, "--base: '%s' is not a number", base);
    if (!isfinite(b) || !(b > 0.0)) fail(1, "--base: '%s' must be a finite number > 0", base);
    s.base = b;
  }
  if (exponent) s.exponent = arg_choice("--exponent", exponent, exponent_names) ? CLEMBED_EXPONENT_INDEX
                                                                                 : CLEMBED_EXPONENT_PAIR;
  if (layout) s.layout = arg_choice("--layout", layout, layout_names) ? CLEMBED_LAYOUT_HALVES
                                                                       : CLEMBED_LAYOUT_INTERLEAVED;
  if (s.exponent == CLEMBED_EXPONENT_INDEX && s.layout == CLEMBED_LAYOUT_HALVES)
    fail(1, "--exponent index cannot be combined with --layout halves");
  return s;
}

/* --scale S or sqrt (sqrt(D) as float). */
static float arg_scale(const char *s, size_t d) {
  if (!s) return 1.0f;
  if (!strcmp(s, "sqrt")) return (float)sqrt((double)d);
  return arg_float("--scale", s);
}

static float arg_dropout(const char *s) {
  if (!s) return 0.0f;
  float p = arg_float("--dropout", s);
  if (!(p >= 0.0f && p < 1.0f)) fail(1, "--dropout: %s is outside [0, 1)", s);
  return p;
}

/* --padding-idx V for a table of `rows` rows; negative values count from the
 * end, as in PyTorch (-1 is the last row). */
static int64_t arg_padding(const char *s, size_t rows) {
  if (!s) return CLEMBED_NO_PADDING;
  int64_t p = arg_i64("--padding-idx", s);
  int64_t r = rows > (size_t)INT64_MAX ? INT64_MAX : (int64_t)rows;
  if (p < -r || p >= r) fail(1, "--padding-idx: %s is outside [%" PRId64 ", %" PRId64 ")", s, -r, r);
  return p < 0 ? p + r : p;
}

/* ------------------------------------------------------------ .npy files */

static const char *shape_str(const npy_array *a, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  used += (size_t)snprintf(buf, len, "(");
  for (int i = 0; i < a->ndim && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%zu", i ? ", " : "", a->shape[i]);
  if (used < len) snprintf(buf + used, len - used, a->ndim == 1 ? ",)" : ")");
  return buf;
}

static npy_array *load(const char *flagname, const char *path) {
  char err[1024];
  npy_array *a = new_array();
  if (npy_read(path, a, err, sizeof err) != 0) fail(1, "%s %s", flagname, err);
  return a;
}

/* A 2-D <f4 or <f2 array: a table, a position table. */
static npy_array *load_table(const char *flagname, const char *path) {
  char sh[256];
  npy_array *a = load(flagname, path);
  if (a->dtype != NPY_F4 && a->dtype != NPY_F2)
    fail(1, "%s %s: dtype %s; a table must be <f4 or <f2", flagname, path, npy_dtype_name(a->dtype));
  if (a->ndim != 2)
    fail(1, "%s %s: shape %s; a table must be 2-D (rows, dim)", flagname, path, shape_str(a, sh, sizeof sh));
  return a;
}

/* <i4 or <i8 ids of shape (n,) or (batch, seq). */
static npy_array *load_ids(const char *flagname, const char *path) {
  char sh[256];
  npy_array *a = load(flagname, path);
  if (a->dtype != NPY_I4 && a->dtype != NPY_I8)
    fail(1, "%s %s: dtype %s; ids must be <i4 or <i8", flagname, path, npy_dtype_name(a->dtype));
  if (a->ndim != 1 && a->ndim != 2)
    fail(1, "%s %s: shape %s; ids must be 1-D (n,) or 2-D (batch, seq)", flagname, path,
         shape_str(a, sh, sizeof sh));
  return a;
}

/* A <f4 or <f2 gradient whose shape is ids.shape + (D,). */
static npy_array *load_grad(const char *path, const npy_array *ids, const char *ids_path) {
  char sh[256], ish[256];
  npy_array *g = load("--grad", path);
  if (g->dtype != NPY_F4 && g->dtype != NPY_F2)
    fail(1, "--grad %s: dtype %s; a gradient must be <f4 or <f2", path, npy_dtype_name(g->dtype));
  int ok = g->ndim == ids->ndim + 1;
  for (int i = 0; ok && i < ids->ndim; i++) ok = g->shape[i] == ids->shape[i];
  if (!ok) {
    char want[300];
    shape_str(ids, ish, sizeof ish);
    snprintf(want, sizeof want, "%.*s%sD)", (int)(strlen(ish) - (ids->ndim == 1 ? 2 : 1)), ish,
             ids->ndim ? ", " : "");
    fail(1, "--grad %s: shape %s does not match --ids %s of shape %s: expected %s", path,
         shape_str(g, sh, sizeof sh), ids_path, ish, want);
  }
  return g;
}

static void save(const char *path, npy_dtype dtype, int ndim, const size_t *shape, const void *data) {
  char err[1024];
  if (npy_write(path, dtype, ndim, shape, data, err, sizeof err) != 0) fail(1, "-o %s", err);
}

static clembed_dtype host_dtype(npy_dtype t) { return t == NPY_F2 ? CLEMBED_F16 : CLEMBED_F32; }

/* ------------------------------------------------------------ the device */

static clembed_context *open_device(const char *spec) {
  clembed_status s = clembed_context_create(spec, &R.ctx);
  if (s != CLEMBED_OK) {
    R.ctx = NULL;
    if (spec && *spec) fail(2, "--device %s: %s (%s)", spec, clembed_last_error_message(), clembed_status_string(s));
    fail(2, "%s (%s)", clembed_last_error_message(), clembed_status_string(s));
  }
  return R.ctx;
}

/* The library's message without its "clembed_function: " prefix. */
static const char *strip_prefix(const char *m) {
  if (strncmp(m, "clembed_", 8) != 0) return m;
  const char *p = m + 8;
  while (*p == '_' || islower((unsigned char)*p) || isdigit((unsigned char)*p)) p++;
  return (p[0] == ':' && p[1] == ' ') ? p + 2 : m;
}

/* Where a failure is reported: the ids file and the position file. */
static const char *g_ids_what = "ids";
static const char *g_pos_what = NULL;

/* Exits on a failed library call: 1 for bad input (a bad id or position names
 * the file), 2 for a device or OpenCL failure. */
static void check(clembed_status s) {
  if (s == CLEMBED_OK) return;
  const char *m = strip_prefix(clembed_context_message(R.ctx));
  if (s == CLEMBED_ERR_INDEX_OUT_OF_RANGE) {
    if (!strstr(m, "ids[") && strstr(m, "position") && g_pos_what) fail(1, "%s: %s", g_pos_what, m);
    fail(1, "%s: %s", g_ids_what, m);
  }
  if (s == CLEMBED_ERR_INVALID_ARGUMENT) fail(1, "%s", *m ? m : clembed_status_string(s));
  fail(2, "%s%s%s", clembed_status_string(s), *m ? ": " : "", m);
}

static clembed_matrix *upload(const void *host, clembed_dtype hd, size_t rows, size_t cols, clembed_dtype dt) {
  clembed_matrix *m = new_matrix();
  check(clembed_matrix_create(R.ctx, rows, cols, dt, m));
  if (rows && cols) check(clembed_matrix_write(R.ctx, m, host, hd));
  return m;
}

static clembed_matrix *zeros(size_t rows, size_t cols, clembed_dtype dt) {
  clembed_matrix *m = new_matrix();
  check(clembed_matrix_create(R.ctx, rows, cols, dt, m));
  return m;
}

static clembed_ids *upload_ids(const npy_array *a) {
  clembed_ids *d = new_ids();
  check(clembed_ids_create(R.ctx, a->data, a->count, a->dtype == NPY_I8 ? CLEMBED_I64 : CLEMBED_I32, d));
  return d;
}

/* Reads m into a new host buffer of `hd`; returns pending deferred errors. */
static void *download(const clembed_matrix *m, clembed_dtype hd) {
  void *h = xmalloc(mul3(m->rows, m->cols, clembed_dtype_size(hd), "the output"));
  if (m->rows && m->cols) check(clembed_matrix_read(R.ctx, m, h, hd));
  check(clembed_finish(R.ctx));
  return h;
}

/* ------------------------------------------------------------- usages */

static const char usage_main[] =
    "usage: clembed <subcommand> [flags]   (clembed <subcommand> --help for its flags)\n"
    "\n"
    "The embedding layer of a transformer on any OpenCL device. Arrays are .npy files.\n"
    "\n"
    "subcommands:\n"
    "  devices     list the OpenCL platforms and devices, mark the default\n"
    "  positional  sinusoidal positional table, shape (L, D)\n"
    "  embed       fused forward: scale * W[ids] + positions (+ dropout)\n"
    "  backward    dense table gradient (V, D)\n"
    "  sgd         one fused sparse SGD step on a table\n"
    "  init        table initialisation (Philox normal or uniform)\n"
    "  bench       the benchmark against the device's own copy\n"
    "  demo        the tutorial end to end on the default device\n"
    "  help        this text\n"
    "\n"
    "Every subcommand takes --device SPEC (\"P:D\" as `clembed devices` lists, gpu, cpu,\n"
    "accelerator, or part of the platform and device name; default: $CLEMBED_DEVICE, else\n"
    "the first GPU, accelerator, CPU) and --help. CLEMBED_TUNING=cpu or gpu picks the\n"
    "kernel shapes (default: cpu on a CPU device, gpu elsewhere; the same results but\n"
    "for the atomic backward's order; another value is an error).\n"
    "Exit status: 0 success, 1 bad usage or bad input, 2 device or OpenCL failure.\n"
    "\n"
    "  clembed --version   prints the version\n";

static const char usage_devices[] =
    "usage: clembed devices [--device SPEC]\n"
    "\n"
    "Lists the OpenCL platforms and their devices as P:D pairs for --device, and marks\n"
    "with '*' the device that a run with no --device (or with this --device) uses.\n";

static const char usage_positional[] =
    "usage: clembed positional --length L --dim D [--first P] [--base B]\n"
    "                          [--exponent pair|index] [--layout interleaved|halves]\n"
    "                          [--device SPEC] -o OUT.npy\n"
    "\n"
    "Writes the sinusoid table of positions P .. P+L-1 as a (L, D) <f4 array.\n"
    "  --length L      number of positions (rows)\n"
    "  --dim D         model dimension (columns)\n"
    "  --first P       first position (default 0)\n"
    "  --base B        frequency base (default 10000)\n"
    "  --exponent      pair: w = B^(-2*floor(i/2)/D) (default); index: w = B^(-i/D)\n"
    "  --layout        interleaved: sin, cos, sin, ... (default); halves: all sin, then all cos\n"
    "  -o, --output    the output file\n";

static const char usage_embed[] =
    "usage: clembed embed --table W.npy --ids IDS.npy [--scale S|sqrt]\n"
    "                     [--positions none|sinusoid|P.npy] [--base B] [--exponent pair|index]\n"
    "                     [--layout interleaved|halves] [--offset P] [--padding-idx V]\n"
    "                     [--on-bad-id check|clamp|zero|wrap] [--dtype f32|f16|bf16]\n"
    "                     [--dropout P --seed S] [--device SPEC] -o OUT.npy\n"
    "\n"
    "out[i] = dropout(scale * W[ids[i]] + P[position of i]); output shape ids.shape + (D,).\n"
    "  --table W.npy     <f4 or <f2 table (V, D)\n"
    "  --ids IDS.npy     <i4 or <i8 ids, (n,) or (batch, seq); 2-D ids are sequences of seq tokens\n"
    "  --scale           token row multiplier, or sqrt for sqrt(D) (default 1)\n"
    "  --positions       none (default), sinusoid, or a learned <f4/<f2 table (L, D)\n"
    "  --base, --exponent, --layout   the sinusoid (as in `clembed positional`)\n"
    "  --offset P        position of each sequence's first token (default 0)\n"
    "  --padding-idx V   this id's token row counts as zero (negative: counts from the end)\n"
    "  --on-bad-id       check (default: exit 1 naming the position), clamp, zero, wrap\n"
    "  --dtype           the table's device dtype (default f16 for a <f2 file, else f32)\n"
    "  --dropout P       zero each output element with probability P (inverted dropout)\n"
    "  --seed S          the dropout seed (default 0)\n"
    "  -o, --output      the output: <f2 for a <f2 table with --dtype f16 or none, else <f4\n";

static const char usage_backward[] =
    "usage: clembed backward --ids IDS.npy --grad G.npy --vocab V [--scale S|sqrt]\n"
    "                        [--padding-idx V] [--scale-grad-by-freq] [--atomic]\n"
    "                        [--on-bad-id check|clamp|zero|wrap] [--dropout P --seed S]\n"
    "                        [--device SPEC] -o DW.npy\n"
    "\n"
    "Writes the dense table gradient dW (V, D) <f4: dW[v] = scale * sum of G[i] over ids[i] == v.\n"
    "  --ids IDS.npy         <i4 or <i8 ids, (n,) or (batch, seq)\n"
    "  --grad G.npy          <f4 or <f2 gradient of the output, ids.shape + (D,)\n"
    "  --vocab V             rows of the table\n"
    "  --scale               the forward's scale, or sqrt for sqrt(D) (default 1)\n"
    "  --padding-idx V       gets no gradient\n"
    "  --scale-grad-by-freq  divide each id's gradient by its count\n"
    "  --atomic              float atomics instead of the deterministic sorted sum\n"
    "  --on-bad-id           check (default), clamp, zero, wrap\n"
    "  --dropout P, --seed S the forward's dropout and seed\n"
    "  -o, --output          the output file\n";

static const char usage_sgd[] =
    "usage: clembed sgd --table W.npy --ids IDS.npy --grad G.npy --lr LR [--scale S|sqrt]\n"
    "                   [--padding-idx V] [--scale-grad-by-freq] [--on-bad-id check|clamp|zero|wrap]\n"
    "                   [--dropout P --seed S] [--device SPEC] -o W2.npy\n"
    "\n"
    "One fused sparse SGD step: W[v] -= LR * dW[v] for the rows v that occur in the ids;\n"
    "the output has the table file's dtype. Flags as in `clembed backward`.\n";

static const char usage_init[] =
    "usage: clembed init --rows V --dim D (--normal MEAN,STD | --uniform LOW,HIGH) [--seed S]\n"
    "                    [--dtype f32|f16] [--device SPEC] -o W.npy\n"
    "\n"
    "A (V, D) table from the counter-based Philox generator: the same numbers on every device.\n";

static const char usage_demo[] =
    "usage: clembed demo [--device SPEC]\n"
    "\n"
    "The tutorial end to end: token embedding, positional encodings, their sum, the\n"
    "backward step and one SGD step, printed as small matrices.\n";

/* ------------------------------------------------------------- devices */

static int cmd_devices(int argc, char **argv) {
  flag fl[] = {FV("--device")};
  parse_flags(argc, argv, fl, NFLAGS(fl), usage_devices);
  const char *spec = VAL("--device");

  cl_uint np = 0;
  cl_int err = clGetPlatformIDs(0, NULL, &np);
  if (err != CL_SUCCESS || np == 0)
    fail(2, "no OpenCL platform found (on Debian: apt-get install pocl-opencl-icd)");
  cl_platform_id *plats = xmalloc(np * sizeof *plats);
  err = clGetPlatformIDs(np, plats, NULL);
  if (err != CL_SUCCESS) fail(2, "clGetPlatformIDs: %s", clembed_status_string((clembed_status)err));

  /* The device a context with this spec gets. */
  cl_device_id chosen = NULL;
  clembed_context *ctx = NULL;
  clembed_status s = clembed_context_create(spec, &ctx);
  if (s == CLEMBED_OK) {
    R.ctx = ctx;
    clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_DEVICE, sizeof chosen, &chosen, NULL);
  } else if (spec && *spec) {
    fail(2, "--device %s: %s (%s)", spec, clembed_last_error_message(), clembed_status_string(s));
  }

  size_t total = 0;
  for (cl_uint p = 0; p < np; p++) {
    char pname[256] = "", pver[256] = "";
    clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
    clGetPlatformInfo(plats[p], CL_PLATFORM_VERSION, sizeof pver - 1, pver, NULL);
    printf("platform %u: %s (%s)\n", p, pname, pver);
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0) {
      printf("    (no devices)\n");
      continue;
    }
    cl_device_id *devs = xmalloc(nd * sizeof *devs);
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, nd, devs, NULL) != CL_SUCCESS) nd = 0;
    for (cl_uint d = 0; d < nd; d++) {
      char dname[256] = "", dver[256] = "";
      cl_device_type type = 0;
      cl_ulong mem = 0;
      cl_uint cus = 0;
      clGetDeviceInfo(devs[d], CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_VERSION, sizeof dver - 1, dver, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
      const char *tname = (type & CL_DEVICE_TYPE_GPU)           ? "GPU"
                          : (type & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator"
                          : (type & CL_DEVICE_TYPE_CPU)         ? "CPU"
                                                                : "other";
      printf("  %c %u:%u  %s  [%s, %u compute units, %.1f GiB, %s]\n", devs[d] == chosen ? '*' : ' ', p, d,
             dname, tname, cus, (double)mem / (1024.0 * 1024.0 * 1024.0), dver);
      total++;
    }
  }
  if (total == 0) fail(2, "no OpenCL device found (on Debian: apt-get install pocl-opencl-icd)");
  if (chosen)
    printf("* %s: %s\n", spec && *spec ? "--device" : "default", clembed_context_device_name(R.ctx));
  else
    fprintf(stderr, "%s: no default device: %s (%s)\n", g_cmd, clembed_last_error_message(),
            clembed_status_string(s));
  release_all();
  return 0;
}

/* ------------------------------------------------------------ positional */

static int cmd_positional(int argc, char **argv) {
  flag fl[] = {FV("--length"), FV("--dim"),      FV("--first"),  FV("--base"),
               FV("--exponent"), FV("--layout"), FV("--device"), FA("--output", "-o")};
  parse_flags(argc, argv, fl, NFLAGS(fl), usage_positional);
  static const char *const req[] = {"--length", "--dim", "--output", NULL};
  require(fl, NFLAGS(fl), req);
  size_t length = arg_size("--length", VAL("--length"));
  size_t dim = arg_size("--dim", VAL("--dim"));
  size_t first = VAL("--first") ? arg_size("--first", VAL("--first")) : 0;
  clembed_sinusoid s = arg_sinusoid(VAL("--base"), VAL("--exponent"), VAL("--layout"));
  if (dim == 0) fail(1, "--dim: must be at least 1");
  mul3(length, dim, sizeof(float), "--length x --dim");

  open_device(VAL("--device"));
  clembed_matrix *out = zeros(length, dim, CLEMBED_F32);
  if (length) check(clembed_positional(R.ctx, &s, first, out, 0, NULL, NULL));
  float *h = download(out, CLEMBED_F32);
  size_t shape[2] = {length, dim};
  save(VAL("--output"), NPY_F4, 2, shape, h);
  release_all();
  return 0;
}

/* ----------------------------------------------------------------- embed */

static int cmd_embed(int argc, char **argv) {
  flag fl[] = {FV("--table"),    FV("--ids"),         FV("--scale"),     FV("--positions"), FV("--base"),
               FV("--exponent"), FV("--layout"),      FV("--offset"),    FV("--padding-idx"), FV("--on-bad-id"),
               FV("--dtype"),    FV("--dropout"),     FV("--seed"),      FV("--device"),    FA("--output", "-o")};
  parse_flags(argc, argv, fl, NFLAGS(fl), usage_embed);
  static const char *const req[] = {"--table", "--ids", "--output", NULL};
  require(fl, NFLAGS(fl), req);

  const char *pos = VAL("--positions") ? VAL("--positions") : "none";
  clembed_positions positions = !strcmp(pos, "none")       ? CLEMBED_POSITIONS_NONE
                                : !strcmp(pos, "sinusoid") ? CLEMBED_POSITIONS_SINUSOID
                                                           : CLEMBED_POSITIONS_TABLE;
  if (positions != CLEMBED_POSITIONS_SINUSOID) {
    const char *const sin_flags[] = {"--base", "--exponent", "--layout"};
    for (int i = 0; i < 3; i++)
      if (GIVEN(sin_flags[i])) fail(1, "%s needs --positions sinusoid", sin_flags[i]);
  }
  clembed_embed_options o = clembed_embed_defaults();
  o.positions = positions;
  o.sinusoid = arg_sinusoid(VAL("--base"), VAL("--exponent"), VAL("--layout"));
  o.position_offset = VAL("--offset") ? arg_size("--offset", VAL("--offset")) : 0;
  o.policy = arg_policy(VAL("--on-bad-id"));
  o.dropout = arg_dropout(VAL("--dropout"));
  o.dropout_seed = VAL("--seed") ? arg_u64("--seed", VAL("--seed")) : 0;
  static const char *const dtype_names[] = {"f32", "f16", "bf16", NULL};
  int dtype_flag = VAL("--dtype") ? arg_choice("--dtype", VAL("--dtype"), dtype_names) : -1;
  if (VAL("--scale") && strcmp(VAL("--scale"), "sqrt")) arg_float("--scale", VAL("--scale"));

  const char *tpath = VAL("--table"), *ipath = VAL("--ids");
  npy_array *w = load_table("--table", tpath);
  npy_array *ids = load_ids("--ids", ipath);
  size_t rows = w->shape[0], dim = w->shape[1], n = ids->count;
  o.scale = arg_scale(VAL("--scale"), dim);
  o.padding_idx = arg_padding(VAL("--padding-idx"), rows);
  o.seq_len = ids->ndim == 2 ? ids->shape[1] : 0;
  npy_array *pt = NULL;
  char pos_what[1100];
  if (positions == CLEMBED_POSITIONS_TABLE) {
    pt = load_table("--positions", pos);
    if (pt->shape[1] != dim)
      fail(1, "--positions %s: has %zu columns but --table %s has %zu", pos, pt->shape[1], tpath, dim);
    snprintf(pos_what, sizeof pos_what, "--positions %s", pos);
    g_pos_what = pos_what;
  }
  char ids_what[1100];
  snprintf(ids_what, sizeof ids_what, "--ids %s", ipath);
  g_ids_what = ids_what;

  clembed_dtype table_dt = dtype_flag >= 0 ? (clembed_dtype)dtype_flag : host_dtype(w->dtype);
  int f16_out = w->dtype == NPY_F2 && (dtype_flag < 0 || dtype_flag == CLEMBED_F16);
  clembed_dtype out_dt = f16_out ? CLEMBED_F16 : CLEMBED_F32;
  mul3(n, dim, sizeof(float), "the output");

  open_device(VAL("--device"));
  clembed_matrix *table = upload(w->data, host_dtype(w->dtype), rows, dim, table_dt);
  clembed_ids *d_ids = upload_ids(ids);
  clembed_matrix *ptab = NULL;
  if (pt) ptab = upload(pt->data, host_dtype(pt->dtype), pt->shape[0], dim, host_dtype(pt->dtype));
  o.position_table = ptab;
  clembed_matrix *out = zeros(n, dim, out_dt);
  check(clembed_embed(R.ctx, table, d_ids, &o, out, 0, NULL, NULL));
  void *h = download(out, out_dt);

  size_t shape[3] = {ids->shape[0], ids->ndim == 2 ? ids->shape[1] : dim, dim};
  save(VAL("--output"), f16_out ? NPY_F2 : NPY_F4, ids->ndim + 1, shape, h);
  release_all();
  return 0;
}

/* -------------------------------------------------------- backward / sgd */

/* Shared by backward and sgd: the options from the flags. */
static clembed_backward_options backward_flags(flag *fl, size_t nf, size_t rows, size_t dim) {
  clembed_backward_options o = clembed_backward_defaults();
  o.scale = arg_scale(flag_get(fl, nf, "--scale")->value, dim);
  o.padding_idx = arg_padding(flag_get(fl, nf, "--padding-idx")->value, rows);
  o.scale_grad_by_freq = flag_get(fl, nf, "--scale-grad-by-freq")->given;
  o.policy = arg_policy(flag_get(fl, nf, "--on-bad-id")->value);
  o.dropout = arg_dropout(flag_get(fl, nf, "--dropout")->value);
  const char *seed = flag_get(fl, nf, "--seed")->value;
  o.dropout_seed = seed ? arg_u64("--seed", seed) : 0;
  return o;
}

static int cmd_backward(int argc, char **argv) {
  flag fl[] = {FV("--ids"),     FV("--grad"),  FV("--vocab"),  FV("--scale"),  FV("--padding-idx"),
               FS("--scale-grad-by-freq"), FS("--atomic"), FV("--on-bad-id"), FV("--dropout"), FV("--seed"),
               FV("--device"),  FA("--output", "-o")};
  parse_flags(argc, argv, fl, NFLAGS(fl), usage_backward);
  static const char *const req[] = {"--ids", "--grad", "--vocab", "--output", NULL};
  require(fl, NFLAGS(fl), req);
  size_t vocab = arg_size("--vocab", VAL("--vocab"));
  if (VAL("--scale") && strcmp(VAL("--scale"), "sqrt")) arg_float("--scale", VAL("--scale"));
  arg_policy(VAL("--on-bad-id"));
  arg_dropout(VAL("--dropout"));

  const char *ipath = VAL("--ids");
  npy_array *ids = load_ids("--ids", ipath);
  npy_array *g = load_grad(VAL("--grad"), ids, ipath);
  size_t n = ids->count, dim = g->shape[g->ndim - 1];
  clembed_backward_options o = backward_flags(fl, NFLAGS(fl), vocab, dim);
  o.deterministic = !GIVEN("--atomic");
  o.accumulate = 1;
  o.seq_len = ids->ndim == 2 ? ids->shape[1] : 0;
  char ids_what[1100];
  snprintf(ids_what, sizeof ids_what, "--ids %s", ipath);
  g_ids_what = ids_what;
  mul3(vocab, dim, sizeof(float), "--vocab x D");

  open_device(VAL("--device"));
  clembed_matrix *grad = upload(g->data, host_dtype(g->dtype), n, dim, CLEMBED_F32);
  clembed_ids *d_ids = upload_ids(ids);
  clembed_matrix *dw = zeros(vocab, dim, CLEMBED_F32);
  check(clembed_backward(R.ctx, grad, d_ids, &o, dw, 0, NULL, NULL));
  float *h = download(dw, CLEMBED_F32);
  size_t shape[2] = {vocab, dim};
  save(VAL("--output"), NPY_F4, 2, shape, h);
  release_all();
  return 0;
}

static int cmd_sgd(int argc, char **argv) {
  flag fl[] = {FV("--table"),  FV("--ids"),     FV("--grad"),    FV("--lr"),    FV("--scale"),
               FV("--padding-idx"), FS("--scale-grad-by-freq"), FV("--on-bad-id"), FV("--dropout"), FV("--seed"),
               FV("--device"), FA("--output", "-o")};
  parse_flags(argc, argv, fl, NFLAGS(fl), usage_sgd);
  static const char *const req[] = {"--table", "--ids", "--grad", "--lr", "--output", NULL};
  require(fl, NFLAGS(fl), req);
  float lr = arg_float("--lr", VAL("--lr"));
  if (VAL("--scale") && strcmp(VAL("--scale"), "sqrt")) arg_float("--scale", VAL("--scale"));
  arg_policy(VAL("--on-bad-id"));
  arg_dropout(VAL("--dropout"));

  const char *tpath = VAL("--table"), *ipath = VAL("--ids");
  npy_array *w = load_table("--table", tpath);
  npy_array *ids = load_ids("--ids", ipath);
  npy_array *g = load_grad(VAL("--grad"), ids, ipath);
  size_t rows = w->shape[0], dim = w->shape[1], n = ids->count;
  if (g->shape[g->ndim - 1] != dim)
    fail(1, "--grad %s: has %zu columns but --table %s has %zu", VAL("--grad"), g->shape[g->ndim - 1], tpath, dim);
  clembed_backward_options o = backward_flags(fl, NFLAGS(fl), rows, dim);
  o.seq_len = ids->ndim == 2 ? ids->shape[1] : 0;
  char ids_what[1100];
  snprintf(ids_what, sizeof ids_what, "--ids %s", ipath);
  g_ids_what = ids_what;

  open_device(VAL("--device"));
  clembed_dtype dt = host_dtype(w->dtype);
  clembed_matrix *table = upload(w->data, dt, rows, dim, dt);
  clembed_matrix *grad = upload(g->data, host_dtype(g->dtype), n, dim, CLEMBED_F32);
  clembed_ids *d_ids = upload_ids(ids);
  check(clembed_sgd_update(R.ctx, grad, d_ids, lr, &o, table, 0, NULL, NULL));
  void *h = download(table, dt);
  save(VAL("--output"), w->dtype, 2, w->shape, h);
  release_all();
  return 0;
}

/* ------------------------------------------------------------------ init */

static int cmd_init(int argc, char **argv) {
  flag fl[] = {FV("--rows"), FV("--dim"),   FV("--normal"), FV("--uniform"),
               FV("--seed"), FV("--dtype"), FV("--device"), FA("--output", "-o")};
  parse_flags(argc, argv, fl, NFLAGS(fl), usage_init);
  static const char *const req[] = {"--rows", "--dim", "--output", NULL};
  require(fl, NFLAGS(fl), req);
  if (GIVEN("--normal") && GIVEN("--uniform")) fail_usage("--normal and --uniform exclude each other");
  if (!GIVEN("--normal") && !GIVEN("--uniform")) fail_usage("missing --normal MEAN,STD or --uniform LOW,HIGH");
  size_t rows = arg_size("--rows", VAL("--rows")), dim = arg_size("--dim", VAL("--dim"));
  uint64_t seed = VAL("--seed") ? arg_u64("--seed", VAL("--seed")) : 0;
  static const char *const dtype_names[] = {"f32", "f16", NULL};
  int f16 = VAL("--dtype") ? arg_choice("--dtype", VAL("--dtype"), dtype_names) : 0;
  float a, b;
  int normal = GIVEN("--normal");
  if (normal) {
    arg_pair("--normal", VAL("--normal"), "MEAN,STD", &a, &b);
    if (!(b >= 0.0f)) fail(1, "--normal: STD %g is negative", (double)b);
  } else {
    arg_pair("--uniform", VAL("--uniform"), "LOW,HIGH", &a, &b);
    if (!(a <= b)) fail(1, "--uniform: LOW %g is greater than HIGH %g", (double)a, (double)b);
  }
  mul3(rows, dim, sizeof(float), "--rows x --dim");

  open_device(VAL("--device"));
  clembed_dtype dt = f16 ? CLEMBED_F16 : CLEMBED_F32;
  clembed_matrix *m = zeros(rows, dim, dt);
  if (rows && dim) {
    if (normal) check(clembed_matrix_init_normal(R.ctx, m, a, b, seed, 0, NULL, NULL));
    else check(clembed_matrix_init_uniform(R.ctx, m, a, b, seed, 0, NULL, NULL));
  }
  void *h = download(m, dt);
  size_t shape[2] = {rows, dim};
  save(VAL("--output"), f16 ? NPY_F2 : NPY_F4, 2, shape, h);
  release_all();
  return 0;
}

/* ------------------------------------------------------------------ demo */

static void print_matrix(const char *title, const float *m, size_t rows, size_t cols) {
  printf("  %s (%zu x %zu):\n", title, rows, cols);
  for (size_t r = 0; r < rows; r++) {
    printf("    [");
    for (size_t c = 0; c < cols; c++) printf("%s%8.5f", c ? " " : "", (double)m[r * cols + c]);
    printf("]\n");
  }
}

static float *demo_read(const clembed_matrix *m) {
  float *h = download(m, CLEMBED_F32);
  return h;
}

static int cmd_demo(int argc, char **argv) {
  flag fl[] = {FV("--device")};
  parse_flags(argc, argv, fl, NFLAGS(fl), usage_demo);
  g_ids_what = "demo";
  open_device(VAL("--device"));
  printf("clembed %d.%d.%d demo on %s\n\n", CLEMBED_VERSION_MAJOR, CLEMBED_VERSION_MINOR, CLEMBED_VERSION_PATCH,
         clembed_context_device_name(R.ctx));

  /* 1. token embedding */
  enum { V1 = 3, D1 = 10, T1 = 3 };
  float w1[V1 * D1];
  for (int r = 0; r < V1; r++)
    for (int c = 0; c < D1; c++) w1[r * D1 + c] = (float)r;
  const int32_t sentence[T1] = {0, 1, 2};
  printf("1. Token embedding: a vocabulary of %d tokens whose row i is all i, d = %d, the sentence [0, 1, 2]\n",
         V1, D1);
  clembed_matrix *table = upload(w1, CLEMBED_F32, V1, D1, CLEMBED_F32);
  clembed_ids *ids = new_ids();
  check(clembed_ids_create(R.ctx, sentence, T1, CLEMBED_I32, ids));
  clembed_matrix *tok = zeros(T1, D1, CLEMBED_F32);
  check(clembed_lookup(R.ctx, table, ids, tok, 0, NULL, NULL));
  print_matrix("token embedding W[[0, 1, 2]]", demo_read(tok), T1, D1);
  printf("\n");

  /* 2. l_max = 5 as the base, exponent per index */
  enum { L2 = 5 };
  clembed_sinusoid s5 = {5.0, CLEMBED_EXPONENT_INDEX, CLEMBED_LAYOUT_INTERLEAVED};
  printf("2. Positional encoding with l_max = %d as the base and the exponent per index "
         "(sin/cos of p * 5^(-i/d), interleaved), positions 0..%d\n", L2, L2 - 1);
  clembed_matrix *pe5 = zeros(L2, D1, CLEMBED_F32);
  check(clembed_positional(R.ctx, &s5, 0, pe5, 0, NULL, NULL));
  print_matrix("positional table, l_max = 5", demo_read(pe5), L2, D1);
  clembed_embed_options o = clembed_embed_defaults();
  o.positions = CLEMBED_POSITIONS_SINUSOID;
  o.sinusoid = s5;
  clembed_matrix *sum5 = zeros(T1, D1, CLEMBED_F32);
  check(clembed_embed(R.ctx, table, ids, &o, sum5, 0, NULL, NULL));
  print_matrix("token + position (positions 0..2)", demo_read(sum5), T1, D1);
  printf("\n");

  /* 3. the standard formula */
  clembed_sinusoid std = {10000.0, CLEMBED_EXPONENT_PAIR, CLEMBED_LAYOUT_INTERLEAVED};
  printf("3. The standard formula (Vaswani et al.: base 10000, one frequency per sin/cos pair)\n");
  clembed_matrix *pe = zeros(T1, D1, CLEMBED_F32);
  check(clembed_positional(R.ctx, &std, 0, pe, 0, NULL, NULL));
  print_matrix("positional table, positions 0..2", demo_read(pe), T1, D1);
  o.sinusoid = std;
  clembed_matrix *sum = zeros(T1, D1, CLEMBED_F32);
  check(clembed_embed(R.ctx, table, ids, &o, sum, 0, NULL, NULL));
  print_matrix("token + position", demo_read(sum), T1, D1);
  printf("\n");

  /* 4. backward and one SGD step */
  enum { V4 = 5, D4 = 3, B4 = 2, S4 = 2 };
  const int32_t ids4[B4 * S4] = {0, 1, 2, 2};
  const float g4[B4 * S4 * D4] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 1.0f, 1.1f, 1.2f};
  printf("4. Backward: a vocabulary of %d tokens, d = %d, ids [[0, 1], [2, 2]]\n", V4, D4);
  print_matrix("gradient of the output, one row per token", g4, B4 * S4, D4);
  clembed_ids *d_ids4 = new_ids();
  check(clembed_ids_create(R.ctx, ids4, B4 * S4, CLEMBED_I32, d_ids4));
  clembed_matrix *grad = upload(g4, CLEMBED_F32, B4 * S4, D4, CLEMBED_F32);
  clembed_matrix *dw = zeros(V4, D4, CLEMBED_F32);
  clembed_backward_options bo = clembed_backward_defaults();
  bo.seq_len = S4;
  check(clembed_backward(R.ctx, grad, d_ids4, &bo, dw, 0, NULL, NULL));
  float *hdw = demo_read(dw);
  print_matrix("dW", hdw, V4, D4);
  int equal = 1;
  for (int c = 0; c < D4; c++) equal &= hdw[2 * D4 + c] == g4[2 * D4 + c] + g4[3 * D4 + c];
  printf("  dW[2] = [%.5f, %.5f, %.5f] = grad[1][0] + grad[1][1] (token 2 occurs twice): %s\n",
         (double)hdw[2 * D4], (double)hdw[2 * D4 + 1], (double)hdw[2 * D4 + 2], equal ? "yes" : "NO");

  clembed_matrix *w4 = zeros(V4, D4, CLEMBED_F32);
  check(clembed_matrix_init_uniform(R.ctx, w4, -1.0f, 1.0f, 42, 0, NULL, NULL));
  printf("  One SGD step, learning rate 0.1 (rows 3 and 4 do not occur and stay as they are):\n");
  print_matrix("table before (uniform in [-1, 1), seed 42)", demo_read(w4), V4, D4);
  check(clembed_sgd_update(R.ctx, grad, d_ids4, 0.1f, &bo, w4, 0, NULL, NULL));
  print_matrix("table after", demo_read(w4), V4, D4);
  release_all();
  return equal ? 0 : 2;
}

/* ------------------------------------------------------------------ main */

static int cmd_help(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fputs(usage_main, stdout);
  return 0;
}

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
} command;

static const command commands[] = {
    {"devices", cmd_devices}, {"positional", cmd_positional}, {"embed", cmd_embed}, {"backward", cmd_backward},
    {"sgd", cmd_sgd},         {"init", cmd_init},             {"demo", cmd_demo},   {"help", cmd_help},
};

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage_main, stderr);
    return 1;
  }
  const char *sub = argv[1];
  if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) return cmd_help(argc, argv);
  if (!strcmp(sub, "--version") || !strcmp(sub, "version")) {
    unsigned v = clembed_version_number();
    printf("clembed %d.%d.%d (library %u.%u.%u)\n", CLEMBED_VERSION_MAJOR, CLEMBED_VERSION_MINOR,
           CLEMBED_VERSION_PATCH, v / 10000, v / 100 % 100, v % 100);
    return 0;
  }
  if (!strcmp(sub, "bench")) return clembed_bench_main(argc - 1, argv + 1);
  if (!strcmp(sub, "help") && argc > 2) {
    /* clembed help SUBCOMMAND: that subcommand's --help */
    char help[] = "--help";
    char *hargv[] = {argv[2], help, NULL};
    if (!strcmp(argv[2], "bench")) return clembed_bench_main(2, hargv);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
      if (!strcmp(argv[2], commands[i].name)) {
        snprintf(g_cmd, sizeof g_cmd, "clembed %s", commands[i].name);
        return commands[i].run(2, hargv);
      }
    fprintf(stderr, "clembed: unknown subcommand '%s'\nTry 'clembed --help'.\n", argv[2]);
    return 1;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(sub, commands[i].name)) {
      snprintf(g_cmd, sizeof g_cmd, "clembed %s", commands[i].name);
      return commands[i].run(argc - 1, argv + 1);
    }
  fprintf(stderr, "clembed: unknown subcommand '%s'\nTry 'clembed --help'.\n", sub);
  return 1;
}
