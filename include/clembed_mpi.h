/*
 * clembed_mpi: an embedding table split by rows over the ranks of an MPI
 * communicator, with the bits of one device holding the whole table.
 *
 * Part of libclembed_mpi (link with clembed_mpi, clembed and MPI); built when
 * CMake finds MPI. It stands on clembed's public API and MPI only. One process
 * per device, as in every large trainer: each rank has its own clembed
 * context, owns a contiguous range of the table's rows (its shard) and passes
 * its own batch (data parallel); the calls exchange ids and rows with MPI
 * collectives (MPI_Alltoall, MPI_Alltoallv, MPI_Allreduce) on a duplicate of
 * the communicator, staged through host memory. The library does not call
 * MPI_Init: MPI must be initialised with MPI_THREAD_FUNNELED or more
 * (MPI_Init_thread) and the calls made from the thread that initialised it.
 *
 * Rows. Rank r of n owns rows [r*rows/n, (r+1)*rows/n) (64-bit integer
 * division, no overflow for any size_t rows): shards differ by at most one row,
 * and with fewer rows than ranks some are empty.
 *
 * The bits. Every result equals what one device holding the whole table gives
 * for the ranks' batches concatenated in rank order, for any number of ranks:
 * - init: element (r, c) of the table is element (r, c) of
 *   clembed_matrix_init_normal / _uniform of the whole table (the Philox index
 *   (r * cols + c); each shard is clembed_matrix_init_*_at of its first row);
 * - load: the shard holds the bits of clembed_matrix_load's rows;
 * - embed: each rank's rows are the rows clembed_embed gives for its batch on
 *   the whole table. The owners send their rows' bits (float tables in their
 *   own dtype; block-quantized ones dequantized to F32, exactly as every
 *   kernel dequantizes them), and the rank runs clembed_embed on the rows it
 *   received with its own options: positions, seq_len, sequence offsets,
 *   dropout and its seed are each rank's own, as on its own batch (so the
 *   equality with one device is exact for batches of whole sequences);
 * - optimizer_step: the table and its optimizer state after the step. One
 *   device folds the contributions to row v in ascending token order
 *   (clembed_optimizer_step). Here each rank sends every token's gradient row
 *   (with the rank's own dropout mask applied, exactly as the fold applies it:
 *   m = g * (1 / (1 - p)) where kept, else 0) to the owner of its id, in token
 *   order; each owner receives the ranks' rows in rank order, which is global
 *   token order for the concatenated batch, and runs clembed_optimizer_step on
 *   them, whose fold sorts stably by row: every row folds the same values in
 *   the same order as on one device, from 0, then scale, then (with
 *   scale_grad_by_freq) the division by the number of contributions the owner
 *   received for that row, which is the id's count over every rank. No partial
 *   sum is ever formed on the sending side (that would change the order of
 *   the additions), so a row's gradient crosses the network once per token.
 *   Weight decay, the step and the states are the owner's, as on one device,
 *   and so is the write back: with stochastic_rounding, each owner steps its
 *   shard with first_row moved on by the shard's first row, so every element
 *   draws the random bits of its row in the whole table;
 * - embedding_bag: each rank's bags are clembed_embedding_bag's on the whole
 *   table: the rank fetches its ids' rows as embed does and pools its own
 *   bags over them (each bag over its ids in ascending position);
 * - bag_optimizer_step: the table and its state after
 *   clembed_bag_optimizer_step of one device. Each rank forms on the host the
 *   contribution of each of its ids that one device's fold adds (one float
 *   operation each) and sends it to the owner as a token's row is sent above:
 *   the same values, folded in the same global order, the same rows stepped.
 * The exactness holds for F32, F16 and BF16 tables and gradients, any rank
 * count and any split of the batch, on devices that give clembed's
 * operations the same bits (every OpenCL device does for lookup, embed and
 * the optimizer steps; ADAGRAD, ROWWISE_ADAGRAD and ADAM also need
 * correctly rounded sqrt and division, CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT, on
 * every rank's device, as one device needs them to match another).
 *
 * Collectives. Every function taking a table but clembed_mpi_table_shard and
 * clembed_mpi_table_state is collective over the table's communicator: every
 * rank calls it, in the same order, with the same table. Each first agrees,
 * with one MPI_Allreduce, on what must agree (the call, the table's shape and
 * dtype, the tensor name, the options that are not a rank's own data: scale,
 * index policy, padding_idx, scale_grad_by_freq, the optimizer's kind and
 * settings, the init's parameters); a mismatch returns
 * CLEMBED_ERR_INVALID_ARGUMENT on every rank, the message naming the field,
 * and nothing else is done. A rank's own bad argument (a NULL, a matrix of the
 * wrong shape, a bad option) is refused on that rank with the usual message
 * naming the argument; in the forward the other ranks go on and get their
 * rows (the rank still serves its shard); in a step and in create, load and
 * init every rank returns an error and nothing changes (the others:
 * CLEMBED_ERR_INVALID_ARGUMENT naming the rank). A rank whose device or host
 * memory fails later in a call (its shard could not be made, served or
 * stepped) makes every rank return that rank's own status (an OpenCL error,
 * CLEMBED_ERR_OUT_OF_MEMORY), the message naming the rank; in a step the other
 * shards are stepped all the same. No input makes a rank hang:
 * every rank reaches every collective of a call whatever its arguments; only
 * a NULL table (there is no communicator to speak on) or a rank that does not
 * call returns at once / leaves the others waiting, as with any MPI
 * collective.
 *
 * Errors. The failure's message and detail are on the rank's context
 * (clembed_context_message, clembed_context_error; operation
 * "clembed_mpi_..."). A bad id is the call's result on the rank that passed
 * it: CLEMBED_ERR_INDEX_OUT_OF_RANGE, the detail naming "ids", its local
 * position and its value, and its row as the index policy says (CHECK: a zero
 * row in the forward, no contribution in a step); the other ranks return
 * CLEMBED_OK with correct results. Ids are checked against the whole table
 * on the rank that passed them. A device or host failure while serving rows
 * (out of memory) is returned on every rank. A failed MPI call is
 * CLEMBED_ERR_COMMUNICATION with MPI's error string (the communicator's error
 * handler is set to MPI_ERRORS_RETURN).
 *
 * Sizes. A rank passes at most (INT_MAX / number of ranks) ids per call (MPI
 * counts are int; past that the call refuses them on that rank), and a row
 * holds at most INT_MAX / 4 values (create and load refuse more).
 */
