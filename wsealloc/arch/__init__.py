"""Machine description: the validated, frozen :class:`Arch` and its YAML loader/presets."""

from wsealloc.arch.loader import PRESETS, load_arch, parse_set_option
from wsealloc.arch.schema import Arch

__all__ = ["Arch", "PRESETS", "load_arch", "parse_set_option"]
