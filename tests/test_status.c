/* Status strings and version: every code has its own fixed string. */
#include "test_util.h"

TU_CASE(known_codes_have_their_names) {
  const struct { int code; const char *name; } known[] = {
      {CLEMBED_OK, "CLEMBED_OK"},
      {CLEMBED_ERR_INVALID_ARGUMENT, "CLEMBED_ERR_INVALID_ARGUMENT"},
      {CLEMBED_ERR_INDEX_OUT_OF_RANGE, "CLEMBED_ERR_INDEX_OUT_OF_RANGE"},
      {CLEMBED_ERR_NO_DEVICE, "CLEMBED_ERR_NO_DEVICE"},
      {CLEMBED_ERR_BUILD_FAILED, "CLEMBED_ERR_BUILD_FAILED"},
      {CLEMBED_ERR_OUT_OF_MEMORY, "CLEMBED_ERR_OUT_OF_MEMORY"},
      {CLEMBED_ERR_UNSUPPORTED, "CLEMBED_ERR_UNSUPPORTED"},
      {CLEMBED_ERR_COMMUNICATION, "CLEMBED_ERR_COMMUNICATION"},
      {CLEMBED_ERR_FILE, "CLEMBED_ERR_FILE"},
      {CL_INVALID_VALUE, "CL_INVALID_VALUE"},
      {CL_DEVICE_NOT_FOUND, "CL_DEVICE_NOT_FOUND"},
      {CL_BUILD_PROGRAM_FAILURE, "CL_BUILD_PROGRAM_FAILURE"},
      {CL_INVALID_EVENT_WAIT_LIST, "CL_INVALID_EVENT_WAIT_LIST"},
      {CL_INVALID_KERNEL_ARGS, "CL_INVALID_KERNEL_ARGS"},
      {CL_OUT_OF_RESOURCES, "CL_OUT_OF_RESOURCES"},
      {CL_MEM_OBJECT_ALLOCATION_FAILURE, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
  };
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
    const char *s = clembed_status_string((clembed_status)known[i].code);
    EXPECT(s && !strcmp(s, known[i].name), "code %d gives '%s', expected '%s'", known[i].code, s ? s : "(null)",
           known[i].name);
  }
}

/* every OpenCL code from -1 to -72 and every clembed code has a distinct string */
TU_CASE(opencl_codes_have_distinct_strings) {
  const char *seen[80] = {0};
  int n = 0;
  for (int c = -72; c <= 0; c++) {
    const char *s = clembed_status_string((clembed_status)c);
    EXPECT(s != NULL, "code %d gives NULL", c);
    if (!s || !strcmp(s, "CLEMBED_UNKNOWN_STATUS")) continue; /* -20..-29 are unassigned in OpenCL */
    for (int j = 0; j < n; j++) EXPECT(strcmp(seen[j], s) != 0, "code %d repeats '%s'", c, s);
    if (n < 80) seen[n++] = s;
  }
  EXPECT(n >= 60, "only %d named OpenCL codes", n);
}

TU_CASE(clembed_codes_are_named) {
  for (int c = -2007; c <= -2001; c++)
    EXPECT(strncmp(clembed_status_string((clembed_status)c), "CLEMBED_ERR_", 12) == 0, "code %d", c);
}

/* clembed_context_fail without a context: this thread's message and detail */
TU_CASE(context_fail_without_context) {
  clembed_status s = clembed_context_fail(NULL, CLEMBED_ERR_COMMUNICATION, "clembed_mpi_embed", "comm", 3, -7,
                                          "rank %d: %s", 2, "MPI_ERR_TRUNCATE");
  EXPECT(s == CLEMBED_ERR_COMMUNICATION, "returned %d", (int)s);
  EXPECT(!strcmp(clembed_last_error_message(), "rank 2: MPI_ERR_TRUNCATE"), "message '%s'", clembed_last_error_message());
  clembed_error_detail d;
  EXPECT(clembed_context_error(NULL, &d) == CLEMBED_OK, "detail");
  EXPECT(d.status == CLEMBED_ERR_COMMUNICATION && !strcmp(d.operation, "clembed_mpi_embed") &&
             !strcmp(d.argument, "comm") && d.index == 3 && d.value == -7,
         "detail %d %s %s %lld %lld", (int)d.status, d.operation, d.argument, (long long)d.index, (long long)d.value);
  clembed_context_fail(NULL, CLEMBED_ERR_INVALID_ARGUMENT, NULL, NULL, -1, 0, "x");
  clembed_context_error(NULL, &d);
  EXPECT(!strcmp(d.operation, "") && !strcmp(d.argument, ""), "NULL strings give \"\"");
}

TU_CASE(unknown_codes_are_unknown_status) {
  EXPECT(!strcmp(clembed_status_string((clembed_status)12345), "CLEMBED_UNKNOWN_STATUS"), "unknown code");
  EXPECT(!strcmp(clembed_status_string((clembed_status)-2000), "CLEMBED_UNKNOWN_STATUS"), "unknown code");
}

TU_CASE(version_number_matches_macros) {
  EXPECT(clembed_version_number() == CLEMBED_VERSION_NUMBER, "version %u", clembed_version_number());
  EXPECT(CLEMBED_VERSION_NUMBER ==
             CLEMBED_VERSION_MAJOR * 10000 + CLEMBED_VERSION_MINOR * 100 + CLEMBED_VERSION_PATCH,
         "version macro");
}

/* the NULL-accepting functions */
TU_CASE(release_functions_accept_null) {
  clembed_context_destroy(NULL);
  clembed_matrix_release(NULL);
  clembed_ids_release(NULL);
  EXPECT(clembed_context_queue(NULL) == NULL, "queue of NULL");
  EXPECT(!strcmp(clembed_context_message(NULL), ""), "message of NULL");
  EXPECT(!strcmp(clembed_context_device_name(NULL), ""), "name of NULL");
  EXPECT(clembed_finish(NULL) == CLEMBED_ERR_INVALID_ARGUMENT, "finish(NULL)");
}

TU_CASE(dtype_sizes) {
  EXPECT(clembed_dtype_size(CLEMBED_F32) == 4 && clembed_dtype_size(CLEMBED_F16) == 2 &&
             clembed_dtype_size(CLEMBED_BF16) == 2 && clembed_dtype_size((clembed_dtype)3) == 0,
         "dtype sizes");
}

int main(int argc, char **argv) { return tu_main(argc, argv, (tu_suite){.name = "test_status"}); }
