"""Stateless NIR primitives ⇄ torch modules: Affine, Linear, Scale, Conv, pooling,
Flatten and Threshold, both directions side by side.

Each ``*_to_torch`` function converts one NIR node to a module and each ``*_to_nir``
function one module to a NIR node. NIR shapes exclude the batch axis, torch tensors
carry it first, so dims given in NIR (Flatten) are shifted past it.
"""

from __future__ import annotations

import warnings
from typing import Any

import nir
import numpy as np
import torch
import torch.nn.functional as F

from .errors import LossyConversionWarning, ParameterError, ShapeMismatchError
from .graph import conv_args, given, integer, ints, padding_arg, pool_args
from .neurons.functional import spike

__all__ = [
    "Flatten",
    "Scale",
    "SumPool2d",
    "Threshold",
    "affine_to_torch",
    "avgpool2d_to_nir",
    "avgpool2d_to_torch",
    "conv1d_to_torch",
    "conv2d_to_torch",
    "conv_to_nir",
    "flatten_function_to_nir",
    "flatten_to_nir",
    "flatten_to_torch",
    "linear_to_nir",
    "lppool2d_to_nir",
    "linear_to_torch",
    "nir_flatten_to_nir",
    "scale_to_nir",
    "scale_to_torch",
    "sumpool2d_to_nir",
    "sumpool2d_to_torch",
    "threshold_to_nir",
    "threshold_to_torch",
]


def _tensor(value: Any) -> torch.Tensor:
    return torch.from_numpy(np.array(value, dtype=np.float64))


class Scale(torch.nn.Module):
    r"""Element-wise scaling :math:`y = s \odot x` (``scale`` is a trainable parameter)."""

    def __init__(self, scale: torch.Tensor) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class Threshold(torch.nn.Module):
    r"""Heaviside step :math:`z = [x > \theta]` as 0/1 floats, with a surrogate gradient."""

    def __init__(self, threshold: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("threshold", threshold)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return spike(x, self.threshold)


class SumPool2d(torch.nn.LPPool2d):
    """Sum over each pooling window, zero padding counted.

    It is torch's ``LPPool2d`` with ``norm_type=1`` (what nirtorch builds for NIR's
    SumPool2d), plus NIR's ``padding``, computed as an exact sum: ``LPPool2d`` averages
    and multiplies by the window size, which rounds. Each window's rows are added first
    (in row order), then the row sums (in column order), as strided slices: for 2x2
    windows two additions over the input, several times faster than
    ``avg_pool2d(..., divisor_override=1)`` on the CPU. Takes ``[B, C, H, W]`` or one
    sample ``[C, H, W]``.
    """

    def __init__(
        self,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, int] = 0,
    ) -> None:
        super().__init__(1, kernel_size, stride if stride is not None else kernel_size)
        self.padding = padding

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (kh, kw), (sh, sw), (ph, pw) = _two(self.kernel_size), _two(self.stride), _two(self.padding)
        if ph or pw:
            x = F.pad(x, (pw, pw, ph, ph))
        rows = (x.shape[-2] - kh) // sh + 1
        cols = (x.shape[-1] - kw) // sw + 1
        if rows < 1 or cols < 1:
            return F.avg_pool2d(x, (kh, kw), (sh, sw), 0, divisor_override=1)  # torch's error
        total = x[..., 0 : sh * (rows - 1) + 1 : sh, :]
        for i in range(1, kh):
            total = total + x[..., i : i + sh * (rows - 1) + 1 : sh, :]
        out = total[..., 0 : sw * (cols - 1) + 1 : sw]
        for j in range(1, kw):
            out = out + total[..., j : j + sw * (cols - 1) + 1 : sw]
        return out if kh * kw > 1 else out.clone()


def _two(value: int | tuple[int, ...]) -> tuple[int, int]:
    """A pooling argument as a pair: torch takes one integer for both axes."""
    if isinstance(value, int):
        return value, value
    first, second = value
    return first, second


