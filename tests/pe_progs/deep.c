/* patchkit tests: recurse through about 8 MiB of stack on the main thread.
 *
 * Like ggml-rpc's add_tensor recursion in tensor split: it overflows the 2 MiB
 * default stack reserve of mingw executables and succeeds after
 * `patchkit pe-stack deep.exe --reserve 256MiB`.
 * The frame holds a volatile 1 KiB buffer and the result depends on every
 * level, so the compiler can neither shrink the frames nor turn the recursion
 * into a loop.
 */
#include <stdio.h>
#include <stdlib.h>

#define FRAME 1024

static unsigned long descend(int depth) {
    volatile unsigned char buf[FRAME];
    buf[0] = (unsigned char)depth;
    buf[FRAME - 1] = (unsigned char)(depth >> 8);
    if (depth == 0) {
        return buf[0];
    }
    unsigned long below = descend(depth - 1);
    return below + buf[0] + buf[FRAME - 1];
}

int main(int argc, char **argv) {
    /* 8192 levels * (1 KiB + frame overhead) > 8 MiB */
    int depth = argc > 1 ? atoi(argv[1]) : 8192;
    unsigned long sum = descend(depth);
    printf("deep ok depth=%d sum=%lu\n", depth, sum);
    return 0;
}
