/* clembed bench: each operation against the fastest copy the device has, and
 * on a CPU device (with --ceiling) against the same work written by hand in C.
 *
 * The reference: the fastest of the copies, measured at the start of the run
 * and printed with its rate: a copy kernel (one uint4 per work-item),
 * clEnqueueCopyBuffer, and on a CPU device a memcpy and a streaming-store copy
 * split over as many host threads as the device has compute units (between
 * host arrays of the same size, on huge pages where Linux gives them). Every
 * copy buffer holds at least twice the largest cache: the largest of what
 * sysfs, CPUID (sysconf) and the device (CL_DEVICE_GLOBAL_MEM_CACHE_SIZE)
 * report, since each can under-report in a virtual machine, and 1 GiB where
 * none reports anything. So the copy run between two runs of an operation
 * sweeps every cache, and no run finds the last one's rows cached.
 *
 * The rows have the sizes models have: a 1 GiB F32 table (262,144 x 1,024),
 * Llama 3's token table (128,256 x 4,096) in BF16 (1 GiB), F16 and the ggml
 * block types it ships in, and a recommendation table (1,000,000 x 128 F32),
 * with the forward, the backward and every optimizer step at those sizes.
 *
 * For every row the operation and the reference copy (and the C ceiling) are
 * timed alternately, in the same run; the figures are the medians of the
 * per-round ratios (operation bytes per second / copy bytes per second, and
 * operation rate / ceiling rate on the same bytes), so they hold on a noisy
 * machine and on any device. Bytes counted: forward = ids + rows read (blocks
 * for block types) + output written; backward and optimizer steps = ids +
 * gradient read + touched rows of the table and of each state read and
 * written; RoPE = input read + output written; initialisation = output
 * written; bags = ids + offsets + rows read + output written (the bag step: ids
 * + offsets + gradient read + touched rows of the table and its state read and
 * written). The one-token row is the other way round: the latency of lookup +
 * finish in units of one copy-kernel round trip.
 *
 * The last rows run the forward and a step with the table split over 4
 * buffers (a context of its own, made with CLEMBED_MAX_BUFFER_BYTES at a
 * quarter of the table); each also times the same operation on the table in
 * one buffer in the same rounds, and prints the split's speed over it (1.00 =
 * as fast as one buffer).
 *
 * A program of its own, clembed-bench (built with the tools, installed beside
 * clembed); `clembed bench ARGS` runs it with the same arguments. Uses the
 * public API, OpenCL and tools/ceiling/ only. */
#define _DEFAULT_SOURCE
#define _POSIX_C_SOURCE 200809L
#include "clembed.h"
#include "../ceiling/ceiling.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "timing.h"

/* ------------------------------------------------------------- caches */

/* What each source says of the largest cache (0: it says nothing), and the
 * size the bench goes by: the largest of them, or 1 GiB where all are 0. */
typedef struct cache_facts {
  size_t sysfs, cpuid, device, bytes;
  const char *source;
} cache_facts;

