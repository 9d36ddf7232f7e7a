"""``flaxlegacy upgrade SRC --out DST --observe "CMD"``: facts from running
the codebase's own tests.

Where the source alone cannot say what a parameter holds (gin bindings,
``getattr``, registries, values built at run time), running the code can.
``observe`` runs CMD (``python -m pytest tests/``) under the compatibility
layer with a profiler hook (the way MonkeyType records run-time types):
for every call of a function, method or legacy ``apply`` defined under
SRC, it records which legacy objects its arguments were -- a legacy module
class (with the keywords its ``.partial`` bound), a legacy layer, an
``nn.Model`` (of which class), an optimizer, an ``nn.Collection``.  Other
values are not recorded.

The records are facts of the parameters they were seen at (flow.py): where
the source says the parameter can hold values it cannot name (``unknown``:
a function the codebase never calls, a gin-configurable one), the observed
values stand in for them; where the source names every value a parameter
can hold and the run shows another one, the source and the run contradict
each other: the parameter gets a TODO (``Flow.contradictions``), never a
guess.  A CMD that fails still yields the facts it gathered (a warning
says so).
"""

import json
import os
import subprocess
import sys
import tempfile

# The hook, written as sitecustomize.py into a directory put first on the
# observed command's PYTHONPATH (subprocesses such as pytest-xdist workers
# inherit it).  Plain Python: it runs inside the user's program.
HOOK = r'''
import atexit, json, os, sys, threading

_ROOTS = [r for r in os.environ.get('FLAXLEGACY_OBSERVE_ROOTS', '').split(
    os.pathsep) if r]
_OUT = os.environ.get('FLAXLEGACY_OBSERVE_OUT')
_seen = {}
_codes = {}


def _rel(filename):
  if filename.startswith('<'):  # generated code (<string>: dataclasses ...)
    return None
  f = os.path.abspath(filename)
  for i, root in enumerate(_ROOTS):
    if f.startswith(root.rstrip(os.sep) + os.sep):
      return i, os.path.relpath(f, root)
  return None


def _module_file(cls):
  mod = sys.modules.get(getattr(cls, '__module__', ''), None)
  f = getattr(mod, '__file__', None)
  return _rel(f) if f else None


def _legacy_base():
  for name in ('flax.nn', 'flax.deprecated.nn', 'flaxlegacy.nn'):
    m = sys.modules.get(name)
    if m is not None and hasattr(m, 'Module'):
      return m
  return None


def _classify(v):
  nn = _legacy_base()
  if nn is None:
    return None
  try:
    if isinstance(v, type) and issubclass(v, nn.Module):
      kws = sorted(getattr(v, '_nn_partial_kwargs', {}) or {})
      cls = v
      while ('_nn_partial_kwargs' in cls.__dict__ and cls.__bases__
             and cls.__bases__[0].__name__ == cls.__name__):
        cls = cls.__bases__[0]
      where = _module_file(cls)
      if where is None:
        return ['layer', cls.__name__, kws]
      return ['class', where[1], cls.__name__, kws]
    if isinstance(v, getattr(nn, 'Model', ())):
      m = _classify(getattr(v, 'module', None))
      return ['model', m]
    if isinstance(v, getattr(nn, 'Collection', ())):
      return ['collection']
    optim = sys.modules.get('flax.optim') or sys.modules.get(
        'flaxlegacy.optim')
    if optim is not None and isinstance(v, getattr(optim, 'Optimizer', ())):
      return ['optimizer']
  except Exception:  # pylint: disable=broad-except
    return None
  return None


def _profile(frame, event, arg):
  if event != 'call':
    return
  code = frame.f_code
  where = _codes.get(code)
  if where is None:
    r = _rel(code.co_filename)
    where = _codes[code] = (r[0], r[1], getattr(code, 'co_qualname',
                                                code.co_name)) if r else False
  if not where:
    return
  names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
  for n in names:
    if n not in frame.f_locals:
      continue
    c = _classify(frame.f_locals[n])
    if c is not None:
      key = (where[0], where[1], where[2], n)
      s = _seen.setdefault(key, set())
      s.add(json.dumps(c))


def _dump():
  if not _OUT:
    return
  out = [[k[0], k[1], k[2], k[3], sorted(v)] for k, v in _seen.items()]
  with open(os.path.join(_OUT, 'observed-%d.json' % os.getpid()), 'w') as f:
    json.dump(out, f)


if _ROOTS and _OUT:
  sys.setprofile(_profile)
  threading.setprofile(_profile)
  atexit.register(_dump)
'''


