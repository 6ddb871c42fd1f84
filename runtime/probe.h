/* probe.h — the GPU machine probe (runtime/probe.cu): measures the machine and fills a machine
 * profile. Called by runtime/main.c (`memsim probe`). */
#ifndef MEMSIM_PROBE_H
#define MEMSIM_PROBE_H

#include <stdio.h>

#include "runtime/rt_check.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "traces/machine.h"

/* Measures GPU 0 and overwrites the measured fields of p->m (the rest are kept). Raw samples
 * are written to raw_csv. quick: fewer repetitions. On failure, err says what failed. */
rt_status probe_run(machine_profile *p, FILE *raw_csv, int quick, ms_error *err);
/* Only the runtime's host AdamW rate (rt.host_adam_params_per_s); needs no GPU. */
rt_status probe_host_adam_run(machine_profile *p, FILE *raw_csv, int quick, ms_error *err);
/* Only memsim's attention kernels (rt.attn_fwd_eff, rt.attn_fwd_half_seq, rt.attn_bwd_eff,
 * rt.attn_bwd_half_seq; also gpu.name, gpu.hbm_bytes and gpu.peak_bf16_flops): a re-probe
 * after a kernel change that takes seconds instead of the whole probe's minutes. */
/* warm_ms: each shape's calls run back to back for that long before it is timed (0: none). */
rt_status probe_attn_run(machine_profile *p, FILE *raw_csv, int quick, double warm_ms,
                         ms_error *err);

/* Only the board's power under each kernel class (power.*; NVML, dlopen'd): one spinning
 * block, cuBLAS GEMMs, memsim's attention forward and backward and a memory-bound kernel,
 * each back to back for run_ms while power and clock are read. */
rt_status probe_power_run(machine_profile *p, FILE *raw_csv, double run_ms, ms_error *err);

#ifdef __cplusplus
}
#endif

#endif
