"""Rule: initializers written for flax 0.3 linen get today's dtype argument.

Today's linen layers call ``kernel_init(key, shape, param_dtype)``; flax
0.3's called ``kernel_init(key, shape)``.  For an initializer passed to a
linen layer (``nn.Dense(4, kernel_init=cplx_init)``, any ``*_init=``):

* defined in the file with exactly two parameters (``def cplx_init(rng,
  shape)``): the definition gets a third, ``dtype=None``, which it ignores
  (flax 0.3 passed none, so its result and dtype are unchanged).  So does
  any definition whose two parameters say it is an initializer (a key:
  ``rng`` / ``key`` / ``prng_key`` ..., then ``shape``), wherever it is
  used: initializers often live in a module of their own
  (``kernel_init=nets.initializers.cplx_init``).  An optional parameter
  changes no existing call;
* a ``functools.partial(..., dtype=...)`` (inline or bound to a name in the
  file): wrapped in ``upgraded_layers.legacy_initializer(...)``, which calls
  it as ``init(key, shape)`` (the layer's ``param_dtype`` would be a second
  dtype; dropping the partial's ``dtype=`` and passing ``param_dtype``
  instead would change the layer's other parameters too).

* an initializer built with ``dtype=`` by jax's / flax's factories
  (``jax.nn.initializers.lecun_normal(dtype=np.float64)``, inline or bound
  to a name in the file) given to a layer call without ``param_dtype=``:
  wrapped the same way (flax 0.3 gave the parameter that dtype; today's
  layer passes its ``param_dtype``, float32, over it).

An initializer imported from elsewhere is left as it is (its signature is
not visible here); the run-time restoration serves it in legacy processes.
"""

import re

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.rules.early_linen import _common

SHIPPED = 'flaxlegacy.migrate.upgraded_layers.legacy_initializer'


def relevant(code, names):  # pylint: disable=unused-argument
  # an initializer keyword (``kernel_init=``), or a def whose parameters
  # may be (key, shape) (``prepare`` decides)
  return bool(_RELEVANT.search(code))


_RELEVANT = re.compile(r'_init\s*=|\bdef\s+\w+\s*\(\s*(?:' + '|'.join(
    ('rng', 'key', 'prng', 'prng_key', 'rng_key', 'rngkey', 'prngkey')) +
                       r')\b[^)]*\bshape\b')


def _two_parameters(fn):
  p = fn.params
  return (len(p.params) == 2 and not p.posonly_params and not p.kwonly_params
          and isinstance(p.star_arg, cst.MaybeSentinel) and p.star_kwarg is None
          and all(x.default is None for x in p.params))


# jax's / flax's initializer factories: a dtype= given to them is stated
FACTORY_MODULES = ('jax.nn.initializers.', 'flax.linen.initializers.',
                   'flax.nn.initializers.')

KEY_NAMES = ('rng', 'key', 'prng', 'prng_key', 'rng_key', 'rngkey', 'prngkey')


def _initializer_signature(fn):
  names = [p.name.value for p in fn.params.params]
  return (_two_parameters(fn) and names[0] in KEY_NAMES and
          names[1] == 'shape')


def _uses_name(fn, name):
  """Whether the body refers to ``name`` (not ``x.name``, not ``name=``)."""
  loads = walk.LoadedNames()
  fn.body.visit(loads)
  return name in loads.names


