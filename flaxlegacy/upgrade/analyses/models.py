"""Where a codebase's legacy models go, and which carry their module.

The program rules (rules/programs.py, through rules/objects.py) rewrite an
``nn.Model`` as its parameters where every place it reaches can take them
(analyses/model_uses.py reads each place), and keep a model that carries
its module (``legacy_model.Model(M, params)``, flaxlegacy/migrate/
upgraded.py) where they cannot.  The codebase-wide answers they read:

* ``model_class`` -- the one module class the program's models are built
  of (per directory first);
* ``site_reach`` -- for an ``nn.Model(M, params)`` call, the places its
  model reaches that cannot take its parameters;
* ``model_carried`` / ``made_model_carried`` / ``created_carried`` --
  whether the model made at a site carries its module;
* ``runtime_module_classes`` / ``runtime_init_modules`` -- a module known
  only when the code runs.

Worked out from the facts (flow.py, analyses/model_uses.py); the
codebase's Analyses keeps each answer (``codebase.analyses``).
"""

import os

from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade.collectors import aliases as alias_facts

# parameters the program rules take for models by their name (programs.py)
MODEL_PARAM_NAMES = ('model',)


def model_class(codebase, path=None):
  """The one module class the program's models are built of, or None.

  With ``path`` (the file being upgraded), the programs of its own
  directory decide first: a tree of several example programs (one model
  class each) upgraded in one run.  (The program rules call a model
  parameter named ``model`` as this class.)  Worked out again at each
  call: read it as ``codebase.analyses.model_class(path)``.
  """
  key = os.path.dirname(path) if path is not None else None

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
  return found


def model_carried(codebase, flow, site):
  """Whether the model of the ``nn.Model(M, params)`` call at ``site``
  (``('m', rel, id(call))``) carries its module: it reaches a place where
  its module cannot be named (``site_reach``), or M holds module classes
  of different parameters.  Never for a legacy layer (linen's has other
  fields), nor for an M nothing is known of that stays where it is made.
  One answer for every file (the facts only), so the call and each use
  agree.  (An ``('mc', ...)`` site: ``created_carried`` or
  ``made_model_carried``.)  Worked out again at each call: read it as
  ``codebase.analyses.model_carried(site)``."""
  if site in getattr(flow, 'carried_sites', ()):
    return True  # an earlier upgrade's legacy_model.Model
  vals = flow.values.get(site, set())
  if any(v[0] == 'layer' for v in vals):
    # a legacy layer: linen's has other fields (and needs some legacy
    # inferred): the program rules keep it, with a TODO
    return False
  if codebase.analyses.site_reach(site):
    return True
  # module classes of different parameters: carried; nothing known
  # about M (a loop over layers, a value from outside): the program
  # rules' TODO
  return any(v[0] == 'class' for v in vals) and not (
      _module_named(codebase, flow, site))


def created_carried(codebase, site):
  """Whether the model ``X.create(rng, ...)`` / ``X.create_by_shape``
  makes at ``site`` (``('mc', rel, id(call))``) carries its module: X holds
  user module classes only (at least two, each one the upgrade converts),
  of different parameters, so no ``M().apply`` can be written for it; the
  call becomes ``legacy_model.create_module(X, ...)`` and every use of the
  model stays as it is (rules/lifecycle_runtime.py)."""
  flow = getattr(codebase, 'flow', None)
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


def made_model_carried(codebase, flow, site):
  """Whether the model ``M.create(...)`` / ``M.create_by_shape(...)`` makes
  at ``site`` (``('mc', rel, id(call))``) carries its module: where it goes
  beyond the locals of a function (a parameter, an attribute, a return, a
  table) its parameters alone cannot follow it (analyses/model_uses.py;
  e.g. a place whose calls cannot name its module, or that also holds
  values the source does not show).  Locals the program rules follow,
  call by call.  Its module is whatever the expression ``M`` holds at run
  time (a class or a ``functools.partial`` of one), so nothing has to be
  known of it but that it is a module class the upgrade converts: never
  for a legacy layer (linen's has other fields).  Worked out again at each
  call: read it as ``codebase.analyses.model_carried(site)``."""
  vals = flow.values.get(site, set())
  u = codebase.analyses.model_uses()
  return bool(
      any(v[0] == 'class' for v in vals)
      and not any(v[0] == 'layer' for v in vals)
      and u is not None and u.kept_beyond.get(('model', site)))


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


def site_reach(codebase, flow, site):
  """Where the model made at ``site`` goes that the program rules cannot
  follow: a sorted list of descriptions.  Worked out again at each call:
  read it as ``codebase.analyses.site_reach(site)``."""
  value = ('model', site)
  # the places it reaches, each read for what the code does with it there
  # (analyses/model_uses.py): every one agrees, or every model sharing a
  # place with it stays too
  u = codebase.analyses.model_uses()
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
      model_class = codebase.analyses.model_class(slot[1])
      if not (slot[3] in MODEL_PARAM_NAMES and model_class is not None
              and built and all(v[0] == 'class' and v[2] == model_class
                                and not v[3] for v in built)):
        out.append(f'the parameter {slot[3]!r} of {slot[2]}')
  return sorted(set(out))
