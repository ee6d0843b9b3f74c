/* The tuning database (src/runtime/tuning.c, tuning/devices.conf,
 * docs/tuning.md): the built-in entries a device gets, a user's file
 * (CLEMBED_TUNING_FILE) applied where its entries match and skipped under
 * CLEMBED_TUNING, CLEMBED_TUNE on top, every malformed file refused naming its
 * line, clembed_tuning_file's path, and the same bits with a user's entry
 * that changes the shapes. */
#include "test_util.h"

#include <sys/stat.h>
#include <unistd.h>

/* The parameter's value (clembed_tuning_value), -1 where it fails. */
static long long tuning_value(const clembed_context *c, const char *name) {
  uint64_t v = 0;
  return clembed_tuning_value(c, name, &v) == CLEMBED_OK ? (long long)v : -1;
}

static char dir[256];

/* The default device's platform and device names (what an entry matches). */
static void device_names(clembed_context *ctx, char *platform, char *device) {
  cl_device_id dev = NULL;
  cl_platform_id plat = NULL;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_NAME, 255, device, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL);
  clGetPlatformInfo(plat, CL_PLATFORM_NAME, 255, platform, NULL);
}

static int device_is_cpu(clembed_context *ctx) {
  cl_device_id dev = NULL;
  cl_device_type t = 0;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof t, &t, NULL);
  return (t & CL_DEVICE_TYPE_CPU) != 0;
}

static const char *write_file(const char *name, const char *text) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  EXPECT(f != NULL, "cannot write %s", path);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
  return path;
}

/* A context made with the file `path` as the user's (NULL: none read). */
static clembed_status make(const char *path, clembed_context **out) {
  setenv("CLEMBED_TUNING_FILE", path ? path : "none", 1);
  clembed_status s = clembed_context_create(NULL, out);
  unsetenv("CLEMBED_TUNING_FILE");
  return s;
}

/* The same with CLEMBED_TUNE = tune while it is made. */
static clembed_status make_tuned(const char *path, const char *tune, clembed_context **out) {
  setenv("CLEMBED_TUNE", tune, 1);
  clembed_status s = make(path, out);
  unsetenv("CLEMBED_TUNE");
  return s;
}

static void setup(clembed_context *ctx) {
  (void)ctx;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/clembed_tuning_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  EXPECT(mkdtemp(dir) != NULL, "mkdtemp");
  unsetenv("CLEMBED_TUNING");
  unsetenv("CLEMBED_TUNE");
}

/* the built-in entries: the device type's default, and the device's own */
TU_CASE(builtin_entries) {
  clembed_context *c = NULL;
  OK(c, make(NULL, &c));
  const char *d = clembed_context_tuning(c);
  int cpu = device_is_cpu(c);
  EXPECT(!strncmp(d, cpu ? "default cpu" : "default gpu", 11) && strstr(d, "(built in)"), "tuning: %s", d);
  char platform[256] = "", device[256] = "";
  device_names(c, platform, device);
  if (strstr(platform, "Portable Computing Language") && cpu)
    EXPECT(strstr(d, "device pocl-cpu") && tuning_value(c, "prefetch") == 1, "POCL's CPU: %s", d);
  if (strstr(device, "llvmpipe"))
    EXPECT(strstr(d, "device llvmpipe") && tuning_value(c, "bag_tile") == 1, "llvmpipe: %s", d);
  EXPECT(tuning_value(c, "no_such_parameter") == -1 && tuning_value(NULL, "bag_vec") == -1,
         "the hook's -1");
  EXPECT(!strcmp(clembed_context_tuning(NULL), ""), "NULL: \"\"");
  clembed_context_destroy(c);
  /* CLEMBED_TUNING picks a type's default, the device's own or the other's,
   * with the device's entries but not clembed tune's (tuned = 1: on llvmpipe
   * the shipped entry "llvmpipe (LLVM ...)", which sets cpu_shapes 0) */
  for (int own = 0; own < 2; own++) {
    int want_cpu = own ? cpu : !cpu;
    setenv("CLEMBED_TUNING", want_cpu ? "cpu" : "gpu", 1);
    OK(c, make(NULL, &c));
    unsetenv("CLEMBED_TUNING");
    d = clembed_context_tuning(c);
    EXPECT(strstr(d, "(CLEMBED_TUNING)") && clembed__test_cpu_shapes(c) == want_cpu, "%s: cpu_shapes %d", d,
           clembed__test_cpu_shapes(c));
    if (strstr(device, "llvmpipe"))
      EXPECT(strstr(d, "device llvmpipe") && !strstr(d, "device llvmpipe (LLVM"), "llvmpipe: %s", d);
    clembed_context_destroy(c);
  }
}

/* a user's entry that matches this device applies over the built-in ones, in
 * the file's order; one that does not match, or a default, changes nothing */
TU_CASE(user_entries) {
  clembed_context *c = NULL;
  OK(c, make(NULL, &c));
  char platform[256] = "", device[256] = "", text[4096];
  device_names(c, platform, device);
  long long vec0 = tuning_value(c, "embed_vec"), ahead0 = tuning_value(c, "bag_ahead");
  long long tile0 = tuning_value(c, "fold_tile");
  clembed_context_destroy(c);
  snprintf(text, sizeof text,
           "# a user's entries\n"
           "[device mine]   # this device\n"
           "match.platform = %s\n"
           "match.device = %s\n"
           "embed_vec = %lld\n"
           "bag_ahead = 7\n"
           "\n"
           "[device other]\n"
           "match.device = no device is called this\n"
           "fold_tile = %lld\n"
           "[device mine again]\n"
           "match.device = %s\n"
           "bag_ahead = 9\n"
           "[default gpu]\n"
           "fold_tile = 3\n",
           platform, device, vec0 == 8 ? 4LL : 8LL, tile0 + 1, device);
  const char *path = write_file("user.conf", text);
  OK(c, make(path, &c));
  const char *d = clembed_context_tuning(c);
  EXPECT(tuning_value(c, "embed_vec") == (vec0 == 8 ? 4 : 8), "embed_vec %lld",
         tuning_value(c, "embed_vec"));
  EXPECT(tuning_value(c, "bag_ahead") == 9, "bag_ahead %lld (the later entry wins; built in %lld)",
         tuning_value(c, "bag_ahead"), ahead0);
  EXPECT(tuning_value(c, "fold_tile") == tile0, "fold_tile %lld: a non-matching entry applied",
         tuning_value(c, "fold_tile"));
  EXPECT(strstr(d, "; device mine, device mine again (") && strstr(d, path) && !strstr(d, "other"), "tuning: %s", d);
  clembed_context_destroy(c);
  /* CLEMBED_TUNE on top of it */
  OK(c, make_tuned(path, "bag_ahead=11", &c));
  EXPECT(tuning_value(c, "bag_ahead") == 11 && strstr(clembed_context_tuning(c), "CLEMBED_TUNE=bag_ahead=11"),
         "CLEMBED_TUNE over the file: %lld, %s", tuning_value(c, "bag_ahead"), clembed_context_tuning(c));
  clembed_context_destroy(c);
  /* CLEMBED_TUNING: the built-in shapes, no user entry */
  setenv("CLEMBED_TUNING", "cpu", 1);
  OK(c, make(path, &c));
  unsetenv("CLEMBED_TUNING");
  EXPECT(!strstr(clembed_context_tuning(c), "mine") && tuning_value(c, "bag_ahead") != 9,
         "CLEMBED_TUNING read the user's file: %s", clembed_context_tuning(c));
  clembed_context_destroy(c);
  /* an absent file is no entry */
  char absent[600];
  snprintf(absent, sizeof absent, "%s/absent/tuning.conf", dir);
  OK(c, make(absent, &c));
  EXPECT(!strchr(clembed_context_tuning(c), ';'), "absent file: %s", clembed_context_tuning(c));
  clembed_context_destroy(c);
}

