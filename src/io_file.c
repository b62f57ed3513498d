/* The one way a file is read (cg__open_regular, cg__read_file) and the one way a file is written
 * (cg__atomic_*), for every reader and writer (see io_internal.h; the promises are in
 * include/cgrad/io.h). */
#define _GNU_SOURCE /* O_TMPFILE */
#include "cgrad/core.h"

#include "error.h"
#include "io_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- reading ---------------------------------------------------------------------------------- */
static const char *file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "of an unknown kind";
}

int cg__open_regular(const char *path, size_t *size, char *why, size_t why_len) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int err = errno;
        snprintf(why, why_len, "cannot open: %s", strerror(err));
        errno = err;
        return -1;
    }
    struct stat sb;
    int err = fstat(fd, &sb) != 0 ? errno : 0;
    if (err) snprintf(why, why_len, "cannot stat: %s", strerror(err));
    else if (!S_ISREG(sb.st_mode)) snprintf(why, why_len, "not a regular file (it is %s)", file_kind(sb.st_mode));
    else if ((uintmax_t)sb.st_size > SIZE_MAX - 1) snprintf(why, why_len, "too large to read (%jd bytes)", (intmax_t)sb.st_size);
    else {
        *size = (size_t)sb.st_size;
        return fd;
    }
    close(fd);
    errno = err ? err : EINVAL;
    return -1;
}

cg_status cg__read_file(const char *fn, const char *path, uint8_t **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    char why[256];
    size_t size = 0;
    int fd = cg__open_regular(path, &size, why, sizeof why);
    if (fd < 0) return cg__fail(CG_ERR_IO, "%s: %s: %s", fn, path, why);
    uint8_t *b = malloc(size ? size : 1);
    if (!b) {
        close(fd);
        return cg__fail(CG_ERR_OOM, "%s: %s: out of host memory for %zu bytes", fn, path, size);
    }
    size_t got = 0;
    int err = 0;
    while (got < size && !err) {
        ssize_t r = read(fd, b + got, size - got);
        if (r > 0) got += (size_t)r;
        else if (r == 0) break;
        else if (errno != EINTR) err = errno;
    }
    close(fd);
    if (got != size) {
        free(b);
        if (err) return cg__fail(CG_ERR_IO, "%s: %s: read failed: %s", fn, path, strerror(err));
        return cg__fail(CG_ERR_IO, "%s: %s: file shrank while being read (%zu of %zu bytes)", fn, path, got, size);
    }
    *buf = b;
    *len = size;
    return CG_OK;
}

/* ---- atomic writes ------------------------------------------------------------------------------
 * Temporary names are "<name>.cgrad.tmp.<host>.<pid>.<16 hex digits>" (name cut to TMP_BASE_MAX
 * bytes and host to TMP_HOST_MAX, so that the whole stays below NAME_MAX), random so that nobody
 * can plant a file or symlink under the name in advance, and created O_EXCL | O_NOFOLLOW, so that
 * a planted one only makes us draw another name. */
#define TMP_MARK ".cgrad.tmp."
#define TMP_BASE_MAX 150
#define TMP_HOST_MAX 32
#define TMP_TRIES 64

/* This host's name with only letters, digits and '-' (others become '_'), so it holds no '.'. */
static void host_token(char out[TMP_HOST_MAX + 1]) {
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "host");
    int n = 0;
    for (const char *p = host; *p && n < TMP_HOST_MAX; p++, n++) {
        char c = *p;
        out[n] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ? c : '_';
    }
    out[n] = '\0';
}

static uint64_t random64(int attempt) {
    uint64_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r) return r;
    struct timespec ts; /* no entropy yet (early boot): O_EXCL keeps the name unique all the same */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 32) ^
           ((uint64_t)(attempt + 1) * 0x9e3779b97f4a7c15u);
}

static void draw_tmp_name(cg_atomic_file *f, int attempt) {
    char host[TMP_HOST_MAX + 1];
    host_token(host);
    snprintf(f->tmp, sizeof f->tmp, "%.*s" TMP_MARK "%s.%ld.%016" PRIx64, TMP_BASE_MAX, f->base, host,
             (long)getpid(), random64(attempt));
}

/* The pid in name when it is a temporary of this host's saves to f's path (or to another name
 * that shares its first TMP_BASE_MAX bytes), else 0. */
static pid_t stray_pid(const cg_atomic_file *f, const char *host, const char *name) {
    size_t base_len = strnlen(f->base, TMP_BASE_MAX), host_len = strlen(host);
    if (strncmp(name, f->base, base_len) != 0) return 0;
    name += base_len;
    if (strncmp(name, TMP_MARK, strlen(TMP_MARK)) != 0) return 0;
    name += strlen(TMP_MARK);
    if (strncmp(name, host, host_len) != 0 || name[host_len] != '.') return 0;
    name += host_len + 1;
    long pid = 0;
    for (; *name >= '0' && *name <= '9' && pid <= INT32_MAX; name++) pid = pid * 10 + (*name - '0');
    if (*name++ != '.' || pid <= 0 || pid > INT32_MAX) return 0;
    size_t hex = strspn(name, "0123456789abcdef");
    return hex == 16 && !name[16] ? (pid_t)pid : 0;
}

/* Removes the temporaries that saves to f's path left when their process died (kill -9 between
 * naming the temporary and renaming it). Safe against a live save's: its process exists, so
 * kill(pid, 0) does not fail with ESRCH, whether it is in this process or another; a pid reused by
 * an unrelated process only keeps a stray until that process ends. Only this host's names are
 * considered, since a pid means nothing elsewhere (a directory shared over NFS, containers with
 * their own pids and host names). Best effort: the save goes on whatever happens here. */
