/* machine.c — machine profiles (traces/FORMAT.md, "Machine profile"): the field table that
 * drives reading, writing and the documentation's key list, the profile reader with
 * FILE:LINE errors and per-field source notes, the writer (its output reads back to the same
 * bytes), the data directory and the derived figures. Implements machine.h; used by the
 * generator, planners' cost models, the simulator and the runtime's probe. */
#define _POSIX_C_SOURCE 200809L
#include "traces/machine.h"
#include "base/util.h"

#include <dirent.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MACHINE_FORMAT_VERSION 1

#ifndef MEMSIM_SRC_DATADIR
#define MEMSIM_SRC_DATADIR "traces"
#endif
#ifndef MEMSIM_PKGDATADIR
#define MEMSIM_PKGDATADIR "/usr/local/share/memsim"
#endif

/* Value rules beyond the type. */
enum {
    R_NONNEG = 0, /* a number >= 0 */
    R_POS,        /* a number > 0 (divided by somewhere) */
    R_EFF,        /* an efficiency in (0, 1] */
    R_COUNT,      /* an integer >= 1 */
    R_TOKEN,      /* a string without blanks */
    R_TEXT,       /* a string; blanks allowed */
    R_OPT_EFF,    /* optional: 0 or absent = not measured, else an efficiency in (0, 1] */
    R_OPT_NONNEG, /* optional: absent = 0 */
    R_OPT_FLAG    /* optional: absent = 0, else 0 or 1 */
};
#define RULE_REQUIRED(r) ((r) != R_OPT_EFF && (r) != R_OPT_NONNEG && (r) != R_OPT_FLAG)

/* A kernel class of the power model (sim/power.h): its energy per unit of work at the
 * maximum SM clock, how its time follows the clock, and the clock its profile rates hold. */
#define POWER_CLASS(X, key, f, what, unit)                                                     \
    X("power." key "_j", MF_DBL, power_##f##_j, R_OPT_NONNEG,                                  \
      what ": dynamic energy (above power.idle_w) per " unit " at the maximum SM clock, J "     \
      "(memsim probe --power; 0 or absent: not measured)")                                     \
    X("power." key "_time_exp", MF_DBL, power_##f##_time_exp, R_OPT_NONNEG,                    \
      "its time ~ clock^-exp, fitted over a burst, a duty cycle and a sustained run")          \
    X("power." key "_clock_exp", MF_DBL, power_##f##_clock_exp, R_OPT_NONNEG,                  \
      "its dynamic power ~ clock^exp, from its duty cycle at the maximum clock and its "       \
      "sustained run under the limit (0 or absent: power.clock_exp)")                          \
    X("power." key "_ref_clock", MF_DBL, power_##f##_ref_clock, R_OPT_NONNEG,                  \
      "the SM clock its probed rates hold (a burst of calls), fraction of the maximum")

/* One list drives the public table and the rules, so they cannot drift apart.
 * X(key, type, field, rule, doc) */