def run(cmd, roots, cwd=None, stderr=None):
  """Runs ``cmd`` (a shell command) under the layer with the hook; returns
  the observed facts: {(rel, qualname, parameter): set of flow.py values}.

  ``roots``: [(directory, prefix)]: a file ``directory/a/b.py`` is the
  upgrade's ``prefix/a/b.py`` (``SourceFile.rel``).
  """
  stderr = stderr or sys.stderr
  prefixes = [p for _, p in roots]
  roots = [os.path.abspath(r) for r, _ in roots]
  with tempfile.TemporaryDirectory() as tmp:
    hook_dir = os.path.join(tmp, 'hook')
    out_dir = os.path.join(tmp, 'out')
    os.makedirs(hook_dir)
    os.makedirs(out_dir)
    with open(os.path.join(hook_dir, 'sitecustomize.py'), 'w') as f:
      f.write(HOOK)
    env = {k: v for k, v in os.environ.items() if k != 'FLAXLEGACY'}
    env['PYTHONPATH'] = os.pathsep.join(
        [hook_dir] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep)
                      if p])
    env['FLAXLEGACY_OBSERVE_ROOTS'] = os.pathsep.join(roots)
    env['FLAXLEGACY_OBSERVE_OUT'] = out_dir
    p = subprocess.run(cmd, shell=True, cwd=cwd, env=env, check=False)
    if p.returncode:
      stderr.write(f'flaxlegacy upgrade --observe: {cmd!r} exited with '
                   f'{p.returncode}; using the facts it gathered\n')
    facts = {}
    for name in sorted(os.listdir(out_dir)):
      with open(os.path.join(out_dir, name)) as f:
        for index, rel, qual, param, vals in json.load(f):
          if prefixes[index]:
            rel = os.path.join(prefixes[index], rel)
          key = (rel, _flow_qual(qual), param)
          facts.setdefault(key, set()).update(
              _value(json.loads(v)) for v in vals)
  return facts


def _flow_qual(qual):
  """``Test._create.<locals>.Net.apply`` -> flow.py's ``Test._create.Net.apply``."""
  return '.'.join(p for p in qual.split('.') if p != '<locals>')


def _value(v):
  """A recorded value -> a flow.py value."""
  if v[0] == 'class':
    return ('class', v[1], v[2], frozenset(v[3]))
  if v[0] == 'layer':
    return ('layer', v[1], frozenset(v[2]))
  if v[0] == 'model':
    return ('observed-model', _value(v[1]) if v[1] else ('unknown',))
  if v[0] == 'optimizer':
    return ('observed-optimizer',)
  return (v[0],)




# --- inits: what the codebase's own runs initialise, for --verify ---------

INITS_ENV = 'FLAXLEGACY_RECORD_INITS'
_MAX_PER_CLASS = 3


