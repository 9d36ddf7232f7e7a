"""What the modules of the value facts share: the abstract values and the
tables of library names they are computed with, ``Values`` (the value map
recording reads while a fixpoint runs) and small source helpers (literal
keys, decorators, gin call names, partials of functions).  Imports no other
module of its package."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import gin_bindings


UNKNOWN = ('unknown',)
# jax transformations whose has_aux=True result holds f's aux (flow keeps
# where: Flow._aux_result)
AUX_WRAPPERS = frozenset(('grad', 'value_and_grad'))
# jax transformations of a function, called with its arguments
SAME_RETURN = frozenset(('jit', 'pmap', 'vmap', 'remat', 'checkpoint',
                         'named_call', 'xmap'))
JAX_WRAPPERS = SAME_RETURN | frozenset(('grad', 'value_and_grad'))
# legacy optimizer methods returning an optimizer (or, optimize, a tuple)
OPTIMIZER_METHODS = frozenset(('create', 'apply_gradient', 'replicate',
                               'unreplicate', 'optimize'))
NONE = ('none',)
OTHER = ('other',)
# a function the facts do not follow: a lambda, a Python builtin; called
# where a legacy module could be, it takes the call as written
FUNCTION = ('function',)
# a value a gin binding gives: a literal (number, string, list, dict, None)
# or an unevaluated reference; never a legacy module or optimizer
GINVAL = ('ginval',)
# gin calls whose result is a GINVAL
GIN_RESULTS = frozenset(('parse_value', 'query_parameter'))
# gin calls that register their first argument as a configurable
GIN_REGISTER = frozenset(('configurable', 'external_configurable',
                          'register'))
# gin calls whose second argument a binding can give
GIN_BIND = frozenset(('bind_parameter', 'constant', 'parse_config'))
# the attributes that only a legacy module (class or partial) has
MODULE_ATTRS = frozenset(('partial', 'init', 'init_by_shape', 'create',
                          'create_by_shape', 'call', 'shared'))
COLLECTION = ('collection',)
MAX_ROUNDS = 12
# library functions that return a value of the same structure (the same
# legacy objects) as one argument: name -> (position, keyword)
SAME_STRUCTURE = {
    'flax.jax_utils.replicate': (0, 'tree'),
    'flax.jax_utils.unreplicate': (0, 'tree'),
    'jax.device_get': (0, 'x'),
    'jax.device_put': (0, 'x'),
    'jax.tree_map': (1, 'tree'),
    'jax.tree_multimap': (1, 'tree'),
    'jax.tree_util.tree_map': (1, 'tree'),
    'jax.tree_util.tree_multimap': (1, 'tree'),
    # the target when there is no checkpoint, else one restored into it
    'flax.training.checkpoints.restore_checkpoint': (1, 'target'),
    # ModelParamTraversal(f).update(fn, inputs): inputs with some leaves
    # replaced (a model for a model, a dict for a dict)
    'flax.optim.ModelParamTraversal().update': (1, 'inputs'),
    'flax.traverse_util.ModelParamTraversal().update': (1, 'inputs'),
}
# classes of flax.optim that are not optimizer definitions
NOT_OPTIMIZER_DEFS = frozenset(('ModelParamTraversal', 'DynamicScale',
                                'OptimizerState'))
# library classes whose instances the facts follow: class -> the value of
# an instance (('ext', name): its methods are ('ext', name.method))
EXT_INSTANCES = {
    'flax.optim.ModelParamTraversal': 'flax.optim.ModelParamTraversal()',
    'flax.traverse_util.ModelParamTraversal':
        'flax.traverse_util.ModelParamTraversal()',
}
# kinds of values a legacy object rewrite cares about
MODULE_KINDS = ('class', 'layer')
TRAIN_STATE = 'train_state.TrainState'  # (flax.training.)


def params(fn):
  """(positional names, keyword-only names, *args name, **kwargs name)."""
  ps = fn.params
  pos = [p.name.value for p in list(ps.posonly_params) + list(ps.params)]
  kwonly = [p.name.value for p in ps.kwonly_params]
  star = ps.star_arg.name.value if isinstance(ps.star_arg, cst.Param) else None
  starstar = ps.star_kwarg.name.value if ps.star_kwarg is not None else None
  return pos, kwonly, star, starstar


# a slot no value is added to: read by the constraints that do something
# else in the last round of a solve (flow.py ``_final``)
FINAL = ('final',)


class Values(dict):
  """``Flow.values`` while a fixpoint runs: with ``reads`` a set, every
  look-up of a slot is recorded in it (the slots one constraint read)."""

  __slots__ = ('reads',)

  def __init__(self, *args):
    super().__init__(*args)
    self.reads = None

  def get(self, key, default=None):
    if self.reads is not None:
      self.reads.add(key)
    return dict.get(self, key, default)

  def __getitem__(self, key):
    if self.reads is not None:
      self.reads.add(key)
    return dict.__getitem__(self, key)

  def __contains__(self, key):
    if self.reads is not None:
      self.reads.add(key)
    return dict.__contains__(self, key)


BUILTINS = frozenset(('len', 'range', 'int', 'float', 'str', 'list', 'dict',
                       'tuple', 'set', 'print', 'isinstance', 'enumerate',
                       'zip', 'min', 'max', 'sum', 'abs', 'sorted', 'any',
                       'all', 'super', 'getattr', 'setattr', 'hasattr',
                       'type', 'object', 'ValueError', 'TypeError',
                       'KeyError', 'NotImplementedError', 'Exception',
                       'property', 'staticmethod', 'classmethod', 'map',
                       'filter', 'iter', 'next', 'reversed', 'round', 'bool',
                       'repr', 'format', 'open', 'id', 'hash', 'vars'))


def parameterized(d):
  """'parameters' / 'named_parameters' for absl's ``@parameterized.X(...)``
  (``from absl.testing import parameterized``), else None."""
  e = d.decorator
  if not isinstance(e, cst.Call):
    return None
  name = cst_util.dotted(e.func) or ''
  head, _, last = name.rpartition('.')
  if head.split('.')[-1] == 'parameterized' and last in (
      'parameters', 'named_parameters'):
    return last
  return None


def decorator_name(d):
  """'gin.configurable' for ``@gin.configurable`` and
  ``@gin.configurable('name', ...)``; '' for other shapes."""
  e = d.decorator
  if isinstance(e, cst.Call):
    e = e.func
  return cst_util.dotted(e) or ''


def is_gin_registration(name):
  return name.split('.')[0] == 'gin' and name.split('.')[-1] in (
      'configurable', 'register')


def gin_call(name, file_facts):
  """The gin function ``name`` (a dotted callee) calls ('bind_parameter',
  'external_configurable', ...), or None."""
  head, _, attr = name.rpartition('.')
  if not head:
    return None
  full = (getattr(file_facts, 'imports', {}) or {}).get(head, head)
  if full.split('.')[0] != 'gin' and head.split('.')[0] != 'gin':
    return None
  if attr in GIN_RESULTS or attr in GIN_REGISTER or attr in GIN_BIND:
    return attr
  return None


def gin_name(decorator, default):
  """The name ``@gin.configurable('name')`` registers (else the def's)."""
  e = decorator.decorator
  if isinstance(e, cst.Call):
    for a in e.args:
      if (a.keyword is None or a.keyword.value == 'name') and not a.star:
        n = literal_key(a.value)
        if n:
          return n
        break
  return default


def binding_target(node):
  """``(configurable, parameter)`` a gin.bind_parameter name names (None
  where not known here)."""
  lit = literal_key(node)
  if lit is not None:
    t = gin_bindings.split_name(lit)
    return t if t is not None else (None, None)
  if isinstance(node, (cst.BinaryOperation, cst.FormattedString)):
    code = cst.Module(body=[]).code_for_node(node)
    return gin_bindings.name_prefix(code), None
  return None, None


def literal_texts(node):
  """The literal strings of ``node`` (a string or a list of them), or
  None."""
  if isinstance(node, (cst.List, cst.Tuple)):
    out = []
    for e in node.elements:
      t = literal_texts(e.value)
      if t is None:
        return None
      out += t
    return out
  if isinstance(node, cst.ConcatenatedString):
    try:
      v = node.evaluated_value
    except Exception:  # pylint: disable=broad-except
      return None
    return [v] if isinstance(v, str) else None
  v = literal_key(node)
  return None if v is None else [v]


def literal_key(node):
  """The string a dict key expression is, or None if not a literal."""
  if isinstance(node, cst.SimpleString):
    try:
      v = node.evaluated_value
    except Exception:  # pylint: disable=broad-except
      return None
    return v if isinstance(v, str) else None
  return None


def subscript_key(sub):
  """The literal string key of ``d['k']``, or None."""
  if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Index):
    return None
  return literal_key(sub.slice[0].slice.value)



