/* The checkpoint file's format and its safe writing: see ckpt.h. */
#define _GNU_SOURCE /* sync_file_range; gethostname */
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

void (*ce_ckpt_stage_hook)(const char *stage) = NULL;

/* ----------------------------------------------------------------- CRC-32C */

#define CE_CRC32C_POLY 0x82F63B78u /* Castagnoli's polynomial 0x1EDC6F41, reflected */

static uint32_t crc_table[8][256];
static int crc_ready = 0; /* the table is the same for every thread: a race writes the same values */

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? CE_CRC32C_POLY ^ (c >> 1) : c >> 1;
    crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int s = 1; s < 8; s++) crc_table[s][i] = (crc_table[s - 1][i] >> 8) ^ crc_table[0][crc_table[s - 1][i] & 255];
  __atomic_store_n(&crc_ready, 1, __ATOMIC_RELEASE);
}

/* Slicing by 8 (any CPU); c is the running value (inverted). */
static uint32_t crc_tables(uint32_t c, const unsigned char *p, size_t n) {
  if (!__atomic_load_n(&crc_ready, __ATOMIC_ACQUIRE)) crc_init();
  while (n && ((uintptr_t)p & 7)) {
    c = crc_table[0][(c ^ *p++) & 255] ^ (c >> 8);
    n--;
  }
  while (n >= 8) { /* little-endian words */
    uint32_t a, b;
    memcpy(&a, p, 4);
    memcpy(&b, p + 4, 4);
    a ^= c;
    c = crc_table[7][a & 255] ^ crc_table[6][(a >> 8) & 255] ^ crc_table[5][(a >> 16) & 255] ^ crc_table[4][a >> 24] ^
        crc_table[3][b & 255] ^ crc_table[2][(b >> 8) & 255] ^ crc_table[1][(b >> 16) & 255] ^ crc_table[0][b >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = crc_table[0][(c ^ *p++) & 255] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* SSE4.2's crc32 instruction computes CRC-32C: 8 bytes a step, the same value. */
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const unsigned char *p, size_t n) {
  while (n && ((uintptr_t)p & 7)) {
    c = __builtin_ia32_crc32qi(c, *p++);
    n--;
  }
  uint64_t c64 = c;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c64 = __builtin_ia32_crc32di(c64, w);
  }
  c = (uint32_t)c64;
  while (n--) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}
#endif

uint32_t ce_ckpt_crc32c(uint32_t crc, const void *data, size_t n) {
  const unsigned char *p = data;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("sse4.2")) return ~crc_sse42(~crc, p, n);
#endif
  return ~crc_tables(~crc, p, n);
}

/* The combination (as zlib's crc32_combine, for this polynomial): multiplication
 * by x^(8 len_b) in GF(2) modulo the polynomial. */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
  uint32_t sum = 0;
  for (int i = 0; vec; i++, vec >>= 1)
    if (vec & 1) sum ^= mat[i];
  return sum;
}

static void gf2_square(uint32_t *out, const uint32_t *mat) {
  for (int i = 0; i < 32; i++) out[i] = gf2_times(mat, mat[i]);
}

uint32_t ce_ckpt_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  if (!len_b) return crc_a;
  uint32_t even[32], odd[32];
  odd[0] = CE_CRC32C_POLY; /* the operator for one zero bit */
  for (int i = 1; i < 32; i++) odd[i] = 1u << (i - 1);
  gf2_square(even, odd); /* two zero bits */
  gf2_square(odd, even); /* four */
  do {
    gf2_square(even, odd); /* the first is one zero byte */
    if (len_b & 1) crc_a = gf2_times(even, crc_a);
    len_b >>= 1;
    if (!len_b) break;
    gf2_square(odd, even);
    if (len_b & 1) crc_a = gf2_times(odd, crc_a);
    len_b >>= 1;
  } while (len_b);
  return crc_a ^ crc_b;
}

/* ------------------------------------------------------------------ header */