#ifndef CLEMBED_MPI_H
#define CLEMBED_MPI_H

#include "clembed.h"
#include "clembed_io.h"

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clembed_mpi_table clembed_mpi_table; /* opaque */

/* Creates a rows x cols table of dtype (zeros) split over comm's ranks, each
 * rank's shard on its ctx's device. Collective: the ranks must agree on rows,
 * cols and dtype, else CLEMBED_ERR_INVALID_ARGUMENT on every rank and *t NULL.
 * The table keeps ctx (which must outlive it) and a duplicate of comm. Any
 * dtype clembed_matrix_create takes; quantized tables can be looked up, not
 * trained. */
CLEMBED_API clembed_status clembed_mpi_table_create(clembed_context *ctx, MPI_Comm comm, size_t rows, size_t cols,
                                                    clembed_dtype dtype, clembed_mpi_table **t);

/* Creates the table from tensor `name` of a file each rank has opened itself
 * (the same file, or copies of it): each rank reads and uploads only its own
 * rows (clembed_matrix_load_rows), with the bits of clembed_matrix_load. The
 * ranks must agree on the name, the dtype and the tensor's shape and stored
 * type, else CLEMBED_ERR_INVALID_ARGUMENT on every rank; a rank that cannot
 * load (a missing tensor, out of memory) fails every rank. */
