"""Issue 28: legacy ``jax.custom_transforms`` functions and rules that close
over traced values (the Reformer's sort permutation closes over its sort
keys), under ``jit``, ``vmap``, ``grad`` and their compositions.

The basic custom_transforms tests (rules, errors, the Reformer permutation
with constant keys) are in test_removed_names.py.  The legacy programs here
run unchanged in a fresh activated interpreter, as a 2020 user wrote them,
and print one line per case: name, max |got - want|, max |want|.
"""

import pytest

from tests.test_removed_names import run_python

# The sort-based permutation of the Reformer's LSH attention, as written in
# 2020 code, plus a ``scale`` factor on the rule's cotangent: with scale 3
# the gradient is 3x autodiff's, which shows the custom rule is the one used.
# The sort keys are computed per example inside a vmapped attention from
# the differentiated input (hash buckets, as LSH does), so they are
# BatchTracers (and jit / linearize tracers under jit and grad) that both
# permute_impl and the vjp closure close over.
REFORMER_TRACED_KEYS = '''
    import jax, jax.numpy as jnp, numpy as np

    def permute_via_sort(val, keys, inverse_keys, axis=0, scale=1.0):
      keys = jax.lax.stop_gradient(keys)
      inverse_keys = jax.lax.stop_gradient(inverse_keys)
      def permute_impl(val):
        _, permuted = jax.lax.sort_key_val(keys, val, dimension=axis)
        return permuted
      def permute_vjp(val):
        permuted = permute_impl(jax.lax.stop_gradient(val))
        def vjpfun(permuted_grad):
          _, val_grad = jax.lax.sort_key_val(
              inverse_keys, permuted_grad, dimension=axis)
          return (scale * val_grad,)
        return permuted, vjpfun
      permute = jax.custom_transforms(permute_impl)
      jax.defvjp_all(permute, permute_vjp)
      return permute(val)

    n, d = 8, 4
    rng = np.random.RandomState(0)
    val = rng.randn(3, n, d).astype(np.float32)
    w = rng.randn(3, n, d).astype(np.float32)
    rot = rng.randn(d, 2).astype(np.float32)

    def sort_keys(x):
      rotated = x @ rot
      buckets = jnp.argmax(jnp.concatenate([rotated, -rotated], -1), -1)
      keys = buckets * n + jnp.arange(n)  # distinct: bucket, then position
      return jnp.broadcast_to(keys[:, None], x.shape)  # sort_key_val's shape

    def attend(x, scale):
      keys = sort_keys(x)
      sx = permute_via_sort(x, keys, jnp.argsort(keys, axis=0), axis=0,
                            scale=scale)
      return jnp.tanh(sx)

    def attend_plain(x):
      return jnp.tanh(jax.lax.sort_key_val(sort_keys(x), x, dimension=0)[1])

    def loss(v, scale=1.0):
      return jnp.sum(jax.vmap(lambda x: attend(x, scale))(v) * w)

    def loss_plain(v):
      return jnp.sum(jax.vmap(attend_plain)(v) * w)

    def one(x, wx, scale=1.0):
      return jnp.sum(attend(x, scale) * wx)

    def one_plain(x, wx):
      return jnp.sum(attend_plain(x) * wx)

    want = jax.grad(loss_plain)(val)
    results = {
        'jit_grad_vmap': (jax.jit(jax.grad(loss))(val), want),
        'jit_grad_vmap_scaled': (
            jax.jit(jax.grad(lambda v: loss(v, 3.0)))(val), 3.0 * want),
        'grad_vmap': (jax.grad(loss)(val), want),
        'grad_jit_vmap': (jax.grad(jax.jit(loss))(val), want),
        'vmap_grad': (jax.vmap(jax.grad(one))(val, w), want),
        'jit_vmap_grad_scaled': (
            jax.jit(jax.vmap(jax.grad(lambda x, wx: one(x, wx, 3.0))))(val, w),
            3.0 * want),
        'value_jit_vmap': (jax.jit(loss)(val), loss_plain(val)),
        'keys_differ': (jax.vmap(sort_keys)(val)[0],
                        jax.vmap(sort_keys)(val)[1]),
    }
    for name, (got, want_) in results.items():
      print(name, float(np.max(np.abs(np.asarray(got) - np.asarray(want_)))),
            float(np.max(np.abs(np.asarray(want_)))))
'''


def _check(out, names):
  assert [line.split()[0] for line in out] == names
  for line in out:
    name, diff, scale = line.split()
    if name == 'keys_differ':
      # The examples' sort keys differ, so a rule that used one example's
      # keys for all (a batching mistake) would be caught.
      assert float(diff) > 0, line
      continue
    # Permutations do not round, and a scale of 3 multiplies the same
    # values on both sides: measured difference 0 on CPU; the bound leaves
    # a few ulp for another compiler's fusion of tanh', while a wrong
    # permutation, autodiff's gradient instead of the rule's (a factor 3)
    # or a lost cotangent is off by O(1).
    assert float(diff) <= 1e-6 * float(scale), line
    assert float(scale) > 0.1, line


