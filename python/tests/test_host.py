"""test_host.py — memsim._host on hand-made profiler events (no PyTorch, no GPU needed): the
captured step's launches matched to the plain step's by name, each op's host time from the
previous op's issue less the time blocked in allocation and synchronizing calls, host_sync
on the op a blocking call waited for, unmatched ops at 0. Run by tests/check_python.sh."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from memsim import _host           # noqa: E402  (after the path)


class Range:
    def __init__(self, start, end):
        self.start, self.end = start, end


class Ev:
    """What _host reads of a torch.profiler FunctionEvent."""

    def __init__(self, name, start, end, dev="CPU", eid=0):
        self.name = name
        self.time_range = Range(start, end)
        self.device_type = "DeviceType." + dev
        self.id = eid


class Op:
    def __init__(self, oid, aten):
        self.id, self.aten = oid, aten
        self.host_us, self.host_sync = None, 0


def captured():
    """Four ops: one kernel; two kernels; a copy to pageable memory and a synchronize (an
    .item()); the first kernel again."""
    return [
        Ev("memsim#1", 0, 100), Ev("cudaLaunchKernel", 10, 12, eid=11),
        Ev("gemm_a", 20, 50, "CUDA", 11),
        Ev("memsim#2", 200, 300), Ev("cudaLaunchKernel", 210, 212, eid=12),
        Ev("cudaLaunchKernel", 220, 222, eid=13),
        Ev("ew_b", 230, 240, "CUDA", 12), Ev("ew_c", 240, 250, "CUDA", 13),
        Ev("memsim#3", 400, 500), Ev("cudaMemcpyAsync", 410, 420, eid=14),
        Ev("Memcpy DtoH (Device -> Pageable)", 415, 419, "CUDA", 14),
        Ev("cudaStreamSynchronize", 421, 430),
        Ev("memsim#4", 600, 700), Ev("cudaLaunchKernel", 610, 612, eid=15),
        Ev("gemm_a", 620, 650, "CUDA", 15),
    ]


def plain(linked=True):
    """The same program run plain: the GPU busy until 1200 with the first kernel, a
    cudaMalloc in op 2, op 3's copy blocking 1100..1230 (the GPU's earlier work ends at 1220),
    a synchronize that finds the GPU idle, and op 4 at 1300."""
    ev = [Ev("aten::mm", 1000, 1030),
          Ev("cudaLaunchKernel", 1020, 1025, eid=21),
          Ev("cudaLaunchKernel", 1040, 1045, eid=22),
          Ev("cudaMalloc", 1050, 1080),
          Ev("cudaLaunchKernel", 1090, 1095, eid=23),
          Ev("cudaMemcpyAsync", 1100, 1230, eid=24),
          Ev("cudaStreamSynchronize", 1231, 1234),
          Ev("cudaLaunchKernel", 1300, 1305, eid=25)]
    if linked:
        ev += [Ev("gemm_a", 1025, 1200, "CUDA", 21), Ev("ew_b", 1200, 1210, "CUDA", 22),
               Ev("ew_c", 1210, 1220, "CUDA", 23),
               Ev("Memcpy DtoH (Device -> Pageable)", 1220, 1229, "CUDA", 24),
               Ev("gemm_a", 1305, 1400, "CUDA", 25)]
    return ev


class HostTimes(unittest.TestCase):
    def test_launches(self):
        ops = [Op(i, "x") for i in (1, 2, 3, 4)]
        info = _host.host_times(captured(), plain(), ops, cuda=True)
        self.assertEqual(info["method"], "launches")
        self.assertEqual((info["matched"], info["ops"], info["syncs"]), (4, 4, 1))
        # op 1: issued at 1025, 25 us after the step's first event
        # op 2: its last launch at 1095, less the cudaMalloc's 30 us
        # op 3: the copy returns at 1230; 120 us of it the GPU still ran earlier work
        # op 4: 1305 - 1230; the synchronize found the GPU idle, so nothing is taken off
        self.assertEqual([o.host_us for o in ops], [25.0, 40.0, 15.0, 75.0])
        self.assertEqual([o.host_sync for o in ops], [0, 0, 1, 0])
        self.assertAlmostEqual(info["step_us"], 305.0)

    def test_full_launch_queue(self):
        """A kernel launch that outlasts four typical ones waited for room in CUDA's launch
        queue: its excess over the typical launch is not the host's."""
        ops = [Op(i, "x") for i in (1, 2, 3, 4)]
        ev = plain()
        ev[7] = Ev("cudaLaunchKernel", 1300, 1365, eid=25)    # 65 us against 5
        info = _host.host_times(captured(), ev, ops, cuda=True)
        self.assertEqual([o.host_us for o in ops], [25.0, 40.0, 15.0, 75.0])

    def test_unlinked_profile(self):
        """Without GPU activities the launches match by call name and a blocking call counts
        whole; an async copy is then not known to be to pageable memory."""
        ops = [Op(i, "x") for i in (1, 2, 3, 4)]
        ev = [e for e in captured() if "CUDA" not in e.device_type]
        info = _host.host_times(ev, plain(linked=False), ops, cuda=True)
        self.assertEqual(info["method"], "launches")
        # op 4 follows the synchronize (3 us whole): host_sync on op 3, its wait taken off
        self.assertEqual([o.host_us for o in ops], [25.0, 40.0, 135.0, 72.0])
        self.assertEqual([o.host_sync for o in ops], [0, 0, 1, 0])

    def test_unmatched_op_goes_to_the_next(self):
        """An op the plain step does not show (no launch of its kind) gets 0; the next
        matched op's gap holds its time."""
        cap = captured() + [Ev("memsim#5", 800, 900), Ev("cudaLaunchKernel", 810, 812, eid=16),
                            Ev("odd_kernel", 820, 830, "CUDA", 16),
                            Ev("memsim#6", 1000, 1100),
                            Ev("cudaLaunchKernel", 1010, 1012, eid=17),
                            Ev("gemm_a", 1020, 1030, "CUDA", 17)]
        pl = plain() + [Ev("cudaLaunchKernel", 1500, 1505, eid=26),
                        Ev("gemm_a", 1505, 1600, "CUDA", 26)]
        ops = [Op(i, "x") for i in range(1, 7)]
        info = _host.host_times(cap, pl, ops, cuda=True)
        self.assertEqual(info["matched"], 5)
        self.assertEqual(ops[4].host_us, 0.0)
        self.assertEqual(ops[5].host_us, 200.0)

    def test_extra_launch_does_not_pull_ahead(self):
        """A captured launch the plain step does not have at that place (here kernel X,
        which the plain step runs only much later) is left unmatched; the ops after it still
        match their own launches instead of going unmatched behind a far jump."""
        names = ["A", "B", "X", "C", "D", "E", "F", "G"]
        cap, t = [], 0
        for k, n in enumerate(names, start=1):
            cap += [Ev("memsim#%d" % k, t, t + 50), Ev("cudaLaunchKernel", t + 10, t + 12,
                                                      eid=100 + k),
                    Ev(n, t + 20, t + 30, "CUDA", 100 + k)]
            t += 100
        pnames = ["A", "B", "C", "D", "E", "F", "G"] + ["P%d" % q for q in range(10)] + ["X"]
        pl, t = [], 1000
        for k, n in enumerate(pnames, start=1):
            pl += [Ev("cudaLaunchKernel", t, t + 2, eid=200 + k),
                   Ev(n, t + 2, t + 8, "CUDA", 200 + k)]
            t += 10
        ops = [Op(k, "x") for k in range(1, len(names) + 1)]
        info = _host.host_times(cap, pl, ops, cuda=True)
        self.assertEqual(info["matched"], 7)
        self.assertEqual(ops[2].host_us, 0.0)
        self.assertTrue(all(o.host_us > 0 for k, o in enumerate(ops) if k != 2),
                        [o.host_us for o in ops])

    def test_cpu_ops(self):
        """CPU: the aten ops matched by name in order; an op's issue is its event's end."""
        ev = [Ev("aten::linear", 0, 50), Ev("aten::t", 1, 2), Ev("aten::addmm", 3, 50),
              Ev("aten::relu", 60, 70), Ev("aten::view", 71, 72), Ev("aten::sum", 80, 95)]
        ops = [Op(1, "addmm"), Op(2, "relu"), Op(3, "sum")]
        info = _host.host_times(None, ev, ops, cuda=False)
        self.assertEqual(info["method"], "ops")
        self.assertEqual([o.host_us for o in ops], [50.0, 20.0, 25.0])
        self.assertEqual(sum(o.host_us for o in ops), info["step_us"])

    def test_nothing_to_match(self):
        ops = [Op(1, "mm")]
        info = _host.host_times(None, [], ops, cuda=True)
        self.assertEqual((info["method"], info["matched"]), ("none", 0))
        self.assertEqual(ops[0].host_us, 0.0)