CLEMBED_API clembed_status clembed_mpi_table_load(clembed_context *ctx, MPI_Comm comm, const clembed_file *f,
                                                  const char *name, clembed_dtype dtype, clembed_mpi_table **t);

/* Loads tensor `name` of a file each rank has opened itself (the same file,
 * or copies of it; NULL: the only tensor, or a GGUF file's token_embd.weight)
 * into an existing table of its shape: each rank reads only its own part (its
 * rows, or a feature set's COLUMN table's block of every row), a piece of at
 * most 16 MiB of rows at a time, with the bits of clembed_matrix_load. The
 * table's optimizer state is kept. The ranks agree on the name and the
 * tensor's stored type; a tensor of another shape (CLEMBED_ERR_INVALID_ARGUMENT,
 * naming both shapes) or a rank that cannot read its part fails every rank.
 * Collective. How a feature set's tables are filled from a model's file. */
CLEMBED_API clembed_status clembed_mpi_table_load_into(clembed_mpi_table *t, const clembed_file *f, const char *name);

/* Releases the shard, its optimizer state and the communicator. Collective.
 * NULL is a no-op. */
CLEMBED_API void clembed_mpi_table_release(clembed_mpi_table *t);

/* This rank's rows: *first_row receives the global index of its first row and
 * *rows a view of them (rows x cols, possibly 0 rows), owned by the table and
 * valid until release; reads and writes through it go to the table. Not
 * collective. Either output may be NULL. */
CLEMBED_API clembed_status clembed_mpi_table_shard(const clembed_mpi_table *t, size_t *first_row,
                                                   clembed_matrix *rows);

/* The shard of an optimizer state (which 1: o->state, 2: o->state2 of the
 * optimizer's kind, as clembed_optimizer describes them, with this shard's
 * rows), made by the first step; for checkpoints. A view owned by the table.
 * CLEMBED_ERR_INVALID_ARGUMENT when the table has no such state (no step yet,
 * SGD, state2 of ADAGRAD). *kind (may be NULL) receives the optimizer kind.
 * Not collective. */
CLEMBED_API clembed_status clembed_mpi_table_state(const clembed_mpi_table *t, int which,
                                                   clembed_optimizer_kind *kind, clembed_matrix *state);

/* Philox initialisation with the whole table's bits (see the top). Collective;
 * the ranks agree on the parameters. Arguments as clembed_matrix_init_*. */
CLEMBED_API clembed_status clembed_mpi_table_init_normal(clembed_mpi_table *t, float mean, float std, uint64_t seed);
CLEMBED_API clembed_status clembed_mpi_table_init_uniform(clembed_mpi_table *t, float low, float high,
                                                          uint64_t seed);

/* The forward, clembed_embed on this rank's ids with the table's rows: out
 * (ids->count x cols, any float dtype, on this rank's ctx) receives this
 * rank's rows. opt NULL means clembed_embed_defaults(). Collective and
 * blocking (it returns when out is written, or with the call's deferred
 * error). Each rank asks every owner once for each distinct row of its batch
 * (ids out, rows back) and runs clembed_embed on the rows it got: every option
 * of clembed_embed works, with each rank's positions, sequence offsets,
 * position table and dropout its own. With plain options (scale 1, no
 * positions, segments, norm or dropout) and an out of the rows' dtype (the
 * table's; F32 for block-quantized tables) in one buffer the host can map,
 * the rank writes out on the host, mapped, from the rows it got: the same
 * bits. On a CPU device that keeps denormals (CL_FP_DENORM; not with
 * CLEMBED_TUNING=gpu) the host also reads the rows asked of the rank's shard
 * from it, mapped (where the device shares host memory and the shard is one
 * buffer), and writes an F32 out from F16 or BF16 rows, widening each value
 * as the device does (a NaN made quiet): the same bits again. When the call
 * fails for another reason than a bad id, out's
 * contents are unspecified. Agreed: scale, policy, padding_idx, padding_keeps_row
 * (1: the padding row is fetched and read as stored, as clembed_embed reads it).
 * opt is read as every clembed call reads it (struct_size, clembed.h's "Option
 * structs"; so are the options and optimizers of the calls below).
 * A bad id: see the top; an error of the rank's own options (a position past
 * its position table, a bad sequence offset) is what clembed_embed reports
 * for its batch. */
