/* writelog: an LD_PRELOAD shim that records every write and flush a process makes to
 * files under one directory, so a test can rebuild the disk as a power cut could have
 * left it (tests/powercut/crash_image.py). Nothing is changed: each call is passed on.
 *
 *   WRITELOG_DIR   files whose path starts with this are recorded
 *   WRITELOG_FILE  the log, appended to (O_APPEND: processes share it)
 *
 * Each entry, little-endian: "BIDW", u8 kind, u32 pid, u16 path_len, path, u64 a, then
 *   'W' write:    a = file offset, u32 len, the bytes written
 *   'T' truncate: a = the new size
 *   'S' flush:    a = the log's size when the flush began: it made durable every write
 *                 to that file whose entry starts before a (logged when it returned)
 * A write is logged after it returned, a flush when it returned, so "entry before a" means
 * the write had finished when the flush began. One lock orders a process's entries;
 * O_APPEND and one write() per entry order processes.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAXFD 4096
static char *paths[MAXFD];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int logfd = -1;
static const char *dir;
static size_t dirlen;

static ssize_t (*r_write)(int, const void *, size_t);
static ssize_t (*r_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*r_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*r_writev)(int, const struct iovec *, int);
static ssize_t (*r_pwritev)(int, const struct iovec *, int, off_t);
static int (*r_open)(const char *, int, ...);
static int (*r_open64)(const char *, int, ...);
static int (*r_openat)(int, const char *, int, ...);
static int (*r_openat64)(int, const char *, int, ...);
static int (*r_close)(int);
static int (*r_fsync)(int);
static int (*r_fdatasync)(int);
static int (*r_ftruncate)(int, off_t);
static int (*r_ftruncate64)(int, off_t);
static int (*r_fallocate)(int, int, off_t, off_t);
static off_t (*r_lseek)(int, off_t, int);

static void setup(void) {
    static int done;
    if (done) return;
    r_write = dlsym(RTLD_NEXT, "write");
    r_pwrite = dlsym(RTLD_NEXT, "pwrite");
    r_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    r_writev = dlsym(RTLD_NEXT, "writev");
    r_pwritev = dlsym(RTLD_NEXT, "pwritev");
    r_open = dlsym(RTLD_NEXT, "open");
    r_open64 = dlsym(RTLD_NEXT, "open64");
    r_openat = dlsym(RTLD_NEXT, "openat");
    r_openat64 = dlsym(RTLD_NEXT, "openat64");
    r_close = dlsym(RTLD_NEXT, "close");
    r_fsync = dlsym(RTLD_NEXT, "fsync");
    r_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    r_ftruncate = dlsym(RTLD_NEXT, "ftruncate");
    r_ftruncate64 = dlsym(RTLD_NEXT, "ftruncate64");
    r_fallocate = dlsym(RTLD_NEXT, "fallocate");
    r_lseek = dlsym(RTLD_NEXT, "lseek");
    dir = getenv("WRITELOG_DIR");
    dirlen = dir ? strlen(dir) : 0;
    const char *lf = getenv("WRITELOG_FILE");
    if (dir && lf) logfd = r_open(lf, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    done = 1;
}

static void track(int fd, int dirfd, const char *path) {
    if (fd < 0 || fd >= MAXFD || logfd < 0 || !path) return;
    char buf[PATH_MAX];
    char full[PATH_MAX];
    const char *p = path;
    if (path[0] != '/') {  /* resolve against cwd or dirfd through /proc */
        char link[64];
        ssize_t n;
        if (dirfd == AT_FDCWD) snprintf(link, sizeof link, "/proc/self/cwd");
        else snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        n = readlink(link, buf, sizeof buf - 1);
        if (n < 0) return;
        buf[n] = 0;
        if (snprintf(full, sizeof full, "%s/%s", buf, path) >= (int)sizeof full) return;
        p = full;
    }
    if (strncmp(p, dir, dirlen) != 0) return;
    pthread_mutex_lock(&mu);
    free(paths[fd]);
    paths[fd] = strdup(p);
    pthread_mutex_unlock(&mu);
}

