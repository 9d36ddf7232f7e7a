"""What several module rules share: the ``Ref`` a callee resolves to, the
names a linen field cannot take, the auto-name counter, ``name=`` of a call.

A leaf of rules/: it imports no other rule (cst_util.py lists the layers).
"""

import collections

from flaxlegacy.upgrade import cst_util


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
