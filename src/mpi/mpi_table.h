/* What the files of libclembed_mpi share: the table, the agreement among the
 * ranks, a rank's own failures kept until the collectives are over, the host
 * staging buffers, and MPI calls checked. On clembed's public headers and MPI
 * only (src/mpi never includes the core library's src/, but for the checkpoint
 * format, src/io/ckpt.h, whose ckpt_format.c this library compiles too). */
#ifndef CLEMBED_MPI_TABLE_H
#define CLEMBED_MPI_TABLE_H

#include "clembed_mpi.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A host buffer kept by the table between calls, grown when needed. */
typedef struct ce_mpi_buf {
  void *p;
  size_t bytes;
} ce_mpi_buf;

/* The host buffers of the table's calls (reused; what each holds is the
 * call's: see embed.c, step.c and bag.c; a feature set's call uses its ROW
 * tables' buffers as those do). */
enum {
  CE_MPI_IDS,    /* the rank's ids as int64 */
  CE_MPI_KEYS,   /* scratch: rows */
  CE_MPI_KEYS2,
  CE_MPI_VALS,   /* scratch: token or row indices */
  CE_MPI_VALS2,
  CE_MPI_POS,
  CE_MPI_SEND,   /* ids sent */
  CE_MPI_RECV,   /* stand-ins for a stage that could not be mapped (the exchange must still happen) */
  CE_MPI_SEND2,
  CE_MPI_RECV2,
  CE_MPI_NBUF
};

/* Device buffers kept by the table between calls (CL_MEM_ALLOC_HOST_PTR, so
 * that mapping them costs no copy where the device shares host memory): the
 * exchanges read and write them mapped, and the operations use them as
 * matrices and ids. */
enum {
  CE_MPI_ST_LOCAL,   /* forward: the rank's ids renumbered into its rows; step: its tokens in send order */
  CE_MPI_ST_ASKED,   /* ids asked of this shard / received with the gradient rows */
  CE_MPI_ST_OUT,     /* rows gathered for the askers / the rank's gradient rows in send order */
  CE_MPI_ST_IN,      /* rows received: the forward's rows / the owner's contributions */
  CE_MPI_ST_MASK,    /* step with dropout: the masked gradient; and the identity ids */
  CE_MPI_ST_IOTA,
  CE_MPI_NSTAGE
};

typedef struct ce_mpi_stage {
  cl_mem mem;
  size_t bytes;              /* its size */
  void *host;                /* while mapped */
} ce_mpi_stage;

struct clembed_mpi_table {
  clembed_context *ctx;
  MPI_Comm comm;             /* a duplicate of the caller's, errors returned */
  int rank, size;
  size_t rows, cols;
  clembed_dtype dtype;
  size_t *bounds;            /* size + 1 entries: rank r owns rows [bounds[r], bounds[r + 1]) */
  size_t max_shard;          /* the most rows any rank owns */
  double owner_scale;        /* size / rows: a row's owner, roughly (ce_mpi_owner) */
  clembed_matrix shard;      /* this rank's rows (a COLUMN table: its block of columns of every row) */
  int column;                /* a feature set's COLUMN table: shard holds columns [col_first, +shard.cols) */
  size_t col_first;
  int has_state;             /* an optimizer kind's state exists (kind) */
  clembed_optimizer_kind kind;
  clembed_matrix state, state2;
  clembed_matrix scratch;    /* one F32 element: the 0-row matrices of an argument check */
  int *counts;               /* 4 * size ints: send and receive counts and displacements */
  int *wcounts;              /* 2 * size ints: send and receive counts without the rank's own part */
  cl_mem umem;               /* a caller's buffer mapped by the call (ce_mpi_map_matrix), or NULL */
  void *uhost;
  ce_mpi_buf buf[CE_MPI_NBUF];
  ce_mpi_stage stage[CE_MPI_NSTAGE];
  cl_context cl;             /* the context's OpenCL context and queue */
  cl_command_queue queue;
};

