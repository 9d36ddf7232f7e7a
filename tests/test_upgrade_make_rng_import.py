"""Legacy randomness imported by name.

Research code (long-range-arena's local, sinkhorn and synthesizer
attentions) imports legacy's key source itself: ``from flax.deprecated.nn.
stochastic import make_rng`` (likewise ``flax.nn.stochastic``, ``flax.nn``,
``flax.deprecated.nn``, possibly ``as`` another name), and calls
``make_rng()``.  Before, the import kept a TODO and a call in a module body
stayed the legacy call (the upgraded file did not import with
``FLAXLEGACY=off``).  Now a call in a module body is rewritten as
``nn.make_rng()`` is (``self.make_rng('dropout')``; ``is_stochastic()`` as
``self.has_rng('dropout')``) and the import goes where every use was
rewritten; a use outside a module body (a plain function: no module to
draw from) keeps the legacy call with a TODO there, and the import stays
with its TODO.
"""

import textwrap

import numpy as np
import pytest

from tests import upgrade_run

TODO = 'TODO(flaxlegacy upgrade)'

BODY = '''
import jax
import jax.numpy as jnp
from flax import nn{imports}


''' + upgrade_run.RAMP_SRC + '''

class Drop(nn.Module):
  """A dense layer, then dropout written by hand."""

  def apply(self, x, rate=0.5, deterministic=False):
    y = nn.Dense(x, 6, kernel_init=ramp, name='dense')
    if deterministic:
      return y
    keep = jax.random.bernoulli({draw}(), 1.0 - rate, y.shape)
    return jnp.where(keep, y / (1.0 - rate), 0.)


class Gate(nn.Module):
  """Noise only where a key is there to draw from."""

  def apply(self, x):
    y = nn.Dense(x, 6, kernel_init=ramp, name='dense')
    if {stochastic}():
      y = y + jax.random.normal({draw}(), y.shape)
    return y
'''

SPELLINGS = [
    'from flax.deprecated.nn.stochastic import {names}',
    'from flax.nn.stochastic import {names}',
    'from flax.nn import {names}',
    'from flax.deprecated.nn import {names}',
]


def _by_name(spelling, alias):
  names = ('make_rng as draw, is_stochastic as on' if alias
           else 'make_rng, is_stochastic')
  draw, on = ('draw', 'on') if alias else ('make_rng', 'is_stochastic')
  return BODY.format(imports='\n' + spelling.format(names=names), draw=draw,
                     stochastic=on)


ATTRIBUTE_FORM = BODY.format(imports='', draw='nn.make_rng',
                             stochastic='nn.is_stochastic')


@pytest.mark.parametrize('alias', [False, True])
@pytest.mark.parametrize('spelling', SPELLINGS)
def test_by_name_is_rewritten_as_the_attribute_form(tmp_path, spelling,
                                                    alias):
  """Every spelling of the import, aliased or not: the upgraded file is
  the one the attribute form (``nn.make_rng()``) upgrades to, the import
  gone.  On main the import keeps a TODO and ``make_rng()`` stays."""
  _, out, report = upgrade_run.upgrade_dir(
      tmp_path, {'by_name.py': _by_name(spelling, alias),
                 'attribute.py': ATTRIBUTE_FORM})
  text = (out / 'by_name.py').read_text()
  assert TODO not in text, text
  assert 'flax.nn' not in text and 'flax.deprecated' not in text, text
  assert "self.make_rng('dropout')" in text, text
  assert "self.has_rng('dropout')" in text, text
  assert text == (out / 'attribute.py').read_text()
  assert not report['files']['by_name.py']['left'], report
  whats = [r['what'] for r in report['files']['by_name.py']['rewritten']]
  local = 'draw' if alias else 'make_rng'
  assert (f"{local}() (nn.make_rng imported by name) -> "
          "self.make_rng('dropout')") in whats, whats
  assert any(w.startswith(f'from ... import {local}: every use rewritten')
             for w in whats), whats


INPUTS = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
import model

x = jnp.asarray(np.random.RandomState(0).normal(size=(4, 5)), jnp.float32)
out = {}
'''

LEGACY_RUN = INPUTS + '''
from flax import nn
y, params = model.Drop.init(jax.random.PRNGKey(0), x, deterministic=True)
out['det'] = np.asarray(y).tolist()
flat = jax.tree_util.tree_flatten_with_path(params)[0]
out['paths'] = sorted(jax.tree_util.keystr(p) for p, _ in flat)
for k in (3, 4):
  with nn.stochastic(jax.random.PRNGKey(k)):
    out[f'drop{k}'] = np.asarray(model.Drop.call(params, x)).tolist()
_, gparams = model.Gate.init(jax.random.PRNGKey(0), x)
out['gate'] = np.asarray(model.Gate.call(gparams, x)).tolist()
with nn.stochastic(jax.random.PRNGKey(3)):
  out['gate_noisy'] = np.asarray(model.Gate.call(gparams, x)).tolist()
print(json.dumps(out))
'''

UPGRADED_RUN = INPUTS + '''
y, v = model.Drop(deterministic=True).init_with_output(
    jax.random.PRNGKey(0), x)
params = v['params']
out['det'] = np.asarray(y).tolist()
flat = jax.tree_util.tree_flatten_with_path(params)[0]
out['paths'] = sorted(jax.tree_util.keystr(p) for p, _ in flat)
for k in (3, 4):
  out[f'drop{k}'] = np.asarray(model.Drop().apply(
      {'params': params}, x, rngs={'dropout': jax.random.PRNGKey(k)})).tolist()
again = model.Drop().apply({'params': params}, x,
                           rngs={'dropout': jax.random.PRNGKey(3)})
