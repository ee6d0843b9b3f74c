/* clembed_mpi_checkpoint_save / _load: sharded tables and their optimizer
 * states in one checkpoint file (the format of clembed_checkpoint_save,
 * src/io/ckpt.h), every rank writing and reading its own rows at their place
 * in the file, so that a file saved on N ranks loads on any number. */
#define _POSIX_C_SOURCE 200809L
#include "mpi_table.h"

#include "ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const kind_names[] = {"sgd", "adagrad", "rowwise_adagrad", "adam"}; /* clembed_optimizer_kind */

/* One tensor of the file: a table (which 0) or one of its states (1, 2). */
typedef struct part {
  clembed_mpi_table *t;
  int which;
  char *name; /* owned */
} part;

typedef struct plan {
  part *parts;
  ce_ckpt_tensor *tensors;
  size_t count;
  char **own_keys, **own_values; /* "clembed.optimizer.NAME": the kind of a table with states */
  size_t n_own;
  char *digest;                  /* names, shapes and metadata in one string, for the ranks to agree on */
} plan;

static void plan_free(plan *p) {
  for (size_t i = 0; i < p->count; i++) free(p->parts[i].name);
  for (size_t i = 0; i < p->n_own; i++) {
    free(p->own_keys[i]);
    free(p->own_values[i]);
  }
  free(p->parts);
  free(p->tensors);
  free(p->own_keys);
  free(p->own_values);
  free(p->digest);
  memset(p, 0, sizeof *p);
}

static char *joined(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 1;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s%s", a, b);
  return s;
}

/* A feature set's COLUMN table (and its states): the byte its block starts
 * at in a row of the tensor (of dtype). */
static size_t column_at(const clembed_mpi_table *t, clembed_dtype dtype) {
  size_t unit = clembed_dtype_block_values(dtype) ? clembed_dtype_block_values(dtype) : 1;
  return t->col_first / unit * clembed_dtype_row_bytes(dtype, unit);
}

static const clembed_matrix *part_matrix(const part *p) {
  return p->which == 0 ? &p->t->shard : p->which == 1 ? &p->t->state : &p->t->state2;
}

/* The tensors a save writes: each table, then its states. 0 when host memory ran out. */
static int plan_save(plan *p, clembed_mpi_table *const *tables, const char *const *names, size_t n) {
  memset(p, 0, sizeof *p);
  p->parts = calloc(3 * n, sizeof *p->parts);
  p->tensors = calloc(3 * n, sizeof *p->tensors);
  p->own_keys = calloc(n, sizeof *p->own_keys);
  p->own_values = calloc(n, sizeof *p->own_values);
  if (!p->parts || !p->tensors || !p->own_keys || !p->own_values) return 0;
  for (size_t i = 0; i < n; i++) {
    clembed_mpi_table *t = tables[i];
    int states = t->has_state ? (t->kind == CLEMBED_ADAM ? 2 : t->kind == CLEMBED_SGD ? 0 : 1) : 0;
    for (int w = 0; w <= states; w++) {
      part *q = &p->parts[p->count];
      ce_ckpt_tensor *c = &p->tensors[p->count];
      q->t = t;
      q->which = w;
      q->name = w == 0 ? joined(names[i], "") : joined(names[i], w == 1 ? ".momentum1" : ".momentum2");
      if (!q->name) return 0;
      c->name = q->name;
      c->dtype = w == 0 ? t->dtype : CLEMBED_F32;
      c->rows = t->rows;
      c->cols = w == 1 && t->kind == CLEMBED_ROWWISE_ADAGRAD ? 1 : t->cols;
      p->count++;
    }
    if (states) {
      p->own_keys[p->n_own] = joined("clembed.optimizer.", names[i]);
      p->own_values[p->n_own] = joined(kind_names[t->kind], "");
      if (!p->own_keys[p->n_own] || !p->own_values[p->n_own]) return 0;
      p->n_own++;
    }
  }
  return 1;
}

