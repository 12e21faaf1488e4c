# Build facts compiled into the binary and written into every result's context.
find_package(Git QUIET)
set(ITERA_GIT_COMMIT "unknown")
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
    WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} OUTPUT_VARIABLE _commit
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND _commit)
    set(ITERA_GIT_COMMIT ${_commit})
    execute_process(COMMAND ${GIT_EXECUTABLE} status --porcelain --untracked-files=no
      WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} OUTPUT_VARIABLE _dirty ERROR_QUIET)
    if(_dirty)
      set(ITERA_GIT_COMMIT "${ITERA_GIT_COMMIT}-dirty")
    endif()
  endif()
endif()
if(ITERA_HAVE_CUDA)
  set(ITERA_HAVE_CUDA_INT true)
else()
  set(ITERA_HAVE_CUDA_INT false)
endif()
set(ITERA_BUILD_CUDA_ARCHS "${CMAKE_CUDA_ARCHITECTURES}")
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/build_info.cpp.in ${CMAKE_CURRENT_BINARY_DIR}/generated/build_info.cpp @ONLY)

# The card catalogue is compiled into the binary, so a bundled binary needs no data folder.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/data/catalogue.json)
file(READ ${CMAKE_CURRENT_SOURCE_DIR}/data/catalogue.json ITERA_CATALOGUE_JSON)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/generated/catalogue_data.cpp.tmp
  "// Generated from data/catalogue.json by cmake/version.cmake.\nnamespace itera {\nextern const char* const builtin_catalogue_json;\nconst char* const builtin_catalogue_json = R\"itera_catalogue(${ITERA_CATALOGUE_JSON})itera_catalogue\";\n}\n")
configure_file(${CMAKE_CURRENT_BINARY_DIR}/generated/catalogue_data.cpp.tmp ${CMAKE_CURRENT_BINARY_DIR}/generated/catalogue_data.cpp COPYONLY)
