"""A read-only libcst walk that does not rebuild the tree (speed).

``node.visit(visitor)`` with a ``cst.CSTVisitor`` walks through each
node's ``_visit_and_replace_children``: it constructs (and validates) a
new copy of every node it passes, and throws the copies away.  That is
most of the cost of the facts walks.  ``FastVisitor`` is a drop-in base
class: the same ``visit_X`` / ``leave_X`` calls, on the same nodes, in
the same order, without the copies.

The order of a node's children is the order in which its class's
``_visit_and_replace_children`` visits its fields, read once per class
from libcst's source (every such method visits ``self.<field>`` with
``visit_required`` / ``visit_optional`` / ``visit_sentinel`` /
``visit_sequence`` / ``visit_body_sequence``; a field holding a node is
visited as one, a sequence child by child).  What it leaves out: the
``visit_<Node>_<field>`` attribute hooks (no visitor here defines one;
``FastVisitor`` refuses a subclass that does).  Where libcst's source
cannot be read, that node's children are walked by libcst, as before.
tests/test_upgrade_walk.py checks the calls against libcst's own walk.
"""

import ast
import collections.abc
import inspect
import re
import textwrap
import typing

import libcst as cst

_VISITS = frozenset(('visit_required', 'visit_optional', 'visit_sentinel',
                     'visit_sequence', 'visit_body_sequence',
                     'visit_iterable', 'visit_body_iterable'))
_FIELDS = {}  # node class -> its visited fields, in visiting order
_LIBCST_WALKS = set()  # node classes whose source is not there to read
_ATTRIBUTE_HOOK = re.compile(r'^(visit|leave)_[A-Z]\w*?_[a-z]\w*$')


_METHOD_ASTS = {}  # node class -> its _visit_and_replace_children (ast), or None


def _walk_method(cls):
  """The ``ast`` of ``cls``'s ``_visit_and_replace_children``, or None
  where its source cannot be read; read once per class (the visitors'
  and the transformers' field tables both read it)."""
  if cls in _METHOD_ASTS:
    return _METHOD_ASTS[cls]
  for klass in cls.__mro__:
    method = klass.__dict__.get('_visit_and_replace_children')
    if method is not None:
      break
  else:
    method = None
  try:
    fn = ast.parse(textwrap.dedent(inspect.getsource(method))).body[0]
  except (OSError, TypeError):
    fn = None
  _METHOD_ASTS[cls] = fn
  return fn


def _fields_of(cls):
  fields = _FIELDS.get(cls)
  if fields is not None:
    return fields
  fn = _walk_method(cls)
  if fn is None:  # no source to read: libcst's walk
    _FIELDS[cls] = ()
    _LIBCST_WALKS.add(cls)
    return ()
  calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(
      n.func, ast.Name) and n.func.id in _VISITS]
  calls.sort(key=lambda n: (n.lineno, n.col_offset))
  fields = []
  for call in calls:
    field = call.args[1].value
    if field not in fields:
      fields.append(field)
  fields = tuple(fields)
  _FIELDS[cls] = fields
  return fields


def _refuse_attribute_hooks(cls, base, instead):
  """A subclass of ``base`` defining ``visit_<Node>_<field>`` hooks (the
  fast walks never call them; libcst's own stubs are not the subclass's):
  a TypeError naming them."""
  own = cls.__mro__[:cls.__mro__.index(base)]
  hooks = sorted({n for k in own for n in vars(k) if _ATTRIBUTE_HOOK.match(n)})
  if hooks:
    raise TypeError(f'{cls.__name__}: {base.__name__} does not call attribute '
                    f'hooks ({", ".join(hooks)}); use {instead}')


