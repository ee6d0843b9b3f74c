/* The sharded table: create, load, release, the shard and state views, and
 * the Philox initialisation with the whole table's bits. */
#include "mpi_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* MPI is usable by this thread at the level the library needs. */
static void check_mpi(const char *op, ce_mpi_error *e) {
  int init = 0, fin = 0, level = MPI_THREAD_SINGLE, main_thread = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "comm", -1, 0, "%s: MPI is %s", op,
                fin ? "finalized" : "not initialised (call MPI_Init_thread first)");
    return;
  }
  MPI_Query_thread(&level);
  MPI_Is_thread_main(&main_thread);
  if (level < MPI_THREAD_FUNNELED)
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "comm", -1, level,
                "%s: MPI was initialised with MPI_THREAD_SINGLE; clembed_mpi needs MPI_THREAD_FUNNELED or more "
                "(MPI_Init_thread), since the OpenCL runtime has threads of its own", op);
  else if (!main_thread && level < MPI_THREAD_SERIALIZED)
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "comm", -1, level,
                "%s: called from another thread than the one that initialised MPI (MPI_THREAD_FUNNELED)", op);
}

static void release_table(clembed_mpi_table *t) {
  if (!t) return;
  ce_mpi_error ignored = {0};
  ce_mpi_unmap_matrix(t, &ignored);
  ce_mpi_stage_release(t);
  clembed_matrix_release(&t->shard);
  clembed_matrix_release(&t->state);
  clembed_matrix_release(&t->state2);
  clembed_matrix_release(&t->scratch);
  for (int k = 0; k < CE_MPI_NBUF; k++) free(t->buf[k].p);
  free(t->bounds);
  free(t->counts);
  free(t->wcounts);
  if (t->comm != MPI_COMM_NULL) MPI_Comm_free(&t->comm);
  free(t);
}

/* The part of create and load before the shard: the checks every rank makes
 * on its own, the communicator, the agreement (the call's own fields are in
 * v already), the bounds. NULL with e set on failure (on every rank). */
static clembed_mpi_table *begin(clembed_context *ctx, MPI_Comm comm, const char *op, size_t rows, size_t cols,
                                clembed_dtype dtype, const ce_mpi_layout *lay, ce_mpi_vote *v, ce_mpi_error *e) {
  clembed_mpi_table *t = calloc(1, sizeof *t);
  check_mpi(op, e);
  if (!t) {
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
    return NULL; /* nothing to speak on: the peers' create fails in MPI_Comm_dup or waits */
  }
  t->ctx = ctx;
  t->comm = MPI_COMM_NULL;
  t->queue = clembed_context_queue(ctx);
  if (t->queue && clGetCommandQueueInfo(t->queue, CL_QUEUE_CONTEXT, sizeof t->cl, &t->cl, NULL) != CL_SUCCESS)
    t->cl = NULL;
  if (!strcmp(clembed_dtype_name(dtype), "unknown"))
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "dtype", -1, (int64_t)dtype, "%s: unknown dtype %d", op, (int)dtype);
  else if (!clembed_dtype_block_values(dtype) && !clembed_dtype_row_bytes(dtype, cols))
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "cols", -1, (int64_t)cols, "%s: %s cannot have %zu cols", op,
                clembed_dtype_name(dtype), cols);
  else if (clembed_dtype_block_values(dtype) && cols % clembed_dtype_block_values(dtype))
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "cols", -1, (int64_t)cols,
                "%s: cols %zu is not a multiple of the dtype's block of %zu values", op, cols,
                clembed_dtype_block_values(dtype));
  else if (cols > (size_t)INT32_MAX / 4) /* a row as float32 values (gradients, dequantized rows) */
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "cols", -1, (int64_t)cols,
                "%s: a row of %zu float32 values is more than INT_MAX bytes, the most one MPI exchange item holds", op,
                cols);
  if (comm == MPI_COMM_NULL) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "comm", -1, 0, "%s: comm is MPI_COMM_NULL", op);
    goto fail;
  }
  {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) goto fail;
  }
  if (!ce_mpi_ok(e, MPI_Comm_dup(comm, &t->comm), "MPI_Comm_dup")) {
    t->comm = MPI_COMM_NULL;
    goto fail;
  }
  MPI_Comm_set_errhandler(t->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(t->comm, &t->rank);
  MPI_Comm_size(t->comm, &t->size);
  ce_mpi_agree(v, "rows", rows);
  ce_mpi_agree(v, "cols", cols);
  ce_mpi_agree_as(v, "dtype", CE_MPI_DTYPE, (uint64_t)dtype);
  if (!ce_mpi_vote_run(t->comm, t->rank, t->size, v, e->status != CLEMBED_OK, e)) goto fail;
  if (ce_mpi_vote_outcome(v, op, e) != CLEMBED_OK) goto fail;
  t->rows = rows;
  t->cols = cols;
  t->dtype = dtype;
  t->bounds = malloc(((size_t)t->size + 1) * sizeof *t->bounds);
  t->counts = malloc(4 * (size_t)t->size * sizeof *t->counts);
  t->wcounts = malloc(2 * (size_t)t->size * sizeof *t->wcounts);
  if (t->bounds && t->counts && t->wcounts) {
    /* r * rows / k without overflow: r*(rows/k) + r*(rows%k)/k, over the
     * ranks [first, first + k) (every rank but for a feature set's tables) */
    int first = lay ? lay->first : 0, k = lay ? lay->ranks : t->size;
    if (first < 0 || k < 1 || first > t->size - k) first = 0, k = t->size; /* the caller checked it */
    if (lay && lay->column) k = 1; /* the row-wise calls see the first rank of a COLUMN table as its owner */
    size_t q = rows / (size_t)k, rem = rows % (size_t)k;
    t->owner_scale = rows ? (double)t->size / (double)rows : 0.0;
    for (int r = 0; r <= t->size; r++) {
      int j = r < first ? 0 : r > first + k ? k : r - first;
      t->bounds[r] = (size_t)j * q + (size_t)((unsigned long long)j * rem / (unsigned long long)k);
      if (r && t->bounds[r] - t->bounds[r - 1] > t->max_shard) t->max_shard = t->bounds[r] - t->bounds[r - 1];
    }
    if (lay && lay->column) {
      t->column = 1;
      t->col_first = lay->col_first;
    }
  } else {
    ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
  }
  return t;
fail:
  release_table(t);
  return NULL;
}

