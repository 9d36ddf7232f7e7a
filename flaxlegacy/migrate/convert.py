"""``flaxlegacy convert CKPT OUT``: a legacy checkpoint as a linen TrainState.

A legacy checkpoint holds an ``Optimizer`` (``{'target', 'state'}``), alone
or inside a container (a ``flax.struct`` TrainState with ``step``,
``optimizer``, ``model_state``; a tuple ...).  The conversion writes a
checkpoint of a ``flax.training.train_state.TrainState`` that today's code
restores with ``flax.training.checkpoints.restore_checkpoint(OUT, target)``
or with Orbax:

==========================================  =================================
legacy (state dict path)                    converted TrainState
==========================================  =================================
``optimizer/target/params/...``             ``params/...`` (linen names)
``optimizer/state/param_states/params/..``  ``opt_state`` of the optax
                                            transformation (see ``MODERN``)
``optimizer/state/step`` (or ``step``)      ``step``
``model_state`` (``'/a/b' -> {mean,var}``)  ``batch_stats/a/b/{mean,var}``
==========================================  =================================

Module names are renamed from legacy auto-naming (``Conv_0, Conv_1,
Dense_2``) to linen's per-class numbering (``Conv_0, Conv_1, Dense_0``);
``--names legacy`` keeps them; ``--rename-map DST/upgrade.json --root-class
Net`` renames with the exact map of ``flaxlegacy upgrade --names linen``
instead (``names.rename_params``: explicit names such as ``block_3`` stay),
so the checkpoint loads into the upgraded module.  Which legacy optimizer
wrote the checkpoint
is read from its per-parameter state fields, or given with ``--optimizer``
where fields are shared (Momentum/LARS, Adam/LAMB/AdaBelief).  The
optimizer state is written for the modern optax transformation of the
``MODERN`` table (``optax.sgd(lr, momentum=beta)`` for ``Momentum`` ...), or
with ``--legacy-numerics`` for ``optimizer_def.as_optax()`` (legacy
arithmetic, restorable where flaxlegacy is installed).
"""

import ast
import os
import sys

from absl import logging

# Heavy imports (jax, flax, optax) happen in the functions, so that
# `flaxlegacy --help` stays fast.

# Per-parameter state fields -> the legacy optimizers that have them.
OPTIMIZERS_BY_FIELDS = {
    (): ('GradientDescent',),
    ('momentum',): ('Momentum', 'LARS'),
    ('grad_ema', 'grad_sq_ema'): ('Adam', 'LAMB', 'AdaBelief'),
    ('G',): ('Adagrad',),
    ('mg', 'v'): ('RMSProp',),
    ('v',): ('RMSProp',),  # v0.2-v0.2.2 layout
    ('m', 'v', 'v_col', 'v_row'): ('Adafactor',),
    ('acc_delta', 'sq_avg'): ('Adadelta',),
}


class ConversionError(ValueError):
  """A legacy checkpoint that cannot be converted (says why)."""


# --- the modern optax equivalents ---------------------------------------------


def _lr(hp):
  # The learning rate does not shape the optimizer state; legacy code often
  # passed it per call instead of at construction.
  return 1.0 if hp.learning_rate is None else hp.learning_rate


def _with_decay(wd, tx):
  import optax  # pylint: disable=g-import-not-at-top
  return optax.chain(optax.add_decayed_weights(wd), tx) if wd else tx