/* the user's file in JSON, as `clembed tune` writes it: its entries apply as
 * the other format's do */
TU_CASE(user_entries_json) {
  clembed_context *c = NULL;
  OK(c, make(NULL, &c));
  char platform[256] = "", device[256] = "", text[4096], jp[600], jd[600];
  device_names(c, platform, device);
  long long vec0 = tuning_value(c, "embed_vec"), tile0 = tuning_value(c, "fold_tile");
  clembed_context_destroy(c);
  /* the names as JSON strings (a quote or backslash escaped) */
  const char *names[2] = {platform, device};
  char *outs[2] = {jp, jd};
  for (int k = 0; k < 2; k++) {
    char *o = outs[k];
    for (const char *p = names[k]; *p && o < outs[k] + 590; p++) {
      if (*p == '"' || *p == '\\') *o++ = '\\';
      *o++ = *p;
    }
    *o = 0;
  }
  snprintf(text, sizeof text,
           "  {\"clembed_tuning\": 1, \"entries\": [\n"
           "  {\"device\": \"mine\", \"comment\": \"a user's \\u00e9ntry\",\n"
           "   \"match\": {\"platform\": \"%s\", \"device\": \"%s\"}, \"tuned\": 1,\n"
           "   \"parameters\": {\"embed_vec\": %lld, \"bag_ahead\": 7}},\n"
           "  {\"device\": \"other\", \"match\": {\"device\": \"no device is called this\"},\n"
           "   \"parameters\": {\"fold_tile\": %lld}},\n"
           "  {\"device\": \"mine again\", \"match\": {\"device\": \"%s\"}, \"parameters\": {\"bag_ahead\": 9}},\n"
           "  {\"device\": \"no match\", \"parameters\": {\"fold_tile\": 3}}\n"
           "]}\n",
           jp, jd, vec0 == 8 ? 4LL : 8LL, tile0 + 1, jd);
  const char *path = write_file("user.json", text);
  OK(c, make(path, &c));
  const char *d = clembed_context_tuning(c);
  EXPECT(tuning_value(c, "embed_vec") == (vec0 == 8 ? 4 : 8) && tuning_value(c, "bag_ahead") == 9,
         "embed_vec %lld, bag_ahead %lld", tuning_value(c, "embed_vec"), tuning_value(c, "bag_ahead"));
  EXPECT(tuning_value(c, "fold_tile") == tile0, "fold_tile %lld: an entry that does not match applied",
         tuning_value(c, "fold_tile"));
  EXPECT(strstr(d, "; device mine, device mine again (") && strstr(d, path) && !strstr(d, "other") &&
             !strstr(d, "not read"),
         "tuning: %s", d);
  EXPECT(!strcmp(clembed_context_message(c), ""), "a message: %s", clembed_context_message(c));
  clembed_context_destroy(c);
  /* an empty list of entries */
  OK(c, make(write_file("empty.json", "{\"entries\": []}"), &c));
  EXPECT(!strchr(clembed_context_tuning(c), ';'), "no entries: %s", clembed_context_tuning(c));
  clembed_context_destroy(c);
}

/* A context made with the damaged or foreign file `path` as the user's: made
 * all the same, with the built-in entries (bag_tile as without a file), its
 * message naming the file and `want`, its tuning saying the file was not read. */
static void left_out(const char *path, const char *want, const char *what) {
  clembed_context *c = NULL, *none = NULL;
  uint64_t v = 0, v0 = 0;
  clembed_status s = make(path, &c);
  EXPECT(s == CLEMBED_OK && c != NULL, "%s: %s (%s)", what, clembed_status_string(s), clembed_last_error_message());
  if (c) {
    const char *m = clembed_context_message(c), *t = clembed_context_tuning(c);
    char said[600];
    snprintf(said, sizeof said, "; not read: %s", path);
    EXPECT(strstr(m, path) && strstr(m, want) && strstr(m, "the built-in entries apply"),
           "%s: message '%s' (expected the file and '%s')", what, m, want);
    EXPECT(strstr(t, said) != NULL, "%s: tuning '%s'", what, t);
    OK(none, make(NULL, &none));
    EXPECT(clembed_tuning_value(c, "bag_tile", &v) == CLEMBED_OK &&
               clembed_tuning_value(none, "bag_tile", &v0) == CLEMBED_OK && v == v0,
           "%s: bag_tile %llu, without a file %llu", what, (unsigned long long)v, (unsigned long long)v0);
  }
  clembed_context_destroy(none);
  clembed_context_destroy(c);
}

/* every malformed file fails no context: it is left out, the message naming
 * the file, the line and what is wrong */
