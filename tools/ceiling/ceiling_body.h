/* The ceiling's work for one instruction set, included by ceiling.c once per
 * target with CEIL_SFX (the function-name suffix) and CEIL_ISA (2 AVX-512,
 * 1 AVX2, 0 plain C vectors) defined, inside that target's pragma. Everything
 * works on v16, 16 floats (one 64-byte line of F32): AVX-512 holds it in one
 * register, AVX2 in two, plain C in what the compiler makes of it. */

#define CEIL_CAT2(a, b) a##b
#define CEIL_CAT(a, b) CEIL_CAT2(a, b)
#define CEIL_FN(name) CEIL_CAT(name, CEIL_SFX)
#define CEIL_INLINE static inline __attribute__((always_inline))

/* ------------------------------------------------------------ primitives */

CEIL_INLINE v16 CEIL_FN(splat)(float x) {
  v16 v = {x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
  return v;
}

CEIL_INLINE v16 CEIL_FN(ld_f32)(const unsigned char *p) {
  v16 v;
  memcpy(&v, p, 64);
  return v;
}

CEIL_INLINE v16 CEIL_FN(ld_bf16)(const unsigned char *p) {
  v16h h;
  memcpy(&h, p, 32);
  return (v16)(__builtin_convertvector(h, v16u) << 16);
}

CEIL_INLINE v16 CEIL_FN(ld_f16)(const unsigned char *p) {
#if CEIL_ISA == 2
  return (v16)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
#elif CEIL_ISA == 1
  __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
  __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16)));
  v16 v;
  memcpy(&v, &a, 32);
  memcpy((char *)&v + 32, &b, 32);
  return v;
#else
  v16 v;
  for (int k = 0; k < 16; k++) v[k] = ceil_half_to_float((uint16_t)(p[2 * k] | p[2 * k + 1] << 8));
  return v;
#endif
}

CEIL_INLINE float CEIL_FN(half)(const unsigned char *p) {
#if CEIL_ISA >= 1
  return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8));
#else
  return ceil_half_to_float((uint16_t)(p[0] | p[1] << 8));
#endif
}

CEIL_INLINE v16 CEIL_FN(vsqrt)(v16 x) {
#if CEIL_ISA == 2
  return (v16)_mm512_sqrt_ps((__m512)x);
#elif CEIL_ISA == 1
  __m256 a, b;
  memcpy(&a, &x, 32);
  memcpy(&b, (char *)&x + 32, 32);
  a = _mm256_sqrt_ps(a);
  b = _mm256_sqrt_ps(b);
  memcpy(&x, &a, 32);
  memcpy((char *)&x + 32, &b, 32);
  return x;
#else
  for (int k = 0; k < 16; k++) x[k] = sqrtf(x[k]);
  return x;
#endif
}

/* Stores of 16 values; `nt`: a streaming store (p aligned to the store's
 * width: the caller checks the row). */
CEIL_INLINE void CEIL_FN(st_f32)(unsigned char *p, v16 v, int nt) {
#if CEIL_ISA == 2
  if (nt) {
    _mm512_stream_ps((float *)p, (__m512)v);
    return;
  }
#elif CEIL_ISA == 1
  if (nt) {
    __m256 a, b;
    memcpy(&a, &v, 32);
    memcpy(&b, (char *)&v + 32, 32);
    _mm256_stream_ps((float *)p, a);
    _mm256_stream_ps((float *)(p + 32), b);
    return;
  }
#endif
  (void)nt;
  memcpy(p, &v, 64);
}

CEIL_INLINE void CEIL_FN(st_half32)(unsigned char *p, v16h h, int nt) {
#if CEIL_ISA == 2
  if (nt) {
    __m256i x;
    memcpy(&x, &h, 32);
    _mm256_stream_si256((__m256i *)p, x);
    return;
  }
#elif CEIL_ISA == 1
  if (nt) {
    __m128i a, b;
    memcpy(&a, &h, 16);
    memcpy(&b, (char *)&h + 16, 16);
    _mm_stream_si128((__m128i *)p, a);
    _mm_stream_si128((__m128i *)(p + 16), b);
    return;
  }
#endif
  (void)nt;
  memcpy(p, &h, 32);
}

CEIL_INLINE void CEIL_FN(st_f16)(unsigned char *p, v16 v, int nt) {
  v16h h;
#if CEIL_ISA == 2
  __m256i x = _mm512_cvtps_ph((__m512)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  memcpy(&h, &x, 32);
#elif CEIL_ISA == 1
  __m256 a, b;
  memcpy(&a, &v, 32);
  memcpy(&b, (char *)&v + 32, 32);
  __m128i x = _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m128i y = _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  memcpy(&h, &x, 16);
  memcpy((char *)&h + 16, &y, 16);
#else
  for (int k = 0; k < 16; k++) h[k] = ceil_float_to_half(v[k]);
#endif
  CEIL_FN(st_half32)(p, h, nt);
}

/* round to nearest even; a NaN stays a (quiet) NaN */
CEIL_INLINE void CEIL_FN(st_bf16)(unsigned char *p, v16 v, int nt) {
  v16u u = (v16u)v;
  v16u r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  v16u nan = (v16u)((u & 0x7FFFFFFFu) > 0x7F800000u);
  r = (nan & ((u >> 16) | 0x40u)) | (~nan & r);
  CEIL_FN(st_half32)(p, __builtin_convertvector(r, v16h), nt);
}

/* 16 bytes as floats: signed (int8) or unsigned */
CEIL_INLINE v16 CEIL_FN(cvt_i8)(v16b q) {
#if CEIL_ISA == 2
  __m128i x;
  memcpy(&x, &q, 16);
  return (v16)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x));
#elif CEIL_ISA == 1
  __m128i x;
  memcpy(&x, &q, 16);
  __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)), b = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(x, 8)));
  v16 v;
  memcpy(&v, &a, 32);
  memcpy((char *)&v + 32, &b, 32);
  return v;
#else
  return __builtin_convertvector(q, v16);
#endif
}
CEIL_INLINE v16 CEIL_FN(cvt_u8)(v16ub q) {
#if CEIL_ISA == 2
  __m128i x;
  memcpy(&x, &q, 16);
  return (v16)_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(x));
#elif CEIL_ISA == 1
  __m128i x;
  memcpy(&x, &q, 16);
  __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(x)), b = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(x, 8)));
  v16 v;
  memcpy(&v, &a, 32);
  memcpy((char *)&v + 32, &b, 32);
  return v;
#else
  return __builtin_convertvector(q, v16);
#endif
}

/* ---------------------------------------------- a row's values 16 at a time */

/* Value c (a multiple of 16) of a row, 16 values, as ggml dequantizes them. */
CEIL_INLINE v16 CEIL_FN(ld_q8_0)(const unsigned char *row, size_t c) {
  const unsigned char *b = row + (c / 32) * 34;
  v16b q;
  memcpy(&q, b + 2 + c % 32, 16);
  return CEIL_FN(cvt_i8)(q) * CEIL_FN(splat)(CEIL_FN(half)(b));
}

