/*
 * npy.c - minimal, defensive reader/writer for NumPy .npy files.
 * See npy.h for the contract.
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

#include "npy.h"

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

/* Multiply the non-zero dimensions and the item size, checking every
 * multiplication.  Returns 0 and sets *count and *bytes, or -1 on overflow.
 * A zero dimension makes the array empty, but the other dimensions must
 * still have a representable product so that callers may multiply any
 * subset of them safely. */
static int shape_sizes(int ndim, const size_t *shape, size_t itemsize,
                       size_t *count, size_t *bytes)
{
    size_t prod = itemsize; /* itemsize >= 1 */
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
    *count = zero ? 0 : prod / itemsize;
    *bytes = zero ? 0 : prod;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* header parser                                                            */
/* ------------------------------------------------------------------------ */

typedef struct {
    const unsigned char *p, *end;
    char msg[256];
} cursor;

typedef struct {
    int have_descr, have_fortran, have_shape;
    char descr[32];
    int descr_truncated;
    int fortran;
    int ndim;
    size_t shape[NPY_MAX_DIMS];
} header_info;

static int fail(cursor *c, const char *fmt, ...) NPY_PRINTF(2, 3);

static int fail(cursor *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* Copy s into out, replacing anything but printable ASCII with '?'. */
static void sanitize(char *out, size_t cap, const char *s, int truncated)
{
    size_t i = 0;
    if (cap == 0)
        return;
    for (; *s && i + 1 < cap; s++)
        out[i++] = (*s >= 0x20 && *s < 0x7f && *s != '\'') ? *s : '?';
    out[i] = '\0';
    if (truncated && cap >= 4) {
        if (i + 4 > cap)
            i = cap - 4;
        memcpy(out + i, "...", 4);
    }
}

static void skip_ws(cursor *c)
{
    while (c->p < c->end &&
           (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r' ||
            *c->p == '\f' || *c->p == '\v'))
        c->p++;
}

static int at_end(cursor *c)
{
    return c->p >= c->end;
}

static int is_ident_char(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9') || ch == '_';
}

static const char *char_desc(cursor *c, char *buf, size_t cap)
{
    unsigned char ch;
    if (at_end(c))
        return "end of header";
    ch = *c->p;
    if (ch >= 0x21 && ch < 0x7f)
        snprintf(buf, cap, "'%c'", ch);
    else
        snprintf(buf, cap, "byte 0x%02x", ch);
    return buf;
}

/* Parse a quoted string ('...' or "...").  Escapes are not supported: no
 * legitimate descr or key needs one. */
static int parse_string(cursor *c, char *buf, size_t cap, int *truncated, const char *what)
{
    unsigned char quote;
    size_t n = 0;

    *truncated = 0;
    if (at_end(c) || (*c->p != '\'' && *c->p != '"')) {
        char tmp[16];
        return fail(c, "malformed header: expected a quoted %s, found %s", what,
                    char_desc(c, tmp, sizeof tmp));
    }
    quote = *c->p++;
    while (c->p < c->end) {
        unsigned char ch = *c->p++;
        if (ch == quote) {
            buf[n] = '\0';
            return 0;
        }
        if (ch == '\\')
            return fail(c, "malformed header: escape sequences in strings are not supported");
        if (ch == '\n' || ch == '\0')
            break;
        if (n + 1 < cap)
            buf[n++] = (char)ch;
        else
            *truncated = 1;
    }
    return fail(c, "malformed header: unterminated string");
}

static int parse_shape(cursor *c, header_info *h)
{
    int ndim = 0, saw_comma = 0;
    char tmp[16];

    if (at_end(c) || *c->p != '(')
        return fail(c, "malformed header: 'shape' is not a tuple (found %s)",
                    char_desc(c, tmp, sizeof tmp));
    c->p++;
    skip_ws(c);
    if (!at_end(c) && *c->p == ')') {
        c->p++;
        h->ndim = 0;
        return 0;
    }
    for (;;) {
        size_t v = 0;

        skip_ws(c);
        if (at_end(c))
            return fail(c, "malformed header: unterminated shape tuple");
        if (*c->p == '-')
            return fail(c, "negative dimension in shape");
        if (*c->p < '0' || *c->p > '9')
            return fail(c, "non-numeric dimension in shape (found %s)",
                        char_desc(c, tmp, sizeof tmp));
        while (!at_end(c) && *c->p >= '0' && *c->p <= '9') {
            unsigned d = (unsigned)(*c->p - '0');
            if (v > (SIZE_MAX - d) / 10)
                return fail(c, "dimension in shape is too large (overflows size_t)");
            v = v * 10 + d;
            c->p++;
        }
        /* Python 2 long suffix, e.g. "(3L,)", as written by old NumPy. */
        if (!at_end(c) && (*c->p == 'L' || *c->p == 'l'))
            c->p++;
        if (!at_end(c) && (is_ident_char(*c->p) || *c->p == '.'))
            return fail(c, "non-numeric dimension in shape (found %s after a number)",
                        char_desc(c, tmp, sizeof tmp));
        if (ndim >= NPY_MAX_DIMS)
            return fail(c, "shape has more than %d dimensions", NPY_MAX_DIMS);
        h->shape[ndim++] = v;

        skip_ws(c);
        if (at_end(c))
            return fail(c, "malformed header: unterminated shape tuple");
        if (*c->p == ',') {
            c->p++;
            saw_comma = 1;
            skip_ws(c);
            if (!at_end(c) && *c->p == ')') {
                c->p++;
                break;
            }
            continue;
        }
        if (*c->p == ')') {
            c->p++;
            if (ndim == 1 && !saw_comma)
                return fail(c, "malformed header: 'shape' is not a tuple "
                               "(a single dimension needs a trailing comma, e.g. (3,))");
            break;
        }
        return fail(c, "malformed header: expected ',' or ')' in shape, found %s",
                    char_desc(c, tmp, sizeof tmp));
    }
    h->ndim = ndim;
    return 0;
}

static int parse_header(cursor *c, header_info *h)
{
    char tmp[16];

    memset(h, 0, sizeof *h);
    skip_ws(c);
    if (at_end(c))
        return fail(c, "header is empty (expected a dict)");
    if (*c->p != '{')
        return fail(c, "header is not a dict (expected '{', found %s)",
                    char_desc(c, tmp, sizeof tmp));
    c->p++;
    for (;;) {
        char key[32];
        int trunc;

        skip_ws(c);
        if (at_end(c))
            return fail(c, "malformed header: unterminated dict");
        if (*c->p == '}') {
            c->p++;
            break;
        }
        if (parse_string(c, key, sizeof key, &trunc, "key") != 0)
            return -1;
        skip_ws(c);
        if (at_end(c) || *c->p != ':')
            return fail(c, "malformed header: expected ':' after key, found %s",
                        char_desc(c, tmp, sizeof tmp));
        c->p++;
        skip_ws(c);

        if (!trunc && strcmp(key, "descr") == 0) {
            if (h->have_descr)
                return fail(c, "malformed header: duplicate key 'descr'");
            h->have_descr = 1;
            if (!at_end(c) && *c->p == '[')
                return fail(c, "unsupported dtype: structured dtypes are not supported "
                               "(expected " NPY_EXPECTED_DTYPES ")");
            if (at_end(c) || (*c->p != '\'' && *c->p != '"'))
                return fail(c, "unsupported dtype: 'descr' is not a simple type string "
                               "(expected " NPY_EXPECTED_DTYPES ")");
            if (parse_string(c, h->descr, sizeof h->descr, &h->descr_truncated,
                             "dtype string") != 0)
                return -1;
        } else if (!trunc && strcmp(key, "fortran_order") == 0) {
            const unsigned char *start = c->p;
            size_t len;
            if (h->have_fortran)
                return fail(c, "malformed header: duplicate key 'fortran_order'");
            h->have_fortran = 1;
            while (!at_end(c) && is_ident_char(*c->p))
                c->p++;
            len = (size_t)(c->p - start);
            if (len == 4 && memcmp(start, "True", 4) == 0)
                h->fortran = 1;
            else if (len == 5 && memcmp(start, "False", 5) == 0)
                h->fortran = 0;
            else
                return fail(c, "malformed header: 'fortran_order' must be True or False");
        } else if (!trunc && strcmp(key, "shape") == 0) {
            if (h->have_shape)
                return fail(c, "malformed header: duplicate key 'shape'");
            h->have_shape = 1;
            if (parse_shape(c, h) != 0)
                return -1;
        } else {
            char safe[40];
            sanitize(safe, sizeof safe, key, trunc);
            return fail(c, "malformed header: unexpected key '%s'", safe);
        }

        skip_ws(c);
        if (at_end(c))
            return fail(c, "malformed header: unterminated dict");
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p == '}') {
            c->p++;
            break;
        }
        return fail(c, "malformed header: expected ',' or '}' in dict, found %s",
                    char_desc(c, tmp, sizeof tmp));
    }
    /* Only padding may follow the dict.  NumPy pads with spaces and ends
     * with '\n'; be lenient about the exact whitespace. */
    skip_ws(c);
    if (!at_end(c))
        return fail(c, "malformed header: unexpected %s after the dict",
                    char_desc(c, tmp, sizeof tmp));
    if (!h->have_descr)
        return fail(c, "header is missing key 'descr'");
    if (!h->have_fortran)
        return fail(c, "header is missing key 'fortran_order'");
    if (!h->have_shape)
        return fail(c, "header is missing key 'shape'");
    return 0;
}

static int descr_to_dtype(const char *descr, npy_dtype *out)
{
    static const npy_dtype all[] = {NPY_F4, NPY_F2, NPY_I4, NPY_I8};
    size_t i;
    for (i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(descr, npy_dtype_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    }
    return -1;
}

/* ------------------------------------------------------------------------ */
/* reader                                                                   */
/* ------------------------------------------------------------------------ */

/* fread() that loops in chunks; returns the number of bytes read. */
static size_t read_full(FILE *fp, void *buf, size_t n)
{
    unsigned char *p = buf;
    size_t done = 0;
    while (done < n) {
        size_t want = n - done < NPY_IO_CHUNK ? n - done : NPY_IO_CHUNK;
        size_t got = fread(p + done, 1, want, fp);
        done += got;
        if (got < want)
            break;
    }
    return done;
}

void npy_free(npy_array *a)
{
    if (a == NULL)
        return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

/* npy_read and npy_map: with `map` non-NULL, a regular file on a
 * little-endian host is mapped read-only instead of read into memory. */
static int read_or_map(const char *path, npy_array *out, npy_mapping *map, char *err,
                       size_t errlen);

int npy_read(const char *path, npy_array *out, char *err, size_t errlen)
{
    return read_or_map(path, out, NULL, err, errlen);
}

int npy_map(const char *path, npy_mapping *out, char *err, size_t errlen)
{
    if (out == NULL) {
        if (err && errlen)
            err[0] = '\0';
        set_err(err, errlen, path ? path : "(null path)", "invalid argument (NULL output)");
        return -1;
    }
    memset(out, 0, sizeof *out);
    return read_or_map(path, &out->array, out, err, errlen);
}

void npy_unmap(npy_mapping *m)
{
    if (m == NULL)
        return;
    if (m->map != NULL)
        munmap(m->map, m->map_bytes);
    else
        free(m->array.data);
    memset(m, 0, sizeof *m);
}

static int read_or_map(const char *path, npy_array *out, npy_mapping *map, char *err,
                       size_t errlen)
{
    FILE *fp = NULL;
    unsigned char pre[12];
    unsigned char *hdr = NULL;
    unsigned char *data = NULL;
    size_t nread, prelen, hlen, itemsize, count = 0, bytes = 0;
    int size_known = 0;
    uintmax_t fsize = 0, after_header = 0;
    unsigned major, minor;
    header_info h;
    cursor c;
    npy_dtype dtype = NPY_F4;
    struct stat st;

    if (err && errlen)
        err[0] = '\0';
    if (out)
        memset(out, 0, sizeof *out);
    if (path == NULL || out == NULL) {
        set_err(err, errlen, path, "invalid argument (NULL %s)", path ? "output" : "path");
        return -1;
    }

    fp = fopen(path, "rb");
    if (fp == NULL) {
        set_err(err, errlen, path, "cannot open: %s", strerror(errno));
        return -1;
    }
    if (fstat(fileno(fp), &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            set_err(err, errlen, path, "is a directory, not a .npy file");
            goto fail;
        }
        if (S_ISREG(st.st_mode) && st.st_size >= 0) {
            size_known = 1;
            fsize = (uintmax_t)st.st_size;
        }
    }

    /* magic + version */
    nread = fread(pre, 1, 8, fp);
    if (nread < 8 && ferror(fp)) {
        set_err(err, errlen, path, "read error: %s", strerror(errno));
        goto fail;
    }
    if (nread == 0) {
        set_err(err, errlen, path, "empty file (0 bytes), not a .npy file");
        goto fail;
    }
    if (memcmp(pre, NPY_MAGIC, nread < NPY_MAGIC_LEN ? nread : NPY_MAGIC_LEN) != 0) {
        set_err(err, errlen, path, "bad magic: not a .npy file");
        goto fail;
    }
    if (nread < 8) {
        set_err(err, errlen, path, "truncated header: file is only %zu bytes long", nread);
        goto fail;
    }
    major = pre[6];
    minor = pre[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0) {
        set_err(err, errlen, path,
                "unsupported .npy format version %u.%u (expected 1.0, 2.0 or 3.0)",
                major, minor);
        goto fail;
    }

    /* header length */
    prelen = major == 1 ? 10 : 12;
    nread = fread(pre + 8, 1, prelen - 8, fp);
    if (nread < prelen - 8) {
        if (ferror(fp))
            set_err(err, errlen, path, "read error: %s", strerror(errno));
        else
            set_err(err, errlen, path,
                    "truncated header: file ends inside the header length field");
        goto fail;
    }
    if (major == 1)
        hlen = (size_t)pre[8] | ((size_t)pre[9] << 8);
    else
        hlen = (size_t)((uint32_t)pre[8] | ((uint32_t)pre[9] << 8) |
                        ((uint32_t)pre[10] << 16) | ((uint32_t)pre[11] << 24));
    if (size_known && (uintmax_t)hlen > fsize - prelen) {
        set_err(err, errlen, path,
                "header length %zu points past end of file (only %ju bytes follow "
                "the %zu-byte preamble)", hlen, fsize - prelen, prelen);
        goto fail;
    }
    if (hlen > NPY_HEADER_LIMIT) {
        set_err(err, errlen, path, "header length %zu exceeds the limit of %zu bytes",
                hlen, NPY_HEADER_LIMIT);
        goto fail;
    }

    /* header */
    hdr = malloc(hlen ? hlen : 1);
    if (hdr == NULL) {
        set_err(err, errlen, path, "out of memory reading a %zu-byte header", hlen);
        goto fail;
    }
    nread = read_full(fp, hdr, hlen);
    if (nread < hlen) {
        if (ferror(fp))
            set_err(err, errlen, path, "read error: %s", strerror(errno));
        else
            set_err(err, errlen, path,
                    "header length %zu points past end of file (only %zu bytes follow "
                    "the %zu-byte preamble)", hlen, nread, prelen);
        goto fail;
    }
    c.p = hdr;
    c.end = hdr + hlen;
    c.msg[0] = '\0';
    if (parse_header(&c, &h) != 0) {
        set_err(err, errlen, path, "%s", c.msg);
        goto fail;
    }
    free(hdr);
    hdr = NULL;

    if (descr_to_dtype(h.descr, &dtype) != 0 || h.descr_truncated) {
        char safe[40];
        sanitize(safe, sizeof safe, h.descr, h.descr_truncated);
        set_err(err, errlen, path, "unsupported dtype '%s' (expected " NPY_EXPECTED_DTYPES ")",
                safe);
        goto fail;
    }
    if (h.fortran) {
        set_err(err, errlen, path,
                "fortran_order True is not supported (only C-order arrays)");
        goto fail;
    }
    itemsize = npy_itemsize(dtype);
    if (shape_sizes(h.ndim, h.shape, itemsize, &count, &bytes) != 0) {
        char s[200];
        shape_str(s, sizeof s, h.ndim, h.shape);
        set_err(err, errlen, path,
                "shape %s is too large: element count times item size (%zu) overflows size_t",
                s, itemsize);
        goto fail;
    }

    /* body: check against the file size before allocating anything big */
    if (size_known) {
        after_header = fsize - prelen - hlen;
        if (after_header < (uintmax_t)bytes) {
            set_err(err, errlen, path, "truncated: expected %zu bytes of data, found %ju",
                    bytes, after_header);
            goto fail;
        }
        if (after_header > (uintmax_t)bytes) {
            set_err(err, errlen, path,
                    "trailing garbage: expected %zu bytes of data, found %ju", bytes,
                    after_header);
            goto fail;
        }
    }
    if (map != NULL && size_known && !host_is_big_endian() && fsize <= (uintmax_t)SIZE_MAX &&
        (prelen + hlen) % itemsize == 0) {
        /* read-only mapping of the whole file; the data start after the header */
        void *base = mmap(NULL, (size_t)fsize, PROT_READ, MAP_PRIVATE, fileno(fp), 0);
        if (base == MAP_FAILED) {
            set_err(err, errlen, path, "cannot map %ju bytes: %s", fsize, strerror(errno));
            goto fail;
        }
        fclose(fp);
        out->dtype = dtype;
        out->ndim = h.ndim;
        memcpy(out->shape, h.shape, sizeof out->shape);
        out->count = count;
        out->data = (unsigned char *)base + prelen + hlen;
        map->map = base;
        map->map_bytes = (size_t)fsize;
        return 0;
    }
    data = malloc(bytes ? bytes : 1);
    if (data == NULL) {
        set_err(err, errlen, path, "out of memory allocating %zu bytes of data", bytes);
        goto fail;
    }
    nread = read_full(fp, data, bytes);
    if (nread < bytes) {
        if (ferror(fp))
            set_err(err, errlen, path, "read error: %s", strerror(errno));
        else
            set_err(err, errlen, path, "truncated: expected %zu bytes of data, found %zu",
                    bytes, nread);
        goto fail;
    }
    if (fgetc(fp) != EOF) {
        set_err(err, errlen, path,
                "trailing garbage: expected %zu bytes of data, found more", bytes);
        goto fail;
    }
    if (ferror(fp)) {
        set_err(err, errlen, path, "read error: %s", strerror(errno));
        goto fail;
    }
    fclose(fp);
    fp = NULL;

    if (host_is_big_endian())
        swap_items(data, count, itemsize);

    out->dtype = dtype;
    out->ndim = h.ndim;
    memcpy(out->shape, h.shape, sizeof out->shape);
    out->count = count;
    out->data = data;
    return 0;

fail:
    free(hdr);
    free(data);
    if (fp)
        fclose(fp);
    memset(out, 0, sizeof *out);
    if (err && errlen && err[0] == '\0')
        set_err(err, errlen, path, "unknown error");
    return -1;
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
