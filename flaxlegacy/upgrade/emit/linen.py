"""The linen emitter: plans (upgrade/plans.py) -> libcst nodes of linen code.

``LinenEmitter`` holds the rewriter it writes for, and reads only how the
file spells linen (its ``_prefix()``, from the legacy ``nn`` prefix) and
the file's context, to add the imports its text needs
(``ctx.needed_imports``) and print user expressions (``ctx.code_of``).  It
decides nothing about the legacy code: every choice it makes is a linen
spelling of what the plan says (legacy keywords renamed to linen's, the
keywords linen needs for the legacy numbers, ``self.variable`` for a
variable, ``@nn.compact`` on the call method ...).  It writes no TODO and
no report entry: those are the rule's.

The layer helpers below (``layer_kwarg``, ``add_layer_defaults``,
``renamed_kwargs``) are linen spellings of a legacy layer's keywords
(a submodule call's, a ``.partial``'s).
"""

import dataclasses
import re
import weakref

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade.collectors.programs import OPTAX  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.collectors.programs import OPTAX_FIXED  # pylint: disable=g-importing-member
from flaxlegacy.upgrade import facts as facts_lib
from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade import walk


def renamed_kwargs(layer, value):
  """``**kwargs`` forwarded to a legacy layer, with legacy keys (``bias``)
  renamed to linen's (``use_bias``) when the call runs."""
  renames = {k: v for k, v in layer.renames.items() if k in layer.params}
  if not renames:
    return value
  table = '{' + ', '.join(f'{k!r}: {v!r}' for k, v in renames.items()) + '}'
  src = cst.Module([]).code_for_node(value)
  if not isinstance(value, (cst.Name, cst.Attribute)):
    src = f'({src})'
  return cst_util.expr(f'{{{table}.get(k, k): v for k, v in {src}.items()}}')


def layer_kwarg(a, layer):
  """A legacy layer's keyword argument under linen's keyword."""
  k = cst_util.kw(a)
  if k is None or k == 'name':
    return a
  return a.with_changes(keyword=cst.Name(layer_table.linen_kwarg(layer, k)))


def add_layer_defaults(layer, args):
  """``args`` and the keywords linen needs for the legacy numbers that
  the call does not pass (layer_table.py ``add_kwargs``)."""
  have = {cst_util.kw(a) for a in args}
  out = list(args)
  for k, v in layer.add_kwargs.items():
    if k not in have:
      out.append(cst_util.arg(cst_util.expr(v), k))
  return out


