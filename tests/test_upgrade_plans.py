"""What a module rule decides (a plan, flaxlegacy/upgrade/plans.py) is kept
apart from the text it emits (an emitter, flaxlegacy/upgrade/emit/).

A second emitter written here replaces the linen one (``emit.TARGETS``):
it records every plan the rules hand it.  In ``marker`` mode it answers a
placeholder name for each expression plan instead of linen code, so the
upgraded text holds a placeholder wherever a rule's rewrite went through
the emitter -- and linen text written by a rule itself would still show.
Putting back, for each placeholder, what the linen emitter writes for the
recorded plan must give exactly what the upgrade writes.
"""

import re

import libcst as cst
import pytest

from flaxlegacy.upgrade import api
from flaxlegacy.upgrade import emit
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.emit import linen

# the emitter methods whose answer is an expression (a placeholder in
# marker mode); the others (statements, classes, bases) are recorded and
# written by the linen emitter
EXPRESSIONS = ('module_expr', 'name', 'submodule_call', 'instance', 'dropout',
               'rng_draw', 'has_rng', 'param', 'variable', 'is_stateful',
               'submodule_attr', 'checkpoint_call')
STATEMENTS = ('field',)
STRUCTURE = ('call_method', 'module_class', 'module_base', 'module_method',
             'setup', 'shared_scope', 'scoped_method')


class RecordingEmitter:
  """Records (method, plan, linen code); answers placeholders in marker
  mode."""

  marker = False
  log = []
  writes = linen.LinenEmitter

  def __init__(self, rw):
    self.linen = self.writes(rw)
    self.rw = rw

  def __getattr__(self, method):
    if method not in EXPRESSIONS + STATEMENTS + STRUCTURE:
      raise AttributeError(method)

    def record(plan):
      node = getattr(self.linen, method)(plan)
      i = len(RecordingEmitter.log)
      code = (None if isinstance(node, tuple)
              else cst.Module([]).code_for_node(node))
      RecordingEmitter.log.append((method, plan, code))
      if not RecordingEmitter.marker or method in STRUCTURE:
        return node
      if method in STATEMENTS:
        return cst.parse_statement(f'PLAN_{i}_ = 0\n')
      return cst.Name(f'PLAN_{i}_')

    return record


class RecordingProgramEmitter(RecordingEmitter):
  """The same, in place of the program pass's linen emitter."""

  writes = linen.LinenProgramEmitter


def _upgrade(monkeypatch, src, marker):
  monkeypatch.setitem(emit.TARGETS, 'linen', RecordingEmitter)
  monkeypatch.setitem(emit.PROGRAM_TARGETS, 'linen', RecordingProgramEmitter)
  monkeypatch.setattr(RecordingEmitter, 'marker', marker)
  monkeypatch.setattr(RecordingEmitter, 'log', [])
  new, _ = api.upgrade_source(src)
  return new, list(RecordingEmitter.log)


def _put_back(text, log):
  """Placeholders replaced by the linen code of their plans (nested
  plans: the outer code holds the inner placeholder)."""
  for _ in range(len(log) + 1):
    new = re.sub(r'PLAN_(\d+)_( = 0)?',
                 lambda m: log[int(m.group(1))][2].strip(), text)
    if new == text:
      return text
    text = new
  raise AssertionError('placeholders did not settle')


def _plans(log, method):
  return [p for m, p, _ in log if m == method]


def _code(node):
  return cst.Module([]).code_for_node(node).strip()


LEGACY = '''\
import flax.nn as nn


class Block(nn.Module):

  def apply(self, x, features, rate=0.5, train=True):
    y = nn.Dense(x, features, bias=False)
    k = self.param('kernel', (x.shape[-1], features),
                   nn.initializers.lecun_normal())
    count = self.state('count', (1,), nn.initializers.zeros)
    if self.is_stateful():
      count.value += 1
    y = nn.dropout(y, rate)
    if nn.is_stochastic():
      y = y + nn.make_rng()[0]
    return y @ k


class Net(nn.Module):

  def apply(self, x, width=8):
    x = nn.Dense(x, width)
    x = Block(x, width)
    dense = nn.Dense.shared(features=width, name='tied')
    return dense(dense(x))


@nn.module
def Head(x, classes: int = 10):
  """A head."""
  return nn.Dense(x, classes)
'''