static void remove_strays(const cg_atomic_file *f) {
    int fd = fcntl(f->dir, F_DUPFD_CLOEXEC, 0);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return;
    }
    char host[TMP_HOST_MAX + 1];
    host_token(host);
    pid_t self = getpid();
    for (struct dirent *e; (e = readdir(d));) {
        pid_t pid = stray_pid(f, host, e->d_name);
        if (pid > 0 && pid != self && kill(pid, 0) != 0 && errno == ESRCH) (void)unlinkat(f->dir, e->d_name, 0);
    }
    closedir(d);
}

/* Records "<fn>: <path>: <why>", removes the temporary and returns CG_ERR_IO. */
static cg_status atomic_fail(cg_atomic_file *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cg_status atomic_fail(cg_atomic_file *f, const char *fmt, ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    cg_status s = cg__fail(CG_ERR_IO, "%s: %s: %s", f->fn, f->path, why);
    cg__atomic_abort(f);
    return s;
}

void cg__atomic_abort(cg_atomic_file *f) {
    if (f->fd >= 0) close(f->fd);
    if (f->named) (void)unlinkat(f->dir, f->tmp, 0);
    if (f->dir >= 0) close(f->dir);
    f->fd = f->dir = -1;
    f->named = false;
}

/* Opens path's directory, which holds the temporary so that the rename stays on one file system. */
static cg_status open_dir(cg_atomic_file *f) {
    const char *slash = strrchr(f->path, '/');
    size_t len = !slash ? 1 : slash == f->path ? 1 : (size_t)(slash - f->path);
    char *dir = malloc(len + 1);
    if (!dir) return cg__fail(CG_ERR_OOM, "%s: %s: out of host memory", f->fn, f->path);
    memcpy(dir, slash ? f->path : ".", len);
    dir[len] = '\0';
    f->dir = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cg_status s = f->dir >= 0 ? CG_OK : atomic_fail(f, "cannot create temporary file in %s: %s", dir, strerror(errno));
    free(dir);
    return s;
}

/* O_TMPFILE needs /proc to link the file into place without privileges. */
static bool try_unnamed(cg_atomic_file *f) {
    if (access("/proc/self/fd", X_OK) != 0) return false;
    f->fd = openat(f->dir, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    return f->fd >= 0; /* else the file system refuses O_TMPFILE (or the directory is not writable) */
}

static cg_status create_named(cg_atomic_file *f) {
    for (int attempt = 0; attempt < TMP_TRIES; attempt++) {
        draw_tmp_name(f, attempt);
        f->fd = openat(f->dir, f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (f->fd >= 0) {
            f->named = true;
            return CG_OK;
        }
        if (errno != EEXIST) return atomic_fail(f, "cannot create temporary file %s: %s", f->tmp, strerror(errno));
    }
    return atomic_fail(f, "cannot create temporary file: %d names taken", TMP_TRIES);
}

cg_status cg__atomic_begin(cg_atomic_file *f, const char *fn, const char *path) {
    const char *slash = strrchr(path, '/');
    *f = (cg_atomic_file){.fn = fn, .path = path, .base = slash ? slash + 1 : path, .dir = -1, .fd = -1};
    if (!f->base[0] || !strcmp(f->base, ".") || !strcmp(f->base, ".."))
        return cg__fail(CG_ERR_IO, "%s: %s: cannot create temporary file: the path names a directory", fn, path);
    CG_TRY(open_dir(f));
    remove_strays(f);
    return try_unnamed(f) ? CG_OK : create_named(f);
}

cg_status cg__atomic_write(cg_atomic_file *f, const void *buf, size_t n) {
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) /* a short write is retried, so the second one reports ENOSPC or EFBIG */
            return atomic_fail(f, "write failed after %" PRIu64 " bytes: %s", f->written, w < 0 ? strerror(errno) : "no progress");
        p += w, n -= (size_t)w, f->written += (uint64_t)w;
    }
    return CG_OK;
}

/* Gives the unnamed temporary a name in the directory, so that rename can put it in place. */
static cg_status link_unnamed(cg_atomic_file *f) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", f->fd);
    for (int attempt = 0; attempt < TMP_TRIES; attempt++) {
        draw_tmp_name(f, attempt);
        if (linkat(AT_FDCWD, proc, f->dir, f->tmp, AT_SYMLINK_FOLLOW) == 0) {
            f->named = true;
            return CG_OK;
        }
        if (errno != EEXIST) return atomic_fail(f, "cannot link the temporary file into place: %s", strerror(errno));
    }
    return atomic_fail(f, "cannot link the temporary file into place: %d names taken", TMP_TRIES);
}

cg_status cg__atomic_commit(cg_atomic_file *f) {
    if (fsync(f->fd) != 0) return atomic_fail(f, "fsync failed: %s", strerror(errno));
    if (!f->named) CG_TRY(link_unnamed(f));
    int rc = close(f->fd);
    f->fd = -1;
    if (rc != 0) return atomic_fail(f, "close failed: %s", strerror(errno));
    if (renameat(f->dir, f->tmp, f->dir, f->base) != 0)
        return atomic_fail(f, "cannot rename %s over it: %s", f->tmp, strerror(errno));
    f->named = false; /* it is path now */
    /* Make the rename durable. EINVAL: the file system cannot fsync a directory (nothing to do). */
    if (fsync(f->dir) != 0 && errno != EINVAL)
        return atomic_fail(f, "the new file is in place, but the fsync of its directory failed: %s", strerror(errno));
    cg__atomic_abort(f); /* closes the directory */
    return CG_OK;
}
