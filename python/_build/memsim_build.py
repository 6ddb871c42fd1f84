"""memsim_build.py — a PEP 517 build backend for the memsim Python package that needs only
the standard library: it writes the wheel (memsim/*.py plus .dist-info: METADATA, WHEEL,
RECORD) and the sdist itself, so that `pip install ./python` works without network access
(pyproject.toml: requires = [], backend-path = ["_build"]). Used only by pip."""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "memsim"
VERSION = "0.1.0"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"
DIST = "%s-%s" % (NAME, VERSION)


def _metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: Capture PyTorch training "
            "steps as memsim workload traces; convert PyTorch memory snapshots\n"
            "Requires-Python: >=3.9\n" % (NAME, VERSION))


def _wheel_info():
    return ("Wheel-Version: 1.0\nGenerator: memsim_build\nRoot-Is-Purelib: true\nTag: %s\n"
            % TAG)


def _sources():
    pkg = os.path.join(HERE, NAME)
    for root, dirs, files in os.walk(pkg):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                full = os.path.join(root, f)
                yield full, os.path.relpath(full, HERE).replace(os.sep, "/")


def _digest(data):
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + h.decode("ascii")


def _write_wheel(wheel_directory, files):
    """files: [(archive name, bytes)]; adds the dist-info and RECORD."""
    info = DIST + ".dist-info"
    files = list(files) + [(info + "/METADATA", _metadata().encode()),
                           (info + "/WHEEL", _wheel_info().encode())]
    record = "".join("%s,%s,%d\n" % (n, _digest(d), len(d)) for n, d in files)
    record += info + "/RECORD,,\n"
    name = "%s-%s.whl" % (DIST, TAG)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w",
                         zipfile.ZIP_DEFLATED) as z:
        for n, d in files + [(info + "/RECORD", record.encode())]:
            zi = zipfile.ZipInfo(n, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            z.writestr(zi, d, zipfile.ZIP_DEFLATED)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = os.path.join(metadata_directory, DIST + ".dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(_metadata())
    with open(os.path.join(info, "WHEEL"), "w") as f:
        f.write(_wheel_info())
    return DIST + ".dist-info"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = []
    for full, rel in _sources():
        with open(full, "rb") as f:
            files.append((rel, f.read()))
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(NAME + "_editable.pth", (HERE + "\n").encode())])


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_sdist(sdist_directory, config_settings=None):
    name = DIST + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/memsim_build.py"]:
            if os.path.exists(os.path.join(HERE, rel)):
                t.add(os.path.join(HERE, rel), DIST + "/" + rel)
        for full, rel in _sources():
            t.add(full, DIST + "/" + rel)
        pkg = "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (NAME, VERSION)
        ti = tarfile.TarInfo(DIST + "/PKG-INFO")
        ti.size = len(pkg)
        t.addfile(ti, io.BytesIO(pkg.encode()))
    return name
