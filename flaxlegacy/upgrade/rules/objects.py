"""Rule support: legacy objects that travel (flow.py facts for the program
rules).

The program rules (rules/programs.py) rewrite a legacy object where it is
made and where it is used: an ``nn.Model`` becomes its parameters (its
calls ``M().apply``), an ``Optimizer`` a ``TrainState`` (``.target`` ->
``.params``).  An object that reaches another function, a ``self``
attribute or a table has to be rewritten the same way there, or neither
place may be rewritten.  These functions answer, from the codebase's value
facts, what the program rules need to decide that:

* ``module_info`` -- the module class (ModuleInfo) every value of an
  expression is, when all of them split their parameters alike
  (``self.network``, ``KNOWN_MODELS[name]``: class 1);
* ``param_kind`` -- 'optimizer' / 'model' when every value a parameter or
  attribute receives is one (so ``train(opt_state, ...)`` reads
  ``opt_state.params`` even though it is not called ``optimizer``), and the
  conflict when it receives one in some runs and something else in others
  (class 3: a TODO there, never a guess);
* ``model_reach`` -- for an ``nn.Model(M, params)`` call, the places its
  model reaches that cannot take its parameters (rules/model_uses.py reads
  what each place does with it: a table, ``model.module``, a call of models
  of several classes, an argument of a function the upgrade cannot see):
  there the call keeps ``nn.Model`` with a TODO, and so does each use;
  ``holds_models`` / ``model_apply_class`` -- what the program rules need
  to rewrite the uses of an attribute or parameter that agrees.
"""

import libcst as cst

from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade.rules import model_uses

# parameters the program rules take for models by their name (programs.py)
MODEL_PARAM_NAMES = ('model',)


def _flow(codebase):
  return getattr(codebase, 'flow', None)


def values(codebase, rel, qual, expr):
  """What ``expr`` can hold, or None without facts."""
  flow = _flow(codebase)
  if flow is None:
    return None
  return flow.values_of(rel, qual, expr)


def module_info(codebase, rel, qual, expr, use='partial'):
  """The ModuleInfo for every value of ``expr`` (used as a legacy module:
  ``flow.usable``), or None."""
  vals = values(codebase, rel, qual, expr)
  if vals is None:
    return None
  choice, _ = flow_lib.module_choice(codebase, vals, use)
  if choice is None or choice[0] != 'class':
    return None
  return choice[1][0]


def _kind(v):
  if v[0] == 'optimizer':
    return 'optimizer'
  if v[0] == 'model':
    return 'model'
  return None


def kind_of_values(vals):
  """(kind or None, conflict why or None, whether some values are
  unknown) for a set of values.  None (a default) agrees with any kind."""
  if not vals:
    return None, None, True
  unknown = flow_lib.UNKNOWN in vals
  kinds = {_kind(v) for v in vals}
  legacy = kinds - {None}
  if not legacy:
    return None, None, unknown
  if len(legacy) > 1:
    return (None, 'it holds an optimizer in some runs and a model in others',
            unknown)
  kind = legacy.pop()
  others = {v[0] for v in vals if _kind(v) is None} - {
      'unknown', 'none', 'ginval'}
  if others:
    return None, (f'it holds a legacy {kind} in some runs and something '
                  f'else ({", ".join(sorted(others))}) in others'), unknown
  return kind, None, unknown


def param_kind(codebase, rel, qual, name, model_class=None):
  """(kind, why, unknown) for a function parameter ``name`` of scope
  ``qual``: an optimizer made where the upgrade keeps it legacy is a why."""
  flow = _flow(codebase)
  if flow is None:
    return None, None, True
  why = getattr(flow, 'contradictions', {}).get(('v', rel, qual, name))
  if why:  # --observe: the run and the source disagree
    return None, why, False
  vals = flow.param_values(rel, qual, name)
  kept = kept_optimizers(codebase, vals, model_class)
  if kept:
    return (None, f'it holds a legacy optimizer the upgrade keeps '
            f'({kept[0]})', False)
  return kind_of_values(vals)


def attr_kind(codebase, rel, qual, expr, model_class=None):
  """(kind, why, unknown) for ``self.x`` / ``obj.x``."""
  vals = values(codebase, rel, qual, expr)
  if vals is None:
    return None, None, True
  kept = kept_optimizers(codebase, vals, model_class)
  if kept:
    return (None, f'it holds a legacy optimizer the upgrade keeps '
            f'({kept[0]})', False)
  for v in vals:
    if v[0] == 'model' and v[1][0] == 'm':
      why = model_kept(codebase, v[1], model_class)
      if why:
        return None, f'it holds an nn.Model the upgrade keeps ({why})', False
  return kind_of_values(vals)


