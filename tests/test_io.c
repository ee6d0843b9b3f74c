/* The model and array file readers (clembed_io.h): files written here by a
 * small writer of each format, every info field checked, tensors loaded to the
 * device and read back exactly; the hostile-file corpus (tests/io_corpus/).
 *
 *   test_io [CORPUS_DIR] [CASE ...]   (no case: all of them; --list names them)
 * The cases that load need a device; the others do not open one. */
#define _GNU_SOURCE
#include "clembed_io.h"
#include "reference_ggml.h"
#include "test_util.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[4096];
static clembed_context *the_ctx;
static const char *corpus_dir;

static clembed_context *device(void) {
  if (!the_ctx) the_ctx = tu_context();
  return the_ctx;
}

static const char *tmp_path(const char *name) {
  static char p[4][4200];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
  return p[k];
}

/* ------------------------------------------------------------ a byte buffer */

typedef struct buf {
  uint8_t *p;
  size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n) cap *= 2;
    b->p = realloc(b->p, cap);
    if (!b->p) abort();
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, src, n);
  b->n += n;
}
static void put_u8(buf *b, uint8_t v) { put(b, &v, 1); }
static void put_u16(buf *b, uint16_t v) {
  uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
  put(b, x, 2);
}
static void put_u32(buf *b, uint32_t v) {
  uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  put(b, x, 4);
}
static void put_u64(buf *b, uint64_t v) {
  put_u32(b, (uint32_t)v);
  put_u32(b, (uint32_t)(v >> 32));
}
static void put_zeros(buf *b, size_t n) {
  for (size_t i = 0; i < n; i++) put_u8(b, 0);
}
static void put_text(buf *b, const char *s) { put(b, s, strlen(s)); }

static void write_file(const char *path, const buf *b) {
  FILE *f = fopen(path, "wb");
  if (!f || (b->n && fwrite(b->p, 1, b->n, f) != b->n) || fclose(f)) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
}

/* ------------------------------------------------------------- test values */

/* Element i of a test tensor: distinct, exact in every dtype's range, some
 * needing rounding to F16/BF16. */
static float value(size_t i, unsigned seed) {
  return (float)((double)((i * 7919u + seed * 104729u) % 2001u) - 1000.0) / 64.0f + (float)(i % 3) * 0.0078125f / 3.0f;
}

/* n values as stored dtype t ("f4", "f2", "bf"), little-endian bytes into b. */
static void put_values(buf *b, const char *t, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    float v = value(i, seed);
    if (!strcmp(t, "f4")) {
      uint32_t u;
      memcpy(&u, &v, 4);
      put_u32(b, u);
    } else if (!strcmp(t, "f2")) {
      put_u16(b, ref_f32_to_f16(v));
    } else {
      put_u16(b, ref_f32_to_bf16(v));
    }
  }
}

/* The value of element i as stored in t. */
static float stored(size_t i, unsigned seed, const char *t) {
  float v = value(i, seed);
  if (!strcmp(t, "f2")) return ref_f16_to_f32(ref_f32_to_f16(v));
  if (!strcmp(t, "bf")) return ref_bf16_to_f32(ref_f32_to_bf16(v));
  return v;
}

/* ----------------------------------------------------------------- writers */

static void npy(buf *b, int major, const char *descr, const char *shape) {
  char dict[256];
  snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
  size_t pre = major == 1 ? 10 : 12, len = strlen(dict), total = (pre + len + 1 + 63) / 64 * 64;
  put(b, "\x93NUMPY", 6);
  put_u8(b, (uint8_t)major);
  put_u8(b, 0);
  if (major == 1)
    put_u16(b, (uint16_t)(total - pre));
  else
    put_u32(b, (uint32_t)(total - pre));
  put_text(b, dict);
  for (size_t i = pre + len; i < total - 1; i++) put_u8(b, ' ');
  put_u8(b, '\n');
}

typedef struct st_tensor {
  const char *json_name; /* as written in the JSON, escapes included */
  const char *dtype;
  const char *shape; /* "[2, 3]" */
  size_t bytes;
  const uint8_t *data;
} st_tensor;

static void safetensors(buf *b, const st_tensor *t, size_t n, const char *metadata) {
  buf j = {0};
  size_t at = 0;
  char tmp[512];
  put_text(&j, "{");
  if (metadata) {
    put_text(&j, "\"__metadata__\": ");
    put_text(&j, metadata);
  }
  for (size_t i = 0; i < n; i++) {
    snprintf(tmp, sizeof tmp, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
             (i || metadata) ? ", " : "", t[i].json_name, t[i].dtype, t[i].shape, at, at + t[i].bytes);
    put_text(&j, tmp);
    at += t[i].bytes;
  }
  put_text(&j, "}");
  while (j.n % 8) put_u8(&j, ' ');
  put_u64(b, j.n);
  put(b, j.p, j.n);
  for (size_t i = 0; i < n; i++) put(b, t[i].data, t[i].bytes);
  free(j.p);
}

static void gguf_str(buf *b, const char *s) {
  put_u64(b, strlen(s));
  put_text(b, s);
}

enum { G_U8, G_I8, G_U16, G_I16, G_U32, G_I32, G_F32, G_BOOL, G_STRING, G_ARRAY, G_U64, G_I64, G_F64 };

/* A key/value section with every value type, arrays of each and arrays of
 * arrays (of strings and of arrays). Returns the pair count. */
static uint64_t gguf_kv_every_type(buf *b) {
  uint64_t n = 0;
  gguf_str(b, "general.architecture"), put_u32(b, G_STRING), gguf_str(b, "llama"), n++;
  gguf_str(b, "t.u8"), put_u32(b, G_U8), put_u8(b, 200), n++;
  gguf_str(b, "t.i8"), put_u32(b, G_I8), put_u8(b, 0x80), n++;
  gguf_str(b, "t.u16"), put_u32(b, G_U16), put_u16(b, 60000), n++;
  gguf_str(b, "t.i16"), put_u32(b, G_I16), put_u16(b, 0x8000), n++;
  gguf_str(b, "t.u32"), put_u32(b, G_U32), put_u32(b, 4000000000u), n++;
  gguf_str(b, "t.i32"), put_u32(b, G_I32), put_u32(b, 0xFFFFFFFFu), n++;
  gguf_str(b, "t.f32"), put_u32(b, G_F32), put_u32(b, 0x3F800000u), n++;
  gguf_str(b, "t.bool"), put_u32(b, G_BOOL), put_u8(b, 1), n++;
  gguf_str(b, "t.u64"), put_u32(b, G_U64), put_u64(b, UINT64_MAX), n++;
  gguf_str(b, "t.i64"), put_u32(b, G_I64), put_u64(b, 1), n++;
  gguf_str(b, "t.f64"), put_u32(b, G_F64), put_u64(b, 0x3FF0000000000000ull), n++;
  gguf_str(b, "t.empty_string"), put_u32(b, G_STRING), gguf_str(b, ""), n++;
  /* arrays of every scalar type */
  static const uint8_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  for (uint32_t t = 0; t <= G_F64; t++) {
    if (t == G_STRING || t == G_ARRAY) continue;
    char key[32];
    snprintf(key, sizeof key, "t.array.%u", t);
    gguf_str(b, key), put_u32(b, G_ARRAY), put_u32(b, t), put_u64(b, 3), n++;
    for (int i = 0; i < 3; i++) put_zeros(b, sizes[t]);
  }
  gguf_str(b, "tokenizer.ggml.tokens"), put_u32(b, G_ARRAY), put_u32(b, G_STRING), put_u64(b, 3), n++;
  gguf_str(b, "<s>"), gguf_str(b, ""), gguf_str(b, "hello");
  gguf_str(b, "t.empty_array"), put_u32(b, G_ARRAY), put_u32(b, G_U32), put_u64(b, 0), n++;
  /* nested: an array of 2 arrays of strings, then an array of an array of an array of u16 */
  gguf_str(b, "t.nested"), put_u32(b, G_ARRAY), put_u32(b, G_ARRAY), put_u64(b, 2), n++;
  put_u32(b, G_STRING), put_u64(b, 2), gguf_str(b, "a"), gguf_str(b, "bc");
  put_u32(b, G_STRING), put_u64(b, 0);
  gguf_str(b, "t.nested3"), put_u32(b, G_ARRAY), put_u32(b, G_ARRAY), put_u64(b, 1), n++;
  put_u32(b, G_ARRAY), put_u64(b, 1);
  put_u32(b, G_U16), put_u64(b, 2), put_u16(b, 1), put_u16(b, 2);
  return n;
}

