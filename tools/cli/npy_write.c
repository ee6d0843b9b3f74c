/*
 * npy_write.c - the .npy writer of the command-line tool and the tests
 * (files are read through the library: clembed_io.h). See npy_write.h.
 *
 * File layout (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html):
 *   "\x93NUMPY" major minor
 *   header length: uint16 LE (1.0) or uint32 LE (2.0, 3.0)
 *   header: Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...)}
 *           (latin-1 for 1.0/2.0, utf-8 for 3.0; only ASCII matters here)
 *   raw element data, C order
 */
#define _POSIX_C_SOURCE 200809L
#ifndef _FILE_OFFSET_BITS
#define _FILE_OFFSET_BITS 64
#endif

#include "npy_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#if defined(__GNUC__) || defined(__clang__)
#define NPY_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define NPY_PRINTF(f, a)
#endif

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
/* Refuse headers larger than this (NumPy itself refuses > 10000 by default). */
#define NPY_HEADER_LIMIT ((size_t)1 << 20)
/* I/O is done in chunks of this size so that multi-GB arrays never hit
 * libc/kernel limits on a single read or write. */
#define NPY_IO_CHUNK ((size_t)1 << 26)
#define NPY_EXPECTED_DTYPES "<f4, <f2, <i4 or <i8"

/* ------------------------------------------------------------------------ */
/* small helpers                                                            */
/* ------------------------------------------------------------------------ */

static void set_err(char *err, size_t errlen, const char *path, const char *fmt, ...)
    NPY_PRINTF(4, 5);

static void set_err(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (err == NULL || errlen == 0)
        return;
    n = snprintf(err, errlen, "%s: ", path ? path : "(null path)");
    if (n < 0) {
        err[0] = '\0';
        return;
    }
    if ((size_t)n >= errlen - 1)
        return; /* no room for the message itself; keep the (truncated) path */
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

static int host_is_big_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 0;
}

static void swap_items(unsigned char *p, size_t count, size_t itemsize)
{
    size_t i, j;
    for (i = 0; i < count; i++, p += itemsize) {
        for (j = 0; j < itemsize / 2; j++) {
            unsigned char t = p[j];
            p[j] = p[itemsize - 1 - j];
            p[itemsize - 1 - j] = t;
        }
    }
}

static int dtype_valid(npy_dtype dtype)
{
    return dtype == NPY_F4 || dtype == NPY_F2 || dtype == NPY_I4 || dtype == NPY_I8;
}

size_t npy_itemsize(npy_dtype dtype)
{
    switch (dtype) {
    case NPY_F4: return 4;
    case NPY_F2: return 2;
    case NPY_I4: return 4;
    case NPY_I8: return 8;
    }
    return 0;
}

const char *npy_dtype_name(npy_dtype dtype)
{
    switch (dtype) {
    case NPY_F4: return "<f4";
    case NPY_F2: return "<f2";
    case NPY_I4: return "<i4";
    case NPY_I8: return "<i8";
    }
    return "?";
}

/* Python-like repr of a shape tuple: "()", "(3,)", "(2, 3)". Always
 * NUL-terminates; truncates with "..." if buf is too small. */
static void shape_str(char *buf, size_t cap, int ndim, const size_t *shape)
{
    size_t pos = 0;
    int i, n;

    if (cap == 0)
        return;
    buf[0] = '\0';
    n = snprintf(buf, cap, "(");
    if (n < 0 || (size_t)n >= cap)
        return;
    pos = (size_t)n;
    for (i = 0; i < ndim; i++) {
        n = snprintf(buf + pos, cap - pos, "%s%zu", i ? ", " : "", shape[i]);
        if (n < 0 || (size_t)n >= cap - pos)
            goto truncated;
        pos += (size_t)n;
    }
    n = snprintf(buf + pos, cap - pos, "%s)", ndim == 1 ? "," : "");
    if (n < 0 || (size_t)n >= cap - pos)
        goto truncated;
    return;
truncated:
    if (cap >= 4)
        memcpy(buf + cap - 4, "...", 4);
}

/* Multiply the non-zero dimensions, then the item size, checking every
 * multiplication.  Returns 0 and sets *count and *bytes, or -1 on overflow.
 * A zero dimension makes the array empty, but the other dimensions must
 * still have a representable product so that callers may multiply any
 * subset of them safely: the shapes the library's reader accepts (its
 * ce_io_elements, then the byte count of a non-empty array). */
