"""Work shared by the parallel test workers (pytest-xdist) of one run.

The suite runs in parallel (README's test command: ``-n auto --dist
loadgroup``).  Each worker is a process of its own with its own session
fixtures, so work that is expensive and the same for every worker (building
the wheel, generating the conformance traces) is done once per run, in a
folder every worker of the run shares, under a file lock: the first worker
to ask does it, the others wait and reuse it.
"""

import contextlib
import fcntl
import json
import os


@contextlib.contextmanager
def locked(path):
  """An exclusive lock on ``path`` (created if absent), across processes."""
  with open(path, 'a') as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def shared_root(tmp_path_factory):
  """A folder all xdist workers of this run share (this run's only)."""
  base = tmp_path_factory.getbasetemp()
  return str(base.parent if os.environ.get('PYTEST_XDIST_WORKER') else base)


def once(root, key, make):
  """``make(folder)``'s JSON-able result, computed once per run.

  ``folder`` is ``root/key``, empty at first; the result is kept beside it,
  so every worker gets the same one (a failure included: ``make`` should
  return it rather than raise, for the callers to report).
  """
  folder = os.path.join(root, key)
  done = folder + '.json'
  os.makedirs(root, exist_ok=True)
  with locked(folder + '.lock'):
    if not os.path.exists(done):
      os.makedirs(folder, exist_ok=True)
      result = make(folder)
      with open(done + '.tmp', 'w') as f:
        json.dump(result, f)
      os.replace(done + '.tmp', done)
  with open(done) as f:
    return folder, json.load(f)


# -- keeping the tests that share an expensive fixture on one worker --
#
# ``--dist loadgroup`` keeps the tests marked ``xdist_group`` on one worker
# by adding ``@group`` to their node ids; pytest 9 ignores the attribute
# pytest-xdist 3.8 sets (``item._nodeid``), so the groups were lost and every
# worker built each module-scoped fixture its tests asked for (the HOWTO
# runs twice: about 4 minutes of a 2-core CI).  The scheduler below groups
# from the source instead: a test marked ``xdist_group(NAME)`` (itself or
# by its module's ``pytestmark``) goes with NAME; any other test of a module
# that defines a module-scoped fixture goes with its module; the rest are
# scheduled one by one, as ``load`` does.


def _mark_group(node):
  """NAME of a ``pytest.mark.xdist_group(NAME)`` expression, else None."""
  import ast  # pylint: disable=g-import-not-at-top
  if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
      and node.func.attr == 'xdist_group'):
    args = list(node.args) + [k.value for k in node.keywords
                              if k.arg == 'name']
    if args and isinstance(args[0], ast.Constant):
      return str(args[0].value)
  return None


def _module_scoped_fixture(node):
  import ast  # pylint: disable=g-import-not-at-top
  for d in node.decorator_list:
    if isinstance(d, ast.Call) and 'fixture' in ast.unparse(d.func):
      for k in d.keywords:
        if (k.arg == 'scope' and isinstance(k.value, ast.Constant)
            and k.value.value in ('module', 'package', 'session')):
          return True
  return False


def source_groups(path):
  """(module group or None, {function name: group}) of the test file
  ``path`` (see above)."""
  import ast  # pylint: disable=g-import-not-at-top
  try:
    with open(path) as f:
      tree = ast.parse(f.read())
  except (OSError, SyntaxError, ValueError):
    return None, {}
  module_group, functions = None, {}
  for node in tree.body:
    if isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == 'pytestmark'
        for t in node.targets):
      marks = node.value.elts if isinstance(
          node.value, (ast.List, ast.Tuple)) else [node.value]
      for m in marks:
        module_group = _mark_group(m) or module_group
    elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
      if isinstance(node, ast.FunctionDef) and _module_scoped_fixture(node):
        module_group = module_group or path
      for d in node.decorator_list:
        name = _mark_group(d)
        if name is not None:
          functions[node.name] = name
  return module_group, functions


def make_scheduler(config, log):
  """A pytest-xdist scheduler that keeps the groups above on one worker
  (largest units first, as ``loadscope`` orders them)."""
  from xdist.scheduler import LoadScopeScheduling  # pylint: disable=g-import-not-at-top

  class SharedFixtureScheduling(LoadScopeScheduling):

    def __init__(self, config, log=None):
      super().__init__(config, log)
      self._files = {}

    def _split_scope(self, nodeid):
      path, _, rest = nodeid.partition('::')
      if path not in self._files:
        self._files[path] = source_groups(os.path.join(
            str(config.rootpath), path))
      module_group, functions = self._files[path]
      first = rest.split('::', 1)[0].split('[', 1)[0]
      if first in functions:
        return 'group:' + functions[first]
      if module_group is not None:
        return 'group:' + module_group
      return nodeid

  return SharedFixtureScheduling(config, log)
