/* clembed positional: the sinusoid table. */
#include "cli.h"

#include <stdio.h>

static const char usage[] =
    "usage: clembed positional --length L --dim D [--first P] [--base B]\n"
    "                          [--exponent pair|index] [--layout interleaved|halves]\n"
    "                          [--out-dtype f32|f16|bf16] [--device SPEC] -o OUT.npy|OUT.safetensors\n"
    "\n"
    "Writes the sinusoid table of positions P .. P+L-1 as a (L, D) array (<f4 by default).\n"
    "  --length L      number of positions (rows)\n"
    "  --dim D         model dimension (columns, at least 1)\n"
    "  --first P       first position (default 0)\n"
    "  --base B        frequency base (default 10000)\n"
    "  --exponent      pair: w = B^(-2*floor(i/2)/D) (default); index: w = B^(-i/D)\n"
    "  --layout        interleaved: sin, cos, sin, ... (default); halves: all sin, then all cos\n"
    "  --out-dtype     f32 (default), f16 or bf16 (bf16 only into .safetensors)\n"
    "  -o, --output    the output file (.npy, or .safetensors: one tensor \"output\"), or -\n"
    "                  for standard output (.npy)\n" CLI_DEVICE_USAGE;

int cli_cmd_positional(int argc, char **argv) {
  cli_flag fl[] = {FV("--length"),   FV("--dim"),    FV("--first"),  FV("--base"),
                   FV("--exponent"), FV("--layout"), FV("--device"), FA("--output", "-o"),
                   FV("--out-dtype")};
  cli_parse_flags(argc, argv, fl, NFLAGS(fl), usage);
  static const char *const req[] = {"--length", "--dim", "--output", NULL};
  cli_require(fl, NFLAGS(fl), req);
  size_t length = cli_arg_size("--length", VAL("--length"));
  size_t dim = cli_arg_dim("--dim", VAL("--dim"));
  size_t first = VAL("--first") ? cli_arg_size("--first", VAL("--first")) : 0;
  clembed_sinusoid s = cli_arg_sinusoid(VAL("--base"), VAL("--exponent"), VAL("--layout"));
  size_t bytes = cli_mul3(length, dim, sizeof(float), "--length x --dim");
  cli_output_open(VAL("--output"));
  clembed_dtype out_dt = cli_output_dtype(VAL("--out-dtype"), CLEMBED_F32);

  cli_open_device(VAL("--device"));
  cli_memory_budget(bytes, bytes);
  clembed_matrix *out = cli_zeros(length, dim, out_dt);
  if (length) cli_check(clembed_positional(cli_ctx, &s, first, out, 0, NULL, NULL));
  void *h = cli_download(out, out_dt);
  size_t shape[2] = {length, dim};
  cli_output_array(out_dt, 2, shape, h);
  cli_release_all();
  return 0;
}