class Flatten(torch.nn.Flatten):
    """``torch.nn.Flatten`` whose dims are NIR's: counted in one sample, without the batch axis.

    ``start_dim`` and ``end_dim`` hold NIR's numbers. Given a sample of ``rank`` axes
    (the node's input type), the axes in front of it are the batch (or time and batch):
    a batch ``[B, *sample]`` flattens dims ``start_dim + 1`` to ``end_dim + 1``, one
    sample flattens ``start_dim`` to ``end_dim``, as torch layers take unbatched inputs.
    Without ``rank``, one leading batch axis is assumed.
    """

    def __init__(self, start_dim: int = 0, end_dim: int = -1, rank: int | None = None) -> None:
        super().__init__(start_dim, end_dim)
        self.rank = rank

    def extra_repr(self) -> str:
        return super().extra_repr() + ("" if self.rank is None else f", rank={self.rank}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = 1 if self.rank is None else x.dim() - self.rank
        if lead < 0:
            raise ShapeMismatchError(
                f"Flatten takes samples of {self.rank} axes (or batches of them), got shape {list(x.shape)}"
            )
        start, end = self.start_dim, self.end_dim
        return x.flatten(start + lead if start >= 0 else start, end + lead if end >= 0 else end)

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "rank" not in state:  # pickled by an older nirbridge: dims shifted past the batch axis
            state = dict(state, rank=None)
            for key in ("start_dim", "end_dim"):
                if state.get(key, -1) > 0:
                    state[key] -= 1
        super().__setstate__(state)


def _linear(weight: torch.Tensor, bias: torch.Tensor | None) -> torch.nn.Linear:
    """``torch.nn.Linear`` holding the given tensors, skipping its random initialisation."""
    module = torch.nn.Linear.__new__(torch.nn.Linear)
    torch.nn.Module.__init__(module)
    module.out_features, module.in_features = weight.shape
    module.weight = torch.nn.Parameter(weight)
    module.bias = None if bias is None else torch.nn.Parameter(bias)
    return module


def affine_to_torch(node: nir.Affine) -> torch.nn.Linear:
    """Affine ``y = W x + b`` as ``torch.nn.Linear`` (W is (out, in))."""
    weight = _tensor(node.weight)
    if weight.ndim != 2:
        raise ParameterError(f"Affine: weight must be 2-D (out, in), got shape {tuple(weight.shape)}")
    bias = _tensor(node.bias).reshape(-1)
    if bias.numel() == 1:
        bias = bias.expand(weight.shape[0]).clone()
    if bias.shape != (weight.shape[0],):
        raise ParameterError(
            f"Affine: bias has {bias.numel()} elements but the weight has {weight.shape[0]} outputs"
        )
    return _linear(weight, bias)


def linear_to_torch(node: nir.Linear) -> torch.nn.Linear:
    """Linear ``y = W x`` as a bias-free ``torch.nn.Linear``."""
    weight = _tensor(node.weight)
    if weight.ndim != 2:
        raise ParameterError(f"Linear: weight must be 2-D (out, in), got shape {tuple(weight.shape)}")
    return _linear(weight, None)


def scale_to_torch(node: nir.Scale) -> Scale:
    return Scale(_tensor(node.scale))


def threshold_to_torch(node: nir.Threshold) -> Threshold:
    return Threshold(_tensor(node.threshold))


def _conv(node: Any, dims: int) -> torch.nn.Module:
    node_type = type(node).__name__
    weight = _tensor(node.weight)
    if weight.ndim != dims + 2:
        raise ParameterError(
            f"{node_type}: weight must be {dims + 2}-D (C_out, C_in/groups, kernel...), "
            f"got shape {tuple(weight.shape)}"
        )
    stride, padding, dilation, groups = conv_args(node, dims, node_type)
    if padding == "same" and any(s != 1 for s in stride):
        raise ParameterError(
            f"{node_type}: padding='same' with stride {stride} has no torch equivalent; "
            "give the padding as integers"
        )
    if padding == "same":
        totals = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
        if all(t % 2 == 0 for t in totals):
            padding = tuple(t // 2 for t in totals)
    bias = None if node.bias is None else _tensor(node.bias).reshape(-1)
    has_bias = bias is not None and bias.numel() > 0
    cls = torch.nn.Conv1d if dims == 1 else torch.nn.Conv2d
    module = cls(
        weight.shape[1] * groups,
        weight.shape[0],
        tuple(weight.shape[2:]),
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        bias=has_bias,
        dtype=torch.float64,
    )
    with torch.no_grad():
        module.weight.copy_(weight)
        if has_bias:
            module.bias.copy_(bias.expand(weight.shape[0]) if bias.numel() == 1 else bias)
    if has_bias:
        module.register_load_state_dict_pre_hook(_zero_bias_if_absent)
    return module


def _zero_bias_if_absent(
    module: torch.nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any
) -> None:
    """NIR convolutions always carry a bias, so a bias-free torch conv exports a zero
    one; loading that conv's state dict (no ``bias`` key) sets the bias to zero."""
    if prefix + "weight" in state_dict and prefix + "bias" not in state_dict:
        state_dict[prefix + "bias"] = torch.zeros_like(module.bias)


def conv1d_to_torch(node: nir.Conv1d) -> torch.nn.Conv1d:
    """Conv1d as ``torch.nn.Conv1d`` (stride, padding incl. 'same'/'valid', dilation, groups)."""
    return _conv(node, 1)


def conv2d_to_torch(node: nir.Conv2d) -> torch.nn.Conv2d:
    """Conv2d as ``torch.nn.Conv2d`` (stride, padding incl. 'same'/'valid', dilation, groups)."""
    return _conv(node, 2)


def _pool_torch_args(node: Any, owner: str) -> tuple[Any, Any, Any]:
    """A pooling node's (kernel, stride, padding) as torch takes them: one integer where
    the node gives one (as ``torch.nn.AvgPool2d(3)`` keeps ``kernel_size == 3``), else pairs."""
    pairs = pool_args(node, owner)
    stride = node.stride if given(node.stride) else node.kernel_size
    padding = node.padding if given(node.padding) else 0
    values = (node.kernel_size, stride, padding)
    return tuple(pair[0] if np.ndim(value) == 0 else pair for pair, value in zip(pairs, values))


def avgpool2d_to_torch(node: nir.AvgPool2d) -> torch.nn.AvgPool2d:
    """AvgPool2d as ``torch.nn.AvgPool2d`` (zero padding counted in the average)."""
    kernel, stride, padding = _pool_torch_args(node, "AvgPool2d")
    return torch.nn.AvgPool2d(kernel, stride, padding, count_include_pad=True)


def sumpool2d_to_torch(node: nir.SumPool2d) -> SumPool2d:
    """SumPool2d: the sum over each window, with zero padding."""
    return SumPool2d(*_pool_torch_args(node, "SumPool2d"))


def flatten_to_torch(node: nir.Flatten) -> Flatten:
    """Flatten with NIR's dims (counted without the batch axis), over samples of the
    node's input rank."""
    shape = (node.input_type or {}).get("input") if isinstance(node.input_type, dict) else None
    rank = len(shape) if shape is not None and np.ndim(shape) == 1 and len(shape) else None
    return Flatten(
        integer(node.start_dim, "start_dim", "Flatten"), integer(node.end_dim, "end_dim", "Flatten"), rank
    )


# ----------------------------------------------------------------------------- torch → NIR


def _array(tensor: torch.Tensor) -> np.ndarray:
    """A numpy copy of a parameter, keeping its floating dtype."""
    return tensor.detach().cpu().numpy().copy()


def linear_to_nir(module: torch.nn.Linear) -> nir.Affine | nir.Linear:
    """``torch.nn.Linear`` as Affine ``y = W x + b``, or Linear ``y = W x`` without bias."""
    if module.bias is None:
        return nir.Linear(weight=_array(module.weight))
    return nir.Affine(weight=_array(module.weight), bias=_array(module.bias))


def scale_to_nir(module: Scale) -> nir.Scale:
    return nir.Scale(scale=_array(module.scale))


def threshold_to_nir(module: Threshold) -> nir.Threshold:
    return nir.Threshold(threshold=_array(module.threshold))


def conv_to_nir(module: torch.nn.Conv1d | torch.nn.Conv2d) -> nir.Conv1d | nir.Conv2d:
    """``torch.nn.Conv1d``/``Conv2d`` as NIR Conv1d/Conv2d; stride, padding, dilation and
    groups are kept. ``input_shape`` is filled in by the tracer once shapes are known.

    Padding modes other than zeros have no NIR form: they are exported as zero padding
    with a :class:`LossyConversionWarning`.
    """
    return conv_node(
        _array(module.weight),
        _array(module.bias) if module.bias is not None else None,
        stride=module.stride,
        padding=module.padding,
        dilation=module.dilation,
        groups=module.groups,
        padding_mode=module.padding_mode,
    )


def conv_node(
    weight: np.ndarray,
    bias: np.ndarray | None,
    *,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    padding_mode: str = "zeros",
) -> nir.Conv1d | nir.Conv2d:
    """A NIR Conv1d/Conv2d (by ``weight.ndim``) from torch's convolution arguments.

    ``bias=None`` becomes zeros (NIR convolutions always carry one); ``padding='valid'``
    and an even ``'same'`` become integers; ``input_shape`` is left for shape inference.
    """
    dims = weight.ndim - 2
    node_type = f"Conv{dims}d"
    if dims not in (1, 2):
        raise ParameterError(
            f"{node_type}: weight must be 3-D or 4-D (C_out, C_in/groups, kernel...), "
            f"got shape {weight.shape}"
        )
    if padding_mode != "zeros":
        warnings.warn(
            f"padding_mode={padding_mode!r} has no NIR form; "
            "the exported convolution pads with zeros, so values near the border change",
            LossyConversionWarning,
            stacklevel=3,
        )
    strides = ints(stride, dims, "stride", node_type)
    dilations = ints(dilation, dims, "dilation", node_type)
    pads: str | tuple[int, ...] = padding_arg(padding, dims, node_type)
    if pads == "valid":
        pads = (0,) * dims
    elif pads == "same":
        totals = [d * (k - 1) for d, k in zip(dilations, weight.shape[2:])]
        if all(t % 2 == 0 for t in totals):
            pads = tuple(t // 2 for t in totals)
    if bias is None:
        bias = np.zeros(weight.shape[0], weight.dtype)
    cls = nir.Conv1d if dims == 1 else nir.Conv2d
    return cls(
        input_shape=None,
        weight=weight,
        stride=np.array(strides, dtype=np.int64) if dims == 2 else strides[0],
        padding=pads if isinstance(pads, str) else np.array(pads, dtype=np.int64) if dims == 2 else pads[0],
        dilation=np.array(dilations, dtype=np.int64) if dims == 2 else dilations[0],
        groups=int(groups),
        bias=bias,
    )


def _pair(value: int | tuple[int, ...] | None, default: tuple[int, int]) -> np.ndarray:
    if value is None:
        return np.array(default, dtype=np.int64)
    if isinstance(value, int):
        return np.array((value, value), dtype=np.int64)
    return np.array(tuple(value) * (2 if len(value) == 1 else 1), dtype=np.int64)


def avgpool2d_to_nir(module: torch.nn.AvgPool2d) -> nir.AvgPool2d:
    """``torch.nn.AvgPool2d`` as NIR AvgPool2d (zero padding counted in the average).

    ``count_include_pad=False`` with padding, ``ceil_mode=True`` and ``divisor_override``
    have no NIR form; they warn with :class:`LossyConversionWarning` and are dropped.
    """
    kernel = _pair(module.kernel_size, (1, 1))
    stride = _pair(module.stride or None, tuple(kernel))
    padding = _pair(module.padding, (0, 0))
    lost = []
    if not module.count_include_pad and padding.any():
        lost.append("count_include_pad=False (NIR counts the zero padding in the average)")
    if module.ceil_mode:
        lost.append("ceil_mode=True (NIR rounds the output size down)")
    if module.divisor_override:
        lost.append(f"divisor_override={module.divisor_override} (NIR divides by the window size)")
    if lost:
        warnings.warn(
            f"{'; '.join(lost)} cannot be expressed in NIR and is dropped",
            LossyConversionWarning,
            stacklevel=2,
        )
    return nir.AvgPool2d(kernel_size=kernel, stride=stride, padding=padding)


def sumpool2d_to_nir(module: SumPool2d) -> nir.SumPool2d:
    return nir.SumPool2d(
        kernel_size=np.array(_two(module.kernel_size), dtype=np.int64),
        stride=np.array(_two(module.stride), dtype=np.int64),
        padding=np.array(_two(module.padding), dtype=np.int64),
    )


def lppool2d_to_nir(module: torch.nn.LPPool2d) -> nir.SumPool2d:
    """``torch.nn.LPPool2d`` with ``norm_type=1`` (nirtorch's module for SumPool2d): the
    sum over each window, as NIR SumPool2d. Other norms and ``ceil_mode`` have no NIR form."""
    if module.norm_type != 1:
        raise ParameterError(
            f"LPPool2d: norm_type={module.norm_type} has no NIR form; only norm_type=1 (the window "
            "sum) is NIR's SumPool2d"
        )
    if module.ceil_mode:
        raise ParameterError("LPPool2d: ceil_mode=True has no NIR form (NIR rounds the output size down)")
    kernel = _two(module.kernel_size)
    return nir.SumPool2d(
        kernel_size=np.array(kernel, dtype=np.int64),
        stride=np.array(_two(module.stride) if module.stride is not None else kernel, dtype=np.int64),
        padding=np.zeros(2, dtype=np.int64),
    )


def _nir_dim(dim: int, what: str, owner: str) -> int:
    """A torch dim (batch axis 0) as a NIR dim (batch axis excluded)."""
    if dim == 0:
        raise ParameterError(
            f"{owner}: {what}=0 flattens the batch axis into the features, which NIR cannot "
            f"express; flatten from dim 1 (torch.flatten(x, 1) or nn.Flatten())"
        )
    return dim - 1 if dim > 0 else dim


def flatten_to_nir(module: torch.nn.Flatten) -> nir.Flatten:
    """``torch.nn.Flatten`` (dims counted with the batch axis) as NIR Flatten (without).

    ``input_type`` is filled in by the tracer once shapes are known.
    """
    return nir.Flatten(
        input_type=None,
        start_dim=_nir_dim(module.start_dim, "start_dim", "Flatten"),
        end_dim=_nir_dim(module.end_dim, "end_dim", "Flatten"),
    )


def nir_flatten_to_nir(module: Flatten) -> nir.Flatten:
    """nirbridge's :class:`Flatten` (NIR's dims already) as NIR Flatten."""
    return nir.Flatten(input_type=None, start_dim=module.start_dim, end_dim=module.end_dim)


def flatten_function_to_nir(input: Any, start_dim: int = 0, end_dim: int = -1) -> nir.Flatten:
    """``torch.flatten(x, start_dim, end_dim)`` / ``x.flatten(...)`` as NIR Flatten."""
    return nir.Flatten(
        input_type=None,
        start_dim=_nir_dim(start_dim, "start_dim", "torch.flatten"),
        end_dim=_nir_dim(end_dim, "end_dim", "torch.flatten"),
    )
