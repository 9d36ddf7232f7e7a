"""The report's line numbers are those of the file as written.

The program pass runs first and changes the import block (``import optax``,
``from flax.training import train_state`` in, ``from flax import optim``
out); the module rules and early linen then walk the result.  A node that no
pass replaced keeps the line it has in the file as written; a module class
is reported at its ``class`` line though its body is normalised first.
"""

import textwrap

from flaxlegacy.upgrade import api

SRC = textwrap.dedent('''\
    from flax import nn
    from flax import optim
    import jax
    import jax.numpy as jnp


    class MLP(nn.Module):

      def apply(self, x):
        x = nn.Dense(x, 3)
        return nn.relu(x)


    def create_optimizer(params):
      return optim.Momentum(learning_rate=0.1, beta=0.9).create(params)


    def make_layer():
      return nn.Dense.partial(features=3)


    def step(optimizer, grad):
      return optimizer.apply_gradient(grad)
''')


def _line_of(text):
  return next(i for i, l in enumerate(SRC.splitlines(), 1) if text in l)


def test_lines_are_the_written_files():
  new, report = api.upgrade_source(SRC)
  assert 'import optax' in new and 'from flax import optim' not in new
  # the program pass moved the import block: later lines shifted in ``new``
  assert new.splitlines().index('class MLP(nn.Module):') + 1 != _line_of(
      'class MLP(nn.Module):')
  got = {(e['rule'], e['what'].split(' ->')[0]): e['line']
         for e in report.rewritten}
  assert got[('module_class', 'class MLP: apply')] == _line_of('class MLP')
  assert got[('module_call', 'Dense call')] == _line_of('nn.Dense(x, 3)')
  assert got[('partial', '.partial')] == _line_of('nn.Dense.partial')
  assert got[('programs', 'apply_gradient')] == _line_of('apply_gradient')
  assert got[('programs', 'optim.Momentum(...)')] == _line_of(
      'optim.Momentum')
  assert all(e['line'] is not None for e in report.rewritten), (
      report.rewritten)
