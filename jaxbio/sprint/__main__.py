"""``python -m jaxbio.sprint``: the ``jaxbio sprint`` command on its own (`jaxbio.cli.main`)."""

import sys

from jaxbio.cli import main as jaxbio_main


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return jaxbio_main(["sprint"] + argv)


if __name__ == "__main__":
    sys.exit(main())
