/* The command-line tool, end to end: writes .npy inputs into a temporary
 * directory, runs the `clembed` binary (argv[1]) and checks its outputs against
 * plain C references, its exit codes (0, 1, 2) and messages, and that a failed
 * run leaves no output file and never damages an existing one.
 *
 * Skips (exit 77) when `clembed devices` finds no device and
 * CLEMBED_ALLOW_NO_DEVICE=1. */
#define _POSIX_C_SOURCE 200809L
#include "clembed.h"
#include "test_util.h"

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <errno.h>
#include <signal.h>
#include <time.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_run.h"
#include "clembed_io.h"

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static long file_bytes(const char *path, unsigned char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t n = fread(buf, 1, cap, f);
  fclose(f);
  return (long)n;
}

static int same_file(const char *a, const char *b) {
  static unsigned char x[1 << 16], y[1 << 16];
  long na = file_bytes(a, x, sizeof x), nb = file_bytes(b, y, sizeof y);
  return na >= 0 && na == nb && !memcmp(x, y, (size_t)na);
}

/* Temporary files left in the directory by a failed write. */
static int leftover_temps(void) {
  DIR *d = opendir(g_dir);
  int n = 0;
  struct dirent *e;
  if (!d) return 0;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".tmp.")) n++;
  closedir(d);
  return n;
}

/* ------------------------------------------------------------ references */

static uint16_t h16(float f) { return ref_f32_to_f16(f); }

/* A table of V x D floats with a few special values (-0, inf, a subnormal). */
/* The exact sinusoid (reference.h) for a base, exponent and layout. */
static double sin_ref(double base, clembed_exponent e, clembed_layout l, size_t d, size_t p, size_t i) {
  clembed_sinusoid s = {sizeof(clembed_sinusoid), base, e, l};
  return ref_sinusoid(&s, d, (uint64_t)p, i);
}

static void fill_table(float *w, size_t v, size_t d, uint64_t seed) {
  uint64_t st = seed;
  for (size_t i = 0; i < v * d; i++) w[i] = tu_rand(&st) * 3.0f;
  if (v * d > 4) {
    w[1] = -0.0f;
    w[2] = INFINITY;
    w[3] = 1.0e-40f;
    w[4] = -65504.0f;
  }
}

static int64_t id_at(const npy_array *ids, size_t i) {
  return ids->dtype == NPY_I8 ? ((const int64_t *)ids->data)[i] : ((const int32_t *)ids->data)[i];
}

/* ------------------------------------------------------------------ tests */

TU_CASE(help_names_every_subcommand) {
  static const char *const subs[] = {"devices", "positional", "embed", "backward", "sgd",
                                     "init",    "bench",      "demo"};
  RUNS(0, "--help");
  EXPECT(strstr(g_out, "embed") && strstr(g_out, "backward") && strstr(g_out, "demo"), "top help: %s", g_out);
  RUNS(0, "help");
  EXPECT(strstr(g_out, "positional") != NULL, "help: %s", g_out);
  RUNS(0, "--version");
  char version[32];
  snprintf(version, sizeof version, "%d.%d.%d", CLEMBED_VERSION_MAJOR, CLEMBED_VERSION_MINOR, CLEMBED_VERSION_PATCH);
  EXPECT(strstr(g_out, version) != NULL, "version: %s (the header's %s)", g_out, version);
  RUNS(1, "x");
  ERR_HAS("unknown subcommand 'x'");
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
    int r = CLI(subs[i], "--help");
    EXPECT(r == 0, "%s --help exits %d: %s", subs[i], r, g_err);
    EXPECT(strlen(g_out) > 0, "%s --help printed nothing", subs[i]);
  }
}

/* embed equals W[ids] bit for bit: every table dtype, index type and rank. */
/* The inputs of embed_exact, which the error cases read too: a 37 x 13 table
 * with special values (w32.npy, w16.npy) and 60 ids (i32_1d.npy, i64_1d.npy,
 * and as 6 x 10 i32_2d.npy, i64_2d.npy). */
enum { EX_V = 37, EX_D = 13, EX_N = 60 };

static void exact_inputs(float *w, uint16_t *w16, int32_t *i32, int64_t *i64) {
  enum { V = EX_V, D = EX_D, N = EX_N };
  fill_table(w, V, D, 1);
  for (size_t i = 0; i < V * D; i++) w16[i] = h16(w[i]);
  size_t ts[2] = {V, D};
  write_npy(P("w32.npy"), NPY_F4, 2, ts, w);
  write_npy(P("w16.npy"), NPY_F2, 2, ts, w16);
  uint64_t st = 7;
  for (int i = 0; i < N; i++) {
    i32[i] = (int32_t)((tu_rand(&st) + 1.0f) * 0.5f * V) % V;
    i64[i] = i32[i];
  }
  i32[5] = i32[6] = 0;
  i32[7] = V - 1;
  i64[5] = i64[6] = 0;
  i64[7] = V - 1;
  size_t s1[1] = {N}, s2[2] = {6, 10};
  write_npy(P("i32_1d.npy"), NPY_I4, 1, s1, i32);
  write_npy(P("i64_1d.npy"), NPY_I8, 1, s1, i64);
  write_npy(P("i32_2d.npy"), NPY_I4, 2, s2, i32);
  write_npy(P("i64_2d.npy"), NPY_I8, 2, s2, i64);
}

TU_CASE(embed_exact) {
  enum { V = EX_V, D = EX_D, N = EX_N };
  static float w[V * D];
  static uint16_t w16[V * D];
  int32_t i32[N];
  int64_t i64[N];
  exact_inputs(w, w16, i32, i64);
  static const char *const ids_files[] = {"i32_1d.npy", "i64_1d.npy", "i32_2d.npy", "i64_2d.npy"};
  for (int f16 = 0; f16 < 2; f16++)
    for (int k = 0; k < 4; k++) {
      const char *table = P(f16 ? "w16.npy" : "w32.npy");
      RUNS(0, "embed", "--table", table, "--ids", P(ids_files[k]), "-o", P("e.npy"));
      npy_array a = {0}, ids = {0};
      if (!read_npy(P("e.npy"), &a) || !read_npy(P(ids_files[k]), &ids)) continue;
      int two = k >= 2;
      EXPECT(a.dtype == (f16 ? NPY_F2 : NPY_F4), "%s %s: dtype %s", table, ids_files[k], npy_dtype_name(a.dtype));
      EXPECT(a.ndim == (two ? 3 : 2) && a.shape[0] == (two ? 6u : (size_t)N) &&
                 a.shape[a.ndim - 1] == D && (!two || a.shape[1] == 10),
             "%s: shape", ids_files[k]);
      int bad = 0;
      if (a.count == (size_t)N * D)
        for (size_t i = 0; i < N && !bad; i++) {
          size_t r = (size_t)id_at(&ids, i);
          bad = f16 ? memcmp((uint16_t *)a.data + i * D, w16 + r * D, D * 2)
                    : memcmp((float *)a.data + i * D, w + r * D, D * 4);
        }
      EXPECT(!bad && a.count == (size_t)N * D, "embed %s %s differs from W[ids]", f16 ? "f16" : "f32",
             ids_files[k]);
      free_array(&a);
      free_array(&ids);
    }
  /* an f16 table computed in f32: <f4 output equal to float(W[ids]) */
  RUNS(0, "embed", "--table", P("w16.npy"), "--ids", P("i32_1d.npy"), "--dtype", "f32", "-o", P("e.npy"));
  npy_array a = {0};
  if (read_npy(P("e.npy"), &a)) {
    int bad = a.dtype != NPY_F4 || a.count != (size_t)N * D;
    for (size_t i = 0; i < N && !bad; i++)
      for (size_t c = 0; c < D && !bad; c++) {
        float want = ref_f16_to_f32(w16[(size_t)i32[i] * D + c]), got = ((float *)a.data)[i * D + c];
        bad = memcmp(&want, &got, 4) != 0;
      }
    EXPECT(!bad, "embed --dtype f32 of an f16 table differs from float(W[ids])");
    free_array(&a);
  }
  /* 0 ids: shape (0, D) */
  size_t s0[1] = {0};
  write_npy(P("i_empty.npy"), NPY_I4, 1, s0, NULL);
  RUNS(0, "embed", "--table", P("w32.npy"), "--ids", P("i_empty.npy"), "-o", P("e0.npy"));
  if (read_npy(P("e0.npy"), &a)) {
    EXPECT(a.ndim == 2 && a.shape[0] == 0 && a.shape[1] == D, "0 ids: shape");
    free_array(&a);
  }
}

TU_CASE(positional) {
  RUNS(0, "positional", "--length", "5", "--dim", "10", "--base", "5", "--exponent", "index", "-o", P("pe.npy"));
  npy_array a = {0};
  if (read_npy(P("pe.npy"), &a)) {
    EXPECT(a.dtype == NPY_F4 && a.ndim == 2 && a.shape[0] == 5 && a.shape[1] == 10, "positional shape");
    if (a.count == 50) {
      const float *pe = a.data;
      EXPECT(fabs(pe[10] - 0.84147) < 1e-5 && fabs(pe[11] - 0.65898) < 1e-5 && fabs(pe[12] - 0.66297) < 1e-5,
             "row 1 begins %.5f %.5f %.5f", (double)pe[10], (double)pe[11], (double)pe[12]);
      double worst = 0;
      for (size_t p = 0; p < 5; p++)
        for (size_t i = 0; i < 10; i++) worst = fmax(worst, fabs(pe[p * 10 + i] - sin_ref(5.0, CLEMBED_EXPONENT_INDEX, CLEMBED_LAYOUT_INTERLEAVED, 10, (int64_t)p, i)));
      EXPECT(worst <= 1e-6, "positional base 5 index: worst error %g", worst);
    }
    free_array(&a);
  }
  /* the standard table far out, and halves */
  static const char *const layouts[] = {"interleaved", "halves"};
  for (int h = 0; h < 2; h++) {
    RUNS(0, "positional", "--length", "4", "--dim", "15", "--first", "100000", "--layout", layouts[h], "-o",
         P("pe2.npy"));
    if (read_npy(P("pe2.npy"), &a)) {
      double worst = 0;
      if (a.count == 60)
        for (size_t p = 0; p < 4; p++)
          for (size_t i = 0; i < 15; i++)
            worst = fmax(worst, fabs(((float *)a.data)[p * 15 + i] - sin_ref(10000.0, CLEMBED_EXPONENT_PAIR, h ? CLEMBED_LAYOUT_HALVES : CLEMBED_LAYOUT_INTERLEAVED, 15,
                                                     (int64_t)(100000 + p), i)));
      EXPECT(a.count == 60 && worst <= 1e-6, "positional --first 100000 %s: worst error %g", layouts[h], worst);
      free_array(&a);
    }
  }
}

