/* The ceilings (ceiling.h): set-up, the radix sort of the fold, and the
 * choice of instruction set; the per-row work is ceiling_body.h, compiled
 * once per instruction set. */
#define _DEFAULT_SOURCE
#include "ceiling.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <immintrin.h>
#define CEIL_X86 1
#else
#define CEIL_X86 0
#endif

typedef float v16 __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));
typedef int8_t v16b __attribute__((vector_size(16)));
typedef uint8_t v16ub __attribute__((vector_size(16)));

#define CEIL_MAX_THREADS 64
#define CEIL_RADIX_MAX_BITS 11
#define CEIL_MAX_SIDE 8
#define CEIL_BAG_MAX_V 64 /* BAG: at most 1024 columns */
#define CEIL_LAYER_MAX_COLS 4096

struct ceiling {
  ceiling_desc d;
  int tcode;                  /* GATHER: the table dtype's index in the gather table */
  unsigned char *table, *out; /* GATHER: table, output; FOLD: the table; ROPE: input, output */
  size_t row_bytes, out_row_bytes, table_bytes, out_bytes;
  int32_t *ids;
  float *pos;                 /* GATHER: seq x cols positions; ROPE: n x head_dim cos | sin */
  size_t pos_bytes;
  float *norm;                /* GATHER with layer_norm, LAYER_BACKWARD: segment rows 0 and 1, weight, bias */
  int by_position, stream;
  int copy16;                 /* GATHER: a same-dtype 16-bit lookup, words moved as they are */
  size_t features;            /* BAG: d.features, at least 1 */
  size_t ahead;               /* 0: nothing asked for ahead; else the next group's rows (GATHER with
                                 side 1, and BAG: the row this many ids on) */
  size_t side;                /* rows (FOLD: segments) taken side by side (1 to CEIL_MAX_SIDE) */
  /* FOLD (LAYER_BACKWARD: grad is grad_out, the fold's from dx into out, dW) */
  float *grad, *s1, *s2;
  unsigned char *ftab;        /* the rows the fold updates: table (FOLD) or out (LAYER_BACKWARD) */
  const float *fgrad;         /* the rows it folds: grad (FOLD) or dx (LAYER_BACKWARD) */
  float fscale;               /* the fold's multiplier of each row's sum (ACCUMULATE) */
  /* LAYER_BACKWARD: dx (n x cols), each token's mean, rstd, A and B, the gradients of pos and norm */
  float *dx, *stats, *dpos, *dnorm;
  size_t dx_bytes, stats_bytes;
  size_t s1_cols, grad_bytes, s1_bytes, s2_bytes;
  float lr, eps, b1c, b2c;
  uint32_t *keys[2], *vals[2];
  uint32_t *hist;             /* CEIL_MAX_THREADS x buckets */
  int passes, bits, pass, sorted;
  void (*gather)(const ceiling *, int, int);
  void (*fold)(const ceiling *, int, int);
  void (*rope)(const ceiling *, int, int);
  void (*bag)(const ceiling *, int, int);
  void (*lbwd_rows)(const ceiling *, int, int);
  void (*lbwd_cols)(const ceiling *, int, int);
};

