/* The tuning database (tuning/devices.conf, built into the library; the
 * user's entries from a file, JSON or the built-in file's format;
 * CLEMBED_TUNE): every kernel-shape number and device fact of ce_tuning,
 * resolved for a device when its context is made. The formats are
 * docs/tuning.md's; the kernels get the numbers as -D options under the same
 * names. */
#include "json.h"
#include "runtime.h"

#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* the embedded sources (cmake/embed_cl.cmake): the database is "devices" */
extern const char *const ce_cl_names[];
extern const unsigned char *const ce_cl_data[];
extern const size_t ce_cl_sizes[];
extern const size_t ce_cl_count;

/* ------------------------------------------------------------- fields */

static void set_int(int *f, unsigned long long v) { *f = (int)v; }
static void set_unsigned(unsigned *f, unsigned long long v) { *f = (unsigned)v; }
static void set_size(size_t *f, unsigned long long v) { *f = (size_t)v; }
#define CE_SET_FIELD(f, v) _Generic((f), int *: set_int, unsigned *: set_unsigned, size_t *: set_size)((f), (v))

static const char *const field_names[] = {
#define CE_FIELD_NAME(name) #name,
    CE_TUNING_FIELDS(CE_FIELD_NAME)
#undef CE_FIELD_NAME
};
#define FIELD_COUNT (sizeof field_names / sizeof field_names[0])

int ce_tuning_field(const char *name) {
  for (size_t i = 0; i < FIELD_COUNT; i++)
    if (!strcmp(field_names[i], name)) return (int)i;
  return -1;
}

const char *ce_tuning_field_name(int i) { return i >= 0 && (size_t)i < FIELD_COUNT ? field_names[i] : NULL; }

size_t ce_tuning_field_count(void) { return FIELD_COUNT; }

static void set_field(ce_tuning *t, int i, unsigned long long v) {
  int k = 0;
#define CE_SET_ONE(name)                 \
  if (k++ == i) {                        \
    CE_SET_FIELD(&t->name, v);           \
    return;                              \
  }
  CE_TUNING_FIELDS(CE_SET_ONE)
#undef CE_SET_ONE
}

unsigned long long ce_tuning_get(const ce_tuning *t, int i) {
  int k = 0;
#define CE_GET_ONE(name) \
  if (k++ == i) return (unsigned long long)t->name;
  CE_TUNING_FIELDS(CE_GET_ONE)
#undef CE_GET_ONE
  return 0;
}

/* A count from 0 to 2^40, the whole of s. */
static int parse_count(const char *s, unsigned long long *v) {
  char *end = NULL;
  if (!isdigit((unsigned char)*s)) return 0;
  errno = 0;
  *v = strtoull(s, &end, 10);
  return !errno && !*end && *v <= (1ull << 40);
}

/* ------------------------------------------------------------- the values a parameter takes */

#define ANY (1ull << 40)
#define INT_FIELD 2147483647ull /* an int or unsigned field's largest */
/* lo .. hi, or one of 4, 8 and 16 (vec: a kernel's vector width); outside
 * them a kernel fails to build, loops forever, overruns its private memory or
 * a host division is by zero. docs/tuning.md gives each with its meaning. */