def holds_models(codebase, rel, qual, expr, model_class=None):
  """Whether every value ``expr`` can hold is an ``nn.Model`` (or None)
  that the upgrade rewrites (at least one model)."""
  vals = values(codebase, rel, qual, expr)
  if not vals or not any(v[0] == 'model' for v in vals):
    return False
  for v in vals:
    if v[0] == 'none':
      continue
    if v[0] != 'model' or v[1][0] != 'm':
      return False
    if model_kept(codebase, v[1], model_class):
      return False
  return True


def model_apply_class(codebase, rel, qual, expr):
  """How file ``rel`` names the one module class every model ``expr`` can
  hold is of (built without ``.partial`` keywords), or None."""
  vals = values(codebase, rel, qual, expr)
  key = None
  for v in vals or ():
    if v[0] == 'none':
      continue
    if v[0] != 'model':
      return None
    k = model_uses.model_class_of(codebase, v)
    if k is None or (key is not None and k != key):
      return None
    key = k
  if key is None:
    return None
  return model_uses.class_expr(codebase, rel, key)


def model_module_classes(codebase, model_value):
  """The module values an ``('model', site)`` value was built of."""
  flow = _flow(codebase)
  return frozenset(flow.values.get(model_value[1], set())) if flow else (
      frozenset())


def model_reach(codebase, rel, call, model_class=None):
  """Where the model of ``nn.Model(...)`` call ``call`` (in ``rel``) goes
  that the program rules cannot follow: a list of descriptions."""
  return _site_reach(codebase, ('m', rel, id(call)), model_class)


def _site_reach(codebase, site, model_class):
  flow = _flow(codebase)
  if flow is None:
    return []
  cache = getattr(flow, 'reach_cache', None)
  if cache is None:
    cache = flow.reach_cache = {}
  key = (site, model_class)
  if key not in cache:
    cache[key] = _reach(codebase, flow, site, model_class)
  return cache[key]


def _reach(codebase, flow, site, model_class):
  value = ('model', site)
  # the places it reaches, each read for what the code does with it there
  # (rules/model_uses.py): every one agrees, or every model sharing a place
  # with it stays too
  u = model_uses.uses(codebase)
  if u is None or value not in u.kept:
    return _reach_by_kind(codebase, flow, site, model_class)
  return u.kept[value]


def _reach_by_kind(codebase, flow, site, model_class):
  """The places a model reaches that the program rules do not follow by
  their kind alone (attributes, tables, returns, parameters not called
  ``model`` of the codebase's one model class)."""
  value = ('model', site)
  out = []
  builders = {}
  for f_rel, f in codebase.files.items():
    for name in getattr(f, 'model_builders', {}):
      builders[(f_rel, name)] = True
  for slot, vals in flow.values.items():
    if value not in vals:
      continue
    if slot[0] == 'a':
      out.append(f'the attribute {slot[2].split(".")[-1]}.{slot[3]}')
    elif slot[0] == 'c':
      out.append('a table (dict / list)')
    elif slot[0] == 'r' and (slot[1], slot[2]) not in builders:
      out.append(f'the return value of {slot[2]}')
    elif slot[0] == 'v' and slot[2]:
      d = flow.defs.get((slot[1], slot[2]))
      if d is None or slot[3] not in d.names():
        continue  # a local of some function: followed there
      # the program rules call a parameter named ``model`` as the
      # codebase's one model class, with its fields' defaults: right only
      # for a model of that class built without .partial keywords
      built = flow.values.get(site, set())
      if not (slot[3] in MODEL_PARAM_NAMES and model_class is not None
              and built and all(v[0] == 'class' and v[2] == model_class
                                and not v[3] for v in built)):
        out.append(f'the parameter {slot[3]!r} of {slot[2]}')
  return sorted(set(out))


def optimizer_kept(codebase, site, model_class=None):
  """Why the optimizer made at ``site`` stays legacy (so every place it
  reaches must too), or None."""
  flow = _flow(codebase)
  if flow is None or site not in flow.optimizer_sites:
    return None
  rel, qual, call = flow.optimizer_sites[site]
  if not call.args:
    return 'create() without a target'
  for v in flow.values_of(rel, qual, call.args[0].value):
    if v[0] == 'model' and v[1][0] == 'm' and _site_reach(
        codebase, v[1], model_class):
      return ('it optimizes a model that goes where its module is not known '
              '(kept as nn.Model)')
  return None


