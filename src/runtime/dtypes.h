/* The dtype facts: one line per clembed_dtype, in the header's enum order:
 *   X(ID, value, name, block values, block bytes)
 * ID is the enum's spelling after CLEMBED_ (messages say it: "Q4_K"), name
 * clembed's own lower-case name (clembed_dtype_name: "q4_k"), a block the
 * values that share their scales (1 for the float types) and its bytes (the
 * element size for the float types). The block layouts are ggml's (GGUF's),
 * byte for byte: src/ops/quant.h describes each.
 *
 * Everything that needs a dtype's size or name asks this list: the public
 * clembed_dtype_* functions and the argument checks (dtypes.c, check.c), the
 * transfers, the host block code (src/ops/quant.c) and the file loader. A new
 * dtype is one line here (and its value in include/clembed.h's enum, which
 * dtypes.c checks against this list at compile time).
 *
 * A header of macros and one static inline function, with no library symbol:
 * the block code compiled alone (tests/test_quant) includes it too. */
#ifndef CLEMBED_RUNTIME_DTYPES_H
#define CLEMBED_RUNTIME_DTYPES_H

#include <stddef.h>

#define CE_DTYPES(X)                  \
  X(F32, 0, f32, 1, 4)                \
  X(F16, 1, f16, 1, 2)                \
  X(BF16, 2, bf16, 1, 2)              \
  X(Q8_0, 3, q8_0, 32, 34)            \
  X(Q4_0, 4, q4_0, 32, 18)            \
  X(Q4_K, 5, q4_k, 256, 144)          \
  X(Q6_K, 6, q6_k, 256, 210)          \
  X(Q4_1, 7, q4_1, 32, 20)            \
  X(Q5_0, 8, q5_0, 32, 22)            \
  X(Q5_1, 9, q5_1, 32, 24)            \
  X(Q2_K, 10, q2_k, 256, 84)          \
  X(Q3_K, 11, q3_k, 256, 110)         \
  X(Q5_K, 12, q5_k, 256, 176)         \
  X(IQ4_NL, 13, iq4_nl, 32, 18)       \
  X(IQ4_XS, 14, iq4_xs, 256, 136)     \
  X(IQ2_XXS, 15, iq2_xxs, 256, 66)    \
  X(IQ2_XS, 16, iq2_xs, 256, 74)      \
  X(IQ2_S, 17, iq2_s, 256, 82)        \
  X(IQ3_XXS, 18, iq3_xxs, 256, 98)    \
  X(IQ3_S, 19, iq3_s, 256, 110)       \
  X(IQ1_S, 20, iq1_s, 256, 50)        \
  X(IQ1_M, 21, iq1_m, 256, 56)        \
  X(TQ1_0, 22, tq1_0, 256, 54)        \
  X(TQ2_0, 23, tq2_0, 256, 66)        \
  X(MXFP4, 24, mxfp4, 32, 17)

/* FBGEMM's row-wise quantized types, one line each:
 *   X(ID, value, name, bits, sb, first, cols_multiple, pad)
 * a row of cols values (cols a multiple of cols_multiple) is its packed values
 * (bits each: cols * bits / 8 bytes, rounded up to a multiple of pad; value j
 * in byte j * bits / 8 at bit (j * bits) % 8) and sb bytes of scale and bias,
 * after the values or (first) before them. A row is their block: a matrix of
 * these types counts offset and ld in values, in whole rows, with ld equal to
 * cols (include/clembed.h describes every byte). The cols multiples are
 * FBGEMM's: its row-wise INT4 and INT2 operators take cols filling whole f16
 * words (4, 8), its inference TBE whole bytes (2, 4). */
#define CE_ROWWISE_DTYPES(X)                      \
  X(I8_ROWWISE, 25, i8_rowwise, 8, 8, 0, 1, 1)    \
  X(I4_ROWWISE, 26, i4_rowwise, 4, 4, 0, 4, 1)    \
  X(I2_ROWWISE, 27, i2_rowwise, 2, 4, 0, 8, 1)    \
  X(I8_TBE, 28, i8_tbe, 8, 4, 1, 1, 1)            \
  X(I4_TBE, 29, i4_tbe, 4, 4, 1, 2, 1)            \
  X(I2_TBE, 30, i2_tbe, 2, 4, 1, 4, 1)            \
  X(FP8_ROWWISE, 31, fp8_rowwise, 8, 8, 0, 1, 4)

