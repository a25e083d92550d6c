"""The one TOML writer: values read back as written, and a rendered layout is
what read_sections reads."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from privadapt.common.config import read_sections, render_layout, render_toml, toml_text
from privadapt.common.mechanisms import Adjacency

SCALARS = (st.text() | st.booleans() | st.integers(-2**63, 2**63 - 1)
           | st.floats(allow_nan=False))


@given(st.dictionaries(st.text(min_size=1), SCALARS | st.lists(SCALARS, max_size=4),
                       max_size=6))
def test_any_value_reads_back_equal(table: dict) -> None:
    assert tomllib.loads(toml_text({"section": table})) == {"section": table}


def test_strings_with_quotes_backslashes_and_newlines_read_back_equal() -> None:
    texts = ['say "hi"', "C:\\data\\site.npz", "two\nlines\r\n", "tab\tand DEL \x7f", "\x00\x1f",
             "'single' and \"\"\"triple\"\"\"", "\\u0041 is not A", "ünïcødé ✓"]
    document = {"s": {f"k{i}": text for i, text in enumerate(texts)} | {"all": texts}}
    assert tomllib.loads(toml_text(document)) == document


def test_infinite_and_nan_floats_read_back() -> None:
    values = tomllib.loads(toml_text({"inf": math.inf, "minus": -math.inf, "nan": math.nan,
                                      "tiny": 5e-324, "delta": 1e-05, "zero": -0.0}))
    assert values["inf"] == math.inf and values["minus"] == -math.inf
    assert math.isnan(values["nan"])
    assert values["tiny"] == 5e-324 and values["delta"] == 1e-05
    assert math.copysign(1.0, values["zero"]) == -1.0


def test_enums_paths_and_sets_are_written_as_plain_values() -> None:
    text = toml_text({"a": Adjacency.ADD_REMOVE_ONE, "s": frozenset({"b", "a"}),
                      "p": Path("/a/b.npz"), "t": {"nested": (Path("x"), {"c"})}})
    assert tomllib.loads(text) == {"a": "add_remove_one", "s": ["a", "b"], "p": "/a/b.npz",
                                   "t": {"nested": ["x", ["c"]]}}
    with pytest.raises(TypeError, match="not TOML serializable"):
        toml_text({"x": object()})


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
