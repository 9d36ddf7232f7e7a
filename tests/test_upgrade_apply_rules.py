"""A module body's rewriter, by concept: rules/apply_rewriter.py composes
``ApplyRewriter`` from one mixin per legacy concept (rules/apply/) and a
file's ``Upgrader`` (rules/rewriter.py).

Every call case a concept module defines is in one of the tables the one
``leave_Call`` tries (a case missing from them would silently never run),
the last case always answers, the concept modules import nothing of their
package, and the cases run in the table's order on a legacy body.
"""

import ast
import inspect
import os
import textwrap

from flaxlegacy.upgrade import upgrade_source
from flaxlegacy.upgrade.rules import apply_rewriter
from flaxlegacy.upgrade.rules import rewriter
from flaxlegacy.upgrade.rules.apply import module_calls

PACKAGE = os.path.dirname(inspect.getfile(module_calls))
PREFIX = 'flaxlegacy.upgrade.rules.apply'


def _mixins():
  return [k for k in apply_rewriter.ApplyRewriter.__mro__
          if k.__module__.startswith(PREFIX + '.')]


def test_every_concept_module_is_a_mixin_of_the_rewriter():
  modules = {f[:-3] for f in os.listdir(PACKAGE)
             if f.endswith('.py') and f != '__init__.py'}
  assert modules == {k.__module__.rpartition('.')[2] for k in _mixins()}


def test_mixins_define_no_hooks():
  # libcst calls one hook per node type: a concept's hook would shadow the
  # rewriter's (or another concept's) by the order of the bases
  for k in _mixins():
    hooks = [n for n in vars(k) if n.startswith(('visit_', 'leave_'))]
    assert not hooks, f'{k.__name__}: {hooks}'


def test_every_call_case_is_in_a_table_once():
  cases = [(k.__name__, n, fn) for k in _mixins()
           for n, fn in vars(k).items() if n.startswith('_call_')]
  tables = apply_rewriter.FIRST_CALL_CASES + apply_rewriter.CALL_CASES
  assert len(cases) == 7
  for cls, name, fn in cases:
    assert tables.count(fn) == 1, f'{cls}.{name}'
  # the two cases that are not a concept's: the attention cache and the
  # life cycle of a module held by a parameter (rules/drivers.py)
  assert len(tables) == len(cases) + 2


def test_callee_case_is_last():
  # it always answers (the call as it was, with a TODO where one is due)
  assert apply_rewriter.CALL_CASES[-1] is (
      module_calls.ModuleCallRules._call_callee)  # pylint: disable=protected-access


def test_file_call_cases_are_the_upgraders_in_order():
  # a file's rules (rules/rewriter.py): recurrent cells first, then
  # partials of initializers, the module-level .partial (and its TODO)
  # last, as it always answers
  own = [fn for n, fn in vars(rewriter.Upgrader).items()
         if n.startswith('_call_')]
  assert len(own) == 4
  assert rewriter.FILE_CALL_CASES[2:] == tuple(own)
  assert rewriter.FILE_CALL_CASES[-1] is (
      rewriter.Upgrader._call_module_level_partial)  # pylint: disable=protected-access
  assert rewriter.FILE_CALL_CASES[0].__module__.endswith('.recurrent')
  assert rewriter.FILE_CALL_CASES[1].__module__.endswith(
      '.initializer_partials')


def test_concept_modules_import_nothing_of_their_package():
  for f in sorted(os.listdir(PACKAGE)):
    if not f.endswith('.py'):
      continue
    with open(os.path.join(PACKAGE, f), encoding='utf-8') as fh:
      tree = ast.parse(fh.read())
    for node in ast.walk(tree):
      names = []
      if isinstance(node, ast.ImportFrom):
        names = [node.module or '']
      elif isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      for n in names:
        assert not n.startswith(PREFIX), f'{f} imports {n}'


def test_cases_on_one_body():
  src = textwrap.dedent('''
      from flax import nn

      class M(nn.Module):

        def apply(self, x, features=3, shared_embedding=None):
          w = self.param('w', (x.shape[-1], features), nn.initializers.zeros)
          if nn.is_stochastic():
            x = nn.dropout(x, 0.5)
          dense = nn.Dense.partial(features=features)
          shared = nn.Dense.shared(features=features)
          x = shared(x) + shared(x)
          if shared_embedding is None:
            embed = nn.Embed.partial(num_embeddings=4, features=features)
          else:
            embed = shared_embedding
          x = embed(x)
          return dense(x @ w)
      ''')
  out = upgrade_source(src)[0]
  # self_methods.py: linen's argument order
  assert ("w = self.param('w', nn.initializers.zeros, (x.shape[-1], "
          'self.features))') in out
  # stochastic.py
  assert "if self.has_rng('dropout'):" in out
  assert 'x = nn.Dropout(rate=0.5, deterministic=False)(x)' in out
  # instances.py: .partial in a body -> functools.partial; .shared -> one
  # instance (a bare-digit legacy name) called twice; a local that holds
  # X.partial or a module from outside, called once -> one instance (a
  # first case: the file's rules would have made it a functools.partial)
  assert 'dense = functools.partial(nn.Dense, features=self.features)' in out
  assert "shared = nn.Dense(features=self.features, name='0')" in out
  assert 'x = shared(x) + shared(x)' in out
  assert ("embed = nn.Embed(num_embeddings=4, features=self.features, "
          "name='Embed_1')") in out
  assert 'x = embed(x)' in out
  # module_calls.py: the partial's call gets its legacy auto-name (one
  # counter over all module types)
  assert "return dense(name='Dense_2')(x @ w)" in out