/* The end of create and load: every rank learns whether every shard was made. */
static clembed_status finish(clembed_mpi_table *t, const char *op, ce_mpi_error *e, clembed_mpi_table **out) {
  clembed_context *ctx = t->ctx;
  if (e->status == CLEMBED_OK) {
    clembed_status s = clembed_matrix_create(ctx, 1, 1, CLEMBED_F32, &t->scratch);
    if (s == CLEMBED_OK) s = clembed_finish(ctx);
    if (s != CLEMBED_OK) ce_mpi_fail_from(e, ctx, s);
  }
  clembed_status theirs = CLEMBED_OK;
  int first = ce_mpi_first_failed(t->comm, t->rank, t->size, e->status, e, &theirs);
  if (first >= 0 && e->status == CLEMBED_OK)
    ce_mpi_fail(e, theirs, "", first, 0,
                "%s: rank %d could not make its shard (its context's message says why)", op, first);
  if (e->status != CLEMBED_OK) {
    release_table(t);
    return ce_mpi_report(ctx, op, e);
  }
  *out = t;
  return CLEMBED_OK;
}

clembed_status clembed_mpi_table_create(clembed_context *ctx, MPI_Comm comm, size_t rows, size_t cols,
                                        clembed_dtype dtype, clembed_mpi_table **t) {
  const char *op = "clembed_mpi_table_create";
  ce_mpi_error e = {0};
  ce_mpi_vote v = {0};
  if (t) *t = NULL;
  if (!ctx || !t) /* still a collective: the peers must not wait */
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, ctx ? "t" : "ctx", -1, 0, "%s: %s is NULL", op, ctx ? "t" : "ctx");
  ce_mpi_agree_as(&v, "the call", CE_MPI_CALL, CE_MPI_CALL_CREATE);
  clembed_mpi_table *tab = begin(ctx, comm, op, rows, cols, dtype, NULL, &v, &e);
  if (!tab) return ce_mpi_report(ctx, op, &e);
  size_t first = tab->bounds[tab->rank], n = tab->bounds[tab->rank + 1] - first;
  if (e.status == CLEMBED_OK) {
    clembed_status s = clembed_matrix_create(ctx, n, cols, dtype, &tab->shard);
    if (s != CLEMBED_OK) ce_mpi_fail_from(&e, ctx, s);
  }
  return finish(tab, op, &e, t);
}

