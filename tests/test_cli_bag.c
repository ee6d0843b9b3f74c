/* clembed bag end to end (runs the built tool) against a float32 reference of
 * the documented order: sum, mean and max over bags given by offsets (B starts,
 * or B + 1 with --include-last-offset) or by 2-D ids, per-sample weights,
 * padding, an f16 output; and the refusals (exit 1 naming the flag or file, no
 * output file left). Usage: test_cli_bag PATH/TO/clembed [CASE...] */
#include "test_util.h"

#include <ctype.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_run.h"
#include "rowwise_ref.h"

#define V 9
#define D 5

static float W[V * D];

/* The reference: bags [off[b], off[b+1]) of ids, mode 0 sum, 1 mean, 2 max. */
static void ref_bags(const int64_t *ids, const int64_t *off, size_t bags, int mode, const float *w, int64_t pad,
                     float *out) {
  for (size_t b = 0; b < bags; b++)
    for (size_t c = 0; c < D; c++) {
      float acc = 0.0f;
      unsigned cnt = 0;
      for (int64_t j = off[b]; j < off[b + 1]; j++) {
        if (ids[j] == pad) continue;
        float t = W[ids[j] * D + c];
        if (mode == 2)
          acc = cnt == 0 || t > acc ? t : acc;
        else
          acc = w ? fmaf(w[j], t, acc) : acc + t;
        cnt++;
      }
      if (mode == 1 && cnt) acc = acc / (float)cnt;
      out[b * D + c] = acc;
    }
}

static void expect_output(const char *path, const float *want, size_t bags, int f16, const char *what) {
  npy_array a;
  if (!read_npy(path, &a)) return;
  EXPECT(a.ndim == 2 && a.shape[0] == bags && a.shape[1] == D && a.dtype == (f16 ? NPY_F2 : NPY_F4),
         "%s: shape or dtype", what);
  size_t bad = 0;
  for (size_t k = 0; k < bags * D && a.ndim == 2 && a.shape[0] == bags; k++) {
    float g = f16 ? ref_f16_to_f32(((const uint16_t *)a.data)[k]) : ((const float *)a.data)[k];
    bad += memcmp(&g, &(float){f16 ? ref_round(want[k], CLEMBED_F16) : want[k]}, 4) != 0;
  }
  EXPECT(bad == 0, "%s: %zu values differ", what, bad);
  free_array(&a);
}

TU_CASE(modes) {
  size_t vd[2] = {V, D};
  write_npy(P("w.npy"), NPY_F4, 2, vd, W);
  const int64_t ids[10] = {1, 2, 3, 4, 4, 0, 8, 7, 2, 2};
  const int64_t starts[4] = {0, 3, 3, 6}, csr[5] = {0, 3, 3, 6, 10}; /* bag 1 empty */
  size_t n = 10, four = 4, five = 5;
  write_npy(P("ids.npy"), NPY_I8, 1, &n, ids);
  write_npy(P("starts.npy"), NPY_I8, 1, &four, starts);
  write_npy(P("csr.npy"), NPY_I8, 1, &five, csr);
  static const char *modes[3] = {"sum", "mean", "max"};
  float want[5 * D]; /* the most bags of a call below (the 2-D ids) */
  for (int m = 0; m < 3; m++) {
    ref_bags(ids, csr, 4, m, NULL, INT64_MIN, want);
    RUNS(0, "bag", "--table", P("w.npy"), "--ids", P("ids.npy"), "--offsets", P("starts.npy"), "--mode", modes[m],
         "-o", P("out.npy"));
    expect_output(P("out.npy"), want, 4, 0, modes[m]);
    RUNS(0, "bag", "--table", P("w.npy"), "--ids", P("ids.npy"), "--offsets", P("csr.npy"), "--include-last-offset",
         "--mode", modes[m], "--out-dtype", "f16", "-o", P("out.npy"));
    expect_output(P("out.npy"), want, 4, 1, modes[m]);
  }
  /* weights and padding */
  float psw[10];
  for (int j = 0; j < 10; j++) psw[j] = 0.25f * (float)(j - 3);
  write_npy(P("psw.npy"), NPY_F4, 1, &n, psw);
  ref_bags(ids, csr, 4, 0, psw, 2, want);
  RUNS(0, "bag", "--table", P("w.npy"), "--ids", P("ids.npy"), "--offsets", P("starts.npy"), "--mode", "sum",
       "--weights", P("psw.npy"), "--padding-idx", "2", "-o", P("out.npy"));
  expect_output(P("out.npy"), want, 4, 0, "weights and padding");
  /* 2-D ids: bags of one size */
  size_t bl[2] = {5, 2};
  const int64_t fixed[5 * 2] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 8}, foff[6] = {0, 2, 4, 6, 8, 10};
  write_npy(P("ids2.npy"), NPY_I8, 2, bl, fixed);
  ref_bags(fixed, foff, 5, 1, NULL, INT64_MIN, want);
  RUNS(0, "bag", "--table", P("w.npy"), "--ids", P("ids2.npy"), "--mode", "mean", "-o", P("out.npy"));
  expect_output(P("out.npy"), want, 5, 0, "2-D ids");
}

