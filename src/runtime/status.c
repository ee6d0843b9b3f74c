/* The one status list (an X-macro): every code clembed returns, its own
 * (OWN) and OpenCL's (X), with its value. The header's enum is the contract's text; the list is
 * checked against it at compile time, and gives each code its fixed string. */
#include "runtime.h"

#define CE_STATUS_LIST(OWN, X)                      \
  OWN(CLEMBED_OK, 0)                                  \
  OWN(CLEMBED_ERR_INVALID_ARGUMENT, -2001)            \
  OWN(CLEMBED_ERR_INDEX_OUT_OF_RANGE, -2002)          \
  OWN(CLEMBED_ERR_NO_DEVICE, -2003)                   \
  OWN(CLEMBED_ERR_BUILD_FAILED, -2004)                \
  OWN(CLEMBED_ERR_OUT_OF_MEMORY, -2005)               \
  OWN(CLEMBED_ERR_UNSUPPORTED, -2006)                 \
  OWN(CLEMBED_ERR_COMMUNICATION, -2007)               \
  OWN(CLEMBED_ERR_FILE, -2008)                        \
  X(CL_DEVICE_NOT_FOUND, -1)                        \
  X(CL_DEVICE_NOT_AVAILABLE, -2)                    \
  X(CL_COMPILER_NOT_AVAILABLE, -3)                  \
  X(CL_MEM_OBJECT_ALLOCATION_FAILURE, -4)           \
  X(CL_OUT_OF_RESOURCES, -5)                        \
  X(CL_OUT_OF_HOST_MEMORY, -6)                      \
  X(CL_PROFILING_INFO_NOT_AVAILABLE, -7)            \
  X(CL_MEM_COPY_OVERLAP, -8)                        \
  X(CL_IMAGE_FORMAT_MISMATCH, -9)                   \
  X(CL_IMAGE_FORMAT_NOT_SUPPORTED, -10)             \
  X(CL_BUILD_PROGRAM_FAILURE, -11)                  \
  X(CL_MAP_FAILURE, -12)                            \
  X(CL_MISALIGNED_SUB_BUFFER_OFFSET, -13)           \
  X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, -14) \
  X(CL_COMPILE_PROGRAM_FAILURE, -15)                \
  X(CL_LINKER_NOT_AVAILABLE, -16)                   \
  X(CL_LINK_PROGRAM_FAILURE, -17)                   \
  X(CL_DEVICE_PARTITION_FAILED, -18)                \
  X(CL_KERNEL_ARG_INFO_NOT_AVAILABLE, -19)          \
  X(CL_INVALID_VALUE, -30)                          \
  X(CL_INVALID_DEVICE_TYPE, -31)                    \
  X(CL_INVALID_PLATFORM, -32)                       \
  X(CL_INVALID_DEVICE, -33)                         \
  X(CL_INVALID_CONTEXT, -34)                        \
  X(CL_INVALID_QUEUE_PROPERTIES, -35)               \
  X(CL_INVALID_COMMAND_QUEUE, -36)                  \
  X(CL_INVALID_HOST_PTR, -37)                       \
  X(CL_INVALID_MEM_OBJECT, -38)                     \
  X(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR, -39)        \
  X(CL_INVALID_IMAGE_SIZE, -40)                     \
  X(CL_INVALID_SAMPLER, -41)                        \
  X(CL_INVALID_BINARY, -42)                         \
  X(CL_INVALID_BUILD_OPTIONS, -43)                  \
  X(CL_INVALID_PROGRAM, -44)                        \
  X(CL_INVALID_PROGRAM_EXECUTABLE, -45)             \
  X(CL_INVALID_KERNEL_NAME, -46)                    \
  X(CL_INVALID_KERNEL_DEFINITION, -47)              \
  X(CL_INVALID_KERNEL, -48)                         \
  X(CL_INVALID_ARG_INDEX, -49)                      \
  X(CL_INVALID_ARG_VALUE, -50)                      \
  X(CL_INVALID_ARG_SIZE, -51)                       \
  X(CL_INVALID_KERNEL_ARGS, -52)                    \
  X(CL_INVALID_WORK_DIMENSION, -53)                 \
  X(CL_INVALID_WORK_GROUP_SIZE, -54)                \
  X(CL_INVALID_WORK_ITEM_SIZE, -55)                 \
  X(CL_INVALID_GLOBAL_OFFSET, -56)                  \
  X(CL_INVALID_EVENT_WAIT_LIST, -57)                \
  X(CL_INVALID_EVENT, -58)                          \
  X(CL_INVALID_OPERATION, -59)                      \
  X(CL_INVALID_GL_OBJECT, -60)                      \
  X(CL_INVALID_BUFFER_SIZE, -61)                    \
  X(CL_INVALID_MIP_LEVEL, -62)                      \
  X(CL_INVALID_GLOBAL_WORK_SIZE, -63)               \
  X(CL_INVALID_PROPERTY, -64)                       \
  X(CL_INVALID_IMAGE_DESCRIPTOR, -65)               \
  X(CL_INVALID_COMPILER_OPTIONS, -66)               \
  X(CL_INVALID_LINKER_OPTIONS, -67)                 \
  X(CL_INVALID_DEVICE_PARTITION_COUNT, -68)         \
  X(CL_INVALID_PIPE_SIZE, -69)                      \
  X(CL_INVALID_DEVICE_QUEUE, -70)                   \
  X(CL_INVALID_SPEC_ID, -71)                        \
  X(CL_MAX_SIZE_RESTRICTION_EXCEEDED, -72)          \
  X(CL_PLATFORM_NOT_FOUND_KHR, -1001) /* cl_khr_icd */

/* clembed's own codes (OWN) agree with the header's enum; the others (X) are
 * OpenCL's, some newer than the headers this builds with. */
#define CE_STATUS_AGREES(name, value) _Static_assert((int)(name) == (value), #name " is " #value);
#define CE_STATUS_IGNORE(name, value)
CE_STATUS_LIST(CE_STATUS_AGREES, CE_STATUS_IGNORE)
#undef CE_STATUS_AGREES
#undef CE_STATUS_IGNORE

const char *clembed_status_string(clembed_status s) {
  switch ((int)s) {
#define CE_STATUS_CASE(name, value) \
  case value:                       \
    return #name;
    CE_STATUS_LIST(CE_STATUS_CASE, CE_STATUS_CASE)
#undef CE_STATUS_CASE
    default:
      return "CLEMBED_UNKNOWN_STATUS";
  }
}

unsigned clembed_version_number(void) { return CLEMBED_VERSION_NUMBER; }
