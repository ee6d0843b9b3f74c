/* clembed embed: the fused forward. */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: clembed embed --table W.npy --ids IDS.npy [--scale S|sqrt]\n"
    "                     [--positions none|sinusoid|P.npy] [--base B] [--exponent pair|index]\n"
    "                     [--layout interleaved|halves] [--offset P] [--padding-idx V]\n"
    "                     [--on-bad-id check|clamp|zero|wrap] [--dtype f32|f16|bf16|q8_0|q4_0|i8_rowwise|...]\n"
    "                     [--dropout P --seed S] [--out-dtype f32|f16|bf16] [--device SPEC]\n"
    "                     [--segments S --segment-ids SIDS] [--norm layer|rms [--norm-weight G]\n"
    "                     [--norm-bias B] [--norm-eps E]] [--remap REMAP.npy] -o OUT.npy|OUT.safetensors\n"
    "\n"
    "out[i] = dropout(scale * W[ids[i]] + P[position of i]); output shape ids.shape + (D,).\n"
    "With segments or a norm (BERT's input layer, in the same pass):\n"
    "out[i] = dropout(norm((scale * W[ids[i]] + P[position of i]) + S[segment_ids[i]])).\n"
    "  --table W         table (V, D) (more dimensions: rows and the product of the rest, as\n"
    "                    clembed_matrix_load reads them): .npy, .safetensors or .gguf (a .gguf\n"
    "                    defaults to token_embd.weight; FILE:NAME picks a tensor), of any dtype:\n"
    "                    " CLI_TABLE_DTYPES "\n"
    "  --ids IDS.npy     <i4 or <i8 ids, (n,) or (batch, seq); 2-D ids are sequences of seq tokens\n"
    "  --scale           token row multiplier, or sqrt for sqrt(D) (default 1)\n"
    "  --positions       none (default), sinusoid, or a learned <f4/<f2 table (L, D)\n"
    "  --base, --exponent, --layout   the sinusoid (as in `clembed positional`)\n"
    "  --offset P        position of each sequence's first token (default 0)\n"
    "  --padding-idx V   this id's token row counts as zero (negative: counts from the end)\n"
    "  --on-bad-id       check (default: exit 1 naming the position), clamp, zero, wrap\n"
    "  --dtype           the table's device dtype (default: the table's own): f32, f16, bf16,\n"
    "                    q8_0, q4_0 (quantized as ggml's reference quantizers), or FBGEMM's\n"
    "                    row-wise i8_rowwise i4_rowwise i2_rowwise i8_tbe i4_tbe i2_tbe\n"
    "                    fp8_rowwise (quantized as FBGEMM's quantizers); a quantized table is\n"
    "                    dequantized exactly as ggml's dequantize_row_* (FBGEMM's dequantizers)\n"
    "  --dropout P       zero each output element with probability P (inverted dropout)\n"
    "  --seed S          the dropout seed (default 0)\n"
    "  -o, --output      the output (- for standard output: .npy): by default <f2 for a <f2\n"
    "                    table with --dtype f16 or none, else <f4; .safetensors: one tensor \"output\"\n"
    "  --out-dtype       f32, f16 or bf16 (bf16 only into .safetensors)\n"
    "  --segments S      token-type (segment) table (T, D), <f4 or <f2\n"
    "  --segment-ids SIDS  <i4 or <i8 segment ids, the shape of --ids (default: type 0\n"
    "                    everywhere); they follow --on-bad-id as ids do\n"
    "  --norm            layer (LayerNorm: (x - mean) / sqrt(var + eps) * G + B) or rms\n"
    "                    (RMSNorm: x / sqrt(mean(x^2) + eps) * G), after the sum, before dropout\n"
    "  --norm-weight G   the norm's weight, (D,) or (1, D), <f4 or <f2 (default: 1)\n"
    "  --norm-bias B     LayerNorm's bias, (D,) or (1, D) (default: 0)\n"
    "  --norm-eps E      the norm's eps (default 1e-5; BERT uses 1e-12)\n"
    "  --remap REMAP     a pruned table (FBGEMM's pruned_array; not with segments or a norm):\n"
    "                    <i4 or <i8, 1-D, an entry per id of the unpruned table, the row of W it\n"
    "                    reads or -1 for a pruned id (a zero row); the ids and --padding-idx are\n"
    "                    then ids of the unpruned table, below len(REMAP)\n" CLI_DEVICE_USAGE;

/* A norm parameter (NULL without the flag): (D,) or (1, D), <f4 or <f2. */
static const npy_array *norm_param(const char *flag, const char *path, size_t dim) {
  if (!path) return NULL;
  const npy_array *a = cli_load_as(flag, path, CLI_TAKES_FLOAT);
  if (!((a->ndim == 1 && a->shape[0] == dim) || (a->ndim == 2 && a->shape[0] == 1 && a->shape[1] == dim)))
    cli_fail(1, "%s %s: its shape must be (%zu,) or (1, %zu), the table's D", flag, path, dim, dim);
  return a;
}

