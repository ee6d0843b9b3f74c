/* clembed_checkpoint_save / _load: matrices and metadata in one .safetensors
 * file (the format: ckpt.h), written to a temporary file, synced and renamed;
 * read back with every check made before any matrix is written. Through the
 * public data functions only, a bounded piece of rows at a time (split
 * matrices piece by piece, nothing staged whole). */
#define _POSIX_C_SOURCE 200809L
#include "ckpt.h"
#include "clembed_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/runtime.h" /* ce_check_pieces: a load checks every matrix before it writes any */
#include "../test_hooks.h"

void clembed__test_checkpoint_hook(void (*fn)(const char *stage)) { ce_ckpt_stage_hook = fn; }

static const char *SAVE = "clembed_checkpoint_save";
static const char *LOAD = "clembed_checkpoint_load";

/* The item's matrix, checked as far as its shape goes (the data calls check the rest). */
static clembed_status check_item(clembed_context *ctx, const char *op, const clembed_checkpoint_item *it, size_t i) {
  if (!it->matrix)
    return clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, "items", (int64_t)i, 0,
                                "%s: the matrix of item %zu ('%s') is NULL", op, i, it->name ? it->name : "(NULL)");
  if (!it->name)
    return clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, "items", (int64_t)i, 0,
                                "%s: the name of item %zu is NULL", op, i);
  return CLEMBED_OK;
}

