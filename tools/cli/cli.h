/* clembed, the command-line tool: what its files share (README, "The
 * command-line tool"; `clembed --help`).
 *
 *   main.c         dispatch to the subcommands, the top-level help
 *   args.c         flag parsing and the values of flags
 *   dtype_names.c  the names of dtypes (one table, lower case)
 *   run.c          resources, failures and exit codes, the device, the memory budget
 *   input.c        inputs, read through clembed_io.h and checked for their role
 *   output.c       the one output: checked before the work, written at the end
 *   npy_write.c    the .npy writer (output.c's, and the tests')
 *   cmd_*.c        one file per subcommand
 *
 * Built on the public headers alone. Exit status: 0 success; 1 bad usage or
 * bad input (the message names the file, flag or position); 2 device or
 * OpenCL failure. Every resource is registered in run.c so that a failure
 * anywhere (cli_fail -> exit) releases everything and removes a temporary
 * output file. */
#ifndef CLEMBED_CLI_H
#define CLEMBED_CLI_H

#include "clembed.h"
#include "clembed_io.h"
#include "npy_write.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__GNUC__) || defined(__clang__)
#define CLI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CLI_PRINTF(f, a)
#endif

/* ------------------------------------------------------------ run.c */

/* "clembed embed" etc., the prefix of every message. */
extern char cli_cmd[64];
/* The context of this run (NULL until cli_open_device). */
extern clembed_context *cli_ctx;

/* Prints "clembed SUB: message", releases everything, exits with `code`. */
_Noreturn void cli_fail(int code, const char *fmt, ...) CLI_PRINTF(2, 3);
/* A usage error (exit 1): the message and a pointer to --help. */
_Noreturn void cli_fail_usage(const char *fmt, ...) CLI_PRINTF(1, 2);
/* Releases every registered resource and removes a temporary output. */
void cli_release_all(void);

void *cli_malloc(size_t bytes);
/* a * b * c, or a bad-input failure naming `what` when it overflows. */
size_t cli_mul3(size_t a, size_t b, size_t c, const char *what);

/* Opens the device (--device SPEC, or the default); exits 2 when there is
 * none, 1 when the environment is bad (CLEMBED_TUNING). */
void cli_open_device(const char *spec);
/* Why no OpenCL device is found when clembed can say more than the library
 * (POCL without a writable kernel cache directory), else NULL. */
const char *cli_no_device_reason(void);
/* The entry of list (clembed_devices) that is the context's device, or -1. */
long cli_context_device(const clembed_device_info *list, size_t n);
/* Exits on a failed library call: 1 for bad input (naming the file or flag
 * that clembed_context_error's argument points to), 2 for a device failure. */
void cli_check(clembed_status s);
/* What a failure of the argument "ids" or "positions"/"position_table" names:
 * "--ids FILE" and "--positions FILE". */
void cli_blame(const char *ids_what, const char *positions_what);
/* What a failure of library argument `argument` (e.g. "segment_ids") names. */
void cli_blame_arg(const char *argument, const char *what);

/* Refuses (exit 1) a run whose host memory (buffers of the tool) plus device
 * memory exceeds what the machine has; on a device with its own memory each
 * side is compared with its own size. Call after cli_open_device. */
void cli_memory_budget(uint64_t host_bytes, uint64_t device_bytes);

clembed_matrix *cli_upload(const void *host, clembed_dtype host_dtype, size_t rows, size_t cols,
                           clembed_dtype dtype);
clembed_matrix *cli_zeros(size_t rows, size_t cols, clembed_dtype dtype);
/* A new registered matrix (zeroed struct), released by cli_release_all. */
clembed_matrix *cli_new_matrix(void);
/* Ids to the device: clembed_ids_load from their file, or from a host array that is not an input. */
clembed_ids *cli_upload_ids(const npy_array *a);
clembed_ids *cli_new_ids(void);
/* Reads m into a new host buffer of `host_dtype`; fails on pending deferred errors. */
void *cli_download(const clembed_matrix *m, clembed_dtype host_dtype);

/* ---------------------------------------------------------- input.c */

/* What a role takes (cli_load_as): */
#define CLI_TAKES_FLOAT 1u   /* f32, f16, bf16 (bf16 widened to <f4 on the host) */
#define CLI_TAKES_IDS 2u     /* i32, i64 */
#define CLI_TAKES_BLOCKS 4u  /* block-quantized tables (only with CLI_TAKES_LAZY) */
#define CLI_TAKES_FLATTEN 8u /* a table: 2 or more dimensions seen as (rows, product of the rest) */
#define CLI_TAKES_LAZY 16u   /* no host data (data NULL): cli_upload_table loads it from its file */

/* An input (a .npy file, FILE:NAME of a .safetensors or .gguf file, or any
 * of them from a pipe) for the role `flagname`, read through clembed_io.h:
 * a type or shape the role does not take is exit 1 naming the flag, the file
 * and what the role takes. Data are read in place (the file's mapping). */
