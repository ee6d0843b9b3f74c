/* clembed bench: each operation against the fastest copy the device has.
 *
 * The reference: the fastest of three copies, measured at the start of the run
 * and printed with its rate: a copy kernel (one uint4 per work-item),
 * clEnqueueCopyBuffer, and on a CPU device a memcpy split over as many host
 * threads as the device has compute units (between host arrays of the same
 * size, on huge pages where Linux gives them). Every copy buffer holds at least
 * twice the largest cache (the host's last-level cache from sysfs and the
 * device's CL_DEVICE_GLOBAL_MEM_CACHE_SIZE), and the token count grows until
 * the smallest row's working set does too.
 *
 * For every row the operation and the reference copy are timed alternately,
 * pair by pair, in the same run; the figure is the median of the per-pair
 * ratios (operation bytes per second / copy bytes per second), so it holds on
 * a noisy machine and on any device. Bytes counted (DESIGN.md): forward = ids
 * + rows read + output written; backward and optimizer steps = ids + gradient
 * read + touched rows of the table and of each state read and written;
 * initialisation = output written. The one-token row is the other way round:
 * the latency of lookup + finish in units of one copy-kernel round trip.
 *
 * Uses the public API and OpenCL only. */
#define _DEFAULT_SOURCE
#define _POSIX_C_SOURCE 200809L
#include "clembed.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

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

/* ------------------------------------------------------------- caches */

/* The largest cache of the host (sysfs, cpu0's highest-level cache; 0 where
 * there is no sysfs). */
static size_t host_llc_bytes(void) {
  size_t best = 0;
  for (int i = 0; i < 16; i++) {
    char path[96], buf[64];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = 0;
    char *end;
    unsigned long long v = strtoull(buf, &end, 10);
    if (*end == 'K') v <<= 10;
    else if (*end == 'M') v <<= 20;
    else if (*end == 'G') v <<= 30;
    if (v > best) best = (size_t)v;
  }
  return best;
}

/* ---------------------------------------------------- reference copies */

enum { COPY_KERNEL = 0, COPY_BUFFER = 1, COPY_MEMCPY = 2, COPY_STREAM = 3, COPY_KINDS = 4 };

static const char *copy_source =
    "__kernel void bench_copy(__global const uint4 *src, __global uint4 *dst, ulong n) {\n"
    "  ulong i = get_global_id(0);\n"
    "  if (i < n) dst[i] = src[i];\n"
    "}\n";

/* A memcpy split over `threads` host threads: the calling thread copies the
 * first part, the others wake for each copy and copy theirs. */
typedef struct pool {
  int threads, quit;
  unsigned generation;
  int pending;
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  pthread_t tid[64];
  int index[64];
  unsigned char *dst;
  const unsigned char *src;
  size_t bytes;
  int stream; /* streaming stores instead of memcpy */
  int ready;
} pool;

static pool *the_pool; /* the workers' pool (one reference per run) */

/* memcpy with streaming (non-temporal) stores, which write a line without
 * first reading it: what glibc's memcpy does only past a size threshold, and
 * what the library's CPU kernels do for large outputs. x86-64 only (AVX-512,
 * AVX or SSE2, whichever the processor has); elsewhere plain memcpy.
 * dst, src and bytes are multiples of 64. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_STREAM_COPY 1
__attribute__((target("avx512f"))) static void stream_copy_avx512(void *dst, const void *src, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64)
    _mm512_stream_si512((void *)((char *)dst + i), _mm512_load_si512((const void *)((const char *)src + i)));
  _mm_sfence();
}
__attribute__((target("avx"))) static void stream_copy_avx(void *dst, const void *src, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 32)
    _mm256_stream_si256((__m256i *)((char *)dst + i), _mm256_load_si256((const __m256i *)((const char *)src + i)));
  _mm_sfence();
}
static void stream_copy_sse2(void *dst, const void *src, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 16)
    _mm_stream_si128((__m128i *)((char *)dst + i), _mm_load_si128((const __m128i *)((const char *)src + i)));
  _mm_sfence();
}
static void stream_copy(void *dst, const void *src, size_t bytes) {
  if (__builtin_cpu_supports("avx512f")) stream_copy_avx512(dst, src, bytes);
  else if (__builtin_cpu_supports("avx")) stream_copy_avx(dst, src, bytes);
  else stream_copy_sse2(dst, src, bytes);
}
#else
#define HAVE_STREAM_COPY 0
static void stream_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
#endif

static void pool_part(pool *p, int index) {
  size_t part = (p->bytes / (size_t)p->threads + 63) / 64 * 64;
  size_t lo = part * (size_t)index, hi = lo + part;
  if (hi > p->bytes) hi = p->bytes;
  if (lo >= hi) return;
  if (p->stream) stream_copy(p->dst + lo, p->src + lo, hi - lo);
  else memcpy(p->dst + lo, p->src + lo, hi - lo);
}

static void *pool_worker(void *arg) {
  int index = *(const int *)arg;
  pool *p = the_pool;
  unsigned seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (p->generation == seen && !p->quit) pthread_cond_wait(&p->go, &p->mu);
    if (p->quit) break;
    seen = p->generation;
    pthread_mutex_unlock(&p->mu);
    pool_part(p, index);
    pthread_mutex_lock(&p->mu);
    if (--p->pending == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Starts up to threads - 1 workers (fewer if the system refuses some). */
