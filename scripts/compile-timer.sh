#!/usr/bin/env bash
# A compiler launcher that logs the CPU time (user + system) of each compile or link command: one
# line "<cpu s> <user s> <sys s> <wall s> <output file>" appended to $STRATA_COMPILE_LOG (default
# compile-times.log in the working directory). CPU time, unlike wall time, does not depend on what
# else the machine is running. Use it for the per-unit tables of docs/perf-notes.md:
#
#   cmake --preset release -B build/timed -DCMAKE_CXX_COMPILER_LAUNCHER=$PWD/scripts/compile-timer.sh \
#         -DCMAKE_CUDA_COMPILER_LAUNCHER=$PWD/scripts/compile-timer.sh
#   STRATA_COMPILE_LOG=$PWD/build/timed/compile-times.log nice make -C build/timed -j2
#   sort -rn build/timed/compile-times.log | head -20
log=${STRATA_COMPILE_LOG:-compile-times.log}
out=""
prev=""
for arg in "$@"; do
  [[ $prev == "-o" ]] && out=$arg
  prev=$arg
done
stats=$(mktemp)
/usr/bin/time -f '%U %S %e' -o "$stats" "$@"
rc=$?
read -r user sys wall < <(tail -1 "$stats")
rm -f "$stats"
awk -v u="$user" -v s="$sys" -v w="$wall" -v o="${out:-$*}" \
    'BEGIN { printf "%.2f %.2f %.2f %.2f %s\n", u + s, u, s, w, o }' >> "$log"
exit $rc