TU_CASE(malformed_files) {
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"[device x]\nmatch.device = a\nno_such_parameter = 4\n", ":3: 'no_such_parameter' is not a tuning parameter"},
      {"[device x]\nbag_tile = -4\n", ":2: bag_tile = '-4' is not a count from 0 to 2^40 (in [device x])"},
      {"[device x]\nbag_tile = 4kb\n", ":2: bag_tile = '4kb' is not a count"},
      {"[device x]\nbag_tile = 99999999999999999\n", ":2: bag_tile = '99999999999999999' is not a count"},
      {"bag_tile = 4\n", ":1: 'bag_tile' before any entry's heading"},
      {"[entry x]\n", ":1: '[entry x]' is not an entry's heading"},
      {"[device x\n", ":1: '[device x' is not an entry's heading"},
      {"[device x]\nmatch.colour = red\n", ":2: 'match.colour = red': match.platform"},
      {"[device x]\nmatch.type = fpga\n", ":2: match.type is 'fpga'"},
      {"[device x]\njust words\n", ":2: 'just words' is not a 'name = value' line"},
      {"[device x]\ntuned = yes\n", ":2: tuned = 'yes'; it must be 0 or 1"},
      {"[default cpu]\ntuned = 1\n", ":2: tuned in a [default ...] entry"},
      /* a file that matches the device before its fault: none of it applies */
      {"[device all]\nmatch.type = cpu\nbag_tile = 3\n[device all gpus]\nmatch.type = gpu\nbag_tile = 3\nbag_tile = x\n",
       ":7: bag_tile = 'x' is not a count"},
      /* a count the parameter does not take (a kernel that would not build, loop forever or divide by zero) */
      {"[device x]\nbag_tile = 0\n", ":2: bag_tile = 0: it must be from 1 to 16 (in [device x])"},
      {"[device x]\nbag_tile = 17\n", ":2: bag_tile = 17: it must be from 1 to 16"},
      {"[device x]\nbag_tile = 4294967297\n", ":2: bag_tile = 4294967297: it must be from 1 to 16"},
      {"[device x]\nembed_vec = 2\n", ":2: embed_vec = 2: it must be 4, 8 or 16"},
      {"[device x]\nbag_vec = 12\n", ":2: bag_vec = 12: it must be 4, 8 or 16"},
      {"[device x]\nbag_cols = 2\n", ":2: bag_cols = 2: it must be 0 or 1"},
      {"[device x]\nrope_pairs = 0\n", ":2: rope_pairs = 0: it must be from 1 to 64"},
      {"[device x]\nsort_chunk = 0\n", ":2: sort_chunk = 0: it must be at least 1"},
      {"[device x]\nsinusoid_table_min_rows = 0\n", ":2: sinusoid_table_min_rows = 0: it must be at least 1"},
      {"[device x]\ngroup_target = 512\n", ":2: group_target = 512: it must be from 1 to 256"},
      {"[device x]\npiece_args = 9\n", ":2: piece_args = 9: it must be from 1 to 8"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char what[32];
    snprintf(what, sizeof what, "file %zu", i);
    left_out(write_file("bad.conf", bad[i].text), bad[i].want, what);
  }
  /* the JSON file: its syntax, then what a tuning file holds, each named with its line and entry */
  static const struct {
    const char *text, *want;
  } badj[] = {
      {"{\"entries\": [}", ": not JSON: line 1: expected a value, found '}'"},
      {"{\"entries\": [{\"device\": \"x\",}]}", ": not JSON: line 1: expected a string, found '}'"},
      {"{\"entries\": []} []", ": not JSON: line 1: text after the value: '['"},
      {"{\"entries\": [{\"device\": \"x\\u0000\"}]}", ": not JSON: line 1: a NUL character"},
      {"{\"entries\": [{\"device\": \"\xff\"}]}", ": not JSON: line 1: a string that is not UTF-8"},
      {"{\n\"entries\": [\n{\"device\": \"x\", \"parameters\": {\"bag_tile\": 01}}]}",
       ": not JSON: line 3: a number with a leading zero"},
      {"{\"entries\": [], \"colour\": 1}", ":1: 'colour' is not a key of a tuning file"},
      {"{\"clembed_tuning\": 2, \"entries\": []}", ":1: clembed_tuning is not 1"},
      {"{\"entries\": {}}", ":1: no \"entries\" array"},
      {"{}", ":1: no \"entries\" array"},
      {"{\"entries\": [\n 4]}", ":2: entry 1 is not an object"},
      {"{\"entries\": [{\"match\": {}}]}", ":1: entry 1 has no \"device\""},
      {"{\"entries\": [{\"device\": \"a\"},\n {\"device\": \"b\", \"colour\": 1}]}",
       ":2: entry 2 (device \"b\"): 'colour' is not a key of an entry"},
      {"{\"entries\": [{\"device\": \"x\", \"parameters\": {\n\"bag_tiles\": 4}}]}",
       ":2: entry 1 (device \"x\"): 'bag_tiles' is not a tuning parameter"},
      {"{\"entries\": [{\"device\": \"x\", \"parameters\": {\"bag_tile\": -4}}]}",
       ":1: entry 1 (device \"x\"): bag_tile is not a count"},
      {"{\"entries\": [{\"device\": \"x\", \"parameters\": {\"bag_tile\": 4.5}}]}",
       ":1: entry 1 (device \"x\"): bag_tile is not a count"},
      {"{\"entries\": [{\"device\": \"x\", \"parameters\": {\"bag_tile\": \"4\"}}]}",
       ":1: entry 1 (device \"x\"): bag_tile is not a count"},
      {"{\"entries\": [{\"device\": \"x\", \"parameters\": {\"bag_tile\": 99999999999999999}}]}",
       ":1: entry 1 (device \"x\"): bag_tile is not a count"},
      {"{\"entries\": [{\"device\": \"x\", \"match\": {\"colour\": \"red\"}}]}",
       ":1: entry 1 (device \"x\"): match \"colour\""},
      {"{\"entries\": [{\"device\": \"x\", \"match\": {\"type\": \"fpga\"}}]}",
       ":1: entry 1 (device \"x\"): match type is 'fpga'"},
      {"{\"entries\": [{\"device\": \"x\", \"tuned\": 2}]}", ":1: entry 1 (device \"x\"): \"tuned\" must be 0 or 1"},
      {"{\"entries\": [{\"device\": \"x\", \"comment\": 3}]}", ":1: entry 1 (device \"x\"): \"comment\" is not"},
      {"{\"entries\": [], \"entries\": 3}", ":1: 'entries' is given twice"},
      {"{\"entries\": [{\"device\": \"x\",\n \"parameters\": {\"bag_tile\": 1, \"bag_vec\": 4}, \"parameters\": {\"bag_tile\": 1}}]}",
       ":1: entry 1 (device \"x\"): 'parameters' is given twice"},
      {"{\"entries\": [{\"device\": \"x\", \"parameters\": {\n\"bag_tile\": 1, \"bag_tile\": 2}}]}",
       ":1: entry 1 (device \"x\"): 'bag_tile' is given twice"},
      {"{\"entries\": [{\"device\": \"x\", \"match\": {\"type\": \"cpu\", \"type\": \"gpu\"}}]}",
       ":1: entry 1 (device \"x\"): 'type' is given twice"},
      {"{\"entries\": [{\"device\": \"x\", \"comment\": \"a\\qb\"}]}", ": not JSON: line 1: '\\q' is not a JSON escape"},
      /* a file that matches the device before its fault: none of it applies */
      {"{\"entries\": [{\"device\": \"all\", \"match\": {\"type\": \"cpu\"}, \"parameters\": {\"bag_tile\": 3}},\n"
       " {\"device\": \"all gpus\", \"match\": {\"type\": \"gpu\"}, \"parameters\": {\"bag_tile\": 3}},\n"
       " {\"device\": \"x\", \"parameters\": {\"bag_tile\": 3, \"bag_vec\": \"x\"}}]}",
       ":3: entry 3 (device \"x\"): bag_vec is not a count"},
      {"{\"entries\": [{\"device\": \"x\", \"parameters\": {\n\"fold_tile\": 0}}]}",
       ":2: entry 1 (device \"x\"): fold_tile = 0: it must be from 1 to 16"},
      {"{\"entries\": [{\"device\": \"x\", \"parameters\": {\"fold_group\": 4294967296}}]}",
       ":1: entry 1 (device \"x\"): fold_group = 4294967296: it must be from 1 to 64"},
      {"{\"entries\": [{\"device\": \"x\", \"parameters\": {\"positional_vec\": 3}}]}",
       ":1: entry 1 (device \"x\"): positional_vec = 3: it must be 4, 8 or 16"},
      /* parameters that do not go together on this device (every type's entry matches it) */
      {"{\"entries\": [{\"device\": \"cpus\", \"match\": {\"type\": \"cpu\"}, \"parameters\": {\"embed_vec\": 16, "
       "\"norm_params_cols\": 24}},\n {\"device\": \"gpus\", \"match\": {\"type\": \"gpu\"}, \"parameters\": "
       "{\"embed_vec\": 16, \"norm_params_cols\": 24}}]}",
       ": with its entries for this device norm_params_cols = 24 is not a multiple of embed_vec = 16"},
  };
  for (size_t i = 0; i < sizeof badj / sizeof badj[0]; i++) {
    char what[32];
    snprintf(what, sizeof what, "JSON file %zu", i);
    left_out(write_file("bad.json", badj[i].text), badj[i].want, what);
  }
  /* a path that is a directory: cannot be read */
  left_out(dir, "cannot read the tuning file", "a directory");
  clembed_context *c = NULL;
  clembed_status s;
  /* CLEMBED_TUNE: a name that is not a parameter */
  s = make_tuned(NULL, "bag_tiles=4", &c);
  EXPECT(s == CLEMBED_ERR_INVALID_ARGUMENT && strstr(clembed_last_error_message(), "'bag_tiles' is not a tuning parameter"),
         "CLEMBED_TUNE=bag_tiles=4: %s (%s)", clembed_status_string(s), clembed_last_error_message());
  clembed_context_destroy(c);
  /* CLEMBED_TUNE: a count the parameter does not take, or parameters that do not go together */
  static const struct {
    const char *tune, *want;
  } bad_tune[] = {
      {"bag_tile=0", "CLEMBED_TUNE: bag_tile = 0: it must be from 1 to 16"},
      {"fold_vec=1", "CLEMBED_TUNE: fold_vec = 1: it must be 4, 8 or 16"},
      {"fold_group=0", "CLEMBED_TUNE: fold_group = 0: it must be from 1 to 64"},
      {"row_items=0", "CLEMBED_TUNE: row_items = 0: it must be from 1 to 65536"},
      {"prefetch=4294967296", "CLEMBED_TUNE: prefetch = 4294967296: it must be 0 or 1"},
      {"embed_vec=16,norm_params_cols=20", "norm_params_cols = 20 is not a multiple of embed_vec = 16"},
      {"sort_radix_bits=8,sort_max_chunks=16777216", "sort_max_chunks = 16777216 and sort_radix_bits = 8"},
      {"huge_page_bytes=6000", "huge_page_bytes = 6000 is not a multiple of the host's page"},
      {"embed_rows=2,embed_strided_rows=0", "embed_strided_rows = 0 with embed_rows = 2"},
      {"norm_params_cols=1048576", "CLEMBED_TUNE: norm_params_cols = 1048576: it must be from 4 to 65536"},
      {"bag_ahead=2147483647", "CLEMBED_TUNE: bag_ahead = 2147483647: it must be from 0 to 65536"},
      {"sort_radix_bits=16,sort_max_chunks=65536", "sort_max_chunks = 65536 and sort_radix_bits = 16"},
  };
  for (size_t i = 0; i < sizeof bad_tune / sizeof bad_tune[0]; i++) {
    c = NULL;
    s = make_tuned(NULL, bad_tune[i].tune, &c);
    EXPECT(s == CLEMBED_ERR_INVALID_ARGUMENT && c == NULL && strstr(clembed_last_error_message(), bad_tune[i].want),
           "CLEMBED_TUNE=%s: %s (%s)", bad_tune[i].tune, clembed_status_string(s), clembed_last_error_message());
    clembed_context_destroy(c);
  }
  /* a row shape on the GPU default (the tuner's lookup candidates there) */
  setenv("CLEMBED_TUNING", "gpu", 1);
  c = NULL;
  s = make_tuned(NULL, "embed_rows=1", &c);
  unsetenv("CLEMBED_TUNING");
  EXPECT(s == CLEMBED_OK && tuning_value(c, "embed_rows") == 1 && tuning_value(c, "embed_strided_rows") >= 1,
         "CLEMBED_TUNING=gpu CLEMBED_TUNE=embed_rows=1: %s (%s)", clembed_status_string(s),
         clembed_last_error_message());
  clembed_context_destroy(c);
  /* the ends of each range are taken */
  static const char *const good_tune[] = {"bag_tile=1,bag_vec=4", "bag_tile=16,bag_vec=16", "rope_pairs=64",
                                          "piece_args=1", "piece_args=8", "group_target=256",
                                          "embed_vec=8,norm_params_cols=24", "sort_radix_bits=16,sort_max_chunks=65535",
                                          "sort_radix_bits=8,sort_max_chunks=16777215"};
  for (size_t i = 0; i < sizeof good_tune / sizeof good_tune[0]; i++) {
    c = NULL;
    s = make_tuned(NULL, good_tune[i], &c);
    EXPECT(s == CLEMBED_OK && c != NULL && strstr(clembed_context_tuning(c), good_tune[i]),
           "CLEMBED_TUNE=%s: %s (%s)", good_tune[i], clembed_status_string(s), clembed_last_error_message());
    clembed_context_destroy(c);
  }
}