static int pool_start(pool *p, int threads) {
  memset(p, 0, sizeof *p);
  if (threads < 1) threads = 1;
  if (threads > 64) threads = 64;
  if (pthread_mutex_init(&p->mu, NULL)) return -1;
  if (pthread_cond_init(&p->go, NULL)) {
    pthread_mutex_destroy(&p->mu);
    return -1;
  }
  if (pthread_cond_init(&p->done, NULL)) {
    pthread_cond_destroy(&p->go);
    pthread_mutex_destroy(&p->mu);
    return -1;
  }
  the_pool = p;
  p->threads = 1;
  for (int i = 1; i < threads; i++) {
    p->index[i] = i;
    if (pthread_create(&p->tid[i], NULL, pool_worker, &p->index[i])) break;
    p->threads = i + 1;
  }
  p->ready = 1;
  return 0;
}

static void pool_copy(pool *p, void *dst, const void *src, size_t bytes, int stream) {
  pthread_mutex_lock(&p->mu);
  p->stream = stream;
  p->dst = dst;
  p->src = src;
  p->bytes = bytes;
  p->pending = p->threads - 1;
  p->generation++;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  pool_part(p, 0);
  pthread_mutex_lock(&p->mu);
  while (p->pending) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

static void pool_stop(pool *p) {
  if (!p->ready) return;
  pthread_mutex_lock(&p->mu);
  p->quit = 1;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->threads; i++) pthread_join(p->tid[i], NULL);
  pthread_cond_destroy(&p->go);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->mu);
  p->ready = 0;
}

typedef struct reference {
  cl_command_queue queue;
  cl_context cl;
  cl_device_id dev;
  cl_program program;
  cl_kernel kernel;
  size_t local;         /* copy kernel's work-group size: 256 or the device's limit */
  cl_mem src, dst;      /* device buffers of `capacity` bytes each */
  unsigned char *hsrc, *hdst; /* CPU device: host arrays of `capacity` bytes each */
  size_t capacity;
  int cpu;              /* the device is a CPU: memcpy is a candidate */
  cl_uint units;        /* compute units: memcpy threads */
  pool pool;
  size_t host_llc, device_cache, min_bytes; /* min_bytes: every copy buffer holds at least this */
  int kind;             /* the fastest, used by every row */
  double rate[COPY_KINDS]; /* bytes moved per second (read + written), at the start */
} reference;

static void host_free(unsigned char *p, size_t bytes) {
  if (!p) return;
#ifdef __linux__
  munmap(p, bytes);
#else
  (void)bytes;
  free(p);
#endif
}

/* Host memory written once (a page never written reads as the shared zero
 * page), on transparent huge pages where Linux gives them. */
static unsigned char *host_alloc(size_t bytes) {
  unsigned char *p;
#ifdef __linux__
  void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
  madvise(m, bytes, MADV_HUGEPAGE);
#endif
  p = m;
#else
  p = malloc(bytes);
  if (!p) return NULL;
#endif
  memset(p, 0x3F, bytes);
  return p;
}

static void reference_release_buffers(reference *r) {
  if (r->src) clReleaseMemObject(r->src);
  if (r->dst) clReleaseMemObject(r->dst);
  host_free(r->hsrc, r->capacity);
  host_free(r->hdst, r->capacity);
  r->src = r->dst = NULL;
  r->hsrc = r->hdst = NULL;
  r->capacity = 0;
}

static void reference_release(reference *r) {
  reference_release_buffers(r);
  pool_stop(&r->pool);
  if (r->kernel) clReleaseKernel(r->kernel);
  if (r->program) clReleaseProgram(r->program);
  r->kernel = NULL;
  r->program = NULL;
}

/* Buffers of at least `bytes` each (a multiple of 64), written once. */
static int reference_reserve(reference *r, size_t bytes, char *err, size_t errlen) {
  if (bytes <= r->capacity) return 0;
  reference_release_buffers(r);
  cl_int e = CL_SUCCESS;
  r->src = clCreateBuffer(r->cl, CL_MEM_READ_WRITE, bytes, NULL, &e);
  if (e == CL_SUCCESS) r->dst = clCreateBuffer(r->cl, CL_MEM_READ_WRITE, bytes, NULL, &e);
  const cl_uint pattern = 0x3F800000u;
  if (e == CL_SUCCESS) e = clEnqueueFillBuffer(r->queue, r->src, &pattern, sizeof pattern, 0, bytes, 0, NULL, NULL);
  if (e == CL_SUCCESS) e = clEnqueueFillBuffer(r->queue, r->dst, &pattern, sizeof pattern, 0, bytes, 0, NULL, NULL);
  if (e == CL_SUCCESS) e = clFinish(r->queue);
  if (e == CL_SUCCESS && r->cpu) {
    r->hsrc = host_alloc(bytes);
    r->hdst = r->hsrc ? host_alloc(bytes) : NULL;
    if (!r->hdst) {
      host_free(r->hsrc, bytes);
      r->hsrc = NULL;
      e = CL_OUT_OF_HOST_MEMORY;
    }
  }
  if (e != CL_SUCCESS) {
    snprintf(err, errlen, "copy buffers of %zu bytes: %s", bytes, clembed_status_string((clembed_status)e));
    reference_release_buffers(r);
    return -1;
  }
  r->capacity = bytes;
  return 0;
}

