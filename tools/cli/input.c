/* Array inputs: a .npy file, or a tensor of a .safetensors or .gguf file
 * (recognised by content; FILE:NAME picks a tensor), mapped read-only (no
 * second copy in host memory, except a BF16 tensor, widened to <f4, and a
 * tensor whose data are not aligned to its item size) and checked for their
 * role; every message names the flag and the file. A table loaded with
 * cli_load_table_file stays in its file (BF16 and block-quantized tensors
 * included) and goes to the device with cli_upload_table (clembed_matrix_load,
 * in bounded pieces). */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "clembed_io.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define IN_MAX 8

static npy_mapping g_in[IN_MAX];
static int g_nin;
/* tensors of .safetensors and .gguf files, seen as .npy arrays */
static clembed_file *g_files[IN_MAX];
static npy_array g_arrays[IN_MAX];
static int g_bf16[IN_MAX]; /* g_arrays[i] came from a BF16 tensor */
static int g_kind[IN_MAX];  /* g_arrays[i]'s stored clembed_dtype (-1: an integer type) */
static const char *g_name[IN_MAX]; /* g_arrays[i]'s tensor name (owned by its file) */
static int g_lazy[IN_MAX]; /* g_arrays[i] stays in its file (cli_upload_table) */
static int g_nfiles;
static int g_table_file; /* loading a table for cli_upload_table: no host data made */

void cli_input_release(void) {
  for (int i = g_nin - 1; i >= 0; i--) npy_unmap(&g_in[i]);
  g_nin = 0;
  for (int i = g_nfiles - 1; i >= 0; i--) clembed_file_close(g_files[i]);
  g_nfiles = 0;
}

/* Whether `path` is a regular file that starts with the .npy magic, or is not a
 * regular file at all (a pipe: read as .npy, as before, without reading ahead). */
static int is_npy(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 1;
  unsigned char magic[6] = {0};
  int fd = open(path, O_RDONLY);
  if (fd < 0) return 1; /* npy_map says why */
  ssize_t n = read(fd, magic, sizeof magic);
  close(fd);
  return n == 6 && !memcmp(magic, "\x93NUMPY", 6);
}

/* A tensor of a .safetensors or .gguf file (name NULL: the only one, or for
 * --table token_embd.weight) as a .npy array. */
