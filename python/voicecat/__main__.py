"""``python -m voicecat``: the command-line tool (see :mod:`voicecat.cli`)."""
import sys

from .cli import main

sys.exit(main())
