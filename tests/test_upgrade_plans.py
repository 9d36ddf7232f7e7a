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
               'submodule_attr', 'checkpoint_call',
               # the program pass's
               'apply_gradients', 'replicate', 'params_of', 'step_of',
               'init_model', 'module_partial', 'apply_model',
               'module_function', 'transformation', 'multi_transform',
               'make_train_state', 'traversal_object', 'dynamic_scale',
               'model_apply', 'model_value', 'model_params', 'model_type',
               'program_rng', 'stochastic_scope', 'collection_dict',
               'per_step_user_transformation', 'runtime_stateful',
               'legacy_type', 'initialize_cache',
               # partials and splatted dicts
               'partial_module', 'catch_all_dict', 'split_kwargs',
               'runtime_submodule_call',
               # legacy recurrent cells
               'recurrent_cell', 'cell_scan', 'cell_carry', 'cell_partial',
               'cell_partial_call',
               # legacy attention, the cache in module bodies
               'attention', 'attention_partial', 'known_module',
               'cache_entry',
               # subclasses (rules/subclasses.py)
               'layer_base', 'plain_module_base',
               # drivers (rules/drivers.py)
               'driven_lifecycle',
               # a value of layers / classes / functions called legacy-style
               'runtime_layer_call',
               # a partial of a user initializer of more than (key, shape)
               'legacy_initializer',
               # a raw JAX transform lifted (rules/apply/lifted_transforms.py)
               'lifted_transform', 'lifted_decorator', 'lifted_call',
               # a local partial called legacy-style (rules/partial_calls.py)
               'partial_call',
               # a dict field read by a pytree map (rules/apply/frozen_fields.py)
               'plain_dict_field')
