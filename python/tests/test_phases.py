"""test_phases.py — memsim._phases.PhaseTimer on a stand-in model, optimizer and torch (no
PyTorch, no GPU needed): each timed step's phases, the drain before every forward, and
each step's whole time (wall_us) ending at the drain after it. Run by tests/check_python.sh."""

import os
import sys
import time
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from memsim import _phases          # noqa: E402  (after the path)


class Handle:
    def __init__(self, hooks, h):
        self.hooks, self.h = hooks, h

    def remove(self):
        self.hooks.remove(self.h)


class Model:
    def __init__(self):
        self.hooks = []

    def register_forward_pre_hook(self, h):
        self.hooks.append(h)
        return Handle(self.hooks, h)

    def __call__(self):
        for h in list(self.hooks):
            h(self, ())


class Opt:
    def step(self):
        pass


class Timer(unittest.TestCase):
    def run_steps(self, n_timed, drain):
        torch = types.SimpleNamespace(autograd=types.SimpleNamespace(backward=lambda: None))
        model, opt = Model(), Opt()
        done = []
        t = _phases.PhaseTimer(torch, model, opt, n_timed, lambda m, a: done.append(1),
                               drain=drain)
        t.arm()
        for _ in range(n_timed + 1):
            model()
            time.sleep(0.002)
            torch.autograd.backward()
            opt.step()
        return t, done

    def test_wall_ends_at_the_drain(self):
        drains = []

        def drain():                 # the GPU's tail: 5 ms after the host's last launch
            drains.append(1)
            time.sleep(0.005)
        t, done = self.run_steps(3, drain)
        self.assertEqual(done, [1])
        self.assertEqual(len(drains), 4)             # before each timed step and the next
        host, wall = _phases.step_us(t), _phases.wall_us(t)
        self.assertEqual((len(host), len(wall)), (3, 3))
        for h, w in zip(host, wall):
            self.assertGreaterEqual(h, 2000.0)
            self.assertGreaterEqual(w - h, 5000.0)   # the drain after the step is in it
        self.assertEqual(set(t.phase_us()), {"fwd", "bwd", "opt"})

    def test_no_drain_no_wall(self):
        t, _ = self.run_steps(2, None)
        self.assertEqual(len(_phases.step_us(t)), 2)
        self.assertEqual(_phases.wall_us(t), [])


if __name__ == "__main__":
    unittest.main()
