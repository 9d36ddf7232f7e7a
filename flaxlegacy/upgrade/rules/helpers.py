"""Rule: helper methods that build submodules, and calls of shared modules.

Legacy modules often build their children in a plain method called from
``apply`` (seq2seq's ``_create_modules``)::

    def _create_modules(self, eos_id, hidden_size):
      encoder = Encoder.partial(eos_id=eos_id,
                                hidden_size=hidden_size).shared(name='encoder')
      decoder = Decoder.shared(name='decoder')
      return encoder, decoder

* ``X.partial(**a).shared(**b)`` is ``X.shared(**a, **b)`` (both bind
  keywords; ``shared`` also fixes the name): normalised first, so the module
  rules turn it into one linen instance ``X(**a, **b)``.
* An undecorated method called as ``self.m(...)`` from ``apply`` keeps its
  place in the class; its body is rewritten like ``apply``'s (linen lets a
  method called from a compact ``__call__`` construct submodules), except
  that it reads no fields (legacy passed them as its own arguments).  A
  helper that creates auto-named submodules keeps its TODO: legacy numbers
  them on the caller's counter.
* A shared instance called with a hyper-parameter of its class
  (``decoder(state, x, teacher_force=tf)``) needs that parameter at call
  time: the facts pass makes it a ``__call__`` parameter of the class
  (``shared_calls`` / ``move_shared_call_params``), unless some
  ``.partial`` binds it.
"""

import dataclasses

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk


def _kw_only(call):
  return all(a.keyword is not None and not a.star for a in call.args)


def _partial_shared(call):
  """The inner ``X.partial(...)`` call of ``X.partial(...).shared(...)``."""
  f = call.func
  if not (isinstance(f, cst.Attribute) and f.attr.value == 'shared'):
    return None
  inner = f.value
  if (isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute)
      and inner.func.attr.value == 'partial' and _kw_only(inner)
      and _kw_only(call)):
    return inner
  return None


class _Normalise(walk.FastTransformer):

  def __init__(self, origins):
    super().__init__()
    self.origins = origins

  def leave_SimpleStatementLine(self, original_node, updated_node):
    # a statement it rebuilt keeps its written line (cst_util.record_origin)
    cst_util.record_origin(self.origins, original_node, updated_node)
    return updated_node

  def leave_Call(self, original_node, updated_node):
    inner = _partial_shared(updated_node)
    if inner is None:
      return updated_node
    args = list(inner.args) + list(updated_node.args)
    out = []
    for i, a in enumerate(args):
      comma = (cst.Comma(whitespace_after=cst.SimpleWhitespace(' '))
               if i < len(args) - 1 else cst.MaybeSentinel.DEFAULT)
      out.append(a.with_changes(comma=comma))
    return cst.Call(func=cst.Attribute(value=inner.func.value,
                                       attr=cst.Name('shared')), args=out)


def prepare_class(up, node):
  """``X.partial(...).shared(...)`` -> ``X.shared(...)`` in a class body."""
  return _Normalise(getattr(up.ctx, 'origins', None)).walk(node)


def _self_calls(fn):
  names = set()

  class V(walk.FastVisitor):

    def visit_Call(self, node):
      f = node.func
      if (isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name)
          and f.value.value == 'self'):
        names.add(f.attr.value)

  fn.visit(V())
  return names


def convert_helpers(up, node, info, apply, others):
  """Rewrites helper methods; returns (new class node, methods left)."""
  from flaxlegacy.upgrade.rules import apply_rewriter  # pylint: disable=g-import-not-at-top
  called = _self_calls(apply)
  helper_info = dataclasses.replace(info, fields=[], call=[], var_kw=None)
  body, left = [], []
  for stmt in node.body.body:
    if (isinstance(stmt, cst.FunctionDef) and stmt.name.value in others
        and stmt.name.value in called and not stmt.decorators):
      rw = apply_rewriter.ApplyRewriter(up, helper_info, stmt)
      if rw.dynamic or rw.names:
        left.append(stmt.name.value)
        body.append(stmt)
        continue
      new = stmt.with_changes(body=walk.transform(stmt.body, rw))
      up.rewrote(stmt, 'helper_method', f'{info.name}.{stmt.name.value}: '
                 'submodule construction rewritten')
      body.append(new)
    else:
      if isinstance(stmt, cst.FunctionDef) and stmt.name.value in others:
        left.append(stmt.name.value)
      body.append(stmt)
  return node.with_changes(body=node.body.with_changes(body=body)), left


# --- facts ------------------------------------------------------------------