clembed_status ce_mpi_table_create_laid(clembed_context *ctx, MPI_Comm comm, const char *op, size_t rows, size_t cols,
                                        clembed_dtype dtype, const ce_mpi_layout *lay, clembed_mpi_table **t) {
  ce_mpi_error e = {0};
  ce_mpi_vote v = {0};
  *t = NULL;
  ce_mpi_agree_as(&v, "the call", CE_MPI_CALL, CE_MPI_CALL_CREATE);
  ce_mpi_agree(&v, "the plan's first rank", (uint64_t)(int64_t)lay->first);
  ce_mpi_agree(&v, "the plan's ranks", (uint64_t)(int64_t)lay->ranks);
  ce_mpi_agree(&v, "the plan's kind", (uint64_t)lay->column);
  clembed_mpi_table *tab = begin(ctx, comm, op, rows, cols, dtype, lay, &v, &e);
  if (!tab) return ce_mpi_report(ctx, op, &e);
  if (e.status == CLEMBED_OK) {
    clembed_status s;
    if (lay->column) {
      int on = tab->rank >= lay->first && tab->rank < lay->first + lay->ranks;
      s = clembed_matrix_create(ctx, on ? rows : 0, on ? lay->col_width : cols, dtype, &tab->shard);
    } else {
      size_t first = tab->bounds[tab->rank];
      s = clembed_matrix_create(ctx, tab->bounds[tab->rank + 1] - first, cols, dtype, &tab->shard);
    }
    if (s != CLEMBED_OK) ce_mpi_fail_from(&e, ctx, s);
  }
  return finish(tab, op, &e, t);
}

clembed_status ce_mpi_refuse_column(const clembed_mpi_table *t, const char *op) {
  return clembed_context_fail(t->ctx, CLEMBED_ERR_UNSUPPORTED, op, "t", -1, 0,
                              "%s: t is a feature set's COLUMN table (its columns over the ranks): it is read and "
                              "stepped by clembed_mpi_embedding_bags and clembed_mpi_bags_optimizer_step, initialised "
                              "by clembed_mpi_table_init_*, loaded by clembed_mpi_table_load_into and checkpointed; the "
                              "row-wise calls take ROW, TABLE and TABLE_ROW tables", op);
}

/* A tensor's rows and cols as clembed_matrix_load counts them (clembed_io.h):
 * rows = the first dimension, cols = the product of the others; 1-D (n,) is
 * 1 x n, 0-D 1 x 1. 0 when the product overflows. */
static int tensor_shape(const clembed_tensor_info *info, uint64_t *rows, uint64_t *cols) {
  *rows = info->ndim >= 2 ? info->shape[0] : 1;
  *cols = 1;
  for (int d = info->ndim >= 2 ? 1 : 0; d < info->ndim; d++) {
    if (info->shape[d] && *cols > UINT64_MAX / info->shape[d]) return 0;
    *cols *= info->shape[d];
  }
  return 1;
}

/* The tensor clembed_matrix_load would take (name NULL: the only one, or a
 * GGUF file's token_embd.weight): its info and shape. 1 when found; else the
 * failure, naming "name", on e. */
static int find_tensor(const clembed_file *f, const char *name, const char *op, clembed_tensor_info *info,
                       uint64_t *rows, uint64_t *cols, ce_mpi_error *e) {
  size_t i = 0, n = clembed_file_tensor_count(f);
  clembed_status s = CLEMBED_OK;
  if (name || n != 1) s = clembed_file_find(f, name ? name : "token_embd.weight", &i);
  if (s == CLEMBED_OK) s = clembed_file_tensor_info(f, i, info);
  if (s != CLEMBED_OK) {
    ce_mpi_fail(e, s, "name", -1, 0, "%s: %s", op, clembed_last_error_message());
    return 0;
  }
  if (!tensor_shape(info, rows, cols) || *rows > SIZE_MAX || *cols > SIZE_MAX) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "name", -1, 0, "%s: tensor '%s' is too large for this process", op,
                info->name);
    return 0;
  }
  return 1;
}