typedef struct g_tensor {
  const char *name;
  uint32_t type;
  uint32_t ndim;
  uint64_t dims[4]; /* ggml's order: innermost first */
  size_t bytes;
  const uint8_t *data;
} g_tensor;

/* A GGUF file: header, key/values (every type, and general.alignment unless
 * alignment is 0 = the default 32), tensor infos, padding, data (each tensor
 * padded to the alignment). */
static void gguf(buf *b, uint32_t version, uint32_t alignment, const g_tensor *t, size_t n) {
  buf kv = {0};
  uint64_t nkv = gguf_kv_every_type(&kv);
  if (alignment) {
    gguf_str(&kv, "general.alignment"), put_u32(&kv, G_U32), put_u32(&kv, alignment);
    nkv++;
  }
  uint32_t a = alignment ? alignment : 32;
  put_text(b, "GGUF");
  put_u32(b, version);
  put_u64(b, n);
  put_u64(b, nkv);
  put(b, kv.p, kv.n);
  free(kv.p);
  uint64_t off = 0;
  for (size_t i = 0; i < n; i++) {
    gguf_str(b, t[i].name);
    put_u32(b, t[i].ndim);
    for (uint32_t d = 0; d < t[i].ndim; d++) put_u64(b, t[i].dims[d]);
    put_u32(b, t[i].type);
    put_u64(b, off);
    off += (t[i].bytes + a - 1) / a * a;
  }
  while (b->n % a) put_u8(b, 0);
  for (size_t i = 0; i < n; i++) {
    put(b, t[i].data, t[i].bytes);
    while (b->n % a) put_u8(b, 0);
  }
}

/* ------------------------------------------------------------------ checks */

static clembed_file *open_ok(const char *path) {
  clembed_file *f = NULL;
  clembed_status s = clembed_file_open(path, &f);
  EXPECT(s == CLEMBED_OK && f, "opening %s: %s: %s", path, clembed_status_string(s), clembed_last_error_message());
  return s == CLEMBED_OK ? f : NULL;
}

static void expect_info(const clembed_file *f, size_t i, const char *name, int dtype, const char *type_name, int ndim,
                        const uint64_t *shape, uint64_t bytes) {
  clembed_tensor_info in;
  memset(&in, 0xA5, sizeof in);
  clembed_status s = clembed_file_tensor_info(f, i, &in);
  EXPECT(s == CLEMBED_OK, "tensor_info %zu: %s", i, clembed_last_error_message());
  if (s != CLEMBED_OK) return;
  EXPECT(!strcmp(in.name, name), "tensor %zu: name '%s', expected '%s'", i, in.name, name);
  EXPECT(in.dtype == dtype, "tensor %zu: dtype %d, expected %d", i, in.dtype, dtype);
  EXPECT(!strcmp(in.type_name, type_name), "tensor %zu: type_name '%s', expected '%s'", i, in.type_name, type_name);
  EXPECT(in.ndim == ndim, "tensor %zu: ndim %d, expected %d", i, in.ndim, ndim);
  for (int d = 0; d < 4; d++) {
    uint64_t want = d < ndim ? shape[d] : 0;
    EXPECT(in.shape[d] == want, "tensor %zu: shape[%d] %llu, expected %llu", i, d, (unsigned long long)in.shape[d],
           (unsigned long long)want);
  }
  EXPECT(in.bytes == bytes, "tensor %zu: bytes %llu, expected %llu", i, (unsigned long long)in.bytes,
         (unsigned long long)bytes);
  const void *data = (const void *)&data;
  EXPECT(clembed_file_tensor_data(f, i, &data) == CLEMBED_OK && (bytes ? data != NULL : data == NULL),
         "tensor %zu: data %p for %llu bytes", i, data, (unsigned long long)bytes);
  if (name[0]) {
    size_t k = 999;
    EXPECT(clembed_file_find(f, name, &k) == CLEMBED_OK && k == i, "find '%s' gave %zu, expected %zu", name, k, i);
  }
}

/* Loads `name` as dtype and checks rows, cols and every value against the
 * stored values (seed, stored type st) rounded to dtype, bit for bit. */
static void expect_load(const clembed_file *f, const char *name, clembed_dtype dtype, size_t rows, size_t cols,
                        unsigned seed, const char *st) {
  clembed_context *ctx = device();
  clembed_matrix m;
  memset(&m, 0, sizeof m);
  clembed_status s = clembed_matrix_load(ctx, f, name, dtype, &m);
  EXPECT(s == CLEMBED_OK, "loading '%s' as dtype %d: %s: %s", name ? name : "(NULL)", (int)dtype,
         clembed_status_string(s), clembed_context_message(ctx));
  if (s != CLEMBED_OK) return;
  /* offset: 0 for a copy; a tensor mapped in place (CPU devices) starts where it lies in its first page */
  EXPECT(m.rows == rows && m.cols == cols && m.dtype == dtype && (m.ld == 0 || m.ld == cols) && m.offset < 4096,
         "'%s': %zu x %zu dtype %d, expected %zu x %zu dtype %d", name ? name : "(NULL)", m.rows, m.cols, (int)m.dtype,
         rows, cols, (int)dtype);
  size_t n = rows * cols, bad = 0, first = 0;
  void *host = tu_alloc_elems(n, dtype);
  OK(ctx, clembed_matrix_read(ctx, &m, host, dtype));
  for (size_t i = 0; i < n; i++) {
    float want = ref_round(stored(i, seed, st), dtype), got = tu_elem(host, i, dtype);
    if (memcmp(&want, &got, 4) && !bad++) first = i;
  }
  EXPECT(bad == 0, "'%s' as dtype %d: %zu of %zu values differ, the first at %zu", name ? name : "(NULL)", (int)dtype,
         bad, n, first);
  free(host);
  clembed_matrix_release(&m);
}

static void expect_load_fails_arg(const clembed_file *f, const char *name, int dtype, clembed_status code,
                                  const char *needle, const char *argument) {
  clembed_context *ctx = device();
  clembed_matrix m;
  memset(&m, 0x5A, sizeof m);
  clembed_matrix before = m;
  clembed_status s = clembed_matrix_load(ctx, f, name, (clembed_dtype)dtype, &m);
  const char *msg = clembed_context_message(ctx);
  EXPECT(s == code, "loading '%s' as %d: %s, expected %s (%s)", name ? name : "(NULL)", dtype,
         clembed_status_string(s), clembed_status_string(code), msg);
  EXPECT(strstr(msg, needle) != NULL, "loading '%s': the message '%s' does not say '%s'", name ? name : "(NULL)", msg,
         needle);
  EXPECT(!memcmp(&m, &before, sizeof m), "a failed load changed *m");
  clembed_error_detail d;
  OK(ctx, clembed_context_error(ctx, &d));
  EXPECT(d.status == code && !strcmp(d.operation, "clembed_matrix_load") && !strcmp(d.argument, argument),
         "detail: %s %s '%s', expected clembed_matrix_load '%s'", clembed_status_string(d.status), d.operation,
         d.argument, argument);
}

static void expect_load_fails(const clembed_file *f, const char *name, int dtype, clembed_status code,
                              const char *needle) {
  int on_dtype = code == CLEMBED_ERR_UNSUPPORTED || dtype > 6 || strstr(needle, "cannot be loaded as");
  const char *argument = on_dtype ? "dtype" : "name";
  expect_load_fails_arg(f, name, dtype, code, needle, argument);
}

static void expect_open_fails(const char *path, const char *needle) {
  clembed_file *f = (clembed_file *)&f;
  clembed_status s = clembed_file_open(path, &f);
  const char *msg = clembed_last_error_message();
  EXPECT(s == CLEMBED_ERR_INVALID_ARGUMENT, "%s: opened with %s, expected CLEMBED_ERR_INVALID_ARGUMENT",
         path, clembed_status_string(s));
  EXPECT(f == NULL, "%s: *f not NULL after a failure", path);
  EXPECT(strstr(msg, path) != NULL, "%s: the message '%s' does not name the file", path, msg);
  EXPECT(strstr(msg, needle) != NULL, "%s: the message '%s' does not say '%s'", path, msg, needle);
  if (s == CLEMBED_OK) clembed_file_close(f);
  clembed_error_detail d;
  EXPECT(clembed_context_error(NULL, &d) == CLEMBED_OK && d.status == s && !strcmp(d.operation, "clembed_file_open"),
         "%s: the thread's error detail: %s %s", path, clembed_status_string(d.status), d.operation);
}


/* ------------------------------------------------- block-quantized tensors */

