"""The facts pass: what the rules need to know before rewriting anything.

Per file: which local names are the legacy ``nn`` module (``from flax import
nn``, ``import flax.nn as nn``, ``from flax.deprecated import nn``), which
local names are JAX modules (for the removed-names rule), which classes are
legacy ``Module`` subclasses and which functions are ``@nn.module``
functions, which module-level helper functions return ``X.partial(...)``,
and the literal ``init_by_shape`` / ``create_by_shape`` input shapes.

Across files (``CodebaseFacts``): every legacy module by class name, with
the split of its ``apply`` parameters into dataclass fields and
``__call__`` parameters.

The split (recorded in upgrade.json):
  * the first ``apply`` parameter (the input) is a call parameter;
  * a parameter that some ``.partial(...)`` of the class binds is a field;
  * otherwise a parameter used as an array -- ``p.shape`` / ``.ndim`` /
    ``.dtype`` / ``.reshape`` / ``.astype`` / ``.T``, ``p[...]``, or passed
    as the first positional argument of a call (a layer, a module, a
    ``jnp`` function) -- is a call parameter, and so is one passed on to a
    child module as one of the child's call parameters (to a fixpoint);
  * everything else (sizes, flags, dtypes, initialisers, config) is a field;
  * then (``split_by_call_sites``, once the value facts are solved): a
    field that a life cycle call or a model call passes positionally is a
    call parameter, unless a ``.partial`` binds it too
    (collectors/call_sites.py).
  ``**kwargs`` becomes a dict field of the same name (``var_kw``).

Layer 2 (cst_util.py lists the layers): this module runs the per-concept
collectors of collectors/ and imports no rule; the rules read what it
recorded.
"""

import ast
import dataclasses
import re
from typing import Any, Dict, List, Optional

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade import analyses as analyses_lib
from flaxlegacy.upgrade.collectors import aliases as alias_facts
from flaxlegacy.upgrade.collectors import call_sites as call_site_facts
from flaxlegacy.upgrade.collectors import gin_classes as gin_class_facts
from flaxlegacy.upgrade.collectors import helpers as helper_facts
from flaxlegacy.upgrade.collectors import methods as method_facts
from flaxlegacy.upgrade.collectors import programs as program_facts
from flaxlegacy.upgrade.collectors import stochastic_names as stochastic_facts
from flaxlegacy.upgrade.collectors import subclasses as subclass_facts
from flaxlegacy.upgrade.collectors import usage as usage_facts
from flaxlegacy.upgrade.cst_util import LEGACY_NN_MODULES  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.cst_util import dotted  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.cst_util import legacy_attr  # pylint: disable=g-importing-member


@dataclasses.dataclass
class ModuleInfo:
  """A legacy module definition (class with ``apply`` or ``@nn.module``)."""
  name: str
  file: str
  kind: str  # 'class' | 'function'
  params: List[str]  # apply parameters after self
  defaults: Dict[str, str]  # parameter -> default source
  var_kw: Optional[str] = None
  var_pos: Optional[str] = None
  base: str = 'Module'  # 'Module', a legacy layer name, or another class
  array_params: set = dataclasses.field(default_factory=set)
  # calls of possible child modules: (callee name, [positional param or
  # None], {keyword: param}) where the arguments are parameters of ours
  child_calls: list = dataclasses.field(default_factory=list)
  fields: List[str] = dataclasses.field(default_factory=list)
  call: List[str] = dataclasses.field(default_factory=list)
  problems: List[str] = dataclasses.field(default_factory=list)
  # name -> rules.methods.Method, for classes with methods besides apply
  methods: dict = dataclasses.field(default_factory=dict)
  # (class, {keywords}) of calls of shared instances (rules/helpers.py)
  shared_kw: list = dataclasses.field(default_factory=list)
  # keyword-only apply parameters (after ``*`` / ``*args``)
  kwonly: List[str] = dataclasses.field(default_factory=list)
  # parameters holding a module class that the body drives through the
  # legacy life cycle (``P.init(rng, ...)``, ``P.call(params, ...)``):
  # rigl's masking wrapper (rules/drivers.py)
  driven: set = dataclasses.field(default_factory=set)
  # the configurable name that ``apply``'s lone decorator (an ``@nn.module``
  # function's, besides ``nn.module``) registers where it is
  # ``@gin.configurable`` and the name is given or the class's, else None
  # (collectors/gin_classes.py)
  gin: Optional[str] = None
  # where gin_classes.py decided that the decorator goes on the linen
  # class: the parameters it made fields (gin gives them at construction);
  # else why not (for the TODO)
  gin_class: Optional[List[str]] = None
  gin_why: Optional[str] = None

  def report(self, methods=()):
    """The report's entry of the class; ``methods``: its legacy
    ``@nn.module_method`` methods the upgrade converted (a rule's
    outcome, not a fact: rules/modules.py)."""
    out = {'file': self.file, 'class': self.name, 'fields': self.fields,
           'call': self.call, 'var_kw': self.var_kw}
    if methods:
      out['methods'] = list(methods)
    return out