class LinenEmitter:
  """Writes plans as linen + optax code."""

  target = 'linen'
  # the module that takes legacy ``flax.nn``'s place, imported under the
  # legacy local name (rules/imports.py): names linen spells the same
  # (``nn.relu``, ``nn.initializers``) need no change
  nn_module = 'flax.linen'

  def __init__(self, rw):
    # the rewriter it writes for (spelling and file context), held weakly:
    # the rewriter holds its emitter, and a cycle would keep every
    # rewriter's tree alive until the collector's rare full pass
    self._rw = weakref.ref(rw)
    self._ctx = rw.ctx

  @property
  def rw(self):
    return self._rw()

  def _prefix(self):
    return self._rw()._prefix()  # pylint: disable=protected-access

  # -- constructions --
  def module_expr(self, ref):
    """The constructor expression of a ModuleRef."""
    layer = ref.layer
    if layer is None:
      return ref.expr
    if ref.shipped is not None:
      # a flaxlegacy linen layer (layer_table.py SHIPPED)
      self._ctx.needed_imports.add(ref.shipped.rsplit('.', 1)[0])
      return cst_util.expr(layer.linen)
    if ref.user_subclass:
      return ref.expr  # the user's subclass of a layer (StdConv)
    return ref.expr if isinstance(ref.expr, cst.Attribute) else cst_util.expr(
        self._prefix() + '.' + layer.linen)

  def name(self, auto):
    """The ``name=`` value of an AutoName."""
    if auto.given is not None:
      # ``p if p is not None else <auto-name>``
      return cst.IfExp(
          test=cst.Comparison(left=auto.given, comparisons=[
              cst.ComparisonTarget(cst.IsNot(), cst.Name('None'))]),
          body=auto.given,
          orelse=self.name(dataclasses.replace(auto, given=None)))
    if auto.literal is not None:
      return cst.SimpleString(repr(auto.literal))
    if auto.bare:
      return cst_util.expr(f'str(next({auto.counter}))')
    if auto.type_name is None:
      return cst_util.expr(
          f"f'{{{auto.ctor_src}.__name__}}_{{next({auto.counter})}}'")
    return cst_util.expr(f"f'{auto.type_name}_{{next({auto.counter})}}'")

  def _layer_ctor(self, layer, hypers, direct):
    ctor, positional_ok = [], direct
    for h in hypers:
      k, a = h.key, h.arg
      if k == 'name':
        ctor.append(a)
        continue
      if k == '**':
        positional_ok = False
        ctor.append(a.with_changes(value=renamed_kwargs(layer, a.value)))
        continue
      idx = layer.params.index(k)
      lk = layer_table.linen_kwarg(layer, k)
      if (positional_ok and a.keyword is None and idx < len(
          layer.linen_fields) and layer.linen_fields[idx] == lk):
        ctor.append(a)
      else:
        positional_ok = False
        ctor.append(cst_util.arg(a.value, lk).with_changes(comma=a.comma))
    if direct:
      ctor = add_layer_defaults(layer, ctor)
    return ctor

  @staticmethod
  def _call_args(plan):
    """The arguments a SubmoduleCall's module is called with (a layer
    takes its inputs positionally)."""
    if plan.layer is not None:
      return [a.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)
              for a in plan.inputs]
    return list(plan.inputs)

  def _submodule_ctor(self, plan):
    """The constructor call ``Ctor(hypers..., name=)`` of a
    SubmoduleCall."""
    if plan.layer is not None:
      ctor = self._layer_ctor(plan.layer, plan.hypers, plan.direct_layer)
    else:
      ctor = []
      for h in plan.hypers:
        a = h.arg
        ctor.append(a if a.keyword is not None or h.key == '**'
                    else cst_util.arg(a.value, h.key))
      if plan.catch_all is not None:
        field, items = plan.catch_all
        src = ', '.join(f'{k!r}: {self._ctx.code_of(v)}' for k, v in items)
        ctor.append(cst_util.arg(cst_util.expr('{' + src + '}'), field))
    if plan.name is not None:
      ctor = list(ctor) + [cst_util.arg(self.name(plan.name), 'name')]
    return cst.Call(func=self.module_expr(plan.module),
                    args=cst_util.clean_args(ctor))

  def submodule_call(self, plan):
    """SubmoduleCall -> ``Ctor(hypers..., name=)(inputs...)``."""
    return cst.Call(func=self._submodule_ctor(plan),
                    args=cst_util.clean_args(self._call_args(plan)))

  def instance(self, plan):
    """Instance -> ``Ctor(hypers..., name=)``."""
    args = [h.arg for h in plan.hypers]
    if plan.layer is None:
      kwargs = args
    else:
      kwargs = add_layer_defaults(
          plan.layer, [layer_kwarg(a, plan.layer) for a in args])
    if plan.name is not None:
      kwargs = list(kwargs) + [cst_util.arg(self.name(plan.name), 'name')]
    return cst.Call(func=self.module_expr(plan.module),
                    args=cst_util.clean_args(kwargs))

  # -- randomness, parameters, variables --
  def dropout(self, plan):
    """Dropout -> ``nn.Dropout(rate=, deterministic=)(x[, rng=])``."""
    # linen's Dropout has no default for deterministic; legacy's was False
    ctor = [cst_util.arg(plan.rate, 'rate'),
            cst_util.arg(plan.deterministic if plan.deterministic is not None
                         else cst_util.expr('False'), 'deterministic')]
    call = [cst_util.arg(plan.inputs)]
    if plan.rng is not None:
      call.append(cst_util.arg(plan.rng, 'rng'))
    return cst.Call(func=cst.Call(
        func=cst_util.expr(self._prefix() + '.Dropout'),
        args=cst_util.clean_args(ctor)), args=cst_util.clean_args(call))

  def rng_draw(self, plan):
    return cst_util.expr(f'self.make_rng({plan.stream!r})')

  def has_rng(self, plan):
    return cst_util.expr(f'self.has_rng({plan.stream!r})')

  def param(self, plan):
    """Param -> ``self.param(name, init, shape)`` (linen's order)."""
    new = [a.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)
           for a in (plan.name, plan.initializer, plan.shape)]
    return plan.call.with_changes(args=cst_util.clean_args(new))

  def variable(self, plan):
    """Variable -> ``self.variable(collection, name, init_fn, *args)``."""
    code = self._ctx.code_of
    c = plan.collection
    if plan.write_only:
      return cst_util.expr(f'self.variable({c!r}, {code(plan.name)}, '
                           'lambda: None)')
    init = plan.initializer
    init_src = 'nn.initializers.zeros' if init is None else code(init)
    shape = code(plan.shape)
    if init is None or init_src.split('.')[-1] in ('zeros', 'ones'):
      # zeros / ones take no key: called with None
      new = (f'self.variable({c!r}, {code(plan.name)}, '
             f'{init_src}, None, {shape})')
      if init is None:
        new = new.replace('nn.initializers.zeros',
                          self._prefix() + '.initializers.zeros')
    else:
      new = (f'self.variable({c!r}, {code(plan.name)}, '
             f"lambda: {init_src}(self.make_rng('params'), {shape}))")
    return cst_util.expr(new)

  def is_stateful(self, plan):
    c = plan.collection
    return cst_util.expr(f'(self.is_mutable_collection({c!r}) or '
                         f'{c!r} in self.variables)')

  # -- module definitions --
  def _prologue(self, body, prologue, counter, frame=False):
    """``body`` with ``prologue`` statements (and the auto-name counter,
    when ``counter`` names it: the method's frame's with ``frame``) first,
    after its docstring."""
    prologue = list(prologue)
    if counter is not None and frame:
      self._ctx.needed_imports.add(AUTONAME_IMPORT)
      prologue.append(cst.parse_statement(
          f'{counter} = {AUTONAME_COUNTER}  # legacy auto-names: one '
          'counter for all submodules, also those built by the functions '
          'this calls\n'))
    elif counter is not None:
      self._ctx.needed_imports.add('itertools')
      prologue.append(cst.parse_statement(
          f'{counter} = itertools.count()  # legacy auto-names: '
          'one counter for all submodules\n'))
    if prologue:
      stmts = list(body.body)
      at = 1 if stmts and cst_util.is_docstring(stmts[0]) else 0
      stmts[at:at] = prologue
      body = body.with_changes(body=stmts)
    return body

  def field(self, plan):
    """Field -> a dataclass field statement (``name: ann = default``)."""
    needed = self._ctx.needed_imports
    if plan.catch_all:
      needed.add('dataclasses')
      needed.add('typing.Any')
      return cst.parse_statement(
          f'{plan.name}: Any = dataclasses.field(default_factory=dict)\n')
    default = plan.default
    if plan.kw_only:
      needed.add('dataclasses')
      default = 'dataclasses.field(kw_only=True)'
    if plan.annotation == 'Any':
      needed.add('typing.Any')
    if plan.fresh_default:
      # a fresh copy per instance (legacy shared one object)
      needed.add('dataclasses')
      default = f'dataclasses.field(default_factory=lambda: {default})'
    line = f'{plan.name}: {plan.annotation}' + (
        f' = {default}' if default is not None else '')
    return cst.parse_statement(line + '\n')

  def call_method(self, plan):
    """CallMethod -> ``@nn.compact def __call__(self, inputs...)``."""
    self_param = (plan.self_param if plan.self_param is not None
                  else cst.Param(name=cst.Name('self')))
    if plan.star_arg is not None:
      # legacy *args: inputs of __call__ too; keyword-only stay so
      kwonly = list(plan.kwonly)
      params = cst.Parameters(
          params=[self_param] + [cst_util.without_comma(p)
                                 for p in plan.inputs if p not in kwonly],
          star_arg=cst_util.without_comma(plan.star_arg),
          kwonly_params=[cst_util.without_comma(p) for p in kwonly])
    else:
      params = cst.Parameters(params=[self_param] + [
          cst_util.without_comma(p) for p in plan.inputs])
    prologue = [cst.parse_statement(f'{f} = self.{f}\n')
                for f in plan.copied_fields]
    body = self._prologue(plan.body, prologue, plan.autoname_counter,
                          plan.autoname_frame)
    compact = cst.Decorator(decorator=cst_util.expr(self._prefix() + '.compact'))
    decorators = [compact]
    if plan.autoname_frame:
      self._ctx.needed_imports.add(AUTONAME_IMPORT)
      decorators.append(cst.Decorator(decorator=cst_util.expr(AUTONAME_FRAME)))
    return plan.fn.with_changes(name=cst.Name('__call__'), params=params,
                                body=body, decorators=decorators,
                                leading_lines=plan.fn.leading_lines)

  def module_class(self, plan):
    """ModuleClass -> ``class Name(nn.Module):`` fields + call method."""
    call = self.call_method(plan.call)
    doc = []
    stmts = list(call.body.body)
    if stmts and cst_util.is_docstring(stmts[0]):
      doc = [stmts[0]]  # the function's docstring documents the class
      call = call.with_changes(body=call.body.with_changes(body=stmts[1:]))
    fields = list(plan.fields)
    call = call.with_changes(
        leading_lines=[cst.EmptyLine(indent=False)] if fields or doc else [])
    return cst.ClassDef(
        name=cst.Name(plan.name),
        bases=[cst.Arg(value=cst_util.expr(self._prefix() + '.Module'))],
        body=cst.IndentedBlock(body=doc + fields + [call]),
        leading_lines=plan.leading_lines)

  def module_base(self, plan):
    """ModuleBase -> the base Arg spelled as linen's Module."""
    if plan.spelled_out:
      new = 'flax.linen.Module'
    else:
      new = plan.dotted[:-len('.base.Module')] + '.Module'
    return plan.base.with_changes(value=cst_util.expr(new))

  # -- module methods --
  def module_method(self, plan):
    """ModuleMethod -> a plain method (linen has no module_method)."""
    body = self._prologue(plan.body, [], plan.autoname_counter)
    return plan.fn.with_changes(decorators=[], params=plan.params, body=body)

  def setup(self, plan):
    """Setup -> ``def setup(self): self.<attr> = <construction>``."""
    lines = []
    for attr, built in plan.submodules:
      if isinstance(built, plans.SubmoduleCall):
        built = self._submodule_ctor(built)
      elif isinstance(built, plans.Instance):
        built = self.instance(built)
      lines.append(cst.parse_statement(
          f'self.{attr} = {cst.Module([]).code_for_node(built)}\n'))
    return cst.FunctionDef(
        name=cst.Name('setup'),
        params=cst.Parameters(params=[cst.Param(name=cst.Name('self'))]),
        body=cst.IndentedBlock(body=lines),
        leading_lines=[cst.EmptyLine(indent=False)])

  def submodule_attr(self, plan):
    """SubmoduleAttr -> ``self.<attr>``, or ``self.<attr>(inputs...)``."""
    attr = cst.Attribute(value=cst.Name('self'), attr=cst.Name(plan.attr))
    if plan.call is None:
      return attr
    return cst.Call(func=attr,
                    args=cst_util.clean_args(self._call_args(plan.call)))

  def shared_scope(self, plan):
    """SharedScope -> the one compact method the entry points run in
    (linen allows one compact method per class)."""
    names = ', '.join(plan.entry_points)
    return cst.FunctionDef(
        name=cst.Name(plan.name),
        params=cst.Parameters(
            params=[cst.Param(name=cst.Name('self')),
                    cst.Param(name=cst.Name('method'))],
            star_arg=cst.Param(name=cst.Name('args')),
            star_kwarg=cst.Param(name=cst.Name('kwargs'))),
        decorators=[plan.decorator],
        body=cst.IndentedBlock(body=[cst.SimpleStatementLine(
            [cst.Return(value=cst_util.expr('method(*args, **kwargs)'))],
            leading_lines=[cst.EmptyLine(comment=cst.Comment(c)) for c in (
                '# linen allows one compact method: ' + names + ' run their',
                '# legacy bodies through this one, so they build and share the',
                '# same submodules, under the names legacy gave them')])]),
        leading_lines=[cst.EmptyLine(indent=False)])

  def scoped_method(self, plan):
    """ScopedMethod -> (the public method forwarding to the scope, the
    private method holding the body)."""
    fn = plan.fn
    ps = fn.params
    plist = list(ps.posonly_params) + list(ps.params)
    self_name = plist[0].name.value
    args = [cst.Arg(value=cst.Name(p.name.value)) for p in plist[1:]]
    if isinstance(ps.star_arg, cst.Param):
      args.append(cst.Arg(value=cst.Name(ps.star_arg.name.value), star='*'))
    args += [cst.Arg(keyword=cst.Name(p.name.value),
                     value=cst.Name(p.name.value)) for p in ps.kwonly_params]
    if ps.star_kwarg is not None:
      args.append(cst.Arg(value=cst.Name(ps.star_kwarg.name.value), star='**'))
    args = [cst.Arg(value=cst_util.expr(f'{self_name}.{plan.body_name}'))
            ] + args
    call = cst.Call(func=cst_util.expr(f'{self_name}.{plan.scope}'),
                    args=args)
    stmts = list(fn.body.body)
    doc = []
    if stmts and cst_util.is_docstring(stmts[0]):
      doc, stmts = [stmts[0]], stmts[1:]
    if not stmts:
      stmts = [cst.SimpleStatementLine([cst.Pass()])]
    public = fn.with_changes(
        decorators=[d for d in fn.decorators
                    if id(d) not in plan.drop_decorators],
        body=fn.body.with_changes(body=doc + [cst.SimpleStatementLine(
            [cst.Return(value=call)])]))

    def bare(p):
      return p.with_changes(default=None, equal=cst.MaybeSentinel.DEFAULT)

    inner_params = ps.with_changes(
        posonly_params=[bare(p) for p in ps.posonly_params],
        params=[bare(p) for p in ps.params],
        kwonly_params=[bare(p) for p in ps.kwonly_params])
    inner = fn.with_changes(
        name=cst.Name(plan.body_name), decorators=[], params=inner_params,
        body=fn.body.with_changes(body=stmts),
        leading_lines=[cst.EmptyLine(indent=False)])
    return public, inner

  # -- partials and splatted dicts (rules/partials.py, rules/splat.py) --
  def partial_module(self, plan):
    """PartialModule -> ``functools.partial(M, k=v, ...)`` (a layer's
    keywords as linen's), or flaxlegacy's ``partial_module(X, ...)``
    where the class X holds splits them when the code runs."""
    args = [h.arg for h in plan.hypers]
    layer = plan.layer
    if layer is not None:
      args = [layer_kwarg(a, layer) for a in args]
      if plan.direct_layer:
        args = add_layer_defaults(layer, args)
      args = [a.with_changes(value=renamed_kwargs(layer, a.value))
              if a.star == '**' else a for a in args]
    if plan.renamed_for:
      # the layers' linen classes: the keywords renamed where X is one
      self._ctx.needed_defs[RENAMED_PARTIAL_HELPER] = (
          RENAMED_PARTIAL_HELPER_SRC)
      code = cst.Module([]).code_for_node
      classes = [code(self.layer_base(plans.LayerBase(layer=layer)))
                 for layer in plan.renamed_for]
      layers = cst_util.expr('(' + ', '.join(classes) + (
          ',)' if len(classes) == 1 else ')'))
      table = cst_util.expr('{' + ', '.join(
          f'{k!r}: {v!r}' for k, v in plan.renames) + '}')
      return cst.Call(func=cst.Name(RENAMED_PARTIAL_HELPER),
                      args=cst_util.clean_args(
                          [cst_util.arg(self.module_expr(plan.module)),
                           cst_util.arg(layers), cst_util.arg(table)]
                          + args))
    if plan.runtime:
      self._ctx.needed_imports.add(PARTIAL_HELPER)
      func = PARTIAL_HELPER.rsplit('.', 1)[1]
    else:
      self._ctx.needed_imports.add('functools')
      func = 'functools.partial'
    return cst.Call(func=cst_util.expr(func), args=cst_util.clean_args(
        [cst_util.arg(self.module_expr(plan.module))] + args))

  def catch_all_dict(self, plan):
    """CatchAllDict -> ``{'k': v, ...}`` / ``{**base, 'k': v, ...}``."""
    code = self._ctx.code_of
    items = ', '.join(f'{k!r}: {code(v)}' for k, v in plan.items)
    if plan.base is not None:
      return cst_util.expr(f'{{**{code(plan.base)}, {items}}}')
    return cst_util.expr('{' + items + '}')

  def split_kwargs(self, plan):
    """SplitKwargs -> ``_legacy_kwargs(d, names[, catch_all[, extra]][,
    elsewhere=])``, the helper written once into the file (plain
    Python)."""
    args = [_fresh_code(plan.value), _names_tuple(plan.names)]
    if plan.catch_all is not None:
      args.append(repr(plan.catch_all))
      if plan.extra:
        code = self._ctx.code_of
        args.append('{' + ', '.join(f'{k!r}: {code(v)}'
                                    for k, v in plan.extra) + '}')
    if plan.elsewhere is not None:
      args.append(f'elsewhere={_names_tuple(plan.elsewhere)}')
    self._ctx.needed_defs[SPLIT_HELPER] = SPLIT_HELPER_SRC
    return cst_util.expr(f'{SPLIT_HELPER}({", ".join(args)})')

  # -- a submodule whose class is known at run time --
  def runtime_submodule_call(self, plan):
    """RuntimeSubmoduleCall -> ``_legacy_module_call(cls, x, k=v, ...,
    name=)``, the helper written once into the file (plain linen)."""
    kwargs = list(plan.keywords)
    if plan.name is not None:
      kwargs.append(cst.Arg(value=self.name(plan.name),
                            keyword=cst.Name('name'),
                            equal=cst.AssignEqual(
                                whitespace_before=cst.SimpleWhitespace(''),
                                whitespace_after=cst.SimpleWhitespace(''))))
    self._ctx.needed_defs[RUNTIME_CALL_HELPER] = RUNTIME_CALL_HELPER_SRC
    return cst.Call(func=cst.Name(RUNTIME_CALL_HELPER), args=[
        cst.Arg(value=plan.module)] + [
            a.with_changes(comma=cst.MaybeSentinel.DEFAULT)
            for a in [plan.input] + kwargs])

  # -- legacy recurrent cells --
  def _cell_ctor(self, plan, func=None):
    """``legacy_cells.<Cell>(hypers..., name=)`` of a RecurrentCell (the
    shipped subclass whose ``features`` the carry gives)."""
    self._ctx.needed_imports.add(CELLS_IMPORT)
    args = list(plan.hypers)
    if plan.name is not None:
      args.append(cst_util.arg(self.name(plan.name), 'name'))
    if func is None:
      func = cst_util.expr(f'{CELLS}.{plan.cell}')
    return cst.Call(func=func, args=cst_util.clean(args))

  def recurrent_cell(self, plan):
    """RecurrentCell -> ``legacy_cells.<Cell>(...)`` [``(carry, x)``]."""
    ctor = self._cell_ctor(plan)
    if plan.inputs is None:
      return ctor
    return cst.Call(func=ctor, args=cst_util.clean(
        [a.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)
         for a in plan.inputs]))

  def cell_partial(self, plan):
    """CellPartial -> ``functools.partial(legacy_cells.<Cell>, ...)``."""
    self._ctx.needed_imports.add(CELLS_IMPORT)
    self._ctx.needed_imports.add('functools')
    return cst.Call(func=cst_util.expr('functools.partial'),
                    args=cst_util.clean_args(
                        [cst.Arg(cst_util.expr(f'{CELLS}.{plan.cell}'))]
                        + list(plan.hypers)))

  def cell_partial_call(self, plan):
    """CellPartialCall -> ``local(**kw[, name=])(carry, inputs)``."""
    args = list(plan.hypers)
    if plan.name is not None:
      args.append(cst_util.arg(self.name(plan.name), 'name'))
    return cst.Call(
        func=cst.Call(func=plan.callee, args=cst_util.clean_args(args)),
        args=cst_util.clean_args(
            [a.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)
             for a in plan.inputs]))

  def cell_scan(self, plan):
    """CellScan -> ``nn.scan(legacy_cells.<Cell>, variable_broadcast=
    'params', split_rngs={'params': False}[, in_axes=, out_axes=])(...)(
    init, xs)``."""
    axes = (f', in_axes={plan.axis}, out_axes={plan.axis}' if plan.axis
            else '')
    lifted = cst_util.expr(
        f"{self._prefix()}.scan({CELLS}.{plan.cell.cell}, "
        f"variable_broadcast='params', split_rngs={{'params': False}}{axes})")
    return cst.Call(func=self._cell_ctor(plan.cell, lifted),
                    args=cst_util.clean([cst.Arg(value=plan.init),
                                         cst.Arg(value=plan.xs)]))

  def cell_carry(self, plan):
    """CellCarry -> ``nn.LSTMCell(size, parent=None).initialize_carry(rng,
    batch_dims + (size,))`` (``parent=None``: a throw-away cell, no
    submodule, no auto-name; ``carry_init`` for another initializer)."""
    ctor_args = [cst.Arg(value=plan.size),
                 cst_util.arg(cst_util.expr('None'), 'parent')]
    if plan.init is not None:
      ctor_args.append(cst_util.arg(plan.init, 'carry_init'))
    rng = plan.rng
    if rng is None:
      rng = cst_util.expr('jax.random.PRNGKey(0)')
      self._ctx.needed_imports.add('jax')
    dims, size = plan.batch_dims, plan.size
    if isinstance(dims, cst.Tuple) and not any(
        isinstance(e, cst.StarredElement) for e in dims.elements):
      elements = [e.with_changes(comma=cst.MaybeSentinel.DEFAULT)
                  for e in dims.elements] + [cst.Element(value=size)]
      shape = cst.Tuple(elements=cst_util.clean(elements))
    else:
      shape = cst.BinaryOperation(
          left=cst.Call(func=cst.Name('tuple'), args=[cst.Arg(value=dims)]),
          operator=cst.Add(),
          right=cst.Tuple(elements=[cst.Element(
              value=size, comma=cst.Comma())]))
    ctor = cst.Call(func=plan.cell_expr, args=cst_util.clean(ctor_args))
    return cst.Call(func=cst.Attribute(value=ctor,
                                       attr=cst.Name('initialize_carry')),
                    args=cst_util.clean([cst.Arg(value=rng),
                                         cst.Arg(value=shape)]))

  # -- legacy attention --
  def attention(self, plan):
    """Attention -> ``nn.MultiHeadDotProductAttention(num_heads=...,
    use_bias=..., decode=cache is not None, name=...)(x, mask=
    legacy_attention_mask(x, causal_mask=..., decode=...))``: the legacy
    call's layout kept (each argument with its own comma and line break;
    the mask helper reuses it)."""
    line_comma = next((a.comma for a in plan.call.args
                       if isinstance(a.comma, cst.Comma)),
                      cst.MaybeSentinel.DEFAULT)
    ctor, mask_args = [], []
    for k, a in plan.args:
      if k in ATTENTION_CTOR:
        ctor.append(_keyword(a, ATTENTION_CTOR[k]))
      elif k in ATTENTION_MASK_ARGS:
        mask_args.append(_keyword(a, k))
      elif k == 'attention_fn' and plan.attention_fn is not None:
        # linen calls it with its own keywords: an adapter to legacy's
        self._ctx.needed_imports.add(ATTENTION_FN_HELPER)
        ctor.append(_keyword(a.with_changes(value=cst.Call(
            func=cst.Name(ATTENTION_FN_HELPER.rsplit('.', 1)[1]),
            args=[cst.Arg(plan.attention_fn)])), 'attention_fn'))
    given = plan.given
    if 'dropout_rate' in given and 'deterministic' not in given and (
        plan.splat is None):
      # legacy's default; linen's has none
      ctor.append(cst_util.arg(cst.Name('False'), 'deterministic'))
    if plan.splat is not None:
      # the keys are known when the call runs: linen's names, the mask's
      # arguments apart, and a TypeError for what has no linen counterpart
      src = _fresh_code(plan.splat)
      given_src = '(' + ''.join(f'{k!r}, ' for k in given) + ')'
      self._ctx.needed_defs[ATTENTION_KWARGS_HELPER] = (
          ATTENTION_KWARGS_HELPER_SRC)
      ctor.append(cst.Arg(star='**', value=cst_util.expr(
          f"{ATTENTION_KWARGS_HELPER}({src}, 'ctor', {given_src})")))
      mask_args.append(cst.Arg(star='**', value=cst_util.expr(
          f"{ATTENTION_KWARGS_HELPER}({src}, 'mask', {given_src})")))
    if plan.cache is not None:
      decode = cst.Comparison(
          left=plan.cache, comparisons=[cst.ComparisonTarget(
              operator=cst.IsNot(), comparator=cst.Name('None'))])
      ctor.append(cst_util.arg(decode, 'decode'))
      mask_args.append(cst_util.arg(decode.deep_clone(), 'decode'))
    q, kv = plan.inputs_q, plan.inputs_kv
    inputs = [cst_util.arg(q.deep_clone())]
    if kv is not None:
      inputs.append(cst_util.arg(kv.deep_clone()))
    if mask_args:
      inputs[-1] = inputs[-1].with_changes(comma=line_comma)
    self._ctx.needed_imports.add(ATTENTION_MASK_HELPER)
    mask = cst.Call(func=cst.Name(ATTENTION_MASK_HELPER.rsplit('.', 1)[1]),
                    args=cst_util.clean_args(inputs + mask_args),
                    whitespace_before_args=plan.call.whitespace_before_args)
    call = [cst_util.arg(q)]
    if kv is not None:
      call.append(cst_util.arg(kv))
    call.append(cst_util.arg(mask, 'mask'))
    if plan.dropout_rng is not None:
      call.append(cst_util.arg(plan.dropout_rng, 'dropout_rng'))
    if plan.name is not None:
      ctor.append(plan.name)
    elif plan.auto_name is not None:
      ctor.append(cst_util.arg(self.name(plan.auto_name), 'name'))
    func = cst_util.expr(self._prefix() + '.MultiHeadDotProductAttention')
    if plan.guard is not None:
      # the field holds its default (legacy's attention class) when the
      # code runs, else a clear error
      field, callee = plan.guard
      self._ctx.needed_imports.add(ATTENTION_GUARD_HELPER)
      func = cst.Call(
          func=cst.Name(ATTENTION_GUARD_HELPER.rsplit('.', 1)[1]),
          args=cst_util.clean_args([
              cst_util.arg(cst.Name('self')),
              cst_util.arg(cst.SimpleString(repr(field))),
              cst_util.arg(callee), cst_util.arg(func)]))
    return cst.Call(func=cst.Call(
        func=func, args=cst_util.clean_args(ctor),
        whitespace_before_args=plan.call.whitespace_before_args),
                    args=cst_util.clean_args(call))

  def attention_partial(self, plan):
    """AttentionPartial -> ``legacy_attention_partial(field, k=v, ...)``:
    the keywords kept for the guarded call (``legacy_attention_default``
    maps them to linen's fields when the code runs)."""
    self._ctx.needed_imports.add(ATTENTION_PARTIAL_HELPER)
    return cst.Call(
        func=cst.Name(ATTENTION_PARTIAL_HELPER.rsplit('.', 1)[1]),
        args=[cst.Arg(plan.receiver, comma=cst.Comma(
            whitespace_after=cst.SimpleWhitespace(' ')))] + list(
                plan.call.args),
        whitespace_before_args=plan.call.whitespace_before_args)

  def known_module(self, plan):
    """KnownModule -> ``legacy_known_module(self.f, (A, B), 'C.f')``
    (flaxlegacy.migrate.upgraded: the value, or NotImplementedError)."""
    self._ctx.needed_imports.add(KNOWN_MODULE_HELPER)
    return cst.Call(func=cst.Name(KNOWN_MODULE_HELPER.rsplit('.', 1)[1]),
                    args=[cst_util.arg(plan.module), cst_util.arg(
                        cst_util.expr('(' + ''.join(
                            f'{k}, ' for k in plan.known) + ')')),
                          cst_util.arg(cst.SimpleString(f'"{plan.where}"'))])

  # -- the attention cache in module bodies --
  def cache_entry(self, plan):
    """CacheEntry -> ``legacy_cache_store(self, v)`` /
    ``legacy_cache_retrieve(self[, d])`` (flaxlegacy.migrate.upgraded_cache:
    the module's variable of linen's 'cache' collection)."""
    helper = CACHE_ENTRY_HELPERS[plan.op]
    self._ctx.needed_imports.add(helper)
    return cst.Call(func=cst.Name(helper.rsplit('.', 1)[1]),
                    args=[cst.Arg(cst.Name('self'), comma=cst.Comma(
                        whitespace_after=cst.SimpleWhitespace(' ')))] + [
                            a.with_changes(comma=cst.MaybeSentinel.DEFAULT)
                            for a in plan.args])

  # -- subclasses of legacy layers and user modules --
  def layer_base(self, plan):
    """LayerBase -> the linen layer (``nn.Conv``; a flaxlegacy layer where
    linen has none of the legacy numbers)."""
    layer = plan.layer
    if layer.linen in layer_table.SHIPPED:
      self._ctx.needed_imports.add(
          layer_table.SHIPPED[layer.linen].rsplit('.', 1)[0])
      return cst_util.expr(layer.linen)
    return cst_util.expr(f'{self._prefix()}.{layer.linen}')

  def plain_module_base(self, plan):
    """PlainModuleBase -> ``nn.Module``."""
    del plan
    return cst_util.expr(self._prefix() + '.Module')

  def param_override(self, plan):
    """ParamOverride -> ``param(self, name, init, shape, *init_args,
    **init_kwargs)`` (linen's order; linen passes the initializer's extra
    arguments through), its ``super().param`` calls in linen's order."""
    fn = plan.fn
    used = set(_names_in(fn))
    star, starstar = _unused(used, 'init_args'), _unused(used, 'init_kwargs')
    ps = list(fn.params.posonly_params) + list(fn.params.params)
    plain = [p.with_changes(comma=cst.MaybeSentinel.DEFAULT)
             for p in (ps[0], ps[1], ps[3], ps[2])]
    params = cst.Parameters(
        params=plain, star_arg=cst.Param(cst.Name(star)),
        star_kwarg=cst.Param(cst.Name(starstar)))
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(' '))
    calls = {}
    for sp in plan.super_calls:
      args = [cst.Arg(sp.name), cst.Arg(sp.initializer), cst.Arg(sp.shape),
              cst.Arg(cst.Name(star), star='*'),
              cst.Arg(cst.Name(starstar), star='**')]
      calls[id(sp.call)] = [a.with_changes(comma=comma)
                            for a in args[:-1]] + [args[-1]]
    return fn.with_changes(params=params,
                           body=fn.body.visit(_CallArgs(calls)))


  # -- modules that drive other modules --
  def driven_lifecycle(self, plan):
    """DrivenLifecycle -> ``_LegacyModule(P, {kw...}).init(rng, *a)`` /
    ``.call(params, *a)`` (the class written into the file splits the
    keywords by the linen class's fields when it runs)."""
    code = self._ctx.code_of
    items = []
    for a in plan.keywords:
      if a.star == '**':
        items.append(f'**{code(a.value)}')
      else:
        items.append(f'{a.keyword.value!r}: {code(a.value)}')
    kwargs = '{' + ', '.join(items) + '}'
    if len(items) == 1 and items[0].startswith('**'):
      kwargs = items[0][2:]
    rest = ', '.join((a.star if isinstance(a.star, str) else '')
                     + code(a.value) for a in plan.inputs)
    self._ctx.needed_defs[DRIVER_HELPER] = _driver_helper_src()
    return cst_util.expr(
        f'{DRIVER_HELPER}({code(plan.module)}, {kwargs}).{plan.op}({rest})')

  # -- a value holding layers, module classes or functions (rules/called_layers.py) --
  def runtime_layer_call(self, plan):
    """RuntimeLayerCall -> ``_legacy_layer_call(value, ('features', ...),
    counter, x, ...)``, the helper written once into the file (plain
    linen: the split by the class the value holds when it runs)."""
    self._ctx.needed_defs[LAYER_CALL_HELPER] = LAYER_CALL_HELPER_SRC
    args = [cst.Arg(value=plan.callee),
            cst.Arg(value=cst_util.expr(repr(tuple(plan.positional)))),
            cst.Arg(value=cst_util.expr(plan.counter or 'None'))]
    args += [a.with_changes(comma=cst.MaybeSentinel.DEFAULT)
             for a in plan.args]
    return cst.Call(func=cst.Name(LAYER_CALL_HELPER), args=args)

  # -- a partial of a user initializer of more than (key, shape) --
  def legacy_initializer(self, plan):
    """LegacyInitializer -> ``upgraded_layers.legacy_initializer(partial)``
    (flaxlegacy's wrapper: calls it with (key, shape), drops linen's
    dtype)."""
    self._ctx.needed_imports.add(INITIALIZER_MODULE)
    return cst.Call(func=cst_util.expr(INITIALIZER_WRAPPER),
                    args=[cst.Arg(value=plan.partial)])

  # -- a raw JAX transform over a local function (rules/apply/lifted_transforms.py) --
  def lifted_transform(self, plan):
    """LiftedTransform -> linen's lifted transform of the same name
    (``nn.checkpoint(f)``, ``nn.remat(f)``; ``nn.vmap(f, variable_axes=
    {True: None}, split_rngs={True: False}, ...)``: every collection
    broadcast, every stream unsplit, as legacy's dicts and counter); as a
    value, ``functools.partial(T(f), self)``."""
    args = [cst.Arg(plan.function)]
    if plan.transform == 'vmap':
      args += [cst_util.arg(cst_util.expr(v), k) for k, v in LIFTED_VMAP_AXES]
    args += [h.arg if h.arg.keyword is not None
             else cst_util.arg(h.arg.value, h.key) for h in plan.args]
    new = cst.Call(func=cst_util.expr(f'{self._prefix()}.{plan.transform}'),
                   args=cst_util.clean_args(args))
    if not plan.value:
      return new
    self._ctx.needed_imports.add('functools')
    return cst.Call(func=cst_util.expr('functools.partial'),
                    args=cst_util.clean_args(
                        [cst.Arg(new), cst.Arg(cst.Name('self'))]))

  def lifted_decorator(self, plan):
    """LiftedDecorator -> ``nn.remat`` / ``nn.checkpoint``."""
    return cst_util.expr(f'{self._prefix()}.{plan.transform}')

  def lifted_function(self, plan):
    """LiftedFunction -> the def / lambda with ``self`` first (linen's
    lifted transforms hand the module in first)."""
    ps = plan.function.params
    me = cst.Param(cst.Name('self'))
    if ps.posonly_params:
      ps = ps.with_changes(posonly_params=[me] + list(ps.posonly_params))
    else:
      ps = ps.with_changes(params=[me] + list(ps.params))
    return plan.function.with_changes(params=ps)

  @staticmethod
  def lifted_call(plan):
    """LiftedCall -> the call with ``self`` first."""
    return plan.call.with_changes(args=cst_util.clean_args(
        [cst.Arg(cst.Name('self'))] + list(plan.call.args)))

  # -- a local holding a layer's partial, called legacy-style (rules/partial_calls.py) --
  @staticmethod
  def partial_call(plan):
    """PartialCall -> ``n(p=a, k'=v, name=s)(x)``: linen's keywords
    (``k=v`` written tight), the input to the module's call."""
    args = [cst_util.arg(h.arg.value, h.key if h.key == 'name'
                         else layer_table.linen_kwarg(plan.layer, h.key))
            for h in plan.hypers]
    return cst.Call(func=cst.Call(func=plan.callee, args=args),
                    args=[cst.Arg(value=plan.input)])

  # -- a dict field read by a pytree map (rules/apply/frozen_fields.py) --
  def plain_dict_field(self, plan):
    """PlainDictField -> ``flax.core.unfreeze(field)`` (linen freezes a
    dict field: a FrozenDict, another pytree node than legacy's dict)."""
    self._ctx.needed_imports.add('flax')
    return cst.Call(func=cst_util.expr('flax.core.unfreeze'),
                    args=[cst.Arg(plan.value)])


