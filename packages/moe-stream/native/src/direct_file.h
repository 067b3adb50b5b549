/* direct_file.h: one shard opened for O_DIRECT reads, with a buffered fallback. */
#ifndef K3_DIRECT_FILE_H
#define K3_DIRECT_FILE_H

#include <stddef.h>
#include <stdint.h>

#define K3_ERR_MESSAGE 256

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
 * `short_read_at` > 0 simulates a device that returns only that many bytes (fault tests).
 */
void k3_file_read(k3_file *f, uint64_t offset, uint64_t length, uint64_t base, uint8_t *slot, uint64_t slot_bytes,
                  uint64_t short_read_at, k3_read_result *out);

/* The largest span an aligned-superset read of `length` bytes may need. */
uint64_t k3_file_superset_bytes(uint64_t length, uint32_t align);

#endif