def encode_value(v):
  """A hyper-parameter as JSON that the verification worker rebuilds on
  both sides (``_verify_worker._tuples``), or raises ValueError."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  if v is None or isinstance(v, (bool, int, float, str)):
    return v
  if isinstance(v, (list, tuple)):
    return [encode_value(x) for x in v]
  if isinstance(v, dict) and all(isinstance(k, str) for k in v):
    if any(k.startswith('__') for k in v):
      raise ValueError('a dict with dunder keys')
    return {k: encode_value(x) for k, x in v.items()}
  if isinstance(v, (np.generic,)) and np.ndim(v) == 0:
    return v.item()
  if (hasattr(v, '__array__') and hasattr(v, 'dtype')
      and hasattr(v, 'shape') and not hasattr(v, 'aval')
      or type(v).__name__ == 'ArrayImpl'):
    # a concrete array hyper-parameter (a support, a mask): its values
    a = np.asarray(v)
    if a.size > 100000:
      raise ValueError(f'array value of {a.size} elements')
    return {'__array__': a.tolist(), 'dtype': a.dtype.name}
  # a dtype: np.float32, jnp.float32 (a _ScalarMeta, not a type), np.dtype
  if (isinstance(v, np.dtype) or isinstance(v, type) and issubclass(
      v, np.generic) or type(v).__name__ == '_ScalarMeta'):
    try:
      return {'__dtype__': np.dtype(v).name}
    except TypeError:
      pass
  mod = getattr(v, '__module__', None) or ''
  qual = getattr(v, '__qualname__', None) or ''
  if (callable(v) and mod and qual and '<' not in qual
      and not mod.startswith(('flaxlegacy', 'flax.', '__main__'))
      and not isinstance(v, type)):
    import importlib  # pylint: disable=g-import-not-at-top
    try:
      obj = importlib.import_module(mod)
      for part in qual.split('.'):
        obj = getattr(obj, part)
    except Exception:  # pylint: disable=broad-except
      obj = None
    if obj is v:
      return {'__callable__': f'{mod}:{qual}'}
  # anything else that pickles by reference to the codebase's own classes
  # (a config object, a module class given as a hyper-parameter: each side
  # unpickles it from its own tree, the upgraded side the upgraded class)
  import pickle  # pylint: disable=g-import-not-at-top
  import base64  # pylint: disable=g-import-not-at-top
  try:
    data = pickle.dumps(v, protocol=4)
  except Exception:  # pylint: disable=broad-except
    raise ValueError(f'{type(v).__name__} value') from None
  if b'flaxlegacy' in data or b'flax.nn' in data or b'flax.optim' in data:
    raise ValueError(f'{type(v).__name__} value naming legacy Flax')
  return {'__pickle__': base64.b64encode(data).decode('ascii')}


def _input_spec(x):
  if x is None:
    return None
  shape, dtype = getattr(x, 'shape', None), getattr(x, 'dtype', None)
  if shape is None or dtype is None:
    raise ValueError(f'{type(x).__name__} input')
  return [list(shape), str(dtype)]


def record_inits(module_cls, module_stack, base_module=None):
  """Wraps the legacy ``Module.init`` (every entry point -- ``init_by_shape``,
  ``create`` ... -- goes through it) so that each top-level initialisation
  is written to the folder ``$FLAXLEGACY_RECORD_INITS`` at exit: the class
  (its file and qualified name, below any ``.partial`` layers), the input
  shapes and dtypes, and the hyper-parameters (``.partial`` keywords and the
  call's, encoded with ``encode_value``).  What cannot be encoded is named
  (``why``), so a class the run initialised only with such values is counted
  as observed but not verifiable.  With ``base_module`` (the module whose
  ``_run`` applies every module, nested or not), the classes applied inside
  each recorded initialisation are written too (``inside``): a class that
  only ever runs inside others is checked as part of them."""
  import atexit  # pylint: disable=g-import-not-at-top
  out_dir = os.environ.get(INITS_ENV)
  if not out_dir or getattr(module_cls, '_flaxlegacy_recording', False):
    return
  seen = {}
  inside = {}  # top-level (file, class) -> {(file, class) applied in it}
  current = []  # the top-level initialisation running, if any
  original = module_cls.__dict__['init'].__func__

  def where(cls):
    base = cls
    while ('_nn_partial_kwargs' in base.__dict__ and base.__bases__
           and base.__bases__[0].__name__ == base.__name__):
      base = base.__bases__[0]
    mod = sys.modules.get(base.__module__)
    path = getattr(mod, '__file__', None)
    return base, (os.path.abspath(path) if path else None)

  def record(cls, args, kwargs):
    base, path = where(cls)
    if not path:
      return None
    key = (path, base.__qualname__)
    rec = {'file': key[0], 'class': base.__qualname__,
           'module': base.__module__}
    try:
      rec['inputs'] = [_input_spec(a) for a in args]
      hyper = dict(getattr(cls, '_nn_partial_kwargs', {}) or {})
      hyper.update(kwargs)
      rec['hyper'] = {}
      for k, v in hyper.items():
        try:
          rec['hyper'][k] = encode_value(v)
        except ValueError as e:
          raise ValueError(f'{k}: {e}') from None
    except ValueError as e:
      rec.pop('inputs', None)
      rec.pop('hyper', None)
      rec['why'] = str(e)
    entries = seen.setdefault(key, [])
    blob = json.dumps(rec, sort_keys=True)
    if blob not in entries and len(entries) < _MAX_PER_CLASS:
      entries.append(blob)
    return key

  def init(cls, _rng, *args, name=None, **kwargs):
    if module_stack:
      return original(cls, _rng, *args, name=name, **kwargs)
    try:
      key = where(cls)
      key = (key[1], key[0].__qualname__) if key[1] else None
    except Exception:  # pylint: disable=broad-except
      key = None
    current.append(key)
    try:
      out = original(cls, _rng, *args, name=name, **kwargs)
    finally:
      current.pop()
    # only initialisations that succeed (a test may build a module with
    # inputs it expects to be refused)
    try:
      record(cls, args, kwargs)
    except Exception:  # pylint: disable=broad-except
      pass
    return out

  if base_module is not None:
    run = base_module._run  # pylint: disable=protected-access

    def run_recorded(cls, *rest):
      if current and current[-1] is not None:
        try:
          base, path = where(cls)
          if path and (path, base.__qualname__) != current[-1]:
            inside.setdefault(current[-1], set()).add(
                (path, base.__qualname__))
        except Exception:  # pylint: disable=broad-except
          pass
      return run(cls, *rest)

    base_module._run = run_recorded  # pylint: disable=protected-access

  init.__doc__ = original.__doc__
  module_cls.init = classmethod(init)
  module_cls._flaxlegacy_recording = True  # pylint: disable=protected-access

  def dump():
    if not seen:
      return
    os.makedirs(out_dir, exist_ok=True)
    recs = [json.loads(b) for bs in seen.values() for b in bs]
    recs += [{'inside': [list(top), sorted(map(list, nested))]}
             for top, nested in inside.items()]
    with open(os.path.join(out_dir, f'inits-{os.getpid()}.json'), 'w') as f:
      json.dump(recs, f)

  atexit.register(dump)


def read_inits(out_dir, inside=None):
  """The records ``record_inits`` wrote into ``out_dir``: {(file, class):
  [records]}, at most ``_MAX_PER_CLASS`` distinct ones per class; ``inside``
  (a dict), if given, gets {(file, class): {(file, class) of the top-level
  initialisations it ran inside}}."""
  by_class = {}
  for name in sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else ():
    if not (name.startswith('inits-') and name.endswith('.json')):
      continue
    with open(os.path.join(out_dir, name)) as f:
      for rec in json.load(f):
        if 'inside' in rec:
          top, nested = rec['inside']
          for n in nested:
            if inside is not None:
              inside.setdefault(tuple(n), set()).add(tuple(top))
          continue
        entries = by_class.setdefault((rec['file'], rec['class']), [])
        if rec not in entries and len(entries) < _MAX_PER_CLASS:
          entries.append(rec)
  return by_class
