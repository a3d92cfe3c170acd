/* Crash-safe output file: built under no name (O_TMPFILE) or a hidden temporary name in the
 * target directory, published at commit by link/rename after fsync. Private to the library. */
#ifndef FEATHER_OUTFILE_H
#define FEATHER_OUTFILE_H

#include "internal.h"

typedef struct feather_outfile {
    char *path;      /* as given, for messages */
    char *base;      /* final name inside the directory */
    char *tmpname;   /* hidden name in the directory while one exists, else NULL */
    int dirfd, fd;
    int dir_syncable; /* dirfd can be fsync'd (not an O_PATH descriptor) */
    int anonymous;   /* O_TMPFILE: the file has no name until commit */
    int overwrite;
    unsigned char *buf;
    size_t buflen, bufcap;
    uint64_t offset;  /* bytes handed to the kernel so far */
    uint64_t flushed; /* writeback started up to here */
    uint64_t settled; /* writeback finished and pages dropped up to here */
} feather_outfile;

/* Knobs for tests: force the named-temporary fallback, shrink the write buffer. */
struct feather_outfile_knobs {
    int force_named_temp;
    size_t buffer_size; /* 0 = default */
};
extern struct feather_outfile_knobs feather_outfile_knobs;

/* Checks that path is not one of inputs (device+inode, and real path), that it does not exist
 * unless overwrite, and creates the temporary file. On failure f holds nothing to release. */
feather_status feather_outfile_open(feather_outfile *f, const char *path, int overwrite,
                                    const char *const *inputs, size_t ninputs, feather_error *err);

/* Appends bytes (buffered; large chunks go straight to the kernel). Polls feather_cancelled()
 * before each system call. */
feather_status feather_outfile_write(feather_outfile *f, const void *data, size_t len,
                                     feather_error *err);

/* Hands the buffer to the kernel. */
feather_status feather_outfile_flush(feather_outfile *f, feather_error *err);

/* Overwrites bytes already flushed (patching placeholders). */
feather_status feather_outfile_pwrite(feather_outfile *f, const void *data, size_t len,
                                      uint64_t offset, feather_error *err);

/* Flushes, fsyncs, publishes under the final name (atomically replacing it when overwrite,
 * never clobbering a file that appeared meanwhile otherwise), fsyncs the directory and
 * releases f. On failure the temporary file is discarded and f released. */
feather_status feather_outfile_commit(feather_outfile *f, feather_error *err);

/* Discards the temporary file and releases f. Safe on a zeroed or released f. */
void feather_outfile_discard(feather_outfile *f);

#endif
