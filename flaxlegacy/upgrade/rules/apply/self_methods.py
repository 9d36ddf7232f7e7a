"""``self.<method>(...)`` in a module body: ``self.param(name, shape, init)``
-> ``self.param(name, init, shape)``; ``self.state(...)`` ->
``self.variable('batch_stats', ...)``; ``self.is_stateful()`` -> whether
the state collection is mutable or given; ``self.get_param`` /
``self.collection`` get a TODO.

The cases decide (plans.Param, plans.Variable, plans.IsStateful); the
rewriter's emitter writes them (``self.emit``)."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import plans

STATE_COLLECTION = 'batch_stats'  # legacy nn.stateful state, in linen


def _orig_arg(call, position, keyword):
  """The value ``call`` passes for a parameter (its position, its
  keyword), or None."""
  for i, a in enumerate(call.args):
    if a.star:
      return None
    if (a.keyword is None and i == position) or cst_util.kw(a) == keyword:
      return a.value
  return None


def _write_only_handle(fn, call):
  """``call`` is the value of ``h = call`` in ``fn`` and ``h`` is used
  only as ``h.value = ...`` (and bound nowhere else)."""
  if fn is None:
    return False
  found = {'name': None, 'binds': 0, 'writes': 0, 'uses': 0}

  class Binder(cst.CSTVisitor):

    def visit_Assign(self, node):
      if node.value is call and len(node.targets) == 1 and isinstance(
          node.targets[0].target, cst.Name):
        found['name'] = node.targets[0].target.value

  fn.visit(Binder())
  name = found['name']
  if name is None:
    return False

  class Uses(cst.CSTVisitor):

    def visit_Assign(self, node):
      for t in node.targets:
        if isinstance(t.target, cst.Name) and t.target.value == name:
          found['binds'] += 1
        elif (isinstance(t.target, cst.Attribute)
              and isinstance(t.target.value, cst.Name)
              and t.target.value.value == name
              and t.target.attr.value == 'value'):
          found['writes'] += 1

    def visit_Name(self, node):
      if node.value == name:
        found['uses'] += 1

  fn.visit(Uses())
  # every mention: the binding, and the object of each ``.value =``
  return found['binds'] == 1 and found['writes'] >= 1 and (
      found['uses'] == 1 + found['writes'])


class SelfMethodRules:
  """``self.param`` / ``self.state`` / ``self.is_stateful`` ..."""

  def _call_self_method(self, original_node, updated_node):
    """A call of ``self.<method>``, else None."""
    f = original_node.func
    if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and (
        f.value.value == 'self'):
      return self._self_method(original_node, updated_node, f.attr.value)
    return None

  def _self_method(self, original, updated, method):
    args = list(updated.args)
    if method == 'param':
      pos = [a for a in args if a.keyword is None]
      kw = {cst_util.kw(a): a for a in args if a.keyword is not None}
      if any(a.star for a in args):
        self.todo(original, 'self.param with *args')
        return updated
      ordered = pos + [kw.pop(k) for k in ('shape', 'initializer')
                       if k in kw]
      if len(ordered) != 3 or kw:
        self.todo(original, 'self.param(name, shape, init) expected')
        return updated
      plan = plans.Param(name=ordered[0], shape=ordered[1],
                         initializer=ordered[2], call=updated)
      self.rewrote(original, 'param', 'self.param(name, shape, init) -> '
                   'self.param(name, init, shape)')
      return self.emit.param(plan)
    if method == 'state':
      return self._state(original, updated)
    if method == 'is_stateful':
      # legacy: inside any nn.stateful, mutable=False (evaluation) too;
      # linen: the state collection is mutable, or it was given
      return self.emit.is_stateful(plans.IsStateful(STATE_COLLECTION))
    if method in ('get_param', 'collection'):
      self.todo(original, f'self.{method} has no certain linen rewrite')
    return updated

  def _state(self, original, updated):
    args = list(updated.args)
    names = ('name', 'shape', 'initializer', 'collection')
    bound = {}
    for i, a in enumerate(args):
      if a.star:
        self.todo(original, 'self.state with *args')
        return updated
      key = cst_util.kw(a) or (names[i] if i < len(names) else None)
      bound[key] = a.value
    if 'collection' in bound and self.holds_none(_orig_arg(
        original, list(names).index('collection'), 'collection')):
      # collection=None (the legacy default): the stateful context's
      del bound['collection']
    if ('collection' not in bound and 'shape' not in bound
        and 'initializer' not in bound and 'name' in bound
        and _write_only_handle(self.fn, original)):
      # ``tagged = self.state('tag'); tagged.value = x``: the handle is
      # only written (legacy's getter would raise before a write); a linen
      # variable of the stateful collection, created on the first write
      self.rewrote(original, 'state', "self.state(name) written only -> "
                   "self.variable('batch_stats', name)")
      return self.emit.variable(plans.Variable(
          collection=STATE_COLLECTION, name=bound['name'], write_only=True))
    if 'collection' in bound or 'shape' not in bound or 'name' not in bound:
      self.todo(original, 'self.state with an explicit collection or no '
                'shape: port by hand to self.variable')
      return updated
    plan = plans.Variable(collection=STATE_COLLECTION, name=bound['name'],
                          shape=bound['shape'],
                          initializer=bound.get('initializer'))
    self.rewrote(original, 'state', "self.state -> self.variable("
                 "'batch_stats', ...)")
    return self.emit.variable(plan)