typedef struct sbuf {
  char *p;
  size_t len, cap;
  int failed;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
  if (b->failed) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + n + 1) {
      if (cap > SIZE_MAX / 2) {
        b->failed = 1;
        return;
      }
      cap *= 2;
    }
    char *q = realloc(b->p, cap);
    if (!q) {
      b->failed = 1;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static void putf(sbuf *b, const char *fmt, unsigned long long v) {
  char t[32];
  int n = snprintf(t, sizeof t, fmt, v);
  put(b, t, (size_t)n);
}

/* A JSON string, escaped. */
static void putq(sbuf *b, const char *s) {
  put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      put(b, e, 2);
    } else if (c < 0x20) {
      char e[8];
      snprintf(e, sizeof e, "\\u%04x", c);
      put(b, e, 6);
    } else {
      put(b, s, 1);
    }
  }
  put(b, "\"", 1);
}

/* 1 when s is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static int valid_utf8(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    unsigned c = *p, n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || (n == 2 && c < 0xC2)) return 0;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (unsigned i = 1; i < n; i++) {
      if ((p[i] & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return 0;
    p += n;
  }
  return 1;
}

static char *fail(clembed_status *status, clembed_status code, char *msg, size_t cap, const char *fmt,
                  const char *a, const char *b) {
  *status = code;
  snprintf(msg, cap, fmt, a, b);
  return NULL;
}

char *ce_ckpt_header(ce_ckpt_tensor *t, size_t n, const char *const *keys, const char *const *values, size_t n_meta,
                     size_t *len, clembed_status *status, char *msg, size_t cap) {
  return ce_ckpt_header_own(t, n, keys, values, n_meta, NULL, NULL, 0, len, status, msg, cap);
}

char *ce_ckpt_header_own(ce_ckpt_tensor *t, size_t n, const char *const *keys, const char *const *values,
                         size_t n_meta, const char *const *own_keys, const char *const *own_values, size_t n_own,
                         size_t *len, clembed_status *status, char *msg, size_t cap) {
  *status = CLEMBED_OK;
  for (size_t i = 0; i < n; i++) {
    char idx[32];
    snprintf(idx, sizeof idx, "%zu", i);
    if (!t[i].name) return fail(status, CLEMBED_ERR_INVALID_ARGUMENT, msg, cap, "the name of item %s is NULL", idx, "");
    if (!t[i].name[0] || !valid_utf8(t[i].name) || !strcmp(t[i].name, "__metadata__"))
      return fail(status, CLEMBED_ERR_INVALID_ARGUMENT, msg, cap,
                  "item %s: the name '%s' is not a tensor name (empty, not UTF-8, or \"__metadata__\")", idx,
                  t[i].name);
    for (size_t k = 0; k < i; k++)
      if (!strcmp(t[k].name, t[i].name))
        return fail(status, CLEMBED_ERR_INVALID_ARGUMENT, msg, cap, "item %s: the name '%s' is given twice", idx,
                    t[i].name);
    size_t rb = clembed_dtype_row_bytes(t[i].dtype, (size_t)t[i].cols);
    if (!strcmp(clembed_dtype_name(t[i].dtype), "unknown") || (t[i].cols && !rb))
      return fail(status, CLEMBED_ERR_INVALID_ARGUMENT, msg, cap,
                  "tensor '%s': its dtype is unknown or its cols are not whole blocks (%s)", t[i].name,
                  clembed_dtype_name(t[i].dtype));
    t[i].row_bytes = rb;
    if (rb && t[i].rows > UINT64_MAX / rb)
      return fail(status, CLEMBED_ERR_INVALID_ARGUMENT, msg, cap, "tensor '%s': its size overflows%s", t[i].name, "");
    t[i].bytes = t[i].rows * rb;
  }
  for (size_t i = 0; i < n_meta; i++) {
    char idx[32];
    snprintf(idx, sizeof idx, "%zu", i);
    if (!keys || !values || !keys[i] || !values[i])
      return fail(status, CLEMBED_ERR_INVALID_ARGUMENT, msg, cap, "metadata entry %s: a NULL key or value%s", idx, "");
    if (!keys[i][0] || !valid_utf8(keys[i]) || !valid_utf8(values[i]))
      return fail(status, CLEMBED_ERR_INVALID_ARGUMENT, msg, cap,
                  "metadata entry %s ('%s'): an empty key, or a key or value that is not UTF-8", idx, keys[i]);
    if (!strncmp(keys[i], CE_CKPT_PREFIX, strlen(CE_CKPT_PREFIX)))
      return fail(status, CLEMBED_ERR_INVALID_ARGUMENT, msg, cap,
                  "metadata key '%s': keys starting with \"%s\" are clembed's own", keys[i], CE_CKPT_PREFIX);
    for (size_t k = 0; k < i; k++)
      if (!strcmp(keys[k], keys[i]))
        return fail(status, CLEMBED_ERR_INVALID_ARGUMENT, msg, cap, "metadata key '%s' is given twice%s", keys[i], "");
  }
  sbuf b = {0};
  put(&b, "\0\0\0\0\0\0\0\0", 8);
  puts_(&b, "{\"__metadata__\":{\"clembed.checkpoint\":\"1\"");
  for (size_t i = 0; i < n; i++) {
    puts_(&b, ",");
    sbuf k = {0};
    puts_(&k, CE_CKPT_TENSOR_KEY);
    puts_(&k, t[i].name);
    if (k.failed) {
      free(k.p);
      b.failed = 1;
      break;
    }
    putq(&b, k.p);
    free(k.p);
    puts_(&b, ":\"dtype=");
    puts_(&b, clembed_dtype_name(t[i].dtype));
    putf(&b, " rows=%llu", (unsigned long long)t[i].rows);
    putf(&b, " cols=%llu", (unsigned long long)t[i].cols);
    putf(&b, " crc32c=%08llx\"", (unsigned long long)t[i].crc);
  }
  for (size_t i = 0; i < n_own; i++) {
    puts_(&b, ",");
    putq(&b, own_keys[i]);
    puts_(&b, ":");
    putq(&b, own_values[i]);
  }
  for (size_t i = 0; i < n_meta; i++) {
    puts_(&b, ",");
    putq(&b, keys[i]);
    puts_(&b, ":");
    putq(&b, values[i]);
  }
  puts_(&b, "}");
  uint64_t at = 0;
  for (size_t i = 0; i < n; i++) {
    int plain = t[i].dtype == CLEMBED_F32 || t[i].dtype == CLEMBED_F16 || t[i].dtype == CLEMBED_BF16;
    puts_(&b, ",");
    putq(&b, t[i].name);
    puts_(&b, ":{\"dtype\":\"");
    puts_(&b, ce_ckpt_stored_type(t[i].dtype));
    putf(&b, "\",\"shape\":[%llu,", (unsigned long long)t[i].rows);
    putf(&b, "%llu],", (unsigned long long)(plain ? t[i].cols : t[i].row_bytes));
    putf(&b, "\"data_offsets\":[%llu,", (unsigned long long)at);
    if (t[i].bytes > UINT64_MAX - at) {
      free(b.p);
      return fail(status, CLEMBED_ERR_INVALID_ARGUMENT, msg, cap, "the tensors' sizes overflow%s%s", "", "");
    }
    at += t[i].bytes;
    putf(&b, "%llu]}", (unsigned long long)at);
  }
  puts_(&b, "}");
  while (!b.failed && b.len % CE_CKPT_ALIGN) put(&b, " ", 1);
  if (b.failed) {
    free(b.p);
    return fail(status, CLEMBED_ERR_OUT_OF_MEMORY, msg, cap, "out of host memory for the header%s%s", "", "");
  }
  uint64_t hl = b.len - 8;
  if (hl > 100000000) { /* safetensors' own limit: no reader would open the file */
    free(b.p);
    return fail(status, CLEMBED_ERR_INVALID_ARGUMENT, msg, cap,
                "the header would take more than 100,000,000 bytes (too many tensors or too much metadata)%s%s", "",
                "");
  }
  for (int i = 0; i < 8; i++) b.p[i] = (char)(hl >> (8 * i));
  uint64_t off = b.len;
  for (size_t i = 0; i < n; i++) {
    t[i].offset = off;
    off += t[i].bytes;
  }
  *len = b.len;
  return b.p;
}