# linen's vmap of a lifted function (plans.LiftedTransform): every
# collection broadcast, every rng stream unsplit
LIFTED_VMAP_AXES = (('variable_axes', '{True: None}'),
                    ('split_rngs', '{True: False}'))


# the run-time stack of legacy auto-name counters (rules/autoname_stack.py):
# flaxlegacy's plain-Python frames, shipped beside upgraded code
AUTONAME_IMPORT = 'from flaxlegacy.migrate import upgraded as legacy_names'
AUTONAME_FRAME = 'legacy_names.autoname_frame'
AUTONAME_COUNTER = 'legacy_names.autoname_counter()'


# flaxlegacy's partial of a module class known only when the code runs
# (plans.PartialModule ``runtime``)
PARTIAL_HELPER = 'flaxlegacy.migrate.upgraded.partial_module'


def _names_tuple(names):
  """``('a', 'b')`` / ``('a',)`` source."""
  names = list(names)
  if len(names) == 1:
    return f'({names[0]!r},)'
  return '(' + ', '.join(repr(n) for n in names) + ')'


# the run-time split of a splatted dict (plans.SplitKwargs), written once
# into an upgraded file that needs it (plain Python, nothing imported)
SPLIT_HELPER = '_legacy_kwargs'
SPLIT_HELPER_SRC = '''\
def _legacy_kwargs(kwargs, names, catch_all=None, extra=None, elsewhere=None):
  """Keyword arguments of a legacy module call, split for its linen class.

  Returns the entries of ``kwargs`` named in ``names``.  With
  ``catch_all`` (the legacy ``**`` parameter, now a dict field), every
  other entry not named in ``elsewhere`` goes, with those of ``extra``,
  into one dict under that key.  Without it, ``elsewhere`` set (the
  class's call parameters), any other entry is an unexpected argument,
  as it was for the legacy module's apply.
  """
  out = {k: v for k, v in kwargs.items() if k in names}
  rest = dict(extra or {})
  for k, v in kwargs.items():
    if k in names or elsewhere is None or k in elsewhere:
      continue
    if catch_all is None:
      raise TypeError(f'unexpected keyword argument {k!r}')
    if k in rest:
      raise TypeError(f'got multiple values for keyword argument {k!r}')
    rest[k] = v
  if catch_all is not None:
    out[catch_all] = rest
  return out
'''


