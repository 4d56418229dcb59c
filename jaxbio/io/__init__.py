"""File formats: OpenSim models (``.osim``).

- `load_osim` (`jaxbio.io.osim`): the skeleton of an OpenSim 3.x/4.x model as a `jaxbio.SegmentTree`
  plus a `jaxbio.coordinates.CoordinateMap` from OpenSim's coordinates, in an `OsimModel`.
"""

from jaxbio.io.osim import OsimModel, load_osim

__all__ = ["OsimModel", "load_osim"]