clembed_status clembed_mpi_table_load(clembed_context *ctx, MPI_Comm comm, const clembed_file *f, const char *name,
                                      clembed_dtype dtype, clembed_mpi_table **t) {
  const char *op = "clembed_mpi_table_load";
  ce_mpi_error e = {0};
  ce_mpi_vote v = {0};
  uint64_t rows = 0, cols = 0;
  clembed_tensor_info info = {0};
  if (t) *t = NULL;
  if (!ctx || !t || !f)
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, !ctx ? "ctx" : !t ? "t" : "f", -1, 0, "%s: %s is NULL", op,
                !ctx ? "ctx" : !t ? "t" : "f");
  if (e.status == CLEMBED_OK) find_tensor(f, name, op, &info, &rows, &cols, &e);
  ce_mpi_agree_as(&v, "the call", CE_MPI_CALL, CE_MPI_CALL_LOAD);
  ce_mpi_agree_string(&v, "name", name);
  ce_mpi_agree_string(&v, "the tensor's stored type", info.type_name);
  clembed_mpi_table *tab = begin(ctx, comm, op, (size_t)rows, (size_t)cols, dtype, NULL, &v, &e);
  if (!tab) return ce_mpi_report(ctx, op, &e);
  size_t first = tab->bounds[tab->rank], n = tab->bounds[tab->rank + 1] - first;
  if (e.status == CLEMBED_OK) {
    clembed_status s = clembed_matrix_load_rows(ctx, f, name, dtype, first, n, &tab->shard);
    if (s != CLEMBED_OK) ce_mpi_fail_from(&e, ctx, s);
  }
  return finish(tab, op, &e, t);
}

static clembed_status write_rows(clembed_context *ctx, const clembed_matrix *m, size_t r0, size_t k, const char *host);

clembed_status clembed_mpi_table_load_into(clembed_mpi_table *t, const clembed_file *f, const char *name) {
  const char *op = "clembed_mpi_table_load_into";
  ce_mpi_error e = {0};
  ce_mpi_vote v = {0};
  if (!t)
    return ce_mpi_null_handle(op, "t");
  clembed_context *ctx = t->ctx;
  uint64_t rows = 0, cols = 0;
  clembed_tensor_info info = {0};
  clembed_status s = clembed_finish(ctx); /* an earlier call's pending error is this rank's answer */
  if (s != CLEMBED_OK) ce_mpi_fail_from(&e, ctx, s);
  else if (!f) ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "f", -1, 0, "%s: f is NULL", op);
  if (e.status == CLEMBED_OK && find_tensor(f, name, op, &info, &rows, &cols, &e) && /* of the table's shape */
      (rows != t->rows || cols != t->cols))
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "name", -1, 0, "%s: tensor '%s' is %llu x %llu; the table is %zu x %zu",
                op, info.name, (unsigned long long)rows, (unsigned long long)cols, t->rows, t->cols);
  ce_mpi_agree_as(&v, "the call", CE_MPI_CALL, CE_MPI_CALL_LOAD);
  ce_mpi_agree_string(&v, "name", name);
  ce_mpi_agree_string(&v, "the tensor's stored type", e.status == CLEMBED_OK ? info.type_name : NULL);
  if (!ce_mpi_vote_run(t->comm, t->rank, t->size, &v, e.status != CLEMBED_OK, &e) ||
      ce_mpi_vote_outcome(&v, op, &e) != CLEMBED_OK)
    return ce_mpi_report(ctx, op, &e);
  /* every rank its part: rows, or a COLUMN table's block of every row, a piece of rows at a time */
  size_t R = t->shard.rows, first = t->column ? 0 : t->bounds[t->rank];
  size_t rb = clembed_dtype_row_bytes(t->dtype, t->cols), wb = clembed_dtype_row_bytes(t->dtype, t->shard.cols);
  size_t unit = clembed_dtype_block_values(t->dtype) ? clembed_dtype_block_values(t->dtype) : t->cols;
  size_t c0 = t->column ? t->col_first / unit * clembed_dtype_row_bytes(t->dtype, unit) : 0;
  size_t step = R ? (size_t)(16u << 20) / (rb + 1) + 1 : 0;
  if (step > R) step = R;
  char *whole = R ? malloc(step * rb + 1) : NULL, *part = R && t->column ? malloc(step * wb + 1) : NULL;
  if (R && (!whole || (t->column && !part)))
    ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
  for (size_t r = 0; r < R && e.status == CLEMBED_OK; r += step) {
    size_t k = R - r < step ? R - r : step;
    clembed_matrix piece = {0};
    s = clembed_matrix_load_rows(ctx, f, name, t->dtype, first + r, k, &piece);
    if (s == CLEMBED_OK) s = clembed_matrix_read(ctx, &piece, whole, t->dtype);
    clembed_matrix_release(&piece);
    if (s == CLEMBED_OK && t->column)
      for (size_t q = 0; q < k; q++) memcpy(part + q * wb, whole + q * rb + c0, wb);
    if (s == CLEMBED_OK) s = write_rows(ctx, &t->shard, r, k, t->column ? part : whole);
    if (s != CLEMBED_OK) ce_mpi_fail_from(&e, ctx, s);
  }
  free(whole);
  free(part);
  clembed_status theirs = CLEMBED_OK;
  int bad = ce_mpi_first_failed(t->comm, t->rank, t->size, e.status, &e, &theirs);
  if (bad >= 0 && e.status == CLEMBED_OK)
    ce_mpi_fail(&e, theirs, "", bad, 0, "%s: rank %d could not load its part (its context's message says why)", op,
                bad);
  return ce_mpi_report(ctx, op, &e);
}

