/* Tables past the device's own largest buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE:
 * on POCL a share of the host's memory), with no CLEMBED_MAX_BUFFER_BYTES:
 * what test_split checks on small tables, here at the size that needs it.
 *   created   an F32 table of the largest buffer plus 2048 rows of 4 KiB, made
 *             by clembed_matrix_create (two pieces, zero-filled: the memory is
 *             touched); rows written on both sides of the pieces' boundary and
 *             at the end, looked up exactly; a sparse SGD step on them exact;
 *             Philox initialisation of a view across the boundary
 *             bit-identical to the same call on a small matrix
 *   loaded    a sparse .npy file of the same size (a few rows written, the rest
 *             holes), loaded: on POCL each piece over its own copy-on-write
 *             mapping of the file, so only the rows touched use memory;
 *             lookups of the written rows (and of a hole: zeros) exact
 * Needs the table's size in available memory (MemAvailable) and in the
 * device's global memory, else it skips (exit 77) saying so. Registered with
 * `ctest -C large -L large` only: never in the default run. */
#define _FILE_OFFSET_BITS 64
#include "test_util.h"

#include "clembed_io.h"

enum { D = 1024 };

static uint64_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  uint64_t kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", (unsigned long long *)&kb) == 1) break;
  if (f) fclose(f);
  return kb * 1024;
}

static cl_ulong device_info_ulong(clembed_context *ctx, cl_device_info what) {
  cl_device_id dev = NULL;
  cl_ulong v = 0;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  clGetDeviceInfo(dev, what, sizeof v, &v, NULL);
  return v;
}

/* Row r's values: exact in F32, distinct per row. */
static float rv(size_t r, size_t c) { return (float)(r % 100003) + (float)c / 1024.0f; }

static size_t g_rows, g_per; /* the table's rows, and the first piece's */

/* Looks up ids `want` in t and checks each output row against rv (or zeros for `zero` rows). */
static void lookup_rows(clembed_context *ctx, const clembed_matrix *t, const int64_t *want, size_t n,
                        const int *zero, const char *what) {
  clembed_ids ids = {0};
  clembed_matrix out = {0};
  OK(ctx, clembed_ids_create(ctx, want, n, CLEMBED_I64, &ids));
  OK(ctx, clembed_matrix_create(ctx, n, D, CLEMBED_F32, &out));
  OK(ctx, clembed_lookup(ctx, t, &ids, &out, 0, NULL, NULL));
  float *h = tu_read_f32(ctx, &out);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t c = 0; c < D; c++) bad += h[i * D + c] != (zero && zero[i] ? 0.0f : rv((size_t)want[i], c));
  EXPECT(bad == 0, "%s: %zu values differ", what, bad);
  free(h);
  clembed_matrix_release(&out);
  clembed_ids_release(&ids);
}

static void write_row(clembed_context *ctx, const clembed_matrix *t, size_t r) {
  float h[D];
  for (size_t c = 0; c < D; c++) h[c] = rv(r, c);
  clembed_matrix row = *t;
  row.offset = t->offset + r * D;
  row.rows = 1;
  OK(ctx, clembed_matrix_write(ctx, &row, h, CLEMBED_F32));
}

TU_CASE(created) {
  clembed_matrix t = {0};
  OK(ctx, clembed_matrix_create(ctx, g_rows, D, CLEMBED_F32, &t));
  clembed_matrix p[4];
  size_t first[4], n = 0;
  OK(ctx, clembed_matrix_pieces(ctx, &t, 4, p, first, &n));
  EXPECT(n == 2 && first[1] == g_per, "%zu pieces, the second from row %zu (expected 2, from %zu)", n,
         n > 1 ? first[1] : 0, g_per);
  int64_t rows[] = {0, (int64_t)g_per - 2, (int64_t)g_per - 1, (int64_t)g_per, (int64_t)g_per + 1,
                    (int64_t)g_rows - 1};
  size_t nr = sizeof rows / sizeof rows[0];
  for (size_t i = 0; i < nr; i++) write_row(ctx, &t, (size_t)rows[i]);
  lookup_rows(ctx, &t, rows, nr, NULL, "created: lookup across the boundary");
  /* SGD on both sides of the boundary: row -= lr * grad, exact (lr 1, grad = the row itself: 0) */
  clembed_matrix g = {0};
  clembed_ids ids = {0};
  OK(ctx, clembed_matrix_create(ctx, nr, D, CLEMBED_F32, &g));
  float *gh = malloc(nr * D * sizeof *gh);
  for (size_t i = 0; i < nr; i++)
    for (size_t c = 0; c < D; c++) gh[i * D + c] = rv((size_t)rows[i], c);
  OK(ctx, clembed_matrix_write(ctx, &g, gh, CLEMBED_F32));
  OK(ctx, clembed_ids_create(ctx, rows, nr, CLEMBED_I64, &ids));
  OK(ctx, clembed_sgd_update(ctx, &g, &ids, 1.0f, NULL, &t, 0, NULL, NULL));
  int zero[6] = {1, 1, 1, 1, 1, 1};
  lookup_rows(ctx, &t, rows, nr, zero, "created: after the step every stepped row is 0");
  free(gh);
  clembed_matrix_release(&g);
  clembed_ids_release(&ids);
  /* Philox on rows g_per - 3 .. g_per + 4: the bits of the same call on a small matrix */
  clembed_matrix v = t, small = {0};
  v.offset = (g_per - 3) * D;
  v.rows = 8;
  OK(ctx, clembed_matrix_create(ctx, 8, D, CLEMBED_F32, &small));
  OK(ctx, clembed_matrix_init_normal(ctx, &v, 0.0f, 1.0f, 2024, 0, NULL, NULL));
  OK(ctx, clembed_matrix_init_normal(ctx, &small, 0.0f, 1.0f, 2024, 0, NULL, NULL));
  float *a = tu_read_f32(ctx, &v), *b = tu_read_f32(ctx, &small);
  EXPECT(!memcmp(a, b, 8 * D * sizeof *a), "initialisation across the boundary differs from a small matrix's");
  free(a);
  free(b);
  clembed_matrix_release(&small);
  clembed_matrix_release(&t);
}