# X.partial(...) of a value holding linen layers or module classes
# (plans.PartialModule ``renamed_for``), written once into an upgraded file
RENAMED_PARTIAL_HELPER = '_legacy_partial'
RENAMED_PARTIAL_HELPER_SRC = '''

# Written by flaxlegacy upgrade: a legacy X.partial(...) of a value that
# holds a linen layer (whose legacy keywords linen spells otherwise) or a
# module class of this code, which one known only at run time.
def _legacy_partial(module, layers, renames, /, **kwargs):
  """``functools.partial(module, **kwargs)``, the keywords named in
  ``renames`` given their linen spelling where ``module`` is one of the
  linen ``layers`` (a subclass, or a partial of one)."""
  import functools  # pylint: disable=g-import-not-at-top
  cls = module
  while not isinstance(cls, type) and hasattr(cls, 'func'):
    cls = cls.func
  if isinstance(cls, type) and issubclass(cls, layers):
    kwargs = {renames.get(k, k): v for k, v in kwargs.items()}
  return functools.partial(module, **kwargs)
'''


# the split of a submodule call whose class is known only at run time
# (plans.RuntimeSubmoduleCall), written once into an upgraded file
RUNTIME_CALL_HELPER = '_legacy_module_call'
RUNTIME_CALL_HELPER_SRC = '''

# Written by flaxlegacy upgrade: a submodule whose class is known only at
# run time (a hyper-parameter holding classes of different fields).
def _legacy_module_call(module_class, /, *inputs, **kwargs):
  """Constructs ``module_class`` with the keywords that are its dataclass
  fields (``name`` included) and calls it on ``inputs`` with the rest, as
  the legacy module took all of them at the call."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import functools  # pylint: disable=g-import-not-at-top
  cls = module_class
  while isinstance(cls, functools.partial):
    cls = cls.func
  fields = {f.name for f in dataclasses.fields(cls) if f.init} - {'parent'}
  ctor = {k: v for k, v in kwargs.items() if k in fields}
  call = {k: v for k, v in kwargs.items() if k not in fields}
  return module_class(**ctor)(*inputs, **call)
'''