static uint64_t qrng = 0x9e3779b97f4a7c15ull;
static uint32_t qrand(void) {
  qrng ^= qrng << 13, qrng ^= qrng >> 7, qrng ^= qrng << 17;
  return (uint32_t)(qrng >> 11);
}
static uint32_t rnd32(void) { return qrand(); }
#include "quant_types.h" /* every block type (after rnd32) */

/* n blocks of `dtype`, random bytes with finite f16 scales. */
static uint8_t *random_blocks(int dtype, size_t n) {
  uint8_t *p = malloc(n * tq_bb(dtype) + 1);
  for (size_t b = 0; b < n; b++) rnd_block(dtype, p + b * tq_bb(dtype));
  return p;
}

static clembed_matrix load_ok(const clembed_file *f, const char *name, clembed_dtype dtype) {
  clembed_context *ctx = device();
  clembed_matrix m;
  memset(&m, 0, sizeof m);
  clembed_status s = clembed_matrix_load(ctx, f, name, dtype, &m);
  EXPECT(s == CLEMBED_OK, "loading %s as dtype %d: %s: %s", name ? name : "(NULL)", (int)dtype, clembed_status_string(s),
         clembed_context_message(ctx));
  return m;
}

/* Counts values whose bits differ from the float32 reference rounded to dtype. */
static size_t differ(const void *host, clembed_dtype dtype, const float *want, size_t n, size_t *first) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    float w = ref_round(want[i], dtype), g = tu_elem(host, i, dtype);
    if (memcmp(&w, &g, 4) && !bad++) *first = i;
  }
  return bad;
}

/* A GGUF tensor of each block type: loaded as its own type (the blocks read
 * back bit for bit), dequantized to F32/F16/BF16 (ggml's dequantizers, bit for
 * bit), and rows looked up from both tables equal to the dequantized rows. One
 * Q4_0 tensor spans more than one upload piece. */
static void check_loaded_blocks(const clembed_file *f, const char *name, int dtype, size_t rows, size_t cols,
                                const uint8_t *data) {
  clembed_context *ctx = device();
  const char *label = name ? name : "token_embd.weight";
  size_t n = rows * cols, nb = n / tq_qk(dtype), bytes = nb * tq_bb(dtype);
  float *want = malloc(n * sizeof(float) + 1);
  ref_dequantize(dtype, data, want, n);
  /* as stored */
  clembed_matrix m = load_ok(f, name, (clembed_dtype)dtype);
  if (m.buffer) {
    EXPECT(m.rows == rows && m.cols == cols && (int)m.dtype == dtype, "%s: %zu x %zu dtype %d", label, m.rows,
           m.cols, (int)m.dtype);
    uint8_t *back = malloc(bytes + 1);
    OK(ctx, clembed_matrix_read(ctx, &m, back, (clembed_dtype)dtype));
    EXPECT(!memcmp(back, data, bytes), "%s (%s): the blocks read back differ from the file's", label, tq(dtype)->name);
    free(back);
  }
  /* dequantized on loading */
  static const clembed_dtype fl[] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  for (int d = 0; d < 3; d++) {
    clembed_matrix fm = load_ok(f, name, fl[d]);
    if (!fm.buffer) continue;
    void *host = tu_alloc_elems(n, fl[d]);
    OK(ctx, clembed_matrix_read(ctx, &fm, host, fl[d]));
    size_t first = 0, bad = differ(host, fl[d], want, n, &first);
    EXPECT(bad == 0, "%s (%s) dequantized to dtype %d: %zu of %zu values differ from ggml's, the first at %zu", label,
           tq(dtype)->name, (int)fl[d], bad, n, first);
    free(host);
    clembed_matrix_release(&fm);
  }
  /* lookups from the loaded (quantized) table: ggml's dequantized rows */
  if (m.buffer) {
    int32_t idv[5] = {0, (int32_t)rows - 1, 3 % (int32_t)rows, 1 % (int32_t)rows, (int32_t)rows / 2};
    clembed_ids ids;
    clembed_matrix out;
    OK(ctx, clembed_ids_create(ctx, idv, 5, CLEMBED_I32, &ids));
    OK(ctx, clembed_matrix_create(ctx, 5, cols, CLEMBED_F32, &out));
    OK(ctx, clembed_lookup(ctx, &m, &ids, &out, 0, NULL, NULL));
    float *got = malloc(5 * cols * sizeof(float)), *rw = malloc(5 * cols * sizeof(float));
    OK(ctx, clembed_matrix_read(ctx, &out, got, CLEMBED_F32));
    for (int r = 0; r < 5; r++) memcpy(rw + r * cols, want + (size_t)idv[r] * cols, cols * sizeof(float));
    size_t first = 0, bad = differ(got, CLEMBED_F32, rw, 5 * cols, &first);
    EXPECT(bad == 0, "%s (%s): lookup of the loaded table: %zu values differ from ggml's rows, the first at %zu", label,
           tq(dtype)->name, bad, first);
    free(got), free(rw);
    clembed_ids_release(&ids);
    clembed_matrix_release(&out);
  }
  clembed_matrix_release(&m);
  free(want);
}

TU_CASE(load_blocks) {
  ctx = device();
  for (int k = 0; k <= NTQ; k++) {
    int dtype = TQ[k < NTQ ? k : 1].dtype; /* the last: a large Q4_0 tensor */
    size_t qk = tq_qk(dtype), rows = k < NTQ ? 7 : 4375, cols = k < NTQ ? 2 * qk : 1024; /* the last: 140000 blocks */
    size_t nb = rows * cols / qk;
    uint8_t *data = random_blocks(dtype, nb);
    g_tensor g[] = {{"token_embd.weight", (uint32_t)tq(dtype)->ggml, 2, {cols, rows}, nb * tq_bb(dtype), data}};
    buf b = {0};
    gguf(&b, 3, 0, g, 1);
    const char *path = tmp_path("blocks.gguf");
    write_file(path, &b);
    free(b.p);
    clembed_file *f = open_ok(path);
    if (f) check_loaded_blocks(f, NULL, dtype, rows, cols, data);
    clembed_file_close(f);
    unlink(path);
    free(data);
  }
}

/* An F32 (and an F16) tensor quantized to Q8_0 and Q4_0 on loading: the blocks
 * are ggml's quantize_row_*_ref of the stored values, bit for bit; the large
 * one spans more than one upload piece. */
TU_CASE(load_quantize) {
  ctx = device();
  for (int big = 0; big < 2; big++) {
    size_t rows = big ? 4375 : 5, cols = big ? 1024 : 96, n = rows * cols;
    for (int st = 0; st < 2; st++) {
      const char *t = st ? "f2" : "f4";
      buf e = {0};
      put_values(&e, t, n, 61 + st);
      float *x = malloc(n * sizeof(float));
      for (size_t i = 0; i < n; i++) x[i] = stored(i, 61 + st, t);
      x[3] = 0; /* an all-zero block, and one with a single value */
      for (size_t i = 0; i < 32; i++) x[32 + i] = i == 5 ? -3.25f : 0.0f;
      for (size_t i = 0; i < 64; i++) {
        uint8_t *p = e.p + i * (st ? 2 : 4);
        if (i == 3 || i >= 32) memset(p, 0, st ? 2 : 4);
        if (i == 37) {
          if (st) {
            uint16_t h = ref_f32_to_f16(-3.25f);
            memcpy(p, &h, 2);
          } else {
            float v = -3.25f;
            memcpy(p, &v, 4);
          }
        }
      }
      g_tensor g[] = {{"token_embd.weight", st ? 1u : 0u, 2, {cols, rows}, e.n, e.p}};
      buf b = {0};
      gguf(&b, 3, 0, g, 1);
      const char *path = tmp_path("quantize.gguf");
      write_file(path, &b);
      free(b.p);
      clembed_file *f = open_ok(path);
      for (int k = 0; f && k < 2; k++) {
        const clembed_dtype qd = TQ[k].dtype; /* Q8_0, Q4_0 */
        const size_t qb = tq_bb(qd), nb = n / 32;
        uint8_t *want = malloc(nb * qb), *got = malloc(nb * qb);
        if (k == 0)
          ref_quantize_row_q8_0_ref(x, (ref_block_q8_0 *)want, (int64_t)n);
        else
          ref_quantize_row_q4_0_ref(x, (ref_block_q4_0 *)want, (int64_t)n);
        clembed_matrix m = load_ok(f, NULL, qd);
        if (m.buffer) {
          OK(ctx, clembed_matrix_read(ctx, &m, got, qd));
          size_t bad = 0, first = 0;
          for (size_t i = 0; i < nb; i++)
            if (memcmp(got + i * qb, want + i * qb, qb) && !bad++) first = i;
          EXPECT(bad == 0, "%s (%s) quantized to type %d: %zu of %zu blocks differ from ggml's, the first %zu", path, t,
                 (int)qd, bad, nb, first);
        }
        clembed_matrix_release(&m);
        free(want), free(got);
      }
      clembed_file_close(f);
      unlink(path);
      free(e.p), free(x);
    }
  }
}

