/* direct_file.h: one shard opened for O_DIRECT reads, with a buffered fallback. */
#ifndef K3_DIRECT_FILE_H
#define K3_DIRECT_FILE_H

#include <stddef.h>
#include <stdint.h>

#define K3_ERR_MESSAGE 512

typedef struct k3_file {
    char *path;
    int fd_direct;     /* -1 when the filesystem refuses O_DIRECT (tmpfs, some FUSE) */
    int fd_buffered;   /* always open: the fallback path */
    uint64_t size;     /* bytes, from fstat at open */
    uint32_t mem_align;    /* buffer address alignment O_DIRECT wants */
    uint32_t offset_align; /* file offset / length alignment O_DIRECT wants */
    int direct_refused;    /* set (atomically) when a direct read returned EINVAL */
} k3_file;

/* Result of one read into a slot. */
typedef struct k3_read_result {
    int status;            /* 0 ok, else an errno value */
    uint64_t data_offset;  /* where the requested bytes start inside the slot */
    uint64_t device_bytes; /* bytes actually transferred (aligned superset included) */
    int direct;            /* 1 when O_DIRECT served it */
    char message[K3_ERR_MESSAGE];
} k3_read_result;

/* Opens `path`; 0 ok, else errno with `message` filled. want_direct=0 never tries O_DIRECT. */
int k3_file_open(k3_file *f, const char *path, int want_direct, char *message, size_t message_len);
void k3_file_close(k3_file *f);

#define K3_BASE_AUTO UINT64_MAX

/*
 * Reads [offset, offset+length) of the file into `slot` (capacity `slot_bytes`, aligned to at
 * least f->mem_align). File byte x lands at slot[x - base]. With base = K3_BASE_AUTO the base is
 * the aligned start under O_DIRECT and `offset` for buffered reads; an explicit base (aligned,
 * <= offset) lets several pieces of one expert fill one slot. Under O_DIRECT the aligned superset
 * is read; buffered reads drop their pages afterwards. data_offset = offset - base.
 * `short_read_at` > 0 simulates a device that returns only that many bytes, `refuse_direct` a
 * filesystem that answers this O_DIRECT read with EINVAL (fault tests).
 * The blocking path of the pread engine; io_uring uses the plan/finish pair below instead.
 */
void k3_file_read(k3_file *f, uint64_t offset, uint64_t length, uint64_t base, uint8_t *slot, uint64_t slot_bytes,
                  uint64_t short_read_at, int refuse_direct, k3_read_result *out);

/*
 * One read, split in three steps so an asynchronous engine can run the transfer itself:
 * k3_file_plan picks the fd (direct unless refused), the aligned span and the slot address;
 * the engine transfers plan.want bytes from plan.start into plan.dst (stopping early only at EOF);
 * k3_file_finish turns the byte count (or -errno) into the result. Both engines share these, so
 * alignment, supersets, EOF and the O_DIRECT fallback behave the same whichever runs the read.
 */
typedef struct k3_read_plan {
    int fd;
    int direct;
    uint8_t *dst;     /* slot address of file byte `start` */
    uint64_t start;   /* first file byte transferred */
    uint64_t span;    /* bytes the full transfer covers (aligned superset under O_DIRECT) */
    uint64_t want;    /* bytes to transfer: span, or less under a simulated short read */
    uint64_t need;    /* bytes from `start` that must arrive: up to offset + length */
    uint64_t offset, length, base;
} k3_read_plan;

/* 0 with `plan` filled; else `out` holds the error (range outside the file, slot too small). */
int k3_file_plan(k3_file *f, uint64_t offset, uint64_t length, uint64_t base, uint8_t *slot, uint64_t slot_bytes,
                 uint64_t short_read_at, k3_read_plan *plan, k3_read_result *out);

enum { K3_READ_FINISHED = 0, K3_READ_RETRY_BUFFERED = 1 };

/*
 * `got` = bytes transferred, or -errno. Fills `out` (short read and I/O errors name the file and
 * offsets). Returns K3_READ_RETRY_BUFFERED when an O_DIRECT read was refused with EINVAL: the file
 * is marked (every later read is buffered) and the caller plans the read again.
 */
int k3_file_finish(k3_file *f, const k3_read_plan *plan, int64_t got, k3_read_result *out);

/* pread until `want` bytes or EOF; bytes read or -errno. */
int64_t k3_pread_full(int fd, uint8_t *dst, uint64_t want, uint64_t offset);

/* The O_DIRECT alignment of the file open as `fd` (statx STATX_DIOALIGN, at least 4096; 4096 when unknown). */
void k3_dio_alignment(int fd, uint32_t *mem_align, uint32_t *offset_align);

/* The largest span an aligned-superset read of `length` bytes may need. */
uint64_t k3_file_superset_bytes(uint64_t length, uint32_t align);

#endif
