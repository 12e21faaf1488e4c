# Run at every build (cmake -P): writes generated/build_info.cpp from build_info.cpp.in with the
# commit checked out now, so a result never names a stale commit. configure_file rewrites the file
# only when its text changes, so an unchanged tree recompiles nothing.
# Inputs: SOURCE_DIR, OUTPUT, PROJECT_VERSION, CMAKE_BUILD_TYPE, CMAKE_CXX_COMPILER_ID,
# CMAKE_CXX_COMPILER_VERSION, ITERA_HAVE_CUDA_INT, CUDAToolkit_VERSION, ITERA_BUILD_CUDA_ARCHS.
set(ITERA_GIT_COMMIT "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
    WORKING_DIRECTORY ${SOURCE_DIR} OUTPUT_VARIABLE _commit
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND _commit)
    set(ITERA_GIT_COMMIT ${_commit})
    execute_process(COMMAND ${GIT_EXECUTABLE} status --porcelain --untracked-files=no
      WORKING_DIRECTORY ${SOURCE_DIR} OUTPUT_VARIABLE _dirty ERROR_QUIET)
    if(_dirty)
      set(ITERA_GIT_COMMIT "${ITERA_GIT_COMMIT}-dirty")
    endif()
  endif()
endif()
configure_file(${SOURCE_DIR}/cmake/build_info.cpp.in ${OUTPUT} @ONLY)