/* The largest cache of any CPU in sysfs (0 where there is no sysfs). */
static size_t sysfs_cache_bytes(void) {
  size_t best = 0;
  for (int cpu = 0; cpu < 4096; cpu++) {
    int found = 0;
    for (int i = 0; i < 16; i++) {
      char path[96], buf[64];
      snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/size", cpu, i);
      FILE *f = fopen(path, "r");
      if (!f) continue;
      found = 1;
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
    if (!found) break;
  }
  return best;
}

/* What the C library reads from CPUID (glibc's sysconf). */
static size_t cpuid_cache_bytes(void) {
  long best = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
  const int names[3] = {_SC_LEVEL2_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL4_CACHE_SIZE};
  for (int i = 0; i < 3; i++) {
    long v = sysconf(names[i]);
    if (v > best) best = v;
  }
#endif
  return (size_t)best;
}

static void cache_facts_read(cache_facts *c, size_t device_cache) {
  c->sysfs = sysfs_cache_bytes();
  c->cpuid = cpuid_cache_bytes();
  c->device = device_cache;
  c->bytes = (size_t)1 << 30;
  c->source = "none reported: 1 GiB assumed";
  const size_t v[3] = {c->sysfs, c->cpuid, c->device};
  const char *name[3] = {"sysfs", "CPUID", "the device"};
  size_t best = 0;
  for (int i = 0; i < 3; i++)
    if (v[i] > best) {
      best = v[i];
      c->bytes = v[i];
      c->source = name[i];
    }
}

/* --------------------------------------------------------- host threads */

/* A pool of host threads: pool_run calls fn(arg, i, threads) on each (the
 * caller's thread is 0) and returns when all have returned. */
typedef struct pool {
  int threads, quit;
  unsigned generation;
  int pending;
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  pthread_t tid[64];
  int index[64];
  ceiling_part_fn fn;
  void *arg;
  int ready;
} pool;

static pool *the_pool; /* the workers' pool (one per run) */

static void *pool_worker(void *a) {
  int index = *(const int *)a;
  pool *p = the_pool;
  unsigned seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (p->generation == seen && !p->quit) pthread_cond_wait(&p->go, &p->mu);
    if (p->quit) break;
    seen = p->generation;
    pthread_mutex_unlock(&p->mu);
    p->fn(p->arg, index, p->threads);
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

static void pool_run(void *pool_arg, ceiling_part_fn fn, void *arg) {
  pool *p = pool_arg;
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->arg = arg;
  p->pending = p->threads - 1;
  p->generation++;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  fn(arg, 0, p->threads);
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

/* ---------------------------------------------------- reference copies */

enum { COPY_KERNEL = 0, COPY_BUFFER = 1, COPY_MEMCPY = 2, COPY_STREAM = 3, COPY_KINDS = 4 };

static const char *copy_source =
    "__kernel void bench_copy(__global const uint4 *src, __global uint4 *dst, ulong n) {\n"
    "  ulong i = get_global_id(0);\n"
    "  if (i < n) dst[i] = src[i];\n"
    "}\n";

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

/* One host copy split over the pool's threads in 64-byte-aligned parts. */
typedef struct host_copy {
  unsigned char *dst;
  const unsigned char *src;
  size_t bytes;
  int stream;
} host_copy;

static void host_copy_part(void *arg, int index, int threads) {
  const host_copy *c = arg;
  size_t part = (c->bytes / (size_t)threads + 63) / 64 * 64;
  size_t lo = part * (size_t)index, hi = lo + part;
  if (hi > c->bytes) hi = c->bytes;
  if (lo >= hi) return;
  if (c->stream) stream_copy(c->dst + lo, c->src + lo, hi - lo);
  else memcpy(c->dst + lo, c->src + lo, hi - lo);
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
  cache_facts cache;
  size_t min_bytes;     /* every copy buffer holds at least this: twice the largest cache */
  int kind;             /* the fastest, used by every row */
  double rate[COPY_KINDS]; /* bytes moved per second (read + written), at the start */
} reference;

/* Host memory written once (a page never written reads as the shared zero
 * page), on transparent huge pages where Linux gives them. */
static unsigned char *host_alloc(size_t bytes) {
  unsigned char *p = ceiling_host_alloc(bytes);
  if (p) memset(p, 0x3F, bytes);
  return p;
}

static void reference_release_buffers(reference *r) {
  if (r->src) clReleaseMemObject(r->src);
  if (r->dst) clReleaseMemObject(r->dst);
  ceiling_host_free(r->hsrc, r->capacity);
  ceiling_host_free(r->hdst, r->capacity);
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
      ceiling_host_free(r->hsrc, bytes);
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
    host_copy c = {r->hdst, r->hsrc, bytes, kind == COPY_STREAM};
    pool_run(&r->pool, host_copy_part, &c);
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
static int reference_init(clembed_context *ctx, reference *r, int rounds, int latency_only, char *err,
                          size_t errlen) {
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
  cache_facts_read(&r->cache, (size_t)cache);
  /* latency rows alone time a 16-byte copy: the bandwidth copies stay small */
  r->min_bytes = latency_only ? (size_t)1 << 20 : (2 * r->cache.bytes + 63) / 64 * 64;
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

/* ------------------------------------------------------------------ rows */

typedef enum op_kind {
  OP_LOOKUP, OP_EMBED_SINUSOID, OP_EMBED_LEARNED, OP_POSITIONAL, OP_ROPE_CACHE, OP_ROPE_APPLY, OP_BACKWARD,
  OP_BACKWARD_ATOMIC, OP_SGD, OP_OPTIM, OP_INIT_NORMAL, OP_INIT_UNIFORM, OP_LATENCY, OP_BERT, OP_BERT_BACKWARD,
  OP_BAG_SUM, OP_BAG_MEAN, OP_BAGS, OP_BAG_STEP
} op_kind;
static const char *const op_names[] = {"lookup", "embed_sinusoid", "embed_learned", "positional", "rope_cache",
                                       "rope_apply", "backward", "backward_atomic", "sgd_update", "optimizer",
                                       "init_normal", "init_uniform", "latency", "embed_bert", "embed_bert_backward",
                                       "bag_sum", "bag_mean", "bags", "bag_step"};

/* One row: what it runs on which shapes. V x d is the table (RoPE: positions
 * cached, or tokens x columns), n the ids (RoPE: tokens), seq the tokens per
 * sequence of the fused forward (bags: the ids per bag). OP_BAGS pools
 * BAGS_FEATURES features, V / BAGS_FEATURES rows each, in one call: V, n and
 * the output's columns are the features' together. */
typedef struct spec {
  const char *name;
  op_kind op;
  clembed_dtype tdt, odt;
  size_t V, d, n, seq;
  clembed_optimizer_kind optim;
  int sequential; /* ids 0, 1, ..., n-1 */
} spec;

#define LLAMA_V 128256
#define LLAMA_D 4096
#define GIB_V 262144
#define GIB_D 1024
#define REC_V 1000000
#define REC_D 128
#define BERT_V 32000
#define BERT_D 1024
#define LOOKUP_ROW(NAME, T, O) {NAME, OP_LOOKUP, CLEMBED_##T, CLEMBED_##O, LLAMA_V, LLAMA_D, 16384, 0, 0, 0}
#define TRAIN_ROWS(WHAT, T, V, D, N)                                                                        \
  {"backward (accumulate, deterministic), " WHAT, OP_BACKWARD, CLEMBED_##T, CLEMBED_F32, V, D, N, 0, 0, 0},  \
  {"backward (accumulate, atomic), " WHAT, OP_BACKWARD_ATOMIC, CLEMBED_##T, CLEMBED_F32, V, D, N, 0, 0, 0},  \
  {"sgd_update, " WHAT, OP_SGD, CLEMBED_##T, CLEMBED_F32, V, D, N, 0, 0, 0},                                 \
  {"optimizer SGD, " WHAT, OP_OPTIM, CLEMBED_##T, CLEMBED_F32, V, D, N, 0, CLEMBED_SGD, 0},                  \
  {"optimizer ADAGRAD, " WHAT, OP_OPTIM, CLEMBED_##T, CLEMBED_F32, V, D, N, 0, CLEMBED_ADAGRAD, 0},          \
  {"optimizer ROWWISE_ADAGRAD, " WHAT, OP_OPTIM, CLEMBED_##T, CLEMBED_F32, V, D, N, 0, CLEMBED_ROWWISE_ADAGRAD, 0}, \
  {"optimizer ADAM, " WHAT, OP_OPTIM, CLEMBED_##T, CLEMBED_F32, V, D, N, 0, CLEMBED_ADAM, 0}

static const spec rows_table[] = {
    /* a 1 GiB F32 table, 262144 x 1024, 65536 ids */
    {"lookup f32 (1 GiB table 262144 x 1024)", OP_LOOKUP, CLEMBED_F32, CLEMBED_F32, GIB_V, GIB_D, 65536, 0, 0, 0},
    {"lookup f32, ids 0..n-1 (copy pattern)", OP_LOOKUP, CLEMBED_F32, CLEMBED_F32, GIB_V, GIB_D, GIB_V, 0, 0, 1},
    /* Llama 3's token table, 128256 x 4096, 16384 ids, in the dtypes it ships in */
    LOOKUP_ROW("lookup bf16 table, bf16 out (Llama 3)", BF16, BF16),
    LOOKUP_ROW("lookup bf16 table, f32 out (Llama 3)", BF16, F32),
    LOOKUP_ROW("lookup f16 table, f16 out (Llama 3)", F16, F16),
    LOOKUP_ROW("lookup f16 table, f32 out (Llama 3)", F16, F32),
    LOOKUP_ROW("lookup q8_0 table, f16 out (Llama 3)", Q8_0, F16),
    LOOKUP_ROW("lookup q8_0 table, f32 out (Llama 3)", Q8_0, F32),
    LOOKUP_ROW("lookup q4_0 table, f16 out (Llama 3)", Q4_0, F16),
    LOOKUP_ROW("lookup q4_0 table, f32 out (Llama 3)", Q4_0, F32),
    LOOKUP_ROW("lookup q4_k table, f16 out (Llama 3)", Q4_K, F16),
    LOOKUP_ROW("lookup q4_k table, f32 out (Llama 3)", Q4_K, F32),
    /* ggml's other block types a GGUF token table ships in, one of each family */
    LOOKUP_ROW("lookup q4_1 table, f16 out (Llama 3)", Q4_1, F16),
    LOOKUP_ROW("lookup q5_0 table, f16 out (Llama 3)", Q5_0, F16),
    LOOKUP_ROW("lookup q2_k table, f16 out (Llama 3)", Q2_K, F16),
    LOOKUP_ROW("lookup q3_k table, f16 out (Llama 3)", Q3_K, F16),
    LOOKUP_ROW("lookup q5_k table, f16 out (Llama 3)", Q5_K, F16),
    LOOKUP_ROW("lookup iq4_xs table, f16 out (Llama 3)", IQ4_XS, F16),
    LOOKUP_ROW("lookup iq2_xxs table, f16 out (Llama 3)", IQ2_XXS, F16),
    /* a recommendation table, 1000000 x 128 F32, 131072 ids */
    {"lookup f32 (recommendation 1000000 x 128)", OP_LOOKUP, CLEMBED_F32, CLEMBED_F32, REC_V, REC_D, 131072, 0, 0, 0},
    /* the fused forward on the 1 GiB table: 16 sequences of 2048 */
    {"embed sqrt + sinusoid (1 GiB table, seq 2048)", OP_EMBED_SINUSOID, CLEMBED_F32, CLEMBED_F32, GIB_V, GIB_D, 32768,
     2048, 0, 0},
    {"embed + learned positions (1 GiB table, seq 2048)", OP_EMBED_LEARNED, CLEMBED_F32, CLEMBED_F32, GIB_V, GIB_D,
     32768, 2048, 0, 0},
    {"positional table (32768 x 1024)", OP_POSITIONAL, CLEMBED_F32, CLEMBED_F32, 0, GIB_D, 32768, 0, 0, 0},
    /* RoPE, head_dim 128: the cache of 8192 positions; 16384 tokens of 32 heads */
    {"rope cache f32 (8192 positions, R 128)", OP_ROPE_CACHE, CLEMBED_F32, CLEMBED_F32, 8192, 128, 0, 0, 0, 0},
    {"rope apply f32 (16384 x 32 heads x 128)", OP_ROPE_APPLY, CLEMBED_F32, CLEMBED_F32, 0, 4096, 16384, 0, 0, 0},
    {"rope apply f16 (16384 x 32 heads x 128)", OP_ROPE_APPLY, CLEMBED_F16, CLEMBED_F16, 0, 4096, 16384, 0, 0, 0},
    /* training: the backward and every optimizer step at each size */
    TRAIN_ROWS("1 GiB f32 table", F32, GIB_V, GIB_D, 65536),
    TRAIN_ROWS("Llama 3 bf16 table", BF16, LLAMA_V, LLAMA_D, 16384),
    TRAIN_ROWS("recommendation", F32, REC_V, REC_D, 131072),
    {"init normal f32 (1 GiB table)", OP_INIT_NORMAL, CLEMBED_F32, CLEMBED_F32, GIB_V, GIB_D, 0, 0, 0, 0},
    {"init uniform f32 (1 GiB table)", OP_INIT_UNIFORM, CLEMBED_F32, CLEMBED_F32, GIB_V, GIB_D, 0, 0, 0, 0},
    {"one-token lookup + finish (d 4096)", OP_LATENCY, CLEMBED_F32, CLEMBED_F32, 32000, 4096, 1, 0, 0, 0},
    /* BERT's input layer, 32000 x 1024 f32, 8 sequences of 2048, two segment types, LayerNorm: the
     * plain fused forward of the same shapes, the fused layer, and its backward (every gradient) */
    {"embed + learned positions (BERT 32000 x 1024, 8 x 2048)", OP_EMBED_LEARNED, CLEMBED_F32, CLEMBED_F32, BERT_V,
     BERT_D, 16384, 2048, 0, 0},
    {"embed + segments + LayerNorm (BERT, the same)", OP_BERT, CLEMBED_F32, CLEMBED_F32, BERT_V, BERT_D, 16384, 2048,
     0, 0},
    {"embed_backward, every gradient (BERT, the same)", OP_BERT_BACKWARD, CLEMBED_F32, CLEMBED_F32, BERT_V, BERT_D,
     16384, 2048, 0, 0},
    /* bags of ids (EmbeddingBag): the recommendation table, 4096 bags of 32 ids */
    {"bag sum f32 (1000000 x 128, 4096 bags of 32)", OP_BAG_SUM, CLEMBED_F32, CLEMBED_F32, REC_V, REC_D, 131072, 32,
     0, 0},
    {"bag mean f32 (1000000 x 128, 4096 bags of 32)", OP_BAG_MEAN, CLEMBED_F32, CLEMBED_F32, REC_V, REC_D, 131072, 32,
     0, 0},
    {"bag sum q8_0 (1000000 x 128, 4096 bags of 32)", OP_BAG_SUM, CLEMBED_Q8_0, CLEMBED_F32, REC_V, REC_D, 131072, 32,
     0, 0},
    {"bag sum q4_k (1000000 x 256, 4096 bags of 32)", OP_BAG_SUM, CLEMBED_Q4_K, CLEMBED_F32, REC_V, 256, 131072, 32,
     0, 0},
    /* FBGEMM's row-wise serving formats, the recommendation table */
    {"bag sum i8_rowwise (1000000 x 128, 4096 bags of 32)", OP_BAG_SUM, CLEMBED_I8_ROWWISE, CLEMBED_F32, REC_V, REC_D,
     131072, 32, 0, 0},
    {"bag sum i4_rowwise (1000000 x 128, 4096 bags of 32)", OP_BAG_SUM, CLEMBED_I4_ROWWISE, CLEMBED_F32, REC_V, REC_D,
     131072, 32, 0, 0},
    {"bag sum i2_rowwise (1000000 x 128, 4096 bags of 32)", OP_BAG_SUM, CLEMBED_I2_ROWWISE, CLEMBED_F32, REC_V, REC_D,
     131072, 32, 0, 0},
    {"bag sum i8_tbe (1000000 x 128, 4096 bags of 32)", OP_BAG_SUM, CLEMBED_I8_TBE, CLEMBED_F32, REC_V, REC_D, 131072,
     32, 0, 0},
    {"bag sum i4_tbe (1000000 x 128, 4096 bags of 32)", OP_BAG_SUM, CLEMBED_I4_TBE, CLEMBED_F32, REC_V, REC_D, 131072,
     32, 0, 0},
    {"bag sum i2_tbe (1000000 x 128, 4096 bags of 32)", OP_BAG_SUM, CLEMBED_I2_TBE, CLEMBED_F32, REC_V, REC_D, 131072,
     32, 0, 0},
    {"bag sum fp8_rowwise (1000000 x 128, 4096 bags of 32)", OP_BAG_SUM, CLEMBED_FP8_ROWWISE, CLEMBED_F32, REC_V,
     REC_D, 131072, 32, 0, 0},
    {"bags: 26 features of 100000 x 64 in one call", OP_BAGS, CLEMBED_F32, CLEMBED_F32, 26 * 100000, 64,
     26 * 131072, 32, 0, 0},
    {"bag step ROWWISE_ADAGRAD (1000000 x 128, 4096 bags)", OP_BAG_STEP, CLEMBED_F32, CLEMBED_F32, REC_V, REC_D,
     131072, 32, CLEMBED_ROWWISE_ADAGRAD, 0},
};
#define BAGS_FEATURES 26
#define ROW_COUNT (sizeof rows_table / sizeof rows_table[0])

/* The last rows: rows above with the table split over `pieces` buffers. */
static const struct {
  spec row;
  int pieces;
} split_rows[] = {
    {{"lookup f32, table in 4 buffers (1 GiB table)", OP_LOOKUP, CLEMBED_F32, CLEMBED_F32, GIB_V, GIB_D, 65536, 0, 0,
      0}, 4},
    {{"lookup f32, table in 4 buffers (recommendation)", OP_LOOKUP, CLEMBED_F32, CLEMBED_F32, REC_V, REC_D, 131072, 0,
      0, 0}, 4},
    {{"embed sqrt + sinusoid, table in 4 buffers (1 GiB table)", OP_EMBED_SINUSOID, CLEMBED_F32, CLEMBED_F32, GIB_V,
      GIB_D, 32768, 2048, 0, 0}, 4},
    {{"optimizer ADAGRAD, table in 4 buffers (1 GiB f32 table)", OP_OPTIM, CLEMBED_F32, CLEMBED_F32, GIB_V, GIB_D,
      65536, 0, CLEMBED_ADAGRAD, 0}, 4},
    {{"optimizer ROWWISE_ADAGRAD, table in 4 buffers (recommendation)", OP_OPTIM, CLEMBED_F32, CLEMBED_F32, REC_V,
      REC_D, 131072, 0, CLEMBED_ROWWISE_ADAGRAD, 0}, 4},
};
#define ALL_ROWS (ROW_COUNT + sizeof split_rows / sizeof split_rows[0])

/* Row k of all (rows_table's, then split_rows'); *pieces: its table's buffers (0: one). */
static const spec *row_at(size_t k, int *pieces) {
  if (pieces) *pieces = k < ROW_COUNT ? 0 : split_rows[k - ROW_COUNT].pieces;
  return k < ROW_COUNT ? &rows_table[k] : &split_rows[k - ROW_COUNT].row;
}

/* What the rows share, kept from one row to the next while it still fits: the
 * table, the ids, the output, the gradient and its dense target, the states. */
typedef struct bench_state {
  clembed_context *ctx;
  clembed_matrix table, out, ptable, grad, dW, s1, s2;
  size_t tV, td, tn; /* the shapes the table and ids were made for */
  clembed_dtype tdt;
  int tseq;
  size_t unique;    /* distinct ids */
  int32_t *host_ids;
  clembed_ids ids;
  clembed_embed_options eopt;
  clembed_backward_options bopt;
  clembed_optimizer optim;
  clembed_sinusoid sin;
  clembed_rope rope;
  /* BERT's layer: the segment table and ids, the norm's weight and bias, their gradients */
  clembed_matrix stable, nw, nb, gP, gS, gw, gb;
  clembed_ids sids;
  clembed_embed_grads egrads;
  /* bags: the offsets (one bag every seq ids), and the features of OP_BAGS:
   * views of the table (V / BAGS_FEATURES rows each) and of the ids */
  clembed_ids offsets;
  clembed_matrix ftab[BAGS_FEATURES];
  clembed_ids fids[BAGS_FEATURES];
  clembed_bag_feature feats[BAGS_FEATURES];
  clembed_bag_options bag;
} bench_state;

static void release_table(bench_state *s) {
  clembed_matrix_release(&s->table);
  clembed_matrix_release(&s->dW);
  clembed_matrix_release(&s->s1);
  clembed_matrix_release(&s->s2);
  s->tV = s->td = 0;
}
static void release_ids(bench_state *s) {
  clembed_ids_release(&s->ids);
  free(s->host_ids);
  s->host_ids = NULL;
  s->tn = 0;
}
static void release_bert(bench_state *s) {
  clembed_matrix *m[] = {&s->stable, &s->nw, &s->nb, &s->gP, &s->gS, &s->gw, &s->gb};
  for (size_t k = 0; k < sizeof m / sizeof m[0]; k++) clembed_matrix_release(m[k]);
  clembed_ids_release(&s->sids);
}
static void state_release(bench_state *s) {
  release_table(s);
  release_ids(s);
  release_bert(s);
  clembed_ids_release(&s->offsets);
  clembed_matrix_release(&s->out);
  clembed_matrix_release(&s->ptable);
  clembed_matrix_release(&s->grad);
}

static uint64_t xorshift(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* Fills a table: uniform in [-1, 1) for the float dtypes; for a block type
 * random bytes with every f16 scale finite and normal, in [2^-10, 2^-2) (the
 * types after Q6_K: every byte below 0x78, so every f16 scale is finite). */
static clembed_status fill_table(clembed_context *ctx, clembed_matrix *m) {
  clembed_dtype dt = m->dtype;
  if (dt == CLEMBED_F32 || dt == CLEMBED_F16 || dt == CLEMBED_BF16)
    return clembed_matrix_init_uniform(ctx, m, -1.0f, 1.0f, 1, 0, NULL, NULL);
  if (clembed_dtype_block_values(dt) == 0) { /* FBGEMM's row-wise types: values quantized from [-1, 1) */
    size_t rows_at = m->rows < 65536 ? m->rows : 65536, n = rows_at * m->cols;
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (!f) return CLEMBED_ERR_OUT_OF_MEMORY;
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    clembed_status st = CLEMBED_OK;
    for (size_t r = 0; r < m->rows && st == CLEMBED_OK; r += rows_at) {
      clembed_matrix v = *m;
      v.offset += r * m->cols;
      v.rows = m->rows - r < rows_at ? m->rows - r : rows_at;
      for (size_t i = 0; i < v.rows * m->cols; i++) f[i] = (float)((double)(xorshift(&x) >> 11) * 0x1p-52 - 1.0);
      st = clembed_matrix_write(ctx, &v, f, CLEMBED_F32);
    }
    free(f);
    return st;
  }
  /* where each block's f16 scales are: (offset, count) */
  size_t at = 0, count = 1;
  if (dt == CLEMBED_Q4_K) count = 2;                        /* d, dmin */
  else if (dt == CLEMBED_Q6_K) at = 208;                    /* d last */
  else if (dt != CLEMBED_Q8_0 && dt != CLEMBED_Q4_0) count = 0;
  size_t bb = clembed_dtype_row_bytes(dt, dt == CLEMBED_Q8_0 || dt == CLEMBED_Q4_0 ? 32 : 256);
  size_t bytes = m->rows * clembed_dtype_row_bytes(dt, m->cols);
  unsigned char *b = malloc(bytes ? bytes : 1);
  if (!b) return CLEMBED_ERR_OUT_OF_MEMORY;
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t r = xorshift(&x);
    if (!count) r &= 0x7777777777777777ULL;
    memcpy(b + i, &r, 8);
  }
  for (size_t i = bytes / 8 * 8; i < bytes; i++) b[i] = (unsigned char)(xorshift(&x) & 0x77);
  for (size_t o = 0; o + bb <= bytes; o += bb)
    for (size_t k = 0; k < count; k++) {
      uint16_t h = (uint16_t)((5 + xorshift(&x) % 8) << 10 | (xorshift(&x) & 0x3FF));
      b[o + at + 2 * k] = (unsigned char)h;
      b[o + at + 2 * k + 1] = (unsigned char)(h >> 8);
    }
  clembed_status st = clembed_matrix_write(ctx, m, b, dt);
  free(b);
  return st;
}

/* The bags of a bag row: offsets of one bag every seq ids (all of OP_BAGS's
 * features use the same ones), and OP_BAGS's features as views of the table
 * and of the ids. */
static clembed_status bags_prepare(bench_state *s, const spec *r, size_t bags, size_t features) {
  clembed_status st = CLEMBED_OK;
  if (s->offsets.count != bags + 1) {
    clembed_ids_release(&s->offsets);
    int32_t *off = malloc((bags + 1) * sizeof *off);
    if (!off) return CLEMBED_ERR_OUT_OF_MEMORY;
    for (size_t b = 0; b <= bags; b++) off[b] = (int32_t)(b * r->seq);
    st = clembed_ids_create(s->ctx, off, bags + 1, CLEMBED_I32, &s->offsets);
    free(off);
    if (st != CLEMBED_OK) return st;
  }
  s->bag = clembed_bag_defaults();
  s->bag.mode = r->op == OP_BAG_MEAN ? CLEMBED_BAG_MEAN : CLEMBED_BAG_SUM;
  for (size_t f = 0; f < features && r->op == OP_BAGS; f++) {
    size_t rows = r->V / features, n = r->n / features;
    s->ftab[f] = s->table;
    s->ftab[f].offset = f * rows * r->d;
    s->ftab[f].rows = rows;
    s->fids[f] = s->ids;
    s->fids[f].offset = f * n;
    s->fids[f].count = n;
    s->feats[f] = clembed_bag_feature_defaults();
    s->feats[f].table = &s->ftab[f];
    s->feats[f].ids = &s->fids[f];
    s->feats[f].offsets = &s->offsets;
    s->feats[f].options = s->bag;
  }
  return st;
}

/* The state a row needs, keeping what the last row made where it fits. */
static clembed_status state_prepare(bench_state *s, const spec *r) {
  clembed_status st = CLEMBED_OK;
  const int training = r->op == OP_BACKWARD || r->op == OP_BACKWARD_ATOMIC || r->op == OP_SGD || r->op == OP_OPTIM ||
                       r->op == OP_BERT_BACKWARD;
  const int bert = r->op == OP_BERT || r->op == OP_BERT_BACKWARD;
  const int uses_table = r->op != OP_POSITIONAL && r->op != OP_ROPE_CACHE && r->op != OP_ROPE_APPLY;
  if (uses_table && (s->tV != r->V || s->td != r->d || s->tdt != r->tdt)) {
    release_table(s);
    if ((st = clembed_matrix_create(s->ctx, r->V, r->d, r->tdt, &s->table)) != CLEMBED_OK) return st;
    if ((st = fill_table(s->ctx, &s->table)) != CLEMBED_OK) return st;
    s->tV = r->V;
    s->td = r->d;
    s->tdt = r->tdt;
  }
  if (!uses_table) release_table(s);
  const size_t id_rows = r->op == OP_BAGS ? r->V / BAGS_FEATURES : r->V; /* OP_BAGS: each feature's */
  if (r->n && r->op != OP_ROPE_APPLY && r->op != OP_POSITIONAL &&
      (s->tn != r->n || s->tseq != r->sequential || s->unique == 0 ||
       (s->host_ids && (size_t)s->host_ids[0] >= id_rows))) {
    release_ids(s);
    if (!(s->host_ids = malloc(r->n * sizeof *s->host_ids))) return CLEMBED_ERR_OUT_OF_MEMORY;
    uint64_t x = 88172645463325252ULL;
    for (size_t i = 0; i < r->n; i++)
      s->host_ids[i] = (int32_t)(r->sequential ? i % id_rows : xorshift(&x) % id_rows);
    if ((st = clembed_ids_create(s->ctx, s->host_ids, r->n, CLEMBED_I32, &s->ids)) != CLEMBED_OK) return st;
    unsigned char *seen = calloc(r->V, 1);
    if (!seen) return CLEMBED_ERR_OUT_OF_MEMORY;
    s->unique = 0;
    for (size_t i = 0; i < r->n; i++)
      if (!seen[s->host_ids[i]]) {
        seen[s->host_ids[i]] = 1;
        s->unique++;
      }
    free(seen);
    s->tn = r->n;
    s->tseq = r->sequential;
  }
  /* the output: n x d (RoPE: the rotated tokens; the cache: positions x R; bags: a row per bag) */
  const int bags_op = r->op == OP_BAG_SUM || r->op == OP_BAG_MEAN || r->op == OP_BAGS || r->op == OP_BAG_STEP;
  const size_t features = r->op == OP_BAGS ? BAGS_FEATURES : 1, bags = bags_op ? r->n / r->seq / features : 0;
  size_t orows = r->op == OP_ROPE_CACHE ? r->V : bags_op ? bags : r->n, ocols = r->d * features;
  if (r->op == OP_INIT_NORMAL || r->op == OP_INIT_UNIFORM || training || r->op == OP_BAG_STEP) orows = 0;
  if (orows && (s->out.rows != orows || s->out.cols != ocols || s->out.dtype != r->odt)) {
    clembed_matrix_release(&s->out);
    if ((st = clembed_matrix_create(s->ctx, orows, ocols, r->odt, &s->out)) != CLEMBED_OK) return st;
  } else if (!orows) {
    clembed_matrix_release(&s->out);
  }
  /* RoPE's input, in `grad` */
  if (r->op == OP_ROPE_APPLY && (s->grad.rows != r->n || s->grad.cols != r->d || s->grad.dtype != r->tdt)) {
    clembed_matrix_release(&s->grad);
    if ((st = clembed_matrix_create(s->ctx, r->n, r->d, r->tdt, &s->grad)) != CLEMBED_OK) return st;
    if ((st = fill_table(s->ctx, &s->grad)) != CLEMBED_OK) return st;
  }
  const size_t grows = r->op == OP_BAG_STEP ? bags : r->n; /* the bag step's gradient: a row per bag */
  if ((training || r->op == OP_BAG_STEP) &&
      (s->grad.rows != grows || s->grad.cols != r->d || s->grad.dtype != CLEMBED_F32)) {
    clembed_matrix_release(&s->grad);
    if ((st = clembed_matrix_create(s->ctx, grows, r->d, CLEMBED_F32, &s->grad)) != CLEMBED_OK) return st;
    if ((st = clembed_matrix_init_uniform(s->ctx, &s->grad, -1.0f, 1.0f, 2, 0, NULL, NULL)) != CLEMBED_OK) return st;
  }
  /* the dense gradient while backward rows run; the states while steps do */
  if (r->op == OP_BACKWARD || r->op == OP_BACKWARD_ATOMIC || r->op == OP_BERT_BACKWARD) {
    if (!s->dW.buffer && (st = clembed_matrix_create(s->ctx, r->V, r->d, CLEMBED_F32, &s->dW)) != CLEMBED_OK) return st;
  } else {
    clembed_matrix_release(&s->dW);
  }
  if ((r->op == OP_OPTIM || r->op == OP_BAG_STEP) && r->optim != CLEMBED_SGD) {
    size_t c1 = r->optim == CLEMBED_ROWWISE_ADAGRAD ? 1 : r->d;
    if (s->s1.buffer && s->s1.cols != c1) clembed_matrix_release(&s->s1);
    if (!s->s1.buffer && (st = clembed_matrix_create(s->ctx, r->V, c1, CLEMBED_F32, &s->s1)) != CLEMBED_OK) return st;
    if (r->optim == CLEMBED_ADAM && !s->s2.buffer &&
        (st = clembed_matrix_create(s->ctx, r->V, r->d, CLEMBED_F32, &s->s2)) != CLEMBED_OK)
      return st;
    if (r->optim != CLEMBED_ADAM) clembed_matrix_release(&s->s2);
  } else {
    clembed_matrix_release(&s->s1);
    clembed_matrix_release(&s->s2);
  }
  if ((r->op == OP_EMBED_LEARNED || bert) && (s->ptable.rows != r->seq || s->ptable.cols != r->d)) {
    clembed_matrix_release(&s->ptable);
    if ((st = clembed_matrix_create(s->ctx, r->seq, r->d, CLEMBED_F32, &s->ptable)) != CLEMBED_OK) return st;
    if ((st = clembed_matrix_init_uniform(s->ctx, &s->ptable, -1.0f, 1.0f, 3, 0, NULL, NULL)) != CLEMBED_OK) return st;
  }
  /* BERT: two segment types (each sequence's first half type 0, its second type 1), LayerNorm */
  if (bert && (s->stable.cols != r->d || s->sids.count != r->n)) {
    release_bert(s);
    int32_t *t = malloc(r->n * sizeof *t);
    if (!t) return CLEMBED_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < r->n; i++) t[i] = (int32_t)(i % r->seq >= r->seq / 2);
    st = clembed_ids_create(s->ctx, t, r->n, CLEMBED_I32, &s->sids);
    free(t);
    clembed_matrix *m[] = {&s->stable, &s->nw, &s->nb, &s->gP, &s->gS, &s->gw, &s->gb};
    const size_t rows[] = {2, 1, 1, r->seq, 2, 1, 1};
    for (size_t k = 0; k < 7 && st == CLEMBED_OK; k++) {
      st = clembed_matrix_create(s->ctx, rows[k], r->d, CLEMBED_F32, m[k]);
      if (st == CLEMBED_OK && k < 3) st = clembed_matrix_init_uniform(s->ctx, m[k], 0.5f, 1.5f, 4 + k, 0, NULL, NULL);
    }
    if (st != CLEMBED_OK) return st;
  } else if (!bert) {
    release_bert(s);
  }
  s->eopt = clembed_embed_defaults();
  if (bert) {
    s->eopt.segment_table = &s->stable;
    s->eopt.segment_ids = &s->sids;
    s->eopt.norm.kind = CLEMBED_NORM_LAYER;
    s->eopt.norm.weight = &s->nw;
    s->eopt.norm.bias = &s->nb;
    s->eopt.norm.eps = 1e-12f;
    s->egrads = clembed_embed_grads_defaults();
    s->egrads.table = &s->dW;
    s->egrads.position_table = &s->gP;
    s->egrads.segment_table = &s->gS;
    s->egrads.norm_weight = &s->gw;
    s->egrads.norm_bias = &s->gb;
  }
  if (r->op == OP_EMBED_SINUSOID || r->op == OP_EMBED_LEARNED || bert) {
    s->eopt.seq_len = r->seq;
    s->eopt.positions = r->op == OP_EMBED_SINUSOID ? CLEMBED_POSITIONS_SINUSOID : CLEMBED_POSITIONS_TABLE;
    s->eopt.position_table = &s->ptable;
    if (r->op == OP_EMBED_SINUSOID) s->eopt.scale = sqrtf((float)r->d);
  }
  s->bopt = clembed_backward_defaults();
  s->bopt.deterministic = r->op != OP_BACKWARD_ATOMIC;
  s->optim = clembed_optimizer_defaults(r->optim);
  s->optim.learning_rate = 1e-9f; /* the table stays put */
  s->optim.state = &s->s1;
  s->optim.state2 = &s->s2;
  s->optim.step = 0;
  s->sin = clembed_sinusoid_defaults(); /* 10000, PAIR, INTERLEAVED */
  s->rope = clembed_rope_defaults();
  s->rope.head_dim = 128;
  if (bags_op && (st = bags_prepare(s, r, bags, features)) != CLEMBED_OK) return st;
  if (st == CLEMBED_OK) st = clembed_finish(s->ctx);
  return st;
}

static clembed_status run_op(bench_state *s, const spec *r) {
  clembed_context *ctx = s->ctx;
  switch (r->op) {
  case OP_LOOKUP:
  case OP_LATENCY: return clembed_lookup(ctx, &s->table, &s->ids, &s->out, 0, NULL, NULL);
  case OP_EMBED_SINUSOID:
  case OP_EMBED_LEARNED: return clembed_embed(ctx, &s->table, &s->ids, &s->eopt, &s->out, 0, NULL, NULL);
  case OP_POSITIONAL: return clembed_positional(ctx, &s->sin, 0, &s->out, 0, NULL, NULL);
  case OP_ROPE_CACHE: return clembed_rope_cache(ctx, &s->rope, 0, &s->out, 0, NULL, NULL);
  case OP_ROPE_APPLY: return clembed_rope_apply(ctx, &s->rope, &s->grad, NULL, 0, 0, 0, &s->out, 0, NULL, NULL);
  case OP_BACKWARD:
  case OP_BACKWARD_ATOMIC: return clembed_backward(ctx, &s->grad, &s->ids, &s->bopt, &s->dW, 0, NULL, NULL);
  case OP_SGD: return clembed_sgd_update(ctx, &s->grad, &s->ids, 1e-9f, &s->bopt, &s->table, 0, NULL, NULL);
  case OP_OPTIM:
    s->optim.step++;
    return clembed_optimizer_step(ctx, &s->grad, &s->ids, &s->bopt, &s->optim, &s->table, 0, NULL, NULL);
  case OP_INIT_NORMAL: return clembed_matrix_init_normal(ctx, &s->table, 0.0f, 1.0f, 7, 0, NULL, NULL);
  case OP_INIT_UNIFORM: return clembed_matrix_init_uniform(ctx, &s->table, -1.0f, 1.0f, 7, 0, NULL, NULL);
  case OP_BERT: return clembed_embed(ctx, &s->table, &s->ids, &s->eopt, &s->out, 0, NULL, NULL);
  case OP_BERT_BACKWARD:
    return clembed_embed_backward(ctx, &s->grad, &s->table, &s->ids, &s->eopt, &s->egrads, 0, NULL, NULL);
  case OP_BAG_SUM:
  case OP_BAG_MEAN: return clembed_embedding_bag(ctx, &s->table, &s->ids, &s->offsets, &s->bag, &s->out, 0, NULL, NULL);
  case OP_BAGS: return clembed_embedding_bags(ctx, s->feats, BAGS_FEATURES, &s->out, 0, NULL, NULL);
  case OP_BAG_STEP:
    s->optim.step++;
    return clembed_bag_optimizer_step(ctx, &s->grad, &s->ids, &s->offsets, &s->bag, &s->optim, &s->table, 0, NULL,
                                      NULL);
  }
  return CLEMBED_ERR_INVALID_ARGUMENT;
}

/* The bytes a row moves (the file's header comment). */
static double row_bytes_moved(const bench_state *s, const spec *r) {
  const double n = (double)r->n, d = (double)r->d;
  const double tsize = (double)clembed_dtype_row_bytes(r->tdt, r->d), osize = (double)clembed_dtype_row_bytes(r->odt, r->d);
  const double touched = (double)s->unique;
  switch (r->op) {
  case OP_LOOKUP:
  case OP_LATENCY:
  case OP_EMBED_SINUSOID: return n * 4 + n * tsize + n * osize;
  case OP_EMBED_LEARNED: return n * 4 + n * tsize + n * d * 4 + n * osize;
  case OP_POSITIONAL: return n * osize;
  case OP_ROPE_CACHE: return (double)r->V * osize;
  case OP_ROPE_APPLY: return n * tsize + n * osize;
  case OP_BACKWARD:
  case OP_BACKWARD_ATOMIC: return n * 4 + n * d * 4 + 2 * touched * d * 4;
  case OP_SGD: return n * 4 + n * d * 4 + 2 * touched * tsize;
  case OP_OPTIM: {
    double state = r->optim == CLEMBED_ADAGRAD ? d * 4 : r->optim == CLEMBED_ROWWISE_ADAGRAD ? 4 :
                   r->optim == CLEMBED_ADAM ? 2 * d * 4 : 0;
    return n * 4 + n * d * 4 + 2 * touched * (tsize + state);
  }
  case OP_INIT_NORMAL:
  case OP_INIT_UNIFORM: return (double)r->V * tsize;
  /* BERT: the learned row's bytes as above, and the segment ids; the backward: ids and segment
   * ids, the gradient and the recomputed rows read, the touched rows of every gradient */
  case OP_BERT: return n * 8 + n * tsize + n * d * 4 + n * osize;
  case OP_BERT_BACKWARD: return n * 8 + n * d * 4 + n * tsize + n * d * 4 + 2 * (touched + (double)r->seq + 4) * d * 4;
  case OP_BAG_SUM:
  case OP_BAG_MEAN:
  case OP_BAGS: { /* every feature reads its offsets */
    const double features = r->op == OP_BAGS ? BAGS_FEATURES : 1, bags = n / (double)r->seq / features;
    return n * 4 + features * (bags + 1) * 4 + n * tsize + features * bags * osize;
  }
  case OP_BAG_STEP: {
    const double bags = n / (double)r->seq, state = r->optim == CLEMBED_ADAGRAD ? d * 4 :
                        r->optim == CLEMBED_ROWWISE_ADAGRAD ? 4 : r->optim == CLEMBED_ADAM ? 2 * d * 4 : 0;
    return n * 4 + (bags + 1) * 4 + bags * d * 4 + 2 * touched * (tsize + state);
  }
  }
  return 0;
}

/* The row's work by hand in C (NULL: none, with the reason in err). */
static ceiling *row_ceiling(const bench_state *s, const spec *r, char *err, size_t errlen) {
  ceiling_desc d;
  memset(&d, 0, sizeof d);
  d.table_dtype = r->tdt;
  d.out_dtype = r->odt;
  d.rows = r->V;
  d.cols = r->d;
  d.n = r->n;
  d.ids = s->host_ids;
  d.scale = 1.0f;
  switch (r->op) {
  case OP_LOOKUP: d.kind = CEILING_GATHER; break;
  case OP_BERT: /* the layer: the gather with positions, the segment row and LayerNorm (weight, bias) */
    d.layer_norm = 1;
    /* fall through */
  case OP_EMBED_SINUSOID:
  case OP_EMBED_LEARNED: /* the sinusoid as the library reads it: a cached position table */
    d.kind = CEILING_GATHER;
    d.positions = 1;
    d.seq = r->seq;
    d.scale = s->eopt.scale;
    break;
  case OP_BERT_BACKWARD: /* the layer's backward: its rows, its columns' sums, the fold of dx into dW */
    d.kind = CEILING_LAYER_BACKWARD;
    d.positions = 1;
    d.seq = r->seq;
    d.scale = s->eopt.scale;
    break;
  case OP_ROPE_APPLY:
    d.kind = CEILING_ROPE;
    d.head_dim = 128;
    break;
  case OP_BACKWARD:
  case OP_BACKWARD_ATOMIC:
    d.kind = CEILING_FOLD;
    d.store = CEILING_ACCUMULATE;
    d.table_dtype = CLEMBED_F32; /* the dense gradient */
    break;
  case OP_SGD:
    d.kind = CEILING_FOLD;
    d.store = CEILING_SGD;
    break;
  case OP_BAG_STEP: /* SUM: each id's gradient row is its bag's (bags of r->seq ids), then as OP_OPTIM */
    d.grad_seq = r->seq;
    /* fall through */
  case OP_OPTIM: {
    const ceiling_store stores[4] = {CEILING_SGD, CEILING_ADAGRAD, CEILING_ROWWISE_ADAGRAD, CEILING_ADAM};
    d.kind = CEILING_FOLD;
    d.store = stores[r->optim];
    break;
  }
  case OP_BAG_SUM:
  case OP_BAG_MEAN:
  case OP_BAGS: /* every feature's bags of r->seq ids, the offsets those of the bench (one bag every seq ids) */
    d.kind = CEILING_BAG;
    d.seq = r->seq;
    d.features = r->op == OP_BAGS ? BAGS_FEATURES : 1;
    d.mean = r->op == OP_BAG_MEAN;
    break;
  default: snprintf(err, errlen, "no ceiling"); return NULL;
  }
  return ceiling_create(&d, err, errlen);
}

typedef struct result {
  double op_ms, bytes, gbs, ratio;
  double copy_gbs, copy_ms; /* the reference copy's median rate and time (latency rows: a copy kernel's round trip) */
  double ceil_ms, ceil_gbs, ceil_ratio; /* the C ceiling (0: none) */
  double alt_ms, alt_speedup;           /* --against: the other tuning's time, and its speed over the default's */
  double alt_low;                       /* ...and that speed's lower quartile over the rounds */
  double one_ms, one_ratio; /* a split row: the table in one buffer's time, and the split's speed over it (0: none) */
  int latency;              /* ratio is op time / round-trip time */
} result;

#define LATENCY_PAIRS 40 /* pairs per requested pair for the latency row */

/* Runs r on s and waits: 0, or -1 with err (what names the state). */
static int run_wait(bench_state *s, const spec *r, const char *what, char *err, size_t errlen) {
  clembed_status st = run_op(s, r);
  if (st == CLEMBED_OK) st = clembed_finish(s->ctx);
  if (st == CLEMBED_OK) return 0;
  snprintf(err, errlen, "%s%s: %s", what, clembed_status_string(st), clembed_context_message(s->ctx));
  return -1;
}

/* Times the operation, the reference copy and (when given) the C ceiling, the
 * other tuning's context (alt) and the table in one buffer (one) alternately,
 * with alt or one each context's run after an untimed copy of its own (so no
 * run finds the rows of the run before it in the caches, and every run finds
 * them as a copy leaves them); returns 0 and fills res.
 * A latency row times a 16-byte copy kernel instead. */
static int measure(bench_state *s, bench_state *alt, bench_state *one, reference *ref, const spec *r, ceiling *ceil,
                   double bytes, int reps, result *res, char *err, size_t errlen) {
  const int latency = r->op == OP_LATENCY;
  int kind = latency ? COPY_KERNEL : ref->kind;
  size_t cbytes = latency ? 16 : reference_bytes(ref, bytes);
  if (!latency && reference_prepare(ref, bytes, err, errlen)) return -1;
  /* a round trip is tens of microseconds, at the mercy of thread wake-ups:
   * many more pairs for a stable median, at little cost */
  if (latency) reps *= LATENCY_PAIRS;
  double *v = calloc((size_t)reps * 9, sizeof *v);
  double *ratios = v, *times = v + reps, *copies = v + 2 * reps, *ctimes = v + 3 * reps, *cratios = v + 4 * reps;
  double *atimes = v + 5 * reps, *aspeed = v + 6 * reps, *otimes = v + 7 * reps, *oratio = v + 8 * reps;
  int rc = 0;
  if (!v) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (int w = 0; w < 2; w++) { /* warm-up: builds kernels, touches buffers */
    clembed_status st = run_op(s, r);
    if (st == CLEMBED_OK) st = clembed_finish(s->ctx);
    if (st != CLEMBED_OK || reference_copy(ref, kind, cbytes)) {
      snprintf(err, errlen, "%s: %s", clembed_status_string(st), clembed_context_message(s->ctx));
      rc = -1;
      goto done;
    }
    if (ceil) ceiling_run(ceil, pool_run, &ref->pool);
    if ((alt && run_wait(alt, r, "--against: ", err, errlen)) ||
        (one && run_wait(one, r, "the table in one buffer: ", err, errlen))) {
      rc = -1;
      goto done;
    }
  }
  for (int i = 0; i < reps; i++) {
    /* with other contexts, the operation's run after an untimed copy too, as theirs are: each run
     * finds the caches as a copy leaves them (the dirty lines of a copy past the caches slowed the
     * run after it, and a small row's other contexts came out slower than the same shapes) */
    if ((alt || one) && reference_copy(ref, kind, cbytes)) {
      snprintf(err, errlen, "the reference copy failed");
      rc = -1;
      goto done;
    }
    double t0 = now();
    clembed_status st = run_op(s, r);
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
    if (ceil) {
      double t3 = now();
      ceiling_run(ceil, pool_run, &ref->pool);
      ctimes[i] = now() - t3;
      cratios[i] = ctimes[i] / times[i]; /* the same bytes: operation rate / ceiling rate */
    }
    /* the other contexts' runs each after a copy too (untimed), as the operation's is: none finds
     * the rows the run before it left in the caches */
    if ((alt || one) && reference_copy(ref, kind, cbytes)) {
      snprintf(err, errlen, "the reference copy failed");
      rc = -1;
      goto done;
    }
    if (alt) {
      double t4 = now();
      if (run_wait(alt, r, "--against: ", err, errlen)) {
        rc = -1;
        goto done;
      }
      atimes[i] = now() - t4;
      aspeed[i] = times[i] / atimes[i]; /* the other tuning's rate / the default's */
    }
    if (one && alt && reference_copy(ref, kind, cbytes)) {
      snprintf(err, errlen, "the reference copy failed");
      rc = -1;
      goto done;
    }
    if (one) {
      double t5 = now();
      if (run_wait(one, r, "the table in one buffer: ", err, errlen)) {
        rc = -1;
        goto done;
      }
      otimes[i] = now() - t5;
      oratio[i] = otimes[i] / times[i]; /* the split's rate / one buffer's */
    }
  }
  res->op_ms = 1e3 * median(times, reps);
  res->bytes = bytes;
  res->gbs = bytes / (res->op_ms * 1e-3) / 1e9;
  res->ratio = median(ratios, reps);
  res->copy_ms = 1e3 * median(copies, reps);
  res->copy_gbs = 2.0 * (double)cbytes / (res->copy_ms * 1e-3) / 1e9;
  res->latency = latency;
  if (ceil) {
    res->ceil_ms = 1e3 * median(ctimes, reps);
    res->ceil_gbs = bytes / (res->ceil_ms * 1e-3) / 1e9;
    res->ceil_ratio = median(cratios, reps);
  }
  if (alt) {
    res->alt_ms = 1e3 * median(atimes, reps);
    res->alt_speedup = median(aspeed, reps);
    res->alt_low = lower_quartile(aspeed, reps);
  }
  if (one) {
    res->one_ms = 1e3 * median(otimes, reps);
    res->one_ratio = median(oratio, reps);
  }
done:
  free(v);
  return rc;
}

static const char *dtype_name(clembed_dtype t) { return clembed_dtype_name(t); }

const char *bench_json_text(const char *s, char *buf, size_t cap) {
  size_t o = 0;
  for (; *s && o + 7 < cap; s++) {
    if (*s == '"' || *s == '\\') buf[o++] = '\\', buf[o++] = *s;
    else if ((unsigned char)*s < 0x20) o += (size_t)snprintf(buf + o, cap - o, "\\u%04x", (unsigned char)*s);
    else buf[o++] = *s;
  }
  buf[o] = 0;
  return buf;
}

static void print_row(const spec *r, const result *res, int json, int with_ceiling, int with_alt) {
  if (json) {
    printf("{\"operation\": \"%s\", \"kind\": \"%s\", \"table_dtype\": \"%s\", \"out_dtype\": \"%s\", "
           "\"V\": %zu, \"d\": %zu, \"n\": %zu, \"seq\": %zu, \"sequential\": %d, \"median_ms\": %.4f, "
           "\"bytes\": %.0f, \"gb_per_s\": %.3f",
           r->name, op_names[r->op], dtype_name(r->tdt), dtype_name(r->odt), r->V, r->d, r->n, r->seq, r->sequential,
           res->op_ms, res->bytes, res->gbs);
    if (res->latency) printf(", \"round_trip_ms\": %.4f, \"round_trips\": %.3f}\n", res->copy_ms, res->ratio);
    else {
      printf(", \"copy_gb_per_s\": %.3f, \"copy_ratio\": %.3f", res->copy_gbs, res->ratio);
      if (res->ceil_ms > 0)
        printf(", \"ceiling_ms\": %.4f, \"ceiling_gb_per_s\": %.3f, \"ceiling_ratio\": %.3f", res->ceil_ms, res->ceil_gbs,
               res->ceil_ratio);
      if (res->alt_ms > 0) printf(", \"against_ms\": %.4f, \"against_speedup\": %.3f", res->alt_ms, res->alt_speedup);
      if (res->one_ms > 0)
        printf(", \"one_buffer_ms\": %.4f, \"vs_one_buffer\": %.3f", res->one_ms, res->one_ratio);
      printf("}\n");
    }
    return;
  }
  if (res->latency) { /* the copy column makes no sense for a 16-byte copy */
    printf("%-52s %9.3f %9.1f %7.2f %9s %6.2f trips\n", r->name, res->op_ms, res->bytes / 1e6, res->gbs, "-", res->ratio);
    return;
  }
  printf("%-52s %9.3f %9.1f %7.2f %9.2f %6.2fx", r->name, res->op_ms, res->bytes / 1e6, res->gbs, res->copy_gbs,
         res->ratio);
  if (with_ceiling && res->ceil_ms > 0) printf(" %8.2f %6.2fx", res->ceil_gbs, res->ceil_ratio);
  else if (with_ceiling) printf(" %8s %7s", "-", "-");
  if (with_alt) printf(" %9.3f %8.2fx", res->alt_ms, res->alt_speedup);
  if (res->one_ms > 0) printf("  (one buffer %.3f ms: split %.2fx)", res->one_ms, res->one_ratio);
  printf("\n");
}

/* Sets an environment variable (value NULL: unsets it) and returns its old
 * value (NULL: unset), to give back to env_restore. */
static char *env_swap(const char *name, const char *value) {
  const char *old = getenv(name);
  char *saved = old ? strdup(old) : NULL;
  if (value) setenv(name, value, 1);
  else unsetenv(name);
  return saved;
}
static void env_restore(const char *name, char *saved) {
  if (saved) setenv(name, saved, 1);
  else unsetenv(name);
  free(saved);
}

/* The state of a row whose table lies in `pieces` buffers: a context of its
 * own, made with CLEMBED_MAX_BUFFER_BYTES at the table's rows divided over the
 * pieces (and CLEMBED_TUNE=tune for --against's), remade when a row needs
 * another limit. 0, or -1 with err. */
static int split_state(bench_state *s, size_t *limit, const spec *r, int pieces, const char *device,
                       const char *tune, char *err, size_t errlen) {
  size_t row = clembed_dtype_row_bytes(r->tdt, r->d), want = (r->V + (size_t)pieces - 1) / (size_t)pieces * row;
  if (s->ctx && *limit == want) return 0;
  state_release(s);
  clembed_context_destroy(s->ctx);
  memset(s, 0, sizeof *s);
  char value[32];
  snprintf(value, sizeof value, "%zu", want);
  char *saved_limit = env_swap("CLEMBED_MAX_BUFFER_BYTES", value);
  char *saved_tune = tune ? env_swap("CLEMBED_TUNE", tune) : NULL;
  clembed_status st = clembed_context_create(device, &s->ctx);
  env_restore("CLEMBED_MAX_BUFFER_BYTES", saved_limit);
  if (tune) env_restore("CLEMBED_TUNE", saved_tune);
  if (st != CLEMBED_OK) {
    snprintf(err, errlen, "a context with CLEMBED_MAX_BUFFER_BYTES=%s: %s", value, clembed_last_error_message());
    return -1;
  }
  *limit = want;
  return 0;
}

/* Whether a row is measured: --only's text (NULL: every row) is in its name. */
static int wanted(const char *only, const char *name) { return !only || strstr(name, only) != NULL; }


/* ------------------------------------------------- for the tuner (tune.c) */

struct bench_run {
  bench_state s;
  spec r;
  int alias; /* another run's state on another context: its matrices are not this run's */
};

struct bench_ref {
  reference r;
};

size_t bench_row_count(void) { return ROW_COUNT; }
const char *bench_row_name(size_t k) { return k < ROW_COUNT ? rows_table[k].name : NULL; }

bench_run *bench_run_open(clembed_context *ctx, size_t k, size_t shrink, clembed_status *st) {
  bench_run *b = calloc(1, sizeof *b);
  if (!b) {
    *st = CLEMBED_ERR_OUT_OF_MEMORY;
    return NULL;
  }
  b->s.ctx = ctx;
  b->r = rows_table[k];
  if (shrink > 1) { /* the same shapes but V and n: a table and a call of 1/shrink (whole bags and sequences) */
    size_t unit = b->r.op == OP_BAGS ? BAGS_FEATURES * b->r.seq : b->r.seq ? b->r.seq : 1;
    if (b->r.V > shrink * 64) b->r.V /= shrink;
    if (b->r.n > shrink * unit) b->r.n = b->r.n / shrink / unit * unit;
  }
  *st = state_prepare(&b->s, &b->r);
  if (*st != CLEMBED_OK) {
    bench_run_close(b);
    return NULL;
  }
  return b;
}

bench_run *bench_run_alias(const bench_run *from, clembed_context *ctx) {
  bench_run *b = malloc(sizeof *b);
  if (!b) return NULL;
  *b = *from;
  b->s.ctx = ctx;
  b->alias = 1;
  return b;
}

void bench_run_close(bench_run *b) {
  if (!b) return;
  if (!b->alias) state_release(&b->s);
  free(b);
}

clembed_status bench_run_once(bench_run *b) {
  clembed_status st = run_op(&b->s, &b->r);
  return st == CLEMBED_OK ? clembed_finish(b->s.ctx) : st;
}

/* Appends matrix m's bytes as stored (its own dtype) to *buf. */
static clembed_status append_matrix(clembed_context *ctx, const clembed_matrix *m, unsigned char **buf, size_t *n) {
  if (!m->buffer) return CLEMBED_OK;
  size_t bytes = m->rows * clembed_dtype_row_bytes(m->dtype, m->cols);
  unsigned char *more = realloc(*buf, *n + bytes + 1);
  if (!more) return CLEMBED_ERR_OUT_OF_MEMORY;
  *buf = more;
  clembed_status st = clembed_matrix_read(ctx, m, more + *n, m->dtype);
  *n += bytes;
  return st;
}

clembed_status bench_run_result(bench_run *b, unsigned char **bytes, size_t *n) {
  bench_state *s = &b->s;
  const op_kind op = b->r.op;
  const int writes_table = op == OP_SGD || op == OP_OPTIM || op == OP_INIT_NORMAL || op == OP_INIT_UNIFORM ||
                           op == OP_BAG_STEP;
  const clembed_matrix *m[] = {&s->out, writes_table ? &s->table : &s->ptable, &s->dW, &s->s1, &s->s2,
                               &s->gP, &s->gS, &s->gw, &s->gb};
  clembed_status st = CLEMBED_OK;
  *bytes = NULL;
  *n = 0;
  for (size_t i = 0; i < sizeof m / sizeof m[0] && st == CLEMBED_OK; i++)
    if (i != 1 || writes_table) st = append_matrix(s->ctx, m[i], bytes, n);
  return st;
}

bench_ref *bench_ref_open(clembed_context *ctx, int reps, char *err, size_t errlen) {
  bench_ref *r = calloc(1, sizeof *r);
  if (!r) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  if (reference_init(ctx, &r->r, reps < 11 ? 11 : reps, 0, err, errlen)) {
    bench_ref_close(r);
    return NULL;
  }
  return r;
}

void bench_ref_close(bench_ref *r) {
  if (!r) return;
  reference_release(&r->r);
  free(r);
}

int bench_time(bench_run *b, bench_run *alt, bench_ref *ref, int reps, bench_timing *t, char *err, size_t errlen) {
  result res;
  memset(&res, 0, sizeof res);
  int rc = measure(&b->s, alt ? &alt->s : NULL, NULL, &ref->r, &b->r, NULL, row_bytes_moved(&b->s, &b->r), reps,
                   &res, err, errlen);
  t->ms = res.op_ms;
  t->ratio = res.ratio;
  t->alt_ms = res.alt_ms;
  t->alt_speedup = res.alt_speedup;
  t->alt_low = res.alt_low;
  return rc;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: clembed bench [--quick] [--json] [--reps N] [--only TEXT] [--ceiling] [--against SETTINGS]\n"
          "                     [--list] [--device SPEC]\n"
          "  (the program clembed-bench, beside clembed, which `clembed bench` runs: clembed-bench\n"
          "  takes the same arguments)\n"
          "  Times each operation at the sizes models have (a 1 GiB f32 table, Llama 3's\n"
          "  128256 x 4096 token table in bf16, f16 and ggml's block types, a 1000000 x 128\n"
          "  recommendation table, BERT's input layer 32000 x 1024 with LayerNorm)\n"
          "  against the fastest copy the device has (a copy\n"
          "  kernel, clEnqueueCopyBuffer, and on a CPU device a memcpy and a\n"
          "  streaming-store copy over as many threads as it has compute units; each\n"
          "  copy buffer at least twice the largest cache that sysfs, CPUID or the\n"
          "  device reports, 1 GiB where none does), alternately in the same run, and\n"
          "  prints the median ratio of the rates (1.0 = copy speed). The one-token\n"
          "  row is lookup + finish latency in one-kernel round trips (lower is\n"
          "  better), over 40 times as many pairs. The rows with the table in 4\n"
          "  buffers also time it in one buffer, in the same rounds, and print the\n"
          "  split's speed over it. The largest rows need about 14 GiB\n"
          "  of memory with --ceiling, 8 GiB without.\n"
          "  --quick     3 timed rounds per row\n"
          "  --reps N    timed rounds per row (default 15; the latency row 40 times as many)\n"
          "  --only TEXT only the rows whose name contains TEXT\n"
          "  --ceiling   on a CPU device, also run each row's work written by hand in C\n"
          "              (tools/ceiling/: AVX-512, AVX2 or plain C, on huge pages) in the\n"
          "              same rounds, and print the operation's rate as a ratio to it\n"
          "  --against SETTINGS\n"
          "              also run each row on a second context made with\n"
          "              CLEMBED_TUNE=SETTINGS (e.g. \"embed_rows=4,fold_ahead=8\"), in the same\n"
          "              rounds, and print its time and its speed over the default's\n"
          "              (for tuning a device; the rows' memory twice over)\n"
          "  --list      print the rows' names and exit\n"
          "  --json      one JSON object per row, after one for the reference\n");
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--tune")) return tune_main(argc - 1, argv + 1); /* clembed tune */
  int json = 0, reps = 15, with_ceiling = 0;
  const char *device = NULL, *only = NULL, *against = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--quick")) reps = 3;
    else if (!strcmp(argv[i], "--ceiling")) with_ceiling = 1;
    else if (!strcmp(argv[i], "--against") && i + 1 < argc) against = argv[++i];
    else if (!strcmp(argv[i], "--list")) {
      for (size_t k = 0; k < ALL_ROWS; k++) printf("%s\n", row_at(k, NULL)->name);
      return 0;
    } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
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
  size_t chosen = 0;
  for (size_t k = 0; k < ALL_ROWS; k++) chosen += wanted(only, row_at(k, NULL)->name);
  if (!chosen) {
    fprintf(stderr, "clembed bench: --only '%s' names no row (clembed bench --list lists them)\n", only);
    return 1;
  }
  bench_state s, alt, split, split_alt; /* split: the rows whose table lies in several buffers */
  memset(&s, 0, sizeof s);
  memset(&alt, 0, sizeof alt);
  memset(&split, 0, sizeof split);
  memset(&split_alt, 0, sizeof split_alt);
  size_t split_limit = 0, split_alt_limit = 0;
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
  if (against) { /* the second context: CLEMBED_TUNE=against while it is made */
    const char *was = getenv("CLEMBED_TUNE");
    char *saved = was ? strdup(was) : NULL;
    setenv("CLEMBED_TUNE", against, 1);
    st = clembed_context_create(device, &alt.ctx);
    if (saved) setenv("CLEMBED_TUNE", saved, 1);
    else unsetenv("CLEMBED_TUNE");
    free(saved);
    if (st != CLEMBED_OK) {
      fprintf(stderr, "clembed bench: --against: %s: %s\n", clembed_status_string(st), clembed_last_error_message());
      clembed_context_destroy(s.ctx);
      return 1;
    }
  }
  int latency_only = 1;
  for (size_t k = 0; k < ALL_ROWS; k++)
    if (wanted(only, row_at(k, NULL)->name) && row_at(k, NULL)->op != OP_LATENCY) latency_only = 0;
  if (reference_init(s.ctx, &ref, reps < 11 ? 11 : reps, latency_only, err, sizeof err)) goto fail;
  if (with_ceiling && !ref.cpu) {
    fprintf(stderr, "clembed bench: --ceiling: %s is not a CPU device; no C ceiling is run\n",
            clembed_context_device_name(s.ctx));
    with_ceiling = 0;
  }
  {
    char names[COPY_KINDS][48];
    for (int k = 0; k < COPY_KINDS; k++) copy_name(&ref, k, names[k], sizeof names[k]);
    char tjson[2400];
    if (json) {
      printf("{\"reference\": \"%s\", \"reference_gb_per_s\": %.3f, \"copy_kernel_gb_per_s\": %.3f, "
             "\"copy_buffer_gb_per_s\": %.3f, \"memcpy_gb_per_s\": %.3f, \"streaming_copy_gb_per_s\": %.3f, "
             "\"memcpy_threads\": %d, \"cache_bytes\": %zu, \"cache_source\": \"%s\", \"sysfs_cache_bytes\": %zu, "
             "\"cpuid_cache_bytes\": %zu, \"device_cache_bytes\": %zu, \"min_copy_bytes\": %zu, "
             "\"device\": \"%s\", \"tuning\": \"%s\", \"ceiling\": \"%s\"}\n",
             names[ref.kind], ref.rate[ref.kind] / 1e9, ref.rate[COPY_KERNEL] / 1e9, ref.rate[COPY_BUFFER] / 1e9,
             ref.rate[COPY_MEMCPY] / 1e9, ref.rate[COPY_STREAM] / 1e9, ref.cpu ? ref.pool.threads : 0,
             ref.cache.bytes, ref.cache.source, ref.cache.sysfs, ref.cache.cpuid, ref.cache.device, ref.min_bytes,
             clembed_context_device_name(s.ctx), bench_json_text(clembed_context_tuning(s.ctx), tjson, sizeof tjson),
             with_ceiling ? ceiling_isa() : "");
    } else {
      printf("clembed bench on %s, %d timed rounds per row (the latency row %d)\n", clembed_context_device_name(s.ctx),
             reps, reps * LATENCY_PAIRS);
      printf("tuning: %s\n", clembed_context_tuning(s.ctx));
      printf("largest cache: %.1f MiB from %s (sysfs %.1f MiB, CPUID %.1f MiB, device %.1f MiB); every copy buffer >= "
             "%.1f MiB%s\n",
             ref.cache.bytes / 1048576.0, ref.cache.source, ref.cache.sysfs / 1048576.0, ref.cache.cpuid / 1048576.0,
             ref.cache.device / 1048576.0, ref.min_bytes / 1048576.0,
             latency_only ? " (latency rows only: no bandwidth row needs more)" : "");
      printf("reference: %s (read + written, %.1f MiB copies: copy kernel %.2f GB/s, clEnqueueCopyBuffer %.2f GB/s",
             names[ref.kind], ref.min_bytes / 1048576.0, ref.rate[COPY_KERNEL] / 1e9, ref.rate[COPY_BUFFER] / 1e9);
      if (ref.cpu) printf(", %s %.2f GB/s", names[COPY_MEMCPY], ref.rate[COPY_MEMCPY] / 1e9);
      if (ref.cpu && HAVE_STREAM_COPY) printf(", %s %.2f GB/s", names[COPY_STREAM], ref.rate[COPY_STREAM] / 1e9);
      printf(")\n");
      if (with_ceiling) printf("ceiling: each row's work by hand in C (%s, %d threads)\n", ceiling_isa(), ref.pool.threads);
      if (against) printf("tuned: a second context with CLEMBED_TUNE=%s\n", against);
      printf("%-52s %9s %9s %7s %9s %7s", "operation", "median ms", "MB moved", "GB/s", "copy GB/s", "vs copy");
      if (with_ceiling) printf(" %8s %7s", "C GB/s", "vs C");
      if (against) printf(" %9s %9s", "tuned ms", "tuned/def");
      printf("\n");
    }
  }
  fflush(stdout);
  for (size_t k = 0; k < ALL_ROWS; k++) {
    int pieces;
    const spec *r = row_at(k, &pieces);
    if (!wanted(only, r->name)) continue;
    name = r->name;
    bench_state *rs = &s;
    if (pieces) {
      if (split_state(&split, &split_limit, r, pieces, device, NULL, err, sizeof err)) goto fail;
      rs = &split;
    }
    if ((st = state_prepare(rs, r)) != CLEMBED_OK) {
      if (rs == &s) goto fail_status;
      snprintf(err, sizeof err, "%s: %s", clembed_status_string(st), clembed_context_message(rs->ctx));
      goto fail;
    }
    size_t buffers = 1;
    if (pieces && (clembed_matrix_pieces(rs->ctx, &rs->table, 0, NULL, NULL, &buffers) != CLEMBED_OK ||
                   buffers != (size_t)pieces)) {
      snprintf(err, sizeof err, "the table lies in %zu buffers, not %d", buffers, pieces);
      goto fail;
    }
    ceiling *ceil = NULL;
    char why[256];
    if (with_ceiling) ceil = row_ceiling(rs, r, why, sizeof why);
    result res;
    memset(&res, 0, sizeof res);
    bench_state *ralt = pieces ? &split_alt : &alt;
    if (against && pieces && split_state(&split_alt, &split_alt_limit, r, pieces, device, against, err, sizeof err)) {
      ceiling_destroy(ceil);
      goto fail;
    }
    if (against && (st = state_prepare(ralt, r)) != CLEMBED_OK) {
      ceiling_destroy(ceil);
      snprintf(err, sizeof err, "--against: %s: %s", clembed_status_string(st), clembed_context_message(ralt->ctx));
      goto fail;
    }
    if (pieces && (st = state_prepare(&s, r)) != CLEMBED_OK) { /* the same row on one buffer, timed beside it */
      ceiling_destroy(ceil);
      goto fail_status;
    }
    int bad = measure(rs, against ? ralt : NULL, pieces ? &s : NULL, &ref, r, ceil, row_bytes_moved(rs, r), reps, &res,
                      err, sizeof err);
    ceiling_destroy(ceil);
    if (bad) goto fail;
    print_row(r, &res, json, with_ceiling, against != NULL);
    fflush(stdout);
  }
  goto done;
fail_status:
  snprintf(err, sizeof err, "%s: %s", clembed_status_string(st), clembed_context_message(s.ctx));
fail:
  fprintf(stderr, "clembed bench: %s: %s\n", name, err);
  rc = 2;
done:
  state_release(&s);
  state_release(&alt);
  state_release(&split);
  state_release(&split_alt);
  reference_release(&ref);
  clembed_context_destroy(split.ctx);
  clembed_context_destroy(split_alt.ctx);
  clembed_context_destroy(s.ctx);
  clembed_context_destroy(alt.ctx);
  return rc;
}
