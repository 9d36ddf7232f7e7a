"""``flaxlegacy upgrade --names linen``: linen's own auto-names + a rename map.

By default the upgrade writes ``name=`` wherever linen's per-type counter
would name a submodule differently from legacy's one counter for all types
(rules/modules.py), so legacy checkpoints load unchanged.  With ``--names
linen`` it leaves those names out, so the upgraded module has the names a
linen author would get (``Conv_0, Conv_1, Dense_0``), and records for every
upgraded class the map of its direct children, legacy name -> linen name
(and the child's class where it is a module class of the codebase, so the
maps compose down the tree).  ``flaxlegacy.migrate.names.rename_params``
applies it to a parameter tree.

Names the user wrote are kept as written.  A body keeps the legacy names
(and the report says why) where linen's names cannot be known from the
source or dropping a name is unsafe:

* the number of submodules depends on a loop or a condition (the
  ``legacy_autoname`` counter of the default rewrite);
* an auto-named submodule is made inside the arguments of another (linen
  constructs the outer one first, legacy named the inner one first);
* helper methods construct submodules (one plan across methods);
* a linen name would clash with a name written in the body, or a name in
  the body is computed at run time.

Single submodules keep their legacy name (listed under ``kept``) where
linen's name is unknown: ``X.shared()`` without a name (legacy gave it a
bare digit), a ``.partial`` held by a local, a layer whose linen class is
named differently, a class chosen at run time.
"""

import ast
import collections
import re

import libcst as cst

from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.rules import _shared
from flaxlegacy.upgrade.rules import name_plan as name_plan_lib

_KEPT_DYNAMIC = ('the number of submodules depends on a loop or a condition '
                 '(the legacy_autoname counter)')
_KEPT_NESTED = ('auto-named submodules are made inside the arguments of '
                'others (linen names the outer one first, legacy the inner '
                'one)')
_KEPT_METHODS = 'helper methods construct submodules'


def _root(ref):
  while ref is not None and ref.kind in ('partial', 'shared', 'instance'):
    ref = ref.target
  return ref


def class_key(ref):
  """'file:Class' of a user module class ``ref`` constructs, else None."""
  root = _root(ref)
  if root is None or root.kind != 'class' or root.extra in ('ambiguous',
                                                            'field'):
    return None
  return f'{root.target.file}:{root.target.name}'


def _literal(node):
  if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
    try:
      value = ast.literal_eval(cst.Module([]).code_for_node(node))
    except (ValueError, SyntaxError):
      return None
    return value if isinstance(value, str) else None
  return None


def _regex(node):
  """A regex of the names an f-string makes (``f'block_{i}'`` ->
  ``block_(.+)``), or None."""
  if not isinstance(node, cst.FormattedString) or node.prefix.lower() != 'f':
    return None
  out = []
  for part in node.parts:
    if isinstance(part, cst.FormattedStringText):
      if '{' in part.value or '}' in part.value or '\\' in part.value:
        return None
      out.append(re.escape(part.value))
    else:
      out.append('(.+)')
  return ''.join(out)


class _Scan(walk.FastVisitor):
  """Names written in a body: children (``name=``) and variables."""

  def __init__(self, rw):
    self.rw = rw
    self.children = {}  # literal name -> class key or None
    self.dynamic = []  # (source, regex or None) of run-time names
    self.name_patterns = []  # {'regex', 'class'} of f-string names
    self.variables = set()
    self.dynamic_variables = []
    self.unknown = []  # names computed at run time, not from an f-string

  def _src(self, node):
    return cst.Module([]).code_for_node(node)

  def visit_Call(self, node):
    f = node.func
    if (isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name)
        and f.value.value == 'self'):
      if f.attr.value in ('param', 'state'):
        arg = _shared.call_name(node) or (
            node.args[0] if node.args and node.args[0].keyword is None
            and not node.args[0].star else None)
        value = _literal(arg.value) if arg is not None else None
        if value is None:
          self.dynamic_variables.append(self._src(node))
        else:
          self.variables.add(value)
      return True
    arg = _shared.call_name(node)
    ref = None
    if isinstance(f, cst.Attribute) and f.attr.value in ('partial', 'shared'):
      ref = self.rw.resolver(f.value)
    if ref is None:
      ref = self.rw.resolver(f)
    if arg is None and ref is not None:
      # a call of X.partial(name=...) made elsewhere (module level)
      r = ref
      while r is not None and r.kind == 'partial':
        if r.extra is not None and _shared.call_name(r.extra) is not None:
          arg = _shared.call_name(r.extra)
          break
        r = r.target
    if arg is None:
      return True
    value = _literal(arg.value)
    if value is None:
      regex = _regex(arg.value)
      self.dynamic.append((self._src(arg.value), regex))
      if regex is not None:
        self.name_patterns.append({'regex': regex, 'class': class_key(ref)})
      else:
        self.unknown.append(self._src(arg.value))
    else:
      self.children.setdefault(value, class_key(ref))
    return True