clembed_status clembed_checkpoint_save(clembed_context *ctx, const char *path, const clembed_checkpoint_item *items,
                                       size_t n, const char *const *meta_keys, const char *const *meta_values,
                                       size_t n_meta) {
  const char *op = SAVE;
  if (!ctx) return clembed_context_fail(NULL, CLEMBED_ERR_INVALID_ARGUMENT, op, "ctx", -1, 0, "%s: ctx is NULL", op);
  if (!path || !path[0])
    return clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, "path", -1, 0, "%s: path is %s", op,
                                path ? "empty" : "NULL");
  if (n && !items)
    return clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, "items", -1, 0, "%s: items is NULL", op);
  if (n_meta && (!meta_keys || !meta_values))
    return clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, !meta_keys ? "meta_keys" : "meta_values", -1,
                                0, "%s: %s is NULL", op, !meta_keys ? "meta_keys" : "meta_values");
  clembed_status status = CLEMBED_OK;
  ce_ckpt_tensor *t = calloc(n ? n : 1, sizeof *t);
  char *header = NULL, *tmp = NULL;
  void *buf = NULL;
  int fd = -1;
  if (!t) return clembed_context_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, op, "", -1, 0, "%s: out of host memory", op);
  for (size_t i = 0; i < n; i++) {
    if ((status = check_item(ctx, op, &items[i], i)) != CLEMBED_OK) goto done;
    t[i].name = items[i].name;
    t[i].dtype = items[i].matrix->dtype;
    t[i].rows = items[i].matrix->rows;
    t[i].cols = items[i].matrix->cols;
  }
  char msg[512];
  size_t hlen = 0;
  header = ce_ckpt_header(t, n, meta_keys, meta_values, n_meta, &hlen, &status, msg, sizeof msg);
  if (!header) {
    status = clembed_context_fail(ctx, status, op, strncmp(msg, "metadata", 8) ? "items" : "meta_keys", -1, 0,
                                  "%s: %s: %s", op, path, msg);
    goto done;
  }
  uint64_t most = ce_ckpt_largest_piece(t, n);
  buf = malloc(most ? (size_t)most : 1);
  tmp = ce_ckpt_temp_path(path);
  if (!buf || !tmp) {
    status = clembed_context_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, op, "", -1, 0, "%s: out of host memory", op);
    goto done;
  }
  ce_ckpt_remove_stale(path);
  fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666); /* never through a link */
  if (fd < 0) {
    status = clembed_context_fail(ctx, CLEMBED_ERR_FILE, op, "path", -1, 0, "%s: %s: cannot create %s: %s", op, path,
                                  tmp, strerror(errno));
    goto done;
  }
  ce_ckpt_stage("opened");
  for (size_t i = 0; i < n; i++) {
    const clembed_matrix *m = items[i].matrix;
    size_t step = ce_ckpt_rows_per_piece(t[i].row_bytes);
    uint32_t crc = 0;
    for (size_t r = 0; r < m->rows; r += step) {
      size_t k = m->rows - r < step ? m->rows - r : step;
      clembed_matrix v = ce_ckpt_rows_of(m, r, k);
      size_t bytes = k * (size_t)t[i].row_bytes;
      if (bytes) {
        clembed_status s = clembed_matrix_read(ctx, &v, buf, m->dtype);
        if (s != CLEMBED_OK) {
          /* the read's own message names what is wrong; say which item it was */
          status = s;
          char first[1024];
          snprintf(first, sizeof first, "%s", clembed_context_message(ctx));
          clembed_context_fail(ctx, s, op, "items", (int64_t)i, 0, "%s: item %zu ('%s'): %s", op, i, items[i].name,
                               first);
          goto done;
        }
        crc = ce_ckpt_crc32c(crc, buf, bytes);
        uint64_t at = t[i].offset + (uint64_t)r * t[i].row_bytes;
        if (ce_ckpt_pwrite(fd, buf, bytes, at) != 0) {
          status = clembed_context_fail(ctx, CLEMBED_ERR_FILE, op, "path", -1, 0, "%s: %s: writing %s failed: %s", op,
                                        path, tmp, strerror(errno));
          goto done;
        }
        ce_ckpt_start_writeback(fd, at, bytes);
      }
    }
    t[i].crc = crc;
  }
  ce_ckpt_stage("data");
  free(header);
  header = ce_ckpt_header(t, n, meta_keys, meta_values, n_meta, &hlen, &status, msg, sizeof msg);
  if (!header) {
    status = clembed_context_fail(ctx, status, op, "", -1, 0, "%s: %s: %s", op, path, msg);
    goto done;
  }
  if (ce_ckpt_pwrite(fd, header, hlen, 0) != 0) {
    status = clembed_context_fail(ctx, CLEMBED_ERR_FILE, op, "path", -1, 0, "%s: %s: writing %s failed: %s", op, path,
                                  tmp, strerror(errno));
    goto done;
  }
  ce_ckpt_stage("header");
  if (fsync(fd) != 0) {
    status = clembed_context_fail(ctx, CLEMBED_ERR_FILE, op, "path", -1, 0, "%s: %s: syncing %s failed: %s", op, path,
                                  tmp, strerror(errno));
    goto done;
  }
  int rc = close(fd);
  fd = -1;
  if (rc != 0) {
    status = clembed_context_fail(ctx, CLEMBED_ERR_FILE, op, "path", -1, 0, "%s: %s: closing %s failed: %s", op, path,
                                  tmp, strerror(errno));
    goto done;
  }
  ce_ckpt_stage("synced");
  if (rename(tmp, path) != 0) {
    status = clembed_context_fail(ctx, CLEMBED_ERR_FILE, op, "path", -1, 0, "%s: %s: renaming %s to it failed: %s", op,
                                  path, tmp, strerror(errno));
    goto done;
  }
  ce_ckpt_stage("renamed");
  free(tmp); /* renamed: nothing to remove */
  tmp = NULL;
  if (ce_ckpt_sync_folder(path) != 0) {
    status = clembed_context_fail(ctx, CLEMBED_ERR_FILE, op, "path", -1, 0,
                                  "%s: %s: syncing its folder failed (the file is written): %s", op, path,
                                  strerror(errno));
    goto done;
  }
  ce_ckpt_stage("done");
done:
  if (fd >= 0) close(fd);
  if (tmp && status != CLEMBED_OK) unlink(tmp);
  free(tmp);
  free(buf);
  free(header);
  free(t);
  return status;
}

/* --------------------------------------------------------------------- load */

