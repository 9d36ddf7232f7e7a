"""Module instances in a body: ``X.partial(**kw)`` held by a local called
once -> ``X(**kw, name=...)`` (rules/partial_locals.py finds them);
``X.shared(**kw)`` -> one instance ``X(**kw)`` called repeatedly;
``X.partial(...)`` of a layer / class inside a body -> ``functools.partial``
(rules/partials.py); other uses of such locals and ``.partial`` /
``.shared`` of legacy attention get a TODO.

An instance is a plan (plans.Instance) the rewriter's emitter writes."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.collectors import helpers as helper_facts
from flaxlegacy.upgrade.rules import _shared
from flaxlegacy.upgrade.rules import attention as attention_rule
from flaxlegacy.upgrade.rules import constructors
from flaxlegacy.upgrade.rules import name_plan
from flaxlegacy.upgrade.rules import partial_locals
from flaxlegacy.upgrade.rules import partials


class InstanceRules:
  """``.partial`` / ``.shared`` instances and the locals holding them."""

  _held = None

  def _shared_containers(self):
    """{local: [target Ref, ...]}: the body's containers of shared
    instances (``blocks = [X.shared(...) ...]``), and the names a loop
    over one binds (collectors/helpers.py ``containers``)."""
    if self._held is None:
      locals_ = self.resolver.locals

      def element(expr):
        if isinstance(expr, cst.Name):
          ref = locals_.get(expr.value)
        elif (isinstance(expr, cst.Call) and isinstance(
            expr.func, cst.Attribute) and expr.func.attr.value == 'shared'):
          ref = self.resolver(expr)
        else:
          return None
        return ref.target if ref is not None and ref.kind == 'shared' else None

      self._held = helper_facts.containers(self.fn.body, element)
    return self._held

  def _held_call(self, func, held=None):
    """The targets of the shared instances a call of ``func`` (an original
    node) calls through a container, or None."""
    if isinstance(func, cst.Name) and func.value in self.resolver.locals:
      return None  # a plain local (the resolver's)
    return helper_facts.container_call(
        func, self._shared_containers() if held is None else held)

  def _call_shared_container(self, original_node, updated_node):
    """``blocks[i](x, k=v)``, a shared instance held by a container, with
    a hyper-parameter at the call: a TODO (the answer), else None."""
    targets = self._held_call(original_node.func) or ()
    for t in targets:
      bad = _shared.shared_call_problem(t, original_node)
      if bad:
        names = sorted({name_plan.type_name(t) or 'module' for t in targets})
        what = ('several module classes (' + ', '.join(names) + '): which '
                'one this calls is not known here; ' if len(names) > 1
                else '')
        self.todo(original_node, f'{self.ctx.code_of(original_node.func)} '
                  'calls a shared instance held by a container, with '
                  f'{", ".join(bad)}: {what}linen made '
                  f'{"it a field" if len(bad) == 1 else "them fields"} of '
                  f'{name_plan.type_name(t) or "the module"}, fixed where the '
                  'instance is built')
        return updated_node
    return None

  def _call_instance_partial(self, original_node, updated_node):
    """The ``X.partial(...)`` a local holds and calls once, else None."""
    if id(original_node) in self.instance_partials:
      inner = self.resolver(original_node.func.value)
      return self._instance(original_node, updated_node, inner)
    return None

  def _call_instance_attr(self, original_node, updated_node):  # pylint: disable=unused-argument
    """A method of a local holding an instance: a TODO, then the next case
    (None)."""
    f = original_node.func
    if isinstance(f, cst.Attribute) and isinstance(
        f.value, cst.Name) and f.value.value in self.instance_locals:
      self.todo(original_node, partial_locals.ATTR_TODO.format(
          name=f.value.value, attr=f.attr.value))
    return None

  def _call_partial_or_shared(self, original_node, updated_node):
    """``X.partial(...)`` / ``X.shared(...)`` of a layer or class, else
    None."""
    f = original_node.func
    if isinstance(f, cst.Attribute) and f.attr.value in ('partial', 'shared'):
      inner = self.resolver.used_as(f.value, f.attr.value)
      if inner is not None and inner.kind == 'attention':
        new = (attention_rule.field_partial(self, original_node,
                                            updated_node, inner)
               if f.attr.value == 'partial' else None)
        if new is not None:
          return new
        self.todo(original_node, attention_rule.PARTIAL_TODO.format(
            name=self.ctx.code_of(f.value), attr=inner.target,
            what=f.attr.value))
        return updated_node
      if inner is not None and (inner.kind in ('layer', 'class') or (
          inner.kind == 'partial' and f.attr.value == 'partial')):
        if f.attr.value == 'partial':
          return partials.partial_call(self, original_node, updated_node, inner)
        return self._shared(original_node, updated_node, inner)
      if inner is None and f.attr.value == 'partial':
        # legacy layers and module classes (partials.mixed_partial)
        new = partials.mixed_partial(self, original_node, updated_node)
        if new is not None:
          return new
      if f.attr.value == 'shared' and (
          (inner is not None and inner.kind == 'partial')
          or self._legacy_partial(f.value)):
        # a partial held by a name: it became functools.partial, which has
        # no .shared (never left silently)
        self.todo(original_node, f'{self.ctx.code_of(f.value)}.shared(...): '
                  'a shared instance of a module partial held by a name; '
                  'build it once (the partial called with the keywords and '
                  'name=) and call that instance')
        return updated_node
    return None

  def _instance(self, original, updated, inner):
    """``X.partial(**kw)`` held by a local called once -> ``X(**kw, name=)``."""
    local, legacy = self.instance_partials[id(original)]
    args = list(updated.args)
    if legacy is None or any(a.star or a.keyword is None for a in args):
      self.todo(original, f'{local} holds X.partial(...) or a module from '
                'outside: cannot tell the legacy name of its call')
      return updated
    if inner.kind == 'class':
      if any(cst_util.kw(a) not in inner.target.fields + ['name'] for a in args):
        self.todo(original, '.partial binds call parameters')
        return updated
    name = None
    if _shared.call_name(original) is None:
      # counted at run time (ApplyRewriter._counted_instance), or known
      name = legacy if isinstance(legacy, plans.AutoName) else (
          plans.AutoName(literal=legacy))
    self.rewrote(original, 'partial', f'.partial held by {local} (called '
                 'once) -> one module instance')
    module = constructors.module_ref(self, inner, updated.func.value)
    plan = plans.Instance(
        module=module, hypers=_hypers(args), name=name,
        layer=None if inner.kind == 'class' else inner.target)
    return self.construction(plan, self.emit.instance(plan))

  def _shared(self, original, updated, inner):
    """``X.shared(**kw)`` -> ``X(**kw)``: one instance, called repeatedly."""
    args = list(updated.args)
    if any(a.star for a in args):
      self.todo(original, f'.shared(**...) of {inner.kind}')
      return updated
    module = constructors.module_ref(self, inner, updated.func.value)
    bound = []  # call parameters the shared instance binds
    if inner.kind == 'class':
      bad = [a for a in args if cst_util.kw(a) not in inner.target.fields + ['name']]
      if any(a.keyword is None or cst_util.kw(a) not in inner.target.call[1:]
             for a in bad):
        self.todo(original, '.shared binds call parameters')
        return updated
      # keywords of its __call__ (legacy bound them for every call, a
      # call's own keyword winning): functools.partial of the instance
      bound = bad
      args = [a for a in args if a not in bad]
    name = None
    if _shared.call_name(original) is None:
      name = self._auto_name_plan(original, None, None)
      if self.dynamic:
        name = plans.AutoName(counter=self.counter_src(), bare=True)
    self.rewrote(original, 'shared', '.shared(...) -> one module instance')
    plan = plans.Instance(
        module=module, hypers=_hypers(args), name=name,
        layer=None if inner.kind == 'class' else inner.target)
    instance = self.construction(plan, self.emit.instance(plan))
    if not bound:
      return instance
    self.ctx.needed_imports.add('functools')
    return cst.Call(func=cst_util.expr('functools.partial'),
                    args=cst_util.clean_args([cst_util.arg(instance)] + bound))


def _hypers(args):
  """The constructor arguments of an instance, keyed by their keyword."""
  return tuple(plans.Hyper(cst_util.kw(a), a) for a in args)
