/* clembed_file_*: a file mapped read-only and its table of tensors. */
#define _POSIX_C_SOURCE 200809L
#include "file.h"

#include "../runtime/runtime.h" /* the message and detail of a call without a context */

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define OPEN "clembed_file_open"

/* The calling thread's clembed_last_error_message() and error detail. */
static void ce_set_last_error(clembed_status code, const char *op, const char *argument, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ce_last_message("%s", msg);
  ce_last_fail(code, op, argument);
}

clembed_status clembed_file_open(const char *path, clembed_file **out) {
  clembed_file *f = NULL;
  int fd = -1;
  if (out) *out = NULL;
  if (!path || !out) {
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, OPEN, path ? "f" : "path", "clembed_file_open: %s is NULL",
                      path ? "f" : "path");
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  const uint16_t one = 1;
  if (*(const unsigned char *)&one != 1) { /* the formats are little-endian; tensors are used as they lie */
    ce_set_last_error(CLEMBED_ERR_UNSUPPORTED, OPEN, "", "%s: the file readers need a little-endian host", path);
    return CLEMBED_ERR_UNSUPPORTED;
  }
  clembed_status status = CLEMBED_ERR_INVALID_ARGUMENT;
  f = calloc(1, sizeof *f);
  if (f) f->fd = -1;
  if (!f || !(f->path = strdup(path))) {
    ce_set_last_error(CLEMBED_ERR_OUT_OF_MEMORY, OPEN, "", "%s: out of host memory", path);
    status = CLEMBED_ERR_OUT_OF_MEMORY;
    goto cleanup;
  }
  fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block the open */
  if (fd < 0) {
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, OPEN, "path", "%s: cannot open: %s", path, strerror(errno));
    goto cleanup;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, OPEN, "path", "%s: cannot stat: %s", path, strerror(errno));
    goto cleanup;
  }
  if (S_ISDIR(st.st_mode)) {
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, OPEN, "path",
                      "%s: is a directory, not a .npy, .safetensors or .gguf file", path);
    goto cleanup;
  }
  if (!S_ISREG(st.st_mode)) {
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, OPEN, "path",
                      "%s: not a regular file (a pipe or a device cannot be mapped)", path);
    goto cleanup;
  }
  if (st.st_size < 0 || (uintmax_t)st.st_size > (uintmax_t)SIZE_MAX) {
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, OPEN, "path", "%s: too large to map in this process", path);
    goto cleanup;
  }
  f->size = (size_t)st.st_size;
  if (f->size) {
    void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      status = e == ENOMEM ? CLEMBED_ERR_OUT_OF_MEMORY : CLEMBED_ERR_INVALID_ARGUMENT;
      ce_set_last_error(status, OPEN, "path", "%s: cannot map %zu bytes: %s", path, f->size, strerror(e));
      goto cleanup;
    }
    f->map = p;
  }
  if (ce_io_parse(f->map, f->size, &f->table) != 0) {
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, OPEN, "path", "%s: %s", path, f->table.message);
    goto cleanup;
  }
  f->fd = fd; /* load.c maps a table's pages again from it */
  fd = -1;
  *out = f;
  f = NULL;
  status = CLEMBED_OK;
  ce_set_last_error(CLEMBED_OK, "", "", "%s", "");
cleanup:
  if (fd >= 0) close(fd);
  clembed_file_close(f);
  return status;
}

clembed_status clembed_file_open_memory(const void *data, size_t size, const char *name, clembed_file **out) {
  const char *op = "clembed_file_open_memory";
  if (out) *out = NULL;
  if (!out || !name || (!data && size)) {
    const char *arg = !out ? "f" : !name ? "name" : "data";
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, op, arg, "%s: %s is NULL", op, arg);
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  const uint16_t one = 1;
  if (*(const unsigned char *)&one != 1) {
    ce_set_last_error(CLEMBED_ERR_UNSUPPORTED, op, "", "%s: the file readers need a little-endian host", name);
    return CLEMBED_ERR_UNSUPPORTED;
  }
  clembed_file *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(name))) {
    free(f);
    ce_set_last_error(CLEMBED_ERR_OUT_OF_MEMORY, op, "", "%s: out of host memory", name);
    return CLEMBED_ERR_OUT_OF_MEMORY;
  }
  f->fd = -1;
  f->borrowed = 1;
  f->map = size ? data : NULL;
  f->size = size;
  if (ce_io_parse(f->map, f->size, &f->table) != 0) {
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, op, "data", "%s: %s", name, f->table.message);
    clembed_file_close(f);
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  *out = f;
  ce_set_last_error(CLEMBED_OK, "", "", "%s", "");
  return CLEMBED_OK;
}

void clembed_file_close(clembed_file *f) {
  if (!f) return;
  if (f->map && !f->borrowed) munmap((void *)f->map, f->size);
  if (f->fd >= 0) close(f->fd);
  ce_io_table_free(&f->table);
  free(f->path);
  free(f);
}

size_t clembed_file_tensor_count(const clembed_file *f) { return f ? f->table.count : 0; }

clembed_status clembed_file_tensor_info(const clembed_file *f, size_t i, clembed_tensor_info *info) {
  if (!f || !info) {
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_file_tensor_info", f ? "info" : "f",
                      "clembed_file_tensor_info: %s is NULL", f ? "info" : "f");
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  if (i >= f->table.count) {
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_file_tensor_info", "i",
                      "%s: tensor %zu does not exist (the file has %zu)", f->path, i, f->table.count);
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  *info = f->table.t[i].info;
  return CLEMBED_OK;
}

