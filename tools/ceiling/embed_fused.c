/* The fused forward's ceiling on an x86 CPU with AVX-512, in plain C: what
 * `clembed bench`'s row "embed sqrt + sinusoid (seq 2048)" does, written by
 * hand, against a streaming copy of 64 MiB run just before each timing.
 *
 *   gcc -O2 -march=native -pthread tools/ceiling/embed_fused.c -o /tmp/ceiling_embed_fused
 *   /tmp/ceiling_embed_fused [ROUNDS]       (default 15)
 *
 * The work is the bench's: out[i] = 32 * W[id_i] + P[i % 2048] in F32, a
 * 32000 x 1024 table, 16384 random ids, 8 sequences of 2048 sharing a
 * 2048 x 1024 position table; 2 threads, thread t taking positions
 * [1024 t, 1024 t + 1024) and, for each, the 8 sequences' tokens one after
 * another (the position row read once, then from L1); streaming stores; the
 * table row 4 tokens on asked for with `prefetcht0`, two lines a step. Rows:
 * the lookup (no P), the fused forward, and the fused forward with every
 * position 0 (its row stays in L1: what reading P costs). Bytes counted as
 * the bench counts them: ids + table rows + output (not the position rows).
 * Printed: the median over ROUNDS of the ratio to the copy, its range, and
 * the median rates of the operation and of the copy. Not built with the
 * project: a measuring aid (docs/performance.md). */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { D = 1024, L = 2048, S = 8, V = 32000, N = L * S, AHEAD = 4, MAX_ROUNDS = 101 };
enum { LOOKUP, EMBED, EMBED_P_CACHED, MODES };
static const char *const mode_names[MODES] = {"lookup", "fused forward", "fused forward, P row in L1"};
static float *table, *ptab, *out, *src, *dst;
static int32_t *ids;
static int mode, copying;
static const size_t copy_bytes = (size_t)64 << 20;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void copy_half(int t) {
  size_t n = copy_bytes / 4, lo = t ? n / 2 : 0, hi = t ? n : n / 2;
  for (size_t i = lo; i < hi; i += 16) _mm512_stream_ps(dst + i, _mm512_load_ps(src + i));
}

static void embed_half(int t) {
  const __m512 scale = _mm512_set1_ps(32.0f);
  const size_t j0 = (size_t)L / 2 * (size_t)t, j1 = j0 + L / 2, count = (j1 - j0) * S;
  size_t q = 0; /* tokens done by this thread */
  for (size_t j = j0; j < j1; j++) {
    const float *p = ptab + (mode == EMBED_P_CACHED ? 0 : j) * D;
    for (size_t b = 0; b < S; b++, q++) {
      size_t i = b * L + j;
      const float *w = table + (size_t)ids[i] * D;
      float *o = out + i * D;
      const float *next = NULL;
      if (q + AHEAD < count) {
        size_t qa = q + AHEAD;
        next = table + (size_t)ids[(qa % S) * L + j0 + qa / S] * D;
      }
      for (size_t c = 0; c < D; c += 32) {
        if (next) {
          _mm_prefetch((const char *)(next + c), _MM_HINT_T0);
          _mm_prefetch((const char *)(next + c + 16), _MM_HINT_T0);
        }
        __m512 a = _mm512_mul_ps(scale, _mm512_load_ps(w + c));
        __m512 e = _mm512_mul_ps(scale, _mm512_load_ps(w + c + 16));
        if (mode != LOOKUP) {
          a = _mm512_add_ps(a, _mm512_load_ps(p + c));
          e = _mm512_add_ps(e, _mm512_load_ps(p + c + 16));
        }
        _mm512_stream_ps(o + c, a);
        _mm512_stream_ps(o + c + 16, e);
      }
    }
  }
}

static void *worker(void *arg) {
  int t = (int)(intptr_t)arg;
  if (copying)
    copy_half(t);
  else
    embed_half(t);
  _mm_sfence();
  return NULL;
}

static double timed(int copy) {
  pthread_t th[2];
  copying = copy;
  double t0 = now();
  for (int t = 0; t < 2; t++) pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
  for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
  return now() - t0;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 15;
  if (rounds < 1 || rounds > MAX_ROUNDS) {
    fprintf(stderr, "ceiling_embed: ROUNDS must be 1 to %d\n", MAX_ROUNDS);
    return 2;
  }
  table = aligned_alloc(64, (size_t)V * D * 4);
  ptab = aligned_alloc(64, (size_t)L * D * 4);
  out = aligned_alloc(64, (size_t)N * D * 4);
  src = aligned_alloc(64, copy_bytes);
  dst = aligned_alloc(64, copy_bytes);
  ids = malloc((size_t)N * sizeof *ids);
  if (!table || !ptab || !out || !src || !dst || !ids) {
    fprintf(stderr, "ceiling_embed: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < (size_t)V * D; i++) table[i] = (float)(i % 977) * 1e-3f;
  for (size_t i = 0; i < (size_t)L * D; i++) ptab[i] = (float)(i % 331) * 1e-3f;
  memset(out, 0, (size_t)N * D * 4);
  memset(src, 1, copy_bytes);
  memset(dst, 0, copy_bytes);
  srand(3);
  for (size_t i = 0; i < N; i++) ids[i] = rand() % V;
  const double bytes = N * 4.0 + 2.0 * N * D * 4;
  for (mode = 0; mode < MODES; mode++) {
    double ratio[MAX_ROUNDS], op[MAX_ROUNDS], cp[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
      double tc = timed(1), t = timed(0);
      op[r] = bytes / t / 1e9;
      cp[r] = 2.0 * (double)copy_bytes / tc / 1e9;
      ratio[r] = op[r] / cp[r];
    }
    qsort(ratio, (size_t)rounds, sizeof(double), by_value);
    qsort(op, (size_t)rounds, sizeof(double), by_value);
    qsort(cp, (size_t)rounds, sizeof(double), by_value);
    printf("%-28s %.2f of the copy (%.2f - %.2f); %.1f GB/s, copy %.1f GB/s\n", mode_names[mode],
           ratio[rounds / 2], ratio[0], ratio[rounds - 1], op[rounds / 2], cp[rounds / 2]);
  }
  return 0;
}
