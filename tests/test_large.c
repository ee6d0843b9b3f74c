/* Large tables: 64-bit offsets all the way down.
 *
 * An F16 table of more than 2^31 elements (2^31 + 2^20: 4 GiB + 2 MiB) when
 * the device allows one allocation that large; otherwise the largest buffer
 * the device allows (CL_DEVICE_MAX_MEM_ALLOC_SIZE; 4 GiB on POCL, so the last
 * F16 element is 2^31 - 1 and its byte offset is past 2^32 - 2). The buffer is
 * the caller's own (clCreateBuffer, not zero-filled: only the rows that are
 * used are ever written, so the host memory actually touched stays small), and
 * the test writes only the rows it needs through matrix views with large
 * offsets. On it:
 * - lookups of the last rows (and of the row that starts at element 2^31 when
 *   the table has one), with CHECK, WRAP (-1 is the last row) and CLAMP (huge
 *   ids), I32 and I64 ids, exact;
 * - a table view whose offset points at its last rows, ids and an output
 *   stored in the same buffer past 2^31 bytes;
 * - an out-of-range id naming the table's true row count;
 * - the fused SGD step on the last rows (F16) and the backward into an F32
 *   view's last rows: exact, neighbouring rows untouched;
 * - Philox initialisation and the sinusoid written at the end of the buffer:
 *   bit-identical to the same calls on a small matrix.
 * Skips (exit 77) where the device cannot allocate at least 2^31 + 2^20 bytes
 * in one buffer. Not run on Oclgrind (far too large for a simulator). */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

enum { D = 64 };

/* Row r of the reference table (exact in F16): r mod 97 + c / 8. */
static float tval(size_t r, size_t c) { return (float)(r % 97) + 0.125f * (float)(c % 8) + (c >= 8 ? 0.5f : 0.0f); }

static clembed_matrix view(cl_mem b, size_t offset, size_t rows, size_t cols, clembed_dtype t) {
  clembed_matrix m = {b, offset, rows, cols, cols, t};
  return m;
}

/* Writes table rows [r0, r0 + n) of the F16 view `table` with tval. */
static void write_rows(clembed_context *ctx, const clembed_matrix *table, size_t r0, size_t n) {
  float *h = malloc(n * D * sizeof *h);
  for (size_t i = 0; i < n; i++)
    for (size_t c = 0; c < D; c++) h[i * D + c] = tval(r0 + i, c);
  clembed_matrix w = *table;
  w.offset = table->offset + r0 * table->ld;
  w.rows = n;
  OK(ctx, clembed_matrix_write(ctx, &w, h, CLEMBED_F32));
  free(h);
}

/* Looks up `n` ids on `table` (rows R) into `out` and checks out[i] = table[want[i]]. */
static void lookup_check(clembed_context *ctx, const char *what, const clembed_matrix *table, const clembed_ids *ids,
                         clembed_index_policy pol, const int64_t *want, size_t n, clembed_matrix *out) {
  clembed_embed_options o = clembed_embed_defaults();
  o.policy = pol;
  clembed_status s = clembed_embed(ctx, table, ids, &o, out, 0, NULL, NULL);
  EXPECT(s == CLEMBED_OK, "%s: %s (%s)", what, clembed_status_string(s), clembed_context_message(ctx));
  float *h = malloc(n * D * sizeof *h);
  s = clembed_matrix_read(ctx, out, h, CLEMBED_F32);
  EXPECT(s == CLEMBED_OK, "%s: read: %s (%s)", what, clembed_status_string(s), clembed_context_message(ctx));
  int shown = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t c = 0; c < D; c++) {
      float w = ref_round(tval((size_t)want[i], c), table->dtype);
      if (h[i * D + c] != w && shown++ < 4)
        EXPECT(0, "%s: out[%zu][%zu] = %g, expected row %lld: %g", what, i, c, (double)h[i * D + c],
               (long long)want[i], (double)w);
    }
  if (!shown) EXPECT(1, "exact");
  free(h);
}

