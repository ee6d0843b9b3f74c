/* clembed bag: bags of ids pooled per sample (EmbeddingBag). */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: clembed bag --table W.npy --ids IDS.npy [--offsets OFF.npy [--include-last-offset]]\n"
    "                   --mode sum|mean|max [--weights PSW.npy] [--padding-idx V]\n"
    "                   [--on-bad-id check|clamp|zero|wrap] [--dtype f32|f16|bf16|q8_0|q4_0|i8_rowwise|...]\n"
    "                   [--remap REMAP.npy] [--out-dtype f32|f16|bf16] [--device SPEC]\n"
    "                   -o OUT.npy|OUT.safetensors\n"
    "\n"
    "Each bag of ids pooled into one row (PyTorch's F.embedding_bag); output shape (B, D).\n"
    "  --table W         table (V, D): .npy (<f4, <f2), .safetensors or .gguf (FILE:NAME picks a\n"
    "                    tensor), of any dtype:\n"
    "                    " CLI_TABLE_DTYPES "\n"
    "  --ids IDS.npy     <i4 or <i8 ids: 2-D (B, L) without --offsets, B bags of L ids; 1-D\n"
    "                    (n,) with --offsets\n"
    "  --offsets OFF     <i4 or <i8, 1-D: the B bags' first positions (bag b is ids[OFF[b] ..\n"
    "                    OFF[b+1]), the last to the end), starting at 0 and never decreasing\n"
    "  --include-last-offset   OFF holds B + 1 entries, the last the number of ids (CSR)\n"
    "  --mode            sum, mean or max, per column over the bag's ids in order; an empty bag\n"
    "                    gives zeros\n"
    "  --weights PSW     per-sample weights (f32, f16 or bf16: <f4 or <f2 in a .npy), the shape of\n"
    "                    the ids (mode sum only)\n"
    "  --padding-idx V   ids equal to V are left out of their bag and of mean's count\n"
    "                    (negative: counts from the end)\n"
    "  --on-bad-id       check (default: exit 1 naming the position), clamp, zero (left out of\n"
    "                    the bag), wrap\n"
    "  --dtype           the table's device dtype (default: the table's own), as `clembed embed`\n"
    "  --remap REMAP     a pruned table (FBGEMM's pruned_array): <i4 or <i8, 1-D, an entry per id\n"
    "                    of the unpruned table, the row of W it reads or -1 for a pruned id (adds\n"
    "                    nothing, counts in mean's length); the ids and --padding-idx are then\n"
    "                    ids of the unpruned table, below len(REMAP)\n"
    "  -o, --output      the output (- for standard output: .npy): <f2 for a <f2 table with\n"
    "                    --dtype f16 or none, else <f4; .safetensors: one tensor \"output\"\n"
    "  --out-dtype       f32, f16 or bf16 (bf16 only into .safetensors)\n" CLI_DEVICE_USAGE;

static int64_t id_at(const npy_array *a, size_t i) {
  return a->dtype == NPY_I8 ? ((const int64_t *)a->data)[i] : ((const int32_t *)a->data)[i];
}

