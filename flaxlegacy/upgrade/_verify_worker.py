"""One side of a numeric verification, run in its own process.

``python -m flaxlegacy.upgrade._verify_worker legacy SPEC OUT`` initialises the
legacy module (legacy API active), perturbs its parameters, runs it and
pickles parameters, state, inputs and outputs to OUT.
``python -m flaxlegacy.upgrade._verify_worker linen SPEC OUT`` (run with
``FLAXLEGACY=off``) loads that pickle, runs the upgraded module on the same
parameters and inputs, and writes the comparison as JSON to OUT.
"""

import importlib
import importlib.util
import json
import os
import pickle
import sys


def _load(path, name):
  sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  spec.loader.exec_module(module)
  return module


def _load_statements(path, name):
  """Runs the file's top-level statements one by one, skipping failures.

  The upgraded file's program-level code (optimizers, nn.Model, Collection
  annotations) may still name legacy API; module verification
  needs only the module classes and what they use.  Returns (module,
  [(line, error)] of the statements skipped).
  """
  import ast  # pylint: disable=g-import-not-at-top
  import types  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
  module = types.ModuleType(name)
  module.__file__ = path
  sys.modules[name] = module
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read(), path)
  skipped = []
  for stmt in tree.body:
    code = compile(ast.Module(body=[stmt], type_ignores=[]), path, 'exec')
    try:
      exec(code, module.__dict__)  # pylint: disable=exec-used
    except Exception as e:  # pylint: disable=broad-except
      skipped.append((stmt.lineno, f'{type(e).__name__}: {e}'))
  return module, skipped


def _tuples(value):
  """JSON lists back to the tuples legacy code compares against; the
  tagged values of ``observe.encode_value`` (a dtype, an importable
  function) back to what they name."""
  if isinstance(value, list):
    return tuple(_tuples(v) for v in value)
  if isinstance(value, dict):
    if '__dtype__' in value:
      import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
      return getattr(jnp, value['__dtype__'])
    if '__pickle__' in value:
      import base64  # pylint: disable=g-import-not-at-top
      return pickle.loads(base64.b64decode(value['__pickle__']))
    if '__array__' in value:
      import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
      return jnp.asarray(value['__array__'], value['dtype'])
    if '__callable__' in value:
      mod, qual = value['__callable__'].split(':')
      return _attr_path(importlib.import_module(mod), qual)
    return {k: _tuples(v) for k, v in value.items()}
  return value


def _attr_path(obj, qual):
  for part in qual.split('.'):
    obj = getattr(obj, part)
  return obj


def _import_check_module(spec, check, side):
  """A check that names its module (``legacy_module`` / ``upgraded_module``,
  a codebase's dotted module under ``legacy_root`` / ``upgraded_root``):
  the module imported as the codebase imports it; else None."""
  name = check.get(side + '_module')
  if not name:
    return None
  root = spec.get(side + '_root')
  if root and root not in sys.path:
    sys.path.insert(0, root)
  module = importlib.import_module(name)
  flags = sys.modules.get('absl.flags')
  if flags is not None and not flags.FLAGS.is_parsed():
    # the codebase's tests ran under absltest, which parses flags: their
    # defaults, as there
    flags.FLAGS.mark_as_parsed()
  return module


def _inputs(specs, seed):
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(seed)
  out = []
  for spec in specs:
    if spec is None:  # an optional input left out (``edge_x=None``)
      out.append(None)
      continue
    shape, dtype = spec
    if 'int' in dtype:
      out.append(rng.randint(0, 3, size=shape).astype(dtype))
    else:
      out.append(rng.normal(size=shape).astype(dtype))
  del jax
  return out


def _np(tree):
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  return jax.tree_util.tree_map(np.asarray, tree)


def _plain(tree):
  """Outputs with namedtuples as plain tuples (a class made at run time,
  ``collections.namedtuple`` inside a function, cannot be pickled, and the
  two sides' classes are different objects): compared by position."""
  if isinstance(tree, tuple):
    return tuple(_plain(x) for x in tree)
  if isinstance(tree, list):
    return [_plain(x) for x in tree]
  if isinstance(tree, dict):
    return {k: _plain(v) for k, v in tree.items()}
  return tree


class _ProgramLevelStub:
  """Stands in for ``flax.optim`` ... that program code imports.

  Module verification loads the whole upgraded file; its program-level
  code may still name legacy APIs the module rewrite does not cover.  Any
  use of the stub raises, so a module that needs it fails verification.
  """

  def __init__(self, name):
    self._name = name

  def __getattr__(self, attr):
    raise ImportError(f'{self._name}.{attr} is legacy program-level API')


