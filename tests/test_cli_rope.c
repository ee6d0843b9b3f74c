/* clembed rope-cache and clembed rope end to end (runs the built tool), against
 * reference_rope.h: cos/sin within 1e-6*a, rotations within
 * 2e-6*a*(|x_a| + |x_b|) (+ half an F16 ulp), shapes kept, positions from a
 * file or an offset (per sequence for (B, S, heads, H)), near 2^32, scalings
 * from the flags, and the refusals (exit 1 naming the flag or file, no output
 * file left). Usage: test_cli_rope PATH/TO/clembed [CASE...] (--list names them) */
#include "test_util.h"
#include "reference_rope.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_run.h"

static float elem(const npy_array *a, size_t i) {
  return a->dtype == NPY_F2 ? ref_f16_to_f32(((const uint16_t *)a->data)[i]) : ((const float *)a->data)[i];
}

TU_CASE(cache) {
  /* Llama 3.1's scaling near 2^32 */
  RUNS(0, "rope-cache", "--length", "4", "--head-dim", "128", "--first", "4294967292", "--base", "500000", "--scaling",
       "llama3", "--factor", "8", "--original-max-position", "8192", "-o", P("cs.npy"));
  npy_array a;
  if (!read_npy(P("cs.npy"), &a)) return;
  EXPECT(a.ndim == 2 && a.shape[0] == 4 && a.shape[1] == 128 && a.dtype == NPY_F4, "cache shape");
  clembed_rope r = clembed_rope_defaults();
  r.head_dim = 128;
  r.base = 500000.0;
  r.scaling = CLEMBED_ROPE_SCALING_LLAMA3;
  r.factor = 8.0;
  double w[64], at;
  ref_rope_freq(&r, 128, w, &at);
  double worst = 0.0;
  for (size_t i = 0; i < 4; i++)
    for (size_t k = 0; k < 64; k++) {
      uint64_t p = 4294967292ull + i;
      worst = fmax(worst, fabs(elem(&a, i * 128 + k) - ref_cos_exact(p, w[k])));
      worst = fmax(worst, fabs(elem(&a, i * 128 + 64 + k) - ref_sin_exact(p, w[k])));
    }
  EXPECT(worst <= 1e-6, "rope-cache: error %g", worst);
  free_array(&a);
  /* YaRN's attention factor, partial rotary: (L, R) */
  RUNS(0, "rope-cache", "--length", "3", "--head-dim", "64", "--rotary-dim", "32", "--scaling", "yarn", "--factor",
       "4", "--original-max-position", "4096", "-o", P("cs2.npy"));
  if (!read_npy(P("cs2.npy"), &a)) return;
  EXPECT(a.shape[1] == 32, "partial rotary cache has %zu columns", a.shape[1]);
  double at2 = 0.1 * log(4.0) + 1.0;
  EXPECT(fabs(elem(&a, 0) - at2) <= 1e-6 * at2, "yarn: cos(0) * a = %g, want %g", elem(&a, 0), at2);
  free_array(&a);
}