/* embed --scale sqrt --positions sinusoid --offset, and a learned position table. */
/* The inputs of embed_with_positions, which embed_options reads too: an
 * 11 x 8 table (wp.npy), 2 sequences of 5 ids (ip.npy), a 12-row position
 * table (pt.npy). */
enum { PS_V = 11, PS_D = 8, PS_B = 2, PS_S = 5, PS_L = 12 };

static void positions_inputs(float *w, float *pt, int32_t *ids) {
  enum { V = PS_V, D = PS_D, B = PS_B, S = PS_S, L = PS_L };
  uint64_t st = 3;
  for (int i = 0; i < V * D; i++) w[i] = tu_rand(&st);
  for (int i = 0; i < L * D; i++) pt[i] = tu_rand(&st);
  const int32_t ids0[B * S] = {1, 4, 4, 10, 0, 3, 3, 9, 2, 7};
  memcpy(ids, ids0, sizeof ids0);
  size_t ts[2] = {V, D}, is[2] = {B, S}, ps[2] = {L, D};
  write_npy(P("wp.npy"), NPY_F4, 2, ts, w);
  write_npy(P("ip.npy"), NPY_I4, 2, is, ids);
  write_npy(P("pt.npy"), NPY_F4, 2, ps, pt);
}

TU_CASE(embed_with_positions) {
  enum { V = PS_V, D = PS_D, B = PS_B, S = PS_S, OFF = 7, L = PS_L };
  float w[V * D], pt[L * D];
  int32_t ids[B * S];
  positions_inputs(w, pt, ids);
  RUNS(0, "embed", "--table", P("wp.npy"), "--ids", P("ip.npy"), "--scale", "sqrt", "--positions", "sinusoid",
       "--offset", "7", "-o", P("ep.npy"));
  npy_array a = {0};
  if (read_npy(P("ep.npy"), &a)) {
    double worst = 0;
    float scale = sqrtf((float)D);
    if (a.count == B * S * D)
      for (int i = 0; i < B * S; i++)
        for (int c = 0; c < D; c++) {
          double want = (double)(scale * w[ids[i] * D + c]) + sin_ref(10000.0, CLEMBED_EXPONENT_PAIR, CLEMBED_LAYOUT_INTERLEAVED, D,
                                                                         (int64_t)(OFF + i % S), (size_t)c);
          worst = fmax(worst, fabs(((float *)a.data)[i * D + c] - want));
        }
    EXPECT(a.ndim == 3 && a.count == B * S * D && worst <= 4e-6, "embed sqrt + sinusoid: worst error %g", worst);
    free_array(&a);
  }
  RUNS(0, "embed", "--table", P("wp.npy"), "--ids", P("ip.npy"), "--positions", P("pt.npy"), "--offset", "3",
       "-o", P("ep.npy"));
  if (read_npy(P("ep.npy"), &a)) {
    int bad = a.count != B * S * D;
    for (int i = 0; i < B * S && !bad; i++)
      for (int c = 0; c < D && !bad; c++)
        bad = ((float *)a.data)[i * D + c] != w[ids[i] * D + c] + pt[(3 + i % S) * D + c];
    EXPECT(!bad, "embed with a learned position table differs from W[ids] + P[3 + s]");
    free_array(&a);
  }
  /* positions 10..14 of a 12-row table: exit 1 naming the position file */
  RUNS(1, "embed", "--table", P("wp.npy"), "--ids", P("ip.npy"), "--positions", P("pt.npy"), "--offset", "10",
       "-o", P("ep_bad.npy"));
  ERR_HAS("--positions");
  EXPECT(!exists(P("ep_bad.npy")), "output written after a bad position");
}

/* Dropout (forward and backward agree on the mask), padding, wrap, bf16, huge ids. */
TU_CASE(embed_options) {
  enum { V = PS_V, D = PS_D, N = PS_B * PS_S };
  float w[V * D], pt[PS_L * D];
  int32_t ids[N];
  positions_inputs(w, pt, ids);
  uint64_t st = 3;
  for (int i = 0; i < V * D; i++) (void)tu_rand(&st); /* the generator past wp.npy's values */
  const float keep = ref_dropout_scale(0.25f);
  npy_array a = {0};
  RUNS(0, "embed", "--table", P("wp.npy"), "--ids", P("ip.npy"), "--dropout", "0.25", "--seed", "9", "-o",
       P("ed.npy"));
  if (read_npy(P("ed.npy"), &a)) {
    int bad = a.count != N * D, dropped = 0;
    for (int i = 0; i < N && !bad; i++)
      for (int c = 0; c < D && !bad; c++) {
        float got = ((float *)a.data)[i * D + c];
        if (!ref_dropout_kept(9, (uint64_t)(i * D + c), 0.25f)) bad = got != 0.0f, dropped++;
        else bad = fabs(got - w[ids[i] * D + c] * keep) > 1e-6;
      }
    EXPECT(!bad && dropped > 0, "embed --dropout 0.25 --seed 9 differs from the Philox mask");
    free_array(&a);
  }
  /* the backward with the same dropout applies the same mask */
  float g[N * D], ref[V * D] = {0};
  for (int i = 0; i < N * D; i++) g[i] = tu_rand(&st);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < D; c++) {
      if (ref_dropout_kept(9, (uint64_t)(i * D + c), 0.25f)) ref[ids[i] * D + c] += g[i * D + c] * keep;
    }
  size_t gs[3] = {2, 5, D};
  write_npy(P("gd.npy"), NPY_F4, 3, gs, g);
  RUNS(0, "backward", "--ids", P("ip.npy"), "--grad", P("gd.npy"), "--vocab", "11", "--dropout", "0.25", "--seed",
       "9", "-o", P("dwd.npy"));
  if (read_npy(P("dwd.npy"), &a)) {
    double worst = 0;
    for (int i = 0; i < V * D && a.count == V * D; i++) worst = fmax(worst, fabs(((float *)a.data)[i] - ref[i]));
    EXPECT(a.count == V * D && worst <= 1e-5, "backward --dropout: worst error %g", worst);
    free_array(&a);
  }
  /* --padding-idx -1 is the last row (10, token 3); bf16 rounds the table */
  RUNS(0, "embed", "--table", P("wp.npy"), "--ids", P("ip.npy"), "--padding-idx", "-1", "--dtype", "bf16", "-o",
       P("eb.npy"));
  if (read_npy(P("eb.npy"), &a)) {
    int bad = a.dtype != NPY_F4 || a.count != N * D;
    for (int i = 0; i < N && !bad; i++)
      for (int c = 0; c < D && !bad; c++) {
        float want = ids[i] == V - 1 ? 0.0f : ref_round(w[ids[i] * D + c], CLEMBED_BF16);
        bad = ((float *)a.data)[i * D + c] != want;
      }
    EXPECT(!bad, "embed --padding-idx -1 --dtype bf16 differs");
    free_array(&a);
  }
  /* wrap: -1 is the last row */
  int64_t wi[3] = {-1, -11, 2};
  size_t ws[1] = {3};
  write_npy(P("iw.npy"), NPY_I8, 1, ws, wi);
  RUNS(0, "embed", "--table", P("wp.npy"), "--ids", P("iw.npy"), "--on-bad-id", "wrap", "-o", P("ew.npy"));
  if (read_npy(P("ew.npy"), &a)) {
    EXPECT(a.count == 3 * D && !memcmp(a.data, w + (V - 1) * D, D * 4) &&
               !memcmp((float *)a.data + D, w, D * 4) && !memcmp((float *)a.data + 2 * D, w + 2 * D, D * 4),
           "embed --on-bad-id wrap");
    free_array(&a);
  }
  /* an <i8 id beyond int32 */
  wi[1] = (int64_t)1 << 40;
  write_npy(P("ih.npy"), NPY_I8, 1, ws, wi);
  RUNS(1, "embed", "--table", P("wp.npy"), "--ids", P("ih.npy"), "--on-bad-id", "wrap", "-o", P("eh.npy"));
  ERR_HAS("ids[1] = 1099511627776");
  EXPECT(!exists(P("eh.npy")), "output written after a bad id");
}

TU_CASE(backward) {
  enum { V = 17, D = 6, N = 300 };
  static float g[N * D], ref[V * D];
  int32_t ids[N];
  uint64_t st = 11;
  for (int i = 0; i < N; i++) ids[i] = (int32_t)((tu_rand(&st) + 1.0f) * 0.5f * 12) % 12; /* rows 12.. unused */
  for (int i = 0; i < N; i += 3) ids[i] = 5;                                                 /* a hot row */
  for (int i = 0; i < N * D; i++) g[i] = tu_rand(&st);
  int64_t ids64[N];
  for (int i = 0; i < N; i++) ids64[i] = ids[i];
  clembed_backward_options bo = clembed_backward_defaults();
  bo.accumulate = 0;
  ref_backward(g, ids64, N, D, V, &bo, ref);
  size_t is[1] = {N}, gs[2] = {N, D}, is2[2] = {15, 20}, gs3[3] = {15, 20, D};
  write_npy(P("bi.npy"), NPY_I4, 1, is, ids);
  write_npy(P("bg.npy"), NPY_F4, 2, gs, g);
  write_npy(P("bi2.npy"), NPY_I4, 2, is2, ids);
  write_npy(P("bg3.npy"), NPY_F4, 3, gs3, g);
  RUNS(0, "backward", "--ids", P("bi.npy"), "--grad", P("bg.npy"), "--vocab", "17", "-o", P("dw1.npy"));
  RUNS(0, "backward", "--ids", P("bi.npy"), "--grad", P("bg.npy"), "--vocab", "17", "-o", P("dw2.npy"));
  EXPECT(same_file(P("dw1.npy"), P("dw2.npy")), "two backward runs differ");
  npy_array a = {0};
  if (read_npy(P("dw1.npy"), &a)) {
    EXPECT(a.dtype == NPY_F4 && a.ndim == 2 && a.shape[0] == V && a.shape[1] == D, "backward shape");
    EXPECT(a.count == V * D && !memcmp(a.data, ref, sizeof ref),
           "backward differs from the sequential float32 sum in token order");
    free_array(&a);
  }
  RUNS(0, "backward", "--ids", P("bi2.npy"), "--grad", P("bg3.npy"), "--vocab", "17", "-o", P("dw3.npy"));
  EXPECT(same_file(P("dw1.npy"), P("dw3.npy")), "backward with 2-D ids differs from 1-D");
  RUNS(0, "backward", "--ids", P("bi.npy"), "--grad", P("bg.npy"), "--vocab", "17", "--atomic", "-o",
       P("dw4.npy"));
  if (read_npy(P("dw4.npy"), &a)) {
    double worst = 0;
    for (int i = 0; i < V * D && a.count == V * D; i++) worst = fmax(worst, fabs(((float *)a.data)[i] - ref[i]));
    EXPECT(a.count == V * D && worst <= 1e-4, "backward --atomic: worst error %g", worst);
    free_array(&a);
  }
  /* scale, padding, frequency scaling */
  RUNS(0, "backward", "--ids", P("bi.npy"), "--grad", P("bg.npy"), "--vocab", "17", "--scale", "0.5",
       "--padding-idx", "3", "--scale-grad-by-freq", "-o", P("dw5.npy"));
  if (read_npy(P("dw5.npy"), &a)) {
    int count[V] = {0};
    double worst = 0;
    for (int i = 0; i < N; i++) count[ids[i]]++;
    for (int v = 0; v < V && a.count == V * D; v++)
      for (int c = 0; c < D; c++) {
        double want = v == 3 || !count[v] ? 0.0 : 0.5 * ref[v * D + c] / count[v];
        worst = fmax(worst, fabs(((float *)a.data)[v * D + c] - want));
      }
    EXPECT(a.count == V * D && worst <= 1e-6, "backward --scale 0.5 --padding-idx 3 --scale-grad-by-freq: %g",
           worst);
    free_array(&a);
  }
  /* a gradient whose shape does not match the ids */
  RUNS(1, "backward", "--ids", P("bi2.npy"), "--grad", P("bg.npy"), "--vocab", "17", "-o", P("dw_bad.npy"));
  ERR_HAS("(300, 6)");
  ERR_HAS("(15, 20, D)");
  EXPECT(!exists(P("dw_bad.npy")), "output written after a bad gradient");
  /* a bad id */
  RUNS(1, "backward", "--ids", P("bi.npy"), "--grad", P("bg.npy"), "--vocab", "10", "-o", P("dw_bad.npy"));
  ERR_HAS("ids[");
  EXPECT(!exists(P("dw_bad.npy")), "output written after a bad id");
}

