"""JAX API functions legacy programs called that today's JAX removed.

* ``device_put_sharded`` / ``device_put_replicated``: jax 0.10 keeps the
  names only to raise a deprecation AttributeError.  Legacy semantics: a
  leading axis of size ``len(devices)``, slice ``i`` on ``devices[i]``, per
  leaf of a pytree; the result is what ``pmap`` takes as a mapped input.
* ``custom_transforms`` with ``defjvp`` / ``defjvp_all`` / ``defvjp`` /
  ``defvjp_all`` (removed in jax 0.2.x), built on ``jax.custom_jvp`` and
  ``jax.custom_vjp``; the function and its rule may close over tracers of
  an enclosing ``jit`` / ``vmap`` / ``grad``, as legacy allowed.
* ``flax.jax_utils._replicate`` / ``_is_omnistaging``: private names of
  legacy ``flax.jax_utils`` that code reached for.
"""

import collections.abc
import functools

import jax
import jax.extend.core  # pylint: disable=unused-import
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
#
# Legacy functions and rules could close over tracers of an enclosing jit,
# vmap or grad (the Reformer's sort permutation closes over its sort keys).
# custom_vjp / custom_jvp trace their rules in another scope, where such
# tracers are dead, so each call first traces the function and its rule at
# the call's shapes (jax.make_jaxpr), hoists the tracers they closed over
# into explicit arguments, and evaluates the traced jaxprs on them.  Like
# legacy JAX, the custom rule differentiates the positional arguments only:
# a hoisted value gets no tangent / cotangent through the rule, and
# differentiating with respect to one is an error (legacy raised it for
# JVP rules).  A call that closes over no tracer keeps the direct
# custom_jvp / custom_vjp path, as does one whose function or rule cannot be
# traced ahead at abstract shapes (Python control flow on values in an
# eager call; a rule's own error, raised where the direct path raises it).


class _Traced:
  """``fn(*inputs)`` traced at the inputs' shapes: its jaxpr, the tracers
  of enclosing transformations it closed over, and a way to evaluate it
  with those tracers passed in."""

  def __init__(self, fn, *inputs):
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*inputs)
    self.jaxpr = closed.jaxpr
    self.consts = list(closed.consts)
    self.slots = [i for i, c in enumerate(self.consts)
                  if isinstance(c, jax.core.Tracer)]
    # The tracers until _hoist takes them: kept no longer, since this
    # object lives on in custom_jvp / custom_vjp rules (and JAX's leak
    # checker would flag them).
    self.closed_over = [self.consts[i] for i in self.slots]
    for i in self.slots:
      self.consts[i] = None
    self.out_shape = out_shape
    self.out_tree = jax.tree_util.tree_structure(out_shape)
    self.index = None

  def __call__(self, hoisted, *inputs):
    consts = list(self.consts)
    for slot, k in zip(self.slots, self.index):
      consts[slot] = hoisted[k]
    fn = jax.extend.core.jaxpr_as_fun(
        jax.extend.core.ClosedJaxpr(self.jaxpr, consts))
    out = fn(*jax.tree_util.tree_leaves(inputs))
    return jax.tree_util.tree_unflatten(self.out_tree, out)


def _hoist(*traced):
  """The distinct tracers the ``traced`` functions closed over (each
  ``_Traced`` learns where its own are in the list)."""
  hoisted, position = [], {}
  for t in traced:
    t.index = []
    for c in t.closed_over:
      if id(c) not in position:
        position[id(c)] = len(hoisted)
        hoisted.append(c)
      t.index.append(position[id(c)])
    t.closed_over = None
  return hoisted


def _trace_rule(closes_over, rule, *inputs):
  """``(_Traced(rule, *inputs), None)``, or ``(None, error)`` when tracing
  the rule raised and ``closes_over`` (the function's own hoisted tracers)
  is not empty: the error is raised where the rule would have run, when
  differentiating.  Without hoisted tracers the error propagates and the
  call takes the direct path."""
  try:
    return _Traced(rule, *inputs), None
  except Exception as e:  # pylint: disable=broad-except
    if not closes_over:
      raise
    return None, e


def _tangent_struct(x):
  """The tangent (or cotangent) shape of a primal value or ShapeDtypeStruct:
  the same dtype for inexact types, float0 otherwise (what custom_jvp /
  custom_vjp give rules for integer values)."""
  aval = x if isinstance(x, jax.ShapeDtypeStruct) else jax.typeof(x)
  if not jnp.issubdtype(aval.dtype, jnp.inexact):
    return jax.ShapeDtypeStruct(aval.shape, jax.dtypes.float0)
  return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def _instantiate(t):
  """A symbolic zero tangent as an array (rules expect arrays)."""
  if not isinstance(t, jax.custom_derivatives.SymbolicZero):
    return t
  if t.dtype == jax.dtypes.float0:
    return np.zeros(t.shape, jax.dtypes.float0)
  return jnp.zeros(t.shape, t.dtype)


def _name(fun):
  return getattr(fun, '__name__', 'custom_transforms')


def _closed_over_error(name, kind):
  return ValueError(
      'Detected differentiation with respect to closed-over values with '
      f'custom {kind} rule, which isn\'t supported: jax.custom_transforms '
      f'function {name} is differentiated with respect to a value it closes '
      'over; its rule only differentiates its positional arguments. Pass '
      'that value as an argument, or wrap it in jax.lax.stop_gradient.')


