/* Array inputs: a .npy file or a tensor of a .safetensors or .gguf file
 * (recognised by content; FILE:NAME picks a tensor), every one read through
 * the library's readers (clembed_io.h): a regular file is mapped
 * (clembed_file_open), a pipe, FIFO or device is read into memory first
 * (clembed_file_open_memory). Each input is checked for its role, and every
 * message names the flag and the file. The tool holds no second copy of an
 * input in host memory, except a BF16 tensor widened to <f4 and a tensor whose
 * data are not aligned to their item size. A table stays in its file and goes
 * to the device with cli_upload_table (clembed_matrix_load, in bounded
 * pieces); ids go with cli_upload_ids (clembed_ids_load). */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "clembed_io.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define IN_MAX 8
#if NPY_MAX_DIMS < CLEMBED_FILE_MAX_DIMS
#error "the tool's arrays must hold every shape the library reads"
#endif

static struct input {
  clembed_file *file;
  void *bytes;         /* a pipe's bytes, which the file reads (freed after it) */
  size_t index;        /* the tensor */
  const char *name;    /* its name (owned by the file) */
  int one;             /* the file's only tensor (loaded with name NULL) */
  int stored;          /* its clembed_dtype, or -1 */
  int lazy;            /* no host data: loaded from the file by cli_upload_table */
  int raw;             /* u8: a row-wise table's rows as FBGEMM stores them (cli_table_cols) */
  int ndim;            /* the tensor's own shape (a table's view is flattened) */
  size_t shape[CLEMBED_FILE_MAX_DIMS];
  npy_array a;         /* the tool's view */
} g_in[IN_MAX];
static int g_nin;

void cli_input_release(void) {
  for (int i = g_nin - 1; i >= 0; i--) {
    clembed_file_close(g_in[i].file);
    free(g_in[i].bytes);
  }
  memset(g_in, 0, sizeof g_in);
  g_nin = 0;
}

static struct input *input_of(const npy_array *a) {
  for (int i = 0; i < g_nin; i++)
    if (a == &g_in[i].a) return &g_in[i];
  return NULL;
}

