"""test_capture.py — memsim.capture on CPU (PyTorch's CPU build: no caching allocator, so
the tensor-level allocations and frees): a 2-layer LLaMA-like and a GPT-2-like model
(tinymodels.py) trained one AdamW step; the trace must pass `memsim trace check`, carry
the classes, layers, phases and marks the hf generator writes, and run under keep-all,
full-recompute and full-swap with `memsim simulate` / `memsim compare`. Skipped, with the
reason, when PyTorch or the memsim command is missing. Run by tests/check_python.sh."""

import csv
import gzip
import os
import subprocess
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

try:
    import torch
    import tinymodels
except ImportError as e:            # the wrapper reports the skip and its reason
    torch = None
    WHY = "PyTorch is not importable (%s)" % e

import memsim

MEMSIM = os.environ.get("MEMSIM") or os.path.join(HERE, "..", "..", "sim", "memsim")


def read_trace(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return [ln.split() for ln in f if ln.strip() and not ln.startswith("#")]


def run(*args):
    return subprocess.run([MEMSIM] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)


def step(model, opt, ids):
    loss = model(ids, ids)
    loss.backward()
    opt.step()
    opt.zero_grad()


@unittest.skipIf(torch is None, "no PyTorch" if torch is not None else WHY)
class CaptureCPU(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="memsim-py-")
        torch.manual_seed(0)
        cls.model = tinymodels.TinyLlama(L=2, h=64, heads=4, kv=2, f=160, V=256)
        cls.opt = torch.optim.AdamW(cls.model.parameters(), lr=1e-3)
        cls.ids = torch.randint(0, 256, (8, 64))
        cls.path = os.path.join(cls.tmp, "llama.trace.gz")
        with memsim.capture(cls.path, model=cls.model, optimizer=cls.opt):
            step(cls.model, cls.opt, cls.ids)
        cls.recs = read_trace(cls.path)

    def allocs(self):
        return [r for r in self.recs if r[0] == "alloc"]

    def test_trace_check(self):
        self.assertTrue(os.path.exists(MEMSIM), "memsim not built at %s" % MEMSIM)
        r = run("trace", "check", self.path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(" 0 problems", r.stdout)

    def test_classes(self):
        nparams = len(list(self.model.parameters()))
        cls = {}
        for a in self.allocs():
            cls[a[3]] = cls.get(a[3], 0) + 1
        self.assertEqual(cls.get("param"), nparams)
        self.assertEqual(cls.get("grad"), nparams, "one gradient per parameter")
        # AdamW: exp_avg and exp_avg_sq per parameter (and its step counter)
        self.assertGreaterEqual(cls.get("optstate", 0), 2 * nparams)
        self.assertGreater(cls.get("act_skel", 0), 10)
        self.assertGreater(cls.get("act_trans", 0), 10)
        names = {a[8]: a for a in self.allocs()}
        self.assertTrue(any(n.endswith(".exp_avg_sq") for n in names))

    def test_layers(self):
        names = {a[8]: a for a in self.allocs()}
        for l in (0, 1):
            a = names.get("L%d.input" % l)
            self.assertIsNotNone(a, "L%d.input" % l)
            self.assertEqual((a[3], a[4]), ("act_skel", str(l)))
        skel_layers = {a[4] for a in self.allocs() if a[3] == "act_skel"}
        self.assertTrue({"0", "1"} <= skel_layers)
        p = names["L1.q_proj.weight"]
        self.assertEqual((p[3], p[4]), ("param", "1"))
        self.assertEqual(names["model.embed_tokens.weight"][4], "-1")

    def test_marks_and_phases(self):
        marks = [" ".join(r[1:]) for r in self.recs if r[0] == "mark"]
        self.assertEqual(marks[:3], ["iter 0", "phase fwd", "layer -1"])
        fwd = marks[:marks.index("phase bwd")]
        bwd = marks[marks.index("phase bwd"):marks.index("phase opt")]
        self.assertLess(fwd.index("layer 0"), fwd.index("layer 1"))
        self.assertLess(bwd.index("layer 1"), bwd.index("layer 0"), "backward in reverse")
        self.assertIn("phase opt", marks)
        phases = [r[3] for r in self.recs if r[0] == "op"]
        self.assertEqual(phases, sorted(phases, key=["fwd", "bwd", "opt"].index))
        self.assertTrue(all(r[2] == "optim" for r in self.recs if r[0] == "op" and
                            r[3] == "opt"))

    def test_flops(self):
        # q_proj: [8*64, 64] x [64, 64]: 2 m n k
        q = [r for r in self.recs if r[0] == "op" and r[11] == "L0.q_proj.mm"]
        self.assertEqual(len(q), 1)
        self.assertEqual(float(q[0][5]), 2.0 * 512 * 64 * 64)
        self.assertEqual(q[0][2], "gemm")
        self.assertTrue(any(r[2] == "gemm" and r[3] == "bwd" for r in self.recs
                            if r[0] == "op"))

    def test_policies(self):
        r = run("simulate", "--trace", self.path, "--machine", "h200-sxm")
        self.assertEqual(r.returncode, 0, r.stderr)
        c = os.path.join(self.tmp, "cmp.csv")
        r = run("compare", "--trace", self.path, "--machine", "h200-sxm", "--policies",
                "keep-all,full-recompute,full-swap", "--csv", c)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(c) as f:
            rows = {row["policy"]: row for row in csv.DictReader(f)}
        for p in ("keep-all", "full-recompute", "full-swap"):
            self.assertEqual(rows[p]["status"], "ok", p)
        keep = int(rows["keep-all"]["peak_allocated_bytes"])
        self.assertLess(int(rows["full-recompute"]["peak_allocated_bytes"]), keep)
        self.assertLess(int(rows["full-swap"]["peak_allocated_bytes"]), keep)
        self.assertGreater(float(rows["full-recompute"]["recompute_s"]), 0)

    def test_same_bytes(self):
        """The same program gives the same trace, byte for byte."""
        outs = []
        for i in range(2):
            torch.manual_seed(1)
            m = tinymodels.TinyLlama()
            o = torch.optim.AdamW(m.parameters())
            p = os.path.join(self.tmp, "same%d.trace.gz" % i)
            with memsim.capture(p, model=m, optimizer=o):
                step(m, o, torch.randint(0, 256, (2, 16)))
            with open(p, "rb") as f:
                outs.append(f.read())
        self.assertEqual(outs[0], outs[1])


class DropBlock(torch.nn.Module if torch is not None else object):
    def __init__(self, h):
        super().__init__()
        self.fc = torch.nn.Linear(h, h)
        self.drop = torch.nn.Dropout(0.2)

    def forward(self, x):
        return x + torch.nn.functional.gelu(self.drop(self.fc(x)))


class GradientCheckpointingLayer(torch.nn.Module if torch is not None else object):
    """As transformers' base of decoder layers (modeling_layers.py): checkpoints its own
    call when its flag is set and it trains; counts the calls that did."""
    gradient_checkpointing = False
    checkpointed = 0

    def __call__(self, *args, **kwargs):
        if self.gradient_checkpointing and self.training:
            type(self).checkpointed += 1
            import functools
            return self._gradient_checkpointing_func(
                functools.partial(super().__call__, **kwargs), *args)
        return super().__call__(*args, **kwargs)


class HFBlock(GradientCheckpointingLayer):
    def __init__(self, h):
        super().__init__()
        self.fc = torch.nn.Linear(h, h)

    def forward(self, x, scale=1.0):
        return x + scale * torch.tanh(self.fc(x))


class HFNet(torch.nn.Module if torch is not None else object):
    def __init__(self, h=32, V=128):
        super().__init__()
        self.emb = torch.nn.Embedding(V, h)
        self.layers = torch.nn.ModuleList(HFBlock(h) for _ in range(3))
        self.head = torch.nn.Linear(h, V)

    def forward(self, ids, labels):
        x = self.emb(ids)
        for b in self.layers:
            x = b(x, scale=0.5)
        y = self.head(x)
        return torch.nn.functional.cross_entropy(y.view(-1, y.shape[-1]), labels.view(-1))


class DropNet(torch.nn.Module if torch is not None else object):
    """Blocks with dropout: a measurement that consumed random numbers would show."""
    def __init__(self, h=32, V=128):
        super().__init__()
        self.emb = torch.nn.Embedding(V, h)
        self.blocks = torch.nn.ModuleList(DropBlock(h) for _ in range(3))
        self.head = torch.nn.Linear(h, V)

    def forward(self, ids, labels):
        x = self.emb(ids)
        for b in self.blocks:
            x = b(x)
        y = self.head(x)
        return torch.nn.functional.cross_entropy(y.view(-1, y.shape[-1]), labels.view(-1))


@unittest.skipIf(torch is None, "no PyTorch" if torch is not None else WHY)
class CaptureHostTime(unittest.TestCase):
    """host_timing: the step after the captured one runs plain, timed by phase, the one after
    it plain under torch.profiler; each op gets host_us (its host time before it can be
    issued, here on CPU the time from the previous op's end to its own, scaled so that a
    phase's ops take at most the timed step's phase) and the simulator's step is their sum."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="memsim-py-")
        torch.manual_seed(0)
        m = tinymodels.TinyLlama(L=2, h=64, heads=4, kv=2, f=160, V=256)
        o = torch.optim.AdamW(m.parameters(), lr=1e-3)
        ids = torch.randint(0, 256, (4, 32))
        step(m, o, ids)
        cls.path = os.path.join(cls.tmp, "host.trace")
        import time
        with memsim.capture(cls.path, model=m, optimizer=o, host_timing=True):
            t1 = time.perf_counter()
            step(m, o, ids)                  # timed by phase
            cls.timed_s = time.perf_counter() - t1
            step(m, o, ids)                  # captured
            t1 = time.perf_counter()
            step(m, o, ids)                  # profiled
            cls.plain_s = time.perf_counter() - t1
        cls.recs = read_trace(cls.path)
        cls.meta = {r[1]: " ".join(r[2:]) for r in cls.recs if r[0] == "meta"}
        cls.one = os.path.join(cls.tmp, "one.trace")
        cls.one_error = None
        try:
            with memsim.capture(cls.one, model=m, optimizer=o, host_timing=True):
                step(m, o, ids)
        except memsim.CaptureError as e:
            cls.one_error = str(e)
        cls.two = os.path.join(cls.tmp, "two.trace")
        with memsim.capture(cls.two, model=m, optimizer=o, host_timing=True):
            step(m, o, ids)
            step(m, o, ids)

    def host(self, r):
        a = [x for x in r[12:] if x.startswith("host_us=")]
        return float(a[0][8:]) if a else None

    def test_every_op_timed(self):
        ops = [r for r in self.recs if r[0] == "op"]
        self.assertGreater(len(ops), 100)
        hs = [self.host(r) for r in ops]
        self.assertTrue(all(h is not None for h in hs), "host_us on every op")
        self.assertTrue(all(h >= 0 for h in hs))
        self.assertEqual(self.meta["captured.host_timing"], "ops")
        got, n = (int(x) for x in self.meta["captured.host_matched"].split("/"))
        # every op the program ran (a `pyrefs` op marks references let go: it ran nothing)
        self.assertEqual(n, len([r for r in ops if r[11] != "pyrefs"]))
        self.assertGreaterEqual(got, 0.9 * n, "most ops matched (%d of %d)" % (got, n))
        total = sum(hs)
        # the profiled step ran inside plain_s (profiler included), the timed one inside
        # timed_s; the ops take most of the timed step and no more than either
        self.assertGreater(total, 0)
        self.assertLessEqual(total * 1e-6, self.plain_s)
        # (the timed step's last phase runs to the next forward call, just after timed_s)
        self.assertLessEqual(total * 1e-6, self.timed_s * 1.02 + 1e-4)
        self.assertGreater(total * 1e-6, 0.3 * self.timed_s)
        self.assertLessEqual(total, float(self.meta["captured.host_step_us"]) + 1.0)

    def test_host_steps_spread(self):
        """host_steps=3: each timed step's host time, in order, in captured.host_steps_us;
        the forward phase's median is within their range."""
        torch.manual_seed(0)
        m = tinymodels.TinyLlama(L=2, h=64, heads=4, kv=2, f=160, V=256)
        o = torch.optim.AdamW(m.parameters(), lr=1e-3)
        ids = torch.randint(0, 256, (4, 32))
        p = os.path.join(self.tmp, "spread.trace")
        with memsim.capture(p, model=m, optimizer=o, host_timing=True, host_steps=3):
            for _ in range(5):
                step(m, o, ids)
        meta = {r[1]: " ".join(r[2:]) for r in read_trace(p) if r[0] == "meta"}
        st = [float(v) for v in meta["captured.host_steps_us"].split(",")]
        self.assertEqual(len(st), 3)
        self.assertTrue(all(v > 0 for v in st))
        parts = sum(float(meta["captured.host_phase." + ph].split()[1])
                    for ph in ("fwd", "bwd", "opt"))
        self.assertLessEqual(min(st) * 0.5, parts)
        self.assertLessEqual(parts, max(st) * 2.0)

    def test_ckpt_cost(self):
        """Checkpointing's host cost measured on the second block, before the captured
        step (_ckptcost.py): per layer, forward and backward, with the raw medians."""
        f = float(self.meta["captured.ckpt_fwd_layer_us"])
        b = float(self.meta["captured.ckpt_bwd_layer_us"])
        self.assertGreaterEqual(f, 0.0)
        self.assertGreaterEqual(b, 0.0)
        p = self.meta["captured.ckpt_probe"].split()
        self.assertEqual(p[:2], ["layer", "1"])
        pf, pb, cf, cb = (float(x) for x in (p[3], p[4], p[6], p[7]))
        self.assertTrue(pf > 0 and pb > 0 and cf > 0 and cb > 0, p)
        self.assertAlmostEqual(f, max(cf - pf, 0.0), delta=0.11)
        self.assertAlmostEqual(b, max(cb - pb - pf, 0.0), delta=0.11)

    def test_ckpt_cost_transformers_layer(self):
        """A transformers-style block is checkpointed through its own flag, only in the
        measurement's checkpointed calls (7 of the 14: warm-up and timed), and the flag is
        off again after it."""
        torch.manual_seed(2)
        m = HFNet()
        o = torch.optim.AdamW(m.parameters(), lr=1e-3)
        ids = torch.randint(0, 128, (2, 16))
        step(m, o, ids)
        HFBlock.checkpointed = 0
        p = os.path.join(self.tmp, "hf.trace")
        with memsim.capture(p, model=m, optimizer=o, host_timing=True):
            for _ in range(3):
                step(m, o, ids)
        self.assertEqual(HFBlock.checkpointed, 7)
        self.assertTrue(all(not b.gradient_checkpointing for b in m.layers))
        meta = {r[1]: " ".join(r[2:]) for r in read_trace(p) if r[0] == "meta"}
        pr = meta["captured.ckpt_probe"].split()
        self.assertEqual(pr[:2], ["layer", "1"])

    def test_ckpt_cost_leaves_training_alone(self):
        """The block run for the measurement changes nothing the program sees: the same
        parameters after the same steps, with and without the capture (dropout included:
        the RNG states are put back)."""
        def train(capture):
            torch.manual_seed(1)
            m = DropNet()
            o = torch.optim.AdamW(m.parameters(), lr=1e-2)
            ids = torch.randint(0, 128, (2, 16))
            step(m, o, ids)
            if capture:
                with memsim.capture(os.path.join(self.tmp, "alone.trace"), model=m,
                                    optimizer=o, host_timing=True):
                    for _ in range(3):
                        step(m, o, ids)
            else:
                for _ in range(3):
                    step(m, o, ids)
            step(m, o, ids)
            return [p.detach().clone() for p in m.parameters()]
        a, b = train(True), train(False)
        self.assertEqual(len(a), len(b))
        self.assertTrue(all(torch.equal(x, y) for x, y in zip(a, b)))

    def test_phases_bound_host(self):
        """Each phase's ops take at most the timed step's phase, scaled by the factor the
        trace states (never up)."""
        ops = [r for r in self.recs if r[0] == "op"]
        for ph in ("fwd", "bwd", "opt"):
            prof_us, timed_us, f = (float(x) for x in
                                    self.meta["captured.host_phase." + ph].split())
            self.assertGreater(timed_us, 0)
            self.assertLessEqual(f, 1.0)
            self.assertGreater(f, 0.0)
            mine = sum(self.host(r) for r in ops if r[3] == ph)
            self.assertLessEqual(mine, timed_us + 1.0, ph)
            self.assertAlmostEqual(mine, prof_us * f, delta=1.0 + 1e-3 * prof_us)

    def test_checks_and_simulates(self):
        r = run("trace", "check", self.path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        c = os.path.join(self.tmp, "cmp.csv")
        r = run("compare", "--trace", self.path, "--machine", "h200-sxm", "--iters", "1",
                "--policies", "keep-all,full-recompute", "--csv", c)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(c) as f:
            rows = {row["policy"]: row for row in csv.DictReader(f)}
        total = sum(self.host(x) for x in self.recs if x[0] == "op") * 1e-6
        keep = float(rows["keep-all"]["iter_time_s"])
        # host-bound on the H200 profile: the step is the host's time and the last kernels
        self.assertGreaterEqual(keep, total)
        self.assertLess(keep, total * 1.05 + 1e-3)
        # recomputation replays the forward's ops: their host time again
        self.assertGreater(float(rows["full-recompute"]["iter_time_s"]), keep)

    def test_exception_in_plain_step(self):
        """An exception during the profiled plain step leaves no trace and no profiler."""
        m = tinymodels.TinyLlama()
        o = torch.optim.AdamW(m.parameters())
        p = os.path.join(self.tmp, "bad.trace")
        ids = torch.randint(0, 256, (2, 16))
        with self.assertRaises(ValueError):
            with memsim.capture(p, model=m, optimizer=o, host_timing=True):
                step(m, o, ids)
                step(m, o, ids)
                m(ids, ids)
                raise ValueError("in the profiled step")
        self.assertFalse(os.path.exists(p))
        self.assertEqual([f for f in os.listdir(self.tmp) if f.startswith("bad.")], [])
        from torch.profiler import profile
        with profile() as pr:          # a profiler left running would refuse this one
            torch.ones(2).sum()
        self.assertTrue(len(pr.events()) > 0)

    def test_host_steps(self):
        """host_steps=3: three timed steps (each phase's median), then one captured and one
        profiled; two iterations double the bound of the ops of both."""
        torch.manual_seed(0)
        m = tinymodels.TinyLlama(L=2, h=64, heads=4, kv=2, f=160, V=256)
        o = torch.optim.AdamW(m.parameters(), lr=1e-3)
        ids = torch.randint(0, 256, (4, 32))
        for steps, iters in ((3, 1), (1, 2)):
            p = os.path.join(self.tmp, "hs%d%d.trace" % (steps, iters))
            with memsim.capture(p, model=m, optimizer=o, host_timing=True, host_steps=steps,
                                iterations=iters):
                for _ in range(steps + 2 * iters):
                    step(m, o, ids)
            recs = read_trace(p)
            meta = {r[1]: " ".join(r[2:]) for r in recs if r[0] == "meta"}
            self.assertEqual(meta["captured.host_timing"], "ops")
            marks = [r for r in recs if r[0] == "mark" and r[1] == "iter"]
            self.assertEqual(len(marks), iters)
            for ph in ("fwd", "bwd"):
                prof_us, timed_us, f = (float(x) for x in
                                        meta["captured.host_phase." + ph].split())
                # the bound covers the trace's iterations: about as long as their ops
                self.assertGreater(timed_us, 0.3 * prof_us, (steps, iters, ph))
        with self.assertRaises(memsim.CaptureError):
            memsim.capture(os.path.join(self.tmp, "x.trace"), model=m, host_steps=0)
        p = os.path.join(self.tmp, "short.trace")
        with self.assertRaises(memsim.CaptureError) as e:
            with memsim.capture(p, model=m, optimizer=o, host_timing=True, host_steps=3):
                step(m, o, ids)
                step(m, o, ids)
        self.assertIn("ran 2 steps; it needs 5: 3 timed", str(e.exception))
        self.assertFalse(os.path.exists(p))

    def test_bad_host_timing(self):
        with self.assertRaises(memsim.CaptureError):
            memsim.capture(os.path.join(self.tmp, "x.trace"), model=tinymodels.TinyLlama(),
                           host_timing="sometimes")

    def test_one_step_refused(self):
        """A block of one step has nothing captured: said, and no file."""
        self.assertIsNotNone(self.one_error)
        self.assertIn("ran 1 step; it needs 3", self.one_error)
        self.assertFalse(os.path.exists(self.one))

    def test_two_steps_no_host_times(self):
        for path in (self.two,):    # timed and captured, no profiled step: no host times
            recs = read_trace(path)
            meta = {r[1]: " ".join(r[2:]) for r in recs if r[0] == "meta"}
            self.assertEqual(meta["captured.host_timing"], "none")
            self.assertFalse(any(self.host(r) is not None for r in recs if r[0] == "op"))


class Locals(torch.nn.Module if torch is not None else object):
    """A block whose Python locals outlive their last op: g (saved by tanh and lin2) is
    read last by lin2 and held until the block returns; y (saved by sin) is let go when
    the variable is reassigned to sin's result."""

    def __init__(self, h):
        super().__init__()
        self.lin1 = torch.nn.Linear(h, h)
        self.lin2 = torch.nn.Linear(h, h)

    def forward(self, x):
        g = torch.tanh(self.lin1(x))
        y = self.lin2(g)
        y = torch.sin(y)
        return torch.cos(y) * 2.0 + x


class LocalsModel(torch.nn.Module if torch is not None else object):
    def __init__(self, h=32, L=2):
        super().__init__()
        self.layers = torch.nn.ModuleList([Locals(h) for _ in range(L)])

    def forward(self, x):
        for b in self.layers:
            x = b(x)
        return x.square().mean()


@unittest.skipIf(torch is None, "no PyTorch" if torch is not None else WHY)
class CapturePyRefs(unittest.TestCase):
    """The forward's Python references: a zero-time `pyrefs` op where the last one to a
    saved tensor goes (memsim/_pyrefs.py), inside its block, after its last op."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="memsim-py-")
        torch.manual_seed(0)
        m = LocalsModel()
        o = torch.optim.AdamW(m.parameters(), lr=1e-3)
        x = torch.randn(2, 8, 32)          # 3-D: linear's matmul saves a view of it
        cls.path = os.path.join(cls.tmp, "locals.trace")
        with memsim.capture(cls.path, model=m, optimizer=o):
            m(x).backward()
            o.step()
            o.zero_grad()
        cls.recs = read_trace(cls.path)
        cls.names = {r[1]: r[8] for r in cls.recs if r[0] == "alloc"}

    def fwd_ops(self, layer):
        return [r for r in self.recs if r[0] == "op" and r[3] == "fwd" and r[4] == str(layer)]

    def test_locals_let_go_where_python_drops_them(self):
        meta = {r[1]: r[2] for r in self.recs if r[0] == "meta" and len(r) > 2}
        self.assertNotEqual(meta.get("captured.pyrefs"), "off")
        for layer in (0, 1):
            ops = self.fwd_ops(layer)
            names = [r[11] for r in ops]
            self.assertIn("pyrefs", names, names)
            ins = lambda r: [self.names[i] for i in r[9].split(",") if i in self.names]
            seen = {}
            for k, r in enumerate(ops):
                if r[11] == "pyrefs":
                    for n in ins(r):
                        seen[n] = k
            sin = next(k for k, r in enumerate(ops) if "sin" in r[11])
            tanh = next(k for k, r in enumerate(ops) if "tanh" in r[11])
            y = [n for n in seen if n == self.names.get(ops[sin][9].split(",")[0])]
            g = [n for n in seen if n == self.names.get(ops[tanh][10].split(",")[0])]
            self.assertTrue(g, "the tanh output (held to the return) is let go: %s" % seen)
            self.assertTrue(y, "lin2's output (reassigned) is let go: %s" % seen)
            # y goes when the variable is reassigned, just after sin; g when the block
            # returns, after its last op
            self.assertEqual(seen[y[0]], sin + 1, names)
            self.assertEqual(seen[g[0]], len(ops) - 1, names)

    def test_only_what_the_capture_made(self):
        """A tensor from before the capture (the model's input, held by the caller) has
        holders no mode saw: never marked let go."""
        before = {r[1] for r in self.recs if r[0] == "alloc" and r[7] == "-"}
        self.assertTrue(before)
        for r in self.recs:
            if r[0] == "op" and r[11] == "pyrefs":
                self.assertFalse(set(r[9].split(",")) & before, r)

    def test_pyrefs_ops_take_no_time_and_keep_all_is_unchanged(self):
        for r in self.recs:
            if r[0] == "op" and r[11] == "pyrefs":
                self.assertEqual(float(r[5]), 0.0)
                self.assertEqual(r[10], "-")
        plain = os.path.join(self.tmp, "nopyrefs.trace")
        with open(plain, "w") as f:
            for r in self.recs:
                if not (r[0] == "op" and r[11] == "pyrefs"):
                    f.write(" ".join(r) + "\n")
        a = run("simulate", "--trace", self.path, "--machine", "h200-sxm", "--policy",
                "keep-all", "--csv", os.path.join(self.tmp, "a.csv"))
        b = run("simulate", "--trace", plain, "--machine", "h200-sxm", "--policy",
                "keep-all", "--csv", os.path.join(self.tmp, "b.csv"))
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertEqual(b.returncode, 0, b.stderr)
        with open(os.path.join(self.tmp, "a.csv")) as fa, \
                open(os.path.join(self.tmp, "b.csv")) as fb:
            ra, rb = next(csv.DictReader(fa)), next(csv.DictReader(fb))
        for k in ("peak_allocated_bytes", "peak_reserved_bytes"):
            self.assertEqual(ra[k], rb[k], k)

    def test_recompute_holds_the_locals(self):
        """Under full-recompute (drop_at=use) the block's local g is freed where Python let
        go of it, at the block's return, not after lin2, its last op (as without pyrefs)."""
        plain = os.path.join(self.tmp, "nopyrefs2.trace")
        with open(plain, "w") as f:
            for r in self.recs:
                if not (r[0] == "op" and r[11] == "pyrefs"):
                    f.write(" ".join(r) + "\n")
        g = next(r[1] for r in self.recs if r[0] == "alloc" and r[8] == "L0.tanh_out")
        lin2 = next(r[1] for r in self.recs if r[0] == "op" and r[11] == "L0.lin2.addmm")
        last = [r[1] for r in self.fwd_ops(0) if r[11] != "pyrefs"][-1]
        where = []
        for t in (self.path, plain):
            sched = os.path.join(self.tmp, "s.txt")
            p = run("simulate", "--trace", t, "--machine", "h200-sxm", "--policy",
                    "full-recompute", "--schedule", sched)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(sched) as f:
                lines = [ln.split() for ln in f]
            free = next(k for k, ln in enumerate(lines) if ln[2:4] == ["free", "t=" + g])
            ops_before = [ln[3][3:] for ln in lines[:free] if ln[2] == "compute" and
                          ln[3].startswith("op=")]
            where.append(ops_before[-1] if ops_before else None)
        self.assertEqual(where[1], lin2, "without pyrefs: freed after its last op")
        self.assertNotEqual(where[0], lin2)
        self.assertEqual(int(where[0]), int(last) + 1, "with pyrefs: freed at the return")


@unittest.skipIf(torch is None, "no PyTorch" if torch is not None else WHY)
class CaptureMore(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="memsim-py-")
        torch.manual_seed(0)

    def test_gpt_blocks_found(self):
        m = tinymodels.TinyGPT()
        o = torch.optim.AdamW(m.parameters())
        p = os.path.join(self.tmp, "gpt.trace")
        with memsim.capture(p, model=m, optimizer=o):
            step(m, o, torch.randint(0, 256, (2, 32)))
        recs = read_trace(p)
        self.assertIn(["meta", "layers", "2"], recs)
        self.assertTrue(any(r[0] == "alloc" and r[8] == "L1.input" for r in recs))
        self.assertEqual(run("trace", "check", p).returncode, 0)
        r = run("compare", "--trace", p, "--machine", "h200-sxm", "--policies",
                "keep-all,full-recompute,full-swap")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_tokens_from_keywords(self):
        # model(**batch), as Hugging Face training loops call it: the trace still knows the
        # batch and the sequence (MFU, tokens per second) and which activations scale with
        # the tokens (MEMO's token-wise swap and recomputation)
        m = tinymodels.TinyLlama(L=2)
        m.config = types.SimpleNamespace(hidden_size=64)   # the model FLOPs need it
        o = torch.optim.AdamW(m.parameters())
        p = os.path.join(self.tmp, "kw.trace")
        ids = torch.randint(0, 256, (4, 24))
        with memsim.capture(p, model=m, optimizer=o):
            m(ids=ids, labels=ids).backward()
            o.step()
            o.zero_grad()
        recs = read_trace(p)
        self.assertIn(["meta", "batch", "4"], recs)
        self.assertIn(["meta", "seq", "24"], recs)
        tok = [r for r in recs if r[0] == "alloc" and r[3] in ("act_skel", "act_trans")
               and r[5] == "1"]
        self.assertTrue(tok, "no activation marked as scaling with the tokens")
        r = run("compare", "--trace", p, "--machine", "h200-sxm", "--policies", "keep-all",
                "--csv", os.path.join(self.tmp, "kw.csv"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.tmp, "kw.csv")) as f:
            row = next(csv.DictReader(f))
        self.assertGreater(float(row["mfu"]), 0.0)
        self.assertGreater(float(row["tgs"]), 0.0)

    def test_active_params_of_experts(self):
        # a mixture of experts: the model FLOPs count k of every E experts' parameters
        class MoE(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.config = types.SimpleNamespace(hidden_size=8, num_local_experts=4,
                                                    num_experts_per_tok=1)
                self.emb = torch.nn.Embedding(16, 8)
                self.experts = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))

            def forward(self, ids):
                x = self.emb(ids)
                return sum(e(x) for e in self.experts).sum()

        m = MoE()
        o = torch.optim.AdamW(m.parameters())
        p = os.path.join(self.tmp, "moe.trace")
        with memsim.capture(p, model=m, optimizer=o):
            m(torch.randint(0, 16, (2, 8))).backward()
            o.step()
        recs = read_trace(p)
        self.assertIn(["meta", "params", str(16 * 8 + 4 * 72)], recs)
        self.assertIn(["meta", "active_params", str(16 * 8 + 72)], recs)

    def test_layers_override(self):
        m = tinymodels.TinyLlama(L=3)
        o = torch.optim.AdamW(m.parameters())
        p = os.path.join(self.tmp, "l.trace")
        with memsim.capture(p, model=m, optimizer=o, layers=list(m.model.layers)[:2]):
            step(m, o, torch.randint(0, 256, (2, 16)))
        self.assertIn(["meta", "layers", "2"], read_trace(p))
        with self.assertRaises(ValueError):
            memsim.capture(p, model=m, layers="model.blocks")

    def test_two_iterations(self):
        m = tinymodels.TinyLlama()
        o = torch.optim.AdamW(m.parameters())
        p = os.path.join(self.tmp, "two.trace")
        ids = torch.randint(0, 256, (2, 16))
        with memsim.capture(p, model=m, optimizer=o, iterations=2):
            for _ in range(3):
                step(m, o, ids)
        recs = read_trace(p)
        iters = [r[2] for r in recs if r[:2] == ["mark", "iter"]]
        self.assertEqual(iters, ["0", "1"])
        self.assertEqual(run("trace", "check", p).returncode, 0)
        r = run("simulate", "--trace", p, "--machine", "h200-sxm", "--policy", "full-recompute")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_exception_leaves_nothing(self):
        m = tinymodels.TinyLlama()
        o = torch.optim.AdamW(m.parameters())
        p = os.path.join(self.tmp, "bad.trace.gz")
        with self.assertRaises(ZeroDivisionError):
            with memsim.capture(p, model=m, optimizer=o):
                m(torch.randint(0, 256, (2, 16)), torch.randint(0, 256, (2, 16))).backward()
                1 / 0
        self.assertEqual(os.listdir(self.tmp), [])
        # everything is unhooked: training goes on as before
        self.assertEqual(torch.autograd.backward.__module__, "torch.autograd")
        step(m, o, torch.randint(0, 256, (2, 16)))

    def test_no_gpu(self):
        if torch.cuda.is_available():
            self.skipTest("a GPU is present")
        with self.assertRaises(memsim.CaptureError) as e:
            memsim.capture(os.path.join(self.tmp, "x.trace"), device="cuda")
        self.assertIn("CUDA is not available", str(e.exception))

    def test_early_stop_off_for_good(self):
        # after a CUDA capture began, checkpoint's early stop must stay off (its exception
        # through the allocator trace's hooks fails in PyTorch): set once, warned once
        import warnings
        import torch.utils.checkpoint as cp
        from memsim import _capture
        had = hasattr(cp, "_enable_checkpoint_early_stop")
        old = getattr(cp, "_enable_checkpoint_early_stop", None)
        try:
            for start in (True, None):        # PyTorch 2.1-2.5 default, and later ones'
                cp._enable_checkpoint_early_stop = start
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    _capture._early_stop_off(torch)
                    _capture._early_stop_off(torch)
                self.assertIs(cp._enable_checkpoint_early_stop, False)
                self.assertEqual(len([x for x in w if "early stop" in str(x.message)]), 1)
        finally:
            if had:
                cp._enable_checkpoint_early_stop = old
            else:
                del cp._enable_checkpoint_early_stop

    def test_bad_iterations(self):
        with self.assertRaises(memsim.CaptureError):
            memsim.capture(os.path.join(self.tmp, "x.trace"), iterations=0)


if __name__ == "__main__":
    unittest.main()
