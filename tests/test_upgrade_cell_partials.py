"""flaxlegacy upgrade: a local of a module body holding a legacy recurrent
cell's partial, called legacy-style (rules/recurrent.py).

Research code stacks cells this way (a multi-layer LSTM decoder)::

    for layer_idx in range(num_layers):
      cell = nn.LSTMCell.partial(name='lstm_layer' + str(layer_idx))
      state, output = cell((c, h), input)

Before, the partial and the call kept TODOs.  Now the partial becomes
``functools.partial(legacy_cells.LSTMCell, ...)`` (the shipped cell whose
hidden size comes from the carry) and each call ``cell()((c, h), input)``,
with the legacy auto-name where no name is given.  The upgraded code runs
with FLAXLEGACY=off and is compared with the legacy code under the layer
(flaxlegacy.upgrade.verify: the same parameter tree, the same outputs).
"""

import textwrap

from flaxlegacy.upgrade import upgrade_paths
from flaxlegacy.upgrade import upgrade_source
from flaxlegacy.upgrade import verify

CELLS = '''\
import jax
from flax import nn


class Stack(nn.Module):

  def apply(self, x, num_layers=2, hidden=3):
    carries = [nn.LSTMCell.initialize_carry(jax.random.PRNGKey(0),
                                            (x.shape[0],), hidden)
               for _ in range(num_layers)]
    for i in range(num_layers):
      cell = nn.LSTMCell.partial(name='lstm_layer' + str(i),
                                 gate_fn=nn.sigmoid)
      _, x = cell(carries[i], x)
    return nn.Dense(x, 2)


class Unnamed(nn.Module):

  def apply(self, x):
    x = nn.Dense(x, 3)
    cell = nn.GRUCell.partial()
    for _ in range(2):
      carry = nn.GRUCell.initialize_carry(jax.random.PRNGKey(0),
                                          (x.shape[0],), 3)
      _, x = cell(carry, x)
    return nn.Dense(x, 2)


class NamedAtCall(nn.Module):

  def apply(self, x):
    cell = nn.OptimizedLSTMCell.partial()
    carry = nn.OptimizedLSTMCell.initialize_carry(jax.random.PRNGKey(0),
                                                  (x.shape[0],), 4)
    _, y = cell(carry, x, name='cell')
    return nn.Dense(y, 2)
'''


def up(src):
  return upgrade_source(textwrap.dedent(src))[0]


def _todo_lines(out):
  return [l.strip() for l in out.splitlines() if 'TODO(flaxlegacy' in l]


def test_partial_and_its_calls_change_together():
  out = up(CELLS)
  assert not _todo_lines(out), out
  flat = ' '.join(out.split())
  assert ("cell = functools.partial(legacy_cells.LSTMCell, "
          "name='lstm_layer' + str(i), gate_fn=nn.sigmoid)") in flat, out
  assert '_, x = cell()(carries[i], x)' in flat, out
  # unnamed, in a loop: legacy's one counter for all submodules
  assert ("_, x = cell(name=f'GRUCell_{next(legacy_autoname)}')(carry, x)"
          in flat), out
  assert "_, y = cell(name='cell')(carry, x)" in flat, out
  assert 'Cell.partial(' not in out, out


def test_numbers_and_trees_match_legacy(tmp_path):
  d = tmp_path / 'src'
  d.mkdir()
  (d / 'model.py').write_text(CELLS)
  status, _ = upgrade_paths([str(d)], out=str(tmp_path / 'out'))
  assert status == 0
  checks = [dict(class_name=c, inputs=[((2, 5), 'float32')])
            for c in ('Stack', 'Unnamed', 'NamedAtCall')]
  res = verify.verify_modules(str(d / 'model.py'),
                              str(tmp_path / 'out' / 'model.py'), checks)
  assert [r['status'] for r in res] == ['ok', 'ok', 'ok'], res
  assert all(r['tree'] and r['match'] for r in res), res


def test_other_uses_keep_the_todos_on_both():
  out = up('''\
      import jax
      from flax import nn


      class PassedOn(nn.Module):

        def apply(self, x, wrapper):
          cell = nn.LSTMCell.partial(name='c')
          return wrapper(x, cell=cell)


      class Carry(nn.Module):

        def apply(self, x):
          cell = nn.LSTMCell.partial(name='c')
          carry = cell.initialize_carry(jax.random.PRNGKey(0), (2,), 3)
          return cell(carry, x)


      class Positional(nn.Module):

        def apply(self, x, carry):
          cell = nn.GRUCell.partial(nn.sigmoid)
          return cell(carry, x)
      ''')
  # each partial keeps its legacy form and TODO; no call was rewritten
  assert out.count('nn.LSTMCell.partial(') == 2, out
  assert 'nn.GRUCell.partial(nn.sigmoid)' in out, out
  assert 'functools.partial(legacy_cells' not in out, out
  assert 'cell()(' not in out, out
  assert sum('linen cells take features as a field' in l
             for l in _todo_lines(out)) >= 3, out


# the decoder around it: the stack's first parameter is bound by
# ``.partial`` (a hyper-parameter, a field), the rest passed by keyword to a
# ``.shared`` instance called twice
DECODER = '''\
import jax
from flax import nn


class MultilayerLSTM(nn.Module):

  def apply(self, num_layers, input, previous_states, train=False):
    states = []
    for layer_idx in range(num_layers):
      cell = nn.LSTMCell.partial(name='lstm_layer' + str(layer_idx))
      c, h = previous_states[layer_idx]
      state, output = cell((c, h), input)
      states.append(state)
      input = output
    return states, input


class Decoder(nn.Module):

  def apply(self, x, num_layers=2, hidden=3):
    lstm = MultilayerLSTM.partial(num_layers=num_layers).shared(
        name='multilayer_lstm')
    states = [nn.LSTMCell.initialize_carry(jax.random.PRNGKey(0),
                                           (x.shape[0],), hidden)
              for _ in range(num_layers)]
    states, h = lstm(input=x, previous_states=states, train=True)
    states, h = lstm(input=h, previous_states=states, train=True)
    return nn.Dense(h, 2)
'''


def test_first_parameter_bound_by_partial_is_a_field(tmp_path):
  # legacy's first apply parameter is the input by convention, but one a
  # .partial binds is a hyper-parameter: before, num_layers became the
  # input and the .shared instance a TODO (AttributeError upgraded)
  out = up(DECODER)
  assert not _todo_lines(out), out
  assert 'def __call__(self, input, previous_states, train=False):' in out
  assert "lstm = MultilayerLSTM(num_layers=self.num_layers, " in out, out
  d = tmp_path / 'src'
  d.mkdir()
  (d / 'model.py').write_text(DECODER)
  status, _ = upgrade_paths([str(d)], out=str(tmp_path / 'out'))
  assert status == 0
  res = verify.verify_modules(
      str(d / 'model.py'), str(tmp_path / 'out' / 'model.py'),
      [dict(class_name='Decoder', inputs=[((2, 3), 'float32')])])
  assert [r['status'] for r in res] == ['ok'], res