def _stub_program_level():
  import flax  # pylint: disable=g-import-not-at-top
  stubbed = []
  for name in ('optim',):
    if not hasattr(flax, name):
      stub = _ProgramLevelStub('flax.' + name)
      setattr(flax, name, stub)
      sys.modules['flax.' + name] = stub
      stubbed.append('flax.' + name)
  return stubbed


def _module_name(base, path, names):
  """``base`` for the first file of a run, ``base_1``, ... for the next."""
  if path not in names:
    names[path] = base + (f'_{len(names)}' if names else '')
  return names[path]


def legacy(spec, out):
  import flaxlegacy  # pylint: disable=g-import-not-at-top
  flaxlegacy.activate()
  mods, names = {}, {}
  results = []
  for check in spec['checks']:
    try:
      mod = _import_check_module(spec, check, 'legacy')
      if mod is None:
        path = check.get('legacy_file') or spec['legacy_file']
        if path not in mods:
          mods[path] = _load(path, _module_name('_legacy_under_test', path,
                                                names))
        mod = mods[path]
      results.append(_legacy_one(mod, check))
    except Exception as e:  # pylint: disable=broad-except
      results.append({'error': f'{type(e).__name__}: {e}'})
  with open(out, 'wb') as fh:
    pickle.dump(results, fh)


# Legacy's switches for dropout and other draws, each with the value that
# turns them off: a class's forward is compared in deterministic mode only
# through one of these parameters of its own legacy apply.
DETERMINISTIC_SWITCHES = (('train', False), ('deterministic', True),
                          ('is_training', False), ('training', False))


def _legacy_one(mod, spec):
  cls = _attr_path(mod, spec['class'])
  hyper = _tuples(spec['hyper'])
  inputs = _inputs(spec['inputs'], spec['seed'])
  out, again = _legacy_run(cls, hyper, inputs, spec)
  if not _stochastic(out, again, spec):
    return _legacy_method(out, spec)
  # The outputs change with the stochastic key: linen draws from another
  # stream (rngs={'dropout': ...}), so no comparison of these outputs can
  # tell a right port from a wrong one.
  switch = _deterministic_switch(cls, hyper, len(inputs))
  if switch is None:
    return {'stochastic': (
        'its outputs change with the stochastic key; its apply has no ' +
        ', '.join(n for n, _ in DETERMINISTIC_SWITCHES[:-1]) + ' or ' +
        DETERMINISTIC_SWITCHES[-1][0] + ' parameter to switch dropout off')}
  said = ', '.join(f'{k}={v}' for k, v in switch.items())
  if all(hyper.get(k, _default(cls, k)) == v for k, v in switch.items()):
    return {'stochastic': ('its outputs change with the stochastic key, '
                           f'still with {said}')}
  hyper = dict(hyper, **switch)
  try:
    out, again = _legacy_run(cls, hyper, inputs, spec)
    still = _stochastic(out, again, spec)
  except Exception as e:  # pylint: disable=broad-except
    return {'stochastic': ('its outputs change with the stochastic key; '
                           f'with {said} legacy raises '
                           f'{type(e).__name__}: {e}')}
  if still:
    return {'stochastic': ('its outputs change with the stochastic key, '
                           f'still with {said}')}
  if not _finite(out, spec):
    # (a deep network in evaluation mode on initial running statistics):
    # NaN against NaN would prove nothing
    return {'stochastic': ('its outputs change with the stochastic key; '
                           f'with {said} the legacy outputs are not finite')}
  out['switch'] = switch
  out['switch_note'] = f'compared with {said}: stochastic in training mode'
  return _legacy_method(out, spec)


def _apply_parameters(cls, n_inputs):
  """The parameters of the legacy ``apply`` a keyword can set: not ``self``
  and not those the positional inputs fill; {name: Parameter}."""
  import inspect  # pylint: disable=g-import-not-at-top
  try:
    params = list(inspect.signature(cls.apply).parameters.values())
  except (TypeError, ValueError):
    return {}
  if params and params[0].name == 'self':  # an @nn.module function has none
    params = params[1:]
  positional = (inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD)
  taken = [p for p in params if p.kind in positional][:n_inputs]
  return {p.name: p for p in params if p not in taken and p.kind in (
      inspect.Parameter.POSITIONAL_OR_KEYWORD,
      inspect.Parameter.KEYWORD_ONLY)}