def test_the_rules_hand_the_emitter_plans(monkeypatch):
  plain, _ = api.upgrade_source(LEGACY)
  new, log = _upgrade(monkeypatch, LEGACY, marker=False)
  assert new == plain  # recording changes nothing
  kinds = [m for m, _, _ in log]

  (drop,) = _plans(log, 'dropout')
  assert isinstance(drop, plans.Dropout)
  assert _code(drop.inputs) == 'y' and _code(drop.rate) == 'self.rate'
  assert drop.deterministic is None and drop.rng is None  # legacy default

  (param,) = _plans(log, 'param')
  assert (_code(param.name.value), _code(param.shape.value),
          _code(param.initializer.value)) == (
              "'kernel'", '(x.shape[-1], self.features)',
              'nn.initializers.lecun_normal()')

  (var,) = _plans(log, 'variable')
  assert var.collection == 'batch_stats' and not var.write_only
  assert (_code(var.name), _code(var.shape), _code(var.initializer)) == (
      "'count'", '(1,)', 'nn.initializers.zeros')
  assert [p.collection for p in _plans(log, 'is_stateful')] == ['batch_stats']
  assert [p.stream for p in _plans(log, 'rng_draw')] == ['dropout']
  assert [p.stream for p in _plans(log, 'has_rng')] == ['dropout']

  calls = _plans(log, 'submodule_call')
  by_type = {(c.layer.legacy if c.layer is not None else _code(c.module.expr)):
             c for c in calls}
  # Block's Dense: a legacy keyword (bias), to be spelled by the emitter
  dense = next(c for c in calls if c.layer is not None
               and [h.key for h in c.hypers] == ['features', 'bias'])
  assert dense.direct_layer and dense.module.layer is dense.layer
  assert [_code(a.value) for a in dense.inputs] == ['x']
  assert dense.name is None  # Dense_0 in legacy and in linen
  # Net: legacy counts one auto-name for every submodule (Dense_0,
  # Block_1); linen counts per type (Block_0): the plan names it
  block = by_type['Block']
  assert block.layer is None and block.name.literal == 'Block_1'
  assert [h.key for h in block.hypers] == ['features']
  (inst,) = _plans(log, 'instance')
  assert inst.layer.legacy == 'Dense' and inst.name is None
  assert [h.key for h in inst.hypers] == ['features', 'name']

  fields = {p.name: p for p in _plans(log, 'field')}
  assert fields['rate'].annotation == 'float' and fields['rate'].default == '0.5'
  assert fields['features'].default is None
  assert fields['classes'].annotation == 'int'
  methods = _plans(log, 'call_method')
  # Block's and Net's (Head's is its module class's)
  assert [tuple(p.name.value for p in m.inputs) for m in methods] == [
      ('x',), ('x',)]
  assert methods[0].self_param.name.value == 'self'
  (head,) = _plans(log, 'module_class')
  assert head.name == 'Head' and head.call.self_param is None
  assert [p.name.value for p in head.call.inputs] == ['x']
  assert kinds.index('call_method') > kinds.index('dropout')  # body first


def test_every_rewrite_is_the_emitters_text(monkeypatch):
  plain, _ = api.upgrade_source(LEGACY)
  marked, log = _upgrade(monkeypatch, LEGACY, marker=True)
  # no linen text a rule wrote itself: every such construct is a placeholder
  for linen_text in ('Dropout', 'self.param(', 'self.variable(', 'make_rng',
                     'has_rng', 'is_mutable_collection', 'nn.Dense(',
                     'Block(features', ': float', ': int'):
    assert linen_text not in marked, linen_text
  assert 'PLAN_' in marked
  # and the linen emitter's text for the recorded plans is the upgrade's
  assert _put_back(marked, log) == plain


def test_unknown_target_is_named():
  with pytest.raises(ValueError, match="unknown upgrade target 'nnx'"):
    emit.emitter('nnx', None)


METHODS = '''\
import flax.nn as nn


class AE(nn.Module):

  def apply(self, x):
    return nn.Dense(x, 3, name='head')

  @nn.module_method
  def embed(self, x):
    return nn.Dense(x, 3, name='head') * 2


class Auto(nn.Module):

  def apply(self, x):
    return nn.Dense(x, 3)

  @nn.module_method
  def embed(self, x):
    """Embeds."""
    return nn.Dense(x, 3)
'''


def test_module_methods_shape_the_class_by_plans(monkeypatch):
  plain, _ = api.upgrade_source(METHODS)
  new, log = _upgrade(monkeypatch, METHODS, marker=False)
  assert new == plain
  # AE: 'head' is built by __call__ and embed under one literal name: once,
  # in setup, shared by both
  (setup,) = _plans(log, 'setup')
  assert [(attr, _code(call)) for attr, call in setup.submodules] == [
      ('head', "nn.Dense(3, name='head')")]
  assert [p.attr for p in _plans(log, 'submodule_attr')] == ['head', 'head']
  methods = _plans(log, 'module_method')
  # AE's, then Auto's twice: written for the setup form, which then finds
  # no literal name, and again for the shared scope
  assert [m.fn.name.value for m in methods] == ['embed'] * 3
  # Auto: its submodules are auto-named, so both entry points run in one
  # shared scope that builds them inline
  (scope,) = _plans(log, 'shared_scope')
  assert scope.entry_points == ('__call__', 'embed')
  scoped = _plans(log, 'scoped_method')
  assert [(s.fn.name.value, s.scope, s.body_name) for s in scoped] == [
      ('__call__', scope.name, '_call_body'),
      ('embed', scope.name, '_embed_body')]
  # (no marker run here: the setup form finds the submodules in the
  # written bodies -- a decision still read from linen text, see
  # docs/decisions.md)


CHECKPOINTS = '''\
from flax.training import checkpoints


def f(d, state):
  state = checkpoints.restore_checkpoint(d, state)
  checkpoints.save_checkpoint(d, state, 1)
  return checkpoints.restore_checkpoint(d)
'''


def test_program_checkpoints_are_plans(monkeypatch):
  # the one concept of the program pass split so far
  plain, _ = api.upgrade_source(CHECKPOINTS)
  new, log = _upgrade(monkeypatch, CHECKPOINTS, marker=False)
  assert new == plain
  # the one-argument restore stays today's function: no plan
  assert [p.op for p in _plans(log, 'checkpoint_call')] == ['restore', 'save']
  assert [_code(a.value) for a in _plans(log, 'checkpoint_call')[1].call.args
          ] == ['d', 'state', '1']
  marked, log = _upgrade(monkeypatch, CHECKPOINTS, marker=True)
  assert 'legacy_checkpoints.' not in marked
  assert _put_back(marked, log) == plain
