"""test_convert.py — memsim.convert and `python -m memsim convert`: a snapshot pickle as
torch.cuda.memory._dump_snapshot() writes it (the snapshot dict pickled) becomes JSON that
`memsim trace import --from pytorch-snapshot` reads; corrupted or hostile input gets
'FILE: problem' and exit status 3 (4 for a missing file), never a traceback; the C
importer's message for a pickle names the command. Needs no PyTorch. Run by
tests/check_python.sh."""

import gzip
import json
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
sys.path.insert(0, PKG)

import memsim

MEMSIM = os.environ.get("MEMSIM") or os.path.join(HERE, "..", "..", "sim", "memsim")


def snapshot():
    """A small snapshot in _snapshot()'s layout: one device, two tensors, one segment."""
    fr = [{"filename": "train.py", "line": 3, "name": "step"}]
    return {
        "segments": [{"device": 0, "address": 1 << 32, "total_size": 2 << 20,
                      "stream": 0, "segment_type": "small", "allocated_size": 1024,
                      "active_size": 1024, "blocks": [
                          {"size": 1024, "requested_size": 1000, "state": "active_allocated",
                           "frames": fr}]}],
        "device_traces": [[
            {"action": "segment_alloc", "addr": 1 << 32, "size": 2 << 20, "stream": 0,
             "time_us": 1, "frames": fr},
            {"action": "alloc", "addr": 1 << 32, "size": 1000, "stream": 0, "time_us": 2,
             "frames": fr},
            {"action": "alloc", "addr": (1 << 32) + 1024, "size": 512, "stream": 0,
             "time_us": 3, "frames": fr},
            {"action": "free_requested", "addr": (1 << 32) + 1024, "size": 512, "stream": 0,
             "time_us": 4, "frames": fr},
            {"action": "free_completed", "addr": (1 << 32) + 1024, "size": 512, "stream": 0,
             "time_us": 5, "frames": fr},
        ]],
    }


def cli(*args):
    return subprocess.run([sys.executable, "-m", "memsim"] + list(args), cwd=PKG,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)


class Convert(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="memsim-conv-")
        self.pkl = self.p("snap.pickle")
        with open(self.pkl, "wb") as f:
            pickle.dump(snapshot(), f)

    def p(self, name):
        return os.path.join(self.tmp, name)

    def test_pickle_to_json_imports(self):
        out = self.p("snap.json.gz")
        c = memsim.convert(self.pkl, out)
        self.assertEqual(c, {"devices": 1, "entries": 5, "segments": 1})
        with gzip.open(out, "rt") as f:
            d = json.load(f)
        self.assertEqual(d["device_traces"][0][1]["size"], 1000)
        self.assertNotIn("frames", d["device_traces"][0][1], "frames left out")
        if not os.path.exists(MEMSIM):
            self.skipTest("memsim not built")
        tr = self.p("imp.trace")
        r = subprocess.run([MEMSIM, "trace", "import", "--from", "pytorch-snapshot", out,
                            "-o", tr], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(tr) as f:
            lines = f.read().splitlines()
        self.assertIn("alloc 1 1000 other -1 0 0 - -", lines)
        self.assertIn("free 2", lines)

    def test_keep_frames_and_cli(self):
        out = self.p("f.json")
        r = cli("convert", self.pkl, out, "--keep-frames")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("5 entries", r.stdout)
        with open(out) as f:
            self.assertIn("frames", json.load(f)["device_traces"][0][0])

    def bad(self, data, what, status=3, name="bad.pickle"):
        path = self.p(name)
        with open(path, "wb") as f:
            f.write(data)
        r = cli("convert", path, self.p("out.json"))
        self.assertEqual(r.returncode, status, r.stderr)
        self.assertTrue(r.stderr.startswith(path + ":"), r.stderr)
        self.assertIn(what, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertFalse(os.path.exists(self.p("out.json")))

    def test_truncated_pickle(self):
        data = pickle.dumps(snapshot())
        self.bad(data[:len(data) // 2], "not a readable pickle")

    def test_pickle_with_object(self):
        self.bad(pickle.dumps({"device_traces": [[]], "x": unittest.TestCase}),
                 "refers to the Python object")

    def test_not_a_snapshot(self):
        self.bad(pickle.dumps({"segments": []}), "no \"device_traces\"")
        self.bad(pickle.dumps([1, 2]), "must be a dict")
        self.bad(pickle.dumps({"device_traces": [[{"addr": 1}]]}), "device_traces[0][0]")

    def test_bad_json_and_gzip(self):
        self.bad(b'{"device_traces": [[\n{"action": tru}]]}', "bad.json:2:", name="bad.json")
        self.bad(b"\x1f\x8b\x08\x00garbage", "corrupted gzip", name="bad.gz")
        self.bad(b"hello", "neither a pickle", name="hello.txt")
        self.bad(b"", "empty file", name="empty")

    def test_missing_file_and_usage(self):
        r = cli("convert", self.p("nope.pickle"), self.p("o.json"))
        self.assertEqual(r.returncode, 4)
        self.assertIn("nope.pickle: cannot read", r.stderr)
        self.assertEqual(cli("convert", self.pkl).returncode, 2)
        self.assertEqual(cli("frobnicate").returncode, 2)

    def test_c_importer_names_the_command(self):
        if not os.path.exists(MEMSIM):
            self.skipTest("memsim not built")
        r = subprocess.run([MEMSIM, "trace", "import", "--from", "pytorch-snapshot", self.pkl,
                            "-o", self.p("x.trace")], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("python -m memsim convert %s OUT.json.gz" % self.pkl, r.stderr)


class Build(unittest.TestCase):
    """The in-tree build backend makes a wheel with the package and its metadata, using
    the standard library only (what lets pip install ./python run without network)."""

    def test_wheel(self):
        import zipfile
        sys.path.insert(0, os.path.join(PKG, "_build"))
        import memsim_build
        d = tempfile.mkdtemp(prefix="memsim-whl-")
        name = memsim_build.build_wheel(d)
        with zipfile.ZipFile(os.path.join(d, name)) as z:
            names = z.namelist()
            self.assertIn("memsim/_capture.py", names)
            self.assertIn("memsim/__main__.py", names)
            rec = z.read("memsim-0.1.0.dist-info/RECORD").decode()
        self.assertEqual(sorted(set(names)), sorted(n.split(",")[0] for n in
                                                    rec.splitlines()))
        with open(os.path.join(PKG, "pyproject.toml")) as f:
            self.assertIn("requires = []", f.read())


if __name__ == "__main__":
    unittest.main()
