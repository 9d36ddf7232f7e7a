"""Rules for legacy module definitions -> linen dataclass modules.

* A ``class M(nn.Module)`` with ``def apply(self, x, features, train=False)``
  becomes a dataclass module: the hyper-parameters are fields (facts.py
  documents the split), the body moves into ``@nn.compact def __call__``
  and reads ``self.<field>``.  ``@nn.module`` functions become such classes.
* Calls inside the body: legacy layers (layer_table.py), other legacy
  modules (fields to the constructor, inputs to the call), ``X.partial``
  (-> ``functools.partial``), ``X.shared`` (-> one module instance, called
  as often as the legacy code called it), helpers returning ``X.partial``.
* ``self.param(name, shape, init)`` -> ``self.param(name, init, shape)``;
  ``self.state(...)`` -> ``self.variable('batch_stats', ...)``;
  ``nn.dropout`` -> ``nn.Dropout``; ``nn.make_rng()`` ->
  ``self.make_rng('dropout')``; ``nn.is_stochastic()`` ->
  ``self.has_rng('dropout')``; ``self.is_stateful()`` ->
  ``(self.is_mutable_collection('batch_stats') or 'batch_stats' in
  self.variables)`` (legacy is stateful in evaluation too);
  ``collection=`` / ``batch_stats=`` that are None in every run (flow.py)
  are the default collection and dropped.
* Legacy auto-names (one counter per parent across all module types;
  ``.shared()`` without a name takes a bare digit) are kept: where linen's
  per-type counter would name a submodule differently, an explicit
  ``name=`` is written; where the count depends on a loop or a condition,
  the names come from one ``itertools.count()`` in the body.

This module converts whole definitions (``convert_class`` /
``convert_function``); the body rewriter (``ApplyRewriter``) and what a
callee resolves to (``Resolver``) are rules/apply_rewriter.py's and
rules/resolver.py's, the auto-name plan rules/name_plan.py's.
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.rules import _shared
from flaxlegacy.upgrade.rules import apply_rewriter
from flaxlegacy.upgrade.rules import module_methods as module_methods_rule
from flaxlegacy.upgrade.rules import subclasses



def _field_annotation(default_src):
  if default_src is None:
    return 'Any'
  if default_src in ('True', 'False'):
    return 'bool'
  try:
    value = eval(default_src, {'__builtins__': {}})  # pylint: disable=eval-used
  except Exception:  # pylint: disable=broad-except
    return 'Any'
  for t in (int, float, str):
    if type(value) is t:  # pylint: disable=unidiomatic-typecheck
      return t.__name__
  return 'Any'


def _body_of(up, info, fn, methods_plan=None):
  """The rewritten ``__call__`` FunctionDef for ``fn`` (apply / function)."""
  rw = (methods_plan.rewriter(up, info, fn) if methods_plan is not None
        else apply_rewriter.ApplyRewriter(up, info, fn))
  body = walk.transform(fn.body, rw)
  ps = fn.params
  plist = list(ps.posonly_params) + list(ps.params)
  if info.kind == 'class':
    self_param = plist[0]
    plist = plist[1:]
  else:
    self_param = cst.Param(name=cst.Name('self'))
  call_params = [p for p in plist + list(ps.kwonly_params)
                 if p.name.value in info.call]
  if isinstance(ps.star_arg, cst.Param):
    # legacy *args: inputs of __call__ too; keyword-only stay so
    kwonly = [p for p in call_params if p in ps.kwonly_params]
    new_params = cst.Parameters(
        params=[self_param] + [p.with_changes(comma=cst.MaybeSentinel.DEFAULT)
                               for p in call_params if p not in kwonly],
        star_arg=ps.star_arg.with_changes(comma=cst.MaybeSentinel.DEFAULT),
        kwonly_params=[p.with_changes(comma=cst.MaybeSentinel.DEFAULT)
                       for p in kwonly])
  else:
    new_params = cst.Parameters(params=[self_param] + [
        p.with_changes(comma=cst.MaybeSentinel.DEFAULT) for p in call_params])
  prologue = []
  for f in rw.assigned_fields:
    prologue.append(cst.parse_statement(f'{f} = self.{f}\n'))
  if rw.used_dynamic:
    up.ctx.needed_imports.add('itertools')
    prologue.append(cst.parse_statement(
        f'{_shared.AUTONAME_VAR} = itertools.count()  # legacy auto-names: one '
        'counter for all submodules\n'))
  if prologue:
    stmts = list(body.body)
    at = 1 if stmts and cst_util.is_docstring(stmts[0]) else 0
    stmts[at:at] = prologue
    body = body.with_changes(body=stmts)
  compact = cst.Decorator(decorator=cst_util.expr(rw._prefix() + '.compact'))  # pylint: disable=protected-access
  return fn.with_changes(name=cst.Name('__call__'), params=new_params,
                         body=body, decorators=[compact],
                         leading_lines=fn.leading_lines), rw


def _fields(up, info):
  out = []
  seen_default = False
  for f in info.fields:
    if f in _shared.RESERVED_FIELDS:
      return None, f
    default = info.defaults.get(f)
    if default is not None:
      seen_default = True
    elif seen_default:
      # only a keyword-only legacy parameter (``*, conv``) has no default
      # after one with a default: a keyword-only field, as in legacy
      # (a plain one would be a dataclass TypeError at import)
      up.ctx.needed_imports.add('dataclasses')
      default = 'dataclasses.field(kw_only=True)'
    ann = _field_annotation(default)
    if ann == 'Any':
      up.ctx.needed_imports.add('typing.Any')
    if default is not None and default.lstrip().startswith(('[', '{')):
      # a list / dict default: a dataclass field needs a factory (a fresh
      # copy per instance; legacy shared one object, which only differs
      # for code that mutates it)
      up.ctx.needed_imports.add('dataclasses')
      default = f'dataclasses.field(default_factory=lambda: {default})'
    line = f'{f}: {ann}' + (f' = {default}' if default is not None else '')
    # The default is legacy source: the generic rules (flax.nn spelled out,
    # removed JAX names, TODOs on legacy layers) apply to it as to the body.
    out.append(walk.transform(cst.parse_statement(line + '\n'), up))
  if info.var_kw:
    up.ctx.needed_imports.add('dataclasses')
    up.ctx.needed_imports.add('typing.Any')
    out.append(cst.parse_statement(
        f'{info.var_kw}: Any = dataclasses.field(default_factory=dict)\n'))
  return out, None


def _linen_base(base, up):
  """linen's Module for a legacy ``nn.Module`` / ``nn.base.Module`` base
  spelled in a way the rewritten imports do not cover (``flax.nn.Module``
  under ``import flax``; ``nn.base``, which linen lacks), else None."""
  name = cst_util.dotted(base) or ''
  if name in ('flax.nn.Module', 'flax.deprecated.nn.Module',
              'flax.nn.base.Module', 'flax.deprecated.nn.base.Module'):
    return 'flax.linen.Module'
  if cst_util.legacy_attr(base, up.ctx.facts.nn_prefixes) == 'base.Module':
    return name[:-len('.base.Module')] + '.Module'
  return None


def convert_class(up, node, info, plain=False):
  """A legacy Module class -> a linen dataclass module."""
  if info.base != 'Module' and not plain:
    from flaxlegacy.upgrade.rules import subclasses  # pylint: disable=g-import-not-at-top
    return subclasses.convert(
        up, node, info, lambda n, i: convert_class(up, n, i, plain=True))
  from flaxlegacy.upgrade.rules import helpers  # pylint: disable=g-import-not-at-top
  legacy_methods = [s for s in node.body.body if isinstance(
      s, cst.FunctionDef) and s.name.value != 'apply']
  written = node  # the class as written (its line for the report)
  node = helpers.prepare_class(up, node)
  apply = None
  others = []
  for stmt in node.body.body:
    if isinstance(stmt, cst.FunctionDef) and stmt.name.value == 'apply':
      apply = stmt
    elif isinstance(stmt, cst.FunctionDef):
      others.append(stmt.name.value)
  if apply is None:
    up.todo(written, f'{info.name} has no apply method')
    return node
  fields, bad = _fields(up, info)
  if fields is None:
    up.todo(written, f'{info.name}: parameter {bad!r} cannot be a linen field')
    return node
  plan = None
  from flaxlegacy.upgrade.rules import methods  # pylint: disable=g-import-not-at-top
  if others or methods.assigns_self(apply):
    plan = methods.prepare(up, node, info, apply)
    if others and not plan.helpers and plan.why is None:
      # helpers that make modules for their caller (legacy seq2seq's
      # _create_modules): rewritten where they are (rules/helpers.py)
      plan = None
      node, others = helpers.convert_helpers(up, node, info, apply, others)
  call_fn, rw = _body_of(up, info, plan.apply if plan else apply, plan)
  helper_defs = plan.finish(up, node, info, rw) if plan else {}
  others = plan.left if plan else others
  new_body = []
  placed = False
  for stmt in node.body.body:
    if stmt is apply:
      if not placed:
        new_body.extend(fields)
        placed = True
      new_body.append(call_fn)
    else:
      new_body.append(helper_defs.get(id(stmt), stmt))
  # fields go right after the docstring
  if fields:
    new_body = [s for s in new_body if s not in fields]
    at = 1 if new_body and cst_util.is_docstring(new_body[0]) else 0
    new_body[at:at] = fields
  mms = [m for m in module_methods_rule.find(up, node)
         if m.name.value in others]
  if mms:
    body2, notes = module_methods_rule.convert(up, info, new_body, mms)
    if body2 is None:
      up.todo(written, f'{info.name}: {notes}')
    else:
      new_body = body2
      done = {m.name.value for m in mms}
      others = [o for o in others if o not in done]
      info.module_methods = sorted(done, key=[m.name.value for m in mms].index)
      for note in notes:
        up.rewrote(written, 'module_method', f'{info.name}.{note}')
  if others:
    up.todo(written, f'{info.name}: methods {others} are legacy module methods '
            'or helpers: check them by hand')
  up.rewrote(written, 'module_class', f'class {info.name}: apply -> fields '
             f'{info.fields} + __call__{tuple(info.call)}')
  up.ctx.report.modules.append(info.report())
  if rw.rename is not None:
    # names written in any method (helpers making submodules for apply)
    up.ctx.report.renames.append(rw.rename.entry(info, legacy_methods))
  bases = [b.with_changes(value=cst_util.expr(_linen_base(b.value, up)))
           if _linen_base(b.value, up) else b for b in node.bases]
  return node.with_changes(bases=bases,
                           body=node.body.with_changes(body=new_body))


def convert_function(up, node, info):
  """An ``@nn.module`` function -> a linen dataclass module class."""
  fields, bad = _fields(up, info)
  if fields is None:
    up.todo(node, f'{info.name}: parameter {bad!r} cannot be a linen field')
    return node
  call_fn, rw = _body_of(up, info, node)
  if rw.rename is not None:
    up.ctx.report.renames.append(rw.rename.entry(info, []))
  doc = []
  stmts = list(call_fn.body.body)
  if stmts and cst_util.is_docstring(stmts[0]):
    doc = [stmts[0]]
    call_fn = call_fn.with_changes(body=call_fn.body.with_changes(
        body=stmts[1:]))
  prefix = apply_rewriter.ApplyRewriter._prefix(up)  # pylint: disable=protected-access
  cls = cst.ClassDef(
      name=cst.Name(info.name),
      bases=[cst.Arg(value=cst_util.expr(prefix + '.Module'))],
      body=cst.IndentedBlock(body=doc + fields + [
          call_fn.with_changes(leading_lines=[cst.EmptyLine(indent=False)] if fields or
                               doc else [])]),
      leading_lines=node.leading_lines)
  up.rewrote(node, 'module_function', f'@nn.module {info.name} -> class')
  up.ctx.report.modules.append(info.report())
  return cls

