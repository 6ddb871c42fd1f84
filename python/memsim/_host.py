"""_host.py — each captured op's host (CPU) time, from a torch.profiler run of a plain step:
the step after the captured one, which runs without capture's dispatch mode and hooks (these
run every op through Python, so the captured step's own host gaps are not the program's).
The plain step's launches are matched to the captured ops in program order; an op's host
time is the host time from the previous op's issue to its own (its last kernel launch
returning), less the time the host spent blocked in synchronizing calls (the GPU's work it
waited for) and in the driver's allocation calls (memsim's allocator model charges those).
An op after whose issue the host waited for the GPU (.item(), nonzero, a copy to pageable
memory) is marked host_sync. Used by memsim.capture (_capture.py); knows no trace format.

Two ways to match, the first that applies:
  launches  (CUDA) the captured step's kernel launches inside each op's record_function range
            memsim#ID against the plain step's launches by the launched activity's name,
            aligned as the longest common subsequence of the two (_align);
  ops       (CPU, or CUDA without launch events) the captured ops' aten names against the
            plain step's aten op events, in order; an op's issue is its last launch inside
            the matched event, on CPU the event's end.
The plain step is profiled with CUDA activity alone for the first (CUPTI's runtime and GPU
activity records cost the host least) and with CPU activity too for the second (every aten
op event, nested ones included, costs the host time of its own)."""

import bisect

# CUDA runtime / driver calls, as kineto names them
_LAUNCH_PREFIX = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch")
_ASYNC_COPY = ("cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemcpy3DAsync", "cudaMemsetAsync",
               "cudaMemcpyPeerAsync", "cuMemcpyAsync", "cuMemcpyDtoHAsync_v2",
               "cuMemcpyHtoDAsync_v2", "cuMemsetD8Async", "cuMemsetD32Async")
# calls that block the host until the GPU has done earlier work (CUDA Runtime API,
# "API synchronization behavior"; PyTorch's .item() is a copy then cudaStreamSynchronize)
_SYNC = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
         "cudaMemcpy", "cudaMemcpy2D", "cudaMemset", "cuStreamSynchronize", "cuCtxSynchronize",
         "cuEventSynchronize", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2")
# the driver's allocation calls: memsim's allocator model charges their latency itself
_ALLOC = ("cudaMalloc", "cudaFree", "cudaMallocHost", "cudaHostAlloc", "cudaFreeHost",
          "cudaHostRegister", "cudaHostUnregister", "cuMemAlloc_v2", "cuMemFree_v2",
          "cuMemCreate", "cuMemMap", "cuMemUnmap", "cuMemRelease", "cuMemSetAccess",
          "cuMemAddressReserve", "cuMemAddressFree")
WINDOW = 256           # how far ahead a match is looked for before an op is left unmatched
LOOKAHEAD = 4          # launches compared after a far match before it is taken (_next_match)
MAX_EDITS = 2000       # launches either step has and the other lacks, at most, for _align


def _is_launch(name):
    return name.startswith(_LAUNCH_PREFIX) or name in _ASYNC_COPY


class Call:
    """One CUDA runtime or driver call of a profile: host times in microseconds, the name
    of the GPU activity it made (None when the profile links none)."""
    __slots__ = ("start", "end", "name", "activity")

    def __init__(self, start, end, name, activity):
        self.start, self.end, self.name, self.activity = start, end, name, activity

    def blocking(self):
        """Waits for the GPU: a synchronize, a blocking copy, or an async copy to or from
        pageable memory, which CUDA makes synchronous for the host."""
        if self.name in _SYNC:
            return True
        return self.name in _ASYNC_COPY and self.activity is not None and \
            "Pageable" in self.activity


