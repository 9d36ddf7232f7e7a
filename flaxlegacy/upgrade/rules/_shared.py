"""What several module rules share: the ``Ref`` a callee resolves to, the
names a linen field cannot take, the auto-name counter, ``name=`` of a call.

A leaf of rules/: it imports no other rule (cst_util.py lists the layers).
"""

import collections

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk


Ref = collections.namedtuple('Ref', 'kind target extra')
# kind: 'layer' (target: Layer), 'class' (target: ModuleInfo),
#       'attention' (target: the legacy attr; rules/attention.py),
#       'instance' (target: inner Ref; rules/partial_locals.py),
#       'partial' (target: inner Ref), 'shared' (target: inner Ref),
#       'dropout'.
# extra: for 'class' from an IfExp or a variable: the source expression of
#        the constructor when it is not the class name.

RESERVED_FIELDS = frozenset(('name', 'parent', 'scope', 'variables', 'params',
                             'param', 'variable', 'apply', 'init', 'setup',
                             'bind', 'make_rng', 'is_initializing', 'path'))
AUTONAME_VAR = 'legacy_autoname'


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


SHARED_CALL_TODO = 'call of a shared module with hyper-parameters'


def shared_call_problem(target, call):
  """What a call of a shared instance of ``target`` (the Ref of its layer
  or class) passes that linen made a field (fixed when the instance was
  built): a list of keywords / positions (``'*'`` for a splat), empty when
  the call is certain."""
  args = list(call.args)
  if any(a.star for a in args):
    return ['*']
  if target.kind == 'layer':
    return [cst_util.kw(a) or f'argument {i + 1}'
            for i, a in enumerate(args) if i]
  info = target.target
  out = []
  for i, a in enumerate(args):
    k = cst_util.kw(a)
    if k is not None and k in info.fields:
      out.append(k)
    elif k is None and (i >= len(info.call) or i >= len(info.params)
                        or info.call[i] != info.params[i]):
      out.append(info.params[i] if i < len(info.params)
                 else f'argument {i + 1}')
  return out