int ce_ckpt_parse_entry(const char *value, clembed_dtype *dtype, uint64_t *rows, uint64_t *cols, uint32_t *crc) {
  char name[32];
  unsigned long long r, c;
  unsigned x;
  int used = -1;
  if (sscanf(value, "dtype=%31s rows=%llu cols=%llu crc32c=%8x%n", name, &r, &c, &x, &used) != 4 || used < 0 ||
      value[used] != '\0')
    return -1;
  for (int d = 0; d < 256; d++)
    if (strcmp(clembed_dtype_name((clembed_dtype)d), "unknown") && !strcmp(clembed_dtype_name((clembed_dtype)d), name)) {
      *dtype = (clembed_dtype)d;
      *rows = r;
      *cols = c;
      *crc = x;
      return 0;
    }
  return -1;
}

const char *ce_ckpt_stored_type(clembed_dtype d) {
  return d == CLEMBED_F32 ? "F32" : d == CLEMBED_F16 ? "F16" : d == CLEMBED_BF16 ? "BF16" : "U8";
}

int ce_ckpt_find(const clembed_file *f, const char *path, const char *name, clembed_dtype dtype, uint64_t rows,
                 uint64_t cols, const char *whose, const uint8_t **data, uint64_t *bytes, uint32_t *crc, int *oom,
                 char *msg, size_t cap) {
  *oom = 0;
  size_t klen = strlen(CE_CKPT_TENSOR_KEY) + strlen(name) + 1, index;
  char *key = malloc(klen);
  if (!key) {
    *oom = 1;
    snprintf(msg, cap, "out of host memory");
    return -1;
  }
  snprintf(key, klen, "%s%s", CE_CKPT_TENSOR_KEY, name);
  const char *entry = clembed_file_metadata_find(f, key);
  free(key);
  if (!entry || clembed_file_find(f, name, &index) != CLEMBED_OK) {
    snprintf(msg, cap, "%s holds no tensor '%s'", path, name);
    return -1;
  }
  clembed_dtype dt;
  uint64_t r, c;
  if (ce_ckpt_parse_entry(entry, &dt, &r, &c, crc) != 0) {
    snprintf(msg, cap, "%s: tensor '%s': its metadata entry is malformed: \"%s\"", path, name, entry);
    return -1;
  }
  if (dt != dtype || r != rows || c != cols) {
    snprintf(msg, cap, "%s: tensor '%s' is %llu x %llu %s in the file, but %s is %llu x %llu %s", path, name,
             (unsigned long long)r, (unsigned long long)c, clembed_dtype_name(dt), whose, (unsigned long long)rows,
             (unsigned long long)cols, clembed_dtype_name(dtype));
    return -1;
  }
  clembed_tensor_info info;
  clembed_file_tensor_info(f, index, &info);
  uint64_t rb = clembed_dtype_row_bytes(dt, (size_t)c);
  int plain = clembed_dtype_block_values(dt) == 1;
  if ((c && !rb) || strcmp(info.type_name, ce_ckpt_stored_type(dt)) || info.ndim != 2 || info.shape[0] != r ||
      info.shape[1] != (plain ? c : rb) || (rb && r > UINT64_MAX / rb) || info.bytes != r * rb) {
    snprintf(msg, cap, "%s: tensor '%s' is stored as %s of %d dimensions (%llu bytes), which does not hold %llu x %llu %s",
             path, name, info.type_name, info.ndim, (unsigned long long)info.bytes, (unsigned long long)r,
             (unsigned long long)c, clembed_dtype_name(dt));
    return -1;
  }
  const void *p = NULL;
  clembed_file_tensor_data(f, index, &p);
  *data = p;
  *bytes = info.bytes;
  return 0;
}

