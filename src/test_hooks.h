/* Test hooks: exported for clembed's own tests, not part of the public API
 * (no stability promise; programs outside this repository must not use them). */
#ifndef CLEMBED_TEST_HOOKS_H
#define CLEMBED_TEST_HOOKS_H

#include "clembed.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Replaces the source of kernel family `family` (its cl/ops/ file's name:
 * "forward", "positional", "sort", "backward", "init", "util") for this
 * context's next builds with `source` (cl/lib/ still comes first)
 * (kept by pointer: it must outlive its use); NULL restores the embedded one.
 * Lets a test inject a build failure. */
CLEMBED_API clembed_status clembed__test_override_source(clembed_context *ctx, const char *family,
                                                         const char *source);

/* 1 if the context uses the CPU kernel shapes, 0 for the GPU shapes, -1 for
 * NULL: lets a test check that CLEMBED_TUNING took effect. */
CLEMBED_API int clembed__test_cpu_shapes(const clembed_context *ctx);

/* The tokens a work-item of clembed_lookup's kernel takes for a lookup of n
 * ids in `table` on this context (0: the column shapes; a table of no columns
 * always takes the row shape, 1), -1 for NULL: lets a test check that
 * embed_rows and embed_rows_bytes took effect. */
CLEMBED_API int clembed__test_lookup_rows(const clembed_context *ctx, const clembed_matrix *table, size_t n);

/* Calls fn(stage) at each stage of every clembed_checkpoint_save of the
 * process: "opened" (the temporary file created), "data" (the tensors
 * written), "header" (the header written), "synced" (the temporary file
 * synced and closed), "renamed" (renamed over the path, its folder not yet
 * synced), "done". NULL removes it. Lets a test kill a save at each stage. */
CLEMBED_API void clembed__test_checkpoint_hook(void (*fn)(const char *stage));

#ifdef __cplusplus
}
#endif

#endif