/* --dtype one of FBGEMM's row-wise types: the table quantized as FBGEMM's
 * quantizer (rowwise_ref.h, FBGEMM's code written out), its values pooled in
 * the documented order; a width the type cannot take is refused naming --dtype. */
TU_CASE(rowwise_dtypes) {
  size_t vd[2] = {V, D};
  write_npy(P("w.npy"), NPY_F4, 2, vd, W);
  const int64_t ids[10] = {1, 2, 3, 4, 4, 0, 8, 7, 2, 2}, csr[5] = {0, 3, 3, 6, 10};
  size_t n = 10, five = 5;
  write_npy(P("ids.npy"), NPY_I8, 1, &n, ids);
  write_npy(P("csr.npy"), NPY_I8, 1, &five, csr);
  static const clembed_dtype dts[3] = {CLEMBED_I8_ROWWISE, CLEMBED_I8_TBE, CLEMBED_FP8_ROWWISE};
  float saved[V * D], want[4 * D];
  memcpy(saved, W, sizeof W);
  for (int k = 0; k < 3; k++) {
    uint8_t row[64];
    for (size_t r = 0; r < V; r++) { /* W becomes the quantized table's values */
      rw_ref_quantize(dts[k], saved + r * D, D, row);
      for (size_t c = 0; c < D; c++) W[r * D + c] = rw_ref_value(dts[k], row, D, c);
    }
    for (int m = 0; m < 3; m += 2) {
      ref_bags(ids, csr, 4, m, NULL, INT64_MIN, want);
      RUNS(0, "bag", "--table", P("w.npy"), "--dtype", clembed_dtype_name(dts[k]), "--ids", P("ids.npy"),
           "--offsets", P("csr.npy"), "--include-last-offset", "--mode", m ? "max" : "sum", "-o", P("out.npy"));
      char what[64];
      snprintf(what, sizeof what, "--dtype %s, %s", clembed_dtype_name(dts[k]), m ? "max" : "sum");
      expect_output(P("out.npy"), want, 4, 0, what);
    }
    memcpy(W, saved, sizeof W);
  }
  RUNS(1, "bag", "--table", P("w.npy"), "--dtype", "i4_tbe", "--ids", P("ids.npy"), "--offsets", P("csr.npy"),
       "--include-last-offset", "--mode", "sum", "-o", P("no.npy"));
  EXPECT(strstr(g_err, "--dtype") || strstr(g_err, "i4_tbe"), "an odd width refused for i4_tbe: %s", g_err);
  EXPECT(access(P("no.npy"), F_OK) != 0, "no output left");
}

/* A .npy of bytes (|u1), rows x bytes, as numpy.save writes it. */
static void write_u1(const char *path, size_t rows, size_t bytes, const uint8_t *data) {
  char dict[128];
  int len = snprintf(dict, sizeof dict, "{'descr': '|u1', 'fortran_order': False, 'shape': (%zu, %zu), }", rows, bytes);
  size_t total = (10 + (size_t)len + 1 + 63) / 64 * 64;
  FILE *f = fopen(path, "wb");
  if (!f) return;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)((total - 10) & 0xFF),
                           (unsigned char)((total - 10) >> 8)};
  fwrite(pre, 1, 10, f);
  fwrite(dict, 1, (size_t)len, f);
  for (size_t i = 10 + (size_t)len; i < total - 1; i++) fputc(' ', f);
  fputc('\n', f);
  fwrite(data, 1, rows * bytes, f);
  fclose(f);
}

