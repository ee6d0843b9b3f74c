/* Checkpoints (clembed_io.h): clembed_checkpoint_save / _load. Every dtype's
 * bytes back bit for bit, the file as the format says (its header parsed
 * here, each tensor's CRC-32C checked against a bitwise CRC written here),
 * split matrices and views, resuming every optimizer exactly, every refusal
 * with nothing modified, a full disk (RLIMIT_FSIZE), and saves killed by
 * SIGKILL at random moments and at each stage, the previous file loadable
 * every time. The killed savers are this program run again
 * (`test_checkpoint --saver DIR STAGE`). */
#include "test_util.h"

#include "clembed_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------- references */

/* CRC-32C (Castagnoli, RFC 3720's), bit by bit. */
static uint32_t ref_crc32c(const void *data, size_t n) {
  const unsigned char *p = data;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

static char tmpdir[256];

static void make_tmpdir(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/clembed-ckpt-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    exit(1);
  }
}

static void remove_tmpdir(void) {
  DIR *d = opendir(tmpdir);
  if (!d) return;
  struct dirent *e;
  char p[600];
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(tmpdir);
}

/* Files in tmpdir whose name contains "clembed-tmp". */
static int temp_files(void) {
  DIR *d = opendir(tmpdir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL)
    if (strstr(e->d_name, "clembed-tmp")) n++;
  if (d) closedir(d);
  return n;
}

static unsigned char *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc(n > 0 ? (size_t)n : 1);
  if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
    free(p);
    p = NULL;
  }
  fclose(f);
  *size = (size_t)n;
  return p;
}

static char *find_bytes(unsigned char *p, size_t n, const char *s, size_t k) {
  for (size_t i = 0; i + k <= n; i++)
    if (!memcmp(p + i, s, k)) return (char *)p + i;
  return NULL;
}

static void write_file(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  EXPECT(f && fwrite(p, 1, n, f) == n, "writing %s", path);
  if (f) fclose(f);
}

/* A matrix of dtype filled with random bytes (a float one with random values). */
static clembed_matrix random_matrix(clembed_context *ctx, size_t rows, size_t cols, clembed_dtype dt, uint64_t seed) {
  clembed_matrix m;
  OK(ctx, clembed_matrix_create(ctx, rows, cols, dt, &m));
  size_t rb = clembed_dtype_row_bytes(dt, cols), bytes = rows * rb;
  unsigned char *h = malloc(bytes ? bytes : 1);
  if (clembed_dtype_block_values(dt) == 1) {
    for (size_t i = 0; i < rows * cols; i++) tu_set_elem(h, i, dt, tu_rand(&seed));
  } else {
    for (size_t i = 0; i < bytes; i++) h[i] = (unsigned char)(tu_rand(&seed) * 127.0f + 128.0f); /* any bytes */
  }
  if (bytes) OK(ctx, clembed_matrix_write(ctx, &m, h, dt));
  free(h);
  return m;
}

/* The matrix's bytes as the device holds them (rows * row bytes). */
static unsigned char *bytes_of(clembed_context *ctx, const clembed_matrix *m, size_t *n) {
  *n = m->rows * clembed_dtype_row_bytes(m->dtype, m->cols);
  unsigned char *h = malloc(*n ? *n : 1);
  if (*n) OK(ctx, clembed_matrix_read(ctx, m, h, m->dtype));
  return h;
}

static int same_matrix(clembed_context *ctx, const clembed_matrix *a, const clembed_matrix *b) {
  size_t na, nb;
  unsigned char *x = bytes_of(ctx, a, &na), *y = bytes_of(ctx, b, &nb);
  int same = na == nb && !memcmp(x, y, na);
  free(x);
  free(y);
  return same;
}

/* ------------------------------------------------------------------- cases */

static const clembed_dtype some_dtypes[] = {CLEMBED_F32, CLEMBED_F16, CLEMBED_BF16, CLEMBED_Q8_0,
                                            CLEMBED_Q4_K, CLEMBED_IQ4_NL, CLEMBED_MXFP4};
#define NDT (sizeof some_dtypes / sizeof some_dtypes[0])

