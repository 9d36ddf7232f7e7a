"""The program pass's structure: one module per legacy concept
(flaxlegacy/upgrade/rules/program/), composed by rules/programs.py.

Every case a concept module defines is in the table that the shared hook
tries (a case missing from it would silently never run), the concept
modules import nothing of their package but shared.py, and the tables'
cases behave as the table says (checkpoint functions by their fewest
arguments, optimizer methods by name).
"""

import ast
import inspect
import os
import textwrap

from flaxlegacy.upgrade import upgrade_source
from flaxlegacy.upgrade.rules import programs
from flaxlegacy.upgrade.rules.program import checkpoints
from flaxlegacy.upgrade.rules.program import training_steps

PACKAGE = os.path.dirname(inspect.getfile(checkpoints))
PREFIX = 'flaxlegacy.upgrade.rules.program'


def _mixins():
  return [k for k in programs.ProgramRewriter.__mro__
          if k.__module__.startswith(PREFIX + '.')]


def _cases(prefix):
  return [(k.__name__, name, fn) for k in _mixins()
          for name, fn in vars(k).items() if name.startswith(prefix)]


def test_every_concept_module_is_a_mixin_of_the_rewriter():
  modules = {f[:-3] for f in os.listdir(PACKAGE)
             if f.endswith('.py') and f != '__init__.py'}
  with_mixin = {k.__module__.rpartition('.')[2] for k in _mixins()}
  # shared.py (constants, helpers) and imports.py (after the walk) hold
  # no hooks
  assert modules - with_mixin == {'shared', 'imports'}


def test_every_call_case_is_in_call_rules_once():
  cases = _cases('_call_')
  assert len(cases) == len(programs.CALL_RULES) == 16
  for cls, name, fn in cases:
    assert programs.CALL_RULES.count(fn) == 1, f'{cls}.{name}'


def test_every_assign_case_is_in_assign_rules_once():
  cases = _cases('_assign_')
  assert {fn for _, _, fn in cases} == set(programs.ASSIGN_RULES)
  assert len(programs.ASSIGN_RULES) == len(cases) == 4


def test_every_attribute_case_is_in_attribute_cases():
  cases = _cases('_attr_')
  assert {fn for _, _, fn in cases} == set(programs.ATTRIBUTE_CASES.values())
  assert sorted(programs.ATTRIBUTE_CASES) == ['call', 'params', 'state', 'step',
                                             'target']


def test_concept_modules_import_only_shared_of_their_package():
  for f in sorted(os.listdir(PACKAGE)):
    if not f.endswith('.py'):
      continue
    with open(os.path.join(PACKAGE, f), encoding='utf-8') as fh:
      tree = ast.parse(fh.read())
    inside = set()
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and node.module == PREFIX:
        inside |= {a.name for a in node.names}
      elif isinstance(node, ast.ImportFrom) and (
          node.module or '').startswith(PREFIX + '.'):
        inside.add(node.module[len(PREFIX) + 1:])
      elif isinstance(node, ast.Import):
        inside |= {a.name[len(PREFIX) + 1:] for a in node.names
                   if a.name.startswith(PREFIX + '.')}
    allowed = set() if f == 'shared.py' else {'shared'}
    assert inside <= allowed, f'{f} imports {sorted(inside - allowed)}'


def _up(src):
  return upgrade_source(textwrap.dedent(src))[0]


def test_checkpoint_table_fewest_arguments():
  assert checkpoints.CHECKPOINT_FUNCTIONS[
      'flax.training.checkpoints.restore_checkpoint'][0] == 2
  src = '''
      from flax.training import checkpoints

      def f(d, state):
        a = checkpoints.restore_checkpoint(d, state)
        b = checkpoints.restore_checkpoint(d)
        checkpoints.save_checkpoint(d, state, 1)
        return a, b
      '''
  out = _up(src)
  # two arguments or more: rewritten; one: today's function as written
  assert 'a = legacy_checkpoints.restore_checkpoint(d, state)' in out
  assert 'b = checkpoints.restore_checkpoint(d)' in out
  assert 'legacy_checkpoints.save_checkpoint(d, state, 1)' in out
  assert ('from flaxlegacy.migrate import upgraded as legacy_checkpoints'
          in out)


def test_optimizer_methods_table():
  assert set(training_steps.OPTIMIZER_METHODS) == {
      'apply_gradient', 'compute_gradient', 'compute_gradients', 'replicate',
      'unreplicate'}
  src = '''
      from flax import optim

      def step(optimizer, grad):
        optimizer = optimizer.apply_gradient(grad)
        optimizer = optimizer.replicate()
        optimizer = optimizer.unreplicate()
        optimizer = optimizer.replicate(3)
        loss, grad = optimizer.compute_gradient(lambda t: t['w'] ** 2)
        out = optimizer.compute_gradient(lambda t: t['w'], 1)
        return optimizer.target
      '''
  out = _up(src)
  assert 'optimizer = optimizer.apply_gradients(grads=grad)' in out
  assert 'optimizer = jax_utils.replicate(optimizer)' in out
  assert 'optimizer = jax_utils.unreplicate(optimizer)' in out
  # an argument: not the legacy method's form, left as written
  assert 'optimizer = optimizer.replicate(3)' in out
  assert ("loss, grad = legacy_model.compute_gradient(lambda t: t['w'] ** 2, "
          'optimizer.params)') in out
  # legacy took the loss function alone: left as written, with a TODO
  assert "out = optimizer.compute_gradient(lambda t: t['w'], 1)" in out
  assert 'optimizer.compute_gradient(...): legacy took the loss function' in (
      out)
  assert 'return optimizer.params' in out