def is_property(fn):
  return any(cst_util.dotted(d.decorator) in ('property',
                                               'functools.cached_property')
             for d in fn.decorators)


def partial_of_function(call):
  """``functools.partial(f, k=v, ...)`` binding keywords only (a call of
  the partial passes f's positional arguments as they are)."""
  return (cst_util.dotted(call.func) == 'functools.partial' and call.args
          and call.args[0].keyword is None and not call.args[0].star
          and isinstance(call.args[0].value, (cst.Name, cst.Attribute))
          and all(a.keyword is not None or a.star == '**'
                  for a in call.args[1:]))


def argument(call, pos, keyword):
  """The argument of ``call`` at position ``pos`` or named ``keyword``
  (None if absent or splatted)."""
  i = 0
  for a in call.args:
    if a.star:
      return None
    if a.keyword is None:
      if i == pos:
        return a.value
      i += 1
    elif a.keyword.value == keyword:
      return a.value
  return None


def kept_model(func, file_facts):
  """``nn.Model`` where ``nn`` is flax.linen: an nn.Model an earlier
  upgrade kept (linen has no Model), so a second run decides alike."""
  if not (isinstance(func, cst.Attribute) and func.attr.value == 'Model'):
    return False
  base = cst_util.dotted(func.value)
  return base == 'flax.linen' or file_facts.imports.get(
      base) == 'flax.linen' or carried_model(func, file_facts)