/* IEEE binary16 <-> binary32 in plain C (the C build's f16 path) */
static float ceil_half_to_float(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 1023, u;
  if (e == 31) u = s | 0x7F800000u | m << 13;
  else if (e) u = s | (e + 112) << 23 | m << 13;
  else if (!m) u = s;
  else {
    float f = ldexpf((float)m, -24);
    memcpy(&u, &f, 4);
    u |= s;
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t ceil_float_to_half(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t s = (u >> 16) & 0x8000, a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint16_t)(s | 0x7E00 | (a >> 13 & 0x3FF));
  if (a >= 0x477FF000u) return (uint16_t)(s | 0x7C00);
  if (a < 0x38800000u) { /* subnormal or zero: round x * 2^24 to an integer */
    float x;
    memcpy(&x, &a, 4);
    return (uint16_t)(s | (uint32_t)nearbyintf(x * 0x1p24f));
  }
  uint32_t r = a - 0x38000000u;
  r = (r + 0xFFF + ((r >> 13) & 1)) >> 13;
  return (uint16_t)(s | r);
}

#if CEIL_X86
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")
#endif
#define CEIL_SFX _avx512
#define CEIL_ISA 2
#include "ceiling_body.h"
#undef CEIL_SFX
#undef CEIL_ISA
#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute push(__attribute__((target("avx2,f16c,fma"))), apply_to = function)
#else
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,f16c,fma")
#endif
#define CEIL_SFX _avx2
#define CEIL_ISA 1
#include "ceiling_body.h"
#undef CEIL_SFX
#undef CEIL_ISA
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
#define CEIL_SFX _c
#define CEIL_ISA 0
#include "ceiling_body.h"
#undef CEIL_SFX
#undef CEIL_ISA

/* The best the CPU has, or less where CLEMBED_CEILING_ISA (c, avx2, avx512)
 * asks for less. */
static int isa_level(void) {
  int best = 0, cap = 2;
  const char *want = getenv("CLEMBED_CEILING_ISA");
  if (want && !strcmp(want, "c")) cap = 0;
  else if (want && !strcmp(want, "avx2")) cap = 1;
#if CEIL_X86
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("f16c"))
    best = 2;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma"))
    best = 1;
#endif
  return best < cap ? best : cap;
}


const char *ceiling_isa(void) {
  static const char *const names[3] = {"C", "AVX2", "AVX-512"};
  return names[isa_level()];
}

/* ------------------------------------------------------------ host memory */

/* whole 2 MiB pages (the unit of a transparent huge page) */
static size_t host_rounded(size_t bytes) {
  const size_t page = (size_t)2 << 20;
  return ((bytes ? bytes : 1) + page - 1) / page * page;
}