@dataclasses.dataclass
class FileFacts:
  path: str
  nn_prefixes: set = dataclasses.field(default_factory=set)
  imports: Dict[str, str] = dataclasses.field(default_factory=dict)
  modules: Dict[str, ModuleInfo] = dataclasses.field(default_factory=dict)
  # helper function name -> (kind, target expression source) for helpers
  # whose every return is ``X.partial(...)``.
  partial_helpers: Dict[str, str] = dataclasses.field(default_factory=dict)
  # helper name -> {parameter index or name: the partial's keyword it binds}
  partial_helper_binds: Dict[str, dict] = dataclasses.field(
      default_factory=dict)
  partial_kwargs: Dict[str, set] = dataclasses.field(default_factory=dict)
  init_shapes: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
  # classes this file makes shared instances of (``M.shared(...)``)
  shared_classes: set = dataclasses.field(default_factory=set)
  # class name -> (base as written, ModuleInfo) of top-level classes whose
  # base is imported from another file (``base_model.BaseModel``): legacy
  # modules if that base is one (CodebaseFacts.finish decides)
  foreign_subclasses: Dict[str, Any] = dataclasses.field(
      default_factory=dict)
  # local name -> 'make_rng' / 'is_stochastic' of legacy randomness imported
  # by name (``from flax.nn import make_rng``): collectors/stochastic_names.py
  stochastic_names: Dict[str, str] = dataclasses.field(default_factory=dict)


def _import_name(alias):
  return dotted(alias.name)


