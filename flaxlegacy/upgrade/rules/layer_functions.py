"""Rule: plain module-level functions that build layers for module bodies.

Legacy code shares a piece of network between module classes as a plain
function (a classifier head)::

    def classifier_head(encoded, num_classes, mlp_dim):
      encoded = nn.Dense(encoded, mlp_dim, name='mlp')
      return nn.Dense(nn.relu(encoded), num_classes, name='logits')

called from several ``apply`` bodies.  Legacy Flax bound those layers to
the module whose ``apply`` was running; linen does the same for a module
constructed in a function called from a compact ``__call__`` (its parent
is the module being run).  So the function keeps its place and its body
gets the rewrite of an ``apply`` body with no fields (layer calls ->
construct + call), when:

* every call of it the value facts (flow.py) see is in the ``apply`` of a
  legacy module class or the body of an ``@nn.module`` function, and it is
  not used as a value (so nothing else can call it);
* every submodule it builds has an explicit ``name=`` (legacy numbered
  auto-names on its caller's counter, across the caller's own layers: the
  caller's plan cannot see them; those keep the TODO);
* the rewritten body needs no module (``nn.make_rng()``, ``self.param``
  would become ``self....``, which a plain function has not).

Otherwise the legacy calls keep their TODOs, as before.
"""

import dataclasses

import libcst as cst

from flaxlegacy.upgrade import facts as facts_lib
from flaxlegacy.upgrade import walk


def _call_name(func):
  if isinstance(func, cst.Name):
    return func.value
  if isinstance(func, cst.Attribute):
    return func.attr.value
  return None


def _callers(codebase):
  """{(rel, function name): set of caller scopes (rel, qual)}, for the
  module-level functions of the codebase, from the value facts."""
  cached = getattr(codebase, 'layer_function_callers', None)
  if cached is not None:
    return cached
  out = {}
  flow = getattr(codebase, 'flow', None)
  if flow is not None:
    top = {}
    for (rel, qual), d in flow.defs.items():
      if '.' not in qual and not d.is_method:
        top.setdefault(qual, []).append(rel)
    for c in flow.constraints:
      if c[0] != 'call':
        continue
      name = _call_name(c[3].func)
      if name not in top:
        continue
      for v in flow.expr_values(c[1], c[2], c[3].func):
        if v[0] == 'func' and v[2] == name:
          out.setdefault((v[1], name), set()).add((c[1], c[2]))
  codebase.layer_function_callers = out
  return out


def _module_body(codebase, rel, qual):
  """Whether scope ``qual`` of ``rel`` is a legacy module's body."""
  f = codebase.files.get(rel)
  if f is None:
    return False
  if qual.endswith('.apply') and qual.count('.') == 1:
    info = f.modules.get(qual.split('.')[0])
    return info is not None and info.kind == 'class'
  info = f.modules.get(qual)
  return info is not None and info.kind == 'function'


def applies(up, node):
  """Whether top-level ``node`` (a FunctionDef) is such a function."""
  if node.decorators or not up.ctx.facts.nn_prefixes:
    return False
  codebase = up.ctx.codebase
  flow = getattr(codebase, 'flow', None)
  rel = getattr(up.ctx.facts, 'path', None)
  name = node.name.value
  if (flow is None or rel is None or name in up.ctx.facts.modules
      or name in getattr(up.ctx.facts, 'partial_helpers', ())):
    return False  # (helpers returning X.partial have their own rule)
  d = flow.defs.get((rel, name))
  if d is None or d.escapes or d.open or not d.called:
    return False
  callers = _callers(codebase).get((rel, name))
  return bool(callers) and all(_module_body(codebase, r, q)
                               for r, q in callers)


class _Names(walk.FastVisitor):

  def __init__(self):
    self.names = set()
    self.attrs = set()

  def visit_Name(self, node):
    self.names.add(node.value)

  def visit_Attribute(self, node):
    self.attrs.add(node.attr.value)


def _scan(node):
  """The names and attribute names of ``node``."""
  v = _Names()
  node.visit(v)
  return v


def convert_top_level(up, node):
  """The rewritten top-level FunctionDef ``node`` where it is such a
  function, else None (the legacy calls keep their TODOs)."""
  if not applies(up, node):
    return None
  return convert(up, node)


def convert(up, node):
  """The rewritten FunctionDef, or None (the legacy calls keep TODOs)."""
  from flaxlegacy.upgrade.rules import apply_rewriter  # pylint: disable=g-import-not-at-top
  ps = node.params
  params = [p.name.value for p in list(ps.posonly_params) + list(ps.params)
            + list(ps.kwonly_params)]
  written = _scan(node.body)
  if written.attrs & {'partial', 'shared'}:
    # it makes module references (``conv = conv.partial(...)``; returned,
    # they are the caller's to build): the partial rules' (rules/partials.py)
    return None
  info = facts_lib.ModuleInfo(name=node.name.value, file=up.ctx.facts.path,
                              kind='function', params=params, defaults={})
  info = dataclasses.replace(info, fields=[], call=params)
  report = up.ctx.report
  marks = len(report.rewritten), len(report.left)
  rw = apply_rewriter.ApplyRewriter(up, info, node)
  if rw.dynamic or rw.names or rw.todo_all:
    return None
  body = walk.transform(node.body, rw)
  builds = any(e.get('rule') == 'module_call'
               for e in report.rewritten[marks[0]:])
  if ('self' in _scan(body).names and 'self' not in written.names
      or len(report.left) > marks[1] or not builds):
    # the body needs a module (make_rng, param), or a call it could not
    # rewrite, or it builds no layer (nothing of this rule's): the legacy
    # calls keep their TODOs, as the file rules write
    del report.rewritten[marks[0]:], report.left[marks[1]:]
    return None
  up.rewrote(node, 'layer_function', f'{node.name.value}: layers built '
             'for the calling module body rewritten')
  return node.with_changes(body=body)

