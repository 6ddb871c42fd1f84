/* roofline.h — the op-time model: how long a compute op or a collective takes on a machine
 * (traces/machine.h), from its FLOPs and device-memory bytes (roofline with per-kind
 * efficiencies and a size ramp for small GEMMs) or its message size (alpha-beta ring model
 * over NVLink or the network). Used by the trace generator to fill dur_us and available to
 * the planners' cost models. Formulas in docs/GENERATOR.md. */
#ifndef MEMSIM_ROOFLINE_H
#define MEMSIM_ROOFLINE_H

#include "traces/machine.h"
#include "traces/trace.h"

/* Knobs that are not properties of the machine profile. */
typedef struct roof_params {
    /* GEMM efficiency ramp: eff = gpu_gemm_eff * F / (F + gemm_half_flops) for a GEMM of
     * F FLOPs, so a GEMM of gemm_half_flops reaches half the large-GEMM efficiency.
     * 0 disables the ramp. */
    double gemm_half_flops;
    /* The same ramp for attention kernels (FLOPs of one attention op). 0 disables it. */
    double attn_half_flops;
    /* Fraction of gpu_peak_fp32_flops that non-matrix ops (norms, activations, element-wise,
     * loss, optimizer) reach on their FLOPs; they are nearly always memory-bound. */
    double vector_eff;
    /* Which attention kernels the times describe: ROOF_KERNELS_VENDOR (default: the
     * profile's gpu.attn_eff, FlashAttention-class kernels) or ROOF_KERNELS_RUNTIME (memsim's
     * own kernels, runtime/kernels.cu, as `memsim probe` measured them: rt.attn_*). */
    int kernels;
} roof_params;

enum { ROOF_KERNELS_VENDOR = 0, ROOF_KERNELS_RUNTIME = 1 };

void roof_params_default(roof_params *p);

/* Efficiency (fraction of bf16 peak) of a GEMM of `flops` FLOPs after the ramp. */
double roof_gemm_eff(const machine_t *m, const roof_params *p, double flops);

/* Efficiency (fraction of the fp32 peak) of an fp32 GEMM (sgemm) of `flops` FLOPs: the
 * profile's own measured ramp gpu.fp32_gemm_eff * F / (F + gpu.fp32_gemm_half_flops), which
 * saturates at fewer FLOPs than the tensor cores; without it roof_gemm_eff. */
double roof_fp32_gemm_eff(const machine_t *m, const roof_params *p, double flops);

/* Duration of one kernel of the given kind:
 *   launch + max(flops / (peak_kind * eff_kind), bytes / (hbm * mem_eff)).
 * GEMM and attention use the bf16 peak, other kinds the fp32 peak; a zero peak or bandwidth
 * drops that term. TK_COMM is not a kernel of this kind: use roof_coll_us. */
double roof_kernel_us(const machine_t *m, const roof_params *p, trace_opkind kind, double flops,
                      uint64_t bytes);

/* A trace op's duration: its own dur_us where the trace gives one (a recording's, or the
 * generator's), else roof_kernel_us on m from its FLOPs and bytes. -1 where it has none and
 * cannot be timed: no machine, or a collective (its time needs its group, which an op does
 * not carry). Every planner and lowering times ops by this one rule; the caller says in its
 * own words what could not be timed. */
double roof_op_us(const machine_t *m, const roof_params *p, const trace_op *op);

/* Fraction of the aligned rate a GEMM of dimensions M x N x K in elements of elem_bytes runs
 * at: cuBLAS needs every leading dimension a multiple of 16 bytes for its fastest
 * tensor-core kernels; an even misaligned dimension gets gpu.gemm_even_eff, an odd one
 * gpu.gemm_odd_eff (measured on an H200, experiments/memferry/hf_probe_h200); 1 when aligned
 * or when the profile does not model it. */
double roof_gemm_align(const machine_t *m, uint64_t M, uint64_t N, uint64_t K, int elem_bytes);

/* roof_kernel_us(TK_GEMM) of one GEMM of those dimensions, its compute term slowed by
 * roof_gemm_align. */
double roof_gemm_us(const machine_t *m, const roof_params *p, double flops, uint64_t bytes,
                    uint64_t M, uint64_t N, uint64_t K, int elem_bytes);

/* Duration of one attention kernel (forward, or backward when `backward`) over sequences of
 * `seq_tokens` keys. Vendor kernels: roof_kernel_us(TK_ATTN). Runtime kernels: efficiency
 * rt.attn_{fwd,bwd}_eff * S / (S + rt.attn_{fwd,bwd}_half_seq) of the bf16 peak, the shape
 * memsim probe fits (per-row and diagonal-tile overheads shrink relative to S). Returns -1
 * when runtime kernels are asked for and the profile has no rt.attn_* measurement. */
double roof_attn_us(const machine_t *m, const roof_params *p, double flops, uint64_t bytes,
                    uint64_t seq_tokens, int backward);

/* roof_attn_us with the head dimension known: where the profile has gpu.sdpa_* (PyTorch's
 * fused attention measured over sequence lengths and head dims) vendor kernels run at
 * eff * S / (S + half_seq) of the bf16 peak, scaled at head dims below 128 toward the
 * gpu.sdpa_hd64_* ratio and, with dropout, by gpu.sdpa_dropout_*; otherwise exactly
 * roof_attn_us. */
double roof_attn_hd_us(const machine_t *m, const roof_params *p, double flops, uint64_t bytes,
                       uint64_t seq_tokens, uint64_t head_dim, int backward, int dropout);

typedef enum roof_coll {
    ROOF_ALL_GATHER = 0,   /* bytes = the gathered (full) buffer */
    ROOF_REDUCE_SCATTER,   /* bytes = the full input buffer */
    ROOF_ALL_REDUCE,       /* bytes = the buffer */
    ROOF_RING_EXCHANGE,    /* ranks-1 point-to-point steps of `bytes` each (context parallel) */
    ROOF_ALL_TO_ALL        /* bytes = what this rank holds for the exchange, (p-1)/p of it sent
                              to the others and as much received (expert parallelism's token
                              dispatch and combine); the larger of its send and receive
                              volumes when they differ */
} roof_coll;

/* Alpha-beta ring model for a collective among `ranks` GPUs whose group spans `span_gpus`
 * consecutive global ranks (tp for a TP group, tp*cp for CP, tp*cp*dp for DP, tp*cp*ep for EP
 * in Megatron's rank order: traces/jobview.h). The group is intra-node (NVLink) when
 * span_gpus <= node_gpus, else every step pays the network's latency and bandwidth. An
 * all-to-all is ranks-1 messages of bytes/ranks each way, sent at once (docs/GENERATOR.md §5).
 * 0 when ranks <= 1. */
double roof_coll_us(const machine_t *m, roof_coll kind, uint64_t bytes, int ranks,
                    int span_gpus);

#endif
