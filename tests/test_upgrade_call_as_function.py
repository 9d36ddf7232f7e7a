"""flaxlegacy upgrade: a legacy module's ``call`` taken as a function
(``fn = M.call``, ``jax.pmap(M.call)``, big_transfer's and vit's training
scripts' shape) becomes ``legacy_model.module_call(M)`` (the keywords it is
called with split between M's fields and ``__call__`` at run time: vit
calls ``vit_fn(params, x, train=True)``, ``train`` a field in linen); a
legacy optimizer's ``.state`` other than ``.state.step`` keeps its code
with a TODO.

The program runs twice: the legacy source under the layer and the upgraded
tree with ``FLAXLEGACY=off``; the numbers must agree.
"""

import numpy as np

from tests import upgrade_run

TODO = '# TODO(flaxlegacy upgrade)'

NET = '''\
    import jax
    import jax.numpy as jnp
    from flax import nn


    class Net(nn.Module):

      def apply(self, x, features=3, width=4, scale=1.0):
        x = nn.Dense(x, width, kernel_init=nn.initializers.ones)
        return scale * nn.Dense(nn.tanh(x), features,
                                kernel_init=nn.initializers.lecun_normal())


    TABLE = {'small': Net.partial(width=5)}
    '''

PROGRAM = '''\
    import json
    from functools import partial

    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import jax_utils
    from flax import optim

    import net


    def main():
      model = net.TABLE['small']
      Model = model.partial(features=2)
      _, params = Model.init_by_shape(jax.random.PRNGKey(0),
                                      [((1, 3), jnp.float32)])
      # the same numbers on both sides: the initial ones are drawn apart
      params = jax.tree_map(
          lambda p: jnp.asarray(np.random.RandomState(p.size).standard_normal(
              p.shape), jnp.float32), params)
      fn = Model.call
      fn_repl = jax.pmap(Model.call)
      x = jnp.linspace(-1.0, 1.0, 6).reshape(2, 3)

      def loss_fn(params):
        return jnp.sum(fn(params, x) ** 2)

      @partial(jax.pmap, axis_name='batch')
      def step(opt, lr):
        g = jax.grad(loss_fn)(opt.target)
        return opt.apply_gradient(g, learning_rate=lr)

      opt = jax_utils.replicate(optim.Momentum(beta=0.9).create(params))
      for _ in range(2):
        opt = step(opt, jax_utils.replicate(0.1))
      out = {'y': np.asarray(fn(params, x)).tolist(),
             'y_repl': np.asarray(fn_repl(jax_utils.replicate(params),
                                          x[None])).tolist(),
             'trained': np.asarray(fn(jax_utils.unreplicate(opt.target),
                                      x)).tolist(),
             'scaled': np.asarray(fn(params, x, scale=2.0)).tolist(),
             'step': int(opt.state.step[0])}
      print(json.dumps(out))


    main()
    '''


def test_call_taken_as_a_function_upgraded_and_same_numbers(tmp_path):
  src, out, report = upgrade_run.upgrade_dir(
      tmp_path, {'net.py': NET, 'program.py': PROGRAM})
  new = (out / 'program.py').read_text()
  assert 'fn = legacy_model.module_call(Model)' in new
  assert 'fn_repl = jax.pmap(legacy_model.module_call(Model))' in new
  assert 'import legacy_helpers as legacy_model' in new
  assert '.call' not in new
  assert TODO not in new
  assert not report['files']['program.py']['left']
  code = 'import runpy; runpy.run_path("program.py", run_name="__main__")'
  legacy = upgrade_run.run_json(src, code, False)
  upgraded = upgrade_run.run_json(out, code, True)
  assert legacy['step'] == upgraded['step'] == 2
  for k in ('y', 'y_repl', 'trained', 'scaled'):
    np.testing.assert_allclose(upgraded[k], legacy[k], rtol=1e-5, atol=1e-6,
                               err_msg=k)
  np.testing.assert_allclose(legacy['scaled'], 2 * np.asarray(legacy['y']),
                             rtol=1e-6)
  # the training moved the outputs (the comparison is not vacuous)
  assert np.abs(np.asarray(legacy['trained']) -
                np.asarray(legacy['y'])).max() > 1e-3


def test_call_as_a_function_of_a_module_whose_inputs_are_not_first_is_a_todo(
    tmp_path):
  # legacy Two.call(params, x, 2.0, y): ``scale`` is a field in linen (a
  # .partial binds it), so the positional arguments of the function cannot
  # be passed on as inputs (without the .partial, init_by_shape passing it
  # positionally makes it an input: tests/test_upgrade_positional_split.py)
  files = {
      'net.py': '''\
          from flax import nn

          class Two(nn.Module):
            def apply(self, x, scale=1.0, y=None):
              return nn.Dense(x * y.sum(), 2) * scale
          ''',
      'program.py': '''\
          import jax
          import jax.numpy as jnp
          import net

          _, params = net.Two.init_by_shape(
              jax.random.PRNGKey(0), [((1, 3), jnp.float32)], 2.0,
              jnp.ones(3))
          fn = net.Two.call
          half = net.Two.partial(scale=0.5)
          ''',
  }
  _, out, report = upgrade_run.upgrade_dir(tmp_path, files)
  new = (out / 'program.py').read_text()
  # init_by_shape's positional arguments after the specs: the field of its
  # position a constructor keyword, the input an input
  assert ('net.Two(scale=2.0).init(jax.random.PRNGKey(0), '
          'jnp.ones((1, 3), jnp.float32), jnp.ones(3))') in new, new
  assert 'fn = net.Two.call' in new
  assert (TODO + ': net.Two.call taken as a function: the arguments it will '
          'be called with are not known here to be the module\'s inputs'
          ) in new
  assert report['files']['program.py']['left']


def test_optimizer_state_other_than_its_step_is_a_todo(tmp_path):
  files = {
      'program.py': '''\
          import jax
          import jax.numpy as jnp
          from flax import nn
          from flax import optim

          class Net(nn.Module):
            def apply(self, x):
              return nn.Dense(x, 2)

          _, params = Net.init_by_shape(jax.random.PRNGKey(0),
                                        [((1, 3), jnp.float32)])
          opt = optim.Momentum(learning_rate=0.1, beta=0.9).create(params)
          step = opt.state.step
          momentum = opt.state.param_states
          ''',
  }
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, files)
  new = (out / 'program.py').read_text()
  assert 'step = opt.step\n' in new
  lines = new.splitlines()
  i = lines.index('momentum = opt.state.param_states')
  assert lines[i - 1].startswith(
      TODO + ': opt.state: the legacy optimizer state (step, param_states) '
      'has no counterpart of its structure on the TrainState'), lines[i - 1]
  assert new.count(TODO) == 1, new