typedef struct limit {
  const char *name;
  unsigned long long lo, hi;
  int vec;
} limit;
static const limit limits[] = {
    {"cpu_shapes", 0, 1, 0}, {"group_target", 1, 256, 0}, {"row_items_max", 0, ANY, 0},
    {"row_groups_per_unit", 0, ANY, 0}, {"embed_local", 0, ANY, 0}, {"bag_local", 0, ANY, 0},
    {"embed_rows", 0, 1024, 0}, {"embed_rows_bytes", 0, ANY, 0}, {"embed_strided_rows", 0, 1024, 0}, {"embed_vec", 4, 16, 1},
    {"embed_stream", 0, 1, 0}, {"stream_cache_bytes", 0, ANY, 0}, {"embed_next", 0, 1, 0},
    {"embed_strided_prefetch_bytes", 0, ANY, 0}, {"embed_strided_ahead", 0, 65536, 0},
    {"positional_rowwise", 0, 1, 0}, {"positional_vec", 4, 16, 1}, {"rope_rowwise", 0, 1, 0},
    {"rope_pairs", 1, 64, 0}, {"sort_chunk", 1, ANY, 0}, {"sort_max_chunks", 1, ANY, 0},
    {"sort_radix_bits", 1, 16, 0}, {"sort_local", 0, ANY, 0}, {"fold_vec", 4, 16, 1}, {"fold_tile", 1, 16, 0},
    {"fold_block_columns", 1, ANY, 0}, {"fold_split", 0, ANY, 0}, {"fold_group", 1, 64, 0},
    {"fold_ahead_bytes", 0, ANY, 0}, {"fold_ahead", 0, 65536, 0}, {"step_ahead", 0, 1, 0},
    {"fold_slices_per_unit", 0, ANY, 0}, {"fold_min_slices", 0, 1ull << 24, 0}, {"row_items", 1, 65536, 0},
    {"sinusoid_table_max_elements", 0, ANY, 0}, {"sinusoid_table_min_rows", 1, ANY, 0},
    {"sinusoid_table_inline_rows", 0, ANY, 0}, {"huge_page_bytes", 1, ANY, 0}, {"norm_rows", 0, 65536, 0},
    {"norm_strided_rows", 0, 1024, 0}, {"norm_bwd_strided_rows", 0, 1024, 0}, {"norm_group_rows", 0, 4096, 0}, {"norm_next", 0, 1, 0},
    {"norm_scratch_cols", 0, 65536, 0}, {"norm_side_cols", 0, INT_FIELD, 0}, {"norm_sums", 0, 1, 0},
    {"norm_params_cols", 4, 65536, 0}, {"piece_args", 1, 8, 0}, {"bag_vec", 4, 16, 1}, {"bag_tile", 1, 16, 0},
    {"bag_rows", 1, 16, 0}, {"bag_rows_features", 1, 16, 0}, {"bag_ahead", 0, 65536, 0}, {"bag_plain", 0, 1, 0},
    {"bag_cols", 0, 1, 0}, {"bag_by_feature", 0, 1, 0}, {"init_wide", 0, 1, 0}, {"prefetch", 0, 1, 0},
    {"host_pages", 0, 1, 0}, {"zero_temporaries", 0, 1, 0}, {"loop_limit", 0, ANY, 0},
};
#define LIMIT_COUNT (sizeof limits / sizeof limits[0])

/* Parameter f's limit (NULL: none, a fault of this file, which value_ok reports: ce_tuning_resolve checks
 * every parameter of the built-in tuning). */
static const limit *limit_of(int f) {
  const char *name = ce_tuning_field_name(f);
  for (size_t i = 0; name && i < LIMIT_COUNT; i++)
    if (!strcmp(limits[i].name, name)) return &limits[i];
  return NULL;
}

/* 1 where v is a value of parameter f, else 0 with "NAME = V: it must be ..." in why. */
static int value_ok(int f, unsigned long long v, char *why, size_t cap) {
  const limit *l = limit_of(f);
  if (l && (l->vec ? v == 4 || v == 8 || v == 16 : v >= l->lo && v <= l->hi)) return 1;
  if (!l)
    snprintf(why, cap, "%s has no limits in src/runtime/tuning.c", ce_tuning_field_name(f));
  else if (l->vec)
    snprintf(why, cap, "%s = %llu: it must be 4, 8 or 16 (a vector's columns)", l->name, v);
  else if (l->lo == 0 && l->hi == 1)
    snprintf(why, cap, "%s = %llu: it must be 0 or 1", l->name, v);
  else if (l->hi == ANY)
    snprintf(why, cap, "%s = %llu: it must be at least %llu", l->name, v, l->lo);
  else
    snprintf(why, cap, "%s = %llu: it must be from %llu to %llu", l->name, v, l->lo, l->hi);
  return 0;
}

/* 1 where the parameters of t go together, else 0 with why. */
static int together_ok(const ce_tuning *t, char *why, size_t cap) {
  long host_page = sysconf(_SC_PAGESIZE);
  if (t->embed_rows && !t->embed_strided_rows) {
    snprintf(why, cap, "embed_strided_rows = 0 with embed_rows = %u: the row shapes take at least one sequence a "
             "work-item", t->embed_rows);
    return 0;
  }
  if (t->norm_params_cols % t->embed_vec) {
    snprintf(why, cap, "norm_params_cols = %u is not a multiple of embed_vec = %u", t->norm_params_cols, t->embed_vec);
    return 0;
  }
  if (((unsigned long long)t->sort_max_chunks << t->sort_radix_bits) > (1ull << 32) - 256) {
    snprintf(why, cap, "sort_max_chunks = %zu and sort_radix_bits = %u: the scan's %llu counters pass 2^32 - 256",
             t->sort_max_chunks, t->sort_radix_bits, (unsigned long long)t->sort_max_chunks << t->sort_radix_bits);
    return 0;
  }
  if (host_page > 0 && t->huge_page_bytes % (size_t)host_page) {
    snprintf(why, cap, "huge_page_bytes = %zu is not a multiple of the host's page (%ld bytes)", t->huge_page_bytes,
             host_page);
    return 0;
  }
  return 1;
}

