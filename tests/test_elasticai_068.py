"""nirbridge.adapters.elasticai against the real elasticai.creator 0.68 (Python >= 3.12).

0.68 cannot be imported on Python 3.11 (its code uses PEP 695 syntax), so these tests run
in their own environment: `make test` makes .venv312 (Python >= 3.12, torch,
elasticai.creator 0.68.0, nirbridge) and runs this file there; the suite in .venv
(3.11, elasticai.creator 0.66) leaves it out (tests/conftest.py) and reads 0.68's forms
from the fixtures that tests/data/elasticai-0.68/make_fixtures.py wrote with 0.68.

Each model goes elasticai.creator 0.68's own way in (Torch2Ir, Torch2IrWithParams, its
serializers) and its own way out (Ir2Torch), through NIR in between, and must compute
what it computed before, to the bit.
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from importlib.metadata import version

import pytest
import torch
from elasticai.creator import ir
from elasticai.creator.ir2torch import get_default_converter as ir2torch_converter
from elasticai.creator.torch2ir import (
    Torch2IrWithParams,
    Torch2IrWithParamsAndBuffers,
    default_module_handlers,
)
from elasticai.creator.torch2ir import get_default_converter as torch2ir_converter
from torch import nn

import nirbridge
from nirbridge.adapters import elasticai
from tests.conftest import EXAMPLES
from tests.graphs import assert_same

FIXTURES = EXAMPLES.parent / "elasticai-0.68"


def test_this_is_elasticai_creator_0_68():
    assert version("elasticai.creator") == "0.68.0"
    assert elasticai.installed_version() == "0.68"


# what 0.68's Ir2Torch rebuilds: linear, conv1d (without padding or dilation: its handler
# reads neither), flatten, relu and sigmoid
MODELS = {
    "linear": (lambda: nn.Sequential(nn.Linear(6, 8), nn.Linear(8, 3)), (6,)),
    "linear without bias": (lambda: nn.Sequential(nn.Linear(5, 4, bias=False), nn.Linear(4, 2)), (5,)),
    "conv1d, flatten, linear": (
        lambda: nn.Sequential(nn.Conv1d(2, 3, 3, stride=2), nn.Flatten(), nn.Linear(3 * 4, 4)),
        (2, 10),
    ),
}


def with_params(kind: type = Torch2IrWithParams) -> Torch2IrWithParams:
    converter = kind()
    for handler in default_module_handlers:
        converter.register()(handler)
    return converter


def run_nir(graph, x: torch.Tensor) -> torch.Tensor:
    gm = nirbridge.nir_to_torch(graph, dtype=torch.float32)
    out, _ = gm(x)
    return out


@pytest.mark.parametrize("name", MODELS)
def test_torch2ir_to_nir_and_back_through_ir2torch_computes_the_same(name):
    """0.68's Torch2Ir → to_nir → from_nir(ir_version="0.68") → 0.68's Ir2Torch: the
    rebuilt model gives the original's outputs bit for bit, and nirbridge runs the NIR
    graph to the same outputs."""
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(3, *shape)
    graph = elasticai.to_nir(torch2ir_converter()(model), model.state_dict(), input_shape=shape)
    (root, registry), state = elasticai.from_nir(graph, ir_version="0.68")
    assert isinstance(registry, ir.Registry) and isinstance(root, ir.DataGraph)
    rebuilt = ir2torch_converter()(root, registry, state)
    with torch.no_grad():
        expected = model(x)
        assert torch.equal(rebuilt(x), expected)
        assert torch.equal(run_nir(graph, x), expected)


@pytest.mark.parametrize("kind", [Torch2IrWithParams, Torch2IrWithParamsAndBuffers])
@pytest.mark.parametrize("name", MODELS)
def test_torch2ir_with_params_carries_its_weights_into_nir(name, kind):
    """Torch2IrWithParams (and ...AndBuffers) put the weights in the IR (``bias`` then
    holds the values): to_nir needs no state_dict, and the NIR graph equals the one
    made with it."""
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    carried = elasticai.to_nir(with_params(kind)(model), input_shape=shape)
    given = elasticai.to_nir(torch2ir_converter()(model), model.state_dict(), input_shape=shape)
    assert_same(given, carried)


def test_weights_carried_and_given_must_agree():
    model = nn.Sequential(nn.Linear(3, 2))
    state = {k: v + 1 for k, v in model.state_dict().items()}
    with pytest.raises(
        nirbridge.ParameterError, match=r"'0'.*carry a 'weight'.*differs from the state_dict's '0.weight'"
    ):
        elasticai.to_nir(with_params()(model), state)


@pytest.mark.parametrize("legacy", [False, True], ids=["IrSerializer", "IrSerializerLegacy"])
def test_both_serialized_forms_convert_as_the_objects_do(legacy):
    make, shape = MODELS["conv1d, flatten, linear"]
    model = make()
    root, registry = torch2ir_converter()(model)
    serializer = ir.IrSerializerLegacy() if legacy else ir.IrSerializer()
    dicts = (serializer.serialize(root), {k: serializer.serialize(v) for k, v in registry.items()})
    state = model.state_dict()
    expected = elasticai.to_nir((root, registry), state, input_shape=shape)
    assert_same(expected, elasticai.to_nir(dicts, state, input_shape=shape))


def test_from_nir_gives_what_0_68s_serializer_and_deserializer_agree_on():
    """The objects from_nir builds serialize to the dicts it gives with as_dicts=True,
    and 0.68's deserializer reads those dicts back to graphs that serialize alike."""
    model = MODELS["linear"][0]()
    graph = elasticai.to_nir(torch2ir_converter()(model), model.state_dict())
    (root, registry), _ = elasticai.from_nir(graph, ir_version="0.68")
    (root_d, registry_d), _ = elasticai.from_nir(graph, ir_version="0.68", as_dicts=True)
    serializer = ir.IrSerializer()
    assert serializer.serialize(root) == root_d
    assert {k: serializer.serialize(v) for k, v in registry.items()} == registry_d
    assert serializer.serialize(torch2ir_converter()(model)[0]) == root_d  # Torch2Ir's own root


