/* Fault behaviour: what happens when things go wrong below the API.
 * - A kernel build failure, injected per kernel family through the test hook
 *   clembed__test_override_source: CLEMBED_ERR_BUILD_FAILED with the build log
 *   (the compiler's own error text, naming the injected identifier) in the
 *   context message; no output is produced; a pending deferred error survives
 *   it; another context on the same cl_context (sharing the program cache) is
 *   not affected; and after restoring the embedded source the context works
 *   again with exact results.
 * - A context destroyed with work in flight (several large lookups, a
 *   backward and an SGD step enqueued, the data released, no finish) and with
 *   a deferred error never collected: no crash, the caller's event stays valid
 *   and completes, the caller's queue (create_from_queue) stays usable, and a
 *   new context works.
 * - More checked operations in flight than there are error slots; an
 *   allocation larger than the device allows.
 *
 * `test_faults oob` (test_oclgrind_detects, Oclgrind only) instead runs a lookup
 * with an injected ce_embed that writes one element past the output buffer:
 * Oclgrind must report an "Invalid write", which shows that the oclgrind label's
 * FAIL_REGULAR_EXPRESSION would catch such a kernel. */
#include "test_util.h"
#include "test_hooks.h"


/* A table whose row r is r + c / 8 (exact in every dtype for small r). */
static void make_table(clembed_context *ctx, size_t V, size_t D, clembed_matrix *t, float **host) {
  size_t n = V * D;
  float *h = malloc((n ? n : 1) * sizeof *h);
  for (size_t i = 0; i < n; i++) h[i] = (float)(i / D) + 0.125f * (float)(i % D % 8);
  OK(ctx, clembed_matrix_create(ctx, V, D, CLEMBED_F32, t));
  OK(ctx, clembed_matrix_write(ctx, t, h, CLEMBED_F32));
  *host = h;
}

/* A lookup on ctx is exact. */
static void lookup_works(clembed_context *ctx, const char *when) {
  enum { V = 7, D = 5, N = 9 };
  const int32_t ids[N] = {6, 0, 3, 3, 1, 5, 2, 4, 6};
  float *th, out[N * D];
  clembed_matrix t, o;
  clembed_ids d;
  make_table(ctx, V, D, &t, &th);
  OK(ctx, clembed_ids_create(ctx, ids, N, CLEMBED_I32, &d));
  OK(ctx, clembed_matrix_create(ctx, N, D, CLEMBED_F32, &o));
  clembed_status s = clembed_lookup(ctx, &t, &d, &o, 0, NULL, NULL);
  EXPECT(s == CLEMBED_OK, "%s: lookup: %s (%s)", when, clembed_status_string(s), clembed_context_message(ctx));
  s = clembed_matrix_read(ctx, &o, out, CLEMBED_F32);
  EXPECT(s == CLEMBED_OK, "%s: read: %s (%s)", when, clembed_status_string(s), clembed_context_message(ctx));
  int bad = 0;
  for (int i = 0; i < N; i++)
    for (int c = 0; c < D; c++) bad += out[i * D + c] != th[ids[i] * D + c];
  EXPECT(bad == 0, "%s: the lookup is not exact (%d elements differ)", when, bad);
  free(th);
  clembed_matrix_release(&t);
  clembed_matrix_release(&o);
  clembed_ids_release(&d);
}

/* ------------------------------------------------------- build failures */

#define INJECTED "clembed_injected_build_error"

/* Kernel sources that do not compile: an undeclared identifier the build log
 * must name. Each defines the family's kernel name so that only the error
 * differs. */
static const char *const broken_forward =
    "__kernel void ce_embed(__global float *out) { out[0] = " INJECTED "; }\n";
static const char *const broken_positional =
    "__kernel void ce_positional(__global float *out) { out[0] = " INJECTED "; }\n";
static const char *const broken_backward =
    "__kernel void ce_bwd_keys(__global float *out) { out[0] = " INJECTED "; }\n";
static const char *const broken_init =
    "__kernel void ce_init_uniform(__global float *out) { out[0] = " INJECTED "; }\n";
static const char *const broken_util = "__kernel void ce_zero(__global uint *d, ulong n) { d[0] = " INJECTED "; }\n";

