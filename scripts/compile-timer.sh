#!/usr/bin/env bash
# A compiler launcher that logs the CPU time (user + system) of each compile or link command: one
# line "<cpu s> <user s> <sys s> <wall s> <output file>" appended to $STRATA_COMPILE_LOG (default
# compile-times.log in the working directory). CPU time, unlike wall time, does not depend on what
# else the machine is running. Use it for the per-unit tables of docs/perf-notes.md:
#
#   cmake --preset release -B build/timed -DCMAKE_CXX_COMPILER_LAUNCHER=$PWD/scripts/compile-timer.sh \
#         -DCMAKE_CUDA_COMPILER_LAUNCHER=$PWD/scripts/compile-timer.sh
#   STRATA_COMPILE_LOG=$PWD/build/timed/compile-times.log nice cmake --build build/timed -j2
#   sort -rn build/timed/compile-times.log | head -20
#
# Bash alone (its `times` builtin and $EPOCHREALTIME, bash 5): no /usr/bin/time needed.
log=${STRATA_COMPILE_LOG:-compile-times.log}
out=""
prev=""
for arg in "$@"; do
  [[ $prev == "-o" ]] && out=$arg
  prev=$arg
done
started=$EPOCHREALTIME
"$@"
rc=$?
ended=$EPOCHREALTIME
# `times` prints this shell's user and system time, then its finished children's: "0m1.250s 0m0.120s"
# (run in this shell: in a $(...) subshell it would see no finished children)
stats=$(mktemp)
times > "$stats"
children=$(tail -1 "$stats")
rm -f "$stats"
awk -v c="$children" -v a="$started" -v b="$ended" -v o="${out:-$*}" '
  function seconds(t,  p) { split(t, p, /[ms]/); return p[1] * 60 + p[2] }
  BEGIN { split(c, f, " "); u = seconds(f[1]); s = seconds(f[2])
          printf "%.2f %.2f %.2f %.2f %s\n", u + s, u, s, b - a, o }' >> "$log"
exit $rc
