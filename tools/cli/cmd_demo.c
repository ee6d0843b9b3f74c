/* clembed demo: the tutorial end to end on the default device; demo model:
 * a model file's embedding table looked up. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: clembed demo [--device SPEC]\n"
    "       clembed demo model FILE[:NAME] [--ids I,J,...] [--dtype f32|f16|bf16|q8_0|q4_0|i8_rowwise|...] [--device SPEC]\n"
    "\n"
    "The tutorial end to end: token embedding, positional encodings, their sum, the\n"
    "backward step and one SGD step, printed as small matrices, and a rotary embedding\n"
    "(RoPE) far into a sequence beside what float32's p*w gives.\n"
    "\n"
    "demo model FILE: lists the tensors of a .npy, .safetensors or .gguf file (as `clembed\n"
    "inspect`), loads its embedding table (a .gguf file's token_embd.weight, a file's only\n"
    "tensor, or NAME), quantized or float, onto the device as it lies (or as --dtype), looks\n"
    "up a short sentence of ids (--ids, default five ids spread over the vocabulary) and\n"
    "prints the first values of each row (`clembed demo model --help` for its flags).\n"
    "  --device SPEC   the device (as `clembed --help` says; default: the default device)\n";

static const char model_usage[] =
    "usage: clembed demo model FILE[:NAME] [--ids I,J,...] [--dtype f32|f16|bf16|q8_0|q4_0|i8_rowwise|...] [--device SPEC]\n"
    "\n"
    "Lists the tensors of a .npy, .safetensors or .gguf file (as `clembed inspect`), loads\n"
    "its embedding table (a .gguf file's token_embd.weight, a file's only tensor, or NAME),\n"
    "quantized or float, onto the device as it lies (or as --dtype), looks up a short\n"
    "sentence of ids and prints the first values of each row (as float32).\n"
    "  --ids I,J,...   the ids (default: five ids spread over the vocabulary)\n"
    "  --dtype         the table's device dtype (default: the file's own)\n"
    "  --device SPEC   the device (as `clembed --help` says; default: the default device)\n";

enum { DEMO_MAX_IDS = 64, DEMO_SHOWN = 8 };

static int demo_model(int argc, char **argv) {
  cli_flag fl[] = {FV("--ids"), FV("--dtype"), FV("--device")};
  const char *path = cli_parse_operand(argc, argv, fl, NFLAGS(fl), model_usage, "FILE");
  int dtype_flag = VAL("--dtype") ? (int)cli_arg_dtype("--dtype", VAL("--dtype"), CLI_DT_EMBED) : -1;

  /* the file's tensors (a FILE:NAME argument lists FILE) */
  char *file = cli_malloc(strlen(path) + 1);
  strcpy(file, path);
  FILE *probe = fopen(file, "rb");
  if (!probe) {
    char *colon = strrchr(file, ':');
    if (colon) *colon = '\0';
  } else {
    fclose(probe);
  }
  printf("%s:\n", file);
  fflush(stdout);
  char *inspect_argv[] = {"inspect", file, NULL};
  int rc = cli_cmd_inspect(2, inspect_argv);
  if (rc != 0) return rc;

  const npy_array *w = cli_load_table_file("--table", path);
  size_t rows = w->shape[0],
         dim = cli_table_cols("demo model", path, w,
                              dtype_flag >= 0 ? (clembed_dtype)dtype_flag : cli_input_dtype(w));
  if (rows == 0) cli_fail(1, "demo model %s: the table has no rows", path);
  int64_t ids[DEMO_MAX_IDS];
  size_t n = 0;
  if (VAL("--ids")) {
    const char *s = VAL("--ids");
    while (*s) {
      char *end;
      long long v = strtoll(s, &end, 10);
      if (end == s || (*end && *end != ',')) cli_fail(1, "--ids %s: not a comma-separated list of integers", VAL("--ids"));
      if (n == DEMO_MAX_IDS) cli_fail(1, "--ids: at most %d ids", DEMO_MAX_IDS);
      if (v < 0 || (unsigned long long)v >= rows)
        cli_fail(1, "--ids: id %lld is outside the table of %zu rows", v, rows);
      ids[n++] = v;
      s = *end ? end + 1 : end;
    }
    if (n == 0) cli_fail(1, "--ids: no id given");
  } else {
    for (size_t i = 0; i < 5 && i < rows; i++) ids[n++] = (int64_t)(rows < 5 ? i : i * (rows - 1) / 4);
  }
  clembed_dtype dt = dtype_flag >= 0 ? (clembed_dtype)dtype_flag : cli_input_dtype(w);

  cli_open_device(VAL("--device"));
  clembed_matrix *table = cli_upload_table(w, dt);
  npy_array pa = {NPY_I8, 1, {n}, n, ids};
  clembed_ids *d_ids = cli_upload_ids(&pa);
  clembed_matrix *out = cli_zeros(n, dim, CLEMBED_F32);
  cli_check(clembed_lookup(cli_ctx, table, d_ids, out, 0, NULL, NULL));
  float *h = cli_download(out, CLEMBED_F32);
  printf("\nthe table: %zu x %zu, %s on %s\n", rows, dim, cli_dtype_name(dt), clembed_context_device_name(cli_ctx));
  if (dim > DEMO_SHOWN)
    printf("a sentence of %zu ids, the first %d of each row's %zu values:\n", n, DEMO_SHOWN, dim);
  else
    printf("a sentence of %zu ids, the rows' %zu values:\n", n, dim);
  for (size_t i = 0; i < n; i++) {
    printf("  id %-8lld", (long long)ids[i]);
    for (size_t c = 0; c < dim && c < DEMO_SHOWN; c++) printf(" %.9g", (double)h[i * dim + c]);
    printf("%s\n", dim > DEMO_SHOWN ? " ..." : "");
  }
  cli_release_all();
  if (fflush(stdout) != 0 || ferror(stdout)) cli_fail(1, "writing to standard output failed");
  return 0;
}