class Profiles(unittest.TestCase):
    def test_dump_load_same_host_times(self):
        """The profiles written by dump_profiles give host_times the same answer as the
        events they came from; a file that is not one is refused, naming it."""
        import tempfile
        ops = [Op(i, "x") for i in (1, 2, 3, 4)]
        for o in ops:
            o.phase = "fwd"
        cap, pl = _host.Profile(captured()), _host.Profile(plain())
        info = _host.host_times(cap, pl, ops, cuda=True)
        d = tempfile.mkdtemp()
        path = os.path.join(d, "p.json.gz")
        _host.dump_profiles(path, cap, pl, ops)
        self.assertEqual(os.listdir(d), ["p.json.gz"])       # no temporary left
        cap2, pl2, ops2 = _host.load_profiles(path)
        self.assertEqual([(o.id, o.aten, o.phase) for o in ops2], [(o.id, "x", "fwd")
                                                                   for o in ops])
        info2 = _host.host_times(cap2, pl2, ops2, cuda=True)
        self.assertEqual(info, info2)
        self.assertEqual([o.host_us for o in ops2], [o.host_us for o in ops])
        self.assertEqual([o.host_sync for o in ops2], [o.host_sync for o in ops])
        bad = os.path.join(d, "bad.json.gz")
        with open(bad, "wb") as f:
            f.write(b"not gzip")
        with self.assertRaises(ValueError) as cm:
            _host.load_profiles(bad)
        self.assertIn(bad, str(cm.exception))


