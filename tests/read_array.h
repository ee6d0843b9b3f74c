/* Reading a file of one array back in a test, through the library's reader
 * (clembed_io.h), into an npy_array (tools/cli/npy_write.h) that the test
 * owns: the outputs of the command-line tool and what npy_write wrote.
 * Shared by test_npy, test_cli and test_cli_rope. */
#ifndef CLEMBED_TEST_READ_ARRAY_H
#define CLEMBED_TEST_READ_ARRAY_H

#include "clembed_io.h"
#include "npy_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The npy_dtype of a tensor: the float types by dtype, the integer types by
 * the file's own name for them; -1 for any other. */
static inline int read_array_dtype(const clembed_tensor_info *t) {
  static const char *const i4[] = {"<i4", "I32", "i32"}, *const i8[] = {"<i8", "I64", "i64"};
  if (t->dtype == CLEMBED_F32) return NPY_F4;
  if (t->dtype == CLEMBED_F16) return NPY_F2;
  for (int k = 0; k < 3; k++) {
    if (!strcmp(t->type_name, i4[k])) return NPY_I4;
    if (!strcmp(t->type_name, i8[k])) return NPY_I8;
  }
  return -1;
}

/* Reads the file's only tensor: 0, or -1 with *out zeroed and a message
 * starting with the path in err (when err is not NULL and errlen > 0). */
static inline int read_array(const char *path, npy_array *out, char *err, size_t errlen) {
  clembed_file *f = NULL;
  clembed_tensor_info t;
  uint64_t dims[CLEMBED_FILE_MAX_DIMS];
  const void *data = NULL;
  int ndim = 0, rc = -1;
  if (out) memset(out, 0, sizeof *out);
  if (err && errlen) err[0] = '\0';
  if (!out) {
    if (err && errlen) snprintf(err, errlen, "%.400s: out is NULL", path ? path : "(null)");
    return -1;
  }
  if (clembed_file_open(path, &f) != CLEMBED_OK) {
    if (err && errlen) {
      strncpy(err, clembed_last_error_message(), errlen - 1);
      err[errlen - 1] = '\0';
    }
    return -1;
  }
  if (clembed_file_tensor_count(f) != 1 || clembed_file_tensor_info(f, 0, &t) != CLEMBED_OK ||
      clembed_file_tensor_shape(f, 0, dims, CLEMBED_FILE_MAX_DIMS, &ndim) != CLEMBED_OK ||
      clembed_file_tensor_data(f, 0, &data) != CLEMBED_OK) {
    if (err && errlen) snprintf(err, errlen, "%.400s: not a file of one array", path);
    goto done;
  }
  int dt = read_array_dtype(&t);
  if (dt < 0) {
    if (err && errlen) snprintf(err, errlen, "%.400s: unsupported dtype '%s' (the tests read f32, f16, i32, i64)", path,
                                t.type_name);
    goto done;
  }
  out->dtype = (npy_dtype)dt;
  out->ndim = ndim;
  out->count = 1;
  for (int d = 0; d < ndim; d++) {
    out->shape[d] = (size_t)dims[d];
    out->count *= out->shape[d];
  }
  out->data = malloc(t.bytes ? (size_t)t.bytes : 1);
  if (!out->data) {
    if (err && errlen) snprintf(err, errlen, "%.400s: out of memory", path);
    memset(out, 0, sizeof *out);
    goto done;
  }
  if (t.bytes) memcpy(out->data, data, (size_t)t.bytes);
  rc = 0;
done:
  clembed_file_close(f);
  return rc;
}

/* Frees an array read_array gave and zeroes it; NULL is a no-op. */
static inline void free_array(npy_array *a) {
  if (!a) return;
  free(a->data);
  memset(a, 0, sizeof *a);
}

#endif
