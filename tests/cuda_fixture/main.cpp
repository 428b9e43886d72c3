// Links the CUDA library; never run by the tests (there is no GPU on CI).
extern "C" int fix_launch(float *x, float a, int n);

int main(int argc, char **argv) {
    (void) argv;
    return argc > 99 ? fix_launch(nullptr, 1.0f, 0) : 0;
}
