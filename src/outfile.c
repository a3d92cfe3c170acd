/* Crash-safe output files.
 *
 * The file is created in the target directory with O_TMPFILE, so until commit it has no name
 * at all: kill -9, a power cut or a full disk leave nothing behind. Commit fsyncs it, gives it
 * a name with linkat() and, when replacing, renames a hidden temporary name over the final
 * one (rename is atomic, so readers see the old file or the new one, never a mix); then the
 * directory is fsync'd so the new entry survives a crash. Filesystems without O_TMPFILE get a
 * hidden named temporary file instead (removed on abort; only kill -9 can strand it).
 *
 * Without overwrite the final name is created with linkat() (or renameat2 RENAME_NOREPLACE),
 * which fails if the name exists, so a file that appeared while we were writing is never
 * clobbered. With overwrite, a final name that is a symbolic link is replaced by the file (the
 * link's target is left alone), as rename() does. */
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct feather_outfile_knobs feather_outfile_knobs;

/* 16 MiB: large enough that the per-call cost of write() vanishes next to copying. */
#define DEFAULT_BUFFER (16u << 20)
/* Chunks at least this large skip the buffer (one copy less): the buffer is flushed first and
 * the chunk goes straight to write(). */
#define DIRECT_MIN (1u << 20)
/* Write-behind: dirty pages are handed to the device in windows of this size as soon as they
 * are complete, and once a window is more than a few windows behind, we wait for it and drop
 * it from the page cache. Dirty memory stays bounded whatever the file size, the device never
 * idles until the final fsync, and copying a model larger than RAM does not push everything
 * else out of the cache. */
#ifndef WRITE_BEHIND
#define WRITE_BEHIND (32u << 20)
#endif
#define WRITE_BEHIND_LAG (4 * (uint64_t)WRITE_BEHIND)

static void set_name_error(feather_error *err, feather_status code, const char *path,
                           const char *what, int e) {
    feather_fail(err, code, "%s: %s: %s", path, what, strerror(e));
}

static void random_suffix(char out[7]) {
    static const char alphabet[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static _Atomic unsigned counter;
    unsigned char r[6];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                     ((uint64_t)getpid() << 40) ^ ((uint64_t)counter++ * 0x9e3779b97f4a7c15ull);
        for (int i = 0; i < 6; i++) r[i] = (unsigned char)(x >> (8 * i));
    }
    for (int i = 0; i < 6; i++) out[i] = alphabet[r[i] % (sizeof alphabet - 1)];
    out[6] = 0;
}

/* ".BASE.XXXXXX.tmp", the base cut so the whole name stays within NAME_MAX. */
static char *temp_name(const char *base) {
    char sfx[7];
    random_suffix(sfx);
    size_t bl = strlen(base);
    if (bl > 200) bl = 200;
    char *s = malloc(bl + 16);
    if (s) snprintf(s, bl + 16, ".%.*s.%s.tmp", (int)bl, base, sfx);
    return s;
}

static feather_status check_inputs(const char *path, const char *dir, const char *base,
                                   const char *const *inputs, size_t ninputs,
                                   feather_error *err) {
    if (!ninputs) return FEATHER_OK;
    struct stat ost;
    int out_exists = stat(path, &ost) == 0;
    char *out_real = NULL;
    char *dreal = realpath(dir, NULL);
    if (dreal) {
        size_t n = strlen(dreal) + strlen(base) + 2;
        out_real = malloc(n);
        if (out_real) snprintf(out_real, n, "%s%s%s", dreal, strcmp(dreal, "/") ? "/" : "", base);
        free(dreal);
    }
    feather_status st = FEATHER_OK;
    for (size_t i = 0; i < ninputs && st == FEATHER_OK; i++) {
        if (!inputs[i]) continue;
        struct stat ist;
        int same = out_exists && stat(inputs[i], &ist) == 0 && ist.st_dev == ost.st_dev &&
                   ist.st_ino == ost.st_ino;
        if (!same && out_real) {
            char *ireal = realpath(inputs[i], NULL);
            same = ireal && strcmp(ireal, out_real) == 0;
            free(ireal);
        }
        if (same)
            st = feather_fail(err, FEATHER_E_ARG, "%s: output is the input file %s", path,
                              inputs[i]);
    }
    free(out_real);
    return st;
}