out['same_key_same_mask'] = bool((np.asarray(again)
                                  == np.asarray(out['drop3'])).all())
try:
  model.Drop().apply({'params': params}, x)
  out['no_dropout_stream'] = None
except Exception as e:  # pylint: disable=broad-except
  out['no_dropout_stream'] = type(e).__name__
gparams = model.Gate().init(jax.random.PRNGKey(0), x)['params']
out['gate'] = np.asarray(model.Gate().apply({'params': gparams}, x)).tolist()
out['gate_noisy'] = np.asarray(model.Gate().apply(
    {'params': gparams}, x, rngs={'dropout': jax.random.PRNGKey(3)})).tolist()
print(json.dumps(out))
'''


def _is_dropout_of(dropped, y, rate):
  """Each entry of ``dropped`` is 0 or the entry of ``y`` over 1 - rate,
  some of each (what dropout computes, whatever its key)."""
  dropped, y = np.asarray(dropped), np.asarray(y)
  kept = dropped != 0
  np.testing.assert_allclose(dropped[kept], y[kept] / (1.0 - rate),
                             rtol=1e-6)
  assert 0 < kept.sum() < kept.size


def test_upgraded_module_computes_what_legacy_did(tmp_path):
  """The LRA spelling, under the layer and upgraded (``FLAXLEGACY=off``).
  Linen draws its keys from the ``'dropout'`` stream, legacy from its own
  key counter, so the masks differ: what does not depend on the key is
  compared -- the deterministic output and the parameters, the dropout's
  kept entries (each is the deterministic one over 1 - rate), the gate
  with no key (``is_stochastic()`` False / no 'dropout' rng: no noise) --
  and the upgraded module draws from the 'dropout' stream (the same key,
  the same mask; another key, another; none, an error).  On main the
  upgraded module does not import (the legacy import stays)."""
  source = _by_name(SPELLINGS[0], alias=False)
  src, out, _ = upgrade_run.upgrade_dir(tmp_path, {'model.py': source})
  legacy = upgrade_run.run_json(src, LEGACY_RUN, off=False)
  upgraded = upgrade_run.run_json(out, UPGRADED_RUN, off=True)
  assert upgraded['paths'] == legacy['paths']
  np.testing.assert_allclose(upgraded['det'], legacy['det'], rtol=1e-6)
  for side in (legacy, upgraded):
    for k in (3, 4):
      _is_dropout_of(side[f'drop{k}'], side['det'], rate=0.5)
    assert side['drop3'] != side['drop4']
  assert upgraded['same_key_same_mask'] is True
  assert upgraded['no_dropout_stream'] is not None
  np.testing.assert_allclose(upgraded['gate'], legacy['gate'], rtol=1e-6)
  for side in (legacy, upgraded):
    assert not np.allclose(side['gate_noisy'], side['gate'])


OUTSIDE = '''
import jax
from flax.deprecated import nn
from flax.deprecated.nn.stochastic import make_rng


def attend(x, dropout_rng=None, rate=0.1):
  """A plain function a module calls (long-range-arena's attention)."""
  if dropout_rng is None:
    dropout_rng = make_rng()
  return x * jax.random.bernoulli(dropout_rng, 1.0 - rate, x.shape)


class Layer(nn.Module):

  def apply(self, x):
    noise = jax.random.normal(make_rng(), x.shape)
    return attend(x + noise)
'''


def test_use_outside_a_module_body_keeps_its_todo_and_the_import(tmp_path):
  """A plain function has no module to draw from: the legacy call stays
  with a TODO at that use, and the import stays with its TODO; the use in
  the module body is rewritten all the same.  On main there is no TODO at
  the use and the body's call stays legacy."""
  _, out, report = upgrade_run.upgrade_dir(tmp_path, {'m.py': OUTSIDE})
  text = (out / 'm.py').read_text()
  lines = text.splitlines()
  use = lines.index('    dropout_rng = make_rng()')
  assert lines[use - 1].strip().startswith('# ' + TODO), lines[use - 1]
  assert 'make_rng is the legacy flax.deprecated.nn.stochastic.make_rng' \
      in lines[use - 1]
  assert 'outside a module body' in lines[use - 1]
  imp = lines.index('from flax.deprecated.nn.stochastic import make_rng')
  assert lines[imp - 1].strip().startswith('# ' + TODO), lines[imp - 1]
  body = text.split('class Layer')[1]
  assert "jax.random.normal(self.make_rng('dropout'), x.shape)" in body, body
  assert TODO not in body, body
  left = sorted((e['line'], e['why'].split(' ')[0])
                for e in report['files']['m.py']['left'])
  assert left == [(4, 'flax.deprecated.nn.stochastic.make_rng'),
                  (10, 'make_rng')], left


def test_value_use_in_a_body_keeps_the_import(tmp_path):
  """The name passed as a value in a module body is no call to rewrite: a
  TODO there, and the import stays (the rewritten call beside it does not
  take the import away)."""
  source = textwrap.dedent('''
      import jax
      from flax import nn
      from flax.nn import make_rng


      class Layer(nn.Module):

        def apply(self, x, source=None):
          source = source or make_rng
          return x + jax.random.normal(make_rng(), x.shape)
      ''')
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, {'m.py': source})
  text = (out / 'm.py').read_text()
  lines = text.splitlines()
  use = [i for i, l in enumerate(lines) if 'source or make_rng' in l][0]
  assert 'in a module body, not as a plain call' in lines[use - 1], text
  assert 'from flax.nn import make_rng' in text, text
  assert "jax.random.normal(self.make_rng('dropout'), x.shape)" in text

