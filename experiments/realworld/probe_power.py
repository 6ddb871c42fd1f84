#!/usr/bin/env python3
"""probe_power.py — the board power of PyTorch's fused attention (scaled_dot_product_attention,
its default backend: the kernels the profile's gpu.sdpa_* rates describe), measured as
`memsim probe --power` measures memsim's own kernels (runtime/probe.cu), so that the
simulator's power-limit model (docs/SIMULATOR.md, "Power limit") also covers traces with the
vendor's attention. Per class (forward; backward), causal bf16, 16 heads x 16K tokens, head
dim 128:
  burst      16 calls after a second of a spinning block (torch.cuda._sleep), each timed
             between CUDA events, the SM clock read after each: the clock of the probed rates;
  duty       about three seconds of calls each followed by ~3x its time of spinning: NVML's
             power (a one-second average) over the busy fraction is the class's power at the
             maximum clock;
  sustained  RUN_MS back to back, NVML read every 20 ms, the medians of the second half.
From them, as the C probe: time ~ clock^-s fitted over the three points; power ~ clock^e from
the duty and sustained powers; the energy per FLOP at the maximum clock; the burst's clock.
Prints the power.attn_* lines of a machine profile; --raw writes every sample's row in the
C probe's raw CSV format. Needs torch with CUDA and the driver's libnvidia-ml.so.1.

usage: probe_power.py [--run-ms MS] [--idle-w W] [--raw FILE]
  --idle-w  the profile's power.idle_w (default: this script's own reading of one spinning
            block back to back)
"""
import argparse
import ctypes
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F


class Nvml:
    """The NVML calls needed, through ctypes (nvml.h: powers in mW, clocks in MHz)."""

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            sys.exit("probe_power.py: nvmlInit failed")
        self.dev = ctypes.c_void_p()
        bus = getattr(torch.cuda.get_device_properties(0), "pci_bus_id", None)
        r = (self.lib.nvmlDeviceGetHandleByPciBusId_v2(bus.encode(), ctypes.byref(self.dev))
             if bus else self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.dev)))
        if r != 0:
            sys.exit("probe_power.py: NVML has no handle for the device (error %d)" % r)

    def _u(self, fn, *args):
        v = ctypes.c_uint()
        return v.value if fn(self.dev, *args, ctypes.byref(v)) == 0 else None

    def power_w(self):
        v = self._u(self.lib.nvmlDeviceGetPowerUsage)
        return None if v is None else v / 1000.0

    def sm_mhz(self):
        return self._u(self.lib.nvmlDeviceGetClockInfo, 1)

    def sm_max_mhz(self):
        return self._u(self.lib.nvmlDeviceGetMaxClockInfo, 1)

    def limit_w(self):
        v = self._u(self.lib.nvmlDeviceGetEnforcedPowerLimit)
        return None if v is None else v / 1000.0


def spin(cycles=2_000_000):
    torch.cuda._sleep(cycles)


def timed_points(nv, fn, n, gap_cycles=0):
    """n calls each between events (then a spin of gap_cycles); medians of the last half."""
    t, f, w = [], [], []
    busy_ms, t_half = 0.0, None
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(n):
        if i == n // 2:
            t_half = time.perf_counter()
        e0.record()
        fn()
        e1.record()
        if gap_cycles:
            spin(gap_cycles)
        e1.synchronize()
        mhz, watt = nv.sm_mhz(), nv.power_w()
        ms = e0.elapsed_time(e1)
        if i >= n // 2:
            t.append(ms)
            f.append(mhz or 0)
            w.append(watt or 0)
            busy_ms += ms
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t_half) * 1e3
    return {"call_ms": statistics.median(t), "clock_mhz": statistics.median(f),
            "power_w": statistics.median(w)}, busy_ms / wall_ms


def sustain(nv, fn, one_ms, run_ms):
    batch = int(25.0 / max(one_ms, 1e-3)) + 1
    pw, ck = [], []
    t0 = time.perf_counter()
    half = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    half_set, calls, last, next_read = False, 0, None, t0
    while (time.perf_counter() - t0) * 1e3 < run_ms:
        if not half_set and (time.perf_counter() - t0) * 1e3 >= run_ms / 2:
            half.record()
            half_set = True
        for _ in range(batch):
            fn()
        if half_set:
            calls += batch
        cur = torch.cuda.Event()
        cur.record()
        if last is not None:
            while not last.query():
                t = time.perf_counter()
                if t >= next_read:
                    if (t - t0) * 1e3 >= run_ms / 2:
                        p, f = nv.power_w(), nv.sm_mhz()
                        if p is not None and f is not None:
                            pw.append(p)
                            ck.append(f)
                    next_read = t + 0.02
                time.sleep(0.001)
        last = cur
    end.record()
    torch.cuda.synchronize()
    return {"call_ms": half.elapsed_time(end) / calls, "clock_mhz": statistics.median(ck),
            "power_w": statistics.median(pw)}


