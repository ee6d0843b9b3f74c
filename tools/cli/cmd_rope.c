/* clembed rope-cache and clembed rope: rotary position embeddings. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define ROPE_OPTIONS_USAGE                                                                                 \
  "  --head-dim H              columns per head\n"                                                         \
  "  --rotary-dim R            leading columns of each head that rotate (even; default H)\n"               \
  "  --base B                  rope_theta (default 10000)\n"                                               \
  "  --layout neox|gptj        neox: pairs (k, k + R/2) (default); gptj: pairs (2k, 2k + 1)\n"             \
  "  --scaling none|linear|ntk|yarn|llama3   frequency scaling (default none), as Hugging Face\n"          \
  "                            transformers computes it (modeling_rope_utils.py)\n"                        \
  "  --factor F                the scaling factor (linear, ntk, yarn, llama3)\n"                           \
  "  --original-max-position N the pretraining context (yarn, llama3; default 8192)\n"                     \
  "  --low-freq-factor X, --high-freq-factor Y   llama3 (defaults 1, 4)\n"                                 \
  "  --beta-fast A, --beta-slow B                yarn (defaults 32, 1)\n"                                  \
  "  --attention-factor M      multiplies cos and sin (default 1, yarn: 0.1 ln(F) + 1)\n"

#define ROPE_FLAGS                                                                                          \
  FV("--head-dim"), FV("--rotary-dim"), FV("--base"), FV("--layout"), FV("--scaling"), FV("--factor"),     \
      FV("--original-max-position"), FV("--low-freq-factor"), FV("--high-freq-factor"), FV("--beta-fast"), \
      FV("--beta-slow"), FV("--attention-factor")

static double arg_positive(const char *flag, const char *s) {
  double v;
  if (!cli_parse_double(s, &v)) cli_fail(1, "%s: '%s' is not a number", flag, s);
  if (!isfinite(v) || !(v > 0.0)) cli_fail(1, "%s: '%s' must be a finite number > 0", flag, s);
  return v;
}

/* The rope parameters from the shared flags (the library checks their combination). */
static clembed_rope rope_from_flags(cli_flag *fl, size_t nf) {
  static const char *const layouts[] = {"neox", "gptj", NULL};
  static const char *const scalings[] = {"none", "linear", "ntk", "yarn", "llama3", NULL};
  clembed_rope r = clembed_rope_defaults();
#define RVAL(n) (cli_flag_get(fl, nf, n)->value)
  r.head_dim = cli_arg_dim("--head-dim", RVAL("--head-dim"));
  if (RVAL("--rotary-dim")) r.rotary_dim = cli_arg_dim("--rotary-dim", RVAL("--rotary-dim"));
  if (RVAL("--base")) r.base = arg_positive("--base", RVAL("--base"));
  if (RVAL("--layout")) r.layout = (clembed_rope_layout)cli_arg_choice("--layout", RVAL("--layout"), layouts);
  if (RVAL("--scaling")) r.scaling = (clembed_rope_scaling)cli_arg_choice("--scaling", RVAL("--scaling"), scalings);
  if (RVAL("--factor")) r.factor = arg_positive("--factor", RVAL("--factor"));
  if (RVAL("--original-max-position"))
    r.original_max_position = cli_arg_dim("--original-max-position", RVAL("--original-max-position"));
  if (RVAL("--low-freq-factor")) r.low_freq_factor = arg_positive("--low-freq-factor", RVAL("--low-freq-factor"));
  if (RVAL("--high-freq-factor")) r.high_freq_factor = arg_positive("--high-freq-factor", RVAL("--high-freq-factor"));
  if (RVAL("--beta-fast")) r.beta_fast = arg_positive("--beta-fast", RVAL("--beta-fast"));
  if (RVAL("--beta-slow")) r.beta_slow = arg_positive("--beta-slow", RVAL("--beta-slow"));
  if (RVAL("--attention-factor")) r.attention_factor = arg_positive("--attention-factor", RVAL("--attention-factor"));
#undef RVAL
  if (r.scaling != CLEMBED_ROPE_SCALING_NONE && !cli_flag_get(fl, nf, "--factor")->value)
    cli_fail(1, "--scaling %s needs --factor", cli_flag_get(fl, nf, "--scaling")->value);
  if (r.rotary_dim > r.head_dim) cli_fail(1, "--rotary-dim %zu is larger than --head-dim %zu", r.rotary_dim, r.head_dim);
  if ((r.rotary_dim ? r.rotary_dim : r.head_dim) % 2)
    cli_fail(1, "%s must be even", r.rotary_dim ? "--rotary-dim" : "--head-dim (or give an even --rotary-dim)");
  return r;
}

