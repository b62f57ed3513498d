# ctest: the library's internal boundaries. (1) The kernels (kernels/*.h, kernels/*.cu) include no
# header outside kernels/ but the public cgrad/dtype.h (the element types, a plain enum): they see the
# library only through kernel_args.h and kernels.h. (2) Every
# internal header (src/**/*.h) and every kernels header compiles on its own, in a translation unit
# that includes only it (twice, for its include guard), as C11 with warnings as errors; the kernels
# headers with the project root and include/ as their only include paths (and CUDA's), so that a
# kernels header reaching into src/ fails. Headers that reach a CUDA header, directly or not, are skipped
# when CUDA_INCLUDES is empty (a CPU-only build) and the compiler finds none. Fails naming each offender.
# Usage: cmake -DCC=cc -DROOT=<project root> -DWORK=<scratch dir> [-DCUDA_INCLUDES="dir|dir"]
#        -P check_internal_headers.cmake
cmake_minimum_required(VERSION 3.24)
set(c_flags -std=c11 -Wall -Wextra -Wshadow -Wno-unused-parameter -Werror)
string(REPLACE "|" ";" cuda_includes "${CUDA_INCLUDES}")
set(cuda_flags "")
foreach(dir ${cuda_includes})
  list(APPEND cuda_flags -I${dir})
endforeach()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(failures "")

# (1) Every quoted include of the kernels names a file of kernels/ ("kernels/x.h", or "x.h" beside it).
file(GLOB kernel_files RELATIVE ${ROOT}/kernels ${ROOT}/kernels/*.h ${ROOT}/kernels/*.cu)
foreach(file ${kernel_files})
  file(STRINGS ${ROOT}/kernels/${file} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
  foreach(line ${includes})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" name "${line}")
    string(REGEX REPLACE "^kernels/" "" local "${name}")
    if(name STREQUAL "cgrad/dtype.h")
      continue()
    endif()
    if(local MATCHES "/" OR NOT EXISTS ${ROOT}/kernels/${local})
      string(APPEND failures "\n---- kernels/${file} includes \"${name}\", outside kernels/")
    endif()
  endforeach()
endforeach()

# (2) Each header alone.
function(check_header path include_flags)
  list(APPEND include_flags ${cuda_flags})
  string(MAKE_C_IDENTIFIER ${path} name)
  set(source ${WORK}/${name}.c)
  file(WRITE ${source} "#include \"${path}\"\n#include \"${path}\"\ntypedef int header_check_${name};\n")
  execute_process(COMMAND ${CC} ${c_flags} -fsyntax-only ${include_flags} ${source}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0 AND NOT cuda_flags AND out MATCHES "fatal error: (cuda|cublas|cudnn|curand|nccl)[A-Za-z0-9_]*\\.h: No such file")
    return() # it reaches a CUDA header, directly or through another, and this build has none
  endif()
  if(NOT rc EQUAL 0)
    set(failures "${failures}\n---- ${path}:\n${out}" PARENT_SCOPE)
  endif()
  set(checked "${checked};${path}" PARENT_SCOPE)
endfunction()

set(checked "")
file(GLOB_RECURSE src_headers RELATIVE ${ROOT} ${ROOT}/src/*.h)
foreach(header ${src_headers})
  check_header(${header} "-I${ROOT}/include;-I${ROOT}/src;-I${ROOT}")
endforeach()
file(GLOB kernel_headers RELATIVE ${ROOT} ${ROOT}/kernels/*.h)
foreach(header ${kernel_headers})
  check_header(${header} "-I${ROOT};-I${ROOT}/include")
endforeach()

list(REMOVE_ITEM checked "")
list(LENGTH checked count)
if(failures)
  message(FATAL_ERROR "internal boundaries broken:${failures}")
endif()
message(STATUS "kernels include only kernels/; ${count} internal headers compile on their own")