class Profile:
    """What host timing needs of one profiler run: CUDA calls in host time order, aten op
    events, record_function ranges memsim#ID, and the GPU activities' end times by the
    call that made them."""

    def __init__(self, events):
        self.calls, self.aten, self.ranges = [], [], {}
        self.gpu_end = {}              # call index -> end of its GPU activity (host clock)
        self.t0 = None
        dev = {}
        cpu = []
        for k, e in enumerate(events):
            try:
                tr = e.time_range
                s, t = float(tr.start), float(tr.end)
            except Exception:
                continue
            if _is_device(e):
                dev.setdefault(getattr(e, "id", None), []).append((e.name, t, s))
                continue
            cpu.append((s, t, e, _order(e, k)))
            if self.t0 is None or s < self.t0:
                self.t0 = s
        for s, t, e, order in cpu:
            name = e.name
            if name.startswith("memsim#"):
                try:
                    self.ranges[int(name[7:])] = (s, t)
                except ValueError:
                    pass
            elif name.startswith("aten::"):
                self.aten.append((e, name[6:]))
            elif name.startswith(("cuda", "cu")) and not name.startswith("cudnn"):
                act = dev.get(getattr(e, "id", None))
                self.calls.append((s, order, t, name, act))
        self.aten = _program_order(cpu, self.aten)
        self.calls.sort(key=lambda c: (c[0], c[1]))     # by start, then as made (above)
        out = []
        for i, (s, _, t, name, act) in enumerate(self.calls):
            out.append(Call(s, t, name, act[0][0] if act else None))
            if act:
                self.gpu_end[i] = max(x[1] for x in act)
        self.gpu_start = {i: min(x[2] for x in act)
                          for i, (_s, _o, _t, _n, act) in enumerate(self.calls) if act}
        self.calls = out
        self._index()

    def _index(self):
        self.starts = [c.start for c in self.calls]
        self.linked = bool(self.gpu_end)

    def to_dict(self):
        """What host_times reads of this profile, as JSON-ready lists (dump_profiles)."""
        return {"t0": self.t0,
                "calls": [[c.start, c.end, c.name, c.activity, self.gpu_start.get(i),
                           self.gpu_end.get(i)] for i, c in enumerate(self.calls)],
                "ranges": {str(k): list(v) for k, v in sorted(self.ranges.items())},
                "aten": [list(a) for a in self.aten]}

    @classmethod
    def from_dict(cls, d):
        """The profile to_dict wrote (load_profiles); ValueError where it is not one."""
        try:
            p = cls.__new__(cls)
            p.t0 = d["t0"]
            p.calls, p.gpu_start, p.gpu_end = [], {}, {}
            for i, (s, t, name, act, gs, ge) in enumerate(d["calls"]):
                p.calls.append(Call(float(s), float(t), str(name), act))
                if ge is not None:
                    p.gpu_start[i], p.gpu_end[i] = float(gs), float(ge)
            p.ranges = {int(k): (float(v[0]), float(v[1])) for k, v in d["ranges"].items()}
            p.aten = [(float(a[0]), float(a[1]), str(a[2])) for a in d["aten"]]
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise ValueError("not a memsim host profile (%s)" % e)
        p._index()
        return p

    def launches(self):
        return [i for i, c in enumerate(self.calls) if _is_launch(c.name)]


def _program_order(cpu, aten):
    """The aten events [(start, end, name)] in program order: by start, and on the same
    microsecond (the clock's tick) in the order the profiler made them (its event ids).
    Times alone cannot order two ops shorter than a tick that start together: one seems to
    hold the other (the profiler's own nesting, cpu_parent, says so too), and a sort by
    end, length or name put them one way round in some runs and the other in others."""
    info = {id(e): (s, t, order) for s, t, e, order in cpu}
    out = sorted((info[id(e)][0], info[id(e)][2], info[id(e)][1], n) for e, n in aten)
    return [(s, t, n) for s, _, t, n in out]


def _order(e, k):
    """An event's place among events of the same times: the profiler's id where it has
    one (made in the order the events began), else its place in the list."""
    i = getattr(e, "id", None)
    return (0, i, k) if isinstance(i, int) else (1, k, k)


def _is_device(e):
    dt = getattr(e, "device_type", None)
    return dt is not None and "CPU" not in str(dt)


def _key(call):
    return call.activity if call.activity is not None else call.name