/* It as a 1 x D F32 matrix (NULL for NULL). */
static const clembed_matrix *norm_upload(const npy_array *a, size_t dim) {
  return a ? cli_upload(a->data, cli_host_dtype(a->dtype), 1, dim, CLEMBED_F32) : NULL;
}

int cli_cmd_embed(int argc, char **argv) {
  cli_flag fl[] = {FV("--table"),    FV("--ids"),     FV("--scale"),  FV("--positions"),   FV("--base"),
                   FV("--exponent"), FV("--layout"),  FV("--offset"), FV("--padding-idx"), FV("--on-bad-id"),
                   FV("--dtype"),    FV("--dropout"), FV("--seed"),   FV("--device"),      FA("--output", "-o"),
                   FV("--out-dtype"), FV("--segments"), FV("--segment-ids"), FV("--norm"), FV("--norm-weight"),
                   FV("--norm-bias"), FV("--norm-eps"), FV("--remap")};
  cli_parse_flags(argc, argv, fl, NFLAGS(fl), usage);
  static const char *const req[] = {"--table", "--ids", "--output", NULL};
  cli_require(fl, NFLAGS(fl), req);

  const char *pos = VAL("--positions") ? VAL("--positions") : "none";
  clembed_positions positions = !strcmp(pos, "none")       ? CLEMBED_POSITIONS_NONE
                                : !strcmp(pos, "sinusoid") ? CLEMBED_POSITIONS_SINUSOID
                                                           : CLEMBED_POSITIONS_TABLE;
  if (positions != CLEMBED_POSITIONS_SINUSOID) {
    const char *const sin_flags[] = {"--base", "--exponent", "--layout"};
    for (int i = 0; i < 3; i++)
      if (GIVEN(sin_flags[i])) cli_fail(1, "%s needs --positions sinusoid", sin_flags[i]);
  }
  if (GIVEN("--segment-ids") && !GIVEN("--segments")) cli_fail_usage("--segment-ids needs --segments");
  static const char *const norm_names[] = {"layer", "rms", NULL};
  int norm = VAL("--norm") ? 1 + cli_arg_choice("--norm", VAL("--norm"), norm_names) : 0;
  const char *const norm_flags[] = {"--norm-weight", "--norm-bias", "--norm-eps"};
  for (int i = 0; i < 3; i++)
    if (GIVEN(norm_flags[i]) && !norm) cli_fail_usage("%s needs --norm layer or --norm rms", norm_flags[i]);
  if (GIVEN("--norm-bias") && norm == CLEMBED_NORM_RMS) cli_fail_usage("--norm-bias: RMSNorm has no bias");
  clembed_embed_options o = clembed_embed_defaults();
  o.norm.kind = (clembed_norm_kind)norm;
  if (VAL("--norm-eps")) o.norm.eps = cli_arg_float("--norm-eps", VAL("--norm-eps"));
  if (!(o.norm.eps >= 0.0f)) cli_fail(1, "--norm-eps %s: must be >= 0", VAL("--norm-eps"));
  o.positions = positions;
  o.sinusoid = cli_arg_sinusoid(VAL("--base"), VAL("--exponent"), VAL("--layout"));
  o.position_offset = VAL("--offset") ? cli_arg_size("--offset", VAL("--offset")) : 0;
  o.policy = cli_arg_policy(VAL("--on-bad-id"));
  o.dropout = cli_arg_dropout(VAL("--dropout"));
  o.dropout_seed = VAL("--seed") ? cli_arg_u64("--seed", VAL("--seed")) : 0;
  int dtype_flag = VAL("--dtype") ? (int)cli_arg_dtype("--dtype", VAL("--dtype"), CLI_DT_EMBED) : -1;
  cli_check_scale(VAL("--scale"));
  cli_output_open(VAL("--output"));

  const char *tpath = VAL("--table"), *ipath = VAL("--ids");
  const npy_array *w = cli_load_table_file("--table", tpath);
  const npy_array *ids = cli_load_ids("--ids", ipath);
  clembed_dtype table_dt = dtype_flag >= 0 ? (clembed_dtype)dtype_flag : cli_input_dtype(w);
  size_t rows = w->shape[0], dim = cli_table_cols("--table", tpath, w, table_dt), n = ids->count;
  o.scale = cli_arg_scale(VAL("--scale"), dim);
  const npy_array *rmap = cli_load_remap(VAL("--remap"));
  size_t id_rows = rmap ? rmap->count : rows; /* (a pruned table's ids are the unpruned table's) */
  o.padding_idx = cli_arg_padding(VAL("--padding-idx"), id_rows);
  o.seq_len = ids->ndim == 2 ? ids->shape[1] : 0;
  const npy_array *pt = NULL;
  char pos_what[1100], ids_what[1100];
  if (positions == CLEMBED_POSITIONS_TABLE) {
    pt = cli_load_table("--positions", pos);
    if (pt->shape[1] != dim)
      cli_fail(1, "--positions %s: has %zu columns but --table %s has %zu", pos, pt->shape[1], tpath, dim);
    snprintf(pos_what, sizeof pos_what, "--positions %s", pos);
  }
  snprintf(ids_what, sizeof ids_what, "--ids %s", ipath);
  cli_blame(ids_what, pt ? pos_what : NULL);
  /* BERT's token types: a table (T, D) and ids of the shape of --ids */
  const npy_array *seg = NULL, *sids = NULL;
  char seg_what[1100], sids_what[1100];
  if (GIVEN("--segments")) {
    seg = cli_load_table("--segments", VAL("--segments"));
    if (seg->shape[1] != dim)
      cli_fail(1, "--segments %s: has %zu columns but --table %s has %zu", VAL("--segments"), seg->shape[1], tpath,
               dim);
    if (!GIVEN("--segment-ids") && seg->shape[0] == 0)
      cli_fail(1, "--segments %s: has no rows, and without --segment-ids every token is of type 0",
               VAL("--segments"));
    snprintf(seg_what, sizeof seg_what, "--segments %s", VAL("--segments"));
    cli_blame_arg("segment_table", seg_what);
  }
  if (GIVEN("--segment-ids")) {
    sids = cli_load_ids("--segment-ids", VAL("--segment-ids"));
    int same = sids->ndim == ids->ndim;
    for (int i = 0; same && i < ids->ndim; i++) same = sids->shape[i] == ids->shape[i];
    if (!same) cli_fail(1, "--segment-ids %s: its shape must be that of --ids %s", VAL("--segment-ids"), ipath);
    snprintf(sids_what, sizeof sids_what, "--segment-ids %s", VAL("--segment-ids"));
    cli_blame_arg("segment_ids", sids_what);
    if (dim == 0) cli_check_ids_host(sids, seg->shape[0], o.policy, sids_what);
  }
  const npy_array *nw = norm_param("--norm-weight", VAL("--norm-weight"), dim);
  const npy_array *nb = norm_param("--norm-bias", VAL("--norm-bias"), dim);
  if (dim == 0) {
    /* no columns: nothing is looked up on the device, the ids are checked here */
    cli_check_ids_host(ids, id_rows, o.policy, ids_what);
    size_t per = o.seq_len ? o.seq_len : n;
    if (pt && n && o.position_offset + (per < n ? per : n) > pt->shape[0])
      cli_fail(1, "%s: position %zu is past its %zu rows", pos_what, o.position_offset + (per < n ? per : n) - 1,
               pt->shape[0]);
  }

  int f16_out = w->dtype == NPY_F2 && (dtype_flag < 0 || dtype_flag == CLEMBED_F16);
  clembed_dtype out_dt = cli_output_dtype(VAL("--out-dtype"), f16_out ? CLEMBED_F16 : CLEMBED_F32);
  size_t out_bytes = cli_mul3(n, dim, clembed_dtype_size(out_dt), "the output");
  uint64_t device = (uint64_t)cli_mul3(rows, clembed_dtype_row_bytes(table_dt, dim), 1, "--table") +
                    cli_array_bytes(ids) + (pt ? cli_array_bytes(pt) : 0) + out_bytes +
                    (seg ? cli_array_bytes(seg) : 0) + (sids ? cli_array_bytes(sids) : 0) + 2 * 4 * (uint64_t)dim +
                    (rmap ? cli_array_bytes(rmap) : 0);

  cli_open_device(VAL("--device"));
  /* the library converts a .npy table whose dtype is not its device dtype through a host buffer; a
   * tensor of a .safetensors or .gguf file is loaded from its mapping in bounded pieces */
  uint64_t convert = table_dt != cli_host_dtype(w->dtype) && !cli_input_in_file(w)
                         ? (uint64_t)rows * clembed_dtype_row_bytes(table_dt, dim)
                         : 0;
  cli_memory_budget(out_bytes + convert, device);
  clembed_matrix *table = cli_upload_table(w, table_dt);
  clembed_ids *d_ids = cli_upload_ids(ids);
  if (rmap) o.remap = cli_upload_ids(rmap);
  clembed_matrix *ptab = NULL;
  if (pt) ptab = cli_upload_table(pt, cli_host_dtype(pt->dtype));
  o.position_table = ptab;
  if (seg) o.segment_table = cli_upload_table(seg, cli_host_dtype(seg->dtype));
  if (sids) o.segment_ids = cli_upload_ids(sids);
  o.norm.weight = norm_upload(nw, dim);
  o.norm.bias = norm_upload(nb, dim);
  clembed_matrix *out = cli_zeros(n, dim, out_dt);
  cli_check(clembed_embed(cli_ctx, table, d_ids, &o, out, 0, NULL, NULL));
  void *h = cli_download(out, out_dt);

  size_t shape[3] = {ids->shape[0], ids->ndim == 2 ? ids->shape[1] : dim, dim};
  cli_output_array(out_dt, ids->ndim + 1, shape, h);
  cli_release_all();
  return 0;
}