/* FBGEMM's row-wise rows stored as bytes (.npy |u1, safetensors U8, (rows,
 * row bytes)) load as a row-wise dtype as they are: every byte back, whole and
 * by rows; bytes as another dtype, or rows of a length no row of the type has,
 * are refused naming dtype. */
TU_CASE(load_rowwise_bytes) {
  ctx = device();
  static const clembed_dtype rw[7] = {CLEMBED_I8_ROWWISE, CLEMBED_I4_ROWWISE, CLEMBED_I2_ROWWISE, CLEMBED_I8_TBE,
                                      CLEMBED_I4_TBE,     CLEMBED_I2_TBE,     CLEMBED_FP8_ROWWISE};
  const size_t rows = 6, cols = 16;
  for (int k = 0; k < 7; k++) {
    size_t rb = clembed_dtype_row_bytes(rw[k], cols), n = rows * rb;
    uint8_t *data = malloc(n), *got = malloc(n);
    for (size_t i = 0; i < n; i++) data[i] = (uint8_t)(rnd32() >> 24);
    for (int st = 0; st < 2; st++) {
      buf b = {0};
      char shape[64];
      snprintf(shape, sizeof shape, st ? "[%zu, %zu]" : "(%zu, %zu)", rows, rb);
      if (st) {
        st_tensor t = {"rows", "U8", shape, n, data};
        safetensors(&b, &t, 1, NULL);
      } else {
        npy(&b, 1, "|u1", shape);
        put(&b, data, n);
      }
      const char *path = tmp_path(st ? "rows.safetensors" : "rows.npy");
      write_file(path, &b);
      free(b.p);
      clembed_file *f = open_ok(path);
      clembed_matrix m = load_ok(f, NULL, rw[k]);
      EXPECT(m.rows == rows && m.cols == cols && m.dtype == rw[k], "%s as %s: %zu x %zu, not %zu x %zu", path,
             clembed_dtype_name(rw[k]), m.rows, m.cols, rows, cols);
      if (m.buffer && m.cols == cols) {
        OK(ctx, clembed_matrix_read(ctx, &m, got, rw[k]));
        EXPECT(!memcmp(got, data, n), "%s as %s: the rows' bytes read back differ", path, clembed_dtype_name(rw[k]));
      }
      clembed_matrix_release(&m);
      memset(&m, 0, sizeof m);
      OK(ctx, clembed_matrix_load_rows(ctx, f, NULL, rw[k], 2, 3, &m));
      if (m.buffer && m.rows == 3) {
        OK(ctx, clembed_matrix_read(ctx, &m, got, rw[k]));
        EXPECT(!memcmp(got, data + 2 * rb, 3 * rb), "%s as %s: rows 2 .. 4 differ", path, clembed_dtype_name(rw[k]));
      }
      clembed_matrix_release(&m);
      memset(&m, 0, sizeof m);
      clembed_error_detail d;
      clembed_status s = clembed_matrix_load(ctx, f, NULL, CLEMBED_F32, &m);
      clembed_context_error(ctx, &d);
      EXPECT(s == CLEMBED_ERR_INVALID_ARGUMENT && d.argument && !strcmp(d.argument, "dtype") && !m.buffer,
             "%s: bytes as f32: %s (%s)", path, clembed_status_string(s), clembed_context_message(ctx));
      clembed_file_close(f);
      unlink(path);
    }
    /* rows one byte longer: no row of the type (FP8_ROWWISE: its values padded to 4 bytes) */
    buf b = {0};
    char shape[64];
    snprintf(shape, sizeof shape, "(%zu, %zu)", rows - 1, rb + 1);
    npy(&b, 1, "|u1", shape);
    put(&b, data, (rows - 1) * (rb + 1));
    const char *path = tmp_path("odd.npy");
    write_file(path, &b);
    free(b.p);
    clembed_file *f = open_ok(path);
    clembed_matrix m = {0};
    clembed_error_detail d;
    clembed_status s = clembed_matrix_load(ctx, f, NULL, rw[k], &m);
    clembed_context_error(ctx, &d);
    /* (no I4_ROWWISE or I2_ROWWISE row has an odd length: their cols are a multiple of 4 and 8) */
    int no_row = rw[k] == CLEMBED_I4_ROWWISE || rw[k] == CLEMBED_I2_ROWWISE || rw[k] == CLEMBED_FP8_ROWWISE;
    if (no_row)
      EXPECT(s == CLEMBED_ERR_INVALID_ARGUMENT && d.argument && !strcmp(d.argument, "dtype") && !m.buffer,
             "rows of %zu bytes as %s: %s (%s)", rb + 1, clembed_dtype_name(rw[k]), clembed_status_string(s),
             clembed_context_message(ctx));
    else
      EXPECT(s == CLEMBED_OK && clembed_dtype_row_bytes(rw[k], m.cols) == rb + 1, "rows of %zu bytes as %s: %s, %zu cols",
             rb + 1, clembed_dtype_name(rw[k]), clembed_status_string(s), m.cols);
    clembed_matrix_release(&m);
    clembed_file_close(f);
    unlink(path);
    free(data), free(got);
  }
}

/* ------------------------------------------------------------------- cases */

TU_CASE(npy) {
  /* every version, the usable dtypes, shapes from 0-d to 4-d */
  static const struct {
    int major;
    const char *descr, *shape;
    int ndim;
    uint64_t dims[4];
    int dtype;
    size_t item;
  } c[] = {
      {1, "<f4", "(3, 5)", 2, {3, 5}, CLEMBED_F32, 4},
      {2, "<f2", "(4,)", 1, {4}, CLEMBED_F16, 2},
      {3, "<f4", "(2, 3, 4)", 3, {2, 3, 4}, CLEMBED_F32, 4},
      {1, "<i4", "(2, 3)", 2, {2, 3}, -1, 4},
      {1, "<i8", "(5,)", 1, {5}, -1, 8},
      {1, "<f8", "(2, 2)", 2, {2, 2}, -1, 8},
      {1, ">f4", "(3,)", 1, {3}, -1, 4},
      {1, "|u1", "(1, 2, 3, 4)", 4, {1, 2, 3, 4}, -1, 1},
      {1, "<f4", "()", 0, {0}, CLEMBED_F32, 4},
      {1, "<f4", "(0, 7)", 2, {0, 7}, CLEMBED_F32, 4},
  };
  for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
    buf b = {0};
    npy(&b, c[k].major, c[k].descr, c[k].shape);
    uint64_t n = 1;
    for (int d = 0; d < c[k].ndim; d++) n *= c[k].dims[d];
    put_zeros(&b, n * c[k].item);
    const char *path = tmp_path("a.npy");
    write_file(path, &b);
    free(b.p);
    clembed_file *f = open_ok(path);
    if (!f) continue;
    EXPECT(clembed_file_tensor_count(f) == 1, "%s %s: count %zu", c[k].descr, c[k].shape, clembed_file_tensor_count(f));
    expect_info(f, 0, "", c[k].dtype, c[k].descr, c[k].ndim, c[k].dims, n * c[k].item);
    clembed_file_close(f);
  }
}

