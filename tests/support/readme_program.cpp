// The README's "Compose a trainer" program, generated from README.md at build time
// (tests/CMakeLists.txt): the document's code is the program, so the two cannot drift.
#include "readme_program.inc"
