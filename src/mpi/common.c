/* What every call of libclembed_mpi shares: a rank's own failure kept until
 * the collectives are over, the agreement among the ranks (one
 * MPI_Allreduce), ids read and resolved on the host as the kernels resolve
 * them, the host sort, and the all-to-all exchanges. */
#include "mpi_table.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ own failures */

clembed_status ce_mpi_fail(ce_mpi_error *e, clembed_status status, const char *argument, int64_t index,
                           int64_t value, const char *fmt, ...) {
  if (e->status != CLEMBED_OK) return status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  e->status = status;
  e->argument = argument ? argument : "";
  e->index = index;
  e->value = value;
  return status;
}

clembed_status ce_mpi_fail_from(ce_mpi_error *e, clembed_context *ctx, clembed_status s) {
  clembed_error_detail d;
  if (clembed_context_error(ctx, &d) != CLEMBED_OK || d.status != s) {
    d.argument = "";
    d.index = -1;
    d.value = 0;
  }
  return ce_mpi_fail(e, s, d.argument, d.index, d.value, "%s", clembed_context_message(ctx));
}

clembed_status ce_mpi_report(clembed_context *ctx, const char *op, const ce_mpi_error *e) {
  if (e->status == CLEMBED_OK) return CLEMBED_OK;
  return clembed_context_fail(ctx, e->status, op, e->argument, e->index, e->value, "%s", e->message);
}

int ce_mpi_ok(ce_mpi_error *e, int code, const char *call) {
  if (code == MPI_SUCCESS) return 1;
  char text[MPI_MAX_ERROR_STRING + 1];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  text[len] = '\0';
  ce_mpi_fail(e, CLEMBED_ERR_COMMUNICATION, "comm", -1, code, "%s failed: %s", call, len ? text : "(no MPI text)");
  return 0;
}

/* ---------------------------------------------------------------- agreement */

void ce_mpi_agree_as(ce_mpi_vote *v, const char *name, int kind, uint64_t value) {
  if (v->n < CE_MPI_AGREE) {
    v->names[v->n] = name;
    v->kinds[v->n] = (unsigned char)kind;
    v->strings[v->n] = NULL;
    v->agree[v->n++] = value;
  }
}

void ce_mpi_agree(ce_mpi_vote *v, const char *name, uint64_t value) { ce_mpi_agree_as(v, name, CE_MPI_UINT, value); }

void ce_mpi_agree_float(ce_mpi_vote *v, const char *name, float value) {
  uint32_t u;
  memcpy(&u, &value, 4);
  ce_mpi_agree_as(v, name, CE_MPI_FLOAT, u);
}

void ce_mpi_agree_string(ce_mpi_vote *v, const char *name, const char *s) {
  int i = v->n;
  ce_mpi_agree_as(v, name, CE_MPI_STRING, ce_mpi_string_field(s));
  if (i < v->n) v->strings[i] = s;
}

const char *ce_mpi_dtype_text(clembed_dtype d, char *buf, size_t cap) {
  const char *name = clembed_dtype_name(d);
  if (!strcmp(name, "unknown")) {
    snprintf(buf, cap, "unknown dtype %d", (int)d);
    return buf;
  }
  size_t i = 0;
  for (; name[i] && i + 1 < cap; i++) buf[i] = (char)(name[i] >= 'a' && name[i] <= 'z' ? name[i] - 'a' + 'A' : name[i]);
  buf[i] = '\0';
  return buf;
}

/* names[value], or "unknown WHAT value" */
static const char *enum_text(const char *const *names, int count, const char *what, int value, char *buf,
                             size_t cap) {
  if (value >= 0 && value < count) return names[value];
  snprintf(buf, cap, "unknown %s %d", what, value);
  return buf;
}

const char *ce_mpi_kind_text(int kind, char *buf, size_t cap) {
  static const char *const names[] = {"SGD", "ADAGRAD", "ROWWISE_ADAGRAD", "ADAM"}; /* clembed_optimizer_kind */
  return enum_text(names, 4, "optimizer kind", kind, buf, cap);
}