def _match_launches(cap, plain, ops):
    """{op id: index of its issuing call in plain.calls} by the launches' order and names."""
    cl = cap.launches()
    ranges = sorted((cap.ranges[o.id][0], cap.ranges[o.id][1], o.id) for o in ops
                    if o.id in cap.ranges)
    seq = []                                  # (op id, captured call) in launch order
    k = 0
    for s, t, oid in ranges:
        while k < len(cl) and cap.calls[cl[k]].start < s:
            k += 1
        while k < len(cl) and cap.calls[cl[k]].start <= t:
            seq.append((oid, cap.calls[cl[k]]))
            k += 1
    pl = plain.launches()
    ck = [_key(c) for _, c in seq]
    pk = [_key(plain.calls[p]) for p in pl]
    pairs = _align(ck, pk)
    if pairs is None:                         # too far apart for the alignment: greedily
        pairs, j = [], 0
        for i in range(len(ck)):
            jj = _next_match(ck, pk, i, j)
            if jj is not None:
                pairs.append((i, jj))
                j = jj + 1
    issue = {}
    for i, jj in pairs:
        issue[seq[i][0]] = pl[jj]             # the op's last launch wins
    return issue, len(seq)


def _align(a, b, max_edits=MAX_EDITS):
    """The longest common subsequence of the launch keys a (captured) and b (plain) as
    [(i, j)] in order, by Myers' O((N + M) D) difference algorithm (E. W. Myers, "An O(ND)
    difference algorithm and its variations", Algorithmica 1, 1986); None where more than
    max_edits insertions and deletions separate them. The captured step launches kernels
    the plain one does not (under the capture's dispatch mode PyTorch adds index checks and
    copies: 88 of 1,329 launches in the Mixtral-style MoE on the H200), and some of them
    have the names of kernels the plain step launches elsewhere: a greedy match jumps to
    those and leaves every op in between unmatched; the alignment cannot."""
    n, m = len(a), len(b)
    off = max_edits + 1
    v = [0] * (2 * max_edits + 3)
    trace = []                                # per d: v[off-d-1 .. off+d+1] before step d
    end = None
    for d in range(max_edits + 1):
        trace.append(v[off - d - 1: off + d + 2])
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[off + k - 1] < v[off + k + 1]):
                x = v[off + k + 1]            # down: a plain launch the captured lacks
            else:
                x = v[off + k - 1] + 1        # right: a captured launch the plain lacks
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            v[off + k] = x
            if x >= n and y >= m:
                end = d
                break
        if end is not None:
            break
    if end is None:
        return None
    pairs = []
    x, y = n, m
    for d in range(end, -1, -1):
        t = trace[d]                          # t[i] is v[k] for k = i - d - 1
        k = x - y
        if k == -d or (k != d and t[k - 1 + d + 1] < t[k + 1 + d + 1]):
            pk = k + 1
        else:
            pk = k - 1
        px = t[pk + d + 1] if d > 0 else 0
        py = px - pk if d > 0 else 0
        while x > px and y > py:
            x, y = x - 1, y - 1
            pairs.append((x, y))
        x, y = px, py
    pairs.reverse()
    return pairs


def _agree(ck, pk, i, j, n=LOOKAHEAD):
    """How many of the n captured launches from i match the plain ones from j, in order."""
    return sum(1 for d in range(n) if i + d < len(ck) and j + d < len(pk) and
               ck[i + d] == pk[j + d])


def _next_match(ck, pk, i, j):
    """Where captured launch i is in the plain step, from j on: the nearest launch of its
    kind within WINDOW, unless jumping there loses the order. A launch the plain step does
    not have (or has elsewhere) would otherwise pull the match far ahead to a later kernel of
    the same name, and every op in between would go unmatched: a far match is taken only
    where the launches after it agree at least as well as they do if launch i is skipped."""
    for jj in range(j, min(len(pk), j + WINDOW)):
        if pk[jj] != ck[i]:
            continue
        if jj == j or _agree(ck, pk, i, jj) >= _agree(ck, pk, i + 1, j):
            return jj
        return None
    return None


