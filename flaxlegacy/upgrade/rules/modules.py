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
rules/resolver.py's, the auto-name plan rules/name_plan.py's.  What it
decides -- the fields (``Field``), the call method (``CallMethod``), a
class made from a function (``ModuleClass``), a legacy base
(``ModuleBase``) -- are plans (upgrade/plans.py) the rewriter's emitter
writes (``up.emit``, upgrade/emit/linen.py).
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.collectors import subclasses as subclass_facts
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


def _call_plan(up, info, fn, methods_plan=None):
  """The CallMethod plan for ``fn`` (apply / function), and the body's
  rewriter."""
  rw = (methods_plan.rewriter(up, info, fn) if methods_plan is not None
        else apply_rewriter.ApplyRewriter(up, info, fn))
  body = walk.transform(fn.body, rw)
  ps = fn.params
  plist = list(ps.posonly_params) + list(ps.params)
  self_param = None  # a function: the emitter adds ``self``
  if info.kind == 'class':
    self_param = plist[0]
    plist = plist[1:]
  call_params = [p for p in plist + list(ps.kwonly_params)
                 if p.name.value in info.call]
  star_arg, kwonly = None, ()
  if isinstance(ps.star_arg, cst.Param):
    # legacy *args: inputs too; keyword-only stay so
    star_arg = ps.star_arg
    kwonly = tuple(p for p in call_params if p in ps.kwonly_params)
  plan = plans.CallMethod(
      fn=fn, self_param=self_param, inputs=tuple(call_params), body=body,
      star_arg=star_arg, kwonly=kwonly,
      copied_fields=tuple(rw.assigned_fields),
      autoname_counter=_shared.AUTONAME_VAR if rw.used_dynamic else None,
      autoname_frame=rw.stack_role == 'body')
  return plan, rw


def _body_of(up, info, fn, methods_plan=None):
  """The rewritten ``__call__`` FunctionDef for ``fn`` (apply / function)."""
  plan, rw = _call_plan(up, info, fn, methods_plan)
  return up.emit.call_method(plan), rw


def _field_plans(info):
  """(Field plans of a module's hyper-parameters, None), or (the plans of
  the fields ahead of it, the name a field cannot take)."""
  out = []
  seen_default = False
  for f in info.fields:
    if f in _shared.RESERVED_FIELDS:
      return out, f
    default = info.defaults.get(f)
    kw_only = False
    if default is not None:
      seen_default = True
    elif seen_default:
      # only a keyword-only legacy parameter (``*, conv``) has no default
      # after one with a default: a keyword-only field, as in legacy
      # (a plain one would be a dataclass TypeError at import)
      kw_only = True
    # a list / dict default: a fresh copy per instance (legacy shared one
    # object, which only differs for code that mutates it)
    out.append(plans.Field(
        name=f, annotation=_field_annotation(default), default=default,
        kw_only=kw_only, fresh_default=default is not None
        and default.lstrip().startswith(('[', '{'))))
  if info.var_kw:
    out.append(plans.Field(name=info.var_kw, catch_all=True))
  return out, None


def _param_comments(params):
  """name -> the comments written with each parameter (``k=3,  # why`` on
  its own line) of ``params`` ({name: Param})."""
  out = {}
  for name, p in params.items():
    found = cst_util.comments(p)
    if found:
      out[name] = found
  return out


def _with_comments(stmt, comments):
  """A field statement carrying its legacy parameter's comments: the
  first at the end of its line, any others on lines above it."""
  lines = list(stmt.leading_lines) + [
      cst.EmptyLine(indent=True, comment=cst.Comment(c))
      for c in comments[1:]]
  return stmt.with_changes(
      leading_lines=lines, trailing_whitespace=cst.TrailingWhitespace(
          whitespace=cst.SimpleWhitespace('  '),
          comment=cst.Comment(comments[0])))


def _fields(up, info, fn):
  """The field statements of a module (its Field plans written by the
  emitter; each with the comments written with its legacy parameter in
  ``fn``), or (None, the name a field cannot take)."""
  field_plans, bad = _field_plans(info)
  params = {p.name.value: p for p in cst_util.all_params(fn.params)}
  comments = _param_comments(params)
  out = []
  for plan in field_plans:
    stmt = up.emit.field(plan)
    if plan.name in params:
      # a TODO in the field's default reports the parameter's written line
      cst_util.record_origin(getattr(up.ctx, 'origins', None),
                             params[plan.name], stmt)
    if not plan.catch_all:
      # The default is legacy source: the generic rules (flax.nn spelled
      # out, removed JAX names, TODOs on legacy layers) apply to it as to
      # the body.
      stmt = walk.transform(stmt, up)
    if comments.get(plan.name) and isinstance(stmt, cst.SimpleStatementLine):
      stmt = _with_comments(stmt, comments[plan.name])
    out.append(stmt)
  if bad is not None:
    return None, bad
  return out, None