def _default(cls, name):
  import inspect  # pylint: disable=g-import-not-at-top
  p = _apply_parameters(cls, 0).get(name)
  return None if p is None or p.default is inspect.Parameter.empty else (
      p.default)


def _deterministic_switch(cls, hyper, n_inputs):
  """{name: value} of the legacy switches ``cls.apply`` has (a boolean, by
  the recorded value or the default), each set to turn dropout off; None
  when it has none."""
  import inspect  # pylint: disable=g-import-not-at-top
  params = _apply_parameters(cls, n_inputs)
  switch = {}
  for name, off in DETERMINISTIC_SWITCHES:
    if name not in params:
      continue
    value = hyper.get(name, params[name].default)
    if isinstance(value, bool) or value is inspect.Parameter.empty:
      switch[name] = off
  return switch or None


def _legacy_run(cls, hyper, inputs, spec):
  """Initialises, perturbs and runs the legacy module under stochastic key
  2; (the result to pickle, ``again(key)``: the same run under another
  stochastic key: (outputs, batch statistics, keys drawn))."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import nn  # pylint: disable=g-import-not-at-top
  from flaxlegacy.migrate import names  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  module = cls.partial(**hyper)
  with nn.stateful() as state:
    with nn.stochastic(jax.random.PRNGKey(1)):
      # init on the inputs themselves (not init_by_shape): data-dependent
      # initialisation (weight norm) needs values.
      _, params = module.init(jax.random.PRNGKey(spec['seed']), *inputs)
  leaves, treedef = jax.tree_util.tree_flatten(params)
  # The noise comes from NumPy: jax.random would compile one program per
  # parameter shape (seconds for a ResNet), for numbers nothing depends on.
  noise = np.random.RandomState(spec['seed'] + 7)
  leaves = [jnp.asarray(np.asarray(p) + (spec['perturb'] * noise.normal(
      size=np.shape(p))).astype(np.asarray(p).dtype)) for p in leaves]
  params = jax.tree_util.tree_unflatten(treedef, leaves)

  frames = getattr(sys.modules.get('flaxlegacy.nn.stochastic'),
                   '_prng_stack', None)

  def run(key):
    draws = None
    with nn.stateful(state) as new_state:
      with nn.stochastic(key):
        outputs = module.call(params, *inputs)
        if frames:
          draws = frames[-1].counter
    return (_plain(_np(outputs)),
            _np(names.batch_stats_from_collection(new_state)), draws)

  outputs, new_state, draws = run(jax.random.PRNGKey(2))
  out = {
      'params': _np(params),
      'state': _np(names.batch_stats_from_collection(state)),
      'new_state': new_state,
      'inputs': inputs,
      'outputs': outputs,
      # the PRNG the legacy side drew with (legacy mode: not partitionable)
      'partitionable': bool(jax.config.jax_threefry_partitionable),
      '_module': module, '_state': state, '_params': params,
      '_draws': draws,
  }
  return out, run


def _stochastic(out, again, spec):
  """Whether the compared numbers (the outputs ``spec['outputs']`` selects,
  the batch statistics) change with the stochastic key: the run under key
  2 against runs under keys 3 and 4, by the comparison's own tolerance.  A
  run that drew no key from ``nn.stochastic`` cannot depend on it (no
  second run); a second key is tried because two dropout masks may agree
  on every element that matters in a small output."""
  import jax  # pylint: disable=g-import-not-at-top
  if out.get('_draws') == 0:
    return False
  return any(_differs(out, again(jax.random.PRNGKey(k)), spec)
             for k in (3, 4))


def _finite(out, spec):
  """Whether the compared legacy outputs are all finite numbers."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  outputs = out['outputs']
  if spec.get('outputs') is not None:
    outputs = [outputs[i] for i in spec['outputs']]
  for x in jax.tree_util.tree_leaves(outputs):
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.inexact) and not np.isfinite(x).all():
      return False
  return True


