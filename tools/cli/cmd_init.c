/* clembed init: table initialisation (Philox). */
#include "cli.h"

#include <stdio.h>

static const char usage[] =
    "usage: clembed init --rows V --dim D (--normal MEAN,STD | --uniform LOW,HIGH) [--seed S]\n"
    "                    [--dtype f32|f16] [--out-dtype f32|f16|bf16] [--device SPEC]\n"
    "                    -o W.npy|W.safetensors\n"
    "\n"
    "A (V, D) table from the counter-based Philox generator: the same numbers on every device.\n"
    "  --rows V          the rows (0 or more)\n"
    "  --dim D           the columns (at least 1)\n"
    "  --normal MEAN,STD normal values (STD >= 0)\n"
    "  --uniform LOW,HIGH  uniform values from LOW to HIGH (LOW <= HIGH); one of the two is needed\n"
    "  --seed S          the generator's seed (default 0)\n"
    "  --dtype           f32 (default) or f16: the table's dtype on the device\n"
    "  --out-dtype       f32, f16 or bf16 (default: --dtype's), converted when written; bf16\n"
    "                    only into .safetensors\n"
    "  -o, --output      the table (.npy, or .safetensors: one tensor \"output\"), or - for\n"
    "                    standard output (.npy)\n" CLI_DEVICE_USAGE;

int cli_cmd_init(int argc, char **argv) {
  cli_flag fl[] = {FV("--rows"), FV("--dim"),   FV("--normal"), FV("--uniform"),
                   FV("--seed"), FV("--dtype"), FV("--device"), FA("--output", "-o"),
                   FV("--out-dtype")};
  cli_parse_flags(argc, argv, fl, NFLAGS(fl), usage);
  static const char *const req[] = {"--rows", "--dim", "--output", NULL};
  cli_require(fl, NFLAGS(fl), req);
  if (GIVEN("--normal") && GIVEN("--uniform")) cli_fail_usage("--normal and --uniform exclude each other");
  if (!GIVEN("--normal") && !GIVEN("--uniform")) cli_fail_usage("missing --normal MEAN,STD or --uniform LOW,HIGH");
  size_t rows = cli_arg_size("--rows", VAL("--rows")), dim = cli_arg_dim("--dim", VAL("--dim"));
  uint64_t seed = VAL("--seed") ? cli_arg_u64("--seed", VAL("--seed")) : 0;
  clembed_dtype dt = VAL("--dtype") ? cli_arg_dtype("--dtype", VAL("--dtype"), CLI_DT_NPY) : CLEMBED_F32;
  float a, b;
  int normal = GIVEN("--normal");
  if (normal) {
    cli_arg_pair("--normal", VAL("--normal"), "MEAN,STD", &a, &b);
    if (!(b >= 0.0f)) cli_fail(1, "--normal: STD %g is negative", (double)b);
  } else {
    cli_arg_pair("--uniform", VAL("--uniform"), "LOW,HIGH", &a, &b);
    if (!(a <= b)) cli_fail(1, "--uniform: LOW %g is greater than HIGH %g", (double)a, (double)b);
  }
  size_t bytes = cli_mul3(rows, dim, clembed_dtype_size(dt), "--rows x --dim");
  cli_output_open(VAL("--output"));
  clembed_dtype out_dt = cli_output_dtype(VAL("--out-dtype"), dt);

  cli_open_device(VAL("--device"));
  cli_memory_budget(bytes, bytes);
  clembed_matrix *m = cli_zeros(rows, dim, dt);
  if (rows) {
    if (normal) cli_check(clembed_matrix_init_normal(cli_ctx, m, a, b, seed, 0, NULL, NULL));
    else cli_check(clembed_matrix_init_uniform(cli_ctx, m, a, b, seed, 0, NULL, NULL));
  }
  void *h = cli_download(m, out_dt);
  size_t shape[2] = {rows, dim};
  cli_output_array(out_dt, 2, shape, h);
  cli_release_all();
  return 0;
}
