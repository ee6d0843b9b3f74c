/* What the operations share among themselves. Operations stand on the
 * runtime only (src/runtime/runtime.h); the runtime never includes this. */
#ifndef CLEMBED_OPS_H
#define CLEMBED_OPS_H

#include "../runtime/options.h"
#include "../runtime/runtime.h"

/* ----- dtypes on the host (convert.c), bit for bit the kernels' conversions */
uint16_t ce_f32_to_f16(float f);
float ce_f16_to_f32(uint16_t h);
uint16_t ce_f32_to_bf16(float f);
float ce_bf16_to_f32(uint16_t b);
/* n dense elements of dtype st into dtype dt (float dtypes). */
void ce_convert(void *dst, clembed_dtype dt, const void *src, clembed_dtype st, size_t n);
/* n dense values (a multiple of any block type's block size) of dtype st, as
 * elements or blocks, into dtype dt: among float dtypes, float values into
 * Q8_0/Q4_0 blocks (through F32, ggml's reference quantizers), blocks into
 * float values (ggml's dequantizers, through F32). Returns 0, -1 for a pair
 * with no conversion (two block types, or floats into a block type other than
 * Q8_0 and Q4_0), -2 when host memory runs out. */
int ce_convert_values(void *dst, clembed_dtype dt, const void *src, clembed_dtype st, size_t n);
/* The same for rows x cols values, which the row-wise types need (FBGEMM's
 * quantizers and dequantizers, a row at a time through F32). */
int ce_convert_rows(void *dst, clembed_dtype dt, const void *src, clembed_dtype st, size_t rows, size_t cols);

/* ----- angles (freq_cache.c): frequencies in double, cached on the device */
clembed_status ce_sinusoid_check(clembed_context *ctx, const clembed_sinusoid *s);
/* A device buffer of the columns' angle pieces and phases (9 planes of cols
 * floats, see cl/lib/angle.cl), owned by the context's cache. */
clembed_status ce_sinusoid_freq(clembed_context *ctx, const clembed_sinusoid *s, size_t cols, cl_mem *buffer);
/* Checks r and gives its rotary dimension R, a device buffer of its
 * frequencies' angle pieces (8 planes of R/2 floats, owned by the context's
 * cache) and its attention factor. */
clembed_status ce_rope_freq(clembed_context *ctx, const clembed_rope *r, size_t *R, cl_mem *buffer, float *attention);

/* Positions (the sinusoid's and RoPE's) are below 2^32: the exact angle splits
 * them into two 16-bit halves. first + count > 2^32, without overflow: */
#define CE_POSITION_END ((uint64_t)1 << 32)
static inline int ce_positions_past_end(uint64_t first, uint64_t count) {
  return first > CE_POSITION_END || count > CE_POSITION_END - first;
}

/* ----- the sinusoid table (positional.c) */
/* clembed_positional without the public entry (no tracking of its event). */
clembed_status ce_positional_run(clembed_context *ctx, const clembed_sinusoid *s, size_t first_position,
                                 clembed_matrix *out, cl_uint nwait, const cl_event *wait, cl_event *event);
/* The cached sinusoid table covering positions [0, end) for cols columns, or
 * NULL in *table (not an error) when building it is not worth it for a call of
 * `tokens` tokens. */
clembed_status ce_sinusoid_table(clembed_context *ctx, const clembed_sinusoid *s, size_t cols, size_t end,
                                 size_t tokens, const clembed_matrix **table);

/* ----- the forward's positions and error slot (embed.c), which norm.c shares */
/* What the forward reads for the positional part. */
typedef struct ce_embed_pos {
  int kind;                /* the kernel's POSITIONS: 0 none, 1 sinusoid per element, 2 a table */
  const clembed_matrix *pt;/* the table (learned, or the cached sinusoid) */
  int cached;              /* pt is the cached sinusoid table */
  size_t p_ld;
  ce_pieces pp;            /* pt's pieces (a NULL buffer without pt): ce_pieces_release */
  cl_mem freq;             /* the sinusoid's frequencies (kind 1) */
  const clembed_ids *so;   /* sequence offsets, when positions are added */
} ce_embed_pos;
/* The checks of the forward's arguments: table, ids, `rows` (ids->count x the table's cols,
 * named `what`: the output, or a backward's grad_out), the options they share with the
 * backward, the padding id (*padding: its row, -1 for none; padding_keeps_row 0 or 1, which
 * the caller applies: -1 to the rows it reads). The table and `rows` resolved into their
 * pieces (tp, rp: their ld; ce_pieces_release both). opt is a whole struct of this version
 * (read by ce_struct_read). */
