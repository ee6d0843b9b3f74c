/* bag.h: what the bag files share, private to them (src/ops/):
 *   bag.c          the features read and checked, their launches planned and
 *                  described to the kernels, the options every bag program has
 *   bag_forward.c  clembed_embedding_bag, clembed_embedding_bags
 *   bag_train.c    clembed_bag_backward (grad_table, grad_weights) and the bag
 *                  optimizer steps: contributions to backward.c's segment fold
 *   bag_renorm.c   clembed_renorm
 * The kernels are cl/ops/bag.cl's. */
#ifndef CLEMBED_OPS_BAG_H
#define CLEMBED_OPS_BAG_H

#include "ops.h"

/* ------------------------------------------------------------- features */

/* A feature's fields (cl/ops/bag.cl's ce_bag_load reads them): buffers by
 * their index among the launch's (BAG_NONE: absent), offsets in elements. A
 * table split over several buffers (include/clembed.h's split matrices) gives
 * each piece the launch takes as one of its buffers: TAB_NP pieces, listed
 * after the features' rows from element TAB_P on as triples (buffer index,
 * first row, element of that row), holding the rows [TAB_LO, TAB_HI). */
#define BAG_FIELDS(X)                                                                                      \
  X(TAB) X(TAB_OFF) X(TAB_LD) X(TAB_ROWS) X(COLS) X(DTYPE) X(IDS) X(IDS_OFF) X(IDS_N) X(IDS64) X(OFFS)     \
  X(OFFS_OFF) X(OFFS64) X(W) X(W_OFF) X(W_LD) X(MR) X(MR_OFF) X(MR64) X(MODE) X(POLICY) X(PADDING) X(COL0) \
  X(ERR) X(REPORT) X(CHUNK0) X(E0) X(CNT0) X(MRT0) X(TAB_NP) X(TAB_P) X(TAB_LO) X(TAB_HI) X(RM) X(RM_OFF)  \
  X(RM64) X(RM_ROWS)
#define BAG_FIELD_ENUM(name) BF_##name,
enum { BAG_FIELDS(BAG_FIELD_ENUM) BF_COUNT };
#undef BAG_FIELD_ENUM
#define BAG_NONE 0xFFu

/* One feature, checked. */
typedef struct bag_feat {
  const clembed_matrix *table; /* the table (for the backward without one: grad_table, rows and cols only) */
  size_t t_ld;
  const clembed_ids *ids, *offsets;
  clembed_bag_options opt;
  cl_long padding;
  size_t w_ld;
  size_t col0;   /* its block of out or grad_out */
  long index;    /* features[index] of a batched call, -1 otherwise */
  cl_uint slot;  /* its error slot, CE_NO_SLOT */
  size_t lcap;   /* the forward: the most ids a bag may have (the device's loop limit; 0: no cap) */
  ce_pieces tp;  /* the table's pieces (bag_check_feature; ce_pieces_release on the checked feature, not a copy) */
  size_t pg0, pgn; /* the pieces a launch reads: [pg0, pg0 + pgn) */
  /* a table in more buffers than a launch takes (bag_forward.c's gather_rows):
   * the feature as given, and the gathered rows and positions it is pooled
   * through */
  struct {
    int on;
    const clembed_matrix *table;
    const clembed_ids *ids;
    clembed_index_policy policy;
    cl_long padding;
    clembed_ids *max_rows; /* the caller's, written from pos_rows */
    clembed_matrix rows;   /* ids->count rows of the table's dtype */
    clembed_ids idx, pos_rows;
  } g;
} bag_feat;

/* Releases what the features hold: their tables' pieces, a gathered feature's
 * rows and positions (bag_forward.c's gather_rows). */
void bag_release_features(bag_feat *F, size_t n);
/* The one feature of the single-table calls: opt read as far as its
 * struct_size goes (NULL: the defaults). */
clembed_status bag_one_feature(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                               const clembed_ids *offsets, const clembed_bag_options *opt, bag_feat *F);
/* The features of a batched call (read with the stride of features[0]'s
 * struct_size, each as far as its struct_size goes), unchecked beyond their
 * pointers. */
clembed_status bag_batch_features(clembed_context *ctx, const char *what, const clembed_bag_feature *features,
                                  size_t n, bag_feat **out);

/* ------------------------------------------------------------- launches */

/* A launch: features [first, first + count) and their buffers. */
typedef struct bag_launch {
  size_t first, count;
  cl_mem bufs[CLEMBED_BAGS_BUFFERS];
  int nbufs;
  int dtype;              /* its first feature's table dtype (plans by_dtype: every feature's), TABLE_DT */
  size_t width;           /* a row-wise dtype's table cols (every feature's: a launch reads one width), CE_RW_COLS */
  unsigned modes;         /* and MODES (bag.cl: 1 SUM or MEAN, 2 weighted SUM, 4 MAX) */
  int max;                /* a MAX feature */
  size_t chunks;          /* the GPU shape's x range */
  size_t entries;         /* ids (the backward's entries) */
  int reports;            /* a feature reports errors */
  int split;              /* a feature reads a table in several buffers (BAG_SPLIT) */
  int remap;              /* a feature's ids go through a remap (a pruned table: BAG_REMAP) */
} bag_launch;

