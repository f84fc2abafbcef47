"""Shared Cangjie documentation query engine."""

from .backend import *
from .catalog import *
from .cli import main, parse_args
from .constants import *
from .content import *
from .expansion import *
from .models import *
from .output import *
from .query import *
from .ranking import *
from .resolve import *
