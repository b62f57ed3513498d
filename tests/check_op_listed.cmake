# ctest: an op's entry compiles only when the op is listed in CG_OP_ENTRIES (src/op_table.h), so no
# op escapes the op-table test. CG_OP_DEFINE(sum) (listed) must compile and CG_OP_DEFINE of a name
# not in the list must fail, naming CG_OP_LISTED_<name>.
# Usage: cmake -DCC=cc -DROOT=<project root> -DWORK=<scratch dir> -P check_op_listed.cmake
cmake_minimum_required(VERSION 3.24)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
function(compile name op)
  file(WRITE ${WORK}/${name}.c "#include \"op_table.h\"\nCG_OP_DEFINE(${op}) = {.name = \"${op}\"};\n")
  execute_process(COMMAND ${CC} -std=c11 -fsyntax-only -I${ROOT}/include -I${ROOT}/src -I${ROOT} ${WORK}/${name}.c
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  set(${name}_rc ${rc} PARENT_SCOPE)
  set(${name}_out "${out}" PARENT_SCOPE)
endfunction()
compile(listed sum)
if(NOT listed_rc EQUAL 0)
  message(FATAL_ERROR "CG_OP_DEFINE(sum), a listed op, does not compile:\n${listed_out}")
endif()
compile(unlisted op_not_in_the_list)
if(unlisted_rc EQUAL 0 OR NOT unlisted_out MATCHES "CG_OP_LISTED_op_not_in_the_list")
  message(FATAL_ERROR "CG_OP_DEFINE of an op missing from CG_OP_ENTRIES compiled (or failed for another reason):\n"
          "${unlisted_out}")
endif()
message(STATUS "an op missing from CG_OP_ENTRIES does not compile")