CEIL_INLINE v16 CEIL_FN(ld_q4_0)(const unsigned char *row, size_t c) {
  const unsigned char *b = row + (c / 32) * 18;
  v16ub q;
  memcpy(&q, b + 2, 16);
  q = c % 32 ? q >> 4 : q & 15;
  return (CEIL_FN(cvt_u8)(q) - CEIL_FN(splat)(8.0f)) * CEIL_FN(splat)(CEIL_FN(half)(b));
}

/* ggml's get_scale_min_k4 */
CEIL_INLINE void CEIL_FN(scale_min_k4)(int j, const unsigned char *q, unsigned char *d, unsigned char *m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (unsigned char)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (unsigned char)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

/* Q4_K: a block's 8 scales and mins decoded when its first 16 values are
 * loaded (col steps through a row 16 at a time from 0), into kd and km. */
CEIL_INLINE v16 CEIL_FN(ld_q4_k)(const unsigned char *row, size_t c, float *kd, float *km) {
  const unsigned char *b = row + (c / 256) * 144;
  size_t off = c % 256, j64 = off / 64, hi = (off / 32) & 1, l0 = off % 32;
  if (off == 0) {
    float d = CEIL_FN(half)(b), dmin = CEIL_FN(half)(b + 2);
    for (int j = 0; j < 8; j++) {
      unsigned char sc, m;
      CEIL_FN(scale_min_k4)(j, b + 4, &sc, &m);
      kd[j] = d * (float)sc;
      km[j] = dmin * (float)m;
    }
  }
  v16ub q;
  memcpy(&q, b + 16 + 32 * j64 + l0, 16);
  q = hi ? q >> 4 : q & 15;
  return CEIL_FN(splat)(kd[off / 32]) * CEIL_FN(cvt_u8)(q) - CEIL_FN(splat)(km[off / 32]);
}

/* FBGEMM's row-wise rows (include/clembed.h): 16 values of a row of `cols`
 * from value c (a multiple of 16), fma(q, scale, bias) as FBGEMM dequantizes */
CEIL_INLINE float CEIL_FN(f32at)(const unsigned char *p) {
  float f;
  memcpy(&f, p, 4);
  return f;
}
CEIL_INLINE v16 CEIL_FN(rw_affine)(v16 q, float s, float b) {
#if CEIL_ISA == 2
  return (v16)_mm512_fmadd_ps((__m512)q, _mm512_set1_ps(s), _mm512_set1_ps(b));
#elif CEIL_ISA == 1
  __m256 a, z, r0, r1;
  memcpy(&a, &q, 32);
  memcpy(&z, (char *)&q + 32, 32);
  r0 = _mm256_fmadd_ps(a, _mm256_set1_ps(s), _mm256_set1_ps(b));
  r1 = _mm256_fmadd_ps(z, _mm256_set1_ps(s), _mm256_set1_ps(b));
  v16 v;
  memcpy(&v, &r0, 32);
  memcpy((char *)&v + 32, &r1, 32);
  return v;
#else
  v16 v;
  for (int k = 0; k < 16; k++) v[k] = fmaf(q[k], s, b);
  return v;
#endif
}
/* 8 bytes of nibbles as 16 values, low nibble first */
CEIL_INLINE v16ub CEIL_FN(nibbles)(const unsigned char *p) {
  v16ub x;
  memcpy(&x, p, 8);
  memcpy((char *)&x + 8, p, 8);
  v16ub d = __builtin_shufflevector(x, x, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const v16ub sh = {0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4};
  return (d >> sh) & 15;
}
/* 4 bytes of 2-bit values as 16, low bits first */
CEIL_INLINE v16ub CEIL_FN(crumbs)(const unsigned char *p) {
  v16ub x = {0};
  memcpy(&x, p, 4);
  v16ub d = __builtin_shufflevector(x, x, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const v16ub sh = {0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6};
  return (d >> sh) & 3;
}
CEIL_INLINE v16 CEIL_FN(ld_i8_rowwise)(const unsigned char *row, size_t c, size_t cols) {
  v16ub q;
  memcpy(&q, row + c, 16);
  return CEIL_FN(rw_affine)(CEIL_FN(cvt_u8)(q), CEIL_FN(f32at)(row + cols), CEIL_FN(f32at)(row + cols + 4));
}
CEIL_INLINE v16 CEIL_FN(ld_i4_rowwise)(const unsigned char *row, size_t c, size_t cols) {
  return CEIL_FN(rw_affine)(CEIL_FN(cvt_u8)(CEIL_FN(nibbles)(row + c / 2)), CEIL_FN(half)(row + cols / 2),
                            CEIL_FN(half)(row + cols / 2 + 2));
}
CEIL_INLINE v16 CEIL_FN(ld_i2_rowwise)(const unsigned char *row, size_t c, size_t cols) {
  return CEIL_FN(rw_affine)(CEIL_FN(cvt_u8)(CEIL_FN(crumbs)(row + c / 4)), CEIL_FN(half)(row + cols / 4),
                            CEIL_FN(half)(row + cols / 4 + 2));
}
CEIL_INLINE v16 CEIL_FN(ld_i8_tbe)(const unsigned char *row, size_t c) {
  v16ub q;
  memcpy(&q, row + 4 + c, 16);
  return CEIL_FN(rw_affine)(CEIL_FN(cvt_u8)(q), CEIL_FN(half)(row), CEIL_FN(half)(row + 2));
}
CEIL_INLINE v16 CEIL_FN(ld_i4_tbe)(const unsigned char *row, size_t c) {
  return CEIL_FN(rw_affine)(CEIL_FN(cvt_u8)(CEIL_FN(nibbles)(row + 4 + c / 2)), CEIL_FN(half)(row),
                            CEIL_FN(half)(row + 2));
}
CEIL_INLINE v16 CEIL_FN(ld_i2_tbe)(const unsigned char *row, size_t c) {
  return CEIL_FN(rw_affine)(CEIL_FN(cvt_u8)(CEIL_FN(crumbs)(row + 4 + c / 4)), CEIL_FN(half)(row),
                            CEIL_FN(half)(row + 2));
}
/* hfp8 (4 exponent bits, bias 15) / scale: the bits rebiased, subnormal codes scaled */
CEIL_INLINE v16 CEIL_FN(ld_fp8_rowwise)(const unsigned char *row, size_t c, size_t cols) {
  v16ub q;
  memcpy(&q, row + c, 16);
  v16u u = __builtin_convertvector(q, v16u), e = (u >> 3) & 15u, m = u & 7u, s = (u & 0x80u) << 24;
  v16u nrm = s | ((e + 112u) << 23) | (m << 20);
  v16 sub = __builtin_convertvector(m, v16) * CEIL_FN(splat)(0x1p-17f);
  v16u z = (v16u)(e == 0u);
  v16 v = (v16)((z & ((v16u)sub | s)) | (~z & nrm));
  return v / CEIL_FN(splat)(CEIL_FN(f32at)(row + (cols + 3) / 4 * 4));
}

/* --------------------------------------------------------------- gather */

/* The k-th token of a thread's work: tokens in order, or, with a position
 * table shared by several sequences, each position's tokens one after
 * another (its row read once, then from L1). */
CEIL_INLINE size_t CEIL_FN(token)(const ceiling *c, size_t first, size_t k) {
  if (!c->by_position) return first + k;
  size_t seqs = c->d.n / c->d.seq;
  return (k % seqs) * c->d.seq + first + k / seqs;
}

/* One thread's tokens: with side 1 one row after another, the row `ahead`
 * tokens on asked for a line per column step; with side S > 1, S rows side
 * by side, a whole output line (a whole block of a K type) of each in turn
 * (S streams for the CPU's prefetchers, lines written whole), and where
 * ahead > 0 the next group's rows asked for the same way. */
#define CEIL_GATHER(TNAME, LOAD, ONAME, STORE)                                                                    \
  static void CEIL_CAT(CEIL_CAT(CEIL_CAT(gather_, TNAME), ONAME), CEIL_SFX)(const ceiling * c, size_t first,       \
                                                                            size_t count) {                       \
    const size_t cols = c->d.cols, rb = c->row_bytes, ob = c->out_row_bytes, ahead = c->ahead, side = c->side;   \
    const int scaled = c->d.scale != 1.0f, nt = c->stream;                                                        \
    const v16 scale = CEIL_FN(splat)(c->d.scale);                                                                 \
    /* values per step of a row: a whole output line (16, or 32 for 16 bits), a whole Q4_K block */            \
    const size_t step = c->d.table_dtype == CLEMBED_Q4_K ? 256 : ob == 2 * cols ? 32 : 16;                        \
    float kd[8], km[8]; /* Q4_K: the block's scales and mins */                                                  \
    (void)kd;                                                                                                     \
    (void)km;                                                                                                     \
    const unsigned char *w[CEIL_MAX_SIDE], *next[CEIL_MAX_SIDE];                                                  \
    unsigned char *o[CEIL_MAX_SIDE];                                                                              \
    const float *p[CEIL_MAX_SIDE];                                                                                \
    for (size_t k0 = 0; k0 < count; k0 += side) {                                                                 \
      const size_t live = count - k0 < side ? count - k0 : side;                                                  \
      for (size_t j = 0; j < live; j++) {                                                                         \
        size_t i = CEIL_FN(token)(c, first, k0 + j), ka = k0 + j + (side > 1 ? side : ahead);                     \
        w[j] = c->table + (size_t)c->ids[i] * rb;                                                                 \
        next[j] = ahead && ka < count ? c->table + (size_t)c->ids[CEIL_FN(token)(c, first, ka)] * rb : NULL;     \
        p[j] = c->pos ? c->pos + (i % c->d.seq) * cols : NULL;                                                    \
        o[j] = c->out + i * ob;                                                                                   \
      }                                                                                                           \
      /* a whole output line of each row at a time: 16 values, 32 for 16 bits */                                \
      for (size_t col0 = 0, line = 0; col0 < cols; col0 += step)                                                  \
        for (size_t j = 0; j < live; j++)                                                                         \
          for (size_t col = col0, l = line; col < col0 + step && col < cols; col += 16, l += 64) {              \
            if (next[j] && l < rb) __builtin_prefetch(next[j] + l, 0, 3);                                         \
            v16 v = LOAD(w[j], col, j);                                                                           \
            if (scaled) v *= scale;                                                                               \
            if (p[j]) v += CEIL_FN(ld_f32)((const unsigned char *)(p[j] + col));                                  \
            STORE(o[j], col, v, nt);                                                                              \
            if (j + 1 == live) line = l + 64;                                                                     \
          }                                                                                                       \
    }                                                                                                             \
  }

#define CEIL_LD_F32(w, col, j) CEIL_FN(ld_f32)((w) + 4 * (col))
#define CEIL_LD_F16(w, col, j) CEIL_FN(ld_f16)((w) + 2 * (col))
#define CEIL_LD_BF16(w, col, j) CEIL_FN(ld_bf16)((w) + 2 * (col))
#define CEIL_LD_Q8_0(w, col, j) CEIL_FN(ld_q8_0)((w), (col))
#define CEIL_LD_Q4_0(w, col, j) CEIL_FN(ld_q4_0)((w), (col))
#define CEIL_LD_Q4_K(w, col, j) CEIL_FN(ld_q4_k)((w), (col), kd, km)
#define CEIL_LD_I8_ROWWISE(w, col, j) CEIL_FN(ld_i8_rowwise)((w), (col), cols)
#define CEIL_LD_I4_ROWWISE(w, col, j) CEIL_FN(ld_i4_rowwise)((w), (col), cols)
#define CEIL_LD_I2_ROWWISE(w, col, j) CEIL_FN(ld_i2_rowwise)((w), (col), cols)
#define CEIL_LD_I8_TBE(w, col, j) CEIL_FN(ld_i8_tbe)((w), (col))
#define CEIL_LD_I4_TBE(w, col, j) CEIL_FN(ld_i4_tbe)((w), (col))
#define CEIL_LD_I2_TBE(w, col, j) CEIL_FN(ld_i2_tbe)((w), (col))
#define CEIL_LD_FP8_ROWWISE(w, col, j) CEIL_FN(ld_fp8_rowwise)((w), (col), cols)
#define CEIL_ST_F32(o, col, v, nt) CEIL_FN(st_f32)((o) + 4 * (col), (v), (nt))
#define CEIL_ST_F16(o, col, v, nt) CEIL_FN(st_f16)((o) + 2 * (col), (v), (nt))
#define CEIL_ST_BF16(o, col, v, nt) CEIL_FN(st_bf16)((o) + 2 * (col), (v), (nt))

#define CEIL_GATHER_TO(TNAME, LOAD)                \
  CEIL_GATHER(TNAME, LOAD, _f32, CEIL_ST_F32)      \
  CEIL_GATHER(TNAME, LOAD, _f16, CEIL_ST_F16)      \
  CEIL_GATHER(TNAME, LOAD, _bf16, CEIL_ST_BF16)
CEIL_GATHER_TO(f32, CEIL_LD_F32)
CEIL_GATHER_TO(f16, CEIL_LD_F16)
CEIL_GATHER_TO(bf16, CEIL_LD_BF16)
CEIL_GATHER_TO(q8_0, CEIL_LD_Q8_0)
CEIL_GATHER_TO(q4_0, CEIL_LD_Q4_0)
CEIL_GATHER_TO(q4_k, CEIL_LD_Q4_K)

/* A same-dtype 16-bit lookup (scale 1, no positions): each row's words moved
 * as they are, a NaN made quiet (the bits the conversion through float32
 * gives), a whole line (32 values) at a time, rows as the other gathers take
 * them. */
static void CEIL_FN(gather_copy16)(const ceiling *c, size_t first, size_t count) {
  const size_t rb = c->row_bytes, ahead = c->ahead, side = c->side;
  const uint16_t inf = c->d.table_dtype == CLEMBED_F16 ? 0x7C00 : 0x7F80;
  const uint16_t quiet = c->d.table_dtype == CLEMBED_F16 ? 0x0200 : 0x0040;
  typedef uint16_t v32h __attribute__((vector_size(64)));
  const unsigned char *w[CEIL_MAX_SIDE], *next[CEIL_MAX_SIDE];
  unsigned char *o[CEIL_MAX_SIDE];
  for (size_t k0 = 0; k0 < count; k0 += side) {
    const size_t live = count - k0 < side ? count - k0 : side;
    for (size_t j = 0; j < live; j++) {
      size_t i = CEIL_FN(token)(c, first, k0 + j), ka = k0 + j + (side > 1 ? side : ahead);
      w[j] = c->table + (size_t)c->ids[i] * rb;
      next[j] = ahead && ka < count ? c->table + (size_t)c->ids[CEIL_FN(token)(c, first, ka)] * rb : NULL;
      o[j] = c->out + i * rb;
    }
    for (size_t b = 0; b < rb; b += 64)
      for (size_t j = 0; j < live; j++) {
        if (next[j]) __builtin_prefetch(next[j] + b, 0, 3);
        v32h h;
        memcpy(&h, w[j] + b, 64);
        v32h nan = (v32h)((h & 0x7FFF) > inf);
        h = (nan & (h | quiet)) | (~nan & h);
        CEIL_FN(st_f32)(o[j] + b, (v16)h, c->stream);
      }
  }
}

/* The sum of a vector's 16 values. */
CEIL_INLINE float CEIL_FN(hsum)(v16 v) {
  float t = 0.0f;
  for (int k = 0; k < 16; k++) t += v[k];
  return t;
}

/* BERT's layer's first passes over a group of `live` rows (the forward's and
 * the backward's): x = scale * w + p + s of the rows side by side into the
 * scratch xs (rows xst floats apart) and into 16 partial sums each, the rows
 * in `next` (NULL: none) asked for meanwhile a line at each step; then each
 * row's mean and, from the scratch, its squared deviations: mean and rstd. */
CEIL_INLINE void CEIL_FN(layer_x)(size_t cols, size_t live, v16 scale, const unsigned char *const *w,
                                  const float *const *p, const float *const *sr, const unsigned char *const *next,
                                  float *xs, size_t xst, float *mean, float *rstd) {
  const float inv = 1.0f / (float)cols;
  v16 acc[CEIL_MAX_SIDE];
  for (size_t j = 0; j < live; j++) acc[j] = CEIL_FN(splat)(0.0f);
  for (size_t col = 0; col < cols; col += 16)
    for (size_t j = 0; j < live; j++) {
      if (next[j]) __builtin_prefetch(next[j] + 4 * col, 0, 3);
      v16 v = CEIL_FN(ld_f32)(w[j] + 4 * col) * scale + CEIL_FN(ld_f32)((const unsigned char *)(p[j] + col));
      v += CEIL_FN(ld_f32)((const unsigned char *)(sr[j] + col));
      memcpy(xs + j * xst + col, &v, 64);
      acc[j] += v;
    }
  for (size_t j = 0; j < live; j++) {
    const float m = CEIL_FN(hsum)(acc[j]) * inv;
    const v16 mv = CEIL_FN(splat)(m);
    v16 q = CEIL_FN(splat)(0.0f);
    for (size_t col = 0; col < cols; col += 16) {
      v16 dv = CEIL_FN(ld_f32)((const unsigned char *)(xs + j * xst + col)) - mv;
      q += dv * dv;
    }
    mean[j] = m;
    rstd[j] = 1.0f / sqrtf(CEIL_FN(hsum)(q) * inv + 1e-12f);
  }
}

/* BERT's layer (layer_norm), F32: the group's rows side by side (side), the
 * first pass putting each row's x = scale * w + p + s in a scratch (L1) and
 * adding it into 16 partial sums, the next group's table rows asked for
 * meanwhile (ahead); then each row's squared deviations from the scratch,
 * and the output, (x - mean) * rstd * weight + bias, the group's rows side by
 * side in streaming stores. The same operations as the library's CPU shape
 * (cl/ops/norm.cl), with 16 partial sums instead of its 32. */
static void CEIL_FN(layer)(const ceiling *c, size_t first, size_t count) {
  const size_t cols = c->d.cols, rb = c->row_bytes, ob = c->out_row_bytes, side = c->side, half = c->d.seq / 2;
  const v16 scale = CEIL_FN(splat)(c->d.scale);
  const float *seg = c->norm, *nw = c->norm + 2 * cols, *nb = c->norm + 3 * cols;
  /* the scratch's rows a line apart more than their width (not on the same cache sets) */
  static __thread float xs[CEIL_MAX_SIDE * (CEIL_LAYER_MAX_COLS + 16)] __attribute__((aligned(64)));
  const size_t xst = cols + 16;
  const unsigned char *w[CEIL_MAX_SIDE], *next[CEIL_MAX_SIDE];
  const float *p[CEIL_MAX_SIDE], *sr[CEIL_MAX_SIDE];
  unsigned char *o[CEIL_MAX_SIDE];
  float mean[CEIL_MAX_SIDE], rstd[CEIL_MAX_SIDE];
  for (size_t k0 = 0; k0 < count; k0 += side) {
    const size_t live = count - k0 < side ? count - k0 : side;
    for (size_t j = 0; j < live; j++) {
      size_t i = CEIL_FN(token)(c, first, k0 + j), ka = k0 + j + side;
      w[j] = c->table + (size_t)c->ids[i] * rb;
      next[j] = c->ahead && ka < count ? c->table + (size_t)c->ids[CEIL_FN(token)(c, first, ka)] * rb : NULL;
      p[j] = c->pos + (i % c->d.seq) * cols;
      sr[j] = seg + (i % c->d.seq >= half ? cols : 0);
      o[j] = c->out + i * ob;
    }
    CEIL_FN(layer_x)(cols, live, scale, w, p, sr, next, xs, xst, mean, rstd);
    for (size_t col = 0; col < cols; col += 16) {
      const v16 wv = CEIL_FN(ld_f32)((const unsigned char *)(nw + col));
      const v16 bv = CEIL_FN(ld_f32)((const unsigned char *)(nb + col));
      for (size_t j = 0; j < live; j++) {
        v16 x = CEIL_FN(ld_f32)((const unsigned char *)(xs + j * xst + col));
        v16 y = (x - CEIL_FN(splat)(mean[j])) * CEIL_FN(splat)(rstd[j]) * wv + bv;
        CEIL_FN(st_f32)(o[j] + 4 * col, y, c->stream);
      }
    }
  }
}

typedef void (*CEIL_FN(gather_fn))(const ceiling *c, size_t first, size_t count);
#define CEIL_GATHER_ROW(T) {CEIL_CAT(gather_##T##_f32, CEIL_SFX), CEIL_CAT(gather_##T##_f16, CEIL_SFX), \
                            CEIL_CAT(gather_##T##_bf16, CEIL_SFX)}
static const CEIL_FN(gather_fn) CEIL_FN(gathers)[6][3] = {CEIL_GATHER_ROW(f32), CEIL_GATHER_ROW(f16),
                                                           CEIL_GATHER_ROW(bf16), CEIL_GATHER_ROW(q8_0),
                                                           CEIL_GATHER_ROW(q4_0), CEIL_GATHER_ROW(q4_k)};

static void CEIL_FN(gather_part)(const ceiling *c, int index, int threads) {
  /* by position: the thread's share of the positions; else of the tokens */
  size_t total = c->by_position ? c->d.seq : c->d.n, lo = total * (size_t)index / (size_t)threads,
         hi = total * (size_t)(index + 1) / (size_t)threads;
  size_t count = c->by_position ? (hi - lo) * (c->d.n / c->d.seq) : hi - lo;
  int o = c->d.out_dtype == CLEMBED_F32 ? 0 : c->d.out_dtype == CLEMBED_F16 ? 1 : 2;
  if (c->norm) CEIL_FN(layer)(c, lo, count);
  else if (c->copy16) CEIL_FN(gather_copy16)(c, lo, count);
  else CEIL_FN(gathers)[c->tcode][o](c, lo, count);
#if CEIL_ISA >= 1
  _mm_sfence();
#endif
}

/* ------------------------------------------------------------------- bags */

/* One thread's bags [b0, b1), one feature after another (the thread's bags of
 * feature 0, then of feature 1, ...: one table read at a time, as the CPU
 * kernel's bag_by_feature order): a row at a time, its vectors added into
 * the bag's accumulators (one v16 per 16 columns), the lines of the row of
 * the id `ahead` (16) on (the next bag's or feature's past the end of one)
 * asked for between the loads, spread over them (caffe2's
 * EmbeddingLookupIdx order, faster here than rows side by side or the asks
 * in a burst: docs/performance.md); the sum (or the mean) written with
 * streaming stores. */
#define CEIL_BAG(TNAME, LOAD)                                                                                     \
  static inline __attribute__((always_inline)) void CEIL_CAT(CEIL_CAT(bag_nv_, TNAME), CEIL_SFX)(                 \
      const ceiling *c, size_t b0, size_t b1, const size_t nv) {                                                 \
    const size_t cols = c->d.cols, rb = c->row_bytes, F = c->features, seq = c->d.seq, ahead = c->ahead;         \
    const size_t nf = c->d.n / F, rf = c->d.rows / F, per_f = (b1 - b0) * seq;                                    \
    const v16 count = CEIL_FN(splat)((float)seq);                                                                 \
    v16 acc[CEIL_BAG_MAX_V];                                                                                      \
    for (size_t f = 0; f < F; f++) {                                                                              \
      /* the feature's ids of these bags, then (for the rows asked for ahead) the next feature's */              \
      const int32_t *id = c->ids + f * nf + b0 * seq, *next = f + 1 < F ? id + nf : NULL;                          \
      const unsigned char *tab = c->table + f * rf * rb, *ntab = tab + rf * rb;                                   \
      for (size_t b = b0, q = 0; b < b1; b++) {                                                                   \
        float kd[8], km[8]; /* Q4_K: the block's scales and mins */                                               \
        (void)kd;                                                                                                 \
        (void)km;                                                                                                 \
        for (size_t v = 0; v < nv; v++) acc[v] = CEIL_FN(splat)(0.0f);                                            \
        for (const size_t end = q + seq; q < end; q++) {                                                          \
          const unsigned char *w = tab + (size_t)id[q] * rb;                                                      \
          const size_t a = q + ahead;                                                                             \
          const unsigned char *p = !ahead ? NULL : a < per_f ? tab + (size_t)id[a] * rb                           \
                                   : next && a - per_f < per_f ? ntab + (size_t)next[a - per_f] * rb : NULL;      \
          /* the row ahead's lines asked for between the vectors' loads (a vector of 16 columns is at most   \
             64 bytes in every dtype here: a line each, the row's last byte's with the last) */                  \
          for (size_t v = 0; v < nv; v++) {                                                                       \
            acc[v] += LOAD(w, 16 * v, 0);                                                                         \
            if (p && 64 * v < rb) __builtin_prefetch(p + 64 * v, 0, 3);                                           \
          }                                                                                                       \
          if (p) __builtin_prefetch(p + rb - 1, 0, 3);                                                            \
        }                                                                                                         \
        unsigned char *o = c->out + b * c->out_row_bytes + f * cols * 4;                                          \
        for (size_t v = 0; v < nv; v++)                                                                           \
          CEIL_FN(st_f32)(o + 64 * v, c->d.mean ? acc[v] / count : acc[v], c->stream);                           \
      }                                                                                                           \
    }                                                                                                             \
  }                                                                                                               \
  /* the accumulators in registers for 64 and 128 columns (a constant count) */                                  \
  static void CEIL_CAT(CEIL_CAT(bag_, TNAME), CEIL_SFX)(const ceiling * c, size_t b0, size_t b1) {                \
    const size_t nv = c->d.cols / 16;                                                                             \
    if (nv == 8) CEIL_CAT(CEIL_CAT(bag_nv_, TNAME), CEIL_SFX)(c, b0, b1, 8);                                      \
    else if (nv == 4) CEIL_CAT(CEIL_CAT(bag_nv_, TNAME), CEIL_SFX)(c, b0, b1, 4);                                 \
    else CEIL_CAT(CEIL_CAT(bag_nv_, TNAME), CEIL_SFX)(c, b0, b1, nv);                                             \
  }

CEIL_BAG(f32, CEIL_LD_F32)
CEIL_BAG(f16, CEIL_LD_F16)
CEIL_BAG(bf16, CEIL_LD_BF16)
CEIL_BAG(q8_0, CEIL_LD_Q8_0)
CEIL_BAG(q4_0, CEIL_LD_Q4_0)
CEIL_BAG(q4_k, CEIL_LD_Q4_K)
CEIL_BAG(i8_rowwise, CEIL_LD_I8_ROWWISE)
CEIL_BAG(i4_rowwise, CEIL_LD_I4_ROWWISE)
CEIL_BAG(i2_rowwise, CEIL_LD_I2_ROWWISE)
CEIL_BAG(i8_tbe, CEIL_LD_I8_TBE)
CEIL_BAG(i4_tbe, CEIL_LD_I4_TBE)
CEIL_BAG(i2_tbe, CEIL_LD_I2_TBE)
CEIL_BAG(fp8_rowwise, CEIL_LD_FP8_ROWWISE)

/* by ceiling.c's bag code: F32 F16 BF16 Q8_0 Q4_0 Q4_K, then FBGEMM's seven row-wise types */
typedef void (*CEIL_FN(bag_fn))(const ceiling *c, size_t b0, size_t b1);
static const CEIL_FN(bag_fn) CEIL_FN(bag_fns)[13] = {
    CEIL_CAT(bag_f32, CEIL_SFX),        CEIL_CAT(bag_f16, CEIL_SFX),        CEIL_CAT(bag_bf16, CEIL_SFX),
    CEIL_CAT(bag_q8_0, CEIL_SFX),       CEIL_CAT(bag_q4_0, CEIL_SFX),       CEIL_CAT(bag_q4_k, CEIL_SFX),
    CEIL_CAT(bag_i8_rowwise, CEIL_SFX), CEIL_CAT(bag_i4_rowwise, CEIL_SFX), CEIL_CAT(bag_i2_rowwise, CEIL_SFX),
    CEIL_CAT(bag_i8_tbe, CEIL_SFX),     CEIL_CAT(bag_i4_tbe, CEIL_SFX),     CEIL_CAT(bag_i2_tbe, CEIL_SFX),
    CEIL_CAT(bag_fp8_rowwise, CEIL_SFX)};

static void CEIL_FN(bag_part)(const ceiling *c, int index, int threads) {
  const size_t bags = c->d.n / c->features / c->d.seq;
  CEIL_FN(bag_fns)[c->tcode](c, bags * (size_t)index / (size_t)threads, bags * (size_t)(index + 1) / (size_t)threads);
#if CEIL_ISA >= 1
  _mm_sfence();
#endif
}

/* ------------------------------------------------------------------ fold */

CEIL_INLINE v16 CEIL_FN(ld_w)(const ceiling *c, const unsigned char *w, size_t col) {
  if (c->d.table_dtype == CLEMBED_F32) return CEIL_FN(ld_f32)(w + 4 * col);
  if (c->d.table_dtype == CLEMBED_BF16) return CEIL_FN(ld_bf16)(w + 2 * col);
  return CEIL_FN(ld_f16)(w + 2 * col);
}
CEIL_INLINE void CEIL_FN(st_w)(const ceiling *c, unsigned char *w, size_t col, v16 v) {
  if (c->d.table_dtype == CLEMBED_F32) CEIL_FN(st_f32)(w + 4 * col, v, 0);
  else if (c->d.table_dtype == CLEMBED_BF16) CEIL_FN(st_bf16)(w + 2 * col, v, 0);
  else CEIL_FN(st_f16)(w + 2 * col, v, 0);
}

/* Asks for the rows that sorted position s needs: its gradient row, and where
 * a row's segment starts there, the table row and its state rows. */
CEIL_INLINE void CEIL_FN(fold_prefetch_line)(const ceiling *c, const uint32_t *keys, const uint32_t *vals, size_t s,
                                            size_t line) {
  const size_t cols = c->d.cols;
  if (4 * cols > line) __builtin_prefetch((const char *)(c->fgrad + (size_t)vals[s] * cols) + line, 0, 3);
  if (s && keys[s - 1] == keys[s]) return;
  size_t v = keys[s];
  if (line < c->row_bytes) __builtin_prefetch(c->ftab + v * c->row_bytes + line, 1, 3);
  if (c->s1 && line < 4 * c->s1_cols) __builtin_prefetch((const char *)(c->s1 + v * c->s1_cols) + line, 1, 3);
  if (c->s2 && line < 4 * cols) __builtin_prefetch((const char *)(c->s2 + v * cols) + line, 1, 3);
}

/* The segment [b, e)'s row gradient at 16 columns from col: its gradient
 * rows added in token order. */
CEIL_INLINE v16 CEIL_FN(fold16)(const ceiling *c, const uint32_t *vals, size_t b, size_t e, size_t col) {
  const size_t cols = c->d.cols;
  v16 x = CEIL_FN(ld_f32)((const unsigned char *)(c->fgrad + (size_t)vals[b] * cols + col));
  for (size_t t = b + 1; t < e; t++) x += CEIL_FN(ld_f32)((const unsigned char *)(c->fgrad + (size_t)vals[t] * cols + col));
  return x;
}

/* One thread's whole segments (those starting in its share of the sorted
 * positions), `side` segments side by side: a line of each in turn (their
 * gradient rows, table rows and state rows are that many streams for the
 * CPU's prefetchers), the rows of the next `side` positions asked for a line
 * at a time meanwhile (ahead > 0). Row-wise Adagrad first folds the group's
 * rows for their sums of squares (a pass the library makes too), then again
 * for the step. */
static void CEIL_FN(fold_part)(const ceiling *c, int index, int threads) {
  const size_t n = c->d.n, cols = c->d.cols, side = c->side;
  const uint32_t *keys = c->keys[c->sorted], *vals = c->vals[c->sorted];
  size_t lo = n * (size_t)index / (size_t)threads, hi = n * (size_t)(index + 1) / (size_t)threads;
  while (lo > 0 && lo < n && keys[lo - 1] == keys[lo]) lo++; /* whole segments: starts in [lo, hi) */
  while (hi > 0 && hi < n && keys[hi - 1] == keys[hi]) hi++;
  const v16 lr = CEIL_FN(splat)(c->lr), eps = CEIL_FN(splat)(c->eps), b1c = CEIL_FN(splat)(c->b1c),
            b2c = CEIL_FN(splat)(c->b2c), fscale = CEIL_FN(splat)(c->fscale);
  const int scaled = c->fscale != 1.0f;
  size_t sb[CEIL_MAX_SIDE], se[CEIL_MAX_SIDE];
  unsigned char *w[CEIL_MAX_SIDE];
  float *s1[CEIL_MAX_SIDE], *s2[CEIL_MAX_SIDE];
  v16 rate[CEIL_MAX_SIDE];
  for (size_t s = lo; s < hi;) {
    size_t m = 0;
    for (; m < side && s < hi; m++) {
      size_t e = s + 1;
      while (e < hi && keys[e] == keys[s]) e++;
      const size_t v = keys[s];
      sb[m] = s;
      se[m] = e;
      w[m] = c->ftab + v * c->row_bytes;
      s1[m] = c->s1 ? c->s1 + v * c->s1_cols : NULL;
      s2[m] = c->s2 ? c->s2 + v * cols : NULL;
      rate[m] = lr;
      s = e;
    }
    /* the next group's first positions, asked for during this group's step */
    const size_t pf0 = s, pf1 = c->ahead ? (s + side < n ? s + side : n) : s;
    if (c->d.store == CEILING_ROWWISE_ADAGRAD) {
      v16 sq[CEIL_MAX_SIDE];
      for (size_t j = 0; j < m; j++) sq[j] = CEIL_FN(splat)(0.0f);
      for (size_t col = 0; col < cols; col += 16)
        for (size_t j = 0; j < m; j++) {
          v16 x = CEIL_FN(fold16)(c, vals, sb[j], se[j], col);
          sq[j] += x * x;
        }
      for (size_t j = 0; j < m; j++) {
        float sum = CEIL_FN(hsum)(sq[j]);
        s1[j][0] += sum / (float)cols;
        rate[j] = CEIL_FN(splat)(c->lr / (sqrtf(s1[j][0]) + c->eps));
      }
    }
    for (size_t col = 0, line = 0; col < cols; col += 16, line += 64)
      for (size_t j = 0; j < m; j++) {
        if (pf0 + j < pf1) CEIL_FN(fold_prefetch_line)(c, keys, vals, pf0 + j, line);
        v16 x = CEIL_FN(fold16)(c, vals, sb[j], se[j], col);
        if (c->d.store == CEILING_ACCUMULATE) {
          float *dw = (float *)w[j] + col;
          v16 y = CEIL_FN(ld_f32)((const unsigned char *)dw) + (scaled ? fscale * x : x);
          memcpy(dw, &y, 64);
          continue;
        }
        v16 wv = CEIL_FN(ld_w)(c, w[j], col);
        switch (c->d.store) {
        case CEILING_SGD:
        case CEILING_ROWWISE_ADAGRAD: wv -= rate[j] * x; break;
        case CEILING_ADAGRAD: {
          v16 sv = CEIL_FN(ld_f32)((const unsigned char *)(s1[j] + col)) + x * x;
          memcpy(s1[j] + col, &sv, 64);
          wv -= lr * (x / (CEIL_FN(vsqrt)(sv) + eps));
          break;
        }
        case CEILING_ADAM: {
          v16 mm = CEIL_FN(ld_f32)((const unsigned char *)(s1[j] + col)),
              u = CEIL_FN(ld_f32)((const unsigned char *)(s2[j] + col));
          mm += (x - mm) * b1c;
          u += (x * x - u) * b2c;
          memcpy(s1[j] + col, &mm, 64);
          memcpy(s2[j] + col, &u, 64);
          wv -= lr * (mm / (CEIL_FN(vsqrt)(u) + eps));
          break;
        }
        default: break;
        }
        CEIL_FN(st_w)(c, w[j], col, wv);
      }
  }
}

/* ------------------------------------------------- BERT's layer backward */

/* The first pass of LAYER_BACKWARD: the thread's share of the positions, each
 * position's tokens (one per sequence, in ascending order) `side` at a time
 * side by side, as the library's CPU rows kernel takes them. Per token: x =
 * scale * w + p + s into a scratch with its 16 partial sums, the mean, the
 * squared deviations, then the gradient row (put aside in a second scratch)
 * for A = sum(g * weight) / cols and B = sum(g * weight * xh) / cols, then
 * dx = rstd * ((g * weight - A) - xh * B) in streaming stores and into the
 * position's sum; the token's mean, rstd, A and B into stats. The next
 * group's table and gradient rows are asked for along the first passes. At
 * each position's end its sum is added into dpos. */
static void CEIL_FN(lbwd_rows)(const ceiling *c, int index, int threads) {
  const size_t cols = c->d.cols, rb = c->row_bytes, seq = c->d.seq, nseq = c->d.n / seq, side = c->side,
               half = seq / 2;
  const size_t lo = seq * (size_t)index / (size_t)threads, hi = seq * (size_t)(index + 1) / (size_t)threads;
  const v16 scale = CEIL_FN(splat)(c->d.scale);
  const float *nw = c->norm + 2 * cols, inv = 1.0f / (float)cols;
  static __thread float xs[CEIL_MAX_SIDE * (CEIL_LAYER_MAX_COLS + 16)] __attribute__((aligned(64)));
  static __thread float gs[CEIL_MAX_SIDE * (CEIL_LAYER_MAX_COLS + 16)] __attribute__((aligned(64)));
  static __thread float pacc[CEIL_LAYER_MAX_COLS] __attribute__((aligned(64)));
  const size_t xst = cols + 16, total = (hi - lo) * nseq;
  const unsigned char *w[CEIL_MAX_SIDE], *nwr[CEIL_MAX_SIDE], *ngr[CEIL_MAX_SIDE];
  const float *g[CEIL_MAX_SIDE], *prs[CEIL_MAX_SIDE], *srs[CEIL_MAX_SIDE];
  float *dxr[CEIL_MAX_SIDE], mean[CEIL_MAX_SIDE], rstd[CEIL_MAX_SIDE], A[CEIL_MAX_SIDE], B[CEIL_MAX_SIDE];
  size_t tok[CEIL_MAX_SIDE];
  v16 acc[CEIL_MAX_SIDE], bcc[CEIL_MAX_SIDE];
  /* q counts the thread's tokens position by position: position lo + q / nseq, sequence q % nseq */
#define CEIL_LBWD_TOKEN(q) (((q) % nseq) * seq + lo + (q) / nseq)
  for (size_t q = 0; q < total;) {
    const size_t p = lo + q / nseq, s0 = q % nseq, live = nseq - s0 < side ? nseq - s0 : side;
    const float *pr = c->pos + p * cols, *sr = c->norm + (p >= half ? cols : 0);
    if (!s0) memset(pacc, 0, cols * sizeof *pacc);
    for (size_t j = 0; j < live; j++) {
      const size_t i = CEIL_LBWD_TOKEN(q + j), qa = q + live + j;
      tok[j] = i;
      w[j] = c->table + (size_t)c->ids[i] * rb;
      g[j] = c->grad + i * cols;
      dxr[j] = c->dx + i * cols;
      nwr[j] = qa < total ? c->table + (size_t)c->ids[CEIL_LBWD_TOKEN(qa)] * rb : NULL;
      ngr[j] = qa < total ? (const unsigned char *)(c->grad + CEIL_LBWD_TOKEN(qa) * cols) : NULL;
      prs[j] = pr;
      srs[j] = sr;
    }
    CEIL_FN(layer_x)(cols, live, scale, w, prs, srs, nwr, xs, xst, mean, rstd);
    for (size_t j = 0; j < live; j++) acc[j] = bcc[j] = CEIL_FN(splat)(0.0f);
    for (size_t col = 0; col < cols; col += 16) {
      const v16 wv = CEIL_FN(ld_f32)((const unsigned char *)(nw + col));
      for (size_t j = 0; j < live; j++) {
        if (ngr[j]) __builtin_prefetch(ngr[j] + 4 * col, 0, 3);
        const v16 gv = CEIL_FN(ld_f32)((const unsigned char *)(g[j] + col));
        memcpy(gs + j * xst + col, &gv, 64);
        const v16 xh = (CEIL_FN(ld_f32)((const unsigned char *)(xs + j * xst + col)) - CEIL_FN(splat)(mean[j])) *
                       CEIL_FN(splat)(rstd[j]);
        const v16 h = gv * wv;
        acc[j] += h;
        bcc[j] += h * xh;
      }
    }
    for (size_t j = 0; j < live; j++) {
      A[j] = CEIL_FN(hsum)(acc[j]) * inv;
      B[j] = CEIL_FN(hsum)(bcc[j]) * inv;
    }
    for (size_t col = 0; col < cols; col += 16) {
      const v16 wv = CEIL_FN(ld_f32)((const unsigned char *)(nw + col));
      v16 pa = CEIL_FN(ld_f32)((const unsigned char *)(pacc + col));
      for (size_t j = 0; j < live; j++) {
        const v16 xh = (CEIL_FN(ld_f32)((const unsigned char *)(xs + j * xst + col)) - CEIL_FN(splat)(mean[j])) *
                       CEIL_FN(splat)(rstd[j]);
        const v16 h = CEIL_FN(ld_f32)((const unsigned char *)(gs + j * xst + col)) * wv;
        const v16 dx = CEIL_FN(splat)(rstd[j]) * ((h - CEIL_FN(splat)(A[j])) - xh * CEIL_FN(splat)(B[j]));
        CEIL_FN(st_f32)((unsigned char *)(dxr[j] + col), dx, c->stream);
        pa += dx;
      }
      memcpy(pacc + col, &pa, 64);
    }
    for (size_t j = 0; j < live; j++) {
      float *st = c->stats + 4 * tok[j];
      st[0] = mean[j];
      st[1] = rstd[j];
      st[2] = A[j];
      st[3] = B[j];
    }
    q += live;
    if (s0 + live == nseq) { /* the position's last tokens: its sum into the gradient */
      float *dp = c->dpos + p * cols;
      for (size_t col = 0; col < cols; col += 16) {
        v16 v = CEIL_FN(ld_f32)((const unsigned char *)(dp + col)) + CEIL_FN(ld_f32)((const unsigned char *)(pacc + col));
        memcpy(dp + col, &v, 64);
      }
    }
  }
#undef CEIL_LBWD_TOKEN
#if CEIL_ISA >= 1
  _mm_sfence();
#endif
}

/* The second pass of LAYER_BACKWARD: the thread's share of the columns (whole
 * vectors of 16), every token in ascending order, x and xh recomputed from
 * its rows and stats (the table and gradient rows CEIL_LBWD_AHEAD tokens on
 * asked for a line at a time), the weight's (g * xh), the bias's (g) and the
 * token's segment row's (dx) sums kept in the thread's private rows, then
 * added into dnorm. The library's ce_norm_params. */
#define CEIL_LBWD_AHEAD 4
static void CEIL_FN(lbwd_cols)(const ceiling *c, int index, int threads) {
  const size_t cols = c->d.cols, rb = c->row_bytes, seq = c->d.seq, half = seq / 2, n = c->d.n, nv = cols / 16;
  const size_t v0 = nv * (size_t)index / (size_t)threads, v1 = nv * (size_t)(index + 1) / (size_t)threads;
  const v16 scale = CEIL_FN(splat)(c->d.scale);
  const float *nw = c->norm + 2 * cols;
  static __thread v16 sums[4 * (CEIL_LAYER_MAX_COLS / 16)]; /* the segment rows 0 and 1, weight, bias */
  v16 *ss0 = sums, *ss1 = sums + nv, *sw = sums + 2 * nv, *sb = sums + 3 * nv;
  for (size_t v = 0; v < 4 * nv; v++) sums[v] = CEIL_FN(splat)(0.0f);
  for (size_t i = 0; i < n; i++) {
    const float *st = c->stats + 4 * i, *g = c->grad + i * cols, *pr = c->pos + (i % seq) * cols;
    const int second = i % seq >= half;
    const float *sr = c->norm + (second ? cols : 0);
    v16 *ss = second ? ss1 : ss0;
    const unsigned char *w = c->table + (size_t)c->ids[i] * rb;
    const unsigned char *aw = i + CEIL_LBWD_AHEAD < n ? c->table + (size_t)c->ids[i + CEIL_LBWD_AHEAD] * rb : NULL;
    const unsigned char *ag = aw ? (const unsigned char *)(g + CEIL_LBWD_AHEAD * cols) : NULL;
    const v16 mv = CEIL_FN(splat)(st[0]), rv = CEIL_FN(splat)(st[1]), av = CEIL_FN(splat)(st[2]),
              bv = CEIL_FN(splat)(st[3]);
    for (size_t v = v0; v < v1; v++) {
      const size_t col = 16 * v;
      if (aw) {
        __builtin_prefetch(aw + 4 * col, 0, 3);
        __builtin_prefetch(ag + 4 * col, 0, 3);
      }
      const v16 gv = CEIL_FN(ld_f32)((const unsigned char *)(g + col));
      v16 x = CEIL_FN(ld_f32)(w + 4 * col) * scale + CEIL_FN(ld_f32)((const unsigned char *)(pr + col));
      x += CEIL_FN(ld_f32)((const unsigned char *)(sr + col));
      const v16 xh = (x - mv) * rv, h = gv * CEIL_FN(ld_f32)((const unsigned char *)(nw + col));
      sw[v] += gv * xh;
      sb[v] += gv;
      ss[v] += rv * ((h - av) - xh * bv);
    }
  }
  for (size_t k = 0; k < 4; k++)
    for (size_t v = v0; v < v1; v++) {
      float *o = c->dnorm + k * cols + 16 * v;
      v16 y = CEIL_FN(ld_f32)((const unsigned char *)o) + sums[k * nv + v];
      memcpy(o, &y, 64);
    }
}
#undef CEIL_LBWD_AHEAD

/* ------------------------------------------------------------------ RoPE */

static void CEIL_FN(rope_part)(const ceiling *c, int index, int threads) {
  const size_t n = c->d.n, cols = c->d.cols, hd = c->d.head_dim, half = hd / 2;
  const size_t lo = n * (size_t)index / (size_t)threads, hi = n * (size_t)(index + 1) / (size_t)threads;
  const int f16 = c->d.table_dtype == CLEMBED_F16, nt = c->stream;
  const size_t es = f16 ? 2 : 4;
  for (size_t i = lo; i < hi; i++) {
    const float *cs = c->pos + i * hd; /* half cos, then half sin */
    const unsigned char *x = c->table + i * cols * es;
    unsigned char *o = c->out + i * cols * es;
    for (size_t h = 0; h < cols; h += hd)
      for (size_t k = 0; k < half; k += 16) {
        size_t ia = (h + k) * es, ib = (h + k + half) * es;
        v16 a = f16 ? CEIL_FN(ld_f16)(x + ia) : CEIL_FN(ld_f32)(x + ia);
        v16 b = f16 ? CEIL_FN(ld_f16)(x + ib) : CEIL_FN(ld_f32)(x + ib);
        v16 co = CEIL_FN(ld_f32)((const unsigned char *)(cs + k)), si = CEIL_FN(ld_f32)((const unsigned char *)(cs + half + k));
        v16 ra = a * co - b * si, rb = b * co + a * si;
        if (f16) {
          CEIL_FN(st_f16)(o + ia, ra, nt);
          CEIL_FN(st_f16)(o + ib, rb, nt);
        } else {
          CEIL_FN(st_f32)(o + ia, ra, nt);
          CEIL_FN(st_f32)(o + ib, rb, nt);
        }
      }
  }
#if CEIL_ISA >= 1
  _mm_sfence();
#endif
}

#undef CEIL_GATHER
#undef CEIL_GATHER_TO
#undef CEIL_GATHER_ROW
#undef CEIL_LD_F32
#undef CEIL_LD_I8_ROWWISE
#undef CEIL_LD_I4_ROWWISE
#undef CEIL_LD_I2_ROWWISE
#undef CEIL_LD_I8_TBE
#undef CEIL_LD_I4_TBE
#undef CEIL_LD_I2_TBE
#undef CEIL_LD_FP8_ROWWISE
#undef CEIL_LD_F16
#undef CEIL_LD_BF16
#undef CEIL_LD_Q8_0
#undef CEIL_LD_Q4_0
#undef CEIL_LD_Q4_K
#undef CEIL_ST_F32
#undef CEIL_ST_F16
#undef CEIL_ST_BF16
#undef CEIL_FN
#undef CEIL_INLINE