/* 1 where every value of t is one its parameter takes and the rules hold, else 0 with why. */
static int tuning_ok(const ce_tuning *t, char *why, size_t cap) {
  for (size_t f = 0; f < FIELD_COUNT; f++)
    if (!value_ok((int)f, ce_tuning_get(t, (int)f), why, cap)) return 0;
  return together_ok(t, why, cap);
}

/* ------------------------------------------------------------- entries */

enum { MATCH_PLATFORM, MATCH_DEVICE, MATCH_VENDOR, MATCH_DRIVER, MATCH_TYPE, MATCH_KINDS };
static const char *const match_keys[MATCH_KINDS] = {"platform", "device", "vendor", "driver", "type"};

typedef struct setting {
  int field;
  unsigned long long value;
} setting;

typedef struct entry {
  char name[256];
  int is_default;            /* [default NAME], else [device NAME] */
  char base[128];            /* base = NAME ("" none) */
  int tuned;                 /* tuned = 1: written by clembed tune (left out under CLEMBED_TUNING) */
  char match[MATCH_KINDS][256];
  setting *set;
  size_t nset;
} entry;

typedef struct database {
  entry *e;
  size_t n;
} database;

static void db_free(database *db) {
  for (size_t i = 0; db && i < db->n; i++) free(db->e[i].set);
  if (db) free(db->e);
  if (db) db->e = NULL, db->n = 0;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
  return s;
}

/* Parses `text` (len bytes) into *db; `origin` names it in messages. 0, or -1
 * with the message in err. */
static int db_parse(const char *text, size_t len, const char *origin, database *db, char *err, size_t errlen) {
  size_t line_no = 0;
  int heading_fault = 0; /* a fault in a heading is in no entry */
  memset(db, 0, sizeof *db);
  for (size_t at = 0; at < len;) {
    size_t end = at;
    while (end < len && text[end] != '\n') end++;
    char line[1024];
    size_t n = end - at;
    line_no++;
    if (n >= sizeof line) {
      snprintf(err, errlen, "%s:%zu: a line longer than %zu characters", origin, line_no, sizeof line - 1);
      goto fail;
    }
    memcpy(line, text + at, n);
    line[n] = 0;
    at = end + 1;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *s = trim(line);
    if (!*s) continue;
    if (*s == '[') {
      char kind[16], name[256];
      size_t sl = strlen(s);
      if (s[sl - 1] != ']' || sscanf(s, "[%15s %255[^]]]", kind, name) != 2 ||
          (strcmp(kind, "default") && strcmp(kind, "device"))) {
        snprintf(err, errlen, "%s:%zu: '%.200s' is not an entry's heading ([default NAME] or [device NAME])", origin,
                 line_no, s);
        heading_fault = 1;
        goto fail;
      }
      entry *ne = realloc(db->e, (db->n + 1) * sizeof *ne);
      if (!ne) {
        snprintf(err, errlen, "%s: out of host memory", origin);
        goto fail;
      }
      db->e = ne;
      entry *e = &db->e[db->n++];
      memset(e, 0, sizeof *e);
      snprintf(e->name, sizeof e->name, "%s", trim(name));
      e->is_default = !strcmp(kind, "default");
      continue;
    }
    char *eq = strchr(s, '=');
    if (!eq) {
      snprintf(err, errlen, "%s:%zu: '%.200s' is not a 'name = value' line", origin, line_no, s);
      goto fail;
    }
    *eq = 0;
    char *key = trim(s), *value = trim(eq + 1);
    if (!db->n) {
      snprintf(err, errlen, "%s:%zu: '%.100s' before any entry's heading", origin, line_no, key);
      goto fail;
    }
    entry *e = &db->e[db->n - 1];
    if (!strncmp(key, "match.", 6)) {
      int k = -1;
      for (int m = 0; m < MATCH_KINDS; m++)
        if (!strcmp(key + 6, match_keys[m])) k = m;
      if (k < 0 || !*value || strlen(value) >= sizeof e->match[0]) {
        snprintf(err, errlen, "%s:%zu: '%.100s = %.100s': match.platform, .device, .vendor, .driver or .type with a "
                 "value", origin, line_no, key, value);
        goto fail;
      }
      if (k == MATCH_TYPE && strcmp(value, "cpu") && strcmp(value, "gpu") && strcmp(value, "accelerator")) {
        snprintf(err, errlen, "%s:%zu: match.type is '%.100s'; it must be cpu, gpu or accelerator", origin, line_no,
                 value);
        goto fail;
      }
      snprintf(e->match[k], sizeof e->match[k], "%s", value);
      continue;
    }
    if (!strcmp(key, "base")) {
      snprintf(e->base, sizeof e->base, "%s", value);
      continue;
    }
    if (!strcmp(key, "tuned")) {
      if (e->is_default) {
        snprintf(err, errlen, "%s:%zu: tuned in a [default ...] entry; it marks a device's entry", origin, line_no);
        goto fail;
      }
      if (strcmp(value, "0") && strcmp(value, "1")) {
        snprintf(err, errlen, "%s:%zu: tuned = '%.100s'; it must be 0 or 1", origin, line_no, value);
        goto fail;
      }
      e->tuned = value[0] == '1';
      continue;
    }
    int f = ce_tuning_field(key);
    unsigned long long v = 0;
    if (f < 0) {
      snprintf(err, errlen, "%s:%zu: '%.100s' is not a tuning parameter (docs/tuning.md lists them)", origin, line_no,
               key);
      goto fail;
    }
    if (!parse_count(value, &v)) {
      snprintf(err, errlen, "%s:%zu: %s = '%.100s' is not a count from 0 to 2^40", origin, line_no, key, value);
      goto fail;
    }
    char why[200];
    if (!value_ok(f, v, why, sizeof why)) {
      snprintf(err, errlen, "%s:%zu: %s", origin, line_no, why);
      goto fail;
    }
    setting *ns = realloc(e->set, (e->nset + 1) * sizeof *ns);
    if (!ns) {
      snprintf(err, errlen, "%s: out of host memory", origin);
      goto fail;
    }
    e->set = ns;
    e->set[e->nset++] = (setting){f, v};
  }
  return 0;
fail:
  /* the entry the fault is in, where it is in one */
  if (db->n && !heading_fault) {
    size_t used = strlen(err);
    if (used < errlen)
      snprintf(err + used, errlen - used, " (in [%s %.100s])", db->e[db->n - 1].is_default ? "default" : "device",
               db->e[db->n - 1].name);
  }
  db_free(db);
  return -1;
}