def _differs(out, other, spec):
  """Whether another key's run (``again``'s result) gave other numbers."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  pairs = [(out['outputs'], other[0]), (out['new_state'], other[1])]
  if spec.get('outputs') is not None:
    pairs[0] = ([out['outputs'][i] for i in spec['outputs']],
                [other[0][i] for i in spec['outputs']])
  for a, b in pairs:
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    if ta != tb:
      return True
    for x, y in zip(la, lb):
      x, y = np.asarray(x), np.asarray(y)
      if x.shape != y.shape:
        return True
      if not np.issubdtype(x.dtype, np.number) and x.dtype != bool:
        if not np.array_equal(x, y):
          return True
        continue
      x, y = x.astype(np.float64), y.astype(np.float64)
      scale = float(np.max(np.abs(x))) if x.size else 0.0
      if not np.allclose(y, x, rtol=spec['rtol'], atol=spec['rtol'] * scale,
                         equal_nan=True):
        return True
  return False


def _legacy_method(out, spec):
  """``out`` to pickle, with the legacy ``@nn.module_method`` call where the
  check names one."""
  from flax import nn  # pylint: disable=g-import-not-at-top
  module, state = out.pop('_module'), out.pop('_state')
  params = out.pop('_params')
  out.pop('_draws')
  if spec.get('method'):
    # a legacy @nn.module_method, called on the model as programs did
    m_inputs = _inputs(spec['method_inputs'], spec['seed'] + 1)
    model = nn.Model(module, params)
    with nn.stateful(state, mutable=False):
      out['method_outputs'] = _plain(_np(getattr(model, spec['method'])(
          *m_inputs, **_tuples(spec.get('method_kwargs') or {}))))
    out['method_inputs'] = m_inputs
  return out


def _drop_empty(tree):
  if isinstance(tree, dict):
    out = {k: _drop_empty(v) for k, v in tree.items()}
    return {k: v for k, v in out.items() if not (isinstance(v, dict)
                                                 and not v)}
  return tree


def _shapes(tree):
  import jax  # pylint: disable=g-import-not-at-top
  return jax.tree_util.tree_map(lambda a: list(a.shape), _drop_empty(tree))


def linen(spec, legacy_out, out):
  with open(legacy_out, 'rb') as fh:
    refs = pickle.load(fh)
  stubbed = _stub_program_level()
  import jax  # pylint: disable=g-import-not-at-top
  drawn = {r['partitionable'] for r in refs if 'partitionable' in r}
  if len(drawn) == 1:
    # random draws inside the module (a VAE's reparameterisation) are
    # inputs of the comparison: draw them as the legacy side did
    jax.config.update('jax_threefry_partitionable', drawn.pop())
  loaded, names = {}, {}
  results = []
  for check, ref in zip(spec['checks'], refs):
    if check.get('upgraded_module'):
      if 'error' in ref:
        results.append({'error': 'legacy side: ' + ref['error']})
        continue
      if 'stochastic' in ref:
        results.append({'stochastic': ref['stochastic']})
        continue
      try:
        mod = _import_check_module(spec, check, 'upgraded')
        legacy_loaded = sorted(m for m in sys.modules if m.startswith(
            ('flax.nn', 'flax.optim', 'flax.deprecated', 'flaxlegacy.nn',
             'flaxlegacy.optim')) and m not in stubbed)
        r = _linen_one(mod, check, ref)
      except Exception as e:  # pylint: disable=broad-except
        r = {'error': f'upgraded side: {type(e).__name__}: {e}'}
        legacy_loaded = []
      r.update({'legacy_imported': legacy_loaded,
                'program_level_stubbed': stubbed, 'skipped_statements': []})
      results.append(r)
      continue
    path = check.get('upgraded_file') or spec['upgraded_file']
    if path not in loaded:
      mod, skipped = _load_statements(
          path, _module_name('_upgraded_under_test', path, names))
      # Legacy modules imported so far, by this file or one loaded before
      # it in this process (so a legacy import is never missed).
      legacy_loaded = sorted(m for m in sys.modules if m.startswith(
          ('flax.nn', 'flax.optim', 'flax.deprecated', 'flaxlegacy.nn',
           'flaxlegacy.optim')) and m not in stubbed)
      loaded[path] = mod, skipped, legacy_loaded
    mod, skipped, legacy_loaded = loaded[path]
    if 'error' in ref:
      results.append({'error': 'legacy side: ' + ref['error']})
      continue
    if 'stochastic' in ref:
      results.append({'stochastic': ref['stochastic']})
      continue
    try:
      if spec.get('rename_map') is not None:
        ref = _renamed(ref, spec['rename_map'], check['root_class'])
      r = _linen_one(mod, check, ref)
    except Exception as e:  # pylint: disable=broad-except
      r = {'error': f'upgraded side: {type(e).__name__}: {e}'}
    r.update({'legacy_imported': legacy_loaded,
              'program_level_stubbed': stubbed,
              'skipped_statements': skipped})
    results.append(r)
  with open(out, 'w') as fh:
    json.dump(results, fh)


def _renamed(ref, rename_map, root_class):
  """The legacy side's trees with the ``--names linen`` rename map."""
  from flaxlegacy.migrate import names  # pylint: disable=g-import-not-at-top
  out = dict(ref)
  for k in ('params', 'state', 'new_state'):
    out[k] = names.rename_params(ref[k], rename_map, root_class)
  return out


