"""flaxlegacy upgrade: ``name=None`` and ``name=p`` (p's default None) of a
legacy module call are legacy auto-names (rules/name_plan.py,
rules/apply/module_calls.py, rules/autoname_stack.py).

Legacy Flax named a submodule built with ``name=None`` exactly as one
built with no name: ``{Class}_{n}`` on the running module's one counter
across all types.  Research code forwards a helper's ``name=None`` to the
layer it builds (``def dense(x, f, name=None): return nn.Dense(x, f,
name=name)``) and passes ``name=None`` spelled out.  The upgrade took any
``name=`` for a name, and linen named those submodules by its own
per-type counter: ``Dense_0`` where legacy wrote ``Dense_2``, a parameter
tree old checkpoints do not fit, with no TODO.  Now ``name=None`` is an
auto-name, and ``name=p`` becomes ``p if p is not None else <the legacy
auto-name>`` (counted at run time: whether the counter moves depends on
the run).
"""

import numpy as np
import pytest

from tests import upgrade_run

TODO = '# TODO(flaxlegacy upgrade)'

NETS = '''
import jax.numpy as jnp
from flax import nn


def waves(key, shape, dtype=jnp.float32):
  # deterministic: legacy and linen derive submodule keys apart
  del key
  n = 1
  for d in shape:
    n *= d
  return jnp.sin(jnp.arange(n, dtype=dtype) * 0.7).reshape(shape) * 0.3


def conv3(x, f):
  return nn.Conv(x, f, (3, 3), kernel_init=waves, name=None)


def dense(x, f, name=None):
  return nn.Dense(x, f, kernel_init=waves, name=name)


class Helpers(nn.Module):
  """Functions building layers with name=None / a name that may be None."""

  def apply(self, x):
    x = nn.Dense(x, 2, kernel_init=waves)
    x = conv3(x, 3)
    x = conv3(x, 2)
    x = dense(x.reshape((x.shape[0], -1)), 3)
    x = dense(x, 3, name='named')
    return dense(x, 2)


class Body(nn.Module):
  """In the body: name=None spelled out, and a field that may be None."""

  def apply(self, x, last=None):
    x = nn.Conv(x, 2, (1, 1), kernel_init=waves, name=None)
    x = nn.Dense(x, 2, kernel_init=waves, name=None)
    x = nn.Conv(x, 2, (1, 1), kernel_init=waves, name=last)
    return nn.Dense(x.reshape((x.shape[0], -1)), 2, kernel_init=waves)


class Helper(nn.Module):
  """A helper method forwarding its name=None, run once without a name."""

  def _block(self, x, f, name=None):
    return nn.relu(nn.Conv(x, f, (1, 1), kernel_init=waves, name=name))

  def apply(self, x):
    x = nn.Dense(x, 2, kernel_init=waves)
    x = self._block(x, 2)
    return self._block(x, 3, name='b')


Dense2 = nn.Dense.partial(features=2, kernel_init=waves, name=None)


class Partials(nn.Module):
  """.partial(name=None) names nothing."""

  def apply(self, x):
    x = nn.Conv(x, 2, (1, 1), kernel_init=waves)
    x = Dense2(x)
    return nn.Dense.partial(features=2, kernel_init=waves, name=None)(x)


class Static(nn.Module):
  """name=None only: the names stay literals known statically."""

  def apply(self, x):
    x = nn.Conv(x, 2, (1, 1), kernel_init=waves, name=None)
    return nn.Dense(x, 2, kernel_init=waves, name=None)
'''

CASES = [
    ('helpers', 'Helpers', {}),
    ('body', 'Body', {}),
    ('body_named', 'Body', {'last': 'proj'}),
    ('static', 'Static', {}),
    ('helper', 'Helper', {}),
    ('partials', 'Partials', {}),
]

RUN = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
import nets

out = {}
for case, cls, kw in %r:
  x = jnp.cos(jnp.arange(2 * 4 * 4 * 3, dtype=jnp.float32)).reshape(
      (2, 4, 4, 3))
  y, params = getattr(nets, cls).partial(**kw).init(jax.random.PRNGKey(0), x)
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  out[case] = {'y': np.asarray(y).tolist(),
               'paths': sorted(jax.tree_util.keystr(p) for p, _ in flat)}
print(json.dumps(out))
''' % (CASES,)

UPGRADED_RUN = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
import nets

out = {}
for case, cls, kw in %r:
  x = jnp.cos(jnp.arange(2 * 4 * 4 * 3, dtype=jnp.float32)).reshape(
      (2, 4, 4, 3))
  module = getattr(nets, cls)(**kw)
  y, v = module.init_with_output(jax.random.PRNGKey(0), x)
  y2 = jax.jit(module.apply)(v, x)
  flat = jax.tree_util.tree_flatten_with_path(v['params'])[0]
  out[case] = {'y': np.asarray(y).tolist(), 'y2': np.asarray(y2).tolist(),
               'paths': sorted(jax.tree_util.keystr(p) for p, _ in flat)}
print(json.dumps(out))
''' % (CASES,)