/* The first key that an object holds twice, or NULL. */
static const char *repeated_key(const ce_json *obj) {
  for (size_t i = 0; obj && obj->type == CE_JOBJECT && i < obj->n; i++)
    for (size_t j = 0; j < i; j++)
      if (!strcmp(obj->keys[i], obj->keys[j])) return obj->keys[i];
  return NULL;
}

/* The user's file in JSON (docs/tuning.md):
 *   {"clembed_tuning": 1, "entries": [{"device": NAME, "comment": TEXT,
 *     "match": {"platform": .., "device": .., "vendor": .., "driver": .., "type": ..},
 *     "tuned": 1, "parameters": {NAME: COUNT, ...}}, ...]}
 * ("clembed_tuning", "comment", "match"'s keys, "tuned" and "parameters" may be
 * left out) into *db. 0, or -1 with the message in err, naming the file, the
 * line and the entry. */
static int db_parse_json(const char *text, size_t len, const char *origin, database *db, char *err, size_t errlen) {
  ce_json root;
  char jerr[300], who[200] = "";
  memset(db, 0, sizeof *db);
  if (ce_json_parse(text, len, &root, jerr, sizeof jerr)) {
    snprintf(err, errlen, "%.400s: not JSON: %s", origin, jerr);
    return -1;
  }
  const ce_json *ents = ce_json_get(&root, "entries"), *ver = ce_json_get(&root, "clembed_tuning");
  const ce_json *at = &root; /* the value a message points at */
  if (root.type != CE_JOBJECT) {
    snprintf(err, errlen, "%.400s:%d: the file is not a JSON object ({\"entries\": [...]})", origin, root.line);
    goto fail;
  }
  if (repeated_key(&root)) {
    snprintf(err, errlen, "%.400s:%d: '%.100s' is given twice", origin, root.line, repeated_key(&root));
    goto fail;
  }
  for (size_t k = 0; k < root.n; k++)
    if (strcmp(root.keys[k], "entries") && strcmp(root.keys[k], "clembed_tuning")) {
      snprintf(err, errlen, "%.400s:%d: '%.100s' is not a key of a tuning file (clembed_tuning, entries)", origin,
               root.items[k].line, root.keys[k]);
      goto fail;
    }
  if (ver && (ver->type != CE_JNUMBER || strcmp(ver->text, "1"))) {
    snprintf(err, errlen, "%.400s:%d: clembed_tuning is not 1 (the version of the format this library reads)", origin,
             ver->line);
    goto fail;
  }
  if (!ents || ents->type != CE_JARRAY) {
    snprintf(err, errlen, "%.400s:%d: no \"entries\" array", origin, ents ? ents->line : root.line);
    goto fail;
  }
  if (ents->n && !(db->e = calloc(ents->n, sizeof *db->e))) {
    snprintf(err, errlen, "%.400s: out of host memory", origin);
    goto fail;
  }
  for (size_t i = 0; i < ents->n; i++) {
    const ce_json *E = &ents->items[i], *dev = ce_json_get(E, "device");
    at = E;
    snprintf(who, sizeof who, "entry %zu", i + 1);
    if (E->type != CE_JOBJECT) {
      snprintf(err, errlen, "%.400s:%d: %s is not an object", origin, at->line, who);
      goto fail;
    }
    entry *e = &db->e[db->n++];
    if (!dev || dev->type != CE_JSTRING || !dev->text[0] || strlen(dev->text) >= sizeof e->name) {
      snprintf(err, errlen, "%.400s:%d: %s has no \"device\": its name, a string of 1 to %zu bytes", origin, at->line, who,
               sizeof e->name - 1);
      goto fail;
    }
    snprintf(e->name, sizeof e->name, "%s", dev->text);
    snprintf(who, sizeof who, "entry %zu (device \"%.100s\")", i + 1, dev->text);
    /* a key given twice, in the entry or in its match or parameters */
    const ce_json *twice[3] = {E, ce_json_get(E, "match"), ce_json_get(E, "parameters")};
    for (int t = 0; t < 3; t++)
      if (repeated_key(twice[t])) {
        snprintf(err, errlen, "%.400s:%d: %s: '%.100s' is given twice", origin, twice[t]->line, who,
                 repeated_key(twice[t]));
        goto fail;
      }
    for (size_t k = 0; k < E->n; k++) {
      const char *key = E->keys[k];
      const ce_json *v = &E->items[k];
      at = v;
      if (!strcmp(key, "device")) continue;
      if (!strcmp(key, "comment")) {
        if (v->type != CE_JSTRING) {
          snprintf(err, errlen, "%.400s:%d: %s: \"comment\" is not a string", origin, at->line, who);
          goto fail;
        }
      } else if (!strcmp(key, "tuned")) {
        if (v->type != CE_JNUMBER || (strcmp(v->text, "0") && strcmp(v->text, "1"))) {
          snprintf(err, errlen, "%.400s:%d: %s: \"tuned\" must be 0 or 1", origin, at->line, who);
          goto fail;
        }
        e->tuned = v->text[0] == '1';
      } else if (!strcmp(key, "match")) {
        if (v->type != CE_JOBJECT) {
          snprintf(err, errlen, "%.400s:%d: %s: \"match\" is not an object", origin, at->line, who);
          goto fail;
        }
        for (size_t m = 0; m < v->n; m++) {
          int kind = -1;
          for (int t = 0; t < MATCH_KINDS; t++)
            if (!strcmp(v->keys[m], match_keys[t])) kind = t;
          const ce_json *mv = &v->items[m];
          at = mv;
          if (kind < 0 || mv->type != CE_JSTRING || !mv->text[0] || strlen(mv->text) >= sizeof e->match[0]) {
            snprintf(err, errlen, "%.400s:%d: %s: match \"%.100s\": platform, device, vendor, driver or type with a "
                     "string", origin, at->line, who, v->keys[m]);
            goto fail;
          }
          if (kind == MATCH_TYPE && strcmp(mv->text, "cpu") && strcmp(mv->text, "gpu") &&
              strcmp(mv->text, "accelerator")) {
            snprintf(err, errlen, "%.400s:%d: %s: match type is '%.100s'; it must be cpu, gpu or accelerator", origin,
                     at->line, who, mv->text);
            goto fail;
          }
          snprintf(e->match[kind], sizeof e->match[kind], "%s", mv->text);
        }
      } else if (!strcmp(key, "parameters")) {
        if (v->type != CE_JOBJECT) {
          snprintf(err, errlen, "%.400s:%d: %s: \"parameters\" is not an object", origin, at->line, who);
          goto fail;
        }
        if (v->n && !(e->set = calloc(v->n, sizeof *e->set))) {
          snprintf(err, errlen, "%.400s: out of host memory", origin);
          goto fail;
        }
        for (size_t m = 0; m < v->n; m++) {
          int f = ce_tuning_field(v->keys[m]);
          unsigned long long value = 0;
          at = &v->items[m];
          if (f < 0) {
            snprintf(err, errlen, "%.400s:%d: %s: '%.100s' is not a tuning parameter (docs/tuning.md lists them)", origin,
                     at->line, who, v->keys[m]);
            goto fail;
          }
          if (at->type != CE_JNUMBER || !parse_count(at->text, &value)) {
            snprintf(err, errlen, "%.400s:%d: %s: %s is not a count from 0 to 2^40", origin, at->line, who, v->keys[m]);
            goto fail;
          }
          char why[200];
          if (!value_ok(f, value, why, sizeof why)) {
            snprintf(err, errlen, "%.400s:%d: %s: %s", origin, at->line, who, why);
            goto fail;
          }
          e->set[e->nset++] = (setting){f, value};
        }
      } else {
        snprintf(err, errlen, "%.400s:%d: %s: '%.100s' is not a key of an entry (device, comment, match, tuned, "
                 "parameters)", origin, at->line, who, key);
        goto fail;
      }
    }
  }
  ce_json_free(&root);
  return 0;
fail:
  ce_json_free(&root);
  db_free(db);
  return -1;
}

