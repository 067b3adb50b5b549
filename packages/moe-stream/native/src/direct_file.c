/* direct_file.c: O_DIRECT reads of byte ranges at any offset, with a buffered fallback. */
#define _GNU_SOURCE
#include "direct_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- alignment query */

/* statx(STATX_DIOALIGN) on Linux >= 6.1; 4096 (safe for every common device) otherwise. Shared by
   the reads here and the O_DIRECT writer (src/io/direct-write.ts, through the addon's dioAlignment). */
void k3_dio_alignment(int fd, uint32_t *mem_align, uint32_t *offset_align) {
    *mem_align = 4096;
    *offset_align = 4096;
#ifdef STATX_DIOALIGN
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN) &&
        sx.stx_dio_offset_align > 0 && sx.stx_dio_mem_align > 0) {
        /* Never go below 4096: a page-aligned arena is free and keeps I/O page-granular. */
        *offset_align = sx.stx_dio_offset_align > 4096 ? sx.stx_dio_offset_align : 4096;
        *mem_align = sx.stx_dio_mem_align > 4096 ? sx.stx_dio_mem_align : 4096;
    }
#else
    (void)fd;
#endif
}

static void query_dio_alignment(k3_file *f) { k3_dio_alignment(f->fd_buffered, &f->mem_align, &f->offset_align); }

uint64_t k3_file_superset_bytes(uint64_t length, uint32_t align) {
    /* start rounds down by < align, end rounds up: at most round_up(length, align) + align. */
    return (length + align - 1) / align * align + align;
}

/* ---------------------------------------------------------------- open / close */

int k3_file_open(k3_file *f, const char *path, int want_direct, char *message, size_t message_len) {
    memset(f, 0, sizeof(*f));
    f->fd_direct = -1;
    f->fd_buffered = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd_buffered < 0) {
        int e = errno;
        snprintf(message, message_len, "cannot open shard %s: %s", path, strerror(e));
        return e;
    }
    struct stat st;
    if (fstat(f->fd_buffered, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno ? errno : EINVAL;
        snprintf(message, message_len, "shard %s is not a regular file", path);
        close(f->fd_buffered);
        f->fd_buffered = -1;
        return e;
    }
    f->size = (uint64_t)st.st_size;
    f->path = strdup(path);
    /* Random access: the kernel's readahead would only read bytes nobody asked for. */
    posix_fadvise(f->fd_buffered, 0, 0, POSIX_FADV_RANDOM);
    query_dio_alignment(f);
    if (want_direct) f->fd_direct = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT); /* EINVAL on tmpfs: fine */
    return 0;
}

void k3_file_close(k3_file *f) {
    if (f->fd_direct >= 0) close(f->fd_direct);
    if (f->fd_buffered >= 0) close(f->fd_buffered);
    free(f->path);
    memset(f, 0, sizeof(*f));
    f->fd_direct = -1;
    f->fd_buffered = -1;
}

/* ---------------------------------------------------------------- reading */

int64_t k3_pread_full(int fd, uint8_t *dst, uint64_t want, uint64_t offset) {
    uint64_t got = 0;
    while (got < want) {
        ssize_t n = pread(fd, dst + got, want - got, (off_t)(offset + got));
        if (n < 0) {
            if (errno == EINTR) continue;
            return -(int64_t)errno;
        }
        if (n == 0) break; /* EOF */
        got += (uint64_t)n;
    }
    return (int64_t)got;
}

static void fail(k3_read_result *out, int status, const char *fmt, const char *path, uint64_t a, uint64_t b, uint64_t c) {
    out->status = status;
    snprintf(out->message, sizeof(out->message), fmt, path, (unsigned long long)a, (unsigned long long)b,
             (unsigned long long)c);
}

/* The aligned superset [start, end) lands at slot[start - base]. */
static int plan_direct(k3_file *f, uint64_t offset, uint64_t length, uint64_t base, uint8_t *slot,
                       uint64_t slot_bytes, k3_read_plan *plan, k3_read_result *out) {
    uint64_t a = f->offset_align;
    uint64_t start = offset / a * a;
    uint64_t end = (offset + length + a - 1) / a * a;
    if (base == K3_BASE_AUTO) base = start;
    if (base > start || base % a != 0 || end - base > slot_bytes) {
        fail(out, EINVAL, "%s: aligned read [%llu, %llu) does not fit the slot from base %llu", f->path, start, end, base);
        return -1;
    }
    plan->fd = f->fd_direct;
    plan->direct = 1;
    plan->dst = slot + (start - base);
    plan->start = start;
    plan->span = end - start;
    plan->need = offset - start + length;
    plan->base = base;
    return 0;
}

