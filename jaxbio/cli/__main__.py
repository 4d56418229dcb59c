"""``python -m jaxbio.cli``: the ``jaxbio`` command."""

import sys

from jaxbio.cli import main

sys.exit(main())
