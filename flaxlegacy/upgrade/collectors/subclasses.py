"""Facts of subclasses of legacy layers and of user modules.

(rules/subclasses.py converts them.)  ``collect_facts`` records, per legacy
class, its method names and whether it calls ``super()``
(``class_shapes``), and what a ``param`` override looks like;
``inherit_splits`` gives a subclass without an ``apply`` of its own its
base's field / call split (facts.py ``CodebaseFacts.finish``).
"""

import libcst as cst

from flaxlegacy.upgrade import walk


LEGACY_PARAM_ARGS = ('name', 'shape', 'initializer')


def collect_facts(file_facts, module):
  """Per legacy class: its method names and whether it calls ``super()``;
  per class with nothing but a ``param`` override: None if it carries over
  to linen, else why not (``param_overrides``)."""
  shapes = {}
  overrides = {}
  class_level = {}
  foreign = getattr(file_facts, 'foreign_subclasses', {})
  for stmt in module.body:
    if not isinstance(stmt, cst.ClassDef) or (
        stmt.name.value not in file_facts.modules
        and stmt.name.value not in foreign):
      continue
    # classmethods / staticmethods (factories building the class's
    # .partial) are no part of what a module computes: not counted
    own = [s for s in stmt.body.body if isinstance(s, cst.FunctionDef)
           and not is_class_level(s)]
    methods = [s.name.value for s in own]
    class_level[stmt.name.value] = [
        s.name.value for s in stmt.body.body
        if isinstance(s, cst.FunctionDef) and is_class_level(s)]
    found = []

    class V(walk.FastVisitor):

      def visit_Call(self, node):
        if isinstance(node.func, cst.Name) and node.func.value == 'super':
          found.append(node)

    for s in own:
      s.visit(V())
    shapes[stmt.name.value] = (methods, bool(found))
    if methods == ['param']:
      overrides[stmt.name.value] = _param_override_why(stmt)
  file_facts.class_shapes = shapes
  file_facts.param_overrides = overrides
  file_facts.class_level_methods = class_level


def is_class_level(fn):
  """Whether ``fn`` (a method) is a ``@classmethod`` / ``@staticmethod``."""
  return any(isinstance(d.decorator, cst.Name) and d.decorator.value in (
      'classmethod', 'staticmethod') for d in fn.decorators)


def class_level_methods(codebase, info):
  """The names of the classmethods / staticmethods of a module class."""
  f = codebase.files.get(info.file)
  return getattr(f, 'class_level_methods', {}).get(info.name, [])


def super_param_call(node):
  """Whether ``node`` is ``super().param(...)`` / ``super(C, self).param``."""
  f = node.func
  return (isinstance(f, cst.Attribute) and f.attr.value == 'param'
          and isinstance(f.value, cst.Call)
          and isinstance(f.value.func, cst.Name)
          and f.value.func.value == 'super')


def super_param_args(call, names):
  """The (name, shape, initializer) argument nodes of a legacy
  ``super().param(...)`` call, or None."""
  bound = {}
  for i, a in enumerate(call.args):
    if a.star:
      return None
    key = a.keyword.value if a.keyword is not None else (
        LEGACY_PARAM_ARGS[i] if i < 3 else None)
    if key not in LEGACY_PARAM_ARGS or key in bound:
      return None
    bound[key] = a.value
  if len(bound) != 3:
    return None
  return tuple(bound[k] for k in LEGACY_PARAM_ARGS)


def _param_fn(cls):
  for s in cls.body.body:
    if isinstance(s, cst.FunctionDef) and s.name.value == 'param':
      return s
  return None


def _param_override_why(cls):
  """None if ``cls``'s ``param`` override carries over to linen, else why
  not."""
  fn = _param_fn(cls)
  ps = fn.params
  plain = list(ps.posonly_params) + list(ps.params)
  if (len(plain) != 4 or ps.kwonly_params or isinstance(ps.star_arg, cst.Param)
      or ps.star_kwarg is not None or any(p.default is not None
                                          for p in plain)
      or fn.decorators):
    return ('its param override does not take exactly (self, name, shape, '
            'initializer)')
  bad = []

  class V(walk.FastVisitor):

    def visit_Call(self, node):
      if isinstance(node.func, cst.Name) and node.func.value == 'super':
        return True
      if super_param_call(node):
        if super_param_args(node, LEGACY_PARAM_ARGS) is None:
          bad.append('super().param with other arguments than (name, '
                     'shape, initializer)')
      return True

    def visit_Attribute(self, node):
      if (isinstance(node.value, cst.Call)
          and isinstance(node.value.func, cst.Name)
          and node.value.func.value == 'super' and node.attr.value != 'param'):
        bad.append(f'calls super().{node.attr.value}')

  fn.visit(V())
  return bad[0] if bad else None


def class_shape(codebase, info):
  f = codebase.files.get(info.file)
  return getattr(f, 'class_shapes', {}).get(info.name, ([], False))


def inherit_splits(codebase):
  """A subclass without ``apply`` of a user module takes the base's split."""
  for _ in range(8):  # chains of subclasses
    changed = False
    for f in codebase.files.values():
      for info in f.modules.values():
        if info.kind != 'class' or info.base == 'Module' or (
            info.problems != ['no apply method']):
          continue
        base = codebase.module(f, info.base)
        if base is None or base.problems or base.kind != 'class':
          continue
        methods, _ = class_shape(codebase, info)
        if methods:
          continue  # overrides something: convert() says what
        for attr in ('params', 'defaults', 'var_kw', 'var_pos',
                     'array_params', 'child_calls', 'fields', 'call'):
          setattr(info, attr, getattr(base, attr))
        info.problems = []
        info.inherits = base.name
        changed = True
    if not changed:
      return
