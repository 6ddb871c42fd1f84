/* gen_hf_int.h — internal to the hf profile: the emission context and the helpers that
 * traces/gen_hf.c (the LLaMA family, the driver) shares with traces/gen_hf_gpt2.c (GPT-2).
 * Not an interface of the generator: gen_hf.h is what gen.c calls. */
#ifndef MEMSIM_GEN_HF_INT_H
#define MEMSIM_GEN_HF_INT_H

#include "traces/gen_hf.h"
#include "traces/models.h"

#define F32 4
#define BF16 2
#define TOKEN_BYTES 8          /* int64 ids and labels */
/* cuBLAS's workspace on Hopper (CUBLAS_WORKSPACE_CONFIG default :4096:8 = 32 MiB), taken
 * from the caching allocator once per handle: the forward's thread and autograd's device
 * thread have one each (aten/src/ATen/cuda/CublasHandlePool.cpp). */
#define CUBLAS_WS (32ull << 20)
#define EW_FLOPS 1.0           /* nominal FLOPs per element of an element-wise kernel */
/* Multiprocessors of the Hopper GPUs the hf profile's traces were recorded on (H100/H200
 * SXM), for kernels whose launch shape, and so their buffers, follow it. */
#define HF_SMS 132
#define SDPA_WS_EXTRA 256      /* the cuDNN backward's workspace beyond its fp32 dQ
                                  accumulator and softmax statistics (seen in the trace) */

typedef struct hf_param {
    uint64_t id, n;            /* tensor id; elements (0: slot unused) */
    uint64_t grad;             /* .grad, 0 when None */
    uint64_t m1, m2;           /* AdamW exp_avg, exp_avg_sq (made by the first step) */
    uint64_t cast;             /* amp: this forward's bf16 copy (autocast's cast cache) */
    uint64_t w1;               /* Gemma's RMSNorm: this forward's 1 + weight.float() */
    int layer;
} hf_param;

/* Parameter slots of a decoder layer, in the order the module registers them
 * (LlamaDecoderLayer: self_attn q, k, v, o with optional biases, Qwen3's q_norm and k_norm,
 * mlp gate, up, down, input_layernorm, post_attention_layernorm). */
enum { P_Q, P_QB, P_K, P_KB, P_V, P_VB, P_O, P_QN, P_KN, P_GATE, P_UP, P_DOWN, P_LN1, P_LN2,
       /* MoE layers (gen_hf_moe.c): router, the experts' fused 3-D gate_up and down,
        * Qwen2-MoE's shared_expert_gate; gate/up/down hold the shared expert */
       P_ROUTER, P_EGU, P_EDN, P_SHG, P_SLOTS };

typedef struct hf_ls hf_ls;    /* a LLaMA-family layer's saved tensors (gen_hf.c) */
struct hf_ls {
    uint64_t in;               /* the layer input (amp: saved by the norm; bf16: the residual) */
    uint64_t n1x, n1rs, n1nrm; /* norm 1: fp32 input copy (bf16), rsqrt, normalized */
    uint64_t n1out;            /* norm 1 output (bf16: saved by q, k, v) */
    uint64_t xq, xk, xv;       /* amp: each projection's bf16 cast of its input */
    uint64_t q, k, v, ao, lse; /* what SDPA saves: its q, k, v, output, log-sum-exp, */
    uint64_t seed, offs;       /* its RNG seed and offset */
    /* Qwen3's q_norm / k_norm: fp32 input copy, rsqrt, normalized (as n1x, n1rs, n1nrm);
     * qin/kin: the projection's output when it is the saved input itself (fp32) */
    uint64_t qnx, qnrs, qnnrm, knx, knrs, knnrm, qin, kin;
    uint64_t r1;               /* the residual after attention */
    uint64_t n2x, n2rs, n2nrm, n2out;
    uint64_t xg, xu;           /* amp: casts of the MLP input */
    uint64_t gate, act, up, prod;
    uint64_t qr, kr;           /* amp: the rotary's fp32 q and k, the attention's locals */
    uint64_t aoc;              /* Phi-3: SDPA's output made contiguous (o_proj's input) */
};
typedef struct hf_g2 hf_g2;    /* GPT-2's forward state (gen_hf_gpt2.c) */