TU_CASE(loaded) {
  char path[256];
  snprintf(path, sizeof path, "/tmp/clembed_test_split_large_%ld.npy", (long)getpid());
  FILE *f = fopen(path, "wb");
  EXPECT(f != NULL, "cannot write %s", path);
  if (!f) return;
  char dict[128];
  snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %d), }", g_rows, D);
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0};
  fwrite(pre, 1, 10, f);
  fwrite(dict, 1, strlen(dict), f);
  for (size_t i = 10 + strlen(dict); i < 127; i++) fputc(' ', f);
  fputc('\n', f);
  int64_t rows[] = {1, (int64_t)g_per - 1, (int64_t)g_per, (int64_t)g_rows - 1, 7777};
  int zero[] = {0, 0, 0, 0, 1}; /* row 7777 is a hole of the sparse file */
  for (size_t i = 0; i < 4; i++) {
    float h[D];
    for (size_t c = 0; c < D; c++) h[c] = rv((size_t)rows[i], c);
    fseeko(f, 128 + (off_t)rows[i] * D * 4, SEEK_SET);
    fwrite(h, 4, D, f);
  }
  int ok = fflush(f) == 0 && ftruncate(fileno(f), (off_t)(128 + (uint64_t)g_rows * D * 4)) == 0;
  fclose(f);
  EXPECT(ok, "cannot size %s", path);
  clembed_file *file = NULL;
  clembed_matrix t = {0};
  OK(ctx, clembed_file_open(path, &file));
  OK(ctx, clembed_matrix_load(ctx, file, NULL, CLEMBED_F32, &t));
  clembed_file_close(file);
  size_t first[4], n = 0;
  clembed_matrix p[4];
  OK(ctx, clembed_matrix_pieces(ctx, &t, 4, p, first, &n));
  EXPECT(n == 2, "the loaded table lies in %zu buffers", n);
  lookup_rows(ctx, &t, rows, 5, zero, "loaded: lookup across the boundary");
  clembed_matrix_release(&t);
  remove(path);
}

int main(int argc, char **argv) {
  clembed_context *ctx = tu_context();
  cl_ulong max_alloc = device_info_ulong(ctx, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  cl_ulong global = device_info_ulong(ctx, CL_DEVICE_GLOBAL_MEM_SIZE);
  g_per = (size_t)(max_alloc / (D * 4));
  g_rows = g_per + 2048;
  uint64_t bytes = (uint64_t)g_rows * D * 4, avail = mem_available();
  clembed_context_destroy(ctx);
  if (getenv("CLEMBED_MAX_BUFFER_BYTES")) {
    printf("skipped: CLEMBED_MAX_BUFFER_BYTES is set; this test is about the device's own limit\n");
    return 77;
  }
  if (bytes > global || bytes + ((uint64_t)1 << 30) > avail) {
    printf("skipped: a table past the device's largest buffer (%llu bytes) needs %llu bytes; the device has %llu "
           "and %llu are available\n",
           (unsigned long long)max_alloc, (unsigned long long)bytes, (unsigned long long)global,
           (unsigned long long)avail);
    return 77;
  }
  printf("a %zu x %d F32 table (%llu bytes) past the largest buffer (%llu bytes)\n", g_rows, D,
         (unsigned long long)bytes, (unsigned long long)max_alloc);
  tu_suite s = {"test_split_large", 1, NULL, NULL, 0};
  return tu_main(argc, argv, s);
}
