/* Reading a caller's option struct (include/clembed.h, "Option structs"):
 * every call that takes one reads it through ce_struct_read, over a copy that
 * holds the defaults, so that a caller built against an earlier version (or a
 * binding declared from an earlier header) gives the fields it knows and the
 * rest keep their defaults, and a struct that is not one (no struct_size: a
 * struct of clembed 0.3 or earlier, a zeroed one) is refused before anything
 * past its first word is read. Knows the public structs' layouts, no
 * operation: the defaults come from the caller of ce_struct_read. */
#ifndef CLEMBED_OPTIONS_H
#define CLEMBED_OPTIONS_H

#include "runtime.h"

typedef struct ce_struct_layout ce_struct_layout;

/* The layout of each option struct (options.c). */
extern const ce_struct_layout ce_sinusoid_layout, ce_norm_layout, ce_embed_options_layout, ce_embed_grads_layout,
    ce_backward_options_layout, ce_optimizer_layout, ce_rope_layout, ce_bag_options_layout, ce_bag_feature_layout;

/* The layout of a public clembed_struct_type, NULL for an unknown one. */
const ce_struct_layout *ce_struct_layout_of(clembed_struct_type type);

/* Copies the caller's struct `in` (of layout L) over *out, which holds the
 * defaults: the caller's bytes as far as its struct_size goes, a struct
 * inside it read the same way (by its own struct_size), the rest left as
 * *out has it; then every struct_size in *out is this version's sizeof. in
 * NULL leaves *out alone. A struct_size that is not valid is
 * CLEMBED_ERR_INVALID_ARGUMENT naming `argument` (index: the element of an
 * array, -1 if none), with the operation `op` (NULL: the context's running
 * one); ctx NULL records it for this thread. Nothing of `in` past its
 * struct_size is read. */
clembed_status ce_struct_read(clembed_context *ctx, const char *op, const char *argument, int64_t index,
                              const ce_struct_layout *L, const void *in, void *out);

/* An array of n structs of layout L: *stride receives the first element's
 * struct_size (checked as ce_struct_read checks it), which every element must
 * carry (else CLEMBED_ERR_INVALID_ARGUMENT naming argument and the element).
 * Element f is then (const char *)in + f * *stride, read with ce_struct_read.
 * n 0: *stride 0. */
clembed_status ce_struct_stride(clembed_context *ctx, const char *op, const char *argument, const ce_struct_layout *L,
                                const void *in, size_t n, size_t *stride);

/* ce_struct_stride, then every element read over out[0 .. n) (each holding the
 * defaults; out's stride is this version's sizeof). */
clembed_status ce_struct_read_array(clembed_context *ctx, const char *op, const char *argument,
                                    const ce_struct_layout *L, const void *in, size_t n, void *out);

#endif