/* ------------------------------------------------------------- matching */

static int contains(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (const char *p = hay; *p; p++)
    if (!strncasecmp(p, needle, n)) return 1;
  return !*needle;
}

static int matches(const entry *e, const ce_device_ident *d) {
  const char *have[MATCH_KINDS] = {d->platform, d->device, d->vendor, d->driver, d->type};
  int any = 0;
  for (int m = 0; m < MATCH_KINDS; m++) {
    if (!e->match[m][0]) continue;
    any = 1;
    if (m == MATCH_TYPE ? strcmp(e->match[m], d->type) != 0 : !contains(have[m], e->match[m])) return 0;
  }
  return any;
}

static const entry *find_default(const database *db, const char *name) {
  for (size_t i = 0; i < db->n; i++)
    if (db->e[i].is_default && !strcmp(db->e[i].name, name)) return &db->e[i];
  return NULL;
}

static void apply(ce_tuning *t, const entry *e) {
  for (size_t i = 0; i < e->nset; i++) set_field(t, e->set[i].field, e->set[i].value);
}

/* Applies default `name` after its bases (at most 8 deep). */
static int apply_default(const database *db, const char *name, ce_tuning *t, int depth) {
  const entry *e = find_default(db, name);
  if (!e || depth > 8) return -1;
  if (e->base[0] && apply_default(db, e->base, t, depth + 1)) return -1;
  apply(t, e);
  return 0;
}

