/* machine.h — machine profiles: the GPU, host link, host, driver/allocator latencies and
 * node of one machine, each number with the source it came from (format in FORMAT.md).
 * Shipped profiles live in traces/machines/NAME.machine. Used by the generator's op-time
 * model, the planners' cost models, the simulator's resources and the runtime's probe. */
#ifndef MEMSIM_MACHINE_H
#define MEMSIM_MACHINE_H

#include "base/util.h"

#define MACHINE_NAME_MAX 64

/* Plain data: every field is one "key value # source" line of the profile file, in the
 * order of machine_fields(). Units are in the names. */
typedef struct machine {
    char name[MACHINE_NAME_MAX];
    char gpu_name[MACHINE_NAME_MAX];
    /* GPU */
    uint64_t gpu_hbm_bytes;          /* physical device memory */
    uint64_t gpu_reserved_bytes;     /* taken by the CUDA context, NCCL, cuBLAS workspaces */
    double gpu_peak_bf16_flops;      /* dense bf16 tensor-core peak, FLOP/s (MFU denominator) */
    double gpu_peak_fp32_flops;      /* FP32 non-tensor peak, FLOP/s */
    double gpu_hbm_Bps;              /* device memory bandwidth, bytes/s */
    double gpu_gemm_eff;             /* achieved fraction of peak for large GEMMs */
    double gpu_attn_eff;             /* achieved fraction of peak for flash attention */
    double gpu_mem_eff;              /* achieved fraction of HBM bandwidth, memory-bound ops */
    double gpu_kernel_launch_us;     /* fixed cost per op */
    double gpu_fp32_gemm_eff;        /* fp32 GEMM: eff * F / (F + half) of the fp32 peak */
    double gpu_fp32_gemm_half_flops; /*   (0: gpu_gemm_eff and the bf16 ramp) */
    double gpu_gemm_even_eff;        /* a GEMM with a dimension even but not a multiple of 16
                                        bytes: fraction of the aligned rate (0: not modelled) */
    double gpu_gemm_odd_eff;         /* the same with an odd dimension (0: not modelled) */
    double gpu_sdpa_fwd_eff;         /* fused attention forward: eff * S / (S + half), d 128 */
    double gpu_sdpa_fwd_half_seq;    /*   (0: gpu_attn_eff for every attention kernel) */
    double gpu_sdpa_bwd_eff;         /* the same for the backward */
    double gpu_sdpa_bwd_half_seq;
    double gpu_sdpa_hd64_fwd;        /* head dim 64 relative to 128, forward (0: 1) */
    double gpu_sdpa_hd64_bwd;        /* the same, backward */
    double gpu_sdpa_hd256_fwd;       /* head dim 256 relative to 128, forward (0: 1) */
    double gpu_sdpa_hd256_bwd;       /* the same, backward */
    double gpu_sdpa_dropout_fwd;     /* SDPA forward with dropout over without (0: 1) */
    double gpu_sdpa_dropout_bwd;     /* the same, backward */
    double gpu_ew_nv_elems_per_s;    /* PyTorch's non-vectorized element-wise kernels
                                        (TensorIterator with a broadcast or strided operand,
                                        or a dtype change that widens): elements per second;
                                        0: not measured, their time from bytes only */
    /* host link (per GPU, pinned memory unless named otherwise) */
    double link_h2d_Bps;
    double link_d2h_Bps;
    double link_duplex_Bps;          /* both directions together */
    double link_small_copy_us;       /* fixed latency per copy */
    double link_pageable_h2d_Bps;
    double link_pageable_d2h_Bps;
    double dha_read_Bps;             /* kernel reading mapped pinned host memory */
    double dha_write_Bps;
    double dha_gemm_eff;             /* DHA efficiency factor per op kind (MemFerry) */
    double dha_other_eff;
    double dha_link_weight;          /* a DHA flow's share of the link against a copy (1 = fair) */
    double dha_gemm_rows;            /* rows per read of a GEMM's host operand (0: read once) */
    double dha_inflight_bytes;       /* one wave's host bytes in flight (0: not modelled) */
    /* host */
    uint64_t host_mem_bytes;         /* per node, shared by its GPUs */
    int64_t host_cpu_cores;          /* per node */
    double host_adam_params_per_s;   /* CPU Adam throughput per GPU's share of cores */
    double host_eager_kernel_us;     /* PyTorch eager's host time per kernel (hf programs'
                                        ops); 0: the host not modelled */
    double host_recompute_layer_us;  /* host time per recomputed layer beyond its ops' own
                                        (checkpoint hooks); 0: not measured */
    double host_ckpt_fwd_layer_us;   /* checkpointed layer's forward beyond its ops' own */
    double host_ckpt_fwd_save_us;    /* per tensor a checkpointed forward saves */
    double host_ckpt_bwd_save_us;    /* per saved tensor a recomputed layer's backward reads */
    double host_save_pack_us;        /* per tensor save_on_cpu copies to the host */
    double host_save_unpack_us;      /* per saved tensor read back under save_on_cpu */
    /* driver and allocator latencies */
    double cuda_malloc_base_us;      /* cudaMalloc time = base + per_gib * GiB */
    double cuda_malloc_per_gib_us;
    double cuda_free_base_us;        /* cudaFree also synchronizes the device */
    double cuda_free_per_gib_us;
    double host_alloc_per_gib_us;    /* cudaHostAlloc (pinned) */
    uint64_t vmm_granularity_bytes;  /* cuMem* allocation granularity */
    double vmm_create_us;            /* cuMemCreate per call (handle) */
    double vmm_map_us;               /* cuMemMap per handle */
    double vmm_set_access_us;        /* cuMemSetAccess per mapping in the range */
    double vmm_set_access_d2h_us;    /* the same while a device-to-host copy runs; 0: as above */
    double vmm_unmap_us;             /* cuMemUnmap per mapping */
    double vmm_release_us;           /* cuMemRelease per handle */
    double vmm_reserve_us;           /* cuMemAddressReserve per call */
    double device_sync_us;           /* cost of a device-wide synchronize when idle */
    int64_t malloc_top_down;         /* 1: cudaMalloc addresses descend (lat.malloc_top_down) */
    /* node */
    int64_t node_gpus;               /* GPUs per node */
    int64_t node_gpus_per_switch;    /* GPUs sharing one PCIe switch / host link */
    double nvlink_Bps;               /* per GPU, one direction */
    double nvlink_lat_us;
    double net_Bps;                  /* inter-node, per GPU */
    double net_lat_us;
    /* memsim runtime's own kernels (optional; 0 = not measured): what `memsim probe` measured
     * for runtime/kernels.cu, used by the generator knob kernels=runtime so that a trace
     * predicts the runtime's real-kernel runs rather than FlashAttention-class kernels */
    double rt_attn_fwd_eff;          /* fraction of bf16 peak at long sequences */
    double rt_attn_fwd_half_seq;     /* tokens at which half of it is reached */
    double rt_attn_bwd_eff;
    double rt_attn_bwd_half_seq;
    double rt_host_adam_params_per_s; /* the runtime's host AdamW (0: not probed) */
    /* The board's power limit and the kernel classes' energy (docs/SIMULATOR.md, "Power
     * limit"; sim/power.h); 0 = not measured. */
    double power_limit_w, power_idle_w;
    double power_gemm_j, power_gemm_time_exp, power_gemm_clock_exp,
        power_gemm_ref_clock;
    double power_rt_attn_fwd_j, power_rt_attn_fwd_time_exp, power_rt_attn_fwd_clock_exp,
        power_rt_attn_fwd_ref_clock;
    double power_rt_attn_bwd_j, power_rt_attn_bwd_time_exp, power_rt_attn_bwd_clock_exp,
        power_rt_attn_bwd_ref_clock;
    double power_attn_fwd_j, power_attn_fwd_time_exp, power_attn_fwd_clock_exp,
        power_attn_fwd_ref_clock;
    double power_attn_bwd_j, power_attn_bwd_time_exp, power_attn_bwd_clock_exp,
        power_attn_bwd_ref_clock;
    double power_mem_j, power_mem_time_exp, power_mem_clock_exp,
        power_mem_ref_clock;
    double power_clock_exp, power_window_ms, power_clock_floor;
} machine_t;

