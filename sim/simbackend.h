/* simbackend.h — the simulated memory backend: an mb_backend over a modelled device address
 * space. It enforces the device capacity, hands out deterministic addresses, tracks VMM
 * reservations, physical handles and mappings (so double mapping and leaks are caught), and
 * charges each call the latency the machine profile gives. The executor drains the charged
 * time after each allocator call and adds it to the stream that made the call. The segments
 * it made (dev_malloc sizes, in order) are kept for replay reports and tests. */
#ifndef MEMSIM_SIMBACKEND_H
#define MEMSIM_SIMBACKEND_H

#include "memory/membackend.h"
#include "traces/machine.h"

typedef struct simbe simbe_t;

/* m may be NULL: no latencies, capacity given explicitly. capacity 0: machine_usable_bytes. */
simbe_t *simbe_new(const machine_t *m, uint64_t capacity_bytes, uint64_t host_capacity_bytes);
void simbe_free(simbe_t *b);
/* The backend to hand to alloc_new. */
const mb_backend *simbe_backend(simbe_t *b);

/* The cuMemSetAccess mappings of the calls since the last take whose time depends on the link
 * (the profile has vmm.set_access_d2h_us): the executor paces them, each at that rate if a
 * device-to-host copy is on the link when it starts, else at vmm.set_access_us. Resets the
 * count; take it before simbe_take_cost_us, which charges mappings left at the plain rate. */
double simbe_take_set_access_mappings(simbe_t *b);
/* Time charged since the last call, and whether a device synchronize happened in between
 * (cudaFree and explicit synchronizes). Resets both. */
double simbe_take_cost_us(simbe_t *b, int *synced);

uint64_t simbe_device_used_bytes(const simbe_t *b);  /* physical bytes in use */
uint64_t simbe_device_peak_bytes(const simbe_t *b);
uint64_t simbe_host_used_bytes(const simbe_t *b);
uint64_t simbe_host_peak_bytes(const simbe_t *b);

/* The sizes of every dev_malloc in order (PyTorch's segment_alloc sequence). */
size_t simbe_segment_count(const simbe_t *b);
uint64_t simbe_segment_bytes(const simbe_t *b, size_t i);
/* Live VMM objects (for leak checks in tests). */
size_t simbe_live_handles(const simbe_t *b);
size_t simbe_live_mappings(const simbe_t *b);
size_t simbe_live_reservations(const simbe_t *b);
size_t simbe_live_segments(const simbe_t *b);

/* Segment addresses. By default dev_malloc hands out ascending addresses from a bump pointer.
 * simbe_set_descending(b, 1) hands them out from the top down instead (the CUDA driver's
 * cudaMalloc mostly returns decreasing addresses); only before the first dev_malloc.
 * simbe_set_segment_script gives the addresses of a recorded run: while the i-th dev_malloc
 * asks for bytes[i] and [addrs[i], addrs[i] + bytes[i]) overlaps no live segment it returns
 * addrs[i]; from the first call that differs on, the bump pointer gives every address,
 * outside the script's range. Set the order first. The arrays are copied; MS_ERR_INVALID
 * after the first dev_malloc or for a second script. simbe_segment_script_used: how many
 * scripted addresses were handed out. */
void simbe_set_descending(simbe_t *b, int on);
ms_status simbe_set_segment_script(simbe_t *b, const uint64_t *addrs, const uint64_t *bytes,
                                   size_t n);
size_t simbe_segment_script_used(const simbe_t *b);

/* Makes the next n calls of any kind fail with MS_ERR_OOM after `after` successful calls
 * (fault injection for tests). */
void simbe_fail_after(simbe_t *b, uint64_t after_calls);

#endif
