"""__main__.py — `python -m memsim COMMAND`: the package's command line. Commands:
convert IN OUT (memsim.convert). Exit status: 0 done, 2 usage, 3 bad input (the message
'FILE: problem'), 4 a file that cannot be read or written."""

import sys

USAGE = """usage: python -m memsim convert IN OUT [--keep-frames]
  IN   torch.cuda.memory._dump_snapshot() pickle, or snapshot JSON (plain or .gz)
  OUT  JSON for `memsim trace import --from pytorch-snapshot` (.gz compresses)
exit status: 0 done, 2 usage, 3 bad input, 4 unreadable input or unwritable output"""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] != "convert":
        print("python -m memsim: unknown command '%s'\n%s" % (argv[0], USAGE), file=sys.stderr)
        return 2
    args = [a for a in argv[1:] if a != "--keep-frames"]
    bad = [a for a in args if a.startswith("--")]
    if bad or len(args) != 2:
        print("python -m memsim convert: %s\n%s" % (
            "unknown option '%s'" % bad[0] if bad else "expected IN and OUT", USAGE),
            file=sys.stderr)
        return 2
    from .convert import convert, ConvertError
    try:
        c = convert(args[0], args[1], keep_frames="--keep-frames" in argv[1:])
    except ConvertError as e:
        print(e, file=sys.stderr)
        return e.status
    print("%s: %d devices, %d entries, %d segments -> %s" % (
        args[0], c["devices"], c["entries"], c["segments"], args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
