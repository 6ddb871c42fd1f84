#!/bin/sh
# check_model_configs.sh — every model_type the config.json reader supports (traces/hfconfig.c)
# through `memsim simulate --model-config FILE --framework hf --precision amp --seq 4096
# --batch 8 --machine h200-sxm --policy keep-all|full-recompute --csv r.csv`, with the small
# configs of tests/data/hf: the CSV has a row with status ok whose model FLOPs give the
# active parameter count, and `memsim trace gen` writes the total parameter count, both equal
# to the count computed here from the config's fields alone (the formulas of each family's
# transformers module, not memsim's code), and under hf the count of the model the profile
# trains (hf_params: BertForMaskedLM for bert, whose model FLOPs count BertModel's). A family the hf profile refuses must say why and
# exit 1, and then run under --framework generic. Needs python3 (skips, 77, without).
set -u
: "${MEMSIM:=sim/memsim}"
: "${srcdir:=.}"
command -v python3 >/dev/null 2>&1 || { echo "1..0 # SKIP no python3"; exit 77; }
dir="$srcdir/tests/data/hf"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
exec python3 - "$MEMSIM" "$dir" "$tmp" <<'PY'
import csv, json, os, subprocess, sys

memsim, cfgdir, tmp = sys.argv[1:4]
n = 0
failed = 0

def ok(cond, what):
    global n, failed
    n += 1
    if not cond:
        failed += 1
    print(("ok" if cond else "not ok") + " %d - %s" % (n, what))