/* one entry, written with one write(): header, path, then the kind's fields and data */
static void emit(char kind, const char *path, uint64_t a, const struct iovec *iov, int iovcnt,
                 uint32_t len) {
    uint16_t pl = (uint16_t)strlen(path);
    size_t head = 4 + 1 + 4 + 2 + pl + 8 + (kind == 'W' ? 4 : 0);
    size_t total = head + (kind == 'W' ? len : 0);
    char *e = malloc(total);
    if (!e) abort();
    char *q = e;
    uint32_t pid = (uint32_t)getpid();
    memcpy(q, "BIDW", 4); q += 4;
    *q++ = kind;
    memcpy(q, &pid, 4); q += 4;
    memcpy(q, &pl, 2); q += 2;
    memcpy(q, path, pl); q += pl;
    memcpy(q, &a, 8); q += 8;
    if (kind == 'W') {
        memcpy(q, &len, 4); q += 4;
        uint32_t left = len;
        for (int i = 0; i < iovcnt && left; i++) {
            size_t n = iov[i].iov_len < left ? iov[i].iov_len : left;
            memcpy(q, iov[i].iov_base, n); q += n; left -= n;
        }
    }
    size_t off = 0;
    while (off < total) {
        ssize_t w = r_write(logfd, e + off, total - off);
        if (w <= 0) abort();  /* a log that lost an entry would prove nothing */
        off += (size_t)w;
    }
    free(e);
}

static const char *tracked(int fd) {
    if (logfd < 0 || fd < 0 || fd >= MAXFD) return NULL;
    return paths[fd];
}

static uint64_t log_size(void) {
    /* a flush covers the entries that began before the log reached this size */
    struct stat st;
    if (fstat(logfd, &st) != 0) abort();
    return (uint64_t)st.st_size;
}

/* a write through an O_DSYNC / O_SYNC descriptor (LMDB's meta pages) is durable when it
 * returns: logged as a write followed by a flush that covers it */
static void synced_if_dsync(int fd, const char *p) {
    if (fcntl(fd, F_GETFL) & O_DSYNC) emit('S', p, log_size(), NULL, 0, 0);
}

static void logged_write(int fd, off_t off, const struct iovec *iov, int n, ssize_t done) {
    if (done <= 0) return;
    pthread_mutex_lock(&mu);
    const char *p = tracked(fd);
    if (p) {
        emit('W', p, (uint64_t)off, iov, n, (uint32_t)done);
        synced_if_dsync(fd, p);
    }
    pthread_mutex_unlock(&mu);
}

ssize_t write(int fd, const void *b, size_t n) {
    setup();
    if (fd == logfd || !tracked(fd)) return r_write(fd, b, n);
    pthread_mutex_lock(&mu);  /* the offset and the write as one step */
    off_t at = r_lseek(fd, 0, SEEK_CUR);
    int app = fcntl(fd, F_GETFL) & O_APPEND;
    if (app) at = r_lseek(fd, 0, SEEK_END), r_lseek(fd, at, SEEK_SET);
    ssize_t w = r_write(fd, b, n);
    struct iovec v = {(void *)b, n};
    if (w > 0) emit('W', paths[fd], (uint64_t)at, &v, 1, (uint32_t)w), synced_if_dsync(fd, paths[fd]);
    pthread_mutex_unlock(&mu);
    return w;
}

ssize_t writev(int fd, const struct iovec *iov, int n) {
    setup();
    if (!tracked(fd)) return r_writev(fd, iov, n);
    pthread_mutex_lock(&mu);
    off_t at = r_lseek(fd, 0, SEEK_CUR);
    ssize_t w = r_writev(fd, iov, n);
    if (w > 0) emit('W', paths[fd], (uint64_t)at, iov, n, (uint32_t)w), synced_if_dsync(fd, paths[fd]);
    pthread_mutex_unlock(&mu);
    return w;
}

