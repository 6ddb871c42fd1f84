/* main.c — memsim-run, the GPU side of the memsim command (`memsim probe`, `memsim run`):
 * memsim hands these subcommands over to this program, which is built only when configure
 * finds CUDA. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/probe.h"
#include "runtime/probe_coll.h"
#include "runtime/rt_run.h"
#include "traces/machine.h"
#include "base/util.h"

/* The fields the probe measures: their sources are replaced by the probe's note. */
static const char *const measured_keys[] = {
    "gpu.name", "gpu.hbm_bytes", "gpu.reserved_bytes", "gpu.hbm_Bps",
    "gpu.gemm_eff", "gpu.gemm_even_eff", "gpu.gemm_odd_eff", "link.h2d_Bps", "link.d2h_Bps", "link.duplex_Bps", "link.small_copy_us",
    "link.pageable_h2d_Bps", "link.pageable_d2h_Bps", "dha.read_Bps", "dha.write_Bps",
    "lat.cuda_malloc_base_us", "lat.cuda_malloc_per_gib_us", "lat.cuda_free_base_us",
    "lat.cuda_free_per_gib_us", "lat.host_alloc_per_gib_us", "vmm.granularity_bytes",
    "vmm.create_us", "vmm.map_us", "vmm.set_access_us", "vmm.unmap_us", "vmm.release_us",
    "vmm.reserve_us", "lat.device_sync_us",
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memsim probe [options]\n"
            "Measures this GPU machine and writes a machine profile.\n"
            "  --base NAME|FILE   profile to start from (unmeasured fields keep its values)\n"
            "  --name NAME        name of the new profile (default: the base's)\n"
            "  -o FILE            output profile (default: stdout)\n"
            "  --raw FILE         raw samples CSV (default: FILE.raw.csv or probe.raw.csv)\n"
            "  --quick            fewer repetitions\n"
            "  --host-adam        only the runtime's host AdamW rate (rt.host_adam_params_per_s,\n"
            "                     needs no GPU); every other figure is the base's\n"
            "  --attn             only memsim's attention kernels (rt.attn_*); every other\n"
            "                     figure is the base's\n"
            "  --warm-ms MS       with --attn: run each shape back to back for MS ms of GPU\n"
            "                     time before timing it (the clock of a sustained load)\n"
            "  --power            only the board's power under each kernel class (power.*,\n"
            "                     through NVML): a spinning block, GEMMs, memsim's attention\n"
            "                     forward and backward, a memory-bound kernel, each back to\n"
            "                     back while power and SM clock are read; every other figure\n"
            "                     is the base's\n"
            "  --power-ms MS      with --power: how long each class runs (default 6000)\n"
            "  --collectives      only the node's figures, on a machine of several GPUs:\n"
            "                     NCCL all-gather, reduce-scatter, all-reduce of 1 MiB..1 GiB\n"
            "                     over 2, 4, 8 GPUs and the host link while GPUs copy at once\n"
            "                     (node.gpus, node.gpus_per_switch, node.nvlink_Bps,\n"
            "                     node.nvlink_lat_us); every other figure is the base's\n");
}

static void set_sources(machine_profile *p, const char *note)
{
    for (size_t k = 0; k < sizeof measured_keys / sizeof *measured_keys; k++)
        machine_set_source(p, measured_keys[k], note);
}

/* Writes p to out (a file or "-") and frees it. */
static int write_profile(machine_profile *p, const char *out)
{
    ms_error err;
    ms_status st = machine_write(p, out, &err);
    machine_profile_free(p);
    if (st != MS_OK) {
        fprintf(stderr, "memsim probe: %s\n", err.msg);
        return ms_exit_code(st);
    }
    return MS_EXIT_OK;
}

/* --collectives: the node's figures into p (closes raw, writes the profile, frees p). */
static int probe_node_figures(machine_profile *p, FILE *raw, const char *rawp, int quick,
                              const char *out)
{
    ms_error err;
    ms_error_clear(&err);
    pn_fit fit;
    char what[256] = "";
    rt_status rs = probe_coll_run(p, raw, quick, &fit, what, sizeof what, &err);
    fclose(raw);
    if (rs != RT_OK) {
        fprintf(stderr, "memsim probe: %s\n", err.msg);
        remove(rawp); /* nothing measured */
        machine_profile_free(p);
        return rs == RT_ERR_NODEV ? MS_EXIT_FAIL : MS_EXIT_INTERNAL;
    }
    char note[1400], date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    snprintf(note, sizeof note, "memsim probe --collectives on %s, %s (raw samples: %s)", what,
             date, rawp);
    pn_apply(p, &fit, note);
    return write_profile(p, out);
}

