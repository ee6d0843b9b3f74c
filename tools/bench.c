/* clembed bench: each operation against the device's own copy bandwidth.
 *
 * For every row the operation and a plain copy kernel moving the same number
 * of bytes are timed alternately, pair by pair, in the same run; the figure is
 * the median of the per-pair ratios (copy time / operation time), so it holds
 * on a noisy machine and on any device. Bytes counted (DESIGN.md): forward =
 * ids + rows read + output written; backward = ids + gradient read + touched
 * table rows read and written. The one-token row is the other way round: the
 * latency of lookup + finish in units of one copy-kernel round trip.
 *
 * Uses the public API and OpenCL only. */
#define _POSIX_C_SOURCE 200809L
#include "clembed.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int clembed_bench_main(int argc, char **argv);

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ----------------------------------------------------------- copy kernel */

static const char *copy_source =
    "__kernel void bench_copy(__global const uint4 *src, __global uint4 *dst, ulong n) {\n"
    "  ulong i = get_global_id(0);\n"
    "  if (i < n) dst[i] = src[i];\n"
    "}\n";

typedef struct copier {
  cl_command_queue queue;
  cl_program program;
  cl_kernel kernel;
  cl_mem src, dst;
  size_t bytes; /* bytes copied (half the bytes moved) */
  size_t local; /* work-group size: 256 or the device's limit for the kernel */
} copier;

static void copier_release(copier *c) {
  if (c->kernel) clReleaseKernel(c->kernel);
  if (c->program) clReleaseProgram(c->program);
  if (c->src) clReleaseMemObject(c->src);
  if (c->dst) clReleaseMemObject(c->dst);
  memset(c, 0, sizeof *c);
}

