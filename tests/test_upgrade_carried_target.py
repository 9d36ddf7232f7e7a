"""flaxlegacy upgrade: the optimizer of a model another function made.

A builder function makes ``nn.Model(M.partial(k=v), params)`` and returns
it (jaxnerf's ``models.get_model``: a table of builders); the program
creates an optimizer of it.

* When the model stays bare parameters, the TrainState's ``apply_fn`` was
  written ``M().apply`` -- the file's one module class, without the
  ``.partial`` keywords bound where the model was made: their fields took
  their defaults (a shape error here; silently other numbers for a
  keyword that is no size).  Now a TODO there (the module is not known).
* When the model carries its module (``legacy_model.Model``: a function
  calls it where its class cannot be named), the TrainState's ``params`` is
  that Model.  Where the optimizer comes back through what the value facts
  do not follow (a struct's ``.replace(optimizer=...)`` returned by a
  training step), ``state.optimizer.target.params`` was written
  ``state.optimizer.params`` as for bare parameters: the Model, not its
  parameter dict (``.keys()`` raised AttributeError).  Every optimizer the
  codebase creates holds a carried Model, so that one does too:
  ``state.optimizer.params.params``; runs with the layer off and gives the
  legacy numbers.
"""

import numpy as np

from tests import upgrade_run

TODO = '# TODO(flaxlegacy upgrade)'

MODELS = '''
import jax.numpy as jnp
from flax import nn


def waves(key, shape, dtype=jnp.float32):
  del key
  n = 1
  for d in shape:
    n *= d
  return jnp.sin(jnp.arange(n, dtype=dtype) * 0.9).reshape(shape)


class Net(nn.Module):

  def apply(self, x, features=3):
    return nn.Dense(x, features, kernel_init=waves, name='out')


def net(key, features):
  model_fn = Net.partial(features=features)
  with nn.stateful() as init_state:
    _, params = model_fn.init(key, jnp.ones((1, 4)))
    model = nn.Model(model_fn, params)
  return model, init_state


model_dict = {'net': net}


def get_model(key, name, features):
  return model_dict[name](key, features)
'''

RUN = '''
import json
import flax
import jax
import jax.numpy as jnp
import numpy as np
from flax import optim
import models


@flax.struct.dataclass
class State:
  step: int
  optimizer: optim.Optimizer


def train_step(state, x):
  def loss_fn(model):
    return jnp.mean(model(x) ** 2)
  grad = jax.grad(loss_fn)(state.optimizer.target)
  new_optimizer = state.optimizer.apply_gradient(grad, learning_rate=0.1)
  return state.replace(step=state.step + 1, optimizer=new_optimizer)


model, _ = models.get_model(jax.random.PRNGKey(0), 'net', 5)
optimizer = optim.Adam(0.1).create(model)
state = State(step=0, optimizer=optimizer)
state = jax.jit(train_step)(state, jnp.cos(jnp.arange(8.0)).reshape((2, 4)))
state = jax.device_get(jax.tree_util.tree_map(lambda x: x, state))
params = state.optimizer.target.params
print(json.dumps({'keys': sorted(params.keys()),
                  'kernel': np.asarray(params['out']['kernel']).tolist()}))
'''


def test_apply_fn_of_a_model_built_with_partial_keywords_elsewhere(tmp_path):
  _, out, _ = upgrade_run.upgrade_dir(
      tmp_path, {'models.py': MODELS, 'run.py': RUN})
  code = (out / 'run.py').read_text()
  assert 'Net().apply' not in code, code
  lines = code.splitlines()
  i = next(i for i, l in enumerate(lines) if 'TrainState.create(' in l)
  assert lines[i - 1].strip().startswith(TODO), code
  assert 'TrainState.apply_fn' in lines[i - 1], code


# a function that calls the model: its module cannot be named there, so the
# model carries it
CARRIED_RUN = RUN.replace(
    "model, _ = models.get_model(jax.random.PRNGKey(0), 'net', 5)\n",
    "def predict(model, x):\n"
    "  return model(x)\n\n\n"
    "model, _ = models.get_model(jax.random.PRNGKey(0), 'net', 5)\n"
    "first = predict(model, jnp.ones((1, 4)))\n")


def test_target_params_of_an_optimizer_of_carried_models(tmp_path):
  assert CARRIED_RUN != RUN
  src, out, _ = upgrade_run.upgrade_dir(
      tmp_path, {'models.py': MODELS, 'run.py': CARRIED_RUN})
  code = (out / 'run.py').read_text()
  assert 'legacy_model.apply_model' in code, code  # the model is carried
  assert 'state.optimizer.params.params' in code, code
  assert TODO not in code, code
  legacy = upgrade_run.run_json(src, CARRIED_RUN, off=False)
  upgraded = upgrade_run.run_json(out, code, off=True)
  assert upgraded['keys'] == legacy['keys'] == ['out']
  # one Adam step of 0.1 from the same kernel: legacy's and optax's update
  # differ in the last float32 bits (measured 7e-7)
  np.testing.assert_allclose(upgraded['kernel'], legacy['kernel'],
                             rtol=1e-5, atol=2e-6)