class FastVisitor(cst.CSTVisitor):
  """A ``cst.CSTVisitor`` whose walk copies nothing (see the module
  docstring).  ``node.visit(v)`` works as with any visitor."""

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    _refuse_attribute_hooks(cls, FastVisitor, 'cst.CSTVisitor')

  def on_visit(self, node):
    # cst.CSTVisitor.on_visit, with the visit_X look-up cached per class
    plans = _PLANS.get(type(self))
    if plans is None:
      plans = _plans_of(type(self))
    if plans is not False:  # hooks only: the walk below, without calls of
      # on_visit / on_leave per node
      plan = plans.get(type(node))
      if plan is None:
        plan = _plan(plans, type(self), type(node))
      visit, _, fields = plan
      if visit is not None and visit(self, node) is False:
        return False
      if fields is None:
        return True  # libcst walks its children (_LIBCST_WALKS)
      _walk_children(self, node, fields, plans, _skipped(type(self),
                                                         cst.CSTVisitor))
      return False
    key = (type(self), type(node))
    hook = _HOOKS.get(key, _MISSING)
    if hook is _MISSING:
      hook = _HOOKS[key] = _own_hook(type(self), 'visit_' + type(
          node).__name__, cst.CSTVisitor)
    if hook is not None and hook(self, node) is False:
      return False
    skip = _skipped(type(self), cst.CSTVisitor)
    fields = (_FIELDS if skip is not TOKENS else _NONTOKEN_FIELDS).get(
        type(node))
    if fields is None:
      fields = _fields_of(type(node))
      if skip is TOKENS:
        fields = _NONTOKEN_FIELDS[type(node)] = tuple(
            f for f in fields if f not in _token_fields(type(node)))
    if type(node) in _LIBCST_WALKS:
      return True
    on_visit, on_leave = self.on_visit, self.on_leave
    for field in fields:
      value = getattr(node, field)
      kind = _KINDS.get(type(value)) or _kind(type(value))
      if kind == _NODE:
        if type(value) in skip:
          continue
        if on_visit(value):  # (as CSTNode.visit does)
          value._visit_and_replace_children(self)  # pylint: disable=protected-access
        on_leave(value)
      elif kind == _SEQUENCE:
        for child in value:
          if type(child) in skip:
            continue
          if on_visit(child):
            child._visit_and_replace_children(self)  # pylint: disable=protected-access
          on_leave(child)
    return False  # the children are walked: libcst goes on to on_leave

  def on_leave(self, original_node):
    key = (type(self), type(original_node))
    hook = _LEAVES.get(key, _MISSING)
    if hook is _MISSING:
      hook = _LEAVES[key] = _own_hook(type(self), 'leave_' + type(
          original_node).__name__, cst.CSTVisitor)
    if hook is not None:
      hook(self, original_node)


_NONTOKEN_FIELDS = {}  # node class -> its fields that are not _token_fields
_PLANS = {}  # visitor class -> {node class: (visit_X, leave_X, fields)},
# or False where the class has its own on_visit / on_leave (called per node)


def _plans_of(cls):
  own = (cls.on_visit is FastVisitor.on_visit
         and cls.on_leave is FastVisitor.on_leave)
  plans = _PLANS[cls] = {} if own else False
  return plans


def _plan(plans, cls, node_cls):
  """(visit hook, leave hook, fields walked; None: libcst walks them) of
  ``node_cls`` for visitor class ``cls``."""
  fields = _FIELDS.get(node_cls)
  if fields is None:
    fields = _fields_of(node_cls)
  if node_cls in _LIBCST_WALKS:
    fields = None
  elif _skipped(cls, cst.CSTVisitor) is TOKENS:
    fields = _NONTOKEN_FIELDS.get(node_cls)
    if fields is None:
      fields = _NONTOKEN_FIELDS[node_cls] = tuple(
          f for f in _fields_of(node_cls)
          if f not in _token_fields(node_cls))
  hooks = _HOOK_TABLES.get((cls, cst.CSTVisitor))
  if hooks is None:
    hooks = _hook_table(cls, cst.CSTVisitor)
  plan = plans[node_cls] = (hooks.get('visit_' + node_cls.__name__),
                            hooks.get('leave_' + node_cls.__name__), fields)
  return plan


_TOKEN_FIELDS = {}  # node class -> its fields that can hold tokens only


