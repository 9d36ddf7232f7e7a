"""The ``flaxlegacy`` command: ``run``, ``check``, ``convert``, ``data``,
``upgrade``.

Each subcommand lives in the module that implements it and registers itself
in ``SUBCOMMANDS`` below as ``name -> (module, help)``; the module provides
``add_arguments(parser)`` and ``run(args) -> exit status``.
"""

import argparse
import importlib
import os
import runpy
import sys

SUBCOMMANDS = {
    'run': ('flaxlegacy.cli', 'run a legacy Python script with the legacy '
            'API active (what `python -m flaxlegacy SCRIPT` does)'),
    'check': ('flaxlegacy.migrate.check', 'scan a codebase for legacy Flax / '
              'removed JAX names and report support and modern equivalents'),
    'convert': ('flaxlegacy.migrate.convert', 'convert a legacy checkpoint '
                'into one that today\'s flax/orbax restores as a TrainState'),
    'data': ('flaxlegacy.datasets.cli', 'prepare datasets (MNIST) offline '
             'for unchanged tfds.load calls'),
    'upgrade': ('flaxlegacy.upgrade.cli', 'rewrite legacy flax.nn modules as '
                'linen source with the same parameters and numbers'),
}


def add_arguments(parser):
  parser.add_argument('script', help='path of the legacy Python script')
  parser.add_argument('args', nargs=argparse.REMAINDER,
                      help='arguments passed to the script')


def run_script(script, args):
  """Runs ``script`` as ``__main__`` with the legacy API active."""
  import flaxlegacy  # pylint: disable=g-import-not-at-top
  flaxlegacy.activate()
  sys.argv = [script] + list(args)
  sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
  runpy.run_path(script, run_name='__main__')
  return 0


def run(args):
  return run_script(args.script, args.args)


def build_parser(prog='flaxlegacy'):
  parser = argparse.ArgumentParser(
      prog=prog,
      description='flaxlegacy: run, check and migrate legacy Flax code.')
  sub = parser.add_subparsers(dest='command', metavar='COMMAND')
  for name, (module_name, help_text) in SUBCOMMANDS.items():
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.set_defaults(_module=module_name)
    try:
      module = importlib.import_module(module_name)
    except ImportError as e:  # not built yet / missing optional dependency
      p.set_defaults(_unavailable=str(e))
      continue
    module.add_arguments(p)
  return parser


def main(argv=None, prog='flaxlegacy'):
  argv = list(sys.argv[1:] if argv is None else argv)
  # `python -m flaxlegacy script.py args...` runs a script directly.
  if argv and argv[0] not in SUBCOMMANDS and not argv[0].startswith('-'):
    return run_script(argv[0], argv[1:])
  parser = build_parser(prog)
  args = parser.parse_args(argv)
  if not args.command:
    parser.print_help()
    return 2
  if getattr(args, '_unavailable', None):
    parser.error(f'{args.command} is unavailable: {args._unavailable}')  # pylint: disable=protected-access
  module = importlib.import_module(args._module)  # pylint: disable=protected-access
  return module.run(args) or 0


if __name__ == '__main__':
  sys.exit(main())