/* --table of bytes: FBGEMM's rows as stored, with --dtype naming their type */
TU_CASE(rowwise_bytes) {
  const int64_t ids[10] = {1, 2, 3, 4, 4, 0, 8, 7, 2, 2}, csr[5] = {0, 3, 3, 6, 10};
  size_t n = 10, five = 5;
  write_npy(P("ids.npy"), NPY_I8, 1, &n, ids);
  write_npy(P("csr.npy"), NPY_I8, 1, &five, csr);
  static const clembed_dtype dts[2] = {CLEMBED_I8_ROWWISE, CLEMBED_I8_TBE};
  float saved[V * D], want[4 * D];
  memcpy(saved, W, sizeof W);
  for (int k = 0; k < 2; k++) {
    size_t rb = rw_row_bytes(dts[k], D);
    uint8_t rows[V * 64];
    for (size_t r = 0; r < V; r++) { /* W becomes the rows' values */
      rw_ref_quantize(dts[k], saved + r * D, D, rows + r * rb);
      for (size_t c = 0; c < D; c++) W[r * D + c] = rw_ref_value(dts[k], rows + r * rb, D, c);
    }
    write_u1(P("rows.npy"), V, rb, rows);
    ref_bags(ids, csr, 4, 0, NULL, INT64_MIN, want);
    RUNS(0, "bag", "--table", P("rows.npy"), "--dtype", clembed_dtype_name(dts[k]), "--ids", P("ids.npy"),
         "--offsets", P("csr.npy"), "--include-last-offset", "--mode", "sum", "-o", P("out.npy"));
    char what[64];
    snprintf(what, sizeof what, "bytes as %s", clembed_dtype_name(dts[k]));
    expect_output(P("out.npy"), want, 4, 0, what);
    memcpy(W, saved, sizeof W);
  }
  unlink(P("no.npy"));
  RUNS(1, "bag", "--table", P("rows.npy"), "--ids", P("ids.npy"), "--offsets", P("csr.npy"), "--include-last-offset",
       "--mode", "sum", "-o", P("no.npy"));
  ERR_HAS("--dtype");
  EXPECT(access(P("no.npy"), F_OK) != 0, "no output left by bytes without --dtype");
}

/* --remap: a pruned table's ids (FBGEMM's pruned_array); a pruned id adds nothing but
 * counts in mean's length; a damaged entry exits 1 naming the remap file */
TU_CASE(remap) {
  size_t vd[2] = {V, D}, u = 14, n = 10, five = 5;
  write_npy(P("w.npy"), NPY_F4, 2, vd, W);
  const int64_t remap[14] = {3, -1, 0, 8, -1, -1, 1, 2, 7, -1, 4, 5, 6, -1};
  const int64_t ids[10] = {0, 1, 2, 13, 4, 3, 9, 12, 11, 10}, csr[5] = {0, 3, 3, 6, 10};
  write_npy(P("remap.npy"), NPY_I8, 1, &u, remap);
  write_npy(P("rids.npy"), NPY_I8, 1, &n, ids);
  write_npy(P("csr.npy"), NPY_I8, 1, &five, csr);
  for (int m = 0; m < 2; m++) {
    float want[4 * D];
    for (size_t b = 0; b < 4; b++)
      for (size_t c = 0; c < D; c++) {
        float acc = 0.0f;
        for (int64_t j = csr[b]; j < csr[b + 1]; j++)
          if (remap[ids[j]] >= 0) acc = acc + W[remap[ids[j]] * D + c];
        float len = (float)(csr[b + 1] - csr[b]);
        want[b * D + c] = m == 1 && len > 0 ? acc / len : acc;
      }
    RUNS(0, "bag", "--table", P("w.npy"), "--ids", P("rids.npy"), "--offsets", P("csr.npy"), "--include-last-offset",
         "--mode", m ? "mean" : "sum", "--remap", P("remap.npy"), "-o", P("out.npy"));
    expect_output(P("out.npy"), want, 4, 0, m ? "--remap, mean" : "--remap, sum");
  }
  /* an id at len(REMAP), and a damaged entry (9: past the table's 9 rows) */
  const int64_t past[10] = {0, 1, 2, 13, 4, 3, 9, 12, 11, 14};
  write_npy(P("past.npy"), NPY_I8, 1, &n, past);
  unlink(P("z.npy"));
  RUNS(1, "bag", "--table", P("w.npy"), "--ids", P("past.npy"), "--offsets", P("csr.npy"), "--include-last-offset",
       "--mode", "sum", "--remap", P("remap.npy"), "-o", P("z.npy"));
  ERR_HAS("--ids");
  ERR_HAS("14");
  int64_t damaged[14];
  memcpy(damaged, remap, sizeof damaged);
  damaged[12] = 9;
  write_npy(P("damaged.npy"), NPY_I8, 1, &u, damaged);
  RUNS(1, "bag", "--table", P("w.npy"), "--ids", P("rids.npy"), "--offsets", P("csr.npy"), "--include-last-offset",
       "--mode", "sum", "--remap", P("damaged.npy"), "-o", P("z.npy"));
  ERR_HAS("--remap");
  ERR_HAS("remap[12]");
  size_t two[2] = {2, 7};
  write_npy(P("remap2d.npy"), NPY_I8, 2, two, remap);
  RUNS(1, "bag", "--table", P("w.npy"), "--ids", P("rids.npy"), "--offsets", P("csr.npy"), "--include-last-offset",
       "--mode", "sum", "--remap", P("remap2d.npy"), "-o", P("z.npy"));
  ERR_HAS("--remap");
  EXPECT(access(P("z.npy"), F_OK) != 0, "no output left by a refused --remap");
}