static void print_matrix(const char *title, const float *m, size_t rows, size_t cols) {
  printf("  %s (%zu x %zu):\n", title, rows, cols);
  for (size_t r = 0; r < rows; r++) {
    printf("    [");
    for (size_t c = 0; c < cols; c++) printf("%s%8.5f", c ? " " : "", (double)m[r * cols + c]);
    printf("]\n");
  }
}

static float *demo_read(const clembed_matrix *m) {
  float *h = cli_download(m, CLEMBED_F32);
  return h;
}

int cli_cmd_demo(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "model")) return demo_model(argc - 1, argv + 1);
  cli_flag fl[] = {FV("--device")};
  cli_parse_flags(argc, argv, fl, NFLAGS(fl), usage);
  cli_blame("demo", NULL);
  cli_open_device(VAL("--device"));
  printf("clembed %d.%d.%d demo on %s\n\n", CLEMBED_VERSION_MAJOR, CLEMBED_VERSION_MINOR, CLEMBED_VERSION_PATCH,
         clembed_context_device_name(cli_ctx));

  /* 1. token embedding */
  enum { V1 = 3, D1 = 10, T1 = 3 };
  float w1[V1 * D1];
  for (int r = 0; r < V1; r++)
    for (int c = 0; c < D1; c++) w1[r * D1 + c] = (float)r;
  const int32_t sentence[T1] = {0, 1, 2};
  printf("1. Token embedding: a vocabulary of %d tokens whose row i is all i, d = %d, the sentence [0, 1, 2]\n",
         V1, D1);
  clembed_matrix *table = cli_upload(w1, CLEMBED_F32, V1, D1, CLEMBED_F32);
  clembed_ids *ids = cli_new_ids();
  cli_check(clembed_ids_create(cli_ctx, sentence, T1, CLEMBED_I32, ids));
  clembed_matrix *tok = cli_zeros(T1, D1, CLEMBED_F32);
  cli_check(clembed_lookup(cli_ctx, table, ids, tok, 0, NULL, NULL));
  print_matrix("token embedding W[[0, 1, 2]]", demo_read(tok), T1, D1);
  printf("\n");

  /* 2. l_max = 5 as the base, exponent per index */
  enum { L2 = 5 };
  clembed_sinusoid s5 = clembed_sinusoid_defaults();
  s5.base = 5.0;
  s5.exponent = CLEMBED_EXPONENT_INDEX;
  printf("2. Positional encoding with l_max = %d as the base and the exponent per index "
         "(sin/cos of p * 5^(-i/d), interleaved), positions 0..%d\n", L2, L2 - 1);
  clembed_matrix *pe5 = cli_zeros(L2, D1, CLEMBED_F32);
  cli_check(clembed_positional(cli_ctx, &s5, 0, pe5, 0, NULL, NULL));
  print_matrix("positional table, l_max = 5", demo_read(pe5), L2, D1);
  clembed_embed_options o = clembed_embed_defaults();
  o.positions = CLEMBED_POSITIONS_SINUSOID;
  o.sinusoid = s5;
  clembed_matrix *sum5 = cli_zeros(T1, D1, CLEMBED_F32);
  cli_check(clembed_embed(cli_ctx, table, ids, &o, sum5, 0, NULL, NULL));
  print_matrix("token + position (positions 0..2)", demo_read(sum5), T1, D1);
  printf("\n");

  /* 3. the standard formula */
  clembed_sinusoid std = clembed_sinusoid_defaults(); /* 10000, PAIR, INTERLEAVED */
  printf("3. The standard formula (Vaswani et al.: base 10000, one frequency per sin/cos pair)\n");
  clembed_matrix *pe = cli_zeros(T1, D1, CLEMBED_F32);
  cli_check(clembed_positional(cli_ctx, &std, 0, pe, 0, NULL, NULL));
  print_matrix("positional table, positions 0..2", demo_read(pe), T1, D1);
  o.sinusoid = std;
  clembed_matrix *sum = cli_zeros(T1, D1, CLEMBED_F32);
  cli_check(clembed_embed(cli_ctx, table, ids, &o, sum, 0, NULL, NULL));
  print_matrix("token + position", demo_read(sum), T1, D1);
  printf("\n");

  /* 4. backward and one SGD step */
  enum { V4 = 5, D4 = 3, B4 = 2, S4 = 2 };
  const int32_t ids4[B4 * S4] = {0, 1, 2, 2};
  const float g4[B4 * S4 * D4] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 1.0f, 1.1f, 1.2f};
  printf("4. Backward: a vocabulary of %d tokens, d = %d, ids [[0, 1], [2, 2]]\n", V4, D4);
  print_matrix("gradient of the output, one row per token", g4, B4 * S4, D4);
  clembed_ids *d_ids4 = cli_new_ids();
  cli_check(clembed_ids_create(cli_ctx, ids4, B4 * S4, CLEMBED_I32, d_ids4));
  clembed_matrix *grad = cli_upload(g4, CLEMBED_F32, B4 * S4, D4, CLEMBED_F32);
  clembed_matrix *dw = cli_zeros(V4, D4, CLEMBED_F32);
  clembed_backward_options bo = clembed_backward_defaults();
  bo.seq_len = S4;
  cli_check(clembed_backward(cli_ctx, grad, d_ids4, &bo, dw, 0, NULL, NULL));
  float *hdw = demo_read(dw);
  print_matrix("dW", hdw, V4, D4);
  int equal = 1;
  for (int c = 0; c < D4; c++) equal &= hdw[2 * D4 + c] == g4[2 * D4 + c] + g4[3 * D4 + c];
  printf("  dW[2] = [%.5f, %.5f, %.5f] = grad[1][0] + grad[1][1] (token 2 occurs twice): %s\n",
         (double)hdw[2 * D4], (double)hdw[2 * D4 + 1], (double)hdw[2 * D4 + 2], equal ? "yes" : "NO");

  clembed_matrix *w4 = cli_zeros(V4, D4, CLEMBED_F32);
  cli_check(clembed_matrix_init_uniform(cli_ctx, w4, -1.0f, 1.0f, 42, 0, NULL, NULL));
  printf("  One SGD step, learning rate 0.1 (rows 3 and 4 do not occur and stay as they are):\n");
  print_matrix("table before (uniform in [-1, 1), seed 42)", demo_read(w4), V4, D4);
  cli_check(clembed_sgd_update(cli_ctx, grad, d_ids4, 0.1f, &bo, w4, 0, NULL, NULL));
  print_matrix("table after", demo_read(w4), V4, D4);

  /* 5. RoPE far into a sequence */
  enum { H5 = 8, T5 = 3 };
  const int64_t pos5[T5] = {1, (int64_t)1 << 17, (int64_t)1 << 31};
  float q[T5 * H5];
  for (int t = 0; t < T5; t++)
    for (int c = 0; c < H5; c++) q[t * H5 + c] = c < H5 / 2 ? 1.0f : 0.0f;
  printf("\n5. Rotary embeddings (RoPE, NEOX pairs (k, k + 4), head_dim %d, base 10000): the query\n"
         "   (1, 1, 1, 1, 0, 0, 0, 0) at positions 1, 2^17 and 2^31 becomes (cos p*w_k | sin p*w_k)\n",
         H5);
  clembed_rope r = clembed_rope_defaults();
  r.head_dim = H5;
  clembed_matrix *dq = cli_upload(q, CLEMBED_F32, T5, H5, CLEMBED_F32);
  npy_array pa = {NPY_I8, 1, {T5}, T5, (void *)pos5};
  clembed_ids *dp = cli_upload_ids(&pa);
  cli_check(clembed_rope_apply(cli_ctx, &r, dq, dp, 0, 0, 0, dq, 0, NULL, NULL));
  float *hq = demo_read(dq);
  print_matrix("rotated query", hq, T5, H5);
  printf("  pair 0 (w = 1, p*w exact in float32 too):\n  position      clembed (exact angle)        float32 p*w (as most frameworks)   double\n");
  for (int t = 0; t < T5; t++) {
    double p = (double)pos5[t];
    float a32 = (float)pos5[t] * 1.0f;
    printf("  p = %-10.0f  cos %9.6f sin %9.6f   cos %9.6f sin %9.6f        cos %9.6f sin %9.6f\n", p,
           (double)hq[t * H5], (double)hq[t * H5 + H5 / 2], (double)cosf(a32), (double)sinf(a32), cos(p), sin(p));
  }
  printf("  pair 1 (w = 0.1):\n");
  for (int t = 0; t < T5; t++) {
    double p = (double)pos5[t], w = pow(10000.0, -0.25);
    float a32 = (float)pos5[t] * (float)w;
    printf("  p = %-10.0f  cos %9.6f sin %9.6f   cos %9.6f sin %9.6f        cos %9.6f sin %9.6f\n", p,
           (double)hq[t * H5 + 1], (double)hq[t * H5 + H5 / 2 + 1], (double)cosf(a32), (double)sinf(a32), cos(p * w),
           sin(p * w));
  }
  cli_release_all();
  return equal ? 0 : 2;
}

