"""How a legacy module call is named (``name=``), read from its source:
what the auto-name analyses (analyses/autoname_stack.py) and the module
rules (rules/_shared.py re-exports it) both ask.  Syntax only.
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk


def call_name(call):
  """The ``name=`` argument of a call, or None."""
  for a in call.args:
    if cst_util.kw(a) == 'name':
      return a
  return None


def none_default_params(fn):
  """The parameters of a FunctionDef or Lambda whose default is ``None``
  and that its body never binds again (``name = name or 'conv'``: a
  string where it is used)."""
  if fn is None or not hasattr(fn, 'params'):
    return frozenset()
  ps = fn.params
  out = frozenset(
      p.name.value for p in list(ps.posonly_params) + list(ps.params)
      + list(ps.kwonly_params)
      if isinstance(p.default, cst.Name) and p.default.value == 'None')
  if out and isinstance(fn, cst.FunctionDef):
    v = walk.BoundNames()
    fn.body.visit(v)
    out -= v.names
  return out


def name_kind(call, maybe_none=frozenset()):
  """How a legacy module call is named: ``'auto'`` (no ``name=``, or
  ``name=None``: legacy's default, which draws the parent's counter),
  ``'maybe'`` (``name=p``, ``p`` a parameter in ``maybe_none`` -- its
  default is None --: auto-named in the runs where it is None) or
  ``'named'``."""
  arg = call_name(call)
  if arg is None:
    return 'auto'
  v = arg.value
  if isinstance(v, cst.Name):
    if v.value == 'None':
      return 'auto'
    if v.value in maybe_none:
      return 'maybe'
  return 'named'