/* X of `shape` (ndim 2, 3 or 4) through `clembed rope` with extra flags; checked against the reference */
static void rope_case(const char *name, int ndim, const size_t *shape, size_t head_dim, size_t rotary, int gptj,
                      int inverse, const int64_t *pos, size_t offset, int f16_out) {
  size_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  size_t cols = ndim == 2 ? shape[1] : shape[ndim - 2] * shape[ndim - 1];
  size_t rows = n / cols, seq = ndim == 4 ? shape[1] : 0;
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = (float)sin(0.37 * (double)i + 1.0) * (i % 5 ? 1.0f : 30.0f);
  write_npy(P("x.npy"), NPY_F4, ndim, shape, x);
  char hd[32], rd[32], off[32];
  snprintf(hd, sizeof hd, "%zu", head_dim);
  snprintf(rd, sizeof rd, "%zu", rotary);
  snprintf(off, sizeof off, "%zu", offset);
  const char *args[40] = {"rope", "--input", P("x.npy"), "--head-dim", hd, "--rotary-dim", rd, "--layout",
                          gptj ? "gptj" : "neox", "-o", P("y.npy")};
  int na = 11;
  if (inverse) args[na++] = "--inverse";
  if (f16_out) args[na++] = "--out-dtype", args[na++] = "f16";
  if (pos) {
    write_npy(P("pos.npy"), NPY_I8, 1, &rows, pos);
    args[na++] = "--positions", args[na++] = P("pos.npy");
  } else {
    args[na++] = "--offset", args[na++] = off;
  }
  args[na] = NULL;
  int rc = cli(args);
  EXPECT(rc == 0, "%s: exit %d: %s", name, rc, g_err);
  npy_array y;
  if (rc || !read_npy(P("y.npy"), &y)) {
    free(x);
    return;
  }
  EXPECT(y.ndim == ndim && !memcmp(y.shape, shape, (size_t)ndim * sizeof *shape), "%s: shape differs", name);
  EXPECT(y.dtype == (f16_out ? NPY_F2 : NPY_F4), "%s: dtype", name);
  clembed_rope r = clembed_rope_defaults();
  r.head_dim = head_dim;
  r.rotary_dim = rotary;
  double w[256], a;
  ref_rope_freq(&r, rotary, w, &a);
  size_t bad = 0;
  for (size_t i = 0; i < rows; i++) {
    uint64_t p = pos ? (uint64_t)pos[i] : offset + (seq ? i % seq : i);
    for (size_t h = 0; h < cols / head_dim; h++) {
      size_t o = i * cols + h * head_dim;
      for (size_t k = 0; k < rotary / 2; k++) {
        size_t ca, cb;
        ref_rope_columns(gptj ? CLEMBED_ROPE_GPTJ : CLEMBED_ROPE_NEOX, rotary, k, &ca, &cb);
        double ya, yb;
        ref_rope_pair(p, w[k], a, inverse, x[o + ca], x[o + cb], &ya, &yb);
        double bnd = 2e-6 * (fabs(x[o + ca]) + fabs(x[o + cb]));
        double ta = bnd + (f16_out ? ldexp(1.0, ilogb(fabs(ya) + bnd) - 11) : 0.0);
        double tb = bnd + (f16_out ? ldexp(1.0, ilogb(fabs(yb) + bnd) - 11) : 0.0);
        if ((fabs(elem(&y, o + ca) - ya) > ta || fabs(elem(&y, o + cb) - yb) > tb) && bad++ < 4)
          fprintf(stderr, "%s: row %zu head %zu pair %zu: (%g, %g), exact (%g, %g)\n", name, i, h, k,
                  elem(&y, o + ca), elem(&y, o + cb), ya, yb);
      }
      for (size_t c = rotary; c < head_dim; c++)
        if (elem(&y, o + c) != (f16_out ? ref_round(x[o + c], CLEMBED_F16) : x[o + c]) && bad++ < 4)
          fprintf(stderr, "%s: column %zu past R not copied\n", name, c);
    }
  }
  EXPECT(bad == 0, "%s: %zu values off", name, bad);
  free_array(&y);
  free(x);
}

TU_CASE(apply) {
  const size_t s2[2] = {5, 64}, s3[3] = {4, 3, 16}, s4[4] = {2, 3, 2, 32};
  const int64_t pos5[5] = {0, 131075, 2147483649ll, 4294967294ll, 4294967295ll};
  const int64_t pos4[4] = {7, 1048577, 268435461, 4000000000ll};
  rope_case("2-D, positions near 2^32", 2, s2, 32, 32, 0, 0, pos5, 0, 0);
  rope_case("3-D, GPT-J, inverse, partial rotary", 3, s3, 16, 8, 1, 1, pos4, 0, 0);
  rope_case("4-D, offset per sequence", 4, s4, 32, 32, 0, 0, NULL, 4294967293u, 0);
  rope_case("2-D, f16 output", 2, s2, 64, 64, 0, 0, pos5, 0, 1);
}