TU_CASE(round_trip_and_format) {
  char path[400];
  snprintf(path, sizeof path, "%s/model.safetensors", tmpdir);
  clembed_matrix m[NDT], back[NDT];
  clembed_checkpoint_item items[NDT], into[NDT];
  char names[NDT][40];
  for (size_t i = 0; i < NDT; i++) {
    size_t cols = clembed_dtype_block_values(some_dtypes[i]) == 1 ? 24 : 256;
    m[i] = random_matrix(ctx, 5 + i, cols, some_dtypes[i], 100 + i);
    OK(ctx, clembed_matrix_create(ctx, 5 + i, cols, some_dtypes[i], &back[i]));
    if (i == 2)
      snprintf(names[i], sizeof names[i], "emb \"quoted\" \\ \t%s", clembed_dtype_name(some_dtypes[i]));
    else
      snprintf(names[i], sizeof names[i], "table.%s", clembed_dtype_name(some_dtypes[i]));
    items[i] = (clembed_checkpoint_item){names[i], &m[i]};
    into[i] = (clembed_checkpoint_item){names[i], &back[i]};
  }
  const char *keys[] = {"step", "seed", "note"}, *values[] = {"17", "12345", "caf\xc3\xa9 \"x\"\n"};
  OK(ctx, clembed_checkpoint_save(ctx, path, items, NDT, keys, values, 3));
  EXPECT(temp_files() == 0, "a temporary file is left after a save");
  OK(ctx, clembed_checkpoint_load(ctx, path, into, NDT));
  for (size_t i = 0; i < NDT; i++)
    EXPECT(same_matrix(ctx, &m[i], &back[i]), "%s: loaded bytes differ from the saved ones",
           clembed_dtype_name(some_dtypes[i]));

  /* the file, as the format says */
  clembed_file *f = NULL;
  OK(ctx, clembed_file_open(path, &f));
  EXPECT(f && clembed_file_tensor_count(f) == NDT, "tensor count");
  size_t fsize;
  unsigned char *raw = read_file(path, &fsize);
  uint64_t hl = 0;
  for (int k = 0; k < 8; k++) hl |= (uint64_t)raw[k] << (8 * k);
  EXPECT((8 + hl) % 64 == 0, "the data start at %llu, not a multiple of 64", (unsigned long long)(8 + hl));
  EXPECT(!strncmp((const char *)raw + 8, "{\"__metadata__\":{", 17), "the header starts with __metadata__");
  EXPECT(f && !strcmp(clembed_file_metadata_find(f, "clembed.checkpoint"), "1"), "clembed.checkpoint");
  EXPECT(f && !strcmp(clembed_file_metadata_find(f, "step"), "17"), "step");
  EXPECT(f && !strcmp(clembed_file_metadata_find(f, "note"), values[2]), "a value with quotes and a newline");
  EXPECT(f && clembed_file_metadata_find(f, "nothing") == NULL, "an absent key");
  EXPECT(f && clembed_file_metadata_count(f) == 1 + NDT + 3, "metadata count %zu", clembed_file_metadata_count(f));
  uint64_t at = 8 + hl;
  for (size_t i = 0; f && i < NDT; i++) {
    clembed_tensor_info info;
    OK(ctx, clembed_file_tensor_info(f, i, &info));
    clembed_dtype dt = some_dtypes[i];
    size_t rb = clembed_dtype_row_bytes(dt, m[i].cols);
    int plain = clembed_dtype_block_values(dt) == 1;
    EXPECT(!strcmp(info.name, names[i]), "tensor %zu is '%s'", i, info.name);
    EXPECT(!strcmp(info.type_name, dt == CLEMBED_F32 ? "F32" : dt == CLEMBED_F16 ? "F16" : dt == CLEMBED_BF16 ? "BF16" : "U8"),
           "%s stored as %s", clembed_dtype_name(dt), info.type_name);
    EXPECT(info.ndim == 2 && info.shape[0] == m[i].rows && info.shape[1] == (plain ? m[i].cols : rb), "shape");
    size_t n;
    unsigned char *want = bytes_of(ctx, &m[i], &n);
    EXPECT(info.bytes == n && at + n <= fsize && !memcmp(raw + at, want, n), "%s: the file's bytes at %llu",
           clembed_dtype_name(dt), (unsigned long long)at);
    char key[128], entry[160];
    snprintf(key, sizeof key, "clembed.tensor.%s", names[i]);
    snprintf(entry, sizeof entry, "dtype=%s rows=%zu cols=%zu crc32c=%08x", clembed_dtype_name(dt), m[i].rows,
             m[i].cols, (unsigned)ref_crc32c(want, n));
    const char *got = clembed_file_metadata_find(f, key);
    EXPECT(got && !strcmp(got, entry), "%s: '%s', expected '%s'", key, got ? got : "(none)", entry);
    at += n;
    free(want);
  }
  EXPECT(at == fsize, "the file is %zu bytes, the tensors end at %llu", fsize, (unsigned long long)at);
  free(raw);
  clembed_file_close(f);
  /* an empty checkpoint (metadata only) */
  OK(ctx, clembed_checkpoint_save(ctx, path, NULL, 0, keys, values, 1));
  OK(ctx, clembed_checkpoint_load(ctx, path, NULL, 0));
  for (size_t i = 0; i < NDT; i++) {
    clembed_matrix_release(&m[i]);
    clembed_matrix_release(&back[i]);
  }
}

