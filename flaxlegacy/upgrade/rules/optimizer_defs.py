"""User-written ``flax.optim.OptimizerDef`` subclasses -> optax.

A legacy definition is a class that builds its hyper-parameters in
``__init__`` (``super().__init__(hyper_params)``) and implements two
per-parameter hooks, ``init_param_state(param)`` and
``apply_param_gradient(step, hyper_params, param, state, grad)``; the base
class supplies the loop over the parameter tree and the step counter
(``OptimizerState(step, param_states)``).  That is an optax
``GradientTransformation`` in another shape, so the class becomes, in the
user's own file, a function of the constructor's parameters:

* its body is ``__init__``'s (the hyper-parameters built as before;
  ``super().__init__(hp)`` -> ``hyper_params = hp``, ``self.a = v`` ->
  ``a = v``), then every method as a nested function without ``self``
  (``self.hyper_params`` / ``self.a`` / ``self.method(...)`` -> the
  closure's names), class attributes first;
* classes in the class body (ViT's ``HyperParams`` / ``State``) move to the
  top level before it and become attributes of it (``Name.X`` still
  works);
* it returns ``legacy_optax.from_optimizer_def(hyper_params,
  init_param_state=..., apply_param_gradient=...)``: the base class's loop
  as plain optax (flaxlegacy.migrate.legacy_optax, copied into the tree),
  whose state is ``legacy_optax.OptimizerState(step, param_states)`` with
  the class's own per-parameter states, so a legacy checkpoint restores
  field by field.  An overridden ``apply_gradient(hyper_params, params,
  state, grads)`` (a whole-tree rule, cross-parameter logic included: an
  optax update sees the whole tree too) or ``init_state(params)`` is passed
  in place of the loop; ``OptimizerState(...)`` in the class is
  ``legacy_optax.OptimizerState``.

``Name(...)`` is then an optax transformation wherever the program built
the definition; the program rules (rules/programs.py) make ``create`` a
TrainState with it, and ``optax.inject_hyperparams(Name, static_args=...)``
where the learning rate is set per step.

What is not mechanical keeps the class with a TODO that says why: a base
other than ``OptimizerDef`` (a built-in optimizer, another user definition),
a class that others derive from, state kept on the definition object
(``self.x = ...`` outside ``__init__``: hyper-parameters changed inside
``apply_gradient``, shared mutable state), ``self`` passed on, ``super()``
beyond ``__init__``, OptimizerDef's own methods called or overridden
(``update_hyper_params``, ``create`` ...), or names that would change
meaning once the methods share one scope.
"""

import inspect
import re
import textwrap

import libcst as cst

HELPER = 'legacy_optax.from_optimizer_def'
STATE = 'legacy_optax.OptimizerState'
KEEP = ('{} is a user-written optimizer definition (legacy flax.optim) that '
        'the upgrade does not translate to optax: {}; it stays, and the '
        'upgraded program runs it through its as_optax() bridge, which needs '
        'flaxlegacy with the layer on; port its update rule to an optax '
        'GradientTransformation')


# --- the rewrite (transform time) -------------------------------------------


class _SelfRefs(cst.CSTTransformer):
  """``self.x`` -> ``x``; ``OptimizerState`` of flax.optim -> legacy_optax's."""

  def __init__(self, is_state):
    super().__init__()
    self.is_state = is_state
    self._attr_names = set()  # ids of the Name after a dot

  def visit_Attribute(self, node):
    self._attr_names.add(id(node.attr))

  def leave_Attribute(self, original_node, updated_node):
    if isinstance(updated_node.value, cst.Name) and (
        updated_node.value.value == 'self'):
      return cst.Name(updated_node.attr.value)
    if self.is_state(original_node):
      return cst.parse_expression(STATE)
    return updated_node

  def leave_Name(self, original_node, updated_node):
    if id(original_node) not in self._attr_names and self.is_state(
        original_node):
      return cst.parse_expression(STATE)
    return updated_node


def _docstring(stmt):
  if (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
      and isinstance(stmt.body[0], cst.Expr)
      and isinstance(stmt.body[0].value, cst.SimpleString)):
    return stmt.body[0].value
  return None


