/* rt_run.c — the body of `memsim run` (see rt_run.h): options, the GPU check, trace → plan →
 * schedule (the same generator, planners and lowering as `memsim simulate`, so one plan file
 * drives both), execution on the GPU (runtime/rt_exec.h over runtime/rt_backend.h), the
 * printed comparison with the schedule's own durations, and the results CSV (its columns in
 * runtime/rt_csv.c). With --math real it runs the model's real kernels instead
 * (runtime/model_rt.h): the one-layer benchmark (--bench-layer) or training steps (--train N). With tp x cp x dp > 1 it runs one process per
 * GPU (runtime/rt_launch.h starts them, runtime/rt_node.h sets each rank up) whose
 * collectives are NCCL's. Called by runtime/main.c. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/rt_run.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planners/lower.h"
#include "planners/policy.h"
#include "runtime/model_rt.h"
#include "runtime/model_rt_ops.h"
#include "runtime/model_rt_walk.h"
#include "runtime/rt_backend.h"
#include "runtime/rt_csv.h"
#include "runtime/rt_exec.h"
#include "runtime/rt_node.h"
#include "traces/gen.h"
#include "traces/jobview.h"
#include "traces/machine.h"
#include "traces/models.h"

typedef struct run_args {
    const char *model, *trace_path, *machine, *policy, *plan_path, *allocator;
    const char *csv, *ops_csv, *schedule_path;
    const char *record;           /* --record FILE: the run as a trace of measured ops */
    char from[1024];              /* the command line, for the record's recorded.from */
    char dims[96];
    uint64_t seq, batch;
    int tp, cp, dp, ep, iters;
    double alpha;
    int per_op, alloc_sync, max_ahead, no_credit, quiet, device, host_thread;
    int verify_swaps;             /* --verify-swaps: checksum swapped bytes (rt_exec.h) */
    uint64_t capacity_bytes;      /* 0: the GPU's free memory; UINT64_MAX: the profile's */
    uint64_t host_limit_bytes;    /* UINT64_MAX: the profile's share (default); 0: none */
    double watchdog_s;
    int math_real;                /* --math real: the model's kernels (model_rt.h) */
    int bench_layer, train_steps, reps, warmup;
    kn_attn_impl attn;            /* --attn: the benchmark's attention kernels */
    const char *gemm_algos;       /* --gemm-algos: GEMM algorithms chosen by measurement */
    const char *tune_gemms;       /* --tune-gemms: measure the layer's and write them here */
    int attn_qchunk;              /* --attn-qchunk: the backward's query chunk (tiles) */
    double lr;                    /* --train: AdamW learning rate (0: the model's default) */
    int host_threads;             /* --host-threads: host optimizer threads (0: CPUs - 1) */
    int host_denormals_keep;      /* --host-denormals keep: the host step without FTZ/DAZ */
    int coll_spin;                /* --collectives spin: one process, collectives spun */
    int device_set;               /* --device given */
    rt_proc proc;                 /* who this process is in a run on several GPUs */
} run_args;

enum {
    O_MODEL = 256, O_DIMS, O_SEQ, O_BATCH, O_TP, O_CP, O_DP, O_EP, O_ITERS, O_TRACE, O_MACHINE,
    O_POLICY, O_PLAN, O_ALLOCATOR, O_ALPHA, O_CSV, O_PEROP, O_OPSCSV, O_SCHEDULE, O_SYNC,
    O_AHEAD, O_NOCREDIT, O_CAPACITY, O_HOSTLIMIT, O_WATCHDOG, O_DEVICE, O_HOSTWORK, O_QUIET,
    O_HELP, O_MATH, O_BENCH, O_TRAIN, O_REPS, O_WARMUP, O_LR, O_RECORD, O_VERIFY,
    O_HOSTTHREADS, O_HOSTDENORM, O_ATTN, O_COLL, O_GEMMALGOS, O_TUNEGEMMS, O_QCHUNK
};

static const struct option opts[] = {
    {"model", required_argument, 0, O_MODEL}, {"dims", required_argument, 0, O_DIMS},
    {"seq", required_argument, 0, O_SEQ}, {"batch", required_argument, 0, O_BATCH},
    {"tp", required_argument, 0, O_TP}, {"cp", required_argument, 0, O_CP},
    {"dp", required_argument, 0, O_DP}, {"ep", required_argument, 0, O_EP},
    {"iters", required_argument, 0, O_ITERS},
    {"trace", required_argument, 0, O_TRACE}, {"machine", required_argument, 0, O_MACHINE},
    {"policy", required_argument, 0, O_POLICY}, {"plan", required_argument, 0, O_PLAN},
    {"allocator", required_argument, 0, O_ALLOCATOR}, {"alpha", required_argument, 0, O_ALPHA},
    {"csv", required_argument, 0, O_CSV}, {"per-op", no_argument, 0, O_PEROP},
    {"ops-csv", required_argument, 0, O_OPSCSV}, {"record", required_argument, 0, O_RECORD},
    {"schedule", required_argument, 0, O_SCHEDULE}, {"alloc-sync", no_argument, 0, O_SYNC},
    {"max-ahead", required_argument, 0, O_AHEAD}, {"no-credit", no_argument, 0, O_NOCREDIT},
    {"verify-swaps", no_argument, 0, O_VERIFY},
    {"capacity", required_argument, 0, O_CAPACITY},
    {"host-limit", required_argument, 0, O_HOSTLIMIT},
    {"watchdog", required_argument, 0, O_WATCHDOG}, {"device", required_argument, 0, O_DEVICE},
    {"host-work", required_argument, 0, O_HOSTWORK},
    {"math", required_argument, 0, O_MATH}, {"bench-layer", no_argument, 0, O_BENCH},
    {"train", required_argument, 0, O_TRAIN}, {"reps", required_argument, 0, O_REPS},
    {"warmup", required_argument, 0, O_WARMUP}, {"lr", required_argument, 0, O_LR},
    {"host-threads", required_argument, 0, O_HOSTTHREADS},
    {"host-denormals", required_argument, 0, O_HOSTDENORM},
    {"attn", required_argument, 0, O_ATTN},
    {"gemm-algos", required_argument, 0, O_GEMMALGOS},
    {"tune-gemms", required_argument, 0, O_TUNEGEMMS},
    {"attn-qchunk", required_argument, 0, O_QCHUNK},
    {"collectives", required_argument, 0, O_COLL},
    {"quiet", no_argument, 0, O_QUIET}, {"help", no_argument, 0, O_HELP}, {0, 0, 0, 0}};