/* ------------------------------------------------------------ safe writing */

static void split_path(const char *path, char **dir, const char **base) {
  const char *slash = strrchr(path, '/');
  *base = slash ? slash + 1 : path;
  size_t n = slash ? (size_t)(slash - path) : 1;
  *dir = malloc(n + 2);
  if (!*dir) return;
  if (slash)
    memcpy(*dir, path, n);
  else
    (*dir)[0] = '.';
  if (slash && n == 0) (*dir)[n++] = '/';
  (*dir)[n] = '\0';
}

static void host_name(char *h, size_t cap) {
  if (gethostname(h, cap) != 0) snprintf(h, cap, "host");
  h[cap - 1] = '\0';
  for (char *p = h; *p; p++)
    if (*p == '/' || *p == '.') *p = '_';
}

char *ce_ckpt_temp_path(const char *path) {
  char *dir;
  const char *base;
  split_path(path, &dir, &base);
  if (!dir) return NULL;
  char host[128];
  host_name(host, sizeof host);
  size_t n = strlen(dir) + strlen(base) + strlen(host) + 64;
  char *t = malloc(n);
  if (t) snprintf(t, n, "%s/.%s.clembed-tmp.%s.%ld", dir, base, host, (long)getpid());
  free(dir);
  return t;
}