def carried_model(func, file_facts):
  """``legacy_model.Model``: the model an earlier upgrade made carry its
  module (the helper copied into the tree, or flaxlegacy's own)."""
  if not (isinstance(func, cst.Attribute) and func.attr.value == 'Model'):
    return False
  base = cst_util.dotted(func.value) or ''
  full = file_facts.imports.get(base, base)
  return full.split('.')[-1] == 'legacy_helpers' or full in (
      'flaxlegacy.migrate.upgraded',)


def observed_value(v):
  if v[0] == 'observed-optimizer':
    return ('optimizer', ('observed',))
  if v[0] == 'observed-model':
    return ('model', ('observed', v[1]))
  return v


def shape(v):
  """What a contradiction compares: the kind and the class / layer."""
  if v[0] == 'class':
    return ('class', v[1], v[2])
  if v[0] == 'layer':
    return ('layer', v[1])
  return (v[0],)


def describe(v):
  if v[0] == 'class':
    return f'module class {v[2]} ({v[1]})'
  if v[0] == 'layer':
    return f'legacy layer {v[1]}'
  return v[0]


def int_index(sub):
  if len(sub.slice) != 1:
    return None
  s = sub.slice[0].slice
  if isinstance(s, cst.Index) and isinstance(s.value, cst.Integer):
    return int(s.value.value)
  if (isinstance(s, cst.Index) and isinstance(s.value, cst.UnaryOperation)
      and isinstance(s.value.operator, cst.Minus)
      and isinstance(s.value.expression, cst.Integer)):
    return -int(s.value.expression.value)
  return None


def class_level(fn):
  """Whether the def ``fn`` is a ``@classmethod`` / ``@staticmethod``."""
  return any(decorator_name(d) in ('classmethod', 'staticmethod')
             for d in fn.decorators)


def mutate_call(node):
  """``X.mutate()`` (legacy ``Collection.mutate`` / ``Cache.mutate``: no
  arguments)."""
  return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
          and node.func.attr.value == 'mutate' and not node.args)
