"""The support table is read from the maps: every NIR type nir_to_torch converts has a
row, and what it says for each column follows the maps."""

from __future__ import annotations

import nir

import nirbridge
from nirbridge.adapters import norse as norse_adapter
from nirbridge.adapters import snntorch as snntorch_adapter
from nirbridge.support import COLUMNS, support_table


def test_one_row_per_nir_type_in_the_import_map():
    rows = {row["NIR type"]: row for row in support_table()}
    expected = {"Input", "Output", "NIRGraph"} | {t.__name__ for t in nirbridge.DEFAULT_MAP}
    assert set(rows) == expected
    assert all(set(row) == set(COLUMNS) for row in rows.values())
    # every type nirbridge imports is also exported by one of its modules
    assert all(row["nirbridge"].endswith("⇄") for row in rows.values()), rows


def test_cells_follow_the_maps():
    rows = {row["NIR type"]: row for row in support_table()}
    assert rows["LIF"] == {
        "NIR type": "LIF",
        "nirbridge": "neurons.LIF ⇄",
        "torch (export)": "neurons.LIF",
        "norse": "LIFBoxCell ⇄",
        "snntorch": "Leaky ⇄",
        "spikingjelly": "LIFNode, ParametricLIFNode ⇄",
    }
    assert rows["IF"]["spikingjelly"] == "IFNode ⇄" and rows["CubaLIF"]["spikingjelly"] == "-"
    assert rows["Conv2d"]["spikingjelly"] == "layer.Conv2d → NIR"
    assert rows["NIRGraph"]["spikingjelly"] == "layer.LinearRecurrentContainer → NIR"
    assert rows["Affine"]["nirbridge"] == "nn.Linear ⇄" and rows["Affine"]["torch (export)"] == "nn.Linear"
    assert rows["Conv2d"]["torch (export)"] == "nn.Conv2d"
    assert (
        rows["Flatten"]["torch (export)"] == "nn.Flatten, layers.Flatten, torch.flatten, torch.Tensor.flatten"
    )
    assert rows["CubaLIF"]["norse"] == "LIFCell, LIF ⇄" and rows["CubaLIF"]["snntorch"] == "Synaptic ⇄"
    assert rows["IF"]["snntorch"] == "Leaky ⇄"  # Leaky with β = 1
    assert rows["NIRGraph"]["snntorch"] == "RLeaky, RSynaptic → NIR"
    assert rows["Delay"]["norse"] == "-" and rows["Scale"]["snntorch"] == "-"
    # each adapter row names a module of that adapter's map
    for name, row in rows.items():
        if row["norse"] not in ("-", "LIFRecurrentCell, LILinearCell, LIFRecurrent → NIR"):
            assert any(t.__name__ == name for t in norse_adapter.FROM_NIR)
        if row["snntorch"] not in ("-", "RLeaky, RSynaptic → NIR"):
            assert getattr(nir, name) in snntorch_adapter.FROM_NIR