const npy_array *cli_load_as(const char *flagname, const char *arg, unsigned takes);
/* A file opened through clembed_io.h as cli_load_as opens it (a pipe read
 * into memory first), released by cli_release_all; a bad file is exit 1, the
 * message starting with `flagname` (none when NULL). */
clembed_file *cli_open_file(const char *flagname, const char *path);
/* cli_load_as(..., CLI_TAKES_FLOAT | CLI_TAKES_IDS). */
const npy_array *cli_load(const char *flagname, const char *path);
/* A float table of 2 or more dimensions (a position table, sgd's table),
 * seen as (rows, cols) and left in its file (data NULL). */
const npy_array *cli_load_table(const char *flagname, const char *path);
/* The same for a table to look up in: block-quantized tensors too. */
const npy_array *cli_load_table_file(const char *flagname, const char *path);
/* Whether `a` has no host data: it is read from its file. */
int cli_input_in_file(const npy_array *a);
/* The input's own shape (a table's before it was seen as 2-D): its number of
 * dimensions, the first `capacity` of them in shape. */
int cli_input_shape(const npy_array *a, size_t *shape, int capacity);
/* The table as a device matrix of `dtype`: clembed_matrix_load from its file,
 * or from a host array that is not an input. */
clembed_matrix *cli_upload_table(const npy_array *a, clembed_dtype dtype);
/* i32 or i64 ids of shape (n,) or (batch, seq). */
const npy_array *cli_load_ids(const char *flagname, const char *path);
/* A table's cols as `dtype` on the device: its second dimension, or for bytes
 * (u8: FBGEMM's row-wise rows as stored, `dtype` one of its types) the values
 * a row of that many bytes holds; exits 1 naming flagname and path otherwise. */
size_t cli_table_cols(const char *flagname, const char *path, const npy_array *a, clembed_dtype dtype);
/* --remap's file (NULL for none): <i4 or <i8, 1-D; errors naming "remap" blame it. */
const npy_array *cli_load_remap(const char *path);
/* A <f4 or <f2 gradient whose shape is ids.shape + (D,). */
const npy_array *cli_load_grad(const char *path, const npy_array *ids, const char *ids_path);
/* The checks of an index policy done on the host, for tables of no columns
 * (where the device has nothing to look up): exit 1 naming `what`, the
 * position and the value of the first bad id. */
void cli_check_ids_host(const npy_array *ids, size_t rows, clembed_index_policy policy, const char *what);
clembed_dtype cli_host_dtype(npy_dtype t);
/* The device dtype an input defaults to: its own (BF16 for a BF16 tensor, which
 * the tool holds widened to <f4; a block type for a table left in its file). */
clembed_dtype cli_input_dtype(const npy_array *a);
size_t cli_array_bytes(const npy_array *a);

/* --------------------------------------------------------- output.c */

/* Checks -o (ARG, or "-" for standard output) before the work starts and
 * makes it ready: a regular file (new or existing, or a symlink's target) gets
 * a temporary file beside it, removed on failure and on SIGINT, SIGTERM and
 * SIGHUP; a device node or FIFO is opened to be written directly. */
void cli_output_open(const char *arg);
/* The output dtype: --out-dtype f32|f16|bf16 (`value`, NULL: `dflt`); bf16 into
 * a .npy output is exit 1 naming .safetensors. Call after cli_output_open,
 * before the work. */
clembed_dtype cli_output_dtype(const char *value, clembed_dtype dflt);
/* The one writer of every subcommand's output: dense host values of `dtype`
 * (f32, f16, bf16), as a .safetensors file holding one tensor named "output"
 * when -o ends in .safetensors, else a .npy (<f4 or <f2), put in place
 * (renamed over the target, keeping an existing file's mode). */
void cli_output_array(clembed_dtype dtype, int ndim, const size_t *shape, const void *data);
/* Removes the temporary file, if any (cli_release_all calls it). */
void cli_output_abort(void);

/* ---------------------------------------------------- dtype_names.c */

/* Sets of dtypes (dtype_names.c decides them from the library's facts of each dtype): */
#define CLI_DT_FLOAT 1u /* f32 f16 bf16: --out-dtype, rope's input */
#define CLI_DT_NPY 2u   /* f32 f16: what a .npy file holds */
#define CLI_DT_EMBED 4u /* embed's --dtype: a float type, or one the library quantizes to */
#define CLI_DT_TABLE 8u /* every dtype a table file's tensor can be (the row-wise types are --dtype's) */

/* The tool's (lower-case) name of a clembed_dtype, or NULL. */
const char *cli_dtype_name(int dtype);
/* The names of a set, "f32, f16, bf16", into buf. */
const char *cli_dtype_list(unsigned set, char *buf, size_t cap);
/* A dtype of `set` by its name; exit 1 naming the flag and the set. */
clembed_dtype cli_arg_dtype(const char *flagname, const char *s, unsigned set);
/* In a --help text, the names of every table dtype (CLI_DT_TABLE, the
 * library's list), space-separated and wrapped at the marker's column. */