def _linen_one(mod, spec, ref):
  import jax  # pylint: disable=g-import-not-at-top
  from flax import core  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  # a stochastic class: compared with the switch the legacy side set to
  # turn dropout off (its name kept by the upgrade, a field or a call
  # parameter)
  hyper = dict(_tuples(spec['hyper']), **ref.get('switch', {}))
  fields = {k: v for k, v in hyper.items() if k in spec['fields']}
  call = {k: v for k, v in hyper.items() if k in spec['call']}
  extra = {k: v for k, v in hyper.items()
           if k not in spec['fields'] and k not in spec['call']}
  if extra and spec.get('var_kw'):
    fields[spec['var_kw']] = extra
  elif extra:
    raise TypeError(f'hyper-parameters {sorted(extra)} are neither fields nor '
                    'call parameters of the upgraded module')
  module = _attr_path(mod, spec['class'])(**fields)
  inputs = ref['inputs']
  rngs = {'params': jax.random.PRNGKey(0), 'dropout': jax.random.PRNGKey(1)}
  # Only the parameter tree's names and shapes are compared: traced, not
  # run, the upgraded initialisation compiles nothing.
  try:
    init_vars = jax.eval_shape(lambda: module.init(rngs, *inputs, **call))
  except Exception:  # pylint: disable=broad-except
    init_vars = module.init(rngs, *inputs, **call)  # raises what init raises
  init_vars = core.unfreeze(init_vars)
  tree_ok = _shapes(init_vars.get('params', {})) == _shapes(ref['params'])
  variables = {'params': ref['params']}
  if ref['state']:
    variables['batch_stats'] = ref['state']
  outputs, new_vars = module.apply(
      variables, *inputs, **call, mutable=['batch_stats'],
      rngs={'dropout': jax.random.PRNGKey(2)})
  new_vars = core.unfreeze(new_vars)
  result = {'tree': tree_ok}
  if ref.get('switch'):
    result.update(switch=ref['switch'], switch_note=ref['switch_note'])
  method_pair = []
  if spec.get('method'):
    m_kwargs = {k: v for k, v in _tuples(spec.get('method_kwargs') or {}
                                          ).items()
                if k not in spec['fields']}
    method_pair = [(ref['method_outputs'], module.apply(
        variables, *ref['method_inputs'], method=spec['method'],
        **m_kwargs))]
  if not tree_ok:
    result['tree_detail'] = {
        'legacy': _shapes(ref['params']),
        'upgraded': _shapes(init_vars.get('params', {}))}
  worst = 0.0
  ok = True
  if spec.get('outputs') is not None:  # compare only these outputs
    pairs = [([ref['outputs'][i] for i in spec['outputs']],
              [_plain(outputs)[i] for i in spec['outputs']])]
  else:
    pairs = [(ref['outputs'], outputs)]
  if ref['new_state']:
    pairs.append((ref['new_state'], new_vars.get('batch_stats', {})))
  pairs += method_pair
  for a, b in pairs:
    b = _plain(b)
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(_drop_empty(core.unfreeze(b))
                                        if isinstance(b, dict) else b)
    if ta != tb:
      ok = False
      result['structure'] = f'{ta} != {tb}'
      continue
    for x, y in zip(la, lb):
      x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
      scale = max(float(np.max(np.abs(x))) if x.size else 0.0, 1e-30)
      err = float(np.max(np.abs(x - y) / (np.abs(x) + scale * 1e-2))) if (
          x.size) else 0.0
      worst = max(worst, err)
      if x.shape != y.shape or not np.allclose(y, x, rtol=spec['rtol'],
                                               atol=spec['rtol'] * scale):
        ok = False
  result['max_rel_err'] = worst
  result['match'] = ok
  return result


if __name__ == '__main__':
  side, spec_path, out_path = sys.argv[1:4]
  with open(spec_path) as f:
    spec_ = json.load(f)
  if side == 'legacy':
    legacy(spec_, out_path)
  else:
    linen(spec_, sys.argv[4], out_path)