typedef struct hf_x {
    const gen_config *c;
    const machine_t *m;
    trace_t *t;
    ms_status st;
    uint64_t next_tid, next_oid;
    trace_phase phase;
    /* sizes */
    uint64_t b, s, T, h, hd, heads, hq, kv, f, V;
    int L, amp, tied;
    int insaved;               /* the residual stream is fp32: the norms save their input */
    uint64_t PB, CB, RB;       /* bytes of a parameter, of a linear's compute dtype, of the
                                  residual stream */
    hf_param *p;               /* LLaMA family: [0] embedding, then P_SLOTS per layer, final
                                  norm, head; GPT-2: gen_hf_gpt2.c's layout; the untied head
                                  last */
    size_t np;
    hf_ls *ls;
    uint64_t tokens, cos, sin, ws_fwd, ws_bwd;
    uint64_t head_x, head_nrm, head_rs, head_in, head_xf, head_out, logsm, labels;
    uint64_t loss, tw, ones;   /* the loss, nll_loss's total weight, the loss's gradient */
    uint64_t cpos;             /* the LLaMA program's cache_position (the model's forward) */
    int iter;
    struct hf_moe_ls *mls;     /* per layer: what an MoE layer saved (gen_hf_moe.c) */
    int gpt2;                  /* model family gpt2: gen_hf_gpt2.c's program */
    hf_g2 *g2;
    uint64_t ws_lt;            /* cuBLASLt's workspace (the first addmm with a bias) */
    int lnfam;                 /* HF_LN_NEOX, HF_LN_OPT: gen_hf_ln.c's programs; 0 none */
    struct hf_lnm *lnm;        /* their forward state */
    int phi3;                  /* model family phi3: fused qkv_proj and gate_up_proj (the
                                  P_Q and P_GATE slots), rotary tables per layer */
    uint64_t rd;               /* rotary dimensions per head (Phi-3's partial factor) */
    int bert;                  /* model family bert: gen_hf_bert.c's program */
    struct hf_bert *brt;       /* its forward state */
    int nnlin;                 /* its biased linears are nn.Linear, not Conv1D (hf_blinear) */
    int gemma;                 /* model family gemma: GemmaRMSNorm (x * (1 + w) in fp32) and
                                  the embedding scaled by sqrt(hidden) */
    uint64_t embraw;           /* Gemma: embed_tokens' output, a local of the model's forward */
    int q3moe;                 /* model family qwen3_moe: the experts registered before the
                                  router (hf_slot_pos) */
} hf_x;

/* What differs between the families' training steps: the forward's pieces and the whole
 * backward; the iteration around them (marks, phases, the optimizer) is gen_hf.c's. */
typedef struct hf_family {
    uint64_t (*embed_fwd)(hf_x *x);
    uint64_t (*layer_fwd)(hf_x *x, int l, uint64_t h);
    void (*head_fwd)(hf_x *x, uint64_t h);
    void (*backward)(hf_x *x);
} hf_family;
extern const hf_family hf_family_gpt2;   /* gen_hf_gpt2.c */
extern const hf_family hf_family_ln;     /* gen_hf_ln.c: GPT-NeoX and OPT */
extern const hf_family hf_family_bert;   /* gen_hf_bert.c: BertForMaskedLM */

typedef struct hf_op {
    trace_opkind kind;
    int layer;
    const char *what;
    double flops;
    uint64_t br, bw;
    double dur;
    uint64_t in[8], out[8];
    uint32_t nin, nout;
    uint64_t nv_elems;  /* > 0: an element-wise kernel PyTorch runs on its non-vectorized
                           path, over this many elements (hf_ew_nv) */
} hf_op;

/* Emission (gen_hf.c). */
void hf_mark(hf_x *x, trace_markkind k, int64_t v);
uint64_t hf_alloc_tok(hf_x *x, int layer, const char *what, uint64_t bytes, trace_class cls,
                      int64_t producer, int tok);
uint64_t hf_alloc(hf_x *x, int layer, const char *what, uint64_t bytes, trace_class cls,
                  int64_t producer);
void hf_free(hf_x *x, uint64_t *id);
void hf_emit(hf_x *x, uint64_t oid, const hf_op *o);
void hf_mem_op(hf_x *x, uint64_t oid, hf_op o);
uint64_t hf_ew(hf_x *x, int l, const char *op, const char *outn, uint64_t out_bytes,
               trace_class cls, uint64_t a, uint64_t b, uint64_t in_bytes, trace_opkind kind);
