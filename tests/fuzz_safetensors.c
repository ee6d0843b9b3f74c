/* Fuzz target for the library's .safetensors reader (src/io/safetensors.c).
 * An input already laid out as a safetensors file (its 9th byte '{') is used
 * as it is; any other input is taken as JSON followed by data: the header
 * length (up to and including the last '}', or all of it) is put in front, so
 * that the fuzzer's JSON reaches the parser. See fuzz_io.h. */
#define FUZZ_NAME "fuzz_safetensors"
#define FUZZ_SHAPE shape_safetensors
#include "fuzz_io.h"

static uint8_t *shape_safetensors(const uint8_t *data, size_t size, size_t *n) {
  if (size >= 9 && data[8] == '{') {
    uint8_t *out = malloc(size);
    if (!out) return NULL;
    memcpy(out, data, size);
    *n = size;
    return out;
  }
  size_t json = size;
  while (json > 0 && data[json - 1] != '}') json--;
  if (json == 0) json = size;
  uint8_t *out = malloc(size + 9);
  if (!out) return NULL;
  for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)json >> (8 * i));
  if (size) memcpy(out + 8, data, size);
  *n = size + 8;
  if (size == 0 || data[0] != '{') { /* the detection needs '{' first */
    memmove(out + 9, out + 8, size);
    out[8] = '{';
    *n = size + 9;
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)(json + 1) >> (8 * i));
  }
  return out;
}