class _FileVisitor(walk.FastVisitor):
  """Collects a FileFacts."""

  def __init__(self, facts, code_of):
    self.f = facts
    self.code_of = code_of
    self.depth = 0
    self.class_depth = 0
    self.text = '.partial'  # the current top-level statement's source
    self.assigned = {}  # simple module-level/function name -> expr
    self._module_stack = []  # per open class: is it a legacy module

  # -- imports --
  def visit_Import(self, node):
    for a in node.names:
      full = _import_name(a)
      local = a.asname.name.value if a.asname else full
      if a.asname is None:
        head = full.split('.')[0]
        self.f.imports[head] = head
        if full in LEGACY_NN_MODULES:
          self.f.nn_prefixes.add(full)
        if head == 'flax':
          self.f.nn_prefixes.update(LEGACY_NN_MODULES)
      else:
        self.f.imports[local] = full
        if full in LEGACY_NN_MODULES:
          self.f.nn_prefixes.add(local)

  def visit_ImportFrom(self, node):
    if node.relative or isinstance(node.names, cst.ImportStar):
      return
    mod = dotted(node.module)
    for a in node.names:
      name = _import_name(a)
      local = a.asname.name.value if a.asname else name
      full = f'{mod}.{name}'
      self.f.imports[local] = full
      if full in LEGACY_NN_MODULES:
        self.f.nn_prefixes.add(local)

  # -- definitions --
  def _is_legacy_base(self, expr):
    attr = legacy_attr(expr, self.f.nn_prefixes)
    if attr == 'base.Module':  # nn.base.Module is nn.Module
      attr = 'Module'
    if attr is not None:
      return attr if attr in ('Module',) or attr[:1].isupper() else None
    return None

  def visit_ClassDef(self, node):
    self.class_depth += 1
    nested = bool(self.depth or self.class_depth > 1)
    self._module_stack.append(False)
    if nested and any(self._module_stack[:-1]):
      return  # inside a legacy module's own body
    for b in node.bases:
      base = self._is_legacy_base(b.value)
      if base is None and isinstance(b.value, cst.Name):
        base = b.value.value if b.value.value in self.f.modules else None
      if base is None:
        continue
      info = self._class_info(node, base, nested)
      self._module_stack[-1] = True
      old = self.f.modules.get(info.name)
      if old is not None and (old.params, old.defaults) != (
          info.params, info.defaults):
        # two module classes of one name (test methods each defining
        # their own network): neither is known for certain by name
        why = 'two module classes of this name in this file'
        for i in (old, info):
          if why not in i.problems:
            i.problems.append(why)
      self.f.modules[info.name] = info
      return

    if not nested:
      for b in node.bases:
        name = dotted(b.value)
        if name and name.split('.')[0] in self.f.imports and (
            legacy_attr(b.value, self.f.nn_prefixes) is None):
          # a base imported from another file: a legacy module class if
          # that file defines it as one (CodebaseFacts.finish)
          self.f.foreign_subclasses[node.name.value] = (
              name, self._class_info(node, name.split('.')[-1], nested))
          return

  def _class_info(self, node, base, nested):
    apply = None
    for stmt in node.body.body:
      if isinstance(stmt, cst.FunctionDef) and stmt.name.value == 'apply':
        apply = stmt
    info = self._info(node.name.value, 'class', apply, skip_self=True)
    info.base = base
    if apply is not None:
      method_facts.collect_class(info, node)
    extra, info.shared_kw = helper_facts.shared_calls(node, apply,
                                                 set(info.params))
    info.child_calls += extra
    info.nested = nested
    return info

  def leave_ClassDef(self, node):
    self.class_depth -= 1
    self._module_stack.pop()

  def visit_FunctionDef(self, node):
    self.depth += 1
    if self.depth > 1 or self.class_depth:
      return
    for d in node.decorators:
      if legacy_attr(d.decorator, self.f.nn_prefixes) == 'module':
        info = self._info(node.name.value, 'function', node, skip_self=False)
        self.f.modules[info.name] = info
        return
    # helper returning X.partial(...)
    if '.partial' not in self.text:
      return
    rets = _returns(node)
    targets = set()
    for r in rets:
      v = r.value
      if (isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute)
          and v.func.attr.value == 'partial'):
        targets.add(self.code_of(v.func.value))
      else:
        targets.add(None)
    if len(targets) == 1 and None not in targets:
      self.f.partial_helpers[node.name.value] = targets.pop()
      # which keyword of the partial each helper parameter is bound to
      ps = [p.name.value for p in list(node.params.posonly_params)
            + list(node.params.params)]
      binds = {}
      for r in rets:
        for a in r.value.args:
          if (a.keyword is not None and isinstance(a.value, cst.Name)
              and a.value.value in ps):
            binds[ps.index(a.value.value)] = a.keyword.value
            binds[a.value.value] = a.keyword.value
      self.f.partial_helper_binds[node.name.value] = binds

  def leave_FunctionDef(self, node):
    self.depth -= 1

  def _info(self, name, kind, fn, skip_self):
    info = ModuleInfo(name=name, file=self.f.path, kind=kind, params=[],
                      defaults={})
    if fn is None:
      info.problems.append('no apply method')
      return info
    ps = fn.params
    plist = list(ps.posonly_params) + list(ps.params)
    if skip_self and plist:
      plist = plist[1:]
    info.kwonly = [p.name.value for p in ps.kwonly_params]
    for p in plist + list(ps.kwonly_params):
      info.params.append(p.name.value)
      if p.default is not None:
        info.defaults[p.name.value] = self.code_of(p.default)
    if isinstance(ps.star_arg, cst.Param):
      info.var_pos = ps.star_arg.name.value
    if ps.star_kwarg is not None:
      info.var_kw = ps.star_kwarg.name.value
    self._decorators(info, fn, kind)
    usage = usage_facts.UsageVisitor(set(info.params))
    fn.body.visit(usage)
    info.array_params = usage.array - usage.driven
    info.weak_array = usage.weak - usage.array - usage.driven
    info.child_calls = usage.child_calls
    info.driven = usage.driven
    return info

  def _decorators(self, info, fn, kind):
    """``info.gin`` of ``fn`` (see ModuleInfo)."""
    decs = [d for d in fn.decorators if not (
        kind == 'function' and legacy_attr(d.decorator, self.f.nn_prefixes)
        == 'module')]
    if len(decs) == 1:
      info.gin = gin_class_facts.configurable_name(
          decs[0], self.f.imports, info.name if kind == 'function' else None)

  # -- partial kwargs and init_by_shape --
  def visit_Call(self, node):
    func = node.func
    if isinstance(func, cst.Attribute):
      owner = dotted(func.value)
      if func.attr.value == 'partial' and owner:
        keys = self.f.partial_kwargs.setdefault(owner.split('.')[-1], set())
        for a in node.args:
          if a.keyword is not None:
            keys.add(a.keyword.value)
          elif a.star == '**':
            keys.add('**')  # keywords not known here
      if func.attr.value in ('init_by_shape', 'create_by_shape'):
        self._init_shapes(node)
      if func.attr.value == 'shared' and owner:
        self.f.shared_classes.add(owner.split('.')[-1])

  def visit_Assign(self, node):
    if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
      self.assigned[node.targets[0].target.value] = node.value

  def _init_shapes(self, node):
    target = node.func.value
    kwargs = {}
    if isinstance(target, cst.Name) and target.value in self.assigned:
      target = self.assigned[target.value]
    if (isinstance(target, cst.Call) and isinstance(target.func, cst.Attribute)
        and target.func.attr.value == 'partial'):
      try:
        for a in target.args:
          if a.keyword is None:
            return
          kwargs[a.keyword.value] = ast.literal_eval(self.code_of(a.value))
      except (ValueError, SyntaxError):
        return
      target = target.func.value
    if not isinstance(target, cst.Name) or len(node.args) < 2:
      return
    specs = _literal_specs(self.code_of(node.args[1].value))
    if specs is None:
      return
    self.f.init_shapes.append({'class': target.value, 'kwargs': kwargs,
                               'inputs': specs,
                               'line': None})