clembed_status ce_embed_check(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                              const clembed_embed_options *opt, const clembed_matrix *rows, const char *what,
                              ce_pieces *tp, ce_pieces *rp, cl_long *padding);
/* Checks opt's positions and resolves them (the cached sinusoid table when it pays; p->pp
 * to release with ce_pieces_release, whatever the status). */
clembed_status ce_embed_positions(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                                  const clembed_embed_options *opt, ce_embed_pos *p);
/* The slot for the call's bad ids and positions (CE_NO_SLOT when none can be bad); op names the call. */
clembed_status ce_embed_slot(clembed_context *ctx, const char *op, const clembed_matrix *table,
                             const clembed_ids *ids, const clembed_embed_options *opt, const ce_embed_pos *p,
                             cl_uint *slot);

/* ----- matrices in more buffers than a launch takes (gather.c) */
/* The rows `ids` take from table t (resolved into tp: any number of pieces),
 * in id order, gathered into *rows (ids->count x t->cols of t's dtype, one
 * buffer, the bytes as they lie) with *idx (I64: j for an id that takes a row
 * under policy and padding, -1 for one left out), the bad ids reported into
 * `slot` (CE_NO_SLOT: none) as the operation would; the operation then reads
 * rows through idx under CLEMBED_INDEX_ZERO with no padding: the same values.
 * fn names the call in messages; the caller releases both buffers. */
clembed_status ce_gather_rows(ce_chain *ch, const char *fn, const clembed_matrix *t, const ce_pieces *tp,
                              const clembed_ids *ids, clembed_index_policy policy, cl_long padding, cl_uint slot,
                              clembed_matrix *rows, clembed_ids *idx);
/* A split matrix joined into one temporary buffer (row r at element r * ld):
 * ce_join makes *p that one buffer (copying the rows in with copy_in: an input,
 * or an output whose rows a kernel does not all write) and keeps the pieces in
 * j; ce_join_back copies the rows back into the pieces (an output), only each
 * row's cols; ce_joined_release (after enqueueing) lets the temporary and the
 * pieces' list go. j starts zeroed. */
typedef struct ce_joined {
  const clembed_matrix *m;
  ce_pieces from;
  cl_mem buffer;
} ce_joined;
clembed_status ce_join(ce_chain *ch, const char *fn, const clembed_matrix *m, ce_pieces *p, int copy_in,
                       ce_joined *j);
clembed_status ce_join_back(ce_chain *ch, const ce_joined *j);
void ce_joined_release(ce_joined *j);

/* ----- BERT's segments and the fused norm (norm.c) */
/* Checks opt's segment and norm fields; *layer = 1 when it asks for segments
 * or a norm (clembed_embed then runs ce_norm_forward). */
clembed_status ce_norm_check(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                             const clembed_embed_options *opt, int *layer);
/* The forward with segments or a norm, as the chain's commands, closed into `event`
 * (the arguments checked by clembed_embed). */
clembed_status ce_norm_forward(clembed_context *ctx, ce_chain *ch, const clembed_matrix *table, ce_pieces *tp,
                               const clembed_ids *ids, const clembed_embed_options *opt, ce_embed_pos *p,
                               cl_long padding, clembed_matrix *out, ce_pieces *op, cl_event *event);

/* ----- the radix sort of (key, index) (sort.c) */
typedef struct ce_sort {
  cl_mem keys[2], idx[2], hist; /* ping-pong buffers and the digit histograms */
  size_t n, chunk, nchunks;
  int key64;                    /* ulong keys (else uint) */
  char opts[32];                /* the sort program's options */
} ce_sort;
/* Temporaries for n entries (O(n), never O(keys' range)). */
clembed_status ce_sort_alloc(clembed_context *ctx, size_t n, int key64, ce_sort *s);
/* Refuses (CLEMBED_ERR_UNSUPPORTED naming `arg`) a sort and fold of n entries
 * on a device whose loop_limit a fold of that many can pass: the fold of the
 * first segment runs about n + its length loop iterations in one work-item
 * (measured on llvmpipe), so 2n + 1024 must stay within the limit. Called
 * before an operation writes anything. */
clembed_status ce_fold_fits(clembed_context *ctx, const char *what, const char *arg, size_t n);
/* Sorts (keys[0], idx[0]) stably by key < 2^bits, as commands of the chain;
 * *which receives the buffer pair that holds the result. */
clembed_status ce_sort_run(ce_chain *ch, ce_sort *s, unsigned bits, int *which);
void ce_sort_release(ce_sort *s);
unsigned ce_bit_width(uint64_t v);

