#!/usr/bin/env bash
# The licence: LICENSE holds the MIT licence with the project's copyright line,
# and every place a user or a packager looks names it: README, the CMake
# package (installed with the documentation, CLEMBED_LICENSE in the package
# config), clembed.pc and the Python package's pyproject.toml. (tests/install
# checks the installed files.)
#   test_license.sh SOURCE_DIR
set -u
src=${1:?usage: test_license.sh SOURCE_DIR}
failures=0
fail() {
  failures=$((failures + 1))
  echo "FAILED: $*" >&2
}
[ "$(head -n 1 "$src/LICENSE" 2>/dev/null)" = "MIT License" ] || fail "LICENSE does not start with 'MIT License'"
grep -qx "Copyright (c) 2026 the clembed authors" "$src/LICENSE" 2>/dev/null ||
  fail "LICENSE lacks the line 'Copyright (c) 2026 the clembed authors'"
grep -q "Permission is hereby granted, free of charge" "$src/LICENSE" 2>/dev/null || fail "LICENSE lacks the MIT text"
grep -q "MIT licence" "$src/README.md" && grep -q "(LICENSE)" "$src/README.md" ||
  fail "README does not name the licence and link LICENSE"
grep -q 'install(FILES LICENSE' "$src/CMakeLists.txt" || fail "CMake does not install LICENSE"
grep -q 'set(CLEMBED_LICENSE "MIT")' "$src/cmake/clembedConfig.cmake.in" || fail "the package config does not name the licence"
grep -q "SPDX: MIT" "$src/cmake/clembed.pc.in" || fail "clembed.pc does not name the licence"
grep -q '^license = { text = "MIT" }' "$src/python/pyproject.toml" || fail "pyproject.toml's license is not MIT"
grep -q '"License :: OSI Approved :: MIT License"' "$src/python/pyproject.toml" || fail "pyproject.toml lacks the classifier"
echo "test_license: $failures failed"
[ "$failures" -eq 0 ]
