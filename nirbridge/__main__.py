"""``python -m nirbridge``: the same command line as the ``nirbridge`` script."""

from .cli import main

main()
