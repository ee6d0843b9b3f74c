/* The one list of OpenCL sources. It makes the kernel-family enum (runtime.h),
 * the file each family's program ends with and the helpers every program starts
 * with (program.c), and CMake's list of embedded sources (CMakeLists.txt reads
 * the entries below: keep one X or L entry per line, and the
 * comments free of that spelling).
 *
 * A kernel family is one cl/ops/NAME.cl; CE_FAMILY_ID is its enum value.
 * A helper is one cl/lib/NAME.cl; every program is the helpers in this order,
 * then its family's file. */
#ifndef CLEMBED_FAMILIES_H
#define CLEMBED_FAMILIES_H

#define CE_FAMILIES(X)    \
  X(FORWARD, forward)     \
  X(POSITIONAL, positional) \
  X(SORT, sort)           \
  X(BACKWARD, backward)   \
  X(INIT, init)           \
  X(UTIL, util)           \
  X(ROPE, rope)           \
  X(NORM, norm)           \
  X(BAG, bag)

#define CE_LIB_SOURCES(L) \
  L(loadstore)            \
  L(pieces)               \
  L(iqtables)             \
  L(quant)                \
  L(report)               \
  L(ids)                  \
  L(philox)               \
  L(angle)                \
  L(exactmath)            \
  L(rowsum)

#endif
