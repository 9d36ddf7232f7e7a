"""``flaxlegacy check``: early-linen (flax 0.3.x) patterns a codebase uses.

Code written for flax 0.3.x linen trips on today's linen in ways a table of
names cannot show: an initializer without a ``dtype`` parameter, a cell
built without ``features``, ``initialize_carry`` called as the static
method, ``variables.unfreeze()``...  Each pattern found is reported with
the restoration that serves it in legacy processes (``_names.BEHAVIOURS``
/ ``_names.POLICIES``, flaxlegacy/compat/early_linen.py) and what to write
today; patterns flaxlegacy does not serve are reported as unsupported.

Like the rest of ``check``, the source is parsed with ``ast``, never run.
Only direct, visible forms are found (a layer class named through
``flax.linen``, an initializer defined or bound in the same file).
"""

import ast

from flaxlegacy import _names
from flaxlegacy.migrate.check import dotted_name  # pylint: disable=g-importing-member

# Cells of flax 0.3 whose hidden size came from the carry.
FEATURELESS_CELLS = ('LSTMCell', 'GRUCell', 'OptimizedLSTMCell')
CARRY_CELLS = FEATURELESS_CELLS + ('ConvLSTM', 'ConvLSTMCell')
SERVED_BY = 'served in legacy processes'

# pattern -> (restoration, what to write today)
PATTERNS = {
    'initializer without dtype': (
        'initializers', "give it a dtype parameter: def init(key, shape, "
        "dtype=None) (flaxlegacy upgrade does)"),
    'initializer partial binding dtype': (
        'initializers', 'drop dtype= from the partial (flaxlegacy upgrade '
        'wraps it so the layer\'s param_dtype is ignored)'),
    'initializer stating its dtype': (
        'initializers', 'give the layer the same param_dtype= (today\'s '
        'layers pass their param_dtype, float32 by default, over the '
        'initializer\'s; flaxlegacy upgrade wraps the initializer)'),
    'initialize_carry(rng, batch_dims, size)': (
        'carries', 'Cell(features=size).initialize_carry(rng, batch_dims + '
        '(in_features,)) (flaxlegacy upgrade rewrites it)'),
    'cell without features': (
        'carries', 'Cell(features=...) (or flaxlegacy.migrate.legacy_cells, '
        'hidden size from the carry)'),
    'param override without param_dtype': (
        'param_override', 'def param(self, name, init_fn, *init_args, '
        '**init_kwargs)'),
    'FrozenDict.unfreeze()': (
        'frozendict', 'flax.core.unfreeze(variables)'),
    'FrozenDict.pop(key) -> (rest, value)': (
        'frozendict', 'rest, value = flax.core.pop(variables, key)'),
    'FrozenDict.copy(add_or_replace)': (
        'frozendict', 'flax.core.copy(variables, add_or_replace)'),
    'attention mask as third positional argument': (
        'attention', 'attention(inputs_q, inputs_kv, mask=mask)'),
    'EarlyStopping.update -> (has_improved, state)': (
        'early_stopping', 'state = state.update(metric); '
        'state.has_improved'),
    'numpy.arange(one-element array)': (
        'scalars', 'np.arange(int(x[0])) or x.item()'),
    'jax.remat(concrete=False)': (
        'arguments', 'drop concrete=False (it was the default)'),
    'jnp.array(negative integer, unsigned dtype)': (
        'arguments', 'jnp.array(np.array(-1).astype(np.uint32)) or the '
        'wrapped value (4294967295)'),
    # (in files with another flax 0.3 pattern or a legacy import)
    'linen parameter keys': (
        'linen_keys', 'the same seed gives other initial numbers on flax '
        '>= 0.4; code written for flax >= 0.4 sets '
        'FLAXLEGACY_LINEN_KEYS=modern'),
}


# The flax release whose default change the policy undoes.
_POLICY_CHANGED = {'frozendict': 'flax 0.7.1'}


_INITIALIZER_MODULES = ('jax.nn.initializers.', 'flax.linen.initializers.',
                        'flax.nn.initializers.')
