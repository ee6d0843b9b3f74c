/* clembed devices: the devices (clembed_devices) by platform, the default marked. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: clembed devices [--json] [--device SPEC]\n"
    "\n"
    "Lists the OpenCL devices, by platform, as P:D pairs for --device, and marks with\n"
    "'*' the device that a run with no --device (or with this --device) uses. Under each,\n"
    "its tuning: the entries of the tuning database it runs with and where each came\n"
    "from (built in, or the user's file that `clembed tune` writes; docs/tuning.md);\n"
    "a tuning file that cannot be read or parsed is left out, with a warning line.\n"
    "  --json          an array of {\"spec\", \"platform\", \"name\", \"type\" (gpu, cpu,\n"
    "                  accelerator or other), \"is_default\", \"selected\" (the device marked\n"
    "                  '*'), \"global_mem_bytes\", \"max_alloc_bytes\", \"tuning\", and\n"
    "                  \"tuning_warning\" where the user's tuning file was not read} instead\n"
    "  --device SPEC   mark the device this spec picks (a bad spec is exit 1 or 2, as for\n"
    "                  every subcommand)\n";

static const char *type_name(cl_device_type t) {
  return (t & CL_DEVICE_TYPE_GPU)           ? "GPU"
         : (t & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator"
         : (t & CL_DEVICE_TYPE_CPU)         ? "CPU"
                                            : "other";
}

/* The same for --json. */
static const char *type_key(cl_device_type t) {
  return (t & CL_DEVICE_TYPE_GPU)           ? "gpu"
         : (t & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator"
         : (t & CL_DEVICE_TYPE_CPU)         ? "cpu"
                                            : "other";
}

/* The tuning a context on the device `spec` runs with, or why no context was
 * made; in warn, why the user's tuning file was left out ("" if it was not). */
static void tuning_of(const char *spec, char *buf, size_t cap, char *warn, size_t wcap) {
  clembed_context *ctx = NULL;
  clembed_status s = clembed_context_create(spec, &ctx);
  warn[0] = 0;
  if (s == CLEMBED_OK) {
    snprintf(buf, cap, "%s", clembed_context_tuning(ctx));
    snprintf(warn, wcap, "%s", clembed_context_message(ctx));
  } else {
    snprintf(buf, cap, "(no context: %s)", clembed_last_error_message());
  }
  clembed_context_destroy(ctx);
}

int cli_cmd_devices(int argc, char **argv) {
  cli_flag fl[] = {FS("--json"), FV("--device")};
  cli_parse_flags(argc, argv, fl, NFLAGS(fl), usage);
  const char *spec = VAL("--device");

  size_t n = 0;
  clembed_status s = clembed_devices(NULL, 0, &n);
  if (s != CLEMBED_OK) cli_fail(2, "%s (%s)", clembed_last_error_message(), clembed_status_string(s));
  if (n == 0) cli_fail(2, "no OpenCL device found: %s", cli_no_device_reason());
  clembed_device_info *list = cli_malloc(n * sizeof *list);
  s = clembed_devices(list, n, &n);
  if (s != CLEMBED_OK) cli_fail(2, "%s (%s)", clembed_last_error_message(), clembed_status_string(s));

  /* with --device, the device that spec picks (a context on it) */
  long chosen = -1;
  if (spec && *spec) {
    cli_open_device(spec);
    chosen = cli_context_device(list, n);
  } else {
    for (size_t i = 0; i < n; i++)
      if (list[i].is_default) chosen = (long)i;
  }
  char tuning[1024], warn[1536];
  if (GIVEN("--json")) {
    printf("[");
    for (size_t i = 0; i < n; i++) {
      tuning_of(list[i].spec, tuning, sizeof tuning, warn, sizeof warn);
      printf("%s{\"spec\": ", i ? ", " : "");
      cli_json_string(list[i].spec);
      printf(", \"platform\": ");
      cli_json_string(list[i].platform);
      printf(", \"name\": ");
      cli_json_string(list[i].name);
      printf(", \"type\": \"%s\", \"is_default\": %s, \"selected\": %s, \"global_mem_bytes\": %llu, "
             "\"max_alloc_bytes\": %llu, \"tuning\": ",
             type_key(list[i].type), list[i].is_default ? "true" : "false", (long)i == chosen ? "true" : "false",
             (unsigned long long)list[i].global_mem_bytes, (unsigned long long)list[i].max_alloc_bytes);
      cli_json_string(tuning);
      if (warn[0]) {
        printf(", \"tuning_warning\": ");
        cli_json_string(warn);
      }
      printf("}");
    }
    printf("]\n");
    cli_release_all();
    if (fflush(stdout) != 0 || ferror(stdout)) cli_fail(1, "writing to standard output failed");
    return 0;
  }
  const char *last_platform = "";
  for (size_t i = 0; i < n; i++) {
    if (strcmp(list[i].platform, last_platform)) {
      unsigned p = (unsigned)strtoul(list[i].spec, NULL, 10);
      printf("platform %u: %s\n", p, list[i].platform);
      last_platform = list[i].platform;
    }
    printf("  %c %-5s %s  [%s, %.1f GiB, largest buffer %.1f GiB]\n", (long)i == chosen ? '*' : ' ', list[i].spec,
           list[i].name, type_name(list[i].type), (double)list[i].global_mem_bytes / (1024.0 * 1024.0 * 1024.0),
           (double)list[i].max_alloc_bytes / (1024.0 * 1024.0 * 1024.0));
    tuning_of(list[i].spec, tuning, sizeof tuning, warn, sizeof warn);
    printf("          tuning: %s\n", tuning);
    if (warn[0]) printf("          warning: %s\n", warn);
  }
  if (chosen >= 0) {
    printf("* %s: %s / %s\n", spec && *spec ? "--device" : "default", list[chosen].platform, list[chosen].name);
  } else if (!(spec && *spec)) {
    /* devices exist, yet none is the default: what a context on it says */
    clembed_context *ctx = NULL;
    clembed_status c = clembed_context_create(NULL, &ctx);
    clembed_context_destroy(ctx);
    fprintf(stderr, "%s: no default device%s%s\n", cli_cmd, c != CLEMBED_OK ? ": " : "",
            c != CLEMBED_OK ? clembed_last_error_message() : "");
  }
  cli_release_all();
  return 0;
}