def _modern_table():
  import optax  # pylint: disable=g-import-not-at-top
  return {
      'GradientDescent': lambda hp, d: optax.sgd(_lr(hp)),
      'Momentum': lambda hp, d: _with_decay(hp.weight_decay, optax.sgd(
          _lr(hp), momentum=hp.beta, nesterov=hp.nesterov)),
      'Adam': lambda hp, d: (
          optax.adamw(_lr(hp), b1=hp.beta1, b2=hp.beta2, eps=hp.eps,
                      weight_decay=hp.weight_decay) if hp.weight_decay else
          optax.adam(_lr(hp), b1=hp.beta1, b2=hp.beta2, eps=hp.eps)),
      'Adagrad': lambda hp, d: optax.adagrad(
          _lr(hp), initial_accumulator_value=0., eps=hp.eps),
      'RMSProp': lambda hp, d: optax.rmsprop(
          _lr(hp), decay=hp.beta2, eps=hp.eps, centered=hp.centered),
      'LAMB': lambda hp, d: optax.lamb(
          _lr(hp), b1=hp.beta1, b2=hp.beta2, eps=hp.eps,
          weight_decay=hp.weight_decay),
      'LARS': lambda hp, d: optax.lars(
          _lr(hp), weight_decay=hp.weight_decay,
          trust_coefficient=hp.trust_coefficient, eps=hp.eps,
          momentum=hp.beta, nesterov=hp.nesterov),
      'Adafactor': lambda hp, d: optax.adafactor(
          hp.learning_rate, min_dim_size_to_factor=hp.min_dim_size_to_factor,
          decay_rate=hp.decay_rate, decay_offset=hp.step_offset,
          multiply_by_parameter_scale=hp.multiply_by_parameter_scale,
          clipping_threshold=hp.clipping_threshold, momentum=hp.beta1,
          dtype_momentum=d.dtype_momentum,
          weight_decay_rate=hp.weight_decay_rate, eps=hp.epsilon1,
          factored=hp.factored),
      'Adadelta': lambda hp, d: optax.adadelta(
          _lr(hp), rho=hp.rho, eps=hp.eps, weight_decay=hp.weight_decay),
      'AdaBelief': lambda hp, d: _with_decay(hp.weight_decay, optax.adabelief(
          _lr(hp), b1=hp.beta1, b2=hp.beta2, eps=hp.eps)),
  }


def modern_optax(optimizer_def):
  """The optax transformation a linen port uses in place of ``optimizer_def``.

  Its state carries the same quantities as the legacy per-parameter state
  (the ``MODERN`` mapping in docs/migration.md); its arithmetic is optax's,
  which is not bit-identical to legacy for every optimizer (epsilon
  placement, bias correction): ``optimizer_def.as_optax()`` is the legacy
  arithmetic.
  """
  name = type(optimizer_def).__name__
  table = _modern_table()
  if name not in table:
    raise ConversionError(
        f'{name} has no modern optax equivalent with the same state; convert '
        'with legacy numerics (--legacy-numerics / legacy_numerics=True), '
        'whose state is that of optimizer_def.as_optax().')
  return table[name](optimizer_def.hyper_params, optimizer_def)


# --- optax state transplant ---------------------------------------------------------


_CONTAINER_STATES = ('MaskedState', 'InjectHyperparamsState',
                     'InjectStatefulHyperparamsState', 'MultiTransformState')


def _is_namedtuple(x):
  return isinstance(x, tuple) and hasattr(x, '_fields')


def _records(state):
  """The optax states that hold data, in order (EmptyState and wrappers out)."""
  out = []

  def walk(node):
    if _is_namedtuple(node):
      if type(node).__name__ in _CONTAINER_STATES:
        for child in node:
          walk(child)
      elif node._fields:
        out.append(node)
    elif isinstance(node, (tuple, list)):
      for child in node:
        walk(child)
  walk(state)
  return out


def transplant_state(source, template):
  """``template`` (an optax state) with its data states taken from ``source``.

  Both are states of optax chains that hold the same data states (TraceState,
  ScaleByAdamState, ...) in the same order, possibly with different
  EmptyState padding or wrappers; e.g. a legacy ``as_optax()`` state and the
  state of the modern transformation.
  """
  src, dst = _records(source), _records(template)
  if [type(s).__name__ for s in src] != [type(d).__name__ for d in dst]:
    raise ConversionError(
        'the optimizer states do not correspond: the legacy optimizer holds '
        f'{[type(s).__name__ for s in src]}, the optax transformation '
        f'{[type(d).__name__ for d in dst]}')
  replacements = iter(src)

  def rebuild(node):
    if _is_namedtuple(node):
      if type(node).__name__ in _CONTAINER_STATES:
        return type(node)(*[rebuild(c) for c in node])
      if node._fields:
        value = next(replacements)
        return type(node)(*value)
      return node
    if isinstance(node, (tuple, list)):
      return type(node)(rebuild(c) for c in node)
    return node
  return rebuild(template)