const char *ce_mpi_mode_text(int mode, char *buf, size_t cap) {
  static const char *const names[] = {"SUM", "MEAN", "MAX"}; /* clembed_bag_mode */
  return enum_text(names, 3, "bag mode", mode, buf, cap);
}

/* A field's value in words: 'weight', NULL, F16, ADAM, MEAN, CLAMP, 0.5, given, ... */
static void field_text(const ce_mpi_vote *v, int i, char *buf, size_t cap) {
  static const char *const policies[] = {"CHECK", "CLAMP", "ZERO", "WRAP"}; /* clembed_index_policy */
  static const char *const calls[] = {"", "clembed_mpi_table_create", "clembed_mpi_table_load",
                                      "clembed_mpi_table_init_normal", "clembed_mpi_table_init_uniform",
                                      "clembed_mpi_embed", "clembed_mpi_optimizer_step",
                                      "clembed_mpi_embedding_bag", "clembed_mpi_bag_optimizer_step",
                                      "clembed_mpi_checkpoint_save", "clembed_mpi_checkpoint_load",
                                      "clembed_mpi_feature_set_create", "clembed_mpi_embedding_bags",
                                      "clembed_mpi_bags_optimizer_step", "clembed_mpi_feature_set_release"};
  uint64_t x = v->agree[i];
  char tmp[64];
  switch (v->kinds[i]) {
  case CE_MPI_FLOAT: {
    uint32_t u = (uint32_t)x;
    float f;
    memcpy(&f, &u, 4);
    snprintf(buf, cap, "%.9g", (double)f);
    break;
  }
  case CE_MPI_PADDING:
    if (x == UINT64_MAX || (int64_t)x == CLEMBED_NO_PADDING) snprintf(buf, cap, "none");
    else snprintf(buf, cap, "%lld", (long long)(int64_t)x);
    break;
  case CE_MPI_STRING:
    if (!v->strings[i]) snprintf(buf, cap, "NULL");
    else if (strlen(v->strings[i]) + 3 <= cap) snprintf(buf, cap, "'%s'", v->strings[i]);
    else snprintf(buf, cap, "'%.*s...'", (int)(cap > 6 ? cap - 6 : 0), v->strings[i]);
    break;
  case CE_MPI_DTYPE: snprintf(buf, cap, "%s", ce_mpi_dtype_text((clembed_dtype)(int)x, tmp, sizeof tmp)); break;
  case CE_MPI_KIND: snprintf(buf, cap, "%s", ce_mpi_kind_text((int)x, tmp, sizeof tmp)); break;
  case CE_MPI_MODE: snprintf(buf, cap, "%s", ce_mpi_mode_text((int)x, tmp, sizeof tmp)); break;
  case CE_MPI_POLICY: snprintf(buf, cap, "%s", enum_text(policies, 4, "index policy", (int)x, tmp, sizeof tmp)); break;
  case CE_MPI_GIVEN: snprintf(buf, cap, "%s", x ? "one (not NULL)" : "NULL"); break;
  case CE_MPI_SWITCH: snprintf(buf, cap, "%s", x ? "on" : "off"); break;
  case CE_MPI_CALL:
    snprintf(buf, cap, "%s", x && x < sizeof calls / sizeof calls[0] ? calls[x] : "another clembed_mpi function");
    break;
  default: snprintf(buf, cap, "%llu", (unsigned long long)x); break;
  }
}

/* Field i differs (every rank knows it): each rank's value of it in words, gathered,
 * into v->values as "rank 0 passed 'a', ranks 1-3 passed 'b'" (runs of equal values
 * joined). Two collectives, on every rank alike: whether each rank has room for the
 * texts, then the texts. */