class Rename:
  """The linen-names plan of one body and its rename-map entry."""

  def __init__(self, rw, children, patterns, kept, reason, scan):
    self.rw = rw
    self.children = children  # legacy -> (linen, class key)
    self.patterns = patterns  # legacy type prefix -> class key (dynamic)
    self.kept = kept  # [{'name', 'why'}] single names kept legacy
    self.reason = reason  # why the whole body keeps legacy names, or None
    self.scan = scan

  def entry(self, info, helper_fns):
    scans = [self.scan]
    for fn in helper_fns:
      s = _Scan(self.rw)
      fn.body.visit(s)
      scans.append(s)
    children = {k: {'name': v, 'class': c}
                for k, (v, c) in self.children.items()}
    for s in scans:
      for name, cls in s.children.items():
        children.setdefault(name, {'name': name, 'class': cls})
    variables = sorted(set().union(*(s.variables for s in scans)))
    unknown = [src for s in scans for src in s.unknown] + [
        src for s in scans for src in s.dynamic_variables]
    name_patterns = []
    for s in scans:
      for p in s.name_patterns:
        if p not in name_patterns:
          name_patterns.append(p)
    runtime = bool(self.patterns.get(None, False))
    if runtime:
      unknown.append('an auto-named submodule whose class is chosen at run '
                     "time (legacy name '<its class name>_<n>')")
    return {
        'file': info.file, 'class': info.name,
        'children': children,
        'patterns': {k: v for k, v in self.patterns.items() if k is not None},
        # names written as f-strings (f'block_{i}'): kept, with their class
        'name_patterns': name_patterns,
        # '<Class>_<n>' of a class chosen at run time: Class's own map
        'runtime_classes': runtime,
        'variables': variables,
        'complete': not unknown,
        'unknown': unknown,
        'kept': self.kept,
        'legacy_names': self.reason,
    }


def _event_type(ref, type_name, instance_calls, node_id):
  """(linen type name, None) or (None, why the legacy name stays)."""
  if node_id in instance_calls:
    return None, ('a .partial held by a local: the name is written where '
                  'the partial is made')
  if ref is not None and ref.kind == 'shared':
    return None, 'X.shared() without a name (legacy: a bare digit)'
  if type_name is None:
    return None, 'the class is chosen at run time'
  root = _root(ref)
  if root is not None and root.kind == 'layer' and (
      root.target.linen != root.target.legacy):
    return None, (f'the linen class of {root.target.legacy} is named '
                  f'{root.target.linen}')
  return type_name, None


def _legacy_children(events, refs):
  children = {}
  for index, (node_id, type_name, _) in enumerate(events):
    legacy = f'{type_name}_{index}' if type_name else str(index)
    children[legacy] = (legacy, class_key(refs.get(node_id)))
  return children


def _fallback(rw, plan, scan, reason):
  patterns = {}
  children = {}
  if rw.dynamic:
    for node_id, type_name, _ in plan.events:
      ref = plan.refs.get(node_id)
      if type_name is None and (ref is None or ref.kind != 'shared'):
        patterns[None] = True  # f'{ctor.__name__}_{n}': class unknown
        continue
      patterns[type_name or ''] = class_key(ref)
  else:
    children = _legacy_children(plan.events, plan.refs)
  return Rename(rw, children, patterns, [], reason, scan)


def plan(rw, name_plan, fn):
  """Sets ``rw.names`` to linen's plan where it is safe; returns a Rename.

  ``rw``: the ApplyRewriter (its legacy plan ``names`` / ``dynamic`` is
  already made); ``name_plan``: its NamePlan (rules/name_plan.py); ``fn``: the body's function.
  """
  scan = _Scan(rw)
  fn.body.visit(scan)
  if rw.dynamic:
    return _fallback(rw, name_plan, scan, _KEPT_DYNAMIC)
  if name_plan.nested:
    return _fallback(rw, name_plan, scan, _KEPT_NESTED)
  if type(rw).plan_class is not name_plan_lib.NamePlan and any(
      True for _ in name_plan.events):
    return _fallback(rw, name_plan, scan, _KEPT_METHODS)
  instance_calls = {id(v[2]) for v in rw.instance_locals.values()}
  counts = collections.Counter(e[0] for e in name_plan.events)
  per_type = collections.Counter()
  names, children, kept = {}, {}, []
  for index, (node_id, type_name, _) in enumerate(name_plan.events):
    ref = name_plan.refs.get(node_id)
    legacy = f'{type_name}_{index}' if type_name else str(index)
    linen_type, why = _event_type(ref, type_name, instance_calls, node_id)
    if linen_type is None:
      if counts[node_id] > 1:
        return _fallback(rw, name_plan, scan, f'{legacy}: {why}, in a loop')
      names[node_id] = legacy
      kept.append({'name': legacy, 'why': why})
      children[legacy] = (legacy, class_key(ref))
      continue
    linen = f'{linen_type}_{per_type[linen_type]}'
    per_type[linen_type] += 1
    names[node_id] = None
    children[legacy] = (linen, class_key(ref))
  kept_names = {k['name'] for k in kept}
  auto = {v for k, (v, _) in children.items() if k not in kept_names}
  clash = sorted(auto & (set(scan.children) | kept_names))
  if clash:
    return _fallback(rw, name_plan, scan, f'the linen name {clash[0]!r} is '
                     'also written as a name in the body')
  for src, regex in scan.dynamic:
    if auto and regex is None or regex is not None and any(
        re.fullmatch(regex, n) for n in auto):
      return _fallback(rw, name_plan, scan, f'the name {src} is computed at '
                       'run time and may clash with a linen name')
  rw.names = names
  return Rename(rw, children, {}, kept, None, scan)
