#!/usr/bin/env python3
"""calculon_rate.py — Calculon's (github.com/calculon-ai/calculon, an analytical LLM training
estimator in Python) rate on the configurations of memsim's 192-configuration sweep, for
BENCHMARKS.md: a GPT-7B-shaped model (32 blocks, hidden 4096, feed-forward 16384, 32 heads of
128) on 8 A100-80GB (Calculon's systems/a100_80g.json; TP 4 x DP 2, as memsim's TP 4 x CP 2 on
the A800 node: Calculon has no context parallelism), micro-batch 1, one iteration, 64 sequence
lengths 16K..1M x three policies: no recomputation, full recomputation, activations offloaded
to host memory (memsim's keep-all, full-recompute, full-swap). Each configuration is
Llm(app).compile(system, execution) and run(system), in process, as Calculon's `calculon llm`
command does for one; the import and system are set up once, outside the timing. Prints the
per-configuration time (median of --runs passes over the 192) and the whole-process time of
one pass (interpreter start and imports included).

  python3 benchmarks/calculon_rate.py --calculon DIR [--runs 11]
DIR: a checkout of Calculon (its calculon/ package and systems/). Needs numpy, pandas and
psutil (Debian: python3-numpy python3-pandas python3-psutil), which Calculon imports.
"""
import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time


def configs():
    for k in range(16, 1025, 16):
        for policy in ("keep-all", "full-recompute", "full-swap"):
            yield k * 1024, policy


def execution(policy):
    return {
        "num_procs": 8, "tensor_par": 4, "pipeline_par": 1, "data_par": 2,
        "tensor_par_net": 0, "pipeline_par_net": 0, "data_par_net": 0,
        "batch_size": 2, "microbatch_size": 1, "datatype": "float16",
        "fused_activation": True, "attention_type": "multihead",
        "activation_recompute": "full" if policy == "full-recompute" else "none",
        "pipeline_interleaving": 1, "optimizer_sharding": False,
        "tensor_par_comm_type": "rs_ag", "tensor_par_overlap": "none",
        "seq_par_ag_redo": False, "data_par_overlap": False, "weight_offload": False,
        "activations_offload": policy == "full-swap", "optimizer_offload": False,
        "training": True}


def one_pass(calculon, syst, log):
    """Seconds per configuration over the 192, and how many Calculon accepted."""
    Llm = calculon.llm.Llm
    ok = 0
    t0 = time.perf_counter()
    for seq, policy in configs():
        app = Llm.Application({"hidden": 4096, "feedforward": 16384, "seq_size": seq,
                               "attn_heads": 32, "attn_size": 128, "num_blocks": 32})
        exe = Llm.Execution.from_json(execution(policy))
        try:
            m = Llm(app, log)
            m.compile(syst, exe)
            m.run(syst)
            ok += 1
        except Llm.Error:
            pass
    return (time.perf_counter() - t0) / 192, ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calculon", default=os.environ.get("CALCULON_DIR"))
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if not a.calculon or not os.path.isdir(os.path.join(a.calculon, "calculon")):
        print("Calculon: not measured (no checkout given: --calculon DIR or CALCULON_DIR)")
        return 0
    sys.path.insert(0, a.calculon)
    try:
        import calculon  # noqa: E402
    except ImportError as e:
        print("Calculon: cannot run with %s (%s)" % (sys.executable, e))
        return 0
    with open(os.path.join(a.calculon, "systems", "a100_80g.json")) as f:
        syst = calculon.System(json.load(f))
    log = logging.getLogger("calculon")
    log.setLevel(logging.ERROR)
    if a.once:
        one_pass(calculon, syst, log)
        return 0
    per, ok = zip(*(one_pass(calculon, syst, log) for _ in range(a.runs)))
    m = statistics.median(per)
    walls = []
    for _ in range(min(a.runs, 5)):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--calculon", a.calculon, "--once"],
                       check=True)
        walls.append(time.perf_counter() - t0)
    w = statistics.median(walls)
    print("Calculon (%s, in process): %.3f ms per configuration (%.3f - %.3f), %.0f/s; %d of "
          "192 accepted" % (sys.executable, m * 1e3, min(per) * 1e3, max(per) * 1e3, 1 / m,
                            ok[0]))
    print("Calculon, whole process (interpreter, imports, 192 configurations): %.0f ms, "
          "%.0f configurations/s" % (w * 1e3, 192 / w))
    return 0


if __name__ == "__main__":
    sys.exit(main())
