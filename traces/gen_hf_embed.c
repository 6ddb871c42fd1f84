/* gen_hf_embed.c — the hf profile's embedding backward: embedding_dense_backward as
 * PyTorch 2.11 runs it on CUDA (aten/src/ATen/native/cuda/Embedding.cu and
 * EmbeddingBackwardKernel.cu), with every buffer it takes, for the LLaMA program
 * (gen_hf.c), GPT-2 (gen_hf_gpt2.c), GPT-NeoX and OPT (gen_hf_ln.c) and BERT
 * (gen_hf_bert.c); read off the recorded H200 traces (docs/GENERATOR.md §11). */
#include "traces/gen_hf_int.h"

#include <stdio.h>

/* The bytes of cub's radix sort temporaries for n int64 key/value pairs over all 64 bits
 * (PyTorch sorts the indices without a bit limit): onesweep's bins (8 passes x 256 digits x
 * 8 B), its lookback (256 x 4 B per tile of 4608 items), the keys' and values' alternate
 * buffers, the pass counters, each 256-aligned, plus 255 for the alignment; the recorded
 * traces show 83455 B at 4096 items and 150015 B at 8192. */
static uint64_t hf_sort_temp(uint64_t n)
{
#define A256(v) (((v) + 255) / 256 * 256)
    uint64_t tiles = (n + 4607) / 4608;
    return A256(8 * 256 * 8) + A256(tiles * 256 * 4) + 2 * A256(n * TOKEN_BYTES) +
           A256(8 * 4) + 255;
#undef A256
}

/* cub's single-pass scan and select temporaries (unique_by_key, exclusive_sum): the
 * recorded traces show 1279 B for 2 to 8192 items. */
#define HF_CUB_SCAN_TEMP 1279

static uint64_t hf_idx_ew(hf_x *x, const char *op, uint64_t bytes, trace_class cls,
                          uint64_t a, uint64_t in_bytes)
{
    return hf_ew(x, -1, op, op, bytes, cls, a, 0, in_bytes, TK_ELEM);
}

/* embedding_dense_backward_cuda (aten/src/ATen/native/cuda/Embedding.cu and
 * EmbeddingBackwardKernel.cu) of a [rows, h] table from the output gradient grad over n
 * indices idx (copied first when idx_copy: an expanded index made contiguous): up to 3072
 * indices one kernel into a zero-filled gradient; beyond, the indices sorted with their
 * positions, the gradient, its segments (unique_by_key), partial segments of 10 rows, then
 * either per-partial-segment fp32 sums scattered (grad_weight_per_segment) or, when the
 * scatter would leave the GPU idle (fewer than 4 blocks per SM), atomic adds through a
 * partial-to-segment map (and an fp32 accumulator below fp32). Returns the gradient (in the
 * table's dtype); everything else is freed, in reverse order of creation. */
