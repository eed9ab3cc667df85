"""NIR's neuron models as stateful torch modules: ``out, state = m(x, state)``.

The equations, integrated with forward Euler at ``dt``, are in :mod:`.functional`.
"""

from . import functional as functional
from .functional import CubaLIState as CubaLIState
from .functional import DelayState as DelayState
from .functional import IState as IState
from .modules import DEFAULT_DT as DEFAULT_DT
from .modules import IF as IF
from .modules import LI as LI
from .modules import LIF as LIF
from .modules import CubaLI as CubaLI
from .modules import CubaLIF as CubaLIF
from .modules import Delay as Delay
from .modules import I as I
from .simulator import SimulatorNeuron as SimulatorNeuron

__all__ = [
    "DEFAULT_DT",
    "IF",
    "LI",
    "LIF",
    "CubaLI",
    "CubaLIF",
    "CubaLIState",
    "Delay",
    "DelayState",
    "I",
    "IState",
    "SimulatorNeuron",
    "functional",
]