def kept_definitions(codebase, rel, model_class=None):
  """{(scope, name) or id(call): why} for the variables (or the inline
  ``optim.X(...)`` calls) of file ``rel`` whose legacy
  optimizer definition makes an optimizer the upgrade keeps
  (``optimizer_def.create(model)`` kept): the definition stays legacy too,
  or the kept ``create`` would be called on an optax transformation."""
  flow = _flow(codebase)
  if flow is None:
    return {}
  out = {}
  for site, (r, qual, call) in flow.optimizer_sites.items():
    base = call.func.value if isinstance(call.func, cst.Attribute) else None
    if r != rel or not isinstance(base, (cst.Name, cst.Call)):
      continue
    why = optimizer_kept(codebase, site, model_class)
    if why:
      # optim.X(...).create(model): the call itself (its id)
      out[(qual, base.value) if isinstance(base, cst.Name)
          else id(base)] = why
  return out


def kept_optimizers(codebase, vals, model_class=None):
  """The reasons optimizers among ``vals`` stay legacy."""
  out = []
  for v in vals:
    if v[0] == 'optimizer':
      why = optimizer_kept(codebase, v[1], model_class)
      if why:
        out.append(why)
  return out


def name_kept(codebase, rel, qual, name, model_class=None):
  """Why the variable ``name`` (seen in scope ``qual``) holds an optimizer
  or an nn.Model the upgrade keeps legacy, or None: every use of it stays
  legacy too."""
  flow = _flow(codebase)
  if flow is None:
    return None
  vals = flow.name_values(rel, qual, name)
  kept = kept_optimizers(codebase, vals, model_class)
  if kept:
    return f'it holds a legacy optimizer the upgrade keeps ({kept[0]})'
  for v in vals:
    if v[0] == 'model' and v[1][0] == 'm':
      why = model_kept(codebase, v[1], model_class)
      if why:
        return f'it holds an nn.Model the upgrade keeps ({why})'
  return None


def model_kept(codebase, site, model_class=None):
  """Why the model of the ``nn.Model(M, params)`` call at ``site`` stays
  an nn.Model (the program rules keep the call), or None."""
  # Only where it reaches such a place: the program rules keep the call
  # then, whatever its module (a module they cannot name where the model
  # is made is their decision there, taken on more than these facts).  One
  # text: the places are listed where the model is made, and a TODO must
  # read the same when the upgrade runs again.
  if _site_reach(codebase, site, model_class):
    return 'it goes where its module is not known'
  return None


def kept_models(codebase, rel, qual, expr, model_class=None):
  """The places that keep the models ``expr`` can hold as nn.Model (a
  list; empty when every one is rewritten)."""
  vals = values(codebase, rel, qual, expr) or ()
  out = []
  for v in vals:
    if v[0] == 'model' and v[1][0] == 'm':
      out += _site_reach(codebase, v[1], model_class)
  return out


def optdef_names(codebase, rel, qual, expr):
  """The legacy optimizer definition names ``expr`` holds when it holds
  nothing else, else None."""
  vals = values(codebase, rel, qual, expr)
  if not vals or any(v[0] != 'optdef' for v in vals):
    return None
  return {v[1] for v in vals}


def model_partial_keywords(codebase, rel, qual, expr):
  """The keywords ``.partial`` bound (``'**'``: some not known here) in
  the module values of the models ``expr`` can hold (flow.py)."""
  flow = _flow(codebase)
  if flow is None:
    return set()
  out = set()
  for m in flow.values_of(rel, qual, expr):
    if m[0] != 'model':
      continue
    for v in flow.values.get(m[1], set()):
      if v[0] == 'class':
        out |= set(v[3])
      elif v[0] == 'layer':
        out |= set(v[2])
  return out


def model_call_conflict(codebase, rel, qual, name, model_class):
  """Why a call of model ``name`` cannot use the codebase's model class
  ``model_class`` (the program rules' convention), or None."""
  flow = _flow(codebase)
  if flow is None:
    return None
  vals = flow.name_values(rel, qual, name)
  models = [v for v in vals if v[0] == 'model']
  if not models:
    return None
  classes = set()
  for m in models:
    for v in flow.values.get(m[1], set()):
      classes.add(v[2] if v[0] == 'class' else v[0])
  if model_class is not None and classes == {model_class}:
    return None
  return (f'{name!r} holds a model of {", ".join(sorted(map(str, classes)))}'
          f'{"" if model_class is None else f", not of {model_class}"}')


def is_name(expr):
  return isinstance(expr, cst.Name)