/* The big buffer and where things are in it. */
static double t0, tw;
static cl_command_queue q;
static cl_mem big;
static uint64_t min_bytes, bytes;
static size_t elems, R, row31;
static int has31;

/* Allocates the big buffer and writes the rows the cases use; exits 77 where
 * the device cannot hold it. */
static void setup(clembed_context *ctx) {
  t0 = now();
  q = clembed_context_queue(ctx);
  cl_device_id dev = NULL;
  cl_context clc = NULL;
  cl_ulong max_alloc = 0, global = 0;
  clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof clc, &clc, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL);
  printf("CL_DEVICE_MAX_MEM_ALLOC_SIZE %llu, CL_DEVICE_GLOBAL_MEM_SIZE %llu\n", (unsigned long long)max_alloc,
         (unsigned long long)global);

  const uint64_t want_elems = ((uint64_t)1 << 31) + ((uint64_t)1 << 20);
  min_bytes = ((uint64_t)1 << 31) + ((uint64_t)1 << 20); /* byte offsets past 2^31 */
  bytes = want_elems * 2;
  if (bytes > max_alloc) bytes = max_alloc;
  if (bytes > global) bytes = global;
  bytes &= ~(uint64_t)((D * 2 * 64) - 1); /* whole rows, and room for F32 and I64 views */
  if (bytes < min_bytes || (uint64_t)(size_t)bytes != bytes) {
    printf("SKIP: the device allows buffers of at most %llu bytes (global memory %llu): no offset reaches 2^31 "
           "bytes\n", (unsigned long long)max_alloc, (unsigned long long)global);
    clembed_context_destroy(ctx);
    exit(77);
  }
  cl_int err;
  big = clCreateBuffer(clc, CL_MEM_READ_WRITE, (size_t)bytes, NULL, &err);
  if (err != CL_SUCCESS) {
    printf("SKIP: clCreateBuffer of %llu bytes: %s\n", (unsigned long long)bytes,
           clembed_status_string((clembed_status)err));
    clembed_context_destroy(ctx);
    exit(77);
  }
  elems = (size_t)(bytes / 2);
  R = elems / D;
  row31 = ((size_t)1 << 31) / D; /* the row that starts at element 2^31 */
  has31 = row31 < R;
  printf("mode: %s: an F16 table of %zu x %d = %zu elements (%llu bytes); last row at element %zu, byte %zu\n",
         elems > ((size_t)1 << 31) ? "more than 2^31 elements" : "largest buffer the device allows", R, D, elems,
         (unsigned long long)bytes, (R - 1) * D, (R - 1) * D * 2);

  clembed_matrix table = view(big, 0, R, D, CLEMBED_F16);
  /* rows used: 0, 1, row31 (when present), R-4 .. R-1 */
  write_rows(ctx, &table, 0, 2);
  if (has31) write_rows(ctx, &table, row31 - 1, 2);
  tw = now();
  clembed_status s = clembed_finish(ctx);
  if (s != CLEMBED_OK) {
    printf("SKIP: writing into the %llu-byte buffer failed: %s (%s)\n", (unsigned long long)bytes,
           clembed_status_string(s), clembed_context_message(ctx));
    clReleaseMemObject(big);
    clembed_context_destroy(ctx);
    exit(77);
  }
  write_rows(ctx, &table, R - 4, 4);
}

/* the table's rows used: 0, 1, row31 (when present), R-4 .. R-1 */
static clembed_matrix whole_table(void) { return view(big, 0, R, D, CLEMBED_F16); }

/* lookups on the whole table: CHECK with I64 and I32 ids, WRAP, CLAMP; an
 * out-of-range id names the true row count */