/* A copy kernel that moves `moved` bytes (reads moved/2, writes moved/2). */
static int copier_init(clembed_context *ctx, size_t moved, copier *c, char *err, size_t errlen) {
  cl_int e;
  cl_context cl;
  cl_device_id dev;
  memset(c, 0, sizeof *c);
  c->queue = clembed_context_queue(ctx);
  clGetCommandQueueInfo(c->queue, CL_QUEUE_CONTEXT, sizeof cl, &cl, NULL);
  clGetCommandQueueInfo(c->queue, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  c->bytes = (moved / 2 + 15) / 16 * 16;
  if (c->bytes < 16) c->bytes = 16;
  c->program = clCreateProgramWithSource(cl, 1, &copy_source, NULL, &e);
  if (e == CL_SUCCESS) e = clBuildProgram(c->program, 1, &dev, "", NULL, NULL);
  if (e == CL_SUCCESS) c->kernel = clCreateKernel(c->program, "bench_copy", &e);
  if (e == CL_SUCCESS) c->src = clCreateBuffer(cl, CL_MEM_READ_WRITE, c->bytes, NULL, &e);
  if (e == CL_SUCCESS) c->dst = clCreateBuffer(cl, CL_MEM_READ_WRITE, c->bytes, NULL, &e);
  /* Both buffers written once: a source never written may be backed by the
   * operating system's shared zero page on a CPU device, and reading it would
   * cost nothing. */
  const cl_uint pattern = 0x3F800000u;
  if (e == CL_SUCCESS) e = clEnqueueFillBuffer(c->queue, c->src, &pattern, sizeof pattern, 0, c->bytes, 0, NULL, NULL);
  if (e == CL_SUCCESS) e = clEnqueueFillBuffer(c->queue, c->dst, &pattern, sizeof pattern, 0, c->bytes, 0, NULL, NULL);
  if (e == CL_SUCCESS) e = clFinish(c->queue);
  cl_ulong n = c->bytes / 16;
  if (e == CL_SUCCESS) e = clSetKernelArg(c->kernel, 0, sizeof c->src, &c->src);
  if (e == CL_SUCCESS) e = clSetKernelArg(c->kernel, 1, sizeof c->dst, &c->dst);
  if (e == CL_SUCCESS) e = clSetKernelArg(c->kernel, 2, sizeof n, &n);
  c->local = 256;
  size_t wg = 0;
  if (e == CL_SUCCESS && clGetKernelWorkGroupInfo(c->kernel, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL) ==
                             CL_SUCCESS && wg && wg < c->local)
    c->local = wg;
  if (e != CL_SUCCESS) {
    snprintf(err, errlen, "copy kernel: %s", clembed_status_string((clembed_status)e));
    copier_release(c);
    return -1;
  }
  return 0;
}

static int copier_run(copier *c) {
  size_t local = c->local, n = c->bytes / 16;
  size_t global = (n + local - 1) / local * local;
  cl_int e = clEnqueueNDRangeKernel(c->queue, c->kernel, 1, NULL, &global, &local, 0, NULL, NULL);
  if (e == CL_SUCCESS) e = clFinish(c->queue);
  return e == CL_SUCCESS ? 0 : -1;
}

/* ------------------------------------------------------------ operations */

typedef struct bench_state {
  clembed_context *ctx;
  size_t n, d, V;
  clembed_matrix table, out, ptable, grad, dW;
  clembed_ids ids;
  clembed_embed_options eopt;
  clembed_backward_options bopt;
  clembed_sinusoid sin;
} bench_state;

typedef clembed_status (*op_fn)(bench_state *s);

static clembed_status op_lookup(bench_state *s) {
  return clembed_lookup(s->ctx, &s->table, &s->ids, &s->out, 0, NULL, NULL);
}
static clembed_status op_embed(bench_state *s) {
  return clembed_embed(s->ctx, &s->table, &s->ids, &s->eopt, &s->out, 0, NULL, NULL);
}
static clembed_status op_positional(bench_state *s) {
  return clembed_positional(s->ctx, &s->sin, 0, &s->out, 0, NULL, NULL);
}
static clembed_status op_backward(bench_state *s) {
  return clembed_backward(s->ctx, &s->grad, &s->ids, &s->bopt, &s->dW, 0, NULL, NULL);
}
static clembed_status op_sgd(bench_state *s) {
  return clembed_sgd_update(s->ctx, &s->grad, &s->ids, 1e-9f, &s->bopt, &s->table, 0, NULL, NULL);
}

typedef struct row {
  const char *name;
  double op_ms, bytes, gbs, ratio;
  double copy_gbs, copy_ms; /* the copy kernel's median rate and time (latency rows: its round trip) */
  int latency; /* ratio is op time / round-trip time */
} row;

#define LATENCY_PAIRS 40 /* pairs per requested pair for the latency row */

/* Times op and the copy alternately; returns 0 and fills r. */
static int measure(bench_state *s, op_fn op, double bytes, int reps, int latency, row *r, char *err,
                   size_t errlen) {
  copier c;
  if (copier_init(s->ctx, latency ? 16 : (size_t)bytes, &c, err, errlen)) return -1;
  /* a round trip is tens of microseconds, at the mercy of thread wake-ups:
   * many more pairs for a stable median, at little cost */
  if (latency) reps *= LATENCY_PAIRS;
  double *ratios = calloc((size_t)reps, sizeof *ratios), *times = calloc((size_t)reps, sizeof *times);
  double *copies = calloc((size_t)reps, sizeof *copies);
  int rc = 0;
  if (!ratios || !times || !copies) {
    snprintf(err, errlen, "out of memory");
    rc = -1;
    goto done;
  }
  for (int w = 0; w < 2; w++) { /* warm-up: builds kernels, touches buffers */
    clembed_status st = op(s);
    if (st == CLEMBED_OK) st = clembed_finish(s->ctx);
    if (st != CLEMBED_OK || copier_run(&c)) {
      snprintf(err, errlen, "%s: %s", clembed_status_string(st), clembed_context_message(s->ctx));
      rc = -1;
      goto done;
    }
  }
  for (int i = 0; i < reps; i++) {
    double t0 = now();
    clembed_status st = op(s);
    if (st == CLEMBED_OK) st = clembed_finish(s->ctx);
    double t1 = now();
    int cr = copier_run(&c);
    double t2 = now();
    if (st != CLEMBED_OK || cr) {
      snprintf(err, errlen, "%s: %s", clembed_status_string(st), clembed_context_message(s->ctx));
      rc = -1;
      goto done;
    }
    times[i] = t1 - t0;
    copies[i] = t2 - t1;
    ratios[i] = latency ? (t1 - t0) / (t2 - t1) : (t2 - t1) / (t1 - t0);
  }
  r->op_ms = 1e3 * median(times, reps);
  r->bytes = bytes;
  r->gbs = bytes / (r->op_ms * 1e-3) / 1e9;
  r->ratio = median(ratios, reps);
  r->copy_ms = 1e3 * median(copies, reps);
  r->copy_gbs = 2.0 * (double)c.bytes / (r->copy_ms * 1e-3) / 1e9;
  r->latency = latency;
done:
  free(ratios);
  free(times);
  free(copies);
  copier_release(&c);
  return rc;
}

static void print_row(const row *r, int json) {
  if (json && r->latency)
    printf("{\"operation\": \"%s\", \"median_ms\": %.4f, \"bytes\": %.0f, \"gb_per_s\": %.3f, "
           "\"round_trip_ms\": %.4f, \"round_trips\": %.3f}\n",
           r->name, r->op_ms, r->bytes, r->gbs, r->copy_ms, r->ratio);
  else if (json)
    printf("{\"operation\": \"%s\", \"median_ms\": %.4f, \"bytes\": %.0f, \"gb_per_s\": %.3f, "
           "\"copy_gb_per_s\": %.3f, \"copy_ratio\": %.3f}\n",
           r->name, r->op_ms, r->bytes, r->gbs, r->copy_gbs, r->ratio);
  else if (r->latency) /* the copy column makes no sense for a 16-byte copy */
    printf("%-38s %10.3f %10.1f %8.2f %9s %7.2f trips\n", r->name, r->op_ms, r->bytes / 1e6, r->gbs, "-", r->ratio);
  else
    printf("%-38s %10.3f %10.1f %8.2f %9.2f %7.2fx\n", r->name, r->op_ms, r->bytes / 1e6, r->gbs, r->copy_gbs,
           r->ratio);
}

static void state_release(bench_state *s) {
  clembed_matrix_release(&s->table);
  clembed_matrix_release(&s->out);
  clembed_matrix_release(&s->ptable);
  clembed_matrix_release(&s->grad);
  clembed_matrix_release(&s->dW);
  clembed_ids_release(&s->ids);
}

/* Tables of V x d in `dt`, n ids drawn from [0, V) (or 0, 1, ..., n-1 with
 * `sequential`), an n x d output. */
static clembed_status state_init(bench_state *s, size_t V, size_t d, size_t n, clembed_dtype dt, int sequential) {
  clembed_status st;
  state_release(s);
  s->V = V;
  s->d = d;
  s->n = n;
  int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  if (!ids) return CLEMBED_ERR_OUT_OF_MEMORY;
  uint64_t x = 88172645463325252ULL;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    ids[i] = sequential ? (int32_t)(i % V) : (int32_t)(x % V);
  }
  st = clembed_ids_create(s->ctx, ids, n, CLEMBED_I32, &s->ids);
  free(ids);
  if (st == CLEMBED_OK) st = clembed_matrix_create(s->ctx, V, d, dt, &s->table);
  if (st == CLEMBED_OK) st = clembed_matrix_init_uniform(s->ctx, &s->table, -1.0f, 1.0f, 1, 0, NULL, NULL);
  if (st == CLEMBED_OK) st = clembed_matrix_create(s->ctx, n, d, CLEMBED_F32, &s->out);
  if (st == CLEMBED_OK) st = clembed_finish(s->ctx);
  return st;
}