def _kept_decorators(up, written, name, info, decorators, call_fn):
  """``call_fn`` with ``decorators`` -- the ones legacy's ``apply`` or
  ``@nn.module`` function carried besides ``nn.module`` (gfsa's
  ``@gin.configurable("Name")``) -- kept under ``compact``, and a TODO: what
  they wrap saw every hyper-parameter, and the ones that are fields now are
  out of their reach (a gin binding of one fails).  Not where the lone
  ``@gin.configurable`` goes on the class (``info.gin_class``:
  collectors/gin_classes.py; ``_class_decorators``)."""
  if not decorators or info.gin_class is not None:
    return call_fn
  srcs = ', '.join('@' + cst_util.code(d.decorator) for d in decorators)
  why = info.gin_why
  up.todo(written, f'{name} is decorated ({srcs}): kept on __call__, which '
          f'takes {tuple(info.call)} now; the fields are out of its reach (a '
          'gin binding of one fails)' + (f'; not on the class: {why}'
                                          if why else '') + ': port by hand')
  return call_fn.with_changes(
      decorators=list(call_fn.decorators) + list(decorators))


def _class_decorators(up, written, info, decorators, cls):
  """``cls`` with legacy's lone ``@gin.configurable(...)`` of ``apply``
  (of the ``@nn.module`` function) on it, where gin_classes.py decided so:
  gin then wraps the dataclass ``__init__`` and gives the fields where the
  module is built, under the same configurable name."""
  if not decorators or info.gin_class is None:
    return cls
  moved = (f'; made fields (gin gives them): {info.gin_class}'
           if info.gin_class else '')
  up.rewrote(written, 'gin_class', f'{info.name}: '
             f'@{cst_util.code(decorators[0].decorator)} on the class (gin '
             f'gives its fields at construction){moved}')
  return cls.with_changes(decorators=list(cls.decorators) + list(decorators))


def _is_nn_module_decorator(up, decorator):
  """Whether ``decorator`` is legacy's ``@nn.module``."""
  name = cst_util.dotted(decorator.decorator) or ''
  return name in ('flax.nn.module', 'flax.deprecated.nn.module') or (
      cst_util.legacy_attr(decorator.decorator,
                           up.ctx.facts.nn_prefixes) == 'module')


def _module_base(base, up):
  """The ModuleBase plan of a base Arg that is legacy's ``nn.Module`` /
  ``nn.base.Module`` spelled in a way the rewritten imports do not cover
  (``flax.nn.Module`` under ``import flax``; ``nn.base``, which linen
  lacks), else None."""
  name = cst_util.dotted(base.value) or ''
  if name in ('flax.nn.Module', 'flax.deprecated.nn.Module',
              'flax.nn.base.Module', 'flax.deprecated.nn.base.Module'):
    return plans.ModuleBase(base=base, dotted=name, spelled_out=True)
  if cst_util.legacy_attr(base.value, up.ctx.facts.nn_prefixes) == 'base.Module':
    return plans.ModuleBase(base=base, dotted=name, spelled_out=False)
  return None