/* Appends printf-style text to desc (cap bytes), truncating. */
static void append(char *desc, size_t cap, const char *fmt, ...) {
  size_t used = strlen(desc);
  va_list ap;
  va_start(ap, fmt);
  if (used < cap) vsnprintf(desc + used, cap - used, fmt, ap);
  va_end(ap);
}

/* ------------------------------------------------------------- the built-in database */

static database shipped;
static int shipped_state; /* 0 not read, 1 read, -1 failed */
static char shipped_err[512];
static pthread_mutex_t shipped_lock = PTHREAD_MUTEX_INITIALIZER;

static const database *shipped_db(void) {
  pthread_mutex_lock(&shipped_lock);
  if (!shipped_state) {
    shipped_state = -1;
    snprintf(shipped_err, sizeof shipped_err, "the built-in tuning database is missing");
    for (size_t i = 0; i < ce_cl_count; i++)
      if (!strcmp(ce_cl_names[i], "devices")) {
        int rc = db_parse((const char *)ce_cl_data[i], ce_cl_sizes[i], "tuning/devices.conf", &shipped, shipped_err,
                          sizeof shipped_err);
        if (!rc && (!find_default(&shipped, "cpu") || !find_default(&shipped, "gpu"))) {
          snprintf(shipped_err, sizeof shipped_err, "tuning/devices.conf has no [default cpu] or [default gpu]");
          db_free(&shipped);
          rc = -1;
        }
        shipped_state = rc ? -1 : 1;
      }
  }
  pthread_mutex_unlock(&shipped_lock);
  return shipped_state == 1 ? &shipped : NULL;
}

