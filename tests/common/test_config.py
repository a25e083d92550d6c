"""The one TOML writer: values read back as written, and a rendered layout is
what read_sections reads."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from privadapt.common.config import read_sections, render_layout, render_toml, toml_value
from privadapt.common.mechanisms import Adjacency

SCALARS = (st.text() | st.booleans() | st.integers(-2**63, 2**63 - 1)
           | st.floats(allow_nan=False))


@given(st.dictionaries(st.text(min_size=1), SCALARS | st.lists(SCALARS, max_size=4),
                       max_size=6))
def test_any_value_reads_back_equal(table: dict) -> None:
    text = "\n".join(f"{toml_value(key)} = {toml_value(value)}" for key, value in table.items())
    assert tomllib.loads(text) == table


def test_special_values() -> None:
    assert tomllib.loads(f"x = {toml_value(math.inf)}")["x"] == math.inf
    assert math.isnan(tomllib.loads(f"x = {toml_value(math.nan)}")["x"])
    assert toml_value(Adjacency.ADD_REMOVE_ONE) == '"add_remove_one"'
    assert toml_value(frozenset({"b", "a"})) == '["a", "b"]'
    assert toml_value(Path("/a/b.npz")) == '"/a/b.npz"'
    assert toml_value("\x7f\n\"") == '"\\u007f\\n\\""'
    with pytest.raises(TypeError, match="cannot write"):
        toml_value(object())


def test_none_and_empty_values_and_empty_sections_are_left_out() -> None:
    text = render_toml({"a": {"x": 1, "y": None, "z": ""}, "b": {"w": None}})
    assert text == "[a]\nx = 1\n"


def test_paths_inside_the_directory_are_written_relative_to_it(tmp_path: Path) -> None:
    table = {"s": {"inside": tmp_path / "d" / "f.npz", "outside": Path("/elsewhere/f.npz")}}
    assert tomllib.loads(render_toml(table, relative_to=tmp_path)) == {
        "s": {"inside": "d/f.npz", "outside": "/elsewhere/f.npz"}}


def test_a_rendered_layout_is_read_back() -> None:
    class Record:
        name, count, ratio, flag = "n", 3, 0.5, None

    layout = {"one": {"name": (str, True), "count": (int, True)},
              "two": {"ratio": (float, False), "flag": (bool, False)}}
    text = render_layout(layout, Record())
    assert read_sections(tomllib.loads(text), layout, "test") == {
        "name": "n", "count": 3, "ratio": 0.5}