/* CE_Q4_K = 5, CE_Q4_K_VALUES = 256, CE_Q4_K_BYTES = 144, ... */
#define CE_DTYPE_ENUM(ID, value, name, qk, bytes) CE_##ID = value, CE_##ID##_VALUES = qk, CE_##ID##_BYTES = bytes,
enum { CE_DTYPES(CE_DTYPE_ENUM) CE_DTYPE_ENUM_END };
#undef CE_DTYPE_ENUM

typedef struct ce_dtype_facts {
  const char *id;        /* "Q4_K" */
  const char *name;      /* "q4_k" */
  unsigned block_values; /* 256 (1: a float type) */
  unsigned block_bytes;  /* 144 (the element size of a float type) */
} ce_dtype_facts;

/* CE_I8_ROWWISE = 25, ... */
#define CE_ROWWISE_ENUM(ID, value, name, bits, sb, first, mult, pad) CE_##ID = value,
enum { CE_ROWWISE_DTYPES(CE_ROWWISE_ENUM) CE_ROWWISE_ENUM_END };
#undef CE_ROWWISE_ENUM

typedef struct ce_rowwise_facts {
  const char *id;   /* "I8_ROWWISE" */
  const char *name; /* "i8_rowwise" */
  unsigned bits;    /* per value: 8, 4, 2 */
  unsigned sb;      /* bytes of the row's scale and bias */
  unsigned first;   /* 1: they come before the values */
  unsigned mult;    /* cols a multiple of this */
  unsigned pad;     /* the values' bytes rounded up to a multiple of this */
} ce_rowwise_facts;

/* The facts of a row-wise dtype, or NULL for any other value. */
static inline const ce_rowwise_facts *ce_rowwise_of(int dtype) {
#define CE_ROWWISE_FACT(ID, value, name, bits, sb, first, mult, pad) [value] = {#ID, #name, bits, sb, first, mult, pad},
  static const ce_rowwise_facts facts[] = {CE_ROWWISE_DTYPES(CE_ROWWISE_FACT)};
#undef CE_ROWWISE_FACT
  if (dtype < 0 || (size_t)dtype >= sizeof facts / sizeof facts[0] || !facts[dtype].id) return NULL;
  return &facts[dtype];
}

static inline unsigned ce_rowwise_cols_multiple(const ce_rowwise_facts *r) { return r->mult; }

/* The bytes of a row's values, and of the row (cols a multiple of the above;
 * a row-wise matrix has at least one column: its rows carry a scale). */
static inline size_t ce_rowwise_value_bytes(const ce_rowwise_facts *r, size_t cols) {
  size_t v = cols / (8u / r->bits);
  return (v + r->pad - 1) / r->pad * r->pad;
}
static inline size_t ce_rowwise_row_bytes(const ce_rowwise_facts *r, size_t cols) {
  return ce_rowwise_value_bytes(r, cols) + r->sb;
}

/* The cols of a row of `bytes` bytes (FP8_ROWWISE, whose values are padded:
 * the most cols such a row holds), or 0 when no row is that long. */
static inline size_t ce_rowwise_cols_of_bytes(const ce_rowwise_facts *r, size_t bytes) {
  if (bytes <= r->sb || (bytes - r->sb) % r->pad) return 0;
  size_t cols = (bytes - r->sb) * (8u / r->bits);
  return cols % r->mult == 0 && ce_rowwise_row_bytes(r, cols) == bytes ? cols : 0;
}

/* The facts of a dtype value, or NULL for a value that is none. */
static inline const ce_dtype_facts *ce_dtype_facts_of(int dtype) {
#define CE_DTYPE_FACT(ID, value, name, qk, bytes) [value] = {#ID, #name, qk, bytes},
  static const ce_dtype_facts facts[] = {CE_DTYPES(CE_DTYPE_FACT)};
#undef CE_DTYPE_FACT
  if (dtype < 0 || (size_t)dtype >= sizeof facts / sizeof facts[0] || !facts[dtype].id) return NULL;
  return &facts[dtype];
}

#endif