/* A string of everything the ranks must pass alike (names, shapes, metadata),
 * each piece followed by a unit separator. */
static char *digest(const plan *p, const char *const *keys, const char *const *values, size_t n_meta) {
  size_t len = 1;
  for (size_t i = 0; i < p->count; i++) len += strlen(p->tensors[i].name) + 64;
  for (size_t i = 0; i < p->n_own; i++) len += strlen(p->own_keys[i]) + strlen(p->own_values[i]) + 2;
  for (size_t i = 0; i < n_meta; i++) len += strlen(keys[i]) + strlen(values[i]) + 2;
  char *s = malloc(len);
  if (!s) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < p->count; i++)
    o += (size_t)snprintf(s + o, len - o, "%s\x1f%d %llu %llu\x1f", p->tensors[i].name, (int)p->tensors[i].dtype,
                          (unsigned long long)p->tensors[i].rows, (unsigned long long)p->tensors[i].cols);
  for (size_t i = 0; i < p->n_own; i++)
    o += (size_t)snprintf(s + o, len - o, "%s\x1f%s\x1f", p->own_keys[i], p->own_values[i]);
  for (size_t i = 0; i < n_meta; i++) o += (size_t)snprintf(s + o, len - o, "%s\x1f%s\x1f", keys[i], values[i]);
  s[o] = '\0';
  return s;
}

/* The checks of a rank's own arguments both calls make, then its tables' work finished. */
static void check_tables(const char *op, const char *path, clembed_mpi_table *const *tables, const char *const *names,
                         size_t n, ce_mpi_error *e) {
  if (!path || !path[0]) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "path", -1, 0, "%s: path is %s", op, path ? "empty" : "NULL");
    return;
  }
  if (!names) {
    ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "names", -1, 0, "%s: names is NULL", op);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    int same = MPI_UNEQUAL;
    if (!tables[i] || !names[i]) {
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, !tables[i] ? "tables" : "names", (int64_t)i, 0,
                  "%s: %s[%zu] is NULL", op, !tables[i] ? "tables" : "names", i);
      return;
    }
    if (MPI_Comm_compare(tables[i]->comm, tables[0]->comm, &same) != MPI_SUCCESS ||
        (same != MPI_IDENT && same != MPI_CONGRUENT)) {
      ce_mpi_fail(e, CLEMBED_ERR_INVALID_ARGUMENT, "tables", (int64_t)i, 0,
                  "%s: table %zu ('%s') is over another communicator than table 0's", op, i, names[i]);
      return;
    }
  }
  for (size_t i = 0; i < n; i++) { /* the tables' work done before their rows are read or written */
    clembed_status s = clembed_finish(tables[i]->ctx);
    if (s != CLEMBED_OK) {
      ce_mpi_fail_from(e, tables[i]->ctx, s);
      return;
    }
  }
}

/* After a phase: this rank's failure, or the lowest failed rank's, on every rank. 1 when none failed. */
static int all_well(clembed_mpi_table *t, const char *op, ce_mpi_error *e, const char *what) {
  clembed_status theirs = CLEMBED_OK;
  int bad = ce_mpi_first_failed(t->comm, t->rank, t->size, e->status, e, &theirs);
  if (bad >= 0 && e->status == CLEMBED_OK)
    ce_mpi_fail(e, theirs, "", bad, 0, "%s: rank %d failed %s (its context's message says why)", op, bad, what);
  return e->status == CLEMBED_OK;
}