_DTYPES = frozenset((
    'float16', 'bfloat16', 'float32', 'float64', 'int8', 'int16', 'int32',
    'int64', 'uint8', 'uint16', 'uint32', 'uint64', 'bool_', 'complex64',
    'complex128', 'float_', 'int_'))


def _is_int(node):
  if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
    node = node.operand
  return isinstance(node, ast.Constant) and isinstance(node.value, int)


def _dtype_like(node):
  if isinstance(node, ast.Attribute):
    return node.attr in _DTYPES or 'dtype' in node.attr
  if isinstance(node, ast.Name):
    return node.id in _DTYPES or 'dtype' in node.id
  if isinstance(node, ast.Constant):
    return node.value in _DTYPES
  return False


def _shape_like(node):
  if isinstance(node, (ast.Tuple, ast.List, ast.Call, ast.BinOp)):
    return True
  if isinstance(node, ast.Attribute):
    return 'shape' in node.attr
  if isinstance(node, ast.Name):
    return 'shape' in node.id
  return False


# init_specs: a spec only its value can classify (``(self._input_shape,)``)
RUNTIME_SPEC = '<run time>'


def init_specs(src, opaque=False):
  """``init_by_shape`` input specs: [(shape source, dtype source or None)].

  Legacy took each spec as a ``(shape, dtype)`` pair when it had two
  elements and the first was iterable, else as a float32 shape; in source
  that is: a two-element tuple whose second element is an int is a shape,
  one with a dtype-like second element or a shape-like first element a
  pair.  None when the source is not a literal list of specs or a spec
  could be either (``(a, b)`` of two plain names).  ``opaque``: a spec
  that is a plain reference (``self._input_shape``, ``shapes[0]``), which
  may hold either, is (its source, ``RUNTIME_SPEC``): the caller decides at
  run time, as legacy did.
  """
  try:
    tree = ast.parse(src, mode='eval').body
  except SyntaxError:
    return None
  if not isinstance(tree, (ast.List, ast.Tuple)):
    return None
  out = []
  for elt in tree.elts:
    if isinstance(elt, ast.Starred):
      return None
    if isinstance(elt, (ast.Tuple, ast.List)) and len(elt.elts) == 2:
      a, b = elt.elts
      if _is_int(a) or _is_int(b):
        out.append((ast.unparse(elt), None))
      elif _dtype_like(b) or _shape_like(a):
        out.append((ast.unparse(a), ast.unparse(b)))
      else:
        return None
    elif opaque and _plain_reference(elt):
      out.append((ast.unparse(elt), RUNTIME_SPEC))
    else:
      out.append((ast.unparse(elt), None))
  return out