# --- reading the legacy checkpoint ---------------------------------------------------


def _find_optimizer(tree, path=()):
  """Paths of every ``{'target', 'state'}`` dict in a raw state dict."""
  if not isinstance(tree, dict):
    return []
  if set(tree) == {'target', 'state'}:
    return [path]
  found = []
  for key, value in tree.items():
    found += _find_optimizer(value, path + (key,))
  return found


def _get(tree, path):
  for key in path:
    tree = tree[key]
  return tree


def _is_collection(tree):
  return (isinstance(tree, dict) and tree and
          all(isinstance(k, str) and k.startswith('/') for k in tree))


def _leaf_fields(target, param_states):
  """The set of per-parameter state field tuples, one per parameter leaf.

  The per-parameter state of a leaf is the entry at the leaf's path in
  ``param_states``: a dict of its fields (``{}`` for GradientDescent).
  """
  from flax import traverse_util  # pylint: disable=g-import-not-at-top
  kinds = set()
  for path in traverse_util.flatten_dict(target):
    try:
      leaf_state = _get(param_states, path)
    except (KeyError, TypeError):
      raise ConversionError(
          'the optimizer state does not mirror the parameters: no state '
          f'for parameter {"/".join(path)}') from None
    if not isinstance(leaf_state, dict):
      raise ConversionError(
          f'the optimizer state of parameter {"/".join(path)} is a '
          f'{type(leaf_state).__name__}, not a per-parameter state dict '
          '(MultiOptimizer and WeightNorm checkpoints are not converted)')
    kinds.add(tuple(sorted(leaf_state)))
  return kinds


def _optimizer_def(name, hparams, fields):
  from flaxlegacy import optim  # pylint: disable=g-import-not-at-top
  candidates = set()
  for kind in fields:
    candidates |= set(OPTIMIZERS_BY_FIELDS.get(kind, ()))
  if name is None:
    if len(candidates) != 1 or len(fields) != 1:
      shown = ', '.join(sorted(candidates)) or 'none known'
      raise ConversionError(
          'cannot tell which legacy optimizer wrote this checkpoint: its '
          f'per-parameter states have fields {sorted(fields)} (candidates: '
          f'{shown}); pass --optimizer NAME (and --hparam NAME=VALUE for '
          'hyper-parameters that shape the state, e.g. weight_decay)')
    name = candidates.pop()
  cls = getattr(optim, name, None)
  if cls is None or not isinstance(cls, type):
    raise ConversionError(f'--optimizer {name}: flax.optim has no optimizer '
                          'of that name')
  try:
    return cls(**hparams)
  except TypeError as e:
    raise ConversionError(f'--optimizer {name} with --hparam {hparams}: {e}'
                          ) from None


