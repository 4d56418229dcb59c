"""OpenSim's muscles: the paths and Hill-type models of a ``ForceSet``'s Thelen and Millard muscles.

`jaxbio.io.load_osim` imports every enabled ``Thelen2003Muscle`` and
``Millard2012EquilibriumMuscle`` of an OpenSim 3.x or 4.x file into `OsimMuscles`
(``Model.muscles``; ``None`` when the file has none). Other muscle classes stay listed in
``Model.ignored`` (the skeleton still loads); disabled muscles (``appliesForce`` false, 3.x
``isDisabled`` true) are skipped, as OpenSim applies nothing for them.

**Paths** (points, conditional and moving points, wrap objects, their frames) are read and
evaluated by `jaxbio.forces._osim_paths`, shared with the path forces (``PathActuator``,
``PathSpring``): `OsimMuscles` is an `jaxbio.forces._osim_paths.OsimPaths` with the muscle models.

**Lengths, moment arms, speeds, forces** (`muscle_lengths`, `muscle_moment_arms`,
`muscle_lengthening_speeds`, `muscle_generalized_forces`, `muscle_static_optimization_forces`):
the path length is `jaxbio.muscles.geometry`'s (with OpenSim's wrapping,
`jaxbio.muscles.wrapping`) at ``q = to_tree(coordinates, c)`` and the points above; moment
arms ``−∂l/∂c`` (positive when the muscle shortens as ``c`` increases, OpenSim's sign), the
lengthening speed ``(∂l/∂c) ċ``, generalised forces ``rᵀ F`` conjugate to ``ċ`` (jaxbio's
convention; on Ball/Free rotations OpenSim's speeds differ, see `jaxbio.io.osim`). Static
optimisation forces: each muscle model's ``static_optimization_forces`` at that length and
speed (OpenSim's ``calcInextensibleTendonActiveFiberForce(s, 1)`` and the passive force).

**Agreement with live OpenSim 4.6** (tests/io/test_osim_muscles.py, float64, random states
within the coordinate ranges; measured maxima over 5–10 states):

- arm26 (Thelen, cylinders and ellipsoids): lengths 9e-16 m; moment arms of the muscle that does
  not wrap vs ``computeMomentArm`` 1e-16 m; of the wrapping ones vs central differences of
  OpenSim's length (h = 1e-5 rad; ``computeMomentArm`` is not ``−∂l/∂c`` over a wrap) 2e-5 m
  (OpenSim's tangent points are iterates, its length is smooth to ~1e-8 m); lengthening speeds
  6e-17 m/s (not wrapping) / 7e-6 m/s (wrapping, vs differences of OpenSim's length);
  static-optimisation forces vs ``calcInextensibleTendonActiveFiberForce(s, 1)`` 2e-14 relative.
- gait10dof18musc (Millard, conditional and moving points): lengths 6e-16 m, moment arms 9e-16
  m, speeds vs ``getLengtheningSpeed`` 2e-15 m/s, forces 3e-13 relative.
- subject01 (2.x file, 54 Thelen muscles, conditional and moving points): lengths 1.3e-7 m,
  moment arms 2e-7 m, forces 1.4e-5 relative — the skeleton's difference: OpenSim rounds this
  file's joint offsets to 6 significant digits when it converts them (body origins move by up
  to 3e-7 m); jaxbio keeps the file's numbers.
- The 3.x and 4.x files of arm26 and gait10dof18musc import equal arrays.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio._validate import as_shape, check_concrete_finite, jit_checked, to_device
from jaxbio.forces._osim_paths import OsimPaths, path_lengths, path_moment_arms, read_paths
from jaxbio.muscles.millard import Millard2012EquilibriumMuscle
from jaxbio.muscles.thelen import Thelen2003Muscle

__all__ = [
    "OsimMuscles",
    "muscle_lengths",
    "muscle_moment_arms",
    "muscle_lengthening_speeds",
    "muscle_generalized_forces",
    "muscle_static_optimization_forces",
]

#: the muscle classes jaxbio imports
MUSCLE_MODELS = {"Thelen2003Muscle": Thelen2003Muscle, "Millard2012EquilibriumMuscle": Millard2012EquilibriumMuscle}
#: the modules a model's muscles are grouped into (a module's static fields are shared): by class,
#: and the Millard muscles with rigid tendons apart when the model also has elastic ones
RIGID_MILLARD = "Millard2012EquilibriumMuscle (rigid tendon)"
GROUPS = {**MUSCLE_MODELS, RIGID_MILLARD: Millard2012EquilibriumMuscle}


class OsimMuscles(OsimPaths):
    """The Thelen and Millard muscles of an OpenSim model (module docstring), ``m`` of them: their
    paths (the fields of `jaxbio.forces._osim_paths.OsimPaths`: ``paths``, ``conditional`` …, one
    path per muscle) and models.

    - ``names``, ``types`` (static): OpenSim's names and classes, ForceSet order (the order of
      every per-muscle array and result).
    - ``thelen``, ``millard``: a `jaxbio.muscles.Thelen2003Muscle` /
      `jaxbio.muscles.Millard2012EquilibriumMuscle` of the muscles of that class, or ``None``;
      ``thelen_index``, ``millard_index`` (static): their positions in ``names``.
    - ``millard_rigid``, ``millard_rigid_index``: when a model has Millard muscles with rigid
      *and* with elastic tendons (``ignore_tendon_compliance``, a static field of the module),
      those with rigid tendons (``millard`` then holds the elastic ones); else ``None`` and ``()``.
    - ``min_control``, ``max_control`` ``(m,)``: OpenSim's control bounds (excitations).
    """

    min_control: Float[Array, " m"]
    max_control: Float[Array, " m"]
    thelen: Thelen2003Muscle | None
    millard: Millard2012EquilibriumMuscle | None
    millard_rigid: Millard2012EquilibriumMuscle | None
    names: tuple[str, ...] = eqx.field(static=True)
    types: tuple[str, ...] = eqx.field(static=True)
    thelen_index: tuple[int, ...] = eqx.field(static=True)
    millard_index: tuple[int, ...] = eqx.field(static=True)
    millard_rigid_index: tuple[int, ...] = eqx.field(static=True)

    def __check_init__(self):
        m = len(self.names)
        if len(self.types) != m or self.paths.names != self.names:
            raise ValueError("OsimMuscles: names, types and paths must list the same muscles")
        if sorted(self.thelen_index + self.millard_index + self.millard_rigid_index) != list(range(m)):
            raise ValueError(
                "OsimMuscles: thelen_index, millard_index and millard_rigid_index must cover every muscle once"
            )
        for f in ("min_control", "max_control"):
            if jnp.shape(getattr(self, f)) != (m,):
                raise ValueError(f"OsimMuscles.{f} has shape {jnp.shape(getattr(self, f))}, expected {(m,)}")

    @property
    def n_muscles(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        """Position of muscle ``name``."""
        return self.paths.index(name)

    @property
    def groups(self) -> tuple[tuple[Millard2012EquilibriumMuscle | Thelen2003Muscle | None, tuple[int, ...]], ...]:
        """``(module, positions in names)`` of each muscle module (``None`` and ``()`` if empty)."""
        return (
            (self.thelen, self.thelen_index),
            (self.millard, self.millard_index),
            (self.millard_rigid, self.millard_rigid_index),
        )

    @property
    def max_isometric_force(self) -> Float[Array, " m"]:
        """``(m,)`` N, every muscle's ``max_isometric_force`` in ``names`` order."""
        groups = [(g, i) for g, i in self.groups if i]
        order = np.argsort(np.concatenate([np.asarray(i) for _, i in groups]))
        return jnp.concatenate([jnp.broadcast_to(g.max_isometric_force, (len(i),)) for g, i in groups])[order]