def fit_time_exp(pts):
    xs = [math.log(p["clock_mhz"]) for p in pts]
    ys = [math.log(p["call_ms"]) for p in pts]
    if max(p["clock_mhz"] for p in pts) < 1.03 * min(p["clock_mhz"] for p in pts):
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    return min(max(-sxy / sxx, 0.0), 1.5)


def figures(burst, duty, busy, sus, idle_w, fmax, default_exp=3.0):
    s = fit_time_exp([burst, duty, sus])
    x = sus["clock_mhz"] / fmax
    ds = max(sus["power_w"] - idle_w, 0.0)
    dd = (duty["power_w"] - idle_w) / busy if busy > 0.05 else 0.0
    e = 0.0
    if x < 0.98 and duty["clock_mhz"] >= 0.98 * fmax and dd > ds:
        d = dd
        e = math.log(ds / dd) / math.log(x)
    else:
        d = ds / x ** default_exp if x > 0 else ds
    t1_s = sus["call_ms"] * 1e-3 * x ** s
    return s, e, d * t1_s, burst["clock_mhz"] / fmax


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-ms", type=float, default=6000)
    ap.add_argument("--idle-w", type=float, default=None)
    ap.add_argument("--raw", default=None)
    a = ap.parse_args()
    nv = Nvml()
    fmax, limit = nv.sm_max_mhz(), nv.limit_w()
    B, H, S, D = 1, 16, 16384, 128
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    do = torch.randn_like(o)
    fwd_flops = 2.0 * B * S * S * H * D  # the causal model FLOPs, as memsim's probe counts

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def bwd():
        torch.autograd.grad(o, (q, k, v), do, retain_graph=True)

    rows = []
    idle = sustain(nv, spin, 1.0, a.run_ms)
    rows.append(("idle.sustained", idle))
    idle_w = a.idle_w if a.idle_w is not None else idle["power_w"]
    out = {}
    for name, fn, work in (("attn_fwd", fwd, fwd_flops), ("attn_bwd", bwd, 2.5 * fwd_flops)):
        one, _ = timed_points(nv, fn, 6)
        for _ in range(1000):
            spin()
        burst, _ = timed_points(nv, fn, 16)
        gap = int(3.0 * one["call_ms"] * 1.98e6)
        nduty = int(3000.0 / (4.0 * one["call_ms"])) + 2
        duty, busy = timed_points(nv, fn, nduty, gap)
        sus = sustain(nv, fn, one["call_ms"], a.run_ms)
        for point, p in (("burst", burst), ("duty", duty), ("sustained", sus)):
            rows.append(("%s.%s" % (name, point), p))
            print("probe_power: %-9s %-9s %6.1f W  SM %5.0f MHz  %.4f ms a call"
                  % (name, point, p["power_w"], p["clock_mhz"], p["call_ms"]), file=sys.stderr)
        s, e, j_total, ref = figures(burst, duty, busy, sus, idle_w, fmax)
        out[name] = (j_total / work, s, e, ref, busy)
    if a.raw:
        with open(a.raw, "w") as fh:
            fh.write("what,size_bytes,value,unit\n")
            fh.write("device:%s,0,0,-\n" % torch.cuda.get_device_name(0).replace(",", " "))
            fh.write("torch:%s,0,0,-\n" % torch.__version__)
            for what, p in rows:
                fh.write("power_W:%s,0,%.6g,W\nsm_clock_MHz:%s,0,%.6g,MHz\ncall_ms:%s,0,%.6g,ms\n"
                         % (what, p["power_w"], what, p["clock_mhz"], what, p["call_ms"]))
            for name, (j, s, e, ref, busy) in out.items():
                fh.write("busy_fraction:%s.duty,0,%.6g,fraction\n" % (name, busy))
                fh.write("time_exp:%s,0,%.6g,exponent\nclock_exp:%s,0,%.6g,exponent\n"
                         % (name, s, name, e))
                fh.write("J_per_work:%s,0,%.6g,J/FLOP\n" % (name, j))
            fh.write("power_limit_W,0,%.6g,W\nsm_clock_max_MHz,0,%s,MHz\n" % (limit, fmax))
    for name, (j, s, e, ref, busy) in out.items():
        print("power.%s_j %.4g" % (name, j))
        print("power.%s_time_exp %.4g" % (name, s))
        print("power.%s_clock_exp %.4g" % (name, e))
        print("power.%s_ref_clock %.4g" % (name, ref))


if __name__ == "__main__":
    main()