#define CLI_TABLE_DTYPES "@table-dtypes@"
/* Prints a --help text to f with CLI_TABLE_DTYPES replaced by the names. */
void cli_put_usage(const char *usage, FILE *f);
/* A tensor's type in the same lower-case scheme: clembed's name, else i32,
 * i64, f64, u8, bool ... (a NumPy type string of a little-endian number),
 * the file's own name in lower case (q5_k, f8_e4m3), or a NumPy type string
 * that has no such name as NumPy writes it (">f4", "<U10"). */
const char *cli_type_text(const clembed_tensor_info *t, char *buf, size_t cap);

/* ----------------------------------------------------- cmd_inspect.c */

/* Prints a JSON string to standard output: quotes, backslashes and control
 * characters escaped, other bytes (UTF-8) as they are. */
void cli_json_string(const char *s);

/* ----------------------------------------------------------- args.c */

typedef struct cli_flag {
  const char *name;  /* "--table" */
  const char *alias; /* "-o", or NULL */
  int has_value;     /* 0: a switch */
  const char *value; /* the value given */
  int given;
} cli_flag;

/* --device's line in every subcommand's --help. */
#define CLI_DEVICE_USAGE \
  "  --device SPEC   the OpenCL device (\"P:D\" as `clembed devices` lists them, gpu, cpu, ...;\n" \
  "                  `clembed --help` says how one is picked without it)\n"

#define FV(n) {n, NULL, 1, NULL, 0}
#define FA(n, a) {n, a, 1, NULL, 0}
#define FS(n) {n, NULL, 0, NULL, 0}
#define NFLAGS(f) (sizeof(f) / sizeof((f)[0]))

/* Parses argv[1..argc-1] (argv[0] is the subcommand) into f. --help or -h
 * anywhere (not as a flag's value) prints `usage` and exits 0; `usage` must
 * describe every flag of f after its synopsis, else --help exits 2 naming the
 * flag (an internal error, which the tests run into). A flag's value that
 * looks like a flag ("-o", "--x"; not "-" nor a negative number) is refused
 * naming the flag: such a value is given as --flag=VALUE. */
void cli_parse_flags(int argc, char **argv, cli_flag *f, size_t nf, const char *usage);
/* The same for a subcommand that also takes one operand (`name`, e.g.
 * "FILE"): returns it; none, or two, is a usage error. */
const char *cli_parse_operand(int argc, char **argv, cli_flag *f, size_t nf, const char *usage, const char *name);
cli_flag *cli_flag_get(cli_flag *f, size_t nf, const char *name);
/* Fails naming every flag of the NULL-terminated list that is missing. */
void cli_require(cli_flag *f, size_t nf, const char *const *names);

#define VAL(n) (cli_flag_get(fl, NFLAGS(fl), n)->value)
#define GIVEN(n) (cli_flag_get(fl, NFLAGS(fl), n)->given)

int cli_parse_double(const char *s, double *out);
float cli_arg_float(const char *flagname, const char *s);
uint64_t cli_arg_u64(const char *flagname, const char *s);
size_t cli_arg_size(const char *flagname, const char *s);
/* A size of at least 1 (a dimension). */
size_t cli_arg_dim(const char *flagname, const char *s);
int64_t cli_arg_i64(const char *flagname, const char *s);
/* One of the NULL-terminated `names`; returns its index. */
int cli_arg_choice(const char *flagname, const char *s, const char *const *names);
/* "A,B" -> two finite floats; `form` names them in a message ("MEAN,STD"). */
void cli_arg_pair(const char *flagname, const char *s, const char *form, float *a, float *b);
clembed_index_policy cli_arg_policy(const char *s);
/* The sinusoid from --base, --exponent, --layout (each optional). */
clembed_sinusoid cli_arg_sinusoid(const char *base, const char *exponent, const char *layout);
/* --scale S or sqrt (sqrt(D) as float). */
float cli_arg_scale(const char *s, size_t d);
/* Checks --scale without knowing D. */
void cli_check_scale(const char *s);
float cli_arg_dropout(const char *s);
/* --padding-idx V for a table of `rows` rows; negative values count from the end. */
int64_t cli_arg_padding(const char *s, size_t rows);

/* --------------------------------------------------------- commands */

int cli_cmd_devices(int argc, char **argv);
int cli_cmd_positional(int argc, char **argv);
int cli_cmd_rope_cache(int argc, char **argv);
int cli_cmd_rope(int argc, char **argv);
int cli_cmd_embed(int argc, char **argv);
int cli_cmd_backward(int argc, char **argv);
int cli_cmd_sgd(int argc, char **argv);
int cli_cmd_init(int argc, char **argv);
int cli_cmd_bench(int argc, char **argv);
int cli_cmd_tune(int argc, char **argv);
int cli_cmd_demo(int argc, char **argv);
int cli_cmd_inspect(int argc, char **argv);
int cli_cmd_bag(int argc, char **argv);

#endif