TU_CASE(lookups_on_the_whole_table) {
  clembed_matrix table = whole_table();
  {
    const int64_t i64[] = {(int64_t)R - 1, 0, (int64_t)R - 2, has31 ? (int64_t)row31 : 1, (int64_t)R - 1,
                           has31 ? (int64_t)row31 - 1 : 0, (int64_t)R - 4, 1};
    enum { N = sizeof i64 / sizeof i64[0] };
    clembed_matrix out;
    clembed_ids d64, d32;
    OK(ctx, clembed_matrix_create(ctx, N, D, CLEMBED_F32, &out));
    OK(ctx, clembed_ids_create(ctx, i64, N, CLEMBED_I64, &d64));
    int32_t i32[N];
    for (int i = 0; i < N; i++) i32[i] = (int32_t)i64[i];
    OK(ctx, clembed_ids_create(ctx, i32, N, CLEMBED_I32, &d32));
    lookup_check(ctx, "lookup I64 ids", &table, &d64, CLEMBED_INDEX_CHECK, i64, N, &out);
    lookup_check(ctx, "lookup I32 ids", &table, &d32, CLEMBED_INDEX_CHECK, i64, N, &out);
    clembed_ids_release(&d64);
    clembed_ids_release(&d32);

    /* WRAP: -1 .. -4 are the last rows; CLAMP: huge ids are the last row */
    const int64_t wrap[] = {-1, -2, -(int64_t)R, -4, 0};
    const int64_t wrap_want[] = {(int64_t)R - 1, (int64_t)R - 2, 0, (int64_t)R - 4, 0};
    OK(ctx, clembed_ids_create(ctx, wrap, 5, CLEMBED_I64, &d64));
    clembed_matrix out5 = out;
    out5.rows = 5;
    lookup_check(ctx, "lookup WRAP", &table, &d64, CLEMBED_INDEX_WRAP, wrap_want, 5, &out5);
    clembed_ids_release(&d64);
    const int64_t clamp[] = {INT64_MAX, (int64_t)R, (int64_t)R - 1, INT64_MIN, (int64_t)1 << 40};
    const int64_t clamp_want[] = {(int64_t)R - 1, (int64_t)R - 1, (int64_t)R - 1, 0, (int64_t)R - 1};
    OK(ctx, clembed_ids_create(ctx, clamp, 5, CLEMBED_I64, &d64));
    lookup_check(ctx, "lookup CLAMP", &table, &d64, CLEMBED_INDEX_CLAMP, clamp_want, 5, &out5);
    clembed_ids_release(&d64);

    /* an out-of-range id names the true row count */
    const int64_t past[] = {(int64_t)R - 1, (int64_t)R};
    OK(ctx, clembed_ids_create(ctx, past, 2, CLEMBED_I64, &d64));
    out5.rows = 2;
    OK(ctx, clembed_lookup(ctx, &table, &d64, &out5, 0, NULL, NULL));
    char want_msg[96];
    snprintf(want_msg, sizeof want_msg, "ids[1] = %zu is outside [0, %zu)", R, R);
    FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
    EXPECT(strstr(clembed_context_message(ctx), want_msg) != NULL, "message '%s' lacks '%s'",
           clembed_context_message(ctx), want_msg);
    clembed_ids_release(&d64);
    clembed_matrix_release(&out);
  }
}

/* a view at the end; ids and output inside the big buffer past 2^31 bytes */
TU_CASE(view_ids_and_output_past_2_to_the_31_bytes) {
  {
    clembed_matrix tail = view(big, (R - 4) * D, 4, D, CLEMBED_F16);
    /* I64 ids at byte 2^31 + 2^20 - 64 (a region no table row used here occupies) */
    size_t id_byte = (size_t)min_bytes - 64;
    const int64_t ids[4] = {3, 0, 2, 3};
    EXPECT(clEnqueueWriteBuffer(q, big, CL_TRUE, id_byte, sizeof ids, ids, 0, NULL, NULL) == CL_SUCCESS,
           "writing ids at byte %zu", id_byte);
    clembed_ids d = {big, id_byte / 8, 4, CLEMBED_I64};
    /* the output: F32 rows ending 1 MiB before the table's last rows */
    size_t out_end_byte = (R - 4) * D * 2 - ((size_t)1 << 20);
    clembed_matrix out = view(big, out_end_byte / 4 - 4 * D, 4, D, CLEMBED_F32);
    printf("view: table offset %zu elements, ids at byte %zu, output at byte %zu\n", tail.offset, id_byte,
           out.offset * 4);
    const int64_t want[4] = {(int64_t)R - 1, (int64_t)R - 4, (int64_t)R - 2, (int64_t)R - 1};
    lookup_check(ctx, "lookup on a view at the end", &tail, &d, CLEMBED_INDEX_CHECK, want, 4, &out);
    /* and the F16 output path at the end too */
    clembed_matrix out16 = view(big, out.offset * 2, 4, D, CLEMBED_F16);
    lookup_check(ctx, "F16 output past 2^31 bytes", &tail, &d, CLEMBED_INDEX_CHECK, want, 4, &out16);
  }
}