static int plan_buffered(k3_file *f, uint64_t offset, uint64_t length, uint64_t base, uint8_t *slot,
                         uint64_t slot_bytes, k3_read_plan *plan, k3_read_result *out) {
    if (base == K3_BASE_AUTO) base = offset;
    if (base > offset || offset - base + length > slot_bytes) {
        fail(out, EINVAL, "%s: read [%llu, +%llu) does not fit the slot from base %llu", f->path, offset, length, base);
        return -1;
    }
    plan->fd = f->fd_buffered;
    plan->direct = 0;
    plan->dst = slot + (offset - base);
    plan->start = offset;
    plan->span = length;
    plan->need = length;
    plan->base = base;
    return 0;
}

int k3_file_plan(k3_file *f, uint64_t offset, uint64_t length, uint64_t base, uint8_t *slot, uint64_t slot_bytes,
                 uint64_t short_read_at, k3_read_plan *plan, k3_read_result *out) {
    memset(out, 0, sizeof(*out));
    memset(plan, 0, sizeof(*plan));
    if (offset > f->size || length > f->size - offset) {
        fail(out, ERANGE, "%s: truncated shard: it has %llu bytes but the read needs bytes up to %llu (offset %llu)",
             f->path, f->size, offset + length, offset);
        return -1;
    }
    if (length > slot_bytes) {
        fail(out, EINVAL, "%s: read of %llu bytes does not fit a %llu-byte slot", f->path, length, slot_bytes, 0);
        return -1;
    }
    plan->offset = offset;
    plan->length = length;
    int rc = f->fd_direct >= 0 && !__atomic_load_n(&f->direct_refused, __ATOMIC_RELAXED)
                 ? plan_direct(f, offset, length, base, slot, slot_bytes, plan, out)
                 : plan_buffered(f, offset, length, base, slot, slot_bytes, plan, out);
    if (rc != 0) return rc;
    plan->want = plan->span;
    if (short_read_at > 0 && short_read_at < plan->span) {
        /* A simulated short read stays aligned under O_DIRECT: an unaligned length would get a real
           EINVAL, which would look like a filesystem refusing O_DIRECT and switch the file to buffered. */
        uint64_t a = plan->direct ? f->offset_align : 1;
        plan->want = short_read_at / a * a > a ? short_read_at / a * a : a;
        if (plan->want > plan->span) plan->want = plan->span;
    }
    return 0;
}

int k3_file_finish(k3_file *f, const k3_read_plan *plan, int64_t got, k3_read_result *out) {
    memset(out, 0, sizeof(*out));
    if (plan->direct && got == -EINVAL) {
        /* The filesystem refuses O_DIRECT reads (opened fine, fails at read): buffered from now on. */
        __atomic_store_n(&f->direct_refused, 1, __ATOMIC_RELAXED);
        return K3_READ_RETRY_BUFFERED;
    }
    /* Drop what we read so the page cache does not grow past the budget (and benches stay cold). */
    if (!plan->direct) posix_fadvise(f->fd_buffered, (off_t)plan->offset, (off_t)plan->length, POSIX_FADV_DONTNEED);
    out->direct = plan->direct;
    out->data_offset = plan->offset - plan->base;
    if (got < 0) {
        fail(out, (int)-got, "%s: read error at offset %llu (length %llu): errno %llu", f->path, plan->start, plan->span,
             (uint64_t)-got);
        return K3_READ_FINISHED;
    }
    out->device_bytes = (uint64_t)got;
    uint64_t lead = plan->need - plan->length; /* superset bytes before the requested ones */
    if ((uint64_t)got < plan->need)
        fail(out, EIO, "%s: short read: got %llu bytes of the %llu needed at offset %llu", f->path,
             (uint64_t)got > lead ? (uint64_t)got - lead : 0, plan->length, plan->offset);
    return K3_READ_FINISHED;
}

void k3_file_read(k3_file *f, uint64_t offset, uint64_t length, uint64_t base, uint8_t *slot, uint64_t slot_bytes,
                  uint64_t short_read_at, int refuse_direct, k3_read_result *out) {
    k3_read_plan plan;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (k3_file_plan(f, offset, length, base, slot, slot_bytes, short_read_at, &plan, out) != 0) return;
        int64_t got = plan.direct && refuse_direct ? -EINVAL : k3_pread_full(plan.fd, plan.dst, plan.want, plan.start);
        if (k3_file_finish(f, &plan, got, out) == K3_READ_FINISHED) return;
    }
}
