"""``python -m flaxlegacy SCRIPT [ARGS]``: run a legacy script with the API active.

``python -m flaxlegacy -m MODULE [ARGS]`` runs a module the same way
(``python -m flaxlegacy -m pytest tests/``).

``python -m flaxlegacy`` followed by a subcommand (``check``, ``convert``,
``data``, ``run``) is the ``flaxlegacy`` command line.
"""

import sys

from flaxlegacy import cli

if __name__ == '__main__':
  sys.exit(cli.main(sys.argv[1:], prog='python -m flaxlegacy'))