def _match_ops(plain, ops, cuda):
    """{op id: issue time} by the aten names' order: the op's last launch inside its matched
    event (CUDA), or the event's end (CPU)."""
    names = {o.aten for o in ops}
    ev = [e for e in plain.aten if e[2] in names]     # views and helpers are never ops
    starts = plain.starts
    issue, j = {}, 0
    for o in ops:
        for jj in range(j, min(len(ev), j + WINDOW)):
            if ev[jj][2] == o.aten:
                s, t = ev[jj][0], ev[jj][1]
                j = jj + 1
                if not cuda:
                    issue[o.id] = t
                    break
                lo, hi = bisect.bisect_left(starts, s), bisect.bisect_right(starts, t)
                last = [i for i in range(lo, hi) if _is_launch(plain.calls[i].name)]
                if last:
                    issue[o.id] = plain.calls[last[-1]].end
                break
    return issue


def _typical_launch_us(plain):
    """The median duration of the profile's launch calls: what a launch costs the host
    when CUDA's launch queue has room."""
    d = sorted(c.end - c.start for c in plain.calls if c.name.startswith(_LAUNCH_PREFIX))
    return d[len(d) // 2] if d else 0.0


def _blocked(plain, lo, hi, busy, typical=None):
    """The host's blocked time among the calls starting in (lo, hi]: the allocation calls
    whole, and of each blocking call the part while the GPU still ran earlier work (busy:
    per call, the end of the GPU work launched before it; None when the profile links no
    activity: the whole call). Returns (microseconds, start of the first blocking call or
    None, start of the first launch or None)."""
    us, first_block, first_launch = 0.0, None, None
    for i in range(bisect.bisect_right(plain.starts, lo), bisect.bisect_right(plain.starts, hi)):
        c = plain.calls[i]
        if first_launch is None and _is_launch(c.name):
            first_launch = c.start
        if typical and c.name.startswith(_LAUNCH_PREFIX) and c.end - c.start > 4 * typical:
            # a launch that outlasts four typical ones waited for a free slot in CUDA's
            # launch queue, i.e. for the GPU's earlier work: the excess is not the host's
            us += c.end - c.start - typical
        elif c.name in _ALLOC:
            us += c.end - c.start
        elif c.blocking():
            if first_block is None:
                first_block = c.start
            if busy is None:
                us += c.end - c.start
            else:
                us += max(0.0, min(c.end, busy[i]) - c.start)
    return us, first_block, first_launch


def _busy_before(plain):
    """Per call: the end of the GPU work launched before it (host clock)."""
    if not plain.linked:
        return None
    out, m = [], float("-inf")
    for i, c in enumerate(plain.calls):
        out.append(m)
        if i in plain.gpu_end and plain.gpu_end[i] > m:
            m = plain.gpu_end[i]
    return out


def _calls_in(plain, lo, hi):
    """How many CUDA calls start in (lo, hi]."""
    return bisect.bisect_right(plain.starts, hi) - bisect.bisect_right(plain.starts, lo)


def host_times(cap_events, plain_events, ops, cuda, call_cost_us=0.0):
    """Sets each op's host_us (>= 0) and host_sync from the plain step's profile; ops the
    match misses get 0 (their host time goes to the next matched op). call_cost_us: what the
    profiler itself adds to the host per CUDA call it records (profiler_call_cost_us),
    taken off each op per call in its span. Returns a dict of what was done: method,
    matched, ops, syncs, step_us (the plain step's host span, the profiler's cost left in)."""
    plain = plain_events if isinstance(plain_events, Profile) else Profile(plain_events)
    cap = cap_events if isinstance(cap_events, Profile) or cap_events is None \
        else Profile(cap_events)
    method, issue_t = "none", {}
    if cuda and cap is not None and cap.launches() and plain.launches():
        idx, n = _match_launches(cap, plain, ops)
        if idx:
            method = "launches"
            issue_t = {oid: plain.calls[i].end for oid, i in idx.items()}
    if method == "none" and plain.aten:
        issue_t = _match_ops(plain, ops, cuda)
        if issue_t:
            method = "ops"
    busy = _busy_before(plain)
    typical = _typical_launch_us(plain) if cuda else 0.0
    prev = plain.t0 if plain.t0 is not None else 0.0
    first = prev
    last_op = None
    for o in ops:
        o.host_us, o.host_sync = 0.0, 0
    for o in ops:
        t = issue_t.get(o.id)
        if t is None:
            continue
        blocked, blk, launch = _blocked(plain, prev, t, busy, typical) if cuda \
            else (0.0, None, None)
        if blk is not None:
            # a blocking call before the op's first launch waited for the previous op (and
            # all before it); one from its first launch on, for this op's own work
            if (launch is None or blk < launch) and last_op is not None:
                last_op.host_sync = 1
            else:
                o.host_sync = 1
        cost = call_cost_us * _calls_in(plain, prev, t) if cuda else 0.0
        o.host_us = max(0.0, (t - prev) - blocked - cost)
        if t > prev:
            prev = t
        last_op = o
    return {"method": method, "matched": len(issue_t), "ops": len(ops),
            "syncs": sum(1 for o in ops if o.host_sync), "step_us": max(0.0, prev - first)}


def profiler_call_cost_us(torch, device, activities, n=2000):
    """What torch.profiler with these activities adds to the host per CUDA kernel launch it
    records: a loop of n launches of a one-element in-place add timed on the host with and
    without the profiler (the GPU keeps up: one element), the difference per launch, the
    median of three; never below 0. The plain step's host times are measured under the same
    profiler, so each op's share of this is the instrument's, not the program's."""
    import time
    from torch.profiler import profile
    x = torch.zeros(1, device=device)

    def loop():
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(n):
            x.add_(1.0)
        t1 = time.perf_counter()
        torch.cuda.synchronize(device)
        return (t1 - t0) * 1e6 / n

    loop()
    diffs = []
    for _ in range(3):
        plain = loop()
        with profile(activities=activities):
            prof = loop()
        diffs.append(prof - plain)
    diffs.sort()
    return max(0.0, diffs[1])


PROFILES_VERSION = 1


def dump_profiles(path, cap, plain, ops):
    """Writes the two profiles host_times matched (Profile objects) and the ops (id, aten
    name, phase) to PATH as gzip'd JSON, for studying the match away from the GPU
    (load_profiles, then host_times on them); written to a temporary name, then renamed."""
    import gzip
    import json
    import os
    doc = {"format": "memsim-host-profiles", "version": PROFILES_VERSION,
           "captured": cap.to_dict() if cap is not None else None,
           "plain": plain.to_dict(),
           "ops": [[o.id, o.aten, o.phase] for o in ops]}
    tmp = "%s.tmp%d" % (path, os.getpid())
    try:
        with gzip.open(tmp, "wt") as f:
            json.dump(doc, f, separators=(",", ":"))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


class ProfOp:
    """An op as load_profiles gives it back: what host_times reads and sets."""
    __slots__ = ("id", "aten", "phase", "host_us", "host_sync")

    def __init__(self, oid, aten, phase):
        self.id, self.aten, self.phase = oid, aten, phase
        self.host_us, self.host_sync = 0.0, 0


def load_profiles(path):
    """(captured Profile or None, plain Profile, [ProfOp]) from a dump_profiles file;
    ValueError naming the file where it is not one."""
    import gzip
    import json
    try:
        with gzip.open(path, "rt") as f:
            doc = json.load(f)
        if doc.get("format") != "memsim-host-profiles":
            raise ValueError("no memsim-host-profiles header")
        if doc.get("version") != PROFILES_VERSION:
            raise ValueError("version %r, this reads %d" % (doc.get("version"),
                                                           PROFILES_VERSION))
        cap = Profile.from_dict(doc["captured"]) if doc["captured"] is not None else None
        plain = Profile.from_dict(doc["plain"])
        ops = [ProfOp(int(i), str(a), str(p)) for i, a, p in doc["ops"]]
    except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError("%s: %s" % (path, e))
    return cap, plain, ops
