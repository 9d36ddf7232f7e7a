"""Rule: legacy randomness imported by name (``from flax.deprecated.nn.
stochastic import make_rng``, ``from flax.nn import make_rng as rng``;
the facts: collectors/stochastic_names.py).

* In a module body, ``make_rng()`` is rewritten as ``nn.make_rng()`` is
  (rules/apply/stochastic.py: ``self.make_rng('dropout')``; likewise
  ``is_stochastic()`` -> ``self.has_rng('dropout')``), the same plan and so
  the same stream.
* Any other use (a plain function a module calls, program code, the name
  passed as a value or called with arguments) keeps the legacy call and
  gets a TODO there: no module to draw the key from, and no guess.
* The import of a top-level statement is decided once the file is
  rewritten (``finish``): where no use of the name is left, the name leaves
  the import (the statement too, when it was the last name); else the
  import stays, with its TODO.
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk


def names(up):
  """local name -> 'make_rng' / 'is_stochastic' of the file."""
  return getattr(up.ctx.facts, 'stochastic_names', None) or _NONE


_NONE = {}


def called_attr(up, call):
  """'make_rng' / 'is_stochastic' where ``call`` (an original Call) is
  ``make_rng()`` of such a name, with no argument; else None."""
  f = call.func
  if type(f) is not cst.Name or call.args:
    return None
  return names(up).get(f.value)


def not_a_load(up, name):
  """Marks a Name node that names no value (an attribute's name, a
  keyword) so that ``leave_name`` leaves it."""
  if name.value in names(up):
    up._stochastic_skip.add(id(name))  # pylint: disable=protected-access


def leave_name(up, original_node):
  """A TODO at a use of such a name that no rule rewrote."""
  local = original_node.value
  known = names(up)
  if not known or local not in known or up._in_import:  # pylint: disable=protected-access
    return
  skip = up._stochastic_skip  # pylint: disable=protected-access
  if id(original_node) in skip or id(original_node) in getattr(
      up, '_skip_names', ()):
    return
  full = up.ctx.facts.imports.get(local, local)
  where = ('in a module body, not as a plain call' if not up.PLAIN_BODIES
           else 'outside a module body: no module to draw from here')
  up.todo(original_node, f'{local} is the legacy {full} (imported by name), '
          f'used here {where}; pass a key in (a module body draws one with '
          f'self.{_linen_of(known[local])}) or port by hand')


def _linen_of(attr):
  return "make_rng('dropout')" if attr == 'make_rng' else "has_rng('dropout')"


def import_names(up, original_node):
  """The local names of ImportFrom ``original_node`` that are such names:
  a top-level statement's are recorded (``finish`` decides them), with
  their line.  The others keep the file rules' TODO."""
  if (type(original_node) is not cst.ImportFrom or original_node.relative
      or original_node.module is None
      or isinstance(original_node.names, cst.ImportStar)):
    return ()
  known = names(up)
  if not known:
    return ()
  mod = cst_util.dotted(original_node.module)
  out = {}
  for a in original_node.names:
    local = (a.asname.name.value if a.asname is not None
             else cst_util.dotted(a.name))
    full = f'{mod}.{cst_util.dotted(a.name)}'
    if local in known and up.ctx.facts.imports.get(local) == full:
      out[local] = full
  if not out or up._quals or len(up._todos) != 1:  # pylint: disable=protected-access
    # one in a function, a class or a compound statement keeps the file
    # rules' TODO (only a statement of the file's own body is decided)
    return ()
  for local, full in out.items():
    up.ctx.stochastic_imports[local] = (up.ctx.line(original_node), full)
  return tuple(out)


def without(node, locals_):
  """ImportFrom ``node`` without the aliases binding ``locals_``, or None
  where none is left."""
  kept = [a for a in node.names
          if (a.asname.name.value if a.asname is not None
              else cst_util.dotted(a.name)) not in locals_]
  if not kept:
    return None
  if len(kept) != len(node.names):
    kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return node.with_changes(names=kept)
  return node


def finish(ctx, module):
  """``module`` (the rewritten file) with each recorded import decided:
  a name with no use left leaves its import (the statement goes with its
  last name; its comments go to the next statement); one still used keeps
  it, with a TODO."""
  recorded = ctx.stochastic_imports
  if not recorded:
    return module
  # the names read in the module (not attribute names, keywords or the
  # names an import binds)
  uses = walk.LoadedNames(in_imports=False)
  module.visit(uses)
  gone = frozenset(recorded) - uses.names
  body, carry, changed = [], None, False
  for stmt in module.body:
    if carry is not None:
      stmt = stmt.with_changes(leading_lines=list(carry) + list(
          stmt.leading_lines))
      carry, changed = None, True
    if not isinstance(stmt, cst.SimpleStatementLine):
      body.append(stmt)
      continue
    small, todos = [], []
    for s in stmt.body:
      if isinstance(s, cst.ImportFrom) and not isinstance(
          s.names, cst.ImportStar):
        mine = [(a.asname.name.value if a.asname is not None
                 else cst_util.dotted(a.name)) for a in s.names]
        mine = [m for m in mine if m in recorded]
        for local in mine:
          line, full = recorded[local]
          if local in gone:
            ctx.report.rewritten.append(
                {'rule': 'stochastic', 'line': line,
                 'what': f'from ... import {local}: every use rewritten in '
                         'module bodies, the import removed'})
          else:
            why = (f'{full} is legacy API imported by name ({local}); some '
                   'of its uses are outside module bodies (see their '
                   'TODOs): this import stays until they are ported')
            todos.append(why)
            ctx.report.left.append({'line': line, 'why': why})
        s = without(s, gone) if mine else s
        if s is None:
          changed = True
          continue
      small.append(s)
    if not small:
      carry = stmt.leading_lines
      continue
    if len(small) != len(stmt.body):
      small[-1] = small[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
      stmt = stmt.with_changes(body=small)
      changed = True
    if todos:
      stmt = cst_util.add_todos(stmt, todos)
      changed = True
    body.append(stmt)
  if not changed:
    return module
  if carry is not None:  # the file's last statement: its comments stay
    return module.with_changes(body=body, footer=list(carry) + list(
        module.footer))
  return module.with_changes(body=body)
