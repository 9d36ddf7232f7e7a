"""Types in the program pass: ``nn.Model`` in a type annotation or a
typing subscript (``Callable[[nn.Model], Any]``) -> ``Any`` (a model is
its parameters now, or a legacy Model kept with a TODO: no single class);
``optim.Optimizer`` -> ``train_state.TrainState``, ``optim.DynamicScale``
-> ``dynamic_scale_lib.DynamicScale`` (table ``LEGACY_TYPES``: the legacy
containers flax.struct dataclasses name as field types);
``nn.Collection`` -> ``dict`` (but ``nn.Collection(...)``, a collection
built as a value, keeps its name and the module pass's TODO).

A mixin of ``programs.ProgramRewriter``: the hooks count how deep the walk
is inside a type (``self._in_type``); a legacy type found decides a
plans.LegacyType that the pass's emitter writes."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.rules.program.shared import TYPING_GENERICS  # pylint: disable=g-importing-member

# the legacy containers flax.struct dataclasses name as field types
LEGACY_OPTIM_TYPES = frozenset(('Optimizer', 'DynamicScale'))


class AnnotationRules:
  """Type annotations and typing subscripts."""

  def visit_Annotation(self, node):
    self._in_type += 1

  def leave_Annotation(self, original_node, updated_node):
    self._in_type -= 1
    return updated_node

  def visit_Subscript(self, node):
    # Callable[[nn.Model, ...], ...] in a type alias: a type, not a value
    name = cst_util.dotted(node.value) if isinstance(
        node.value, (cst.Name, cst.Attribute)) else None
    if name and name.split('.')[-1] in TYPING_GENERICS:
      self._in_type += 1
      self._type_subscripts.add(id(node))

  def leave_Subscript(self, original_node, updated_node):
    if id(original_node) in self._type_subscripts:
      self._in_type -= 1
    return updated_node

  def _type_attribute(self, original_node):
    """What the legacy type ``original_node`` (an Attribute) becomes, or
    None."""
    if self._in_type and self.is_nn(original_node, 'Model'):
      # a type: what the model is now (its parameters, or a legacy Model
      # kept with a TODO where it is made) has no single class
      self.note(original_node, 'nn.Model in a type -> Any')
      return self.emit.legacy_type(plans.LegacyType('Model'))
    # type annotations of legacy containers (flax.struct TrainStates)
    name = self.is_optim(original_node)
    if name in LEGACY_OPTIM_TYPES:
      return self.emit.legacy_type(plans.LegacyType(name))
    if (self.is_nn(original_node, 'Collection')
        and id(original_node) not in self._called_funcs):
      # the type (an annotation, ``isinstance(state, nn.Collection)`` of
      # a state that is a dict now); a collection built as a value
      # (``nn.Collection().mutate()``) is a legacy object linen has not:
      # the module pass's TODO stays
      return self.emit.legacy_type(plans.LegacyType('Collection'))
    return None