CLEMBED_API clembed_status clembed_mpi_embed(clembed_mpi_table *t, const clembed_ids *ids,
                                             const clembed_embed_options *opt, clembed_matrix *out);

/* The bag forward, clembed_embedding_bag on this rank's ids and offsets with
 * the whole table: out (bags x cols, F32, F16 or BF16, on this rank's ctx)
 * receives this rank's bags, with the bits one device gives for them (each
 * bag is pooled over its own ids, in ascending position). opt NULL means
 * clembed_bag_defaults(). The rank fetches each distinct row of its ids from
 * its owner, as clembed_mpi_embed does (ids out, rows back in the table's
 * dtype, block-quantized rows as F32), and pools them with
 * clembed_embedding_bag on the matrix of the rows it received, with its own
 * offsets (NULL: fixed-size bags), per_sample_weights and mode; max_rows (MAX)
 * names the whole table's rows (the input of clembed_mpi_bag_optimizer_step).
 * Agreed: mode, policy, padding_idx and whether per_sample_weights are given.
 * A bad id: see the top; a bad offset is what clembed_embedding_bag reports
 * for the rank's batch (a deferred CLEMBED_ERR_INDEX_OUT_OF_RANGE naming
 * "offsets"). Collective and blocking. */
CLEMBED_API clembed_status clembed_mpi_embedding_bag(clembed_mpi_table *t, const clembed_ids *ids,
                                                     const clembed_ids *offsets, const clembed_bag_options *opt,
                                                     clembed_matrix *out);

/* One sparse optimizer step of the whole table on every rank's batch:
 * clembed_optimizer_step of one device on the concatenated batch (see the
 * top). grad_out (ids->count x cols, F32, F16 or BF16) and ids are this
 * rank's. opt NULL means clembed_backward_defaults() (deterministic and
 * accumulate are ignored, as in clembed_optimizer_step); a position_grad is
 * refused (CLEMBED_ERR_INVALID_ARGUMENT: a sharded step does not fold the
 * position table's gradient; take it with clembed_backward on the rank's
 * batch). o->state and o->state2 must be NULL: the state lives with each
 * shard, made (zeros) by the table's first step, and a later step of another
 * kind is CLEMBED_ERR_INVALID_ARGUMENT. o->step as in one process (ADAM's t,
 * and stochastic rounding's step; the same on every rank). o->stochastic_rounding
 * and o->seed as in clembed_optimizer_step; o->first_row is the whole table's
 * (0 for the table itself), each shard's step adds its first row to it. Agreed: scale, policy, padding_idx,
 * scale_grad_by_freq and every field of o; dropout and its seed are each
 * rank's own (the mask of its own forward). Collective and blocking. */
CLEMBED_API clembed_status clembed_mpi_optimizer_step(clembed_mpi_table *t, const clembed_matrix *grad_out,
                                                      const clembed_ids *ids, const clembed_backward_options *opt,
                                                      const clembed_optimizer *o);