ssize_t pwrite(int fd, const void *b, size_t n, off_t off) {
    setup();
    ssize_t w = r_pwrite(fd, b, n, off);
    struct iovec v = {(void *)b, n};
    logged_write(fd, off, &v, 1, w);
    return w;
}

ssize_t pwrite64(int fd, const void *b, size_t n, off_t off) {
    setup();
    ssize_t w = r_pwrite64(fd, b, n, off);
    struct iovec v = {(void *)b, n};
    logged_write(fd, off, &v, 1, w);
    return w;
}

ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off) {
    setup();
    ssize_t w = r_pwritev(fd, iov, n, off);
    logged_write(fd, off, iov, n, w);
    return w;
}

static int flushed(int fd, int (*real)(int)) {
    setup();
    if (!tracked(fd)) return real(fd);
    pthread_mutex_lock(&mu);
    uint64_t began = log_size();
    char *p = strdup(paths[fd]);
    pthread_mutex_unlock(&mu);
    int rc = real(fd);
    if (rc == 0) {
        pthread_mutex_lock(&mu);
        emit('S', p, began, NULL, 0, 0);
        pthread_mutex_unlock(&mu);
    }
    free(p);
    return rc;
}

int fsync(int fd) { return flushed(fd, r_fsync ? r_fsync : (setup(), r_fsync)); }
int fdatasync(int fd) { return flushed(fd, r_fdatasync ? r_fdatasync : (setup(), r_fdatasync)); }

static int truncated(int fd, off_t size, int rc) {
    if (rc != 0) return rc;
    pthread_mutex_lock(&mu);
    const char *p = tracked(fd);
    if (p) emit('T', p, (uint64_t)size, NULL, 0, 0);
    pthread_mutex_unlock(&mu);
    return rc;
}

int ftruncate(int fd, off_t size) { setup(); return truncated(fd, size, r_ftruncate(fd, size)); }
int ftruncate64(int fd, off_t size) { setup(); return truncated(fd, size, r_ftruncate64(fd, size)); }

int fallocate(int fd, int mode, off_t off, off_t len) {
    setup();
    int rc = r_fallocate(fd, mode, off, len);
    if (rc == 0 && tracked(fd) && mode == 0) {  /* only growth matters: the size */
        struct stat st;
        if (fstat(fd, &st) == 0) truncated(fd, st.st_size, 0);
    }
    return rc;
}

int close(int fd) {
    setup();
    if (fd >= 0 && fd < MAXFD && paths[fd]) {
        pthread_mutex_lock(&mu);
        free(paths[fd]);
        paths[fd] = NULL;
        pthread_mutex_unlock(&mu);
    }
    return r_close(fd);
}

#define OPEN_BODY(real, dirfd, path)                  \
    setup();                                          \
    mode_t mode = 0;                                  \
    if (flags & (O_CREAT | O_TMPFILE)) {              \
        va_list ap; va_start(ap, flags);              \
        mode = (mode_t)va_arg(ap, int); va_end(ap);   \
    }                                                 \
    int fd = real;                                    \
    if (fd >= 0 && (flags & (O_WRONLY | O_RDWR))) track(fd, dirfd, path); \
    return fd;

int open(const char *path, int flags, ...) { OPEN_BODY(r_open(path, flags, mode), AT_FDCWD, path) }
int open64(const char *path, int flags, ...) { OPEN_BODY(r_open64(path, flags, mode), AT_FDCWD, path) }
int openat(int d, const char *path, int flags, ...) { OPEN_BODY(r_openat(d, path, flags, mode), d, path) }
int __open_2(const char *path, int flags) { setup(); int fd = r_open(path, flags); if (fd >= 0 && (flags & (O_WRONLY | O_RDWR))) track(fd, AT_FDCWD, path); return fd; }
int __open64_2(const char *path, int flags) { setup(); int fd = r_open64(path, flags); if (fd >= 0 && (flags & (O_WRONLY | O_RDWR))) track(fd, AT_FDCWD, path); return fd; }
int openat64(int d, const char *path, int flags, ...) { OPEN_BODY(r_openat64(d, path, flags, mode), d, path) }
