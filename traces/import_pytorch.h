/* import_pytorch.h — importer of PyTorch CUDA caching-allocator traces: the JSON form of
 * torch.cuda.memory._snapshot() (plain or .gz), or the wrapper {"snapshot", "memory_stats",
 * "meta"} written by traces/capture/record_snapshot.py. One device's alloc / free_completed
 * entries become alloc / free records of a memsim workload trace; segment and oom entries are
 * returned as side information (imp_result, and "meta pytorch.*" lines) so a replay can be
 * compared with what PyTorch's allocator did. Used by `memsim trace import --from
 * pytorch-snapshot`, by validation experiments and by tests. Format notes: FORMAT.md. */
#ifndef MEMSIM_IMPORT_PYTORCH_H
#define MEMSIM_IMPORT_PYTORCH_H

#include "traces/trace.h"
#include "base/util.h"

typedef struct imp_options {
    int device;                /* device index to import; -1: the first with trace entries */
    uint64_t max_file_bytes;   /* refuse larger inputs (decompressed); 0: 2 GiB */
    uint64_t max_size_bytes;   /* a "size" above this is an error; 0 (and the most): 1 PiB,
                                  the workload trace's own limit */
    size_t segment_sizes_meta_max; /* longest "meta pytorch.segment_sizes" (and
                                      pytorch.streams) value written; longer lists are left
                                      out of the meta. 0 (and the most): 4096, trace.c's
                                      limit on a meta value */
} imp_options;

/* Sets the defaults above. */
void imp_options_init(imp_options *o);

/* Which optional values imp_result holds (bits of imp_result.has). */
enum {
    IMP_HAS_STATS_RESERVED_PEAK = 1u << 0,  /* memory_stats "reserved_bytes.all.peak" */
    IMP_HAS_STATS_ALLOCATED_PEAK = 1u << 1, /* memory_stats "allocated_bytes.all.peak" */
    IMP_HAS_STATS_RETRIES = 1u << 2,        /* memory_stats "num_alloc_retries" */
    IMP_HAS_STATS_SEGMENTS = 1u << 3,       /* memory_stats "segment.all.allocated" */
    IMP_HAS_SEGMENT_STATE = 1u << 4,        /* the snapshot's "segments" list was read */
    IMP_HAS_TIME = 1u << 5,                 /* entries carried "time_us" */
    IMP_HAS_STATS_DEVICE_ALLOCS = 1u << 6   /* memory_stats "num_device_alloc" */
};

/* What the import found. Arrays are owned by the result: imp_result_release frees them. */
typedef struct imp_result {
    int device;                  /* the device imported */
    int devices;                 /* number of per-device lists in device_traces */
    unsigned has;                /* IMP_HAS_* bits */
    /* entries of the imported device */
    uint64_t entries;            /* all entries of the device list */
    uint64_t allocs;             /* alloc records written */
    uint64_t frees;              /* free records written (from free_completed) */
    uint64_t free_requested;     /* free_requested entries (noted, not records) */
    uint64_t pending_frees;      /* free_requested but not completed by the end (stay live) */
    uint64_t live_at_end;        /* allocations never freed in the trace */
    uint64_t other_actions;      /* "snapshot", "annotate" and unknown actions: skipped */
    /* warnings: not fatal, the entry is dropped or repaired */
    uint64_t unknown_frees;      /* free_completed of an address not allocated in the trace */
    uint64_t zero_size_allocs;   /* alloc of 0 bytes: dropped */
    uint64_t live_addr_reused;   /* alloc at a live address: an implicit free is written */
    /* streams, numbered in order of first appearance in alloc entries */
    size_t streams;
    int64_t *stream_values;      /* [streams]: the raw "stream" values (cudaStream_t) */
    /* allocator side information: what PyTorch's allocator did */
    uint64_t segments;           /* segment_alloc entries (cudaMalloc calls in the window) */
    uint64_t *segment_sizes;     /* [segments] their sizes in order */
    uint64_t *segment_addrs;     /* [segments] the addresses cudaMalloc returned for them */
    uint64_t segment_frees, segment_maps, segment_unmaps;
    uint64_t ooms;               /* oom entries */
    uint64_t reserved_start_bytes; /* reserved before the first entry (estimated) */
    uint64_t peak_reserved_bytes;  /* start + largest net growth over the trace */
    uint64_t end_reserved_bytes;   /* sum of the device's segments at snapshot time */
    uint64_t peak_requested_bytes; /* largest sum of live requested sizes in the trace */
    double first_time_us, last_time_us; /* "time_us" range (IMP_HAS_TIME) */
    /* memory_stats of the wrapper form (IMP_HAS_STATS_* bits) */
    uint64_t stats_reserved_peak_bytes;
    uint64_t stats_allocated_peak_bytes;
    uint64_t stats_num_alloc_retries;
    uint64_t stats_segments_allocated;  /* 0 with expandable segments: see the next */
    uint64_t stats_num_device_alloc;    /* cudaMalloc and cuMemMap calls */
} imp_result;

/* Frees the arrays of res (not res itself); NULL is a no-op. */
void imp_result_release(imp_result *res);

/* Imports path into a new in-memory trace (*out, freed with trace_free). opt may be NULL
 * (defaults); res may be NULL. On error *out is NULL, res holds nothing to release and
 * err says "FILE:LINE:COLUMN: message" for malformed or hostile input. */
ms_status imp_pytorch_load(const char *path, const imp_options *opt, trace_t **out,
                           imp_result *res, ms_error *err);

/* The same over a buffer already in memory; name is used in messages. */
ms_status imp_pytorch_load_buffer(const char *name, const char *buf, size_t len,
                                  const imp_options *opt, trace_t **out, imp_result *res,
                                  ms_error *err);

/* Imports in_path and writes the workload trace to out_path (".gz": compressed, "-":
 * stdout); the output appears only when complete. */
ms_status imp_pytorch_import(const char *in_path, const char *out_path,
                             const imp_options *opt, imp_result *res, ms_error *err);

/* Prints a human-readable summary of res (for `memsim trace import`). */
void imp_result_print(const imp_result *res, FILE *fp);

#endif
