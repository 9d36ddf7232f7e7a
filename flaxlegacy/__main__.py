"""``python -m flaxlegacy SCRIPT [ARGS]``: run a legacy script with the API active.

``python -m flaxlegacy -m MODULE [ARGS]`` runs a module the same way
(``python -m flaxlegacy -m pytest tests/``).

``python -m flaxlegacy`` followed by a subcommand (``check``, ``convert``,
``data``, ``run``) is the ``flaxlegacy`` command line.
"""

import gc
import sys

from flaxlegacy import cli

if __name__ == '__main__':
  status = cli.main(sys.argv[1:], prog='python -m flaxlegacy')
  if sys.argv[1:2] == ['upgrade']:
    # The process ends here.  What the upgrade built (the parsed trees, the
    # facts) is garbage held in reference cycles, which the collector
    # would walk once more at exit only to free memory the exit frees
    # (0.2 to 0.3 s of CPU on a 10,000-line codebase): left out of it.
    # Nothing of it has a finalizer (files are closed, worker processes
    # joined; atexit handlers still run).
    gc.freeze()
  sys.exit(status)