/* One sparse optimizer step of the whole table on every rank's bags:
 * clembed_bag_optimizer_step of one device on the concatenated batch (the
 * table and its state, bit for bit). grad_out (bags x cols, F32, F16 or BF16),
 * ids, offsets (NULL: fixed-size bags) and opt (its max_rows under MAX, as
 * clembed_mpi_embedding_bag wrote it; NULL means clembed_bag_defaults()) are
 * this rank's. Each rank forms on the host, from its grad_out, the
 * contributions of its ids that one device's bag fold adds (g_b, w_j * g_b,
 * g_b / count_b; under MAX g_b in the columns whose max_rows element names the
 * row, from the bag's first id of that row, and nothing from rows max_rows
 * does not name), and sends them, as F32 rows, to the owners exactly as
 * clembed_mpi_optimizer_step sends its tokens' rows: each owner folds them in
 * global id order and steps with clembed_optimizer_step (scale 1, no
 * frequency scaling). The rows stepped are those one device steps. The
 * optimizer and its state as in clembed_mpi_optimizer_step. Agreed: mode,
 * policy, padding_idx, whether per_sample_weights are given and every field of
 * o. A bad offset is the rank's own failure here (CLEMBED_ERR_INDEX_OUT_OF_RANGE
 * naming "offsets", its position and value; no rank steps). Collective and
 * blocking. */
CLEMBED_API clembed_status clembed_mpi_bag_optimizer_step(clembed_mpi_table *t, const clembed_matrix *grad_out,
                                                          const clembed_ids *ids, const clembed_ids *offsets,
                                                          const clembed_bag_options *opt, const clembed_optimizer *o);

/* Checkpoints: the tables (and the optimizer states their steps made) in one
 * file of clembed_checkpoint_save's format (clembed_io.h), which loads on any
 * number of ranks, with clembed_mpi_checkpoint_load, and in one process, with
 * clembed_checkpoint_load (a whole table into one matrix). Table i is saved
 * under names[i], its states under "NAMES[i].momentum1" (and ".momentum2" for
 * ADAM) with "clembed.optimizer.NAMES[i]": "adagrad", "rowwise_adagrad" or
 * "adam" in the metadata, after the caller's n_meta entries (meta_keys[j]:
 * meta_values[j], as clembed_checkpoint_save takes them: step counts, seeds).
 * Every rank writes its own rows of each tensor at their place in the file
 * (pwrite into one temporary file, which rank 0 creates, then a CRC-32C of each
 * tensor from the ranks' in rank order, the header, fsync, the rename and the
 * folder's fsync by rank 0): the path must be on a file system every rank sees
 * (one machine, NFS, a parallel file system); a rank that cannot open the
 * temporary file says so. Atomic as clembed_checkpoint_save: a failure on any
 * rank (CLEMBED_ERR_FILE naming the path on that rank) leaves the previous file
 * whole and no temporary file. Collective over the tables' communicator (every
 * table over the same one, or a duplicate of it); the ranks agree on path, n,
 * the names, the states and the metadata (else CLEMBED_ERR_INVALID_ARGUMENT on
 * every rank, nothing written). Blocking; each rank reads its rows a piece of
 * at most 32 MiB at a time. The file's bytes do not depend on the number of
 * ranks that saved it, nor on the plans of a feature set's tables: a COLUMN
 * table's block owners write their block of every row at its place, and rank 0
 * reads such a tensor back from the temporary file for its CRC-32C. */
CLEMBED_API clembed_status clembed_mpi_checkpoint_save(const char *path, clembed_mpi_table *const *tables,
                                                       const char *const *names, size_t n,
                                                       const char *const *meta_keys,
                                                       const char *const *meta_values, size_t n_meta);