def _cotangents(cts, num_args):
  """Check what a defvjp_all rule's vjp function returned."""
  if not isinstance(cts, (tuple, list)):
    raise TypeError(
        'the vjp function returned by a defvjp_all rule must return a '
        f'tuple with one cotangent per positional argument, got {cts!r}')
  if len(cts) != num_args:
    raise TypeError(
        f'the vjp function of a defvjp_all rule returned {len(cts)} '
        f'cotangents for a function of {num_args} positional arguments')
  return tuple(cts)  # None: a zero cotangent (custom_vjp's convention)


class CustomTransformsFunction:
  """What ``jax.custom_transforms(fun)`` returned.

  Calling it calls ``fun`` (positional arguments, pytrees allowed) until a
  rule is attached with ``defjvp_all`` / ``defjvp`` / ``defvjp_all`` /
  ``defvjp``; from then on JAX differentiates it with that rule (the last
  one attached wins, as before).  ``jit``, ``vmap`` and ``grad`` compose
  with it, also when ``fun`` or the rule close over their tracers.
  """

  def __init__(self, fun):
    functools.update_wrapper(self, fun)
    self.fun = fun
    self._impl = fun
    self._hoisted_call = None

  def __call__(self, *args):
    if self._hoisted_call is not None:
      try:
        call = self._hoisted_call(args)
      except Exception:  # pylint: disable=broad-except
        # Not traceable ahead at abstract shapes: the direct path calls the
        # function and rule where custom_jvp / custom_vjp do (and raises a
        # rule's own error only when differentiating, as before).
        call = None
      if call is not None:
        return call()
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

    positional.__name__ = _name(fun)
    return positional

  def _set_jvp_all(self, rule):
    impl = jax.custom_jvp(self._positional())
    impl.defjvp(lambda primals, tangents: rule(primals, tangents))
    self._impl = impl
    self._hoisted_call = functools.partial(self._jvp_hoisted, rule)

  def _jvp_hoisted(self, rule, args):
    """The call with hoisted closed-over tracers (None: there are none)."""
    prim = _Traced(self.fun, *args)
    tangents = jax.tree_util.tree_map(_tangent_struct, args)
    jvp, error = _trace_rule(prim.closed_over, rule, args, tangents)
    hoisted = _hoist(*[t for t in (prim, jvp) if t is not None])
    if not hoisted:
      return None

    name = _name(self.fun)  # (the closures below must not hold self)

    def primal(consts, *xs):
      return prim(consts, *xs)

    primal.__name__ = name
    impl = jax.custom_jvp(primal)

    def impl_jvp(primals, tangents):
      consts, xs = primals[0], primals[1:]
      if not all(isinstance(t, jax.custom_derivatives.SymbolicZero)
                 for t in tangents[0]):
        raise _closed_over_error(name, 'JVP')
      if jvp is None:
        raise error
      xs_dot = jax.tree_util.tree_map(_instantiate, tangents[1:])
      return jvp(consts, xs, xs_dot)

    impl.defjvp(impl_jvp, symbolic_zeros=True)
    return lambda: impl(hoisted, *args)

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
      return _cotangents(vjp(ct), len(primals))

    impl.defvjp(fwd, bwd)
    self._impl = impl
    self._hoisted_call = functools.partial(self._vjp_hoisted, rule)

  def _vjp_hoisted(self, rule, args):
    """The call with hoisted closed-over tracers (None: there are none).

    The forward and backward passes are traced separately, the backward
    one as ``rule(*args)[1](ct)``: as on the direct path, it recomputes the
    rule's forward part, which XLA removes under jit where unused."""
    prim = _Traced(self.fun, *args)
    fwd, error = _trace_rule(prim.closed_over, lambda *xs: rule(*xs)[0],
                             *args)
    bwd = None
    if fwd is not None:
      ct = jax.tree_util.tree_map(_tangent_struct, fwd.out_shape)
      bwd, error = _trace_rule(
          prim.closed_over + fwd.closed_over,
          lambda xs, g: _cotangents(rule(*xs)[1](g), len(xs)), args, ct)
    hoisted = _hoist(*[t for t in (prim, fwd, bwd) if t is not None])
    if not hoisted:
      return None

    name = _name(self.fun)  # (the closures below must not hold self)

    def primal(consts, *xs):
      return prim(consts, *xs)

    primal.__name__ = name
    impl = jax.custom_vjp(primal)

    def impl_fwd(consts, *xs):
      if any(c.perturbed for c in consts):
        raise _closed_over_error(name, 'VJP')
      if fwd is None:
        raise error
      consts, xs = jax.custom_derivatives.custom_vjp_primal_tree_values(
          (consts, xs))
      return fwd(consts, *xs), (consts, xs)

    def impl_bwd(res, g):
      if bwd is None:
        raise error
      consts, xs = res
      g = jax.tree_util.tree_map(_instantiate, g)
      return (None,) + bwd(consts, xs, g)

    impl.defvjp(impl_fwd, impl_bwd, symbolic_zeros=True)
    return lambda: impl(hoisted, *args)


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
