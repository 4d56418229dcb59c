"""Issue #22's acceptance check: OpenSim's arm26 inverse dynamics reproduced by jaxbio.

The coordinates file is read (old SIMM header: degrees), processed exactly as OpenSim's
InverseDynamicsTool does with the setup's 6 Hz cutoff (`process_coordinates`), and the moments
of `jb.inverse_dynamics` on the shipped arm26 tree are compared with

- OpenSim's standard ``std_arm26_InverseDynamics.sto`` (OpenSim's own test tolerance, 1e-2 N·m,
  at every one of the 121 frames). The standard was written by an older OpenSim; OpenSim 4.6
  itself differs from it by up to 1.4e-3 N·m in the first frames and ~1e-5 N·m after 0.1 s,
  and so does jaxbio;
- OpenSim 4.6 run live (``InverseDynamicsTool``, results printed with 20 decimals), to 1e-12 N·m, where ``opensim`` is installed, on a patched
  copy of the model in a temporary directory (OpenSim 4.6 refuses the 3.0-era
  ``minimum_activation`` 0 and ``min_control`` 1e-5 of its Thelen muscles; both become 0.01;
  muscles are excluded from inverse dynamics, so the moments do not depend on them).
"""

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.tools import process_coordinates
from jaxbio.io import read_storage

DATA = Path(__file__).parent / "data" / "arm26_id"
NAMES = ["r_shoulder_elev", "r_elbow_flex"]


def _setup():
    root = ET.parse(DATA / "arm26_Setup_InverseDynamics.xml").getroot()
    cutoff = float(root.findtext("lowpass_cutoff_frequency_for_coordinates"))
    start, end = float(root.findtext("initial_time")), float(root.findtext("final_time"))
    return root.findtext("coordinates_file").strip(), cutoff, start, end


@pytest.fixture(scope="module")
def jaxbio_moments():
    coordinates_file, cutoff, start, end = _setup()
    assert cutoff == 6.0
    table = read_storage(DATA / coordinates_file)
    assert table.in_degrees
    p = process_coordinates(table.select(NAMES), lowpass_hz=cutoff, start=start, end=end, rotational=True)
    with jax.enable_x64(True):
        tree = jb.load_model("arm26").tree
        tau = jax.vmap(jb.inverse_dynamics, (None, 0, 0, 0))(tree, p.q, p.qd, p.qdd)
        assert tau.dtype == np.float64
    return p.time, np.asarray(tau)


def test_matches_opensim_standard(jaxbio_moments):
    time, tau = jaxbio_moments
    std = read_storage(DATA / "std_arm26_InverseDynamics.sto")
    assert std.labels == tuple(f"{n}_moment" for n in NAMES)
    np.testing.assert_allclose(time, std.time, rtol=0, atol=1e-18)
    error = np.abs(tau - std.data)
    assert error.shape == (121, 2)
    assert error.max() < 1e-2  # OpenSim's tolerance, every frame
    # measured (see the module docstring): 1.36e-3 N·m at t = 0, 1.4e-5 N·m after 0.1 s
    assert error.max() < 2e-3 and error[time > 0.1].max() < 5e-5


def test_matches_live_opensim(jaxbio_moments, tmp_path, monkeypatch):
    opensim = pytest.importorskip("opensim")
    coordinates_file, cutoff, start, end = _setup()
    model = (DATA / "arm26.osim").read_text()
    patched = model.replace(
        "<minimum_activation> 0.0 </minimum_activation>", "<minimum_activation> 0.01 </minimum_activation>"
    )
    patched = patched.replace("<min_control>0.00001</min_control>", "<min_control>0.01</min_control>")
    assert patched.count("0.01 </minimum_activation>") == 6 and patched.count("<min_control>0.01<") == 6
    (tmp_path / "arm26.osim").write_text(patched)
    shutil.copy(DATA / coordinates_file, tmp_path / coordinates_file)
    (tmp_path / "setup.xml").write_text(f"""<?xml version="1.0" encoding="UTF-8" ?>
<OpenSimDocument Version="40000">
  <InverseDynamicsTool name="arm26">
    <model_file>arm26.osim</model_file>
    <results_directory>Results</results_directory>
    <coordinates_file>{coordinates_file}</coordinates_file>
    <lowpass_cutoff_frequency_for_coordinates>{cutoff}</lowpass_cutoff_frequency_for_coordinates>
    <time_range>{start} {end}</time_range>
    <forces_to_exclude>muscles</forces_to_exclude>
    <output_gen_force_file>id.sto</output_gen_force_file>
  </InverseDynamicsTool>
</OpenSimDocument>
""")
    monkeypatch.chdir(tmp_path)  # the tool opens model_file relative to the working directory
    precision = opensim.IO.GetPrecision()
    opensim.IO.SetPrecision(20)  # OpenSim's output format is global: restored below
    try:
        assert opensim.InverseDynamicsTool(str(tmp_path / "setup.xml")).run()
    finally:
        opensim.IO.SetPrecision(precision)
    live = read_storage(tmp_path / "Results" / "id.sto")
    time, tau = jaxbio_moments
    np.testing.assert_allclose(live.time, time, rtol=0, atol=1e-18)  # printed with 20 decimals
    # the same processed coordinates (test_processing checks them bit for bit) and the same
    # model (jaxbio's arm26.json was built from this .osim): measured 1.8e-15 N·m
    np.testing.assert_allclose(tau, live.data, rtol=0, atol=1e-12)
