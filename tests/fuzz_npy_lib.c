/* Fuzz target for the library's .npy reader (src/io/npy.c; the command-line
 * tool's own reader is fuzz_npy's): an input that does not start with the
 * .npy magic gets it put in front. See fuzz_io.h. */
#define FUZZ_NAME "fuzz_npy_lib"
#define FUZZ_SHAPE shape_npy
#include "fuzz_io.h"

static uint8_t *shape_npy(const uint8_t *data, size_t size, size_t *n) {
  size_t pre = size >= 6 && !memcmp(data, "\x93NUMPY", 6) ? 0 : 6;
  uint8_t *out = malloc(size + pre);
  if (!out) return NULL;
  memcpy(out, "\x93NUMPY", pre);
  if (size) memcpy(out + pre, data, size);
  *n = size + pre;
  return out;
}
