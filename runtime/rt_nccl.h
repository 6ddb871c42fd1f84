/* rt_nccl.h — NCCL, loaded at run time: the runtime finds the library (MEMSIM_NCCL, else
 * libnccl.so.2 on the loader's path, else the copy PyTorch's wheels ship), declares the part
 * of NCCL's public C API it calls itself, and wraps each call so that a failure is an
 * rt_status with NCCL's message. Before loading it puts NVLink multicast off in the
 * environment of this process and of every process it starts (NCCL_NVLS_ENABLE=0,
 * TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1: multicast can take a shared
 * host's GPUs out of service). Plain C, no CUDA headers (streams are opaque pointers); used by
 * runtime/rt_coll.c, runtime/rt_node.c, runtime/probe_coll.c and the tests, which load a fake
 * library through MEMSIM_NCCL. */
#ifndef MEMSIM_RT_NCCL_H
#define MEMSIM_RT_NCCL_H

#include <stddef.h>

#include "runtime/rt_check.h"

/* NCCL's unique id (ncclUniqueId: 128 bytes), which a group's first rank makes and the others
 * read before they join the communicator. */
#define RT_NCCL_ID_BYTES 128
typedef struct rt_nccl_id {
    char bytes[RT_NCCL_ID_BYTES];
} rt_nccl_id;

/* Element types of the reductions (and of the byte moves: RN_U8). */
typedef enum rt_nccl_type { RN_U8 = 0, RN_BF16, RN_F32, RN_F64 } rt_nccl_type;
size_t rt_nccl_type_bytes(rt_nccl_type t);

typedef struct rt_nccl rt_nccl;

/* The environment NCCL must see (the three variables above): sets each one that is absent or
 * different, in this process (inherited by children), and NCCL_RUNTIME_CONNECT=0 (every
 * connection made with the communicator) when it is unset. Returns how many of the three it
 * changed; when one
 * held another value, names it in note (may be NULL) for a warning. */
int rt_nccl_safe_env(char *note, size_t note_len);

/* Loads NCCL (rt_nccl_safe_env first). RT_ERR_NODEV when no library is found, err saying
 * every place tried; RT_ERR_INVALID when the library lacks a needed symbol or is older than
 * 2.10 (bf16 reductions, send/receive). */
rt_status rt_nccl_load(rt_nccl **out, ms_error *err);
void rt_nccl_free(rt_nccl *n);        /* the handle; the library stays loaded (its threads) */
const char *rt_nccl_path(const rt_nccl *n);
int rt_nccl_version(const rt_nccl *n); /* NCCL's code, e.g. 22703 for 2.27.3 */

rt_status rt_nccl_unique_id(rt_nccl *n, rt_nccl_id *id, ms_error *err);
/* ncclCommInitRank: joins the communicator of nranks made from id as rank (on the calling
 * thread's current CUDA device); blocks until every member has joined. */
rt_status rt_nccl_comm_init(rt_nccl *n, int nranks, const rt_nccl_id *id, int rank,
                            void **comm, ms_error *err);
/* ncclCommInitAll: one communicator per listed device, in this one process (the probe). */
rt_status rt_nccl_comm_init_all(rt_nccl *n, int ndev, const int *devices, void **comms,
                                ms_error *err);
void rt_nccl_comm_destroy(rt_nccl *n, void *comm);
/* ncclCommAbort: ends a communicator whose peers may be gone (no wait for them). */
void rt_nccl_comm_abort(rt_nccl *n, void *comm);

/* The collectives on stream s. Counts are elements of type t (bytes for the all-gather and
 * send/receive, which move bytes). */
rt_status rt_nccl_all_gather(rt_nccl *n, const void *send, void *recv, size_t send_bytes,
                             void *comm, void *s, ms_error *err);
rt_status rt_nccl_reduce_scatter(rt_nccl *n, const void *send, void *recv, size_t recv_count,
                                 rt_nccl_type t, void *comm, void *s, ms_error *err);
rt_status rt_nccl_all_reduce(rt_nccl *n, const void *send, void *recv, size_t count,
                             rt_nccl_type t, void *comm, void *s, ms_error *err);
rt_status rt_nccl_send(rt_nccl *n, const void *buf, size_t bytes, int peer, void *comm, void *s,
                       ms_error *err);
rt_status rt_nccl_recv(rt_nccl *n, void *buf, size_t bytes, int peer, void *comm, void *s,
                       ms_error *err);
rt_status rt_nccl_group_start(rt_nccl *n, ms_error *err);
rt_status rt_nccl_group_end(rt_nccl *n, ms_error *err);
/* ncclCommGetAsyncError: RT_OK while the communicator is healthy (or the library cannot
 * say). */
rt_status rt_nccl_async_error(rt_nccl *n, void *comm, ms_error *err);

#endif
