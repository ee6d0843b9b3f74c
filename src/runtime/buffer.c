/* The one allocator: every cl_mem clembed makes comes from ce_buffer. Matrices
 * and ids on POCL's CPU devices (ctx->host_pages, device.c) go on huge pages;
 * temporaries are created zeroed where a checker needs it; constants are
 * copied from the host when created (no command on the queue). A matrix
 * larger than one buffer is made of pieces (ce_matrix_alloc), which the
 * registry below keeps under its first piece. */
#define _DEFAULT_SOURCE /* mmap's MAP_ANONYMOUS, madvise, MADV_HUGEPAGE */
#include "runtime.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__linux__) && defined(MADV_HUGEPAGE)
typedef struct host_mapping {
  void *base;
  size_t length;
} host_mapping;

/* Frees a huge-page buffer's host memory when OpenCL deletes the buffer (the
 * library must stay loaded while a buffer it made is alive, as with any
 * callback). */
static void CL_CALLBACK unmap_host_memory(cl_mem m, void *user) {
  (void)m;
  host_mapping *h = user;
  munmap(h->base, h->length);
  free(h);
}

/* A buffer of two huge pages or more in its own anonymous mapping, aligned to
 * a huge page and advised for transparent huge pages, used by the device in
 * place (CL_MEM_USE_HOST_PTR): a table gathered at random rows then costs far
 * fewer TLB misses. A mapping of its own (not malloc's heap) keeps the advice
 * from reaching other allocations after it is freed. NULL when any step
 * fails: the caller makes an ordinary buffer. */
static cl_mem huge_page_buffer(clembed_context *ctx, size_t bytes) {
  const size_t page = ctx->tune->huge_page_bytes;
  if (bytes < 2 * page) return NULL;
  size_t rounded = (bytes + page - 1) / page * page, length = rounded + page;
  if (rounded < bytes || length < rounded) return NULL;
  host_mapping *h = malloc(sizeof *h);
  if (!h) return NULL;
  void *p = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    free(h);
    return NULL;
  }
  /* the aligned part, and the slack before and after it given back */
  uintptr_t start = ((uintptr_t)p + page - 1) / page * page;
  size_t head = (size_t)(start - (uintptr_t)p), tail = length - head - rounded;
  if (head) munmap(p, head);
  if (tail) munmap((char *)start + rounded, tail);
  h->base = (void *)start;
  h->length = rounded;
  madvise(h->base, rounded, MADV_HUGEPAGE); /* advice only: without it the pages are ordinary */
  cl_int err;
  cl_mem b = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, h->base, &err);
  if (err == CL_SUCCESS && clSetMemObjectDestructorCallback(b, unmap_host_memory, h) == CL_SUCCESS) return b;
  if (err == CL_SUCCESS) clReleaseMemObject(b); /* the memory could not be freed with the buffer: not used */
  munmap(h->base, h->length);
  free(h);
  return NULL;
}
#else
static cl_mem huge_page_buffer(clembed_context *ctx, size_t bytes) {
  (void)ctx;
  (void)bytes;
  return NULL;
}
#endif

clembed_status ce_buffer(clembed_context *ctx, ce_buffer_kind kind, size_t bytes, const void *host,
                         const char *what, cl_mem *out) {
  clembed_status status = CLEMBED_OK;
  void *zero = NULL;
  cl_mem_flags flags = CL_MEM_READ_WRITE;
  *out = NULL;
  if (bytes == 0) bytes = 4;
  if (ctx->max_alloc && bytes > ctx->max_alloc)
    FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: %zu bytes exceed the device's largest allocation (%llu)", what, bytes,
         (unsigned long long)ctx->max_alloc);
  if (kind == CE_BUFFER_DATA && ctx->host_pages && (*out = huge_page_buffer(ctx, bytes))) return CLEMBED_OK;
  if (kind == CE_BUFFER_CONST || kind == CE_BUFFER_COPY) {
    flags = (kind == CE_BUFFER_CONST ? CL_MEM_READ_ONLY : CL_MEM_READ_WRITE) | CL_MEM_COPY_HOST_PTR;
  } else if (kind == CE_BUFFER_TEMP && ctx->zero_temporaries) {
    if (!(zero = calloc(1, bytes))) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    flags |= CL_MEM_COPY_HOST_PTR;
    host = zero;
  } else {
    host = NULL;
  }
  cl_int err;
  *out = clCreateBuffer(ctx->context, flags, bytes, (void *)host, &err);
  if (err != CL_SUCCESS) {
    *out = NULL;
    char what_size[160];
    snprintf(what_size, sizeof what_size, "%s: allocating %zu bytes", what, bytes);
    status = ce_cl_fail(ctx, err, what_size); /* allocation failures become CLEMBED_ERR_OUT_OF_MEMORY */
  }