#define MACHINE_FIELDS(X)                                                                      \
    X("name", MF_STR, name, R_TOKEN, "profile name, as in NAME.machine")                       \
    X("gpu.name", MF_STR, gpu_name, R_TEXT, "GPU model (free text, no '#')")                   \
    X("gpu.hbm_bytes", MF_U64, gpu_hbm_bytes, R_POS, "physical device memory, bytes")          \
    X("gpu.reserved_bytes", MF_U64, gpu_reserved_bytes, R_NONNEG,                              \
      "device memory taken by the CUDA context, NCCL and library workspaces, bytes")           \
    X("gpu.peak_bf16_flops", MF_DBL, gpu_peak_bf16_flops, R_POS,                               \
      "dense bf16 tensor-core peak, FLOP/s (the MFU denominator)")                             \
    X("gpu.peak_fp32_flops", MF_DBL, gpu_peak_fp32_flops, R_POS,                               \
      "FP32 non-tensor peak, FLOP/s")                                                          \
    X("gpu.hbm_Bps", MF_DBL, gpu_hbm_Bps, R_POS, "device memory bandwidth, bytes/s")           \
    X("gpu.gemm_eff", MF_DBL, gpu_gemm_eff, R_EFF,                                             \
      "achieved fraction of the bf16 peak for large GEMMs, (0,1]")                             \
    X("gpu.attn_eff", MF_DBL, gpu_attn_eff, R_EFF,                                             \
      "achieved fraction of the bf16 peak for flash attention, (0,1]")                         \
    X("gpu.mem_eff", MF_DBL, gpu_mem_eff, R_EFF,                                               \
      "achieved fraction of HBM bandwidth for memory-bound ops, (0,1]")                        \
    X("gpu.kernel_launch_us", MF_DBL, gpu_kernel_launch_us, R_NONNEG,                          \
      "fixed cost per op, microseconds")                                                       \
    X("gpu.fp32_gemm_eff", MF_DBL, gpu_fp32_gemm_eff, R_OPT_EFF,                               \
      "fp32 GEMMs (cuBLAS sgemm, no TF32): efficiency eff * F / (F + "                          \
      "gpu.fp32_gemm_half_flops) of gpu.peak_fp32_flops over F FLOPs (0 or absent: "            \
      "gpu.gemm_eff with the bf16 ramp)")                                                      \
    X("gpu.fp32_gemm_half_flops", MF_DBL, gpu_fp32_gemm_half_flops, R_OPT_NONNEG,              \
      "FLOPs at which an fp32 GEMM reaches half that efficiency")                             \
    X("gpu.gemm_even_eff", MF_DBL, gpu_gemm_even_eff, R_OPT_EFF,                               \
      "an fp16/bf16 GEMM with a dimension even but not a multiple of 8 elements (16 bytes): "  \
      "fraction of the aligned GEMM's rate, (0,1]; absent: 1")                                 \
    X("gpu.gemm_odd_eff", MF_DBL, gpu_gemm_odd_eff, R_OPT_EFF,                                 \
      "the same with an odd dimension, (0,1]; absent: 1")                                      \
    X("gpu.sdpa_fwd_eff", MF_DBL, gpu_sdpa_fwd_eff, R_OPT_EFF,                                 \
      "PyTorch's fused causal attention (scaled_dot_product_attention), forward: efficiency "  \
      "eff * S / (S + gpu.sdpa_fwd_half_seq) of the bf16 peak over S keys, head dim 128 (0 "    \
      "or absent: gpu.attn_eff for every attention kernel)")                                  \
    X("gpu.sdpa_fwd_half_seq", MF_DBL, gpu_sdpa_fwd_half_seq, R_OPT_NONNEG,                    \
      "keys at which that forward reaches half its efficiency")                                \
    X("gpu.sdpa_bwd_eff", MF_DBL, gpu_sdpa_bwd_eff, R_OPT_EFF,                                 \
      "the same for the backward (model FLOPs 2.5x the forward's)")                            \
    X("gpu.sdpa_bwd_half_seq", MF_DBL, gpu_sdpa_bwd_half_seq, R_OPT_NONNEG,                    \
      "keys at which that backward reaches half its efficiency")                               \
    X("gpu.sdpa_hd64_fwd", MF_DBL, gpu_sdpa_hd64_fwd, R_OPT_EFF,                               \
      "forward efficiency at head dim 64 relative to head dim 128 (0 or absent: 1); a head "   \
      "dim between 64 and 128 runs the 128 kernel padded (head_dim / 128 of its rate)")        \
    X("gpu.sdpa_hd64_bwd", MF_DBL, gpu_sdpa_hd64_bwd, R_OPT_EFF,                               \
      "the same for the backward")                                                             \
    X("gpu.sdpa_hd256_fwd", MF_DBL, gpu_sdpa_hd256_fwd, R_OPT_EFF,                             \
      "forward efficiency at head dim 256 relative to head dim 128 (0 or absent: 1); a head "  \
      "dim between 128 and 256 runs the 256 kernel padded (this ratio x head_dim / 256)")      \
    X("gpu.sdpa_hd256_bwd", MF_DBL, gpu_sdpa_hd256_bwd, R_OPT_EFF,                             \
      "the same for the backward")                                                             \
    X("gpu.sdpa_dropout_fwd", MF_DBL, gpu_sdpa_dropout_fwd, R_OPT_EFF,                         \
      "SDPA forward efficiency with dropout_p > 0 relative to without (0 or absent: 1)")       \
    X("gpu.sdpa_dropout_bwd", MF_DBL, gpu_sdpa_dropout_bwd, R_OPT_EFF,                         \
      "the same for the backward")                                                             \
    X("gpu.ew_nv_elems_per_s", MF_DBL, gpu_ew_nv_elems_per_s, R_OPT_NONNEG,                     \
      "elements per second of PyTorch's non-vectorized element-wise path (a broadcast or "      \
      "strided operand, a widening cast, mixed dtypes); 0 or absent: bytes only")              \
    X("link.h2d_Bps", MF_DBL, link_h2d_Bps, R_POS,                                             \
      "host-to-device copy bandwidth from pinned memory, per GPU, bytes/s")                    \
    X("link.d2h_Bps", MF_DBL, link_d2h_Bps, R_POS,                                             \
      "device-to-host copy bandwidth to pinned memory, per GPU, bytes/s")                      \
    X("link.duplex_Bps", MF_DBL, link_duplex_Bps, R_POS,                                       \
      "both directions together, per GPU, bytes/s")                                            \
    X("link.small_copy_us", MF_DBL, link_small_copy_us, R_NONNEG,                              \
      "fixed latency per copy, microseconds")                                                  \
    X("link.pageable_h2d_Bps", MF_DBL, link_pageable_h2d_Bps, R_POS,                           \
      "host-to-device copy bandwidth from pageable memory, bytes/s")                           \
    X("link.pageable_d2h_Bps", MF_DBL, link_pageable_d2h_Bps, R_POS,                           \
      "device-to-host copy bandwidth to pageable memory, bytes/s")                             \
    X("dha.read_Bps", MF_DBL, dha_read_Bps, R_POS,                                             \
      "a kernel reading mapped pinned host memory (DHA), bytes/s")                             \
    X("dha.write_Bps", MF_DBL, dha_write_Bps, R_POS,                                           \
      "a kernel writing mapped pinned host memory (DHA), bytes/s")                             \
    X("dha.gemm_eff", MF_DBL, dha_gemm_eff, R_EFF,                                             \
      "fraction of dha.read_Bps a GEMM reading its operand over DHA achieves, (0,1]")          \
    X("dha.gemm_rows", MF_DBL, dha_gemm_rows, R_OPT_NONNEG,                                    \
      "rows of a GEMM's other operand per read of its host operand: the GEMM tiles its output "\
      "by this many rows and each tile reads the whole host operand again (cuBLAS: 256 "     \
      "measured); absent: read once")                                                          \
    X("dha.other_eff", MF_DBL, dha_other_eff, R_EFF,                                           \
      "fraction of dha.read_Bps other ops achieve over DHA, (0,1]")                            \
    X("dha.link_weight", MF_DBL, dha_link_weight, R_POS,                                       \
      "weight of a DHA flow against a copy in the link's max-min sharing (1 = fair)")          \
    X("dha.inflight_bytes", MF_DBL, dha_inflight_bytes, R_OPT_NONNEG,                          \
      "host bytes a streaming kernel keeps in flight (about one wave: SMs x 2048 threads x "   \
      "16 B); a kernel reading and writing host memory (a gradient accumulate) moves this "   \
      "much one way before its reads and writes overlap and again after (absent: always "     \
      "overlapped)")                                                                           \
    X("host.mem_bytes", MF_U64, host_mem_bytes, R_POS,                                         \
      "host memory per node, shared by its GPUs, bytes")                                       \
    X("host.cpu_cores", MF_I64, host_cpu_cores, R_COUNT, "CPU cores per node")                 \
    X("host.adam_params_per_s", MF_DBL, host_adam_params_per_s, R_POS,                         \
      "CPU Adam throughput of one GPU's share of the cores, parameters/s")                     \
    X("host.eager_kernel_us", MF_DBL, host_eager_kernel_us, R_OPT_NONNEG,                     \
      "host time PyTorch eager spends per kernel it launches (the Python module code, the "    \
      "dispatcher, autograd and the launch): each op of a generated hf program gets it as "    \
      "its host time, so that a step whose kernels are shorter waits for the host, "           \
      "microseconds; absent: 0, the host not modelled")                                         \
    X("host.recompute_layer_us", MF_DBL, host_recompute_layer_us, R_OPT_NONNEG,               \
      "host time a recomputed layer costs beyond its ops' own host time (PyTorch's "           \
      "non-reentrant checkpoint: its hooks around the replayed forward), microseconds; "       \
      "absent: 0, not measured")                                                               \
    X("host.ckpt_fwd_layer_us", MF_DBL, host_ckpt_fwd_layer_us, R_OPT_NONNEG,                 \
      "host time a checkpointed layer's forward costs beyond its ops' own (transformers' "     \
      "GradientCheckpointingLayer and torch.utils.checkpoint's non-reentrant setup), "          \
      "microseconds; captured traces; absent: 0")                                             \
    X("host.ckpt_fwd_save_us", MF_DBL, host_ckpt_fwd_save_us, R_OPT_NONNEG,                   \
      "host time per tensor a checkpointed layer's forward saves (its pack hook), "            \
      "microseconds; captured traces; absent: 0")                                             \
    X("host.ckpt_bwd_save_us", MF_DBL, host_ckpt_bwd_save_us, R_OPT_NONNEG,                   \
      "host time per saved tensor a recomputed layer's backward op reads (its unpack hook "    \
      "and the recomputation's pack), microseconds; captured traces; absent: 0")              \
    X("host.save_pack_us", MF_DBL, host_save_pack_us, R_OPT_NONNEG,                           \
      "host time per tensor save_on_cpu's pack hook copies to pinned memory, beyond the "      \
      "copy (pinned buffer, dispatch), microseconds; captured traces; absent: 0")             \
    X("host.save_unpack_us", MF_DBL, host_save_unpack_us, R_OPT_NONNEG,                       \
      "host time per saved tensor a backward op reads back under save_on_cpu (its unpack "     \
      "hook's copy dispatch), microseconds; captured traces; absent: 0")                      \
    X("lat.cuda_malloc_base_us", MF_DBL, cuda_malloc_base_us, R_NONNEG,                        \
      "cudaMalloc time = base + per_gib * GiB; base, microseconds")                            \
    X("lat.cuda_malloc_per_gib_us", MF_DBL, cuda_malloc_per_gib_us, R_NONNEG,                  \
      "cudaMalloc time per GiB, microseconds")                                                 \
    X("lat.cuda_free_base_us", MF_DBL, cuda_free_base_us, R_NONNEG,                            \
      "cudaFree time (it also synchronizes the device); base, microseconds")                   \
    X("lat.cuda_free_per_gib_us", MF_DBL, cuda_free_per_gib_us, R_NONNEG,                      \
      "cudaFree time per GiB, microseconds")                                                   \
    X("lat.host_alloc_per_gib_us", MF_DBL, host_alloc_per_gib_us, R_NONNEG,                    \
      "cudaHostAlloc (pinned) time per GiB, microseconds")                                     \
    X("vmm.granularity_bytes", MF_U64, vmm_granularity_bytes, R_POS,                          \
      "cuMem* physical allocation granularity, bytes")                                         \
    X("vmm.create_us", MF_DBL, vmm_create_us, R_NONNEG,                                        \
      "cuMemCreate per call (one handle, any size), microseconds")                                                 \
    X("vmm.map_us", MF_DBL, vmm_map_us, R_NONNEG, "cuMemMap per handle, microseconds")        \
    X("vmm.set_access_us", MF_DBL, vmm_set_access_us, R_NONNEG,                                \
      "cuMemSetAccess per mapping in the range, microseconds")                                              \
    X("vmm.set_access_d2h_us", MF_DBL, vmm_set_access_d2h_us, R_OPT_NONNEG,                    \
      "cuMemSetAccess per mapping while a device-to-host copy runs, microseconds (absent: "    \
      "vmm.set_access_us)")                                                                    \
    X("vmm.unmap_us", MF_DBL, vmm_unmap_us, R_NONNEG, "cuMemUnmap per mapping, microseconds")  \
    X("vmm.release_us", MF_DBL, vmm_release_us, R_NONNEG,                                     \
      "cuMemRelease per handle, microseconds")                                                \
    X("vmm.reserve_us", MF_DBL, vmm_reserve_us, R_NONNEG,                                     \
      "cuMemAddressReserve per call, microseconds")                                            \
    X("lat.device_sync_us", MF_DBL, device_sync_us, R_NONNEG,                                  \
      "a device-wide synchronize when the device is idle, microseconds")                       \
    X("lat.malloc_top_down", MF_I64, malloc_top_down, R_OPT_FLAG,                              \
      "1: cudaMalloc hands out segments from the top of the address space down, as the CUDA "  \
      "driver mostly does (the caching allocator's best fit breaks ties by address); absent "  \
      "or 0: ascending")                                                                       \
    X("node.gpus", MF_I64, node_gpus, R_COUNT, "GPUs per node")                                \
    X("node.gpus_per_switch", MF_I64, node_gpus_per_switch, R_COUNT,                           \
      "GPUs sharing one PCIe switch / host link")                                              \
    X("node.nvlink_Bps", MF_DBL, nvlink_Bps, R_NONNEG,                                         \
      "NVLink bandwidth per GPU, one direction, bytes/s (0: none)")                            \
    X("node.nvlink_lat_us", MF_DBL, nvlink_lat_us, R_NONNEG,                                   \
      "NVLink transfer latency, microseconds")                                                 \
    X("node.net_Bps", MF_DBL, net_Bps, R_NONNEG,                                               \
      "inter-node network bandwidth per GPU, bytes/s (0: single node)")                        \
    X("node.net_lat_us", MF_DBL, net_lat_us, R_NONNEG, "inter-node latency, microseconds")    \
    X("rt.attn_fwd_eff", MF_DBL, rt_attn_fwd_eff, R_OPT_EFF,                                   \
      "memsim runtime's own attention forward kernel: fraction of the bf16 peak at long "      \
      "sequences (memsim probe; used by the generator knob kernels=runtime)")                  \
    X("rt.attn_fwd_half_seq", MF_DBL, rt_attn_fwd_half_seq, R_OPT_NONNEG,                     \
      "sequence length (tokens) at which that kernel reaches half of rt.attn_fwd_eff")         \
    X("rt.attn_bwd_eff", MF_DBL, rt_attn_bwd_eff, R_OPT_EFF,                                   \
      "memsim runtime's attention backward kernel: fraction of the bf16 peak at long "         \
      "sequences, its FLOPs counted as attn_bwd_factor x the forward's")                      \
    X("rt.attn_bwd_half_seq", MF_DBL, rt_attn_bwd_half_seq, R_OPT_NONNEG,                     \
      "sequence length (tokens) at which that kernel reaches half of rt.attn_bwd_eff")         \
    X("rt.host_adam_params_per_s", MF_DBL, rt_host_adam_params_per_s, R_OPT_NONNEG,           \
      "memsim runtime's host AdamW step (offload plans with --math real): parameters/s on "   \
      "its default threads (memsim probe; times host Adam ops under kernels=runtime)")     \
    X("power.limit_w", MF_DBL, power_limit_w, R_OPT_NONNEG,                                    \
      "board power limit the driver enforces, W (memsim probe --power; 0 or absent: no "      \
      "power model, every kernel at the clock its rate was measured at)")                     \
    X("power.idle_w", MF_DBL, power_idle_w, R_OPT_NONNEG,                                      \
      "board power with the SM clock up and next to no work (one spinning block), W")         \
    POWER_CLASS(X, "gemm", gemm, "GEMMs (cuBLAS bf16)", "FLOP")                               \
    POWER_CLASS(X, "rt_attn_fwd", rt_attn_fwd, "memsim's attention forward (kernels=runtime)", \
                "FLOP")                                                                       \
    POWER_CLASS(X, "rt_attn_bwd", rt_attn_bwd, "memsim's attention backward", "FLOP")         \
    POWER_CLASS(X, "attn_fwd", attn_fwd, "PyTorch's fused attention forward (scaled_dot_"  \
                "product_attention's default backend; the gpu.sdpa_* kernels, kernels=vendor; "  \
                "experiments/realworld/probe_power.py)", "FLOP")                                 \
    POWER_CLASS(X, "attn_bwd", attn_bwd, "its backward", "FLOP")                               \
    POWER_CLASS(X, "mem", mem, "memory-bound kernels (the runtime's GeLU)",                    \
                "device-memory byte")                                                          \
    X("power.clock_exp", MF_DBL, power_clock_exp, R_OPT_NONNEG,                                \
      "exponent of the SM clock in a class's dynamic power, P - idle ~ f^exp, where the class "\
      "has none of its own (0 or absent: 3, f V^2 with the voltage following the clock)")     \
    X("power.window_ms", MF_DBL, power_window_ms, R_OPT_NONNEG,                                \
      "the span of the schedule over which the driver holds the average power to the limit, "  \
      "ms (memsim probe --power: the time back-to-back GEMMs take to lose half of their "     \
      "sustained slowdown after a second of idle; 0 or absent: 20)")                           \
    X("power.clock_floor", MF_DBL, power_clock_floor, R_OPT_NONNEG,                            \
      "the lowest SM clock the limit may bring, as a fraction of the maximum (0 or absent: "   \
      "0.5)")

