/* Fuzz target for the .npy reader (tools/npy.c), which every file given to the
 * command-line tool goes through.
 *
 * npy_read takes a path, so each input is written to a memfd (a file in memory,
 * opened again through /proc/self/fd; a temporary file where that is not
 * available) and read back. Beyond "no crash, no leak, no undefined behaviour"
 * (AddressSanitizer, LeakSanitizer and UBSan do those), the contract of npy.h is
 * checked and a violation aborts, which the fuzzer reports as a crash:
 * - failure: -1, *out zeroed, err NUL-terminated and starting with the path,
 *   also with tiny err buffers (never written past errlen) and with err NULL;
 * - success: a valid dtype, ndim <= NPY_MAX_DIMS, count = product of shape,
 *   unused shape entries 0, data not NULL and equal to the file's last
 *   count * itemsize bytes (nothing may follow the data); npy_write of the
 *   result and npy_read of that give the same array back; npy_free zeroes.
 *
 * Built two ways (tests/CMakeLists.txt):
 * - fuzz_npy (clang, -DCLEMBED_FUZZ=ON): libFuzzer with ASan and UBSan; run it
 *   with tests/run_fuzz.sh BUILD_DIR SECONDS or ./tools/check.sh --fuzz;
 * - fuzz_npy_replay (any compiler, CLEMBED_FUZZ_REPLAY): a main() that feeds
 *   every file of the directories or files given on the command line through the
 *   same checks (a ctest over the corpora, and a way to replay a crash file). */
#define _GNU_SOURCE
#include "npy.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

static char in_path[4096];
static int in_fd = -1;
static char out_dir[4096], out_path[4200];

#define REQUIRE(cond, ...)                                                  \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "fuzz_npy: %s:%d: contract broken: %s: ", __FILE__,   \
              __LINE__, #cond);                                             \
      fprintf(stderr, __VA_ARGS__);                                         \
      fputc('\n', stderr);                                                  \
      abort();                                                              \
    }                                                                       \
  } while (0)

static const char *tmp_base(void) {
  struct stat st;
  const char *t = getenv("TMPDIR");
  if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return t && *t ? t : "/tmp";
}

static void cleanup(void) {
  if (out_path[0]) unlink(out_path);
  if (out_dir[0]) rmdir(out_dir);
  if (in_fd >= 0 && strncmp(in_path, "/proc/", 6) != 0) unlink(in_path);
}

static void setup(void) {
  const char *base = tmp_base();
#if defined(__linux__)
  in_fd = memfd_create("fuzz_npy_input", 0);
  if (in_fd >= 0) {
    snprintf(in_path, sizeof in_path, "/proc/self/fd/%d", in_fd);
    FILE *probe = fopen(in_path, "rb");
    if (probe) {
      fclose(probe);
    } else { /* no /proc: a file instead */
      close(in_fd);
      in_fd = -1;
    }
  }
#endif
  if (in_fd < 0) {
    snprintf(in_path, sizeof in_path, "%s/fuzz_npy_in_XXXXXX", base);
    in_fd = mkstemp(in_path);
    REQUIRE(in_fd >= 0, "cannot create a temporary file in %s", base);
  }
  snprintf(out_dir, sizeof out_dir, "%s/fuzz_npy_out_XXXXXX", base);
  REQUIRE(mkdtemp(out_dir) != NULL, "cannot create a temporary directory in %s", base);
  snprintf(out_path, sizeof out_path, "%s/roundtrip.npy", out_dir);
  atexit(cleanup);
}

static int zeroed(const npy_array *a) {
  static const npy_array z;
  /* compare field by field: padding bytes need not be zero */
  if (a->dtype != z.dtype || a->ndim != 0 || a->count != 0 || a->data != NULL) return 0;
  for (int i = 0; i < NPY_MAX_DIMS; i++)
    if (a->shape[i] != 0) return 0;
  return 1;
}

static int little_endian(void) {
  const uint16_t one = 1;
  return *(const uint8_t *)&one == 1;
}