TU_CASE(sgd) {
  enum { V = 23, D = 5, N = 40 };
  static float w[V * D], g[N * D], dw[V * D];
  static uint16_t w16[V * D];
  int32_t ids[N];
  int occurs[V] = {0};
  uint64_t st = 19;
  for (int i = 0; i < V * D; i++) {
    w[i] = tu_rand(&st);
    w16[i] = h16(w[i]);
  }
  for (int i = 0; i < N; i++) {
    ids[i] = 2 * ((int32_t)((tu_rand(&st) + 1.0f) * 0.5f * 6) % 6); /* even rows below 12 */
    occurs[ids[i]] = 1;
  }
  for (int i = 0; i < N * D; i++) g[i] = tu_rand(&st);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < D; c++) dw[ids[i] * D + c] += g[i * D + c];
  size_t ts[2] = {V, D}, is[1] = {N}, gs[2] = {N, D};
  write_npy(P("sw.npy"), NPY_F4, 2, ts, w);
  write_npy(P("sw16.npy"), NPY_F2, 2, ts, w16);
  write_npy(P("si.npy"), NPY_I4, 1, is, ids);
  write_npy(P("sg.npy"), NPY_F4, 2, gs, g);
  for (int f16 = 0; f16 < 2; f16++) {
    RUNS(0, "sgd", "--table", P(f16 ? "sw16.npy" : "sw.npy"), "--ids", P("si.npy"), "--grad", P("sg.npy"), "--lr",
         "0.05", "-o", P("sw2.npy"));
    npy_array a = {0};
    if (!read_npy(P("sw2.npy"), &a)) continue;
    EXPECT(a.dtype == (f16 ? NPY_F2 : NPY_F4) && a.ndim == 2 && a.shape[0] == V && a.shape[1] == D,
           "sgd output dtype or shape");
    int untouched_ok = 1;
    double worst = 0;
    for (int v = 0; v < V && a.count == V * D; v++)
      for (int c = 0; c < D; c++) {
        float got = f16 ? ref_f16_to_f32(((uint16_t *)a.data)[v * D + c]) : ((float *)a.data)[v * D + c];
        float before = f16 ? ref_f16_to_f32(w16[v * D + c]) : w[v * D + c];
        if (!occurs[v]) untouched_ok &= memcmp(&got, &before, 4) == 0;
        else worst = fmax(worst, fabs(got - ((double)before - 0.05 * dw[v * D + c])));
      }
    EXPECT(untouched_ok, "sgd (%s) changed rows that do not occur", f16 ? "f16" : "f32");
    EXPECT(worst <= (f16 ? 1e-3 : 1e-5), "sgd (%s): worst error %g", f16 ? "f16" : "f32", worst);
    free_array(&a);
  }
}

/* A table split over several buffers (CLEMBED_MAX_BUFFER_BYTES below the
 * table's size): embed (with positions), sgd and init give the bytes of the
 * unsplit runs. */
TU_CASE(split_table) {
  enum { V = 200, D = 64, N = 90 }; /* outputs below same_file's 64 KiB */
  static float w[V * D], g[N * D];
  int32_t ids[N];
  uint64_t st = 23;
  for (int i = 0; i < V * D; i++) w[i] = tu_rand(&st);
  for (int i = 0; i < N * D; i++) g[i] = tu_rand(&st);
  for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
  size_t ts[2] = {V, D}, is[1] = {N}, gs[2] = {N, D};
  write_npy(P("split_w.npy"), NPY_F4, 2, ts, w);
  write_npy(P("split_i.npy"), NPY_I4, 1, is, ids);
  write_npy(P("split_g.npy"), NPY_F4, 2, gs, g);
  for (int limited = 0; limited < 2; limited++) {
    if (limited) setenv("CLEMBED_MAX_BUFFER_BYTES", "8000", 1); /* 31 rows of the table a buffer: 7 buffers */
    RUNS(0, "embed", "--table", P("split_w.npy"), "--ids", P("split_i.npy"), "--positions", "sinusoid", "-o",
         P(limited ? "split_e1.npy" : "split_e0.npy"));
    RUNS(0, "embed", "--table", P("split_w.npy"), "--ids", P("split_i.npy"), "--dtype", "f16", "-o",
         P(limited ? "split_h1.npy" : "split_h0.npy"));
    RUNS(0, "sgd", "--table", P("split_w.npy"), "--ids", P("split_i.npy"), "--grad", P("split_g.npy"), "--lr", "0.1",
         "-o", P(limited ? "split_s1.npy" : "split_s0.npy"));
    RUNS(0, "init", "--rows", "200", "--dim", "64", "--normal", "0,1", "--seed", "9", "-o",
         P(limited ? "split_n1.npy" : "split_n0.npy"));
    unsetenv("CLEMBED_MAX_BUFFER_BYTES");
  }
  EXPECT(same_file(P("split_e0.npy"), P("split_e1.npy")), "embed: a split table changed the output");
  EXPECT(same_file(P("split_h0.npy"), P("split_h1.npy")), "embed --dtype f16: a split table changed the output");
  EXPECT(same_file(P("split_s0.npy"), P("split_s1.npy")), "sgd: a split table changed the output");
  EXPECT(same_file(P("split_n0.npy"), P("split_n1.npy")), "init: a split matrix changed the output");
  /* a limit below one row: refused, naming the variable */
  setenv("CLEMBED_MAX_BUFFER_BYTES", "100", 1);
  RUNS(1, "embed", "--table", P("split_w.npy"), "--ids", P("split_i.npy"), "-o", P("split_x.npy"));
  unsetenv("CLEMBED_MAX_BUFFER_BYTES");
  ERR_HAS("CLEMBED_MAX_BUFFER_BYTES");
  EXPECT(!exists(P("split_x.npy")), "a refused run wrote its output");
}

TU_CASE(init) {
  RUNS(0, "init", "--rows", "7", "--dim", "9", "--normal", "0,0.02", "--seed", "5", "-o", P("n1.npy"));
  RUNS(0, "init", "--rows", "7", "--dim", "9", "--normal", "0,0.02", "--seed", "5", "-o", P("n2.npy"));
  RUNS(0, "init", "--rows", "7", "--dim", "9", "--normal", "0,0.02", "--seed", "6", "-o", P("n3.npy"));
  EXPECT(same_file(P("n1.npy"), P("n2.npy")), "init is not deterministic per seed");
  EXPECT(!same_file(P("n1.npy"), P("n3.npy")), "init gives the same table for seeds 5 and 6");
  npy_array a = {0};
  if (read_npy(P("n1.npy"), &a)) {
    EXPECT(a.dtype == NPY_F4 && a.ndim == 2 && a.shape[0] == 7 && a.shape[1] == 9, "init shape");
    free_array(&a);
  }
  RUNS(0, "init", "--rows", "4", "--dim", "3", "--uniform", "-2,1", "--seed", "9", "--dtype", "f16", "-o",
       P("u.npy"));
  if (read_npy(P("u.npy"), &a)) {
    EXPECT(a.dtype == NPY_F2 && a.count == 12, "init --dtype f16");
    double worst = 0;
    for (size_t e = 0; e < a.count; e++) {
      float want = ref_uniform(9, e, -2.0f, 1.0f);
      worst = fmax(worst, fabs(ref_f16_to_f32(((uint16_t *)a.data)[e]) - want));
    }
    EXPECT(worst <= 2e-3, "init --uniform differs from Philox: %g", worst);
    free_array(&a);
  }
  RUNS(1, "init", "--rows", "4", "--dim", "3", "-o", P("u_bad.npy"));
  RUNS(1, "init", "--rows", "4", "--dim", "3", "--normal", "0,-1", "-o", P("u_bad.npy"));
  RUNS(1, "init", "--rows", "4", "--dim", "3", "--uniform", "1", "-o", P("u_bad.npy"));
  EXPECT(!exists(P("u_bad.npy")), "output written after bad init flags");
}