# ---- evaluation -------------------------------------------------------------------------------------


def _muscles_of(model):
    from jaxbio.model import Model

    if not isinstance(model, Model):
        raise ValueError(f"model must be an Model (jaxbio.io.load_osim), got {type(model).__name__}")
    if model.muscles is None:
        raise ValueError(
            f"{model.path or 'model'}: no imported muscles (Thelen2003Muscle, "
            f"Millard2012EquilibriumMuscle); ignored: {list(model.ignored)}"
        )
    return model.muscles


def _check_arguments(arguments: dict) -> None:
    _muscles_of(arguments["model"])
    for name, x in list(arguments.items())[1:]:
        check_concrete_finite(x, name)


def _coordinates(model, x, name: str):
    return as_shape(
        x,
        (model.coordinates.nc,),
        name,
        f" (OpenSim's coordinates {', '.join(model.coordinate_names)}); batch with jax.vmap",
        like=model.ranges,
    )


def _public(fn):
    """`jax.jit` of ``fn(model, *arrays)`` after the checks before tracing: a model with
    muscles, no NaN/inf in a concrete array argument (``ValueError`` naming it)."""
    return jit_checked(fn, _check_arguments)


def _lengths(model, c):
    return path_lengths(model.muscles, model, c)


@_public
def muscle_lengths(model, c: Float[ArrayLike, " nc"]) -> Float[Array, " m"]:
    """Muscle–tendon path lengths (OpenSim's ``GeometryPath::getLength``).

    Args:
        model: an `Model` with muscles (``model.muscles``).
        c: ``(nc,)`` rad / m, OpenSim's coordinates (``model.coordinate_names``).

    Returns:
        ``(m,)`` m, ``model.muscles.names`` order.
    """
    _muscles_of(model)
    return _lengths(model, _coordinates(model, c, "c"))


