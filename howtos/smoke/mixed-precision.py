"""Smoke test of mixed-precision.diff (run by howtos/check_diffs.py on 2
devices, with the small synthetic ResNet the example's tests use).

--half_precision_dtype=float16 on CPU: the ResNet computes in float16 on
float32 parameters, trains with optim.DynamicScale, logs the loss scale and
the skipped steps every epoch consistently with the scale's state, and a
step whose scaled gradients overflow changes no parameter and halves the
scale.  (The example's own tests are not run here: the diff changes nothing
unless the new flag is given, and they take minutes.)
"""

import re

from flax import jax_utils
from flax import nn
from flax.training import common_utils
import jax
import jax.numpy as jnp
import numpy as onp

import input_pipeline
import smoke_lib
import train

SMALL = ['--synthetic_data', '--num_layers=10', '--num_filters=8',
         '--image_size=32', '--batch_size=16', '--num_epochs=2',
         '--steps_per_epoch=2', '--steps_per_eval=1', '--warmup_epochs=0.5',
         '--half_precision', '--half_precision_dtype=float16']
SCALE = re.compile(r'train epoch: (\d+), loss scale: (\S+), steps skipped for '
                   r'overflow: (\d+)$')
INITIAL_SCALE = 2. ** 16


def leaves(tree):
  return [onp.asarray(x) for x in jax.tree_util.tree_leaves(
      jax.device_get(tree))]


def equations(jaxpr):
  """All equations of a jaxpr, those of nested jaxprs included."""
  for eqn in jaxpr.eqns:
    yield eqn
    for param in eqn.params.values():
      for sub in param if isinstance(param, (list, tuple)) else [param]:
        sub = getattr(sub, 'jaxpr', sub)
        if hasattr(sub, 'eqns'):
          yield from equations(sub)


def main():
  assert jax.device_count() == 2, jax.devices()
  state, lines = smoke_lib.run_main(train, SMALL,
                                     record='train_and_evaluate')
  assert 'model dtype: float16 with dynamic loss scaling' in lines, lines
  epochs = [SCALE.match(l).groups() for l in lines if SCALE.match(l)]
  assert [int(e[0]) for e in epochs] == [1, 2], lines

  one = jax.device_get(jax_utils.unreplicate(state))
  assert int(one.step) == 4
  scale = one.dynamic_scale
  assert isinstance(scale, train.optim.DynamicScale), type(scale)
  # No growth within 2000 steps: the scale is the start halved once per
  # skipped step, and what was logged says so.
  skipped = sum(int(e[2]) for e in epochs)
  assert float(scale.scale) == INITIAL_SCALE * 0.5 ** skipped, (scale, skipped)
  assert float(epochs[-1][1]) == float(scale.scale), (epochs, scale)
  assert int(scale.fin_steps) <= 4 - skipped

  # float32 master parameters, float16 computation.
  params = one.optimizer.target.params
  assert {l.dtype for l in leaves(params)} == {onp.dtype('float32')}
  assert all(onp.all(onp.isfinite(l)) for l in leaves(params))
  def predict(images):
    with nn.stateful(one.model_state, mutable=False):
      return one.optimizer.target(images, train=False)
  jaxpr = jax.make_jaxpr(predict)(jnp.zeros((2, 32, 32, 3), jnp.float16))
  convs = [str(v.aval.dtype) for e in equations(jaxpr.jaxpr)
           if e.primitive.name == 'conv_general_dilated' for v in e.outvars]
  assert len(convs) >= 9 and set(convs) == {'float16'}, convs

  # A step whose scaled loss overflows float16 is skipped and halves the
  # scale.
  huge = state.replace(dynamic_scale=state.dynamic_scale.replace(
      scale=jnp.full_like(state.dynamic_scale.scale, 2. ** 100)))
  p_train_step, _ = train.pmapped_steps(0.1 * 16 / 256., 2, 2, 0.5, 1e-4)
  batch = common_utils.shard(next(input_pipeline.synthetic_batches(
      16, 32, dtype=onp.float16, num_classes=1000)))
  after, metrics = p_train_step(huge, batch)
  assert onp.asarray(metrics['skipped']).tolist() == [1., 1.], metrics
  assert float(after.dynamic_scale.scale[0]) == 2. ** 99
  for a, b in zip(leaves(after.optimizer), leaves(huge.optimizer)):
    onp.testing.assert_array_equal(a, b)

  smoke_lib.report('mixed-precision', example_tests=0, epochs=epochs,
                   final_scale=float(scale.scale), skipped=skipped,
                   conv_dtypes=sorted(set(convs)), convs=len(convs))


if __name__ == '__main__':
  main()