_REMAT = ('jax.remat', 'jax.checkpoint', 'jax.ad_checkpoint.checkpoint')
_UNSIGNED = tuple(f'{m}.uint{b}' for m in ('jax.numpy', 'numpy')
                  for b in (8, 16, 32, 64))


def _negative_int(node):
  return (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and
          isinstance(node.operand, ast.Constant) and
          isinstance(node.operand.value, int))


class _Scanner(ast.NodeVisitor):
  """Collects (line, col, pattern, detail) of early-linen patterns."""

  def __init__(self, bindings):
    self.bindings = bindings  # local name -> qualified name (check's scan)
    self.defs = {}  # module-level / nested function name -> FunctionDef
    self.partials_with_dtype = set()  # names bound to partial(..., dtype=)
    self.stating_dtype = set()  # names bound to lecun_normal(dtype=...)
    self.found = []
    self.unsupported = []  # (line, col, name, why)
    self.linen_import = None  # first import of flax.linen
    self.early_stopping = False
    self._attention_attrs = []  # stack per class: self.<attr> of attention

  # -- names --
  def qualify(self, node):
    dotted = dotted_name(node)
    if dotted is None:
      return None
    root, _, rest = dotted.partition('.')
    if root not in self.bindings:
      return None
    return self.bindings[root] + ('.' + rest if rest else '')

  def linen(self, node):
    """'Dense' for a flax.linen name (``nn.Dense``, ``Dense``), else None."""
    q = self.qualify(node)
    for prefix in ('flax.linen.', 'flax.linen.recurrent.',
                   'flax.linen.attention.', 'flax.linen.linear.'):
      if q and q.startswith(prefix) and '.' not in q[len(prefix):]:
        return q[len(prefix):]
    return None

  def add(self, node, pattern, detail=''):
    self.found.append((node.lineno, node.col_offset + 1, pattern, detail))

  def visit_Import(self, node):  # pylint: disable=invalid-name
    for alias in node.names:
      self._note_import(node, alias.name)

  def visit_ImportFrom(self, node):  # pylint: disable=invalid-name
    if node.level or not node.module:
      return
    for alias in node.names:
      self._note_import(node, node.module + '.' + alias.name)

  def _note_import(self, node, full):
    if (full == 'flax.linen' or full.startswith('flax.linen.')) and (
        self.linen_import is None):
      self.linen_import = node
    if full.startswith('flax.training.early_stopping'):
      self.early_stopping = True

  # -- definitions --
  def visit_FunctionDef(self, node):  # pylint: disable=invalid-name
    self.defs.setdefault(node.name, node)
    self.generic_visit(node)

  def visit_Assign(self, node):  # pylint: disable=invalid-name
    if isinstance(node.value, ast.Call) and self._partial_with_dtype(
        node.value):
      for t in node.targets:
        if isinstance(t, ast.Name):
          self.partials_with_dtype.add(t.id)
    if isinstance(node.value, ast.Call) and self._stating_dtype(node.value):
      for t in node.targets:
        if isinstance(t, ast.Name):
          self.stating_dtype.add(t.id)
    if (len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple)
        and len(node.targets[0].elts) == 2 and
        isinstance(node.value, ast.Call) and
        isinstance(node.value.func, ast.Attribute)):
      method = node.value.func.attr
      call = node.value
      if (method == 'pop' and len(call.args) == 1 and not call.keywords and
          isinstance(call.args[0], ast.Constant) and
          isinstance(call.args[0].value, str)):
        self.add(node, 'FrozenDict.pop(key) -> (rest, value)')
      elif method == 'update' and self.early_stopping:
        self.add(node, 'EarlyStopping.update -> (has_improved, state)')
    self.generic_visit(node)

  def visit_ClassDef(self, node):  # pylint: disable=invalid-name
    bases = [self.linen(b) for b in node.bases]
    if any(b and b[:1].isupper() and b != 'Module' for b in bases):
      for stmt in node.body:
        if (isinstance(stmt, ast.FunctionDef) and stmt.name == 'param' and
            stmt.args.vararg is None and stmt.args.kwarg is None and
            len(stmt.args.args) + len(stmt.args.posonlyargs) <= 4):
          self.add(stmt, 'param override without param_dtype',
                   f'{node.name}.param')
    # self.<attr> = nn.MultiHeadDotProductAttention(...) in setup
    attrs = set()
    self._attention_attrs.append(attrs)
    for stmt in ast.walk(node):
      if isinstance(stmt, ast.Assign):
        for t in stmt.targets:
          if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
              and t.value.id == 'self' and isinstance(stmt.value, ast.Call)
              and self.linen(stmt.value.func) ==
              'MultiHeadDotProductAttention'):
            attrs.add(t.attr)
    self.generic_visit(node)
    self._attention_attrs.pop()

  # -- calls --
  def _partial_with_dtype(self, call):
    q = self.qualify(call.func) or dotted_name(call.func)
    return (q in ('functools.partial', 'partial') and
            any(k.arg == 'dtype' for k in call.keywords))

  def _stating_dtype(self, call):
    """``jax.nn.initializers.lecun_normal(dtype=...)`` and the like."""
    q = self.qualify(call.func) or ''
    return (q.startswith(_INITIALIZER_MODULES) and
            any(k.arg == 'dtype' for k in call.keywords))

  def _two_argument_def(self, node):
    if not isinstance(node, ast.Name) or node.id not in self.defs:
      return False
    args = self.defs[node.id].args
    names = [a.arg for a in args.posonlyargs + args.args]
    return (args.vararg is None and args.kwarg is None and
            len(names) == 2 and 'dtype' not in names and
            not args.kwonlyargs)

  def visit_Call(self, node):  # pylint: disable=invalid-name
    func = node.func
    layer = self.linen(func)
    if layer is not None and layer[:1].isupper():
      for k in node.keywords:
        if not (k.arg or '').endswith('_init'):
          continue
        if self._two_argument_def(k.value):
          self.add(k.value, 'initializer without dtype',
                   f'{layer}({k.arg}={k.value.id})')
        elif (isinstance(k.value, ast.Call) and
              self._partial_with_dtype(k.value)) or (
                  isinstance(k.value, ast.Name) and
                  k.value.id in self.partials_with_dtype):
          self.add(k.value, 'initializer partial binding dtype',
                   f'{layer}({k.arg}=partial(..., dtype=...))')
        elif ((isinstance(k.value, ast.Call) and
               self._stating_dtype(k.value)) or (
                   isinstance(k.value, ast.Name) and
                   k.value.id in self.stating_dtype)) and not any(
                       p.arg == 'param_dtype' for p in node.keywords):
          self.add(k.value, 'initializer stating its dtype',
                   f'{layer}({k.arg}=...(dtype=...))')
      if (layer in FEATURELESS_CELLS and not node.args and
          not any(k.arg in ('features', None) for k in node.keywords)):
        self.add(node, 'cell without features', f'{layer}()')
    if isinstance(func, ast.Attribute):
      cell = self.linen(func.value)
      if (func.attr == 'initialize_carry' and cell in CARRY_CELLS and
          len(node.args) + len(node.keywords) >= 3):
        self.add(node, 'initialize_carry(rng, batch_dims, size)',
                 f'{cell}.initialize_carry')
      if func.attr == 'unfreeze' and not node.args and not node.keywords:
        self.add(node, 'FrozenDict.unfreeze()')
      if (func.attr == 'copy' and len(node.args) == 1 and
          isinstance(node.args[0], ast.Dict)) or (
              func.attr == 'copy' and any(
                  k.arg == 'add_or_replace' for k in node.keywords)):
        self.add(node, 'FrozenDict.copy(add_or_replace)')
      if (isinstance(func.value, ast.Name) and func.value.id == 'self' and
          self._attention_attrs and func.attr in self._attention_attrs[-1]
          and len(node.args) >= 3):
        self.add(node, 'attention mask as third positional argument',
                 f'self.{func.attr}(inputs_q, inputs_kv, mask)')
    if (isinstance(func, ast.Call) and
        self.linen(func.func) == 'MultiHeadDotProductAttention' and
        len(node.args) >= 3):
      self.add(node, 'attention mask as third positional argument',
               'MultiHeadDotProductAttention(...)(inputs_q, inputs_kv, mask)')
    remat = self.qualify(func)
    if remat in ('functools.partial', 'partial') and node.args:
      remat = self.qualify(node.args[0].value if isinstance(
          node.args[0], ast.Starred) else node.args[0])
    if remat in _REMAT:
      for k in node.keywords:
        if k.arg == 'concrete':
          if isinstance(k.value, ast.Constant) and k.value.value is True:
            self.unsupported.append(
                (node.lineno, node.col_offset + 1, 'jax.remat(concrete=True)',
                 'removed in jax 0.10.0: Python control flow on traced '
                 'values; today: static_argnums'))
          else:
            self.add(node, 'jax.remat(concrete=False)')
    if (self.qualify(func) in ('jax.numpy.array', 'jax.numpy.asarray') and
        node.args and _negative_int(node.args[0]) and
        any(self.qualify(d) in _UNSIGNED for d in
            node.args[1:2] + [k.value for k in node.keywords
                              if k.arg == 'dtype'])):
      self.add(node, 'jnp.array(negative integer, unsigned dtype)')
    if (self.qualify(func) == 'numpy.arange' and node.args and
        isinstance(node.args[0], ast.Call) and
        self.qualify(node.args[0].func) in ('numpy.array', 'numpy.asarray')
        and node.args[0].args and
        isinstance(node.args[0].args[0], (ast.List, ast.Tuple)) and
        len(node.args[0].args[0].elts) == 1):
      self.add(node, 'numpy.arange(one-element array)')
    self.generic_visit(node)


