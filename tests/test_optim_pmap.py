"""Data parallelism with flax.optim on 8 host devices (run in a subprocess,
since the device count is fixed when JAX starts).

* ``Optimizer.replicate()`` (all legacy versions): a ReplicatedOptimizer
  that averages the gradients over the pmap axis inside apply_gradient;
  its state dict stores one replica and restore re-replicates.
* ``jax_utils.replicate(optimizer)`` (the later style): plain replication,
  the user averages with ``lax.pmean``.
"""

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    from flax import jax_utils, serialization
    from flax import optim
    assert jax.local_device_count() == 8
    params = {'w': jnp.arange(3.), 'b': jnp.ones(())}
    # per-device gradients 0..7 -> mean 3.5
    grads = jax.tree_util.tree_map(
        lambda p: jnp.stack([jnp.full(p.shape, float(i)) for i in range(8)]),
        params)
    expect = optim.Momentum(0.1).create(params).apply_gradient(
        jax.tree_util.tree_map(lambda g: g.mean(0), grads))

    # 1. Optimizer.replicate(): averaging inside apply_gradient.
    rep = optim.Momentum(0.1).create(params).replicate()
    step = jax.pmap(lambda o, g: o.apply_gradient(g), axis_name='batch')
    rep = step(rep, grads)
    for d in range(8):
      np.testing.assert_allclose(rep.target['w'][d], expect.target['w'],
                                 rtol=1e-6)
    sd = serialization.to_state_dict(rep)
    assert sd['target']['w'].shape == (3,)
    assert sd['state']['param_states']['w']['momentum'].shape == (3,)
    restored = serialization.from_bytes(rep, serialization.to_bytes(rep))
    assert restored.target['w'].shape == (8, 3)
    assert isinstance(restored.optimizer_def, optim.ReplicatedOptimizer)
    back = rep.unreplicate()
    assert back.optimizer_def is rep.optimizer_def.optimizer_def
    np.testing.assert_allclose(back.target['w'], expect.target['w'],
                               rtol=1e-6)
    assert int(back.state.step) == 1

    # The averaging lowers to the program of an explicit lax.pmean step
    # (same operations in the same order), so it costs the same.
    import re
    def ops(fn, opt):
      text = jax.pmap(fn, axis_name='batch').lower(opt, grads).as_text()
      return re.findall(r'stablehlo\\.[a-z_]+', text)
    replicated = ops(lambda o, g: o.apply_gradient(g),
                     optim.Momentum(0.1).create(params).replicate())
    explicit = ops(lambda o, g: o.apply_gradient(jax.lax.pmean(g, 'batch')),
                   jax_utils.replicate(optim.Momentum(0.1).create(params)))
    assert replicated.count('stablehlo.all_reduce') == 2, replicated
    assert replicated == explicit, (replicated, explicit)

    # A subclass's own _cross_replica_mean is still called per leaf.
    class Halved(optim.ReplicatedOptimizer):
      def _cross_replica_mean(self, grad):
        return super()._cross_replica_mean(grad) / 2
    rep = optim.Momentum(0.1).create(params).replicate()
    rep = rep.replace(optimizer_def=Halved(rep.optimizer_def.optimizer_def))
    rep = step(rep, grads)
    np.testing.assert_allclose(rep.target['w'][0],
                               params['w'] - 0.1 * 3.5 / 2, rtol=1e-6)

    # optimize() inside pmap with a per-call learning rate (mnist example).
    rep = optim.Momentum(0.1).create(params).replicate()
    def p_step(o, x, lr):
      return o.optimize(lambda t: jnp.sum(t['w'] * x) + t['b'],
                        learning_rate=lr)
    x = jnp.stack([jnp.full((3,), float(i)) for i in range(8)])
    rep, loss = jax.pmap(p_step, axis_name='batch')(rep, x, jnp.full(8, 0.2))
    np.testing.assert_allclose(rep.target['w'][5],
                               params['w'] - 0.2 * 3.5, rtol=1e-6)

    # Multi-axis names: the replicated definition uses its own axis name.
    rep = optim.Adam(0.1).create(params).replicate(axis_name='data')
    rep = jax.pmap(lambda o, g: o.apply_gradient(g), axis_name='data')(
        rep, grads)
    ref = optim.Adam(0.1).create(params).apply_gradient(
        jax.tree_util.tree_map(lambda g: g.mean(0), grads))
    np.testing.assert_allclose(rep.target['w'][0], ref.target['w'],
                               rtol=1e-6)

    # 2. jax_utils.replicate(optimizer): no averaging by the optimizer.
    plain = jax_utils.replicate(optim.Momentum(0.1).create(params))
    plain = jax.pmap(lambda o, g: o.apply_gradient(g), axis_name='batch')(
        plain, grads)
    np.testing.assert_allclose(plain.target['w'][7],
                               params['w'] - 0.1 * 7., rtol=1e-6)
    plain = jax_utils.replicate(optim.Momentum(0.1).create(params))
    plain = jax.pmap(lambda o, g: o.apply_gradient(
        jax.lax.pmean(g, 'batch')), axis_name='batch')(plain, grads)
    np.testing.assert_allclose(plain.target['w'][7], expect.target['w'],
                               rtol=1e-6)
    print('PMAP-OK')
""")


def test_replicated_optimizers_on_8_devices():
  env = dict(os.environ, JAX_PLATFORMS='cpu',
             XLA_FLAGS='--xla_force_host_platform_device_count=8')
  proc = subprocess.run([sys.executable, '-c', SCRIPT], env=env,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert 'PMAP-OK' in proc.stdout
