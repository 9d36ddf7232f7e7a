"""Codebase-wide analyses of the facts, each worked out once on first use.

Some facts need the whole codebase and the value facts (flow.py) at once:
which plain functions only module bodies call (``function_callers``), the
legacy auto-name stack (``autoname_stack``), what the code does with each
``nn.Model`` wherever it goes (``model_uses``), which models carry their
module (``models``).  They live here, on the facts side (layer 2 of
cst_util.py's list: no rule, plan or emitter is imported), and every
codebase keeps its own in ``codebase.analyses`` (an ``Analyses``, made
with the CodebaseFacts), which works each one out at its first use and
keeps it.  Rules only read them, as they read the other facts
(tests/test_upgrade_layers.py: no rule stores anything on a facts
object).  transform.prepare works out the costly ones before the
upgrade's workers fork, so each inherits them.
"""

import os

from flaxlegacy.upgrade.analyses import autoname_stack as autoname_stack_lib
from flaxlegacy.upgrade.analyses import function_callers
from flaxlegacy.upgrade.analyses import model_uses as model_uses_lib
from flaxlegacy.upgrade.analyses import models


class Analyses:
  """The analyses of one codebase (a CodebaseFacts), each worked out at
  its first use and kept.  Those of the value facts are kept with the
  ``codebase.flow`` they were worked out of (new value facts: worked out
  again)."""

  def __init__(self, codebase):
    self._codebase = codebase
    self._function_callers = None
    self._autoname_stack = None
    self._model_classes = {}  # directory of a file (or None) -> class name
    self._flow = None  # the value facts the ones below were worked out of
    self._model_uses = None
    self._carried = {}  # model site -> whether it carries its module
    self._reach = {}  # model site -> the places it reaches

  def _value_facts(self):
    """``codebase.flow``; the analyses kept of other value facts are
    dropped."""
    flow = getattr(self._codebase, 'flow', None)
    if flow is not self._flow:
      self._flow = flow
      self._model_uses = None
      self._carried = {}
      self._reach = {}
    return flow

  def worked_out(self):
    """The names of the analyses worked out so far (for tests)."""
    self._value_facts()
    return sorted(name for name, done in (
        ('autoname_stack', self._autoname_stack is not None),
        ('layer_function_callers', self._function_callers is not None),
        ('model_carried', bool(self._carried)),
        ('model_class', bool(self._model_classes)),
        ('model_uses', self._model_uses is not None),
        ('site_reach', bool(self._reach))) if done)

  def layer_function_callers(self):
    """{(rel, function name): caller scopes}: function_callers.callers."""
    if self._function_callers is None:
      self._function_callers = function_callers.callers(self._codebase)
    return self._function_callers

  def autoname_stack(self):
    """The legacy auto-name stack's Analysis (autoname_stack.analyse)."""
    if self._autoname_stack is None:
      self._autoname_stack = autoname_stack_lib.analyse(self._codebase)
    return self._autoname_stack

  def model_uses(self):
    """The ModelUses of the codebase's nn.Model values, or None without
    value facts."""
    flow = self._value_facts()
    if flow is None:
      return None
    if self._model_uses is None:
      self._model_uses = model_uses_lib.ModelUses(self._codebase)
    return self._model_uses

  def model_class(self, path=None):
    """The one module class the program's models are built of (those of
    ``path``'s directory first), or None: models.model_class."""
    key = os.path.dirname(path) if path is not None else None
    if key not in self._model_classes:
      self._model_classes[key] = models.model_class(self._codebase, path)
    return self._model_classes[key]

  def model_carried(self, site):
    """Whether the model made at ``site`` (``('m' | 'mc', rel,
    id(call))``) carries its module (models.model_carried, models.
    created_carried, models.made_model_carried)."""
    flow = self._value_facts()
    if flow is None or site[0] not in ('m', 'mc'):
      return False
    if site[0] == 'mc':
      # carried: classes of different parameters known only at run time
      # (the create call itself goes to run time, rules/
      # lifecycle_runtime.py), or a model that goes where its parameters
      # alone cannot follow it
      if models.created_carried(self._codebase, site):
        return True
      compute = models.made_model_carried
    else:
      compute = models.model_carried
    if site not in self._carried:
      self._carried[site] = compute(self._codebase, flow, site)
    return self._carried[site]

  def site_reach(self, site):
    """The places the model made at ``site`` reaches that the program
    rules cannot follow (models.site_reach); [] without value facts."""
    flow = self._value_facts()
    if flow is None:
      return []
    if site not in self._reach:
      self._reach[site] = models.site_reach(self._codebase, flow, site)
    return self._reach[site]