/* One copy of `bytes` (a multiple of 64, at most the capacity) by `kind`. */
static int reference_copy(reference *r, int kind, size_t bytes) {
  cl_int e = CL_SUCCESS;
  if (kind == COPY_KERNEL) {
    cl_ulong n = bytes / 16;
    size_t local = r->local, global = (bytes / 16 + local - 1) / local * local;
    e = clSetKernelArg(r->kernel, 2, sizeof n, &n);
    if (e == CL_SUCCESS) e = clEnqueueNDRangeKernel(r->queue, r->kernel, 1, NULL, &global, &local, 0, NULL, NULL);
    if (e == CL_SUCCESS) e = clFinish(r->queue);
  } else if (kind == COPY_BUFFER) {
    e = clEnqueueCopyBuffer(r->queue, r->src, r->dst, 0, 0, bytes, 0, NULL, NULL);
    if (e == CL_SUCCESS) e = clFinish(r->queue);
  } else {
    pool_copy(&r->pool, r->hdst, r->hsrc, bytes, kind == COPY_STREAM);
  }
  return e == CL_SUCCESS ? 0 : -1;
}

/* The bytes per buffer of a copy standing for an operation moving `moved`
 * bytes: half of them (read + written), and at least min_bytes. */
static size_t reference_bytes(const reference *r, double moved) {
  size_t b = (size_t)(moved / 2);
  if (b < r->min_bytes) b = r->min_bytes;
  return (b + 63) / 64 * 64;
}

/* Builds the copy kernel, starts the memcpy threads on a CPU device, and
 * times the candidates against each other (`rounds` interleaved rounds of
 * min_bytes each): the fastest becomes the reference. */