void ce_ckpt_remove_stale(const char *path) {
  char *dir;
  const char *base;
  split_path(path, &dir, &base);
  if (!dir) return;
  char host[128];
  host_name(host, sizeof host);
  size_t pn = strlen(base) + strlen(host) + 32;
  char *prefix = malloc(pn);
  DIR *d = prefix ? opendir(dir) : NULL;
  if (d) {
    snprintf(prefix, pn, ".%s.clembed-tmp.%s.", base, host);
    size_t plen = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (strncmp(e->d_name, prefix, plen)) continue;
      char *end;
      errno = 0;
      long pid = strtol(e->d_name + plen, &end, 10);
      if (errno || *end || pid <= 0) continue;
      if (pid != (long)getpid() && !(kill((pid_t)pid, 0) != 0 && errno == ESRCH)) continue; /* a live save's */
      size_t fn = strlen(dir) + strlen(e->d_name) + 2;
      char *full = malloc(fn);
      if (full) {
        snprintf(full, fn, "%s/%s", dir, e->d_name);
        unlink(full);
        free(full);
      }
    }
    closedir(d);
  }
  free(prefix);
  free(dir);
}

int ce_ckpt_pwrite(int fd, const void *p, size_t n, uint64_t off) {
  const char *c = p;
  while (n) {
    size_t piece = n > ((size_t)1 << 30) ? (size_t)1 << 30 : n;
    ssize_t w = pwrite(fd, c, piece, (off_t)off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (w == 0) {
      errno = EIO;
      return -1;
    }
    c += w;
    n -= (size_t)w;
    off += (uint64_t)w;
  }
  return 0;
}

void ce_ckpt_start_writeback(int fd, uint64_t off, uint64_t n) {
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
  (void)sync_file_range(fd, (off_t)off, (off_t)n, SYNC_FILE_RANGE_WRITE);
#else
  (void)fd;
  (void)off;
  (void)n;
#endif
}

int ce_ckpt_sync_folder(const char *path) {
  char *dir;
  const char *base;
  split_path(path, &dir, &base);
  if (!dir) {
    errno = ENOMEM;
    return -1;
  }
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  free(dir);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  int e = errno;
  close(fd);
  errno = e;
  /* some file systems cannot sync a folder (EINVAL): the rename is as durable as they make it */
  return rc != 0 && e != EINVAL ? -1 : 0;
}