static int shape_sizes(int ndim, const size_t *shape, size_t itemsize,
                       size_t *count, size_t *bytes)
{
    size_t prod = 1;
    int zero = 0, i;

    for (i = 0; i < ndim; i++) {
        if (shape[i] == 0) {
            zero = 1;
            continue;
        }
        if (prod > SIZE_MAX / shape[i])
            return -1;
        prod *= shape[i];
    }
    if (!zero && prod > SIZE_MAX / itemsize) /* itemsize >= 1 */
        return -1;
    *count = zero ? 0 : prod;
    *bytes = zero ? 0 : prod * itemsize;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* writer                                                                   */
/* ------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/*
 * Create "<path>.tmp.XXXXXX" exclusively.  mkstemp() is deliberately not
 * used: it creates the file with mode 0600, which would become the mode of
 * the final file after rename().  open(O_CREAT|O_EXCL, 0666) gives the same
 * no-clobber / no-symlink-following guarantee and honours the umask.
 */
static int create_temp(const char *path, char **tmp_out, int *errno_out)
{
    static const char alphabet[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static unsigned long counter = 0;
    size_t len = strlen(path);
    char *tmp;
    int attempt;
    uint64_t seed;

    *tmp_out = NULL;
    if (len > SIZE_MAX - 16) {
        *errno_out = ENAMETOOLONG;
        return -1;
    }
    tmp = malloc(len + 16);
    if (tmp == NULL) {
        *errno_out = ENOMEM;
        return -1;
    }
    seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)clock() ^
           (uint64_t)(uintptr_t)&seed ^ (uint64_t)(uintptr_t)tmp;
    for (attempt = 0; attempt < 100; attempt++) {
        uint64_t r = mix64(seed ^ mix64((uint64_t)++counter + (uint64_t)attempt));
        int i, fd;
        memcpy(tmp, path, len);
        memcpy(tmp + len, ".tmp.", 5);
        for (i = 0; i < 6; i++) {
            tmp[len + 5 + (size_t)i] = alphabet[r % (sizeof alphabet - 1)];
            r /= sizeof alphabet - 1;
        }
        tmp[len + 11] = '\0';
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) {
            *tmp_out = tmp;
            return fd;
        }
        if (errno != EEXIST) {
            *errno_out = errno;
            free(tmp);
            return -1;
        }
    }
    *errno_out = EEXIST;
    free(tmp);
    return -1;
}

/* Best effort: make the rename durable.  Errors are ignored. */
static void fsync_parent_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir;
    size_t n;
    int fd;

    if (slash == NULL) {
        dir = malloc(2);
        if (dir == NULL)
            return;
        memcpy(dir, ".", 2);
    } else {
        n = slash == path ? 1 : (size_t)(slash - path);
        dir = malloc(n + 1);
        if (dir == NULL)
            return;
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

static int write_all(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n > 0) {
        size_t want = n < NPY_IO_CHUNK ? n : NPY_IO_CHUNK;
        ssize_t w = write(fd, p, want);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return -1;
        }
        p += (size_t)w;
        n -= (size_t)w;
    }
    return 0;
}

static int write_body(int fd, const unsigned char *data, size_t count, size_t itemsize)
{
    unsigned char buf[65536];
    size_t per, done = 0;

    if (!host_is_big_endian())
        return write_all(fd, data, count * itemsize);
    per = sizeof buf / itemsize;
    while (done < count) {
        size_t k = count - done < per ? count - done : per;
        memcpy(buf, data + done * itemsize, k * itemsize);
        swap_items(buf, k, itemsize);
        if (write_all(fd, buf, k * itemsize) != 0)
            return -1;
        done += k;
    }
    return 0;
}

/* The preamble and header as numpy.save writes them (malloc'd, *total bytes),
 * after checking the arguments; NULL with a message in err. */
