"""Writes the elasticai.creator 0.68 fixtures beside this script, with the real 0.68.

Run with a Python >= 3.12 that has elasticai.creator 0.68.0 and torch (`make venv312`
makes one: .venv312/bin/python tests/data/elasticai-0.68/make_fixtures.py). Each
fixture is a JSON file: what 0.68's own converters and serializers give for one real
torch model, the model's state_dict (dtype, shape, values) and its output for a fixed
input, so that the tests on Python 3.11 (without 0.68) read what 0.68 writes.

- ``ir``: ``{"root": IrSerializer form, "registry": {name: IrSerializer form}}``
- ``legacy``: the same graphs through ``IrSerializerLegacy`` (attributes at the top level)
- ``with_params``: ``Torch2IrWithParams``'s IR (weights as nested tuples in the
  attributes), IrSerializer form
"""

from __future__ import annotations

import json
import pathlib
from importlib.metadata import version

import torch
from elasticai.creator import ir
from elasticai.creator.torch2ir import Torch2IrWithParams, default_module_handlers, get_default_converter

HERE = pathlib.Path(__file__).resolve().parent


class Residual(torch.nn.Module):
    """0.68's new default types: conv2d, batchnorm2d, maxpool2d, adaptiveavgpool2d and a
    functional add."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(4)
        self.pool = torch.nn.MaxPool2d(2)
        self.avg = torch.nn.AdaptiveAvgPool2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y = y + self.norm(y)
        return self.avg(self.pool(y))


def models() -> dict[str, tuple[torch.nn.Module, tuple[int, ...]]]:
    torch.manual_seed(0)
    return {
        "linear": (torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Linear(8, 3)), (6,)),
        "conv1d": (
            torch.nn.Sequential(
                torch.nn.Conv1d(2, 3, 3, stride=2, padding=1),
                torch.nn.Flatten(),
                torch.nn.Linear(3 * 5, 4, bias=False),
            ),
            (2, 10),
        ),
        "residual": (Residual(), (2, 8, 8)),
    }


def serialized(root, registry, serializer) -> dict:
    return {
        "root": serializer.serialize(root),
        "registry": {name: serializer.serialize(graph) for name, graph in registry.items()},
    }


def tensor(value: torch.Tensor) -> dict:
    return {
        "dtype": str(value.dtype).removeprefix("torch."),
        "shape": list(value.shape),
        "data": value.flatten().tolist(),
    }


def main() -> None:
    for name, (model, shape) in models().items():
        model.eval()
        root, registry = get_default_converter()(model)
        with_params = Torch2IrWithParams()
        for handler in default_module_handlers:
            with_params.register()(handler)
        p_root, p_registry = with_params(model)
        x = torch.linspace(-1, 1, 2 * int(torch.tensor(shape).prod())).reshape(2, *shape)
        with torch.no_grad():
            y = model(x)
        document = {
            "made_by": f"elasticai.creator {version('elasticai.creator')}, torch {torch.__version__}",
            "model": repr(model),
            "ir": serialized(root, registry, ir.IrSerializer()),
            "legacy": serialized(root, registry, ir.IrSerializerLegacy()),
            "with_params": serialized(p_root, p_registry, ir.IrSerializer()),
            "state_dict": {k: tensor(v) for k, v in model.state_dict().items()},
            "input": tensor(x),
            "output": tensor(y),
        }
        (HERE / f"{name}.json").write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