static int reference_init(clembed_context *ctx, reference *r, int rounds, char *err, size_t errlen) {
  cl_int e;
  memset(r, 0, sizeof *r);
  r->queue = clembed_context_queue(ctx);
  e = clGetCommandQueueInfo(r->queue, CL_QUEUE_CONTEXT, sizeof r->cl, &r->cl, NULL);
  if (e == CL_SUCCESS) e = clGetCommandQueueInfo(r->queue, CL_QUEUE_DEVICE, sizeof r->dev, &r->dev, NULL);
  cl_device_type type = 0;
  cl_ulong cache = 0;
  if (e == CL_SUCCESS) e = clGetDeviceInfo(r->dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  if (e == CL_SUCCESS) e = clGetDeviceInfo(r->dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof r->units, &r->units, NULL);
  if (e == CL_SUCCESS) e = clGetDeviceInfo(r->dev, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof cache, &cache, NULL);
  r->cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
  r->host_llc = host_llc_bytes();
  r->device_cache = (size_t)cache;
  size_t largest = r->host_llc > r->device_cache ? r->host_llc : r->device_cache;
  r->min_bytes = 2 * largest;
  if (r->min_bytes < ((size_t)16 << 20)) r->min_bytes = (size_t)16 << 20; /* no cache reported: 16 MiB */
  r->min_bytes = (r->min_bytes + 63) / 64 * 64;
  if (e == CL_SUCCESS) r->program = clCreateProgramWithSource(r->cl, 1, &copy_source, NULL, &e);
  if (e == CL_SUCCESS) e = clBuildProgram(r->program, 1, &r->dev, "", NULL, NULL);
  if (e == CL_SUCCESS) r->kernel = clCreateKernel(r->program, "bench_copy", &e);
  if (e != CL_SUCCESS) {
    snprintf(err, errlen, "copy kernel: %s", clembed_status_string((clembed_status)e));
    reference_release(r);
    return -1;
  }
  r->local = 256;
  size_t wg = 0;
  if (clGetKernelWorkGroupInfo(r->kernel, r->dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL) == CL_SUCCESS &&
      wg && wg < r->local)
    r->local = wg;
  if (r->cpu && pool_start(&r->pool, (int)r->units)) {
    snprintf(err, errlen, "could not start the memcpy threads");
    reference_release(r);
    return -1;
  }
  if (reference_reserve(r, r->min_bytes, err, errlen)) {
    reference_release(r);
    return -1;
  }
  cl_int a = clSetKernelArg(r->kernel, 0, sizeof r->src, &r->src);
  if (a == CL_SUCCESS) a = clSetKernelArg(r->kernel, 1, sizeof r->dst, &r->dst);
  int kinds = r->cpu ? (HAVE_STREAM_COPY ? COPY_KINDS : COPY_STREAM) : COPY_MEMCPY;
  double *t = calloc((size_t)rounds * COPY_KINDS, sizeof *t);
  if (!t || a != CL_SUCCESS) {
    snprintf(err, errlen, "copy kernel arguments or memory");
    free(t);
    reference_release(r);
    return -1;
  }
  for (int i = -1; i < rounds; i++) /* round -1 warms up */
    for (int k = 0; k < kinds; k++) {
      double t0 = now();
      if (reference_copy(r, k, r->min_bytes)) {
        snprintf(err, errlen, "%s failed", k == COPY_KERNEL ? "copy kernel" : "clEnqueueCopyBuffer");
        free(t);
        reference_release(r);
        return -1;
      }
      if (i >= 0) t[k * rounds + i] = now() - t0;
    }
  r->kind = 0;
  for (int k = 0; k < kinds; k++) {
    r->rate[k] = 2.0 * (double)r->min_bytes / median(t + k * rounds, rounds);
    if (r->rate[k] > r->rate[r->kind]) r->kind = k;
  }
  free(t);
  return 0;
}

/* The reference copy for `moved` operation bytes, with the kernel's buffer
 * arguments refreshed when the buffers grew. */
static int reference_prepare(reference *r, double moved, char *err, size_t errlen) {
  size_t b = reference_bytes(r, moved);
  if (b <= r->capacity) return 0;
  if (reference_reserve(r, b, err, errlen)) return -1;
  cl_int e = clSetKernelArg(r->kernel, 0, sizeof r->src, &r->src);
  if (e == CL_SUCCESS) e = clSetKernelArg(r->kernel, 1, sizeof r->dst, &r->dst);
  if (e != CL_SUCCESS) {
    snprintf(err, errlen, "copy kernel arguments: %s", clembed_status_string((clembed_status)e));
    return -1;
  }
  return 0;
}

static const char *copy_name(const reference *r, int kind, char *buf, size_t len) {
  if (kind == COPY_KERNEL) snprintf(buf, len, "copy kernel");
  else if (kind == COPY_BUFFER) snprintf(buf, len, "clEnqueueCopyBuffer");
  else if (kind == COPY_MEMCPY) snprintf(buf, len, "memcpy x %d threads", r->pool.threads);
  else snprintf(buf, len, "streaming copy x %d threads", r->pool.threads);
  return buf;
}

/* ------------------------------------------------------------ operations */

typedef struct bench_state {
  clembed_context *ctx;
  size_t n, d, V;
  clembed_matrix table, out, ptable, grad, dW, s1, s2;
  clembed_optimizer optim;
  clembed_ids ids;
  clembed_embed_options eopt;
  clembed_backward_options bopt;
  clembed_sinusoid sin;
  clembed_rope rope;
  clembed_matrix rx; /* RoPE: the input (out is the output, table the cos/sin cache) */
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
static clembed_status op_optim(bench_state *s) {
  s->optim.step++;
  return clembed_optimizer_step(s->ctx, &s->grad, &s->ids, &s->bopt, &s->optim, &s->table, 0, NULL, NULL);
}
static clembed_status op_rope_cache(bench_state *s) {
  return clembed_rope_cache(s->ctx, &s->rope, 0, &s->table, 0, NULL, NULL);
}
static clembed_status op_rope_apply(bench_state *s) {
  return clembed_rope_apply(s->ctx, &s->rope, &s->rx, NULL, 0, 0, 0, &s->out, 0, NULL, NULL);
}
static clembed_status op_init_normal(bench_state *s) {
  return clembed_matrix_init_normal(s->ctx, &s->table, 0.0f, 1.0f, 7, 0, NULL, NULL);
}
static clembed_status op_init_uniform(bench_state *s) {
  return clembed_matrix_init_uniform(s->ctx, &s->table, -1.0f, 1.0f, 7, 0, NULL, NULL);
}

typedef struct row {
  const char *name;
  double op_ms, bytes, gbs, ratio;
  double copy_gbs, copy_ms; /* the reference copy's median rate and time (latency rows: a copy kernel's round trip) */
  int latency; /* ratio is op time / round-trip time */
} row;

#define LATENCY_PAIRS 40 /* pairs per requested pair for the latency row */

/* Times op and the reference copy alternately; returns 0 and fills r. A
 * latency row times a 16-byte copy kernel instead. */
static int measure(bench_state *s, reference *ref, op_fn op, double bytes, int reps, int latency, row *r, char *err,
                   size_t errlen) {
  int kind = latency ? COPY_KERNEL : ref->kind;
  size_t cbytes = latency ? 16 : reference_bytes(ref, bytes);
  if (!latency && reference_prepare(ref, bytes, err, errlen)) return -1;
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
    if (st != CLEMBED_OK || reference_copy(ref, kind, cbytes)) {
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
    int cr = reference_copy(ref, kind, cbytes);
    double t2 = now();
    if (st != CLEMBED_OK || cr) {
      snprintf(err, errlen, "%s: %s", clembed_status_string(st), clembed_context_message(s->ctx));
      rc = -1;
      goto done;
    }
    times[i] = t1 - t0;
    copies[i] = t2 - t1;
    /* operation rate / copy rate */
    ratios[i] = latency ? (t1 - t0) / (t2 - t1) : (bytes / (t1 - t0)) / (2.0 * (double)cbytes / (t2 - t1));
  }
  r->op_ms = 1e3 * median(times, reps);
  r->bytes = bytes;
  r->gbs = bytes / (r->op_ms * 1e-3) / 1e9;
  r->ratio = median(ratios, reps);
  r->copy_ms = 1e3 * median(copies, reps);
  r->copy_gbs = 2.0 * (double)cbytes / (r->copy_ms * 1e-3) / 1e9;
  r->latency = latency;
done:
  free(ratios);
  free(times);
  free(copies);
  return rc;
}

static void print_row(const row *r, const bench_state *s, int json) {
  if (json && r->latency)
    printf("{\"operation\": \"%s\", \"median_ms\": %.4f, \"bytes\": %.0f, \"gb_per_s\": %.3f, "
           "\"round_trip_ms\": %.4f, \"round_trips\": %.3f}\n",
           r->name, r->op_ms, r->bytes, r->gbs, r->copy_ms, r->ratio);
  else if (json)
    printf("{\"operation\": \"%s\", \"median_ms\": %.4f, \"bytes\": %.0f, \"gb_per_s\": %.3f, "
           "\"copy_gb_per_s\": %.3f, \"copy_ratio\": %.3f, \"n\": %zu, \"d\": %zu, \"V\": %zu}\n",
           r->name, r->op_ms, r->bytes, r->gbs, r->copy_gbs, r->ratio, s->n, s->d, s->V);
  else if (r->latency) /* the copy column makes no sense for a 16-byte copy */
    printf("%-40s %10.3f %10.1f %8.2f %9s %7.2f trips\n", r->name, r->op_ms, r->bytes / 1e6, r->gbs, "-", r->ratio);
  else
    printf("%-40s %10.3f %10.1f %8.2f %9.2f %7.2fx\n", r->name, r->op_ms, r->bytes / 1e6, r->gbs, r->copy_gbs,
           r->ratio);
}

static void state_release(bench_state *s) {
  clembed_matrix_release(&s->table);
  clembed_matrix_release(&s->out);
  clembed_matrix_release(&s->ptable);
  clembed_matrix_release(&s->grad);
  clembed_matrix_release(&s->dW);
  clembed_matrix_release(&s->s1);
  clembed_matrix_release(&s->s2);
  clembed_matrix_release(&s->rx);
  clembed_ids_release(&s->ids);
}

static uint64_t xorshift(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* Fills a table: uniform in [-1, 1) for the float dtypes; for Q8_0 and Q4_0
 * such values quantized on the host; for the K types random bytes with every
 * f16 scale (Q4_K's d and dmin, Q6_K's d) finite, in [2^-10, 2^-2). */
static clembed_status fill_table(clembed_context *ctx, clembed_matrix *m) {
  clembed_dtype dt = m->dtype;
  if (dt == CLEMBED_F32 || dt == CLEMBED_F16 || dt == CLEMBED_BF16)
    return clembed_matrix_init_uniform(ctx, m, -1.0f, 1.0f, 1, 0, NULL, NULL);
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  clembed_status st;
  if (dt == CLEMBED_Q8_0 || dt == CLEMBED_Q4_0) {
    size_t count = m->rows * m->cols;
    float *v = malloc((count ? count : 1) * sizeof *v);
    if (!v) return CLEMBED_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < count; i++) v[i] = (float)((double)(xorshift(&x) >> 11) * 0x1p-52 - 1.0);
    st = clembed_matrix_write(ctx, m, v, CLEMBED_F32);
    free(v);
    return st;
  }
  size_t rb = clembed_dtype_row_bytes(dt, m->cols), bytes = m->rows * rb, bb = dt == CLEMBED_Q4_K ? 144 : 210;
  unsigned char *b = malloc(bytes ? bytes : 1);
  if (!b) return CLEMBED_ERR_OUT_OF_MEMORY;
  for (size_t i = 0; i < bytes; i++) b[i] = (unsigned char)(xorshift(&x) >> 56);
  for (size_t o = 0; o + bb <= bytes; o += bb) {
    /* f16 with exponent field 5..12: finite, normal */
    uint16_t h1 = (uint16_t)((5 + xorshift(&x) % 8) << 10 | (xorshift(&x) & 0x3FF));
    uint16_t h2 = (uint16_t)((5 + xorshift(&x) % 8) << 10 | (xorshift(&x) & 0x3FF));
    size_t at = dt == CLEMBED_Q4_K ? o : o + 208; /* Q4_K: d, dmin first; Q6_K: d last */
    b[at] = (unsigned char)h1;
    b[at + 1] = (unsigned char)(h1 >> 8);
    if (dt == CLEMBED_Q4_K) {
      b[at + 2] = (unsigned char)h2;
      b[at + 3] = (unsigned char)(h2 >> 8);
    }
  }
  st = clembed_matrix_write(ctx, m, b, dt);
  free(b);
  return st;
}

/* Tables of V x d in `dt`, n ids drawn from [0, V) (or 0, 1, ..., n-1 with
 * `sequential`), an n x d output in `out_dt`. */
static clembed_status state_init(bench_state *s, size_t V, size_t d, size_t n, clembed_dtype dt, clembed_dtype out_dt,
                                 int sequential) {
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
  if (st == CLEMBED_OK) st = fill_table(s->ctx, &s->table);
  if (st == CLEMBED_OK) st = clembed_matrix_create(s->ctx, n, d, out_dt, &s->out);
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

/* Whether a row is measured: --only's text (NULL: every row) is in its name;
 * any_wanted: in any of n names (a group's set-up is skipped when none is). */
static int wanted(const char *only, const char *name) { return !only || strstr(name, only) != NULL; }
static int any_wanted(const char *only, const char *const *names, int n) {
  for (int k = 0; k < n; k++)
    if (wanted(only, names[k])) return 1;
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: clembed bench [--quick] [--json] [--reps N] [--only TEXT] [--device SPEC]\n"
          "  Times each operation against the fastest copy the device has (a copy\n"
          "  kernel, clEnqueueCopyBuffer, and on a CPU device a memcpy and a\n"
          "  streaming-store copy over as many threads as it has compute units; each\n"
          "  copy buffer at least twice the largest cache), alternately in the same\n"
          "  run, and prints the median ratio of the rates (1.0 = copy speed). The\n"
          "  one-token row is lookup + finish latency in one-kernel round trips\n"
          "  (lower is better), over 40 times as many pairs.\n"
          "  --quick     3 timed pairs per row\n"
          "  --reps N    timed pairs per row (default 15; the latency row 40 times as many)\n"
          "  --only TEXT only the rows whose name contains TEXT\n"
          "  --json      one JSON object per row, after one for the reference\n");
}

int clembed_bench_main(int argc, char **argv) {
  int json = 0, reps = 15;
  const char *device = NULL, *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
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
  reference ref;
  memset(&ref, 0, sizeof ref);
  int rc = 0;
  char err[1024] = "";
  const char *name = "reference copy";
  clembed_status st = clembed_context_create(device, &s.ctx);
  if (st != CLEMBED_OK) {
    fprintf(stderr, "clembed bench: %s: %s\n", clembed_status_string(st), clembed_last_error_message());
    return 2;
  }
  if (reference_init(s.ctx, &ref, reps < 11 ? 11 : reps, err, sizeof err)) goto fail;
  /* Tokens: 16384, doubled until the smallest row's working set (an F16
   * lookup into F16: n*d*2 read and n*d*2 written) is twice the largest cache. */
  const size_t d = 1024, V = 32000;
  size_t n = 16384;
  while ((double)n * d * 4 < (double)ref.min_bytes && n < ((size_t)1 << 22)) n *= 2;
  {
    char names[COPY_KINDS][48];
    for (int k = 0; k < COPY_KINDS; k++) copy_name(&ref, k, names[k], sizeof names[k]);
    if (json) {
      printf("{\"reference\": \"%s\", \"reference_gb_per_s\": %.3f, \"copy_kernel_gb_per_s\": %.3f, "
             "\"copy_buffer_gb_per_s\": %.3f, \"memcpy_gb_per_s\": %.3f, \"streaming_copy_gb_per_s\": %.3f, "
             "\"memcpy_threads\": %d, "
             "\"host_llc_bytes\": %zu, \"device_cache_bytes\": %zu, \"min_copy_bytes\": %zu, \"n\": %zu, "
             "\"d\": %zu, \"V\": %zu}\n",
             names[ref.kind], ref.rate[ref.kind] / 1e9, ref.rate[COPY_KERNEL] / 1e9, ref.rate[COPY_BUFFER] / 1e9,
             ref.rate[COPY_MEMCPY] / 1e9, ref.rate[COPY_STREAM] / 1e9, ref.cpu ? ref.pool.threads : 0, ref.host_llc, ref.device_cache,
             ref.min_bytes, n, d, V);
    } else {
      printf("clembed bench on %s, %d timed pairs per row (the latency row %d)\n", clembed_context_device_name(s.ctx),
             reps, reps * LATENCY_PAIRS);
      printf("caches: host last level %.1f MiB, device global memory %.1f MiB; every copy buffer >= %.1f MiB\n",
             ref.host_llc / 1048576.0, ref.device_cache / 1048576.0, ref.min_bytes / 1048576.0);
      printf("reference: %s (read + written, %.1f MiB copies: copy kernel %.2f GB/s, clEnqueueCopyBuffer %.2f GB/s",
             names[ref.kind], ref.min_bytes / 1048576.0, ref.rate[COPY_KERNEL] / 1e9, ref.rate[COPY_BUFFER] / 1e9);
      if (ref.cpu) printf(", %s %.2f GB/s", names[COPY_MEMCPY], ref.rate[COPY_MEMCPY] / 1e9);
      if (ref.cpu && HAVE_STREAM_COPY) printf(", %s %.2f GB/s", names[COPY_STREAM], ref.rate[COPY_STREAM] / 1e9);
      printf(")\n");
      printf("%-40s %10s %10s %8s %9s %8s\n", "operation", "median ms", "MB moved", "GB/s", "copy GB/s", "vs copy");
    }
  }
  fflush(stdout);
  row r;
#define ROW(LABEL, FN, BYTES, LAT)                                                                      \
  do {                                                                                                  \
    name = LABEL;                                                                                       \
    if (!wanted(only, LABEL)) break;                                                                    \
    memset(&r, 0, sizeof r);                                                                            \
    if (measure(&s, &ref, FN, (double)(BYTES), reps, LAT, &r, err, sizeof err)) goto fail;              \
    r.name = LABEL;                                                                                     \
    print_row(&r, &s, json);                                                                            \
    fflush(stdout);                                                                                     \
  } while (0)

  /* lookups: ids + rows read + output written */
  {
    const clembed_dtype tdt[5] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16, CLEMBED_F16, CLEMBED_BF16};
    const clembed_dtype odt[5] = {CLEMBED_F32, CLEMBED_F32, CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
    const char *lnames[5] = {"lookup f32", "lookup f16 table, f32 out", "lookup bf16 table, f32 out",
                             "lookup f16 table, f16 out", "lookup bf16 table, bf16 out"};
    for (int t = 0; t < 5; t++) {
      name = lnames[t];
      if (!wanted(only, name)) continue;
      if ((st = state_init(&s, V, d, n, tdt[t], odt[t], 0)) != CLEMBED_OK) goto fail_status;
      ROW(lnames[t], op_lookup, n * 4 + n * d * clembed_dtype_size(tdt[t]) + n * d * clembed_dtype_size(odt[t]), 0);
    }
  }
  /* lookups from block-quantized and BF16 tables: ids + blocks read + output written */
  {
    const clembed_dtype tdt[4] = {CLEMBED_Q8_0, CLEMBED_Q4_0, CLEMBED_Q4_K, CLEMBED_BF16};
    const clembed_dtype odt[2] = {CLEMBED_F16, CLEMBED_F32};
    const char *tn[4] = {"q8_0", "q4_0", "q4_k", "bf16"}, *on[2] = {"f16", "f32"};
    static char qnames[8][48];
    for (int t = 0; t < 4; t++)
      for (int o = 0; o < 2; o++) {
        if (tdt[t] == CLEMBED_BF16 && odt[o] == CLEMBED_F32) continue; /* a row above */
        char *label = qnames[2 * t + o];
        snprintf(label, sizeof qnames[0], "lookup %s table, %s out", tn[t], on[o]);
        name = label;
        if (!wanted(only, name)) continue;
        if ((st = state_init(&s, V, d, n, tdt[t], odt[o], 0)) != CLEMBED_OK) goto fail_status;
        ROW(label, op_lookup,
            n * 4 + n * clembed_dtype_row_bytes(tdt[t], d) + n * d * clembed_dtype_size(odt[o]), 0);
      }
  }
  /* the same lookup with ids 0, 1, ..., n-1: the access pattern of a copy, which
   * separates the kernel's efficiency from the cost of gathering random rows */
  name = "lookup f32, ids 0..n-1 (copy pattern)";
  if (wanted(only, name)) {
    if ((st = state_init(&s, n, d, n, CLEMBED_F32, CLEMBED_F32, 1)) != CLEMBED_OK) goto fail_status;
    ROW(name, op_lookup, n * 4 + n * d * 4 + n * d * 4, 0);
  }
  /* fused forward: sequences of 2048 */
  const char *enames[3] = {"embed sqrt + sinusoid (seq 2048)", "embed + learned positions", "positional table"};
  name = enames[0];
  if (any_wanted(only, enames, 3)) {
    if ((st = state_init(&s, V, d, n, CLEMBED_F32, CLEMBED_F32, 0)) != CLEMBED_OK) goto fail_status;
    s.eopt = clembed_embed_defaults();
    s.eopt.scale = sqrtf((float)d);
    s.eopt.positions = CLEMBED_POSITIONS_SINUSOID;
    s.eopt.seq_len = 2048;
    ROW(enames[0], op_embed, n * 4 + n * d * 4 + n * d * 4, 0);
    name = enames[1];
    if ((st = clembed_matrix_create(s.ctx, 2048, d, CLEMBED_F32, &s.ptable)) != CLEMBED_OK) goto fail_status;
    s.eopt.positions = CLEMBED_POSITIONS_TABLE;
    s.eopt.position_table = &s.ptable;
    ROW(enames[1], op_embed, n * 4 + 2 * n * d * 4 + n * d * 4, 0);
    s.sin.base = 10000.0;
    s.sin.exponent = CLEMBED_EXPONENT_PAIR;
    s.sin.layout = CLEMBED_LAYOUT_INTERLEAVED;
    ROW(enames[2], op_positional, n * d * 4, 0);
  }
  /* RoPE (head_dim 128): the cos/sin cache of positions 0..8191 (output
   * written), and the rotation of 4096 tokens of 32 heads (input read + output
   * written; positions 0..4095 from position_offset, no position ids) */
  const char *pnames[3] = {"rope cache f32 (8192 positions, R 128)", "rope apply f32 (4096 x 32 heads x 128)",
                           "rope apply f16 (4096 x 32 heads x 128)"};
  if (any_wanted(only, pnames, 3)) {
    const size_t rope_pos = 8192, rope_tokens = 4096, rope_cols = 32 * 128;
    name = "rope";
    state_release(&s);
    s.rope = clembed_rope_defaults();
    s.rope.head_dim = 128;
    s.n = rope_tokens; /* the JSON rows' n, d, V: tokens, columns, cached positions */
    s.d = rope_cols;
    s.V = rope_pos;
    if ((st = clembed_matrix_create(s.ctx, rope_pos, 128, CLEMBED_F32, &s.table)) != CLEMBED_OK) goto fail_status;
    ROW(pnames[0], op_rope_cache, rope_pos * 128 * 4, 0);
    const clembed_dtype rdt[2] = {CLEMBED_F32, CLEMBED_F16};
    const char *const *rnames = pnames + 1;
    for (int t = 0; t < 2; t++) {
      name = rnames[t];
      clembed_matrix_release(&s.rx);
      clembed_matrix_release(&s.out);
      if ((st = clembed_matrix_create(s.ctx, rope_tokens, rope_cols, rdt[t], &s.rx)) != CLEMBED_OK) goto fail_status;
      if ((st = fill_table(s.ctx, &s.rx)) != CLEMBED_OK) goto fail_status;
      if ((st = clembed_matrix_create(s.ctx, rope_tokens, rope_cols, rdt[t], &s.out)) != CLEMBED_OK) goto fail_status;
      ROW(rnames[t], op_rope_apply, 2.0 * rope_tokens * rope_cols * clembed_dtype_size(rdt[t]), 0);
    }
  }
  /* backward and sgd: ids + gradient read + touched rows read and written */
  const char *tnames[9] = {"backward (accumulate, deterministic)", "backward (accumulate, atomic)", "sgd_update",
                            "optimizer SGD", "optimizer ADAGRAD", "optimizer ROWWISE_ADAGRAD", "optimizer ADAM",
                            "init normal f32 (V x d)", "init uniform f32 (V x d)"};
  if (any_wanted(only, tnames, 9)) {
    name = "backward";
    if ((st = state_init(&s, V, d, n, CLEMBED_F32, CLEMBED_F32, 0)) != CLEMBED_OK) goto fail_status;
    if ((st = clembed_matrix_create(s.ctx, n, d, CLEMBED_F32, &s.grad)) != CLEMBED_OK) goto fail_status;
    if ((st = clembed_matrix_init_uniform(s.ctx, &s.grad, -1.0f, 1.0f, 2, 0, NULL, NULL)) != CLEMBED_OK)
      goto fail_status;
    if ((st = clembed_matrix_create(s.ctx, V, d, CLEMBED_F32, &s.dW)) != CLEMBED_OK) goto fail_status;
    s.bopt = clembed_backward_defaults();
    size_t unique = count_unique(&s);
    ROW(tnames[0], op_backward, n * 4 + n * d * 4 + 2 * unique * d * 4, 0);
    s.bopt.deterministic = 0;
    ROW(tnames[1], op_backward, n * 4 + n * d * 4 + 2 * unique * d * 4, 0);
    s.bopt.deterministic = 1;
    ROW(tnames[2], op_sgd, n * 4 + n * d * 4 + 2 * unique * d * 4, 0);
    /* optimizer steps: ids + gradient + touched rows of the table and of each
     * state, read and written (F32 table; lr tiny so the table stays put) */
    {
      const clembed_optimizer_kind kinds[4] = {CLEMBED_SGD, CLEMBED_ADAGRAD, CLEMBED_ROWWISE_ADAGRAD, CLEMBED_ADAM};
      const char *const *onames = tnames + 3;
      const size_t state_cols[4] = {0, d, 1, 2 * d}; /* state columns read and written per touched row */
      name = "optimizer states";
      if ((st = clembed_matrix_create(s.ctx, V, d, CLEMBED_F32, &s.s1)) != CLEMBED_OK) goto fail_status;
      if ((st = clembed_matrix_create(s.ctx, V, d, CLEMBED_F32, &s.s2)) != CLEMBED_OK) goto fail_status;
      clembed_matrix rowwise = s.s1;
      rowwise.cols = 1;
      rowwise.ld = d;
      for (int k = 0; k < 4; k++) {
        s.optim = clembed_optimizer_defaults(kinds[k]);
        s.optim.learning_rate = 1e-9f;
        s.optim.state = kinds[k] == CLEMBED_ROWWISE_ADAGRAD ? &rowwise : &s.s1;
        s.optim.state2 = &s.s2;
        s.optim.step = 0;
        ROW(onames[k], op_optim, n * 4 + n * d * 4 + 2 * unique * (d + state_cols[k]) * 4, 0);
      }
    }
    /* initialisation of the V x d table: output written */
    ROW(tnames[7], op_init_normal, V * d * 4, 0);
    ROW(tnames[8], op_init_uniform, V * d * 4, 0);
  }
  /* one token */
  name = "one-token lookup + finish (d 4096)";
  if (wanted(only, name)) {
    if ((st = state_init(&s, V, 4096, 1, CLEMBED_F32, CLEMBED_F32, 0)) != CLEMBED_OK) goto fail_status;
    ROW(name, op_lookup, 4 + 2 * 4096 * 4, 1);
  }
  goto done;
fail_status:
  snprintf(err, sizeof err, "%s: %s", clembed_status_string(st), clembed_context_message(s.ctx));
fail:
  fprintf(stderr, "clembed bench: %s: %s\n", name, err);
  rc = 2;
done:
  state_release(&s);
  reference_release(&ref);
  clembed_context_destroy(s.ctx);
  return rc;
}