STATEMENTS = ('field', 'init_any_module', 'runtime_lifecycle')
# plans written as a list of statements (one placeholder statement)
STATEMENT_LISTS = ('optimize', 'model_init', 'model_apply_assign')
# source the concepts not split yet still splice into their own text:
# passed through, not recorded (none left in the program pass)
SOURCES = ()
# the target's spellings a rule reads (not plans): passed through
SPELLINGS = ('nn_module',)
STRUCTURE = ('call_method', 'module_class', 'module_base', 'module_method',
             'setup', 'shared_scope', 'scoped_method', 'param_override',
             # a threaded block (its body, or the block with kept items)
             'threaded_block',
             # a function a lifted transform lifts (the def / lambda)
             'lifted_function')


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
    if method in SOURCES + SPELLINGS:
      return getattr(self.linen, method)
    if method not in EXPRESSIONS + STATEMENTS + STATEMENT_LISTS + STRUCTURE:
      raise AttributeError(method)

    def record(plan):
      node = getattr(self.linen, method)(plan)
      i = len(RecordingEmitter.log)
      if isinstance(node, (list, cst.FlattenSentinel)):
        code = ''.join(cst.Module([]).code_for_node(n) for n in node)
      else:
        code = (None if isinstance(node, tuple)
                else cst.Module([]).code_for_node(node))
      RecordingEmitter.log.append((method, plan, code))
      if not RecordingEmitter.marker or method in STRUCTURE:
        return node
      if method in STATEMENTS:
        return cst.parse_statement(f'PLAN_{i}_ = 0\n')
      if method in STATEMENT_LISTS:
        return [cst.parse_statement(f'PLAN_{i}_ = 0\n')]
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
  plans: the outer code holds the inner placeholder; the lines of a
  statement list indented as its placeholder)."""

  def code(m):
    lines = log[int(m.group(2))][2].strip().split('\n')
    if m.group(1) is not None:
      indent = m.group(1)
      return indent + ('\n' + indent).join(lines)
    # an expression inside a line: its continuation lines (a call's own
    # layout) are indented by the block the line is in, as libcst prints
    start = m.string.rfind('\n', 0, m.start()) + 1
    line = m.string[start:m.start()]
    return ('\n' + line[:len(line) - len(line.lstrip(' \t'))]).join(lines)

  for _ in range(len(log) + 1):
    new = re.sub(r'(?m)(^[ \t]*)?PLAN_(\d+)_( = 0)?', code, text)
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
    return nn.Dense(x, features=3, name='head') * 2


class Auto(nn.Module):

  def apply(self, x):
    return nn.Dense(x, 3)

  @nn.module_method
  def embed(self, x):
    """Embeds."""
    return nn.Dense(x, 3)


class Tied(nn.Module):

  def apply(self, x):
    tied = nn.Dense.shared(features=3, name='tied')
    return nn.Dense(tied(nn.Dense(x, 4, name='inner')), 2, name='out')

  @nn.module_method
  def encode(self, x):
    tied = nn.Dense.shared(features=3, name='tied')
    return tied(nn.Dense(x, 4, name='inner'))
'''


def test_module_methods_shape_the_class_by_plans(monkeypatch):
  plain, _ = api.upgrade_source(METHODS)
  new, log = _upgrade(monkeypatch, METHODS, marker=False)
  assert new == plain
  # AE: 'head' is built by __call__ and embed under one literal name (the
  # same legacy parameters, one positional, one keyword): once, in setup,
  # shared by both; the setup holds the plan of the first place that
  # built it, each place calls it with its own inputs
  ae_setup, tied_setup = _plans(log, 'setup')
  ((attr, built),) = ae_setup.submodules
  assert attr == 'head' and isinstance(built, plans.SubmoduleCall)
  assert built.layer.legacy == 'Dense'
  assert [(h.key, _code(h.arg.value)) for h in built.hypers] == [
      ('features', '3'), ('name', "'head'")]
  uses = _plans(log, 'submodule_attr')
  assert [(p.attr, [_code(a.value) for a in p.call.inputs])
          for p in uses[:2]] == [('head', ['x']), ('head', ['x'])]
  assert 'self.head = nn.Dense(3, name=\'head\')' in plain
  # Tied: the shared instance and 'inner', in setup; 'out', which only
  # __call__ builds, stays there, built with the setup's submodules
  assert [(a, type(b).__name__) for a, b in tied_setup.submodules] == [
      ('tied', 'Instance'), ('inner', 'SubmoduleCall')]
  assert [(p.attr, p.call is None) for p in uses[2:]] == [
      ('tied', True), ('inner', False)] * 2
  assert ("nn.Dense(2, name='out')(tied(self.inner(x)))" in
          plain.split('class Tied')[1])
  methods = _plans(log, 'module_method')
  # AE's, then Auto's twice: written for the setup form, which then finds
  # no literal name, and again for the shared scope; Tied's
  assert [m.fn.name.value for m in methods] == ['embed'] * 3 + ['encode']
  # Auto: its submodules are auto-named, so both entry points run in one
  # shared scope that builds them inline
  (scope,) = _plans(log, 'shared_scope')
  assert scope.entry_points == ('__call__', 'embed')
  scoped = _plans(log, 'scoped_method')
  assert [(s.fn.name.value, s.scope, s.body_name) for s in scoped] == [
      ('__call__', scope.name, '_call_body'),
      ('embed', scope.name, '_embed_body')]
  # the form is decided from the plans, not from the written text: the
  # same under marker mode, where every construction is a placeholder
  marked, log = _upgrade(monkeypatch, METHODS, marker=True)
  # (setup, a class's structure, is written by the emitter from its plan)
  bodies = re.sub(r'  def setup\(self\):\n(    .*\n)+', '', marked)
  for linen_text in ('nn.Dense(', 'self.head', 'self.tied', 'self.inner'):
    assert linen_text not in bodies, linen_text
  assert [m for m, _, _ in log].count('setup') == 2
  assert _put_back(marked, log) == plain


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


TRAINING = '''\
import jax
from flax import nn, optim


class Net(nn.Module):

  def apply(self, x):
    return nn.Dense(x, 3)


def train_step(optimizer, batch, lr):
  def loss_fn(model):
    return ((model(batch) - 1.) ** 2).mean()
  grad = jax.grad(loss_fn)(optimizer.target)
  optimizer = optimizer.apply_gradient(grad, learning_rate=lr)
  return optimizer, optimizer.state.step


def main(rng, batch):
  _, params = Net.init_by_shape(rng, [(1, 4)])
  model = nn.Model(Net, params)
  optimizer = optim.Adam(learning_rate=0.1).create(model)
  optimizer = optimizer.replicate()
  optimizer = optimizer.unreplicate()
  def loss_fn(model):
    return model(batch).sum(), 1
  optimizer, loss, aux = optimizer.optimize(loss_fn)
  optimizer = optimizer.apply_gradient(optimizer.target, beta1=0.5)
  return optimizer.target
'''


def test_program_training_steps_are_plans(monkeypatch):
  plain, report = api.upgrade_source(TRAINING)
  new, log = _upgrade(monkeypatch, TRAINING, marker=False)
  assert new == plain
  # the gradients as written, the per-step rate the call set
  (apply,) = _plans(log, 'apply_gradients')
  assert isinstance(apply, plans.ApplyGradients)
  assert (_code(apply.state), _code(apply.grads),
          _code(apply.learning_rate)) == ('optimizer', 'grad', 'lr')
  # (the call that sets beta1 per step is left with a TODO: no plan)
  assert 'beta1=...' in plain
  (opt,) = _plans(log, 'optimize')
  assert (_code(opt.state), _code(opt.loss_fn), _code(opt.new_state),
          _code(opt.loss), _code(opt.aux)) == (
              'optimizer', 'loss_fn', 'optimizer', 'loss', 'aux')
  assert opt.learning_rate is None
  assert [(p.op, _code(p.state)) for p in _plans(log, 'replicate')] == [
      ('replicate', 'optimizer'), ('unreplicate', 'optimizer')]
  assert [_code(p.state) for p in _plans(log, 'step_of')] == ['optimizer']
  assert [_code(p.access.value) for p in _plans(log, 'params_of')] == [
      'optimizer'] * 3
  marked, log = _upgrade(monkeypatch, TRAINING, marker=True)
  for linen_text in ('apply_gradients', 'jax_utils.', '.step',
                     'value_and_grad', "'learning_rate': "):
    assert linen_text not in marked, linen_text
  assert '.params' not in marked.replace("{'params'", '')
  assert _put_back(marked, log) == plain


LIFECYCLE = '''\
import jax.numpy as jnp
from flax import nn
import models


class Net(nn.Module):

  def apply(self, x, width=3):
    x = nn.BatchNorm(x)
    return nn.Dense(x, width)


def main(rng, x):
  Net.init_by_shape(rng, [(1, 4)])
  y, params = Net.init(rng, x, width=4)
  with nn.stateful() as state:
    _, params = Net.init_by_shape(rng, [((1, 4), jnp.int32)])
  wide = models.Net.partial(width=5)
  out = Net.call(params, x)
  fn = Net.call
  return y, params, state, wide, out, fn
'''


def test_program_lifecycle_is_plans(monkeypatch):
  plain, _ = api.upgrade_source(LIFECYCLE)
  new, log = _upgrade(monkeypatch, LIFECYCLE, marker=False)
  assert new == plain
  # the statement of its own: an init whose variables are dropped
  (alone,) = _plans(log, 'init_model')
  assert isinstance(alone, plans.InitModel)
  assert _code(alone.module) == 'Net' and _code(alone.rng) == 'rng'
  assert alone.shapes == (('(1, 4)', 'jnp.float32'),) and not alone.inputs
  kept, stateful = _plans(log, 'model_init')
  # y, params = Net.init(rng, x, width=4): the output kept, width a field
  assert _code(kept.output) == 'y' and _code(kept.params) == 'params'
  assert [_code(a.value) for a in kept.init.inputs] == ['x']
  assert kept.init.shapes is None
  assert [a.keyword.value for a in kept.init.fields] == ['width']
  assert not kept.init.kwargs and kept.collections_to is None
  assert kept.carried_module is None
  # under nn.stateful() as state: the output dropped, the other
  # collections to state
  assert stateful.output is None and stateful.collections_to == 'state'
  assert stateful.only is None
  assert stateful.init.shapes == (('(1, 4)', 'jnp.int32'),)
  (partial,) = _plans(log, 'module_partial')
  assert _code(partial.call.func.value) == 'models.Net'
  (apply,) = _plans(log, 'apply_model')
  assert (_code(apply.module), _code(apply.params),
          [_code(a.value) for a in apply.inputs]) == ('Net', 'params', ['x'])
  (fn,) = _plans(log, 'module_function')
  assert _code(fn.module) == 'Net'
  marked, log = _upgrade(monkeypatch, LIFECYCLE, marker=True)
  for linen_text in ('.init(', 'init_with_output', '_variables',
                     'functools.partial', '.apply(', 'module_call',
                     'jnp.ones'):
    assert linen_text not in marked, linen_text
  assert _put_back(marked, log) == plain


OPTIMIZERS = '''\
from flax import nn, optim


class Net(nn.Module):

  def apply(self, x):
    return nn.Dense(x, 3)


def make(rng):
  _, params = Net.init_by_shape(rng, [(1, 4)])
  model = nn.Model(Net, params)
  adam = optim.Adam(learning_rate=0.1, weight_decay=1e-4)
  opt = adam.create(model)
  lamb = optim.LAMB(0.01).create(model)
  kernels = optim.ModelParamTraversal(lambda path, _: 'kernel' in path)
  biases = optim.ModelParamTraversal(lambda path, _: 'bias' in path)
  both = optim.MultiOptimizer((kernels, optim.Momentum(0.1, beta=0.8)),
                              (biases, optim.GradientDescent(0.2))
                              ).create(model)
  every = optim.ModelParamTraversal(lambda path, _: True)
  leaves = list(every.iterate(params))
  scale = optim.DynamicScale(growth_interval=10)
  return opt, lamb, both, leaves, scale
'''


def test_program_optimizers_are_plans(monkeypatch):
  plain, _ = api.upgrade_source(OPTIMIZERS)
  new, log = _upgrade(monkeypatch, OPTIMIZERS, marker=False)
  assert new == plain
  txs = _plans(log, 'transformation')
  # the definitions, in order: Adam, LAMB (its call is left before the
  # create around it), then the pair's two
  adam = txs[0]
  assert isinstance(adam, plans.Transformation)
  assert (adam.name, adam.hypers, adam.per_step, adam.decay, adam.legacy) == (
      'Adam', (('learning_rate', '0.1'), ('weight_decay', '1e-4')), False,
      True, None)
  assert [(t.name, t.hypers) for t in txs[1:]] == [
      ('LAMB', (('learning_rate', '0.01'),)),
      ('Momentum', (('learning_rate', '0.1'), ('beta', '0.8'))),
      ('GradientDescent', (('learning_rate', '0.2'),))]
  states = _plans(log, 'make_train_state')
  assert [_code(s.params) for s in states] == ['model'] * 3
  # the apply function the pass recorded for model (nn.Model(Net, ...))
  fns = [s.apply_fn for s in states]
  assert all(isinstance(f, plans.ApplyFn) for f in fns)
  assert [(_code(f.module), f.state, f.carried) for f in fns] == [
      ('Net', None, False)] * 3
  assert not any(s.carried for s in states)
  # adam.create: a definition bound to a name; LAMB: a legacy rule
  assert states[0].tx == 'adam'
  lamb = states[1].tx
  assert lamb.name == 'LAMB' and lamb.legacy[0] == 'lamb'
  assert lamb.hypers == (('learning_rate', '0.01'),)
  # the MultiOptimizer's create: the same MultiTransform it was written as
  (multi,) = _plans(log, 'multi_transform')
  assert states[2].tx is multi
  assert [_code(f) for f in multi.filters] == ['kernels', 'biases']
  assert len(multi.transformations) == 2
  (kept,) = _plans(log, 'traversal_object')
  assert _code(kept.call.args[0].value) == 'lambda path, _: True'
  (scale,) = _plans(log, 'dynamic_scale')
  assert _code(scale.call.args[0]) == 'growth_interval=10'
  marked, log = _upgrade(monkeypatch, OPTIMIZERS, marker=True)
  for linen_text in ('optax.', 'legacy_optax', 'TrainState',
                     'traverse_util', 'dynamic_scale_lib.'):
    assert linen_text not in marked.split('class Net')[1], linen_text
  assert _put_back(marked, log) == plain


MODELS = '''\
import jax
from flax import nn, optim


class Net(nn.Module):

  def apply(self, x, width=3, train=True):
    x = nn.BatchNorm(x, use_running_average=not train)
    x = nn.dropout(x, 0.5, deterministic=not train)
    return nn.Dense(x, width)

  @nn.module_method
  def embed(self, x, width=3):
    return nn.Dense(x, width)


def main(rng, x, state):
  with nn.stateful() as init_state:
    _, params = Net.init_by_shape(rng, [(1, 4)])
  model = nn.Model(Net, params)
  with nn.stateful(init_state) as new_state:
    with nn.stochastic(rng):
      y = model(x, width=3)
      key = nn.make_rng()
  with nn.stateful(new_state, mutable=False):
    z = model.embed(x)
  optimizer = optim.Adam(0.1).create(model)
  w = optimizer.target(x, train=False)
  v = nn.Model(Net, params)(x)
  assert isinstance(model, nn.Model)
  return y, z, w, v, key, model.params, new_state.as_dict()
'''


def test_program_models_and_collections_are_plans(monkeypatch):
  plain, _ = api.upgrade_source(MODELS)
  new, log = _upgrade(monkeypatch, MODELS, marker=False)
  assert new == plain
  # y = model(x, width=3) in nn.stateful(init_state) as new_state and
  # nn.stochastic(rng): an assignment that threads the written collection
  (assign,) = _plans(log, 'model_apply_assign')
  assert isinstance(assign, plans.ModelApplyAssign)
  assert _code(assign.target) == 'y' and assign.new_state == 'new_state'
  call = assign.apply
  assert isinstance(call.fn, plans.ApplyFn) and _code(call.fn.module) == 'Net'
  assert call.params == 'model'
  assert [_code(a.value) for a in call.inputs] == ['x']
  assert [a.keyword.value for a in call.fields] == ['width']  # a field
  assert (call.method, call.collections, call.rng, call.mutable) == (
      None, 'init_state', 'rng', 'batch_stats')
  embed, target = _plans(log, 'model_apply')
  # model.embed(x) of an @nn.module_method, under a state not written
  assert (embed.method, embed.collections, embed.mutable, embed.rng) == (
      'embed', 'new_state', None, None)
  assert not embed.fields
  # optimizer.target(x, train=False): the train state's function and
  # parameters, a field set
  assert target.fn.state == 'optimizer' and target.params is None
  assert [a.keyword.value for a in target.fields] == ['train']
  # nn.Model(Net, params)(x): the life cycle's ApplyModel
  (inline,) = _plans(log, 'apply_model')
  assert _code(inline.module) == 'Net' and _code(inline.params) == 'params'
  values = _plans(log, 'model_value')
  # model = nn.Model(Net, params), and the inline one's inner call
  assert [(_code(v.call.args[1].value), v.carried) for v in values] == [
      ('params', False)] * 2
  assert [p.carried for p in _plans(log, 'model_type')] == [False]
  assert [_code(p.access) for p in _plans(log, 'model_params')] == [
      'model.params']
  assert [p.op for p in _plans(log, 'program_rng')] == ['make_rng']
  (scope,) = _plans(log, 'stochastic_scope')
  assert _code(scope.call.args[0].value) == 'rng'
  (as_dict,) = _plans(log, 'collection_dict')
  assert _code(as_dict.call) == 'new_state.as_dict()'
  # the TrainState's apply function is the model's recorded one
  (state,) = _plans(log, 'make_train_state')
  assert state.apply_fn is call.fn
  # the three nn.stateful blocks threaded through their calls: each
  # dropped, its body kept (the second keeps nothing: its nn.stochastic
  # scope is its own block inside)
  blocks = _plans(log, 'threaded_block')
  assert all(isinstance(b, plans.ThreadedBlock) for b in blocks)
  assert [len(b.kept) for b in blocks] == [0, 0, 0]
  assert [_code(b.block.items[0].item) for b in blocks] == [
      'nn.stateful()', 'nn.stateful(init_state)',
      'nn.stateful(new_state, mutable=False)']
  marked, log = _upgrade(monkeypatch, MODELS, marker=True)
  body = marked.split('def main')[1]
  for linen_text in ('.apply(', 'legacy_rng', 'mutable=', 'rngs=',
                     'method=', 'dict)', '.clone(', 'as_dict'):
    assert linen_text not in body, linen_text
  assert _put_back(marked, log) == plain


USER_OPTIMIZERS = '''\
import jax.numpy as jnp
from flax import nn, optim, struct


class MLP(nn.Module):

  def apply(self, x):
    return nn.Dense(x, 3)


@struct.dataclass
class _HP:
  learning_rate: float
  beta: float


class SignMomentum(optim.OptimizerDef):

  def __init__(self, learning_rate=None, beta=0.9):
    super().__init__(_HP(learning_rate, beta))

  def init_param_state(self, param):
    return jnp.zeros_like(param)

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    trace = hyper_params.beta * state + jnp.sign(grad)
    return param - hyper_params.learning_rate * trace, trace


class MyAdam(optim.Adam):
  pass


def main(rng, g):
  _, params = MLP.init_by_shape(rng, [(1, 4)])
  model = nn.Model(MLP, params)
  opt_def = SignMomentum(beta=0.8)
  opt = opt_def.create(model)
  opt = opt.apply_gradient(g, learning_rate=0.1)
  other = SignMomentum(0.2).create(model)
  kept = MyAdam(0.1).create(model)
  return opt, other, kept
'''


def test_program_user_optimizers_are_plans(monkeypatch):
  plain, _ = api.upgrade_source(USER_OPTIMIZERS)
  new, log = _upgrade(monkeypatch, USER_OPTIMIZERS, marker=False)
  assert new == plain
  # the program sets the learning rate per step: the translated
  # definition's other parameters static, the rate from zero where the
  # call gives none
  per_step = _plans(log, 'per_step_user_transformation')
  assert [(_code(p.call), p.static, p.default_rate) for p in per_step] == [
      ('SignMomentum(beta=0.8)', ('beta',), True),
      ('SignMomentum(0.2)', ('beta',), False)]
  states = _plans(log, 'make_train_state')
  txs = [s.tx for s in states]
  assert all(isinstance(t, plans.UserTransformation) for t in txs)
  # opt_def (a name holding the translated definition), the inline one
  # (as rewritten: the per-step transformation), the kept subclass
  assert [t.translated for t in txs] == [True, True, False]
  assert _code(txs[0].definition) == 'opt_def'
  assert _code(txs[2].definition) == 'MyAdam(0.1)'
  marked, log = _upgrade(monkeypatch, USER_OPTIMIZERS, marker=True)
  body = marked.split('def main')[1]
  for linen_text in ('optax', 'as_optax', 'static_args', 'TrainState'):
    assert linen_text not in body, linen_text
  assert _put_back(marked, log) == plain


RUNTIME = '''\
from flax import nn


class Wide(nn.Module):

  def apply(self, x, width, train=True):
    return nn.Dense(x, width)


class Normed(nn.Module):

  def apply(self, x, momentum=0.9, train=True):
    x = nn.BatchNorm(x, use_running_average=not train, momentum=momentum)
    return nn.Dense(x, 3)


REGISTRY = {'wide': Wide.partial(width=4), 'normed': Normed}


def make(name, rng, x):
  module_def = REGISTRY[name]
  _, params = module_def.init(rng, x, train=False)
  with nn.stateful() as state:
    _, model = module_def.create(rng, x)
  with nn.stateful(state) as new_state:
    y = model(x)
  out = model.module.call(model.params, x)
  return params, y, out, new_state
'''


def test_program_runtime_lifecycle_is_plans(monkeypatch):
  plain, _ = api.upgrade_source(RUNTIME)
  new, log = _upgrade(monkeypatch, RUNTIME, marker=False)
  assert new == plain
  # module_def holds one of two classes of different fields: which
  # keywords are fields only the run can tell
  init, create = _plans(log, 'runtime_lifecycle')
  assert isinstance(init, plans.RuntimeLifecycle)
  assert (init.op, _code(init.module), _code(init.target)) == (
      'init', 'module_def', '_, params')
  assert [_code(a).rstrip(',') for a in init.args] == [
      'rng', 'x', 'train=False']
  assert (create.op, _code(create.target)) == ('create', '_, model')
  (scope,) = _plans(log, 'runtime_stateful')
  assert _code(scope.call) == 'nn.stateful()'
  # the model it made carries its module: applied as it is, in the next
  # block, with that block's collections
  (assign,) = _plans(log, 'model_apply_assign')
  assert assign.apply.fn.carried and assign.apply.params == 'model'
  assert (assign.apply.collections, assign.apply.mutable,
          assign.new_state) == ('state', 'batch_stats', 'new_state')
  # m.module.call: the life cycle's ModuleFunction of m.module
  (fn,) = _plans(log, 'module_function')
  assert _code(fn.module) == 'model.module'
  marked, log = _upgrade(monkeypatch, RUNTIME, marker=True)
  body = marked.split('def make')[1]
  assert 'legacy_model' not in body and '.apply' not in body
  assert _put_back(marked, log) == plain


CACHE = '''\
import jax.numpy as jnp
from flax import nn


class LM(nn.Module):

  def apply(self, x, cache=None):
    return nn.SelfAttention(x, num_heads=1, causal_mask=True, cache=cache)


def make(rng, x):
  with nn.attention.Cache().mutate() as cache_def:
    _, model = LM.create_by_shape(rng, [((1, 4, 2), jnp.float32)],
                                  cache=cache_def)
  cache = cache_def.initialize_cache((1, 4))
  with cache.mutate() as new_cache:
    y = model(x[:, :1], cache=new_cache)
  return y, new_cache
'''


def test_program_cache_argument_is_decided_in_the_plan(monkeypatch):
  # the legacy attention cache a model gets is the rule's decision (the
  # module decodes): the plans hold True for it, the emitter only prints
  plain, _ = api.upgrade_source(CACHE)
  new, log = _upgrade(monkeypatch, CACHE, marker=False)
  assert new == plain
  (init,) = _plans(log, 'model_init')
  assert [_code(a) for a in init.init.fields] == ['cache=True']
  assert init.collections_to == 'cache_def' and init.only == 'cache'
  (assign,) = _plans(log, 'model_apply_assign')
  call = assign.apply
  assert [_code(a) for a in call.fields] == ['cache=True']
  assert (call.collections, call.mutable, assign.new_state) == (
      'cache', 'cache', 'new_cache')
  # the cache the init stored, made for the decoding shape
  (made,) = _plans(log, 'initialize_cache')
  assert _code(made.cache) == 'cache_def'
  assert [_code(a) for a in made.args] == ['(1, 4)']
  marked, log = _upgrade(monkeypatch, CACHE, marker=True)
  assert 'cache=True' not in marked
  assert 'legacy_initialize_cache(' not in marked
  assert _put_back(marked, log) == plain


TYPES = '''\
from typing import Callable

from flax import nn, optim, struct


@struct.dataclass
class State:
  optimizer: optim.Optimizer
  scale: optim.DynamicScale
  model_state: nn.Collection


Loss = Callable[[nn.Model], float]


def evaluate(model: nn.Model, state: State) -> float:
  return 0.0
'''


def test_program_types_are_plans(monkeypatch):
  plain, _ = api.upgrade_source(TYPES)
  new, log = _upgrade(monkeypatch, TYPES, marker=False)
  assert new == plain
  # the fields of a flax.struct container, a typing alias, annotations
  assert [p.what for p in _plans(log, 'legacy_type')] == [
      'Optimizer', 'DynamicScale', 'Collection', 'Model', 'Model']
  marked, log = _upgrade(monkeypatch, TYPES, marker=True)
  for linen_text in ('TrainState', 'DynamicScale', 'dict', 'Any]', ': Any'):
    assert linen_text not in marked.split('class State')[1], linen_text
  assert _put_back(marked, log) == plain


PARTIALS = '''\
from flax import nn


class Block(nn.Module):

  def apply(self, x, width=3, **attention_kwargs):
    return nn.Dense(x, width)


class Plain(nn.Module):

  def apply(self, x, width=3):
    return nn.Dense(x, width)


class Normed(nn.Module):

  def apply(self, x, momentum=0.9):
    return nn.BatchNorm(x, momentum=momentum)


class Net(nn.Module):

  def apply(self, x, width=4, **attention_kwargs):
    return Block(x, width=width, dropout=0.1, **attention_kwargs)


Narrow = nn.Dense.partial(features=2, bias=False)
NarrowToo = Narrow.partial(kernel_init=nn.initializers.zeros)
Wide = Block.partial(width=8, heads=2)
REGISTRY = {'plain': Plain, 'normed': Normed}


def make(config, name):
  module_def = REGISTRY[name]
  return Block.partial(**config), module_def.partial(width=2)
'''


def test_partials_and_splatted_dicts_are_plans(monkeypatch):
  plain, _ = api.upgrade_source(PARTIALS)
  new, log = _upgrade(monkeypatch, PARTIALS, marker=False)
  assert new == plain
  narrow, too, wide, split, runtime = _plans(log, 'partial_module')
  assert isinstance(narrow, plans.PartialModule)
  # the layer itself, keyed by legacy keyword (bias): the emitter spells it
  assert narrow.layer.legacy == 'Dense' and narrow.direct_layer
  assert narrow.module.layer is narrow.layer
  assert [h.key for h in narrow.hypers] == ['features', 'bias']
  # a partial of that partial: the same layer's keywords, none added
  assert too.layer.legacy == 'Dense' and not too.direct_layer
  assert _code(too.module.expr) == 'Narrow'
  assert [h.key for h in too.hypers] == ['kernel_init']
  # a class: heads goes to its catch-all, a dict the plan is given
  assert wide.layer is None and not wide.runtime
  assert [h.key for h in wide.hypers] == ['width', 'attention_kwargs']
  # config splatted: split when the code runs
  assert [h.key for h in split.hypers] == ['**']
  # module_def holds one of two classes of different fields
  assert runtime.runtime and _code(runtime.module.expr) == 'module_def'
  assert [h.key for h in runtime.hypers] == ['width']
  merged, heads = _plans(log, 'catch_all_dict')
  # Net forwards its own catch-all whole, with dropout joining it
  assert _code(merged.base) == 'self.attention_kwargs'
  assert [(k, _code(v)) for k, v in merged.items] == [('dropout', '0.1')]
  assert heads.base is None
  assert [(k, _code(v)) for k, v in heads.items] == [('heads', '2')]
  (kwargs,) = _plans(log, 'split_kwargs')
  assert isinstance(kwargs, plans.SplitKwargs)
  assert _code(kwargs.value) == 'config'
  assert kwargs.names == ('width', 'name')
  assert kwargs.catch_all == 'attention_kwargs' and not kwargs.extra
  assert kwargs.elsewhere == ('x',)
  marked, log = _upgrade(monkeypatch, PARTIALS, marker=True)
  for linen_text in ('functools.partial(', 'partial_module(', 'use_bias',
                     "'heads'", "'dropout'", '_legacy_kwargs('):
    assert linen_text not in marked.split('class Block')[1], linen_text
  assert _put_back(marked, log) == plain


RUNTIME_SUBMODULE = '''\
from flax import nn


class A(nn.Module):

  def apply(self, x, n=2):
    return x * n


class B(nn.Module):

  def apply(self, x, n=2, shift=0.):
    return nn.Dense(x, n) + shift


class Outer(nn.Module):

  def apply(self, x, sub=A):
    y = sub(x, n=3)
    return sub(y, n=2, name='second')


def build(x, rng):
  _, a = Outer.init(rng, x)
  _, b = Outer.partial(sub=B).init(rng, x)
  return a, b
'''


def test_runtime_submodule_call_is_a_plan(monkeypatch):
  plain, _ = api.upgrade_source(RUNTIME_SUBMODULE)
  new, log = _upgrade(monkeypatch, RUNTIME_SUBMODULE, marker=False)
  assert new == plain
  first, second = _plans(log, 'runtime_submodule_call')
  assert isinstance(first, plans.RuntimeSubmoduleCall)
  assert _code(first.module) == 'self.sub' and _code(first.input.value) == 'x'
  assert [_code(a).rstrip(',') for a in first.keywords] == ['n=3']
  # which class only the run tells: the name is counted when it runs
  assert first.name.counter and first.name.ctor_src == 'self.sub'
  # an explicit name: among the keywords, none added
  assert second.name is None
  assert [a.keyword.value for a in second.keywords] == ['n', 'name']
  marked, log = _upgrade(monkeypatch, RUNTIME_SUBMODULE, marker=True)
  assert '_legacy_module_call(' not in marked.split('class Outer')[1]
  assert _put_back(marked, log) == plain


CELLS = '''\
from flax import jax_utils
from flax import nn


class Encoder(nn.Module):

  def apply(self, xs, hidden_size=4):
    carry = nn.LSTMCell.initialize_carry(nn.make_rng(), (xs.shape[0],),
                                         hidden_size)
    carry, ys = jax_utils.scan_in_dim(nn.LSTMCell.partial(name='lstm'),
                                      carry, xs, axis=1)
    gru = nn.GRUCell.shared(name='gru')
    carry, y = nn.GRUCell(carry, ys[:, 0], name='step')
    return gru(carry, y)


def carry_of(rng, dims):
  return nn.LSTMCell.initialize_carry(rng, dims, 3,
                                      init_fn=nn.initializers.ones)
'''


def test_recurrent_cells_are_plans(monkeypatch):
  plain, _ = api.upgrade_source(CELLS)
  new, log = _upgrade(monkeypatch, CELLS, marker=False)
  assert new == plain
  inside, outside = _plans(log, 'cell_carry')
  assert isinstance(inside, plans.CellCarry)
  # in a module, the zeros carry of a legacy nn.make_rng() key: a fixed key
  assert inside.rng is None and inside.init is None
  assert (_code(inside.batch_dims), _code(inside.size)) == (
      '(xs.shape[0],)', 'self.hidden_size')
  assert _code(outside.rng) == 'rng' and _code(outside.batch_dims) == 'dims'
  assert _code(outside.init) == 'nn.initializers.ones'
  (scan,) = _plans(log, 'cell_scan')
  assert scan.cell.cell == 'LSTMCell' and scan.axis == 1
  assert [_code(a) for a in scan.cell.hypers] == ["name='lstm'"]
  assert (_code(scan.init), _code(scan.xs)) == ('carry', 'xs')
  shared, called = _plans(log, 'recurrent_cell')
  assert (shared.cell, shared.inputs, shared.name) == ('GRUCell', None, None)
  assert called.cell == 'GRUCell' and called.name is None
  assert [_code(a).rstrip(',') for a in called.inputs] == ['carry', 'ys[:, 0]']
  marked, log = _upgrade(monkeypatch, CELLS, marker=True)
  for linen_text in ('legacy_cells.', 'initialize_carry', '.scan(',
                     'PRNGKey', 'carry_init'):
    assert linen_text not in marked, linen_text
  assert _put_back(marked, log) == plain


ATTENTION = '''\
from flax import nn


class Encoder(nn.Module):

  def apply(self, x, y, pm, config, cache=None):
    x = nn.Dense(x, 4)
    x = nn.SelfAttention(x, num_heads=2, causal_mask=True, padding_mask=pm,
                         bias=False, dropout_rate=0.1, cache=cache)
    x = nn.MultiHeadDotProductAttention(x, y, num_heads=2, name='cross')
    return nn.SelfAttention(x, **config)
'''


def test_attention_is_a_plan(monkeypatch):
  plain, _ = api.upgrade_source(ATTENTION)
  new, log = _upgrade(monkeypatch, ATTENTION, marker=False)
  assert new == plain
  self_att, cross, splat = _plans(log, 'attention')
  assert isinstance(self_att, plans.Attention)
  # keyed by legacy parameter: the emitter spells them (bias -> use_bias,
  # the mask's apart, legacy's deterministic default)
  assert [k for k, _ in self_att.args] == [
      'inputs_q', 'num_heads', 'causal_mask', 'padding_mask', 'bias',
      'dropout_rate', 'cache']
  assert self_att.given == tuple(k for k, _ in self_att.args)
  assert _code(self_att.inputs_q) == 'x' and self_att.inputs_kv is None
  assert _code(self_att.cache) == 'self.cache'
  # legacy counts one auto-name for every submodule (Dense_0, then
  # MultiHeadDotProductAttention_1), linen per type: the plan names it
  assert self_att.name is None
  assert self_att.auto_name.literal == 'MultiHeadDotProductAttention_1'
  assert self_att.splat is None and self_att.guard is None
  assert _code(cross.inputs_kv) == 'y'
  assert _code(cross.name) == "name='cross'"
  assert _code(splat.splat) == 'self.config'
  assert splat.auto_name.literal == 'MultiHeadDotProductAttention_2'
  marked, log = _upgrade(monkeypatch, ATTENTION, marker=True)
  body = marked.split('class Encoder')[1]
  for linen_text in ('MultiHeadDotProductAttention(', 'legacy_attention_mask',
                     'use_bias', 'decode=self', 'deterministic',
                     '_legacy_attention_kwargs('):
    assert linen_text not in body, linen_text
  assert _put_back(marked, log) == plain


CACHE_ENTRY = '''\
import jax.numpy as jnp
from flax import nn


class Positions(nn.Module):

  def apply(self, x, cache=None):
    if cache:
      if self.is_initializing():
        cache.store(jnp.zeros((1,), jnp.int32))
      else:
        entry = cache.retrieve(None)
        cache.store(entry.replace(i=entry.i + 1))
    return x


def make(rng, x):
  with nn.attention.Cache().mutate() as cache_def:
    _, model = Positions.create_by_shape(rng, [((1, 4, 2), jnp.float32)],
                                         cache=cache_def)
  return model
'''


def test_cache_entries_are_plans(monkeypatch):
  plain, _ = api.upgrade_source(CACHE_ENTRY)
  new, log = _upgrade(monkeypatch, CACHE_ENTRY, marker=False)
  assert new == plain
  entries = _plans(log, 'cache_entry')
  assert all(isinstance(p, plans.CacheEntry) for p in entries)
  assert [(p.op, [_code(a.value) for a in p.args]) for p in entries] == [
      ('store', ['jnp.zeros((1,), jnp.int32)']), ('retrieve', ['None']),
      ('store', ['entry.replace(i=entry.i + 1)'])]
  marked, log = _upgrade(monkeypatch, CACHE_ENTRY, marker=True)
  assert 'legacy_cache_' not in marked.split('class Positions')[1]
  assert _put_back(marked, log) == plain


KEPT_SCOPE = '''\
from flax import nn


class Net(nn.Module):

  def apply(self, x):
    x = nn.BatchNorm(x)
    return nn.dropout(x, 0.5)


def step(model, x, state, rng):
  with nn.stateful(state) as new_state, nn.stochastic(rng):
    y = model(x)
    key = nn.make_rng()
  return y, key, new_state
'''


def test_threaded_block_keeps_its_other_scopes(monkeypatch):
  plain, _ = api.upgrade_source(KEPT_SCOPE)
  new, log = _upgrade(monkeypatch, KEPT_SCOPE, marker=False)
  assert new == plain
  # the nn.stateful scope threaded through model(x); nn.stochastic kept
  # (nn.make_rng() draws from it): the block stays with that item alone
  (block,) = _plans(log, 'threaded_block')
  (kept,) = block.kept
  (scope,) = _plans(log, 'stochastic_scope')
  assert _code(scope.call) == 'nn.stochastic(rng)'
  assert 'stateful' not in _code(kept.item)
  assert 'with legacy_rng.stochastic(rng):' in plain
  marked, log = _upgrade(monkeypatch, KEPT_SCOPE, marker=True)
  assert _put_back(marked, log) == plain


GUARDED = '''\
from flax import nn


class Block(nn.Module):

  def apply(self, x, attention_module=nn.SelfAttention):
    return attention_module(x, num_heads=2, name='att')
'''


def test_attention_through_a_field_is_guarded_by_the_plan(monkeypatch):
  plain, _ = api.upgrade_source(GUARDED)
  new, log = _upgrade(monkeypatch, GUARDED, marker=False)
  assert new == plain
  (att,) = _plans(log, 'attention')
  # the field's value is checked to be its default when the code runs
  field, callee = att.guard
  assert field == 'attention_module' and _code(callee) == (
      'self.attention_module')
  assert 'legacy_attention_default(self, ' in plain
  marked, log = _upgrade(monkeypatch, GUARDED, marker=True)
  assert 'legacy_attention_default(' not in marked.split('class Block')[1]
  # (the call method only: the field's statement is a placeholder in
  # marker mode, so the TODO on its legacy default finds no line there)
  assert (_put_back(marked, log).split('@nn.compact')[1]
          == plain.split('@nn.compact')[1])


SUBCLASSES = '''\
import jax.numpy as jnp
from flax import nn


class StdConv(nn.Conv):

  def param(self, name, shape, initializer):
    init_args = 1
    p = super().param(name, shape, initializer)
    if name == 'kernel':
      p = p - jnp.mean(p)
    return p


class Scaled(nn.Dense):

  def apply(self, x, features):
    return 2 * nn.Dense(x, features)


class Net(nn.Module):

  def apply(self, x):
    return Scaled(StdConv(x, 3, (3, 3)), 4)
'''


def test_subclasses_are_plans(monkeypatch):
  plain, _ = api.upgrade_source(SUBCLASSES)
  new, log = _upgrade(monkeypatch, SUBCLASSES, marker=False)
  assert new == plain
  # a param override of a legacy layer: the target's layer as its base,
  # the override with the base's parameter call
  (base,) = _plans(log, 'layer_base')
  assert base.layer.legacy == 'Conv'
  (override,) = _plans(log, 'param_override')
  assert override.fn.name.value == 'param'
  (sp,) = override.super_calls
  assert (_code(sp.name), _code(sp.shape), _code(sp.initializer)) == (
      'name', 'shape', 'initializer')
  # (init_args taken: the emitter spells linen's extra arguments apart)
  assert ('def param(self, name, initializer, shape, *init_args1, '
          '**init_kwargs):') in plain
  assert ('super().param(name, initializer, shape, *init_args1, '
          '**init_kwargs)') in plain
  # its own apply replaces the legacy layer's: a plain module
  (plain_base,) = _plans(log, 'plain_module_base')
  assert _code(plain_base.base) == 'nn.Dense'
  marked, log = _upgrade(monkeypatch, SUBCLASSES, marker=True)
  for linen_text in ('StdConv(nn.Conv)', 'Scaled(nn.Module)'):
    assert linen_text not in marked, linen_text
  assert _put_back(marked, log) == plain


DRIVER = '''\
from flax import nn


class Masked(nn.Module):

  def apply(self, *args, wrapped_module, scale=1.0, **kwargs):
    def init_fn(rng, _):
      _, params = wrapped_module.init(rng, *args, **kwargs)
      return params
    params = self.param('unmasked', None, init_fn)
    return wrapped_module.call(params, *args, bias=False, **kwargs) * scale
'''


def test_drivers_are_plans(monkeypatch):
  plain, _ = api.upgrade_source(DRIVER)
  new, log = _upgrade(monkeypatch, DRIVER, marker=False)
  assert new == plain
  # the legacy life cycle of a class held by a field: the keywords split
  # between its hyper-parameters and call keywords when the code runs
  init, call = _plans(log, 'driven_lifecycle')
  assert isinstance(init, plans.DrivenLifecycle)
  assert (init.op, _code(init.module)) == ('init', 'self.wrapped_module')
  assert [_code(a) .rstrip(', ') for a in init.inputs] == ['rng', '*args']
  assert [_code(a).rstrip(', ') for a in init.keywords] == ['**self.kwargs']
  assert call.op == 'call'
  assert [_code(a).rstrip(', ') for a in call.inputs] == ['params', '*args']
  assert [_code(a).rstrip(', ') for a in call.keywords] == [
      'bias=False', '**self.kwargs']
  assert ("_LegacyModule(self.wrapped_module, {'bias': False, "
          '**self.kwargs}).call(params, *args)') in plain
  marked, log = _upgrade(monkeypatch, DRIVER, marker=True)
  assert '_LegacyModule(' not in marked.split('class Masked')[1]
  assert _put_back(marked, log) == plain


LAYER_CALLS = '''\
from flax import nn


def get_norm(kind, train):
  if kind == 'bn':
    return nn.BatchNorm.partial(use_running_average=not train)
  return lambda x, **kwargs: x


class Block(nn.Module):

  def apply(self, x, features, train=True, kind='bn'):
    norm = get_norm(kind, train)
    y = norm(x, name='norm1')
    conv = nn.Conv.partial(bias=False) if kind == 'bn' else nn.Dense
    return norm(conv(y, features, kernel_size=(3, 3)))
'''


def test_runtime_layer_call_is_a_plan(monkeypatch):
  plain, _ = api.upgrade_source(LAYER_CALLS)
  new, log = _upgrade(monkeypatch, LAYER_CALLS, marker=False)
  assert new == plain
  calls = _plans(log, 'runtime_layer_call')
  assert calls and all(isinstance(c, plans.RuntimeLayerCall) for c in calls)
  named = [c for c in calls if c.counter is None]
  counted = [c for c in calls if c.counter is not None]
  # norm(x, name='norm1'): the call's own name, no counter
  assert [_code(c.callee) for c in named] == ['norm']
  assert [a.keyword.value for a in named[0].args if a.keyword] == ['name']
  # the others take the body's legacy auto-name counter
  assert counted and all(c.positional == () or c.positional == ('features',)
                         for c in counted)
  marked, log = _upgrade(monkeypatch, LAYER_CALLS, marker=True)
  assert '_legacy_layer_call(' not in marked.split('class Block')[1]
  assert _put_back(marked, log) == plain


INIT_PARTIALS = '''\
import functools

import jax.numpy as jnp
from flax import nn


def constant_initializer(unused_key, shape, fill_value):
  return jnp.full(shape, fill_value)


class Head(nn.Module):

  def apply(self, x):
    return nn.Dense(x, 2, bias_init=functools.partial(constant_initializer,
                                                      fill_value=0.5))
'''


def test_initializer_partial_is_a_plan(monkeypatch):
  plain, _ = api.upgrade_source(INIT_PARTIALS)
  assert 'upgraded_layers.legacy_initializer(functools.partial(' in plain
  new, log = _upgrade(monkeypatch, INIT_PARTIALS, marker=False)
  assert new == plain
  (wrapped,) = _plans(log, 'legacy_initializer')
  assert isinstance(wrapped, plans.LegacyInitializer)
  assert _code(wrapped.partial).startswith(
      'functools.partial(constant_initializer')
  marked, log = _upgrade(monkeypatch, INIT_PARTIALS, marker=True)
  assert 'legacy_initializer(' not in marked.split('class Head')[1]
  assert _put_back(marked, log) == plain


LIFTED = '''\
import jax
from flax import nn


def dense(x, features, name):
  layer = nn.Dense.partial(bias=False)
  return layer(x, features, name=name)


class Net(nn.Module):

  def apply(self, x, *, scales):

    @jax.remat
    def inner(h):
      return nn.Dense(h, 4, name='d')

    def row(h):
      return h * self.param('w', (h.shape[-1],), nn.initializers.ones)

    y = inner(x)
    y = jax.vmap(row, 0)(y)
    y = dense(y, 3, 'fc')
    y = jax.lax.map(jax.vmap(row), y[None])[0]
    tree = jax.tree_map(lambda a, s: a * s, {'a': y}, scales)
    return tree['a']


Scaled = Net.partial(scales={'a': 2.0})
'''


def test_lifted_transforms_partial_calls_and_dict_fields_are_plans(
    monkeypatch):
  plain, _ = api.upgrade_source(LIFTED)
  assert 'nn.vmap(row, variable_axes={True: None}' in plain
  new, log = _upgrade(monkeypatch, LIFTED, marker=False)
  assert new == plain
  # the raw transforms: which JAX transform, its own arguments keyed by
  # JAX's keyword, used as a value or called where it is made
  lifted = _plans(log, 'lifted_transform')
  assert [(p.transform, _code(p.function), [(h.key, _code(h.arg.value))
                                            for h in p.args], p.value)
          for p in lifted] == [('vmap', 'row', [('in_axes', '0')], False),
                               ('vmap', 'row', [], True)]
  assert [p.transform for p in _plans(log, 'lifted_decorator')] == ['remat']
  assert sorted(p.function.name.value
                for p in _plans(log, 'lifted_function')) == ['inner', 'row']
  # calls of lifted functions: ``inner(x)``, and ``T(row)(y)`` whose callee
  # is the emitter's transform
  calls = [_code(p.call) for p in _plans(log, 'lifted_call')]
  assert calls[0] == 'inner(x)' and len(calls) == 2
  assert calls[1].startswith('nn.vmap(row,') and calls[1].endswith(')(y)')
  # the local partial called legacy-style: legacy keywords, the input apart
  (call,) = _plans(log, 'partial_call')
  assert call.layer.legacy == 'Dense'
  assert [h.key for h in call.hypers] == ['features', 'name']
  assert _code(call.input) == 'x'
  # the dict field handed to a pytree map
  (field,) = _plans(log, 'plain_dict_field')
  assert _code(field.value) == 'self.scales'
  # marker mode: no linen text of these kinds is the rules' own
  marked, log = _upgrade(monkeypatch, LIFTED, marker=True)
  for linen_text in ('nn.vmap(', 'nn.remat', 'unfreeze', '(self, y)',
                     'name=name)(x)'):
    assert linen_text not in marked, (linen_text, marked)
  assert _put_back(marked, log) == plain


CELL_PARTIALS = '''\
import jax
from flax import nn


class Unnamed(nn.Module):

  def apply(self, x):
    x = nn.Dense(x, 3)
    cell = nn.GRUCell.partial(gate_fn=nn.sigmoid)
    for _ in range(2):
      carry = nn.GRUCell.initialize_carry(jax.random.PRNGKey(0),
                                          (x.shape[0],), 3)
      _, x = cell(carry, x)
    return x
'''


def test_cell_partial_locals_are_plans(monkeypatch):
  plain, _ = api.upgrade_source(CELL_PARTIALS)
  new, log = _upgrade(monkeypatch, CELL_PARTIALS, marker=False)
  assert new == plain
  (partial,) = _plans(log, 'cell_partial')
  assert partial.cell == 'GRUCell'
  assert [a.keyword.value for a in partial.hypers] == ['gate_fn']
  (call,) = _plans(log, 'cell_partial_call')
  assert _code(call.callee) == 'cell' and call.hypers == ()
  assert [_code(a.value) for a in call.inputs] == ['carry', 'x']
  # in a loop: the legacy auto-name drawn from the body's counter
  assert call.name.counter and call.name.type_name == 'GRUCell'
  marked, log = _upgrade(monkeypatch, CELL_PARTIALS, marker=True)
  assert 'legacy_cells.GRUCell' not in marked.split('class Unnamed')[1]
  assert _put_back(marked, log) == plain