/* The calls are blocking: no work of the table's is in flight; work the caller
 * enqueued on the shard keeps its buffer (OpenCL counts references). */
void clembed_mpi_table_release(clembed_mpi_table *t) { release_table(t); }

clembed_status clembed_mpi_table_shard(const clembed_mpi_table *t, size_t *first_row, clembed_matrix *rows) {
  if (!t)
    return clembed_context_fail(NULL, CLEMBED_ERR_INVALID_ARGUMENT, "clembed_mpi_table_shard", "t", -1, 0,
                                "clembed_mpi_table_shard: t is NULL");
  if (first_row) *first_row = t->column ? 0 : t->bounds[t->rank];
  if (rows) *rows = t->shard;
  return CLEMBED_OK;
}

clembed_status clembed_mpi_table_state(const clembed_mpi_table *t, int which, clembed_optimizer_kind *kind,
                                       clembed_matrix *state) {
  const char *op = "clembed_mpi_table_state";
  if (!t) return clembed_context_fail(NULL, CLEMBED_ERR_INVALID_ARGUMENT, op, "t", -1, 0, "%s: t is NULL", op);
  const clembed_matrix *m = which == 1 ? &t->state : which == 2 ? &t->state2 : NULL;
  if (!m || !m->buffer)
    return clembed_context_fail(t->ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, "which", -1, which,
                                "%s: the table has no state %d (%s)", op, which,
                                which != 1 && which != 2 ? "which is 1 or 2"
                                : !t->has_state          ? "no optimizer step yet"
                                                         : "its optimizer has none");
  if (kind) *kind = t->kind;
  if (state) *state = *m;
  return CLEMBED_OK;
}

/* Rows [r0, r0 + k) of m written from host (rows of m's cols, in m's dtype),
 * piece by piece where m is split. */
static clembed_status write_rows(clembed_context *ctx, const clembed_matrix *m, size_t r0, size_t k, const char *host) {
  size_t count = 0, rb = clembed_dtype_row_bytes(m->dtype, m->cols);
  clembed_status s = clembed_matrix_pieces(ctx, m, 0, NULL, NULL, &count);
  if (s != CLEMBED_OK) return s;
  clembed_matrix *pieces = malloc((count ? count : 1) * sizeof *pieces);
  size_t *starts = malloc((count ? count : 1) * sizeof *starts);
  if (!pieces || !starts) {
    free(pieces);
    free(starts);
    return clembed_context_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "clembed_mpi_table", "", -1, 0,
                                "clembed_mpi_table: out of host memory for a piece of rows");
  }
  s = clembed_matrix_pieces(ctx, m, count, pieces, starts, &count);
  for (size_t i = 0; i < count && s == CLEMBED_OK; i++) {
    size_t lo = starts[i], hi = starts[i] + pieces[i].rows;
    size_t a = lo > r0 ? lo : r0, z = hi < r0 + k ? hi : r0 + k;
    if (a >= z) continue;
    clembed_matrix view = pieces[i];
    size_t ld = view.ld ? view.ld : view.cols;
    view.offset += (a - lo) * ld;
    view.rows = z - a;
    s = clembed_matrix_write(ctx, &view, host + (a - r0) * rb, m->dtype);
  }
  free(pieces);
  free(starts);
  return s;
}

/* A COLUMN table's block: whole rows of the table made a piece at a time
 * (clembed_matrix_init_*_at, the whole table's bits), the block's columns
 * read out and written to the shard. */