/* Views (offset, ld) and split matrices (CLEMBED_MAX_BUFFER_BYTES) save and load as whole ones. */
TU_CASE(views_and_split_matrices) {
  char path[400];
  snprintf(path, sizeof path, "%s/split.safetensors", tmpdir);
  clembed_context *split = tu_small_buffer_context("4096");
  if (!split) return;
  const size_t rows = 300, cols = 40;
  clembed_matrix a = random_matrix(split, rows, cols, CLEMBED_F32, 7), b;
  size_t pieces = 0;
  OK(split, clembed_matrix_pieces(split, &a, 0, NULL, NULL, &pieces));
  EXPECT(pieces > 1, "the table is split (%zu pieces)", pieces);
  /* a view: rows 10..109, columns 8..31 of a */
  clembed_matrix v = a;
  v.offset = 10 * cols + 8;
  v.rows = 100;
  v.cols = 24;
  v.ld = cols;
  clembed_checkpoint_item items[] = {{"whole", &a}, {"view", &v}};
  OK(split, clembed_checkpoint_save(split, path, items, 2, NULL, NULL, 0));
  /* into one buffer on the other context, and into a split one */
  clembed_matrix one, vv;
  OK(ctx, clembed_matrix_create(ctx, rows, cols, CLEMBED_F32, &one));
  OK(ctx, clembed_matrix_create(ctx, 100, 24, CLEMBED_F32, &vv));
  clembed_checkpoint_item into[] = {{"whole", &one}, {"view", &vv}};
  OK(ctx, clembed_checkpoint_load(ctx, path, into, 2));
  size_t na, nb;
  unsigned char *x = bytes_of(split, &a, &na), *y = bytes_of(ctx, &one, &nb);
  EXPECT(na == nb && !memcmp(x, y, na), "a split table loaded into one buffer");
  free(y);
  y = bytes_of(ctx, &vv, &nb);
  float *xf = (float *)x, *yf = (float *)y;
  int same = 1;
  for (size_t r = 0; r < 100; r++)
    for (size_t c = 0; c < 24; c++) same &= !memcmp(&xf[(10 + r) * cols + 8 + c], &yf[r * 24 + c], 4);
  EXPECT(same, "a view saved as its own rows and columns");
  free(x);
  free(y);
  OK(split, clembed_matrix_create(split, rows, cols, CLEMBED_F32, &b));
  clembed_checkpoint_item back[] = {{"whole", &b}};
  OK(split, clembed_checkpoint_load(split, path, back, 1));
  EXPECT(same_matrix(split, &a, &b), "a split table loaded into a split one");
  clembed_matrix_release(&a);
  clembed_matrix_release(&b);
  clembed_matrix_release(&one);
  clembed_matrix_release(&vv);
  clembed_context_destroy(split);
}

/* ------------------------------------------------------- resuming exactly */

typedef struct run {
  clembed_matrix table, s1, s2;
  uint64_t step;
} run;

static void run_create(clembed_context *ctx, run *r, size_t rows, size_t cols, clembed_dtype dt,
                       clembed_optimizer_kind kind) {
  OK(ctx, clembed_matrix_create(ctx, rows, cols, dt, &r->table));
  OK(ctx, clembed_matrix_init_normal(ctx, &r->table, 0.0f, 0.5f, 99, 0, NULL, NULL));
  OK(ctx, clembed_matrix_create(ctx, rows, kind == CLEMBED_ROWWISE_ADAGRAD ? 1 : cols, CLEMBED_F32, &r->s1));
  OK(ctx, clembed_matrix_create(ctx, rows, cols, CLEMBED_F32, &r->s2));
  r->step = 0;
}

static void run_release(run *r) {
  clembed_matrix_release(&r->table);
  clembed_matrix_release(&r->s1);
  clembed_matrix_release(&r->s2);
}