clembed_status clembed_mpi_checkpoint_save(const char *path, clembed_mpi_table *const *tables,
                                           const char *const *names, size_t n, const char *const *meta_keys,
                                           const char *const *meta_values, size_t n_meta) {
  const char *op = "clembed_mpi_checkpoint_save";
  if (!tables || !n || !tables[0])
    return clembed_context_fail(NULL, CLEMBED_ERR_INVALID_ARGUMENT, op, "tables", -1, 0,
                                "%s: no table (tables NULL, n 0 or tables[0] NULL: no communicator to speak on)", op);
  clembed_mpi_table *t0 = tables[0];
  clembed_context *ctx = t0->ctx;
  ce_mpi_error e = {0};
  ce_mpi_vote v = {0};
  plan p = {0};
  char *header = NULL, *tmp = NULL, msg[512];
  void *buf = NULL;
  uint64_t *mine = NULL, *all = NULL;
  int fd = -1, renamed = 0;
  size_t hlen = 0;
  check_tables(op, path, tables, names, n, &e);
  if (e.status == CLEMBED_OK && n_meta && (!meta_keys || !meta_values))
    ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, !meta_keys ? "meta_keys" : "meta_values", -1, 0, "%s: %s is NULL",
                op, !meta_keys ? "meta_keys" : "meta_values");
  if (e.status == CLEMBED_OK && !plan_save(&p, tables, names, n))
    ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
  if (e.status == CLEMBED_OK) {
    clembed_status hs = CLEMBED_OK;
    header = ce_ckpt_header_own(p.tensors, p.count, meta_keys, meta_values, n_meta, (const char *const *)p.own_keys,
                                (const char *const *)p.own_values, p.n_own, &hlen, &hs, msg, sizeof msg);
    if (!header)
      ce_mpi_fail(&e, hs, strncmp(msg, "metadata", 8) ? "names" : "meta_keys", -1, 0, "%s: %s: %s", op, path, msg);
    else if (!(p.digest = digest(&p, meta_keys, meta_values, n_meta)))
      ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
  }
  ce_mpi_agree_as(&v, "the call", CE_MPI_CALL, CE_MPI_CALL_CKPT_SAVE);
  ce_mpi_agree(&v, "n", (uint64_t)n);
  ce_mpi_agree_string(&v, "path", e.status == CLEMBED_OK ? path : NULL);
  ce_mpi_agree_string(&v, "the names and the metadata", p.digest);
  if (!ce_mpi_vote_run(t0->comm, t0->rank, t0->size, &v, e.status != CLEMBED_OK, &e) ||
      ce_mpi_vote_outcome(&v, op, &e) != CLEMBED_OK)
    goto done;

  /* rank 0 creates the temporary file and names it to the others */
  unsigned long long tlen = 0;
  if (t0->rank == 0) {
    ce_ckpt_remove_stale(path);
    tmp = ce_ckpt_temp_path(path);
    if (!tmp)
      ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
    else if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666)) < 0)
      ce_mpi_fail(&e, CLEMBED_ERR_FILE, "path", -1, 0, "%s: %s: cannot create %s: %s", op, path, tmp, strerror(errno));
    tlen = tmp && fd >= 0 ? strlen(tmp) : 0;
  }
  if (!ce_mpi_ok(&e, MPI_Bcast(&tlen, 1, MPI_UNSIGNED_LONG_LONG, 0, t0->comm), "MPI_Bcast (the file's name)")) goto done;
  if (t0->rank != 0 && tlen) {
    tmp = calloc(1, (size_t)tlen + 1);
    if (!tmp) ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
  }
  for (unsigned long long at = 0; at < tlen; at += 256) { /* in pieces of a stack buffer: every rank takes part */
    char piece[256];
    int k = (int)(tlen - at < 256 ? tlen - at : 256);
    if (t0->rank == 0) memcpy(piece, tmp + at, (size_t)k);
    if (!ce_mpi_ok(&e, MPI_Bcast(piece, k, MPI_CHAR, 0, t0->comm), "MPI_Bcast (the file's name)")) goto done;
    if (t0->rank != 0 && tmp) memcpy(tmp + at, piece, (size_t)k);
  }
  if (!all_well(t0, op, &e, "to create the temporary file")) goto done;
  if (t0->rank != 0 && (fd = open(tmp, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
    ce_mpi_fail(&e, CLEMBED_ERR_FILE, "path", -1, 0,
                "%s: %s: cannot open %s, which rank 0 created (is the folder on a file system every rank sees?): %s",
                op, path, tmp, strerror(errno));

  /* every rank its rows, at their place; a CRC-32C of each tensor's rows */
  mine = calloc(2 * p.count + 1, sizeof *mine);
  uint64_t most = ce_ckpt_largest_piece(p.tensors, p.count); /* a row past 32 MiB is a piece of its own */
  buf = most <= SIZE_MAX ? malloc(most ? (size_t)most : 1) : NULL;
  if (!mine || !buf) ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
  for (size_t i = 0; i < p.count && e.status == CLEMBED_OK; i++) {
    const clembed_matrix *m = part_matrix(&p.parts[i]);
    clembed_mpi_table *t = p.parts[i].t;
    uint64_t rb = p.tensors[i].row_bytes, first = t->bounds[t->rank];
    size_t step = ce_ckpt_rows_per_piece(rb);
    uint32_t crc = 0;
    for (size_t r = 0; r < m->rows && rb && e.status == CLEMBED_OK; r += step) {
      size_t k = m->rows - r < step ? m->rows - r : step;
      clembed_matrix view = ce_ckpt_rows_of(m, r, k);
      size_t bytes = k * (size_t)rb;
      clembed_status s = clembed_matrix_read(t->ctx, &view, buf, m->dtype);
      if (s != CLEMBED_OK) {
        ce_mpi_fail_from(&e, t->ctx, s);
      } else if (t->column) { /* the block of each row at its place (the CRC: rank 0 reads the tensor back) */
        size_t wb = clembed_dtype_row_bytes(m->dtype, m->cols), c0 = column_at(t, m->dtype);
        for (size_t q = 0; q < k && e.status == CLEMBED_OK; q++)
          if (ce_ckpt_pwrite(fd, (char *)buf + q * wb, wb, p.tensors[i].offset + (r + q) * rb + c0) != 0)
            ce_mpi_fail(&e, CLEMBED_ERR_FILE, "path", -1, 0, "%s: %s: writing %s failed: %s", op, path, tmp,
                        strerror(errno));
      } else {
        crc = ce_ckpt_crc32c(crc, buf, bytes);
        uint64_t at = p.tensors[i].offset + (first + r) * rb;
        if (ce_ckpt_pwrite(fd, buf, bytes, at) != 0)
          ce_mpi_fail(&e, CLEMBED_ERR_FILE, "path", -1, 0, "%s: %s: writing %s failed: %s", op, path, tmp,
                      strerror(errno));
        else
          ce_ckpt_start_writeback(fd, at, bytes);
      }
    }
    mine[2 * i] = crc;
    mine[2 * i + 1] = t->column ? 0 : (uint64_t)m->rows * rb;
  }
  if (e.status == CLEMBED_OK && fsync(fd) != 0)
    ce_mpi_fail(&e, CLEMBED_ERR_FILE, "path", -1, 0, "%s: %s: syncing %s failed: %s", op, path, tmp, strerror(errno));
  if (t0->rank != 0 && fd >= 0) {
    if (close(fd) != 0 && e.status == CLEMBED_OK)
      ce_mpi_fail(&e, CLEMBED_ERR_FILE, "path", -1, 0, "%s: %s: closing %s failed: %s", op, path, tmp, strerror(errno));
    fd = -1;
  }
  if (!all_well(t0, op, &e, "to write its rows")) goto done;

  /* rank 0: the tensors' CRCs from the ranks' in rank order, the header, the rename */
  if (t0->rank == 0) {
    all = calloc((size_t)t0->size * (2 * p.count + 1), sizeof *all);
    if (!all) ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
  }
  if (!all_well(t0, op, &e, "to gather the checksums")) goto done;
  if (!ce_mpi_ok(&e, MPI_Gather(mine, (int)(2 * p.count + 1), MPI_UINT64_T, all, (int)(2 * p.count + 1),
                                MPI_UINT64_T, 0, t0->comm),
                 "MPI_Gather (the rows' checksums)"))
    goto done;
  if (t0->rank == 0 && e.status == CLEMBED_OK) {
    for (size_t i = 0; i < p.count; i++) {
      uint32_t crc = 0;
      for (int r = 0; r < t0->size; r++) {
        const uint64_t *q = all + (size_t)r * (2 * p.count + 1);
        crc = ce_ckpt_crc32c_combine(crc, (uint32_t)q[2 * i], q[2 * i + 1]);
      }
      /* a COLUMN table's tensor: its blocks interleave in every row, so rank 0 reads it back whole */
      int rfd = p.parts[i].t->column && p.tensors[i].bytes ? open(tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
      if (p.parts[i].t->column && p.tensors[i].bytes && rfd < 0)
        ce_mpi_fail(&e, CLEMBED_ERR_FILE, "path", -1, 0, "%s: %s: cannot read %s back: %s", op, path, tmp,
                    strerror(errno));
      for (uint64_t at = 0, total = p.tensors[i].bytes; rfd >= 0 && at < total && e.status == CLEMBED_OK;) {
        size_t k = total - at < (uint64_t)most ? (size_t)(total - at) : (size_t)most;
        ssize_t got = pread(rfd, buf, k, (off_t)(p.tensors[i].offset + at));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
          ce_mpi_fail(&e, CLEMBED_ERR_FILE, "path", -1, 0, "%s: %s: reading %s back failed: %s", op, path, tmp,
                      got < 0 ? strerror(errno) : "short file");
          break;
        }
        crc = ce_ckpt_crc32c(crc, buf, (size_t)got);
        at += (uint64_t)got;
      }
      if (rfd >= 0) close(rfd);
      p.tensors[i].crc = crc;
    }
    clembed_status hs = CLEMBED_OK;
    free(header);
    header = ce_ckpt_header_own(p.tensors, p.count, meta_keys, meta_values, n_meta, (const char *const *)p.own_keys,
                                (const char *const *)p.own_values, p.n_own, &hlen, &hs, msg, sizeof msg);
    if (!header)
      ce_mpi_fail(&e, hs, "", -1, 0, "%s: %s: %s", op, path, msg);
    else if (ce_ckpt_pwrite(fd, header, hlen, 0) != 0 || fsync(fd) != 0)
      ce_mpi_fail(&e, CLEMBED_ERR_FILE, "path", -1, 0, "%s: %s: writing %s failed: %s", op, path, tmp, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && e.status == CLEMBED_OK)
      ce_mpi_fail(&e, CLEMBED_ERR_FILE, "path", -1, 0, "%s: %s: closing %s failed: %s", op, path, tmp, strerror(errno));
    fd = -1;
    if (e.status == CLEMBED_OK) {
      if (rename(tmp, path) != 0)
        ce_mpi_fail(&e, CLEMBED_ERR_FILE, "path", -1, 0, "%s: %s: renaming %s to it failed: %s", op, path, tmp,
                    strerror(errno));
      else
        renamed = 1;
    }
    if (renamed && ce_ckpt_sync_folder(path) != 0)
      ce_mpi_fail(&e, CLEMBED_ERR_FILE, "path", -1, 0, "%s: %s: syncing its folder failed (the file is written): %s",
                  op, path, strerror(errno));
  }
  all_well(t0, op, &e, "to finish the file");
done:
  if (fd >= 0) close(fd);
  if (t0->rank == 0 && tmp && !renamed) unlink(tmp);
  free(tmp);
  free(buf);
  free(mine);
  free(all);
  free(header);
  plan_free(&p);
  return ce_mpi_report(ctx, op, &e);
}

/* --------------------------------------------------------------------- load */

/* Tensor `name` of the file as a table's part (dtype, rows, cols): its data and recorded CRC, checked. 0 on failure (recorded on e). */
static int find_tensor(const clembed_file *f, const char *op, const char *path, const char *name, clembed_dtype dtype,
                       uint64_t rows, uint64_t cols, const uint8_t **data, uint32_t *crc, ce_mpi_error *e) {
  char msg[1024];
  uint64_t bytes;
  int oom;
  if (ce_ckpt_find(f, path, name, dtype, rows, cols, "the table", data, &bytes, crc, &oom, msg, sizeof msg) == 0)
    return 1;
  ce_mpi_fail(e, oom ? CLEMBED_ERR_OUT_OF_MEMORY : CLEMBED_ERR_INVALID_ARGUMENT, "names", -1, 0, "%s: %s", op, msg);
  return 0;
}

clembed_status clembed_mpi_checkpoint_load(const char *path, clembed_mpi_table *const *tables,
                                           const char *const *names, size_t n) {
  const char *op = "clembed_mpi_checkpoint_load";
  if (!tables || !n || !tables[0])
    return clembed_context_fail(NULL, CLEMBED_ERR_INVALID_ARGUMENT, op, "tables", -1, 0,
                                "%s: no table (tables NULL, n 0 or tables[0] NULL: no communicator to speak on)", op);
  clembed_mpi_table *t0 = tables[0];
  clembed_context *ctx = t0->ctx;
  ce_mpi_error e = {0};
  ce_mpi_vote v = {0};
  clembed_file *f = NULL;
  /* per table: the kind of its states in the file (-1: none), their data and CRCs */
  int *kinds = calloc(n, sizeof *kinds), *made = calloc(n, sizeof *made);
  const uint8_t **data = calloc(3 * n, sizeof *data);
  uint32_t *crcs = calloc(3 * n, sizeof *crcs);
  uint64_t *mine = calloc(6 * n + 1, sizeof *mine), *all = NULL;
  char *names_digest = NULL;
  if (!kinds || !made || !data || !crcs || !mine) ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
  if (e.status == CLEMBED_OK) check_tables(op, path, tables, names, n, &e);
  if (e.status == CLEMBED_OK) {
    clembed_status opened = clembed_file_open(path, &f);
    if (opened != CLEMBED_OK) ce_mpi_fail(&e, opened, "path", -1, 0, "%s: %s", op, clembed_last_error_message());
  }
  if (e.status == CLEMBED_OK) {
    const char *mark = clembed_file_metadata_find(f, "clembed.checkpoint");
    if (!mark || strcmp(mark, "1"))
      ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "path", -1, 0, "%s: %s is not a clembed checkpoint (%s)", op, path,
                  mark ? "an unknown checkpoint version" : "no \"clembed.checkpoint\" in its metadata");
  }
  for (size_t i = 0; e.status == CLEMBED_OK && i < n; i++) {
    clembed_mpi_table *t = tables[i];
    kinds[i] = -1;
    if (!find_tensor(f, op, path, names[i], t->dtype, t->rows, t->cols, &data[3 * i], &crcs[3 * i], &e)) break;
    /* the state's kind: this library's entry, or the Python package's ("NAME.optimizer") */
    char *key = joined("clembed.optimizer.", names[i]), *key2 = joined(names[i], ".optimizer");
    const char *kind = key ? clembed_file_metadata_find(f, key) : NULL;
    if (!kind && key2) kind = clembed_file_metadata_find(f, key2);
    free(key);
    free(key2);
    if (!kind) continue; /* no states in the file */
    for (int k = 0; k < 4; k++)
      if (!strcmp(kind, kind_names[k])) kinds[i] = k;
    if (kinds[i] <= 0) {
      ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "names", (int64_t)i, 0,
                  "%s: %s: table '%s': an unknown optimizer kind '%s'", op, path, names[i], kind);
      break;
    }
    if (t->column && kinds[i] == CLEMBED_ROWWISE_ADAGRAD) {
      ce_mpi_fail(&e, CLEMBED_ERR_UNSUPPORTED, "names", (int64_t)i, 0,
                  "%s: %s: table '%s' is cut by columns: the file's rowwise_adagrad state is a whole row's (plan "
                  "the table TABLE, ROW or TABLE_ROW to load it)", op, path, names[i]);
      break;
    }
    if (t->has_state && (int)t->kind != kinds[i]) {
      ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "names", (int64_t)i, 0,
                  "%s: %s: table '%s' has %s's state, the file %s's", op, path, names[i], kind_names[t->kind],
                  kind_names[kinds[i]]);
      break;
    }
    for (int w = 1; w <= (kinds[i] == CLEMBED_ADAM ? 2 : 1); w++) {
      char *sn = joined(names[i], w == 1 ? ".momentum1" : ".momentum2");
      int ok = sn && find_tensor(f, op, path, sn, CLEMBED_F32, t->rows,
                                 w == 1 && kinds[i] == CLEMBED_ROWWISE_ADAGRAD ? 1 : t->cols, &data[3 * i + w],
                                 &crcs[3 * i + w], &e);
      if (!sn) ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
      free(sn);
      if (!ok) break;
    }
  }
  /* what the ranks must pass alike: the names and the path */
  if (e.status == CLEMBED_OK) {
    size_t len = 1;
    for (size_t i = 0; i < n; i++) len += strlen(names[i]) + 1;
    names_digest = malloc(len);
    if (!names_digest) {
      ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
    } else {
      size_t o = 0;
      for (size_t i = 0; i < n; i++) o += (size_t)snprintf(names_digest + o, len - o, "%s\x1f", names[i]);
    }
  }
  ce_mpi_agree_as(&v, "the call", CE_MPI_CALL, CE_MPI_CALL_CKPT_LOAD);
  ce_mpi_agree(&v, "n", (uint64_t)n);
  ce_mpi_agree_string(&v, "path", e.status == CLEMBED_OK ? path : NULL);
  ce_mpi_agree_string(&v, "names", names_digest);
  if (!ce_mpi_vote_run(t0->comm, t0->rank, t0->size, &v, e.status != CLEMBED_OK, &e) ||
      ce_mpi_vote_outcome(&v, op, &e) != CLEMBED_OK)
    goto done;

  /* the checksums: each rank its rows', combined in rank order on every rank */
  for (size_t i = 0; i < n; i++) {
    clembed_mpi_table *t = tables[i];
    uint64_t first = t->bounds[t->rank], rows = t->bounds[t->rank + 1] - first;
    if (t->column) first = 0, rows = t->rank == 0 ? t->rows : 0; /* (rank 0 checks the whole tensor) */
    for (int w = 0; w < 3; w++) {
      if (w > 0 && (kinds[i] < 0 || (w == 2 && kinds[i] != CLEMBED_ADAM))) continue;
      uint64_t cols = w == 0 ? t->cols : w == 1 && kinds[i] == CLEMBED_ROWWISE_ADAGRAD ? 1 : t->cols;
      uint64_t rb = clembed_dtype_row_bytes(w == 0 ? t->dtype : CLEMBED_F32, (size_t)cols);
      mine[6 * i + 2 * w] = rows ? ce_ckpt_crc32c(0, data[3 * i + w] + first * rb, (size_t)(rows * rb)) : 0;
      mine[6 * i + 2 * w + 1] = rows * rb;
    }
  }
  all = calloc((size_t)t0->size * (6 * n + 1), sizeof *all);
  if (!all) ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
  if (!all_well(t0, op, &e, "to read the file")) goto done;
  if (!ce_mpi_ok(&e, MPI_Allgather(mine, (int)(6 * n + 1), MPI_UINT64_T, all, (int)(6 * n + 1), MPI_UINT64_T, t0->comm),
                 "MPI_Allgather (the rows' checksums)"))
    goto done;
  for (size_t i = 0; i < n && e.status == CLEMBED_OK; i++)
    for (int w = 0; w < 3; w++) {
      if (w > 0 && (kinds[i] < 0 || (w == 2 && kinds[i] != CLEMBED_ADAM))) continue;
      uint32_t crc = 0;
      for (int r = 0; r < t0->size; r++) {
        const uint64_t *q = all + (size_t)r * (6 * n + 1) + 6 * i + 2 * w;
        crc = ce_ckpt_crc32c_combine(crc, (uint32_t)q[0], q[1]);
      }
      if (crc != crcs[3 * i + w]) {
        ce_mpi_fail(&e, CLEMBED_ERR_INVALID_ARGUMENT, "names", (int64_t)i, 0,
                    "%s: %s: tensor '%s%s' is damaged: its bytes' CRC-32C is %08x, the file says %08x", op, path,
                    names[i], w == 0 ? "" : w == 1 ? ".momentum1" : ".momentum2", (unsigned)crc,
                    (unsigned)crcs[3 * i + w]);
        break;
      }
    }
  if (e.status != CLEMBED_OK) goto done; /* every rank found the same */

  /* the states the file holds and the tables lack, made on every rank first (undone if any rank fails) */
  for (size_t i = 0; i < n && e.status == CLEMBED_OK; i++) {
    clembed_mpi_table *t = tables[i];
    if (kinds[i] > 0 && !t->has_state && ce_mpi_make_state(t, (clembed_optimizer_kind)kinds[i], &e)) made[i] = 1;
  }
  if (!all_well(t0, op, &e, "to make the tables' optimizer states")) {
    for (size_t i = 0; i < n; i++)
      if (made[i]) {
        clembed_matrix_release(&tables[i]->state);
        clembed_matrix_release(&tables[i]->state2);
      }
    goto done;
  }
  /* the writes: each rank its rows of the tables and of their states */
  for (size_t i = 0; i < n && e.status == CLEMBED_OK; i++) {
    clembed_mpi_table *t = tables[i];
    if (kinds[i] < 0 && t->has_state) { /* the file's table had no step yet: neither has this one now */
      clembed_matrix_release(&t->state);
      clembed_matrix_release(&t->state2);
      t->has_state = 0;
    }
    if (made[i]) {
      t->has_state = 1;
      t->kind = (clembed_optimizer_kind)kinds[i];
    }
    uint64_t first = t->column ? 0 : t->bounds[t->rank];
    for (int w = 0; w < 3 && e.status == CLEMBED_OK; w++) {
      if (w > 0 && (kinds[i] < 0 || (w == 2 && kinds[i] != CLEMBED_ADAM))) continue;
      const clembed_matrix *m = w == 0 ? &t->shard : w == 1 ? &t->state : &t->state2;
      uint64_t rb = clembed_dtype_row_bytes(m->dtype, m->cols); /* the shard's row; a COLUMN table's: its block's */
      uint64_t frb = t->column ? clembed_dtype_row_bytes(m->dtype, t->cols) : rb; /* the tensor's row */
      size_t step = ce_ckpt_rows_per_piece(frb), c0 = t->column ? column_at(t, m->dtype) : 0;
      char *gather = t->column && m->rows && rb ? malloc((step < m->rows ? step : m->rows) * (size_t)rb) : NULL;
      if (t->column && m->rows && rb && !gather)
        ce_mpi_fail(&e, CLEMBED_ERR_OUT_OF_MEMORY, "", -1, 0, "%s: out of host memory", op);
      for (size_t r = 0; r < m->rows && rb && e.status == CLEMBED_OK; r += step) {
        size_t k = m->rows - r < step ? m->rows - r : step;
        clembed_matrix view = ce_ckpt_rows_of(m, r, k);
        const uint8_t *src = data[3 * i + w] + (first + r) * frb;
        if (gather) { /* the block of each row, from its place */
          for (size_t q = 0; q < k; q++) memcpy(gather + q * rb, src + q * frb + c0, (size_t)rb);
          src = (const uint8_t *)gather;
        }
        clembed_status s = clembed_matrix_write(t->ctx, &view, src, m->dtype);
        if (s != CLEMBED_OK) ce_mpi_fail_from(&e, t->ctx, s);
      }
      free(gather);
    }
  }
  all_well(t0, op, &e, "to write its rows");
done:
  clembed_file_close(f);
  free(kinds);
  free(made);
  free(data);
  free(crcs);
  free(mine);
  free(all);
  free(names_digest);
  return ce_mpi_report(ctx, op, &e);
}
