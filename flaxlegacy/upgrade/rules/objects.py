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
* ``model_carried`` -- whether that model becomes a ``Model`` that carries
  its module (``legacy_model.Model(M, params)``, flaxlegacy/migrate/
  upgraded.py): where it reaches a place that cannot take its parameters alone, or M holds classes of
  different parameters.  Every use of a carried model stays as it is (it is called,
  ``.params``, ``.replace(...)`` as legacy), and an optimizer of one is a
  TrainState over it; a name that holds a carried model in some runs and
  parameters in others is a TODO.
"""

import os

import libcst as cst

from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade.collectors import aliases as alias_facts
from flaxlegacy.upgrade.rules import model_uses

# parameters the program rules take for models by their name (programs.py)
MODEL_PARAM_NAMES = ('model',)


def codebase_model_class(codebase, path=None):
  """The one module class the program's models are built of, or None.

  With ``path`` (the file being upgraded), the programs of its own
  directory decide first: a tree of several example programs (one model
  class each) upgraded in one run.  (The program rules call a model
  parameter named ``model`` as this class.)
  """
  cache = getattr(codebase, 'model_class_cache', None)
  if cache is None:
    cache = codebase.model_class_cache = {}
  key = os.path.dirname(path) if path is not None else None
  if key in cache:
    return cache[key]

  def model_classes(files):
    names = set()
    for f in files:
      names |= {n for n in getattr(f, 'model_classes', ()) if n}
    return {n for n in names if n in codebase.modules}

  found = None
  if path is not None:
    names = model_classes(f for rel, f in codebase.files.items()
                          if os.path.dirname(rel) == key)
    if len(names) == 1:
      found = names.pop()
  if found is None:
    names = model_classes(codebase.files.values())
    if not names and len(codebase.modules) == 1:
      names = set(codebase.modules)  # the only module there is
    found = names.pop() if len(names) == 1 else None
  cache[key] = found
  return found


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


def _kind(v, codebase=None):
  if v[0] == 'optimizer':
    return 'optimizer'
  if v[0] == 'model':
    if codebase is not None and v[1][0] in ('m', 'mc') and model_carried(
        codebase, v[1]):
      return CARRIED
    return 'model'
  return None


# the kind of a model that carries its module (model_carried)
CARRIED = 'carried'


def kind_of_values(vals, codebase=None):
  """(kind or None, conflict why or None, whether some values are
  unknown) for a set of values.  None (a default) agrees with any kind.
  With ``codebase``, models that carry their module are kind CARRIED."""
  if not vals:
    return None, None, True
  unknown = flow_lib.UNKNOWN in vals
  kinds = {_kind(v, codebase) for v in vals}
  legacy = kinds - {None}
  if not legacy:
    return None, None, unknown
  if legacy == {'model', CARRIED}:
    return (None, 'it holds a model that carries its module '
            '(legacy_model.Model) in some runs and bare parameters in '
            'others', unknown)
  if len(legacy) > 1:
    return (None, 'it holds an optimizer in some runs and a model in others',
            unknown)
  kind = legacy.pop()
  others = {v[0] for v in vals if _kind(v) is None} - {
      'unknown', 'none', 'ginval'}
  if others:
    what = ('model that carries its module (legacy_model.Model)'
            if kind == CARRIED else kind)
    return None, (f'it holds a legacy {what} in some runs and something '
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
  return _values_kind(codebase, flow.param_values(rel, qual, name),
                      model_class)


def name_kind(codebase, rel, qual, name, model_class=None):
  """(kind, why, unknown) for a variable ``name`` seen in scope ``qual``
  (a local bound to what a codebase function returns: ``opt =
  model.get_weights()``), as ``param_kind``."""
  flow = _flow(codebase)
  if flow is None:
    return None, None, True
  return _values_kind(codebase, flow.name_values(rel, qual, name),
                      model_class)


def _values_kind(codebase, vals, model_class):
  """(kind, why, unknown) of what a parameter or variable holds: a TODO's
  why where it holds an optimizer the upgrade keeps, else
  ``kind_of_values``."""
  kept = kept_optimizers(codebase, vals, model_class)
  if kept:
    return (None, f'it holds a legacy optimizer the upgrade keeps '
            f'({kept[0]})', False)
  return kind_of_values(vals, codebase)


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
    if (v[0] == 'model' and v[1][0] == 'm'
        and not model_carried(codebase, v[1], model_class)):
      why = model_kept(codebase, v[1], model_class)
      if why:
        return None, f'it holds an nn.Model the upgrade keeps ({why})', False
  return kind_of_values(vals, codebase)


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
    if model_kept(codebase, v[1], model_class) or model_carried(
        codebase, v[1], model_class):
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


def model_built_with_keywords(codebase, rel, qual, expr):
  """Whether some model ``expr`` can hold was built of a module class
  with ``.partial`` keywords (flow.py: ``('class', file, name, keywords)``)."""
  for v in values(codebase, rel, qual, expr) or ():
    if v[0] == 'model' and any(
        m[0] == 'class' and m[3] for m in model_module_classes(codebase, v)):
      return True
  return False


def model_module_classes(codebase, model_value):
  """The module values an ``('model', site)`` value was built of."""
  flow = _flow(codebase)
  return frozenset(flow.values.get(model_value[1], set())) if flow else (
      frozenset())


def model_carried(codebase, site, model_class=None):
  """Whether the model of the ``nn.Model(M, params)`` call at ``site``
  (``('m', rel, id(call))``) carries its module: it reaches a place where
  its module cannot be named (``model_reach``), or M holds module classes
  of different parameters.  Never for a legacy layer (linen's has other
  fields), nor for an M nothing is known of that stays where it is made.
  One answer for every file (the facts only), so the call and each use
  agree."""
  flow = _flow(codebase)
  if flow is None or site[0] not in ('m', 'mc'):
    return False
  del model_class  # one answer whichever file asks
  if site[0] == 'mc':
    # carried: classes of different parameters known only at run time
    # (the create call itself goes to run time, rules/lifecycle_runtime.py),
    # or a model that goes where its parameters alone cannot follow it
    return created_carried(codebase, site) or _made_model_carried(
        codebase, flow, site)
  cache = getattr(flow, 'carried_cache', None)
  if cache is None:
    cache = flow.carried_cache = {}
  if site not in cache and site in getattr(flow, 'carried_sites', ()):
    cache[site] = True  # an earlier upgrade's legacy_model.Model
  if site not in cache:
    vals = flow.values.get(site, set())
    if any(v[0] == 'layer' for v in vals):
      # a legacy layer: linen's has other fields (and needs some legacy
      # inferred): the program rules keep it, with a TODO
      cache[site] = False
    elif _site_reach(codebase, site):
      cache[site] = True
    else:
      # module classes of different parameters: carried; nothing known
      # about M (a loop over layers, a value from outside): the program
      # rules' TODO
      cache[site] = any(v[0] == 'class' for v in vals) and not (
          _module_named(codebase, flow, site))
  return cache[site]


def created_carried(codebase, site):
  """Whether the model ``X.create(rng, ...)`` / ``X.create_by_shape``
  makes at ``site`` (``('mc', rel, id(call))``) carries its module: X holds
  user module classes only (at least two, each one the upgrade converts),
  of different parameters, so no ``M().apply`` can be written for it; the
  call becomes ``legacy_model.create_module(X, ...)`` and every use of the
  model stays as it is (rules/lifecycle_runtime.py)."""
  flow = _flow(codebase)
  vals = flow.values.get(site, set()) if flow is not None else set()
  return runtime_module_classes(codebase, vals)


def runtime_module_classes(codebase, vals):
  """Whether ``vals`` (what an expression used as a legacy module holds)
  are user module classes the upgrade converts, at least two, of
  different parameters: the module is known only at run time."""
  vals = [v for v in vals if v[0] != 'none']
  if len({(v[1], v[2]) for v in vals if v[0] == 'class'}) < 2 or any(
      v[0] != 'class' for v in vals):
    return False
  if not all(_converted_class(codebase, v) for v in vals):
    return False
  choice, _ = flow_lib.module_choice(codebase, vals)
  return choice is None


def _converted_class(codebase, v):
  """Whether the value ``('class', rel, name, ...)`` is a user module
  class the upgrade converts (no problems)."""
  f = codebase.files.get(v[1])
  info = f.modules.get(v[2]) if f is not None else None
  return info is not None and not info.problems and info.kind == 'class'


def runtime_init_modules(codebase, vals):
  """Whether ``vals`` (what ``X`` of a legacy ``X.init(rng, x)`` /
  ``X.init_by_shape(rng, specs)`` holds) are module classes known only at
  run time, legacy layers among them: two or more different values, each a
  user module class the upgrade converts or a legacy layer of the layer
  table (its value there the linen partial the partial rule writes, legacy
  defaults added), and no one class or layer that a static ``M().init``
  could name.  Only the parameters come out (``init_module*``), never a
  model that carries a layer (``model_carried``)."""
  vals = [v for v in vals if v[0] != 'none']
  if not any(v[0] == 'layer' for v in vals):
    return runtime_module_classes(codebase, vals)
  if len(set(vals)) < 2 or any(v[0] not in ('class', 'layer') for v in vals):
    return False
  for v in vals:
    if v[0] == 'layer' and v[1] not in layer_table.LAYERS:
      return False
    if v[0] == 'class' and not _converted_class(codebase, v):
      return False
  choice, _ = flow_lib.module_choice(codebase, vals)
  return choice is None


def _made_model_carried(codebase, flow, site):
  """Whether the model ``M.create(...)`` / ``M.create_by_shape(...)`` makes
  at ``site`` (``('mc', rel, id(call))``) carries its module: where it goes
  beyond the locals of a function (a parameter, an attribute, a return, a
  table) its parameters alone cannot follow it (rules/model_uses.py; e.g. a
  place whose calls cannot name its module, or that also holds values the
  source does not show).  Locals the program rules follow, call by call.
  Its module is whatever the expression ``M`` holds at run time (a class or
  a ``functools.partial`` of one), so nothing has to be known of it but
  that it is a module class the upgrade converts: never for a legacy layer
  (linen's has other fields)."""
  cache = getattr(flow, 'carried_cache', None)
  if cache is None:
    cache = flow.carried_cache = {}
  if site not in cache:
    vals = flow.values.get(site, set())
    u = model_uses.uses(codebase)
    cache[site] = bool(
        any(v[0] == 'class' for v in vals)
        and not any(v[0] == 'layer' for v in vals)
        and u is not None and u.kept_beyond.get(('model', site)))
  return cache[site]


def _module_named(codebase, flow, site):
  """Whether the module of the model at ``site`` is one class the rules
  can name: what every value is (flow.py), or else the class the source
  names there (``nn.Model(models.CNN, p)``, a local bound to
  ``CNN.partial(...)``, as the program rules read it)."""
  choice, _ = flow_lib.module_choice(codebase, flow.values.get(site, set()))
  if choice is not None and choice[0] == 'class':
    return True
  if any(v[0] == 'class' for v in flow.values.get(site, ())):
    return False  # several classes, of different parameters
  f = codebase.files.get(site[1])
  name = getattr(f, 'model_site_names', {}).get(site[2])
  return alias_facts.is_module_name(codebase, name)


def carried(codebase, rel, qual, expr):
  """(whether ``expr`` holds a model that carries its module, why not
  every value agrees or None)."""
  vals = values(codebase, rel, qual, expr) or ()
  kind, why, _ = kind_of_values(vals, codebase)
  return kind == CARRIED, why


def optimizers_all_carried(codebase, rel, qual):
  """Whether the function ``qual`` of file ``rel`` creates optimizers
  (``optim.X(...).create(t)``, as the value facts record them) and every
  one's target ``t`` is a model that carries its module: then an optimizer
  of that function the facts lose track of (a struct's
  ``.replace(optimizer=...)`` returned by a step) holds one too.  (Only the
  function's own creations: an optimizer the facts do not record, a
  ``getattr(optim, name)(...)``, makes none.)"""
  flow = _flow(codebase)
  if flow is None or getattr(flow, 'optimizer_targets', None):
    return False
  sites = [(r, q, call) for r, q, call in getattr(
      flow, 'optimizer_sites', {}).values() if (r, q) == (rel, qual)]
  return bool(sites) and all(
      call.args and carried(codebase, r, q, call.args[0].value)[0]
      for r, q, call in sites)


def model_reach(codebase, rel, call, model_class=None):
  """Where the model of ``nn.Model(...)`` call ``call`` (in ``rel``) goes
  that the program rules cannot follow: a list of descriptions."""
  return _site_reach(codebase, ('m', rel, id(call)), model_class)


def _site_reach(codebase, site, model_class=None):
  """(``model_class`` is not used: a parameter named ``model`` is called
  as the model class of its own file, whichever file asks.)"""
  del model_class
  flow = _flow(codebase)
  if flow is None:
    return []
  cache = getattr(flow, 'reach_cache', None)
  if cache is None:
    cache = flow.reach_cache = {}
  if site not in cache:
    cache[site] = _reach(codebase, flow, site)
  return cache[site]


def _reach(codebase, flow, site):
  value = ('model', site)
  # the places it reaches, each read for what the code does with it there
  # (rules/model_uses.py): every one agrees, or every model sharing a place
  # with it stays too
  u = model_uses.uses(codebase)
  if u is None or value not in u.kept:
    return _reach_by_kind(codebase, flow, site)
  return u.kept[value]


def _reach_by_kind(codebase, flow, site):
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
      model_class = codebase_model_class(codebase, slot[1])
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
  del rel, qual, model_class
  if not call.args:
    return 'create() without a target'
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
    if (v[0] == 'model' and v[1][0] == 'm'
        and not model_carried(codebase, v[1], model_class)):
      why = model_kept(codebase, v[1], model_class)
      if why:
        return f'it holds an nn.Model the upgrade keeps ({why})'
  _, why, _ = kind_of_values(vals, codebase)
  if why and 'carries its module' in why:
    return why
  return None


def model_kept(codebase, site, model_class=None):
  """Why the model of the ``nn.Model(M, params)`` call at ``site`` stays
  an nn.Model (the program rules keep the call), or None: it reaches a
  place that cannot take its parameters alone and does not carry its
  module (``model_carried``: a legacy layer)."""
  # One text: the places are listed where the model is made, and a TODO
  # must read the same when the upgrade runs again.
  if _site_reach(codebase, site, model_class) and not model_carried(
      codebase, site, model_class):
    return 'it goes where its module is not known'
  return None


def name_carried(codebase, rel, qual, name):
  """Whether the variable ``name`` holds models that carry their module
  (its uses stay as they are)."""
  flow = _flow(codebase)
  if flow is None:
    return False
  kind, _, _ = kind_of_values(flow.name_values(rel, qual, name), codebase)
  return kind == CARRIED


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
