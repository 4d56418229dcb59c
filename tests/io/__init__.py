"""Tests of jaxbio.io (readers, writers, OpenSim's coordinate processing)."""

import os

import pytest


def assert_refused(read, path, match: str) -> None:
    """``read(path)`` raises a ``ValueError`` matching ``match`` whose message starts with the path."""
    with pytest.raises(ValueError, match=match) as info:
        read(path)
    assert str(info.value).startswith(os.fspath(path))
