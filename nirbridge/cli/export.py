"""``nirbridge export``: a torch model in a Python file, traced into a ``.nir`` file."""

from __future__ import annotations

import inspect
import math

import click

from ..errors import ParameterError
from ..limits import check_memory
from ..model_file import is_model_file, model_from_file
from .common import compression_option, echo, one_line_errors, outputs_apart, parse_shape


def simulator_of(model: object) -> str | None:
    """The simulator whose modules ``model`` holds (None: plain torch or nirbridge's own
    modules), as run and verify find it (:func:`nirbridge.native.simulators_of`); a model
    that mixes two simulators' modules has no one exporter, and is refused."""
    from ..native import simulators_of

    found = sorted(sim.name for sim in simulators_of(model) if sim.name != "nirbridge")  # type: ignore[arg-type]
    if len(found) > 1:
        raise ParameterError(
            f"the model holds modules of {' and '.join(found)}; export it from Python with one "
            "adapter's to_nir and a module_map for the other's modules"
        )
    return found[0] if found else None


def _inputs_of(model: object) -> list[str] | None:
    """The names of ``forward``'s arguments that become Input nodes (those without a
    default but ``state``, as the tracer takes them), or None where the signature cannot
    be read."""
    try:
        parameters = inspect.signature(model.forward).parameters.values()  # type: ignore[attr-defined]
    except (TypeError, ValueError, AttributeError):
        return None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        return None
    return [p.name for p in parameters if p.default is p.empty and p.name != "state"]  # traced as None


def _multi_step(model: object) -> bool:
    return any(getattr(m, "step_mode", "s") == "m" for m in model.modules())  # type: ignore[attr-defined]


@click.command(name="export")
@click.argument("model", metavar="FILE.py:NAME")
@click.option("-o", "--output", required=True, type=click.Path(path_type=str), help="The .nir file to write.")
@click.option(
    "--input-shape",
    "input_shapes",
    multiple=True,
    help="The shape of one time step's input without the batch axis, e.g. 2,34,34: needed where the "
    "first layers do not fix it (convolutions, pooling, Flatten). Once per forward argument.",
)
@click.option(
    "--weights", type=click.Path(path_type=str), help="A state dict (torch.save) to load into NAME."
)
@click.option("--dt", type=float, default=None, help="Time step in seconds to record (default: the model's).")
@compression_option("HDF5 compression of the parameters.")
@one_line_errors("export")
def export(
    model: str,
    output: str,
    input_shapes: tuple[str, ...],
    weights: str | None,
    dt: float | None,
    compression: str | None,
) -> None:
    """Trace the torch model NAME in FILE.py into a .nir file.

    NAME is a model, a class built without arguments, or a function returning a model,
    written as one time step (``forward(x)`` or ``forward(x, state)``). Models of norse,
    snntorch and spikingjelly are exported through nirbridge's adapter for that
    simulator (its neurons, its dt), plain torch through ``nirbridge.torch_to_nir``.
    Lossy conversions are printed as warnings.

    \b
    Example:
      nirbridge export model.py:Net -o model.nir
      nirbridge export train.py:build --weights net.pt --input-shape 2,34,34 -o net.nir
    """
    import importlib

    import torch

    from ..io import write
    from ..trace import torch_to_nir

    if not is_model_file(model):
        raise ParameterError(f"{model}: give the model as FILE.py:NAME, e.g. model.py:Net")
    outputs_apart({"FILE": model.rpartition(":")[0], "--weights": weights}, {"--output": output})
    module = model_from_file(model, weights, option="")
    shapes = [shape for shape in map(parse_shape, input_shapes) if shape is not None]
    inputs = _inputs_of(module)
    if shapes and inputs is not None and len(shapes) != len(inputs):
        raise ParameterError(
            f"{model}: its forward takes {len(inputs)} input(s) ({', '.join(inputs)}), and --input-shape "
            f"was given {len(shapes)} time(s); give it once per input, in that order"
        )
    check_memory(
        4 * sum(math.prod(shape) for shape in shapes),
        f"an example input of shape {' and '.join(map(str, shapes))}",
        "give --input-shape one step's shape without the batch axis",
    )
    simulator = simulator_of(module)
    # spikingjelly's multi-step modules take [T, B, ...] and its to_nir reads step 0
    time_axis = (1,) if simulator == "spikingjelly" and _multi_step(module) else ()
    example = [torch.zeros((*time_axis, 1, *shape)) for shape in shapes]
    example_input = None if not example else example[0] if len(example) == 1 else tuple(example)
    if simulator is None:
        graph = torch_to_nir(module, example_input=example_input, dt=dt)
    else:
        adapter = importlib.import_module(f"nirbridge.adapters.{simulator}")
        graph = adapter.to_nir(module, example_input, dt=dt)
    write(output, graph, compression=compression)
    edges = len(graph.edges)
    echo(
        f"wrote {output}: {len(graph.nodes)} nodes, {edges} edges, dt {graph.metadata.get('dt')} s "
        f"({'nirbridge.adapters.' + simulator + '.to_nir' if simulator else 'nirbridge.torch_to_nir'})"
    )
