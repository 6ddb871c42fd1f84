/* roofline.c — the op-time model (roofline kernels, alpha-beta collectives). Used by the
 * trace generator (traces/gen.c) and the planners' cost models. docs/GENERATOR.md gives every
 * formula. */
#include "traces/roofline.h"

void roof_params_default(roof_params *p)
{
    /* A 1024^3 GEMM (2.1 GFLOP) reaches about half the throughput of large GEMMs on
     * H100/H200-class GPUs (cuBLAS bf16: a few hundred TFLOP/s vs 800-900 at 4096+); the
     * ramp is a smooth fit of that shape, a knob to refit from probe measurements. */
    p->gemm_half_flops = 2.0 * 1024.0 * 1024.0 * 1024.0;
    /* Flash attention on short sequences (few tiles per SM) is likewise far from its peak. */
    p->attn_half_flops = 2.0 * 1024.0 * 1024.0 * 1024.0;
    p->vector_eff = 0.5;
    p->kernels = ROOF_KERNELS_VENDOR;
}

static double ramp(double flops, double half)
{
    if (half <= 0.0) return 1.0;
    if (flops <= 0.0) return 0.0;
    return flops / (flops + half);
}

double roof_gemm_eff(const machine_t *m, const roof_params *p, double flops)
{
    return m->gpu_gemm_eff * ramp(flops, p->gemm_half_flops);
}

double roof_fp32_gemm_eff(const machine_t *m, const roof_params *p, double flops)
{
    if (m->gpu_fp32_gemm_eff <= 0) return roof_gemm_eff(m, p, flops);
    return m->gpu_fp32_gemm_eff * ramp(flops, m->gpu_fp32_gemm_half_flops);
}

/* Seconds -> microseconds; a zero rate means "term unknown", not "infinitely slow". */
static double term_us(double amount, double rate)
{
    if (amount <= 0.0 || rate <= 0.0) return 0.0;
    return amount / rate * 1e6;
}

/* launch + the longer of the compute term at `rate` and the memory term. */
static double kernel_us(const machine_t *m, double rate, double flops, uint64_t bytes)
{
    double t_compute = term_us(flops, rate);
    double t_memory = term_us((double)bytes, m->gpu_hbm_Bps * m->gpu_mem_eff);
    return m->gpu_kernel_launch_us + (t_compute > t_memory ? t_compute : t_memory);
}

double roof_kernel_us(const machine_t *m, const roof_params *p, trace_opkind kind, double flops,
                      uint64_t bytes)
{
    double rate;
    switch (kind) {
    case TK_GEMM:
        rate = m->gpu_peak_bf16_flops * roof_gemm_eff(m, p, flops);
        break;
    case TK_ATTN:
        rate = m->gpu_peak_bf16_flops * m->gpu_attn_eff * ramp(flops, p->attn_half_flops);
        break;
    case TK_COMM:
        rate = 0.0; /* not a kernel: roof_coll_us; here only the memory term */
        break;
    default:
        rate = m->gpu_peak_fp32_flops * p->vector_eff;
        break;
    }
    return kernel_us(m, rate, flops, bytes);
}

double roof_op_us(const machine_t *m, const roof_params *p, const trace_op *op)
{
    if (op->dur_us >= 0) return op->dur_us;
    if (!m || op->kind == TK_COMM) return -1.0;
    return roof_kernel_us(m, p, op->kind, op->flops, op->bytes_read + op->bytes_written);
}

double roof_gemm_align(const machine_t *m, uint64_t M, uint64_t N, uint64_t K, int elem_bytes)
{
    uint64_t per16 = elem_bytes > 0 && elem_bytes < 16 ? (uint64_t)(16 / elem_bytes) : 1;
    int odd = (M | N | K) & 1;
    int even = !odd && (M % per16 || N % per16 || K % per16);
    if (odd && m->gpu_gemm_odd_eff > 0) return m->gpu_gemm_odd_eff;
    if ((odd || even) && m->gpu_gemm_even_eff > 0) return m->gpu_gemm_even_eff;
    return 1.0;
}

double roof_gemm_us(const machine_t *m, const roof_params *p, double flops, uint64_t bytes,
                    uint64_t M, uint64_t N, uint64_t K, int elem_bytes)
{
    double rate = m->gpu_peak_bf16_flops * roof_gemm_eff(m, p, flops) *
                  roof_gemm_align(m, M, N, K, elem_bytes);
    return kernel_us(m, rate, flops, bytes);
}

double roof_attn_us(const machine_t *m, const roof_params *p, double flops, uint64_t bytes,
                    uint64_t seq_tokens, int backward)
{
    if (p->kernels != ROOF_KERNELS_RUNTIME) return roof_kernel_us(m, p, TK_ATTN, flops, bytes);
    double e = backward ? m->rt_attn_bwd_eff : m->rt_attn_fwd_eff;
    double half = backward ? m->rt_attn_bwd_half_seq : m->rt_attn_fwd_half_seq;
    if (e <= 0.0) return -1.0;
    double s = (double)seq_tokens;
    double eff = half > 0.0 && s > 0.0 ? e * s / (s + half) : e;
    double t_compute = term_us(flops, m->gpu_peak_bf16_flops * eff);
    double t_memory = term_us((double)bytes, m->gpu_hbm_Bps * m->gpu_mem_eff);
    return m->gpu_kernel_launch_us + (t_compute > t_memory ? t_compute : t_memory);
}

