/* clembed backward: the dense table gradient; and the options it shares with sgd. */
#include "cli.h"

#include <stdio.h>

static const char usage[] =
    "usage: clembed backward --ids IDS.npy --grad G.npy --vocab V [--scale S|sqrt]\n"
    "                        [--padding-idx V] [--scale-grad-by-freq] [--atomic]\n"
    "                        [--on-bad-id check|clamp|zero|wrap] [--dropout P --seed S]\n"
    "                        [--out-dtype f32|f16|bf16] [--device SPEC] -o DW.npy|DW.safetensors\n"
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
    "  --out-dtype           f32 (default), f16 or bf16 (bf16 only into .safetensors)\n"
    "  -o, --output          the output file (.npy, or .safetensors: one tensor \"output\"), or -\n"
    "                        for standard output (.npy)\n" CLI_DEVICE_USAGE;

/* Shared with sgd: the options from the flags. */
clembed_backward_options cli_backward_flags(cli_flag *fl, size_t nf, size_t rows, size_t dim);
clembed_backward_options cli_backward_flags(cli_flag *fl, size_t nf, size_t rows, size_t dim) {
  clembed_backward_options o = clembed_backward_defaults();
  o.scale = cli_arg_scale(cli_flag_get(fl, nf, "--scale")->value, dim);
  o.padding_idx = cli_arg_padding(cli_flag_get(fl, nf, "--padding-idx")->value, rows);
  o.scale_grad_by_freq = cli_flag_get(fl, nf, "--scale-grad-by-freq")->given;
  o.policy = cli_arg_policy(cli_flag_get(fl, nf, "--on-bad-id")->value);
  o.dropout = cli_arg_dropout(cli_flag_get(fl, nf, "--dropout")->value);
  const char *seed = cli_flag_get(fl, nf, "--seed")->value;
  o.dropout_seed = seed ? cli_arg_u64("--seed", seed) : 0;
  return o;
}

int cli_cmd_backward(int argc, char **argv) {
  cli_flag fl[] = {FV("--ids"),       FV("--grad"),    FV("--vocab"), FV("--scale"),
                   FV("--padding-idx"), FS("--scale-grad-by-freq"), FS("--atomic"), FV("--on-bad-id"),
                   FV("--dropout"),   FV("--seed"),    FV("--device"), FA("--output", "-o"),
                   FV("--out-dtype")};
  cli_parse_flags(argc, argv, fl, NFLAGS(fl), usage);
  static const char *const req[] = {"--ids", "--grad", "--vocab", "--output", NULL};
  cli_require(fl, NFLAGS(fl), req);
  size_t vocab = cli_arg_size("--vocab", VAL("--vocab"));
  cli_check_scale(VAL("--scale"));
  cli_arg_policy(VAL("--on-bad-id"));
  cli_arg_dropout(VAL("--dropout"));
  cli_output_open(VAL("--output"));
  clembed_dtype out_dt = cli_output_dtype(VAL("--out-dtype"), CLEMBED_F32);

  const char *ipath = VAL("--ids");
  const npy_array *ids = cli_load_ids("--ids", ipath);
  const npy_array *g = cli_load_grad(VAL("--grad"), ids, ipath);
  size_t n = ids->count, dim = g->shape[g->ndim - 1];
  clembed_backward_options o = cli_backward_flags(fl, NFLAGS(fl), vocab, dim);
  o.deterministic = !GIVEN("--atomic");
  o.accumulate = 1;
  o.seq_len = ids->ndim == 2 ? ids->shape[1] : 0;
  char ids_what[1100];
  snprintf(ids_what, sizeof ids_what, "--ids %s", ipath);
  cli_blame(ids_what, NULL);
  if (dim == 0) cli_check_ids_host(ids, vocab, o.policy, ids_what);
  size_t out_bytes = cli_mul3(vocab, dim, sizeof(float), "--vocab x D");
  /* the gradient on the device, the ids, the result, and the sort's keys and indices */
  uint64_t device = (uint64_t)cli_mul3(n, dim, sizeof(float), "--grad") + cli_array_bytes(ids) + out_bytes +
                    (uint64_t)n * 32u;

  cli_open_device(VAL("--device"));
  /* an <f2 gradient goes to the device as F32 through a host buffer */
  uint64_t convert = g->dtype == NPY_F2 ? (uint64_t)n * dim * sizeof(float) : 0;
  cli_memory_budget(out_bytes + convert, device);
  clembed_matrix *grad = cli_upload(g->data, cli_host_dtype(g->dtype), n, dim, CLEMBED_F32);
  clembed_ids *d_ids = cli_upload_ids(ids);
  clembed_matrix *dw = cli_zeros(vocab, dim, CLEMBED_F32);
  cli_check(clembed_backward(cli_ctx, grad, d_ids, &o, dw, 0, NULL, NULL));
  void *h = cli_download(dw, out_dt);
  size_t shape[2] = {vocab, dim};
  cli_output_array(out_dt, 2, shape, h);
  cli_release_all();
  return 0;
}