/* Loads tables saved by clembed_mpi_checkpoint_save (on any number of ranks)
 * or by clembed_checkpoint_save (tensors of the tables' shapes and dtypes),
 * each rank reading only its own rows from its mapping of the file: tables[i]
 * from tensor names[i], and where the file holds its optimizer state (the
 * metadata's "clembed.optimizer.NAMES[i]", or the Python package's
 * "NAMES[i].optimizer") the state too, made for the table
 * if it had none (so that the next step continues the saved run); a table
 * whose saved self had no state loses its own. Every check comes before any
 * row is written, on every rank: the file is a checkpoint, every tensor is
 * there with the table's dtype and shape, a table's state is of the kind its
 * table already has (if any), and every tensor's CRC-32C (combined from the
 * ranks' rows) is the one the file records; a failure is
 * CLEMBED_ERR_INVALID_ARGUMENT on every rank, naming the tensor and what
 * differs, and no table is modified. Collective; the ranks agree on path, n
 * and the names. The caller's metadata is read with clembed_file_open and
 * clembed_file_metadata_find. Resuming is exact: K steps equal k steps, a
 * save on N ranks, a load on M and K - k steps, bit for bit. A feature set's
 * COLUMN table takes its block of every row (rank 0 checks the whole tensor's
 * CRC-32C); a file's rowwise_adagrad state for a COLUMN table is refused
 * (CLEMBED_ERR_UNSUPPORTED, naming the table: that state is a whole row's). */
CLEMBED_API clembed_status clembed_mpi_checkpoint_load(const char *path, clembed_mpi_table *const *tables,
                                                       const char *const *names, size_t n);

/* ------------------------------------------------------------------------
 * Sharded feature sets: a recommendation model's many tables over the ranks,
 * each table by its own plan, and one call per batch for all their features.
 *
 * Plans (clembed_shard_kind):
 * - CLEMBED_SHARD_ROW: rows over every rank, as clembed_mpi_table_create;
 * - CLEMBED_SHARD_TABLE: the whole table on one rank (owner);
 * - CLEMBED_SHARD_COLUMN: every row, its columns cut into blocks over the
 *   ranks (block j of k: the columns [j*u/k, (j+1)*u/k) of the row's u units,
 *   a unit one value of a float type or one block of a block-quantized type;
 *   k = min(ranks, u)); not for FBGEMM's row-wise types (a row's scale and
 *   bias span its columns), nor for ROWWISE_ADAGRAD (its state is the whole
 *   row's), stochastic rounding of an F16 or BF16 table (its bits are keyed by
 *   the whole row's column) or, for a MAX feature, ADAM or weight decay (one
 *   device steps every column of a row that max_rows names in any column,
 *   and those change a column whose gradient is 0) in a step: those are
 *   refused, CLEMBED_ERR_UNSUPPORTED;
 * - CLEMBED_SHARD_TABLE_ROW: rows over the ranks of one node (the ranks
 *   MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) puts with `owner`, rank 0 with
 *   owner -1; they must be consecutive ranks of comm);
 * - CLEMBED_SHARD_AUTO: the planner's choice (below).
 *
 * The bits. clembed_mpi_embedding_bags gives each rank, bit for bit, the
 * output one device's clembed_embedding_bags gives for the ranks' batches
 * concatenated in rank order (bags of rank 0, then of rank 1, ...), and
 * clembed_mpi_bags_optimizer_step leaves every table and its optimizer state
 * as one device's clembed_bags_optimizer_step on that concatenated batch, for
 * any plan of every table and any number of ranks: a bag is pooled over its
 * ids in ascending position whichever rank pools it (column by column, so a
 * column block pools exactly as the whole row), and a row's contributions
 * are folded in global id order on the one rank that steps it.
 * - TABLE and COLUMN features: every rank sends each owner its bags (offsets,
 *   ids, weights; in the step its gradient's columns and MAX's max_rows) in
 *   one exchange for all such features; each owner pools (or steps) the
 *   ranks' bags of all its features with one clembed_embedding_bags (or
 *   clembed_bags_optimizer_step) on the concatenated batch, and in the
 *   forward sends each rank its bags' pooled rows back in a second exchange:
 *   the pooled bytes cross the network, not the rows.
 * - ROW and TABLE_ROW features: what clembed_mpi_embedding_bag and
 *   clembed_mpi_bag_optimizer_step do for one table, for all of them in the
 *   same exchanges as the TABLE and COLUMN features: in the forward every
 *   rank asks each owner for the distinct rows of its bags of every such
 *   table (in the first exchange), the owners gather them on their devices
 *   and send them back (in the second), and each rank pools its own bags on
 *   the rows it received; in the step every rank sends each owner, in the
 *   one exchange, a contribution row per id of its bags that reaches a row of
 *   that owner, and each owner steps its rows on them in global id order.
 *   A call makes two MPI_Alltoallv in the forward and one in the step,
 *   whatever the plans and the number of tables.
 *
 * Collective: every rank calls each function with the same set, in the same
 * order. A rank's own bad argument (a NULL, a wrong shape, an offset that
 * does not rise, a feature's options that differ from another rank's) fails
 * the call on every rank before anything moves (the other ranks:
 * CLEMBED_ERR_INVALID_ARGUMENT naming the rank). A bad id is the call's
 * result on the rank that passed it only (CLEMBED_ERR_INDEX_OUT_OF_RANGE, the
 * detail "ids", the message naming the feature, the position and the id),
 * the id treated as the index policy says, as on one device. A rank whose
 * device fails while pooling or stepping for others makes every rank return
 * its status, naming it.
 * ------------------------------------------------------------------------ */

