/*
 * gemv_trace.h: an opt-in probe of k3_gemv_bf16 (issue 13 item 3: the engine's decode GEMVs ran
 * 1.3-2.6x their memory floor while the same kernel alone runs near it). While a trace is on, every
 * k3_gemv_bf16 call records its weights pointer, shape and wall time; k3_gemv_trace_replay then runs
 * the recorded calls again, back to back, on the SAME weight memory (scratch x and y), timing each:
 * the engine's time over the replay's is what the engine adds around the kernel (pool wake-ups,
 * other threads on the 2 cores, cache state), with the memory ceiling's drift between runs taken out.
 * The replay reads the recorded pointers: only call it while those weights are still allocated.
 */
#ifndef K3_GEMV_TRACE_H
#define K3_GEMV_TRACE_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint16_t *w;
    size_t ld, rows, cols;
    uint64_t ns; /* wall time of the call (k3_gemv_bf16's entry to return) */
} k3_gemv_record;

/* Starts recording up to `capacity` calls (later calls are counted, not recorded); 0 = ok, -1 = no memory. */
int k3_gemv_trace_start(size_t capacity);
/* Stops recording; returns the records kept (valid until the next start), the calls seen in *seen and
   the calls made from inside pool tasks in *in_tasks (not recorded: a kernel's own tiles run inline on
   both threads at once, so their wall times overlap and a serial replay is no reference for them). */
const k3_gemv_record *k3_gemv_trace_stop(size_t *kept, size_t *seen, size_t *in_tasks);
/* Replays the kept records in order (trace must be stopped), writing each one's wall ns to ns_out[i]. 0 = ok. */
int k3_gemv_trace_replay(uint64_t *ns_out);

/* Internal: is a trace on (one relaxed load), and add a record. */
int k3_gemv_trace_on(void);
void k3_gemv_trace_add(const uint16_t *w, size_t ld, size_t rows, size_t cols, uint64_t ns);
void k3_gemv_trace_count_in_task(void);
uint64_t k3_gemv_trace_now_ns(void);

#endif