/* The power fields' notes: what ran and how a class's figure was derived. */
static int power_sources(machine_profile *p, const char *note, double run_ms, const char *out)
{
    char pnote[2048];
    snprintf(pnote, sizeof pnote, "%s; idle = one spinning block back to back; each class "
             "timed in a burst (8 calls after a second of spinning), a duty cycle (each call "
             "then ~3x its time of spinning) and back to back for %.0f ms, NVML power and SM "
             "clock medians of each run's second half: gemm = cuBLAS bf16 8192x16384x4096; "
             "rt_attn = memsim's causal attention, 16 heads x 16K tokens, head dim 128; mem = "
             "the runtime's GeLU over 8192x16384; raw samples and derivations in the raw CSV",
             note, run_ms);
    size_t n;
    const machine_field *f = machine_fields(&n);
    for (size_t i = 0; i < n; i++)
        /* not the knobs, nor the vendor attention's figures (experiments/realworld's
         * probe_power.py measures those) */
        if (!strncmp(f[i].key, "power.", 6) && strncmp(f[i].key, "power.attn_", 11) &&
            strcmp(f[i].key, "power.clock_exp") && strcmp(f[i].key, "power.clock_floor"))
            machine_set_source(p, f[i].key, pnote);
    return write_profile(p, out);
}

