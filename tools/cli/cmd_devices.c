/* clembed devices: the platforms and devices, the default marked. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: clembed devices [--device SPEC]\n"
    "\n"
    "Lists the OpenCL platforms and their devices as P:D pairs for --device, and marks\n"
    "with '*' the device that a run with no --device (or with this --device) uses.\n";

int cli_cmd_devices(int argc, char **argv) {
  cli_flag fl[] = {FV("--device")};
  cli_parse_flags(argc, argv, fl, NFLAGS(fl), usage);
  const char *spec = VAL("--device");

  cl_uint np = 0;
  cl_int err = clGetPlatformIDs(0, NULL, &np);
  if (err != CL_SUCCESS && err != -1001 /* CL_PLATFORM_NOT_FOUND_KHR */)
    cli_fail(2, "listing the OpenCL platforms failed: clGetPlatformIDs: %s", clembed_status_string((clembed_status)err));
  if (np == 0)
    cli_fail(2, "no OpenCL platform is installed (the ICD loader found none; on Debian: apt-get install "
                "pocl-opencl-icd)");
  cl_platform_id *plats = cli_malloc(np * sizeof *plats);
  err = clGetPlatformIDs(np, plats, NULL);
  if (err != CL_SUCCESS) cli_fail(2, "clGetPlatformIDs: %s", clembed_status_string((clembed_status)err));

  /* The device a context with this spec gets. */
  cl_device_id chosen = NULL;
  clembed_status s = clembed_context_create(spec, &cli_ctx);
  if (s == CLEMBED_OK) {
    clGetCommandQueueInfo(clembed_context_queue(cli_ctx), CL_QUEUE_DEVICE, sizeof chosen, &chosen, NULL);
  } else {
    cli_ctx = NULL;
    if (spec && *spec) {
      const char *why = s == CLEMBED_ERR_NO_DEVICE ? cli_no_device_reason() : NULL;
      if (why) cli_fail(2, "no OpenCL device found: %s", why);
      cli_fail(s == CLEMBED_ERR_INVALID_ARGUMENT ? 1 : 2, "--device %s: %s (%s)", spec,
               clembed_last_error_message(), clembed_status_string(s));
    }
  }
  char failed[1024] = "";
  size_t total = 0;
  for (cl_uint p = 0; p < np; p++) {
    char pname[256] = "", pver[256] = "";
    clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
    clGetPlatformInfo(plats[p], CL_PLATFORM_VERSION, sizeof pver - 1, pver, NULL);
    printf("platform %u: %s (%s)\n", p, pname, pver);
    cl_uint nd = 0;
    err = clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd);
    if (err != CL_SUCCESS || nd == 0) {
      if (err == CL_SUCCESS || err == CL_DEVICE_NOT_FOUND) printf("    (no devices)\n");
      else printf("    (listing its devices failed: %s)\n", clembed_status_string((clembed_status)err));
      size_t used = strlen(failed);
      snprintf(failed + used, sizeof failed - used, "%s%s", used ? ", " : "", pname);
      continue;
    }
    cl_device_id *devs = cli_malloc(nd * sizeof *devs);
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, nd, devs, NULL) != CL_SUCCESS) nd = 0;
    for (cl_uint d = 0; d < nd; d++) {
      char dname[256] = "", dver[256] = "";
      cl_device_type type = 0;
      cl_ulong mem = 0;
      cl_uint cus = 0;
      clGetDeviceInfo(devs[d], CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_VERSION, sizeof dver - 1, dver, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
      const char *tname = (type & CL_DEVICE_TYPE_GPU)           ? "GPU"
                          : (type & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator"
                          : (type & CL_DEVICE_TYPE_CPU)         ? "CPU"
                                                                : "other";
      printf("  %c %u:%u  %s  [%s, %u compute units, %.1f GiB, %s]\n", devs[d] == chosen ? '*' : ' ', p, d,
             dname, tname, cus, (double)mem / (1024.0 * 1024.0 * 1024.0), dver);
      total++;
    }
  }
  if (total == 0) {
    const char *why = cli_no_device_reason();
    if (why) cli_fail(2, "no OpenCL device found: %s", why);
    cli_fail(2, "no OpenCL device found: the platform%s %s list%s none", np > 1 ? "s" : "", failed,
             np > 1 ? "" : "s");
  }
  if (chosen)
    printf("* %s: %s\n", spec && *spec ? "--device" : "default", clembed_context_device_name(cli_ctx));
  else
    fprintf(stderr, "%s: no default device: %s (%s)\n", cli_cmd, clembed_last_error_message(),
            clembed_status_string(s));
  cli_release_all();
  return 0;
}