def test_a_nested_nir_graph_goes_through_0_68_objects_and_back():
    """The Braille SRNN with its recurrent subgraph: NIR → 0.68 objects → NIR."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.RepairWarning)
        graph = nirbridge.read(
            EXAMPLES / "spyx__docs__examples__nir__rsnn__braille_noDelay_bias_zero_subgraph.nir"
        )
    (root, registry), state = elasticai.from_nir(graph, ir_version="0.68")
    back = elasticai.to_nir((root, registry), state)
    assert_same(graph, back, dtypes=False)


def test_the_0_68_types_nir_cannot_express_are_refused_by_name_with_what_to_use():
    """0.68's default handlers add conv2d (mapped), batchnorm2d, maxpool2d,
    adaptiveavgpool2d and a functional add."""
    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.Residual()
    with pytest.raises(nirbridge.UnsupportedImplementationError) as info:
        elasticai.to_nir(torch2ir_converter()(model), model.state_dict(), input_shape=(2, 8, 8))
    assert set(info.value.offenders) == {"batchnorm2d", "maxpool2d", "adaptiveavgpool2d", "add"}
    text = str(info.value)
    for advice in (
        "fold it into the convolution",
        "no max pooling",
        "nn.AvgPool2d with kernel_size",
        "sums every edge",
    ):
        assert advice in text


def test_the_fixtures_are_what_0_68_writes():
    """tests/data/elasticai-0.68/*.json, which the 3.11 suite reads, are what 0.68's
    converters and serializers give for their models today."""
    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, (model, _) in module.models().items():
        stored = json.loads((FIXTURES / f"{name}.json").read_text())
        root, registry = torch2ir_converter()(model)
        fresh = json.loads(json.dumps(module.serialized(root, registry, ir.IrSerializer())))
        assert fresh == stored["ir"], name
        assert stored["made_by"].startswith("elasticai.creator 0.68.0")


@pytest.mark.parametrize("page", ["README.md", "docs/elasticai.md"])
def test_the_0_68_examples_run_as_written_and_print_what_they_show(page, tmp_path):
    from tests.examples import check

    check(page, "elasticai 0.68", tmp_path)


def test_a_lone_data_graph_is_refused_with_what_to_give():
    root, _ = torch2ir_converter()(MODELS["linear"][0]())
    with pytest.raises(nirbridge.GraphStructureError, match=r"give the \(root, registry\) pair"):
        elasticai.to_nir(root)
