"""pytest plugin: plain ``pytest`` in a legacy tree runs legacy from the start.

Registered as a ``pytest11`` entry point, so pytest loads it in every run
where flaxlegacy is installed.  Before conftest files and test modules are
imported (``pytest_load_initial_conftests``), it looks at the Python files
of the tree being tested (pytest's rootdir and the paths given on the
command line): if one of them imports the legacy Flax API (``from flax
import nn``, ``flax.optim``, ``flax.deprecated``), the run is made legacy
from its first line, as ``FLAXLEGACY=on pytest`` or ``flaxlegacy run -m
pytest`` would: flaxlegacy is activated now and ``FLAXLEGACY=on`` is set
for the processes the tests start.  So a data pipeline that calls ``int()``
of a one-element array, or draws random numbers, before the first legacy
import gets legacy behaviour, as it did in 2020-2021.

Any other tree is left alone: nothing is imported beyond this module and
the header says nothing.  ``FLAXLEGACY=off`` (flaxlegacy off),
``FLAXLEGACY=on`` (already legacy), ``FLAXLEGACY_PYTEST=off`` or
``-p no:flaxlegacy`` keep the plugin out.

The scan reads files as text and parses only those that mention ``flax``
and a legacy name; it skips hidden directories, virtual environments,
site-packages and build output, and stops after ``MAX_FILES`` files.
"""

import ast
import os

import pytest

MAX_FILES = 20000
_SKIP_DIRS = frozenset(('__pycache__', 'node_modules', 'site-packages',
                        'dist-packages', 'build', 'dist', '.eggs'))
_CANDIDATE_WORDS = (b'nn', b'optim', b'deprecated')
_LEGACY_ROOTS = ('flax.nn', 'flax.optim', 'flax.deprecated')
_LEGACY_NAMES = ('nn', 'optim', 'deprecated')
_OFF = ('off', '0', 'false', 'no', 'modern')
_ON = ('on', '1', 'true', 'yes', 'legacy')

_state = {'reason': None}


def _legacy_module(name):
  return any(name == r or name.startswith(r + '.') for r in _LEGACY_ROOTS)


def legacy_import(source):
  """The line of the first legacy Flax import in ``source``, else None."""
  try:
    tree = ast.parse(source)
  except (SyntaxError, ValueError):
    return None
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
      if _legacy_module(node.module) or (
          node.module == 'flax' and
          any(a.name in _LEGACY_NAMES for a in node.names)):
        return node.lineno
    elif isinstance(node, ast.Import):
      if any(_legacy_module(a.name) for a in node.names):
        return node.lineno
    elif (isinstance(node, ast.Attribute) and node.attr in _LEGACY_NAMES and
          isinstance(node.value, ast.Name) and node.value.id == 'flax'):
      return node.lineno
  return None


def _python_files(root):
  if os.path.isfile(root):
    if root.endswith('.py'):
      yield root
    return
  for dirpath, dirnames, filenames in os.walk(root):
    dirnames[:] = sorted(
        d for d in dirnames if not d.startswith('.') and d not in _SKIP_DIRS
        and not os.path.exists(os.path.join(dirpath, d, 'pyvenv.cfg')))
    for name in sorted(filenames):
      if name.endswith('.py'):
        yield os.path.join(dirpath, name)


def find_legacy_import(roots, max_files=MAX_FILES):
  """'path:line' of the first legacy Flax import under ``roots``, else None."""
  seen = set()
  count = 0
  for root in roots:
    for path in _python_files(root):
      real = os.path.realpath(path)
      if real in seen:
        continue
      seen.add(real)
      count += 1
      if count > max_files:
        return None
      try:
        with open(path, 'rb') as f:
          data = f.read()
      except OSError:
        continue
      if b'flax' not in data or not any(n in data for n in _CANDIDATE_WORDS):
        continue
      line = legacy_import(data)
      if line is not None:
        return f'{path}:{line}'
  return None


def _roots(early_config):
  roots = [str(early_config.rootpath)]
  namespace = getattr(early_config, 'known_args_namespace', None)
  for arg in getattr(namespace, 'file_or_dir', None) or ():
    path = os.path.abspath(str(arg).split('::')[0])
    if os.path.exists(path):
      roots.append(path)
  return roots


def _keep_assertions_as_written(early_config):
  # pytest marks every package of a distribution with a pytest11 entry point
  # for assertion rewriting; flaxlegacy's own asserts (legacy attention's
  # shape checks ...) keep their legacy messages, so only this module is
  # a plugin.  (Private pytest state; a pytest without it changes nothing.)
  hook = getattr(early_config.pluginmanager, 'rewrite_hook', None)
  must = getattr(hook, '_must_rewrite', None)
  if isinstance(must, set):
    must.discard('flaxlegacy')
    getattr(hook, '_marked_for_rewrite_cache', {}).clear()


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):  # pylint: disable=unused-argument
  """Makes the run legacy before any conftest or test module is imported."""
  _keep_assertions_as_written(early_config)
  setting = os.environ.get('FLAXLEGACY', '').strip().lower()
  if setting in _OFF or setting in _ON:
    return
  if os.environ.get('FLAXLEGACY_PYTEST', '').strip().lower() in _OFF:
    return
  found = find_legacy_import(_roots(early_config))
  if found is None:
    return
  _state['reason'] = found
  # As `flaxlegacy run -m pytest`: legacy here and in child processes.
  os.environ['FLAXLEGACY'] = 'on'
  import flaxlegacy  # pylint: disable=g-import-not-at-top
  flaxlegacy.activate()


def pytest_report_header(config):  # pylint: disable=unused-argument
  if _state['reason'] is None:
    return None
  return (f'flaxlegacy: legacy tree ({_state["reason"]} imports the legacy '
          'Flax API): legacy mode on from the start (FLAXLEGACY=on); '
          'FLAXLEGACY_PYTEST=off keeps it out')