void *ceiling_host_alloc(size_t bytes) {
#ifdef __linux__
  size_t rounded = host_rounded(bytes);
  void *m = mmap(NULL, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
  madvise(m, rounded, MADV_HUGEPAGE);
#endif
  return m;
#else
  return aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
#endif
}

void ceiling_host_free(void *p, size_t bytes) {
  if (!p) return;
#ifdef __linux__
  munmap(p, host_rounded(bytes));
#else
  (void)bytes;
  free(p);
#endif
}

static uint64_t next_random(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}
static float uniform(uint64_t *x) { return (float)((double)(next_random(x) >> 11) * 0x1p-52 - 1.0); }

/* Random contents with every value finite and normal: floats in [-1, 1), for
 * block types random bytes with their f16 scales in [2^-10, 2^-2). */
static void fill(unsigned char *p, clembed_dtype dt, size_t values, size_t cols, size_t bytes, uint64_t seed) {
  uint64_t x = seed | 1;
  if (dt == CLEMBED_F32) {
    for (size_t i = 0; i < values; i++) ((float *)p)[i] = uniform(&x);
    return;
  }
  if (dt == CLEMBED_F16 || dt == CLEMBED_BF16) {
    for (size_t i = 0; i < values; i++) {
      float f = uniform(&x);
      uint32_t u;
      memcpy(&u, &f, 4);
      ((uint16_t *)p)[i] = dt == CLEMBED_F16 ? ceil_float_to_half(f) : (uint16_t)(u >> 16);
    }
    return;
  }
  for (size_t i = 0; i < bytes; i++) p[i] = (unsigned char)(next_random(&x) >> 56);
  if (dt >= CLEMBED_I8_ROWWISE && dt <= CLEMBED_FP8_ROWWISE) { /* each row's scale and bias */
    size_t rb = clembed_dtype_row_bytes(dt, cols), rows = cols && rb ? values / cols : 0;
    int f32 = dt == CLEMBED_I8_ROWWISE || dt == CLEMBED_FP8_ROWWISE, first = dt >= CLEMBED_I8_TBE && dt <= CLEMBED_I2_TBE;
    size_t at = first ? 0 : rb - (f32 ? 8 : 4);
    for (size_t r = 0; r < rows; r++) {
      unsigned char *b = p + r * rb + at;
      if (f32) {
        float sb[2] = {ldexpf(1.0f + (float)(next_random(&x) % 1024) / 1024.0f, -10 + (int)(next_random(&x) % 8)),
                       dt == CLEMBED_FP8_ROWWISE ? 0.0f : uniform(&x)};
        if (dt == CLEMBED_FP8_ROWWISE) sb[0] = 1.0f / sb[0];
        memcpy(b, sb, 8);
      } else
        for (int k = 0; k < 2; k++) {
          uint16_t h = (uint16_t)((5 + next_random(&x) % 8) << 10 | (next_random(&x) & 0x3FF));
          b[2 * k] = (unsigned char)h;
          b[2 * k + 1] = (unsigned char)(h >> 8);
        }
    }
    return;
  }
  size_t bb = dt == CLEMBED_Q8_0 ? 34 : dt == CLEMBED_Q4_0 ? 18 : 144;
  for (size_t o = 0; o + bb <= bytes; o += bb)
    for (int k = 0; k < (dt == CLEMBED_Q4_K ? 2 : 1); k++) {
      uint16_t h = (uint16_t)((5 + next_random(&x) % 8) << 10 | (next_random(&x) & 0x3FF));
      p[o + 2 * k] = (unsigned char)h;
      p[o + 2 * k + 1] = (unsigned char)(h >> 8);
    }
}

static size_t row_bytes(clembed_dtype dt, size_t cols) {
  switch (dt) {
  case CLEMBED_F32: return 4 * cols;
  case CLEMBED_F16: case CLEMBED_BF16: return 2 * cols;
  case CLEMBED_Q8_0: return cols / 32 * 34;
  case CLEMBED_Q4_0: return cols / 32 * 18;
  case CLEMBED_Q4_K: return cols / 256 * 144;
  case CLEMBED_I8_ROWWISE: case CLEMBED_I4_ROWWISE: case CLEMBED_I2_ROWWISE: case CLEMBED_I8_TBE:
  case CLEMBED_I4_TBE: case CLEMBED_I2_TBE: case CLEMBED_FP8_ROWWISE: return clembed_dtype_row_bytes(dt, cols);
  default: return 0;
  }
}

void ceiling_destroy(ceiling *c) {
  if (!c) return;
  ceiling_host_free(c->table, c->table_bytes);
  ceiling_host_free(c->out, c->out_bytes);
  ceiling_host_free(c->pos, c->pos_bytes);
  ceiling_host_free(c->norm, c->d.cols * 16);
  ceiling_host_free(c->grad, c->grad_bytes);
  ceiling_host_free(c->s1, c->s1_bytes);
  ceiling_host_free(c->s2, c->s2_bytes);
  ceiling_host_free(c->dx, c->dx_bytes);
  ceiling_host_free(c->stats, c->stats_bytes);
  ceiling_host_free(c->dpos, c->pos_bytes);
  ceiling_host_free(c->dnorm, c->d.cols * 16);
  for (int k = 0; k < 2; k++) {
    free(c->keys[k]);
    free(c->vals[k]);
  }
  free(c->hist);
  free(c->ids);
  free(c);
}

/* The sort's arrays and digits, and the fold's grouping (FOLD, LAYER_BACKWARD);
 * 0 when memory is short. */
static int fold_setup(ceiling *c) {
  const size_t n = c->d.n;
  for (int k = 0; k < 2; k++)
    if (!(c->keys[k] = malloc((n ? n : 1) * 4)) || !(c->vals[k] = malloc((n ? n : 1) * 4))) return 0;
  int bits = 1;
  while (bits < 32 && ((size_t)1 << bits) < c->d.rows) bits++;
  c->passes = (bits + CEIL_RADIX_MAX_BITS - 1) / CEIL_RADIX_MAX_BITS;
  c->bits = (bits + c->passes - 1) / c->passes;
  if (!(c->hist = malloc((size_t)CEIL_MAX_THREADS << c->bits << 2))) return 0;
  c->fscale = c->d.kind == CEILING_LAYER_BACKWARD ? c->d.scale : 1.0f;
  /* four segments side by side; for rows of up to 1 KiB the next four
   * positions' rows asked for meanwhile (the fastest orders tried here) */
  c->side = 4;
  c->ahead = 4 * c->d.cols <= 1024;
  const char *e = getenv("CLEMBED_CEILING_AHEAD");
  if (e && atoi(e) >= 0) c->ahead = (size_t)atoi(e);
  if ((e = getenv("CLEMBED_CEILING_SIDE")) && atoi(e) >= 1 && atoi(e) <= CEIL_MAX_SIDE) c->side = (size_t)atoi(e);
  return 1;
}

#define REFUSE(...)                        \
  do {                                     \
    snprintf(err, errlen, __VA_ARGS__);    \
    ceiling_destroy(c);                    \
    return NULL;                           \
  } while (0)

ceiling *ceiling_create(const ceiling_desc *d, char *err, size_t errlen) {
  ceiling *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  c->d = *d;
  int isa = isa_level();
#if CEIL_X86
  if (isa == 2) {
    c->gather = gather_part_avx512;
    c->fold = fold_part_avx512;
    c->rope = rope_part_avx512;
    c->bag = bag_part_avx512;
    c->lbwd_rows = lbwd_rows_avx512;
    c->lbwd_cols = lbwd_cols_avx512;
  } else if (isa == 1) {
    c->gather = gather_part_avx2;
    c->fold = fold_part_avx2;
    c->rope = rope_part_avx2;
    c->bag = bag_part_avx2;
    c->lbwd_rows = lbwd_rows_avx2;
    c->lbwd_cols = lbwd_cols_avx2;
  }
#endif
  if (!c->gather) {
    c->gather = gather_part_c;
    c->fold = fold_part_c;
    c->rope = rope_part_c;
    c->bag = bag_part_c;
    c->lbwd_rows = lbwd_rows_c;
    c->lbwd_cols = lbwd_cols_c;
  }
  const size_t cols = d->cols, n = d->n;
  if (!cols || cols % 16) REFUSE("%zu columns: the ceiling takes multiples of 16", cols);
  c->row_bytes = row_bytes(d->table_dtype, cols);
  int rowwise = d->table_dtype >= CLEMBED_I8_ROWWISE && d->table_dtype <= CLEMBED_FP8_ROWWISE;
  if (!c->row_bytes || (d->table_dtype >= CLEMBED_Q8_0 && !rowwise &&
                        cols % (d->table_dtype == CLEMBED_Q4_K ? 256 : 32)))
    REFUSE("no ceiling for this table dtype and width");
  c->features = d->features ? d->features : 1;
  if (d->kind == CEILING_BAG) {
    if (d->table_dtype > CLEMBED_Q4_K && !rowwise) REFUSE("no bag ceiling for this table dtype");
    if (d->out_dtype != CLEMBED_F32) REFUSE("no bag ceiling for this output dtype");
    if (cols / 16 > CEIL_BAG_MAX_V) REFUSE("%zu columns: the bag ceiling takes at most %d", cols, 16 * CEIL_BAG_MAX_V);
    if (!d->seq || d->rows % c->features || n % (c->features * d->seq))
      REFUSE("bags need whole bags of seq ids and tables of equal rows for every feature");
    c->tcode = rowwise ? 6 + (int)(d->table_dtype - CLEMBED_I8_ROWWISE) : (int)d->table_dtype;
    c->out_row_bytes = c->features * cols * 4;
    c->table_bytes = d->rows * c->row_bytes;
    c->out_bytes = n / c->features / d->seq * c->out_row_bytes;
    /* a row at a time, the row 16 ids on asked for (docs/performance.md) */
    c->ahead = 16;
    const char *e = getenv("CLEMBED_CEILING_AHEAD");
    if (e && atoi(e) >= 0) c->ahead = (size_t)atoi(e);
  }
  if (d->kind == CEILING_GATHER || d->kind == CEILING_FOLD || d->kind == CEILING_BAG ||
      d->kind == CEILING_LAYER_BACKWARD) {
    if (!(c->ids = malloc((n ? n : 1) * sizeof *c->ids))) REFUSE("out of memory");
    memcpy(c->ids, d->ids, n * sizeof *c->ids);
    const size_t id_rows = d->kind == CEILING_BAG ? d->rows / c->features : d->rows;
    for (size_t i = 0; i < n; i++)
      if (c->ids[i] < 0 || (size_t)c->ids[i] >= id_rows) REFUSE("id %zu outside the table", i);
  }
  if (d->kind == CEILING_GATHER) {
    const int codes[7] = {0, 1, 2, 3, 4, 5, -1};
    c->tcode = d->table_dtype <= CLEMBED_Q6_K ? codes[d->table_dtype] : -1;
    if (c->tcode < 0) REFUSE("no ceiling for this table dtype");
    if (d->out_dtype > CLEMBED_BF16) REFUSE("no ceiling for this output dtype");
    c->out_row_bytes = row_bytes(d->out_dtype, cols);
    c->table_bytes = d->rows * c->row_bytes;
    c->out_bytes = n * c->out_row_bytes;
    if (d->positions) {
      if (!d->seq || n % d->seq) REFUSE("positions need whole sequences");
      c->pos_bytes = d->seq * cols * 4;
      if (!(c->pos = ceiling_host_alloc(c->pos_bytes))) REFUSE("out of memory");
      fill((unsigned char *)c->pos, CLEMBED_F32, d->seq * cols, cols, c->pos_bytes, 5);
      c->by_position = n / d->seq > 1;
    }
    if (d->layer_norm) {
      if (d->table_dtype != CLEMBED_F32 || d->out_dtype != CLEMBED_F32 || !d->positions || cols > CEIL_LAYER_MAX_COLS)
        REFUSE("the layer's ceiling takes F32 in and out, with positions, at most %d columns", CEIL_LAYER_MAX_COLS);
      if (!(c->norm = ceiling_host_alloc(cols * 16))) REFUSE("out of memory");
      fill((unsigned char *)c->norm, CLEMBED_F32, 4 * cols, cols, cols * 16, 9);
    }
    c->copy16 = (d->table_dtype == CLEMBED_F16 || d->table_dtype == CLEMBED_BF16) && d->out_dtype == d->table_dtype &&
                d->scale == 1.0f && !d->positions && c->row_bytes % 64 == 0;
    /* four rows side by side, the next four asked for while they are written:
     * the fastest of the orders tried here, for rows of 512 bytes to 16 KiB */
    c->side = 4;
    c->ahead = 1;
    const char *e = getenv("CLEMBED_CEILING_SIDE");
    if (e && atoi(e) >= 1 && atoi(e) <= CEIL_MAX_SIDE) c->side = (size_t)atoi(e);
    if ((e = getenv("CLEMBED_CEILING_AHEAD")) && atoi(e) >= 0) c->ahead = (size_t)atoi(e);
  } else if (d->kind == CEILING_BAG) {
    /* (set up above, before the ids are checked) */
  } else if (d->kind == CEILING_FOLD) {
    if (d->table_dtype > CLEMBED_BF16) REFUSE("no ceiling for this table dtype");
    c->table_bytes = d->rows * c->row_bytes;
    const size_t gs = d->grad_seq > 1 ? d->grad_seq : 1;
    c->grad_bytes = (n + gs - 1) / gs * cols * 4;
    if (!(c->grad = ceiling_host_alloc(c->grad_bytes))) REFUSE("out of memory");
    fill((unsigned char *)c->grad, CLEMBED_F32, c->grad_bytes / 4, cols, c->grad_bytes, 3);
    c->s1_cols = d->store == CEILING_ROWWISE_ADAGRAD ? 1 : cols;
    if (d->store == CEILING_ADAGRAD || d->store == CEILING_ROWWISE_ADAGRAD || d->store == CEILING_ADAM) {
      c->s1_bytes = d->rows * c->s1_cols * 4;
      if (!(c->s1 = ceiling_host_alloc(c->s1_bytes))) REFUSE("out of memory");
      memset(c->s1, 0, c->s1_bytes);
    }
    if (d->store == CEILING_ADAM) {
      c->s2_bytes = d->rows * cols * 4;
      if (!(c->s2 = ceiling_host_alloc(c->s2_bytes))) REFUSE("out of memory");
      memset(c->s2, 0, c->s2_bytes);
    }
    c->lr = d->learning_rate > 0 ? d->learning_rate : 1e-9f;
    c->eps = d->store == CEILING_ADAGRAD ? 1e-10f : 1e-8f;
    c->b1c = 0.1f;
    c->b2c = 0.001f;
    c->fgrad = c->grad;
    if (!fold_setup(c)) REFUSE("out of memory");
  } else if (d->kind == CEILING_LAYER_BACKWARD) {
    if (d->table_dtype != CLEMBED_F32 || cols > CEIL_LAYER_MAX_COLS)
      REFUSE("the layer's backward ceiling takes an F32 table of at most %d columns", CEIL_LAYER_MAX_COLS);
    if (!d->seq || n % d->seq) REFUSE("the layer's backward ceiling needs whole sequences (positions)");
    c->table_bytes = d->rows * c->row_bytes;
    c->out_row_bytes = c->row_bytes; /* out: dW */
    c->out_bytes = d->rows * c->row_bytes;
    c->pos_bytes = d->seq * cols * 4;
    c->grad_bytes = n * cols * 4;
    c->dx_bytes = n * cols * 4;
    c->stats_bytes = n * 16;
    if (!(c->pos = ceiling_host_alloc(c->pos_bytes)) || !(c->norm = ceiling_host_alloc(cols * 16)) ||
        !(c->grad = ceiling_host_alloc(c->grad_bytes)) || !(c->dx = ceiling_host_alloc(c->dx_bytes)) ||
        !(c->stats = ceiling_host_alloc(c->stats_bytes)) || !(c->dpos = ceiling_host_alloc(c->pos_bytes)) ||
        !(c->dnorm = ceiling_host_alloc(cols * 16)))
      REFUSE("out of memory");
    fill((unsigned char *)c->pos, CLEMBED_F32, d->seq * cols, cols, c->pos_bytes, 5);
    fill((unsigned char *)c->norm, CLEMBED_F32, 4 * cols, cols, cols * 16, 9);
    fill((unsigned char *)c->grad, CLEMBED_F32, n * cols, cols, c->grad_bytes, 3);
    memset(c->dpos, 0, c->pos_bytes);
    memset(c->dnorm, 0, cols * 16);
    c->d.store = CEILING_ACCUMULATE;
    c->fgrad = c->dx;
    /* side: the fold's segments and the rows' tokens side by side, 4 (the library's CPU shape takes four rows
       of 1,024 columns) */
    if (!fold_setup(c)) REFUSE("out of memory");
  } else {
    if (d->table_dtype != CLEMBED_F32 && d->table_dtype != CLEMBED_F16) REFUSE("no ceiling for this dtype");
    if (!d->head_dim || d->head_dim % 32 || cols % d->head_dim) REFUSE("head_dim must be a multiple of 32");
    c->table_bytes = n * c->row_bytes;
    c->out_bytes = n * c->row_bytes;
    c->out_row_bytes = c->row_bytes;
    c->pos_bytes = n * d->head_dim * 4;
    if (!(c->pos = ceiling_host_alloc(c->pos_bytes))) REFUSE("out of memory");
    const size_t half = d->head_dim / 2;
    for (size_t p = 0; p < n; p++)
      for (size_t k = 0; k < half; k++) {
        double a = (double)p * pow(10000.0, -2.0 * (double)k / (double)d->head_dim);
        c->pos[p * d->head_dim + k] = (float)cos(a);
        c->pos[p * d->head_dim + half + k] = (float)sin(a);
      }
  }
  if (c->table_bytes && !(c->table = ceiling_host_alloc(c->table_bytes))) REFUSE("out of memory");
  if (c->table) {
    size_t values = d->kind == CEILING_ROPE ? n * cols : d->rows * cols;
    fill(c->table, d->table_dtype, values, cols, c->table_bytes, 1);
  }
  if (c->out_bytes) {
    if (!(c->out = ceiling_host_alloc(c->out_bytes))) REFUSE("out of memory");
    memset(c->out, 0, c->out_bytes);
  }
  /* streaming stores where every output row starts on a line (LAYER_BACKWARD: dx's rows) */
  c->stream = d->kind == CEILING_LAYER_BACKWARD || (c->out && c->out_row_bytes % 64 == 0);
  if (d->kind == CEILING_FOLD) c->ftab = c->table;
  if (d->kind == CEILING_LAYER_BACKWARD) c->ftab = c->out;
  return c;
}

void ceiling_get_view(const ceiling *c, ceiling_view *v) {
  v->table = c->table;
  v->out = c->out;
  v->pos = c->pos;
  v->norm = c->norm;
  v->dpos = c->dpos;
  v->dnorm = c->dnorm;
  v->grad = c->grad;
  v->s1 = c->s1;
  v->s2 = c->s2;
  v->row_bytes = c->row_bytes;
  v->out_row_bytes = c->out_row_bytes;
  v->s1_cols = c->s1_cols;
  v->lr = c->lr;
  v->eps = c->eps;
  v->b1c = c->b1c;
  v->b2c = c->b2c;
}

/* ------------------------------------------------------- the fold's sort */

/* A stable LSD radix sort of (id, token) by id: each pass a histogram per
 * thread of its share, then a scatter at offsets ordered (digit, thread). */
static void sort_hist(void *arg, int index, int threads) {
  ceiling *c = arg;
  const size_t n = c->d.n, lo = n * (size_t)index / (size_t)threads, hi = n * (size_t)(index + 1) / (size_t)threads;
  const uint32_t *in = c->pass ? c->keys[(c->pass - 1) & 1] : (const uint32_t *)c->ids;
  const unsigned shift = (unsigned)(c->pass * c->bits), mask = (1u << c->bits) - 1;
  uint32_t *h = c->hist + ((size_t)index << c->bits);
  memset(h, 0, (size_t)4 << c->bits);
  for (size_t i = lo; i < hi; i++) h[(in[i] >> shift) & mask]++;
}

/* pass 0 reads the ids (the value: the token's gradient row, i / grad_seq,
 * in token order), pass p buffer (p - 1) % 2; pass p writes buffer p % 2 */
static void sort_scatter(void *arg, int index, int threads) {
  ceiling *c = arg;
  const size_t n = c->d.n, lo = n * (size_t)index / (size_t)threads, hi = n * (size_t)(index + 1) / (size_t)threads;
  const int p = c->pass;
  const uint32_t *kin = p ? c->keys[(p - 1) & 1] : (const uint32_t *)c->ids, *vin = p ? c->vals[(p - 1) & 1] : NULL;
  uint32_t *kout = c->keys[p & 1], *vout = c->vals[p & 1];
  const unsigned shift = (unsigned)(p * c->bits), mask = (1u << c->bits) - 1;
  const size_t buckets = (size_t)1 << c->bits, gs = c->d.grad_seq > 1 ? c->d.grad_seq : 1;
  uint32_t off[1u << CEIL_RADIX_MAX_BITS];
  uint32_t run = 0;
  for (size_t b = 0; b < buckets; b++)
    for (int t = 0; t < threads; t++) {
      if (t == index) off[b] = run;
      run += c->hist[((size_t)t << c->bits) + b];
    }
  for (size_t i = lo; i < hi; i++) {
    uint32_t k = kin[i], at = off[(k >> shift) & mask]++;
    kout[at] = k;
    vout[at] = vin ? vin[i] : (uint32_t)(i / gs);
  }
}

static void gather_run(void *arg, int index, int threads) {
  ceiling *c = arg;
  c->gather(c, index, threads);
}
static void fold_run(void *arg, int index, int threads) {
  ceiling *c = arg;
  c->fold(c, index, threads);
}
static void rope_run(void *arg, int index, int threads) {
  ceiling *c = arg;
  c->rope(c, index, threads);
}
static void bag_run(void *arg, int index, int threads) {
  ceiling *c = arg;
  c->bag(c, index, threads);
}
static void lbwd_rows_run(void *arg, int index, int threads) {
  ceiling *c = arg;
  c->lbwd_rows(c, index, threads);
}
static void lbwd_cols_run(void *arg, int index, int threads) {
  ceiling *c = arg;
  c->lbwd_cols(c, index, threads);
}

void ceiling_run(ceiling *c, ceiling_runner run, void *runner_arg) {
  if (c->d.kind == CEILING_GATHER) {
    run(runner_arg, gather_run, c);
  } else if (c->d.kind == CEILING_ROPE) {
    run(runner_arg, rope_run, c);
  } else if (c->d.kind == CEILING_BAG) {
    run(runner_arg, bag_run, c);
  } else {
    if (c->d.kind == CEILING_LAYER_BACKWARD) {
      run(runner_arg, lbwd_rows_run, c);
      run(runner_arg, lbwd_cols_run, c);
    }
    for (c->pass = 0; c->pass < c->passes; c->pass++) {
      run(runner_arg, sort_hist, c);
      run(runner_arg, sort_scatter, c);
    }
    c->sorted = (c->passes - 1) & 1;
    run(runner_arg, fold_run, c);
  }
}
