"""flaxlegacy/upgrade/ imports itself in layers, without circles.

The graph counts every import of an upgrade module, at the top of a file
and inside functions alike (a function-level import is still a dependency;
it only hides a circle from the interpreter).  Read statically with ``ast``,
so nothing is imported here.
"""

import ast
import os

import flaxlegacy

PACKAGE = 'flaxlegacy.upgrade'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(flaxlegacy.__file__)))
UPGRADE = os.path.join(ROOT, 'flaxlegacy', 'upgrade')


def _modules():
  """Dotted module name -> path, for every .py file under upgrade/."""
  mods = {}
  for d, _, files in os.walk(UPGRADE):
    for f in files:
      if f.endswith('.py'):
        path = os.path.join(d, f)
        name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, '.')
        if name.endswith('.__init__'):
          name = name[:-len('.__init__')]
        mods[name] = path
  return mods


def _owner(name, mods):
  """The upgrade module that ``name`` (a module, or a name in one) is in."""
  while name and name not in mods:
    name = name.rpartition('.')[0]
  return name or None


def import_graph(mods=None):
  """{module: {(imported module, line)}} over top-level and function-level
  imports; relative imports resolved against the importing module."""
  mods = _modules() if mods is None else mods
  graph = {}
  for name, path in mods.items():
    with open(path, encoding='utf-8') as f:
      tree = ast.parse(f.read(), path)
    is_pkg = path.endswith('__init__.py')
    edges = set()
    for node in ast.walk(tree):
      targets = []
      if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ''
        if node.level:
          parts = name.split('.')
          if not is_pkg:
            parts = parts[:-1]
          parts = parts[:len(parts) - (node.level - 1)]
          base = '.'.join(parts + ([base] if base else []))
        # ``from pkg import mod`` imports pkg.mod; ``from mod import x``
        # imports mod
        targets = [f'{base}.{a.name}' if f'{base}.{a.name}' in mods
                   else base for a in node.names]
      for t in targets:
        owner = _owner(t, mods)
        if owner is not None and owner != name:
          edges.add((owner, node.lineno))
    graph[name] = edges
  return graph


def find_cycle(graph):
  """One import circle as a list of modules (first == last), or None."""
  state = {}  # module -> 1 while on the stack, 2 when done
  stack = []

  def visit(v):
    state[v] = 1
    stack.append(v)
    for w, _ in sorted(graph.get(v, ())):
      if state.get(w) == 1:
        return stack[stack.index(w):] + [w]
      if w not in state:
        found = visit(w)
        if found:
          return found
    stack.pop()
    state[v] = 2
    return None

  for v in sorted(graph):
    if v not in state:
      found = visit(v)
      if found:
        return found
  return None


def _describe(cycle, graph):
  lines = []
  for a, b in zip(cycle, cycle[1:]):
    at = sorted(l for t, l in graph[a] if t == b)
    lines.append(f'  {a} -> {b} (line {", ".join(map(str, at))})')
  return '\n'.join(lines)


def test_graph_sees_function_level_imports(tmp_path):
  # the checker itself: a circle closed only by an import inside a
  # function is found
  pkg = tmp_path / 'p'
  pkg.mkdir()
  (pkg / '__init__.py').write_text('')
  (pkg / 'a.py').write_text('from p import b\n')
  (pkg / 'b.py').write_text('def f():\n  from p import a\n  return a\n')
  (pkg / 'c.py').write_text('from p.a import thing\n')
  mods = {'p': str(pkg / '__init__.py'), 'p.a': str(pkg / 'a.py'),
          'p.b': str(pkg / 'b.py'), 'p.c': str(pkg / 'c.py')}
  graph = import_graph(mods)
  assert {t for t, _ in graph['p.b']} == {'p.a'}
  assert {t for t, _ in graph['p.c']} == {'p.a'}
  assert find_cycle(graph) == ['p.a', 'p.b', 'p.a']
  del graph['p.b']
  assert find_cycle(graph) is None


def test_upgrade_imports_have_no_cycle():
  mods = _modules()
  assert f'{PACKAGE}.facts' in mods and f'{PACKAGE}.rules.modules' in mods
  graph = import_graph(mods)
  assert sum(len(e) for e in graph.values()) > 100  # the graph was read
  cycle = find_cycle(graph)
  assert cycle is None, ('import circle inside flaxlegacy/upgrade:\n'
                         + _describe(cycle, graph))


def test_facts_import_no_rules():
  graph = import_graph()
  # flow.py's parts (flow_facts/) too
  parts = sorted(n[len(PACKAGE) + 1:] for n in graph
                 if n.startswith(f'{PACKAGE}.flow_facts.'))
  assert 'flow_facts.expressions' in parts
  for name in ['facts', 'flow'] + parts:
    rules = sorted(f'{t} (line {l})' for t, l in graph[f'{PACKAGE}.{name}']
                   if t == f'{PACKAGE}.rules'
                   or t.startswith(f'{PACKAGE}.rules.'))
    assert not rules, f'{name}.py imports rule modules: {rules}'


