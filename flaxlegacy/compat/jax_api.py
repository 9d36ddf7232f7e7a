"""JAX API functions legacy programs called that today's JAX removed.

* ``device_put_sharded`` / ``device_put_replicated``: jax 0.10 keeps the
  names only to raise a deprecation AttributeError.  Legacy semantics: a
  leading axis of size ``len(devices)``, slice ``i`` on ``devices[i]``, per
  leaf of a pytree; the result is what ``pmap`` takes as a mapped input.
* ``custom_transforms`` with ``defjvp`` / ``defjvp_all`` / ``defvjp`` /
  ``defvjp_all`` (removed in jax 0.2.x), built on ``jax.custom_jvp`` and
  ``jax.custom_vjp``.
* ``flax.jax_utils._replicate`` / ``_is_omnistaging``: private names of
  legacy ``flax.jax_utils`` that code reached for.
"""

import collections.abc
import functools

import jax
import jax.numpy as jnp
import numpy as np

# --- device_put_sharded / device_put_replicated ----------------------------

_AXIS = '_device_put_sharded'


def _stacked_sharding(devices):
  mesh = jax.sharding.Mesh(np.array(list(devices)), (_AXIS,))
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(_AXIS))


def _assemble(slices, devices):
  """One array of leading axis ``len(devices)`` from per-device slices."""
  sharding = _stacked_sharding(devices)
  first = slices[0]
  shape = (len(devices),) + tuple(first.shape)
  buffers = [jax.device_put(s[None], d) for s, d in zip(slices, devices)]
  return jax.make_array_from_single_device_arrays(shape, sharding, buffers)


def device_put_sharded(shards, devices):
  """Legacy ``jax.device_put_sharded(shards, devices)``.

  ``shards`` is a sequence of ``len(devices)`` pytrees of the same structure
  whose leaves have the same shape and dtype; each leaf of the result stacks
  them along a new leading axis, slice ``i`` living on ``devices[i]``.
  """
  if not isinstance(shards, collections.abc.Sequence):
    raise TypeError('device_put_sharded `shards` input must be a sequence; '
                    f'got {type(shards)}')
  devices = list(devices)
  if len(shards) != len(devices):
    raise ValueError(f'len(shards) = {len(shards)} must equal '
                     f'len(devices) = {len(devices)}.')

  def stack(*xs):
    arrays = [x if isinstance(x, (np.ndarray, jax.Array)) else np.asarray(x)
              for x in xs]
    kinds = [(a.shape, np.dtype(a.dtype)) for a in arrays]
    for k1, k2 in zip(kinds[:-1], kinds[1:]):
      if k1 != k2:
        raise ValueError('the shards passed to device_put_sharded must have '
                         'consistent shape and dtype, but got '
                         f'{k1[1]}{list(k1[0])} and {k2[1]}{list(k2[0])}.')
    return _assemble(arrays, devices)

  return jax.tree_util.tree_map(stack, *shards)


def device_put_replicated(x, devices):
  """Legacy ``jax.device_put_replicated(x, devices)``: every leaf of ``x``
  broadcast along a new leading axis of size ``len(devices)``, one copy on
  each device."""
  if not isinstance(devices, collections.abc.Sequence) or not devices:
    raise ValueError('`devices` argument to `device_put_replicated must be '
                     'a non-empty sequence.')
  devices = list(devices)

  def replicate(leaf):
    array = leaf if isinstance(leaf, (np.ndarray, jax.Array)) else (
        np.asarray(leaf))
    return _assemble([array] * len(devices), devices)

  return jax.tree_util.tree_map(replicate, x)


# --- flax.jax_utils private names ------------------------------------------

_is_omnistaging = True  # pylint: disable=invalid-name


def _replicate(x, devices=None):
  """Legacy ``flax.jax_utils._replicate``: one array, as a JAX array, on
  each of ``devices`` (default: the local devices in pmap's order)."""
  x = jnp.asarray(x)
  if devices is None:
    devices = jax.local_devices()
  return device_put_sharded(len(devices) * [x], devices)


# --- custom_transforms ------------------------------------------------------


