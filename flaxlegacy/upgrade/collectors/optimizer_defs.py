"""Which user ``flax.optim.OptimizerDef`` subclasses translate to optax.

``analyse`` decides, at facts time, whether a class translates and returns
its ``Plan`` (or why not); rules/optimizer_defs.py emits the translation
(its docstring tells what a translated class becomes and what keeps a
TODO).
"""

import dataclasses
import symtable
import textwrap
from typing import List

import libcst as cst


HOOKS = ('init_param_state', 'apply_param_gradient')


TREE_HOOKS = {'apply_gradient': 4, 'init_state': 1}  # name -> arguments


# OptimizerDef API besides the hooks: overriding or calling it is not
# mechanical (the transformation has no such method)
API = ('update_hyper_params', 'create', 'state_dict', 'restore_state',
       'as_optax', 'to_optax_state', 'from_optax_state')


@dataclasses.dataclass
class Plan:
  """A class the upgrade translates (facts time)."""
  name: str
  params: List[str]  # constructor parameters after self, in order
  var_args: bool  # *args / **kwargs in the constructor
  hooks: List[str]  # the hooks / tree hooks it defines


def _why_not(node, src, top_names=()):
  """None if the class ``node`` (its source ``src``) translates, else why.
  ``top_names``: the names the file defines at the top level."""
  import ast  # pylint: disable=g-import-not-at-top
  try:
    tree = ast.parse(textwrap.dedent(src))
    table = symtable.symtable(textwrap.dedent(src), '<class>', 'exec')
  except SyntaxError:
    return 'its source does not parse on its own'
  cls = tree.body[-1]
  if not isinstance(cls, ast.ClassDef):
    return 'its source does not parse on its own'
  if cls.decorator_list:
    return 'the class is decorated'
  if len(cls.bases) != 1 or cls.keywords:
    return 'it has several bases or class keywords'
  methods, attrs, nested = {}, set(), set()
  for stmt in cls.body:
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
      continue
    if isinstance(stmt, ast.Pass):
      continue
    if isinstance(stmt, ast.FunctionDef):
      methods[stmt.name] = stmt
      continue
    if isinstance(stmt, ast.ClassDef):
      # a class in the class (ViT's HyperParams / State): moves to the top
      # level, reached as Name.X through an attribute of the function
      if stmt.name in top_names:
        return (f'its nested class {stmt.name} would clash with the '
                f'module-level {stmt.name}')
      nested.add(stmt.name)
      continue
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
      targets = stmt.targets if isinstance(stmt, ast.Assign) else [
          stmt.target]
      if all(isinstance(t, ast.Name) for t in targets) and (
          not isinstance(stmt, ast.AnnAssign) or stmt.value is not None):
        attrs.update(t.id for t in targets)
        continue
    return (f'a class-level statement ({ast.unparse(stmt).splitlines()[0]}) '
            'that a function body cannot carry')
  overridden = sorted(set(methods) & set(API))
  if overridden:
    return (f'it overrides OptimizerDef.{overridden[0]}, which an optax '
            'transformation has no place for')
  has_hooks = all(h in methods for h in HOOKS)
  tree_rule = 'apply_gradient' in methods and (
      'init_state' in methods or 'init_param_state' in methods)
  if not has_hooks and not tree_rule:
    missing = [h for h in HOOKS if h not in methods]
    return (f'it does not define {" and ".join(missing)} (an abstract base, '
            'or a rule spread over classes)')
  for name, n in TREE_HOOKS.items():
    m = methods.get(name)
    if m is not None and (len(m.args.args) != n + 1 or m.args.vararg
                          or m.args.kwarg or m.args.kwonlyargs):
      return (f'its {name} does not take the legacy arguments '
              f'({"hyper_params, params, state, grads" if n == 4 else "params"})')
  init = methods.get('__init__')
  init_params, init_locals = ['hyper_params'], set()
  if init is not None:
    a = init.args
    if a.posonlyargs or not a.args or a.args[0].arg != 'self':
      return '__init__ does not take self first'
    init_params = [x.arg for x in a.args[1:] + a.kwonlyargs]
    init_params += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    sets = 0
    for stmt in init.body:
      if _is_super_init(stmt):
        sets += 1
      elif (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and _self_attr(stmt.targets[0])):
        attr = stmt.targets[0].attr
        if attr == 'hyper_params':
          sets += 1
        else:
          attrs.add(attr)
    if sets != 1:
      return ('__init__ does not set the hyper-parameters exactly once '
              '(super().__init__(hyper_params))')
    init_locals = {x for x in _scope(table, '__init__').get_locals()}
    for i, stmt in enumerate(init.body):
      # self.a = v with a parameter a: the local a becomes v; fine if
      # nothing after reads the parameter
      if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
          and _self_attr(stmt.targets[0])
          and stmt.targets[0].attr in init_locals and not (
              isinstance(stmt.value, ast.Name)
              and stmt.value.id == stmt.targets[0].attr)):
        a = stmt.targets[0].attr
        later = [n for s2 in init.body[i + 1:] for n in ast.walk(s2)
                 if isinstance(n, ast.Name) and n.id == a]
        if later:
          return (f'__init__ sets self.{a} and reads its own {a} after that: '
                  'one scope cannot hold both')
  closure = set(methods) | attrs | {'hyper_params'} | set(init_params) | (
      init_locals) - {'self'}
  closure.discard('__init__')
  for name, m in methods.items():
    decos = [d for d in m.decorator_list]
    static = False
    for d in decos:
      if isinstance(d, ast.Name) and d.id == 'staticmethod':
        static = True
      else:
        return f'{name} is decorated ({ast.unparse(d)})'
    if not static and (not m.args.args or m.args.args[0].arg != 'self'
                       or m.args.posonlyargs):
      return f'{name} does not take self first'
    for node in ast.walk(m):
      if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
          node.func.id == 'super') and not (name == '__init__'):
        return f'{name} calls super() (the base class goes away)'
      if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [
            node.target]
        for t in targets:
          for sub in ast.walk(t):
            if _self_attr(sub) and name != '__init__':
              return (f'{name} sets self.{sub.attr}: state kept on the '
                      'definition object between calls (hyper-parameters '
                      'changed inside apply_gradient, or state shared '
                      'between calls); an optax transformation is pure')
    dotted_cls = {id(n.value) for n in ast.walk(m)
                  if isinstance(n, ast.Attribute)
                  and isinstance(n.value, ast.Name)
                  and n.value.id == cls.name}
    for n in ast.walk(m):
      if isinstance(n, ast.Name) and n.id == cls.name and (
          id(n) not in dotted_cls):
        return (f'{name} uses the class {cls.name} itself, which the '
                'translation turns into a function')
    selfs = [n for n in ast.walk(m) if isinstance(n, ast.Name)
             and n.id == 'self']
    attr_selfs = {id(n.value) for n in ast.walk(m)
                  if isinstance(n, ast.Attribute) and isinstance(
                      n.value, ast.Name) and n.value.id == 'self'}
    for n in selfs:
      if id(n) not in attr_selfs and not (
          name == '__init__' and _in_super_init(init, n)):
        return f'{name} passes self on'
    for n in ast.walk(m):
      if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and (
          n.value.id == cls.name) and n.attr not in nested:
        return (f'{name} reads {cls.name}.{n.attr}, an attribute of the '
                'class the translation turns into a function')
      if _self_attr(n) and n.attr not in closure:
        if n.attr in API or n.attr in TREE_HOOKS or n.attr in HOOKS:
          return (f'{name} calls OptimizerDef.{n.attr} of the base class, '
                  'which the translation does not carry')
        return f'{name} reads self.{n.attr}, which the class does not set'
    scope = _scope(table, name)
    own = set(scope.get_locals()) - {'self'}
    used_closure = {n.attr for n in ast.walk(m) if _self_attr(n)}
    if name == '__init__':  # self.a = ...: the local a is the attribute
      used_closure -= {s.targets[0].attr for s in m.body
                       if isinstance(s, ast.Assign) and len(s.targets) == 1
                       and _self_attr(s.targets[0])}
    clash = sorted(own & used_closure)
    if clash:
      return (f'{name} has a local or parameter {clash[0]} and also reads '
              f'self.{clash[0]}: one scope cannot hold both')
    free = sorted(_globals(scope) & closure)
    if free and name != '__init__':
      return (f'{name} uses the module-level name {free[0]}, which the '
              'class also defines (as a method, attribute or constructor '
              'name): in one function scope it would mean the latter')
  if init is not None:
    free = sorted(_globals(_scope(table, '__init__')) & (
        set(methods) | attrs))
    if free:
      return (f'__init__ uses the module-level name {free[0]}, which the '
              'class also defines')
  return None