/* The buffers a feature reads or writes (its table's pieces, then up to 5). */
#define BAG_FEATURE_BUFFERS (CLEMBED_BAGS_BUFFERS + 5)
int bag_feature_buffers(const bag_feat *F, int pieces, cl_mem *m);

/* The features in order, in groups of at most CLEMBED_BAGS_BUFFERS buffers
 * (by_dtype: and of one table dtype; pieces: as bag.c's feature_pieces). A
 * feature whose buffers alone are more is CLEMBED_ERR_UNSUPPORTED (a table in
 * too many buffers for the kernels that read its rows). */
clembed_status bag_plan(clembed_context *ctx, const char *what, const bag_feat *F, size_t n, size_t vec,
                        int by_dtype, int pieces, bag_launch **out, size_t *nout);

/* The sizes the backward's temporaries need for these features. */
typedef struct bag_sizes {
  size_t entries, counts, mrt; /* ids; MEAN's bag counts; MAX's gathered max_rows */
} bag_sizes;

/* The descriptor of every feature (the launches' buffer indices, the GPU
 * shape's chunks, and the backward's entry, count and max_rows starts, from
 * `from` on: the sizes of the features before these, or NULL for none), and
 * the sizes they add up to (from included). */
clembed_status bag_describe(clembed_context *ctx, const bag_feat *F, size_t n, const bag_launch *L, size_t nl,
                            size_t vec, size_t bags, int pieces, const bag_sizes *from, cl_mem *desc, bag_sizes *sz);

/* The arguments every bag kernel starts with (cl/ops/bag.cl's CE_BAG_ARGS). */
typedef struct bag_args {
  cl_mem desc;
  cl_uint f0, nf;
  cl_ulong bags;
  cl_mem b[CLEMBED_BAGS_BUFFERS];
} bag_args;
#define BAG_COMMON(a)                                                                                         \
  CE_ARG((a).desc), CE_ARG((a).f0), CE_ARG((a).nf), CE_ARG((a).bags), CE_ARG(ctx->errbuf), CE_ARG((a).b[0]),  \
      CE_ARG((a).b[1]), CE_ARG((a).b[2]), CE_ARG((a).b[3]), CE_ARG((a).b[4]), CE_ARG((a).b[5]),               \
      CE_ARG((a).b[6]), CE_ARG((a).b[7]), CE_ARG((a).b[8]), CE_ARG((a).b[9]), CE_ARG((a).b[10]),              \
      CE_ARG((a).b[11]), CE_ARG((a).b[12]), CE_ARG((a).b[13]), CE_ARG((a).b[14]), CE_ARG((a).b[15])

/* Launch L's arguments: the descriptor, its features and buffers. */
bag_args bag_launch_args(cl_mem desc, const bag_launch *L, size_t bags);

/* A launch's program options: `base`, the table dtype its features read (one
 * per launch: bag.cl's pooling is written for it alone) and the poolings it
 * uses, and whether a table lies in several of its buffers. */
void bag_launch_options(char *buf, size_t cap, const char *base, const bag_launch *L);

/* The options every bag program has: the fields, the vector width, exact
 * division where the device can. */
char *bag_base_options(clembed_context *ctx, const char *extra);

/* Devices without 64-bit atomics: the values of the launch's errors. */
clembed_status bag_record_errors(ce_chain *ch, const char *opts, const bag_args *a, const bag_launch *L);

/* ------------------------------------------------------------- checks */

/* The call a feature is checked for (bag_check_feature's role). */
enum { BAG_FORWARD, BAG_BACKWARD, BAG_STEP };

/* A feature's arguments against bags (its table already in F->table). */
clembed_status bag_check_feature(clembed_context *ctx, const char *what, bag_feat *F, size_t bags, int role);

/* The features' column blocks: col0 of each, and their total in *cols. */
clembed_status bag_place_columns(clembed_context *ctx, const char *what, bag_feat *F, size_t n, size_t *cols);

/* An error slot for a feature that can find a bad id or offset. */
clembed_status bag_feature_slot(clembed_context *ctx, const char *what, bag_feat *F);

/* A call's features are taken at most CE_SLOTS at a time: a part's error
 * slots are all taken (ce_slot_room: none read aside before its kernels ran)
 * and its launches enqueued before the next part's slots are taken. The part
 * that starts at feature c0 of n: its count in *nc (a call of no features is
 * one part of none), its features' slots taken. */
clembed_status bag_part(clembed_context *ctx, const char *what, bag_feat *F, size_t n, size_t c0, size_t *nc);

#endif
