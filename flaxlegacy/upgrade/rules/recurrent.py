"""Rule: legacy recurrent cells (``nn.LSTMCell``, ``nn.GRUCell``,
``nn.OptimizedLSTMCell``) -> linen.

Linen's cells compute what legacy's compute, with the same parameter names
and shapes (spec legacy-nn.md 3.17), but take ``features`` as a field and
``initialize_carry`` as an instance method with another signature.

* ``nn.LSTMCell.initialize_carry(rng, batch_dims, size[, init_fn])`` ->
  ``nn.LSTMCell(size, parent=None).initialize_carry(rng, batch_dims +
  (size,))`` (``parent=None``: the throw-away cell is no submodule and takes
  no auto-name).  ``init_fn`` becomes ``carry_init`` when it is an
  ``nn.initializers`` member (linen calls it with the same key and shape).
  Inside a module, with the default (zeros) carry, a legacy
  ``nn.make_rng()`` key is replaced by ``jax.random.PRNGKey(0)``: the carry
  does not depend on it, and the upgraded module then needs no ``dropout``
  stream for it (legacy took it from an ``nn.stochastic`` context, which a
  jitted step may have had only around the jit).
* Cells constructed in module bodies -- ``nn.LSTMCell.shared(name=...)``,
  ``nn.LSTMCell(carry, x, name=...)`` -- become
  ``legacy_cells.LSTMCell(name=...)``: the linen subclass shipped in
  ``flaxlegacy.migrate.legacy_cells`` whose ``features`` may be left out
  (legacy reads the hidden size from the carry; the rewrite cannot tell it
  where the cell is built).
* A cell as the body of a scan -- ``jax_utils.scan_in_dim(nn.LSTMCell.partial(
  name=...), carry, xs, axis=a)``, ``jax.lax.scan(nn.LSTMCell.partial(
  name=...), carry, xs)`` -- becomes the lifted ``nn.scan`` of the cell with
  the parameters broadcast over time (one set, at the same path).
* A local of a module body that holds a cell's partial and is only
  called, legacy-style -- ``cell = nn.LSTMCell.partial(name=n)`` then
  ``state, y = cell((c, h), x)``, often once per layer in a loop --
  becomes ``functools.partial(legacy_cells.LSTMCell, name=n)``, each call
  ``cell()((c, h), x)`` (the call's keywords, and the legacy auto-name
  where neither gives a name, go to the constructor).  The partial and
  its calls change together or not at all: a local assigned anything
  else, or used otherwise (passed on, ``cell.initialize_carry``), keeps
  the TODOs.
* Unnamed cells (legacy auto-names them on the shared counter) and any
  other form keep a TODO.

Each case decides a plan (upgrade/plans.py: ``RecurrentCell``,
``CellScan``, ``CellCarry``, ``CellPartial``, ``CellPartialCall``) that
the emitter writes.
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.collectors.usage import CELLS  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules import jax_names
from flaxlegacy.upgrade.rules import partial_calls

# legacy apply hyper-parameters; linen's fields have the same names
CELL_HYPER = ('gate_fn', 'activation_fn', 'kernel_init',
              'recurrent_kernel_init', 'bias_init')
# the shipped cells the report names (the emitter writes them)
SHIPPED = 'legacy_cells'
SHIPPED_IMPORT = 'flaxlegacy.migrate.legacy_cells'
SCANS = ('flax.jax_utils.scan_in_dim', 'jax.lax.scan')


def _cell(up, expr):
  """'LSTMCell' when ``expr`` is the legacy ``nn.LSTMCell`` (etc.)."""
  attr = cst_util.legacy_attr(expr, up.ctx.facts.nn_prefixes)
  return attr if attr in CELLS else None


def _cell_method(up, func, method):
  """The cell name for ``nn.<Cell>.<method>``, else None."""
  if isinstance(func, cst.Attribute) and func.attr.value == method:
    return _cell(up, func.value)
  return None


def _in_module(up):
  return hasattr(up, 'info')  # apply_rewriter.ApplyRewriter


def _bind(args, names):
  """{name: Arg} for a call's arguments, or None (*args, unknown keyword)."""
  out = {}
  for i, a in enumerate(args):
    if a.star:
      return None
    k = a.keyword.value if a.keyword is not None else (
        names[i] if i < len(names) else None)
    if k is None or k not in names or k in out:
      return None
    out[k] = a
  return out