#define CE_MPI_TEXT 64
static int gather_values(MPI_Comm comm, int size, ce_mpi_vote *v, int i, ce_mpi_error *e) {
  char mine[CE_MPI_TEXT] = {0};
  field_text(v, i, mine, sizeof mine);
  char *all = malloc((size_t)size * CE_MPI_TEXT);
  int room = all != NULL, everyone = 0;
  if (!ce_mpi_ok(e, MPI_Allreduce(&room, &everyone, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce (the ranks' values)"))
    goto fail;
  if (!everyone) { /* no room on some rank: this rank's value only */
    snprintf(v->values, sizeof v->values, "this rank %s %s", v->kinds[i] == CE_MPI_CALL ? "called" : "passed", mine);
    free(all);
    return 1;
  }
  if (!ce_mpi_ok(e, MPI_Allgather(mine, CE_MPI_TEXT, MPI_CHAR, all, CE_MPI_TEXT, MPI_CHAR, comm),
                 "MPI_Allgather (the ranks' values)"))
    goto fail;
  size_t used = 0, cap = sizeof v->values;
  v->values[0] = '\0';
  for (int r = 0; r < size;) {
    int last = r;
    const char *text = all + (size_t)r * CE_MPI_TEXT;
    text = memchr(text, '\0', CE_MPI_TEXT) ? text : "?";
    while (last + 1 < size && !strncmp(all + (size_t)(last + 1) * CE_MPI_TEXT, text, CE_MPI_TEXT)) last++;
    char who[48];
    if (last == r) snprintf(who, sizeof who, "rank %d", r);
    else snprintf(who, sizeof who, "ranks %d-%d", r, last);
    int w = snprintf(v->values + used, cap - used, "%s%s %s %s", used ? ", " : "", who,
                     v->kinds[i] == CE_MPI_CALL ? "called" : "passed", text);
    if (w < 0 || (size_t)w >= cap - used - 8) { /* room left for ", ..." */
      v->values[used] = '\0';
      snprintf(v->values + used, cap - used, ", ...");
      break;
    }
    used += (size_t)w;
    r = last + 1;
  }
  free(all);
  return 1;
fail:
  free(all);
  return 0;
}

uint64_t ce_mpi_string_field(const char *s) {
  if (!s) return 0x6e756c6c; /* "null": no hash of a string's bytes starts there */
  uint64_t h = 0xcbf29ce484222325ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
  return h;
}

/* One MPI_Allreduce(MAX) of [fields, their complements, max fields, failed]:
 * a field is equal on every rank exactly when its largest value is the
 * complement of its complements' largest (its smallest). Unused fields are 0
 * everywhere. `failed` travels as size - rank, so the maximum names the
 * lowest rank. */
int ce_mpi_vote_run(MPI_Comm comm, int rank, int size, ce_mpi_vote *v, int failed, ce_mpi_error *e) {
  uint64_t in[2 * CE_MPI_AGREE + CE_MPI_MAX + 1], out[2 * CE_MPI_AGREE + CE_MPI_MAX + 1];
  for (int i = 0; i < CE_MPI_AGREE; i++) {
    uint64_t x = i < v->n ? v->agree[i] : 0;
    in[i] = x;
    in[CE_MPI_AGREE + i] = ~x;
  }
  for (int i = 0; i < CE_MPI_MAX; i++) in[2 * CE_MPI_AGREE + i] = v->max[i];
  in[2 * CE_MPI_AGREE + CE_MPI_MAX] = failed ? (uint64_t)(size - rank) : 0;
  v->differs = -1;
  v->failed_rank = -1;
  if (!ce_mpi_ok(e, MPI_Allreduce(in, out, 2 * CE_MPI_AGREE + CE_MPI_MAX + 1, MPI_UINT64_T, MPI_MAX, comm),
                 "MPI_Allreduce (the ranks' agreement)"))
    return 0;
  for (int i = CE_MPI_AGREE - 1; i >= 0; i--)
    if (out[i] != ~out[CE_MPI_AGREE + i]) v->differs = i;
  for (int i = 0; i < CE_MPI_MAX; i++) v->max[i] = out[2 * CE_MPI_AGREE + i];
  uint64_t f = out[2 * CE_MPI_AGREE + CE_MPI_MAX];
  v->failed_rank = f ? size - (int)f : -1;
  v->values[0] = '\0';
  if (v->differs >= 0 && !gather_values(comm, size, v, v->differs, e)) return 0;
  return 1;
}

clembed_status ce_mpi_vote_outcome(const ce_mpi_vote *v, const char *op, ce_mpi_error *e) {
  if (e->status != CLEMBED_OK) return e->status; /* this rank's own failure stays its answer */
  /* a rank that failed on its own first: its fields may be anything */
  if (v->failed_rank >= 0)
    return ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "", v->failed_rank, 0,
                       "%s: rank %d refused its arguments (its context's message says why); nothing was done",
                       op, v->failed_rank);
  if (v->differs >= 0) {
    int i = v->differs;
    if (v->kinds[i] == CE_MPI_CALL)
      return ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, v->names[i], -1, (int64_t)v->agree[i],
                         "%s: the ranks call different functions (%s); every rank must make the same call", op,
                         v->values);
    return ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, v->names[i], -1, (int64_t)v->agree[i],
                       "%s: the ranks disagree on %s (%s); every rank must make the same call with the same "
                       "arguments", op, v->names[i], v->values);
  }
  return CLEMBED_OK;
}

int ce_mpi_first_failed(MPI_Comm comm, int rank, int size, clembed_status mine, ce_mpi_error *e,
                        clembed_status *theirs) {
  /* (size - rank, status): the largest first value is the first failed rank, and
   * MAXLOC carries its status along */
  struct {
    int value, status;
  } in = {mine != CLEMBED_OK ? size - rank : 0, (int)mine}, out = {0, 0};
  *theirs = CLEMBED_OK;
  if (!ce_mpi_ok(e, MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MAXLOC, comm), "MPI_Allreduce (the ranks' status)"))
    return -2;
  if (!out.value) return -1;
  *theirs = (clembed_status)out.status;
  return size - out.value;
}