/* the SGD step on the last rows of the F16 table */
TU_CASE(sgd_on_the_last_rows) {
  clembed_matrix table = whole_table();
  {
    const int64_t ids[3] = {(int64_t)R - 1, (int64_t)R - 3, (int64_t)R - 1};
    float g[3 * D];
    for (int i = 0; i < 3 * D; i++) g[i] = 0.25f * (float)(i % 5 + 1);
    clembed_matrix grad;
    clembed_ids d;
    OK(ctx, clembed_matrix_create(ctx, 3, D, CLEMBED_F32, &grad));
    OK(ctx, clembed_matrix_write(ctx, &grad, g, CLEMBED_F32));
    OK(ctx, clembed_ids_create(ctx, ids, 3, CLEMBED_I64, &d));
    OK(ctx, clembed_sgd_update(ctx, &grad, &d, 0.5f, NULL, &table, 0, NULL, NULL));
    OK(ctx, clembed_finish(ctx));
    float h[4 * D];
    clembed_matrix tail = view(big, (R - 4) * D, 4, D, CLEMBED_F16);
    OK(ctx, clembed_matrix_read(ctx, &tail, h, CLEMBED_F32));
    int bad = 0;
    for (size_t k = 0; k < 4; k++)
      for (size_t c = 0; c < D; c++) {
        size_t r = R - 4 + k;
        float gsum = 0.0f;
        for (int i = 0; i < 3; i++)
          if ((size_t)ids[i] == r) gsum = gsum + g[i * D + c];
        float old = ref_round(tval(r, c), CLEMBED_F16);
        float want = gsum != 0.0f ? ref_sgd(old, 0.5f, gsum, CLEMBED_F16) : old;
        bad += h[k * D + c] != want;
      }
    EXPECT(bad == 0, "sgd on the last rows: %d elements differ", bad);
    clembed_matrix_release(&grad);
    clembed_ids_release(&d);
  }
}