/* clembed_tuning_file: CLEMBED_TUNING_FILE, else XDG_CACHE_HOME, else HOME */
TU_CASE(tuning_file_path) {
  char path[512];
  char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL, *xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
  setenv("CLEMBED_TUNING_FILE", "/x/y.conf", 1);
  EXPECT(clembed_tuning_file(path, sizeof path) == CLEMBED_OK && !strcmp(path, "/x/y.conf"), "%s", path);
  EXPECT(clembed_tuning_file(path, 5) == CLEMBED_ERR_INVALID_ARGUMENT && !strcmp(clembed_last_error_message(),
         "clembed_tuning_file: the path takes 10 bytes, capacity is 5"), "short: %s", clembed_last_error_message());
  EXPECT(clembed_tuning_file(NULL, 10) == CLEMBED_ERR_INVALID_ARGUMENT, "NULL path");
  setenv("CLEMBED_TUNING_FILE", "none", 1);
  EXPECT(clembed_tuning_file(path, sizeof path) == CLEMBED_ERR_UNSUPPORTED, "none");
  unsetenv("CLEMBED_TUNING_FILE");
  setenv("XDG_CACHE_HOME", "/cache", 1);
  EXPECT(clembed_tuning_file(path, sizeof path) == CLEMBED_OK && !strcmp(path, "/cache/clembed/tuning.json"), "%s",
         path);
  /* the path is tuning.json's; an earlier release's tuning.conf there is read where there is no tuning.json */
  char xdir[600], want[700], text[1024], platform[256] = "", device[256] = "";
  clembed_context *c = NULL;
  OK(c, make(NULL, &c));
  device_names(c, platform, device);
  clembed_context_destroy(c);
  snprintf(xdir, sizeof xdir, "%s/xdg", dir);
  setenv("XDG_CACHE_HOME", xdir, 1);
  snprintf(want, sizeof want, "%s/clembed", xdir);
  EXPECT(mkdir(xdir, 0755) == 0 && mkdir(want, 0755) == 0, "mkdir %s", want);
  snprintf(text, sizeof text, "[device legacy]\nmatch.device = %s\nbag_ahead = 5\n", device);
  write_file("xdg/clembed/tuning.conf", text);
  snprintf(want, sizeof want, "%s/clembed/tuning.json", xdir);
  EXPECT(clembed_tuning_file(path, sizeof path) == CLEMBED_OK && !strcmp(path, want), "only tuning.conf: %s", path);
  OK(c, clembed_context_create(NULL, &c));
  snprintf(want, sizeof want, "; device legacy (%s/clembed/tuning.conf)", xdir);
  EXPECT(strstr(clembed_context_tuning(c), want) && tuning_value(c, "bag_ahead") == 5, "only tuning.conf: %s",
         clembed_context_tuning(c));
  clembed_context_destroy(c);
  write_file("xdg/clembed/tuning.json", "{\"entries\": []}");
  OK(c, clembed_context_create(NULL, &c));
  EXPECT(!strstr(clembed_context_tuning(c), "legacy"), "both: %s", clembed_context_tuning(c));
  clembed_context_destroy(c);
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/u", 1);
  EXPECT(clembed_tuning_file(path, sizeof path) == CLEMBED_OK && !strcmp(path, "/home/u/.cache/clembed/tuning.json"),
         "%s", path);
  unsetenv("HOME");
  EXPECT(clembed_tuning_file(path, sizeof path) == CLEMBED_ERR_UNSUPPORTED, "no HOME");
  if (home) setenv("HOME", home, 1);
  if (xdg) setenv("XDG_CACHE_HOME", xdg, 1);
  free(home);
  free(xdg);
}