typedef enum clembed_shard_kind {
  CLEMBED_SHARD_ROW = 0,
  CLEMBED_SHARD_TABLE = 1,
  CLEMBED_SHARD_COLUMN = 2,
  CLEMBED_SHARD_TABLE_ROW = 3,
  CLEMBED_SHARD_AUTO = 4
} clembed_shard_kind;

typedef struct clembed_mpi_table_spec {
  const char *name;          /* the table's name (checkpoints, the planner's report); NULL: "table<i>" */
  size_t rows, cols;
  clembed_dtype dtype;
  clembed_shard_kind shard;  /* AUTO: the planner's choice */
  int owner;                 /* TABLE: the rank; TABLE_ROW: a rank of the node; -1 lets the planner choose */
  const clembed_ids *id_sample; /* optional: ids of the table's feature this rank has seen in one batch */
  size_t sample_bags;        /* optional: the bags id_sample's ids make (0: not known) */
} clembed_mpi_table_spec;

typedef struct clembed_mpi_feature_set clembed_mpi_feature_set; /* opaque */

/* Creates the n tables (zeros) of a feature set over comm, each by its plan;
 * the AUTO ones planned here. Collective: the ranks agree on n and every
 * spec but id_sample (else CLEMBED_ERR_INVALID_ARGUMENT on every rank naming
 * the table, and *s NULL). The planner, run alike on every rank from what
 * every rank knows (one MPI_Allgather): each table's bytes (rows x row bytes,
 * plus a float a value for an optimizer state), each rank's device memory
 * (CL_DEVICE_GLOBAL_MEM_SIZE) and
 * the ids a batch reads from each table (the ranks' id_samples: their ids and
 * distinct ids summed; without any, one id a bag for every table) and the
 * bags of a batch (the ranks' sample_bags summed, the largest over the
 * tables; where none is given, the fewest ids a table's samples hold). A rank's
 * cost is the bytes it moves per batch: the rows its device reads for pooling
 * and serving, and twice the bytes it sends and receives (ids, pooled rows,
 * rows: each is copied on the host at both ends), and on more than one rank
 * 128 KiB for each table cut by rows (a fixed cost of its own: the host work
 * of its requests and rows). Each
 * table goes whole to one rank (TABLE) when that costs the ranks less in all
 * than cutting it by rows (ROW) and its owner's part is no more than a rank's
 * share of the whole set's cost (else a hot table would hold up every rank);
 * the TABLE tables are placed the largest owner's cost first, each on the
 * rank whose largest cost it raises least, an AUTO table within 3/4 of that
 * rank's device memory (the plans forced by the caller are taken as they
 * are); a
 * table no rank can hold goes by rows (TABLE_ROW over the least loaded node
 * that holds it where the ranks span several nodes, else ROW). A forced plan
 * the ranks cannot hold (a TABLE owner
 * out of range, a COLUMN table of a row-wise type) is refused, naming the
 * table. The set keeps ctx (which must outlive it) and a duplicate of comm. */
