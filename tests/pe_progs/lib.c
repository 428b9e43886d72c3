/* patchkit tests: a minimal DLL (pe-stack must refuse it unless --allow-dll). */
__declspec(dllexport) int patchkit_answer(void) { return 42; }