def legacy_to_train_state(state_dict, optimizer=None, hparams=None,
                          linen_names=True, legacy_numerics=False,
                          optimizer_path=None, rename_map=None,
                          root_class=None):
  """A raw legacy state dict -> (TrainState, notes).

  Args:
    state_dict: the legacy checkpoint as ``msgpack_restore`` returns it.
    optimizer: the legacy optimizer class name (None: from the state).
    hparams: constructor keywords of that optimizer.
    linen_names: rename legacy auto-named modules to linen's numbering.
    legacy_numerics: write the state of ``optimizer_def.as_optax()`` instead
      of the modern optax equivalent's.
    optimizer_path: tuple of keys of the Optimizer in the state dict (None:
      the only ``{'target', 'state'}`` dict).
    rename_map, root_class: rename params, optimizer state and batch_stats
      with the map of ``flaxlegacy upgrade --names linen`` (its
      ``upgrade.json``) from the class ``root_class`` down, instead of
      ``linen_names``' renumbering (``names.rename_params``).

  Returns:
    ``(state, optimizer_def, tx, notes)``: a TrainState (the batch_stats
    subclass when the checkpoint holds module state), the legacy definition,
    the transformation whose state it holds, and lines about what was done.
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import serialization  # pylint: disable=g-import-not-at-top
  from flaxlegacy.migrate import names  # pylint: disable=g-import-not-at-top
  from flaxlegacy.migrate import train_state  # pylint: disable=g-import-not-at-top
  from flaxlegacy.optim import base as optim_base  # pylint: disable=g-import-not-at-top

  notes = []
  rename = None
  if rename_map is not None:
    if root_class is None:
      raise ConversionError('a rename map needs the class of the checkpoint '
                            "'s model (--root-class)")
    rename_map = names.load_rename_map(rename_map)

    def rename(tree):
      return names.rename_params(tree, rename_map, root_class)

    rename({})  # an unknown root class fails here, before any work
    linen_names = False
  if not isinstance(state_dict, dict):
    raise ConversionError(f'the checkpoint holds a {type(state_dict).__name__}'
                          ', not a state dict with an Optimizer')
  if optimizer_path is None:
    found = _find_optimizer(state_dict)
    if not found:
      raise ConversionError(
          'no legacy Optimizer (a {target, state} entry) in the checkpoint; '
          f'its top-level keys are {sorted(state_dict)}')
    if len(found) > 1:
      raise ConversionError(
          'several Optimizers in the checkpoint, at '
          f'{["/".join(p) or "<top>" for p in found]}; choose one with '
          '--optimizer-path')
    optimizer_path = found[0]
  raw = _get(state_dict, optimizer_path)
  notes.append('optimizer at ' + ('/'.join(optimizer_path) or '<top level>'))
  target, raw_state = raw['target'], raw['state']
  param_states = raw_state['param_states']
  if isinstance(target, dict) and set(target) == {'params'}:
    # An nn.Model target (or linen variables): the params dict inside.
    target = target['params']
    param_states = param_states['params']
    notes.append('target: nn.Model params')
  fields = _leaf_fields(target, param_states)
  opt_def = _optimizer_def(optimizer, dict(hparams or {}), fields)
  if rename is not None:
    target, param_states = rename(target), rename(param_states)
  notes.append(f'optimizer: {type(opt_def).__name__} '
               f'(per-parameter fields {sorted(fields)})')

  params = _to_arrays(target, jnp)
  template = opt_def.init_state(params)
  try:
    legacy_state = serialization.from_state_dict(
        template, {'step': raw_state['step'], 'param_states': param_states})
  except (ValueError, KeyError, TypeError) as e:
    raise ConversionError(
        f'the optimizer state does not fit {type(opt_def).__name__}: {e}'
    ) from None
  legacy = optim_base.Optimizer(opt_def, legacy_state, params)

  # A container's own step (legacy TrainState.step) wins over the
  # optimizer's.
  step = raw_state['step']
  used = {optimizer_path[0]} if optimizer_path else {'target', 'state'}
  if optimizer_path and 'step' in state_dict:
    step = state_dict['step']
    used.add('step')
  stats = None
  for key, value in state_dict.items():
    if key not in used and _is_collection(value):
      if stats is not None:
        raise ConversionError('several nn.Collection entries; only one '
                              'becomes batch_stats')
      stats = value
      used.add(key)
      notes.append(f'{key}: nn.Collection -> batch_stats')
  dropped = sorted(k for k in state_dict if k not in used)
  if dropped and optimizer_path:
    notes.append('not converted (no TrainState field): ' + ', '.join(dropped))

  overrides = {}
  if getattr(opt_def.hyper_params, 'learning_rate', 0) is None:
    # Legacy code often passed it per call; it does not shape the state.
    overrides['learning_rate'] = 1.0
    notes.append('learning_rate: not given, 1.0 used to build tx (the '
                 'state does not depend on it)')
  state = train_state.to_train_state(legacy, linen_names=linen_names,
                                     batch_stats=stats, **overrides)
  tx = state.tx
  if not legacy_numerics:
    tx = modern_optax(opt_def)
    opt_state = transplant_state(state.opt_state, tx.init(state.params))
    state = state.replace(tx=tx, opt_state=opt_state)
    notes.append(f'opt_state: for the modern optax equivalent '
                 f'({_describe(opt_def)})')
  else:
    notes.append(f'opt_state: for {type(opt_def).__name__}(...).as_optax() '
                 '(legacy numerics; needs flaxlegacy to rebuild tx)')
  state = state.replace(step=_as_int(step), apply_fn=None)
  if rename is not None and stats is not None:
    state = state.replace(batch_stats=rename(state.batch_stats))
  if linen_names:
    notes.append('module names: legacy auto-naming -> linen numbering')
  if rename is not None:
    notes.append(f'module names: the rename map of {root_class} (flaxlegacy '
                 'upgrade --names linen)')
  return state, opt_def, tx, notes


def _describe(opt_def):
  return {
      'GradientDescent': 'optax.sgd(lr)',
      'Momentum': 'optax.sgd(lr, momentum=beta, nesterov=nesterov)',
      'Adam': 'optax.adam / optax.adamw',
      'Adagrad': 'optax.adagrad(lr, initial_accumulator_value=0, eps=eps)',
      'RMSProp': 'optax.rmsprop(lr, decay=beta2, eps=eps, centered=...)',
      'LAMB': 'optax.lamb', 'LARS': 'optax.lars',
      'Adafactor': 'optax.adafactor', 'Adadelta': 'optax.adadelta',
      'AdaBelief': 'optax.adabelief',
  }.get(type(opt_def).__name__, type(opt_def).__name__)


def _to_arrays(tree, jnp):
  import jax  # pylint: disable=g-import-not-at-top
  return jax.tree_util.tree_map(jnp.asarray, tree)


def _as_int(step):
  import numpy as np  # pylint: disable=g-import-not-at-top
  value = np.asarray(step)
  return int(value) if value.dtype.kind in 'iu' else float(value)


# --- files ---------------------------------------------------------------------------


def convert_checkpoint(ckpt, out, optimizer=None, hparams=None,
                       linen_names=True, legacy_numerics=False,
                       fmt='orbax', prefix='checkpoint_',
                       optimizer_path=None, overwrite=False,
                       rename_map=None, root_class=None):
  """Converts the legacy checkpoint ``ckpt`` into ``out``.

  Args:
    ckpt: a legacy checkpoint file, or a directory (its latest checkpoint
      with ``prefix``).
    out: the output directory; the converted checkpoint is
      ``<out>/<prefix><step>`` (an Orbax directory, or a msgpack file with
      ``fmt='msgpack'``), so ``flax.training.checkpoints.restore_checkpoint(
      out, target)`` finds it.
    optimizer, hparams, linen_names, legacy_numerics, optimizer_path,
      rename_map, root_class: see ``legacy_to_train_state``.
    fmt: 'orbax' (today's default) or 'msgpack'.
    prefix: checkpoint name prefix, for reading and writing.
    overwrite: replace an existing converted checkpoint.

  Returns:
    ``(path, state, notes)``.
  """
  if rename_map is not None and root_class is not None:
    # A wrong map or class fails now, before reading the checkpoint (which
    # imports TensorFlow: seconds).
    from flaxlegacy.migrate import names  # pylint: disable=g-import-not-at-top
    names.rename_params({}, rename_map, root_class)
  from flaxlegacy.training import checkpoints  # pylint: disable=g-import-not-at-top

  source = ckpt
  if os.path.isdir(ckpt):
    source = checkpoints.latest_checkpoint(ckpt, prefix)
    if source is None:
      raise ConversionError(f'no checkpoint with prefix {prefix!r} in {ckpt}')
  raw = checkpoints.restore_checkpoint(source, None)
  state, _, _, notes = legacy_to_train_state(
      raw, optimizer=optimizer, hparams=hparams, linen_names=linen_names,
      legacy_numerics=legacy_numerics, optimizer_path=optimizer_path,
      rename_map=rename_map, root_class=root_class)
  path = os.path.join(out, f'{prefix}{state.step}')
  if os.path.exists(path):
    if not overwrite:
      raise ConversionError(f'{path} exists; pass --overwrite to replace it')
    _remove(path)
  os.makedirs(out, exist_ok=True)
  if fmt == 'msgpack':
    checkpoints.save_checkpoint(out, state, state.step, prefix=prefix,
                                overwrite=True, keep=10**9)
  elif fmt == 'orbax':
    import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
    ocp.PyTreeCheckpointer().save(os.path.abspath(path), state)
  else:
    raise ConversionError(f'unknown format {fmt!r}: orbax or msgpack')
  notes.insert(0, f'{source} -> {path} ({fmt})')
  return path, state, notes


def _remove(path):
  import shutil  # pylint: disable=g-import-not-at-top
  if os.path.isdir(path):
    shutil.rmtree(path)
  else:
    os.remove(path)


# --- command line ----------------------------------------------------------------------


def _parse_hparam(text):
  name, sep, value = text.partition('=')
  if not sep or not name.isidentifier():
    raise ConversionError(f'--hparam {text!r}: expected NAME=VALUE')
  try:
    return name, ast.literal_eval(value)
  except (ValueError, SyntaxError):
    return name, value


def add_arguments(parser):
  parser.add_argument('ckpt', help='legacy checkpoint file, or a directory '
                      '(its latest checkpoint)')
  parser.add_argument('out', help='output directory')
  parser.add_argument('--optimizer', metavar='NAME',
                      help='legacy optimizer class (Momentum, Adam, ...); '
                      'needed where the state fields do not tell')
  parser.add_argument('--hparam', action='append', default=[],
                      metavar='NAME=VALUE',
                      help='hyper-parameter of that optimizer (repeatable), '
                      'e.g. --hparam beta=0.9 --hparam weight_decay=1e-4')
  parser.add_argument('--format', choices=('orbax', 'msgpack'),
                      default='orbax', help='output format (default: orbax)')
  parser.add_argument('--names', choices=('linen', 'legacy'), default=None,
                      help='module names: linen per-class numbering '
                      '(default) or the legacy names unchanged')
  parser.add_argument('--rename-map', metavar='UPGRADE_JSON',
                      help='rename module names with the map of flaxlegacy '
                      'upgrade --names linen (DST/upgrade.json or DST), for '
                      'the upgraded module; needs --root-class')
  parser.add_argument('--root-class', metavar='CLASS',
                      help="the checkpoint's model class in the rename map "
                      '(Net, or models.py:Net)')
  parser.add_argument('--legacy-numerics', action='store_true',
                      help='write the optimizer state of '
                      'optimizer_def.as_optax() instead of the modern optax '
                      'equivalent')
  parser.add_argument('--prefix', default='checkpoint_',
                      help='checkpoint name prefix (default: checkpoint_)')
  parser.add_argument('--optimizer-path', metavar='KEY/KEY',
                      help='where the Optimizer is in the checkpoint, e.g. '
                      'optimizer (default: found automatically)')
  parser.add_argument('--overwrite', action='store_true',
                      help='replace an existing converted checkpoint')


def run(args):
  try:
    if args.rename_map is not None and args.names is not None:
      raise ConversionError('--rename-map and --names: choose one (the map '
                            'gives the names)')
    if (args.rename_map is None) != (args.root_class is None):
      raise ConversionError('--rename-map and --root-class go together')
    hparams = dict(_parse_hparam(h) for h in args.hparam)
    path = (tuple(p for p in args.optimizer_path.split('/') if p)
            if args.optimizer_path is not None else None)
    _, state, notes = convert_checkpoint(
        args.ckpt, args.out, optimizer=args.optimizer, hparams=hparams,
        linen_names=args.names != 'legacy',
        legacy_numerics=args.legacy_numerics, fmt=args.format,
        prefix=args.prefix, optimizer_path=path, overwrite=args.overwrite,
        rename_map=args.rename_map, root_class=args.root_class)
  except (ConversionError, ValueError, OSError) as e:
    print(f'flaxlegacy convert: error: {e}', file=sys.stderr)
    return 1
  for line in notes:
    print(line)
  print(f'step {state.step}; params: {", ".join(sorted(state.params))}')
  logging.info('converted %s', args.ckpt)
  return 0