def _plain_reference(node):
  """A name, attribute or constant subscript: cheap and safe to evaluate
  more than once."""
  if isinstance(node, ast.Name):
    return True
  if isinstance(node, ast.Attribute):
    return _plain_reference(node.value)
  if isinstance(node, ast.Subscript):
    return _plain_reference(node.value) and isinstance(
        node.slice, ast.Constant)
  return False


def _literal_specs(src):
  """[((shape), dtype)] source -> [[shape, 'float32'], ...] or None."""
  specs = init_specs(src)
  if specs is None:
    return None
  out = []
  for shape_src, dtype_src in specs:
    try:
      shape = ast.literal_eval(shape_src)
    except (ValueError, SyntaxError):
      return None
    if not isinstance(shape, (tuple, list)):
      return None
    dtype = 'float32' if dtype_src is None else dtype_src.split('.')[-1]
    out.append([list(shape), dtype.strip('\'"')])
  return out


def _returns(fn):
  out = []

  class V(walk.FastVisitor):

    def visit_Return(self, node):
      if node.value is not None:
        out.append(node)

    def visit_FunctionDef(self, node):
      return node is fn

    def visit_Lambda(self, node):
      return False

  fn.visit(V())
  return out


class CodebaseFacts:
  """Facts of every file, and the module table across them."""

  def __init__(self):
    self.files = {}
    self.modules = {}  # class name -> ModuleInfo (first definition wins)
    self.partial_kwargs = {}
    self.shared_classes = set()
    self.flow = None  # flow.Flow: what each name can hold (api._analyse)
    # the codebase-wide analyses of the facts, each worked out at its first
    # use (analyses/): rules read them, and store nothing on the facts
    self.analyses = analyses_lib.Analyses(self)
    # builds a legacy attention Cache (rules/attention_cache.py)
    self.attention_cache = False
    # 'legacy': keep legacy auto-names (explicit name=); 'linen': linen's own
    # per-type names where they are known statically, plus a rename map
    self.names_mode = 'legacy'
    # (rel, id(call)) -> why: model calls passing a field positionally
    # (split_by_call_sites)
    self.positional_field_calls = {}
    # top-level package -> (distribution, version, uses): installed
    # dependencies calling removed JAX names (dependencies.py)
    self.stale_dependencies = {}

  def module(self, file_facts, name):
    """The module class ``name`` as seen from a file: its own first."""
    return file_facts.modules.get(name) or self.modules.get(name)

  def imported_file(self, file_facts, local):
    """The FileFacts of the codebase file that ``local`` (a name bound by
    an import in ``file_facts``: ``from pkg import models``) is, or None."""
    full = file_facts.imports.get(local) if file_facts else None
    if not full:
      return None
    cache = self.__dict__.setdefault('_imported_files', {})  # (add() clears)
    if full not in cache:
      cache[full] = self._file_named(full)
    return cache[full]

  def _file_named(self, full):
    found = None
    for rel, f in self.files.items():
      stem = rel[:-3] if rel.endswith('.py') else rel
      stem = stem.replace('/', '.').replace('\\', '.')
      if stem.endswith('.__init__'):
        stem = stem[:-len('.__init__')]
      if stem == full or stem.endswith('.' + full) or full.endswith(
          '.' + stem):
        if found is not None and found is not f:
          return None  # two files could be it
        found = f
    return found

  def partial_helper(self, file_facts, func):
    """(target source, FileFacts) of a helper returning ``X.partial(...)``
    called as ``func`` (``helper`` or ``module.helper``), or (None, None)."""
    if isinstance(func, cst.Name):
      if func.value in file_facts.partial_helpers:
        return file_facts.partial_helpers[func.value], file_facts
      return None, None
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
      f = self.imported_file(file_facts, func.value.value)
      if f is not None and func.attr.value in f.partial_helpers:
        return f.partial_helpers[func.attr.value], f
    return None, None

  def add(self, facts):
    self.files[facts.path] = facts
    self.__dict__.pop('_imported_files', None)  # (imported_file's answers)
    for name, info in facts.modules.items():
      if not getattr(info, 'nested', False):  # a class local to a function
        self.modules.setdefault(name, info)   # is not importable
    for name, keys in facts.partial_kwargs.items():
      self.partial_kwargs.setdefault(name, set()).update(keys)
    self.shared_classes |= facts.shared_classes

  def _foreign_base(self, file_facts, written):
    """The ModuleInfo of the module class a base written ``written``
    (``base_model.BaseModel``, or ``BaseModel`` imported by name) names in
    another file of the codebase, or None."""
    parts = written.split('.')
    full = file_facts.imports.get(parts[0])
    if not full:
      return None
    path = '.'.join([full] + parts[1:-1]) if len(parts) > 1 else (
        full.rsplit('.', 1)[0] if '.' in full else '')
    target = self._file_named(path) if path else None
    if target is None or target is file_facts:
      return None
    info = target.modules.get(parts[-1])
    if info is None or info.kind != 'class' or getattr(info, 'nested', False):
      return None
    return info

  def adopt_foreign_subclasses(self):
    """Classes whose base is a legacy module class of another file are
    legacy module classes too (chains across files: until nothing moves)."""
    changed = True
    while changed:
      changed = False
      for f in self.files.values():
        for name, (written, info) in list(f.foreign_subclasses.items()):
          if name in f.modules or self._foreign_base(f, written) is None:
            continue
          del f.foreign_subclasses[name]
          f.modules[name] = info
          self.modules.setdefault(name, info)
          changed = True

  def finish(self):
    """Splits every module's parameters (see the module docstring)."""
    self.adopt_foreign_subclasses()
    alias_facts.propagate_partial_kwargs(self)  # X = M.partial(k=...): M's too
    infos = [i for f in self.files.values() for i in f.modules.values()]
    for info in infos:
      partial = self.partial_kwargs.get(info.name, set())
      info.fields, info.call = [], []
      for i, p in enumerate(info.params):
        if i == 0 and p not in info.kwonly and p not in partial:
          info.call.append(p)  # the input (unless a .partial binds it)
        elif p in info.driven:  # a module class: a field
          info.fields.append(p)
        elif p in partial:
          info.fields.append(p)
        elif p in info.array_params or (
            p in getattr(info, 'weak_array', ()) and '**' not in partial):
          # (``p.size`` of a module some .partial(**config) builds: a
          # config's field as likely as an array's size: a field)
          info.call.append(p)
        else:
          info.fields.append(p)
    # Helper methods, and positional arguments at module calls (methods.py).
    method_facts.refine_split(self, infos)
    helper_facts.move_shared_call_params(self, infos)
    # A subclass without apply of its own takes its base's split.
    subclass_facts.inherit_splits(self)
    self._pass_on_call_params(infos)
    return self

  def split_by_call_sites(self):
    """Refines the split by how the call sites the value facts see pass
    each parameter (collectors/call_sites.py); after ``finish``, once
    ``self.flow`` is solved."""
    self.positional_field_calls = {}
    if self.flow is None:
      return self
    sites = call_site_facts.collect(self, self.flow)
    if call_site_facts.refine_split(self, sites):
      self._pass_on_call_params(
          [i for f in self.files.values() for i in f.modules.values()])
    self.positional_field_calls = call_site_facts.field_calls(self, sites)
    # gin-configurable applies whose decorator can go on the class
    gin_class_facts.decide(self, self.flow)
    return self

  def _pass_on_call_params(self, infos):
    """A parameter passed on as a call parameter of a child module is one
    too (``Decoder(targets=targets)``); repeat until nothing moves."""
    changed = True
    while changed:
      changed = False
      for info in infos:
        facts = self.files.get(info.file)
        for callee, pos, kw in info.child_calls:
          child = self.module(facts, callee) if facts else None
          if child is None or child is info:
            continue
          moved = set()
          for i, p in enumerate(pos):
            if p and i < len(child.params) and child.params[i] in child.call:
              moved.add(p)
          for k, p in kw.items():
            if k in child.call:
              moved.add(p)
          for p in moved:
            if p in info.fields and p not in self.partial_kwargs.get(
                info.name, ()):
              info.fields.remove(p)
              info.call.append(p)
              changed = True
      for info in infos:  # keep the legacy order
        info.call.sort(key=info.params.index)


