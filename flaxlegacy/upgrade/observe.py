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