/* ------------------------------------------------------------------ helpers */

void *ce_mpi_buffer(clembed_mpi_table *t, int k, size_t bytes) {
  ce_mpi_buf *b = &t->buf[k];
  if (bytes <= b->bytes && b->p) return b->p;
  size_t want = bytes < 4096 ? 4096 : bytes + bytes / 4;
  void *p = realloc(b->p, want);
  if (!p) return NULL;
  b->p = p;
  b->bytes = want;
  return p;
}

clembed_status ce_mpi_stage_reserve(clembed_mpi_table *t, int k, size_t bytes, ce_mpi_error *e) {
  ce_mpi_stage *st = &t->stage[k];
  cl_int err = CL_SUCCESS;
  if (!bytes) bytes = 1;
  if (ce_mpi_stage_done(t, k, e) != CLEMBED_OK) return e->status;
  if (st->bytes < bytes) {
    if (st->mem) clReleaseMemObject(st->mem);
    st->mem = NULL;
    st->bytes = 0;
    size_t want = bytes + bytes / 4; /* room to grow */
    st->mem = clCreateBuffer(t->cl, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, want, NULL, &err);
    if (err != CL_SUCCESS || !st->mem) {
      st->mem = NULL;
      return ce_mpi_fail(e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, err, "clembed_mpi: a staging buffer of %zu bytes: %s",
                         want, clembed_status_string((clembed_status)err));
    }
    st->bytes = want;
  }
  return CLEMBED_OK;
}