TU_CASE(errors_exit_codes_and_no_partial_output) {
  {
    static float w[EX_V * EX_D];
    static uint16_t w16[EX_V * EX_D];
    int32_t i32[EX_N];
    int64_t i64[EX_N];
    exact_inputs(w, w16, i32, i64); /* w32.npy, i32_1d.npy */
  }
  enum { V = 37, D = 13, N = 60 };
  /* a bad id at position 23 */
  int32_t ids[N];
  for (int i = 0; i < N; i++) ids[i] = i % V;
  ids[23] = 123456;
  size_t is[1] = {N};
  write_npy(P("bad_ids.npy"), NPY_I4, 1, is, ids);
  RUNS(1, "embed", "--table", P("w32.npy"), "--ids", P("bad_ids.npy"), "-o", P("out_bad.npy"));
  ERR_HAS("ids[23]");
  ERR_HAS("123456");
  ERR_HAS("bad_ids.npy");
  EXPECT(!exists(P("out_bad.npy")), "output written after a bad id");
  /* an existing output is left byte-identical */
  size_t ks[1] = {3};
  float keep[3] = {1, 2, 3};
  write_npy(P("keep.npy"), NPY_F4, 1, ks, keep);
  write_npy(P("keep_copy.npy"), NPY_F4, 1, ks, keep);
  RUNS(1, "embed", "--table", P("w32.npy"), "--ids", P("bad_ids.npy"), "-o", P("keep.npy"));
  EXPECT(same_file(P("keep.npy"), P("keep_copy.npy")), "a failed run changed the existing output");
  /* the policies that do not fail */
  RUNS(0, "embed", "--table", P("w32.npy"), "--ids", P("bad_ids.npy"), "--on-bad-id", "zero", "-o", P("z.npy"));
  npy_array a = {0};
  if (read_npy(P("z.npy"), &a)) {
    int zero = a.count == N * D;
    for (int c = 0; c < D && zero; c++) zero = ((float *)a.data)[23 * D + c] == 0.0f;
    EXPECT(zero, "--on-bad-id zero: row 23 is not zero");
    free_array(&a);
  }
  /* a truncated file */
  static unsigned char buf[1 << 16];
  long n = file_bytes(P("w32.npy"), buf, sizeof buf);
  FILE *f = fopen(P("trunc.npy"), "wb");
  if (f) {
    fwrite(buf, 1, n > 200 ? 200 : (size_t)(n > 0 ? n : 0), f);
    fclose(f);
  }
  RUNS(1, "embed", "--table", P("trunc.npy"), "--ids", P("i32_1d.npy"), "-o", P("out_bad.npy"));
  ERR_HAS("trunc.npy");
  RUNS(1, "embed", "--table", P("w32.npy"), "--ids", P("trunc.npy"), "-o", P("out_bad.npy"));
  ERR_HAS("trunc.npy");
  /* a missing file */
  RUNS(1, "embed", "--table", P("no_such_file.npy"), "--ids", P("i32_1d.npy"), "-o", P("out_bad.npy"));
  ERR_HAS("no_such_file.npy");
  /* wrong ranks and dtypes */
  size_t s3[3] = {2, 3, 10};
  write_npy(P("ids3d.npy"), NPY_I4, 3, s3, ids);
  RUNS(1, "embed", "--table", P("w32.npy"), "--ids", P("ids3d.npy"), "-o", P("out_bad.npy"));
  ERR_HAS("ids3d.npy");
  RUNS(1, "embed", "--table", P("i32_1d.npy"), "--ids", P("i32_1d.npy"), "-o", P("out_bad.npy"));
  ERR_HAS("i32_1d.npy");
  RUNS(1, "embed", "--table", P("w32.npy"), "--ids", P("w32.npy"), "-o", P("out_bad.npy"));
  RUNS(1, "embed", "--table", P("keep.npy"), "--ids", P("i32_1d.npy"), "-o", P("out_bad.npy"));
  ERR_HAS("a table has 2 or more dimensions");
  /* usage */
  RUNS(1, "embed", "--table", P("w32.npy"), "--ids", P("i32_1d.npy"), "--bogus", "-o", P("out_bad.npy"));
  ERR_HAS("--bogus");
  RUNS(1, "embed", "--table", P("w32.npy"), "-o", P("out_bad.npy"));
  ERR_HAS("--ids");
  RUNS(1, "embed", "--table", P("w32.npy"), "--ids", P("i32_1d.npy"));
  ERR_HAS("-o");
  RUNS(1, "embed", "--table", P("w32.npy"), "--ids", P("i32_1d.npy"), "--scale", "abc", "-o", P("out_bad.npy"));
  ERR_HAS("--scale: 'abc' is not a number");
  RUNS(1, "embed", "--table", P("w32.npy"), "--ids", P("i32_1d.npy"), "--scale", "nan", "-o", P("out_bad.npy"));
  RUNS(1, "embed", "--table", P("w32.npy"), "--ids", P("i32_1d.npy"), "--dropout", "1.5", "-o", P("out_bad.npy"));
  RUNS(1, "embed", "--table", P("w32.npy"), "--ids", P("i32_1d.npy"), "--on-bad-id", "ignore", "-o",
       P("out_bad.npy"));
  ERR_HAS("--on-bad-id");
  RUNS(1, "embed", "--table", P("w32.npy"), "--ids", P("i32_1d.npy"), "--padding-idx", "37", "-o",
       P("out_bad.npy"));
  ERR_HAS("--padding-idx");
  RUNS(1, "positional", "--length", "-3", "--dim", "10", "-o", P("out_bad.npy"));
  ERR_HAS("--length");
  RUNS(1, "positional", "--length", "5x", "--dim", "10", "-o", P("out_bad.npy"));
  RUNS(1, "positional", "--length", "5", "--dim", "10", "--base", "nan", "-o", P("out_bad.npy"));
  RUNS(1, "positional", "--length", "5", "--dim", "10", "--exponent", "index", "--layout", "halves", "-o",
       P("out_bad.npy"));
  RUNS(1, "positional", "--length", "5", "--dim", "10", "extra", "-o", P("out_bad.npy"));
  RUNS(1, "sgd", "--table", P("w32.npy"), "--ids", P("i32_1d.npy"), "--grad", P("w32.npy"), "--lr", "x", "-o",
       P("out_bad.npy"));
  ERR_HAS("--lr");
  EXPECT(!exists(P("out_bad.npy")), "a failed run wrote its output");
  /* the device */
  RUNS(2, "embed", "--table", P("w32.npy"), "--ids", P("i32_1d.npy"), "--device", "nonexistent-device-xyz", "-o",
       P("out_bad.npy"));
  ERR_HAS("nonexistent-device-xyz");
  RUNS(2, "positional", "--length", "5", "--dim", "10", "--device", "nonexistent-device-xyz", "-o",
       P("out_bad.npy"));
  RUNS(2, "devices", "--device", "nonexistent-device-xyz");
  RUNS(2, "demo", "--device", "nonexistent-device-xyz");
  EXPECT(!exists(P("out_bad.npy")), "a failed run wrote its output");
  EXPECT(leftover_temps() == 0, "temporary files left behind");
}


/* ------------------------------------------- usage, settings, 0 columns */

TU_CASE(usage_fixes) {
  RUNS(0, "help", "--help");
  EXPECT(strstr(g_out, "subcommands") != NULL, "help --help: %s", g_out);
  RUNS(0, "help", "-h");
  RUNS(0, "help", "embed");
  EXPECT(strstr(g_out, "--table") != NULL, "help embed: %s", g_out);
  RUNS(1, "help", "nosuch");
  /* a bad setting is bad input (exit 1) naming it */
  setenv("CLEMBED_TUNING", "foo", 1);
  RUNS(1, "positional", "--length", "2", "--dim", "4", "-o", P("tun_bad.npy"));
  ERR_HAS("CLEMBED_TUNING");
  unsetenv("CLEMBED_TUNING");
  EXPECT(!exists(P("tun_bad.npy")), "output written after a bad CLEMBED_TUNING");
  /* --dim 0 is refused by init as by positional */
  RUNS(1, "init", "--rows", "3", "--dim", "0", "--normal", "0,1", "-o", P("dim0.npy"));
  ERR_HAS("--dim");
  RUNS(1, "positional", "--length", "3", "--dim", "0", "-o", P("dim0.npy"));
  ERR_HAS("--dim");
  EXPECT(!exists(P("dim0.npy")), "output written for --dim 0");
  /* a table of 0 columns: a bad id is still bad input (exit 1 naming the file) */
  size_t t0[2] = {4, 0}, g0[2] = {3, 0}, is[1] = {3};
  int32_t ids[3] = {1, 9, 2};
  float dummy = 0;
  write_npy(P("w0col.npy"), NPY_F4, 2, t0, &dummy);
  write_npy(P("g0col.npy"), NPY_F4, 2, g0, &dummy);
  write_npy(P("i0col.npy"), NPY_I4, 1, is, ids);
  RUNS(1, "embed", "--table", P("w0col.npy"), "--ids", P("i0col.npy"), "-o", P("o0col.npy"));
  ERR_HAS("i0col.npy");
  ERR_HAS("ids[1] = 9");
  RUNS(1, "backward", "--ids", P("i0col.npy"), "--grad", P("g0col.npy"), "--vocab", "4", "-o", P("o0col.npy"));
  ERR_HAS("ids[1] = 9");
  RUNS(1, "sgd", "--table", P("w0col.npy"), "--ids", P("i0col.npy"), "--grad", P("g0col.npy"), "--lr", "0.1", "-o",
       P("o0col.npy"));
  ERR_HAS("ids[1] = 9");
  EXPECT(!exists(P("o0col.npy")), "output written after a bad id in a 0-column table");
  /* the policies that accept the id, and good ids */
  RUNS(0, "embed", "--table", P("w0col.npy"), "--ids", P("i0col.npy"), "--on-bad-id", "zero", "-o", P("o0col.npy"));
  npy_array a = {0};
  if (read_npy(P("o0col.npy"), &a)) {
    EXPECT(a.ndim == 2 && a.shape[0] == 3 && a.shape[1] == 0, "0-column embed: shape");
    free_array(&a);
  }
  ids[1] = 3;
  write_npy(P("i0col.npy"), NPY_I4, 1, is, ids);
  RUNS(0, "embed", "--table", P("w0col.npy"), "--ids", P("i0col.npy"), "-o", P("o0col.npy"));
}

/* --------------------------------------------------------------- output */

static int is_type(const char *path, mode_t type, int follow) {
  struct stat st;
  if ((follow ? stat(path, &st) : lstat(path, &st)) != 0) return 0;
  return (st.st_mode & S_IFMT) == type;
}

/* A positional (3, 4) table read back from `path`. */
static void expect_positional(const char *path, const char *what) {
  npy_array a = {0};
  if (!read_npy(path, &a)) return;
  int ok = a.dtype == NPY_F4 && a.ndim == 2 && a.shape[0] == 3 && a.shape[1] == 4;
  for (size_t p = 0; ok && p < 3; p++)
    for (size_t i = 0; ok && i < 4; i++) ok = fabs(((float *)a.data)[p * 4 + i] - sin_ref(10000.0, CLEMBED_EXPONENT_PAIR, CLEMBED_LAYOUT_INTERLEAVED, 4, p, i)) <= 1e-6;
  EXPECT(ok, "%s: not the (3, 4) positional table", what);
  free_array(&a);
}