TU_CASE(safetensors) {
  buf d32 = {0}, d16 = {0}, dbf = {0}, dids = {0}, du8 = {0};
  put_values(&d32, "f4", 6, 1);
  put_values(&d16, "f2", 24, 2);
  put_values(&dbf, "bf", 5, 3);
  for (int i = 0; i < 4; i++) put_u64(&dids, (uint64_t)(i * 3));
  put_zeros(&du8, 3);
  st_tensor t[] = {
      {"w", "F32", "[2, 3]", d32.n, d32.p},
      {"caf\\u00e9.h", "F16", "[2,3,4]", d16.n, d16.p},
      {"b", "BF16", "[5]", dbf.n, dbf.p},
      {"ids", "I64", "[2, 2]", dids.n, dids.p},
      {"mask", "U8", "[3]", du8.n, du8.p},
      {"empty", "F32", "[0, 4]", 0, NULL},
  };
  buf b = {0};
  safetensors(&b, t, 6, "{\"format\": \"pt\", \"note\": \"\\\"quoted\\\" \\u263a\"}");
  const char *path = tmp_path("a.safetensors");
  write_file(path, &b);
  free(b.p);
  clembed_file *f = open_ok(path);
  if (f) {
    EXPECT(clembed_file_tensor_count(f) == 6, "count %zu", clembed_file_tensor_count(f));
    uint64_t s0[] = {2, 3}, s1[] = {2, 3, 4}, s2[] = {5}, s3[] = {2, 2}, s4[] = {3}, s5[] = {0, 4};
    expect_info(f, 0, "w", CLEMBED_F32, "F32", 2, s0, 24);
    expect_info(f, 1, "caf\xc3\xa9.h", CLEMBED_F16, "F16", 3, s1, 48);
    expect_info(f, 2, "b", CLEMBED_BF16, "BF16", 1, s2, 10);
    expect_info(f, 3, "ids", -1, "I64", 2, s3, 32);
    expect_info(f, 4, "mask", -1, "U8", 1, s4, 3);
    expect_info(f, 5, "empty", CLEMBED_F32, "F32", 2, s5, 0);
    const void *p1 = NULL, *p2 = NULL;
    EXPECT(clembed_file_tensor_data(f, 1, &p1) == CLEMBED_OK && p1 && !memcmp(p1, d16.p, d16.n) &&
               clembed_file_tensor_data(f, 3, &p2) == CLEMBED_OK && p2 && !memcmp(p2, dids.p, dids.n),
           "the data of 'caf\\u00e9.h' and 'ids' are the bytes written");
    EXPECT(clembed_file_tensor_data(f, 6, &p1) == CLEMBED_ERR_INVALID_ARGUMENT, "data of tensor 6 of 6");
    size_t i = 77;
    EXPECT(clembed_file_find(f, "W", &i) == CLEMBED_ERR_INVALID_ARGUMENT && i == 77, "find is case-sensitive");
    EXPECT(strstr(clembed_last_error_message(), "'mask'") != NULL, "the message lists the tensors: %s",
           clembed_last_error_message());
    clembed_tensor_info in;
    EXPECT(clembed_file_tensor_info(f, 6, &in) == CLEMBED_ERR_INVALID_ARGUMENT, "tensor 6 of 6");
    EXPECT(clembed_file_tensor_info(NULL, 0, &in) == CLEMBED_ERR_INVALID_ARGUMENT, "NULL file");
    EXPECT(clembed_file_tensor_info(f, 0, NULL) == CLEMBED_ERR_INVALID_ARGUMENT, "NULL info");
    EXPECT(clembed_file_find(f, NULL, &i) == CLEMBED_ERR_INVALID_ARGUMENT, "NULL name");
    clembed_file_close(f);
  }
  /* no tensors, header only */
  b = (buf){0};
  safetensors(&b, NULL, 0, NULL);
  write_file(path, &b);
  free(b.p);
  f = open_ok(path);
  EXPECT(clembed_file_tensor_count(f) == 0, "an empty safetensors file has no tensor");
  clembed_file_close(f);
  free(d32.p), free(d16.p), free(dbf.p), free(dids.p), free(du8.p);
}

/* Block data of a block type: n blocks of pattern bytes. */
static uint8_t *blocks(size_t bytes) {
  uint8_t *p = malloc(bytes ? bytes : 1);
  for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)(i * 31 + 7);
  return p;
}

TU_CASE(gguf) {
  for (int v = 2; v <= 3; v++) {
    for (uint32_t alignment = 0; alignment <= 64; alignment += 32) { /* 0: the default 32 */
      if (alignment == 32) continue;
      buf e32 = {0}, e16 = {0}, ebf = {0}, eid = {0};
      put_values(&e32, "f4", 4 * 6, 11);
      put_values(&e16, "f2", 3 * 5, 12);
      put_values(&ebf, "bf", 7, 13);
      for (int i = 0; i < 5; i++) put_u32(&eid, (uint32_t)i);
      uint8_t *q8 = blocks(3 * 2 * 2 * 34), *q4 = blocks(2 * 18), *q4k = blocks(2 * 144), *q6k = blocks(3 * 210),
              *q5k = blocks(176);
      g_tensor t[] = {
          {"token_embd.weight", 0, 2, {6, 4}, e32.n, e32.p},
          {"half", 1, 2, {5, 3}, e16.n, e16.p},
          {"bf", 30, 1, {7}, ebf.n, ebf.p},
          {"q8", 8, 3, {64, 2, 3}, 3 * 2 * 2 * 34, q8},
          {"q4", 2, 2, {32, 2}, 2 * 18, q4},
          {"q4k", 12, 2, {256, 2}, 2 * 144, q4k},
          {"q6k", 14, 4, {256, 1, 3, 1}, 3 * 210, q6k},
          {"q5k", 13, 1, {256}, 176, q5k},
          {"ids", 26, 1, {5}, eid.n, eid.p},
      };
      buf b = {0};
      gguf(&b, (uint32_t)v, alignment, t, 9);
      const char *path = tmp_path("a.gguf");
      write_file(path, &b);
      clembed_file *f = open_ok(path);
      if (f) {
        EXPECT(clembed_file_tensor_count(f) == 9, "count %zu", clembed_file_tensor_count(f));
        uint64_t s0[] = {4, 6}, s1[] = {3, 5}, s2[] = {7}, s3[] = {3, 2, 64}, s4[] = {2, 32}, s5[] = {2, 256},
                 s6[] = {1, 3, 1, 256}, s7[] = {256}, s8[] = {5};
        expect_info(f, 0, "token_embd.weight", CLEMBED_F32, "f32", 2, s0, 96);
        expect_info(f, 1, "half", CLEMBED_F16, "f16", 2, s1, 30);
        expect_info(f, 2, "bf", CLEMBED_BF16, "bf16", 1, s2, 14);
        expect_info(f, 3, "q8", 3, "q8_0", 3, s3, 408);
        expect_info(f, 4, "q4", 4, "q4_0", 2, s4, 36);
        expect_info(f, 5, "q4k", 5, "q4_K", 2, s5, 288);
        expect_info(f, 6, "q6k", 6, "q6_K", 4, s6, 630);
        expect_info(f, 7, "q5k", CLEMBED_Q5_K, "q5_K", 1, s7, 176);
        expect_info(f, 8, "ids", -1, "i32", 1, s8, 20);
        /* the data of each tensor are the bytes written, where the offsets (aligned) say */
        for (size_t k = 0; k < 9; k++) {
          const void *p = NULL;
          EXPECT(clembed_file_tensor_data(f, k, &p) == CLEMBED_OK && p && !memcmp(p, t[k].data, t[k].bytes) &&
                     (uintptr_t)p % (alignment ? alignment : 32) == 0, /* the mapping starts on a page */
                 "tensor %zu's data", k);
        }
        clembed_file_close(f);
      }
      /* the data really are where the offsets say: cut one byte of the last tensor's data (not of its padding) */
      uint32_t a = alignment ? alignment : 32;
      b.n -= (a - eid.n % a) % a + 1;
      write_file(path, &b);
      expect_open_fails(path, "past the end of the file");
      free(b.p), free(e32.p), free(e16.p), free(ebf.p), free(eid.p);
      free(q8), free(q4), free(q4k), free(q6k), free(q5k);
    }
  }
}