# the call of a value holding layers, module classes or functions
# (plans.RuntimeLayerCall), written once into an upgraded file
LAYER_CALL_HELPER = '_legacy_layer_call'
LAYER_CALL_HELPER_SRC = '''

# Written by flaxlegacy upgrade: a legacy module argument called as legacy
# called it, whose value (a linen module class, a partial of one, or a plain
# function) is known only at run time.
def _legacy_layer_call(layer, positional, autoname, /, *args, **kwargs):
  """Calls ``layer`` as the legacy code did: a linen module class (or a
  partial of one) is constructed with the keywords that are its dataclass
  fields (the hyper-parameters passed by position named by
  ``positional``; ``name`` the given one, else ``<Class>_<n>`` from
  ``autoname``) and called on the inputs with the rest; anything else is
  called with the arguments as they are."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import flax.linen  # pylint: disable=g-import-not-at-top
  cls = layer
  while not isinstance(cls, type) and hasattr(cls, 'func'):
    cls = cls.func
  if not (isinstance(cls, type) and issubclass(cls, flax.linen.Module)):
    return layer(*args, **kwargs)
  n = len(args) - len(positional)
  kwargs = {**dict(zip(positional, args[n:])), **kwargs}
  if 'name' not in kwargs:
    kwargs['name'] = f'{cls.__name__}_{next(autoname)}'
  fields = {f.name for f in dataclasses.fields(cls) if f.init} - {'parent'}
  ctor = {k: v for k, v in kwargs.items() if k in fields}
  call = {**getattr(layer, 'call_kwargs', {}),
          **{k: v for k, v in kwargs.items() if k not in fields}}
  return layer(**ctor)(*args[:n], **call)
'''


# flaxlegacy's wrapper of an initializer partial (plans.LegacyInitializer)
INITIALIZER_MODULE = 'flaxlegacy.migrate.upgraded_layers'
INITIALIZER_WRAPPER = 'upgraded_layers.legacy_initializer'


# flaxlegacy's linen cells whose features the carry gives
# (plans.RecurrentCell), imported beside upgraded code under this name
CELLS = 'legacy_cells'
CELLS_IMPORT = 'flaxlegacy.migrate.legacy_cells'


# legacy attention (plans.Attention): the legacy parameters of linen's
# constructor -> its fields
ATTENTION_CTOR = {'num_heads': 'num_heads', 'dtype': 'dtype',
        'qkv_features': 'qkv_features', 'out_features': 'out_features',
        'broadcast_dropout': 'broadcast_dropout',
        'dropout_rate': 'dropout_rate', 'deterministic': 'deterministic',
        'precision': 'precision', 'kernel_init': 'kernel_init',
        'bias_init': 'bias_init', 'bias': 'use_bias'}
# (upgraded_attention.LEGACY_ATTENTION_FIELDS is the same map, for the code
# the upgrade writes; this module does not import JAX)
# the legacy parameters of the mask
ATTENTION_MASK_ARGS = ('attention_axis', 'causal_mask', 'padding_mask',
             'key_padding_mask', 'segmentation', 'key_segmentation')

# flaxlegacy's legacy attention mask, and the check that a field holds
# legacy's attention class (plain jax.numpy / Python)
ATTENTION_MASK_HELPER = ('flaxlegacy.migrate.upgraded_attention.'
                         'legacy_attention_mask')
ATTENTION_GUARD_HELPER = ('flaxlegacy.migrate.upgraded_attention.'
                          'legacy_attention_default')
# the run-time check of a hyper-parameter's class (rules/runtime_modules.py)
KNOWN_MODULE_HELPER = 'flaxlegacy.migrate.upgraded.legacy_known_module'
ATTENTION_FN_HELPER = ('flaxlegacy.migrate.upgraded_attention.'
                       'legacy_attention_fn')
ATTENTION_PARTIAL_HELPER = ('flaxlegacy.migrate.upgraded_attention.'
                            'legacy_attention_partial')


# the run-time map of a dict splatted into an attention call, written
# once into the file
ATTENTION_KWARGS_HELPER = '_legacy_attention_kwargs'
ATTENTION_KWARGS_HELPER_SRC = f'''\
def _legacy_attention_kwargs(kwargs, part, given=()):
  """Legacy attention keyword arguments splatted into a call, for linen.

  part 'ctor': those of MultiHeadDotProductAttention's constructor, with
  linen's names (and legacy's default deterministic=False where a dropout
  rate is given); part 'mask': those of the legacy mask; any other legacy
  argument raises (it has no linen counterpart in this call).
  """
  ctor = {ATTENTION_CTOR!r}
  mask = {ATTENTION_MASK_ARGS!r}
  extra = [k for k in kwargs if k not in ctor and k not in mask]
  if extra:
    raise TypeError(f'legacy attention arguments {{extra}} have no linen '
                    'counterpart here')
  if part == 'mask':
    return {{k: v for k, v in kwargs.items() if k in mask}}
  out = {{ctor[k]: v for k, v in kwargs.items() if k in ctor}}
  if (('dropout_rate' in kwargs or 'dropout_rate' in given)
      and 'deterministic' not in kwargs and 'deterministic' not in given):
    out['deterministic'] = False
  return out
'''


def _keyword(a, keyword):
  """The legacy Arg ``a`` as ``keyword=value``, keeping its comma."""
  return a.with_changes(keyword=cst.Name(keyword), equal=cst.AssignEqual(
      whitespace_before=cst.SimpleWhitespace(''),
      whitespace_after=cst.SimpleWhitespace('')))


# a module's entry of the legacy attention cache (plans.CacheEntry)
CACHE_ENTRY_HELPERS = {
    'store': 'flaxlegacy.migrate.upgraded_cache.legacy_cache_store',
    'retrieve': 'flaxlegacy.migrate.upgraded_cache.legacy_cache_retrieve'}


class _CallArgs(cst.CSTTransformer):
  """Calls (by the id of the call as given) -> their new arguments."""

  def __init__(self, args):
    self.args = args

  def leave_Call(self, original_node, updated_node):
    args = self.args.get(id(original_node))
    return updated_node if args is None else updated_node.with_changes(
        args=args)


