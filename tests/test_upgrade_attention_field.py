"""flaxlegacy upgrade: a legacy attention class reaching its call through a
hyper-parameter (``self_attention_module=nn.SelfAttention``, optionally
``self_attention_module.partial(attention_fn=...)`` in the body): the
Transformer blocks of 2020 language models did this.

Before, the call ``self_attention_module(x, num_heads=...)`` was left as it
was, without a TODO, and linen's ``SelfAttention`` refused it at run time
(``got multiple values for 'num_heads'``).  Now it is the linen attention
rewrite behind a run-time check that the field holds its default
(``legacy_attention_default``: a value given by a caller or a gin binding
the upgrade cannot see raises instead of running the wrong module); the
``.partial(attention_fn=...)`` keeps its keywords for that call
(``legacy_attention_partial``, mapped to linen's fields when it runs); a body or codebase that gives
the field another value keeps a TODO at the call.
"""

import textwrap

import numpy as np

from tests.test_upgrade_port import _run_both
from tests.test_upgrade_port import _upgrade_dir

TODO = '# TODO(flaxlegacy upgrade)'

MODULES = '''\
    import jax.numpy as jnp
    from flax import nn


    class Block(nn.Module):

      def apply(self, inputs, num_heads, causal_mask=False,
                self_attention_module=nn.SelfAttention, attention_fn=None):
        x = nn.LayerNorm(inputs)
        if attention_fn is not None:
          self_attention_module = self_attention_module.partial(
              attention_fn=attention_fn)
        x = self_attention_module(
            x,
            num_heads=num_heads,
            qkv_features=8,
            attention_axis=(1,),
            causal_mask=causal_mask,
            bias=False)
        return x + inputs


    class Net(nn.Module):

      def apply(self, x, causal=True, self_attention_module=nn.SelfAttention,
                attention_fn=None):
        x = nn.Dense(x, 8)
        return Block(x, num_heads=2, causal_mask=causal,
                     self_attention_module=self_attention_module,
                     attention_fn=attention_fn)
    '''

DRIVE = '''\
    import json, os
    import jax, jax.numpy as jnp, numpy as np
    import modules

    def fill(params):
      leaves, tree = jax.tree_util.tree_flatten(params)
      new = [jnp.asarray(np.random.RandomState(k).normal(size=x.shape),
                         jnp.float32) for k, x in enumerate(leaves)]
      return jax.tree_util.tree_unflatten(tree, new)

    x = jnp.asarray(np.random.RandomState(9).normal(size=(2, 5, 3)),
                    jnp.float32)
    out = {}
    if os.environ.get('FLAXLEGACY') == 'off':
      params = fill(modules.Net().init(jax.random.PRNGKey(0), x)['params'])
      y = modules.Net().apply({'params': params}, x)
      from flax import linen
      try:
        modules.Net(self_attention_module=linen.Dense).apply(
            {'params': params}, x)
      except NotImplementedError as e:
        out['other'] = str(e)
    else:
      _, params = modules.Net.init(jax.random.PRNGKey(0), x)
      params = fill(params)
      y = modules.Net.call(params, x)
    out['names'] = sorted(params['Block_1'])
    out['y'] = np.asarray(y).tolist()
    print(json.dumps(out))
    '''


def test_attention_field_source(tmp_path):
  _, out, status, _ = _upgrade_dir(tmp_path, {'modules.py': MODULES})
  assert status == 0
  text = (out / 'modules.py').read_text()
  assert ("x = legacy_attention_default(self, 'self_attention_module', "
          'self_attention_module, nn.MultiHeadDotProductAttention)(') in text
  assert "name='MultiHeadDotProductAttention_1')(x, mask=legacy_attention_mask(" in text
  assert 'use_bias=False' in text
  # the .partial(attention_fn=...): its keywords kept for the call (the
  # field's default keeps the TODO it had: a value of the legacy class)
  # (Block's and Net's)
  assert text.count(TODO) == text.count(
      f'{TODO}: nn.SelfAttention: attention axes') == 2, text
  call = text.index('self_attention_module = legacy_attention_partial(\n')
  assert text[call:].split('\n')[1].strip() == (
      'self_attention_module, attention_fn=self.attention_fn)'), text
  assert 'legacy_attention_default' in (out / 'legacy_helpers.py').read_text()