/* Lookup, embed, bags, a backward and an SGD step on ctx: their results' bytes. */
static uint8_t *work(clembed_context *c, size_t *n) {
  enum { V = 301, D = 70, N = 257, B = 19 };
  clembed_matrix t = {0}, out = {0}, e = {0}, bag = {0}, g = {0}, dw = {0};
  float *h = malloc(V * D * sizeof *h);
  uint64_t rng = 5;
  for (size_t i = 0; i < V * D; i++) h[i] = tu_rand(&rng) * 4 - 2;
  int64_t ids[N], off[B + 1];
  for (size_t i = 0; i < N; i++) ids[i] = (int64_t)((i * 37 + i * i) % V);
  for (size_t b = 0; b <= B; b++) off[b] = (int64_t)(b * N / B);
  clembed_ids di = {0}, doff = {0};
  OK(c, clembed_matrix_create(c, V, D, CLEMBED_F32, &t));
  OK(c, clembed_matrix_write(c, &t, h, CLEMBED_F32));
  OK(c, clembed_ids_create(c, ids, N, CLEMBED_I64, &di));
  OK(c, clembed_ids_create(c, off, B + 1, CLEMBED_I64, &doff));
  OK(c, clembed_matrix_create(c, N, D, CLEMBED_F32, &out));
  OK(c, clembed_matrix_create(c, N, D, CLEMBED_F16, &e));
  OK(c, clembed_matrix_create(c, B, D, CLEMBED_F32, &bag));
  OK(c, clembed_matrix_create(c, N, D, CLEMBED_F32, &g));
  OK(c, clembed_matrix_write(c, &g, h, CLEMBED_F32));
  OK(c, clembed_matrix_create(c, V, D, CLEMBED_F32, &dw));
  OK(c, clembed_matrix_init_uniform(c, &dw, 0.0f, 0.0f, 1, 0, NULL, NULL));
  OK(c, clembed_lookup(c, &t, &di, &out, 0, NULL, NULL));
  clembed_embed_options eo = clembed_embed_defaults();
  eo.positions = CLEMBED_POSITIONS_SINUSOID;
  eo.seq_len = 64;
  eo.scale = 1.5f;
  OK(c, clembed_embed(c, &t, &di, &eo, &e, 0, NULL, NULL));
  clembed_bag_options bo = clembed_bag_defaults();
  OK(c, clembed_embedding_bag(c, &t, &di, &doff, &bo, &bag, 0, NULL, NULL));
  OK(c, clembed_backward(c, &g, &di, NULL, &dw, 0, NULL, NULL));
  OK(c, clembed_sgd_update(c, &g, &di, 0.25f, NULL, &t, 0, NULL, NULL));
  OK(c, clembed_finish(c));
  size_t sizes[5] = {N * D * 4, N * D * 2, B * D * 4, V * D * 4, V * D * 4}, total = 0;
  for (int k = 0; k < 5; k++) total += sizes[k];
  uint8_t *all = malloc(total), *p = all;
  clembed_matrix *m[5] = {&out, &e, &bag, &dw, &t};
  for (int k = 0; k < 5; k++, p += sizes[k - 1]) OK(c, clembed_matrix_read(c, m[k], p, m[k]->dtype));
  clembed_matrix *all_m[] = {&t, &out, &e, &bag, &g, &dw};
  for (size_t k = 0; k < 6; k++) clembed_matrix_release(all_m[k]);
  clembed_ids_release(&di);
  clembed_ids_release(&doff);
  free(h);
  *n = total;
  return all;
}

