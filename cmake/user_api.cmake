# The user API (issue 5, docs/user-api.md): itera inside the user's own application.
#
#   itera_user     static library (position-independent) with the C++ API (include/itera/user/):
#                  what C++ programs and the Python module link.
#   itera_shared   libitera.so.1, the C API (include/itera/itera.h): a thin extern "C" layer over
#                  itera_user. Built with hidden visibility and the static libraries' symbols kept
#                  local (--exclude-libs), so it exports the itera_* functions and nothing else.
#   examples/c, examples/cpp: the programs docs/user-api.md shows, run by tests/user.
#
# Included from the top-level CMakeLists.txt after itera_core, itera_cuda and itera_lib exist.

# A shared library takes only position-independent objects: the static libraries it links too.
set_target_properties(itera_core itera_lib PROPERTIES POSITION_INDEPENDENT_CODE ON)
if(TARGET itera_cuda)
  set_target_properties(itera_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON)
endif()

set(ITERA_USER_SOURCES
  src/user/session.cpp src/user/lane.cpp src/user/runner.cpp src/user/device_common.cpp)
if(ITERA_HAVE_CUDA)
  list(APPEND ITERA_USER_SOURCES src/user/device_cuda.cpp)
else()
  list(APPEND ITERA_USER_SOURCES src/user/device_host.cpp)
endif()
add_library(itera_user STATIC ${ITERA_USER_SOURCES})
target_link_libraries(itera_user PUBLIC itera_lib)
if(ITERA_HAVE_CUDA)
  target_link_libraries(itera_user PRIVATE CUDA::cudart)
endif()
set_target_properties(itera_user PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_options(itera_user PRIVATE ${ITERA_WARNINGS})

add_library(itera_shared SHARED src/user/c_api.cpp)
set_target_properties(itera_shared PROPERTIES
  OUTPUT_NAME itera
  VERSION 1.0.0
  SOVERSION 1  # ITERA_C_ABI_VERSION in include/itera/itera.h
  C_VISIBILITY_PRESET hidden
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON)
target_compile_definitions(itera_shared PRIVATE ITERA_BUILDING_LIBRARY=1)
target_include_directories(itera_shared INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>)
target_link_libraries(itera_shared PRIVATE itera_user)
target_link_options(itera_shared PRIVATE -Wl,--exclude-libs,ALL -Wl,--no-undefined -Wl,--as-needed)
target_compile_options(itera_shared PRIVATE ${ITERA_WARNINGS})

# Examples (docs/user-api.md): the C one against libitera.so as C11, the C++ one against itera_user.
add_executable(itera_example_c examples/c/profile_pipeline.c)
set_target_properties(itera_example_c PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_link_libraries(itera_example_c PRIVATE itera_shared)
target_compile_options(itera_example_c PRIVATE -Wall -Wextra -Wpedantic -Werror)

add_executable(itera_example_cpp examples/cpp/serve_model.cpp)
target_link_libraries(itera_example_cpp PRIVATE itera_user)
target_compile_options(itera_example_cpp PRIVATE ${ITERA_WARNINGS})