const char *ce_tuning_builtin_text(size_t *len) {
  for (size_t i = 0; i < ce_cl_count; i++)
    if (!strcmp(ce_cl_names[i], "devices")) {
      *len = ce_cl_sizes[i];
      return (const char *)ce_cl_data[i];
    }
  *len = 0;
  return NULL;
}

/* ------------------------------------------------------------- the user's file */

int ce_tuning_user_file(char *path, size_t cap) {
  const char *env = getenv("CLEMBED_TUNING_FILE");
  if (env) {
    if (!*env || !strcmp(env, "none")) return 0;
    return snprintf(path, cap, "%s", env) < (int)cap;
  }
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  char base[1024];
  if (xdg && *xdg) {
    if (snprintf(base, sizeof base, "%s/clembed/tuning", xdg) >= (int)sizeof base) return 0;
  } else if (home && *home) {
    if (snprintf(base, sizeof base, "%s/.cache/clembed/tuning", home) >= (int)sizeof base) return 0;
  } else {
    return 0;
  }
  return snprintf(path, cap, "%s.json", base) < (int)cap;
}

/* Reads the user's file into *db: 0 (an absent file is an empty database), or
 * -1 with the message in err. */
static int user_db(const char *path, database *db, char *err, size_t errlen) {
  memset(db, 0, sizeof *db);
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno == ENOENT || errno == ENOTDIR) return 0;
    snprintf(err, errlen, "cannot read the tuning file %.600s: %s", path, strerror(errno));
    return -1;
  }
  size_t cap = 1 << 16, n = 0;
  char *text = malloc(cap);
  int rc = 0;
  while (text) {
    size_t got = fread(text + n, 1, cap - n, f);
    n += got;
    if (n < cap) break;
    if (cap >= ((size_t)16 << 20)) {
      snprintf(err, errlen, "the tuning file %.600s is larger than 16 MiB", path);
      rc = -1;
      break;
    }
    char *bigger = realloc(text, cap * 2);
    if (!bigger) {
      free(text);
      text = NULL;
      break;
    }
    text = bigger;
    cap *= 2;
  }
  if (!text) {
    snprintf(err, errlen, "out of host memory reading %.600s", path);
    rc = -1;
  } else if (!rc && ferror(f)) {
    snprintf(err, errlen, "cannot read the tuning file %.600s", path);
    rc = -1;
  }
  fclose(f);
  if (!rc) {
    /* JSON where the first character that is not a space is '{', else the built-in file's format */
    size_t at = 0;
    while (at < n && isspace((unsigned char)text[at])) at++;
    rc = at < n && text[at] == '{' ? db_parse_json(text, n, path, db, err, errlen)
                                   : db_parse(text, n, path, db, err, errlen);
  }
  free(text);
  return rc;
}

/* ------------------------------------------------------------- resolving */

