"""``python -m jaxbio.sprint``: the ``jaxbio sprint`` command on its own."""

import argparse
import sys

from jaxbio.sprint._cli import add_parser


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxbio.sprint")
    sub = parser.add_subparsers(dest="command")
    add_parser(sub)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(["sprint"] + argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