void hf_ew_inplace(hf_x *x, int l, const char *op, uint64_t acc, uint64_t a, uint64_t bytes);
/* A slice's backward: a zero-filled output of full_bytes (named op), src's part copied in. */
uint64_t hf_slice_bwd(hf_x *x, int l, const char *op, uint64_t src, uint64_t full_bytes,
                      uint64_t part_bytes, uint64_t part_elems);
/* A zero-time op reading the tensors Python locals keep until here (0 ids skipped). */
void hf_locals(hf_x *x, int l, const char *what, const uint64_t *ids, uint32_t n);
/* hf_ew for a kernel on PyTorch's non-vectorized element-wise path (TensorIterator with a
 * broadcast or non-contiguous operand, a widening cast such as bf16 -> fp32, or mixed input
 * dtypes), over `elems` output elements: its time is also bounded by the profile's
 * gpu.ew_nv_elems_per_s. */
uint64_t hf_ew_nv(hf_x *x, int l, const char *op, const char *outn, uint64_t out_bytes,
                  trace_class cls, uint64_t a, uint64_t b, uint64_t in_bytes, trace_opkind kind,
                  uint64_t elems);
double hf_gemm_us(hf_x *x, uint64_t M, uint64_t N, uint64_t K, int eb, uint64_t bytes);
uint64_t hf_gemm(hf_x *x, int l, const char *op, const char *outn, trace_class cls,
                 uint64_t in, uint64_t w, uint64_t M, uint64_t N, uint64_t K);
/* Rotary embedding of q or k, width w, input ib bytes an element, the result of class ocls;
 * its backward (the gradient in the input's dtype) (gen_hf.c). */
uint64_t hf_rope_w(hf_x *x, int l, const char *nm, uint64_t in, uint64_t w, uint64_t ib,
                   trace_class ocls);
enum { HF_ROPE_KEEP = 1, HF_ROPE_LAST = 2 }; /* hf_rope_bwd_w's flags */
uint64_t hf_rope_bwd_w(hf_x *x, int l, const char *nm, uint64_t *de, uint64_t w, uint64_t ib,
                       int flags);
uint64_t hf_view_copy(hf_x *x, int l, const char *nm, uint64_t *g, uint64_t w);
/* The rotary's cos and sin [s, width] in x->cos, x->sin (and cuBLAS's workspace in
 * iteration 0) (gen_hf.c). */
void hf_rope_tables(hf_x *x, uint64_t width);
/* Autocast's casts, gradients (gen_hf.c). */
uint64_t hf_wcast(hf_x *x, int l, hf_param *p, const char *what);
uint64_t hf_xcast(hf_x *x, int l, const char *what, uint64_t in, uint64_t n);
void hf_accum_grad(hf_x *x, hf_param *p, uint64_t g);
void hf_wgrad(hf_x *x, int l, hf_param *p, uint64_t *dw16);
uint64_t hf_up32(hf_x *x, int l, const char *op, uint64_t *g, uint64_t n);
uint64_t hf_down16(hf_x *x, int l, const char *op, uint64_t G);
/* The LM head and ForCausalLMLoss from the final norm's output x->head_out, and their
 * backward (returns the final norm's output gradient); the optimizer step (gen_hf.c). */
void hf_lmhead_fwd(hf_x *x);
uint64_t hf_loss_bwd(hf_x *x, uint64_t *labels);
/* nll_loss's forward (the loss scalars) and its backward's start (gen_hf.c). */
void hf_nll_fwd(hf_x *x, uint64_t lp, uint64_t labels, uint64_t lb);
uint64_t hf_nll_bwd(hf_x *x, uint64_t *saved, uint64_t lb, uint64_t eb);
uint64_t hf_head_bwd(hf_x *x);
void hf_optimizer(hf_x *x);

/* The LLaMA program's pieces the Phi-3 layers share (gen_hf.c): SDPA with amp's q/k casts
 * and its backward, the layer norm's backward (hf_linear and its backward, hf_lp are
 * below). */
void hf_sdpa_fwd(hf_x *x, int l, hf_ls *s, uint64_t qe, uint64_t ke);
void hf_sdpa_bwd(hf_x *x, int l, hf_ls *s, uint64_t *dao, uint64_t *dq, uint64_t *dk,
                 uint64_t *dv);
void hf_norm_bwd(hf_x *x, int l, const char *nm, uint64_t *g, hf_param *w, uint64_t *xf,
                 uint64_t *rs, uint64_t *nrm, uint64_t *in, uint64_t *G);
