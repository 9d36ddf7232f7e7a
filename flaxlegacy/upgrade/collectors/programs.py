"""Program-level facts: models, optimizers, loss functions, per file.

(rules/programs.py rewrites with them.)  ``collect_facts`` records on the
FileFacts the module classes models are built of, loss functions and the
optimizers they differentiate, functions building ``nn.Model`` values or
optimizers, user ``OptimizerDef`` classes and their translation plans
(collectors/optimizer_defs.py), and whether the file has program words at
all.  The optimizer tables live here: which legacy optimizers the rules
rewrite (``TX_RULES``) is a fact other passes read (rules/model_uses.py).
"""

import re

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.collectors import optimizer_defs


LIFECYCLE = ('init', 'init_by_shape', 'create', 'create_by_shape')


# legacy optimizer -> (optax source template, legacy keyword -> (optax
# keyword, legacy default where it is not optax's, else None)).  Only
# optimizers whose optax arithmetic is legacy's.
OPTAX = {
    'GradientDescent': ('optax.sgd', {'learning_rate': ('learning_rate',
                                                        None)}),
    'Momentum': ('optax.sgd', {'learning_rate': ('learning_rate', None),
                               'beta': ('momentum', '0.9'),
                               'weight_decay': ('weight_decay', None),
                               'nesterov': ('nesterov', None)}),
    # legacy weight decay is decoupled and scaled by the learning rate, as
    # optax.adamw's (the rewrite picks adamw when it is not zero)
    'Adam': ('optax.adam', {'learning_rate': ('learning_rate', None),
                            'beta1': ('b1', None), 'beta2': ('b2', None),
                            'eps': ('eps', None),
                            'weight_decay': ('weight_decay', None)}),
    # optax.rmsprop with eps outside the root and a zero initial scale
    'RMSProp': ('optax.rmsprop', {'learning_rate': ('learning_rate', None),
                                  'beta2': ('decay', None),
                                  'eps': ('eps', None),
                                  'centered': ('centered', None)}),
}


# fixed optax arguments that make the optax function the legacy rule
OPTAX_FIXED = {'RMSProp': ('initial_scale=0.0', 'eps_in_sqrt=False')}


# legacy optimizers whose numbers plain optax does not reproduce ->
# (constructor of flaxlegacy.migrate.legacy_optax (plain optax, importable
# with FLAXLEGACY=off), its parameters: the legacy constructor's, in order)
LEGACY_OPTAX = {
    'Adagrad': ('adagrad', ('learning_rate', 'eps')),
    'LAMB': ('lamb', ('learning_rate', 'beta1', 'beta2', 'weight_decay',
                      'eps')),
    'LARS': ('lars', ('learning_rate', 'beta', 'weight_decay',
                      'trust_coefficient', 'eps', 'nesterov')),
    'AdaBelief': ('adabelief', ('learning_rate', 'beta1', 'beta2', 'eps',
                                'weight_decay')),
    'Adadelta': ('adadelta', ('learning_rate', 'rho', 'eps', 'weight_decay')),
    'Adafactor': ('adafactor', (
        'learning_rate', 'factored', 'multiply_by_parameter_scale', 'beta1',
        'decay_rate', 'step_offset', 'clipping_threshold',
        'weight_decay_rate', 'min_dim_size_to_factor', 'epsilon1',
        'epsilon2', 'dtype_momentum')),
}


MOMENTUM_WITH_DECAY = ('momentum', ('learning_rate', 'beta', 'weight_decay',
                                    'nesterov'))


TX_RULES = frozenset(OPTAX) | frozenset(LEGACY_OPTAX) | {'MultiOptimizer'}


