/* Attributes of the public declarations.
 *
 * CG_API marks every function of the API. libcgrad is compiled with hidden visibility, so its
 * shared library exports these functions and nothing else: its internal functions (cg__*, the CUDA
 * launchers) stay private to it and cannot clash with, or be replaced by, a program's symbols.
 * Marking the declarations (not only the library's build) keeps them exported when a program
 * includes the headers under its own hidden-visibility pragma. */
#ifndef CGRAD_EXPORT_H
#define CGRAD_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define CG_API __attribute__((visibility("default")))
/* printf-style format checking of a function's fmt argument (its position) and the arguments from first. */
#define CG_PRINTF_FORMAT(fmt, first) __attribute__((format(printf, fmt, first)))
#else
#define CG_API
#define CG_PRINTF_FORMAT(fmt, first)
#endif

#endif
