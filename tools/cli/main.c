/* clembed: the command-line tool (README, "The command-line tool"; `clembed --help`); dispatch. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char usage_main[] =
    "usage: clembed <subcommand> [flags]   (clembed <subcommand> --help for its flags)\n"
    "\n"
    "The embedding layer of a transformer on any OpenCL device. Arrays are .npy files, or\n"
    "tensors of .safetensors and .gguf files (recognised by content): FILE:NAME picks one\n"
    "(a file with one tensor needs no name; --table of a GGUF file: token_embd.weight).\n"
    "\n"
    "subcommands:\n"
    "  devices     list the OpenCL platforms and devices, mark the default\n"
    "  positional  sinusoidal positional table, shape (L, D)\n"
    "  rope-cache  the RoPE cos/sin cache, shape (L, R)\n"
    "  rope        RoPE applied to queries or keys (T, C), (T, heads, H) or (B, S, heads, H)\n"
    "  embed       fused forward: scale * W[ids] + positions (+ dropout)\n"
    "  backward    dense table gradient (V, D)\n"
    "  sgd         one fused sparse SGD step on a table\n"
    "  init        table initialisation (Philox normal or uniform)\n"
    "  bag         bags of ids pooled per sample (sum, mean, max; EmbeddingBag), shape (B, D)\n"
    "  bench       the benchmark against the device's own copy (runs clembed-bench, the\n"
    "              program beside clembed, with the same arguments)\n"
    "  tune        find this device's kernel shapes on the device and write them as its\n"
    "              entry of your tuning file (runs clembed-bench --tune)\n"
    "  demo        the tutorial end to end on the default device; `demo model FILE`: a model\n"
    "              file's embedding table (.gguf quantized or float, .safetensors) looked up\n"
    "  inspect     the tensors of a .npy, .safetensors or .gguf file\n"
    "  help        this text (help SUBCOMMAND: that subcommand's)\n"
    "\n"
    "Every subcommand takes --device SPEC (\"P:D\" as `clembed devices` lists, gpu, cpu,\n"
    "accelerator, or part of the platform and device name; default: $CLEMBED_DEVICE, else\n"
    "the first GPU, accelerator, CPU) and --help. The kernel shapes are the device's\n"
    "entries of the tuning database (built in, and yours that `clembed tune` writes;\n"
    "`clembed devices` shows them); CLEMBED_TUNING=cpu or gpu picks a type's built-in\n"
    "shapes instead (the same results but for the atomic backward's order; another value\n"
    "is bad input, exit 1).\n"
    "\n"
    "Output (-o OUT.npy, or OUT.safetensors: one tensor \"output\"; --out-dtype f32|f16|bf16)\n"
    "is checked before the work starts and written to a temporary file renamed into place,\n"
    "so a failed or killed run (SIGINT, SIGTERM, SIGHUP) leaves no output and never\n"
    "damages an existing file; an existing file keeps its mode, a\n"
    "symlink's target is replaced (not the link), a device node or FIFO is written\n"
    "directly, and -o - writes the .npy to standard output. Input files are mapped, not\n"
    "copied; a run whose host plus device memory exceeds the machine's is refused.\n"
    "Exit status: 0 success, 1 bad usage or bad input, 2 device or OpenCL failure (bench,\n"
    "tune: 127 when there is no clembed-bench beside clembed).\n"
    "\n"
    "  clembed --version   prints the version\n";

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
} command;

static const command commands[] = {
    {"devices", cli_cmd_devices}, {"positional", cli_cmd_positional}, {"embed", cli_cmd_embed},
    {"rope-cache", cli_cmd_rope_cache}, {"rope", cli_cmd_rope},
    {"backward", cli_cmd_backward}, {"sgd", cli_cmd_sgd},             {"init", cli_cmd_init},
    {"bench", cli_cmd_bench},     {"tune", cli_cmd_tune},           {"demo", cli_cmd_demo},
    {"inspect", cli_cmd_inspect},
    {"bag", cli_cmd_bag},
};

static const command *find(const char *name) {
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(name, commands[i].name)) return &commands[i];
  return NULL;
}

static int is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage_main, stderr);
    return 1;
  }
  const char *sub = argv[1];
  if (is_help(sub)) {
    fputs(usage_main, stdout);
    return 0;
  }
  if (!strcmp(sub, "--version") || !strcmp(sub, "version")) {
    unsigned v = clembed_version_number();
    printf("clembed %d.%d.%d (library %u.%u.%u)\n", CLEMBED_VERSION_MAJOR, CLEMBED_VERSION_MINOR,
           CLEMBED_VERSION_PATCH, v / 10000, v / 100 % 100, v % 100);
    return 0;
  }
  if (!strcmp(sub, "help")) {
    /* clembed help [SUBCOMMAND]: that subcommand's --help; help --help: this text */
    if (argc < 3 || is_help(argv[2]) || !strcmp(argv[2], "help")) {
      fputs(usage_main, stdout);
      return 0;
    }
    const command *c = find(argv[2]);
    if (!c) {
      fprintf(stderr, "clembed: unknown subcommand '%s'\nTry 'clembed --help'.\n", argv[2]);
      return 1;
    }
    char help[] = "--help";
    char *hargv[] = {argv[2], help, NULL};
    snprintf(cli_cmd, sizeof cli_cmd, "clembed %s", c->name);
    return c->run(2, hargv);
  }
  const command *c = find(sub);
  if (!c) {
    fprintf(stderr, "clembed: unknown subcommand '%s'\nTry 'clembed --help'.\n", sub);
    return 1;
  }
  snprintf(cli_cmd, sizeof cli_cmd, "clembed %s", c->name);
  return c->run(argc - 1, argv + 1);
}