static void *stage_map(clembed_mpi_table *t, int k, size_t bytes, cl_map_flags flags, ce_mpi_error *e) {
  ce_mpi_stage *st = &t->stage[k];
  cl_int err = CL_SUCCESS;
  if (!bytes) bytes = 1;
  if (ce_mpi_stage_reserve(t, k, bytes, e) != CLEMBED_OK) return NULL;
  st->host = clEnqueueMapBuffer(t->queue, st->mem, CL_TRUE, flags, 0, bytes, 0, NULL, NULL, &err);
  if (err != CL_SUCCESS || !st->host) {
    st->host = NULL;
    ce_mpi_fail(e, err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY ? CLEMBED_ERR_OUT_OF_MEMORY
                                                                                           : (clembed_status)err,
                "", -1, err, "clembed_mpi: mapping a staging buffer of %zu bytes: %s", bytes,
                clembed_status_string((clembed_status)err));
  }
  return st->host;
}

void *ce_mpi_stage_write(clembed_mpi_table *t, int k, size_t bytes, ce_mpi_error *e) {
  return stage_map(t, k, bytes, CL_MAP_WRITE_INVALIDATE_REGION, e);
}

void *ce_mpi_stage_update(clembed_mpi_table *t, int k, size_t bytes, ce_mpi_error *e) {
  return stage_map(t, k, bytes, CL_MAP_WRITE, e);
}

void *ce_mpi_stage_read(clembed_mpi_table *t, int k, size_t bytes, ce_mpi_error *e) {
  return stage_map(t, k, bytes, CL_MAP_READ, e);
}

clembed_status ce_mpi_stage_done(clembed_mpi_table *t, int k, ce_mpi_error *e) {
  ce_mpi_stage *st = &t->stage[k];
  if (!st->host) return CLEMBED_OK;
  cl_event ev = NULL;
  cl_int err = clEnqueueUnmapMemObject(t->queue, st->mem, st->host, 0, NULL, &ev);
  st->host = NULL;
  if (err == CL_SUCCESS) err = clWaitForEvents(1, &ev);
  if (ev) clReleaseEvent(ev);
  if (err != CL_SUCCESS)
    return ce_mpi_fail(e, (clembed_status)err, "", -1, err, "clembed_mpi: unmapping a staging buffer: %s",
                       clembed_status_string((clembed_status)err));
  return CLEMBED_OK;
}

clembed_matrix ce_mpi_stage_matrix(const clembed_mpi_table *t, int k, size_t rows, size_t cols, clembed_dtype dtype) {
  clembed_matrix m = {0};
  m.buffer = t->stage[k].mem;
  m.rows = rows;
  m.cols = cols;
  m.dtype = dtype;
  return m;
}

clembed_ids ce_mpi_stage_ids(const clembed_mpi_table *t, int k, size_t n, clembed_index_type type) {
  clembed_ids ids = {0};
  ids.buffer = n ? t->stage[k].mem : NULL;
  ids.count = n;
  ids.type = type;
  return ids;
}

void ce_mpi_stage_release(clembed_mpi_table *t) {
  ce_mpi_error ignored = {0};
  for (int k = 0; k < CE_MPI_NSTAGE; k++) {
    ce_mpi_stage_done(t, k, &ignored);
    if (t->stage[k].mem) clReleaseMemObject(t->stage[k].mem);
    t->stage[k].mem = NULL;
    t->stage[k].bytes = 0;
  }
}

clembed_matrix ce_mpi_rows(const clembed_matrix *m, size_t n) {
  clembed_matrix v = *m;
  v.rows = n;
  return v;
}

clembed_status ce_mpi_read_ids(clembed_mpi_table *t, const clembed_ids *ids, int64_t *host, ce_mpi_error *e) {
  clembed_context *ctx = t->ctx;
  clembed_status s = clembed_finish(ctx); /* an earlier call's pending error is this rank's answer */
  if (s != CLEMBED_OK) return ce_mpi_fail_from(e, ctx, s);
  return ce_mpi_read_ids_ctx(ctx, ids, host, e);
}