def test_reformer_sort_permutation_with_traced_keys_under_vmap_jit_grad():
  out = run_python(REFORMER_TRACED_KEYS, legacy=True)
  _check(out, ['jit_grad_vmap', 'jit_grad_vmap_scaled', 'grad_vmap',
               'grad_jit_vmap', 'vmap_grad', 'jit_vmap_grad_scaled',
               'value_jit_vmap', 'keys_differ'])


# The same permutation with forward-mode rules (defjvp_all, defjvp): the
# tangent is gathered in the order of the closed-over traced keys, times
# ``scale``; the keys are vmapped inputs.
JVP_TRACED_KEYS = '''
    import jax, jax.numpy as jnp, numpy as np

    def permute_jvp_all(val, keys, scale=1.0):
      keys = jax.lax.stop_gradient(keys)
      def permute_impl(val):
        return jax.lax.sort_key_val(keys, val, dimension=0)[1]
      order = jnp.argsort(keys, axis=0)
      def permute_jvp(primals, tangents):
        # A gather: linear and transposable (a sort is not), so grad works.
        return (permute_impl(primals[0]),
                scale * jnp.take_along_axis(tangents[0], order, axis=0))
      permute = jax.custom_transforms(permute_impl)
      jax.defjvp_all(permute, permute_jvp)
      return permute(val)

    def permute_defjvp(val, keys, scale=1.0):
      keys = jax.lax.stop_gradient(keys)
      def permute_impl(val):
        return jax.lax.sort_key_val(keys, val, dimension=0)[1]
      order = jnp.argsort(keys, axis=0)
      permute = jax.custom_transforms(permute_impl)
      jax.defjvp(permute, lambda g, ans, val: scale * jnp.take_along_axis(
          g, order, axis=0))
      return permute(val)

    n, d = 8, 4
    rng = np.random.RandomState(1)
    val = rng.randn(3, n, d).astype(np.float32)
    w = rng.randn(3, n, d).astype(np.float32)
    tan = rng.randn(3, n, d).astype(np.float32)
    # Per example and column, a permutation of the n positions.
    keys = np.stack([np.stack([rng.permutation(n) for _ in range(d)], 1)
                     for _ in range(3)])

    def loss(permute, scale=1.0):
      def per_example(x, k):
        return jnp.tanh(permute(x, k, scale))
      return lambda v, k: jnp.sum(jax.vmap(per_example)(v, k) * w)

    def loss_plain(v, k):
      return jnp.sum(jax.vmap(lambda x, kx: jnp.tanh(
          jax.lax.sort_key_val(kx, x, dimension=0)[1]))(v, k) * w)

    def forward(permute, scale=1.0):
      return lambda v, k: jax.vmap(lambda x, kx: permute(x, kx, scale))(v, k)

    def forward_plain(v, k):
      return jax.vmap(lambda x, kx: jax.lax.sort_key_val(kx, x, 0)[1])(v, k)

    want = jax.grad(loss_plain)(val, keys)
    want_t = jax.jvp(lambda v: forward_plain(v, keys), (val,), (tan,))[1]
    results = {}
    for name, permute in [('jvp_all', permute_jvp_all),
                          ('defjvp', permute_defjvp)]:
      results.update({
          name + '_jit_grad_vmap': (
              jax.jit(jax.grad(loss(permute)))(val, keys), want),
          name + '_jit_grad_vmap_scaled': (
              jax.jit(jax.grad(loss(permute, 3.0)))(val, keys), 3.0 * want),
          name + '_grad_jit_vmap': (
              jax.grad(jax.jit(loss(permute)))(val, keys), want),
          name + '_vmap_jit_grad': (
              jax.vmap(jax.jit(jax.grad(
                  lambda x, kx, wx: jnp.sum(jnp.tanh(permute(x, kx)) * wx))))(
                      val, keys, w),
              want),
          name + '_jit_jvp_scaled': (
              jax.jit(lambda v, t, k: jax.jvp(
                  lambda u: forward(permute, 3.0)(u, k), (v,), (t,))[1])(
                      val, tan, keys),
              3.0 * want_t),
      })
    for name, (got, want_) in results.items():
      print(name, float(np.max(np.abs(np.asarray(got) - np.asarray(want_)))),
            float(np.max(np.abs(np.asarray(want_)))))
'''


def test_defjvp_all_and_defjvp_with_traced_closed_over_keys():
  out = run_python(JVP_TRACED_KEYS, legacy=True)
  names = []
  for rule in ('jvp_all', 'defjvp'):
    names += [rule + case for case in (
        '_jit_grad_vmap', '_jit_grad_vmap_scaled', '_grad_jit_vmap',
        '_vmap_jit_grad', '_jit_jvp_scaled')]
  _check(out, names)


# --- in-process: errors ------------------------------------------------------


def _ct():
  from flaxlegacy.compat import jax_api  # pylint: disable=g-import-not-at-top
  return jax_api


