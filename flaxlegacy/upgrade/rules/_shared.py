"""What several module rules share: the ``Ref`` a callee resolves to, the
names a linen field cannot take, the auto-name counter, ``name=`` of a call.

A leaf of rules/: it imports no other rule (cst_util.py lists the layers);
``call_name``, ``name_kind`` and ``none_default_params`` are the facts
side's (analyses/call_names.py).
"""

import collections

from flaxlegacy.upgrade import cst_util
# (the facts side's: the auto-name analyses ask them too)
from flaxlegacy.upgrade.analyses.call_names import call_name  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.analyses.call_names import name_kind  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.analyses.call_names import none_default_params  # pylint: disable=g-importing-member,unused-import


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
