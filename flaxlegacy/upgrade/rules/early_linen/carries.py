"""Rule: flax 0.3 recurrent cells -> today's linen cells.

* ``Cell.initialize_carry(rng, batch_dims, size[, init_fn])`` (the flax 0.3
  static method, ``Cell`` one of ``LSTMCell``, ``OptimizedLSTMCell``,
  ``GRUCell``) -> ``Cell(features=size, parent=None).initialize_carry(rng,
  batch_dims + (size,))``: today's instance method reads the batch
  dimensions from all but the last entry of the input shape and the hidden
  size from ``features``; it splits the key and calls the initializer as
  flax 0.3 did.  ``init_fn`` becomes ``carry_init`` (wrapped in
  ``upgraded_layers.legacy_initializer`` unless it is a flax / JAX
  initializer, which takes today's dtype argument).  In a file that turns
  ``jax_enable_x64`` on, every ``init_fn`` -- the default ``zeros`` written
  out -- is wrapped: flax 0.3 drew the carry in the initializer's default
  dtype (float64 under x64), today's cell would pass its float32
  ``param_dtype``.  ``ConvLSTM``'s
  ``size`` is the carry's shape without the batch dimensions:
  ``ConvLSTMCell(features=size[-1], kernel_size=(1,) * (len(size) - 1),
  parent=None).initialize_carry(rng, batch_dims + size)``.
* A cell built without ``features`` (``nn.LSTMCell()``: flax 0.3 read the
  hidden size from the carry), or a cell class handed to a linen transform
  (``nn.scan(nn.LSTMCell, ...)``, which builds it later) ->
  ``legacy_cells.<Cell>``, today's cell whose ``features`` defaults to the
  carry's size (flaxlegacy.migrate.legacy_cells, plain linen).
* ``nn.ConvLSTM`` (and ``from flax.linen import ConvLSTM``) ->
  ``legacy_cells.ConvLSTM``: today's ``ConvLSTMCell`` under its flax 0.3
  name, so an unnamed cell keeps its auto-name ``ConvLSTM_0`` and the
  parameter tree its paths.
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.rules.early_linen import _common

FEATURELESS = ('LSTMCell', 'GRUCell', 'OptimizedLSTMCell')
CELLS = FEATURELESS + ('ConvLSTM', 'ConvLSTMCell')
SHIPPED = 'flaxlegacy.migrate.legacy_cells'
SHIPPED_INIT = 'flaxlegacy.migrate.upgraded_layers.legacy_initializer'
CARRY_ARGS = ('rng', 'batch_dims', 'size', 'init_fn')


def relevant(code, names):  # pylint: disable=unused-argument
  return any(c in code for c in CELLS)


def _tuple_plus(left, right):
  """``left + right`` (tuple literals merged where both are literals)."""
  if (isinstance(left, cst.Tuple) and isinstance(right, cst.Tuple) and
      not any(isinstance(x, cst.StarredElement)
              for x in list(left.elements) + list(right.elements))):
    elements = [x.with_changes(comma=cst.MaybeSentinel.DEFAULT)
                for x in list(left.elements) + list(right.elements)]
    out = [x.with_changes(comma=cst.Comma(
        whitespace_after=cst.SimpleWhitespace(' ')))
           for x in elements[:-1]] + elements[-1:]
    if len(out) == 1:
      out = [out[0].with_changes(comma=cst.Comma())]
    return cst.Tuple(elements=out)
  return cst.BinaryOperation(
      left=cst.Call(func=cst.Name('tuple'), args=[cst.Arg(value=left)])
      if not isinstance(left, cst.Tuple) else left,
      operator=cst.Add(), right=right)


class Rule(_common.Rule):
  NAME = 'early_linen_carries'

  def _shipped(self, cell):
    self.needed.add(SHIPPED)
    return _common.e(f'legacy_cells.{cell}')

  def _cell_class(self, node):
    cell = self.names.linen(node)
    return cell if cell in CELLS else None

  def leave_Attribute(self, original_node, updated_node):
    if self.names.linen(original_node) == 'ConvLSTM':
      self.rewrote(original_node, 'nn.ConvLSTM -> legacy_cells.ConvLSTM '
                   '(ConvLSTMCell, auto-named ConvLSTM_N as in flax 0.3)',
                   shipped=f'{SHIPPED}.ConvLSTM')
      return self._shipped('ConvLSTM')
    return updated_node

  def leave_ImportFrom(self, original_node, updated_node):
    module = cst_util.dotted(original_node.module) if (
        original_node.module is not None) else None
    if (original_node.relative or module not in (
        'flax.linen', 'flax.linen.recurrent') or
        isinstance(original_node.names, cst.ImportStar)):
      return updated_node
    names = [a for a in updated_node.names
             if cst_util.dotted(a.name) == 'ConvLSTM']
    if not names:
      return updated_node
    alias = names[0]
    self.rewrote(original_node, f'from {module} import ConvLSTM -> '
                 'legacy_cells.ConvLSTM', shipped=f'{SHIPPED}.ConvLSTM')
    rest = [a for a in updated_node.names if a is not alias]
    if not rest:  # in place: the file keeps its line numbers
      return updated_node.with_changes(module=_common.e(SHIPPED))
    local = alias.asname.name.value if alias.asname else 'ConvLSTM'
    self.needed.add(f'{SHIPPED}.ConvLSTM' if local == 'ConvLSTM' else
                    f'{SHIPPED}.ConvLSTM as {local}')
    return updated_node.with_changes(names=_clean_aliases(rest))

  def leave_Call(self, original_node, updated_node):
    f = original_node.func
    if (isinstance(f, cst.Attribute) and f.attr.value == 'initialize_carry'
        and self._cell_class(f.value)):
      return self._initialize_carry(original_node, updated_node,
                                    self._cell_class(f.value))
    cell = self._cell_class(f)
    if cell in FEATURELESS:
      given = _common.positional(original_node)
      if given is None:
        return updated_node
      if not given and not any(a.keyword is not None and
                               a.keyword.value == 'features'
                               for a in original_node.args):
        self.rewrote(original_node, f'{cell}() without features -> '
                     f'legacy_cells.{cell} (hidden size from the carry)',
                     shipped=f'{SHIPPED}.{cell}')
        return updated_node.with_changes(func=self._shipped(cell))
      return updated_node
    if self.names.linen_transform(f) and original_node.args:
      first = original_node.args[0]
      cell = self._cell_class(first.value)
      if first.keyword is None and cell in FEATURELESS:
        self.rewrote(original_node, f'{cell} as a transform target -> '
                     f'legacy_cells.{cell}', shipped=f'{SHIPPED}.{cell}')
        args = list(updated_node.args)
        args[0] = args[0].with_changes(value=self._shipped(cell))
        return updated_node.with_changes(args=args)
    return updated_node

  def _initialize_carry(self, original, updated, cell):
    bound = _common.bind(updated, CARRY_ARGS)
    if bound is None or not {'rng', 'batch_dims', 'size'} <= set(bound):
      self.todo(original, f'{cell}.initialize_carry: call form not '
                'recognised (flax 0.3: rng, batch_dims, size, init_fn)')
      return updated
    rng, dims = bound['rng'].value, bound['batch_dims'].value
    size = bound['size'].value
    cls = updated.func.value
    if cell in ('ConvLSTM', 'ConvLSTMCell'):
      size_src = _source(size) if _pure(size) else None
      if isinstance(size, cst.Tuple) and size.elements and not any(
          isinstance(x, cst.StarredElement) for x in size.elements):
        features = size.elements[-1].value
        ones = len(size.elements) - 1
        kernel = _common.e('(' + ', '.join(['1'] * ones) +
                           (',)' if ones == 1 else ')'))
      elif size_src is not None:
        kernel = _common.e(f'(1,) * (len({size_src}) - 1)')
        if not isinstance(size, (cst.Name, cst.Attribute, cst.Subscript)):
          size_src = f'({size_src})'
        features = _common.e(f'{size_src}[-1]')
      else:
        self.todo(original, f'{cell}.initialize_carry: size is computed by '
                  'a call; today: ConvLSTMCell(features=size[-1], '
                  'kernel_size=(1,) * (len(size) - 1)).initialize_carry(rng, '
                  'batch_dims + size)')
        return updated
      ctor = [cst.Arg(keyword=cst.Name('features'), value=features,
                      equal=_eq()),
              cst.Arg(keyword=cst.Name('kernel_size'), value=kernel,
                      equal=_eq())]
      shape = _tuple_plus(dims, size)
    else:
      ctor = [cst.Arg(keyword=cst.Name('features'), value=size, equal=_eq())]
      shape = _tuple_plus(dims, cst.Tuple(elements=[cst.Element(
          value=size, comma=cst.Comma())]))
    # flax 0.3 called init_fn(key, shape): the carry took the initializer's
    # default dtype, float64 under x64; today's cell passes its
    # param_dtype (float32).  In a file that turns x64 on, the default
    # init_fn (zeros) is written out and every initializer is called as
    # flax 0.3 called it.
    x64 = 'jax_enable_x64' in self.code
    if 'init_fn' not in bound and x64 and cell not in (
        'ConvLSTM', 'ConvLSTMCell'):
      bound['init_fn'] = cst.Arg(value=_common.e(self.names.spell(
          'jax.nn.initializers.zeros', self.needed)))
    if 'init_fn' in bound:
      init = bound['init_fn'].value
      q = self.names.qualify(init.func if isinstance(init, cst.Call)
                             else init) or ''
      if x64 or not q.startswith((
          'flax.linen.initializers.', 'jax.nn.initializers.',
          'flax.linen.zeros', 'flax.linen.ones')):
        self.needed.add('flaxlegacy.migrate.upgraded_layers')
        init = cst.Call(func=_common.e('upgraded_layers.legacy_initializer'),
                        args=[cst.Arg(value=init)])
        self.report.rewritten.append({
            'rule': self.NAME, 'line': self.line(original),
            'what': 'init_fn -> carry_init=legacy_initializer(init_fn)',
            'shipped': SHIPPED_INIT})
      ctor.append(cst.Arg(keyword=cst.Name('carry_init'), value=init,
                          equal=_eq()))
    ctor.append(cst.Arg(keyword=cst.Name('parent'), value=cst.Name('None'),
                        equal=_eq()))
    self.rewrote(original, f'{cell}.initialize_carry(rng, batch_dims, size) '
                 '-> today\'s initialize_carry(rng, input_shape)')
    return cst.Call(
        func=cst.Attribute(value=cst.Call(func=cls,
                                          args=_common.clean_args(ctor)),
                           attr=cst.Name('initialize_carry')),
        args=_common.clean_args([cst.Arg(value=rng), cst.Arg(value=shape)]))


def _pure(node):
  """No calls inside (``x.shape[1:3] + (2,)``): safe to write twice."""
  calls = []

  class V(walk.FastVisitor):

    def visit_Call(self, call):
      calls.append(call)

  node.visit(V())
  return not calls


def _source(node):
  return cst.Module(body=[]).code_for_node(node)


def _eq():
  return cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(''),
                         whitespace_after=cst.SimpleWhitespace(''))




def _clean_aliases(names):
  out = [a.with_changes(comma=cst.Comma(
      whitespace_after=cst.SimpleWhitespace(' '))) for a in names[:-1]]
  return out + [names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