static const npy_array *load_tensor(const char *flagname, const char *arg, const char *path, const char *name) {
  if (g_nfiles == IN_MAX) cli_fail(2, "internal error: too many inputs");
  clembed_file *f = NULL;
  if (clembed_file_open(path, &f) != CLEMBED_OK) cli_fail(1, "%s %s", flagname, clembed_last_error_message());
  g_files[g_nfiles++] = f;
  size_t n = clembed_file_tensor_count(f), i = 0;
  if (name) {
    if (clembed_file_find(f, name, &i) != CLEMBED_OK) cli_fail(1, "%s %s", flagname, clembed_last_error_message());
  } else if (n != 1 && !(!strcmp(flagname, "--table") && clembed_file_find(f, "token_embd.weight", &i) == CLEMBED_OK)) {
    char list[2048];
    size_t used = 0;
    list[0] = '\0';
    for (size_t k = 0; k < n && used + 8 < sizeof list; k++) {
      clembed_tensor_info t;
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
  clembed_tensor_info t;
  const void *data = NULL;
  if (clembed_file_tensor_info(f, i, &t) != CLEMBED_OK || clembed_file_tensor_data(f, i, &data) != CLEMBED_OK)
    cli_fail(2, "%s %s", flagname, clembed_last_error_message());
  npy_array *a = &g_arrays[g_nfiles - 1];
  memset(a, 0, sizeof *a);
  int bf16 = t.dtype == CLEMBED_BF16;
  int lazy = g_table_file && t.dtype >= 0; /* left in the file for cli_upload_table */
  g_bf16[g_nfiles - 1] = bf16;
  g_kind[g_nfiles - 1] = t.dtype;
  g_lazy[g_nfiles - 1] = lazy;
  g_name[g_nfiles - 1] = t.name;
  if (t.dtype == CLEMBED_F32)
    a->dtype = NPY_F4;
  else if (t.dtype == CLEMBED_F16)
    a->dtype = NPY_F2;
  else if (bf16)
    a->dtype = NPY_F4;
  else if (!strcmp(t.type_name, "I32") || !strcmp(t.type_name, "i32"))
    a->dtype = NPY_I4;
  else if (!strcmp(t.type_name, "I64") || !strcmp(t.type_name, "i64"))
    a->dtype = NPY_I8;
  else if (lazy)
    a->dtype = NPY_F4; /* a block-quantized table: its values, never read on the host */
  else if (t.dtype >= 0)
    cli_fail(1, "%s %s: tensor '%s' is block-quantized (%s): a quantized table is for looking up only (embed's "
                "--table); here the tool takes F32, F16, BF16, I32 and I64 tensors", flagname, arg, t.name, t.type_name);
  else
    cli_fail(1, "%s %s: tensor '%s' is of type %s; the tool takes F32, F16, BF16, I32 and I64 tensors", flagname,
             arg, t.name, t.type_name);
  a->ndim = t.ndim;
  size_t count = 1;
  for (int d = 0; d < t.ndim; d++) {
    if (t.shape[d] > SIZE_MAX) cli_fail(1, "%s %s: tensor '%s' is too large", flagname, arg, t.name);
    a->shape[d] = (size_t)t.shape[d];
    count = cli_mul3(count, a->shape[d], 1, flagname);
  }
  a->count = count;
  size_t item = npy_itemsize(a->dtype);
  if (lazy) {
    a->data = NULL; /* cli_upload_table loads it from the file */
  } else if (bf16) { /* widened to float32, exactly */
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
    a->data = (void *)(uintptr_t)data; /* read-only: the tool never writes its inputs */
  }
  if (!a->data && !lazy) a->data = (void *)"";
  return a;
}

clembed_dtype cli_host_dtype(npy_dtype t) { return t == NPY_F2 ? CLEMBED_F16 : CLEMBED_F32; }

clembed_dtype cli_input_dtype(const npy_array *a) {
  for (int i = 0; i < g_nfiles; i++)
    if (a == &g_arrays[i] && g_kind[i] >= 0) return (clembed_dtype)g_kind[i];
  return cli_host_dtype(a->dtype);
}

int cli_input_in_file(const npy_array *a) {
  for (int i = 0; i < g_nfiles; i++)
    if (a == &g_arrays[i] && g_lazy[i]) return 1;
  return 0;
}

clembed_matrix *cli_upload_table(const npy_array *a, clembed_dtype dtype) {
  for (int i = 0; i < g_nfiles; i++)
    if (a == &g_arrays[i] && g_lazy[i]) {
      clembed_matrix *m = cli_new_matrix();
      cli_check(clembed_matrix_load(cli_ctx, g_files[i], g_name[i], dtype, m));
      return m;
    }
  return cli_upload(a->data, cli_host_dtype(a->dtype), a->shape[0], a->ndim > 1 ? a->shape[1] : 0, dtype);
}

size_t cli_array_bytes(const npy_array *a) { return a->count * npy_itemsize(a->dtype); }

static const char *shape_str(const npy_array *a, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  used += (size_t)snprintf(buf, len, "(");
  for (int i = 0; i < a->ndim && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%zu", i ? ", " : "", a->shape[i]);
  if (used < len) snprintf(buf + used, len - used, a->ndim == 1 ? ",)" : ")");
  return buf;
}

const npy_array *cli_load(const char *flagname, const char *path) {
  char err[1024];
  struct stat st;
  /* FILE:NAME, unless the whole argument is a file */
  const char *colon = strrchr(path, ':');
  if (colon && stat(path, &st) != 0) {
    size_t len = (size_t)(colon - path);
    char *file = cli_malloc(len + 1);
    memcpy(file, path, len);
    file[len] = '\0';
    if (!is_npy(file)) return load_tensor(flagname, path, file, colon + 1);
    if (stat(file, &st) == 0)
      cli_fail(1, "%s %s: %s is a .npy file, which holds one array without a name", flagname, path, file);
  } else if (!is_npy(path) || (g_table_file && stat(path, &st) == 0 && S_ISREG(st.st_mode))) {
    /* a .npy table (a regular file) too: loaded by clembed_matrix_load from its file */
    return load_tensor(flagname, path, path, NULL);
  }
  if (g_nin == IN_MAX) cli_fail(2, "internal error: too many inputs");
  npy_mapping *m = &g_in[g_nin];
  if (npy_map(path, m, err, sizeof err) != 0) cli_fail(1, "%s %s", flagname, err);
  g_nin++;
  return &m->array;
}

const npy_array *cli_load_table(const char *flagname, const char *path) {
  char sh[256];
  const npy_array *a = cli_load(flagname, path);
  if (a->dtype != NPY_F4 && a->dtype != NPY_F2)
    cli_fail(1, "%s %s: dtype %s; a table must be <f4 or <f2", flagname, path, npy_dtype_name(a->dtype));
  if (a->ndim != 2)
    cli_fail(1, "%s %s: shape %s; a table must be 2-D (rows, dim)", flagname, path, shape_str(a, sh, sizeof sh));
  return a;
}

const npy_array *cli_load_table_file(const char *flagname, const char *path) {
  g_table_file = 1;
  const npy_array *a = cli_load_table(flagname, path);
  g_table_file = 0;
  return a;
}

const npy_array *cli_load_ids(const char *flagname, const char *path) {
  char sh[256];
  const npy_array *a = cli_load(flagname, path);
  if (a->dtype != NPY_I4 && a->dtype != NPY_I8)
    cli_fail(1, "%s %s: dtype %s; ids must be <i4 or <i8", flagname, path, npy_dtype_name(a->dtype));
  if (a->ndim != 1 && a->ndim != 2)
    cli_fail(1, "%s %s: shape %s; ids must be 1-D (n,) or 2-D (batch, seq)", flagname, path,
             shape_str(a, sh, sizeof sh));
  return a;
}

const npy_array *cli_load_grad(const char *path, const npy_array *ids, const char *ids_path) {
  char sh[256], ish[256];
  const npy_array *g = cli_load("--grad", path);
  if (g->dtype != NPY_F4 && g->dtype != NPY_F2)
    cli_fail(1, "--grad %s: dtype %s; a gradient must be <f4 or <f2", path, npy_dtype_name(g->dtype));
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