static feather_status create_named_temp(feather_outfile *f, feather_error *err) {
    for (int tries = 0; tries < 100; tries++) {
        char *name = temp_name(f->base);
        if (!name) return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", f->path);
        int fd = openat(f->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) {
            f->fd = fd;
            f->tmpname = name;
            return FEATHER_OK;
        }
        int e = errno;
        free(name);
        if (e != EEXIST) {
            set_name_error(err, FEATHER_E_IO, f->path, "cannot create a temporary file", e);
            return FEATHER_E_IO;
        }
    }
    return feather_fail(err, FEATHER_E_IO, "%s: cannot create a temporary file: no free name",
                        f->path);
}

feather_status feather_outfile_open(feather_outfile *f, const char *path, int overwrite,
                                    const char *const *inputs, size_t ninputs,
                                    feather_error *err) {
    memset(f, 0, sizeof *f);
    f->dirfd = f->fd = -1;
    if (!path || !*path) return feather_fail(err, FEATHER_E_ARG, "output path is empty");
    size_t plen = strlen(path);
    if (path[plen - 1] == '/')
        return feather_fail(err, FEATHER_E_ARG, "%s: output path names a directory", path);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!strcmp(base, ".") || !strcmp(base, ".."))
        return feather_fail(err, FEATHER_E_ARG, "%s: output path names a directory", path);
    char dir[4096];
    if (feather_dir_of(path, dir, sizeof dir)) return feather_fail(err, FEATHER_E_ARG, "%s: output path too long", path);
    f->path = strdup(path);
    f->base = strdup(base);
    f->overwrite = overwrite;
    feather_status st = FEATHER_OK;
    if (!f->path || !f->base) {
        st = feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    st = check_inputs(path, dir, base, inputs, ninputs, err);
    if (st) goto fail;

    f->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    f->dir_syncable = 1;
    if (f->dirfd < 0 && errno == EACCES) {
        /* A write-only directory can still take new files; we just cannot fsync it. */
        f->dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        f->dir_syncable = 0;
    }
    if (f->dirfd < 0) {
        int e = errno;
        st = feather_fail(err, FEATHER_E_IO, "%s: cannot open directory %s: %s", path, dir,
                          strerror(e));
        goto fail;
    }

    struct stat sb;
    if (fstatat(f->dirfd, f->base, &sb, AT_SYMLINK_NOFOLLOW) == 0) {
        if (!overwrite) {
            st = feather_fail(err, FEATHER_E_EXISTS,
                              "%s: output exists (ask for overwrite to replace it)", path);
            goto fail;
        }
        if (S_ISDIR(sb.st_mode)) {
            st = feather_fail(err, FEATHER_E_ARG, "%s: output path is a directory", path);
            goto fail;
        }
    }

    if (!feather_outfile_knobs.force_named_temp) {
        f->fd = openat(f->dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
        if (f->fd >= 0) {
            f->anonymous = 1;
        } else if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
            int e = errno;
            st = feather_fail(err, FEATHER_E_IO, "%s: cannot create a file in %s: %s", path,
                              dir, strerror(e));
            goto fail;
        }
    }
    if (f->fd < 0) {
        st = create_named_temp(f, err);
        if (st) goto fail;
    }
    f->bufcap = feather_outfile_knobs.buffer_size ? feather_outfile_knobs.buffer_size
                                                  : DEFAULT_BUFFER;
    return FEATHER_OK;
fail:
    feather_outfile_discard(f);
    return st;
}