def convert_class(up, node, info, plain=False):
  """A legacy Module class -> a linen dataclass module."""
  if info.base != 'Module' and not plain:
    from flaxlegacy.upgrade.rules import subclasses  # pylint: disable=g-import-not-at-top
    return subclasses.convert(
        up, node, info, lambda n, i: convert_class(up, n, i, plain=True))
  from flaxlegacy.upgrade.rules import helpers  # pylint: disable=g-import-not-at-top
  legacy_methods = [s for s in node.body.body if isinstance(
      s, cst.FunctionDef) and s.name.value != 'apply'
                    and not subclass_facts.is_class_level(s)]
  written = node  # the class as written (its line for the report)
  node = helpers.prepare_class(up, node)
  apply = None
  others = []
  class_level = []
  for stmt in node.body.body:
    if isinstance(stmt, cst.FunctionDef) and stmt.name.value == 'apply':
      apply = stmt
    elif isinstance(stmt, cst.FunctionDef) and subclass_facts.is_class_level(
        stmt):
      class_level.append(stmt)
    elif isinstance(stmt, cst.FunctionDef):
      others.append(stmt.name.value)
  if apply is None:
    if class_level and not others and info.base == 'Module':
      # an abstract base of module classes holding only factories
      # (classmethods building ``cls.partial(...)``): a linen Module with
      # no fields and no __call__, its classmethods kept
      up.rewrote(written, 'module_class', f'class {info.name}: no apply, '
                 'classmethods only: an abstract linen Module base')
      return _with_class_level(up, node, info, class_level)
    up.todo(written, f'{info.name} has no apply method')
    return node
  fields, bad = _fields(up, info, apply)
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
  call_fn = _kept_decorators(up, written, f'{info.name}.apply', info,
                             apply.decorators, call_fn)
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
  converted = []  # the @nn.module_method methods converted, for the report
  if mms:
    body2, notes = module_methods_rule.convert(up, info, new_body, mms)
    if body2 is None:
      up.todo(written, f'{info.name}: {notes}')
    else:
      new_body = body2
      done = {m.name.value for m in mms}
      others = [o for o in others if o not in done]
      converted = sorted(done, key=[m.name.value for m in mms].index)
      for note in notes:
        up.rewrote(written, 'module_method', f'{info.name}.{note}')
  if others:
    up.todo(written, f'{info.name}: methods {others} are legacy module methods '
            'or helpers: check them by hand')
  up.rewrote(written, 'module_class', f'class {info.name}: apply -> fields '
             f'{info.fields} + __call__{tuple(info.call)}')
  up.ctx.report.modules.append(info.report(methods=converted))
  if rw.rename is not None:
    # names written in any method (helpers making submodules for apply)
    up.ctx.report.renames.append(rw.rename.entry(info, legacy_methods))
  bases = [b if _module_base(b, up) is None
           else up.emit.module_base(_module_base(b, up)) for b in node.bases]
  new = node.with_changes(bases=bases,
                          body=node.body.with_changes(body=new_body))
  new = _class_decorators(up, written, info, apply.decorators, new)
  return _with_class_level(up, new, info, class_level)


# -- classmethods / staticmethods of module classes --------------------------
# (factories: ``return cls.partial(**hparams)``; they are no part of what the
# module computes, so they stay methods of the linen class, their bodies
# rewritten by the program rules as any function's: flow.py binds ``cls``
# to the classes they are called on)


def _with_class_level(up, node, info, class_level):
  """``node`` with its classmethods / staticmethods (``class_level``, as
  they were in the class body) rewritten by the program rules."""
  if not class_level:
    return node
  ids = {id(s) for s in class_level}
  body = []
  for stmt in node.body.body:
    if id(stmt) in ids:
      up._quals.append(info.name)  # pylint: disable=protected-access
      try:
        stmt = stmt.visit(up)
      finally:
        up._quals.pop()  # pylint: disable=protected-access
    body.append(stmt)
  return node.with_changes(body=node.body.with_changes(body=body))


def convert_function(up, node, info):
  """An ``@nn.module`` function -> a linen dataclass module class."""
  fields, bad = _fields(up, info, node)
  if fields is None:
    up.todo(node, f'{info.name}: parameter {bad!r} cannot be a linen field')
    return node
  call_plan, rw = _call_plan(up, info, node)
  if rw.rename is not None:
    up.ctx.report.renames.append(rw.rename.entry(info, []))
  cls = up.emit.module_class(plans.ModuleClass(
      name=info.name, fields=tuple(fields), call=call_plan,
      leading_lines=node.leading_lines))
  others = [d for d in node.decorators if not _is_nn_module_decorator(up, d)]
  if others:
    body = [_kept_decorators(up, node, f'@nn.module {info.name}', info,
                             others, stmt)
            if isinstance(stmt, cst.FunctionDef)
            and stmt.name.value == '__call__' else stmt
            for stmt in cls.body.body]
    cls = cls.with_changes(body=cls.body.with_changes(body=body))
    cls = _class_decorators(up, node, info, others, cls)
  up.rewrote(node, 'module_function', f'@nn.module {info.name} -> class')
  up.ctx.report.modules.append(info.report())
  return cls