clembed_status ce_mpi_read_ids_ctx(clembed_context *ctx, const clembed_ids *ids, int64_t *host, ce_mpi_error *e) {
  clembed_status s;
  if (!ids->count) return CLEMBED_OK;
  if (ids->type == CLEMBED_I64) {
    s = clembed_ids_read(ctx, ids, host);
  } else {
    int32_t *h32 = (int32_t *)host + ids->count; /* the upper half, widened from the front */
    s = clembed_ids_read(ctx, ids, h32);
    for (size_t i = 0; s == CLEMBED_OK && i < ids->count; i++) host[i] = h32[i];
  }
  if (s != CLEMBED_OK) return ce_mpi_fail_from(e, ctx, s);
  return CLEMBED_OK;
}

int ce_mpi_read_options(clembed_context *ctx, const char *op, const char *argument, clembed_struct_type type,
                        const void *in, void *out, size_t size, ce_mpi_error *e) {
  unsigned char defaults[512]; /* every option struct is far smaller */
  if (size > sizeof defaults) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, argument, -1, 0, "%s: %s: a struct of %zu bytes", op, argument, size);
    return 0;
  }
  memcpy(defaults, out, size);
  clembed_status s = clembed_struct_read(ctx, op, argument, type, in, out);
  if (s == CLEMBED_OK) return 1;
  ce_mpi_fail_from(e, ctx, s);
  memcpy(out, defaults, size);
  return 0;
}

int ce_mpi_read_optimizer(clembed_context *ctx, const char *op, const clembed_optimizer *in, clembed_optimizer *out,
                          ce_mpi_error *e) {
  clembed_optimizer probe = clembed_optimizer_defaults(CLEMBED_SGD);
  *out = probe;
  if (!in) return 1;
  if (!ce_mpi_read_options(ctx, op, "optimizer", CLEMBED_STRUCT_OPTIMIZER, in, &probe, sizeof probe, e)) return 0;
  /* the fields past the caller's struct_size from its own kind's defaults */
  *out = clembed_optimizer_defaults((unsigned)probe.kind <= (unsigned)CLEMBED_ADAM ? probe.kind : CLEMBED_SGD);
  return ce_mpi_read_options(ctx, op, "optimizer", CLEMBED_STRUCT_OPTIMIZER, in, out, sizeof *out, e);
}

uint64_t ce_mpi_padding(int64_t padding_idx, size_t rows, int *bad) {
  *bad = 0;
  if (padding_idx == CLEMBED_NO_PADDING) return UINT64_MAX;
  int64_t p = padding_idx < 0 ? padding_idx + (int64_t)rows : padding_idx;
  if (p < 0 || (uint64_t)p >= (uint64_t)rows) {
    *bad = 1;
    return UINT64_MAX;
  }
  return (uint64_t)p;
}

/* ------------------------------------------------------------------ exchange */

int *ce_mpi_send_counts(clembed_mpi_table *t) { return t->counts; }

long long ce_mpi_exchange_counts(clembed_mpi_table *t, ce_mpi_error *e) {
  int n = t->size, *sc = t->counts, *rc = t->counts + n, *sd = t->counts + 2 * n, *rd = t->counts + 3 * n;
  if (!ce_mpi_ok(e, MPI_Alltoall(sc, 1, MPI_INT, rc, 1, MPI_INT, t->comm), "MPI_Alltoall (the counts)")) return -1;
  long long s = 0, r = 0;
  for (int k = 0; k < n; k++) {
    sd[k] = (int)s;
    rd[k] = (int)r;
    s += sc[k] > 0 ? sc[k] : 0;
    r += rc[k] > 0 ? rc[k] : 0;
  }
  return r;
}

int ce_mpi_count_failure(const clembed_mpi_table *t) {
  for (int k = 0; k < t->size; k++)
    if (t->counts[t->size + k] < 0) return k;
  return -1;
}

