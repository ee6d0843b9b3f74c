#!/usr/bin/env bash
# The kernels' house rules (docs/design.md, "Kernels and tuning"), checked on
# the sources:
#  - one kernel per shape: no #if, #ifdef, #ifndef or #elif inside a kernel's
#    body in cl/ops/ (a call's features are -D values that select helpers
#    defined outside the kernels; a shape is a kernel of its own, named by the
#    host);
#  - every kernel name the library asks for (a "ce_..." string in src/) is a
#    kernel of cl/ops/;
#  - every kernel of cl/ops/ is named in docs/design.md, where a reader finds
#    the code a device runs.
#   test_kernels.sh SOURCE_DIR
set -u
src=${1:?usage: test_kernels.sh SOURCE_DIR}
failures=0
fail() {
  failures=$((failures + 1))
  echo "FAILED: $*" >&2
}
kernels=$(grep -ho '__kernel void [a-z0-9_]*' "$src"/cl/ops/*.cl | awk '{print $3}' | sort -u)
[ -n "$kernels" ] || fail "no kernel found in $src/cl/ops"
# a kernel's body: from its __kernel line to the first line that is "}"
for f in "$src"/cl/ops/*.cl; do
  while IFS= read -r hit; do
    fail "$hit"
  done < <(awk -v F="${f#"$src"/}" '
    /^__kernel/ { body = 1; name = $3; sub(/\(.*/, "", name) }
    body && /^[ \t]*#[ \t]*(if|ifdef|ifndef|elif)([ \t(]|$)/ { print F ":" FNR ": #if inside kernel " name ": " $0 }
    body && /^}/ { body = 0 }' "$f")
done
# strings in src/ that are not kernels' names
not_kernels="ce_record_error"
for name in $(grep -rhoE '"ce_[a-z0-9_]+"' "$src/src" | tr -d '"' | sort -u); do
  case " $not_kernels " in *" $name "*) continue ;; esac
  grep -qx "$name" <<<"$kernels" || fail "src/ asks for kernel $name, which no cl/ops/ file defines"
done
for k in $kernels; do
  grep -qw "$k" "$src/docs/design.md" || fail "kernel $k is not named in docs/design.md"
done
echo "test_kernels: $(wc -w <<<"$kernels") kernels, $failures failed"
[ "$failures" -eq 0 ]