class CustomTransformsFunction:
  """What ``jax.custom_transforms(fun)`` returned.

  Calling it calls ``fun`` (positional arguments, pytrees allowed) until a
  rule is attached with ``defjvp_all`` / ``defjvp`` / ``defvjp_all`` /
  ``defvjp``; from then on JAX differentiates it with that rule (the last
  one attached wins, as before).  ``jit``, ``vmap`` and ``grad`` compose
  with it.
  """

  def __init__(self, fun):
    functools.update_wrapper(self, fun)
    self.fun = fun
    self._impl = fun

  def __call__(self, *args):
    return self._impl(*args)

  def __repr__(self):
    return f'<jax.custom_transforms function {getattr(self.fun, "__name__", self.fun)}>'

  def _positional(self):
    # custom_jvp / custom_vjp bind ``fun``'s signature and pass its default
    # arguments to the rules too; legacy rules got the call's positional
    # arguments only.
    # (No functools.wraps: its __wrapped__ would expose the signature.)
    fun = self.fun

    def positional(*args):
      return fun(*args)

    positional.__name__ = getattr(fun, '__name__', 'custom_transforms')
    return positional

  def _set_jvp_all(self, rule):
    impl = jax.custom_jvp(self._positional())
    impl.defjvp(lambda primals, tangents: rule(primals, tangents))
    self._impl = impl

  def _set_vjp_all(self, rule):
    # The vjp function ``rule`` returns is a closure, which custom_vjp cannot
    # carry as a residual; the residuals are the primal inputs and the
    # backward pass calls ``rule`` again on them to get the closure.  Under
    # jit the recomputed primal output is unused and removed by XLA.
    impl = jax.custom_vjp(self._positional())

    def fwd(*primals):
      ans, _ = rule(*primals)
      return ans, primals

    def bwd(primals, ct):
      _, vjp = rule(*primals)
      cts = vjp(ct)
      if not isinstance(cts, (tuple, list)):
        raise TypeError(
            'the vjp function returned by a defvjp_all rule must return a '
            f'tuple with one cotangent per positional argument, got {cts!r}')
      if len(cts) != len(primals):
        raise TypeError(
            f'the vjp function of a defvjp_all rule returned {len(cts)} '
            f'cotangents for a function of {len(primals)} positional '
            'arguments')
      return tuple(cts)  # None: a zero cotangent (custom_vjp's convention)

    impl.defvjp(fwd, bwd)
    self._impl = impl


def _zero_ct(primal):
  return jax.tree_util.tree_map(jnp.zeros_like, primal)


def _check(fun, what):
  if not isinstance(fun, CustomTransformsFunction):
    raise TypeError(f'{what} needs a function made by jax.custom_transforms, '
                    f'got {fun!r}')


def custom_transforms(fun):
  """Legacy ``jax.custom_transforms``: a function whose derivative rules can
  be set with ``jax.defjvp_all`` / ``defjvp`` / ``defvjp_all`` / ``defvjp``."""
  return CustomTransformsFunction(fun)


def defjvp_all(fun, custom_jvp):
  """``custom_jvp(primals, tangents) -> (primal_out, tangent_out)``."""
  _check(fun, 'defjvp_all')
  fun._set_jvp_all(custom_jvp)  # pylint: disable=protected-access


def defjvp(fun, *jvprules):
  """One rule per positional argument, ``rule(g, ans, *primals)`` giving
  that argument's contribution to the output tangent (None: none)."""
  _check(fun, 'defjvp')

  def custom_jvp(primals, tangents):
    ans = fun.fun(*primals)
    if len(jvprules) != len(primals):
      raise TypeError(f'defjvp got {len(jvprules)} rules for a function '
                      f'called with {len(primals)} positional arguments')
    out = None
    for rule, t in zip(jvprules, tangents):
      if rule is None:
        continue
      term = rule(t, ans, *primals)
      out = term if out is None else jax.tree_util.tree_map(
          jnp.add, out, term)
    if out is None:
      out = _zero_ct(ans)
    return ans, out

  fun._set_jvp_all(custom_jvp)  # pylint: disable=protected-access


def defvjp_all(fun, custom_vjp):
  """``custom_vjp(*primals) -> (primal_out, vjp)`` with ``vjp(g)`` the tuple
  of cotangents, one per positional argument."""
  _check(fun, 'defvjp_all')
  fun._set_vjp_all(custom_vjp)  # pylint: disable=protected-access


def defvjp(fun, *vjprules):
  """One rule per positional argument, ``rule(g, ans, *primals)`` giving that
  argument's cotangent (None: a zero cotangent)."""
  _check(fun, 'defvjp')

  def custom_vjp(*primals):
    if len(vjprules) != len(primals):
      raise TypeError(f'defvjp got {len(vjprules)} rules for a function '
                      f'called with {len(primals)} positional arguments')
    ans = fun.fun(*primals)

    def vjp(g):
      return tuple(None if rule is None else rule(g, ans, *primals)
                   for rule in vjprules)

    return ans, vjp

  fun._set_vjp_all(custom_vjp)  # pylint: disable=protected-access