class _Scan(walk.FastVisitor):
  """Per-file program facts (stored on the FileFacts)."""

  def __init__(self, f, code_of):
    self.f = f
    self.code_of = code_of
    f.model_classes = set()  # legacy module expressions models are built of
    f.loss_fns = {}  # loss function name -> source of its optimizer
    self.partial_vars = {}
    self.grad_fns = {}  # name -> loss function it differentiates
    f.optdef_functions = set()
    f.model_builders = {}  # function -> (params, module expr src, index)
    f.model_site_names = {}  # id(nn.Model call) -> the class it names
    f.per_step_lr = False
    # the names flax.optim is spelled by here: ``optim`` of ``from flax
    # import optim``, and ``flax.optim`` spelled out after ``import flax``
    f.optim_locals = {l for l, full in f.imports.items()
                      if full in ('flax.optim',)} | {
                          f'{l}.optim' for l, full in f.imports.items()
                          if full == 'flax'}
    f.user_optdefs = set()  # classes derived from optim.OptimizerDef & co
    # user optimizer definitions: class -> optimizer_defs.Plan (translated)
    # or why not; and every class's bases (last name), for subclasses
    f.optdef_plans = {}
    f.class_bases = {}
    self._classes = 0

  def _is_optimizer_def(self, name):
    """Whether a base's dotted name is legacy ``OptimizerDef`` itself."""
    return qualified(name, self.f.imports) in (
        'flax.optim.OptimizerDef', 'flax.optim.base.OptimizerDef')

  def visit_ClassDef(self, node):
    self._classes += 1
    names = []
    for b in node.bases:
      name = cst_util.dotted(b.value) if isinstance(
          b.value, (cst.Name, cst.Attribute)) else None
      names.append(name)
      head, _, attr = (name or '').rpartition('.')
      full = self.f.imports.get(name or '', '')
      if (head in self.f.optim_locals and (attr == 'OptimizerDef'
                                            or attr in TX_RULES)) or (
          full.startswith('flax.optim.')) or (name in self.f.user_optdefs) or (
              qualified(name, self.f.imports).startswith('flax.optim.')):
        self.f.user_optdefs.add(node.name.value)
    self.f.class_bases[node.name.value] = [
        n.split('.')[-1] for n in names if n]
    if node.name.value in self.f.user_optdefs:
      if self._classes > 1 or getattr(self, '_fn', None):
        why = 'it is defined inside a function or class'
      else:
        why = optimizer_defs.analyse(
            node, self.code_of, len(names) == 1
            and self._is_optimizer_def(names[0]), self.f.top_names)
      self.f.optdef_plans[node.name.value] = why

  def leave_ClassDef(self, node):
    self._classes -= 1

  def visit_Assign(self, node):
    v = node.value
    if getattr(self, '_locals', None) and len(node.targets) == 1 and (
        isinstance(node.targets[0].target, cst.Name)):
      self._locals[-1][0][node.targets[0].target.value] = v
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Name)
        and isinstance(v, cst.Call) and v.args
        and isinstance(v.args[0].value, cst.Name)
        and (cst_util.dotted(v.func) or '').split('.')[-1] in (
            'grad', 'value_and_grad')):
      self.grad_fns[node.targets[0].target.value] = v.args[0].value.value
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Name)
        and isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute)
        and v.func.attr.value == 'partial'):
      self.partial_vars[node.targets[0].target.value] = class_name(v)
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Name)
        and isinstance(v, cst.Call) and isinstance(v.func, cst.Name)
        and v.func.value in self.f.partial_helpers):
      self.partial_vars[node.targets[0].target.value] = (
          self.f.partial_helpers[v.func.value].split('.')[-1])

  def visit_FunctionDef(self, node):
    self._fn = getattr(self, '_fn', [])
    self._fn.append(node.name.value)
    self._locals = getattr(self, '_locals', [])
    ps = node.params
    self._locals.append(({}, [p.name.value for p in list(ps.posonly_params)
                              + list(ps.params) + list(ps.kwonly_params)]))

  def leave_FunctionDef(self, node):
    self._fn.pop()
    self._locals.pop()

  def _model_builder(self, v):
    """A function returning ``nn.Model(E, params)`` (alone or first in a
    tuple): its module expression E in terms of the parameters."""
    if len(self._fn) != 1:
      return
    index = None
    if isinstance(v, cst.Tuple) and v.elements:
      v, index = v.elements[0].value, 0
    if not (isinstance(v, cst.Call) and cst_util.legacy_attr(
        v.func, self.f.nn_prefixes) == 'Model' and v.args):
      return
    assigns, params = self._locals[-1]
    e = v.args[0].value
    return self._record_builder(e, assigns, params, index)

  def _model_builder_name(self, v):
    """``return model[, state]`` where ``model = nn.Model(E, params)``."""
    if len(self._fn) != 1:
      return
    index = None
    if isinstance(v, cst.Tuple) and v.elements:
      v, index = v.elements[0].value, 0
    assigns, params = self._locals[-1]
    if not isinstance(v, cst.Name) or v.value not in assigns:
      return
    m = assigns[v.value]
    if not (isinstance(m, cst.Call) and cst_util.legacy_attr(
        m.func, self.f.nn_prefixes) == 'Model' and m.args):
      return
    self._record_builder(m.args[0].value, assigns, params, index)

  def _record_builder(self, e, assigns, params, index):
    if isinstance(e, cst.Name) and e.value in assigns:
      e = assigns[e.value]
    src = self.code_of(e)
    for name in assigns:
      if name not in params and re.search(rf'(?<![.\w]){name}\b', src):
        return  # depends on another local value
    self.f.model_builders[self._fn[-1]] = (params, src, index)

  def visit_Return(self, node):
    v = node.value
    if getattr(self, '_fn', None) and v is not None:
      self._model_builder(v)
      self._model_builder_name(v)
    if (getattr(self, '_fn', None) and isinstance(v, cst.Call)
        and isinstance(v.func, (cst.Name, cst.Attribute))):
      name = cst_util.dotted(v.func) or ''
      head, _, attr = name.rpartition('.')
      if head in self.f.optim_locals and attr in TX_RULES:
        self.f.optdef_functions.add(self._fn[-1])

  def visit_Call(self, node):
    fn = node.func
    if isinstance(fn, cst.Attribute):
      a = fn.attr.value
      if a in LIFECYCLE:
        name = class_name(fn.value)
        self.f.model_classes.add(self.partial_vars.get(name, name))
      if a in ('apply_gradient', 'optimize'):
        if any(x.keyword is not None and x.keyword.value == 'learning_rate'
               for x in node.args):
          self.f.per_step_lr = True
      if a in ('optimize', 'compute_gradient', 'compute_gradients') and (
          node.args):
        v = node.args[0].value
        if isinstance(v, cst.Name):
          self.f.loss_fns[v.value] = self.code_of(fn.value)
      if (cst_util.legacy_attr(fn, self.f.nn_prefixes) == 'Model'
          and node.args):
        self.f.model_classes.add(class_name(node.args[0].value))
        # the class the source names for its module (a local bound to a
        # partial: its class), for objects.model_carried
        name = class_name(node.args[0].value)
        self.f.model_site_names[id(node)] = self.partial_vars.get(name, name)
    # grad_fn = jax.value_and_grad(f, ...) ... grad_fn(x.target)
    if (isinstance(fn, cst.Name) and fn.value in self.grad_fns and node.args
        and isinstance(node.args[0].value, cst.Attribute)
        and node.args[0].value.attr.value == 'target'):
      self.f.loss_fns[self.grad_fns[fn.value]] = self.code_of(
          node.args[0].value.value)
    # jax.grad(f)(x.target) / jax.value_and_grad(f, ...)(x.target)
    if (isinstance(fn, cst.Call) and node.args
        and isinstance(node.args[0].value, cst.Attribute)
        and node.args[0].value.attr.value == 'target'):
      name = cst_util.dotted(fn.func) or ''
      if name.split('.')[-1] in ('grad', 'value_and_grad') and fn.args:
        v = fn.args[0].value
        if isinstance(v, cst.Name):
          self.f.loss_fns[v.value] = self.code_of(node.args[0].value.value)