static feather_status write_all(feather_outfile *f, const unsigned char *p, size_t n,
                                feather_error *err) {
    while (n) {
        /* write() moves at most 0x7ffff000 bytes per call on Linux. */
        size_t chunk = n < (1u << 30) ? n : (1u << 30);
        ssize_t w = write(f->fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            set_name_error(err, FEATHER_E_IO, f->path, "cannot write", errno);
            return FEATHER_E_IO;
        }
        if (w == 0) {
            set_name_error(err, FEATHER_E_IO, f->path, "cannot write", ENOSPC);
            return FEATHER_E_IO;
        }
        p += w;
        n -= (size_t)w;
        f->offset += (uint64_t)w;
    }
    return FEATHER_OK;
}

static feather_status write_behind(feather_outfile *f, feather_error *err) {
    if (f->offset - f->flushed < WRITE_BEHIND) return FEATHER_OK;
    /* Start writeback of the new window; this does not wait for it. */
    if (sync_file_range(f->fd, (off_t)f->flushed, (off_t)(f->offset - f->flushed),
                        SYNC_FILE_RANGE_WRITE) != 0 &&
        (errno == EIO || errno == ENOSPC)) {
        set_name_error(err, FEATHER_E_IO, f->path, "cannot write", errno);
        return FEATHER_E_IO;
    }
    f->flushed = f->offset;
    if (f->flushed - f->settled < WRITE_BEHIND_LAG) return FEATHER_OK;
    /* Windows well behind are probably on the device by now: wait for them, then drop them. */
    uint64_t upto = f->flushed - WRITE_BEHIND_LAG / 2;
    if (sync_file_range(f->fd, (off_t)f->settled, (off_t)(upto - f->settled),
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                            SYNC_FILE_RANGE_WAIT_AFTER) == 0) {
        posix_fadvise(f->fd, (off_t)f->settled, (off_t)(upto - f->settled), POSIX_FADV_DONTNEED);
    } else if (errno == EIO || errno == ENOSPC) {
        set_name_error(err, FEATHER_E_IO, f->path, "cannot write", errno);
        return FEATHER_E_IO;
    }
    f->settled = upto;
    return FEATHER_OK;
}

feather_status feather_outfile_flush(feather_outfile *f, feather_error *err) {
    if (!f->buflen) return FEATHER_OK;
    if (feather_cancelled())
        return feather_fail(err, FEATHER_E_CANCELLED, "%s: interrupted", f->path);
    feather_status st = write_all(f, f->buf, f->buflen, err);
    f->buflen = 0;
    if (st) return st;
    return write_behind(f, err);
}

feather_status feather_outfile_write(feather_outfile *f, const void *data, size_t len,
                                     feather_error *err) {
    const unsigned char *p = data;
    feather_status st;
    while (len) {
        if (len >= DIRECT_MIN || len >= f->bufcap) {
            /* Big chunk: skip the copy, in buffer-sized steps so cancellation is noticed
             * promptly. */
            if ((st = feather_outfile_flush(f, err))) return st;
            if (feather_cancelled())
                return feather_fail(err, FEATHER_E_CANCELLED, "%s: interrupted", f->path);
            size_t n = len < f->bufcap ? len : f->bufcap;
            if ((st = write_all(f, p, n, err)) || (st = write_behind(f, err))) return st;
            p += n;
            len -= n;
            continue;
        }
        if (!f->buf) {
            f->buf = malloc(f->bufcap);
            if (!f->buf) return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", f->path);
        }
        size_t n = f->bufcap - f->buflen;
        if (n > len) n = len;
        memcpy(f->buf + f->buflen, p, n);
        f->buflen += n;
        p += n;
        len -= n;
        if (f->buflen == f->bufcap && (st = feather_outfile_flush(f, err))) return st;
    }
    return FEATHER_OK;
}

feather_status feather_outfile_pwrite(feather_outfile *f, const void *data, size_t len,
                                      uint64_t offset, feather_error *err) {
    const unsigned char *p = data;
    while (len) {
        ssize_t w = pwrite(f->fd, p, len, (off_t)offset);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            set_name_error(err, FEATHER_E_IO, f->path, "cannot write", w < 0 ? errno : ENOSPC);
            return FEATHER_E_IO;
        }
        p += w;
        len -= (size_t)w;
        offset += (uint64_t)w;
    }
    return FEATHER_OK;
}

