/* .npy inputs: mapped read-only (no second copy in host memory) and checked
 * for their role; every message names the flag and the file. */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define IN_MAX 8

static npy_mapping g_in[IN_MAX];
static int g_nin;

void cli_input_release(void) {
  for (int i = g_nin - 1; i >= 0; i--) npy_unmap(&g_in[i]);
  g_nin = 0;
}

clembed_dtype cli_host_dtype(npy_dtype t) { return t == NPY_F2 ? CLEMBED_F16 : CLEMBED_F32; }

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
