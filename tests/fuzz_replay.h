/* What every fuzz target shares (fuzz_io.h's targets, fuzz_json.c; FUZZ_NAME
 * defined first): REQUIRE, which aborts (a crash for the fuzzer) where a
 * contract breaks, saying which; and, built with CLEMBED_FUZZ_REPLAY, a main()
 * that feeds every file of the directories or files on its command line (and
 * the empty input) to the target's LLVMFuzzerTestOneInput: a CTest over the
 * corpora, and the way to replay a crash file. */
#ifndef CLEMBED_FUZZ_REPLAY_H
#define CLEMBED_FUZZ_REPLAY_H
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(cond, ...)                                                                     \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s: %s:%d: contract broken: %s: ", FUZZ_NAME, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                                            \
      fputc('\n', stderr);                                                                     \
      abort();                                                                                 \
    }                                                                                          \
  } while (0)

#ifdef CLEMBED_FUZZ_REPLAY
static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  for (;;) {
    if (n == cap) {
      uint8_t *g = realloc(buf, cap *= 2);
      if (!g) break;
      buf = g;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    if (r == 0) break;
    n += r;
  }
  fclose(f);
  uint8_t *exact = malloc(n ? n : 1); /* exactly n bytes: an overrun is AddressSanitizer's to see */
  if (n) memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  return 1;
}

int main(int argc, char **argv) {
  int files = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "%s_replay: no such file or directory: %s\n", FUZZ_NAME, argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      files += replay_file(argv[i]);
      continue;
    }
    DIR *d = opendir(argv[i]);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
      char p[8192];
      if (e->d_name[0] == '.') continue;
      snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
      if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) files += replay_file(p);
    }
    if (d) closedir(d);
  }
  LLVMFuzzerTestOneInput((const uint8_t *)"", 0);
  printf("%s_replay: %d files, every contract held\n", FUZZ_NAME, files);
  return files > 0 ? 0 : 1;
}
#endif
#endif
