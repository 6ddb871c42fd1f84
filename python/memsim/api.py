"""api.py — memsim's main commands as Python calls: simulate, compare, replay and plan run the
C library's own code (libmemsim.so, sim/api.h, loaded by memsim/_lib.py) and return the
results as Python objects, never by reading printed text.

Keyword arguments are the command's options (memsim simulate --help, ...): the name with
dashes as underscores, model_config="cfg.json" for --model-config FILE; True for a flag
(quiet=True), None or False to leave one out; a list for a comma-separated value
(policies=["keep-all", "full-swap"]); dicts for the repeatable KEY=VALUE options (knobs= for
--knob, gen= for --gen); output= for -o. Files the options name (csv=, timeline=, memcsv=,
schedule=, output=) are written as the command writes them. The options that print or fork
(--help, --plot, --breakdown, -j) are not taken. Progress lines go to standard error unless
quiet=True (the default here). A refused option or a run that cannot be made raises
memsim.Error with memsim's message.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from . import _lib
from ._lib import Error

__all__ = ["simulate", "compare", "replay", "plan", "Error", "Result", "Results",
           "ReplayResult", "Plan", "options"]


@dataclass
class Result:
    """One policy's simulated iteration: the fields are the results CSV's columns
    (docs/SIMULATOR.md), with the values the CSV holds (a float is null, None, where the run
    gave no finite number). status is ok, oom, oohm or error (why: failure)."""
    policy: str
    allocator: str
    model: str
    machine: str
    seq: int
    batch: int
    tp: int
    cp: int
    dp: int
    status: str
    iter_time_s: float
    mfu: float
    tgs: float
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    peak_active_bytes: int
    fragmentation: float
    host_peak_bytes: int
    compute_busy_s: float
    h2d_busy_s: float
    d2h_busy_s: float
    alloc_retries: int
    alloc_retries_per_iter: int
    host_busy_s: float
    recompute_s: float
    stall_s: float
    alloc_time_s: float
    host_node_peak_bytes: int
    model_flops: float
    num_allocs: int
    num_frees: int
    num_ooms: int
    num_segment_allocs: int
    num_segment_frees: int
    num_syncs: int
    num_splits: int
    num_stitches: int
    num_new_chunks: int
    num_stitch_frees: int
    mapped_twice_bytes: int
    num_maps: int
    num_unmaps: int
    peak_requested_bytes: int
    peak_inactive_split_bytes: int
    failure: str
    issue_ahead: int
    issue_busy_s: float
    issue_waits: int
    deferred_frees: int
    peak_params_bytes: int
    peak_grads_bytes: int
    peak_optstates_bytes: int
    peak_chunks_bytes: int
    peak_act_skel_bytes: int
    peak_act_trans_bytes: int
    peak_workspace_bytes: int
    peak_rbuf_bytes: int
    peak_idle_bytes: int
    peak_staging_bytes: int
    peak_other_bytes: int
    peak_kinds_at_failure: int

    def to_dict(self):
        return dataclasses.asdict(self)


RESULT_FIELDS = [f.name for f in dataclasses.fields(Result)]


class Results(list):
    """compare's rows in the order of policies, with the machine the document names and the
    exit status the command would give (the first error row's, 0 when none)."""

    def __init__(self, rows, machine, exit_status):
        super().__init__(rows)
        self.machine = machine
        self.exit_status = exit_status

    def fastest(self):
        """The fastest row that fits (status ok), or None."""
        ok = [r for r in self if r.status == "ok"]
        return min(ok, key=lambda r: r.iter_time_s) if ok else None


@dataclass
class ReplayResult:
    """One allocator's replay of a trace's alloc/free program (sim/replay.h). stats holds the
    allocator's counters at the end; oom the failing request (index, line, id, bytes,
    stream, dump) or None; pytorch the numbers PyTorch recorded for an imported trace, or
    None."""
    allocator: str
    status: str
    events: int
    allocs: int
    frees: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    peak_active_bytes: int
    peak_requested_bytes: int
    device_peak_bytes: int
    alloc_time_us: float
    sync_calls: int
    recorded_addresses: int
    recorded_addresses_used: int
    segment_bytes: List[int] = field(default_factory=list)
    stats: Dict[str, int] = field(default_factory=dict)
    oom: Optional[dict] = None
    pytorch: Optional[dict] = None

    def to_dict(self):
        return dataclasses.asdict(self)


@dataclass
class Plan:
    """A policy's plan (planners/plan.h): text is the plan file as memsim plan writes it;
    tensors, layers and offsets the decisions it lists (each a dict), knobs its free-form
    knobs. save(path) writes the file, which memsim.simulate(plan=path) simulates."""
    policy: str
    allocator: str
    default_decision: str
    arena_bytes: int
    knobs: Dict[str, str]
    tensors: List[dict]
    layers: List[dict]
    offsets: List[dict]
    text: str

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.text)


