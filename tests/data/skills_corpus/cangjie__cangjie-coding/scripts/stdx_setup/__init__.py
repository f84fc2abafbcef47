"""Deterministic stdx installation and cjpm configuration support."""

from .errors import SetupError
from .models import Release, SetupPlan, Toolchain
from .policy import release_for_cjc

__all__ = ["Release", "SetupError", "SetupPlan", "Toolchain", "release_for_cjc"]