static void usage(FILE *f)
{
    fprintf(f,
        "usage: memsim run --machine NAME [options]\n"
        "Executes a workload's lowered schedule on this machine's GPU: real allocations (the\n"
        "chosen allocator over cudaMalloc / CUDA VMM), real copies over the host link into\n"
        "pinned memory, and spin kernels that last each op's modelled duration. Prints the\n"
        "measured iterations next to what the schedule's durations imply.\n\n"
        "workload (as memsim simulate):\n"
        "  --model NAME         model from `memsim list`, or dims:L,H,A,F,V (default gpt-7b)\n"
        "  --dims L,H,A,F,V     explicit layers, hidden, heads, ffn, vocab\n"
        "  --seq N              sequence length (64K, 1M accepted; default: the model's)\n"
        "  --batch N            micro-batch size (default 1)\n"
        "  --tp N --cp N --dp N parallel degrees: tp x cp x dp processes, one per GPU of this\n"
        "                       node, each running its rank's schedule with NCCL's\n"
        "                       collectives (docs/RUNTIME.md, Several GPUs)\n"
        "  --ep N               expert-parallel degree of a MoE model (divides --dp)\n"
        "  --iters N            iterations to generate (default 2; the last is reported)\n"
        "  --trace FILE         use this workload trace instead of generating one\n"
        "  --machine NAME|FILE  machine profile for op durations and the host limit (required)\n"
        "policy:\n"
        "  --policy NAME        memory policy (default keep-all)\n"
        "  --plan FILE          a plan file (memsim plan), as memsim simulate --plan FILE\n"
        "  --allocator NAME     caching | stitching | expandable | static (default: the plan's)\n"
        "  --alpha X            swapped token fraction in [0,1] (policies that use it)\n"
        "execution:\n"
        "  --per-op             events around every compute action (measured op times)\n"
        "  --ops-csv FILE       write every compute action's asked and measured time (implies\n"
        "                       --per-op)\n"
        "  --max-ahead N        the host stays at most N compute actions ahead of the GPU, so\n"
        "                       frees deferred for other streams end near where the schedule\n"
        "                       frees (default 8, what the simulator models; 0: unbounded, as\n"
        "                       PyTorch's host thread runs)\n"
        "  --alloc-sync         each allocator call waits until its stream reaches it (the\n"
        "                       simulator's allocator order; stalls issue)\n"
        "  --no-credit          do not carry the excess of too-short ops over to the next ops\n"
        "  --verify-swaps       checksum the device bytes of every D2H copy (just before it)\n"
        "                       and of every H2D copy (just after it) on the copy's stream;\n"
        "                       a prefetch whose sum differs from its offload's is an error.\n"
        "                       Costs a read of every copied byte on the copy streams\n"
        "                       (delays copies; measured times are not the plain run's)\n"
        "  --host-work MODE     thread (default: a worker thread that releases the stream\n"
        "                       through a wait on pinned memory) or callback\n"
        "                       (cudaLaunchHostFunc)\n"
        "  --capacity BYTES|machine  device bytes the allocator may take (default: free memory\n"
        "                       less 512 MiB; machine: the profile's usable bytes)\n"
        "  --host-limit BYTES|none   pinned bytes allowed (default: this GPU's share of the\n"
        "                       profile's host memory, as the simulator gives it)\n"
        "  --watchdog S         give up (and report) when the run takes longer than S seconds\n"
        "  --device N           CUDA device (default 0; a rank uses its local rank's)\n"
        "  --collectives MODE   nccl (default: with tp x cp x dp > 1, one process per GPU;\n"
        "                       started here, or by torchrun --no-python / mpirun, which then\n"
        "                       need MEMSIM_NCCL_ID_FILE) or spin (one process on one GPU,\n"
        "                       every collective a spin kernel of its modelled duration)\n"
        "real kernels (docs/RUNTIME.md, Real kernels):\n"
        "  --math MODE          spin (default: spin kernels of each op's modelled duration) or\n"
        "                       real: each compute action of the schedule runs the real kernel\n"
        "                       of its op (every policy: swaps, memo's token-wise replays on\n"
        "                       the missing rows, DHA on mapped host memory, host AdamW; the\n"
        "                       trace gets fp32 gradients and the small saved tensors);\n"
        "                       with --bench-layer or --train, the model's own programs\n"
        "  --bench-layer        forward + backward of one keep-all layer of the model at --seq\n"
        "                       and --batch: FLOPs, median time, MFU against the profile's bf16\n"
        "                       peak, per-op times\n"
        "  --reps N --warmup N  timed and warm-up repetitions of the benchmark (12, 3)\n"
        "  --attn KERNELS       the benchmark's attention: auto (default: wgmma and TMA on\n"
        "                       compute capability 9.0, mma.sync elsewhere), mma, wgmma (at\n"
        "                       head dim 128 the backward in one pass, dq summed in a fixed\n"
        "                       order), wgmma-onepass (the same), wgmma-inline (the one\n"
        "                       pass with each tile's dQ beside its own dK, not the next\n"
        "                       tile's; the same bits), wgmma-two (the backward as two\n"
        "                       kernels, dk/dv and dq), wgmma-basic (the forward's\n"
        "                       consumers without turns, two-kernel backward) or wgmma-overlap\n"
        "                       (wgmma-two with the backward's products kept in flight while P\n"
        "                       and dS are computed; the same bits)\n"
        "  --gemm-algos FILE    GEMM algorithms chosen by measurement (--tune-gemms), each for\n"
        "                       its shape; other shapes run cuBLAS's default (docs/RUNTIME.md,\n"
        "                       GEMM algorithms; the same cuBLASLt and device only)\n"
        "  --tune-gemms FILE    with --bench-layer: first one pass that times cuBLAS's default\n"
        "                       and cuBLASLt's candidates for each of the layer's GEMMs, writes\n"
        "                       the choices to FILE, then the benchmark with them\n"
        "  --attn-qchunk TILES  with --bench-layer: the one-pass backward's query chunk in\n"
        "                       tiles of 64 queries (even; default: half the L2's worth where\n"
        "                       a head's dq accumulator exceeds it, else one chunk a head)\n"
        "  --train N            N training steps of the whole model (AdamW, seeded weights and\n"
        "                       token stream; --policy full-recompute replays each layer's\n"
        "                       forward in the backward): the loss curve and step times\n"
        "  --lr X               AdamW learning rate of --math real runs (default 2e-3)\n"
        "  --host-threads N     threads of the host AdamW steps of offload plans with --math\n"
        "                       real (default: the online CPUs less one; memsim probe\n"
        "                       measures the rate with the same default)\n"
        "  --host-denormals flush|keep\n"
        "                       subnormal numbers in those steps: flush (default) reads and\n"
        "                       writes them as 0, so a step's time does not depend on its\n"
        "                       gradients' values; keep computes them, as the GPU AdamW\n"
        "                       does (up to 30x slower per subnormal on x86 hosts)\n"
        "output:\n"
        "  --csv FILE           results CSV (the simulator's columns, then the runtime's)\n"
        "  --schedule FILE      write the lowered schedule as text\n"
        "  --record FILE        write the executed trace with every op's dur_us replaced by\n"
        "                       its measured time (implies --per-op; memsim simulate --trace\n"
        "                       and memsim replay --trace read it)\n"
        "  --quiet              print only errors\n"
        "  --help               this help\n"
        "examples (from the source directory, sim/ on the PATH):\n"
        "  memsim run --machine h200-sxm --model gpt2-1b --seq 1024 --batch 8 --policy full-swap\n"
        "  memsim run --machine h200-sxm --math real --bench-layer --dims 1,4096,32,16384,50257 \\\n"
        "      --seq 32K --tune-gemms gemms_32k.txt      # the layer; its GEMMs measured first\n"
        "  memsim run --machine h200-sxm --math real --bench-layer --dims 1,4096,32,16384,50257 \\\n"
        "      --seq 32K --gemm-algos gemms_32k.txt      # again, with those algorithms\n"
        "  memsim run --machine h200-sxm --math real --train 50 --model dims:2,512,8,2048,50257 \\\n"
        "      --seq 1024 --policy full-recompute\n"
        "Several GPUs: MEMSIM_NCCL (the NCCL library), MEMSIM_NCCL_ID_FILE (where ranks that\n"
        "a launcher started meet), MEMSIM_RANK_TIMEOUT_S (each wait's limit, default 300).\n"
        "Exit status: 0 a result (ok, oom, oohm; on several GPUs: ok on every rank), 1 no\n"
        "usable GPU or a failure on the GPU, 2 usage, 3 bad input, 4 file I/O.\n");
}

static int bad(const char *opt, const char *v, const char *what)
{
    fprintf(stderr, "memsim run: --%s '%s': %s\n", opt, v, what);
    return MS_EXIT_USAGE;
}

static int parse_pos(const char *opt, const char *v, int *out)
{
    uint64_t x;
    if (!ms_parse_u64(v, &x) || x == 0 || x > (1u << 20))
        return bad(opt, v, "expected a whole number from 1 to 1048576");
    *out = (int)x;
    return 0;
}

static int apply(int c, char *v, run_args *a)
{
    uint64_t x;
    switch (c) {
    case O_MODEL: a->model = v; return 0;
    case O_DIMS:
        snprintf(a->dims, sizeof a->dims, "dims:%s", v);
        a->model = a->dims;
        return 0;
    case O_SEQ:
        if (!ms_parse_count(v, &a->seq) || !a->seq) return bad("seq", v, "expected a count");
        return 0;
    case O_BATCH:
        if (!ms_parse_u64(v, &a->batch) || !a->batch) return bad("batch", v, "expected > 0");
        return 0;
    case O_TP: return parse_pos("tp", v, &a->tp);
    case O_CP: return parse_pos("cp", v, &a->cp);
    case O_DP: return parse_pos("dp", v, &a->dp);
    case O_EP: return parse_pos("ep", v, &a->ep);
    case O_ITERS: return parse_pos("iters", v, &a->iters);
    case O_TRACE: a->trace_path = v; return 0;
    case O_MACHINE: a->machine = v; return 0;
    case O_POLICY: a->policy = v; return 0;
    case O_PLAN: a->plan_path = v; return 0;
    case O_ALLOCATOR: a->allocator = v; return 0;
    case O_ALPHA:
        if (!ms_parse_double(v, &a->alpha) || a->alpha < 0 || a->alpha > 1)
            return bad("alpha", v, "expected a number in [0, 1]");
        return 0;
    case O_CSV: a->csv = v; return 0;
    case O_PEROP: a->per_op = 1; return 0;
    case O_OPSCSV: a->ops_csv = v; a->per_op = 1; return 0;
    case O_RECORD: a->record = v; a->per_op = 1; return 0;
    case O_SCHEDULE: a->schedule_path = v; return 0;
    case O_SYNC: a->alloc_sync = 1; return 0;
    case O_AHEAD:
        if (!ms_parse_u64(v, &x) || x > 4096) return bad("max-ahead", v, "expected 0..4096");
        a->max_ahead = (int)x;
        return 0;
    case O_NOCREDIT: a->no_credit = 1; return 0;
    case O_VERIFY: a->verify_swaps = 1; return 0;
    case O_CAPACITY:
        if (!strcmp(v, "machine")) a->capacity_bytes = UINT64_MAX;
        else if (!ms_parse_bytes(v, &a->capacity_bytes) || !a->capacity_bytes)
            return bad("capacity", v, MS_BYTES_EXPECTED ", or 'machine'");
        return 0;
    case O_HOSTLIMIT:
        if (!strcmp(v, "none")) a->host_limit_bytes = 0;
        else if (!ms_parse_bytes(v, &a->host_limit_bytes))
            return bad("host-limit", v, MS_BYTES_EXPECTED ", or 'none'");
        return 0;
    case O_WATCHDOG:
        if (!ms_parse_double(v, &a->watchdog_s) || a->watchdog_s <= 0)
            return bad("watchdog", v, "expected seconds > 0");
        return 0;
    case O_DEVICE:
        if (!ms_parse_u64(v, &x) || x > 64) return bad("device", v, "expected 0..64");
        a->device = (int)x;
        a->device_set = 1;
        return 0;
    case O_COLL:
        if (strcmp(v, "nccl") && strcmp(v, "spin")) return bad("collectives", v,
                                                               "expected nccl or spin");
        a->coll_spin = !strcmp(v, "spin");
        return 0;
    case O_HOSTWORK:
        if (!strcmp(v, "callback")) a->host_thread = 0;
        else if (!strcmp(v, "thread")) a->host_thread = 1;
        else return bad("host-work", v, "expected callback or thread");
        return 0;
    case O_QUIET: a->quiet = 1; return 0;
    case O_MATH:
        if (!strcmp(v, "real")) a->math_real = 1;
        else if (!strcmp(v, "spin")) a->math_real = 0;
        else return bad("math", v, "expected spin or real");
        return 0;
    case O_BENCH: a->bench_layer = 1; return 0;
    case O_GEMMALGOS: a->gemm_algos = v; return 0;
    case O_TUNEGEMMS: a->tune_gemms = v; return 0;
    case O_QCHUNK:
        if (parse_pos("attn-qchunk", v, &a->attn_qchunk)) return MS_EXIT_USAGE;
        if (a->attn_qchunk % 2) return bad("attn-qchunk", v, "expected an even number of tiles");
        return 0;
    case O_LR:
        if (!ms_parse_double(v, &a->lr) || a->lr <= 0 || a->lr > 1)
            return bad("lr", v, "expected a learning rate in (0, 1]");
        return 0;
    case O_TRAIN: return parse_pos("train", v, &a->train_steps);
    case O_HOSTTHREADS: return parse_pos("host-threads", v, &a->host_threads);
    case O_HOSTDENORM:
        if (strcmp(v, "flush") && strcmp(v, "keep"))
            return bad("host-denormals", v, "expected flush or keep");
        a->host_denormals_keep = !strcmp(v, "keep");
        return 0;
    case O_REPS: return parse_pos("reps", v, &a->reps);
    case O_ATTN:
        if (!strcmp(v, "auto")) a->attn = KN_ATTN_AUTO;
        else if (!strcmp(v, "mma")) a->attn = KN_ATTN_MMA;
        else if (!strcmp(v, "wgmma")) a->attn = KN_ATTN_WGMMA;
        else if (!strcmp(v, "wgmma-basic")) a->attn = KN_ATTN_WGMMA_BASIC;
        else if (!strcmp(v, "wgmma-onepass")) a->attn = KN_ATTN_WGMMA_ONEPASS;
        else if (!strcmp(v, "wgmma-overlap")) a->attn = KN_ATTN_WGMMA_OVERLAP;
        else if (!strcmp(v, "wgmma-two")) a->attn = KN_ATTN_WGMMA_TWO;
        else if (!strcmp(v, "wgmma-inline")) a->attn = KN_ATTN_WGMMA_INLINE;
        else return bad("attn", v, "expected auto, mma, wgmma, wgmma-basic, wgmma-onepass, "
                        "wgmma-overlap, wgmma-two or wgmma-inline");
        return 0;
    case O_WARMUP:
        if (!ms_parse_u64(v, &x) || x > 1000) return bad("warmup", v, "expected 0..1000");
        a->warmup = (int)x;
        return 0;
    }
    return MS_EXIT_USAGE;
}