def _token_fields(node_cls):
  """The fields of ``node_cls`` whose annotated type holds nothing but
  ``TOKENS`` (``Call.lpar``, ``Arg.comma``, ``Attribute.dot``): a walk
  that steps over tokens has nothing to do there.  Read from the node's
  dataclass annotations; none where they cannot be read."""
  out = _TOKEN_FIELDS.get(node_cls)
  if out is not None:
    return out
  try:
    hints = typing.get_type_hints(node_cls)
  except Exception:  # pylint: disable=broad-except
    hints = {}

  def tokens_only(t):
    if typing.get_origin(t) is not None:
      return all(tokens_only(a) for a in typing.get_args(t))
    return t in TOKENS or t is type(None) or t is cst.MaybeSentinel

  out = _TOKEN_FIELDS[node_cls] = frozenset(
      f for f, t in hints.items() if tokens_only(t))
  return out


def _walk_children(self, node, fields, plans, skip):
  """``FastVisitor.on_visit``'s walk below ``node``, for a visitor of
  hooks only: per child its visit hook, its children (unless the hook
  said False), its leave hook, as libcst calls them.  (A token stepped
  over, ``skip``, has a plan of no hooks and nothing below to walk: it is
  passed over by its plan.)"""
  for field in fields:
    value = getattr(node, field)
    t = type(value)
    if t is tuple:
      children = value
    else:
      kind = _KINDS.get(t) or _kind(t)
      if kind == _NODE:
        children = (value,)
      elif kind == _SEQUENCE:
        children = value
      else:
        continue
    for child in children:
      plan = plans.get(type(child))
      if plan is None:
        plan = _plan(plans, type(self), type(child))
      visit, leave, child_fields = plan
      if visit is None or visit(self, child) is not False:
        if child_fields:
          _walk_children(self, child, child_fields, plans, skip)
        elif child_fields is None:
          child._visit_and_replace_children(self)  # pylint: disable=protected-access
      if leave is not None:
        leave(self, child)


def _token_classes():
  """libcst's whitespace, comment, operator and bracket nodes: leaves of
  the tree as the rules see it (none holds a node of another kind)."""
  from libcst._nodes import op, whitespace  # pylint: disable=g-import-not-at-top,protected-access
  out = set()
  for mod in (whitespace, op):
    for name in dir(mod):
      c = getattr(mod, name)
      if (isinstance(c, type) and issubclass(c, cst.CSTNode)
          and c.__module__ == mod.__name__):
        out.add(c)
  out.update((cst.LeftParen, cst.RightParen, cst.LeftSquareBracket,
              cst.RightSquareBracket, cst.LeftCurlyBrace, cst.RightCurlyBrace))
  return frozenset(out)


TOKENS = _token_classes()
_SKIPPED = {}  # visitor / transformer class -> TOKENS, or () if it has hooks


def _skipped(cls, base):
  """The node classes a walk of ``cls`` steps over: the tokens (``TOKENS``)
  where it has no ``visit_`` / ``leave_`` hook for any of them.  Its
  ``on_visit`` / ``on_leave`` are not called for what it steps over (every
  override in the upgrade looks at statements and expressions only)."""
  out = _SKIPPED.get(cls)
  if out is None:
    hooks = _HOOK_TABLES.get((cls, base))
    if hooks is None:
      hooks = _hook_table(cls, base)
    out = _SKIPPED[cls] = () if any(
        n in _TOKEN_HOOKS for n in hooks) else TOKENS
  return out


_TOKEN_HOOKS = frozenset(f'{p}_{t.__name__}' for t in TOKENS
                         for p in ('visit', 'leave'))
# (class, base) -> {hook name: hook} of every visit_ / leave_ attribute of
# the class that is not the base's (libcst's empty stubs left out)
_HOOK_TABLES = {}