@pytest.fixture(scope='module')
def upgraded(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('name_none')
  src, out, report = upgrade_run.upgrade_dir(tmp, {'nets.py': NETS})
  legacy = upgrade_run.run_json(src, RUN, off=False)
  got = upgrade_run.run_json(out, UPGRADED_RUN, off=True)
  return (out / 'nets.py').read_text(), report, legacy, got


def test_rewrite(upgraded):
  code = upgraded[0]
  assert TODO not in code, code
  assert ("  return nn.Dense(f, kernel_init=waves, name=name if name is not "
          "None else f'Dense_{next(legacy_names.autoname_counter())}')(x)"
          ) in code, code
  assert ("  return nn.Conv(f, (3, 3), kernel_init=waves, "
          "name=f'Conv_{next(legacy_names.autoname_counter())}')(x)") in code
  assert ("name=self.last if self.last is not None else "
          "f'Conv_{next(legacy_autoname)}')(x)") in code, code
  # name=None alone: literal names where linen's differ, no counter
  static = code[code.index('class Static'):]
  assert 'x = nn.Conv(2, (1, 1), kernel_init=waves)(x)' in static, static
  assert "nn.Dense(2, kernel_init=waves, name='Dense_1')(x)" in static
  assert 'waves, name=None)(x)' not in code
  # a helper method: its one unnamed run's legacy name, planned statically
  assert ("nn.Conv(f, (1, 1), kernel_init=waves, name=name if name is not "
          "None else 'Conv_1')(x)") in code, code
  assert "x = Dense2(name='Dense_1')(x)" in code, code


@pytest.mark.parametrize('case', [c[0] for c in CASES])
def test_same_parameter_tree_and_numbers_as_legacy(upgraded, case):
  _, _, legacy, got = upgraded
  assert got[case]['paths'] == legacy[case]['paths']
  # the legacy numbering: one counter for all types, name=None included
  expect = {'helpers': ["['Dense_0']", "['Conv_1']", "['Conv_2']",
                        "['Dense_3']", "['named']", "['Dense_4']"],
            'body': ["['Conv_0']", "['Dense_1']", "['Conv_2']",
                     "['Dense_3']"],
            'body_named': ["['Conv_0']", "['Dense_1']", "['proj']",
                           "['Dense_2']"],
            'static': ["['Conv_0']", "['Dense_1']"],
            'helper': ["['Dense_0']", "['Conv_1']", "['b']"],
            'partials': ["['Conv_0']", "['Dense_1']", "['Dense_2']"]}[case]
  assert sorted({p.split(']')[0] + ']' for p in legacy[case]['paths']}) == (
      sorted(expect)), legacy[case]['paths']
  np.testing.assert_allclose(got[case]['y'], legacy[case]['y'], rtol=1e-5,
                             atol=1e-6)
  np.testing.assert_allclose(got[case]['y2'], legacy[case]['y'], rtol=1e-5,
                             atol=1e-6)


TWICE = '''
from flax import nn


class Net(nn.Module):

  def _block(self, x, f, name=None):
    return nn.Conv(x, f, (1, 1), name=name)

  def apply(self, x):
    x = self._block(x, 2)
    x = nn.Dense(x, 2)
    x = self._block(x, 3, name='b')
    return self._block(x, 2)
'''


def test_helper_auto_named_in_two_runs_keeps_its_todo(tmp_path):
  # the same line built Conv_0 and Conv_3 in legacy (one counter for the
  # module instance): no static plan, and a helper draws no run-time
  # counter, so the class keeps its TODO -- it had none and got linen's
  # Conv_0 / Conv_1 (and Dense_0 for legacy's Dense_1)
  _, out, report = upgrade_run.upgrade_dir(tmp_path, {'net.py': TWICE})
  code = (out / 'net.py').read_text()
  assert (TODO + ": Net: methods ['_block'] are legacy module methods or "
          'helpers: check them by hand') in code, code
  assert [t['line'] for t in report['files']['net.py']['left']] == [5]


REBOUND = '''
from flax import nn


def conv(x, f, conv_name=None, bn_name=None):
  conv_name = conv_name if conv_name else 'conv2d'
  x = nn.Conv(x, f, (1, 1), name=conv_name)
  return nn.Dense(x, f, name=bn_name)


class Net(nn.Module):

  def apply(self, x):
    x = nn.Dense(x, 2)
    return conv(x, 2, conv_name='c', bn_name='bn')
'''


def test_parameter_bound_again_is_a_name(tmp_path):
  # sam's efficientnet conv2d: ``conv_name = conv_name if conv_name else
  # 'conv2d'`` before the call: a string there, a name as written; the
  # other parameter, used as it came, may be None
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, {'net.py': REBOUND})
  code = (out / 'net.py').read_text()
  assert 'x = nn.Conv(f, (1, 1), name=conv_name)(x)' in code, code
  assert ("nn.Dense(f, name=bn_name if bn_name is not None else "
          "f'Dense_{next(legacy_names.autoname_counter())}')(x)") in code, code
