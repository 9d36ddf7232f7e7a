"""Facts of a legacy module class's methods (rules/methods.py converts them).

``collect_class`` records every method (``Method``: parameters, the ones
used as arrays, ``self.m(...)`` calls, child module calls) on
``ModuleInfo.methods``; ``refine_split`` moves parameters from fields to the
call where a helper method, or a positional argument at a module call, shows
them to be inputs (facts.py ``CodebaseFacts.finish``).
"""

import dataclasses
from typing import List

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.collectors import usage as usage_facts


@dataclasses.dataclass
class Method:
  """A method of a legacy module class (``apply`` included)."""
  name: str
  params: List[str]  # after self
  decorated: bool
  array: set
  self_calls: list  # (method, [param or None], {keyword: param})
  child_calls: list  # as ModuleInfo.child_calls
  module_method: bool = False  # decorated @nn.module_method
  required: tuple = ()  # parameters without a default


class _SelfCalls(walk.FastVisitor):
  """``self.m(...)`` calls of known methods, with our parameters as args."""

  def __init__(self, methods, params):
    self.methods = methods
    self.params = params
    self.calls = []

  def visit_Call(self, node):
    f = node.func
    if (isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name)
        and f.value.value == 'self' and f.attr.value in self.methods):
      pos, kw = [], {}
      for a in node.args:
        if a.star:
          continue
        v = a.value
        p = v.value if isinstance(v, cst.Name) and v.value in self.params \
            else None
        if a.keyword is None:
          pos.append(p)
        elif p is not None:
          kw[a.keyword.value] = p
      self.calls.append((f.attr.value, pos, kw))

  def visit_FunctionDef(self, node):
    return False  # nested functions: not this method's body

  def visit_Lambda(self, node):
    return False


ARRAY_LIBS = ('jnp', 'jax', 'lax', 'np', 'numpy')


class _ArrayArgs(walk.FastVisitor):
  """Parameters passed positionally (alone, or in a tuple / list) to a
  ``jnp`` / ``jax`` / ``lax`` / ``np`` function: ``jnp.take(x, idx)``,
  ``jnp.concatenate((a, b))``.  Used for helper methods only."""

  def __init__(self, params):
    self.params = params
    self.array = set()

  def visit_Call(self, node):
    name = cst_util.dotted(node.func) or ''
    if name.split('.')[0] not in ARRAY_LIBS:
      return
    for a in node.args:
      if a.keyword is not None or a.star:
        continue
      vals = ([e.value for e in a.value.elements]
              if isinstance(a.value, (cst.Tuple, cst.List)) else [a.value])
      for v in vals:
        if isinstance(v, cst.Name) and v.value in self.params:
          self.array.add(v.value)


def _method(fn, names):
  ps = fn.params
  plist = list(ps.posonly_params) + list(ps.params)
  params = [p.name.value for p in plist[1:] + list(ps.kwonly_params)]
  usage = usage_facts.UsageVisitor(set(params))
  fn.body.visit(usage)
  if fn.name.value != 'apply':
    extra = _ArrayArgs(set(params))
    fn.body.visit(extra)
    usage.array |= extra.array
  calls = _SelfCalls(names, set(params))
  fn.body.visit(calls)
  return Method(name=fn.name.value, params=params,
                decorated=bool(fn.decorators), array=usage.array,
                self_calls=calls.calls, child_calls=usage.child_calls,
                required=tuple(p.name.value for p in plist[1:]
                               if p.default is None),
                module_method=any(
                    (cst_util.dotted(d.decorator) or '').split('.')[-1]
                    == 'module_method' for d in fn.decorators))


def collect_class(info, classdef):
  """Records the methods of a legacy module class on ``info.methods``."""
  fns = [s for s in classdef.body.body if isinstance(s, cst.FunctionDef)]
  if len(fns) < 2:
    return
  names = {f.name.value for f in fns}
  info.methods = {f.name.value: _method(f, names) for f in fns}


def _method_arrays(info):
  """Per method: its parameters used as arrays, through helper calls."""
  arrays = {n: set(m.array) for n, m in info.methods.items()}
  changed = True
  while changed:
    changed = False
    for n, m in info.methods.items():
      for callee, pos, kw in m.self_calls:
        target = info.methods.get(callee)
        if target is None or target.decorated and callee != 'apply':
          continue
        for i, p in enumerate(pos):
          if p and i < len(target.params) and target.params[i] in arrays[
              callee] and p not in arrays[n]:
            arrays[n].add(p)
            changed = True
        for k, p in kw.items():
          if k in arrays[callee] and p not in arrays[n]:
            arrays[n].add(p)
            changed = True
  return arrays


def _move(codebase, info, p):
  if p in info.fields and p not in codebase.partial_kwargs.get(info.name, ()):
    info.fields.remove(p)
    info.call.append(p)
    info.call.sort(key=info.params.index)
    return True
  return False


def refine_split(codebase, infos):
  """Moves parameters from fields to call (see the module docstring)."""
  for info in infos:
    if info.kind == 'class' and info.methods and 'apply' in info.methods:
      for p in _method_arrays(info)['apply']:
        _move(codebase, info, p)
      # an input a @nn.module_method takes without a default is an input
      # of apply too (wmt's decode(encoded, src_padding_mask, targets))
      for m in info.methods.values():
        if m.module_method:
          for p in m.required:
            if p in info.params:
              _move(codebase, info, p)
  for info in infos:
    facts = codebase.files.get(info.file)
    calls = list(info.child_calls)
    for m in info.methods.values():
      if m.name != 'apply':
        calls += m.child_calls
    for callee, pos, _ in calls:
      child = codebase.module(facts, callee) if facts else None
      if child is None or child is info or not child.methods:
        continue
      for i in range(1, min(len(pos), len(child.params))):
        _move(codebase, child, child.params[i])
