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
* every submodule it builds has an explicit ``name=``, or it is a stack
  function (rules/autoname_stack.py): legacy numbered its auto-names on the
  counter of the body running it, across that body's own layers, so the
  calling bodies run in a counter frame of their own and the function
  names ``f'{Class}_{next(legacy_names.autoname_counter())}'`` (a lambda
  it returns, likewise: the counter of the body that calls it);
* the rewritten body needs no module (``nn.make_rng()``, ``self.param``
  would become ``self....``, which a plain function has not).

Otherwise the legacy calls keep their TODOs, as before.
"""

import dataclasses

from flaxlegacy.upgrade import facts as facts_lib
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.analyses import function_callers
from flaxlegacy.upgrade.rules import autoname_stack


def applies(up, node):
  """Whether top-level ``node`` (a FunctionDef) is such a function."""
  if node.decorators or not up.ctx.facts.nn_prefixes:
    return False
  rel = getattr(up.ctx.facts, 'path', None)
  if rel is None:
    return False
  return function_callers.candidate(up.ctx.codebase, rel, node.name.value)


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
  info = facts_lib.ModuleInfo(name=node.name.value, file=up.ctx.facts.path,
                              kind='function', params=params, defaults={})
  info = dataclasses.replace(info, fields=[], call=params)
  if written.attrs & {'partial', 'shared'} and autoname_stack.role(
      up, info) != 'function':
    # it makes module references (``conv = conv.partial(...)``; returned,
    # they are the caller's to build): the partial rules' (rules/partials.py);
    # one that builds submodules (from the running body's counter,
    # rules/autoname_stack.py) builds its partials as a body does
    return None
  report = up.ctx.report
  marks = len(report.rewritten), len(report.left)
  rw = apply_rewriter.ApplyRewriter(up, info, node)
  if rw.todo_all or (rw.dynamic or rw.names) and rw.stack_role != 'function':
    # auto-named submodules: drawn from the running body's counter
    # (rules/autoname_stack.py) where the analysis says so, else the TODO
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