cleanup:
  free(zero);
  return status;
}

/* ------------------------------------------------- matrices in pieces */

/* A split matrix: its pieces (first = the first row of the whole matrix, offset
 * = that row's first element in the piece's buffer), keyed by the first. The
 * registry holds a reference on every piece but the first, whose reference is
 * the matrix's own (clembed_matrix_release, or the caller's clReleaseMemObject,
 * which the destructor callback follows where the implementation calls it). */
typedef struct split_entry {
  struct split_entry *next;
  cl_mem first;
  cl_context context;
  size_t rows, cols;
  clembed_dtype dtype;
  size_t count;
  ce_piece piece[];
} split_entry;

static pthread_mutex_t split_lock = PTHREAD_MUTEX_INITIALIZER;
static split_entry *split_list;
static atomic_size_t split_entries; /* read without the lock: no split matrix, no lookup */

/* Removes and returns the entry of `first` (NULL when none). Under the lock. */
static split_entry *split_unlink(cl_mem first) {
  for (split_entry **e = &split_list; *e; e = &(*e)->next)
    if ((*e)->first == first) {
      split_entry *found = *e;
      *e = found->next;
      atomic_fetch_sub(&split_entries, 1);
      return found;
    }
  return NULL;
}

void ce_pieces_forget(cl_mem first) {
  if (!first || atomic_load(&split_entries) == 0) return;
  pthread_mutex_lock(&split_lock);
  split_entry *e = split_unlink(first);
  pthread_mutex_unlock(&split_lock);
  if (!e) return;
  /* released outside the lock: a release may run destructor callbacks that take it */
  for (size_t j = 1; j < e->count; j++) clReleaseMemObject(e->piece[j].buffer);
  free(e);
}

/* The first piece deleted (however its last reference went): the others follow. */
static void CL_CALLBACK forget_pieces(cl_mem first, void *user) {
  (void)user;
  ce_pieces_forget(first);
}

clembed_status ce_pieces_register(clembed_context *ctx, const ce_piece *pieces, size_t n, size_t rows, size_t cols,
                                  clembed_dtype dtype) {
  split_entry *e = malloc(sizeof *e + n * sizeof e->piece[0]);
  if (!e) return ce_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "a matrix in %zu buffers: out of host memory", n);
  e->first = pieces[0].buffer;
  e->context = ctx->context;
  e->rows = rows;
  e->cols = cols;
  e->dtype = dtype;
  e->count = n;
  memcpy(e->piece, pieces, n * sizeof *pieces);
  pthread_mutex_lock(&split_lock);
  e->next = split_list;
  split_list = e;
  atomic_fetch_add(&split_entries, 1);
  pthread_mutex_unlock(&split_lock);
  /* a safety net only: clembed_matrix_release forgets the pieces itself (Mesa 22's rusticl never calls it) */
  clSetMemObjectDestructorCallback(e->first, forget_pieces, NULL);
  return CLEMBED_OK;
}

static void pieces_init(ce_pieces *p) {
  memset(p, 0, sizeof *p);
  p->piece = p->local;
}

static int pieces_reserve(ce_pieces *p, size_t n) {
  if (n <= CE_PIECES_LOCAL) return 1;
  p->piece = malloc(n * sizeof *p->piece);
  if (!p->piece) {
    p->piece = p->local;
    return 0;
  }
  return 1;
}

void ce_pieces_release(ce_pieces *p) {
  if (p && p->piece && p->piece != p->local) free(p->piece);
  if (p) p->piece = p->local;
}

int ce_pieces_find(cl_mem first, size_t *rows, size_t *cols, clembed_dtype *dtype, ce_pieces *p) {
  pieces_init(p);
  if (!first || atomic_load(&split_entries) == 0) return 0;
  int found = 0;
  pthread_mutex_lock(&split_lock);
  for (split_entry *e = split_list; e; e = e->next)
    if (e->first == first) {
      if (!pieces_reserve(p, e->count)) {
        found = -1;
        break;
      }
      memcpy(p->piece, e->piece, e->count * sizeof *p->piece);
      p->count = e->count;
      p->rows = e->rows;
      p->ld = e->cols;
      *rows = e->rows;
      *cols = e->cols;
      *dtype = e->dtype;
      found = 1;
      break;
    }
  pthread_mutex_unlock(&split_lock);
  return found;
}