/* Step number k (1-based) of a run: its ids, offsets and gradient are k's own. */
static void run_step(clembed_context *ctx, run *r, clembed_optimizer_kind kind, int bags, int k) {
  const size_t n = 48, nbags = 12, rows = r->table.rows, cols = r->table.cols;
  uint64_t seed = 1000 + (uint64_t)k;
  int64_t ids[48], offs[13];
  for (size_t i = 0; i < n; i++) ids[i] = (int64_t)((tu_rand(&seed) * 0.5f + 0.5f) * (float)(rows - 1));
  for (size_t b = 0; b <= nbags; b++) offs[b] = (int64_t)(b * n / nbags);
  size_t grows = bags ? nbags : n;
  float *g = malloc(grows * cols * sizeof *g);
  for (size_t i = 0; i < grows * cols; i++) g[i] = tu_rand(&seed);
  clembed_ids di, doff;
  clembed_matrix dg;
  OK(ctx, clembed_ids_create(ctx, ids, n, CLEMBED_I64, &di));
  OK(ctx, clembed_ids_create(ctx, offs, nbags + 1, CLEMBED_I64, &doff));
  OK(ctx, clembed_matrix_create(ctx, grows, cols, CLEMBED_F32, &dg));
  OK(ctx, clembed_matrix_write(ctx, &dg, g, CLEMBED_F32));
  clembed_optimizer o = clembed_optimizer_defaults(kind);
  o.learning_rate = 0.05f;
  o.step = ++r->step;
  if (kind != CLEMBED_SGD) o.state = &r->s1;
  if (kind == CLEMBED_ADAM) o.state2 = &r->s2;
  if (bags)
    OK(ctx, clembed_bag_optimizer_step(ctx, &dg, &di, &doff, NULL, &o, &r->table, 0, NULL, NULL));
  else
    OK(ctx, clembed_optimizer_step(ctx, &dg, &di, NULL, &o, &r->table, 0, NULL, NULL));
  OK(ctx, clembed_finish(ctx));
  clembed_ids_release(&di);
  clembed_ids_release(&doff);
  clembed_matrix_release(&dg);
  free(g);
}

/* K steps in one go equal k steps, a save, a load into fresh matrices (of a
 * context that splits them, or not) and K - k steps: tables and states bit
 * for bit, for every optimizer, plain and bag steps, F32 and BF16 tables. */
TU_CASE(resume_is_exact) {
  clembed_context *split = tu_small_buffer_context("2048");
  if (!split) return;
  char path[400];
  snprintf(path, sizeof path, "%s/resume.safetensors", tmpdir);
  const int K = tu_small ? 4 : 6, k = K / 2;
  const clembed_optimizer_kind kinds[] = {CLEMBED_SGD, CLEMBED_ADAGRAD, CLEMBED_ROWWISE_ADAGRAD, CLEMBED_ADAM};
  const char *kind_names[] = {"sgd", "adagrad", "rowwise_adagrad", "adam"};
  for (int ki = 0; ki < 4; ki++)
    for (int bags = 0; bags < 2; bags++)
      for (int dti = 0; dti < 2; dti++) {
        clembed_dtype dt = dti ? CLEMBED_BF16 : CLEMBED_F32;
        clembed_context *second = (ki + bags + dti) % 2 ? split : ctx; /* the resumed run's context */
        run a, b, c;
        run_create(ctx, &a, 64, 16, dt, kinds[ki]);
        for (int s = 1; s <= K; s++) run_step(ctx, &a, kinds[ki], bags, s);
        run_create(ctx, &b, 64, 16, dt, kinds[ki]);
        for (int s = 1; s <= k; s++) run_step(ctx, &b, kinds[ki], bags, s);
        char step[32];
        snprintf(step, sizeof step, "%llu", (unsigned long long)b.step);
        const char *key = "optimizer.step", *val = step;
        clembed_checkpoint_item items[] = {{"emb", &b.table}, {"emb.momentum1", &b.s1}, {"emb.momentum2", &b.s2}};
        OK(ctx, clembed_checkpoint_save(ctx, path, items, 3, &key, &val, 1));
        run_release(&b);
        /* a new process's view: fresh matrices, the step from the metadata */
        OK(second, clembed_matrix_create(second, 64, 16, dt, &c.table));
        OK(second, clembed_matrix_create(second, 64, kinds[ki] == CLEMBED_ROWWISE_ADAGRAD ? 1 : 16, CLEMBED_F32, &c.s1));
        OK(second, clembed_matrix_create(second, 64, 16, CLEMBED_F32, &c.s2));
        clembed_checkpoint_item into[] = {{"emb", &c.table}, {"emb.momentum1", &c.s1}, {"emb.momentum2", &c.s2}};
        OK(second, clembed_checkpoint_load(second, path, into, 3));
        clembed_file *f = NULL;
        OK(second, clembed_file_open(path, &f));
        const char *sv = clembed_file_metadata_find(f, "optimizer.step");
        c.step = sv ? strtoull(sv, NULL, 10) : 0;
        clembed_file_close(f);
        EXPECT(c.step == (uint64_t)k, "the step from the metadata: %llu", (unsigned long long)c.step);
        for (int s = k + 1; s <= K; s++) run_step(second, &c, kinds[ki], bags, s);
        size_t na, nc;
        unsigned char *x = bytes_of(ctx, &a.table, &na), *y = bytes_of(second, &c.table, &nc);
        EXPECT(na == nc && !memcmp(x, y, na), "%s %s %s: the resumed table differs", kind_names[ki],
               bags ? "bags" : "ids", clembed_dtype_name(dt));
        free(x);
        free(y);
        x = bytes_of(ctx, &a.s1, &na);
        y = bytes_of(second, &c.s1, &nc);
        EXPECT(na == nc && !memcmp(x, y, na), "%s: the resumed state differs", kind_names[ki]);
        free(x);
        free(y);
        x = bytes_of(ctx, &a.s2, &na);
        y = bytes_of(second, &c.s2, &nc);
        EXPECT(na == nc && !memcmp(x, y, na), "%s: the resumed second state differs", kind_names[ki]);
        free(x);
        free(y);
        run_release(&a);
        run_release(&c);
      }
  clembed_context_destroy(split);
}

