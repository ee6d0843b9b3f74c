/* Fuzz target for the library's .gguf reader (src/io/gguf.c): an input that
 * does not start with "GGUF" gets it put in front. See fuzz_io.h. */
#define FUZZ_NAME "fuzz_gguf"
#define FUZZ_SHAPE shape_gguf
#include "fuzz_io.h"

static uint8_t *shape_gguf(const uint8_t *data, size_t size, size_t *n) {
  size_t pre = size >= 4 && !memcmp(data, "GGUF", 4) ? 0 : 4;
  uint8_t *out = malloc(size + pre);
  if (!out) return NULL;
  memcpy(out, "GGUF", pre);
  if (size) memcpy(out + pre, data, size);
  *n = size + pre;
  return out;
}
