# what_if.py — a notebook-style tour of memsim's Python API (cells marked "# %%", as Jupyter,
# VS Code and jupytext read them; also runs as a script: python3 python/examples/what_if.py
# from the source tree after make). Which memory policy trains a LLaMA-3.2-1B step fastest on
# an H200, what each one keeps in memory, a plan to edit and simulate again, and a recorded
# trace replayed through three allocators.

# %% Setup: the package from this source tree, the library from its build (memsim/_lib.py
# says where else it looks; MEMSIM_LIB names it outright).
import os
import sys

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "python"))
os.environ.setdefault("MEMSIM_DATADIR", os.path.join(SRC, "traces"))

import memsim  # noqa: E402

GiB = 1024 ** 3
llama = dict(model_config=os.path.join(SRC, "experiments/realworld/configs/llama3.2-1b.json"),
             framework="hf", precision="amp", seq=2048, batch=4, machine="h200-sxm")

# %% One policy: a Result whose fields are the results CSV's columns.
r = memsim.simulate(policy="keep-all", **llama)
print("keep-all: %.4f s per iteration, MFU %.1f %%, peak reserved %.2f GiB"
      % (r.iter_time_s, 100 * r.mfu, r.peak_reserved_bytes / GiB))

# %% Several policies side by side (a pandas DataFrame when pandas is installed; here the
# list, so that the example needs nothing but the standard library).
rows = memsim.compare(policies=["keep-all", "full-recompute", "full-swap", "memo"],
                      frame=False, **llama)
print("%-16s %6s %9s %7s %10s" % ("policy", "status", "iter_s", "MFU%", "resv_GiB"))
for row in rows:
    print("%-16s %6s %9.4f %7.2f %10.2f" % (row.policy, row.status, row.iter_time_s,
                                            100 * row.mfu, row.peak_reserved_bytes / GiB))
best = rows.fastest()
print("fastest that fits:", best.policy if best else "none")

# %% What the peak holds, by kind, for the policy that saves the most memory.
lean = min((x for x in rows if x.status == "ok"), key=lambda x: x.peak_reserved_bytes)
kinds = {k: v for k, v in lean.to_dict().items()
         if k.startswith("peak_") and k.endswith("_bytes") and k not in
         ("peak_allocated_bytes", "peak_reserved_bytes", "peak_active_bytes",
          "peak_requested_bytes", "peak_inactive_split_bytes") and v}
print(lean.policy, "at its peak:", ", ".join("%s %.2f GiB" % (k[5:-6], v / GiB)
                                             for k, v in kinds.items()))

# %% A plan: the policy's decisions, editable as a file and simulated again.
p = memsim.plan(policy="full-recompute", **llama)
decisions = {}
for t in p.tensors:
    decisions[t["decision"]] = decisions.get(t["decision"], 0) + 1
print("plan of", p.policy, "with allocator", p.allocator, "- tensors by decision:", decisions)
path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "what_if.plan")
p.save(path)
again = memsim.simulate(plan=path, **llama)
print("simulated from the file: %.4f s (the policy's run: %.4f s)"
      % (again.iter_time_s, rows[1].iter_time_s))
os.remove(path)

# %% Allocators on a recorded trace (alloc/free only, no timing).
trace = os.path.join(SRC, "experiments/validate/traces/h100-sxm/real-8K.trace.gz")
for rep in memsim.replay(trace, allocators=["caching", "expandable", "stitching"]):
    print("%-10s peak reserved %6.2f GiB, %4d segments, fragmentation %.3f"
          % (rep.allocator, rep.peak_reserved_bytes / GiB, rep.stats["num_segment_allocs"],
             1 - rep.peak_active_bytes / rep.peak_reserved_bytes))

# %% Errors carry memsim's own message.
try:
    memsim.simulate(policy="keep-al", **llama)
except memsim.Error as e:
    print("memsim.Error:", e)
