"""gin in the facts (gin_bindings.py): configurables the codebase
registers, bindings in ``.gin`` files, ``gin.parse_config`` strings and
``gin.bind_parameter``, macros and ``@C`` references."""

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import gin_bindings
from flaxlegacy.upgrade.flow_facts import shared
from flaxlegacy.upgrade.flow_facts.shared import GINVAL  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import GIN_REGISTER  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import UNKNOWN  # pylint: disable=g-importing-member


class GinFacts:
  """gin bindings as values (a mixin of ``Flow``)."""

  def _gin(self, rel, qual, call, what):
    """gin.configurable(X) / gin.external_configurable(X[, name]): X is a
    configurable; gin.bind_parameter('C.p', v): a binding;
    gin.constant('NAME', v): a macro; gin.parse_config('...'): bindings."""
    changed = False
    args = [a for a in call.args if not a.star]
    if what in GIN_REGISTER and args and args[0].keyword is None:
      named = [a for a in args[1:] if a.keyword is None or (
          a.keyword.value == 'name')]
      name = (shared.literal_key(named[0].value) if named else None) or (
          (cst_util.dotted(args[0].value) or '').split('.')[-1])
      self.gin_external[name] = True
      for v in self.expr_values(rel, qual, args[0].value):
        changed |= self._add(('ginext', name), {v})
        d = None
        if v[0] == 'cls':
          d = self.method_def(v[1], v[2], '__init__')
        elif v[0] == 'func':
          d = self.defs.get((v[1], v[2]))
        if d is not None and not d.gin:
          d.gin = True
          changed = True
    elif what == 'constant' and len(args) > 1:
      key = shared.literal_key(args[0].value)
      if key is not None:
        changed |= self._add(('ginmacro', key),
                             self.expr_values(rel, qual, args[1].value))
    elif what == 'bind_parameter' and len(args) > 1:
      target = shared.binding_target(args[0].value)
      changed |= self._gin_bind(target, self.expr_values(
          rel, qual, args[1].value))
    elif what == 'parse_config' and args:
      if id(call) not in self._gin_texts:
        texts = shared.literal_texts(args[0].value)
        self._gin_texts[id(call)] = (
            None if texts is None else
            [st for t in texts for st in gin_bindings.statements(t)])
      sts = self._gin_texts[id(call)]
      if sts is None:  # a config built at run time: any binding
        changed |= self._gin_bind((None, None), {UNKNOWN})
      else:
        for lhs, value in sts:
          changed |= self._gin_statement(lhs, value)
    return changed

  def add_gin_text(self, text):
    """A config file of the tree (``.gin``): its bindings are facts."""
    for lhs, value in gin_bindings.statements(text):
      self.constraints.append(('ginstmt', lhs, value))

  def _gin_statement(self, lhs, value):
    target = gin_bindings.split_name(lhs)
    if target is None:
      return False
    if target[0] is None:  # NAME = value: a macro
      self.gin_text_macros.setdefault(target[1], value)
      return False
    return self._gin_bind(target, self._gin_text_values(value, set()))

  def _gin_text_values(self, value, seen):
    refs, macros, literal = gin_bindings.value_parts(value)
    out = {GINVAL} if literal else set()
    for name, called, module in refs:
      out |= self._gin_reference(name, called, module)
    for m in macros:
      if ('ginmacro', m) in self.values:
        out |= self.values[('ginmacro', m)]
      elif m in self.gin_text_macros and m not in seen:
        out |= self._gin_text_values(self.gin_text_macros[m], seen | {m})
      else:
        out.add(UNKNOWN)
    return out

  def _gin_reference(self, name, called, module=''):
    """What ``@name`` (``called``: ``@name()``) gives; ``module``: the
    module part the reference was written with (``@gym_lib.C``), which
    picks among registrations of the same name in several files, as gin
    does (all of them where no file matches it: a ``module=`` given to
    the registration is not read)."""
    out = set()
    found = False
    regs = [r for r in self.gin_regs if r[0] == name]
    if module and len(regs) > 1:
      narrowed = [r for r in regs
                  if gin_bindings.module_matches(r[1], module)]
      regs = narrowed or regs
    for gname, rel, qual, kind in regs:
      found = True
      if kind == 'cls':
        out.add(('instance', rel, qual) if called else ('cls', rel, qual))
      elif kind == 'func':
        out |= (set(self.values.get(('r', rel, qual), set())) if called
                else {('func', rel, qual)})
      else:  # a legacy module class: @C() would be its output
        out.add(UNKNOWN if called else
                ('class', rel, qual.split('.')[-1], frozenset()))
    if ('ginext', name) in self.values:
      found = True
      for v in self.values[('ginext', name)]:
        if not called:
          out.add(v)
        elif v[0] == 'cls':
          out.add(('instance', v[1], v[2]))
        elif v[0] == 'func':
          out |= set(self.values.get(('r', v[1], v[2]), set()))
        else:
          out.add(UNKNOWN)
    return out if found else {UNKNOWN}

  def _gin_bind(self, target, vals):
    """A binding of ``target`` (configurable name or None for any,
    parameter or None for any) to ``vals``."""
    cname, pname = target
    self.gin_targets.add((cname, pname))
    changed = False
    for d in self._gin_defs(cname):
      names = d.pos[1 if d.is_method else 0:] + d.kwonly
      if pname is None:
        for n in names:
          changed |= self._add(d.slot(n), vals)
        if d.starstar:
          changed |= self._add_key(d.kwargs_site(), None, vals)
      else:
        changed |= self._bind_keyword(d, pname, vals)
    return changed

  def _gin_defs(self, cname):
    out = []
    for gname, rel, qual, kind in self.gin_regs:
      if cname is not None and gname != cname:
        continue
      d = (self.defs.get((rel, qual)) if kind == 'func' else
           self.method_def(rel, qual, '__init__') if kind == 'cls' else None)
      if d is not None:
        out.append(d)
    for name in self.gin_external:
      if cname is not None and name != cname:
        continue
      for v in self.values.get(('ginext', name), ()):
        d = (self.method_def(v[1], v[2], '__init__') if v[0] == 'cls' else
             self.defs.get((v[1], v[2])) if v[0] == 'func' else None)
        if d is not None:
          out.append(d)
    return out
