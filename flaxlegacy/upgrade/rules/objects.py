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
  model reaches that cannot take its parameters (analyses/model_uses.py reads
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

Where a model reaches, whether it carries its module and the codebase's
model class are codebase-wide facts: analyses/models.py works them out,
``codebase.analyses`` keeps them, and the functions here only read them.
"""

import libcst as cst

from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade.analyses import model_uses
from flaxlegacy.upgrade.analyses import models as model_facts

# parameters the program rules take for models by their name (programs.py)
MODEL_PARAM_NAMES = model_facts.MODEL_PARAM_NAMES
# module classes known only when the code runs (analyses/models.py)
created_carried = model_facts.created_carried
runtime_module_classes = model_facts.runtime_module_classes
runtime_init_modules = model_facts.runtime_init_modules


def codebase_model_class(codebase, path=None):
  """The one module class the program's models are built of, or None
  (analyses/models.py: those of ``path``'s directory first)."""
  return codebase.analyses.model_class(path)


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
  """Whether the model made at ``site`` (``('m', rel, id(call))`` of an
  ``nn.Model(M, params)`` call, ``('mc', ...)`` of a ``M.create(...)``)
  carries its module: one answer for every file (the facts only,
  analyses/models.py), so the call and each use agree."""
  flow = _flow(codebase)
  if flow is None or site[0] not in ('m', 'mc'):
    return False
  del model_class  # one answer whichever file asks
  return codebase.analyses.model_carried(site)


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
  return codebase.analyses.site_reach(site)


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