typedef enum machine_ftype { MF_STR, MF_U64, MF_I64, MF_DBL } machine_ftype;

/* The field table: drives reading, writing, checking and the FORMAT.md list. */
typedef struct machine_field {
    const char *key;        /* e.g. "link.h2d_Bps" */
    machine_ftype type;
    size_t offset;          /* in machine_t */
    int required;           /* missing => error */
    const char *doc;        /* one line: meaning and unit */
} machine_field;
const machine_field *machine_fields(size_t *n);

/* A loaded profile keeps, per field, the source note from its "# ..." comment. */
typedef struct machine_profile {
    machine_t m;
    char *sources[128];     /* indexed like machine_fields(); NULL where no note */
    char *description;      /* the "description" line */
} machine_profile;

/* Reads a profile file. Unknown keys, duplicates, missing required keys, negative or
 * non-finite numbers: MS_ERR_PARSE with "file:line: message". */
ms_status machine_load(const char *path, machine_profile **out, ms_error *err);
/* Finds NAME.machine in the data directory (see machine_data_dir) or takes a path. */
ms_status machine_load_named(const char *name_or_path, machine_profile **out, ms_error *err);
ms_status machine_write(const machine_profile *p, const char *path, ms_error *err);
void machine_profile_free(machine_profile *p);
/* Sets the source note of key (a measurement's provenance). -1: no such key, or out of
 * memory (the old note stays). */
int machine_set_source(machine_profile *p, const char *key, const char *note);
/* Fills a profile with zeros (for the probe and tests). */
machine_profile *machine_profile_new(void);

/* The data directory: $MEMSIM_DATADIR if set, else the build's source tree if it exists,
 * else the installed pkgdatadir. Shipped profiles are in DIR/machines/. */
const char *machine_data_dir(void);
/* Lists shipped profile names (sorted); caller frees each and the array. */
ms_status machine_list(char ***names, size_t *n, ms_error *err);

/* Prints the key table of FORMAT.md (markdown) from the field table. */
void machine_write_key_table(FILE *f);

/* The per-GPU view of a node when `ranks` of its GPUs train together: they run the same
 * schedule and copy at the same time, so GPUs behind one PCIe switch share its uplink: the
 * host-link and DHA bandwidths are divided by min(node_gpus_per_switch, ranks). Host memory
 * stays the node's (the executor gives each GPU its share). Other fields are copied. */
void machine_gpu_view(const machine_t *m, int ranks, machine_t *out);

/* Derived figures used everywhere. */
uint64_t machine_usable_bytes(const machine_t *m);   /* hbm - reserved */
double machine_malloc_us(const machine_t *m, uint64_t bytes);
double machine_free_us(const machine_t *m, uint64_t bytes);

#endif
