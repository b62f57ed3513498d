# ctest: the allocation count of alloc_count.c is exact only if libcgrad.a calls no allocating libc
# function besides the wrapped ones (WRAPPED). Fails naming any other one the library references
# (nm -u), which then needs a wrapper in alloc_count.c and a place in CMakeLists.txt's list.
# Usage: cmake -DNM=nm -DLIB=libcgrad.a -DWRAPPED="malloc;free;..." -P check_alloc_wraps.cmake
cmake_minimum_required(VERSION 3.24)
set(allocating malloc calloc realloc reallocarray free aligned_alloc posix_memalign memalign valloc
    pvalloc strdup strndup __strdup __strndup wcsdup asprintf vasprintf getline getdelim
    open_memstream open_wmemstream realpath canonicalize_file_name get_current_dir_name getcwd
    scandir tempnam)
execute_process(COMMAND ${NM} -u ${LIB} OUTPUT_VARIABLE undefined RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -u ${LIB} failed (${rc})")
endif()
string(REGEX MATCHALL "U [A-Za-z_0-9]+" refs "${undefined}")
list(TRANSFORM refs REPLACE "^U " "")
list(REMOVE_DUPLICATES refs)
set(missing "")
foreach(fn ${allocating})
  if(fn IN_LIST refs AND NOT fn IN_LIST WRAPPED)
    list(APPEND missing ${fn})
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "libcgrad.a calls ${missing}, which alloc_count.c does not wrap: its allocations "
                      "would escape the count of test_misuse and test_step_memory")
endif()
message(STATUS "libcgrad.a allocates only through the wrapped ${WRAPPED}")