TU_CASE(load) {
  const char *path = tmp_path("load.safetensors");
  buf d32 = {0}, d16 = {0}, dbf = {0}, d4 = {0};
  put_values(&d32, "f4", 6 * 7, 21);
  put_values(&d16, "f2", 5 * 9, 22);
  put_values(&dbf, "bf", 3 * 4, 23);
  put_values(&d4, "f4", 2 * 3 * 2 * 5, 24);
  st_tensor t[] = {
      {"a", "F32", "[6, 7]", d32.n, d32.p},
      {"h", "F16", "[5, 9]", d16.n, d16.p},
      {"b", "BF16", "[3, 4]", dbf.n, dbf.p},
      {"four", "F32", "[2, 3, 2, 5]", d4.n, d4.p},
      {"row", "F32", "[7]", 28, d32.p},
      {"i", "I32", "[2]", 8, d32.p},
  };
  /* "row" and "i" hold copies of a's first bytes (the writer lays the tensors out in order) */
  buf b = {0};
  safetensors(&b, t, 6, NULL);
  write_file(path, &b);
  free(b.p);
  clembed_file *f = open_ok(path);
  if (!f) return;
  static const clembed_dtype dts[] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  for (int k = 0; k < 3; k++) {
    expect_load(f, "a", dts[k], 6, 7, 21, "f4");
    expect_load(f, "h", dts[k], 5, 9, 22, "f2");
    expect_load(f, "b", dts[k], 3, 4, 23, "bf");
  }
  expect_load(f, "four", CLEMBED_F32, 2, 30, 24, "f4");
  expect_load(f, "row", CLEMBED_F16, 1, 7, 21, "f4");
  expect_load_fails(f, NULL, CLEMBED_F32, CLEMBED_ERR_INVALID_ARGUMENT, "name one of them");
  expect_load_fails(f, "nope", CLEMBED_F32, CLEMBED_ERR_INVALID_ARGUMENT, "'four'");
  expect_load_fails(f, "i", CLEMBED_F32, CLEMBED_ERR_INVALID_ARGUMENT, "I32");
  expect_load_fails(f, "a", CLEMBED_Q6_K, CLEMBED_ERR_UNSUPPORTED, "quantizing");
  expect_load_fails(f, "a", 99, CLEMBED_ERR_INVALID_ARGUMENT, "unknown dtype");
  clembed_matrix m;
  EXPECT(clembed_matrix_load(NULL, f, "a", CLEMBED_F32, &m) == CLEMBED_ERR_INVALID_ARGUMENT, "NULL ctx");
  EXPECT(clembed_matrix_load(device(), NULL, "a", CLEMBED_F32, &m) == CLEMBED_ERR_INVALID_ARGUMENT, "NULL file");
  EXPECT(clembed_matrix_load(device(), f, "a", CLEMBED_F32, NULL) == CLEMBED_ERR_INVALID_ARGUMENT, "NULL m");
  clembed_file_close(f);
  free(d32.p), free(d16.p), free(dbf.p), free(d4.p);

  /* a .npy's only tensor by NULL; a GGUF file's token_embd.weight by NULL */
  b = (buf){0};
  npy(&b, 1, "<f2", "(4, 3)");
  put_values(&b, "f2", 12, 31);
  path = tmp_path("load.npy");
  write_file(path, &b);
  free(b.p);
  f = open_ok(path);
  if (f) {
    expect_load(f, NULL, CLEMBED_F32, 4, 3, 31, "f2");
    expect_load(f, "", CLEMBED_BF16, 4, 3, 31, "f2");
    clembed_file_close(f);
  }
  buf e32 = {0}, ebf = {0};
  put_values(&e32, "f4", 10 * 8, 41);
  put_values(&ebf, "bf", 3 * 8, 42);
  uint8_t *q8 = blocks(2 * 34), *q8k = blocks(292), *q81 = blocks(2 * 36);
  g_tensor g[] = {
      {"output_norm.weight", 30, 2, {8, 3}, ebf.n, ebf.p},
      {"token_embd.weight", 0, 2, {8, 10}, e32.n, e32.p},
      {"q8", 8, 2, {32, 2}, 2 * 34, q8},
      {"q8k", 15, 1, {256}, 292, q8k}, /* ggml's q8_K: an intermediate type, not a table's */
      {"q81", 9, 2, {32, 2}, 2 * 36, q81}, /* ggml's q8_1: f16 d and s, 32 int8: 36 bytes a block */
  };
  b = (buf){0};
  gguf(&b, 3, 64, g, 5);
  path = tmp_path("load.gguf");
  write_file(path, &b);
  free(b.p);
  f = open_ok(path);
  if (f) {
    expect_load(f, NULL, CLEMBED_F32, 10, 8, 41, "f4");
    expect_load(f, "output_norm.weight", CLEMBED_F16, 3, 8, 42, "bf");
    /* no conversion between block types; no quantization into the K types */
    expect_load_fails(f, "q8", 4, CLEMBED_ERR_INVALID_ARGUMENT, "cannot be loaded as q4_0");
    expect_load_fails(f, NULL, CLEMBED_Q4_K, CLEMBED_ERR_UNSUPPORTED, "quantizing");
    /* 10 x 8: columns not a multiple of Q8_0's 32 */
    expect_load_fails_arg(f, NULL, CLEMBED_Q8_0, CLEMBED_ERR_INVALID_ARGUMENT, "not a multiple", "dtype");
    expect_load_fails(f, "q8k", CLEMBED_F32, CLEMBED_ERR_INVALID_ARGUMENT, "is of type q8_K");
    expect_load_fails(f, "q8k", CLEMBED_F32, CLEMBED_ERR_INVALID_ARGUMENT,
                      "block types q8_0, q4_0, q4_k, q6_k, q4_1, q5_0, q5_1, q2_k, q3_k, q5_k, iq4_nl, iq4_xs, "
                      "iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m, tq1_0, tq2_0, mxfp4 can");
    static const uint64_t q81_shape[2] = {2, 32};
    expect_info(f, 4, "q81", -1, "q8_1", 2, q81_shape, 2 * 36);
    clembed_file_close(f);
  }
  free(e32.p), free(ebf.p), free(q8), free(q8k), free(q81);
}

/* On a CPU device sharing host memory, a tensor loaded as its own dtype is a
 * buffer over its own copy-on-write mapping of the file: usable after the file
 * is closed, writable, and what the device writes never reaches the file. */
TU_CASE(load_pages) {
  ctx = device();
  size_t rows = 300, cols = 40, n = rows * cols;
  buf b = {0};
  npy(&b, 1, "<f4", "(300, 40)");
  put_values(&b, "f4", n, 71);
  const char *path = tmp_path("pages.npy");
  write_file(path, &b);
  clembed_file *f = open_ok(path);
  if (!f) return;
  clembed_matrix m = load_ok(f, NULL, CLEMBED_F32);
  clembed_file_close(f); /* the matrix keeps what it needs */
  if (m.buffer) {
    float *h = malloc(n * sizeof(float)), *w = malloc(n * sizeof(float));
    OK(ctx, clembed_matrix_read(ctx, &m, h, CLEMBED_F32));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != stored(i, 71, "f4");
    EXPECT(bad == 0, "a table read after its file was closed: %zu values differ", bad);
    /* written on the device (sgd-like use), then a lookup: the new values; the file unchanged */
    for (size_t i = 0; i < n; i++) w[i] = (float)i * 0.5f;
    OK(ctx, clembed_matrix_write(ctx, &m, w, CLEMBED_F32));
    int32_t idv[3] = {299, 0, 150};
    clembed_ids ids;
    clembed_matrix out;
    OK(ctx, clembed_ids_create(ctx, idv, 3, CLEMBED_I32, &ids));
    OK(ctx, clembed_matrix_create(ctx, 3, cols, CLEMBED_F32, &out));
    OK(ctx, clembed_lookup(ctx, &m, &ids, &out, 0, NULL, NULL));
    OK(ctx, clembed_matrix_read(ctx, &out, h, CLEMBED_F32));
    bad = 0;
    for (size_t r = 0; r < 3; r++)
      for (size_t c = 0; c < cols; c++) bad += h[r * cols + c] != w[(size_t)idv[r] * cols + c];
    EXPECT(bad == 0, "lookup after a write: %zu values differ", bad);
    clembed_ids_release(&ids);
    clembed_matrix_release(&out);
    clembed_matrix_release(&m);
    FILE *fp = fopen(path, "rb");
    uint8_t *again = malloc(b.n);
    EXPECT(fp && fread(again, 1, b.n, fp) == b.n && !memcmp(again, b.p, b.n), "%s changed on the disk", path);
    if (fp) fclose(fp);
    free(again), free(h), free(w);
  }
  free(b.p);
  unlink(path);
}

/* CLEMBED_MAX_BUFFER_BYTES bounds every buffer of a table loaded over the
 * file's pages, the bytes before its first row in its first page included (a
 * .npy's 128-byte header): a table of exactly the limit's bytes is two
 * pieces, and with a smaller limit every piece fits it. */