int cli_cmd_bag(int argc, char **argv) {
  cli_flag fl[] = {FV("--table"),       FV("--ids"),       FV("--offsets"), FS("--include-last-offset"),
                   FV("--mode"),        FV("--weights"),   FV("--padding-idx"), FV("--on-bad-id"),
                   FV("--dtype"),       FV("--out-dtype"), FV("--device"), FV("--remap"),
                   FA("--output", "-o")};
  cli_parse_flags(argc, argv, fl, NFLAGS(fl), usage);
  static const char *const req[] = {"--table", "--ids", "--mode", "--output", NULL};
  cli_require(fl, NFLAGS(fl), req);
  static const char *const modes[] = {"sum", "mean", "max", NULL}; /* clembed_bag_mode order */
  clembed_bag_options o = clembed_bag_defaults();
  o.mode = (clembed_bag_mode)cli_arg_choice("--mode", VAL("--mode"), modes);
  o.policy = cli_arg_policy(VAL("--on-bad-id"));
  int dtype_flag = VAL("--dtype") ? (int)cli_arg_dtype("--dtype", VAL("--dtype"), CLI_DT_EMBED) : -1;
  if (GIVEN("--include-last-offset") && !GIVEN("--offsets")) cli_fail_usage("--include-last-offset needs --offsets");
  if (GIVEN("--weights") && o.mode != CLEMBED_BAG_SUM) cli_fail(1, "--weights needs --mode sum");
  cli_output_open(VAL("--output"));

  const char *tpath = VAL("--table"), *ipath = VAL("--ids"), *opath = VAL("--offsets");
  const npy_array *w = cli_load_table_file("--table", tpath);
  const npy_array *ids = cli_load_ids("--ids", ipath);
  clembed_dtype table_dt = dtype_flag >= 0 ? (clembed_dtype)dtype_flag : cli_input_dtype(w);
  size_t rows = w->shape[0], dim = cli_table_cols("--table", tpath, w, table_dt), n = ids->count, bags;
  const npy_array *rmap = cli_load_remap(VAL("--remap"));
  o.padding_idx = cli_arg_padding(VAL("--padding-idx"), rmap ? rmap->count : rows);
  /* the bags: B + 1 offsets on the device (CSR), from B starts or B + 1 entries, checked here */
  int64_t *csr = NULL;
  if (opath) {
    const npy_array *off = cli_load_ids("--offsets", opath);
    if (ids->ndim != 1) cli_fail(1, "--ids %s: with --offsets the ids must be 1-D (n,)", ipath);
    if (off->ndim != 1) cli_fail(1, "--offsets %s: must be 1-D", opath);
    int last = GIVEN("--include-last-offset");
    if (last && off->count == 0) cli_fail(1, "--offsets %s: --include-last-offset needs at least one entry", opath);
    bags = last ? off->count - 1 : off->count;
    csr = cli_malloc((bags + 1) * sizeof *csr);
    for (size_t b = 0; b < off->count; b++) csr[b] = id_at(off, b);
    if (!last) csr[bags] = (int64_t)n;
    if (!last && bags == 0 && n) cli_fail(1, "--offsets %s: no bags but %zu ids", opath, n);
    for (size_t b = 0; b < off->count; b++) {
      int64_t v = csr[b], before = b ? csr[b - 1] : 0;
      const char *why = b == 0 && v != 0                       ? "the first offset must be 0"
                        : v < before                           ? "offsets must not decrease"
                        : v > (int64_t)n                       ? "past the number of ids"
                        : b == bags && last && v != (int64_t)n ? "the last offset must be the number of ids"
                                                               : NULL;
      if (why) cli_fail(1, "--offsets %s: offsets[%zu] = %" PRId64 ": %s (%zu ids)", opath, b, v, why, n);
    }
  } else {
    if (ids->ndim != 2) cli_fail(1, "--ids %s: 1-D ids need --offsets (2-D ids are bags of one size)", ipath);
    bags = ids->shape[0];
  }
  const npy_array *psw = NULL;
  if (GIVEN("--weights")) {
    psw = cli_load_as("--weights", VAL("--weights"), CLI_TAKES_FLOAT); /* a type it refuses: the message lists these */
    if (psw->ndim != ids->ndim || memcmp(psw->shape, ids->shape, (size_t)ids->ndim * sizeof *ids->shape) != 0)
      cli_fail(1, "--weights %s: must have the shape of --ids %s", VAL("--weights"), ipath);
  }
  char ids_what[1100];
  snprintf(ids_what, sizeof ids_what, "--ids %s", ipath);
  cli_blame(ids_what, NULL);

  int f16_out = w->dtype == NPY_F2 && (dtype_flag < 0 || dtype_flag == CLEMBED_F16);
  clembed_dtype out_dt = cli_output_dtype(VAL("--out-dtype"), f16_out ? CLEMBED_F16 : CLEMBED_F32);
  size_t out_bytes = cli_mul3(bags, dim, clembed_dtype_size(out_dt), "the output");
  uint64_t device = (uint64_t)cli_mul3(rows, clembed_dtype_row_bytes(table_dt, dim), 1, "--table") +
                    cli_array_bytes(ids) + (bags + 1) * 8u + (psw ? (uint64_t)n * 4u : 0) + out_bytes +
                    (rmap ? cli_array_bytes(rmap) : 0);

  cli_open_device(VAL("--device"));
  uint64_t convert = table_dt != cli_host_dtype(w->dtype) && !cli_input_in_file(w)
                         ? (uint64_t)rows * clembed_dtype_row_bytes(table_dt, dim)
                         : 0;
  cli_memory_budget(out_bytes + convert + (psw ? (uint64_t)n * 4u : 0), device);
  clembed_matrix *table = cli_upload_table(w, table_dt);
  clembed_ids *d_ids = cli_upload_ids(ids), *d_off = NULL;
  if (csr) {
    d_off = cli_new_ids();
    cli_check(clembed_ids_create(cli_ctx, csr, bags + 1, CLEMBED_I64, d_off));
  }
  if (psw) o.per_sample_weights = cli_upload(psw->data, cli_host_dtype(psw->dtype), n, 1, CLEMBED_F32);
  if (rmap) o.remap = cli_upload_ids(rmap);
  clembed_matrix *out = cli_zeros(bags, dim, out_dt);
  cli_check(clembed_embedding_bag(cli_ctx, table, d_ids, d_off, &o, out, 0, NULL, NULL));
  void *h = cli_download(out, out_dt);
  size_t shape[2] = {bags, dim};
  cli_output_array(out_dt, 2, shape, h);
  cli_release_all();
  return 0;
}