def _names_in(node):
  """Every Name of ``node``'s code."""
  out = []

  class V(walk.FastVisitor):

    def visit_Name(self, n):
      out.append(n.value)

  node.visit(V())
  return out


def _unused(used, base):
  """``base``, or ``base1``, ``base2`` ... the first not in ``used``."""
  name, i = base, 1
  while name in used:
    name, i = f'{base}{i}', i + 1
  return name


# the class a DrivenLifecycle's text runs the driven class through
DRIVER_HELPER = '_LegacyModule'


def _driver_helper_src():
  """The source of ``_LegacyModule`` (DrivenLifecycle), written into the
  upgraded file."""
  renames = {}
  added = {}
  for layer in layer_table.LAYERS.values():
    if layer.linen in layer_table.SHIPPED:
      continue
    renames.update({k: v for k, v in layer.renames.items()
                    if k in layer.params})
    if layer.add_kwargs:
      added[layer.linen] = {k: v for k, v in layer.add_kwargs.items()}
  added_src = '{' + ', '.join(
      f'{name!r}: {{' + ', '.join(f'{k!r}: {v}' for k, v in kw.items()) + '}'
      for name, kw in sorted(added.items())) + '}'
  return f'''\
class _LegacyModule:
  """A linen module class run the way legacy modules drove one another.

  ``kwargs`` (the keyword arguments a legacy module class took) are split
  between the class's fields and its ``__call__`` keywords; flax's own
  layers get their linen keyword names (RENAMES) and the arguments linen
  needs for the legacy numbers (ADDED).  ``init(rng, *inputs)`` returns ``(outputs, params)`` and
  ``call(params, *inputs)`` the outputs, as legacy ``Module.init`` /
  ``Module.call`` did.
  """

  RENAMES = {renames!r}
  ADDED = {added_src}

  def __init__(self, module_class, kwargs):
    import dataclasses  # pylint: disable=g-import-not-at-top
    import functools  # pylint: disable=g-import-not-at-top
    cls = module_class
    while isinstance(cls, functools.partial):
      cls = cls.func
    fields = {{f.name for f in dataclasses.fields(cls) if f.init}}
    fields.discard('parent')
    flax_layer = cls.__module__.startswith('flax.linen')
    ctor, self.call_kwargs = {{}}, {{}}
    for k, v in kwargs.items():
      if flax_layer and k not in fields and self.RENAMES.get(k) in fields:
        k = self.RENAMES[k]
      (ctor if k in fields else self.call_kwargs)[k] = v
    if flax_layer:
      for k, v in self.ADDED.get(cls.__name__, {{}}).items():
        ctor.setdefault(k, v)
    self.module = module_class(**ctor, parent=None)

  def init(self, rng, *inputs):
    outputs, variables = self.module.init_with_output(
        rng, *inputs, **self.call_kwargs)
    return outputs, variables.get('params', {{}})

  def call(self, params, *inputs):
    return self.module.apply({{'params': params}}, *inputs,
                             **self.call_kwargs)
'''


def _fresh_code(node):
  """Source of a node as rewritten so far (printed as a module of its own
  prints it)."""
  return cst_util.code(node)


# flaxlegacy's model helpers (a model that carries its module, a module
# known at run time), imported beside upgraded code under this name
MODEL_HELPER_IMPORT = 'from flaxlegacy.migrate import upgraded as legacy_model'
# the run-time life cycle of a module class known only when the code runs
# (plans.RuntimeLifecycle): legacy_model's function for each legacy call
RUNTIME_LIFECYCLE = {
    'create': 'create_module',
    'create_by_shape': 'create_module_by_shape',
    'init': 'init_module',
    'init_by_shape': 'init_module_by_shape',
}
# a legacy type in an annotation (plans.LegacyType) -> (import line, what
# it becomes)
LEGACY_TYPES = {
    'Model': ('from typing import Any', 'Any'),
    'Optimizer': ('from flax.training import train_state',
                  'train_state.TrainState'),
    'DynamicScale': ('from flax.training import dynamic_scale as '
                     'dynamic_scale_lib', 'dynamic_scale_lib.DynamicScale'),
}
# the legacy key frame of program code (nn.stochastic, nn.make_rng)
RNG_HELPER_IMPORT = 'from flaxlegacy.migrate import upgraded as legacy_rng'

# the program pass's checkpoint functions (flaxlegacy's helpers copied
# beside upgraded code: plain flax + serialization)
CHECKPOINT_IMPORT = ('from flaxlegacy.migrate import upgraded as '
                     'legacy_checkpoints')
CHECKPOINT_FUNCTIONS = {'restore': 'legacy_checkpoints.restore_checkpoint',
                        'save': 'legacy_checkpoints.save_checkpoint'}


def _sees_own(flow, rel, qual, name, annotation=False, module_level=True):
  """Whether code in scope ``qual`` of ``rel`` reads ``name`` from a
  binding of the file (its function, an enclosing function, the module;
  an enclosing class only for its own body), not from an import added
  at the top.  ``annotation``: an annotation, which in a function is its
  parameters' or return's (evaluated where the def is) or a local's
  (never evaluated); ``module_level``: whether a module-level binding
  counts."""
  s = flow.scopes.get((rel, qual))
  if annotation and s is not None and s.kind == 'function':
    s = s.parent
  first = True
  while s is not None:
    if s.kind == 'module' and not module_level:
      return False
    if (s.kind != 'class' or first) and name in s.bound:
      return True
    first = False
    s = s.parent
  return False