TU_CASE(load_pages_limit) {
  size_t rows = 1024, cols = 256, n = rows * cols;
  buf b = {0};
  npy(&b, 1, "<f4", "(1024, 256)");
  put_values(&b, "f4", n, 73);
  const char *path = tmp_path("pages_limit.npy");
  write_file(path, &b);
  static const size_t limits[] = {1048576, 65536 + 512, 4096};
  for (size_t k = 0; k < sizeof limits / sizeof limits[0]; k++) {
    char v[32];
    snprintf(v, sizeof v, "%zu", limits[k]);
    setenv("CLEMBED_MAX_BUFFER_BYTES", v, 1);
    clembed_context *c = NULL;
    OK(c, clembed_context_create(NULL, &c));
    unsetenv("CLEMBED_MAX_BUFFER_BYTES");
    clembed_file *f = open_ok(path);
    if (!c || !f) {
      clembed_file_close(f);
      clembed_context_destroy(c);
      continue;
    }
    clembed_matrix m = {0};
    OK(c, clembed_matrix_load(c, f, NULL, CLEMBED_F32, &m));
    clembed_file_close(f);
    size_t np = 0;
    OK(c, clembed_matrix_pieces(c, &m, 0, NULL, NULL, &np));
    clembed_matrix *pc = calloc(np + 1, sizeof *pc);
    size_t *first = calloc(np + 1, sizeof *first);
    OK(c, clembed_matrix_pieces(c, &m, np, pc, first, &np));
    for (size_t j = 0; j < np; j++) {
      size_t size = 0;
      clGetMemObjectInfo(pc[j].buffer, CL_MEM_SIZE, sizeof size, &size, NULL);
      EXPECT(size > 0 && size <= limits[k], "CLEMBED_MAX_BUFFER_BYTES=%zu: buffer %zu of %zu holds %zu bytes",
             limits[k], j + 1, np, size);
    }
    EXPECT(np >= (n * 4 + limits[k] - 1) / limits[k], "limit %zu: %zu buffers for %zu bytes", limits[k], np, n * 4);
    float *h = malloc(n * sizeof *h);
    OK(c, clembed_matrix_read(c, &m, h, CLEMBED_F32));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != stored(i, 73, "f4");
    EXPECT(bad == 0, "limit %zu: %zu values differ", limits[k], bad);
    free(h);
    free(pc);
    free(first);
    clembed_matrix_release(&m);
    clembed_context_destroy(c);
  }
  free(b.p);
  unlink(path);
}

/* Every range of rows of `name` loaded alone (clembed_matrix_load_rows) holds
 * the bytes of those rows of the whole load, as dtype. */
static void expect_rows(const clembed_file *f, const char *name, clembed_dtype dtype) {
  clembed_context *ctx = device();
  clembed_matrix whole = load_ok(f, name, dtype);
  if (!whole.buffer) return;
  size_t R = whole.rows, rb = clembed_dtype_row_bytes(dtype, whole.cols);
  uint8_t *all = malloc(R * rb + 1);
  OK(ctx, clembed_matrix_read(ctx, &whole, all, dtype));
  const size_t ranges[][2] = {{0, R}, {0, 1}, {1, R - 1}, {R / 2, R - R / 2}, {R - 1, 1}, {R, 0}, {R < 2 ? R : 2, 0}, {1, R / 3}};
  for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++) {
    size_t r0 = ranges[k][0], n = ranges[k][1];
    clembed_matrix m = {0};
    clembed_status s = clembed_matrix_load_rows(ctx, f, name, dtype, r0, n, &m);
    EXPECT(s == CLEMBED_OK, "%s rows %zu + %zu as dtype %d: %s: %s", name ? name : "(NULL)", r0, n, (int)dtype,
           clembed_status_string(s), clembed_context_message(ctx));
    if (s != CLEMBED_OK) continue;
    EXPECT(m.rows == n && m.cols == whole.cols && m.dtype == dtype, "rows %zu + %zu: %zu x %zu dtype %d", r0, n,
           m.rows, m.cols, (int)m.dtype);
    uint8_t *got = malloc(n * rb + 1);
    OK(ctx, clembed_matrix_read(ctx, &m, got, dtype));
    EXPECT(!memcmp(got, all + r0 * rb, n * rb), "%s rows %zu + %zu as dtype %d differ from the whole load's",
           name ? name : "(NULL)", r0, n, (int)dtype);
    free(got);
    clembed_matrix_release(&m);
  }
  free(all);
  clembed_matrix_release(&whole);
}

/* clembed_matrix_load_rows: rows of F32, F16 and BF16 tensors as every float
 * dtype, of block tensors as their blocks and dequantized, of a float tensor
 * quantized; through the file's pages and through copies; 1-D tensors; ranges
 * outside the tensor refused, naming first_row or rows. */
TU_CASE(load_rows) {
  ctx = device();
  buf d32 = {0}, d16 = {0}, dbf = {0}, d64 = {0};
  put_values(&d32, "f4", 13 * 7, 81);
  put_values(&d16, "f2", 11 * 9, 82);
  put_values(&dbf, "bf", 6 * 4, 83);
  put_values(&d64, "f4", 9 * 64, 84);
  st_tensor t[] = {
      {"a", "F32", "[13, 7]", d32.n, d32.p},
      {"h", "F16", "[11, 9]", d16.n, d16.p},
      {"b", "BF16", "[6, 4]", dbf.n, dbf.p},
      {"q", "F32", "[9, 64]", d64.n, d64.p},
      {"row", "F32", "[7]", 28, d32.p},
  };
  buf b = {0};
  safetensors(&b, t, 5, NULL);
  const char *path = tmp_path("rows.safetensors");
  write_file(path, &b);
  free(b.p);
  clembed_file *f = open_ok(path);
  static const clembed_dtype dts[] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16};
  for (int pages = 0; f && pages < 2; pages++) {
    if (!pages) setenv("CLEMBED_NO_FILE_PAGES", "1", 1);
    for (int k = 0; k < 3; k++) {
      expect_rows(f, "a", dts[k]);
      expect_rows(f, "h", dts[k]);
      expect_rows(f, "b", dts[k]);
    }
    expect_rows(f, "q", CLEMBED_Q8_0); /* quantized on loading, row by row as the whole */
    expect_rows(f, "q", CLEMBED_Q4_0);
    expect_rows(f, "row", CLEMBED_F32);
    unsetenv("CLEMBED_NO_FILE_PAGES");
  }
  if (f) {
    clembed_matrix m = {0};
    clembed_error_detail d;
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_load_rows(ctx, f, "a", CLEMBED_F32, 14, 0, &m));
    clembed_context_error(ctx, &d);
    EXPECT(!strcmp(d.operation, "clembed_matrix_load_rows") && !strcmp(d.argument, "first_row"), "detail: %s '%s'",
           d.operation, d.argument);
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_load_rows(ctx, f, "a", CLEMBED_F32, 10, 4, &m));
    clembed_context_error(ctx, &d);
    EXPECT(!strcmp(d.argument, "rows") && strstr(clembed_context_message(ctx), "13 rows"), "detail '%s': %s",
           d.argument, clembed_context_message(ctx));
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_load_rows(ctx, f, "a", CLEMBED_F32, 1, UINT64_MAX, &m));
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_load_rows(ctx, f, "nope", CLEMBED_F32, 0, 1, &m));
    EXPECT(m.buffer == NULL, "a refused load wrote *m");
    clembed_file_close(f);
  }
  unlink(path);
  free(d32.p), free(d16.p), free(dbf.p), free(d64.p);
  /* a GGUF tensor of each block type: rows as blocks and dequantized */
  for (int k = 0; k < NTQ; k++) {
    const clembed_dtype qd = (clembed_dtype)TQ[k].dtype;
    size_t rows = 5, cols = 2 * tq_qk(qd), nb = rows * cols / tq_qk(qd);
    uint8_t *data = random_blocks(qd, nb);
    g_tensor g[] = {{"token_embd.weight", (uint32_t)TQ[k].ggml, 2, {cols, rows}, nb * tq_bb(qd), data}};
    buf gb = {0};
    gguf(&gb, 3, 0, g, 1);
    path = tmp_path("rows.gguf");
    write_file(path, &gb);
    free(gb.p);
    f = open_ok(path);
    if (f) {
      expect_rows(f, NULL, qd);
      expect_rows(f, NULL, CLEMBED_F32);
      expect_rows(f, NULL, CLEMBED_BF16);
      clembed_file_close(f);
    }
    unlink(path);
    free(data);
  }
}

/* A tensor larger than one upload piece (16 MiB), same type and converted. */
TU_CASE(load_large) {
  size_t rows = 1100, cols = 4099; /* 4.5 M values: 18 MB of F32 */
  buf b = {0};
  npy(&b, 1, "<f4", "(1100, 4099)");
  put_values(&b, "f4", rows * cols, 51);
  const char *path = tmp_path("large.npy");
  write_file(path, &b);
  free(b.p);
  clembed_file *f = open_ok(path);
  if (!f) return;
  expect_load(f, NULL, CLEMBED_F32, rows, cols, 51, "f4");
  expect_load(f, NULL, CLEMBED_F16, rows, cols, 51, "f4");
  clembed_file_close(f);
  unlink(path);
}

