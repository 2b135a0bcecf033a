#!/usr/bin/env bash
# The hardened build (docs/security.md): the ferry binary under test is a PIE with full RELRO
# and BIND_NOW, a non-executable stack, stack protector calls and CET (IBT/SHSTK) notes on
# x86-64; an optimized, non-sanitizer build also calls the _FORTIFY_SOURCE checked functions
# (__*_chk). The build type is read from the CMake cache beside the binary.
source "$(dirname "$0")/lib.sh"
command -v readelf > /dev/null || fail "readelf is needed (binutils)"
B="$FERRY_BIN"
readelf -h "$B" | grep -q 'Type:.*DYN' || fail "not a PIE: $(readelf -h "$B" | grep Type)"
readelf -lW "$B" | grep -q 'GNU_RELRO' || fail "no RELRO segment"
readelf -dW "$B" | grep -Eq '\(FLAGS\).*BIND_NOW|\(BIND_NOW\)' || fail "no BIND_NOW"
readelf -dW "$B" | grep -Eq '\(FLAGS_1\).*NOW' || fail "no FLAGS_1 NOW"
readelf -lW "$B" | grep 'GNU_STACK' | grep -q 'RW ' || fail "the stack is executable: $(readelf -lW "$B" | grep GNU_STACK)"
readelf -sW --dyn-syms "$B" | grep -q '__stack_chk_fail' || fail "no stack protector"
pass "PIE, full RELRO with BIND_NOW, non-executable stack, stack protector"
# CET: the linker keeps the IBT/SHSTK property only when every linked object has it, and some
# Debian libraries linked statically do not; so ferry's own objects are checked.
lib="$(dirname "$B")/libferry.a"
if [ "$(uname -m)" = x86_64 ] && [ -f "$lib" ]; then
  total=$(ar t "$lib" | grep -c '\.o$')
  cet=$(readelf -nW "$lib" | grep -c 'x86 feature: IBT, SHSTK' || true)
  [ "$cet" = "$total" ] || fail "CET notes in $cet of $total engine objects"
  pass "CET (-fcf-protection): IBT and SHSTK in all $total engine objects"
fi
cache="$(dirname "$B")/CMakeCache.txt"
type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$cache" 2>/dev/null || true)
san=$(grep -E '^FERRY_(SANITIZE|TSAN|FUZZ):BOOL=ON' "$cache" 2>/dev/null || true)
if [ -n "$type" ] && [ "$type" != Debug ] && [ -z "$san" ]; then
  n=$(readelf -sW --dyn-syms "$B" | grep -Ec '__[a-z0-9_]+_chk(@|$)' || true)
  [ "$n" -ge 3 ] || fail "$type build without _FORTIFY_SOURCE checked calls ($n)"
  pass "$type build: _FORTIFY_SOURCE ($n checked functions)"
else
  pass "build type ${type:-unknown}${san:+ (sanitizers)}: _FORTIFY_SOURCE applies to optimized builds only"
fi