static void expect_build_failed(clembed_context *ctx, clembed_status s, const char *what, const char *file) {
  const char *m = clembed_context_message(ctx);
  EXPECT(s == CLEMBED_ERR_BUILD_FAILED, "%s: %s, expected CLEMBED_ERR_BUILD_FAILED (%s)", what,
         clembed_status_string(s), m);
  EXPECT(strstr(m, INJECTED) != NULL, "%s: the message does not hold the compiler's error naming " INJECTED ": '%s'",
         what, m);
  EXPECT(strstr(m, "build log") != NULL && strstr(m, file) != NULL, "%s: the message does not name the build log of %s: '%s'",
         what, file, m);
}

/* Injected build failures of every kernel family: a clear error naming the
 * file, no output, not cached; the context works on afterwards. The operands
 * of these cases: a V x D table, N ids, an output
 * filled with a sentinel (so that "no output" can be seen), a gradient and a
 * gradient table. */
enum { FX_V = 4, FX_D = 3, FX_N = 3 };
static const int32_t FX_IDS[FX_N] = {3, 0, 2};

typedef struct bfx {
  float *th;
  float sentinel[FX_N * FX_D];
  clembed_matrix t, o, g, gt;
  clembed_ids d;
} bfx;

static void bfx_make(clembed_context *ctx, bfx *f) {
  memset(f, 0, sizeof *f);
  make_table(ctx, FX_V, FX_D, &f->t, &f->th);
  OK(ctx, clembed_ids_create(ctx, FX_IDS, FX_N, CLEMBED_I32, &f->d));
  OK(ctx, clembed_matrix_create(ctx, FX_N, FX_D, CLEMBED_F32, &f->o));
  OK(ctx, clembed_matrix_create(ctx, FX_N, FX_D, CLEMBED_F32, &f->g));
  OK(ctx, clembed_matrix_create(ctx, FX_V, FX_D, CLEMBED_F32, &f->gt));
  for (int i = 0; i < FX_N * FX_D; i++) f->sentinel[i] = -5.0f;
  OK(ctx, clembed_matrix_write(ctx, &f->o, f->sentinel, CLEMBED_F32));
}

static void bfx_free(bfx *f) {
  free(f->th);
  clembed_matrix_release(&f->t);
  clembed_matrix_release(&f->o);
  clembed_matrix_release(&f->g);
  clembed_matrix_release(&f->gt);
  clembed_ids_release(&f->d);
}

TU_CASE(unknown_family_and_null_context_refused) {
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed__test_override_source(ctx, "no-such-family", broken_forward));
  EXPECT(strstr(clembed_context_message(ctx), "no-such-family") != NULL, "unknown family message '%s'",
         clembed_context_message(ctx));
  EXPECT(clembed__test_override_source(NULL, "forward", NULL) == CLEMBED_ERR_INVALID_ARGUMENT, "NULL context");
}

/* forward: a lookup and an embed, a clear error naming the file, no output, no
 * event (a failed build is not cached); restored, the lookup works */
TU_CASE(forward_build_failure) {
  enum { V = FX_V, D = FX_D, N = FX_N };
  bfx f;
  bfx_make(ctx, &f);
  clembed_matrix t = f.t, o = f.o;
  clembed_ids d = f.d;
  OK(ctx, clembed__test_override_source(ctx, "forward", broken_forward));
  cl_event ev = NULL;
  expect_build_failed(ctx, clembed_lookup(ctx, &t, &d, &o, 0, NULL, &ev), "lookup", "forward.cl");
  EXPECT(ev == NULL, "a failed lookup returned an event");
  clembed_embed_options eo = clembed_embed_defaults();
  eo.positions = CLEMBED_POSITIONS_SINUSOID;
  expect_build_failed(ctx, clembed_embed(ctx, &t, &d, &eo, &o, 0, NULL, NULL), "embed", "forward.cl");
  float got[N * D];
  OK(ctx, clembed_matrix_read(ctx, &o, got, CLEMBED_F32));
  EXPECT(!memcmp(got, f.sentinel, sizeof got), "a failed lookup wrote its output");
  OK(ctx, clembed__test_override_source(ctx, "forward", NULL));
  lookup_works(ctx, "after restoring forward");
  bfx_free(&f);
}

