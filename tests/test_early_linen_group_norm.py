"""GroupNorm with flax <= 0.3.5's parameter layout (the ``group_norm`` row).

flax 0.3.0-0.3.5 linen created GroupNorm's ``scale`` / ``bias`` as ``(1,
..., 1, C)`` (the input's rank); 0.3.6 and today's linen as ``(C,)``, and
applying a 0.3.5 tree (score_sde's published checkpoints) raises
``ScopeParamShapeError``.  The cases of tests/early_linen/group_norm.py run
in a fresh interpreter three ways: a legacy process, a legacy process with
``FLAXLEGACY_GROUP_NORM=modern``, and a modern process.  The 0.3.5 outputs
were recorded on the oracle by tests/early_linen/record_flax035_group_norm.py
(tests/early_linen/flax035_group_norm.json).
"""

import json
import os

import numpy as np
import pytest

from tests.test_activation import run_python

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, 'early_linen')

SCRIPT = '''
import json, sys
import numpy as np
LEGACY
import jax
from flax import linen as nn
sys.path.insert(0, DATA)
import group_norm

def attempt(fn):
  try:
    y = fn()
  except Exception as e:
    return {'error': type(e).__name__, 'message': str(e).splitlines()[0]}
  return [list(y.shape), [repr(float(v)) for v in np.ravel(y)]]

out = {layout: {name: attempt(lambda: group_norm.apply(name, layout))
                for name in group_norm.CASES}
       for layout in ('legacy', 'squeezed')}
variables = nn.GroupNorm(num_groups=3).init(jax.random.PRNGKey(0),
                                            np.ones((2, 4, 3, 6), np.float32))
out['init_shapes'] = {k: list(np.shape(v))
                      for k, v in variables['params'].items()}
# (1, 1, C) for a rank-4 input: not 0.3.5's layout (it raised there too)
wrong_rank = {'params': {'scale': np.ones((1, 1, 4), np.float32),
                         'bias': np.zeros((1, 1, 1, 4), np.float32)}}
out['wrong_rank'] = attempt(lambda: nn.GroupNorm(num_groups=2).apply(
    wrong_rank, np.ones((2, 3, 3, 4), np.float32)))
print(json.dumps(out))
'''

LEGACY_IMPORT = 'from flax import nn as legacy_nn'


def _run(legacy, env=None):
  script = SCRIPT.replace('LEGACY', LEGACY_IMPORT if legacy else '').replace(
      'DATA', repr(DATA))
  proc = run_python(script, env=env)
  return json.loads(proc.stdout.splitlines()[-1]), proc.stderr


def _array(result):
  assert isinstance(result, list), result
  shape, values = result
  return np.array([float(v) for v in values], np.float32).reshape(shape)


@pytest.fixture(scope='module')
def runs():
  return {
      'legacy': _run(True),
      'opted out': _run(True, {'FLAXLEGACY_GROUP_NORM': 'modern'}),
      'modern': _run(False),
  }


def _flax035():
  with open(os.path.join(DATA, 'flax035_group_norm.json')) as f:
    data = json.load(f)
  assert data['flax'] == '0.3.5'
  return data


def test_the_behaviour_is_announced(runs):
  assert 'group_norm' in runs['legacy'][1].split('behaviour: ')[1]
  assert 'FLAXLEGACY_GROUP_NORM' in runs['legacy'][1]
  assert 'FLAXLEGACY_GROUP_NORM' not in runs['opted out'][1]


def test_flax_0_3_5_layout_gives_the_squeezed_parameters_result(runs):
  out = runs['legacy'][0]
  assert len(out['legacy']) == 6
  for name in out['legacy']:
    # the same values reshaped: the same arithmetic, bit for bit
    np.testing.assert_array_equal(_array(out['legacy'][name]),
                                  _array(out['squeezed'][name]), err_msg=name)


def test_flax_0_3_5_layout_gives_flax_0_3_5s_numbers(runs):
  data = _flax035()
  want = {k: np.array([float(x) for x in v['values']],
                      np.dtype(v['dtype'])).reshape(v['shape'])
          for k, v in data['arrays'].items()}
  got = {k: _array(v) for k, v in runs['legacy'][0]['legacy'].items()}
  assert sorted(got) == sorted(want)
  for name in want:
    # float32 statistics on another XLA build, and 0.3.5 multiplied by
    # rsqrt(var) and then the scale where 0.3.6 and today multiply by their
    # product: measured at most 4.2e-7 apart here (outputs up to ~3; flax
    # 0.3.6 on the oracle's own jax differs from 0.3.5 by up to 2.4e-7)
    np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6,
                               err_msg=name)
    assert got[name].shape == want[name].shape


def test_squeezed_parameters_are_unchanged(runs):
  legacy, modern = runs['legacy'][0], runs['modern'][0]
  for name, result in modern['squeezed'].items():
    np.testing.assert_array_equal(_array(legacy['squeezed'][name]),
                                  _array(result), err_msg=name)
  assert runs['opted out'][0]['squeezed'] == modern['squeezed']


@pytest.mark.parametrize('run', ['opted out', 'modern'])
def test_flax_0_3_5_layout_raises_as_today_when_opted_out(runs, run):
  out = runs[run][0]['legacy']
  assert len(out) == 6
  for name, result in out.items():
    assert isinstance(result, dict), name
    assert result['error'] == 'ScopeParamShapeError', name
    assert 'the given initializer is expected to generate shape' in (
        result['message'])
  assert "parameter \"scale\" in \"/norm\"" in out['in_model_jit']['message']
  assert '(1, 1, 1, 4)' in out['in_model_jit']['message']
  assert "parameter \"bias\"" in out['bias_only']['message']


def test_init_creates_squeezed_parameters(runs):
  for run in ('legacy', 'opted out', 'modern'):
    assert runs[run][0]['init_shapes'] == {'scale': [6], 'bias': [6]}
  # (flax 0.3.5 itself created (1, 1, 1, 6): the recorded file says so)
  assert _flax035()['init_shapes'] == {'scale': [1, 1, 1, 6],
                                       'bias': [1, 1, 1, 6]}


def test_other_layouts_still_raise(runs):
  for run in ('legacy', 'modern'):
    result = runs[run][0]['wrong_rank']
    assert result['error'] == 'ScopeParamShapeError'
    assert 'parameter "scale"' in result['message']
    assert 'has shape (1, 1, 4)' in result['message']