static void check_failure(const char *path, const npy_array *a, const char *err, size_t errlen) {
  REQUIRE(zeroed(a), "a failed npy_read did not zero its array");
  REQUIRE(memchr(err, '\0', errlen) != NULL, "the message is not NUL-terminated");
  REQUIRE(strncmp(err, path, strlen(path)) == 0 || strlen(err) == errlen - 1,
          "the message '%s' does not start with the path %s", err, path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!in_path[0]) setup();
  REQUIRE(ftruncate(in_fd, 0) == 0, "ftruncate");
  size_t done = 0;
  while (done < size) {
    ssize_t w = pwrite(in_fd, data + done, size - done, (off_t)done);
    REQUIRE(w > 0, "pwrite");
    done += (size_t)w;
  }

  npy_array a;
  char err[1024];
  memset(&a, 0xA5, sizeof a);
  memset(err, 'Z', sizeof err);
  int rc = npy_read(in_path, &a, err, sizeof err);
  REQUIRE(rc == 0 || rc == -1, "npy_read returned %d", rc);
  if (rc != 0) {
    check_failure(in_path, &a, err, sizeof err);
    REQUIRE(strlen(err) > strlen(in_path) + 1, "the message '%s' says nothing after the path", err);
    /* tiny and missing message buffers: truncated, terminated, never overrun */
    char small[16];
    for (size_t len = 1; len <= 9; len += 4) {
      memset(small, 'Z', sizeof small);
      npy_array b;
      memset(&b, 0xA5, sizeof b);
      REQUIRE(npy_read(in_path, &b, small, len) == -1, "a second read of the same bytes succeeded");
      REQUIRE(zeroed(&b), "a failed npy_read did not zero its array");
      REQUIRE(memchr(small, '\0', len) != NULL, "an err buffer of %zu bytes is not NUL-terminated", len);
      for (size_t k = len; k < sizeof small; k++) REQUIRE(small[k] == 'Z', "wrote past an err buffer of %zu bytes", len);
    }
    npy_array c;
    REQUIRE(npy_read(in_path, &c, NULL, 0) == -1 && zeroed(&c), "npy_read with err NULL");
    return 0;
  }

  /* success */
  size_t item = npy_itemsize(a.dtype);
  REQUIRE(item == 2 || item == 4 || item == 8, "dtype %d", (int)a.dtype);
  REQUIRE(a.ndim >= 0 && a.ndim <= NPY_MAX_DIMS, "ndim %d", a.ndim);
  size_t count = 1;
  for (int i = 0; i < a.ndim; i++) {
    REQUIRE(a.shape[i] == 0 || count <= SIZE_MAX / a.shape[i], "the shape overflows");
    count *= a.shape[i];
  }
  for (int i = a.ndim; i < NPY_MAX_DIMS; i++) REQUIRE(a.shape[i] == 0, "unused shape[%d] = %zu", i, a.shape[i]);
  REQUIRE(a.count == count, "count %zu, shape gives %zu", a.count, count);
  REQUIRE(a.data != NULL, "data is NULL");
  REQUIRE(count <= size / item, "%zu elements of %zu bytes from a %zu-byte file", count, item, size);
  size_t bytes = count * item;
  if (little_endian())
    REQUIRE(bytes == 0 || memcmp(a.data, data + size - bytes, bytes) == 0, "the data are not the file's last bytes");

  /* written and read back: the same array */
  if (bytes <= ((size_t)1 << 20)) {
    char werr[1024];
    int wrc = npy_write(out_path, a.dtype, a.ndim, a.ndim ? a.shape : NULL, a.data, werr, sizeof werr);
    REQUIRE(wrc == 0, "npy_write of what npy_read gave: %s", werr);
    npy_array b;
    char rerr[1024];
    REQUIRE(npy_read(out_path, &b, rerr, sizeof rerr) == 0, "reading back what npy_write wrote: %s", rerr);
    REQUIRE(b.dtype == a.dtype && b.ndim == a.ndim && b.count == a.count, "the round trip changed the array");
    REQUIRE(!memcmp(b.shape, a.shape, sizeof a.shape), "the round trip changed the shape");
    REQUIRE(bytes == 0 || !memcmp(b.data, a.data, bytes), "the round trip changed the data");
    npy_free(&b);
    REQUIRE(zeroed(&b), "npy_free did not zero the array");
  }
  npy_free(&a);
  REQUIRE(zeroed(&a), "npy_free did not zero the array");
  npy_free(NULL);
  return 0;
}

#ifdef CLEMBED_FUZZ_REPLAY
/* Feeds each file (or every file of each directory) through the target. */
static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz_npy_replay: cannot open %s\n", path);
    return 0;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  for (;;) {
    if (n == cap) {
      uint8_t *g = realloc(buf, cap *= 2);
      if (!g) {
        free(buf);
        fclose(f);
        return 0;
      }
      buf = g;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    if (r == 0) break;
    n += r;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 1;
}

int main(int argc, char **argv) {
  int files = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "fuzz_npy_replay: no such file or directory: %s\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      files += replay_file(argv[i]);
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) continue;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.') continue;
      char p[8192];
      snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
      if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) files += replay_file(p);
    }
    closedir(d);
  }
  /* the empty input too */
  LLVMFuzzerTestOneInput((const uint8_t *)"", 0);
  printf("fuzz_npy_replay: %d files, every npy.h contract held\n", files);
  return files > 0 ? 0 : 1;
}
#endif