/* the backward into the last rows of an F32 view of the same buffer */
TU_CASE(backward_into_the_last_rows) {
  {
    size_t Rf = elems / 2 / D;
    clembed_matrix gt = view(big, 0, Rf, D, CLEMBED_F32);
    clembed_matrix last = view(big, (Rf - 3) * D, 3, D, CLEMBED_F32);
    float base[3 * D];
    for (int i = 0; i < 3 * D; i++) base[i] = (float)i;
    OK(ctx, clembed_matrix_write(ctx, &last, base, CLEMBED_F32));
    const int64_t ids[4] = {(int64_t)Rf - 1, (int64_t)Rf - 3, (int64_t)Rf - 1, -1};
    float g[4 * D];
    for (int i = 0; i < 4 * D; i++) g[i] = 0.5f * (float)(i % 7);
    clembed_matrix grad;
    clembed_ids d;
    OK(ctx, clembed_matrix_create(ctx, 4, D, CLEMBED_F32, &grad));
    OK(ctx, clembed_matrix_write(ctx, &grad, g, CLEMBED_F32));
    OK(ctx, clembed_ids_create(ctx, ids, 4, CLEMBED_I64, &d));
    clembed_backward_options bo = clembed_backward_defaults();
    bo.policy = CLEMBED_INDEX_WRAP; /* -1 is the last row */
    for (int det = 1; det >= 0; det--) {
      bo.deterministic = det;
      OK(ctx, clembed_backward(ctx, &grad, &d, &bo, &gt, 0, NULL, NULL));
    }
    OK(ctx, clembed_finish(ctx));
    float h[3 * D];
    OK(ctx, clembed_matrix_read(ctx, &last, h, CLEMBED_F32));
    int bad = 0;
    for (size_t k = 0; k < 3; k++)
      for (size_t c = 0; c < D; c++) {
        size_t r = Rf - 3 + k;
        float S = 0.0f;
        for (int i = 0; i < 4; i++) {
          int64_t ri = ref_resolve(ids[i], (int64_t)Rf, CLEMBED_INDEX_WRAP, -1, NULL);
          if (ri == (int64_t)r) S = S + g[i * D + c];
        }
        float want = base[k * D + c] + S + S; /* twice: sorted, then atomic (exact values) */
        bad += h[k * D + c] != want;
      }
    EXPECT(bad == 0, "backward into the last rows of a %zu-row F32 view: %d elements differ", Rf, bad);
    clembed_matrix_release(&grad);
    clembed_ids_release(&d);
  }
}

/* Philox initialisation and the sinusoid at the end of the buffer */
TU_CASE(init_and_sinusoid_at_the_end) {
  {
    clembed_matrix end16 = view(big, elems - 2 * D, 2, D, CLEMBED_F16);
    clembed_matrix end32 = view(big, elems / 2 - 3 * D, 3, D, CLEMBED_F32);
    clembed_matrix s16, s32;
    OK(ctx, clembed_matrix_create(ctx, 2, D, CLEMBED_F16, &s16));
    OK(ctx, clembed_matrix_create(ctx, 3, D, CLEMBED_F32, &s32));
    OK(ctx, clembed_matrix_init_uniform(ctx, &end16, -1.0f, 1.0f, 99, 0, NULL, NULL));
    OK(ctx, clembed_matrix_init_uniform(ctx, &s16, -1.0f, 1.0f, 99, 0, NULL, NULL));
    uint16_t a[2 * D], b[2 * D];
    OK(ctx, clembed_matrix_read(ctx, &end16, a, CLEMBED_F16));
    OK(ctx, clembed_matrix_read(ctx, &s16, b, CLEMBED_F16));
    EXPECT(!memcmp(a, b, sizeof a), "init_uniform at the end of the buffer differs from a small matrix");
    OK(ctx, clembed_positional(ctx, NULL, 12345, &end32, 0, NULL, NULL));
    OK(ctx, clembed_positional(ctx, NULL, 12345, &s32, 0, NULL, NULL));
    float x[3 * D], y[3 * D];
    OK(ctx, clembed_matrix_read(ctx, &end32, x, CLEMBED_F32));
    OK(ctx, clembed_matrix_read(ctx, &s32, y, CLEMBED_F32));
    EXPECT(!memcmp(x, y, sizeof x), "the sinusoid at the end of the buffer differs from a small matrix");
    clembed_matrix_release(&s16);
    clembed_matrix_release(&s32);
  }
}

/* one element past the end of the buffer is refused */
TU_CASE(one_element_past_the_end_refused) {
  {
    clembed_matrix past = view(big, elems - D + 1, 1, D, CLEMBED_F16);
    float h[D];
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_read(ctx, &past, h, CLEMBED_F32));
  }
}

static void teardown(clembed_context *ctx) {
  OK(ctx, clembed_finish(ctx));
  clReleaseMemObject(big);
  printf("time: %.2f s (first write into the big buffer at %.2f s)\n", now() - t0, tw - t0);
}

int main(int argc, char **argv) {
  return tu_main(argc, argv, (tu_suite){.name = "test_large", .device = 1, .setup = setup, .teardown = teardown});
}