def params(c):
    """(total, active) parameters from the config's fields, per transformers' modules."""
    t = c["model_type"]
    if t == "gpt2":
        L, h, V, P = c["n_layer"], c["n_embd"], c["vocab_size"], c["n_positions"]
        f = c.get("n_inner") or 4 * h
        layer = 2 * 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h)
        p = L * layer + V * h + P * h + 2 * h
        return p, p
    L, h, V = c["num_hidden_layers"], c["hidden_size"], c["vocab_size"]
    a = c["num_attention_heads"]
    if t == "opt":
        f, P = c["ffn_dim"], c["max_position_embeddings"] + 2
        layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
        p = L * layer + V * h + P * h + 2 * h          # tied head, final LayerNorm
        return p, p
    if t == "gpt_neox":
        f = c["intermediate_size"]
        layer = (h * 3 * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
        p = L * layer + V * h + 2 * h + (0 if c.get("tie_word_embeddings") else V * h)
        return p, p
    if t == "bert":
        f, P = c["intermediate_size"], c["max_position_embeddings"]
        layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
        body = L * layer + V * h + P * h + c.get("type_vocab_size", 2) * h + 2 * h
        p = body + h * h + h                            # BertModel: the pooler
        # BertForMaskedLM: no pooler; transform dense and LayerNorm, the decoder's bias (its
        # weight tied to the word embeddings unless untied)
        mlm = body + h * h + h + 2 * h + V + (0 if c.get("tie_word_embeddings", True) else V * h)
        return p, p, mlm
    # RMSNorm, SwiGLU decoders: llama, mistral, qwen2, qwen3, phi3 (fused qkv_proj and
    # gate_up_proj: the same counts), mixtral, qwen2_moe, qwen3_moe, gemma (GeGLU: the
    # same three projections)
    kv = c.get("num_key_value_heads", a)
    d = c.get("head_dim") or {"qwen3": 128, "gemma": 256}.get(t, h // a)
    q, k = a * d, kv * d
    attn = h * (q + 2 * k) + q * h
    if t in ("qwen2", "qwen2_moe"):
        attn += q + 2 * k                               # q, k, v biases
    if t in ("qwen3", "qwen3_moe"):
        attn += 2 * d                                   # q_norm, k_norm
    mlp = lambda w: 3 * h * w
    dense = attn + mlp(c["intermediate_size"]) + 2 * h
    total, active = L * dense, L * dense
    if t == "mixtral":
        E, top, w = c["num_local_experts"], c["num_experts_per_tok"], c["intermediate_size"]
        moe = attn + h * E + E * mlp(w) + 2 * h
        total, active = L * moe, L * (moe - (E - top) * mlp(w))
    if t == "qwen2_moe":
        E, top, w = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
        moe = attn + h * E + E * mlp(w) + mlp(c["shared_expert_intermediate_size"]) + h + 2 * h
        total, active = L * moe, L * (moe - (E - top) * mlp(w))
    if t == "qwen3_moe":
        # Qwen3MoeDecoderLayer: experts where i is not in mlp_only_layers and
        # (i + 1) % decoder_sparse_step == 0, else the dense MLP of intermediate_size; no
        # shared expert
        E, top, w = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
        step = c.get("decoder_sparse_step", 1)
        moe = attn + h * E + E * mlp(w) + 2 * h
        only = c.get("mlp_only_layers") or []
        sparse = sum(1 for i in range(L) if i not in only and (i + 1) % step == 0)
        total = (L - sparse) * dense + sparse * moe
        active = (L - sparse) * dense + sparse * (moe - (E - top) * mlp(w))
    tied = c.get("tie_word_embeddings", t == "gemma")    # GemmaConfig ties by default
    head = h + (0 if tied else V * h)
    return total + V * h + head, active + V * h + head

def run(args):
    return subprocess.run([memsim] + args, capture_output=True, text=True)

seq, batch = 4096, 8
files = sorted(x for x in os.listdir(cfgdir) if x.endswith(".json"))
types = set()
for name in files:
    path = os.path.join(cfgdir, name)
    c = json.load(open(path))
    types.add(c["model_type"])
    counts = params(c)
    total, active = counts[0], counts[1]
    hf_total = counts[2] if len(counts) > 2 else total
    layers = c.get("num_hidden_layers", c.get("n_layer"))
    hidden = c.get("hidden_size", c.get("n_embd"))
    tr = os.path.join(tmp, name + ".trace")
    fw = "hf"
    g = run(["trace", "gen", "--model-config", path, "--framework", "hf", "--precision", "amp",
             "--seq", str(seq), "--batch", str(batch), "--machine", "h200-sxm", "-o", tr])
    if g.returncode != 0:
        ok(g.returncode == 1 and "framework hf" in g.stderr and not os.path.exists(tr),
           "%s: framework hf refuses %s with a reason, exit 1 (%s)"
           % (name, c["model_type"], g.stderr.strip()))
        fw = "generic"
        g = run(["trace", "gen", "--model-config", path, "--seq", str(seq), "--batch",
                 str(batch), "--machine", "h200-sxm", "-o", tr])
    meta = {}
    if g.returncode == 0:
        for line in open(tr):
            if line.startswith("meta "):
                parts = line.split()
                meta[parts[1]] = parts[2] if len(parts) > 2 else ""
            elif line.startswith(("alloc ", "op ", "free ", "mark ")):
                break
    ok(g.returncode == 0 and int(meta.get("params", -1)) == total,
       "%s (%s, framework %s): the trace's parameter count %s is the config's %d"
       % (name, c["model_type"], fw, meta.get("params"), total))
    if fw == "hf":
        ok(int(meta.get("hf_params", -1)) == hf_total,
           "%s (%s): the hf program's parameters %s are the config's %d"
           % (name, c["model_type"], meta.get("hf_params"), hf_total))
    for policy in ("keep-all", "full-recompute"):
        out = os.path.join(tmp, "%s.%s.csv" % (name, policy))
        args = ["simulate", "--model-config", path, "--seq", str(seq), "--batch", str(batch),
                "--machine", "h200-sxm", "--policy", policy, "--csv", out, "--quiet"]
        if fw == "hf":
            args[3:3] = ["--framework", "hf", "--precision", "amp"]
        r = run(args)
        rows = list(csv.DictReader(open(out))) if r.returncode == 0 and os.path.exists(out) else []
        row = rows[0] if len(rows) == 1 else {}
        p = -1.0
        if row:
            mf = float(row["model_flops"])
            p = (mf / batch - 6.0 * layers * hidden * seq * seq) / (6.0 * seq)
        ok(row.get("status") == "ok" and row.get("policy") == policy and abs(p - active) < 0.5,
           "%s %s: one CSV row, status %s, its model FLOPs give %.1f active parameters "
           "(config: %d)%s" % (name, policy, row.get("status"), p, active,
                                "" if r.returncode == 0 else ": " + r.stderr.strip()))
want = {"llama", "mistral", "qwen2", "qwen3", "phi3", "mixtral", "qwen2_moe", "qwen3_moe",
        "gemma", "gpt2", "gpt_neox", "opt", "bert"}
ok(want <= types, "a config for every supported model_type (%s)" % ", ".join(sorted(types)))
print("1..%d" % n)
sys.exit(1 if failed else 0)
PY
