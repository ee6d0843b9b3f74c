/* Fuzz target for the JSON reader and writer of the user's tuning file
 * (src/runtime/json.c). The contract, checked on every input (abort: a crash
 * for the fuzzer):
 * - failure: a message "line N: ..." (N from 1), the tree freed (LeakSanitizer);
 * - success: the tree written back as text parses again, and writing that
 *   tree gives the same text (the writer loses nothing the reader keeps).
 * Built with CLEMBED_FUZZ_REPLAY: fuzz_replay.h's main over the corpora. */
#define _GNU_SOURCE
#define FUZZ_NAME "fuzz_json"
#include "fuzz_replay.h" /* REQUIRE, and the replay's main */
#include "runtime/json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* v as text (malloc'd, *n bytes). */
static char *written(const ce_json *v, size_t *n) {
  char *text = NULL;
  FILE *f = open_memstream(&text, n);
  REQUIRE(f != NULL, "open_memstream");
  ce_json_write(f, v, 0);
  REQUIRE(fclose(f) == 0 && text, "the memory stream");
  return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ce_json v, again;
  char err[300];
  memset(err, 0x5A, sizeof err);
  if (ce_json_parse((const char *)data, size, &v, err, sizeof err) != 0) {
    REQUIRE(memchr(err, '\0', sizeof err) && !strncmp(err, "line ", 5) && atoi(err + 5) >= 1, "the message '%.60s'",
            err);
    REQUIRE(v.n == 0 && v.items == NULL && v.keys == NULL && v.text == NULL, "a failed parse kept its tree");
    return 0;
  }
  size_t n1 = 0, n2 = 0;
  char *t1 = written(&v, &n1);
  REQUIRE(ce_json_parse(t1, n1, &again, err, sizeof err) == 0, "the written text does not parse: %s\n%s", err, t1);
  char *t2 = written(&again, &n2);
  REQUIRE(n1 == n2 && !memcmp(t1, t2, n1), "written twice, the texts differ:\n%s\n---\n%s", t1, t2);
  free(t1);
  free(t2);
  ce_json_free(&again);
  ce_json_free(&v);
  return 0;
}

