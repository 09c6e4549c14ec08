/* Opening files for reading without blocking (see io_util.h). */
#include "io/io_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

static const char *kind_of(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a file";
}

int amp__open_regular(const char *fn, const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        amp_error(AMP_ERR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        amp_error(AMP_ERR_IO, "%s: cannot stat %s: %s", fn, path, strerror(e));
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        amp_error(AMP_ERR_IO, "%s: %s is not a regular file (%s)", fn, path, kind_of(sb.st_mode));
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

FILE *amp__fopen_regular(const char *fn, const char *path) {
    int fd = amp__open_regular(fn, path);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        amp_error(AMP_ERR_IO, "%s: cannot open %s: %s", fn, path, strerror(e));
    }
    return f;
}

char *amp__read_regular(const char *fn, const char *path, size_t *n) {
    FILE *f = amp__fopen_regular(fn, path); /* never blocks on a FIFO */
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                amp_error(AMP_ERR_NOMEM, "%s: out of memory reading %s", fn, path);
                return NULL;
            }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len - 1, f);
        len += r;
        if (r == 0) break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        amp_error(AMP_ERR_IO, "%s: error reading %s", fn, path);
        return NULL;
    }
    buf[len] = 0;
    *n = len;
    return buf;
}
