/* slow_flush: an LD_PRELOAD shim that makes every flush take SLOW_FLUSH_US longer, as on a
 * disk slower than this machine's (bench/kit/slow_flush.py). fsync and fdatasync wait after
 * the real call; so does a write through an O_DSYNC descriptor (LMDB's meta page, when it
 * syncs it). Nothing else changes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

static unsigned delay(void) {
    const char *s = getenv("SLOW_FLUSH_US");
    return s ? (unsigned)atoi(s) : 0;
}

static void *real(const char *name) { return dlsym(RTLD_NEXT, name); }

int fdatasync(int fd) {
    static int (*r)(int);
    if (!r) r = real("fdatasync");
    int rc = r(fd);
    usleep(delay());
    return rc;
}

int fsync(int fd) {
    static int (*r)(int);
    if (!r) r = real("fsync");
    int rc = r(fd);
    usleep(delay());
    return rc;
}

static ssize_t after_dsync(int fd, ssize_t w) {
    if (w > 0 && (fcntl(fd, F_GETFL) & O_DSYNC)) usleep(delay());
    return w;
}

ssize_t pwrite(int fd, const void *b, size_t n, off_t o) {
    static ssize_t (*r)(int, const void *, size_t, off_t);
    if (!r) r = real("pwrite");
    return after_dsync(fd, r(fd, b, n, o));
}

ssize_t pwrite64(int fd, const void *b, size_t n, off_t o) {
    static ssize_t (*r)(int, const void *, size_t, off_t);
    if (!r) r = real("pwrite64");
    return after_dsync(fd, r(fd, b, n, o));
}