/* Returns -1 for --help, 0 to go on, or an exit status. */
static int parse(int argc, char **argv, run_args *a)
{
    memset(a, 0, sizeof *a);
    a->model = "gpt-7b";
    a->policy = "keep-all";
    a->alpha = -1;
    a->host_limit_bytes = UINT64_MAX;
    a->host_thread = 1;
    a->warmup = -1;
    /* Bounded run-ahead by default: the simulator runs each allocator call when its stream
     * reaches it, so a host that stays a few ops ahead is what it predicts (measured on an
     * H200: full-swap within 0.7 % in time and 2.1 % in peak reserved; unbounded run-ahead,
     * PyTorch's way, reserved 75 % more: docs/RUNTIME.md). */
    a->max_ahead = 8;
    int help = 0, c;
    size_t len = 0;
    for (int i = 0; i < argc && len + 2 < sizeof a->from; i++) {
        if (!strcmp(argv[i], "--record") && i + 1 < argc) {   /* the output is no workload */
            i++;
            continue;
        }
        if (!strncmp(argv[i], "--record=", 9)) continue;
        int w = snprintf(a->from + len, sizeof a->from - len, "%s%s", len ? " " : "",
                         i == 0 ? "memsim run" : argv[i]);
        if (w < 0 || (size_t)w >= sizeof a->from - len) break;
        len += (size_t)w;
    }
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == '?') {
            fprintf(stderr, "memsim run: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return MS_EXIT_USAGE;
        }
        if (c == ':') {
            fprintf(stderr, "memsim run: option '%s' needs a value\n", argv[optind - 1]);
            return MS_EXIT_USAGE;
        }
        if (c == O_HELP) {
            help = 1;
            continue;
        }
        int rc = apply(c, optarg, a);
        if (rc) return rc;
    }
    if (help) return -1;
    if (optind < argc) {
        fprintf(stderr, "memsim run: unexpected argument '%s'\n", argv[optind]);
        return MS_EXIT_USAGE;
    }
    if (!a->machine) {
        fprintf(stderr, "memsim run: --machine is required (the profile gives op durations)\n");
        return MS_EXIT_USAGE;
    }
    if ((a->bench_layer || a->train_steps) && !a->math_real) {
        fprintf(stderr, "memsim run: --bench-layer and --train need --math real\n");
        return MS_EXIT_USAGE;
    }
    if (a->record && (a->bench_layer || a->train_steps)) {
        fprintf(stderr, "memsim run: --record records a workload's schedule, not --bench-layer "
                        "or --train\n");
        return MS_EXIT_USAGE;
    }
    if ((a->gemm_algos || a->tune_gemms) && !a->math_real) {
        fprintf(stderr, "memsim run: --gemm-algos and --tune-gemms choose the GEMMs of --math "
                        "real\n");
        return MS_EXIT_USAGE;
    }
    if (a->tune_gemms && !a->bench_layer) {
        fprintf(stderr, "memsim run: --tune-gemms measures the GEMMs of --bench-layer\n");
        return MS_EXIT_USAGE;
    }
    if (a->attn_qchunk && !a->bench_layer) {
        fprintf(stderr, "memsim run: --attn-qchunk sets the attention of --bench-layer\n");
        return MS_EXIT_USAGE;
    }
    if (a->bench_layer && a->train_steps) {
        fprintf(stderr, "memsim run: --bench-layer and --train are separate runs\n");
        return MS_EXIT_USAGE;
    }
    return 0;
}

/* The first failure's message, for the notice that stops the other ranks. */
static char first_error[1024];

static void note_error(const char *msg)
{
    if (!first_error[0]) snprintf(first_error, sizeof first_error, "%s", msg);
}

static int fail_st(ms_status st, const ms_error *err)
{
    const char *msg = err && err->msg[0] ? err->msg : ms_status_str(st);
    fprintf(stderr, "memsim run: %s\n", msg);
    note_error(msg);
    return ms_exit_code(st);
}

static ms_status make_trace(const run_args *a, const machine_t *m, trace_t **t, ms_error *err)
{
    if (a->trace_path) return trace_load(a->trace_path, t, err);
    gen_config c;
    gen_config_default(&c);
    ms_status st = model_lookup(a->model, &c.model, err);
    if (st != MS_OK) return st;
    c.seq = a->seq ? a->seq : c.model.default_seq;
    c.micro_batch = a->batch ? a->batch : 1;
    if (a->math_real) {
        c.grad_bytes = 4;   /* the real kernels accumulate fp32 gradients */
        c.save_small = 1;   /* and keep the norm statistics and attention log-sum-exp */
    }
    c.tp = a->tp ? a->tp : 1;
    c.cp = a->cp ? a->cp : 1;
    c.dp = a->dp ? a->dp : 1;
    c.ep = a->ep ? a->ep : 1;
    if (a->iters > 0) c.iterations = a->iters;
    /* the form the policy plans (zero-offload, MemFerry: ZeRO-Offload's), as memsim simulate */
    c.offload = pol_form_for(a->policy, a->plan_path) == POL_FORM_OFFLOAD;
    if ((st = gen_validate(&c, err)) != MS_OK) return st;
    return gen_trace(&c, m, t, err);
}

static ms_status make_plan(const run_args *a, const trace_t *t, const machine_t *m,
                           plan_t **out, ms_error *err)
{
    ms_status st;
    if (a->plan_path) {
        st = plan_load(a->plan_path, out, err);
    } else {
        pol_opts o;
        pol_opts_default(&o);
        o.allocator = a->allocator;
        o.alpha = a->alpha;
        st = pol_plan(a->policy, t, m, &o, out, err);
    }
    if (st != MS_OK) return st;
    if (a->allocator) snprintf((*out)->allocator, sizeof (*out)->allocator, "%s", a->allocator);
    if (!alloc_find((*out)->allocator)) {
        st = ms_fail(err, MS_ERR_NOTFOUND, "unknown allocator '%s' (memsim list)",
                     (*out)->allocator);
        plan_free(*out);
        *out = NULL;
    }
    return st;
}

/* MEMO §5.1's model FLOPs per GPU per iteration, as the simulator computes them. */
/* MFU and tokens per GPU per second of an iteration, as the simulator computes them. */
static void rates(const trace_t *t, const machine_t *m, double iter_s, double *mfu, double *tgs)
{
    *mfu = *tgs = 0;
    if (!(iter_s > 0)) return;
    uint64_t b = trace_meta_u64(t, "batch", 0), tp = trace_meta_u64(t, "tp", 0), cp = trace_meta_u64(t, "cp", 0);
    *tgs = (double)(b ? b : 1) * (double)trace_meta_u64(t, "seq", 0) /
           (double)((tp ? tp : 1) * (cp ? cp : 1)) / iter_s;
    if (m->gpu_peak_bf16_flops > 0) *mfu = trace_model_flops(t) / iter_s / m->gpu_peak_bf16_flops;
}

/* ---- output ---- */

static double gib(uint64_t b) { return (double)b / MS_GiB; }