static const char usage_cache[] =
    "usage: clembed rope-cache --length L --head-dim H [--rotary-dim R] [--first P] [--base B]\n"
    "                          [--layout neox|gptj] [--scaling none|linear|ntk|yarn|llama3] [--factor F]\n"
    "                          [--original-max-position N] [--low-freq-factor X] [--high-freq-factor Y]\n"
    "                          [--beta-fast A] [--beta-slow B] [--attention-factor M] [--device SPEC]\n"
    "                          -o CS.npy|CS.safetensors\n"
    "\n"
    "Writes the RoPE cos/sin cache of positions P .. P+L-1 as an (L, R) <f4 array: a*cos(p*w_k) in\n"
    "column k and a*sin(p*w_k) in column R/2 + k (vLLM's cos_sin_cache), within 1e-6*a of the exact\n"
    "values for every position below 2^32 (P + L past 2^32 is refused).\n"
    "  --length L                number of positions (rows)\n"
    "  --first P                 first position (default 0)\n" ROPE_OPTIONS_USAGE
    "  -o, --output              the output: .npy, or .safetensors (one tensor \"output\"), or - for\n"
    "                            standard output (.npy)\n" CLI_DEVICE_USAGE;

int cli_cmd_rope_cache(int argc, char **argv) {
  cli_flag fl[] = {FV("--length"), FV("--first"), ROPE_FLAGS, FV("--device"), FA("--output", "-o")};
  cli_parse_flags(argc, argv, fl, NFLAGS(fl), usage_cache);
  static const char *const req[] = {"--length", "--head-dim", "--output", NULL};
  cli_require(fl, NFLAGS(fl), req);
  size_t length = cli_arg_size("--length", VAL("--length"));
  size_t first = VAL("--first") ? cli_arg_size("--first", VAL("--first")) : 0;
  clembed_rope r = rope_from_flags(fl, NFLAGS(fl));
  size_t R = r.rotary_dim ? r.rotary_dim : r.head_dim;
  size_t bytes = cli_mul3(length, R, sizeof(float), "--length x rotary dimension");
  cli_output_open(VAL("--output"));

  cli_open_device(VAL("--device"));
  cli_memory_budget(bytes, bytes);
  clembed_matrix *cs = cli_zeros(length, R, CLEMBED_F32);
  cli_check(clembed_rope_cache(cli_ctx, &r, first, cs, 0, NULL, NULL));
  float *h = cli_download(cs, CLEMBED_F32);
  size_t shape[2] = {length, R};
  cli_output_array(CLEMBED_F32, 2, shape, h);
  cli_release_all();
  return 0;
}

static const char usage_rope[] =
    "usage: clembed rope --input X.npy --head-dim H [rope-cache's options] [--positions P.npy | --offset P]\n"
    "                    [--inverse] [--out-dtype f32|f16|bf16] [--device SPEC] -o OUT.npy|OUT.safetensors\n"
    "\n"
    "Applies RoPE to X (f32, f16 or bf16): (T, C) with C a multiple of H, (T, heads, H), or (B, S, heads, H)\n"
    "(then positions are per sequence). Each pair (a, b) of the first R columns of each head becomes\n"
    "(a*c - b*s, b*c + a*s); columns past R are copied. The output has X's shape.\n"
    "  --input X                 the queries or keys\n"
    "  --positions P.npy         <i4/<i8 positions, shape (T,) or (B, S); each in [0, 2^32)\n"
    "  --offset P                without --positions: row i is at P + i (P + i % S for (B, S, heads, H))\n"
    "  --inverse                 rotate back (-s): undoes a rotation, and is the backward\n"
    "  --out-dtype f32|f16|bf16  the output's dtype (default: X's; a bf16 X into a .npy: f32; bf16 only\n"
    "                            into .safetensors)\n" ROPE_OPTIONS_USAGE
    "  -o, --output              the output: .npy, or .safetensors (one tensor \"output\"), or - for\n"
    "                            standard output (.npy)\n" CLI_DEVICE_USAGE;

