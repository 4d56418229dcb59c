"""Small readers of OpenSim's XML elements (text, numbers, flags, functions), shared by the
importer of the skeleton (`jaxbio.io.osim`), of the ForceSet (`_osim_forces`) and of the muscles
(`_osim_muscles`): below all three, so that none imports another for them."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np

from jaxbio import quaternion as quat
from jaxbio.coordinates import Piecewise
from jaxbio import _osim_functions as fn


FUNCTION_TYPES = (
    "Constant",
    "LinearFunction",
    "SimmSpline",
    "NaturalCubicSpline",
    "PiecewiseLinearFunction",
    "PiecewiseConstantFunction",
    "PolynomialFunction",
    "MultiplierFunction",
)


def _describe(elem: ET.Element) -> str:
    name = elem.get("name")
    return f"{elem.tag} {name!r}" if name is not None else f"<{elem.tag}>"


def _text(elem: ET.Element, tag: str) -> str | None:
    child = elem.find(tag)
    return None if child is None or child.text is None else child.text.strip()


def _numbers(elem: ET.Element, tag: str, n: int | None, where: str, default=None) -> np.ndarray | None:
    text = _text(elem, tag)
    if text is None or text == "":
        if default is None:
            raise ValueError(f"{where}: missing <{tag}>")
        return np.asarray(default, dtype=float)
    try:
        values = np.array(text.split(), dtype=float)
    except ValueError:
        raise ValueError(f"{where}: <{tag}> is not a list of numbers: {text!r}") from None
    if n is not None and len(values) != n:
        raise ValueError(f"{where}: <{tag}> needs {n} numbers, got {len(values)}: {text!r}")
    if not np.isfinite(values).all():
        raise ValueError(f"{where}: <{tag}> must be finite, got {text!r}")
    return values


def _flag(elem: ET.Element, tag: str, where: str) -> bool:
    text = _text(elem, tag)
    if text is None or text == "":
        return False
    if text.lower() not in ("true", "false"):
        raise ValueError(f"{where}: <{tag}> must be true or false, got {text!r}")
    return text.lower() == "true"


def _function_element(elem: ET.Element, properties: tuple[str, ...], where: str) -> ET.Element | None:
    """The function held by ``elem`` (a TransformAxis or a MultiplierFunction): a child element
    ``<function>`` wrapping it (2.x/3.x files) or a child whose tag is its type (4.x files)."""
    candidates = [ch for ch in elem if isinstance(ch.tag, str) and ch.tag not in properties]
    wrapper = [ch for ch in candidates if ch.tag == "function"]
    if wrapper:
        inner = [ch for ch in wrapper[0] if isinstance(ch.tag, str)]
        if len(inner) > 1:
            raise ValueError(f"{where}: <function> holds {len(inner)} functions")
        return inner[0] if inner else None
    if len(candidates) > 1:
        raise ValueError(f"{where}: more than one function ({', '.join(ch.tag for ch in candidates)})")
    return candidates[0] if candidates else None


def _function(elem: ET.Element, where: str) -> Piecewise:
    """An OpenSim function element of one variable (or none) as a `Piecewise`."""
    kind = elem.tag
    here = f"{where}: {_describe(elem)}"
    if kind == "Constant":
        return fn.constant(float(_numbers(elem, "value", 1, here, default=[0.0])[0]))
    if kind == "LinearFunction":
        slope, intercept = _numbers(elem, "coefficients", 2, here, default=[1.0, 0.0])
        return fn.linear(slope, intercept)
    if kind in ("SimmSpline", "NaturalCubicSpline", "PiecewiseLinearFunction", "PiecewiseConstantFunction"):
        x = _numbers(elem, "x", None, here)
        y = _numbers(elem, "y", None, here)
        build = {
            "PiecewiseLinearFunction": fn.piecewise_linear,
            "PiecewiseConstantFunction": fn.piecewise_constant,
        }.get(kind, fn.simm_spline)
        return build(x, y, here)
    if kind == "PolynomialFunction":
        return fn.polynomial(_numbers(elem, "coefficients", None, here, default=[1.0]), here)
    if kind == "MultiplierFunction":
        inner = _function_element(elem, ("scale",), here)
        if inner is None:
            raise ValueError(f"{here}: has no function to scale")
        scale = float(_numbers(elem, "scale", 1, here, default=[1.0])[0])
        return _function(inner, here).scaled(scale)
    hint = " (a smoothing spline fitted at load time: not supported yet)" if kind == "GCVSpline" else ""
    raise ValueError(f"{here}: function type {kind!r} is not supported{hint}; supported: {', '.join(FUNCTION_TYPES)}")


def euler_xyz(angles) -> np.ndarray:
    """OpenSim's orientation: body-fixed X-Y-Z rotations by ``angles`` (rad), as a quaternion."""
    q = np.array([1.0, 0.0, 0.0, 0.0])
    for axis, angle in zip(np.eye(3), np.asarray(angles, dtype=float)):
        q = quat.multiply(q, quat.from_axis_angle(axis, np.asarray(angle)))
    return q / np.linalg.norm(q)