int ce_mpi_alltoallv(clembed_mpi_table *t, const void *send, void *recv, MPI_Datatype type, int reverse,
                     ce_mpi_error *e) {
  int n = t->size, *sc = t->counts, *rc = t->counts + n, *sd = t->counts + 2 * n, *rd = t->counts + 3 * n;
  int code = reverse ? MPI_Alltoallv(send, rc, rd, type, recv, sc, sd, type, t->comm)
                     : MPI_Alltoallv(send, sc, sd, type, recv, rc, rd, type, t->comm);
  return ce_mpi_ok(e, code, "MPI_Alltoallv");
}

/* ce_mpi_alltoallv_rows, blocking (req NULL) or started (*req to complete,
 * then *row to free: ce_mpi_rows_wait). */
static int rows_exchange(clembed_mpi_table *t, const void *send, void *recv, size_t row_bytes, int reverse,
                         int skip_self, MPI_Datatype *row, MPI_Request *req, ce_mpi_error *e) {
  *row = MPI_DATATYPE_NULL;
  if (req) *req = MPI_REQUEST_NULL;
  if (!row_bytes) return 1;
  int n = t->size, *sc = t->counts, *rc = t->counts + n, *sd = t->counts + 2 * n, *rd = t->counts + 3 * n;
  if (skip_self) { /* the counts without this rank's own part */
    sc = memcpy(t->wcounts, sc, (size_t)n * sizeof *sc);
    rc = memcpy(t->wcounts + n, rc, (size_t)n * sizeof *rc);
    sc[t->rank] = rc[t->rank] = 0;
  }
  int ok = ce_mpi_ok(e, MPI_Type_contiguous((int)row_bytes, MPI_BYTE, row), "MPI_Type_contiguous") &&
           ce_mpi_ok(e, MPI_Type_commit(row), "MPI_Type_commit");
  if (ok && req)
    ok = ce_mpi_ok(e,
                   reverse ? MPI_Ialltoallv(send, rc, rd, *row, recv, sc, sd, *row, t->comm, req)
                           : MPI_Ialltoallv(send, sc, sd, *row, recv, rc, rd, *row, t->comm, req),
                   "MPI_Ialltoallv");
  else if (ok)
    ok = ce_mpi_ok(e,
                   reverse ? MPI_Alltoallv(send, rc, rd, *row, recv, sc, sd, *row, t->comm)
                           : MPI_Alltoallv(send, sc, sd, *row, recv, rc, rd, *row, t->comm),
                   "MPI_Alltoallv");
  return ok;
}

int ce_mpi_alltoallv_rows(clembed_mpi_table *t, const void *send, void *recv, size_t row_bytes, int reverse,
                          int skip_self, ce_mpi_error *e) {
  MPI_Datatype row;
  int ok = rows_exchange(t, send, recv, row_bytes, reverse, skip_self, &row, NULL, e);
  if (row != MPI_DATATYPE_NULL) MPI_Type_free(&row);
  return ok;
}

int ce_mpi_rows_start(clembed_mpi_table *t, const void *send, void *recv, size_t row_bytes, int reverse,
                      int skip_self, MPI_Datatype *row, MPI_Request *req, ce_mpi_error *e) {
  return rows_exchange(t, send, recv, row_bytes, reverse, skip_self, row, req, e);
}

int ce_mpi_rows_wait(MPI_Datatype *row, MPI_Request *req, ce_mpi_error *e) {
  int ok = *req == MPI_REQUEST_NULL || ce_mpi_ok(e, MPI_Wait(req, MPI_STATUS_IGNORE), "MPI_Wait");
  if (*row != MPI_DATATYPE_NULL) MPI_Type_free(row);
  return ok;
}