/* Phi-3 (gen_hf_phi3.c): its attention's and MLP's forward (the MLP's returns down_proj's
 * output) and backward (into the residual gradient *G). */
void hf_phi3_attn_fwd(hf_x *x, int l, hf_ls *s, uint64_t nout);
uint64_t hf_phi3_mlp_fwd(hf_x *x, int l, hf_ls *s);
void hf_phi3_mlp_bwd(hf_x *x, int l, hf_ls *s, uint64_t *G);
void hf_phi3_attn_bwd(hf_x *x, int l, hf_ls *s, uint64_t *G);

/* LlamaRMSNorm's backward from the fp32 gradient dn of x * rsqrt(...) to the input's, into
 * *G (gen_hf.c; shared with GemmaRMSNorm's). */
void hf_rms_bwd_x(hf_x *x, int l, const char *nm, uint64_t dn, uint64_t *xf, uint64_t *rs,
                  uint64_t *in, uint64_t *G, uint64_t rows, uint64_t width, uint64_t ib);
/* RMSNorm's statistics (to fp32, pow, mean, + eps, rsqrt) in its ops' order (gen_hf.c). */
uint64_t hf_rms_stats(hf_x *x, int l, const char *nm, uint64_t in, uint64_t rows,
                      uint64_t width, uint64_t ib, int keep_var, uint64_t *xf, uint64_t *rs,
                      uint64_t *var);
/* Gemma (gen_hf_gemma.c): GemmaRMSNorm over the residual stream (output of class ocls;
 * saved: *xf, *rs, *nrm and w->w1) and its backward into *G; the embedding's sqrt(hidden)
 * scaling (returns layer 0's input) and its backward (replaces *G). */
uint64_t hf_gemma_norm_fwd(hf_x *x, int l, const char *nm, uint64_t in, hf_param *w,
                           trace_class ocls, uint64_t *xf, uint64_t *rs, uint64_t *nrm);
void hf_gemma_norm_bwd(hf_x *x, int l, const char *nm, uint64_t *g, hf_param *w,
                       uint64_t *xf, uint64_t *rs, uint64_t *nrm, uint64_t *in, uint64_t *G);
uint64_t hf_gemma_embed_fwd(hf_x *x, uint64_t e);
void hf_gemma_embed_bwd(hf_x *x, uint64_t *G);

/* GPT-2 (gen_hf_gpt2.c): parameter layout and names, one iteration's forward and backward
 * (the driver then runs hf_optimizer), the forward state's lifetime. */
size_t hf_g2_nparams(const hf_x *x);
void hf_g2_plan_params(hf_x *x);
void hf_g2_pname(const hf_x *x, size_t i, char *nm);
ms_status hf_g2_begin(hf_x *x);
void hf_g2_end(hf_x *x);
/* MS_ERR_UNSUPPORTED naming what the GPT-2 program does not model; MS_OK otherwise. */
ms_status hf_g2_check(const gen_config *c, ms_error *err);

/* GPT-2's building blocks (gen_hf_gpt2.c), shared with gen_hf_ln.c: nn.LayerNorm's forward
 * (output of class ocls in the residual dtype, fp32 mean and rstd) and backward (into *G;
 * hf_ln_bwd_k with keep_in leaves the saved input live); a linear with a bias (addmm: amp's
 * weight, input (in32) and bias casts; *xs the saved input, *bc the bias cast) and its
 * backward (input, weight and bias gradients; returns the input gradient); nn.Dropout(pd)
 * (a 1-byte mask and a new output; the input itself when pd is 0) and its backward. */
uint64_t hf_ln_fwd(hf_x *x, int l, const char *nm, uint64_t in, hf_param *w, hf_param *b,
                   trace_class ocls, uint64_t *mu, uint64_t *rs);
void hf_ln_bwd(hf_x *x, int l, const char *nm, uint64_t *g, hf_param *w, hf_param *b,
               uint64_t *in, uint64_t *mu, uint64_t *rs, uint64_t *G);
void hf_ln_bwd_k(hf_x *x, int l, const char *nm, uint64_t *g, hf_param *w, hf_param *b,
                 uint64_t *in, uint64_t *mu, uint64_t *rs, uint64_t *G, int keep_in);
uint64_t hf_blinear(hf_x *x, int l, hf_param *pw, hf_param *pb, const char *nm, uint64_t in,
                    int in32, uint64_t M, uint64_t N, uint64_t K, trace_class cls, uint64_t *xs,
                    uint64_t *bc);