uint64_t hf_embed_dense_bwd(hf_x *x, const char *nm, uint64_t grad, uint64_t idx, uint64_t n,
                            int idx_copy, uint64_t rows)
{
    uint64_t h = x->h, eb = x->PB, oid, ib = n * TOKEN_BYTES;
    char op[TRACE_NAME_MAX];
    uint64_t ic = idx_copy ? hf_idx_ew(x, "embed_bwd.indices", ib, TC_ACT_TRANS, idx, ib) : 0;
    MS_JOIN(op, sizeof op, nm, ".bwd");
    if (n <= 3072) {
        uint64_t gw = hf_alloc_op(x, -1, "embed_grad", rows * h * eb, TC_GRAD, 0, &oid);
        hf_op o = { .kind = TK_EMBED, .layer = -1, .what = op, .br = n * (h * eb + 8),
                    .bw = (rows + n) * h * eb, .in = { grad, ic ? ic : idx }, .nin = 2,
                    .out = { gw }, .nout = 1 };
        hf_mem_op(x, oid, o);
        hf_free(x, &ic);
        return gw;
    }
    uint64_t srt = hf_alloc_op(x, -1, "embed_bwd.sorted", ib, TC_WORKSPACE, 0, &oid);
    uint64_t org = hf_alloc_tok(x, -1, "embed_bwd.orig", ib, TC_WORKSPACE, (int64_t)oid, 0);
    uint64_t rng = hf_alloc_tok(x, -1, "embed_bwd.range", ib, TC_WORKSPACE, (int64_t)oid, 0);
    uint64_t tmp = hf_alloc_tok(x, -1, "embed_bwd.sort_temp", hf_sort_temp(n), TC_WORKSPACE,
                                (int64_t)oid, 0);
    hf_op so = { .kind = TK_ELEM, .layer = -1, .what = "embed_bwd.sort", .br = 16 * ib,
                 .bw = 16 * ib, .in = { ic ? ic : idx }, .nin = 1,
                 .out = { srt, org, rng, tmp }, .nout = 4 };
    hf_mem_op(x, oid, so);
    hf_free(x, &tmp);
    hf_free(x, &rng);
    uint64_t gw = hf_alloc_op(x, -1, "embed_grad", rows * h * eb, TC_GRAD, 0, &oid);
    hf_op z = { .kind = TK_ELEM, .layer = -1, .what = "embed_bwd.zero", .bw = rows * h * eb,
                .out = { gw }, .nout = 1 };
    hf_mem_op(x, oid, z);
    uint64_t so_ = hf_alloc_op(x, -1, "embed_bwd.segment_offsets", ib, TC_WORKSPACE, 0, &oid);
    uint64_t ns = hf_alloc_tok(x, -1, "embed_bwd.num_segments", 8, TC_WORKSPACE, (int64_t)oid, 0);
    uint64_t uk = hf_alloc_tok(x, -1, "embed_bwd.unique_keys", ib, TC_WORKSPACE, (int64_t)oid, 0);
    uint64_t ut = hf_alloc_tok(x, -1, "embed_bwd.unique_temp", HF_CUB_SCAN_TEMP, TC_WORKSPACE,
                               (int64_t)oid, 0);
    hf_op un = { .kind = TK_ELEM, .layer = -1, .what = "embed_bwd.unique", .br = 2 * ib,
                 .bw = 2 * ib, .in = { srt }, .nin = 1, .out = { so_, ns, uk, ut }, .nout = 4 };
    hf_mem_op(x, oid, un);
    hf_free(x, &ut);
    hf_free(x, &uk);
    uint64_t S = n < rows ? n : rows, sb = S * TOKEN_BYTES;
    uint64_t pp = hf_alloc_op(x, -1, "embed_bwd.partials", sb, TC_WORKSPACE, 0, &oid);
    uint64_t ppo = hf_alloc_tok(x, -1, "embed_bwd.partials_offset", sb, TC_WORKSPACE,
                                (int64_t)oid, 0);
    uint64_t st = hf_alloc_tok(x, -1, "embed_bwd.scan_temp", HF_CUB_SCAN_TEMP, TC_WORKSPACE,
                               (int64_t)oid, 0);
    hf_op sc = { .kind = TK_ELEM, .layer = -1, .what = "embed_bwd.scan", .br = 2 * sb,
                 .bw = 2 * sb, .in = { so_ }, .nin = 1, .out = { pp, ppo, st }, .nout = 3 };
    hf_mem_op(x, oid, sc);
    hf_free(x, &st);
    uint64_t MP = n / 10 + S, sw = (h + 31) / 32 * 32, blk = sw < 1024 ? sw : 1024;
    uint64_t grid = (S * sw + blk - 1) / blk;
    int fused = grid < HF_SMS * 4 && MP > grid * 4;
    uint64_t np = hf_alloc_op(x, -1, "embed_bwd.num_partials", 8, TC_WORKSPACE, 0, &oid);
    uint64_t pso = hf_alloc_tok(x, -1, "embed_bwd.partial_offsets", MP * TOKEN_BYTES,
                                TC_WORKSPACE, (int64_t)oid, 0);
    uint64_t p2s = fused ? hf_alloc_tok(x, -1, "embed_bwd.partial_to_segment",
                                        MP * TOKEN_BYTES, TC_WORKSPACE, (int64_t)oid, 0) : 0;
    uint64_t acc = fused ? (eb != F32 ? rows * h * F32 : 0) : MP * h * F32;
    uint64_t ab = acc ? hf_alloc_tok(x, -1, fused ? "embed_bwd.acc" : "embed_bwd.per_segment",
                                     acc, TC_WORKSPACE, (int64_t)oid, 0) : 0;
    hf_op k = { .kind = TK_EMBED, .layer = -1, .what = op, .br = n * (h * eb + 8) + acc,
                .bw = rows * h * eb + acc, .in = { grad, org, pso }, .nin = 3,
                .out = { gw, np, pso, p2s, ab }, .nout = 5 };
    hf_mem_op(x, oid, k);
    hf_free(x, &ab);
    hf_free(x, &p2s);
    hf_free(x, &pso);
    hf_free(x, &np);
    hf_free(x, &ppo);
    hf_free(x, &pp);
    hf_free(x, &ns);
    hf_free(x, &so_);
    hf_free(x, &org);
    hf_free(x, &srt);
    hf_free(x, &ic);
    return gw;
}