static void print_calib(const rt_calib *c)
{
    printf("spin kernel: overhead %.2f us, slope %.5f, shortest kernel %.2f us\n",
           c->overhead_us, c->slope, c->empty_us);
    printf("  %-10s %14s %8s %14s %8s\n", "asked_us", "back2back_us", "err%", "single_us",
           "err%");
    for (int i = 0; i < RT_CALIB_CHECKS; i++) {
        double q = c->check_req_us[i];
        if (!(q > 0)) continue;
        printf("  %-10.0f %14.3f %+8.3f %14.3f %+8.3f\n", q, c->check_b2b_us[i],
               100 * (c->check_b2b_us[i] / q - 1), c->check_single_us[i],
               100 * (c->check_single_us[i] / q - 1));
    }
}

/* What the peak held, by kind (the kinds the simulator's --breakdown lists; planners/blockmix.h). */
static void print_breakdown(const rt_exec_result *r)
{
    printf("memory by kind at the %s (GiB requested):",
           r->peak_live_at_failure ? "failing request" : "peak of live bytes");
    for (int k = 0; k < BM_COUNT; k++)
        if (r->peak_live_bytes[k])
            printf(" %s %.3f,", bm_kind_name((bm_kind)k), gib(r->peak_live_bytes[k]));
    printf(" total %.3f\n", gib(bm_sum(r->peak_live_bytes)));
}

static void print_windows(const rt_exec_result *r, const machine_t *m)
{
    int real_host = 0;
    for (size_t w = 0; w < r->n_win; w++) real_host |= r->win[w].host_measured_s > 0;
    printf("%-7s %12s %12s %7s %9s %9s %11s %11s %10s %8s%s\n", "window", "measured_ms",
           "compute_ms", "meas/cmp", "h2d_GiB", "d2h_GiB", "h2d_busy_ms", "d2h_busy_ms",
           "bound_ms", "meas/bnd", real_host ? "   host_ms host_nominal_ms" : "");
    for (size_t w = 0; w < r->n_win; w++) {
        const rt_window *x = &r->win[w];
        double link_h = m->link_h2d_Bps > 0 ? (double)x->h2d_bytes / m->link_h2d_Bps : 0;
        double link_d = m->link_d2h_Bps > 0 ? (double)x->d2h_bytes / m->link_d2h_Bps : 0;
        double bound = x->nominal_s + x->host_nominal_s;
        if (link_h > bound) bound = link_h;
        if (link_d > bound) bound = link_d;
        char name[32];
        if (w) snprintf(name, sizeof name, "iter %zu", w - 1);
        else snprintf(name, sizeof name, "setup");
        printf("%-7s %12.3f %12.3f %7.4f %9.3f %9.3f %11.3f %11.3f %10.3f %8.4f", name,
               x->time_s * 1e3, x->nominal_s * 1e3,
               x->nominal_s > 0 ? x->time_s / x->nominal_s : 0, gib(x->h2d_bytes),
               gib(x->d2h_bytes), x->h2d_busy_s * 1e3, x->d2h_busy_s * 1e3, bound * 1e3,
               bound > 0 ? x->time_s / bound : 0);
        if (real_host) printf(" %9.3f %15.3f", x->host_measured_s * 1e3, x->host_nominal_s * 1e3);
        printf("\n");
    }
    if (real_host)
        printf("  (host_ms: wall time of the real host steps issued in the window, on the host\n"
               "   thread; host_nominal_ms: their trace durations)\n");
    printf("  (compute_ms: the sum of the compute actions' dur_us; bound_ms: a lower bound, the\n"
           "   larger of compute + host work and each direction's bytes at the profile's link\n"
           "   rate; `memsim simulate` with the same options predicts the iteration itself)\n");
}

static void print_link(const char *dir, const rt_link_stat *l, double profile_Bps)
{
    if (!l->n) {
        printf("  %s: no large copies\n", dir);
        return;
    }
    printf("  %s: %llu copies, %.2f GiB in %.3f ms: %.2f GB/s (median %.2f, min %.2f, max "
           "%.2f) = %.1f%% of the profile's %.2f GB/s\n",
           dir, (unsigned long long)l->n, gib(l->bytes), l->busy_s * 1e3, l->agg_Bps / 1e9,
           l->median_Bps / 1e9, l->min_Bps / 1e9, l->max_Bps / 1e9,
           profile_Bps > 0 ? 100 * l->agg_Bps / profile_Bps : 0, profile_Bps / 1e9);
}

static void print_report(const run_args *a, const rt_gpu_info *g, const machine_t *m,
                         const plan_t *plan, const trace_t *t, size_t nact,
                         const rt_exec_result *r, const rt_backend *be, double mfu, double tgs,
                         uint64_t large)
{
    printf("device: %s (sm_%d%d, %d SMs, %.1f GiB free of %.1f, driver %d.%d); profile %s\n",
           g->name, g->cc_major, g->cc_minor, g->sms, gib(g->free_bytes), gib(g->total_bytes),
           g->driver_version / 1000, g->driver_version % 1000 / 10, m->name);
    const char *model = trace_get_meta(t, "model");
    char issue[48];
    if (a->alloc_sync) snprintf(issue, sizeof issue, "alloc-sync");
    else if (a->max_ahead) snprintf(issue, sizeof issue, "max-ahead %d", a->max_ahead);
    else snprintf(issue, sizeof issue, "ahead (unbounded)");
    printf("workload: %s seq %llu batch %llu tp %llu cp %llu dp %llu; policy %s, allocator %s; "
           "%zu actions; issue %s%s\n", model ? model : "-",
           (unsigned long long)trace_meta_u64(t, "seq", 0), (unsigned long long)trace_meta_u64(t, "batch", 0),
           (unsigned long long)trace_meta_u64(t, "tp", 0), (unsigned long long)trace_meta_u64(t, "cp", 0),
           (unsigned long long)trace_meta_u64(t, "dp", 0), plan->policy, plan->allocator, nact, issue,
           a->per_op ? ", per-op events" : "");
    if (r->calib.valid) print_calib(&r->calib);
    if (r->outcome == RTX_OK) {
        print_windows(r, m);
        char b[32];
        printf("large copies (>= %s):\n", ms_fmt_bytes(large, b, sizeof b));
        print_link("H2D", &r->h2d_large, m->link_h2d_Bps);
        print_link("D2H", &r->d2h_large, m->link_d2h_Bps);
    }
    const alloc_stats *s = &r->astats;
    printf("memory: peak allocated %.3f GiB, reserved %.3f GiB, active %.3f GiB, "
           "fragmentation %.2f%%; pinned pool %.3f GiB (host peak %.3f GiB)\n",
           gib(s->allocated_peak_bytes), gib(s->reserved_peak_bytes), gib(s->active_peak_bytes),
           s->reserved_peak_bytes ? 100.0 * (1.0 - (double)s->active_peak_bytes /
                                                       (double)s->reserved_peak_bytes) : 0.0,
           gib(r->host_pool_bytes), gib(r->host_peak_bytes));
    print_breakdown(r);
    printf("allocator: %llu allocs, %llu frees, %llu segment allocs, %llu retries (%llu in the "
           "last iteration), %llu syncs; executor: %llu deferred frees, %llu drains (allocations "
           "retried after releasing them), %llu fenced allocations, %llu alloc-sync waits, %llu "
           "max-ahead waits; %llu kernels, %llu copies; issue %.3f s, wall %.3f s\n",
           (unsigned long long)s->num_allocs, (unsigned long long)s->num_frees,
           (unsigned long long)s->num_segment_allocs, (unsigned long long)s->num_alloc_retries,
           (unsigned long long)r->alloc_retries_per_iter, (unsigned long long)s->num_syncs,
           (unsigned long long)r->deferred_frees, (unsigned long long)r->oom_drains,
           (unsigned long long)r->alloc_fences, (unsigned long long)r->alloc_waits,
           (unsigned long long)r->ahead_waits,
           (unsigned long long)r->kernels, (unsigned long long)r->copies, r->issue_s, r->wall_s);
    rt_backend_print_stats(be, stdout);
    if (r->collectives)
        printf("collectives: %llu compute actions ran NCCL collectives, %llu of them rings beside "
               "their attention kernel\n", (unsigned long long)r->collectives,
               (unsigned long long)r->collectives_beside);
    if (a->verify_swaps)
        printf("swap checks: %llu copies checksummed, %llu prefetches verified against their "
               "offloads, %llu mismatches, %llu copies unpaired\n",
               (unsigned long long)r->swap_sums, (unsigned long long)r->swap_verified,
               (unsigned long long)r->swap_mismatches, (unsigned long long)r->swap_unpaired);
    printf("result: %s", rt_outcome_name(r->outcome));
    if (r->outcome == RTX_OK)
        printf(", iteration %.6f s (compute %.6f s nominal), MFU %.2f%%, TGS %.1f", r->iter_time_s,
               r->nominal_s, 100 * mfu, tgs);
    if (r->failure[0]) printf(": %s", r->failure);
    printf("\n");
}

static void csv_row(FILE *f, const run_args *a, const rt_gpu_info *g, const machine_t *m,
                    const plan_t *plan, const trace_t *t, const rt_exec_result *r, double mfu,
                    double tgs, double flops, const char *executor)
{
    rt_csv_run x = {a->per_op, a->max_ahead, a->alloc_sync, executor, mfu, tgs, flops};
    rt_csv_row(f, &x, g->name, m, plan, t, r);
    fputc('\n', f);
}

/* Renders through a memory stream, then through the atomic output file. */
static int write_out(const char *path, void (*fill)(FILE *, const void *), const void *ctx)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&buf, &len);
    if (!mf) return fail_st(MS_ERR_NOMEM, NULL);
    fill(mf, ctx);
    fclose(mf);
    ms_error err;
    ms_status st = ms_out_save(path, buf, len, &err);
    free(buf);
    return st == MS_OK ? MS_EXIT_OK : fail_st(st, &err);
}