#define AS_FIELD(k, t, f, r, d) {k, t, offsetof(machine_t, f), RULE_REQUIRED(r), d},
#define AS_RULE(k, t, f, r, d) r,

static const machine_field fields[] = {MACHINE_FIELDS(AS_FIELD)};
static const unsigned char rules[] = {MACHINE_FIELDS(AS_RULE)};
#define NFIELDS (sizeof fields / sizeof *fields)

_Static_assert(NFIELDS <= 128, "machine_profile.sources has 128 slots");
_Static_assert(sizeof rules == NFIELDS, "one rule per field");

const machine_field *machine_fields(size_t *n)
{
    *n = NFIELDS;
    return fields;
}

static int field_index(const char *key)
{
    for (size_t i = 0; i < NFIELDS; i++)
        if (strcmp(fields[i].key, key) == 0) return (int)i;
    return -1;
}

/* ------------------------------------------------------------------------------------ */

machine_profile *machine_profile_new(void)
{
    return calloc(1, sizeof(machine_profile));
}

void machine_profile_free(machine_profile *p)
{
    if (!p) return;
    for (size_t i = 0; i < NFIELDS; i++) free(p->sources[i]);
    free(p->description);
    free(p);
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

static char *trim(char *s)
{
    while (is_blank(*s)) s++;
    char *e = s + strlen(s);
    while (e > s && is_blank(e[-1])) *--e = '\0';
    return s;
}

static const char *closest_key(const char *key)
{
    const char *best = "description";
    size_t bd = ms_edit_distance(key, best);
    for (size_t i = 0; i < NFIELDS; i++) {
        size_t d = ms_edit_distance(key, fields[i].key);
        if (d < bd) { bd = d; best = fields[i].key; }
    }
    return best;
}

/* Physically sane magnitudes: a rate of at least 1 per second (bytes, FLOPs, parameters)
 * and at most 1e18, a latency of at most 1000 s. Outside them the simulator's arithmetic
 * turns to infinities and zero-length iterations, never a result anyone meant. */
static const char *range_problem(const char *key, double x)
{
    int rate = ms_ends_with(key, "_Bps") || ms_ends_with(key, "_flops") ||
               ms_ends_with(key, "_per_s");
    if (rate && x != 0 && x < 1) return "a rate below 1 per second";
    if (rate && x > 1e18) return "a rate above 1e18 per second";
    if (ms_ends_with(key, "_us") && x > 1e9) return "a latency above 1e9 microseconds (1000 s)";
    return NULL;
}

/* Parses one value into the field according to its type and rule. Returns NULL on success,
 * else the reason. */
static const char *set_field(machine_t *m, size_t i, const char *v)
{
    const machine_field *f = &fields[i];
    char *dst = (char *)m + f->offset;
    switch (f->type) {
    case MF_STR: {
        size_t n = strlen(v);
        if (n == 0) return "an empty value";
        if (n >= MACHINE_NAME_MAX) return "longer than 63 characters";
        if (strchr(v, '#')) return "a '#' in the value";
        if (rules[i] == R_TOKEN)
            for (size_t k = 0; k < n; k++)
                if (is_blank(v[k])) return "blanks in the value";
        memcpy(dst, v, n + 1);
        return NULL;
    }
    case MF_U64: {
        uint64_t x;
        if (*v == '-') return "a negative number";
        if (!ms_parse_u64(v, &x) && !ms_parse_bytes(v, &x)) return "not a byte count (e.g. 80GiB or 85899345920)";
        if (rules[i] == R_POS && x == 0) return "zero (it must be > 0)";
        memcpy(dst, &x, sizeof x);
        return NULL;
    }
    case MF_I64: {
        int64_t x;
        if (!ms_parse_i64(v, &x)) return "not an integer";
        if (x < 0) return "a negative number";
        if (rules[i] == R_COUNT && x < 1) return "less than 1";
        if (rules[i] == R_OPT_FLAG && x > 1) return "neither 0 nor 1";
        memcpy(dst, &x, sizeof x);
        return NULL;
    }
    case MF_DBL: {
        double x;
        if (!ms_parse_double(v, &x)) return "not a finite number";
        if (x < 0) return "a negative number";
        if (rules[i] == R_POS && x <= 0) return "zero (it must be > 0)";
        if (rules[i] == R_EFF && (x <= 0 || x > 1)) return "an efficiency outside (0,1]";
        if (rules[i] == R_OPT_EFF && x > 1) return "an efficiency above 1";
        const char *bad = range_problem(f->key, x);
        if (bad) return bad;
        memcpy(dst, &x, sizeof x);
        return NULL;
    }
    }
    return "of an unknown type";
}

/* Whole-profile consistency, reported at the line of the field that breaks it. */
static ms_status check_profile(const machine_t *m, const char *path, const uint64_t *lines,
                               ms_error *err)
{
    if (m->gpu_reserved_bytes >= m->gpu_hbm_bytes)
        return ms_fail_at(err, MS_ERR_PARSE, path, lines[field_index("gpu.reserved_bytes")],
                          "gpu.reserved_bytes must be less than gpu.hbm_bytes");
    uint64_t g = m->vmm_granularity_bytes;
    if (g < 4096 || (g & (g - 1)))
        return ms_fail_at(err, MS_ERR_PARSE, path, lines[field_index("vmm.granularity_bytes")],
                          "vmm.granularity_bytes must be a power of two of at least 4 KiB "
                          "(CUDA's is 2 MiB)");
    if (m->gpu_hbm_bytes > (UINT64_C(1) << 50))
        return ms_fail_at(err, MS_ERR_PARSE, path, lines[field_index("gpu.hbm_bytes")],
                          "gpu.hbm_bytes above 1 PiB");
    if (m->node_gpus_per_switch > m->node_gpus)
        return ms_fail_at(err, MS_ERR_PARSE, path,
                          lines[field_index("node.gpus_per_switch")],
                          "node.gpus_per_switch must not exceed node.gpus");
    return MS_OK;
}

typedef struct mload {
    const char *path;
    ms_lines *lr;
    machine_profile *p;
    uint64_t lines[NFIELDS];   /* where each field was set; 0 = not yet */
    uint64_t desc_line;
} mload;

#define ML_FAIL(L, ...) \
    ms_fail_at(err, MS_ERR_PARSE, (L)->path, ms_lines_lineno((L)->lr), __VA_ARGS__)

static ms_status ml_header(mload *L, char *line, ms_error *err)
{
    char *tok[3];
    int n = ms_split(line, tok, 2);
    if (n < 1 || strcmp(tok[0], "memsim-machine") != 0)
        return ML_FAIL(L, "not a machine profile: expected the header 'memsim-machine %d'",
                       MACHINE_FORMAT_VERSION);
    char *dot = n == 2 ? strchr(tok[1], '.') : NULL;
    uint64_t major, minor;
    if (dot) *dot = '\0';
    if (n != 2 || !ms_parse_u64(tok[1], &major) || major == 0 ||
        (dot && !ms_parse_u64(dot + 1, &minor)))
        return ML_FAIL(L, "header: expected 'memsim-machine VERSION'");
    if (major > MACHINE_FORMAT_VERSION)
        return ML_FAIL(L, "machine profile version %llu is newer than this reader (version %d)",
                       (unsigned long long)major, MACHINE_FORMAT_VERSION);
    return MS_OK;
}

/* One "KEY VALUE [# source]" or "description TEXT" line. */
static ms_status ml_line(mload *L, char *line, ms_error *err)
{
    char *s = trim(line);
    char *p = s;
    while (*p && !is_blank(*p)) p++;
    char *rest = p;
    if (*p) { *p = '\0'; rest = p + 1; }
    uint64_t ln = ms_lines_lineno(L->lr);
    if (strcmp(s, "description") == 0) {
        if (L->desc_line)
            return ML_FAIL(L, "duplicate key 'description' (first at line %llu)",
                           (unsigned long long)L->desc_line);
        rest = trim(rest);
        if (!*rest) return ML_FAIL(L, "description: missing text");
        if (!(L->p->description = strdup(rest))) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
        L->desc_line = ln;
        return MS_OK;
    }
    int i = field_index(s);
    if (i < 0) {
        char shown[72];
        snprintf(shown, sizeof shown, "%s", s);
        return ML_FAIL(L, "unknown key '%s' (did you mean '%s'?)", shown, closest_key(s));
    }
    if (L->lines[i])
        return ML_FAIL(L, "duplicate key '%s' (first at line %llu)", s,
                       (unsigned long long)L->lines[i]);
    char *note = strchr(rest, '#');
    if (note) *note++ = '\0';
    char *value = trim(rest);
    if (!*value) return ML_FAIL(L, "%s: missing value", s);
    const char *why = set_field(&L->p->m, (size_t)i, value);
    if (why) {
        char shown[72];
        snprintf(shown, sizeof shown, "%s", value);
        return ML_FAIL(L, "%s: bad value '%s': %s (%s)", s, shown, why, fields[i].doc);
    }
    if (note && *(note = trim(note)) &&
        !(L->p->sources[i] = strdup(note)))
        return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    L->lines[i] = ln;
    return MS_OK;
}

static ms_status ml_run(mload *L, ms_error *err)
{
    int have_header = 0;
    for (;;) {
        char *line;
        ms_status st = ms_lines_next_content(L->lr, &line, err);
        if (st == MS_ERR_LIMIT) break;
        if (st != MS_OK) return st;
        st = have_header ? ml_line(L, line, err) : ml_header(L, line, err);
        if (st != MS_OK) return st;
        have_header = 1;
    }
    if (!have_header)
        return ms_fail_at(err, MS_ERR_PARSE, L->path, 0,
                          "empty file: expected the header 'memsim-machine %d'",
                          MACHINE_FORMAT_VERSION);
    for (size_t i = 0; i < NFIELDS; i++)
        if (fields[i].required && !L->lines[i])
            return ms_fail_at(err, MS_ERR_PARSE, L->path, 0, "missing required key '%s' (%s)",
                              fields[i].key, fields[i].doc);
    return check_profile(&L->p->m, L->path, L->lines, err);
}

ms_status machine_load(const char *path, machine_profile **out, ms_error *err)
{
    *out = NULL;
    mload L;
    memset(&L, 0, sizeof L);
    L.path = path;
    if (!(L.p = machine_profile_new())) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    ms_status st = ms_lines_open(path, &L.lr, err);
    if (st == MS_OK) st = ml_run(&L, err);
    ms_lines_free(L.lr);
    if (st != MS_OK) { machine_profile_free(L.p); return st; }
    *out = L.p;
    return MS_OK;
}

/* ------------------------------------------------------------------------------------ */
/* writer */

static void fmt_value(const machine_t *m, size_t i, char *buf, size_t n)
{
    const char *src = (const char *)m + fields[i].offset;
    switch (fields[i].type) {
    case MF_STR: snprintf(buf, n, "%s", src); break;
    case MF_U64: {
        uint64_t x;
        memcpy(&x, src, sizeof x);
        snprintf(buf, n, "%llu", (unsigned long long)x);
        break;
    }
    case MF_I64: {
        int64_t x;
        memcpy(&x, src, sizeof x);
        snprintf(buf, n, "%lld", (long long)x);
        break;
    }
    case MF_DBL: {
        double x;
        memcpy(&x, src, sizeof x);
        ms_fmt_double(x, buf, n);
        break;
    }
    }
}

/* Length of a key's group prefix ("gpu" in "gpu.hbm_bytes"; whole key if no dot). */
static size_t group_len(const char *key)
{
    const char *d = strchr(key, '.');
    return d ? (size_t)(d - key) : strlen(key);
}

/* An optional number left at 0: not measured, so not written. */
static int optional_unset(const machine_t *m, size_t i)
{
    double x;
    if (fields[i].type != MF_DBL) return 0;
    memcpy(&x, (const char *)m + fields[i].offset, sizeof x);
    return x == 0.0;
}

ms_status machine_write(const machine_profile *p, const char *path, ms_error *err)
{
    /* Refuse what would not read back: the reader's rules apply to the writer too. */
    for (size_t i = 0; i < NFIELDS; i++) {
        char v[MACHINE_NAME_MAX + 40];
        fmt_value(&p->m, i, v, sizeof v);
        machine_t scratch;
        const char *why = set_field(&scratch, i, v);
        if (why) return ms_fail(err, MS_ERR_INVALID, "machine_write: %s is %s", fields[i].key, why);
        if (p->sources[i] && strchr(p->sources[i], '\n'))
            return ms_fail(err, MS_ERR_INVALID, "machine_write: source of %s has a newline",
                           fields[i].key);
    }
    if (p->description && strchr(p->description, '\n'))
        return ms_fail(err, MS_ERR_INVALID, "machine_write: description has a newline");
    static const uint64_t no_lines[NFIELDS];
    ms_status cst = check_profile(&p->m, path, no_lines, err);
    if (cst != MS_OK) return cst;
    ms_out *o;
    ms_status st = ms_out_open(path, &o, err);
    if (st != MS_OK) return st;
    ms_out_printf(o, "memsim-machine %d\n", MACHINE_FORMAT_VERSION);
    if (p->description) {
        char *d = strdup(p->description);
        if (!d) { ms_out_abort(o); return ms_fail(err, MS_ERR_NOMEM, "out of memory"); }
        if (*trim(d)) ms_out_printf(o, "description %s\n", trim(d));
        free(d);
    }
    for (size_t i = 0; i < NFIELDS; i++) {
        if (!fields[i].required && !p->sources[i] && optional_unset(&p->m, i)) continue;
        /* a blank line between groups keeps the file readable; readers ignore it */
        if (i == 0 || group_len(fields[i].key) != group_len(fields[i - 1].key) ||
            strncmp(fields[i].key, fields[i - 1].key, group_len(fields[i].key)) != 0)
            ms_out_printf(o, "\n");
        char v[MACHINE_NAME_MAX + 40], head[160];
        fmt_value(&p->m, i, v, sizeof v);
        snprintf(head, sizeof head, "%-27s %s", fields[i].key, v);
        char *src = p->sources[i] ? strdup(p->sources[i]) : NULL;
        const char *note = src ? trim(src) : "";
        if (*note) ms_out_printf(o, "%-48s  # %s\n", head, note);
        else ms_out_printf(o, "%s\n", head);
        free(src);
    }
    return ms_out_commit(o, err);
}

/* The key table of FORMAT.md, generated from the field table. */
void machine_write_key_table(FILE *f)
{
    static const char *const tnames[] = {"string", "bytes", "integer", "number"};
    static const char *const rnames[] = {">= 0", "> 0", "(0, 1]", ">= 1", "no blanks", "text",
                                         "optional: (0, 1]", "optional: >= 0", "optional: 0 or 1"};
    fprintf(f, "| key | type | allowed | meaning and unit |\n|---|---|---|---|\n");
    for (size_t i = 0; i < NFIELDS; i++)
        fprintf(f, "| `%s` | %s | %s | %s |\n", fields[i].key, tnames[fields[i].type],
                rnames[rules[i]], fields[i].doc);
}

/* ------------------------------------------------------------------------------------ */
/* data directory and names */

static int is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

const char *machine_data_dir(void)
{
    const char *env = getenv("MEMSIM_DATADIR");
    if (env && *env) return env;
    if (is_dir(MEMSIM_SRC_DATADIR)) return MEMSIM_SRC_DATADIR;
    return MEMSIM_PKGDATADIR;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

ms_status machine_list(char ***names, size_t *n, ms_error *err)
{
    *names = NULL;
    *n = 0;
    const char *dir = machine_data_dir();
    size_t dl = strlen(dir) + 16;
    char *path = malloc(dl);
    if (!path) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    snprintf(path, dl, "%s/machines", dir);
    DIR *d = opendir(path);
    if (!d) {
        ms_status st = ms_fail_at(err, MS_ERR_IO, path, 0, "cannot list machine profiles");
        free(path);
        return st;
    }
    free(path);
    char **v = NULL;
    size_t cnt = 0, cap = 0;
    ms_status st = MS_OK;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len <= 8 || e->d_name[0] == '.' || strcmp(e->d_name + len - 8, ".machine") != 0)
            continue;
        char *nm = strndup(e->d_name, len - 8);
        if (!nm || ms_grow((void **)&v, &cap, cnt + 1, sizeof *v) != MS_OK) {
            free(nm);
            st = ms_fail(err, MS_ERR_NOMEM, "out of memory");
            break;
        }
        v[cnt++] = nm;
    }
    closedir(d);
    if (st != MS_OK) {
        for (size_t i = 0; i < cnt; i++) free(v[i]);
        free(v);
        return st;
    }
    if (cnt) qsort(v, cnt, sizeof *v, cmp_str);
    *names = v;
    *n = cnt;
    return MS_OK;
}

