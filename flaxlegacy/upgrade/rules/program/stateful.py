"""Collections of the program pass: ``nn.stateful`` / ``nn.stochastic``
blocks and ``nn.Collection`` values.

``with nn.stateful(s) as t:`` around model calls -> ``apply`` with ``{**s}``
variables and ``mutable=['batch_stats']``, the new state assigned to ``t``
(``nn.stateful(s, mutable=False)``: nothing mutable; ``nn.stateful() as
t`` around an init: ``t`` = the init's non-parameter collections); a
legacy attention cache block (``X.mutate() as N``, rules/attention_cache.py)
the same way for the ``'cache'`` collection; ``with nn.stochastic(rng):``
-> ``rngs={'dropout': rng}`` on the model calls, the block kept as
``legacy_rng.stochastic`` for ``nn.make_rng()`` in program code;
``state.as_dict()`` of a collection -> ``legacy_model.collection_dict(state)``
(legacy's flat layout, keyed by module path).

A mixin of ``programs.ProgramRewriter``: the ``with`` hooks keep the stacks
``self._stateful`` (``[state source or None, target, mutable, used,
collection, runtime]``) and ``self._stochastic`` that the model calls
(models.py) and inits (lifecycle.py) read.  A case decides a plan
(plans.ModelApplyAssign: a model call assigned, its written collection
threaded to the block's target; ThreadedBlock, the block whose scopes
were threaded, its body kept; StochasticScope, ProgramRng,
CollectionDict) that the pass's emitter writes; the TODOs and report
lines stay here."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.rules import attention_cache
from flaxlegacy.upgrade.rules import lifecycle_runtime



class CollectionRules:
  """``nn.stateful`` / ``nn.stochastic`` blocks, ``nn.Collection`` values."""

  def visit_With(self, node):
    for item in node.items:
      call = item.item
      if isinstance(call, cst.Call) and self.is_nn(call.func, 'stateful'):
        state = (self.ctx.code_of(call.args[0].value)
                 if call.args and call.args[0].keyword is None else None)
        mutable = True
        for a in call.args:
          if a.keyword is not None and a.keyword.value == 'mutable':
            mutable = self.ctx.code_of(a.value) != 'False'
        target = (self.ctx.code_of(item.asname.name) if item.asname else None)
        self._stateful.append([state, target, mutable, False,
                               'batch_stats', False])
      cache = attention_cache.mutate_block(self, item)
      if cache is not None:
        # a legacy attention cache block: its model call or init threads
        # the 'cache' collection (rules/attention_cache.py)
        state = (self.ctx.code_of(cache[1]) if cache[1] is not None
                 else None)
        self._stateful.append([state, item.asname.name.value, True, False,
                               attention_cache.COLLECTION, False])
      if isinstance(call, cst.Call) and self.is_nn(call.func, 'stochastic'):
        self._stochastic.append(self.ctx.code_of(call.args[0].value))
    return True

  def leave_With(self, original_node, updated_node):
    handled, items = [], []
    for item, new_item in zip(original_node.items, updated_node.items):
      call = item.item
      if isinstance(call, cst.Call) and self.is_nn(call.func, 'stateful'):
        handled.append(self._stateful.pop())
      elif self._collection_mutate(item):
        # ``with coll.mutate() as new:`` of a legacy nn.Collection: legacy's
        # mutable copy of it, written through collection_dict's entries
        self.note(item, 'coll.mutate() of a legacy nn.Collection -> '
                  'legacy_model.collection_copy')
        items.append(new_item.with_changes(item=self.emit.collection_copy(
            plans.CollectionCopy(new_item.item))))
      elif attention_cache.mutate_block(self, item) is not None:
        handled.append(self._stateful.pop())
      elif isinstance(call, cst.Call) and self.is_nn(call.func, 'stochastic'):
        self._stochastic.pop()
        # Kept as a block, for the keys program code draws with
        # nn.make_rng()
        items.append(new_item.with_changes(item=self.emit.stochastic_scope(
            plans.StochasticScope(new_item.item))))
      else:
        items.append(new_item)
    if not handled:
      return updated_node.with_changes(items=cst_util.clean(items))
    if not all(h[3] for h in handled):
      runtime = lifecycle_runtime.runtime_block(
          self, original_node, updated_node, handled, items,
          lambda item: isinstance(item.item, cst.Call) and self.is_nn(
              item.item.func, 'stateful'), cst_util.clean)
      if runtime is not None:
        return runtime
      what = ('X.mutate() block, taken for a legacy attention cache (the '
              'codebase builds one, and X is not known to hold an '
              'nn.Collection)' if any(
                  h[4] == attention_cache.COLLECTION for h in handled)
              else 'nn.stateful block')
      self.todo(original_node, f'{what}: no model call or init '
                'inside that the upgrade could thread the state through')
      return updated_node
    self.note(original_node, 'nn.stateful -> apply arguments')
    # the scopes go (threaded), the body stays
    return self.emit.threaded_block(plans.ThreadedBlock(
        updated_node, tuple(items)))

  def visit_Expr(self, node):
    # ``model(x)`` as a statement of its own in ``with nn.stateful(s) as
    # t:``: legacy wrote t all the same; threaded as ``_, t = ...`` by
    # _stateful_expression (leave_Call leaves it to that)
    if (isinstance(node.value, cst.Call) and self._stateful
        and self._stateful[-1][2] and self._stateful[-1][1] is not None):
      self._assign_values.add(id(node.value))

  def _stateful_expression(self, orig, stmt, line):
    """``model(x)`` as a statement in a mutable ``nn.stateful`` block with a
    target: ``_, t = M().apply(..., mutable=[...])`` (the statements), or
    None."""
    if not (isinstance(orig, cst.Expr) and isinstance(orig.value, cst.Call)
            and id(orig.value) in self._assign_values):
      return None
    target = cst.AssignTarget(target=cst.Name('_'))
    return self._stateful_assign(
        cst.Assign(targets=[target], value=orig.value),
        cst.Assign(targets=[target], value=stmt.value), line)

  def _stateful_assign(self, orig, stmt, line):
    ov = orig.value
    if not isinstance(ov, cst.Call) or id(ov) in self._rewritten_calls:
      return None  # not a call, or leave_Call rewrote it already
    r = self._model_call(ov, stmt.value)
    if r is None:
      return None
    plan, st = r
    t = stmt.targets[0].target
    if plan.mutable is not None:
      st[3] = True
      self.note(line, 'model call in nn.stateful -> apply, mutable')
      return self.emit.model_apply_assign(plans.ModelApplyAssign(
          plan, t, new_state=st[1]))
    if st is not None:
      st[3] = True
    self.note(line, 'model call -> apply')
    return self.emit.model_apply_assign(plans.ModelApplyAssign(plan, t))

  def _call_cache_init(self, original_node, updated_node):
    """The init of a legacy attention cache (rules/attention_cache.py)."""
    return attention_cache.initialize_cache(self, original_node, updated_node)

  def _call_legacy_rng(self, original_node, updated_node):
    """``nn.make_rng()`` / ``nn.is_stochastic()`` in program code."""
    f = original_node.func
    if not original_node.args and (self.is_nn(f, 'make_rng')
                                   or self.is_nn(f, 'is_stochastic')):
      self.note(original_node, f'nn.{f.attr.value}() in program code -> '
                'legacy_rng')
      return self.emit.program_rng(plans.ProgramRng(f.attr.value))
    return None

  def _collection_mutate(self, item):
    """Whether the ``with`` item ``item`` is ``coll.mutate() as new`` of a
    legacy ``nn.Collection`` (flow.py: ``coll`` holds one; never an
    attention cache, rules/attention_cache.py)."""
    coll = attention_cache.mutated(item)
    return (isinstance(coll, (cst.Name, cst.Attribute))
            and self._flow_collection(coll))

  def _flow_collection(self, expr):
    """Whether flow.py says ``expr`` holds a legacy ``nn.Collection`` and
    nothing else (no name convention: a ``.mutate()`` or ``['/path']`` of
    anything else is not legacy's)."""
    flow = getattr(self.codebase, 'flow', None)
    if flow is None:
      return False
    return flow.values_of(self.f.path, self._qual(), expr) == frozenset(
        {flow_lib.COLLECTION})

  def leave_Subscript(self, original_node, updated_node):
    """``coll['/path']`` of a legacy ``nn.Collection`` (legacy's
    ``Collection.__getitem__``: the module's values by its path) ->
    ``legacy_model.collection_dict(coll)['/path']``."""
    updated_node = super().leave_Subscript(original_node, updated_node)
    sl = original_node.slice
    if (len(sl) == 1 and isinstance(sl[0].slice, cst.Index)
        and isinstance(sl[0].slice.value, cst.SimpleString)
        and sl[0].slice.value.evaluated_value.startswith('/')
        and isinstance(original_node.value, (cst.Name, cst.Attribute))
        and self._flow_collection(original_node.value)):
      self.note(original_node, "coll['/path'] of a legacy nn.Collection -> "
                'legacy_model.collection_dict(coll)[...]')
      return self.emit.collection_entry(plans.CollectionEntry(updated_node))
    return updated_node

  def _call_as_dict(self, original_node, updated_node):
    """``state.as_dict()`` of a legacy ``nn.Collection``."""
    f = original_node.func
    # state.as_dict() of a legacy nn.Collection: the state is a dict of
    # linen collections now, nested; legacy's dict was flat, by module path
    if (isinstance(f, cst.Attribute) and f.attr.value == 'as_dict'
        and not original_node.args and self._holds_collection(f.value)):
      self.note(original_node, 'nn.Collection.as_dict() -> '
                'legacy_model.collection_dict (legacy\'s flat layout)')
      return self.emit.collection_dict(plans.CollectionDict(updated_node))
    return None