def _hook_table(cls, base):
  """``{name: _own_hook(cls, name, base)}`` for the names where that is
  not None, read once per class: only a class of ``cls``'s MRO outside
  ``base``'s can define a hook that is not the base's attribute (the
  upgrade defines many small visitor classes inside functions, one class
  object per call)."""
  theirs = set(base.__mro__)
  names = {n for k in cls.__mro__ if k not in theirs for n in vars(k)
           if n.startswith(('visit_', 'leave_'))}
  table = {}
  for name in names:
    hook = getattr(cls, name, None)
    if hook is not None and hook is not getattr(base, name, None):
      table[name] = hook
  _HOOK_TABLES[(cls, base)] = table
  return table


def _own_hook(cls, name, base=cst.CSTTransformer):
  """``cls``'s hook ``name``, or None where it is libcst's empty stub."""
  table = _HOOK_TABLES.get((cls, base))
  if table is None:
    table = _hook_table(cls, base)
  return table.get(name)


_MISSING = object()
_HOOKS = {}  # (visitor class, node class) -> its visit_X or None
_LEAVES = {}  # (visitor class, node class) -> its leave_X or None
_NODE, _SEQUENCE, _NOTHING = 1, 2, 3
_KINDS = {}  # type of a field's value -> _NODE / _SEQUENCE / _NOTHING


def _kind(t):
  """A node, a sequence of nodes, or nothing to walk (None, MaybeSentinel)."""
  if issubclass(t, cst.CSTNode):
    kind = _NODE
  elif issubclass(t, collections.abc.Sequence) and not issubclass(t, str):
    kind = _SEQUENCE
  elif t is type(None) or issubclass(t, cst.MaybeSentinel):
    kind = _NOTHING
  else:
    raise TypeError(f'flaxlegacy upgrade: a libcst field holds a {t.__name__}')
  _KINDS[t] = kind
  return kind


def target_names(t):
  """The names an assignment or loop target binds (``a``, ``a, (b, *c)``)."""
  if isinstance(t, cst.Name):
    return [t.value]
  if isinstance(t, (cst.Tuple, cst.List)):
    return [n for e in t.elements for n in target_names(e.value)]
  if isinstance(t, cst.StarredElement):
    return target_names(t.value)
  return []


class BoundNames(FastVisitor):
  """The names a body binds: assignment, augmented and annotated
  assignment, loop and comprehension targets, ``as`` names, ``:=``; with
  ``params``, parameters too (of the function and of nested ones)."""

  def __init__(self, params=False):
    self.names = set()
    self._params = params

  def visit_Param(self, node):
    if self._params:
      self.names.add(node.name.value)

  def visit_AssignTarget(self, node):
    self.names.update(target_names(node.target))

  def visit_AnnAssign(self, node):
    self.names.update(target_names(node.target))

  def visit_AugAssign(self, node):
    self.names.update(target_names(node.target))

  def visit_For(self, node):
    self.names.update(target_names(node.target))

  def visit_CompFor(self, node):
    self.names.update(target_names(node.target))

  def visit_AsName(self, node):
    self.names.update(target_names(node.name))

  def visit_NamedExpr(self, node):
    self.names.update(target_names(node.target))


class LoadedNames(FastVisitor):
  """The names a node reads: its ``Name`` nodes, but not attribute names
  (``x.name``) nor keywords (``f(name=...)``); ``in_del=False`` leaves out
  the names of ``del`` statements, ``in_imports=False`` those an import
  spells or binds."""

  def __init__(self, in_del=True, in_imports=True):
    self.names = set()
    self._in_del = in_del
    self._in_imports = in_imports

  def visit_Attribute(self, node):
    node.value.visit(self)
    return False

  def visit_Arg(self, node):
    node.value.visit(self)
    return False

  def visit_Del(self, node):  # pylint: disable=unused-argument
    return self._in_del

  def visit_ImportAlias(self, node):  # pylint: disable=unused-argument
    return self._in_imports

  def visit_Name(self, node):
    self.names.add(node.value)


class ScopedVisitor(FastVisitor):
  """A ``FastVisitor`` that keeps ``quals``: the names of the classes and
  functions around the node being visited (flow.py's scope names)."""

  def __init__(self):
    self.quals = []

  def visit_ClassDef(self, node):
    self.quals.append(node.name.value)

  def leave_ClassDef(self, node):
    self.quals.pop()

  def visit_FunctionDef(self, node):
    self.quals.append(node.name.value)

  def leave_FunctionDef(self, node):
    self.quals.pop()