clembed_status clembed_checkpoint_load(clembed_context *ctx, const char *path, const clembed_checkpoint_item *items,
                                       size_t n) {
  const char *op = LOAD;
  if (!ctx) return clembed_context_fail(NULL, CLEMBED_ERR_INVALID_ARGUMENT, op, "ctx", -1, 0, "%s: ctx is NULL", op);
  if (!path)
    return clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, "path", -1, 0, "%s: path is NULL", op);
  if (n && !items)
    return clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, "items", -1, 0, "%s: items is NULL", op);
  for (size_t i = 0; i < n; i++) {
    clembed_status s = check_item(ctx, op, &items[i], i);
    if (s != CLEMBED_OK) return s;
  }
  clembed_file *f = NULL;
  clembed_status opened = clembed_file_open(path, &f);
  if (opened != CLEMBED_OK)
    return clembed_context_fail(ctx, opened, op, "path", -1, 0, "%s: %s", op, clembed_last_error_message());
  clembed_status status = CLEMBED_OK;
  const char *mark = clembed_file_metadata_find(f, "clembed.checkpoint");
  if (!mark || strcmp(mark, "1")) {
    status = clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, "path", -1, 0,
                                  "%s: %s is not a clembed checkpoint (%s)", op, path,
                                  mark ? "an unknown checkpoint version" : "no \"clembed.checkpoint\" in its metadata");
    goto done;
  }
  /* every check first: names, shapes, dtypes, then every checksum */
  struct found {
    const uint8_t *data;
    uint64_t bytes;
    uint32_t crc;
  } *fs = calloc(n ? n : 1, sizeof *fs);
  if (!fs) {
    status = clembed_context_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, op, "", -1, 0, "%s: out of host memory", op);
    goto done;
  }
  for (size_t i = 0; i < n && status == CLEMBED_OK; i++) {
    const clembed_matrix *m = items[i].matrix;
    char whose[64], msg[1024];
    int oom;
    snprintf(whose, sizeof whose, "the matrix of item %zu", i);
    if (ce_ckpt_find(f, path, items[i].name, m->dtype, m->rows, m->cols, whose, &fs[i].data, &fs[i].bytes, &fs[i].crc,
                     &oom, msg, sizeof msg) != 0)
      status = clembed_context_fail(ctx, oom ? CLEMBED_ERR_OUT_OF_MEMORY : CLEMBED_ERR_INVALID_ARGUMENT, op, "items",
                                    (int64_t)i, 0, "%s: %s (item %zu)", op, msg, i);
    if (status == CLEMBED_OK) { /* the matrix as the writes will take it (its buffer, offset, ld, pieces) */
      ce_pieces pc;
      char what[64];
      snprintf(what, sizeof what, "%s: items", op);
      status = ce_check_pieces(ctx, items[i].matrix, what, 1, &pc);
      if (status == CLEMBED_OK) ce_pieces_release(&pc);
    }
  }
  for (size_t i = 0; i < n && status == CLEMBED_OK; i++) {
    uint32_t got = ce_ckpt_crc32c(0, fs[i].data, (size_t)fs[i].bytes);
    if (got != fs[i].crc)
      status = clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, op, "items", (int64_t)i, 0,
                                    "%s: %s: tensor '%s' is damaged: its bytes' CRC-32C is %08x, the file says %08x",
                                    op, path, items[i].name, (unsigned)got, (unsigned)fs[i].crc);
  }
  /* then the writes, a piece of rows at a time from the mapping */
  for (size_t i = 0; i < n && status == CLEMBED_OK; i++) {
    clembed_matrix *m = items[i].matrix;
    uint64_t rb = clembed_dtype_row_bytes(m->dtype, m->cols);
    size_t step = ce_ckpt_rows_per_piece(rb);
    for (size_t r = 0; r < m->rows && status == CLEMBED_OK && rb; r += step) {
      size_t k = m->rows - r < step ? m->rows - r : step;
      clembed_matrix v = ce_ckpt_rows_of(m, r, k);
      clembed_status s = clembed_matrix_write(ctx, &v, fs[i].data + (uint64_t)r * rb, m->dtype);
      if (s != CLEMBED_OK) {
        char first[1024];
        snprintf(first, sizeof first, "%s", clembed_context_message(ctx));
        status = clembed_context_fail(ctx, s, op, "items", (int64_t)i, 0, "%s: item %zu ('%s'): %s", op, i,
                                      items[i].name, first);
      }
    }
  }
  free(fs);
done:
  clembed_file_close(f);
  return status;
}