def test_analyses_import_no_rules_plans_or_emitters():
  # the codebase-wide analyses (analyses/) are facts: worked out of the
  # other facts, below everything that decides or writes
  graph = import_graph()
  parts = sorted(n for n in graph if n == f'{PACKAGE}.analyses'
                 or n.startswith(f'{PACKAGE}.analyses.'))
  assert {f'{PACKAGE}.analyses.autoname_stack',
          f'{PACKAGE}.analyses.model_uses'} <= set(parts)
  above = ('rules', 'plans', 'emit', 'transform', 'api')
  for name in parts:
    bad = sorted(f'{t} (line {l})' for t, l in graph[name]
                 if any(t == f'{PACKAGE}.{a}' or t.startswith(f'{PACKAGE}.{a}.')
                        for a in above))
    assert not bad, f'{name} imports {bad}'


def test_flow_parts_import_only_shared_and_queries():
  # flow.py composes them; none imports flow.py or another part (but the
  # shared tables and the queries)
  graph = import_graph()
  allowed = {f'{PACKAGE}.flow_facts.shared', f'{PACKAGE}.flow_facts.queries'}
  for name in sorted(graph):
    if not name.startswith(f'{PACKAGE}.flow_facts.'):
      continue
    inside = {t for t, _ in graph[name]
              if t == f'{PACKAGE}.flow' or t.startswith(f'{PACKAGE}.flow_')}
    assert inside <= allowed - {name}, f'{name} imports {sorted(inside)}'


def test_plans_and_emitters_import_no_rules():
  # a plan is what a rule decided, an emitter writes it: both sit under
  # the rules (an NNX emitter must not reach into the linen rules)
  graph = import_graph()
  emitters = sorted(n for n in graph if n == f'{PACKAGE}.emit'
                    or n.startswith(f'{PACKAGE}.emit.'))
  assert f'{PACKAGE}.emit.linen' in emitters
  for name in [f'{PACKAGE}.plans'] + emitters:
    rules = sorted(t for t, _ in graph[name]
                   if t == f'{PACKAGE}.rules' or t.startswith(f'{PACKAGE}.rules.'))
    assert not rules, f'{name} imports rule modules: {rules}'
  assert not graph[f'{PACKAGE}.plans'], 'plans.py imports the upgrade'


# the names under which rules hold the facts objects (a CodebaseFacts, its
# Flow, a file's FileFacts, the codebase's analyses): ``codebase``,
# ``up.ctx.codebase``, ``self.flow``, ``file_facts``, a class's
# ModuleInfo (``info``, as every rule names it) ...
_FACT_NAMES = frozenset(('codebase', 'flow', 'facts', 'file_facts', 'f_facts',
                         'analyses', 'info'))


def _is_facts_object(node):
  last = (node.id if isinstance(node, ast.Name) else node.attr
          if isinstance(node, ast.Attribute) else None)
  return last in _FACT_NAMES


def fact_writes(tree):
  """(line, source) of every write on a facts object in ``tree``: an
  attribute assigned (``codebase.x = ...``, ``flow.x += ...``, also an
  entry of one: ``codebase.x[k] = ...``), ``setattr(codebase, ...)``, and
  any use of a facts object's ``__dict__``."""
  out = []
  for node in ast.walk(tree):
    targets = []
    if isinstance(node, ast.Assign):
      targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
      targets = [node.target]
    elif isinstance(node, ast.Delete):
      targets = list(node.targets)
    while targets:
      t = targets.pop()
      if isinstance(t, (ast.Tuple, ast.List)):
        targets.extend(t.elts)
        continue
      if isinstance(t, ast.Starred):
        targets.append(t.value)
        continue
      if isinstance(t, ast.Subscript):
        t = t.value
        if not isinstance(t, ast.Attribute):
          continue
      if isinstance(t, ast.Attribute) and _is_facts_object(t.value):
        out.append((node.lineno, ast.unparse(t)))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
        node.func.id in ('setattr', 'delattr') and node.args
        and _is_facts_object(node.args[0])):
      out.append((node.lineno, ast.unparse(node)))
    if isinstance(node, ast.Attribute) and node.attr == '__dict__' and (
        _is_facts_object(node.value)):
      out.append((node.lineno, ast.unparse(node)))
  return out


def test_fact_writes_finds_the_ways_to_write():
  # the checker itself
  src = ('codebase.a = 1\n'
         'x = up.ctx.codebase.b = {}\n'
         'self.flow.c += 1\n'
         'flow.d[k] = 2\n'
         'setattr(file_facts, "e", 3)\n'
         'facts.__dict__.setdefault("f", 4)\n'
         'codebase, flow.g = 1, 2\n'
         'info.methods[k] = m\n'
         # reads, and writes on other objects
         'y = codebase.a\n'
         'codebase.files[rel].modules\n'
         'plan.fields = []\n'
         'cache[k] = codebase.flow\n'
         'self.codebase = codebase\n')
  assert sorted(l for l, _ in fact_writes(ast.parse(src))) == [
      1, 2, 3, 4, 5, 6, 7, 8]


def test_rules_only_read_facts():
  # the facts (per file, the value facts, the codebase-wide analyses) are
  # worked out on the facts side (facts.py, collectors/, flow.py,
  # flow_facts/, analyses/); a rule reads them and never stores on them
  # what it worked out (a lazily cached analysis belongs to analyses/)
  mods = _modules()
  rules = sorted(n for n in mods if n.startswith(f'{PACKAGE}.rules.'))
  assert f'{PACKAGE}.rules.objects' in rules
  found = []
  for name in rules:
    with open(mods[name], encoding='utf-8') as f:
      tree = ast.parse(f.read(), mods[name])
    found += [f'{name} (line {l}): {s}' for l, s in fact_writes(tree)]
  assert not found, 'rules write on facts objects:\n  ' + '\n  '.join(found)
