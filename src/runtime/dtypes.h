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

/* The facts of a dtype value, or NULL for a value that is none. */
static inline const ce_dtype_facts *ce_dtype_facts_of(int dtype) {
#define CE_DTYPE_FACT(ID, value, name, qk, bytes) [value] = {#ID, #name, qk, bytes},
  static const ce_dtype_facts facts[] = {CE_DTYPES(CE_DTYPE_FACT)};
#undef CE_DTYPE_FACT
  if (dtype < 0 || (size_t)dtype >= sizeof facts / sizeof facts[0] || !facts[dtype].id) return NULL;
  return &facts[dtype];
}

#endif