# keyword -> option where the name does not follow the dashes rule
_RENAMED = {"knobs": "--knob", "gen": "--gen", "output": "-o", "allocators": "--allocator"}


def _value(v):
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)


def options(**kwargs):
    """The option strings the keyword arguments stand for (what the call passes to C)."""
    out = []
    for key, v in kwargs.items():
        if v is None or v is False:
            continue
        opt = _RENAMED.get(key, "--" + key.replace("_", "-"))
        if isinstance(v, dict):
            for k, x in v.items():
                out += [opt, "%s=%s" % (k, x)]
        elif v is True:
            out.append(opt)
        else:
            out += [opt, _value(v)]
    return out


def _rows(doc):
    return [Result(**{k: row[k] for k in RESULT_FIELDS}) for row in doc["results"]]


def simulate(model=None, *, quiet=True, **kwargs):
    """memsim simulate: one policy (policy=, default keep-all) or a plan file (plan=) on a
    workload and a machine. Returns a Result."""
    doc = _lib.call("simulate", options(model=model, quiet=quiet, **kwargs))
    return _rows(doc)[0]


def _pandas():
    try:
        import pandas
    except ImportError:
        return None
    return pandas


def compare(model=None, *, policies=None, frame=None, quiet=True, **kwargs):
    """memsim compare: several policies on one workload (policies=, default keep-all,
    full-recompute, full-swap). A policy that cannot run gets a row with status error. Returns
    a pandas DataFrame (one row per policy, the CSV's columns; attrs machine and exit_status)
    when pandas is installed, else Results, a list of Result; frame=False always gives the
    list, frame=True the DataFrame (Error without pandas)."""
    doc = _lib.call("compare", options(model=model, policies=policies, quiet=quiet, **kwargs))
    rows = Results(_rows(doc), doc["machine"], doc["exit_status"])
    pd = _pandas() if frame is not False else None
    if frame and pd is None:
        raise Error("compare(frame=True) needs pandas, which is not installed")
    if pd is None:
        return rows
    df = pd.DataFrame([r.to_dict() for r in rows], columns=RESULT_FIELDS)
    df.attrs["machine"] = rows.machine
    df.attrs["exit_status"] = rows.exit_status
    return df


def replay(trace, *, allocators=None, **kwargs):
    """memsim replay: a trace's alloc/free program through one or more allocators
    (allocators=["caching", "expandable"], default caching) over the simulated device.
    Returns a list of ReplayResult, one per allocator; an oom is a result (status oom)."""
    doc = _lib.call("replay", options(trace=trace, allocators=allocators, **kwargs))
    return [ReplayResult(**r) for r in doc["results"]]


def plan(model=None, *, quiet=True, **kwargs):
    """memsim plan: a policy's planner on a workload (policy=); output= also writes the plan
    file. Returns a Plan."""
    doc = _lib.call("plan", options(model=model, quiet=quiet, **kwargs))
    return Plan(**doc["plan"])
