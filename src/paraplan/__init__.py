"""paraplan: project LLM training step time, memory and the best parallel configuration."""

from paraplan.api import memory, project
from paraplan.errors import ConfigError
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import GpuSpec, SystemSpec
from paraplan.specs.training import TrainingSpec

__all__ = ["project", "memory", "ConfigError", "ModelSpec", "SystemSpec", "GpuSpec", "TrainingSpec"]
__version__ = "0.1.0"