def _prof(launches, ranges=None):
    """A profile from [(start, kernel name)]: each a 2 us launch, its kernel 1 us later."""
    return _host.Profile.from_dict({
        "t0": 0.0, "aten": [],
        "calls": [[t, t + 2.0, "cudaLaunchKernel", k, t + 3.0, t + 4.0] for t, k in launches],
        "ranges": {str(i): r for i, r in (ranges or {}).items()}})


class Align(unittest.TestCase):
    def test_lcs(self):
        self.assertEqual(_host._align(list("abcd"), list("abd")), [(0, 0), (1, 1), (3, 2)])
        self.assertEqual(_host._align([], list("ab")), [])
        self.assertIsNone(_host._align(list("aaaa"), list("bbbb"), max_edits=3))

    def test_extra_captured_launches_named_as_a_later_one(self):
        """The captured step launches kernels the plain one lacks (index checks), one named
        as a kernel the plain step launches further on: every other op still matches its
        own launch and none takes a later op's time (a nearest-name match jumped ahead
        there and left the ops in between at 0)."""
        cap_ops = [["mm"], ["check", "cmp", "check"], ["add"], ["mul"], ["mm"], ["add"],
                   ["mul"], ["check"], ["mm"], ["add"], ["mul"]]
        cap_l, ranges, t = [], {}, 0.0
        for i, ks in enumerate(cap_ops):
            ranges[i + 1] = [t, t + 9]
            for d, k in enumerate(ks):
                cap_l.append((t + 1 + 2 * d, k))
            t += 10
        names = ["mm", "add", "mul", "mm", "add", "mul", "check", "mm", "add", "mul"]
        plain_l = [(1000.0 + 20 * i, n) for i, n in enumerate(names)]
        ops = [Op(i, "x") for i in range(1, 12)]
        info = _host.host_times(_prof(cap_l, ranges), _prof(plain_l), ops, cuda=True)
        self.assertEqual(info["matched"], 10)
        host = [o.host_us for o in ops]
        self.assertEqual(host[1], 0.0)             # op 2: its launches are not the plain's
        self.assertTrue(all(abs(h - 20.0) < 1e-9 for h in host[2:]), host)


if __name__ == "__main__":
    unittest.main()