@_public
def muscle_moment_arms(model, c: Float[ArrayLike, " nc"]) -> Float[Array, "m nc"]:
    """Moment arms ``r = −∂l/∂c``: positive when the muscle shortens as the coordinate increases
    (OpenSim's ``computeMomentArm`` sign).

    Args:
        c: ``(nc,)`` rad / m, OpenSim's coordinates.

    Returns:
        ``(m, nc)`` m per rad (rotational) / m per m (translational).
    """
    mus = _muscles_of(model)
    return path_moment_arms(mus, model, _coordinates(model, c, "c"))


def _wrapped_lengths_and_moment_arms(model, c):
    """``(lengths (m,), moment arms (m, nc))`` of a model whose paths wrap, for one ``c``: one
    directional derivative of `_lengths` per coordinate in sequence (`jax.lax.map`; with the wrap
    surfaces' loops this compiles and runs faster than `jax.jacfwd`'s batch of tangents, see
    `jaxbio.muscles.geometry.moment_arms`), the lengths taken from the first one's primal."""
    basis = jnp.eye(c.shape[0], dtype=c.dtype)
    lengths, slopes = jax.lax.map(lambda v: jax.jvp(lambda x: _lengths(model, x), (c,), (v,)), basis)
    return lengths[0], -slopes.T


@_public
def muscle_lengthening_speeds(model, c: Float[ArrayLike, " nc"], cd: Float[ArrayLike, " nc"]) -> Float[Array, " m"]:
    """Lengthening speeds ``dl/dt = (∂l/∂c) ċ`` (OpenSim's ``getLengtheningSpeed``).

    Args:
        c: ``(nc,)`` rad / m, OpenSim's coordinates; cd: ``(nc,)`` rad/s / m/s, their rates.

    Returns:
        ``(m,)`` m/s, positive when the muscle lengthens.
    """
    _muscles_of(model)
    c = _coordinates(model, c, "c")
    cd = _coordinates(model, cd, "cd").astype(c.dtype)
    return jax.jvp(lambda x: _lengths(model, x), (c,), (cd,))[1]


@_public
def muscle_generalized_forces(
    model, c: Float[ArrayLike, " nc"], tensions: Float[ArrayLike, " m"]
) -> Float[Array, " nc"]:
    """Generalised forces of the muscle tensions, ``τ = rᵀ F`` (conjugate to ``ċ``).

    Args:
        c: ``(nc,)`` rad / m, OpenSim's coordinates.
        tensions: ``(m,)`` N, the tendon forces (positive pulls).

    Returns:
        ``(nc,)`` N·m (rotational) / N (translational).
    """
    mus = _muscles_of(model)
    tensions = as_shape(
        tensions, (mus.n_muscles,), "tensions", f": one per muscle ({', '.join(mus.names)})", like=model.ranges
    )
    r = muscle_moment_arms(model, c)
    return jnp.sum(r * tensions[:, None].astype(r.dtype), axis=0)


@_public
def muscle_static_optimization_forces(
    model, c: Float[ArrayLike, " nc"], cd: Float[ArrayLike, " nc"]
) -> tuple[Float[Array, " m"], Float[Array, " m"]]:
    """``(F̂, P)`` ``(m,)`` N: each muscle's active force at full activation on a rigid tendon
    (OpenSim's ``calcInextensibleTendonActiveFiberForce(s, 1)``) and its passive force, from its
    model's ``static_optimization_forces`` at the path length and lengthening speed.

    Args:
        c: ``(nc,)`` rad / m, OpenSim's coordinates; cd: ``(nc,)`` rad/s / m/s, their rates.
    """
    mus = _muscles_of(model)
    c = _coordinates(model, c, "c")
    cd = _coordinates(model, cd, "cd").astype(c.dtype)
    return _forces_at(mus, *jax.jvp(lambda x: _lengths(model, x), (c,), (cd,)))


def _forces_at(mus, length, speed):
    """``(F̂, P)`` of `muscle_static_optimization_forces` at path lengths and lengthening speeds
    ``(m,)`` (m, m/s)."""
    active = jnp.zeros_like(length)
    passive = jnp.zeros_like(length)
    for group, index in mus.groups:
        if group is None:
            continue
        idx = np.asarray(index, np.int32)
        f, p = group.static_optimization_forces(length[idx], speed[idx])
        active = active.at[idx].set(f.astype(active.dtype))
        passive = passive.at[idx].set(p.astype(passive.dtype))
    return active, passive


# ---- reading the muscles ---------------------------------------------------------------------------

#: (segment, position, orientation) of a frame in its segment's frame
FramePose = tuple[int, np.ndarray, np.ndarray]