#define POS34 "positional", "--length", "3", "--dim", "4"

TU_CASE(output) {
  /* a symlink: its target is replaced, the link stays */
  float keep[2] = {7, 8};
  size_t ks[1] = {2};
  write_npy(P("real.npy"), NPY_F4, 1, ks, keep);
  unlink(P("link.npy"));
  EXPECT(symlink("real.npy", P("link.npy")) == 0, "symlink: %s", strerror(errno));
  RUNS(0, POS34, "-o", P("link.npy"));
  EXPECT(is_type(P("link.npy"), S_IFLNK, 0), "-o onto a symlink replaced the link");
  expect_positional(P("real.npy"), "the symlink's target");
  /* a dangling symlink: the file it names is created */
  unlink(P("dangling.npy"));
  EXPECT(symlink("made_by_link.npy", P("dangling.npy")) == 0, "symlink: %s", strerror(errno));
  RUNS(0, POS34, "-o", P("dangling.npy"));
  EXPECT(is_type(P("dangling.npy"), S_IFLNK, 0), "-o onto a dangling symlink replaced the link");
  expect_positional(P("made_by_link.npy"), "a dangling symlink's target");
  /* an existing file keeps its mode */
  write_npy(P("mode.npy"), NPY_F4, 1, ks, keep);
  chmod(P("mode.npy"), 0640);
  RUNS(0, POS34, "-o", P("mode.npy"));
  struct stat st;
  EXPECT(stat(P("mode.npy"), &st) == 0 && (st.st_mode & 07777) == 0640, "the output's mode is %o, was 640",
         (unsigned)(st.st_mode & 07777));
  expect_positional(P("mode.npy"), "a file with mode 640");
  /* -o - : the .npy on standard output */
  RUNS(0, POS34, "-o", "-");
  expect_positional(P(".stdout"), "-o -");
  /* a FIFO is written directly, and stays a FIFO */
  unlink(P("out.fifo"));
  int fifo_ok = mkfifo(P("out.fifo"), 0600) == 0;
  EXPECT(fifo_ok, "mkfifo: %s", strerror(errno));
  if (fifo_ok) {
    pid_t reader = fork();
    if (reader == 0) { /* copies the FIFO into a file */
      int in = open(P("out.fifo"), O_RDONLY), out = open(P("fifo_copy.npy"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      char buf[4096];
      ssize_t n;
      while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n) _exit(1);
      _exit(in >= 0 && out >= 0 ? 0 : 1);
    }
    int r = CLI(POS34, "-o", P("out.fifo"));
    int rst = 0, waited = 0;
    /* the reader ends with the writer; a tool that never opened the FIFO leaves it waiting */
    while (waitpid(reader, &rst, WNOHANG) == 0) {
      if (waited >= 5000) {
        kill(reader, SIGKILL);
        waitpid(reader, &rst, 0);
        break;
      }
      struct timespec t = {0, 10000000L};
      nanosleep(&t, NULL);
      waited += 10;
    }
    EXPECT(r == 0, "-o FIFO exits %d: %s", r, g_err);
    fifo_ok = r == 0 && is_type(P("out.fifo"), S_IFIFO, 0);
    EXPECT(fifo_ok, "-o onto a FIFO replaced it");
    expect_positional(P("fifo_copy.npy"), "the FIFO's reader");
  }
  /* a device node is written directly (only after the FIFO worked: a tool that
     renames over its output would replace /dev/null when run as root) */
  if (fifo_ok && is_type("/dev/null", S_IFCHR, 0)) {
    RUNS(0, POS34, "-o", "/dev/null");
    EXPECT(is_type("/dev/null", S_IFCHR, 0), "/dev/null is no longer a character device");
  }
  /* the output path is checked before the work: exit 1 even with no device */
  mkdir(P("a_dir"), 0755);
  RUNS(1, POS34, "--device", "nonexistent-device-xyz", "-o", P("a_dir"));
  ERR_HAS("is a directory");
  RUNS(1, POS34, "--device", "nonexistent-device-xyz", "-o", P("no_such_dir/x.npy"));
  ERR_HAS("no_such_dir");
  EXPECT(leftover_temps() == 0, "temporary files left behind");
}

/* ------------------------------------------------- signals and mapping */

#define SPAWN(...) cli_spawn((const char *const[]){__VA_ARGS__, NULL})

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* A run killed while it waits for its input (a FIFO) leaves no temporary file. */
TU_CASE(signals) {
  {
    static float w[EX_V * EX_D];
    static uint16_t w16[EX_V * EX_D];
    int32_t i32[EX_N];
    int64_t i64[EX_N];
    exact_inputs(w, w16, i32, i64); /* i32_1d.npy */
  }
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  static const char *const names[] = {"SIGINT", "SIGTERM", "SIGHUP"};
  unlink(P("in.fifo"));
  if (mkfifo(P("in.fifo"), 0600) != 0) {
    EXPECT(0, "mkfifo: %s", strerror(errno));
    return;
  }
  for (int k = 0; k < 3; k++) {
    pid_t pid = SPAWN("embed", "--table", P("in.fifo"), "--ids", P("i32_1d.npy"), "-o", P("killed.npy"));
    int waited = 0;
    while (leftover_temps() == 0 && waited < 20000) sleep_ms(10), waited += 10;
    EXPECT(leftover_temps() == 1, "%s: no temporary output file while the run waits for its input", names[k]);
    kill(pid, sigs[k]);
    int st = 0;
    waitpid(pid, &st, 0);
    EXPECT(WIFSIGNALED(st) && WTERMSIG(st) == sigs[k], "%s: the run did not die of it (status %d)", names[k], st);
    EXPECT(leftover_temps() == 0, "%s: the temporary output file is left behind", names[k]);
    EXPECT(!exists(P("killed.npy")), "%s: an output file was written", names[k]);
  }
  unlink(P("in.fifo"));
}

static long proc_status_kib(pid_t pid, const char *key) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  long v = -1;
  size_t kl = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, kl) && line[kl] == ':') v = atol(line + kl + 1);
  if (f) fclose(f);
  return v;
}

/* The table is mapped, not copied: while the run waits for its ids (a FIFO),
 * the table file is in its mappings and its anonymous memory is far below the
 * table's size. Then the ids arrive and the output is W[ids]. */
TU_CASE(mapped_input) {
  enum { V = 8192, D = 1024 }; /* 32 MiB */
  float *w = malloc((size_t)V * D * sizeof *w);
  if (!w) {
    EXPECT(0, "out of memory");
    return;
  }
  for (size_t i = 0; i < (size_t)V * D; i++) w[i] = (float)(i % 1000003) * 0.5f;
  size_t ts[2] = {V, D}, is[1] = {3};
  write_npy(P("big_table.npy"), NPY_F4, 2, ts, w);
  const int32_t ids[3] = {V - 1, 0, 4321};
  write_npy(P("ids3.npy"), NPY_I4, 1, is, ids);
  unlink(P("ids.fifo"));
  if (mkfifo(P("ids.fifo"), 0600) != 0) {
    EXPECT(0, "mkfifo: %s", strerror(errno));
    free(w);
    return;
  }
  pid_t pid = SPAWN("embed", "--table", P("big_table.npy"), "--ids", P("ids.fifo"), "-o", P("mapped_out.npy"));
  /* wait until it has the table and blocks on the FIFO */
  char maps_path[64], line[1024];
  snprintf(maps_path, sizeof maps_path, "/proc/%d/maps", (int)pid);
  int mapped = 0;
  for (int waited = 0; !mapped && waited < 20000; waited += 10) {
    FILE *f = fopen(maps_path, "r");
    while (f && fgets(line, sizeof line, f))
      if (strstr(line, "big_table.npy")) mapped = 1;
    if (f) fclose(f);
    if (!mapped) sleep_ms(10);
  }
  long anon = proc_status_kib(pid, "RssAnon");
  EXPECT(mapped, "the table file is not mapped while the run waits for its ids");
  EXPECT(anon >= 0 && anon < (long)((size_t)V * D * 4 / 1024 / 2), "the run holds %ld KiB of anonymous memory",
         anon);
  /* feed the ids */
  int fd = open(P("ids.fifo"), O_WRONLY);
  static unsigned char buf[4096];
  long n = file_bytes(P("ids3.npy"), buf, sizeof buf);
  if (fd >= 0 && n > 0 && write(fd, buf, (size_t)n) != n) EXPECT(0, "write to the FIFO failed");
  if (fd >= 0) close(fd);
  int st = 0;
  waitpid(pid, &st, 0);
  slurp(P(".stderr"), g_err, sizeof g_err);
  EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "embed with a mapped table: status %d: %s", st, g_err);
  npy_array a = {0};
  if (read_npy(P("mapped_out.npy"), &a)) {
    int ok = a.count == 3 * D;
    for (int i = 0; i < 3 && ok; i++) ok = !memcmp((float *)a.data + (size_t)i * D, w + (size_t)ids[i] * D, D * 4);
    EXPECT(ok, "embed with a mapped table differs from W[ids]");
    free_array(&a);
  }
  unlink(P("ids.fifo"));
  unlink(P("big_table.npy"));
  free(w);
}

/* A run that needs more memory than the machine has is refused before any
 * allocation (exit 1, naming memory). */
TU_CASE(memory_budget) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) {
    tu_skip("the machine's memory size is unknown");
    return;
  }
  {
    static float w[EX_V * EX_D], g[EX_N * EX_D];
    static uint16_t w16[EX_V * EX_D];
    int32_t i32[EX_N];
    int64_t i64[EX_N];
    exact_inputs(w, w16, i32, i64); /* i32_1d.npy */
    size_t gs[2] = {EX_N, EX_D};
    write_npy(P("e.npy"), NPY_F4, 2, gs, g); /* a gradient for those ids */
  }
  double phys = (double)pages * (double)page, global = 0;
  /* the default device's memory: a device of its own is refused past it */
  size_t n = 0;
  clembed_device_info list[64];
  if (clembed_devices(list, 64, &n) == CLEMBED_OK)
    for (size_t i = 0; i < n && i < 64; i++)
      if (list[i].is_default) global = (double)list[i].global_mem_bytes;
  /* on a CPU device, host copy plus device copy are 1.2 times the machine (each
     alone 0.6); elsewhere the device copy is past the device's memory */
  double bytes = fmax(phys * 0.6, global * 1.1);
  char rows[64];
  snprintf(rows, sizeof rows, "%.0f", bytes / 4.0 / 1024.0);
  RUNS(1, "init", "--rows", rows, "--dim", "1024", "--uniform", "0,1", "-o", P("huge.npy"));
  ERR_HAS("this run needs");
  RUNS(1, "init", "--rows", "1000000000", "--dim", "1000000", "--uniform", "0,1", "-o", P("huge.npy"));
  ERR_HAS("this run needs");
  RUNS(1, "backward", "--ids", P("i32_1d.npy"), "--grad", P("e.npy"), "--vocab", "100000000000", "-o",
       P("huge.npy"));
  ERR_HAS("this run needs");
  EXPECT(!exists(P("huge.npy")) && leftover_temps() == 0, "a refused run left a file");
}