static clembed_status init_columns(clembed_mpi_table *t, int normal, float a, float b, uint64_t seed) {
  clembed_context *ctx = t->ctx;
  size_t R = t->shard.rows, w = t->shard.cols, C = t->cols, es = clembed_dtype_row_bytes(t->dtype, 1);
  if (!R || !w) return CLEMBED_OK;
  size_t step = (size_t)(16u << 20) / (C * es + 1) + 1;
  if (step > R) step = R;
  clembed_matrix tmp = {0};
  char *host = malloc(step * w * es);
  clembed_status s = host ? clembed_matrix_create(ctx, step, C, t->dtype, &tmp)
                          : clembed_context_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "clembed_mpi_table_init", "", -1, 0,
                                                 "clembed_mpi_table_init: out of host memory");
  for (size_t r = 0; r < R && s == CLEMBED_OK; r += step) {
    size_t k = R - r < step ? R - r : step;
    clembed_matrix rows = tmp;
    rows.rows = k;
    s = normal ? clembed_matrix_init_normal_at(ctx, &rows, r, a, b, seed, 0, NULL, NULL)
               : clembed_matrix_init_uniform_at(ctx, &rows, r, a, b, seed, 0, NULL, NULL);
    clembed_matrix block = rows; /* the block's columns of those rows */
    block.offset += t->col_first;
    block.cols = w;
    block.ld = C;
    if (s == CLEMBED_OK) s = clembed_matrix_read(ctx, &block, host, t->dtype);
    if (s == CLEMBED_OK) s = write_rows(ctx, &t->shard, r, k, host);
  }
  clembed_matrix_release(&tmp);
  free(host);
  return s;
}

/* Both inits: agree, initialise the shard at its first row, agree on the outcome. */
static clembed_status init(clembed_mpi_table *t, const char *op, int normal, float a, float b, uint64_t seed) {
  ce_mpi_error e = {0};
  ce_mpi_vote v = {0};
  if (!t)
    return ce_mpi_null_handle(op, "t");
  clembed_context *ctx = t->ctx;
  clembed_status s = clembed_finish(ctx);
  if (s != CLEMBED_OK) ce_mpi_fail_from(&e, ctx, s);
  ce_mpi_agree_as(&v, "the call", CE_MPI_CALL, normal ? CE_MPI_CALL_INIT_NORMAL : CE_MPI_CALL_INIT_UNIFORM);
  ce_mpi_agree_float(&v, normal ? "mean" : "low", a);
  ce_mpi_agree_float(&v, normal ? "std" : "high", b);
  ce_mpi_agree(&v, "seed", seed);
  if (!ce_mpi_vote_run(t->comm, t->rank, t->size, &v, e.status != CLEMBED_OK, &e) ||
      ce_mpi_vote_outcome(&v, op, &e) != CLEMBED_OK)
    return ce_mpi_report(ctx, op, &e);
  uint64_t first = t->bounds[t->rank];
  if (t->column && !clembed_dtype_size(t->dtype))
    s = clembed_context_fail(ctx, CLEMBED_ERR_UNSUPPORTED, op, "t", -1, (int64_t)t->dtype,
                             "%s: a %s table is not initialised (quantized tables are loaded)", op,
                             clembed_dtype_name(t->dtype));
  else if (t->column)
    s = init_columns(t, normal, a, b, seed);
  else
    s = normal ? clembed_matrix_init_normal_at(ctx, &t->shard, first, a, b, seed, 0, NULL, NULL)
               : clembed_matrix_init_uniform_at(ctx, &t->shard, first, a, b, seed, 0, NULL, NULL);
  if (s == CLEMBED_OK) s = clembed_finish(ctx);
  if (s != CLEMBED_OK) ce_mpi_fail_from(&e, ctx, s);
  clembed_status theirs = CLEMBED_OK;
  int bad = ce_mpi_first_failed(t->comm, t->rank, t->size, e.status, &e, &theirs);
  if (bad >= 0 && e.status == CLEMBED_OK)
    ce_mpi_fail(&e, theirs, "", bad, 0,
                "%s: rank %d could not initialise its rows (its context's message says why)", op, bad);
  return ce_mpi_report(ctx, op, &e);
}

clembed_status clembed_mpi_table_init_normal(clembed_mpi_table *t, float mean, float std, uint64_t seed) {
  return init(t, "clembed_mpi_table_init_normal", 1, mean, std, seed);
}

clembed_status clembed_mpi_table_init_uniform(clembed_mpi_table *t, float low, float high, uint64_t seed) {
  return init(t, "clembed_mpi_table_init_uniform", 0, low, high, seed);
}
