/* clembed inspect: the tensors of a .npy, .safetensors or .gguf file. */
#include "cli.h"
#include "clembed_io.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: clembed inspect FILE [--json] [--metadata] [--device SPEC]\n"
    "\n"
    "Lists the tensors of a .npy, .safetensors or .gguf file (recognised by its content),\n"
    "one line each: name, dtype and shape (AxB..., outermost first; a GGUF file's dims\n"
    "reversed as NumPy's). The dtype is clembed's lower-case name for what clembed can load\n"
    "as a table:\n"
    "  " CLI_TABLE_DTYPES "\n"
    "and the same lower-case scheme for the rest: i32, i64, f64, u8, bool (I64 in a\n"
    ".safetensors file, <i8 in a .npy: i64), ggml's type names in lower case; a NumPy type\n"
    "with no such name (big-endian, text) as NumPy writes it (>f4, <U10).\n"
    "A .npy file's one array has no name: it shows as -.\n"
    "A .safetensors file's metadata (\"__metadata__\") follows the tensors, one \"key: value\"\n"
    "line each. In a checkpoint (clembed_checkpoint_save, clembed.save) each tensor's line\n"
    "ends with what it holds: \"= q4_k 1000x256 crc32c=1a2b3c4d\" (clembed's dtype, the matrix's\n"
    "shape and the CRC-32C its load checks; block-quantized matrices are stored as u8 rows).\n"
    "  --json          an array of {\"name\", \"dtype\", \"shape\", \"bytes\"} instead (in a\n"
    "                  checkpoint with \"matrix\": {\"dtype\", \"rows\", \"cols\", \"crc32c\"} too)\n"
    "  --metadata      the metadata only: \"key: value\" lines, or with --json one object\n"
    "  --device SPEC   accepted as by every subcommand; inspect reads the file on the host\n"
    "                  and opens no device\n";

/* clembed's name for what it can load as a table, else the file's own type in the same lower-case scheme */
static const char *dtype_text(const clembed_tensor_info *t, char *buf, size_t cap) { return cli_type_text(t, buf, cap); }

void cli_json_string(const char *s) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      printf("\\%c", *p);
    else if (*p < 0x20)
      printf("\\u%04x", *p);
    else
      putchar(*p);
  }
  putchar('"');
}

/* A checkpoint's entry for tensor `name` ("dtype=f32 rows=R cols=C crc32c=X"), or NULL. */
static const char *checkpoint_entry(const clembed_file *f, const char *name) {
  if (!clembed_file_metadata_find(f, "clembed.checkpoint")) return NULL;
  char key[1024];
  if ((size_t)snprintf(key, sizeof key, "clembed.tensor.%s", name) >= sizeof key) return NULL;
  return clembed_file_metadata_find(f, key);
}

static void print_text(const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) putchar(*p < 0x20 || *p == 0x7f ? '?' : *p);
}

/* The metadata as "key: value" lines, each after `indent`; with skip_tensors,
 * a checkpoint's tensor entries left out (shown on the tensors' lines). */
static void print_metadata_lines(const clembed_file *f, const char *indent, int skip_tensors) {
  for (size_t i = 0; i < clembed_file_metadata_count(f); i++) {
    const char *k, *v;
    clembed_file_metadata(f, i, &k, &v);
    if (skip_tensors && !strncmp(k, "clembed.tensor.", 15)) continue;
    printf("%s", indent);
    print_text(k);
    printf(": ");
    print_text(v);
    putchar('\n');
  }
}

int cli_cmd_inspect(int argc, char **argv) {
  cli_flag fl[] = {FS("--json"), FS("--metadata"), FV("--device")};
  const char *path = cli_parse_operand(argc, argv, fl, NFLAGS(fl), usage, "FILE");

  clembed_file *f = cli_open_file(NULL, path); /* released by cli_release_all */
  size_t n = clembed_file_tensor_count(f);
  int json = GIVEN("--json"), meta_only = GIVEN("--metadata");
  size_t nm = clembed_file_metadata_count(f);
  if (meta_only && json) {
    putchar('{');
    for (size_t i = 0; i < nm; i++) {
      const char *k, *v;
      clembed_file_metadata(f, i, &k, &v);
      printf("%s", i ? ", " : "");
      cli_json_string(k);
      printf(": ");
      cli_json_string(v);
    }
    printf("}\n");
  } else if (meta_only) {
    print_metadata_lines(f, "", 0);
  }
  if (meta_only) n = 0;
  if (json && !meta_only) putchar('[');
  for (size_t i = 0; i < n; i++) {
    clembed_tensor_info t;
    char tb[64];
    uint64_t shape[CLEMBED_FILE_MAX_DIMS];
    int ndim = 0;
    if (clembed_file_tensor_info(f, i, &t) != CLEMBED_OK ||
        clembed_file_tensor_shape(f, i, shape, CLEMBED_FILE_MAX_DIMS, &ndim) != CLEMBED_OK)
      cli_fail(2, "%s", clembed_last_error_message());
    /* in a checkpoint, the matrix the tensor holds */
    const char *entry = checkpoint_entry(f, t.name);
    char dt[32];
    unsigned long long rows, cols;
    unsigned crc;
    int matrix = entry && sscanf(entry, "dtype=%31s rows=%llu cols=%llu crc32c=%x", dt, &rows, &cols, &crc) == 4;
    if (json) {
      printf("%s{\"name\": ", i ? ", " : "");
      cli_json_string(t.name);
      printf(", \"dtype\": ");
      cli_json_string(dtype_text(&t, tb, sizeof tb));
      printf(", \"shape\": [");
      for (int d = 0; d < ndim; d++) printf("%s%" PRIu64, d ? ", " : "", shape[d]);
      printf("], \"bytes\": %" PRIu64, t.bytes);
      if (matrix) {
        printf(", \"matrix\": {\"dtype\": ");
        cli_json_string(dt);
        printf(", \"rows\": %llu, \"cols\": %llu, \"crc32c\": \"%08x\"}", rows, cols, crc);
      }
      putchar('}');
    } else {
      if (!t.name[0]) putchar('-');
      print_text(t.name);
      printf(" %s ", dtype_text(&t, tb, sizeof tb));
      if (ndim == 0) printf("()");
      for (int d = 0; d < ndim; d++) printf("%s%" PRIu64, d ? "x" : "", shape[d]);
      if (matrix) {
        printf(" = ");
        print_text(dt);
        printf(" %llux%llu crc32c=%08x", rows, cols, crc);
      }
      putchar('\n');
    }
  }
  if (json && !meta_only) printf("]\n");
  if (!json && !meta_only && nm) {
    printf("metadata:\n");
    print_metadata_lines(f, "  ", 1);
  }
  cli_release_all();
  if (fflush(stdout) != 0 || ferror(stdout)) cli_fail(1, "writing to standard output failed");
  return 0;
}