static size_t count_unique(bench_state *s) {
  int32_t *ids = malloc(s->n * sizeof *ids);
  unsigned char *seen = calloc(s->V, 1);
  size_t u = 0;
  if (ids && seen && clembed_ids_read(s->ctx, &s->ids, ids) == CLEMBED_OK)
    for (size_t i = 0; i < s->n; i++)
      if (!seen[ids[i]]) {
        seen[ids[i]] = 1;
        u++;
      }
  free(ids);
  free(seen);
  return u;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: clembed bench [--quick] [--json] [--reps N] [--device SPEC]\n"
          "  Times each operation against a plain copy kernel moving the same bytes,\n"
          "  alternately in the same run, and prints the median ratio (1.0 = the\n"
          "  device's copy bandwidth). The one-token row is lookup + finish latency in\n"
          "  one-kernel round trips (lower is better), over 40 times as many pairs.\n"
          "  --quick     3 timed pairs per row (about 15 s on a 2-core CPU)\n"
          "  --reps N    timed pairs per row (default 15; the latency row 40 times as many)\n"
          "  --json      one JSON object per row\n");
}

int clembed_bench_main(int argc, char **argv) {
  int json = 0, reps = 15;
  const char *device = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--quick")) reps = 3;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 100000) {
        fprintf(stderr, "clembed bench: --reps: '%s' is not a count in [1, 100000]\n", argv[i]);
        return 1;
      }
      reps = (int)v;
    } else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "clembed bench: unknown or incomplete option '%s'\n", argv[i]);
      usage(stderr);
      return 1;
    }
  }
  bench_state s;
  memset(&s, 0, sizeof s);
  clembed_status st = clembed_context_create(device, &s.ctx);
  if (st != CLEMBED_OK) {
    fprintf(stderr, "clembed bench: %s: %s\n", clembed_status_string(st), clembed_last_error_message());
    return 2;
  }
  if (!json) {
    printf("clembed bench on %s, %d timed pairs per row (the latency row %d)\n", clembed_context_device_name(s.ctx),
           reps, reps * LATENCY_PAIRS);
    printf("%-38s %10s %10s %8s %9s %8s\n", "operation", "median ms", "MB moved", "GB/s", "copy GB/s", "vs copy");
  }
  const size_t n = 16384, d = 1024, V = 32000;
  int rc = 0;
  char err[1024] = "";
  row r;
  const char *name = "";
