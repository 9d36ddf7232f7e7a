"""Facts of legacy randomness imported by name.

Legacy code draws its keys with ``nn.make_rng()``, and some imports the
function itself: ``from flax.deprecated.nn.stochastic import make_rng``
(long-range-arena), ``from flax.nn import make_rng as rng``.  Such a name is
the legacy function wherever the file uses it, as long as the import is the
only thing in the file that binds it (a parameter, a local or a second
import of the same name could hold anything else there).

``collect_facts`` records ``stochastic_names``: local name -> the legacy
``nn`` attribute it is (``'make_rng'`` / ``'is_stochastic'``), for the names
bound that way and nowhere else in the file.  rules/stochastic_names.py
rewrites with them.
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk

# the legacy calls a module body spells as its own (rules/apply/stochastic.py)
STOCHASTIC_ATTRS = frozenset(('make_rng', 'is_stochastic'))


class _Bindings(walk.BoundNames):
  """How often each name is bound in a file: by an import (``imports``,
  local -> count) or by anything else (``names``: assignments, targets,
  parameters, ``def`` / ``class`` names, ``as`` names that are no
  import's)."""

  def __init__(self):
    super().__init__(params=True)
    self.imports = {}

  def visit_ImportAlias(self, node):
    local = (node.asname.name.value if node.asname is not None
             and isinstance(node.asname.name, cst.Name)
             else cst_util.dotted(node.name).split('.')[0])
    self.imports[local] = self.imports.get(local, 0) + 1
    return False  # its ``as`` name is counted here, not as a target

  def visit_FunctionDef(self, node):
    self.names.add(node.name.value)

  def visit_ClassDef(self, node):
    self.names.add(node.name.value)

  def visit_Global(self, node):
    self.names.update(n.name.value for n in node.names)

  def visit_Nonlocal(self, node):
    self.names.update(n.name.value for n in node.names)


def collect_facts(file_facts, module):
  """Adds ``stochastic_names`` to ``file_facts``."""
  found = {}
  for local, full in file_facts.imports.items():
    attr = cst_util.legacy_nn_attr(full)  # (flax.nn.stochastic.make_rng too)
    if attr in STOCHASTIC_ATTRS:
      found[local] = attr
  if found:
    v = _Bindings()
    module.visit(v)
    found = {local: attr for local, attr in found.items()
             if v.imports.get(local) == 1 and local not in v.names}
  file_facts.stochastic_names = found
