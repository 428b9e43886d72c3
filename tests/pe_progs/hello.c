/* patchkit tests: a minimal console program (tests/test_pe.py builds it with mingw-w64). */
#include <stdio.h>

int main(void) {
    puts("hello from a PE");
    return 0;
}
