"""flaxlegacy upgrade: initializers that compute in Python on array values
(rules/value_initializers.py).

Legacy ``Model`` / ``Module.call`` never ran an initializer once its
parameter existed; linen's ``apply`` runs it under ``jax.eval_shape`` to
check the stored shape.  A masked initializer of the kind sparse-training
code writes::

    def init(rng, shape, dtype=jnp.float32):
      if mask is None: ...
      if jnp.sum(mask) == 0: ...        # fails under eval_shape

initialises under linen but fails on every ``apply``.  The upgrade cannot
make it shape-pure, so the failing line must carry the TODO.  The tests
below check where the TODO goes and that the upgraded code, run with
FLAXLEGACY=off, fails exactly at that line while the legacy code runs under
the layer.
"""

import textwrap

from flaxlegacy.upgrade import upgrade_source
from flaxlegacy.upgrade.rules import value_initializers
from tests import upgrade_run

TODO = '# TODO(flaxlegacy upgrade): ' + value_initializers.WHY

MODEL = '''\
    import jax
    import jax.numpy as jnp
    from flax import nn


    def masked_init(base_init, mask):
      def init(rng, shape, dtype=jnp.float32):
        if mask is None:
          return base_init(rng, shape, dtype)
        live = jnp.sum(mask, axis=0)
        if jnp.sum(live) == 0:
          return jnp.zeros(shape, dtype)
        return base_init(rng, shape, dtype) * mask
      return init


    class MaskedDense(nn.Module):

      def apply(self, x, mask=None):
        return nn.Dense(x, 3, kernel_init=masked_init(
            nn.initializers.lecun_normal(), mask))
    '''

RUN = '''\
    import json, sys, traceback
    import jax, jax.numpy as jnp
    import model
    mask = jnp.array([[1., 0., 1.], [0., 0., 1.]])
    x = jnp.ones((1, 2))
    if {legacy}:
      from flax import nn
      _, params = model.MaskedDense.init(jax.random.PRNGKey(0), x, mask=mask)
      m = nn.Model(model.MaskedDense.partial(mask=mask), params)
      print(json.dumps({{'out': m(x).tolist()}}))
    else:
      variables = model.MaskedDense(mask=mask).init(jax.random.PRNGKey(0), x)
      try:
        model.MaskedDense(mask=mask).apply(variables, x)
      except Exception as e:  # the failure the TODO announces
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if f.filename.endswith('model.py')]
        print(json.dumps({{'error': type(e).__name__,
                           'line': frames[-1].lineno}}))
      else:
        print(json.dumps({{'error': None}}))
    '''


def up(src):
  return upgrade_source(textwrap.dedent(src))[0]


def test_todo_goes_above_the_first_statement_reading_array_values():
  out = up(MODEL)
  lines = out.splitlines()
  at = [i for i, l in enumerate(lines) if l.strip() == TODO]
  assert len(at) == 1, out
  assert lines[at[0] + 1].strip() == 'if jnp.sum(live) == 0:', out
  # `if mask is None:` tests a parameter (Python), not an array value
  assert lines[at[0] - 1].strip() != TODO


def test_shape_pure_initializers_get_no_todo():
  src = '''\
      import jax.numpy as jnp
      from jax import random


      def scaled(scale):
        def init(key, shape, dtype=jnp.float32):
          if len(shape) < 2 or shape[-1] == 0:
            raise ValueError('need a matrix')
          fan_in = int(jnp.zeros(shape).shape[0])
          w = random.normal(key, shape, dtype)
          w = jnp.where(jnp.abs(w) > 2., 0., w)
          return w * scale / fan_in if w.ndim == 2 else w
        return init


      def not_an_initializer(x, shape):
        if jnp.sum(x) == 0:
          return x
        return x
      '''
  out = up(src)
  assert 'TODO' not in out, out


def test_conversion_of_an_array_value_is_found():
  src = '''\
      import jax.numpy as jnp


      def counted(mask):
        def init(rng, shape, dtype=jnp.float32):
          counts = jnp.sum(mask, axis=0)
          n = int(counts[0])
          return jnp.zeros(shape, dtype) + n
        return init
      '''
  lines = up(src).splitlines()
  at = [i for i, l in enumerate(lines) if l.strip() == TODO]
  assert [lines[i + 1].strip() for i in at] == ['n = int(counts[0])']


def test_upgraded_code_fails_at_the_todo_line_and_legacy_runs(tmp_path):
  src, out, report = upgrade_run.upgrade_dir(tmp_path, {'model.py': MODEL})
  assert any(value_initializers.WHY in t['why']
             for f in report['files'].values() for t in f['left']), report
  legacy = upgrade_run.run_json(src, RUN.format(legacy=True), off=False)
  assert len(legacy['out'][0]) == 3
  upgraded = upgrade_run.run_json(out, RUN.format(legacy=False), off=True)
  assert upgraded['error'] in ('TracerBoolConversionError',
                               'ConcretizationTypeError'), upgraded
  lines = (out / 'model.py').read_text().splitlines()
  assert lines[upgraded['line'] - 2].strip() == TODO, (
      upgraded, lines[upgraded['line'] - 3:upgraded['line']])