/* The fused attention's efficiency at a head dim relative to 128. The kernels exist for
 * head dims 64, 128 and 256 (cuDNN's SDPA kernels in the kernel profiles of
 * experiments/realworld/h200: ..._64x128x64, _64x128x128, _64x128x256; Phi-3's head dim 96
 * runs the 128 kernel): a head dim between runs the next one's kernel, padded, so it does
 * head_dim / tile of that kernel's useful work. At or below 64: the head-dim 64 ratio; above
 * 256: the head-dim 256 ratio. A ratio of 0 is 1. */
static double hd_scale(double ratio64, double ratio256, uint64_t head_dim)
{
    double r64 = ratio64 > 0.0 ? ratio64 : 1.0, r256 = ratio256 > 0.0 ? ratio256 : 1.0;
    double d = (double)head_dim;
    if (head_dim <= 64) return r64;
    if (head_dim <= 128) return d / 128.0;
    if (head_dim <= 256) return r256 * d / 256.0;
    return r256;
}

double roof_attn_hd_us(const machine_t *m, const roof_params *p, double flops, uint64_t bytes,
                       uint64_t seq_tokens, uint64_t head_dim, int backward, int dropout)
{
    double e = backward ? m->gpu_sdpa_bwd_eff : m->gpu_sdpa_fwd_eff;
    if (p->kernels == ROOF_KERNELS_RUNTIME || e <= 0.0)
        return roof_attn_us(m, p, flops, bytes, seq_tokens, backward);
    double half = backward ? m->gpu_sdpa_bwd_half_seq : m->gpu_sdpa_fwd_half_seq;
    double s = (double)seq_tokens;
    double eff = s > 0.0 ? e * s / (s + half) : e;
    eff *= hd_scale(backward ? m->gpu_sdpa_hd64_bwd : m->gpu_sdpa_hd64_fwd,
                    backward ? m->gpu_sdpa_hd256_bwd : m->gpu_sdpa_hd256_fwd, head_dim);
    double dr = backward ? m->gpu_sdpa_dropout_bwd : m->gpu_sdpa_dropout_fwd;
    if (dropout && dr > 0.0) eff *= dr; /* the dropout path's RNG and masking */
    double t_compute = term_us(flops, m->gpu_peak_bf16_flops * eff);
    double t_memory = term_us((double)bytes, m->gpu_hbm_Bps * m->gpu_mem_eff);
    return m->gpu_kernel_launch_us + (t_compute > t_memory ? t_compute : t_memory);
}

/* All-to-all of B bytes per rank among p ranks (expert parallelism's dispatch and combine):
 * each rank keeps B/p and sends B/p to every other rank, receiving as much, so (p-1)/p of B
 * crosses the rank's link each way. NCCL runs it as p-1 concurrent send/recv pairs in one
 * group (ncclGroupStart / ncclSend / ncclRecv, the alltoall of nccl-tests' doc/PERFORMANCE.md,
 * whose bus bandwidth is algbw * (p-1)/p), and DeepSpeed-MoE (Rajbhandari et al., ICML 2022,
 * §5) and Megatron-LM's MoE token dispatcher use it the same way:
 *     t = (p-1) * lat + B (p-1)/p / bw
 * The model simplifies: one bandwidth for the whole volume (the group's slowest link: the
 * NIC when the group leaves the node, though the part exchanged inside the node would go
 * over NVLink), one message latency per peer (the other collectives' alpha per step), no
 * contention with other traffic, and balanced messages (an imbalanced rank passes its
 * larger volume as B). */
static double a2a_us(uint64_t bytes, double p, double bw, double lat)
{
    return (p - 1.0) * lat + term_us((double)bytes * (p - 1.0) / p, bw);
}

double roof_coll_us(const machine_t *m, roof_coll kind, uint64_t bytes, int ranks,
                    int span_gpus)
{
    if (ranks <= 1) return 0.0;
    int intra = m->node_gpus <= 0 || span_gpus <= m->node_gpus;
    double bw = intra ? m->nvlink_Bps : m->net_Bps;
    double lat = intra ? m->nvlink_lat_us : m->net_lat_us;
    double p = ranks;
    if (kind == ROOF_ALL_TO_ALL) return m->gpu_kernel_launch_us + a2a_us(bytes, p, bw, lat);
    double step_bytes = kind == ROOF_RING_EXCHANGE ? (double)bytes : (double)bytes / p;
    double t = (p - 1.0) * (lat + term_us(step_bytes, bw));
    if (kind == ROOF_ALL_REDUCE) t *= 2.0; /* reduce-scatter then all-gather */
    return m->gpu_kernel_launch_us + t;
}