TU_CASE(refusals) {
  const size_t s2[2] = {2, 8};
  const float x[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  write_npy(P("x2.npy"), NPY_F4, 2, s2, x);
  const size_t two = 2;
  const int64_t badpos[2] = {3, 4294967296ll};
  write_npy(P("badpos.npy"), NPY_I8, 1, &two, badpos);
  unlink(P("z.npy"));
  RUNS(1, "rope", "--input", P("x2.npy"), "--head-dim", "8", "--positions", P("badpos.npy"), "-o", P("z.npy"));
  ERR_HAS("--positions");
  ERR_HAS("4294967296");
  RUNS(1, "rope", "--input", P("x2.npy"), "--head-dim", "8", "--offset", "4294967295", "-o", P("z.npy"));
  ERR_HAS("2^32");
  RUNS(1, "rope", "--input", P("x2.npy"), "--head-dim", "8", "--offset", "1", "--positions", P("badpos.npy"), "-o",
       P("z.npy"));
  RUNS(1, "rope", "--input", P("x2.npy"), "--head-dim", "3", "-o", P("z.npy"));
  RUNS(1, "rope", "--input", P("x2.npy"), "--head-dim", "8", "--scaling", "yarn", "-o", P("z.npy"));
  ERR_HAS("--factor");
  RUNS(1, "rope", "--input", P("x2.npy"), "--head-dim", "8", "--out-dtype", "bf16", "-o", P("z.npy"));
  RUNS(1, "rope-cache", "--length", "5", "--head-dim", "8", "--first", "4294967292", "-o", P("z.npy"));
  ERR_HAS("2^32");
  RUNS(1, "positional", "--length", "2", "--dim", "4", "--first", "4503599627370496", "-o", P("z.npy"));
  ERR_HAS("2^32");
  struct stat st;
  EXPECT(stat(P("z.npy"), &st) != 0, "a refused run left an output file");
  RUNS(0, "rope", "--help");
  RUNS(0, "rope-cache", "--help");
}

/* The tensor "output" of a .safetensors output: its dtype, shape and bytes
 * (malloc'd into *data); 0 when the file is not one such tensor. */
static int read_output_tensor(const char *path, int *dtype, int *ndim, uint64_t *shape, void **data, size_t *bytes) {
  clembed_file *f = NULL;
  clembed_tensor_info t;
  const void *d = NULL;
  size_t i = 0;
  int ok = clembed_file_open(path, &f) == CLEMBED_OK && clembed_file_tensor_count(f) == 1 &&
           clembed_file_find(f, "output", &i) == CLEMBED_OK && clembed_file_tensor_info(f, i, &t) == CLEMBED_OK &&
           clembed_file_tensor_shape(f, i, shape, 8, ndim) == CLEMBED_OK &&
           clembed_file_tensor_data(f, i, &d) == CLEMBED_OK;
  EXPECT(ok, "%s: not a .safetensors file of one tensor \"output\": %s", path, clembed_last_error_message());
  if (ok) {
    *dtype = t.dtype;
    *bytes = (size_t)t.bytes;
    *data = malloc(*bytes ? *bytes : 1);
    if (*bytes) memcpy(*data, d, *bytes);
  }
  clembed_file_close(f);
  return ok;
}

/* rope and rope-cache write -o OUT.safetensors as every subcommand does (one
 * tensor "output", --out-dtype f32, f16 or bf16), and take a bf16 X, whose
 * output defaults to bf16. */
TU_CASE(safetensors_output) {
  enum { T = 3, HEADS = 2, H = 8, N = T * HEADS * H };
  float x[N], xb[N];
  uint16_t x16[N];
  for (int i = 0; i < N; i++) {
    x[i] = (float)((i * 37) % 23) * 0.125f - 1.3f;
    x16[i] = ref_f32_to_bf16(x[i]);
    xb[i] = ref_bf16_to_f32(x16[i]);
  }
  size_t xs[3] = {T, HEADS, H};
  write_npy(P("sx.npy"), NPY_F4, 3, xs, x);
  write_npy(P("sxb.npy"), NPY_F4, 3, xs, xb);
  write_safetensors(P("sx16.safetensors"), "q", "BF16", 3, xs, x16, sizeof x16);
  RUNS(0, "rope", "--input", P("sx.npy"), "--head-dim", "8", "--offset", "5", "-o", P("sa.npy"));
  RUNS(0, "rope", "--input", P("sxb.npy"), "--head-dim", "8", "--offset", "5", "-o", P("sab.npy"));
  npy_array a = {0}, ab = {0};
  if (!read_npy(P("sa.npy"), &a) || !read_npy(P("sab.npy"), &ab) || a.count != N || ab.count != N) {
    free_array(&a);
    free_array(&ab);
    return;
  }
  uint16_t want16[N], want16b[N];
  for (int i = 0; i < N; i++) {
    want16[i] = ref_f32_to_bf16(((float *)a.data)[i]);
    want16b[i] = ref_f32_to_bf16(((float *)ab.data)[i]);
  }
  static const struct {
    const char *input, *out_dtype, *out;
    int dtype;
  } runs[] = {
      {"sx.npy", NULL, "sb.safetensors", CLEMBED_F32},
      {"sx.npy", "bf16", "sc.safetensors", CLEMBED_BF16},
      {"sx16.safetensors", NULL, "sd.safetensors", CLEMBED_BF16},
      {"sx16.safetensors", "f32", "se.safetensors", CLEMBED_F32},
  };
  for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
    if (runs[k].out_dtype)
      RUNS(0, "rope", "--input", P(runs[k].input), "--head-dim", "8", "--offset", "5", "--out-dtype",
           runs[k].out_dtype, "-o", P(runs[k].out));
    else
      RUNS(0, "rope", "--input", P(runs[k].input), "--head-dim", "8", "--offset", "5", "-o", P(runs[k].out));
    int dtype = -1, ndim = 0;
    uint64_t shape[8];
    void *data = NULL;
    size_t bytes = 0;
    if (!read_output_tensor(P(runs[k].out), &dtype, &ndim, shape, &data, &bytes)) continue;
    int from16 = runs[k].input[2] == '1';
    const void *want = runs[k].dtype == CLEMBED_BF16 ? (const void *)(from16 ? want16b : want16)
                                                     : (from16 ? ab.data : a.data);
    size_t want_bytes = runs[k].dtype == CLEMBED_BF16 ? sizeof want16 : N * sizeof(float);
    EXPECT(dtype == runs[k].dtype && ndim == 3 && shape[0] == T && shape[1] == HEADS && shape[2] == H &&
               bytes == want_bytes && !memcmp(data, want, bytes),
           "rope --input %s%s%s -o %s: dtype %d, %d dimensions, %zu bytes, or values differ", runs[k].input,
           runs[k].out_dtype ? " --out-dtype " : "", runs[k].out_dtype ? runs[k].out_dtype : "", runs[k].out, dtype,
           ndim, bytes);
    free(data);
  }
  /* a bf16 X into a .npy: f32 (a .npy has no bfloat16); asked for, it is refused naming .safetensors */
  RUNS(0, "rope", "--input", P("sx16.safetensors"), "--head-dim", "8", "--offset", "5", "-o", P("sf.npy"));
  npy_array f = {0};
  if (read_npy(P("sf.npy"), &f))
    EXPECT(f.dtype == NPY_F4 && f.count == N && !memcmp(f.data, ab.data, N * sizeof(float)),
           "rope of a bf16 X into .npy: not the f32 rotation");
  free_array(&f);
  unlink(P("sg.npy"));
  RUNS(1, "rope", "--input", P("sx.npy"), "--head-dim", "8", "--out-dtype", "bf16", "-o", P("sg.npy"));
  ERR_HAS(".safetensors");
  struct stat st;
  EXPECT(stat(P("sg.npy"), &st) != 0, "a refused run left an output file");
  /* rope-cache into .safetensors: the .npy's values */
  RUNS(0, "rope-cache", "--length", "4", "--head-dim", "8", "-o", P("scs.npy"));
  RUNS(0, "rope-cache", "--length", "4", "--head-dim", "8", "-o", P("scs.safetensors"));
  npy_array c = {0};
  int dtype = -1, ndim = 0;
  uint64_t shape[8];
  void *data = NULL;
  size_t bytes = 0;
  if (read_npy(P("scs.npy"), &c) && read_output_tensor(P("scs.safetensors"), &dtype, &ndim, shape, &data, &bytes))
    EXPECT(dtype == CLEMBED_F32 && ndim == 2 && shape[0] == 4 && shape[1] == 8 && bytes == 4 * 8 * sizeof(float) &&
               !memcmp(data, c.data, bytes),
           "rope-cache -o .safetensors: not the .npy's cache");
  free(data);
  free_array(&c);
  free_array(&a);
  free_array(&ab);
}