/* ----- the segment fold (backward.c) and the optimizer steps (optim.c) */
/* What is stored for each folded row r (the row's gradient): */
typedef enum ce_store_mode {
  CE_STORE_OVERWRITE = 0,  /* grad_table[v] = r */
  CE_STORE_ACCUMULATE = 1, /* grad_table[v] += r */
  CE_STORE_SGD = 2,        /* table[v] -= lr * r, rounded to the table's dtype */
  /* clembed_optimizer_step (optim.c): the optimizer's kind, with its states */
  CE_STORE_ADAGRAD = 3,
  CE_STORE_ROWWISE_ADAGRAD = 4,
  CE_STORE_ADAM = 5
} ce_store_mode;

/* An optimizer step's checked fields (optim.c), for the fold. */
typedef struct ce_optim_step {
  const clembed_matrix *state, *state2;
  ce_pieces s1, s2;               /* their pieces (a NULL buffer when absent); ce_pieces_release both */
  size_t s1_ld, s2_ld;
  float eps, weight_decay, b1c, b2c, step_size; /* b1c = 1 - beta1, b2c = 1 - beta2 (ADAM) */
} ce_optim_step;

/* Contributions other than one per token: the bags' (bag.c). `count` sorted
 * entries, each with a record the fold reads (two ulongs: its gradient row
 * and how that row contributes; cl/ops/backward.cl's BAG). `keys` enqueues on
 * the chain what writes the sort's input (keys[e]: the table row, or the
 * table's rows for nothing; idx[e] = e) and the records, and checks and
 * reports the producer's own input (its error slots are its own). */
typedef struct ce_contrib ce_contrib;
struct ce_contrib {
  size_t count;
  cl_mem records;  /* 2 * count ulongs */
  cl_mem max_rows; /* MAX entries' max_rows, I64 (any buffer when none) */
  clembed_status (*keys)(ce_chain *ch, const ce_contrib *c, cl_mem keys, cl_mem idx, int key64);
  void *data;      /* the producer's */
};

/* The write back of a stepped F16/BF16 table: to nearest even (stochastic 0),
 * or stochastic rounding with the random words of (seed, step, first_row +
 * the row, the column) (an optimizer's stochastic_rounding, seed, step and
 * first_row; include/clembed.h). An F32 table ignores it. */
typedef struct ce_rounding {
  int stochastic;
  uint64_t seed, step, first_row;
} ce_rounding;

/* One fused step over the rows the ids touch: the sort, the fold and the
 * store; the operation's checks, slot and chain included. */
typedef struct ce_step {
  const char *what;               /* the public function */
  ce_store_mode mode;
  float lr;                       /* CE_STORE_SGD */
  int atomic;                     /* the atomic path (clembed_backward with deterministic 0) */
  ce_optim_step *optim;           /* clembed_optimizer_step: the kernels with states (else NULL) */
  const ce_contrib *contrib;      /* NULL: a contribution per token of ids, ids[i] from row i of grad_out;
                                     else these (ids is NULL, grad_out checked by their producer) */
  ce_rounding rounding;           /* how an F16/BF16 table's elements are written back (zeros: nearest even) */
} ce_step;
clembed_status ce_segment_step(clembed_context *ctx, const ce_step *step, const clembed_matrix *grad_out,
                               const clembed_ids *ids, const clembed_backward_options *opt,
                               clembed_matrix *target, cl_uint nwait, const cl_event *wait, cl_event *event);
/* A caller's optimizer (ce_struct_read), the fields past its struct_size from
 * the defaults of its own kind (optim.c). */
clembed_status ce_optimizer_read(clembed_context *ctx, const char *argument, int64_t index, const clembed_optimizer *in,
                                 clembed_optimizer *out);
/* The optimizer's fields and states checked against the table (optim.c). */
clembed_status ce_optimizer_check(clembed_context *ctx, const char *what, const clembed_optimizer *o,
                                  const clembed_matrix *table, ce_optim_step *p);
/* clembed_optimizer_step's fold of any contributions (contrib NULL: ids'),
 * after ce_optimizer_check: ce_segment_step with the optimizer's store mode. */
clembed_status ce_optimizer_fold(clembed_context *ctx, const char *what, const clembed_matrix *grad_out,
                                 const clembed_ids *ids, const clembed_backward_options *opt,
                                 const clembed_optimizer *o, clembed_matrix *table, const ce_contrib *contrib,
                                 cl_uint nwait, const cl_event *wait, cl_event *event);

#endif