class Rule(_common.Rule):
  NAME = 'early_linen_initializers'

  def __init__(self, names, report, needed):
    super().__init__(names, report, needed)
    self.defs = {}  # name -> FunctionDef with two parameters
    self.partials = set()  # names bound to partial(..., dtype=...)
    self.used = set()  # two-parameter defs passed as initializers
    self.signed = set()  # ids of defs whose parameters are (key, shape)
    self.stating = set()  # names bound to lecun_normal(dtype=...) and alike

  def _partial_with_dtype(self, node):
    if not isinstance(node, cst.Call):
      return False
    q = self.names.qualify(node.func) or cst_util.dotted(node.func)
    return (q in ('functools.partial', 'partial') and
            any(a.keyword is not None and a.keyword.value == 'dtype'
                for a in node.args))

  def _stating_dtype(self, node):
    if not isinstance(node, cst.Call):
      return False
    q = self.names.qualify(node.func) or ''
    return (q.startswith(FACTORY_MODULES) and
            any(a.keyword is not None and a.keyword.value == 'dtype'
                for a in node.args))

  def prepare(self, module):
    """The facts (definitions, partials, which defs are used), in one walk;
    whether the rewrite can change anything (else ``apply`` skips it)."""
    rule = self
    calls = []

    class Facts(walk.FastVisitor):

      def visit_FunctionDef(self, fn):
        if _two_parameters(fn):
          rule.defs.setdefault(fn.name.value, fn)
        if _initializer_signature(fn):
          rule.signed.add(id(fn))

      def visit_Assign(self, a):
        if rule._partial_with_dtype(a.value):  # pylint: disable=protected-access
          for t in a.targets:
            if isinstance(t.target, cst.Name):
              rule.partials.add(t.target.value)
        if rule._stating_dtype(a.value):  # pylint: disable=protected-access
          for t in a.targets:
            if isinstance(t.target, cst.Name):
              rule.stating.add(t.target.value)

      def visit_Call(self, node):  # the linen layer calls
        layer = rule.names.linen(node.func)
        if layer is not None and layer[:1].isupper():
          calls.append(node)

    module.visit(Facts())
    may_change = bool(self.signed)
    for call in calls:
      for a in call.args:
        if (a.keyword is not None and a.keyword.value.endswith('_init') and
            isinstance(a.value, cst.Name) and a.value.value in self.defs):
          self.used.add(a.value.value)
          may_change = True
        if (a.keyword is not None and a.keyword.value.endswith('_init') and
            (self._partial_with_dtype(a.value) or
             self._stating_dtype(a.value) or (
                 isinstance(a.value, cst.Name) and
                 (a.value.value in self.partials or
                  a.value.value in self.stating)))):
          may_change = True  # (leave_Call; param_dtype= aside: a superset)
    return may_change

  def leave_FunctionDef(self, original_node, updated_node):
    name = original_node.name.value
    if id(original_node) not in self.signed and (
        name not in self.used or self.defs.get(name) is not original_node):
      return updated_node
    param = 'dtype' if not _uses_name(original_node, 'dtype') else (
        'unused_param_dtype')
    params = list(updated_node.params.params)
    params[-1] = params[-1].with_changes(comma=cst.Comma(
        whitespace_after=cst.SimpleWhitespace(' ')))
    params.append(cst.Param(name=cst.Name(param), default=cst.Name('None'),
                            equal=cst.AssignEqual(
                                whitespace_before=cst.SimpleWhitespace(''),
                                whitespace_after=cst.SimpleWhitespace(''))))
    self.rewrote(original_node, f'initializer {name}(rng, shape) -> '
                 f'{name}(rng, shape, {param}=None): today\'s layers pass '
                 'param_dtype')
    return updated_node.with_changes(
        params=updated_node.params.with_changes(params=params))

  def leave_Call(self, original_node, updated_node):
    layer = self.names.linen(original_node.func)
    if layer is None or not layer[:1].isupper():
      return updated_node
    args = []
    changed = False
    param_dtype = any(a.keyword is not None and
                      a.keyword.value == 'param_dtype'
                      for a in original_node.args)
    for orig, new in zip(original_node.args, updated_node.args):
      value = orig.value
      stating = not param_dtype and (self._stating_dtype(value) or (
          isinstance(value, cst.Name) and value.value in self.stating))
      if (orig.keyword is not None and orig.keyword.value.endswith('_init')
          and (stating or self._partial_with_dtype(value) or (
              isinstance(value, cst.Name) and value.value in self.partials))):
        wrapper = self.names.spell('flaxlegacy.migrate.upgraded_layers', set())
        if wrapper == 'flaxlegacy.migrate.upgraded_layers':
          self.needed.add('flaxlegacy.migrate.upgraded_layers')
          wrapper = 'upgraded_layers'
        new = new.with_changes(value=cst.Call(
            func=_common.e(f'{wrapper}.legacy_initializer'),
            args=[cst.Arg(value=new.value)]))
        form = '...(dtype=...)' if stating else 'partial(..., dtype=...)'
        self.rewrote(orig, f'{layer}({orig.keyword.value}={form}) -> '
                     'upgraded_layers.legacy_initializer', shipped=SHIPPED)
        changed = True
      args.append(new)
    return updated_node.with_changes(args=args) if changed else updated_node
