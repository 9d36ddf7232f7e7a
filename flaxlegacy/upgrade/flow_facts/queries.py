"""What rules ask of the facts beyond a name's values: which values can
be a legacy module where an expression is used as one (``usable``), and
what a rewrite may rely on (``module_values``, ``module_choice``)."""

from flaxlegacy.upgrade.flow_facts.shared import GINVAL  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import MODULE_ATTRS  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import MODULE_KINDS  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import NONE  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import OTHER  # pylint: disable=g-importing-member


def usable(values, attr=None, flow=None):
  """The values among ``values`` that a working legacy program can have
  where the expression is used as a legacy module: ``X.attr(...)`` (attr
  one of MODULE_ATTRS) or called (attr None).  A gin literal, a literal,
  None cannot be either; a function (a def, a lambda, a builtin: called,
  it is kept, for it takes the call) or a plain class of the codebase has
  no legacy module attribute (the program would fail there, so no run
  that works brings them).  What is left is what the use can hold."""
  out = set()
  for v in values:
    if v in (OTHER, NONE, GINVAL):
      continue
    if attr in MODULE_ATTRS and v[0] in ('func', 'wrapped', 'boundmethod',
                                         'none', 'function'):
      continue
    if (attr in MODULE_ATTRS and v[0] in ('cls', 'instance')
        and flow is not None and not flow.may_have(v[1], v[2], attr)):
      continue
    if (attr in ('partial', 'init', 'init_by_shape', 'create',
                 'create_by_shape') and v[0] == 'cls' and flow is not None
        and flow.method_def(v[1], v[2], attr) is None):
      # a plain class used as a legacy module class (X.partial(...)):
      # only legacy modules have these class methods, so a base from
      # outside the codebase (a tf.keras.Model a gin binding also names)
      # does not bring them either
      continue
    out.add(v)
  return out



def module_values(values):
  """The legacy module values among ``values``, or None if any value is not
  one (None is allowed when ``allow_none``)."""
  if not values or any(v[0] not in MODULE_KINDS for v in values):
    return None
  return values




def module_choice(codebase, values, use='partial'):
  """What a rewrite may rely on when ``values`` are what an expression
  used as a legacy module (``use``: the attribute of MODULE_ATTRS it is
  used with, or None where it is called; see ``usable``) holds: ``('class', [ModuleInfo, ...])`` when every value is a user
  legacy module class and all of them split their parameters the same way;
  ``('layer', name, [keyword sets])`` when every value is the same legacy
  layer (possibly through ``.partial``); else ``(None, why)``.
  """
  values = list(usable(values, use, getattr(codebase, 'flow', None)))
  if not values or any(v[0] not in MODULE_KINDS for v in values):
    if any(v[0] in MODULE_KINDS for v in values):
      others = sorted({v[0] for v in values if v[0] not in MODULE_KINDS})
      return None, ('it holds a legacy module in some runs and something '
                    f'else ({", ".join(others)}) in others')
    return None, None
  kinds = {v[0] for v in values}
  if kinds == {'layer'}:
    names = {v[1] for v in values}
    if len(names) != 1:
      return None, f'it holds different legacy layers ({sorted(names)})'
    return ('layer', names.pop(), [v[2] for v in values]), None
  if kinds != {'class'}:
    return None, 'it holds both legacy layers and user module classes'
  infos = []
  for v in values:
    f = codebase.files.get(v[1])
    info = f.modules.get(v[2]) if f is not None else None
    if info is None or info.problems:
      return None, f'{v[2]} is not a module class the upgrade converts'
    infos.append(info)
  first = infos[0]
  for i in infos[1:]:
    if (i.params, i.fields, i.call, i.var_kw) != (
        first.params, first.fields, first.call, first.var_kw):
      return None, ('it holds module classes with different parameters ('
                    f'{", ".join(sorted({i.name for i in infos}))})')
  return ('class', infos), None
