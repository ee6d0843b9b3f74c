/* clembed sgd: one fused sparse SGD step. */
#include "cli.h"

#include <stdio.h>

static const char usage[] =
    "usage: clembed sgd --table W.npy --ids IDS.npy --grad G.npy --lr LR [--scale S|sqrt]\n"
    "                   [--padding-idx V] [--scale-grad-by-freq] [--on-bad-id check|clamp|zero|wrap]\n"
    "                   [--dropout P --seed S] [--out-dtype f32|f16|bf16] [--device SPEC]\n"
    "                   -o W2.npy|W2.safetensors\n"
    "\n"
    "One fused sparse SGD step: W[v] -= LR * dW[v] for the rows v that occur in the ids, on\n"
    "the table in its own dtype (f32, f16 or bf16); the output has that dtype unless\n"
    "--out-dtype says otherwise (a bf16 table is written as <f4 into a .npy), and the\n"
    "table's shape. dW is the dense gradient `clembed backward` writes for the same flags.\n"
    "  --table W             the table (V, D), f32, f16 or bf16 (2 or more dimensions: rows\n"
    "                        and the product of the rest, as clembed_matrix_load reads them)\n"
    "  --ids IDS.npy         i32 or i64 ids, (n,) or (batch, seq)\n"
    "  --grad G.npy          f32 or f16 gradient of the forward's output, ids.shape + (D,)\n"
    "  --lr LR               the learning rate\n"
    "  --scale               the forward's scale, or sqrt for sqrt(D) (default 1)\n"
    "  --padding-idx V       this row gets no step (negative: counts from the end)\n"
    "  --scale-grad-by-freq  divide each id's gradient by its count\n"
    "  --on-bad-id           check (default: exit 1 naming the position), clamp, zero, wrap\n"
    "  --dropout P, --seed S the forward's dropout and seed\n"
    "  --out-dtype           f32, f16 or bf16 (default: the table's; bf16 only into .safetensors)\n"
    "  -o, --output          the stepped table (.npy, or .safetensors: one tensor \"output\"), or -\n"
    "                        for standard output (.npy)\n" CLI_DEVICE_USAGE;

clembed_backward_options cli_backward_flags(cli_flag *fl, size_t nf, size_t rows, size_t dim);

int cli_cmd_sgd(int argc, char **argv) {
  cli_flag fl[] = {FV("--table"),       FV("--ids"),     FV("--grad"), FV("--lr"),
                   FV("--scale"),       FV("--padding-idx"), FS("--scale-grad-by-freq"), FV("--on-bad-id"),
                   FV("--dropout"),     FV("--seed"),    FV("--device"), FA("--output", "-o"),
                   FV("--out-dtype")};
  cli_parse_flags(argc, argv, fl, NFLAGS(fl), usage);
  static const char *const req[] = {"--table", "--ids", "--grad", "--lr", "--output", NULL};
  cli_require(fl, NFLAGS(fl), req);
  float lr = cli_arg_float("--lr", VAL("--lr"));
  cli_check_scale(VAL("--scale"));
  cli_arg_policy(VAL("--on-bad-id"));
  cli_arg_dropout(VAL("--dropout"));
  cli_output_open(VAL("--output"));

  const char *tpath = VAL("--table"), *ipath = VAL("--ids");
  const npy_array *w = cli_load_table("--table", tpath);
  const npy_array *ids = cli_load_ids("--ids", ipath);
  const npy_array *g = cli_load_grad(VAL("--grad"), ids, ipath);
  size_t rows = w->shape[0], dim = w->shape[1], n = ids->count;
  clembed_dtype out_dt = cli_output_dtype(VAL("--out-dtype"), cli_input_dtype(w));
  if (g->shape[g->ndim - 1] != dim)
    cli_fail(1, "--grad %s: has %zu columns but --table %s has %zu", VAL("--grad"), g->shape[g->ndim - 1], tpath,
             dim);
  clembed_backward_options o = cli_backward_flags(fl, NFLAGS(fl), rows, dim);
  o.seq_len = ids->ndim == 2 ? ids->shape[1] : 0;
  char ids_what[1100];
  snprintf(ids_what, sizeof ids_what, "--ids %s", ipath);
  cli_blame(ids_what, NULL);
  if (dim == 0) cli_check_ids_host(ids, rows, o.policy, ids_what);
  size_t table_bytes = cli_array_bytes(w);
  uint64_t device = (uint64_t)table_bytes + cli_mul3(n, dim, sizeof(float), "--grad") + cli_array_bytes(ids) +
                    (uint64_t)n * 32u;

  cli_open_device(VAL("--device"));
  /* an <f2 gradient goes to the device as F32 through a host buffer */
  uint64_t convert = g->dtype == NPY_F2 ? (uint64_t)n * dim * sizeof(float) : 0;
  cli_memory_budget(table_bytes + convert, device);
  clembed_dtype dt = cli_input_dtype(w); /* the table's own: bf16 for a BF16 tensor */
  clembed_matrix *table = cli_upload_table(w, dt);
  clembed_matrix *grad = cli_upload(g->data, cli_host_dtype(g->dtype), n, dim, CLEMBED_F32);
  clembed_ids *d_ids = cli_upload_ids(ids);
  cli_check(clembed_sgd_update(cli_ctx, grad, d_ids, lr, &o, table, 0, NULL, NULL));
  void *h = cli_download(table, out_dt);
  size_t shape[CLEMBED_FILE_MAX_DIMS]; /* the table's own shape */
  int ndim = cli_input_shape(w, shape, CLEMBED_FILE_MAX_DIMS);
  cli_output_array(out_dt, ndim, shape, h);
  cli_release_all();
  return 0;
}