typedef struct csv_ctx {
    const run_args *a;
    const rt_gpu_info *g;
    const machine_t *m;
    const plan_t *plan;
    const trace_t *t;
    const rt_exec_result *r;
    double mfu, tgs, flops;
    const char *executor;    /* "gpu": the executor; "gpu-one-stream": mrt_sched_run */
} csv_ctx;

static void fill_csv(FILE *f, const void *p)
{
    const csv_ctx *c = p;
    rt_csv_header(f, 0);
    csv_row(f, c->a, c->g, c->m, c->plan, c->t, c->r, c->mfu, c->tgs, c->flops, c->executor);
}

static void fill_ops(FILE *f, const void *p)
{
    const csv_ctx *c = p;
    fprintf(f, "action,op,name,recompute,asked_us,measured_us\n");
    for (size_t k = 0; k < c->r->n_ops; k++) {
        const rt_op_time *o = &c->r->ops[k];
        const trace_op *op = o->op >= 0 ? trace_find_op(c->t, (uint64_t)o->op) : NULL;
        fprintf(f, "%zu,%lld,", o->action, (long long)o->op);
        ms_csv_str(f, op && op->name[0] ? op->name : "-");
        fprintf(f, ",%d", o->recompute);
        rt_csv_dbl(f, o->req_us);
        rt_csv_dbl(f, o->meas_us);
        fputc('\n', f);
    }
}

static void fill_sched(FILE *f, const void *p) { sched_dump((const schedule_t *)p, f); }

/* ---- several GPUs: each rank's results to rank 0 ---- */

/* The results CSV row of c without its newline, into out. */
static void csv_row_text(const csv_ctx *c, char *out, size_t n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&buf, &len);
    out[0] = 0;
    if (!mf) return;
    csv_row(mf, c->a, c->g, c->m, c->plan, c->t, c->r, c->mfu, c->tgs, c->flops, c->executor);
    fclose(mf);
    if (len && buf[len - 1] == '\n') buf[--len] = 0;
    if (len < n) memcpy(out, buf, len + 1);
    free(buf);
}

static void rank_result(const run_args *a, const csv_ctx *c, rt_rank_result *x)
{
    const rt_exec_result *r = c->r;
    memset(x, 0, sizeof *x);
    x->rank = a->proc.rank;
    x->local_rank = a->proc.local_rank;
    snprintf(x->status, sizeof x->status, "%s", rt_outcome_name(r->outcome));
    x->iter_s = r->outcome == RTX_OK ? r->iter_time_s : 0;
    x->nominal_s = r->nominal_s;
    x->peak_reserved_bytes = r->astats.reserved_peak_bytes;
    x->peak_allocated_bytes = r->astats.allocated_peak_bytes;
    x->host_peak_bytes = r->host_peak_bytes;
    x->host_pool_bytes = r->host_pool_bytes;
    x->collectives = r->collectives;
    x->beside = r->collectives_beside;
    snprintf(x->device, sizeof x->device, "%.120s", c->g->name);
    /* one line: the result file is read line by line */
    snprintf(x->failure, sizeof x->failure, "%.630s", r->failure);
    for (char *q = x->failure; *q; q++)
        if (*q == '\n' || *q == '\r') *q = ' ';
    if (a->csv) csv_row_text(c, x->csv, sizeof x->csv);
}

typedef struct node_csv {
    const rt_rank_result *all;
    int world;
} node_csv;

/* The results CSV of a run on several GPUs: a row per rank, with its rank and the world. */
static void fill_node_csv(FILE *f, const void *p)
{
    const node_csv *c = p;
    rt_csv_header(f, 1);
    for (int r = 0; r < c->world; r++) fprintf(f, "%s,%d,%d\n", c->all[r].csv, r, c->world);
}

/* A rank's end: its results to rank 0, which prints the table of ranks and writes the CSV.
 * A rank whose run did not end ok leaves its result and the notice that stops the others
 * (their collectives would wait for it). Returns the exit status. */
static int node_results(const run_args *a, rt_node *node, const csv_ctx *c, int rc)
{
    rt_rank_result x;
    rank_result(a, c, &x);
    ms_error err;
    ms_error_clear(&err);
    if (c->r->outcome != RTX_OK || rc) {
        rt_node_put(node, &x, &err);
        char msg[800];
        snprintf(msg, sizeof msg, "%s: %s", x.status, x.failure[0] ? x.failure : "failed");
        rt_node_fail(&a->proc, msg);
        return rc ? rc : MS_EXIT_FAIL;
    }
    rt_rank_result *all = NULL;
    if (rt_node_gather(node, &x, &all, &err) != RT_OK) {
        fprintf(stderr, "memsim run: rank %d: %s\n", a->proc.rank, err.msg);
        rt_node_fail(&a->proc, err.msg);
        return MS_EXIT_FAIL;
    }
    if (!all) return MS_EXIT_OK;
    if (!a->quiet) rt_node_print(node, all, stdout);
    for (int r = 0; r < a->proc.world; r++)
        if (strcmp(all[r].status, "ok")) rc = MS_EXIT_FAIL;
    node_csv nc = {all, a->proc.world};
    if (a->csv) {
        int w = write_out(a->csv, fill_node_csv, &nc);
        if (w && !rc) rc = w;
    }
    free(all);
    return rc;
}

/* --record: the executed trace t with each op's measured time (rt_record_trace), written to
 * a->record. ops: every compute action's measurement. */
static int write_record(const run_args *a, const rt_gpu_info *g, const trace_t *t,
                        const rt_op_time *ops, size_t n_ops)
{
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    rt_record_info info = {g->name, date, a->math_real ? "real" : "spin", a->from};
    ms_error err;
    ms_error_clear(&err);
    trace_t *rt = NULL;
    size_t measured = 0;
    ms_status st = rt_record_trace(t, ops, n_ops, &info, &rt, &measured, &err);
    if (st == MS_OK) st = trace_write(rt, a->record, &err);
    trace_free(rt);
    if (st != MS_OK) return fail_st(st, &err);
    if (!a->quiet) {
        size_t n = 0;
        for (size_t i = 0; i < trace_count(t); i++) n += trace_get(t, i)->type == TR_OP;
        printf("recorded %s: %zu of %zu ops with their measured time\n", a->record, measured,
               n);
    }
    return MS_EXIT_OK;
}