clembed_status ce_piece_rows(clembed_context *ctx, size_t row_bytes, const char *what, size_t *per) {
  size_t limit = ctx->max_piece / 4 * 4; /* buffers hold whole words */
  *per = row_bytes ? limit / row_bytes : SIZE_MAX;
  if (*per) return CLEMBED_OK;
  if (ctx->max_piece_env)
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "CLEMBED_MAX_BUFFER_BYTES", -1,
                       (int64_t)ctx->max_piece,
                       "%s: CLEMBED_MAX_BUFFER_BYTES=%zu is less than one row of the matrix (%zu bytes): a row is "
                       "never split over two buffers",
                       what, ctx->max_piece, row_bytes);
  return ce_fail_arg(ctx, CLEMBED_ERR_OUT_OF_MEMORY, NULL, "cols", -1, (int64_t)row_bytes,
                     "%s: one row of the matrix (%zu bytes) exceeds the device's largest allocation (%zu bytes): a "
                     "row is never split over two buffers",
                     what, row_bytes, ctx->max_piece);
}

clembed_status ce_matrix_alloc(clembed_context *ctx, size_t rows, size_t cols, clembed_dtype dtype, const char *what,
                               cl_mem *first, ce_pieces *p) {
  clembed_status status = CLEMBED_OK;
  size_t row_bytes = clembed_dtype_row_bytes(dtype, cols), per = 1, n = 1, bytes;
  pieces_init(p);
  *first = NULL;
  if (ce_mul_overflows(rows, row_bytes, &bytes))
    return ce_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "%s: %zu x %zu overflows size_t", what, rows, cols);
  size_t words = bytes / 4 + (bytes % 4 != 0);
  if (words > ctx->max_piece / 4) { /* several buffers of whole rows */
    CHECK(ce_piece_rows(ctx, row_bytes, what, &per));
    n = rows / per + (rows % per != 0);
    if (ctx->global_mem && bytes > ctx->global_mem)
      FAIL(CLEMBED_ERR_OUT_OF_MEMORY,
           "%s: %zu x %zu (%zu bytes) is more than the device's memory (%llu bytes; its largest allocation is %llu)",
           what, rows, cols, bytes, (unsigned long long)ctx->global_mem, (unsigned long long)ctx->max_alloc);
  }
  if (!pieces_reserve(p, n)) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
  p->count = n;
  p->rows = rows;
  p->ld = cols;
  for (size_t j = 0; j < n; j++) {
    size_t r0 = j * per, nr = n == 1 ? rows : (rows - r0 < per ? rows - r0 : per);
    size_t b = nr * row_bytes;
    char what_piece[96];
    snprintf(what_piece, sizeof what_piece, "%s (buffer %zu of %zu)", what, j + 1, n);
    p->piece[j].first = r0;
    p->piece[j].offset = 0;
    CHECK(ce_buffer(ctx, CE_BUFFER_DATA, (b / 4 + (b % 4 != 0)) * 4, NULL, n > 1 ? what_piece : what,
                    &p->piece[j].buffer));
  }
  if (n > 1) CHECK(ce_pieces_register(ctx, p->piece, n, rows, cols, dtype));
  *first = p->piece[0].buffer;
cleanup:
  if (status != CLEMBED_OK) {
    for (size_t j = 0; j < p->count; j++)
      if (p->piece[j].buffer) clReleaseMemObject(p->piece[j].buffer);
    ce_pieces_release(p);
    pieces_init(p);
  }
  return status;
}

void ce_pieces_none(ce_pieces *p) {
  pieces_init(p);
  p->count = 1;
}

size_t ce_piece_nrows(const ce_pieces *p, size_t j) {
  return (j + 1 < p->count ? p->piece[j + 1].first : p->rows) - p->piece[j].first;
}

void ce_piece_view(const ce_pieces *p, size_t j, const clembed_matrix *m, clembed_matrix *view) {
  *view = *m;
  view->buffer = p->piece[j].buffer;
  view->offset = p->piece[j].offset;
  view->rows = ce_piece_nrows(p, j);
  view->ld = p->ld;
}