clembed_status ce_tuning_resolve(const ce_device_ident *d, ce_tuning *out, char *desc, size_t cap, char *warn,
                                 size_t wcap) {
  const char *env = getenv("CLEMBED_TUNING");
  const char *def = !strcmp(d->type, "cpu") ? "cpu" : "gpu";
  char err[768] = "";
  desc[0] = 0;
  warn[0] = 0;
  memset(out, 0, sizeof *out);
  if (env && *env) {
    if (strcasecmp(env, "cpu") && strcasecmp(env, "gpu")) {
      ce_last_message("CLEMBED_TUNING is '%.100s'; it must be cpu, gpu, or unset", env);
      return CLEMBED_ERR_INVALID_ARGUMENT;
    }
    def = !strcasecmp(env, "cpu") ? "cpu" : "gpu";
  }
  const database *db = shipped_db();
  if (!db) {
    ce_last_message("%s", shipped_err);
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  if (apply_default(db, def, out, 0)) {
    ce_last_message("tuning/devices.conf: [default %s] or an entry it is based on is missing", def);
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  append(desc, cap, "default %s%s", def, env && *env ? " (CLEMBED_TUNING)" : "");
  /* the device entries; with CLEMBED_TUNING, which asks for that type's
   * built-in shapes, only those that are not clembed tune's (tuned = 1): a
   * device's facts and quirks, not its tuned shapes */
  for (size_t i = 0; i < db->n; i++)
    if (!db->e[i].is_default && !(env && *env && db->e[i].tuned) && matches(&db->e[i], d)) {
      apply(out, &db->e[i]);
      append(desc, cap, ", device %s", db->e[i].name);
    }
  append(desc, cap, " (built in)");
  /* every value, those the entries leave at 0 included (and a parameter with
   * no limits), then the rules: a fault of the built-in file */
  char why[200];
  if (!tuning_ok(out, why, sizeof why)) {
    ce_last_message("the built-in tuning of this device (%.300s): %s", desc, why);
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  /* the user's entries (not with CLEMBED_TUNING, which asks for the built-in shapes); a file that cannot
   * be read or parsed is left out, said in *warn and the description: the context runs the built-in entries */
  char path[1024];
  if (!(env && *env) && ce_tuning_user_file(path, sizeof path)) {
    /* at the default place, an earlier release's tuning.conf where there is no tuning.json */
    const char *set = getenv("CLEMBED_TUNING_FILE");
    size_t pl = strlen(path);
    struct stat st;
    if (!set && pl > 5 && !strcmp(path + pl - 5, ".json") && stat(path, &st) != 0 && errno == ENOENT) {
      memcpy(path + pl - 5, ".conf", 5);
      if (stat(path, &st) != 0) memcpy(path + pl - 5, ".json", 5);
    }
    database user;
    if (user_db(path, &user, err, sizeof err)) {
      snprintf(warn, wcap, "the tuning file is not read: %s; the built-in entries apply (mend or remove the file, "
               "or CLEMBED_TUNING_FILE=none)", err);
      append(desc, cap, "; not read: %s", path);
      user.n = 0;
      user.e = NULL;
    }
    int first = 1;
    ce_tuning built_in = *out;
    size_t desc_len = strlen(desc);
    for (size_t i = 0; i < user.n; i++)
      if (!user.e[i].is_default && matches(&user.e[i], d)) {
        apply(out, &user.e[i]);
        append(desc, cap, first ? "; device %s" : ", device %s", user.e[i].name);
        first = 0;
      }
    if (!first && !together_ok(out, why, sizeof why)) { /* the file's entries left out, as a file not read */
      snprintf(warn, wcap, "the tuning file is not read: %.600s: with its entries for this device %s; the built-in "
               "entries apply (mend or remove the file, or CLEMBED_TUNING_FILE=none)", path, why);
      *out = built_in;
      desc[desc_len] = 0;
      append(desc, cap, "; not read: %s", path);
    } else if (!first) {
      append(desc, cap, " (%s)", path);
    }
    db_free(&user);
  }
  /* a message quotes a file's bytes and its path, and goes into JSON */
  ce_utf8_clean(warn);
  ce_utf8_clean(desc);
  const char *tune = getenv("CLEMBED_TUNE");
  if (tune && *tune) {
    clembed_status s = ce_tuning_apply(out, tune, out);
    if (s != CLEMBED_OK) return s;
    append(desc, cap, "; CLEMBED_TUNE=%.200s", tune);
  }
  return CLEMBED_OK;
}

clembed_status ce_tuning_apply(const ce_tuning *base, const char *env, ce_tuning *out) {
  if (out != base) *out = *base;
  if (!env) return CLEMBED_OK;
  char item[128];
  for (const char *p = env; *p;) {
    size_t len = strcspn(p, ",");
    if (len == 0 || len >= sizeof item) {
      ce_last_message("CLEMBED_TUNE is '%.200s'; it must be name=count settings separated by commas", env);
      return CLEMBED_ERR_INVALID_ARGUMENT;
    }
    memcpy(item, p, len);
    item[len] = 0;
    p += len + (p[len] == ',');
    char *eq = strchr(item, '=');
    unsigned long long v = 0;
    if (eq) *eq = 0;
    if (!eq || !parse_count(eq + 1, &v)) {
      if (eq) *eq = '=';
      ce_last_message("CLEMBED_TUNE: '%.100s' must be name=count (a count from 0 to 2^40)", item);
      return CLEMBED_ERR_INVALID_ARGUMENT;
    }
    int f = ce_tuning_field(item);
    char why[200];
    if (f < 0) {
      ce_last_message("CLEMBED_TUNE: '%.100s' is not a tuning parameter (docs/tuning.md lists them)", item);
      return CLEMBED_ERR_INVALID_ARGUMENT;
    }
    if (!value_ok(f, v, why, sizeof why)) {
      ce_last_message("CLEMBED_TUNE: %s", why);
      return CLEMBED_ERR_INVALID_ARGUMENT;
    }
    set_field(out, f, v);
  }
  char why[200];
  if (!together_ok(out, why, sizeof why)) {
    ce_last_message("CLEMBED_TUNE is '%.200s': with it %s", env, why);
    return CLEMBED_ERR_INVALID_ARGUMENT;
  }
  return CLEMBED_OK;
}
