/* clembed inspect: the tensors of a .npy, .safetensors or .gguf file. */
#include "cli.h"
#include "clembed_io.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: clembed inspect FILE [--json]\n"
    "\n"
    "Lists the tensors of a .npy, .safetensors or .gguf file (recognised by its content),\n"
    "one line each: name, dtype and shape (AxB..., outermost first; a GGUF file's dims\n"
    "reversed as NumPy's). The dtype is f32 f16 bf16 q8_0 q4_0 q4_k q6_k for what clembed\n"
    "can load as a table, else the file's own type name (<i8, I64, q5_K, ...).\n"
    "A .npy file's one array has no name: it shows as -.\n"
    "  --json   an array of {\"name\", \"dtype\", \"shape\", \"bytes\"} instead\n";

static const char *dtype_text(const clembed_tensor_info *t) {
  static const char *const names[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k"};
  return t->dtype >= 0 && t->dtype < 7 ? names[t->dtype] : t->type_name;
}

/* A JSON string: quotes, backslashes and control characters escaped; other
 * bytes (UTF-8) as they are. */
static void json_string(const char *s) {
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

int cli_cmd_inspect(int argc, char **argv) {
  cli_flag fl[] = {FS("--json")};
  const char *path = NULL;
  /* FILE is the one operand: taken out before the flags are parsed */
  char *rest[64];
  int nrest = 0;
  rest[nrest++] = argv[0];
  for (int i = 1; i < argc; i++) {
    if (argv[i][0] != '-' || !strcmp(argv[i], "-")) {
      if (path) cli_fail_usage("one FILE only ('%s' and '%s' given)", path, argv[i]);
      path = argv[i];
    } else if (nrest < 63) {
      rest[nrest++] = argv[i];
    } else {
      cli_fail_usage("too many flags");
    }
  }
  rest[nrest] = NULL;
  cli_parse_flags(nrest, rest, fl, NFLAGS(fl), usage);
  if (!path) cli_fail_usage("no FILE given");

  clembed_file *f = NULL;
  if (clembed_file_open(path, &f) != CLEMBED_OK) cli_fail(1, "%s", clembed_last_error_message());
  size_t n = clembed_file_tensor_count(f);
  int json = GIVEN("--json");
  if (json) putchar('[');
  for (size_t i = 0; i < n; i++) {
    clembed_tensor_info t;
    if (clembed_file_tensor_info(f, i, &t) != CLEMBED_OK) {
      clembed_file_close(f);
      cli_fail(2, "%s", clembed_last_error_message());
    }
    if (json) {
      printf("%s{\"name\": ", i ? ", " : "");
      json_string(t.name);
      printf(", \"dtype\": ");
      json_string(dtype_text(&t));
      printf(", \"shape\": [");
      for (int d = 0; d < t.ndim; d++) printf("%s%" PRIu64, d ? ", " : "", t.shape[d]);
      printf("], \"bytes\": %" PRIu64 "}", t.bytes);
    } else {
      if (!t.name[0]) putchar('-');
      for (const unsigned char *p = (const unsigned char *)t.name; *p; p++) putchar(*p < 0x20 || *p == 0x7f ? '?' : *p);
      printf(" %s ", dtype_text(&t));
      if (t.ndim == 0) printf("()");
      for (int d = 0; d < t.ndim; d++) printf("%s%" PRIu64, d ? "x" : "", t.shape[d]);
      putchar('\n');
    }
  }
  if (json) printf("]\n");
  clembed_file_close(f);
  if (fflush(stdout) != 0 || ferror(stdout)) cli_fail(1, "writing to standard output failed");
  return 0;
}