/* POCL lists no device when it cannot create its kernel cache directory (a
 * home that is not writable): the message says so and names POCL_CACHE_DIR,
 * not a package to install; with POCL_CACHE_DIR set the same run works.
 * Only where POCL is the registered platform (not under OCL_ICD_VENDORS). */
TU_CASE(pocl_cache_message) {
  const char *vendors = getenv("OCL_ICD_VENDORS");
  if ((vendors && *vendors) || !exists("/etc/OpenCL/vendors/pocl.icd")) {
    tu_skip("POCL is not the registered platform (OCL_ICD_VENDORS set or no pocl.icd)");
    return;
  }
  char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  char *xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
  char *pcd = getenv("POCL_CACHE_DIR") ? strdup(getenv("POCL_CACHE_DIR")) : NULL;
  setenv("HOME", "/proc/clembed-no-such-home", 1);
  unsetenv("XDG_CACHE_HOME");
  unsetenv("POCL_CACHE_DIR");
  RUNS(2, "devices");
  ERR_HAS("POCL_CACHE_DIR");
  ERR_HAS("/proc/clembed-no-such-home/.cache/pocl/kcache");
  EXPECT(strstr(g_err, "apt-get") == NULL, "the message points to a package: %s", g_err);
  RUNS(2, "positional", "--length", "2", "--dim", "4", "-o", P("pocl_bad.npy"));
  ERR_HAS("POCL_CACHE_DIR");
  mkdir(P("pocl_cache"), 0755);
  setenv("POCL_CACHE_DIR", P("pocl_cache"), 1);
  RUNS(0, "positional", "--length", "2", "--dim", "4", "-o", P("pocl_ok.npy"));
  if (home) setenv("HOME", home, 1);
  else unsetenv("HOME");
  if (xdg) setenv("XDG_CACHE_HOME", xdg, 1);
  if (pcd) setenv("POCL_CACHE_DIR", pcd, 1);
  else unsetenv("POCL_CACHE_DIR");
  free(home);
  free(xdg);
  free(pcd);
  /* the cache POCL made there */
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", P("pocl_cache"));
  if (system(cmd) != 0) EXPECT(0, "%s failed", cmd);
}

TU_CASE(demo) {
  RUNS(0, "demo");
  EXPECT(strstr(g_out, "0.84147") != NULL, "demo output lacks 0.84147");
}

/* bench --only runs the rows whose name contains the text, and no other (a
 * group of rows none of which is named is not even set up); a bad --reps is
 * refused. (Timings are not checked: only which rows ran.) It runs on every
 * registered platform, rusticl included: under Mesa 22's rusticl the bench
 * crashed while its buffers were on host pages, which are on POCL only now
 * (device.c's host_pages). */
TU_CASE(bench_only) {
  RUNS(0, "bench", "--quick", "--only", "one-token");
  EXPECT(strstr(g_out, "reference:") != NULL, "bench printed no reference: %s", g_out);
  EXPECT(strstr(g_out, "one-token lookup + finish") != NULL, "the one-token row is missing: %s", g_out);
  EXPECT(strstr(g_out, "lookup f32") == NULL && strstr(g_out, "backward") == NULL, "other rows ran: %s", g_out);
  RUNS(1, "bench", "--reps", "0");
  ERR_HAS("--reps: '0'");
  RUNS(1, "bench", "--only", "no such row");
  ERR_HAS("names no row");
  /* a second tuning beside the default, in the same rounds */
  RUNS(0, "bench", "--quick", "--only", "one-token", "--against", "embed_rows=4");
  EXPECT(strstr(g_out, "CLEMBED_TUNE=embed_rows=4") != NULL && strstr(g_out, "tuned/def") != NULL,
         "no --against column: %s", g_out);
  RUNS(1, "bench", "--only", "one-token", "--against", "no_such_field=1");
  ERR_HAS("no_such_field");
  RUNS(0, "bench", "--list");
  EXPECT(strstr(g_out, "lookup f32 (1 GiB table") != NULL && strstr(g_out, "optimizer ADAM, recommendation") != NULL,
         "--list: %s", g_out);
}

/* The benchmark is a program of its own beside clembed (the tool links none of
 * its code): a clembed with no clembed-bench beside it says so, naming the path
 * it looked at, and exits 127. */
TU_CASE(bench_is_its_own_program) {
  char lone[700], copy[760], cmd[1600];
  snprintf(lone, sizeof lone, "%s", P("lone"));
  snprintf(copy, sizeof copy, "%s/clembed", lone);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s'", lone, g_exe, copy);
  EXPECT(system(cmd) == 0, "%s failed", cmd);
  const char *was = g_exe;
  g_exe = copy;
  RUNS(127, "bench", "--list");
  ERR_HAS("clembed-bench");
  snprintf(cmd, sizeof cmd, "%s/clembed-bench", lone);
  ERR_HAS(cmd);
  RUNS(0, "positional", "--length", "2", "--dim", "2", "-o", P("lone/pe.npy")); /* the rest works */
  g_exe = was;
}

/* ------------------------------------------- the flags each --help lists */

/* Every subcommand's flags (the contract's): each --help describes each of its
 * flags after its synopsis (a word of its own), and every flag a --help names
 * is one the parser knows. (--help itself exits 2 naming a flag its parser
 * takes and its text does not describe.) */
TU_CASE(help_lists_every_flag) {
  static const struct {
    const char *sub;
    const char *flags[24];
  } subs[] = {
      {"devices", {"--json", "--device"}},
      {"positional", {"--length", "--dim", "--first", "--base", "--exponent", "--layout", "--out-dtype", "--device", "-o"}},
      {"rope-cache", {"--length", "--head-dim", "--rotary-dim", "--first", "--base", "--layout", "--scaling", "--factor",
                      "--original-max-position", "--low-freq-factor", "--high-freq-factor", "--beta-fast",
                      "--beta-slow", "--attention-factor", "--device", "-o"}},
      {"rope", {"--input", "--head-dim", "--positions", "--offset", "--inverse", "--out-dtype", "--rotary-dim",
                "--base", "--layout", "--scaling", "--factor", "--original-max-position", "--low-freq-factor",
                "--high-freq-factor", "--beta-fast", "--beta-slow", "--attention-factor", "--device", "-o"}},
      {"embed", {"--table", "--ids", "--scale", "--positions", "--base", "--exponent", "--layout", "--offset",
                 "--padding-idx", "--on-bad-id", "--dtype", "--dropout", "--seed", "--out-dtype", "--device", "-o",
                 "--segments", "--segment-ids", "--norm", "--norm-weight", "--norm-bias", "--norm-eps"}},
      {"backward", {"--ids", "--grad", "--vocab", "--scale", "--padding-idx", "--scale-grad-by-freq", "--atomic",
                    "--on-bad-id", "--dropout", "--seed", "--out-dtype", "--device", "-o"}},
      {"sgd", {"--table", "--ids", "--grad", "--lr", "--scale", "--padding-idx", "--scale-grad-by-freq", "--on-bad-id",
               "--dropout", "--seed", "--out-dtype", "--device", "-o"}},
      {"init", {"--rows", "--dim", "--normal", "--uniform", "--seed", "--dtype", "--out-dtype", "--device", "-o"}},
      {"inspect", {"--json", "--metadata", "--device"}},
      {"demo", {"--device"}},
      {"bench", {"--json", "--device"}},
  };
  RUNS(0, "demo", "model", "--help");
  EXPECT(!g_err[0] && strstr(g_out, "--ids") && strstr(g_out, "--dtype") && strstr(g_out, "--device"),
         "demo model --help: %s%s", g_out, g_err);
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
    int r = CLI(subs[i].sub, "--help");
    EXPECT(r == 0 && !g_err[0], "%s --help exits %d: %s", subs[i].sub, r, g_err);
    static char help[1 << 16];
    snprintf(help, sizeof help, "%s", g_out);
    const char *body = strstr(help, "\n\n");
    if (!body) body = help;
    for (int k = 0; subs[i].flags[k]; k++) {
      const char *f = subs[i].flags[k], *p = body;
      size_t n = strlen(f);
      int found = 0;
      while (!found && (p = strstr(p, f)) != NULL) {
        char b = p[-1], a = p[n];
        found = !isalnum((unsigned char)b) && b != '-' && !isalnum((unsigned char)a) && a != '-';
        p += n;
      }
      EXPECT(found, "clembed %s --help does not describe %s", subs[i].sub, f);
    }
    /* every --word the help names is a flag of this subcommand */
    if (!strcmp(subs[i].sub, "bench")) continue; /* the benchmark's own parser */
    for (const char *p = help; (p = strstr(p, "--")) != NULL;) {
      char flag[64];
      size_t n = 2;
      while (n < sizeof flag - 1 && (isalnum((unsigned char)p[n]) || p[n] == '-')) n++;
      memcpy(flag, p, n);
      flag[n] = '\0';
      p += n;
      if (n < 4 || !strcmp(flag, "--help")) continue;
      CLI(subs[i].sub, flag);
      if (!strcmp(subs[i].sub, "demo") && strstr(g_err, "unknown flag")) CLI("demo", "model", flag); /* its flags too */
      EXPECT(strstr(g_err, "unknown flag") == NULL, "clembed %s --help names %s, which it refuses: %s", subs[i].sub,
             flag, g_err);
    }
  }
}

/* A flag's value that looks like a flag is refused naming the flag (--scale -o
 * x.npy does not take -o for the scale); negative numbers, "-" and
 * --flag=VALUE are values. */