TU_CASE(ids) {
  ctx = device();
  buf b = {0};
  npy(&b, 1, "<i4", "(2, 3)");
  for (int i = 0; i < 6; i++) put_u32(&b, (uint32_t)(i * 5 - 3));
  const char *path = tmp_path("ids.npy");
  write_file(path, &b);
  free(b.p);
  clembed_file *f = open_ok(path);
  if (f) {
    clembed_ids ids;
    OK(ctx, clembed_ids_load(ctx, f, NULL, &ids));
    EXPECT(ids.count == 6 && ids.type == CLEMBED_I32, "count %zu type %d", ids.count, (int)ids.type);
    int32_t got[6] = {0};
    OK(ctx, clembed_ids_read(ctx, &ids, got));
    for (int i = 0; i < 6; i++) EXPECT(got[i] == i * 5 - 3, "id %d: %d", i, got[i]);
    clembed_ids_release(&ids);
    clembed_matrix m;
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_load(ctx, f, NULL, CLEMBED_F32, &m));
    clembed_file_close(f);
  }
  buf d = {0}, w = {0};
  for (int i = 0; i < 3; i++) put_u64(&d, (uint64_t)i * 0x100000001ull);
  put_values(&w, "f4", 2, 1);
  st_tensor t[] = {{"w", "F32", "[2]", w.n, w.p}, {"input_ids", "I64", "[1, 3]", d.n, d.p}};
  b = (buf){0};
  safetensors(&b, t, 2, NULL);
  path = tmp_path("ids.safetensors");
  write_file(path, &b);
  free(b.p);
  f = open_ok(path);
  if (f) {
    clembed_ids ids;
    OK(ctx, clembed_ids_load(ctx, f, "input_ids", &ids));
    EXPECT(ids.count == 3 && ids.type == CLEMBED_I64, "count %zu type %d", ids.count, (int)ids.type);
    int64_t got[3] = {0};
    OK(ctx, clembed_ids_read(ctx, &ids, got));
    for (int i = 0; i < 3; i++) EXPECT(got[i] == (int64_t)i * 0x100000001ll, "id %d: %lld", i, (long long)got[i]);
    clembed_ids_release(&ids);
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_ids_load(ctx, f, "w", &ids));
    EXPECT(strstr(clembed_context_message(ctx), "integers") != NULL, "%s", clembed_context_message(ctx));
    clembed_file_close(f);
  }
  free(d.p), free(w.p);
}

TU_CASE(open_errors) {
  clembed_file *f = (clembed_file *)&f;
  EXPECT(clembed_file_open(NULL, &f) == CLEMBED_ERR_INVALID_ARGUMENT && f == NULL, "NULL path");
  EXPECT(clembed_file_open("x", NULL) == CLEMBED_ERR_INVALID_ARGUMENT, "NULL f");
  clembed_file_close(NULL);
  EXPECT(clembed_file_tensor_count(NULL) == 0, "count of NULL");
  expect_open_fails(tmp_path("does-not-exist.npy"), "cannot open");
  expect_open_fails(tmpdir, "directory");
  const char *fifo = tmp_path("fifo");
  if (mkfifo(fifo, 0600) == 0) {
    expect_open_fails(fifo, "not a regular file");
    unlink(fifo);
  }
  buf b = {0};
  const char *path = tmp_path("empty.bin");
  write_file(path, &b);
  expect_open_fails(path, "empty file");
  put_text(&b, "hello, world: not a tensor file");
  path = tmp_path("text.npy"); /* the name says .npy: the content decides */
  write_file(path, &b);
  expect_open_fails(path, "unrecognised");
  free(b.p);
}

/* Every file of the corpus: bad_* refused with the message that
 * io_corpus/EXPECTED lists for it, good_* opened. */
TU_CASE(corpus) {
  if (!corpus_dir) {
    EXPECT(0, "no corpus directory given");
    return;
  }
  char p[4200];
  snprintf(p, sizeof p, "%s/EXPECTED", corpus_dir);
  FILE *list = fopen(p, "r");
  EXPECT(list != NULL, "cannot read %s", p);
  if (!list) return;
  char line[1024];
  int bad = 0, good = 0;
  while (fgets(line, sizeof line, list)) {
    line[strcspn(line, "\n")] = '\0';
    if (!line[0] || line[0] == '#') continue;
    char *tab = strchr(line, '\t');
    EXPECT(tab != NULL, "EXPECTED: no tab in '%s'", line);
    if (!tab) continue;
    *tab = '\0';
    snprintf(p, sizeof p, "%s/%s", corpus_dir, line);
    if (!strncmp(line, "good_", 5)) {
      clembed_file *f = open_ok(p);
      EXPECT(f == NULL || clembed_file_tensor_count(f) == (size_t)atoi(tab + 1), "%s: %zu tensors, expected %s", line,
             clembed_file_tensor_count(f), tab + 1);
      clembed_file_close(f);
      good++;
    } else {
      expect_open_fails(p, tab + 1);
      bad++;
    }
  }
  fclose(list);
  /* every file is listed */
  DIR *d = opendir(corpus_dir);
  struct dirent *e;
  int files = 0;
  while (d && (e = readdir(d)) != NULL)
    if (!strncmp(e->d_name, "bad_", 4) || !strncmp(e->d_name, "good_", 5)) files++;
  if (d) closedir(d);
  EXPECT(files == bad + good, "%d corpus files, %d listed in EXPECTED", files, bad + good);
  EXPECT(bad >= 40, "only %d hostile files", bad);
  printf("corpus: %d hostile files refused, %d good files opened\n", bad, good);
}

/* The corpus's GGUF file of every block type (written by make_corpus.py, its
 * bytes a formula: block_bytes there): each tensor's data are the formula's
 * bytes where the file says, and it loads as ggml's values. */
TU_CASE(corpus_blocks) {
  if (!corpus_dir) {
    EXPECT(0, "no corpus directory given");
    return;
  }
  char p[4200];
  snprintf(p, sizeof p, "%s/good_gguf_blocks.gguf", corpus_dir);
  clembed_file *f = open_ok(p);
  if (!f) return;
  EXPECT(clembed_file_tensor_count(f) == (size_t)NTQ + 1, "%zu tensors", clembed_file_tensor_count(f));
  for (int k = 0; k < NTQ; k++) {
    int dtype = TQ[k].dtype;
    const char *name = clembed_dtype_name((clembed_dtype)dtype); /* the tensors are named so */
    size_t i = 0, qk = tq_qk(dtype), bytes = 4 * tq_bb(dtype);
    const void *data = NULL;
    clembed_tensor_info t;
    EXPECT(clembed_file_find(f, name, &i) == CLEMBED_OK && clembed_file_tensor_info(f, i, &t) == CLEMBED_OK &&
               clembed_file_tensor_data(f, i, &data) == CLEMBED_OK,
           "%s: tensor '%s'", p, name);
    if (!data) continue;
    EXPECT(t.dtype == dtype && t.ndim == 2 && t.shape[0] == 2 && t.shape[1] == 2 * qk && t.bytes == bytes,
           "%s: dtype %d, %d dims, %llu bytes", name, t.dtype, t.ndim, (unsigned long long)t.bytes);
    uint8_t *want = malloc(bytes);
    for (size_t b = 0; b < bytes; b++) want[b] = (uint8_t)((37 * b + 11 * (size_t)TQ[k].ggml) % 119);
    EXPECT(!memcmp(data, want, bytes), "%s: the data are not make_corpus.py's bytes", name);
    check_loaded_blocks(f, name, dtype, 2, 2 * qk, want);
    free(want);
  }
  clembed_file_close(f);
}

/* A temporary directory for the files the cases write. */
static void setup(clembed_context *unused) {
  (void)unused;
  const char *base = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/test_io_XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(tmpdir)) {
    fprintf(stderr, "cannot create a temporary directory: %s\n", strerror(errno));
    exit(1);
  }
}

static void teardown(clembed_context *unused) {
  (void)unused;
  clembed_context_destroy(the_ctx);
  char cmd[4300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  EXPECT(system(cmd) == 0, "could not remove %s", tmpdir);
}

int main(int argc, char **argv) {
  /* the corpus directory, when given, comes first */
  struct stat st;
  if (argc > 1 && stat(argv[1], &st) == 0 && S_ISDIR(st.st_mode)) {
    corpus_dir = argv[1];
    argv[1] = argv[0];
    argc--;
    argv++;
  }
  return tu_main(argc, argv, (tu_suite){.name = "test_io", .setup = setup, .teardown = teardown});
}