def _scan_body(up, call):
  """(cell, partial call) when ``call`` is a scan with a cell body."""
  q = jax_names.qualify(call.func, up.ctx.facts.imports)
  if q not in SCANS or not call.args:
    return None
  body = call.args[0].value
  if isinstance(body, cst.Call):
    cell = _cell_method(up, body.func, 'partial')
    if cell:
      return cell, body
  elif _cell(up, body):
    return _cell(up, body), None
  return None


class _Locals(partial_calls.LocalsScan):
  """Every assignment and call of each name of a body, nested functions
  included, and how many times each name is mentioned at all."""

  def __init__(self):
    super().__init__()
    self.names = {}  # name -> count of Name nodes

  def visit_FunctionDef(self, node):
    return True

  def leave_FunctionDef(self, node):
    pass

  def visit_ClassDef(self, node):
    return True

  def visit_Name(self, node):
    self.names[node.value] = self.names.get(node.value, 0) + 1


def _cell_kwargs(args):
  """Whether ``args`` are keywords a cell takes (its fields, ``name``)."""
  return all(a.keyword is not None and not a.star
             and (a.keyword.value == 'name' or a.keyword.value in CELL_HYPER)
             for a in args)


def cell_partial_locals(up, body):
  """{id(node): (what, cell, named)} for the locals of a module body that
  hold a legacy cell's partial and are only called legacy-style: each
  ``nn.<Cell>.partial(...)`` assigned to one ('partial') and each call of
  one ('call'); ``named``: a ``name=`` is given at the call or in every
  partial the local may hold."""
  scan = _Locals()
  body.visit(scan)
  out = {}
  for name, values in scan.assigns.items():
    cells = [_cell_method(up, v.func, 'partial')
             if isinstance(v, cst.Call) else None for v in values]
    if not cells or None in cells or len(set(cells)) != 1:
      continue
    if not all(_cell_kwargs(v.args) for v in values):
      continue
    calls = scan.calls.get(name, [])
    # every mention: the targets and the callees, nothing else
    if not calls or scan.names.get(name, 0) != len(values) + len(calls):
      continue
    if not all(len(c.args) >= 2 and all(a.keyword is None and not a.star
                                        for a in c.args[:2])
               and _cell_kwargs(c.args[2:]) for c in calls):
      continue
    cell = cells[0]
    named = all(any(a.keyword.value == 'name' for a in v.args)
                for v in values)
    for v in values:
      out[id(v)] = ('partial', cell, named)
    for c in calls:
      out[id(c)] = ('call', cell, named or any(
          a.keyword.value == 'name' for a in c.args[2:]))
  return out


def visit_call(up, node):
  """Marks the legacy attributes a rewrite below consumes (no leftover TODO)."""
  f = node.func
  found = _cell_partials(up).get(id(node))
  if found is not None and found[0] == 'partial':
    up._handled.update((id(f), id(f.value)))  # pylint: disable=protected-access
  for method in ('initialize_carry', 'shared'):
    if _cell_method(up, f, method) and (method == 'initialize_carry'
                                        or _in_module(up)):
      up._handled.update((id(f), id(f.value)))  # pylint: disable=protected-access
  if _cell(up, f) and _in_module(up):
    up._handled.add(id(f))  # pylint: disable=protected-access
  scan = _scan_body(up, node)
  if scan is not None and _in_module(up):
    body = node.args[0].value
    up._handled.add(id(body))  # pylint: disable=protected-access
    if isinstance(body, cst.Call):
      up._handled.update((id(body.func), id(body.func.value)))  # pylint: disable=protected-access


