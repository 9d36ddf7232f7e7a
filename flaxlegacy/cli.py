"""The ``flaxlegacy`` command: ``run``, ``check``, ``convert``, ``data``,
``upgrade``.

Each subcommand lives in the module that implements it and registers itself
in ``SUBCOMMANDS`` below as ``name -> (module, help)``; the module provides
``add_arguments(parser)`` and ``run(args) -> exit status``.
"""

import argparse
import difflib
import importlib
import os
import runpy
import sys

SUBCOMMANDS = {
    'run': ('flaxlegacy.cli', 'run a legacy Python script (or `-m MODULE`, '
            'e.g. `-m pytest`) with the legacy API active from its first '
            'line (what `python -m flaxlegacy SCRIPT` does)'),
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
  parser.usage = '%(prog)s [-h] (SCRIPT | -m MODULE) [ARGS ...]'
  parser.add_argument('script', metavar='SCRIPT',
                      help='path of the legacy Python script')
  parser.add_argument('args', nargs=argparse.REMAINDER, metavar='ARGS',
                      help='arguments passed to the script')
  parser.epilog = ('`-m MODULE ARGS...` runs a module as `python -m` does, '
                   'e.g. `flaxlegacy run -m pytest tests/` runs a legacy '
                   'test suite.')


class UsageError(Exception):
  """A command line that cannot run: one line on stderr, exit status 2."""


def _legacy_process():
  """Activates, and makes child Python processes legacy too (FLAXLEGACY=on).

  A user's own FLAXLEGACY setting is kept.
  """
  os.environ.setdefault('FLAXLEGACY', 'on')
  import flaxlegacy  # pylint: disable=g-import-not-at-top
  flaxlegacy.activate()


def run_script(script, args):
  """Runs ``script`` as ``__main__`` with the legacy API active."""
  if not os.path.exists(script):
    raise UsageError(f"can't open file {os.path.abspath(script)!r}: "
                     '[Errno 2] No such file or directory')
  _legacy_process()
  sys.argv = [script] + list(args)
  sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
  runpy.run_path(script, run_name='__main__')
  return 0


def run_module(module, args):
  """Runs ``module`` as ``python -m module args`` does, legacy API active."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  from flaxlegacy import _hook  # pylint: disable=g-import-not-at-top
  if os.getcwd() not in sys.path[:1]:
    sys.path.insert(0, os.getcwd())  # as `python -m` does
  _hook.install()  # legacy module paths (-m flax.nn...) resolve
  try:
    found = importlib.util.find_spec(module)
  except (ImportError, ValueError):
    found = None
  if found is None:
    raise UsageError(f'No module named {module}')
  _legacy_process()
  sys.argv = [module] + list(args)  # runpy puts the module's path first
  runpy.run_module(module, run_name='__main__', alter_sys=True)
  return 0


def run(args):
  return run_script(args.script, args.args)


def _run_argv(argv):
  """``[SCRIPT | -m MODULE] ARGS...`` -> exit status (python's rules)."""
  if not argv:
    raise UsageError('give a SCRIPT or -m MODULE')
  if argv[0] == '-m' or (argv[0].startswith('-m') and len(argv[0]) > 2):
    module = argv[0][2:] or (argv[1] if len(argv) > 1 else '')
    rest = argv[1:] if argv[0] != '-m' else argv[2:]
    if not module:
      raise UsageError('argument expected for the -m option')
    return run_module(module, rest)
  return run_script(argv[0], argv[1:])


def _looks_like_a_script(word):
  return (os.path.exists(word) or os.sep in word or
          word.endswith(('.py', '.pyz', '.zip')))


def build_parser(prog='flaxlegacy', command=None):
  """The command line's parser; with ``command``, the arguments of that
  subcommand only (the others' modules are not imported: ``upgrade`` does
  not pay for ``data``'s numpy or ``convert``'s absl at start-up)."""
  parser = argparse.ArgumentParser(
      prog=prog,
      description='flaxlegacy: run, check and migrate legacy Flax code.')
  sub = parser.add_subparsers(dest='command', metavar='COMMAND')
  for name, (module_name, help_text) in SUBCOMMANDS.items():
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.set_defaults(_module=module_name)
    if command is not None and name != command:
      continue  # not the one argv names: argparse never reads its arguments
    try:
      module = importlib.import_module(module_name)
    except ImportError as e:  # not built yet / missing optional dependency
      p.set_defaults(_unavailable=str(e))
      # its arguments are unknown here: take them all, so that the error
      # says why the subcommand cannot run, not that its arguments are
      # unrecognized
      p.add_argument('_rest', nargs=argparse.REMAINDER,
                     help=argparse.SUPPRESS)
      continue
    module.add_arguments(p)
  return parser


def main(argv=None, prog='flaxlegacy'):
  argv = list(sys.argv[1:] if argv is None else argv)
  try:
    # `flaxlegacy run ...` and `python -m flaxlegacy script.py | -m MODULE`
    # take everything after the script or module as its arguments, as
    # `python` does; argparse would claim options such as `-q`.
    if argv and argv[0] == 'run' and argv[1:2] != ['-h'] and (
        argv[1:2] != ['--help']):
      return _run_argv(argv[1:])
    if argv and argv[0].startswith('-m'):
      return _run_argv(argv)
    if argv and argv[0] not in SUBCOMMANDS and not argv[0].startswith('-'):
      if not _looks_like_a_script(argv[0]):
        close = difflib.get_close_matches(argv[0], SUBCOMMANDS, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ''
        raise UsageError(
            f"unknown command '{argv[0]}' (commands: "
            f"{', '.join(SUBCOMMANDS)}; or a script to run){hint}")
      return _run_argv(argv)
  except UsageError as e:
    where = f'{prog} run' if argv and argv[0] == 'run' else prog
    print(f'{where}: error: {e}', file=sys.stderr)
    return 2
  parser = build_parser(prog, argv[0] if argv and argv[0] in SUBCOMMANDS
                        else None)
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