def test_attention_field_numbers(tmp_path):
  """Same parameters on both sides (the trees line up): outputs within
  float32 rounding (1e-5, measured ~1e-7); another module in the field
  raises."""
  legacy, upgraded, _ = _run_both(tmp_path, {'modules.py': MODULES}, DRIVE)
  assert upgraded['names'] == legacy['names'] == [
      'LayerNorm_0', 'MultiHeadDotProductAttention_1']
  np.testing.assert_allclose(upgraded['y'], legacy['y'], rtol=1e-5,
                             atol=1e-5)
  assert 'Block.self_attention_module holds' in upgraded['other']
  assert 'port this call by hand' in upgraded['other']


def test_attention_field_rebound_keeps_a_todo(tmp_path):
  src = MODULES.replace('''\
        if attention_fn is not None:
          self_attention_module = self_attention_module.partial(
              attention_fn=attention_fn)''', '''\
        if attention_fn is not None:
          self_attention_module = attention_fn''')
  _, out, status, _ = _upgrade_dir(tmp_path, {'modules.py': src})
  assert status == 0
  text = (out / 'modules.py').read_text()
  assert 'legacy_attention_default' not in text
  assert (f"{TODO}: 'self_attention_module' defaults to legacy "
          'SelfAttention, but the body binds it to another value') in text


def test_attention_field_given_a_module_keeps_a_todo(tmp_path):
  src = textwrap.dedent(MODULES) + textwrap.dedent('''\


      class Mine(nn.Module):

        def apply(self, x, num_heads=1, **kwargs):
          return nn.Dense(x, x.shape[-1])


      class Other(nn.Module):

        def apply(self, x):
          return Block(x, num_heads=2, self_attention_module=Mine)
      ''')
  _, out, status, _ = _upgrade_dir(tmp_path, {'modules.py': src})
  assert status == 0
  text = (out / 'modules.py').read_text()
  assert 'legacy_attention_default' not in text
  # the TODO of a field holding module classes (rules/aliases.py) or ours
  call = text.index('    x = self_attention_module(\n')
  assert text.rfind(TODO, 0, call) > text.rfind('\n    x = nn.LayerNorm',
                                                0, call)


# The field's .partial(attention_fn=f): the keywords are kept for the call
# (legacy_attention_partial), which maps them to linen's fields when it
# runs; f keeps legacy's interface (legacy_attention_fn).
MODULES_FN = textwrap.dedent(MODULES) + textwrap.dedent('''\


    def halved_attention(query, key, value, dtype=jnp.float32, bias=None,
                         axis=None, broadcast_dropout=True, dropout_rng=None,
                         dropout_rate=0., deterministic=False,
                         precision=None):
      logits = jnp.einsum('bqhd,bkhd->bhqk', query, key) / 2.
      if bias is not None:
        logits = logits + bias
      weights = jnp.exp(logits - logits.max(-1, keepdims=True))
      weights = weights / weights.sum(-1, keepdims=True)
      return jnp.einsum('bhqk,bkhd->bqhd', weights.astype(dtype), value)


    class NetFn(nn.Module):

      def apply(self, x):
        x = nn.Dense(x, 8)
        return Block(x, num_heads=2, causal_mask=True,
                     attention_fn=halved_attention)
    ''')


def test_attention_field_partial_source(tmp_path):
  _, out, status, _ = _upgrade_dir(tmp_path, {'modules.py': MODULES_FN})
  assert status == 0
  text = (out / 'modules.py').read_text()
  # the fields' defaults, as above
  assert text.count(TODO) == text.count(
      f'{TODO}: nn.SelfAttention: attention axes') == 2, text
  assert 'self_attention_module = legacy_attention_partial(' in text
  helpers = (out / 'legacy_helpers.py').read_text()
  assert 'def legacy_attention_partial' in helpers
  assert 'def legacy_attention_fn' in helpers


def test_attention_field_partial_numbers(tmp_path):
  """The function given through the partial runs inside linen's attention
  with legacy's keywords: the same outputs as legacy (1e-5, float32
  rounding, as above)."""
  drive = DRIVE.replace('modules.Net()', 'modules.NetFn()').replace(
      'modules.Net.', 'modules.NetFn.')
  legacy, upgraded, _ = _run_both(tmp_path, {'modules.py': MODULES_FN},
                                  drive)
  assert upgraded['names'] == legacy['names'] == [
      'LayerNorm_0', 'MultiHeadDotProductAttention_1']
  np.testing.assert_allclose(upgraded['y'], legacy['y'], rtol=1e-5,
                             atol=1e-5)