int ce_mpi_map_matrix(clembed_mpi_table *t, const clembed_matrix *m, cl_map_flags flags, char **host, size_t *ld) {
  clembed_matrix piece = {0};
  size_t first = 0, count = 0, es = clembed_dtype_size(m->dtype);
  *host = NULL;
  *ld = 0;
  if (t->uhost || !es || clembed_dtype_block_values(m->dtype) != 1 || m->cols != t->cols) return 0;
  if (clembed_matrix_pieces(t->ctx, m, 1, &piece, &first, &count) != CLEMBED_OK || count != 1) return 0;
  size_t l = piece.ld ? piece.ld : piece.cols;
  *ld = l * es;
  if (!m->rows || !m->cols) return 1; /* nothing to map; checked all the same */
  /* without gaps between the rows, the region's old contents are not fetched */
  if (flags == CL_MAP_WRITE && l == m->cols) flags = CL_MAP_WRITE_INVALIDATE_REGION;
  cl_int err = CL_SUCCESS;
  void *p = clEnqueueMapBuffer(t->queue, piece.buffer, CL_TRUE, flags, piece.offset * es,
                               ((m->rows - 1) * l + m->cols) * es, 0, NULL, NULL, &err);
  if (err != CL_SUCCESS || !p) return 0;
  t->umem = piece.buffer;
  t->uhost = p;
  *host = p;
  return 1;
}

clembed_status ce_mpi_unmap_matrix(clembed_mpi_table *t, ce_mpi_error *e) {
  if (!t->uhost) return CLEMBED_OK;
  cl_event ev = NULL;
  cl_int err = clEnqueueUnmapMemObject(t->queue, t->umem, t->uhost, 0, NULL, &ev);
  t->uhost = NULL;
  t->umem = NULL;
  if (err == CL_SUCCESS) err = clWaitForEvents(1, &ev);
  if (ev) clReleaseEvent(ev);
  if (err != CL_SUCCESS)
    return ce_mpi_fail(e, (clembed_status)err, "", -1, err, "clembed_mpi: unmapping a caller's buffer: %s",
                       clembed_status_string((clembed_status)err));
  return CLEMBED_OK;
}

int ce_mpi_forward_vote(clembed_mpi_table *t, clembed_context *ctx, const char *op, ce_mpi_vote *v, ce_mpi_error *e,
                        clembed_status *status) {
  if (!ce_mpi_vote_run(t->comm, t->rank, t->size, v, e->status != CLEMBED_OK, e)) {
    *status = ce_mpi_report(ctx, op, e);
    return 0;
  }
  if (v->differs >= 0) {
    ce_mpi_error agree = {0};
    v->failed_rank = -1;
    ce_mpi_vote_outcome(v, op, &agree);
    *status = ce_mpi_report(ctx, op, e->status != CLEMBED_OK ? e : &agree);
    return 0;
  }
  return 1;
}

void ce_mpi_agree_optimizer(ce_mpi_vote *v, const clembed_optimizer *o) {
  ce_mpi_agree_as(v, "the optimizer's kind", CE_MPI_KIND, o ? (uint64_t)o->kind : 0);
  ce_mpi_agree_float(v, "learning_rate", o ? o->learning_rate : 0.0f);
  ce_mpi_agree_float(v, "eps", o ? o->eps : 0.0f);
  ce_mpi_agree_float(v, "beta1", o ? o->beta1 : 0.0f);
  ce_mpi_agree_float(v, "beta2", o ? o->beta2 : 0.0f);
  ce_mpi_agree_float(v, "weight_decay", o ? o->weight_decay : 0.0f);
  ce_mpi_agree(v, "step", o ? o->step : 0);
  ce_mpi_agree(v, "stochastic_rounding", o ? (uint64_t)(int64_t)o->stochastic_rounding : 0);
  ce_mpi_agree(v, "seed", o ? o->seed : 0);
  ce_mpi_agree(v, "first_row", o ? o->first_row : 0);
}

clembed_status ce_mpi_null_handle(const char *op, const char *arg) {
  return clembed_context_fail(NULL, CLEMBED_ERR_INVALID_ARGUMENT, op, arg, -1, 0,
                              "%s: %s is NULL (no communicator to speak on)", op, arg);
}
