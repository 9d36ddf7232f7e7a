"""Definitions in the facts: classes of the codebase, their bases
(resolved each round), subclasses and methods; the functions whose
parameters stay open (called from outside), the legacy ``apply`` of a
module class and absl's parameterized test cases."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade.flow_facts import shared
from flaxlegacy.upgrade.flow_facts.shared import UNKNOWN  # pylint: disable=g-importing-member


class DefFacts:
  """Classes, methods, open parameters, test cases (a mixin of ``Flow``)."""

  def _resolve_bases(self):
    """The codebase base classes of each plain class (``class
    TransformerTranslate(base_model.BaseModel)``): attributes a base's
    methods set, and methods a base defines, are the subclass's too."""
    bases, subs = {}, {}
    for (rel, qual), node in self.class_nodes.items():
      if self.globals_kind.get((rel, qual)) != 'cls' or not node.bases:
        continue
      outer = qual.rpartition('.')[0]
      found = []
      for b in node.bases:
        if b.keyword is not None:
          continue
        for v in self.expr_values(rel, outer, b.value):
          if v[0] == 'cls' and (v[1], v[2]) != (rel, qual):
            found.append((v[1], v[2]))
      if found:
        bases[(rel, qual)] = found
        for b in found:
          subs.setdefault(b, []).append((rel, qual))
    self._bases, self._subs = bases, subs

  def _ancestry(self, key):
    """``key`` and its codebase bases, nearest first (a simple MRO)."""
    out, todo = [], [key]
    while todo:
      k = todo.pop(0)
      if k not in out:
        out.append(k)
        todo.extend(self._bases.get(k, ()))
    return out

  def _descendants(self, key):
    out, todo = [], list(self._subs.get(key, ()))
    while todo:
      k = todo.pop(0)
      if k not in out:
        out.append(k)
        todo.extend(self._subs.get(k, ()))
    return out

  def _method_defs(self, rel, cls, name):
    """The defs ``obj.name`` can run for an instance of ``cls`` (or of a
    subclass of it): the nearest in its ancestry, and every override in
    its subclasses."""
    out = []
    for k in self._ancestry((rel, cls)):
      d = self.defs.get((k[0], f'{k[1]}.{name}'))
      if d is not None:
        out.append(d)
        break
    for k in self._descendants((rel, cls)):
      d = self.defs.get((k[0], f'{k[1]}.{name}'))
      if d is not None and d not in out:
        out.append(d)
    return out

  def _open_params(self):
    changed = False
    stand_in = self._stand_in
    for _, rel, q, kind in self.gin_regs:
      d = self.method_def(rel, q, '__init__') if kind == 'cls' else None
      if d is not None:
        d.gin = True
    for slot, seen in stand_in.items():
      changed |= self._add(slot, seen)
    for d in self.defs.values():
      if d.gin and d.called and not d.escapes:
        # called by the codebase, and by gin with the codebase's bindings
        # (the 'gin' constraints bind them)
        continue
      if d.open or d.gin or d.escapes or not d.called:
        if self._is_apply(d) and d.called and not (d.open or d.gin):
          continue
        names = d.names()[1:] if d.is_method else d.names()
        for n in names:
          if d.slot(n) in stand_in:
            continue  # what the run showed stands in for the unknown
          changed |= self._add(d.slot(n), {UNKNOWN})
    return changed

  def _is_apply(self, d):
    return d.qual.endswith('.apply') and (
        self.globals_kind.get((d.rel, d.qual.rsplit('.', 1)[0])) == 'class')

  def _def_named(self, rel, qual, name):
    scope = self._resolve_scope(rel, qual, name)
    if scope is None:
      return None
    q = f'{scope.qual}.{name}' if scope.qual else name
    return self.defs.get((rel, q))

  # -- constraints --
  def _apply(self, c):
    kind = c[0]
    if kind == 'assign':
      _, rel, qual, slot, value = c
      return self._add(slot, self._eval_value(rel, qual, value))
    if kind == 'value':
      return self._add(c[1], {c[2]})
    if kind == 'def':
      _, rel, qual, name, target = c
      k = self.globals_kind.get((rel, target))
      if k == 'class':
        v = ('class', rel, name, frozenset())
      elif k == 'cls':
        v = ('cls', rel, target)
      else:
        v = ('func', rel, target)
      return self._add(('v', rel, qual, name), {v})
    if kind == 'import':
      _, rel, qual, local, mod, what = c
      return self._add(('v', rel, qual, local),
                       self._import_value(rel, mod, what))
    if kind == 'setattr':
      _, rel, qual, target, value = c
      vals = self._eval_value(rel, qual, value)
      changed = False
      for slot in self._attr_slots(rel, qual, target):
        changed |= self._add(slot, vals)
      return changed
    if kind == 'setitem':
      _, rel, qual, target, value = c
      vals = self._eval_value(rel, qual, value)
      key = shared.subscript_key(target)
      changed = False
      for v in self.expr_values(rel, qual, target.value):
        if v[0] == 'container':
          changed |= self._add_key(v[1], key, vals)
      return changed
    if kind == 'ginstmt':
      return self._gin_statement(c[1], c[2])
    if kind == 'call':
      return self._call(c[1], c[2], c[3])
    if kind == 'cases':
      return self._cases(*c[1:])
    return False

  def _cases(self, rel, d, call, named):
    """The cases of ``@parameterized.parameters(...)`` (``named``:
    ``.named_parameters``, each case's name first or under
    ``testcase_name``) bound to the parameters of the method ``d``."""
    d.called = True
    qual = d.enclosing.qual
    changed = False
    cases = list(call.args)
    if len(cases) == 1 and not cases[0].star and not isinstance(
        cases[0].value, (cst.Tuple, cst.Dict)):
      # one argument that is not a case (a tuple or a dict) is the
      # iterable of the cases (absl's rule)
      one = cases[0].value
      cases = ([cst.Arg(value=e.value) for e in one.elements
                if not isinstance(e, cst.StarredElement)]
               if isinstance(one, cst.List) and not any(
                   isinstance(e, cst.StarredElement) for e in one.elements)
               else [cst.Arg(value=one, star='*')])
    for a in cases:
      case = a.value
      if a.star or a.keyword is not None:
        args = [cst.Arg(value=case, star='*')]  # cases not known here
      elif isinstance(case, (cst.Tuple, cst.List)):
        els = list(case.elements)[1 if named else 0:]
        args = [cst.Arg(value=e.value, star='*' if isinstance(
            e, cst.StarredElement) else '') for e in els]
      elif isinstance(case, cst.Dict):
        args = []
        for e in case.elements:
          key = (shared.literal_key(e.key) if isinstance(e, cst.DictElement)
                 else None)
          if not isinstance(key, str):
            args.append(cst.Arg(value=case, star='**'))
            continue
          if key != 'testcase_name':
            args.append(cst.Arg(value=e.value, keyword=cst.Name(key)))
      elif named:
        args = [cst.Arg(value=case, star='*')]  # a case built elsewhere
      else:
        args = [cst.Arg(value=case)]  # one parameter
      changed |= self._bind_args(rel, qual, d, args, 0, 1)
    return changed


  # -- classmethods / staticmethods of legacy module classes ---------------
  # (a model zoo's factories: ``ResNet.build_flax_module(hparams)``
  # returning ``cls.partial(**hparams)``; ``cls`` holds the class the
  # method is called on, or one of its subclasses)

  def _legacy_ancestry(self, rel, name):
    """``[(rel, name)]`` of the legacy module class ``name`` of ``rel``
    and its user module bases (across files), nearest first."""
    out = []
    f = self._module_files.get(rel)
    info = f.modules.get(name) if f is not None else None
    while info is not None and info.kind == 'class' and len(out) < 16:
      key = (info.file, info.name)
      if key in out:
        break
      out.append(key)
      if info.base == 'Module' or self.codebase is None:
        break
      info = self.codebase.module(self.codebase.files.get(info.file),
                                  info.base)
    return out

  def legacy_class_method(self, rel, name, attr):
    """The Def of the classmethod / staticmethod ``attr`` that the legacy
    module class ``name`` of ``rel`` has (its own or a user base's), or
    None."""
    for r, n in self._legacy_ancestry(rel, name):
      d = self.defs.get((r, f'{self._class_qual(r, n)}.{attr}'))
      if d is not None:
        return d if shared.class_level(d.node) else None
    return None

  def legacy_class_and_subclasses(self, rel, name):
    """``('class', ...)`` values of the legacy module class ``name`` of
    ``rel`` and of every module class of the codebase below it."""
    out = {('class', rel, name, frozenset())}
    for f in self._module_files.values():
      for info in f.modules.values():
        if info.kind == 'class' and (rel, name) in self._legacy_ancestry(
            info.file, info.name)[1:]:
          out.add(('class', info.file, info.name, frozenset()))
    return out

  def _class_qual(self, rel, name):
    for (r, q), k in self.globals_kind.items():
      if r == rel and k == 'class' and q.split('.')[-1] == name:
        return q
    return name

  def _receiver_classes(self, rel, qual, expr):
    s = self.scopes.get((rel, qual))
    if (isinstance(expr, cst.Name) and s is not None and s.cls
        and expr.value == s.self_name):
      return [(rel, s.cls)]
    if (isinstance(expr, cst.Call) and cst_util.dotted(expr.func) == 'super'
        and s is not None and s.cls and (
            not expr.args or len(expr.args) == 2)):
      # super().m(...) in a method of C: m of C's bases
      cls = (rel, s.cls)
      if expr.args:
        named = [v for v in self.expr_values(rel, qual, expr.args[0].value)
                 if v[0] == 'cls']
        if len(named) != 1:
          return []
        cls = (named[0][1], named[0][2])
      return self.bases(*cls)
    return [(v[1], v[2]) for v in self.expr_values(rel, qual, expr)
            if v[0] == 'instance']

  def bases(self, rel, qual):
    """The codebase classes ``(rel, qual)`` names as its bases."""
    node = self.class_nodes.get((rel, qual))
    if node is None:
      return []
    scope = self.class_scope.get((rel, qual), '')
    out = []
    for b in node.bases:
      if b.keyword is not None:
        continue
      for v in self.expr_values(rel, scope, b.value):
        if v[0] == 'cls' and (v[1], v[2]) != (rel, qual):
          out.append((v[1], v[2]))
    return out

  def method_def(self, rel, qual, name, _seen=None):
    """The def of method ``name`` that class ``(rel, qual)`` has, its
    own or the first of its codebase bases' (depth first), or None."""
    d = self.defs.get((rel, f'{qual}.{name}'))
    if d is not None:
      return d
    seen = _seen if _seen is not None else set()
    if (rel, qual) in seen:
      return None
    seen.add((rel, qual))
    for b in self.bases(rel, qual):
      d = self.method_def(b[0], b[1], name, seen)
      if d is not None:
        return d
    return None

  def may_have(self, rel, qual, attr):
    """Whether class ``(rel, qual)`` of the codebase (or an instance) may
    have attribute ``attr``: it or a base defines or sets it, or a base is
    not a class of the codebase."""
    seen = set()
    todo = [(rel, qual)]
    while todo:
      c = todo.pop()
      if c in seen:
        continue
      seen.add(c)
      node = self.class_nodes.get(c)
      if node is None:
        return True
      if self.defs.get((c[0], f'{c[1]}.{attr}')) is not None or (
          ('a', c[0], c[1], attr) in self.values) or (
              c[1] and (c[0], f'{c[1]}.{attr}') in self.scopes):
        return True
      scope = self.scopes.get(c)
      if scope is not None and attr in scope.bound:
        return True  # a class attribute
      named = [b for b in node.bases if b.keyword is None]
      bs = self.bases(*c)
      if len(bs) != len(named) and not all(
          cst_util.dotted(b.value) == 'object' for b in named
          if (cst_util.dotted(b.value) or '') not in {q for _, q in bs}):
        return True  # a base from outside the codebase
      todo.extend(bs)
    return False

  def _attr_owner(self, rel, qual):
    """The class whose slots hold the attributes of ``(rel, qual)``'s
    instances: the root of its first-base chain in the codebase, so that
    ``self.x`` set in a base and read in a subclass (or the other way)
    is one slot."""
    seen = {(rel, qual)}
    while True:
      bs = self.bases(rel, qual)
      if not bs or bs[0] in seen:
        return rel, qual
      rel, qual = bs[0]
      seen.add((rel, qual))