static unsigned char *make_header(const char *name, npy_dtype dtype, int ndim, const size_t *shape,
                                  const void *data, size_t *total_out, size_t *count_out,
                                  char *err, size_t errlen)
{
    char dict[64 + NPY_MAX_DIMS * 24];
    unsigned char *hdr;
    size_t dlen, prelen, total, hlen, count, bytes, itemsize;
    int n;

    if (!dtype_valid(dtype)) {
        set_err(err, errlen, name, "invalid dtype %d", (int)dtype);
        return NULL;
    }
    if (ndim < 0 || ndim > NPY_MAX_DIMS) {
        set_err(err, errlen, name, "ndim %d out of range (0..%d)", ndim, NPY_MAX_DIMS);
        return NULL;
    }
    if (ndim > 0 && shape == NULL) {
        set_err(err, errlen, name, "invalid argument: shape is NULL but ndim is %d", ndim);
        return NULL;
    }
    itemsize = npy_itemsize(dtype);
    if (shape_sizes(ndim, shape, itemsize, &count, &bytes) != 0) {
        char s[200];
        shape_str(s, sizeof s, ndim, shape);
        set_err(err, errlen, name, "shape %s is too large: size overflows size_t", s);
        return NULL;
    }
    if (data == NULL && count > 0) {
        set_err(err, errlen, name,
                "invalid argument: data is NULL but the array has %zu elements", count);
        return NULL;
    }

    /* Header dict exactly as numpy.save writes it (keys sorted). */
    n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': ",
                 npy_dtype_name(dtype));
    if (n < 0 || (size_t)n >= sizeof dict)
        goto header_bug;
    dlen = (size_t)n;
    shape_str(dict + dlen, sizeof dict - dlen, ndim, shape);
    dlen += strlen(dict + dlen);
    n = snprintf(dict + dlen, sizeof dict - dlen, ", }");
    if (n < 0 || (size_t)n >= sizeof dict - dlen)
        goto header_bug;
    dlen += (size_t)n;

    /* Pad with spaces + '\n' so that preamble + header is a multiple of 64. */
    prelen = 10;
    total = (prelen + dlen + 1 + 63) / 64 * 64;
    if (total - prelen > 0xffff) {
        prelen = 12;
        total = (prelen + dlen + 1 + 63) / 64 * 64;
    }
    hlen = total - prelen;
    hdr = malloc(total);
    if (hdr == NULL) {
        set_err(err, errlen, name, "out of memory");
        return NULL;
    }
    memcpy(hdr, NPY_MAGIC, NPY_MAGIC_LEN);
    hdr[6] = prelen == 10 ? 1 : 2;
    hdr[7] = 0;
    hdr[8] = (unsigned char)(hlen & 0xff);
    hdr[9] = (unsigned char)((hlen >> 8) & 0xff);
    if (prelen == 12) {
        hdr[10] = (unsigned char)((hlen >> 16) & 0xff);
        hdr[11] = (unsigned char)((hlen >> 24) & 0xff);
    }
    memcpy(hdr + prelen, dict, dlen);
    memset(hdr + prelen + dlen, ' ', total - prelen - dlen - 1);
    hdr[total - 1] = '\n';
    *total_out = total;
    *count_out = count;
    return hdr;

header_bug:
    set_err(err, errlen, name, "internal error: header does not fit");
    return NULL;
}

int npy_write_fd(int fd, const char *name, npy_dtype dtype, int ndim, const size_t *shape,
                 const void *data, char *err, size_t errlen)
{
    size_t total, count;
    unsigned char *hdr;
    int e;

    if (err && errlen)
        err[0] = '\0';
    if (name == NULL)
        name = "(unnamed)";
    hdr = make_header(name, dtype, ndim, shape, data, &total, &count, err, errlen);
    if (hdr == NULL)
        return -1;
    errno = 0;
    if (write_all(fd, hdr, total) != 0 ||
        write_body(fd, (const unsigned char *)data, count, npy_itemsize(dtype)) != 0) {
        e = errno;
        set_err(err, errlen, name, "write failed: %s", e ? strerror(e) : "I/O error");
        free(hdr);
        return -1;
    }
    free(hdr);
    return 0;
}

int npy_write(const char *path, npy_dtype dtype, int ndim, const size_t *shape,
              const void *data, char *err, size_t errlen)
{
    char *tmp = NULL;
    int fd = -1, e;
    size_t total, count;
    unsigned char *hdr;

    if (err && errlen)
        err[0] = '\0';
    if (path == NULL || path[0] == '\0') {
        set_err(err, errlen, path ? path : "(null path)", "invalid argument: empty path");
        return -1;
    }
    /* the arguments are checked before a temporary file exists */
    hdr = make_header(path, dtype, ndim, shape, data, &total, &count, err, errlen);
    if (hdr == NULL)
        return -1;

    fd = create_temp(path, &tmp, &e);
    if (fd < 0) {
        set_err(err, errlen, path, "cannot create temporary file next to it: %s", strerror(e));
        free(hdr);
        return -1;
    }
    errno = 0;
    if (write_all(fd, hdr, total) != 0 ||
        write_body(fd, (const unsigned char *)data, count, npy_itemsize(dtype)) != 0) {
        e = errno;
        set_err(err, errlen, path, "write to temporary file '%s' failed: %s", tmp,
                e ? strerror(e) : "I/O error");
        goto fail;
    }
    if (fsync(fd) != 0) {
        e = errno;
        set_err(err, errlen, path, "fsync of temporary file '%s' failed: %s", tmp, strerror(e));
        goto fail;
    }
    e = close(fd);
    fd = -1;
    if (e != 0) {
        e = errno;
        set_err(err, errlen, path, "closing temporary file '%s' failed: %s", tmp, strerror(e));
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        set_err(err, errlen, path, "cannot rename temporary file '%s' into place: %s", tmp,
                strerror(e));
        goto fail;
    }
    fsync_parent_dir(path);
    free(tmp);
    free(hdr);
    return 0;

fail:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    free(tmp);
    free(hdr);
    return -1;
}
