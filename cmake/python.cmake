# The Python package (issue 5, docs/python.md): the module itera._itera (pybind11) over the C++ user
# API, built from python/ when ITERA_BUILD_PYTHON is ON and Python 3 with its headers and pybind11 is
# found (Debian: python3-dev pybind11-dev python3-pybind11; pip: pybind11). Choose the interpreter
# with -DPython3_EXECUTABLE=...; the module is built for that one.
#
# Included from the top-level CMakeLists.txt after cmake/user_api.cmake. Writes
# <build>/python/itera_python.env, which tests/python reads at test time: the interpreter, and
# whether the module was built or why not (the tests then skip with that reason).

option(ITERA_BUILD_PYTHON "Build the Python module (python/) when Python 3 and pybind11 are found" ON)

set(_itera_python_why "")
if(NOT ITERA_BUILD_PYTHON)
  set(_itera_python_why "ITERA_BUILD_PYTHON is OFF (configure with -DITERA_BUILD_PYTHON=ON)")
elseif(NOT TARGET itera_user)
  set(_itera_python_why "the C++ user API (cmake/user_api.cmake, target itera_user) is not in this tree")
else()
  # The system's Python by default (Debian's, where scripts/common.sh installs pybind11, pytest,
  # numpy, setuptools and wheel), not whichever python3 comes first on PATH (pyenv, a venv).
  if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python3_EXECUTABLE /usr/bin/python3)
  endif()
  find_package(Python3 3.8 COMPONENTS Interpreter Development.Module)
  if(NOT Python3_FOUND)
    set(_itera_python_why "Python 3 with its headers was not found (Debian: apt-get install python3-dev; or pass "
                          "-DPython3_EXECUTABLE=...)")
  else()
    # pybind11: Debian's pybind11-dev installs its CMake package where find_package looks; the Python
    # package (python3-pybind11, or pip's) says where its own is.
    execute_process(COMMAND ${Python3_EXECUTABLE} -c "import pybind11; print(pybind11.get_cmake_dir())"
                    OUTPUT_VARIABLE _itera_pybind11_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                    RESULT_VARIABLE _itera_pybind11_rc)
    if(_itera_pybind11_rc EQUAL 0 AND _itera_pybind11_dir)
      find_package(pybind11 2.10 CONFIG QUIET HINTS "${_itera_pybind11_dir}")
    else()
      find_package(pybind11 2.10 CONFIG QUIET)
    endif()
    if(NOT pybind11_FOUND)
      set(_itera_python_why "pybind11 >= 2.10 was not found (Debian: apt-get install pybind11-dev python3-pybind11)")
    endif()
  endif()
endif()

file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/python)
if(_itera_python_why)
  message(STATUS "itera: Python module not built: ${_itera_python_why}")
  file(WRITE ${PROJECT_BINARY_DIR}/python/itera_python.env
       "ITERA_PYTHON_EXECUTABLE='${Python3_EXECUTABLE}'\nITERA_PYTHON_MODULE_BUILT=0\n"
       "ITERA_PYTHON_SKIP_REASON='${_itera_python_why}'\n")
else()
  message(STATUS "itera: Python module itera._itera for ${Python3_EXECUTABLE} (Python ${Python3_VERSION}, "
                 "pybind11 ${pybind11_VERSION})")
  add_subdirectory(${PROJECT_SOURCE_DIR}/python ${PROJECT_BINARY_DIR}/python)
  file(WRITE ${PROJECT_BINARY_DIR}/python/itera_python.env
       "ITERA_PYTHON_EXECUTABLE='${Python3_EXECUTABLE}'\nITERA_PYTHON_MODULE_BUILT=1\nITERA_PYTHON_SKIP_REASON=''\n")
endif()