TU_CASE(refusals) {
  size_t vd[2] = {V, D}, n = 4, two = 2;
  write_npy(P("w.npy"), NPY_F4, 2, vd, W);
  const int64_t ids[4] = {1, 2, 99, 4}, good[4] = {1, 2, 3, 4}, dec[2] = {0, 3}, back[2] = {2, 1};
  write_npy(P("bad_ids.npy"), NPY_I8, 1, &n, ids);
  write_npy(P("ids.npy"), NPY_I8, 1, &n, good);
  write_npy(P("off.npy"), NPY_I8, 1, &two, dec);
  write_npy(P("back.npy"), NPY_I8, 1, &two, back);
  unlink(P("z.npy"));
  RUNS(1, "bag", "--table", P("w.npy"), "--ids", P("bad_ids.npy"), "--offsets", P("off.npy"), "--mode", "sum", "-o",
       P("z.npy"));
  ERR_HAS("--ids");
  ERR_HAS("99");
  RUNS(1, "bag", "--table", P("w.npy"), "--ids", P("ids.npy"), "--offsets", P("back.npy"), "--mode", "sum", "-o",
       P("z.npy"));
  ERR_HAS("--offsets");
  RUNS(1, "bag", "--table", P("w.npy"), "--ids", P("ids.npy"), "--mode", "sum", "-o", P("z.npy"));
  ERR_HAS("--offsets");
  RUNS(1, "bag", "--table", P("w.npy"), "--ids", P("ids.npy"), "--offsets", P("off.npy"), "-o", P("z.npy"));
  ERR_HAS("--mode");
  RUNS(1, "bag", "--table", P("w.npy"), "--ids", P("ids.npy"), "--offsets", P("off.npy"), "--mode", "median", "-o",
       P("z.npy"));
  ERR_HAS("--mode");
  RUNS(1, "bag", "--table", P("w.npy"), "--ids", P("ids.npy"), "--offsets", P("off.npy"), "--mode", "mean",
       "--weights", P("w.npy"), "-o", P("z.npy"));
  ERR_HAS("--weights");
  RUNS(1, "bag", "--table", P("w.npy"), "--ids", P("ids.npy"), "--include-last-offset", "--mode", "sum", "-o",
       P("z.npy"));
  ERR_HAS("--include-last-offset");
  struct stat st;
  EXPECT(stat(P("z.npy"), &st) != 0, "a refused run left an output file");
  RUNS(0, "bag", "--help");
  EXPECT(strstr(g_out, "--include-last-offset") != NULL, "bag --help: %s", g_out);
}

/* Every table dtype the library names (clembed_dtype_name, its one list) is
 * in `text` as a word of its own, and no other word of the dtype scheme; with
 * rowwise, FBGEMM's row-wise types too (they are no file's tensor type: only
 * --dtype names them). */