def test_differentiating_a_closed_over_value_is_an_error():
  """The rule differentiates positional arguments only; legacy raised this
  for JVP rules, and a zero gradient for ``w`` would be silently wrong."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  ct = _ct()

  def vjp_scaled(x, w):
    f = ct.custom_transforms(lambda v: v * w)
    ct.defvjp_all(f, lambda v: (v * w, lambda g: (g * w,)))
    return f(x)

  def jvp_scaled(x, w):
    f = ct.custom_transforms(lambda v: v * w)
    ct.defjvp_all(f, lambda p, t: (p[0] * w, t[0] * w))
    return f(x)

  for fn, kind in ((vjp_scaled, 'VJP'), (jvp_scaled, 'JVP')):
    # With respect to the argument: fine, under jit and vmap too.
    assert float(jax.jit(jax.grad(fn))(2.0, 5.0)) == 5.0
    assert jax.vmap(jax.grad(fn))(jnp.ones(2), jnp.array([3.0, 4.0])).tolist(
        ) == [3.0, 4.0]
    for transform in (jax.grad, lambda g, **kw: jax.jit(jax.grad(g, **kw))):
      with pytest.raises(ValueError, match=(
          'Detected differentiation with respect to closed-over values with '
          f'custom {kind} rule.*function <lambda> is differentiated with '
          'respect to a value it closes over')):
        transform(fn, argnums=1)(2.0, 5.0)
    # A closed-over value behind stop_gradient is not differentiated.
    assert float(jax.grad(
        lambda w: fn(2.0, jax.lax.stop_gradient(w)) + w)(5.0)) == 1.0


def test_rule_errors_with_traced_closures_surface_when_differentiating():
  """A rule's own mistake is raised under grad, not when merely called, and
  not hidden behind a leaked-tracer error."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  ct = _ct()

  def too_few(x, y, w):
    f = ct.custom_transforms(lambda a, b: a * b * w)
    ct.defvjp_all(f, lambda a, b: (a * b * w, lambda g: (g * b * w,)))
    return f(x, y)

  ones = jnp.ones(3)
  assert jax.jit(jax.vmap(too_few))(ones, 2 * ones, 3 * ones).tolist() == [
      6.0, 6.0, 6.0]
  with pytest.raises(TypeError, match='returned 1 cotangents for a function '
                     'of 2 positional arguments'):
    jax.vmap(jax.grad(too_few))(ones, ones, ones)

  def not_a_tuple(x, w):
    f = ct.custom_transforms(lambda a: a * w)
    ct.defvjp_all(f, lambda a: (a * w, lambda g: g * w))
    return f(x)

  assert jax.vmap(not_a_tuple)(ones, ones).tolist() == [1.0, 1.0, 1.0]
  with pytest.raises(TypeError, match='must return a tuple with one '
                     'cotangent per positional argument'):
    jax.jit(jax.vmap(jax.grad(not_a_tuple)))(ones, ones)


def test_value_dependent_rule_in_an_eager_call_keeps_working():
  """Without traced closures a rule still runs on concrete values in an
  eager grad (Python control flow on them), as before."""
  import jax  # pylint: disable=g-import-not-at-top
  ct = _ct()
  f = ct.custom_transforms(lambda x: 2.0 * x)

  def rule(x):
    sign = 1.0 if x > 0 else -1.0
    return 2.0 * x, lambda g: (sign * 100.0 * g,)

  ct.defvjp_all(f, rule)
  assert float(jax.grad(f)(1.0)) == 100.0
  assert float(jax.grad(f)(-1.0)) == -100.0


def test_hoisted_tracers_are_not_kept_after_the_call():
  """The rules outlive the call (in jaxprs); JAX's leak checker would flag
  a closed-over tracer they still held."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  ct = _ct()

  def vjp_permute(x, k):
    f = ct.custom_transforms(lambda v: jax.lax.sort_key_val(k, v)[1])
    ct.defvjp_all(f, lambda v: (f.fun(v), lambda g: (2.0 * jax.lax.sort_key_val(
        jnp.argsort(k), g)[1],)))
    return f(x)

  def jvp_scaled(x, c):
    f = ct.custom_transforms(lambda v: v * c)
    ct.defjvp_all(f, lambda p, t: (p[0] * c, 2.0 * t[0] * c))
    return f(x)

  x = jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
  k = jnp.array([[2, 0, 1], [0, 1, 2]])
  with jax.checking_leaks():
    for fn, other in ((vjp_permute, k), (jvp_scaled, 3.0 * k)):
      for transform in (lambda g: jax.jit(jax.grad(g)),
                        lambda g: jax.grad(jax.jit(g))):
        got = transform(lambda v: jnp.sum(jax.vmap(fn)(v, other) ** 2))(x)
        # d/dv sum(P(v)^2) through the rule: 2 * P^-1(2 P(v)) = 4 v for
        # the permutation; 2 * (2 c) * (v c) = 4 c^2 v for the scaling
        # (small integers: exact in float32).
        want = 4.0 * x if fn is vjp_permute else 4.0 * other ** 2 * x
        assert jnp.array_equal(got, want), (fn, got)
