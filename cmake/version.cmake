# Build facts compiled into the binary and written into every result's context. The commit is read
# at every build (cmake/build_info.cmake), not only at configure time.
if(ITERA_HAVE_CUDA)
  set(ITERA_HAVE_CUDA_INT true)
else()
  set(ITERA_HAVE_CUDA_INT false)
endif()
set(ITERA_BUILD_INFO_ARGS
  -DSOURCE_DIR=${CMAKE_CURRENT_SOURCE_DIR}
  -DOUTPUT=${CMAKE_CURRENT_BINARY_DIR}/generated/build_info.cpp
  -DPROJECT_VERSION=${PROJECT_VERSION}
  -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}
  -DCMAKE_CXX_COMPILER_ID=${CMAKE_CXX_COMPILER_ID}
  -DCMAKE_CXX_COMPILER_VERSION=${CMAKE_CXX_COMPILER_VERSION}
  -DITERA_HAVE_CUDA_INT=${ITERA_HAVE_CUDA_INT}
  -DCUDAToolkit_VERSION=${CUDAToolkit_VERSION}
  "-DITERA_BUILD_CUDA_ARCHS=${CMAKE_CUDA_ARCHITECTURES}")
execute_process(COMMAND ${CMAKE_COMMAND} ${ITERA_BUILD_INFO_ARGS} -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/build_info.cmake)
add_custom_target(itera_build_info
  COMMAND ${CMAKE_COMMAND} ${ITERA_BUILD_INFO_ARGS} -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/build_info.cmake
  BYPRODUCTS ${CMAKE_CURRENT_BINARY_DIR}/generated/build_info.cpp
  COMMENT "itera: build facts (commit)" VERBATIM)

# The card catalogue is compiled into the binary, so a bundled binary needs no data folder.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/data/catalogue.json)
file(READ ${CMAKE_CURRENT_SOURCE_DIR}/data/catalogue.json ITERA_CATALOGUE_JSON)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/generated/catalogue_data.cpp.tmp
  "// Generated from data/catalogue.json by cmake/version.cmake.\nnamespace itera {\nextern const char* const builtin_catalogue_json;\nconst char* const builtin_catalogue_json = R\"itera_catalogue(${ITERA_CATALOGUE_JSON})itera_catalogue\";\n}\n")
configure_file(${CMAKE_CURRENT_BINARY_DIR}/generated/catalogue_data.cpp.tmp ${CMAKE_CURRENT_BINARY_DIR}/generated/catalogue_data.cpp COPYONLY)