def scan_tree(tree, bindings):
  """([(line, col, pattern, detail)], [(line, col, name, why)]): the patterns
  served and those not, of one parsed file whose imports bind ``bindings``
  (local name -> qualified name, from check's scan)."""
  scanner = _Scanner(bindings)
  scanner.visit(tree)
  found = list(scanner.found)
  # Parameter keys: only where the file is early linen for sure (a flax 0.3
  # pattern above) or runs in a legacy process (it imports the legacy API);
  # today's linen code alone says nothing about flax 0.3.
  legacy = any(_names.legacy_root(q) for q in bindings.values())
  # (an initializer stating its dtype is also a latent mistake of code
  # written for today's linen: no evidence of flax 0.3)
  if scanner.linen_import is not None and (
      legacy or any(PATTERNS[f[2]][0] not in ('scalars', 'arguments') and
                    f[2] != 'initializer stating its dtype' for f in found)):
    found.append((scanner.linen_import.lineno,
                  scanner.linen_import.col_offset + 1,
                  'linen parameter keys', ''))
  return found, scanner.unsupported


def findings(tree, bindings, path, finding_cls, supported, unsupported):
  """The early-linen findings of one file, as ``check.Finding`` objects."""
  rows = {r.name: r for r in _names.BEHAVIOURS + _names.POLICIES}
  out = []
  seen = set()
  found, refused = scan_tree(tree, bindings)
  for line, col, name, why in refused:
    out.append(finding_cls(path, line, col, name, unsupported, '', '', why))
  for line, col, pattern, detail in sorted(found):
    if (line, pattern) in seen:
      continue
    seen.add((line, pattern))
    restoration, modern = PATTERNS[pattern]
    row = rows[restoration]
    changed = getattr(row, 'changed', None) or _POLICY_CHANGED[restoration]
    kind, legacy = {'scalars': ('legacy NumPy', 'NumPy 1.x'),
                    'arguments': ('legacy JAX', 'legacy JAX')}.get(
                        restoration, ('early linen', 'flax 0.3'))
    name = f'{kind}: {pattern}'
    if detail:
      name += f' [{detail}]'
    out.append(finding_cls(
        path, line, col, name, supported, f'changed in {changed}', modern,
        f'{legacy} behaviour {SERVED_BY} ({restoration}; {row.env}=modern '
        'turns it off)'))
  return out