uint64_t hf_blinear_bwd(hf_x *x, int l, hf_param *pw, hf_param *pb, const char *nm,
                        uint64_t dy, int free_dy, uint64_t *xs, int free_x, uint64_t M,
                        uint64_t N, uint64_t K, int in32);
uint64_t hf_blinear_bwd_acc(hf_x *x, int l, hf_param *pw, hf_param *pb, const char *nm,
                            uint64_t dy, int free_dy, uint64_t *xs, int free_x, uint64_t M,
                            uint64_t N, uint64_t K, int in32, uint64_t *acc);
/* embedding_dense_backward of a [rows, h] table over n indices (gen_hf_embed.c): returns the
 * gradient, frees its temporaries. */
uint64_t hf_embed_dense_bwd(hf_x *x, const char *nm, uint64_t grad, uint64_t idx, uint64_t n,
                            int idx_copy, uint64_t rows);
/* A column reduction's global buffer bytes over M rows of N columns (0: none), its
 * semaphores' bytes in *sem (gen_hf_gpt2.c). */
uint64_t hf_red_bytes(uint64_t M, uint64_t N, uint64_t *sem);
uint64_t hf_drop(hf_x *x, int l, const char *nm, double pd, uint64_t in, uint64_t n,
                 uint64_t eb, trace_class ocls, const char *outn, uint64_t *mask);
uint64_t hf_drop_bwd(hf_x *x, int l, const char *nm, uint64_t g, uint64_t *mask, uint64_t n,
                     uint64_t eb);

/* GPT-NeoX and OPT (gen_hf_ln.c): as GPT-2's entry points. */
enum { HF_LN_NEOX = 1, HF_LN_OPT = 2 };
size_t hf_ln_nparams(const hf_x *x);
void hf_ln_plan_params(hf_x *x);
void hf_ln_pname(const hf_x *x, size_t i, char *nm);
ms_status hf_ln_begin(hf_x *x);
void hf_ln_end(hf_x *x);
ms_status hf_ln_check(const gen_config *c, ms_error *err);

/* BERT (gen_hf_bert.c): as GPT-2's entry points. */
size_t hf_bert_nparams(const hf_x *x);
void hf_bert_plan_params(hf_x *x);
void hf_bert_pname(const hf_x *x, size_t i, char *nm);
ms_status hf_bert_begin(hf_x *x);
void hf_bert_end(hf_x *x);
ms_status hf_bert_check(const gen_config *c, ms_error *err);

/* Shared by the LLaMA-family program (gen_hf.c), the MoE layer (gen_hf_moe.c) and Phi-3's
 * (gen_hf_phi3.c). */
void hf_acc(hf_x *x, int l, uint64_t *acc, uint64_t *g, uint64_t bytes);
uint64_t hf_linear(hf_x *x, int l, int j, const char *nm, uint64_t in, int in32,
                          uint64_t M, uint64_t N, uint64_t K, trace_class cls, uint64_t *xc);
uint64_t hf_linear_bwd(hf_x *x, int l, hf_param *p, const char *nm, uint64_t dy,
                              int free_dy, uint64_t *xs, uint64_t M, uint64_t N, uint64_t K,
                              int free_x);
uint64_t hf_linear_bwd_in(hf_x *x, int l, hf_param *p, const char *nm, uint64_t dy,
                          uint64_t *xs, uint64_t M, uint64_t N, uint64_t K, const char *upnm,
                          uint64_t *acc);
hf_param *hf_lp(hf_x *x, int l, int slot);

uint64_t hf_alloc_op(hf_x *x, int l, const char *what, uint64_t bytes, trace_class cls, int tok,
                     uint64_t *oid);
void hf_sdpa_fwd_op(hf_x *x, int l, int dropout, const uint64_t *in, int nin, uint64_t *ao,
                    uint64_t *lse, uint64_t *seed, uint64_t *offs);
void hf_sdpa_bwd_op(hf_x *x, int l, int dropout, const uint64_t *in, int nin, uint64_t *dq,
                    uint64_t *dk, uint64_t *dv);

/* The MoE layer program (gen_hf_moe.c): per-layer state, planning, forward, backward. */
struct hf_moe_ls *hf_moe_alloc(size_t layers);
void hf_moe_plan(hf_x *x, int l);
uint64_t hf_moe_fwd(hf_x *x, int l, hf_ls *s);
uint64_t hf_moe_bwd(hf_x *x, int l, hf_ls *s, uint64_t G);

#endif