static void lists_dtypes(const char *text, const char *what, int rowwise) {
  int named = 0;
  for (int d = 0; d < 256; d++) {
    const char *name = clembed_dtype_name((clembed_dtype)d);
    if (!strcmp(name, "unknown")) continue;
    if (!rowwise && clembed_dtype_block_values((clembed_dtype)d) == 0) continue;
    named++;
    size_t n = strlen(name);
    int found = 0;
    for (const char *p = text; (p = strstr(p, name)) != NULL && !found; p += n)
      found = (p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_')) &&
              !(isalnum((unsigned char)p[n]) || p[n] == '_');
    EXPECT(found, "%s lacks dtype %s: %s", what, name, text);
  }
  EXPECT(named >= 22, "the library names %d dtypes", named);
}

/* --help and the refusal of a table of another type list the same dtypes,
 * the library's; --weights takes the float types, and its refusal names only
 * those. */
TU_CASE(dtype_lists) {
  RUNS(0, "bag", "--help");
  lists_dtypes(g_out, "bag --help", 0);
  size_t n = 4, two = 2;
  const int32_t i4[4] = {0, 1, 2, 3};
  const int64_t off[2] = {0, 2};
  write_npy(P("ids4.npy"), NPY_I4, 1, &n, i4);
  write_npy(P("off2.npy"), NPY_I8, 1, &two, off);
  RUNS(1, "bag", "--table", P("ids4.npy"), "--ids", P("ids4.npy"), "--offsets", P("off2.npy"), "--mode", "sum", "-o",
       P("z.npy"));
  ERR_HAS("--table takes ");
  lists_dtypes(strstr(g_err, "--table takes "), "bag's refusal of an i32 --table", 0);
  size_t wshape[2] = {V, D};
  write_npy(P("wt.npy"), NPY_F4, 2, wshape, W);
  RUNS(1, "bag", "--table", P("wt.npy"), "--ids", P("ids4.npy"), "--offsets", P("off2.npy"), "--mode", "sum",
       "--weights", P("ids4.npy"), "-o", P("z.npy"));
  ERR_HAS("the array is i32; --weights takes f32, f16, bf16");
  EXPECT(strstr(g_err, "i64") == NULL, "--weights' refusal offers ids: %s", g_err);
  RUNS(0, "embed", "--help");
  lists_dtypes(g_out, "embed --help", 1); /* its --dtype names the row-wise types */
  RUNS(0, "inspect", "--help");
  lists_dtypes(g_out, "inspect --help", 0);
  /* --dtype's refusal names what it takes: the float types, Q8_0, Q4_0 and every row-wise type */
  RUNS(1, "bag", "--table", P("wt.npy"), "--ids", P("ids4.npy"), "--offsets", P("off2.npy"), "--mode", "sum",
       "--dtype", "q4_k", "-o", P("z.npy"));
  ERR_HAS("--dtype: 'q4_k' is not one of f32, f16, bf16, q8_0, q4_0, i8_rowwise, i4_rowwise, i2_rowwise, i8_tbe, "
          "i4_tbe, i2_tbe, fp8_rowwise");
}

static void setup(clembed_context *unused) {
  (void)unused;
  if (!g_exe) {
    fprintf(stderr, "usage: test_cli_bag PATH/TO/clembed [CASE...]\n");
    exit(2);
  }
  for (int k = 0; k < V * D; k++) W[k] = (float)sin(0.7 * k + 0.3) * (float)(1 + k % 3);
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/test_cli_bag.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) exit(1);
  if (CLI("devices") != 0) {
    const char *allow = getenv("CLEMBED_ALLOW_NO_DEVICE");
    fprintf(stderr, "clembed devices fails: %s", g_err);
    exit(allow && !strcmp(allow, "1") ? 77 : 1);
  }
}

static void teardown(clembed_context *unused) {
  (void)unused;
  if (tu_failures) {
    printf("files kept in %s\n", g_dir);
    return;
  }
  const char *names[] = {"w.npy",       "ids.npy", "starts.npy", "csr.npy", "out.npy",  "psw.npy", "ids2.npy",
                         "bad_ids.npy", "off.npy", "back.npy",   ".stdout", ".stderr"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) unlink(P(names[i]));
  rmdir(g_dir);
}

int main(int argc, char **argv) {
  if (argc > 1 && strncmp(argv[1], "--", 2) != 0) {
    g_exe = argv[1];
    argv[1] = argv[0];
    argc--;
    argv++;
  }
  return tu_main(argc, argv, (tu_suite){.name = "test_cli_bag", .setup = setup, .teardown = teardown});
}