def qualified(name, imports):
  """``flax.optim.OptimizerDef`` for ``flax.optim.OptimizerDef`` under
  ``import flax``, ``optim.OptimizerDef`` under ``from flax import optim``
  ...: a dotted name through the file's imports ('' if none)."""
  head, _, rest = (name or '').partition('.')
  full = imports.get(head)
  if not full:
    return ''
  return full + ('.' + rest if rest else '')


def class_name(expr):
  """'CNN' for ``CNN`` / ``CNN.partial(...)`` / ``models.CNN``."""
  if (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)
      and expr.func.attr.value == 'partial'):
    expr = expr.func.value
  name = cst_util.dotted(expr) if isinstance(
      expr, (cst.Name, cst.Attribute)) else None
  return name.split('.')[-1] if name else None


PROGRAM_WORDS = re.compile(
    r'\boptim\b|\.target\b|\.state\.step\b|apply_gradient|\.optimize\(|'
    r'init_by_shape|create_by_shape|\.create\(|\.init\(|stateful|'
    r'stochastic|nn\.(?:base\.)?Model|restore_checkpoint|replicate\(\)|'
    r'\.mutate\(\)|\.as_dict\(\)')


def _top_names(module):
  """Names a module binds at its top level."""
  names = set()
  for stmt in module.body:
    if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
      names.add(stmt.name.value)
    elif isinstance(stmt, cst.SimpleStatementLine):
      for small in stmt.body:
        if isinstance(small, cst.Assign):
          names.update(t.target.value for t in small.targets
                       if isinstance(t.target, cst.Name))
        elif isinstance(small, (cst.Import, cst.ImportFrom)) and not (
            isinstance(small.names, cst.ImportStar)):
          for a in small.names:
            names.add(a.asname.name.value if a.asname and isinstance(
                a.asname.name, cst.Name) else (cst_util.dotted(
                    a.name) or '').split('.')[0])
  return names


def collect_facts(file_facts, module, code_of, code=None):
  file_facts.top_names = _top_names(module)
  module.visit(_Scan(file_facts, code_of))
  file_facts.program_words = bool(PROGRAM_WORDS.search(
      module.code if code is None else code))