/* Reads what is not a regular file (a pipe, a FIFO, a device) to its end. */
static void *read_all(const char *flagname, const char *path, size_t *size) {
  const char *sep = flagname ? " " : "";
  if (!flagname) flagname = "";
  int fd = open(path, O_RDONLY | O_CLOEXEC); /* a FIFO waits here for its writer */
  if (fd < 0) cli_fail(1, "%s%s%s: cannot open: %s", flagname, sep, path, strerror(errno));
  size_t cap = 1 << 16, n = 0, checked = 0;
  /* no more than the machine's memory: a device that never ends (/dev/zero) is an error, not a hang */
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  size_t limit = pages > 0 && page > 0 && (unsigned long)pages <= SIZE_MAX / (unsigned long)page
                     ? (size_t)pages * (size_t)page
                     : SIZE_MAX;
  unsigned char *buf = malloc(cap);
  for (;;) {
    if (buf && !checked && n >= 16) { /* a .npy, .safetensors or .gguf file, by its first bytes */
      uint64_t hl = 0;
      for (int k = 7; k >= 0; k--) hl = hl << 8 | buf[k];
      int known = !memcmp(buf, "\x93NUMPY", 6) || !memcmp(buf, "GGUF", 4) || (hl >= 2 && buf[8] == '{');
      if (!known) {
        free(buf);
        close(fd);
        cli_fail(1, "%s%s%s: not a .npy, .safetensors or .gguf file (its first bytes say none of them)", flagname,
                 sep, path);
      }
      checked = 1;
    }
    if (n >= limit) {
      free(buf);
      close(fd);
      cli_fail(1, "%s%s%s: more than the machine's %zu bytes of memory; give it as a regular file", flagname, sep,
               path, limit);
    }
    if (buf && n == cap) {
      unsigned char *b = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
      if (!b) free(buf);
      buf = b;
      cap *= 2;
    }
    if (!buf) {
      close(fd);
      cli_fail(2, "%s%s%s: out of host memory after %zu bytes", flagname, sep, path, n);
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      free(buf);
      close(fd);
      cli_fail(1, "%s%s%s: read: %s", flagname, sep, path, strerror(e));
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  *size = n;
  return buf;
}

/* Opens `path` through the library into a new input slot; messages start
 * with `flagname` (none when NULL). */
static struct input *open_input(const char *flagname, const char *path) {
  if (g_nin == IN_MAX) cli_fail(2, "internal error: too many inputs");
  struct input *in = &g_in[g_nin];
  memset(in, 0, sizeof *in);
  struct stat st;
  clembed_status s;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    size_t n = 0;
    in->bytes = read_all(flagname, path, &n);
    g_nin++; /* the bytes are released with the slot */
    s = clembed_file_open_memory(in->bytes, n, path, &in->file);
  } else {
    g_nin++;
    s = clembed_file_open(path, &in->file);
  }
  if (s != CLEMBED_OK)
    cli_fail(s == CLEMBED_ERR_OUT_OF_MEMORY ? 2 : 1, "%s%s%s", flagname ? flagname : "", flagname ? " " : "",
             clembed_last_error_message());
  return in;
}

clembed_file *cli_open_file(const char *flagname, const char *path) { return open_input(flagname, path)->file; }

/* What `t` is to the tool: a float type, ids or block-quantized. */
static unsigned kind_of(const clembed_tensor_info *t, npy_dtype *host) {
  char buf[64];
  const char *text = cli_type_text(t, buf, sizeof buf);
  if (t->dtype == CLEMBED_F32 || t->dtype == CLEMBED_BF16) {
    *host = NPY_F4; /* BF16 widened to float32 on the host */
    return CLI_TAKES_FLOAT;
  }
  if (t->dtype == CLEMBED_F16) {
    *host = NPY_F2;
    return CLI_TAKES_FLOAT;
  }
  if (t->dtype >= 0) {
    *host = NPY_F4; /* never read on the host */
    return CLI_TAKES_BLOCKS;
  }
  if (!strcmp(text, "i32") || !strcmp(text, "i64")) {
    *host = text[1] == '3' ? NPY_I4 : NPY_I8;
    return CLI_TAKES_IDS;
  }
  if (!strcmp(text, "u8")) { /* FBGEMM's row-wise rows as bytes: a table, never read on the host */
    *host = NPY_F4;
    return CLI_TAKES_BLOCKS;
  }
  return 0;
}

/* "f32, f16, bf16, i32, i64": what `takes` admits, for a message. */
static const char *takes_text(unsigned takes, char *buf, size_t cap) {
  char list[1024]; /* every table dtype, the library's list */
  buf[0] = '\0';
  if (takes & CLI_TAKES_FLOAT) cli_dtype_list(CLI_DT_FLOAT, buf, cap);
  if (takes & CLI_TAKES_BLOCKS) {
    cli_dtype_list(CLI_DT_TABLE, list, sizeof list);
    snprintf(buf, cap, "%s", list); /* the table dtypes include the float ones */
  }
  if (takes & CLI_TAKES_IDS) {
    size_t used = strlen(buf);
    snprintf(buf + used, cap - used, "%si32, i64", used ? ", " : "");
  }
  return buf;
}

static const char *shape_text(int ndim, const size_t *shape, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "(");
  for (int i = 0; i < ndim && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%zu", i ? ", " : "", shape[i]);
  if (used < len) snprintf(buf + used, len - used, ndim == 1 ? ",)" : ")");
  return buf;
}

const npy_array *cli_load_as(const char *flagname, const char *arg, unsigned takes) {
  /* FILE:NAME, unless the whole argument is a file (or FILE does not exist either) */
  struct stat st;
  const char *path = arg, *name = NULL, *colon = strrchr(arg, ':');
  if (colon && stat(arg, &st) != 0) {
    size_t len = (size_t)(colon - arg);
    char *file = cli_malloc(len + 1);
    memcpy(file, arg, len);
    file[len] = '\0';
    if (stat(file, &st) == 0) {
      path = file;
      name = colon + 1;
    }
  }
  struct input *in = open_input(flagname, path);
  clembed_file *f = in->file;
  size_t n = clembed_file_tensor_count(f), i = 0;
  clembed_tensor_info t;
  if (name) {
    if (n == 1 && clembed_file_tensor_info(f, 0, &t) == CLEMBED_OK && !t.name[0])
      cli_fail(1, "%s %s: %s is a .npy file, which holds one array without a name", flagname, arg, path);
    if (clembed_file_find(f, name, &i) != CLEMBED_OK) cli_fail(1, "%s %s", flagname, clembed_last_error_message());
  } else if (n != 1 && !(!strcmp(flagname, "--table") && clembed_file_find(f, "token_embd.weight", &i) == CLEMBED_OK)) {
    char list[2048];
    size_t used = 0;
    list[0] = '\0';
    for (size_t k = 0; k < n && used + 8 < sizeof list; k++) {
      if (clembed_file_tensor_info(f, k, &t) != CLEMBED_OK) break;
      int w = snprintf(list + used, sizeof list - used, "%s%s", k ? ", " : "", t.name);
      if (w < 0 || (size_t)w >= sizeof list - used) {
        strcpy(list + sizeof list - 5, "...");
        break;
      }
      used += (size_t)w;
    }
    if (n == 0) cli_fail(1, "%s %s: the file holds no tensor", flagname, path);
    cli_fail(1, "%s %s: the file holds %zu tensors; pick one with %s:NAME (%s)", flagname, path, n, path, list);
  }
  const void *data = NULL;
  uint64_t dims[CLEMBED_FILE_MAX_DIMS];
  int ndim = 0;
  if (clembed_file_tensor_info(f, i, &t) != CLEMBED_OK || clembed_file_tensor_data(f, i, &data) != CLEMBED_OK ||
      clembed_file_tensor_shape(f, i, dims, CLEMBED_FILE_MAX_DIMS, &ndim) != CLEMBED_OK)
    cli_fail(2, "%s %s", flagname, clembed_last_error_message());
  in->index = i;
  in->name = t.name;
  in->one = n == 1;
  in->stored = t.dtype;

  /* the type, for the role */
  npy_array *a = &in->a;
  npy_dtype host = NPY_F4;
  unsigned kind = kind_of(&t, &host);
  char what[600], tb[64], list[1024];
  const char *type = cli_type_text(&t, tb, sizeof tb);
  in->raw = kind == CLI_TAKES_BLOCKS && !strcmp(type, "u8"); /* bytes: a row-wise table's rows */
  if (t.name[0]) snprintf(what, sizeof what, "tensor '%s' is", t.name);
  else snprintf(what, sizeof what, "the array is");
  if (!(kind & takes)) {
    const char *role = kind != CLI_TAKES_BLOCKS ? ""
                       : in->raw ? " (bytes: FBGEMM's row-wise rows, for looking up only, as embed's --table with --dtype)"
                                 : " (block-quantized: for looking up only, as embed's --table)";
    cli_fail(1, "%s %s: %s %s%s; %s takes %s", flagname, arg, what, type, role, flagname,
             takes_text(takes, list, sizeof list));
  }

  /* the shape: a table's view is (rows, the product of the rest), as clembed_matrix_load reads it */
  size_t count = 1;
  in->ndim = ndim;
  for (int d = 0; d < ndim; d++) {
    if (dims[d] > SIZE_MAX) cli_fail(1, "%s %s: %s too large for this machine", flagname, arg, what);
    in->shape[d] = (size_t)dims[d];
    count = cli_mul3(count, in->shape[d], 1, flagname);
  }
  a->dtype = host;
  a->count = count;
  if ((takes & CLI_TAKES_FLATTEN) && ndim > 2) {
    a->ndim = 2;
    a->shape[0] = in->shape[0];
    a->shape[1] = 1;
    for (int d = 1; d < ndim; d++) a->shape[1] = cli_mul3(a->shape[1], in->shape[d], 1, flagname);
  } else {
    a->ndim = ndim;
    for (int d = 0; d < ndim; d++) a->shape[d] = in->shape[d];
  }

  /* the data: left in the file, or read in place (widened for BF16, copied when unaligned) */
  size_t item = npy_itemsize(host);
  in->lazy = (takes & CLI_TAKES_LAZY) && kind != CLI_TAKES_IDS;
  if (in->lazy) {
    a->data = NULL;
  } else if (t.dtype == CLEMBED_BF16) {
    float *w = cli_malloc(cli_mul3(count, sizeof(float), 1, flagname));
    const unsigned char *p = data;
    for (size_t k = 0; k < count; k++) {
      uint32_t u = ((uint32_t)p[2 * k] | ((uint32_t)p[2 * k + 1] << 8)) << 16;
      memcpy(&w[k], &u, 4);
    }
    a->data = w;
  } else if (count && (uintptr_t)data % item) { /* the tool reads items in place: aligned copies */
    void *c = cli_malloc(cli_mul3(count, item, 1, flagname));
    memcpy(c, data, count * item);
    a->data = c;
  } else {
    a->data = data ? (void *)(uintptr_t)data : (void *)""; /* read-only: the tool never writes its inputs */
  }
  return a;
}

const npy_array *cli_load(const char *flagname, const char *path) {
  return cli_load_as(flagname, path, CLI_TAKES_FLOAT | CLI_TAKES_IDS);
}

clembed_dtype cli_host_dtype(npy_dtype t) { return t == NPY_F2 ? CLEMBED_F16 : CLEMBED_F32; }

clembed_dtype cli_input_dtype(const npy_array *a) {
  struct input *in = input_of(a);
  if (in && in->stored >= 0) return (clembed_dtype)in->stored;
  return cli_host_dtype(a->dtype);
}

size_t cli_table_cols(const char *flagname, const char *path, const npy_array *a, clembed_dtype dtype) {
  struct input *in = input_of(a);
  if (!in || !in->raw) return a->shape[1];
  size_t bytes = a->shape[1];
  if (clembed_dtype_block_values(dtype) != 0)
    cli_fail(1, "%s %s: bytes (u8) are the rows of one of FBGEMM's row-wise types, as FBGEMM stores them: give "
             "--dtype i8_rowwise, i4_rowwise, i2_rowwise, i8_tbe, i4_tbe, i2_tbe or fp8_rowwise", flagname, path);
  /* the most values a row of that many bytes holds (FP8_ROWWISE pads its values to 4 bytes) */
  for (size_t c = bytes > SIZE_MAX / 4 ? SIZE_MAX / 4 : bytes * 4; c >= 1; c--)
    if (clembed_dtype_row_bytes(dtype, c) == bytes) return c;
  cli_fail(1, "%s %s: rows of %zu bytes, which no %s row is", flagname, path, bytes, clembed_dtype_name(dtype));
  return 0;
}

int cli_input_in_file(const npy_array *a) {
  struct input *in = input_of(a);
  return in && in->lazy;
}

int cli_input_shape(const npy_array *a, size_t *shape, int capacity) {
  struct input *in = input_of(a);
  if (!in) {
    for (int d = 0; d < a->ndim && d < capacity; d++) shape[d] = a->shape[d];
    return a->ndim;
  }
  for (int d = 0; d < in->ndim && d < capacity; d++) shape[d] = in->shape[d];
  return in->ndim;
}

clembed_matrix *cli_upload_table(const npy_array *a, clembed_dtype dtype) {
  struct input *in = input_of(a);
  if (!in) return cli_upload(a->data, cli_host_dtype(a->dtype), a->shape[0], a->ndim > 1 ? a->shape[1] : 0, dtype);
  clembed_matrix *m = cli_new_matrix();
  cli_check(clembed_matrix_load(cli_ctx, in->file, in->one ? NULL : in->name, dtype, m));
  return m;
}

clembed_ids *cli_upload_ids(const npy_array *a) {
  struct input *in = input_of(a);
  clembed_ids *d = cli_new_ids();
  if (in) cli_check(clembed_ids_load(cli_ctx, in->file, in->one ? NULL : in->name, d));
  else cli_check(clembed_ids_create(cli_ctx, a->data, a->count, a->dtype == NPY_I8 ? CLEMBED_I64 : CLEMBED_I32, d));
  return d;
}

size_t cli_array_bytes(const npy_array *a) { return a->count * npy_itemsize(a->dtype); }

static const char *shape_str(const npy_array *a, char *buf, size_t len) {
  return shape_text(a->ndim, a->shape, buf, len);
}

const npy_array *cli_load_table(const char *flagname, const char *path) {
  char sh[256];
  const npy_array *a = cli_load_as(flagname, path, CLI_TAKES_FLOAT | CLI_TAKES_FLATTEN | CLI_TAKES_LAZY);
  if (a->ndim < 2)
    cli_fail(1, "%s %s: shape %s; a table has 2 or more dimensions (rows, dim, ...)", flagname, path,
             shape_str(a, sh, sizeof sh));
  return a;
}

const npy_array *cli_load_table_file(const char *flagname, const char *path) {
  char sh[256];
  const npy_array *a = cli_load_as(flagname, path, CLI_TAKES_FLOAT | CLI_TAKES_BLOCKS | CLI_TAKES_FLATTEN |
                                                       CLI_TAKES_LAZY);
  if (a->ndim < 2)
    cli_fail(1, "%s %s: shape %s; a table has 2 or more dimensions (rows, dim, ...)", flagname, path,
             shape_str(a, sh, sizeof sh));
  return a;
}

const npy_array *cli_load_ids(const char *flagname, const char *path) {
  char sh[256];
  const npy_array *a = cli_load_as(flagname, path, CLI_TAKES_IDS);
  if (a->ndim != 1 && a->ndim != 2)
    cli_fail(1, "%s %s: shape %s; ids must be 1-D (n,) or 2-D (batch, seq)", flagname, path,
             shape_str(a, sh, sizeof sh));
  return a;
}

const npy_array *cli_load_remap(const char *path) {
  static char what[1100];
  char sh[256];
  if (!path) return NULL;
  const npy_array *a = cli_load_as("--remap", path, CLI_TAKES_IDS);
  if (a->ndim != 1)
    cli_fail(1, "--remap %s: shape %s; a remap is 1-D (an entry per id of the unpruned table)", path,
             shape_str(a, sh, sizeof sh));
  snprintf(what, sizeof what, "--remap %s", path);
  cli_blame_arg("remap", what);
  return a;
}

const npy_array *cli_load_grad(const char *path, const npy_array *ids, const char *ids_path) {
  char sh[256], ish[256];
  const npy_array *g = cli_load_as("--grad", path, CLI_TAKES_FLOAT);
  int ok = g->ndim == ids->ndim + 1;
  for (int i = 0; ok && i < ids->ndim; i++) ok = g->shape[i] == ids->shape[i];
  if (!ok) {
    char want[300];
    shape_str(ids, ish, sizeof ish);
    snprintf(want, sizeof want, "%.*s%sD)", (int)(strlen(ish) - (ids->ndim == 1 ? 2 : 1)), ish,
             ids->ndim ? ", " : "");
    cli_fail(1, "--grad %s: shape %s does not match --ids %s of shape %s: expected %s", path,
             shape_str(g, sh, sizeof sh), ids_path, ish, want);
  }
  return g;
}

void cli_check_ids_host(const npy_array *ids, size_t rows, clembed_index_policy policy, const char *what) {
  if (policy != CLEMBED_INDEX_CHECK && policy != CLEMBED_INDEX_WRAP) return;
  int64_t r = rows > (size_t)INT64_MAX ? INT64_MAX : (int64_t)rows;
  int64_t low = policy == CLEMBED_INDEX_WRAP ? -r : 0;
  for (size_t i = 0; i < ids->count; i++) {
    int64_t v = ids->dtype == NPY_I8 ? ((const int64_t *)ids->data)[i] : ((const int32_t *)ids->data)[i];
    if (v < low || v >= r)
      cli_fail(1, "%s: ids[%zu] = %" PRId64 " is outside the table of %zu rows", what, i, v, rows);
  }
}