FACT_MARKERS = re.compile(
    r'\bimport\b|\.partial\b|init_by_shape|create_by_shape|\bnn\b|'
    r'flax\.nn|flax\.deprecated')


def _subclass_of_known(stmt, facts):
  """``class B(A):`` with A a legacy module class seen earlier in the file."""
  return isinstance(stmt, cst.ClassDef) and any(
      isinstance(b.value, cst.Name) and b.value.value in facts.modules
      for b in stmt.bases)


def collect(path, module, code_of=None, statement_texts=None, code=None):
  """The FileFacts of one parsed file.

  ``statement_texts``: the source of each top-level statement; statements
  whose text shows nothing a fact is made of are not walked (speed).
  ``code``: the source ``module`` was parsed from, if the caller has it.
  """
  code_of = code_of or (lambda node: cst_util.code(node, module))
  facts = FileFacts(path=path)
  visitor = _FileVisitor(facts, code_of)
  for i, stmt in enumerate(module.body):
    if (statement_texts is None or FACT_MARKERS.search(statement_texts[i])
        or _subclass_of_known(stmt, facts)):
      if statement_texts is not None:
        visitor.text = statement_texts[i]
      stmt.visit(visitor)
  program_facts.collect_facts(facts, module, code_of, code)
  alias_facts.collect_facts(facts, module, code_of)
  subclass_facts.collect_facts(facts, module)
  stochastic_facts.collect_facts(facts, module)
  return facts