def _merge_docs(cls_doc, init_doc, indent):
  """One docstring from the class's and ``__init__``'s (both triple-quoted
  alike), or None."""
  c, i = cls_doc.value, init_doc.value
  q = c[:3]
  if q not in ('"""', "'''") or not (c.endswith(q) and i.startswith(q)
                                     and i.endswith(q)):
    return None
  lines = (inspect.cleandoc(c[3:-3]).splitlines() + ['']
           + inspect.cleandoc(i[3:-3]).splitlines())
  text = lines[0] + ''.join('\n' + (indent + l if l.strip() else '')
                            for l in lines[1:])
  return q + text + '\n' + indent + q


def _is_super_init_cst(stmt):
  if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
          and isinstance(stmt.body[0], cst.Expr)
          and isinstance(stmt.body[0].value, cst.Call)):
    return None
  call = stmt.body[0].value
  f = call.func
  if not (isinstance(f, cst.Attribute) and f.attr.value == '__init__'):
    return None
  args = [a for a in call.args]
  if isinstance(f.value, cst.Call) and isinstance(f.value.func, cst.Name) and (
      f.value.func.value == 'super') and len(args) == 1:
    return args[0].value
  if len(args) == 2 and isinstance(args[0].value, cst.Name) and (
      args[0].value.value == 'self'):
    return args[1].value
  return None