class LinenProgramEmitter:
  """Writes the program pass's plans as linen + optax code; ``rw``: the
  ``ProgramRewriter``, whose ``imports`` (statements) its text adds to."""

  target = 'linen'

  def __init__(self, rw):
    self._rw = weakref.ref(rw)  # held weakly, as LinenEmitter's

  def _code(self, node):
    """A user expression's source, as the file prints it."""
    return self._rw().ctx.code_of(node)

  def _import(self, line):
    self._rw().imports.add(line)

  # -- training steps --
  @staticmethod
  def _apply_src(opt, grads, lr):
    """``opt.apply_gradients(grads=...)`` source; a per-step learning rate
    set in the optax state's hyperparams (the transformation is built with
    ``optax.inject_hyperparams``, optimizers.py)."""
    if lr is None:
      return f'{opt}.apply_gradients(grads={grads})'
    return (f"{opt}.replace(opt_state={opt}.opt_state._replace(hyperparams="
            f"{{**{opt}.opt_state.hyperparams, 'learning_rate': {lr}}}))"
            f".apply_gradients(grads={grads})")

  def apply_gradients(self, plan):
    """ApplyGradients -> ``state.apply_gradients(grads=g)``."""
    lr = plan.learning_rate
    return cst_util.expr(self._apply_src(
        _fresh_code(plan.state), self._code(plan.grads).rstrip(', '),
        None if lr is None else self._code(lr)))

  def optimize(self, plan):
    """Optimize -> ``loss, _grad = jax.value_and_grad(loss_fn)(
    state.params)`` and ``new = state.apply_gradients(grads=_grad)``
    (statements)."""
    code = self._code
    opt, loss_fn = code(plan.state), code(plan.loss_fn)
    if plan.aux is not None:
      vg = (f'({code(plan.loss)}, {code(plan.aux)}), _grad = '
            f'jax.value_and_grad({loss_fn}, has_aux=True)({opt}.params)\n')
    else:
      vg = (f'{code(plan.loss)}, _grad = jax.value_and_grad({loss_fn})'
            f'({opt}.params)\n')
    lr = plan.learning_rate
    apply = self._apply_src(opt, '_grad', None if lr is None else code(lr))
    self._import('import jax')
    return [cst.parse_statement(vg),
            cst.parse_statement(f'{code(plan.new_state)} = {apply}\n')]

  def compute_gradient(self, plan):
    """ComputeGradient -> ``legacy_model.compute_gradient(loss_fn,
    state.params)``."""
    self._import(MODEL_HELPER_IMPORT)
    return cst_util.expr(
        f'legacy_model.compute_gradient({_fresh_code(plan.loss_fn)}, '
        f'{_fresh_code(plan.state)}.params)')

  def replicate(self, plan):
    """Replicate -> ``jax_utils.replicate(state)`` / ``unreplicate``."""
    self._import('from flax import jax_utils')
    return cst_util.expr(
        f'jax_utils.{plan.op}({_fresh_code(plan.state)})')

  def params_of(self, plan):
    """ParamsOf -> ``state.params``."""
    return plan.access.with_changes(attr=cst.Name('params'))

  def step_of(self, plan):
    """StepOf -> ``state.step``."""
    return cst.Attribute(value=plan.state, attr=cst.Name('step'))

  # -- the model life cycle --
  def _argsrc(self, a):
    """An argument's source, as the file prints it."""
    star = a.star if isinstance(a.star, str) else ''
    kw = f'{a.keyword.value}=' if a.keyword is not None else ''
    return f'{star}{kw}{self._code(a.value)}'

  def module_src(self, cls_expr):
    """Source of a linen module instance for a legacy module expression
    (a class -> ``M()``, its partial -> ``M(fields...)``)."""
    if (isinstance(cls_expr, cst.Call)
        and cst_util.dotted(cls_expr.func) == 'functools.partial'
        and cls_expr.args and not cls_expr.args[0].keyword
        and not cls_expr.args[0].star):
      # models.M.partial(...), already rewritten by leave_Call
      inner = self._code(cls_expr.args[0].value)
      args = ', '.join(self._argsrc(a) for a in cls_expr.args[1:])
      return f'{inner}({args})'
    if (isinstance(cls_expr, cst.Call) and isinstance(cls_expr.func,
                                                        cst.Attribute)
        and cls_expr.func.attr.value == 'partial'):
      inner = self._code(cls_expr.func.value)
      args = ', '.join(self._argsrc(a) for a in cls_expr.args)
      return f'{inner}({args})'
    return f'{self._code(cls_expr)}()'

  @staticmethod
  def _spec_input(shape, dtype):
    """``jnp.ones`` source for one init_by_shape spec; a spec only its
    value can classify is read at run time as legacy read it (a pair when
    it has two elements and the first is iterable, else a float32
    shape)."""
    if dtype != facts_lib.RUNTIME_SPEC:
      return f'jnp.ones({shape}, {dtype})'
    return (f"jnp.ones(*({shape} if len({shape}) == 2 and hasattr("
            f"{shape}[0], '__iter__') else ({shape}, jnp.float32)))")

  def _init_src(self, plan):
    """``M(...).init(rng, *inputs)`` source of an InitModel."""
    ctor = self.module_src(plan.module)
    rng = self._code(plan.rng)
    inputs = []
    if plan.shapes is not None:
      self._import('import jax.numpy as jnp')
      inputs = [self._spec_input(s, d) for s, d in plan.shapes]
    # legacy: apply(*shaped inputs, *positional inputs, **keywords)
    inputs = ', '.join(inputs + [self._argsrc(a) for a in plan.inputs])
    if plan.positional_fields or plan.fields:
      # hyper-parameters given at init are linen fields
      extra = ', '.join([f'{p}={self._code(v)}'
                         for p, v in plan.positional_fields]
                        + [self._argsrc(a) for a in plan.fields])
      ctor = (ctor[:-1] + (', ' if not ctor.endswith('()') else '') + extra
              + ')')
    kw = ''.join(', ' + self._argsrc(a) for a in plan.kwargs)
    return f'{ctor}.init({rng}{", " if inputs else ""}{inputs}{kw})'

  def init_model(self, plan):
    """InitModel -> ``M(...).init(rng, *inputs)`` (the variables)."""
    return cst_util.expr(self._init_src(plan))

  def model_init(self, plan):
    """ModelInit -> statements: ``params = M().init(...)['params']``;
    ``init_with_output`` where the output is kept; ``_variables`` where
    the other collections or a carried model need them."""
    code = self._code
    init = self._init_src(plan.init)
    out = []
    collect = plan.collections_to is not None
    with_output = plan.output is not None
    params = "_variables['params']"
    if plan.carried_module is not None:
      self._import(MODEL_HELPER_IMPORT)
      params = f'legacy_model.Model({code(plan.carried_module)}, {params})'
      if not (with_output or collect):
        out.append(f'_variables = {init}\n')
        with_output = None  # _variables is bound
    if with_output:
      # legacy init returned (output or its shape, params)
      init = init.replace('.init(', '.init_with_output(', 1)
      out.append(f'{code(plan.output)}, _variables = {init}\n')
    second = code(plan.params)
    if collect:
      if with_output is False:
        out.append(f'_variables = {init}\n')
      out.append(f'{second} = {params}\n')
      keep = ("k != 'params'" if plan.only is None
              else f'k == {plan.only!r}')
      out.append(f'{plan.collections_to} = {{k: v for k, v in '
                 f'_variables.items() if {keep}}}\n')
    elif with_output is not False:
      out.append(f'{second} = {params}\n')
    else:
      out.append(f"{second} = {init}['params']\n")
    return [cst.parse_statement(s) for s in out]

  def init_any_module(self, plan):
    """InitAnyModule -> ``t = legacy_model.init_module(X, args...)``."""
    self._import(MODEL_HELPER_IMPORT)
    args = ', '.join(self._argsrc(a) for a in plan.args)
    return cst.parse_statement(
        f'{self._code(plan.target)} = legacy_model.init_module('
        f'{self._code(plan.module)}, {args})\n')

  def runtime_lifecycle(self, plan):
    """RuntimeLifecycle -> ``t = legacy_model.<helper>(X, args...)``."""
    self._import(MODEL_HELPER_IMPORT)
    args = ', '.join(self._argsrc(a) for a in plan.args)
    return cst.parse_statement(
        f'{self._code(plan.target)} = legacy_model.'
        f'{RUNTIME_LIFECYCLE[plan.op]}({self._code(plan.module)}, {args})\n')

  def runtime_stateful(self, plan):
    """RuntimeStateful -> ``legacy_model.stateful(...)``."""
    self._import(MODEL_HELPER_IMPORT)
    return plan.call.with_changes(
        func=cst_util.expr('legacy_model.stateful'))

  def module_partial(self, plan):
    """ModulePartial -> ``functools.partial(M, ...)``."""
    self._import('import functools')
    call = plan.call
    return call.with_changes(
        func=cst_util.expr('functools.partial'),
        args=cst_util.clean([cst.Arg(value=call.func.value)]
                            + list(call.args)))

  def apply_model(self, plan):
    """ApplyModel -> ``M().apply({'params': params}, *inputs)``."""
    ctor = self.module_src(plan.module)
    params = self._code(plan.params).rstrip(', ')
    inputs = ''.join(', ' + self._argsrc(a) for a in plan.inputs)
    return cst_util.expr(
        f"{ctor}.apply({{'params': {params}}}{inputs})")

  def module_function(self, plan):
    """ModuleFunction -> ``legacy_model.module_call(M)``."""
    return self._model_helper_call('module_call', plan.module)

  # -- models --
  def apply_fn_src(self, plan):
    """Source of an ApplyFn: ``M().apply`` (``M(fields).apply`` of its
    partial), ``state.apply_fn``, ``legacy_model.apply_model``, or
    ``None``."""
    if plan.carried:
      self._import(MODEL_HELPER_IMPORT)
      return 'legacy_model.apply_model'
    if plan.state is not None:
      return f'{plan.state}.apply_fn'
    if isinstance(plan.module, str):
      return f'{plan.module}().apply'
    if plan.module is not None:
      return self.module_src(plan.module) + '.apply'
    return 'None'

  def _model_apply_src(self, plan):
    """``apply({'params': p, **collections}, inputs..., method=, rngs=,
    mutable=)`` source of a ModelApply; fields set on the module first
    (``M(fields).apply``, else ``module.clone(fields).apply``)."""
    apply = self.apply_fn_src(plan.fn)
    if plan.fields:
      fields = ', '.join(self._argsrc(a) for a in plan.fields)
      if apply.endswith('().apply'):
        # the class itself: its fields at construction (a required field
        # has no default for ``M()`` to clone from)
        apply = f"{apply[:-len('().apply')]}({fields}).apply"
      else:
        if not apply.endswith('.apply'):
          # apply_fn is a bound ``module.apply``: its module, with the
          # fields this call sets
          apply = apply + '.__self__'
        else:
          apply = apply[:-len('.apply')]
        apply = f'{apply}.clone({fields}).apply'
    params = (plan.params if plan.params is not None
              else f'{plan.fn.state}.params')
    variables = f"{{'params': {params}}}"
    if plan.collections is not None:
      variables = f"{{'params': {params}, **{plan.collections}}}"
    args = ', '.join(self._argsrc(a) for a in plan.inputs)
    extra = ''
    if plan.method is not None:
      extra += f', method={plan.method!r}'
    if plan.rng is not None:
      extra += f", rngs={{'dropout': {plan.rng}}}"
    if plan.mutable is not None:
      extra += f', mutable=[{plan.mutable!r}]'
    return f'{apply}({variables}, {args}{extra})'

  def model_apply(self, plan):
    """ModelApply -> ``M().apply({'params': model}, x, ...)``."""
    return cst_util.expr(self._model_apply_src(plan))

  def model_outputs(self, plan):
    """ModelApply with ``mutable`` whose written collection nothing
    receives (``with nn.stateful(s):``, no target) -> ``M().apply(...,
    mutable=[...])[0]``: the outputs."""
    return cst.parse_expression(f'{self._model_apply_src(plan)}[0]')

  def model_apply_assign(self, plan):
    """ModelApplyAssign -> ``y[, new_state] = M().apply(...)``
    (statements)."""
    t = self._code(plan.target)
    if plan.apply.mutable is not None and plan.new_state is None:
      # no name receives the written collection (``with nn.stateful(s):``,
      # no target): the outputs alone
      return [cst.parse_statement(
          f'{t} = {self._model_apply_src(plan.apply)}[0]\n')]
    if plan.new_state is not None:
      if isinstance(plan.target, (cst.Tuple, cst.List)) and not (
          t.startswith(('(', '['))):
        # ``a, b = model(x)`` in a stateful block: apply returns (outputs,
        # state), the outputs unpacked as the legacy call's were
        t = f'({t})'
      t = f'{t}, {plan.new_state}'
    return [cst.parse_statement(f'{t} = {self._model_apply_src(plan.apply)}\n')]

  def model_value(self, plan):
    """ModelValue -> ``params``, or ``legacy_model.Model(M, params)``."""
    if plan.carried:
      self._import(MODEL_HELPER_IMPORT)
      return plan.call.with_changes(
          func=cst_util.expr('legacy_model.Model'))
    return plan.call.args[1].value

  def model_params(self, plan):
    """ModelParams -> the model itself (a dict of parameters)."""
    return plan.access.value

  def model_type(self, plan):
    """ModelType -> ``legacy_model.Model`` or ``dict``."""
    if plan.carried:
      self._import(MODEL_HELPER_IMPORT)
      return cst_util.expr('legacy_model.Model')
    return cst.Name('dict')

  # -- collections and keys in program code --
  def program_rng(self, plan):
    """ProgramRng -> ``legacy_rng.make_rng()`` / ``is_stochastic()``
    (flaxlegacy's plain-JAX frame, importable with FLAXLEGACY=off)."""
    self._import(RNG_HELPER_IMPORT)
    return cst_util.expr(f'legacy_rng.{plan.op}()')

  def stochastic_scope(self, plan):
    """StochasticScope -> ``legacy_rng.stochastic(rng)``."""
    self._import(RNG_HELPER_IMPORT)
    return plan.call.with_changes(
        func=cst_util.expr('legacy_rng.stochastic'))

  def collection_dict(self, plan):
    """CollectionDict -> ``legacy_model.collection_dict(state)``: legacy's
    flat layout (``{'/block/bn': {'mean': m}}``) of the collection's
    variables (a dict of linen collections now)."""
    return self._model_helper_call('collection_dict', plan.call.func.value)

  def collection_copy(self, plan):
    """CollectionCopy -> ``legacy_model.collection_copy(coll)``: a copy of
    the collection (dicts of its own at every level) for the block to
    write into."""
    return self._model_helper_call('collection_copy', plan.call.func.value)

  def collection_entry(self, plan):
    """CollectionEntry -> ``legacy_model.collection_dict(coll)['/path']``:
    one module's values, legacy's layout (an entry that writes through)."""
    sub = plan.subscript
    return sub.with_changes(
        value=self._model_helper_call('collection_dict', sub.value))

  def _model_helper_call(self, name, value):
    """``legacy_model.<name>(value)`` (flaxlegacy's model helpers)."""
    self._import(MODEL_HELPER_IMPORT)
    return cst.Call(func=cst_util.expr(f'legacy_model.{name}'),
                    args=[cst.Arg(value)])

  # -- a collection scope threaded through its model calls --
  @staticmethod
  def threaded_block(plan):
    """ThreadedBlock -> the block with its kept items, or its body in the
    enclosing block (a FlattenSentinel; the block's leading lines go to
    the first statement)."""
    block = plan.block
    if plan.kept:
      return block.with_changes(items=cst_util.clean(list(plan.kept)))
    body = list(block.body.body)
    if body:
      body[0] = body[0].with_changes(leading_lines=list(
          block.leading_lines) + list(body[0].leading_lines))
    return cst.FlattenSentinel(body)

  # -- optimizers --
  def _legacy_tx_src(self, plan):
    """``legacy_optax.<rule>(...)`` source of a Transformation."""
    fn, params = plan.legacy
    kw = dict(plan.hypers)
    self._import('from flaxlegacy.migrate import legacy_optax')
    if plan.per_step:
      # the learning rate is set per step; legacy branched in Python on
      # the other hyper-parameters (and Adafactor's dtype_momentum would
      # pass for a schedule), so all of them stay static
      self._import('import optax')
      kw = {'learning_rate': kw.get('learning_rate') or '0.0', **kw}
      static = [repr(p) for p in params[1:]]
      static = '(' + ', '.join(static) + (',' if len(static) == 1 else '') + ')'
      inner = ', '.join(f'{p}={v}' for p, v in kw.items())
      return (f'optax.inject_hyperparams(legacy_optax.{fn}, '
              f'static_args={static})({inner})')
    inner = [kw['learning_rate']] + [f'{p}={kw[p]}' for p in params[1:]
                                     if p in kw]
    return f"legacy_optax.{fn}({', '.join(inner)})"

  def _transformation_src(self, plan):
    """optax source of a Transformation (collectors/programs.py
    ``OPTAX``: the optax function and keyword of each legacy
    hyper-parameter, with legacy's defaults)."""
    if plan.legacy is not None:
      return self._legacy_tx_src(plan)
    name = plan.name
    fn, table = OPTAX[name]
    kw = dict(plan.hypers)
    self._import('import optax')
    if plan.per_step:
      inner = []
      for k, (ok, default) in table.items():
        v = kw.get(k, default)
        if k == 'learning_rate' and v is None:
          v = '0.0'  # set per step with apply_gradients
        if v is not None:
          inner.append(f'{ok}={v}')
      inner += OPTAX_FIXED.get(name, ())
      tx = f"optax.inject_hyperparams({fn})({', '.join(inner)})"
    else:
      inner = [kw['learning_rate']]
      for k, (ok, default) in table.items():
        v = kw.get(k, default)
        if k == 'learning_rate' or v is None:
          continue
        inner.append(f'{ok}={v}')
      inner += OPTAX_FIXED.get(name, ())
      tx = f"{fn}({', '.join(inner)})"
    if name == 'Adam' and plan.decay:
      # optax.adam(...) or optax.inject_hyperparams(optax.adam)(...)
      tx = re.sub(r'\boptax\.adam(?=[()])', 'optax.adamw', tx, count=1)
    elif name == 'Adam':
      tx = re.sub(r',? ?weight_decay=[^,)]*', '', tx)
    if name == 'Momentum' and plan.decay:
      tx = tx.replace(f', weight_decay={kw["weight_decay"]}', '')
      tx = f'optax.chain(optax.add_decayed_weights({kw["weight_decay"]}), {tx})'
    elif name == 'Momentum':
      tx = re.sub(r',? ?weight_decay=[^,)]*', '', tx)
    return tx

  def _multi_transform_src(self, plan):
    return self._labelled_src([_fresh_code(t) for t in plan.transformations],
                              [_fresh_code(f) for f in plan.filters])

  def _labelled_src(self, txs, filters):
    """``optax.multi_transform`` source: the i-th transformation (source)
    for the parameters the i-th filter selects, the rest frozen."""
    self._import('import optax')
    self._import('from flaxlegacy.migrate import legacy_optax')
    items = ', '.join(f"'{i}': {t}" for i, t in enumerate(txs))
    return (f"optax.multi_transform({{{items}, 'frozen': optax.set_to_zero()"
            f"}}, legacy_optax.traversal_labels({', '.join(filters)}))")

  def _tx_src(self, tx):
    if isinstance(tx, str):
      return tx  # a transformation made elsewhere
    if isinstance(tx, plans.UserTransformation):
      return self._user_tx_src(tx)
    if isinstance(tx, plans.MultiTransform):
      return self._multi_transform_src(tx)
    return self._transformation_src(tx)

  def transformation(self, plan):
    """Transformation -> ``optax.<fn>(...)`` (``inject_hyperparams`` where
    set per step; ``legacy_optax`` where optax has no same numbers)."""
    return cst_util.expr(self._transformation_src(plan))

  def multi_transform(self, plan):
    """MultiTransform -> ``optax.multi_transform`` labelled by
    ``legacy_optax.traversal_labels`` (the rest frozen)."""
    return cst_util.expr(self._multi_transform_src(plan))

  @staticmethod
  def _user_tx_src(plan):
    """The transformation of a user definition: the translated function's
    result, or the kept class's ``as_optax()``."""
    src = _fresh_code(plan.definition)
    return src if plan.translated else f'{src}.as_optax()'

  @staticmethod
  def _fresh_arg(a):
    """Source of an argument of a call as rewritten so far."""
    star = a.star if isinstance(a.star, str) else ''
    kw = f'{a.keyword.value}=' if a.keyword is not None else ''
    return f'{star}{kw}{_fresh_code(a.value)}'

  def per_step_user_transformation(self, plan):
    """PerStepUserTransformation -> ``optax.inject_hyperparams(UserDef,
    static_args=(...))(...)``."""
    static = [repr(p) for p in plan.static]
    static = '(' + ', '.join(static) + (',' if len(static) == 1 else '') + ')'
    inner = [self._fresh_arg(a) for a in plan.call.args]
    if plan.default_rate:
      inner.append('learning_rate=0.0')  # set per step
    self._import('import optax')
    return cst_util.expr(
        f'optax.inject_hyperparams({_fresh_code(plan.call.func)}, '
        f'static_args={static})({", ".join(inner)})')

  def make_train_state(self, plan):
    """MakeTrainState -> ``train_state.TrainState.create(apply_fn=,
    params=, tx=)``."""
    if plan.carried:
      # its params are the Model; apply_fn calls it
      self._import(MODEL_HELPER_IMPORT)
      apply = 'legacy_model.apply_model'
    else:
      apply = ('None' if plan.apply_fn is None
               else self.apply_fn_src(plan.apply_fn))
    tx = self._tx_src(plan.tx)
    if plan.focus is not None:
      # legacy create(target, focus): a MultiOptimizer of one pair
      tx = self._labelled_src([tx], [_fresh_code(plan.focus)])
    return cst_util.expr(
        f'{self._train_state_class()}.create(apply_fn={apply}, '
        f'params={self._code(plan.params)}, tx={tx})')

  def _train_state_class(self, annotation=False):
    """``train_state.TrainState`` (importing flax.training's module), or
    ``FlaxTrainState`` (imported by that name) where the scope it is
    written in sees a ``train_state`` of the file's own (a variable holding
    the program's train state: the module's name would be shadowed)."""
    rw = self._rw()
    ctx = rw.ctx
    flow = getattr(ctx.codebase, 'flow', None)
    qual = rw.qual() if hasattr(rw, 'qual') else '.'.join(
        getattr(rw, '_quals', ()))
    # (a module-level ``train_state`` that is flax's module, imported by
    # the file itself, is no shadow)
    imported = ctx.facts.imports.get('train_state') == (
        'flax.training.train_state')
    if flow is not None and _sees_own(flow, ctx.facts.path, qual,
                                      'train_state', annotation,
                                      module_level=not imported):
      self._import('from flax.training.train_state import TrainState as '
                   'FlaxTrainState')
      return 'FlaxTrainState'
    self._import('from flax.training import train_state')
    return 'train_state.TrainState'

  def traversal_object(self, plan):
    """TraversalObject -> ``flax.traverse_util.ModelParamTraversal``."""
    self._import('import flax.traverse_util')
    return plan.call.with_changes(
        func=cst_util.expr('flax.traverse_util.ModelParamTraversal'))

  def dynamic_scale(self, plan):
    """DynamicScale -> ``flax.training.dynamic_scale.DynamicScale``."""
    self._import('from flax.training import dynamic_scale as '
                 'dynamic_scale_lib')
    return plan.call.with_changes(
        func=cst_util.expr('dynamic_scale_lib.DynamicScale'))

  # -- types and the attention cache --
  def legacy_type(self, plan):
    """LegacyType -> ``Any``, ``train_state.TrainState``,
    ``dynamic_scale_lib.DynamicScale`` or ``dict``."""
    if plan.what == 'Collection':
      return cst.Name('dict')  # {'batch_stats': ...} variables
    if plan.what == 'Optimizer':
      return cst_util.expr(self._train_state_class(annotation=True))
    imp, src = LEGACY_TYPES[plan.what]
    self._import(imp)
    return cst_util.expr(src)

  def initialize_cache(self, plan):
    """InitializeCache -> ``legacy_initialize_cache(cache, shape...)``
    (flaxlegacy.migrate.upgraded_cache: legacy's cache of the init's
    'cache' collection)."""
    self._import('from flaxlegacy.migrate.upgraded_cache import '
                 'legacy_initialize_cache')
    return cst.Call(func=cst.Name('legacy_initialize_cache'),
                    args=[cst.Arg(plan.cache, comma=cst.Comma(
                        whitespace_after=cst.SimpleWhitespace(' ')))]
                    + list(plan.args),
                    whitespace_before_args=plan.call.whitespace_before_args)

  # -- checkpoints --
  def checkpoint_call(self, plan):
    """CheckpointCall -> ``legacy_checkpoints.<op>_checkpoint(...)``."""
    self._rw().imports.add(CHECKPOINT_IMPORT)
    return plan.call.with_changes(
        func=cst_util.expr(CHECKPOINT_FUNCTIONS[plan.op]))