/* ------------------------------------------------------------ refusals */

/* Load errors name what differs, and leave every matrix as it was. */
TU_CASE(load_refuses_and_modifies_nothing) {
  char path[400], bad[400];
  snprintf(path, sizeof path, "%s/good.safetensors", tmpdir);
  snprintf(bad, sizeof bad, "%s/bad.safetensors", tmpdir);
  clembed_matrix a = random_matrix(ctx, 20, 8, CLEMBED_F32, 1), q = random_matrix(ctx, 4, 32, CLEMBED_Q8_0, 2);
  clembed_checkpoint_item items[] = {{"a", &a}, {"q", &q}};
  OK(ctx, clembed_checkpoint_save(ctx, path, items, 2, NULL, NULL, 0));
  clembed_matrix x = random_matrix(ctx, 20, 8, CLEMBED_F32, 3), y = random_matrix(ctx, 4, 32, CLEMBED_Q8_0, 4);
  clembed_matrix x0 = random_matrix(ctx, 20, 8, CLEMBED_F32, 3), y0 = random_matrix(ctx, 4, 32, CLEMBED_Q8_0, 4);
  clembed_matrix wrong_rows = random_matrix(ctx, 21, 8, CLEMBED_F32, 5), wrong_dt = random_matrix(ctx, 20, 8, CLEMBED_F16, 6);
  struct {
    const char *what;
    clembed_checkpoint_item items[2];
    const char *file;
    const char *needle;
  } cases[] = {
      {"a missing name", {{"x", &x}, {"q", &y}}, path, "no tensor 'x'"},
      {"wrong rows", {{"a", &x}, {"q", &wrong_rows}}, path, "tensor 'q' is 4 x 32 q8_0 in the file"},
      {"wrong dtype", {{"q", &y}, {"a", &wrong_dt}}, path, "20 x 8 f16"},
      {"a missing file", {{"a", &x}, {"q", &y}}, "/nonexistent/nothing.safetensors", "nothing.safetensors"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_load(ctx, cases[c].file, cases[c].items, 2));
    EXPECT(strstr(clembed_context_message(ctx), cases[c].needle), "%s: the message '%s' lacks '%s'", cases[c].what,
           clembed_context_message(ctx), cases[c].needle);
  }
  clembed_checkpoint_item into[] = {{"a", &x}, {"q", &y}};
  size_t n;
  unsigned char *raw = read_file(path, &n);
  /* a flipped bit in each tensor's data, the last byte missing, a byte of the header changed */
  const char *tail_name = "'q'";
  size_t spots[] = {n - 1, n - 200};
  for (size_t k = 0; k < 2; k++) {
    raw[spots[k]] ^= 0x10;
    write_file(bad, raw, n);
    raw[spots[k]] ^= 0x10;
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_load(ctx, bad, into, 2));
    EXPECT(strstr(clembed_context_message(ctx), "is damaged") &&
               strstr(clembed_context_message(ctx), k == 0 ? tail_name : "'a'"),
           "a flipped bit: '%s'", clembed_context_message(ctx));
  }
  write_file(bad, raw, n - 1);
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_load(ctx, bad, into, 2));
  EXPECT(strstr(clembed_context_message(ctx), "bad.safetensors"), "a truncated file: '%s'", clembed_context_message(ctx));
  /* the checksum entry itself edited: same length, another value */
  char *crc = find_bytes(raw, n, "crc32c=", 7);
  EXPECT(crc != NULL, "a crc32c entry in the header");
  if (crc) {
    char keep = crc[7];
    crc[7] = keep == '0' ? '1' : '0';
    write_file(bad, raw, n);
    crc[7] = keep;
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_load(ctx, bad, into, 2));
    EXPECT(strstr(clembed_context_message(ctx), "is damaged"), "an edited checksum: '%s'", clembed_context_message(ctx));
  }
  /* a safetensors file that is no checkpoint: the header without clembed.checkpoint */
  char *mark = find_bytes(raw, n, "clembed.checkpoint", 18);
  if (mark) {
    mark[0] = 'X';
    write_file(bad, raw, n);
    mark[0] = 'c';
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_load(ctx, bad, into, 2));
    EXPECT(strstr(clembed_context_message(ctx), "not a clembed checkpoint"), "no mark: '%s'", clembed_context_message(ctx));
  }
  free(raw);
  /* a good first item and a second whose matrix the writes would refuse (its offset past its buffer) */
  clembed_matrix past = y;
  past.offset = 1u << 20;
  clembed_checkpoint_item half[] = {{"a", &x}, {"q", &past}};
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_load(ctx, path, half, 2));
  EXPECT(same_matrix(ctx, &x, &x0) && same_matrix(ctx, &y, &y0), "a refused load modified a matrix");
  OK(ctx, clembed_checkpoint_load(ctx, path, into, 2));
  EXPECT(same_matrix(ctx, &x, &a) && same_matrix(ctx, &y, &q), "the good file loads after all that");
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_load(ctx, NULL, into, 2));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_load(ctx, path, NULL, 2));
  EXPECT(clembed_checkpoint_load(NULL, path, into, 2) == CLEMBED_ERR_INVALID_ARGUMENT, "a NULL context");
  clembed_matrix *ms[] = {&a, &q, &x, &y, &x0, &y0, &wrong_rows, &wrong_dt};
  for (size_t i = 0; i < 8; i++) clembed_matrix_release(ms[i]);
}

