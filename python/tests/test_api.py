"""test_api.py — tests of the Python bindings (memsim/api.py over libmemsim.so): what
simulate, compare, plan and replay return equals what the memsim command writes for the same
options (its results CSV, its plan file, its replay report), since both come from the same C
structs; refused options raise memsim.Error with memsim's message; the library is found, or
its absence explained. Needs no torch. Run by tests/check_python_api.sh (make check) as TAP
with --tap, or with python3 -m unittest. MEMSIM names the memsim command (default: the build
tree's sim/memsim), MEMSIM_LIB the library."""

import csv
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import memsim  # noqa: E402
from memsim import api  # noqa: E402

SRC = os.path.dirname(os.path.dirname(HERE))
MEMSIM = os.environ.get("MEMSIM") or os.path.join(SRC, "sim", "memsim")
TRACE = os.path.join(SRC, "experiments", "validate", "traces", "h100-sxm", "real-8K.trace.gz")
W = dict(model="gpt2-1b", seq=1024, batch=8, machine="h100-sxm")
WORKLOAD = ["--model", "gpt2-1b", "--seq", "1024", "--batch", "8", "--machine", "h100-sxm"]
FIELD_TYPES = {f.name: f.type for f in api.dataclasses.fields(api.Result)}


def memsim_cmd(*args):
    """Runs the memsim command; returns its standard output."""
    p = subprocess.run([MEMSIM] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if p.returncode not in (0, 1):
        raise AssertionError("memsim %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr))
    return p.stdout


def csv_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class Tmp(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="memsim-py-api-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def assertRowEqualsCsv(self, r, row):
        """Every field equals the CSV's text read as the field's type: exactly, since the CSV
        writes each double so that it reads back the same."""
        self.assertEqual(list(row), api.RESULT_FIELDS)
        for name, text in row.items():
            want = FIELD_TYPES[name](text) if text not in ("nan", "inf", "-inf") else None
            self.assertEqual(getattr(r, name), want, "%s: %r vs the CSV's %r" %
                             (name, getattr(r, name), text))


class TestAgainstCommand(Tmp):
    def test_simulate_equals_csv(self):
        memsim_cmd("simulate", *WORKLOAD, "--policy", "full-swap", "--alpha", "0.5",
                   "--knob", "record_stream=1", "--csv", self.path("c.csv"), "--quiet")
        r = memsim.simulate(policy="full-swap", alpha=0.5, knobs={"record_stream": 1}, **W)
        self.assertIsInstance(r, memsim.api.Result)
        self.assertEqual((r.policy, r.status), ("full-swap", "ok"))
        self.assertGreater(r.iter_time_s, 0)
        self.assertRowEqualsCsv(r, csv_rows(self.path("c.csv"))[0])

    def test_simulate_csv_option_writes_the_same_file(self):
        memsim_cmd("simulate", *WORKLOAD, "--policy", "memo", "--csv", self.path("cmd.csv"),
                   "--quiet")
        memsim.simulate(policy="memo", csv=self.path("api.csv"), **W)
        with open(self.path("cmd.csv")) as a, open(self.path("api.csv")) as b:
            self.assertEqual(a.read(), b.read())

    def test_compare_equals_csv_with_an_error_row(self):
        # memferry plans one GPU: on 32 GPUs its row is an error and the others still run
        opts = ["--model", "gpt-7b", "--seq", "64K", "--tp", "4", "--cp", "2", "--dp", "4"]
        pols = ["keep-all", "memferry", "full-swap"]
        memsim_cmd("compare", *opts, "--policies", ",".join(pols), "--csv", self.path("c.csv"),
                   "--quiet")
        rs = memsim.compare("gpt-7b", seq="64K", tp=4, cp=2, dp=4, policies=pols, frame=False)
        self.assertEqual([r.policy for r in rs], pols)
        self.assertEqual(rs[1].status, "error")
        self.assertTrue(rs[1].failure)
        self.assertEqual(rs.exit_status, 1)
        self.assertEqual(rs.machine["name"], "a800-8gpu")
        for r, row in zip(rs, csv_rows(self.path("c.csv"))):
            self.assertRowEqualsCsv(r, row)

    def test_compare_generator_knobs(self):
        memsim_cmd("compare", *WORKLOAD, "--gen", "framework=megatron", "--policies",
                   "keep-all,full-recompute", "--csv", self.path("c.csv"), "--quiet")
        rs = memsim.compare(gen={"framework": "megatron"}, policies=["keep-all", "full-recompute"],
                            frame=False, **W)
        rows = csv_rows(self.path("c.csv"))
        self.assertEqual(len(rs), len(rows))
        for r, row in zip(rs, rows):
            self.assertRowEqualsCsv(r, row)
        self.assertIs(rs.fastest(), min(rs, key=lambda r: r.iter_time_s))

    def test_plan_is_the_command_plan_and_simulates_the_same(self):
        text = memsim_cmd("plan", *WORKLOAD, "--policy", "full-recompute")
        p = memsim.plan(policy="full-recompute", output=self.path("o.plan"), **W)
        self.assertEqual(p.text, text)
        with open(self.path("o.plan")) as f:
            self.assertEqual(f.read(), text)
        self.assertEqual(p.policy, "full-recompute")
        self.assertTrue(any(t["decision"] == "recompute" for t in p.tensors))
        p.save(self.path("s.plan"))
        memsim_cmd("simulate", *WORKLOAD, "--plan", self.path("s.plan"), "--csv",
                   self.path("c.csv"), "--quiet")
        r = memsim.simulate(plan=self.path("s.plan"), **W)
        self.assertRowEqualsCsv(r, csv_rows(self.path("c.csv"))[0])

    def test_replay_equals_the_command_report(self):
        out = memsim_cmd("replay", "--trace", TRACE, "--allocator", "caching,expandable",
                         "--segments")
        rs = memsim.replay(TRACE, allocators=["caching", "expandable"])
        self.assertEqual([r.allocator for r in rs], ["caching", "expandable"])
        blocks = out.split("== ")[1:]
        for r, block in zip(rs, blocks):
            lines = block.splitlines()
            field = {ln[:18].strip(): ln[18:].split()[0] for ln in lines if len(ln) > 18}
            self.assertEqual(r.status, field["status"])
            self.assertEqual(r.events, int(field["events"]))
            self.assertEqual(r.peak_allocated_bytes, int(field["peak allocated"]))
            self.assertEqual(r.peak_reserved_bytes, int(field["peak reserved"]))
            self.assertEqual(r.peak_active_bytes, int(field["peak active"]))
            self.assertEqual(r.stats["num_segment_allocs"], int(field["segments"]))
            segs = [int(ln.split()[2]) for ln in lines if ln.startswith("segment ")]
            self.assertEqual(r.segment_bytes, segs)

    def test_replay_oom_is_a_result(self):
        (r,) = memsim.replay(TRACE, capacity="1GiB")
        self.assertEqual(r.status, "oom")
        self.assertGreater(r.oom["bytes"], 0)

    def test_fields_are_the_csv_columns(self):
        memsim_cmd("simulate", *WORKLOAD, "--csv", self.path("c.csv"), "--quiet")
        with open(self.path("c.csv")) as f:
            self.assertEqual(f.readline().strip().split(","), api.RESULT_FIELDS)


class TestExample(unittest.TestCase):
    def test_the_example_runs(self):
        p = subprocess.run([sys.executable, os.path.join(SRC, "python", "examples", "what_if.py")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("fastest that fits: ", p.stdout)
        self.assertIn("memsim.Error: unknown policy 'keep-al'", p.stdout)


class TestErrors(unittest.TestCase):
    def test_bad_value(self):
        with self.assertRaises(memsim.Error) as c:
            memsim.simulate(seq="abc")
        self.assertEqual(str(c.exception), "--seq 'abc': expected a positive count")
        self.assertEqual(c.exception.status, "invalid argument")

    def test_unknown_keyword_names_the_closest_option(self):
        with self.assertRaises(memsim.Error) as c:
            memsim.compare(polices=["keep-all"])
        self.assertIn("unknown option '--polices'; did you mean '--policies'?", str(c.exception))

    def test_unknown_policy_and_missing_file(self):
        with self.assertRaises(memsim.Error) as c:
            memsim.compare(policies=["keep-all", "nosuch"])
        self.assertIn("unknown policy 'nosuch'", str(c.exception))
        with self.assertRaises(memsim.Error) as c:
            memsim.replay("/nonexistent/t.trace")
        self.assertIn("/nonexistent/t.trace", str(c.exception))

    def test_options_map_one_to_one(self):
        self.assertEqual(api.options(model_config="c.json", seq=4096, policies=["a", "b"],
                                     knobs={"k": "v"}, quiet=True, alpha=None, output="p"),
                         ["--model-config", "c.json", "--seq", "4096", "--policies", "a,b",
                          "--knob", "k=v", "--quiet", "-o", "p"])


def have_pandas():
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


class TestFrame(unittest.TestCase):
    def test_a_list_without_pandas(self):
        if have_pandas():
            self.skipTest("pandas is installed (the DataFrame test runs)")
        self.assertIsInstance(memsim.compare(policies=["keep-all"], **W), api.Results)
        with self.assertRaises(memsim.Error):
            memsim.compare(policies=["keep-all"], frame=True, **W)

    def test_a_frame_with_pandas(self):
        if not have_pandas():
            self.skipTest("pandas is not installed")
        rows = memsim.compare(policies=["keep-all", "full-swap"], frame=False, **W)
        df = memsim.compare(policies=["keep-all", "full-swap"], **W)
        self.assertEqual(list(df.columns), api.RESULT_FIELDS)
        self.assertEqual(df.attrs["exit_status"], rows.exit_status)
        for i, r in enumerate(rows):
            self.assertEqual(df.iloc[i].to_dict(), r.to_dict())


class TestLoading(unittest.TestCase):
    def run_python(self, code, env, cwd):
        return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True)

    def test_memsim_lib_that_cannot_load(self):
        env = dict(os.environ, MEMSIM_LIB="/nonexistent/libmemsim.so", PYTHONPATH=os.path.dirname(HERE))
        p = self.run_python("import memsim; memsim.simulate()", env, HERE)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("MEMSIM_LIB=/nonexistent/libmemsim.so: cannot load it", p.stderr)

    def test_not_found_says_where_it_looked(self):
        import ctypes.util
        if ctypes.util.find_library("memsim") or os.path.exists("/usr/local/lib/libmemsim.so"):
            self.skipTest("a libmemsim.so is installed on this system")
        with tempfile.TemporaryDirectory() as d:
            shutil.copytree(os.path.join(os.path.dirname(HERE), "memsim"),
                            os.path.join(d, "pkg", "memsim"),
                            ignore=shutil.ignore_patterns("__pycache__", "*.so"))
            env = {k: v for k, v in os.environ.items() if k not in ("MEMSIM_LIB", "LD_LIBRARY_PATH")}
            env["PYTHONPATH"] = os.path.join(d, "pkg")
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            p = self.run_python("import memsim; memsim.plan()", env, d)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("memsim's C library (libmemsim.so) was not found", p.stderr)
        self.assertIn("MEMSIM_LIB", p.stderr)
        self.assertIn("the build tree", p.stderr)


class TapResult(unittest.TestResult):
    """One TAP line per test, for Automake's tap-driver."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def line(self, test, ok, note=""):
        self.n += 1
        print("%s %d - %s%s" % ("ok" if ok else "not ok", self.n, test.id().split(".", 1)[-1], note))
        sys.stdout.flush()

    def addSuccess(self, test):
        super().addSuccess(test)
        self.line(test, True)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.line(test, False)
        print("".join("# " + ln + "\n" for ln in self._exc_info_to_string(err, test).splitlines()))

    def addError(self, test, err):
        super().addError(test, err)
        self.line(test, False)
        print("".join("# " + ln + "\n" for ln in self._exc_info_to_string(err, test).splitlines()))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.line(test, True, " # SKIP " + reason)


if __name__ == "__main__":
    if "--tap" in sys.argv:
        suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
        result = TapResult()
        suite.run(result)
        print("1..%d" % result.n)
        sys.exit(0 if result.wasSuccessful() else 1)
    unittest.main()
