# ctest: every public header (include/**/*.h) compiles on its own, in a translation unit that includes
# only it (twice, for its include guard), as C11 and, when CXX is given, as C++11 (the headers'
# extern "C"), with warnings as errors. Fails naming each header that does not, with the compiler's
# message.
# Usage: cmake -DCC=cc [-DCXX=c++] -DINCLUDE=<include dir> -DWORK=<scratch dir> -P check_public_headers.cmake
cmake_minimum_required(VERSION 3.24)
set(c_flags -std=c11 -Wall -Wextra -Wshadow -Wpedantic -Wstrict-prototypes -Wmissing-prototypes
    -Wredundant-decls -Werror)
set(cxx_flags -std=c++11 -Wall -Wextra -Wshadow -Wpedantic -Werror)

file(GLOB_RECURSE headers RELATIVE ${INCLUDE} ${INCLUDE}/*.h)
if(NOT headers)
  message(FATAL_ERROR "no headers under ${INCLUDE}")
endif()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(failures "")
set(languages c)
if(CXX)
  list(APPEND languages cxx)
endif()
foreach(header ${headers})
  string(MAKE_C_IDENTIFIER ${header} name)
  foreach(lang ${languages})
    if(lang STREQUAL "c")
      set(compiler ${CC})
      set(flags ${c_flags})
      set(source ${WORK}/${name}.c)
    else()
      set(compiler ${CXX})
      set(flags ${cxx_flags})
      set(source ${WORK}/${name}.cc)
    endif()
    # A declaration after the includes: ISO C refuses an empty translation unit (export.h declares nothing).
    file(WRITE ${source} "#include \"${header}\"\n#include \"${header}\"\ntypedef int header_check_${name};\n")
    execute_process(COMMAND ${compiler} ${flags} -fsyntax-only -I${INCLUDE} ${source}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(NOT rc EQUAL 0)
      string(APPEND failures "\n---- ${header} (${lang}):\n${out}")
    endif()
  endforeach()
endforeach()
list(LENGTH headers count)
if(failures)
  message(FATAL_ERROR "public headers that do not compile on their own:${failures}")
endif()
message(STATUS "${count} public headers compile on their own (${languages})")