# --- transformers -----------------------------------------------------------

# How a node class's ``_visit_and_replace_children`` visits each field.
_REQUIRED, _OPTIONAL, _SENTINEL, _SEQ, _BODY = range(5)
_FIELD_KINDS = {'visit_required': _REQUIRED, 'visit_optional': _OPTIONAL,
                'visit_sentinel': _SENTINEL, 'visit_sequence': _SEQ,
                'visit_body_sequence': _BODY}
_TFIELDS = {}  # node class -> ((field, kind), ...), () for a leaf, None:
# libcst's own walk (its method is not one constructor call of fields)


def _transform_fields(cls):
  """``((field, kind), ...)`` in visiting order, if ``cls``'s
  ``_visit_and_replace_children`` is ``return Cls(f=visit_X(self, 'f',
  self.f, visitor), g=self.g, ...)`` (or ``return self``); else None."""
  if cls in _TFIELDS:
    return _TFIELDS[cls]
  fields = None
  fn = _walk_method(cls)
  body = [s for s in getattr(fn, 'body', ()) if not (
      isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
  if len(body) == 1 and isinstance(body[0], ast.Return):
    value = body[0].value
    if isinstance(value, ast.Name) and value.id == 'self':
      fields = ()
    elif isinstance(value, ast.Call) and not value.args:
      fields = []
      for kw in value.keywords:
        v = kw.value
        if (isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name)
            and v.value.id == 'self' and v.attr == kw.arg):
          continue  # passed on as it is
        if (isinstance(v, ast.Call) and isinstance(v.func, ast.Name)
            and v.func.id in _FIELD_KINDS and len(v.args) == 4
            and isinstance(v.args[1], ast.Constant)
            and v.args[1].value == kw.arg
            and ast.unparse(v.args[2]) == 'self.' + kw.arg):
          fields.append((kw.arg, _FIELD_KINDS[v.func.id]))
          continue
        fields = None
        break
      fields = tuple(fields) if fields is not None else None
  _TFIELDS[cls] = fields
  return fields


class FastTransformer(cst.CSTTransformer):
  """A ``cst.CSTTransformer`` whose walk copies only what changes.

  libcst's walk builds (and validates) a new copy of every node it passes;
  this one walks the same fields in the same order, calls the same
  ``visit_X`` / ``leave_X`` hooks, and builds a new node only where a child
  changed, so ``updated_node is original_node`` wherever nothing below
  changed.  Run it with ``transform(node, t)`` (``node.visit(t)`` works
  too, the libcst way).  Node classes whose walk is not a plain
  constructor of visited fields are walked by libcst.  As with
  ``FastVisitor``, ``visit_<Node>_<field>`` hooks are refused.
  """

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    _refuse_attribute_hooks(cls, FastTransformer, 'cst.CSTTransformer')

  # A mixin whose on_visit / on_leave do something more for statements
  # only (cst_util.TodoComments) sets STATEMENT_WRAPPER = True and defines
  # ``enter_statement(node)`` (before the visit hook; False: the children
  # are not walked) and ``leave_statement(original_node, result)`` (after
  # the leave hook): the walk then calls those and the hooks itself, not
  # on_visit / on_leave per node.

  def on_visit(self, node):
    # cst.CSTTransformer.on_visit, the visit_X look-up cached per class
    # (libcst's empty stubs left out)
    key = (type(self), type(node))
    hook = _THOOKS.get(key, _MISSING)
    if hook is _MISSING:
      hook = _THOOKS[key] = _own_hook(type(self), 'visit_' + type(node).__name__)
    return hook is None or hook(self, node) is not False

  def on_leave(self, original_node, updated_node):
    key = (type(self), type(original_node))
    hook = _TLEAVES.get(key, _MISSING)
    if hook is _MISSING:
      hook = _TLEAVES[key] = _own_hook(type(self), 'leave_' + type(
          original_node).__name__)
    return updated_node if hook is None else hook(self, original_node,
                                                  updated_node)

  def walk(self, node):
    """``node.visit(self)``, copying only what changes."""
    mode, plans = _TPLANS.get(type(self)) or _tplans_of(type(self))
    if mode == _GENERIC:  # its own on_visit / on_leave: called per node
      if self.on_visit(node):
        fmap = _TWALKED.get(type(self))
        if fmap is None:
          fmap = _TWALKED[type(self)] = {}
        fields = fmap.get(type(node), _MISSING)
        if fields is _MISSING:
          fields = _walked_fields(fmap, type(self), type(node))
        updated = (node._visit_and_replace_children(self)  # pylint: disable=protected-access
                   if fields is None else self._children(node, fields))
      else:
        updated = node
      result = self.on_leave(node, updated)
    else:  # hooks only (and a STATEMENT_WRAPPER's statement calls)
      plan = plans.get(type(node))
      if plan is None:
        plan = _tplan(plans, type(self), type(node))
      visit, leave, fields, statement, _ = plan
      keep_out = statement and self.enter_statement(node) is False
      if (visit is None or visit(self, node) is not False) and not keep_out:
        if fields is None:
          updated = node._visit_and_replace_children(self)  # pylint: disable=protected-access
        elif fields:
          updated = self._children(node, fields, plans)
        else:  # nothing below it to walk
          updated = node
      else:
        updated = node
      result = updated if leave is None else leave(self, node, updated)
      if statement:
        result = self.leave_statement(node, result)
    if result is not updated and not isinstance(
        result, (cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel)):
      raise cst.CSTValidationError(
          'Expected a node of type CSTNode or a RemovalSentinel, but got a '
          f'return value of {type(result).__name__}')
    return result

  def _children(self, node, fields, plans=None):
    """``node`` with its ``fields`` walked.  ``plans``: the hooks-only
    walk's plans, whose children with no hook and nothing below to walk
    (``_tplan``'s last item) stay as they are without a ``walk`` call
    (about half of the nodes are such leaves)."""
    changes = None
    walk = self.walk
    if plans is None:
      plans = _NO_PLANS
      skip = _skipped(type(self), cst.CSTTransformer)
    else:  # (a token stepped over is a leaf of the plans: no skip check)
      skip = ()
    for field, kind in fields:
      value = getattr(node, field)
      if type(value) in skip:
        continue
      if kind == _SEQ or kind == _BODY:
        out, changed = [], False
        for child in value:
          t = type(child)
          if t in skip:
            out.append(child)
            continue
          plan = plans.get(t)
          if plan is not None and plan[4]:
            out.append(child)
            continue
          new = walk(child)
          if new is child:
            out.append(child)
            continue
          changed = True
          if isinstance(new, cst.RemovalSentinel):
            continue
          if isinstance(new, cst.FlattenSentinel):
            for c in new:
              if kind == _BODY and (not child._is_removable()  # pylint: disable=protected-access
                                    and c._is_removable()):  # pylint: disable=protected-access
                continue
              out.append(c)
            continue
          if kind == _BODY and (not child._is_removable()  # pylint: disable=protected-access
                                and new._is_removable()):  # pylint: disable=protected-access
            continue
          out.append(new)
        if not changed:
          continue
        new = tuple(out)
      elif value is None or isinstance(value, cst.MaybeSentinel):
        continue
      else:
        plan = plans.get(type(value))
        if plan is not None and plan[4]:
          continue
        new = walk(value)
        if new is value:
          continue
        if isinstance(new, cst.FlattenSentinel):
          raise TypeError(
              f'We got a FlattenSentinel while visiting a '
              f'{type(value).__name__}. This node\'s parent does not allow '
              'for it to be it to be replaced with a sequence.')
        if isinstance(new, cst.RemovalSentinel):
          if kind == _REQUIRED:
            raise TypeError(
                f'We got a RemovalSentinel while visiting a '
                f'{type(value).__name__}. This node\'s parent does not allow '
                'it to be removed.')
          new = None if kind == _OPTIONAL else cst.MaybeSentinel.DEFAULT
      if changes is None:
        changes = {}
      changes[field] = new
    return node if changes is None else node.with_changes(**changes)


_TWALKED = {}  # transformer class -> {node class: its fields walked}
_NO_PLANS = {}  # (a walk through on_visit / on_leave: every node walked)
# how FastTransformer.walk calls a transformer class's hooks: through its
# own on_visit / on_leave; the hooks directly; the hooks and a
# STATEMENT_WRAPPER's enter_statement / leave_statement
_GENERIC, _HOOKS_ONLY, _STATEMENTS = range(3)
# transformer class -> (its mode, {node class: (visit_X, leave_X, fields
# walked, whether the node is a statement, whether the walk has nothing to
# do there)})
_TPLANS = {}


def _definer(cls, name, after=None):
  """The class of ``cls``'s MRO (after ``after``) whose body defines
  ``name``."""
  mro = cls.__mro__
  if after is not None:
    mro = mro[mro.index(after) + 1:]
  return next((k for k in mro if name in vars(k)), None)


def _tplans_of(cls):
  v, l = _definer(cls, 'on_visit'), _definer(cls, 'on_leave')
  if v is FastTransformer and l is FastTransformer:
    mode = _HOOKS_ONLY
  elif (v is l and vars(v).get('STATEMENT_WRAPPER')
        and _definer(cls, 'on_visit', v) is FastTransformer
        and _definer(cls, 'on_leave', v) is FastTransformer):
    mode = _STATEMENTS
  else:
    mode = _GENERIC
  out = _TPLANS[cls] = (mode, {})
  return out


def _tplan(plans, cls, node_cls):
  fmap = _TWALKED.get(cls)
  if fmap is None:
    fmap = _TWALKED[cls] = {}
  fields = fmap.get(node_cls, _MISSING)
  if fields is _MISSING:
    fields = _walked_fields(fmap, cls, node_cls)
  hooks = _HOOK_TABLES.get((cls, cst.CSTTransformer))
  if hooks is None:
    hooks = _hook_table(cls, cst.CSTTransformer)
  visit = hooks.get('visit_' + node_cls.__name__)
  leave = hooks.get('leave_' + node_cls.__name__)
  # (a statement of a STATEMENT_WRAPPER's walk: its statement calls)
  statement = (issubclass(node_cls, cst.BaseStatement)
               and _TPLANS[cls][0] == _STATEMENTS)
  # nothing to do at such a node: no hook, no statement call, and no
  # field below it to walk
  leaf = (visit is None and leave is None and fields is not None
          and not fields and not statement)
  plan = plans[node_cls] = (visit, leave, fields, statement, leaf)
  return plan


def _walked_fields(fmap, cls, node_cls):
  """``_transform_fields(node_cls)``, less the fields that hold tokens
  only where ``cls`` steps over tokens."""
  fields = _transform_fields(node_cls)
  if fields and _skipped(cls, cst.CSTTransformer) is TOKENS:
    fields = _NONTOKEN_TFIELDS.get(node_cls)
    if fields is None:
      fields = _NONTOKEN_TFIELDS[node_cls] = tuple(
          (f, k) for f, k in _transform_fields(node_cls)
          if f not in _token_fields(node_cls))
  fmap[node_cls] = fields
  return fields


_NONTOKEN_TFIELDS = {}  # node class -> _transform_fields, less token fields
_THOOKS = {}  # (transformer class, node class) -> its visit_X or None
_TLEAVES = {}  # (transformer class, node class) -> its leave_X or None


def warm():
  """Works out now the transformers' field tables of the node classes the
  visitors have met so far (their sources already read): forked workers
  (api.py) inherit them instead of each reading libcst's source again."""
  for cls in list(_METHOD_ASTS):
    _transform_fields(cls)
    _token_fields(cls)


def transform(node, transformer):
  """``node.visit(transformer)``; with a ``FastTransformer``, its walk."""
  if isinstance(transformer, FastTransformer):
    return transformer.walk(node)
  return node.visit(transformer)