CLEMBED_API clembed_status clembed_mpi_feature_set_create(clembed_context *ctx, MPI_Comm comm,
                                                          const clembed_mpi_table_spec *tables, size_t n,
                                                          clembed_mpi_feature_set **s);

/* Table `table`'s plan: *kind (never AUTO), the first rank holding part of it
 * and how many consecutive ranks do (TABLE: the owner and 1; ROW: 0 and the
 * ranks; COLUMN: 0 and the blocks; TABLE_ROW: the node's first rank and its
 * ranks). Not collective; outputs may be NULL. */
CLEMBED_API clembed_status clembed_mpi_feature_set_plan(const clembed_mpi_feature_set *s, size_t table,
                                                        clembed_shard_kind *kind, int *first_rank, int *ranks);

/* Table `table` as a clembed_mpi_table, owned by the set, for
 * clembed_mpi_table_init_normal/_uniform and clembed_mpi_table_load_into (the
 * whole table's bits, whatever the plan), clembed_mpi_checkpoint_save / _load
 * (the same file whatever the plan and rank count: a table saved under one
 * plan loads under another), clembed_mpi_table_shard / _state, and, for ROW,
 * TABLE and TABLE_ROW tables, every other clembed_mpi_table call. A COLUMN
 * table's shard is its block of columns of every row (first_row 0); the
 * row-wise calls (embed, embedding_bag and their steps) refuse it
 * (CLEMBED_ERR_UNSUPPORTED); its checkpoint is written a block of a row at a
 * time, and rank 0 reads each of its tensors back for the checksum. NULL for a
 * NULL set or a table past n. */
CLEMBED_API clembed_mpi_table *clembed_mpi_feature_set_table(clembed_mpi_feature_set *s, size_t table);

/* Releases every table and the communicator. Collective. NULL is a no-op. */
CLEMBED_API void clembed_mpi_feature_set_release(clembed_mpi_feature_set *s);

/* The forward of all the set's features at once: features[i] (n = the set's
 * tables, feature i reads table i; features[i].table is unused) holds this
 * rank's ids, offsets (NULL: fixed-size bags) and options (any mode, policy,
 * padding_idx, per_sample_weights, MAX's max_rows; remap refused) for out->rows
 * bags; out (bags x the sum of the tables' cols, F32, F16 or BF16, on this
 * rank's ctx) receives this rank's bags, feature i in its own block of
 * columns, bit for bit one device's clembed_embedding_bags on the
 * concatenated batch (see above; MAX's max_rows name the whole table's rows).
 * Agreed: out's dtype and each feature's mode, policy, padding_idx and
 * whether weights and max_rows are given. Collective and blocking. */
CLEMBED_API clembed_status clembed_mpi_embedding_bags(clembed_mpi_feature_set *s, const clembed_bag_feature *features,
                                                      size_t n, clembed_matrix *out);

/* One step of every table on every rank's bags: clembed_bags_optimizer_step
 * of one device on the concatenated batch (see above). grad_out (the
 * forward's shape, F32, F16 or BF16) and features are this rank's; o[i] is
 * table i's optimizer, its state NULL (the state lives with each table's
 * parts, made by the first step, as in clembed_mpi_bag_optimizer_step).
 * Agreed: grad_out's dtype, what the forward agrees on and every field of
 * every o[i]. Collective and blocking. */
CLEMBED_API clembed_status clembed_mpi_bags_optimizer_step(clembed_mpi_feature_set *s,
                                                           const clembed_bag_feature *features, size_t n,
                                                           const clembed_matrix *grad_out,
                                                           const clembed_optimizer *o);

#ifdef __cplusplus
}
#endif

#endif /* CLEMBED_MPI_H */