TU_CASE(save_refuses_bad_arguments) {
  char path[400];
  snprintf(path, sizeof path, "%s/refused.safetensors", tmpdir);
  clembed_matrix a = random_matrix(ctx, 3, 4, CLEMBED_F32, 1);
  clembed_checkpoint_item twice[] = {{"a", &a}, {"a", &a}}, meta[] = {{"__metadata__", &a}},
                          empty[] = {{"", &a}}, null_m[] = {{"a", NULL}}, bad_utf8[] = {{"a\xff", &a}};
  const char *k1[] = {"clembed.step"}, *k2[] = {"s", "s"}, *v2[] = {"1", "2"}, *kbad[] = {"k"}, *vbad[] = {"\xc3("};
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_save(ctx, path, twice, 2, NULL, NULL, 0));
  EXPECT(strstr(clembed_context_message(ctx), "given twice"), "%s", clembed_context_message(ctx));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_save(ctx, path, meta, 1, NULL, NULL, 0));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_save(ctx, path, empty, 1, NULL, NULL, 0));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_save(ctx, path, null_m, 1, NULL, NULL, 0));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_save(ctx, path, bad_utf8, 1, NULL, NULL, 0));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_save(ctx, path, twice, 1, k1, v2, 1));
  EXPECT(strstr(clembed_context_message(ctx), "clembed's own"), "%s", clembed_context_message(ctx));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_save(ctx, path, twice, 1, k2, v2, 2));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_save(ctx, path, twice, 1, kbad, vbad, 1));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_save(ctx, path, twice, 1, k2, NULL, 1));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_save(ctx, NULL, twice, 1, NULL, NULL, 0));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_checkpoint_save(ctx, path, NULL, 1, NULL, NULL, 0));
  EXPECT(access(path, F_OK) != 0 && temp_files() == 0, "a refused save wrote something");
  /* a folder that does not exist: CLEMBED_ERR_FILE naming the path */
  FAILS(ctx, CLEMBED_ERR_FILE, clembed_checkpoint_save(ctx, "/nonexistent-folder/x.safetensors", twice, 1, NULL, NULL, 0));
  EXPECT(strstr(clembed_context_message(ctx), "/nonexistent-folder/x.safetensors"), "%s", clembed_context_message(ctx));
  clembed_error_detail d;
  clembed_context_error(ctx, &d);
  EXPECT(d.status == CLEMBED_ERR_FILE && !strcmp(d.argument, "path"), "the detail names path: %s", d.argument);
  clembed_matrix_release(&a);
}

/* ------------------------------------------------- full disk, killed saves */

static char self_exe[512];

/* Generation g's table: every value a function of g, (r, c). */
static void gen_values(float *h, size_t rows, size_t cols, unsigned g) {
  for (size_t i = 0; i < rows * cols; i++) h[i] = (float)g * 1000.0f + (float)(i % 997);
}

#define GEN_ROWS 4096
#define GEN_COLS 64

