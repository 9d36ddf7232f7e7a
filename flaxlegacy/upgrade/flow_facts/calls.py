"""Calls the codebase makes of its own functions, classes, methods and
legacy module classes: their arguments (positional, keywords, ``**``
dicts with their keys) flow into the callee's parameters."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade.flow_facts import shared
from flaxlegacy.upgrade.flow_facts.shared import NONE  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import UNKNOWN  # pylint: disable=g-importing-member


class CallFacts:
  """Arguments into parameters (a mixin of ``Flow``)."""

  def _call(self, rel, qual, call):
    f = call.func
    changed = False
    f_facts = self._module_files.get(rel)
    if f_facts is not None and call.args and (cst_util.legacy_attr(
        f, f_facts.nn_prefixes) == 'Model' or shared.kept_model(f, f_facts)):
      # every nn.Model(M, ...) has its module values, wherever it stands
      # (an argument of create(...) is not evaluated otherwise)
      self._call_values(rel, qual, call)  # (_add marks the change)
    targets = []  # (def, arguments to skip, positional allowed)
    method = None
    base = f
    if isinstance(f, cst.Attribute) and f.attr.value in (
        'partial', 'init', 'call', 'init_by_shape', 'create',
        'create_by_shape', 'shared'):
      method = f.attr.value
      base = f.value
    for v in self.expr_values(rel, qual, base) if method else (
        self.expr_values(rel, qual, f)):
      if v[0] == 'class':
        d = self.defs.get((v[1], self._class_qual(v[1], v[2]) + '.apply'))
        if d is None:
          continue
        skip = {None: 0, 'partial': None, 'shared': None, 'init': 1,
                'call': 1, 'create': 1, 'init_by_shape': None,
                'create_by_shape': None}.get(method, None)
        targets.append((d, skip, 1))
      elif method is None and v[0] in ('func', 'wrapped'):
        d = self.defs.get((v[1], v[2]))
        if d is not None:
          targets.append((d, 0, 1 if d.is_method else 0))
      elif method is None and v[0] == 'cls':
        d = self.method_def(v[1], v[2], '__init__')
        if d is not None:
          targets.append((d, 0, 1))
      elif method is None and v[0] == 'instance':
        d = self.method_def(v[1], v[2], '__call__')
        if d is not None:
          targets.append((d, 0, 1))
    if shared.partial_of_function(call):
      # functools.partial(f, k=v): the keywords it binds go to f's
      # parameters (the rest come with the calls of the partial)
      for v in self.expr_values(rel, qual, call.args[0].value):
        d = None
        if v[0] in ('func', 'wrapped'):
          d = self.defs.get((v[1], v[2]))
        elif v[0] == 'cls':  # functools.partial(C, k=v): C.__init__'s
          d = self.method_def(v[1], v[2], '__init__')
        if d is not None:
          d.called = True
          changed |= self._bind_args(rel, qual, d, call.args[1:], None,
                                     1 if d.is_method else 0)
    gin = shared.gin_call(cst_util.dotted(f) or '', self._module_files.get(rel))
    if gin is not None:
      changed |= self._gin(rel, qual, call, gin)
    if method is None and isinstance(f, cst.Attribute) and f.attr.value in (
        'update', 'setdefault'):
      # d.update(k=v) / d.update(other) / d.setdefault('k', v) on a dict
      for v in self.expr_values(rel, qual, f.value):
        if self.dict_keys(v) is None:
          continue
        for i, a in enumerate(call.args):
          vals = self.expr_values(rel, qual, a.value)
          if f.attr.value == 'setdefault':
            if i == 0:
              key = shared.literal_key(a.value)
              rest = call.args[1].value if len(call.args) > 1 else None
              changed |= self._add_key(v[1], key, self.expr_values(
                  rel, qual, rest) if rest is not None else {NONE})
          elif a.keyword is not None:
            changed |= self._add_key(v[1], a.keyword.value, vals)
          elif a.star == '*':
            changed |= self._add_key(v[1], None, {UNKNOWN})
          else:
            changed |= self._merge_dict(v[1], vals)
    if method is None and isinstance(f, cst.Attribute):
      # X.m(...) / cls.m(...) / super(C, cls).m(...): a classmethod of a
      # legacy module class (or of one of its user bases)
      for d in self._legacy_class_method_defs(rel, qual, f):
        targets.append((d, 0, 1 if not _static(d) else 0))
    if method is None and isinstance(f, cst.Attribute):
      # obj.m(...) / self.m(...) / super().m(...): a method of a class of
      # the codebase (or of one of its bases)
      for v in self._receiver_classes(rel, qual, f.value):
        if (isinstance(f.value, cst.Call)
            and cst_util.dotted(f.value.func) == 'super'):
          # super().m(...): the bases' m, never a subclass's override
          d = self.method_def(v[0], v[1], f.attr.value)
          ds = [d] if d is not None else []
        else:
          ds = self._method_defs(v[0], v[1], f.attr.value)
        for d in ds:
          targets.append((d, 0, 1))
    for d, skip, self_params in targets:
      d.called = True
      changed |= self._bind_args(rel, qual, d, call.args, skip, self_params)
    return changed


  def _legacy_class_method_defs(self, rel, qual, f):
    """The classmethod defs ``f`` (``X.m`` / ``super(C, cls).m``) runs,
    X holding legacy module classes."""
    out = []
    recv = f.value
    if (isinstance(recv, cst.Call) and cst_util.dotted(recv.func) == 'super'
        and len(recv.args) == 2):
      for v in self.expr_values(rel, qual, recv.args[0].value):
        if v[0] != 'class':
          continue
        for r, n in self._legacy_ancestry(v[1], v[2])[1:]:
          d = self.legacy_class_method(r, n, f.attr.value)
          if d is not None and d not in out:
            out.append(d)
            break
      return out
    for v in self.expr_values(rel, qual, recv):
      if v[0] == 'class':
        d = self.legacy_class_method(v[1], v[2], f.attr.value)
        if d is not None and d not in out:
          out.append(d)
    return out

  def _bind_args(self, rel, qual, d, args, skip, self_params):
    """Arguments of one call to the parameters of ``d``; ``skip``: leading
    positional arguments that are not parameters (``init``'s rng), None
    for keywords only."""
    pos = d.pos[self_params:]
    changed = False
    i = 0
    star = False
    # the parameters this call binds itself (by position before any *splat,
    # or by keyword): no splat can bind them (Python refuses a second value)
    bound = set()
    n_pos = 0
    for a in args:
      if a.star == '*':
        break
      if not a.star and a.keyword is None:
        n_pos += 1
    if skip is not None:
      bound.update(pos[:max(0, n_pos - skip)])
    bound.update(a.keyword.value for a in args
                 if a.keyword is not None and not a.star)
    for a in args:
      if a.star == '*':
        star = True
        continue
      if a.star == '**':
        changed |= self._bind_splat(rel, qual, d, a.value, self_params,
                                    bound)
        continue
      if a.keyword is None:
        if skip is None:
          continue
        if i < skip:
          i += 1
          continue
        k = i - skip
        i += 1
        if k < len(pos):
          changed |= self._add(d.slot(pos[k]),
                               self.expr_values(rel, qual, a.value))
        elif d.star:
          pass
        continue
      changed |= self._bind_keyword(d, a.keyword.value,
                                    self.expr_values(rel, qual, a.value))
    if star:  # *args: any parameter the call does not bind may come from it
      for n in d.names()[self_params:]:
        if n not in bound:
          changed |= self._add(d.slot(n), {UNKNOWN})
    return changed

  def _bind_keyword(self, d, name, vals):
    if name in d.pos or name in d.kwonly:
      return self._add(d.slot(name), vals)
    if d.starstar:  # into the **kwargs dict
      return self._add_key(d.kwargs_site(), name, vals)
    return False

  def _bind_splat(self, rel, qual, d, expr, self_params, bound=()):
    """``f(**x)``: x's keys to the parameters they name, when x is a dict
    whose keys the facts follow; every parameter may take its values
    where a key is not known here."""
    vals = self.expr_values(rel, qual, expr)
    if not vals:
      self._read(shared.FINAL)  # (re-applied in the last round)
      if self._final:
        vals = {UNKNOWN}
    changed = False
    for v in vals:
      keys = self.dict_keys(v)
      if keys is None:  # not a dict the facts follow
        keys, v = {'*'}, ('container', None)
        every = {UNKNOWN}
      else:  # what the keys not known here hold
        every = self.values.get(('ck', v[1], '*'), set())
      for k in keys:
        if k != '*':
          changed |= self._bind_keyword(
              d, k, self.values.get(('ck', v[1], k), set()))
          continue
        for n in d.pos[self_params:] + d.kwonly:
          if n not in bound:
            changed |= self._add(d.slot(n), every)
        if d.starstar:
          changed |= self._add_key(d.kwargs_site(), None, every)
    return changed


def _static(d):
  return any(shared.decorator_name(x) == 'staticmethod'
             for x in d.node.decorators)
