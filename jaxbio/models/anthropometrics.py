"""Anthropometric data: de Leva (1996) Table 4, males — the one table every jaxbio model uses.

The shipped models (`jaxbio/models/_build.py` with `jaxbio.models.build.deleva_body`, documented
in ``jaxbio/models/README.md``) and Du's (2021) arm (`jaxbio.papers.du_arm.Arm.de_leva`) read their
segment lengths, masses, centres of mass and radii of gyration from here. numpy only (no JAX), so the build script runs without it.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["BODY_MASS", "STATURE", "DeLevaRow", "DE_LEVA_MALE"]

# de Leva P. (1996) Adjustments to Zatsiorsky-Seluyanov's segment inertia parameters.
# J Biomech 29(9):1223-1230, Table 4, males. The reference subject of that table:
BODY_MASS = 73.0  # kg
STATURE = 1.741  # m


class DeLevaRow(NamedTuple):
    """One row of de Leva (1996) Table 4 (males), as printed.

    ``length_mm``: mean distance between the two endpoints; ``mass``: % of body mass; ``com``: COM
    position, % of the length from the row's *origin* endpoint (the first one named in the comment);
    ``r_sagittal``, ``r_transverse``, ``r_longitudinal``: radii of gyration, % of the length.
    """

    length_mm: float
    mass: float
    com: float
    r_sagittal: float
    r_transverse: float
    r_longitudinal: float


# Endpoints (de Leva's abbreviations): VERT vertex, CERV cervicale (C7), XYPH xiphion, OMPH omphalion,
# MIDH mid-point of the hip joint centres, SJC/EJC/WJC/HJC/KJC shoulder/elbow/wrist/hip/knee joint
# centre, MET3 3rd metacarpale, LMAL lateral malleolus, HEEL heel, TTIP tip of the longest toe.
# The upper-body rows are de Leva's alternative rows that use CERV, so that head, upper trunk and
# whole trunk share the C7 endpoint; their masses are the same as in the main rows.
DE_LEVA_MALE = {
    "head": DeLevaRow(242.9, 6.94, 50.02, 30.3, 31.5, 26.1),  # VERT -> CERV
    "trunk": DeLevaRow(603.3, 43.46, 51.38, 32.8, 30.6, 16.9),  # CERV -> MIDH
    "upper_trunk": DeLevaRow(242.1, 15.96, 50.66, 50.5, 32.0, 46.5),  # CERV -> XYPH
    "middle_trunk": DeLevaRow(215.5, 16.33, 45.02, 48.2, 38.3, 46.8),  # XYPH -> OMPH
    "lower_trunk": DeLevaRow(145.7, 11.17, 61.15, 61.5, 55.1, 58.7),  # OMPH -> MIDH
    "upper_arm": DeLevaRow(281.7, 2.71, 57.72, 28.5, 26.9, 15.8),  # SJC -> EJC
    "forearm": DeLevaRow(268.9, 1.62, 45.74, 27.6, 26.5, 12.1),  # EJC -> WJC
    "hand": DeLevaRow(86.2, 0.61, 79.00, 62.8, 51.3, 40.1),  # WJC -> MET3
    "thigh": DeLevaRow(422.2, 14.16, 40.95, 32.9, 32.9, 14.9),  # HJC -> KJC
    "shank": DeLevaRow(434.0, 4.33, 44.59, 25.5, 24.9, 10.3),  # KJC -> LMAL
    "foot": DeLevaRow(258.1, 1.37, 44.15, 25.7, 24.5, 12.4),  # HEEL -> TTIP
}