def leave_call(up, original, updated):
  """The rewritten call, or None when this rule does not apply."""
  f = original.func
  cell = _cell_method(up, f, 'initialize_carry')
  if cell:
    return _initialize_carry(up, original, updated, cell)
  if not _in_module(up):
    return None
  found = _cell_partials(up).get(id(original))
  if found is not None:
    return _cell_partial(up, original, updated, *found)
  cell = _cell_method(up, f, 'shared')
  if cell:
    plan = _construct(up, original, updated.args, cell, 'shared')
    return updated if plan is None else up.emit.recurrent_cell(plan)
  cell = _cell(up, f)
  if cell:
    args = list(updated.args)
    inputs, rest = args[:2], args[2:]
    if len(inputs) != 2 or any(a.keyword is not None or a.star
                               for a in inputs):
      up.todo(original, f'nn.{cell} call form: (carry, inputs, **hyper) '
              'expected')
      return updated
    plan = _construct(up, original, rest, cell, 'call', tuple(inputs))
    if plan is None:
      return updated
    return up.emit.recurrent_cell(plan)
  scan = _scan_body(up, original)
  if scan is not None:
    return _scan(up, original, updated, *scan)
  return None


def _construct(up, original, args, cell, how, inputs=None):
  """The RecurrentCell plan (``legacy_cells.<Cell>(name=..., **hyper)``,
  called on ``inputs`` where given), or None (and a TODO)."""
  args = list(args)
  kws = [a.keyword.value if a.keyword is not None else None for a in args]
  if any(a.star for a in args) or None in kws:
    up.todo(original, f'nn.{cell}.{how} with positional or ** arguments')
    return None
  bad = [k for k in kws if k != 'name' and k not in CELL_HYPER]
  if bad:
    up.todo(original, f'nn.{cell}: arguments {bad} have no linen cell field')
    return None
  name = None
  if 'name' not in kws and how in ('call', 'shared'):
    # the legacy auto-name from the class's plan (rules/name_plan.py counts
    # cells on the one counter); None: linen's own name is legacy's
    name = up._auto_name_plan(original, cell if how == 'call' else None, None)  # pylint: disable=protected-access
    if name is None and (how == 'shared' or up.dynamic):
      up.todo(original, f'unnamed nn.{cell}: cannot tell its legacy '
              'auto-name here; give it a name= and upgrade again')
      return None
  elif 'name' not in kws:
    up.todo(original, f'unnamed nn.{cell}: legacy auto-names it on the '
            'shared counter; give it a name= and upgrade again')
    return None
  up.rewrote(original, 'recurrent', f'nn.{cell}.{how} -> {SHIPPED}.{cell} '
             '(hidden size from the carry)')
  up.ctx.report.rewritten[-1]['shipped'] = f'{SHIPPED_IMPORT}.{cell}'
  return plans.RecurrentCell(cell=cell, hypers=tuple(args), name=name,
                             inputs=inputs)


def _cell_partials(up):
  """The body's cell partial locals (cell_partial_locals), worked out at
  the first look-up; none outside module bodies."""
  if not _in_module(up):
    return {}
  found = getattr(up, '_cell_partial_locals', None)
  if found is None:
    found = up._cell_partial_locals = cell_partial_locals(up, up.fn.body)  # pylint: disable=protected-access
  return found


def _cell_partial(up, original, updated, what, cell, named):
  """A cell partial held by a local, or a call of that local, as its
  plan."""
  if what == 'partial':
    up.rewrote(original, 'recurrent', f'nn.{cell}.partial -> '
               f'functools.partial({SHIPPED}.{cell}) (hidden size from the '
               'carry)')
    up.ctx.report.rewritten[-1]['shipped'] = f'{SHIPPED_IMPORT}.{cell}'
    return up.emit.cell_partial(plans.CellPartial(
        cell=cell, hypers=tuple(updated.args)))
  args = list(updated.args)
  name = None
  if not named:
    name = up._auto_name_plan(original, cell, None)  # pylint: disable=protected-access
  up.rewrote(original, 'recurrent', f'{original.func.value}(carry, x) on a '
             f'local partial of nn.{cell} -> {original.func.value}()(carry, '
             'x)')
  return up.emit.cell_partial_call(plans.CellPartialCall(
      callee=updated.func, hypers=tuple(args[2:]), name=name,
      inputs=tuple(args[:2])))


