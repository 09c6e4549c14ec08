/* Internal: opening and reading files without blocking. A FIFO (or a
 * device) given where a file is expected would block open() until a writer
 * appears, or never end; these open with O_NONBLOCK, refuse anything but a
 * regular file, then read in blocking mode. */
#ifndef AMP_IO_IO_UTIL_H
#define AMP_IO_IO_UTIL_H

#include <stdio.h>

/* A read-only descriptor of the regular file at path, or -1 with the error
 * "fn: cannot open path: ..." / "fn: path is not a regular file (a FIFO)". */
int amp__open_regular(const char *fn, const char *path);
/* The same as a stdio stream ("rb"); NULL with the error. */
FILE *amp__fopen_regular(const char *fn, const char *path);

/* The whole regular file at path (opened as amp__fopen_regular does), with
 * a NUL after its *n bytes; NULL with the error ("fn: out of memory reading
 * path", "fn: error reading path"). */
char *amp__read_regular(const char *fn, const char *path, size_t *n);

#endif