/* Runs the schedule on the GPU and reports; returns the exit status. */
static int execute(const run_args *a, const rt_gpu_info *g, const machine_t *m,
                   const plan_t *plan, const trace_t *t, const schedule_t *s, rt_node *node)
{
    ms_error err;
    ms_error_clear(&err);
    rt_backend_opts bo;
    rt_backend_opts_default(&bo);
    bo.device = a->device;
    bo.capacity_bytes = a->capacity_bytes == UINT64_MAX ? machine_usable_bytes(m)
                                                         : a->capacity_bytes;
    rt_backend *be = NULL;
    rt_dev_ops *dev = NULL;
    if (rt_backend_new(&bo, &be, &err) != RT_OK || rt_cuda_dev_new(a->device, &dev,
                                                                   &err) != RT_OK) {
        fprintf(stderr, "memsim run: %s\n", err.msg);
        note_error(err.msg);
        rt_backend_free(be);
        return MS_EXIT_FAIL;
    }
    rt_cuda_dev_set_host_mode(dev, a->host_thread ? RT_HOST_THREAD : RT_HOST_CALLBACK);
    alloc_config cfg;
    uint64_t *ids = NULL, *offs = NULL;
    if (plan_alloc_config(plan, &cfg, &ids, &offs) != MS_OK) {
        rt_cuda_dev_free(dev);
        rt_backend_free(be);
        return fail_st(MS_ERR_NOMEM, NULL);
    }
    rt_exec_opts o;
    rt_exec_opts_default(&o);
    o.allocator = plan->allocator;
    o.alloc_cfg = &cfg;
    o.trace = t;
    o.per_op = a->per_op;
    o.alloc_sync = a->alloc_sync;
    o.max_ahead = a->max_ahead;
    o.spin_credit = !a->no_credit;
    o.watchdog_s = a->watchdog_s;
    o.verify_swaps = a->verify_swaps;
    o.backend_error = rt_backend_error(be);
    jobview jv; /* the simulator's share of the node's host memory (sim/pipeline.c) */
    jobview_of(t, m, &jv);
    o.host_limit_bytes = a->host_limit_bytes == UINT64_MAX ? jv.host_share_bytes
                                                            : a->host_limit_bytes;
    mrt_ops *ops = NULL;
    lower_rb_map *rbm = NULL;
    if (node) {
        /* collectives find their operands as the real kernels do: in rounding buffers too */
        ms_status ls = lower_rb_map_new(t, plan, &rbm, &err);
        if (ls != MS_OK) {
            fprintf(stderr, "memsim run: %s\n", err.msg);
            note_error(err.msg);
            free(ids);
            free(offs);
            rt_cuda_dev_free(dev);
            rt_backend_free(be);
            return ms_exit_code(ls);
        }
        rt_node_hooks(node, &o);
        o.rb_map = rbm;
    }
    if (a->math_real) {
        /* Multi-stream schedules (swap, offload): the executor runs the real kernels, which
         * find rounding-buffer members through lowering's layout. */
        ms_status ls = lower_rb_map_new(t, plan, &rbm, &err);
        if (ls != MS_OK || mrt_ops_new(t, 77, &ops, &err) != RT_OK ||
            (a->gemm_algos && mrt_ops_load_gemm_algos(ops, a->gemm_algos, &err) != RT_OK)) {
            fprintf(stderr, "memsim run: %s\n", err.msg);
            lower_rb_map_free(rbm);
            free(ids);
            free(offs);
            rt_cuda_dev_free(dev);
            rt_backend_free(be);
            return ls != MS_OK ? ms_exit_code(ls) : MS_EXIT_INPUT;
        }
        if (a->lr > 0 || a->host_denormals_keep) {
            mrt_config mc;
            mrt_config_default(&mc);
            if (a->lr > 0) mc.adam.lr = (float)a->lr;
            mc.adam.flush_denormals = !a->host_denormals_keep;
            mrt_ops_set_adam(ops, &mc.adam);
        }
        int bad_plan = mrt_ops_set_plan(ops, plan, &err) != RT_OK;
        if (bad_plan ||
            (a->host_threads && mrt_ops_set_host_threads(ops, a->host_threads, &err) != RT_OK)) {
            fprintf(stderr, "memsim run: %s\n", err.msg);
            mrt_ops_free(ops);
            lower_rb_map_free(rbm);
            free(ids);
            free(offs);
            rt_cuda_dev_free(dev);
            rt_backend_free(be);
            return bad_plan ? MS_EXIT_INPUT : MS_EXIT_FAIL;
        }
        if (mrt_ops_host_threads(ops) && !a->quiet)
            printf("host optimizer steps: AdamW on %d threads\n", mrt_ops_host_threads(ops));
        mrt_ops_exec_hooks(ops, &o);
        o.rb_map = rbm;
        o.plan = plan;
    }
    rt_exec_result r;
    rt_status rs = rt_exec_run(s, &o, dev, rt_backend_mb(be), &r, &err);
    if (ops && rs == RT_OK && !a->quiet) {
        float loss[MRT_MAX_ITERS];
        int n = r.n_win > 1 ? (int)r.n_win - 1 : 0; /* window 0 is the set-up */
        if (n > MRT_MAX_ITERS) n = MRT_MAX_ITERS;
        if (n > 0 && mrt_ops_losses(ops, loss, n, &err) == RT_OK)
            for (int k = 0; k < n; k++) printf("loss, iteration %d: %.4f\n", k, loss[k]);
    }
    mrt_ops_free(ops);
    lower_rb_map_free(rbm);
    int rc = MS_EXIT_OK;
    if (rs != RT_OK) rc = rs == RT_ERR_INVALID ? MS_EXIT_INPUT : MS_EXIT_FAIL;
    double flops = trace_model_flops(t), mfu = 0, tgs = 0;
    if (r.outcome == RTX_OK) rates(t, m, r.iter_time_s, &mfu, &tgs);
    if (!a->quiet) print_report(a, g, m, plan, t, sched_count(s), &r, be, mfu, tgs,
                                o.large_copy_bytes);
    if (rs != RT_OK) {
        fprintf(stderr, "memsim run: %s\n", r.failure);
        note_error(r.failure);
    }
    if (!r.leaked && rt_backend_outstanding(be))
        fprintf(stderr, "memsim run: warning: %llu backend allocations were not released\n",
                (unsigned long long)rt_backend_outstanding(be));
    csv_ctx c = {a, g, m, plan, t, &r, mfu, tgs, flops, node ? "gpu-nccl" : "gpu"};
    if (node) {
        rc = node_results(a, node, &c, rc);
    } else if (a->csv) {
        int w = write_out(a->csv, fill_csv, &c);
        if (w && !rc) rc = w;
    }
    if (a->ops_csv) {
        int w = write_out(a->ops_csv, fill_ops, &c);
        if (w && !rc) rc = w;
    }
    if (a->record) {
        int w = MS_EXIT_FAIL;
        if (rs == RT_OK && r.outcome == RTX_OK) w = write_record(a, g, t, r.ops, r.n_ops);
        else fprintf(stderr, "memsim run: --record: the run did not end with a result\n");
        if (w && !rc) rc = w;
    }
    rt_exec_result_release(&r);
    free(ids);
    free(offs);
    rt_cuda_dev_free(dev);
    rt_backend_free(be);
    return rc;
}

/* ---- --math real ---- */


/* The model's shape for the real kernels: the GPT layer model_rt.h implements. */
static int real_model(const run_args *a, model_t *md)
{
    ms_error err;
    ms_status st = model_lookup(a->model, md, &err);
    if (st != MS_OK) return fail_st(st, &err);
    if (md->norm != MODEL_NORM_LAYER || md->mlp != MODEL_MLP_GELU || md->kv_heads != md->heads ||
        md->is_encoder) {
        fprintf(stderr, "memsim run: --math real implements GPT layers (LayerNorm, GeLU MLP, "
                        "full multi-head causal attention); %s is not one\n", md->name);
        return MS_EXIT_INPUT;
    }
    return 0;
}

static void print_device(const rt_gpu_info *g, const machine_t *m)
{
    printf("device: %s (sm_%d%d, %d SMs, driver %d.%d); profile %s, bf16 peak %.1f TFLOP/s\n",
           g->name, g->cc_major, g->cc_minor, g->sms, g->driver_version / 1000,
           g->driver_version % 1000 / 10, m->name, m->gpu_peak_bf16_flops / 1e12);
}

/* The GEMM algorithms the benchmark ran: measured by --tune-gemms, or read by --gemm-algos. */
static void print_gemms(const mrt_bench_result *r, const run_args *a)
{
    if (!r->n_gemms) {
        printf("GEMMs: cuBLAS's default algorithms\n");
        return;
    }
    printf("GEMMs: algorithms %s %s (medians at tuning, ms; the default kept unless a "
           "candidate is 2%% faster)\n", a->tune_gemms ? "measured into" : "read from",
           a->tune_gemms ? a->tune_gemms : a->gemm_algos);
    for (int i = 0; i < r->n_gemms; i++) {
        const kn_gemm_info *x = &r->gemms[i];
        char who[48] = "cuBLAS default";
        if (x->chosen >= 0) snprintf(who, sizeof who, "cuBLASLt candidate %d of %d", x->chosen,
                                     x->candidates);
        printf("  %c%c M %6zu N %6zu K %6zu C %s%s  default %8.3f  best %8.3f (%.3f)  %s\n",
               x->ta ? 'T' : 'N', x->tb ? 'T' : 'N', x->M, x->N, x->K,
               x->c_fp32 ? "fp32" : "bf16", x->beta1 ? " +=" : x->bias ? " +b" : "   ",
               x->default_ms,
               x->best_ms, x->default_ms > 0 ? x->best_ms / x->default_ms : 0, who);
    }
}

static int run_bench(const run_args *a, const rt_gpu_info *g, const machine_t *m)
{
    model_t md;
    int rc = real_model(a, &md);
    if (rc) return rc;
    mrt_bench_cfg c;
    mrt_bench_default(&c);
    c.hidden = (int)md.hidden;
    c.heads = (int)md.heads;
    c.ffn = (int)md.ffn_hidden;
    c.seq = (int)(a->seq ? a->seq : md.default_seq);
    c.batch = (int)(a->batch ? a->batch : 1);
    if (a->reps) c.iters = a->reps;
    if (a->warmup >= 0) c.warmup = a->warmup;
    c.attn = a->attn;
    c.gemm_algos = a->gemm_algos;
    c.tune_gemms = a->tune_gemms;
    c.attn_qchunk = a->attn_qchunk;
    mrt_bench_result r;
    ms_error err;
    ms_error_clear(&err);
    if (mrt_bench_layer(&c, NULL, &r, &err) != RT_OK) {
        fprintf(stderr, "memsim run: %s\n", err.msg);
        return MS_EXIT_FAIL;
    }
    double peak = m->gpu_peak_bf16_flops;
    print_device(g, m);
    printf("one keep-all GPT layer, forward + backward, real kernels: hidden %d, heads %d (head "
           "dim %d), ffn %d, seq %d x batch %d = %d tokens; %.2f GiB on the device\n",
           c.hidden, c.heads, c.hidden / c.heads, c.ffn, c.seq, c.batch, c.seq * c.batch,
           gib(r.device_bytes));
    printf("FLOPs: model %.4g (MEMO: 6 T P_layer + 6 b h s^2), executed %.4g (GEMMs 3x forward, "
           "attention 2 + %d causal products)\n", r.model_flops, r.exec_flops, r.bwd_products);
    static const char *const attn_what[] = {
        "auto", "mma (mma.sync m16n8k16)",
        "wgmma (warpgroup MMA fed by TMA, the forward's consumers taking turns, one-pass backward)",
        "wgmma-basic (warpgroup MMA fed by TMA)",
        "wgmma-onepass (warpgroup MMA fed by TMA, turns, one-pass backward)",
        "wgmma-overlap (warpgroup MMA fed by TMA, turns, the backward's products overlapped)",
        "wgmma-two (warpgroup MMA fed by TMA, turns, the backward as two kernels)",
        "wgmma-inline (warpgroup MMA fed by TMA, turns, one-pass backward, dQ in its tile's "
        "iteration)"};
    printf("attention kernels: %s", attn_what[r.attn]);
    if (r.qchunk) printf("; the backward in query chunks of %d tiles of 64", r.qchunk);
    printf("\n");
    print_gemms(&r, a);
    printf("time: median %.3f ms of %d repetitions (min %.3f, max %.3f) after %d warm-up, "
           "events around each repetition\n", r.median_ms, r.n_times, r.min_ms, r.max_ms,
           c.warmup);
    printf("  every repetition (ms):");
    for (int i = 0; i < r.n_times; i++) printf(" %.3f", r.times_ms[i]);
    printf("\n");
    double mfu = peak > 0 ? r.model_flops / (r.median_ms * 1e-3) / peak : 0;
    printf("MFU %.2f%% (model FLOPs / median time / %.1f TFLOP/s); executed %.1f TFLOP/s\n",
           100 * mfu, peak / 1e12, r.exec_flops / (r.median_ms * 1e-3) / 1e12);
    printf("%-10s %10s %7s %10s\n", "op", "ms", "share", "TFLOP/s");
    for (int i = 0; i < r.n_ops; i++) {
        const mrt_bench_op *o = &r.ops[i];
        char tf[32] = "-";
        if (o->flops > 0 && o->ms > 0) snprintf(tf, sizeof tf, "%.1f", o->flops / (o->ms * 1e-3) / 1e12);
        printf("%-10s %10.3f %6.1f%% %10s\n", o->name, o->ms,
               r.ops_sum_ms > 0 ? 100 * o->ms / r.ops_sum_ms : 0, tf);
    }
    printf("%-10s %10.3f (per-op events: median of 5 passes each; their sum exceeds the\n"
           "            median pass by the event gaps)\n", "sum", r.ops_sum_ms);
    return MS_EXIT_OK;
}