def _initialize_carry(up, original, updated, cell):
  bound = _bind(updated.args, ('rng', 'batch_dims', 'size', 'init_fn'))
  obound = _bind(original.args, ('rng', 'batch_dims', 'size', 'init_fn'))
  if bound is None or not {'rng', 'batch_dims', 'size'} <= set(bound):
    up.todo(original, f'nn.{cell}.initialize_carry(rng, batch_dims, size, '
            'init_fn) expected')
    return updated
  init = None
  if 'init_fn' in bound:
    oinit = obound['init_fn'].value
    attr = cst_util.legacy_attr(
        oinit.func if isinstance(oinit, cst.Call) else oinit,
        up.ctx.facts.nn_prefixes)
    if attr is None or not attr.startswith('initializers.'):
      up.todo(original, f'nn.{cell}.initialize_carry with an init_fn that is '
              'not an nn.initializers member: linen calls carry_init(key, '
              'shape, dtype)')
      return updated
    if attr != 'initializers.zeros':
      init = bound['init_fn'].value
  rng = bound['rng'].value
  orng = obound['rng'].value
  if (init is None and _in_module(up) and isinstance(orng, cst.Call)
      and not orng.args and cst_util.legacy_attr(
          orng.func, up.ctx.facts.nn_prefixes) == 'make_rng'):
    rng = None  # a fixed key: the zeros carry does not depend on it
  up.rewrote(original, 'recurrent', f'nn.{cell}.initialize_carry -> linen '
             'initialize_carry')
  return up.emit.cell_carry(plans.CellCarry(
      cell_expr=updated.func.value, rng=rng,
      batch_dims=bound['batch_dims'].value, size=bound['size'].value,
      init=init))


def _scan(up, original, updated, cell, partial):
  q = jax_names.qualify(original.func, up.ctx.facts.imports)
  if partial is None:
    up.todo(original, f'nn.{cell} as a scan body without a name: legacy '
            'auto-names it; use nn.{cell}.partial(name=...)')
    return updated
  if q.endswith('scan_in_dim'):
    bound = _bind(updated.args, ('body_fn', 'init', 'xs', 'axis', 'keepdims'))
  else:
    bound = _bind(updated.args, ('f', 'init', 'xs'))
  if bound is None or not {'init', 'xs'} <= set(bound):
    up.todo(original, f'{q} with a cell body: call form not recognised')
    return updated
  axis = 0
  if 'axis' in bound:
    a = bound['axis'].value
    if isinstance(a, cst.Tuple) and len(a.elements) == 1:
      a = a.elements[0].value
    if not isinstance(a, cst.Integer):
      up.todo(original, f'{q} over several or non-literal axes')
      return updated
    axis = int(a.value)
  if 'keepdims' in bound and not (
      isinstance(bound['keepdims'].value, cst.Name)
      and bound['keepdims'].value.value == 'False'):
    up.todo(original, f'{q} with keepdims')
    return updated
  plan = _construct(up, original, updated.args[0].value.args, cell,
                    'partial')
  if plan is None:
    return updated
  up.rewrote(original, 'recurrent',
             f'{q} over nn.{cell} -> {up._prefix()}.scan')  # pylint: disable=protected-access
  return up.emit.cell_scan(plans.CellScan(
      cell=plan, init=bound['init'].value, xs=bound['xs'].value, axis=axis))


def unnamed_cell_partial_call(up, node):
  """The cell's name where ``node`` calls a local holding a cell's partial
  and neither gives a name (legacy auto-names it), else None."""
  found = _cell_partials(up).get(id(node))
  if found is None or found[0] != 'call' or found[2]:
    return None
  return found[1]


# for the auto-name plan (rules/name_plan.py)
cell = _cell
cell_method = _cell_method
in_module = _in_module