TU_CASE(flag_values_that_look_like_flags) {
  enum { V = 5, D = 3 };
  float w[V * D];
  int32_t ids[4] = {0, 4, 2, 2};
  fill_table(w, V, D, 3);
  w[1] = 1.0f, w[2] = 2.0f, w[3] = 3.0f, w[4] = 4.0f; /* finite: -0.5 * w compared exactly */
  size_t ts[2] = {V, D}, is[1] = {4};
  write_npy(P("lf_w.npy"), NPY_F4, 2, ts, w);
  write_npy(P("lf_ids.npy"), NPY_I4, 1, is, ids);
  unlink(P("lf_out.npy"));
  RUNS(1, "embed", "--table", P("lf_w.npy"), "--ids", P("lf_ids.npy"), "--scale", "-o", P("lf_out.npy"));
  ERR_HAS("--scale needs a value, and '-o' looks like a flag");
  EXPECT(!exists(P("lf_out.npy")), "a refused run wrote its output");
  RUNS(1, "embed", "--scale", "--table", P("lf_w.npy"), "--ids", P("lf_ids.npy"), "-o", P("lf_out.npy"));
  ERR_HAS("--scale needs a value, and '--table' looks like a flag");
  RUNS(1, "embed", "--table", P("lf_w.npy"), "--ids", P("lf_ids.npy"), "-o", P("lf_out.npy"), "--scale");
  ERR_HAS("--scale needs a value");
  /* --scale --help is the help, not a scale */
  RUNS(0, "embed", "--scale", "--help");
  EXPECT(strstr(g_out, "usage: clembed embed") != NULL, "embed --scale --help: %s", g_out);
  /* a negative number is a value, and so is anything after = */
  static const char *const forms[][2] = {{"--scale", "-0.5"}, {"--scale=-0.5", NULL}};
  for (int k = 0; k < 2; k++) {
    unlink(P("lf_out.npy"));
    if (forms[k][1])
      RUNS(0, "embed", "--table", P("lf_w.npy"), "--ids", P("lf_ids.npy"), forms[k][0], forms[k][1], "-o",
           P("lf_out.npy"));
    else
      RUNS(0, "embed", "--table", P("lf_w.npy"), "--ids", P("lf_ids.npy"), forms[k][0], "-o", P("lf_out.npy"));
    npy_array a = {0};
    if (!read_npy(P("lf_out.npy"), &a)) continue;
    int bad = a.count != 4 * D;
    for (size_t i = 0; i < 4 && !bad; i++)
      for (size_t c = 0; c < D && !bad; c++) {
        float want = -0.5f * w[(size_t)ids[i] * D + c], got = ((float *)a.data)[i * D + c];
        bad = memcmp(&want, &got, 4) != 0;
      }
    EXPECT(!bad, "%s: not -0.5 * W[ids]", forms[k][0]);
    free_array(&a);
  }
  RUNS(0, "embed", "--table", P("lf_w.npy"), "--ids", P("lf_ids.npy"), "--padding-idx", "-1", "-o", P("lf_out.npy"));
}

/* A table of more than 2 dimensions is (rows, the product of the rest), as
 * clembed_matrix_load reads it: a 3-D .npy and a 3-D safetensors tensor
 * (FILE:NAME) in embed; sgd writes the table back in its own shape. */
TU_CASE(table_of_three_dimensions) {
  enum { V = 4, A = 2, B = 3, D = A * B };
  float w[V * D];
  int32_t ids[5] = {3, 0, 3, 1, 2};
  fill_table(w, V, D, 11);
  w[2] = 0.5f; /* finite: the sgd step below is compared exactly */
  size_t t3[3] = {V, A, B}, is[1] = {5};
  write_npy(P("t3.npy"), NPY_F4, 3, t3, w);
  write_npy(P("t3_ids.npy"), NPY_I4, 1, is, ids);
  write_safetensors(P("t3.safetensors"), "emb", "F32", 3, t3, w, sizeof w);
  static const char *const tables[] = {"t3.npy", "t3.safetensors:emb"};
  for (int k = 0; k < 2; k++) {
    RUNS(0, "embed", "--table", P(tables[k]), "--ids", P("t3_ids.npy"), "-o", P("t3_out.npy"));
    npy_array a = {0};
    if (!read_npy(P("t3_out.npy"), &a)) continue;
    int bad = a.ndim != 2 || a.shape[0] != 5 || a.shape[1] != D;
    for (size_t i = 0; i < 5 && !bad; i++) bad = memcmp((float *)a.data + i * D, w + (size_t)ids[i] * D, D * 4) != 0;
    EXPECT(!bad, "embed --table %s (3-D): not W.reshape(%d, %d)[ids]", tables[k], V, D);
    free_array(&a);
  }
  /* sgd: W[v] -= lr * sum of the rows of G for v, written as (V, A, B) */
  float g[5 * D];
  for (size_t i = 0; i < 5 * D; i++) g[i] = (float)(i % 7) * 0.25f - 0.5f;
  size_t gs[2] = {5, D};
  write_npy(P("t3_g.npy"), NPY_F4, 2, gs, g);
  RUNS(0, "sgd", "--table", P("t3.npy"), "--ids", P("t3_ids.npy"), "--grad", P("t3_g.npy"), "--lr", "0.5", "-o",
       P("t3_w2.npy"));
  npy_array a = {0};
  if (read_npy(P("t3_w2.npy"), &a)) {
    int bad = a.ndim != 3 || a.shape[0] != V || a.shape[1] != A || a.shape[2] != B;
    for (size_t v = 0; v < V && !bad; v++)
      for (size_t c = 0; c < D && !bad; c++) {
        double dw = 0.0;
        for (size_t i = 0; i < 5; i++)
          if ((size_t)ids[i] == v) dw += g[i * D + c];
        float want = w[v * D + c] - 0.5f * (float)dw, got = ((float *)a.data)[v * D + c];
        bad = !(want == got || (isnan(want) && isnan(got)) || (isinf(want) && want == got));
      }
    EXPECT(!bad, "sgd on a 3-D table: wrong values or shape (ndim %d)", a.ndim);
    free_array(&a);
  }
  /* fewer than 2 dimensions is still not a table */
  size_t s1[1] = {6};
  write_npy(P("t1.npy"), NPY_F4, 1, s1, w);
  RUNS(1, "embed", "--table", P("t1.npy"), "--ids", P("t3_ids.npy"), "-o", P("t3_out.npy"));
  ERR_HAS("a table has 2 or more dimensions");
}

/* devices --json: one object per device, as clembed_devices lists them, the
 * default (or --device's) selected. */
static void json_escape(char *out, size_t cap, const char *s) {
  size_t o = 0;
  for (; *s && o + 8 < cap; s++) {
    if (*s == '"' || *s == '\\') out[o++] = '\\', out[o++] = *s;
    else if ((unsigned char)*s < 0x20) o += (size_t)snprintf(out + o, cap - o, "\\u%04x", (unsigned char)*s);
    else out[o++] = *s;
  }
  out[o] = '\0';
}