ms_status machine_load_named(const char *name_or_path, machine_profile **out, ms_error *err)
{
    *out = NULL;
    size_t len = strlen(name_or_path);
    /* a file: a value with a '/' or ending in .machine or .machine.gz; else a profile name */
    if (strchr(name_or_path, '/') || ms_ends_with(name_or_path, ".machine") ||
        ms_ends_with(name_or_path, ".machine.gz"))
        return machine_load(name_or_path, out, err);
    if (len == 0) return ms_fail(err, MS_ERR_NOTFOUND, "empty machine name");
    const char *dir = machine_data_dir();
    size_t pl = strlen(dir) + len + 32;
    char *path = malloc(pl);
    if (!path) return ms_fail(err, MS_ERR_NOMEM, "out of memory");
    snprintf(path, pl, "%s/machines/%s.machine", dir, name_or_path);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        char known[512] = "";
        char **names;
        size_t n;
        if (machine_list(&names, &n, NULL) == MS_OK) {
            for (size_t i = 0; i < n; i++) {
                size_t kl = strlen(known);
                snprintf(known + kl, sizeof known - kl, "%s%s", i ? " " : "", names[i]);
                free(names[i]);
            }
            free(names);
        }
        ms_status st = ms_fail(err, MS_ERR_NOTFOUND, "unknown machine '%s' (known in %s/machines: %s)",
                               name_or_path, dir, known[0] ? known : "none");
        free(path);
        return st;
    }
    ms_status st = machine_load(path, out, err);
    free(path);
    return st;
}