static clembed_status save_generation(clembed_context *ctx, const char *path, clembed_matrix *m, unsigned g,
                                      size_t rows) {
  float *h = malloc(rows * GEN_COLS * sizeof *h);
  gen_values(h, rows, GEN_COLS, g);
  clembed_status s = clembed_matrix_write(ctx, m, h, CLEMBED_F32);
  free(h);
  if (s != CLEMBED_OK) return s;
  char gs[32];
  snprintf(gs, sizeof gs, "%u", g);
  const char *key = "generation", *val = gs;
  clembed_checkpoint_item it = {"table", m};
  return clembed_checkpoint_save(ctx, path, &it, 1, &key, &val, 1);
}

/* The file at path loads, and its table is the generation its metadata names. Returns that generation, 0 on failure. */
static unsigned check_generation(clembed_context *ctx, const char *path) {
  clembed_file *f = NULL;
  if (clembed_file_open(path, &f) != CLEMBED_OK) {
    EXPECT(0, "%s does not open after a kill: %s", path, clembed_last_error_message());
    return 0;
  }
  const char *gs = clembed_file_metadata_find(f, "generation");
  unsigned g = gs ? (unsigned)strtoul(gs, NULL, 10) : 0;
  clembed_tensor_info info;
  clembed_file_tensor_info(f, 0, &info);
  size_t rows = (size_t)info.shape[0];
  clembed_file_close(f);
  clembed_matrix m;
  OK(ctx, clembed_matrix_create(ctx, rows, GEN_COLS, CLEMBED_F32, &m));
  clembed_checkpoint_item it = {"table", &m};
  clembed_status s = clembed_checkpoint_load(ctx, path, &it, 1);
  EXPECT(s == CLEMBED_OK, "the checkpoint does not load after a kill: %s", clembed_context_message(ctx));
  float *want = malloc(rows * GEN_COLS * sizeof *want), *got = malloc(rows * GEN_COLS * sizeof *got);
  gen_values(want, rows, GEN_COLS, g);
  OK(ctx, clembed_matrix_read(ctx, &m, got, CLEMBED_F32));
  EXPECT(s == CLEMBED_OK && g && !memcmp(want, got, rows * GEN_COLS * sizeof *got),
         "the table is not generation %u's", g);
  free(want);
  free(got);
  clembed_matrix_release(&m);
  return s == CLEMBED_OK ? g : 0;
}

/* --saver DIR STAGE: saves generations 1, 2, ... to DIR/run.safetensors
 * forever, writing one byte to stdout after the first; with STAGE, kills
 * itself at that stage of the second save. */
static const char *kill_stage = NULL;
static unsigned saver_generation = 0;
static void stage_hook(const char *stage) {
  if (kill_stage && saver_generation == 2 && !strcmp(stage, kill_stage)) raise(SIGKILL);
}

static int saver_main(const char *dir, const char *stage) {
  clembed_context *ctx = NULL;
  if (clembed_context_create(NULL, &ctx) != CLEMBED_OK) return 3;
  char path[400];
  snprintf(path, sizeof path, "%s/run.safetensors", dir);
  if (strcmp(stage, "-")) {
    kill_stage = stage;
    clembed__test_checkpoint_hook(stage_hook);
  }
  clembed_matrix m;
  if (clembed_matrix_create(ctx, GEN_ROWS, GEN_COLS, CLEMBED_F32, &m) != CLEMBED_OK) return 3;
  for (saver_generation = 1;; saver_generation++) {
    if (save_generation(ctx, path, &m, saver_generation, GEN_ROWS) != CLEMBED_OK) return 4;
    if (saver_generation == 1 && write(1, "1", 1) != 1) return 5;
  }
}

static pid_t start_saver(const char *stage, int *out) {
  int p[2];
  if (pipe(p) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    execl(self_exe, self_exe, "--saver", tmpdir, stage, (char *)NULL);
    _exit(6);
  }
  close(p[1]);
  *out = p[0];
  return pid;
}

/* SIGKILL at 50 random moments (200 microseconds to 40 ms into the saves) and
 * at each stage of a save: the file is whole every time, its table the
 * generation its metadata names, and the next save removes what the killed one
 * left. */