/* a user's entry that changes the shapes changes no bit of any result */
TU_CASE(user_entry_same_bits) {
  clembed_context *c = NULL;
  OK(c, make(NULL, &c));
  char platform[256] = "", device[256] = "", text[2048];
  device_names(c, platform, device);
  size_t n0 = 0, n1 = 0;
  uint8_t *want = work(c, &n0);
  int cpu = clembed__test_cpu_shapes(c);
  clembed_context_destroy(c);
  snprintf(text, sizeof text,
           "[device shapes]\nmatch.device = %s\n"
           "embed_rows = %d\nembed_vec = 4\nbag_vec = 8\nbag_tile = 2\nbag_rows = 2\nbag_plain = 0\n"
           "fold_vec = 8\nfold_tile = 2\nfold_split = 16\nsort_chunk = 1024\npositional_vec = 8\n",
           device, cpu ? 2 : 0);
  const char *path = write_file("shapes.conf", text);
  OK(c, make(path, &c));
  EXPECT(strstr(clembed_context_tuning(c), "device shapes"), "the entry: %s", clembed_context_tuning(c));
  uint8_t *got = work(c, &n1);
  size_t diff = 0;
  for (size_t i = 0; i < n0 && i < n1; i++) diff += got[i] != want[i];
  EXPECT(n0 == n1 && diff == 0, "%zu of %zu result bytes differ with the user's entry", diff, n0);
  free(want);
  free(got);
  clembed_context_destroy(c);
}

/* embed_rows_bytes: the lookup's row shape takes fewer tokens a work-item
 * where table rows are wide (as many as fit in that many bytes, one at least;
 * narrow rows keep embed_rows), with the same bits as embed_rows alone: tables
 * of four widths and dtypes (a ggml block type among them), F32 and F16
 * outputs, 301 ids (no row count divides them). */
TU_CASE(rows_bytes_same_bits) {
  enum { V = 40, N = 301 };
  const struct {
    clembed_dtype dt;
    size_t cols, row_bytes;
  } tables[] = {{CLEMBED_F32, 70, 280}, {CLEMBED_F32, 1024, 4096}, {CLEMBED_BF16, 513, 1026}, {CLEMBED_Q8_0, 256, 272}};
  const struct {
    const char *tune;
    int rows[4]; /* the tokens a work-item takes, table by table */
  } caps[] = {{"embed_rows=8,embed_rows_bytes=0", {8, 8, 8, 8}},
              {"embed_rows=8,embed_rows_bytes=1", {1, 1, 1, 1}},
              {"embed_rows=8,embed_rows_bytes=600", {2, 1, 1, 2}},
              {"embed_rows=8,embed_rows_bytes=9000", {8, 2, 8, 8}}};
  enum { NT = sizeof tables / sizeof tables[0], NC = sizeof caps / sizeof caps[0] };
  const clembed_dtype outs[2] = {CLEMBED_F32, CLEMBED_F16};
  int32_t ids[N];
  for (size_t i = 0; i < N; i++) ids[i] = (int32_t)((i * 13 + i * i / 7) % V);
  uint8_t *want[NT][2] = {{NULL}};
  for (size_t c = 0; c < NC; c++) {
    clembed_context *cc = NULL;
    OK(cc, make_tuned(NULL, caps[c].tune, &cc));
    if (!cc && c == 0) return; /* no baseline (the check above failed) */
    if (!cc) continue;
    for (size_t k = 0; k < NT; k++) {
      /* the same host bytes in every context: random values, a Q8_0 block's f16 scale finite */
      size_t tbytes = V * tables[k].row_bytes;
      uint8_t *host = malloc(tbytes);
      uint64_t rng = 17 + k;
      for (size_t b = 0; b < tbytes; b++) host[b] = (uint8_t)(tu_rand(&rng) * 128 + 128);
      if (tables[k].dt == CLEMBED_Q8_0)
        for (size_t b = 0; b < tbytes; b += 34) host[b + 1] = (uint8_t)(0x30 + (host[b + 1] & 0x0f));
      else if (tables[k].dt == CLEMBED_BF16)
        for (size_t b = 1; b < tbytes; b += 2) host[b] = (uint8_t)(0x3c + (host[b] & 0x03) + (host[b] & 0x80));
      else
        for (size_t b = 3; b < tbytes; b += 4) host[b] = (uint8_t)(0x3c + (host[b] & 0x03) + (host[b] & 0x80));
      clembed_matrix t = {0};
      clembed_ids di = {0};
      OK(cc, clembed_matrix_create(cc, V, tables[k].cols, tables[k].dt, &t));
      OK(cc, clembed_matrix_write(cc, &t, host, tables[k].dt));
      OK(cc, clembed_ids_create(cc, ids, N, CLEMBED_I32, &di));
      int rows = clembed__test_lookup_rows(cc, &t, N);
      EXPECT(rows == caps[c].rows[k], "%s, %zu-byte rows: %d tokens a work-item, %d expected", caps[c].tune,
             tables[k].row_bytes, rows, caps[c].rows[k]);
      for (int o = 0; o < 2; o++) {
        clembed_matrix out = {0};
        OK(cc, clembed_matrix_create(cc, N, tables[k].cols, outs[o], &out));
        OK(cc, clembed_lookup(cc, &t, &di, &out, 0, NULL, NULL));
        size_t obytes = N * tables[k].cols * clembed_dtype_size(outs[o]);
        uint8_t *got = calloc(obytes, 1);
        OK(cc, clembed_matrix_read(cc, &out, got, outs[o]));
        if (!want[k][o]) {
          want[k][o] = got; /* embed_rows alone */
        } else {
          size_t diff = 0;
          for (size_t b = 0; b < obytes; b++) diff += got[b] != want[k][o][b];
          EXPECT(diff == 0, "%s, %zu-byte rows into %s: %zu of %zu bytes differ from embed_rows=8 alone (embed_rows_bytes=0)",
                 caps[c].tune, tables[k].row_bytes, outs[o] == CLEMBED_F32 ? "F32" : "F16", diff, obytes);
          free(got);
        }
        clembed_matrix_release(&out);
      }
      clembed_matrix_release(&t);
      clembed_ids_release(&di);
      free(host);
    }
    clembed_context_destroy(cc);
  }
  for (size_t k = 0; k < NT; k++)
    for (int o = 0; o < 2; o++) free(want[k][o]);
}

