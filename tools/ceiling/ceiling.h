/* The same work as clembed's operations, written by hand in C for the host
 * CPU: the fastest we know how to write (AVX-512 where the CPU has it, AVX2
 * otherwise, plain C vectors elsewhere; host arrays on transparent huge pages,
 * as the library's own buffers are on a CPU device; each row of a table asked
 * for a few tokens ahead, a line at a time; streaming stores for outputs).
 * `clembed bench --ceiling` runs each of its rows this way too, on the same
 * sizes, alternately with the operation and the copy, and prints the
 * operation's rate as a ratio to this ceiling's beside its ratio to the copy.
 * A measuring aid for CPU devices, built into the `clembed` tool; it stands on
 * the public header only.
 *
 * Work is split over threads by a caller-provided runner (the bench's thread
 * pool): ceiling_run calls it once per phase, and the runner calls the phase's
 * function on every thread and returns when all are done. */
#ifndef CLEMBED_CEILING_H
#define CLEMBED_CEILING_H

#include "clembed.h"

#include <stddef.h>
#include <stdint.h>

typedef enum ceiling_kind {
  CEILING_GATHER, /* out[i] = scale * table[ids[i]] (+ P[i % seq]): lookup and the fused forward */
  CEILING_FOLD,   /* sort the ids, fold each row's gradient rows in token order, then store */
  CEILING_ROPE,   /* NeoX rotation of n tokens x cols (heads of head_dim) at positions 0..n-1 */
  CEILING_BAG,    /* bags of seq ids summed (or averaged) per feature: out[b][f] = sum_j table_f[ids_f[b*seq + j]],
                     a row at a time, the row 16 ids on asked for */
  CEILING_LAYER_BACKWARD /* BERT's layer's backward (the layer of GATHER with layer_norm; F32): every gradient, in
                            the library's passes: the rows (each token's stats, dx in streaming stores, the
                            position rows' sums), a walk of the columns in token order (the norm's weight and
                            bias, the segment rows), the sort of the ids and the fold of dx into dW */
} ceiling_kind;

typedef enum ceiling_store { /* what the fold does with each row's gradient g, as the library does */
  CEILING_ACCUMULATE,        /* dW[v] += g (a dense F32 gradient) */
  CEILING_SGD,               /* w -= lr * g */
  CEILING_ADAGRAD,           /* s += g*g; w -= lr * g / (sqrt(s) + eps) */
  CEILING_ROWWISE_ADAGRAD,   /* m += sum(g*g) / cols; w -= lr / (sqrt(m) + eps) * g */
  CEILING_ADAM               /* m += (g - m)(1 - b1); u += (g*g - u)(1 - b2); w -= a * m / (sqrt(u) + eps) */
} ceiling_store;

typedef struct ceiling_desc {
  ceiling_kind kind;
  clembed_dtype table_dtype; /* GATHER, BAG: F32 F16 BF16 Q8_0 Q4_0 Q4_K; FOLD: F32 F16 BF16; ROPE: F32 F16;
                                LAYER_BACKWARD: F32 */
  clembed_dtype out_dtype;   /* GATHER: F32 F16 BF16; BAG: F32 */
  size_t rows, cols, n;      /* table rows x cols; n ids (ROPE: tokens) */
  const int32_t *ids;        /* GATHER, FOLD, BAG: n ids in [0, rows) (BAG: [0, rows / features)), copied */
  float scale;               /* GATHER: the token row's multiplier (1: none) */
  size_t seq;                /* GATHER: with positions, tokens per sequence (a seq x cols F32 table);
                                LAYER_BACKWARD: the same (n a multiple of it) */
  int positions;             /* GATHER: add the position row (LAYER_BACKWARD: always) */
  int layer_norm;            /* GATHER (F32 in and out, with positions, at most 4096 columns): BERT's layer,
                                out[i] = LayerNorm(scale * table[ids[i]] + P[i % seq] + S[i % seq >= seq / 2])
                                * weight + bias, eps 1e-12 (two segment rows, as the bench's) */
  ceiling_store store;       /* FOLD */
  float learning_rate;       /* FOLD: 0 means 1e-9 (the bench's: the table stays put) */
  size_t head_dim;           /* ROPE */
  size_t features;           /* BAG: the table's rows and the ids split evenly over this many features (0: 1):
                                feature f's table is rows [f * rows/features, ...), its ids [f * n/features, ...),
                                its bags of seq ids; out is bags x (features * cols) F32, feature f's block at
                                column f * cols */
  int mean;                  /* BAG: each bag's sum divided by seq */
  size_t grad_seq;           /* FOLD: tokens per gradient row (0 or 1: a row per token); the bag step's SUM:
                                token i's gradient row is row i / grad_seq, its bag's */
} ceiling_desc;

typedef struct ceiling ceiling;
typedef void (*ceiling_part_fn)(void *arg, int index, int threads);
/* Runs fn(arg, i, threads) for every i in [0, threads) and returns when all
 * have returned. */
typedef void (*ceiling_runner)(void *runner_arg, ceiling_part_fn fn, void *arg);

/* The instruction set the ceiling runs with here: "AVX-512", "AVX2" or "C"
 * (the best the CPU has; CLEMBED_CEILING_ISA=avx2 or c asks for less). */
const char *ceiling_isa(void);
/* NULL with a reason in err when the work is not one the ceiling does (a
 * column count not a multiple of 16, a dtype it lacks) or memory is short.
 * Allocates and fills every host array (not timed). */
ceiling *ceiling_create(const ceiling_desc *d, char *err, size_t errlen);
/* One run of the work (timed by the caller). */
void ceiling_run(ceiling *c, ceiling_runner run, void *runner_arg);
void ceiling_destroy(ceiling *c); /* NULL is a no-op */

/* The host arrays a ceiling works on, for checking its results (NULL where
 * its kind has none): GATHER reads table (rows x row_bytes), pos (seq x
 * cols F32) and norm and writes out (n x out_row_bytes); BAG reads table and writes
 * out (bags x out_row_bytes); FOLD reads grad (n x cols
 * F32) and updates table (dW for ACCUMULATE), s1 (rows x s1_cols) and s2;
 * ROPE reads table (n x cols) and pos (n x head_dim: head_dim/2 cosines, then
 * the sines) and writes out. LAYER_BACKWARD reads table, pos, norm and grad
 * (grad_out, n x cols F32) as the layer's GATHER does, and accumulates into
 * out (dW, rows x cols F32: scale times the sum of each row's tokens' dx),
 * dpos and dnorm; every gradient starts at zero. The fold's eps is 1e-10 (ADAGRAD) or 1e-8,
 * 1 - beta1 0.1 and 1 - beta2 0.001; ADAM's step size is the rate. */
typedef struct ceiling_view {
  unsigned char *table, *out;
  float *pos, *grad, *s1, *s2;
  float *norm; /* GATHER with layer_norm and LAYER_BACKWARD: the segment rows 0 and 1, the weight, the bias
                  (cols each) */
  float *dpos, *dnorm; /* LAYER_BACKWARD's gradients of the position table (seq x cols) and of the segment
                          rows 0 and 1, the weight and the bias (cols each), accumulated */
  size_t row_bytes, out_row_bytes, s1_cols;
  float lr, eps, b1c, b2c;
} ceiling_view;
void ceiling_get_view(const ceiling *c, ceiling_view *v);

/* Host memory for measuring: its own mapping, advised for transparent huge
 * pages (as the library's buffers on a CPU device); not written. */
void *ceiling_host_alloc(size_t bytes);
void ceiling_host_free(void *p, size_t bytes); /* NULL is a no-op */

#endif