def _scope(table, method):
  cls = table.get_children()[-1]
  for child in cls.get_children():
    if child.get_name() == method and child.get_type() == 'function':
      return child
  raise KeyError(method)


def _globals(scope):
  out = set(scope.get_globals())
  for child in scope.get_children():
    out |= _globals(child)
  return out


def _self_attr(node):
  import ast  # pylint: disable=g-import-not-at-top
  return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
          and node.value.id == 'self')


def _is_super_init(stmt):
  """``super().__init__(x)`` / ``super(C, self).__init__(x)`` /
  ``Base.__init__(self, x)`` as a statement."""
  import ast  # pylint: disable=g-import-not-at-top
  if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
    return False
  f = stmt.value.func
  if not (isinstance(f, ast.Attribute) and f.attr == '__init__'):
    return False
  v = f.value
  if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and (
      v.func.id == 'super'):
    return len(stmt.value.args) == 1 and not stmt.value.keywords
  if isinstance(v, (ast.Name, ast.Attribute)):
    args = stmt.value.args
    return (len(args) == 2 and isinstance(args[0], ast.Name)
            and args[0].id == 'self' and not stmt.value.keywords)
  return False


def _in_super_init(init, name_node):
  import ast  # pylint: disable=g-import-not-at-top
  for stmt in init.body:
    if _is_super_init(stmt):
      for n in ast.walk(stmt):
        if n is name_node:
          return True
  return False


def analyse(node, code_of, bases_ok, top_names=()):
  """A ``Plan`` for the class ``node``, or a string saying why not.

  ``bases_ok``: whether its one base is ``OptimizerDef`` itself;
  ``top_names``: the names the file defines at the top level.
  """
  if not bases_ok:
    base = code_of(node.bases[0].value) if node.bases else '?'
    return (f'it derives from {base}, not from OptimizerDef itself (a '
            'built-in optimizer or another definition)')
  src = code_of(node)
  why = _why_not(node, src, top_names)
  if why:
    return why
  params, var_args = ['hyper_params'], False
  hooks = []
  for stmt in node.body.body:
    if isinstance(stmt, cst.FunctionDef):
      if stmt.name.value == '__init__':
        ps = stmt.params
        params = [p.name.value for p in list(ps.params)[1:]
                  + list(ps.kwonly_params)]
        var_args = (isinstance(ps.star_arg, cst.Param)
                    or ps.star_kwarg is not None)
      elif stmt.name.value in HOOKS or stmt.name.value in TREE_HOOKS:
        hooks.append(stmt.name.value)
  return Plan(node.name.value, params, var_args, hooks)
