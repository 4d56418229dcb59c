"""Coupled coordinates: a model's own coordinates ``c`` mapped onto a tree's joint coordinates ``q``.

A `SegmentTree` has one coordinate per DOF of each joint. Models written for other programs
often have fewer, *coupled* coordinates: OpenSim's knee moves the tibia along splines of the
knee angle, so one coordinate (``knee_angle``) drives three tree DOFs (a rotation and two
translations). `CoordinateMap` holds that map: tree coordinate ``k`` is

    ``q[k] = f_k(c[source[k]])``

a function of one model coordinate (``source[k]``), so that ``nq`` tree coordinates are driven by
``nc ≤ nq`` model coordinates. Each ``f_k`` is a piecewise polynomial (`Piecewise`): the identity
(the common case), a line ``slope · c + intercept``, a polynomial, a cubic spline with OpenSim's
coefficients, a piecewise-linear or piecewise-constant table, or any of these scaled. A tree
DOF that is constant is not a DOF: model importers fold it into the joint's fixed offset.

Velocities and accelerations follow by the chain rule, with the Jacobian ``J = ∂q/∂c``
``(nq, nc)`` (row ``k`` is ``f_k'`` in column ``source[k]``, zeros elsewhere):

    ``q̇ = J ċ``,   ``q̈ = J c̈ + f''(c) ċ²``   (elementwise per tree coordinate)

and the dynamics in the model's coordinates are the tree's, projected (virtual work, the
same ``Hᵀ`` projection that Simbody's function-based mobilizer applies to OpenSim's CustomJoint):

    ``τ_c = Jᵀ τ(q, q̇, q̈)``,   ``M_c = Jᵀ M(q) J``.

Public functions (pure, one sample; batch with `jax.vmap`; `jax.jit` and `jax.grad` work):
`to_tree`, `tree_velocity`, `tree_acceleration`, `jacobian`, and the chain rule's pieces
`tree_state`, `project`, `project_matrix`. The dynamics in model coordinates are the public
functions of `jaxbio.dynamics` given a `jaxbio.Model` (``jb.inverse_dynamics(model, c, cd,
cdd)``, ``jb.mass_matrix(model, c)``, ``jb.forward_dynamics(model, c, cd, tau,
locked=model.locked)``: `jaxbio.dynamics.model_coordinates`). The tree must have only revolute,
prismatic and fixed joints (``nq = nv``; `jaxbio.io.load_osim` builds such trees).

Model format. A model file (JSON, version 1) may carry coupled coordinates in two optional
top-level sections: ``"coordinates"``, the model coordinates in the order of ``c``, each
``{"name", "default_value", "default_speed_value", "range", "clamped", "locked",
"motion_type"}`` (OpenSim's Coordinate properties; only ``name`` is required), and
``"coordinate_functions"``, one entry per tree coordinate in the tree's order, ``{"coordinate":
name, "breakpoints", "origins", "coefficients"}`` (a `Piecewise`; absent: each coordinate
drives one tree coordinate, in order). `jaxbio.save_model` writes them for a `jaxbio.Model`
and `jaxbio.load_model` (and the command line's ``--model``) reads them back into one.
`jaxbio._validate.validate_coordinates_dict` lists every rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio._validate import as_shape, model_dtype, to_device

__all__ = [
    "Piecewise",
    "CoordinateMap",
    "to_tree",
    "tree_velocity",
    "tree_acceleration",
    "jacobian",
    "as_coordinates",
    "tree_state",
    "project",
    "project_matrix",
    "locked_mask",
    "coordinate_sections",
    "from_sections",
    "enforce_coordinates",
]


@dataclass(frozen=True)
class Piecewise:
    """A piecewise polynomial of one variable (numpy, build time).

    ``breakpoints`` ``(m,)`` ascending split the line into ``m + 1`` pieces: piece 0 for
    ``x < breakpoints[0]``, piece ``i`` for ``breakpoints[i-1] ≤ x < breakpoints[i]``, piece ``m``
    for ``x ≥ breakpoints[m-1]``. Piece ``i`` is ``Σ_p coefficients[i, p] (x − origins[i])^p``
    (``origins`` ``(m + 1,)``, ``coefficients`` ``(m + 1, degree + 1)``, ascending powers).
    Extrapolation is whatever the first and last pieces say (OpenSim's splines: a straight line).
    """

    breakpoints: np.ndarray
    origins: np.ndarray
    coefficients: np.ndarray

    def __post_init__(self):
        b, o, a = (np.asarray(x, dtype=float) for x in (self.breakpoints, self.origins, self.coefficients))
        if b.ndim != 1 or o.shape != (len(b) + 1,) or a.ndim != 2 or a.shape[0] != len(b) + 1 or a.shape[1] < 1:
            raise ValueError(
                f"Piecewise: breakpoints {b.shape}, origins {o.shape} and coefficients {a.shape} "
                "must be (m,), (m + 1,) and (m + 1, degree + 1)"
            )
        if np.any(np.diff(b) < 0) or not (np.all(np.isfinite(b)) and np.all(np.isfinite(o)) and np.all(np.isfinite(a))):
            raise ValueError("Piecewise: breakpoints must be finite and ascending, origins and coefficients finite")
        object.__setattr__(self, "breakpoints", b)
        object.__setattr__(self, "origins", o)
        object.__setattr__(self, "coefficients", a)

    @classmethod
    def polynomial(cls, coefficients) -> Piecewise:
        """One polynomial everywhere, ``Σ_p coefficients[p] x^p`` (ascending powers)."""
        return cls(np.zeros(0), np.zeros(1), np.asarray(coefficients, dtype=float)[None, :])

    @classmethod
    def identity(cls) -> Piecewise:
        """``f(x) = x``."""
        return cls.polynomial([0.0, 1.0])

    def scaled(self, scale: float) -> Piecewise:
        """``scale · f`` (OpenSim's MultiplierFunction)."""
        return Piecewise(self.breakpoints, self.origins, scale * self.coefficients)

    @property
    def degree(self) -> int:
        return self.coefficients.shape[1] - 1

    @property
    def is_identity(self) -> bool:
        """True when ``f(x) = x`` everywhere (every piece ``o + (x − o)``)."""
        a, o = self.coefficients, self.origins
        return a.shape[1] >= 2 and bool(np.all(a[:, 2:] == 0) and np.all(a[:, 1] == 1.0) and np.all(a[:, 0] == o))

    def constant_value(self) -> float | None:
        """The value if ``f`` is one constant everywhere, else None."""
        a = self.coefficients
        if np.all(a[:, 1:] == 0) and np.all(a[:, 0] == a[0, 0]):
            return float(a[0, 0])
        return None


class CoordinateMap(eqx.Module):
    """``q[k] = f_k(c[source[k]])``: ``nc`` model coordinates onto ``nq`` tree coordinates.

    Static: ``names`` (``nc`` model coordinate names, the order of ``c``) and ``source`` (``nq``
    ints, the model coordinate driving each tree coordinate). Array leaves (one `Piecewise` per
    tree coordinate, padded to a common number of pieces ``P = m + 1`` and degree ``D``):

    - ``breakpoints`` ``(nq, m)``: ascending, padded with ``+inf`` (never reached);
    - ``origins`` ``(nq, P)``: each piece's local origin (padding 0);
    - ``coefficients`` ``(nq, P, D + 1)``: ascending powers of ``c − origin`` (padding 0).

    Units: ``c`` in the model coordinate's unit (rad or m), ``q`` in the tree coordinate's, so a
    coefficient of power ``p`` has unit ``[q] / [c]^p``. Build with `CoordinateMap.identity` or
    `CoordinateMap.from_pieces`.

    ``identity_map`` (static) is true when ``q = c`` (every tree coordinate the identity of the
    model coordinate in the same place; `from_pieces` decides): the dynamics then take ``c`` as
    the tree's ``q`` directly.
    """

    breakpoints: Float[Array, "nq m"]
    origins: Float[Array, "nq P"]
    coefficients: Float[Array, "nq P D"]
    source: tuple[int, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)
    identity_map: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        nq, nc = len(self.source), len(self.names)
        b, o, a = (jnp.shape(x) for x in (self.breakpoints, self.origins, self.coefficients))
        if len(b) < 2 or b[-2] != nq or o[-2:] != (nq, b[-1] + 1) or a[-3:-1] != (nq, b[-1] + 1) or a[-1] < 1:
            raise ValueError(
                f"CoordinateMap: breakpoints {b}, origins {o} and coefficients {a} must be (nq, m), "
                f"(nq, m + 1) and (nq, m + 1, D + 1) with nq = {nq} = len(source)"
            )
        for k, j in enumerate(self.source):
            if not 0 <= j < nc:
                raise ValueError(f"CoordinateMap: source[{k}] = {j} is not a model coordinate (nc = {nc})")
        if len(set(self.names)) != nc:
            raise ValueError(f"CoordinateMap: duplicate coordinate names in {list(self.names)}")

    @property
    def nq(self) -> int:
        """Number of tree coordinates (rows of the Jacobian)."""
        return len(self.source)

    @property
    def nc(self) -> int:
        """Number of model coordinates (length of ``c``)."""
        return len(self.names)

    def index(self, name: str) -> int:
        """Position of the model coordinate ``name`` in ``c``."""
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"no coordinate {name!r}; coordinates are {list(self.names)}") from None

    @classmethod
    def identity(cls, names: Sequence[str], *, dtype=None) -> CoordinateMap:
        """``q = c``: one tree coordinate per model coordinate, in the same order."""
        names = tuple(names)
        return cls.from_pieces(names, tuple(range(len(names))), [Piecewise.identity()] * len(names), dtype=dtype)

    @classmethod
    def from_pieces(
        cls, names: Sequence[str], source: Sequence[int], pieces: Sequence[Piecewise], *, dtype=None
    ) -> CoordinateMap:
        """The map with ``f_k = pieces[k]`` driven by ``c[source[k]]``; arrays of ``dtype``
        (default: JAX's default float type)."""
        if len(pieces) != len(source):
            raise ValueError(f"CoordinateMap.from_pieces: {len(pieces)} functions for {len(source)} tree coordinates")
        dt = model_dtype(dtype)
        nq = len(pieces)
        m = max([len(f.breakpoints) for f in pieces], default=0)
        D = max([f.degree for f in pieces], default=1)
        b = np.full((nq, m), np.inf)
        o = np.zeros((nq, m + 1))
        a = np.zeros((nq, m + 1, D + 1))
        for k, f in enumerate(pieces):
            n = len(f.breakpoints)
            b[k, :n] = f.breakpoints
            o[k, : n + 1] = f.origins
            a[k, : n + 1, : f.degree + 1] = f.coefficients
        source = tuple(int(j) for j in source)
        identity = source == tuple(range(len(names))) and all(f.is_identity for f in pieces)
        return cls(
            to_device(b, dt),
            to_device(o, dt),
            to_device(a, dt),
            source=source,
            names=tuple(str(s) for s in names),
            identity_map=identity,
        )


def coordinate_sections(model) -> dict:
    """The model file's ``"coordinates"`` and ``"coordinate_functions"`` sections (plain Python,
    `jaxbio._validate.validate_coordinates_dict` documents them) of ``model``, an object with the
    fields of `jaxbio.Model`: ``coordinates`` (a `CoordinateMap`), ``defaults``,
    ``default_speeds``, ``ranges``, ``clamped``, ``locked``, ``motion_types``. The padding of the
    map's arrays is dropped; an unbounded range is left out."""
    cmap = model.coordinates
    defaults, speeds, ranges = (
        np.asarray(x, dtype=float) for x in (model.defaults, model.default_speeds, model.ranges)
    )
    coords = []
    for j, name in enumerate(cmap.names):
        c = {"name": name, "default_value": float(defaults[j]), "default_speed_value": float(speeds[j])}
        if np.all(np.isfinite(ranges[j])):
            c["range"] = ranges[j].tolist()
        c.update(clamped=bool(model.clamped[j]), locked=bool(model.locked[j]), motion_type=model.motion_types[j])
        coords.append(c)
    b, o, a = (np.asarray(x, dtype=float) for x in (cmap.breakpoints, cmap.origins, cmap.coefficients))
    functions = []
    for k, j in enumerate(cmap.source):
        m = int(np.sum(np.isfinite(b[k])))
        rows = a[k, : m + 1]
        width = max(1, max((len(np.trim_zeros(r, "b")) for r in rows), default=1))
        functions.append(
            {
                "coordinate": cmap.names[j],
                "breakpoints": b[k, :m].tolist(),
                "origins": o[k, : m + 1].tolist(),
                "coefficients": rows[:, :width].tolist(),
            }
        )
    return {"coordinates": coords, "coordinate_functions": functions}


def from_sections(section: dict, *, dtype=None) -> CoordinateMap:
    """The `CoordinateMap` of a validated ``"coordinates"`` section
    (`jaxbio._validate.validate_coordinates_dict`'s result)."""
    return CoordinateMap.from_pieces(
        section["names"], section["source"], [Piecewise(*p) for p in section["pieces"]], dtype=dtype
    )


def _evaluate(cmap: CoordinateMap, x):
    """``(f, f', f'')`` ``(nq,)`` each, of every tree coordinate at its own argument ``x`` ``(nq,)``."""
    piece = jnp.sum(x[:, None] >= cmap.breakpoints, axis=1)
    origin = jnp.take_along_axis(cmap.origins, piece[:, None], axis=1)[:, 0]
    a = jnp.take_along_axis(cmap.coefficients, piece[:, None, None], axis=1)[:, 0]
    h = x - origin
    f = a[:, -1]
    df = jnp.zeros_like(f)
    d2f = jnp.zeros_like(f)
    for p in range(a.shape[-1] - 2, -1, -1):  # Horner for the value and two derivatives (static degree)
        d2f = d2f * h + 2.0 * df
        df = df * h + f
        f = f * h + a[:, p]
    return f, df, d2f


def as_coordinates(cmap: CoordinateMap, x, name: str) -> Float[Array, " nc"]:
    """``x`` as an ``(nc,)`` array of model coordinates (or their rates, or forces), in the map's
    float type; ``ValueError`` naming ``name`` and the coordinates for another shape."""
    return as_shape(
        x,
        (cmap.nc,),
        name,
        f" (the model coordinates {', '.join(cmap.names)}); batch with jax.vmap",
        like=cmap.coefficients,
    )


def _at_sources(cmap: CoordinateMap, c):
    """``f, f', f''`` of every tree coordinate at its model coordinate."""
    return _evaluate(cmap, c[np.asarray(cmap.source, dtype=np.int32)])


def to_tree(cmap: CoordinateMap, c: Float[ArrayLike, " nc"]) -> Float[Array, " nq"]:
    """Tree coordinates ``q`` ``(nq,)`` (rad / m) of the model coordinates ``c`` ``(nc,)``."""
    c = as_coordinates(cmap, c, "c")
    return _at_sources(cmap, c)[0]


def tree_velocity(cmap: CoordinateMap, c: Float[ArrayLike, " nc"], cd: Float[ArrayLike, " nc"]) -> Float[Array, " nq"]:
    """``q̇ = J(c) ċ`` ``(nq,)``; ``c``, ``cd`` ``(nc,)``."""
    c = as_coordinates(cmap, c, "c")
    cd = as_coordinates(cmap, cd, "cd")
    src = np.asarray(cmap.source, dtype=np.int32)
    return _evaluate(cmap, c[src])[1] * cd[src]


def tree_acceleration(
    cmap: CoordinateMap, c: Float[ArrayLike, " nc"], cd: Float[ArrayLike, " nc"], cdd: Float[ArrayLike, " nc"]
) -> Float[Array, " nq"]:
    """``q̈ = J(c) c̈ + f''(c) ċ²`` ``(nq,)`` (per tree coordinate); ``c``, ``cd``, ``cdd`` ``(nc,)``."""
    c = as_coordinates(cmap, c, "c")
    cd = as_coordinates(cmap, cd, "cd")
    cdd = as_coordinates(cmap, cdd, "cdd")
    src = np.asarray(cmap.source, dtype=np.int32)
    _, df, d2f = _evaluate(cmap, c[src])
    return df * cdd[src] + d2f * cd[src] ** 2


def jacobian(cmap: CoordinateMap, c: Float[ArrayLike, " nc"]) -> Float[Array, "nq nc"]:
    """``J = ∂q/∂c`` ``(nq, nc)``: ``f_k'(c[source[k]])`` at ``(k, source[k])``, zeros elsewhere."""
    c = as_coordinates(cmap, c, "c")
    df = _at_sources(cmap, c)[1]
    onehot = np.eye(cmap.nc)[np.asarray(cmap.source, dtype=np.int32)]  # (nq, nc), static
    return df[:, None] * jnp.asarray(onehot, df.dtype)


def tree_state(
    cmap: CoordinateMap, c: Float[ArrayLike, " nc"], cd: Float[ArrayLike, " nc"], cdd: Float[ArrayLike, " nc"]
):
    """``(q, q̇, q̈, f')``, each ``(nq,)``: the tree's state at the model's ``(c, ċ, c̈)``
    ``(nc,)`` (`to_tree`, `tree_velocity`, `tree_acceleration` in one evaluation) and each tree
    coordinate's slope ``f_k'``, the argument of `project` and `project_matrix`."""
    c = as_coordinates(cmap, c, "c")
    cd = as_coordinates(cmap, cd, "cd")
    cdd = as_coordinates(cmap, cdd, "cdd")
    src = np.asarray(cmap.source, dtype=np.int32)
    f, df, d2f = _evaluate(cmap, c[src])
    return f, df * cd[src], df * cdd[src] + d2f * cd[src] ** 2, df


def project(cmap: CoordinateMap, slopes: Float[Array, " nq"], tau: Float[Array, " nq"]) -> Float[Array, " nc"]:
    """``Jᵀ tau`` ``(nc,)`` for tree generalised forces ``tau`` ``(nq,)`` and the slopes ``f'``
    of `tree_state` (virtual work: a sum per model coordinate, no matmul)."""
    return jax.ops.segment_sum(slopes * tau, np.asarray(cmap.source, dtype=np.int32), num_segments=cmap.nc)


def project_matrix(cmap: CoordinateMap, slopes: Float[Array, " nq"], M: Float[Array, "nq nq"]) -> Float[Array, "nc nc"]:
    """``Jᵀ M J`` ``(nc, nc)`` for a tree matrix ``M`` ``(nq, nq)`` (e.g. the mass matrix) and the
    slopes ``f'`` of `tree_state`."""
    src = np.asarray(cmap.source, dtype=np.int32)
    W = M * (slopes[:, None] * slopes[None, :])
    W = jax.ops.segment_sum(W, src, num_segments=cmap.nc)  # rows
    return jax.ops.segment_sum(W.T, src, num_segments=cmap.nc).T  # columns


def locked_mask(cmap: CoordinateMap, locked) -> np.ndarray:
    """``locked`` (None, ``nc`` bools such as `jaxbio.Model.locked`, or coordinate names) as a
    static ``(nc,)`` bool mask; ``ValueError`` naming the problem."""
    if locked is None:
        return np.zeros(cmap.nc, dtype=bool)
    if isinstance(locked, str) or not isinstance(locked, (list, tuple, np.ndarray)):
        raise ValueError(f"locked must be a sequence of {cmap.nc} bools or of coordinate names, got {locked!r}")
    items = list(np.asarray(locked).tolist()) if isinstance(locked, np.ndarray) else list(locked)
    if all(isinstance(x, str) for x in items):
        mask = np.zeros(cmap.nc, dtype=bool)
        mask[[cmap.index(x) for x in items]] = True
        return mask
    if len(items) != cmap.nc or not all(isinstance(x, (bool, np.bool_)) for x in items):
        raise ValueError(
            f"locked must be {cmap.nc} bools (one per coordinate: {', '.join(cmap.names)}) "
            f"or coordinate names, got {locked!r}"
        )
    return np.asarray(items, dtype=bool)


def enforce_coordinates(model, c: Float[ArrayLike, " nc"]) -> Float[Array, " nc"]:
    """Coordinate values ``c`` ``(nc,)`` as OpenSim sets them with constraints enforced
    (``Coordinate::setValue(state, value, enforceConstraints=true)`` for each coordinate): a
    ``clamped`` coordinate is pulled into its ``range``, a ``locked`` one keeps its lock value (the
    coordinate's ``default_value``: OpenSim's lock is a ``PrescribedMotion`` at that constant,
    and a locked coordinate refuses new values). Pure; `jax.vmap` over frames, `jax.grad` (the
    gradient is 0 through a clamp at its bound and through a lock).

    ``model``: a `jaxbio.Model` (its ``defaults``, ``ranges``, ``clamped``, ``locked``); ``c``
    ``(nc,)`` rad / m in the model's coordinates; returns ``(nc,)``."""
    c = as_shape(
        c, (model.coordinates.nc,), "c", f" (the coordinates {', '.join(model.coordinate_names)})", like=model.defaults
    )
    locked = np.asarray(model.locked, dtype=bool)
    clamped = np.asarray(model.clamped, dtype=bool) & ~locked
    c = jnp.where(clamped, jnp.clip(c, model.ranges[:, 0], model.ranges[:, 1]), c)
    return jnp.where(locked, model.defaults, c)
