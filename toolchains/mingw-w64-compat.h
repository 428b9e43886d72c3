/* patchkit: compatibility shims for older mingw-w64 headers (force-included by
 * toolchains/mingw-w64-x86_64.cmake into every C and C++ compile).
 *
 * Debian 12 ships mingw-w64 v10, whose <processthreadsapi.h> has the
 * ThreadPowerThrottling enum value and SetThreadInformation() but not the
 * THREAD_POWER_THROTTLING_STATE struct nor its two constants. llama.cpp's
 * ggml/src/ggml-cpu/ggml-cpu.c (ggml_thread_apply_priority) uses all of them
 * under `#if _WIN32_WINNT >= 0x0602`. mingw-w64 v11 added them, so the
 * definitions below apply only to v10 and older and never clash with headers
 * that already have them.
 *
 * This file includes no Windows header itself (sources define NOMINMAX /
 * WIN32_LEAN_AND_MEAN before <windows.h>, so pulling it in early would break
 * them); only <_mingw.h>, which every mingw-w64 CRT header includes anyway.
 */
#ifndef PATCHKIT_MINGW_W64_COMPAT_H
#define PATCHKIT_MINGW_W64_COMPAT_H

#if defined(__MINGW32__) && !defined(RC_INVOKED) && !defined(__ASSEMBLER__)
#include <_mingw.h>

#if defined(__MINGW64_VERSION_MAJOR) && __MINGW64_VERSION_MAJOR < 11 \
    && !defined(THREAD_POWER_THROTTLING_CURRENT_VERSION)
#define THREAD_POWER_THROTTLING_CURRENT_VERSION 1
#define THREAD_POWER_THROTTLING_EXECUTION_SPEED 0x1
#define THREAD_POWER_THROTTLING_VALID_FLAGS THREAD_POWER_THROTTLING_EXECUTION_SPEED

/* Same layout as the Windows SDK's: three ULONGs (unsigned long is 32-bit on Windows). */
typedef struct _THREAD_POWER_THROTTLING_STATE {
    unsigned long Version;
    unsigned long ControlMask;
    unsigned long StateMask;
} THREAD_POWER_THROTTLING_STATE, *PTHREAD_POWER_THROTTLING_STATE;
#endif

#endif /* __MINGW32__ && !RC_INVOKED && !__ASSEMBLER__ */
#endif /* PATCHKIT_MINGW_W64_COMPAT_H */