static int cmd_probe(int argc, char **argv)
{
    const char *base = "h100-sxm", *name = NULL, *out = "-", *rawp = NULL;
    int quick = 0, adam_only = 0, coll_only = 0, attn_only = 0, power_only = 0;
    double warm_ms = 0, power_ms = 6000;
    int power_set = 0;
    static const struct option opts[] = {
        {"base", required_argument, 0, 'b'}, {"name", required_argument, 0, 'n'},
        {"raw", required_argument, 0, 'r'}, {"quick", no_argument, 0, 'q'},
        {"host-adam", no_argument, 0, 'A'}, {"collectives", no_argument, 0, 'C'},
        {"attn", no_argument, 0, 'T'}, {"warm-ms", required_argument, 0, 'W'},
        {"power", no_argument, 0, 'P'}, {"power-ms", required_argument, 0, 'M'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'b': base = optarg; break;
        case 'n': name = optarg; break;
        case 'o': out = optarg; break;
        case 'r': rawp = optarg; break;
        case 'q': quick = 1; break;
        case 'A': adam_only = 1; break;
        case 'C': coll_only = 1; break;
        case 'T': attn_only = 1; break;
        case 'W': {
            char *end;
            warm_ms = strtod(optarg, &end);
            if (*optarg == '\0' || *end != '\0' || !(warm_ms >= 0 && warm_ms <= 600000)) {
                fprintf(stderr, "memsim probe: --warm-ms: '%s' is not a time in ms (0..600000)\n",
                        optarg);
                return MS_EXIT_USAGE;
            }
            break;
        }
        case 'P': power_only = 1; break;
        case 'M': {
            char *end;
            power_ms = strtod(optarg, &end);
            if (*optarg == '\0' || *end != '\0' || !(power_ms >= 1000 && power_ms <= 60000)) {
                fprintf(stderr, "memsim probe: --power-ms: '%s' is not a time in ms "
                                "(1000..60000)\n", optarg);
                return MS_EXIT_USAGE;
            }
            power_set = 1;
            break;
        }
        case 'h': usage(stdout); return MS_EXIT_OK;
        default: usage(stderr); return MS_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "memsim probe: unexpected argument '%s'\n", argv[optind]);
        return MS_EXIT_USAGE;
    }
    if (warm_ms > 0 && !attn_only) {
        fprintf(stderr, "memsim probe: --warm-ms times the attention probe: give it with --attn\n");
        return MS_EXIT_USAGE;
    }
    if (power_set && !power_only) {
        fprintf(stderr, "memsim probe: --power-ms times the power probe: give it with --power\n");
        return MS_EXIT_USAGE;
    }
    if (adam_only + coll_only + attn_only + power_only > 1) {
        fprintf(stderr, "memsim probe: --host-adam, --collectives, --attn and --power are "
                        "separate probes\n");
        return MS_EXIT_USAGE;
    }
    ms_error err;
    machine_profile *p;
    ms_status st = machine_load_named(base, &p, &err);
    if (st != MS_OK) {
        fprintf(stderr, "memsim probe: %s\n", err.msg);
        return ms_exit_code(st);
    }
    if (name) snprintf(p->m.name, sizeof p->m.name, "%s", name);
    char rawbuf[1024];
    if (!rawp) {
        snprintf(rawbuf, sizeof rawbuf, "%s.raw.csv", strcmp(out, "-") ? out : "probe");
        rawp = rawbuf;
    }
    FILE *raw = fopen(rawp, "w");
    if (!raw) {
        fprintf(stderr, "memsim probe: cannot write %s\n", rawp);
        machine_profile_free(p);
        return MS_EXIT_IO;
    }
    ms_error_clear(&err);
    if (coll_only) return probe_node_figures(p, raw, rawp, quick, out);
    rt_status rs = adam_only   ? probe_host_adam_run(p, raw, quick, &err)
                   : attn_only ? probe_attn_run(p, raw, quick, warm_ms, &err)
                   : power_only ? probe_power_run(p, raw, power_ms, &err)
                               : probe_run(p, raw, quick, &err);
    fclose(raw);
    if (rs != RT_OK) {
        fprintf(stderr, "memsim probe: %s\n", err.msg);
        machine_profile_free(p);
        return rs == RT_ERR_NODEV ? MS_EXIT_FAIL : MS_EXIT_INTERNAL;
    }
    char note[1400], date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    snprintf(note, sizeof note, "memsim probe on %s, %s (raw samples: %s)", p->m.gpu_name,
             date, rawp);
    char hnote[1800];
    snprintf(hnote, sizeof hnote, "%s; the runtime's host AdamW step (kn_adamw_host_pool and "
             "the gradient reset, fp32 master and moments, bf16 parameter) over 64 Mi "
             "parameters on its default thread pool (the online CPUs less one), median of 7",
             note);
    if (power_only) return power_sources(p, note, power_ms, out);
    if (!attn_only) machine_set_source(p, "rt.host_adam_params_per_s", hnote);
    if (adam_only) return write_profile(p, out);
    if (attn_only) machine_set_source(p, "gpu.name", note);
    else set_sources(p, note);
    /* Two figures need more than the common note: what was measured and how. */
    char gnote[2048], anote[2048];
    snprintf(gnote, sizeof gnote, "%s; FLOP-weighted over one GPT layer's GEMMs (hidden 4096, "
             "ffn 16384, 8K tokens; forward, input and weight gradients) through the runtime's "
             "kn_gemm (cuBLAS)", note);
    snprintf(anote, sizeof anote, "%s; memsim's own attention kernels (runtime/kernels.h: the "
             "device's default, wgmma and TMA on compute capability 9.0, else mma.sync; "
             "a deterministic backward: at head dim 128 in one pass, 5 products, while a "
             "head's fp32 dq fits L2, else 7), not the vendor's FlashAttention: causal, head "
             "dim 128, one sequence of 2K-32K tokens, model FLOPs (backward 2.5x forward) over "
             "time, fitted to eff * S / (S + half_seq); per-shape samples in the raw CSV", note);
    static const char *const rt_keys[] = {"rt.attn_fwd_eff", "rt.attn_fwd_half_seq",
                                          "rt.attn_bwd_eff", "rt.attn_bwd_half_seq"};
    for (size_t i = 0; i < sizeof rt_keys / sizeof *rt_keys; i++)
        machine_set_source(p, rt_keys[i], anote);
    if (attn_only) return write_profile(p, out);
    machine_set_source(p, "gpu.gemm_eff", gnote);
    char lnote[1600];
    snprintf(lnote, sizeof lnote, "%s; an LM head's three bf16 GEMMs (8K tokens, hidden 4096, "
             "kn_gemm) with the vocabulary even but not a multiple of 8 (50300, 50258; the "
             "mean) or odd (50257), per FLOP over the same at 50304", note);
    machine_set_source(p, "gpu.gemm_even_eff", lnote);
    machine_set_source(p, "gpu.gemm_odd_eff", lnote);
    return write_profile(p, out);
}

int main(int argc, char **argv)
{
    if (argc < 1) return MS_EXIT_USAGE;
    const char *cmd = argv[0];
    const char *slash = strrchr(cmd, '/');
    if (slash) cmd = slash + 1;
    /* Called as `memsim-run probe ...` or handed `probe ...` by memsim. */
    if (!strcmp(cmd, "memsim-run")) {
        if (argc < 2) {
            usage(stderr);
            return MS_EXIT_USAGE;
        }
        argc--;
        argv++;
        cmd = argv[0];
    }
    if (!strcmp(cmd, "probe")) return cmd_probe(argc, argv);
    if (!strcmp(cmd, "run")) return rt_run_main(argc, argv);
    fprintf(stderr, "memsim %s: not available in this runtime (only 'probe' and 'run' are)\n",
            cmd);
    return MS_EXIT_USAGE;
}