int cli_cmd_rope(int argc, char **argv) {
  cli_flag fl[] = {FV("--input"),     FV("--positions"), FV("--offset"), FS("--inverse"), FV("--out-dtype"),
                   ROPE_FLAGS,        FV("--device"),    FA("--output", "-o")};
  cli_parse_flags(argc, argv, fl, NFLAGS(fl), usage_rope);
  static const char *const req[] = {"--input", "--head-dim", "--output", NULL};
  cli_require(fl, NFLAGS(fl), req);
  if (VAL("--positions") && VAL("--offset")) cli_fail_usage("--positions and --offset exclude each other");
  clembed_rope r = rope_from_flags(fl, NFLAGS(fl));
  if (VAL("--out-dtype")) cli_arg_dtype("--out-dtype", VAL("--out-dtype"), CLI_DT_FLOAT);
  size_t offset = VAL("--offset") ? cli_arg_size("--offset", VAL("--offset")) : 0;

  const npy_array *x = cli_load_as("--input", VAL("--input"), CLI_TAKES_FLOAT);
  size_t rows, cols, seq_len = 0;
  if (x->ndim == 2) {
    rows = x->shape[0];
    cols = x->shape[1];
    if (cols % r.head_dim)
      cli_fail(1, "--input %s: %zu columns is not a multiple of --head-dim %zu", VAL("--input"), cols, r.head_dim);
  } else if (x->ndim == 3 || x->ndim == 4) {
    size_t hd = x->shape[x->ndim - 1];
    if (hd != r.head_dim)
      cli_fail(1, "--input %s: the last dimension is %zu but --head-dim is %zu", VAL("--input"), hd, r.head_dim);
    rows = x->ndim == 3 ? x->shape[0] : cli_mul3(x->shape[0], x->shape[1], 1, "--input's B x S");
    cols = cli_mul3(x->shape[x->ndim - 2], hd, 1, "--input's heads x head_dim");
    if (x->ndim == 4) seq_len = x->shape[1];
  } else {
    cli_fail(1, "--input %s: %d dimensions; X must be (T, C), (T, heads, H) or (B, S, heads, H)", VAL("--input"),
             x->ndim);
  }
  const npy_array *pos = NULL;
  if (VAL("--positions")) {
    pos = cli_load_ids("--positions", VAL("--positions"));
    int ok = pos->count == rows &&
             (pos->ndim == 1 || (x->ndim == 4 && pos->shape[0] == x->shape[0] && pos->shape[1] == x->shape[1]));
    if (!ok)
      cli_fail(1, "--positions %s: %zu positions in %d dimensions for %zu rows of --input%s", VAL("--positions"),
               pos->count, pos->ndim, rows, x->ndim == 4 ? " (shape (B, S) or (B*S,))" : "");
  }
  char pos_what[1100];
  snprintf(pos_what, sizeof pos_what, "--positions %s", VAL("--positions") ? VAL("--positions") : "");
  cli_blame(NULL, VAL("--positions") ? pos_what : "--offset");

  clembed_dtype in_dt = cli_host_dtype(x->dtype);
  cli_output_open(VAL("--output"));
  clembed_dtype out_dt = cli_output_dtype(VAL("--out-dtype"), cli_input_dtype(x)); /* default: X's own */
  size_t in_bytes = cli_array_bytes(x), out_bytes = cli_mul3(rows, cols, clembed_dtype_size(out_dt), "--input");

  cli_open_device(VAL("--device"));
  cli_memory_budget(out_bytes, in_bytes + out_bytes);
  clembed_matrix *dx = cli_upload(x->data, in_dt, rows, cols, in_dt);
  clembed_matrix *out = cli_zeros(rows, cols, out_dt);
  clembed_ids *dpos = pos ? cli_upload_ids(pos) : NULL;
  cli_check(clembed_rope_apply(cli_ctx, &r, dx, dpos, seq_len, offset, GIVEN("--inverse"), out, 0, NULL, NULL));
  void *h = cli_download(out, out_dt);
  cli_output_array(out_dt, x->ndim, x->shape, h);
  cli_release_all();
  return 0;
}