TU_CASE(killed_saves_lose_nothing) {
  char path[400];
  snprintf(path, sizeof path, "%s/run.safetensors", tmpdir);
  const char *stages[] = {"opened", "data", "header", "synced", "renamed", "done"};
  const int nstages = 6, nrandom = tu_small ? 8 : 50;
  uint64_t seed = 4242;
  int loads = 0, newer = 0, left = 0;
  for (int t = 0; t < nstages + nrandom; t++) {
    const char *stage = t < nstages ? stages[t] : "-";
    int fd;
    pid_t pid = start_saver(stage, &fd);
    EXPECT(pid > 0, "fork");
    if (pid <= 0) return;
    char c;
    ssize_t r = read(fd, &c, 1);
    EXPECT(r == 1, "the saver (%s) did not finish its first save", stage);
    if (t >= nstages) {
      unsigned us = 200 + (unsigned)((tu_rand(&seed) * 0.5f + 0.5f) * 40000.0f);
      struct timespec ts = {0, (long)us * 1000};
      nanosleep(&ts, NULL);
      kill(pid, SIGKILL);
    }
    int st;
    waitpid(pid, &st, 0);
    close(fd);
    EXPECT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the saver (%s) ended otherwise: status %d", stage, st);
    left += temp_files();
    unsigned g = check_generation(ctx, path);
    loads += g != 0;
    newer += g > 1;
    if (t < nstages) {
      int renamed = t >= 4; /* killed at "renamed" or "done": the second generation is in place */
      EXPECT(g == (renamed ? 2u : 1u), "killed at stage %s: generation %u in the file", stage, g);
    }
    /* the next save on this host removes the dead saver's temporary file */
    clembed_matrix m;
    OK(ctx, clembed_matrix_create(ctx, 16, GEN_COLS, CLEMBED_F32, &m));
    OK(ctx, save_generation(ctx, path, &m, 1000 + (unsigned)t, 16));
    clembed_matrix_release(&m);
    EXPECT(temp_files() == 0, "a killed save's temporary file is still there after the next save");
    EXPECT(check_generation(ctx, path) == 1000 + (unsigned)t, "the next save");
  }
  printf("  %d kills (%d at stages, %d at random moments): %d loads whole, %d past the first generation, "
         "%d temporary files left by the killed savers (removed by the next save)\n",
         nstages + nrandom, nstages, nrandom, loads, newer, left);
}

/* --fsize DIR: a 64 KiB checkpoint saves; then with RLIMIT_FSIZE at 256 KiB
 * (SIGXFSZ ignored) a 1 MiB one fails with CLEMBED_ERR_FILE naming the path;
 * exit 0 when both did as expected. */
static int fsize_main(const char *dir) {
  clembed_context *ctx = NULL;
  if (clembed_context_create(NULL, &ctx) != CLEMBED_OK) return 3;
  char path[400];
  snprintf(path, sizeof path, "%s/full.safetensors", dir);
  clembed_matrix small = {0}, big = {0};
  int rc = 0;
  if (clembed_matrix_create(ctx, 256, GEN_COLS, CLEMBED_F32, &small) != CLEMBED_OK ||
      clembed_matrix_create(ctx, GEN_ROWS, GEN_COLS, CLEMBED_F32, &big) != CLEMBED_OK)
    rc = 3;
  else if (save_generation(ctx, path, &small, 1, 256) != CLEMBED_OK)
    rc = 5;
  if (!rc) {
    /* the limit after the device's set-up (a compiler writes its cache files) */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {256 << 10, 256 << 10};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) rc = 4;
  }
  if (!rc) {
    clembed_status s = save_generation(ctx, path, &big, 2, GEN_ROWS);
    const char *msg = clembed_context_message(ctx);
    fprintf(stderr, "  the full save: %s: %s\n", clembed_status_string(s), msg);
    if (s != CLEMBED_ERR_FILE || !strstr(msg, path)) rc = 6;
  }
  clembed_matrix_release(&small); /* everything released: the sanitizer build checks for leaks */
  clembed_matrix_release(&big);
  clembed_context_destroy(ctx);
  return rc;
}

TU_CASE(full_disk_keeps_the_previous_file) {
  char path[400];
  snprintf(path, sizeof path, "%s/full.safetensors", tmpdir);
  pid_t pid = fork();
  if (pid == 0) {
    execl(self_exe, self_exe, "--fsize", tmpdir, (char *)NULL);
    _exit(7);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the RLIMIT_FSIZE child: status %d (5: the small save failed, "
         "6: the big one did not fail with CLEMBED_ERR_FILE naming the path)", st);
  EXPECT(temp_files() == 0, "a failed save left its temporary file");
  EXPECT(check_generation(ctx, path) == 1, "the file before the full save");
}

static void setup(clembed_context *ctx) {
  (void)ctx;
  make_tmpdir();
}

static void teardown(clembed_context *ctx) {
  (void)ctx;
  remove_tmpdir();
}

int main(int argc, char **argv) {
  ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
  self_exe[n > 0 ? n : 0] = '\0';
  if (argc == 4 && !strcmp(argv[1], "--saver")) return saver_main(argv[2], argv[3]);
  if (argc == 3 && !strcmp(argv[1], "--fsize")) return fsize_main(argv[2]);
  tu_suite suite = {"test_checkpoint", 1, setup, teardown, 600};
  return tu_main(argc, argv, suite);
}
