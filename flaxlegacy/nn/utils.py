"""Small helpers of the legacy module system (legacy ``flax.nn.utils``).

* ``CallStack``: the thread-local stacks that hold all dynamic context of
  ``flax.nn`` (executing module frames, ``nn.stateful`` collections,
  ``nn.stochastic`` PRNG frames, output trackers).
* ``classproperty``: a read-only property evaluated on the class
  (``module_method`` is built on it).
* ``eager_for`` / ``run_eager``: the evaluation context in which parameter
  initializers and key derivations run, so that ``init`` works inside traced
  code (spec 2.15).
* The tracer-level helpers ``_mains`` / ``_masters`` / ``_trace_level`` /
  ``_current_trace`` / ``_level_of_value``: from v0.2 on legacy Flax kept
  them only as no-ops (its checks that forbid stateful or stochastic
  operations inside JAX transformations were disabled); they are kept with
  that behaviour because legacy code may import them.
"""

import contextlib
import threading

import jax


class CallStack:
  """A per-thread stack of context objects.

  ``frame(data)`` pushes ``data`` (a fresh ``{}`` when None) for the duration
  of a ``with`` block and pops it even if the block raises.  ``len()``,
  iteration (outermost first) and indexing (``stack[-1]`` is the innermost)
  read the current thread's stack; every thread starts empty.
  """

  __slots__ = ('_local',)

  def __init__(self):
    self._local = threading.local()

  @property
  def _frames(self):
    # One list per thread, created on first use in that thread.
    try:
      return self._local.frames
    except AttributeError:
      frames = self._local.frames = []
      return frames

  @contextlib.contextmanager
  def frame(self, data=None):
    if data is None:
      data = {}
    frames = self._frames
    frames.append(data)
    try:
      yield data
    finally:
      frames.pop()

  def __iter__(self):
    return iter(self._frames)

  def __len__(self):
    return len(self._frames)

  def __getitem__(self, index):
    return self._frames[index]


class _ClassProperty:
  """Descriptor: reading the attribute on a class or instance calls fn(cls)."""

  def __init__(self, fn):
    self._fn = fn
    self.__doc__ = getattr(fn, '__doc__', None)

  def __get__(self, instance, owner=None):
    if owner is None:
      owner = type(instance)
    return self._fn(owner)


def classproperty(f):
  """Makes ``f(cls)`` a read-only property of the class (and its instances)."""
  return _ClassProperty(f)


# --- evaluation context for initialisation ---------------------------------

try:  # JAX internal API, present in jax 0.4.36+ ("stackless" tracing).
  from jax._src.core import set_current_trace as _set_current_trace  # pylint: disable=g-import-not-at-top
except ImportError:  # pragma: no cover - depends on the JAX version
  _set_current_trace = None

try:  # JAX internals: the eager trace and the constant-folding switch.
  from jax._src.config import eager_constant_folding as _constant_folding  # pylint: disable=g-import-not-at-top
  from jax._src.core import eval_trace as _eval_trace  # pylint: disable=g-import-not-at-top
except ImportError:  # pragma: no cover - depends on the JAX version
  _constant_folding = _eval_trace = None

_Tracer = jax.core.Tracer


def eager_for(key):
  """The context in which keys are folded and initializers run (spec 2.15).

  Legacy Flax (v0.2.2+) evaluated child-key folding, parameter initializers
  and state initializers in JAX's "eval context": computations on concrete
  values run eagerly and give concrete arrays, computations on tracers go to
  the trace that owns those tracers, never into an inner ``scan``/``jit``
  trace that merely happens to be active.  On today's JAX that is: when the
  frame's key is a tracer, evaluate in the key's own trace; otherwise ask for
  compile-time evaluation (constant folding of everything concrete).
  ``run_eager`` is the form to prefer for a concrete key.
  """
  if isinstance(key, _Tracer) and _set_current_trace is not None:
    return _set_current_trace(key._trace)  # pylint: disable=protected-access
  return jax.ensure_compile_time_eval()


@contextlib.contextmanager
def _plain_eager():
  # The eager trace, with constant folding off for jitted functions traced
  # meanwhile (jax.random's): folding inside their bodies makes the counters
  # of the random bits (two uint32 arrays of the parameter's size) constants
  # of a cached jaxpr that JAX keeps until jax.clear_caches() -- about twice
  # the size of the parameters, per distinct shape, for the process's life.
  with _set_current_trace(_eval_trace), _constant_folding(False):
    yield


def run_eager(key, fn):
  """``fn()`` evaluated as ``eager_for(key)`` says, without constant folding.

  For a concrete key, ``fn`` runs on JAX's eager trace, exactly as a plain
  eager call (linen's ``init``) runs it, so that its jitted callees are
  traced and cached as in eager code.  Should ``fn`` read a traced value (an
  initializer computed from the input of ``init_by_shape`` or of a jitted
  ``init``), it runs again under compile-time evaluation, which stages the
  traced parts; ``fn`` must therefore be free of side effects.
  """
  if isinstance(key, _Tracer) or _eval_trace is None or (
      _set_current_trace is None):
    with eager_for(key):
      return fn()
  try:
    with _plain_eager():
      return fn()
  except jax.errors.UnexpectedTracerError:
    pass
  with jax.ensure_compile_time_eval():
    return fn()


# --- tracer-level helpers (no-ops since legacy v0.2) ------------------------


def _mains():
  """The active JAX main traces as legacy saw them: always none since v0.2."""
  return ()


_masters = _mains  # the name used before JAX renamed "master" to "main"


def _trace_level(main):
  """Level of a main trace, ``-inf`` for None."""
  if main:
    return main.level
  return float('-inf')


def _current_trace():
  """The innermost main trace as legacy saw it (always None since v0.2)."""
  mains = _mains()
  return mains[-1] if mains else None


def _tracer_of_value(x):
  """Legacy v0.1 private helper: the trace a traced value belongs to.

  None for a concrete value.  For a JAX tracer, the trace object it carries
  (what legacy called the tracer's "master"; today's traces have no level,
  and the checks that compared levels are gone since v0.2).
  """
  if isinstance(x, _Tracer):
    return getattr(x, '_trace', None)
  return None


def _level_of_value(xs):  # pylint: disable=unused-argument
  """Trace level of a value: ``-inf`` (the legacy check is disabled)."""
  return float('-inf')