clembed_status clembed_file_tensor_shape(const clembed_file *f, size_t i, uint64_t *shape, int capacity,
                                         int *ndim) {
  const char *op = "clembed_file_tensor_shape";
  if (!f || !ndim || capacity < 0 || (!shape && capacity > 0)) {
    const char *arg = !f ? "f" : !ndim ? "ndim" : capacity < 0 ? "capacity" : "shape";
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, op, arg,
                      capacity < 0 && f && ndim ? "%s: %s is negative" : "%s: %s is NULL", op, arg);
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  if (i >= f->table.count) {
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, op, "i", "%s: tensor %zu does not exist (the file has %zu)",
                      f->path, i, f->table.count);
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  const ce_io_tensor *e = &f->table.t[i];
  const uint64_t *dims = e->dims_off != (size_t)-1 ? f->table.dims + e->dims_off : e->info.shape;
  int n = e->dims_off != (size_t)-1 ? e->ndim : e->info.ndim;
  *ndim = n;
  for (int d = 0; d < n && d < capacity; d++) shape[d] = dims[d];
  return CLEMBED_OK;
}

clembed_status clembed_file_tensor_data(const clembed_file *f, size_t i, const void **data) {
  if (!f || !data) {
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_file_tensor_data", f ? "data" : "f",
                      "clembed_file_tensor_data: %s is NULL", f ? "data" : "f");
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  if (i >= f->table.count) {
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_file_tensor_data", "i",
                      "%s: tensor %zu does not exist (the file has %zu)", f->path, i, f->table.count);
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  *data = f->table.t[i].info.bytes ? (const void *)(f->map + f->table.t[i].offset) : NULL;
  return CLEMBED_OK;
}

size_t clembed_file_metadata_count(const clembed_file *f) { return f ? f->table.meta_count : 0; }

clembed_status clembed_file_metadata(const clembed_file *f, size_t i, const char **key, const char **value) {
  const char *op = "clembed_file_metadata";
  if (!f) {
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, op, "f", "%s: f is NULL", op);
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  if (i >= f->table.meta_count) {
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, op, "i", "%s: metadata entry %zu does not exist (the file has %zu)",
                      f->path, i, f->table.meta_count);
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  if (key) *key = f->table.strings + f->table.meta[2 * i];
  if (value) *value = f->table.strings + f->table.meta[2 * i + 1];
  return CLEMBED_OK;
}

const char *clembed_file_metadata_find(const clembed_file *f, const char *key) {
  if (!f || !key) return NULL;
  for (size_t i = 0; i < f->table.meta_count; i++)
    if (!strcmp(f->table.strings + f->table.meta[2 * i], key)) return f->table.strings + f->table.meta[2 * i + 1];
  return NULL;
}

void ce_file_list(const clembed_file *f, char *buf, size_t cap) {
  size_t o = 0;
  if (!cap) return;
  buf[0] = '\0';
  for (size_t i = 0; i < f->table.count; i++) {
    const char *n = f->table.t[i].info.name;
    int w = snprintf(buf + o, cap - o, "%s'%s'", i ? ", " : "", n);
    if (w < 0 || (size_t)w >= cap - o) {
      if (cap >= 4) memcpy(buf + cap - 4, "...", 4);
      return;
    }
    o += (size_t)w;
  }
}

clembed_status ce_file_lookup(const clembed_file *f, const char *name, size_t *i, char *msg, size_t cap) {
  if (name) {
    for (size_t k = 0; k < f->table.count; k++)
      if (!strcmp(f->table.t[k].info.name, name)) {
        *i = k;
        return CLEMBED_OK;
      }
  } else {
    if (f->table.count == 1) {
      *i = 0;
      return CLEMBED_OK;
    }
    if (f->table.format == CE_IO_GGUF)
      for (size_t k = 0; k < f->table.count; k++)
        if (!strcmp(f->table.t[k].info.name, "token_embd.weight")) {
          *i = k;
          return CLEMBED_OK;
        }
  }
  char list[1024];
  ce_file_list(f, list, sizeof list);
  if (f->table.count == 0)
    snprintf(msg, cap, "%s: the file holds no tensor", f->path);
  else if (name)
    snprintf(msg, cap, "%s: no tensor named '%s'; the file's tensors: %s", f->path, name, list);
  else
    snprintf(msg, cap, "%s: the file holds %zu tensors: name one of them (%s)", f->path, f->table.count, list);
  return CLEMBED_ERR_INVALID_ARGUMENT;
}

clembed_status clembed_file_find(const clembed_file *f, const char *name, size_t *i) {
  if (!f || !name || !i) {
    const char *arg = !f ? "f" : !name ? "name" : "i";
    ce_set_last_error(CLEMBED_ERR_INVALID_ARGUMENT, "clembed_file_find", arg, "clembed_file_find: %s is NULL", arg);
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  char msg[1400];
  clembed_status s = ce_file_lookup(f, name, i, msg, sizeof msg);
  if (s != CLEMBED_OK) ce_set_last_error(s, "clembed_file_find", "name", "%s", msg);
  return s;
}