static void expect_devices_json(const clembed_device_info *list, size_t n, long selected) {
  static char want[1 << 15];
  size_t o = (size_t)snprintf(want, sizeof want, "[");
  for (size_t i = 0; i < n; i++) {
    char pl[300], nm[300], tu[2100];
    clembed_context *c = NULL;
    EXPECT(clembed_context_create(list[i].spec, &c) == CLEMBED_OK, "a context on %s", list[i].spec);
    json_escape(tu, sizeof tu, clembed_context_tuning(c));
    clembed_context_destroy(c);
    json_escape(pl, sizeof pl, list[i].platform);
    json_escape(nm, sizeof nm, list[i].name);
    cl_device_type t = list[i].type;
    const char *type = (t & CL_DEVICE_TYPE_GPU) ? "gpu" : (t & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator"
                       : (t & CL_DEVICE_TYPE_CPU) ? "cpu" : "other";
    o += (size_t)snprintf(want + o, sizeof want - o,
                          "%s{\"spec\": \"%s\", \"platform\": \"%s\", \"name\": \"%s\", \"type\": \"%s\", "
                          "\"is_default\": %s, \"selected\": %s, \"global_mem_bytes\": %llu, \"max_alloc_bytes\": %llu, "
                          "\"tuning\": \"%s\"}",
                          i ? ", " : "", list[i].spec, pl, nm, type, list[i].is_default ? "true" : "false",
                          (long)i == selected ? "true" : "false", (unsigned long long)list[i].global_mem_bytes,
                          (unsigned long long)list[i].max_alloc_bytes, tu);
  }
  snprintf(want + o, sizeof want - o, "]\n");
  EXPECT(!strcmp(g_out, want), "devices --json:\n%s\nexpected:\n%s", g_out, want);
}

TU_CASE(devices_json) {
  size_t n = 0;
  EXPECT(clembed_devices(NULL, 0, &n) == CLEMBED_OK && n > 0, "clembed_devices: %zu", n);
  clembed_device_info list[64];
  if (n > 64) n = 64;
  EXPECT(clembed_devices(list, n, &n) == CLEMBED_OK, "clembed_devices");
  long def = -1;
  for (size_t i = 0; i < n; i++)
    if (list[i].is_default && def < 0) def = (long)i;
  RUNS(0, "devices", "--json");
  expect_devices_json(list, n, def);
  /* --device: the device the spec picks (the first of identical ones) */
  long last = (long)n - 1, pick = last;
  for (long i = 0; i < last; i++)
    if (!strcmp(list[i].platform, list[last].platform) && !strcmp(list[i].name, list[last].name)) {
      pick = i;
      break;
    }
  RUNS(0, "devices", "--device", list[last].spec, "--json");
  expect_devices_json(list, n, pick);
  RUNS(1, "devices", "--json=yes");
  ERR_HAS("--json takes no value");
}

/* inspect of a checkpoint: each tensor's matrix (dtype, shape, CRC-32C) and the metadata. */
TU_CASE(inspect_checkpoint) {
  ctx = tu_context();
  clembed_matrix a, q;
  OK(ctx, clembed_matrix_create(ctx, 3, 4, CLEMBED_F32, &a));
  OK(ctx, clembed_matrix_create(ctx, 2, 32, CLEMBED_Q8_0, &q));
  clembed_checkpoint_item items[] = {{"emb", &a}, {"emb.q", &q}};
  const char *keys[] = {"step"}, *values[] = {"12"};
  OK(ctx, clembed_checkpoint_save(ctx, P("ck.safetensors"), items, 2, keys, values, 1));
  RUNS(0, "inspect", P("ck.safetensors"));
  /* CRC-32C of 48 zero bytes, and of two Q8_0 blocks of zeros (68 bytes) */
  EXPECT(!strcmp(g_out, "emb f32 3x4 = f32 3x4 crc32c=288c3ab9\nemb.q u8 2x34 = q8_0 2x32 crc32c=d80d46e8\n"
                        "metadata:\n  clembed.checkpoint: 1\n  step: 12\n"),
         "inspect of a checkpoint: %s", g_out);
  RUNS(0, "inspect", P("ck.safetensors"), "--metadata", "--json");
  EXPECT(!strcmp(g_out, "{\"clembed.checkpoint\": \"1\", \"clembed.tensor.emb\": \"dtype=f32 rows=3 cols=4 crc32c=288c3ab9\", "
                        "\"clembed.tensor.emb.q\": \"dtype=q8_0 rows=2 cols=32 crc32c=d80d46e8\", \"step\": \"12\"}\n"),
         "inspect --metadata --json: %s", g_out);
  RUNS(0, "inspect", P("ck.safetensors"), "--metadata");
  EXPECT(!strcmp(g_out, "clembed.checkpoint: 1\nclembed.tensor.emb: dtype=f32 rows=3 cols=4 crc32c=288c3ab9\n"
                        "clembed.tensor.emb.q: dtype=q8_0 rows=2 cols=32 crc32c=d80d46e8\nstep: 12\n"),
         "inspect --metadata: %s", g_out);
  RUNS(0, "inspect", P("ck.safetensors"), "--json");
  EXPECT(strstr(g_out, "\"matrix\": {\"dtype\": \"q8_0\", \"rows\": 2, \"cols\": 32, \"crc32c\": \"d80d46e8\"}"),
         "inspect --json of a checkpoint: %s", g_out);
  clembed_matrix_release(&a);
  clembed_matrix_release(&q);
  clembed_context_destroy(ctx);
}

/* inspect takes --device (and opens no device), before or after FILE; a file
 * of 9 dimensions shows them all; dtypes are lower case. */
TU_CASE(inspect_flags_and_names) {
  float w[12] = {0};
  size_t s9[9] = {1, 2, 1, 1, 3, 1, 1, 1, 2}, s2[2] = {3, 4};
  write_npy(P("in9.npy"), NPY_F4, 9, s9, w);
  RUNS(0, "inspect", P("in9.npy"));
  EXPECT(!strcmp(g_out, "- f32 1x2x1x1x3x1x1x1x2\n"), "inspect of 9 dimensions: %s", g_out);
  RUNS(0, "inspect", P("in9.npy"), "--device", "no-such-device");
  EXPECT(!strcmp(g_out, "- f32 1x2x1x1x3x1x1x1x2\n"), "inspect FILE --device: %s", g_out);
  RUNS(0, "inspect", "--device", "cpu", "--json", P("in9.npy"));
  EXPECT(!strcmp(g_out, "[{\"name\": \"\", \"dtype\": \"f32\", \"shape\": [1, 2, 1, 1, 3, 1, 1, 1, 2], \"bytes\": 48}]\n"),
         "inspect --device SPEC --json FILE: %s", g_out);
  RUNS(1, "inspect", P("in9.npy"), "--device");
  ERR_HAS("--device needs a value");
  RUNS(1, "inspect", P("in9.npy"), P("in9.npy"));
  ERR_HAS("one FILE only");
  /* a device that never ends is refused from its first bytes, not read to the end */
  RUNS(1, "inspect", "/dev/zero");
  ERR_HAS("/dev/zero: not a .npy, .safetensors or .gguf file");
  RUNS(1, "embed", "--table", "/dev/zero", "--ids", P("in9.npy"), "-o", P("zero_out.npy"));
  ERR_HAS("--table /dev/zero: not a .npy");
  /* what clembed cannot load as a table shows in the same lower-case scheme as every dtype name:
   * the file's type name in lower case, a NumPy type string as i32, f64, ... */
  double f64[12] = {0};
  write_safetensors(P("odd.safetensors"), "x", "F64", 2, s2, f64, sizeof f64);
  RUNS(0, "inspect", P("odd.safetensors"));
  EXPECT(!strcmp(g_out, "x f64 3x4\n"), "inspect F64: %s", g_out);
  RUNS(0, "inspect", P("odd.safetensors"), "--json");
  EXPECT(strstr(g_out, "\"dtype\": \"f64\"") != NULL, "inspect --json F64: %s", g_out);
  RUNS(1, "embed", "--table", P("odd.safetensors"), "--ids", P("in9.npy"), "-o", P("odd_out.npy"));
  ERR_HAS("tensor 'x' is f64; --table takes f32, f16, bf16, q8_0, q4_0");
  int32_t i4[3] = {0, 1, 2};
  size_t s3[1] = {3};
  write_npy(P("odd_ids.npy"), NPY_I4, 1, s3, i4);
  RUNS(0, "inspect", P("odd_ids.npy"));
  EXPECT(!strcmp(g_out, "- i32 3\n"), "inspect <i4: %s", g_out);
}

/* BERT's layer: --segments, --segment-ids and --norm against float64; the
 * flags' mistakes and a bad segment id (exit 1 naming the flag, no output). */
TU_CASE(embed_bert) {
  enum { V = PS_V, D = PS_D, B = PS_B, S = PS_S, L = PS_L, T = 2 };
  float w[V * D], pt[L * D], seg[T * D], g[D], b[D];
  int32_t ids[B * S], sids[B * S];
  positions_inputs(w, pt, ids);
  uint64_t st = 11;
  for (int i = 0; i < T * D; i++) seg[i] = 0.3f * tu_rand(&st);
  for (int c = 0; c < D; c++) {
    g[c] = 1.0f + 0.2f * tu_rand(&st);
    b[c] = 0.1f * tu_rand(&st);
  }
  for (int i = 0; i < B * S; i++) sids[i] = i % S >= S / 2;
  size_t ss[2] = {T, D}, is[2] = {B, S}, gs[1] = {D}, bs[2] = {1, D};
  write_npy(P("seg.npy"), NPY_F4, 2, ss, seg);
  write_npy(P("sids.npy"), NPY_I4, 2, is, sids);
  write_npy(P("g.npy"), NPY_F4, 1, gs, g);
  write_npy(P("b.npy"), NPY_F4, 2, bs, b);
  for (int rms = 0; rms < 2; rms++) {
    if (rms)
      RUNS(0, "embed", "--table", P("wp.npy"), "--ids", P("ip.npy"), "--positions", P("pt.npy"), "--segments",
           P("seg.npy"), "--segment-ids", P("sids.npy"), "--norm", "rms", "--norm-weight", P("g.npy"), "-o",
           P("bert.npy"));
    else
      RUNS(0, "embed", "--table", P("wp.npy"), "--ids", P("ip.npy"), "--positions", P("pt.npy"), "--segments",
           P("seg.npy"), "--segment-ids", P("sids.npy"), "--norm", "layer", "--norm-weight", P("g.npy"),
           "--norm-bias", P("b.npy"), "--norm-eps", "1e-12", "-o", P("bert.npy"));
    npy_array a = {0};
    if (!read_npy(P("bert.npy"), &a)) continue;
    double worst = 0;
    int ok = a.ndim == 3 && a.count == B * S * D;
    for (int i = 0; i < B * S && ok; i++) {
      float x[D];
      double m = 0, v = 0;
      for (int c = 0; c < D; c++) {
        x[c] = (w[ids[i] * D + c] + pt[(i % S) * D + c]) + seg[sids[i] * D + c];
        m += x[c];
      }
      m = rms ? 0 : m / D;
      for (int c = 0; c < D; c++) v += (x[c] - m) * (x[c] - m);
      double r = 1 / sqrt(v / D + (rms ? 1e-5 : 1e-12));
      for (int c = 0; c < D; c++) {
        double y = (x[c] - m) * r * g[c] + (rms ? 0 : b[c]);
        worst = fmax(worst, fabs(((float *)a.data)[i * D + c] - y) / (1 + fabs(y)));
      }
    }
    EXPECT(ok && worst <= 1e-5, "embed --norm %s: shape %d, worst error %g", rms ? "rms" : "layer", a.ndim, worst);
    free_array(&a);
  }
  RUNS(1, "embed", "--table", P("wp.npy"), "--ids", P("ip.npy"), "--segment-ids", P("sids.npy"), "-o",
       P("bert_bad.npy"));
  ERR_HAS("--segment-ids needs --segments");
  RUNS(1, "embed", "--table", P("wp.npy"), "--ids", P("ip.npy"), "--norm", "rms", "--norm-bias", P("b.npy"), "-o",
       P("bert_bad.npy"));
  ERR_HAS("--norm-bias");
  RUNS(1, "embed", "--table", P("wp.npy"), "--ids", P("ip.npy"), "--norm", "layer", "--norm-weight", P("seg.npy"),
       "-o", P("bert_bad.npy"));
  ERR_HAS("--norm-weight");
  RUNS(1, "embed", "--table", P("wp.npy"), "--ids", P("ip.npy"), "--norm-eps", "1e-6", "-o", P("bert_bad.npy"));
  ERR_HAS("--norm-eps needs --norm");
  /* ids as segment ids: outside the 2 types, exit 1 naming --segment-ids */
  RUNS(1, "embed", "--table", P("wp.npy"), "--ids", P("ip.npy"), "--segments", P("seg.npy"), "--segment-ids",
       P("ip.npy"), "-o", P("bert_bad.npy"));
  ERR_HAS("--segment-ids");
  ERR_HAS("segment_ids[1] = 4 is outside [0, 2)");
  EXPECT(!exists(P("bert_bad.npy")), "output written after a bad segment id");
}

/* A temporary directory, and `clembed devices` must find a device. */
static void setup(clembed_context *unused) {
  if (!g_exe) {
    fprintf(stderr, "usage: test_cli PATH/TO/clembed [CASE...]\n");
    exit(2);
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/test_cli.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    exit(1);
  }
  int r = CLI("devices");
  if (r != 0) {
    const char *allow = getenv("CLEMBED_ALLOW_NO_DEVICE");
    fprintf(stderr, "clembed devices exits %d: %s", r, g_err);
    if (allow && !strcmp(allow, "1")) exit(77);
    exit(1);
  }
  printf("%s", g_out);
}

/* The directory is removed when every case passed, kept otherwise. */
static void teardown(clembed_context *unused) {
  if (!tu_failures) {
    DIR *d = opendir(g_dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        char path[sizeof g_dir + sizeof e->d_name + 1];
        snprintf(path, sizeof path, "%s/%s", g_dir, e->d_name);
        unlink(path);
      }
    if (d) closedir(d);
    rmdir(g_dir);
  } else {
    printf("files kept in %s\n", g_dir);
  }
}

int main(int argc, char **argv) {
  /* the binary comes first (but --list needs none) */
  if (argc > 1 && strncmp(argv[1], "--", 2) != 0) {
    g_exe = argv[1];
    argv[1] = argv[0];
    argc--;
    argv++;
  }
  return tu_main(argc, argv, (tu_suite){.name = "test_cli", .setup = setup, .teardown = teardown});
}