/* BERT's backward (learned positions, two segment types, LayerNorm) of n
 * tokens of D columns: every gradient's bytes; the norm's weight and bias
 * gradients also into gw, gb (D floats each). */
static uint8_t *bert_backward(clembed_context *c, size_t n, size_t *bytes, float *gw, float *gb) {
  enum { V = 50, D = 32, S = 500 };
  size_t nt = n;
  float *h = malloc((V + S + 2 + nt) * D * sizeof *h);
  uint64_t rng = 11;
  for (size_t i = 0; i < (V + S + 2 + nt) * D; i++) h[i] = tu_rand(&rng) * 2 - 1;
  int32_t *ids = malloc(nt * sizeof *ids), *sids = malloc(nt * sizeof *sids);
  for (size_t i = 0; i < nt; i++) {
    ids[i] = (int32_t)((i * 7 + i / 3) % V);
    sids[i] = (int32_t)(i % S >= S / 2);
  }
  clembed_matrix t = {0}, pt = {0}, st = {0}, g = {0}, dt = {0}, dp = {0}, ds = {0}, dw = {0}, db = {0};
  clembed_matrix nw = {0}, nb = {0};
  clembed_ids di = {0}, ds_ids = {0};
  OK(c, clembed_matrix_create(c, 1, D, CLEMBED_F32, &nw));
  OK(c, clembed_matrix_init_uniform(c, &nw, 0.5f, 1.5f, 3, 0, NULL, NULL));
  OK(c, clembed_matrix_create(c, 1, D, CLEMBED_F32, &nb));
  OK(c, clembed_matrix_init_uniform(c, &nb, -0.5f, 0.5f, 4, 0, NULL, NULL));
  OK(c, clembed_matrix_create(c, V, D, CLEMBED_F32, &t));
  OK(c, clembed_matrix_write(c, &t, h, CLEMBED_F32));
  OK(c, clembed_matrix_create(c, S, D, CLEMBED_F32, &pt));
  OK(c, clembed_matrix_write(c, &pt, h + V * D, CLEMBED_F32));
  OK(c, clembed_matrix_create(c, 2, D, CLEMBED_F32, &st));
  OK(c, clembed_matrix_write(c, &st, h + (V + S) * D, CLEMBED_F32));
  OK(c, clembed_matrix_create(c, nt, D, CLEMBED_F32, &g));
  OK(c, clembed_matrix_write(c, &g, h + (V + S + 2) * D, CLEMBED_F32));
  OK(c, clembed_ids_create(c, ids, nt, CLEMBED_I32, &di));
  OK(c, clembed_ids_create(c, sids, nt, CLEMBED_I32, &ds_ids));
  clembed_matrix *gm[5] = {&dt, &dp, &ds, &dw, &db};
  const size_t rows[5] = {V, S, 2, 1, 1};
  for (int k = 0; k < 5; k++) OK(c, clembed_matrix_create(c, rows[k], D, CLEMBED_F32, gm[k]));
  clembed_embed_options o = clembed_embed_defaults();
  o.positions = CLEMBED_POSITIONS_TABLE;
  o.position_table = &pt;
  o.seq_len = S;
  o.segment_table = &st;
  o.segment_ids = &ds_ids;
  o.norm.kind = CLEMBED_NORM_LAYER;
  o.norm.weight = &nw;
  o.norm.bias = &nb;
  o.norm.eps = 1e-5f;
  clembed_embed_grads gr = clembed_embed_grads_defaults();
  gr.table = &dt;
  gr.position_table = &dp;
  gr.segment_table = &ds;
  gr.norm_weight = &dw;
  gr.norm_bias = &db;
  OK(c, clembed_embed_backward(c, &g, &t, &di, &o, &gr, 0, NULL, NULL));
  OK(c, clembed_finish(c));
  size_t total = (V + S + 2 + 2) * D * 4;
  uint8_t *all = malloc(total), *p = all;
  for (int k = 0; k < 5; k++) {
    OK(c, clembed_matrix_read(c, gm[k], p, CLEMBED_F32));
    p += rows[k] * D * 4;
  }
  memcpy(gw, all + (V + S + 2) * D * 4, D * 4);
  memcpy(gb, all + (V + S + 3) * D * 4, D * 4);
  /* the norm's gradients against a float64 reference: sum over tokens of g * xhat and of g */
  for (size_t col = 0; col < D; col++) {
    double rw = 0, rb = 0, aw = 0, ab = 0;
    for (size_t i = 0; i < nt; i++) {
      double x[D], mean = 0, var = 0;
      for (size_t d = 0; d < D; d++) {
        x[d] = (double)h[ids[i] * D + d] + h[(V + i % S) * D + d] + h[(V + S + sids[i]) * D + d];
        mean += x[d];
      }
      mean /= D;
      for (size_t d = 0; d < D; d++) var += (x[d] - mean) * (x[d] - mean);
      var /= D;
      double xh = (x[col] - mean) / sqrt(var + 1e-5), gv = h[(V + S + 2 + i) * D + col];
      rw += gv * xh;
      rb += gv;
      aw += fabs(gv * xh);
      ab += fabs(gv);
    }
    EXPECT(fabs(gw[col] - rw) <= 1e-5 * aw + 1e-6 && fabs(gb[col] - rb) <= 1e-5 * ab + 1e-6,
           "%zu tokens: the norm's gradients, column %zu: %.9g and %.9g, float64 %.9g and %.9g", nt, col,
           (double)gw[col], (double)gb[col], rw, rb);
  }
  for (int k = 0; k < 5; k++) clembed_matrix_release(gm[k]);
  clembed_matrix *m[6] = {&t, &pt, &st, &g, &nw, &nb};
  for (int k = 0; k < 6; k++) clembed_matrix_release(m[k]);
  clembed_ids_release(&di);
  clembed_ids_release(&ds_ids);
  free(h);
  free(ids);
  free(sids);
  *bytes = total;
  return all;
}