/* ------------------------------------------------------------------------------------ */
/* derived figures */

uint64_t machine_usable_bytes(const machine_t *m)
{
    return m->gpu_hbm_bytes > m->gpu_reserved_bytes ? m->gpu_hbm_bytes - m->gpu_reserved_bytes : 0;
}

double machine_malloc_us(const machine_t *m, uint64_t bytes)
{
    return m->cuda_malloc_base_us + m->cuda_malloc_per_gib_us * ((double)bytes / MS_GiB);
}

double machine_free_us(const machine_t *m, uint64_t bytes)
{
    return m->cuda_free_base_us + m->cuda_free_per_gib_us * ((double)bytes / MS_GiB);
}

void machine_gpu_view(const machine_t *m, int ranks, machine_t *out)
{
    *out = *m;
    int64_t share = m->node_gpus_per_switch > 1 ? m->node_gpus_per_switch : 1;
    if (ranks >= 1 && share > ranks) share = ranks;
    if (share <= 1) return;
    double d = (double)share;
    out->link_h2d_Bps /= d;
    out->link_d2h_Bps /= d;
    out->link_duplex_Bps /= d;
    out->dha_read_Bps /= d;
    out->dha_write_Bps /= d;
}

int machine_set_source(machine_profile *p, const char *key, const char *note)
{
    for (size_t i = 0; i < NFIELDS; i++) {
        if (strcmp(fields[i].key, key) != 0) continue;
        char *n = strdup(note);
        if (!n) return -1;
        free(p->sources[i]);
        p->sources[i] = n;
        return 0;
    }
    return -1;
}
