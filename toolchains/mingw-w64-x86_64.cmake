# CMake toolchain file: cross-compile for 64-bit Windows with Debian/Ubuntu's
# mingw-w64 packages (g++-mingw-w64-x86-64-posix, binutils-mingw-w64-x86-64).
#
#   cmake -G Ninja -DCMAKE_TOOLCHAIN_FILE=toolchains/mingw-w64-x86_64.cmake ...
#
# - Uses the "-posix" compilers (std::thread / std::mutex need the posix thread model).
# - Force-includes mingw-w64-compat.h into C and C++ (definitions older mingw-w64
#   headers lack; a no-op with mingw-w64 >= 11).
# - Assembles aligned vector moves as unaligned ones (AVX on Windows' 16-byte stack).
# - Links executables statically: no libstdc++/libgcc/winpthread DLLs needed next to
#   the .exe. OpenMP (libgomp) is not covered: build with GGML_OPENMP=OFF.
# - The stack reserve is NOT set here: patchkit edits it after the build
#   (`patchkit pe-stack`, recipe [windows] stack_reserve).
#
# Override the compiler prefix with -DMINGW_PREFIX=... (default x86_64-w64-mingw32).

set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)

if(NOT DEFINED MINGW_PREFIX)
  set(MINGW_PREFIX x86_64-w64-mingw32)
endif()

find_program(PATCHKIT_MINGW_CC NAMES ${MINGW_PREFIX}-gcc-posix)
find_program(PATCHKIT_MINGW_CXX NAMES ${MINGW_PREFIX}-g++-posix)
if(NOT PATCHKIT_MINGW_CC OR NOT PATCHKIT_MINGW_CXX)
  message(FATAL_ERROR
    "${MINGW_PREFIX}-gcc-posix / ${MINGW_PREFIX}-g++-posix not found: "
    "install g++-mingw-w64-x86-64-posix (Debian/Ubuntu)")
endif()
set(CMAKE_C_COMPILER ${PATCHKIT_MINGW_CC})
set(CMAKE_CXX_COMPILER ${PATCHKIT_MINGW_CXX})
find_program(PATCHKIT_MINGW_RC NAMES ${MINGW_PREFIX}-windres)
if(PATCHKIT_MINGW_RC)
  set(CMAKE_RC_COMPILER ${PATCHKIT_MINGW_RC})
endif()

# Where the target's headers and libraries live; never look there for programs.
set(CMAKE_FIND_ROOT_PATH /usr/${MINGW_PREFIX})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

set(PATCHKIT_MINGW_COMPAT_H "${CMAKE_CURRENT_LIST_DIR}/mingw-w64-compat.h")
# AVX on Windows: the x64 ABI aligns the stack to 16 bytes, and GCC may spill 32-byte AVX
# values to it with aligned moves (GCC bug 54412: random crashes). Have the assembler
# encode every aligned vector move as an unaligned one (binutils >= 2.38; what MSYS2's
# toolchain does by default). Same speed on any AVX-capable CPU.
set(PATCHKIT_MINGW_FLAGS "-include \"${PATCHKIT_MINGW_COMPAT_H}\" -Wa,-muse-unaligned-vector-move")
set(CMAKE_C_FLAGS_INIT "${PATCHKIT_MINGW_FLAGS}")
set(CMAKE_CXX_FLAGS_INIT "${PATCHKIT_MINGW_FLAGS}")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")
# DLLs too (shared ggml/llama, the loadable CPU variants): libstdc++, libgcc and
# winpthread linked in, so no DLL imports a mingw runtime DLL that is not shipped. Their
# symbols stay inside each DLL (--exclude-libs,ALL): exported from ggml-base.dll, libgcc's
# _Unwind_Resume would clash with the copy each module links ("multiple definition").
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-static -Wl,--exclude-libs,ALL")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "-static -Wl,--exclude-libs,ALL")