/* A device that ends a work-item's loops after loop_limit iterations (llvmpipe):
 * the norm's gradients walk the tokens in launches below it, with the same
 * bits as one launch; a sort and fold that could pass it is refused before
 * anything is written. On a device with the limit, the norm's gradients of
 * more tokens than it are checked against float64 (garbage before). */
TU_CASE(loop_limit_parts) {
  clembed_context *c = NULL;
  OK(c, make(NULL, &c));
  uint64_t limit = 0;
  OK(c, clembed_tuning_value(c, "loop_limit", &limit));
  float gw[32], gb[32];
  size_t n0 = 0, n1 = 0;
  if (limit) { /* this device's own limit: more tokens than it in the norm's sums */
    uint8_t *big = bert_backward(c, (limit - 1024) / 2, &n0, gw, gb);
    free(big);
  }
  uint8_t *want = bert_backward(c, 900, &n0, gw, gb);
  clembed_context_destroy(c);
  OK(c, make_tuned(NULL, "loop_limit=3000", &c));
  uint8_t *got = bert_backward(c, 900, &n1, gw, gb);
  size_t diff = 0;
  for (size_t i = 0; i < n0 && i < n1; i++) diff += got[i] != want[i];
  EXPECT(n0 == n1 && diff == 0, "%zu of %zu gradient bytes differ with the sums in parts", diff, n0);
  free(want);
  free(got);
  /* a backward of more ids than (3000 - 1024) / 2: refused, the gradient untouched */
  enum { N = 1000, D = 8, V = 10 };
  float *h = malloc(N * D * sizeof *h), dw_before[V * D], dw_after[V * D];
  for (size_t i = 0; i < N * D; i++) h[i] = (float)(i % 13) - 6.0f;
  for (size_t i = 0; i < V * D; i++) dw_before[i] = (float)i;
  int32_t ids[N];
  for (size_t i = 0; i < N; i++) ids[i] = (int32_t)(i % V);
  clembed_matrix g = {0}, dw = {0};
  clembed_ids di = {0};
  OK(c, clembed_matrix_create(c, N, D, CLEMBED_F32, &g));
  OK(c, clembed_matrix_write(c, &g, h, CLEMBED_F32));
  OK(c, clembed_matrix_create(c, V, D, CLEMBED_F32, &dw));
  OK(c, clembed_matrix_write(c, &dw, dw_before, CLEMBED_F32));
  OK(c, clembed_ids_create(c, ids, N, CLEMBED_I32, &di));
  clembed_status s = clembed_backward(c, &g, &di, NULL, &dw, 0, NULL, NULL);
  clembed_error_detail det;
  clembed_context_error(c, &det);
  EXPECT(s == CLEMBED_ERR_UNSUPPORTED && !strcmp(det.argument, "ids") && det.value == N &&
             strstr(clembed_context_message(c), "loop_limit"),
         "a fold past the loop limit: %s (%s)", clembed_status_string(s), clembed_context_message(c));
  OK(c, clembed_matrix_read(c, &dw, dw_after, CLEMBED_F32));
  EXPECT(!memcmp(dw_before, dw_after, sizeof dw_after), "the refused backward wrote its gradient");
  clembed_matrix_release(&g);
  clembed_matrix_release(&dw);
  clembed_ids_release(&di);
  free(h);
  clembed_context_destroy(c);
}

/* norm_bwd_strided_rows: the backward's rows take their own count of
 * sequences per work-item where positions are shared (norm_strided_rows is
 * the forward's): BERT's backward of 1,700 tokens in sequences of 500 (a
 * partial last) gives the same bytes with 1, 2 and 16 sequences a work-item
 * (and 0, the GPU shape there) as with 4, and with the forward's count changed
 * alone. */
TU_CASE(norm_bwd_rows_same_bits) {
  static const char *const tunes[] = {
      "norm_rows=4,norm_strided_rows=4,norm_bwd_strided_rows=4", "norm_rows=4,norm_strided_rows=4,norm_bwd_strided_rows=1",
      "norm_rows=4,norm_strided_rows=4,norm_bwd_strided_rows=2", "norm_rows=4,norm_strided_rows=4,norm_bwd_strided_rows=16",
      "norm_rows=4,norm_strided_rows=1,norm_bwd_strided_rows=4",
      "norm_rows=4,norm_strided_rows=4,norm_bwd_strided_rows=0"}; /* (0: the GPU shape's backward) */
  float gw[32], gb[32];
  size_t n0 = 0;
  uint8_t *want = NULL;
  for (size_t k = 0; k < sizeof tunes / sizeof tunes[0]; k++) {
    clembed_context *c = NULL;
    OK(c, make_tuned(NULL, tunes[k], &c));
    if (!c) break;
    size_t n1 = 0;
    uint8_t *got = bert_backward(c, 1700, &n1, gw, gb);
    clembed_context_destroy(c);
    if (!want) {
      want = got;
      n0 = n1;
      continue;
    }
    size_t diff = 0;
    for (size_t i = 0; i < n0 && i < n1; i++) diff += got[i] != want[i];
    EXPECT(n0 == n1 && diff == 0, "%s: %zu of %zu gradient bytes differ from %s", tunes[k], diff, n0, tunes[0]);
    free(got);
  }
  free(want);
}

/* the temporary files and their directory go */
static void teardown(clembed_context *ctx) {
  (void)ctx;
  static const char *const names[] = {"user.conf", "bad.conf", "shapes.conf"};
  char path[600];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
  rmdir(dir);
}

int main(int argc, char **argv) {
  return tu_main(argc, argv, (tu_suite){.name = "test_tuning", .device = 1, .setup = setup, .teardown = teardown,
                                        .case_timeout_s = 300});
}