static void fill_real_ops(FILE *f, const void *p)
{
    const void *const *c = p;
    const trace_t *t = c[0];
    const mrt_sched_result *r = c[1];
    fprintf(f, "action,op,name,recompute,asked_us,measured_us\n");
    for (size_t k = 0; k < r->n_ops; k++) {
        const mrt_op_time *o = &r->ops[k];
        const trace_op *op = o->op >= 0 ? trace_find_op(t, (uint64_t)o->op) : NULL;
        fprintf(f, "%zu,%lld,", o->action, (long long)o->op);
        ms_csv_str(f, op && op->name[0] ? op->name : "-");
        fprintf(f, ",%d,%.3f,%.3f\n", o->recompute, o->req_us, o->meas_us);
    }
}

/* The op name without its layer ("L3.qkv" -> "qkv"). */
static const char *op_base(const char *n)
{
    if (n[0] == 'L') {
        const char *p = n + 1;
        while (*p >= '0' && *p <= '9') p++;
        if (p > n + 1 && *p == '.') return p + 1;
    }
    return n;
}

/* Per op name over the last iteration: count, modelled and measured time. */
static void print_real_ops(const trace_t *t, const mrt_sched_result *r, size_t from)
{
    enum { MAXN = 64 };
    char names[MAXN][TRACE_NAME_MAX + 8];
    double req[MAXN], meas[MAXN];
    int cnt[MAXN], n = 0;
    for (size_t k = from; k < r->n_ops; k++) {
        const trace_op *op = trace_find_op(t, (uint64_t)r->ops[k].op);
        char nm[TRACE_NAME_MAX + 8];
        snprintf(nm, sizeof nm, "%s%s", op ? op_base(op->name) : "-",
                 r->ops[k].recompute ? " (re)" : "");
        int j = 0;
        while (j < n && strcmp(names[j], nm)) j++;
        if (j == n) {
            if (n == MAXN) continue;
            snprintf(names[n], sizeof names[n], "%s", nm);
            req[n] = meas[n] = 0;
            cnt[n++] = 0;
        }
        req[j] += r->ops[k].req_us * 1e-3;
        meas[j] += r->ops[k].meas_us * 1e-3;
        cnt[j]++;
    }
    printf("%-20s %6s %13s %13s %9s\n", "op (last iteration)", "count", "modelled_ms",
           "measured_ms", "meas/mod");
    for (int j = 0; j < n; j++)
        printf("%-20s %6d %13.3f %13.3f %9.3f\n", names[j], cnt[j], req[j], meas[j],
               req[j] > 0 ? meas[j] / req[j] : 0);
}

/* Does every action of s run on the compute stream? (mrt_sched_run's case; schedules with
 * copies go through the executor with the real-kernel hook.) */
static int one_stream(const schedule_t *s)
{
    for (size_t i = 0; i < sched_count(s); i++)
        if (sched_get(s, i)->stream != SS_COMPUTE) return 0;
    return 1;
}

/* The one-stream walker's result as the executor's, for the results CSV: the last iteration
 * (from the last compute-stream `mark iter`) with its measured and nominal compute, the
 * allocator's statistics; nothing moved over the link. Per-iteration allocator retries are
 * not counted by the walker (0). */
static void sched_real_result(const schedule_t *s, const mrt_sched_result *r, rt_status rs,
                              const ms_error *err, rt_exec_result *er)
{
    memset(er, 0, sizeof *er);
    er->astats = r->astats;
    if (rs != RT_OK) {
        er->outcome = RTX_ERROR;
        snprintf(er->failure, sizeof er->failure, "%s", err->msg);
        return;
    }
    er->outcome = RTX_OK;
    size_t last_mark = 0;
    for (size_t i = 0; i < sched_count(s); i++) {
        const sched_action *x = sched_get(s, i);
        if (x->kind == SA_MARK && x->mark == TM_ITER && x->stream == SS_COMPUTE) last_mark = i;
    }
    if (r->n_iter > 0) {
        er->iter_time_s = r->iter_ms[r->n_iter - 1] * 1e-3;
        er->nominal_s = r->nominal_ms[r->n_iter - 1] * 1e-3;
    }
    for (size_t k = 0; k < r->n_ops; k++) {
        if (r->ops[k].action < last_mark) continue;
        er->compute_busy_s += r->ops[k].meas_us * 1e-6;
        if (r->ops[k].recompute) er->recompute_s += r->ops[k].req_us * 1e-6;
    }
    er->kernels = r->n_ops;
}

/* --math real on a schedule: every compute action runs its op's real kernels. */
static int run_sched_real(const run_args *a, const rt_gpu_info *g, const machine_t *m,
                          const plan_t *plan, const trace_t *t, const schedule_t *s)
{
    ms_error err;
    ms_error_clear(&err);
    rt_backend_opts bo;
    rt_backend_opts_default(&bo);
    bo.device = a->device;
    bo.capacity_bytes = a->capacity_bytes == UINT64_MAX ? machine_usable_bytes(m)
                                                         : a->capacity_bytes;
    rt_backend *be = NULL;
    if (rt_backend_new(&bo, &be, &err) != RT_OK) {
        fprintf(stderr, "memsim run: %s\n", err.msg);
        return MS_EXIT_FAIL;
    }
    mrt_config mc;
    mrt_config_default(&mc);
    if (a->lr > 0) mc.adam.lr = (float)a->lr;
    alloc_config cfg;
    uint64_t *ids = NULL, *offs = NULL;   /* the static arena's offsets, as the executor gets */
    if (plan_alloc_config(plan, &cfg, &ids, &offs) != MS_OK) {
        rt_backend_free(be);
        return fail_st(MS_ERR_NOMEM, NULL);
    }
    mrt_sched_result r;
    rt_status rs = mrt_sched_run(s, t, rt_backend_mb(be), plan->allocator, &cfg, 77, &mc.adam,
                                 &r, &err);
    int rc = MS_EXIT_OK;
    rt_exec_result er;   /* the results CSV's view of the run */
    sched_real_result(s, &r, rs, &err, &er);
    if (rs != RT_OK) {
        fprintf(stderr, "memsim run: %s\n", err.msg);
        rc = rs == RT_ERR_INVALID ? MS_EXIT_INPUT : MS_EXIT_FAIL;
    } else if (!a->quiet) {
        print_device(g, m);
        const char *model = trace_get_meta(t, "model");
        printf("workload: %s seq %llu batch %llu; policy %s, allocator %s; %zu actions; real "
               "kernels on one stream (fp32 gradients, norm statistics and attention lse "
               "saved)\n", model ? model : "-", (unsigned long long)trace_meta_u64(t, "seq", 0),
               (unsigned long long)trace_meta_u64(t, "batch", 0), plan->policy, plan->allocator,
               sched_count(s));
        printf("%-7s %12s %12s %9s %10s\n", "window", "measured_ms", "modelled_ms", "meas/mod",
               "loss");
        printf("%-7s %12.3f\n", "setup", r.setup_ms);
        for (int i = 0; i < r.n_iter; i++)
            printf("iter %-2d %12.3f %12.3f %9.3f %10.4f\n", i, r.iter_ms[i], r.nominal_ms[i],
                   r.nominal_ms[i] > 0 ? r.iter_ms[i] / r.nominal_ms[i] : 0, r.loss[i]);
        printf("  (modelled_ms: the schedule's dur_us, traces/roofline.h on profile %s; loss: "
               "the mean over the iteration's tokens of the seeded Markov stream)\n", m->name);
        size_t from = 0;   /* the last iteration's first compute action */
        if (r.n_iter > 1)
            for (size_t k = 0; k < r.n_ops; k++)
                if (sched_get(s, r.ops[k].action)->phase == TP_FWD && k > 0 &&
                    sched_get(s, r.ops[k - 1].action)->phase == TP_OPT)
                    from = k;
        print_real_ops(t, &r, from);
        double it = r.n_iter ? r.iter_ms[r.n_iter - 1] * 1e-3 : 0, flops = trace_model_flops(t);
        printf("memory: peak allocated %.3f GiB, reserved %.3f GiB\n",
               gib(r.astats.allocated_peak_bytes), gib(r.astats.reserved_peak_bytes));
        printf("result: ok, iteration %.6f s, MFU %.2f%%\n", it,
               it > 0 && m->gpu_peak_bf16_flops > 0 ? 100 * flops / it / m->gpu_peak_bf16_flops
                                                    : 0.0);
    }
    if (a->csv) {
        /* the spin path's columns; the walker times every op and does not bound the host */
        run_args ra = *a;
        ra.per_op = 1;
        ra.max_ahead = 0;
        ra.alloc_sync = 0;
        double mfu = 0, tgs = 0;
        if (er.outcome == RTX_OK) rates(t, m, er.iter_time_s, &mfu, &tgs);
        csv_ctx c = {&ra, g, m, plan, t, &er, mfu, tgs, trace_model_flops(t), "gpu-one-stream"};
        int w = write_out(a->csv, fill_csv, &c);
        if (w && !rc) rc = w;
    }
    if (rs == RT_OK && a->ops_csv) {
        const void *c[2] = {t, &r};
        int w = write_out(a->ops_csv, fill_real_ops, c);
        if (w && !rc) rc = w;
    }
    if (rs == RT_OK && a->record) {
        rt_op_time *ot = calloc(r.n_ops ? r.n_ops : 1, sizeof *ot);
        int w = MS_EXIT_FAIL;
        if (ot) {
            for (size_t k = 0; k < r.n_ops; k++)
                ot[k] = (rt_op_time){r.ops[k].action, r.ops[k].op, r.ops[k].req_us,
                                     r.ops[k].meas_us, r.ops[k].recompute};
            w = write_record(a, g, t, ot, r.n_ops);
            free(ot);
        } else {
            w = fail_st(MS_ERR_NOMEM, NULL);
        }
        if (w && !rc) rc = w;
    }
    mrt_sched_result_release(&r);
    free(ids);
    free(offs);
    rt_backend_free(be);
    return rc;
}