/* A temporary directory, and `clembed devices` must find a device. */
static void setup(clembed_context *unused) {
  (void)unused;
  if (!g_exe) {
    fprintf(stderr, "usage: test_cli_rope PATH/TO/clembed [CASE...]\n");
    exit(2);
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/test_cli_rope.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) exit(1);
  if (CLI("devices") != 0) {
    const char *allow = getenv("CLEMBED_ALLOW_NO_DEVICE");
    fprintf(stderr, "clembed devices fails: %s", g_err);
    exit(allow && !strcmp(allow, "1") ? 77 : 1);
  }
}

/* The directory is removed when every case passed, kept otherwise. */
static void teardown(clembed_context *unused) {
  (void)unused;
  if (tu_failures) {
    printf("files kept in %s\n", g_dir);
    return;
  }
  const char *names[] = {"cs.npy", "cs2.npy", "x.npy", "y.npy", "pos.npy", "x2.npy", "badpos.npy", ".stdout", ".stderr",
                         "sx.npy", "sxb.npy", "sx16.safetensors", "sa.npy", "sab.npy", "sb.safetensors",
                         "sc.safetensors", "sd.safetensors", "se.safetensors", "sf.npy", "scs.npy", "scs.safetensors"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) unlink(P(names[i]));
  rmdir(g_dir);
}

int main(int argc, char **argv) {
  /* the tool's path comes first (but --list needs none) */
  if (argc > 1 && strncmp(argv[1], "--", 2) != 0) {
    g_exe = argv[1];
    argv[1] = argv[0];
    argc--;
    argv++;
  }
  return tu_main(argc, argv, (tu_suite){.name = "test_cli_rope", .setup = setup, .teardown = teardown});
}