/* a deferred error pending across a build failure is still reported */
TU_CASE(deferred_error_survives_a_build_failure) {
  enum { V = FX_V, D = FX_D, N = FX_N };
  bfx f;
  bfx_make(ctx, &f);
  clembed_matrix t = f.t, o = f.o;
  clembed_ids d = f.d;
  const int32_t bad_ids[N] = {0, 99, 1};
  clembed_ids bd;
  OK(ctx, clembed_ids_create(ctx, bad_ids, N, CLEMBED_I32, &bd));
  OK(ctx, clembed_lookup(ctx, &t, &bd, &o, 0, NULL, NULL));
  OK(ctx, clembed__test_override_source(ctx, "forward", broken_forward));
  expect_build_failed(ctx, clembed_lookup(ctx, &t, &d, &o, 0, NULL, NULL), "lookup with a pending error",
                      "forward.cl");
  OK(ctx, clembed__test_override_source(ctx, "forward", NULL));
  FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
  EXPECT(strstr(clembed_context_message(ctx), "ids[1] = 99") != NULL, "deferred message '%s'",
         clembed_context_message(ctx));
  clembed_ids_release(&bd);
  bfx_free(&f);
}

/* positional (clembed_positional, and the forward's sinusoid table) */
TU_CASE(positional_build_failure) {
  enum { V = FX_V, D = FX_D, N = FX_N };
  bfx f;
  bfx_make(ctx, &f);
  clembed_matrix t = f.t, o = f.o;
  clembed_ids d = f.d;
  clembed_embed_options eo = clembed_embed_defaults();
  eo.positions = CLEMBED_POSITIONS_SINUSOID;
  OK(ctx, clembed__test_override_source(ctx, "positional", broken_positional));
  expect_build_failed(ctx, clembed_positional(ctx, NULL, 0, &o, 0, NULL, NULL), "positional", "positional.cl");
  eo.position_offset = 1000; /* a sinusoid table the context has not cached yet */
  expect_build_failed(ctx, clembed_embed(ctx, &t, &d, &eo, &o, 0, NULL, NULL), "embed's sinusoid table",
                      "positional.cl");
  OK(ctx, clembed__test_override_source(ctx, "positional", NULL));
  OK(ctx, clembed_positional(ctx, NULL, 0, &o, 0, NULL, NULL));
  OK(ctx, clembed_embed(ctx, &t, &d, &eo, &o, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
  bfx_free(&f);
}

/* backward and sgd; restored, the backward gives the reference sums */
TU_CASE(backward_and_sgd_build_failure) {
  enum { V = FX_V, D = FX_D, N = FX_N };
  bfx f;
  bfx_make(ctx, &f);
  clembed_matrix t = f.t, g = f.g, gt = f.gt;
  clembed_ids d = f.d;
  OK(ctx, clembed__test_override_source(ctx, "backward", broken_backward));
  expect_build_failed(ctx, clembed_backward(ctx, &g, &d, NULL, &gt, 0, NULL, NULL), "backward", "backward.cl");
  expect_build_failed(ctx, clembed_sgd_update(ctx, &g, &d, 0.5f, NULL, &t, 0, NULL, NULL), "sgd", "backward.cl");
  OK(ctx, clembed__test_override_source(ctx, "backward", NULL));
  float gh[N * D], gth[V * D];
  for (int i = 0; i < N * D; i++) gh[i] = 0.5f * (float)i;
  OK(ctx, clembed_matrix_write(ctx, &g, gh, CLEMBED_F32));
  clembed_backward_options bo = clembed_backward_defaults();
  bo.accumulate = 0;
  OK(ctx, clembed_backward(ctx, &g, &d, &bo, &gt, 0, NULL, NULL));
  OK(ctx, clembed_matrix_read(ctx, &gt, gth, CLEMBED_F32));
  const int64_t ids64[N] = {FX_IDS[0], FX_IDS[1], FX_IDS[2]};
  float want[V * D];
  ref_backward(gh, ids64, N, D, V, &bo, want);
  int bad = 0;
  for (int k = 0; k < V * D; k++) bad += gth[k] != want[k];
  EXPECT(bad == 0, "backward after restoring: %d elements differ", bad);
  bfx_free(&f);
}

TU_CASE(init_build_failure) {
  enum { V = FX_V, D = FX_D, N = FX_N };
  bfx f;
  bfx_make(ctx, &f);
  clembed_matrix o = f.o;
  OK(ctx, clembed__test_override_source(ctx, "init", broken_init));
  expect_build_failed(ctx, clembed_matrix_init_uniform(ctx, &o, 0.0f, 1.0f, 1, 0, NULL, NULL), "init_uniform",
                      "init.cl");
  OK(ctx, clembed__test_override_source(ctx, "init", NULL));
  OK(ctx, clembed_matrix_init_uniform(ctx, &o, 0.0f, 1.0f, 1, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
  bfx_free(&f);
}

/* util: matrix creation's zero-fill; the matrix is left untouched */
TU_CASE(util_build_failure) {
  OK(ctx, clembed__test_override_source(ctx, "util", broken_util));
  clembed_matrix m = {(cl_mem)0, 1, 2, 3, 4, CLEMBED_F16};
  expect_build_failed(ctx, clembed_matrix_create(ctx, 2, 2, CLEMBED_F32, &m), "matrix_create", "util.cl");
  EXPECT(m.buffer == NULL && m.offset == 1 && m.rows == 2, "a failed matrix_create wrote its matrix");
  OK(ctx, clembed__test_override_source(ctx, "util", NULL));
  OK(ctx, clembed_matrix_create(ctx, 2, 2, CLEMBED_F32, &m));
  clembed_matrix_release(&m);
}

/* a second context on the same queue shares the program cache: its broken
 * source must not reach the first context, nor the first's programs it */
TU_CASE(second_context_keeps_its_own_sources) {
  enum { V = FX_V, D = FX_D, N = FX_N };
  bfx f;
  bfx_make(ctx, &f);
  clembed_matrix t = f.t, o = f.o;
  clembed_ids d = f.d;
  clembed_context *other = NULL;
  OK(ctx, clembed_context_create_from_queue(clembed_context_queue(ctx), &other));
  if (other) {
    OK(other, clembed__test_override_source(other, "forward", broken_forward));
    expect_build_failed(other, clembed_lookup(other, &t, &d, &o, 0, NULL, NULL), "lookup on the second context",
                        "forward.cl");
    lookup_works(ctx, "the first context while the second is broken");
    OK(other, clembed__test_override_source(other, "forward", NULL));
    lookup_works(other, "the second context after restoring");
    clembed_context_destroy(other);
  }
  lookup_works(ctx, "after all build failures");
  bfx_free(&f);
}

/* ------------------------------------------------- destroy with work in flight */

/* Enqueues a lot of work on ctx, releases every object, and returns (without
 * finishing) an event of the last command. */
static cl_event enqueue_in_flight(clembed_context *ctx, int with_bad_id) {
  size_t V = tu_small ? 64 : 4096, D = tu_small ? 16 : 256, N = tu_small ? 256 : 16384;
  int reps = tu_small ? 2 : 8;
  float *th;
  clembed_matrix t, o, g, gt;
  clembed_ids d;
  make_table(ctx, V, D, &t, &th);
  free(th);
  int32_t *ids = malloc(N * sizeof *ids);
  uint64_t st = 12345;
  for (size_t i = 0; i < N; i++) {
    st = st * 6364136223846793005ULL + 1442695040888963407ULL;
    ids[i] = (int32_t)((st >> 33) % V);
  }
  if (with_bad_id) ids[N / 2] = (int32_t)V + 7;
  OK(ctx, clembed_ids_create(ctx, ids, N, CLEMBED_I32, &d));
  free(ids);
  OK(ctx, clembed_matrix_create(ctx, N, D, CLEMBED_F32, &o));
  OK(ctx, clembed_matrix_create(ctx, N, D, CLEMBED_F32, &g));
  OK(ctx, clembed_matrix_create(ctx, V, D, CLEMBED_F32, &gt));
  OK(ctx, clembed_matrix_init_normal(ctx, &g, 0.0f, 1.0f, 3, 0, NULL, NULL));
  for (int r = 0; r < reps; r++) OK(ctx, clembed_lookup(ctx, &t, &d, &o, 0, NULL, NULL));
  clembed_embed_options eo = clembed_embed_defaults();
  eo.positions = CLEMBED_POSITIONS_SINUSOID;
  OK(ctx, clembed_embed(ctx, &t, &d, &eo, &o, 0, NULL, NULL));
  OK(ctx, clembed_backward(ctx, &g, &d, NULL, &gt, 0, NULL, NULL));
  cl_event ev = NULL;
  OK(ctx, clembed_sgd_update(ctx, &g, &d, 0.01f, NULL, &t, 0, NULL, &ev));
  /* released while in flight: OpenCL keeps them until their commands finish */
  clembed_matrix_release(&t);
  clembed_matrix_release(&o);
  clembed_matrix_release(&g);
  clembed_matrix_release(&gt);
  clembed_ids_release(&d);
  return ev;
}

TU_CASE(destroy_with_work_in_flight) {
  (void)ctx; /* the contexts here are the case's own */
  for (int bad = 0; bad < 2; bad++) {
    clembed_context *own = NULL;
    if (clembed_context_create(NULL, &own) != CLEMBED_OK) {
      EXPECT(0, "context: %s", clembed_last_error_message());
      return;
    }
    cl_event ev = enqueue_in_flight(own, bad);
    clembed_context_destroy(own); /* no finish; a deferred error never collected when bad */
    EXPECT(ev != NULL, "no event");
    if (ev) {
      cl_int st = -1;
      EXPECT(clWaitForEvents(1, &ev) == CL_SUCCESS, "the caller's event after destroy");
      clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
      EXPECT(st == CL_COMPLETE, "the caller's event after destroy: status %d", (int)st);
      clReleaseEvent(ev);
    }
  }

  /* a context on the caller's queue: destroying it leaves the queue usable */
  clembed_context *own = NULL;
  if (clembed_context_create(NULL, &own) != CLEMBED_OK) return;
  cl_command_queue q = clembed_context_queue(own);
  cl_context clc = NULL;
  clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof clc, &clc, NULL);
  clRetainCommandQueue(q);
  clRetainContext(clc);
  clembed_context_destroy(own); /* the queue is now the caller's alone */
  clembed_context *joined = NULL;
  OK(joined, clembed_context_create_from_queue(q, &joined));
  if (joined) {
    cl_event ev = enqueue_in_flight(joined, 1);
    clembed_context_destroy(joined);
    EXPECT(clFinish(q) == CL_SUCCESS, "the caller's queue after destroying the context that joined it");
    cl_int err;
    cl_mem b = clCreateBuffer(clc, CL_MEM_READ_WRITE, 64, NULL, &err);
    float v = 3.0f, r = 0.0f;
    EXPECT(err == CL_SUCCESS, "the caller's context after destroy");
    if (err == CL_SUCCESS) {
      clEnqueueWriteBuffer(q, b, CL_TRUE, 0, sizeof v, &v, 0, NULL, NULL);
      clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof r, &r, 0, NULL, NULL);
      EXPECT(r == 3.0f, "the caller's queue round trip: %g", (double)r);
      clReleaseMemObject(b);
    }
    if (ev) clReleaseEvent(ev);
  }
  clReleaseCommandQueue(q);
  clReleaseContext(clc);

  /* and a fresh context works */
  own = tu_context();
  lookup_works(own, "a new context after destroying contexts with work in flight");
  clembed_context_destroy(own);
}

/* ------------------------------------------------------ exhausted resources */

TU_CASE(error_slots_and_allocation_exhaustion) {
  /* more checked operations in flight than error slots (256): the first
   * deferred error is still the one reported */
  enum { V = 4, D = 3, N = 4, OPS = 300, BAD_OP = 270 };
  const int32_t good[N] = {0, 1, 2, 3}, bad[N] = {0, 1, -9, 3};
  float *th;
  clembed_matrix t, o;
  clembed_ids dg, db;
  make_table(ctx, V, D, &t, &th);
  OK(ctx, clembed_ids_create(ctx, good, N, CLEMBED_I32, &dg));
  OK(ctx, clembed_ids_create(ctx, bad, N, CLEMBED_I32, &db));
  OK(ctx, clembed_matrix_create(ctx, N, D, CLEMBED_F32, &o));
  int ops = tu_small ? 260 : OPS, bad_op = tu_small ? 258 : BAD_OP;
  for (int k = 0; k < ops; k++)
    OK(ctx, clembed_lookup(ctx, &t, k == bad_op ? &db : &dg, &o, 0, NULL, NULL));
  FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
  EXPECT(strstr(clembed_context_message(ctx), "ids[2] = -9") != NULL, "after %d operations: '%s'", ops,
         clembed_context_message(ctx));
  OK(ctx, clembed_finish(ctx));

  /* a matrix larger than the device's memory, then business as usual */
  cl_device_id dev = NULL;
  cl_ulong mem = 0;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
  clembed_matrix big = {0};
  size_t rows = (size_t)(mem / 4 / 16) + 1;
  FAILS(ctx, CLEMBED_ERR_OUT_OF_MEMORY, clembed_matrix_create(ctx, rows, 16, CLEMBED_F32, &big));
  EXPECT(big.buffer == NULL, "a failed matrix_create wrote its matrix");
  lookup_works(ctx, "after an allocation failure");
  free(th);
  clembed_matrix_release(&t);
  clembed_matrix_release(&o);
  clembed_ids_release(&dg);
  clembed_ids_release(&db);
}

/* ------------------------------------------------------ the Oclgrind proof */

/* The forward's kernels (every shape: ce_embed, ce_embed_vec4, ce_embed_rows,
 * ce_embed_strided, with the same arguments; see cl/ops/forward.cl) for an
 * F32 table and output: a plain lookup, all of it by work-item 0 whatever the
 * launch shape, that also writes one element past the end of the output
 * buffer. */
static const char *const oob_forward =
    "#define OOB_KERNEL(name) __kernel void name(__global const float *table, ulong t_off, ulong t_ld, \\\n"
    "    ulong t_rows, __global const int *ids32, __global const long *ids64, ulong id_off, int id64, ulong n, \\\n"
    "    __global float *out, ulong o_off, ulong o_ld, ulong cols, float scale, int policy, \\\n"
    "    long padding, __global const float2 *freq, __global const float *ptab, ulong p_off, \\\n"
    "    ulong p_ld, ulong p_rows, ulong seq_len, ulong pos_offset, __global const int *so32, \\\n"
    "    __global const long *so64, ulong so_off, int so64f, int has_so, float dropout, \\\n"
    "    uint seed_lo, uint seed_hi, float keep_scale, __global uint *err, uint slot, \\\n"
    "    __global const int *rm32, __global const long *rm64, ulong rm_off, int rm64f, ulong rm_rows) { \\\n"
    "  if (get_global_id(0) != 0 || get_global_id(1) != 0) return; \\\n"
    "  for (ulong i = 0; i < n; i++) { \\\n"
    "    long row = ce_load_id(ids32, ids64, id64, id_off + i); \\\n"
    "    for (ulong c = 0; c < cols; c++) out[o_off + i * o_ld + c] = table[t_off + (ulong)row * t_ld + c]; \\\n"
    "  } \\\n"
    "  out[o_off + n * o_ld] = 42.0f; /* one past the end */ \\\n"
    "}\n"
    "OOB_KERNEL(ce_embed) OOB_KERNEL(ce_embed_vec4) OOB_KERNEL(ce_embed_rows) OOB_KERNEL(ce_embed_strided)\n";

static int oob_demo(void) {
  clembed_context *ctx = tu_context();
  if (!strstr(clembed_context_device_name(ctx), "Oclgrind")) {
    printf("test_faults oob writes out of bounds on purpose: it runs on Oclgrind only (device: %s)\n",
           clembed_context_device_name(ctx));
    clembed_context_destroy(ctx);
    return 77;
  }
  enum { V = 4, D = 3, N = 2 };
  const int32_t ids[N] = {3, 1};
  float *th, out[N * D];
  clembed_matrix t, o;
  clembed_ids d;
  make_table(ctx, V, D, &t, &th);
  OK(ctx, clembed_ids_create(ctx, ids, N, CLEMBED_I32, &d));
  OK(ctx, clembed_matrix_create(ctx, N, D, CLEMBED_F32, &o)); /* exactly N * D floats */
  OK(ctx, clembed__test_override_source(ctx, "forward", oob_forward));
  clembed_status s = clembed_lookup(ctx, &t, &d, &o, 0, NULL, NULL);
  printf("lookup with a ce_embed that writes out[%d] of a %d-element buffer: %s %s\n", N * D, N * D,
         clembed_status_string(s), clembed_context_message(ctx));
  s = clembed_matrix_read(ctx, &o, out, CLEMBED_F32);
  printf("read: %s; out[0] = %g (expected %g)\n", clembed_status_string(s), (double)out[0], (double)th[3 * D]);
  fflush(stdout);
  free(th);
  clembed_matrix_release(&t);
  clembed_matrix_release(&o);
  clembed_ids_release(&d);
  clembed_context_destroy(ctx);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "oob")) return oob_demo();
  return tu_main(argc, argv, (tu_suite){.name = "test_faults", .device = 1});
}