/* A table of a feature set (feature_set.c), made collectively: rows split
 * evenly over the ranks [first, first + ranks) of comm (the others hold 0
 * rows), or with column set, every row on each of those ranks, rank first + j
 * holding column block j (col_first, width). op names the call for messages. */
typedef struct ce_mpi_layout {
  int first, ranks;
  int column;
  size_t col_first, col_width; /* this rank's block (0 wide off the ranks) */
} ce_mpi_layout;
clembed_status ce_mpi_table_create_laid(clembed_context *ctx, MPI_Comm comm, const char *op, size_t rows, size_t cols,
                                        clembed_dtype dtype, const ce_mpi_layout *lay, clembed_mpi_table **t);
/* The row-wise calls refuse a COLUMN table (on every rank alike). */
clembed_status ce_mpi_refuse_column(const clembed_mpi_table *t, const char *op);

/* ------------------------------------------------------------ own failures */

/* A rank's first failure, kept while the call goes on with the collectives,
 * then put on the context (ce_mpi_report). */
typedef struct ce_mpi_error {
  clembed_status status;     /* CLEMBED_OK: none */
  const char *argument;      /* a literal, or a detail's static string */
  int64_t index, value;
  char message[1024];
} ce_mpi_error;

/* Records a failure unless one is already recorded. Returns status. */
clembed_status ce_mpi_fail(ce_mpi_error *e, clembed_status status, const char *argument, int64_t index,
                           int64_t value, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;
/* Records the failure clembed just reported on ctx (status s), its message and
 * detail, unless one is already recorded. Returns s. */
clembed_status ce_mpi_fail_from(ce_mpi_error *e, clembed_context *ctx, clembed_status s);
/* A call's table or set `arg` is NULL: refused on this rank alone (there is no
 * communicator to tell the others on), CLEMBED_ERR_INVALID_ARGUMENT naming it. */
clembed_status ce_mpi_null_handle(const char *op, const char *arg);
/* Puts e on ctx as the failure of `op` (the detail's operation). Returns its status. */
clembed_status ce_mpi_report(clembed_context *ctx, const char *op, const ce_mpi_error *e);

/* An MPI return code: MPI_SUCCESS, or the failure recorded on e
 * (CLEMBED_ERR_COMMUNICATION with MPI's error string). Returns 1 on success. */
int ce_mpi_ok(ce_mpi_error *e, int mpi_code, const char *call);

/* ---------------------------------------------------------------- agreement */

#define CE_MPI_AGREE 16 /* fields every rank must hold equal */
#define CE_MPI_MAX 4    /* fields whose largest value every rank learns */

/* The calls, the first field of every agreement (a rank calling another
 * function than its peers disagrees at once). */
enum { CE_MPI_CALL_CREATE = 1, CE_MPI_CALL_LOAD, CE_MPI_CALL_INIT_NORMAL, CE_MPI_CALL_INIT_UNIFORM,
       CE_MPI_CALL_EMBED, CE_MPI_CALL_STEP, CE_MPI_CALL_BAG, CE_MPI_CALL_BAG_STEP, CE_MPI_CALL_CKPT_SAVE,
       CE_MPI_CALL_CKPT_LOAD, CE_MPI_CALL_FS_CREATE, CE_MPI_CALL_FS_BAGS, CE_MPI_CALL_FS_STEP,
       CE_MPI_CALL_FS_RELEASE };

/* What a field's value is, for the message that names each rank's value in words. */
enum { CE_MPI_UINT, CE_MPI_PADDING, CE_MPI_FLOAT, CE_MPI_STRING, CE_MPI_DTYPE, CE_MPI_KIND, CE_MPI_MODE, CE_MPI_POLICY,
       CE_MPI_GIVEN, CE_MPI_SWITCH, CE_MPI_CALL };

typedef struct ce_mpi_vote {
  uint64_t agree[CE_MPI_AGREE];
  const char *names[CE_MPI_AGREE];
  unsigned char kinds[CE_MPI_AGREE];  /* CE_MPI_UINT, ... */
  const char *strings[CE_MPI_AGREE];  /* a CE_MPI_STRING field's string (NULL: none was passed) */
  int n;
  uint64_t max[CE_MPI_MAX];  /* in: this rank's values; out: the largest over the ranks */
  /* out */
  int differs;               /* the first field that is not equal everywhere, or -1 */
  int failed_rank;           /* the lowest rank that failed on its own, or -1 */
  char values[640];          /* when a field differs: each rank's value of it in words */
} ce_mpi_vote;

/* Adds a field that must agree (name: a literal, for the message), an unsigned number. */
void ce_mpi_agree(ce_mpi_vote *v, const char *name, uint64_t value);
/* ... a value of another kind (CE_MPI_PADDING: ce_mpi_padding's row, UINT64_MAX for
 * none, or a bad padding_idx's bits; CE_MPI_DTYPE: a
 * clembed_dtype, CE_MPI_KIND: an optimizer kind, CE_MPI_MODE: a bag mode,
 * CE_MPI_POLICY: an index policy, CE_MPI_GIVEN: 1 for a pointer given, CE_MPI_SWITCH:
 * 0 or 1, CE_MPI_CALL: CE_MPI_CALL_*) */
void ce_mpi_agree_as(ce_mpi_vote *v, const char *name, int kind, uint64_t value);
/* ... a float, by its bits */
void ce_mpi_agree_float(ce_mpi_vote *v, const char *name, float value);
/* ... a string (NULL allowed), by its hash; s must live until the vote is over */
void ce_mpi_agree_string(ce_mpi_vote *v, const char *name, const char *s);
/* Names for messages: "F16", "Q4_K" (the core library's spelling); "ADAM"; "MEAN";
 * "CLAMP"; for a value that is none, "unknown ... N" written into buf. */
const char *ce_mpi_dtype_text(clembed_dtype d, char *buf, size_t cap);
const char *ce_mpi_kind_text(int kind, char *buf, size_t cap);
const char *ce_mpi_mode_text(int mode, char *buf, size_t cap);
/* ... an optimizer's kind and fields (o NULL, a rank that failed: zeros) */
void ce_mpi_agree_optimizer(ce_mpi_vote *v, const clembed_optimizer *o);
/* The field of a string (a 64-bit FNV-1a hash; NULL differs from ""). */
uint64_t ce_mpi_string_field(const char *s);

/* The collective agreement, one MPI_Allreduce on comm: every rank learns
 * whether the fields agree, the largest max values, and the lowest rank with
 * `failed` set; when a field differs (every rank knows it), one MPI_Allgather
 * more of each rank's value of it in words, into v->values. 1 on success; 0
 * when MPI failed (recorded on e). */
int ce_mpi_vote_run(MPI_Comm comm, int rank, int size, ce_mpi_vote *v, int failed, ce_mpi_error *e);

/* After a vote: the outcome as this rank's failure, or CLEMBED_OK when every
 * rank agreed and none failed. A rank that failed keeps its own failure; the
 * others get CLEMBED_ERR_INVALID_ARGUMENT naming the field or the rank. */
clembed_status ce_mpi_vote_outcome(const ce_mpi_vote *v, const char *op, ce_mpi_error *e);

/* A forward's vote, where a rank's own failure (in e) does not stop the
 * others: 1 when MPI worked and the ranks agree, the call going on; else 0
 * with *status the call's return, put on the context (the rank's own failure
 * first, else the disagreement). */
int ce_mpi_forward_vote(clembed_mpi_table *t, clembed_context *ctx, const char *op, ce_mpi_vote *v, ce_mpi_error *e,
                        clembed_status *status);

/* The lowest rank whose `mine` is not CLEMBED_OK, with that status in *theirs
 * (what the other ranks return: a device or memory failure stays one), or -1
 * when none failed (one MPI_Allreduce); -2 when MPI failed (recorded on e). */
int ce_mpi_first_failed(MPI_Comm comm, int rank, int size, clembed_status mine, ce_mpi_error *e,
                        clembed_status *theirs);

/* ------------------------------------------------------------------ helpers */

/* The table's host buffer k, at least `bytes` long (NULL when memory runs out). */
void *ce_mpi_buffer(clembed_mpi_table *t, int k, size_t bytes);

/* Stage k, at least `bytes` long (grown by a new buffer; 1 byte at least),
 * mapped for the host: for writing (its contents discarded) or for reading
 * what the device wrote (clembed_finish first: the operations before are
 * done). NULL on failure (recorded on e). */
void *ce_mpi_stage_write(clembed_mpi_table *t, int k, size_t bytes, ce_mpi_error *e);
/* ... for writing some of it, what the device wrote there kept (the stage
 * at least `bytes` long already). */
void *ce_mpi_stage_update(clembed_mpi_table *t, int k, size_t bytes, ce_mpi_error *e);
/* ... or only at least `bytes` long, unmapped (for the device to write). */
clembed_status ce_mpi_stage_reserve(clembed_mpi_table *t, int k, size_t bytes, ce_mpi_error *e);
void *ce_mpi_stage_read(clembed_mpi_table *t, int k, size_t bytes, ce_mpi_error *e);
/* Unmaps stage k (if mapped) and waits until the device sees the host's
 * writes. CLEMBED_OK or the failure (recorded on e). */
clembed_status ce_mpi_stage_done(clembed_mpi_table *t, int k, ce_mpi_error *e);
/* Stage k as a rows x cols matrix of dtype, or as n ids of type. */
clembed_matrix ce_mpi_stage_matrix(const clembed_mpi_table *t, int k, size_t rows, size_t cols, clembed_dtype dtype);
clembed_ids ce_mpi_stage_ids(const clembed_mpi_table *t, int k, size_t n, clembed_index_type type);
/* Releases every stage (unmapped). */
void ce_mpi_stage_release(clembed_mpi_table *t);

/* A caller's matrix in one buffer (not split; clembed_matrix_pieces checks it
 * as every operation does), rows x t->cols of a float dtype, mapped for the
 * host (flags: CL_MAP_READ, or CL_MAP_WRITE when every row will be written:
 * without gaps between the rows, the region's old contents are not fetched):
 * *host receives its first row, *ld its row stride in bytes; NULL *host with
 * no rows or cols. 1 on success; 0 when the matrix is not one buffer, fails
 * clembed's checks or cannot be mapped (the caller then takes the path
 * through the device, whose operation reports a bad matrix). One mapping at a
 * time (ce_mpi_unmap_matrix). */
int ce_mpi_map_matrix(clembed_mpi_table *t, const clembed_matrix *m, cl_map_flags flags, char **host, size_t *ld);
/* Unmaps what ce_mpi_map_matrix mapped (if anything) and waits until the
 * device sees the host's writes. CLEMBED_OK or the failure (recorded on e). */
clembed_status ce_mpi_unmap_matrix(clembed_mpi_table *t, ce_mpi_error *e);

/* Rows copied on the host to random places: each one's lines asked for (to
 * write) CE_MPI_AHEAD rows before it is copied. */
#define CE_MPI_AHEAD 8
static inline void ce_mpi_prefetch_write(void *p, size_t bytes) {
#if defined(__GNUC__)
  for (size_t b = 0; b < bytes && b < 512; b += 64) __builtin_prefetch((char *)p + b, 1);
#else
  (void)p, (void)bytes;
#endif
}

/* Rows written to scattered places of a large output that nothing reads
 * before the call returns: with SSE2, streaming stores (no line read for
 * ownership before it is written); memcpy elsewhere. ce_mpi_stream_ok says whether dst rows `ld` bytes apart of
 * `bytes` bytes can take them (16-byte aligned); ce_mpi_stream_done orders
 * the streamed stores before what follows (an MPI call, an unmap). The
 * bytes are memcpy's. */
#if defined(__SSE2__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 2)
#include <emmintrin.h>
#define CE_MPI_STREAM 1
#else
#define CE_MPI_STREAM 0
#endif
static inline int ce_mpi_stream_ok(const void *dst, size_t ld, size_t bytes) {
  return CE_MPI_STREAM && bytes && !(((uintptr_t)dst | ld | bytes) & 15);
}
static inline void ce_mpi_stream_row(void *dst, const void *src, size_t bytes) {
#if CE_MPI_STREAM
  for (size_t b = 0; b < bytes; b += 16)
    _mm_stream_si128((__m128i *)((char *)dst + b), _mm_loadu_si128((const __m128i *)((const char *)src + b)));
#else
  memcpy(dst, src, bytes);
#endif
}
static inline void ce_mpi_stream_done(void) {
#if CE_MPI_STREAM
  _mm_sfence();
#endif
}

/* The rank that owns global row v (< rows). */
static inline int ce_mpi_owner(const clembed_mpi_table *t, size_t v) {
  /* a guess from the proportion, one row off at most (shards differ by one
   * row at most), mended without branches (bounds[0] = 0 <= v < bounds[size]:
   * neither step leaves [0, size)); then the bounds, should rounding have
   * put it further off */
  int r = (int)((double)v * t->owner_scale);
  if (r >= t->size) r = t->size - 1;
  if (r < 0) r = 0;
  r -= t->bounds[r] > v;
  r += t->bounds[r + 1] <= v;
  while (t->bounds[r] > v) r--;
  while (t->bounds[r + 1] <= v) r++;
  return r;
}

/* The first n rows of m (a view). */
clembed_matrix ce_mpi_rows(const clembed_matrix *m, size_t n);

/* Blocking read of ids (I32 or I64) into int64 host values; the rank's
 * earlier pending device errors are its failure. CLEMBED_OK or the failure
 * (recorded on e). */
clembed_status ce_mpi_read_ids(clembed_mpi_table *t, const clembed_ids *ids, int64_t *host, ce_mpi_error *e);
/* The same without the wait: ids (I32 or I64) read into int64 host values on ctx. */
clembed_status ce_mpi_read_ids_ctx(clembed_context *ctx, const clembed_ids *ids, int64_t *host, ce_mpi_error *e);

/* The row an id resolves to under the index policy (as every clembed kernel
 * resolves it, padding aside): 1 with *row set, 0 for no row (ZERO's bad
 * ids), -1 for a bad id to report (CHECK, WRAP past -rows, CLAMP of an empty
 * table). */
static inline int ce_mpi_resolve(int64_t id, size_t rows, clembed_index_policy policy, uint64_t *row) {
  int64_t r = (int64_t)rows; /* a table lies in memory: rows < 2^63 */
  if (policy == CLEMBED_INDEX_WRAP && id < 0 && id >= -r) id += r;
  if (id < 0 || id >= r) {
    if (policy == CLEMBED_INDEX_CLAMP && r > 0) {
      id = id < 0 ? 0 : r - 1;
    } else {
      return policy == CLEMBED_INDEX_ZERO ? 0 : -1;
    }
  }
  *row = (uint64_t)id;
  return 1;
}

/* padding_idx resolved against rows (negative counts from the end), or
 * UINT64_MAX for none; *bad set when it lies outside the table. */
uint64_t ce_mpi_padding(int64_t padding_idx, size_t rows, int *bad);

/* A caller's option struct of `type` read over *out (which holds the
 * defaults) as every clembed call reads one (clembed_struct_read: as far as
 * its struct_size goes); a refusal is recorded on e and *out keeps the
 * defaults. in NULL: the defaults. Returns 1 when read. */
int ce_mpi_read_options(clembed_context *ctx, const char *op, const char *argument, clembed_struct_type type,
                        const void *in, void *out, size_t size, ce_mpi_error *e);
/* A caller's optimizer so read, the fields past its struct_size from the
 * defaults of its own kind; in NULL gives SGD's defaults (the caller refuses
 * a NULL optimizer). Returns 1 when read. */
int ce_mpi_read_optimizer(clembed_context *ctx, const char *op, const clembed_optimizer *in, clembed_optimizer *out,
                          ce_mpi_error *e);

/* The exchanges: this rank's send counts (items for each rank) go in
 * ce_mpi_send_counts(t)[0 .. size); ce_mpi_exchange_counts (an MPI_Alltoall)
 * fills the receive counts and both displacements and returns the number of
 * items this rank receives (-1 when MPI failed, recorded on e). Then
 * ce_mpi_alltoallv moves items of `type`: send -> recv along the counts, or
 * with `reverse` back along them (each rank sends what it received counts of,
 * and receives what it sent counts of). 1 on success, 0 when MPI failed. */
int *ce_mpi_send_counts(clembed_mpi_table *t);
long long ce_mpi_exchange_counts(clembed_mpi_table *t, ce_mpi_error *e);
/* A rank that sent negative counts (a failure it announces to every rank in
 * the same exchange): the lowest such rank, or -1. */
int ce_mpi_count_failure(const clembed_mpi_table *t);
int ce_mpi_alltoallv(clembed_mpi_table *t, const void *send, void *recv, MPI_Datatype type, int reverse,
                     ce_mpi_error *e);
/* ... of rows of `row_bytes` bytes each (nothing moves for 0-byte rows);
 * with skip_self, what this rank sends itself does not move (the caller
 * copies it where it is needed, or reads it where it lies). */
int ce_mpi_alltoallv_rows(clembed_mpi_table *t, const void *send, void *recv, size_t row_bytes, int reverse,
                          int skip_self, ce_mpi_error *e);
/* The same started (MPI_Ialltoallv): the caller may work meanwhile (calling
 * MPI_Test on *req now and then lets it progress), then completes it with
 * ce_mpi_rows_wait, which also frees *row; the counts must not change until
 * then. 1 on success, 0 when MPI failed (ce_mpi_rows_wait is still due). */
int ce_mpi_rows_start(clembed_mpi_table *t, const void *send, void *recv, size_t row_bytes, int reverse,
                      int skip_self, MPI_Datatype *row, MPI_Request *req, ce_mpi_error *e);
int ce_mpi_rows_wait(MPI_Datatype *row, MPI_Request *req, ce_mpi_error *e);
#define CE_MPI_TEST 512 /* rows copied between two MPI_Test while an exchange is in flight */

/* ---------------------------------------------- shared by the calls (embed.c, step.c, bag.c) */

/* A bad id of the rank's own: CLEMBED_ERR_INDEX_OUT_OF_RANGE on e, naming
 * ids[at] = id and the range the policy allows. */
void ce_mpi_bad_id(ce_mpi_error *e, const char *op, int64_t at, int64_t id, clembed_index_policy policy, size_t rows);
/* After ce_mpi_fetch_rows: its in and local stages handed back to the device
 * and seen as the d fetched rows (*rows, `wire`) and the n ids renumbered
 * into them (*lids, I64). CLEMBED_OK, or the failure (on e). */
clembed_status ce_mpi_fetched(clembed_mpi_table *t, size_t d, size_t n, clembed_dtype wire, ce_mpi_error *e,
                              clembed_matrix *rows, clembed_ids *lids);

/* The forward's fetch (embed.c): the rows of the rank's n ids (host, resolved
 * under policy; pad the padding row or UINT64_MAX) from their owners, while
 * the rank serves the rows asked of its shard (gathered by clembed_lookup on
 * its device); a rank whose own arguments failed (e set on entry) asks for
 * nothing but still serves. Each distinct row is asked once; the rows travel
 * in *wire (the table's dtype, F32 for block-quantized ones). Into a matrix of
 * their own (direct_ld 0): on success the in stage holds the *d distinct rows
 * (in ascending row order, so grouped by owner; their global rows in
 * t->buf[CE_MPI_KEYS]) and the local stage the n ids renumbered into them
 * (I64; a bad id keeps its value, outside the smaller matrix too), both still
 * mapped; *pad_local the padding row's place among them or -1. Or into the
 * rank's output (direct_ld not 0: direct its first row, mapped, rows
 * direct_ld bytes apart, of dtype *wire): the host copies each token's row
 * there, bytes as they lie, from the rows as they arrived (in host memory;
 * the rank's own rows are not sent through MPI but read where its device
 * gathered them for itself), zeros for the bad, dropped and padding tokens
 * (the padding row is not asked for), and reports the first bad id on e:
 * what clembed_embed with the defaults gives. 1 on success; 0: a failure, on
 * e (serve: the rank's own serving failure, for the stages' unmapping). */
int ce_mpi_fetch_rows(clembed_mpi_table *t, const char *op, const int64_t *host, size_t n,
                      clembed_index_policy policy, uint64_t pad, char *direct, size_t direct_ld, size_t *d,
                      int64_t *pad_local, clembed_dtype *wire, ce_mpi_error *e, ce_mpi_error *serve);

/* The forward fetch in phases, for a caller that does the exchanges itself
 * (feature_set.c: every ROW table's requests in one exchange, the rows in
 * another). The request: the local stage mapped and written with the n ids
 * renumbered into the distinct rows (as ce_mpi_fetch_rows into a matrix of
 * their own), the send counts (distinct rows per owner), t->buf[CE_MPI_SEND]
 * their indices in the owners' shards (int32, int64 when a shard passes 2^31
 * rows) and t->buf[CE_MPI_KEYS] their global rows, ascending; *pad_local the
 * padding row's place or -1. Returns the count of distinct rows d, or -1 (the
 * failure on e, the send counts 0). */
long long ce_mpi_fetch_plan(clembed_mpi_table *t, const char *op, const int64_t *host, size_t n,
                            clembed_index_policy policy, uint64_t pad, int64_t *pad_local, ce_mpi_error *e);
/* The serving: the nserve indices asked of this shard, written by the caller
 * into the asked stage (mapped, ce_mpi_stage_write), handed to the device and
 * gathered with clembed_lookup into the out stage as `wire` rows, returned
 * mapped for reading (in the asked order). NULL with nothing to serve or on a
 * failure (recorded on serve). */
void *ce_mpi_serve_rows(clembed_mpi_table *t, size_t nserve, clembed_dtype wire, ce_mpi_error *serve);
/* ... its part: the `count` indices from `first` on of the asked stage
 * (handed to the device) gathered by clembed_lookup into dst (count rows of
 * the table's cols, the wire's dtype), enqueued: the caller finishes. */
clembed_status ce_mpi_serve_into(clembed_mpi_table *t, size_t first, size_t count, const clembed_matrix *dst);
/* The bag forward's own pooling (bag.c): after the fetch, the in stage holding
 * the d distinct rows (`wire`) and the local stage the n ids renumbered (both
 * mapped), clembed_embedding_bag of them into out with the caller's offsets
 * and options o (the padding row as pad_local, CLAMP resolved already), a bad
 * id reported on e against the whole table (ce_mpi_bad_id: detail "ids"), and
 * MAX's max_rows mapped back to the table's rows (t->buf[CE_MPI_KEYS]). */
void ce_mpi_bag_pool(clembed_mpi_table *t, const char *op, const clembed_bag_options *o, const clembed_ids *offsets,
                     size_t d, size_t n, clembed_dtype wire, int64_t pad_local, clembed_matrix *out, ce_mpi_error *e);

/* A bag step's inputs on the host: the n ids, the offsets (bags + 1; NULL:
 * bags of one size), MAX's max_rows (bags x cols), the weights, and the
 * gradient as F32, bag b's row at grad + b * grad_ld. */
typedef struct ce_mpi_bag_inputs {
  const int64_t *ids, *offsets, *max_rows;
  const float *grad, *weights;
  size_t n, bags, grad_ld;
} ce_mpi_bag_inputs;
/* A bag step's contributions (bag.c, the comment at its top), in two
 * phases. The plan: which ids contribute, to which rows, in ascending id
 * position (kept in t->buf[CE_MPI_KEYS], [CE_MPI_VALS], [CE_MPI_POS] and
 * [CE_MPI_VALS2] until the fill), the send counts (contributions per owner)
 * set; the first bad id to *bad_at / *bad_id. Returns their count m, or -1
 * when host memory runs out. The fill: each owner o's contributions, in id
 * order, written from ids_to[o] on (their rows in o's shard, int32 or int64
 * as ce_mpi_fetch_plan's) and rows_to[o] on (cols F32 values each), both
 * left past what was written. */
long long ce_mpi_bag_contrib_plan(clembed_mpi_table *t, const ce_mpi_bag_inputs *h, const clembed_bag_options *bo,
                                  uint64_t pad, int64_t *bad_at, int64_t *bad_id);
void ce_mpi_bag_contrib_fill(clembed_mpi_table *t, const ce_mpi_bag_inputs *h, const clembed_bag_options *bo,
                             long long m, char **ids_to, float **rows_to);

/* The optimizer of a sharded step (step.c): no states passed in, the kind of
 * the table's state, and clembed_optimizer_step's own checks run on 0 rows
 * with the owner's options b. The failure goes on e. */
void ce_mpi_check_optimizer(clembed_mpi_table *t, const char *op, const clembed_optimizer *o,
                            const clembed_backward_options *b, ce_mpi_error *e);
/* The state of the optimizer's kind, made (zeros) when the table has none.
 * 1 when made here (the caller releases it if the step does not happen). */
int ce_mpi_make_state(clembed_mpi_table *t, clembed_optimizer_kind kind, ce_mpi_error *e);
/* The exchange and the owners' step: the send counts set, send_ids the rows
 * in the owners' shards (int32, int64 when a shard passes 2^31 rows) and
 * their `wire` rows in the same order: row i of src (rows src_ld bytes
 * apart, i < npos) at place pos[i] of the send order (-1: not sent), or with
 * pos NULL rows k of src in send order; or e holds the rank's failure (then
 * no rank steps, and a state this call made goes again). The rows the rank
 * owns itself do not go through MPI. Each owner runs clembed_optimizer_step
 * with options b on what it received, in rank order; a failure there (own)
 * is learnt by every rank. */
void ce_mpi_step_deliver(clembed_mpi_table *t, const char *op, const clembed_optimizer *o,
                         const clembed_backward_options *b, void *send_ids, const char *src, size_t src_ld,
                         const int *pos, size_t npos, clembed_dtype wire, int made, ce_mpi_error *e,
                         ce_mpi_error *own);

/* The owner's step (step.c): the nrecv ids received (rows of its shard, in
 * the asked stage) and their `wire` rows (in the in stage), both mapped and
 * written in global id order, stepped by clembed_optimizer_step with options
 * b and the table's state. A failure on own. */
void ce_mpi_step_own(clembed_mpi_table *t, const clembed_optimizer *o, const clembed_backward_options *b,
                     size_t nrecv, clembed_dtype wire, ce_mpi_error *own);

#endif