def read_muscles(
    model_elem: ET.Element,
    tree,
    coordinates: Sequence[str],
    disabled: set,
    frame: Callable[[str, str, str, bool], FramePose],
    dtype,
) -> tuple[OsimMuscles | None, set, tuple[str, ...]]:
    """`OsimMuscles` of a ``<Model>`` element's ForceSet (``None`` when it has no enabled Thelen
    or Millard muscle), the set of elements imported and notes for ``Model.ignored`` (muscle
    models whose parameters OpenSim refuses: not imported, the skeleton stays usable). ``frame``
    resolves a body/frame path (as in `jaxbio.forces._osim_forces.read_forces`); ``disabled`` holds
    the ForceSet entries that apply no force."""
    from jaxbio._osim_xml import _describe, _flag, _numbers

    def given(elem) -> bool:  # an empty element is a property the file does not set (OpenSim: its default)
        return bool((elem.text or "").strip())

    def properties(o):  # OpenSim's XML properties of the muscle model (from_opensim's input)
        row, where, cls = {}, _describe(o), MUSCLE_MODELS[o.tag]
        for ch in o:
            if ch.tag in cls.OPENSIM_PROPERTIES and given(ch):
                row[ch.tag] = float(_numbers(o, ch.tag, 1, where)[0])
            elif ch.tag in ("ignore_tendon_compliance", "ignore_activation_dynamics"):
                row[ch.tag] = _flag(o, ch.tag, where)
            elif ch.tag in getattr(cls, "OPENSIM_CURVES", {}):
                props = cls.OPENSIM_CURVES[ch.tag].OPENSIM_PROPERTIES
                row[ch.tag] = {
                    g.tag: float(_numbers(ch, g.tag, 1, f"{where}: <{ch.tag}>")[0])
                    for g in ch
                    if g.tag in props and given(g)
                }
        return row

    def group_of(o) -> str:  # the module a muscle goes to: its class, Millard split by its static tendon flag
        if o.tag == "Millard2012EquilibriumMuscle" and mixed_tendons:
            return RIGID_MILLARD if _flag(o, "ignore_tendon_compliance", _describe(o)) else o.tag
        return o.tag

    elems = [
        o
        for s in model_elem.findall("ForceSet")
        for o in s.findall("objects/*")
        if o.tag in MUSCLE_MODELS and o not in disabled
    ]
    # Millard muscles with rigid and elastic tendons (a static flag of the module): two modules
    millard = [o for o in elems if o.tag == "Millard2012EquilibriumMuscle"]
    mixed_tendons = len({_flag(o, "ignore_tendon_compliance", _describe(o)) for o in millard}) > 1
    # muscle models jaxbio refuses (parameters out of range): not imported, listed in ignored
    notes = []
    for kind, cls in GROUPS.items():
        mine = [o for o in elems if group_of(o) == kind]
        if not mine:
            continue
        try:
            cls.from_opensim([properties(o) for o in mine])
        except (ValueError, NotImplementedError) as e:
            notes.append(f"{mine[0].tag}: {len(mine)} muscles not imported, parameters refused ({e})")
            elems = [o for o in elems if group_of(o) != kind]
    if not elems:
        return None, set(), tuple(notes)

    fields = read_paths(model_elem, elems, tree, coordinates, frame, dtype, "muscle paths")
    dt = fields["paths"].points.dtype
    rows = {t: [] for t in GROUPS}
    for i, o in enumerate(elems):
        rows[group_of(o)].append((i, properties(o)))
    groups = {
        kind: jax.tree_util.tree_map(lambda x: to_device(x, dt), cls.from_opensim([r for _, r in rows[kind]]))
        for kind, cls in GROUPS.items()
        if rows[kind]
    }
    where = [_describe(o) for o in elems]
    muscles = OsimMuscles(
        **fields,
        min_control=to_device(np.array([_control(o, "min_control", w, 0.0) for o, w in zip(elems, where)]), dt),
        max_control=to_device(np.array([_control(o, "max_control", w, 1.0) for o, w in zip(elems, where)]), dt),
        thelen=groups.get("Thelen2003Muscle"),
        millard=groups.get("Millard2012EquilibriumMuscle"),
        millard_rigid=groups.get(RIGID_MILLARD),
        names=tuple(o.get("name", "") for o in elems),
        types=tuple(o.tag for o in elems),
        thelen_index=tuple(i for i, _ in rows["Thelen2003Muscle"]),
        millard_index=tuple(i for i, _ in rows["Millard2012EquilibriumMuscle"]),
        millard_rigid_index=tuple(i for i, _ in rows[RIGID_MILLARD]),
    )
    return muscles, set(elems), tuple(notes)


def _control(elem, tag, where, default):
    from jaxbio.forces._osim_forces import read_control

    return read_control(elem, tag, where, default)