#define ROW(LABEL, FN, BYTES, LAT)                                                                      \
  do {                                                                                                      \
    name = LABEL;                                                                                           \
    memset(&r, 0, sizeof r);                                                                                \
    if (measure(&s, FN, (double)(BYTES), reps, LAT, &r, err, sizeof err)) goto fail;                    \
    r.name = LABEL;                                                                                         \
    print_row(&r, json);                                                                                    \
    fflush(stdout);                                                                                         \
  } while (0)

  /* lookups: ids + rows read + output written */
  const clembed_dtype dts[3] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  const char *lnames[3] = {"lookup f32 (16384 x 1024, V 32000)", "lookup f16 table", "lookup bf16 table"};
  for (int t = 0; t < 3; t++) {
    name = lnames[t];
    if ((st = state_init(&s, V, d, n, dts[t], 0)) != CLEMBED_OK) goto fail_status;
    ROW(lnames[t], op_lookup, n * 4 + n * d * clembed_dtype_size(dts[t]) + n * d * 4, 0);
  }
  /* the same lookup with ids 0, 1, ..., n-1: the access pattern of a copy, which
   * separates the kernel's efficiency from the cost of gathering random rows */
  name = "lookup f32, ids 0..n-1";
  if ((st = state_init(&s, V, d, n, CLEMBED_F32, 1)) != CLEMBED_OK) goto fail_status;
  ROW("lookup f32, ids 0..n-1 (copy pattern)", op_lookup, n * 4 + n * d * 4 + n * d * 4, 0);
  /* fused forward: batch 8 x 2048 */
  name = "embed sqrt + sinusoid (8 x 2048)";
  if ((st = state_init(&s, V, d, n, CLEMBED_F32, 0)) != CLEMBED_OK) goto fail_status;
  s.eopt = clembed_embed_defaults();
  s.eopt.scale = sqrtf((float)d);
  s.eopt.positions = CLEMBED_POSITIONS_SINUSOID;
  s.eopt.seq_len = 2048;
  ROW("embed sqrt + sinusoid (8 x 2048)", op_embed, n * 4 + n * d * 4 + n * d * 4, 0);
  name = "embed + learned positions";
  if ((st = clembed_matrix_create(s.ctx, 2048, d, CLEMBED_F32, &s.ptable)) != CLEMBED_OK) goto fail_status;
  s.eopt.positions = CLEMBED_POSITIONS_TABLE;
  s.eopt.position_table = &s.ptable;
  ROW("embed + learned positions", op_embed, n * 4 + 2 * n * d * 4 + n * d * 4, 0);
  s.sin.base = 10000.0;
  s.sin.exponent = CLEMBED_EXPONENT_PAIR;
  s.sin.layout = CLEMBED_LAYOUT_INTERLEAVED;
  ROW("positional table (16384 x 1024)", op_positional, n * d * 4, 0);
  /* backward and sgd: ids + gradient read + touched rows read and written */
  name = "backward";
  if ((st = clembed_matrix_create(s.ctx, n, d, CLEMBED_F32, &s.grad)) != CLEMBED_OK) goto fail_status;
  if ((st = clembed_matrix_init_uniform(s.ctx, &s.grad, -1.0f, 1.0f, 2, 0, NULL, NULL)) != CLEMBED_OK)
    goto fail_status;
  if ((st = clembed_matrix_create(s.ctx, V, d, CLEMBED_F32, &s.dW)) != CLEMBED_OK) goto fail_status;
  s.bopt = clembed_backward_defaults();
  size_t unique = count_unique(&s);
  ROW("backward (accumulate, deterministic)", op_backward, n * 4 + n * d * 4 + 2 * unique * d * 4, 0);
  s.bopt.deterministic = 0;
  ROW("backward (accumulate, atomic)", op_backward, n * 4 + n * d * 4 + 2 * unique * d * 4, 0);
  s.bopt.deterministic = 1;
  ROW("sgd_update", op_sgd, n * 4 + n * d * 4 + 2 * unique * d * 4, 0);
  /* one token */
  name = "one-token lookup + finish";
  if ((st = state_init(&s, V, 4096, 1, CLEMBED_F32, 0)) != CLEMBED_OK) goto fail_status;
  ROW("one-token lookup + finish (d 4096)", op_lookup, 4 + 2 * 4096 * 4, 1);
  goto done;
fail_status:
  snprintf(err, sizeof err, "%s: %s", clembed_status_string(st), clembed_context_message(s.ctx));
fail:
  fprintf(stderr, "clembed bench: %s: %s\n", name, err);
  rc = 2;
done:
  state_release(&s);
  clembed_context_destroy(s.ctx);
  return rc;
}