def convert(rw, original, updated, plan):
  """The function replacing the class ``updated`` (``rw``: the program
  rewriter, for imports, the report and the ``OptimizerState`` test)."""
  body = list(updated.body.body)
  indent = _indent(rw.ctx.code_of(original))
  cls_doc = _docstring(body[0]) if body else None
  if cls_doc is not None:
    body = body[1:]
  attrs, init, methods, nested = [], None, [], []
  for stmt in body:
    if isinstance(stmt, cst.ClassDef):
      nested.append(stmt)
    elif isinstance(stmt, cst.FunctionDef):
      if stmt.name.value == '__init__':
        init = stmt
      else:
        methods.append(stmt)
    elif isinstance(stmt, cst.SimpleStatementLine) and isinstance(
        stmt.body[0], cst.Pass):
      continue
    else:
      attrs.append(stmt)
  refs = _SelfRefs(rw.is_optimizer_state)
  out = []
  doc = cls_doc
  init_body = []
  params = cst.Parameters(params=[cst.Param(cst.Name('hyper_params'))])
  if init is not None:
    ps = init.params
    params = ps.with_changes(params=list(ps.params)[1:])
    stmts = list(init.body.body)
    init_doc = _docstring(stmts[0]) if stmts else None
    if init_doc is not None:
      stmts = stmts[1:]
      merged = (_merge_docs(cls_doc, init_doc, indent) if cls_doc is not None
                else init_doc.value)
      if merged is not None:
        doc = cst.SimpleString(merged)
      else:  # quoted otherwise: kept as a second string statement
        init_body.append(cst.SimpleStatementLine(body=[cst.Expr(init_doc)]))
    for stmt in stmts:
      hp = _is_super_init_cst(stmt)
      if hp is not None:
        if not (isinstance(hp, cst.Name) and hp.value == 'hyper_params'):
          init_body.append(cst.SimpleStatementLine(
              body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(
                  'hyper_params'))], value=hp.visit(refs))],
              leading_lines=stmt.leading_lines))
        continue
      stmt = stmt.visit(refs)
      if (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
          and isinstance(stmt.body[0], cst.Assign)
          and len(stmt.body[0].targets) == 1
          and isinstance(stmt.body[0].targets[0].target, cst.Name)
          and isinstance(stmt.body[0].value, cst.Name)
          and stmt.body[0].value.value
          == stmt.body[0].targets[0].target.value):
        continue  # self.a = a -> a = a
      init_body.append(stmt)
  if doc is not None:
    out.append(cst.SimpleStatementLine(body=[cst.Expr(doc)]))
  out += [a.visit(refs) for a in attrs]
  out += init_body
  defined = []
  for m in methods:
    static = any(isinstance(d.decorator, cst.Name)
                 and d.decorator.value == 'staticmethod' for d in m.decorators)
    ps = m.params
    if not static:
      ps = ps.with_changes(params=list(ps.params)[1:])
    new = m.with_changes(params=ps, decorators=[]).visit(refs)
    lead = list(new.leading_lines)
    if not lead or lead[0].comment is not None:
      lead.insert(0, cst.EmptyLine(indent=False))
    out.append(new.with_changes(leading_lines=lead))
    defined.append(m.name.value)
  hooks = [h for h in ('init_param_state', 'apply_param_gradient',
                       'init_state', 'apply_gradient') if h in defined]
  # an overridden tree hook replaces the loop the per-parameter one feeds
  if 'apply_gradient' in hooks and 'apply_param_gradient' in hooks:
    hooks.remove('apply_param_gradient')
  if 'init_state' in hooks and 'init_param_state' in hooks:
    hooks.remove('init_param_state')
  ret = f'return {HELPER}(hyper_params, ' + ', '.join(
      f'{h}={h}' for h in hooks) + ')'
  if len(indent) + len(ret) > 79:
    ret = (f'return {HELPER}(\n{indent * 2}hyper_params, ' + (
        ',\n' + indent * 2).join(f'{h}={h}' for h in hooks) + ')')
  ret_stmt = cst.parse_statement(ret + '\n')
  out.append(ret_stmt.with_changes(leading_lines=[cst.EmptyLine(
      indent=False)]))
  rw.imports.add('from flaxlegacy.migrate import legacy_optax')
  note = textwrap.wrap(
      f'{plan.name}: upgraded from a flax.optim.OptimizerDef subclass; the '
      'same methods now build an optax GradientTransformation '
      '(legacy_optax.from_optimizer_def).', 77, break_on_hyphens=False)
  note = ['# ' + line for line in note]
  lead = list(updated.leading_lines) + [
      cst.EmptyLine(indent=False, comment=cst.Comment(c)) for c in note]
  name = updated.name.value
  fn = cst.FunctionDef(
      name=updated.name, params=_realign(params, indent, len(f'def {name}(')),
      body=cst.IndentedBlock(body=out), leading_lines=lead,
      lines_after_decorators=updated.lines_after_decorators)
  if not nested:
    return fn
  # classes of the class body: at the top level before the function, and
  # attributes of it, so that Name.X still reaches them
  before = []
  for i, c in enumerate(nested):
    lines = [cst.EmptyLine(indent=False)] * (1 if i == 0 else 2)
    # (libcst indents a statement by its block: the class moves as it is)
    before.append(c.with_changes(leading_lines=lines + [
        l for l in c.leading_lines if l.comment is not None]))
  before[0] = before[0].with_changes(leading_lines=list(
      updated.leading_lines) + list(before[0].leading_lines)[1:])
  fn = fn.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * 2 + lead[
      len(updated.leading_lines):])
  after = [cst.parse_statement(f'{name}.{c.name.value} = {c.name.value}\n')
           for c in nested]
  after[0] = after[0].with_changes(leading_lines=[cst.EmptyLine(
      indent=False)] * 2)
  return cst.FlattenSentinel(before + [fn] + after)


class _Realign(cst.CSTTransformer):
  """Continuation lines at the old opening parenthesis's column move to
  the new one's; others keep their indentation (relative to the block)."""

  def __init__(self, block, old, new):
    super().__init__()
    self.block, self.old, self.new = block, old, new

  def leave_ParenthesizedWhitespace(self, original_node, updated_node):
    ws = updated_node.last_line.value
    column = (self.block if updated_node.indent else 0) + len(ws)
    if ws.strip() or column != self.old:
      return updated_node
    return updated_node.with_changes(
        last_line=cst.SimpleWhitespace(' ' * self.new), indent=False)


def _realign(params, indent, new_column):
  """``params`` moved from ``def __init__(self, `` (in the class body) to
  ``def Name(`` (at the top level)."""
  return params.visit(_Realign(len(indent), len(indent) + len(
      'def __init__('), new_column))


def _indent(src):
  m = re.search(r'\n([ \t]+)\S', src)
  return m.group(1) if m else '  '