static int run_train(const run_args *a, const rt_gpu_info *g, const machine_t *m)
{
    model_t md;
    int rc = real_model(a, &md);
    if (rc) return rc;
    int recompute = a->policy && !strcmp(a->policy, "full-recompute");
    if (a->policy && !recompute && strcmp(a->policy, "keep-all")) {
        fprintf(stderr, "memsim run: --train runs keep-all or full-recompute\n");
        return MS_EXIT_USAGE;
    }
    mrt_config c;
    mrt_config_default(&c);
    c.layers = (int)md.layers;
    c.hidden = (int)md.hidden;
    c.heads = (int)md.heads;
    c.ffn = (int)md.ffn_hidden;
    c.vocab = (int)md.vocab;
    c.seq = (int)(a->seq ? a->seq : md.default_seq);
    c.batch = (int)(a->batch ? a->batch : 1);
    if (a->lr > 0) c.adam.lr = (float)a->lr;
    mrt_model *mm = NULL;
    ms_error err;
    ms_error_clear(&err);
    if (mrt_new(&c, NULL, &mm, &err) != RT_OK ||
        (a->gemm_algos && mrt_load_gemm_algos(mm, a->gemm_algos, &err) != RT_OK)) {
        fprintf(stderr, "memsim run: %s\n", err.msg);
        mrt_free(mm);
        return MS_EXIT_FAIL;
    }
    size_t T = mrt_tokens(mm);
    int32_t *tok = malloc(T * sizeof *tok), *lab = malloc(T * sizeof *lab);
    if (!tok || !lab) {
        free(tok);
        free(lab);
        mrt_free(mm);
        return fail_st(MS_ERR_NOMEM, NULL);
    }
    print_device(g, m);
    printf("training %s with real kernels, %s: %d layers, hidden %d, heads %d, ffn %d, vocab "
           "%d, seq %d x batch %d; %zu parameters; AdamW lr %g; seeded Markov token stream "
           "(4 successors per token: loss floor about ln 4 = 1.386)\n", md.name,
           recompute ? "full-recompute" : "keep-all", c.layers, c.hidden, c.heads, c.ffn,
           c.vocab, c.seq, c.batch, mrt_param_count(mm), (double)c.adam.lr);
    printf("%6s %10s %10s\n", "step", "loss", "step_ms");
    for (int s = 0; s < a->train_steps && rc == 0; s++) {
        mrt_stream(77, (uint64_t)s, c.vocab, c.seq, c.batch, tok, lab);
        float loss = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (mrt_set_batch(mm, tok, lab, &err) != RT_OK || mrt_step(mm, recompute, 1, &loss,
                                                                   &err) != RT_OK) {
            fprintf(stderr, "memsim run: %s\n", err.msg);
            rc = MS_EXIT_FAIL;
            break;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("%6d %10.4f %10.3f\n", s, loss,
               (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6);
    }
    printf("device memory: %.3f GiB (weights, fp32 master, moments, gradients, activations)\n",
           gib(mrt_device_bytes(mm)));
    free(tok);
    free(lab);
    mrt_free(mm);
    return rc;
}

/* ---- several GPUs: the launch ---- */

/* GPUs the run's layout holds: the options' tp x cp x dp, or the trace's (meta lines). */
static int world_of(const run_args *a, int *world)
{
    uint64_t tp = a->tp ? (uint64_t)a->tp : 1, cp = a->cp ? (uint64_t)a->cp : 1;
    uint64_t dp = a->dp ? (uint64_t)a->dp : 1;
    if (a->trace_path) {
        trace_t *t = NULL;
        ms_error err;
        ms_status st = trace_load(a->trace_path, &t, &err);
        if (st != MS_OK) return fail_st(st, &err);
        tp = trace_meta_u64(t, "tp", 1);
        cp = trace_meta_u64(t, "cp", 1);
        dp = trace_meta_u64(t, "dp", 1);
        trace_free(t);
    }
    uint64_t w = (tp ? tp : 1) * (cp ? cp : 1) * (dp ? dp : 1);
    *world = w > (1u << 20) ? 1 << 20 : (int)w;
    return 0;
}

/* A rank's options: its local rank's GPU; only rank 0 prints and writes files (the others'
 * results reach it through the exchange files). */
static int rank_setup(run_args *a)
{
    if (a->math_real) {
        fprintf(stderr, "memsim run: --math real runs on one GPU: the real math across ranks "
                "(TP-split GEMMs, ring attention, DP gradients) is not implemented; use --math "
                "spin, or --collectives spin\n");
        return MS_EXIT_USAGE;
    }
    if (a->device_set) {
        fprintf(stderr, "memsim run: --device: each rank uses the GPU of its local rank (%d)\n",
                a->proc.local_rank);
        return MS_EXIT_USAGE;
    }
    a->device = a->proc.local_rank;
    if (a->proc.rank != 0) {
        a->quiet = 1;
        a->ops_csv = a->record = a->schedule_path = NULL;
    }
    rt_nccl_safe_env(NULL, 0);
    return 0;
}

/* Who this process is when the layout holds several GPUs: the launcher (*launched: its
 * status) or a rank, set up. */
static int node_role(run_args *a, int argc, char **argv, int *launched)
{
    int world = 1, rc = world_of(a, &world);
    *launched = 0;
    if (rc || world <= 1 || a->coll_spin) return rc;
    ms_error err;
    if (rt_launch_whoami(world, &a->proc, &err) != MS_OK) {
        fprintf(stderr, "memsim run: %s\n", err.msg);
        return MS_EXIT_USAGE;
    }
    if (a->proc.role == RL_LAUNCHER) {
        *launched = 1;
        return rt_node_launch(world, argc, argv);
    }
    rc = rank_setup(a);
    if (rc) rt_node_fail(&a->proc, "bad options (see its standard error)");
    return rc;
}

int rt_run_main(int argc, char **argv)
{
    run_args a;
    int rc = parse(argc, argv, &a);
    if (rc == -1) {
        usage(stdout);
        return MS_EXIT_OK;
    }
    if (rc) return rc;
    int launched = 0;
    rc = node_role(&a, argc, argv, &launched);
    if (rc || launched) return rc;
    rt_gpu_info g;
    ms_error err;
    ms_error_clear(&err);
    if (rt_gpu_check(a.device, &g, &err) != RT_OK) {
        fprintf(stderr, "memsim run: %s\n", err.msg);
        rt_node_fail(&a.proc, err.msg);
        return MS_EXIT_FAIL;
    }
    machine_profile *mp = NULL;
    trace_t *t = NULL;
    plan_t *plan = NULL;
    schedule_t *s = NULL;
    ms_status st = machine_load_named(a.machine, &mp, &err);
    if (st == MS_OK && a.math_real && (a.bench_layer || a.train_steps)) {
        rc = a.bench_layer ? run_bench(&a, &g, &mp->m) : run_train(&a, &g, &mp->m);
        machine_profile_free(mp);
        return rc;
    }
    if (st == MS_OK) st = make_trace(&a, &mp->m, &t, &err);
    if (st == MS_OK) st = make_plan(&a, t, &mp->m, &plan, &err);
    if (st == MS_OK) st = lower_schedule(t, plan, &mp->m, NULL, &s, &err);
    rt_node *node = NULL;
    if (st != MS_OK) {
        rc = fail_st(st, &err);
    } else if (a.schedule_path && (rc = write_out(a.schedule_path, fill_sched, s)) != 0) {
        /* reported */
    } else if (a.proc.role == RL_RANK && rt_node_begin(&a.proc, t, &mp->m, &node, &err) != RT_OK) {
        fprintf(stderr, "memsim run: rank %d: %s\n", a.proc.rank, err.msg);
        note_error(err.msg);
        rc = MS_EXIT_FAIL;
    } else if (a.math_real && one_stream(s)) {
        rc = run_sched_real(&a, &g, &mp->m, plan, t, s);
    } else {
        rc = execute(&a, &g, &mp->m, plan, t, s, node);
    }
    if (rc && a.proc.role == RL_RANK) {
        char msg[1100];
        snprintf(msg, sizeof msg, "exited with status %d: %s", rc,
                 first_error[0] ? first_error : "see its standard error");
        rt_node_fail(&a.proc, msg);
    }
    rt_node_end(node, rc == 0);
    sched_free(s);
    plan_free(plan);
    trace_free(t);
    machine_profile_free(mp);
    return rc;
}