/* Gives the anonymous file a name in the directory. */
static int link_anonymous(feather_outfile *f, const char *name) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", f->fd);
    if (linkat(AT_FDCWD, proc, f->dirfd, name, AT_SYMLINK_FOLLOW) == 0) return 0;
    if (errno != ENOENT) return -1;
    /* No /proc: AT_EMPTY_PATH does the same but needs CAP_DAC_READ_SEARCH. */
    return linkat(f->fd, "", f->dirfd, name, AT_EMPTY_PATH);
}

static feather_status publish(feather_outfile *f, feather_error *err) {
    if (!f->overwrite) {
        int r;
        if (f->anonymous) {
            r = link_anonymous(f, f->base);
        } else {
            r = linkat(f->dirfd, f->tmpname, f->dirfd, f->base, 0);
            if (r != 0 && errno != EEXIST)
                r = renameat2(f->dirfd, f->tmpname, f->dirfd, f->base, RENAME_NOREPLACE);
        }
        if (r != 0) {
            if (errno == EEXIST)
                return feather_fail(err, FEATHER_E_EXISTS,
                                    "%s: output appeared while writing; not replaced", f->path);
            set_name_error(err, FEATHER_E_IO, f->path, "cannot create", errno);
            return FEATHER_E_IO;
        }
        if (f->tmpname && unlinkat(f->dirfd, f->tmpname, 0) != 0 && errno != ENOENT) {
            /* The file is in place; only the extra name is left. */
        }
        free(f->tmpname);
        f->tmpname = NULL;
        return FEATHER_OK;
    }
    if (f->anonymous) {
        for (int tries = 0; !f->tmpname; tries++) {
            char *name = temp_name(f->base);
            if (!name) return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", f->path);
            if (link_anonymous(f, name) == 0) {
                f->tmpname = name;
                break;
            }
            int e = errno;
            free(name);
            if (e != EEXIST || tries == 100) {
                set_name_error(err, FEATHER_E_IO, f->path, "cannot create", e);
                return FEATHER_E_IO;
            }
        }
    }
    if (renameat(f->dirfd, f->tmpname, f->dirfd, f->base) != 0) {
        set_name_error(err, FEATHER_E_IO, f->path, "cannot rename into place", errno);
        return FEATHER_E_IO;
    }
    free(f->tmpname);
    f->tmpname = NULL;
    return FEATHER_OK;
}

feather_status feather_outfile_commit(feather_outfile *f, feather_error *err) {
    feather_status st = feather_outfile_flush(f, err);
    if (!st && fsync(f->fd) != 0) {
        set_name_error(err, FEATHER_E_IO, f->path, "cannot write (fsync)", errno);
        st = FEATHER_E_IO;
    }
    if (!st) st = publish(f, err);
    if (!st && f->dir_syncable && fsync(f->dirfd) != 0 && errno != EINVAL) {
        /* The data is safe; the directory entry may not survive a crash. */
        set_name_error(err, FEATHER_E_IO, f->path, "cannot sync the directory", errno);
        st = FEATHER_E_IO;
    }
    feather_outfile_discard(f);
    return st;
}

void feather_outfile_discard(feather_outfile *f) {
    if (f->fd >= 0) close(f->fd);
    if (f->tmpname && f->dirfd >= 0) unlinkat(f->dirfd, f->tmpname, 0);
    if (f->dirfd >= 0) close(f->dirfd);
    free(f->tmpname);
    free(f->path);
    free(f->base);
    free(f->buf);
    memset(f, 0, sizeof *f);
    f->fd = f->dirfd = -1;
}

feather_status feather_write_file(const char *path, const void *data, size_t len, const feather_write_options *opts,
                                  feather_error *err) {
    feather_outfile f;
    feather_status st = feather_outfile_open(&f, path, opts && opts->overwrite, opts ? opts->inputs : NULL,
                                             opts ? opts->ninputs : 0, err);
    if (st) return st;
    if ((st = feather_outfile_write(&f, data, len, err))) {
        feather_outfile_discard(&f);
        return st;
    }
    return feather_outfile_commit(&f, err);
}
